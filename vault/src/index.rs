//! The search index of one vault (docs/contract.md#search-and-the-index): `<vault>/.vaultgate/index.sqlite`, a cache of every
//! catalog note's path, size, time, class, metadata, tags, links and body, with two FTS5 tables of
//! n-gram tokens (`grams`) that narrow `search_note_content` and `search_knowledge` to candidates.
//! The answer is still computed exactly, by the same functions the per-call scan uses, on the
//! note's current text.
//!
//! Freshness: a pass compares every catalog file's size and time with the index and re-reads only
//! what changed (at start, after each watcher batch, after each vaultgate write); a search checks
//! every note it returns against the file's size and time and, for one that moved, reads the file
//! itself, answers from that, and asks for the note to be re-indexed. While the index is being
//! built (a first build, a rebuild, a large catch-up: `building` in the file, seen by every
//! process) and whenever it failed, reads fall back to the scan: no read waits for a build. A
//! file that is not a usable index is replaced and rebuilt. The files stay the truth: everything
//! read from the vault goes through `VaultFs`.
//!
//! It never writes anything but `.vaultgate/index.sqlite` (and its `-wal`, `-shm`, `index.lock`).

mod db;
pub(crate) mod grams;
mod pool;
pub(crate) mod query;
mod record;

use std::collections::BTreeSet;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, Weak};
use std::time::{Duration, Instant, SystemTime};

use policy::{FolderPath, NoteClass, VaultPath};
use rusqlite::ErrorCode as SqliteCode;

use crate::fs::{DirEntry, EntryKind, FsError, MAX_DEPTH, MAX_READ_BYTES, VaultFs};
use crate::note::Note;
use crate::types::{
    ContentHits, Counts, KnowledgeHits, ListStandards, ListTags, RecentNotes, RecentPos, Related, SearchPage,
    SearchPos,
};
use db::{Db, Op, Snapshot};
use grams::TokenBuf;
use record::{NoteRecord, from_nanos, nanos};

pub use db::FILE as INDEX_FILE;

/// A time the index stores (ns since the Unix epoch).
pub(crate) fn time_of(n: i64) -> SystemTime {
    from_nanos(n)
}

/// Why the index could not answer or be updated. Never fatal: reads fall back to the scan.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("index database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("index file: {0}")]
    Io(#[from] std::io::Error),
    #[error("the index file is not a usable index: {0}")]
    Unusable(String),
}

impl IndexError {
    /// The file itself is broken: only replacing it helps.
    pub(crate) fn is_unusable(&self) -> bool {
        match self {
            IndexError::Unusable(_) => true,
            IndexError::Sqlite(e) => matches!(
                e.sqlite_error_code(),
                Some(SqliteCode::DatabaseCorrupt | SqliteCode::NotADatabase)
            ),
            IndexError::Io(_) => false,
        }
    }
}

/// Checks an index file for `vaultgate doctor` without changing it: opened read-only (never
/// through a symlink), then SQLite's `quick_check`. `Ok(false)`: there is no index file yet.
pub fn check_file(path: &std::path::Path) -> Result<bool, IndexError> {
    use rusqlite::OpenFlags;
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e.into()),
        Ok(m) if !m.is_file() => return Err(IndexError::Unusable("not a regular file".into())),
        Ok(_) => {}
    }
    let flags =
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_NOFOLLOW;
    let conn = rusqlite::Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    let verdict: String = conn.query_row("PRAGMA quick_check(1)", [], |r| r.get(0))?;
    if verdict != "ok" {
        return Err(IndexError::Unusable(verdict));
    }
    Ok(true)
}

/// The index's state for `get_vault_overview`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexHealth {
    /// When the index last matched the files (`None`: never).
    pub indexed_at: Option<SystemTime>,
    /// Reads are answered from the index and no catalog file differs from it.
    pub fresh: bool,
    /// Catalog files whose size or time differ from the index, or that it lacks or still lists.
    pub stale_files: usize,
}

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Notes in the index afterwards.
    pub notes: usize,
    pub added: usize,
    pub updated: usize,
    pub removed: usize,
    pub unchanged: usize,
    pub elapsed: Duration,
}

