//! A vault on disk: contained file access (`fs`), notes with frontmatter, links and tags, search
//! with the exact semantics of docs/contract.md#the-mcp-surface, the search index that narrows it (docs/contract.md#search-and-the-index), link rewrites for
//! moves, a change watcher, and the contained durable write primitives (`write`) that the apply
//! transaction uses.
//!
//! It never decides to write: only the engine's write transaction calls `write`, and every vault
//! file it opens or writes goes through `fs::VaultFs` and the path policy. The one file it writes
//! on its own is its cache, `.vaultgate/index.sqlite` (`index`).
#![forbid(unsafe_code)]

pub mod attach;
pub mod data;
pub mod fmedit;
pub mod frontmatter;
pub mod fs;
pub mod index;
pub mod links;
pub mod note;
pub mod rank;
pub mod reader;
pub mod rewrite;
pub mod search;
pub mod types;
pub mod watch;
pub mod write;

pub use index::{IndexError, IndexHealth, IndexTicket, SyncReport};
pub use rank::Match;
pub use reader::{Vault, rfc3339};
pub use types::{
    BrokenLink, ContentHit, ContentHits, ContentQuery, Counts, Key, KnowledgeHit, KnowledgeHits, ListNotes,
    ListStandards, ListTags, MAX_LIST_ITEMS, MatchedField, NoteEntry, NoteEntryKind, NoteRef, NotesPos,
    RankPos, ReadNote, RecentNote, RecentNotes, RecentPos, Related, RelatedCounts, SearchPage, SearchPos,
    StandardItem, TagCount, VaultError,
};
