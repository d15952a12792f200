//! History undo/redo (SPEC §8): one linear history per vault, shared by every client and the CLI.
//!
//! An undo swaps every file of the top entry from its `after` hash back to its `before` hash (a
//! redo the reverse), with the blobs the apply kept in `.vaultgate/objects`. It runs like the apply
//! transaction: under the vault's exclusive write lock, after finishing interrupted writes; the
//! idempotency key first; `expectedHistoryEntryId` must name the current top (`HISTORY_NOT_TOP`)
//! and every file must still be exactly as the entry left it (`HISTORY_STALE`, nothing written);
//! then an intent with the whole plan, idempotent file steps, a durable audit line, and one SQLite
//! commit (entry state + revision + idempotency record + intent removed). A crash is rolled
//! forward by [`Core::recover_history`]; a file changed outside vaultgate meanwhile makes it roll
//! back instead, restoring what it had written and never touching the outside change.
//!
//! It never writes a file whose current hash it has not just checked, and never passes a barrier.

use std::collections::BTreeSet;
use std::sync::Arc;

use inbox::{HistoryEntry, HistoryTops, Transition};
use policy::{ErrorCode, VaultPath};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use vault::write::{Area, WriteMode};

use crate::apply::{Op, failpoint, is_exists};
use crate::core::{Actor, Core, VaultHandle, rfc3339};
use crate::error::GatewayError;
use crate::proposing::current;

/// The `proposal_id` prefix of an undo/redo intent in the intents table (`history:<entry id>`).
pub const INTENT_PREFIX: &str = "history:";
/// The intent step recorded before an abandoned transition puts its files back.
const ROLLING_BACK: &str = "rolling_back";

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

/// One idempotent file step of a transition. Write, Remove and Trash are the apply's own
/// operations (`apply::Op`), checked by hash the same way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "camelCase")]
enum Step {
    /// Write the blob `after` over `before` (`None`: the file must not exist).
    Write {
        path: String,
        before: Option<String>,
        after: String,
    },
    /// Remove the file (at `before`).
    Remove { path: String, before: String },
    /// Move the file (at `before`) into the trash at `to` (redo of a delete).
    Trash {
        path: String,
        before: String,
        to: String,
    },
    /// Drop the trash copy `to` of a note an undo restored (left alone unless it holds `hash`).
    Untrash { to: String, hash: String },
    /// Put the trash copy `to` back from the blob `hash` (the inverse of `Untrash`).
    Retrash { to: String, hash: String },
}

impl Step {
    /// The steps that undo this one, each as idempotent as the step itself.
    fn inverse(&self) -> Vec<Step> {
        match self.clone() {
            Step::Write {
                path,
                before: Some(before),
                after,
            } => vec![Step::Write {
                path,
                before: Some(after),
                after: before,
            }],
            Step::Write {
                path,
                before: None,
                after,
            } => vec![Step::Remove { path, before: after }],
            Step::Remove { path, before } => vec![Step::Write {
                path,
                before: None,
                after: before,
            }],
            Step::Trash { path, before, to } => vec![
                Step::Write {
                    path,
                    before: None,
                    after: before.clone(),
                },
                Step::Untrash { to, hash: before },
            ],
            Step::Untrash { to, hash } => vec![Step::Retrash { to, hash }],
            Step::Retrash { to, hash } => vec![Step::Untrash { to, hash }],
        }
    }
}

/// Everything needed to finish (or roll back) a transition, stored in its intent before any
/// file is written.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TransitionPlan {
    transition: Transition,
    entry_id: String,
    label: String,
    steps: Vec<Step>,
    started_at: String,
    audit: AuditPlan,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AuditPlan {
    actor: audit::Actor,
    args_hash: String,
    /// (principal, key)
    idempotency: Option<(String, String)>,
}

/// The steps that take every file of `changes` from one side to the other: writes first (so a
/// moved note is never missing), then removals, then trash clean-up.
fn plan_steps(changes: &[PathChange], t: Transition) -> Vec<Step> {
    let (mut writes, mut removes, mut untrash) = (Vec::new(), Vec::new(), Vec::new());
    for c in changes {
        let (from, to) = c.sides(t);
        match (from, to) {
            (from, Some(to)) => {
                writes.push(Step::Write {
                    path: c.path.clone(),
                    before: from.map(str::to_owned),
                    after: to.to_owned(),
                });
                // An undone delete: the note comes back from the objects store, and its trash
                // copy goes, so a redo can put it there again.
                if let (None, Some(trash)) = (from, &c.trash) {
                    untrash.push(Step::Untrash {
                        to: trash.clone(),
                        hash: to.to_owned(),
                    });
                }
            }
            (Some(from), None) => removes.push(match &c.trash {
                Some(trash) => Step::Trash {
                    path: c.path.clone(),
                    before: from.to_owned(),
                    to: trash.clone(),
                },
                None => Step::Remove {
                    path: c.path.clone(),
                    before: from.to_owned(),
                },
            }),
            (None, None) => {}
        }
    }
    writes.into_iter().chain(removes).chain(untrash).collect()
}

