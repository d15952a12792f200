//! The read side's answers (docs/contract.md#the-mcp-surface field names, camelCase on the wire) and its one error type.

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
    /// parsed (over the frontmatter limits), and then `frontmatter_error` says why.
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

impl ReadNote {
    /// The answer as JSON, its text moved rather than copied: what `serde_json::to_value` gives,
    /// without a second copy of a large note (a test keeps the two equal).
    pub fn into_value(self) -> Value {
        let mut m = Map::new();
        m.insert("path".into(), Value::String(self.path));
        m.insert("title".into(), Value::String(self.title));
        if let Some(f) = self.frontmatter {
            m.insert("frontmatter".into(), Value::Object(f));
        }
        if let Some(e) = self.frontmatter_error {
            m.insert("frontmatterError".into(), Value::String(e));
        }
        m.insert("content".into(), Value::String(self.content));
        m.insert("hash".into(), Value::String(self.hash));
        m.insert("bytes".into(), Value::from(self.bytes));
        m.insert("modified".into(), Value::String(self.modified));
        Value::Object(m)
    }
}

/// `list_notes`: one folder level.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListNotes {
    pub entries: Vec<NoteEntry>,
    pub truncated: bool,
    /// Present exactly when `truncated`: pass it as `cursor` for the next page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
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
    /// At most `MAX_LIST_ITEMS`, by path.
    pub standards: Vec<StandardItem>,
    /// More standards existed than listed.
    pub truncated: bool,
    /// How many standards notes there are.
    pub count: usize,
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
    pub truncated: bool,
    /// Present exactly when `truncated`: pass it as `cursor` for the next page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
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
    /// Some list was cut at `MAX_LIST_ITEMS` items; `counts` has the exact sizes.
    pub truncated: bool,
    pub counts: RelatedCounts,
}

/// The exact size of each list of `get_related_notes`, however many items it carries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RelatedCounts {
    pub outlinks: usize,
    pub backlinks: usize,
    pub broken_links: usize,
    pub mocs: usize,
}

impl Related {
    /// Related lists, each cut to `max` items, counts kept exact.
    pub fn capped(
        outlinks: Vec<NoteRef>,
        backlinks: Vec<NoteRef>,
        broken_links: Vec<BrokenLink>,
        mocs: Vec<NoteRef>,
        max: usize,
    ) -> Related {
        let counts = RelatedCounts {
            outlinks: outlinks.len(),
            backlinks: backlinks.len(),
            broken_links: broken_links.len(),
            mocs: mocs.len(),
        };
        let truncated = [
            counts.outlinks,
            counts.backlinks,
            counts.broken_links,
            counts.mocs,
        ]
        .iter()
        .any(|n| *n > max);
        let cut = |mut v: Vec<NoteRef>| {
            v.truncate(max);
            v
        };
        let mut broken_links = broken_links;
        broken_links.truncate(max);
        Related {
            outlinks: cut(outlinks),
            backlinks: cut(backlinks),
            broken_links,
            mocs: cut(mocs),
            truncated,
            counts,
        }
    }
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
    pub truncated: bool,
    /// Present exactly when `truncated`: pass it as `cursor` for the next page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
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
    /// Every term, or any (`match`).
    pub mode: crate::rank::Match,
    /// Hit lines a note, 1–50 (default 3).
    pub per_note: Option<u32>,
    /// Default 60, 1–200.
    pub limit: Option<u32>,
    /// Every tag must be carried by the note (case-insensitive, `#` optional).
    pub tags: Vec<String>,
    pub path_prefix: Option<String>,
}

/// Every other list in a result carries at most this many items (docs/contract.md#limits-and-pagination).
pub const MAX_LIST_ITEMS: usize = 1000;

/// One page of a search: where it starts, and how long it may examine candidates.
#[derive(Debug, Clone, Default)]
pub struct SearchPage {
    pub from: SearchPos,
    /// Counted from when the examination begins (a search queued behind others has not begun):
    /// once spent, the search answers what it found so far (`truncated`, with a position).
    pub budget: Option<std::time::Duration>,
}

