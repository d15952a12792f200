//! Team mode under partitions (a TCP proxy between a gateway and the team's database stops
//! forwarding, every socket kept open). The gateway applying to a vault is cut off while its push
//! hangs in the remote's `pre-receive` hook: its lease runs out; the caller's retry through
//! another gateway takes it over at the next epoch and settles the apply from the remote;
//! whatever the cut-off gateway does once its push returns is refused. Either way the proposal
//! lands exactly once, the key answers one result on every gateway, and the chain verifies; once
//! healed, the cut-off gateway applies again within 5 s. And a
//! gateway whose listening connection is cut when a token is revoked elsewhere serves that token
//! nothing more: its requests fail closed until a fresh connection reads the revocation.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::team_writes::{apply_args, head, team_with_vault};
use crate::util::{call, to_reply};

/// A TCP proxy to PostgreSQL that can be partitioned: cut, it forwards nothing either way and
/// keeps every connection open (as a network dropping packets would); healed, what it held
/// flows on. Runs on a runtime of its own, so the test's awaits never starve it.
struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
    /// Each connection's own switch (see [`Proxy::cut_open`]).
    open: Arc<std::sync::Mutex<Vec<Arc<AtomicBool>>>>,
    rt: Option<tokio::runtime::Runtime>,
}