fn parse_changes(entry: &HistoryEntry) -> Result<Vec<PathChange>, GatewayError> {
    serde_json::from_value(entry.paths.clone())
        .map_err(|e| internal(format!("history entry {} has unreadable paths: {e}", entry.id)))
}

pub fn tool_name(t: Transition) -> &'static str {
    match t {
        Transition::Undo => "history_undo",
        Transition::Redo => "history_redo",
    }
}

fn internal(e: impl std::fmt::Display) -> GatewayError {
    GatewayError::Internal(e.to_string())
}

fn refusal(code: ErrorCode, msg: impl Into<String>) -> GatewayError {
    GatewayError::Proposal(code, msg.into())
}

fn not_top(t: Transition, expected: &str, tops: &HistoryTops) -> GatewayError {
    let top = match t {
        Transition::Undo => &tops.undo,
        Transition::Redo => &tops.redo,
    };
    let now = match top {
        Some(id) => format!("the current {} top is {id}", t.as_str()),
        None => format!("there is nothing to {}", t.as_str()),
    };
    refusal(
        ErrorCode::HISTORY_NOT_TOP,
        format!(
            "{expected} is not the entry history_{} acts on: {now}. Call history_status and pass its {}Top",
            t.as_str(),
            t.as_str()
        ),
    )
}

fn stale(t: Transition, entry: &str, path: &str, why: &str) -> GatewayError {
    refusal(
        ErrorCode::HISTORY_STALE,
        format!(
            "cannot {} {entry}: {path} {why}; nothing was written. Read the note and propose the change instead",
            t.as_str()
        ),
    )
}

/// A step found its file in neither of the states it expects: someone changed it outside
/// vaultgate (the write lock keeps every vaultgate writer out).
fn is_stale(e: &GatewayError) -> bool {
    matches!(
        e.code(),
        ErrorCode::PROPOSAL_STALE_BASE | ErrorCode::PROPOSAL_TARGET_EXISTS
    )
}

impl Core {
    // ---- reads --------------------------------------------------------------------------------

    /// `history_status`: the tops, whether the undo top went stale, and whether a transition was
    /// interrupted. Takes no lock: a read.
    pub fn history_status(&self, v: &VaultHandle) -> Result<HistoryStatusOut, GatewayError> {
        let tops = self.state.history_tops(&v.id)?;
        Ok(HistoryStatusOut {
            stale_top: self.stale_top(v, tops.undo.as_deref())?,
            undo_top: tops.undo,
            redo_top: tops.redo,
            transition_in_progress: self.open_transitions(v, None)?,
        })
    }

    /// The entry `t` would act on now, for the CLI to show; finishes an interrupted write first
    /// so the top it shows is the one that counts.
    pub fn history_top(
        &self,
        v: &Arc<VaultHandle>,
        t: Transition,
    ) -> Result<Option<HistoryEntryView>, GatewayError> {
        self.recover_interrupted(v)?;
        let tops = self.state.history_tops(&v.id)?;
        let id = match t {
            Transition::Undo => tops.undo,
            Transition::Redo => tops.redo,
        };
        let Some(id) = id else { return Ok(None) };
        let entry = self
            .state
            .history_entry(&v.id, &id)?
            .ok_or_else(|| internal(format!("history top {id} vanished")))?;
        Ok(Some(HistoryEntryView {
            paths: parse_changes(&entry)?,
            id: entry.id,
            label: entry.label,
            kind: entry.kind,
            created_by: entry.created_by,
            created_at: entry.created_at,
            state: entry.state.to_string(),
        }))
    }

    /// Whether an undo/redo intent other than `except` is open in this vault.
    fn open_transitions(&self, v: &VaultHandle, except: Option<i64>) -> Result<bool, GatewayError> {
        Ok(self
            .state
            .open_intents(&v.id)?
            .iter()
            .any(|i| i.proposal_id.starts_with(INTENT_PREFIX) && Some(i.id) != except))
    }

