//! Every change vaultgate commits to a vault's notes (docs/contract.md#git-history): one row per apply, undo, redo and
//! executed critical call, written in the change's own commit. The rows answer
//! `get_note_history`, and the ones whose git commit is still to be made are the git queue.

use rusqlite::{Connection, OptionalExtension, Row};
use serde_json::Value;

use crate::db::{State, StateError, json_column};

/// A change, as its commit records it.
#[derive(Debug, Clone, Copy)]
pub struct NewChange<'a> {
    /// `new`, `patch`, `move`, `delete`, `undo`, `redo`, `delete_permanent`, `empty_trash`.
    pub kind: &'a str,
    pub history_entry_id: &'a str,
    /// Who made it (the audit actor's label).
    pub actor: &'a str,
    pub reason: &'a str,
    pub ts: &'a str,
    pub audit_seq: u64,
    /// `[{path, from?, before, after}]`: each note the change wrote or removed.
    pub notes: &'a Value,
    /// Every note path the change touches (both names of a move), for lookups by path.
    pub paths: &'a [String],
    /// The git commit to make (`Some`: queued), or `None` when git is off for the vault.
    pub git: Option<&'a Value>,
}

/// A stored change.
#[derive(Debug, Clone)]
pub struct Change {
    pub seq: i64,
    pub vault: String,
    pub kind: String,
    pub history_entry_id: String,
    pub actor: String,
    pub reason: String,
    pub ts: String,
    pub audit_seq: u64,
    pub notes: Value,
    /// `off`, `queued`, `committed` or `dropped`.
    pub git: String,
    pub git_json: Option<Value>,
    pub git_commit: Option<String>,
}

/// Where a commit of the queue ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitDone<'a> {
    Committed(&'a str),
    /// `HEAD` already held its content (the user committed it), or the queue was dropped.
    Dropped,
}

const COLUMNS: &str =
    "seq, vault, kind, history_entry_id, actor, reason, ts, audit_seq, notes_json, git, git_json, git_commit";

fn change_row(r: &Row<'_>) -> rusqlite::Result<Change> {
    let git_json: Option<String> = r.get(10)?;
    let git_json = match git_json {
        Some(text) => Some(serde_json::from_str(&text).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(10, rusqlite::types::Type::Text, Box::new(e))
        })?),
        None => None,
    };
    Ok(Change {
        seq: r.get(0)?,
        vault: r.get(1)?,
        kind: r.get(2)?,
        history_entry_id: r.get(3)?,
        actor: r.get(4)?,
        reason: r.get(5)?,
        ts: r.get(6)?,
        audit_seq: r.get::<_, i64>(7)?.max(0) as u64,
        notes: json_column(r, 8)?,
        git: r.get(9)?,
        git_json,
        git_commit: r.get(11)?,
    })
}

/// Records `c` inside the caller's transaction.
pub(crate) fn insert_change(tx: &Connection, vault: &str, c: &NewChange<'_>) -> rusqlite::Result<()> {
    let git_json = c.git.map(Value::to_string);
    let seq: i64 = tx
        .prepare_cached(
            "INSERT INTO changes
                (vault, kind, history_entry_id, actor, reason, ts, audit_seq, notes_json, git, git_json)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
             RETURNING seq",
        )?
        .query_row(
            rusqlite::params![
                vault,
                c.kind,
                c.history_entry_id,
                c.actor,
                c.reason,
                c.ts,
                c.audit_seq as i64,
                c.notes.to_string(),
                if c.git.is_some() { "queued" } else { "off" },
                git_json,
            ],
            |r| r.get(0),
        )?;
    let mut put = tx
        .prepare_cached("INSERT OR IGNORE INTO change_paths (vault, path, change_seq) VALUES (?1, ?2, ?3)")?;
    for p in c.paths {
        put.execute(rusqlite::params![vault, p, seq])?;
    }
    Ok(())
}

impl State {
    /// Whether vaultgate commits this vault's changes to git (docs/contract.md#git-history).
    pub fn git_enabled(&self, vault: &str) -> Result<bool, StateError> {
        let on: Option<i64> = self
            .conn()?
            .prepare_cached("SELECT enabled FROM vault_git WHERE vault = ?1")?
            .query_row([vault], |r| r.get(0))
            .optional()?;
        Ok(on == Some(1))
    }

