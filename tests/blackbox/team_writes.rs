//! docs/contract.md#team-mode, writes: a proposal made through any gateway is listed, shown,
//! applied or rejected through any other; an apply is one commit on the vault's remote with its
//! trailers, pushed by compare-and-swap on the base it was checked against; a person's push to
//! the note is `PROPOSAL_STALE_BASE`, to another note the apply lands on top of it; one proposal
//! or one key sent to three gateways at once has one effect; the database stopped refuses the
//! apply and leaves the remote as it was.

use serde_json::{Value, json};

use crate::team::{Team, eventually, git, remote_with_notes};
use crate::util::{Reply, call};

/// A team of `names` with the vault `notes` on a fresh bare remote, every gateway fetching
/// every second; the remote and a person's clone of it.
pub(crate) fn team_with_vault(names: &[&str]) -> (Team, std::path::PathBuf, std::path::PathBuf) {
    let team = Team::start(names);
    let (remote, person) = remote_with_notes(team.root.path());
    for g in &team.gateways {
        crate::http::edit_config(g, "team", |t| {
            t.insert("fetch_seconds".into(), toml::Value::Integer(1));
        });
    }
    let said = team.g(0).ok(&[
        "vault",
        "add",
        "--remote",
        remote.to_str().unwrap(),
        "--id",
        "notes",
    ]);
    assert!(said.contains("added team vault 'notes'"), "{said}");
    (team, remote, person)
}

/// A person's edit, pushed the way obsidian-git does: pull (rebase), `edit`, commit, push; a push
/// the branch moved past (an apply landed first) is dropped and made again on top. The commit.
pub(crate) fn person_pushes(person: &std::path::Path, message: &str, edit: impl Fn()) -> String {
    loop {
        git(person, &["pull", "--quiet", "--rebase"]);
        edit();
        git(person, &["commit", "--quiet", "-am", message]);
        let pushed = std::process::Command::new("git")
            .arg("-C")
            .arg(person)
            .args(["push", "--quiet", "origin", "main"])
            .output()
            .unwrap();
        if pushed.status.success() {
            return git(person, &["rev-parse", "HEAD"]).trim().to_owned();
        }
        git(person, &["reset", "--quiet", "--hard", "HEAD~1"]);
    }
}

pub(crate) fn head(remote: &std::path::Path) -> String {
    git(remote, &["rev-parse", "main"]).trim().to_owned()
}

/// The full message of `rev` on the remote.
pub(crate) fn message(remote: &std::path::Path, rev: &str) -> String {
    git(remote, &["log", "-1", "--format=%B", rev])
}

