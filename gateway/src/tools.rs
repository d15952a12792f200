//! The static tool catalog: names, descriptions, input and output schemas, annotations.
//! The same for every credential (docs/contract.md#the-mcp-surface); a tool the tier forbids answers `CAPABILITY_DENIED`.

use std::sync::{Arc, LazyLock};

use engine::api::*;
use engine::critical::{CriticalOut, DELETE_PERMANENT, DeletePermanentArgs, EMPTY_TRASH, EmptyTrashArgs};
use rmcp::handler::server::common::{schema_for_empty_input, schema_for_input, schema_for_output};
use rmcp::model::{JsonObject, MetaObject, Tool, ToolAnnotations};
use schemars::JsonSchema;

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

/// Annotations follow the tool's kind in the policy table (docs/contract.md#the-mcp-surface).
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

/// The tools this build serves, in catalog order; those whose results the approval card
/// renders name it in `_meta.ui` (docs/contract.md#the-review-page-and-in-client-approval).
pub static CATALOG: LazyLock<Vec<Tool>> = LazyLock::new(|| {
    let mut tools = entries();
    for t in &mut tools {
        if crate::card::renders(&t.name) {
            t.meta = Some(crate::card::tool_meta(&t.name));
        }
    }
    tools
});

fn entries() -> Vec<Tool> {
    use engine::reads as r;
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
            "Find notes by what they are about: every term must match a title, alias, description or tag (case-insensitive substring). When truncated, pass nextCursor as cursor for the next page (valid until the vault changes).",
        ),
        read_tool::<SearchNoteContentArgs, r::ContentHits>(
            "search_note_content",
            "Search note text",
            "Full-text search ranked by relevance: a note matches when every term (match: \"all\", the default) or at least one term (match: \"any\", for questions in plain words) occurs in it (case-insensitive substring, works for CJK and short terms). Notes are ranked best first (how often and how rarely each term occurs, matches in titles, aliases and headings most); each hit is a line with its 1-based number and a snippet, at most perNote lines a note (default 3). When truncated with nextCursor, pass it as cursor for the next page (valid until the vault changes); truncated without a cursor means the search ran out of time: narrow the query.",
        ),
        read_tool::<ReadNoteArgs, r::ReadNote>(
            "read_note",
            "Read a note",
            "The whole text of one note with its parsed frontmatter, title, SHA-256 hash (use it as baseHash when proposing a change), size and modification time. With `hash`, an earlier version that get_note_history lists for this path.",
        ),
        read_tool::<NoteHistoryArgs, engine::versions::NoteHistoryOut>(
            "get_note_history",
            "A note's history",
            "The changes vaultgate made to one note, newest first, following it back across moves: when, what kind, who, why, the history entry, the hashes before and after (read either with read_note {path, hash}) and the git commit where the vault has git on. When truncated, pass nextCursor as cursor for the next page.",
        ),
        read_tool::<ListNotesArgs, r::ListNotes>(
            "list_notes",
            "List a folder",
            "One folder level: notes, sub-folders and other files, with note titles; when truncated, pass nextCursor as cursor for the next page.",
        ),
        read_tool::<VaultArg, r::ListStandards>(
            "list_standards",
            "List standards",
            "The vault's standards notes (conventions to follow when proposing changes).",
        ),
        read_tool::<ListTagsArgs, r::ListTags>(
            "list_tags",
            "List tags",
            "Every tag used in notes (frontmatter and inline #tags) with the number of notes carrying it, most used first; when truncated, pass nextCursor as cursor for the next page.",
        ),
        read_tool::<PathArgs, r::Related>(
            "get_related_notes",
            "Related notes",
            "A note's outgoing links, backlinks, broken links (with line numbers) and the maps of content that link to it.",
        ),
        read_tool::<RecentArgs, r::RecentNotes>(
            "list_recent_notes",
            "Recently modified notes",
            "Notes ordered by modification time, newest first; when truncated, pass nextCursor as cursor for the next page.",
        ),
        read_tool::<QueryNotesArgs, r::QueryNotes>(
            "query_notes",
            "Query notes by frontmatter",
            "Notes as rows of their frontmatter fields, answered from the index. where: conditions {field, op, value}, all must hold; field is a top-level frontmatter key or a built-in (path, title, tags = frontmatter and inline tags, modified = file time, bytes = file size; built-ins win over keys of the same name). Types: numbers compare as numbers; a string that is an RFC 3339 date-time or YYYY-MM-DD is a date and compares in time order; other strings compare case-insensitively; booleans false < true; strings are never numbers. eq/lt/lte/gt/gte match only a field of the value's type (never a list, a missing or a null field); ne is exactly not-eq (so it matches those); contains: list membership (an element eq the value), case-insensitive substring of a string or date field, or for tags the tag[] rule (a/b carries a); exists: value true (default) or false, whether the field is present and not null. value is a number, string or boolean. sort {field, order asc|desc} (default path asc): ties by path; mixed types order numbers, dates, strings, booleans; missing, null, list or mapping values sort last in both orders. Rows carry path and title; fields[] adds {name: value} with the values as in the frontmatter (a field the note lacks is left out). limit default 50, at most 200; when truncated, pass nextCursor as cursor (same other arguments) for the next page.",
        ),
        read_tool::<engine::attachments::ListAttachmentsArgs, r::ListAttachments>(
            "list_attachments",
            "List attachments",
            "The vault's files that are not notes (PDFs, images, data), every folder below dir (default: the whole vault), by path: path, bytes, mediaType (from the extension, checked against the content: a mismatch is application/octet-stream) and modified. Hidden, denied and inbox files are never listed. limit default 200, at most 500; when truncated, pass nextCursor as cursor for the next page.",
        ),
        read_tool::<engine::attachments::ReadAttachmentArgs, engine::attachments::AttachmentTextOut>(
            "read_attachment_text",
            "Read a PDF's text",
            "The text of a PDF attachment, page by page: pageCount and pages[] {page (1-based), text, truncated}. pages: at most 50 page numbers (default: the first 10); a page past the end is simply absent. maxChars per page: default 20000, at most 50000; a longer page is cut and marked truncated (and so is the result), as are pages past the output limit (later ones are left out). A page that could not be read has empty text and error. Off unless the operator turned PDF text on for the vault (CAPABILITY_DENIED names the setting). Other file types answer NOT_TEXT, as do corrupt and encrypted PDFs (with the reason); PDFs over 64 MiB answer TOO_LARGE.",
        ),
        read_tool::<ListProposalsArgs, ListProposalsOut>(
            "list_proposals",
            "List proposals",
            "Proposals in the vault's inbox, newest first (pending by default); when truncated, pass nextCursor as cursor for the next page.",
        ),
        read_tool::<ProposalIdArgs, GetProposalOut>(
            "get_proposal",
            "Show a proposal",
            "A proposal's metadata, its proposed text and a unified diff against the note as it is now.",
        ),
        read_tool::<VaultArg, engine::history::HistoryStatusOut>(
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
        tool::<ProposeFrontmatterArgs, ProposedOut>(
            "propose_frontmatter_update",
            "Propose frontmatter changes",
            "Proposes setting or removing frontmatter keys and adding or removing tags, as a patch that changes only the note's frontmatter block (created when absent): the text, the other keys and their comments stay as they are. `baseHash` is the hash read_note gave you. Inline #tags in the text are not removed here (use propose_note_patch).",
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
            "Verifies a proposal (hash, signature, base hash, target) and commits it atomically. Tier auto applies its own proposals, full anyone's; a credential with in-client approval may go one tier further once the user approves in this client (the call waits for that answer; a no is APPROVAL_DECLINED). Retry a lost answer only with the same idempotencyKey.",
            policy::ToolKind::Decide,
        ),
        tool::<RejectArgs, RejectOut>(
            "reject_proposal",
            "Reject a proposal",
            "Rejects a pending proposal and archives it; nothing in the notes changes.",
            policy::ToolKind::Decide,
        ),
        tool::<ApproveInAppArgs, ApplyOut>(
            "approve_proposal_in_app",
            "Approve in the card",
            "App-only: the approval card calls this when the person clicks Approve; it carries the sealed approval the card received. Not for agents: use apply_proposal.",
            policy::ToolKind::Decide,
        ),
        tool::<RejectInAppArgs, RejectOut>(
            "reject_proposal_in_app",
            "Reject in the card",
            "App-only: the approval card calls this when the person clicks Reject. Not for agents: use reject_proposal.",
            policy::ToolKind::Decide,
        ),
        tool::<engine::history::HistoryMoveArgs, engine::history::HistoryStatusOut>(
            "history_undo",
            "Undo the last applied change",
            "Reverts the newest applied change in the vault's shared history: a new note is removed, an edited note gets its old bytes back, a deleted note comes back from the trash, a moved note returns to its old path with the links rewritten in other notes. expectedHistoryEntryId must be undoTop from history_status (else HISTORY_NOT_TOP); refused with HISTORY_STALE, writing nothing, when a file changed since. Permanent deletions cannot be undone. Retry a lost answer only with the same idempotencyKey. Returns the new history_status.",
            policy::ToolKind::History,
        ),
        tool::<engine::history::HistoryMoveArgs, engine::history::HistoryStatusOut>(
            "history_redo",
            "Redo the last undone change",
            "Re-applies the most recently undone change. expectedHistoryEntryId must be redoTop from history_status (else HISTORY_NOT_TOP); refused with HISTORY_STALE, writing nothing, when a file changed since. A new applied change clears what can be redone. Retry a lost answer only with the same idempotencyKey. Returns the new history_status.",
            policy::ToolKind::History,
        ),
        delete_permanent_tool(),
        empty_trash_tool(),
    ]
}

