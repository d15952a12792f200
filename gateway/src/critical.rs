//! The critical tools of SPEC §7: `delete_permanent` and `empty_trash`, always two calls.
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
use rmcp::handler::server::common::{schema_for_empty_input, schema_for_input, schema_for_output};
use rmcp::model::{JsonObject, MetaObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use vault::write::{Area, MACHINE_DIR, WriteError};

use crate::changes::VaultChanged;
use crate::core::{Actor, Caller, Core, VaultHandle, now_unix, rfc3339};
use crate::error::GatewayError;

pub const DELETE_PERMANENT: &str = "delete_permanent";
pub const EMPTY_TRASH: &str = "empty_trash";

/// The folder under `.vaultgate/` where applied deletions keep notes (`VaultFs::trash_path`).
const TRASH_DIR: &str = "trash";
/// At most this many paths per `delete_permanent`.
const MAX_PATHS: usize = 1000;
/// Trash walks stop descending below this depth (notes are at most 32 deep, plus the trash prefix).
const MAX_TRASH_DEPTH: usize = 40;
/// Challenges are forgotten this long after they expire (a replay then answers as unknown).
const KEEP_EXPIRED_SECONDS: i64 = 7 * 24 * 3600;

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
    /// Every file the call would remove, sorted.
    pub affected: Vec<String>,
    pub count: u64,
    /// Always "irreversible".
    pub recoverability: String,
    /// The vault revision the plan was made against; any change before the second call refuses it.
    pub revision: u64,
    /// RFC 3339 UTC.
    pub expires_at: String,
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
}

// ---- the catalog entries ------------------------------------------------------------------------

const DELETE_PERMANENT_DESCRIPTION: &str = "CRITICAL, irreversible: deletes notes for good (no trash, no undo; \
     undo history stops here). Two calls: the first (paths, idempotencyKey) executes nothing and returns a \
     challenge listing what would be deleted; show it to the user, then repeat the same call with its \
     challengeId, planHash and acknowledged: true. Prefer propose_delete, which can be undone.";

const EMPTY_TRASH_DESCRIPTION: &str = "CRITICAL, irreversible: removes every note that applied deletions moved \
     to the vault trash (undo history stops here). Two calls: the first (idempotencyKey) executes nothing \
     and returns a challenge listing what would be removed; show it to the user, then repeat the same call \
     with its challengeId, planHash and acknowledged: true.";

/// `_meta` of every critical tool (SPEC §4).
pub fn critical_meta() -> MetaObject {
    let mut m = JsonObject::new();
    m.insert("risk".into(), "critical".into());
    m.insert("approval".into(), "agent-challenge".into());
    m.insert("requiresCriticalConfirmation".into(), true.into());
    MetaObject(m)
}

fn critical_tool<I: JsonSchema + 'static>(
    name: &'static str,
    title: &str,
    description: &'static str,
) -> Tool {
    let mut ann = ToolAnnotations::with_title(title);
    ann.read_only_hint = Some(false);
    ann.destructive_hint = Some(true);
    ann.idempotent_hint = Some(false);
    ann.open_world_hint = Some(false);
    let input = schema_for_input::<I>().unwrap_or_else(|_| schema_for_empty_input());
    let mut tool = Tool::new(name, description, input);
    tool.title = Some(title.to_owned());
    tool.output_schema = Some(schema_for_output::<CriticalOut>());
    tool.annotations = Some(ann);
    tool.meta = Some(critical_meta());
    tool
}

/// The catalog entry of `delete_permanent`.
pub fn delete_permanent_tool() -> Tool {
    critical_tool::<DeletePermanentArgs>(
        DELETE_PERMANENT,
        "Delete notes permanently",
        DELETE_PERMANENT_DESCRIPTION,
    )
}

/// The catalog entry of `empty_trash`.
pub fn empty_trash_tool() -> Tool {
    critical_tool::<EmptyTrashArgs>(EMPTY_TRASH, "Empty the vault trash", EMPTY_TRASH_DESCRIPTION)
}

// ---- audit helpers for `Core::call_tool_as` -------------------------------------------------------