/// The lowercase hex SHA-256 of `text`, as note hashes are written.
fn proposals_sha256(text: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

pub(crate) fn apply_args(p: &Value, key: &str) -> Value {
    json!({"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": key})
}

#[tokio::test]
async fn a_proposal_made_on_one_gateway_is_applied_on_another_as_one_commit_pushed_on_the_remote() {
    let (mut team, remote, person) = team_with_vault(&["g1", "g2", "g3"]);
    let (_, token) = team.g(0).token("agent", "full");
    let g1 = team.g(0).stdio(&token).await;
    let g2 = team.g(1).stdio(&token).await;
    let g3 = team.g(2).stdio(&token).await;

    // Proposed on g1 …
    let note = call(&g1, "read_note", json!({"path": "z/plan.md"})).await.ok();
    let new_text = "---\ntitle: Plan\n---\n# Plan\n\nShip the first version, reviewed.\n";
    let p = call(
        &g1,
        "propose_note_patch",
        json!({"path": "z/plan.md", "baseHash": note["hash"], "content": new_text, "reason": "review it"}),
    )
    .await
    .ok();
    // … listed and shown on g2, from the team's database (no inbox folder anywhere) …
    let listed = call(&g2, "list_proposals", json!({})).await.ok();
    assert_eq!(listed["proposals"][0]["id"], p["id"], "{listed}");
    let shown = call(&g2, "get_proposal", json!({"id": p["id"]})).await.ok();
    assert_eq!(shown["content"], json!(new_text), "{shown}");
    assert!(
        shown["diff"]
            .as_str()
            .unwrap()
            .contains("+Ship the first version, reviewed.")
    );
    for g in &team.gateways {
        assert!(!g.home.join("vaults/notes/inbox").exists());
    }
    let before = head(&remote);

    // … applied on g3: one commit on the remote, with the trailers, fast-forward from before.
    let out = call(&g3, "apply_proposal", apply_args(&p, "k1")).await.ok();
    assert_eq!(
        (&out["applied"], &out["git"]),
        (&json!(true), &json!("committed")),
        "{out}"
    );
    let commit = out["commit"].as_str().unwrap().to_owned();
    assert_eq!(head(&remote), commit);
    assert_eq!(git(&remote, &["rev-parse", &format!("{commit}^")]).trim(), before);
    assert_eq!(
        git(&remote, &["diff", "--name-only", &before, &commit]).trim(),
        "z/plan.md"
    );
    assert_eq!(git(&remote, &["show", &format!("{commit}:z/plan.md")]), new_text);
    let msg = message(&remote, &commit);
    for trailer in [
        format!("Vaultgate-Proposal: {}", p["id"].as_str().unwrap()),
        format!("Vaultgate-Proposal-Hash: {}", p["proposalHash"].as_str().unwrap()),
        "Vaultgate-Gateway: g3".to_owned(),
        "Vaultgate-Job: ".to_owned(),
        "Vaultgate-Audit: ".to_owned(),
        "Vaultgate-History-Entry: ".to_owned(),
        "Vaultgate-Credential: agent (".to_owned(),
    ] {
        assert!(msg.contains(&trailer), "{trailer} missing from:\n{msg}");
    }
    assert!(msg.starts_with("patch z/plan.md\n\nreview it\n"), "{msg}");
    // g3 reads it at once (its clone holds the commit); g1 within a few seconds.
    let now = call(&g3, "read_note", json!({"path": "z/plan.md"})).await.ok();
    assert_eq!(now["content"], json!(new_text));
    eventually("g1 reads the applied note", || async {
        call(&g1, "read_note", json!({"path": "z/plan.md"})).await.ok()["content"] == json!(new_text)
    })
    .await;

    // Applied once: from g2 it is PROPOSAL_ALREADY_APPLIED; the same key on g1 replays the answer.
    let again = call(&g2, "apply_proposal", apply_args(&p, "k2")).await;
    assert_eq!(again.code(), "PROPOSAL_ALREADY_APPLIED");
    let replay = call(&g1, "apply_proposal", apply_args(&p, "k1")).await.ok();
    assert_eq!(
        (&replay["commit"], &replay["auditSeq"], &replay["replayed"]),
        (&out["commit"], &out["auditSeq"], &json!(true)),
        "{replay}"
    );
    assert_eq!(head(&remote), commit);

    // A person pushes to the note a pending patch is based on: the apply is PROPOSAL_STALE_BASE
    // and nothing is pushed.
    let w = call(&g1, "read_note", json!({"path": "welcome.md"})).await.ok();
    let stale = call(
        &g1,
        "propose_note_patch",
        json!({"path": "welcome.md", "baseHash": w["hash"], "content": "# Welcome\n\nAn agent's words.\n", "reason": "r"}),
    )
    .await
    .ok();
    git(&person, &["pull", "--quiet", "--ff-only"]);
    std::fs::write(person.join("welcome.md"), "# Welcome\n\nA person's words.\n").unwrap();
    git(&person, &["commit", "--quiet", "-am", "person"]);
    git(&person, &["push", "--quiet", "origin", "main"]);
    let persons = head(&remote);
    let r = call(&g2, "apply_proposal", apply_args(&stale, "k3")).await;
    assert_eq!(r.code(), "PROPOSAL_STALE_BASE");
    assert_eq!(head(&remote), persons);

    // A person's push to another note: the apply lands on top, the person's commit kept.
    let plan = call(&g3, "read_note", json!({"path": "z/plan.md"})).await.ok();
    let on_top = call(
        &g3,
        "propose_note_patch",
        json!({"path": "z/plan.md", "baseHash": plan["hash"], "content": "# Plan\n\nOn top.\n", "reason": "r"}),
    )
    .await
    .ok();
    std::fs::write(
        person.join("welcome.md"),
        "# Welcome\n\nA person's second words.\n",
    )
    .unwrap();
    git(&person, &["commit", "--quiet", "-am", "person again"]);
    git(&person, &["push", "--quiet", "origin", "main"]);
    let persons = head(&remote);
    let out = call(&g2, "apply_proposal", apply_args(&on_top, "k4")).await.ok();
    let commit = out["commit"].as_str().unwrap();
    assert_eq!(head(&remote), commit);
    assert_eq!(
        git(&remote, &["rev-parse", &format!("{commit}^")]).trim(),
        persons
    );
    assert_eq!(
        git(&remote, &["show", "main:welcome.md"]),
        "# Welcome\n\nA person's second words.\n"
    );

    // A new note proposed on g2, rejected on g3: applying it is refused, the remote untouched.
    let new = call(
        &g2,
        "propose_new_note",
        json!({"path": "ideas/one.md", "content": "# One\n", "reason": "idea"}),
    )
    .await
    .ok();
    let r = call(
        &g3,
        "reject_proposal",
        json!({"id": new["id"], "reason": "not now"}),
    )
    .await
    .ok();
    assert_eq!(r, json!({"rejected": true}));
    assert_eq!(
        call(&g1, "apply_proposal", apply_args(&new, "k5")).await.code(),
        "PROPOSAL_REJECTED"
    );
    let rejected = call(&g1, "list_proposals", json!({"status": "rejected"}))
        .await
        .ok();
    assert_eq!(rejected["proposals"][0]["id"], new["id"]);

    // A deletion, proposed on g3 (once its fetch brought the person's push) and applied with
    // the CLI of g1: one commit removing the note.
    eventually("g3 reads the person's push", || async {
        call(&g3, "read_note", json!({"path": "welcome.md"})).await.ok()["content"]
            .as_str()
            .is_some_and(|c| c.contains("second words"))
    })
    .await;
    let w = call(&g3, "read_note", json!({"path": "welcome.md"})).await.ok();
    let del = call(
        &g3,
        "propose_delete",
        json!({"path": "welcome.md", "baseHash": w["hash"], "reason": "old"}),
    )
    .await
    .ok();
    let said = team.g(0).ok(&[
        "apply",
        "--vault",
        "notes",
        "--only",
        del["id"].as_str().unwrap(),
        "--yes",
    ]);
    assert!(said.contains("pushed "), "{said}");
    assert!(!git(&remote, &["ls-tree", "--name-only", "main"]).contains("welcome.md"));
    let msg = message(&remote, "main");
    assert!(
        msg.contains("Vaultgate-Gateway: g1") && msg.contains("Vaultgate-Credential: cli:"),
        "{msg}"
    );

    // The database stopped: the apply is refused as AUDIT_UNAVAILABLE and the remote unchanged.
    let plan = call(&g1, "read_note", json!({"path": "z/plan.md"})).await.ok();
    let late = call(
        &g1,
        "propose_note_patch",
        json!({"path": "z/plan.md", "baseHash": plan["hash"], "content": "# Plan\n\nLate.\n", "reason": "r"}),
    )
    .await
    .ok();
    let before = head(&remote);
    team.cluster.stop();
    let r = call(&g2, "apply_proposal", apply_args(&late, "k6")).await;
    assert_eq!(r.code(), "AUDIT_UNAVAILABLE");
    assert_eq!(head(&remote), before);
    team.cluster.start_again();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let out = loop {
        match call(&g2, "apply_proposal", apply_args(&late, "k6")).await {
            Reply::Ok(v) => break v,
            Reply::Err(e) => {
                assert_eq!(e["code"], "AUDIT_UNAVAILABLE", "{e}");
                assert!(
                    std::time::Instant::now() < deadline,
                    "no apply worked after the restart"
                );
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            }
        }
    };
    assert_eq!(head(&remote), out["commit"].as_str().unwrap());

    // One chain: every proposal, intent and apply recorded by the gateway that took the call;
    // every gateway verifies it, and every pushed commit's audit trailer names a record of it.
    let chain = team.chain(0);
    let by = |event: &str, tool: &str, gw: &str| {
        chain
            .iter()
            .any(|r| r["event"] == json!(event) && r["tool"] == json!(tool) && r["gateway"] == json!(gw))
    };
    assert!(by("tool_call", "propose_note_patch", "g1"));
    assert!(by("apply.intent", "apply_proposal", "g3") && by("tool_call", "apply_proposal", "g3"));
    assert!(by("tool_call", "reject_proposal", "g3"));
    for line in git(
        &remote,
        &[
            "log",
            "--format=%(trailers:key=Vaultgate-Audit,valueonly)",
            "main",
        ],
    )
    .lines()
    .filter(|l| !l.trim().is_empty())
    {
        let (seq, hash) = line.trim().split_once(' ').unwrap();
        let rec = chain
            .iter()
            .find(|r| r["seq"].as_u64() == Some(seq.parse().unwrap()))
            .unwrap_or_else(|| panic!("no record {seq}"));
        assert_eq!(
            (&rec["hash"], &rec["event"]),
            (&json!(hash), &json!("apply.intent"))
        );
    }
    for g in &team.gateways {
        let said = g.ok(&["audit", "verify"]);
        assert!(said.starts_with("audit chain ok: "), "{said}");
    }
    // Every commit on the remote moved the branch forward (the bare remote refuses anything else).
    assert!(git(&remote, &["config", "receive.denyNonFastForwards"]).trim() == "true");

    // A commit pushed with a trailer naming a record the chain does not hold fails `audit verify`
    // once a gateway's clone holds it, naming the commit.
    git(&person, &["pull", "--quiet", "--ff-only"]);
    std::fs::write(person.join("forged.md"), "# Forged\n").unwrap();
    git(&person, &["add", "forged.md"]);
    let fake = format!("Vaultgate-Audit: 3 {}", "ab".repeat(32));
    git(
        &person,
        &["commit", "--quiet", "-m", "looks applied", "-m", &fake],
    );
    git(&person, &["push", "--quiet", "origin", "main"]);
    let forged = head(&remote);
    eventually("g1's clone holds the forged commit", || async {
        matches!(
            call(&g1, "read_note", json!({"path": "forged.md"})).await,
            Reply::Ok(_)
        )
    })
    .await;
    let e = crate::team::refused(team.g(0).run(&["audit", "verify"]), "AUDIT_UNAVAILABLE");
    assert!(e.contains(&forged) && e.contains("does not hold"), "{e}");
    for c in [g1, g2, g3] {
        c.close().await;
    }
}

#[tokio::test]
async fn one_proposal_or_one_key_sent_to_three_gateways_at_once_has_one_effect_and_quotas_count_across_them()
{
    let (team, remote, _person) = team_with_vault(&["g1", "g2", "g3"]);
    let (_, token) = team.g(0).token("agent", "full");
    let mut clients = Vec::new();
    for g in &team.gateways {
        clients.push(g.stdio(&token).await);
    }
    let propose = |path: &'static str| {
        let c = &clients[0];
        async move {
            call(
                c,
                "propose_new_note",
                json!({"path": path, "content": format!("# {path}\n"), "reason": "race"}),
            )
            .await
            .ok()
        }
    };

    // One proposal, three gateways, three keys: applied once; the others are told it was.
    let p = propose("race/a.md").await;
    let before = head(&remote);
    let (a0, a1, a2) = tokio::join!(
        call(&clients[0], "apply_proposal", apply_args(&p, "a0")),
        call(&clients[1], "apply_proposal", apply_args(&p, "a1")),
        call(&clients[2], "apply_proposal", apply_args(&p, "a2")),
    );
    let answers = vec![a0, a1, a2];
    let (ok, refused): (Vec<Reply>, Vec<Reply>) =
        answers.into_iter().partition(|r| matches!(r, Reply::Ok(_)));
    assert_eq!(ok.len(), 1, "{ok:?} {refused:?}");
    for r in refused {
        assert_eq!(r.code(), "PROPOSAL_ALREADY_APPLIED");
    }
    let log = git(&remote, &["log", "--format=%H", &format!("{before}..main")]);
    assert_eq!(log.lines().count(), 1, "{log}");

    // One key, the same call, three gateways: one effect, the same commit and record in every answer.
    let q = propose("race/b.md").await;
    let before = head(&remote);
    let (a0, a1, a2) = tokio::join!(
        call(&clients[0], "apply_proposal", apply_args(&q, "shared")),
        call(&clients[1], "apply_proposal", apply_args(&q, "shared")),
        call(&clients[2], "apply_proposal", apply_args(&q, "shared")),
    );
    let answers: Vec<Value> = [a0, a1, a2].into_iter().map(Reply::ok).collect();
    for a in &answers {
        assert_eq!(
            (&a["commit"], &a["auditSeq"]),
            (&answers[0]["commit"], &answers[0]["auditSeq"]),
            "{answers:?}"
        );
    }
    assert_eq!(
        answers.iter().filter(|a| a["replayed"] == json!(false)).count(),
        1
    );
    assert_eq!(
        git(&remote, &["log", "--format=%H", &format!("{before}..main")])
            .lines()
            .count(),
        1
    );
    // The key used for another call is refused on any gateway.
    let other = propose("race/c.md").await;
    assert_eq!(
        call(&clients[1], "apply_proposal", apply_args(&other, "shared"))
            .await
            .code(),
        "IDEMPOTENCY_CONFLICT"
    );

    // Quotas count the team's pending proposals, whichever gateway took them: with a limit of 2
    // on g3, two pending made on g1 and g2 leave g3 no room.
    crate::http::edit_config(team.g(2), "limits", |t| {
        t.insert("max_pending_per_credential".into(), toml::Value::Integer(2));
    });
    call(
        &clients[1],
        "propose_new_note",
        json!({"path": "race/d.md", "content": "# d\n", "reason": "q"}),
    )
    .await
    .ok();
    let on_g3 = team.g(2).stdio(&token).await;
    let r = call(
        &on_g3,
        "propose_new_note",
        json!({"path": "race/e.md", "content": "# e\n", "reason": "q"}),
    )
    .await;
    assert_eq!(r.code(), "QUOTA_EXCEEDED");
    on_g3.close().await;
    for c in clients {
        c.close().await;
    }
    crate::team_invariants::hold(&team, &remote).await;
}

