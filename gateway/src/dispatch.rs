//! Tool name → engine operation: the one place a tool's name picks what runs. Each arm parses the
//! arguments strictly (inside the engine's call, so a malformed call is audited like any other),
//! resolves the vault through the call, and hands typed values to the engine.

use engine::api::{
    ApplyArgs, ApproveInAppArgs, ListNotesArgs, ListProposalsArgs, ListTagsArgs, NoArgs, NoteHistoryArgs,
    PathArgs, ProposalIdArgs, ProposeDeleteArgs, ProposeFrontmatterArgs, ProposeMoveArgs, ProposeNewArgs,
    ProposePatchArgs, QueryNotesArgs, ReadNoteArgs, RecentArgs, RejectArgs, RejectInAppArgs,
    SearchKnowledgeArgs, SearchNoteContentArgs, VaultArg,
};
use engine::core::PageCall;
use engine::history::HistoryMoveArgs;
use engine::ids::{HistoryEntryId, NoteHash, ProposalHash, ProposalId};
use engine::{Audited, Call, Caller, ClientApproval, Core, GatewayError, Transition};
use serde_json::{Map, Value};

use crate::tools::CATALOG;

fn parse<T: serde::de::DeserializeOwned>(args: &Value) -> Result<T, GatewayError> {
    engine::core::parse(args)
}

fn to_value<T: serde::Serialize>(v: T) -> Result<Value, GatewayError> {
    serde_json::to_value(v).map_err(|e| GatewayError::Internal(format!("serializing a result: {e}")))
}

/// Runs one tool call end to end. `None`: no such tool (a JSON-RPC error at the edge, not a
/// tool result).
/// `approval`: how this caller's session can ask a person (docs/contract.md#the-review-page-and-in-client-approval); only `apply_proposal`
/// uses it.
pub fn call_tool(
    core: &Core,
    caller: &Caller,
    tool: &str,
    args: Map<String, Value>,
    approval: &ClientApproval<'_>,
) -> Option<Audited<Result<Value, GatewayError>>> {
    // A team vault's write while another gateway holds its lease: run there, answered here.
    if let Some(out) = crate::teamcalls::hand(core, caller, tool, &args, approval) {
        return Some(out);
    }
    call_tool_here(core, caller, tool, args, approval, None)
}

/// [`call_tool`] in this process, never handed to another gateway; `received_by`: the gateway
/// of the team that received it and handed it here.
pub(crate) fn call_tool_here(
    core: &Core,
    caller: &Caller,
    tool: &str,
    args: Map<String, Value>,
    approval: &ClientApproval<'_>,
    received_by: Option<&str>,
) -> Option<Audited<Result<Value, GatewayError>>> {
    let spec = policy::tools::find(tool)?;
    if !CATALOG.iter().any(|t| t.name == tool) {
        return None;
    }
    let args = Value::Object(args);
    let op = |call: &mut Call<'_>| {
        let out = run(core, caller, spec.name, call, approval)?;
        within_output_limit(spec.name, out, core.read_limits().max_output_bytes)
    };
    Some(match received_by {
        Some(gateway) => core.call_handed(gateway, caller, spec, &args, op),
        None => core.call(caller, spec, &args, op),
    })
}

/// docs/contract.md#limits-and-pagination: a result is at most `max` bytes of JSON, counting both of its copies (the
/// `structuredContent` and the text block that repeats it, escaped once more): that is what a
/// client must read as one message (rmcp's own line limit is 16 MiB). Lists are cut before this (every list is
/// paged or capped), so what is left over is one item too large: refused, naming a narrower call.
fn within_output_limit(tool: &str, out: Value, max: usize) -> Result<Value, GatewayError> {
    // Most results are far under the limit, which a bound shows without serializing them.
    if wire_bound(&out) <= max {
        return Ok(out);
    }
    let size = result_len(&out);
    if size <= max {
        return Ok(out);
    }
    let mib = |n: usize| n.div_ceil(1024 * 1024);
    let what = format!(
        "the result of {tool} is about {} MiB, over the {} MiB output limit",
        mib(size),
        mib(max)
    );
    let next = match tool {
        "get_proposal" => {
            "read the note with read_note and review the proposal with `vaultgate inbox show` (or reject it)"
                .to_owned()
        }
        "propose_note_patch" | "propose_frontmatter_update" => {
            let id = out.get("id").and_then(Value::as_str).unwrap_or_default();
            let hash = out
                .get("proposalHash")
                .and_then(Value::as_str)
                .unwrap_or_default();
            format!(
                "the proposal was recorded (id {id}, proposalHash {hash}) but its diff is too large to show: a reviewer sees it with `vaultgate inbox show`; prefer smaller edits"
            )
        }
        "read_note" => {
            "the note holds many characters that JSON must escape; read it from the vault folder directly"
                .to_owned()
        }
        _ => "narrow the call (a smaller limit, a folder or pathPrefix, one path at a time)".to_owned(),
    };
    // SECURITY(T-PAGE3): no answer is larger than max_output_bytes.
    Err(GatewayError::OutputLimitExceeded(format!("{what}; {next}")))
}

