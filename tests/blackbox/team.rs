//! docs/contract.md#team-mode, the part that works today: gateways on one PostgreSQL (a private
//! cluster this binary starts) share credentials and one audit chain. A token issued on one
//! gateway works on every one; a revocation or tier change on any holds for the next request
//! everywhere (stdio, an open HTTP session); a reviewer gateway's database role cannot administer;
//! the database stopped refuses every call and calls work again once it is back.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::http::{Server, bearer, open_session, post, refusal, reply, request, unauthorized};
use crate::util::{Env, Reply, bin, call};

#[path = "../../teamstate/tests/common/mod.rs"]
pub(crate) mod pg;

/// A gateway's home (no vault: a team's vaults live in a git remote).
pub(crate) fn gateway(root: &std::path::Path) -> Env {
    let tmp = tempfile::tempdir_in(root).unwrap();
    let home = tmp.path().join("home");
    let vault = tmp.path().join("no-vault");
    Env { tmp, home, vault }
}

/// `team join` of `g` with `secret`, as `name`, plus `extra` (a role): its output.
pub(crate) fn join(
    g: &Env,
    url: &str,
    secret: &std::path::Path,
    name: &str,
    extra: &[&str],
) -> std::process::Output {
    let mut args = vec![
        "team",
        "join",
        "--database",
        url,
        "--secret-file",
        secret.to_str().unwrap(),
        "--name",
        name,
    ];
    args.extend_from_slice(extra);
    g.run(&args)
}

/// A team on a fresh database: g1 (admin, from `team init`), and the others joined with the
/// secret g1 exported.
pub(crate) struct Team {
    pub(crate) cluster: pg::Cluster,
    pub(crate) url: String,
    pub(crate) root: tempfile::TempDir,
    pub(crate) gateways: Vec<Env>,
}

impl Team {
    pub(crate) fn start(names: &[&str]) -> Team {
        let cluster = pg::Cluster::start();
        drop(cluster.store("team"));
        let url = format!("postgres://postgres@127.0.0.1:{}/team", cluster.port);
        let root = tempfile::tempdir().unwrap();
        let secret = root.path().join("team.secret");
        let mut gateways = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let g = gateway(root.path());
            if i == 0 {
                let said = g.ok(&["team", "init", "--database", &url, "--name", name]);
                assert!(said.contains(&format!("admin gateway '{name}'")), "{said}");
                g.ok(&["team", "secret", "export", "--out", secret.to_str().unwrap()]);
            } else {
                assert_eq!(join(&g, &url, &secret, name, &[]).status.code(), Some(0));
            }
            gateways.push(g);
        }
        Team {
            cluster,
            url,
            root,
            gateways,
        }
    }

    pub(crate) fn g(&self, i: usize) -> &Env {
        &self.gateways[i]
    }

    /// The team's chain, as `audit tail` on gateway `i` shows it.
    pub(crate) fn chain(&self, i: usize) -> Vec<Value> {
        serde_json::from_str(&self.g(i).ok(&["audit", "tail", "-n", "10000", "--json"])).unwrap()
    }
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Exit 1 and the contract's code in the error line.
pub(crate) fn refused(out: std::process::Output, code: &str) -> String {
    let e = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{e}");
    assert!(e.contains(&format!("error[{code}]")), "wanted {code}: {e}");
    e
}

fn tool_call(id: i64, tool: &str) -> Value {
    request(id, "tools/call", json!({"name": tool, "arguments": {}}))
}

#[tokio::test]
async fn a_credential_issued_on_one_gateway_works_on_all_and_its_revocation_holds_on_all_at_the_next_request()
{
    let team = Team::start(&["g1", "g2", "g3"]);
    let (id, token) = team.g(0).token("agent", "read");

    // Issued on g1: a stdio session on g2 and an HTTP session on g3 authenticate with it.
    let on_g2 = team.g(1).stdio(&token).await;
    let v = call(&on_g2, "vault_list", json!({})).await.ok();
    assert_eq!(v["vaults"], json!([]), "{v}");
    let srv = Server::start(team.g(2));
    let auth = bearer(&token);
    let sid = open_session(&srv, &auth, "2025-06-18").await;
    let h = [
        ("Mcp-Session-Id", sid.as_str()),
        ("MCP-Protocol-Version", "2025-06-18"),
    ];
    let v = reply(post(&srv, Some(&auth), &h, &tool_call(2, "vault_list")).await, 2).await;
    assert_eq!(v["result"]["isError"], json!(false), "{v}");
    // Every gateway lists it, from the team's database.
    for g in &team.gateways {
        assert!(g.ok(&["token", "list"]).contains(&id));
    }

    // A tier changed on g3 is the tier of g2's next call.
    team.g(2).ok(&["token", "set-tier", "agent", "propose"]);
    call(&on_g2, "vault_list", json!({})).await.ok();
    let last = team.chain(0).pop().unwrap();
    assert_eq!(
        (last["gateway"].as_str(), last["actor"]["tier"].as_str()),
        (Some("g2"), Some("propose")),
        "{last}"
    );

    // Revoked on g2: the next request of g2's open stdio session, of g3's open HTTP session, and
    // a new stdio server on g1 are refused.
    team.g(1).ok(&["token", "revoke", "agent"]);
    assert_eq!(
        call(&on_g2, "vault_list", json!({})).await.code(),
        "CREDENTIAL_REVOKED"
    );
    let resp = post(&srv, Some(&auth), &h, &tool_call(3, "vault_list")).await;
    assert_eq!(unauthorized(resp).await, "CREDENTIAL_REVOKED");
    let out = Command::new(bin())
        .args(["--home", team.g(0).home.to_str().unwrap(), "stdio"])
        .env("VAULTGATE_TOKEN", &token)
        .env_remove("VAULTGATE_HOME")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    refused(out, "CREDENTIAL_REVOKED");

    // One chain, with every gateway's records, that every gateway verifies.
    let chain = team.chain(1);
    let by = |event: &str, gw: &str| {
        chain
            .iter()
            .any(|r| r["event"] == json!(event) && r["gateway"] == json!(gw))
    };
    assert!(by("team.init", "g1") && by("team.join", "g2") && by("team.join", "g3"));
    assert!(by("credential.issue", "g1") && by("credential.set_tier", "g3"));
    assert!(by("credential.revoke", "g2") && by("tool_call", "g2") && by("tool_call", "g3"));
    let seqs: Vec<u64> = chain.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "gapless");
    for g in &team.gateways {
        let said = g.ok(&["audit", "verify"]);
        assert!(said.starts_with("audit chain ok: "), "{said}");
    }

    // Exported, it verifies offline; one flipped byte is named by its seq.
    let export = team.root.path().join("chain.jsonl");
    team.g(2)
        .ok(&["audit", "export", "--out", export.to_str().unwrap()]);
    let said = team
        .g(0)
        .ok(&["audit", "verify", "--file", export.to_str().unwrap()]);
    assert!(said.contains("export ok"), "{said}");
    let text = std::fs::read_to_string(&export).unwrap();
    // One byte of the third record's time: "ts":"2026-… becomes "ts":"3026-….
    let third = text.lines().nth(2).unwrap();
    assert!(third.contains("\"seq\":3,"), "{third}");
    let flipped = text.replacen(third, &third.replacen("\"ts\":\"2", "\"ts\":\"3", 1), 1);
    assert_eq!(flipped.len(), text.len());
    assert_ne!(flipped, text);
    let bad = team.root.path().join("flipped.jsonl");
    std::fs::write(&bad, flipped).unwrap();
    // A broken chain is the log's failure: AUDIT_UNAVAILABLE, as for a home's own log.
    let e = refused(
        team.g(0)
            .run(&["audit", "verify", "--file", bad.to_str().unwrap()]),
        "AUDIT_UNAVAILABLE",
    );
    assert!(e.contains("seq 3") && e.contains("altered"), "{e}");
    on_g2.close().await;
}