#[tokio::test]
async fn a_reviewer_gateway_applies_and_rejects_proposals_made_on_another() {
    let (team, remote, _person) = team_with_vault(&["g1"]);
    let admin = crate::team::pg::connect_retrying(&team.url);
    admin.query("CREATE ROLE reviewer_ana LOGIN", &[]).unwrap();
    team.g(0).ok(&["team", "grant-reviewer", "reviewer_ana"]);
    let rev = crate::team::gateway(team.root.path());
    let url = format!("postgres://reviewer_ana@127.0.0.1:{}/team", team.cluster.port);
    let secret = team.root.path().join("team.secret");
    let out = crate::team::join(&rev, &url, &secret, "ana", &["--role", "reviewer"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let (_, token) = team.g(0).token("agent", "propose");
    let g1 = team.g(0).stdio(&token).await;
    let p = call(
        &g1,
        "propose_new_note",
        json!({"path": "ideas/two.md", "content": "# Two\n", "reason": "idea"}),
    )
    .await
    .ok();
    let q = call(
        &g1,
        "propose_new_note",
        json!({"path": "ideas/three.md", "content": "# Three\n", "reason": "idea"}),
    )
    .await
    .ok();
    // A `propose` credential may not apply what it proposed.
    assert_eq!(
        call(&g1, "apply_proposal", apply_args(&p, "k")).await.code(),
        "CAPABILITY_DENIED"
    );
    let listed = rev.ok(&["inbox", "list", "--vault", "notes"]);
    assert!(
        listed.contains("ideas/two.md") && listed.contains("ideas/three.md"),
        "{listed}"
    );

    // The reviewer applies one and rejects the other, from its own gateway.
    let said = rev.ok(&[
        "apply",
        "--vault",
        "notes",
        "--only",
        p["id"].as_str().unwrap(),
        "--yes",
    ]);
    assert!(said.contains("pushed "), "{said}");
    assert_eq!(git(&remote, &["show", "main:ideas/two.md"]), "# Two\n");
    let msg = message(&remote, "main");
    assert!(msg.contains("Vaultgate-Gateway: ana"), "{msg}");
    assert!(msg.contains("Vaultgate-Proposal: "), "{msg}");
    rev.ok(&[
        "inbox",
        "reject",
        q["id"].as_str().unwrap(),
        "--vault",
        "notes",
        "--reason",
        "later",
    ]);
    let status = call(&g1, "get_proposal", json!({"id": q["id"]})).await.ok();
    assert_eq!(status["status"], json!("rejected"), "{status}");
    // Its records are the reviewer's, in the one chain every gateway verifies.
    let chain = team.chain(0);
    assert!(
        chain.iter().any(|r| r["event"] == json!("cli")
            && r["tool"] == json!("apply_proposal")
            && r["gateway"] == json!("ana")),
        "{chain:?}"
    );
    rev.ok(&["audit", "verify"]);
    g1.close().await;
    crate::team_invariants::hold(&team, &remote).await;
}

/// A stdio server of `g` for `token` that aborts (as `kill -9` would) at the team apply's `step`.
pub(crate) async fn stdio_dying_at(g: &crate::util::Env, token: &str, step: &str) -> crate::util::Client {
    use rmcp::ServiceExt;
    let mut cmd = tokio::process::Command::new(crate::util::bin());
    cmd.arg("stdio")
        .arg("--home")
        .arg(&g.home)
        .env_remove("VAULTGATE_HOME")
        .env("VAULTGATE_TOKEN", token)
        .env("VAULTGATE_TEST_FAILPOINT", step)
        .stderr(std::process::Stdio::null());
    let transport = rmcp::transport::TokioChildProcess::new(cmd).unwrap();
    crate::util::Client {
        inner: ().serve(transport).await.unwrap(),
    }
}

/// Calls `tool` through a gateway of `g` that dies at `step` (a failpoint), and checks the call
/// got no answer: the gateway died with it.
pub(crate) async fn dies_calling(g: &crate::util::Env, token: &str, step: &str, tool: &str, args: Value) {
    let dying = stdio_dying_at(g, token, step).await;
    let lost = tokio::time::timeout(std::time::Duration::from_secs(60), dying.try_call(tool, args))
        .await
        .expect("the dying gateway neither answered nor died");
    assert!(lost.is_err(), "{step}: the dying gateway answered {lost:?}");
}

#[tokio::test]
async fn a_gateway_killed_at_any_step_of_an_apply_leaves_it_applied_once_and_the_callers_retry_answers_it() {
    let (team, remote, _person) = team_with_vault(&["g1", "g2"]);
    // A dead holder's lease blocks the vault until it expires: short here.
    team.g(0).ok(&["team", "set", "lease_seconds", "3"]);
    let lease = |g: &crate::util::Env| -> Value {
        let s: Value = serde_json::from_str(&g.ok(&["team", "status", "--json"])).unwrap();
        s["vaults"][0]["applier"].clone()
    };
    let (_, token) = team.g(0).token("agent", "full");
    let g2 = team.g(1).stdio(&token).await;
    let mut epoch = 0;
    for (i, step) in [
        "team_apply.after_intent",
        "team_apply.before_push",
        "team_apply.after_push",
        "team_apply.after_record",
    ]
    .into_iter()
    .enumerate()
    {
        let p = call(
            &g2,
            "propose_new_note",
            json!({"path": format!("crash/{i}.md"), "content": format!("# {i}\n"), "reason": step}),
        )
        .await
        .ok();
        let before = head(&remote);
        // g1 dies at `step` while applying it: the call gets no answer.
        let key = format!("key-{i}");
        dies_calling(team.g(0), &token, step, "apply_proposal", apply_args(&p, &key)).await;
        // The commit g1 built and noted in its job row (once it got that far).
        let db = teamstate::PgState::connect(&team.url).unwrap();
        let noted = db
            .query(
                "SELECT job, job_commit FROM vaultgate.proposals WHERE id = $1",
                &[&p["id"].as_str().unwrap()],
            )
            .unwrap()
            .first()
            .map(|r| (r.get::<_, Option<String>>(0), r.get::<_, Option<String>>(1)))
            .unwrap();
        // It died holding the vault's lease: held still, by g1, at a greater epoch.
        let held = lease(team.g(1));
        assert_eq!(
            (&held["gateway"], &held["held"]),
            (&json!("g1"), &json!(true)),
            "{step}: {held}"
        );
        assert!(held["epoch"].as_i64().unwrap() > epoch, "{step}: {held}");
        // The caller retries with its key on g2: it waits for the lease to expire, then the
        // apply is the one answer, made exactly once.
        let retried = std::time::Instant::now();
        let out = call(&g2, "apply_proposal", apply_args(&p, &key)).await.ok();
        eprintln!(
            "{step}: the retry through g2 answered after {:?}",
            retried.elapsed()
        );
        let after = lease(team.g(1));
        if step == "team_apply.after_record" {
            // Recorded before it died: the retry is answered from the key, no lease needed.
            assert_eq!(after, held, "{step}");
        } else {
            assert_eq!(
                (&after["gateway"], &after["held"]),
                (&json!("g2"), &json!(false)),
                "{step}: {after}"
            );
            assert!(after["epoch"].as_i64().unwrap() > held["epoch"].as_i64().unwrap());
        }
        epoch = after["epoch"].as_i64().unwrap();
        assert_eq!(
            (&out["applied"], &out["git"]),
            (&json!(true), &json!("committed")),
            "{step}: {out}"
        );
        let commit = out["commit"].as_str().unwrap();
        assert_eq!(head(&remote), commit, "{step}");
        if step == "team_apply.before_push" {
            // Its push never began: g2, whose clone never held g1's commit, built the same
            // commit again from the job row and pushed it (the job's, by g1's gateway).
            let (job, built) = (noted.0.unwrap(), noted.1.unwrap());
            assert_eq!(commit, built, "{step}: not the commit g1's job row makes");
            let said = message(&remote, commit);
            assert!(said.contains(&format!("Vaultgate-Job: {job}")), "{said}");
            assert!(said.contains("Vaultgate-Gateway: g1"), "{said}");
            assert!(out["historyEntryId"].as_str().unwrap().starts_with("h_"), "{out}");
        }
        let landed = git(&remote, &["log", "--format=%H", &format!("{before}..main")]);
        assert_eq!(landed.lines().count(), 1, "{step}: {landed}");
        assert!(
            message(&remote, commit).contains(&format!("Vaultgate-Proposal: {}", p["id"].as_str().unwrap()))
        );
        assert_eq!(
            call(&g2, "get_proposal", json!({"id": p["id"]})).await.ok()["status"],
            json!("applied"),
            "{step}"
        );
        // And again: the same answer.
        let again = call(&g2, "apply_proposal", apply_args(&p, &key)).await.ok();
        assert_eq!(
            (&again["commit"], &again["replayed"]),
            (&out["commit"], &json!(true)),
            "{step}"
        );
    }
    // A reject meets a job left behind: it settles it first. Landed: the proposal is applied,
    // not rejected; not landed: rejected, nothing pushed. `team status` counts left jobs.
    let jobs = |g: &crate::util::Env| -> u64 {
        let s: Value = serde_json::from_str(&g.ok(&["team", "status", "--json"])).unwrap();
        s["vaults"][0]["pendingJobs"].as_u64().unwrap()
    };
    for (step, code) in [
        ("team_apply.after_push", Some("PROPOSAL_ALREADY_APPLIED")),
        ("team_apply.before_push", None),
    ] {
        let p = call(
            &g2,
            "propose_new_note",
            json!({"path": format!("crash/{step}.md"), "content": "# r\n", "reason": "reject"}),
        )
        .await
        .ok();
        dies_calling(team.g(0), &token, step, "apply_proposal", apply_args(&p, step)).await;
        assert_eq!(jobs(team.g(1)), 1, "{step}");
        let said = String::from_utf8_lossy(&team.g(1).run(&["doctor"]).stdout).into_owned();
        // In flight while the dead holder's lease lasts, left once it ran out.
        assert!(said.contains("vault notes: 1 apply job(s) "), "{said}");
        let before = head(&remote);
        let mut r = call(&g2, "reject_proposal", json!({"id": p["id"], "reason": "no"})).await;
        // Not landed: a push its gateway began may still land for a while, so the rejection
        // waits that out.
        assert!(
            code.is_some() || !r.is_ok(),
            "{step}: rejected while its push may land"
        );
        let waited = std::time::Instant::now();
        while code.is_none() && !r.is_ok() {
            let e = r.err_json();
            assert_eq!(e["code"], json!("VAULT_BUSY"), "{step}: {e}");
            assert!(e["message"].as_str().unwrap().contains("may still land"), "{e}");
            assert!(waited.elapsed() < std::time::Duration::from_secs(60), "{step}");
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            r = call(&g2, "reject_proposal", json!({"id": p["id"], "reason": "no"})).await;
        }
        match code {
            Some(code) => assert_eq!(r.code(), code, "{step}"),
            None => {
                assert_eq!(r.ok(), json!({"rejected": true}), "{step}");
                assert_eq!(head(&remote), before);
            }
        }
        assert_eq!(jobs(team.g(1)), 0, "{step}");
    }

    // The pushes the dying gateway made were settled from the remote and recorded as such.
    let chain = team.chain(1);
    assert!(
        chain.iter().any(|r| r["event"] == json!("apply.recovered")),
        "no recovery recorded"
    );
    team.g(1).ok(&["audit", "verify"]);
    g2.close().await;
    crate::team_invariants::hold(&team, &remote).await;
}

#[tokio::test]
async fn a_move_applied_through_another_gateway_is_one_commit_with_its_links_rewritten() {
    let (team, remote, person) = team_with_vault(&["g1", "g2"]);
    std::fs::write(person.join("links.md"), "# Links\n\nSee [[plan]] first.\n").unwrap();
    git(&person, &["add", "links.md"]);
    git(&person, &["commit", "--quiet", "-m", "links"]);
    git(&person, &["push", "--quiet", "origin", "main"]);
    let (_, token) = team.g(0).token("agent", "full");
    let g1 = team.g(0).stdio(&token).await;
    let g2 = team.g(1).stdio(&token).await;
    eventually("g1 finds the linking note", || async {
        matches!(
            call(&g1, "read_note", json!({"path": "links.md"})).await,
            Reply::Ok(_)
        )
    })
    .await;
    let p = call(
        &g1,
        "propose_move",
        json!({"from": "z/plan.md", "to": "z/roadmap.md", "reason": "rename"}),
    )
    .await
    .ok();
    assert_eq!(
        p["linkRewrites"],
        json!([{"path": "links.md", "count": 1}]),
        "{p}"
    );
    let before = head(&remote);
    let out = call(&g2, "apply_proposal", apply_args(&p, "m1")).await.ok();
    let commit = out["commit"].as_str().unwrap();
    assert_eq!(git(&remote, &["rev-parse", &format!("{commit}^")]).trim(), before);
    let changed = git(
        &remote,
        &["diff", "--name-status", "--no-renames", &before, commit],
    );
    assert_eq!(
        changed.lines().collect::<Vec<_>>(),
        ["M\tlinks.md", "D\tz/plan.md", "A\tz/roadmap.md"],
        "{changed}"
    );
    assert_eq!(
        git(&remote, &["show", "main:links.md"]),
        "# Links\n\nSee [[roadmap]] first.\n"
    );
    assert_eq!(
        git(&remote, &["show", &format!("{before}:z/plan.md")]),
        git(&remote, &["show", "main:z/roadmap.md"])
    );
    assert!(message(&remote, commit).starts_with("move z/roadmap.md\n"));
    // g2 reads the moved note at once.
    let moved = call(&g2, "read_note", json!({"path": "z/roadmap.md"})).await.ok();
    assert!(
        moved["content"]
            .as_str()
            .unwrap()
            .contains("Ship the first version.")
    );

    // Patched after the move: its history (from the remote's commits) lists the patch and the
    // move, newest first, not the person's commit that made it; each listed version reads back.
    let patch = call(
        &g2,
        "propose_note_patch",
        json!({"path": "z/roadmap.md", "baseHash": moved["hash"], "content": "# Roadmap\n", "reason": "short"}),
    )
    .await
    .ok();
    let patched = call(&g2, "apply_proposal", apply_args(&patch, "m2")).await.ok();
    let h = call(&g2, "get_note_history", json!({"path": "z/roadmap.md"}))
        .await
        .ok();
    let entries = h["entries"].as_array().unwrap();
    let kinds: Vec<&str> = entries.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["patch", "move"], "{h}");
    assert_eq!(h["truncated"], json!(false));
    assert_eq!(entries[0]["commit"], patched["commit"]);
    assert_eq!(entries[0]["reason"], json!("short"));
    assert_eq!(entries[0]["hashBefore"], moved["hash"]);
    assert_eq!(entries[1]["hashAfter"], moved["hash"]);
    assert_eq!(entries[1]["hashBefore"], moved["hash"], "{h}");
    assert!(
        entries[1]["actor"].as_str().unwrap().starts_with("agent ("),
        "{h}"
    );
    let old = call(
        &g2,
        "read_note",
        json!({"path": "z/roadmap.md", "hash": entries[1]["hashBefore"]}),
    )
    .await
    .ok();
    assert!(
        old["content"]
            .as_str()
            .unwrap()
            .contains("Ship the first version."),
        "{old}"
    );
    // A version no listed change holds (only people's commits touched welcome.md) is not found,
    // whatever the repository keeps; the linking note's version before the move's rewrite is.
    let persons = call(
        &g2,
        "read_note",
        json!({"path": "welcome.md", "hash": proposals_sha256("# Welcome\n\nThe team's notes.\n")}),
    )
    .await;
    let rewritten = call(
        &g2,
        "read_note",
        json!({"path": "links.md", "hash": proposals_sha256("# Links\n\nSee [[plan]] first.\n")}),
    )
    .await
    .ok();
    assert_eq!(rewritten["content"], json!("# Links\n\nSee [[plan]] first.\n"));
    assert_eq!(persons.code(), "NOT_FOUND");
    // Every change to a team vault is a commit already: `vault git` is for local vaults.
    let e = crate::team::refused(
        team.g(0).run(&["vault", "git", "notes", "on"]),
        "INVALID_ARGUMENT",
    );
    assert!(e.contains("team vault"), "{e}");
    let limited = call(
        &g2,
        "get_note_history",
        json!({"path": "z/roadmap.md", "limit": 1}),
    )
    .await
    .ok();
    assert_eq!(
        (
            limited["entries"].as_array().unwrap().len(),
            &limited["truncated"]
        ),
        (1, &json!(true))
    );
    g1.close().await;
    g2.close().await;
    crate::team_invariants::hold(&team, &remote).await;
}

#[tokio::test]
async fn a_team_setting_made_by_an_admin_holds_on_every_gateway_and_a_reviewer_cannot_make_one() {
    let (team, _remote, _person) = team_with_vault(&["g1", "g2"]);
    let (_, token) = team.g(0).token("agent", "propose");
    let g2 = team.g(1).stdio(&token).await;
    let propose = |i: usize| {
        let g2 = &g2;
        async move {
            call(
                g2,
                "propose_new_note",
                json!({"path": format!("q/{i}.md"), "content": "# q\n", "reason": "quota"}),
            )
            .await
        }
    };
    assert!(matches!(propose(0).await, Reply::Ok(_)));
    // Set on g1: g2, already serving, holds it once it has heard.
    let said = team
        .g(0)
        .ok(&["team", "set", "limits.max_pending_per_credential", "1"]);
    assert!(said.contains("limits.max_pending_per_credential = 1"), "{said}");
    eventually("g2 holds the team's limit", || async {
        matches!(propose(1).await, Reply::Err(e) if e["code"] == json!("QUOTA_EXCEEDED"))
    })
    .await;
    // Not a limit, or not a value it takes: refused, nothing set.
    crate::team::refused(
        team.g(0).run(&["team", "set", "fetch_seconds", "1"]),
        "INVALID_ARGUMENT",
    );
    crate::team::refused(
        team.g(0)
            .run(&["team", "set", "limits.max_pending_per_credential", "many"]),
        "INVALID_ARGUMENT",
    );
    // A reviewer's database role may not change team settings.
    let admin = crate::team::pg::connect_retrying(&team.url);
    admin.query("CREATE ROLE reviewer_cy LOGIN", &[]).unwrap();
    team.g(0).ok(&["team", "grant-reviewer", "reviewer_cy"]);
    let rev = crate::team::gateway(team.root.path());
    let url = format!("postgres://reviewer_cy@127.0.0.1:{}/team", team.cluster.port);
    let secret = team.root.path().join("team.secret");
    let out = crate::team::join(&rev, &url, &secret, "cy", &["--role", "reviewer"]);
    assert_eq!(out.status.code(), Some(0));
    crate::team::refused(
        rev.run(&["team", "set", "limits.max_pending_per_credential", "500"]),
        "CAPABILITY_DENIED",
    );
    // Back to each gateway's own limit: `default` removes the team's.
    team.g(0)
        .ok(&["team", "set", "limits.max_pending_per_credential", "default"]);
    eventually("g2 drops the team's limit", || async {
        matches!(propose(2).await, Reply::Ok(_))
    })
    .await;
    // A team vault's PDF text and the team's default vault are team settings too: made on g1
    // with the commands a local home uses, held on g2.
    let more = team.root.path().join("more.git");
    git(
        team.root.path(),
        &["init", "--quiet", "--bare", "-b", "main", more.to_str().unwrap()],
    );
    let seed = team.root.path().join("more-seed");
    git(
        team.root.path(),
        &["clone", "--quiet", more.to_str().unwrap(), seed.to_str().unwrap()],
    );
    std::fs::write(seed.join("more.md"), "# More\n").unwrap();
    git(&seed, &["add", "-A"]);
    git(&seed, &["commit", "--quiet", "-m", "more"]);
    git(&seed, &["push", "--quiet", "origin", "main"]);
    team.g(0)
        .ok(&["vault", "add", "--remote", more.to_str().unwrap(), "--id", "more"]);
    let listed = |g: &crate::util::Env| -> Value {
        serde_json::from_str(&g.ok(&["vault", "list", "--json"])).unwrap()
    };
    let of = |list: &Value, id: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|v| v["id"] == json!(id))
            .cloned()
            .unwrap()
    };
    assert_eq!(of(&listed(team.g(1)), "more")["isDefault"], json!(false));
    let said = team.g(0).ok(&["vault", "set-default", "more"]);
    assert!(said.contains("default vault is now 'more'"), "{said}");
    team.g(0).ok(&["vault", "pdf-text", "notes", "on"]);
    let on_g2 = listed(team.g(1));
    assert_eq!(
        (
            &of(&on_g2, "more")["isDefault"],
            &of(&on_g2, "notes")["pdfText"],
            &of(&on_g2, "more")["pdfText"]
        ),
        (&json!(true), &json!(true), &json!(false)),
        "{on_g2}"
    );
    // A serving gateway reads from the team's default when a call names no vault.
    eventually("g2 reads from the team's default vault", || async {
        matches!(call(&g2, "read_note", json!({"path": "more.md"})).await, Reply::Ok(n) if n["content"] == json!("# More\n"))
    })
    .await;
    crate::team::refused(
        team.g(0).run(&["team", "set", "default_vault", "nowhere"]),
        "VAULT_NOT_FOUND",
    );
    crate::team::refused(
        team.g(0).run(&["team", "set", "pdf_text.notes", "maybe"]),
        "INVALID_ARGUMENT",
    );
    crate::team::refused(
        rev.run(&["vault", "pdf-text", "notes", "off"]),
        "CAPABILITY_DENIED",
    );

    let chain = team.chain(0);
    let sets = chain
        .iter()
        .filter(|r| r["event"] == json!("team.set") && r["gateway"] == json!("g1"))
        .count();
    assert_eq!(sets, 4, "{chain:?}");
    g2.close().await;
}