/// At least `result_len(v)`, from a walk that reads no string's bytes: a string's byte is at most
/// 6 in compact JSON (`\u001f`), and each byte of that JSON at most 2 once it is escaped again
/// (only `"` and `\` are, since the first copy holds no control characters).
fn wire_bound(v: &Value) -> usize {
    fn first(v: &Value) -> usize {
        match v {
            // `-1.7976931348623157e308` is 24 bytes; `false` 5.
            Value::Null | Value::Bool(_) | Value::Number(_) => 24,
            Value::String(s) => s.len().saturating_mul(6).saturating_add(2),
            Value::Array(items) => items
                .iter()
                .fold(2usize, |n, i| n.saturating_add(first(i)).saturating_add(1)),
            Value::Object(map) => map.iter().fold(2usize, |n, (k, v)| {
                n.saturating_add(k.len().saturating_mul(6))
                    .saturating_add(4)
                    .saturating_add(first(v))
            }),
        }
    }
    // `result_len`: the JSON plus its escaped copy (at most twice as long) and two quotes.
    first(v).saturating_mul(3).saturating_add(2)
}

/// The bytes of a result on the wire: its JSON, and that JSON as a JSON string.
fn result_len(v: &Value) -> usize {
    let (first, escaped) = json_lens(v);
    if first.saturating_mul(2) <= 4096 {
        // Small: the escaped copy cannot matter.
        return first.saturating_mul(2);
    }
    first + escaped + 2
}

/// The length of `v` as compact JSON, and of that JSON as a JSON string's contents (serde_json
/// escapes `"`, `\\` and C0 controls), from one serialization into a counter: neither text is
/// built.
fn json_lens(v: &Value) -> (usize, usize) {
    struct Count {
        plain: usize,
        escaped: usize,
    }
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.plain += b.len();
            self.escaped += b
                .iter()
                .map(|b| match b {
                    b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
                    0..=0x1f => 6,
                    _ => 1,
                })
                .sum::<usize>();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count { plain: 0, escaped: 0 };
    // Writing to a counter cannot fail; a failure would only under-count.
    let _ = serde_json::to_writer(&mut c, v);
    (c.plain, c.escaped)
}