#[test]
fn a_reviewer_gateway_uses_the_teams_credentials_but_its_database_role_cannot_administer_them() {
    let team = Team::start(&["g1"]);
    let admin = pg::connect_retrying(&team.url);
    admin.query("CREATE ROLE reviewer_ana LOGIN", &[]).unwrap();
    team.g(0).ok(&["team", "grant-reviewer", "reviewer_ana"]);
    let secret = team.root.path().join("team.secret");
    let rev = gateway(team.root.path());
    let url = format!("postgres://reviewer_ana@127.0.0.1:{}/team", team.cluster.port);
    let out = join(&rev, &url, &secret, "ana", &["--role", "reviewer"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let status: Value = serde_json::from_str(&rev.ok(&["team", "status", "--json"])).unwrap();
    assert_eq!(
        status["gateway"],
        json!({"name": "ana", "role": "reviewer"}),
        "{status}"
    );

    // The database refuses what only admins may do: CAPABILITY_DENIED, exit 1, nothing written.
    let before = team.chain(0).len();
    refused(
        rev.run(&["token", "issue", "--name", "sneaky", "--tier", "read"]),
        "CAPABILITY_DENIED",
    );
    let (_, token) = team.g(0).token("agent", "read");
    refused(rev.run(&["token", "revoke", "agent"]), "CAPABILITY_DENIED");
    refused(
        rev.run(&["token", "set-tier", "agent", "full", "--yes"]),
        "CAPABILITY_DENIED",
    );
    admin.query("CREATE ROLE reviewer_bo LOGIN", &[]).unwrap();
    refused(
        rev.run(&["team", "grant-reviewer", "reviewer_bo"]),
        "CAPABILITY_DENIED",
    );
    let names: Vec<String> = serde_json::from_str::<Vec<Value>>(&team.g(0).ok(&["token", "list", "--json"]))
        .unwrap()
        .iter()
        .map(|c| format!("{}:{}", c["name"].as_str().unwrap(), c["tier"].as_str().unwrap()))
        .collect();
    assert_eq!(names, ["agent:read"]);
    // The admin's issue is the one record added (plus none of the refused changes).
    let chain = team.chain(0);
    assert_eq!(chain.len(), before + 1, "{:?}", &chain[before..]);

    // The team's token works on the reviewer's gateway; its records are the reviewer's.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = rev.stdio(&token).await;
        call(&c, "vault_list", json!({})).await.ok();
        c.close().await;
    });
    let last = team.chain(0).pop().unwrap();
    assert_eq!(last["gateway"], json!("ana"), "{last}");
    rev.ok(&["audit", "verify"]);

    // Removing gateways is an admin's: the reviewer cannot; an admin cannot remove itself; once
    // removed, the reviewer's gateway no longer opens (its role's records would be refused).
    refused(rev.run(&["team", "remove", "g1"]), "CAPABILITY_DENIED");
    refused(team.g(0).run(&["team", "remove", "g1"]), "INVALID_ARGUMENT");
    team.g(0).ok(&["team", "remove", "ana"]);
    let e = refused(rev.run(&["token", "list"]), "INVALID_ARGUMENT");
    assert!(e.contains("no gateway named 'ana'"), "{e}");
    let last = team.chain(0).pop().unwrap();
    assert_eq!(
        (&last["event"], &last["target"], &last["gateway"]),
        (&json!("team.remove"), &json!("ana"), &json!("g1"))
    );
}

