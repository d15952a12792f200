//! Writes to a team vault (docs/contract.md#team-mode): proposals live in the team's database
//! (content included), and an apply is one commit pushed to the vault's remote by
//! compare-and-swap. The gateway that receives `apply_proposal` applies while it holds the
//! vault's lock in the team's database: it gives the proposal a job (with its `apply.intent`
//! record), fetches, decides with the same [`proposals::plan::decide`] as a local apply against
//! the remote's head, builds one commit with the trailers of docs/contract.md#git-history plus
//! `Vaultgate-Gateway` and `Vaultgate-Job`, pushes it with `--force-with-lease` to the verified
//! base (first the clone's head, which the compare-and-swap proves current or refuses), records the apply with its answer and record in one commit, and answers once its own
//! clone holds the commit. A remote that moved is fetched again and the proposal checked again:
//! a change to the note itself is `PROPOSAL_STALE_BASE`, a change elsewhere gets the commit
//! rebuilt on top (fast-forward only).
//!
//! It must never push but by compare-and-swap, answer an apply whose push it has not seen land
//! (an unknown outcome is settled by reading the remote), or decide a check itself.

use std::sync::Arc;
use std::time::Duration;

use proposals::Proposal;
use serde_json::Value;

use crate::api::ApplyOut;
use crate::call::{Call, TxnRecord};
use crate::core::{Core, VaultHandle, rfc3339};
use crate::error::{GatewayError, Refused};
use crate::git::Repo;
use crate::ids::{ProposalHash, ProposalId};
use crate::remote::{Synced, TeamVault};
use crate::storage::team::VaultHold;
use crate::storage::{NewTeamProposal, TeamDone, TeamJob, TeamProposal, TeamState};
use crate::teamcommit::{CommitMeta, Recipe};
use crate::teamgroup::{Entered, Leading, Outcome, Rider};
use crate::txn::internal;

/// How many times an apply builds its commit again on a remote that moved meanwhile.
const ATTEMPTS: usize = 3;

/// The team's state when `v` is a team vault (its notes in a remote).
pub(crate) fn team_of<'c>(core: &'c Core, v: &VaultHandle) -> Option<&'c dyn TeamState> {
    v.remote.as_ref().and(core.team())
}

/// Stores a sealed proposal in the team's database with the call's record (one commit).
pub(crate) fn store(
    team: &dyn TeamState,
    call: &mut Call<'_>,
    p: &Proposal,
    meta: &Value,
    content: Option<&str>,
    diff: Option<&str>,
) -> Result<(), GatewayError> {
    let bytes = [content, diff]
        .iter()
        .flatten()
        .map(|s| s.len() as u64)
        .sum::<u64>()
        .saturating_add(meta.to_string().len() as u64);
    let new = NewTeamProposal {
        row: inbox::NewProposal {
            vault: &p.vault,
            id: &p.id,
            slug: &p.slug,
            kind: p.kind.as_str(),
            target: &p.target,
            created_by: &p.created_by.credential_id,
            created_at: &p.created_at,
            meta,
        },
        content,
        diff,
        bytes,
    };
    let record = TxnRecord::ok(None, None, Some(&p.id));
    call.record_in(record, |entry| team.insert_proposal(&new, entry).map(Some))?;
    Ok(())
}

/// The proposal `id` of `v` (docs/contract.md#applying-a-proposal check 1 reads its status).
pub(crate) fn proposal(
    team: &dyn TeamState,
    v: &VaultHandle,
    id: &str,
) -> Result<TeamProposal, GatewayError> {
    team.proposal(&v.id, id)?
        .ok_or_else(|| crate::proposing::proposal_not_found(id))
}

/// Check 1: the proposal exists and is pending.
pub(crate) fn pending(team: &dyn TeamState, v: &VaultHandle, id: &str) -> Result<TeamProposal, GatewayError> {
    let p = proposal(team, v, id)?;
    match p.row.status {
        inbox::ProposalStatus::Applied => Err(crate::proposing::already_applied(id)),
        inbox::ProposalStatus::Rejected => Err(crate::proposing::rejected(id)),
        inbox::ProposalStatus::Pending => Ok(p),
    }
}

