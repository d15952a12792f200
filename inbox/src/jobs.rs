//! Jobs (docs/contract.md#applying-a-proposal): a write a caller asked for — an apply, an undo or a
//! redo, keyed by its idempotency key — recorded when it starts waiting for the vault's writer, so
//! that a crash loses none. A job is `queued` until its key records the answer (`done`, in the
//! same transaction as the effect) or it fails (`failed`, with the refusal's code). A queued job
//! whose process is gone is run again by the next gateway process; the key makes it happen once.
//!
//! This module stores and reads; who may run a job again, and when it is too old, is the engine's.

use rusqlite::{OptionalExtension, Row, params};

use crate::db::{State, StateError};

/// A job as its row holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub id: i64,
    pub vault: String,
    /// The credential whose key this is.
    pub principal: String,
    pub key: String,
    pub tool: String,
    /// The call's arguments (JSON text), checked again when the job is run again.
    pub args: String,
    /// `stdio` or `http`: how the caller reached the gateway.
    pub transport: String,
    /// The process that waits for the job (its lock file names it).
    pub owner: String,
    /// Unix milliseconds.
    pub submitted_ms: i64,
    /// How many times another process took it over.
    pub attempts: i64,
}

/// A job to record.
#[derive(Debug, Clone, Copy)]
pub struct NewJob<'a> {
    pub vault: &'a str,
    pub principal: &'a str,
    pub key: &'a str,
    pub tool: &'a str,
    pub args: &'a str,
    pub transport: &'a str,
    pub owner: &'a str,
    pub submitted_ms: i64,
}

fn from_row(row: &Row<'_>) -> rusqlite::Result<Job> {
    Ok(Job {
        id: row.get(0)?,
        vault: row.get(1)?,
        principal: row.get(2)?,
        key: row.get(3)?,
        tool: row.get(4)?,
        args: row.get(5)?,
        transport: row.get(6)?,
        owner: row.get(7)?,
        submitted_ms: row.get(8)?,
        attempts: row.get(9)?,
    })
}

const COLUMNS: &str = "id, vault, principal, idem_key, tool, args, transport, owner, submitted_ms, attempts";

/// Unix milliseconds now (0 before 1970).
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Marks the key's queued job done, inside the transaction that records the key's answer.
pub(crate) fn done_on(
    c: &rusqlite::Connection,
    principal: &str,
    key: &str,
    at_ms: i64,
) -> rusqlite::Result<()> {
    c.prepare_cached(
        "UPDATE jobs SET state = 'done', finished_ms = ?3
         WHERE principal = ?1 AND idem_key = ?2 AND state = 'queued'",
    )?
    .execute(params![principal, key, at_ms])?;
    Ok(())
}

impl State {
    /// Records a queued job, or returns the one already queued under the same key (a retry while
    /// the first call still waits attaches to it). Returns its id, and whether this call made it.
    pub fn job_submit(&self, j: &NewJob<'_>) -> Result<(i64, bool), StateError> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let existing = tx
            .prepare_cached(
                "SELECT id FROM jobs WHERE principal = ?1 AND idem_key = ?2 AND state = 'queued'",
            )?
            .query_row([j.principal, j.key], |r| r.get::<_, i64>(0))
            .optional()?;
        let id = match existing {
            Some(id) => (id, false),
            None => {
                tx.prepare_cached(
                    "INSERT INTO jobs (vault, principal, idem_key, tool, args, transport, owner, submitted_ms, state)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'queued')",
                )?
                .execute(params![
                    j.vault,
                    j.principal,
                    j.key,
                    j.tool,
                    j.args,
                    j.transport,
                    j.owner,
                    j.submitted_ms
                ])?;
                (tx.last_insert_rowid(), true)
            }
        };
        tx.commit()?;
        Ok(id)
    }

    /// Ends a queued job: `done` when `code` is `None`, else `failed` with the code. A job that is
    /// no longer queued (its key answered meanwhile) keeps its state.
    pub fn job_finish(&self, id: i64, code: Option<&str>, at_ms: i64) -> Result<(), StateError> {
        let conn = self.conn()?;
        conn.prepare_cached(
            "UPDATE jobs SET state = CASE WHEN ?2 IS NULL THEN 'done' ELSE 'failed' END,
                             code = ?2, finished_ms = ?3
             WHERE id = ?1 AND state = 'queued'",
        )?
        .execute(params![id, code, at_ms])?;
        Ok(())
    }

    /// Takes over a queued job from `from` (a stopped process) for `to`, counting the attempt:
    /// of several processes taking it over at once, exactly one gets `true`.
    pub fn job_claim(&self, id: i64, from: &str, to: &str) -> Result<bool, StateError> {
        let conn = self.conn()?;
        Ok(conn
            .prepare_cached(
                "UPDATE jobs SET owner = ?3, attempts = attempts + 1
                 WHERE id = ?1 AND owner = ?2 AND state = 'queued'",
            )?
            .execute(params![id, from, to])?
            == 1)
    }

