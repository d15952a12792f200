//! The SQLite connection and its migrations.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use rusqlite::{Connection, OptionalExtension, Row};
use serde_json::Value;

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
    #[error("a proposal with id '{0}' already exists")]
    DuplicateProposalId(String),
    #[error("vault '{vault}' already has a proposal with slug '{slug}'")]
    DuplicateSlug { vault: String, slug: String },
    /// The metadata JSON disagrees with the indexed columns (names the field), or is not an object.
    #[error("proposal metadata disagrees with its row at '{0}'")]
    InvalidMeta(&'static str),
    #[error("no proposal '{0}'")]
    ProposalNotFound(String),
    /// `begin_intent` for a proposal that already has one: a previous apply did not finish and
    /// must be recovered first.
    #[error("an apply intent for proposal '{0}' is already open")]
    IntentExists(String),
    #[error("no apply intent {0}")]
    IntentNotFound(i64),
    #[error("apply intent {intent_id} does not belong to proposal '{proposal_id}'")]
    IntentMismatch { intent_id: i64, proposal_id: String },
    #[error("a history entry with id '{0}' already exists")]
    DuplicateHistoryEntry(String),
    /// fsyncing the write-ahead log failed: commits since the last sync may not be durable.
    #[error("syncing the state database's log: {0}")]
    Log(#[from] std::io::Error),
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
    // 3: proposals, idempotency keys, apply intents and history (docs/contract.md#proposals, docs/contract.md#critical-operations, docs/contract.md#history). Times are RFC 3339
    // UTC text, as in the proposal metadata; *_json columns hold JSON text.
    "CREATE TABLE proposals (
        id TEXT PRIMARY KEY,           -- UUIDv7, server-generated
        vault TEXT NOT NULL,
        slug TEXT NOT NULL,
        kind TEXT NOT NULL,
        target TEXT NOT NULL,
        created_by TEXT NOT NULL,      -- credential id
        created_at TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'applied', 'rejected')),
        meta_json TEXT NOT NULL,       -- the .proposal.json metadata as signed
        decided_at TEXT,
        decided_by TEXT,
        result_json TEXT,
        reject_reason TEXT,
        UNIQUE (vault, slug),
        CHECK ((status = 'pending') = (decided_at IS NULL))
    );
    CREATE INDEX proposals_by_vault_status ON proposals (vault, status, created_at);
    CREATE TABLE idempotency_keys (
        credential_id TEXT NOT NULL,
        key TEXT NOT NULL,
        tool TEXT NOT NULL,
        args_hash TEXT NOT NULL,
        result_json TEXT NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (credential_id, key)
    ) WITHOUT ROWID;
    CREATE INDEX idempotency_keys_by_age ON idempotency_keys (created_at);
    -- AUTOINCREMENT: an intent id is never reused, so a stale id cannot touch a newer intent.
    CREATE TABLE apply_intents (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        vault TEXT NOT NULL,
        proposal_id TEXT NOT NULL UNIQUE,
        plan_json TEXT NOT NULL,
        step TEXT NOT NULL,
        started_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE INDEX apply_intents_by_vault ON apply_intents (vault, id);
    CREATE TABLE history (
        id TEXT PRIMARY KEY,
        vault TEXT NOT NULL,
        seq INTEGER NOT NULL,          -- per vault, increasing, never reused
        label TEXT NOT NULL,
        kind TEXT NOT NULL,
        created_by TEXT NOT NULL,
        created_at TEXT NOT NULL,
        paths_json TEXT NOT NULL,      -- [{path, before, after}] content hashes
        state TEXT NOT NULL DEFAULT 'done' CHECK (state IN ('done', 'undone')),
        barrier INTEGER NOT NULL DEFAULT 0 CHECK (barrier IN (0, 1)),
        UNIQUE (vault, seq)
    );
    CREATE INDEX history_by_vault_state ON history (vault, state, seq);",
    // 4: two-phase challenges of critical tools (docs/contract.md#critical-operations). Times are unix seconds, as in
    // `credentials`; `intent_json` is set, in the same statement that consumes the challenge,
    // before any file is removed and cleared when the execution commits.
    "CREATE TABLE challenges (
        id TEXT PRIMARY KEY,
        vault TEXT NOT NULL,
        credential_id TEXT NOT NULL,
        tool TEXT NOT NULL,
        args_hash TEXT NOT NULL,       -- SHA-256 of the canonical normalized arguments
        idempotency_key TEXT NOT NULL,
        plan_json TEXT NOT NULL,       -- the plan plan_hash is the HMAC of
        plan_hash TEXT NOT NULL,
        revision INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        consumed_at INTEGER,
        intent_json TEXT,
        result_json TEXT,
        CHECK (consumed_at IS NOT NULL OR (intent_json IS NULL AND result_json IS NULL))
    );
    CREATE INDEX challenges_by_expiry ON challenges (expires_at);
    CREATE INDEX challenges_open_intents ON challenges (vault) WHERE intent_json IS NOT NULL;",
    // 5: the last applied proposal is found without a scan (`_applied.jsonl` repair before writes).
    "CREATE INDEX history_by_vault_seq ON history (vault, seq);
    CREATE INDEX proposals_by_history_entry
        ON proposals (vault, json_extract(result_json, '$.historyEntryId')) WHERE status = 'applied';",
    // 6: the planner did not use 5's expression index (it scanned every applied proposal, so
    // each write cost more as the vault aged); a generated column's index it does use.
    "ALTER TABLE proposals ADD COLUMN history_entry_id TEXT
        GENERATED ALWAYS AS (json_extract(result_json, '$.historyEntryId')) VIRTUAL;
    CREATE INDEX proposals_by_history_id ON proposals (history_entry_id)
        WHERE history_entry_id IS NOT NULL;
    DROP INDEX proposals_by_history_entry;",
    // 7: the notes each committed write left (hash; NULL: removed), so a watcher in another
    // process knows vaultgate's writes as its own and does not walk the vault for them.
    "CREATE TABLE vault_writes (
        vault TEXT NOT NULL,
        path TEXT NOT NULL,
        hash TEXT,
        PRIMARY KEY (vault, path)
    ) WITHOUT ROWID;",
    // 8: the audit head (docs/contract.md#the-audit-log): the last (seq, hash) this database saw written, so a missing or
    // replaced audit.jsonl is noticed instead of silently restarted; and rejections whose files
    // are not archived yet (set with the status, cleared after the move), so a crash in between
    // is finished at the next start instead of leaving the files in the inbox for good.
    "CREATE TABLE audit_head (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        seq INTEGER NOT NULL,
        hash TEXT NOT NULL
    );
    ALTER TABLE proposals ADD COLUMN archive_pending INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX proposals_archive_pending ON proposals (vault) WHERE archive_pending = 1;",
    // 9: the review page (docs/contract.md#the-review-page-and-in-client-approval): one-time login codes and sessions, both stored as SHA-256 of
    // the secret value (a copy of the database opens nothing); and each credential's last use.
    "CREATE TABLE review_codes (
        code_hash TEXT PRIMARY KEY,
        user TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        used_at INTEGER
    ) WITHOUT ROWID;
    CREATE TABLE review_sessions (
        id_hash TEXT PRIMARY KEY,
        path TEXT NOT NULL UNIQUE,
        user TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        ended_at INTEGER
    ) WITHOUT ROWID;
    ALTER TABLE credentials ADD COLUMN last_used_at INTEGER;",
    // 10: in-client approval (docs/contract.md#the-review-page-and-in-client-approval): the per-credential opt-in, and each approval carried by a
    // 2026-07-28 input-required round, so a sealed approval is used once.
    "ALTER TABLE credentials ADD COLUMN approve_in_client INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE approvals_used (
        nonce TEXT PRIMARY KEY,
        expires_at INTEGER NOT NULL
    ) WITHOUT ROWID;",
    // 11: every change vaultgate commits, for `get_note_history` and git (docs/contract.md#git-history). A row is
    // written in the change's own commit; `git` is its commit's state: 'queued' rows are the git
    // queue, made in `seq` order. `change_paths` finds a note's changes without a scan.
    "CREATE TABLE vault_git (
        vault TEXT PRIMARY KEY,
        enabled INTEGER NOT NULL CHECK (enabled IN (0, 1)),
        changed_at TEXT NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE changes (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        vault TEXT NOT NULL,
        kind TEXT NOT NULL,
        history_entry_id TEXT NOT NULL,
        actor TEXT NOT NULL,
        reason TEXT NOT NULL,
        ts TEXT NOT NULL,
        audit_seq INTEGER NOT NULL,
        notes_json TEXT NOT NULL,      -- [{path, from?, before, after}]
        git TEXT NOT NULL CHECK (git IN ('off', 'queued', 'committed', 'dropped')),
        git_json TEXT,                 -- the pending commit (author, message, files)
        git_commit TEXT
    );
    CREATE INDEX changes_git_queue ON changes (vault, git, seq);
    CREATE INDEX changes_by_audit ON changes (audit_seq);
    CREATE TABLE change_paths (
        vault TEXT NOT NULL,
        path TEXT NOT NULL,
        change_seq INTEGER NOT NULL,
        PRIMARY KEY (vault, path, change_seq)
    ) WITHOUT ROWID;",
    // 12: the credentials' generation (docs/contract.md#paths): any change to the credentials table moves it, in
    // the change's own commit, whichever process or code path made it. A server keeps the rows it
    // read and reads only this per request; a new value makes it read the row again.
    "CREATE TABLE credential_generation (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        n INTEGER NOT NULL
    );
    INSERT INTO credential_generation (id, n) VALUES (1, 0);
    CREATE TRIGGER credentials_inserted AFTER INSERT ON credentials
    BEGIN UPDATE credential_generation SET n = n + 1 WHERE id = 1; END;
    CREATE TRIGGER credentials_updated AFTER UPDATE ON credentials
    BEGIN UPDATE credential_generation SET n = n + 1 WHERE id = 1; END;
    CREATE TRIGGER credentials_deleted AFTER DELETE ON credentials
    BEGIN UPDATE credential_generation SET n = n + 1 WHERE id = 1; END;",
    // 13: jobs (docs/contract.md#applying-a-proposal): a keyed write from the moment it waits for
    // the vault's writer until its key answers or it fails; at most one queued job per key.
    "CREATE TABLE jobs (
        id INTEGER PRIMARY KEY,
        vault TEXT NOT NULL,
        principal TEXT NOT NULL,
        idem_key TEXT NOT NULL,
        tool TEXT NOT NULL,
        args TEXT NOT NULL,            -- the call's arguments (JSON)
        transport TEXT NOT NULL,
        owner TEXT NOT NULL,           -- the waiting process (its lock file under jobs/)
        submitted_ms INTEGER NOT NULL,
        state TEXT NOT NULL,           -- queued | done | failed
        code TEXT,
        finished_ms INTEGER,
        attempts INTEGER NOT NULL DEFAULT 0  -- runs taken over from a stopped process
    );
    CREATE UNIQUE INDEX jobs_queued_key ON jobs (principal, idem_key) WHERE state = 'queued';",
];

