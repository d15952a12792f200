//! The critical tools of docs/contract.md#critical-operations: `delete_permanent` and `empty_trash`, always two calls.
//!
//! The first call (no challenge fields) validates, records a challenge whose `planHash` is an HMAC
//! over the plan, and executes nothing. The second call repeats the first plus `challengeId`,
//! `planHash` and `acknowledged: true`; under the vault's write lock it is decided by
//! [`proposals::challenge::decide`] against the stored challenge and the revision as it is on disk
//! right now, and executes exactly once: the challenge is consumed by one conditional UPDATE. Every
//! refusal carries a fresh challenge for the call as sent, when one can be issued.
//!
//! Crash safety: the statement that consumes the challenge also records what will be removed (the
//! intent, with each file's hash). Every removal is idempotent (a file already gone is done, a file
//! whose bytes changed since is left alone), and the commit records the result and moves the
//! revision in one transaction after the history barrier and the durable audit line. An
//! interrupted execution is finished under the lock by the next critical call in that vault, or at
//! start ([`Core::recover_critical_all`]). Removed bytes are not kept anywhere: that is the point.

use std::path::Path;
use std::sync::Arc;

use policy::{PathError, VaultPath};
use proposals::challenge::{self, Attempt, Issued, Phase, Plan, PlanInput, RECOVERABILITY, Refusal};
use proposals::ops::{FileOp, Zone};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use vault::write::{Area, MACHINE_DIR};

use crate::call::Call;
use crate::changes::VaultChanged;
use crate::core::{Actor, Caller, Core, VaultHandle, now_unix, rfc3339};
use crate::error::GatewayError;
use crate::txn::{AuditPlan, Intent, IntentAt, Keyed, TxnKind};

pub const DELETE_PERMANENT: &str = "delete_permanent";
pub const EMPTY_TRASH: &str = "empty_trash";

/// Whether `args` are a critical call's second call, the one that executes its challenge (a
/// first or incomplete one plans or refuses, and never waits for the vault's writer).
pub fn executes_challenge(args: &Value) -> bool {
    matches!(challenge::phase(args), Phase::Second { .. })
}

/// The folder under `.vaultgate/` where applied deletions keep notes (`VaultFs::trash_path`).
const TRASH_DIR: &str = "trash";
/// The folder under `.vaultgate/` where an execution holds what it removes until it commits.
const HOLD_DIR: &str = "txn";
/// At most this many paths per `delete_permanent`.
const MAX_PATHS: usize = 1000;
/// Trash walks stop descending below this depth (notes are at most 32 deep, plus the trash prefix).
const MAX_TRASH_DEPTH: usize = 40;
/// Challenges are forgotten this long after they expire (a replay then answers as unknown).
pub(crate) const KEEP_EXPIRED_SECONDS: i64 = 7 * 24 * 3600;