/// `reject_proposal` on a team vault: one winner among the gateways (a proposal being applied
/// cannot be rejected meanwhile), with the call's record. `card`: `reject_proposal_in_app`'s
/// sealed approval and key (the approval used once across the team, the answer kept under the
/// key in the rejection's commit).
pub(crate) fn reject(
    core: &Core,
    team: &dyn TeamState,
    call: &mut Call<'_>,
    v: &VaultHandle,
    id: &str,
    reason: &str,
    card: Option<(&str, &str)>,
) -> Result<crate::api::RejectOut, GatewayError> {
    let first = |call: &Call<'_>, key: &str| -> Result<Option<crate::api::RejectOut>, GatewayError> {
        match team.idempotency(&call.actor().principal_id(), key)? {
            None => Ok(None),
            Some(rec) if rec.same_call(call.tool(), &call.args_hash()) => {
                serde_json::from_value(rec.result).map(Some).map_err(internal)
            }
            Some(_) => Err(Refused::IdempotencyConflict { what: "reject" }.into()),
        }
    };
    if let Some((_, key)) = card
        && let Some(out) = first(call, key)?
    {
        return Ok(out);
    }
    // SECURITY(T-APPROVE2): the click used once across the team, before the proposal is looked
    // at (a replayed approval is refused as one whatever became of it), then the tier one step up.
    let approved = match card {
        Some((sealed, _)) => {
            Some(
                core.approvals()
                    .app_reject(call, v, &ProposalId::from_wire(id), sealed)?,
            )
        }
        None => None,
    };
    let mut p = pending(team, v, id)?;
    let approval = match approved {
        Some(a) => {
            core.approvals()
                .authorize_approved(call.actor(), &p.row.created_by)?;
            Some(a.via.as_str().to_owned())
        }
        None => {
            core.approvals()
                .authorize_decision(call.actor(), &p.row.created_by)?;
            None
        }
    };
    // A job in flight finishes first; one its gateway left, or a commit an earlier job pushed,
    // is settled from the remote first (it may have landed: then the proposal is applied, not
    // rejected).
    let _lock = match p.job.is_some() || !p.pushed.is_empty() {
        true => {
            let wait = Duration::from_secs(core.config().limits.apply_wait_seconds.max(1));
            let lock = team.lock_vault(&v.id, wait)?;
            let fence = lock.fence();
            p = pending(team, v, id)?;
            let job = match p.job.clone() {
                Some(job) => Some(job),
                // A job of its own to settle under (its intent recorded like an apply's).
                None if !p.pushed.is_empty() => {
                    let job = TeamJob {
                        id: uuid::Uuid::now_v7().to_string(),
                        gateway: team.gateway().to_owned(),
                        base: None,
                        commit: None,
                        key: None,
                        age_seconds: None,
                        meta: None,
                    };
                    let intent = call.entry_for(TxnRecord::ok(
                        Some("apply.intent"),
                        Some(&p.row.target),
                        Some(&p.row.id),
                    ));
                    team.begin_job(fence, id, &job, intent)?.map(|_| job)
                }
                None => None,
            };
            if let Some(job) = job {
                crate::teamsettle::settle_left_job(
                    core,
                    team,
                    lock.as_ref(),
                    v,
                    &registration(team, v)?,
                    &p,
                    &job,
                    false,
                )?;
                p = pending(team, v, id)?;
            }
            // SECURITY(T-TEAM9): a push begun by a gateway whose lease ran out may still land;
            // a rejection now could be followed by its content on the remote.
            if p.may_still_land {
                return Err(GatewayError::VaultBusy(format!(
                    "an apply of proposal {id} began pushing less than 30 s ago and may still land \
                     on the remote; nothing was rejected: reject it again in half a minute"
                )));
            }
            Some(lock)
        }
        false => None,
    };
    let at = rfc3339(time::OffsetDateTime::now_utc());
    let by = call.actor().label();
    let mut record = TxnRecord::ok(None, Some(&p.row.target), Some(&p.row.id));
    record.approval = approval;
    let out = crate::api::RejectOut {
        rejected: true,
        archived_to: String::new(),
    };
    let answer = serde_json::to_value(&out).map_err(internal)?;
    let (principal, args_hash) = (call.actor().principal_id(), call.args_hash());
    let key = card.map(|(_, key)| inbox::IdemKey {
        credential_id: &principal,
        key,
        tool: call.tool(),
        args_hash: &args_hash,
    });
    let kept = key.as_ref().map(|k| (k, &answer));
    let done = call.record_in(record, |entry| {
        team.reject_proposal(id, &by, &at, reason, kept, entry)
    })?;
    if done.is_none() {
        return Err(match p.job {
            Some(_) => GatewayError::VaultBusy(format!(
                "proposal {id} is being applied by a gateway of the team; list it again in a moment"
            )),
            None => Refused::DecidedMeanwhile.into(),
        });
    }
    Ok(out)
}