#[tokio::test]
async fn a_storm_of_applies_through_three_gateways_while_a_person_pushes_lands_each_once_and_keeps_every_push()
 {
    let (team, remote, person) = team_with_vault(&["g1", "g2", "g3"]);
    let (_, token) = team.g(0).token("agent", "full");
    let mut clients = Vec::new();
    for g in &team.gateways {
        clients.push(g.stdio(&token).await);
    }
    const EACH: usize = 6;
    // Each gateway's agent proposes its own notes, then applies them (retrying a busy vault with
    // the same key, as the contract says), while a person pushes edits to another note.
    let agent = |i: usize| {
        let c = &clients[i];
        async move {
            let mut applied = Vec::new();
            for n in 0..EACH {
                let p = call(
                    c,
                    "propose_new_note",
                    json!({"path": format!("storm/g{i}-{n}.md"), "content": format!("# {i} {n}\n"), "reason": "storm"}),
                )
                .await
                .ok();
                let key = format!("s{i}-{n}");
                let out = loop {
                    match call(c, "apply_proposal", apply_args(&p, &key)).await {
                        Reply::Ok(v) => break v,
                        Reply::Err(e) if e["code"] == json!("VAULT_BUSY") => continue,
                        Reply::Err(e) => panic!("g{i} apply {n}: {e}"),
                    }
                };
                applied.push((
                    p["id"].as_str().unwrap().to_owned(),
                    out["commit"].as_str().unwrap().to_owned(),
                ));
            }
            applied
        }
    };
    let pushes = async {
        let mut mine = Vec::new();
        for k in 0..4 {
            tokio::time::sleep(std::time::Duration::from_millis(150)).await;
            mine.push(person_pushes(&person, &format!("person {k}"), || {
                std::fs::write(person.join("welcome.md"), format!("# Welcome\n\nEdit {k}.\n")).unwrap();
            }));
        }
        mine
    };
    let (a0, a1, a2, mine) = tokio::join!(agent(0), agent(1), agent(2), pushes);

    // Every proposal landed once, in its own commit, and is applied; every person's push is kept.
    let log = git(
        &remote,
        &[
            "log",
            "--format=%H %(trailers:key=Vaultgate-Proposal,valueonly,separator=)",
            "main",
        ],
    );
    for (id, commit) in a0.iter().chain(&a1).chain(&a2) {
        let lines: Vec<&str> = log.lines().filter(|l| l.ends_with(id.as_str())).collect();
        assert_eq!(lines.len(), 1, "{id}: {lines:?}");
        assert!(
            lines[0].starts_with(commit.as_str()),
            "{id}: {lines:?} vs {commit}"
        );
    }
    assert_eq!(
        log.lines().filter(|l| l.trim().len() > 41).count(),
        3 * EACH,
        "{log}"
    );
    for c in &mine {
        assert!(
            std::process::Command::new("git")
                .arg("-C")
                .arg(&remote)
                .args(["merge-base", "--is-ancestor", c, "main"])
                .status()
                .unwrap()
                .success(),
            "the person's commit {c} was lost"
        );
    }
    assert_eq!(
        git(&remote, &["show", "main:welcome.md"]),
        "# Welcome\n\nEdit 3.\n"
    );
    let pending = call(&clients[1], "list_proposals", json!({})).await.ok();
    assert_eq!(pending["proposals"], json!([]), "{pending}");
    for g in &team.gateways {
        g.ok(&["audit", "verify"]);
    }
    for c in clients {
        c.close().await;
    }
    crate::team_invariants::hold(&team, &remote).await;
}

