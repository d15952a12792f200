//! Every input bounded before any work, the inbox quotas, and the bounded frontmatter parser
//! (docs/contract.md#limits-and-pagination; issue 11), through the real binary: oversized arguments are refused at once and
//! audited, a credential cannot hold more than its share of pending proposals, a note whose YAML
//! would explode is read and indexed without its frontmatter in bounded memory, and a limit
//! lowered in `gateway.toml` is the one applied.

use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

use crate::util::{Client, Env, Reply, audit_lines, bin, set_limits};

const MIB: usize = 1024 * 1024;

/// Refusal lines of `tool` with `code` (echoed fields may be cut, so only these are matched).
fn refusals(env: &Env, tool: &str, code: &str) -> usize {
    audit_lines(env)
        .iter()
        .filter(|r| r["tool"] == tool && r["code"] == code && r["outcome"] == "denied")
        .count()
}

fn err(r: Reply) -> Value {
    match r {
        Reply::Err(e) => e,
        Reply::Ok(v) => panic!("expected a refusal, got {v}"),
    }
}

/// Asserts an `INVALID_ARGUMENT` whose message names `limit`.
fn refused_naming(r: Reply, limit: &str) -> Value {
    let e = err(r);
    assert_eq!(e["code"], "INVALID_ARGUMENT", "{e}");
    assert_eq!(e["retryable"], false, "{e}");
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains(&format!("limits.{limit}")), "{msg}");
    e
}

/// `vaultgate stdio` with `token`, and its process id.
async fn stdio_with_pid(env: &Env, token: &str) -> (Client, u32) {
    let mut cmd = tokio::process::Command::new(bin());
    cmd.arg("stdio")
        .arg("--home")
        .arg(&env.home)
        .env_remove("VAULTGATE_HOME")
        .env("VAULTGATE_TOKEN", token)
        .stderr(std::process::Stdio::null());
    let transport = TokioChildProcess::new(cmd).unwrap();
    let pid = transport.id().expect("the server runs");
    (
        Client {
            inner: ().serve(transport).await.unwrap(),
        },
        pid,
    )
}

/// The peak resident memory of process `pid`, in bytes (`VmHWM`).
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status");
    kib * 1024
}

fn new_note(path: &str, content: &str) -> Value {
    json!({"path": path, "content": content, "reason": "a note for the limits test"})
}

#[tokio::test]
async fn a_megabyte_vault_key_or_proposal_id_is_refused_and_audited() {
    let env = Env::new();
    let (_, token) = env.token("agent", "auto");
    let c = env.stdio(&token).await;
    // A megabyte (10^6 bytes): echoed whole, the record still fits the audit log's 1 MiB line,
    // so this holds whether or not echoed fields are cut.
    let huge = "v".repeat(1_000_000);

    refused_naming(
        c.call("read_note", json!({"vault": huge, "path": "welcome.md"}))
            .await,
        "max_id_bytes",
    );
    refused_naming(
        c.call(
            "apply_proposal",
            json!({"id": "p", "proposalHash": "0".repeat(64), "idempotencyKey": huge}),
        )
        .await,
        "max_key_bytes",
    );
    refused_naming(
        c.call(
            "apply_proposal",
            json!({"id": huge, "proposalHash": "0".repeat(64), "idempotencyKey": "k1"}),
        )
        .await,
        "max_id_bytes",
    );
    // Still serving: a normal call answers.
    c.call("read_note", json!({"path": "welcome.md"})).await.ok();
    c.close().await;

    assert_eq!(refusals(&env, "read_note", "INVALID_ARGUMENT"), 1);
    assert_eq!(refusals(&env, "apply_proposal", "INVALID_ARGUMENT"), 2);
}

#[tokio::test]
async fn a_huge_query_reason_or_edit_list_is_refused_at_once_and_nothing_is_proposed() {
    let env = Env::new();
    let (_, token) = env.token("agent", "propose");
    let c = env.stdio(&token).await;
    let note = c.call("read_note", json!({"path": "z/attention.md"})).await.ok();
    let base = note["hash"].as_str().unwrap().to_owned();

    let started = Instant::now();
    let query = (0..10_000)
        .map(|i| format!("term{i}"))
        .collect::<Vec<_>>()
        .join(" ");
    refused_naming(
        c.call("search_note_content", json!({ "query": query })).await,
        "max_query_terms",
    );
    refused_naming(
        c.call("search_knowledge", json!({"query": "k".repeat(300)}))
            .await,
        "max_term_bytes",
    );
    refused_naming(
        c.call(
            "propose_new_note",
            json!({"path": "z/new.md", "content": "x\n", "reason": "r".repeat(5_000)}),
        )
        .await,
        "max_reason_chars",
    );
    let edits: Vec<Value> = (0..300)
        .map(|i| json!({"oldText": format!("nowhere {i}"), "newText": "x"}))
        .collect();
    refused_naming(
        c.call(
            "propose_note_patch",
            json!({"path": "z/attention.md", "baseHash": base, "edits": edits, "reason": "r"}),
        )
        .await,
        "max_edits",
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "refusals took {:?}",
        started.elapsed()
    );
    // Refused before any work: nothing reached the inbox.
    let listed = c.call("list_proposals", json!({})).await.ok();
    assert_eq!(listed["proposals"], json!([]));
    c.close().await;
    assert_eq!(refusals(&env, "search_note_content", "INVALID_ARGUMENT"), 1);
    assert_eq!(refusals(&env, "propose_note_patch", "INVALID_ARGUMENT"), 1);
}

