//! `.vaultgate/index.sqlite`: the schema, its connections, catalog snapshots and writes.
//!
//! Several processes may open one index (stdio servers, the HTTP server, the CLI): the file is in
//! WAL mode (readers never wait for the writer) with a busy timeout, every write is one short
//! transaction, and a `generation` counter that every changing write moves tells each process
//! when its in-memory catalog is out of date. A file that is not a usable index is replaced
//! (under `.vaultgate/index.lock`, so one process does it); a schema of another version is
//! dropped and created again in one transaction.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, SystemTime};

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt};
use cap_std::fs::{Dir, OpenOptions};
use policy::{NoteClass, VaultPath};
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};

use crate::data::NoteData;
use crate::index::IndexError;
use crate::index::grams::TOKENIZER;
use crate::index::record::{NoteRecord, nanos};
use crate::links::{Link, LinkKind, Resolver};
use crate::search::fold;
use crate::write::MACHINE_DIR;

/// The index file, under `.vaultgate/`.
pub const FILE: &str = "index.sqlite";
/// Held while a broken index file is replaced.
const LOCK_FILE: &str = "index.lock";
/// Held for a whole pass over every note, so that servers starting at once on a vault build its
/// index once: the others wait, then find it up to date. Apart from `index.lock`, which a pass
/// may need to take (a file found broken) and which a process would otherwise wait for itself.
const BUILD_LOCK_FILE: &str = "index-build.lock";
/// Bumped on any change of the schema below: an index of another version is rebuilt.
/// 2: `fields` (each note's tags and frontmatter, for `query_notes`).
/// 3: level tokens in `body_grams`, and `head_grams` (title, aliases, headings) for the ranking.
const SCHEMA_VERSION: i64 = 3;
/// How long a statement waits for another connection's lock before failing with `SQLITE_BUSY`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// FTS5 keeps this many bytes of new tokens in memory before writing a segment: a batch of notes
/// becomes one segment, not several to merge later.
const HASH_SIZE: i64 = 8 * 1024 * 1024;
/// Segments per level before FTS5 merges them: fewer merges while building, a few more segments
/// to look in per query (compacted by `optimize` after large passes).
const AUTOMERGE: i64 = 16;
/// The writer's page cache during a large pass, in KiB (negative: SQLite's unit for "KiB"):
/// full-text merges re-read recent pages, and a bigger cache saves most of those reads.
const BULK_CACHE_KIB: i64 = -32 * 1024;
/// SQLite's default, for the small updates of a serving process.
const DEFAULT_CACHE_KIB: i64 = -2000;
/// Each reader's page cache, in KiB: the exact step reads candidates' bodies, and the OS keeps
/// the file's pages anyway, so a few MiB per connection do (there is one per concurrent read).
const READER_CACHE_KIB: i64 = -2 * 1024;
/// Readers kept open for reuse (the most recently used is taken first): as many as concurrent
/// reads commonly are, so that a busy server does not open, warm and drop connections (their
/// caches, freed on other threads, leave the allocator holding memory it rarely gives back).
const MAX_IDLE_READERS: usize = 8;

const TABLES: &[&str] = &[
    "meta",
    "notes",
    "bodies",
    "tags",
    "links",
    "fields",
    "body_grams",
    "meta_grams",
    "head_grams",
    "body_vocab",
];

fn schema_sql() -> String {
    format!(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
         INSERT INTO meta (key, value) VALUES ('generation', 0), ('building', 1), ('epoch', 0);
         CREATE TABLE notes (
             id INTEGER PRIMARY KEY,
             path TEXT NOT NULL UNIQUE,
             class INTEGER NOT NULL,
             size INTEGER NOT NULL,
             mtime INTEGER NOT NULL,
             readable INTEGER NOT NULL,
             title TEXT NOT NULL,
             aliases TEXT NOT NULL,
             description TEXT
         );
         CREATE TABLE bodies (id INTEGER PRIMARY KEY, body TEXT NOT NULL);
         CREATE TABLE tags (
             note_id INTEGER NOT NULL, seq INTEGER NOT NULL, name TEXT NOT NULL, folded TEXT NOT NULL,
             PRIMARY KEY (note_id, seq)
         ) WITHOUT ROWID;
         CREATE INDEX tags_by_name ON tags (folded);
         CREATE TABLE links (
             note_id INTEGER NOT NULL, seq INTEGER NOT NULL, kind INTEGER NOT NULL,
             target TEXT NOT NULL, line INTEGER NOT NULL, key TEXT NOT NULL,
             PRIMARY KEY (note_id, seq)
         ) WITHOUT ROWID;
         CREATE INDEX links_by_key ON links (key);
         CREATE TABLE fields (id INTEGER PRIMARY KEY, tags TEXT NOT NULL, frontmatter TEXT NOT NULL);
         CREATE VIRTUAL TABLE body_grams USING fts5(
             g, content='', contentless_delete=1, detail=none, tokenize='{TOKENIZER}');
         CREATE VIRTUAL TABLE meta_grams USING fts5(
             g, content='', contentless_delete=1, detail=none, tokenize='{TOKENIZER}');
         CREATE VIRTUAL TABLE head_grams USING fts5(
             g, content='', contentless_delete=1, detail=none, tokenize='{TOKENIZER}');
         CREATE VIRTUAL TABLE body_vocab USING fts5vocab(body_grams, 'row');
         INSERT INTO body_grams (body_grams, rank) VALUES ('hashsize', {HASH_SIZE});
         INSERT INTO body_grams (body_grams, rank) VALUES ('automerge', {AUTOMERGE});
         INSERT INTO meta_grams (meta_grams, rank) VALUES ('automerge', {AUTOMERGE});
         INSERT INTO head_grams (head_grams, rank) VALUES ('automerge', {AUTOMERGE});
         PRAGMA user_version = {SCHEMA_VERSION};"
    )
}

/// Which file a connection has open: replaced or deleted files are noticed by comparing this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    #[cfg(unix)]
    dev: u64,
    #[cfg(unix)]
    ino: u64,
}