fn run(
    core: &Core,
    caller: &Caller,
    tool: &str,
    call: &mut Call<'_>,
    approval: &ClientApproval<'_>,
) -> Result<Value, GatewayError> {
    let args = call.args();
    let page = PageCall {
        tool,
        args,
        credential: caller.credential.id.as_str(),
    };
    match tool {
        "vault_list" => {
            let _: NoArgs = parse(args)?;
            to_value(core.reads().vault_list(&caller.credential))
        }
        "get_vault_overview" => {
            let a: VaultArg = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.reads().overview(&v)?)
        }
        "search_knowledge" => {
            let a: SearchKnowledgeArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.reads().search_knowledge(
                &v,
                &page,
                &a.query,
                &a.tag.unwrap_or_default(),
                a.limit,
                a.cursor.as_deref(),
            )?)
        }
        "search_note_content" => {
            let a: SearchNoteContentArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.reads().search_content(&v, &page, a)?)
        }
        "read_note" => {
            let a: ReadNoteArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            match a.hash.as_deref() {
                Some(hash) => to_value(core.history().read_version(&v, &a.path, hash)?),
                None => Ok(core.reads().read_note(&v, &a.path)?.into_value()),
            }
        }
        "get_note_history" => {
            let a: NoteHistoryArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(
                core.history()
                    .note_history(&v, &page, &a.path, a.limit, a.cursor.as_deref())?,
            )
        }
        "list_notes" => {
            let a: ListNotesArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(
                core.reads()
                    .list_notes(&v, &page, a.dir.as_deref(), a.limit, a.cursor.as_deref())?,
            )
        }
        "list_standards" => {
            let a: VaultArg = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.reads().list_standards(&v)?)
        }
        "list_tags" => {
            let a: ListTagsArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.reads().list_tags(&v, &page, a.limit, a.cursor.as_deref())?)
        }
        "get_related_notes" => {
            let a: PathArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.reads().related(&v, &a.path)?)
        }
        "list_recent_notes" => {
            let a: RecentArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(
                core.reads()
                    .recent(&v, &page, a.limit, a.since.as_deref(), a.cursor.as_deref())?,
            )
        }
        "list_attachments" => {
            let a: engine::attachments::ListAttachmentsArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.attachments().list_attachments(&v, &page, &a)?)
        }
        "read_attachment_text" => {
            let a: engine::attachments::ReadAttachmentArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.attachments().read_attachment_text(&v, page.credential, &a)?)
        }
        "query_notes" => {
            let a: QueryNotesArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.reads().query_notes(&v, &page, a)?)
        }
        "list_proposals" => {
            let a: ListProposalsArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.proposals().list_proposals_page(
                &v,
                Some(&page),
                a.status.as_deref(),
                a.limit,
                a.cursor.as_deref(),
            )?)
        }
        "get_proposal" => {
            let a: ProposalIdArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.proposals().get_proposal(&v, &ProposalId::from_wire(a.id))?)
        }
        "propose_new_note" => {
            let a: ProposeNewArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(
                core.proposals()
                    .propose_new(call, &v, &a.path, &a.content, &a.reason)?,
            )
        }
        "propose_note_patch" => {
            let a: ProposePatchArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.proposals().propose_patch(call, &v, a)?)
        }
        "propose_frontmatter_update" => {
            let a: ProposeFrontmatterArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.proposals().propose_frontmatter(call, &v, a)?)
        }
        "propose_move" => {
            let a: ProposeMoveArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(
                core.proposals()
                    .propose_move(call, &v, &a.from, &a.to, &a.reason)?,
            )
        }
        "propose_delete" => {
            let a: ProposeDeleteArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.proposals().propose_delete(
                call,
                &v,
                &a.path,
                &NoteHash::from_wire(a.base_hash),
                &a.reason,
            )?)
        }
        "reject_proposal" => {
            let a: RejectArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(
                core.proposals()
                    .reject_proposal(call, &v, &ProposalId::from_wire(a.id), &a.reason)?,
            )
        }
        "apply_proposal" => {
            let a: ApplyArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.writes().apply_proposal(
                call,
                &v,
                &ProposalId::from_wire(a.id),
                &ProposalHash::from_wire(a.proposal_hash),
                &a.idempotency_key,
                approval,
            )?)
        }
        "approve_proposal_in_app" => {
            let a: ApproveInAppArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.writes().approve_in_app(
                call,
                &v,
                &ProposalId::from_wire(a.id),
                &a.approval,
                &a.idempotency_key,
            )?)
        }
        "reject_proposal_in_app" => {
            let a: RejectInAppArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.proposals().reject_in_app(
                call,
                &v,
                &ProposalId::from_wire(a.id),
                &a.approval,
                &a.reason,
                &a.idempotency_key,
            )?)
        }
        "history_status" => {
            let a: VaultArg = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.history().history_status(&v)?)
        }
        "history_undo" | "history_redo" => {
            let a: HistoryMoveArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            let t = if tool == "history_undo" {
                Transition::Undo
            } else {
                Transition::Redo
            };
            to_value(core.history().history_transition(
                call,
                &v,
                t,
                &HistoryEntryId::from_wire(a.expected_history_entry_id),
                &a.idempotency_key,
            )?)
        }
        "delete_permanent" => {
            let a: engine::critical::DeletePermanentArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            core.challenges().delete_permanent(call, caller, &v)
        }
        "empty_trash" => {
            let a: engine::critical::EmptyTrashArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            core.challenges().empty_trash(call, caller, &v)
        }
        other => Err(GatewayError::Internal(format!(
            "tool '{other}' is in the catalog but not dispatched"
        ))),
    }
}

#[cfg(test)]
mod output_len_tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::{Value, json};

    /// The bound is never under the length, however the text is made up.
    #[test]
    fn the_wire_bound_is_never_under_the_length() {
        let pieces = ["\u{1}", "\"", "\\", "\n", "é", "文", "x", "\u{1f}", "/"];
        for n in 0..200usize {
            let text: String = (0..n).map(|i| pieces[(i * 7 + n) % pieces.len()]).collect();
            let v = json!({"content": text, "n": [n, -1.5e300, null, true], "k\"\u{1}": {"e": ""}});
            assert!(super::wire_bound(&v) >= super::result_len(&v), "{v}");
        }
    }

    /// The length counted equals both copies as a client receives them.
    #[test]
    fn result_len_is_both_copies_on_the_wire() {
        let tricky = format!(
            "\"quoted\" \\ back\n\t\r\u{8}\u{c}\u{1}\u{1b} é 文 {}",
            "x".repeat(5000)
        );
        for v in [
            json!({"content": tricky}),
            json!({"a": [1, 2, 3], "b": "x".repeat(3000)}),
            json!({"s": "small"}),
        ] {
            let text = serde_json::to_string(&v).unwrap();
            let wire = text.len() + serde_json::to_string(&Value::String(text.clone())).unwrap().len();
            assert!(super::wire_bound(&v) >= wire.max(text.len() * 2), "{v}");
            if wire > 4096 {
                assert_eq!(super::result_len(&v), wire, "{v}");
            } else {
                assert_eq!(super::result_len(&v), text.len() * 2);
            }
        }
    }
}
