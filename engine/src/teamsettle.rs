//! Jobs a team apply left behind (docs/contract.md#team-mode): a gateway that stopped
//! mid-apply, or a push whose answer never came. Settled from the job rows and the remote, never
//! from a clone's guess: by the proposal's next apply or reject, and by whichever write takes the
//! vault's lease next, or, when no write comes, by a serving gateway's idle sweep
//! ([`settle_idle_jobs`]). The decision is [`proposals::recovery::settle_unknown_push`].
//!
//! It must never record an apply whose commit is not on the remote, push a commit but by
//! compare-and-swap to the job's own base, or push another call's commit for it.

use serde_json::Value;

use crate::api::ApplyOut;
use crate::core::{Core, VaultHandle, rfc3339};
use crate::error::GatewayError;
use crate::remote::TeamVault;
use crate::storage::team::VaultHold;
use crate::storage::{TeamDone, TeamJob, TeamProposal, TeamState};
use crate::teamcommit::CommitMeta;
use crate::teamwrite::{proposal, registration};

/// How many left jobs one take of a vault's lease settles.
const LEFT_PER_TAKE: u32 = 4;

/// Jobs left on `v` by gateways that stopped mid-apply (or by pushes without an answer), settled
/// by whichever write takes the vault's lease next, from the job rows and the remote
/// (docs/contract.md#team-mode): recorded applied when a commit of theirs landed (the caller's
/// retry answers it), else dropped. Never pushes another call's commit (that call's retry does);
/// a job not settled now (the remote unreadable) is left for the next take. `except`: the
/// proposal the caller settles itself.
pub(crate) fn settle_left_jobs(
    core: &Core,
    team: &dyn TeamState,
    hold: &dyn VaultHold,
    v: &VaultHandle,
    except: Option<&str>,
) {
    let left = match team.left_jobs(&v.id, LEFT_PER_TAKE) {
        Ok(left) => left,
        Err(e) => return tracing::warn!(vault = %v.id, error = %e, "left jobs were not read"),
    };
    let mut left = left
        .into_iter()
        .filter(|id| Some(id.as_str()) != except)
        .peekable();
    if left.peek().is_none() {
        return;
    }
    let settle = |id: &str| -> Result<(), GatewayError> {
        let tp = proposal(team, v, id)?;
        match tp.job.clone() {
            Some(job) => settle_left_job(core, team, hold, v, &registration(team, v)?, &tp, &job, false),
            None => Ok(()),
        }
    };
    for id in left {
        match settle(&id) {
            Ok(()) => tracing::info!(vault = %v.id, proposal = %id, "a job another apply left was settled"),
            Err(e) => {
                tracing::warn!(vault = %v.id, proposal = %id, error = %e, "a left job was not settled yet")
            }
        }
    }
}

/// Settles, for each team vault, the jobs left there longer than `apply_wait_seconds` (their
/// callers have had an answer by then) when no write came to settle them: a serving team
/// gateway calls it every few seconds, so a vault nobody writes to is not left with jobs in
/// flight for good (docs/contract.md#team-mode). Takes the vault's lease only when such a job
/// is there; a vault whose lease is busy is left to the write holding it, which settles them.
pub fn settle_idle_jobs(core: &Core) {
    let Some(team) = core.team() else { return };
    let grace = core.config().limits.apply_wait_seconds;
    for v in core.all_vaults().into_iter().filter(|v| v.is_team()) {
        match team.oldest_left_job(&v.id) {
            Ok(Some(age)) if age >= grace => {}
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!(vault = %v.id, error = %e, "left jobs were not looked for");
                continue;
            }
        }
        // SECURITY(T-PROP4): settled under the vault's lease, fenced by its epoch.
        match team.lock_vault(&v.id, IDLE_WAIT) {
            Ok(hold) => settle_left_jobs(core, team, hold.as_ref(), &v, None),
            Err(e) => tracing::debug!(vault = %v.id, error = %e, "left jobs wait for the lease's holder"),
        }
    }
}

