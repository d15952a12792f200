//! Critical tools through the real binary (docs/contract.md#critical-operations): `delete_permanent` and `empty_trash` run only
//! as two calls through a challenge; every refusal names its code, carries a fresh challenge for
//! the call as sent and deletes nothing; the exact second call executes once, even when sent twice
//! at the same time, and is a history barrier (docs/contract.md#history).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::util::{Client, Env, Reply, audit_lines};

// ---- helpers ------------------------------------------------------------------------------------

use crate::util::Checked as Session;

/// What the critical tests ask of a session beyond a checked call.
trait Critical {
    async fn challenge(&self, tool: &str, args: Value) -> Value;
    async fn revision(&self) -> u64;
}

impl Critical for Session {
    /// The first call: returns the challenge object.
    async fn challenge(&self, tool: &str, args: Value) -> Value {
        let v = self.ok(tool, args.clone()).await;
        assert_eq!(v["status"], "challenge", "{tool}({args}): {v}");
        assert!(v.get("deleted").is_none() && v.get("removed").is_none(), "{v}");
        v["challenge"].clone()
    }

    async fn revision(&self) -> u64 {
        self.ok("get_vault_overview", json!({})).await["revision"]
            .as_u64()
            .unwrap()
    }
}

/// The first call's arguments plus the challenge fields of `c`.
fn second(first: &Value, c: &Value) -> Value {
    let mut a = first.clone();
    a["challengeId"] = c["challengeId"].clone();
    a["planHash"] = c["planHash"].clone();
    a["acknowledged"] = true.into();
    a
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

fn is_hex64(v: &Value) -> bool {
    v.as_str()
        .is_some_and(|s| s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// Asserts a well-formed challenge listing exactly `affected`.
fn assert_challenge(c: &Value, affected: &[&str], revision: u64) {
    assert!(c["challengeId"].as_str().is_some_and(|s| !s.is_empty()), "{c}");
    assert!(is_hex64(&c["planHash"]), "{c}");
    assert_eq!(strings(&c["affected"]), affected, "{c}");
    assert_eq!(c["count"], affected.len() as u64, "{c}");
    assert_eq!(c["recoverability"], "irreversible", "{c}");
    assert_eq!(c["revision"], revision, "{c}");
    let expires = OffsetDateTime::parse(c["expiresAt"].as_str().unwrap(), &Rfc3339).unwrap();
    assert_eq!(expires.offset(), time::UtcOffset::UTC, "{c}");
    assert!(expires > OffsetDateTime::now_utc(), "{c}");
}

/// Asserts a refusal with `code` that carries a fresh challenge (not `old`) listing `affected`.
fn assert_refused_with_fresh(e: &Value, code: &str, old: &Value, affected: &[&str]) -> Value {
    assert_eq!(e["code"], code, "{e}");
    assert_eq!(e["retryable"], false, "{e}");
    let fresh = e
        .get("challenge")
        .unwrap_or_else(|| panic!("{code}: no fresh challenge in {e}"));
    assert_ne!(fresh["challengeId"], old["challengeId"], "{e}");
    assert_ne!(fresh["planHash"], old["planHash"], "{e}");
    assert_challenge(fresh, affected, fresh["revision"].as_u64().unwrap());
    fresh.clone()
}

fn exists_all(vault: &Path, paths: &[&str]) -> bool {
    paths.iter().all(|p| vault.join(p).is_file())
}

fn set_challenge_ttl(env: &Env, seconds: i64) {
    let path = env.home.join("gateway.toml");
    let mut config: toml::Table = toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let limits = config
        .entry("limits")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    limits
        .as_table_mut()
        .unwrap()
        .insert("challenge_ttl_seconds".into(), toml::Value::Integer(seconds));
    std::fs::write(&path, toml::to_string(&config).unwrap()).unwrap();
}

/// Proposes deleting `path` and applies it: the note moves to the vault trash.
async fn trash(s: &Session, path: &str, key: &str) -> String {
    let hash = s.ok("read_note", json!({"path": path})).await["hash"].clone();
    let p = s
        .ok(
            "propose_delete",
            json!({"path": path, "baseHash": hash, "reason": "test"}),
        )
        .await;
    let a = s
        .ok(
            "apply_proposal",
            json!({"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": key}),
        )
        .await;
    assert_eq!(a["applied"], true);
    format!(".vaultgate/trash/{}/{path}", p["id"].as_str().unwrap())
}

const A: &str = "z/attention.md";
const B: &str = "notes/cooking.md";

// ---- the surface --------------------------------------------------------------------------------

#[tokio::test]
async fn critical_tools_carry_destructive_annotations_critical_meta_and_schemas() {
    let env = Env::new();
    let (_, token) = env.token("reader", "read");
    let c = env.stdio(&token).await;
    let tools: Vec<Value> = c
        .inner
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| serde_json::to_value(t).unwrap())
        .collect();
    for (name, inputs, required) in [
        (
            "delete_permanent",
            &[
                "vault",
                "paths",
                "idempotencyKey",
                "challengeId",
                "planHash",
                "acknowledged",
            ][..],
            &["idempotencyKey", "paths"][..],
        ),
        (
            "empty_trash",
            &[
                "vault",
                "idempotencyKey",
                "challengeId",
                "planHash",
                "acknowledged",
            ][..],
            &["idempotencyKey"][..],
        ),
    ] {
        let t = tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} is not listed"));
        assert_eq!(t["annotations"]["destructiveHint"], true, "{t}");
        assert_eq!(t["annotations"]["readOnlyHint"], false, "{t}");
        assert_eq!(
            t["_meta"],
            json!({"risk": "critical", "approval": "agent-challenge", "requiresCriticalConfirmation": true}),
            "{t}"
        );
        let props: BTreeSet<&str> = t["inputSchema"]["properties"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(props, inputs.iter().copied().collect(), "{t}");
        let req: BTreeSet<&str> = t["inputSchema"]["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap())
            .collect();
        assert_eq!(req, required.iter().copied().collect(), "{t}");
        let out = &t["outputSchema"];
        assert_eq!(out["type"], "object", "{t}");
        jsonschema::draft202012::new(out).unwrap();
        let out_props = out["properties"].as_object().unwrap();
        for field in ["status", "challenge", "deleted", "removed"] {
            assert!(out_props.contains_key(field), "{name}: {field} in {out}");
        }
        assert_eq!(
            out["required"],
            json!(["status"]),
            "{name}: only status is always present"
        );
    }
    c.close().await;
}

#[tokio::test]
async fn read_and_propose_tiers_are_capability_denied_and_nothing_is_deleted() {
    let env = Env::new();
    for tier in ["read", "propose"] {
        let (_, token) = env.token(&format!("t-{tier}"), tier);
        let c = env.stdio(&token).await;
        for (tool, args) in [
            ("delete_permanent", json!({"paths": [A], "idempotencyKey": "k"})),
            ("empty_trash", json!({"idempotencyKey": "k"})),
        ] {
            assert_eq!(
                c.call(tool, args).await.code(),
                "CAPABILITY_DENIED",
                "{tier} {tool}"
            );
        }
        c.close().await;
    }
    assert!(exists_all(&env.vault, &[A, B]));
}

#[tokio::test]
async fn bad_first_calls_are_refused_before_any_challenge() {
    let env = Env::new();
    let (_, token) = env.token("agent", "auto");
    let s = Session::open(&env, &token).await;
    let cases = [
        (
            json!({"paths": ["../outside.md"], "idempotencyKey": "k"}),
            "PATH_INVALID",
        ),
        (
            json!({"paths": [".vaultgate/write.lock"], "idempotencyKey": "k"}),
            "PATH_DENIED",
        ),
        (
            json!({"paths": ["inbox/README.md"], "idempotencyKey": "k"}),
            "PATH_DENIED",
        ),
        (
            json!({"paths": [A, "z/missing.md"], "idempotencyKey": "k"}),
            "NOT_FOUND",
        ),
        (json!({"paths": [], "idempotencyKey": "k"}), "INVALID_ARGUMENT"),
        (json!({"paths": [A], "idempotencyKey": " "}), "INVALID_ARGUMENT"),
        (json!({"paths": [A]}), "INVALID_ARGUMENT"),
        (
            json!({"paths": [A], "idempotencyKey": "k", "acknowledged": "yes"}),
            "INVALID_ARGUMENT",
        ),
        (
            json!({"paths": [A], "idempotencyKey": "k", "force": true}),
            "INVALID_ARGUMENT",
        ),
    ];
    for (args, code) in cases {
        let e = s.err("delete_permanent", args.clone()).await;
        assert_eq!(e["code"], code, "{args}: {e}");
        assert!(e.get("challenge").is_none(), "{args}: {e}");
    }
    assert!(exists_all(&env.vault, &[A, B]));
    s.close().await;
}

// ---- the two calls ------------------------------------------------------------------------------

#[tokio::test]
async fn the_first_call_only_returns_a_challenge() {
    let env = Env::new();
    let (_, token) = env.token("agent", "auto");
    let s = Session::open(&env, &token).await;
    let rev = s.revision().await;
    let c = s
        .challenge(
            "delete_permanent",
            json!({"paths": [B, A, B], "idempotencyKey": "k1"}),
        )
        .await;
    assert_challenge(&c, &[B, A], rev);
    let expires = OffsetDateTime::parse(c["expiresAt"].as_str().unwrap(), &Rfc3339).unwrap();
    let ttl = (expires - OffsetDateTime::now_utc()).whole_seconds();
    assert!((290..=300).contains(&ttl), "default TTL is 300 s, got {ttl}");
    assert!(exists_all(&env.vault, &[A, B]), "the first call executes nothing");
    assert_eq!(s.revision().await, rev);
    // Another first call is another challenge.
    let again = s
        .challenge(
            "delete_permanent",
            json!({"paths": [A, B], "idempotencyKey": "k1"}),
        )
        .await;
    assert_ne!(again["challengeId"], c["challengeId"]);
    s.close().await;
}

#[tokio::test]
async fn the_exact_second_call_deletes_once_is_a_history_barrier_and_is_audited() {
    let env = Env::new();
    let (cred, token) = env.token("agent", "auto");
    let s = Session::open(&env, &token).await;
    // An undoable change first, so the barrier has something to stop.
    let p = s
        .ok(
            "propose_new_note",
            json!({"path": "z/fresh.md", "content": "# Fresh\n", "reason": "test"}),
        )
        .await;
    s.ok(
        "apply_proposal",
        json!({"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": "apply-1"}),
    )
    .await;
    let overview = s.ok("get_vault_overview", json!({})).await;
    assert!(overview["history"]["undoTop"].is_string(), "{overview}");
    let rev = overview["revision"].as_u64().unwrap();

    let first = json!({"paths": [B, A], "idempotencyKey": "del-1"});
    let c = s.challenge("delete_permanent", first.clone()).await;
    let done = s.ok("delete_permanent", second(&first, &c)).await;
    assert_eq!(done, json!({"status": "executed", "deleted": [B, A]}));
    assert!(!env.vault.join(A).exists() && !env.vault.join(B).exists());
    assert!(
        !env.vault.join(".vaultgate/trash").exists(),
        "permanent: nothing went to the trash"
    );
    let overview = s.ok("get_vault_overview", json!({})).await;
    assert_eq!(overview["revision"], rev + 1, "{overview}");
    assert!(
        overview["history"].get("undoTop").is_none(),
        "undo stops at the barrier: {overview}"
    );

    // Exactly one audit line for the executed call, naming its challenge.
    let lines: Vec<Value> = audit_lines(&env)
        .into_iter()
        .filter(|l| l["tool"] == "delete_permanent")
        .collect();
    let ok: Vec<&Value> = lines.iter().filter(|l| l["outcome"] == "ok").collect();
    assert_eq!(ok.len(), 2, "first and second call: {lines:?}");
    assert!(ok.iter().all(|l| l["challengeId"] == c["challengeId"]), "{ok:?}");
    assert!(ok.iter().all(|l| l["actor"]["credentialId"] == cred.as_str()));
    assert!(ok.iter().all(|l| l["vault"] == "basic"));

    // A replay after success: consumed, nothing happens again. The notes are gone, so no fresh
    // challenge can be issued for this call, and the message says so.
    let e = s.err("delete_permanent", second(&first, &c)).await;
    assert_eq!(e["code"], "CHALLENGE_CONSUMED", "{e}");
    assert!(e.get("challenge").is_none(), "{e}");
    assert!(e["message"].as_str().unwrap().contains("does not exist"), "{e}");
    assert_eq!(s.revision().await, rev + 1);
    env.ok(&["audit", "verify"]);
    s.close().await;
}

#[tokio::test]
async fn every_refusal_carries_a_fresh_challenge_and_deletes_nothing() {
    let env = Env::new();
    let (_, token) = env.token("agent", "auto");
    let s = Session::open(&env, &token).await;
    let first = json!({"paths": [A, B], "idempotencyKey": "k1"});
    let c = s.challenge("delete_permanent", first.clone()).await;
    let exact = second(&first, &c);
    let without = |field: &str| {
        let mut a = exact.clone();
        a.as_object_mut().unwrap().remove(field);
        a
    };
    let with = |field: &str, value: Value| {
        let mut a = exact.clone();
        a[field] = value;
        a
    };
    let mut forged = c["planHash"].as_str().unwrap().to_owned();
    let last = if forged.ends_with('0') { "1" } else { "0" };
    forged.replace_range(63.., last);
    let cases: Vec<(&str, Value, &str, Vec<&str>)> = vec![
        (
            "planHash missing",
            without("planHash"),
            "CHALLENGE_REQUIRED",
            vec![B, A],
        ),
        (
            "challengeId missing",
            without("challengeId"),
            "CHALLENGE_REQUIRED",
            vec![B, A],
        ),
        (
            "acknowledged missing",
            without("acknowledged"),
            "CHALLENGE_REQUIRED",
            vec![B, A],
        ),
        (
            "acknowledged alone",
            json!({"paths": [A, B], "idempotencyKey": "k1", "acknowledged": true}),
            "CHALLENGE_REQUIRED",
            vec![B, A],
        ),
        (
            "acknowledged false",
            with("acknowledged", false.into()),
            "CHALLENGE_REQUIRED",
            vec![B, A],
        ),
        (
            "tampered paths",
            with("paths", json!([A])),
            "CHALLENGE_MISMATCH",
            vec![A],
        ),
        (
            "another idempotencyKey",
            with("idempotencyKey", "k2".into()),
            "CHALLENGE_MISMATCH",
            vec![B, A],
        ),
        (
            "forged planHash",
            with("planHash", forged.into()),
            "CHALLENGE_MISMATCH",
            vec![B, A],
        ),
        (
            "planHash of another challenge",
            with(
                "planHash",
                s.challenge("delete_permanent", first.clone()).await["planHash"].clone(),
            ),
            "CHALLENGE_MISMATCH",
            vec![B, A],
        ),
        (
            "unknown challengeId",
            with("challengeId", "0190f0f0-0000-7000-8000-000000000000".into()),
            "CHALLENGE_MISMATCH",
            vec![B, A],
        ),
    ];
    let rev = s.revision().await;
    for (name, args, code, affected) in cases {
        let e = s.err("delete_permanent", args).await;
        let fresh = assert_refused_with_fresh(&e, code, &c, &affected);
        assert_eq!(fresh["revision"], rev, "{name}");
        assert!(exists_all(&env.vault, &[A, B]), "{name}: nothing deleted");
    }
    assert_eq!(s.revision().await, rev);
    // None of that used the challenge: the exact second call still executes.
    let done = s.ok("delete_permanent", exact).await;
    assert_eq!(done["deleted"], json!([B, A]));
    s.close().await;
}

#[tokio::test]
async fn another_credential_cannot_use_the_challenge() {
    let env = Env::new();
    let (_, token_a) = env.token("agent-a", "auto");
    let (_, token_b) = env.token("agent-b", "full");
    let a = Session::open(&env, &token_a).await;
    let b = Session::open(&env, &token_b).await;
    let first = json!({"paths": [A], "idempotencyKey": "k1"});
    let c = a.challenge("delete_permanent", first.clone()).await;
    let e = b.err("delete_permanent", second(&first, &c)).await;
    let fresh = assert_refused_with_fresh(&e, "CHALLENGE_MISMATCH", &c, &[A]);
    assert!(env.vault.join(A).exists());
    // The fresh challenge is B's own; A's stays A's.
    assert_eq!(
        b.ok("delete_permanent", second(&first, &fresh)).await["deleted"],
        json!([A])
    );
    let e = a.err("delete_permanent", second(&first, &c)).await;
    assert_eq!(
        e["code"], "CHALLENGE_STALE",
        "the vault moved under A's challenge: {e}"
    );
    a.close().await;
    b.close().await;
}

#[tokio::test]
async fn an_expired_challenge_is_refused() {
    let env = Env::new();
    set_challenge_ttl(&env, 1);
    let (_, token) = env.token("agent", "auto");
    let s = Session::open(&env, &token).await;
    let first = json!({"paths": [A], "idempotencyKey": "k1"});
    let c = s.challenge("delete_permanent", first.clone()).await;
    let expires = OffsetDateTime::parse(c["expiresAt"].as_str().unwrap(), &Rfc3339).unwrap();
    assert!(expires - OffsetDateTime::now_utc() <= time::Duration::seconds(1));
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let e = s.err("delete_permanent", second(&first, &c)).await;
    assert_refused_with_fresh(&e, "CHALLENGE_EXPIRED", &c, &[A]);
    assert!(env.vault.join(A).exists());
    s.close().await;
}

#[tokio::test]
async fn a_change_to_the_vault_between_the_calls_makes_the_challenge_stale() {
    let env = Env::new();
    let (_, token) = env.token("agent", "auto");
    let s = Session::open(&env, &token).await;
    let rev = s.revision().await;
    let first = json!({"paths": [A], "idempotencyKey": "k1"});
    let c = s.challenge("delete_permanent", first.clone()).await;
    // Another note is edited on disk; the watcher counts it.
    let other = env.vault.join("z/softmax.md");
    let mut text = std::fs::read_to_string(&other).unwrap();
    text.push_str("\nOne more line.\n");
    std::fs::write(&other, text).unwrap();
    let mut moved = rev;
    for _ in 0..100 {
        moved = s.revision().await;
        if moved > rev {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(moved > rev, "the watcher moved the revision");
    let e = s.err("delete_permanent", second(&first, &c)).await;
    let fresh = assert_refused_with_fresh(&e, "CHALLENGE_STALE", &c, &[A]);
    assert_eq!(fresh["revision"], moved);
    assert!(env.vault.join(A).exists());
    // The fresh challenge, made against the vault as it is now, executes.
    assert_eq!(
        s.ok("delete_permanent", second(&first, &fresh)).await["deleted"],
        json!([A])
    );
    s.close().await;
}

#[tokio::test]
async fn an_edit_not_yet_seen_by_the_watcher_still_makes_the_challenge_stale() {
    let env = Env::new();
    let (_, token) = env.token("agent", "auto");
    let s = Session::open(&env, &token).await;
    let first = json!({"paths": [A], "idempotencyKey": "k1"});
    let c = s.challenge("delete_permanent", first.clone()).await;
    // The note itself changes and the second call follows at once.
    std::fs::write(env.vault.join(A), "# Attention\n\nrewritten by a person\n").unwrap();
    let e = s.err("delete_permanent", second(&first, &c)).await;
    assert_refused_with_fresh(&e, "CHALLENGE_STALE", &c, &[A]);
    assert_eq!(
        std::fs::read_to_string(env.vault.join(A)).unwrap(),
        "# Attention\n\nrewritten by a person\n"
    );
    s.close().await;
}

#[tokio::test]
async fn the_same_second_call_sent_twice_concurrently_executes_once() {
    let env = Env::new();
    let (_, token) = env.token("agent", "auto");
    let one = Session::open(&env, &token).await;
    let two = Session::open(&env, &token).await;
    let first = json!({"paths": [A, B], "idempotencyKey": "k1"});
    let c = one.challenge("delete_permanent", first.clone()).await;
    let args = second(&first, &c);
    let (r1, r2) = tokio::join!(
        one.call("delete_permanent", args.clone()),
        two.call("delete_permanent", args.clone())
    );
    let mut executed = 0;
    let mut consumed = 0;
    for r in [r1, r2] {
        match r {
            Reply::Ok(v) => {
                assert_eq!(v, json!({"status": "executed", "deleted": [B, A]}));
                executed += 1;
            }
            Reply::Err(e) => {
                assert_eq!(e["code"], "CHALLENGE_CONSUMED", "{e}");
                consumed += 1;
            }
        }
    }
    assert_eq!((executed, consumed), (1, 1));
    assert!(!env.vault.join(A).exists() && !env.vault.join(B).exists());
    let executions = audit_lines(&env)
        .into_iter()
        .filter(|l| l["tool"] == "delete_permanent" && l["outcome"] == "ok" && l["event"] == "tool_call")
        .count();
    assert_eq!(executions, 2, "one first call and one execution");
    let history_barriers = one.ok("get_vault_overview", json!({})).await;
    assert!(history_barriers["history"].get("undoTop").is_none());
    one.close().await;
    two.close().await;
}

// ---- empty_trash --------------------------------------------------------------------------------

#[tokio::test]
async fn empty_trash_removes_what_applied_deletions_trashed() {
    let env = Env::new();
    let (_, token) = env.token("agent", "auto");
    let s = Session::open(&env, &token).await;
    // An empty trash: a challenge with nothing in it.
    let empty = s.challenge("empty_trash", json!({"idempotencyKey": "e0"})).await;
    assert_challenge(&empty, &[], s.revision().await);

    let t1 = trash(&s, A, "a1").await;
    let t2 = trash(&s, B, "a2").await;
    assert!(env.vault.join(&t1).is_file() && env.vault.join(&t2).is_file());
    let mut in_trash = vec![t1.clone(), t2.clone()];
    in_trash.sort();
    let first = json!({"idempotencyKey": "e1"});
    let c = s.challenge("empty_trash", first.clone()).await;
    let want: Vec<&str> = in_trash.iter().map(String::as_str).collect();
    assert_challenge(&c, &want, s.revision().await);

    // Another deletion lands in the trash between the calls: the plan no longer holds.
    let t3 = trash(&s, "z/softmax.md", "a3").await;
    let e = s.err("empty_trash", second(&first, &c)).await;
    in_trash.push(t3.clone());
    in_trash.sort();
    let want: Vec<&str> = in_trash.iter().map(String::as_str).collect();
    let fresh = assert_refused_with_fresh(&e, "CHALLENGE_STALE", &c, &want);
    assert!(env.vault.join(&t1).is_file(), "nothing removed");

    let overview = s.ok("get_vault_overview", json!({})).await;
    assert!(overview["history"]["undoTop"].is_string(), "{overview}");
    let rev = overview["revision"].as_u64().unwrap();
    let done = s.ok("empty_trash", second(&first, &fresh)).await;
    assert_eq!(done, json!({"status": "executed", "removed": 3}));
    for t in [&t1, &t2, &t3] {
        assert!(!env.vault.join(t).exists(), "{t} removed");
    }
    let overview = s.ok("get_vault_overview", json!({})).await;
    assert_eq!(overview["revision"], rev + 1);
    assert!(
        overview["history"].get("undoTop").is_none(),
        "the trashed notes can no longer be restored: undo stops here ({overview})"
    );
    // A replay: consumed, with a fresh challenge for the (now empty) trash.
    let e = s.err("empty_trash", second(&first, &fresh)).await;
    assert_refused_with_fresh(&e, "CHALLENGE_CONSUMED", &fresh, &[]);
    assert!(
        e["message"].as_str().unwrap().contains("\"removed\":3"),
        "the replay says what the execution did: {e}"
    );
    env.ok(&["audit", "verify"]);
    s.close().await;
}

// ---- crash safety -------------------------------------------------------------------------------

/// `vaultgate stdio` that aborts at `step` (`VAULTGATE_TEST_FAILPOINT`), as a power cut would.
async fn stdio_failing_at(env: &Env, token: &str, step: &str) -> Client {
    let mut cmd = tokio::process::Command::new(crate::util::bin());
    cmd.arg("stdio")
        .arg("--home")
        .arg(&env.home)
        .env_remove("VAULTGATE_HOME")
        .env("VAULTGATE_TOKEN", token)
        .env("VAULTGATE_TEST_FAILPOINT", step)
        .stderr(std::process::Stdio::null());
    let transport = rmcp::transport::TokioChildProcess::new(cmd).unwrap();
    Client {
        inner: rmcp::ServiceExt::serve((), transport).await.unwrap(),
    }
}

#[tokio::test]
async fn an_execution_cut_short_by_a_crash_is_finished_once_at_the_next_start() {
    // The steps of the shared write transaction (docs/contract.md#proposals "Rules of the write path"), before the
    // commit; a crash after the commit leaves nothing to finish.
    for step in [
        "critical_after_intent",
        "critical_after_first_op",
        "critical_after_write",
        "critical_after_audit",
    ] {
        let env = Env::new();
        let (_, token) = env.token("agent", "auto");
        let before = {
            let s = Session::open(&env, &token).await;
            let r = s.revision().await;
            s.close().await;
            r
        };
        let first = json!({"paths": [A, B], "idempotencyKey": "k1"});
        let crashing = stdio_failing_at(&env, &token, step).await;
        let c = match crashing.call("delete_permanent", first.clone()).await {
            Reply::Ok(v) => v["challenge"].clone(),
            Reply::Err(e) => panic!("{step}: {e}"),
        };
        let cut = tokio::time::timeout(
            Duration::from_secs(30),
            crashing.try_call("delete_permanent", second(&first, &c)),
        )
        .await
        .expect("the aborted server answers nothing and closes");
        assert!(cut.is_err(), "{step}: the process aborted: {cut:?}");
        crashing.close().await;

        // The next start finishes the execution: both notes gone, one barrier, one revision.
        let s = Session::open(&env, &token).await;
        assert!(
            !env.vault.join(A).exists() && !env.vault.join(B).exists(),
            "{step}"
        );
        let overview = s.ok("get_vault_overview", json!({})).await;
        assert_eq!(overview["revision"], before + 1, "{step}: {overview}");
        assert!(overview["history"].get("undoTop").is_none(), "{step}: {overview}");
        let e = s.err("delete_permanent", second(&first, &c)).await;
        assert_eq!(e["code"], "CHALLENGE_CONSUMED", "{step}: {e}");
        assert!(
            e["message"].as_str().unwrap().contains(B),
            "{step}: the replay says what was deleted: {e}"
        );
        // Exactly one success record for the execution: the call's own once its audit line was
        // written (after_audit), else the one recovery writes (`critical.recovered`). The first
        // call's record names the challenge too.
        let mine: Vec<Value> = audit_lines(&env)
            .into_iter()
            .filter(|l| {
                l["tool"] == "delete_permanent"
                    && l["challengeId"] == c["challengeId"]
                    && l["outcome"] == "ok"
                    && l["event"] != "apply.rolled_back"
            })
            .collect();
        let recovered = mine.iter().filter(|l| l["event"] == "critical.recovered").count();
        let want = usize::from(step != "critical_after_audit");
        assert_eq!(recovered, want, "{step}: critical.recovered records: {mine:?}");
        assert_eq!(
            mine.len(),
            2,
            "{step}: the challenge and exactly one execution record: {mine:?}"
        );
        env.ok(&["audit", "verify"]);
        s.close().await;
    }
}

/// The repair of `_applied.jsonl` after a crash (which appends the lines a group's commits left
/// missing) never appends a line twice: an apply undone and then cut from the history by a
/// permanent deletion's barrier stays the chain's last line, and the next apply's recovery finds
/// nothing missing.
#[tokio::test]
async fn an_undone_apply_behind_a_barrier_leaves_applied_jsonl_without_duplicates() {
    let env = Env::new();
    let (_, token) = env.token("agent", "auto");
    let s = Session::open(&env, &token).await;
    let mut ids = Vec::new();
    let mut apply = async |path: &str| {
        let p = s
            .ok(
                "propose_new_note",
                json!({"path": path, "content": "# Note\n", "reason": "test"}),
            )
            .await;
        let a = s
            .ok(
                "apply_proposal",
                json!({"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": format!("apply-{}", path.replace('/', "-"))}),
            )
            .await;
        ids.push(p["id"].as_str().unwrap().to_owned());
        a["historyEntryId"].clone()
    };
    apply("z/one.md").await;
    let two = apply("z/two.md").await;
    s.ok(
        "history_undo",
        json!({"expectedHistoryEntryId": two, "idempotencyKey": "undo-two"}),
    )
    .await;
    let first = json!({"paths": [A], "idempotencyKey": "del-1"});
    let c = s.challenge("delete_permanent", first.clone()).await;
    s.ok("delete_permanent", second(&first, &c)).await;
    apply("z/three.md").await;
    s.close().await;
    let text = std::fs::read_to_string(env.vault.join("inbox/_applied.jsonl")).unwrap();
    let logged: Vec<String> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(logged, ids, "each apply once, in order");
}
