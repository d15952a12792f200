//! The remote's side of every write to a team vault (docs/contract.md#team-mode): a fetch that
//! checks the branch only moved forward (registering its head, or marking the vault's history
//! rewritten), a push by compare-and-swap whose unanswered outcome is settled by reading the
//! remote, and the commits of a job found on the branch. Applies (`teamwrite`), undo and redo
//! (`teamundo`) and critical calls (`teamcritical`) share it.
//!
//! It must never push but by compare-and-swap, take a push without an answer for landed (or
//! not) without reading the remote, or register a head the branch does not descend from.

use std::time::Duration;

use crate::core::Core;
use crate::error::GatewayError;
use crate::remote::{Pushed, Synced, TeamVault};
use crate::storage::TeamState;

/// Marks `vault`'s history rewritten (its branch seen at `seen`), logged the first time: true
/// when it is marked (by this call or another), false when a `vault resync` moved the head the
/// caller read as `registered` (nothing marked: the check runs again on what it registered).
fn mark(
    team: &dyn TeamState,
    vault: &str,
    registered: Option<&str>,
    seen: &str,
) -> Result<bool, GatewayError> {
    if team.mark_rewritten(vault, registered, seen)? {
        tracing::error!(
            vault,
            "the remote's history was rewritten; applies to it stop until `vaultgate vault resync`"
        );
        return Ok(true);
    }
    Ok(team.vault_head(vault)?.1.is_some())
}

/// Fetches the clone of `vault` at `dir` forward (cloning it when absent) and checks that the
/// branch only moved forward (docs/contract.md#team-mode): from the head the team registered
/// before the fetch began — every registered head was on the remote by then, so a branch that
/// does not descend from it was rewritten — and from the clone's own. Forward: the head is
/// registered (compare-and-swap on the one read, so a slower fetch never moves it back).
/// Rewritten: marked, audited once, and applies to the vault are refused until `vault resync`;
/// a clone left behind by a history the team accepted (`vault resync`: the registered head is
/// in the remote's) is moved onto it in place (its watcher sees the files change). A `vault
/// resync` committed while the check ran is never undone by it: the mark is refused and the
/// check runs once more on the head the resync registered.
pub(crate) fn sync_checked(
    core: &Core,
    team: &dyn TeamState,
    vault: &TeamVault,
    dir: &std::path::Path,
) -> Result<Synced, GatewayError> {
    match checked_once(core, team, vault, dir)? {
        Some(synced) => Ok(synced),
        // Raced twice: the vault is not marked, so nothing tells an operator to resync it.
        None => checked_once(core, team, vault, dir)?.ok_or_else(|| {
            GatewayError::VaultBusy(format!(
                "vault '{}' was resynced while its history was checked; retry with the same idempotencyKey",
                vault.id
            ))
        }),
    }
}

/// One [`sync_checked`]: `None` when a `vault resync` raced it.
fn checked_once(
    core: &Core,
    team: &dyn TeamState,
    vault: &TeamVault,
    dir: &std::path::Path,
) -> Result<Option<Synced>, GatewayError> {
    let (registered, marked) = team.vault_head(&vault.id)?;
    let mut synced = crate::remote::sync(&core.git, dir, vault)?;
    if let Synced::Diverged { remote, .. } = &synced
        && marked.is_none()
        && let Some(r) = &registered
        && crate::remote::descends(&core.git, dir, r, remote)
    {
        tracing::info!(vault = %vault.id, "the team resynced this vault: the clone follows its new history");
        synced = crate::remote::reset_to(&core.git, dir, remote)?;
    }
    let head = match &synced {
        Synced::Cloned(h) | Synced::At(h) => h,
        Synced::Diverged { remote, .. } => {
            return Ok(mark(team, &vault.id, registered.as_deref(), remote)?.then_some(synced));
        }
    };
    match (registered.as_deref(), marked) {
        (_, Some(_)) => {}
        (Some(r), None) if r == head.as_str() => {}
        (Some(r), None) if !crate::remote::descends(&core.git, dir, r, head) => {
            if !mark(team, &vault.id, Some(r), head)? {
                return Ok(None);
            }
        }
        (r, None) => team.register_head(&vault.id, r, head)?,
    }
    Ok(Some(synced))
}