#[tokio::test]
async fn the_database_stopped_refuses_every_call_as_audit_unavailable_and_calls_work_once_it_is_back() {
    let mut team = Team::start(&["g1", "g2"]);
    let (_, token) = team.g(0).token("agent", "read");
    let on_g2 = team.g(1).stdio(&token).await;
    call(&on_g2, "vault_list", json!({})).await.ok();
    let srv = Server::start(team.g(0));
    let auth = bearer(&token);
    let sid = open_session(&srv, &auth, "2025-06-18").await;
    let h = [
        ("Mcp-Session-Id", sid.as_str()),
        ("MCP-Protocol-Version", "2025-06-18"),
    ];
    let before = team.chain(0).len();

    team.cluster.stop();
    assert_eq!(
        call(&on_g2, "vault_list", json!({})).await.code(),
        "AUDIT_UNAVAILABLE"
    );
    let resp = post(&srv, Some(&auth), &h, &tool_call(2, "vault_list")).await;
    assert_eq!(
        resp.headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned()),
        Some("1".to_owned())
    );
    assert_eq!(refusal(resp, 503).await, "AUDIT_UNAVAILABLE");
    // The CLI too: nothing is issued without the team.
    refused(
        team.g(0)
            .run(&["token", "issue", "--name", "late", "--tier", "read"]),
        "AUDIT_UNAVAILABLE",
    );

    team.cluster.start_again();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match call(&on_g2, "vault_list", json!({})).await {
            Reply::Ok(_) => break,
            Reply::Err(e) => {
                assert_eq!(e["code"], "AUDIT_UNAVAILABLE", "{e}");
                assert!(Instant::now() < deadline, "no call worked after the restart");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    let v = reply(post(&srv, Some(&auth), &h, &tool_call(3, "vault_list")).await, 3).await;
    assert_eq!(v["result"]["isError"], json!(false), "{v}");
    // Nothing was recorded, or issued, while it was down; the chain goes on and verifies.
    let chain = team.chain(0);
    assert!(chain.iter().all(|r| r["actor"]["name"] != json!("late")));
    assert!(!team.g(0).ok(&["token", "list"]).contains("late"));
    // After the restart: the two calls that worked, and perhaps refusals of the retries that
    // came while a gateway's connections were still being opened again (recorded, since the
    // chain was back by then).
    let (calls, others): (Vec<&Value>, Vec<&Value>) = chain[before..]
        .iter()
        .partition(|r| r["event"] == json!("tool_call"));
    assert_eq!(calls.len(), 2, "{:?}", &chain[before..]);
    assert!(
        others
            .iter()
            .all(|r| r["event"] == json!("auth") && r["code"] == json!("AUDIT_UNAVAILABLE")),
        "{others:?}"
    );
    team.g(1).ok(&["audit", "verify"]);
    on_g2.close().await;
}

#[test]
fn team_setup_refuses_a_used_home_a_wrong_secret_a_remote_host_and_folder_vaults() {
    let team = Team::start(&["g1"]);
    // A home with a vault is not put in team mode; it is left as it was.
    let used = Env::new();
    let config = std::fs::read(used.home.join("gateway.toml")).unwrap();
    refused(
        used.run(&["team", "init", "--database", &team.url]),
        "INVALID_ARGUMENT",
    );
    assert_eq!(std::fs::read(used.home.join("gateway.toml")).unwrap(), config);

    // A secret that is not the team's: refused, and the home is not made.
    let wrong = team.root.path().join("wrong.secret");
    std::fs::write(&wrong, [7u8; 32]).unwrap();
    let g = gateway(team.root.path());
    let e = refused(join(&g, &team.url, &wrong, "g2", &[]), "INVALID_ARGUMENT");
    assert!(e.contains("not the team's"), "{e}");
    assert!(!g.home.join("gateway.toml").exists());
    // A secret file that never ends is refused unread (bounded, not read to the end).
    let e = refused(
        join(&g, &team.url, std::path::Path::new("/dev/zero"), "g2", &[]),
        "INVALID_ARGUMENT",
    );
    assert!(e.contains("is not a team secret"), "{e}");

    // A second team in the same database: refused (join it instead).
    let other = gateway(team.root.path());
    let e = refused(
        other.run(&["team", "init", "--database", &team.url, "--name", "x"]),
        "INVALID_ARGUMENT",
    );
    assert!(e.contains("team join"), "{e}");

    // The database only on this machine: connections are not encrypted.
    let e = refused(
        other.run(&[
            "team",
            "init",
            "--database",
            "postgres://u:hunter2@db.example.com/team",
        ]),
        "INVALID_ARGUMENT",
    );
    assert!(e.contains("loopback") && !e.contains("hunter2"), "{e}");

    // A team gateway has no folder vaults; its status never shows a password.
    let folder = team.root.path().join("notes");
    std::fs::create_dir_all(&folder).unwrap();
    refused(
        team.g(0).run(&["vault", "add", folder.to_str().unwrap()]),
        "INVALID_ARGUMENT",
    );
    let status = team.g(0).ok(&["team", "status"]);
    assert!(
        status.contains("g1 (admin)") && status.contains("reachable"),
        "{status}"
    );
    let toml = std::fs::read_to_string(team.g(0).home.join("gateway.toml")).unwrap();
    assert!(toml.contains("[team]") && toml.contains(&team.url), "{toml}");
}

#[tokio::test]
async fn an_open_stream_of_a_credential_revoked_on_another_gateway_closes_at_once() {
    let team = Team::start(&["g1", "g2"]);
    let (_, token) = team.g(0).token("listener", "read");
    let (_, other) = team.g(0).token("bystander", "read");
    let srv = Server::start(team.g(1));
    // Two sessions on g2, each with its standalone SSE stream open (a client listening).
    let mut streams = Vec::new();
    for t in [&token, &other] {
        let auth = bearer(t);
        let sid = open_session(&srv, &auth, "2025-06-18").await;
        let resp = reqwest::Client::new()
            .get(srv.url())
            .header("Authorization", &auth)
            .header("Accept", "text/event-stream")
            .header("Mcp-Session-Id", &sid)
            .header("MCP-Protocol-Version", "2025-06-18")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        streams.push(resp);
    }
    let mut bystander = streams.pop().unwrap();
    let mut revoked = streams.pop().unwrap();

    // Revoked on g1: g2 hears it from the database and ends that session's stream, well before
    // any sweep (15 s) or keep-alive would.
    let began = Instant::now();
    team.g(0).ok(&["token", "revoke", "listener"]);
    // Within 10 s of the revoke: before the watcher's first sweep (15 s after the server
    // started) could close it, so only the announcement can.
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while let Ok(Some(_)) = revoked.chunk().await {}
    })
    .await;
    assert!(
        ended.is_ok(),
        "the revoked credential's stream is still open after 10 s"
    );
    assert!(began.elapsed() < Duration::from_secs(10));
    // The other credential's stream stays open.
    let still = tokio::time::timeout(Duration::from_millis(500), bystander.chunk()).await;
    assert!(
        still.is_err() || matches!(still, Ok(Ok(Some(_)))),
        "the bystander's stream ended: {still:?}"
    );
}

