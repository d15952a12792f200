#!/usr/bin/env python3
"""Drive vaultgate with the official MCP Python SDK (a client the project did not write).

The SDK checks every successful tool result's `structuredContent` against the tool's
`outputSchema` (and raises if it does not conform); this script calls every tool the server
lists against the demo vault (`vaultgate demo`), checks the error envelope of a refused call,
lists and reads resources, and exits non-zero on any SDK error or mismatch.

    # stdio: the SDK launches the server itself
    python3 scripts/python_sdk_check.py --exe target/release/vaultgate --home /tmp/vg/home --token "$T"
    # Streamable HTTP against a running `vaultgate demo` / `vaultgate serve`
    python3 scripts/python_sdk_check.py --url http://127.0.0.1:8765/mcp --token "$T"

`--mode legacy` (default) uses the `initialize` handshake through `ClientSession`; `--mode auto` uses the
SDK's default high-level negotiation (`server/discover` first, then falling back to `initialize`).
Needs the `mcp` package (tested with 2.3.0).
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from contextlib import AsyncExitStack
from typing import Any

import anyio

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

try:  # 2.x
    from mcp.client.streamable_http import streamable_http_client as _http_client
except ImportError:  # 1.x
    from mcp.client.streamable_http import streamablehttp_client as _http_client  # type: ignore

VAULT = "demo"
NOTE = "z/attention.md"

# (label, tool, arguments, check(structured) -> problem or None)
def _nonempty(key: str):
    def check(sc: dict[str, Any]) -> str | None:
        if not sc.get(key):
            return f"expected a non-empty `{key}`"
        return None

    return check


def _has_path(key: str, path: str):
    def check(sc: dict[str, Any]) -> str | None:
        paths = [h.get("path") for h in sc.get(key) or []]
        if path not in paths:
            return f"expected {path} in `{key}` paths, got {paths[:8]}"
        return None

    return check


def _read_note_check(sc: dict[str, Any]) -> str | None:
    if sc.get("path") != NOTE:
        return f"path is {sc.get('path')!r}"
    if "attention" not in (sc.get("content") or "").lower():
        return "content does not mention attention"
    return None


def _cjk_line_check(sc: dict[str, Any]) -> str | None:
    hits = sc.get("hits") or []
    if not hits:
        return "no hits for 注意力"
    for h in hits:
        if not isinstance(h.get("line"), int) or h["line"] < 1:
            return f"bad line number in {h}"
        if "注意力" not in h.get("snippet", ""):
            return f"snippet lacks the term: {h.get('snippet')!r}"
    return None


CALLS: list[tuple[str, str, dict[str, Any], Any]] = [
    ("vault_list", "vault_list", {}, _nonempty("vaults")),
    ("get_vault_overview", "get_vault_overview", {"vault": VAULT}, None),
    ("get_vault_overview (no vault)", "get_vault_overview", {}, None),
    ("search_knowledge attention", "search_knowledge", {"query": "attention"}, _nonempty("hits")),
    ("search_knowledge 注意力", "search_knowledge", {"query": "注意力"}, None),
    ("search_note_content attention", "search_note_content", {"query": "attention", "limit": 10}, _nonempty("hits")),
    ("search_note_content 注意力", "search_note_content", {"query": "注意力"}, _cjk_line_check),
    ("search_note_content pathPrefix=z", "search_note_content", {"query": "attention", "pathPrefix": "z"}, _nonempty("hits")),
    ("read_note", "read_note", {"path": NOTE, "vault": VAULT}, _read_note_check),
    ("read_note CJK path", "read_note", {"path": "学习方法.md"}, None),
    ("list_notes root", "list_notes", {}, _nonempty("entries")),
    ("list_notes z", "list_notes", {"dir": "z"}, _has_path("entries", NOTE)),
    ("list_standards", "list_standards", {}, _nonempty("standards")),
    ("list_tags", "list_tags", {}, _nonempty("tags")),
    ("get_related_notes", "get_related_notes", {"path": NOTE}, None),
    ("list_recent_notes", "list_recent_notes", {"limit": 5}, _nonempty("notes")),
    ("list_recent_notes since", "list_recent_notes", {"since": "2000-01-01T00:00:00Z"}, _nonempty("notes")),
]

FAILING_CALLS: list[tuple[str, str, dict[str, Any], str | None]] = [
    ("read_note ../x", "read_note", {"path": "../x"}, "PATH_INVALID"),
    ("read_note missing", "read_note", {"path": "no/such-note.md"}, None),
    ("list_notes ../", "list_notes", {"dir": "../"}, "PATH_INVALID"),
]


class Report:
    def __init__(self, label: str) -> None:
        self.label = label
        self.rows: list[tuple[str, bool, str]] = []

    def ok(self, name: str, detail: str = "") -> None:
        self.rows.append((name, True, detail))

    def fail(self, name: str, detail: str) -> None:
        self.rows.append((name, False, detail))

    @property
    def failures(self) -> int:
        return sum(1 for _, good, _ in self.rows if not good)

    def print(self) -> None:
        print(f"== {self.label}: {len(self.rows) - self.failures} passed, {self.failures} failed")
        for name, good, detail in self.rows:
            print(f"  {'PASS' if good else 'FAIL'} {name}{(': ' + detail) if detail else ''}")


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".replace("\n", " | ")[:1500]


def _text_blocks(result: Any) -> list[str]:
    return [c.text for c in result.content if getattr(c, "type", None) == "text"]


async def _check_success(session: ClientSession, rep: Report, label: str, tool: str, args: dict, check) -> None:
    try:
        result = await session.call_tool(tool, args)  # the SDK validates structuredContent here
    except BaseException as e:  # noqa: BLE001 - any SDK exception is a failure to report
        rep.fail(label, _err(e))
        return
    if result.is_error:
        rep.fail(label, f"isError: {_text_blocks(result)}")
        return
    sc = result.structured_content
    if not isinstance(sc, dict):
        rep.fail(label, f"no structuredContent object (got {type(sc).__name__})")
        return
    texts = _text_blocks(result)
    if len(result.content) != 1 or len(texts) != 1:
        rep.fail(label, f"expected exactly one text block, got {[c.type for c in result.content]}")
        return
    try:
        mirrored = json.loads(texts[0])
    except ValueError as e:
        rep.fail(label, f"text block is not JSON: {e}")
        return
    if mirrored != sc:
        rep.fail(label, "text block JSON differs from structuredContent")
        return
    if check is not None and (problem := check(sc)) is not None:
        rep.fail(label, problem)
        return
    summary = ", ".join(
        f"{k}={len(v)}" if isinstance(v, list) else k for k, v in list(sc.items())[:4]
    )
    rep.ok(label, summary)


async def _check_error(session: ClientSession, rep: Report, label: str, tool: str, args: dict, code: str | None) -> None:
    try:
        result = await session.call_tool(tool, args)
    except BaseException as e:  # noqa: BLE001
        rep.fail(label, f"expected an isError result, SDK raised {_err(e)}")
        return
    problems = []
    if not result.is_error:
        problems.append("isError is not true")
    if result.structured_content is not None or "structured_content" in result.model_fields_set:
        problems.append(f"carries structuredContent {result.structured_content!r}")
    texts = _text_blocks(result)
    if len(result.content) != 1 or len(texts) != 1:
        problems.append(f"expected one text block, got {[c.type for c in result.content]}")
    body: Any = None
    if texts:
        try:
            body = json.loads(texts[0])
        except ValueError:
            problems.append(f"text is not JSON: {texts[0][:200]!r}")
    if body is not None:
        if not isinstance(body, dict):
            problems.append(f"error JSON is not an object: {body!r}")
        else:
            if body.get("ok") is not False:
                problems.append(f"ok is {body.get('ok')!r}")
            if not isinstance(body.get("code"), str) or not body.get("code"):
                problems.append(f"code is {body.get('code')!r}")
            if not isinstance(body.get("message"), str) or not body.get("message"):
                problems.append(f"message is {body.get('message')!r}")
            if not isinstance(body.get("retryable"), bool):
                problems.append(f"retryable is {body.get('retryable')!r}")
            extra = set(body) - {"ok", "code", "message", "retryable"}
            if extra:
                problems.append(f"unexpected keys {sorted(extra)}")
            if code is not None and body.get("code") != code:
                problems.append(f"code {body.get('code')!r} != {code!r}")
    if problems:
        rep.fail(label, "; ".join(problems))
    else:
        rep.ok(label, f"code={body['code']} retryable={body['retryable']}")


async def run_checks(session: ClientSession, rep: Report, mode: str) -> None:
    # handshake
    try:
        if mode == "auto":
            from mcp.client._probe import negotiate_auto

            await negotiate_auto(session)
        else:
            await session.initialize()
        info = session.server_info
        rep.ok(
            f"handshake ({mode})",
            f"protocol {session.protocol_version}, server {getattr(info, 'name', None)} {getattr(info, 'version', None)}",
        )
    except BaseException as e:  # noqa: BLE001
        rep.fail(f"handshake ({mode})", _err(e))
        return

    # tools/list
    try:
        listed = await session.list_tools()
    except BaseException as e:  # noqa: BLE001
        rep.fail("tools/list", _err(e))
        return
    tools = {t.name: t for t in listed.tools}
    missing_schema = [n for n, t in tools.items() if not t.output_schema]
    not_readonly = [n for n, t in tools.items() if not (t.annotations and t.annotations.read_only_hint)]
    detail = f"{len(tools)} tools: {', '.join(sorted(tools))}"
    if missing_schema:
        rep.fail("tools/list", f"tools without outputSchema: {missing_schema}")
    else:
        rep.ok("tools/list", detail)
    if not_readonly:
        rep.fail("readOnlyHint", f"read tools without readOnlyHint: {not_readonly}")

    # every listed tool gets at least one call
    called = {tool for _, tool, _, _ in CALLS}
    for name in sorted(set(tools) - called):
        rep.fail(f"tool {name}", "listed by the server but this script has no call for it")
    for name in sorted(called - set(tools)):
        rep.fail(f"tool {name}", "not listed by the server")
    for label, tool, args, check in CALLS:
        if tool in tools:
            await _check_success(session, rep, label, tool, args, check)
    for label, tool, args, code in FAILING_CALLS:
        await _check_error(session, rep, label, tool, args, code)

    # an unknown tool stays a JSON-RPC error (SPEC §4)
    try:
        r = await session.call_tool("no_such_tool", {})
        rep.fail("unknown tool", f"expected a JSON-RPC error, got result isError={r.is_error}")
    except BaseException as e:  # noqa: BLE001
        rep.ok("unknown tool", f"JSON-RPC error: {_err(e)[:120]}")

    # resources
    try:
        res = await session.list_resources()
        uris = [str(r.uri) for r in res.resources]
        rep.ok("resources/list", f"{len(uris)} resources")
    except BaseException as e:  # noqa: BLE001
        rep.fail("resources/list", _err(e))
        uris = []
    try:
        templates = await session.list_resource_templates()
        rep.ok("resources/templates/list", ", ".join(t.uri_template for t in templates.resource_templates) or "none")
    except BaseException as e:  # noqa: BLE001
        rep.fail("resources/templates/list", _err(e))
    standards = [u for u in uris if u.startswith(f"vaultgate://standards/{VAULT}/")]
    wanted = ["vaultgate://invariants", f"vaultgate://vault/{VAULT}"]
    for u in wanted:
        if u not in uris:
            rep.fail(f"resources/list has {u}", f"listed: {uris}")
    if not standards:
        rep.fail("resources/list has a standards resource", f"listed: {uris}")
    for u in wanted + standards[:1] + [s for s in standards if "文件命名规范" in s][:1]:
        try:
            rr = await session.read_resource(u)
            texts = [c.text for c in rr.contents if hasattr(c, "text")]
            if not texts or not texts[0].strip():
                rep.fail(f"read {u}", "empty contents")
            else:
                mime = getattr(rr.contents[0], "mime_type", None)
                rep.ok(f"read {u}", f"{len(texts[0])} chars, {mime}")
        except BaseException as e:  # noqa: BLE001
            rep.fail(f"read {u}", _err(e))
    try:
        await session.read_resource(f"vaultgate://standards/{VAULT}/../secret.md")
        rep.fail("read traversal resource", "expected an error")
    except BaseException as e:  # noqa: BLE001
        rep.ok("read traversal resource", f"refused: {_err(e)[:120]}")


async def run_stdio(exe: str, home: str, token: str, mode: str) -> Report:
    rep = Report(f"stdio {exe} --home {home} [{mode}]")
    params = StdioServerParameters(command=exe, args=["stdio", "--home", home], env={"VAULTGATE_TOKEN": token})
    try:
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await run_checks(session, rep, mode)
    except BaseException as e:  # noqa: BLE001
        rep.fail("stdio transport", _err(e))
    return rep


async def run_http(url: str, token: str, mode: str) -> Report:
    rep = Report(f"Streamable HTTP {url} [{mode}]")
    try:
        from mcp.shared._httpx_utils import create_mcp_http_client

        client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(client)
            try:
                streams = await stack.enter_async_context(_http_client(url, http_client=client))
            except TypeError:  # 1.x signature
                streams = await stack.enter_async_context(
                    _http_client(url, headers={"Authorization": f"Bearer {token}"})
                )
            read, write = streams[0], streams[1]
            session = await stack.enter_async_context(ClientSession(read, write))
            await run_checks(session, rep, mode)
    except BaseException as e:  # noqa: BLE001
        rep.fail("http transport", _err(e))
    return rep


async def main_async(ns: argparse.Namespace) -> int:
    reports = []
    modes = ["legacy", "auto"] if ns.mode == "both" else [ns.mode]
    for mode in modes:
        if ns.exe:
            reports.append(await run_stdio(ns.exe, ns.home, ns.token, mode))
        if ns.url:
            reports.append(await run_http(ns.url, ns.token, mode))
    failures = 0
    for rep in reports:
        rep.print()
        failures += rep.failures
    print(f"TOTAL: {sum(len(r.rows) for r in reports) - failures} passed, {failures} failed")
    return 1 if failures else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--exe", help="vaultgate binary (stdio transport)")
    p.add_argument("--home", help="vaultgate home for --exe")
    p.add_argument("--url", help="Streamable HTTP endpoint, e.g. http://127.0.0.1:8765/mcp")
    p.add_argument("--token", required=True, help="capability token (VAULTGATE_TOKEN / Bearer)")
    p.add_argument("--mode", choices=["legacy", "auto", "both"], default="legacy",
                   help="legacy: initialize handshake; auto: server/discover then fallback (default legacy)")
    ns = p.parse_args()
    if not ns.exe and not ns.url:
        p.error("give --exe/--home (stdio) and/or --url (HTTP)")
    if ns.exe and not ns.home:
        p.error("--exe needs --home")
    try:
        return anyio.run(main_async, ns)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        return 2


if __name__ == "__main__":
    sys.exit(main())