impl Proxy {
    fn start(upstream: u16) -> Proxy {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let cut = Arc::new(AtomicBool::new(false));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let open = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (held, conns) = (cut.clone(), open.clone());
        rt.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            while let Ok((down, _)) = listener.accept().await {
                let Ok(up) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await else {
                    continue;
                };
                let own = Arc::new(AtomicBool::new(false));
                conns.lock().unwrap().push(own.clone());
                let (dr, dw) = down.into_split();
                let (ur, uw) = up.into_split();
                tokio::spawn(pipe(dr, uw, held.clone(), own.clone()));
                tokio::spawn(pipe(ur, dw, held.clone(), own));
            }
        });
        Proxy {
            port,
            cut,
            open,
            rt: Some(rt),
        }
    }

    /// Cuts the connections open now (a gateway's listening one among them); new ones pass.
    fn cut_open(&self) {
        for c in self.open.lock().unwrap().iter() {
            c.store(true, Ordering::SeqCst);
        }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }

    fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
        for c in self.open.lock().unwrap().iter() {
            c.store(false, Ordering::SeqCst);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    cut: Arc<AtomicBool>,
    own: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while cut.load(Ordering::SeqCst) || own.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within 30 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_gateway_cut_off_from_the_database_mid_push_is_fenced_out_and_the_apply_lands_once() {
    let (team, remote, _person) = team_with_vault(&["g1", "g2"]);
    team.g(0).ok(&["team", "set", "lease_seconds", "3"]);
    // g1 reaches the database through the proxy.
    let proxy = Proxy::start(team.cluster.port);
    crate::http::edit_config(team.g(0), "team", |t| {
        let url = format!("postgres://postgres@127.0.0.1:{}/team", proxy.port);
        t.insert("database".into(), toml::Value::String(url));
    });
    // The remote holds the first push of a round while `hold` exists.
    let w = team.root.path().join("hook");
    std::fs::create_dir(&w).unwrap();
    let hook = remote.join("hooks/pre-receive");
    let script = format!(
        "#!/bin/sh\nif mkdir '{w}/first' 2>/dev/null; then\n  touch '{w}/started'\n  while [ -e '{w}/hold' ]; do sleep 0.05; done\nfi\n",
        w = w.display()
    );
    std::fs::write(&hook, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let lease = |g: &crate::util::Env| -> Value {
        let s: Value = serde_json::from_str(&g.ok(&["team", "status", "--json"])).unwrap();
        s["vaults"][0]["applier"].clone()
    };

    let (_, token) = team.g(1).token("agent", "full");
    let g2 = team.g(1).stdio(&token).await;
    // Round 0: g1's push lands while it is cut off. Round 1: g2 applies first, and g1's held
    // push then meets a branch that moved (refused by its compare-and-swap).
    for (round, lands_late) in [(0, true), (1, false)] {
        let _ = std::fs::remove_dir(w.join("first"));
        let _ = std::fs::remove_file(w.join("started"));
        std::fs::write(w.join("hold"), "").unwrap();
        let p = call(
            &g2,
            "propose_new_note",
            json!({"path": format!("cut/{round}.md"), "content": format!("# Cut {round}\n"), "reason": "r"}),
        )
        .await
        .ok();
        let key = format!("cut-{round}");
        let args = apply_args(&p, &key);
        let before = head(&remote);

        let g1 = team.g(0).stdio(&token).await;
        let sent = args.clone();
        let applying = tokio::spawn(async move {
            let r = g1.try_call("apply_proposal", sent).await;
            (g1, r)
        });
        until("g1's push reached the remote", || w.join("started").exists()).await;
        let held = lease(team.g(1));
        assert_eq!(
            (&held["gateway"], &held["held"]),
            (&json!("g1"), &json!(true)),
            "{held}"
        );
        proxy.cut();
        if lands_late {
            std::fs::remove_file(w.join("hold")).unwrap();
            until("g1's held push landed", || head(&remote) != before).await;
        }

        // The caller's retry through g2 waits for g1's lease to run out, then settles it.
        let out = call(&g2, "apply_proposal", args.clone()).await.ok();
        assert_eq!(
            (&out["applied"], &out["git"]),
            (&json!(true), &json!("committed")),
            "round {round}: {out}"
        );
        let taken = lease(team.g(1));
        assert_eq!(taken["gateway"], json!("g2"), "{taken}");
        assert!(taken["epoch"].as_i64().unwrap() > held["epoch"].as_i64().unwrap());
        if !lands_late {
            std::fs::remove_file(w.join("hold")).unwrap();
        }

        // g1's call ends without recording anything: refused, retryable.
        proxy.heal();
        let healed = Instant::now();
        let (g1, answered) = tokio::time::timeout(Duration::from_secs(60), applying)
            .await
            .expect("g1's apply never ended")
            .unwrap();
        let answered = to_reply(answered.expect("g1's transport"));
        let code = answered.code();
        assert!(
            code == "VAULT_BUSY" || code == "AUDIT_UNAVAILABLE",
            "round {round}: g1 answered {code}"
        );
        // Its caller's retry through g1 now answers the one result.
        let again = call(&g1, "apply_proposal", args).await.ok();
        assert_eq!(
            (&again["commit"], &again["replayed"]),
            (&out["commit"], &json!(true)),
            "round {round}"
        );

        // Exactly one commit of the proposal, on top of what was there.
        let id = p["id"].as_str().unwrap();
        let landed = crate::team::git(
            &remote,
            &[
                "log",
                "--format=%H",
                &format!("--grep=Vaultgate-Proposal: {id}"),
                "main",
            ],
        );
        assert_eq!(
            landed.split_whitespace().collect::<Vec<_>>(),
            [out["commit"].as_str().unwrap()]
        );
        let since = crate::team::git(&remote, &["rev-list", "--count", &format!("{before}..main")]);
        assert_eq!(since.trim(), "1", "round {round}");
        assert_eq!(
            call(&g2, "get_proposal", json!({"id": id})).await.ok()["status"],
            json!("applied")
        );
        let s: Value = serde_json::from_str(&team.g(1).ok(&["team", "status", "--json"])).unwrap();
        assert_eq!(s["vaults"][0]["pendingJobs"], json!(0), "round {round}");

        // Healed: a new apply through g1 itself is answered within 5 s of the heal.
        let q = call(
            &g1,
            "propose_new_note",
            json!({"path": format!("cut/healed-{round}.md"), "content": "# Healed\n", "reason": "r"}),
        )
        .await
        .ok();
        let applied = call(&g1, "apply_proposal", apply_args(&q, &format!("healed-{round}")))
            .await
            .ok();
        assert_eq!(applied["applied"], json!(true), "round {round}: {applied}");
        let took = healed.elapsed();
        eprintln!("round {round}: an apply through g1 answered {took:?} after the heal");
        assert!(
            took <= Duration::from_secs(5),
            "round {round}: {took:?} after the heal"
        );
        g1.close().await;
    }
    // Once recorded, by g2 only: the chain verifies, and no record of g1's after it was fenced.
    team.g(0).ok(&["audit", "verify"]);
    team.g(1).ok(&["audit", "verify"]);
    let chain = team.chain(1);
    assert!(
        chain
            .iter()
            .any(|r| r["event"] == json!("apply.recovered") && r["gateway"] == json!("g2")),
        "round 0's push was settled by g2"
    );
    g2.close().await;
    crate::team_invariants::hold(&team, &remote).await;
}

#[tokio::test]
async fn a_revocation_holds_on_a_gateway_whose_listening_connection_is_cut() {
    let team = crate::team::Team::start(&["g1", "g2"]);
    let proxy = Proxy::start(team.cluster.port);
    crate::http::edit_config(team.g(1), "team", |t| {
        let url = format!("postgres://postgres@127.0.0.1:{}/team", proxy.port);
        t.insert("database".into(), toml::Value::String(url));
    });
    let (_, token) = team.g(0).token("listener", "read");
    let srv = crate::http::Server::start(team.g(1));
    let auth = crate::http::bearer(&token);
    // A session on g2 with its stream open: served through the proxy.
    let sid = crate::http::open_session(&srv, &auth, "2025-06-18").await;
    let mut stream = reqwest::Client::new()
        .get(srv.url())
        .header("Authorization", &auth)
        .header("Accept", "text/event-stream")
        .header("Mcp-Session-Id", &sid)
        .header("MCP-Protocol-Version", "2025-06-18")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status().as_u16(), 200);

    // Every connection g2 holds is cut (its listening one too: it hears no announcement), then
    // the token is revoked through g1.
    proxy.cut_open();
    team.g(0).ok(&["token", "revoke", "listener"]);
    let revoked = Instant::now();
    // Each request after it is refused: unavailable while g2 waits on a cut connection, then
    // unauthorized once a fresh connection reads the row. Never served.
    let mut statuses = Vec::new();
    loop {
        // Longer than the database's deadline (10 s): a cut connection answers nothing before.
        let resp = reqwest::Client::new()
            .post(srv.url())
            .timeout(Duration::from_secs(60))
            .header("Authorization", &auth)
            .header("Accept", "application/json, text/event-stream")
            .header("Content-Type", "application/json")
            .header("Mcp-Session-Id", &sid)
            .header("MCP-Protocol-Version", "2025-06-18")
            .body(crate::http::request(9, "tools/list", json!({})).to_string())
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        statuses.push(status);
        assert!(
            status == 401 || status == 503 || status == 404,
            "served after the revoke: {statuses:?}"
        );
        if status != 503 {
            break;
        }
        assert!(revoked.elapsed() < Duration::from_secs(60), "{statuses:?}");
    }
    eprintln!("after the revoke: {statuses:?} within {:?}", revoked.elapsed());
    // The open stream ends by the sweep, with no announcement heard.
    let ended = tokio::time::timeout(Duration::from_secs(40), async {
        while let Ok(Some(_)) = stream.chunk().await {}
    })
    .await;
    assert!(ended.is_ok(), "the revoked credential's stream is still open");
    proxy.heal();
    // A token issued now works on g2.
    let (_, fresh) = team.g(0).token("fresh", "read");
    let sid = crate::http::open_session(&srv, &crate::http::bearer(&fresh), "2025-06-18").await;
    assert!(!sid.is_empty());
}
