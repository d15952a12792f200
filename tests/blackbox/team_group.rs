//! docs/contract.md#team-lease, one push for a group: applies of new notes and patches waiting on
//! one gateway while the vault is busy ride with the first of them: each checks its proposal,
//! records its intent and builds its own commit on the one before, and one push by
//! compare-and-swap carries them all. The remote takes fewer pushes than commits, every push a
//! fast-forward; each proposal is in one commit of its own with its own trailers; each caller is
//! answered with its own commit. A group whose push the remote declines lands nothing, and each
//! caller's retry lands its apply once; a gateway killed while its group's push hangs, or its
//! database stopped meanwhile, leaves every apply of the group to land once through the
//! callers' retries.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use crate::http::Server;
use crate::team::git;
use crate::team_writes::{apply_args, team_with_vault};
use crate::util::{Client, Reply, call, to_reply};

const APPLIES: usize = 6;

fn hook(remote: &std::path::Path, name: &str, script: &str) {
    use std::os::unix::fs::PermissionsExt;
    let path = remote.join("hooks").join(name);
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Every push the remote took, as `(old, new)` (a `post-receive` hook logs them).
fn log_pushes(remote: &std::path::Path) -> std::path::PathBuf {
    let log = remote.join("pushes.log");
    hook(
        remote,
        "post-receive",
        &format!("#!/bin/sh\ncat >> '{}'\n", log.display()),
    );
    log
}

fn pushes(log: &std::path::Path) -> Vec<(String, String)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w[0].to_owned(), w[1].to_owned())
        })
        .collect()
}

/// `APPLIES` proposals of new notes, made through `srv`.
async fn proposals(srv: &Server, token: &str) -> Vec<Value> {
    let c = srv.client(token).await;
    let mut out = Vec::new();
    for i in 0..APPLIES {
        out.push(
            call(
                &c,
                "propose_new_note",
                json!({"path": format!("group/n{i}.md"), "content": format!("# {i}\n"), "reason": "group"}),
            )
            .await
            .ok(),
        );
    }
    out
}

/// Applies every proposal through its own client, all at once, each but the first once
/// `started` exists (the first push is held in the remote's hook, so they wait for the vault
/// together). Each one's reply, in order.
async fn apply_while_busy(srv: &Server, token: &str, ps: &[Value], started: &std::path::Path) -> Vec<Reply> {
    let clients = clients(srv, token, ps.len()).await;
    let replies = replies(applies(clients, ps, started, Duration::from_secs(60))).await;
    replies
        .into_iter()
        .map(|r| r.expect("every apply answered"))
        .collect()
}

async fn clients(srv: &Server, token: &str, n: usize) -> Vec<Client> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(srv.client(token).await);
    }
    out
}

