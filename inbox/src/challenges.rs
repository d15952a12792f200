//! Two-phase challenges of critical tools (docs/contract.md#critical-operations): the issued plan, its single use, and the
//! intent and result of its execution.
//!
//! [`State::consume_challenge`] is the "executes exactly once" guarantee: one conditional UPDATE,
//! so of any number of concurrent second calls (threads or processes) exactly one wins. The same
//! statement records the execution intent, so a crash after files were removed is finished by
//! [`State::open_challenge_intents`] at the next call; [`State::finish_challenge`] commits the
//! result and the revision together.

use rusqlite::{OptionalExtension, Row, params};
use serde_json::Value;

use crate::db::{State, StateError, json_column, non_negative, opt_json_column};

/// A challenge to record (times are unix seconds).
#[derive(Debug, Clone, Copy)]
pub struct NewChallenge<'a> {
    pub id: &'a str,
    pub vault: &'a str,
    pub credential_id: &'a str,
    pub tool: &'a str,
    /// SHA-256 of the canonical normalized arguments.
    pub args_hash: &'a str,
    pub idempotency_key: &'a str,
    /// The plan `plan_hash` is the HMAC of.
    pub plan: &'a Value,
    pub plan_hash: &'a str,
    pub revision: u64,
    pub expires_at: i64,
    pub created_at: i64,
}

/// A recorded challenge.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredChallenge {
    pub id: String,
    pub vault: String,
    pub credential_id: String,
    pub tool: String,
    pub args_hash: String,
    pub idempotency_key: String,
    pub plan: Value,
    pub plan_hash: String,
    pub revision: u64,
    pub expires_at: i64,
    pub created_at: i64,
    /// When the one execution began; `None` while unused.
    pub consumed_at: Option<i64>,
    /// What the execution plans to do, until it commits (then `None`).
    pub intent: Option<Value>,
    /// What the execution answered, once committed.
    pub result: Option<Value>,
}

const COLUMNS: &str = "id, vault, credential_id, tool, args_hash, idempotency_key, plan_json, plan_hash, \
     revision, expires_at, created_at, consumed_at, intent_json, result_json";

fn from_row(row: &Row<'_>) -> rusqlite::Result<StoredChallenge> {
    Ok(StoredChallenge {
        id: row.get(0)?,
        vault: row.get(1)?,
        credential_id: row.get(2)?,
        tool: row.get(3)?,
        args_hash: row.get(4)?,
        idempotency_key: row.get(5)?,
        plan: json_column(row, 6)?,
        plan_hash: row.get(7)?,
        revision: non_negative(row.get(8)?),
        expires_at: row.get(9)?,
        created_at: row.get(10)?,
        consumed_at: row.get(11)?,
        intent: opt_json_column(row, 12)?,
        result: opt_json_column(row, 13)?,
    })
}