/// `git …` in `dir`, as a person runs it (a fixed identity); asserts success, answers stdout.
pub(crate) fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "Person")
        .env("GIT_AUTHOR_EMAIL", "person@example.com")
        .env("GIT_COMMITTER_NAME", "Person")
        .env("GIT_COMMITTER_EMAIL", "person@example.com")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether `newer` is `older` or descends from it in the repository at `dir`.
pub(crate) fn is_ancestor(dir: &std::path::Path, older: &str, newer: &str) -> bool {
    Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["merge-base", "--is-ancestor", older, newer])
        .status()
        .unwrap()
        .success()
}

/// A bare remote that only moves forward, and a person's clone of it with two notes pushed.
pub(crate) fn remote_with_notes(root: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let remote = root.join("notes.git");
    let person = root.join("person");
    git(
        root,
        &[
            "init",
            "--quiet",
            "--bare",
            "-b",
            "main",
            remote.to_str().unwrap(),
        ],
    );
    git(&remote, &["config", "receive.denyNonFastForwards", "true"]);
    git(&remote, &["config", "receive.denyDeletes", "true"]);
    git(
        root,
        &[
            "clone",
            "--quiet",
            remote.to_str().unwrap(),
            person.to_str().unwrap(),
        ],
    );
    std::fs::create_dir_all(person.join("z")).unwrap();
    std::fs::write(person.join("welcome.md"), "# Welcome\n\nThe team's notes.\n").unwrap();
    std::fs::write(
        person.join("z/plan.md"),
        "---\ntitle: Plan\n---\n# Plan\n\nShip the first version.\n",
    )
    .unwrap();
    git(&person, &["add", "-A"]);
    git(&person, &["commit", "--quiet", "-m", "notes"]);
    git(&person, &["push", "--quiet", "origin", "main"]);
    (remote, person)
}

/// Waits (at most 15 s) until `check` holds, calling it again every 200 ms.
pub(crate) async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(15);
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within 15 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_team_vault_added_on_one_gateway_is_read_on_every_gateway_and_a_persons_push_reaches_them() {
    let team = Team::start(&["g1", "g2"]);
    let (remote, person) = remote_with_notes(team.root.path());
    // g2 fetches every second (the default is 15 s).
    crate::http::edit_config(team.g(1), "team", |t| {
        t.insert("fetch_seconds".into(), toml::Value::Integer(1));
    });
    let (_, token) = team.g(0).token("agent", "propose");
    // g2 is serving before the vault exists: it hears of it from the database.
    let on_g2 = team.g(1).stdio(&token).await;
    assert_eq!(
        call(&on_g2, "vault_list", json!({})).await.ok()["vaults"],
        json!([])
    );

    let said = team.g(0).ok(&[
        "vault",
        "add",
        "--remote",
        remote.to_str().unwrap(),
        "--id",
        "notes",
        "--name",
        "Team notes",
    ]);
    assert!(said.contains("added team vault 'notes'"), "{said}");
    eventually("g2 lists the new vault", || async {
        call(&on_g2, "vault_list", json!({})).await.ok()["vaults"]
            .as_array()
            .is_some_and(|v| v.len() == 1 && v[0]["id"] == json!("notes"))
    })
    .await;
    let note = call(&on_g2, "read_note", json!({"path": "z/plan.md"})).await.ok();
    assert!(
        note["content"]
            .as_str()
            .unwrap()
            .contains("Ship the first version."),
        "{note}"
    );
    // Each gateway reads its own clone; its status shows the remote's head and its own.
    assert!(team.g(1).home.join("vaults/notes/z/plan.md").is_file());
    let status: Value = serde_json::from_str(&team.g(1).ok(&["team", "status", "--json"])).unwrap();
    let head = git(&remote, &["rev-parse", "main"]).trim().to_owned();
    assert_eq!(
        status["vaults"],
        json!([{"vault": "notes", "applier": null, "remoteHead": head, "localHead": head, "pendingJobs": 0, "leftJobs": 0,
               "handedCalls": {"queued": 0, "running": 0}}])
    );
    assert!(team.g(0).ok(&["vault", "list"]).contains("notes"));

    let seen_at = |status: &Value| {
        status["gateways"]
            .as_array()
            .and_then(|g| g.iter().find(|g| g["name"] == json!("g2")))
            .map(|g| g["lastSeen"].as_str().unwrap().to_owned())
    };
    let first_seen = seen_at(&status).expect("g2 is listed");

    // A person's push reaches g2's reads and its index within a few seconds.
    std::fs::write(
        person.join("z/plan.md"),
        "---\ntitle: Plan\n---\n# Plan\n\nShip the second version, with zebras.\n",
    )
    .unwrap();
    git(&person, &["commit", "--quiet", "-am", "second"]);
    git(&person, &["push", "--quiet", "origin", "main"]);
    eventually("g2 reads the pushed note", || async {
        call(&on_g2, "read_note", json!({"path": "z/plan.md"})).await.ok()["content"]
            .as_str()
            .is_some_and(|c| c.contains("zebras"))
    })
    .await;
    eventually("g2 finds the pushed words", || async {
        call(&on_g2, "search_note_content", json!({"query": "zebras"}))
            .await
            .ok()["hits"]
            .as_array()
            .is_some_and(|h| h.len() == 1)
    })
    .await;

    // A serving gateway notes itself alive at each round of fetching.
    eventually("g2 is seen again", || async {
        let status: Value = serde_json::from_str(&team.g(0).ok(&["team", "status", "--json"])).unwrap();
        seen_at(&status).is_some_and(|at| at > first_seen)
    })
    .await;

    // A team vault has no inbox folder in its clone (proposals live in the database).
    assert!(!team.g(1).home.join("vaults/notes/inbox").exists());

    // The clone is a cache: deleted, it is cloned again.
    std::fs::remove_dir_all(team.g(0).home.join("vaults/notes")).unwrap();
    assert!(team.g(0).ok(&["vault", "list"]).contains("notes"));
    assert!(team.g(0).home.join("vaults/notes/z/plan.md").is_file());

    // The registration is recorded once, by g1; removed on g1, g2 stops listing it.
    let chain = team.chain(1);
    let adds: Vec<&Value> = chain
        .iter()
        .filter(|r| r["event"] == json!("vault.add"))
        .collect();
    assert_eq!(adds.len(), 1);
    assert_eq!(
        (&adds[0]["gateway"], &adds[0]["vault"]),
        (&json!("g1"), &json!("notes"))
    );
    team.g(0).ok(&["vault", "remove", "notes"]);
    eventually("g2 forgets the removed vault", || async {
        call(&on_g2, "vault_list", json!({})).await.ok()["vaults"] == json!([])
    })
    .await;
    // The remote is untouched.
    assert!(git(&remote, &["log", "--oneline", "main"]).lines().count() == 2);
    on_g2.close().await;
}

