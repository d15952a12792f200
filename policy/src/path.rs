//! Vault-relative paths and the path policy (docs/contract.md#paths).
//!
//! Everything here is syntactic: `PATH_INVALID` and `PATH_DENIED` are decided from the string
//! alone, before the file system is touched, so a refusal reveals nothing about what exists.
//! Symlink resolution (`PATH_OUTSIDE_VAULT`) lives in `vault::fs`.

use icu_properties::props::{
    CanonicalCombiningClass, Emoji, EmojiModifier, ExtendedPictographic, GeneralCategory, JoiningType,
};
use icu_properties::{
    CodePointMapData, CodePointMapDataBorrowed, CodePointSetData, CodePointSetDataBorrowed,
};
use serde::Serialize;
use unicode_normalization::UnicodeNormalization;

use crate::text::{CATEGORY, is_hidden};

/// Longest accepted path, in bytes (docs/contract.md#paths).
pub const MAX_PATH_BYTES: usize = 1024;
/// Longest accepted segment, in bytes: common file systems refuse longer names (`NAME_MAX`), and
/// refusing here keeps that a `PATH_INVALID` instead of an I/O error.
pub const MAX_SEGMENT_BYTES: usize = 255;

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
    /// Parses a client-supplied path, refusing everything docs/contract.md#paths calls `PATH_INVALID`.
    /// A single trailing `/` is tolerated for folders. Unicode is kept as given (not normalized),
    /// so a path names exactly the bytes on disk.
    pub fn parse(raw: &str) -> Result<VaultPath, PathError> {
        // SECURITY(T-PATH): bound the input before any other work.
        if raw.len() > MAX_PATH_BYTES {
            return Err(PathError::Invalid("longer than 1024 bytes"));
        }
        let trimmed = raw.strip_suffix('/').unwrap_or(raw);
        if trimmed.is_empty() {
            return Err(PathError::Invalid("empty path"));
        }
        // SECURITY(T-PATH): `/x` and UNC `//server/x`; `\\server` and `C:` fail per segment below.
        if trimmed.starts_with('/') {
            return Err(PathError::Invalid("absolute path"));
        }
        for seg in trimmed.split('/') {
            validate_segment(seg)?;
        }
        Ok(VaultPath(trimmed.to_owned()))
    }

    /// Builds a path from segments, each validated like `parse` does.
    pub fn from_segments<'a, I>(segments: I) -> Result<VaultPath, PathError>
    where
        I: IntoIterator<Item = &'a str>,
    {
        let mut out = String::new();
        for seg in segments {
            validate_segment(seg)?;
            if !out.is_empty() {
                out.push('/');
            }
            out.push_str(seg);
            if out.len() > MAX_PATH_BYTES {
                return Err(PathError::Invalid("longer than 1024 bytes"));
            }
        }
        if out.is_empty() {
            return Err(PathError::Invalid("empty path"));
        }
        Ok(VaultPath(out))
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

    /// Appends exactly one segment (a name read from a directory listing), validating it.
    pub fn join(&self, segment: &str) -> Result<VaultPath, PathError> {
        // SECURITY(T-PATH): a "segment" holding `/` would smuggle in extra components.
        validate_segment(segment)?;
        let joined = format!("{}/{}", self.0, segment);
        if joined.len() > MAX_PATH_BYTES {
            return Err(PathError::Invalid("longer than 1024 bytes"));
        }
        Ok(VaultPath(joined))
    }

    /// `true` when the path ends in `.md` (ASCII case-insensitive).
    pub fn is_markdown(&self) -> bool {
        self.0.len() > 3
            && self.0.is_char_boundary(self.0.len() - 3)
            && self.0[self.0.len() - 3..].eq_ignore_ascii_case(".md")
    }
}

