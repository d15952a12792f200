//! Housekeeping that keeps the state database bounded over months of use: idempotency keys and
//! expired challenges are forgotten once no retry can still need them, and review logins once
//! they can open nothing. A team gateway's clones are packed, so their objects do not pile up as
//! loose files that slow every walk of their history.
//!
//! A pruned key is safe to forget: a retry that arrives later meets the checks that protect the
//! call anyway (an applied proposal answers `PROPOSAL_ALREADY_APPLIED`, a moved history top
//! `HISTORY_NOT_TOP`, a consumed challenge `CHALLENGE_CONSUMED` or `CHALLENGE_MISMATCH`).

use std::sync::atomic::{AtomicI64, Ordering};

use crate::apply::Writes;
use crate::core::{now_unix, rfc3339};
use crate::critical::KEEP_EXPIRED_SECONDS;

/// Keys are kept a week: a client retries a lost answer within minutes, not days.
pub const KEEP_IDEMPOTENCY_SECONDS: i64 = 7 * 24 * 3600;
/// At most one pass an hour per process.
const EVERY_SECONDS: i64 = 3600;

static LAST_RUN: AtomicI64 = AtomicI64::new(i64::MIN);

impl Writes<'_> {
    /// Runs [`Writes::maintain`] unless this process did so within the last hour.
    pub(crate) fn maintain_if_due(&self) {
        let now = now_unix();
        let last = LAST_RUN.load(Ordering::Relaxed);
        if last != i64::MIN && now.saturating_sub(last) < EVERY_SECONDS {
            return;
        }
        if LAST_RUN
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            self.maintain(now);
        }
    }

    /// Forgets idempotency keys and expired challenges older than their retention. Failures are
    /// logged: housekeeping never fails a call.
    pub fn maintain(&self, now: i64) -> (u64, usize) {
        let before = time::OffsetDateTime::from_unix_timestamp(now.saturating_sub(KEEP_IDEMPOTENCY_SECONDS))
            .map(rfc3339)
            .unwrap_or_default();
        let keys = if before.is_empty() {
            0
        } else {
            self.core.state.idempotency_prune(&before).unwrap_or_else(|e| {
                tracing::warn!(error = %e, "pruning idempotency keys failed");
                0
            })
        };
        let challenges = self
            .core
            .state
            .prune_challenges(now.saturating_sub(KEEP_EXPIRED_SECONDS))
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "pruning expired challenges failed");
                0
            });
        if keys > 0 || challenges > 0 {
            tracing::info!(keys, challenges, "forgot old idempotency keys and challenges");
        }
        // Review logins that can open nothing any more (used, expired or logged out).
        if let Err(e) = self.core.state.prune_review(now) {
            tracing::warn!(error = %e, "pruning review logins failed");
        }
        // Used approval nonces whose sealed states have expired (they are refused as late anyway).
        if let Err(e) = self.core.state.prune_approvals(now) {
            tracing::warn!(error = %e, "pruning used approvals failed");
        }
        (keys, challenges)
    }
}

/// A pass over a large vault's objects takes a while; it runs off every request's path.
const PACK_DEADLINE: std::time::Duration = std::time::Duration::from_secs(600);

/// The lock files of the maintenance a pass runs (under the clone's `.git/objects`).
const MAINTENANCE_LOCKS: &[&str] = &[
    "maintenance.lock",
    "pack/multi-pack-index.lock",
    "info/commit-graph.lock",
    "info/commit-graphs/commit-graph-chain.lock",
];

/// Packs each team vault's clone that needs it (a serving gateway calls it every minute). A
/// clone is the gateway's own and every command vaultgate runs there has git's automatic
/// packing off (it must not run inside an apply), so without this every object fetched or built
/// stays a file of its own for good, and the walks of every sync (`reset`, `rev-list`) inflate
/// one file per commit: they grew from 15 to 100 ms over 4,000 commits. Git's background
/// maintenance decides by its own thresholds: loose objects (past 100) into a pack, which then
/// leave; small packs merged (past 10); the commit graph extended (past 100 new commits). It
/// never prunes an object nor touches a ref, and its locks are none of those a clone's turn
/// clears (`remote::hold`), so it runs beside fetches and applies without holding them up. A
/// lock a dead pass left is removed once older than a pass can run. Failures are logged:
/// housekeeping never fails anything.
pub fn pack_team_clones(core: &crate::Core) {
    let clones: Vec<(String, std::path::PathBuf)> = match core.team_vaults.lock() {
        Ok(t) => t.vaults.iter().map(|v| (v.id.clone(), v.path.clone())).collect(),
        Err(_) => return,
    };
    for (vault, dir) in clones {
        let started = std::time::Instant::now();
        match pack_clone(&core.git, &dir) {
            Ok(()) => tracing::debug!(
                vault,
                ms = started.elapsed().as_millis() as u64,
                "a team vault's clone was packed"
            ),
            Err(e) => {
                tracing::warn!(vault, error = %e, "a team vault's clone could not be packed; it works unpacked")
            }
        }
    }
}

/// One maintenance pass over the clone at `dir`, then the loose objects it packed removed.
fn pack_clone(program: &crate::git::Program, dir: &std::path::Path) -> Result<(), crate::git::GitError> {
    // A pass holds these only under `maintenance.lock` and never past its deadline: an older one
    // is a dead machine's, and would stop its task for good.
    for lock in MAINTENANCE_LOCKS {
        let lock = dir.join(".git/objects").join(lock);
        if std::fs::symlink_metadata(&lock)
            .and_then(|m| m.modified())
            .is_ok_and(|at| at.elapsed().is_ok_and(|age| age > PACK_DEADLINE))
        {
            tracing::warn!(lock = %lock.display(), "removed a maintenance lock a stopped gateway left in its clone");
            let _ = std::fs::remove_file(&lock);
        }
    }
    let mut run = crate::remote::local(program, dir);
    run.args([
        "maintenance",
        "run",
        "--auto",
        "--quiet",
        "--task=loose-objects",
        "--task=incremental-repack",
        "--task=commit-graph",
    ]);
    crate::git::run_within(run, "maintenance", None, PACK_DEADLINE)?;
    let mut prune = crate::remote::local(program, dir);
    prune.args(["prune-packed", "--quiet"]);
    crate::git::run_within(prune, "prune-packed", None, PACK_DEADLINE)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;
    use crate::Core;
    use crate::home::Home;

    #[test]
    fn old_keys_and_expired_challenges_are_forgotten_recent_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home {
            dir: dir.path().join("home"),
        };
        home.init().unwrap();
        let core = Core::open(home).unwrap();
        let now = 2_000_000_000;
        let at = |t: i64| rfc3339(time::OffsetDateTime::from_unix_timestamp(t).unwrap());
        let put = |key: &str, t: i64| {
            core.state
                .idempotency_put("c", key, "apply_proposal", "h", &json!({}), &at(t))
                .unwrap();
        };
        put("old", now - KEEP_IDEMPOTENCY_SECONDS - 60);
        put("recent", now - 60);
        let (keys, _) = core.writes().maintain(now);
        assert_eq!(keys, 1);
        assert!(core.state.idempotency_get("c", "old").unwrap().is_none());
        assert!(core.state.idempotency_get("c", "recent").unwrap().is_some());
        assert_eq!(core.writes().maintain(now).0, 0, "a second pass finds nothing");
    }
}