// ---- inputs and outputs -------------------------------------------------------------------------

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DeletePermanentArgs {
    pub vault: Option<String>,
    /// Vault-relative paths of the notes to delete for good (`*.md` under a notes folder).
    pub paths: Vec<String>,
    /// A fresh key per intended deletion; the second call repeats the first call's key.
    pub idempotency_key: String,
    /// Second call only: the `challengeId` the first call returned.
    pub challenge_id: Option<String>,
    /// Second call only: the `planHash` the first call returned.
    pub plan_hash: Option<String>,
    /// Second call only: `true`, confirming the irreversible plan was shown and accepted.
    pub acknowledged: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EmptyTrashArgs {
    pub vault: Option<String>,
    /// A fresh key per intended emptying; the second call repeats the first call's key.
    pub idempotency_key: String,
    /// Second call only: the `challengeId` the first call returned.
    pub challenge_id: Option<String>,
    /// Second call only: the `planHash` the first call returned.
    pub plan_hash: Option<String>,
    /// Second call only: `true`, confirming the irreversible plan was shown and accepted.
    pub acknowledged: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CriticalStatus {
    /// First call: nothing was executed; repeat the call with the challenge to execute it.
    Challenge,
    /// Second call: executed.
    Executed,
}

/// What a first call returns, and what every refusal of a second call carries as `challenge`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChallengeOut {
    pub challenge_id: String,
    pub plan_hash: String,
    /// The files the call would remove, sorted: at most 1,000 (`count` is exact; the plan and
    /// its hash cover every file).
    pub affected: Vec<String>,
    /// `affected` lists only the first 1,000 of `count` files.
    #[serde(default)]
    pub truncated: bool,
    pub count: u64,
    /// Always "irreversible".
    pub recoverability: String,
    /// The vault revision the plan was made against; any change before the second call refuses it.
    pub revision: u64,
    /// RFC 3339 UTC.
    pub expires_at: String,
    /// Where the vault has git on: earlier versions stay in the user's git
    /// history, which vaultgate never rewrites.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_history: Option<String>,
}

/// The one output type of both critical tools: optional fields, so every success validates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CriticalOut {
    pub status: CriticalStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub challenge: Option<ChallengeOut>,
    /// `delete_permanent`: the notes deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted: Option<Vec<String>>,
    /// `empty_trash`: how many files were removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed: Option<u64>,
    /// Once executed: "committed", "queued" or "off", its git commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<String>,
    /// On a team vault: the commit that made the change (on the remote's branch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

// ---- the execution -------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Which {
    DeletePermanent,
    EmptyTrash,
}

impl Which {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Which::DeletePermanent => DELETE_PERMANENT,
            Which::EmptyTrash => EMPTY_TRASH,
        }
    }

    /// Notes are removed as proposal targets; trash files only beneath `.vaultgate/`.
    fn zone(self) -> Zone {
        match self {
            Which::DeletePermanent => Zone::Note,
            Which::EmptyTrash => Zone::Machine,
        }
    }
}

impl CriticalOut {
    /// A first call's answer: the challenge, nothing executed.
    pub(crate) fn issued(c: ChallengeOut) -> CriticalOut {
        CriticalOut {
            status: CriticalStatus::Challenge,
            challenge: Some(c),
            deleted: None,
            removed: None,
            git: None,
            commit: None,
        }
    }
}

/// The answer of an executed critical call.
pub(crate) fn executed(tool: &str, paths: &[String]) -> CriticalOut {
    if tool == DELETE_PERMANENT {
        CriticalOut {
            status: CriticalStatus::Executed,
            challenge: None,
            deleted: Some(paths.to_vec()),
            removed: None,
            git: None,
            commit: None,
        }
    } else {
        CriticalOut {
            status: CriticalStatus::Executed,
            challenge: None,
            deleted: None,
            removed: Some(paths.len() as u64),
            git: None,
            commit: None,
        }
    }
}

/// Where an execution holds the files it removes until its commit: put back from there on a
/// rollback, purged after the commit. Removed bytes are kept nowhere else.
fn hold_dir(challenge_id: &str) -> String {
    format!("{MACHINE_DIR}/{HOLD_DIR}/{challenge_id}")
}

fn internal(e: impl std::fmt::Display) -> GatewayError {
    GatewayError::Internal(e.to_string())
}

/// Parses tool arguments strictly: unknown fields and wrong types are `INVALID_ARGUMENT`.
fn parse<T: DeserializeOwned>(args: &Value) -> Result<T, GatewayError> {
    T::deserialize(args).map_err(|e| GatewayError::InvalidArgument(format!("bad arguments: {e}")))
}

pub(crate) fn to_value<T: Serialize>(v: T) -> Result<Value, GatewayError> {
    serde_json::to_value(v).map_err(|e| internal(format!("serializing a result: {e}")))
}

// ---- the tools ----------------------------------------------------------------------------------

/// Where a challenge is kept: the home's state, or (a team vault) the team's database.
#[derive(Clone, Copy)]
pub(crate) enum Keep<'t> {
    Local,
    Team(&'t dyn crate::storage::TeamState),
}

/// Two-phase challenges for critical operations.
pub struct Challenges<'a> {
    pub(crate) core: &'a crate::core::Core,
}

