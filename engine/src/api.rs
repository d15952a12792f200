//! The typed requests and answers of every operation (docs/contract.md#the-mcp-surface): what the edges parse tool
//! arguments into and what the engine answers with. Schemas are derived here; the edge turns them
//! into its catalog.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

// ---- inputs -------------------------------------------------------------------------------------

/// Arguments of a tool that takes nothing but an optional vault.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VaultArg {
    /// Vault id (see `vault_list`); optional when one vault is visible or a default is set.
    pub vault: Option<String>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchKnowledgeArgs {
    pub vault: Option<String>,
    /// Terms matched (case-insensitive substring, all must match) against titles, aliases,
    /// descriptions and tags.
    pub query: String,
    /// Only notes carrying every one of these tags.
    pub tag: Option<Vec<String>>,
    /// Maximum hits (default 20, at most 200).
    pub limit: Option<u32>,
    /// The `nextCursor` of the previous page of this same search.
    pub cursor: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SearchNoteContentArgs {
    pub vault: Option<String>,
    /// Whitespace-separated terms (quote a phrase); a note matches when every term (or, with
    /// `match: "any"`, at least one) occurs in it, case-insensitively; each hit is one line
    /// holding at least one term.
    pub query: String,
    /// `all` (default): notes holding every term; `any`: notes holding at least one, for
    /// questions in plain words (notes holding more and rarer terms rank first).
    #[serde(rename = "match")]
    pub match_mode: Option<MatchMode>,
    /// Hit lines a note (default 3, 1–50): the lines holding the most terms first.
    pub per_note: Option<u32>,
    /// Maximum hits (default 60, 1–200).
    pub limit: Option<u32>,
    /// Only notes carrying every one of these tags.
    pub tag: Option<Vec<String>>,
    /// Only notes under this folder (e.g. `z` or `projects/2026`).
    pub path_prefix: Option<String>,
    /// The `nextCursor` of the previous page of this same search.
    pub cursor: Option<String>,
}

/// How a note must hold the terms of `search_note_content`.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MatchMode {
    All,
    Any,
}

