//! The one write transaction of docs/contract.md#proposals, for apply, undo/redo and executed challenges alike.
//!
//! A write is an [`Intent`]: the [`FileOp`]s it will run (each with the exact bytes its files hold
//! before and after), who asked, and what commits it. The intent is durable before any file is
//! touched. [`Writes::run_txn`] then runs every operation compare-and-swap, writes the call's audit
//! line, and commits (one `StateStore::transact`). Anything unexpected on the way — a file edited
//! meanwhile, the audit line not writable, the commit failing — rolls it back: every file it
//! wrote gets its `before` bytes again and a file changed outside vaultgate is left as it is.
//!
//! Recovery ([`Writes::recover`], at start and before every write) runs the same function on every
//! open intent: when each file is at its `before` or `after` state the transaction is finished,
//! otherwise it is rolled back and `apply.rolled_back` is audited. No open intent ever makes a
//! later write fail, and a recovered transaction never writes a second success record: the audit
//! log is searched from where it ended when the intent began.

use std::sync::Arc;

use audit::{Durability, Entry, Outcome};
use inbox::Transition;
use policy::{ErrorCode, VaultPath};
use proposals::Kind;
use proposals::ops::{FileOp, OpState, Zone, inverse_all};
use proposals::recovery::{Observed, Recovery};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::apply::Writes;
use crate::call::{Call, TxnRecord};
use crate::core::{VaultHandle, rfc3339};
use crate::error::{GatewayError, Refused, Stale};
use crate::group::{Claims, Phase};
use crate::storage::state::{deferring, transact};
use crate::storage::{Cas, Lease, run_step};
use vault::write::Syncs;

/// The intents-table step of a transaction that is being rolled back.
pub(crate) const ROLLING_BACK: &str = "rolling_back";
/// The audit event of every rolled-back transaction (docs/contract.md#proposals).
pub(crate) const ROLLED_BACK: &str = "apply.rolled_back";

/// Everything needed to finish or roll back a write, recorded before any file is touched.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Intent {
    pub txn: TxnKind,
    pub ops: Vec<FileOp>,
    /// The first `note_ops` of `ops` are the notes' change (a history entry keeps them); the rest
    /// move inbox files.
    pub note_ops: usize,
    pub audit: AuditPlan,
    pub started_at: String,
    /// Set (for intents kept in a challenge row) once a rollback began.
    #[serde(default)]
    pub rolling_back: bool,
    /// The epoch of the lease the write was planned under (crate::storage::Lease), checked at
    /// its commit point.
    #[serde(default)]
    pub epoch: u64,
}

/// What the transaction's audit line says, and where to look for it after a crash.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AuditPlan {
    pub actor: audit::Actor,
    /// `decided_by` / `created_by` label of the actor.
    pub actor_label: String,
    /// The call's own event (`tool_call`, `cli`).
    pub event: String,
    pub tool: String,
    pub args_hash: String,
    /// (principal, key): recorded with the commit.
    pub idempotency: Option<(String, String)>,
    /// The audit log's length when the intent was recorded.
    pub log_offset: u64,
    /// `"client"`: approved in the caller's client (docs/contract.md#the-review-page-and-in-client-approval); kept for the recovered record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<String>,
}

/// What the transaction commits.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub(crate) enum TxnKind {
    #[serde(rename_all = "camelCase")]
    Apply {
        proposal_id: String,
        slug: String,
        proposal_kind: Kind,
        target: String,
        proposal_hash: String,
        history_id: String,
        archived_to: String,
        /// The proposal's reason and creator: the git commit's body and author (docs/contract.md#git-history).
        #[serde(default)]
        reason: String,
        #[serde(default)]
        created_by: Option<proposals::CreatedBy>,
    },
    #[serde(rename_all = "camelCase")]
    History {
        transition: Transition,
        entry_id: String,
        label: String,
    },
    #[serde(rename_all = "camelCase")]
    Critical {
        tool: String,
        challenge_id: String,
        history_id: String,
        /// Where the removed files wait, until the commit, to be purged (or put back).
        hold: String,
    },
}

impl TxnKind {
    /// The failpoint prefix of this kind of write.
    fn prefix(&self) -> &'static str {
        match self {
            TxnKind::Apply { .. } => "",
            TxnKind::History { .. } => "history_",
            TxnKind::Critical { .. } => "critical_",
        }
    }

    fn recovered_event(&self) -> &'static str {
        match self {
            TxnKind::Apply { .. } => "apply.recovered",
            TxnKind::History { .. } => "history.recovered",
            TxnKind::Critical { .. } => "critical.recovered",
        }
    }

    /// What the audit line names besides the tool.
    fn record_ids(&self) -> (Option<String>, Option<String>, Option<String>) {
        match self {
            TxnKind::Apply {
                proposal_id, target, ..
            } => (Some(target.clone()), Some(proposal_id.clone()), None),
            TxnKind::History { entry_id, .. } => (Some(entry_id.clone()), None, None),
            TxnKind::Critical { challenge_id, .. } => (None, None, Some(challenge_id.clone())),
        }
    }

    /// The refusal a call gets when its own transaction is rolled back because a file changed.
    fn stale(&self, path: &str) -> GatewayError {
        match self {
            TxnKind::Apply { .. } => Refused::StaleBase {
                path: path.to_owned(),
                why: Stale::WhileApplying,
            }
            .into(),
            TxnKind::History {
                transition, entry_id, ..
            } => Refused::HistoryStale {
                message: format!(
                    "cannot {} {entry_id}: {path} changed outside vaultgate while it ran; everything it wrote was put back",
                    transition.as_str()
                ),
            }
            .into(),
            TxnKind::Critical { .. } => Refused::ChallengeStale {
                path: path.to_owned(),
            }
            .into(),
        }
    }
}

/// How a write is keyed for retries.
pub(crate) enum Keyed<'k, T> {
    /// By the caller's idempotency key: `what` names the call in a conflict, `first` reads the
    /// first answer back from its record.
    Key {
        key: &'k str,
        what: &'static str,
        first: fn(Value) -> Result<T, GatewayError>,
    },
    /// By its own row: a decided proposal (reject), a consumed challenge (critical).
    Row,
}