#[test]
fn a_team_vault_refuses_transports_and_options_it_must_not_run_and_a_branch_the_remote_lacks() {
    let team = Team::start(&["g1"]);
    let (remote, _) = remote_with_notes(team.root.path());
    let canary = team.root.path().join("pwned");
    let hostile = format!("ext::sh -c touch% {}", canary.display());
    for (url, why) in [
        (hostile.as_str(), "remote: no leading '-', spaces"),
        ("ext::touch%x", "transport helper"),
        ("fd::17", "transport helper"),
        ("--upload-pack=touch /tmp/x", "leading '-'"),
        ("http://example.com/notes.git", "only the https, ssh and file"),
        ("git://example.com/notes.git", "only the https, ssh and file"),
    ] {
        let arg = format!("--remote={url}");
        let e = refused(
            team.g(0).run(&["vault", "add", &arg, "--id", "x"]),
            "INVALID_ARGUMENT",
        );
        assert!(e.contains(why), "{url}: {e}");
    }
    let e = refused(
        team.g(0).run(&[
            "vault",
            "add",
            "--remote",
            remote.to_str().unwrap(),
            "--id",
            "x",
            "--branch",
            "nope",
        ]),
        "INVALID_ARGUMENT",
    );
    assert!(e.contains("no branch 'nope'"), "{e}");
    refused(
        team.g(0).run(&[
            "vault",
            "add",
            "--remote",
            remote.to_str().unwrap(),
            "--id",
            "x",
            "--branch=-q",
        ]),
        "INVALID_ARGUMENT",
    );
    assert!(!canary.exists());
    // Nothing was registered.
    assert!(team.chain(0).iter().all(|r| r["event"] != json!("vault.add")));
    assert!(
        team.g(0)
            .ok(&["vault", "list"])
            .lines()
            .all(|l| !l.starts_with("x\t"))
    );
    // A row written behind vaultgate's back whose id is a path is never served or cloned.
    pg::connect_retrying(&team.url)
        .query(
            "INSERT INTO vaultgate.vaults (id, name, remote, branch) VALUES ($1, 'x', $2, 'main')",
            &[&"../escaped", &remote.to_str().unwrap()],
        )
        .unwrap();
    assert!(!team.g(0).ok(&["vault", "list"]).contains("escaped"));
    assert!(!team.g(0).home.join("escaped").exists());

    // A remote that tracks files in vaultgate's own folder cannot write them into the clone.
    let person = team.root.path().join("person");
    std::fs::create_dir_all(person.join(".vaultgate")).unwrap();
    std::fs::write(person.join(".vaultgate/index.sqlite"), "not an index").unwrap();
    std::fs::write(person.join(".vaultgate/planted.md"), "# planted\n").unwrap();
    git(&person, &["add", "-f", ".vaultgate"]);
    git(&person, &["commit", "--quiet", "-m", "plant"]);
    git(&person, &["push", "--quiet", "origin", "main"]);
    team.g(0).ok(&[
        "vault",
        "add",
        "--remote",
        remote.to_str().unwrap(),
        "--id",
        "planted",
    ]);
    let clone = team.g(0).home.join("vaults/planted");
    assert!(clone.join("z/plan.md").is_file());
    assert!(!clone.join(".vaultgate/planted.md").exists());
    assert_ne!(
        std::fs::read(clone.join(".vaultgate/index.sqlite"))
            .ok()
            .as_deref(),
        Some(&b"not an index"[..])
    );
}

