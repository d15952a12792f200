#!/usr/bin/env python3
"""Drive vaultgate with the official MCP Python SDK (a client the project did not write).

The SDK checks every successful tool result's `structuredContent` against the tool's
`outputSchema` (and raises if it does not conform); this script calls every tool the server
lists against the demo vault (`vaultgate demo`, a `full` credential): the read tools, then a
realistic agent flow through the write path (propose_new_note -> get_proposal -> apply_proposal
and its idempotent replay; propose_note_patch with `edits` -> reject_proposal; propose_move with
link rewrites -> apply; propose_delete -> apply; list_proposals per status; history_status ->
history_undo -> history_redo; the two-phase critical tools delete_permanent and empty_trash,
including refused second calls). It checks the error envelope of every refused call
(`isError`, one JSON text block `{ok:false, code, message, retryable}` [+ `challenge` for the
critical tools], no structuredContent), lists and reads resources, and exits non-zero on any SDK
error (an outputSchema validation failure is reported as `OUTPUT SCHEMA VALIDATION FAILED`) or
mismatch. The flow writes only notes under `vgcheck/` plus one moved demo note, so it can be
re-run against the same vault (each run uses fresh paths and idempotency keys).

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
import hashlib
import json
import sys
import traceback
import uuid
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
        self.exercised: set[str] = set()  # tools this run actually called (success or refusal)

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


def _sdk_failure(e: BaseException) -> str:
    """Make the SDK's outputSchema validation errors impossible to miss in the report."""
    msg = _err(e)
    if "Invalid structured content" in msg or "Invalid schema for tool" in msg or "did not return structured content" in msg:
        return "OUTPUT SCHEMA VALIDATION FAILED: " + msg
    return msg


def _text_blocks(result: Any) -> list[str]:
    return [c.text for c in result.content if getattr(c, "type", None) == "text"]


async def _check_success(
    session: ClientSession, rep: Report, label: str, tool: str, args: dict, check
) -> dict[str, Any] | None:
    """Call a tool that must succeed; return its structuredContent when every check passed."""
    rep.exercised.add(tool)
    try:
        result = await session.call_tool(tool, args)  # the SDK validates structuredContent here
    except BaseException as e:  # noqa: BLE001 - any SDK exception is a failure to report
        rep.fail(label, _sdk_failure(e))
        if "OUTPUT SCHEMA VALIDATION FAILED" in rep.rows[-1][2]:
            print(f"!! {rep.label}: {label}: {rep.rows[-1][2]}", file=sys.stderr, flush=True)
        return None
    if result.is_error:
        rep.fail(label, f"isError: {_text_blocks(result)}")
        return None
    sc = result.structured_content
    if not isinstance(sc, dict):
        rep.fail(label, f"no structuredContent object (got {type(sc).__name__})")
        return None
    texts = _text_blocks(result)
    if len(result.content) != 1 or len(texts) != 1:
        rep.fail(label, f"expected exactly one text block, got {[c.type for c in result.content]}")
        return None
    try:
        mirrored = json.loads(texts[0])
    except ValueError as e:
        rep.fail(label, f"text block is not JSON: {e}")
        return None
    if mirrored != sc:
        rep.fail(label, "text block JSON differs from structuredContent")
        return None
    if check is not None and (problem := check(sc)) is not None:
        rep.fail(label, problem)
        return None
    summary = ", ".join(
        f"{k}={len(v)}" if isinstance(v, list) else k for k, v in list(sc.items())[:4]
    )
    rep.ok(label, summary)
    return sc


CHALLENGE_FIELDS = {"challengeId", "planHash", "affected", "count", "recoverability", "revision", "expiresAt"}


def _challenge_problem(ch: Any) -> str | None:
    if not isinstance(ch, dict):
        return f"challenge is not an object: {ch!r}"
    missing = CHALLENGE_FIELDS - set(ch)
    if missing:
        return f"challenge lacks {sorted(missing)}"
    if ch.get("recoverability") != "irreversible":
        return f"recoverability is {ch.get('recoverability')!r}"
    if not isinstance(ch.get("affected"), list) or ch.get("count") != len(ch["affected"]):
        return f"count {ch.get('count')!r} != len(affected) {len(ch.get('affected') or [])}"
    if not ch.get("challengeId") or not ch.get("planHash"):
        return "empty challengeId/planHash"
    return None


