//! The approval card (docs/contract.md#the-review-page-and-in-client-approval, "Approval card")
//! over the protocol, seen from the official MCP Python SDK (`tests/python/card_client.py`) and
//! from rmcp: the UI resource and the tools that name it, the sealed approval only in result
//! `_meta` and only for a session that declared the UI extension and a credential that opted in,
//! and every way an approval can be wrong — forged, expired, replayed, another credential's,
//! another proposal's, two tiers up — changing nothing. The card in a real browser host is
//! `card_browser.rs`.

use std::process::Stdio;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig};
use serde_json::{Value, json};

use crate::approval::{Via, flagged, python_session, set_approval_timeout};
use crate::http::Server;
use crate::util::{Env, audit_lines, bin, propose_new};

const HARNESS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/card_client.py");
const URI: &str = "ui://vaultgate/proposal";
const MIME: &str = "text/html;profile=mcp-app";

/// One Python SDK session (see the script's header); `ui`: declare the MCP Apps extension.
async fn session(via: Via<'_>, token: &str, ui: bool, calls: &[(&str, Value)]) -> Value {
    let mut args = vec!["--token", token];
    if ui {
        args.push("--ui");
    }
    let (v, _) = python_session(HARNESS, via, &args, calls, &[]).await;
    assert_eq!(v["calls"].as_array().map(Vec::len), Some(calls.len()), "{v:#}");
    v
}

fn call(run: &Value, i: usize) -> &Value {
    &run["calls"][i]
}

/// Call `i` succeeded: its structuredContent.
fn ok(run: &Value, i: usize) -> Value {
    let c = call(run, i);
    assert_eq!(c["isError"], false, "call {i} should succeed: {c:#}");
    c["structured"].clone()
}

/// Call `i` was refused: its error code.
fn code(run: &Value, i: usize) -> String {
    let c = call(run, i);
    assert_eq!(c["isError"], true, "call {i} should be refused: {c:#}");
    let text = c["content"][0]["text"].as_str().unwrap();
    let e: Value = serde_json::from_str(text).unwrap();
    e["code"].as_str().unwrap().to_owned()
}

fn approval_of(run: &Value, i: usize) -> Option<String> {
    call(run, i)["meta"]["vaultgate/approval"]
        .as_str()
        .map(str::to_owned)
}

/// SECURITY(T-APPROVE4): the approval never reaches what a model reads.
fn assert_approval_only_in_meta(run: &Value, i: usize) {
    let a = approval_of(run, i).expect("an approval in _meta");
    let c = call(run, i);
    assert!(
        !c["structured"].to_string().contains(&a),
        "not in structuredContent"
    );
    assert!(!c["content"].to_string().contains(&a), "not in content");
    assert!(
        !c["meta"]["vaultgate/card"].to_string().contains(&a),
        "not in the rendered view either"
    );
}

fn new_note(path: &str) -> Value {
    json!({"path": path, "content": "# Card\n\nwritten from the card\n", "reason": "a note to approve"})
}

fn approve(id: &Value, approval: &str, key: &str) -> Value {
    json!({"id": id, "approval": approval, "idempotencyKey": key})
}

fn apply_records(env: &Env, id: &Value) -> Vec<Value> {
    audit_lines(env)
        .into_iter()
        .filter(|r| r["proposalId"] == *id && r["outcome"] == "ok")
        .collect()
}