    /// `Some(id)` when a file of the undo top no longer has the hash the entry left it with.
    fn stale_top(&self, v: &VaultHandle, undo_top: Option<&str>) -> Result<Option<String>, GatewayError> {
        let Some(id) = undo_top else { return Ok(None) };
        let Some(entry) = self.state.history_entry(&v.id, id)? else {
            return Ok(None);
        };
        for c in parse_changes(&entry)? {
            // A file that cannot be read as a note any more (a symlink swapped in, the layout
            // changed) cannot be undone either.
            let now = VaultPath::parse(&c.path)
                .map_err(GatewayError::from)
                .and_then(|p| current(v, &p))
                .map(|cur| cur.map(|(_, h)| h));
            if now.ok().as_ref().map(Option::as_deref) != Some(c.after.as_deref()) {
                return Ok(Some(entry.id));
            }
        }
        Ok(None)
    }

    // ---- transitions --------------------------------------------------------------------------

    /// `history_undo` for MCP callers and the CLI alike.
    pub fn history_undo(
        &self,
        actor: &Actor,
        v: &Arc<VaultHandle>,
        expected: &str,
        idempotency_key: &str,
        args_hash: &str,
    ) -> Result<HistoryStatusOut, GatewayError> {
        self.history_transition(actor, v, Transition::Undo, expected, idempotency_key, args_hash)
    }

    /// `history_redo` for MCP callers and the CLI alike.
    pub fn history_redo(
        &self,
        actor: &Actor,
        v: &Arc<VaultHandle>,
        expected: &str,
        idempotency_key: &str,
        args_hash: &str,
    ) -> Result<HistoryStatusOut, GatewayError> {
        self.history_transition(actor, v, Transition::Redo, expected, idempotency_key, args_hash)
    }

    /// Undo or redo the top entry. On success the caller's audit line is already durable (written
    /// inside the transition, or for a replay here), so the edge records nothing more.
    pub fn history_transition(
        &self,
        actor: &Actor,
        v: &Arc<VaultHandle>,
        t: Transition,
        expected: &str,
        idempotency_key: &str,
        args_hash: &str,
    ) -> Result<HistoryStatusOut, GatewayError> {
        if idempotency_key.trim().is_empty() {
            return Err(GatewayError::InvalidArgument(
                "idempotencyKey must not be empty".into(),
            ));
        }
        let principal = actor.principal_id();
        // SECURITY(T-PROP3): the same key with the same arguments answers with the first result and
        // does nothing; other arguments under a used key are refused.
        if let Some(rec) = self.state.idempotency_get(&principal, idempotency_key)? {
            return self.replay(actor, v, t, expected, rec, args_hash);
        }
        // SECURITY(T-PROP4): one writer per vault across every process (server, CLI).
        let _lock = v.reader.fs().write_lock()?;
        if let Some(rec) = self.state.idempotency_get(&principal, idempotency_key)? {
            return self.replay(actor, v, t, expected, rec, args_hash);
        }
        self.recover(v)?;
        self.recover_history(v)?;

        if !self.state.history_is_top(&v.id, expected, t)? {
            return Err(not_top(t, expected, &self.state.history_tops(&v.id)?));
        }
        let entry = self
            .state
            .history_entry(&v.id, expected)?
            .ok_or_else(|| internal(format!("history top {expected} vanished")))?;
        let changes = parse_changes(&entry)?;
        self.check_sides(v, &entry.id, &changes, t)?;
        let steps = plan_steps(&changes, t);
        // Every blob the steps write must be there before anything is written.
        for s in &steps {
            if let Step::Write { after, .. } = s {
                self.object(v, after)?;
            }
        }
        let now = rfc3339(time::OffsetDateTime::now_utc());
        let plan = TransitionPlan {
            transition: t,
            entry_id: entry.id.clone(),
            label: entry.label.clone(),
            steps,
            started_at: now.clone(),
            audit: AuditPlan {
                actor: actor.audit_actor(),
                args_hash: args_hash.to_owned(),
                idempotency: Some((principal, idempotency_key.to_owned())),
            },
        };
        let plan_json = serde_json::to_value(&plan).map_err(internal)?;
        let intent =
            self.state
                .begin_intent(&v.id, &format!("{INTENT_PREFIX}{}", entry.id), &plan_json, &now)?;
        failpoint("history_after_intent");
        self.drive(v, intent, &plan, inbox::INTENT_STARTED, false)
    }