#[tokio::test]
async fn the_501st_pending_proposal_of_one_credential_is_quota_exceeded() {
    let env = Env::new();
    let (_, token) = env.token("flood", "propose");
    let (_, other) = env.token("other", "propose");
    let c = env.stdio(&token).await;
    let mut ids = Vec::new();
    let mut refused = Vec::new();
    for i in 0..600 {
        match c
            .call("propose_new_note", new_note(&format!("z/flood-{i}.md"), "x\n"))
            .await
        {
            Reply::Ok(v) => ids.push(v["id"].as_str().unwrap().to_owned()),
            Reply::Err(e) => refused.push((i, e)),
        }
    }
    assert_eq!(ids.len(), 500);
    assert_eq!(refused.len(), 100);
    let (first, e) = &refused[0];
    assert_eq!(*first, 500, "the 501st is the first refused");
    assert_eq!(e["code"], "QUOTA_EXCEEDED", "{e}");
    assert_eq!(e["retryable"], false);
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains("apply or reject"), "{msg}");
    assert!(msg.contains("limits.max_pending_per_credential"), "{msg}");
    assert!(refused.iter().all(|(_, e)| e["code"] == "QUOTA_EXCEEDED"));

    // The quota is the credential's: another one still proposes.
    let o = env.stdio(&other).await;
    o.call("propose_new_note", new_note("z/flood-other.md", "x\n"))
        .await
        .ok();
    o.close().await;

    // A decision frees a place.
    env.ok(&["inbox", "reject", &ids[0], "--reason", "too many"]);
    c.call("propose_new_note", new_note("z/flood-again.md", "x\n"))
        .await
        .ok();
    assert_eq!(
        c.call("propose_new_note", new_note("z/flood-again2.md", "x\n"))
            .await
            .code(),
        "QUOTA_EXCEEDED"
    );
    c.close().await;
    assert_eq!(refusals(&env, "propose_new_note", "QUOTA_EXCEEDED"), 101);
}

#[tokio::test]
async fn a_proposal_larger_than_the_read_limit_is_refused() {
    let env = Env::new();
    std::fs::write(env.vault.join("z/grow.md"), "alpha\nbeta\n").unwrap();
    let (_, token) = env.token("agent", "propose");
    let c = env.stdio(&token).await;
    refused_naming(
        c.call("propose_new_note", new_note("z/big.md", &"b".repeat(3 * MIB)))
            .await,
        "max_proposal_bytes",
    );
    // Edits each within the limit whose result is not.
    let base = c.call("read_note", json!({"path": "z/grow.md"})).await.ok()["hash"].clone();
    let half = "h".repeat(MIB + MIB / 2);
    refused_naming(
        c.call(
            "propose_note_patch",
            json!({"path": "z/grow.md", "baseHash": base, "reason": "grow",
                   "edits": [{"oldText": "alpha", "newText": half}, {"oldText": "beta", "newText": half}]}),
        )
        .await,
        "max_proposal_bytes",
    );
    // At the limit is fine.
    c.call("propose_new_note", new_note("z/fits.md", &"f".repeat(2 * MIB)))
        .await
        .ok();
    let listed = c.call("list_proposals", json!({})).await.ok();
    assert_eq!(listed["proposals"].as_array().unwrap().len(), 1);
    c.close().await;
}

/// A note whose frontmatter names a 60 KB string through 16 × 16 × 16 aliases: under 64 KiB of
/// YAML that a naive parser expands to about 250 MB (and then copies).
fn alias_bomb(title: &str) -> String {
    let mut y = format!("---\ntitle: {title}\ns: &s \"{}\"\n", "x".repeat(60_000));
    let mut prev = "s".to_owned();
    for level in 1..=3 {
        let refs = vec![format!("*{prev}"); 16].join(", ");
        y.push_str(&format!("l{level}: &l{level} [{refs}]\n"));
        prev = format!("l{level}");
    }
    assert!(y.len() < 64 * 1024);
    y.push_str(&format!("---\n# {title} heading\n\nbody word zebraquokka\n"));
    y
}

