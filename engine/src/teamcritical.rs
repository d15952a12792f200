//! The critical tools on a team vault (docs/contract.md#team-mode, #critical-operations): a
//! challenge is kept in the team's database, so whichever gateway receives the second call
//! executes it — exactly once across the team. The second call is decided under the vault's lock
//! in the team's database against the remote's head (a team vault's revision is the number of
//! commits its branch holds: it grows with every push, and every gateway counts the same); the
//! challenge is consumed with an intent record, and `delete_permanent` becomes one commit that
//! removes the notes, pushed by compare-and-swap like an apply. `empty_trash` removes nothing: a
//! team vault's trash is its remote's history, which vaultgate never rewrites.
//!
//! It must never push but by compare-and-swap, remove a note whose bytes are not the ones the
//! execution checked, or answer an execution whose push it has not seen land: an execution left
//! by a gateway that stopped is settled from the remote (whichever commit it pushed landed → it
//! executed; none → the challenge is unused again) before any decision.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use proposals::challenge::{self, Phase, Plan, Refusal};
use serde_json::Value;

use crate::call::{Call, TxnRecord};
use crate::core::{Caller, Core, VaultHandle, now_unix, rfc3339};
use crate::critical::{Challenges, CriticalOut, Keep, Which, to_value};
use crate::error::GatewayError;
use crate::git::{Repo, TreeEntry};
use crate::remote::{Synced, TeamVault};
use crate::storage::team::{Fence, VaultHold};
use crate::storage::{TeamChallenge, TeamState};
use crate::txn::internal;

/// How many times an execution builds its commit again on a remote that moved meanwhile.
const ATTEMPTS: usize = 3;

/// What an execution removes: each note with the blob id it had at the checked head.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct TeamIntent {
    base: String,
    files: Vec<(String, String)>,
}

/// A critical call on a team vault: the first call issues a challenge; the second executes it.
pub(crate) fn critical(
    ch: &Challenges<'_>,
    team: &dyn TeamState,
    call: &mut Call<'_>,
    caller: &Caller,
    v: &Arc<VaultHandle>,
    which: Which,
    args: &Value,
) -> Result<Value, GatewayError> {
    let core = ch.core;
    let vault = crate::teamwrite::registration(team, v)?;
    let dir = v.reader.fs().root();
    let keep = Keep::Team(team);
    let challenge_id = match challenge::phase(args) {
        Phase::First => {
            // Planned on the remote's head as fetched now, so the second call meets the same.
            let head = head_of(core, team, &vault, dir)?;
            let revision = crate::remote::commit_count(&core.git, dir, &head)?;
            let c = ch.issue(keep, caller, v, which, args, revision)?;
            return to_value(CriticalOut::issued(c));
        }
        Phase::Incomplete => {
            let head = head_of(core, team, &vault, dir)?;
            let revision = crate::remote::commit_count(&core.git, dir, &head)?;
            return Err(ch.refuse(keep, caller, v, which, args, revision, Refusal::Required, None));
        }
        Phase::Second { challenge_id, .. } => challenge_id.to_owned(),
    };
    let wait = Duration::from_secs(core.config().limits.apply_wait_seconds.max(1));
    // SECURITY(T-CRIT2): one decision and one execution at a time per team vault, across the
    // team's gateways.
    let hold = team.lock_vault(&v.id, wait)?;
    let fence = hold.fence();
    crate::teamsettle::settle_left_jobs(core, team, hold.as_ref(), v, None);
    if team.vault_head(&v.id)?.1.is_some() {
        return Err(crate::teampush::rewritten(&v.id));
    }
    let base = head_of(core, team, &vault, dir)?;
    let mut stored = team.challenge(&challenge_id)?;
    if let Some(s) = &stored
        && s.row.vault == v.id
        && s.row.result.is_none()
        && (s.row.consumed_at.is_some() || !s.pushed.is_empty())
    {
        settle(core, team, fence, dir, s)?;
        stored = team.challenge(&challenge_id)?;
    }
    let revision = crate::remote::commit_count(&core.git, dir, &base)?;
    let stored_row = stored.as_ref().map(|s| &s.row);
    let refuse = |refusal| ch.refuse(keep, caller, v, which, args, revision, refusal, stored_row);
    let plan = match ch.decide(stored_row, caller, v, which, args, revision)? {
        Ok(issued) => issued.plan,
        Err(refusal) => return Err(refuse(refusal)),
    };
    let repo = repo_of(core, dir)?;
    let stale = Refusal::Stale {
        planned: revision,
        now: revision,
    };
    let Some(files) = blobs_at(&repo, &base, &plan.affected)? else {
        return Err(refuse(stale));
    };
    let intent = TeamIntent {
        base: base.clone(),
        files,
    };
    let mut record = TxnRecord::ok(Some("critical.intent"), None, None);
    record.challenge_id = Some(challenge_id.clone());
    let intent_record = team
        .consume_challenge(
            fence,
            &challenge_id,
            now_unix(),
            &to_value(&intent)?,
            call.entry_for(record),
        )?
        .ok_or_else(|| refuse(Refusal::Consumed))?;
    core.failpoints.hit("team_critical.after_intent");
    let run = Execution {
        core,
        team,
        v,
        vault: &vault,
        repo: &repo,
        hold: hold.as_ref(),
        which,
        id: &challenge_id,
        planned: plan.revision,
        intent: &intent_record,
        uncertain: std::cell::Cell::new(false),
    };
    let out = run.run(call, intent, &|refusal| refuse(refusal));
    // Nothing of it can land (no push, or one the remote refused): the challenge is unused again.
    if let Err(e) = &out
        && !run.uncertain.get()
        && !matches!(e, GatewayError::AuditUnavailable)
        && let Err(kept) = team.release_challenge(fence, &challenge_id)
    {
        tracing::warn!(error = %kept, "a failed execution kept its challenge consumed");
    }
    out
}