fn file_id(dir: &Dir) -> Option<FileId> {
    let meta = dir.symlink_metadata(FILE).ok()?;
    if !meta.is_file() {
        return None;
    }
    #[cfg(unix)]
    {
        use cap_fs_ext::MetadataExt;
        Some(FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }
    #[cfg(not(unix))]
    {
        Some(FileId {})
    }
}

/// One catalog note as the index has it.
#[derive(Debug, Clone)]
pub struct Entry {
    pub id: i64,
    pub path: VaultPath,
    pub class: NoteClass,
    pub size: u64,
    pub mtime: i64,
    pub readable: bool,
    /// What `query_notes` compares; `None` for an unreadable note.
    pub data: Option<NoteData>,
}

/// Every indexed note, sorted by path, as of one generation.
///
/// A write derives the next generation from this one at the cost of the change (docs/contract.md#proposals "Cost
/// follows the change"): `entries` is a persistent vector (cloned in O(1), edited in O(log n)),
/// and positions are kept exact by [`Shifts`] over the positions of the last full read instead
/// of a map of every note rebuilt at each write.
#[derive(Debug)]
pub struct Catalog {
    pub generation: i64,
    pub entries: imbl::Vector<Entry>,
    /// The position of each note as of the last full read (or rebase).
    base: Arc<HashMap<i64, usize, Ids>>,
    /// How the notes added and removed since move those positions.
    shifts: Arc<Shifts>,
    /// Every note with an id up to this one has ids in path order (a build inserts in path
    /// order); notes added since have larger ids. So candidates up to it stream in path order.
    pub ordered_upto: i64,
    resolver: OnceLock<Resolver>,
    /// Per-generation answers that read every tag (computed on first use).
    pub tag_counts: OnceLock<Vec<(String, String, usize)>>,
    pub distinct_tags: OnceLock<usize>,
    /// The ranking's statistics of this generation: readable notes, their total and least size.
    pub sizes: OnceLock<(u64, u64, u64)>,
    /// How many notes hold each gram the ranking asked about this generation.
    pub df: Mutex<HashMap<String, u64>>,
    /// `query_notes` key columns of this generation, built on first use (at most
    /// `MAX_COLUMNS`, the oldest dropped first).
    columns: Mutex<Vec<(String, Arc<Vec<crate::data::KeyCell>>)>>,
}

/// Key columns a generation keeps: each is 16 bytes a note.
const MAX_COLUMNS: usize = 8;

/// After this many notes added or removed since the base, the base is read again from
/// `entries` (an O(n) step, so once per this many changes).
#[cfg(not(test))]
const REBASE_AFTER: usize = 4096;
#[cfg(test)]
const REBASE_AFTER: usize = 5;

/// The changes since the base, as they move base positions: a base note's position is its base
/// position, plus the added notes before it, minus the removed base notes before it.
#[derive(Debug, Clone, Default)]
struct Shifts {
    /// Each note added since the base: its path, and the base position it sits before.
    added: HashMap<i64, (VaultPath, usize)>,
    /// Those base positions, sorted (one per added note).
    anchors: Vec<usize>,
    /// Base notes removed since.
    removed: HashSet<i64>,
    /// Their base positions, sorted.
    removed_at: Vec<usize>,
}

impl Shifts {
    fn len(&self) -> usize {
        self.anchors.len() + self.removed_at.len()
    }

    /// The note `id` (in the base, or added since) is gone.
    fn forget(&mut self, id: i64, base: &HashMap<i64, usize, Ids>) {
        if let Some((_, anchor)) = self.added.remove(&id) {
            if let Ok(k) = self.anchors.binary_search(&anchor) {
                self.anchors.remove(k);
            }
        } else if let Some(&at) = base.get(&id)
            && self.removed.insert(id)
        {
            let k = self.removed_at.partition_point(|r| *r < at);
            self.removed_at.insert(k, at);
        }
    }

    /// The note `id` now sits before the base position `anchor`.
    fn add(&mut self, id: i64, path: VaultPath, anchor: usize) {
        let k = self.anchors.partition_point(|a| *a <= anchor);
        self.anchors.insert(k, anchor);
        self.added.insert(id, (path, anchor));
    }
}

/// One note a write changed, as the catalog sees it.
enum Change {
    Put(Entry),
    Remove(VaultPath),
}

impl Catalog {
    /// This catalog with `changes` applied, as generation `generation`: what `load_catalog`
    /// would read after them, without reading every note again.
    fn with_changes(&self, generation: i64, changes: &[Change]) -> Catalog {
        let mut entries = self.entries.clone();
        let mut shifts = (*self.shifts).clone();
        let base = &self.base;
        let mut ordered_upto = self.ordered_upto;
        for c in changes {
            match c {
                Change::Put(e) => {
                    let at = entries.binary_search_by(|x| x.path.cmp(&e.path));
                    // SQLite may hand a removed note's id to a new one: ids up to `ordered_upto`
                    // must stay in path order, so the bound drops below a reused one.
                    let in_place = matches!(at, Ok(i) if entries[i].id == e.id);
                    if !in_place && e.id <= ordered_upto {
                        ordered_upto = e.id - 1;
                    }
                    let i = match at {
                        Ok(i) if in_place => {
                            entries.set(i, e.clone());
                            continue;
                        }
                        Ok(i) => {
                            let old = entries.remove(i);
                            shifts.forget(old.id, base);
                            i
                        }
                        Err(i) => i,
                    };
                    // It goes before the note now at `i`, so before that note's base position.
                    let anchor = match entries.get(i) {
                        Some(next) => match shifts.added.get(&next.id) {
                            Some((_, a)) => *a,
                            None => base.get(&next.id).copied().unwrap_or(base.len()),
                        },
                        None => base.len(),
                    };
                    shifts.add(e.id, e.path.clone(), anchor);
                    entries.insert(i, e.clone());
                }
                Change::Remove(p) => {
                    if let Ok(i) = entries.binary_search_by(|x| x.path.cmp(p)) {
                        let old = entries.remove(i);
                        shifts.forget(old.id, base);
                    }
                }
            }
        }
        // The link resolver follows the same changes when this generation had built one.
        let resolver = OnceLock::new();
        if let Some(r) = self.resolver.get() {
            let mut next = r.clone();
            for c in changes {
                match c {
                    Change::Put(e) => next.insert(&e.path),
                    Change::Remove(p) => next.remove(p),
                }
            }
            let _ = resolver.set(next);
        }
        let (base, shifts) = if shifts.len() > REBASE_AFTER {
            (Arc::new(positions(&entries)), Shifts::default())
        } else {
            (self.base.clone(), shifts)
        };
        Catalog {
            generation,
            entries,
            base,
            shifts: Arc::new(shifts),
            ordered_upto,
            resolver,
            tag_counts: OnceLock::new(),
            distinct_tags: OnceLock::new(),
            sizes: OnceLock::new(),
            df: Mutex::new(HashMap::new()),
            columns: Mutex::default(),
        }
    }

    /// What the frontmatter key `key` holds in every entry, by position (`Missing` for entries
    /// without typed data); built once per generation and key.
    pub fn column(&self, key: &str) -> Arc<Vec<crate::data::KeyCell>> {
        if let Some((_, c)) = lock(&self.columns).iter().find(|(k, _)| k == key) {
            return c.clone();
        }
        // Built outside the lock: a query on another key need not wait for it.
        let built: Arc<Vec<crate::data::KeyCell>> = Arc::new(
            self.entries
                .iter()
                .map(|e| {
                    e.data.as_ref().map_or(crate::data::KeyCell::Missing, |d| {
                        crate::data::KeyCell::of(d.field(key))
                    })
                })
                .collect(),
        );
        let mut held = lock(&self.columns);
        if !held.iter().any(|(k, _)| k == key) {
            if held.len() >= MAX_COLUMNS {
                held.remove(0);
            }
            held.push((key.to_owned(), built.clone()));
        }
        built
    }

    pub fn find(&self, path: &VaultPath) -> Option<&Entry> {
        self.entries
            .binary_search_by(|e| e.path.cmp(path))
            .ok()
            .map(|i| &self.entries[i])
    }

    /// The position in `entries` of the note with this id.
    pub fn position(&self, id: i64) -> Option<usize> {
        let s = &self.shifts;
        // A search maps thousands of ids: skip the shift maps while they are empty.
        if !s.added.is_empty()
            && let Some((path, _)) = s.added.get(&id)
        {
            return self.entries.binary_search_by(|e| e.path.cmp(path)).ok();
        }
        if !s.removed.is_empty() && s.removed.contains(&id) {
            return None;
        }
        let at = *self.base.get(&id)?;
        if s.anchors.is_empty() && s.removed_at.is_empty() {
            return Some(at);
        }
        let before = s.anchors.partition_point(|a| *a <= at);
        let gone = s.removed_at.partition_point(|r| *r < at);
        Some(at + before - gone)
    }

    /// The first position whose entry does not satisfy `pred` (entries satisfying it come first).
    pub fn partition_point(&self, mut pred: impl FnMut(&Entry) -> bool) -> usize {
        match self.entries.binary_search_by(|e| {
            if pred(e) {
                std::cmp::Ordering::Less
            } else {
                std::cmp::Ordering::Greater
            }
        }) {
            Ok(i) | Err(i) => i,
        }
    }

    pub fn count(&self, class: NoteClass) -> usize {
        self.entries.iter().filter(|e| e.class == class).count()
    }

    /// The link resolver over every catalog path, built on first use.
    pub fn resolver(&self) -> &Resolver {
        self.resolver
            .get_or_init(|| Resolver::new(self.entries.iter().map(|e| &e.path)))
    }
}

/// Each entry's position, by id.
fn positions(entries: &imbl::Vector<Entry>) -> HashMap<i64, usize, Ids> {
    entries.iter().enumerate().map(|(i, e)| (e.id, i)).collect()
}

fn class_code(class: NoteClass) -> i64 {
    match class {
        NoteClass::Note => 0,
        NoteClass::Standard => 1,
        NoteClass::Inbox => 2,
    }
}

fn class_of(code: i64) -> NoteClass {
    match code {
        1 => NoteClass::Standard,
        2 => NoteClass::Inbox,
        _ => NoteClass::Note,
    }
}

pub fn kind_code(kind: LinkKind) -> i64 {
    match kind {
        LinkKind::Wiki => 0,
        LinkKind::Embed => 1,
        LinkKind::Markdown => 2,
    }
}

pub fn kind_of(code: i64) -> LinkKind {
    match code {
        1 => LinkKind::Embed,
        2 => LinkKind::Markdown,
        _ => LinkKind::Wiki,
    }
}

/// One write.
#[derive(Debug)]
pub enum Op {
    Put(Box<NoteRecord>),
    Remove(VaultPath),
}

/// The open index of one vault.
pub struct Db {
    path: PathBuf,
    /// `.vaultgate/`, opened without following a symlink.
    dir: Dir,
    /// The file the connections below have open.
    id: Option<FileId>,
    /// Writes are serialized per process (SQLite serializes them across processes).
    writer: Mutex<Option<Connection>>,
    readers: Mutex<Vec<Connection>>,
    catalog: Mutex<Option<Arc<Catalog>>>,
    /// Held while a whole catalog is read: a snapshot that finds none current waits for the
    /// read under way and shares its result, so concurrent first reads (the start pass and a
    /// call) never hold two copies of every note at once.
    loading: Mutex<()>,
    /// Set when the file was replaced under us: connections are then never closed (see `Drop`).
    abandoned: AtomicBool,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these leaves plain data behind; keep going.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn open_connection(path: &Path) -> rusqlite::Result<Connection> {
    // SECURITY(T-PATH): never open the index through a symlink swapped in for it.
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_NOFOLLOW;
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    Ok(conn)
}

/// Opens `.vaultgate/` (creating it), refusing a symlink in its place.
fn machine_dir(root: &Dir) -> Result<Dir, IndexError> {
    match root.create_dir(MACHINE_DIR) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e.into()),
    }
    // SECURITY(T-PATH): `.vaultgate` swapped for a symlink is not followed.
    Ok(root.open_dir_nofollow(MACHINE_DIR)?)
}