/// A 1.5 MiB note whose frontmatter is over 64 KiB, full of aliases.
fn big_block_bomb() -> String {
    let mut y = String::from("---\na: &a [\"lol\", \"lol\", \"lol\", \"lol\"]\n");
    let mut i = 0;
    while y.len() < 3 * MIB / 2 {
        y.push_str(&format!("k{i}: [*a, *a, *a, *a, *a, *a, *a, *a]\n"));
        i += 1;
    }
    y.push_str("---\n# Bigblock heading\n\nbody word wombatquill\n");
    y
}

#[tokio::test]
async fn alias_bombs_read_without_frontmatter_and_are_indexed_in_bounded_memory() {
    let env = Env::new();
    std::fs::write(env.vault.join("z/laughs.md"), alias_bomb("Laughs")).unwrap();
    let big = big_block_bomb();
    assert!(big.len() > 3 * MIB / 2 && big.len() < 2 * MIB);
    std::fs::write(env.vault.join("z/bigblock.md"), &big).unwrap();
    let (_, token) = env.token("agent", "propose");
    let (c, pid) = stdio_with_pid(&env, &token).await;

    for (path, title, reason) in [
        ("z/laughs.md", "Laughs heading", "aliases expand"),
        ("z/bigblock.md", "Bigblock heading", "bytes; the limit is 65536"),
    ] {
        let n = c.call("read_note", json!({ "path": path })).await.ok();
        assert!(n.get("frontmatter").is_none(), "{path}: frontmatter is omitted");
        let why = n["frontmatterError"].as_str().unwrap();
        assert!(why.contains(reason), "{path}: {why}");
        assert_eq!(n["title"], title, "{path}");
        assert!(n["bytes"].as_u64().unwrap() > 60_000);
    }
    // Indexed: found by body and by the title from its heading.
    for (word, path) in [("zebraquokka", "z/laughs.md"), ("wombatquill", "z/bigblock.md")] {
        let hits = c.call("search_note_content", json!({ "query": word })).await.ok();
        assert_eq!(hits["hits"][0]["path"], path, "{hits}");
    }
    let k = c
        .call("search_knowledge", json!({"query": "laughs heading"}))
        .await
        .ok();
    assert!(
        k["hits"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["path"] == "z/laughs.md"),
        "{k}"
    );

    // The same bomb proposed through the inbox, then read there.
    let p = c
        .call(
            "propose_new_note",
            new_note("z/proposed.md", &alias_bomb("Proposed")),
        )
        .await
        .ok();
    let slug = p["slug"].as_str().unwrap();
    let n = c
        .call("read_note", json!({"path": format!("inbox/new/{slug}.md")}))
        .await
        .ok();
    assert!(n.get("frontmatter").is_none());
    assert!(n["frontmatterError"].as_str().unwrap().contains("aliases expand"));
    let g = c.call("get_proposal", json!({"id": p["id"]})).await.ok();
    assert!(g["content"].as_str().unwrap().contains("zebraquokka"));

    let peak = peak_rss(pid);
    eprintln!("alias bombs read and indexed: server peak {} KiB", peak / 1024);
    assert!(
        peak < 256 * MIB as u64,
        "the server peaked at {} MiB",
        peak / MIB as u64
    );
    c.close().await;

    // A note within the bounds still has its frontmatter.
    let c = env.stdio(&token).await;
    let n = c.call("read_note", json!({"path": "z/attention.md"})).await.ok();
    assert!(n["frontmatter"].is_object());
    assert!(n.get("frontmatterError").is_none());
    c.close().await;
}