    /// SECURITY(T-PROP2): every file of the entry must be exactly as the entry left it on this
    /// side (`after` for an undo, `before` for a redo), and a file the transition creates must not
    /// collide by case or normalization with another; else `HISTORY_STALE` and nothing is written.
    fn check_sides(
        &self,
        v: &VaultHandle,
        entry: &str,
        changes: &[PathChange],
        t: Transition,
    ) -> Result<(), GatewayError> {
        let fs = v.reader.fs();
        let own: BTreeSet<&str> = changes.iter().map(|c| c.path.as_str()).collect();
        for c in changes {
            let p = VaultPath::parse(&c.path)?;
            let (from, to) = c.sides(t);
            let now = current(v, &p)?.map(|(_, h)| h);
            if now.as_deref() != from {
                let why = match (from, now) {
                    (Some(_), Some(_)) => "changed since",
                    (Some(_), None) => "was deleted since",
                    (None, _) => "was created since",
                };
                return Err(stale(t, entry, &c.path, why));
            }
            if from.is_none()
                && to.is_some()
                && let Some(other) = fs.find_collision(&p)?
                && !own.contains(other.as_str())
            {
                return Err(stale(
                    t,
                    entry,
                    &c.path,
                    &format!("would differ from the existing {other} only by case or normalization"),
                ));
            }
            if t == Transition::Redo
                && to.is_none()
                && let Some(trash) = &c.trash
                && fs
                    .read_for_write(Area::Machine, &VaultPath::parse(trash)?)?
                    .is_some()
            {
                return Err(stale(t, entry, &c.path, "already has a copy in the trash"));
            }
        }
        Ok(())
    }

    /// Runs a transition's steps from its intent, audits it and commits it; a file changed
    /// outside vaultgate on the way makes it roll back instead (see [`Core::abandon`]).
    fn drive(
        &self,
        v: &Arc<VaultHandle>,
        intent: i64,
        plan: &TransitionPlan,
        step: &str,
        recovering: bool,
    ) -> Result<HistoryStatusOut, GatewayError> {
        let t = plan.transition;
        if step == ROLLING_BACK {
            return self.abandon(v, intent, plan, None);
        }
        for s in &plan.steps {
            match self.run_step(v, s) {
                Ok(()) => {}
                Err(e) if is_stale(&e) => return self.abandon(v, intent, plan, Some(&e)),
                Err(e) => return Err(e),
            }
        }
        failpoint("history_after_write");
        let entry = audit::Entry {
            event: if recovering {
                "history.recovered".into()
            } else {
                "tool_call".into()
            },
            actor: plan.audit.actor.clone(),
            vault: Some(v.id.clone()),
            tool: Some(tool_name(t).into()),
            target: Some(plan.entry_id.clone()),
            proposal_id: None,
            challenge_id: None,
            outcome: audit::Outcome::Ok,
            code: None,
            args_hash: Some(plan.audit.args_hash.clone()),
        };
        self.audit
            .append(entry, time::OffsetDateTime::now_utc(), audit::Durability::Sync)?;
        failpoint("history_after_audit");
        // The answer, as it will be once this commits (the lock keeps every other writer out).
        let tops = self.state.history_tops_after(&v.id, &plan.entry_id, t)?;
        let result = HistoryStatusOut {
            stale_top: self.stale_top_after(v, tops.undo.as_deref(), plan)?,
            undo_top: tops.undo,
            redo_top: tops.redo,
            transition_in_progress: self.open_transitions(v, Some(intent))?,
        };
        let result_json = serde_json::to_value(&result).map_err(internal)?;
        let at = rfc3339(time::OffsetDateTime::now_utc());
        let idem = plan
            .audit
            .idempotency
            .as_ref()
            .map(|(principal, key)| inbox::IdemKey {
                credential_id: principal,
                key,
                tool: tool_name(t),
                args_hash: &plan.audit.args_hash,
            });
        let committed = self.state.finish_history_transition(&inbox::HistoryTransition {
            intent_id: intent,
            vault: &v.id,
            entry_id: &plan.entry_id,
            transition: t,
            result: &result_json,
            at: &at,
            idempotency: idem,
        })?;
        let Some(committed) = committed else {
            // Not the top any more (only a hand-edited database gets here under the lock).
            let e = not_top(t, &plan.entry_id, &self.state.history_tops(&v.id)?);
            return self.abandon(v, intent, plan, Some(&e));
        };
        failpoint("history_after_commit");
        // The files changed through vaultgate: the revision moved in the commit; record the new
        // fingerprint so the watcher does not count it again, and announce `vault.changed`.
        self.settle_after_write(v, committed.revision);
        Ok(result)
    }

