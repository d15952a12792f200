//! Contained file access: the only way this workspace opens a file inside a vault.
//!
//! Every entry point takes a `VaultPath` and applies the layout's read policy before any I/O. It
//! then resolves the path one component at a time from the vault's directory handle (cap-std):
//! each component is `lstat`ed relative to the handle of its real parent; a symlink's target is
//! read and spliced into the remaining components; `..` drops back to the previous handle. An
//! absolute target, or a `..` above the root, is `PATH_OUTSIDE_VAULT`, and the real path must pass
//! the read policy again. The file is then opened relative to the held parent handle with
//! no-follow, and size and type come from the opened handle, so what is read is what was checked.
//! On Linux a file read first opens its folder with one `openat2` that refuses every symlink and
//! every step out of the root; only a path that fails it (a link on the way, a missing file, a
//! name that is not a regular file) takes the walk.

use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::time::SystemTime;

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt, OpenOptionsSyncExt};
use cap_std::fs::{Dir, Metadata, OpenOptions};
use policy::path::hard_deny_segment;
use policy::{FolderPath, Layout, PathError, VaultPath};

/// Reads larger than this are refused (`TOO_LARGE`).
pub const MAX_READ_BYTES: u64 = 2 * 1024 * 1024;
/// Walks stop descending below this depth.
pub const MAX_DEPTH: usize = 32;
/// Symlinks followed while resolving one path, as Linux's `MAXSYMLINKS`; more is treated as a loop.
pub const MAX_LINK_HOPS: usize = 40;