impl State {
    /// Records an issued challenge. Ids are server-generated and unique; a duplicate is an error.
    pub fn create_challenge(&self, c: &NewChallenge<'_>) -> Result<(), StateError> {
        let conn = self.conn()?;
        conn.execute(
            "INSERT INTO challenges (id, vault, credential_id, tool, args_hash, idempotency_key,
                                     plan_json, plan_hash, revision, expires_at, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                c.id,
                c.vault,
                c.credential_id,
                c.tool,
                c.args_hash,
                c.idempotency_key,
                c.plan.to_string(),
                c.plan_hash,
                i64::try_from(c.revision).unwrap_or(i64::MAX),
                c.expires_at,
                c.created_at
            ],
        )?;
        Ok(())
    }

    /// The challenge with this id, in any vault (the caller compares vault and credential).
    pub fn challenge(&self, id: &str) -> Result<Option<StoredChallenge>, StateError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(&format!("SELECT {COLUMNS} FROM challenges WHERE id = ?1"))?;
        Ok(stmt.query_row([id], from_row).optional()?)
    }

    /// Uses the challenge: true for exactly one caller, ever; false if it was already used or
    /// does not exist. `intent` (what the execution will do) is recorded in the same statement,
    /// so there is never a used challenge whose execution nobody can finish.
    pub fn consume_challenge(&self, id: &str, at: i64, intent: &Value) -> Result<bool, StateError> {
        let conn = self.conn()?;
        let n = conn.execute(
            "UPDATE challenges SET consumed_at = ?2, intent_json = ?3
             WHERE id = ?1 AND consumed_at IS NULL",
            params![id, at, intent.to_string()],
        )?;
        Ok(n == 1)
    }

    /// Replaces the intent of an execution under way (a rollback marks it); false when the
    /// challenge has no open intent.
    pub fn set_challenge_intent(&self, id: &str, intent: &Value) -> Result<bool, StateError> {
        let conn = self.conn()?;
        let n = conn.execute(
            "UPDATE challenges SET intent_json = ?2 WHERE id = ?1 AND intent_json IS NOT NULL",
            params![id, intent.to_string()],
        )?;
        Ok(n == 1)
    }

    /// The vault's executions that began and did not commit (a crash), oldest first.
    pub fn open_challenge_intents(&self, vault: &str) -> Result<Vec<StoredChallenge>, StateError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM challenges
             WHERE vault = ?1 AND intent_json IS NOT NULL ORDER BY consumed_at, id"
        ))?;
        let rows = stmt.query_map([vault], from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The commit point of an execution, in one transaction: the result is recorded, the intent
    /// cleared and, when `changed`, the vault's revision moved and `fingerprint` (the notes as
    /// the execution left them) recorded, so the change is not counted again as one on disk.
    /// Returns the revision afterwards, or `None` (and changes nothing) when the challenge has no
    /// open intent: it was never consumed, or it already committed.
    pub fn finish_challenge(
        &self,
        id: &str,
        result: &Value,
        changed: bool,
        disk: Option<&crate::DiskAfter<'_>>,
    ) -> Result<Option<u64>, StateError> {
        self.transact(|tx| {
            let Some((vault, revision)) = tx.finish_challenge(id, result, changed)? else {
                return Ok(None);
            };
            if let (true, Some(d)) = (changed, disk) {
                tx.register_head(&vault, d)?;
            }
            Ok(Some(revision))
        })
    }

    /// Deletes challenges that expired before `before` (unix seconds) and are not mid-execution.
    /// A used one then answers like an unknown one (`CHALLENGE_MISMATCH`). Returns how many.
    pub fn prune_challenges(&self, before: i64) -> Result<usize, StateError> {
        let conn = self.conn()?;
        Ok(conn.execute(
            "DELETE FROM challenges WHERE expires_at < ?1 AND intent_json IS NULL",
            [before],
        )?)
    }
}

