//! Team mode with a broken remote: one whose hook declines every push (a freeze, branch
//! protection), and one that is gone (moved away mid-session). An apply changes nothing there
//! and says what the remote said; no job is left behind; once the remote is back, the caller's
//! retry with its key applies the proposal exactly once. A remote killed mid-push lands it once.

use serde_json::json;

use crate::team::git;
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
    crate::team_invariants::hold(&team, &remote).await;
}

/// A `pre-receive` hook that, once (while `<remote>/hold-once` exists), runs `then` and sleeps
/// past the gateway's push deadline: the push has no answer.
fn hold_once(remote: &std::path::Path, then: &str) {
    let hook = remote.join("hooks/pre-receive");
    std::fs::write(
        &hook,
        format!("#!/bin/sh\nif [ -f hold-once ]; then rm -f hold-once; {then}; sleep 3; exit 1; fi\n"),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(remote.join("hold-once"), "").unwrap();
}

/// A team of one gateway that gives a push 1 s (`apply_wait_seconds` 2; `job_ttl_seconds` when
/// given), a client of it, and a proposal of a new note at `path` made through it.
async fn waiting_two_seconds(
    path: &str,
    job_ttl_seconds: Option<i64>,
) -> (
    crate::team::Team,
    std::path::PathBuf,
    std::path::PathBuf,
    crate::util::Client,
    serde_json::Value,
) {
    let (team, remote, person) = team_with_vault(&["g1"]);
    crate::http::edit_config(team.g(0), "limits", |t| {
        t.insert("apply_wait_seconds".into(), toml::Value::Integer(2));
        if let Some(ttl) = job_ttl_seconds {
            t.insert("job_ttl_seconds".into(), toml::Value::Integer(ttl));
        }
    });
    let (_, token) = team.g(0).token("agent", "full");
    let g1 = team.g(0).stdio(&token).await;
    let p = call(
        &g1,
        "propose_new_note",
        json!({"path": path, "content": "# Held\n", "reason": "r"}),
    )
    .await
    .ok();
    (team, remote, person, g1, p)
}

#[tokio::test]
async fn an_unanswered_push_the_remote_moved_past_is_checked_again_in_the_same_call() {
    let (team, remote, person, g1, p) = waiting_two_seconds("moved/past.md", None).await;
    let before = head(&remote);
    // A person's commit to another note, on the remote but not yet on its branch: while the
    // gateway's push waits in the hook, the branch moves to it (so that push can never land).
    git(&person, &["pull", "--quiet", "--ff-only"]);
    std::fs::write(person.join("elsewhere.md"), "# Elsewhere\n").unwrap();
    git(&person, &["add", "elsewhere.md"]);
    git(&person, &["commit", "--quiet", "-m", "person elsewhere"]);
    git(&person, &["push", "--quiet", "origin", "HEAD:refs/heads/staging"]);
    let persons = git(&person, &["rev-parse", "HEAD"]).trim().to_owned();
    hold_once(
        &remote,
        "env -u GIT_QUARANTINE_PATH -u GIT_OBJECT_DIRECTORY -u GIT_ALTERNATE_OBJECT_DIRECTORIES \
         git update-ref refs/heads/main refs/heads/staging",
    );
    // The push has no answer; the remote shows its branch past the base without the commit:
    // checked again and rebuilt on the person's commit at once (before: VAULT_BUSY).
    let out = call(&g1, "apply_proposal", apply_args(&p, "past")).await.ok();
    assert_eq!(
        (&out["applied"], &out["replayed"]),
        (&json!(true), &json!(false)),
        "{out}"
    );
    let commit = out["commit"].as_str().unwrap();
    assert!(!remote.join("hold-once").exists(), "the hook held the first push");
    let landed = git(&remote, &["log", "--format=%H", &format!("{before}..main")]);
    assert_eq!(landed.lines().collect::<Vec<_>>(), [commit, persons.as_str()]);
    assert_eq!(
        git(&remote, &["rev-parse", &format!("{commit}^")]).trim(),
        persons,
        "built on the person's commit, which is kept"
    );
    // The held push ends refused; nothing else lands, no job is left.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(head(&remote), commit);
    let s: serde_json::Value = serde_json::from_str(&team.g(0).ok(&["team", "status", "--json"])).unwrap();
    assert_eq!(s["vaults"][0]["pendingJobs"], json!(0));
    team.g(0).ok(&["audit", "verify"]);
    g1.close().await;
    crate::team_invariants::hold(&team, &remote).await;
}

#[tokio::test]
async fn an_unanswered_push_at_its_base_is_pushed_again_as_the_same_commit_by_the_retry() {
    let (team, remote, _person, g1, p) = waiting_two_seconds("again/same.md", None).await;
    let before = head(&remote);
    // The hook holds the push past the deadline, then refuses it: the branch stays at the base.
    hold_once(&remote, "true");
    let e = call(&g1, "apply_proposal", apply_args(&p, "again"))
        .await
        .err_json();
    assert_eq!(e["code"], json!("VAULT_BUSY"), "{e}");
    assert!(e["message"].as_str().unwrap().contains("may still land"), "{e}");
    let db = crate::team::pg::connect_retrying(&team.url);
    let rows = db
        .query(
            "SELECT job_commit FROM vaultgate.proposals WHERE id = $1 AND job IS NOT NULL",
            &[&p["id"].as_str().unwrap()],
        )
        .unwrap();
    let attempted: String = rows.first().expect("the job is kept").get(0);
    // The held push is refused; the branch is still at the base.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(head(&remote), before);
    // The retry finds the branch at the job's base and pushes the same commit again.
    let out = call(&g1, "apply_proposal", apply_args(&p, "again")).await.ok();
    assert_eq!(
        (&out["applied"], &out["commit"]),
        (&json!(true), &json!(attempted)),
        "{out}"
    );
    let landed = git(&remote, &["log", "--format=%H", &format!("{before}..main")]);
    assert_eq!(landed.lines().collect::<Vec<_>>(), [attempted.as_str()]);
    assert_eq!(
        call(&g1, "get_proposal", json!({"id": p["id"]})).await.ok()["status"],
        json!("applied")
    );
    team.g(0).ok(&["audit", "verify"]);
    g1.close().await;
    crate::team_invariants::hold(&team, &remote).await;
}

/// The same left job as above, retried after `job_ttl_seconds`: its commit is never pushed
/// again (nothing lands long after its caller stopped waiting); the retry is a new job with a
/// fresh commit, and the old one can never land after it.
#[tokio::test]
async fn a_left_job_past_job_ttl_seconds_is_not_pushed_again_and_its_retry_builds_anew() {
    let (team, remote, _person, g1, p) = waiting_two_seconds("ttl/old.md", Some(2)).await;
    let before = head(&remote);
    hold_once(&remote, "true");
    let e = call(&g1, "apply_proposal", apply_args(&p, "late"))
        .await
        .err_json();
    assert_eq!(e["code"], json!("VAULT_BUSY"), "{e}");
    let db = crate::team::pg::connect_retrying(&team.url);
    let job_of = || {
        db.query(
            "SELECT job, job_commit FROM vaultgate.proposals WHERE id = $1 AND job IS NOT NULL",
            &[&p["id"].as_str().unwrap()],
        )
        .unwrap()
        .first()
        .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
    };
    let (old_job, attempted) = job_of().expect("the job is kept");
    // The held push is refused; the branch stays at the job's base while the job grows old.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(head(&remote), before);
    let out = call(&g1, "apply_proposal", apply_args(&p, "late")).await.ok();
    assert_eq!(
        (&out["applied"], &out["replayed"]),
        (&json!(true), &json!(false)),
        "{out}"
    );
    let commit = out["commit"].as_str().unwrap();
    assert_ne!(commit, attempted, "the old job's commit was pushed again");
    let landed = git(&remote, &["log", "--format=%H", &format!("{before}..main")]);
    assert_eq!(landed.lines().collect::<Vec<_>>(), [commit]);
    let trailer = git(
        &remote,
        &[
            "log",
            "-1",
            "--format=%(trailers:key=Vaultgate-Job,valueonly)",
            commit,
        ],
    );
    assert_ne!(trailer.trim(), old_job, "a new job made the commit");
    assert!(job_of().is_none(), "no job is left");
    // The same key answers the same apply again.
    let again = call(&g1, "apply_proposal", apply_args(&p, "late")).await.ok();
    assert_eq!(
        (&again["commit"], &again["replayed"]),
        (&json!(commit), &json!(true))
    );
    team.g(0).ok(&["audit", "verify"]);
    g1.close().await;
    crate::team_invariants::hold(&team, &remote).await;
}

#[tokio::test]
async fn jobs_a_killed_gateway_left_are_settled_by_the_next_take_of_the_lease() {
    let (team, remote, _person) = team_with_vault(&["g1", "g2"]);
    team.g(0).ok(&["team", "set", "lease_seconds", "3"]);
    let (_, token) = team.g(0).token("agent", "full");
    let g2 = team.g(1).stdio(&token).await;
    let status = || -> serde_json::Value {
        serde_json::from_str(&team.g(1).ok(&["team", "status", "--json"])).unwrap()
    };
    let propose = |path: &'static str| {
        let g2 = &g2;
        async move {
            call(
                g2,
                "propose_new_note",
                json!({"path": path, "content": "# Left\n", "reason": "r"}),
            )
            .await
            .ok()
        }
    };
    let before = head(&remote);
    // g1 dies right after its push landed, and another g1 right after its intent (nothing
    // pushed); both leave their jobs. Their callers never retry.
    let landed = propose("left/landed.md").await;
    let unpushed = propose("left/unpushed.md").await;
    let got = |p: &serde_json::Value| {
        let g2 = &g2;
        let id = p["id"].clone();
        async move { call(g2, "get_proposal", json!({"id": id})).await.ok()["status"].clone() }
    };
    for (p, step, key) in [
        (&landed, "team_apply.after_push", "k-landed"),
        (&unpushed, "team_apply.after_intent", "k-unpushed"),
    ] {
        crate::team_writes::dies_calling(team.g(0), &token, step, "apply_proposal", apply_args(p, key)).await;
        // One job left each time: the second gateway's take of the lease settled the first's.
        assert_eq!(status()["vaults"][0]["pendingJobs"], json!(1), "{step}");
        // The next one waits for the dead holder's lease to run out; then the job shows as
        // left (its gateway holds the lease no more), in `team status` and `doctor`.
        tokio::time::sleep(std::time::Duration::from_secs(4)).await;
        let vault = &status()["vaults"][0];
        assert_eq!(
            (&vault["leftJobs"], &vault["pendingJobs"]),
            (&json!(1), &json!(1)),
            "{step}: {vault}"
        );
        assert!(vault["oldestJobSeconds"].as_u64().unwrap() >= 4, "{vault}");
        let doctor = String::from_utf8_lossy(&team.g(1).run(&["doctor"]).stdout).into_owned();
        assert!(
            doctor.contains("1 apply job(s) left by a gateway that stopped"),
            "{doctor}"
        );
    }
    assert_eq!(got(&landed).await, json!("applied"), "recorded from the remote");
    let pushed = head(&remote);
    assert_ne!(pushed, before, "the first push landed");

    // Another proposal applied through g2: its take of the lease settles the left job first.
    let other = propose("left/other.md").await;
    let out = call(&g2, "apply_proposal", apply_args(&other, "k-other"))
        .await
        .ok();
    assert_eq!(out["applied"], json!(true), "{out}");
    assert_eq!(
        (
            &status()["vaults"][0]["pendingJobs"],
            &status()["vaults"][0]["leftJobs"]
        ),
        (&json!(0), &json!(0))
    );
    assert_eq!(
        got(&unpushed).await,
        json!("pending"),
        "free again, nothing landed"
    );
    let log = git(&remote, &["log", "--format=%H", &format!("{before}..main")]);
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        [out["commit"].as_str().unwrap(), pushed.as_str()]
    );
    // The first caller's retry answers the landed commit; the second's applies it now, once.
    let again = call(&g2, "apply_proposal", apply_args(&landed, "k-landed"))
        .await
        .ok();
    assert_eq!(
        (&again["applied"], &again["commit"]),
        (&json!(true), &json!(pushed)),
        "{again}"
    );
    let now = call(&g2, "apply_proposal", apply_args(&unpushed, "k-unpushed"))
        .await
        .ok();
    assert_eq!(now["applied"], json!(true), "{now}");
    let log = git(&remote, &["log", "--format=%H", &format!("{before}..main")]);
    assert_eq!(log.lines().count(), 3, "{log}");
    team.g(1).ok(&["audit", "verify"]);
    g2.close().await;
    crate::team_invariants::hold(&team, &remote).await;
}