impl Challenges<'_> {
    /// `delete_permanent`: first call → challenge; exact second call → the notes are deleted.
    pub fn delete_permanent(
        &self,
        call: &mut Call<'_>,
        caller: &Caller,
        v: &Arc<VaultHandle>,
    ) -> Result<Value, GatewayError> {
        let args = call.args().clone();
        let a: DeletePermanentArgs = parse(&args)?;
        if a.paths.is_empty() || a.paths.len() > MAX_PATHS {
            return Err(GatewayError::InvalidArgument(format!(
                "`paths` takes 1 to {MAX_PATHS} note paths"
            )));
        }
        self.critical(call, caller, v, Which::DeletePermanent, &args, &a.idempotency_key)
    }

    /// `empty_trash`: first call → challenge; exact second call → the trash is emptied.
    pub fn empty_trash(
        &self,
        call: &mut Call<'_>,
        caller: &Caller,
        v: &Arc<VaultHandle>,
    ) -> Result<Value, GatewayError> {
        let args = call.args().clone();
        let a: EmptyTrashArgs = parse(&args)?;
        self.critical(call, caller, v, Which::EmptyTrash, &args, &a.idempotency_key)
    }

    fn critical(
        &self,
        call: &mut Call<'_>,
        caller: &Caller,
        v: &Arc<VaultHandle>,
        which: Which,
        args: &Value,
        key: &str,
    ) -> Result<Value, GatewayError> {
        if key.trim().is_empty() {
            return Err(GatewayError::InvalidArgument(
                "idempotencyKey must not be empty".into(),
            ));
        }
        if let Some(team) = crate::teamwrite::team_of(self.core, v) {
            return crate::teamcritical::critical(self, team, call, caller, v, which, args);
        }
        // SECURITY(T-CRIT2): one decision and one execution at a time per vault, across
        // processes (the challenge row keys a repeat); the revision is read from the disk itself
        // under the lock, so a change the watcher has not reported yet still makes the challenge
        // stale.
        self.core.writes().write(
            call,
            v,
            Keyed::Row,
            crate::group::Claims::exclusive(),
            |_| Ok(()),
            |call, ()| self.critical_locked(call, caller, v, which, args),
        )
    }

    /// A critical call under the vault's write lock, interrupted writes settled.
    fn critical_locked(
        &self,
        call: &mut Call<'_>,
        caller: &Caller,
        v: &Arc<VaultHandle>,
        which: Which,
        args: &Value,
    ) -> Result<Value, GatewayError> {
        let revision = self.revision_now(v)?;
        let refuse =
            |refusal, stored| self.refuse(Keep::Local, caller, v, which, args, revision, refusal, stored);

        let stored = match challenge::phase(args) {
            Phase::First => {
                let c = self.issue(Keep::Local, caller, v, which, args, revision)?;
                return to_value(CriticalOut::issued(c));
            }
            Phase::Incomplete => return Err(refuse(Refusal::Required, None)),
            Phase::Second { challenge_id, .. } => self.core.state.challenge(challenge_id)?,
        };
        let issued = match self.decide(stored.as_ref(), caller, v, which, args, revision)? {
            Ok(issued) => issued,
            Err(refusal) => return Err(refuse(refusal, stored.as_ref())),
        };
        let Some(stored) = stored else {
            return Err(internal("a challenge was accepted without a stored plan"));
        };
        // The files must be those the plan was shown with: the revision covers the notes; the
        // trash is listed again.
        let stale = Refusal::Stale {
            planned: revision,
            now: revision,
        };
        let Some(removals) = self.current_removals(v, which, &issued.plan.affected)? else {
            return Err(refuse(stale, Some(&stored)));
        };
        let actor = Actor::Caller(caller.clone());
        let hold = hold_dir(&stored.id);
        let ops: Vec<FileOp> = removals
            .into_iter()
            .enumerate()
            .map(|(i, (path, hash))| FileOp::Rename {
                from_zone: which.zone(),
                from: path,
                to_zone: Zone::Machine,
                to: format!("{hold}/{i}"),
                hash,
            })
            .collect();
        let intent = Intent {
            txn: TxnKind::Critical {
                tool: which.name().into(),
                challenge_id: stored.id.clone(),
                history_id: crate::ids::HistoryEntryId::new().to_string(),
                hold,
            },
            note_ops: ops.len(),
            ops,
            audit: AuditPlan {
                actor: actor.audit_actor(),
                actor_label: actor.label(),
                event: call.event().to_owned(),
                tool: which.name().into(),
                args_hash: call.args_hash(),
                idempotency: None,
                log_offset: self.core.audit.end_offset()?,
                approval: None,
            },
            started_at: rfc3339(time::OffsetDateTime::now_utc()),
            rolling_back: false,
            epoch: call.lease_epoch(),
        };
        // SECURITY(T-CRIT3): exactly once, even against another process that read the same row;
        // the same statement records the intent, so no used challenge is left unfinishable.
        if !self
            .core
            .state
            .consume_challenge(&stored.id, now_unix(), &to_value(&intent)?)?
        {
            return Err(refuse(Refusal::Consumed, Some(&stored)));
        }
        self.core.writes().failpoint(&intent.txn, "after_intent");
        let committed = self.core.writes().run_txn(
            v,
            &IntentAt::Challenge(stored.id.clone()),
            &intent,
            "",
            Some(call),
        )?;
        Ok(committed.result)
    }

    /// A second call decided against its stored challenge (docs/contract.md#critical-operations):
    /// the challenge as issued, or why the call does not execute.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn decide(
        &self,
        stored: Option<&inbox::StoredChallenge>,
        caller: &Caller,
        v: &VaultHandle,
        which: Which,
        args: &Value,
        revision: u64,
    ) -> Result<Result<Issued, Refusal>, GatewayError> {
        let issued = match stored {
            Some(s) => Some(Issued {
                plan: serde_json::from_value::<Plan>(s.plan.clone()).map_err(internal)?,
                expires_at: s.expires_at,
                consumed: s.consumed_at.is_some(),
            }),
            None => None,
        };
        let attempt = Attempt {
            tool: which.name(),
            vault: &v.id,
            credential_id: caller.credential.id.as_str(),
            arguments: args,
            now: now_unix(),
            revision,
        };
        Ok(
            match challenge::decide(self.core.secret().bytes(), issued.as_ref(), &attempt) {
                Err(refusal) => Err(refusal),
                Ok(()) => issued.ok_or(Refusal::Mismatch(challenge::Mismatch::Unknown)),
            },
        )
    }

    /// Records a challenge for the call as sent (challenge fields ignored) and returns it.
    pub(crate) fn issue(
        &self,
        keep: Keep<'_>,
        caller: &Caller,
        v: &VaultHandle,
        which: Which,
        args: &Value,
        revision: u64,
    ) -> Result<ChallengeOut, GatewayError> {
        let affected = match which {
            Which::DeletePermanent => {
                let a: DeletePermanentArgs = parse(args)?;
                self.planned_deletions(v, &a.paths)?
            }
            // A team vault's trash is its remote's history, which vaultgate never rewrites.
            Which::EmptyTrash => match keep {
                Keep::Local => trash_files(v)?,
                Keep::Team(_) => Vec::new(),
            },
        };
        let key = args
            .get("idempotencyKey")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let now = now_unix();
        let before = now.saturating_sub(KEEP_EXPIRED_SECONDS);
        let pruned = match keep {
            Keep::Local => self
                .core
                .state
                .prune_challenges(before)
                .map(drop)
                .map_err(GatewayError::from),
            Keep::Team(team) => team.prune_challenges(before),
        };
        if let Err(e) = pruned {
            tracing::warn!(error = %e, "pruning old challenges failed");
        }
        let ttl = i64::try_from(self.core.config().limits.challenge_ttl_seconds).unwrap_or(i64::MAX);
        let expires = now.saturating_add(ttl);
        let expires_at = time::OffsetDateTime::from_unix_timestamp(expires)
            .map(rfc3339)
            .map_err(internal)?;
        let id = uuid::Uuid::now_v7().to_string();
        let credential_id = caller.credential.id.as_str();
        let plan = Plan::new(PlanInput {
            tool: which.name(),
            vault: &v.id,
            arguments: args,
            affected,
            revision,
            credential_id,
            challenge_id: &id,
            expires_at: &expires_at,
        });
        let plan_hash = challenge::plan_hash(self.core.secret().bytes(), &plan);
        let new = inbox::NewChallenge {
            id: &id,
            vault: &v.id,
            credential_id,
            tool: which.name(),
            args_hash: &challenge::arguments_hash(args),
            idempotency_key: key,
            plan: &to_value(&plan)?,
            plan_hash: &plan_hash,
            revision,
            expires_at: expires,
            created_at: now,
        };
        match keep {
            Keep::Local => self.core.state.create_challenge(&new)?,
            Keep::Team(team) => team.create_challenge(&new)?,
        }
        let mut affected = plan.affected;
        let truncated = affected.len() > vault::MAX_LIST_ITEMS;
        affected.truncate(vault::MAX_LIST_ITEMS);
        Ok(ChallengeOut {
            challenge_id: id,
            plan_hash,
            affected,
            truncated,
            count: plan.count,
            recoverability: RECOVERABILITY.into(),
            revision,
            expires_at,
            git_history: match keep {
                Keep::Local => self.core.state.git_enabled(&v.id)?.then(|| {
                    "this vault's git history keeps earlier versions of these notes; vaultgate does not rewrite it (the deletion itself is committed)".to_owned()
                }),
                Keep::Team(_) => Some(
                    "this team vault's remote keeps earlier versions of these notes in its git history, which vaultgate never rewrites (the deletion itself is one commit; vaultgate no longer reads those versions)".to_owned(),
                ),
            },
        })
    }

    /// The refusal of a second call, with a fresh challenge for the call as sent when one can be
    /// issued (not, for example, when the notes it names are already gone).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn refuse(
        &self,
        keep: Keep<'_>,
        caller: &Caller,
        v: &VaultHandle,
        which: Which,
        args: &Value,
        revision: u64,
        refusal: Refusal,
        stored: Option<&inbox::StoredChallenge>,
    ) -> GatewayError {
        let mut message = format!("{}.", refusal.fact());
        if refusal == Refusal::Consumed
            && let Some(done) = stored.and_then(|s| s.result.as_ref())
        {
            message.push_str(&format!(" It executed once, answering {done}."));
        }
        let fresh = match self.issue(keep, caller, v, which, args, revision) {
            Ok(c) => {
                message.push_str(
                    " Nothing was executed by this call. To go ahead, show the user `challenge` (in this \
                     error) and repeat the call with its challengeId, its planHash and acknowledged: true.",
                );
                serde_json::to_value(c).ok().map(Box::new)
            }
            Err(e) => {
                message.push_str(&format!(
                    " Nothing was executed by this call, and no new challenge can be issued for it: {}",
                    e.client_message()
                ));
                None
            }
        };
        GatewayError::Challenge(refusal, message, fresh)
    }

    /// Checks each path as a deletable note that exists: every path syntactically first, so
    /// `PATH_INVALID` and `PATH_DENIED` reveal nothing about what exists.
    pub(crate) fn planned_deletions(
        &self,
        v: &VaultHandle,
        paths: &[String],
    ) -> Result<Vec<String>, GatewayError> {
        let mut parsed = Vec::with_capacity(paths.len());
        for raw in paths {
            let p = VaultPath::parse(raw)?;
            v.reader.layout().check_write_target(&p)?;
            parsed.push(p);
        }
        for p in &parsed {
            if crate::proposing::current(v, p)?.is_none() {
                return Err(crate::proposing::not_found(p));
            }
        }
        Ok(parsed.iter().map(|p| p.to_string()).collect())
    }

    /// Each planned file with its current hash, or `None` when what is there is not what was
    /// planned (a note gone, or the trash holding other files).
    fn current_removals(
        &self,
        v: &VaultHandle,
        which: Which,
        affected: &[String],
    ) -> Result<Option<Vec<(String, String)>>, GatewayError> {
        if which == Which::EmptyTrash && trash_files(v)? != affected {
            return Ok(None);
        }
        let files = v.files();
        let mut out = Vec::with_capacity(affected.len());
        for path in affected {
            match files.hash(which.zone(), path)? {
                Some(before) => out.push((path.clone(), before)),
                None => return Ok(None),
            }
        }
        Ok(Some(out))
    }

    /// The vault's revision as the disk is now (under the write lock): a change the watcher has
    /// not reported yet is counted here, once, like the watcher would.
    fn revision_now(&self, v: &VaultHandle) -> Result<u64, GatewayError> {
        let (revision, moved) = self
            .core
            .state
            .note_disk_state(&v.id, &crate::changes::fingerprint(v))?;
        if moved {
            self.core.announce(VaultChanged {
                vault: v.id.clone(),
                revision,
            });
        }
        Ok(revision)
    }
}

