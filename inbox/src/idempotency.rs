//! Idempotency keys (docs/contract.md#proposals, docs/contract.md#critical-operations): the first result of a mutating call, kept per credential and
//! key, so a retry replays it instead of acting twice.
//!
//! This module stores and reads; whether a stored record is a replay (same tool and arguments) or
//! an `IDEMPOTENCY_CONFLICT` is the caller's decision, helped by [`IdemRecord::same_call`].

use rusqlite::{OptionalExtension, Row, params};
use serde_json::Value;

use crate::db::{State, StateError, json_column};

/// The first call made with a key.
#[derive(Debug, Clone, PartialEq)]
pub struct IdemRecord {
    pub tool: String,
    pub args_hash: String,
    pub result: Value,
    /// RFC 3339 UTC.
    pub created_at: String,
}

impl IdemRecord {
    /// Whether a call with this tool and arguments hash repeats the recorded one.
    pub fn same_call(&self, tool: &str, args_hash: &str) -> bool {
        self.tool == tool && self.args_hash == args_hash
    }
}

/// What [`State::idempotency_put`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum IdemPut {
    /// This call's result is now the key's.
    Stored,
    /// The key was taken first (possibly by a concurrent call); the record is unchanged.
    Existing(IdemRecord),
}

fn from_row(row: &Row<'_>) -> rusqlite::Result<IdemRecord> {
    Ok(IdemRecord {
        tool: row.get(0)?,
        args_hash: row.get(1)?,
        result: json_column(row, 2)?,
        created_at: row.get(3)?,
    })
}

const SELECT: &str = "SELECT tool, args_hash, result_json, created_at FROM idempotency_keys
                      WHERE credential_id = ?1 AND key = ?2";

impl State {
    pub fn idempotency_get(&self, credential_id: &str, key: &str) -> Result<Option<IdemRecord>, StateError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(SELECT)?;
        Ok(stmt.query_row([credential_id, key], from_row).optional()?)
    }

    /// Records the key's result unless the key is already taken, in which case the first record
    /// is returned untouched: of two racing calls exactly one is `Stored`.
    pub fn idempotency_put(
        &self,
        credential_id: &str,
        key: &str,
        tool: &str,
        args_hash: &str,
        result: &Value,
        at: &str,
    ) -> Result<IdemPut, StateError> {
        let mut conn = self.conn()?;
        // One write transaction: the insert and the read-back see the same row.
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let inserted = tx.execute(
            "INSERT OR IGNORE INTO idempotency_keys
                (credential_id, key, tool, args_hash, result_json, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![credential_id, key, tool, args_hash, result.to_string(), at],
        )?;
        let out = if inserted == 1 {
            crate::jobs::done_on(&tx, credential_id, key, crate::jobs::now_ms())?;
            IdemPut::Stored
        } else {
            let existing = tx.query_row(SELECT, [credential_id, key], from_row)?;
            IdemPut::Existing(existing)
        };
        tx.commit()?;
        Ok(out)
    }

    /// Forgets keys recorded before `before` (RFC 3339 UTC, compared as text); returns how many.
    /// Replaces the answer a key replays, for the same call only: the git commit of a change is
    /// made after the commit that stored its first answer (docs/contract.md#git-history), and a replay must say what
    /// the first answer said.
    pub fn idempotency_amend(
        &self,
        credential_id: &str,
        key: &str,
        tool: &str,
        args_hash: &str,
        result: &Value,
    ) -> Result<(), StateError> {
        self.conn()?.execute(
            "UPDATE idempotency_keys SET result_json = ?5
             WHERE credential_id = ?1 AND key = ?2 AND tool = ?3 AND args_hash = ?4",
            rusqlite::params![credential_id, key, tool, args_hash, result.to_string()],
        )?;
        Ok(())
    }

    pub fn idempotency_prune(&self, before: &str) -> Result<u64, StateError> {
        let conn = self.conn()?;
        let n = conn.execute("DELETE FROM idempotency_keys WHERE created_at < ?1", [before])?;
        Ok(n as u64)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;

    #[test]
    fn first_put_wins_and_later_puts_see_it() {
        let dir = tempfile::tempdir().unwrap();
        let s = State::open(&dir.path().join("state.sqlite")).unwrap();
        assert_eq!(s.idempotency_get("c1", "k").unwrap(), None);
        let first = json!({"applied": true, "revision": 3});
        assert_eq!(
            s.idempotency_put("c1", "k", "apply_proposal", "h1", &first, "2026-05-01T01:00:00Z")
                .unwrap(),
            IdemPut::Stored
        );
        let rec = s.idempotency_get("c1", "k").unwrap().unwrap();
        assert_eq!(rec.result, first);
        assert!(rec.same_call("apply_proposal", "h1"));
        assert!(!rec.same_call("apply_proposal", "h2"));
        assert!(!rec.same_call("reject_proposal", "h1"));

        // Other arguments under the same key: the first record comes back, unchanged.
        let second = s
            .idempotency_put(
                "c1",
                "k",
                "apply_proposal",
                "h2",
                &json!({"other": 1}),
                "2026-05-01T02:00:00Z",
            )
            .unwrap();
        assert_eq!(second, IdemPut::Existing(rec.clone()));
        assert_eq!(s.idempotency_get("c1", "k").unwrap().unwrap(), rec);

        // Keys are per credential.
        assert_eq!(
            s.idempotency_put(
                "c2",
                "k",
                "apply_proposal",
                "h2",
                &json!(null),
                "2026-05-01T02:00:00Z"
            )
            .unwrap(),
            IdemPut::Stored
        );
        assert_eq!(s.idempotency_get("c2", "k").unwrap().unwrap().args_hash, "h2");

        assert_eq!(s.idempotency_prune("2026-05-01T01:30:00Z").unwrap(), 1);
        assert_eq!(s.idempotency_get("c1", "k").unwrap(), None);
        assert!(s.idempotency_get("c2", "k").unwrap().is_some());
    }
}
