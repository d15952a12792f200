//! Vault change detection and announcement: a start-up scan and a file watcher per vault move the
//! revision (once per real change, across processes) and broadcast `VaultChanged` to every
//! connection, which forwards it to clients that subscribed or asked for log messages (SPEC §4).

use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::core::{Core, VaultHandle};

/// One announcement: the vault and its revision after the change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VaultChanged {
    pub vault: String,
    pub revision: u64,
}

/// A digest of every note's path, size and modification time (notes and standards folders).
pub fn fingerprint(v: &VaultHandle) -> String {
    let layout = v.reader.layout();
    let mut folders = layout.notes.clone();
    folders.extend(layout.standards.iter().cloned());
    let mut h = Sha256::new();
    for e in v.reader.fs().walk_markdown(&folders) {
        if layout.classify(&e.path) == policy::NoteClass::Inbox {
            continue;
        }
        let mtime = e
            .modified
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        h.update(e.path.as_str().as_bytes());
        h.update([0]);
        h.update(e.size.to_le_bytes());
        h.update(mtime.to_le_bytes());
    }
    hex::encode(h.finalize())
}

/// Compares the vault with its recorded fingerprint, moves the revision if it changed, and
/// announces the change. Used at start-up and for each watcher batch.
pub fn rescan(core: &Core, v: &VaultHandle) {
    // Under the write lock: an apply in progress settles its own fingerprint first, so its
    // change is counted once (by the apply), never again by a watcher.
    let _lock = match v.reader.fs().write_lock() {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(vault = %v.id, error = %e, "cannot take the vault lock to rescan");
            return;
        }
    };
    let fp = fingerprint(v);
    match core.state.note_disk_state(&v.id, &fp) {
        Ok((revision, moved)) => {
            if moved {
                tracing::info!(vault = %v.id, revision, "vault changed on disk");
            }
            // Announce even when another process already counted it: our clients still need to hear.
            core.announce(VaultChanged {
                vault: v.id.clone(),
                revision,
            });
        }
        Err(e) => tracing::error!(vault = %v.id, error = %e, "recording a disk change failed"),
    }
}

/// Scans every vault once (changes made while no server ran) and keeps watching them.
pub fn start(core: &Arc<Core>) -> Vec<vault::watch::Watch> {
    let mut watches = Vec::new();
    for v in core.all_vaults() {
        let fp = fingerprint(&v);
        if let Err(e) = core.state.note_disk_state(&v.id, &fp) {
            tracing::error!(vault = %v.id, error = %e, "start-up scan failed");
        }
        let weak = Arc::downgrade(core);
        let handle = v.clone();
        match vault::watch::watch(v.reader.fs().root(), Duration::from_millis(150), move |_paths| {
            if let Some(core) = weak.upgrade() {
                rescan(&core, &handle);
            }
        }) {
            Ok(w) => watches.push(w),
            Err(e) => {
                tracing::warn!(vault = %v.id, error = %e, "cannot watch vault; changes on disk are noticed only at start")
            }
        }
    }
    watches
}

impl Core {
    /// After vaultgate itself wrote notes (the revision already moved in the apply's commit):
    /// record the new fingerprint so watchers do not count the same change again, and announce it.
    pub fn settle_after_write(&self, v: &VaultHandle, revision: u64) {
        let fp = fingerprint(v);
        if let Err(e) = self.state.set_fingerprint(&v.id, &fp) {
            tracing::error!(vault = %v.id, error = %e, "recording the fingerprint after a write failed");
        }
        self.announce(VaultChanged {
            vault: v.id.clone(),
            revision,
        });
    }
}