/// The calls, each answered (`None`: its gateway died under it, or `wait` passed).
fn applies(
    clients: Vec<Client>,
    ps: &[Value],
    started: &std::path::Path,
    wait: Duration,
) -> tokio::task::JoinSet<(usize, Option<Reply>)> {
    let mut calls = tokio::task::JoinSet::new();
    for (i, (c, p)) in clients.into_iter().zip(ps).enumerate() {
        let (p, started) = (p.clone(), started.to_path_buf());
        calls.spawn(async move {
            if i > 0 {
                for _ in 0..400 {
                    if started.exists() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
            }
            let args = apply_args(&p, &format!("k{i}"));
            let reply = tokio::time::timeout(wait, c.try_call("apply_proposal", args)).await;
            (i, reply.ok().and_then(Result::ok).map(to_reply))
        });
    }
    calls
}

async fn replies(calls: tokio::task::JoinSet<(usize, Option<Reply>)>) -> Vec<Option<Reply>> {
    let mut replies: Vec<(usize, Option<Reply>)> = calls.join_all().await;
    replies.sort_by_key(|(i, _)| *i);
    replies.into_iter().map(|(_, r)| r).collect()
}

/// Every proposal is in exactly one commit on the remote, the one its answer named, each job in
/// one commit; every push was a fast-forward; nothing is pending; the chain verifies.
async fn landed_once(
    srv: &Server,
    token: &str,
    remote: &std::path::Path,
    ps: &[Value],
    commits: &[String],
    log: &[(String, String)],
) {
    let trailers = git(
        remote,
        &[
            "log",
            "--format=%H %(trailers:key=Vaultgate-Proposal,valueonly,separator=) %(trailers:key=Vaultgate-Job,valueonly,separator=)",
            "main",
        ],
    );
    for (p, commit) in ps.iter().zip(commits) {
        let id = p["id"].as_str().unwrap();
        let lines: Vec<&str> = trailers.lines().filter(|l| l.contains(id)).collect();
        assert_eq!(lines.len(), 1, "{id}: {trailers}");
        assert!(
            lines[0].starts_with(commit.as_str()),
            "{id}: {lines:?} vs {commit}"
        );
    }
    let jobs: Vec<&str> = trailers
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    let mut distinct = jobs.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), jobs.len(), "a job in two commits: {trailers}");
    for (old, new) in log {
        assert!(
            std::process::Command::new("git")
                .arg("-C")
                .arg(remote)
                .args(["merge-base", "--is-ancestor", old, new])
                .status()
                .unwrap()
                .success(),
            "a push that was not a fast-forward: {old} -> {new}"
        );
    }
    let c = srv.client(token).await;
    let pending = call(&c, "list_proposals", json!({})).await.ok();
    assert_eq!(pending["proposals"], json!([]), "{pending}");
}

fn commit_of(r: &Reply) -> String {
    match r {
        Reply::Ok(v) => v["commit"].as_str().unwrap().to_owned(),
        Reply::Err(e) => panic!("expected an apply, got {e}"),
    }
}

/// One gateway on a fresh remote whose first push is held 2 s (the other applies wait for the
/// vault meanwhile) and whose second push runs `second` (shell) in its `pre-receive` hook: the
/// team, the remote, a token, the push log, and the file the held push makes.
fn one_gateway(second: &str) -> (crate::team::Team, PathBuf, String, PathBuf, PathBuf) {
    let (team, remote, _person) = team_with_vault(&["g1"]);
    let (_, token) = team.g(0).token("agent", "full");
    let log = log_pushes(&remote);
    let started = remote.join("started");
    hook(
        &remote,
        "pre-receive",
        &format!(
            "#!/bin/sh\nif mkdir first 2>/dev/null; then touch '{}'; sleep 2; exit 0; fi\n\
             if mkdir second 2>/dev/null; then {second}; fi\n",
            started.display()
        ),
    );
    (team, remote, token, log, started)
}

#[tokio::test]
async fn applies_waiting_on_one_gateway_ride_one_push_each_in_its_own_commit() {
    let (team, remote, token, log, started) = one_gateway("true");
    let srv = Server::start(team.g(0));
    let ps = proposals(&srv, &token).await;
    let replies = apply_while_busy(&srv, &token, &ps, &started).await;
    let commits: Vec<String> = replies.iter().map(commit_of).collect();
    let log = pushes(&log);
    // The first alone; the five that waited, in one push of five commits.
    assert_eq!(log.len(), 2, "{log:?}");
    let carried = git(
        &remote,
        &["rev-list", "--count", &format!("{}..{}", log[1].0, log[1].1)],
    );
    assert_eq!(carried.trim(), (APPLIES - 1).to_string(), "{log:?}");
    let mut distinct = commits.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), APPLIES, "{commits:?}");
    landed_once(&srv, &token, &remote, &ps, &commits, &log).await;
    // Each commit holds its own note only (built on the one before it).
    for (i, c) in commits.iter().enumerate() {
        let changed = git(&remote, &["diff-tree", "--no-commit-id", "--name-only", "-r", c]);
        assert_eq!(changed.trim(), format!("group/n{i}.md"), "{c}");
    }
    // Each caller's key answers its own apply again, on a retry.
    let c = srv.client(&token).await;
    for (i, p) in ps.iter().enumerate() {
        let again = call(&c, "apply_proposal", apply_args(p, &format!("k{i}")))
            .await
            .ok();
        assert_eq!(again["commit"].as_str(), Some(commits[i].as_str()), "{again}");
    }
    team.g(0).ok(&["audit", "verify"]);
    crate::team_invariants::hold(&team, &remote).await;
}