impl Db {
    /// Opens the index of the vault at `root_path` (whose handle is `root`), creating it, and
    /// replacing a file that is not a usable index.
    pub fn open(root_path: &Path, root: &Dir) -> Result<Db, IndexError> {
        let dir = machine_dir(root)?;
        let path = root_path.join(MACHINE_DIR).join(FILE);
        match Db::try_open(&path, &dir) {
            Ok(db) => Ok(db),
            Err(e) if e.is_unusable() => {
                tracing::warn!(path = %path.display(), error = %e, "index unusable; rebuilding it");
                let broken = file_id(&dir);
                replace_file(&dir, broken)?;
                Db::try_open(&path, &machine_dir(root)?)
            }
            Err(e) => Err(e),
        }
    }

    fn try_open(path: &Path, dir: &Dir) -> Result<Db, IndexError> {
        if let Ok(meta) = dir.symlink_metadata(FILE)
            && !meta.is_file()
        {
            return Err(IndexError::Unusable("not a regular file".into()));
        }
        let conn = open_connection(path)?;
        // Readers never block on the writer; a cache need not survive a power cut.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        ensure_schema(&conn)?;
        Ok(Db {
            path: path.to_path_buf(),
            id: file_id(dir),
            dir: dir.try_clone()?,
            writer: Mutex::new(Some(conn)),
            readers: Mutex::new(Vec::new()),
            catalog: Mutex::new(None),
            loading: Mutex::new(()),
            abandoned: AtomicBool::new(false),
        })
    }

    /// Whether the file at the index path is still the one open here.
    pub fn is_current(&self) -> bool {
        self.id.is_some() && file_id(&self.dir) == self.id
    }

    /// Whether the file still starts like an SQLite database (or is empty: in WAL mode the first
    /// pages may not have been checkpointed yet). Catches a file overwritten in place, which
    /// `is_current` cannot see and SQLite may not notice while its cache holds the pages.
    pub fn header_ok(&self) -> bool {
        const MAGIC: &[u8; 16] = b"SQLite format 3\0";
        let mut options = OpenOptions::new();
        options.read(true).follow(FollowSymlinks::No);
        let Ok(mut file) = self.dir.open_with(FILE, &options) else {
            return false;
        };
        let mut head = [0u8; 16];
        let mut got = 0;
        while got < head.len() {
            match std::io::Read::read(&mut file, &mut head[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(_) => return false,
            }
        }
        got == 0 || (got == head.len() && &head == MAGIC)
    }

    /// Stops using this file: it was replaced or deleted. Its connections are never closed (a
    /// closing SQLite connection checkpoints and deletes `index.sqlite-wal` *by name*, which may
    /// by now belong to the new file); the handful of descriptors is the price.
    pub fn abandon(&self) {
        self.abandoned.store(true, Ordering::SeqCst);
    }

    /// The cross-process lock a full pass holds (see `BUILD_LOCK_FILE`); take it with `write()`.
    pub fn build_lock(&self) -> Result<fd_lock::RwLock<std::fs::File>, IndexError> {
        lock_file(&self.dir, BUILD_LOCK_FILE)
    }

    /// Replaces the index file with an empty one (a broken file), under the cross-process lock.
    pub fn replace(&self) -> Result<(), IndexError> {
        self.abandon();
        replace_file(&self.dir, self.id)
    }

    fn take_reader(&self) -> Result<Connection, IndexError> {
        if let Some(c) = lock(&self.readers).pop() {
            return Ok(c);
        }
        let conn = open_connection(&self.path)?;
        // Cheap insurance: a reader never writes.
        conn.pragma_update(None, "query_only", true)?;
        // The exact step reads the candidates' bodies: keep the recently read ones.
        conn.pragma_update(None, "cache_size", READER_CACHE_KIB)?;
        Ok(conn)
    }

    fn give_reader(&self, conn: Connection) {
        if self.abandoned.load(Ordering::SeqCst) {
            std::mem::forget(conn);
            return;
        }
        let mut idle = lock(&self.readers);
        if idle.len() < MAX_IDLE_READERS {
            idle.push(conn);
        }
    }

    /// A consistent read of the index: one read transaction and the catalog of its generation.
    pub fn snapshot(&self) -> Result<Snapshot<'_>, IndexError> {
        let conn = self.take_reader()?;
        let mut snap = Snapshot {
            db: self,
            conn: Some(conn),
            catalog: Arc::new(Catalog::empty()),
            building: false,
            epoch: 0,
        };
        let (catalog, building, epoch) = {
            let conn = snap.conn();
            conn.execute_batch("BEGIN")?;
            // The first read fixes the snapshot.
            let generation = generation(conn)?;
            let building: Option<i64> = conn
                .prepare_cached("SELECT value FROM meta WHERE key = 'building'")?
                .query_row([], |r| r.get(0))
                .optional()?;
            let building = building != Some(0);
            let epoch = epoch(conn)?;
            let cached = lock(&self.catalog).clone();
            let caught_up = match &cached {
                // Another process wrote since: read only what it changed (docs/contract.md#proposals).
                Some(c) if c.generation < generation => catch_up(conn, c, generation)?.map(Arc::new),
                _ => None,
            };
            let catalog = match (cached, caught_up) {
                (Some(c), _) if c.generation == generation => c,
                (_, Some(next)) => {
                    let mut slot = lock(&self.catalog);
                    if slot.as_ref().is_none_or(|c| c.generation < generation) {
                        *slot = Some(next.clone());
                    }
                    next
                }
                (stale, None) => {
                    drop(stale);
                    let _one = lock(&self.loading);
                    // Another snapshot may have read this generation while we waited.
                    let done = lock(&self.catalog).clone().filter(|c| c.generation == generation);
                    match done {
                        Some(c) => c,
                        None => {
                            // A catalog too far behind to catch up is of no further use: it goes
                            // before the new one is read, so one full catalog is held, not two
                            // (a reader still holding it keeps it until it is done).
                            {
                                let mut slot = lock(&self.catalog);
                                if slot.as_ref().is_some_and(|c| c.generation < generation) {
                                    *slot = None;
                                }
                            }
                            let fresh = Arc::new(load_catalog(conn, generation)?);
                            let mut slot = lock(&self.catalog);
                            if slot.as_ref().is_none_or(|c| c.generation < generation) {
                                *slot = Some(fresh.clone());
                            }
                            fresh
                        }
                    }
                }
            };
            (catalog, building, epoch)
        };
        snap.catalog = catalog;
        snap.building = building;
        snap.epoch = epoch;
        Ok(snap)
    }

