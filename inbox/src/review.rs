//! Review-page logins (docs/contract.md#the-review-page-and-in-client-approval): one-time codes minted by the CLI and redeemed by the server,
//! and the sessions they open. Only SHA-256 hashes of the secret values are stored; a session's
//! path segment is stored as is (it is a URL, not a credential: the cookie is).

use rusqlite::{OptionalExtension, params};

use crate::db::{State, StateError};

/// A live review session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewSession {
    pub id_hash: String,
    pub path: String,
    pub user: String,
    pub created_at: i64,
    pub expires_at: i64,
}

/// What redeeming a code opened.
pub struct NewReviewSession<'a> {
    pub id_hash: &'a str,
    pub path: &'a str,
    pub expires_at: i64,
}

impl State {
    /// Stores a new login code (its hash) for `user`, valid until `expires_at`.
    pub fn add_review_code(
        &self,
        code_hash: &str,
        user: &str,
        now: i64,
        expires_at: i64,
    ) -> Result<(), StateError> {
        let conn = self.conn()?;
        conn.execute(
            "INSERT INTO review_codes (code_hash, user, created_at, expires_at) VALUES (?1, ?2, ?3, ?4)",
            params![code_hash, user, now, expires_at],
        )?;
        Ok(())
    }

    /// Uses the code once and opens `session` for the code's user in the same transaction;
    /// answers that user. `None`: the code is unknown, used or expired (of two racing
    /// redemptions exactly one wins).
    pub fn redeem_review_code(
        &self,
        code_hash: &str,
        now: i64,
        session: &NewReviewSession<'_>,
    ) -> Result<Option<String>, StateError> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let user: Option<String> = tx
            .query_row(
                "UPDATE review_codes SET used_at = ?2
                 WHERE code_hash = ?1 AND used_at IS NULL AND expires_at > ?2
                 RETURNING user",
                params![code_hash, now],
                |r| r.get(0),
            )
            .optional()?;
        let Some(user) = user else {
            return Ok(None);
        };
        tx.execute(
            "INSERT INTO review_sessions (id_hash, path, user, created_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![session.id_hash, session.path, user, now, session.expires_at],
        )?;
        tx.commit()?;
        Ok(Some(user))
    }

    /// The live session whose path is `path`, if any (not ended, not expired).
    pub fn review_session(&self, path: &str, now: i64) -> Result<Option<ReviewSession>, StateError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(
            "SELECT id_hash, path, user, created_at, expires_at FROM review_sessions
             WHERE path = ?1 AND ended_at IS NULL AND expires_at > ?2",
        )?;
        Ok(stmt
            .query_row(params![path, now], |r| {
                Ok(ReviewSession {
                    id_hash: r.get(0)?,
                    path: r.get(1)?,
                    user: r.get(2)?,
                    created_at: r.get(3)?,
                    expires_at: r.get(4)?,
                })
            })
            .optional()?)
    }

    /// Ends a session (Logout); `false` when it was not live.
    pub fn end_review_session(&self, id_hash: &str, now: i64) -> Result<bool, StateError> {
        let conn = self.conn()?;
        let n = conn.execute(
            "UPDATE review_sessions SET ended_at = ?2 WHERE id_hash = ?1 AND ended_at IS NULL",
            params![id_hash, now],
        )?;
        Ok(n == 1)
    }

    /// Forgets codes and sessions that can no longer open anything (housekeeping).
    pub fn prune_review(&self, now: i64) -> Result<usize, StateError> {
        let conn = self.conn()?;
        let codes = conn.execute("DELETE FROM review_codes WHERE expires_at <= ?1", [now])?;
        let sessions = conn.execute(
            "DELETE FROM review_sessions WHERE expires_at <= ?1 OR ended_at IS NOT NULL",
            [now],
        )?;
        Ok(codes + sessions)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn session<'a>(id: &'a str, path: &'a str) -> NewReviewSession<'a> {
        NewReviewSession {
            id_hash: id,
            path,
            expires_at: 1000,
        }
    }

    #[test]
    fn a_code_opens_one_session_once_and_only_in_time() {
        let dir = tempfile::tempdir().unwrap();
        let s = State::open(&dir.path().join("state.sqlite")).unwrap();
        s.add_review_code("c1", "me", 10, 130).unwrap();
        assert_eq!(
            s.redeem_review_code("c1", 20, &session("s1", "p1"))
                .unwrap()
                .as_deref(),
            Some("me")
        );
        assert_eq!(
            s.redeem_review_code("c1", 21, &session("s2", "p2")).unwrap(),
            None
        );
        assert_eq!(s.review_session("p2", 22).unwrap(), None);
        s.add_review_code("c2", "me", 10, 130).unwrap();
        assert_eq!(
            s.redeem_review_code("c2", 130, &session("s3", "p3")).unwrap(),
            None
        );
        assert_eq!(
            s.redeem_review_code("nope", 20, &session("s4", "p4")).unwrap(),
            None
        );
        let live = s.review_session("p1", 30).unwrap().unwrap();
        assert_eq!((live.id_hash.as_str(), live.user.as_str()), ("s1", "me"));
        assert_eq!(s.review_session("p1", 1000).unwrap(), None);
        assert!(s.end_review_session("s1", 40).unwrap());
        assert!(!s.end_review_session("s1", 41).unwrap());
        assert_eq!(s.review_session("p1", 42).unwrap(), None);
        assert_eq!(s.prune_review(200).unwrap(), 3);
    }
}