#[tokio::test]
async fn the_card_is_declared_listed_and_named_by_the_tools_it_renders() {
    let env = Env::new();
    let (_, token) = flagged(&env, "card", "propose");
    let run = session(Via::Stdio(&env), &token, true, &[]).await;
    assert_eq!(
        run["serverExtensions"]["io.modelcontextprotocol/ui"]["mimeTypes"],
        json!([MIME]),
        "the server declares the extension: {run:#}"
    );
    let listed: Vec<&Value> = run["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["uri"] == URI)
        .collect();
    assert_eq!(listed.len(), 1, "listed once in resources/list");
    assert_eq!(listed[0]["mimeType"], MIME);
    let card = &run["card"];
    assert_eq!(card["mimeType"], MIME);
    assert_eq!(card["meta"]["ui"]["csp"], json!({}), "a CSP that names no domain");
    let html = card["text"].as_str().unwrap();
    assert!(html.starts_with("<!doctype html>"));
    assert!(html.len() <= 64 * 1024, "the card is {} bytes", html.len());
    assert!(html.contains("ui/initialize") && html.contains("approve_proposal_in_app"));
    for needle in ["src=", "<link", "@import", "url("] {
        assert!(
            !html.contains(needle),
            "the card loads nothing from elsewhere ({needle})"
        );
    }
    eprintln!("card resource: {} bytes", html.len());

    let meta = |name: &str| -> Value {
        run["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} is listed"))["meta"]
            .clone()
    };
    for t in [
        "propose_new_note",
        "propose_note_patch",
        "propose_frontmatter_update",
        "propose_move",
        "propose_delete",
        "get_proposal",
        "apply_proposal",
    ] {
        assert_eq!(meta(t)["ui"]["resourceUri"], URI, "{t}");
        assert!(meta(t)["ui"].get("visibility").is_none(), "{t} is the model's");
    }
    for t in ["approve_proposal_in_app", "reject_proposal_in_app"] {
        assert_eq!(meta(t)["ui"]["visibility"], json!(["app"]), "{t} is app-only");
    }
    for t in [
        "delete_permanent",
        "empty_trash",
        "history_undo",
        "history_redo",
        "read_note",
    ] {
        assert!(meta(t).get("ui").is_none(), "{t} is never rendered by the card");
    }
}

#[tokio::test]
async fn an_approve_click_applies_a_propose_credentials_own_proposal_once_audited_as_app() {
    let env = Env::new();
    let (cred, token) = flagged(&env, "card", "propose");
    let run = session(
        Via::Stdio(&env),
        &token,
        true,
        &[
            ("propose_new_note", new_note("notes/from-card.md")),
            (
                "approve_proposal_in_app",
                approve(&json!("{{id:0}}"), "{{approval:0}}", "k1"),
            ),
            (
                "approve_proposal_in_app",
                approve(&json!("{{id:0}}"), "{{approval:0}}", "k1"),
            ),
            (
                "approve_proposal_in_app",
                approve(&json!("{{id:0}}"), "{{approval:0}}", "k2"),
            ),
            ("get_proposal", json!({"id": "{{id:0}}"})),
        ],
    )
    .await;
    let p = ok(&run, 0);
    assert_approval_only_in_meta(&run, 0);
    let view = &call(&run, 0)["meta"]["vaultgate/card"];
    assert_eq!(view["state"], "pending");
    assert_eq!(view["id"], p["id"]);
    assert!(view["approvalExpiresAt"].as_i64().is_some());
    let html = view["html"].as_str().unwrap();
    let (fields, reason) = (
        html.find("card-fields").unwrap(),
        html.find("id=\"reason\"").unwrap(),
    );
    assert!(fields < reason, "the fixed fields come before the agent's reason");

    let out = ok(&run, 1);
    assert_eq!(out["applied"], true, "{out}");
    assert_eq!(
        std::fs::read_to_string(env.vault.join("notes/from-card.md")).unwrap(),
        "# Card\n\nwritten from the card\n"
    );
    let again = ok(&run, 2);
    assert_eq!(
        again["historyEntryId"], out["historyEntryId"],
        "the same key answers the first result"
    );
    assert_eq!(code(&run, 3), "CAPABILITY_DENIED", "the approval is used once");
    assert_eq!(call(&run, 1)["meta"]["vaultgate/card"]["state"], "applied");
    assert!(
        approval_of(&run, 4).is_none(),
        "a decided proposal gets no approval"
    );

    let records = apply_records(&env, &p["id"]);
    let applied: Vec<&Value> = records.iter().filter(|r| r["approval"] == "app").collect();
    assert_eq!(applied.len(), 1, "one apply, audited approval: app: {records:#?}");
    assert_eq!(applied[0]["actor"]["credentialId"], cred);
    assert_eq!(applied[0]["tool"], "approve_proposal_in_app");
}

