//! docs/contract.md#team-mode and #the-review-page-and-in-client-approval: a person's click on
//! the approval card is used once across the team — the sealed approval a proposal's result
//! carried on one gateway decides it on another, and replayed on a third changes nothing — and
//! the decision is recorded in the team's chain with `approval: "app"`; a person's yes asked in
//! the client (the official Python SDK answering the prompt) applies a team proposal likewise.

use std::process::Stdio;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig};
use serde_json::{Value, json};

use crate::team::git;
use crate::team_writes::{head, team_with_vault};
use crate::util::{Env, Reply, bin, to_reply};

type UiClient = rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>;

/// A stdio session of gateway `g` for `token` whose client declares the MCP Apps extension (so
/// the card's sealed approval reaches its results' `_meta`).
async fn card_client(g: &Env, token: &str) -> UiClient {
    let mut cmd = tokio::process::Command::new(bin());
    cmd.arg("stdio")
        .arg("--home")
        .arg(&g.home)
        .env_remove("VAULTGATE_HOME")
        .env("VAULTGATE_TOKEN", token)
        .stderr(Stdio::null());
    let mut caps = ClientCapabilities::default();
    let mut settings = rmcp::model::JsonObject::new();
    settings.insert("mimeTypes".into(), json!(["text/html;profile=mcp-app"]));
    caps.extensions = Some([("io.modelcontextprotocol/ui".to_owned(), settings)].into());
    let info = ClientConfig::new(caps, rmcp::model::Implementation::new("team-card", "1"));
    info.serve(rmcp::transport::TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap()
}

/// A call's reply and its result's `_meta`.
async fn tool(c: &UiClient, name: &str, args: Value) -> (Reply, Value) {
    let r = c
        .call_tool(
            CallToolRequestParams::new(name.to_owned()).with_arguments(args.as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    let meta = r
        .meta
        .clone()
        .map(|m| serde_json::to_value(m).unwrap())
        .unwrap_or(Value::Null);
    (to_reply(r), meta)
}

#[tokio::test]
async fn a_card_approval_given_through_one_gateway_decides_once_across_the_team() {
    let (team, remote, _person) = team_with_vault(&["g1", "g2", "g3"]);
    // A propose credential that opted in: it decides its own proposals only with a person's yes.
    let (_, token) = crate::approval::flagged(team.g(0), "card", "propose");
    let c1 = card_client(team.g(0), &token).await;
    let c2 = card_client(team.g(1), &token).await;
    let c3 = card_client(team.g(2), &token).await;

    // Proposed through g1: the result carries the card's sealed approval, only in `_meta`.
    let (r, meta) = tool(
        &c1,
        "propose_new_note",
        json!({"path": "card/a.md", "content": "# A\n\nApproved on the card.\n", "reason": "card"}),
    )
    .await;
    let p = r.ok();
    let approval = meta["vaultgate/approval"]
        .as_str()
        .expect("the card's approval")
        .to_owned();
    assert!(!p.to_string().contains(&approval));

    // Without the click, the tier alone may not apply it.
    let (r, _) = tool(
        &c2,
        "apply_proposal",
        json!({"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": "plain"}),
    )
    .await;
    assert_eq!(r.code(), "CAPABILITY_DENIED");

    // The click through g2: applied as one commit on the remote.
    let before = head(&remote);
    let (r, _) = tool(
        &c2,
        "approve_proposal_in_app",
        json!({"id": p["id"], "approval": approval, "idempotencyKey": "k1"}),
    )
    .await;
    let out = r.ok();
    assert_eq!(
        (&out["applied"], &out["git"]),
        (&json!(true), &json!("committed")),
        "{out}"
    );
    assert_eq!(head(&remote), out["commit"].as_str().unwrap());
    assert_eq!(
        git(
            &remote,
            &["rev-parse", &format!("{}^", out["commit"].as_str().unwrap())]
        )
        .trim(),
        before
    );

    // Replayed through g3 with another key: used already, nothing pushed; with the same key:
    // the first answer.
    let (r, _) = tool(
        &c3,
        "approve_proposal_in_app",
        json!({"id": p["id"], "approval": approval, "idempotencyKey": "k2"}),
    )
    .await;
    let e = r.err_json();
    assert_eq!(e["code"], json!("CAPABILITY_DENIED"), "{e}");
    assert!(e["message"].as_str().unwrap().contains("already used"), "{e}");
    let (r, _) = tool(
        &c3,
        "approve_proposal_in_app",
        json!({"id": p["id"], "approval": approval, "idempotencyKey": "k1"}),
    )
    .await;
    let replay = r.ok();
    assert_eq!(
        (&replay["commit"], &replay["replayed"]),
        (&out["commit"], &json!(true))
    );
    assert_eq!(head(&remote), out["commit"].as_str().unwrap());

    // Reject on the card through g1, the approval made through g3: rejected once; the key
    // replays the answer on g2; the approval again is refused.
    let (r, meta) = tool(
        &c3,
        "propose_new_note",
        json!({"path": "card/b.md", "content": "# B\n", "reason": "to reject"}),
    )
    .await;
    let q = r.ok();
    let approval = meta["vaultgate/approval"].as_str().unwrap().to_owned();
    let args = json!({"id": q["id"], "approval": approval, "reason": "not now", "idempotencyKey": "r1"});
    let (r, _) = tool(&c1, "reject_proposal_in_app", args.clone()).await;
    assert_eq!(r.ok(), json!({"rejected": true}));
    let (r, _) = tool(&c2, "reject_proposal_in_app", args).await;
    assert_eq!(r.ok(), json!({"rejected": true}));
    let (r, _) = tool(
        &c2,
        "reject_proposal_in_app",
        json!({"id": q["id"], "approval": approval, "reason": "again", "idempotencyKey": "r2"}),
    )
    .await;
    assert_eq!(r.code(), "CAPABILITY_DENIED");
    let (r, _) = tool(&c2, "get_proposal", json!({"id": q["id"]})).await;
    let shown = r.ok();
    assert_eq!(
        (&shown["status"], &shown["rejectReason"]),
        (&json!("rejected"), &json!("not now")),
        "{shown}"
    );

    // Both decisions are in the team's chain as the person's, with the gateway that took them.
    let chain = team.chain(0);
    let decided = |tool: &str, gateway: &str| {
        chain.iter().any(|r| {
            r["tool"] == json!(tool)
                && r["outcome"] == json!("ok")
                && r["approval"] == json!("app")
                && r["gateway"] == json!(gateway)
        })
    };
    assert!(decided("approve_proposal_in_app", "g2"), "{chain:?}");
    assert!(decided("reject_proposal_in_app", "g1"), "{chain:?}");
    team.g(2).ok(&["audit", "verify"]);
    for c in [c1, c2, c3] {
        c.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn a_persons_yes_asked_in_the_client_applies_a_team_proposal_once_from_the_official_python_sdk() {
    let (team, remote, _person) = team_with_vault(&["g1", "g2"]);
    let (_, token) = crate::approval::flagged(team.g(0), "asker", "propose");
    let c = team.g(0).stdio(&token).await;
    let p = crate::util::call(
        &c,
        "propose_new_note",
        json!({"path": "asked/a.md", "content": "# Asked\n", "reason": "ask the person"}),
    )
    .await
    .ok();
    c.close().await;
    let apply = json!({"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": "k-ask"});
    let before = head(&remote);
    // Through g2, a client of the official SDK that answers the prompt: asked once, applied as
    // one commit; the same key again replays without asking.
    let harness = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/approval_client.py");
    let (run, stderr) = crate::approval::python_session(
        harness,
        crate::approval::Via::Stdio(team.g(1)),
        &["--token", &token, "--mode", "legacy", "--answer", "accept"],
        &[("apply_proposal", apply.clone()), ("apply_proposal", apply)],
        &[],
    )
    .await;
    assert_eq!(
        run["prompts"].as_array().map(Vec::len),
        Some(1),
        "{run:#}\n{stderr}"
    );
    let first = &run["calls"][0]["structured"];
    assert_eq!(
        (&first["applied"], &first["git"]),
        (&json!(true), &json!("committed")),
        "{run:#}"
    );
    let commit = first["commit"].as_str().unwrap();
    assert_eq!(head(&remote), commit);
    assert_eq!(git(&remote, &["rev-parse", &format!("{commit}^")]).trim(), before);
    assert_eq!(run["calls"][1]["structured"]["replayed"], json!(true), "{run:#}");
    let chain = team.chain(0);
    assert!(
        chain.iter().any(|r| r["tool"] == json!("apply_proposal")
            && r["outcome"] == json!("ok")
            && r["approval"] == json!("client")
            && r["gateway"] == json!("g2")),
        "{chain:?}"
    );
}