#[tokio::test]
async fn a_group_whose_push_the_remote_declines_lands_nothing_and_each_retry_lands_once() {
    // The group's push is declined, once.
    let (team, remote, token, log, started) = one_gateway("echo 'main is frozen for a minute' >&2; exit 1");
    let srv = Server::start(team.g(0));
    let ps = proposals(&srv, &token).await;
    let replies = apply_while_busy(&srv, &token, &ps, &started).await;
    let first = commit_of(&replies[0]);
    for r in &replies[1..] {
        match r {
            Reply::Err(e) => assert_eq!(e["code"], json!("VAULT_BUSY"), "{e}"),
            Reply::Ok(v) => panic!("an apply of a declined group answered {v}"),
        }
    }
    assert_eq!(pushes(&log).len(), 1, "the declined group landed something");
    // Retried with their keys: each lands once.
    let c = srv.client(&token).await;
    let mut commits = vec![first];
    for (i, p) in ps.iter().enumerate().skip(1) {
        let out = call(&c, "apply_proposal", apply_args(p, &format!("k{i}")))
            .await
            .ok();
        commits.push(out["commit"].as_str().unwrap().to_owned());
    }
    landed_once(&srv, &token, &remote, &ps, &commits, &pushes(&log)).await;
    team.g(0).ok(&["audit", "verify"]);
    crate::team_invariants::hold(&team, &remote).await;
}

