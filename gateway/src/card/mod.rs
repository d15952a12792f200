//! The approval card (docs/contract.md#the-review-page-and-in-client-approval, "Approval card"):
//! the MCP Apps UI resource `ui://vaultgate/proposal`, the `_meta` that names it on the tools
//! whose results it renders, and the `_meta` of those results — the proposal as the review page
//! renders it and, for a credential that may decide it with a click, the sealed approval.
//!
//! The engine decides who may approve and seals the approval; this module only places it, and
//! only for sessions that declared the UI extension (a client that cannot render the card never
//! receives an approval, so no model sees one). The view goes to those sessions and to the card's
//! own requests (`_meta["vaultgate/card"]: true`), since Claude and VS Code render the card
//! without declaring the extension; the card shows no text of an agent's that this renderer did
//! not escape.

use rmcp::model::{ClientCapabilities, JsonObject, MetaObject, Resource, ResourceContents};
use serde_json::{Value, json};

use engine::core::{Caller, Core};
use engine::ids::ProposalId;

use crate::review::pages;

pub const URI: &str = "ui://vaultgate/proposal";
pub const MIME: &str = "text/html;profile=mcp-app";
/// The MCP Apps extension's identifier.
pub const EXTENSION: &str = "io.modelcontextprotocol/ui";
/// The card: one self-contained file (style and script inline, nothing loaded from elsewhere).
pub const HTML: &str = include_str!("card.html");

/// Where the sealed approval travels: result `_meta` only, never `content` or `structuredContent`.
pub const APPROVAL_KEY: &str = "vaultgate/approval";
/// The rendered proposal and its state in a result's `_meta`; in a request's `_meta` (`true`), the
/// card asking for it.
pub const CARD_KEY: &str = "vaultgate/card";

/// Past this the card shows the fixed fields and the reason, and sends the diff to the review page.
const MAX_CARD_HTML: usize = 256 * 1024;

/// The tools whose results the card renders (their catalog entries name it).
pub fn renders(tool: &str) -> bool {
    matches!(
        tool,
        "propose_new_note"
            | "propose_note_patch"
            | "propose_frontmatter_update"
            | "propose_move"
            | "propose_delete"
            | "get_proposal"
            | "apply_proposal"
            | "approve_proposal_in_app"
            | "reject_proposal_in_app"
    )
}

/// Tools only the card calls: hosts keep them from the model.
pub fn app_only(tool: &str) -> bool {
    matches!(tool, "approve_proposal_in_app" | "reject_proposal_in_app")
}

/// A tool's `_meta.ui`: the card, and for the app-only tools their visibility.
pub fn tool_meta(tool: &str) -> MetaObject {
    let mut ui = JsonObject::new();
    ui.insert("resourceUri".into(), URI.into());
    if app_only(tool) {
        ui.insert("visibility".into(), json!(["app"]));
    }
    let mut m = JsonObject::new();
    m.insert("ui".into(), Value::Object(ui));
    MetaObject(m)
}

/// The server's declaration of the extension (`capabilities.extensions`).
pub fn extension_settings() -> JsonObject {
    let mut s = JsonObject::new();
    s.insert("mimeTypes".into(), json!([MIME]));
    s
}

/// Whether the client declared it renders MCP Apps (in `initialize`, or on 2026-07-28 in the
/// request's own capabilities): the extension, with our MIME type among its `mimeTypes` when it
/// lists any.
pub fn declared(caps: Option<&ClientCapabilities>) -> bool {
    let Some(settings) = caps
        .and_then(|c| c.extensions.as_ref())
        .and_then(|e| e.get(EXTENSION))
    else {
        return false;
    };
    match settings.get("mimeTypes") {
        None => true,
        Some(Value::Array(types)) => types.iter().any(|t| t.as_str() == Some(MIME)),
        Some(_) => false,
    }
}

/// Whether a request is the card's own, asking for its view (request `_meta["vaultgate/card"]`).
pub fn asks_view(meta: Option<&rmcp::model::MetaObject>) -> bool {
    meta.and_then(|m| m.get(CARD_KEY)).and_then(Value::as_bool) == Some(true)
}

pub fn resource() -> Resource {
    Resource::new(URI, "proposal-card")
        .with_title("Proposal card")
        .with_description("The approval card: a proposal's fields, diff and reason, with Approve and Reject where the credential allows")
        .with_mime_type(MIME)
}

/// The resource's contents, with `_meta.ui`: a CSP that names no domain (the card loads
/// nothing), and a border.
pub fn contents() -> ResourceContents {
    let mut ui = JsonObject::new();
    ui.insert("csp".into(), json!({}));
    ui.insert("prefersBorder".into(), true.into());
    let mut meta = JsonObject::new();
    meta.insert("ui".into(), Value::Object(ui));
    ResourceContents::TextResourceContents {
        uri: URI.into(),
        mime_type: Some(MIME.into()),
        text: HTML.into(),
        meta: Some(MetaObject(meta)),
    }
}