/// Notes written per index transaction at most (one full-text segment each)…
const BATCH: usize = 2048;
/// …and at most this long a transaction holds the write lock, so other writers wait little.
const BATCH_TIME: Duration = Duration::from_millis(300);
/// A pass with more changes than this (and a tenth of the notes) marks the index as being built,
/// so reads scan rather than answer from an index that lacks much of what is on disk.
const BIG_PASS: usize = 2000;
/// Longest wait for the indexer after a write of ours or a watcher batch.
pub const SETTLE_WAIT: Duration = Duration::from_secs(5);
/// Longest pause between retries of a failed pass.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Work for the indexer; requests arriving while it works are merged into one.
#[derive(Debug, Default)]
struct Pending {
    /// Compare every catalog file (with `walk` when the caller had one).
    full: bool,
    walk: Option<Vec<DirEntry>>,
    paths: BTreeSet<VaultPath>,
    /// The file open here was replaced or deleted: open the one at the path.
    reopen: bool,
    /// The file is broken: replace it with an empty one first.
    replace: bool,
}

impl Pending {
    fn any(&self) -> bool {
        self.full || self.walk.is_some() || !self.paths.is_empty() || self.reopen || self.replace
    }
}

#[derive(Debug, Default)]
struct QueueState {
    pending: Pending,
    /// Tickets handed out, and the last one whose request was handled.
    requested: u64,
    done: u64,
    /// The last ticket whose handling failed (0: none).
    failed: u64,
    /// Reads may try the index: it is open and nothing failed since (they still scan while it is
    /// being built: see `Snapshot::building`).
    ready: bool,
    shutdown: bool,
}

#[derive(Debug, Default)]
struct Queue {
    state: Mutex<QueueState>,
    cond: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Queue {
    fn submit(&self, f: impl FnOnce(&mut Pending)) -> u64 {
        let mut st = lock(&self.state);
        f(&mut st.pending);
        st.requested += 1;
        self.cond.notify_all();
        st.requested
    }

    /// Waits until `ticket` was handled; false on timeout.
    fn wait(&self, ticket: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut st = lock(&self.state);
        while st.done < ticket {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            st = self
                .cond
                .wait_timeout(st, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        true
    }
}

/// Paths asked to be indexed ([`Index::submit_paths`]), to wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexTicket {
    /// Already handled (or nothing to wait for): whether the index holds them.
    Done(bool),
    /// The background thread's ticket.
    Queued(u64),
}

/// The index of one vault, kept by a background thread (`start`) or by its caller (`manual`).
pub struct Index {
    fs: Arc<VaultFs>,
    db: RwLock<Option<Arc<Db>>>,
    queue: Arc<Queue>,
    background: bool,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("root", &self.fs.root())
            .field("background", &self.background)
            .finish_non_exhaustive()
    }
}

impl Drop for Index {
    fn drop(&mut self) {
        lock(&self.queue.state).shutdown = true;
        self.queue.cond.notify_all();
    }
}

/// Every catalog file: readable `*.md` under the notes and standards folders, the inbox left
/// out, sorted by path. The one definition of which notes exist (scan and index alike).
pub(crate) fn catalog_walk(fs: &VaultFs) -> Vec<DirEntry> {
    let layout = fs.layout();
    let folders: Vec<FolderPath> = layout.notes.iter().chain(&layout.standards).cloned().collect();
    fs.walk_markdown(&folders)
        .into_iter()
        .filter(|e| layout.classify(&e.path) != NoteClass::Inbox && layout.check_read(&e.path).is_ok())
        .collect()
}

/// Whether a single file (not found by a walk) belongs to the catalog, as `catalog_walk` decides.
fn in_catalog(fs: &VaultFs, e: &DirEntry) -> bool {
    let layout = fs.layout();
    e.kind == EntryKind::File
        && e.path.is_markdown()
        && e.size <= MAX_READ_BYTES
        && e.path.segments().count() <= MAX_DEPTH + 1
        && layout.classify(&e.path) != NoteClass::Inbox
        && layout.check_read(&e.path).is_ok()
        && layout
            .notes
            .iter()
            .chain(&layout.standards)
            .any(|f| f.contains(&e.path))
}

/// One note to (re-)read.
struct Job {
    entry: DirEntry,
    class: NoteClass,
}

fn read_job(fs: &VaultFs, job: Job, buf: &mut TokenBuf) -> Op {
    let Job { entry, class } = job;
    match fs.read_text(&entry.path) {
        Ok(file) => Op::Put(Box::new(NoteRecord::from_file(entry.path, class, file, buf))),
        // Gone since the walk.
        Err(FsError::NotFound) => Op::Remove(entry.path),
        Err(e) => {
            tracing::debug!(path = %entry.path, error = %e, "indexed as unreadable");
            Op::Put(Box::new(NoteRecord::unreadable(
                entry.path,
                class,
                entry.size,
                entry.modified,
            )))
        }
    }
}

impl Index {
    /// An index kept fresh by a background thread. Returns at once: opening (or repairing) the
    /// file and the first pass happen on that thread. Reads scan until the file is open, then
    /// answer from it if an earlier build completed (every hit still checked against its file),
    /// else keep scanning until the first pass has built it.
    pub(crate) fn start(fs: Arc<VaultFs>) -> Arc<Index> {
        let ix = Arc::new(Index {
            fs,
            db: RwLock::new(None),
            queue: Arc::new(Queue::default()),
            background: true,
        });
        ix.queue.submit(|p| p.full = true);
        let weak = Arc::downgrade(&ix);
        let queue = ix.queue.clone();
        let spawned = std::thread::Builder::new()
            .name("vault-index".into())
            .spawn(move || worker(&weak, &queue));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the index thread; reads keep scanning");
        }
        ix
    }