/// Where an intent is kept: the intents table, or (for a critical call) the challenge row it
/// consumed, so that consuming and recording are one statement.
#[derive(Debug, Clone)]
pub(crate) enum IntentAt {
    Row(i64),
    Challenge(String),
}

/// What a committed transaction reports to its caller.
#[derive(Debug)]
pub(crate) struct Committed {
    /// The vault's revision after the commit (announced).
    pub revision: u64,
    /// `updated` or `failed` (docs/contract.md#proposals "Partial success is honest").
    pub index: &'static str,
    /// The answer stored with the commit (apply, undo/redo, critical).
    pub result: Value,
    /// A live apply's index update, asked for under the vault's writer and waited for (then
    /// announced) once the writer is free: [`Settle::finish`].
    pub settle: Option<Settle>,
}

/// An apply's index update and announcement, left for after the vault's writer is released, so
/// the next write does not wait for the index (docs/contract.md#proposals "Cost follows the change").
#[derive(Debug)]
pub(crate) struct Settle {
    ticket: vault::IndexTicket,
    revision: u64,
}

impl Settle {
    /// Waits for the index (the answer's `index`), then announces the change.
    pub(crate) fn finish(self, core: &crate::core::Core, v: &VaultHandle) -> &'static str {
        let index = if v.reader.index_settled(self.ticket) {
            "updated"
        } else {
            "failed"
        };
        core.announce(crate::changes::VaultChanged {
            vault: v.id.clone(),
            revision: self.revision,
        });
        index
    }
}

/// Ends a write's job as failed if the write unwinds before it reports.
struct JobEnd<'c>(&'c crate::core::Core, Option<crate::jobs::JobRef>);

impl JobEnd<'_> {
    fn disarm(mut self) -> Option<crate::jobs::JobRef> {
        self.1.take()
    }
}

impl Drop for JobEnd<'_> {
    fn drop(&mut self) {
        if let Some(job) = self.1.take() {
            self.0
                .jobs()
                .finish::<()>(job, &Err(GatewayError::Internal("the write panicked".into())));
        }
    }
}

/// Why a transaction is being rolled back.
enum Cause {
    /// A file held bytes nobody planned.
    Edited(String),
    /// Anything else (audit line, commit, I/O): answered as is.
    Failed(GatewayError),
    /// Recovery found a rollback already under way.
    Resumed,
}

