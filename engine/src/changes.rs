//! Vault change detection and announcement: a start-up scan and a file watcher per vault move the
//! revision (once per real change, across processes), keep the search index fresh (docs/contract.md#search-and-the-index), and
//! broadcast `VaultChanged` to every connection, which forwards it to clients that subscribed or
//! asked for log messages (docs/contract.md#the-mcp-surface).

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use policy::VaultPath;

use sha2::{Digest, Sha256};
use vault::fs::DirEntry;

use crate::core::{Core, VaultHandle};

/// One announcement: the vault and its revision after the change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VaultChanged {
    pub vault: String,
    pub revision: u64,
}

/// One note as the fingerprint sees it: path, size, modification time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FpEntry {
    path: String,
    size: u64,
    mtime_nanos: u128,
}

impl FpEntry {
    fn of(e: &DirEntry) -> FpEntry {
        FpEntry {
            path: e.path.as_str().to_owned(),
            size: e.size,
            mtime_nanos: e
                .modified
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        }
    }

    fn digest(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(self.path.as_bytes());
        h.update([0]);
        h.update(self.size.to_le_bytes());
        h.update(self.mtime_nanos.to_le_bytes());
        h.finalize().into()
    }
}

/// A digest of every note's path, size and modification time (notes and standards folders):
/// the XOR of one SHA-256 per note, so a write can swap the entries of the notes it touched
/// without walking the vault (docs/contract.md#proposals "Cost follows the change").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    pub fn parse(hex_text: &str) -> Option<Fingerprint> {
        let bytes = hex::decode(hex_text).ok()?;
        Some(Fingerprint(bytes.try_into().ok()?))
    }

    /// Adds an entry, or removes it if present (XOR).
    pub fn toggle(&mut self, e: &FpEntry) {
        for (a, b) in self.0.iter_mut().zip(e.digest()) {
            *a ^= b;
        }
    }

    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

/// The fingerprint entry of one note as it is now (`None`: absent or not a note).
pub fn fp_entry(v: &VaultHandle, p: &VaultPath) -> Option<FpEntry> {
    let e = v.reader.fs().metadata(p).ok()?;
    (e.kind == vault::fs::EntryKind::File).then(|| FpEntry::of(&e))
}

/// The fingerprint of the vault as it is now (one walk).
pub fn fingerprint(v: &VaultHandle) -> String {
    fingerprint_of(&v.reader.catalog_files())
}

/// The fingerprint of a `catalog_files` walk.
pub fn fingerprint_of(files: &[DirEntry]) -> String {
    let mut fp = Fingerprint::default();
    for e in files {
        fp.toggle(&FpEntry::of(e));
    }
    fp.to_hex()
}