/// The answer kept under the caller's key, replayed; a key used for another call is refused.
pub(crate) fn first_answer(
    team: &dyn TeamState,
    call: &Call<'_>,
    key: &str,
) -> Result<Option<ApplyOut>, GatewayError> {
    match team.idempotency(&call.actor().principal_id(), key)? {
        None => Ok(None),
        Some(rec) if rec.same_call(call.tool(), &call.args_hash()) => {
            let mut out: ApplyOut = serde_json::from_value(rec.result).map_err(internal)?;
            out.replayed = true;
            Ok(Some(out))
        }
        Some(_) => Err(Refused::IdempotencyConflict { what: "apply" }.into()),
    }
}

/// The vault's registration (its remote and branch), as the team's database holds it now.
pub(crate) fn registration(team: &dyn TeamState, v: &VaultHandle) -> Result<TeamVault, GatewayError> {
    team.vaults()?
        .into_iter()
        .find(|t| t.id == v.id)
        .ok_or_else(|| GatewayError::VaultNotFound(v.id.clone()))
}

/// `apply_proposal` on a team vault.
#[allow(clippy::too_many_arguments)]
pub(crate) fn apply(
    core: &Core,
    team: &dyn TeamState,
    call: &mut Call<'_>,
    v: &Arc<VaultHandle>,
    id: &ProposalId,
    given_hash: &ProposalHash,
    key: &str,
    approval: &crate::approval::ClientApproval<'_>,
) -> Result<ApplyOut, GatewayError> {
    if key.trim().is_empty() {
        return Err(GatewayError::InvalidArgument(
            "idempotencyKey must not be empty".into(),
        ));
    }
    if let Some(first) = first_answer(team, call, key)? {
        return Ok(first);
    }
    // SECURITY(T-APPROVE1): a person is asked (or the card's click used, once across the team)
    // before the lock, so nothing waits on a person; the yes counts only for this proposal and
    // hash.
    let approved = core
        .approvals()
        .client_approval(call, v, id, given_hash, approval)?;
    // Checks 1–3 before waiting for the lock (and again under it).
    let tp = pending(team, v, id.as_str())?;
    let via = match &approved {
        Some(a) if a.covers(&tp.row.id, given_hash.as_str()) => {
            core.approvals()
                .authorize_approved(call.actor(), &tp.row.created_by)?;
            Some(a.via.as_str().to_owned())
        }
        _ => {
            core.approvals()
                .authorize_decision(call.actor(), &tp.row.created_by)?;
            None
        }
    };
    let p: Proposal = serde_json::from_value(tp.row.meta.clone()).map_err(internal)?;
    proposals::plan::check_given_hash(&p.proposal_hash, given_hash.as_str())
        .map_err(|_| crate::apply::hash_mismatch())?;
    let vault = registration(team, v)?;
    let wait = Duration::from_secs(core.config().limits.apply_wait_seconds.max(1));
    let deadline = std::time::Instant::now() + wait;
    // This gateway's applies of new notes and patches wait at its gate: the first leads, the
    // others ride its push (crate::teamgroup); anything else waits for the lease alone.
    let mut lead = None;
    let claims = crate::group::Claims::of_apply(&p, &call.actor().principal_id(), key);
    if !claims.is_exclusive() && tp.job.is_none() && tp.pushed.is_empty() {
        match core.team_groups.enter(&v.id, claims.clone(), wait)? {
            Entered::Lead(l) => lead = Some((l, claims)),
            Entered::Ride(group) => {
                let (via, tp) = (via.clone(), &tp);
                let rider = Rider {
                    core,
                    team,
                    v,
                    vault: &vault,
                    p: &p,
                    key,
                    via,
                };
                if let Some(out) = rider.ride(call, tp, &group) {
                    return out;
                }
            }
        }
    }
    // SECURITY(T-PROP4): one writer per team vault across the team's gateways.
    let asked = std::time::Instant::now();
    let left = deadline.saturating_duration_since(asked);
    let hold: Arc<dyn VaultHold> = Arc::from(team.lock_vault(&v.id, left.max(Duration::from_millis(100)))?);
    let fence = hold.fence();
    let held = std::time::Instant::now();
    crate::teamsettle::settle_left_jobs(core, team, hold.as_ref(), v, Some(id.as_str()));
    let settled = std::time::Instant::now();
    // Whoever held the lock before may have applied it (or answered this very key).
    if let Some(first) = first_answer(team, call, key)? {
        return Ok(first);
    }
    let (registered, rewritten) = team.vault_head(&v.id)?;
    if rewritten.is_some() {
        return Err(crate::teampush::rewritten(&v.id));
    }
    let mut tp = pending(team, v, id.as_str())?;
    if let Some(job) = tp.job.clone() {
        // A job whose gateway stopped before it finished: settled from the remote (its caller's
        // key then answers, this retry of it too).
        crate::teamsettle::settle_left_job(core, team, hold.as_ref(), v, &vault, &tp, &job, true)?;
        if let Some(first) = first_answer(team, call, key)? {
            return Ok(first);
        }
        tp = pending(team, v, id.as_str())?;
    }
    let job = new_job(team, call, key);
    let intent = begin(team, call, fence, &p, &job, via.clone())?;
    core.failpoints.hit("team_apply.after_intent");
    let run = Job {
        core,
        team,
        v,
        vault: &vault,
        hold: hold.as_ref(),
        lead: std::cell::RefCell::new(lead.map(|(l, claims)| (l, claims, hold.clone()))),
        grouped: std::cell::Cell::new(None),
        registered: registered.as_deref(),
        p: &p,
        content: tp.content.as_deref(),
        pushed: std::cell::RefCell::new(tp.pushed.clone()),
        meta: CommitMeta::fixed(call, &job, &intent),
        job: &job,
        key,
        approval: via,
        uncertain: std::cell::Cell::new(false),
    };
    let out = run.run(call);
    let ran = settled.elapsed();
    if asked.elapsed() > Duration::from_secs(1) {
        // What a slow apply waited for (the lease, left jobs, the remote), for the operator.
        tracing::info!(
            vault = %v.id,
            lease_ms = (held - asked).as_millis() as u64,
            left_jobs_ms = (settled - held).as_millis() as u64,
            apply_ms = ran.as_millis() as u64,
            "a team apply took over a second"
        );
    }
    // A push whose outcome is unknown keeps its job: the next apply settles it from the remote.
    if let Err(e) = &out
        && !run.uncertain.get()
        && !matches!(e, GatewayError::AuditUnavailable)
        && let Err(dropped) = team.drop_job(fence, &p.id, &job.id)
    {
        tracing::warn!(error = %dropped, "a failed team apply kept its job");
    }
    // The lease is given up (or handed on) before the next apply of this gateway leads.
    let led = run.lead.take();
    drop(run);
    if let Some((lead, _, shared)) = led {
        drop((shared, hold));
        drop(lead);
    }
    out
}