#[tokio::test]
async fn git_locks_a_killed_gateway_left_in_its_clone_do_not_stop_its_next_apply() {
    let (team, remote, _person) = team_with_vault(&["g1"]);
    let (_, token) = team.g(0).token("agent", "full");
    let g1 = team.g(0).stdio(&token).await;
    let p = call(
        &g1,
        "propose_new_note",
        json!({"path": "locks/left.md", "content": "# Left\n", "reason": "r"}),
    )
    .await
    .ok();
    // What a gateway killed mid-reset and mid-fetch leaves: git's lock files in the clone.
    let clone = team.g(0).home.join("vaults/notes/.git");
    let left = [
        clone.join("index.lock"),
        clone.join("refs/remotes/origin/main.lock"),
    ];
    for lock in &left {
        std::fs::write(lock, "").unwrap();
    }
    let before = head(&remote);
    // Someone else moved the branch, so the apply must fetch and reset the clone.
    let (_, other) = team.g(0).token("other", "full");
    let g1b = team.g(0).stdio(&other).await;
    let q = call(
        &g1b,
        "propose_new_note",
        json!({"path": "locks/first.md", "content": "# First\n", "reason": "r"}),
    )
    .await
    .ok();
    let first = call(&g1b, "apply_proposal", apply_args(&q, "first")).await.ok();
    assert_eq!(first["applied"], json!(true), "{first}");
    let out = call(&g1, "apply_proposal", apply_args(&p, "left")).await.ok();
    assert_eq!(out["applied"], json!(true), "{out}");
    for lock in &left {
        assert!(!lock.exists(), "{} stayed", lock.display());
    }
    let log = git(&remote, &["log", "--format=%H", &format!("{before}..main")]);
    assert_eq!(log.lines().count(), 2, "{log}");
    assert!(team.g(0).home.join("vaults/notes/locks/left.md").is_file());
    g1.close().await;
    g1b.close().await;
    crate::team_invariants::hold(&team, &remote).await;
}