#[tokio::test]
async fn a_rewritten_remote_history_stops_applies_until_an_operator_resyncs_the_vault() {
    let (team, remote, person) = team_with_vault(&["g1", "g2"]);
    let (_, token) = team.g(0).token("agent", "full");
    let g2 = team.g(1).stdio(&token).await;
    let new_note = |path: &'static str| {
        let g2 = &g2;
        async move {
            call(
                g2,
                "propose_new_note",
                json!({"path": path, "content": "# n\n", "reason": "r"}),
            )
            .await
            .ok()
        }
    };
    let p = new_note("kept.md").await;
    let applied = call(&g2, "apply_proposal", apply_args(&p, "w1")).await.ok();

    // Someone rewrites the branch (the remote allowed it for a moment): the applied commit is gone.
    git(&remote, &["config", "receive.denyNonFastForwards", "false"]);
    git(&person, &["pull", "--quiet", "--ff-only"]);
    git(&person, &["reset", "--quiet", "--hard", "HEAD~1"]);
    std::fs::write(person.join("other.md"), "# Other\n").unwrap();
    git(&person, &["add", "other.md"]);
    git(&person, &["commit", "--quiet", "-m", "rewritten"]);
    git(&person, &["push", "--quiet", "--force", "origin", "main"]);
    git(&remote, &["config", "receive.denyNonFastForwards", "true"]);
    let rewritten = head(&remote);
    assert_ne!(
        git(
            &remote,
            &["merge-base", "main", applied["commit"].as_str().unwrap()]
        )
        .trim(),
        applied["commit"].as_str().unwrap()
    );

    // Every apply to the vault is refused, nothing is pushed, and the chain says so once.
    let q = new_note("after.md").await;
    assert_eq!(
        call(&g2, "apply_proposal", apply_args(&q, "w2")).await.code(),
        "VAULT_HISTORY_REWRITTEN"
    );
    let said = team.g(0).run(&[
        "apply",
        "--vault",
        "notes",
        "--only",
        q["id"].as_str().unwrap(),
        "--yes",
    ]);
    assert!(String::from_utf8_lossy(&said.stderr).contains("error[VAULT_HISTORY_REWRITTEN]"));
    assert_eq!(head(&remote), rewritten);
    let marks = team
        .chain(0)
        .iter()
        .filter(|r| r["event"] == json!("vault.history_rewritten"))
        .count();
    assert_eq!(marks, 1);

    let doctor = team.g(0).run(&["doctor"]);
    assert_eq!(doctor.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&doctor.stdout).contains("vault resync notes --yes"));

    // An operator accepts the new history: applies work again, on top of it, on every gateway.
    crate::team::refused(team.g(0).run(&["vault", "resync", "notes"]), "INVALID_ARGUMENT");
    let said = team.g(0).ok(&["vault", "resync", "notes", "--yes"]);
    assert!(said.contains(&rewritten), "{said}");
    let out = call(&g2, "apply_proposal", apply_args(&q, "w3")).await.ok();
    let commit = out["commit"].as_str().unwrap();
    assert_eq!(head(&remote), commit);
    assert_eq!(
        git(&remote, &["rev-parse", &format!("{commit}^")]).trim(),
        rewritten
    );
    let read = call(&g2, "read_note", json!({"path": "other.md"})).await.ok();
    assert_eq!(read["content"], json!("# Other\n"));
    let chain = team.chain(1);
    assert!(
        chain
            .iter()
            .any(|r| r["event"] == json!("vault.resync") && r["gateway"] == json!("g1"))
    );
    team.g(1).ok(&["audit", "verify"]);
    g2.close().await;
}