/// The `_meta` of a result the card renders, for proposal `id`: the rendered proposal and its
/// state, where the review page is, and — when the engine gives this credential one — the sealed
/// approval. `None` when the proposal cannot be read (the result itself says why).
/// `with_approval`: the session declared the UI extension (a client that cannot render the card
/// never receives an approval, so no model sees one).
pub fn result_meta(
    core: &Core,
    caller: &Caller,
    vault: Option<&str>,
    id: &str,
    with_approval: bool,
) -> Option<MetaObject> {
    let v = core.resolve_vault(&caller.credential, vault).ok()?;
    let id = ProposalId::from_wire(id.to_owned());
    let p = core.proposals().get_proposal(&v, &id).ok()?;
    let parts = pages::Parts::of(core, &v, &p).ok()?;
    let state = core.proposals().card_state(&v, &p).ok()?;
    let size = core.approvals().change_size(&v, &p).ok()?;
    let view = parts.view(&p);
    let mut html = pages::card(&view, size, &state, true).into_string();
    if html.len() > MAX_CARD_HTML {
        html = pages::card(&view, size, &state, false).into_string();
    }
    let approval = match with_approval.then(|| core.approvals().app_approval(&caller.credential, &v, &id)) {
        None => None,
        Some(Ok(a)) => a,
        Some(Err(e)) => {
            tracing::warn!(error = %e, "sealing a card approval failed");
            None
        }
    };
    let card = json!({
        "id": p.item.id,
        "vault": v.id,
        "state": state,
        "html": html,
        "reviewUrl": review_url(core),
        "approvalExpiresAt": approval.as_ref().map(|a| a.expires_at),
    });
    let mut m = JsonObject::new();
    m.insert(CARD_KEY.into(), card);
    if let Some(a) = approval {
        m.insert(APPROVAL_KEY.into(), a.value.into());
    }
    Some(MetaObject(m))
}

/// The running server's review page (never a login code), when one of this home listens.
fn review_url(core: &Core) -> Option<String> {
    if !core.config().review.enabled {
        return None;
    }
    let r = engine::review::read_server_record(&core.home)?;
    if !crate::cli::review::process_alive(r.pid) {
        return None;
    }
    let host = if r.host.contains(':') {
        format!("[{}]", r.host)
    } else {
        r.host
    };
    Some(format!("http://{host}:{}/review/", r.port))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn caps(v: Value) -> ClientCapabilities {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn only_a_declared_ui_extension_counts() {
        assert!(!declared(None));
        assert!(!declared(Some(&caps(json!({})))));
        assert!(!declared(Some(&caps(json!({"elicitation": {}})))));
        assert!(declared(Some(&caps(
            json!({"extensions": {EXTENSION: {"mimeTypes": [MIME]}}})
        ))));
        assert!(declared(Some(&caps(json!({"extensions": {EXTENSION: {}}})))));
        assert!(!declared(Some(&caps(
            json!({"extensions": {EXTENSION: {"mimeTypes": ["text/html"]}}})
        ))));
        assert!(!declared(Some(&caps(
            json!({"extensions": {"io.example/other": {"mimeTypes": [MIME]}}})
        ))));
    }

    #[test]
    fn only_a_request_that_asks_for_the_view_gets_it() {
        let meta = |v: Value| MetaObject(v.as_object().unwrap().clone());
        assert!(!asks_view(None));
        assert!(!asks_view(Some(&meta(json!({})))));
        assert!(!asks_view(Some(&meta(json!({CARD_KEY: "yes"})))));
        assert!(asks_view(Some(&meta(json!({CARD_KEY: true})))));
    }

    #[test]
    fn the_card_is_self_contained_and_small() {
        // docs/contract.md#the-review-page-and-in-client-approval: no script, style or font from anywhere else.
        for needle in ["src=", "href=\"http", "@import", "url(", "//cdn", "<link"] {
            assert!(
                !HTML.contains(needle),
                "the card must load nothing: found {needle}"
            );
        }
        assert!(
            HTML.len() <= 64 * 1024,
            "the card is {} bytes, over its 64 KiB budget",
            HTML.len()
        );
    }

    #[test]
    fn app_only_tools_say_so_and_the_others_name_the_card() {
        let m = serde_json::to_value(tool_meta("approve_proposal_in_app")).unwrap();
        assert_eq!(m["ui"]["visibility"], json!(["app"]));
        assert_eq!(m["ui"]["resourceUri"], URI);
        let m = serde_json::to_value(tool_meta("get_proposal")).unwrap();
        assert!(m["ui"].get("visibility").is_none());
        assert_eq!(m["ui"]["resourceUri"], URI);
    }
}
