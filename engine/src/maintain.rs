//! Housekeeping that keeps the state database bounded over months of use: idempotency keys and
//! expired challenges are forgotten once no retry can still need them, and review logins once
//! they can open nothing.
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