#[tokio::test]
async fn undo_and_redo_on_a_team_vault_push_one_commit_each_and_refuse_a_note_a_person_changed() {
    let (team, remote, person) = team_with_vault(&["g1", "g2"]);
    let (_, token) = team.g(0).token("agent", "full");
    let g1 = team.g(0).stdio(&token).await;
    let g2 = team.g(1).stdio(&token).await;
    let plan = call(&g1, "read_note", json!({"path": "z/plan.md"})).await.ok();
    let p = call(
        &g1,
        "propose_note_patch",
        json!({"path": "z/plan.md", "baseHash": plan["hash"], "content": "# Plan\n\nPatched.\n", "reason": "p"}),
    )
    .await
    .ok();
    let patched = call(&g1, "apply_proposal", apply_args(&p, "u1")).await.ok();
    let n = call(
        &g2,
        "propose_new_note",
        json!({"path": "ideas/n.md", "content": "# N\n", "reason": "n"}),
    )
    .await
    .ok();
    let created = call(&g2, "apply_proposal", apply_args(&n, "u2")).await.ok();

    // One history for the team: g1 sees g2's apply on top (once its fetch brought it).
    eventually("g1 sees g2's apply on top", || async {
        call(&g1, "history_status", json!({})).await.ok()["undoTop"] == created["historyEntryId"]
    })
    .await;
    let r = call(
        &g1,
        "history_undo",
        json!({"expectedHistoryEntryId": patched["historyEntryId"], "idempotencyKey": "x"}),
    )
    .await;
    assert_eq!(r.code(), "HISTORY_NOT_TOP");

    // Undone on g1: one commit removing the note, the status moves, the same key replays.
    let before = head(&remote);
    let undo = json!({"expectedHistoryEntryId": created["historyEntryId"], "idempotencyKey": "undo-1"});
    let s = call(&g1, "history_undo", undo.clone()).await.ok();
    assert_eq!(
        (&s["undoTop"], &s["redoTop"], &s["git"]),
        (
            &patched["historyEntryId"],
            &created["historyEntryId"],
            &json!("committed")
        ),
        "{s}"
    );
    let commit = head(&remote);
    assert_eq!(git(&remote, &["rev-parse", &format!("{commit}^")]).trim(), before);
    assert_eq!(
        git(&remote, &["diff", "--name-status", &before, &commit]).trim(),
        "D\tideas/n.md"
    );
    let msg = message(&remote, &commit);
    assert!(msg.starts_with("undo new ideas/n.md\n"), "{msg}");
    assert!(msg.contains("Vaultgate-Gateway: g1"), "{msg}");
    assert_eq!(call(&g1, "history_undo", undo).await.ok(), s);
    assert_eq!(head(&remote), commit);

    // Redone on g2: the note is back.
    let r = call(
        &g2,
        "history_redo",
        json!({"expectedHistoryEntryId": created["historyEntryId"], "idempotencyKey": "redo-1"}),
    )
    .await
    .ok();
    assert_eq!(r["undoTop"], created["historyEntryId"], "{r}");
    assert_eq!(git(&remote, &["show", "main:ideas/n.md"]), "# N\n");
    assert!(message(&remote, "main").starts_with("redo new ideas/n.md\n"));

    // Undo the new note again, then a person edits the patched note: its undo is stale.
    call(
        &g2,
        "history_undo",
        json!({"expectedHistoryEntryId": created["historyEntryId"], "idempotencyKey": "undo-2"}),
    )
    .await
    .ok();
    git(&person, &["pull", "--quiet", "--ff-only"]);
    std::fs::write(person.join("z/plan.md"), "# Plan\n\nA person's edit.\n").unwrap();
    git(&person, &["commit", "--quiet", "-am", "person"]);
    git(&person, &["push", "--quiet", "origin", "main"]);
    let persons = head(&remote);
    eventually("g2 sees the undo top stale", || async {
        call(&g2, "history_status", json!({})).await.ok()["staleTop"] == patched["historyEntryId"]
    })
    .await;
    let r = call(
        &g2,
        "history_undo",
        json!({"expectedHistoryEntryId": patched["historyEntryId"], "idempotencyKey": "undo-3"}),
    )
    .await;
    assert_eq!(r.code(), "HISTORY_STALE");
    assert_eq!(head(&remote), persons);
    for g in &team.gateways {
        g.ok(&["audit", "verify"]);
    }
    g1.close().await;
    g2.close().await;
    crate::team_invariants::hold(&team, &remote).await;
}