/// A new job for `call`, its answer to be kept under `key`.
pub(crate) fn new_job(team: &dyn TeamState, call: &Call<'_>, key: &str) -> TeamJob {
    TeamJob {
        id: uuid::Uuid::now_v7().to_string(),
        gateway: team.gateway().to_owned(),
        base: None,
        commit: None,
        key: Some(serde_json::json!({
            "credentialId": call.actor().principal_id(),
            "key": key,
            "tool": call.tool(),
            "argsHash": call.args_hash(),
        })),
        age_seconds: None,
        meta: None,
    }
}

/// Gives the proposal `p` the job `job`, with its `apply.intent` record.
pub(crate) fn begin(
    team: &dyn TeamState,
    call: &Call<'_>,
    fence: &crate::storage::team::Fence,
    p: &Proposal,
    job: &TeamJob,
    via: Option<String>,
) -> Result<audit::AuditRecord, GatewayError> {
    let mut intent = TxnRecord::ok(Some("apply.intent"), Some(&p.target), Some(&p.id));
    intent.approval = via;
    let intent = call.entry_for(intent);
    team.begin_job(fence, &p.id, job, intent)?
        .ok_or_else(|| GatewayError::from(Refused::DecidedMeanwhile))
}

/// The repository of the clone at `dir`, found once per process (a clone deleted and made again
/// is at the same place).
pub(crate) fn repo_of(core: &Core, dir: &std::path::Path) -> Result<Repo, GatewayError> {
    type Found = std::sync::Mutex<std::collections::HashMap<std::path::PathBuf, Repo>>;
    static FOUND: std::sync::OnceLock<Found> = std::sync::OnceLock::new();
    let found = FOUND.get_or_init(Default::default);
    if let Some(repo) = found.lock().ok().and_then(|f| f.get(dir).cloned()) {
        return Ok(repo);
    }
    let repo = Repo::discover(&core.git, dir)
        .map_err(crate::changelog::git_error)?
        .filter(|r| r.top() == dir)
        .ok_or_else(|| GatewayError::Internal(format!("no clone at {}", dir.display())))?;
    if let Ok(mut f) = found.lock() {
        f.insert(dir.to_path_buf(), repo.clone());
    }
    Ok(repo)
}

