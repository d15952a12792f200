//! The static tool catalog: names, descriptions, input and output schemas, annotations.
//! The same for every credential (SPEC §4); a tool the tier forbids answers `CAPABILITY_DENIED`.

use std::sync::{Arc, LazyLock};

use rmcp::handler::server::common::{schema_for_input, schema_for_output};
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
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
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SearchNoteContentArgs {
    pub vault: Option<String>,
    /// Whitespace-separated terms (quote a phrase); a note matches when every term occurs in it,
    /// case-insensitively; each hit is one line holding at least one term.
    pub query: String,
    /// Maximum hits (default 60, 1–200).
    pub limit: Option<u32>,
    /// Only notes carrying every one of these tags.
    pub tag: Option<Vec<String>>,
    /// Only notes under this folder (e.g. `z` or `projects/2026`).
    pub path_prefix: Option<String>,
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
pub struct ListNotesArgs {
    pub vault: Option<String>,
    /// Folder to list (default: the vault root).
    pub dir: Option<String>,
    /// Maximum entries (default 200, at most 500).
    pub limit: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecentArgs {
    pub vault: Option<String>,
    /// Maximum notes (default 20, at most 200).
    pub limit: Option<u32>,
    /// Only notes modified at or after this RFC 3339 time.
    pub since: Option<String>,
}

// ---- outputs the gateway itself composes ---------------------------------------------------------

#[derive(Debug, Serialize, JsonSchema)]
pub struct VaultListOut {
    pub vaults: Vec<VaultItem>,
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

// ---- the catalog --------------------------------------------------------------------------------

fn input<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    // Our input types are structs, so the root is always an object; fall back to an empty one.
    schema_for_input::<T>().unwrap_or_else(|_| rmcp::handler::server::common::schema_for_empty_input())
}

fn read_tool<I: JsonSchema + 'static, O: JsonSchema + 'static>(
    name: &'static str,
    title: &str,
    description: &'static str,
) -> Tool {
    tool::<I, O>(name, title, description, policy::ToolKind::Read)
}

/// Annotations follow the tool's kind in the policy table (SPEC §4).
fn tool<I: JsonSchema + 'static, O: JsonSchema + 'static>(
    name: &'static str,
    title: &str,
    description: &'static str,
    kind: policy::ToolKind,
) -> Tool {
    let mut ann = ToolAnnotations::with_title(title);
    ann.read_only_hint = Some(kind == policy::ToolKind::Read);
    ann.destructive_hint = Some(!matches!(
        kind,
        policy::ToolKind::Read | policy::ToolKind::Propose
    ));
    ann.idempotent_hint = Some(kind == policy::ToolKind::Read);
    ann.open_world_hint = Some(false);
    let mut tool = Tool::new(name, description, input::<I>());
    tool.title = Some(title.to_owned());
    tool.output_schema = Some(schema_for_output::<O>());
    tool.annotations = Some(ann);
    tool
}

/// The tools this build serves, in catalog order.
pub static CATALOG: LazyLock<Vec<Tool>> = LazyLock::new(|| {
    use vault as r;
    vec![
        read_tool::<NoArgs, VaultListOut>(
            "vault_list",
            "List vaults",
            "The vaults this credential may see: id, name, whether it is the default, note count.",
        ),
        read_tool::<VaultArg, OverviewOut>(
            "get_vault_overview",
            "Vault overview",
            "Counts of notes, standards and tags, pending proposals, the vault revision, index freshness and the undo/redo tops. Read this first.",
        ),
        read_tool::<SearchKnowledgeArgs, r::KnowledgeHits>(
            "search_knowledge",
            "Search titles, aliases, descriptions, tags",
            "Find notes by what they are about: every term must match a title, alias, description or tag (case-insensitive substring).",
        ),
        read_tool::<SearchNoteContentArgs, r::ContentHits>(
            "search_note_content",
            "Search note text",
            "Exact full-text search: a note matches when every term occurs in it (case-insensitive substring, works for CJK and short terms); returns matching lines with 1-based line numbers and snippets.",
        ),
        read_tool::<PathArgs, r::ReadNote>(
            "read_note",
            "Read a note",
            "The whole text of one note with its parsed frontmatter, title, SHA-256 hash (use it as baseHash when proposing a change), size and modification time.",
        ),
        read_tool::<ListNotesArgs, r::ListNotes>(
            "list_notes",
            "List a folder",
            "One folder level: notes, sub-folders and other files, with note titles.",
        ),
        read_tool::<VaultArg, r::ListStandards>(
            "list_standards",
            "List standards",
            "The vault's standards notes (conventions to follow when proposing changes).",
        ),
        read_tool::<VaultArg, r::ListTags>(
            "list_tags",
            "List tags",
            "Every tag used in notes (frontmatter and inline #tags) with the number of notes carrying it.",
        ),
        read_tool::<PathArgs, r::Related>(
            "get_related_notes",
            "Related notes",
            "A note's outgoing links, backlinks, broken links (with line numbers) and the maps of content that link to it.",
        ),
        read_tool::<RecentArgs, r::RecentNotes>(
            "list_recent_notes",
            "Recently modified notes",
            "Notes ordered by modification time, newest first.",
        ),
        read_tool::<ListProposalsArgs, ListProposalsOut>(
            "list_proposals",
            "List proposals",
            "Proposals in the vault's inbox, newest first (pending by default).",
        ),
        read_tool::<ProposalIdArgs, GetProposalOut>(
            "get_proposal",
            "Show a proposal",
            "A proposal's metadata, its proposed text and a unified diff against the note as it is now.",
        ),
        read_tool::<VaultArg, crate::history::HistoryStatusOut>(
            "history_status",
            "Undo/redo status",
            "The vault's shared history: undoTop (the entry history_undo must name), redoTop (the entry history_redo must name), staleTop (the undo top when a file it touched changed since, so undo would be refused) and whether an interrupted undo/redo is pending.",
        ),
        tool::<ProposeNewArgs, ProposedOut>(
            "propose_new_note",
            "Propose a new note",
            "Proposes a new note; nothing is written to the notes until the proposal is applied. Returns the id and proposalHash needed to apply it.",
            policy::ToolKind::Propose,
        ),
        tool::<ProposePatchArgs, ProposedOut>(
            "propose_note_patch",
            "Propose an edit",
            "Proposes new text for an existing note, as a whole `content` or as `edits` (each oldText must occur exactly once). `baseHash` is the hash read_note gave you; apply refuses if the note changed since.",
            policy::ToolKind::Propose,
        ),
        tool::<ProposeMoveArgs, ProposedOut>(
            "propose_move",
            "Propose a move or rename",
            "Proposes moving a note; reports the wiki and Markdown links in other notes that applying it will rewrite.",
            policy::ToolKind::Propose,
        ),
        tool::<ProposeDeleteArgs, ProposedOut>(
            "propose_delete",
            "Propose a deletion",
            "Proposes deleting a note; applying moves it to the vault trash, from where it can be restored (undo).",
            policy::ToolKind::Propose,
        ),
        tool::<ApplyArgs, ApplyOut>(
            "apply_proposal",
            "Apply a proposal",
            "Verifies a proposal (hash, signature, base hash, target) and commits it atomically. Tier auto applies its own proposals, full anyone's. Retry a lost answer only with the same idempotencyKey.",
            policy::ToolKind::Decide,
        ),
        tool::<RejectArgs, RejectOut>(
            "reject_proposal",
            "Reject a proposal",
            "Rejects a pending proposal and archives it; nothing in the notes changes.",
            policy::ToolKind::Decide,
        ),
        tool::<crate::history::HistoryMoveArgs, crate::history::HistoryStatusOut>(
            "history_undo",
            "Undo the last applied change",
            "Reverts the newest applied change in the vault's shared history: a new note is removed, an edited note gets its old bytes back, a deleted note comes back from the trash, a moved note returns to its old path with the links rewritten in other notes. expectedHistoryEntryId must be undoTop from history_status (else HISTORY_NOT_TOP); refused with HISTORY_STALE, writing nothing, when a file changed since. Permanent deletions cannot be undone. Retry a lost answer only with the same idempotencyKey. Returns the new history_status.",
            policy::ToolKind::History,
        ),
        tool::<crate::history::HistoryMoveArgs, crate::history::HistoryStatusOut>(
            "history_redo",
            "Redo the last undone change",
            "Re-applies the most recently undone change. expectedHistoryEntryId must be redoTop from history_status (else HISTORY_NOT_TOP); refused with HISTORY_STALE, writing nothing, when a file changed since. A new applied change clears what can be redone. Retry a lost answer only with the same idempotencyKey. Returns the new history_status.",
            policy::ToolKind::History,
        ),
        crate::critical::delete_permanent_tool(),
        crate::critical::empty_trash_tool(),
    ]
});

// ---- proposals (SPEC §6) ------------------------------------------------------------------------

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
pub struct ListProposalsOut {
    pub proposals: Vec<ProposalItem>,
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

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RejectOut {
    pub rejected: bool,
    pub archived_to: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplyOut {
    pub applied: bool,
    pub target: String,
    pub history_entry_id: String,
    pub archived_to: String,
    pub audit_seq: u64,
    /// "updated" or "failed" (the note is written either way).
    pub index: String,
    pub replayed: bool,
}
