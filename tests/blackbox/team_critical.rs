//! docs/contract.md#team-mode, critical calls: a challenge issued through one gateway is the
//! team's — its second call executes exactly once on whichever gateway receives it (a replay on
//! another is `CHALLENGE_CONSUMED`, three at once execute once), the deletion is one commit pushed
//! by compare-and-swap, a remote that moved since the challenge refuses it as stale with a fresh
//! one, and a gateway killed at any step of an execution leaves it executed once or not at all.

use serde_json::{Value, json};

use crate::team::git;
use crate::team_writes::{head, message, team_with_vault};
use crate::util::call;

/// The second call of `first` (the same arguments) with the challenge `c`.
pub(crate) fn second(first: &Value, c: &Value) -> Value {
    let mut args = first.clone();
    args["challengeId"] = c["challengeId"].clone();
    args["planHash"] = c["planHash"].clone();
    args["acknowledged"] = json!(true);
    args
}

fn commits(remote: &std::path::Path) -> usize {
    git(remote, &["rev-list", "--count", "main"])
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn a_challenge_issued_on_one_gateway_executes_once_on_another_and_is_consumed_for_the_team() {
    let (team, remote, person) = team_with_vault(&["g1", "g2", "g3"]);
    let (_, token) = team.g(0).token("agent", "auto");
    let g1 = team.g(0).stdio(&token).await;
    let g2 = team.g(1).stdio(&token).await;
    let g3 = team.g(2).stdio(&token).await;

    // A version of z/plan.md that vaultgate made (so its history has one to hide).
    let note = call(&g1, "read_note", json!({"path": "z/plan.md"})).await.ok();
    let edited = "---\ntitle: Plan\n---\n# Plan\n\nA secret that must go.\n";
    let p = call(
        &g1,
        "propose_note_patch",
        json!({"path": "z/plan.md", "baseHash": note["hash"], "content": edited, "reason": "r"}),
    )
    .await
    .ok();
    let applied = call(
        &g1,
        "apply_proposal",
        json!({"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": "a1"}),
    )
    .await
    .ok();
    let secret_hash = call(&g1, "read_note", json!({"path": "z/plan.md"})).await.ok()["hash"].clone();
    assert_eq!(
        call(&g1, "history_status", json!({})).await.ok()["undoTop"],
        applied["historyEntryId"]
    );

    // Issued on g1: nothing happens; the plan names the note, the remote's revision and says
    // that the remote's history keeps what vaultgate will no longer read.
    let first = json!({"paths": ["z/plan.md"], "idempotencyKey": "d1"});
    let before = head(&remote);
    let issued = call(&g1, "delete_permanent", first.clone()).await.ok();
    assert_eq!(issued["status"], json!("challenge"), "{issued}");
    let c = &issued["challenge"];
    assert_eq!(c["affected"], json!(["z/plan.md"]), "{c}");
    assert_eq!(c["count"], json!(1));
    assert_eq!(c["revision"], json!(commits(&remote)), "{c}");
    assert!(
        c["gitHistory"].as_str().unwrap().contains("never rewrites"),
        "{c}"
    );
    assert_eq!(head(&remote), before);

    // Executed on g2: one commit that removes exactly the note, with the trailers.
    let done = call(&g2, "delete_permanent", second(&first, c)).await.ok();
    assert_eq!(
        (&done["status"], &done["deleted"], &done["git"]),
        (&json!("executed"), &json!(["z/plan.md"]), &json!("committed")),
        "{done}"
    );
    let commit = done["commit"].as_str().unwrap().to_owned();
    assert_eq!(head(&remote), commit);
    assert_eq!(git(&remote, &["rev-parse", &format!("{commit}^")]).trim(), before);
    assert_eq!(
        git(&remote, &["diff", "--name-status", &before, &commit]).trim(),
        "D\tz/plan.md"
    );
    let msg = message(&remote, &commit);
    assert!(msg.starts_with("delete_permanent z/plan.md\n"), "{msg}");
    let challenge_id = c["challengeId"].as_str().unwrap();
    for trailer in [
        "Vaultgate-Gateway: g2".to_owned(),
        format!("Vaultgate-Job: c_{challenge_id}"),
        "Vaultgate-Audit: ".to_owned(),
        "Vaultgate-Credential: agent (".to_owned(),
    ] {
        assert!(msg.contains(&trailer), "{trailer} missing from:\n{msg}");
    }
    assert_eq!(
        call(&g2, "read_note", json!({"path": "z/plan.md"})).await.code(),
        "NOT_FOUND"
    );

    // Replayed on g3 (and g1): consumed, naming what it did; nothing pushed again.
    for g in [&g3, &g1] {
        let again = call(g, "delete_permanent", second(&first, c)).await.err_json();
        assert_eq!(again["code"], json!("CHALLENGE_CONSUMED"), "{again}");
        assert!(
            again["message"].as_str().unwrap().contains("It executed once"),
            "{again}"
        );
    }
    assert_eq!(head(&remote), commit);

    // The deleted version is no longer read, and the deletion is a barrier: the patch before it
    // cannot be undone.
    crate::team::eventually("g1 sees the deletion", || async {
        call(&g1, "read_note", json!({"path": "z/plan.md"}))
            .await
            .err_json()["code"]
            == json!("NOT_FOUND")
    })
    .await;
    let old = call(
        &g1,
        "read_note",
        json!({"path": "z/plan.md", "hash": secret_hash}),
    )
    .await;
    assert_eq!(old.code(), "NOT_FOUND");
    let status = call(&g3, "history_status", json!({})).await.ok();
    assert_eq!(status["undoTop"], Value::Null, "{status}");

    // A person pushes after a challenge was issued: the second call is CHALLENGE_STALE with a
    // fresh challenge, which then executes.
    let first = json!({"paths": ["welcome.md"], "idempotencyKey": "d2"});
    let issued = call(&g1, "delete_permanent", first.clone()).await.ok();
    git(&person, &["pull", "--quiet", "--ff-only"]);
    std::fs::write(person.join("other.md"), "# Other\n").unwrap();
    git(&person, &["add", "-A"]);
    git(&person, &["commit", "--quiet", "-m", "another note"]);
    git(&person, &["push", "--quiet", "origin", "main"]);
    let stale = call(&g3, "delete_permanent", second(&first, &issued["challenge"]))
        .await
        .err_json();
    assert_eq!(stale["code"], json!("CHALLENGE_STALE"), "{stale}");
    let fresh = &stale["challenge"];
    assert_eq!(fresh["revision"], json!(commits(&remote)), "{stale}");
    let done = call(&g1, "delete_permanent", second(&first, fresh)).await.ok();
    assert_eq!(done["deleted"], json!(["welcome.md"]), "{done}");
    assert_eq!(
        git(&remote, &["show", "main:other.md"]),
        "# Other\n",
        "the person's note is kept"
    );

    // Three gateways receive the same second call at once: it executes once.
    std::fs::create_dir_all(person.join("race")).unwrap();
    git(&person, &["pull", "--quiet", "--ff-only"]);
    std::fs::write(person.join("race/a.md"), "# A\n").unwrap();
    git(&person, &["add", "-A"]);
    git(&person, &["commit", "--quiet", "-m", "race"]);
    git(&person, &["push", "--quiet", "origin", "main"]);
    let first = json!({"paths": ["race/a.md"], "idempotencyKey": "d3"});
    let issued = call(&g2, "delete_permanent", first.clone()).await.ok();
    let args = second(&first, &issued["challenge"]);
    let before = commits(&remote);
    let (a, b, c3) = tokio::join!(
        call(&g1, "delete_permanent", args.clone()),
        call(&g2, "delete_permanent", args.clone()),
        call(&g3, "delete_permanent", args.clone()),
    );
    let answers = [a, b, c3];
    let executed = answers.iter().filter(|r| r.is_ok()).count();
    assert_eq!(executed, 1, "{answers:?}");
    for r in answers.iter().filter(|r| !r.is_ok()) {
        let code = r.clone().code();
        assert!(
            code == "CHALLENGE_CONSUMED" || code == "CHALLENGE_STALE",
            "{answers:?}"
        );
    }
    assert_eq!(commits(&remote), before + 1);

    // empty_trash: a team vault's trash is its remote's history: nothing to remove, no commit.
    let first = json!({"idempotencyKey": "e1"});
    let issued = call(&g3, "empty_trash", first.clone()).await.ok();
    assert_eq!(
        (&issued["challenge"]["affected"], &issued["challenge"]["count"]),
        (&json!([]), &json!(0)),
        "{issued}"
    );
    let head_now = head(&remote);
    let done = call(&g1, "empty_trash", second(&first, &issued["challenge"]))
        .await
        .ok();
    assert_eq!(done, json!({"status": "executed", "removed": 0}));
    assert_eq!(head(&remote), head_now);

    // Every execution recorded its intent and its call on the team's one chain.
    let chain = team.chain(0);
    let intents: Vec<&Value> = chain
        .iter()
        .filter(|r| r["event"] == json!("critical.intent"))
        .collect();
    assert_eq!(intents.len(), 4, "{intents:?}");
    assert!(
        intents
            .iter()
            .any(|r| r["challengeId"] == json!(challenge_id) && r["gateway"] == json!("g2"))
    );
    for g in &team.gateways {
        g.ok(&["audit", "verify"]);
    }
    for c in [g1, g2, g3] {
        c.close().await;
    }
    crate::team_invariants::hold(&team, &remote).await;
}

#[tokio::test]
async fn a_gateway_killed_at_any_step_of_an_execution_leaves_it_done_once_or_not_at_all() {
    let (team, remote, person) = team_with_vault(&["g1", "g2"]);
    let (_, token) = team.g(0).token("agent", "auto");
    let g2 = team.g(1).stdio(&token).await;
    std::fs::create_dir_all(person.join("crash")).unwrap();
    for i in 0..3 {
        std::fs::write(person.join(format!("crash/{i}.md")), format!("# {i}\n")).unwrap();
    }
    git(&person, &["add", "-A"]);
    git(&person, &["commit", "--quiet", "-m", "to delete"]);
    git(&person, &["push", "--quiet", "origin", "main"]);

    for (i, (step, retry_executes)) in [
        ("team_critical.after_intent", true),
        ("team_critical.before_push", true),
        ("team_critical.after_push", false),
    ]
    .into_iter()
    .enumerate()
    {
        let path = format!("crash/{i}.md");
        let first = json!({"paths": [path], "idempotencyKey": format!("k{i}")});
        let issued = call(&g2, "delete_permanent", first.clone()).await.ok();
        let args = second(&first, &issued["challenge"]);
        let before = commits(&remote);
        // g1 dies at `step` while executing it: the call gets no answer.
        crate::team_writes::dies_calling(team.g(0), &token, step, "delete_permanent", args.clone()).await;
        // The retry on g2 settles what g1 left: executed exactly once either way.
        let retry = call(&g2, "delete_permanent", args.clone()).await;
        if retry_executes {
            let done = retry.ok();
            assert_eq!(done["deleted"], json!([path]), "{step}: {done}");
        } else {
            let e = retry.err_json();
            assert_eq!(e["code"], json!("CHALLENGE_CONSUMED"), "{step}: {e}");
            assert!(
                e["message"].as_str().unwrap().contains("It executed once"),
                "{step}: {e}"
            );
        }
        assert_eq!(commits(&remote), before + 1, "{step}");
        assert!(
            git(&remote, &["ls-tree", "--name-only", "main", "crash/"])
                .lines()
                .all(|l| l != path),
            "{step}"
        );
        let again = call(&g2, "delete_permanent", args).await.err_json();
        assert_eq!(again["code"], json!("CHALLENGE_CONSUMED"), "{step}: {again}");
    }
    assert!(
        team.chain(1)
            .iter()
            .any(|r| r["event"] == json!("critical.recovered")),
        "the landed execution was recorded by the gateway that settled it"
    );
    team.g(1).ok(&["audit", "verify"]);
    g2.close().await;
    crate::team_invariants::hold(&team, &remote).await;
}