/// How long [`settle_idle_jobs`] waits for a vault's lease.
const IDLE_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// A job left by a gateway that stopped mid-apply (or by an apply whose push had no answer),
/// settled from the remote by [`proposals::recovery::settle_unknown_push`]: landed (a commit of
/// the proposal's jobs on the branch) → the proposal is recorded applied; the branch still at
/// the job's base, its commit held here or built again from its row to the same id, and the job
/// younger than `job_ttl_seconds` → that same commit is pushed again; anything else →
/// the job is dropped and the proposal free again (its next apply checks it anew; a commit
/// pushed earlier that lands meanwhile is found on the branch then). Runs under the lease, so the
/// job's gateway records nothing any more. `may_push`: an apply may push the commit again (a
/// reject never does: it waits out a push that may still land).
#[allow(clippy::too_many_arguments)]
pub(crate) fn settle_left_job(
    core: &Core,
    team: &dyn TeamState,
    hold: &dyn VaultHold,
    v: &VaultHandle,
    vault: &TeamVault,
    tp: &TeamProposal,
    job: &TeamJob,
    may_push: bool,
) -> Result<(), GatewayError> {
    use proposals::recovery::{RemoteShows, UnknownPush};
    let fence = hold.fence();
    let dir = v.reader.fs().root();
    // Whichever push of the job landed (a rebuilt attempt's commit differs from the first's).
    crate::teampush::sync_checked(core, team, vault, dir)?;
    let landed = crate::teampush::landed_on_branch(core, dir, &tp.pushed)?.map(|(c, _)| c);
    let last = job.base.as_deref().zip(job.commit.as_deref());
    let head = crate::remote::clone_head(&core.git, dir);
    let shows = match (&landed, last) {
        (Some(_), _) => RemoteShows::Landed,
        (None, Some((base, _))) if head.as_deref() == Some(base) => RemoteShows::AtBase,
        _ => RemoteShows::Past,
    };
    // A job older than `job_ttl_seconds` is never pushed again: its caller stopped waiting long
    // ago, and the proposal's next apply builds a fresh commit (whose push, to the same base,
    // makes this one's compare-and-swap fail forever).
    let young = job
        .age_seconds
        .is_some_and(|age| age < core.config().limits.job_ttl_seconds);
    // SECURITY(T-TEAM8): only the job's own commit is pushed again: the one its row makes.
    let again = may_push
        && young
        && shows == RemoteShows::AtBase
        && last.is_some_and(|(base, c)| {
            crate::remote::holds(&core.git, dir, c) || rebuilt(core, v, tp, job, base).as_deref() == Some(c)
        });
    let settled = proposals::recovery::settle_unknown_push(shows, again);
    let commit = match (settled, landed, last) {
        (UnknownPush::Record, Some(commit), _) => commit,
        (UnknownPush::PushAgain, _, Some((base, commit))) => {
            hold.check()?;
            let (mut why, uncertain) = (String::new(), std::cell::Cell::new(false));
            match crate::teampush::push_settled(core, dir, vault, (commit, base), &mut why, &uncertain) {
                Ok(true) => commit.to_owned(),
                Ok(false) => return team.drop_job(fence, &tp.row.id, &job.id),
                Err(e) => {
                    if !uncertain.get() {
                        team.drop_job(fence, &tp.row.id, &job.id)?;
                    }
                    return Err(e);
                }
            }
        }
        _ => return team.drop_job(fence, &tp.row.id, &job.id),
    };
    let job = TeamJob {
        commit: Some(commit),
        ..job.clone()
    };
    let job = &job;
    let at = rfc3339(time::OffsetDateTime::now_utc());
    let meta = job
        .meta
        .clone()
        .and_then(|m| serde_json::from_value::<CommitMeta>(m).ok());
    // The answer its caller would have had, kept under the caller's key.
    let answer = ApplyOut {
        applied: true,
        target: tp.row.target.clone(),
        history_entry_id: meta.map(|m| m.history_id).unwrap_or_default(),
        archived_to: String::new(),
        audit_seq: 0,
        index: "updated".into(),
        git: "committed".into(),
        replayed: false,
        commit: job.commit.clone(),
    };
    let result = |seq: u64| {
        let mut out = answer.clone();
        out.audit_seq = seq;
        serde_json::to_value(&out).unwrap_or(Value::Null)
    };
    let key: Option<JobKey> = job.key.clone().and_then(|k| serde_json::from_value(k).ok());
    let mut entry = audit::Entry::new(
        "apply.recovered",
        audit::Actor::Cli {
            user: "recovery".into(),
        },
        audit::Outcome::Ok,
    );
    entry.vault = Some(v.id.clone());
    entry.proposal_id = Some(tp.row.id.clone());
    entry.target = Some(tp.row.target.clone());
    let done = TeamDone {
        by: &job.gateway,
        at: &at,
        result: &result,
        key: key.as_ref().map(|k| inbox::IdemKey {
            credential_id: &k.credential_id,
            key: &k.key,
            tool: &k.tool,
            args_hash: &k.args_hash,
        }),
    };
    team.finish_job(fence, &tp.row.id, &job.id, &done, entry)?;
    Ok(())
}

/// The commit `job` makes on `base`, built again from its row on this gateway (whose clone need
/// not hold the commit its gateway built): `None` when the row lacks what it is made of or it
/// cannot be built here.
fn rebuilt(core: &Core, v: &VaultHandle, tp: &TeamProposal, job: &TeamJob, base: &str) -> Option<String> {
    let meta: CommitMeta = serde_json::from_value(job.meta.clone()?).ok()?;
    let p: proposals::Proposal = serde_json::from_value(tp.row.meta.clone()).ok()?;
    let recipe = crate::teamcommit::Recipe {
        core,
        v,
        p: &p,
        content: tp.content.as_deref(),
        job: &job.id,
        meta: &meta,
    };
    let built =
        crate::teamwrite::repo_of(core, v.reader.fs().root()).and_then(|repo| recipe.build(&repo, base));
    match built {
        Ok((commit, _)) => {
            if job.commit.as_deref() != Some(commit.as_str()) {
                tracing::warn!(vault = %v.id, proposal = %tp.row.id, noted = ?job.commit, built = %commit, "a left job's commit was built again differently; it is not pushed");
            }
            Some(commit)
        }
        Err(e) => {
            tracing::warn!(vault = %v.id, proposal = %tp.row.id, error = %e, "a left job's commit could not be built again");
            None
        }
    }
}

/// A job's caller's key, as [`TeamJob::key`] keeps it.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct JobKey {
    credential_id: String,
    key: String,
    tool: String,
    args_hash: String,
}