/// One apply's job, from the fetch to the record.
pub(crate) struct Job<'a> {
    pub(crate) core: &'a Core,
    pub(crate) team: &'a dyn TeamState,
    pub(crate) v: &'a Arc<VaultHandle>,
    pub(crate) vault: &'a TeamVault,
    /// The vault's lease this job runs under.
    pub(crate) hold: &'a dyn VaultHold,
    /// This apply leads at its gate: its lead, what it touches, and the hold a group shares.
    pub(crate) lead: std::cell::RefCell<Option<Leading>>,
    /// Pushed in a group, which landed: whether this gateway's clone holds its commit.
    pub(crate) grouped: std::cell::Cell<Option<bool>>,
    /// The head the team registered, read under the lease: the last push any gateway made.
    pub(crate) registered: Option<&'a str>,
    pub(crate) p: &'a Proposal,
    pub(crate) content: Option<&'a str>,
    pub(crate) job: &'a TeamJob,
    /// What its commit is made of besides the proposal and its base, fixed at its intent.
    pub(crate) meta: CommitMeta,
    pub(crate) key: &'a str,
    /// How a person approved it (`client`, `app`), for its records.
    pub(crate) approval: Option<String>,
    /// A push was made whose outcome is not known: the job must stay for recovery.
    pub(crate) uncertain: std::cell::Cell<bool>,
    /// Every commit the proposal's jobs were about to push, this one's included.
    pub(crate) pushed: std::cell::RefCell<Vec<String>>,
}

