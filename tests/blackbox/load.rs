//! The read path under load (issue: the read path at the machine's limit): the cheap
//! authentication (a credential cache checked against the credentials' generation on every
//! request) must keep revocation and tier changes effective on the very next request, and the
//! audit must keep one record per call, whatever the concurrency. Nothing here is timed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::http::{Server, bearer, open_session, post, reply, request, stateless_meta};
use crate::util::Env;
use crate::util::audit_lines;

const CLIENTS: usize = 8;

/// How one client talks: the 2026-07-28 protocol (no session), or a 2025-06-18 legacy session.
#[derive(Clone)]
enum Protocol {
    Stateless,
    Legacy(String),
}

/// One `tools/call` over raw HTTP: `Ok(result)` or `Err(code)` (a tool error's code, or the
/// `code` of a refused HTTP request, with its status).
async fn call(
    srv: &Server,
    auth: &str,
    proto: &Protocol,
    id: i64,
    tool: &str,
    args: Value,
) -> Result<Value, String> {
    let (body, headers): (Value, Vec<(&str, String)>) = match proto {
        Protocol::Stateless => (
            request(
                id,
                "tools/call",
                json!({"name": tool, "arguments": args, "_meta": stateless_meta()}),
            ),
            vec![
                ("MCP-Protocol-Version", "2026-07-28".to_owned()),
                ("Mcp-Method", "tools/call".to_owned()),
                ("Mcp-Name", tool.to_owned()),
            ],
        ),
        Protocol::Legacy(sid) => (
            request(id, "tools/call", json!({"name": tool, "arguments": args})),
            vec![
                ("Mcp-Session-Id", sid.clone()),
                ("MCP-Protocol-Version", "2025-06-18".to_owned()),
            ],
        ),
    };
    let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let resp = post(srv, Some(auth), &h, &body).await;
    let status = resp.status().as_u16();
    if status != 200 {
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        return Err(format!(
            "{} (HTTP {status})",
            body["code"].as_str().unwrap_or("?")
        ));
    }
    let v = reply(resp, id).await;
    let result = &v["result"];
    if result["isError"] == json!(true) {
        let text = result["content"][0]["text"].as_str().unwrap_or("{}");
        let e: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        return Err(e["code"].as_str().unwrap_or("?").to_owned());
    }
    Ok(result["structuredContent"].clone())
}

/// What one call saw, and when it was sent and answered.
struct Seen {
    sent: Instant,
    outcome: Result<Value, String>,
}

/// `CLIENTS` clients (half stateless, half on legacy sessions) calling `tool` with `args` in a
/// loop until `stop` is set; returns every call each of them made.
async fn hammer(
    srv: Arc<Server>,
    token: String,
    tool: &'static str,
    args: Value,
    stop: Arc<AtomicBool>,
) -> Vec<Seen> {
    let auth = bearer(&token);
    let mut set = tokio::task::JoinSet::new();
    for i in 0..CLIENTS {
        let proto = if i % 2 == 0 {
            Protocol::Stateless
        } else {
            Protocol::Legacy(open_session(&srv, &auth, "2025-06-18").await)
        };
        let (srv, auth, args, stop) = (srv.clone(), auth.clone(), args.clone(), stop.clone());
        set.spawn(async move {
            let mut seen = Vec::new();
            let mut id = 10;
            while !stop.load(Ordering::Relaxed) {
                id += 1;
                let sent = Instant::now();
                let outcome = call(&srv, &auth, &proto, id, tool, args.clone()).await;
                seen.push(Seen { sent, outcome });
            }
            seen
        });
    }
    let mut all = Vec::new();
    while let Some(r) = set.join_next().await {
        all.extend(r.expect("a client task failed"));
    }
    all
}

/// Runs `change` (a CLI command) while `CLIENTS` clients hammer the server; returns the calls
/// and the instant the command had returned.
async fn change_under_load(
    env: &Env,
    srv: Arc<Server>,
    token: &str,
    tool: &'static str,
    args: Value,
    change: &[&str],
) -> (Vec<Seen>, Instant) {
    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn(hammer(srv, token.to_owned(), tool, args, stop.clone()));
    // Let every client get going before the change.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let args: Vec<String> = change.iter().map(|s| (*s).to_owned()).collect();
    let home = env.home.clone();
    let changed = tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(crate::util::bin())
            .arg("--home")
            .arg(home)
            .args(&args)
            .env_remove("VAULTGATE_HOME")
            .env_remove("VAULTGATE_TOKEN")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Instant::now()
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    stop.store(true, Ordering::Relaxed);
    (load.await.unwrap(), changed)
}