/// True when a critical call executed: it wrote its own durable audit line before committing.
pub fn audited_itself(tool: &str, result: &Result<Value, GatewayError>) -> bool {
    (tool == DELETE_PERMANENT || tool == EMPTY_TRASH)
        && result
            .as_ref()
            .is_ok_and(|v| v.get("status").and_then(Value::as_str) == Some("executed"))
}

/// The challenge a call's audit line names: the one it presented, else the one it was issued.
pub fn audit_challenge_id(args: &Value, result: &Result<Value, GatewayError>) -> Option<String> {
    args.get("challengeId")
        .and_then(Value::as_str)
        .or_else(|| result.as_ref().ok()?.pointer("/challenge/challengeId")?.as_str())
        .map(str::to_owned)
}

// ---- the execution record -----------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Which {
    DeletePermanent,
    EmptyTrash,
}

impl Which {
    fn name(self) -> &'static str {
        match self {
            Which::DeletePermanent => DELETE_PERMANENT,
            Which::EmptyTrash => EMPTY_TRASH,
        }
    }

    /// Notes are removed as proposal targets; trash files only beneath `.vaultgate/`.
    fn area(self) -> Area {
        match self {
            Which::DeletePermanent => Area::Note,
            Which::EmptyTrash => Area::Machine,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Removal {
    path: String,
    /// The file's hash when the execution began: a file with other bytes is not removed.
    before: String,
}

/// The intent: everything needed to finish an execution, recorded as the challenge is consumed.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Execution {
    tool: Which,
    challenge_id: String,
    history_id: String,
    removals: Vec<Removal>,
    actor: String,
    audit_actor: audit::Actor,
    args_hash: String,
    started_at: String,
}

/// Test-only crash injection, as in the apply transaction: `VAULTGATE_TEST_FAILPOINT=<step>`
/// aborts the process at that step.
fn failpoint(step: &str) {
    if std::env::var("VAULTGATE_TEST_FAILPOINT").is_ok_and(|s| s == step) {
        tracing::warn!(step, "failpoint: aborting");
        std::process::abort();
    }
}

fn internal(e: impl std::fmt::Display) -> GatewayError {
    GatewayError::Internal(e.to_string())
}

/// Parses tool arguments strictly: unknown fields and wrong types are `INVALID_ARGUMENT`.
fn parse<T: DeserializeOwned>(args: &Value) -> Result<T, GatewayError> {
    T::deserialize(args).map_err(|e| GatewayError::InvalidArgument(format!("bad arguments: {e}")))
}

fn to_value<T: Serialize>(v: T) -> Result<Value, GatewayError> {
    serde_json::to_value(v).map_err(|e| internal(format!("serializing a result: {e}")))
}

// ---- the tools ----------------------------------------------------------------------------------

impl Core {
    /// `delete_permanent`: first call → challenge; exact second call → the notes are deleted.
    pub fn delete_permanent(
        &self,
        caller: &Caller,
        v: &Arc<VaultHandle>,
        args: &Value,
    ) -> Result<Value, GatewayError> {
        let a: DeletePermanentArgs = parse(args)?;
        if a.paths.is_empty() || a.paths.len() > MAX_PATHS {
            return Err(GatewayError::InvalidArgument(format!(
                "`paths` takes 1 to {MAX_PATHS} note paths"
            )));
        }
        self.critical(caller, v, Which::DeletePermanent, args, &a.idempotency_key)
    }

    /// `empty_trash`: first call → challenge; exact second call → the trash is emptied.
    pub fn empty_trash(
        &self,
        caller: &Caller,
        v: &Arc<VaultHandle>,
        args: &Value,
    ) -> Result<Value, GatewayError> {
        let a: EmptyTrashArgs = parse(args)?;
        self.critical(caller, v, Which::EmptyTrash, args, &a.idempotency_key)
    }

    fn critical(
        &self,
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
        // SECURITY(T-CRIT2): one decision and one execution at a time per vault, across
        // processes; the revision is read from the disk itself under the lock, so a change the
        // watcher has not reported yet still makes the challenge stale.
        let _lock = v.reader.fs().write_lock()?;
        // Interrupted applies, undo/redo and critical calls are finished before anything is decided.
        self.recover(v)?;
        self.recover_critical(v)?;
        let revision = self.revision_now(v)?;
        let refuse = |refusal, stored| self.refuse(caller, v, which, args, revision, refusal, stored);

        let stored = match challenge::phase(args) {
            Phase::First => {
                let c = self.issue(caller, v, which, args, revision)?;
                return to_value(CriticalOut {
                    status: CriticalStatus::Challenge,
                    challenge: Some(c),
                    deleted: None,
                    removed: None,
                });
            }
            Phase::Incomplete => return Err(refuse(Refusal::Required, None)),
            Phase::Second { challenge_id, .. } => self.state.challenge(challenge_id)?,
        };
        let issued = match &stored {
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
        if let Err(refusal) = challenge::decide(self.secret().bytes(), issued.as_ref(), &attempt) {
            return Err(refuse(refusal, stored.as_ref()));
        }
        let (Some(stored), Some(issued)) = (stored, issued) else {
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
        let exec = Execution {
            tool: which,
            challenge_id: stored.id.clone(),
            history_id: format!("h_{}", uuid::Uuid::now_v7().simple()),
            removals,
            actor: actor.label(),
            audit_actor: actor.audit_actor(),
            args_hash: audit::args_hash(args),
            started_at: rfc3339(time::OffsetDateTime::now_utc()),
        };
        // SECURITY(T-CRIT3): exactly once, even against another process that read the same row.
        if !self
            .state
            .consume_challenge(&stored.id, now_unix(), &to_value(&exec)?)?
        {
            return Err(refuse(Refusal::Consumed, Some(&stored)));
        }
        failpoint("critical_after_consume");
        to_value(self.finish_execution(v, &exec, false)?)
    }

    /// Records a challenge for the call as sent (challenge fields ignored) and returns it.
    fn issue(
        &self,
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
            Which::EmptyTrash => trash_files(v)?,
        };
        let key = args
            .get("idempotencyKey")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let now = now_unix();
        if let Err(e) = self
            .state
            .prune_challenges(now.saturating_sub(KEEP_EXPIRED_SECONDS))
        {
            tracing::warn!(error = %e, "pruning old challenges failed");
        }
        let ttl = i64::try_from(self.config.limits.challenge_ttl_seconds).unwrap_or(i64::MAX);
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
        let plan_hash = challenge::plan_hash(self.secret().bytes(), &plan);
        self.state.create_challenge(&inbox::NewChallenge {
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
        })?;
        Ok(ChallengeOut {
            challenge_id: id,
            plan_hash,
            affected: plan.affected,
            count: plan.count,
            recoverability: RECOVERABILITY.into(),
            revision,
            expires_at,
        })
    }

    /// The refusal of a second call, with a fresh challenge for the call as sent when one can be
    /// issued (not, for example, when the notes it names are already gone).
    #[allow(clippy::too_many_arguments)]
    fn refuse(
        &self,
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
        let fresh = match self.issue(caller, v, which, args, revision) {
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
        GatewayError::Challenge(refusal.code(), message, fresh)
    }

    /// Checks each path as a deletable note that exists: every path syntactically first, so
    /// `PATH_INVALID` and `PATH_DENIED` reveal nothing about what exists.
    fn planned_deletions(&self, v: &VaultHandle, paths: &[String]) -> Result<Vec<String>, GatewayError> {
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
    ) -> Result<Option<Vec<Removal>>, GatewayError> {
        if which == Which::EmptyTrash && trash_files(v)? != affected {
            return Ok(None);
        }
        let fs = v.reader.fs();
        let mut out = Vec::with_capacity(affected.len());
        for path in affected {
            let p = VaultPath::parse(path)?;
            match fs.read_for_write(which.area(), &p)? {
                Some((_, before)) => out.push(Removal {
                    path: path.clone(),
                    before,
                }),
                None => return Ok(None),
            }
        }
        Ok(Some(out))
    }

    /// The vault's revision as the disk is now (under the write lock): a change the watcher has
    /// not reported yet is counted here, once, like the watcher would.
    fn revision_now(&self, v: &VaultHandle) -> Result<u64, GatewayError> {
        let (revision, moved) = self
            .state
            .note_disk_state(&v.id, &crate::changes::fingerprint(v))?;
        if moved {
            self.announce(VaultChanged {
                vault: v.id.clone(),
                revision,
            });
        }
        Ok(revision)
    }

    /// Removes the files, appends the durable audit line and the history barrier, then commits
    /// the result with the revision. Every step may run again after a crash.
    fn finish_execution(
        &self,
        v: &VaultHandle,
        exec: &Execution,
        recovering: bool,
    ) -> Result<CriticalOut, GatewayError> {
        let fs = v.reader.fs();
        let area = exec.tool.area();
        let mut gone = Vec::new();
        for r in &exec.removals {
            let p = VaultPath::parse(&r.path)?;
            match fs.read_for_write(area, &p)? {
                None => {}
                Some((_, now)) if now == r.before => match fs.remove_file(area, &p) {
                    Ok(()) | Err(WriteError::NotFound) => {}
                    Err(e) => return Err(e.into()),
                },
                Some(_) => {
                    // Rewritten since the plan (outside vaultgate): not what was shown, so kept.
                    tracing::warn!(path = %p, challenge = %exec.challenge_id, "changed since planned; not removed");
                    continue;
                }
            }
            gone.push(r);
        }
        failpoint("critical_after_remove");
        let paths: Vec<String> = gone.iter().map(|r| r.path.clone()).collect();
        let result = match exec.tool {
            Which::DeletePermanent => CriticalOut {
                status: CriticalStatus::Executed,
                challenge: None,
                deleted: Some(paths.clone()),
                removed: None,
            },
            Which::EmptyTrash => CriticalOut {
                status: CriticalStatus::Executed,
                challenge: None,
                deleted: None,
                removed: Some(paths.len() as u64),
            },
        };
        self.audit.append(
            audit::Entry {
                event: if recovering {
                    "critical.recovered".into()
                } else {
                    "tool_call".into()
                },
                actor: exec.audit_actor.clone(),
                vault: Some(v.id.clone()),
                tool: Some(exec.tool.name().into()),
                target: (paths.len() == 1).then(|| paths.join("")),
                proposal_id: None,
                challenge_id: Some(exec.challenge_id.clone()),
                outcome: audit::Outcome::Ok,
                code: None,
                args_hash: Some(exec.args_hash.clone()),
            },
            time::OffsetDateTime::now_utc(),
            audit::Durability::Sync,
        )?;
        let changed = !gone.is_empty();
        if changed {
            // SPEC §7, §8: permanent deletion is a history barrier; undo stops here.
            let history: Vec<Value> = gone
                .iter()
                .map(|r| json!({"path": r.path, "before": r.before, "after": null}))
                .collect();
            let label = match exec.tool {
                Which::DeletePermanent => format!("delete_permanent {}", paths.join(", ")),
                Which::EmptyTrash => format!("empty_trash ({} files)", paths.len()),
            };
            let entry = inbox::NewHistory {
                id: &exec.history_id,
                label: &label,
                kind: exec.tool.name(),
                created_by: &exec.actor,
                created_at: &rfc3339(time::OffsetDateTime::now_utc()),
                paths: &Value::Array(history),
                barrier: true,
            };
            match self.state.add_history(&v.id, &entry) {
                // Already written before an interruption.
                Ok(_) | Err(inbox::StateError::DuplicateHistoryEntry(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        failpoint("critical_before_commit");
        let fingerprint = crate::changes::fingerprint(v);
        let revision = self
            .state
            .finish_challenge(
                &exec.challenge_id,
                &to_value(&result)?,
                changed,
                Some(&fingerprint),
            )?
            .ok_or_else(|| internal(format!("challenge {} committed twice", exec.challenge_id)))?;
        if changed {
            self.settle_after_write(v, revision);
        }
        Ok(result)
    }

    /// Finishes every critical execution of this vault that a crash interrupted. The caller
    /// holds the vault's write lock.
    pub fn recover_critical(&self, v: &VaultHandle) -> Result<(), GatewayError> {
        for c in self.state.open_challenge_intents(&v.id)? {
            let Some(intent) = c.intent else { continue };
            let exec: Execution = match serde_json::from_value(intent) {
                Ok(e) => e,
                Err(e) => {
                    tracing::error!(challenge = %c.id, error = %e, "unreadable critical intent left in place");
                    continue;
                }
            };
            tracing::warn!(challenge = %c.id, tool = exec.tool.name(), "finishing an interrupted critical call");
            self.finish_execution(v, &exec, true)?;
        }
        Ok(())
    }

    /// At start: finishes interrupted critical executions in every vault, each under its lock.
    pub fn recover_critical_all(&self) {
        for v in self.all_vaults() {
            let open = self
                .state
                .open_challenge_intents(&v.id)
                .map(|i| !i.is_empty())
                .unwrap_or(false);
            if !open {
                continue;
            }
            let result = v
                .reader
                .fs()
                .write_lock()
                .map_err(GatewayError::from)
                .and_then(|_lock| self.recover_critical(&v));
            if let Err(e) = result {
                tracing::error!(vault = %v.id, error = %e, "finishing interrupted critical calls failed");
            }
        }
    }
}

/// Every regular file under `.vaultgate/trash/`, as sorted vault paths.
///
/// SECURITY(T-PATH): a listing only. It never follows a symlink (a directory entry's type is
/// its own, and the trash folders are checked with `symlink_metadata`), skips anything but
/// regular files, and names only paths the Machine area accepts; each file is then read and
/// removed through `VaultFs`, which walks from the vault handle with no-follow again.
fn trash_files(v: &VaultHandle) -> Result<Vec<String>, GatewayError> {
    let fs = v.reader.fs();
    let mut dir = fs.root().to_path_buf();
    for seg in [MACHINE_DIR, TRASH_DIR] {
        dir.push(seg);
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(PathError::Denied("the vault trash is not a plain folder").into()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        }
    }
    let mut out = Vec::new();
    let mut segments = vec![MACHINE_DIR.to_owned(), TRASH_DIR.to_owned()];
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
    fn the_catalog_entries_are_critical() {
        for t in [delete_permanent_tool(), empty_trash_tool()] {
            let v = serde_json::to_value(&t).unwrap();
            assert_eq!(v["annotations"]["destructiveHint"], true, "{v}");
            assert_eq!(v["annotations"]["readOnlyHint"], false, "{v}");
            assert_eq!(
                v["_meta"],
                json!({"risk": "critical", "approval": "agent-challenge", "requiresCriticalConfirmation": true})
            );
            assert_eq!(v["outputSchema"]["type"], "object");
            assert!(policy::tools::find(&t.name).is_some_and(|s| s.kind == policy::ToolKind::Critical));
        }
    }

    #[test]
    fn outputs_keep_absent_fields_absent() {
        let out = CriticalOut {
            status: CriticalStatus::Executed,
            challenge: None,
            deleted: None,
            removed: Some(0),
        };
        assert_eq!(
            serde_json::to_value(&out).unwrap(),
            json!({"status": "executed", "removed": 0})
        );
    }

    #[test]
    fn audit_helpers() {
        let executed: Result<Value, GatewayError> = Ok(json!({"status": "executed", "deleted": []}));
        let issued: Result<Value, GatewayError> =
            Ok(json!({"status": "challenge", "challenge": {"challengeId": "c2"}}));
        assert!(audited_itself(DELETE_PERMANENT, &executed));
        assert!(!audited_itself(DELETE_PERMANENT, &issued));
        assert!(!audited_itself("apply_proposal", &executed));
        assert_eq!(
            audit_challenge_id(&json!({"challengeId": "c1"}), &issued).as_deref(),
            Some("c1")
        );
        assert_eq!(audit_challenge_id(&json!({}), &issued).as_deref(), Some("c2"));
        assert_eq!(audit_challenge_id(&json!({}), &executed), None);
    }
}
