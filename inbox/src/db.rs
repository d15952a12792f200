//! The SQLite connection and its migrations.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use rusqlite::{Connection, OptionalExtension};

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("no credential matches '{0}'")]
    CredentialNotFound(String),
    #[error("a credential named '{0}' already exists")]
    DuplicateName(String),
    #[error("state database schema version {found} is newer than this binary supports ({supported})")]
    SchemaTooNew { found: i64, supported: i64 },
    #[error("state database lock poisoned")]
    Poisoned,
}

/// Ordered migrations; `user_version` records how many have run. Append only.
const MIGRATIONS: &[&str] = &[
    // 1: credentials and per-vault revisions.
    "CREATE TABLE credentials (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        tier TEXT NOT NULL,
        vaults TEXT NOT NULL,          -- JSON array of vault ids; empty = every vault
        jti TEXT NOT NULL,
        created_at INTEGER NOT NULL,   -- unix seconds
        expires_at INTEGER,
        revoked_at INTEGER
    );
    CREATE TABLE vault_revisions (
        vault TEXT PRIMARY KEY,
        revision INTEGER NOT NULL
    );",
    // 2: what the files looked like when the revision was last moved for a change on disk.
    "CREATE TABLE vault_fingerprints (
        vault TEXT PRIMARY KEY,
        fingerprint TEXT NOT NULL
    );",
];

/// The gateway's state database, shared by every request of one process.
pub struct State {
    conn: Mutex<Connection>,
}

impl State {
    /// Opens (creating if needed) and migrates `state.sqlite`.
    pub fn open(path: &Path) -> Result<State, StateError> {
        let conn = Connection::open(path)?;
        // WAL lets the server read while a CLI process writes; busy_timeout waits for its lock.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        let state = State {
            conn: Mutex::new(conn),
        };
        state.migrate()?;
        Ok(state)
    }

    fn migrate(&self) -> Result<(), StateError> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        let supported = MIGRATIONS.len() as i64;
        if version > supported {
            return Err(StateError::SchemaTooNew {
                found: version,
                supported,
            });
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            tx.execute_batch(sql)?;
            tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        }
        tx.commit()?;
        Ok(())
    }

    pub(crate) fn conn(&self) -> Result<MutexGuard<'_, Connection>, StateError> {
        self.conn.lock().map_err(|_| StateError::Poisoned)
    }

    /// The schema version in force.
    pub fn schema_version(&self) -> Result<i64, StateError> {
        Ok(self.conn()?.query_row("PRAGMA user_version", [], |r| r.get(0))?)
    }

    /// The vault's current revision (0 before the first change).
    pub fn revision(&self, vault: &str) -> Result<u64, StateError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached("SELECT revision FROM vault_revisions WHERE vault = ?1")?;
        let mut rows = stmt.query([vault])?;
        match rows.next()? {
            Some(row) => Ok(row.get::<_, i64>(0)?.max(0) as u64),
            None => Ok(0),
        }
    }

    /// Records the vault's current on-disk fingerprint. The revision moves only when it differs
    /// from the recorded one, so several processes watching one vault count a change once.
    /// Returns the revision in force afterwards and whether this call moved it.
    pub fn note_disk_state(&self, vault: &str, fingerprint: &str) -> Result<(u64, bool), StateError> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let old: Option<String> = tx
            .query_row(
                "SELECT fingerprint FROM vault_fingerprints WHERE vault = ?1",
                [vault],
                |r| r.get(0),
            )
            .optional()?;
        let moved = old.as_deref() != Some(fingerprint);
        if moved {
            tx.execute(
                "INSERT INTO vault_fingerprints (vault, fingerprint) VALUES (?1, ?2)
                 ON CONFLICT(vault) DO UPDATE SET fingerprint = excluded.fingerprint",
                [vault, fingerprint],
            )?;
            // The first fingerprint of a vault is its baseline, not a change.
            if old.is_some() {
                tx.execute(
                    "INSERT INTO vault_revisions (vault, revision) VALUES (?1, 1)
                     ON CONFLICT(vault) DO UPDATE SET revision = revision + 1",
                    [vault],
                )?;
            }
        }
        let rev: i64 = tx
            .query_row(
                "SELECT revision FROM vault_revisions WHERE vault = ?1",
                [vault],
                |r| r.get(0),
            )
            .optional()?
            .unwrap_or(0);
        tx.commit()?;
        Ok((rev.max(0) as u64, moved && old.is_some()))
    }

    /// Adds one to the vault's revision and returns the new value.
    pub fn bump_revision(&self, vault: &str) -> Result<u64, StateError> {
        let conn = self.conn()?;
        let rev: i64 = conn.query_row(
            "INSERT INTO vault_revisions (vault, revision) VALUES (?1, 1)
             ON CONFLICT(vault) DO UPDATE SET revision = revision + 1
             RETURNING revision",
            [vault],
            |r| r.get(0),
        )?;
        Ok(rev.max(0) as u64)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn migrations_run_once_and_revisions_count() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.sqlite");
        let s = State::open(&path).unwrap();
        assert_eq!(s.schema_version().unwrap(), MIGRATIONS.len() as i64);
        assert_eq!(s.revision("demo").unwrap(), 0);
        assert_eq!(s.bump_revision("demo").unwrap(), 1);
        assert_eq!(s.bump_revision("demo").unwrap(), 2);
        drop(s);
        let s = State::open(&path).unwrap();
        assert_eq!(s.revision("demo").unwrap(), 2);
        assert_eq!(s.revision("other").unwrap(), 0);
    }

    #[test]
    fn disk_changes_move_the_revision_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.sqlite");
        let a = State::open(&path).unwrap();
        let b = State::open(&path).unwrap();
        assert_eq!(a.note_disk_state("v", "f1").unwrap(), (0, false), "baseline");
        assert_eq!(a.note_disk_state("v", "f2").unwrap(), (1, true));
        // A second process seeing the same state does not count it again.
        assert_eq!(b.note_disk_state("v", "f2").unwrap(), (1, false));
        assert_eq!(b.note_disk_state("v", "f3").unwrap(), (2, true));
    }

    #[test]
    fn newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.sqlite");
        {
            let c = Connection::open(&path).unwrap();
            c.pragma_update(None, "user_version", 999).unwrap();
        }
        assert!(matches!(
            State::open(&path),
            Err(StateError::SchemaTooNew { found: 999, .. })
        ));
    }
}
