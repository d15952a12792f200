//! Contained, durable writes: the only code that ever writes into a vault (docs/contract.md#paths, docs/contract.md#proposals).
//!
//! Every entry point first checks the path against its `Area` (syntactic, before any I/O), then
//! walks the parent chain from the vault's directory handle one component at a time, refusing any
//! symlink on the way or at the destination: a write never follows a link, it only ever lands in
//! the real folder that was checked, because every later call is relative to that folder's handle.
//! New content goes to a temp file in the same folder (created exclusively), is fsynced, renamed or
//! linked into place, and the folder is fsynced, so a crash leaves the old file or the new one.
//!
//! The compare-and-swap variants (`replace_if`, `remove_if`, `rename_if`, in `cas`) act only on
//! the exact bytes a transaction read; `append_line` and the stream readers (in `append`) serve
//! the append-only logs.
//!
//! Callers hold `WriteLock` around a whole apply; these functions do not take it themselves.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::{ErrorKind, Read, Write};
use std::path::Component;
use std::sync::atomic::{AtomicU64, Ordering};

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt, OpenOptionsMaybeDirExt, OpenOptionsSyncExt};
use cap_std::fs::{Dir, Metadata, OpenOptions, Permissions};
use policy::path::{hard_deny, hard_deny_segment};
use policy::{ErrorCode, FolderPath, Layout, PathError, VaultPath};
use sha2::{Digest, Sha256};
use unicode_normalization::UnicodeNormalization;

use crate::fs::{MAX_READ_BYTES, VaultFs};

mod append;
mod cas;
mod listing;

pub(crate) use listing::Listings;

/// The folder of per-vault machine data (docs/contract.md#concepts): index, history, trash, write lock.
pub const MACHINE_DIR: &str = ".vaultgate";
/// The lock file every writer of a vault (server and CLI) serializes on.
pub const LOCK_FILE: &str = "write.lock";
/// Under `.vaultgate/`: held shared by writers that stage files without the write lock
/// (proposals), taken exclusively (without waiting) by the staging sweep.
pub const STAGING_LOCK_FILE: &str = "staging.lock";
/// Temp files start with this: hidden, so readers, walks and the watcher ignore them.
const TEMP_PREFIX: &str = ".vaultgate-tmp-";
/// Under `.vaultgate/`: where temp files are staged.
const STAGING_DIR: &str = "tmp";

/// Why a write was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Path(#[from] PathError),
    /// The destination of an exclusive write or a rename is taken.
    #[error("already exists: {0}")]
    Exists(VaultPath),
    /// The source of a rename or removal, or a parent folder outside the area, is missing.
    #[error("not found")]
    NotFound,
    /// A file read for a base-hash check is over `MAX_READ_BYTES`.
    #[error("larger than the read limit")]
    TooLarge,
    /// A compare-and-swap found other bytes than the transaction expected (or none): an edit
    /// landed since they were read; nothing of it was overwritten or removed.
    #[error("changed since it was read: {0}")]
    Conflict(VaultPath),
    /// `append_line` was given bytes holding a newline: they would be more than one line.
    #[error("not a single line")]
    NotALine,
    /// `read_last_line` found a last line that is not UTF-8.
    #[error("not UTF-8 text")]
    NotText,
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

impl WriteError {
    /// The wire code (docs/contract.md#error-codes). Exhaustive on purpose: a new variant forces a decision.
    pub fn code(&self) -> ErrorCode {
        match self {
            WriteError::Path(e) => e.code(),
            WriteError::Exists(_) => ErrorCode::PROPOSAL_TARGET_EXISTS,
            WriteError::NotFound => ErrorCode::NOT_FOUND,
            WriteError::TooLarge => ErrorCode::TOO_LARGE,
            WriteError::Conflict(_) => ErrorCode::PROPOSAL_STALE_BASE,
            // A caller's bug, not the client's: no wire code describes it better.
            WriteError::NotALine => ErrorCode::INTERNAL,
            WriteError::NotText => ErrorCode::NOT_TEXT,
            WriteError::Io(_) => ErrorCode::INTERNAL,
        }
    }
}

/// Where a write may land; each operation checks the path against it before touching the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Area {
    /// A proposal target: `Layout::check_write_target` (`*.md` under `notes`, never the inbox).
    Note,
    /// Strictly beneath the inbox folder, every segment passing the hard deny-list.
    Inbox,
    /// Beneath `.vaultgate/`: the one place a hidden segment is allowed, and only as the first.
    Machine,
}

