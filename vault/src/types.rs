//! The read side's answers (SPEC §4 field names, camelCase on the wire) and its one error type.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::fs::FsError;
use policy::{ErrorCode, PathError};

/// `read_note`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadNote {
    pub path: String,
    pub title: String,
    /// The parsed YAML frontmatter; `{}` when there is none; absent when the block was not
    /// parsed (SPEC §14), and then `frontmatter_error` says why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frontmatter: Option<Map<String, Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frontmatter_error: Option<String>,
    /// The whole file text, frontmatter included.
    pub content: String,
    /// Lowercase hex SHA-256 of the file's exact bytes.
    pub hash: String,
    pub bytes: u64,
    /// RFC 3339 UTC.
    pub modified: String,
}

/// `list_notes`: one folder level.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListNotes {
    pub entries: Vec<NoteEntry>,
    pub truncated: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NoteEntry {
    pub path: String,
    pub kind: NoteEntryKind,
    /// Only for notes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NoteEntryKind {
    Note,
    Folder,
    File,
}

/// `list_standards`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListStandards {
    pub standards: Vec<StandardItem>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StandardItem {
    pub path: String,
    pub title: String,
    /// `""` when the note has none.
    pub description: String,
}

/// `list_tags`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListTags {
    pub tags: Vec<TagCount>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TagCount {
    /// Without `#`, as first spelled (by path order).
    pub name: String,
    /// How many notes carry the tag.
    pub count: usize,
}

/// `get_related_notes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Related {
    pub outlinks: Vec<NoteRef>,
    pub backlinks: Vec<NoteRef>,
    pub broken_links: Vec<BrokenLink>,
    pub mocs: Vec<NoteRef>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NoteRef {
    pub path: String,
    pub title: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BrokenLink {
    /// The raw link text (a wiki link's text before `|`, a Markdown link's destination).
    pub target: String,
    /// 1-based line.
    pub line: usize,
}

/// `list_recent_notes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecentNotes {
    pub notes: Vec<RecentNote>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecentNote {
    pub path: String,
    pub title: String,
    /// RFC 3339 UTC.
    pub modified: String,
}

/// The arguments of `search_note_content`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContentQuery {
    pub query: String,
    /// Default 60, 1–200.
    pub limit: Option<u32>,
    /// Every tag must be carried by the note (case-insensitive, `#` optional).
    pub tags: Vec<String>,
    pub path_prefix: Option<String>,
}

/// `search_note_content`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContentHits {
    pub hits: Vec<ContentHit>,
    /// More hits existed than `limit`.
    pub truncated: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContentHit {
    pub path: String,
    /// 1-based, from the first line of the file.
    pub line: usize,
    /// At most 200 characters.
    pub snippet: String,
    pub title: String,
    /// How many distinct terms the line holds.
    pub score: usize,
}

/// `search_knowledge`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KnowledgeHits {
    pub hits: Vec<KnowledgeHit>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KnowledgeHit {
    pub path: String,
    pub title: String,
    pub matched: Vec<MatchedField>,
    /// Sum over terms of the best field weight (title 4, alias 3, tag 2, description 1).
    pub score: u32,
}

/// A metadata field that matched a `search_knowledge` term.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MatchedField {
    Title = 0,
    Alias = 1,
    Description = 2,
    Tag = 3,
}

impl MatchedField {
    /// In the order `matched` lists them.
    pub const ALL: [MatchedField; 4] = [
        MatchedField::Title,
        MatchedField::Alias,
        MatchedField::Description,
        MatchedField::Tag,
    ];
}

/// Catalog counts for `get_vault_overview`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    /// Notes outside standards and inbox.
    pub notes: usize,
    pub standards: usize,
    /// Distinct tags (case-insensitive) over notes and standards.
    pub tags: usize,
}

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl From<PathError> for VaultError {
    fn from(e: PathError) -> VaultError {
        VaultError::Fs(FsError::Path(e))
    }
}

impl VaultError {
    /// The wire code (SPEC §11). Exhaustive on purpose: a new variant forces a decision.
    pub fn code(&self) -> ErrorCode {
        match self {
            VaultError::Fs(FsError::Path(e)) => e.code(),
            VaultError::Fs(FsError::NotFound) => ErrorCode::NOT_FOUND,
            VaultError::Fs(FsError::NotText) => ErrorCode::NOT_TEXT,
            VaultError::Fs(FsError::TooLarge) => ErrorCode::TOO_LARGE,
            VaultError::Fs(FsError::Io(_)) => ErrorCode::INTERNAL,
            VaultError::InvalidArgument(_) => ErrorCode::INVALID_ARGUMENT,
        }
    }
}