    /// Every queued job, oldest first.
    pub fn jobs_queued(&self) -> Result<Vec<Job>, StateError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM jobs WHERE state = 'queued' ORDER BY id"
        ))?;
        let rows = stmt.query_map([], from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// A job by id, with its state (`queued`, `done`, `failed`) and failure code.
    pub fn job(&self, id: i64) -> Result<Option<(Job, String, Option<String>)>, StateError> {
        let conn = self.conn()?;
        let mut stmt =
            conn.prepare_cached(&format!("SELECT {COLUMNS}, state, code FROM jobs WHERE id = ?1"))?;
        Ok(stmt
            .query_row([id], |r| Ok((from_row(r)?, r.get(10)?, r.get(11)?)))
            .optional()?)
    }

    /// Forgets finished jobs that ended before `before_ms` (their keys keep the answers).
    pub fn jobs_prune(&self, before_ms: i64) -> Result<usize, StateError> {
        let conn = self.conn()?;
        Ok(conn
            .prepare_cached("DELETE FROM jobs WHERE state <> 'queued' AND finished_ms < ?1")?
            .execute([before_ms])?)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::IdemKey;

    fn job<'a>(key: &'a str, owner: &'a str) -> NewJob<'a> {
        NewJob {
            vault: "main",
            principal: "cred-1",
            key,
            tool: "apply_proposal",
            args: r#"{"id":"p"}"#,
            transport: "http",
            owner,
            submitted_ms: 1_000,
        }
    }

    fn open() -> (tempfile::TempDir, State) {
        let dir = tempfile::tempdir().unwrap();
        let state = State::open(&dir.path().join("state.sqlite")).unwrap();
        (dir, state)
    }

    #[test]
    fn a_retry_while_queued_attaches_to_the_same_job() {
        let (_d, s) = open();
        let (a, made) = s.job_submit(&job("k1", "o1")).unwrap();
        let (b, again) = s.job_submit(&job("k1", "o2")).unwrap();
        assert_eq!((a, made, again), (b, true, false));
        let queued = s.jobs_queued().unwrap();
        assert_eq!(queued.len(), 1);
        assert_eq!(queued[0].owner, "o1", "the first submitter owns it");
        // Another key is another job.
        assert_ne!(s.job_submit(&job("k2", "o1")).unwrap().0, a);
    }

    #[test]
    fn a_failed_job_frees_its_key_for_a_new_job_and_keeps_its_code() {
        let (_d, s) = open();
        let (a, _) = s.job_submit(&job("k1", "o1")).unwrap();
        s.job_finish(a, Some("PROPOSAL_STALE_BASE"), 2_000).unwrap();
        let (_, state, code) = s.job(a).unwrap().unwrap();
        assert_eq!(
            (state.as_str(), code.as_deref()),
            ("failed", Some("PROPOSAL_STALE_BASE"))
        );
        assert!(s.jobs_queued().unwrap().is_empty());
        let (b, made) = s.job_submit(&job("k1", "o1")).unwrap();
        assert!(made && a != b, "a retry after a failure is a new job");
    }

    #[test]
    fn recording_the_keys_answer_marks_its_job_done_in_the_same_transaction() {
        let (_d, s) = open();
        let (a, _) = s.job_submit(&job("k1", "o1")).unwrap();
        let k = IdemKey {
            credential_id: "cred-1",
            key: "k1",
            tool: "apply_proposal",
            args_hash: "h",
        };
        let answer = serde_json::json!({"applied": true});
        // A transaction that fails after recording the key leaves the job queued.
        let failed: Result<(), StateError> = s.transact(|tx| {
            tx.put_key(&k, &answer, "2026-01-01T00:00:00Z")?;
            Err(StateError::IntentNotFound(0))
        });
        assert!(failed.is_err());
        assert_eq!(s.job(a).unwrap().unwrap().1, "queued");
        s.transact(|tx| tx.put_key(&k, &answer, "2026-01-01T00:00:00Z"))
            .unwrap();
        assert_eq!(s.job(a).unwrap().unwrap().1, "done");
        // A late failure report does not undo what the key recorded.
        s.job_finish(a, Some("INTERNAL"), 3_000).unwrap();
        assert_eq!(s.job(a).unwrap().unwrap().1, "done");
    }

    #[test]
    fn of_two_processes_taking_over_a_job_one_gets_it() {
        let (_d, s) = open();
        let (a, _) = s.job_submit(&job("k1", "dead")).unwrap();
        assert!(s.job_claim(a, "dead", "p1").unwrap());
        assert!(
            !s.job_claim(a, "dead", "p2").unwrap(),
            "the second finds it taken"
        );
        let (j, _, _) = s.job(a).unwrap().unwrap();
        assert_eq!((j.owner.as_str(), j.attempts), ("p1", 1));
    }

    #[test]
    fn pruning_forgets_finished_jobs_only() {
        let (_d, s) = open();
        let (a, _) = s.job_submit(&job("k1", "o1")).unwrap();
        let (b, _) = s.job_submit(&job("k2", "o1")).unwrap();
        s.job_finish(a, None, 2_000).unwrap();
        assert_eq!(s.jobs_prune(5_000).unwrap(), 1);
        assert!(s.job(a).unwrap().is_none());
        assert!(s.job(b).unwrap().is_some(), "a queued job is never pruned");
    }
}