    /// Whether a build is under way, without reading the catalog (a snapshot may load it whole:
    /// seconds at 100,000 notes, which a writer asking whether to wait must not pay).
    pub fn building(&self) -> Result<bool, IndexError> {
        let conn = self.take_reader()?;
        let building: Result<Option<i64>, rusqlite::Error> = conn
            .prepare_cached("SELECT value FROM meta WHERE key = 'building'")
            .and_then(|mut s| s.query_row([], |r| r.get(0)).optional());
        self.give_reader(conn);
        Ok(building? != Some(0))
    }

    /// Runs `f` in one immediate write transaction of the writer connection.
    fn write_tx<T>(&self, f: impl FnOnce(&Connection) -> Result<T, IndexError>) -> Result<T, IndexError> {
        let mut guard = lock(&self.writer);
        if guard.is_none() {
            *guard = Some(open_connection(&self.path)?);
        }
        let Some(conn) = guard.as_mut() else {
            return Err(IndexError::Unusable("no writer connection".into()));
        };
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    }

    /// Applies `ops` in one transaction. A `Put` whose size, time and class are already those
    /// recorded is skipped (another process got there first). Returns how many notes changed.
    pub fn write(&self, ops: &[Op]) -> Result<usize, IndexError> {
        self.write_current(ops, &|_| true)
    }

    /// As [`Db::write`]; a `Put` whose file `current` says moved on since it was read is left
    /// out, inside the transaction: whoever changed the file indexes it, so an update that read
    /// the file before another process's write cannot land after that process indexed it.
    pub fn write_current(
        &self,
        ops: &[Op],
        current: &dyn Fn(&NoteRecord) -> bool,
    ) -> Result<usize, IndexError> {
        let (before, changes) = self.write_tx(|tx| {
            let before = generation(tx)?;
            let mut changes = Vec::new();
            for op in ops {
                match op {
                    Op::Put(rec) if !current(rec) => {}
                    Op::Put(rec) => {
                        if let Some(id) = put(tx, rec)? {
                            changes.push(Change::Put(Entry {
                                id,
                                path: rec.path.clone(),
                                class: rec.class,
                                size: rec.size,
                                mtime: rec.mtime,
                                readable: rec.content.is_some(),
                                data: rec.content.as_ref().map(|c| c.data.clone()),
                            }));
                        }
                    }
                    Op::Remove(path) => {
                        if remove(tx, path)? {
                            changes.push(Change::Remove(path.clone()));
                        }
                    }
                }
            }
            if !changes.is_empty() {
                bump_generation(tx)?;
            }
            // A large write (a sync pass) is not logged: a catalog behind it reloads, which then
            // costs no more than the catch-up would, and the log stays small.
            if !changes.is_empty() && changes.len() <= LOG_MAX_PATHS {
                let paths: Vec<&str> = changes
                    .iter()
                    .map(|c| match c {
                        Change::Put(e) => e.path.as_str(),
                        Change::Remove(p) => p.as_str(),
                    })
                    .collect();
                let paths = serde_json::to_string(&paths).map_err(|e| IndexError::Unusable(e.to_string()))?;
                tx.prepare_cached("INSERT OR REPLACE INTO catalog_log (generation, paths) VALUES (?1, ?2)")?
                    .execute(rusqlite::params![before + 1, paths])?;
                tx.prepare_cached("DELETE FROM catalog_log WHERE generation <= ?1")?
                    .execute([before + 1 - LOG_KEEP])?;
            }
            Ok((before, changes))
        })?;
        if !changes.is_empty() {
            // docs/contract.md#proposals "Cost follows the change": the catalog of the next generation is this one
            // with the changes applied, when nobody (no other process) wrote in between; else
            // the next snapshot reads it afresh.
            let mut slot = lock(&self.catalog);
            if let Some(cur) = slot.as_ref()
                && cur.generation == before
            {
                let next = Arc::new(cur.with_changes(before + 1, &changes));
                *slot = Some(next);
            }
        }
        Ok(changes.len())
    }

    /// Marks the index as being (re)built: every reader, in any process, scans instead of
    /// answering from a partial index, until `finish_pass`.
    pub fn start_building(&self) -> Result<(), IndexError> {
        self.write_tx(|tx| {
            tx.execute("UPDATE meta SET value = 1 WHERE key = 'building'", [])?;
            Ok(())
        })
    }

    /// Empties the index (and marks it as being built) for a rebuild; returns the new epoch.
    pub fn clear(&self) -> Result<i64, IndexError> {
        self.write_tx(|tx| {
            tx.execute_batch(
                "UPDATE meta SET value = 1 WHERE key = 'building';
                 UPDATE meta SET value = value + 1 WHERE key = 'epoch';
                 DELETE FROM notes; DELETE FROM bodies; DELETE FROM tags; DELETE FROM links;
                 DELETE FROM fields;
                 DELETE FROM catalog_log;
                 INSERT INTO body_grams (body_grams) VALUES ('delete-all');
                 INSERT INTO meta_grams (meta_grams) VALUES ('delete-all');
                 INSERT INTO head_grams (head_grams) VALUES ('delete-all');",
            )?;
            bump_generation(tx)?;
            epoch(tx)
        })
    }

    /// Records that a full pass, planned in `epoch`, made the index match the files as walked at
    /// `at`. Nothing is recorded if another process emptied the index since (its rebuild will).
    pub fn finish_pass(&self, at: SystemTime, epoch_planned: i64) -> Result<(), IndexError> {
        self.write_tx(|tx| {
            if epoch(tx)? != epoch_planned {
                return Ok(());
            }
            tx.execute(
                "INSERT INTO meta (key, value) VALUES ('indexed_at', ?1)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [nanos(at)],
            )?;
            tx.execute("UPDATE meta SET value = 0 WHERE key = 'building'", [])?;
            Ok(())
        })
    }

