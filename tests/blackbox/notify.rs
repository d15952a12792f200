//! Change announcements (docs/contract.md#the-mcp-surface): `notifications/resources/updated` to subscribers and a
//! `vault.changed` log message only to clients that asked for log messages — over stdio, for a
//! legacy `initialize` session and for a 2026-07-28 `subscriptions/listen` subscription.
#![allow(deprecated)]

use std::time::Duration;

use rmcp::model::{
    LoggingLevel, ProtocolVersion, ServerNotification, SetLevelRequestParams, SubscribeRequestParams,
    SubscriptionFilter,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::util::{Env, Recorder, bin, to_reply};

fn command(env: &Env, token: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(bin());
    cmd.arg("stdio")
        .arg("--home")
        .arg(&env.home)
        .env_remove("VAULTGATE_HOME")
        .env("VAULTGATE_TOKEN", token)
        .stderr(std::process::Stdio::null());
    cmd
}

async fn connect(env: &Env, token: &str, rec: Recorder) -> RunningService<RoleClient, Recorder> {
    rec.serve(TokioChildProcess::new(command(env, token)).unwrap())
        .await
        .unwrap()
}

async fn wait_for(mut cond: impl FnMut() -> bool) -> bool {
    for _ in 0..100 {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cond()
}

async fn revision(c: &RunningService<RoleClient, Recorder>) -> u64 {
    call_ok(c, "get_vault_overview", json!({})).await["revision"]
        .as_u64()
        .unwrap()
}

#[tokio::test]
async fn an_edit_on_disk_is_announced_to_subscribers_and_log_listeners_only() {
    let env = Env::new();
    let (_, token) = env.token("watcher", "read");
    let listening = Recorder::default();
    let quiet = Recorder::default();
    let a = connect(&env, &token, listening.clone()).await;
    let b = connect(&env, &token, quiet.clone()).await;
    a.subscribe(SubscribeRequestParams::new("vaultgate://vault/basic"))
        .await
        .unwrap();
    a.set_level(SetLevelRequestParams::new(LoggingLevel::Info))
        .await
        .unwrap();
    let before = revision(&a).await;

    std::fs::write(env.vault.join("z/new-idea.md"), "# New idea\n").unwrap();

    assert!(
        wait_for(|| !listening.updated.lock().unwrap().is_empty()).await,
        "no resources/updated"
    );
    assert_eq!(listening.updated.lock().unwrap()[0], "vaultgate://vault/basic");
    assert!(
        wait_for(|| !listening.logs.lock().unwrap().is_empty()).await,
        "no log message"
    );
    let log = listening.logs.lock().unwrap()[0].clone();
    assert_eq!(log["type"], "vault.changed");
    assert_eq!(log["vault"], "basic");
    let after = revision(&a).await;
    assert!(after > before, "revision moved: {before} -> {after}");
    assert!(log["revision"].as_u64().unwrap() > before);
    // Two servers watch the same vault: the one edit moves the revision once.
    assert_eq!(revision(&b).await, after);
    assert_eq!(after, before + 1);
    // The client that neither subscribed nor asked for log messages heard nothing.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(quiet.updated.lock().unwrap().is_empty());
    assert!(quiet.logs.lock().unwrap().is_empty());
    let _ = a.cancel().await;
    let _ = b.cancel().await;
}

#[tokio::test]
async fn a_revoked_subscriber_hears_nothing_more() {
    let env = Env::new();
    let (_, token) = env.token("soon-revoked", "read");
    let rec = Recorder::default();
    let a = connect(&env, &token, rec.clone()).await;
    a.subscribe(SubscribeRequestParams::new("vaultgate://vault/basic"))
        .await
        .unwrap();
    env.ok(&["token", "revoke", "soon-revoked"]);
    std::fs::write(env.vault.join("z/after-revoke.md"), "# x\n").unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        rec.updated.lock().unwrap().is_empty(),
        "{:?}",
        rec.updated.lock().unwrap()
    );
    let _ = a.cancel().await;
}

#[tokio::test]
async fn subscribing_to_an_invisible_vault_is_refused() {
    let env = Env::new();
    let (_, token) = env.token("r", "read");
    let a = connect(&env, &token, Recorder::default()).await;
    assert!(
        a.subscribe(SubscribeRequestParams::new("vaultgate://vault/nope"))
            .await
            .is_err()
    );
    assert!(
        a.subscribe(SubscribeRequestParams::new("vaultgate://invariants"))
            .await
            .is_err()
    );
    let _ = a.cancel().await;
}

#[tokio::test]
async fn a_2026_07_28_subscription_receives_resource_updates() {
    let env = Env::new();
    let (_, token) = env.token("modern", "read");
    let client = Recorder::default()
        .serve_with_lifecycle(
            TokioChildProcess::new(command(&env, &token)).unwrap(),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap();
    let mut filter = SubscriptionFilter::new();
    filter.resource_subscriptions = Some(vec![
        "vaultgate://vault/basic".into(),
        "file:///etc/passwd".into(),
    ]);
    let mut sub = client.listen(filter).await.unwrap();
    assert_eq!(
        sub.acknowledged()
            .resource_subscriptions
            .clone()
            .unwrap_or_default(),
        vec!["vaultgate://vault/basic".to_owned()],
        "only vault URIs are accepted"
    );
    std::fs::write(env.vault.join("z/modern.md"), "# modern\n").unwrap();
    let n = tokio::time::timeout(Duration::from_secs(5), sub.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    match n {
        ServerNotification::ResourceUpdatedNotification(u) => {
            assert_eq!(u.params.uri, "vaultgate://vault/basic")
        }
        other => panic!("unexpected notification {other:?}"),
    }
    // The stateless client can still call tools.
    let mut p = rmcp::model::CallToolRequestParams::new("read_note");
    p.arguments = Some(json!({"path": "z/modern.md"}).as_object().unwrap().clone());
    assert_eq!(
        to_reply(client.call_tool(p).await.unwrap()).ok()["title"],
        "modern"
    );
    let _ = client.cancel().await;
}

#[tokio::test]
async fn a_legacy_http_session_hears_about_changes_it_subscribed_to() {
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    let env = Env::new();
    let (_, token) = env.token("http-watcher", "read");
    let srv = crate::http::Server::start(&env);
    let rec = Recorder::default();
    let cfg = StreamableHttpClientTransportConfig::with_uri(srv.url()).auth_header(token);
    let client = rec
        .clone()
        .serve(StreamableHttpClientTransport::from_config(cfg))
        .await
        .unwrap();
    client
        .subscribe(SubscribeRequestParams::new("vaultgate://vault/basic"))
        .await
        .unwrap();
    client
        .set_level(SetLevelRequestParams::new(LoggingLevel::Info))
        .await
        .unwrap();
    std::fs::write(env.vault.join("z/over-http.md"), "# over http\n").unwrap();
    assert!(
        wait_for(|| !rec.updated.lock().unwrap().is_empty()).await,
        "no resources/updated over HTTP"
    );
    assert_eq!(rec.updated.lock().unwrap()[0], "vaultgate://vault/basic");
    assert!(
        wait_for(|| !rec.logs.lock().unwrap().is_empty()).await,
        "no log message over HTTP"
    );
    assert_eq!(rec.logs.lock().unwrap()[0]["type"], "vault.changed");
    let _ = client.cancel().await;
}

async fn call_ok(c: &RunningService<RoleClient, Recorder>, tool: &str, args: Value) -> Value {
    let mut p = rmcp::model::CallToolRequestParams::new(tool.to_owned());
    p.arguments = args.as_object().cloned();
    to_reply(c.call_tool(p).await.unwrap()).ok()
}

/// docs/contract.md#the-mcp-surface, docs/contract.md#proposals: vaultgate recognises its own writes (no second announcement, no extra revision),
/// while an edit made outside it in the middle of a stream of applies is still seen, counted
/// once and announced once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outside_edit_during_a_stream_of_applies_is_announced_once() {
    const APPLIES: u64 = 40;
    let env = Env::new();
    let (_, token) = env.token("streamer", "full");
    let rec = Recorder::default();
    let a = connect(&env, &token, rec.clone()).await;
    a.subscribe(SubscribeRequestParams::new("vaultgate://vault/basic"))
        .await
        .unwrap();
    a.set_level(SetLevelRequestParams::new(LoggingLevel::Info))
        .await
        .unwrap();
    let before = revision(&a).await;

    // The outside edit lands while the applies run, from another thread, at a time the stream
    // does not choose.
    let outside = env.vault.join("z/outside-edit.md");
    let editor = {
        let outside = outside.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(400));
            std::fs::write(&outside, "# Outside\n\nquillfeather was written by hand\n").unwrap();
        })
    };
    for i in 0..APPLIES {
        let p = call_ok(
            &a,
            "propose_new_note",
            json!({"path": format!("z/stream/n{i:03}.md"), "content": format!("# N{i}\n"), "reason": "stream"}),
        )
        .await;
        let applied = call_ok(
            &a,
            "apply_proposal",
            json!({"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": format!("stream-{i}")}),
        )
        .await;
        assert_eq!(applied["applied"], true, "{applied}");
    }
    editor.join().unwrap();
    assert!(outside.exists());

    let want = before + APPLIES + 1;
    let mut now = revision(&a).await;
    for _ in 0..100 {
        if now >= want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        now = revision(&a).await;
    }
    assert_eq!(now, want, "each apply counts once and the outside edit once");
    // Nothing counts any of it a second time later.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(revision(&a).await, want, "a change was counted twice");

    assert!(
        wait_for(|| rec.logs.lock().unwrap().len() as u64 > APPLIES).await,
        "announcements: {:?}",
        rec.logs.lock().unwrap()
    );
    let mut announced: Vec<u64> = rec
        .logs
        .lock()
        .unwrap()
        .iter()
        .map(|l| l["revision"].as_u64().unwrap())
        .collect();
    assert_eq!(
        announced.len() as u64,
        APPLIES + 1,
        "one announcement per change, no more: {announced:?}"
    );
    announced.sort_unstable();
    let expected: Vec<u64> = (before + 1..=want).collect();
    assert_eq!(announced, expected, "every revision announced exactly once");
    assert_eq!(
        rec.updated.lock().unwrap().len() as u64,
        APPLIES + 1,
        "one resources/updated per change"
    );

    // The edit is seen by the index too.
    let hits = call_ok(&a, "search_note_content", json!({"query": "quillfeather"})).await;
    assert!(
        hits.to_string().contains("z/outside-edit.md"),
        "the outside edit is searchable: {hits}"
    );
    let _ = a.cancel().await;
}
