//! Compare-and-swap writes (docs/contract.md#proposals, "never overwrite an edit"): a file is replaced, removed or
//! moved only if it still holds exactly the bytes (SHA-256 hex, as `read_for_write` returns) the
//! transaction read under the lock.
//!
//! The write lock keeps every vaultgate writer out; the race left is an outside editor writing
//! between the check and the act. The check is therefore made *after* the act, on the very file
//! the act displaced: `RENAME_EXCHANGE` swaps the new file in and the old one out in one step, a
//! removal or move first renames the file away. If the displaced file is not the expected one,
//! the act is undone. No byte of an outside edit is ever deleted: whatever cannot be put back is
//! kept beside its file under a conflict name.

use std::io::{self, ErrorKind, Read};

use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt, OpenOptionsSyncExt};
use cap_std::fs::{Dir, OpenOptions, Permissions};
use policy::VaultPath;
use sha2::{Digest, Sha256};

use super::{
    Area, Placed, VaultFs, WriteError, WriteMode, create_temp_with, link_no_clobber, random_u64, sync_dir,
};

/// Staged names that may hold someone else's bytes (a displaced file). The staging sweep removes
/// only `TEMP_PREFIX` names, so a crash between an act and its check never deletes an edit.
pub(super) const HELD_PREFIX: &str = ".vaultgate-held-";
/// `<name>.vaultgate-conflict-<hex>` beside a file: bytes that could not be put back at `name`.
pub const CONFLICT_INFIX: &str = ".vaultgate-conflict-";
/// `EXDEV`: the staging folder is on another file system than the target.
const EXDEV: i32 = 18;

impl VaultFs {
    /// Replaces the regular file at `path` with `bytes` only if it still hashes to `expected`,
    /// else `Conflict` and the file keeps what it holds. A missing file is a `Conflict` too.
    ///
    /// A temp file is staged and fsynced as `write_atomic` does, then exchanged with the target
    /// (`RENAME_EXCHANGE`); the displaced file is hashed and, if it is not `expected`, exchanged
    /// back. The file mode is kept. Without exchange support it checks, then renames.
    pub fn replace_if(
        &self,
        area: Area,
        path: &VaultPath,
        bytes: &[u8],
        expected: &str,
    ) -> Result<(), WriteError> {
        area.check(self.layout(), path)?;
        let parent = self
            .open_parent(area, path, false)
            .map_err(|e| missing_is_conflict(e, path))?;
        let dir = parent.dir.as_ref().unwrap_or(self.root_dir());
        let name = path.file_name();
        let Some(meta) = self.check_destination(dir, &parent.segments, name)? else {
            return Err(WriteError::Conflict(path.clone()));
        };
        let staging = self.staging_dir()?;
        let permissions = meta.permissions();
        let at = Target { dir, name, path };
        let before = self.listings().before(dir);
        let done = match replace_via(&staging, false, &at, bytes, permissions.clone(), expected) {
            // A folder on another file system (a mount inside the vault): stage beside it.
            Err(WriteError::Io(e)) if e.raw_os_error() == Some(EXDEV) => {
                replace_via(dir, true, &at, bytes, permissions, expected)
            }
            other => other,
        };
        match &done {
            Ok(()) => self.listings().wrote(dir, before, &[]),
            // A conflict may have kept a second file beside the note.
            Err(_) => self.listings().forget(dir),
        }
        done
    }

    /// Creates `path` holding `bytes`, refusing (`Exists`) if anything is there: the exclusive
    /// write, atomic through a hard link (`write_atomic` with `WriteMode::Exclusive`).
    pub fn create_if_absent(&self, area: Area, path: &VaultPath, bytes: &[u8]) -> Result<(), WriteError> {
        self.write_atomic(area, path, bytes, WriteMode::Exclusive)
    }