/// Compares the vault with its recorded fingerprint, moves the revision if it changed, brings the
/// search index up to date, and announces the change. Used for each watcher batch, with the
/// vault-relative paths it reported.
pub fn rescan(core: &Core, v: &VaultHandle, batch: &vault::watch::Changes) {
    let changed: &[PathBuf] = &batch.paths;
    tracing::debug!(vault = %v.id, paths = changed.len(), lost = batch.lost, "watcher batch");
    // docs/contract.md#proposals "Cost follows the change": a batch holding nothing but vaultgate's own writes (and
    // inbox or machine files) is no change on disk to count, so it costs no walk and no lock.
    // A batch that lost events may hide anything: it is always walked.
    let mut theirs = false;
    if !batch.lost && !changed.iter().any(|p| needs_rescan(core, v, p, &mut theirs)) {
        if theirs {
            // Another vaultgate process wrote (and counted) it. It may have no index of its own
            // (the CLI): the named notes are indexed here (unchanged ones cost a lookup), and our
            // clients still need to hear.
            let paths: Vec<VaultPath> = changed.iter().filter_map(|p| vault_path(p)).collect();
            v.reader.update_paths(&paths);
            match core.state.revision(&v.id) {
                Ok(revision) => core.announce(VaultChanged {
                    vault: v.id.clone(),
                    revision,
                }),
                Err(e) => tracing::error!(vault = %v.id, error = %e, "reading the revision failed"),
            }
        }
        return;
    }
    // First the notes the watcher named, so an edit is searchable without waiting for the walk
    // below (which on a large vault takes a while).
    let paths: Vec<VaultPath> = changed.iter().filter_map(|p| vault_path(p)).collect();
    v.reader.update_paths(&paths);
    let (files, revision) = {
        // Under the write lock: an apply in progress settles its own fingerprint first, so its
        // change is counted once (by the apply), never again by a watcher.
        let lock = match v.reader.fs().write_lock() {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(vault = %v.id, error = %e, "cannot take the vault lock to rescan");
                return;
            }
        };
        // A write another process had not committed yet when the watcher saw its files is
        // committed now (it held this lock): if that explains every path, nothing is walked.
        let mut theirs = false;
        if !batch.lost && !changed.iter().any(|p| needs_rescan(core, v, p, &mut theirs)) {
            drop(lock);
            if let Ok(revision) = core.state.revision(&v.id) {
                core.announce(VaultChanged {
                    vault: v.id.clone(),
                    revision,
                });
            }
            return;
        }
        let files = v.reader.catalog_files();
        let revision = match core.state.note_disk_state(&v.id, &fingerprint_of(&files)) {
            Ok((revision, moved)) => {
                if moved {
                    tracing::info!(vault = %v.id, revision, "vault changed on disk");
                }
                Some(revision)
            }
            Err(e) => {
                tracing::error!(vault = %v.id, error = %e, "recording a disk change failed");
                None
            }
        };
        (files, revision)
    };
    // Outside the lock (indexing never holds up a write), and before the announcement, so a
    // client that searches on hearing of the change finds it: anything the watcher did not name
    // (a folder renamed, a symlinked note) is caught by comparing the whole walk.
    v.reader.index_sync(files);
    if let Some(revision) = revision {
        // Announce even when another process already counted it: our clients still need to hear.
        core.announce(VaultChanged {
            vault: v.id.clone(),
            revision,
        });
    }
}

/// Scans every vault once (changes made while no server ran), starts its search index (built or
/// brought up to date in the background; reads scan until it is ready) and keeps watching them,
/// and the vaults a reload of `gateway.toml` adds, until the returned guard is dropped.
pub fn start(core: &Arc<Core>) -> WatchGuard {
    core.writes().maintain_if_due();
    let _ = core.changes().watching.core.set(Arc::downgrade(core));
    for v in core.all_vaults() {
        core.changes().start_vault(core, &v);
    }
    WatchGuard(Arc::downgrade(core))
}

/// The watches of a serving process, one per vault, kept by the [`Changes`] service.
#[derive(Default)]
pub(crate) struct Watching {
    /// Set when this process serves: vaults a reload adds are then watched too.
    core: std::sync::OnceLock<std::sync::Weak<Core>>,
    watches: std::sync::Mutex<std::collections::BTreeMap<String, crate::storage::FeedGuard>>,
}

/// Stops every watch of the process when dropped (the server's shutdown).
pub struct WatchGuard(std::sync::Weak<Core>);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        if let Some(core) = self.0.upgrade() {
            core.changes().stop_all();
        }
    }
}

/// The notes vaultgate itself wrote lately, with the bytes it left: the watcher's events for
/// them are recognised by content hash and cost nothing.
#[derive(Debug, Default)]
pub(crate) struct OwnWrites {
    map: std::collections::HashMap<(String, String), Option<String>>,
}

/// Remembered at most (a full map is cleared: forgetting only costs a walk).
const OWN_WRITES_MAX: usize = 8192;

/// Change detection for edits made outside vaultgate.
pub struct Changes<'a> {
    pub(crate) core: &'a crate::core::Core,
    pub(crate) own_writes: &'a std::sync::Mutex<OwnWrites>,
    pub(crate) watching: &'a Watching,
}

