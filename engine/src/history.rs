//! History undo/redo (docs/contract.md#history): one linear history per vault, shared by every client and the CLI.
//!
//! A history entry keeps the file operations its change ran; an undo runs their inverses
//! (newest first), a redo runs them again, both through the one transaction of [`crate::txn`]
//! with the blobs the apply kept in `.vaultgate/objects`. The idempotency key first;
//! `expectedHistoryEntryId` must name the current top (`HISTORY_NOT_TOP`) and every file must be
//! exactly as the entry left it on that side (`HISTORY_STALE`, nothing written). It never passes
//! a barrier.

use std::collections::BTreeSet;
use std::sync::Arc;

use inbox::{HistoryEntry, HistoryTops, Transition};
use policy::VaultPath;
use proposals::ops::{FileOp, OpState, Zone, inverse_all};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::call::Call;
use crate::core::{VaultHandle, rfc3339};
use crate::error::{GatewayError, Refused};
use crate::ids::HistoryEntryId;
use crate::txn::{AuditPlan, Intent, Keyed, TxnKind, internal};

/// The `proposal_id` prefix of an undo/redo intent in the intents table (`history:<entry id>`).
pub const INTENT_PREFIX: &str = "history:";

// ---- tool types -------------------------------------------------------------------------------

/// Arguments of `history_undo` and `history_redo`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HistoryMoveArgs {
    /// Vault id (see `vault_list`); optional when one vault is visible or a default is set.
    pub vault: Option<String>,
    /// The entry you mean to move: `undoTop` (for history_undo) or `redoTop` (for history_redo)
    /// as `history_status` reported it. Anything else is refused with HISTORY_NOT_TOP.
    pub expected_history_entry_id: String,
    /// A fresh key per intended undo/redo; retry a lost answer only with the same key.
    pub idempotency_key: String,
}

/// `history_status`, and the answer of `history_undo` / `history_redo`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HistoryStatusOut {
    /// The entry `history_undo` must name; absent when there is nothing to undo (or the newest
    /// entry is a permanent deletion, which cannot be undone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undo_top: Option<String>,
    /// The entry `history_redo` must name; absent when nothing was undone since the last change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redo_top: Option<String>,
    /// The undo top, when a file it touched changed since (undo would be refused: HISTORY_STALE).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale_top: Option<String>,
    /// An undo or redo was interrupted; the next undo or redo finishes (or rolls back) it first.
    pub transition_in_progress: bool,
    /// After an undo or redo: "committed", "queued" or "off", its git commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<String>,
}

/// One entry as the CLI shows it before asking y/N.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntryView {
    pub id: String,
    pub label: String,
    pub kind: String,
    pub created_by: String,
    pub created_at: String,
    pub state: String,
    pub paths: Vec<PathChange>,
}

impl HistoryEntryView {
    /// A few lines for a terminal: the entry and what `t` does to each of its files.
    pub fn describe(&self, t: Transition) -> String {
        let mut s = format!(
            "{}  {}\n  by {} at {}",
            self.id, self.label, self.created_by, self.created_at
        );
        for c in &self.paths {
            let (from, to) = c.sides(t);
            let what = match (from, to) {
                (None, Some(_)) if c.trash.is_some() => "restore from trash",
                (None, Some(_)) => "create",
                (Some(_), None) if c.trash.is_some() => "move to trash",
                (Some(_), None) => "remove",
                _ => "rewrite",
            };
            s.push_str(&format!("\n  {what:<18} {}", c.path));
        }
        s
    }
}

/// One file of a history entry, as the apply recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PathChange {
    pub path: String,
    /// Content hash before the apply; `None`: the file did not exist.
    pub before: Option<String>,
    /// Content hash after the apply; `None`: the file no longer existed.
    pub after: Option<String>,
    /// Where a delete put the file (`.vaultgate/trash/...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trash: Option<String>,
}

impl PathChange {
    /// (what the file must be now, what it becomes) for transition `t`.
    fn sides(&self, t: Transition) -> (Option<&str>, Option<&str>) {
        match t {
            Transition::Undo => (self.after.as_deref(), self.before.as_deref()),
            Transition::Redo => (self.before.as_deref(), self.after.as_deref()),
        }
    }
}

// ---- the plan ---------------------------------------------------------------------------------