    /// Removes the regular file at `path` only if it still hashes to `expected`, else `Conflict`
    /// (a missing file too). The file is first renamed to a held name in the staging folder, and
    /// what was moved is hashed; on a mismatch it is moved back without replacing anything, and if
    /// `path` was re-created meanwhile both are kept: the moved one as
    /// `<name>.vaultgate-conflict-<hex>` beside it.
    pub fn remove_if(&self, area: Area, path: &VaultPath, expected: &str) -> Result<(), WriteError> {
        area.check(self.layout(), path)?;
        let parent = self
            .open_parent(area, path, false)
            .map_err(|e| missing_is_conflict(e, path))?;
        let dir = parent.dir.as_ref().unwrap_or(self.root_dir());
        let name = path.file_name();
        if self.check_destination(dir, &parent.segments, name)?.is_none() {
            return Err(WriteError::Conflict(path.clone()));
        }
        let staging = self.staging_dir()?;
        let at = Target { dir, name, path };
        let before = self.listings().before(dir);
        let done = match remove_via(&staging, false, &at, expected) {
            Err(WriteError::Io(e)) if e.raw_os_error() == Some(EXDEV) => remove_via(dir, true, &at, expected),
            other => other,
        };
        match &done {
            Ok(()) => self.listings().wrote(dir, before, &[(name, false)]),
            Err(_) => self.listings().forget(dir),
        }
        done
    }

    /// Moves the regular file `from` to `to` only if it still hashes to `expected`: `Exists` if
    /// `to` is taken, `Conflict` if `from` is missing or holds other bytes (then it is moved back,
    /// or, if `from` was re-created meanwhile, kept as `<from>.vaultgate-conflict-<hex>`). Missing
    /// folders of `to` inside `to_area` are created; both folders are fsynced.
    pub fn rename_if(
        &self,
        from_area: Area,
        from: &VaultPath,
        to_area: Area,
        to: &VaultPath,
        expected: &str,
    ) -> Result<(), WriteError> {
        from_area.check(self.layout(), from)?;
        to_area.check(self.layout(), to)?;
        let src = self
            .open_parent(from_area, from, false)
            .map_err(|e| missing_is_conflict(e, from))?;
        let src_dir = src.dir.as_ref().unwrap_or(self.root_dir());
        if self
            .check_destination(src_dir, &src.segments, from.file_name())?
            .is_none()
        {
            return Err(WriteError::Conflict(from.clone()));
        }
        let dst = self.open_parent(to_area, to, true)?;
        let dst_dir = dst.dir.as_ref().unwrap_or(self.root_dir());
        if self
            .check_destination(dst_dir, &dst.segments, to.file_name())?
            .is_some()
        {
            return Err(WriteError::Exists(to.clone()));
        }
        let src_at = Target {
            dir: src_dir,
            name: from.file_name(),
            path: from,
        };
        let dst_at = Target {
            dir: dst_dir,
            name: to.file_name(),
            path: to,
        };
        let same = src.segments == dst.segments;
        // One folder is one write of it: counted once among its own writes under way.
        let src_before = self.listings().before(src_dir);
        let dst_before = if same {
            src_before
        } else {
            self.listings().before(dst_dir)
        };
        if let Err(e) = rename_checked(&src_at, &dst_at, expected) {
            self.listings().forget(src_dir);
            self.listings().forget(dst_dir);
            return Err(e);
        }
        if same {
            self.listings().wrote(
                dst_dir,
                dst_before,
                &[(from.file_name(), false), (to.file_name(), true)],
            );
        } else {
            self.listings()
                .wrote(src_dir, src_before, &[(from.file_name(), false)]);
            self.listings()
                .wrote(dst_dir, dst_before, &[(to.file_name(), true)]);
        }
        sync_dir(dst_dir)?;
        if !same {
            sync_dir(src_dir)?;
        }
        Ok(())
    }
}

/// A checked name in a folder reached without following symlinks.
struct Target<'a> {
    dir: &'a Dir,
    name: &'a str,
    path: &'a VaultPath,
}

impl Target<'_> {
    fn conflict(&self) -> WriteError {
        WriteError::Conflict(self.path.clone())
    }
}

/// A folder on the way that is missing means the file is gone: not what the caller expected.
fn missing_is_conflict(e: WriteError, path: &VaultPath) -> WriteError {
    match e {
        WriteError::NotFound => WriteError::Conflict(path.clone()),
        e => e,
    }
}