/// The remote's head as the clone holds it after a fetch (a rewritten history refuses).
fn head_of(
    core: &Core,
    team: &dyn TeamState,
    vault: &TeamVault,
    dir: &std::path::Path,
) -> Result<String, GatewayError> {
    match crate::teampush::sync_checked(core, team, vault, dir)? {
        Synced::Cloned(h) | Synced::At(h) => Ok(h),
        Synced::Diverged { .. } => Err(crate::teampush::rewritten(&vault.id)),
    }
}

fn repo_of(core: &Core, dir: &std::path::Path) -> Result<Repo, GatewayError> {
    Repo::discover(&core.git, dir)
        .map_err(crate::changelog::git_error)?
        .ok_or_else(|| internal(format!("no clone at {}", dir.display())))
}

/// Each of `paths` with its blob id at `rev`; `None` when one is not there.
fn blobs_at(repo: &Repo, rev: &str, paths: &[String]) -> Result<Option<Vec<(String, String)>>, GatewayError> {
    let mut out = Vec::with_capacity(paths.len());
    for path in paths {
        match repo
            .blob_id(rev, &repo.repo_path(path))
            .map_err(crate::changelog::git_error)?
        {
            Some(id) => out.push((path.clone(), id)),
            None => return Ok(None),
        }
    }
    Ok(Some(out))
}

/// The answer of an execution that removed `files` with `commit`.
fn answer(which: Which, files: &[(String, String)], commit: Option<&str>) -> CriticalOut {
    let paths: Vec<String> = files.iter().map(|(p, _)| p.clone()).collect();
    let mut out = crate::critical::executed(which.name(), &paths);
    if let Some(c) = commit {
        out.git = Some("committed".into());
        out.commit = Some(c.to_owned());
    }
    out
}

/// An execution a gateway left unfinished (under the lock, after a fetch): a commit it pushed is
/// on the branch → recorded executed; none → the challenge is unused again.
fn settle(
    core: &Core,
    team: &dyn TeamState,
    fence: &Fence,
    dir: &std::path::Path,
    s: &TeamChallenge,
) -> Result<(), GatewayError> {
    let which = match s.row.tool.as_str() {
        crate::critical::DELETE_PERMANENT => Which::DeletePermanent,
        _ => Which::EmptyTrash,
    };
    // SECURITY(T-TEAM8): a push of the execution that landed (late, perhaps) is the execution.
    let Some((commit, _)) = crate::teampush::landed_on_branch(core, dir, &s.pushed)? else {
        if s.row.consumed_at.is_some() {
            team.release_challenge(fence, &s.row.id)?;
        }
        return Ok(());
    };
    let mut entry = audit::Entry::new(
        "critical.recovered",
        audit::Actor::Cli {
            user: "recovery".into(),
        },
        audit::Outcome::Ok,
    );
    entry.vault = Some(s.row.vault.clone());
    entry.challenge_id = Some(s.row.id.clone());
    if s.row.consumed_at.is_none() {
        // Released before its push landed: consumed now, as the execution it was.
        team.consume_challenge(fence, &s.row.id, now_unix(), &Value::Null, entry.clone())?;
    }
    let plan: Plan = serde_json::from_value(s.row.plan.clone()).map_err(internal)?;
    let files: Vec<(String, String)> = plan.affected.iter().map(|p| (p.clone(), String::new())).collect();
    let out = answer(which, &files, Some(&commit));
    let result = |_: u64| serde_json::to_value(&out).unwrap_or(Value::Null);
    team.finish_challenge(fence, &s.row.id, &result, entry)?;
    Ok(())
}