/// Asserts that enough calls were sent after `changed` (when `command` had returned) and that every
/// one of them was refused with `code`.
fn every_later_call_is_refused(seen: &[Seen], changed: Instant, code: &str, command: &str) {
    let after: Vec<&Seen> = seen.iter().filter(|s| s.sent > changed).collect();
    assert!(
        after.len() >= CLIENTS,
        "only {} calls were sent after `{command}` returned",
        after.len()
    );
    let wrong: Vec<&Result<Value, String>> = after
        .iter()
        .map(|s| &s.outcome)
        .filter(|o| o.as_ref().err().is_none_or(|e| e != code))
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {} calls sent after `{command}` returned were not refused with {code}: {:?}",
        wrong.len(),
        after.len(),
        &wrong[..wrong.len().min(5)]
    );
}

#[tokio::test]
async fn a_token_revoked_while_eight_clients_use_it_has_no_call_succeed_after_the_revocation() {
    let env = Env::new();
    let (_, token) = env.token("busy", "auto");
    let srv = Arc::new(Server::start(&env));
    let (seen, revoked) = change_under_load(
        &env,
        srv.clone(),
        &token,
        "read_note",
        json!({"path": "welcome.md"}),
        &["token", "revoke", "busy"],
    )
    .await;

    let before = seen
        .iter()
        .filter(|s| s.sent < revoked && s.outcome.is_ok())
        .count();
    assert!(
        before >= CLIENTS,
        "only {before} calls succeeded before the revocation"
    );
    every_later_call_is_refused(&seen, revoked, "CREDENTIAL_REVOKED (HTTP 401)", "token revoke");
}

#[tokio::test]
async fn a_tier_lowered_while_eight_clients_use_it_applies_to_every_later_call() {
    let env = Env::new();
    let (_, token) = env.token("busy", "auto");
    let srv = Arc::new(Server::start(&env));
    // A proposal with no edits: a tier that may propose gets past the capability check and is
    // refused for its arguments; a read tier is refused for its capability first.
    let (seen, lowered) = change_under_load(
        &env,
        srv.clone(),
        &token,
        "propose_note_patch",
        json!({"path": "welcome.md", "baseHash": "0".repeat(64), "edits": []}),
        &["token", "set-tier", "busy", "read"],
    )
    .await;

    let before: Vec<&Seen> = seen.iter().filter(|s| s.sent < lowered).collect();
    assert!(
        before
            .iter()
            .any(|s| s.outcome.as_ref().err().is_some_and(|e| e != "CAPABILITY_DENIED")),
        "no call before the change got past the capability check: {:?}",
        before.first().map(|s| &s.outcome)
    );
    every_later_call_is_refused(&seen, lowered, "CAPABILITY_DENIED", "token set-tier … read");
}

#[tokio::test]
async fn after_a_load_run_the_audit_holds_exactly_one_record_per_call() {
    let env = Env::new();
    let (id, token) = env.token("busy", "read");
    let srv = Arc::new(Server::start(&env));
    let stop = Arc::new(AtomicBool::new(false));
    // Answers and refusals alike: every other call names a note that does not exist.
    let ok = tokio::spawn(hammer(
        srv.clone(),
        token.clone(),
        "read_note",
        json!({"path": "welcome.md"}),
        stop.clone(),
    ));
    let missing = tokio::spawn(hammer(
        srv.clone(),
        token.clone(),
        "read_note",
        json!({"path": "no/such-note.md"}),
        stop.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Relaxed);
    let ok = ok.await.unwrap();
    let missing = missing.await.unwrap();
    assert!(
        ok.iter().all(|s| s.outcome.is_ok()),
        "a read of welcome.md failed"
    );
    assert!(
        missing
            .iter()
            .all(|s| s.outcome.as_ref().err().is_some_and(|e| e == "NOT_FOUND")),
        "a read of a missing note was not NOT_FOUND"
    );
    let calls = ok.len() + missing.len();
    assert!(calls >= 4 * CLIENTS, "only {calls} calls were made");

    let lines = audit_lines(&env);
    let mine = |outcome: &str| {
        lines
            .iter()
            .filter(|l| {
                l["event"] == "tool_call"
                    && l["tool"] == "read_note"
                    && l["actor"]["credentialId"] == json!(id)
                    && l["outcome"] == outcome
            })
            .count()
    };
    let answered = mine("ok");
    let refused = lines
        .iter()
        .filter(|l| {
            l["event"] == "tool_call" && l["tool"] == "read_note" && l["actor"]["credentialId"] == json!(id)
        })
        .count()
        - answered;
    assert_eq!(
        (answered, refused),
        (ok.len(), missing.len()),
        "records of answered and refused calls against the calls made"
    );
    env.ok(&["audit", "verify"]);
}