/// The notes as a committed write left them: the vault's fingerprint, and each note it wrote with
/// the hash it left (`None`: removed). Recorded in the commit, so watchers (of any process) count
/// the write once, as vaultgate's.
#[derive(Debug, Clone, Copy)]
pub struct DiskAfter<'a> {
    pub fingerprint: Option<&'a str>,
    pub writes: &'a [(String, Option<String>)],
    /// The change's row for `get_note_history` and the git queue (docs/contract.md#git-history).
    pub change: Option<&'a crate::changes::NewChange<'a>>,
    /// The audit head after the change's own record: raised in the same commit, so the record
    /// and the state that knows of it need no second sync.
    pub head: Option<&'a crate::AuditHead>,
}

/// Records `d` inside the caller's transaction.
pub(crate) fn record_disk(tx: &Connection, vault: &str, d: &DiskAfter<'_>) -> rusqlite::Result<()> {
    if let Some(fingerprint) = d.fingerprint {
        tx.prepare_cached(
            "INSERT INTO vault_fingerprints (vault, fingerprint) VALUES (?1, ?2)
             ON CONFLICT(vault) DO UPDATE SET fingerprint = excluded.fingerprint",
        )?
        .execute([vault, fingerprint])?;
    }
    let mut put = tx.prepare_cached(
        "INSERT INTO vault_writes (vault, path, hash) VALUES (?1, ?2, ?3)
         ON CONFLICT (vault, path) DO UPDATE SET hash = excluded.hash",
    )?;
    for (path, hash) in d.writes {
        put.execute(rusqlite::params![vault, path, hash])?;
    }
    if let Some(c) = d.change {
        crate::changes::insert_change(tx, vault, c)?;
    }
    if let Some(head) = d.head {
        crate::recorded::raise_head(tx, head)?;
    }
    Ok(())
}