    /// Sizes the writer's cache for a large pass (`true`), or back to the default, giving the
    /// memory back (`false`).
    pub fn bulk(&self, on: bool) -> Result<(), IndexError> {
        let mut guard = lock(&self.writer);
        if let Some(conn) = guard.as_mut() {
            let kib = if on { BULK_CACHE_KIB } else { DEFAULT_CACHE_KIB };
            conn.pragma_update(None, "cache_size", kib)?;
            if !on {
                conn.execute_batch("PRAGMA shrink_memory;")?;
            }
        }
        Ok(())
    }

    /// Compacts the full-text tables after a large pass.
    pub fn optimize(&self) -> Result<(), IndexError> {
        let mut guard = lock(&self.writer);
        if let Some(conn) = guard.as_mut() {
            conn.execute_batch(
                "INSERT INTO body_grams (body_grams) VALUES ('optimize');
                 INSERT INTO meta_grams (meta_grams) VALUES ('optimize');
                 INSERT INTO head_grams (head_grams) VALUES ('optimize');
                 PRAGMA wal_checkpoint(TRUNCATE);",
            )?;
        }
        Ok(())
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if self.abandoned.load(Ordering::SeqCst) {
            if let Some(c) = lock(&self.writer).take() {
                std::mem::forget(c);
            }
            for c in lock(&self.readers).drain(..) {
                std::mem::forget(c);
            }
        }
    }
}

/// A lock file in `.vaultgate/` (created if missing, never through a symlink).
fn lock_file(dir: &Dir, name: &str) -> Result<fd_lock::RwLock<std::fs::File>, IndexError> {
    Ok(fd_lock::RwLock::new(crate::fs::open_lock_file(dir, name)?))
}

/// Removes the index file and its companions, unless another process already replaced the one
/// found broken (`broken`), all under `.vaultgate/index.lock`.
fn replace_file(dir: &Dir, broken: Option<FileId>) -> Result<(), IndexError> {
    let mut lock = lock_file(dir, LOCK_FILE)?;
    let _held = lock.write()?;
    if file_id(dir) != broken && file_id(dir).is_some() {
        // Someone else replaced it meanwhile.
        return Ok(());
    }
    for suffix in ["", "-wal", "-shm", "-journal"] {
        match dir.remove_file(format!("{FILE}{suffix}")) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Creates the schema in an empty file, or drops and re-creates one of another version; checks
/// that every table is there.
fn ensure_schema(conn: &Connection) -> Result<(), IndexError> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version != SCHEMA_VERSION {
        conn.execute_batch("BEGIN IMMEDIATE")?;
        let result = (|| -> Result<(), IndexError> {
            // Another process may have created it while we waited for the lock.
            let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
            if version != SCHEMA_VERSION {
                // The log too: its generations belong to the dropped tables.
                for t in TABLES.iter().chain(&["catalog_log"]) {
                    conn.execute_batch(&format!("DROP TABLE IF EXISTS {t};"))?;
                }
                conn.execute_batch(&schema_sql())?;
            }
            Ok(())
        })();
        match result {
            Ok(()) => conn.execute_batch("COMMIT")?,
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(e);
            }
        }
    }
    for t in TABLES {
        conn.prepare(&format!("SELECT 1 FROM {t} LIMIT 0"))
            .map_err(|e| IndexError::Unusable(format!("table {t}: {e}")))?;
    }
    // Additive (an index written by an older build simply has no log: readers load afresh).
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS catalog_log (generation INTEGER PRIMARY KEY, paths TEXT NOT NULL);",
    )?;
    generation(conn)?;
    Ok(())
}

/// Generations whose changed paths stay in `catalog_log`: a process whose catalog is at most
/// this far behind catches up by reading those notes only.
const LOG_KEEP: i64 = 1024;
/// At most this many paths per logged generation, and per catch-up.
const LOG_MAX_PATHS: usize = 1024;

/// The catalog of generation `to`, from `cached` and the notes the log says changed since;
/// `None` when the log does not cover the gap (then the caller reads every note).
fn catch_up(conn: &Connection, cached: &Catalog, to: i64) -> Result<Option<Catalog>, IndexError> {
    let gap = to - cached.generation;
    if gap <= 0 || gap > LOG_KEEP || cached.generation < 0 {
        return Ok(None);
    }
    let mut stmt =
        conn.prepare_cached("SELECT paths FROM catalog_log WHERE generation > ?1 AND generation <= ?2")?;
    let mut rows = stmt.query([cached.generation, to])?;
    let mut paths = std::collections::BTreeSet::new();
    let mut covered = 0i64;
    while let Some(r) = rows.next()? {
        covered += 1;
        let text: String = r.get(0)?;
        let Ok(list) = serde_json::from_str::<Vec<String>>(&text) else {
            return Ok(None);
        };
        paths.extend(list);
        if paths.len() > LOG_MAX_PATHS {
            return Ok(None);
        }
    }
    if covered != gap {
        return Ok(None);
    }
    let mut one = conn.prepare_cached(&format!("SELECT {ENTRY_COLUMNS} WHERE n.path = ?1"))?;
    let mut changes = Vec::with_capacity(paths.len());
    for raw in paths {
        let Ok(path) = VaultPath::parse(&raw) else {
            continue;
        };
        let row = one
            .query_row([raw.as_str()], |r| entry_of(r, path.clone()))
            .optional()?;
        changes.push(match row {
            Some(e) => Change::Put(e),
            None => Change::Remove(path),
        });
    }
    Ok(Some(cached.with_changes(to, &changes)))
}

fn generation(conn: &Connection) -> Result<i64, IndexError> {
    conn.query_row("SELECT value FROM meta WHERE key = 'generation'", [], |r| {
        r.get(0)
    })
    .optional()?
    .ok_or_else(|| IndexError::Unusable("no generation".into()))
}

/// A catalog entry's columns: `entry_of` reads a row of them.
const ENTRY_COLUMNS: &str =
    "n.id, n.path, n.class, n.size, n.mtime, n.readable, n.title, f.tags, f.frontmatter
     FROM notes n LEFT JOIN fields f ON f.id = n.id";

/// An entry from a row of `ENTRY_COLUMNS`, whose path the caller parsed.
fn entry_of(r: &rusqlite::Row<'_>, path: VaultPath) -> rusqlite::Result<Entry> {
    let readable: bool = r.get(5)?;
    let data = match (
        readable,
        r.get::<_, Option<String>>(7)?,
        r.get::<_, Option<String>>(8)?,
    ) {
        (true, Some(tags), Some(fm)) => {
            let tags: Vec<String> = serde_json::from_str(&tags).unwrap_or_default();
            let fm: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(&fm).unwrap_or_default();
            Some(NoteData::new(r.get(6)?, tags, &fm))
        }
        _ => None,
    };
    Ok(Entry {
        id: r.get(0)?,
        path,
        class: class_of(r.get(2)?),
        size: u64::try_from(r.get::<_, i64>(3)?).unwrap_or(0),
        mtime: r.get(4)?,
        readable,
        data,
    })
}

fn load_catalog(conn: &Connection, generation: i64) -> Result<Catalog, IndexError> {
    let mut stmt = conn.prepare_cached(&format!("SELECT {ENTRY_COLUMNS} ORDER BY n.path"))?;
    let mut rows = stmt.query([])?;
    // Straight into the persistent vector: a `Vec` first would hold every entry twice at the
    // peak (and, once freed, leave the allocator's thresholds raised to its size).
    let mut entries = imbl::Vector::new();
    let mut ids: Vec<(i64, usize)> = Vec::new();
    while let Some(r) = rows.next()? {
        let path: String = r.get(1)?;
        // Only parsed paths are ever stored; anything else is not ours to serve.
        let Ok(path) = VaultPath::parse(&path) else {
            continue;
        };
        let e = entry_of(r, path)?;
        ids.push((e.id, entries.len()));
        entries.push_back(e);
    }
    ids.sort_unstable();
    let base = Arc::new(ids.iter().copied().collect());
    let mut ordered_upto = 0;
    let mut last: Option<usize> = None;
    for &(id, pos) in &ids {
        if last.is_some_and(|l| pos < l) {
            break;
        }
        ordered_upto = id;
        last = Some(pos);
    }
    Ok(Catalog {
        generation,
        entries,
        base,
        shifts: Arc::default(),
        ordered_upto,
        resolver: OnceLock::new(),
        tag_counts: OnceLock::new(),
        distinct_tags: OnceLock::new(),
        sizes: OnceLock::new(),
        df: Mutex::new(HashMap::new()),
        columns: Mutex::default(),
    })
}