#[tokio::test]
async fn jobs_a_killed_gateway_left_on_a_vault_nobody_writes_to_are_settled_by_a_serving_gateway() {
    let (team, remote, _person) = team_with_vault(&["g1", "g2"]);
    team.g(0).ok(&["team", "set", "lease_seconds", "3"]);
    // Jobs are settled idle once their callers have stopped waiting.
    team.g(0).ok(&["team", "set", "limits.apply_wait_seconds", "2"]);
    let (_, token) = team.g(0).token("agent", "full");
    // g2 serves, and nobody writes through it.
    let g2 = team.g(1).stdio(&token).await;
    let status = || -> serde_json::Value {
        let s: serde_json::Value =
            serde_json::from_str(&team.g(1).ok(&["team", "status", "--json"])).unwrap();
        s["vaults"][0].clone()
    };
    let mut left = Vec::new();
    for (path, step, key) in [
        ("idle/landed.md", "team_apply.after_push", "k-landed"),
        ("idle/unpushed.md", "team_apply.after_intent", "k-unpushed"),
    ] {
        let p = call(
            &g2,
            "propose_new_note",
            json!({"path": path, "content": "# Left\n", "reason": "r"}),
        )
        .await
        .ok();
        crate::team_writes::dies_calling(team.g(0), &token, step, "apply_proposal", apply_args(&p, key))
            .await;
        left.push(p);
        // The dead holder's lease runs out.
        tokio::time::sleep(std::time::Duration::from_millis(3500)).await;
    }
    let (landed, unpushed) = (&left[0], &left[1]);
    let before = head(&remote);
    assert!(
        status()["pendingJobs"].as_u64().unwrap() >= 1,
        "a job is left: {}",
        status()
    );
    // No write comes; the serving gateway settles both from the remote.
    crate::team::eventually("the left jobs are settled", || async {
        let s = status();
        s["pendingJobs"] == json!(0) && s["leftJobs"] == json!(0)
    })
    .await;
    let got = |p: &serde_json::Value| {
        let g2 = &g2;
        let id = p["id"].clone();
        async move { call(g2, "get_proposal", json!({"id": id})).await.ok()["status"].clone() }
    };
    assert_eq!(got(landed).await, json!("applied"), "recorded from the remote");
    assert_eq!(
        got(unpushed).await,
        json!("pending"),
        "free again, nothing landed"
    );
    assert_eq!(head(&remote), before, "the sweep pushed nothing");
    let recovered: Vec<serde_json::Value> = team
        .chain(1)
        .into_iter()
        .filter(|r| r["event"] == json!("apply.recovered"))
        .collect();
    assert_eq!(recovered.len(), 1, "{recovered:?}");
    assert_eq!(recovered[0]["proposalId"], landed["id"]);
    // The first caller's retry answers the landed commit; the second's applies it now, once.
    let again = call(&g2, "apply_proposal", apply_args(landed, "k-landed"))
        .await
        .ok();
    assert_eq!(
        (&again["applied"], &again["commit"]),
        (&json!(true), &json!(before)),
        "{again}"
    );
    let now = call(&g2, "apply_proposal", apply_args(unpushed, "k-unpushed"))
        .await
        .ok();
    assert_eq!(now["applied"], json!(true), "{now}");
    let log = git(&remote, &["log", "--format=%H", &format!("{before}..main")]);
    assert_eq!(log.lines().count(), 1, "{log}");
    g2.close().await;
    crate::team_invariants::hold(&team, &remote).await;
}