impl std::fmt::Display for VaultPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Checks one path segment against every `PATH_INVALID` rule of docs/contract.md#paths. `VaultPath::parse` runs
/// it on each segment; callers may use it on names read from a directory.
pub fn validate_segment(seg: &str) -> Result<(), PathError> {
    if seg.is_empty() {
        return Err(PathError::Invalid("empty segment"));
    }
    // SECURITY(T-PATH): traversal; `./x` is refused too, there is one spelling per path.
    if seg == "." || seg == ".." {
        return Err(PathError::Invalid("'.' or '..' segment"));
    }
    if seg.len() > MAX_SEGMENT_BYTES {
        return Err(PathError::Invalid("segment longer than 255 bytes"));
    }
    for c in seg.chars() {
        match c {
            '/' => return Err(PathError::Invalid("'/' inside a segment")),
            // SECURITY(T-PATH): a separator on Windows, and how `\\server` UNC paths start.
            '\\' => return Err(PathError::Invalid("backslash")),
            // SECURITY(T-PATH): drive letters (`C:`) and NTFS alternate data streams (`a.md:x`).
            ':' => return Err(PathError::Invalid("':' (drive letter or alternate data stream)")),
            // NUL, C0, DEL and C1: truncate C strings, forge log lines, break terminals.
            c if c.is_control() => return Err(PathError::Invalid("control character")),
            _ => {}
        }
    }
    // SECURITY(T-PATH): invisible, blank, reordering, unassigned or private-use characters make
    // a path read as another (or as nothing) to the person who approves it.
    if let Some(why) = hidden_in_segment(seg) {
        return Err(PathError::Invalid(why));
    }
    // Windows strips a trailing dot or space, so `a.md.` and `a.md ` would alias `a.md`.
    if seg.ends_with('.') || seg.ends_with(' ') {
        return Err(PathError::Invalid("segment ends in '.' or space"));
    }
    if is_reserved_device_name(seg) {
        return Err(PathError::Invalid("reserved device name"));
    }
    // SECURITY(T-PATH): we never percent-decode, so `%2e%2e` is only an odd name here; but a
    // downstream tool (a URL, a shell helper, an editor plugin) may decode it into `..`, `/`, `\`
    // or NUL. Such names have no legitimate use in notes, so refuse them rather than pass them on.
    if has_encoded_separator(seg) {
        return Err(PathError::Invalid("percent-encoded dot, separator or NUL"));
    }
    Ok(())
}

/// Why `seg` holds a character no path may hold beyond the controls: one that a person sees
/// escaped ([`crate::text::is_hidden`]: bidi controls, Cf, default-ignorable, blank letters; Trojan
/// Source, CVE-2021-42574), an unassigned code point or a private-use one. U+200C and U+200D are
/// kept where IDNA's CONTEXTJ rules (RFC 5892 A.1, A.2) allow them — Persian, Indic scripts — and
/// U+200D and U+FE0F inside an emoji sequence.
fn hidden_in_segment(seg: &str) -> Option<&'static str> {
    if seg.is_ascii() {
        return None;
    }
    let chars: Vec<char> = seg.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii() {
            continue;
        }
        match CATEGORY.get(c) {
            GeneralCategory::Unassigned => return Some("unassigned code point"),
            GeneralCategory::PrivateUse => return Some("private-use character"),
            _ => {}
        }
        if is_hidden(c) && !joiner_in_context(&chars, i) {
            return Some("invisible, blank or bidirectional-control character");
        }
    }
    None
}

/// Whether the joiner or variation selector at `chars[i]` is one a word or an emoji needs.
fn joiner_in_context(chars: &[char], i: usize) -> bool {
    const CCC: CodePointMapDataBorrowed<'static, CanonicalCombiningClass> =
        CodePointMapData::<CanonicalCombiningClass>::new();
    const JOINING: CodePointMapDataBorrowed<'static, JoiningType> = CodePointMapData::<JoiningType>::new();
    const EMOJI: CodePointSetDataBorrowed<'static> = CodePointSetData::new::<Emoji>();
    const PICTOGRAPHIC: CodePointSetDataBorrowed<'static> = CodePointSetData::new::<ExtendedPictographic>();
    const MODIFIER: CodePointSetDataBorrowed<'static> = CodePointSetData::new::<EmojiModifier>();
    let before = i.checked_sub(1).map(|j| chars[j]);
    let after = chars.get(i + 1).copied();
    let after_virama = before.is_some_and(|b| CCC.get(b) == CanonicalCombiningClass::Virama);
    match chars[i] {
        // ZWNJ: after a virama, or between a left- or dual-joining and a right- or dual-joining
        // letter with only transparent ones in between.
        '\u{200C}' => {
            let jt = |c: &char| JOINING.get(*c);
            let left = chars[..i]
                .iter()
                .rev()
                .find(|c| jt(c) != JoiningType::Transparent)
                .is_some_and(|c| matches!(jt(c), JoiningType::LeftJoining | JoiningType::DualJoining));
            let right = chars[i + 1..]
                .iter()
                .find(|c| jt(c) != JoiningType::Transparent)
                .is_some_and(|c| matches!(jt(c), JoiningType::RightJoining | JoiningType::DualJoining));
            after_virama || (left && right)
        }
        // ZWJ: after a virama, or joining two pictographs (a modifier or U+FE0F may follow the first).
        '\u{200D}' => {
            let base = chars[..i]
                .iter()
                .rev()
                .find(|c| **c != '\u{FE0F}' && !MODIFIER.contains(**c));
            after_virama
                || (base.is_some_and(|b| PICTOGRAPHIC.contains(*b))
                    && after.is_some_and(|a| PICTOGRAPHIC.contains(a)))
        }
        // VS16: the emoji presentation of the character before it.
        '\u{FE0F}' => before.is_some_and(|b| EMOJI.contains(b)),
        _ => false,
    }
}