impl Job<'_> {
    fn run(&self, call: &mut Call<'_>) -> Result<ApplyOut, GatewayError> {
        let dir = self.v.reader.fs().root();
        let repo = repo_of(self.core, dir)?;
        let history_id = &self.meta.history_id;
        let mut last = String::new();
        for attempt in 0..ATTEMPTS {
            // First on what the clone holds (the push's compare-and-swap proves it is the
            // remote's head, or refuses), then on what a fetch brings.
            // A clone behind the head another gateway pushed is fetched first: building on it
            // would only be refused.
            let held = match attempt {
                0 => crate::remote::clone_head(&self.core.git, dir)
                    .filter(|h| self.registered.is_none_or(|r| r == h)),
                _ => None,
            };
            let fetched = held.is_none();
            let synced = match held {
                Some(h) => Synced::At(h),
                None => crate::teampush::sync_checked(self.core, self.team, self.vault, dir)?,
            };
            if fetched && self.team.vault_head(&self.v.id)?.1.is_some() {
                return Err(crate::teampush::rewritten(&self.v.id));
            }
            let base = match synced {
                Synced::Cloned(h) | Synced::At(h) => h,
                Synced::Diverged { .. } => return Err(crate::teampush::rewritten(&self.v.id)),
            };
            // SECURITY(T-TEAM8): an earlier push of this proposal that landed late is its apply.
            let landed_before = match fetched {
                true => {
                    // With the commits any job of the proposal recorded since it was read (a job
                    // of a gateway whose lock ended under it may have pushed one).
                    let recorded = proposal(self.team, self.v, &self.p.id)?.pushed;
                    let mut all = self.pushed.borrow_mut();
                    for c in recorded {
                        if !all.contains(&c) {
                            all.push(c);
                        }
                    }
                    crate::teampush::landed_on_branch(self.core, dir, &all)?
                }
                false => None,
            };
            if let Some((commit, entry)) = landed_before {
                let touched: Vec<String> = std::iter::once(self.p.target.clone())
                    .chain(self.p.from.clone())
                    .collect();
                let out = self.finish(call, &commit, &touched, &entry)?;
                self.uncertain.set(false);
                return Ok(out);
            }
            let (commit, touched) = match self.recipe().build(&repo, &base) {
                Ok(built) => built,
                // A refusal decided on an unfetched clone may be the clone's staleness: decided
                // again on what the remote holds.
                Err(e) if !fetched && e.code() != policy::ErrorCode::INTERNAL => {
                    tracing::debug!(vault = %self.v.id, error = %e, "refused on the clone's head; fetching");
                    continue;
                }
                Err(e) => return Err(e),
            };
            // A hold that lapsed pushes nothing (its record would be refused anyway).
            self.hold.check()?;
            self.team.job_attempt(
                self.hold.fence(),
                &self.p.id,
                &self.job.id,
                &base,
                &commit,
                &self.meta.to_value(),
            )?;
            self.pushed.borrow_mut().push(commit.clone());
            // Applies waiting behind this one build on its commit; the last is pushed for all.
            let group = self.open_group(&commit, &touched);
            let tip = group.as_ref().map_or(&commit, |(_, tip, _)| tip);
            self.core.failpoints.hit("team_apply.before_push");
            // The members took time: a hold that lapsed meanwhile pushes nothing.
            let held = group.as_ref().map_or(Ok(()), |_| self.hold.check());
            let landed = held.and_then(|()| {
                let (vault, uncertain) = (self.vault, &self.uncertain);
                crate::teampush::push_settled(self.core, dir, vault, (tip, &base), &mut last, uncertain)
            });
            if let Some((group, tip, all)) = &group {
                group.settle(match &landed {
                    Ok(true) => {
                        let indexed = self.advance(tip, all);
                        self.grouped.set(Some(indexed));
                        Outcome::Landed { indexed }
                    }
                    Ok(false) => Outcome::NotLanded,
                    Err(e) => Outcome::Failed {
                        why: e.to_string(),
                        uncertain: self.uncertain.get(),
                    },
                });
            }
            if landed? {
                self.core.failpoints.hit("team_apply.after_push");
                let out = self.finish(call, &commit, &touched, history_id)?;
                self.uncertain.set(false);
                return Ok(out);
            }
            tracing::info!(vault = %self.v.id, "the remote moved during an apply; checking it again");
        }
        Err(GatewayError::VaultBusy(format!(
            "the remote of vault '{}' kept moving during the apply ({}); nothing was applied: retry \
             with the same idempotencyKey",
            self.v.id,
            policy::text::escape_line(last.lines().last().unwrap_or_default())
        )))
    }

    pub(crate) fn recipe(&self) -> Recipe<'_> {
        Recipe {
            core: self.core,
            v: self.v,
            p: self.p,
            content: self.content,
            job: &self.job.id,
            meta: &self.meta,
        }
    }

    /// The push landed: the proposal applied, with its answer under the key and the call's
    /// record, in one commit; then this gateway's clone and index are brought to the commit.
    pub(crate) fn finish(
        &self,
        call: &mut Call<'_>,
        commit: &str,
        touched: &[String],
        history_id: &str,
    ) -> Result<ApplyOut, GatewayError> {
        let at = rfc3339(time::OffsetDateTime::now_utc());
        let by = call.actor().label();
        let (principal, args_hash) = (call.actor().principal_id(), call.args_hash());
        let mut out = ApplyOut {
            applied: true,
            target: self.p.target.clone(),
            history_entry_id: history_id.to_owned(),
            archived_to: String::new(),
            audit_seq: 0,
            index: "updated".into(),
            git: "committed".into(),
            replayed: false,
            commit: Some(commit.to_owned()),
        };
        let mut record = TxnRecord::ok(None, Some(&self.p.target), Some(&self.p.id));
        record.approval = self.approval.clone();
        // The answer names its own record, sealed in the same commit.
        let answer = |seq: u64| {
            let mut out = out.clone();
            out.audit_seq = seq;
            serde_json::to_value(&out).unwrap_or(Value::Null)
        };
        let done = TeamDone {
            by: &by,
            at: &at,
            result: &answer,
            key: Some(inbox::IdemKey {
                credential_id: &principal,
                key: self.key,
                tool: call.tool(),
                args_hash: &args_hash,
            }),
        };
        let recorded = call.record_in(record, |entry| {
            self.team
                .finish_job(self.hold.fence(), &self.p.id, &self.job.id, &done, entry)
        })?;
        let Some(rec) = recorded else {
            return Err(internal(format!(
                "proposal {} lost its job while its commit {commit} landed",
                self.p.id
            )));
        };
        out.audit_seq = rec.seq;
        self.core.failpoints.hit("team_apply.after_record");
        // A group's pusher brought the clone to the pushed commit before any member recorded.
        let indexed = match self.grouped.get() {
            Some(indexed) => indexed,
            None => self.advance(commit, touched),
        };
        if !indexed {
            out.index = "failed".into();
        }
        Ok(out)
    }

    /// Registers `commit` as the vault's head and brings this gateway's clone and index to it
    /// (read-your-writes: made here, so no fetch is needed): whether the clone took it.
    fn advance(&self, commit: &str, touched: &[String]) -> bool {
        if let Err(e) = self.team.register_head(&self.v.id, None, commit) {
            // The next fetch registers it (it descends from the registered head).
            tracing::warn!(vault = %self.v.id, error = %e, "the applied commit was not registered as the head yet");
        }
        let dir = self.v.reader.fs().root();
        match crate::remote::advance(&self.core.git, dir, commit) {
            Ok(_) => {
                let paths: Vec<policy::VaultPath> = touched
                    .iter()
                    .filter_map(|p| policy::VaultPath::parse(p).ok())
                    .collect();
                self.v.reader.update_paths(&paths);
                true
            }
            Err(e) => {
                tracing::warn!(vault = %self.v.id, error = %e, "the clone did not take the applied commit yet");
                false
            }
        }
    }
}