#[tokio::test]
async fn without_the_extension_or_the_opt_in_no_approval_is_given_and_none_is_accepted() {
    let env = Env::new();
    let (_, flagged_token) = flagged(&env, "card", "propose");
    let (_, plain_token) = env.token("plain", "propose");
    // A client that declared no UI extension gets no _meta, and costs nothing for it; the card
    // (rendered by a host that declared nothing) asks for its view, and gets no approval.
    let run = session(
        Via::Stdio(&env),
        &flagged_token,
        false,
        &[
            ("propose_new_note", new_note("notes/a.md")),
            ("get_proposal", json!({"id": "{{id:0}}"})),
            (
                "get_proposal",
                json!({"id": "{{id:0}}", "_meta": {"vaultgate/card": true}}),
            ),
            ("approve_proposal_in_app", approve(&json!("{{id:0}}"), "", "k")),
        ],
    )
    .await;
    ok(&run, 0);
    assert!(call(&run, 0)["meta"].is_null(), "{:#}", call(&run, 0));
    assert!(call(&run, 1)["meta"].is_null(), "{:#}", call(&run, 1));
    assert_eq!(
        call(&run, 2)["meta"]["vaultgate/card"]["state"],
        "pending",
        "{:#}",
        call(&run, 2)
    );
    assert!(
        approval_of(&run, 2).is_none(),
        "the card's own request gets no approval"
    );
    assert_eq!(code(&run, 3), "CAPABILITY_DENIED", "no approval, no apply");

    // A credential that did not opt in sees the card, without Approve.
    let run = session(
        Via::Stdio(&env),
        &plain_token,
        true,
        &[
            ("propose_new_note", new_note("notes/b.md")),
            ("approve_proposal_in_app", approve(&json!("{{id:0}}"), "x.y", "k")),
        ],
    )
    .await;
    ok(&run, 0);
    assert_eq!(call(&run, 0)["meta"]["vaultgate/card"]["state"], "pending");
    assert!(approval_of(&run, 0).is_none(), "no opt-in, no approval");
    assert_eq!(code(&run, 1), "CAPABILITY_DENIED");
    assert!(!env.vault.join("notes/a.md").exists() && !env.vault.join("notes/b.md").exists());
}

#[tokio::test]
async fn forged_expired_other_credentials_and_other_proposals_approvals_change_nothing() {
    let env = Env::new();
    set_approval_timeout(&env, 2);
    let (_, a) = flagged(&env, "card-a", "propose");
    let (_, b) = flagged(&env, "card-b", "propose");
    let run = session(
        Via::Stdio(&env),
        &a,
        true,
        &[
            ("propose_new_note", new_note("notes/one.md")),
            ("propose_new_note", new_note("notes/two.md")),
        ],
    )
    .await;
    let (one, two) = (ok(&run, 0), ok(&run, 1));
    let approval = approval_of(&run, 0).unwrap();
    // A forged approval: one hex digit of its body changed, and a body re-signed by nobody.
    let mut forged = approval.clone().into_bytes();
    forged[4] = if forged[4] == b'a' { b'b' } else { b'a' };
    let forged = String::from_utf8(forged).unwrap();
    let run_b = session(
        Via::Stdio(&env),
        &b,
        true,
        &[("approve_proposal_in_app", approve(&one["id"], &approval, "kb"))],
    )
    .await;
    assert_eq!(
        code(&run_b, 0),
        "CAPABILITY_DENIED",
        "another credential's approval"
    );
    let run = session(
        Via::Stdio(&env),
        &a,
        true,
        &[
            ("approve_proposal_in_app", approve(&one["id"], &forged, "k1")),
            ("approve_proposal_in_app", approve(&two["id"], &approval, "k2")),
            ("_sleep", json!({"seconds": 2.5})),
            ("approve_proposal_in_app", approve(&one["id"], &approval, "k3")),
            // The card asks get_proposal for a fresh one, and that one works.
            ("get_proposal", json!({"id": one["id"]})),
            (
                "approve_proposal_in_app",
                approve(&one["id"], "{{approval:4}}", "k4"),
            ),
        ],
    )
    .await;
    assert_eq!(code(&run, 0), "CAPABILITY_DENIED", "forged");
    assert_eq!(code(&run, 1), "CAPABILITY_DENIED", "another proposal's");
    assert_eq!(code(&run, 3), "CAPABILITY_DENIED", "expired");
    assert!(approval_of(&run, 4).is_some());
    assert_eq!(ok(&run, 5)["applied"], true);
    assert!(env.vault.join("notes/one.md").exists());
    assert!(!env.vault.join("notes/two.md").exists(), "nothing else changed");
}