impl From<MatchMode> for vault::Match {
    fn from(m: MatchMode) -> vault::Match {
        match m {
            MatchMode::All => vault::Match::All,
            MatchMode::Any => vault::Match::Any,
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PathArgs {
    pub vault: Option<String>,
    /// Vault-relative path, e.g. `z/attention.md`.
    pub path: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadNoteArgs {
    pub vault: Option<String>,
    /// Vault-relative path, e.g. `z/attention.md`.
    pub path: String,
    /// An earlier version to read instead of the note as it is: a `hashBefore` or `hashAfter`
    /// that `get_note_history` lists for this path.
    pub hash: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoteHistoryArgs {
    pub vault: Option<String>,
    /// Vault-relative path of the note (its current name; earlier names are followed).
    pub path: String,
    /// Maximum entries (default 50, at most 200).
    pub limit: Option<u32>,
    /// The `nextCursor` of the previous page of this same listing.
    pub cursor: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListNotesArgs {
    pub vault: Option<String>,
    /// Folder to list (default: the vault root).
    pub dir: Option<String>,
    /// Maximum entries (default 200, at most 500).
    pub limit: Option<u32>,
    /// The `nextCursor` of the previous page of this same listing.
    pub cursor: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListTagsArgs {
    pub vault: Option<String>,
    /// Maximum tags (default and at most 1000).
    pub limit: Option<u32>,
    /// The `nextCursor` of the previous page of this same listing.
    pub cursor: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecentArgs {
    pub vault: Option<String>,
    /// Maximum notes (default 20, at most 200).
    pub limit: Option<u32>,
    /// Only notes modified at or after this RFC 3339 time.
    pub since: Option<String>,
    /// The `nextCursor` of the previous page of this same listing.
    pub cursor: Option<String>,
}

/// `query_notes` (the exact rules are in `vault::data`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct QueryNotesArgs {
    pub vault: Option<String>,
    /// Conditions, all of which must hold (at most 32).
    #[serde(rename = "where")]
    pub where_: Option<Vec<vault::data::Condition>>,
    /// Only notes carrying every one of these tags.
    pub tag: Option<Vec<String>>,
    /// Only notes under this folder (e.g. `papers`).
    pub path_prefix: Option<String>,
    /// Fields each row carries besides path and title (at most 64).
    pub fields: Option<Vec<String>>,
    /// Default: by path, ascending.
    pub sort: Option<vault::data::SortSpec>,
    /// Maximum rows (default 50, at most 200).
    pub limit: Option<u32>,
    /// The `nextCursor` of the previous page of this same query.
    pub cursor: Option<String>,
}

// ---- outputs the gateway itself composes ---------------------------------------------------------

#[derive(Debug, Serialize, JsonSchema)]
pub struct VaultListOut {
    /// At most 1,000.
    pub vaults: Vec<VaultItem>,
    /// More vaults are visible than listed.
    pub truncated: bool,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VaultItem {
    pub id: String,
    pub name: String,
    pub is_default: bool,
    pub note_count: u64,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OverviewOut {
    pub vault: String,
    pub notes: u64,
    pub standards: u64,
    pub tags: u64,
    pub pending_proposals: u64,
    pub revision: u64,
    pub index: IndexStatus,
    pub history: HistoryTops,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IndexStatus {
    /// When the answer's data was read (RFC 3339 UTC).
    pub indexed_at: String,
    pub fresh: bool,
    pub stale_files: u64,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HistoryTops {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undo_top: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redo_top: Option<String>,
}

// ---- proposals (docs/contract.md#proposals) ------------------------------------------------------------------------

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProposeNewArgs {
    pub vault: Option<String>,
    /// Vault-relative path of the new note (`*.md` under a notes folder).
    pub path: String,
    /// The whole text of the new note.
    pub content: String,
    /// Why: shown to the reviewer.
    pub reason: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProposePatchArgs {
    pub vault: Option<String>,
    pub path: String,
    /// The `hash` read_note returned for the text you edited.
    pub base_hash: String,
    pub reason: String,
    /// The whole new text (or use `edits`).
    pub content: Option<String>,
    /// Replacements applied in order; each `oldText` must occur exactly once.
    pub edits: Option<Vec<EditArg>>,
}

/// `propose_frontmatter_update`: a patch that changes only the frontmatter block.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProposeFrontmatterArgs {
    pub vault: Option<String>,
    pub path: String,
    /// The `hash` read_note returned for the note.
    pub base_hash: String,
    pub reason: String,
    /// Keys to set to these values (any JSON value; added at the end when absent).
    pub set: Option<serde_json::Map<String, serde_json::Value>>,
    /// Keys to remove.
    pub unset: Option<Vec<String>>,
    /// Tags to add to the frontmatter `tags` (a leading `#` is dropped).
    pub add_tags: Option<Vec<String>>,
    /// Tags to remove from the frontmatter `tags` (not inline `#tags` in the text).
    pub remove_tags: Option<Vec<String>>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EditArg {
    /// Text that occurs exactly once in the note (as it stands after the previous edits).
    pub old_text: String,
    pub new_text: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProposeMoveArgs {
    pub vault: Option<String>,
    pub from: String,
    pub to: String,
    pub reason: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProposeDeleteArgs {
    pub vault: Option<String>,
    pub path: String,
    pub base_hash: String,
    pub reason: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListProposalsArgs {
    pub vault: Option<String>,
    /// pending (default), applied or rejected.
    pub status: Option<String>,
    /// Maximum items (default 50, at most 500).
    pub limit: Option<u32>,
    /// The `nextCursor` of the previous page of this same listing.
    pub cursor: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProposalIdArgs {
    pub vault: Option<String>,
    /// Proposal id (or slug).
    pub id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RejectArgs {
    pub vault: Option<String>,
    pub id: String,
    pub reason: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ApplyArgs {
    pub vault: Option<String>,
    /// The proposal id (never a path).
    pub id: String,
    /// The `proposalHash` you were given when it was proposed.
    pub proposal_hash: String,
    /// A fresh key per intended apply; retry a lost answer only with the same key.
    pub idempotency_key: String,
}

/// `approve_proposal_in_app` (app-only: the approval card calls it, never the model).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ApproveInAppArgs {
    pub vault: Option<String>,
    /// The proposal id.
    pub id: String,
    /// The sealed approval the card received in a result's `_meta["vaultgate/approval"]`.
    pub approval: String,
    /// One key per click; repeat a lost answer only with the same key.
    pub idempotency_key: String,
}

/// `reject_proposal_in_app` (app-only).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RejectInAppArgs {
    pub vault: Option<String>,
    pub id: String,
    pub approval: String,
    /// Why the person rejected it.
    pub reason: String,
    pub idempotency_key: String,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProposedOut {
    pub id: String,
    pub slug: String,
    pub proposal_hash: String,
    pub target: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_hash: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_rewrites: Option<Vec<LinkRewriteItem>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct LinkRewriteItem {
    pub path: String,
    pub count: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedByOut {
    pub credential_id: String,
    pub name: String,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProposalItem {
    pub id: String,
    pub slug: String,
    pub kind: String,
    pub target: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    pub status: String,
    pub created_at: String,
    pub created_by: CreatedByOut,
    pub reason: String,
    pub proposal_hash: String,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListProposalsOut {
    pub proposals: Vec<ProposalItem>,
    pub truncated: bool,
    /// Present exactly when `truncated`: pass it as `cursor` for the next page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GetProposalOut {
    #[serde(flatten)]
    pub item: ProposalItem,
    pub vault: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_hash: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_hash: Option<String>,
    /// The proposed new text (new notes and patches).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Unified diff against the note as it is now (empty for moves).
    pub diff: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reject_reason: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RejectOut {
    pub rejected: bool,
    /// A team vault has no inbox folder (docs/contract.md#team-mode).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub archived_to: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplyOut {
    pub applied: bool,
    pub target: String,
    pub history_entry_id: String,
    /// Where the proposal's files went; a team vault has no inbox folder (docs/contract.md#team-mode).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub archived_to: String,
    pub audit_seq: u64,
    /// "updated" or "failed" (the note is written either way).
    pub index: String,
    /// "committed", "queued" or "off": the git commit of this change.
    #[serde(default = "git_off")]
    pub git: String,
    pub replayed: bool,
    /// A team vault: the commit on the remote (docs/contract.md#team-mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

fn git_off() -> String {
    "off".into()
}