/// A sort key as a cursor carries it: the whole key, or, for a long one, its first bytes and a
/// hash of the whole, so that cursors stay short (docs/contract.md#limits-and-pagination: at most 128 bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    pub head: Vec<u8>,
    /// `None`: `head` is the whole key.
    pub hash: Option<[u8; 8]>,
}

impl Key {
    pub fn exact(s: &str) -> Key {
        Key {
            head: s.as_bytes().to_vec(),
            hash: None,
        }
    }

    /// The key with at most `n` bytes of head (a cut key stays as it is).
    pub fn cut(&self, n: usize) -> Key {
        if self.hash.is_some() || self.head.len() <= n {
            return self.clone();
        }
        Key {
            head: self.head[..n].to_vec(),
            hash: Some(key_hash(&self.head)),
        }
    }

    /// How `s` sorts against the key; `None` when a cut key cannot tell (`s` has the same head
    /// but is another string). Callers treat `None` as "after": an item may repeat, never be
    /// skipped.
    pub fn order_of(&self, s: &str) -> Option<std::cmp::Ordering> {
        use std::cmp::Ordering::*;
        let b = s.as_bytes();
        let Some(h) = self.hash else {
            return Some(b.cmp(&self.head));
        };
        let m = b.len().min(self.head.len());
        match b[..m].cmp(&self.head[..m]) {
            Equal if b.len() < self.head.len() => Some(Less),
            Equal if key_hash(b) == h => Some(Equal),
            Equal => None,
            o => Some(o),
        }
    }

    /// `s` sorts after the key (or may: see `order_of`).
    pub fn is_before(&self, s: &str) -> bool {
        !matches!(
            self.order_of(s),
            Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)
        )
    }
}

fn key_hash(b: &[u8]) -> [u8; 8] {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(b);
    let mut out = [0u8; 8];
    out.copy_from_slice(&d[..8]);
    out
}

/// Where a ranked search continues: hits are ranked by score (descending), then path, then line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankPos {
    pub score: u32,
    pub path: Key,
    pub line: u32,
}

/// The state of a ranked search between pages. `start`: only hit lines after this (path, line)
/// are examined (a page cut by the budget moves it on); `after`: only hits ranked after this
/// one are answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SearchPos {
    pub start: Option<(Key, u32)>,
    pub after: Option<RankPos>,
}

/// Where `list_notes` continues: folders first, then files, each by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotesPos {
    pub file: bool,
    pub name: Key,
}

/// Where `list_recent_notes` continues: newest first (nanoseconds), then by path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecentPos {
    pub mtime: i64,
    pub path: Key,
}

/// `search_note_content`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContentHits {
    pub hits: Vec<ContentHit>,
    /// More hits existed than `limit`, or the search budget ran out first.
    pub truncated: bool,
    /// Present exactly when `truncated`: pass it as `cursor` for the next page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
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
    /// More hits existed than `limit`, or the search budget ran out first.
    pub truncated: bool,
    /// Present exactly when `truncated`: pass it as `cursor` for the next page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
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
    /// The wire code (docs/contract.md#error-codes). Exhaustive on purpose: a new variant forces a decision.
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

#[cfg(test)]
mod read_note_value {
    use super::*;

    #[test]
    fn into_value_is_what_serde_writes() {
        let mut fm = Map::new();
        fm.insert("tags".into(), serde_json::json!(["a"]));
        for (frontmatter, frontmatter_error) in [
            (Some(fm), None),
            (None, Some("too deep".to_owned())),
            (Some(Map::new()), None),
        ] {
            let n = ReadNote {
                path: "z/a.md".into(),
                title: "A \"quoted\" title".into(),
                frontmatter,
                frontmatter_error,
                content: "---\ntags: [a]\n---\n# A\n\u{202E}x\n".into(),
                hash: "0".repeat(64),
                bytes: 27,
                modified: "2026-01-01T00:00:00Z".into(),
            };
            let expected = serde_json::to_value(&n).expect("serializes");
            assert_eq!(n.into_value(), expected);
        }
    }
}