    /// An index its caller keeps fresh (`refresh`): the CLI and tests.
    pub(crate) fn manual(fs: Arc<VaultFs>) -> Arc<Index> {
        Arc::new(Index {
            fs,
            db: RwLock::new(None),
            queue: Arc::new(Queue::default()),
            background: false,
        })
    }

    fn current_db(&self) -> Option<Arc<Db>> {
        self.db
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The open database, opening (or repairing) it on first use.
    fn db(&self) -> Result<Arc<Db>, IndexError> {
        if let Some(db) = self.current_db() {
            return Ok(db);
        }
        self.reopen(false)
    }

    /// Opens the file at the index path afresh (`replace`: after removing a broken one), leaving
    /// the connections to the old file unclosed (see `Db::abandon`).
    fn reopen(&self, replace: bool) -> Result<Arc<Db>, IndexError> {
        let mut slot = self.db.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(old) = slot.take() {
            if replace {
                old.replace()?;
            } else {
                old.abandon();
            }
        }
        let db = Arc::new(Db::open(self.fs.root(), self.fs.root_dir())?);
        *slot = Some(db.clone());
        Ok(db)
    }

    /// The database for a read, if reads may use the index now; else the caller scans.
    fn live(&self) -> Option<Arc<Db>> {
        if !lock(&self.queue.state).ready {
            return None;
        }
        let db = self.current_db()?;
        if !db.is_current() {
            // Deleted or replaced under us (by a person or another process).
            tracing::warn!(root = %self.fs.root().display(), "index file replaced or deleted; reopening");
            self.not_ready(|p| {
                p.reopen = true;
                p.full = true;
            });
            return None;
        }
        Some(db)
    }

    /// Marks the index unusable for reads until a pass succeeds, and asks for that pass.
    fn not_ready(&self, f: impl FnOnce(&mut Pending)) {
        lock(&self.queue.state).ready = false;
        self.queue.submit(f);
    }

    /// A read from the index failed: log it, scan instead, and repair in the background.
    fn failed(&self, e: &IndexError) {
        tracing::warn!(root = %self.fs.root().display(), error = %e, "index read failed; scanning instead");
        let replace = e.is_unusable();
        self.not_ready(|p| {
            p.full = true;
            p.replace |= replace;
        });
    }

    /// Runs a read against a snapshot; `None` when the caller must scan instead (the index is
    /// being built, or failed).
    fn read<T>(&self, f: impl FnOnce(&Snapshot<'_>) -> Result<T, IndexError>) -> Option<T> {
        let db = self.live()?;
        let result = db.snapshot().and_then(|snap| {
            if snap.building {
                return Ok(None);
            }
            f(&snap).map(Some)
        });
        match result {
            Ok(v) => v,
            Err(e) => {
                self.failed(&e);
                None
            }
        }
    }

    /// As `read`, with the snapshot taken and `f` run on a search thread (see `pool`).
    fn read_on_pool<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Snapshot<'_>) -> Result<T, IndexError> + Send + 'static,
    ) -> Option<T> {
        let db = self.live()?;
        let result = pool::run(move || {
            let snap = db.snapshot()?;
            if snap.building {
                return Ok(None);
            }
            f(&snap).map(Some)
        });
        match result {
            Ok(v) => v,
            Err(e) => {
                self.failed(&e);
                None
            }
        }
    }

    /// Handles merged requests: the worker's unit of work, and `refresh`'s.
    fn run(
        &self,
        p: Pending,
        force: bool,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<SyncReport, IndexError> {
        let (mut reopen, mut replace) = (p.reopen, p.replace);
        if let Some(db) = self.current_db() {
            if !db.is_current() {
                reopen = true;
            } else if !db.header_ok() {
                tracing::warn!(root = %self.fs.root().display(), "index file overwritten; rebuilding it");
                replace = true;
            }
        }
        if replace || reopen {
            self.reopen(replace)?;
        }
        // Open: reads may try it (a complete index answers while this pass runs; one being built
        // makes them scan).
        self.db()?;
        lock(&self.queue.state).ready = true;
        let mut report = SyncReport::default();
        if p.full || p.walk.is_some() || force {
            // One full pass at a time across processes: a server that starts while another
            // builds waits, then walks and finds the notes indexed (only the walk is repeated).
            let db = self.db()?;
            let mut build = if p.full || force {
                Some(db.build_lock()?)
            } else {
                None
            };
            let _building = match build.as_mut() {
                Some(l) => {
                    if l.try_write().is_err() {
                        // A `vaultgate index` waiting here would otherwise sit silent.
                        tracing::warn!(root = %self.fs.root().display(), "another process is building this vault's index; waiting for it");
                    }
                    Some(l.write()?)
                }
                None => None,
            };
            let walk = match p.walk {
                Some(w) if !p.full => w,
                _ => catalog_walk(&self.fs),
            };
            report = self.sync(&walk, force, progress)?;
        }
        if !p.paths.is_empty() {
            let paths: Vec<VaultPath> = p.paths.into_iter().collect();
            self.update(&paths)?;
        }
        Ok(report)
    }

    /// Brings the index to `walk`: notes whose size, time or class differ (all of them when
    /// `force`) are read again, notes not in `walk` are removed.
    fn sync(
        &self,
        walk: &[DirEntry],
        force: bool,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<SyncReport, IndexError> {
        let started = Instant::now();
        let walked_at = SystemTime::now();
        let db = self.db()?;
        let (catalog, mut epoch) = {
            let snap = db.snapshot()?;
            (snap.catalog.clone(), snap.epoch)
        };
        let layout = self.fs.layout();
        let mut report = SyncReport::default();
        let mut removes = Vec::new();
        let mut jobs = Vec::new();
        let (mut i, mut j) = (0, 0);
        let have = &catalog.entries;
        while i < walk.len() || j < have.len() {
            let order = match (walk.get(i), have.get(j)) {
                (Some(w), Some(h)) => w.path.cmp(&h.path),
                (Some(_), None) => std::cmp::Ordering::Less,
                _ => std::cmp::Ordering::Greater,
            };
            match order {
                std::cmp::Ordering::Less => {
                    let w = &walk[i];
                    report.added += 1;
                    jobs.push(Job {
                        entry: w.clone(),
                        class: layout.classify(&w.path),
                    });
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    report.removed += 1;
                    removes.push(Op::Remove(have[j].path.clone()));
                    j += 1;
                }
                std::cmp::Ordering::Equal => {
                    let (w, h) = (&walk[i], &have[j]);
                    let class = layout.classify(&w.path);
                    if force || w.size != h.size || nanos(w.modified) != h.mtime || class != h.class {
                        report.updated += 1;
                        jobs.push(Job {
                            entry: w.clone(),
                            class,
                        });
                    } else {
                        report.unchanged += 1;
                    }
                    i += 1;
                    j += 1;
                }
            }
        }
        let big = force || removes.len() + jobs.len() > BIG_PASS.max(have.len() / 10);
        if force {
            // Rebuilt from empty (readers scan meanwhile): far cheaper than replacing every row.
            epoch = db.clear()?;
            removes.clear();
        } else if big {
            db.start_building()?;
        }
        if !removes.is_empty() {
            db.write(&removes)?;
        }
        if big {
            db.bulk(true)?;
        }
        let done = self
            .index_jobs(&db, jobs, false, progress)
            .and_then(|()| db.finish_pass(walked_at, epoch))
            .and_then(|()| if big { db.optimize() } else { Ok(()) });
        if big && let Err(e) = db.bulk(false) {
            tracing::debug!(error = %e, "resizing the index cache failed");
        }
        done?;
        report.notes = report.added + report.updated + report.unchanged;
        report.elapsed = started.elapsed();
        Ok(report)
    }

    /// Reads and parses on one thread while this one writes, in batches.
    /// `recheck`: each note is written only if its file still has the size and time it was read
    /// with ([`Db::write_current`]); for updates of named paths, which run while other writers
    /// (this process's next apply, other processes) may change the same files.
    fn index_jobs(
        &self,
        db: &Db,
        jobs: Vec<Job>,
        recheck: bool,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<(), IndexError> {
        let total = jobs.len();
        progress(0, total);
        if total == 0 {
            return Ok(());
        }
        let fs = &*self.fs;
        let current = |rec: &NoteRecord| {
            !recheck
                || fs
                    .metadata(&rec.path)
                    .is_ok_and(|m| m.size == rec.size && record::nanos(m.modified) == rec.mtime)
        };
        std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Op>(BATCH);
            s.spawn(move || {
                let mut buf = TokenBuf::default();
                for job in jobs {
                    // The writer stopped (an error): stop reading.
                    if tx.send(read_job(fs, job, &mut buf)).is_err() {
                        break;
                    }
                }
            });
            let mut batch = Vec::with_capacity(BATCH.min(total));
            let mut done = 0;
            let mut started = Instant::now();
            for op in rx {
                batch.push(op);
                if batch.len() >= BATCH || started.elapsed() >= BATCH_TIME {
                    db.write_current(&batch, &current)?;
                    done += batch.len();
                    batch.clear();
                    progress(done, total);
                    started = Instant::now();
                }
            }
            if !batch.is_empty() {
                db.write_current(&batch, &current)?;
                done += batch.len();
                progress(done, total);
            }
            Ok(())
        })
    }

    /// Re-checks single paths (from reads that met a changed file, or callers that know what
    /// changed); a folder, or a path under which notes are indexed, takes a full pass.
    fn update(&self, paths: &[VaultPath]) -> Result<(), IndexError> {
        let db = self.db()?;
        let catalog = db.snapshot()?.catalog.clone();
        let mut ops = Vec::new();
        let mut jobs = Vec::new();
        for p in paths {
            let meta = self.fs.metadata(p).ok();
            let under = format!("{}/", p.as_str());
            let was_folder = {
                let at = catalog.partition_point(|e| e.path.as_str() < under.as_str());
                catalog
                    .entries
                    .get(at)
                    .is_some_and(|e| e.path.as_str().starts_with(&under))
            };
            if was_folder || meta.as_ref().is_some_and(|m| m.kind == EntryKind::Folder) {
                self.sync(&catalog_walk(&self.fs), false, &mut |_, _| {})?;
                return Ok(());
            }
            let have = catalog.find(p);
            match meta.filter(|m| in_catalog(&self.fs, m)) {
                // A path named here is read again even when its size and mtime are what the
                // index holds: a watcher saw it change, and an edit can keep both (the same
                // length saved within the file system's mtime granularity, or mtime restored).
                Some(m) => {
                    let class = self.fs.layout().classify(p);
                    jobs.push(Job { entry: m, class });
                }
                None if have.is_some() => ops.push(Op::Remove(p.clone())),
                None => {}
            }
        }
        if !ops.is_empty() {
            db.write(&ops)?;
        }
        self.index_jobs(&db, jobs, true, &mut |_, _| {})
    }

    // ---- the API `Vault` uses ---------------------------------------------------------------

    /// A full pass now, in the calling thread (`force`: re-read every note and compact).
    pub(crate) fn refresh(
        &self,
        force: bool,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<SyncReport, IndexError> {
        let (pending, ticket) = {
            let mut st = lock(&self.queue.state);
            let mut p = std::mem::take(&mut st.pending);
            p.full = true;
            (p, st.requested)
        };
        let result = self.run(pending, force, progress);
        self.finish(ticket, &result);
        result
    }

    /// Records the outcome of handling requests up to `ticket`.
    fn finish<T>(&self, ticket: u64, result: &Result<T, IndexError>) {
        let mut st = lock(&self.queue.state);
        st.done = st.done.max(ticket);
        match result {
            Ok(_) => {
                if !st.pending.any() {
                    st.ready = true;
                }
            }
            Err(e) => {
                tracing::warn!(root = %self.fs.root().display(), error = %e, "index update failed");
                st.failed = st.failed.max(ticket);
                st.ready = false;
                st.pending.full = true;
                if e.is_unusable() {
                    st.pending.replace = true;
                }
            }
        }
        self.queue.cond.notify_all();
    }

    /// Brings the index to `walk` (taken by the caller just now); waits up to `wait` when reads
    /// already use the index, so what the caller changed is searchable when this returns.
    pub(crate) fn sync_with(&self, walk: Vec<DirEntry>, wait: Duration) {
        if !self.background {
            let (pending, ticket) = {
                let mut st = lock(&self.queue.state);
                let mut p = std::mem::take(&mut st.pending);
                p.walk = Some(walk);
                (p, st.requested)
            };
            let result = self.run(pending, false, &mut |_, _| {});
            self.finish(ticket, &result);
            return;
        }
        let ticket = self.queue.submit(|p| p.walk = Some(walk));
        // Only worth waiting for when reads use the index (not during a build, when they scan).
        if self.answering() && !self.queue.wait(ticket, wait) {
            tracing::debug!(root = %self.fs.root().display(), "index still updating");
        }
    }

    /// Re-checks `paths` (waiting up to `wait` in the background mode).
    pub(crate) fn update_paths(&self, paths: &[VaultPath], wait: Duration) {
        if paths.is_empty() {
            return;
        }
        if !self.background {
            let result = self.update(paths);
            let ticket = lock(&self.queue.state).requested;
            self.finish(ticket, &result);
            return;
        }
        let ticket = self.queue.submit(|p| p.paths.extend(paths.iter().cloned()));
        if self.answering() {
            self.queue.wait(ticket, wait);
        }
    }

    /// Asks for the paths now (the caller may still hold the vault's writer); [`Index::settled`]
    /// waits for them later (without it) and says whether the index holds their current state
    /// (false: the update failed or is still running; the next sync repairs it).
    pub(crate) fn submit_paths(&self, paths: &[VaultPath]) -> IndexTicket {
        if paths.is_empty() {
            return IndexTicket::Done(true);
        }
        if !self.background {
            let result = self.update(paths);
            let ticket = lock(&self.queue.state).requested;
            self.finish(ticket, &result);
            return IndexTicket::Done(result.is_ok());
        }
        let ticket = self.queue.submit(|p| p.paths.extend(paths.iter().cloned()));
        if !self.answering() {
            return IndexTicket::Done(true);
        }
        IndexTicket::Queued(ticket)
    }

    /// Whether the paths of `ticket` are indexed (false: failed, or not within `wait`).
    pub(crate) fn settled(&self, ticket: IndexTicket, wait: Duration) -> bool {
        match ticket {
            IndexTicket::Done(ok) => ok,
            IndexTicket::Queued(t) => self.queue.wait(t, wait) && lock(&self.queue.state).failed < t,
        }
    }

    /// Asks, without waiting, for paths a read found changed to be indexed again.
    fn hint_stale(&self, paths: Vec<VaultPath>) {
        if self.background && !paths.is_empty() {
            self.queue.submit(|p| p.paths.extend(paths));
        }
    }

    /// Whether reads are answered from the index right now.
    fn answering(&self) -> bool {
        self.live()
            .and_then(|db| db.building().ok().map(|building| !building))
            .unwrap_or(false)
    }

    /// For a move of `from` to `to` (docs/contract.md#proposals: its cost follows the link index, not the vault):
    /// the resolver of every catalog path, and the notes whose links may change meaning — those with a link keyed
    /// by either name (the index's promise: every link resolving to a note carries its name key),
    /// and `from` itself. `None` when the index is not answering or does not know `from`.
    pub(crate) fn move_sources(
        &self,
        from: &VaultPath,
        to: &VaultPath,
    ) -> Option<(crate::links::Resolver, Vec<VaultPath>)> {
        self.read(|snap| {
            let cat = &snap.catalog;
            if cat.find(from).is_none() {
                return Ok(None);
            }
            let resolver = cat.resolver().clone();
            let mut ids = snap.linking(&record::name_key(from))?;
            ids.extend(snap.linking(&record::name_key(to))?);
            let mut sources: Vec<VaultPath> = ids
                .into_iter()
                .filter_map(|id| cat.position(id))
                .map(|i| cat.entries[i].path.clone())
                .collect();
            sources.push(from.clone());
            sources.sort();
            sources.dedup();
            Ok(Some((resolver, sources)))
        })
        .flatten()
    }

    /// Waits until reads are answered from the index (or `timeout`).
    pub(crate) fn wait_ready(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.answering() {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let st = lock(&self.queue.state);
            // Woken when a pass ends; polls too, for passes of other processes.
            let _ = self
                .queue
                .cond
                .wait_timeout(st, left.min(Duration::from_millis(50)));
        }
    }

    /// Compares the files with the index now (one walk, no reads).
    pub(crate) fn health(&self) -> IndexHealth {
        let walk = catalog_walk(&self.fs);
        let ready = lock(&self.queue.state).ready;
        let db = self.current_db().filter(|db| db.is_current());
        let seen = db.and_then(|db| {
            let snap = db.snapshot().ok()?;
            let indexed_at = snap.indexed_at().ok()?.map(from_nanos);
            let stale = stale_count(&walk, &snap.catalog.entries, self.fs.layout());
            Some((indexed_at, stale, snap.building))
        });
        match seen {
            Some((indexed_at, stale, building)) => IndexHealth {
                indexed_at,
                fresh: ready && !building && stale == 0,
                stale_files: stale,
            },
            None => IndexHealth {
                indexed_at: None,
                fresh: false,
                stale_files: walk.len(),
            },
        }
    }

    // ---- reads (`None`: scan instead) ----------------------------------------------------------

    pub(crate) fn search_content(
        &self,
        args: query::ContentArgs,
    ) -> Option<(ContentHits, Option<SearchPos>)> {
        let fs = self.fs.clone();
        let (out, stale) = self
            .read_on_pool(move |snap| {
                let mut stale = Vec::new();
                let out = query::search_content(&fs, snap, &args, &mut stale)?;
                Ok((out, stale))
            })
            .unzip();
        self.hint_stale(stale.unwrap_or_default());
        out
    }

    pub(crate) fn search_knowledge(
        &self,
        terms: &[String],
        tags: &[String],
        limit: usize,
        page: &SearchPage,
    ) -> Option<(KnowledgeHits, Option<SearchPos>)> {
        let (terms, tags, page) = (terms.to_vec(), tags.to_vec(), page.clone());
        self.read_on_pool(move |snap| query::search_knowledge(snap, &terms, &tags, limit, &page))
    }

    pub(crate) fn list_tags(&self) -> Option<ListTags> {
        self.read(query::list_tags)
    }

    pub(crate) fn list_standards(&self) -> Option<ListStandards> {
        self.read(query::list_standards)
    }

    pub(crate) fn related(&self, path: &VaultPath, this: &Note) -> Option<Related> {
        self.read(|snap| query::related(snap, path, this))
    }

    pub(crate) fn recent(
        &self,
        limit: usize,
        since: Option<SystemTime>,
        after: Option<&RecentPos>,
    ) -> Option<(RecentNotes, Option<RecentPos>)> {
        self.read(|snap| query::recent(snap, limit, since, after))
    }

    pub(crate) fn query_notes(
        &self,
        q: &crate::data::Query,
        after: Option<&crate::data::QueryPos>,
        max_bytes: usize,
    ) -> Option<(crate::data::QueryNotes, Option<crate::data::QueryPos>)> {
        self.read(|snap| query::query_notes(snap, q, after, max_bytes))
    }

    pub(crate) fn counts(&self) -> Option<Counts> {
        self.read(query::counts)
    }

    pub(crate) fn note_count(&self) -> Option<usize> {
        self.read(|snap| Ok(snap.catalog.count(NoteClass::Note)))
    }
}

/// Catalog files that differ from the index, and indexed notes that are no longer files.
fn stale_count(walk: &[DirEntry], have: &imbl::Vector<db::Entry>, layout: &policy::Layout) -> usize {
    let (mut i, mut j, mut stale) = (0, 0, 0);
    while i < walk.len() || j < have.len() {
        match (walk.get(i), have.get(j)) {
            (Some(w), Some(h)) if w.path == h.path => {
                let class = layout.classify(&w.path);
                if w.size != h.size || nanos(w.modified) != h.mtime || class != h.class {
                    stale += 1;
                }
                i += 1;
                j += 1;
            }
            (Some(w), Some(h)) if w.path < h.path => {
                stale += 1;
                i += 1;
            }
            (Some(_), None) => {
                stale += 1;
                i += 1;
            }
            _ => {
                stale += 1;
                j += 1;
            }
        }
    }
    stale
}

/// The background thread: handles merged requests until the index is dropped.
fn worker(weak: &Weak<Index>, queue: &Queue) {
    let mut backoff = Duration::from_secs(1);
    loop {
        let (pending, ticket) = {
            let mut st = lock(&queue.state);
            loop {
                if st.shutdown || weak.strong_count() == 0 {
                    return;
                }
                if st.pending.any() {
                    break;
                }
                st = queue
                    .cond
                    .wait_timeout(st, Duration::from_secs(5))
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0;
            }
            (std::mem::take(&mut st.pending), st.requested)
        };
        let Some(ix) = weak.upgrade() else { return };
        let result = ix.run(pending, false, &mut |_, _| {});
        ix.finish(ticket, &result);
        drop(ix);
        if result.is_ok() {
            backoff = Duration::from_secs(1);
        } else {
            // Do not spin on a persistent failure (a read-only disk, a locked file).
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}