#[tokio::test]
async fn an_undo_whose_gateway_is_killed_before_or_after_its_push_is_done_once_and_its_retry_answers() {
    let (team, remote, person) = team_with_vault(&["g1", "g2"]);
    // A dead holder's lease blocks the vault until it expires: short here.
    team.g(0).ok(&["team", "set", "lease_seconds", "3"]);
    let (_, token) = team.g(0).token("agent", "full");
    let g2 = team.g(1).stdio(&token).await;
    for (i, step) in ["team_undo.after_intent", "team_undo.after_push"]
        .into_iter()
        .enumerate()
    {
        let path = format!("undone/k{i}.md");
        let p = call(
            &g2,
            "propose_new_note",
            json!({"path": path, "content": "# K\n", "reason": "r"}),
        )
        .await
        .ok();
        let applied = call(&g2, "apply_proposal", apply_args(&p, &format!("a{i}")))
            .await
            .ok();
        let before = head(&remote);
        let undo = json!({"expectedHistoryEntryId": applied["historyEntryId"], "idempotencyKey": format!("undo-{i}")});
        dies_calling(team.g(0), &token, step, "history_undo", undo.clone()).await;
        let after = head(&remote);
        if step == "team_undo.after_intent" {
            assert_eq!(after, before, "{step}: nothing pushed");
        } else {
            assert_eq!(git(&remote, &["rev-parse", &format!("{after}^")]).trim(), before);
            // Meanwhile, many commits that read like vaultgate's land on top of it: the retry
            // finds its undo however deep it is.
            git(&person, &["pull", "--quiet", "--ff-only"]);
            for n in 0..70 {
                let said = format!("a person's commit {n}\n\nVaultgate-Proposal: none");
                git(&person, &["commit", "--quiet", "--allow-empty", "-m", &said]);
            }
            git(&person, &["push", "--quiet", "origin", "main"]);
        }
        // The caller's retry through g2 (once the dead holder's lease ran out): the undo done
        // once, answered as if nothing had happened; the key replays it.
        let s = call(&g2, "history_undo", undo.clone()).await.ok();
        assert_eq!(
            (&s["redoTop"], &s["git"]),
            (&applied["historyEntryId"], &json!("committed")),
            "{step}: {s}"
        );
        let log = git(&remote, &["log", "--format=%s", &format!("{before}..main")]);
        assert_eq!(
            log.lines()
                .filter(|l| !l.starts_with("a person's commit"))
                .collect::<Vec<_>>(),
            [format!("undo new {path}")],
            "{step}: one undo commit"
        );
        assert_eq!(call(&g2, "history_undo", undo).await.ok(), s, "{step}");
        let tree = git(&remote, &["ls-tree", "-r", "--name-only", "main"]);
        assert!(
            !tree.lines().any(|l| l == path),
            "{step}: the note is still there"
        );
    }
    g2.close().await;
    crate::team_invariants::hold(&team, &remote).await;
}