#[test]
fn doctor_tells_a_clone_behind_from_a_remote_whose_history_was_rewritten_and_the_clone_is_kept() {
    let mut team = Team::start(&["g1"]);
    let (remote, person) = remote_with_notes(team.root.path());
    // This remote lets a person rewrite history (its protection is off): the clone must not follow.
    git(&remote, &["config", "receive.denyNonFastForwards", "false"]);
    let g = team.g(0);
    g.ok(&[
        "vault",
        "add",
        "--remote",
        remote.to_str().unwrap(),
        "--id",
        "notes",
    ]);
    let doctor = |g: &Env| {
        let out = g.run(&["doctor"]);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, said) = doctor(g);
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.contains("vault notes: clone up to date") && said.contains("team database"),
        "{said}"
    );
    assert!(!said.contains("no vault is registered"), "{said}");

    std::fs::write(person.join("welcome.md"), "# Welcome\n\nMoved on.\n").unwrap();
    git(&person, &["commit", "--quiet", "-am", "on"]);
    git(&person, &["push", "--quiet", "origin", "main"]);
    let (code, said) = doctor(g);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("vault notes: clone behind its remote"), "{said}");
    g.ok(&["vault", "list"]); // fetches: up to date again
    assert!(doctor(g).1.contains("clone up to date"));

    // A rewritten branch: fetched, never followed; doctor fails naming it.
    git(&person, &["commit", "--quiet", "--amend", "-m", "rewritten"]);
    git(&person, &["push", "--quiet", "--force", "origin", "main"]);
    g.ok(&["vault", "list"]);
    let (code, said) = doctor(g);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("history was rewritten"), "{said}");
    assert_eq!(
        std::fs::read_to_string(g.home.join("vaults/notes/welcome.md")).unwrap(),
        "# Welcome\n\nMoved on.\n"
    );

    // The database gone: doctor says so and fails.
    team.cluster.stop();
    let (code, said) = doctor(team.g(0));
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("fail  team database"), "{said}");
}

