//! Team mode with a broken remote: one whose hook declines every push (a freeze, branch
//! protection), and one that is gone (moved away mid-session). An apply changes nothing there
//! and says what the remote said; no job is left behind; once the remote is back, the caller's
//! retry with its key applies the proposal exactly once.

use serde_json::json;

use crate::team_writes::{apply_args, head, team_with_vault};
use crate::util::call;

#[tokio::test]
async fn a_remote_that_declines_or_is_gone_changes_nothing_and_the_retry_applies_once() {
    let (team, remote, _person) = team_with_vault(&["g1"]);
    let (_, token) = team.g(0).token("agent", "full");
    let g1 = team.g(0).stdio(&token).await;
    let jobs = || -> serde_json::Value {
        let s: serde_json::Value =
            serde_json::from_str(&team.g(0).ok(&["team", "status", "--json"])).unwrap();
        s["vaults"][0]["pendingJobs"].clone()
    };

    // Declined by a hook: answered at once with the remote's words, nothing recorded.
    let hook = remote.join("hooks/pre-receive");
    std::fs::write(
        &hook,
        "#!/bin/sh\necho 'main is frozen for the release' >&2\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let p = call(
        &g1,
        "propose_new_note",
        json!({"path": "faults/frozen.md", "content": "# Frozen\n", "reason": "r"}),
    )
    .await
    .ok();
    let before = head(&remote);
    let e = call(&g1, "apply_proposal", apply_args(&p, "frozen"))
        .await
        .err_json();
    assert_eq!(e["code"], json!("VAULT_BUSY"), "{e}");
    let said = e["message"].as_str().unwrap();
    assert!(
        said.contains("declined the push") && said.contains("main is frozen for the release"),
        "{said}"
    );
    assert_eq!(head(&remote), before);
    assert_eq!(jobs(), json!(0), "a declined push leaves no job");
    assert_eq!(
        call(&g1, "get_proposal", json!({"id": p["id"]})).await.ok()["status"],
        json!("pending")
    );
    // The freeze lifted: the same key applies it, once.
    std::fs::remove_file(&hook).unwrap();
    let out = call(&g1, "apply_proposal", apply_args(&p, "frozen")).await.ok();
    assert_eq!(
        (&out["applied"], &out["replayed"]),
        (&json!(true), &json!(false)),
        "{out}"
    );
    assert_eq!(head(&remote), out["commit"].as_str().unwrap());

    // Gone: the apply cannot tell whether its push landed, so it keeps its job and says so.
    let p = call(
        &g1,
        "propose_new_note",
        json!({"path": "faults/gone.md", "content": "# Gone\n", "reason": "r"}),
    )
    .await
    .ok();
    let before = head(&remote);
    let away = remote.with_extension("away");
    std::fs::rename(&remote, &away).unwrap();
    let e = call(&g1, "apply_proposal", apply_args(&p, "gone"))
        .await
        .err_json();
    assert_eq!(e["code"], json!("VAULT_BUSY"), "{e}");
    assert_eq!(e["retryable"], json!(true), "{e}");
    std::fs::rename(&away, &remote).unwrap();
    assert_eq!(head(&remote), before, "nothing landed");
    // Back: the retry settles the job from the remote (not there) and applies it once.
    let out = call(&g1, "apply_proposal", apply_args(&p, "gone")).await.ok();
    assert_eq!(out["applied"], json!(true), "{out}");
    let since = crate::team::git(&remote, &["rev-list", "--count", &format!("{before}..main")]);
    assert_eq!(since.trim(), "1");
    assert_eq!(jobs(), json!(0));
    team.g(0).ok(&["audit", "verify"]);
    g1.close().await;
}
