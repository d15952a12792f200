//! The folded names of folders that `find_collision` looked into (docs/contract.md#paths), kept so that a stream
//! of writes into one large folder does not list it again for every write (docs/contract.md#proposals "Cost follows
//! the change").
//!
//! A listing is used only while its folder has the modification time it had when it was read;
//! vaultgate's own writes in a folder update the listing and its time in place (when the listing
//! was current just before the write). Any other change of the folder moves its time, so the next
//! check lists it again. What is left: on a file system whose clock tick is coarse, an outside
//! change landing in the same tick as the listing (or as one of our writes right after it) keeps
//! the time, and is seen at the folder's next change instead. The check guards portability (a
//! name that would collide on macOS or Windows), never an overwrite: every create is exclusive.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::SystemTime;

use cap_fs_ext::MetadataExt;
use cap_std::fs::Dir;

use super::fold_name;

/// Beyond this many names in all listings together, the cache starts afresh (bounded memory).
const MAX_NAMES: usize = 500_000;

/// A folder's identity: device and inode.
type FolderId = (u64, u64);

#[derive(Debug, Default)]
pub(crate) struct Listings {
    inner: Mutex<Cache>,
}

#[derive(Debug, Default)]
struct Cache {
    folders: HashMap<FolderId, Listing>,
    names: usize,
}

#[derive(Debug)]
struct Listing {
    modified: SystemTime,
    /// Folded name → the real names that fold to it.
    names: HashMap<String, BTreeSet<String>>,
}

/// What a folder was just before a write: its identity and time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Before(Option<(FolderId, SystemTime)>);

fn stamp(dir: &Dir) -> Option<(FolderId, SystemTime)> {
    let meta = dir.dir_metadata().ok()?;
    Some(((meta.dev(), meta.ino()), meta.modified().ok()?.into_std()))
}

impl Listings {
    fn lock(&self) -> MutexGuard<'_, Cache> {
        match self.inner.lock() {
            Ok(g) => g,
            // A cache: a panic mid-update may leave it stale, so it starts afresh.
            Err(poisoned) => {
                let mut g = poisoned.into_inner();
                *g = Cache::default();
                g
            }
        }
    }

    /// The real names in `dir` that fold to `folded`, listing the folder only when it changed
    /// since it was last listed (a folder that cannot be stamped is listed every time).
    pub(crate) fn names_folding_to(&self, dir: &Dir, folded: &str) -> std::io::Result<Vec<String>> {
        let stamped = stamp(dir);
        if let Some((id, modified)) = stamped {
            let cache = self.lock();
            if let Some(l) = cache.folders.get(&id).filter(|l| l.modified == modified) {
                return Ok(l
                    .names
                    .get(folded)
                    .map(|s| s.iter().cloned().collect())
                    .unwrap_or_default());
            }
        }
        let mut names: HashMap<String, BTreeSet<String>> = HashMap::new();
        for item in dir.entries()? {
            let Ok(name) = item?.file_name().into_string() else {
                continue;
            };
            names.entry(fold_name(&name)).or_default().insert(name);
        }
        let found = names
            .get(folded)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        // Stored only if the folder did not change while it was listed, and never a folder that
        // alone would pass the bound.
        if let Some((id, modified)) = stamped
            && names.len() <= MAX_NAMES
            && stamp(dir) == stamped
        {
            let mut cache = self.lock();
            if cache.names + names.len() > MAX_NAMES {
                *cache = Cache::default();
            }
            let keys = names.len();
            if let Some(old) = cache.folders.insert(id, Listing { modified, names }) {
                cache.names = cache.names.saturating_sub(old.names.len());
            }
            cache.names += keys;
        }
        Ok(found)
    }

    /// Called before vaultgate writes in `dir`.
    pub(crate) fn before(&self, dir: &Dir) -> Before {
        Before(stamp(dir))
    }

    /// Called after vaultgate's write in `dir`: `changes` are the names it added (`true`) or
    /// removed (`false`). The listing follows if it was current before the write; else it goes.
    pub(crate) fn wrote(&self, dir: &Dir, before: Before, changes: &[(&str, bool)]) {
        let after = stamp(dir);
        let mut cache = self.lock();
        let Some((id, was)) = before.0 else { return };
        let current = cache.folders.get(&id).is_some_and(|l| l.modified == was);
        match (current, after) {
            (true, Some((after_id, modified))) if after_id == id => {
                let mut grown = 0usize;
                if let Some(l) = cache.folders.get_mut(&id) {
                    let keys = l.names.len();
                    for (name, present) in changes {
                        let set = l.names.entry(fold_name(name)).or_default();
                        if *present {
                            set.insert((*name).to_owned());
                        } else {
                            set.remove(*name);
                        }
                    }
                    grown = l.names.len().saturating_sub(keys);
                    l.modified = modified;
                }
                cache.names += grown;
            }
            _ => cache.drop_folder(id),
        }
    }

    /// After a write in `dir` whose effect on its names is unknown (it failed half-way).
    pub(crate) fn forget(&self, dir: &Dir) {
        if let Some((id, _)) = stamp(dir) {
            self.lock().drop_folder(id);
        }
    }
}

impl Cache {
    fn drop_folder(&mut self, id: FolderId) {
        if let Some(old) = self.folders.remove(&id) {
            self.names = self.names.saturating_sub(old.names.len());
        }
    }
}