impl Area {
    /// The syntactic check (`PATH_DENIED`), before any I/O.
    pub fn check(self, layout: &Layout, path: &VaultPath) -> Result<(), PathError> {
        match self {
            Area::Note => layout.check_write_target(path),
            Area::Inbox => {
                hard_deny(path)?;
                // Exact, not folded: `Inbox/x` is refused, which fails safe.
                if path != &layout.inbox && FolderPath::Dir(layout.inbox.clone()).contains(path) {
                    Ok(())
                } else {
                    Err(PathError::Denied("outside the inbox"))
                }
            }
            Area::Machine => {
                let mut segments = path.segments();
                if segments.next() != Some(MACHINE_DIR) {
                    return Err(PathError::Denied("outside the machine folder"));
                }
                let mut rest = 0;
                for seg in segments {
                    // SECURITY(T-PATH): `.vaultgate/.git/x`, `.vaultgate/target/x` stay denied.
                    hard_deny_segment(seg)?;
                    rest += 1;
                }
                if rest == 0 {
                    return Err(PathError::Denied("the machine folder itself"));
                }
                Ok(())
            }
        }
    }

    /// May a missing folder `folder` (a proper prefix of a checked path) be created?
    fn may_create(self, layout: &Layout, folder: &VaultPath) -> bool {
        match self {
            Area::Note => layout.notes.iter().any(|f| f.contains(folder)),
            Area::Inbox => FolderPath::Dir(layout.inbox.clone()).contains(folder),
            // Every prefix of a checked machine path starts with `.vaultgate`.
            Area::Machine => true,
        }
    }
}

/// How `write_atomic` treats an existing destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Refuse (`WriteError::Exists`) if the destination exists; atomic (no check-then-write race).
    Exclusive,
    /// Replace an existing regular file atomically (keeping its permissions), or create it.
    Replace,
}

/// The vault's exclusive write lock (`.vaultgate/write.lock`), across threads and processes;
/// released when dropped.
#[derive(Debug)]
pub struct WriteLock {
    /// An `flock`/`LockFileEx` lock lives as long as its open file: closing this releases it.
    _file: std::fs::File,
}

/// A shared hold on `.vaultgate/staging.lock`: while it is held, the staging sweep leaves every
/// temp file alone, so a writer that does not take the write lock (a proposal's inbox files)
/// cannot lose its temp file to another process's sweep. Released when dropped.
#[derive(Debug)]
pub struct StagingGuard {
    _file: std::fs::File,
}

/// A destination folder reached without following a symlink.
struct Parent {
    /// `None`: the vault root (borrowed from `VaultFs`).
    dir: Option<Dir>,
    /// The folder's path from the root (empty: the root).
    segments: Vec<String>,
}