#[tokio::test]
async fn a_reject_click_rejects_once_with_the_persons_reason_and_its_key_replays() {
    let env = Env::new();
    let (_, token) = flagged(&env, "card", "propose");
    let run = session(
        Via::Stdio(&env),
        &token,
        true,
        &[
            ("propose_new_note", new_note("notes/no.md")),
            (
                "reject_proposal_in_app",
                json!({"id": "{{id:0}}", "approval": "{{approval:0}}", "reason": "not now", "idempotencyKey": "r1"}),
            ),
            (
                "reject_proposal_in_app",
                json!({"id": "{{id:0}}", "approval": "{{approval:0}}", "reason": "not now", "idempotencyKey": "r1"}),
            ),
            ("get_proposal", json!({"id": "{{id:0}}"})),
        ],
    )
    .await;
    let p = ok(&run, 0);
    let first = ok(&run, 1);
    assert_eq!(first["rejected"], true);
    assert_eq!(ok(&run, 2), first, "the same key answers the first result");
    let shown = ok(&run, 3);
    assert_eq!(shown["status"], "rejected");
    assert_eq!(shown["rejectReason"], "not now");
    let records: Vec<Value> = apply_records(&env, &p["id"])
        .into_iter()
        .filter(|r| r["tool"] == "reject_proposal_in_app")
        .collect();
    // The rejection, then the replay's own record (every call is audited once).
    let decided: Vec<&Value> = records.iter().filter(|r| r["approval"] == "app").collect();
    assert_eq!(
        decided.len(),
        1,
        "one rejection decided by the card: {records:#?}"
    );
    assert_eq!(records.len(), 2, "{records:#?}");
}

#[tokio::test]
async fn one_step_up_only_and_critical_tools_stay_out_of_reach() {
    let env = Env::new();
    let (_, author) = env.token("author", "propose");
    let (_, prop) = flagged(&env, "card-propose", "propose");
    let (_, auto) = flagged(&env, "card-auto", "auto");
    let c = env.stdio(&author).await;
    let p = propose_new(&c, "notes/theirs.md", "# Theirs\n", "someone else's note").await;
    c.close().await;
    // Two steps up: a propose credential never gets an approval for another's proposal.
    let run = session(
        Via::Stdio(&env),
        &prop,
        true,
        &[
            ("get_proposal", json!({"id": p["id"]})),
            (
                "delete_permanent",
                json!({"paths": ["notes/cooking.md"], "idempotencyKey": "d1"}),
            ),
            ("empty_trash", json!({"idempotencyKey": "t1"})),
            (
                "history_undo",
                json!({"expectedHistoryEntryId": "h_x", "idempotencyKey": "u1"}),
            ),
        ],
    )
    .await;
    assert!(approval_of(&run, 0).is_none(), "two tiers up: no approval");
    for i in 1..4 {
        assert_eq!(code(&run, i), "CAPABILITY_DENIED", "{:#}", call(&run, i));
    }
    // One step up: an auto credential may approve anyone's proposal in the card.
    let run = session(
        Via::Stdio(&env),
        &auto,
        true,
        &[
            ("get_proposal", json!({"id": p["id"]})),
            (
                "approve_proposal_in_app",
                approve(&p["id"], "{{approval:0}}", "a1"),
            ),
        ],
    )
    .await;
    assert_approval_only_in_meta(&run, 0);
    assert_eq!(ok(&run, 1)["applied"], true);
    assert!(env.vault.join("notes/theirs.md").exists());
    assert!(
        env.vault.join("notes/cooking.md").exists(),
        "the critical tools deleted nothing"
    );
}

#[tokio::test]
async fn over_streamable_http_the_card_approves_as_over_stdio() {
    let env = Env::new();
    let (_, token) = flagged(&env, "card", "propose");
    let srv = Server::start(&env);
    let run = session(
        Via::Http(&srv),
        &token,
        true,
        &[
            ("propose_new_note", new_note("notes/http.md")),
            (
                "approve_proposal_in_app",
                approve(&json!("{{id:0}}"), "{{approval:0}}", "h1"),
            ),
        ],
    )
    .await;
    assert_approval_only_in_meta(&run, 0);
    assert_eq!(ok(&run, 1)["applied"], true);
    assert!(env.vault.join("notes/http.md").exists());
    let view = &call(&run, 1)["meta"]["vaultgate/card"];
    assert_eq!(view["state"], "applied");
    let url = view["reviewUrl"]
        .as_str()
        .expect("the running server's review page");
    assert!(url.starts_with("http://") && url.ends_with("/review/"), "{url}");
    assert!(!url.contains("code="), "never a login code");
}

