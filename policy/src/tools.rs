//! The static tool catalog's risk table: every tool's name, kind and the capability it needs.

use crate::tier::Capability;

/// How a tool may affect a vault; decides annotations and the capability checked first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolKind {
    /// Never changes anything.
    Read,
    /// Writes only a proposal into the inbox.
    Propose,
    /// Applies or rejects a proposal (own or, for `full`, anyone's).
    Decide,
    /// Moves the shared history.
    History,
    /// Irreversible; always two calls through a challenge.
    Critical,
}

#[derive(Debug, Clone, Copy)]
pub struct ToolSpec {
    pub name: &'static str,
    pub kind: ToolKind,
    /// A person's yes in the client may stand in for the tier ([`crate::tier::may_apply`]):
    /// `apply_proposal`, and the approval card's two app-only tools (whose sealed approval is
    /// that yes) — never `reject_proposal`, undo, redo or critical tools.
    pub person_may_approve: bool,
}

impl ToolSpec {
    /// Whether `tier` may call this tool at all, before any state is looked at: its capability,
    /// or for a tool a person may approve, the chance of a person's yes on the caller's own
    /// proposal (the proposal's own rule is decided once it is read).
    pub fn allowed_for(&self, tier: crate::Tier, approve_in_client: bool) -> bool {
        tier.allows(self.capability())
            || (self.person_may_approve
                && crate::tier::may_apply(tier, approve_in_client, true) != crate::tier::MayApply::Deny)
    }

    /// The capability checked before any state is looked at.
    pub fn capability(&self) -> Capability {
        match self.kind {
            ToolKind::Read => Capability::Read,
            ToolKind::Propose => Capability::Propose,
            ToolKind::Decide => Capability::DecideOwn,
            ToolKind::History => Capability::History,
            ToolKind::Critical => Capability::Critical,
        }
    }

    pub fn is_mutating(&self) -> bool {
        !matches!(self.kind, ToolKind::Read)
    }

    /// A call the vault's one writer runs (an apply, reject, undo/redo, challenge): it waits for
    /// the writer at most `apply_wait_seconds` (docs/contract.md#applying-a-proposal).
    pub fn waits_for_writer(&self) -> bool {
        matches!(
            self.kind,
            ToolKind::Decide | ToolKind::History | ToolKind::Critical
        )
    }
}

const fn t(name: &'static str, kind: ToolKind) -> ToolSpec {
    ToolSpec {
        name,
        kind,
        person_may_approve: false,
    }
}

/// A tool a person's yes in the client may allow beyond the tier.
const fn approvable(name: &'static str) -> ToolSpec {
    ToolSpec {
        name,
        kind: ToolKind::Decide,
        person_may_approve: true,
    }
}

/// Every tool of docs/contract.md#the-mcp-surface, in catalog order.
pub const TOOLS: &[ToolSpec] = &[
    t("vault_list", ToolKind::Read),
    t("get_vault_overview", ToolKind::Read),
    t("search_knowledge", ToolKind::Read),
    t("search_note_content", ToolKind::Read),
    t("read_note", ToolKind::Read),
    t("get_note_history", ToolKind::Read),
    t("list_notes", ToolKind::Read),
    t("list_standards", ToolKind::Read),
    t("list_tags", ToolKind::Read),
    t("get_related_notes", ToolKind::Read),
    t("list_recent_notes", ToolKind::Read),
    t("query_notes", ToolKind::Read),
    t("list_attachments", ToolKind::Read),
    t("read_attachment_text", ToolKind::Read),
    t("list_proposals", ToolKind::Read),
    t("get_proposal", ToolKind::Read),
    t("history_status", ToolKind::Read),
    t("propose_new_note", ToolKind::Propose),
    t("propose_note_patch", ToolKind::Propose),
    t("propose_frontmatter_update", ToolKind::Propose),
    t("propose_move", ToolKind::Propose),
    t("propose_delete", ToolKind::Propose),
    approvable("apply_proposal"),
    t("reject_proposal", ToolKind::Decide),
    approvable("approve_proposal_in_app"),
    approvable("reject_proposal_in_app"),
    t("history_undo", ToolKind::History),
    t("history_redo", ToolKind::History),
    t("delete_permanent", ToolKind::Critical),
    t("empty_trash", ToolKind::Critical),
];

/// Looks a tool up by its exact name.
pub fn find(name: &str) -> Option<&'static ToolSpec> {
    TOOLS.iter().find(|s| s.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tier::Tier;

    #[test]
    fn names_are_unique() {
        let mut names: Vec<_> = TOOLS.iter().map(|t| t.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), TOOLS.len());
    }

    #[test]
    fn read_tier_may_call_only_read_tools() {
        for spec in TOOLS {
            assert_eq!(
                Tier::Read.allows(spec.capability()),
                spec.kind == ToolKind::Read,
                "{}",
                spec.name
            );
        }
    }
}