/// Every caller but the first retries its apply with its key until the vault answers (through
/// `VAULT_BUSY`, `AUDIT_UNAVAILABLE` and HTTP 503 while the gateway reconnects, for 60 s): the
/// commits answered, the first's included.
async fn retry_each(c: &Client, ps: &[Value], first: String, accepted: bool) -> Vec<String> {
    let mut commits = vec![first];
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    for (i, p) in ps.iter().enumerate().skip(1) {
        let out = loop {
            let transient = |why: String| {
                assert!(std::time::Instant::now() < deadline, "accepted={accepted}: {why}");
            };
            match c
                .try_call("apply_proposal", apply_args(p, &format!("k{i}")))
                .await
                .map(to_reply)
            {
                Ok(Reply::Ok(v)) => break v,
                Ok(Reply::Err(e))
                    if e["code"] == json!("VAULT_BUSY") || e["code"] == json!("AUDIT_UNAVAILABLE") =>
                {
                    transient(e.to_string())
                }
                Ok(Reply::Err(e)) => panic!("accepted={accepted}, retry {i}: {e}"),
                // HTTP 503 while the gateway's pool reconnects: the request was not authenticated.
                Err(e) => transient(e.to_string()),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        commits.push(out["commit"].as_str().unwrap().to_owned());
    }
    commits
}

/// After a group's push that hung (`accepted`: it landed, carrying every member but the first):
/// each apply landed once, the chain verifies, and nothing is left in flight.
#[allow(clippy::too_many_arguments)]
async fn landed_once_after(
    team: &crate::team::Team,
    srv: &Server,
    token: &str,
    remote: &std::path::Path,
    ps: &[Value],
    commits: &[String],
    log: &std::path::Path,
    accepted: bool,
) {
    let log = pushes(log);
    if accepted {
        let carried = git(
            remote,
            &["rev-list", "--count", &format!("{}..{}", log[1].0, log[1].1)],
        );
        assert_eq!(carried.trim(), (APPLIES - 1).to_string(), "{log:?}");
    }
    landed_once(srv, token, remote, ps, commits, &log).await;
    team.g(0).ok(&["audit", "verify"]);
    let status: Value = serde_json::from_str(&team.g(0).ok(&["team", "status", "--json"])).unwrap();
    assert_eq!(status["vaults"][0]["pendingJobs"], json!(0), "{status}");
}

#[tokio::test]
async fn a_gateway_killed_while_its_groups_push_hangs_leaves_each_apply_to_land_once() {
    for accepted in [true, false] {
        // The group's push hangs until released (the hook runs in the remote), then is taken
        // or refused.
        let then = if accepted {
            "exit 0"
        } else {
            "echo 'refused' >&2; exit 1"
        };
        let (team, remote, token, log, started) = one_gateway(&format!(
            "touch grouped; while [ ! -e release ]; do sleep 0.05; done; {then}"
        ));
        let (grouped, release) = (remote.join("grouped"), remote.join("release"));
        // The dead holder's lease blocks the vault until it runs out: short here.
        team.g(0).ok(&["team", "set", "lease_seconds", "3"]);
        let srv = Server::start(team.g(0));
        let ps = proposals(&srv, &token).await;
        // The calls cut by the kill never answer: 15 s is ample for the first, which answers
        // before the group's push begins.
        let calls = applies(
            clients(&srv, &token, ps.len()).await,
            &ps,
            &started,
            Duration::from_secs(15),
        );
        let all = replies(calls);
        let kill = async {
            for _ in 0..400 {
                if grouped.exists() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            assert!(grouped.exists(), "the group's push never reached the remote");
            // Killed (SIGKILL) while its group's push hangs; then the push goes on.
            drop(srv);
            std::fs::write(&release, "").unwrap();
        };
        let (replies, ()) = tokio::join!(tokio::time::timeout(Duration::from_secs(120), all), kill);
        let replies = replies.expect("the killed gateway's calls never ended");
        let first = commit_of(
            replies[0]
                .as_ref()
                .expect("the first apply answered before the kill"),
        );
        // Started again: every caller retries with its key, until the vault answers.
        let srv = Server::start(team.g(0));
        let c = srv.client(&token).await;
        let commits = retry_each(&c, &ps, first, accepted).await;
        landed_once_after(&team, &srv, &token, &remote, &ps, &commits, &log, accepted).await;
        crate::team_invariants::hold(&team, &remote).await;
    }
}

#[tokio::test]
async fn the_database_stopped_while_a_groups_push_hangs_answers_no_member_and_each_retry_lands_once() {
    for accepted in [true, false] {
        let then = if accepted {
            "exit 0"
        } else {
            "echo 'refused' >&2; exit 1"
        };
        let (mut team, remote, token, log, started) = one_gateway(&format!(
            "touch grouped; while [ ! -e release ]; do sleep 0.05; done; {then}"
        ));
        let (grouped, release) = (remote.join("grouped"), remote.join("release"));
        team.g(0).ok(&["team", "set", "lease_seconds", "3"]);
        let srv = Server::start(team.g(0));
        let ps = proposals(&srv, &token).await;
        let calls = applies(
            clients(&srv, &token, ps.len()).await,
            &ps,
            &started,
            Duration::from_secs(90),
        );
        let all = replies(calls);
        // The session the retries use, open across the outage.
        let c = srv.client(&token).await;
        let outage = async {
            for _ in 0..400 {
                if grouped.exists() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            assert!(grouped.exists(), "the group's push never reached the remote");
            // The database goes away while the group's push hangs; then the push goes on.
            team.cluster.stop();
            std::fs::write(&release, "").unwrap();
        };
        let (replies, ()) = tokio::join!(all, outage);
        let first = commit_of(replies[0].as_ref().expect("the first apply answered"));
        // No member is answered applied: none could be recorded.
        for (i, r) in replies.iter().enumerate().skip(1) {
            match r {
                Some(Reply::Err(e)) => assert!(
                    e["code"] == json!("AUDIT_UNAVAILABLE") || e["code"] == json!("VAULT_BUSY"),
                    "accepted={accepted}, member {i}: {e}"
                ),
                other => panic!("accepted={accepted}, member {i} answered {other:?} with the database gone"),
            }
        }
        team.cluster.start_again();
        // Back: every caller retries with its key until the vault answers.
        let commits = retry_each(&c, &ps, first, accepted).await;
        landed_once_after(&team, &srv, &token, &remote, &ps, &commits, &log, accepted).await;
        crate::team_invariants::hold(&team, &remote).await;
    }
}