// ---- the catalog entries ------------------------------------------------------------------------

const DELETE_PERMANENT_DESCRIPTION: &str = "CRITICAL, irreversible: deletes notes for good (no trash, no undo; \
     undo history stops here). Two calls: the first (paths, idempotencyKey) executes nothing and returns a \
     challenge listing what would be deleted; show it to the user, then repeat the same call with its \
     challengeId, planHash and acknowledged: true. Prefer propose_delete, which can be undone.";

const EMPTY_TRASH_DESCRIPTION: &str = "CRITICAL, irreversible: removes every note that applied deletions moved \
     to the vault trash (undo history stops here). Two calls: the first (idempotencyKey) executes nothing \
     and returns a challenge listing what would be removed; show it to the user, then repeat the same call \
     with its challengeId, planHash and acknowledged: true.";

/// `_meta` of every critical tool (docs/contract.md#the-mcp-surface).
pub fn critical_meta() -> MetaObject {
    let mut m = JsonObject::new();
    m.insert("risk".into(), "critical".into());
    m.insert("approval".into(), "agent-challenge".into());
    m.insert("requiresCriticalConfirmation".into(), true.into());
    MetaObject(m)
}

fn critical_tool<I: JsonSchema + 'static>(
    name: &'static str,
    title: &str,
    description: &'static str,
) -> Tool {
    let mut ann = ToolAnnotations::with_title(title);
    ann.read_only_hint = Some(false);
    ann.destructive_hint = Some(true);
    ann.idempotent_hint = Some(false);
    ann.open_world_hint = Some(false);
    let input = schema_for_input::<I>().unwrap_or_else(|_| schema_for_empty_input());
    let mut tool = Tool::new(name, description, input);
    tool.title = Some(title.to_owned());
    tool.output_schema = Some(schema_for_output::<CriticalOut>());
    tool.annotations = Some(ann);
    tool.meta = Some(critical_meta());
    tool
}

/// The catalog entry of `delete_permanent`.
pub fn delete_permanent_tool() -> Tool {
    critical_tool::<DeletePermanentArgs>(
        DELETE_PERMANENT,
        "Delete notes permanently",
        DELETE_PERMANENT_DESCRIPTION,
    )
}

/// The catalog entry of `empty_trash`.
pub fn empty_trash_tool() -> Tool {
    critical_tool::<EmptyTrashArgs>(EMPTY_TRASH, "Empty the vault trash", EMPTY_TRASH_DESCRIPTION)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_catalog_entries_are_critical() {
        for t in [delete_permanent_tool(), empty_trash_tool()] {
            let v = serde_json::to_value(&t).unwrap();
            assert_eq!(v["annotations"]["destructiveHint"], true, "{v}");
            assert_eq!(v["annotations"]["readOnlyHint"], false, "{v}");
            assert_eq!(
                v["_meta"],
                serde_json::json!({"risk": "critical", "approval": "agent-challenge", "requiresCriticalConfirmation": true})
            );
            assert_eq!(v["outputSchema"]["type"], "object");
            assert!(policy::tools::find(&t.name).is_some_and(|s| s.kind == policy::ToolKind::Critical));
        }
    }
}