async def _check_error(
    session: ClientSession,
    rep: Report,
    label: str,
    tool: str,
    args: dict,
    code: str | None,
    *,
    challenge: bool | str = False,
) -> dict[str, Any] | None:
    """Call a tool that must be refused; return the error JSON when the envelope is right.

    `challenge=True`: a refused second call of a critical tool, whose error JSON must also carry a
    fresh `challenge` object (docs/contract.md#critical-operations). `challenge="optional"`: a replay whose targets are gone, where
    no challenge can be planned any more; a `challenge`, if present, must still be well-formed."""
    rep.exercised.add(tool)
    try:
        result = await session.call_tool(tool, args)
    except BaseException as e:  # noqa: BLE001
        rep.fail(label, f"expected an isError result, SDK raised {_err(e)}")
        return None
    problems = []
    if not result.is_error:
        problems.append(f"isError is not true (structuredContent {str(result.structured_content)[:300]})")
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
            allowed = {"ok", "code", "message", "retryable"} | ({"challenge"} if challenge else set())
            extra = set(body) - allowed
            if extra:
                problems.append(f"unexpected keys {sorted(extra)}")
            if challenge:
                if "challenge" not in body and challenge == "optional":
                    pass
                elif "challenge" not in body:
                    problems.append("no fresh `challenge` in the error JSON")
                elif (p := _challenge_problem(body["challenge"])) is not None:
                    problems.append(p)
            if code is not None and body.get("code") != code:
                problems.append(f"code {body.get('code')!r} != {code!r} (message: {str(body.get('message'))[:200]!r})")
    if problems:
        raw = texts[0][:600] if texts else repr(result.content)[:600]
        rep.fail(label, "; ".join(problems) + f" | raw: {raw}")
        return None
    note = ""
    if challenge:
        note = " +challenge" if "challenge" in body else " (no challenge: the targets are gone)"
    rep.ok(label, f"code={body['code']} retryable={body['retryable']}" + note)
    return body


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _all(*checks):
    def check(sc: dict[str, Any]) -> str | None:
        for c in checks:
            if c is not None and (problem := c(sc)) is not None:
                return problem
        return None

    return check


def _eq(key: str, want: Any):
    return lambda sc: None if sc.get(key) == want else f"`{key}` is {str(sc.get(key))[:200]!r}, expected {str(want)[:200]!r}"


def _truthy(key: str):
    return lambda sc: None if sc.get(key) else f"`{key}` is {sc.get(key)!r}"


def _absent(key: str):
    return lambda sc: None if sc.get(key) is None else f"`{key}` should be absent/null, is {sc.get(key)!r}"


def _check_annotations(rep: Report, tools: dict[str, Any]) -> None:
    """docs/contract.md#the-mcp-surface annotations: read tools readOnly; propose_* not readOnly, not destructive;
    apply/reject/undo/redo and critical tools destructive; critical tools carry the risk `_meta`."""
    read_tools = set(READ_TOOLS)
    propose = {"propose_new_note", "propose_note_patch", "propose_move", "propose_delete"}
    destructive = {"apply_proposal", "reject_proposal", "history_undo", "history_redo"} | set(CRITICAL_TOOLS)
    problems = []
    for name, t in tools.items():
        a = t.annotations
        ro = a.read_only_hint if a else None
        de = a.destructive_hint if a else None
        if name in read_tools and ro is not True:
            problems.append(f"{name}: readOnlyHint={ro}")
        if name in propose and (ro is not False or de is not False):
            problems.append(f"{name}: readOnlyHint={ro} destructiveHint={de}")
        if name in destructive and de is not True:
            problems.append(f"{name}: destructiveHint={de}")
        if name in CRITICAL_TOOLS:
            meta = t.meta or {}
            want = {"risk": "critical", "approval": "agent-challenge", "requiresCriticalConfirmation": True}
            if any(meta.get(k) != v for k, v in want.items()):
                problems.append(f"{name}: _meta={meta}")
    if problems:
        rep.fail("annotations", "; ".join(problems))
    else:
        rep.ok("annotations", "read/propose/destructive hints and critical _meta as in docs/contract.md#the-mcp-surface")


READ_TOOLS = [
    "vault_list", "get_vault_overview", "search_knowledge", "search_note_content", "read_note",
    "list_notes", "list_standards", "list_tags", "get_related_notes", "list_recent_notes",
    "list_proposals", "get_proposal", "history_status",
]
CRITICAL_TOOLS = ["delete_permanent", "empty_trash"]
# paths the read checks above rely on: the flow never moves or deletes them
PROTECTED = {NOTE, "学习方法.md"}