/// `replace_if` with the temp file in `tmp_dir` (`beside`: that is the target's own folder).
fn replace_via(
    tmp_dir: &Dir,
    beside: bool,
    at: &Target<'_>,
    bytes: &[u8],
    permissions: Permissions,
    expected: &str,
) -> Result<(), WriteError> {
    let temp = create_temp_with(tmp_dir, HELD_PREFIX, bytes, Some(permissions))?;
    match rename2(tmp_dir, &temp, at.dir, at.name, Rename2::Exchange) {
        Ok(true) => {}
        Ok(false) => return replace_checked_then_renamed(tmp_dir, &temp, at, expected),
        Err(e) => {
            let _ = tmp_dir.remove_file(&temp);
            return Err(e.into());
        }
    }
    // `temp` now names what was at the target: check that, and only that.
    let held = hash_entry(tmp_dir, &temp);
    if matches!(&held, Ok(Some(h)) if h == expected) {
        // The old bytes were exactly the expected ones: nothing of anyone else's is dropped.
        // Only the target's folder must be durable: a crash before the held name's removal is
        // on disk leaves old bytes under a held name, never a lost write.
        tmp_dir.remove_file(&temp)?;
        sync_dir(at.dir)?;
        return Ok(());
    }
    let ours = hex::encode(Sha256::digest(bytes));
    put_back_exchanged(tmp_dir, &temp, at, &ours)?;
    sync_dir(at.dir)?;
    if !beside {
        sync_dir(tmp_dir)?;
    }
    match held {
        Ok(_) => Err(at.conflict()),
        Err(e) => Err(e.into()),
    }
}

/// Undoes an exchange: `temp` (in `tmp_dir`) holds the displaced entry, the target normally our
/// bytes (hash `ours`). Exchanged back; whatever comes out is dropped only if it is ours, else
/// kept beside the target. If the target vanished meanwhile, the displaced entry is renamed back.
fn put_back_exchanged(tmp_dir: &Dir, temp: &str, at: &Target<'_>, ours: &str) -> io::Result<()> {
    match rename2(tmp_dir, temp, at.dir, at.name, Rename2::Exchange) {
        Ok(true) => {
            if matches!(hash_entry(tmp_dir, temp), Ok(Some(h)) if h == ours) {
                tmp_dir.remove_file(temp)
            } else {
                // A second outside write landed on top of ours: keep it too.
                keep_aside(tmp_dir, temp, at.dir, at.name).map(drop)
            }
        }
        Ok(false) => Err(io::Error::new(
            ErrorKind::Unsupported,
            "exchange no longer supported",
        )),
        Err(e) if e.kind() == ErrorKind::NotFound => restore(tmp_dir, temp, at.dir, at.name),
        Err(e) => Err(e),
    }
}

/// The fallback of `replace_if` where `RENAME_EXCHANGE` is unsupported (some network, FUSE and
/// older file systems): hash the target, then rename the staged `temp` over it.
///
/// The one window left: an edit that lands between the hash and the rename is replaced. Only
/// outside editors can be in it (vaultgate writers hold the write lock), and it lasts one
/// `rename` call after a hash, never the whole transaction.
fn replace_checked_then_renamed(
    tmp_dir: &Dir,
    temp: &str,
    at: &Target<'_>,
    expected: &str,
) -> Result<(), WriteError> {
    let result = match hash_entry(at.dir, at.name) {
        Ok(Some(h)) if h == expected => tmp_dir.rename(temp, at.dir, at.name).map_err(WriteError::from),
        Ok(_) => Err(at.conflict()),
        Err(e) => Err(e.into()),
    };
    if result.is_err() {
        let _ = tmp_dir.remove_file(temp);
        return result;
    }
    sync_dir(at.dir)?;
    Ok(())
}

/// `remove_if` with the held copy in `hold_dir` (`beside`: the file's own folder).
fn remove_via(hold_dir: &Dir, beside: bool, at: &Target<'_>, expected: &str) -> Result<(), WriteError> {
    let held = match hold(at.dir, at.name, hold_dir) {
        Ok(held) => held,
        Err(e) if e.kind() == ErrorKind::NotFound => return Err(at.conflict()),
        Err(e) => return Err(e.into()),
    };
    let hash = hash_entry(hold_dir, &held);
    if matches!(&hash, Ok(Some(h)) if h == expected) {
        hold_dir.remove_file(&held)?;
    } else {
        restore(hold_dir, &held, at.dir, at.name)?;
    }
    sync_dir(at.dir)?;
    if !beside {
        sync_dir(hold_dir)?;
    }
    match hash {
        Ok(Some(h)) if h == expected => Ok(()),
        Ok(_) => Err(at.conflict()),
        Err(e) => Err(e.into()),
    }
}

