//! Vault-relative paths and the path policy (SPEC §5).
//!
//! INTERFACE (fixed; other crates code against it). The rule bodies are being hardened.

use serde::Serialize;

/// Why a path was refused. Decided before the file system is touched, except `Outside`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// Malformed or unsafe on some platform: `PATH_INVALID`.
    #[error("invalid path: {0}")]
    Invalid(&'static str),
    /// Well-formed but not allowed here: `PATH_DENIED`.
    #[error("path denied: {0}")]
    Denied(&'static str),
    /// A symlink resolves outside the vault: `PATH_OUTSIDE_VAULT`.
    #[error("path resolves outside the vault")]
    Outside,
}

impl PathError {
    pub fn code(&self) -> crate::ErrorCode {
        match self {
            PathError::Invalid(_) => crate::ErrorCode::PATH_INVALID,
            PathError::Denied(_) => crate::ErrorCode::PATH_DENIED,
            PathError::Outside => crate::ErrorCode::PATH_OUTSIDE_VAULT,
        }
    }
}

/// A validated, normalized vault-relative path of one or more segments joined by `/`.
/// Constructing one is the only way a client string can become a path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct VaultPath(String);

impl VaultPath {
    /// Parses a client-supplied path, refusing everything SPEC §5 calls `PATH_INVALID`.
    /// A trailing `/` is tolerated for folders.
    pub fn parse(raw: &str) -> Result<VaultPath, PathError> {
        let trimmed = raw.strip_suffix('/').unwrap_or(raw);
        if trimmed.is_empty() {
            return Err(PathError::Invalid("empty path"));
        }
        if trimmed.starts_with('/') || trimmed.contains('\\') || trimmed.contains(':') {
            return Err(PathError::Invalid("absolute or platform-specific path"));
        }
        for seg in trimmed.split('/') {
            if seg.is_empty() || seg == "." || seg == ".." {
                return Err(PathError::Invalid("empty, '.' or '..' segment"));
            }
            if seg.chars().any(char::is_control) {
                return Err(PathError::Invalid("control character"));
            }
        }
        Ok(VaultPath(trimmed.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }

    /// The last segment.
    pub fn file_name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or(&self.0)
    }

    /// The containing folder; `None` for a top-level entry (its folder is the root).
    pub fn parent(&self) -> Option<VaultPath> {
        self.0.rfind('/').map(|i| VaultPath(self.0[..i].to_owned()))
    }

    /// Appends one segment (a name read from a directory listing), validating it.
    pub fn join(&self, segment: &str) -> Result<VaultPath, PathError> {
        VaultPath::parse(&format!("{}/{}", self.0, segment))
    }

    /// `true` when the path ends in `.md` (ASCII case-insensitive).
    pub fn is_markdown(&self) -> bool {
        self.0.len() > 3 && self.0[self.0.len() - 3..].eq_ignore_ascii_case(".md")
    }
}

impl std::fmt::Display for VaultPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A configured folder: the vault root or a `VaultPath`. Containment is by components.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FolderPath {
    Root,
    Dir(VaultPath),
}

impl FolderPath {
    /// Parses a configured folder: `.` or empty is the root.
    pub fn parse(raw: &str) -> Result<FolderPath, PathError> {
        if raw.is_empty() || raw == "." || raw == "./" {
            Ok(FolderPath::Root)
        } else {
            VaultPath::parse(raw).map(FolderPath::Dir)
        }
    }

    /// Whether `path` is this folder or lies beneath it.
    pub fn contains(&self, path: &VaultPath) -> bool {
        match self {
            FolderPath::Root => true,
            FolderPath::Dir(d) => {
                let mut a = d.segments();
                let mut b = path.segments();
                loop {
                    match (a.next(), b.next()) {
                        (None, _) => return true,
                        (Some(x), Some(y)) if x == y => continue,
                        _ => return false,
                    }
                }
            }
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            FolderPath::Root => ".",
            FolderPath::Dir(d) => d.as_str(),
        }
    }
}

/// Where a readable path belongs in the vault layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoteClass {
    Note,
    Standard,
    Inbox,
}

/// A vault's layout (SPEC §1), already validated.
#[derive(Debug, Clone)]
pub struct Layout {
    pub notes: Vec<FolderPath>,
    pub standards: Vec<FolderPath>,
    pub inbox: VaultPath,
    pub readable: Vec<FolderPath>,
}

impl Layout {
    /// Builds a layout; `readable` defaults to notes + standards + inbox.
    pub fn new(
        notes: Vec<FolderPath>,
        standards: Vec<FolderPath>,
        inbox: VaultPath,
        readable: Option<Vec<FolderPath>>,
    ) -> Layout {
        let readable = readable.unwrap_or_else(|| {
            let mut r = notes.clone();
            r.extend(standards.iter().cloned());
            r.push(FolderPath::Dir(inbox.clone()));
            r
        });
        Layout { notes, standards, inbox, readable }
    }

    /// May a read tool see this file or folder? Hard deny-list first, then the allow-list.
    pub fn check_read(&self, path: &VaultPath) -> Result<(), PathError> {
        hard_deny(path)?;
        if self.readable.iter().any(|f| f.contains(path)) {
            Ok(())
        } else {
            Err(PathError::Denied("outside the vault's readable folders"))
        }
    }

    /// May a proposal target this path? A `*.md` under a `notes` folder, never in the inbox.
    pub fn check_write_target(&self, path: &VaultPath) -> Result<(), PathError> {
        hard_deny(path)?;
        if FolderPath::Dir(self.inbox.clone()).contains(path) {
            return Err(PathError::Denied("the inbox is never a proposal target"));
        }
        if !path.is_markdown() {
            return Err(PathError::Denied("only *.md notes can be written"));
        }
        if !self.notes.iter().any(|f| f.contains(path)) {
            return Err(PathError::Denied("outside the vault's notes folders"));
        }
        Ok(())
    }

    /// Classifies a readable path: inbox first, then standards, else a note.
    pub fn classify(&self, path: &VaultPath) -> NoteClass {
        if FolderPath::Dir(self.inbox.clone()).contains(path) {
            NoteClass::Inbox
        } else if self.standards.iter().any(|f| f.contains(path)) {
            NoteClass::Standard
        } else {
            NoteClass::Note
        }
    }
}

/// The hard deny-list: never readable or writable, whatever the configuration says.
pub fn hard_deny(path: &VaultPath) -> Result<(), PathError> {
    for seg in path.segments() {
        if seg.starts_with('.') {
            return Err(PathError::Denied("hidden segment"));
        }
        if seg == "node_modules" || seg == "target" {
            return Err(PathError::Denied("tooling folder"));
        }
    }
    Ok(())
}
