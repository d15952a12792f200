//! Approvals carried across a 2026-07-28 input-required round (docs/contract.md#the-review-page-and-in-client-approval). The engine seals each
//! one with a nonce; recording the nonce here before the apply makes a sealed approval usable
//! once, in whichever process of the home it arrives.

use rusqlite::params;

use crate::db::{State, StateError};

impl State {
    /// Marks the approval `nonce` used. `false`: it was used before, and must not apply again.
    pub fn use_approval(&self, nonce: &str, expires_at: i64) -> Result<bool, StateError> {
        let conn = self.conn()?;
        let n = conn
            .prepare_cached("INSERT OR IGNORE INTO approvals_used (nonce, expires_at) VALUES (?1, ?2)")?
            .execute(params![nonce, expires_at])?;
        Ok(n == 1)
    }

    /// Forgets nonces whose approvals have expired (they are refused by their expiry anyway).
    pub fn prune_approvals(&self, now: i64) -> Result<usize, StateError> {
        let conn = self.conn()?;
        Ok(conn.execute("DELETE FROM approvals_used WHERE expires_at <= ?1", [now])?)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_approval_nonce_is_used_once_and_pruned_after_expiry() {
        let dir = tempfile::tempdir().unwrap();
        let s = State::open(&dir.path().join("s.sqlite")).unwrap();
        assert!(s.use_approval("n1", 100).unwrap());
        assert!(!s.use_approval("n1", 100).unwrap(), "a second use is refused");
        assert!(s.use_approval("n2", 200).unwrap());
        assert_eq!(s.prune_approvals(150).unwrap(), 1);
        assert!(!s.use_approval("n2", 200).unwrap());
    }
}