#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error(transparent)]
    Path(#[from] PathError),
    #[error("not found")]
    NotFound,
    #[error("not UTF-8 text")]
    NotText,
    #[error("larger than the read limit")]
    TooLarge,
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

/// A text file read whole.
#[derive(Debug, Clone)]
pub struct TextFile {
    pub text: String,
    pub modified: SystemTime,
}

impl TextFile {
    /// The bytes read (the text is the same buffer, checked as UTF-8).
    pub fn bytes(&self) -> &[u8] {
        self.text.as_bytes()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Folder,
}

/// One readable entry of a folder listing (symlinks already resolved and checked).
#[derive(Debug, Clone)]
pub struct DirEntry {
    pub path: VaultPath,
    pub kind: EntryKind,
    pub size: u64,
    pub modified: SystemTime,
}

/// A vault root opened as a capability, with its layout.
pub struct VaultFs {
    root: PathBuf,
    dir: Dir,
    layout: Layout,
    /// Folder listings for collision checks (`write::listing`).
    listings: crate::write::Listings,
}

/// Which files a walk collects.
#[derive(Clone, Copy)]
enum Walk {
    /// `*.md` within the read limit.
    Notes,
    /// Everything else, of any size.
    Attachments,
}

impl Walk {
    fn wants(self, path: &VaultPath) -> bool {
        path.is_markdown() == matches!(self, Walk::Notes)
    }
    fn fits(self, len: u64) -> bool {
        matches!(self, Walk::Attachments) || len <= MAX_READ_BYTES
    }
}

/// What a path resolved to.
enum Target {
    /// The vault root itself.
    Root,
    /// A real folder, opened without following symlinks.
    Folder(Dir),
    /// A real non-folder entry (not a symlink) in the folder `parent` (`None`: the root).
    File { parent: Option<Dir>, name: String },
}

struct Resolved {
    /// The real path's segments from the root: no symlinks, no `..`; empty for the root.
    real: Vec<String>,
    target: Target,
    /// Metadata of the final real component, never of a symlink.
    meta: Metadata,
}

impl VaultFs {
    pub fn open(root: &Path, layout: Layout) -> std::io::Result<VaultFs> {
        let dir = Dir::open_ambient_dir(root, cap_std::ambient_authority())?;
        Ok(VaultFs {
            root: root.to_path_buf(),
            dir,
            layout,
            listings: crate::write::Listings::default(),
        })
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub(crate) fn listings(&self) -> &crate::write::Listings {
        &self.listings
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Reads a whole file of at most `max` bytes (any content) after the read policy; a larger
    /// one is refused (`TOO_LARGE`) without being read.
    pub fn read_bytes(&self, path: &VaultPath, max: u64) -> Result<(Vec<u8>, SystemTime), FsError> {
        self.layout.check_read(path)?;
        let (file, meta) = self.open_checked(path)?;
        if meta.len() > max {
            return Err(FsError::TooLarge);
        }
        // The file may grow after the fstat: read at most one byte past the limit.
        let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
        file.take(max + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > max {
            return Err(FsError::TooLarge);
        }
        Ok((bytes, modified(&meta)))
    }

    /// As `read_bytes`, from one open: the first `head` bytes are read and shown to `accept`
    /// before the rest is (`NOT_TEXT` when it refuses), so a file of the wrong type is refused
    /// without being read whole, and what is read is the file that was checked.
    pub fn read_bytes_if(
        &self,
        path: &VaultPath,
        max: u64,
        head: usize,
        accept: impl FnOnce(&[u8]) -> bool,
    ) -> Result<(Vec<u8>, SystemTime), FsError> {
        self.layout.check_read(path)?;
        let (mut file, meta) = self.open_checked(path)?;
        let mut bytes = Vec::with_capacity(head);
        (&mut file).take(head as u64).read_to_end(&mut bytes)?;
        if !accept(&bytes) {
            return Err(FsError::NotText);
        }
        if meta.len() > max {
            return Err(FsError::TooLarge);
        }
        bytes.reserve(usize::try_from(meta.len()).unwrap_or(0));
        // The file may grow after the fstat: read at most one byte past the limit.
        let rest = (max + 1).saturating_sub(bytes.len() as u64);
        file.take(rest).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > max {
            return Err(FsError::TooLarge);
        }
        Ok((bytes, modified(&meta)))
    }

    /// The first bytes (at most `n`) of a readable regular file, for telling its type.
    pub fn read_head(&self, path: &VaultPath, n: usize) -> Result<Vec<u8>, FsError> {
        self.layout.check_read(path)?;
        let (file, _) = self.open_checked(path)?;
        let mut head = Vec::with_capacity(n);
        file.take(n as u64).read_to_end(&mut head)?;
        Ok(head)
    }

    /// Opens the regular file `path` names once resolved (the caller applied the read policy),
    /// with the metadata of the opened handle.
    fn open_checked(&self, path: &VaultPath) -> Result<(cap_std::fs::File, Metadata), FsError> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if let Some(found) = self.open_direct(path) {
            return Ok(found);
        }
        let resolved = self.resolve_checked(path.segments())?;
        let Target::File { parent, name } = resolved.target else {
            return Err(FsError::NotFound);
        };
        // FIFOs, sockets and devices are not notes (and a FIFO would block the read).
        if !resolved.meta.is_file() {
            return Err(FsError::NotFound);
        }
        let parent = parent.as_ref().unwrap_or(&self.dir);
        let mut options = OpenOptions::new();
        // SECURITY(T-PATH): no-follow, so a symlink swapped in since resolution fails to open;
        // non-blocking, so a FIFO swapped in cannot hang the gateway.
        options.read(true).follow(FollowSymlinks::No).nonblock(true);
        let file = parent.open_with(&name, &options).map_err(not_found)?;
        // SECURITY(T-PATH): type and size of the handle we read, not of the name we resolved.
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(FsError::NotFound);
        }
        Ok((file, meta))
    }

    /// Reads a whole UTF-8 file of at most `MAX_READ_BYTES` after the read policy.
    pub fn read_text(&self, path: &VaultPath) -> Result<TextFile, FsError> {
        let (bytes, modified) = self.read_bytes(path, MAX_READ_BYTES)?;
        let text = String::from_utf8(bytes).map_err(|_| FsError::NotText)?;
        Ok(TextFile { text, modified })
    }

    /// The entry at `path` after the read policy and symlink resolution: its kind, and the size
    /// and modification time of what it resolves to. `path` is kept as given.
    pub fn metadata(&self, path: &VaultPath) -> Result<DirEntry, FsError> {
        self.layout.check_read(path)?;
        let resolved = self.resolve_checked(path.segments())?;
        let kind = match resolved.target {
            Target::Root | Target::Folder(_) => EntryKind::Folder,
            Target::File { .. } if resolved.meta.is_file() => EntryKind::File,
            Target::File { .. } => return Err(FsError::NotFound),
        };
        Ok(entry(path.clone(), kind, &resolved.meta))
    }

    /// The real vault-relative path `path` names once symlinks are resolved (`None`: the vault
    /// root), after the read policy on both.
    pub fn resolve(&self, path: &VaultPath) -> Result<Option<VaultPath>, FsError> {
        self.layout.check_read(path)?;
        let resolved = self.resolve_checked(path.segments())?;
        if resolved.real.is_empty() {
            return Ok(None);
        }
        Ok(Some(real_vault_path(&resolved.real)?))
    }

    /// Lists one folder level: readable files and folders, hidden and denied entries left out.
    /// Symlinked entries are listed under their own name with their target's kind, size and time.
    pub fn list_dir(&self, folder: &FolderPath) -> Result<Vec<DirEntry>, FsError> {
        let OpenFolder { logical, real, dir } = self.open_folder(folder)?;
        let dir = dir.as_ref().unwrap_or(&self.dir);
        let mut out = Vec::new();
        for item in dir.entries()? {
            let item = item?;
            let Some(found) = self.classify_entry(&item, logical.as_ref(), &real) else {
                continue;
            };
            match found {
                Found::Plain { path, is_dir } => {
                    // Gone since the listing: leave it out.
                    let Ok(meta) = item.metadata() else { continue };
                    let kind = if is_dir {
                        EntryKind::Folder
                    } else {
                        EntryKind::File
                    };
                    out.push(entry(path, kind, &meta));
                }
                Found::Link { path, resolved } => match resolved.target {
                    Target::Root | Target::Folder(_) => {
                        out.push(entry(path, EntryKind::Folder, &resolved.meta));
                    }
                    Target::File { .. } if resolved.meta.is_file() => {
                        out.push(entry(path, EntryKind::File, &resolved.meta));
                    }
                    Target::File { .. } => {}
                },
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// Every readable `*.md` file below `folders` (depth ≤ `MAX_DEPTH`, hidden folders skipped,
    /// files over `MAX_READ_BYTES` skipped), sorted by path, without duplicates.
    ///
    /// Symlinked files and folders are followed when they resolve to a readable place inside the
    /// vault, and listed under the link's name; a symlinked folder whose target is the folder
    /// being walked or one of its ancestors is not entered, so cycles are impossible.
    pub fn walk_markdown(&self, folders: &[FolderPath]) -> Vec<DirEntry> {
        self.walk(folders, Walk::Notes)
    }

    /// Every readable file below `folders` that is not a note (`list_attachments`), walked and
    /// sorted as `walk_markdown` does, of any size.
    pub fn walk_attachments(&self, folders: &[FolderPath]) -> Vec<DirEntry> {
        self.walk(folders, Walk::Attachments)
    }

    fn walk(&self, folders: &[FolderPath], want: Walk) -> Vec<DirEntry> {
        let mut out = Vec::new();
        for (i, f) in folders.iter().enumerate() {
            // A folder inside another listed, wholly readable folder is walked with it (depth
            // counts from the root, so the result is the same).
            let covered = folders.iter().enumerate().any(|(j, g)| {
                j != i && self.wholly_readable(g) && folder_within(f, g) && (!folder_within(g, f) || j < i)
            });
            if covered {
                continue;
            }
            let Ok(OpenFolder { logical, real, dir }) = self.open_folder(f) else {
                continue;
            };
            let dir = dir.as_ref().unwrap_or(&self.dir);
            let mut chain = Vec::new();
            self.walk_into(want, dir, logical.as_ref(), &real, &mut chain, &mut out);
        }
        // In place: a stable sort's scratch copy of a 100,000-entry walk is megabytes, and
        // entries of one path (met twice through overlapping folders) are the same file.
        out.sort_unstable_by(|a, b| a.path.cmp(&b.path));
        out.dedup_by(|a, b| a.path == b.path);
        out
    }

    /// Walks the folder `dir`, whose logical path is `logical` (`None`: root) and real path
    /// `real`. `chain` holds the real path of each folder from which a symlinked folder was
    /// entered: with `real`, every folder being walked is one of them or an ancestor of one.
    fn walk_into(
        &self,
        want: Walk,
        dir: &Dir,
        logical: Option<&VaultPath>,
        real: &[String],
        chain: &mut Vec<Vec<String>>,
        out: &mut Vec<DirEntry>,
    ) {
        let depth = logical.map_or(0, |p| p.segments().count());
        let Ok(entries) = dir.entries() else { return };
        for item in entries.flatten() {
            let Some(found) = self.classify_entry(&item, logical, real) else {
                continue;
            };
            match found {
                Found::Plain { path, is_dir: false } => {
                    // Only wanted files cost a stat; others are skipped on the entry's name alone.
                    if !want.wants(&path) {
                        continue;
                    }
                    let Ok(meta) = item.metadata() else { continue };
                    if want.fits(meta.len()) {
                        out.push(entry(path, EntryKind::File, &meta));
                    }
                }
                Found::Plain { path, is_dir: true } => {
                    if depth + 1 > MAX_DEPTH {
                        continue;
                    }
                    let name = path.file_name().to_owned();
                    // SECURITY(T-PATH): no-follow, so a folder swapped for a symlink is not entered.
                    let Ok(sub) = dir.open_dir_nofollow(&name) else {
                        continue;
                    };
                    let mut sub_real = real.to_vec();
                    sub_real.push(name);
                    // A plain subfolder cannot close a cycle: only symlinks can.
                    self.walk_into(want, &sub, Some(&path), &sub_real, chain, out);
                }
                Found::Link { path, resolved } => match resolved.target {
                    Target::File { .. } => {
                        if want.wants(&path) && resolved.meta.is_file() && want.fits(resolved.meta.len()) {
                            out.push(entry(path, EntryKind::File, &resolved.meta));
                        }
                    }
                    Target::Root => {} // always an ancestor of what is being walked
                    Target::Folder(sub) => {
                        if depth + 1 > MAX_DEPTH {
                            continue;
                        }
                        // SECURITY(T-PATH): a target that is, or contains, a folder being walked
                        // would lead back to it.
                        let target = &resolved.real;
                        if real.starts_with(target) || chain.iter().any(|c| c.starts_with(target)) {
                            continue;
                        }
                        chain.push(real.to_vec());
                        self.walk_into(want, &sub, Some(&path), &resolved.real, chain, out);
                        chain.pop();
                    }
                },
            }
        }
    }

    /// Decides what a listing entry is, or `None` when it must be left out: a name that is not a
    /// valid path segment, a hidden or unreadable path, a symlink that escapes, loops or resolves
    /// to a hidden or unreadable place, or something that is neither file, folder nor symlink.
    fn classify_entry(
        &self,
        item: &cap_std::fs::DirEntry,
        logical: Option<&VaultPath>,
        real: &[String],
    ) -> Option<Found> {
        let name = item.file_name().into_string().ok()?;
        let path = match logical {
            None => VaultPath::parse(&name),
            Some(parent) => parent.join(&name),
        }
        .ok()?;
        self.layout.check_read(&path).ok()?;
        // The type comes from the directory entry (`d_type`): no syscall on most file systems.
        let mut file_type = item.file_type().ok()?;
        if !(file_type.is_file() || file_type.is_dir() || file_type.is_symlink()) {
            // `DT_UNKNOWN` on some file systems: ask once.
            file_type = item.metadata().ok()?.file_type();
        }
        if file_type.is_symlink() {
            let segments = real
                .iter()
                .map(String::as_str)
                .chain(std::iter::once(name.as_str()));
            let resolved = self.resolve_checked(segments).ok()?;
            Some(Found::Link {
                path,
                resolved: Box::new(resolved),
            })
        } else if file_type.is_dir() {
            Some(Found::Plain { path, is_dir: true })
        } else if file_type.is_file() {
            Some(Found::Plain { path, is_dir: false })
        } else {
            None
        }
    }

    /// Is everything below `folder` readable (bar the hard deny-list)?
    fn wholly_readable(&self, folder: &FolderPath) -> bool {
        match folder {
            FolderPath::Root => self.layout.root_readable(),
            FolderPath::Dir(d) => self.layout.check_read(d).is_ok(),
        }
    }

    /// Opens a folder for listing, after the read policy and symlink resolution.
    fn open_folder(&self, folder: &FolderPath) -> Result<OpenFolder, FsError> {
        let d = match folder {
            FolderPath::Root => {
                return Ok(OpenFolder {
                    logical: None,
                    real: Vec::new(),
                    dir: None,
                });
            }
            FolderPath::Dir(d) => d,
        };
        self.layout.check_read(d)?;
        let resolved = self.resolve_checked(d.segments())?;
        let dir = match resolved.target {
            Target::Root => None,
            Target::Folder(dir) => Some(dir),
            Target::File { .. } => return Err(FsError::NotFound),
        };
        Ok(OpenFolder {
            logical: Some(d.clone()),
            real: resolved.real,
            dir,
        })
    }

    /// The common case of `open_checked` in a few system calls: the parent folder opened with
    /// one `openat2` from the root handle (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`), then, as the
    /// walk does, the name `lstat`ed there and opened only if it is a regular file. `None` sends
    /// the caller down the walk, which decides every other case (a symlink anywhere on the path,
    /// a missing file, a folder, a FIFO or device, a kernel without `openat2`).
    ///
    /// SECURITY(T-PATH): the kernel refuses a symlink in any folder on the way and any step out of
    /// the root, and the last component is checked and opened no-follow, so what opens is the file
    /// `path` names with no link followed: the real path is `path`, which the caller's read policy
    /// (hard deny-list included) already checked, as the walk would have. A FIFO or device is
    /// never opened here (its type is read first); type and size come from the opened handle.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn open_direct(&self, path: &VaultPath) -> Option<(cap_std::fs::File, Metadata)> {
        use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
        let parent = match path.as_str().rsplit_once('/') {
            Some((folder, _)) => Some(
                rustix::fs::openat2(
                    &self.dir,
                    folder,
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
                )
                .ok()?,
            ),
            None => None,
        };
        let name = path.file_name();
        let stat = match &parent {
            Some(fd) => rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW),
            None => rustix::fs::statat(&self.dir, name, AtFlags::SYMLINK_NOFOLLOW),
        }
        .ok()?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return None;
        }
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = match &parent {
            Some(dir) => rustix::fs::openat(dir, name, flags, Mode::empty()),
            None => rustix::fs::openat(&self.dir, name, flags, Mode::empty()),
        }
        .ok()?;
        let file = cap_std::fs::File::from_std(std::fs::File::from(fd));
        let meta = file.metadata().ok()?;
        meta.is_file().then_some((file, meta))
    }

    /// `resolve_segments`, then the read policy on the real path when a symlink was followed.
    fn resolve_checked<'a>(&self, segments: impl Iterator<Item = &'a str>) -> Result<Resolved, FsError> {
        let (resolved, followed) = self.resolve_segments(segments)?;
        if followed {
            // SECURITY(T-PATH): a link inside the vault to `.git/config` or to a folder outside
            // `readable` is refused like the target itself would be.
            if resolved.real.is_empty() {
                if !self.layout.root_readable() {
                    return Err(PathError::Denied("outside the vault's readable folders").into());
                }
            } else {
                self.layout.check_read(&real_vault_path(&resolved.real)?)?;
            }
        }
        Ok(resolved)
    }

    /// Resolves `segments` component by component from the root handle. Returns the resolution and
    /// whether any symlink was followed. Every file-system call is relative to a held handle, and
    /// only one folder handle is held at a time (deep paths cannot exhaust descriptors).
    fn resolve_segments<'a>(
        &self,
        segments: impl Iterator<Item = &'a str>,
    ) -> Result<(Resolved, bool), FsError> {
        let mut pending: Vec<String> = segments.map(str::to_owned).collect();
        pending.reverse(); // a stack: the next component is last
        // The real folder reached so far, and its handle (`None`: the root).
        let mut real: Vec<String> = Vec::new();
        let mut cur: Option<Dir> = None;
        let mut file: Option<(String, Metadata)> = None;
        let mut hops = 0;
        while let Some(seg) = pending.pop() {
            if seg == ".." {
                // SECURITY(T-PATH): `..` is relative to the real parent; above the root is outside.
                if real.pop().is_none() {
                    return Err(PathError::Outside.into());
                }
                cur = self.open_real(&real)?;
                continue;
            }
            // SECURITY(T-PATH): never step through a hidden or tooling folder, even on the way
            // to somewhere else (client input was checked already; this catches link targets).
            hard_deny_segment(&seg)?;
            let here = cur.as_ref().unwrap_or(&self.dir);
            let meta = here.symlink_metadata(&seg).map_err(not_found)?;
            let file_type = meta.file_type();
            if file_type.is_symlink() {
                hops += 1;
                // SECURITY(T-PATH): loops (a -> b -> a) and absurd chains end here.
                if hops > MAX_LINK_HOPS {
                    return Err(FsError::NotFound);
                }
                let target = here.read_link_contents(&seg).map_err(not_found)?;
                push_link_target(&target, &mut pending)?;
            } else if file_type.is_dir() {
                // SECURITY(T-PATH): no-follow, so the folder checked is the folder entered.
                let next = here.open_dir_nofollow(&seg).map_err(not_found)?;
                cur = Some(next);
                real.push(seg);
            } else if pending.is_empty() {
                file = Some((seg, meta));
            } else {
                // A file used as a folder (`a.md/x`), as `ENOTDIR`.
                return Err(FsError::NotFound);
            }
        }
        let resolved = match (file, cur) {
            (Some((name, meta)), parent) => {
                real.push(name.clone());
                let target = Target::File { parent, name };
                Resolved { real, target, meta }
            }
            (None, Some(dir)) => {
                let meta = dir.dir_metadata()?;
                Resolved {
                    real,
                    target: Target::Folder(dir),
                    meta,
                }
            }
            (None, None) => {
                let meta = self.dir.dir_metadata()?;
                Resolved {
                    real,
                    target: Target::Root,
                    meta,
                }
            }
        };
        Ok((resolved, hops > 0))
    }

    /// Reopens a real folder (no symlinks in it) from the root, refusing any symlink on the way.
    fn open_real(&self, real: &[String]) -> Result<Option<Dir>, FsError> {
        let mut cur: Option<Dir> = None;
        for seg in real {
            let here = cur.as_ref().unwrap_or(&self.dir);
            cur = Some(here.open_dir_nofollow(seg).map_err(not_found)?);
        }
        Ok(cur)
    }
}

/// A folder opened for listing.
struct OpenFolder {
    /// The path as asked for (`None`: the root).
    logical: Option<VaultPath>,
    /// Its real path (see `Resolved::real`).
    real: Vec<String>,
    /// Its handle (`None`: the root handle).
    dir: Option<Dir>,
}

/// What `classify_entry` found.
enum Found {
    /// Not a symlink: the listing's own handle and entry serve it.
    Plain { path: VaultPath, is_dir: bool },
    /// A symlink, resolved and checked.
    Link {
        path: VaultPath,
        resolved: Box<Resolved>,
    },
}

/// Pushes a link target's components onto the resolution stack.
fn push_link_target(target: &Path, pending: &mut Vec<String>) -> Result<(), FsError> {
    let mut parts = Vec::new();
    for component in target.components() {
        match component {
            // SECURITY(T-PATH): an absolute target leaves the vault whatever it names; we never
            // compare it against the root's ambient path.
            Component::Prefix(_) | Component::RootDir => return Err(PathError::Outside.into()),
            Component::CurDir => {}
            Component::ParentDir => parts.push("..".to_owned()),
            Component::Normal(name) => match name.to_str() {
                Some(name) => parts.push(name.to_owned()),
                None => return Err(PathError::Denied("symlink target is not UTF-8").into()),
            },
        }
    }
    // An empty target names nothing (`ENOENT`); `.` is the link's own folder.
    if target.as_os_str().is_empty() {
        return Err(FsError::NotFound);
    }
    pending.extend(parts.into_iter().rev());
    Ok(())
}

/// The real path as a `VaultPath`; a name the parser refuses is a place reads may not go.
fn real_vault_path(real: &[String]) -> Result<VaultPath, PathError> {
    VaultPath::from_segments(real.iter().map(String::as_str))
        .map_err(|_| PathError::Denied("symlink resolves to a name vaultgate refuses"))
}

/// Is `inner` the same folder as `outer` or beneath it?
fn folder_within(inner: &FolderPath, outer: &FolderPath) -> bool {
    match (inner, outer) {
        (_, FolderPath::Root) => true,
        (FolderPath::Root, FolderPath::Dir(_)) => false,
        (FolderPath::Dir(i), FolderPath::Dir(_)) => outer.contains(i),
    }
}

fn entry(path: VaultPath, kind: EntryKind, meta: &Metadata) -> DirEntry {
    DirEntry {
        path,
        kind,
        size: meta.len(),
        modified: modified(meta),
    }
}

fn modified(meta: &Metadata) -> SystemTime {
    meta.modified()
        .map(|t| t.into_std())
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

fn not_found(e: std::io::Error) -> FsError {
    match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory => FsError::NotFound,
        _ => FsError::Io(e),
    }
}

/// Write-side access for `crate::write`: the root handle, and the read-side resolution used to
/// tell where a symlink met on a write path leads.
impl VaultFs {
    pub(crate) fn root_dir(&self) -> &Dir {
        &self.dir
    }

    /// Whether `segments` (from the root) resolve outside the vault, following symlinks as reads do.
    pub(crate) fn resolves_outside(&self, segments: &[String]) -> bool {
        matches!(
            self.resolve_segments(segments.iter().map(String::as_str)),
            Err(FsError::Path(PathError::Outside))
        )
    }
}

/// Opens (creating if needed) the lock file `name` in `dir`: the write lock, the staging lock
/// and the index's locks alike.
pub(crate) fn open_lock_file(dir: &cap_std::fs::Dir, name: &str) -> std::io::Result<std::fs::File> {
    use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt};
    let mut options = cap_std::fs::OpenOptions::new();
    // SECURITY(T-PATH): a lock file swapped for a symlink is not followed.
    options
        .read(true)
        .write(true)
        .create(true)
        .follow(FollowSymlinks::No);
    Ok(dir.open_with(name, &options)?.into_std())
}