impl Writes<'_> {
    /// The one opening of every write — apply, reject, undo/redo and an executed challenge:
    /// the idempotency key (a retry answers the first result), `before_lock` (what may wait, such
    /// as a person's yes), a place in the vault's group (crate::group), whose first write takes
    /// the vault's lease and settles interrupted writes, the key again (another process may have
    /// finished it meanwhile), then `op` under the lease. `claims` say what the write touches;
    /// only writes whose claims meet nothing share a group.
    pub(crate) fn write<P, T>(
        &self,
        call: &mut Call<'_>,
        v: &Arc<VaultHandle>,
        keyed: Keyed<'_, T>,
        claims: Claims,
        before_lock: impl FnOnce(&Call<'_>) -> Result<P, GatewayError>,
        op: impl FnOnce(&mut Call<'_>, P) -> Result<T, GatewayError>,
    ) -> Result<T, GatewayError> {
        if let Keyed::Key { key, .. } = &keyed
            && key.trim().is_empty()
        {
            return Err(GatewayError::InvalidArgument(
                "idempotencyKey must not be empty".into(),
            ));
        }
        if let Some(first) = self.first_answer(call, &keyed)? {
            return Ok(first);
        }
        let prepared = before_lock(call)?;
        // docs/contract.md#applying-a-proposal: from here the write is a job, which a crash of this
        // process does not lose.
        let job = match &keyed {
            Keyed::Key { key, .. } => self.core.jobs().submit(call, &v.id, key)?,
            Keyed::Row => None,
        };
        // A write that panics ends its job as failed (else it would wait for this process's end).
        let ending = JobEnd(self.core, job);
        let out = self.write_job(call, v, &keyed, claims, prepared, op);
        if let Some(job) = ending.disarm() {
            self.core.jobs().finish(job, &out);
        }
        out
    }

    /// [`Writes::write`] from the vault's group on.
    fn write_job<P, T>(
        &self,
        call: &mut Call<'_>,
        v: &Arc<VaultHandle>,
        keyed: &Keyed<'_, T>,
        claims: Claims,
        prepared: P,
        op: impl FnOnce(&mut Call<'_>, P) -> Result<T, GatewayError>,
    ) -> Result<T, GatewayError> {
        let shared = !claims.is_exclusive();
        // The group's first write takes the lock for all of them; leaving the group (dropping
        // the membership) releases it after the last.
        let member = Arc::new(v.group.join(claims, || {
            // SECURITY(T-PROP4): one writer per vault across every process (server, CLI).
            let hold = v.lease().acquire()?;
            // Interrupted applies, undo/redo and critical calls are finished before anything is
            // decided: one may be this very call's.
            self.recover(v)?;
            Ok::<_, GatewayError>(hold)
        })?);
        if let Some(first) = self.first_answer(call, keyed)? {
            return Ok(first);
        }
        call.set_member(Some(Arc::clone(&member)), shared);
        let out = op(call, prepared);
        call.set_member(None, false);
        drop(member);
        out
    }

    /// SECURITY(T-PROP3): the same key with the same arguments answers with the first result
    /// and does nothing; other arguments under a used key are refused.
    fn first_answer<T>(&self, call: &Call<'_>, keyed: &Keyed<'_, T>) -> Result<Option<T>, GatewayError> {
        let Keyed::Key { key, what, first } = keyed else {
            return Ok(None);
        };
        match self
            .core
            .state
            .idempotency_get(&call.actor().principal_id(), key)?
        {
            None => Ok(None),
            Some(rec) if rec.same_call(call.tool(), &call.args_hash()) => first(rec.result).map(Some),
            Some(_) => Err(Refused::IdempotencyConflict { what }.into()),
        }
    }

    pub(crate) fn failpoint(&self, kind: &TxnKind, step: &str) {
        self.core.failpoints.hit(&format!("{}{step}", kind.prefix()));
    }

    /// Remembers what an operation left in the notes, so the watcher knows its own writes.
    fn remember(&self, v: &VaultHandle, op: &FileOp) {
        for (zone, path, hash) in op.leaves() {
            if zone == Zone::Note {
                self.core.changes().note_own_write(v, path, hash);
            }
        }
    }

    /// Records a new intent; the transaction starts with [`Writes::run_txn`].
    /// In a group commit the intent's commit is left unsynced: [`Writes::run_txn`] syncs the
    /// group's intents once before any of them touches a file.
    pub(crate) fn begin_txn(
        &self,
        call: &Call<'_>,
        v: &VaultHandle,
        key: &str,
        intent: &Intent,
    ) -> Result<IntentAt, GatewayError> {
        let json = serde_json::to_value(intent).map_err(internal)?;
        let store = self.core.store();
        let begin = || store.begin_intent(&v.id, key, &json, &intent.started_at);
        let id = match call.member() {
            Some(_) => deferring(store, begin)?,
            None => begin()?,
        };
        Ok(IntentAt::Row(id))
    }

    /// Runs (or, after a crash, finishes or rolls back) one transaction. `call` is the live call
    /// that started it; recovery passes `None` and audits on its own.
    pub(crate) fn run_txn(
        &self,
        v: &Arc<VaultHandle>,
        at: &IntentAt,
        intent: &Intent,
        step: &str,
        mut call: Option<&mut Call<'_>>,
    ) -> Result<Committed, GatewayError> {
        let files = v.files();
        let kind = &intent.txn;
        let rolling_back = step == ROLLING_BACK || intent.rolling_back;
        // A group commit's members share each durability step (crate::group); recovery and
        // writes that run alone sync as they go.
        let member = call.as_deref().and_then(Call::member);
        if let Some(m) = &member {
            // The intents of the whole group are durable before any of them touches a file.
            let store = self.core.store();
            if let Err(e) = m.sync(Phase::Intent, Syncs::default(), |_| {
                store.sync().map_err(|e| e.to_string())
            }) {
                return Err(self.roll_back(v, at, intent, call, Cause::Failed(internal(e))));
            }
        }
        // docs/contract.md#rules-of-the-write-path: recovery finishes a write only when every file
        // is at one of its two known states; a live call has just checked them under the lock.
        let states = match (rolling_back, &call) {
            (false, None) => intent
                .ops
                .iter()
                .map(|op| files.op_state(op))
                .collect::<Result<Vec<_>, _>>()?,
            _ => Vec::new(),
        };
        match proposals::recovery::decide(rolling_back, Observed::Files(&states)) {
            Recovery::ResumeRollBack => return Err(self.roll_back(v, at, intent, call, Cause::Resumed)),
            Recovery::RollBack { op } => {
                let path = intent.ops[op]
                    .paths()
                    .first()
                    .map(|(_, p)| (*p).to_owned())
                    .unwrap_or_default();
                return Err(self.roll_back(v, at, intent, call, Cause::Edited(path)));
            }
            Recovery::Finish { .. } => {}
        }
        // A live call knows the touched notes' entries before it writes; recovery does not (some
        // ops may have run before the crash) and walks once instead: a rare path.
        let fp_before = call.is_some().then(|| self.fingerprint_entries(v, intent));
        // Each folder the operations touch is fsynced once, after the last of them and before
        // the audit line (ARCHITECTURE.md "Which fsync protects what"); in a group, once for
        // every member.
        let (ran, dirs) = v.reader.fs().collecting_dir_syncs(|| {
            for (i, op) in intent.ops.iter().enumerate() {
                match files.op_state(op)? {
                    OpState::After => {}
                    OpState::Before => {
                        // Remembered first: the watcher may see the write before `exec` returns.
                        self.remember(v, op);
                        if let Cas::Conflict(p) = run_step(files.as_ref(), op)? {
                            return Ok(Some(p));
                        }
                    }
                    OpState::Other => {
                        return Ok(Some(
                            op.paths()
                                .first()
                                .map(|(_, p)| (*p).to_owned())
                                .unwrap_or_default(),
                        ));
                    }
                }
                if i == 0 {
                    self.failpoint(kind, "after_first_op");
                }
            }
            Ok::<_, GatewayError>(None)
        });
        let synced = match (&ran, &member) {
            (Ok(None), Some(m)) => m
                .sync(Phase::Files, dirs, |d| d.sync().map_err(|e| e.to_string()))
                .map_err(internal),
            _ => dirs.sync().map_err(GatewayError::from),
        };
        match (ran, synced) {
            (Ok(None), Ok(())) => {}
            (Ok(Some(path)), _) => return Err(self.roll_back(v, at, intent, call, Cause::Edited(path))),
            (Err(e), _) | (Ok(None), Err(e)) => {
                return Err(self.roll_back(v, at, intent, call, Cause::Failed(e)));
            }
        }
        self.failpoint(kind, "after_write");

        // The audit line belongs to the transaction: written before the commit, or rolled back.
        let (target, proposal_id, challenge_id) = kind.record_ids();
        let record = TxnRecord {
            event: None,
            outcome: Outcome::Ok,
            code: None,
            target,
            proposal_id,
            challenge_id,
            approval: intent.audit.approval.clone(),
        };
        let head = match (call.as_deref_mut(), &member) {
            // Records in submission order, then one sync of the log for the group.
            (Some(c), Some(m)) => m
                .turn(Phase::Audit, || c.record_head_as(record, Durability::Flush))
                .and_then(|head| {
                    let audit = &self.core.audit;
                    m.sync(Phase::Audit, Syncs::default(), |_| {
                        audit.sync().map_err(|e| e.to_string())
                    })
                    .map_err(|_| GatewayError::AuditUnavailable)?;
                    Ok(head)
                }),
            // The head is raised by the commit itself (`StateTx::append_audit`): one sync fewer.
            (Some(c), None) => c.record_head(record),
            (None, _) => self.recovered_record(v, intent),
        };
        let head = match head {
            Ok(h) => h,
            Err(e) => {
                let cause = match e {
                    GatewayError::Audit(_) | GatewayError::AuditUnavailable => {
                        Cause::Failed(GatewayError::AuditUnavailable)
                    }
                    other => Cause::Failed(other),
                };
                return Err(self.roll_back(v, at, intent, call, cause));
            }
        };
        self.failpoint(kind, "after_audit");

        // The commit, in submission order (history, revisions and the recorded fingerprint
        // follow each other); in a group, one sync of the state's log for every member.
        let live = call.is_some();
        let commit = || {
            // A live write commits only under the hold it was planned under; recovery runs under
            // the hold of whoever settles it.
            if live {
                v.lease().check(intent.epoch)?;
            }
            let fingerprint = self.fingerprint_after(v, intent, fp_before);
            self.commit_txn(v, at, intent, &head, fingerprint.as_deref())
        };
        let committed = match &member {
            Some(m) => m.turn(Phase::Commit, || deferring(self.core.store(), commit)),
            None => commit(),
        };
        let committed = match committed {
            Ok(c) => c,
            Err(e) => return Err(self.roll_back(v, at, intent, call, Cause::Failed(e))),
        };
        if let Some(m) = &member {
            let store = self.core.store();
            if let Err(e) = m.sync(Phase::Commit, Syncs::default(), |_| {
                store.sync().map_err(|e| e.to_string())
            }) {
                // The files and the state agree (applied), but the commit may not survive a power
                // loss: the caller retries with the same key, which answers the stored result.
                return Err(internal(format!(
                    "the commit could not be made durable ({e}); retry with the same idempotency key"
                )));
            }
        }
        self.failpoint(kind, "after_commit");
        let post = || self.after_commit_steps(v, intent, &committed, head.seq, call.is_some());
        let (index, settle, result) = match &member {
            Some(m) => {
                let (index, settle, result, applied) = m.turn(Phase::Post, post);
                // `_applied.jsonl` is repaired from the state if this sync is lost.
                if let Err(e) = m.sync(Phase::Post, applied, |s| s.sync().map_err(|e| e.to_string())) {
                    tracing::error!(vault = %v.id, error = %e, "syncing _applied.jsonl failed");
                }
                (index, settle, result)
            }
            None => {
                let (index, settle, result, applied) = post();
                if let Err(e) = applied.sync() {
                    tracing::error!(vault = %v.id, error = %e, "syncing _applied.jsonl failed");
                }
                (index, settle, result)
            }
        };
        Ok(Committed {
            index,
            result,
            settle,
            ..committed
        })
    }

    /// What follows a commit, for one transaction: its `_applied.jsonl` line (returned unsynced),
    /// the index update asked for, its git commit, the stored answer amended and housekeeping.
    fn after_commit_steps(
        &self,
        v: &Arc<VaultHandle>,
        intent: &Intent,
        committed: &Committed,
        audit_seq: u64,
        live: bool,
    ) -> (&'static str, Option<Settle>, Value, Syncs) {
        let kind = &intent.txn;
        let (ticket, applied) = self.after_commit(v, intent, audit_seq);
        // A live apply waits for the index once the writer is free; recovery and the other
        // writes settle here.
        let (index, settle) = match (&intent.txn, live) {
            (TxnKind::Apply { .. }, true) => (
                "updated",
                Some(Settle {
                    ticket,
                    revision: committed.revision,
                }),
            ),
            _ => (
                Settle {
                    ticket,
                    revision: committed.revision,
                }
                .finish(self.core, v),
                None,
            ),
        };
        // docs/contract.md#git-history: the commit is made after the engine's commit point; it never undoes it.
        let git = self.core.history().drain_git(v);
        let mut result = committed.result.clone();
        // `apply_proposal` always says (docs/contract.md#the-mcp-surface); undo, redo and critical calls only where git is on.
        if let Value::Object(m) = &mut result
            && (matches!(kind, TxnKind::Apply { .. }) || git != "off")
        {
            m.insert("git".into(), Value::String(git.into()));
        }
        // Only the stored answer's `git` changes: left to the next sync of the state's log (one
        // lost to a power cut makes a replay say `queued`), so a group's members do not each
        // fsync it in turn.
        if result != committed.result
            && let Some((principal, key)) = &intent.audit.idempotency
            && let Err(e) = self.core.state.deferring_sync(|| {
                self.core.state.idempotency_amend(
                    principal,
                    key,
                    &intent.audit.tool,
                    &intent.audit.args_hash,
                    &result,
                )
            })
        {
            tracing::warn!(vault = %v.id, error = %e, "a replay of this call will say git: queued");
        }
        self.maintain_if_due();
        (index, settle, result, applied)
    }

    /// The audit record of a transaction recovery finishes: the one the interrupted call already
    /// wrote, if it got that far, else one `<kind>.recovered` record.
    fn recovered_record(&self, v: &VaultHandle, intent: &Intent) -> Result<inbox::AuditHead, GatewayError> {
        let a = &intent.audit;
        let (target, proposal_id, challenge_id) = intent.txn.record_ids();
        let found = self.core.audit.find_since(a.log_offset, |r| {
            r.tool.as_deref() == Some(a.tool.as_str())
                && r.args_hash.as_deref() == Some(a.args_hash.as_str())
                && r.outcome == Outcome::Ok
                && r.vault.as_deref() == Some(v.id.as_str())
                && (proposal_id.is_none() || r.proposal_id == proposal_id)
                && (challenge_id.is_none() || r.challenge_id == challenge_id)
        })?;
        if let Some(r) = found {
            return Ok(inbox::AuditHead {
                seq: r.seq,
                hash: r.hash,
            });
        }
        self.core.append_audit_record(
            Entry {
                event: intent.txn.recovered_event().into(),
                actor: a.actor.clone(),
                vault: Some(v.id.clone()),
                tool: Some(a.tool.clone()),
                target,
                proposal_id,
                challenge_id,
                outcome: Outcome::Ok,
                code: None,
                args_hash: Some(a.args_hash.clone()),
                count: None,
                approval: a.approval.clone(),
                gateway: None,
            },
            Durability::Sync,
        )
    }

    /// Puts back every file the transaction wrote (a file changed outside vaultgate is left as
    /// it is), closes the intent, audits `apply.rolled_back` and returns the call's refusal.
    fn roll_back(
        &self,
        v: &Arc<VaultHandle>,
        at: &IntentAt,
        intent: &Intent,
        call: Option<&mut Call<'_>>,
        cause: Cause,
    ) -> GatewayError {
        let kind = &intent.txn;
        let answer = match &cause {
            Cause::Edited(path) => kind.stale(path),
            Cause::Failed(e) => clone_error(e),
            Cause::Resumed => kind.stale("a file"),
        };
        if let Err(e) = self.undo_files(v, at, intent) {
            // The intent stays open: the next start or write tries again.
            tracing::error!(vault = %v.id, error = %e, "rolling back a transaction failed; it stays open");
            return answer;
        }
        self.failpoint(kind, "after_rollback");
        let closed = match (at, kind) {
            (IntentAt::Row(id), _) => self.core.state.finish_intent(*id).map(|_| ()),
            (IntentAt::Challenge(id), _) => self
                .core
                .state
                .finish_challenge(id, &serde_json::json!({"rolledBack": true}), false, None)
                .map(|_| ()),
        };
        if let Err(e) = closed {
            tracing::error!(vault = %v.id, error = %e, "closing a rolled-back transaction failed");
        }
        let touched = self.touched_notes(intent);
        v.reader.update_paths(&touched);
        tracing::warn!(vault = %v.id, tool = %intent.audit.tool, "transaction rolled back");
        let (target, proposal_id, challenge_id) = kind.record_ids();
        let code = answer.code().as_str().to_owned();
        let outcome = Outcome::Error;
        let recorded = match call {
            Some(c) if !c.recorded() => c.record_txn(TxnRecord {
                event: Some(ROLLED_BACK.into()),
                outcome,
                code: Some(code),
                target,
                proposal_id,
                challenge_id,
                approval: intent.audit.approval.clone(),
            }),
            _ => self.core.append_audit(
                Entry {
                    event: ROLLED_BACK.into(),
                    actor: intent.audit.actor.clone(),
                    vault: Some(v.id.clone()),
                    tool: Some(intent.audit.tool.clone()),
                    target,
                    proposal_id,
                    challenge_id,
                    outcome,
                    code: Some(code),
                    args_hash: Some(intent.audit.args_hash.clone()),
                    count: None,
                    approval: intent.audit.approval.clone(),
                    gateway: None,
                },
                Durability::Sync,
            ),
        };
        if let Err(e) = recorded {
            tracing::error!(vault = %v.id, error = %e, "recording a rollback failed");
        }
        answer
    }

    /// Runs the inverse of every operation that ran, newest first.
    fn undo_files(&self, v: &VaultHandle, at: &IntentAt, intent: &Intent) -> Result<(), GatewayError> {
        let now = rfc3339(time::OffsetDateTime::now_utc());
        match at {
            IntentAt::Row(id) => self.core.state.advance_intent(*id, ROLLING_BACK, &now)?,
            IntentAt::Challenge(id) => {
                let mut marked = intent.clone();
                marked.rolling_back = true;
                self.core
                    .state
                    .set_challenge_intent(id, &serde_json::to_value(&marked).map_err(internal)?)?;
            }
        }
        let files = v.files();
        for inv in inverse_all(&intent.ops) {
            match files.op_state(&inv)? {
                OpState::Before => {
                    self.remember(v, &inv);
                    if let Cas::Conflict(p) = run_step(files.as_ref(), &inv)? {
                        tracing::warn!(path = %p, "left a file changed outside vaultgate as it is");
                    }
                }
                OpState::After => {}
                OpState::Other => {
                    // A file moved away whose old name was taken meanwhile cannot go back; where
                    // its bytes are kept as a blob, the copy the transaction made goes, so each
                    // path ends at its `before` state or holds the outside edit.
                    if let FileOp::Rename {
                        from_zone,
                        from,
                        hash,
                        ..
                    } = &inv
                        && files.hash(*from_zone, from)?.as_deref() == Some(hash.as_str())
                        && files.has_blob(hash)?
                    {
                        if let Cas::Conflict(p) = run_step(
                            files.as_ref(),
                            &FileOp::Delete {
                                zone: *from_zone,
                                path: from.clone(),
                                before: hash.clone(),
                            },
                        )? {
                            tracing::warn!(path = %p, "left a file changed outside vaultgate as it is");
                        }
                        continue;
                    }
                    tracing::warn!(path = ?inv.paths(), "left a file changed outside vaultgate as it is");
                }
            }
        }
        Ok(())
    }

    /// The commit point of each kind of transaction.
    fn commit_txn(
        &self,
        v: &VaultHandle,
        at: &IntentAt,
        intent: &Intent,
        head: &inbox::AuditHead,
        fingerprint: Option<&str>,
    ) -> Result<Committed, GatewayError> {
        let a = &intent.audit;
        let seq = head.seq;
        let writes = note_writes(intent);
        // Nothing after the intent reads the clock: the commit is a function of its intent.
        let at_time = intent.started_at.clone();
        // docs/contract.md#git-history: the change's row (and its git commit, queued) is part of this commit.
        let row = self.core.history().change_row(v, intent, head, &at_time)?;
        let change = row.as_new();
        // The vault's new head; the audit head is its own part of the commit (`append_audit`).
        let disk_after = inbox::DiskAfter {
            fingerprint,
            writes: &writes,
            change: Some(&change),
            head: None,
        };
        let store = self.core.store();
        let note_ops = &intent.ops[..intent.note_ops.min(intent.ops.len())];
        let history_json = serde_json::to_value(note_ops).map_err(internal)?;
        match (&intent.txn, at) {
            (
                TxnKind::Apply {
                    proposal_id,
                    proposal_kind,
                    target,
                    history_id,
                    archived_to,
                    ..
                },
                IntentAt::Row(id),
            ) => {
                let result = crate::api::ApplyOut {
                    applied: true,
                    target: target.clone(),
                    history_entry_id: history_id.clone(),
                    archived_to: archived_to.clone(),
                    audit_seq: seq,
                    index: "updated".into(),
                    git: row.git_at_commit().into(),
                    replayed: false,
                    commit: None,
                };
                let result = serde_json::to_value(&result).map_err(internal)?;
                let label = format!("{} {target}", proposal_kind.as_str());
                let idem = a.idempotency.as_ref().map(|(principal, key)| inbox::IdemKey {
                    credential_id: principal,
                    key,
                    tool: &a.tool,
                    args_hash: &a.args_hash,
                });
                let history = inbox::NewHistory {
                    id: history_id,
                    label: &label,
                    kind: proposal_kind.as_str(),
                    created_by: &a.actor_label,
                    created_at: &at_time,
                    paths: &history_json,
                    barrier: false,
                };
                let c = transact(store, |tx| {
                    let Some(c) = tx.finish_apply(&inbox::FinishApply {
                        intent_id: *id,
                        proposal_id,
                        by: &a.actor_label,
                        // `decided_at` is the instant the archive date was taken from.
                        at: &intent.started_at,
                        result: &result,
                        history: Some(&history),
                        idempotency: idem.as_ref(),
                    })?
                    else {
                        return Ok(None);
                    };
                    debug_assert_eq!(c.vault, v.id, "an intent of another vault");
                    tx.register_head(&v.id, &disk_after)?;
                    tx.append_audit(head)?;
                    Ok(Some(c))
                })?
                .ok_or_else(|| {
                    GatewayError::from(Refused::RejectedWhileApplying {
                        id: proposal_id.to_string(),
                    })
                })?;
                Ok(Committed {
                    revision: c.revision,
                    index: "updated",
                    result,
                    settle: None,
                })
            }
            (
                TxnKind::History {
                    transition, entry_id, ..
                },
                IntentAt::Row(id),
            ) => {
                let tops = self.core.state.history_tops_after(&v.id, entry_id, *transition)?;
                let result = crate::history::HistoryStatusOut {
                    stale_top: self.core.history().stale_top_after(
                        v,
                        tops.undo.as_deref(),
                        *transition,
                        entry_id,
                    )?,
                    undo_top: tops.undo,
                    redo_top: tops.redo,
                    transition_in_progress: false,
                    git: None,
                };
                let result = serde_json::to_value(&result).map_err(internal)?;
                let tool = crate::history::tool_name(*transition);
                let idem = a.idempotency.as_ref().map(|(principal, key)| inbox::IdemKey {
                    credential_id: principal,
                    key,
                    tool,
                    args_hash: &a.args_hash,
                });
                let c = transact(store, |tx| {
                    let Some(c) = tx.finish_transition(&inbox::HistoryTransition {
                        intent_id: *id,
                        vault: &v.id,
                        entry_id,
                        transition: *transition,
                        result: &result,
                        at: &at_time,
                        idempotency: idem,
                        disk: None,
                    })?
                    else {
                        return Ok(None);
                    };
                    tx.register_head(&v.id, &disk_after)?;
                    tx.append_audit(head)?;
                    Ok(Some(c))
                })?
                .ok_or_else(|| {
                    GatewayError::from(Refused::HistoryNotTop {
                        message: format!("{entry_id} is no longer the top of the history"),
                    })
                })?;
                Ok(Committed {
                    revision: c.revision,
                    index: "updated",
                    result,
                    settle: None,
                })
            }
            (
                TxnKind::Critical {
                    tool,
                    challenge_id,
                    history_id,
                    ..
                },
                IntentAt::Challenge(_),
            ) => {
                let paths: Vec<String> = intent
                    .ops
                    .iter()
                    .filter_map(|op| match op {
                        FileOp::Rename { from, .. } => Some(from.clone()),
                        _ => None,
                    })
                    .collect();
                let result = crate::critical::executed(tool, &paths);
                let result = serde_json::to_value(&result).map_err(internal)?;
                let changed = !paths.is_empty();
                let label = if tool == crate::critical::DELETE_PERMANENT {
                    format!("delete_permanent {}", paths.join(", "))
                } else {
                    format!("empty_trash ({} files)", paths.len())
                };
                // docs/contract.md#critical-operations, docs/contract.md#history: permanent deletion is a history barrier; undo stops here.
                let removed: Vec<Value> = intent
                    .ops
                    .iter()
                    .filter_map(|op| match op {
                        FileOp::Rename {
                            from_zone,
                            from,
                            hash,
                            ..
                        } => Some(serde_json::json!({"op": "delete", "zone": from_zone, "path": from, "before": hash})),
                        _ => None,
                    })
                    .collect();
                let removed = Value::Array(removed);
                let revision = transact(store, |tx| {
                    let Some((vault, revision)) = tx.finish_challenge(challenge_id, &result, changed)? else {
                        return Ok(None);
                    };
                    debug_assert_eq!(vault, v.id, "a challenge of another vault");
                    if changed {
                        let barrier = inbox::NewHistory {
                            id: history_id,
                            label: &label,
                            kind: tool,
                            created_by: &a.actor_label,
                            created_at: &at_time,
                            paths: &removed,
                            barrier: true,
                        };
                        // An entry an earlier run left (a version that added it apart) answers as is.
                        tx.add_history(&v.id, &barrier)?;
                        tx.register_head(&v.id, &disk_after)?;
                    }
                    tx.append_audit(head)?;
                    Ok(Some(revision))
                })?
                .ok_or_else(|| internal(format!("challenge {challenge_id} committed twice")))?;
                Ok(Committed {
                    revision,
                    index: "updated",
                    result,
                    settle: None,
                })
            }
            _ => Err(internal("an intent kept in the wrong place")),
        }
    }

    /// After the commit: what does not protect the notes. Asks for the index update of the
    /// touched notes (waited for by [`Settle::finish`]).
    fn after_commit(&self, v: &VaultHandle, intent: &Intent, audit_seq: u64) -> (vault::IndexTicket, Syncs) {
        let mut applied = Syncs::default();
        match &intent.txn {
            TxnKind::Apply { .. } => {
                match self.append_applied_line(v, &intent.txn, &intent.audit.actor_label, &intent.started_at)
                {
                    Ok(pending) => applied = pending,
                    // Repaired by the next recovery (the state knows what was applied).
                    Err(e) => {
                        tracing::error!(vault = %v.id, error = %e, "appending to _applied.jsonl failed")
                    }
                }
            }
            TxnKind::Critical { .. } => {
                let files = v.files();
                for op in &intent.ops {
                    if let FileOp::Rename { to_zone, to, .. } = op
                        && let Err(e) = files.remove(*to_zone, to)
                    {
                        tracing::error!(vault = %v.id, error = %e, "purging a deleted file failed");
                    }
                }
                if let Err(e) = self.core.history().purge_deleted_versions(v, audit_seq) {
                    tracing::error!(vault = %v.id, error = %e, "purging the deleted notes' history objects failed");
                }
            }
            TxnKind::History { .. } => {}
        }
        let touched = self.touched_notes(intent);
        if self.core.failpoints.fails("index_update") {
            return (vault::IndexTicket::Done(false), applied);
        }
        (v.reader.submit_paths(&touched), applied)
    }

    /// The note paths the transaction touches (for the index).
    fn touched_notes(&self, intent: &Intent) -> Vec<VaultPath> {
        let mut out: Vec<VaultPath> = intent
            .ops
            .iter()
            .flat_map(|op| op.paths())
            .filter(|(z, _)| *z == Zone::Note)
            .filter_map(|(_, p)| VaultPath::parse(p).ok())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// The disk entries of the notes the transaction touches, before it runs (for the
    /// incremental fingerprint).
    fn fingerprint_entries(&self, v: &VaultHandle, intent: &Intent) -> Vec<crate::changes::FpEntry> {
        self.touched_notes(intent)
            .iter()
            .filter_map(|p| crate::changes::fp_entry(v, p))
            .collect()
    }

    /// The vault's fingerprint after the transaction: the recorded one with the touched notes'
    /// entries swapped, no walk (docs/contract.md#proposals "Cost follows the change"). A recorded fingerprint
    /// that was already behind the disk stays behind, so the watcher still counts that change.
    fn fingerprint_after(
        &self,
        v: &VaultHandle,
        intent: &Intent,
        before: Option<Vec<crate::changes::FpEntry>>,
    ) -> Option<String> {
        let Some(before) = before else {
            return Some(crate::changes::fingerprint(v));
        };
        let recorded = self.core.state.fingerprint(&v.id).ok().flatten()?;
        let mut fp = crate::changes::Fingerprint::parse(&recorded)?;
        for e in &before {
            fp.toggle(e);
        }
        for e in self.fingerprint_entries(v, intent) {
            fp.toggle(&e);
        }
        Some(fp.to_hex())
    }

    /// Appends the apply's line to `<inbox>/_applied.jsonl` unless it is already the last one.
    /// `ts`: when the apply was decided (its intent's instant, the proposal's `decided_at`).
    /// The file is returned unsynced, for the caller (or its group) to sync.
    pub(crate) fn append_applied_line(
        &self,
        v: &VaultHandle,
        txn: &TxnKind,
        actor: &str,
        ts: &str,
    ) -> Result<Syncs, GatewayError> {
        let TxnKind::Apply {
            proposal_id,
            slug,
            proposal_kind,
            target,
            proposal_hash,
            ..
        } = txn
        else {
            return Ok(Syncs::default());
        };
        let path = crate::proposing::inbox_path(v, "_applied.jsonl")?;
        let fs = v.reader.fs();
        let last: Option<proposals::AppliedLine> = match fs
            .read_last_line(vault::write::Area::Inbox, &path)?
        {
            Some(line) => Some(serde_json::from_str(&line).map_err(|e| internal(format!("{path}: {e}")))?),
            None => None,
        };
        if last.as_ref().is_some_and(|l| l.id == *proposal_id) {
            return Ok(Syncs::default());
        }
        let line = proposals::chain_applied(
            last.as_ref(),
            proposal_id.clone(),
            slug.clone(),
            *proposal_kind,
            target.clone(),
            proposal_hash.clone(),
            actor.to_owned(),
            ts.to_owned(),
        );
        let text = serde_json::to_string(&line).map_err(internal)?;
        Ok(fs.append_line_unsynced(vault::write::Area::Inbox, &path, text.as_bytes())?)
    }

    /// SECURITY(T-PROP5): settles every open transaction of this vault (called under its write
    /// lock): each is finished or rolled back; none makes this call fail. Then repairs what a crash right after
    /// a commit can leave: the last `_applied.jsonl` line, held copies of deleted files.
    pub fn recover(&self, v: &Arc<VaultHandle>) -> Result<(), GatewayError> {
        for row in self.core.state.open_intents(&v.id)? {
            let intent: Intent = match serde_json::from_value(row.plan.clone()) {
                Ok(i) => i,
                Err(e) => {
                    tracing::error!(intent = row.id, error = %e, "an intent this version cannot read is left in place");
                    continue;
                }
            };
            tracing::warn!(vault = %v.id, tool = %intent.audit.tool, "settling an interrupted transaction");
            if let Err(e) = self.run_txn(v, &IntentAt::Row(row.id), &intent, &row.step, None) {
                tracing::warn!(vault = %v.id, code = %e.code(), "an interrupted transaction was rolled back");
            }
        }
        for c in self.core.state.open_challenge_intents(&v.id)? {
            let Some(json) = c.intent.clone() else { continue };
            let intent: Intent = match serde_json::from_value(json) {
                Ok(i) => i,
                Err(e) => {
                    tracing::error!(challenge = %c.id, error = %e, "a critical intent this version cannot read is left in place");
                    continue;
                }
            };
            tracing::warn!(vault = %v.id, challenge = %c.id, "settling an interrupted critical call");
            if let Err(e) = self.run_txn(v, &IntentAt::Challenge(c.id.clone()), &intent, "", None) {
                tracing::warn!(vault = %v.id, code = %e.code(), "an interrupted critical call was rolled back");
            }
        }
        self.repair_applied_chain(v)?;
        self.core.proposals().finish_rejections(v)?;
        crate::critical::sweep_holds(self.core, v)?;
        // docs/contract.md#git-history: commits a crash or a busy repository left queued are made before any newer.
        self.core.history().drain_git(v);
        Ok(())
    }

    /// A crash between applies' commits and their `_applied.jsonl` lines leaves lines missing
    /// (one apply's, or a whole group's): the state knows what was applied, in order, and the
    /// chain gets the lines after its last one. Never fails a write: a last line it cannot read
    /// or a proposal it does not know is left for a person (`doctor`, the chain's own check).
    fn repair_applied_chain(&self, v: &VaultHandle) -> Result<(), GatewayError> {
        /// At most this many lines per repair: a crash leaves at most one group's lines missing.
        const WINDOW: u32 = 1000;
        let Some(last) = self.core.state.last_applied(&v.id)? else {
            return Ok(());
        };
        let path = crate::proposing::inbox_path(v, "_applied.jsonl")?;
        let logged = match v.reader.fs().read_last_line(vault::write::Area::Inbox, &path) {
            Ok(None) => None,
            Ok(Some(line)) => match serde_json::from_str::<proposals::AppliedLine>(&line) {
                Ok(l) => Some(l.id),
                Err(e) => {
                    tracing::warn!(vault = %v.id, error = %e, "the last line of _applied.jsonl is not readable; not repaired");
                    return Ok(());
                }
            },
            Err(e) => {
                tracing::warn!(vault = %v.id, error = %e, "_applied.jsonl is not readable; not repaired");
                return Ok(());
            }
        };
        if logged.as_deref() == Some(last.id.as_str()) {
            return Ok(());
        }
        // Lines after the logged one; none when it was undone since (nothing is missing then).
        let Some(mut missing) = self.core.state.applied_after(&v.id, logged.as_deref(), WINDOW)? else {
            return Ok(());
        };
        if logged.is_none() && missing.len() == WINDOW as usize {
            // No chain at all and a long history: only the newest gets its line, as before.
            tracing::warn!(vault = %v.id, "_applied.jsonl is missing; only the newest apply gets its line");
            missing = vec![last];
        }
        let mut pending = Syncs::default();
        for row in missing {
            let p = match serde_json::from_value::<proposals::Proposal>(row.meta.clone()) {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(vault = %v.id, proposal = %row.id, error = %e, "an applied proposal this version cannot read; its line is left out");
                    continue;
                }
            };
            let txn = TxnKind::Apply {
                proposal_id: p.id.clone(),
                slug: p.slug.clone(),
                proposal_kind: p.kind,
                target: p.target.clone(),
                proposal_hash: p.proposal_hash.clone(),
                history_id: String::new(),
                archived_to: String::new(),
                reason: String::new(),
                created_by: None,
            };
            match self.append_applied_line(
                v,
                &txn,
                row.decided_by.as_deref().unwrap_or(""),
                row.decided_at.as_deref().unwrap_or_default(),
            ) {
                Ok(s) => pending.merge(s),
                Err(e) => {
                    // Tried again by the next recovery.
                    tracing::error!(vault = %v.id, error = %e, "repairing _applied.jsonl failed");
                    break;
                }
            }
        }
        // What was appended is synced even when a later line failed.
        if let Err(e) = pending.sync() {
            tracing::error!(vault = %v.id, error = %e, "syncing _applied.jsonl failed");
        }
        Ok(())
    }

    /// At start: settles interrupted transactions in every vault, each under its lock.
    pub fn recover_all(&self) {
        for v in self.core.all_vaults() {
            let result = v
                .reader
                .fs()
                .write_lock()
                .map_err(GatewayError::from)
                .and_then(|_lock| self.recover(&v));
            if let Err(e) = result {
                tracing::error!(vault = %v.id, error = %e, "settling interrupted transactions failed");
            }
        }
    }
}

/// Each note the transaction leaves written, with the hash it leaves there (`None`: removed):
/// what `remember` tells this process's watcher, recorded for every other process's.
fn note_writes(intent: &Intent) -> Vec<(String, Option<String>)> {
    intent
        .ops
        .iter()
        .flat_map(FileOp::leaves)
        .filter(|(zone, _, _)| *zone == Zone::Note)
        .map(|(_, path, hash)| (path.to_owned(), hash.map(str::to_owned)))
        .collect()
}

pub(crate) fn internal(e: impl std::fmt::Display) -> GatewayError {
    GatewayError::Internal(e.to_string())
}

/// The refusals a rollback can answer with, re-made (the error type holds I/O errors, which do
/// not clone).
fn clone_error(e: &GatewayError) -> GatewayError {
    match e {
        GatewayError::AuditUnavailable => GatewayError::AuditUnavailable,
        GatewayError::Refused(r) => GatewayError::Refused(r.clone()),
        GatewayError::Again(code, m) => GatewayError::Again(*code, m.clone()),
        other if other.code() == ErrorCode::INTERNAL => GatewayError::Internal(other.to_string()),
        other => GatewayError::Again(other.code(), other.to_string()),
    }
}
