//! Team mode soaked: three gateways serving over HTTP, a client on each proposing, applying and
//! undoing through the others, a person pushing to the same remote, and one gateway killed with
//! SIGKILL (then started again) every few seconds, and once the database stopped at once (as
//! `pg_ctl stop -m immediate`) and started again. Every call that fails for the kill or the
//! lease is retried with its key through another gateway, as a client would. Then the design's
//! invariants: every proposal a client saw applied is on the branch exactly once, as the commit
//! it was told; no job lands twice; every push of the person is kept; the branch only moved
//! forward; no job is left; every gateway's chain verifies; every clone converges; and after each
//! heal (a gateway started again — once the lease a killed holder left ran out —, the database
//! back) an apply succeeds within 5 s.
//!
//! Runs `VAULTGATE_SOAK_SECONDS` (120 by default; `bench/team-soak.sh` runs it for 30 minutes).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::http::{Server, stateless_meta};
use crate::team::git;
use crate::team_writes::team_with_vault;
use crate::util::{Reply, to_reply};

/// One stateless tool call to the gateway on `port`: the reply, or why there was none (a killed
/// gateway, or a request refused before the tool ran, such as `AUDIT_UNAVAILABLE`).
async fn tool(port: u16, token: &str, name: &str, args: &Value) -> Result<Reply, String> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": name, "arguments": args, "_meta": stateless_meta()}});
    let resp = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/mcp"))
        .timeout(Duration::from_secs(90))
        .header("Authorization", format!("Bearer {token}"))
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", name)
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status();
    let text = resp.text().await.map_err(|e| e.to_string())?;
    let data: String = match text.starts_with("event:") || text.starts_with("data:") {
        true => text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim_start)
            .collect(),
        false => text,
    };
    let v: Value = serde_json::from_str(&data).map_err(|e| format!("HTTP {status}: {e}: {data}"))?;
    match v.get("result") {
        Some(r) => Ok(to_reply(
            serde_json::from_value(r.clone()).map_err(|e| e.to_string())?,
        )),
        None => Err(format!("HTTP {status}: {v}")),
    }
}

/// What every client shares: each gateway's current port, and the end.
struct World {
    ports: Mutex<Vec<u16>>,
    token: String,
    start: Instant,
    end: Instant,
    stop: AtomicBool,
    retries: AtomicUsize,
    /// When each apply was answered `applied`.
    applied_at: Mutex<Vec<Instant>>,
}