/// Renames `name` (in `dir`) to a fresh held name in `hold_dir`, never replacing anything.
fn hold(dir: &Dir, name: &str, hold_dir: &Dir) -> io::Result<String> {
    let mut attempts = 0;
    loop {
        let held = format!("{HELD_PREFIX}{:016x}", random_u64());
        match rename2(dir, name, hold_dir, &held, Rename2::NoReplace) {
            Ok(true) => return Ok(held),
            // Without `RENAME_NOREPLACE`, a fresh random name in the staging folder is as good.
            Ok(false) => match hold_dir.symlink_metadata(&held) {
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    dir.rename(name, hold_dir, &held)?;
                    return Ok(held);
                }
                Err(e) => return Err(e),
                Ok(_) if attempts < 16 => attempts += 1,
                Ok(_) => return Err(io::Error::from(ErrorKind::AlreadyExists)),
            },
            Err(e) if e.kind() == ErrorKind::AlreadyExists && attempts < 16 => attempts += 1,
            Err(e) => return Err(e),
        }
    }
}

/// Moves `held` (in `hold_dir`) back to `name` in `dir` without replacing anything; if `name`
/// was re-created meanwhile, both are kept (the held one beside it under a conflict name).
fn restore(hold_dir: &Dir, held: &str, dir: &Dir, name: &str) -> io::Result<()> {
    match rename2(hold_dir, held, dir, name, Rename2::NoReplace) {
        Ok(true) => Ok(()),
        Ok(false) => match link_no_clobber_io(hold_dir, held, dir, name) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => keep_aside(hold_dir, held, dir, name).map(drop),
            Err(e) => Err(e),
        },
        Err(e) if e.kind() == ErrorKind::AlreadyExists => keep_aside(hold_dir, held, dir, name).map(drop),
        Err(e) => Err(e),
    }
}