/// Windows device names, matched on the whole segment or its stem (before the first dot, trailing
/// spaces ignored as Windows does), case-insensitively; `COM¹`…`LPT³` included as Windows does.
fn is_reserved_device_name(seg: &str) -> bool {
    let stem = seg.split('.').next().unwrap_or(seg).trim_end_matches(' ');
    const NAMES: [&str; 6] = ["CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"];
    if NAMES.iter().any(|n| stem.eq_ignore_ascii_case(n)) {
        return true;
    }
    let (Some(prefix), Some(rest)) = (stem.get(..3), stem.get(3..)) else {
        return false;
    };
    let mut digit = rest.chars();
    (prefix.eq_ignore_ascii_case("COM") || prefix.eq_ignore_ascii_case("LPT"))
        && matches!(
            (digit.next(), digit.next()),
            (Some('0'..='9' | '¹' | '²' | '³'), None)
        )
}

/// `%2e` `%2f` `%5c` `%00` in any case, also double-encoded (`%252e`), since some tools decode twice.
fn has_encoded_separator(seg: &str) -> bool {
    if !seg.contains('%') {
        return false;
    }
    let mut s = seg.to_ascii_lowercase();
    // Each pass shortens the string, so this ends.
    while s.contains("%25") {
        s = s.replace("%25", "%");
    }
    ["%2e", "%2f", "%5c", "%00"].iter().any(|t| s.contains(t))
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

    /// Whether `path` is this folder or lies beneath it. Compares whole segments exactly, never
    /// string prefixes (`notes` does not contain `notes2/x.md`).
    pub fn contains(&self, path: &VaultPath) -> bool {
        self.contains_by(path, |a, b| a == b)
    }

    /// Like `contains`, but segments compare equal when they differ only by case or Unicode
    /// normalization, as they do on case-insensitive file systems (macOS, Windows). Use it where a
    /// match *denies* something, so `Inbox/x.md` cannot slip past an `inbox` rule.
    pub fn contains_folded(&self, path: &VaultPath) -> bool {
        self.contains_by(path, segments_eq_folded)
    }

    fn contains_by(&self, path: &VaultPath, eq: impl Fn(&str, &str) -> bool) -> bool {
        match self {
            FolderPath::Root => true,
            FolderPath::Dir(d) => {
                let mut a = d.segments();
                let mut b = path.segments();
                loop {
                    match (a.next(), b.next()) {
                        (None, _) => return true,
                        (Some(x), Some(y)) if eq(x, y) => continue,
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

/// Equal up to case and Unicode normalization (NFC, then lowercase).
fn segments_eq_folded(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    if a.is_ascii() && b.is_ascii() {
        return a.eq_ignore_ascii_case(b);
    }
    let fold = |s: &str| s.nfc().collect::<String>().to_lowercase();
    fold(a) == fold(b)
}

/// Where a readable path belongs in the vault layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoteClass {
    Note,
    Standard,
    Inbox,
}

/// A vault's layout (docs/contract.md#concepts), already validated.
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
        Layout {
            notes,
            standards,
            inbox,
            readable,
        }
    }

    /// May a read tool see this file or folder? Hard deny-list first, then the allow-list.
    /// Purely syntactic; `vault::fs` re-applies it to the path a symlink resolves to.
    pub fn check_read(&self, path: &VaultPath) -> Result<(), PathError> {
        hard_deny(path)?;
        // Allow-list matches are exact: a case variant is denied, which fails safe.
        if self.readable.iter().any(|f| f.contains(path)) {
            Ok(())
        } else {
            Err(PathError::Denied("outside the vault's readable folders"))
        }
    }

    /// Is the vault root itself readable (a `.` entry in `readable`)?
    pub fn root_readable(&self) -> bool {
        self.readable.contains(&FolderPath::Root)
    }

    /// May a proposal target this path? A `*.md` under a `notes` folder, never in the inbox.
    pub fn check_write_target(&self, path: &VaultPath) -> Result<(), PathError> {
        hard_deny(path)?;
        // SECURITY(T-PATH): folded, so `INBOX/x.md` is refused on a case-insensitive disk too.
        if self.inbox_contains(path) {
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
        if self.inbox_contains(path) {
            NoteClass::Inbox
        } else if self.standards.iter().any(|f| f.contains(path)) {
            NoteClass::Standard
        } else {
            NoteClass::Note
        }
    }

    fn inbox_contains(&self, path: &VaultPath) -> bool {
        FolderPath::Dir(self.inbox.clone()).contains_folded(path)
    }
}

/// The hard deny-list: never readable or writable, whatever the configuration says.
pub fn hard_deny(path: &VaultPath) -> Result<(), PathError> {
    path.segments().try_for_each(hard_deny_segment)
}

/// The hard deny-list for one segment (also applied to each component a symlink resolves through).
pub fn hard_deny_segment(seg: &str) -> Result<(), PathError> {
    // SECURITY(T-PATH): `.git`, `.obsidian`, `.vaultgate`, `.env` and every other dot-name.
    if seg.starts_with('.') {
        return Err(PathError::Denied("hidden segment"));
    }
    // Case-insensitive: on macOS and Windows `Target` is the same folder as `target`.
    if seg.eq_ignore_ascii_case("node_modules") || seg.eq_ignore_ascii_case("target") {
        return Err(PathError::Denied("tooling folder"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn folder(s: &str) -> FolderPath {
        FolderPath::parse(s).unwrap()
    }

    /// notes = ["."], standards = ["docs"], inbox = "inbox", readable by default.
    fn layout_root() -> Layout {
        let inbox = VaultPath::parse("inbox").unwrap();
        Layout::new(vec![FolderPath::Root], vec![folder("docs")], inbox, None)
    }

    /// notes = ["notes", "z"], standards = ["docs"], inbox = "inbox", readable by default.
    fn layout_notes() -> Layout {
        let inbox = VaultPath::parse("inbox").unwrap();
        Layout::new(
            vec![folder("notes"), folder("z")],
            vec![folder("docs")],
            inbox,
            None,
        )
    }

    fn outcome(r: Result<(), PathError>) -> char {
        match r {
            Ok(()) => 'O',
            Err(PathError::Invalid(_)) => 'I',
            Err(PathError::Denied(_)) => 'D',
            Err(PathError::Outside) => 'X',
        }
    }

    /// The path-attack table (T-PATH). Expected outcomes, in order: read and write target with
    /// `layout_root`, then read and write target with `layout_notes`.
    /// O = allowed, I = `PATH_INVALID`, D = `PATH_DENIED`.
    const TABLE: &[(&str, &str)] = &[
        // Ordinary paths.
        ("a.md", "OODD"),
        ("notes/a.md", "OOOO"),
        ("notes/a.md/", "OOOO"),
        ("notes/sub/deep/a.md", "OOOO"),
        ("notes", "ODOD"),
        ("notes/", "ODOD"),
        ("notes/a.txt", "ODOD"),
        ("notes/A.MD", "OOOO"),
        ("notes/日本語.md", "OOOO"),
        ("notes/😀", "ODOD"),
        ("notes/ leading space.md", "OOOO"),
        ("notes/a b.md", "OOOO"),
        ("notes/a..md", "OOOO"),
        ("notes/a.b.c.md", "OOOO"),
        ("notes/100%.md", "OOOO"),
        ("notes/100%25.md", "OOOO"),
        ("notes/con-tact.md", "OOOO"),
        ("notes/console.md", "OOOO"),
        ("notes/COM10.md", "OOOO"),
        ("notes/LPT.md", "OOOO"),
        ("notes/target.md", "OOOO"),
        ("z/a.md", "OOOO"),
        ("z2/a.md", "OODD"),
        ("notes2/a.md", "OODD"),
        ("notesx.md", "OODD"),
        ("docs/standard.md", "OOOD"),
        ("inbox/p.md", "ODOD"),
        // Case variants of the inbox are still the inbox on macOS and Windows.
        ("Inbox/p.md", "ODDD"),
        ("INBOX/x.md", "ODDD"),
        // Hard deny-list.
        (".git/config", "DDDD"),
        (".git", "DDDD"),
        (".obsidian/app.json", "DDDD"),
        (".vaultgate/index.sqlite", "DDDD"),
        (".env", "DDDD"),
        (".md", "DDDD"),
        ("notes/.hidden.md", "DDDD"),
        ("notes/..a.md", "DDDD"),
        ("notes/.git/HEAD", "DDDD"),
        ("notes/.DS_Store", "DDDD"),
        ("node_modules/x.md", "DDDD"),
        ("notes/node_modules/a.md", "DDDD"),
        ("Node_Modules/a.md", "DDDD"),
        ("target/a.md", "DDDD"),
        ("notes/TARGET/a.md", "DDDD"),
        // Empty, absolute, drive letters, UNC, backslashes.
        ("", "IIII"),
        ("/", "IIII"),
        ("/etc/passwd", "IIII"),
        ("/notes/a.md", "IIII"),
        ("//server/share/x.md", "IIII"),
        ("\\\\server\\share", "IIII"),
        ("notes\\a.md", "IIII"),
        ("C:", "IIII"),
        ("c:/x", "IIII"),
        ("C:\\Windows\\win.ini", "IIII"),
        ("notes/a.md:Zone.Identifier", "IIII"),
        // Traversal and empty segments.
        ("..", "IIII"),
        ("../secret", "IIII"),
        ("notes/../../etc/passwd", "IIII"),
        ("notes/..", "IIII"),
        (".", "IIII"),
        ("./", "IIII"),
        ("./notes/a.md", "IIII"),
        ("notes/./a.md", "IIII"),
        ("notes//a.md", "IIII"),
        ("notes/a.md//", "IIII"),
        // Control characters.
        ("notes/a\0.md", "IIII"),
        ("notes/a\n.md", "IIII"),
        ("notes/a\r.md", "IIII"),
        ("notes/a\t.md", "IIII"),
        ("notes/a\u{1b}[31m.md", "IIII"),
        ("notes/a\u{7f}.md", "IIII"),
        ("notes/a\u{85}.md", "IIII"),
        // Trailing dot or space.
        ("notes/a.", "IIII"),
        ("notes/a.md.", "IIII"),
        ("notes/a ", "IIII"),
        ("notes./a.md", "IIII"),
        ("notes /a.md", "IIII"),
        // Windows device names.
        ("CON", "IIII"),
        ("con", "IIII"),
        ("nul.md", "IIII"),
        ("notes/COM1.txt", "IIII"),
        ("notes/lpt9.tar.gz", "IIII"),
        ("notes/aux", "IIII"),
        ("notes/Prn.md", "IIII"),
        ("notes/COM0.md", "IIII"),
        ("notes/com¹.md", "IIII"),
        ("notes/LPT³", "IIII"),
        ("notes/CON .md", "IIII"),
        ("notes/conin$.md", "IIII"),
        ("aux/a.md", "IIII"),
        // Zero-width and bidirectional controls.
        ("notes/a\u{200B}.md", "IIII"),
        ("notes/a\u{200D}.md", "IIII"),
        ("notes/\u{FEFF}a.md", "IIII"),
        ("notes/evil\u{202E}dm.exe", "IIII"),
        ("notes/a\u{2066}b.md", "IIII"),
        ("notes/a\u{061C}.md", "IIII"),
        ("notes/a\u{2060}.md", "IIII"),
        ("notes/a\u{2028}.md", "IIII"),
        ("\u{200B}.git/config", "IIII"),
        // What the red-team passed: format, default-ignorable, blank letters (SECURITY(T-PATH)).
        ("notes/a\u{0600}.md", "IIII"),
        ("notes/b\u{1D173}\u{FE0F}.md", "IIII"),
        ("notes/a\u{FE0F}.md", "IIII"),
        ("notes/a\u{E0100}.md", "IIII"),
        ("notes/a\u{034F}.md", "IIII"),
        ("notes/\u{115F}.md", "IIII"),
        ("notes/a\u{1160}.md", "IIII"),
        ("notes/\u{3164}.md", "IIII"),
        ("notes/a\u{FFA0}.md", "IIII"),
        ("notes/a\u{2800}.md", "IIII"),
        ("notes/a\u{17B5}.md", "IIII"),
        ("notes/a\u{180B}.md", "IIII"),
        ("notes/a\u{00AD}b.md", "IIII"),
        ("notes/a\u{E0041}.md", "IIII"),
        // Unassigned and private use.
        ("notes/a\u{0378}.md", "IIII"),
        ("notes/a\u{E000}.md", "IIII"),
        ("notes/a\u{F0000}.md", "IIII"),
        ("notes/a\u{FFFF}.md", "IIII"),
        // Joiners out of their context: after a Latin letter, between unjoined letters, alone.
        ("notes/a\u{200C}b.md", "IIII"),
        ("notes/\u{200D}\u{1F600}.md", "IIII"),
        ("notes/\u{1F600}\u{200D}.md", "IIII"),
        ("notes/\u{1F600}\u{200D}x.md", "IIII"),
        ("notes/x\u{FE0F}.md", "IIII"),
        // Percent-encoded traversal.
        ("notes/%2e%2e/secret", "IIII"),
        ("%2E%2E/secret", "IIII"),
        ("notes/a%2fb.md", "IIII"),
        ("notes/a%5Cb.md", "IIII"),
        ("notes/a%00.md", "IIII"),
        ("notes/%252e%252e", "IIII"),
        ("notes/%25252F", "IIII"),
    ];

    #[test]
    fn joiners_and_variation_selectors_stay_where_words_and_emoji_need_them() {
        for ok in [
            // Persian "I want": ZWNJ between a dual-joining yeh and a dual-joining khah.
            "notes/\u{0645}\u{06CC}\u{200C}\u{062E}\u{0648}\u{0627}\u{0647}\u{0645}.md",
            // Devanagari: ZWJ and ZWNJ after a virama.
            "notes/\u{0915}\u{094D}\u{200D}\u{0937}.md",
            "notes/\u{0915}\u{094D}\u{200C}\u{0937}.md",
            // Emoji: family (ZWJ), rainbow flag (FE0F, ZWJ), skin tone then ZWJ, keycap, heart.
            "notes/\u{1F468}\u{200D}\u{1F469}\u{200D}\u{1F467}.md",
            "notes/\u{1F3F3}\u{FE0F}\u{200D}\u{1F308}.md",
            "notes/\u{1F469}\u{1F3FD}\u{200D}\u{1F4BB}.md",
            "notes/1\u{FE0F}\u{20E3} one.md",
            "notes/\u{2764}\u{FE0F} love.md",
            // Ordinary non-ASCII names.
            "notes/中文笔记.md",
            "notes/Ελληνικά.md",
            "notes/café au lait.md",
            "notes/\u{05E2}\u{05D1}\u{05E8}\u{05D9}\u{05EA}.md",
        ] {
            assert!(VaultPath::parse(ok).is_ok(), "{ok:?}: {:?}", VaultPath::parse(ok));
        }
    }

    #[test]
    fn path_attack_table() {
        assert!(TABLE.len() >= 60);
        let (a, b) = (layout_root(), layout_notes());
        for &(raw, expected) in TABLE {
            let got: String = match VaultPath::parse(raw) {
                Ok(p) => {
                    assert_eq!(p.as_str(), raw.strip_suffix('/').unwrap_or(raw), "{raw:?}");
                    [
                        a.check_read(&p),
                        a.check_write_target(&p),
                        b.check_read(&p),
                        b.check_write_target(&p),
                    ]
                    .into_iter()
                    .map(outcome)
                    .collect()
                }
                Err(e) => {
                    assert!(matches!(e, PathError::Invalid(_)), "{raw:?}: {e:?}");
                    "IIII".to_owned()
                }
            };
            assert_eq!(got, expected, "{raw:?}");
        }
    }

    #[test]
    fn length_limits_are_bytes() {
        let deep = "ab/".repeat(341) + "c"; // 1024 bytes
        assert_eq!(deep.len(), 1024);
        assert!(VaultPath::parse(&deep).is_ok());
        assert_eq!(
            VaultPath::parse(&(deep.clone() + "d")),
            Err(PathError::Invalid("longer than 1024 bytes"))
        );
        assert!(
            VaultPath::parse(&"é".repeat(513)).is_err(),
            "1026 bytes though 513 chars"
        );
        assert!(VaultPath::parse(&"a".repeat(255)).is_ok());
        assert!(VaultPath::parse(&"a".repeat(256)).is_err());
    }

    #[test]
    fn join_takes_exactly_one_valid_segment() {
        let notes = VaultPath::parse("notes").unwrap();
        assert_eq!(notes.join("a.md").unwrap().as_str(), "notes/a.md");
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a/",
            "/a",
            "a\\b",
            "a:b",
            "con",
            "a\u{200B}",
        ] {
            assert!(matches!(notes.join(bad), Err(PathError::Invalid(_))), "{bad:?}");
        }
        let long = VaultPath::parse(&("ab/".repeat(340) + "c")).unwrap();
        assert!(long.join("abcd").is_err());
    }

    #[test]
    fn from_segments_validates_each_segment() {
        assert_eq!(
            VaultPath::from_segments(["notes", "a.md"]).unwrap().as_str(),
            "notes/a.md"
        );
        assert!(VaultPath::from_segments([]).is_err());
        assert!(VaultPath::from_segments(["notes", ".."]).is_err());
        assert!(VaultPath::from_segments(["a/b"]).is_err());
    }

    #[test]
    fn accessors() {
        let p = VaultPath::parse("notes/sub/a.md").unwrap();
        assert_eq!(p.file_name(), "a.md");
        assert_eq!(p.parent().unwrap().as_str(), "notes/sub");
        assert_eq!(VaultPath::parse("a.md").unwrap().parent(), None);
        assert_eq!(p.segments().collect::<Vec<_>>(), ["notes", "sub", "a.md"]);
        assert!(!VaultPath::parse("md").unwrap().is_markdown());
        assert!(!VaultPath::parse("a😀").unwrap().is_markdown());
    }

    #[test]
    fn containment_is_by_component() {
        let notes = folder("notes");
        assert!(notes.contains(&VaultPath::parse("notes").unwrap()));
        assert!(notes.contains(&VaultPath::parse("notes/x.md").unwrap()));
        assert!(!notes.contains(&VaultPath::parse("notes2/x.md").unwrap()));
        assert!(!notes.contains(&VaultPath::parse("notesx.md").unwrap()));
        assert!(!notes.contains(&VaultPath::parse("Notes/x.md").unwrap()));
        assert!(notes.contains_folded(&VaultPath::parse("NOTES/x.md").unwrap()));
        // NFD "e\u{301}" folds to NFC "é".
        let cafe = folder("Café");
        assert!(cafe.contains_folded(&VaultPath::parse("cafe\u{301}/x.md").unwrap()));
        assert!(!cafe.contains(&VaultPath::parse("cafe\u{301}/x.md").unwrap()));
        assert!(FolderPath::Root.contains(&VaultPath::parse("any/thing.md").unwrap()));
    }

    #[test]
    fn classify_by_layout() {
        let a = layout_root();
        let class = |s: &str| a.classify(&VaultPath::parse(s).unwrap());
        assert_eq!(class("inbox/p.md"), NoteClass::Inbox);
        assert_eq!(class("docs/s.md"), NoteClass::Standard);
        assert_eq!(class("a.md"), NoteClass::Note);
        assert!(a.root_readable());
        assert!(!layout_notes().root_readable());
    }

    #[test]
    fn folder_parse_accepts_root_spellings_only() {
        assert_eq!(FolderPath::parse("").unwrap(), FolderPath::Root);
        assert_eq!(FolderPath::parse(".").unwrap(), FolderPath::Root);
        assert_eq!(FolderPath::parse("./").unwrap(), FolderPath::Root);
        assert!(FolderPath::parse("./notes").is_err());
        assert!(FolderPath::parse("..").is_err());
    }

    #[test]
    fn codes_map_to_the_wire() {
        assert_eq!(PathError::Invalid("x").code(), crate::ErrorCode::PATH_INVALID);
        assert_eq!(PathError::Denied("x").code(), crate::ErrorCode::PATH_DENIED);
        assert_eq!(PathError::Outside.code(), crate::ErrorCode::PATH_OUTSIDE_VAULT);
    }
}