/// [`State::finish_challenge`] inside the caller's transaction: the vault and its revision.
pub(crate) fn finish_challenge_on(
    tx: &rusqlite::Connection,
    id: &str,
    result: &Value,
    changed: bool,
) -> Result<Option<(String, u64)>, StateError> {
    let vault: Option<String> = tx
        .query_row(
            "UPDATE challenges SET result_json = ?2, intent_json = NULL
             WHERE id = ?1 AND consumed_at IS NOT NULL AND intent_json IS NOT NULL
             RETURNING vault",
            params![id, result.to_string()],
            |r| r.get(0),
        )
        .optional()?;
    let Some(vault) = vault else {
        return Ok(None);
    };
    let revision: i64 = if changed {
        tx.query_row(
            "INSERT INTO vault_revisions (vault, revision) VALUES (?1, 1)
             ON CONFLICT(vault) DO UPDATE SET revision = revision + 1
             RETURNING revision",
            [&vault],
            |r| r.get(0),
        )?
    } else {
        tx.query_row(
            "SELECT COALESCE((SELECT revision FROM vault_revisions WHERE vault = ?1), 0)",
            [&vault],
            |r| r.get(0),
        )?
    };
    Ok(Some((vault, non_negative(revision))))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::{Arc, Barrier};

    use serde_json::json;

    use super::*;

    fn open() -> (tempfile::TempDir, State) {
        let dir = tempfile::tempdir().unwrap();
        let s = State::open(&dir.path().join("state.sqlite")).unwrap();
        (dir, s)
    }

    fn issue(s: &State, id: &str, expires_at: i64) {
        let plan = json!({"challengeId": id, "affected": ["z/a.md"]});
        s.create_challenge(&NewChallenge {
            id,
            vault: "v",
            credential_id: "cred_1",
            tool: "delete_permanent",
            args_hash: "a",
            idempotency_key: "k1",
            plan: &plan,
            plan_hash: "h",
            revision: 4,
            expires_at,
            created_at: 100,
        })
        .unwrap();
    }

    #[test]
    fn a_challenge_reads_back_as_recorded() {
        let (_d, s) = open();
        assert_eq!(s.challenge("c1").unwrap(), None);
        issue(&s, "c1", 400);
        let c = s.challenge("c1").unwrap().unwrap();
        assert_eq!(
            c,
            StoredChallenge {
                id: "c1".into(),
                vault: "v".into(),
                credential_id: "cred_1".into(),
                tool: "delete_permanent".into(),
                args_hash: "a".into(),
                idempotency_key: "k1".into(),
                plan: json!({"challengeId": "c1", "affected": ["z/a.md"]}),
                plan_hash: "h".into(),
                revision: 4,
                expires_at: 400,
                created_at: 100,
                consumed_at: None,
                intent: None,
                result: None,
            }
        );
        // Ids are unique.
        let plan = json!({});
        assert!(
            s.create_challenge(&NewChallenge {
                id: "c1",
                vault: "w",
                credential_id: "x",
                tool: "t",
                args_hash: "a",
                idempotency_key: "k",
                plan: &plan,
                plan_hash: "h",
                revision: 0,
                expires_at: 1,
                created_at: 1,
            })
            .is_err()
        );
    }

    #[test]
    fn a_challenge_is_consumed_once_then_committed_once() {
        let (_d, s) = open();
        issue(&s, "c1", 400);
        s.bump_revision("v").unwrap();
        let intent = json!({"remove": ["z/a.md"]});
        assert!(!s.consume_challenge("nope", 200, &intent).unwrap());
        assert_eq!(
            s.finish_challenge("c1", &json!({}), true, None).unwrap(),
            None,
            "not consumed"
        );
        assert!(s.consume_challenge("c1", 200, &intent).unwrap());
        assert!(!s.consume_challenge("c1", 201, &json!({"other": 1})).unwrap());
        let c = s.challenge("c1").unwrap().unwrap();
        assert_eq!((c.consumed_at, c.intent.as_ref()), (Some(200), Some(&intent)));
        let open = s.open_challenge_intents("v").unwrap();
        assert_eq!(open.len(), 1);
        assert!(s.open_challenge_intents("w").unwrap().is_empty());

        let result = json!({"status": "executed", "deleted": ["z/a.md"]});
        s.note_disk_state("v", "before").unwrap();
        assert_eq!(
            s.finish_challenge(
                "c1",
                &result,
                true,
                Some(&crate::DiskAfter {
                    fingerprint: Some("after"),
                    writes: &[],
                    change: None,
                    head: None,
                })
            )
            .unwrap(),
            Some(2)
        );
        assert_eq!(s.revision("v").unwrap(), 2);
        // The files as the execution left them are not a change on disk.
        assert_eq!(s.note_disk_state("v", "after").unwrap(), (2, false));
        let c = s.challenge("c1").unwrap().unwrap();
        assert_eq!((c.intent, c.result), (None, Some(result.clone())));
        assert!(s.open_challenge_intents("v").unwrap().is_empty());
        // Committing again changes nothing.
        assert_eq!(s.finish_challenge("c1", &json!({}), true, None).unwrap(), None);
        assert_eq!(s.revision("v").unwrap(), 2);
        assert_eq!(s.challenge("c1").unwrap().unwrap().result, Some(result));
    }

    #[test]
    fn an_execution_that_changed_nothing_keeps_the_revision() {
        let (_d, s) = open();
        issue(&s, "c1", 400);
        assert!(s.consume_challenge("c1", 200, &json!({})).unwrap());
        assert_eq!(
            s.finish_challenge(
                "c1",
                &json!({"removed": 0}),
                false,
                Some(&crate::DiskAfter {
                    fingerprint: Some("fp"),
                    writes: &[],
                    change: None,
                    head: None,
                })
            )
            .unwrap(),
            Some(0)
        );
        assert_eq!(s.revision("v").unwrap(), 0);
    }

    #[test]
    fn concurrent_consumers_across_connections_win_exactly_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.sqlite");
        issue(&State::open(&path).unwrap(), "c1", 400);
        let n = 8;
        let barrier = Arc::new(Barrier::new(n));
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let (path, barrier) = (path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    // One connection each, as separate processes would have.
                    let s = State::open(&path).unwrap();
                    barrier.wait();
                    s.consume_challenge("c1", 200 + i as i64, &json!({"by": i}))
                        .unwrap()
                })
            })
            .collect();
        let wins = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|won| *won)
            .count();
        assert_eq!(wins, 1);
    }

    #[test]
    fn pruning_keeps_live_and_executing_challenges() {
        let (_d, s) = open();
        issue(&s, "old", 100);
        issue(&s, "executing", 100);
        issue(&s, "live", 1000);
        assert!(s.consume_challenge("executing", 50, &json!({})).unwrap());
        assert_eq!(s.prune_challenges(500).unwrap(), 1);
        assert_eq!(s.challenge("old").unwrap(), None);
        assert!(s.challenge("executing").unwrap().is_some());
        assert!(s.challenge("live").unwrap().is_some());
    }
}