impl Catalog {
    fn empty() -> Catalog {
        Catalog {
            generation: -1,
            entries: imbl::Vector::new(),
            base: Arc::default(),
            shifts: Arc::default(),
            ordered_upto: 0,
            resolver: OnceLock::new(),
            tag_counts: OnceLock::new(),
            distinct_tags: OnceLock::new(),
            sizes: OnceLock::new(),
            df: Mutex::new(HashMap::new()),
            columns: Mutex::default(),
        }
    }
}

/// Moved by every `clear`: a pass planned before it must not mark the index complete.
fn epoch(conn: &Connection) -> Result<i64, IndexError> {
    Ok(conn
        .query_row("SELECT value FROM meta WHERE key = 'epoch'", [], |r| r.get(0))
        .optional()?
        .unwrap_or(0))
}

fn bump_generation(tx: &Connection) -> Result<(), IndexError> {
    tx.execute("UPDATE meta SET value = value + 1 WHERE key = 'generation'", [])?;
    Ok(())
}

/// Writes one note's record; `Some(id)` when anything changed.
fn put(conn: &Connection, rec: &NoteRecord) -> Result<Option<i64>, IndexError> {
    let existing: Option<(i64, i64, i64, i64, bool)> = conn
        .prepare_cached("SELECT id, size, mtime, class, readable FROM notes WHERE path = ?1")?
        .query_row([rec.path.as_str()], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .optional()?;
    let size = i64::try_from(rec.size).unwrap_or(i64::MAX);
    let class = class_code(rec.class);
    let readable = rec.content.is_some();
    // Already as the record says (another process indexed the same file): unless the text
    // differs, which an edit that keeps size and mtime leaves (docs/contract.md#search-and-the-index), the row stays.
    if let Some((id, s, m, c, r)) = existing
        && (s, m, c, r) == (size, rec.mtime, class, readable)
    {
        let same_text = match &rec.content {
            None => true,
            Some(content) => conn
                .prepare_cached("SELECT body = ?2 FROM bodies WHERE id = ?1")?
                .query_row(params![id, content.body], |r| r.get::<_, bool>(0))
                .optional()?
                .unwrap_or(false),
        };
        if same_text {
            return Ok(None);
        }
    }
    let stem = crate::note::stem(rec.path.file_name());
    let (title, aliases, description) = match &rec.content {
        Some(c) => (
            c.title.as_str(),
            serde_json::to_string(&c.aliases).unwrap_or_else(|_| "[]".into()),
            c.description.as_deref(),
        ),
        None => (stem, "[]".to_owned(), None),
    };
    let id = match existing {
        Some((id, ..)) => {
            conn.prepare_cached(
                "UPDATE notes SET class = ?2, size = ?3, mtime = ?4, readable = ?5, title = ?6,
                 aliases = ?7, description = ?8 WHERE id = ?1",
            )?
            .execute(params![
                id,
                class,
                size,
                rec.mtime,
                readable,
                title,
                aliases,
                description
            ])?;
            remove_content(conn, id)?;
            id
        }
        None => {
            conn.prepare_cached(
                "INSERT INTO notes (path, class, size, mtime, readable, title, aliases, description)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                rec.path.as_str(),
                class,
                size,
                rec.mtime,
                readable,
                title,
                aliases,
                description
            ])?;
            conn.last_insert_rowid()
        }
    };
    let Some(c) = &rec.content else {
        return Ok(Some(id));
    };
    conn.prepare_cached("INSERT INTO bodies (id, body) VALUES (?1, ?2)")?
        .execute(params![id, c.body])?;
    conn.prepare_cached("INSERT INTO body_grams (rowid, g) VALUES (?1, ?2)")?
        .execute(params![id, c.body_tokens])?;
    conn.prepare_cached("INSERT INTO meta_grams (rowid, g) VALUES (?1, ?2)")?
        .execute(params![id, c.meta_tokens])?;
    conn.prepare_cached("INSERT INTO head_grams (rowid, g) VALUES (?1, ?2)")?
        .execute(params![id, c.head_tokens])?;
    let tags = serde_json::to_string(&c.tags).unwrap_or_else(|_| "[]".into());
    conn.prepare_cached("INSERT INTO fields (id, tags, frontmatter) VALUES (?1, ?2, ?3)")?
        .execute(params![id, tags, c.frontmatter])?;
    let mut tag =
        conn.prepare_cached("INSERT INTO tags (note_id, seq, name, folded) VALUES (?1, ?2, ?3, ?4)")?;
    for (seq, t) in c.tags.iter().enumerate() {
        tag.execute(params![id, seq as i64, t, fold(t)])?;
    }
    let mut link = conn.prepare_cached(
        "INSERT INTO links (note_id, seq, kind, target, line, key) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    for (seq, (l, key)) in c.links.iter().enumerate() {
        link.execute(params![
            id,
            seq as i64,
            kind_code(l.kind),
            l.target,
            l.line as i64,
            key
        ])?;
    }
    Ok(Some(id))
}

fn remove_content(conn: &Connection, id: i64) -> Result<(), IndexError> {
    for sql in [
        "DELETE FROM bodies WHERE id = ?1",
        "DELETE FROM body_grams WHERE rowid = ?1",
        "DELETE FROM meta_grams WHERE rowid = ?1",
        "DELETE FROM head_grams WHERE rowid = ?1",
        "DELETE FROM tags WHERE note_id = ?1",
        "DELETE FROM links WHERE note_id = ?1",
        "DELETE FROM fields WHERE id = ?1",
    ] {
        conn.prepare_cached(sql)?.execute([id])?;
    }
    Ok(())
}

fn remove(conn: &Connection, path: &VaultPath) -> Result<bool, IndexError> {
    let id: Option<i64> = conn
        .prepare_cached("SELECT id FROM notes WHERE path = ?1")?
        .query_row([path.as_str()], |r| r.get(0))
        .optional()?;
    let Some(id) = id else { return Ok(false) };
    remove_content(conn, id)?;
    conn.prepare_cached("DELETE FROM notes WHERE id = ?1")?
        .execute([id])?;
    Ok(true)
}

/// A read transaction with the catalog of its generation; rolled back and its connection reused
/// when dropped.
pub struct Snapshot<'d> {
    db: &'d Db,
    conn: Option<Connection>,
    pub catalog: Arc<Catalog>,
    /// A (re)build is under way or was interrupted: the index may lack notes.
    pub building: bool,
    /// See `Db::clear`.
    pub epoch: i64,
}