#[tokio::test]
async fn a_remote_killed_mid_push_before_or_after_it_took_the_commit_has_the_apply_land_once() {
    // The remote's receive-pack killed by a hook of its own, once: before the branch moved
    // (`pre-receive`), or right after (`reference-transaction`, committed), before it could say
    // so. The gateway's push sees the connection die either way.
    for (hook, script) in [
        (
            "pre-receive",
            "#!/bin/sh\nif mkdir killed 2>/dev/null; then kill -9 $PPID; sleep 5; fi\n",
        ),
        (
            "reference-transaction",
            "#!/bin/sh\nif [ \"$1\" = committed ] && mkdir killed 2>/dev/null; then kill -9 $PPID; sleep 5; fi\n",
        ),
    ] {
        let (team, remote, _person) = team_with_vault(&["g1"]);
        let path = remote.join("hooks").join(hook);
        std::fs::write(&path, script).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let (_, token) = team.g(0).token("agent", "full");
        let g1 = team.g(0).stdio(&token).await;
        let p = call(
            &g1,
            "propose_new_note",
            json!({"path": "killed/remote.md", "content": "# Killed\n", "reason": "r"}),
        )
        .await
        .ok();
        let before = head(&remote);
        let first = call(&g1, "apply_proposal", apply_args(&p, "k-killed")).await;
        assert!(remote.join("killed").exists(), "{hook}: the hook never ran");
        let landed = git(&remote, &["rev-parse", "main"]).trim().to_owned();
        let out = match first {
            // Settled in the same call by reading the remote: the commit is there.
            crate::util::Reply::Ok(out) => {
                assert_eq!(hook, "reference-transaction", "nothing landed, yet: {out}");
                out
            }
            // Not known yet: the retry with the key settles it.
            crate::util::Reply::Err(e) => {
                assert_eq!(e["retryable"], json!(true), "{hook}: {e}");
                assert_eq!(landed, before, "{hook}: answered {e} for a push that landed");
                call(&g1, "apply_proposal", apply_args(&p, "k-killed")).await.ok()
            }
        };
        assert_eq!(out["applied"], json!(true), "{hook}: {out}");
        let log = git(&remote, &["log", "--format=%H", &format!("{before}..main")]);
        assert_eq!(
            log.lines().collect::<Vec<_>>(),
            [out["commit"].as_str().unwrap()],
            "{hook}: one commit"
        );
        g1.close().await;
        crate::team_invariants::hold(&team, &remote).await;
    }
}