impl PathChange {
    /// One file as a person reads the entry (the CLI's confirmation).
    fn of(op: &FileOp) -> Option<PathChange> {
        match op {
            FileOp::Put {
                path, before, after, ..
            } => Some(PathChange {
                path: path.clone(),
                before: before.clone(),
                after: Some(after.clone()),
                trash: None,
            }),
            FileOp::Delete { path, before, .. } => Some(PathChange {
                path: path.clone(),
                before: Some(before.clone()),
                after: None,
                trash: None,
            }),
            FileOp::Rename {
                from,
                to,
                hash,
                to_zone: Zone::Machine,
                ..
            } => Some(PathChange {
                path: from.clone(),
                before: Some(hash.clone()),
                after: None,
                trash: Some(to.clone()),
            }),
            FileOp::Rename { .. } => None,
        }
    }

    /// An entry written by an earlier version (`[{path, before, after, trash}]`), as operations.
    fn legacy_op(&self) -> Option<FileOp> {
        match (&self.before, &self.after, &self.trash) {
            (before, Some(after), _) => Some(FileOp::Put {
                zone: Zone::Note,
                path: self.path.clone(),
                before: before.clone(),
                after: after.clone(),
            }),
            (Some(before), None, Some(trash)) => Some(FileOp::Rename {
                from_zone: Zone::Note,
                from: self.path.clone(),
                to_zone: Zone::Machine,
                to: trash.clone(),
                hash: before.clone(),
            }),
            (Some(before), None, None) => Some(FileOp::Delete {
                zone: Zone::Note,
                path: self.path.clone(),
                before: before.clone(),
            }),
            (None, None, _) => None,
        }
    }
}

/// The operations an entry recorded, in the order its change ran them.
fn entry_ops(entry: &HistoryEntry) -> Result<Vec<FileOp>, GatewayError> {
    if let Ok(ops) = serde_json::from_value::<Vec<FileOp>>(entry.paths.clone()) {
        return Ok(ops);
    }
    let legacy: Vec<PathChange> = serde_json::from_value(entry.paths.clone())
        .map_err(|e| internal(format!("history entry {} has unreadable paths: {e}", entry.id)))?;
    Ok(legacy.iter().filter_map(PathChange::legacy_op).collect())
}

/// What `t` runs for an entry: its operations again (redo) or their inverses (undo).
fn transition_ops(ops: &[FileOp], t: Transition) -> Vec<FileOp> {
    match t {
        Transition::Undo => inverse_all(ops),
        Transition::Redo => ops.to_vec(),
    }
}

pub fn tool_name(t: Transition) -> &'static str {
    match t {
        Transition::Undo => "history_undo",
        Transition::Redo => "history_redo",
    }
}

pub(crate) fn not_top(t: Transition, expected: &str, tops: &HistoryTops) -> GatewayError {
    let top = match t {
        Transition::Undo => &tops.undo,
        Transition::Redo => &tops.redo,
    };
    let now = match top {
        Some(id) => format!("the current {} top is {id}", t.as_str()),
        None => format!("there is nothing to {}", t.as_str()),
    };
    Refused::HistoryNotTop {
        message: format!(
            "{expected} is not the entry history_{} acts on: {now}. Call history_status and pass its {}Top",
            t.as_str(),
            t.as_str()
        ),
    }
    .into()
}

pub(crate) fn stale(t: Transition, entry: &str, path: &str, why: &str) -> GatewayError {
    Refused::HistoryStale {
        message: format!(
            "cannot {} {entry}: {path} {why}; nothing was written. Read the note and propose the change instead",
            t.as_str()
        ),
    }
    .into()
}

/// Undo and redo (here), note history and the git change log (changelog.rs).
pub struct History<'a> {
    pub(crate) core: &'a crate::core::Core,
}

