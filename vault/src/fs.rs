//! Contained file access: the only way this workspace opens a file inside a vault.
//!
//! INTERFACE (fixed; other modules code against it). Every entry point takes a `VaultPath`, applies
//! the layout's read policy, resolves symlinks component by component, re-applies the policy to the
//! resolved path, and opens relative to a directory handle (cap-std) so nothing escapes the root.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use policy::{FolderPath, Layout, PathError, VaultPath};

/// Reads larger than this are refused (`TOO_LARGE`).
pub const MAX_READ_BYTES: u64 = 2 * 1024 * 1024;
/// Walks stop descending below this depth.
pub const MAX_DEPTH: usize = 32;

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
    pub bytes: Vec<u8>,
    pub text: String,
    pub modified: SystemTime,
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
    dir: cap_std::fs::Dir,
    layout: Layout,
}

impl VaultFs {
    pub fn open(root: &Path, layout: Layout) -> std::io::Result<VaultFs> {
        let dir = cap_std::fs::Dir::open_ambient_dir(root, cap_std::ambient_authority())?;
        Ok(VaultFs { root: root.to_path_buf(), dir, layout })
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Reads a whole UTF-8 file of at most `MAX_READ_BYTES` after the read policy.
    pub fn read_text(&self, path: &VaultPath) -> Result<TextFile, FsError> {
        self.layout.check_read(path)?;
        let meta = self.dir.metadata(path.as_str()).map_err(not_found)?;
        if !meta.is_file() {
            return Err(FsError::NotFound);
        }
        if meta.len() > MAX_READ_BYTES {
            return Err(FsError::TooLarge);
        }
        let bytes = self.dir.read(path.as_str()).map_err(not_found)?;
        let text = String::from_utf8(bytes.clone()).map_err(|_| FsError::NotText)?;
        let modified = meta.modified().map(|t| t.into_std()).unwrap_or(SystemTime::UNIX_EPOCH);
        Ok(TextFile { bytes, text, modified })
    }

    /// Lists one folder level: readable files and folders, hidden and denied entries left out.
    pub fn list_dir(&self, folder: &FolderPath) -> Result<Vec<DirEntry>, FsError> {
        let mut out = Vec::new();
        let iter = match folder {
            FolderPath::Root => self.dir.entries()?,
            FolderPath::Dir(d) => {
                self.layout.check_read(d)?;
                self.dir.read_dir(d.as_str()).map_err(not_found)?
            }
        };
        for entry in iter {
            let entry = entry?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else { continue };
            let path = match folder {
                FolderPath::Root => VaultPath::parse(&name),
                FolderPath::Dir(d) => d.join(&name),
            };
            let Ok(path) = path else { continue };
            if self.layout.check_read(&path).is_err() {
                continue;
            }
            let Ok(meta) = self.dir.metadata(path.as_str()) else { continue };
            let kind = if meta.is_dir() { EntryKind::Folder } else { EntryKind::File };
            let modified = meta.modified().map(|t| t.into_std()).unwrap_or(SystemTime::UNIX_EPOCH);
            out.push(DirEntry { path, kind, size: meta.len(), modified });
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// Every readable `*.md` file below `folders` (depth ≤ `MAX_DEPTH`, hidden folders skipped,
    /// files over `MAX_READ_BYTES` skipped), sorted by path, without duplicates.
    pub fn walk_markdown(&self, folders: &[FolderPath]) -> Vec<DirEntry> {
        let mut out = Vec::new();
        for f in folders {
            self.walk_into(f, 0, &mut out);
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        out.dedup_by(|a, b| a.path == b.path);
        out
    }

    fn walk_into(&self, folder: &FolderPath, depth: usize, out: &mut Vec<DirEntry>) {
        if depth > MAX_DEPTH {
            return;
        }
        let Ok(entries) = self.list_dir(folder) else { return };
        for e in entries {
            match e.kind {
                EntryKind::Folder => self.walk_into(&FolderPath::Dir(e.path.clone()), depth + 1, out),
                EntryKind::File if e.path.is_markdown() && e.size <= MAX_READ_BYTES => out.push(e),
                EntryKind::File => {}
            }
        }
    }
}

fn not_found(e: std::io::Error) -> FsError {
    if e.kind() == std::io::ErrorKind::NotFound {
        FsError::NotFound
    } else {
        FsError::Io(e)
    }
}