impl Snapshot<'_> {
    pub fn conn(&self) -> &Connection {
        // Present from construction until drop.
        self.conn
            .as_ref()
            .unwrap_or_else(|| unreachable!("a snapshot holds its connection"))
    }

    /// When the index last matched the files (`None`: never).
    pub fn indexed_at(&self) -> Result<Option<i64>, IndexError> {
        Ok(self
            .conn()
            .query_row("SELECT value FROM meta WHERE key = 'indexed_at'", [], |r| {
                r.get(0)
            })
            .optional()?)
    }

    /// The ids of the notes whose `table` tokens (`body_grams` or `head_grams`) match `query`.
    pub fn grams_matching(&self, table: Grams, query: &str) -> Result<Vec<i64>, IndexError> {
        let sql = match table {
            Grams::Body => "SELECT rowid FROM body_grams WHERE body_grams MATCH ?1",
            Grams::Head => "SELECT rowid FROM head_grams WHERE head_grams MATCH ?1",
        };
        let mut stmt = self.conn().prepare_cached(sql)?;
        let ids = stmt
            .query_map([query], |r| r.get(0))?
            .collect::<Result<Vec<i64>, _>>()?;
        Ok(ids)
    }

    /// How many notes hold the body token `token` (FTS5's own count: it skips deleted notes and
    /// runs without a row a note, several times faster than counting matches).
    pub fn token_count(&self, token: &str) -> Result<u64, IndexError> {
        let n: Option<i64> = self
            .conn()
            .prepare_cached("SELECT doc FROM body_vocab WHERE term = ?1")?
            .query_row([token], |r| r.get(0))
            .optional()?;
        Ok(n.map_or(0, |n| u64::try_from(n).unwrap_or(0)))
    }

    pub fn body(&self, id: i64) -> Result<Option<String>, IndexError> {
        Ok(self
            .conn()
            .prepare_cached("SELECT body FROM bodies WHERE id = ?1")?
            .query_row([id], |r| r.get(0))
            .optional()?)
    }

    /// Title, aliases and description of a note (`None` if it is gone).
    pub fn meta(&self, id: i64) -> Result<Option<StoredMeta>, IndexError> {
        let row: Option<(String, String, Option<String>)> = self
            .conn()
            .prepare_cached("SELECT title, aliases, description FROM notes WHERE id = ?1")?
            .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?;
        Ok(row.map(|(title, aliases, description)| StoredMeta {
            title,
            aliases: serde_json::from_str(&aliases).unwrap_or_default(),
            description,
        }))
    }

    /// A note's frontmatter object as indexed (`None`: gone or unreadable).
    pub fn frontmatter(
        &self,
        id: i64,
    ) -> Result<Option<serde_json::Map<String, serde_json::Value>>, IndexError> {
        let text: Option<String> = self
            .conn()
            .prepare_cached("SELECT frontmatter FROM fields WHERE id = ?1")?
            .query_row([id], |r| r.get(0))
            .optional()?;
        Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
    }

    pub fn title(&self, id: i64) -> Result<Option<String>, IndexError> {
        Ok(self
            .conn()
            .prepare_cached("SELECT title FROM notes WHERE id = ?1")?
            .query_row([id], |r| r.get(0))
            .optional()?)
    }

    pub fn tags(&self, id: i64) -> Result<Vec<String>, IndexError> {
        let mut stmt = self
            .conn()
            .prepare_cached("SELECT name FROM tags WHERE note_id = ?1 ORDER BY seq")?;
        let tags = stmt
            .query_map([id], |r| r.get(0))?
            .collect::<Result<Vec<String>, _>>()?;
        Ok(tags)
    }

    pub fn links(&self, id: i64) -> Result<Vec<Link>, IndexError> {
        let mut stmt = self
            .conn()
            .prepare_cached("SELECT kind, target, line FROM links WHERE note_id = ?1 ORDER BY seq")?;
        let links = stmt
            .query_map([id], |r| {
                Ok(Link {
                    kind: kind_of(r.get(0)?),
                    target: r.get(1)?,
                    line: usize::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
                })
            })?
            .collect::<Result<Vec<Link>, _>>()?;
        Ok(links)
    }

    /// The notes with a link whose key is `key` (see `record::link_key`).
    pub fn linking(&self, key: &str) -> Result<Vec<i64>, IndexError> {
        let mut stmt = self
            .conn()
            .prepare_cached("SELECT DISTINCT note_id FROM links WHERE key = ?1")?;
        let ids = stmt
            .query_map([key], |r| r.get(0))?
            .collect::<Result<Vec<i64>, _>>()?;
        Ok(ids)
    }

    /// Per folded tag: the count of notes carrying it and its spelling in the first note by path
    /// (read once per generation).
    pub fn tag_counts(&self) -> Result<Vec<(String, String, usize)>, IndexError> {
        if let Some(t) = self.catalog.tag_counts.get() {
            return Ok(t.clone());
        }
        // (folded) -> (spelling, catalog position of that spelling's note, count)
        let mut tags: HashMap<String, (String, usize, usize)> = HashMap::new();
        let mut stmt = self
            .conn()
            .prepare_cached("SELECT note_id, name, folded FROM tags")?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let Some(pos) = self.catalog.position(r.get(0)?) else {
                continue;
            };
            let folded: String = r.get(2)?;
            match tags.get_mut(&folded) {
                Some(t) => {
                    t.2 += 1;
                    if pos < t.1 {
                        t.0 = r.get(1)?;
                        t.1 = pos;
                    }
                }
                None => {
                    tags.insert(folded, (r.get(1)?, pos, 1));
                }
            }
        }
        let out: Vec<(String, String, usize)> = tags
            .into_iter()
            .map(|(folded, (name, _, count))| (folded, name, count))
            .collect();
        let _ = self.catalog.tag_counts.set(out.clone());
        Ok(out)
    }

    /// Distinct tags, case-insensitively (once per generation).
    pub fn distinct_tags(&self) -> Result<usize, IndexError> {
        if let Some(n) = self.catalog.distinct_tags.get() {
            return Ok(*n);
        }
        let n: i64 = self
            .conn()
            .query_row("SELECT COUNT(DISTINCT folded) FROM tags", [], |r| r.get(0))?;
        let n = usize::try_from(n).unwrap_or(0);
        let _ = self.catalog.distinct_tags.set(n);
        Ok(n)
    }

    /// Metadata of the notes matching a `meta_grams` query (or of all readable notes), with tags.
    pub fn metadata_matching(
        &self,
        query: Option<&str>,
    ) -> Result<Vec<(i64, StoredMeta, Vec<String>)>, IndexError> {
        let conn = self.conn();
        let filter = if query.is_some() {
            "WHERE id IN (SELECT rowid FROM meta_grams WHERE meta_grams MATCH ?1)"
        } else {
            "WHERE readable"
        };
        let tag_filter = if query.is_some() {
            "WHERE note_id IN (SELECT rowid FROM meta_grams WHERE meta_grams MATCH ?1)"
        } else {
            ""
        };
        let params: Vec<&dyn rusqlite::ToSql> = match &query {
            Some(q) => vec![q],
            None => Vec::new(),
        };
        let mut tags: HashMap<i64, Vec<String>> = HashMap::new();
        {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT note_id, name FROM tags {tag_filter} ORDER BY note_id, seq"
            ))?;
            let mut rows = stmt.query(params.as_slice())?;
            while let Some(r) = rows.next()? {
                tags.entry(r.get(0)?).or_default().push(r.get(1)?);
            }
        }
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT id, title, aliases, description FROM notes {filter}"
        ))?;
        let mut rows = stmt.query(params.as_slice())?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            let id: i64 = r.get(0)?;
            let aliases: String = r.get(2)?;
            out.push((
                id,
                StoredMeta {
                    title: r.get(1)?,
                    aliases: serde_json::from_str(&aliases).unwrap_or_default(),
                    description: r.get(3)?,
                },
                tags.remove(&id).unwrap_or_default(),
            ));
        }
        Ok(out)
    }
}