impl History<'_> {
    // ---- reads --------------------------------------------------------------------------------

    /// `history_status`: the tops, whether the undo top went stale, and whether a transition was
    /// interrupted. Takes no lock: a read.
    pub fn history_status(&self, v: &VaultHandle) -> Result<HistoryStatusOut, GatewayError> {
        if v.remote.is_some() {
            return crate::teamundo::status(self.core, v);
        }
        let tops = self.core.state.history_tops(&v.id)?;
        Ok(HistoryStatusOut {
            stale_top: self.stale_top(v, tops.undo.as_deref())?,
            undo_top: tops.undo,
            redo_top: tops.redo,
            transition_in_progress: self.open_transitions(v)?,
            git: None,
        })
    }

    /// The entry `t` would act on now, for the CLI to show; settles an interrupted write first
    /// so the top it shows is the one that counts.
    pub fn history_top(
        &self,
        v: &Arc<VaultHandle>,
        t: Transition,
    ) -> Result<Option<HistoryEntryView>, GatewayError> {
        if v.remote.is_some() {
            return crate::teamundo::top(self.core, v, t);
        }
        self.recover_interrupted(v)?;
        let tops = self.core.state.history_tops(&v.id)?;
        let id = match t {
            Transition::Undo => tops.undo,
            Transition::Redo => tops.redo,
        };
        let Some(id) = id else { return Ok(None) };
        let entry = self
            .core
            .state
            .history_entry(&v.id, &id)?
            .ok_or_else(|| internal(format!("history top {id} vanished")))?;
        Ok(Some(HistoryEntryView {
            paths: entry_ops(&entry)?.iter().filter_map(PathChange::of).collect(),
            id: entry.id,
            label: entry.label,
            kind: entry.kind,
            created_by: entry.created_by,
            created_at: entry.created_at,
            state: entry.state.to_string(),
        }))
    }

    /// Whether an undo/redo intent is open in this vault.
    fn open_transitions(&self, v: &VaultHandle) -> Result<bool, GatewayError> {
        Ok(self
            .core
            .state
            .open_intents(&v.id)?
            .iter()
            .any(|i| i.proposal_id.starts_with(INTENT_PREFIX)))
    }

    /// `Some(id)` when a file of the undo top is no longer as the entry left it.
    fn stale_top(&self, v: &VaultHandle, undo_top: Option<&str>) -> Result<Option<String>, GatewayError> {
        let Some(id) = undo_top else { return Ok(None) };
        let Some(entry) = self.core.state.history_entry(&v.id, id)? else {
            return Ok(None);
        };
        let files = v.files();
        for op in entry_ops(&entry)? {
            // A file that cannot be read as a note any more (a symlink swapped in, the layout
            // changed) cannot be undone either.
            match files.op_state(&op) {
                Ok(OpState::After) => {}
                _ => return Ok(Some(entry.id)),
            }
        }
        Ok(None)
    }

    /// `stale_top` for the answer of a transition about to commit: the entry just redone is, by
    /// construction, exactly at its `after` side.
    pub(crate) fn stale_top_after(
        &self,
        v: &VaultHandle,
        undo_top: Option<&str>,
        t: Transition,
        entry_id: &str,
    ) -> Result<Option<String>, GatewayError> {
        if t == Transition::Redo && undo_top == Some(entry_id) {
            return Ok(None);
        }
        self.stale_top(v, undo_top)
    }

    // ---- transitions --------------------------------------------------------------------------

    /// Undo or redo the top entry, for MCP callers and the CLI alike. The transaction writes the
    /// call's audit line.
    pub fn history_transition(
        &self,
        call: &mut Call<'_>,
        v: &Arc<VaultHandle>,
        t: Transition,
        expected: &HistoryEntryId,
        idempotency_key: &str,
    ) -> Result<HistoryStatusOut, GatewayError> {
        if let Some(team) = crate::teamwrite::team_of(self.core, v) {
            return crate::teamundo::transition(
                self.core,
                team,
                call,
                v,
                t,
                expected.as_str(),
                idempotency_key,
            );
        }
        let first: fn(serde_json::Value) -> Result<HistoryStatusOut, GatewayError> =
            |result| serde_json::from_value(result).map_err(internal);
        self.core.writes().write(
            call,
            v,
            Keyed::Key {
                key: idempotency_key,
                what: "undo/redo",
                first,
            },
            crate::group::Claims::exclusive(),
            |_| Ok(()),
            |call, ()| self.transition_locked(call, v, t, expected.as_str(), idempotency_key),
        )
    }

    /// Undo or redo under the vault's write lock, the key unused and interrupted writes settled.
    fn transition_locked(
        &self,
        call: &mut Call<'_>,
        v: &Arc<VaultHandle>,
        t: Transition,
        expected: &str,
        idempotency_key: &str,
    ) -> Result<HistoryStatusOut, GatewayError> {
        let principal = call.actor().principal_id();
        let args_hash = call.args_hash();

        if !self.core.state.history_is_top(&v.id, expected, t)? {
            return Err(not_top(t, expected, &self.core.state.history_tops(&v.id)?));
        }
        let entry = self
            .core
            .state
            .history_entry(&v.id, expected)?
            .ok_or_else(|| internal(format!("history top {expected} vanished")))?;
        let ops = transition_ops(&entry_ops(&entry)?, t);
        self.check_sides(v, &entry.id, &ops, t)?;
        let files = v.files();
        // Every blob the operations (or their rollback) write must be there before anything is.
        for op in &ops {
            for b in op.blobs() {
                if !files.has_blob(b)? {
                    return Err(internal(format!("history object {b} is missing")));
                }
            }
        }
        let intent = Intent {
            txn: TxnKind::History {
                transition: t,
                entry_id: entry.id.clone(),
                label: entry.label.clone(),
            },
            note_ops: ops.len(),
            ops,
            audit: AuditPlan {
                actor: call.actor().audit_actor(),
                actor_label: call.actor().label(),
                event: call.event().to_owned(),
                tool: tool_name(t).into(),
                args_hash,
                idempotency: Some((principal, idempotency_key.to_owned())),
                log_offset: self.core.audit.end_offset()?,
                approval: None,
            },
            started_at: rfc3339(time::OffsetDateTime::now_utc()),
            rolling_back: false,
            epoch: call.lease_epoch(),
        };
        let at = self
            .core
            .writes()
            .begin_txn(call, v, &format!("{INTENT_PREFIX}{}", entry.id), &intent)?;
        self.core.writes().failpoint(&intent.txn, "after_intent");
        let committed = self
            .core
            .writes()
            .run_txn(v, &at, &intent, inbox::INTENT_STARTED, Some(call))?;
        serde_json::from_value(committed.result).map_err(internal)
    }

    /// SECURITY(T-PROP2): every operation must find its files exactly as the entry left them on
    /// this side, and a file the transition creates must not collide by case or normalization
    /// with another; else `HISTORY_STALE` and nothing is written.
    fn check_sides(
        &self,
        v: &VaultHandle,
        entry: &str,
        ops: &[FileOp],
        t: Transition,
    ) -> Result<(), GatewayError> {
        let fs = v.reader.fs();
        let files = v.files();
        let own: BTreeSet<&str> = ops.iter().flat_map(|op| op.paths()).map(|(_, p)| p).collect();
        for op in ops {
            let path = op
                .paths()
                .first()
                .map(|(_, p)| (*p).to_owned())
                .unwrap_or_default();
            match files.op_state(op)? {
                OpState::Before => {}
                OpState::After | OpState::Other => {
                    return Err(stale(t, entry, &path, "changed since"));
                }
            }
            let created = match op {
                FileOp::Put {
                    zone: Zone::Note,
                    path,
                    before: None,
                    ..
                } => Some(path),
                FileOp::Rename {
                    to_zone: Zone::Note,
                    to,
                    ..
                } => Some(to),
                _ => None,
            };
            if let Some(created) = created
                && let Some(other) = fs.find_collision(&VaultPath::parse(created)?)?
                && !own.contains(other.as_str())
            {
                return Err(stale(
                    t,
                    entry,
                    created,
                    &format!("would differ from the existing {other} only by case or normalization"),
                ));
            }
        }
        Ok(())
    }

    /// Takes the vault's write lock and settles every interrupted write.
    pub fn recover_interrupted(&self, v: &Arc<VaultHandle>) -> Result<(), GatewayError> {
        let _lock = v.reader.fs().write_lock()?;
        self.core.writes().recover(v)
    }
}

/// The CLI's one-screen summary of `history status`.
pub fn describe_status(vault: &str, s: &HistoryStatusOut) -> String {
    let mut out = format!("vault '{vault}'");
    match &s.undo_top {
        Some(id) if s.stale_top.as_deref() == Some(id) => out.push_str(&format!(
            "\n  undo: {id} (stale: a file changed since; undo is refused)"
        )),
        Some(id) => out.push_str(&format!("\n  undo: {id}")),
        None => out.push_str("\n  undo: nothing to undo"),
    }
    match &s.redo_top {
        Some(id) => out.push_str(&format!("\n  redo: {id}")),
        None => out.push_str("\n  redo: nothing to redo"),
    }
    if s.transition_in_progress {
        out.push_str("\n  an interrupted undo/redo is pending; the next undo or redo finishes it first");
    }
    out
}