/// The extended result code of a constraint violation, if `e` is one.
pub(crate) fn constraint_violation(e: &rusqlite::Error) -> Option<std::ffi::c_int> {
    match e {
        rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::ConstraintViolation => {
            Some(f.extended_code)
        }
        _ => None,
    }
}

/// Reads a JSON text column; a row that does not parse is a conversion error, never a default.
pub(crate) fn json_column(row: &Row<'_>, idx: usize) -> rusqlite::Result<Value> {
    let text: String = row.get(idx)?;
    serde_json::from_str(&text)
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(idx, rusqlite::types::Type::Text, Box::new(e)))
}

/// As [`json_column`], for a nullable column.
pub(crate) fn opt_json_column(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<Value>> {
    match row.get_ref(idx)? {
        rusqlite::types::ValueRef::Null => Ok(None),
        _ => json_column(row, idx).map(Some),
    }
}

/// SQLite integers are signed; counts and revisions are never negative.
pub(crate) fn non_negative(v: i64) -> u64 {
    v.max(0) as u64
}

/// The gateway's state database, shared by every request of one process.
pub struct State {
    conn: Mutex<Connection>,
    /// `state.sqlite-wal`: what [`State::sync_log`] fsyncs (`None`: not in WAL mode, commits
    /// are never deferred).
    wal: Option<std::path::PathBuf>,
    /// The connection's `synchronous` level now (1 NORMAL, 2 FULL); changed only under `conn`.
    level: std::sync::atomic::AtomicU8,
}

thread_local! {
    /// Set by [`State::deferring_sync`]: this thread's commits leave the log's fsync to the caller.
    static DEFER_SYNC: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl State {
    /// Opens (creating if needed) and migrates `state.sqlite`.
    pub fn open(path: &Path) -> Result<State, StateError> {
        let conn = Connection::open(path)?;
        // WAL lets the server read while a CLI process writes; busy_timeout waits for its lock.
        let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        // The log is where SQLite keeps it: beside the database file it resolved (links
        // followed). Without a log (a file system that refuses WAL) nothing is deferred.
        let wal = match (mode.eq_ignore_ascii_case("wal"), conn.path()) {
            (true, Some(db)) if !db.is_empty() => Some(std::path::PathBuf::from(format!("{db}-wal"))),
            _ => None,
        };
        let state = State {
            conn: Mutex::new(conn),
            wal,
            level: std::sync::atomic::AtomicU8::new(2),
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
        use std::sync::atomic::Ordering;
        let conn = self.conn.lock().map_err(|_| StateError::Poisoned)?;
        let want = if self.wal.is_some() && DEFER_SYNC.with(std::cell::Cell::get) {
            1
        } else {
            2
        };
        if self.level.load(Ordering::Relaxed) != want {
            conn.pragma_update(None, "synchronous", want)?;
            self.level.store(want, Ordering::Relaxed);
        }
        Ok(conn)
    }

    /// Runs `f` with this thread's commits written to the log but not fsynced (`synchronous =
    /// NORMAL`): a group commit makes many writers' commits durable with one [`State::sync_log`].
    /// A commit made here is not durable until that sync returns; nothing may depend on it
    /// before.
    pub fn deferring_sync<T>(&self, f: impl FnOnce() -> T) -> T {
        /// Puts the thread's setting back even if `f` panics (the thread is pooled).
        struct Restore(bool);
        impl Drop for Restore {
            fn drop(&mut self) {
                DEFER_SYNC.with(|d| d.set(self.0));
            }
        }
        let _restore = Restore(DEFER_SYNC.with(|d| d.replace(true)));
        f()
    }

    /// fsyncs the write-ahead log: every commit written before this call is durable after it
    /// (SQLite appends commits to the log in order, and syncs it before any checkpoint copies it
    /// back).
    pub fn sync_log(&self) -> Result<(), StateError> {
        match &self.wal {
            // While this connection is open SQLite keeps the log file: a missing one is an error.
            Some(wal) => Ok(std::fs::File::open(wal)?.sync_all()?),
            // Not in WAL mode: every commit was made with `synchronous = FULL`.
            None => Ok(()),
        }
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

    /// What the last committed vaultgate write left at `path` (`Some(None)`: it removed the note;
    /// `None`: no vaultgate write is recorded there).
    pub fn vault_write(&self, vault: &str, path: &str) -> Result<Option<Option<String>>, StateError> {
        let conn = self.conn()?;
        Ok(conn
            .prepare_cached("SELECT hash FROM vault_writes WHERE vault = ?1 AND path = ?2")?
            .query_row([vault, path], |r| r.get(0))
            .optional()?)
    }

    /// Records the fingerprint of a change vaultgate made itself (its revision already moved).
    /// The fingerprint recorded for the vault's notes, if any.
    pub fn fingerprint(&self, vault: &str) -> Result<Option<String>, StateError> {
        let conn = self.conn()?;
        Ok(conn
            .query_row(
                "SELECT fingerprint FROM vault_fingerprints WHERE vault = ?1",
                [vault],
                |r| r.get(0),
            )
            .optional()?)
    }

    pub fn set_fingerprint(&self, vault: &str, fingerprint: &str) -> Result<(), StateError> {
        let conn = self.conn()?;
        conn.execute(
            "INSERT INTO vault_fingerprints (vault, fingerprint) VALUES (?1, ?2)
             ON CONFLICT(vault) DO UPDATE SET fingerprint = excluded.fingerprint",
            [vault, fingerprint],
        )?;
        Ok(())
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

    /// The log a group commit syncs is the one SQLite writes, wherever the database file's
    /// name leads: a home reached through a link syncs the real log, not a missing one.
    #[cfg(unix)]
    #[test]
    fn the_log_synced_is_the_one_sqlite_writes_even_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::os::unix::fs::symlink(
            dir.path().join("real/actual.sqlite"),
            dir.path().join("state.sqlite"),
        )
        .unwrap();
        let s = State::open(&dir.path().join("state.sqlite")).unwrap();
        s.deferring_sync(|| s.bump_revision("demo")).unwrap();
        let wal = s.wal.clone().unwrap();
        assert!(wal.exists(), "{}", wal.display());
        assert!(
            !dir.path().join("state.sqlite-wal").exists(),
            "SQLite keeps its log by the real file"
        );
        assert!(
            std::fs::canonicalize(&wal)
                .unwrap()
                .starts_with(std::fs::canonicalize(dir.path().join("real")).unwrap())
        );
        s.sync_log().unwrap();
        // Deferred commits switch back: the next commit on this thread is FULL again.
        s.bump_revision("demo").unwrap();
        assert_eq!(s.level.load(std::sync::atomic::Ordering::Relaxed), 2);
    }

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
    fn a_version_2_database_upgrades_and_keeps_its_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.sqlite");
        {
            // The state.sqlite an earlier release left: migrations 1 and 2, with data.
            let c = Connection::open(&path).unwrap();
            for sql in &MIGRATIONS[..2] {
                c.execute_batch(sql).unwrap();
            }
            c.pragma_update(None, "user_version", 2).unwrap();
            c.execute(
                "INSERT INTO credentials (id, name, tier, vaults, jti, created_at)
                 VALUES ('cred_1', 'claude', 'auto', '[\"v\"]', 'j', 100)",
                [],
            )
            .unwrap();
            c.execute("INSERT INTO vault_revisions VALUES ('v', 7)", [])
                .unwrap();
            c.execute("INSERT INTO vault_fingerprints VALUES ('v', 'f')", [])
                .unwrap();
        }
        let s = State::open(&path).unwrap();
        assert_eq!(s.schema_version().unwrap(), MIGRATIONS.len() as i64);
        let c = s.find_credential("claude").unwrap();
        assert_eq!(
            (c.id.as_str(), c.vaults.as_slice()),
            ("cred_1", ["v".to_owned()].as_slice())
        );
        assert_eq!(s.revision("v").unwrap(), 7);
        assert_eq!(s.note_disk_state("v", "f").unwrap(), (7, false));
        // The new tables are there and empty.
        assert_eq!(s.count_pending("v").unwrap(), 0);
        assert!(s.open_intents("v").unwrap().is_empty());
        assert_eq!(s.idempotency_get("cred_1", "k").unwrap(), None);
        assert_eq!(s.history_tops("v").unwrap(), crate::HistoryTops::default());
        drop(s);
        // Opening again runs nothing twice.
        let s = State::open(&path).unwrap();
        assert_eq!(s.schema_version().unwrap(), MIGRATIONS.len() as i64);
        assert_eq!(s.revision("v").unwrap(), 7);
    }

    #[test]
    fn the_schema_refuses_impossible_rows() {
        let dir = tempfile::tempdir().unwrap();
        let s = State::open(&dir.path().join("state.sqlite")).unwrap();
        let conn = s.conn().unwrap();
        let insert = |status: &str, decided_at: Option<&str>| {
            conn.execute(
                "INSERT INTO proposals (id, vault, slug, kind, target, created_by, created_at, status,
                                        meta_json, decided_at)
                 VALUES (?1, 'v', ?1, 'new', 't', 'c', 't', ?2, '{}', ?3)",
                rusqlite::params![format!("{status}{decided_at:?}"), status, decided_at],
            )
        };
        assert!(insert("pending", None).is_ok());
        assert!(insert("applied", Some("t")).is_ok());
        assert!(insert("done", Some("t")).is_err(), "unknown status");
        assert!(insert("pending", Some("t")).is_err(), "pending yet decided");
        assert!(insert("rejected", None).is_err(), "decided without a time");
        let bad_state = conn.execute(
            "INSERT INTO history (id, vault, seq, label, kind, created_by, created_at, paths_json, state)
             VALUES ('h', 'v', 1, 'l', 'k', 'c', 't', '[]', 'gone')",
            [],
        );
        assert!(bad_state.is_err());
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