    /// `stale_top` for the answer of a transition that has not committed yet: the entry being
    /// moved is never the undo top's concern unless it is the undo top (a redo).
    fn stale_top_after(
        &self,
        v: &VaultHandle,
        undo_top: Option<&str>,
        plan: &TransitionPlan,
    ) -> Result<Option<String>, GatewayError> {
        // The entry just redone is, by construction, exactly at its `after` side.
        if plan.transition == Transition::Redo && undo_top == Some(plan.entry_id.as_str()) {
            return Ok(None);
        }
        self.stale_top(v, undo_top)
    }

    /// Gives up a transition: records that it is rolling back, puts back every file it wrote
    /// (a file in neither state was changed outside vaultgate and is left as it is), deletes the
    /// intent, and answers `HISTORY_STALE` (or `cause`).
    fn abandon(
        &self,
        v: &VaultHandle,
        intent: i64,
        plan: &TransitionPlan,
        cause: Option<&GatewayError>,
    ) -> Result<HistoryStatusOut, GatewayError> {
        let at = rfc3339(time::OffsetDateTime::now_utc());
        self.state.advance_intent(intent, ROLLING_BACK, &at)?;
        for s in plan.steps.iter().rev() {
            for inv in s.inverse() {
                match self.run_step(v, &inv) {
                    Ok(()) => {}
                    Err(e) if is_stale(&e) => {
                        tracing::warn!(entry = %plan.entry_id, error = %e, "left a file changed outside vaultgate as it is");
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        failpoint("history_after_rollback");
        self.state.finish_intent(intent)?;
        tracing::warn!(entry = %plan.entry_id, transition = plan.transition.as_str(), "history transition rolled back");
        Err(match cause {
            Some(e) if e.code() == ErrorCode::HISTORY_NOT_TOP => {
                refusal(ErrorCode::HISTORY_NOT_TOP, e.to_string())
            }
            _ => refusal(
                ErrorCode::HISTORY_STALE,
                format!(
                    "cannot {} {}: a file changed outside vaultgate while it ran; everything it wrote was put back",
                    plan.transition.as_str(),
                    plan.entry_id
                ),
            ),
        })
    }

    fn run_step(&self, v: &VaultHandle, s: &Step) -> Result<(), GatewayError> {
        let fs = v.reader.fs();
        match s {
            Step::Write { path, before, after } => self.run_op(
                v,
                &Op::Write {
                    path: path.clone(),
                    before: before.clone(),
                    after: after.clone(),
                },
            ),
            Step::Remove { path, before } => self.run_op(
                v,
                &Op::Remove {
                    path: path.clone(),
                    before: before.clone(),
                },
            ),
            Step::Trash { path, before, to } => self.run_op(
                v,
                &Op::Trash {
                    path: path.clone(),
                    before: before.clone(),
                    to: to.clone(),
                },
            ),
            Step::Untrash { to, hash } => {
                let p = VaultPath::parse(to)?;
                match fs.read_for_write(Area::Machine, &p)? {
                    Some((_, h)) if h == *hash => fs.remove_file(Area::Machine, &p)?,
                    Some(_) => tracing::warn!(path = %p, "trash copy holds other bytes; left in place"),
                    None => {}
                }
                Ok(())
            }
            Step::Retrash { to, hash } => {
                let p = VaultPath::parse(to)?;
                if fs.read_for_write(Area::Machine, &p)?.is_some() {
                    return Ok(());
                }
                let bytes = self.object(v, hash)?;
                match fs.write_atomic(Area::Machine, &p, &bytes, WriteMode::Exclusive) {
                    Err(e) if !is_exists(&e) => Err(e.into()),
                    _ => Ok(()),
                }
            }
        }
    }

    /// A retried call: the first answer if the arguments are the same, else `IDEMPOTENCY_CONFLICT`.
    /// Audited here, because the edge leaves successful undo/redo calls to this module.
    fn replay(
        &self,
        actor: &Actor,
        v: &VaultHandle,
        t: Transition,
        expected: &str,
        rec: inbox::IdemRecord,
        args_hash: &str,
    ) -> Result<HistoryStatusOut, GatewayError> {
        if !rec.same_call(tool_name(t), args_hash) {
            return Err(refusal(
                ErrorCode::IDEMPOTENCY_CONFLICT,
                "this idempotencyKey was used with other arguments; use a new key for a new undo/redo",
            ));
        }
        let out: HistoryStatusOut = serde_json::from_value(rec.result).map_err(internal)?;
        self.audit.append(
            audit::Entry {
                event: "tool_call".into(),
                actor: actor.audit_actor(),
                vault: Some(v.id.clone()),
                tool: Some(tool_name(t).into()),
                target: Some(expected.to_owned()),
                proposal_id: None,
                challenge_id: None,
                outcome: audit::Outcome::Ok,
                code: None,
                args_hash: Some(args_hash.to_owned()),
            },
            time::OffsetDateTime::now_utc(),
            audit::Durability::Sync,
        )?;
        Ok(out)
    }

    // ---- recovery -----------------------------------------------------------------------------

    /// Finishes (or rolls back) every undo/redo of this vault that a crash interrupted. Called
    /// under the write lock. A transition that cannot be finished because a file changed outside
    /// vaultgate meanwhile is rolled back and logged; any other failure stops here and leaves
    /// its intent for a person, like an interrupted apply.
    pub fn recover_history(&self, v: &Arc<VaultHandle>) -> Result<(), GatewayError> {
        for intent in self.state.open_intents(&v.id)? {
            if !intent.proposal_id.starts_with(INTENT_PREFIX) {
                continue;
            }
            let plan: TransitionPlan = match serde_json::from_value(intent.plan.clone()) {
                Ok(p) => p,
                Err(e) => {
                    tracing::error!(intent = intent.id, error = %e, "unreadable history intent left in place");
                    continue;
                }
            };
            tracing::warn!(entry = %plan.entry_id, transition = plan.transition.as_str(), "finishing an interrupted history transition");
            match self.drive(v, intent.id, &plan, &intent.step, true) {
                Ok(_) => {}
                Err(e) if matches!(e.code(), ErrorCode::HISTORY_STALE | ErrorCode::HISTORY_NOT_TOP) => {
                    self.audit.append(
                        audit::Entry {
                            event: "history.rolled_back".into(),
                            actor: plan.audit.actor.clone(),
                            vault: Some(v.id.clone()),
                            tool: Some(tool_name(plan.transition).into()),
                            target: Some(plan.entry_id.clone()),
                            proposal_id: None,
                            challenge_id: None,
                            outcome: audit::Outcome::Error,
                            code: Some(e.code().as_str().into()),
                            args_hash: Some(plan.audit.args_hash.clone()),
                        },
                        time::OffsetDateTime::now_utc(),
                        audit::Durability::Sync,
                    )?;
                }
                Err(e) => {
                    tracing::error!(intent = intent.id, error = %e, "cannot finish an interrupted history transition");
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Takes the vault's write lock and finishes every interrupted apply and undo/redo.
    pub fn recover_interrupted(&self, v: &Arc<VaultHandle>) -> Result<(), GatewayError> {
        let _lock = v.reader.fs().write_lock()?;
        self.recover(v)?;
        self.recover_history(v)
    }

    /// At start: finishes interrupted undo/redo transitions in every vault (each under its lock).
    pub fn recover_history_all(&self) {
        for v in self.all_vaults() {
            match self.open_transitions(&v, None) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    tracing::error!(vault = %v.id, error = %e, "reading history intents failed");
                    continue;
                }
            }
            let result = v
                .reader
                .fs()
                .write_lock()
                .map_err(GatewayError::from)
                .and_then(|_lock| self.recover_history(&v));
            if let Err(e) = result {
                tracing::error!(vault = %v.id, error = %e, "recovering interrupted undo/redo failed");
            }
        }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn change(path: &str, before: Option<&str>, after: Option<&str>, trash: Option<&str>) -> PathChange {
        PathChange {
            path: path.into(),
            before: before.map(Into::into),
            after: after.map(Into::into),
            trash: trash.map(Into::into),
        }
    }

    /// A move as the apply records it: the new path, one rewritten linking note, the old path.
    fn a_move() -> Vec<PathChange> {
        vec![
            change("z/new.md", None, Some("m1"), None),
            change("z/moc.md", Some("l0"), Some("l1"), None),
            change("z/old.md", Some("m0"), None, None),
        ]
    }

    #[test]
    fn undoing_a_move_restores_the_old_path_and_links_before_removing_the_new_one() {
        let steps = plan_steps(&a_move(), Transition::Undo);
        assert_eq!(
            steps,
            [
                Step::Write {
                    path: "z/moc.md".into(),
                    before: Some("l1".into()),
                    after: "l0".into()
                },
                Step::Write {
                    path: "z/old.md".into(),
                    before: None,
                    after: "m0".into()
                },
                Step::Remove {
                    path: "z/new.md".into(),
                    before: "m1".into()
                },
            ]
        );
        let redo = plan_steps(&a_move(), Transition::Redo);
        assert_eq!(
            redo,
            [
                Step::Write {
                    path: "z/new.md".into(),
                    before: None,
                    after: "m1".into()
                },
                Step::Write {
                    path: "z/moc.md".into(),
                    before: Some("l0".into()),
                    after: "l1".into()
                },
                Step::Remove {
                    path: "z/old.md".into(),
                    before: "m0".into()
                },
            ]
        );
    }

    #[test]
    fn a_delete_comes_back_from_the_objects_store_and_goes_back_to_the_trash() {
        let del = [change(
            "z/a.md",
            Some("h0"),
            None,
            Some(".vaultgate/trash/p1/z/a.md"),
        )];
        assert_eq!(
            plan_steps(&del, Transition::Undo),
            [
                Step::Write {
                    path: "z/a.md".into(),
                    before: None,
                    after: "h0".into()
                },
                Step::Untrash {
                    to: ".vaultgate/trash/p1/z/a.md".into(),
                    hash: "h0".into()
                },
            ]
        );
        assert_eq!(
            plan_steps(&del, Transition::Redo),
            [Step::Trash {
                path: "z/a.md".into(),
                before: "h0".into(),
                to: ".vaultgate/trash/p1/z/a.md".into()
            }]
        );
    }

    #[test]
    fn every_step_has_an_inverse_that_takes_it_back() {
        let steps = [
            Step::Write {
                path: "a.md".into(),
                before: Some("x".into()),
                after: "y".into(),
            },
            Step::Write {
                path: "a.md".into(),
                before: None,
                after: "y".into(),
            },
            Step::Remove {
                path: "a.md".into(),
                before: "x".into(),
            },
            Step::Untrash {
                to: ".vaultgate/trash/p/a.md".into(),
                hash: "x".into(),
            },
        ];
        for s in &steps {
            let back: Vec<Step> = s.inverse().iter().flat_map(Step::inverse).collect();
            assert_eq!(back, std::slice::from_ref(s), "{s:?}");
        }
        let trash = Step::Trash {
            path: "a.md".into(),
            before: "x".into(),
            to: ".vaultgate/trash/p/a.md".into(),
        };
        assert_eq!(
            trash.inverse(),
            [
                Step::Write {
                    path: "a.md".into(),
                    before: None,
                    after: "x".into()
                },
                Step::Untrash {
                    to: ".vaultgate/trash/p/a.md".into(),
                    hash: "x".into()
                },
            ]
        );
    }

    #[test]
    fn status_skips_absent_tops_and_always_says_whether_a_transition_is_pending() {
        let s = HistoryStatusOut::default();
        assert_eq!(
            serde_json::to_value(&s).unwrap(),
            serde_json::json!({"transitionInProgress": false})
        );
        let s = HistoryStatusOut {
            undo_top: Some("h_1".into()),
            stale_top: Some("h_1".into()),
            ..HistoryStatusOut::default()
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"undoTop": "h_1", "staleTop": "h_1", "transitionInProgress": false})
        );
        assert_eq!(serde_json::from_value::<HistoryStatusOut>(v).unwrap(), s);
        assert!(describe_status("basic", &s).contains("stale"));
    }

    /// A home with one vault holding `a.md`, opened as a `Core`.
    fn core_with_note() -> (tempfile::TempDir, Core, Arc<VaultHandle>) {
        let tmp = tempfile::tempdir().unwrap();
        let home = crate::home::Home {
            dir: tmp.path().join("home"),
        };
        home.init().unwrap();
        let vault = tmp.path().join("vault");
        std::fs::create_dir_all(&vault).unwrap();
        std::fs::write(vault.join("a.md"), b"# A\n").unwrap();
        crate::cli::add_vault(
            &home,
            crate::cli::VaultAdd {
                path: vault,
                id: Some("v".into()),
                name: None,
                notes: vec![],
                standards: vec![],
                inbox: None,
                default: true,
            },
        )
        .unwrap();
        let core = Core::open(home).unwrap();
        let v = core.vault_for_cli(Some("v")).unwrap();
        (tmp, core, v)
    }

    /// Records `a.md` as created by entry `id` (its blob kept), as an applied new note would.
    fn created_by(core: &Core, v: &VaultHandle, id: &str, barrier: bool) {
        let bytes = b"# A\n";
        let hash = proposals::sha256_hex(bytes);
        core.store_object(v, &hash, bytes).unwrap();
        let paths = serde_json::json!([{"path": "a.md", "before": null, "after": hash}]);
        core.state
            .add_history(
                &v.id,
                &inbox::NewHistory {
                    id,
                    label: "new a.md",
                    kind: if barrier { "delete_permanent" } else { "new" },
                    created_by: "cli:me",
                    created_at: "2026-05-01T00:00:00Z",
                    paths: &paths,
                    barrier,
                },
            )
            .unwrap();
    }

    #[test]
    fn undo_stops_at_a_barrier_and_never_passes_it() {
        let (tmp, core, v) = core_with_note();
        let me = Actor::Cli("me".into());
        let note = tmp.path().join("vault/a.md");
        created_by(&core, &v, "h_1", false);
        let s = core.history_undo(&me, &v, "h_1", "k1", "args1").unwrap();
        assert_eq!(s.redo_top.as_deref(), Some("h_1"));
        assert!(!note.exists());
        core.history_redo(&me, &v, "h_1", "k2", "args2").unwrap();
        assert_eq!(std::fs::read(&note).unwrap(), b"# A\n");

        // A permanent deletion on top: nothing can be undone, neither it nor what lies below.
        created_by(&core, &v, "h_perm", true);
        let s = core.history_status(&v).unwrap();
        assert_eq!(s, HistoryStatusOut::default());
        for (id, key) in [("h_perm", "k3"), ("h_1", "k4")] {
            let e = core.history_undo(&me, &v, id, key, "args").unwrap_err();
            assert_eq!(e.code(), ErrorCode::HISTORY_NOT_TOP, "{id}: {e}");
        }
        assert_eq!(std::fs::read(&note).unwrap(), b"# A\n", "nothing written");
        assert!(core.state.open_intents(&v.id).unwrap().is_empty());
    }

    #[test]
    fn an_interrupted_transition_is_finished_or_rolled_back_from_its_intent() {
        let (tmp, core, v) = core_with_note();
        let note = tmp.path().join("vault/a.md");
        created_by(&core, &v, "h_1", false);
        let plan = |key: &str| TransitionPlan {
            transition: Transition::Undo,
            entry_id: "h_1".into(),
            label: "new a.md".into(),
            steps: plan_steps(
                &parse_changes(&core.state.history_entry("v", "h_1").unwrap().unwrap()).unwrap(),
                Transition::Undo,
            ),
            started_at: "t".into(),
            audit: AuditPlan {
                actor: audit::Actor::Cli { user: "me".into() },
                args_hash: "a".into(),
                idempotency: Some(("cli:me".into(), key.into())),
            },
        };
        // Crashed before its first step: recovery finishes it and records the key's answer.
        let p = plan("k1");
        core.state
            .begin_intent("v", "history:h_1", &serde_json::to_value(&p).unwrap(), "t")
            .unwrap();
        assert!(core.history_status(&v).unwrap().transition_in_progress);
        core.recover_interrupted(&v).unwrap();
        assert!(!note.exists());
        let s = core.history_status(&v).unwrap();
        assert_eq!(
            (s.redo_top.as_deref(), s.transition_in_progress),
            (Some("h_1"), false)
        );
        assert!(core.state.idempotency_get("cli:me", "k1").unwrap().is_some());

        // A redo crashed mid-way, and the file it would write was created outside meanwhile:
        // recovery rolls back and leaves that file alone.
        core.history_redo(&Actor::Cli("me".into()), &v, "h_1", "k2", "a")
            .unwrap();
        core.history_undo(&Actor::Cli("me".into()), &v, "h_1", "k3", "a")
            .unwrap();
        let mut redo = plan("k4");
        redo.transition = Transition::Redo;
        redo.steps = plan_steps(
            &parse_changes(&core.state.history_entry("v", "h_1").unwrap().unwrap()).unwrap(),
            Transition::Redo,
        );
        core.state
            .begin_intent("v", "history:h_1", &serde_json::to_value(&redo).unwrap(), "t")
            .unwrap();
        std::fs::write(&note, b"someone else's\n").unwrap();
        core.recover_interrupted(&v).unwrap();
        assert_eq!(std::fs::read(&note).unwrap(), b"someone else's\n");
        let s = core.history_status(&v).unwrap();
        assert_eq!(
            (s.redo_top.as_deref(), s.transition_in_progress),
            (Some("h_1"), false)
        );
        assert_eq!(core.state.idempotency_get("cli:me", "k4").unwrap(), None);
    }

    #[test]
    fn move_arguments_are_strict() {
        let ok: HistoryMoveArgs = serde_json::from_value(
            serde_json::json!({"expectedHistoryEntryId": "h_1", "idempotencyKey": "k"}),
        )
        .unwrap();
        assert_eq!(ok.expected_history_entry_id, "h_1");
        assert!(
            serde_json::from_value::<HistoryMoveArgs>(
                serde_json::json!({"expectedHistoryEntryId": "h_1", "idempotencyKey": "k", "force": true})
            )
            .is_err()
        );
    }
}