/// Purges what executions that are no longer open left held (a crash between a commit and its
/// purge). Called under the vault's write lock, after every open intent was settled.
pub(crate) fn sweep_holds(core: &Core, v: &VaultHandle) -> Result<(), GatewayError> {
    let held = machine_files(v, HOLD_DIR)?;
    if held.is_empty() {
        return Ok(());
    }
    let open: std::collections::BTreeSet<String> = core
        .state
        .open_challenge_intents(&v.id)?
        .into_iter()
        .map(|c| hold_dir(&c.id))
        .collect();
    let files = v.files();
    for path in held {
        let dir = path.rsplit_once('/').map(|(d, _)| d).unwrap_or_default();
        if !open.contains(dir) {
            files.remove(Zone::Machine, &path)?;
        }
    }
    Ok(())
}

/// Every regular file under `.vaultgate/trash/`, as sorted vault paths.
///
/// SECURITY(T-PATH): a listing only. It never follows a symlink (a directory entry's type is
/// its own, and the trash folders are checked with `symlink_metadata`), skips anything but
/// regular files, and names only paths the Machine area accepts; each file is then read and
/// removed through `VaultFs`, which walks from the vault handle with no-follow again.
fn trash_files(v: &VaultHandle) -> Result<Vec<String>, GatewayError> {
    machine_files(v, TRASH_DIR)
}