impl VaultFs {
    /// Takes the vault's write lock, waiting for another holder (thread or process) to release it.
    pub fn write_lock(&self) -> Result<WriteLock, WriteError> {
        let mut lock = fd_lock::RwLock::new(self.lock_file()?);
        loop {
            match lock.write() {
                Ok(guard) => {
                    // The guard would unlock when dropped, but it borrows `lock`; instead the lock
                    // is held until `WriteLock` closes the file, which releases it.
                    std::mem::forget(guard);
                    break;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        let held = WriteLock {
            _file: lock.into_inner(),
        };
        self.sweep_staging()?;
        Ok(held)
    }

    /// Lets this thread stage files without the write lock (see [`StagingGuard`]); waits only
    /// for a sweep under way.
    pub fn staging_guard(&self) -> Result<StagingGuard, WriteError> {
        let lock = fd_lock::RwLock::new(self.machine_lock_file(STAGING_LOCK_FILE)?);
        loop {
            match lock.read() {
                Ok(guard) => {
                    std::mem::forget(guard); // as in `write_lock`: closing the file unlocks
                    break;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(StagingGuard {
            _file: lock.into_inner(),
        })
    }

    /// Runs `f` while nobody stages files without the write lock (the staging lock taken
    /// exclusively, without waiting); `None` when someone does. For sweeps of what a crashed
    /// stager left, which must never take files a live one is still committing.
    pub fn when_no_one_stages<R>(&self, f: impl FnOnce() -> R) -> Result<Option<R>, WriteError> {
        let mut lock = fd_lock::RwLock::new(self.machine_lock_file(STAGING_LOCK_FILE)?);
        let _alone = match lock.try_write() {
            Ok(guard) => guard,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        Ok(Some(f()))
    }

    /// Takes the vault's write lock if nobody holds it; `None` when it is held.
    pub fn try_write_lock(&self) -> Result<Option<WriteLock>, WriteError> {
        let mut lock = fd_lock::RwLock::new(self.lock_file()?);
        match lock.try_write() {
            Ok(guard) => std::mem::forget(guard), // as in `write_lock`
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        let held = WriteLock {
            _file: lock.into_inner(),
        };
        self.sweep_staging()?;
        Ok(Some(held))
    }

    /// Writes `bytes` to `path` atomically and durably: a temp file in the same folder (random
    /// name, created exclusively), write, fsync, rename (`Replace`) or hard-link (`Exclusive`)
    /// into place, fsync the folder. Missing parent folders inside the area are created and their
    /// parents fsynced. The temp file is removed on every error.
    pub fn write_atomic(
        &self,
        area: Area,
        path: &VaultPath,
        bytes: &[u8],
        mode: WriteMode,
    ) -> Result<(), WriteError> {
        area.check(self.layout(), path)?;
        let parent = self.open_parent(area, path, true)?;
        let dir = parent.dir.as_ref().unwrap_or(self.root_dir());
        let name = path.file_name();
        let existing = self.check_destination(dir, &parent.segments, name)?;
        let permissions = match (&existing, mode) {
            (Some(_), WriteMode::Exclusive) => return Err(WriteError::Exists(path.clone())),
            (Some(meta), WriteMode::Replace) => Some(meta.permissions()),
            (None, _) => None,
        };
        let staging = self.staging_dir()?;
        let before = self.listings().before(dir);
        let placed = place_bytes(&staging, dir, name, path, bytes, permissions, mode);
        match &placed {
            Ok(()) => self.listings().wrote(dir, before, &[(name, true)]),
            Err(_) => self.listings().forget(dir),
        }
        placed
    }

    /// Moves the regular file `from` to `to`, never replacing anything at `to` (`Exists`), and
    /// fsyncs both folders. Missing folders of `to` inside `to_area` are created.
    pub fn rename(
        &self,
        from_area: Area,
        from: &VaultPath,
        to_area: Area,
        to: &VaultPath,
    ) -> Result<(), WriteError> {
        from_area.check(self.layout(), from)?;
        to_area.check(self.layout(), to)?;
        let src = self.open_parent(from_area, from, false)?;
        let src_dir = src.dir.as_ref().unwrap_or(self.root_dir());
        if self
            .check_destination(src_dir, &src.segments, from.file_name())?
            .is_none()
        {
            return Err(WriteError::NotFound);
        }
        let dst = self.open_parent(to_area, to, true)?;
        let dst_dir = dst.dir.as_ref().unwrap_or(self.root_dir());
        if self
            .check_destination(dst_dir, &dst.segments, to.file_name())?
            .is_some()
        {
            return Err(WriteError::Exists(to.clone()));
        }
        let placed = link_no_clobber(src_dir, from.file_name(), dst_dir, to.file_name(), to)?;
        // The new name is durable before the old one goes: a crash leaves the file under both
        // names or under `to`, never under none.
        sync_dir(dst_dir)?;
        if placed == Placed::Linked {
            src_dir.remove_file(from.file_name())?;
        }
        if placed == Placed::Linked || src.segments != dst.segments {
            sync_dir(src_dir)?;
        }
        Ok(())
    }

    /// Removes the regular file at `path` and fsyncs its folder.
    pub fn remove_file(&self, area: Area, path: &VaultPath) -> Result<(), WriteError> {
        area.check(self.layout(), path)?;
        let parent = self.open_parent(area, path, false)?;
        let dir = parent.dir.as_ref().unwrap_or(self.root_dir());
        if self
            .check_destination(dir, &parent.segments, path.file_name())?
            .is_none()
        {
            return Err(WriteError::NotFound);
        }
        dir.remove_file(path.file_name())?;
        sync_dir(dir)?;
        Ok(())
    }

    /// The bytes and lowercase hex SHA-256 of the regular file at `path`, read without following a
    /// symlink at any component (for base-hash checks under the lock); `None` if it is missing.
    pub fn read_for_write(
        &self,
        area: Area,
        path: &VaultPath,
    ) -> Result<Option<(Vec<u8>, String)>, WriteError> {
        let Some(file) = self.open_existing(area, path)? else {
            return Ok(None);
        };
        // SECURITY(T-PATH): type and size of the handle we read.
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(PathError::Denied("not a regular file").into());
        }
        if meta.len() > MAX_READ_BYTES {
            return Err(WriteError::TooLarge);
        }
        let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
        file.take(MAX_READ_BYTES + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > MAX_READ_BYTES {
            return Err(WriteError::TooLarge);
        }
        let hash = hex::encode(Sha256::digest(&bytes));
        Ok(Some((bytes, hash)))
    }

    /// Opens the existing file at `path` for reading without following a symlink at any
    /// component; `None` if it (or a folder on the way) is missing. The one no-follow read open
    /// of the write side (`read_for_write`, the log readers in `append`).
    pub(crate) fn open_existing(
        &self,
        area: Area,
        path: &VaultPath,
    ) -> Result<Option<std::fs::File>, WriteError> {
        area.check(self.layout(), path)?;
        let parent = match self.open_parent(area, path, false) {
            Ok(parent) => parent,
            Err(WriteError::NotFound) => return Ok(None),
            Err(e) => return Err(e),
        };
        let dir = parent.dir.as_ref().unwrap_or(self.root_dir());
        let name = path.file_name();
        if self.check_destination(dir, &parent.segments, name)?.is_none() {
            return Ok(None);
        }
        let mut options = OpenOptions::new();
        // SECURITY(T-PATH): no-follow, so a symlink swapped in since the check fails to open;
        // non-blocking, so a FIFO swapped in cannot hang the apply.
        options.read(true).follow(FollowSymlinks::No).nonblock(true);
        match dir.open_with(name, &options) {
            Ok(file) => Ok(Some(file.into_std())),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// An existing entry that `path` would collide with on a case-insensitive or
    /// normalization-insensitive file system (docs/contract.md#paths): at the first segment of `path` whose
    /// folder holds a name equal to it after NFC + lowercase but not byte-equal, the path of that
    /// existing entry (a folder when the collision is on a folder segment). Call it after the
    /// area check; it refuses hidden and tooling segments and symlinked folders like a write does.
    pub fn find_collision(&self, path: &VaultPath) -> Result<Option<VaultPath>, WriteError> {
        hard_deny(path)?;
        let segments: Vec<&str> = path.segments().collect();
        let mut cur: Option<Dir> = None;
        let mut real: Vec<String> = Vec::new();
        for (i, seg) in segments.iter().enumerate() {
            let here = cur.as_ref().unwrap_or(self.root_dir());
            let wanted = fold_name(seg);
            for name in self.listings().names_folding_to(here, &wanted)? {
                if name != *seg && folds_equal(&name, seg, &wanted) {
                    let found = real
                        .iter()
                        .map(String::as_str)
                        .chain(std::iter::once(name.as_str()));
                    // A name vaultgate refuses cannot be reported as a path; it is left out.
                    if let Ok(found) = VaultPath::from_segments(found) {
                        return Ok(Some(found));
                    }
                }
            }
            if i + 1 == segments.len() {
                break;
            }
            let meta = match here.symlink_metadata(seg) {
                Ok(meta) => meta,
                // Nothing exists below a missing folder, so nothing more can collide.
                Err(e) if is_missing(&e) => return Ok(None),
                Err(e) => return Err(e.into()),
            };
            if meta.file_type().is_symlink() {
                return Err(self.symlink_refusal(&real, here, seg).into());
            }
            if !meta.is_dir() {
                return Ok(None);
            }
            cur = Some(here.open_dir_nofollow(seg)?);
            real.push((*seg).to_owned());
        }
        Ok(None)
    }

    /// Where an applied delete keeps the old file: `.vaultgate/trash/<id>/<target>` (Machine area).
    pub fn trash_path(&self, target: &VaultPath, id: &str) -> Result<VaultPath, PathError> {
        VaultPath::from_segments([MACHINE_DIR, "trash", id].into_iter().chain(target.segments()))
    }

    /// Opens (creating if needed) `.vaultgate/write.lock`, refusing symlinks on the way.
    fn lock_file(&self) -> Result<std::fs::File, WriteError> {
        self.machine_lock_file(LOCK_FILE)
    }

    /// Opens (creating if needed) the lock file `.vaultgate/<name>`, refusing symlinks.
    fn machine_lock_file(&self, name: &str) -> Result<std::fs::File, WriteError> {
        let path = VaultPath::from_segments([MACHINE_DIR, name])?;
        let parent = self.open_parent(Area::Machine, &path, true)?;
        let dir = parent.dir.as_ref().unwrap_or(self.root_dir());
        self.check_destination(dir, &parent.segments, name)?;
        Ok(crate::fs::open_lock_file(dir, name)?)
    }

    /// `.vaultgate/tmp`: where temp files are made before they are linked or renamed into place,
    /// so a crash leaves its litter in one known folder rather than beside the notes.
    fn staging_dir(&self) -> Result<Dir, WriteError> {
        let path = VaultPath::from_segments([MACHINE_DIR, STAGING_DIR, "x"])?;
        let parent = self.open_parent(Area::Machine, &path, true)?;
        parent.dir.ok_or(WriteError::NotFound)
    }

    /// Removes temp files that a crashed writer left in the staging folder. Only under the write
    /// lock, and only while no writer staging without it holds a [`StagingGuard`] (then the
    /// sweep waits for the next lock holder: litter is harmless, a lost temp file is not).
    fn sweep_staging(&self) -> Result<usize, WriteError> {
        let mut lock = fd_lock::RwLock::new(self.machine_lock_file(STAGING_LOCK_FILE)?);
        let _sweeping = match lock.try_write() {
            Ok(guard) => guard,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(0),
            Err(e) => return Err(e.into()),
        };
        let dir = self.staging_dir()?;
        let mut removed = 0;
        for entry in dir.entries()? {
            let entry = entry?;
            let name = entry.file_name();
            if name.to_str().is_some_and(|n| n.starts_with(TEMP_PREFIX)) && entry.file_type()?.is_file() {
                dir.remove_file(&name)?;
                removed += 1;
            }
        }
        if removed > 0 {
            sync_dir(&dir)?;
            tracing::info!(removed, "removed temp files left by an interrupted write");
        }
        Ok(removed)
    }

    /// Opens the folder that will hold `path`, one component at a time with no-follow, creating
    /// missing folders inside `area` when `create` (else a missing one is `NotFound`).
    fn open_parent(&self, area: Area, path: &VaultPath, create: bool) -> Result<Parent, WriteError> {
        let segments: Vec<&str> = path.segments().collect();
        let folders = &segments[..segments.len().saturating_sub(1)];
        let mut cur: Option<Dir> = None;
        let mut real: Vec<String> = Vec::new();
        for seg in folders {
            let here = cur.as_ref().unwrap_or(self.root_dir());
            let meta = match here.symlink_metadata(seg) {
                Ok(meta) => meta,
                Err(e) if is_missing(&e) => {
                    let folder = VaultPath::from_segments(
                        real.iter().map(String::as_str).chain(std::iter::once(*seg)),
                    )?;
                    if !(create && area.may_create(self.layout(), &folder)) {
                        return Err(WriteError::NotFound);
                    }
                    // The folder's listing learns the new name like any of our own writes in it
                    // (or is dropped), so a later name folding alike is still a collision.
                    let before = self.listings().before(here);
                    match here.create_dir(seg) {
                        Ok(()) => {
                            self.listings().wrote(here, before, &[(seg, true)]);
                            sync_dir(here)?
                        }
                        // Created meanwhile by someone else: examine what is there now.
                        Err(e) if e.kind() == ErrorKind::AlreadyExists => self.listings().forget(here),
                        Err(e) => {
                            self.listings().forget(here);
                            return Err(e.into());
                        }
                    }
                    here.symlink_metadata(seg)?
                }
                Err(e) => return Err(e.into()),
            };
            // SECURITY(T-PATH): a write never passes through a symlinked folder, even one that
            // stays inside the vault: what was checked is where the bytes land.
            if meta.file_type().is_symlink() {
                return Err(self.symlink_refusal(&real, here, seg).into());
            }
            if !meta.is_dir() {
                // A file used as a folder (`a.md/x`), as `ENOTDIR`.
                return Err(WriteError::NotFound);
            }
            // SECURITY(T-PATH): no-follow, so a folder swapped for a symlink since the `lstat`
            // fails to open instead of being entered.
            let next = match here.open_dir_nofollow(seg) {
                Ok(next) => next,
                Err(e) => {
                    return Err(match here.symlink_metadata(seg) {
                        Ok(m) if m.file_type().is_symlink() => self.symlink_refusal(&real, here, seg).into(),
                        _ => e.into(),
                    });
                }
            };
            cur = Some(next);
            real.push((*seg).to_owned());
        }
        Ok(Parent {
            dir: cur,
            segments: real,
        })
    }

    /// What is at `name` in the real folder `dir`: `None` when nothing, the metadata of a regular
    /// file; a symlink or anything else is refused.
    fn check_destination(
        &self,
        dir: &Dir,
        folder: &[String],
        name: &str,
    ) -> Result<Option<Metadata>, WriteError> {
        let meta = match dir.symlink_metadata(name) {
            Ok(meta) => meta,
            Err(e) if is_missing(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        // SECURITY(T-PATH): never write through, replace, read or remove a symlink.
        if meta.file_type().is_symlink() {
            return Err(self.symlink_refusal(folder, dir, name).into());
        }
        if !meta.is_file() {
            return Err(PathError::Denied("not a regular file").into());
        }
        Ok(Some(meta))
    }

    /// The refusal for a symlink met at `name` in the real folder `folder` (handle `dir`):
    /// `Outside` when it leads out of the vault, else `Denied`.
    fn symlink_refusal(&self, folder: &[String], dir: &Dir, name: &str) -> PathError {
        let denied = PathError::Denied("a symlink on the write path");
        let Ok(target) = dir.read_link_contents(name) else {
            return denied;
        };
        // The link's own folder is real, so leading `..`s are exact here; the rest (which may pass
        // through more links) is left to the read-side resolver.
        let mut base: Vec<String> = folder.to_vec();
        let mut rest: Vec<String> = Vec::new();
        for component in target.components() {
            match component {
                Component::Prefix(_) | Component::RootDir => return PathError::Outside,
                Component::CurDir => {}
                Component::ParentDir if rest.is_empty() => {
                    if base.pop().is_none() {
                        return PathError::Outside;
                    }
                }
                Component::ParentDir => rest.push("..".to_owned()),
                Component::Normal(s) => match s.to_str() {
                    Some(s) => rest.push(s.to_owned()),
                    None => return denied,
                },
            }
        }
        base.extend(rest);
        if self.resolves_outside(&base) {
            PathError::Outside
        } else {
            denied
        }
    }
}

/// The I/O half of `write_atomic` in the checked folder `dir`: temp file, fsync, rename or link
/// into place as `name`, fsync the folder. The temp file never outlives an error.
fn place_bytes(
    staging: &Dir,
    dir: &Dir,
    name: &str,
    path: &VaultPath,
    bytes: &[u8],
    permissions: Option<Permissions>,
    mode: WriteMode,
) -> Result<(), WriteError> {
    match place_via(staging, dir, name, path, bytes, permissions.clone(), mode) {
        // A folder on another file system (a mount inside the vault): make the temp file beside it.
        Err(WriteError::Io(e)) if e.raw_os_error() == Some(18) => {
            place_via(dir, dir, name, path, bytes, permissions, mode)
        }
        other => other,
    }
}

/// Temp file in `tmp_dir`, fsync, rename (`Replace`) or link (`Exclusive`) into `dir` as `name`,
/// fsync `dir`. The temp file never outlives an error of this process (a crash leaves it in the
/// staging folder, which the next holder of the write lock sweeps).
fn place_via(
    tmp_dir: &Dir,
    dir: &Dir,
    name: &str,
    path: &VaultPath,
    bytes: &[u8],
    permissions: Option<Permissions>,
    mode: WriteMode,
) -> Result<(), WriteError> {
    let temp = create_temp(tmp_dir, bytes, permissions)?;
    let placed = match mode {
        WriteMode::Replace => tmp_dir
            .rename(&temp, dir, name)
            .map(|()| Placed::Renamed)
            .map_err(WriteError::from),
        WriteMode::Exclusive => link_no_clobber(tmp_dir, &temp, dir, name, path),
    };
    let placed = match placed {
        Ok(placed) => placed,
        Err(e) => {
            let _ = tmp_dir.remove_file(&temp);
            return Err(e);
        }
    };
    sync_dir(dir)?;
    if placed == Placed::Linked {
        // The temp name is a second name of the new, already durable file. Failing to drop it
        // leaves a hidden leftover in the staging folder, not a failed write; its removal needs
        // no fsync (a crash only leaves that name for the next lock holder's sweep).
        if let Err(e) = tmp_dir.remove_file(&temp) {
            tracing::warn!(path = %path, error = %e, "temp file left after a write");
        }
    }
    Ok(())
}

/// Creates a temp file in `dir` holding `bytes`, fsynced; its name is returned. Removed on error.
fn create_temp(dir: &Dir, bytes: &[u8], permissions: Option<Permissions>) -> Result<String, WriteError> {
    create_temp_with(dir, TEMP_PREFIX, bytes, permissions)
}

/// As `create_temp`, with names starting with `prefix`.
fn create_temp_with(
    dir: &Dir,
    prefix: &str,
    bytes: &[u8],
    permissions: Option<Permissions>,
) -> Result<String, WriteError> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true).follow(FollowSymlinks::No);
    let mut attempts = 0;
    let (name, mut file) = loop {
        let name = format!("{prefix}{:016x}", random_u64());
        match dir.open_with(&name, &options) {
            Ok(file) => break (name, file),
            // A name collision (or a leftover): try another name.
            Err(e) if e.kind() == ErrorKind::AlreadyExists && attempts < 16 => attempts += 1,
            Err(e) => return Err(e.into()),
        }
    };
    let written = (|| -> std::io::Result<()> {
        file.write_all(bytes)?;
        if let Some(permissions) = permissions {
            file.set_permissions(permissions)?;
        }
        file.sync_all()
    })();
    if let Err(e) = written {
        drop(file);
        let _ = dir.remove_file(&name);
        return Err(e.into());
    }
    Ok(name)
}

/// How `link_no_clobber` placed a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placed {
    /// Hard-linked: `src` is still there and must be removed by the caller.
    Linked,
    /// Renamed: `src` is gone.
    Renamed,
}

/// Gives the file `src` (in `src_dir`) the name `dst` (in `dst_dir`) unless `dst` exists, without
/// a check-then-act race: `link` fails with `EEXIST` atomically, where `rename` would replace.
/// On a file system without hard links (`EPERM`/`ENOTSUP`, e.g. FAT) it falls back to
/// check-then-rename; the write lock keeps every other vaultgate writer out of that window.
fn link_no_clobber(
    src_dir: &Dir,
    src: &str,
    dst_dir: &Dir,
    dst: &str,
    dst_path: &VaultPath,
) -> Result<Placed, WriteError> {
    match src_dir.hard_link(src, dst_dir, dst) {
        Ok(()) => Ok(Placed::Linked),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Err(WriteError::Exists(dst_path.clone())),
        Err(e) if matches!(e.kind(), ErrorKind::Unsupported | ErrorKind::PermissionDenied) => {
            match dst_dir.symlink_metadata(dst) {
                Ok(_) => Err(WriteError::Exists(dst_path.clone())),
                Err(e) if is_missing(&e) => {
                    src_dir.rename(src, dst_dir, dst)?;
                    Ok(Placed::Renamed)
                }
                Err(e) => Err(e.into()),
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// fsyncs a folder, so the entries created, renamed or removed in it are durable. Inside
/// [`VaultFs::deferring_dir_syncs`] the folder is only noted, and fsynced once at its end.
#[cfg(unix)]
fn sync_dir(dir: &Dir) -> std::io::Result<()> {
    // cap-std holds folders as `O_PATH` descriptors on Linux, which `fsync` refuses (`EBADF`):
    // open the folder itself for reading, relative to its handle, and fsync that.
    let mut options = OpenOptions::new();
    options.read(true).maybe_dir(true).follow(FollowSymlinks::No);
    let folder = dir.open_with(".", &options)?.into_std();
    let deferred = DEFERRED.with(|d| {
        let mut d = d.borrow_mut();
        let Some(list) = d.as_mut() else {
            return Ok(None);
        };
        list.add(folder.try_clone()?)?;
        Ok::<_, std::io::Error>(Some(()))
    })?;
    match deferred {
        Some(()) => Ok(()),
        None => folder.sync_all(),
    }
}

/// Files and folders written but not yet fsynced, one handle per file: what a group commit
/// syncs once for many writers ([`VaultFs::collecting_dir_syncs`], [`VaultFs::append_line_unsynced`]).
/// `fsync` is per file, not per handle, so one handle covers every writer's bytes.
#[derive(Debug, Default)]
pub struct Syncs {
    #[cfg(unix)]
    files: Vec<((u64, u64), std::fs::File)>,
}

impl Syncs {
    #[cfg(unix)]
    fn add(&mut self, file: std::fs::File) -> std::io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let meta = file.metadata()?;
        let key = (meta.dev(), meta.ino());
        if !self.files.iter().any(|(k, _)| *k == key) {
            self.files.push((key, file));
        }
        Ok(())
    }

    /// No file identity to share a sync by: the file is synced at once.
    #[cfg(not(unix))]
    fn add(&mut self, file: std::fs::File) -> std::io::Result<()> {
        file.sync_all()
    }

    /// Adds `other`'s files (a file both hold is synced once).
    pub fn merge(&mut self, other: Syncs) {
        #[cfg(unix)]
        for (key, file) in other.files {
            if !self.files.iter().any(|(k, _)| *k == key) {
                self.files.push((key, file));
            }
        }
        #[cfg(not(unix))]
        let _ = other;
    }

    /// How many files an fsync waits for.
    pub fn len(&self) -> usize {
        #[cfg(unix)]
        return self.files.len();
        #[cfg(not(unix))]
        0
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// fsyncs every file, all of them even when one fails; the first error is returned.
    pub fn sync(self) -> Result<(), WriteError> {
        let mut synced: Result<(), WriteError> = Ok(());
        #[cfg(unix)]
        for (_, file) in self.files {
            if let Err(e) = file.sync_all()
                && synced.is_ok()
            {
                synced = Err(e.into());
            }
        }
        synced
    }
}

#[cfg(unix)]
thread_local! {
    /// The folders whose fsync waits for the end of the innermost `collecting_dir_syncs` on this
    /// thread (`None`: none is running).
    static DEFERRED: std::cell::RefCell<Option<Syncs>> = const { std::cell::RefCell::new(None) };
}

impl VaultFs {
    /// Runs `f`, fsyncing each folder its writes touched once, at the end, instead of once per
    /// write (a transaction's note and its two inbox moves touch three folders five times).
    /// Every file's own fsync is unchanged. The folders are synced whether `f` succeeds or not,
    /// before this returns, so a caller that records anything durable afterwards (an audit line,
    /// a commit) still finds every entry of `f` durable first.
    pub fn deferring_dir_syncs<T, E: From<WriteError>>(
        &self,
        f: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        let (out, dirs) = self.collecting_dir_syncs(f);
        match (out, dirs.sync()) {
            (Ok(v), Ok(())) => Ok(v),
            (Ok(_), Err(e)) => Err(e.into()),
            (Err(e), _) => Err(e),
        }
    }

    /// Runs `f` and returns, unsynced, the folders its writes touched: the caller fsyncs them
    /// ([`Syncs::sync`]) before it records anything durable that depends on them. A group commit
    /// merges many writers' folders and syncs each once. Nested inside another collection, the
    /// folders go to the outer one.
    pub fn collecting_dir_syncs<T>(&self, f: impl FnOnce() -> T) -> (T, Syncs) {
        #[cfg(unix)]
        {
            let outer = DEFERRED.with(|d| {
                let mut d = d.borrow_mut();
                if d.is_some() {
                    return false;
                }
                *d = Some(Syncs::default());
                true
            });
            if !outer {
                return (f(), Syncs::default());
            }
            /// Ends the collection even if `f` panics (the thread is pooled): folders noted
            /// after it are synced at once again.
            struct End;
            impl Drop for End {
                fn drop(&mut self) {
                    DEFERRED.with(|d| d.borrow_mut().take());
                }
            }
            let end = End;
            let out = f();
            let dirs = DEFERRED.with(|d| d.borrow_mut().take()).unwrap_or_default();
            drop(end);
            (out, dirs)
        }
        #[cfg(not(unix))]
        {
            (f(), Syncs::default())
        }
    }
}

/// Windows cannot fsync a directory handle; NTFS journals its metadata.
#[cfg(not(unix))]
fn sync_dir(_dir: &Dir) -> std::io::Result<()> {
    Ok(())
}

fn is_missing(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory)
}

/// NFC, then lowercase: names equal under this collide on macOS and Windows (docs/contract.md#paths).
pub fn fold_name(s: &str) -> String {
    // ASCII is its own NFC: a listing of a large folder folds every name.
    if s.is_ascii() {
        return s.to_ascii_lowercase();
    }
    s.nfc().collect::<String>().to_lowercase()
}

/// `fold_name(name) == wanted` (the fold of `seg`), without allocating for the common case of
/// two ASCII names: a listing of a large folder compares every entry.
fn folds_equal(name: &str, seg: &str, wanted: &str) -> bool {
    if name.is_ascii() && seg.is_ascii() {
        return name.eq_ignore_ascii_case(seg);
    }
    fold_name(name) == wanted
}

/// Unpredictable enough for temp names: `RandomState` is seeded from the OS per process, and a
/// counter keeps names distinct within one. `create_new` is what guarantees exclusivity.
fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn names(dir: &Dir) -> Vec<String> {
        let mut names: Vec<String> = dir
            .entries()
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    /// The race `write_atomic`'s pre-check cannot close: the destination appears after the check.
    /// The link refuses it atomically, the existing file is untouched, and no temp file is left.
    #[test]
    fn exclusive_place_refuses_a_destination_that_appeared_and_cleans_up() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("a.md"), b"theirs").unwrap();
        let dir = Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap();
        let path = VaultPath::parse("a.md").unwrap();
        let e = place_bytes(&dir, &dir, "a.md", &path, b"ours", None, WriteMode::Exclusive).unwrap_err();
        assert!(matches!(e, WriteError::Exists(ref p) if p == &path), "{e:?}");
        assert_eq!(names(&dir), ["a.md"]);
        assert_eq!(std::fs::read(tmp.path().join("a.md")).unwrap(), b"theirs");
    }

    /// A failure after the temp file exists (here: the destination is a folder) removes it.
    #[test]
    fn failed_replace_leaves_no_temp_file() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("a.md")).unwrap();
        std::fs::write(tmp.path().join("a.md/keep"), b"x").unwrap();
        let dir = Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap();
        let path = VaultPath::parse("a.md").unwrap();
        assert!(place_bytes(&dir, &dir, "a.md", &path, b"ours", None, WriteMode::Replace).is_err());
        assert_eq!(names(&dir), ["a.md"]);
    }

    #[test]
    fn temp_names_are_hidden_and_distinct() {
        let a = format!("{TEMP_PREFIX}{:016x}", random_u64());
        let b = format!("{TEMP_PREFIX}{:016x}", random_u64());
        assert!(a.starts_with('.') && a != b);
        assert!(policy::path::hard_deny_segment(&a).is_err());
    }

    #[test]
    fn codes_map_to_the_wire() {
        let p = VaultPath::parse("a.md").unwrap();
        assert_eq!(WriteError::Exists(p).code(), ErrorCode::PROPOSAL_TARGET_EXISTS);
        assert_eq!(WriteError::NotFound.code(), ErrorCode::NOT_FOUND);
        assert_eq!(WriteError::TooLarge.code(), ErrorCode::TOO_LARGE);
        assert_eq!(
            WriteError::Conflict(VaultPath::parse("a.md").unwrap()).code(),
            ErrorCode::PROPOSAL_STALE_BASE
        );
        assert_eq!(WriteError::NotText.code(), ErrorCode::NOT_TEXT);
        assert_eq!(
            WriteError::Path(PathError::Outside).code(),
            ErrorCode::PATH_OUTSIDE_VAULT
        );
        assert_eq!(
            WriteError::Path(PathError::Denied("x")).code(),
            ErrorCode::PATH_DENIED
        );
        assert_eq!(
            WriteError::Io(std::io::Error::other("x")).code(),
            ErrorCode::INTERNAL
        );
    }

    #[test]
    fn folded_names() {
        assert_eq!(fold_name("Attention.md"), fold_name("attention.md"));
        assert_eq!(fold_name("cafe\u{301}.md"), fold_name("Caf\u{e9}.md"));
        assert_ne!(fold_name("a.md"), fold_name("b.md"));
        // The ASCII shortcut agrees with the full fold, and mixed names take the full fold.
        for (a, b) in [
            ("Attention.md", "attention.md"),
            ("a.md", "b.md"),
            ("\u{212a}.md", "k.md"),
            ("cafe\u{301}.md", "Caf\u{e9}.md"),
        ] {
            assert_eq!(
                folds_equal(a, b, &fold_name(b)),
                fold_name(a) == fold_name(b),
                "{a} {b}"
            );
        }
    }
}