#[tokio::test]
async fn a_local_home_imported_into_a_team_keeps_its_tokens_and_its_chain_names_where_the_home_ended() {
    let cluster = pg::Cluster::start();
    drop(cluster.store("team"));
    let url = format!("postgres://postgres@127.0.0.1:{}/team", cluster.port);
    let home = Env::new();
    let (id, token) = home.token("agent", "read");
    let (_, revoked) = home.token("old", "read");
    home.ok(&["token", "revoke", "old"]);
    let c = home.stdio(&token).await;
    call(&c, "read_note", json!({"path": "welcome.md"})).await.ok();
    c.close().await;

    // A pending proposal is not moved: refused, and nothing changes anywhere.
    let (_, writer) = home.token("writer", "propose");
    let w = home.stdio(&writer).await;
    let proposal = crate::util::propose_new(&w, "z/new.md", "# New\n", "try").await;
    w.close().await;
    let before = std::fs::read(home.home.join("gateway.toml")).unwrap();
    let e = refused(
        home.run(&["team", "init", "--import", "--database", &url, "--name", "g1"]),
        "INVALID_ARGUMENT",
    );
    assert!(e.contains("1 proposals are pending"), "{e}");
    assert_eq!(std::fs::read(home.home.join("gateway.toml")).unwrap(), before);
    home.ok(&[
        "inbox",
        "reject",
        proposal["id"].as_str().unwrap(),
        "--reason",
        "not now",
    ]);

    let local_head = crate::util::audit_lines(&home).pop().unwrap();
    let said = home.ok(&["team", "init", "--import", "--database", &url, "--name", "g1"]);
    assert!(
        said.contains("3 credentials moved in") && said.contains("vaults basic"),
        "{said}"
    );

    // The same token works on the imported home and on a gateway that joins; the revoked one
    // stays revoked.
    let c = home.stdio(&token).await;
    assert_eq!(call(&c, "vault_list", json!({})).await.ok()["vaults"], json!([]));
    c.close().await;
    let secret = home.tmp.path().join("team.secret");
    home.ok(&["team", "secret", "export", "--out", secret.to_str().unwrap()]);
    let root = tempfile::tempdir().unwrap();
    let g2 = gateway(root.path());
    let out = join(&g2, &url, &secret, "g2", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let c = g2.stdio(&token).await;
    call(&c, "vault_list", json!({})).await.ok();
    c.close().await;
    let out = Command::new(bin())
        .args(["--home", g2.home.to_str().unwrap(), "stdio"])
        .env("VAULTGATE_TOKEN", &revoked)
        .env_remove("VAULTGATE_HOME")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    refused(out, "CREDENTIAL_REVOKED");
    assert!(g2.ok(&["token", "list"]).contains(&id));

    // The team's chain opens with the import, naming the home's last record; the home's own log
    // stays, and still verifies offline.
    let chain: Vec<Value> = serde_json::from_str(&g2.ok(&["audit", "tail", "-n", "100", "--json"])).unwrap();
    assert_eq!(chain[0]["event"], json!("team.import"));
    assert_eq!(chain[0]["seq"], json!(1));
    assert_eq!(
        chain[0]["target"],
        json!(format!(
            "seq {} {}",
            local_head["seq"],
            local_head["hash"].as_str().unwrap()
        ))
    );
    let log = home.home.join("audit.jsonl");
    assert!(
        home.ok(&["audit", "verify", "--file", log.to_str().unwrap()])
            .contains("export ok")
    );
    // The vault's folder is untouched; the home no longer serves it.
    assert!(home.vault.join("welcome.md").is_file());
    assert!(!home.ok(&["vault", "list"]).contains("basic"));
}

#[tokio::test]
async fn a_gateway_started_while_the_database_is_away_refuses_calls_and_serves_once_it_is_back() {
    let mut team = Team::start(&["g1"]);
    let (remote, _) = remote_with_notes(team.root.path());
    team.g(0).ok(&[
        "vault",
        "add",
        "--remote",
        remote.to_str().unwrap(),
        "--id",
        "notes",
    ]);
    let (_, token) = team.g(0).token("agent", "read");
    team.cluster.stop();

    // It starts, and refuses every call meanwhile (503, retry).
    let srv = Server::start(team.g(0));
    let auth = bearer(&token);
    let read = |id| {
        request(
            id,
            "tools/call",
            json!({"name": "read_note", "arguments": {"path": "z/plan.md"}}),
        )
    };
    let stateless = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "read_note"),
    ];
    let body = |id| {
        let mut r = read(id);
        r["params"]["_meta"] = crate::http::stateless_meta();
        r
    };
    let resp = post(&srv, Some(&auth), &stateless, &body(2)).await;
    assert_eq!(refusal(resp, 503).await, "AUDIT_UNAVAILABLE");

    // Back: the same server authenticates, learns its vaults and reads them.
    team.cluster.start_again();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let resp = post(&srv, Some(&auth), &stateless, &body(3)).await;
        if resp.status().as_u16() == 200 {
            let v = reply(resp, 3).await;
            if v["result"]["isError"] == json!(false) {
                let text = v["result"]["structuredContent"]["content"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                assert!(text.contains("Ship the first version."), "{v}");
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "not serving 30 s after the database came back"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Starts `vaultgate stdio` on `g` with `token` and no input: whether it accepted the token (it
/// then waits for the client's `initialize`, which never comes), and its stderr.
fn stdio_start(g: &Env, token: &str) -> (bool, String) {
    let out = std::process::Command::new(crate::util::bin())
        .arg("stdio")
        .arg("--home")
        .arg(&g.home)
        .env_remove("VAULTGATE_HOME")
        .env("VAULTGATE_TOKEN", token)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let e = stderr_of(&out);
    (e.contains("MCP initialization failed"), e)
}

#[tokio::test]
async fn a_rotated_team_secret_ends_every_old_token_and_a_gateway_serves_again_once_it_imports_it() {
    let team = Team::start(&["g1", "g2"]);
    let (_, old) = team.g(0).token("agent", "read");
    let on_g2 = team.g(1).stdio(&old).await;
    assert!(call(&on_g2, "vault_list", json!({})).await.is_ok());
    // Not confirmed (no terminal): nothing changes.
    refused(team.g(0).run(&["team", "secret", "rotate"]), "INVALID_ARGUMENT");
    assert!(call(&on_g2, "vault_list", json!({})).await.is_ok());
    // A reviewer's database role may not rotate it.
    let admin = pg::connect_retrying(&team.url);
    admin.query("CREATE ROLE reviewer_rot LOGIN", &[]).unwrap();
    team.g(0).ok(&["team", "grant-reviewer", "reviewer_rot"]);
    let rev = gateway(team.root.path());
    let rev_url = format!("postgres://reviewer_rot@127.0.0.1:{}/team", team.cluster.port);
    let secret = team.root.path().join("team.secret");
    assert_eq!(
        join(&rev, &rev_url, &secret, "rot", &["--role", "reviewer"])
            .status
            .code(),
        Some(0)
    );
    refused(
        rev.run(&["team", "secret", "rotate", "--yes"]),
        "CAPABILITY_DENIED",
    );

    let said = team.g(0).ok(&["team", "secret", "rotate", "--yes"]);
    assert!(said.contains("issue every token again"), "{said}");
    // The new secret was kept aside only until the home took it.
    assert!(!team.g(0).home.join("secret.key.next").exists());
    // g2 still holds the old secret: its open session's next request is refused, and so is a
    // new one; on g1 the old token no longer verifies.
    assert!(!call(&on_g2, "vault_list", json!({})).await.is_ok());
    let (accepted, e) = stdio_start(team.g(1), &old);
    assert!(!accepted && e.contains("team secret import"), "{e}");
    let (accepted, e) = stdio_start(team.g(0), &old);
    assert!(!accepted && e.contains("UNAUTHORIZED"), "{e}");
    // A token issued now works on g1, and on g2 only once it imported the new secret (a file
    // that is not the team's secret is refused first).
    let (_, new) = team.g(0).token("agent2", "read");
    let (accepted, e) = stdio_start(team.g(0), &new);
    assert!(accepted, "{e}");
    assert!(!stdio_start(team.g(1), &new).0);
    refused(
        team.g(1).run(&[
            "team",
            "secret",
            "import",
            "--secret-file",
            secret.to_str().unwrap(),
        ]),
        "INVALID_ARGUMENT",
    );
    let fresh = team.root.path().join("team.secret.new");
    team.g(0)
        .ok(&["team", "secret", "export", "--out", fresh.to_str().unwrap()]);
    team.g(1).ok(&[
        "team",
        "secret",
        "import",
        "--secret-file",
        fresh.to_str().unwrap(),
    ]);
    let (accepted, e) = stdio_start(team.g(1), &new);
    assert!(accepted, "{e}");
    assert!(!stdio_start(team.g(1), &old).0);
    let chain = team.chain(1);
    for (event, gateway) in [("team.secret_rotate", "g1"), ("team.secret_import", "g2")] {
        assert!(
            chain
                .iter()
                .any(|r| r["event"] == json!(event) && r["gateway"] == json!(gateway)),
            "{event}: {chain:?}"
        );
    }
    team.g(1).ok(&["audit", "verify"]);
    on_g2.close().await;
}

#[test]
fn a_team_gateways_tunnel_credential_is_the_teams_named_after_the_gateway_and_rotates() {
    let team = Team::start(&["g1", "g2"]);
    let key = team.root.path().join("api-key");
    std::fs::write(&key, format!("sk-tunnel_{}\n", "ab".repeat(32))).unwrap();
    let setup = || {
        team.g(0).ok(&[
            "tunnel",
            "setup",
            "--tunnel-id",
            "tunnel_0123456789abcdef0123456789abcdef",
            "--api-key-file",
            key.to_str().unwrap(),
        ])
    };
    let tunnel_creds = || -> Vec<Value> {
        let all: Value = serde_json::from_str(&team.g(1).ok(&["token", "list", "--json"])).unwrap();
        all.as_array()
            .unwrap()
            .iter()
            .filter(|c| c["name"].as_str().unwrap().starts_with("chatgpt-tunnel@g1"))
            .cloned()
            .collect()
    };
    setup();
    // Issued in the team's database under the gateway's name: g2 lists it; its token, kept in
    // g1's home (mode 0600), is accepted on g2 too.
    let first = tunnel_creds();
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0]["name"], json!("chatgpt-tunnel@g1"));
    let token_file = team.g(0).home.join("tunnel.token");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let token = std::fs::read_to_string(&token_file).unwrap();
    let (accepted, e) = stdio_start(team.g(1), token.trim());
    assert!(accepted, "{e}");
    // Set up again: the earlier one is revoked (and renamed aside) on every gateway, and its
    // token refused; the new one is live under the name.
    setup();
    let both = tunnel_creds();
    assert_eq!(both.len(), 2, "{both:?}");
    let old = both.iter().find(|c| c["id"] == first[0]["id"]).unwrap();
    assert_eq!(old["revoked"], json!(true), "{old}");
    assert_ne!(old["name"], json!("chatgpt-tunnel@g1"));
    assert!(
        both.iter()
            .any(|c| c["name"] == json!("chatgpt-tunnel@g1") && c["revoked"] == json!(false))
    );
    assert!(!stdio_start(team.g(1), token.trim()).0);
    let renewed = std::fs::read_to_string(&token_file).unwrap();
    assert_ne!(renewed, token);
    assert!(stdio_start(team.g(1), renewed.trim()).0);
}

/// Version `i` of a note big enough that git takes a while to write it.
fn big_note(i: usize) -> String {
    let mut text = format!("# Big, version {i}\n\n");
    for line in 0..6_000 {
        text.push_str(&format!(
            "Line {line} of version {i}, long enough to take room.\n"
        ));
    }
    text.push_str(&format!("The end of version {i}.\n"));
    text
}

#[tokio::test]
async fn a_note_read_while_a_persons_push_is_checked_out_in_the_clone_is_read_whole() {
    let (team, _remote, person) = crate::team_writes::team_with_vault(&["g1"]);
    std::fs::write(person.join("big.md"), big_note(0)).unwrap();
    git(&person, &["add", "-A"]);
    git(&person, &["commit", "--quiet", "-m", "big"]);
    git(&person, &["push", "--quiet", "origin", "main"]);
    let versions: Vec<String> = (0..=20).map(big_note).collect();
    let (_, token) = team.g(0).token("reader", "read");
    let mut readers = Vec::new();
    for _ in 0..3 {
        readers.push(team.g(0).stdio(&token).await);
    }
    let readers = std::sync::Arc::new(readers);
    eventually("the gateway reads the note", || async {
        matches!(
            call(&readers[0], "read_note", json!({"path": "big.md"})).await,
            Reply::Ok(_)
        )
    })
    .await;
    // The person pushes a new version every 700 ms; the gateway's clone checks each out
    // (it fetches every second) while three clients read the note without pause.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pushing = {
        let (person, versions, done) = (person.clone(), versions.clone(), done.clone());
        tokio::task::spawn_blocking(move || {
            for (i, text) in versions.iter().enumerate().skip(1) {
                std::thread::sleep(Duration::from_millis(400));
                std::fs::write(person.join("big.md"), text).unwrap();
                git(&person, &["commit", "--quiet", "-am", &format!("version {i}")]);
                git(&person, &["push", "--quiet", "origin", "main"]);
            }
            // The last one reaches the clone.
            std::thread::sleep(Duration::from_millis(2500));
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        })
    };
    let mut reading = tokio::task::JoinSet::new();
    for r in 0..3 {
        let (readers, done, versions) = (readers.clone(), done.clone(), versions.clone());
        reading.spawn(async move {
            let mut seen = std::collections::BTreeSet::new();
            let mut reads = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let content = match call(&readers[r], "read_note", json!({"path": "big.md"})).await {
                    Reply::Ok(v) => v["content"].as_str().unwrap().to_owned(),
                    Reply::Err(e) => panic!("a read during a checkout answered {e}"),
                };
                let version = versions.iter().position(|v| *v == content);
                assert!(
                    version.is_some(),
                    "a read during a checkout answered part of the note ({} bytes)",
                    content.len()
                );
                seen.extend(version);
                reads += 1;
            }
            (seen, reads)
        });
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut reads = 0;
    while let Some(r) = reading.join_next().await {
        let (s, n) = r.unwrap();
        seen.extend(s);
        reads += n;
    }
    pushing.await.unwrap();
    eprintln!("{reads} reads saw versions {seen:?}");
    assert!(
        seen.contains(&20),
        "the clone never reached the last push: {seen:?}"
    );
    assert!(seen.len() >= 6, "the clone checked out too few pushes: {seen:?}");
    for r in std::sync::Arc::try_unwrap(readers).ok().unwrap() {
        r.close().await;
    }
}