#[tokio::test]
async fn an_rmcp_client_that_declares_the_extension_gets_the_approval_and_one_that_does_not_gets_none() {
    let env = Env::new();
    let (_, token) = flagged(&env, "card", "propose");
    let connect = |ui: bool| {
        let mut cmd = tokio::process::Command::new(bin());
        cmd.arg("stdio")
            .arg("--home")
            .arg(&env.home)
            .env_remove("VAULTGATE_HOME")
            .env("VAULTGATE_TOKEN", &token)
            .stderr(Stdio::null());
        let mut caps = ClientCapabilities::default();
        if ui {
            let mut settings = rmcp::model::JsonObject::new();
            settings.insert("mimeTypes".into(), json!([MIME]));
            caps.extensions = Some([("io.modelcontextprotocol/ui".to_owned(), settings)].into());
        }
        let info = ClientConfig::new(caps, rmcp::model::Implementation::new("card-test", "1"));
        async move {
            info.serve(rmcp::transport::TokioChildProcess::new(cmd).unwrap())
                .await
                .unwrap()
        }
    };
    for ui in [true, false] {
        let client = connect(ui).await;
        let args = new_note(if ui { "notes/r1.md" } else { "notes/r2.md" });
        let r = client
            .call_tool(
                CallToolRequestParams::new("propose_new_note")
                    .with_arguments(args.as_object().unwrap().clone()),
            )
            .await
            .unwrap();
        assert_eq!(r.is_error, Some(false));
        let meta = r.meta.map(|m| serde_json::to_value(m).unwrap());
        if ui {
            let meta = meta.expect("a declared client gets the card's _meta");
            assert!(meta["vaultgate/approval"].as_str().is_some_and(|a| a.len() > 64));
            assert_eq!(meta["vaultgate/card"]["state"], "pending");
        } else {
            assert!(meta.is_none(), "no extension, no _meta: {meta:?}");
        }
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn the_cards_state_is_pending_until_the_note_moves_on_then_stale() {
    let env = Env::new();
    let (_, token) = flagged(&env, "card", "propose");
    let c = env.stdio(&token).await;
    let hash = |r: crate::util::Reply| r.ok()["hash"].as_str().unwrap().to_owned();
    let untitled = hash(c.call("read_note", json!({"path": "notes/untitled.md"})).await);
    c.close().await;
    let run = session(
        Via::Stdio(&env),
        &token,
        true,
        &[
            (
                "propose_move",
                json!({"from": "notes/cooking.md", "to": "notes/recipes.md", "reason": "rename"}),
            ),
            (
                "propose_delete",
                json!({"path": "notes/untitled.md", "baseHash": untitled, "reason": "empty"}),
            ),
        ],
    )
    .await;
    let state = |i: usize| call(&run, i)["meta"]["vaultgate/card"]["state"].clone();
    assert_eq!(
        state(0),
        "pending",
        "a move is judged by its source: {:#}",
        call(&run, 0)
    );
    assert_eq!(state(1), "pending");
    // A person edits both notes: the card says the proposals are stale, before any apply.
    for note in ["notes/cooking.md", "notes/untitled.md"] {
        let path = env.vault.join(note);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, format!("{text}\nedited by a person\n")).unwrap();
    }
    let run = session(
        Via::Stdio(&env),
        &token,
        true,
        &[
            ("get_proposal", json!({"id": ok(&run, 0)["id"]})),
            ("get_proposal", json!({"id": ok(&run, 1)["id"]})),
        ],
    )
    .await;
    for i in 0..2 {
        let view = &call(&run, i)["meta"]["vaultgate/card"];
        assert_eq!(view["state"], "stale", "{view:#}");
        assert!(view["html"].as_str().unwrap().contains("data-state=\"stale\""));
    }
}

/// docs/contract.md#the-mcp-surface: an agent's text in the card's view is escaped by the server's
/// one renderer — markup inert, bidirectional and invisible characters shown as `\u{XXXX}` — after
/// the fixed fields.
#[tokio::test]
async fn a_hostile_reason_reaches_the_cards_view_escaped_and_last() {
    let env = Env::new();
    let (_, token) = flagged(&env, "card", "propose");
    let reason = "fine\u{202E}txt.exe <script>alert(1)</script>\u{200B}";
    let run = session(
        Via::Stdio(&env),
        &token,
        true,
        &[(
            "propose_new_note",
            json!({"path": "notes/hostile.md", "content": "# H\n", "reason": reason}),
        )],
    )
    .await;
    let html = call(&run, 0)["meta"]["vaultgate/card"]["html"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!html.contains('\u{202E}') && !html.contains('\u{200B}'), "{html}");
    assert!(html.contains("\\u{202E}") && html.contains("\\u{200B}"), "{html}");
    assert!(
        !html.contains("<script>") && html.contains("&lt;script&gt;"),
        "{html}"
    );
    assert!(html.find("card-fields").unwrap() < html.find("id=\"reason\"").unwrap());
}
