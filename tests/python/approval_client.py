#!/usr/bin/env python3
"""One MCP session through the official Python SDK, for tests/blackbox/approval.rs (docs/contract.md#the-review-page-and-in-client-approval).

The in-client approval of `apply_proposal` is a server-to-client `elicitation/create` request, so
it is driven here by a client the project did not write. One invocation opens one session, makes
the `--call`s in order and prints ONE JSON object on stdout:

    {"protocolVersion": "2025-11-25" | "2026-07-28" | ...,
     "calls":   [{"tool", "isError", "structured", "error", "exception", "seconds"}, ...],
     "prompts": [{"message", "requestedSchema", "mode"}, ...]}

`error` is the parsed error envelope `{ok, code, message, retryable}` of an `isError` result (else
null); `exception` is the text of a JSON-RPC or SDK error raised by the call (else null);
`prompts` lists every elicitation request the callback received, in order.

    # stdio: the SDK launches `vaultgate stdio --home H` with VAULTGATE_TOKEN=T
    approval_client.py --exe target/debug/vaultgate --home H --token T --answer accept \\
        --call apply_proposal '{"id": "...", "proposalHash": "...", "idempotencyKey": "k1"}'
    # Streamable HTTP (Authorization: Bearer T); --mode auto negotiates 2026-07-28 via server/discover
    approval_client.py --url http://127.0.0.1:8765/mcp --token T --mode auto --answer decline,accept \\
        --call apply_proposal '{...}' --call apply_proposal '{...}'

`--answer` is a comma-separated list: the n-th elicitation gets the n-th answer, the last one
repeating. `accept` = accept {"approve": true}; `decline`; `cancel`; `false` = accept
{"approve": false}; `missing` = accept {}; `sleep:S` = wait S seconds, then accept {"approve":
true}. `none` installs no elicitation callback, so the client declares no elicitation capability.
`--call _settle '{}'` is no tool: it waits until every `sleep:S` answer has been sent, so a late
answer reaches the server before the next call.
`--call _rounds '{"args": {...}, "steps": [...]}'` drives a 2026-07-28 input-required round by hand
(see `rounds`), to replay or forge the state it carries.
`--mode legacy` (default) uses the `initialize` handshake (2025 protocols: the request rides the
session, or the POST's SSE stream over HTTP); `--mode auto` is the SDK's default negotiation, where
a 2026-07-28 server answers with an input-required result that the SDK fulfils through the same
callback and re-sends. With `APPROVAL_PROMPTED_FILE` set, each prompt appends a line to that file.
Exit 0 whenever the session ran; 2 on a harness failure. Needs `mcp==2.3.0`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from contextlib import AsyncExitStack
from typing import Any

import anyio
from mcp import Client, types
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

ANSWERS = ("accept", "decline", "cancel", "false", "missing")


def parse_answers(spec: str) -> list[str] | None:
    """The answers in order, or None for `none`; raises ValueError on a bad item."""
    if spec == "none":
        return None
    answers = spec.split(",")
    for a in answers:
        if a not in ANSWERS and not (a.startswith("sleep:") and a[6:].replace(".", "", 1).isdigit()):
            raise ValueError(f"bad --answer item {a!r}")
    return answers


def make_callback(answers: list[str], prompts: list[dict[str, Any]], busy: list[int]):
    async def on_elicit(_ctx: Any, params: Any) -> types.ElicitResult:
        prompts.append({
            "message": getattr(params, "message", None),
            "requestedSchema": getattr(params, "requested_schema", None),
            "mode": getattr(params, "mode", None),
        })
        marker = os.environ.get("APPROVAL_PROMPTED_FILE")
        if marker:  # lets a test act while the person is deciding
            with open(marker, "a", encoding="utf-8") as f:
                f.write("prompted\n")
        answer = answers[min(len(prompts), len(answers)) - 1]
        if answer.startswith("sleep:"):
            busy[0] += 1
            try:
                await anyio.sleep(float(answer[6:]))
            finally:
                busy[0] -= 1
            answer = "accept"
        if answer == "accept":
            return types.ElicitResult(action="accept", content={"approve": True})
        if answer == "false":
            return types.ElicitResult(action="accept", content={"approve": False})
        if answer == "missing":
            return types.ElicitResult(action="accept", content={})
        return types.ElicitResult(action=answer)

    return on_elicit


def record(tool: str, result: types.CallToolResult | None, exc: BaseException | None, seconds: float) -> dict:
    out: dict[str, Any] = {"tool": tool, "isError": None, "structured": None, "error": None,
                           "exception": None, "seconds": round(seconds, 3)}
    if exc is not None:
        out["exception"] = f"{type(exc).__name__}: {exc}"
        return out
    if result is None:  # `_settle`
        return out
    out["isError"] = bool(result.is_error)
    out["structured"] = result.structured_content
    if result.is_error:
        texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
        try:
            out["error"] = json.loads(texts[0]) if len(texts) == 1 else {"unparsed": texts}
        except ValueError:
            out["error"] = {"unparsed": texts}
    return out


def forged(state: str) -> str:
    """The state with the last hex digit of its tag changed."""
    return state[:-1] + ("0" if state[-1] != "0" else "1")


async def rounds(client: Any, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """2026-07-28 by hand: the first `apply_proposal` round (its input-required result is recorded
    as `{"tool": "_rounds", "inputRequired": true, "keys": [...]}`), then one retry per step of
    `spec["steps"]`, each `{"state": "same"|"forged", "answer": "accept"|"decline",
    "args": {...} (default: the first round's), "write": [path, text] (a file written first)}`."""
    out: list[dict[str, Any]] = []
    first = await client.session.call_tool("apply_proposal", spec["args"], allow_input_required=True)
    if not isinstance(first, types.InputRequiredResult):
        return [{"tool": "_rounds", "inputRequired": False, "first": first.model_dump(mode="json")}]
    out.append({"tool": "_rounds", "inputRequired": True, "keys": sorted((first.input_requests or {}).keys())})
    for step in spec["steps"]:
        if "write" in step:
            path, text = step["write"]
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        state = first.request_state if step.get("state", "same") == "same" else forged(first.request_state)
        if step["answer"] == "accept":
            answer = types.ElicitResult(action="accept", content={"approve": True})
        else:
            answer = types.ElicitResult(action="decline")
        started = time.monotonic()
        try:
            result, exc = await client.session.call_tool(
                "apply_proposal", step.get("args", spec["args"]), input_responses={"approval": answer},
                request_state=state, allow_input_required=True), None
        except Exception as e:  # noqa: BLE001
            result, exc = None, e
        if isinstance(result, types.InputRequiredResult):
            out.append({"tool": "apply_proposal", "inputRequired": True})
        else:
            out.append(record("apply_proposal", result, exc, time.monotonic() - started))
    return out


async def run(ns: argparse.Namespace) -> dict[str, Any]:
    prompts: list[dict[str, Any]] = []
    busy = [0]  # callbacks still sleeping on a `sleep:S` answer
    callback = make_callback(ns.answers, prompts, busy) if ns.answers is not None else None
    calls: list[dict[str, Any]] = []
    async with AsyncExitStack() as stack:
        if ns.url:
            http = await stack.enter_async_context(
                create_mcp_http_client(headers={"Authorization": f"Bearer {ns.token}"}))
            server: Any = streamable_http_client(ns.url, http_client=http)
        else:
            server = StdioServerParameters(command=ns.exe, args=["stdio", "--home", ns.home],
                                           env={"VAULTGATE_TOKEN": ns.token})
        client = await stack.enter_async_context(
            Client(server, mode=ns.mode, elicitation_callback=callback, cache=None))
        for tool, raw in ns.call:
            args = json.loads(raw)
            started = time.monotonic()
            if tool == "_settle":
                with anyio.move_on_after(60):
                    while busy[0]:
                        await anyio.sleep(0.05)
                await anyio.sleep(0.3)  # the SDK writes the callback's answer just after it returns
                calls.append(record(tool, None, None, time.monotonic() - started))
                continue
            if tool == "_rounds":
                calls.extend(await rounds(client, args))
                continue
            try:
                result, exc = await client.call_tool(tool, args), None
            except Exception as e:  # noqa: BLE001 - a JSON-RPC or SDK error is data for the test
                result, exc = None, e
            calls.append(record(tool, result, exc, time.monotonic() - started))
        version = client.protocol_version
    return {"protocolVersion": version, "calls": calls, "prompts": prompts}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--exe", help="vaultgate binary (stdio)")
    p.add_argument("--home", help="vaultgate home (stdio)")
    p.add_argument("--url", help="Streamable HTTP endpoint, e.g. http://127.0.0.1:8765/mcp")
    p.add_argument("--token", required=True)
    p.add_argument("--mode", choices=["legacy", "auto"], default="legacy")
    p.add_argument("--answer", default="none")
    p.add_argument("--call", nargs=2, action="append", default=[], metavar=("TOOL", "JSON_ARGS"))
    ns = p.parse_args()
    if bool(ns.url) == bool(ns.exe) or (ns.exe and not ns.home):
        p.error("give either --exe and --home (stdio) or --url (HTTP)")
    try:
        ns.answers = parse_answers(ns.answer)
    except ValueError as e:
        p.error(str(e))
    try:
        out = anyio.run(run, ns)
    except BaseException:  # noqa: BLE001 - the harness itself failed: say how, exit 2
        traceback.print_exc()
        return 2
    json.dump(out, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