impl World {
    /// `name(args)` through gateway `g`, retried through the next gateway while it fails for a
    /// reason a client retries (no answer, `VAULT_BUSY`, `AUDIT_UNAVAILABLE`); `None` when it
    /// answered another refusal, which `refusable` allows.
    async fn call(&self, mut g: usize, name: &str, args: &Value, refusable: &[&str]) -> Option<Value> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let port = self.ports.lock().unwrap()[g];
            let sent = Instant::now();
            let answer = tool(port, &self.token, name, args).await;
            if sent.elapsed() > Duration::from_millis(1500) {
                // What a stall is made of, for the report (not an invariant).
                let what = match &answer {
                    Ok(Reply::Ok(_)) => "ok".to_owned(),
                    Ok(Reply::Err(e)) => e["code"].as_str().unwrap_or_default().to_owned(),
                    Err(e) => e.chars().take(80).collect(),
                };
                eprintln!(
                    "soak: slow {name} through g{} at {:.1} s: {:.1} s, {what}",
                    g + 1,
                    (sent - self.start).as_secs_f64(),
                    sent.elapsed().as_secs_f64()
                );
            }
            match answer {
                Ok(Reply::Ok(v)) => return Some(v),
                Ok(Reply::Err(e)) => {
                    let code = e["code"].as_str().unwrap_or_default().to_owned();
                    if refusable.contains(&code.as_str()) {
                        return None;
                    }
                    assert!(
                        code == "VAULT_BUSY" || code == "AUDIT_UNAVAILABLE",
                        "{name}({args}) through gateway {g}: {e}"
                    );
                }
                Err(_) => {}
            }
            self.retries.fetch_add(1, Ordering::Relaxed);
            assert!(Instant::now() < deadline, "{name}({args}) never succeeded");
            g = (g + 1) % 3;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// What a client saw applied: the proposal, its commit.
type Applied = Vec<(String, String)>;

/// What a client did besides its applies.
#[derive(Debug, Default)]
struct Did {
    undone: usize,
    redone: usize,
    patched: usize,
    rejected: usize,
    deleted: usize,
}

/// Applies `p` through gateway `g` with `key`: its commit, recorded as applied.
async fn apply(world: &World, g: usize, p: &Value, key: String, applied: &mut Applied) -> Value {
    let args = json!({"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": key});
    let a = world.call(g, "apply_proposal", &args, &[]).await.unwrap();
    assert_eq!(
        (&a["applied"], &a["git"]),
        (&json!(true), &json!("committed")),
        "{a}"
    );
    world.applied_at.lock().unwrap().push(Instant::now());
    applied.push((
        p["id"].as_str().unwrap().to_owned(),
        a["commit"].as_str().unwrap().to_owned(),
    ));
    a
}

/// One client's mixed calls, each through another gateway than the last: new notes proposed and
/// applied; some patched and applied, some undone and redone, some deleted for good (a
/// challenge issued on one gateway, executed on another); proposals rejected.
async fn client(world: Arc<World>, c: usize) -> (Applied, Did) {
    let (mut applied, mut did) = (Vec::new(), Did::default());
    let mut i = 0;
    while !world.stop.load(Ordering::SeqCst) && Instant::now() < world.end {
        let path = format!("soak/c{c}-{i:04}.md");
        let content = format!("# C{c} {i}\n\nsoak\n");
        let args = json!({"path": path, "content": content, "reason": "soak"});
        // A proposal retried after a lost answer may exist twice: only the one answered is applied.
        let Some(p) = world
            .call(
                (c + i) % 3,
                "propose_new_note",
                &args,
                &["PROPOSAL_TARGET_EXISTS"],
            )
            .await
        else {
            i += 1;
            continue;
        };
        if i % 6 == 4 {
            // Rejected through another gateway (a retry after a lost answer finds it rejected).
            let reject = json!({"id": p["id"], "reason": "soak"});
            if world
                .call(
                    (c + i + 1) % 3,
                    "reject_proposal",
                    &reject,
                    &["PROPOSAL_REJECTED"],
                )
                .await
                .is_some()
            {
                did.rejected += 1;
            }
            i += 1;
            continue;
        }
        let a = apply(&world, (c + i + 1) % 3, &p, format!("a-{c}-{i}"), &mut applied).await;
        if i % 6 == 1 {
            // Patched on top (a person or another client cannot touch this note).
            let edited = format!("{content}patched\n");
            let patch = json!({"path": path, "baseHash": crate::git::sha256_hex(content.as_bytes()), "content": edited, "reason": "soak"});
            // Through another gateway, whose clone has the note within seconds (fetched on the
            // database's notice, or polled).
            let seen = Instant::now();
            let q = loop {
                let g = (c + i + 2) % 3;
                if let Some(q) = world.call(g, "propose_note_patch", &patch, &["NOT_FOUND"]).await {
                    break q;
                }
                assert!(
                    seen.elapsed() < Duration::from_secs(30),
                    "{path} never reached gateway {g}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            };
            apply(&world, (c + i) % 3, &q, format!("p-{c}-{i}"), &mut applied).await;
            did.patched += 1;
        }
        if i % 4 == 3 {
            // Another client's apply may have landed on top: then it is not the top to undo.
            let entry = &a["historyEntryId"];
            let undo = json!({"expectedHistoryEntryId": entry, "idempotencyKey": format!("u-{c}-{i}")});
            let refusals = ["HISTORY_NOT_TOP", "HISTORY_STALE"];
            if world
                .call((c + i + 2) % 3, "history_undo", &undo, &refusals)
                .await
                .is_some()
            {
                did.undone += 1;
                if i % 8 == 7 {
                    let redo =
                        json!({"expectedHistoryEntryId": entry, "idempotencyKey": format!("r-{c}-{i}")});
                    if world
                        .call((c + i) % 3, "history_redo", &redo, &refusals)
                        .await
                        .is_some()
                    {
                        did.redone += 1;
                    }
                }
            }
        } else if i % 10 == 5 {
            // Deleted for good: the challenge issued on one gateway, executed on another (a
            // retry after a lost answer finds it consumed; a person's push makes it stale).
            let first = json!({"paths": [path], "idempotencyKey": format!("d-{c}-{i}")});
            if let Some(issued) = world.call((c + i + 1) % 3, "delete_permanent", &first, &[]).await {
                assert_eq!(issued["status"], json!("challenge"), "{issued}");
                let ch = &issued["challenge"];
                let mut second = first.clone();
                second["challengeId"] = ch["challengeId"].clone();
                second["planHash"] = ch["planHash"].clone();
                second["acknowledged"] = json!(true);
                let refusals = ["CHALLENGE_STALE", "CHALLENGE_CONSUMED"];
                if let Some(done) = world
                    .call((c + i + 2) % 3, "delete_permanent", &second, &refusals)
                    .await
                {
                    assert_eq!(done["status"], json!("executed"), "{done}");
                    did.deleted += 1;
                }
            }
        }
        i += 1;
    }
    (applied, did)
}

/// The person's clone pushes a line to one of their notes; a push refused because the branch
/// moved is pulled (rebased) and pushed again. The commit that landed.
fn person_pushes(person: &std::path::Path, n: usize) -> String {
    let file = person.join(format!("people/p{}.md", n % 5));
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let mut text = std::fs::read_to_string(&file).unwrap_or_default();
    text.push_str(&format!("line {n}\n"));
    std::fs::write(&file, text).unwrap();
    git(person, &["add", "-A"]);
    git(person, &["commit", "-qm", &format!("person {n}")]);
    for _ in 0..20 {
        let pushed = std::process::Command::new("git")
            .arg("-C")
            .arg(person)
            .args(["push", "-q", "origin", "HEAD:main"])
            .output()
            .unwrap();
        if pushed.status.success() {
            return git(person, &["rev-parse", "HEAD"]).trim().to_owned();
        }
        git(person, &["pull", "-q", "--rebase", "origin", "main"]);
    }
    panic!("the person's push never landed");
}

/// How long the vault's lease stays held by `gateway` (just killed, so never renewed again):
/// zero when it holds none, or the database cannot say.
fn lease_left(url: &str, gateway: &str) -> Duration {
    let left = teamstate::PgState::connect(url).and_then(|db| {
        db.query(
            "SELECT EXTRACT(EPOCH FROM max(expires_at) - now())::float8 FROM vaultgate.leases
             WHERE holder = $1 AND expires_at > now()",
            &[&gateway],
        )
    });
    left.ok()
        .and_then(|rows| rows.first().and_then(|r| r.get::<_, Option<f64>>(0)))
        .map_or(Duration::ZERO, |s| Duration::from_secs_f64(s.max(0.0)))
}

/// A gateway of the soak: logging at `info` when `VAULTGATE_SOAK_LOGS` names a folder to keep
/// the logs in (to find what a stall was made of), else as every test's.
fn start(env: &crate::util::Env) -> Server {
    match std::env::var_os("VAULTGATE_SOAK_LOGS") {
        Some(_) => Server::start_logged(env, "info"),
        None => Server::start(env),
    }
}

/// Copies `srv`'s log into the `VAULTGATE_SOAK_LOGS` folder as `name.log`, when one is named.
fn keep_log(srv: &Server, name: &str) {
    if let Some(dir) = std::env::var_os("VAULTGATE_SOAK_LOGS") {
        let dir = std::path::PathBuf::from(dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.log")), srv.stderr()).unwrap();
    }
}

fn soak_seconds() -> u64 {
    std::env::var("VAULTGATE_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_gateways_soaked_with_kills_and_a_person_pushing_keep_every_invariant() {
    let (mut team, remote, person) = team_with_vault(&["g1", "g2", "g3"]);
    team.g(0).ok(&["team", "set", "lease_seconds", "3"]);
    git(&remote, &["config", "core.logAllRefUpdates", "always"]);
    git(&person, &["config", "user.name", "Person"]);
    git(&person, &["config", "user.email", "person@example.com"]);
    // The person's git packs its clone in its own commands: a packing detached after one pull
    // (due after about 15 minutes of fetched commits) holds the refs the next command updates.
    git(&person, &["config", "gc.autoDetach", "false"]);
    let (_, token) = team.g(0).token("soak", "full");
    let mut servers: Vec<Server> = team.gateways.iter().map(start).collect();
    let seconds = soak_seconds();
    let world = Arc::new(World {
        ports: Mutex::new(servers.iter().map(|s| s.port).collect()),
        token,
        start: Instant::now(),
        end: Instant::now() + Duration::from_secs(seconds),
        stop: AtomicBool::new(false),
        retries: AtomicUsize::new(0),
        applied_at: Mutex::new(Vec::new()),
    });
    let clients: Vec<_> = (0..3).map(|c| tokio::spawn(client(world.clone(), c))).collect();

    // The person pushes every 2 s; a gateway is killed every `kill_every` and started again.
    let kill_every = Duration::from_secs((seconds / 8).clamp(10, 180));
    let mut next_kill = Instant::now() + kill_every;
    let (mut kills, mut pushes) = (0usize, Vec::new());
    // Each heal: what came back, and when.
    let mut heals: Vec<(String, Instant)> = Vec::new();
    let outage_at = Instant::now() + Duration::from_secs(seconds / 2);
    let mut outage_done = false;
    while Instant::now() < world.end {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (p, n) = (person.clone(), pushes.len());
        pushes.push(
            tokio::task::spawn_blocking(move || person_pushes(&p, n))
                .await
                .unwrap(),
        );
        if Instant::now() >= next_kill {
            let g = kills % 3;
            let name = format!("g{}", g + 1);
            // SIGKILL; then the take of the vault's lease it held, if any, blocks every write
            // until it runs out (by design, docs/contract.md#team-lease): the vault heals then.
            keep_log(&servers[g], &format!("g{}-{kills}", g + 1));
            drop(servers.remove(g));
            let blocked = tokio::task::block_in_place(|| lease_left(&team.url, &name));
            let until = Instant::now() + blocked;
            servers.insert(g, tokio::task::block_in_place(|| start(&team.gateways[g])));
            world.ports.lock().unwrap()[g] = servers[g].port;
            heals.push((format!("{name} started again"), Instant::now().max(until)));
            kills += 1;
            next_kill = Instant::now() + kill_every;
        }
        if !outage_done && Instant::now() >= outage_at {
            // The database stopped at once (SIGQUIT: no checkpoint, every backend gone) for 3 s.
            tokio::task::block_in_place(|| team.cluster.stop());
            tokio::time::sleep(Duration::from_secs(3)).await;
            tokio::task::block_in_place(|| team.cluster.start_again());
            heals.push(("the database back".into(), Instant::now()));
            outage_done = true;
            // No kill while the database's heal is measured: a kill due now (with 30 minutes,
            // the fourth falls here) would count its dead holder's lease against this heal.
            next_kill = next_kill.max(Instant::now() + Duration::from_secs(10));
        }
    }
    world.stop.store(true, Ordering::SeqCst);
    let mut applied = Vec::new();
    let mut did = Did::default();
    for c in clients {
        let (a, d) = tokio::time::timeout(Duration::from_secs(300), c)
            .await
            .expect("a client never finished")
            .unwrap();
        applied.extend(a);
        did.undone += d.undone;
        did.redone += d.redone;
        did.patched += d.patched;
        did.rejected += d.rejected;
        did.deleted += d.deleted;
    }
    // Every transition pushes at most one commit of its own.
    let undone = did.undone + did.redone + did.deleted;
    eprintln!(
        "soak: {seconds} s, {} applies ({} patches), {} undos, {} redos, {} deletions for good, {} \
         rejections, {} person pushes, {kills} kills, {} retries",
        applied.len(),
        did.patched,
        did.undone,
        did.redone,
        did.deleted,
        did.rejected,
        pushes.len(),
        world.retries.load(Ordering::Relaxed)
    );
    // The gaps between answered applies, heal or not: what the 5 s bound below is measured in.
    let mut at = world.applied_at.lock().unwrap().clone();
    at.sort();
    let mut gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort();
    if let Some(max) = gaps.last() {
        let p99 = gaps[(gaps.len() * 99 / 100).min(gaps.len() - 1)];
        let over = gaps.iter().filter(|g| **g > Duration::from_secs(2)).count();
        eprintln!(
            "soak: gaps between applies: p50 {:?}, p99 {p99:?}, max {max:?}, {over} over 2 s",
            gaps[gaps.len() / 2]
        );
    }
    let t0 = world.start;
    for w in at.windows(2).filter(|w| w[1] - w[0] > Duration::from_secs(2)) {
        let near: Vec<String> = heals
            .iter()
            .filter(|(_, h)| *h + Duration::from_secs(10) >= w[0] && *h <= w[1])
            .map(|(what, h)| format!("{what} at {:.1}", (*h - t0).as_secs_f64()))
            .collect();
        eprintln!(
            "soak: no apply from {:.1} to {:.1} s; heals near: {near:?}",
            (w[0] - t0).as_secs_f64(),
            (w[1] - t0).as_secs_f64()
        );
    }
    assert!(kills >= 1 && applied.len() >= 3, "the soak did too little");
    assert!(outage_done, "the database was never stopped");

    // Each proposal seen applied is on the branch once, as the commit its client was told.
    let log = git(
        &remote,
        &[
            "log",
            "--format=%H%x09%(trailers:key=Vaultgate-Proposal,valueonly,separator=%x2C)%x09%(trailers:key=Vaultgate-Job,valueonly,separator=%x2C)",
            "main",
        ],
    );
    let rows: Vec<Vec<&str>> = log.lines().map(|l| l.split('\t').collect()).collect();
    for (id, commit) in &applied {
        let with: Vec<&str> = rows.iter().filter(|r| r[1] == id).map(|r| r[0]).collect();
        assert_eq!(with, [commit.as_str()], "proposal {id}");
    }
    // No job landed twice.
    let jobs: Vec<&str> = rows.iter().map(|r| r[2]).filter(|j| !j.is_empty()).collect();
    let unique: std::collections::BTreeSet<&&str> = jobs.iter().collect();
    assert_eq!(unique.len(), jobs.len(), "a Vaultgate-Job trailer twice");
    // Every push of the person kept.
    for c in &pushes {
        assert!(
            crate::team::is_ancestor(&remote, c, "main"),
            "the person's {c} is not on main"
        );
    }
    // The branch only moved forward: each reflog entry descends from the one before.
    let reflog = git(&remote, &["reflog", "show", "--format=%H", "main"]);
    let entries: Vec<&str> = reflog.lines().collect();
    // One entry per push: the person's, and the applies' (some carry a group of commits).
    assert!(
        entries.len() > pushes.len() && entries.len() <= pushes.len() + applied.len() + undone + 1,
        "the remote's reflog has {} entries for {} pushes of the person and {} applies",
        entries.len(),
        pushes.len(),
        applied.len()
    );
    eprintln!(
        "soak: {} applies and undos in {} pushes",
        applied.len() + undone,
        entries.len() - pushes.len()
    );
    for w in entries.windows(2) {
        assert!(
            crate::team::is_ancestor(&remote, w[1], w[0]),
            "{} → {} is not a fast-forward",
            w[1],
            w[0]
        );
    }
    // Nothing left in flight, every chain verifies, every clone converges on the branch.
    let main = git(&remote, &["rev-parse", "main"]).trim().to_owned();
    for (i, g) in team.gateways.iter().enumerate() {
        let s: Value = serde_json::from_str(&g.ok(&["team", "status", "--json"])).unwrap();
        assert_eq!(s["vaults"][0]["pendingJobs"], json!(0), "{s}");
        assert!(
            s["vaults"][0]["applier"]["epoch"].as_u64().unwrap() >= applied.len().div_ceil(4) as u64,
            "a take of the lease serves at most 4 writes: {s}"
        );
        g.ok(&["audit", "verify"]);
        let clone = g.home.join("vaults/notes");
        let deadline = Instant::now() + Duration::from_secs(30);
        while git(&clone, &["rev-parse", "HEAD"]).trim() != main {
            assert!(
                Instant::now() < deadline,
                "gateway {i}'s clone never reached {main}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    for (g, srv) in servers.iter().enumerate() {
        keep_log(srv, &format!("g{}-end", g + 1));
    }
    drop(servers);
    // And what every team scenario ends with.
    crate::team_invariants::hold(&team, &remote).await;

    // Last (so a long run reports the invariants above even when this bound fails): after each
    // heal an apply succeeded within 5 s (while the clients still ran).
    let applied_at = world.applied_at.lock().unwrap().clone();
    for (what, at) in &heals {
        if *at + Duration::from_secs(5) > world.end {
            continue;
        }
        let first = applied_at.iter().filter(|t| *t >= at).min();
        let after = first.map(|t| t.duration_since(*at));
        eprintln!("soak: {what}: the next apply after {after:?}");
        assert!(
            after.is_some_and(|a| a <= Duration::from_secs(5)),
            "no apply within 5 s after {what}: {after:?}"
        );
    }
}
