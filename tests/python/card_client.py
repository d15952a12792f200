#!/usr/bin/env python3
"""One MCP session through the official Python SDK, for tests/blackbox/card.rs: the approval card
(MCP Apps, docs/contract.md#the-review-page-and-in-client-approval) as a client the project did
not write sees it. Prints ONE JSON object on stdout:

    {"protocolVersion": ..., "serverExtensions": {...},
     "tools": [{"name", "meta"}...], "resources": [{"uri", "mimeType"}...],
     "card": {"mimeType", "text", "meta"} | null,
     "calls": [{"tool", "isError", "structured", "content", "meta", "exception"}...]}

    card_client.py --exe target/debug/vaultgate --home H --token T [--ui] \\
        --call propose_new_note '{"path": "a.md", "content": "x", "reason": "r"}' \\
        --call approve_proposal_in_app '{"id": "{{id:0}}", "approval": "{{approval:0}}", "idempotencyKey": "k"}'
    card_client.py --url http://127.0.0.1:8765/mcp --token T --ui --call ...

`--ui` declares the `io.modelcontextprotocol/ui` extension (mimeTypes text/html;profile=mcp-app)
in `initialize`. In a call's arguments, `{{approval:N}}` is the `_meta["vaultgate/approval"]` of
call N's result (empty when it had none), `{{id:N}}` the id of call N's answer (its
structuredContent `id`), `{{hash:N}}` its `proposalHash`. A `"_meta"` member of a call's JSON is
sent as the request's `_meta` (the card asks for its view with `{"vaultgate/card": true}`). `--sleep S` before a call: `--call
_sleep '{"seconds": S}'`. Exit 0 whenever the session ran; 2 on a harness failure. Needs
`mcp==2.3.0`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import traceback
from contextlib import AsyncExitStack
from typing import Any

import anyio
from mcp import Client, types
from mcp.client import advertise
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

UI = "io.modelcontextprotocol/ui"
MIME = "text/html;profile=mcp-app"
PLACEHOLDER = re.compile(r"\{\{(approval|id|hash):(\d+)\}\}")


def dump(model: Any) -> Any:
    return None if model is None else model.model_dump(mode="json", by_alias=True, exclude_none=True)


def fill(raw: str, calls: list[dict[str, Any]]) -> Any:
    def one(m: re.Match[str]) -> str:
        what, n = m.group(1), int(m.group(2))
        c = calls[n]
        if what == "approval":
            v = (c.get("meta") or {}).get("vaultgate/approval") or ""
        elif what == "id":
            v = (c.get("structured") or {}).get("id") or ""
        else:
            v = (c.get("structured") or {}).get("proposalHash") or ""
        return json.dumps(v)[1:-1]

    return json.loads(PLACEHOLDER.sub(one, raw))


async def run(ns: argparse.Namespace) -> dict[str, Any]:
    calls: list[dict[str, Any]] = []
    out: dict[str, Any] = {}
    async with AsyncExitStack() as stack:
        if ns.url:
            http = await stack.enter_async_context(
                create_mcp_http_client(headers={"Authorization": f"Bearer {ns.token}"}))
            server: Any = streamable_http_client(ns.url, http_client=http)
        else:
            server = StdioServerParameters(command=ns.exe, args=["stdio", "--home", ns.home],
                                           env={"VAULTGATE_TOKEN": ns.token})
        extensions = [advertise(UI, {"mimeTypes": [MIME]})] if ns.ui else None
        client = await stack.enter_async_context(
            Client(server, mode="legacy", cache=None, extensions=extensions))
        caps = client.server_capabilities
        out["serverExtensions"] = (dump(caps) or {}).get("extensions") if caps else None
        tools = await client.list_tools()
        out["tools"] = [{"name": t.name, "meta": t.meta} for t in tools.tools]
        resources = await client.list_resources()
        out["resources"] = [{"uri": str(r.uri), "mimeType": r.mime_type} for r in resources.resources]
        card = None
        if any(str(r.uri) == "ui://vaultgate/proposal" for r in resources.resources):
            read = await client.read_resource("ui://vaultgate/proposal")
            c = read.contents[0]
            card = {"mimeType": c.mime_type, "text": getattr(c, "text", None), "meta": c.meta}
        out["card"] = card
        for tool, raw in ns.call:
            if tool == "_sleep":
                await anyio.sleep(float(json.loads(raw)["seconds"]))
                calls.append({"tool": tool})
                continue
            args = fill(raw, calls)
            # `"_meta"` in a call's JSON is the request's `_meta`, not an argument.
            meta = args.pop("_meta", None) if isinstance(args, dict) else None
            try:
                r: types.CallToolResult = await client.call_tool(tool, args, meta=meta)
                calls.append({
                    "tool": tool,
                    "isError": bool(r.is_error),
                    "structured": r.structured_content,
                    "content": [dump(c) for c in r.content],
                    "meta": r.meta,
                    "exception": None,
                })
            except Exception as e:  # noqa: BLE001 - a JSON-RPC or SDK error is data for the test
                calls.append({"tool": tool, "isError": None, "structured": None, "content": [],
                              "meta": None, "exception": str(e)})
        out["protocolVersion"] = client.protocol_version
    out["calls"] = calls
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--exe", help="vaultgate binary (stdio)")
    p.add_argument("--home", help="vaultgate home (stdio)")
    p.add_argument("--url", help="Streamable HTTP endpoint")
    p.add_argument("--token", required=True)
    p.add_argument("--ui", action="store_true", help="declare the MCP Apps extension")
    p.add_argument("--call", nargs=2, action="append", default=[], metavar=("TOOL", "JSON"))
    ns = p.parse_args()
    if not ns.url and not (ns.exe and ns.home):
        print("give --url, or --exe and --home", file=sys.stderr)
        return 2
    try:
        out = anyio.run(run, ns)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        return 2
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
