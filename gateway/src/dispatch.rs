//! Tool name → engine operation: the one place a tool's name picks what runs. Each arm parses the
//! arguments strictly (inside the engine's call, so a malformed call is audited like any other),
//! resolves the vault through the call, and hands typed values to the engine.

use engine::api::{
    ApplyArgs, ListNotesArgs, ListProposalsArgs, NoArgs, PathArgs, ProposalIdArgs, ProposeDeleteArgs,
    ProposeMoveArgs, ProposeNewArgs, ProposePatchArgs, RecentArgs, RejectArgs, SearchKnowledgeArgs,
    SearchNoteContentArgs, VaultArg,
};
use engine::history::HistoryMoveArgs;
use engine::ids::{HistoryEntryId, NoteHash, ProposalHash, ProposalId};
use engine::{Audited, Call, Caller, Core, GatewayError, Transition};
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
pub fn call_tool(
    core: &Core,
    caller: &Caller,
    tool: &str,
    args: Map<String, Value>,
) -> Option<Audited<Result<Value, GatewayError>>> {
    let spec = policy::tools::find(tool)?;
    if !CATALOG.iter().any(|t| t.name == tool) {
        return None;
    }
    let args = Value::Object(args);
    Some(core.call(caller, spec, &args, |call| run(core, caller, spec.name, call)))
}

fn run(core: &Core, caller: &Caller, tool: &str, call: &mut Call<'_>) -> Result<Value, GatewayError> {
    let args = call.args();
    match tool {
        "vault_list" => {
            let _: NoArgs = parse(args)?;
            to_value(core.vault_list(&caller.credential))
        }
        "get_vault_overview" => {
            let a: VaultArg = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.overview(&v)?)
        }
        "search_knowledge" => {
            let a: SearchKnowledgeArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.search_knowledge(&v, &a.query, &a.tag.unwrap_or_default(), a.limit)?)
        }
        "search_note_content" => {
            let a: SearchNoteContentArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.search_content(&v, a.query, a.limit, a.tag.unwrap_or_default(), a.path_prefix)?)
        }
        "read_note" => {
            let a: PathArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.read_note(&v, &a.path)?)
        }
        "list_notes" => {
            let a: ListNotesArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.list_notes(&v, a.dir.as_deref(), a.limit)?)
        }
        "list_standards" => {
            let a: VaultArg = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.list_standards(&v)?)
        }
        "list_tags" => {
            let a: VaultArg = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.list_tags(&v)?)
        }
        "get_related_notes" => {
            let a: PathArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.related(&v, &a.path)?)
        }
        "list_recent_notes" => {
            let a: RecentArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.recent(&v, a.limit, a.since.as_deref())?)
        }
        "list_proposals" => {
            let a: ListProposalsArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.list_proposals(&v, a.status.as_deref(), a.limit)?)
        }
        "get_proposal" => {
            let a: ProposalIdArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.get_proposal(&v, &ProposalId::from_wire(a.id))?)
        }
        "propose_new_note" => {
            let a: ProposeNewArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.propose_new(call, &v, &a.path, &a.content, &a.reason)?)
        }
        "propose_note_patch" => {
            let a: ProposePatchArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.propose_patch(call, &v, a)?)
        }
        "propose_move" => {
            let a: ProposeMoveArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.propose_move(call, &v, &a.from, &a.to, &a.reason)?)
        }
        "propose_delete" => {
            let a: ProposeDeleteArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.propose_delete(call, &v, &a.path, &NoteHash::from_wire(a.base_hash), &a.reason)?)
        }
        "reject_proposal" => {
            let a: RejectArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.reject_proposal(call, &v, &ProposalId::from_wire(a.id), &a.reason)?)
        }
        "apply_proposal" => {
            let a: ApplyArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.apply_proposal(
                call,
                &v,
                &ProposalId::from_wire(a.id),
                &ProposalHash::from_wire(a.proposal_hash),
                &a.idempotency_key,
            )?)
        }
        "history_status" => {
            let a: VaultArg = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            to_value(core.history_status(&v)?)
        }
        "history_undo" | "history_redo" => {
            let a: HistoryMoveArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            let t = if tool == "history_undo" {
                Transition::Undo
            } else {
                Transition::Redo
            };
            to_value(core.history_transition(
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
            core.delete_permanent(call, caller, &v)
        }
        "empty_trash" => {
            let a: engine::critical::EmptyTrashArgs = parse(args)?;
            let v = call.vault(a.vault.as_deref())?;
            core.empty_trash(call, caller, &v)
        }
        other => Err(GatewayError::Internal(format!(
            "tool '{other}' is in the catalog but not dispatched"
        ))),
    }
}