#[tokio::test]
async fn limits_lowered_in_gateway_toml_are_honoured_by_tools_and_the_cli() {
    let env = Env::new();
    set_limits(
        &env,
        &[
            ("max_reason_chars", 30),
            ("max_pending_bytes_per_credential", 10_000),
            ("max_inbox_bytes", 15_000),
        ],
    );
    let (_, token) = env.token("agent", "propose");
    let (_, other) = env.token("other", "propose");
    let c = env.stdio(&token).await;
    let e = refused_naming(
        c.call(
            "propose_new_note",
            json!({"path": "z/a.md", "content": "x\n", "reason": "r".repeat(31)}),
        )
        .await,
        "max_reason_chars",
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("reason is 31 characters; the limit is 30"),
        "{e}"
    );

    // Bytes: 6 KB fits, a second 6 KB would pass the credential's 10 KB.
    let six = "6".repeat(6_000);
    let first = c.call("propose_new_note", new_note("z/b.md", &six)).await.ok();
    let e = err(c.call("propose_new_note", new_note("z/c.md", &six)).await);
    assert_eq!(e["code"], "QUOTA_EXCEEDED", "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("limits.max_pending_bytes_per_credential"),
        "{e}"
    );
    c.close().await;

    // The inbox's 15 KB: another credential's 6 KB fits, then its next does not.
    let o = env.stdio(&other).await;
    o.call("propose_new_note", new_note("z/d.md", &six)).await.ok();
    // Each proposal also holds its metadata file (under 1 KB), counted with it.
    let e = err(o
        .call("propose_new_note", new_note("z/e.md", &"7".repeat(3_000)))
        .await);
    assert_eq!(e["code"], "QUOTA_EXCEEDED", "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("limits.max_inbox_bytes"),
        "{e}"
    );
    o.close().await;

    // The CLI's arguments are bounded by the same check, and recorded.
    let id = first["id"].as_str().unwrap();
    let out = env.run(&["inbox", "reject", id, "--reason", &"r".repeat(31)]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("INVALID_ARGUMENT") && stderr.contains("max_reason_chars"),
        "{stderr}"
    );
    assert_eq!(refusals_by_cli(&env), 1);
    // A short reason is accepted, and frees the bytes.
    env.ok(&["inbox", "reject", id, "--reason", "too big"]);
    let c = env.stdio(&token).await;
    c.call("propose_new_note", new_note("z/c.md", &six)).await.ok();
    c.close().await;
}

fn refusals_by_cli(env: &Env) -> usize {
    audit_lines(env)
        .iter()
        .filter(|r| r["event"] == "cli" && r["tool"] == "reject_proposal" && r["code"] == "INVALID_ARGUMENT")
        .count()
}

/// docs/contract.md#limits-and-pagination: a stdio message is bounded like an HTTP body (`[server] max_body_bytes`): a longer
/// line is dropped as it streams in, and the connection goes on answering.
#[test]
fn an_oversized_stdio_message_is_dropped_and_the_connection_goes_on() {
    use std::io::{BufRead, BufReader, Write};
    let env = Env::new();
    let (_, token) = env.token("reader", "read");
    let path = env.home.join("gateway.toml");
    let mut config: toml::Table = std::fs::read_to_string(&path).unwrap().parse().unwrap();
    config
        .entry("server")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()))
        .as_table_mut()
        .unwrap()
        .insert("max_body_bytes".into(), toml::Value::Integer(1 << 20));
    std::fs::write(&path, toml::to_string(&config).unwrap()).unwrap();

    let mut child = std::process::Command::new(bin())
        .args(["stdio", "--home"])
        .arg(&env.home)
        .env_remove("VAULTGATE_HOME")
        .env("VAULTGATE_TOKEN", &token)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = |v: Value| {
        stdin.write_all(format!("{v}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw-stdio-test", "version": "1"}}}),
    );
    let first: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["id"], json!(1), "{first}");
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    // Two MiB in one message: over the 1 MiB limit.
    send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "search_note_content", "arguments": {"query": "x".repeat(2 << 20)}}}),
    );
    send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}}));
    let mut answered = Vec::new();
    for line in lines.by_ref() {
        let v: Value = serde_json::from_str(&line.unwrap()).unwrap();
        answered.push(v["id"].clone());
        if v["id"] == json!(3) {
            assert!(v["result"]["tools"].is_array(), "{v}");
            break;
        }
        assert!(v.get("result").is_none(), "the oversized call was served: {v}");
    }
    assert_eq!(answered.last(), Some(&json!(3)), "{answered:?}");
    drop(stdin);
    let _ = child.wait();
}

/// An inbox the read policy hides cannot be sized; its pending proposals then count as large as a
/// proposal may be, so the byte quota narrows instead of lifting.
#[tokio::test]
async fn an_unlistable_inbox_narrows_the_byte_quota_instead_of_lifting_it() {
    let env = Env::new();
    let (_, token) = env.token("writer", "propose");
    set_limits(&env, &[("max_pending_bytes_per_credential", 3 << 20)]);
    let path = env.home.join("gateway.toml");
    let mut config: toml::Table = std::fs::read_to_string(&path).unwrap().parse().unwrap();
    let vaults = config["vaults"].as_array_mut().unwrap();
    vaults[0].as_table_mut().unwrap().insert(
        "readable".into(),
        toml::Value::Array(vec![toml::Value::String("z".into())]),
    );
    std::fs::write(&path, toml::to_string(&config).unwrap()).unwrap();
    let c = env.stdio(&token).await;
    c.call("propose_new_note", new_note("z/one.md", "# One\n"))
        .await
        .ok();
    let code = c
        .call("propose_new_note", new_note("z/two.md", "# Two\n"))
        .await
        .code();
    assert_eq!(code, "QUOTA_EXCEEDED");
    c.close().await;
}
