//! docs/contract.md#team-lease "One applier at a time": an apply a gateway receives while another
//! gateway holds the vault's lease is handed to that one, which runs it as its caller under the
//! lease it holds (the lease never moves to the receiver; its commit names the receiver, its
//! record the applier) and writes the answer back; the receiver answers once its clone holds the
//! commit. An applier killed after it took a handed call leaves it to its
//! receiver, which takes it back once the lease ran out and applies it once. A critical call's
//! second call is handed the same way. A handed call outlives its receiver's wait: the next
//! holder of the lease runs it, and the retry answers its result.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::team::Team;
use crate::team_writes::{apply_args, head, message, team_with_vault};
use crate::util::{Env, call};

/// The remote's `pre-receive` hook holds the first push while `<w>/hold` exists, and notes
/// `<w>/started` once that push arrived; it then declines it if `<w>/decline` exists.
fn hold_first_push(team: &Team, remote: &std::path::Path) -> std::path::PathBuf {
    let w = team.root.path().join("hook");
    std::fs::create_dir(&w).unwrap();
    std::fs::write(w.join("hold"), "").unwrap();
    let hook = remote.join("hooks/pre-receive");
    let script = format!(
        "#!/bin/sh\nif mkdir '{w}/first' 2>/dev/null; then\n  touch '{w}/started'\n  while [ -e '{w}/hold' ]; do sleep 0.05; done\n  if [ -e '{w}/decline' ]; then exit 1; fi\nfi\n",
        w = w.display()
    );
    std::fs::write(&hook, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    w
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within 30 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `team status`'s view of the vault's lease.
fn lease(g: &Env) -> Value {
    let s: Value = serde_json::from_str(&g.ok(&["team", "status", "--json"])).unwrap();
    s["vaults"][0]["applier"].clone()
}

/// Who took each handed call still in the team's database.
fn handed(db: &teamstate::PgState) -> Vec<Option<String>> {
    db.query("SELECT taken_by FROM vaultgate.calls", &[])
        .unwrap()
        .iter()
        .map(|r| r.get::<_, Option<String>>(0))
        .collect()
}

/// The commits on the remote's `main` that apply the proposal `id`.
fn commits_of(remote: &std::path::Path, id: &str) -> Vec<String> {
    crate::team::git(
        remote,
        &[
            "log",
            "--format=%H",
            &format!("--grep=Vaultgate-Proposal: {id}"),
            "main",
        ],
    )
    .split_whitespace()
    .map(str::to_owned)
    .collect()
}

async fn propose(c: &crate::util::Client, path: &str) -> Value {
    call(
        c,
        "propose_new_note",
        json!({"path": path, "content": format!("# {path}\n"), "reason": "r"}),
    )
    .await
    .ok()
}

#[tokio::test]
async fn an_apply_received_while_another_gateway_holds_the_lease_is_run_there_once_under_that_lease() {
    let (team, remote, _person) = team_with_vault(&["g1", "g2"]);
    let w = hold_first_push(&team, &remote);
    let db = teamstate::PgState::connect(&team.url).unwrap();
    let (_, token) = team.g(1).token("agent", "full");
    let g2 = team.g(1).stdio(&token).await;
    let a = propose(&g2, "handed/a.md").await;
    let b = propose(&g2, "handed/b.md").await;
    let before = head(&remote);

    // g1 applies a: it takes the lease, and its push waits in the remote's hook.
    let g1 = team.g(0).stdio(&token).await;
    let args_a = apply_args(&a, "a");
    let applying_a = tokio::spawn(async move {
        let out = call(&g1, "apply_proposal", args_a).await.ok();
        (g1, out)
    });
    until("g1's push reached the remote", || w.join("started").exists()).await;
    let held = lease(team.g(1));
    assert_eq!(
        (&held["gateway"], &held["held"]),
        (&json!("g1"), &json!(true)),
        "{held}"
    );

    // g2 receives b's apply: handed to g1, which takes it while it holds the lease.
    let g2b = team.g(1).stdio(&token).await;
    let args_b = apply_args(&b, "b");
    let applying_b = tokio::spawn(async move {
        let out = call(&g2b, "apply_proposal", args_b).await.ok();
        (g2b, out)
    });
    until("g1 took the call g2 handed it", || {
        handed(&db) == [Some("g1".to_owned())]
    })
    .await;
    // A call over the limits is refused where it arrived, never stored for the holder.
    let mut over = apply_args(&b, "over");
    over["padding"] = json!("x".repeat(64 << 10));
    let refused = call(&g2, "apply_proposal", over).await;
    assert_eq!(refused.code(), "INVALID_ARGUMENT");
    assert_eq!(handed(&db), [Some("g1".to_owned())]);
    let refusal = team
        .chain(1)
        .into_iter()
        .find(|r| r["proposalId"] == b["id"] && r["code"] == json!("INVALID_ARGUMENT"))
        .expect("the refusal is recorded");
    assert_eq!(
        refusal["gateway"],
        json!("g2"),
        "refused where it arrived: {refusal}"
    );
    let s: Value = serde_json::from_str(&team.g(1).ok(&["team", "status", "--json"])).unwrap();
    assert_eq!(
        s["vaults"][0]["handedCalls"],
        json!({"queued": 0, "running": 1}),
        "{s}"
    );
    let said = team.g(1).ok(&["team", "status"]);
    assert!(
        said.contains("calls handed to it by other gateways: 1 running, 0 queued"),
        "{said}"
    );
    std::fs::remove_file(w.join("hold")).unwrap();
    let (g1, out_a) = applying_a.await.unwrap();
    let (g2b, out_b) = applying_b.await.unwrap();
    assert_eq!(out_a["applied"], json!(true), "{out_a}");
    assert_eq!(
        (&out_b["applied"], &out_b["git"]),
        (&json!(true), &json!("committed")),
        "{out_b}"
    );

    // Read-your-writes: g2 answered once its own clone held b's commit.
    let read = call(&g2b, "read_note", json!({"path": "handed/b.md"})).await.ok();
    assert_eq!(read["content"], json!("# handed/b.md\n"), "{read}");
    // b's one commit was made by g1, on top of a's, naming g2 that received the call; g2 never
    // held the lease.
    let commit_b = out_b["commit"].as_str().unwrap();
    assert_eq!(commits_of(&remote, b["id"].as_str().unwrap()), [commit_b]);
    assert_eq!(commits_of(&remote, a["id"].as_str().unwrap()).len(), 1);
    let trailers = message(&remote, commit_b);
    assert!(trailers.contains("Vaultgate-Gateway: g2"), "{trailers}");
    let since = crate::team::git(&remote, &["rev-list", "--count", &format!("{before}..main")]);
    assert_eq!(since.trim(), "2");
    // At most one take since, g1's own (once a's hold was released before b asked).
    let after = lease(team.g(1));
    assert_eq!(after["gateway"], json!("g1"), "{after}");
    assert!(
        after["epoch"].as_i64().unwrap() <= held["epoch"].as_i64().unwrap() + 1,
        "{after}"
    );

    // One record of b's apply (besides the refused one), made by g1 as the agent; the key
    // answers it on g2 and on g1.
    let chain = team.chain(1);
    let ran = chain
        .iter()
        .filter(|r| {
            r["tool"] == json!("apply_proposal")
                && r["proposalId"] == b["id"]
                && r["event"] == json!("tool_call")
                && r["code"].is_null()
        })
        .collect::<Vec<_>>();
    assert_eq!(ran.len(), 1, "{ran:?}");
    assert_eq!(
        (&ran[0]["gateway"], &ran[0]["outcome"]),
        (&json!("g1"), &json!("ok")),
        "{}",
        ran[0]
    );
    assert_eq!(ran[0]["actor"]["name"], json!("agent"), "{}", ran[0]);
    for c in [&g2b, &g1] {
        let again = call(c, "apply_proposal", apply_args(&b, "b")).await.ok();
        assert_eq!(
            (&again["commit"], &again["replayed"]),
            (&out_b["commit"], &json!(true))
        );
    }
    assert!(handed(&db).is_empty(), "the answered call is forgotten");
    team.g(1).ok(&["audit", "verify"]);
    g1.close().await;
    g2b.close().await;
    g2.close().await;
    crate::team_invariants::hold(&team, &remote).await;
}

#[tokio::test]
async fn a_handed_apply_whose_applier_is_killed_is_taken_back_by_its_receiver_and_lands_once() {
    let (team, remote, _person) = team_with_vault(&["g1", "g2"]);
    team.g(0).ok(&["team", "set", "lease_seconds", "3"]);
    let w = hold_first_push(&team, &remote);
    let db = teamstate::PgState::connect(&team.url).unwrap();
    let (_, token) = team.g(1).token("agent", "full");
    let g2 = team.g(1).stdio(&token).await;
    let a = propose(&g2, "killed/a.md").await;
    let b = propose(&g2, "killed/b.md").await;

    // g1 serves over HTTP, holds the lease for a, and takes b's call from g2.
    let srv = crate::http::Server::start(team.g(0));
    let h1 = srv.client(&token).await;
    let args_a = apply_args(&a, "a");
    // Its answer never comes: g1 is killed.
    let applying_a = tokio::spawn(async move { h1.try_call("apply_proposal", args_a).await.is_ok() });
    until("g1's push reached the remote", || w.join("started").exists()).await;
    let g2b = team.g(1).stdio(&token).await;
    let args_b = apply_args(&b, "b");
    let applying_b = tokio::spawn(async move {
        let out = call(&g2b, "apply_proposal", args_b).await.ok();
        (g2b, out)
    });
    until("g1 took the call g2 handed it", || {
        handed(&db) == [Some("g1".to_owned())]
    })
    .await;

    // kill -9 the applier holding a's push and b's call.
    drop(srv);
    let killed = Instant::now();
    applying_a.abort();
    std::fs::remove_file(w.join("hold")).unwrap();

    // g2 takes b back once g1's lease ran out, and applies it itself.
    let (g2b, out_b) = applying_b.await.unwrap();
    let took = killed.elapsed();
    eprintln!("b answered {took:?} after its applier was killed");
    assert_eq!(out_b["applied"], json!(true), "{out_b}");
    let commit_b = out_b["commit"].as_str().unwrap();
    assert_eq!(commits_of(&remote, b["id"].as_str().unwrap()), [commit_b]);
    assert!(message(&remote, commit_b).contains("Vaultgate-Gateway: g2"));
    assert!(handed(&db).is_empty(), "the call taken back is gone");

    // a's caller retries through g2: applied once, whatever became of g1's push.
    let out_a = call(&g2b, "apply_proposal", apply_args(&a, "a")).await.ok();
    assert_eq!(out_a["applied"], json!(true), "{out_a}");
    assert_eq!(
        commits_of(&remote, a["id"].as_str().unwrap()),
        [out_a["commit"].as_str().unwrap()]
    );
    let s: Value = serde_json::from_str(&team.g(1).ok(&["team", "status", "--json"])).unwrap();
    assert_eq!(s["vaults"][0]["pendingJobs"], json!(0), "{s}");
    team.g(1).ok(&["audit", "verify"]);
    g2b.close().await;
    g2.close().await;
    crate::team_invariants::hold(&team, &remote).await;
}

/// SECURITY(T-TEAM4): the applier reads a handed call's credential again: one revoked after its
/// receiver handed the call runs nothing there, and the refusal comes back as the answer.
#[tokio::test]
async fn a_handed_call_whose_caller_was_revoked_meanwhile_runs_nothing_at_the_applier() {
    let (team, remote, _person) = team_with_vault(&["g1", "g2"]);
    let w = hold_first_push(&team, &remote);
    let db = teamstate::PgState::connect(&team.url).unwrap();
    let (_, token) = team.g(1).token("agent", "full");
    let (other_id, other) = team.g(1).token("other", "full");
    let g2 = team.g(1).stdio(&token).await;
    let a = propose(&g2, "revoked/a.md").await;
    let o = team.g(1).stdio(&other).await;
    let c = propose(&o, "revoked/c.md").await;
    o.close().await;

    let g1 = team.g(0).stdio(&token).await;
    let args_a = apply_args(&a, "a");
    let applying_a = tokio::spawn(async move {
        let out = call(&g1, "apply_proposal", args_a).await.ok();
        (g1, out)
    });
    until("g1's push reached the remote", || w.join("started").exists()).await;
    team.g(1).ok(&["token", "revoke", "other"]);
    // The call as g2 handed it before the revocation reached it.
    let args = json!({"id": c["id"], "proposalHash": c["proposalHash"], "idempotencyKey": "c"});
    db.query(
        "INSERT INTO vaultgate.calls (id, vault, gateway, credential, transport, tool, args)
         VALUES ('revoked-call', 'notes', 'g2', $1, 'stdio', 'apply_proposal', $2)",
        &[&other_id, &args],
    )
    .unwrap();
    db.query("SELECT pg_notify('vaultgate_calls', 'notes')", &[])
        .unwrap();
    let answer = || {
        db.query(
            "SELECT answer FROM vaultgate.calls WHERE id = 'revoked-call'",
            &[],
        )
        .unwrap()
        .first()
        .and_then(|r| r.get::<_, Option<Value>>(0))
    };
    until("g1 answered the handed call", || answer().is_some()).await;
    let answered = answer().unwrap();
    assert_eq!(
        answered["error"]["code"],
        json!("CREDENTIAL_REVOKED"),
        "{answered}"
    );
    std::fs::remove_file(w.join("hold")).unwrap();
    let (g1, out_a) = applying_a.await.unwrap();
    assert_eq!(out_a["applied"], json!(true), "{out_a}");
    assert!(
        commits_of(&remote, c["id"].as_str().unwrap()).is_empty(),
        "a revoked caller's call landed"
    );
    let status = call(&g2, "get_proposal", json!({"id": c["id"]})).await.ok();
    assert_eq!(status["status"], json!("pending"), "{status}");
    g1.close().await;
    g2.close().await;
    crate::team_invariants::hold(&team, &remote).await;
}

#[tokio::test]
async fn a_challenge_executed_through_a_gateway_without_the_lease_is_run_by_the_one_holding_it() {
    let (team, remote, _person) = team_with_vault(&["g1", "g2"]);
    let w = hold_first_push(&team, &remote);
    let db = teamstate::PgState::connect(&team.url).unwrap();
    let (_, token) = team.g(1).token("agent", "full");
    let g2 = team.g(1).stdio(&token).await;
    let a = propose(&g2, "critical/a.md").await;
    let first = json!({"paths": ["z/plan.md"], "idempotencyKey": "d1"});
    let issued = call(&g2, "delete_permanent", first.clone()).await.ok();
    let c = issued["challenge"].clone();

    // g1 applies a: it holds the lease while its push waits in the remote's hook, which then
    // declines it (the remote does not move: the challenge stays current).
    std::fs::write(w.join("decline"), "").unwrap();
    let before = head(&remote);
    let g1 = team.g(0).stdio(&token).await;
    let args_a = apply_args(&a, "a");
    let applying_a = tokio::spawn(async move {
        let out = call(&g1, "apply_proposal", args_a).await.err_json();
        (g1, out)
    });
    until("g1's push reached the remote", || w.join("started").exists()).await;

    // g2 receives the second call: handed to g1, which executes it after a, under its lease.
    let second = crate::team_critical::second(&first, &c);
    let g2c = team.g(1).stdio(&token).await;
    let executing = tokio::spawn(async move {
        let out = call(&g2c, "delete_permanent", second).await.ok();
        (g2c, out)
    });
    until("g1 took the second call g2 handed it", || {
        handed(&db) == [Some("g1".to_owned())]
    })
    .await;
    std::fs::remove_file(w.join("hold")).unwrap();
    let (g1, out_a) = applying_a.await.unwrap();
    let (g2c, done) = executing.await.unwrap();
    assert_eq!(out_a["code"], json!("VAULT_BUSY"), "{out_a}");
    assert_eq!(
        (&done["status"], &done["deleted"], &done["git"]),
        (&json!("executed"), &json!(["z/plan.md"]), &json!("committed")),
        "{done}"
    );

    // One commit, naming g2 that received the call and the challenge's job.
    let commit = done["commit"].as_str().unwrap();
    assert_eq!(head(&remote), commit);
    assert_eq!(
        crate::team::git(&remote, &["rev-parse", &format!("{commit}^")]).trim(),
        before
    );
    let trailers = message(&remote, commit);
    let id = c["challengeId"].as_str().unwrap();
    for t in [
        "Vaultgate-Gateway: g2".to_owned(),
        format!("Vaultgate-Job: c_{id}"),
    ] {
        assert!(trailers.contains(&t), "{t} missing from:\n{trailers}");
    }
    // Read-your-writes through g2; the execution and its intent recorded by g1, once.
    assert_eq!(
        call(&g2c, "read_note", json!({"path": "z/plan.md"})).await.code(),
        "NOT_FOUND"
    );
    let chain = team.chain(1);
    let of_it = |event: &str| {
        chain
            .iter()
            .filter(|r| r["challengeId"] == json!(id) && r["event"] == json!(event))
            .map(|r| (r["gateway"].clone(), r["outcome"].clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(of_it("critical.intent"), [(json!("g1"), json!("ok"))]);
    let executed = chain
        .iter()
        .filter(|r| {
            r["challengeId"] == json!(id)
                && r["tool"] == json!("delete_permanent")
                && r["event"] == json!("tool_call")
                && r["outcome"] == json!("ok")
        })
        .map(|r| r["gateway"].clone())
        .collect::<Vec<_>>();
    assert_eq!(
        executed,
        [json!("g2"), json!("g1")],
        "the challenge's issue (where it arrived) and its one execution (by g1)"
    );
    // A replay through g2 is consumed, naming what it did; nothing pushed again.
    let again = call(&g2, "delete_permanent", crate::team_critical::second(&first, &c))
        .await
        .err_json();
    assert_eq!(again["code"], json!("CHALLENGE_CONSUMED"), "{again}");
    assert_eq!(head(&remote), commit);
    assert!(handed(&db).is_empty(), "the answered call is forgotten");
    team.g(1).ok(&["audit", "verify"]);
    g1.close().await;
    g2c.close().await;
    g2.close().await;
    crate::team_invariants::hold(&team, &remote).await;
}

#[tokio::test]
async fn a_handed_call_whose_receiver_stopped_waiting_runs_later_and_its_retry_answers_it() {
    let (team, remote, _person) = team_with_vault(&["g1", "g2", "g3"]);
    // A dead holder's lease blocks the vault until it expires.
    team.g(0).ok(&["team", "set", "lease_seconds", "5"]);
    crate::util::set_limits(team.g(1), &[("apply_wait_seconds", 1)]);
    let w = hold_first_push(&team, &remote);
    let db = teamstate::PgState::connect(&team.url).unwrap();
    let (_, token) = team.g(0).token("agent", "full");
    let g2 = team.g(1).stdio(&token).await;
    let a = propose(&g2, "later/a.md").await;
    let b = propose(&g2, "later/b.md").await;
    let c = propose(&g2, "later/c.md").await;

    // g1 dies holding the vault's lease (after a's intent: nothing pushed).
    crate::team_writes::dies_calling(
        team.g(0),
        &token,
        "team_apply.after_intent",
        "apply_proposal",
        apply_args(&a, "a"),
    )
    .await;

    // b's apply through g2 is handed to g1, which never takes it: past g2's wait the call
    // answers VAULT_BUSY, and stays queued.
    let busy = call(&g2, "apply_proposal", apply_args(&b, "b")).await.err_json();
    assert_eq!(
        (&busy["code"], &busy["retryable"]),
        (&json!("VAULT_BUSY"), &json!(true)),
        "{busy}"
    );
    assert_eq!(handed(&db), [None]);

    // g3 takes the lease once it expired (its first push waits in the remote's hook), takes
    // b's call and runs it after its own: b lands though nobody waits for it.
    let g3 = team.g(2).stdio(&token).await;
    let args_c = apply_args(&c, "c");
    let applying_c = tokio::spawn(async move {
        let out = call(&g3, "apply_proposal", args_c).await.ok();
        (g3, out)
    });
    until("g3's push reached the remote", || w.join("started").exists()).await;
    until("g3 took the call g2 stopped waiting for", || {
        handed(&db) == [Some("g3".to_owned())]
    })
    .await;
    std::fs::remove_file(w.join("hold")).unwrap();
    let (g3, out_c) = applying_c.await.unwrap();
    assert_eq!(out_c["applied"], json!(true), "{out_c}");
    let b_id = b["id"].as_str().unwrap();
    until("b landed", || commits_of(&remote, b_id).len() == 1).await;

    // The retry through g2 answers b's result: applied once, by g3, its commit naming g2.
    let again = call(&g2, "apply_proposal", apply_args(&b, "b")).await.ok();
    let commits = commits_of(&remote, b_id);
    assert_eq!(
        (&again["applied"], &again["replayed"], &again["commit"]),
        (&json!(true), &json!(true), &json!(commits[0])),
        "{again}"
    );
    let trailers = message(&remote, &commits[0]);
    assert!(trailers.contains("Vaultgate-Gateway: g2"), "{trailers}");
    let of_b = team
        .chain(1)
        .into_iter()
        .filter(|r| {
            r["tool"] == json!("apply_proposal")
                && r["proposalId"] == b["id"]
                && r["event"] == json!("tool_call")
        })
        .map(|r| (r["gateway"].clone(), r["code"].clone()))
        .collect::<Vec<_>>();
    assert_eq!(
        of_b,
        [
            (json!("g2"), json!("VAULT_BUSY")),
            (json!("g3"), Value::Null),
            (json!("g2"), Value::Null)
        ]
    );
    team.g(1).ok(&["audit", "verify"]);
    g3.close().await;
    g2.close().await;
    crate::team_invariants::hold(&team, &remote).await;
}