/// One execution, from its commit to its record.
struct Execution<'a> {
    core: &'a Core,
    team: &'a dyn TeamState,
    v: &'a Arc<VaultHandle>,
    vault: &'a TeamVault,
    repo: &'a Repo,
    /// The vault's lease this execution runs under.
    hold: &'a dyn VaultHold,
    which: Which,
    id: &'a str,
    /// The revision the challenge was issued at.
    planned: u64,
    intent: &'a audit::AuditRecord,
    /// A push was made whose outcome is not known: the challenge stays consumed for settling.
    uncertain: std::cell::Cell<bool>,
}

impl Execution<'_> {
    fn run(
        &self,
        call: &mut Call<'_>,
        intent: TeamIntent,
        refuse: &dyn Fn(Refusal) -> GatewayError,
    ) -> Result<Value, GatewayError> {
        let dir = self.v.reader.fs().root();
        if intent.files.is_empty() {
            return self.finish(call, &intent.files, None);
        }
        let date = rfc3339(time::OffsetDateTime::now_utc());
        let entry = crate::ids::HistoryEntryId::new().to_string();
        let job = format!("c_{}", self.id);
        let paths: Vec<String> = intent.files.iter().map(|(p, _)| p.clone()).collect();
        let mut base = intent.base.clone();
        let mut last = String::new();
        for attempt in 0..ATTEMPTS {
            if attempt > 0 {
                base = head_of(self.core, self.team, self.vault, dir)?;
                // SECURITY(T-PROP2): a note changed since it was checked is not removed.
                let now = blobs_at(self.repo, &base, &paths)?;
                if now.as_ref() != Some(&intent.files) {
                    return Err(refuse(Refusal::Stale {
                        planned: self.planned,
                        now: crate::remote::commit_count(&self.core.git, dir, &base)?,
                    }));
                }
            }
            let changes: BTreeMap<String, TreeEntry> =
                paths.iter().map(|p| (self.repo.repo_path(p), None)).collect();
            let git = crate::changelog::git_error;
            let tree = self.repo.tree_with(Some(&base), &changes).map_err(git)?;
            let (message, who) = crate::changelog::team_change_commit(
                &format!("{} {}", self.which.name(), paths.join(", ")),
                &entry,
                &call.actor().audit_actor(),
                self.intent,
                // docs/contract.md#team-mode: the gateway that received the call.
                (call.received_by().unwrap_or(self.team.gateway()), &job),
                &date,
            );
            let commit = self
                .repo
                .commit_tree(&tree, Some(&base), &message, &who)
                .map_err(git)?;
            // A hold that lapsed pushes nothing (its record would be refused anyway).
            self.hold.check()?;
            self.team.challenge_attempt(self.hold.fence(), self.id, &commit)?;
            self.core.failpoints.hit("team_critical.before_push");
            let landed = crate::teampush::push_settled(
                self.core,
                dir,
                self.vault,
                (&commit, &base),
                &mut last,
                &self.uncertain,
            )?;
            if landed {
                self.core.failpoints.hit("team_critical.after_push");
                crate::remote::advance(&self.core.git, dir, &commit)?;
                if let Err(e) = self.team.register_head(&self.v.id, None, &commit) {
                    tracing::warn!(vault = %self.v.id, error = %e, "the commit was not registered as the head yet");
                }
                let out = self.finish(call, &intent.files, Some(&commit));
                self.uncertain.set(out.is_err());
                return out;
            }
            tracing::info!(vault = %self.v.id, "the remote moved during a critical call; checking it again");
        }
        Err(GatewayError::VaultBusy(format!(
            "the remote of vault '{}' kept moving during {} ({}); nothing was executed: call again \
             for a fresh challenge",
            self.v.id,
            self.which.name(),
            policy::text::escape_line(last.lines().last().unwrap_or_default())
        )))
    }

    /// The execution landed (or removed nothing): its answer kept with the call's record.
    fn finish(
        &self,
        call: &mut Call<'_>,
        files: &[(String, String)],
        commit: Option<&str>,
    ) -> Result<Value, GatewayError> {
        let out = answer(self.which, files, commit);
        let result = |_: u64| serde_json::to_value(&out).unwrap_or(Value::Null);
        let mut record = TxnRecord::ok(None, None, None);
        record.challenge_id = Some(self.id.to_owned());
        let done = call.record_in(record, |entry| {
            self.team
                .finish_challenge(self.hold.fence(), self.id, &result, entry)
        })?;
        if done.is_none() {
            return Err(internal(format!(
                "challenge {} was settled by another gateway while this one executed it",
                self.id
            )));
        }
        to_value(out)
    }
}