/// Gives `src` the name `dst` unless `dst` exists (hard link, then the old name is dropped), as
/// `link_no_clobber` does; without hard links it checks, then renames.
fn link_no_clobber_io(src_dir: &Dir, src: &str, dst_dir: &Dir, dst: &str) -> io::Result<()> {
    match src_dir.hard_link(src, dst_dir, dst) {
        Ok(()) => src_dir.remove_file(src),
        Err(e) if matches!(e.kind(), ErrorKind::Unsupported | ErrorKind::PermissionDenied) => {
            match dst_dir.symlink_metadata(dst) {
                Ok(_) => Err(io::Error::from(ErrorKind::AlreadyExists)),
                Err(e) if e.kind() == ErrorKind::NotFound => src_dir.rename(src, dst_dir, dst),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// Moves `held` beside `name` in `dir` as `<name>.vaultgate-conflict-<hex>` and returns that name.
/// If even that fails (a name too long, say), the bytes stay held in `hold_dir`, which the sweep
/// never empties: they are kept either way.
fn keep_aside(hold_dir: &Dir, held: &str, dir: &Dir, name: &str) -> io::Result<String> {
    for _ in 0..16 {
        let aside = format!("{name}{CONFLICT_INFIX}{:016x}", random_u64());
        match rename2(hold_dir, held, dir, &aside, Rename2::NoReplace) {
            Ok(true) => {
                tracing::warn!(kept = %aside, "an outside edit was kept under a conflict name");
                return Ok(aside);
            }
            Ok(false) => match link_no_clobber_io(hold_dir, held, dir, &aside) {
                Ok(()) => return Ok(aside),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                Err(e) => return Err(kept_held(held, e)),
            },
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(kept_held(held, e)),
        }
    }
    Err(kept_held(held, io::Error::from(ErrorKind::AlreadyExists)))
}

fn kept_held(held: &str, e: io::Error) -> io::Error {
    tracing::warn!(held, error = %e, "an outside edit was kept in the staging folder");
    e
}

/// The `rename_if` act and check: `RENAME_NOREPLACE`, hash what arrived, move it back on a
/// mismatch. Without `RENAME_NOREPLACE`: hard link, hash, then drop the old name; the window left
/// is an edit that replaces `from` between the hash and that unlink (outside editors only).
fn rename_checked(src: &Target<'_>, dst: &Target<'_>, expected: &str) -> Result<(), WriteError> {
    let placed = match rename2(src.dir, src.name, dst.dir, dst.name, Rename2::NoReplace) {
        Ok(true) => Placed::Renamed,
        Ok(false) => link_no_clobber(src.dir, src.name, dst.dir, dst.name, dst.path)?,
        Err(e) if e.kind() == ErrorKind::AlreadyExists => return Err(WriteError::Exists(dst.path.clone())),
        Err(e) if e.kind() == ErrorKind::NotFound => return Err(src.conflict()),
        Err(e) => return Err(e.into()),
    };
    let hash = hash_entry(dst.dir, dst.name);
    let matched = matches!(&hash, Ok(Some(h)) if h == expected);
    match (placed, matched) {
        (Placed::Renamed, true) => return Ok(()),
        (Placed::Linked, true) => {
            src.dir.remove_file(src.name)?;
            return Ok(());
        }
        // The source name still holds the file: drop only the new name.
        (Placed::Linked, false) => dst.dir.remove_file(dst.name)?,
        (Placed::Renamed, false) => restore(dst.dir, dst.name, src.dir, src.name)?,
    }
    match hash {
        Ok(_) => Err(src.conflict()),
        Err(e) => Err(e.into()),
    }
}

/// Hex SHA-256 of the regular file `name` in `dir`, streamed; `None` when nothing is there or it
/// is not a regular file (a symlink, folder or FIFO never matches an expected hash).
fn hash_entry(dir: &Dir, name: &str) -> io::Result<Option<String>> {
    let mut options = OpenOptions::new();
    // SECURITY(T-PATH): no-follow and non-blocking: a symlink or FIFO swapped in is not opened
    // through, and cannot hang the write.
    options.read(true).follow(FollowSymlinks::No).nonblock(true);
    let mut file = match dir.open_with(name, &options) {
        Ok(file) => file,
        Err(e) => {
            return match dir.symlink_metadata(name) {
                Err(m) if m.kind() == ErrorKind::NotFound => Ok(None),
                Ok(meta) if !meta.is_file() => Ok(None),
                _ => Err(e),
            };
        }
    };
    if !file.metadata()?.is_file() {
        return Ok(None);
    }
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => hasher.update(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Some(hex::encode(hasher.finalize())))
}

/// The two `renameat2` flags used here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rename2 {
    /// `RENAME_EXCHANGE`: swap both names atomically (both must exist).
    Exchange,
    /// `RENAME_NOREPLACE`: fail with `EEXIST` instead of replacing the destination.
    NoReplace,
}

/// `renameat2` on two held folder handles with single-component names. `Ok(false)`: the flag is
/// not supported by this kernel or file system (the caller falls back); `Ok(true)`: done.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn rename2(src_dir: &Dir, src: &str, dst_dir: &Dir, dst: &str, how: Rename2) -> io::Result<bool> {
    use rustix::fs::{RenameFlags, renameat_with};
    use rustix::io::Errno;
    let flags = match how {
        Rename2::Exchange => RenameFlags::EXCHANGE,
        Rename2::NoReplace => RenameFlags::NOREPLACE,
    };
    if forced_fallback() {
        return Ok(false);
    }
    match renameat_with(src_dir, src, dst_dir, dst, flags) {
        Ok(()) => Ok(true),
        Err(e) if e == Errno::INVAL || e == Errno::NOSYS || e == Errno::OPNOTSUPP => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn rename2(_src_dir: &Dir, _src: &str, _dst_dir: &Dir, _dst: &str, _how: Rename2) -> io::Result<bool> {
    Ok(false)
}

#[cfg(test)]
thread_local! {
    /// Tests set this to run the fallbacks on a file system that supports `renameat2`.
    static FORCE_FALLBACK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
fn forced_fallback() -> bool {
    FORCE_FALLBACK.with(std::cell::Cell::get)
}

#[cfg(all(not(test), any(target_os = "linux", target_os = "android")))]
fn forced_fallback() -> bool {
    false
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use policy::{FolderPath, Layout};

    fn layout() -> Layout {
        Layout::new(
            vec![FolderPath::parse("notes").unwrap()],
            vec![],
            VaultPath::parse("inbox").unwrap(),
            None,
        )
    }

    fn vault() -> (tempfile::TempDir, VaultFs) {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("notes")).unwrap();
        std::fs::write(tmp.path().join("notes/a.md"), b"old").unwrap();
        let fs = VaultFs::open(tmp.path(), layout()).unwrap();
        (tmp, fs)
    }

    fn sha(b: &[u8]) -> String {
        hex::encode(Sha256::digest(b))
    }

    fn p(s: &str) -> VaultPath {
        VaultPath::parse(s).unwrap()
    }

    fn with_fallback<T>(f: impl FnOnce() -> T) -> T {
        FORCE_FALLBACK.with(|c| c.set(true));
        let out = f();
        FORCE_FALLBACK.with(|c| c.set(false));
        out
    }

    /// Every name in the folder, hidden ones included.
    fn names(dir: &std::path::Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn fallback_replace_checks_then_renames() {
        let (tmp, fs) = vault();
        let a = p("notes/a.md");
        with_fallback(|| {
            let e = fs.replace_if(Area::Note, &a, b"new", &sha(b"other")).unwrap_err();
            assert!(matches!(e, WriteError::Conflict(_)), "{e:?}");
            assert_eq!(std::fs::read(tmp.path().join("notes/a.md")).unwrap(), b"old");
            fs.replace_if(Area::Note, &a, b"new", &sha(b"old")).unwrap();
        });
        assert_eq!(std::fs::read(tmp.path().join("notes/a.md")).unwrap(), b"new");
        assert_eq!(names(&tmp.path().join("notes")), ["a.md"]);
        assert!(names(&tmp.path().join(".vaultgate/tmp")).is_empty());
    }

    #[test]
    fn fallback_remove_and_rename_still_check() {
        let (tmp, fs) = vault();
        let a = p("notes/a.md");
        let b = p("notes/b.md");
        with_fallback(|| {
            assert!(matches!(
                fs.remove_if(Area::Note, &a, &sha(b"x")),
                Err(WriteError::Conflict(_))
            ));
            assert!(matches!(
                fs.rename_if(Area::Note, &a, Area::Note, &b, &sha(b"x")),
                Err(WriteError::Conflict(_))
            ));
            assert_eq!(names(&tmp.path().join("notes")), ["a.md"]);
            fs.rename_if(Area::Note, &a, Area::Note, &b, &sha(b"old"))
                .unwrap();
            assert_eq!(names(&tmp.path().join("notes")), ["b.md"]);
            fs.remove_if(Area::Note, &b, &sha(b"old")).unwrap();
        });
        assert!(names(&tmp.path().join("notes")).is_empty());
        assert!(names(&tmp.path().join(".vaultgate/tmp")).is_empty());
    }

    /// The race the exchange closes, staged by hand: between the check and the act an editor
    /// put other bytes at the target. The exchange sees them in the displaced file and undoes.
    #[test]
    fn exchange_check_sees_the_displaced_file_not_the_checked_one() {
        let (tmp, fs) = vault();
        let staging = fs.staging_dir().unwrap();
        let dir = Dir::open_ambient_dir(tmp.path().join("notes"), cap_std::ambient_authority()).unwrap();
        let a = p("notes/a.md");
        let at = Target {
            dir: &dir,
            name: "a.md",
            path: &a,
        };
        let perms = std::fs::metadata(tmp.path().join("notes/a.md"))
            .unwrap()
            .permissions();
        // The editor's write, after `replace_if`'s caller read "old".
        std::fs::write(tmp.path().join("notes/a.md"), b"edit").unwrap();
        let e = replace_via(
            &staging,
            false,
            &at,
            b"new",
            Permissions::from_std(perms),
            &sha(b"old"),
        )
        .unwrap_err();
        assert!(matches!(e, WriteError::Conflict(_)), "{e:?}");
        assert_eq!(std::fs::read(tmp.path().join("notes/a.md")).unwrap(), b"edit");
        assert!(names(&tmp.path().join(".vaultgate/tmp")).is_empty());
    }

    /// `remove_if`'s put-back when the name was re-created meanwhile: both are kept.
    #[test]
    fn restore_keeps_both_when_the_name_was_recreated() {
        let (tmp, fs) = vault();
        let staging = fs.staging_dir().unwrap();
        let dir = Dir::open_ambient_dir(tmp.path().join("notes"), cap_std::ambient_authority()).unwrap();
        let held = hold(&dir, "a.md", &staging).unwrap();
        assert!(held.starts_with(HELD_PREFIX));
        std::fs::write(tmp.path().join("notes/a.md"), b"recreated").unwrap();
        restore(&staging, &held, &dir, "a.md").unwrap();
        let got = names(&tmp.path().join("notes"));
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0], "a.md");
        assert!(got[1].starts_with(&format!("a.md{CONFLICT_INFIX}")), "{got:?}");
        assert_eq!(
            std::fs::read(tmp.path().join("notes/a.md")).unwrap(),
            b"recreated"
        );
        assert_eq!(
            std::fs::read(tmp.path().join("notes").join(&got[1])).unwrap(),
            b"old"
        );
        with_fallback(|| {
            let held = hold(&dir, "a.md", &staging).unwrap();
            std::fs::write(tmp.path().join("notes/a.md"), b"again").unwrap();
            restore(&staging, &held, &dir, "a.md").unwrap();
        });
        assert_eq!(names(&tmp.path().join("notes")).len(), 3);
        assert_eq!(std::fs::read(tmp.path().join("notes/a.md")).unwrap(), b"again");
    }

    #[test]
    fn held_files_survive_the_staging_sweep() {
        let (tmp, fs) = vault();
        let staging = fs.staging_dir().unwrap();
        let dir = Dir::open_ambient_dir(tmp.path().join("notes"), cap_std::ambient_authority()).unwrap();
        // As a crash between the act and its check would leave it.
        let held = hold(&dir, "a.md", &staging).unwrap();
        drop(fs.write_lock().unwrap());
        assert_eq!(names(&tmp.path().join(".vaultgate/tmp")), [held]);
    }

    /// A proposal stages its inbox files without the write lock; while it does, a lock holder's
    /// sweep leaves the staging folder alone, and the next sweep after it removes the litter.
    #[test]
    fn the_sweep_waits_for_writers_staging_without_the_lock() {
        let (tmp, fs) = vault();
        let staging = tmp.path().join(".vaultgate/tmp");
        drop(fs.write_lock().unwrap());
        let litter = staging.join(format!("{}in-use", super::super::TEMP_PREFIX));
        std::fs::write(&litter, b"half a proposal").unwrap();
        let guard = fs.staging_guard().unwrap();
        // Another handle on the same vault, as another process would have.
        let other = VaultFs::open(tmp.path(), layout()).unwrap();
        drop(other.write_lock().unwrap());
        assert!(litter.exists(), "a sweep took a file that was being staged");
        drop(guard);
        drop(other.write_lock().unwrap());
        assert!(!litter.exists(), "the litter stays after the stager left");
    }

    /// A folder vaultgate creates is a name in its parent's listing like any it writes: while
    /// another of its writes in that parent is under way (a group commit's member), the new
    /// folder still makes a second spelling of it a collision.
    #[test]
    fn a_folder_created_beside_a_write_under_way_is_a_collision_for_its_other_spellings() {
        let (tmp, fs) = vault();
        fs.create_if_absent(Area::Note, &p("notes/x/a.md"), b"a").unwrap();
        assert_eq!(fs.find_collision(&p("notes/x/Q.md")).unwrap(), None);
        let x = cap_std::fs::Dir::open_ambient_dir(tmp.path().join("notes/x"), cap_std::ambient_authority())
            .unwrap();
        let pause = || std::thread::sleep(std::time::Duration::from_millis(20));
        // Another write in notes/x begins ...
        let under_way = fs.listings().before(&x);
        pause();
        // ... a second one creates notes/x/New ...
        fs.create_if_absent(Area::Note, &p("notes/x/New/b.md"), b"b")
            .unwrap();
        pause();
        // ... and the first lands and reports.
        std::fs::write(tmp.path().join("notes/x/a2.md"), b"a2").unwrap();
        fs.listings().wrote(&x, under_way, &[("a2.md", true)]);
        assert_eq!(
            fs.find_collision(&p("notes/x/NEW/c.md")).unwrap(),
            Some(p("notes/x/New"))
        );
        assert_eq!(
            fs.find_collision(&p("notes/x/A2.md")).unwrap(),
            Some(p("notes/x/a2.md"))
        );
    }

    /// Collision checks answer from a kept listing, yet see every change: vaultgate's own
    /// writes (which update the listing) and changes made outside it (which move the folder's
    /// time, so the folder is listed again).
    #[test]
    fn collision_checks_follow_own_and_outside_changes() {
        let (tmp, fs) = vault();
        let notes = tmp.path().join("notes");
        assert_eq!(fs.find_collision(&p("notes/Fresh.md")).unwrap(), None);
        // Our own write: the kept listing learns the name.
        fs.create_if_absent(Area::Note, &p("notes/fresh.md"), b"x")
            .unwrap();
        assert_eq!(
            fs.find_collision(&p("notes/Fresh.md")).unwrap(),
            Some(p("notes/fresh.md"))
        );
        // Our own move: the old name goes, the new one comes.
        fs.rename_if(
            Area::Note,
            &p("notes/fresh.md"),
            Area::Note,
            &p("notes/moved.md"),
            &sha(b"x"),
        )
        .unwrap();
        assert_eq!(fs.find_collision(&p("notes/Fresh.md")).unwrap(), None);
        assert_eq!(
            fs.find_collision(&p("notes/MOVED.md")).unwrap(),
            Some(p("notes/moved.md"))
        );
        // Outside changes, with the folder's time moved as any later change moves it.
        std::fs::write(notes.join("outside.md"), b"o").unwrap();
        let bump = |t: u64| {
            let f = std::fs::File::open(&notes).unwrap();
            f.set_modified(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(t))
                .unwrap();
        };
        bump(1_000);
        assert_eq!(
            fs.find_collision(&p("notes/Outside.md")).unwrap(),
            Some(p("notes/outside.md"))
        );
        std::fs::remove_file(notes.join("moved.md")).unwrap();
        bump(2_000);
        assert_eq!(fs.find_collision(&p("notes/MOVED.md")).unwrap(), None);
        // Our own removal.
        fs.remove_if(Area::Note, &p("notes/outside.md"), &sha(b"o"))
            .unwrap();
        assert_eq!(fs.find_collision(&p("notes/Outside.md")).unwrap(), None);
    }

    /// Folder fsyncs deferred to the end of a batch: every write of the batch is in place, an
    /// error from inside is returned as is, and a nested batch joins the outer one.
    #[test]
    fn deferred_folder_syncs_keep_every_write_and_every_error() {
        let (tmp, fs) = vault();
        let out: Result<(), WriteError> = fs.deferring_dir_syncs(|| {
            fs.create_if_absent(Area::Note, &p("notes/b.md"), b"b")?;
            fs.deferring_dir_syncs(|| fs.create_if_absent(Area::Note, &p("notes/c.md"), b"c"))?;
            fs.rename_if(
                Area::Note,
                &p("notes/b.md"),
                Area::Note,
                &p("notes/d.md"),
                &sha(b"b"),
            )
        });
        out.unwrap();
        assert_eq!(std::fs::read(tmp.path().join("notes/c.md")).unwrap(), b"c");
        assert_eq!(std::fs::read(tmp.path().join("notes/d.md")).unwrap(), b"b");
        assert!(!tmp.path().join("notes/b.md").exists());
        let err: Result<(), WriteError> =
            fs.deferring_dir_syncs(|| fs.create_if_absent(Area::Note, &p("notes/c.md"), b"again"));
        assert!(matches!(err, Err(WriteError::Exists(_))), "{err:?}");
        // Outside a batch, writes sync as before.
        fs.create_if_absent(Area::Note, &p("notes/e.md"), b"e").unwrap();
        assert!(tmp.path().join("notes/e.md").exists());
    }

    /// `replace_if` takes the exchange path on ext4 and tmpfs: the kernel swaps the two names.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn exchange_and_noreplace_are_used_on_ext4_and_tmpfs() {
        let shm = std::path::Path::new("/dev/shm");
        let mut dirs = vec![tempfile::tempdir().unwrap()];
        if shm.is_dir() {
            dirs.push(tempfile::tempdir_in(shm).unwrap());
        }
        for tmp in &dirs {
            std::fs::write(tmp.path().join("a"), b"A").unwrap();
            std::fs::write(tmp.path().join("b"), b"B").unwrap();
            let dir = Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap();
            assert!(rename2(&dir, "a", &dir, "b", Rename2::Exchange).unwrap());
            assert_eq!(std::fs::read(tmp.path().join("a")).unwrap(), b"B");
            assert_eq!(std::fs::read(tmp.path().join("b")).unwrap(), b"A");
            let e = rename2(&dir, "a", &dir, "b", Rename2::NoReplace).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::AlreadyExists);
            assert!(rename2(&dir, "a", &dir, "c", Rename2::NoReplace).unwrap());
            assert_eq!(names(tmp.path()), ["b", "c"]);
        }
    }

    #[test]
    fn hash_entry_never_matches_what_is_not_a_regular_file() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("f"), b"x").unwrap();
        std::fs::create_dir(tmp.path().join("d")).unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink("f", tmp.path().join("l")).unwrap();
        let dir = Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap();
        assert_eq!(hash_entry(&dir, "f").unwrap(), Some(sha(b"x")));
        assert_eq!(hash_entry(&dir, "d").unwrap(), None);
        assert_eq!(hash_entry(&dir, "missing").unwrap(), None);
        #[cfg(unix)]
        assert_eq!(hash_entry(&dir, "l").unwrap(), None);
    }
}