#[test]
fn a_home_named_by_a_relative_path_clones_its_team_vaults_where_it_is() {
    let (team, _remote, _person) = team_with_vault(&["g1", "g2"]);
    // g2 has not cloned yet; its CLI runs from the home's parent with `--home home`.
    let g2 = team.g(1);
    std::fs::remove_dir_all(g2.home.join("vaults")).ok();
    let out = std::process::Command::new(crate::util::bin())
        .current_dir(g2.home.parent().unwrap())
        .args(["--home", "home", "vault", "list"])
        .env_remove("VAULTGATE_HOME")
        .env("USER", "tester")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("notes"));
    assert!(g2.home.join("vaults/notes/z/plan.md").is_file());
    assert!(!g2.home.join("vaults/.notes.cloning").exists());
}

#[tokio::test]
async fn a_push_whose_answer_is_lost_is_settled_by_reading_the_remote_and_lands_once() {
    let (team, remote, _person) = team_with_vault(&["g1"]);
    let (_, token) = team.g(0).token("agent", "full");
    // Every push of this gateway "loses" its answer after the remote took it.
    let g1 = stdio_dying_at(team.g(0), &token, "team_apply.push_unanswered").await;
    let p = call(
        &g1,
        "propose_new_note",
        json!({"path": "lost/answer.md", "content": "# A\n", "reason": "r"}),
    )
    .await
    .ok();
    let before = head(&remote);
    let out = call(&g1, "apply_proposal", apply_args(&p, "l1")).await.ok();
    assert_eq!(out["applied"], json!(true), "{out}");
    let landed = git(&remote, &["log", "--format=%H", &format!("{before}..main")]);
    assert_eq!(
        landed.lines().collect::<Vec<_>>(),
        [out["commit"].as_str().unwrap()]
    );
    let status: Value = serde_json::from_str(&team.g(0).ok(&["team", "status", "--json"])).unwrap();
    assert_eq!(status["vaults"][0]["pendingJobs"], json!(0));
    g1.close().await;
    crate::team_invariants::hold(&team, &remote).await;
}

#[tokio::test]
async fn a_team_vaults_proposals_page_through_sealed_cursors_on_any_gateway() {
    let (team, _remote, _person) = team_with_vault(&["g1", "g2"]);
    let (_, token) = team.g(0).token("agent", "propose");
    let g1 = team.g(0).stdio(&token).await;
    let g2 = team.g(1).stdio(&token).await;
    let mut made = Vec::new();
    for i in 0..5 {
        let p = call(
            &g1,
            "propose_new_note",
            json!({"path": format!("page/{i}.md"), "content": "# p\n", "reason": "page"}),
        )
        .await
        .ok();
        made.push(p["id"].as_str().unwrap().to_owned());
    }
    // Newest first, two at a time, every proposal exactly once (listed on another gateway).
    let mut seen = Vec::new();
    let mut cursor: Option<Value> = None;
    loop {
        let mut args = json!({"limit": 2});
        if let Some(c) = &cursor {
            args["cursor"] = c.clone();
        }
        let page = call(&g2, "list_proposals", args).await.ok();
        for p in page["proposals"].as_array().unwrap() {
            seen.push(p["id"].as_str().unwrap().to_owned());
        }
        match page.get("nextCursor") {
            Some(c) if !c.is_null() => cursor = Some(c.clone()),
            _ => break,
        }
    }
    made.reverse();
    assert_eq!(seen, made);
    // A cursor of g2 is refused on g1's list of another status (sealed to its listing).
    let first = call(&g2, "list_proposals", json!({"limit": 2})).await.ok();
    let r = call(
        &g1,
        "list_proposals",
        json!({"limit": 2, "status": "applied", "cursor": first["nextCursor"]}),
    )
    .await;
    assert_eq!(r.code(), "INVALID_ARGUMENT");
    g1.close().await;
    g2.close().await;
}

#[tokio::test]
async fn a_push_that_lands_after_its_gateway_gave_up_is_the_proposals_one_apply() {
    let (team, remote, person) = team_with_vault(&["g1"]);
    // The remote takes its time (a hook that waits), longer than this gateway waits for a push.
    let hook = remote.join("hooks/pre-receive");
    std::fs::write(&hook, "#!/bin/sh\nsleep 4\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    crate::http::edit_config(team.g(0), "limits", |t| {
        t.insert("apply_wait_seconds".into(), toml::Value::Integer(2));
    });
    let (_, token) = team.g(0).token("agent", "full");
    let g1 = team.g(0).stdio(&token).await;
    let p = call(
        &g1,
        "propose_new_note",
        json!({"path": "late/one.md", "content": "# Late\n", "reason": "r"}),
    )
    .await
    .ok();
    let before = head(&remote);
    let r = call(&g1, "apply_proposal", apply_args(&p, "late")).await;
    assert_eq!(r.code(), "VAULT_BUSY");
    // The push was taken after all.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while head(&remote) == before {
        assert!(std::time::Instant::now() < deadline, "the slow push never landed");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let landed = head(&remote);
    std::fs::remove_file(&hook).unwrap();
    // The caller's retry answers it: that commit is the apply, and nothing else is pushed.
    let out = call(&g1, "apply_proposal", apply_args(&p, "late")).await.ok();
    assert_eq!(
        (&out["commit"], &out["applied"]),
        (&json!(landed), &json!(true)),
        "{out}"
    );
    assert_eq!(
        git(&remote, &["log", "--format=%H", &format!("{before}..main")])
            .lines()
            .count(),
        1
    );
    assert_eq!(
        call(&g1, "get_proposal", json!({"id": p["id"]})).await.ok()["status"],
        json!("applied")
    );
    let again = call(&g1, "apply_proposal", apply_args(&p, "late")).await.ok();
    assert_eq!(
        (&again["commit"], &again["replayed"]),
        (&json!(landed), &json!(true))
    );

    // The same, but the job is gone from its row (as when a gateway's lock ended under it and
    // another dropped its job): a reject still finds the late commit and does not reject.
    std::fs::write(&hook, "#!/bin/sh\nsleep 4\n").unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let q = call(
        &g1,
        "propose_new_note",
        json!({"path": "late/two.md", "content": "# Two\n", "reason": "r"}),
    )
    .await
    .ok();
    let before = head(&remote);
    assert_eq!(
        call(&g1, "apply_proposal", apply_args(&q, "late-2")).await.code(),
        "VAULT_BUSY"
    );
    let db = crate::team::pg::connect_retrying(&team.url);
    db.query(
        "UPDATE vaultgate.proposals SET job = NULL, job_gateway = NULL, job_key = NULL WHERE id = $1",
        &[&q["id"].as_str().unwrap()],
    )
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while head(&remote) == before {
        assert!(std::time::Instant::now() < deadline, "the slow push never landed");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    std::fs::remove_file(&hook).unwrap();
    let landed = head(&remote);
    // Meanwhile, many commits that read like vaultgate's land on top of it: the late commit is
    // found however deep it is.
    git(&person, &["pull", "--quiet", "--ff-only"]);
    for n in 0..210 {
        git(
            &person,
            &[
                "commit",
                "--quiet",
                "--allow-empty",
                "-m",
                &format!("a person's commit {n}\n\nVaultgate-Proposal: none"),
            ],
        );
    }
    git(&person, &["push", "--quiet", "origin", "main"]);
    let r = call(&g1, "reject_proposal", json!({"id": q["id"], "reason": "late"})).await;
    assert_eq!(r.code(), "PROPOSAL_ALREADY_APPLIED");
    assert_eq!(
        call(&g1, "get_proposal", json!({"id": q["id"]})).await.ok()["status"],
        json!("applied")
    );
    assert_eq!(
        git(&remote, &["log", "--format=%H", &format!("{before}..{landed}")])
            .lines()
            .count(),
        1
    );
    g1.close().await;
    crate::team_invariants::hold(&team, &remote).await;
}