/// `VAULT_HISTORY_REWRITTEN` for `vault`.
pub(crate) fn rewritten(vault: &str) -> GatewayError {
    GatewayError::HistoryRewritten(format!(
        "the remote of team vault '{vault}' no longer descends from the head the team registered: \
         its history was rewritten, so nothing is applied to it; once a person decided the new \
         history is right, an operator runs `vaultgate vault resync {vault} --yes`"
    ))
}

/// The commit on the clone's branch (as last fetched) that is one of `pushed` — the commits the
/// proposal's jobs were about to push, which no one else can make — with its history entry.
/// Asked of each commit (an ancestor of the head; one the clone lacks is not), so one that
/// landed however long ago is found, not only among the newest.
pub(crate) fn landed_on_branch(
    core: &Core,
    dir: &std::path::Path,
    pushed: &[String],
) -> Result<Option<(String, String)>, GatewayError> {
    for commit in pushed {
        if !crate::remote::on_branch(&core.git, dir, commit) {
            continue;
        }
        let entry = crate::remote::vaultgate_commits(&core.git, dir, commit, &[], 1)?
            .into_iter()
            .find(|c| &c.commit == commit)
            .and_then(|c| {
                c.trailers
                    .into_iter()
                    .find(|(k, _)| k == "Vaultgate-History-Entry")
                    .map(|(_, v)| v)
            })
            .unwrap_or_default();
        return Ok(Some((commit.clone(), entry)));
    }
    Ok(None)
}

/// The commit on the clone's branch (as last fetched) with the line `Vaultgate-Job: <job>`, the
/// newest, searched over the whole branch (however many commits came after it). The line is
/// matched whole, so a longer id or the id inside other text is not it.
pub(crate) fn job_on_branch(
    core: &Core,
    dir: &std::path::Path,
    job: &str,
) -> Result<Option<String>, GatewayError> {
    // Matched as a pattern: only characters a pattern takes literally.
    if job.is_empty()
        || !job
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(crate::txn::internal(format!(
            "the job id '{job}' cannot be searched for"
        )));
    }
    let mut cmd = crate::remote::local(&core.git, dir);
    cmd.args([
        "rev-list",
        "--max-count=1",
        &format!("--grep=^Vaultgate-Job: {job}$"),
        "HEAD",
    ]);
    let out = crate::git::run(cmd, "rev-list", None).map_err(crate::changelog::git_error)?;
    let found = String::from_utf8_lossy(&out).trim().to_owned();
    Ok((!found.is_empty()).then_some(found))
}

/// Pushes `commit` on `base` and says whether it landed: refused is `false` (`last` says why),
/// declined by a rule of the remote is `VAULT_BUSY` naming what it said;
/// an unanswered push is settled by reading the remote — there, `true`; the branch moved past
/// its base without it, `false` (it can never land); the branch still at its base (it may still
/// land) or the remote unreadable, `VAULT_BUSY` (the caller keeps what recovery needs and pushes
/// nothing else now; the retry with the same key settles it).
///
/// `uncertain` is set while the push may have landed (so its caller keeps the job for settling
/// when it fails after), and cleared when it surely did not (refused, declined).
pub(crate) fn push_settled(
    core: &Core,
    dir: &std::path::Path,
    vault: &TeamVault,
    (commit, base): (&str, &str),
    last: &mut String,
    uncertain: &std::cell::Cell<bool>,
) -> Result<bool, GatewayError> {
    uncertain.set(true);
    let mut pushed = crate::remote::push(&core.git, dir, vault, commit, base, push_deadline(core))?;
    if core.failpoints.fails("team_apply.push_unanswered") {
        // As a connection cut after the remote took the push.
        pushed = Pushed::Unknown("failpoint: the push's answer was lost".into());
    }
    match pushed {
        Pushed::Landed => Ok(true),
        Pushed::Refused(why) => {
            uncertain.set(false);
            *last = why;
            Ok(false)
        }
        // Pushing again would meet the same rule: the caller stops, nothing landed.
        Pushed::Declined(said) => {
            uncertain.set(false);
            Err(GatewayError::VaultBusy(format!(
                "the remote of vault '{}' declined the push ({said}); nothing was applied: once \
                 it accepts pushes to its branch again, retry with the same idempotencyKey",
                vault.id
            )))
        }
        // SECURITY(T-TEAM8): no answer is settled by reading the remote, never guessed. No time
        // is left for a second push here: a remote still at the base keeps the job (the retry
        // pushes the same commit again).
        Pushed::Unknown(why) => {
            *last = why;
            let shows = crate::remote::observe(&core.git, dir, vault, commit, base);
            let settled = unknown_settled(vault, shows, false);
            if matches!(settled, Ok(false)) {
                uncertain.set(false);
            }
            settled
        }
    }
}