/// Every regular file under `.vaultgate/<folder>/`, as sorted vault paths (see `trash_files`).
fn machine_files(v: &VaultHandle, folder: &str) -> Result<Vec<String>, GatewayError> {
    let fs = v.reader.fs();
    let mut dir = fs.root().to_path_buf();
    for seg in [MACHINE_DIR, folder] {
        dir.push(seg);
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(PathError::Denied("a machine folder is not a plain folder").into()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        }
    }
    let mut out = Vec::new();
    let mut segments = vec![MACHINE_DIR.to_owned(), folder.to_owned()];
    walk_trash(v, &dir, &mut segments, &mut out)?;
    out.sort_unstable();
    Ok(out)
}

fn walk_trash(
    v: &VaultHandle,
    dir: &Path,
    segments: &mut Vec<String>,
    out: &mut Vec<String>,
) -> Result<(), GatewayError> {
    if segments.len() > MAX_TRASH_DEPTH {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else {
            tracing::warn!(vault = %v.id, "a trash entry with a non-UTF-8 name is left in place");
            continue;
        };
        let ty = entry.file_type()?;
        segments.push(name);
        if ty.is_dir() {
            walk_trash(v, &entry.path(), segments, out)?;
        } else if ty.is_file() {
            match VaultPath::from_segments(segments.iter().map(String::as_str)) {
                Ok(p) if Area::Machine.check(v.reader.layout(), &p).is_ok() => out.push(p.to_string()),
                _ => tracing::warn!(vault = %v.id, "a trash file vaultgate cannot name is left in place"),
            }
        }
        segments.pop();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn outputs_keep_absent_fields_absent() {
        let out = CriticalOut {
            status: CriticalStatus::Executed,
            challenge: None,
            deleted: None,
            removed: Some(0),
            git: None,
            commit: None,
        };
        assert_eq!(
            serde_json::to_value(&out).unwrap(),
            serde_json::json!({"status": "executed", "removed": 0})
        );
    }
}