    /// Turns git on or off for a vault. Turning it off with `drop_queue` ends every queued commit
    /// as dropped, in the same transaction; returns how many were dropped.
    pub fn set_git(&self, vault: &str, on: bool, at: &str, drop_queue: bool) -> Result<u64, StateError> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        tx.execute(
            "INSERT INTO vault_git (vault, enabled, changed_at) VALUES (?1, ?2, ?3)
             ON CONFLICT(vault) DO UPDATE SET enabled = excluded.enabled, changed_at = excluded.changed_at",
            rusqlite::params![vault, on as i64, at],
        )?;
        let dropped = if drop_queue {
            tx.execute(
                "UPDATE changes SET git = 'dropped' WHERE vault = ?1 AND git = 'queued'",
                [vault],
            )? as u64
        } else {
            0
        };
        tx.commit()?;
        Ok(dropped)
    }

    /// Forgets a vault's git setting, changes and queued commits (`vault remove`): a vault added
    /// later under the same id starts with none of them.
    pub fn forget_changes(&self, vault: &str) -> Result<(), StateError> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        tx.execute("DELETE FROM vault_git WHERE vault = ?1", [vault])?;
        tx.execute("DELETE FROM change_paths WHERE vault = ?1", [vault])?;
        tx.execute("DELETE FROM changes WHERE vault = ?1", [vault])?;
        tx.commit()?;
        Ok(())
    }

    /// The oldest `limit` commits waiting in a vault's queue, oldest first.
    pub fn queued_commits(&self, vault: &str, limit: usize) -> Result<Vec<Change>, StateError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM changes WHERE vault = ?1 AND git = 'queued' ORDER BY seq LIMIT ?2"
        ))?;
        let rows = stmt.query_map(rusqlite::params![vault, limit as i64], change_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// How many commits wait in a vault's queue.
    pub fn queue_len(&self, vault: &str) -> Result<u64, StateError> {
        let n: i64 = self.conn()?.query_row(
            "SELECT count(*) FROM changes WHERE vault = ?1 AND git = 'queued'",
            [vault],
            |r| r.get(0),
        )?;
        Ok(n.max(0) as u64)
    }

    /// Ends one queued commit. A row that is no longer queued is left as it is (false).
    pub fn finish_git(&self, seq: i64, done: GitDone<'_>) -> Result<bool, StateError> {
        let (state, commit) = match done {
            GitDone::Committed(c) => ("committed", Some(c)),
            GitDone::Dropped => ("dropped", None),
        };
        let n = self.conn()?.execute(
            "UPDATE changes SET git = ?2, git_commit = ?3 WHERE seq = ?1 AND git = 'queued'",
            rusqlite::params![seq, state, commit],
        )?;
        Ok(n == 1)
    }

    /// Records the commit a queued change is about to move `HEAD` to, before it does: after a
    /// crash, that commit being in `HEAD`'s history says the change was committed.
    pub fn note_git_attempt(&self, seq: i64, commit: &str) -> Result<(), StateError> {
        self.conn()?.execute(
            "UPDATE changes SET git_commit = ?2 WHERE seq = ?1 AND git = 'queued'",
            rusqlite::params![seq, commit],
        )?;
        Ok(())
    }

    /// A vault's changes that touch `path`, newest first, older than `before` (a change `seq`).
    pub fn changes_of_path(
        &self,
        vault: &str,
        path: &str,
        before: Option<i64>,
        limit: usize,
    ) -> Result<Vec<Change>, StateError> {
        let conn = self.conn()?;
        let cols = COLUMNS
            .split(", ")
            .map(|c| format!("c.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {cols} FROM change_paths p JOIN changes c ON c.seq = p.change_seq
             WHERE p.vault = ?1 AND p.path = ?2 AND p.change_seq < ?3
             ORDER BY p.change_seq DESC LIMIT ?4"
        ))?;
        let rows = stmt.query_map(
            rusqlite::params![vault, path, before.unwrap_or(i64::MAX), limit as i64],
            change_row,
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// One change of a vault.
    pub fn change(&self, vault: &str, seq: i64) -> Result<Option<Change>, StateError> {
        Ok(self
            .conn()?
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM changes WHERE vault = ?1 AND seq = ?2"
            ))?
            .query_row(rusqlite::params![vault, seq], change_row)
            .optional()?)
    }

    /// Every change of a vault (a permanent deletion checks which history objects others use).
    pub fn all_changes(&self, vault: &str) -> Result<Vec<Change>, StateError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM changes WHERE vault = ?1 ORDER BY seq"
        ))?;
        let rows = stmt.query_map([vault], change_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every history entry's id and stored steps (their JSON text) of a vault.
    pub fn history_paths(&self, vault: &str) -> Result<Vec<(String, String)>, StateError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached("SELECT id, paths_json FROM history WHERE vault = ?1")?;
        let rows = stmt.query_map([vault], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The change recorded with audit line `audit_seq`, if any.
    pub fn change_by_audit_seq(&self, audit_seq: u64) -> Result<Option<Change>, StateError> {
        Ok(self
            .conn()?
            .prepare_cached(&format!("SELECT {COLUMNS} FROM changes WHERE audit_seq = ?1"))?
            .query_row([audit_seq as i64], change_row)
            .optional()?)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn change<'a>(notes: &'a Value, paths: &'a [String], git: Option<&'a Value>) -> NewChange<'a> {
        NewChange {
            kind: "patch",
            history_entry_id: "h1",
            actor: "agent (c1)",
            reason: "why",
            ts: "2026-01-01T00:00:00Z",
            audit_seq: 7,
            notes,
            paths,
            git,
        }
    }

    fn record(s: &State, c: &NewChange<'_>) {
        let mut conn = s.conn().unwrap();
        let tx = conn.transaction().unwrap();
        insert_change(&tx, "v", c).unwrap();
        tx.commit().unwrap();
    }

    #[test]
    fn the_queue_is_ordered_and_each_commit_ends_once() {
        let dir = tempfile::tempdir().unwrap();
        let s = State::open(&dir.path().join("s.sqlite")).unwrap();
        let notes = json!([{"path": "a.md", "before": null, "after": "x"}]);
        let paths = vec!["a.md".to_owned()];
        let git = json!({"subject": "new a.md"});
        record(&s, &change(&notes, &paths, Some(&git)));
        record(&s, &change(&notes, &paths, None));
        record(&s, &change(&notes, &paths, Some(&git)));
        let q = s.queued_commits("v", 10).unwrap();
        assert_eq!(q.len(), 2);
        assert!(q[0].seq < q[1].seq);
        assert_eq!(s.queue_len("v").unwrap(), 2);
        assert!(s.finish_git(q[0].seq, GitDone::Committed("abc")).unwrap());
        assert!(!s.finish_git(q[0].seq, GitDone::Dropped).unwrap(), "ended twice");
        assert_eq!(s.queue_len("v").unwrap(), 1);
        assert_eq!(s.set_git("v", false, "t", true).unwrap(), 1);
        assert_eq!(s.queue_len("v").unwrap(), 0);
        let all = s.changes_of_path("v", "a.md", None, 10).unwrap();
        assert_eq!(all.len(), 3);
        assert!(all[0].seq > all[1].seq, "newest first");
        assert_eq!(all[2].git_commit.as_deref(), Some("abc"));
        let older = s.changes_of_path("v", "a.md", Some(all[1].seq), 10).unwrap();
        assert_eq!(older.len(), 1);
        assert_eq!(
            s.change_by_audit_seq(7).unwrap().map(|c| c.vault),
            Some("v".into())
        );
    }

    #[test]
    fn git_is_off_until_turned_on() {
        let dir = tempfile::tempdir().unwrap();
        let s = State::open(&dir.path().join("s.sqlite")).unwrap();
        assert!(!s.git_enabled("v").unwrap());
        s.set_git("v", true, "t", false).unwrap();
        assert!(s.git_enabled("v").unwrap());
        assert!(!s.git_enabled("w").unwrap());
    }
}