impl Changes<'_> {
    /// Scans `v` once, starts its index and watches it.
    fn start_vault(&self, core: &Arc<Core>, v: &Arc<VaultHandle>) {
        core.proposals().sweep_orphan_proposals(v);
        let fp = fingerprint(v);
        if let Err(e) = core.state.note_disk_state(&v.id, &fp) {
            tracing::error!(vault = %v.id, error = %e, "start-up scan failed");
        }
        v.reader.start_index();
        let weak = Arc::downgrade(core);
        let handle = v.clone();
        // Every feed of outside changes ends in the one index updater, `rescan`.
        match v.feed().follow(Box::new(move |batch| {
            if let Some(core) = weak.upgrade() {
                rescan(&core, &handle, &batch);
            }
        })) {
            Ok(w) => {
                self.watches().insert(v.id.clone(), w);
            }
            Err(e) => {
                tracing::warn!(vault = %v.id, error = %e, "cannot watch vault; changes on disk are noticed only at start")
            }
        }
    }

    /// A reload replaced the vault set: watch what came, stop watching what went.
    pub(crate) fn vaults_changed(&self, added: &[Arc<VaultHandle>], removed: &[String]) {
        for id in removed {
            self.watches().remove(id);
        }
        let Some(core) = self.watching.core.get().and_then(std::sync::Weak::upgrade) else {
            return;
        };
        for v in added {
            self.watches().remove(&v.id);
            self.start_vault(&core, v);
        }
    }

    fn stop_all(&self) {
        self.watches().clear();
    }

    fn watches(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<String, crate::storage::FeedGuard>> {
        self.watching.watches.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that a transaction left `path` holding `hash` (`None`: absent).
    pub(crate) fn note_own_write(&self, v: &VaultHandle, path: &str, hash: Option<&str>) {
        let mut w = self
            .own_writes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if w.map.len() >= OWN_WRITES_MAX {
            w.map.clear();
        }
        w.map
            .insert((v.id.clone(), path.to_owned()), hash.map(str::to_owned));
    }

    /// Whether `p` holds exactly what vaultgate last wrote there: this process (remembered
    /// here), or another one (recorded with its commit; then `theirs` is set).
    fn is_own_write(&self, v: &VaultHandle, p: &VaultPath, theirs: &mut bool) -> bool {
        let mine = {
            let w = self
                .own_writes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            w.map.get(&(v.id.clone(), p.as_str().to_owned())).cloned()
        };
        let expected = match mine {
            Some(h) => h,
            None => match self.core.state.vault_write(&v.id, p.as_str()) {
                Ok(Some(h)) => {
                    *theirs = true;
                    h
                }
                Ok(None) | Err(_) => return false,
            },
        };
        let now = v
            .reader
            .fs()
            .read_for_write(vault::write::Area::Note, p)
            .ok()
            .map(|r| r.map(|(_, h)| h));
        now == Some(expected)
    }

    /// After vaultgate itself wrote notes (the revision already moved in the apply's commit):
    /// record the new fingerprint so watchers do not count the same change again, update the
    /// search index (waiting a few seconds at most, so the change is searchable at once), and
    /// announce it.
    pub fn settle_after_write(&self, v: &VaultHandle, revision: u64) {
        self.settle_after_write_with(v, revision, v.reader.catalog_files());
    }

    /// As `settle_after_write`, with the walk the caller already made after its last note write
    /// (one walk of the vault per apply instead of two).
    pub fn settle_after_write_with(&self, v: &VaultHandle, revision: u64, files: Vec<DirEntry>) {
        if let Err(e) = self.core.state.set_fingerprint(&v.id, &fingerprint_of(&files)) {
            tracing::error!(vault = %v.id, error = %e, "recording the fingerprint after a write failed");
        }
        v.reader.index_sync(files);
        self.core.announce(VaultChanged {
            vault: v.id.clone(),
            revision,
        });
    }
}

/// Whether a path the watcher reported may be a change vaultgate did not make itself.
fn needs_rescan(core: &Core, v: &VaultHandle, rel: &Path, theirs: &mut bool) -> bool {
    let hidden = rel
        .components()
        .next()
        .and_then(|c| c.as_os_str().to_str())
        .is_none_or(|s| s.starts_with('.'));
    if hidden {
        return false;
    }
    let Some(p) = vault_path(rel) else {
        // Not a path vaultgate can name: never a catalog note.
        return false;
    };
    if v.reader.layout().classify(&p) == policy::NoteClass::Inbox {
        return false;
    }
    if p.as_str().ends_with(".md") {
        return !core.changes().is_own_write(v, &p, theirs);
    }
    // A folder (created, renamed, removed) may carry notes the watcher did not name; another file
    // is no note.
    match v.reader.fs().metadata(&p) {
        Ok(e) => e.kind == vault::fs::EntryKind::Folder,
        Err(_) => true,
    }
}

/// A watcher's relative path as a `VaultPath` (`None`: not one vaultgate could serve anyway).
fn vault_path(p: &Path) -> Option<VaultPath> {
    let segments = p
        .components()
        .map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect::<Option<Vec<&str>>>()?;
    VaultPath::from_segments(segments).ok()
}