/// A hasher for note ids (SQLite rowids: a note per id, not chosen by a client), several times
/// faster than SipHash over the tens of thousands of ids of a common term's lists.
#[derive(Default)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8 | u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_i64(&mut self, x: i64) {
        self.0 = (x as u64 ^ ((x as u64) >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Maps keyed by note id.
pub type Ids = std::hash::BuildHasherDefault<IdHasher>;

/// The full-text tables of grams a search asks.
#[derive(Debug, Clone, Copy)]
pub enum Grams {
    Body,
    Head,
}

/// A note's stored metadata fields.
#[derive(Debug, Clone)]
pub struct StoredMeta {
    pub title: String,
    pub aliases: Vec<String>,
    pub description: Option<String>,
}

impl Drop for Snapshot<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            self.db.give_reader(conn);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::*;

    fn record(path: &str, size: u64, mtime: i64, readable: bool) -> NoteRecord {
        NoteRecord {
            path: VaultPath::parse(path).unwrap(),
            class: NoteClass::Note,
            size,
            mtime,
            content: readable.then(|| super::super::record::Content {
                title: path.to_owned(),
                aliases: Vec::new(),
                description: None,
                body: String::new(),
                body_tokens: String::new(),
                meta_tokens: String::new(),
                head_tokens: String::new(),
                tags: Vec::new(),
                links: Vec::new(),
                frontmatter: "{}".into(),
                data: NoteData::default(),
            }),
        }
    }

    fn summary(c: &Catalog) -> Vec<(i64, String, u64, i64, bool)> {
        c.entries
            .iter()
            .map(|e| (e.id, e.path.to_string(), e.size, e.mtime, e.readable))
            .collect()
    }

    /// A catalog another process wrote past is caught up from the log (not read whole), and
    /// equals a fresh read; a gap the log does not cover is read whole.
    #[test]
    fn another_writers_changes_are_caught_up_from_the_log() {
        let tmp = tempfile::tempdir().unwrap();
        let root = cap_std::fs::Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap();
        let ours = Db::open(tmp.path(), &root).unwrap();
        let theirs = Db::open(tmp.path(), &root).unwrap();
        let put = |path: &str, size: u64| Op::Put(Box::new(record(path, size, 1, true)));
        ours.write(&[put("n/a.md", 1), put("n/b.md", 1), put("n/c.md", 1)])
            .unwrap();
        let before = ours.snapshot().unwrap().catalog.clone();
        theirs.write(&[put("n/b.md", 2), put("n/d.md", 1)]).unwrap();
        theirs
            .write(&[Op::Remove(VaultPath::parse("n/a.md").unwrap()), put("n/e.md", 3)])
            .unwrap();
        let conn = open_connection(&ours.path).unwrap();
        let to = generation(&conn).unwrap();
        let caught = catch_up(&conn, &before, to)
            .unwrap()
            .expect("the log covers the gap");
        let fresh = load_catalog(&conn, to).unwrap();
        assert_eq!(summary(&caught), summary(&fresh));
        for (i, e) in caught.entries.iter().enumerate() {
            assert_eq!(caught.position(e.id), Some(i));
        }
        assert_eq!(summary(&ours.snapshot().unwrap().catalog), summary(&fresh));
        // Without the log rows the gap is not covered: a full read is needed.
        conn.execute("DELETE FROM catalog_log", []).unwrap();
        assert!(catch_up(&conn, &before, to).unwrap().is_none());
    }

    /// Whether a build is under way is read without the catalog: a writer asking it right after
    /// another process wrote (or in a fresh process) does not read 100,000 catalog rows.
    #[test]
    fn asking_whether_a_build_is_under_way_reads_no_catalog() {
        let tmp = tempfile::tempdir().unwrap();
        let root = cap_std::fs::Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap();
        let db = Db::open(tmp.path(), &root).unwrap();
        db.start_building().unwrap();
        assert!(db.building().unwrap());
        let epoch = epoch(&open_connection(&db.path).unwrap()).unwrap();
        db.finish_pass(SystemTime::now(), epoch).unwrap();
        db.write(&[Op::Put(Box::new(record("n/a.md", 1, 1, true)))])
            .unwrap();
        *lock(&db.catalog) = None;
        assert!(!db.building().unwrap());
        assert!(lock(&db.catalog).is_none(), "no catalog was read");
        assert!(!db.snapshot().unwrap().building);
        assert!(lock(&db.catalog).is_some(), "a snapshot reads it");
    }

    /// An update that read a note before another writer changed it, and reaches the index after
    /// that writer indexed its version, leaves the newer version in place.
    #[test]
    fn a_put_whose_file_moved_on_is_left_out_in_the_transaction() {
        let tmp = tempfile::tempdir().unwrap();
        let root = cap_std::fs::Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap();
        let db = Db::open(tmp.path(), &root).unwrap();
        let put = |size: u64, mtime: i64| Op::Put(Box::new(record("n/a.md", size, mtime, true)));
        // The other writer's version (size 2, time 20) is what the file holds now.
        db.write(&[put(2, 20)]).unwrap();
        let on_disk = |r: &NoteRecord| r.size == 2 && r.mtime == 20;
        // The late update read the older version (size 1, time 10): left out.
        assert_eq!(db.write_current(&[put(1, 10)], &on_disk).unwrap(), 0);
        let kept = summary(&db.snapshot().unwrap().catalog);
        assert_eq!((kept[0].2, kept[0].3), (2, 20), "{kept:?}");
        // An update that read what the file holds is written.
        db.write_current(&[Op::Remove(VaultPath::parse("n/a.md").unwrap())], &on_disk)
            .unwrap();
        assert_eq!(db.write_current(&[put(2, 20)], &on_disk).unwrap(), 1);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// The catalog a write derives from the cached one equals the one read afresh, whatever
        /// the mix of new, changed and removed notes (ids reused by SQLite included).
        #[test]
        fn the_catalog_kept_by_writes_equals_a_fresh_read(
            batches in proptest::collection::vec(
                proptest::collection::vec((0u8..12, proptest::option::of(0u64..4), any::<bool>()), 1..6),
                1..12,
            )
        ) {
            let tmp = tempfile::tempdir().unwrap();
            let root = cap_std::fs::Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap();
            let db = Db::open(tmp.path(), &root).unwrap();
            // Warm the cache, as a reader would, link resolver included.
            {
                let snap = db.snapshot().unwrap();
                let _ = snap.catalog.resolver();
            }
            for batch in batches {
                let ops: Vec<Op> = batch
                    .iter()
                    .map(|(n, size, readable)| {
                        let path = format!("n/{n:02}.md");
                        match size {
                            Some(s) => Op::Put(Box::new(record(&path, *s, i64::from(*n), *readable))),
                            None => Op::Remove(VaultPath::parse(&path).unwrap()),
                        }
                    })
                    .collect();
                db.write(&ops).unwrap();
                let kept = db.snapshot().unwrap().catalog.clone();
                let conn = open_connection(&db.path).unwrap();
                let fresh = load_catalog(&conn, generation(&conn).unwrap()).unwrap();
                prop_assert_eq!(kept.generation, fresh.generation);
                prop_assert_eq!(summary(&kept), summary(&fresh));
                // The bound is a promise: ids up to it are in path order.
                let mut upto: Vec<(i64, usize)> = kept
                    .entries
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| e.id <= kept.ordered_upto)
                    .map(|(i, e)| (e.id, i))
                    .collect();
                upto.sort_unstable();
                prop_assert!(upto.windows(2).all(|w| w[0].1 < w[1].1), "ordered_upto {} broken", kept.ordered_upto);
                for (i, e) in kept.entries.iter().enumerate() {
                    prop_assert_eq!(kept.position(e.id), Some(i));
                }
                // The resolver carried through the writes equals one built afresh.
                let built = Resolver::new(fresh.entries.iter().map(|e| &e.path));
                prop_assert_eq!(kept.resolver().sorted(), built.sorted());
            }
        }
    }
}