/// What [`proposals::recovery::settle_unknown_push`] decided for a push without an answer, as
/// [`push_settled`] answers it: landed, cannot land (`false`: checked again), or `VAULT_BUSY`.
/// `PushAgain` is not decided here (`push_again` is the caller's).
pub(crate) fn unknown_settled(
    vault: &TeamVault,
    shows: proposals::recovery::RemoteShows,
    push_again: bool,
) -> Result<bool, GatewayError> {
    use proposals::recovery::{RemoteShows, UnknownPush};
    match proposals::recovery::settle_unknown_push(shows, push_again) {
        UnknownPush::Record => Ok(true),
        // It can never land: checked again against the head that moved past it.
        UnknownPush::Recheck if shows == RemoteShows::Past => Ok(false),
        decided => {
            let why = match decided {
                UnknownPush::Wait => "the remote cannot be read now",
                _ => "it is not on the remote yet and may still land",
            };
            Err(GatewayError::VaultBusy(format!(
                "the push to the remote of vault '{}' had no answer and {why}; retry with the same \
                 idempotencyKey",
                vault.id
            )))
        }
    }
}

/// How long a push may take before its outcome counts as unknown: within `apply_wait_seconds`
/// with time left to read the remote (at most 15 s).
pub(crate) fn push_deadline(core: &Core) -> Duration {
    let wait = core.config().limits.apply_wait_seconds.max(1);
    Duration::from_millis((wait * 1000 / 2).clamp(500, 15_000))
}

/// Brings this gateway's clone of the team vault `vault` to hold `commit`, which another gateway
/// of the team pushed for a call this one received and handed to it (docs/contract.md#team-lease
/// "One applier at a time": the caller reads its write here next): fetched unless the clone holds
/// it already. Whether the clone's branch holds it now.
pub fn hold_pushed(core: &Core, vault: &str, commit: &str) -> bool {
    let Some(team) = core.team() else {
        return false;
    };
    let Some(v) = core
        .all_vaults()
        .into_iter()
        .find(|v| v.id == vault && v.is_team())
    else {
        return false;
    };
    let dir = v.reader.fs().root();
    let held = || {
        crate::remote::clone_head(&core.git, dir).is_some_and(|head| {
            crate::remote::holds(&core.git, dir, commit)
                && crate::remote::descends(&core.git, dir, commit, &head)
        })
    };
    if held() {
        return true;
    }
    let before = crate::remote::clone_head(&core.git, dir);
    let synced = crate::teamwrite::registration(team, &v).and_then(|reg| sync_checked(core, team, &reg, dir));
    if let Err(e) = synced {
        tracing::warn!(vault = %vault, error = %e, "the clone was not brought to a commit another gateway pushed");
    }
    // The notes it changed are indexed now, not when the watcher gets to them.
    if let (Some(from), Some(to)) = (before, crate::remote::clone_head(&core.git, dir))
        && let Ok(changed) = crate::remote::changed_since(&core.git, dir, &from, &to)
    {
        let paths: Vec<policy::VaultPath> = changed
            .iter()
            .filter_map(|p| policy::VaultPath::parse(p).ok())
            .collect();
        v.reader.update_paths(&paths);
    }
    held()
}