async def run_flow(session: ClientSession, rep: Report, tag: str) -> None:
    """The write path as an agent would drive it, on notes under vgcheck/ (and one moved demo note)."""
    new_path = f"vgcheck/{tag}-new.md"
    perm_path = f"vgcheck/{tag}-perm.md"
    pending_path = f"vgcheck/{tag}-pending.md"
    moved_path = f"vgcheck/{tag}-moved.md"
    new_text = (
        f"---\ntitle: SDK check {tag}\ntags: [sdk-check]\n---\n# SDK check {tag}\n\n"
        f"Written through the Python SDK; see [[attention]].\n"
    )

    # ---- A. propose_new_note -> get_proposal -> apply_proposal (+ replay) ----
    sc = await _check_success(
        session, rep, "flow propose_new_note", "propose_new_note",
        {"path": new_path, "content": new_text, "reason": "SDK check: a new note", "vault": VAULT},
        _all(_truthy("id"), _truthy("slug"), _truthy("proposalHash"), _eq("target", new_path)),
    )
    if sc is None:
        return
    new_id, new_hash, new_slug = sc["id"], sc["proposalHash"], sc["slug"]
    await _check_success(
        session, rep, "flow get_proposal (new)", "get_proposal", {"id": new_id},
        _all(_eq("id", new_id), _eq("kind", "new"), _eq("status", "pending"), _eq("target", new_path),
             _eq("content", new_text), _eq("proposalHash", new_hash), _truthy("diff"),
             lambda s: None if "SDK check" in s.get("diff", "") else "diff lacks the new text"),
    )
    await _check_success(session, rep, "flow get_proposal by slug", "get_proposal", {"id": new_slug}, _eq("id", new_id))
    key = f"vgcheck-{tag}-apply-new"
    apply_args = {"id": new_id, "proposalHash": new_hash, "idempotencyKey": key}
    first = await _check_success(
        session, rep, "flow apply_proposal (new)", "apply_proposal", apply_args,
        _all(_eq("applied", True), _eq("replayed", False), _eq("target", new_path), _truthy("historyEntryId"),
             lambda s: None if s.get("index") in ("updated", "failed") else f"index is {s.get('index')!r}"),
    )
    if first is not None:
        await _check_success(
            session, rep, "flow apply_proposal replay (same key)", "apply_proposal", apply_args,
            _all(_eq("replayed", True), _eq("applied", True), _eq("historyEntryId", first["historyEntryId"]),
                 _eq("auditSeq", first["auditSeq"]), _eq("target", new_path)),
        )
    await _check_error(session, rep, "flow apply_proposal same key, other args", "apply_proposal",
                       {**apply_args, "proposalHash": "0" * 64}, "IDEMPOTENCY_CONFLICT")
    await _check_error(session, rep, "flow apply_proposal again (new key)", "apply_proposal",
                       {**apply_args, "idempotencyKey": key + "-2"}, "PROPOSAL_ALREADY_APPLIED")
    await _check_success(
        session, rep, "flow read_note (applied note)", "read_note", {"path": new_path},
        _all(_eq("content", new_text), _eq("hash", _sha256(new_text))),
    )

    # a note for delete_permanent later, applied now so the vault is quiet by then
    perm_text = f"# To be deleted for good ({tag})\n"
    sc = await _check_success(session, rep, "flow propose_new_note (perm)", "propose_new_note",
                              {"path": perm_path, "content": perm_text, "reason": "SDK check: delete_permanent target"},
                              _eq("target", perm_path))
    if sc is not None:
        await _check_success(session, rep, "flow apply_proposal (perm)", "apply_proposal",
                             {"id": sc["id"], "proposalHash": sc["proposalHash"],
                              "idempotencyKey": f"vgcheck-{tag}-apply-perm"}, _eq("applied", True))

    # ---- B. read_note -> propose_note_patch (edits) -> get_proposal -> reject_proposal ----
    rn = await _check_success(session, rep, "flow read_note (patch base)", "read_note", {"path": NOTE},
                              lambda s: None if s.get("hash") == _sha256(s.get("content", "")) else
                              "hash is not the SHA-256 of content")
    patch_id = None
    if rn is not None:
        content = rn["content"]
        old = next((ln for ln in content.splitlines() if len(ln) > 20 and content.count(ln) == 1), None)
        if old is None:
            rep.fail("flow propose_note_patch", "no unique line to edit in " + NOTE)
        else:
            new_line = old + " (edited by the SDK check)"
            expected = content.replace(old, new_line)
            sc = await _check_success(
                session, rep, "flow propose_note_patch (edits)", "propose_note_patch",
                {"path": NOTE, "baseHash": rn["hash"], "reason": "SDK check: an edit",
                 "edits": [{"oldText": old, "newText": new_line}]},
                _all(_eq("target", NOTE), _eq("baseHash", rn["hash"]),
                     lambda s: None if "edited by the SDK check" in (s.get("diff") or "") else "diff lacks the edit"),
            )
            if sc is not None:
                patch_id = sc["id"]
                await _check_success(session, rep, "flow get_proposal (patch)", "get_proposal", {"id": patch_id},
                                     _all(_eq("kind", "patch"), _eq("content", expected), _eq("baseHash", rn["hash"])))
                await _check_success(
                    session, rep, "flow reject_proposal", "reject_proposal",
                    {"id": patch_id, "reason": "SDK check: rejected on purpose"},
                    _all(_eq("rejected", True),
                         lambda s: None if "rejected/" in s.get("archivedTo", "") else f"archivedTo {s.get('archivedTo')!r}"),
                )
                await _check_error(session, rep, "flow apply_proposal (rejected)", "apply_proposal",
                                   {"id": patch_id, "proposalHash": sc["proposalHash"],
                                    "idempotencyKey": f"vgcheck-{tag}-apply-rejected"}, "PROPOSAL_REJECTED")
            await _check_error(session, rep, "flow propose_note_patch non-unique oldText", "propose_note_patch",
                               {"path": NOTE, "baseHash": rn["hash"], "reason": "x",
                                "edits": [{"oldText": "\n", "newText": "\n\n"}]}, "EDIT_NOT_UNIQUE")

    # ---- C. propose_move (link rewrites) -> apply ----
    rel = await _check_success(session, rep, "flow get_related_notes (move source)", "get_related_notes",
                               {"path": NOTE}, _truthy("outlinks"))
    move_from = None
    if rel is not None:
        outs = [o.get("path") for o in rel.get("outlinks", [])]
        cands = [p for p in outs if p and p not in PROTECTED and not p.startswith("docs/") and p.isascii()]
        move_from = cands[0] if cands else None
        if move_from is None:
            rep.fail("flow propose_move", f"no outlink of {NOTE} to move: {outs}")
    if move_from is not None:
        def _rewrites(s: dict[str, Any]) -> str | None:
            lr = s.get("linkRewrites")
            if not isinstance(lr, list) or not lr:
                return f"linkRewrites is {lr!r}"
            mine = [x for x in lr if x.get("path") == NOTE]
            if not mine or not isinstance(mine[0].get("count"), int) or mine[0]["count"] < 1:
                return f"linkRewrites lacks {NOTE} with count >= 1: {lr}"
            return None

        sc = await _check_success(session, rep, f"flow propose_move {move_from}", "propose_move",
                                  {"from": move_from, "to": moved_path, "reason": "SDK check: a rename"},
                                  _all(_truthy("id"), _truthy("proposalHash"), _rewrites))
        if sc is not None:
            await _check_success(session, rep, "flow get_proposal (move)", "get_proposal", {"id": sc["id"]},
                                 _all(_eq("kind", "move"), _eq("target", moved_path), _eq("from", move_from)))
            done = await _check_success(session, rep, "flow apply_proposal (move)", "apply_proposal",
                                        {"id": sc["id"], "proposalHash": sc["proposalHash"],
                                         "idempotencyKey": f"vgcheck-{tag}-apply-move"},
                                        _all(_eq("applied", True), _eq("target", moved_path)))
            if done is not None:
                await _check_success(session, rep, "flow read_note (moved)", "read_note", {"path": moved_path}, None)
                await _check_error(session, rep, "flow read_note (old path)", "read_note", {"path": move_from}, "NOT_FOUND")
                await _check_success(session, rep, "flow read_note (link rewritten)", "read_note", {"path": NOTE},
                                     lambda s: None if f"{tag}-moved" in s.get("content", "") else
                                     f"{NOTE} does not link to {moved_path}")

    # ---- D. read_note -> propose_delete -> apply ----
    delete_entry = None
    rn = await _check_success(session, rep, "flow read_note (delete base)", "read_note", {"path": new_path}, None)
    if rn is not None:
        sc = await _check_success(session, rep, "flow propose_delete", "propose_delete",
                                  {"path": new_path, "baseHash": rn["hash"], "reason": "SDK check: a deletion"},
                                  _all(_truthy("id"), _truthy("proposalHash")))
        if sc is not None:
            await _check_success(session, rep, "flow get_proposal (delete)", "get_proposal", {"id": sc["id"]},
                                 _all(_eq("kind", "delete"), _eq("target", new_path)))
            done = await _check_success(session, rep, "flow apply_proposal (delete)", "apply_proposal",
                                        {"id": sc["id"], "proposalHash": sc["proposalHash"],
                                         "idempotencyKey": f"vgcheck-{tag}-apply-delete"}, _eq("applied", True))
            if done is not None:
                delete_entry = done["historyEntryId"]
                await _check_error(session, rep, "flow read_note (deleted)", "read_note", {"path": new_path}, "NOT_FOUND")

    # ---- E. list_proposals for each status ----
    sc = await _check_success(session, rep, "flow propose_new_note (left pending)", "propose_new_note",
                              {"path": pending_path, "content": "# pending\n", "reason": "SDK check: left pending"}, None)
    pending_id = sc["id"] if sc else None

    def _lists(status: str, want: list[str | None]):
        def check(s: dict[str, Any]) -> str | None:
            items = s.get("proposals") or []
            bad = [i.get("status") for i in items if i.get("status") != status]
            if bad:
                return f"items with status {bad[:3]} in a {status} listing"
            ids = {i.get("id") for i in items}
            missing = [w for w in want if w and w not in ids]
            return f"missing ids {missing}" if missing else None

        return check

    await _check_success(session, rep, "flow list_proposals (default)", "list_proposals", {},
                         _lists("pending", [pending_id]))
    await _check_success(session, rep, "flow list_proposals pending", "list_proposals",
                         {"status": "pending", "limit": 500}, _lists("pending", [pending_id]))
    await _check_success(session, rep, "flow list_proposals applied", "list_proposals",
                         {"status": "applied", "limit": 500}, _lists("applied", [new_id]))
    await _check_success(session, rep, "flow list_proposals rejected", "list_proposals",
                         {"status": "rejected", "limit": 500}, _lists("rejected", [patch_id]))
    await _check_success(session, rep, "flow list_proposals limit=1", "list_proposals",
                         {"status": "applied", "limit": 1},
                         lambda s: None if len(s.get("proposals") or []) == 1 else f"{len(s.get('proposals') or [])} items")
    await _check_error(session, rep, "flow list_proposals bogus status", "list_proposals", {"status": "bogus"},
                       "INVALID_ARGUMENT")

    # ---- F. history_status -> history_undo -> history_redo ----
    hs = await _check_success(session, rep, "flow history_status", "history_status", {},
                              _all(_truthy("undoTop"), _eq("transitionInProgress", False),
                                   _eq("undoTop", delete_entry) if delete_entry else None))
    if hs is not None:
        top = hs["undoTop"]
        await _check_error(session, rep, "flow history_undo not top", "history_undo",
                           {"expectedHistoryEntryId": "not-the-top", "idempotencyKey": f"vgcheck-{tag}-undo-bad"},
                           "HISTORY_NOT_TOP")
        un = await _check_success(session, rep, "flow history_undo", "history_undo",
                                  {"expectedHistoryEntryId": top, "idempotencyKey": f"vgcheck-{tag}-undo"},
                                  _all(_eq("redoTop", top), _eq("transitionInProgress", False)))
        if un is not None:
            if delete_entry:
                await _check_success(session, rep, "flow read_note (undone delete)", "read_note", {"path": new_path},
                                     _eq("content", new_text))
            await _check_success(session, rep, "flow history_status after undo", "history_status", {}, _eq("redoTop", top))
            await _check_success(session, rep, "flow history_redo", "history_redo",
                                 {"expectedHistoryEntryId": top, "idempotencyKey": f"vgcheck-{tag}-redo"},
                                 _all(_eq("undoTop", top), _absent("redoTop")))
            if delete_entry:
                await _check_error(session, rep, "flow read_note (redone delete)", "read_note", {"path": new_path},
                                   "NOT_FOUND")

    # ---- G. delete_permanent: challenge -> refused second calls -> executed -> replay refused ----
    dkey = f"vgcheck-{tag}-perm"
    base = {"paths": [perm_path], "idempotencyKey": dkey}
    first = await _check_success(
        session, rep, "flow delete_permanent first call", "delete_permanent", base,
        _all(_eq("status", "challenge"), _absent("deleted"),
             lambda s: _challenge_problem(s.get("challenge")),
             lambda s: None if perm_path in (s.get("challenge") or {}).get("affected", []) else
             f"affected {(s.get('challenge') or {}).get('affected')} lacks {perm_path}"),
    )
    if first is not None:
        ch = first["challenge"]
        second = {**base, "challengeId": ch["challengeId"], "planHash": ch["planHash"], "acknowledged": True}
        await _check_error(session, rep, "flow delete_permanent forged planHash", "delete_permanent",
                           {**second, "planHash": "0" * 64}, "CHALLENGE_MISMATCH", challenge=True)
        await _check_error(session, rep, "flow delete_permanent other key", "delete_permanent",
                           {**second, "idempotencyKey": dkey + "-other"}, "CHALLENGE_MISMATCH", challenge=True)
        await _check_error(session, rep, "flow delete_permanent incomplete (no planHash)", "delete_permanent",
                           {**base, "challengeId": ch["challengeId"], "acknowledged": True}, "CHALLENGE_REQUIRED",
                           challenge=True)
        await _check_error(session, rep, "flow delete_permanent acknowledged=false", "delete_permanent",
                           {**second, "acknowledged": False}, None, challenge=True)
        done = await _check_success(session, rep, "flow delete_permanent second call", "delete_permanent", second,
                                    _all(_eq("status", "executed"), _eq("deleted", [perm_path])))
        if done is not None:
            # the deleted path no longer exists, so the server may be unable to plan a fresh challenge
            await _check_error(session, rep, "flow delete_permanent replay", "delete_permanent", second,
                               "CHALLENGE_CONSUMED", challenge="optional")
            await _check_error(session, rep, "flow read_note (deleted for good)", "read_note", {"path": perm_path},
                               "NOT_FOUND")
            await _check_success(session, rep, "flow history_status after barrier", "history_status", {},
                                 _absent("undoTop"))

    # ---- H. empty_trash two-phase ----
    ekey = f"vgcheck-{tag}-trash"
    first = await _check_success(
        session, rep, "flow empty_trash first call", "empty_trash", {"idempotencyKey": ekey},
        _all(_eq("status", "challenge"), _absent("removed"), lambda s: _challenge_problem(s.get("challenge")),
             lambda s: None if (s.get("challenge") or {}).get("count", 0) >= 1 else "trash should hold the deleted note"),
    )
    if first is not None:
        ch = first["challenge"]
        second = {"idempotencyKey": ekey, "challengeId": ch["challengeId"], "planHash": ch["planHash"], "acknowledged": True}
        await _check_error(session, rep, "flow empty_trash forged planHash", "empty_trash",
                           {**second, "planHash": "f" * 64}, "CHALLENGE_MISMATCH", challenge=True)
        await _check_success(session, rep, "flow empty_trash second call", "empty_trash", second,
                             _all(_eq("status", "executed"), _eq("removed", ch["count"])))
        await _check_error(session, rep, "flow empty_trash replay", "empty_trash", second, "CHALLENGE_CONSUMED",
                           challenge=True)


async def run_checks(session: ClientSession, rep: Report, mode: str, tag: str) -> None:
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
    detail = f"{len(tools)} tools: {', '.join(sorted(tools))}"
    if missing_schema:
        rep.fail("tools/list", f"tools without outputSchema: {missing_schema}")
    else:
        rep.ok("tools/list", detail)
    _check_annotations(rep, tools)

    for label, tool, args, check in CALLS:
        if tool in tools:
            await _check_success(session, rep, label, tool, args, check)
    for label, tool, args, code in FAILING_CALLS:
        await _check_error(session, rep, label, tool, args, code)

    await run_flow(session, rep, tag)

    # every listed tool got at least one call
    for name in sorted(set(tools) - rep.exercised):
        rep.fail(f"tool {name}", "listed by the server but this script made no call to it")
    for name in sorted(rep.exercised - set(tools)):
        rep.fail(f"tool {name}", "called but not listed by the server")

    # an unknown tool stays a JSON-RPC error (docs/contract.md#the-mcp-surface)
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
                await run_checks(session, rep, mode, f"stdio-{mode}-{uuid.uuid4().hex[:8]}")
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
            await run_checks(session, rep, mode, f"http-{mode}-{uuid.uuid4().hex[:8]}")
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
