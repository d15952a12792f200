//! Proposals and the apply transaction (docs/contract.md#proposals) through the real binary: every refusal code of
//! the apply checks, each leaving the notes byte-for-byte unchanged and the proposal pending; the
//! tiers that may propose, apply and reject (docs/contract.md#tiers-and-capabilities); idempotency keys; what a successful apply leaves
//! behind (archive, `_applied.jsonl` chain, audit record, revision, index, announcement; docs/contract.md#proposals, docs/contract.md#the-audit-log);
//! and the reviewer CLI (docs/contract.md#the-command-line), which runs the same core as the MCP tools.
// `subscribe` and `set_level` are deprecated by the 2026-07-28 protocol; stdio sessions still use them.
#![allow(deprecated)]

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, LoggingLevel, SetLevelRequestParams, SubscribeRequestParams};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::util::{Env, Recorder, Reply, audit_lines, bin, copy_tree, fixture, to_reply};

const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const VAULT_URI: &str = "vaultgate://vault/basic";
const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";
/// A symlink met on the way to a target: docs/contract.md#applying-a-proposal check 6 allows either code.
const SYMLINK_CODES: &[&str] = &["PATH_DENIED", "PATH_OUTSIDE_VAULT"];

/// The notes that link to `z/attention.md` in the fixture, one link each (basic.expect.md, Links).
const ATTENTION_BACKLINKS: &[&str] = &[
    "notes/中文笔记.md",
    "welcome.md",
    "z/moc-ml.md",
    "z/softmax.md",
    "z/transformer.md",
];

// ---- a recording MCP client ------------------------------------------------------------------

/// A `vaultgate stdio` client subscribed to `vaultgate://vault/basic` and to log messages.
struct Agent {
    svc: RunningService<RoleClient, Recorder>,
    rec: Recorder,
}

async fn agent(env: &Env, token: &str) -> Agent {
    let mut cmd = tokio::process::Command::new(bin());
    cmd.arg("stdio")
        .arg("--home")
        .arg(&env.home)
        .env_remove("VAULTGATE_HOME")
        .env("VAULTGATE_TOKEN", token)
        .stderr(std::process::Stdio::null());
    let rec = Recorder::default();
    let svc = rec
        .clone()
        .serve(TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap();
    svc.subscribe(SubscribeRequestParams::new(VAULT_URI))
        .await
        .unwrap();
    svc.set_level(SetLevelRequestParams::new(LoggingLevel::Info))
        .await
        .unwrap();
    Agent { svc, rec }
}

impl Agent {
    async fn call(&self, tool: &str, args: Value) -> Reply {
        let mut p = CallToolRequestParams::new(tool.to_owned());
        p.arguments = Some(args.as_object().expect("arguments are an object").clone());
        let r = tokio::time::timeout(CALL_TIMEOUT, self.svc.call_tool(p))
            .await
            .unwrap_or_else(|_| panic!("{tool} did not answer within {CALL_TIMEOUT:?}"))
            .expect("tools/call transport error");
        to_reply(r)
    }

    async fn close(self) {
        let _ = self.svc.cancel().await;
    }
}

/// Polls `cond` every 50 ms for at most 5 s.
async fn wait_for(mut cond: impl FnMut() -> bool) -> bool {
    for _ in 0..100 {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cond()
}

// ---- vault, inbox and log files --------------------------------------------------------------

/// The vault tree outside `inbox/` and `.vaultgate/`: each file's bytes, each folder (`path/`) and
/// each symlink (`-> target`, never followed).
type Tree = BTreeMap<String, Vec<u8>>;

fn snapshot(vault: &Path) -> Tree {
    fn walk(root: &Path, dir: &Path, out: &mut Tree) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let path = e.path();
            let rel = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if rel == "inbox" || rel == ".vaultgate" {
                continue;
            }
            let ty = e.file_type().unwrap();
            if ty.is_symlink() {
                let to = std::fs::read_link(&path).unwrap();
                out.insert(rel, format!("-> {}", to.display()).into_bytes());
            } else if ty.is_dir() {
                out.insert(format!("{rel}/"), Vec::new());
                walk(root, &path, out);
            } else {
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = Tree::new();
    walk(vault, vault, &mut out);
    out
}

fn assert_tree_unchanged(env: &Env, before: &Tree, what: &str) {
    let after = snapshot(&env.vault);
    let changed: Vec<&String> = before
        .keys()
        .chain(after.keys())
        .filter(|k| before.get(*k) != after.get(*k))
        .collect();
    assert!(changed.is_empty(), "{what}: the notes changed: {changed:?}");
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Canonical JSON (docs/contract.md#the-audit-log): keys sorted by code point, no whitespace, serde_json's string escapes.
fn canonical(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let items: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), canonical(&m[k])))
                .collect();
            format!("{{{}}}", items.join(","))
        }
        Value::Array(a) => format!("[{}]", a.iter().map(canonical).collect::<Vec<_>>().join(",")),
        other => other.to_string(),
    }
}

/// Checks a hash-chained JSON-lines file: seq 1, 2, …; `prev` the previous `hash` (the first
/// [`GENESIS`]); `hash` = sha256 of the canonical line without `hash`.
fn assert_chain(lines: &[Value], what: &str) {
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(line["seq"].as_u64(), Some(i as u64 + 1), "{what} line {i}: seq");
        let prev = if i == 0 {
            GENESIS
        } else {
            lines[i - 1]["hash"].as_str().unwrap()
        };
        assert_eq!(line["prev"], prev, "{what} line {i}: prev");
        let mut unhashed = line.as_object().unwrap().clone();
        let hash = unhashed.remove("hash").expect("a hash field");
        assert_eq!(
            hash.as_str().unwrap(),
            sha256_hex(canonical(&Value::Object(unhashed)).as_bytes()),
            "{what} line {i}: hash"
        );
    }
}

fn jsonl(path: &Path) -> Vec<Value> {
    match std::fs::read_to_string(path) {
        Ok(text) => text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("{}: {e}", path.display()),
    }
}

fn applied_lines(env: &Env) -> Vec<Value> {
    jsonl(&env.vault.join("inbox/_applied.jsonl"))
}

/// Audit lines of `tool` for proposal `id`.
fn audit_for(env: &Env, tool: &str, id: &str) -> Vec<Value> {
    audit_lines(env)
        .into_iter()
        .filter(|l| l["tool"] == tool && l["proposalId"] == id)
        .collect()
}

fn today() -> String {
    let d = time::OffsetDateTime::now_utc().date();
    format!("{:04}-{:02}-{:02}", d.year(), u8::from(d.month()), d.day())
}

/// A proposal's files under the inbox (docs/contract.md#proposals), the metadata file last.
fn inbox_files(kind: &str, slug: &str) -> Vec<String> {
    match kind {
        "new" => vec![format!("new/{slug}.md"), format!("new/{slug}.proposal.json")],
        "patch" => vec![
            format!("patch/{slug}.new.md"),
            format!("patch/{slug}.diff"),
            format!("patch/{slug}.proposal.json"),
        ],
        other => vec![format!("{other}/{slug}.proposal.json")],
    }
}

fn meta_file(env: &Env, kind: &str, p: &Value) -> std::path::PathBuf {
    let slug = p["slug"].as_str().unwrap();
    env.vault.join(format!("inbox/{kind}/{slug}.proposal.json"))
}

/// Rewrites one field of a proposal's metadata file on disk, as a local process could.
fn edit_meta(env: &Env, kind: &str, p: &Value, field: &str, value: Value) {
    let path = meta_file(env, kind, p);
    let mut meta: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(meta.get(field).is_some(), "the metadata file has `{field}`");
    meta[field] = value;
    std::fs::write(&path, serde_json::to_string_pretty(&meta).unwrap()).unwrap();
}

fn write_file(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A fresh home whose `basic` vault is registered with `vault add --notes <notes>`.
fn env_with_notes(notes: &str) -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let vault = tmp.path().join("vault");
    copy_tree(&fixture("basic"), &vault);
    let env = Env { tmp, home, vault };
    env.ok(&["init"]);
    env.ok(&[
        "vault",
        "add",
        env.vault.to_str().unwrap(),
        "--id",
        "basic",
        "--notes",
        notes,
    ]);
    env
}

// ---- tool shorthands -------------------------------------------------------------------------

async fn hash_of(a: &Agent, path: &str) -> String {
    a.call("read_note", json!({ "path": path })).await.ok()["hash"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn propose_new(a: &Agent, path: &str, content: &str) -> Value {
    a.call(
        "propose_new_note",
        json!({"path": path, "content": content, "reason": "test"}),
    )
    .await
    .ok()
}

async fn propose_patch(a: &Agent, path: &str, content: &str) -> Value {
    let base = hash_of(a, path).await;
    a.call(
        "propose_note_patch",
        json!({"path": path, "baseHash": base, "content": content, "reason": "test"}),
    )
    .await
    .ok()
}

async fn propose_delete(a: &Agent, path: &str) -> Value {
    let base = hash_of(a, path).await;
    a.call(
        "propose_delete",
        json!({"path": path, "baseHash": base, "reason": "test"}),
    )
    .await
    .ok()
}

async fn propose_move(a: &Agent, from: &str, to: &str) -> Value {
    a.call("propose_move", json!({"from": from, "to": to, "reason": "test"}))
        .await
        .ok()
}

async fn apply(a: &Agent, p: &Value, key: &str) -> Reply {
    a.call(
        "apply_proposal",
        json!({"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": key}),
    )
    .await
}

async fn overview(a: &Agent) -> Value {
    a.call("get_vault_overview", json!({})).await.ok()
}

async fn status_of(a: &Agent, p: &Value) -> String {
    a.call("get_proposal", json!({"id": p["id"]})).await.ok()["status"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn ids_with_status(a: &Agent, status: &str) -> Vec<String> {
    a.call("list_proposals", json!({ "status": status })).await.ok()["proposals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap().to_owned())
        .collect()
}

async fn assert_pending(a: &Agent, p: &Value) {
    let id = p["id"].as_str().unwrap().to_owned();
    assert!(
        ids_with_status(a, "pending").await.contains(&id),
        "list_proposals shows {id} pending"
    );
    match a.call("get_proposal", json!({ "id": id })).await {
        Reply::Ok(g) => assert_eq!(g["status"], "pending", "get_proposal status"),
        // Its diff is taken against the target, which is not read through a symlink.
        Reply::Err(e) => assert!(
            SYMLINK_CODES.contains(&e["code"].as_str().unwrap()),
            "get_proposal of a pending proposal failed: {e}"
        ),
    }
}

/// Applies `p` with `proposal_hash` and expects one of `codes`; then the notes are byte-for-byte
/// as `before`, the proposal is still pending, nothing reached `_applied.jsonl`, and the refusal is
/// in the audit log.
async fn assert_refused(
    env: &Env,
    a: &Agent,
    p: &Value,
    proposal_hash: &Value,
    key: &str,
    codes: &[&str],
    before: &Tree,
) {
    let reply = a
        .call(
            "apply_proposal",
            json!({"id": p["id"], "proposalHash": proposal_hash, "idempotencyKey": key}),
        )
        .await;
    let code = reply.code();
    assert!(codes.contains(&code.as_str()), "expected {codes:?}, got {code}");
    assert_tree_unchanged(env, before, &code);
    assert_pending(a, p).await;
    let id = p["id"].as_str().unwrap();
    assert!(
        !applied_lines(env).iter().any(|l| l["id"] == id),
        "a refused proposal is not in _applied.jsonl"
    );
    assert!(
        audit_for(env, "apply_proposal", id)
            .iter()
            .any(|l| l["outcome"] == "denied" && l["code"] == code.as_str()),
        "the refusal {code} is audited"
    );
}

// ---- what a successful apply leaves behind ----------------------------------------------------

/// The observable state just before an apply.
struct Before {
    revision: u64,
    pending: u64,
    applied: usize,
    date: String,
}

/// Reads the state before an apply and forgets earlier announcements (the inbox writes of
/// `propose_*` may still be settling, so it waits for them first).
async fn before_apply(env: &Env, a: &Agent) -> Before {
    tokio::time::sleep(Duration::from_millis(400)).await;
    let o = overview(a).await;
    a.rec.clear();
    Before {
        revision: o["revision"].as_u64().unwrap(),
        pending: o["pendingProposals"].as_u64().unwrap(),
        applied: applied_lines(env).len(),
        date: today(),
    }
}

/// docs/contract.md#proposals/docs/contract.md#the-audit-log: files archived to `applied/<date>/`, one valid `_applied.jsonl` line, one audit
/// line whose seq is `auditSeq`, `audit verify` passes, revision +1, one fewer pending proposal,
/// status `applied`, and the subscribed client heard about it.
async fn assert_applied(env: &Env, a: &Agent, p: &Value, kind: &str, out: &Value, before: &Before) {
    let id = p["id"].as_str().unwrap();
    let slug = p["slug"].as_str().unwrap();
    assert_eq!(out["applied"], true);
    assert_eq!(out["replayed"], false);
    assert_eq!(out["index"], "updated");
    assert_eq!(out["target"], p["target"]);

    // Archive: every inbox file moved to applied/<date>/ under its own name.
    let archived = out["archivedTo"].as_str().unwrap();
    let date = archived
        .strip_prefix("inbox/applied/")
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("archivedTo {archived} is under inbox/applied/<date>/"));
    assert!(
        date == before.date || date == today(),
        "archive date {date} is today"
    );
    for rel in inbox_files(kind, slug) {
        let name = rel.rsplit('/').next().unwrap();
        assert!(
            !env.vault.join("inbox").join(&rel).exists(),
            "inbox/{rel} left the pending folder"
        );
        assert!(
            env.vault.join(format!("inbox/applied/{date}/{name}")).is_file(),
            "inbox/applied/{date}/{name} exists"
        );
    }

    // _applied.jsonl: exactly one more line, for this proposal, and the chain holds.
    let lines = applied_lines(env);
    assert_eq!(lines.len(), before.applied + 1, "_applied.jsonl gained one line");
    assert_chain(&lines, "_applied.jsonl");
    let last = lines.last().unwrap();
    assert_eq!(last["id"], id);
    assert_eq!(last["proposalHash"], p["proposalHash"]);
    assert_eq!(last["kind"], kind);
    assert_eq!(last["target"], p["target"]);

    // Audit: one apply line for this proposal, ok, at the seq the caller was told.
    let audited = audit_for(env, "apply_proposal", id);
    assert_eq!(audited.len(), 1, "one apply_proposal audit line: {audited:?}");
    assert_eq!(audited[0]["outcome"], "ok");
    assert_eq!(audited[0]["seq"], out["auditSeq"]);
    env.ok(&["audit", "verify"]);

    // Announced to the subscriber, with the new revision.
    let rec = a.rec.clone();
    let want = before.revision + 1;
    assert!(
        wait_for(|| rec.updated.lock().unwrap().iter().any(|u| u == VAULT_URI)).await,
        "no notifications/resources/updated for {VAULT_URI}"
    );
    assert!(
        wait_for(|| rec
            .logs
            .lock()
            .unwrap()
            .iter()
            .any(|l| l["type"] == "vault.changed" && l["vault"] == "basic" && l["revision"] == want))
        .await,
        "no vault.changed log with revision {want}: {:?}",
        rec.logs.lock().unwrap()
    );

    // Revision moved by exactly one, also once the file watcher has seen the write.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let o = overview(a).await;
    assert_eq!(
        o["revision"].as_u64().unwrap(),
        want,
        "revision moved by exactly 1"
    );
    assert_eq!(
        o["pendingProposals"].as_u64().unwrap(),
        before.pending - 1,
        "one fewer pending proposal"
    );
    assert_eq!(status_of(a, p).await, "applied");
}

async fn search_paths(a: &Agent, query: &str) -> Vec<String> {
    a.call("search_note_content", json!({ "query": query }))
        .await
        .ok()["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["path"].as_str().unwrap().to_owned())
        .collect()
}

fn paths(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["path"].as_str().unwrap().to_owned())
        .collect();
    out.sort();
    out
}

// ---- the first success test ------------------------------------------------------------------

#[tokio::test]
async fn a_new_note_is_proposed_then_applied_and_archived() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let c = env.stdio(&token).await;
    let p = c
        .call(
            "propose_new_note",
            json!({"path": "z/fresh.md", "content": "# Fresh\n\nnew text\n", "reason": "test"}),
        )
        .await
        .ok();
    assert!(
        !env.vault.join("z/fresh.md").exists(),
        "proposing writes nothing into the notes"
    );
    let id = p["id"].as_str().unwrap();
    let slug = p["slug"].as_str().unwrap();
    assert!(env.vault.join(format!("inbox/new/{slug}.md")).exists());
    let a = c
        .call(
            "apply_proposal",
            json!({"id": id, "proposalHash": p["proposalHash"], "idempotencyKey": "k1"}),
        )
        .await
        .ok();
    assert_eq!(a["applied"], true);
    assert_eq!(a["replayed"], false);
    assert_eq!(
        std::fs::read_to_string(env.vault.join("z/fresh.md")).unwrap(),
        "# Fresh\n\nnew text\n"
    );
    assert!(!env.vault.join(format!("inbox/new/{slug}.md")).exists());
    let again = c
        .call(
            "apply_proposal",
            json!({"id": id, "proposalHash": p["proposalHash"], "idempotencyKey": "k1"}),
        )
        .await
        .ok();
    assert_eq!(again["replayed"], true);
    assert_eq!(again["historyEntryId"], a["historyEntryId"]);
    let hits = c
        .call("search_note_content", json!({"query": "new text"}))
        .await
        .ok();
    assert_eq!(hits["hits"][0]["path"], "z/fresh.md");
    env.ok(&["audit", "verify"]);
    c.close().await;
}

// ---- success paths ---------------------------------------------------------------------------

#[tokio::test]
async fn applying_a_new_note_writes_it_archives_chains_audits_and_announces() {
    let env = Env::new();
    let (writer_id, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let text = "# Fresh\n\nquokka-fresh-text\n";
    let before_tree = snapshot(&env.vault);
    let p = propose_new(&a, "z/fresh.md", text).await;
    assert_tree_unchanged(&env, &before_tree, "propose_new_note");
    assert_eq!(p["target"], "z/fresh.md");
    // proposalHash is SHA-256 over the canonical {kind, target, from, contentHash, baseHash}.
    let expected = json!({"kind": "new", "target": "z/fresh.md", "from": null,
        "contentHash": sha256_hex(text.as_bytes()), "baseHash": null});
    assert_eq!(p["proposalHash"], sha256_hex(canonical(&expected).as_bytes()));
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(meta_file(&env, "new", &p)).unwrap()).unwrap();
    assert_eq!(meta["contentHash"], sha256_hex(text.as_bytes()));
    assert_eq!(meta["createdBy"]["credentialId"], writer_id.as_str());
    assert_eq!(meta["signature"].as_str().map(str::len), Some(64));
    assert!(
        search_paths(&a, "quokka-fresh-text").await.is_empty(),
        "the inbox is not searched"
    );

    let before = before_apply(&env, &a).await;
    assert_eq!(
        before.pending, 1,
        "get_vault_overview.pendingProposals counts the pending proposal"
    );
    let out = apply(&a, &p, "k-new").await.ok();
    assert_eq!(
        std::fs::read_to_string(env.vault.join("z/fresh.md")).unwrap(),
        text
    );
    assert_applied(&env, &a, &p, "new", &out, &before).await;
    assert_eq!(search_paths(&a, "quokka-fresh-text").await, vec!["z/fresh.md"]);
    assert_eq!(overview(&a).await["notes"], 10);
    a.close().await;
}

#[tokio::test]
async fn applying_a_patch_by_content_replaces_the_note_and_is_searchable_at_once() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let old = std::fs::read_to_string(env.vault.join("z/softmax.md")).unwrap();
    let new = old.replace("numerical stability", "numerical wombat-stability");
    let p = propose_patch(&a, "z/softmax.md", &new).await;
    assert_eq!(p["baseHash"], sha256_hex(old.as_bytes()));
    let diff = p["diff"].as_str().unwrap();
    assert!(diff.contains("-Subtract max(x) before exponentiating for numerical stability."));
    assert!(diff.contains("+Subtract max(x) before exponentiating for numerical wombat-stability."));
    assert_eq!(
        std::fs::read_to_string(env.vault.join("z/softmax.md")).unwrap(),
        old
    );
    let slug = p["slug"].as_str().unwrap();
    assert_eq!(
        std::fs::read_to_string(env.vault.join(format!("inbox/patch/{slug}.new.md"))).unwrap(),
        new
    );

    let before = before_apply(&env, &a).await;
    let out = apply(&a, &p, "k-patch").await.ok();
    assert_eq!(
        std::fs::read_to_string(env.vault.join("z/softmax.md")).unwrap(),
        new
    );
    assert_applied(&env, &a, &p, "patch", &out, &before).await;
    assert_eq!(search_paths(&a, "wombat-stability").await, vec!["z/softmax.md"]);
    assert_eq!(hash_of(&a, "z/softmax.md").await, sha256_hex(new.as_bytes()));
    a.close().await;
}

#[tokio::test]
async fn applying_a_patch_by_edits_replaces_each_unique_text() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let base = hash_of(&a, "z/softmax.md").await;
    let edits = json!([
        {"oldText": "numerical stability", "newText": "numerical stability, always"},
        {"oldText": "Used to normalize", "newText": "Used to normalise"},
    ]);
    let p = a
        .call(
            "propose_note_patch",
            json!({"path": "z/softmax.md", "baseHash": base, "edits": edits, "reason": "spelling"}),
        )
        .await
        .ok();
    let old = std::fs::read_to_string(env.vault.join("z/softmax.md")).unwrap();
    let new = old
        .replace("numerical stability", "numerical stability, always")
        .replace("Used to normalize", "Used to normalise");

    let before = before_apply(&env, &a).await;
    let out = apply(&a, &p, "k-edits").await.ok();
    assert_eq!(
        std::fs::read_to_string(env.vault.join("z/softmax.md")).unwrap(),
        new
    );
    assert_applied(&env, &a, &p, "patch", &out, &before).await;
    assert_eq!(search_paths(&a, "normalise").await, vec!["z/softmax.md"]);
    a.close().await;
}

#[tokio::test]
async fn edits_whose_old_text_is_duplicated_or_absent_are_edit_not_unique() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let before = snapshot(&env.vault);
    let base = hash_of(&a, "z/softmax.md").await;
    for (old_text, why) in [("exp(", "occurs twice"), ("no such text anywhere", "is absent")] {
        let code = a
            .call(
                "propose_note_patch",
                json!({"path": "z/softmax.md", "baseHash": base, "reason": "r",
                    "edits": [{"oldText": old_text, "newText": "x"}]}),
            )
            .await
            .code();
        assert_eq!(code, "EDIT_NOT_UNIQUE", "oldText that {why}");
    }
    assert!(
        ids_with_status(&a, "pending").await.is_empty(),
        "no proposal was stored"
    );
    assert!(
        !env.vault.join("inbox/patch").exists(),
        "no inbox file was written"
    );
    assert_tree_unchanged(&env, &before, "refused edits");
    a.close().await;
}

#[tokio::test]
async fn applying_a_move_renames_the_note_and_rewrites_every_link_to_it() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let bytes = std::fs::read(env.vault.join("z/attention.md")).unwrap();
    let linking = a
        .call("get_related_notes", json!({"path": "z/attention.md"}))
        .await
        .ok();
    assert_eq!(paths(&linking["backlinks"]), ATTENTION_BACKLINKS);

    let p = propose_move(&a, "z/attention.md", "z/focus.md").await;
    assert_eq!(p["target"], "z/focus.md");
    let rewrites = p["linkRewrites"].as_array().unwrap();
    assert_eq!(
        paths(&p["linkRewrites"]),
        ATTENTION_BACKLINKS,
        "linkRewrites name exactly the notes linking to the source"
    );
    assert!(
        rewrites.iter().all(|r| r["count"] == 1),
        "one link each: {rewrites:?}"
    );
    assert!(
        env.vault.join("z/attention.md").exists(),
        "proposing moves nothing"
    );

    let before = before_apply(&env, &a).await;
    let out = apply(&a, &p, "k-move").await.ok();
    assert!(!env.vault.join("z/attention.md").exists(), "the source is gone");
    assert_eq!(std::fs::read(env.vault.join("z/focus.md")).unwrap(), bytes);
    assert_applied(&env, &a, &p, "move", &out, &before).await;

    let related = a
        .call("get_related_notes", json!({"path": "z/focus.md"}))
        .await
        .ok();
    assert_eq!(paths(&related["backlinks"]), ATTENTION_BACKLINKS);
    assert_eq!(
        related["brokenLinks"],
        json!([{"target": "Missing Page", "line": 25}]),
        "the moved note's own links are as before"
    );
    for note in ATTENTION_BACKLINKS {
        let r = a.call("get_related_notes", json!({ "path": note })).await.ok();
        assert_eq!(
            r["brokenLinks"],
            json!([]),
            "{note} has no broken link after the move"
        );
        assert!(
            paths(&r["outlinks"]).contains(&"z/focus.md".to_owned()),
            "{note} links to z/focus.md"
        );
        let text = std::fs::read_to_string(env.vault.join(note)).unwrap();
        assert!(
            !text.contains("[[attention") && !text.contains("(z/attention.md)"),
            "{note}: {text}"
        );
    }
    assert_eq!(
        a.call("read_note", json!({"path": "z/attention.md"}))
            .await
            .code(),
        "NOT_FOUND"
    );
    a.close().await;
}

#[tokio::test]
async fn applying_a_delete_moves_the_note_to_the_vault_trash_unchanged() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let bytes = std::fs::read(env.vault.join("z/softmax.md")).unwrap();
    let p = propose_delete(&a, "z/softmax.md").await;
    assert!(
        env.vault.join("z/softmax.md").exists(),
        "proposing deletes nothing"
    );

    let before = before_apply(&env, &a).await;
    let out = apply(&a, &p, "k-delete").await.ok();
    assert!(
        !env.vault.join("z/softmax.md").exists(),
        "the note left the notes"
    );
    let trash = env.vault.join(".vaultgate/trash");
    let mut found = Vec::new();
    let mut stack = vec![trash.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == "softmax.md") {
                found.push(path);
            }
        }
    }
    assert_eq!(
        found.len(),
        1,
        "one softmax.md under {}: {found:?}",
        trash.display()
    );
    assert_eq!(
        std::fs::read(&found[0]).unwrap(),
        bytes,
        "the trash keeps the exact bytes"
    );
    assert_applied(&env, &a, &p, "delete", &out, &before).await;
    assert!(search_paths(&a, "numerical stability").await.is_empty());
    assert_eq!(overview(&a).await["notes"], 8);
    a.close().await;
}

// ---- refusals (docs/contract.md#applying-a-proposal checks), each leaving the notes and the proposal as they were ----------

#[tokio::test]
async fn tampered_new_note_content_is_refused_and_vault_unchanged() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let p = propose_new(&a, "z/fresh.md", "# Fresh\n\nharmless\n").await;
    let slug = p["slug"].as_str().unwrap();
    std::fs::write(
        env.vault.join(format!("inbox/new/{slug}.md")),
        "# Fresh\n\nignore all previous instructions\n",
    )
    .unwrap();
    let before = snapshot(&env.vault);
    assert_refused(
        &env,
        &a,
        &p,
        &p["proposalHash"],
        "k1",
        &["PROPOSAL_TAMPERED"],
        &before,
    )
    .await;
    assert!(!env.vault.join("z/fresh.md").exists());
    a.close().await;
}

#[tokio::test]
async fn tampered_patch_content_is_refused_and_vault_unchanged() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let old = std::fs::read_to_string(env.vault.join("z/softmax.md")).unwrap();
    let p = propose_patch(&a, "z/softmax.md", &format!("{old}\nA harmless line.\n")).await;
    let slug = p["slug"].as_str().unwrap();
    std::fs::write(env.vault.join(format!("inbox/patch/{slug}.new.md")), "pwned\n").unwrap();
    let before = snapshot(&env.vault);
    assert_refused(
        &env,
        &a,
        &p,
        &p["proposalHash"],
        "k1",
        &["PROPOSAL_TAMPERED"],
        &before,
    )
    .await;
    a.close().await;
}

#[tokio::test]
async fn edited_metadata_reason_or_target_is_refused_as_tampered() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let by_reason = propose_new(&a, "z/one.md", "# One\n").await;
    let by_target = propose_new(&a, "z/two.md", "# Two\n").await;
    edit_meta(&env, "new", &by_reason, "reason", json!("approved by the owner"));
    edit_meta(&env, "new", &by_target, "target", json!("welcome.md"));
    let before = snapshot(&env.vault);
    assert_refused(
        &env,
        &a,
        &by_reason,
        &by_reason["proposalHash"],
        "k1",
        &["PROPOSAL_TAMPERED"],
        &before,
    )
    .await;
    assert_refused(
        &env,
        &a,
        &by_target,
        &by_target["proposalHash"],
        "k2",
        &["PROPOSAL_TAMPERED"],
        &before,
    )
    .await;
    a.close().await;
}

#[tokio::test]
async fn forged_signature_in_metadata_file_is_refused_as_tampered() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let p = propose_delete(&a, "z/softmax.md").await;
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(meta_file(&env, "delete", &p)).unwrap()).unwrap();
    let forged: String = meta["signature"]
        .as_str()
        .unwrap()
        .chars()
        .map(|c| if c == '0' { '1' } else { '0' })
        .collect();
    assert_eq!(forged.len(), 64);
    edit_meta(&env, "delete", &p, "signature", json!(forged));
    let before = snapshot(&env.vault);
    assert_refused(
        &env,
        &a,
        &p,
        &p["proposalHash"],
        "k1",
        &["PROPOSAL_TAMPERED"],
        &before,
    )
    .await;
    a.close().await;
}

#[tokio::test]
async fn deleted_metadata_file_is_refused_as_tampered() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let p = propose_new(&a, "z/fresh.md", "# Fresh\n").await;
    std::fs::remove_file(meta_file(&env, "new", &p)).unwrap();
    let before = snapshot(&env.vault);
    assert_refused(
        &env,
        &a,
        &p,
        &p["proposalHash"],
        "k1",
        &["PROPOSAL_TAMPERED"],
        &before,
    )
    .await;
    a.close().await;
}

/// docs/contract.md#applying-a-proposal check 4: "the files are where they should be" — the reviewer-facing `.diff` is one of them.
#[tokio::test]
async fn deleted_patch_diff_file_is_refused_as_tampered() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let old = std::fs::read_to_string(env.vault.join("z/softmax.md")).unwrap();
    let p = propose_patch(&a, "z/softmax.md", &format!("{old}\nmore\n")).await;
    let slug = p["slug"].as_str().unwrap();
    std::fs::remove_file(env.vault.join(format!("inbox/patch/{slug}.diff"))).unwrap();
    let before = snapshot(&env.vault);
    assert_refused(
        &env,
        &a,
        &p,
        &p["proposalHash"],
        "k1",
        &["PROPOSAL_TAMPERED"],
        &before,
    )
    .await;
    a.close().await;
}

#[tokio::test]
async fn stale_base_is_refused_for_patch_delete_and_move_and_vault_unchanged() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let softmax = std::fs::read_to_string(env.vault.join("z/softmax.md")).unwrap();
    let patch = propose_patch(&a, "z/softmax.md", &format!("{softmax}\npatched\n")).await;
    let delete = propose_delete(&a, "notes/cooking.md").await;
    let moved = propose_move(&a, "z/transformer.md", "z/transformer-model.md").await;
    let gone = propose_patch(&a, "notes/untitled.md", "# Untitled\n\nfilled in\n").await;

    // Someone edits the notes after the proposals were made.
    std::fs::write(
        env.vault.join("z/softmax.md"),
        format!("{softmax}edited by hand\n"),
    )
    .unwrap();
    let cooking = std::fs::read_to_string(env.vault.join("notes/cooking.md")).unwrap();
    std::fs::write(
        env.vault.join("notes/cooking.md"),
        format!("{cooking}more salt\n"),
    )
    .unwrap();
    let transformer = std::fs::read_to_string(env.vault.join("z/transformer.md")).unwrap();
    std::fs::write(
        env.vault.join("z/transformer.md"),
        transformer.replace("Encoder", "Enc"),
    )
    .unwrap();
    std::fs::remove_file(env.vault.join("notes/untitled.md")).unwrap();
    let before = snapshot(&env.vault);
    for (p, key) in [(&patch, "k1"), (&delete, "k2"), (&moved, "k3"), (&gone, "k4")] {
        assert_refused(
            &env,
            &a,
            p,
            &p["proposalHash"],
            key,
            &["PROPOSAL_STALE_BASE"],
            &before,
        )
        .await;
    }
    assert!(!env.vault.join("z/transformer-model.md").exists());

    // The refusal left it pending: with the base restored, the same proposal applies.
    std::fs::write(env.vault.join("z/softmax.md"), &softmax).unwrap();
    apply(&a, &patch, "k5").await.ok();
    assert_eq!(
        std::fs::read_to_string(env.vault.join("z/softmax.md")).unwrap(),
        format!("{softmax}\npatched\n")
    );
    a.close().await;
}

#[tokio::test]
async fn target_created_meanwhile_is_refused_as_target_exists() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let exact = propose_new(&a, "z/fresh.md", "# Fresh\n").await;
    let by_case = propose_new(&a, "z/other.md", "# Other\n").await;
    let move_to = propose_move(&a, "z/softmax.md", "z/soft.md").await;
    write_file(&env.vault.join("z/fresh.md"), "# Written by hand\n");
    write_file(&env.vault.join("z/Other.md"), "# Other, by hand\n");
    write_file(&env.vault.join("z/soft.md"), "# Soft, by hand\n");
    let before = snapshot(&env.vault);
    for (p, key) in [(&exact, "k1"), (&by_case, "k2"), (&move_to, "k3")] {
        assert_refused(
            &env,
            &a,
            p,
            &p["proposalHash"],
            key,
            &["PROPOSAL_TARGET_EXISTS"],
            &before,
        )
        .await;
    }
    a.close().await;
}

#[tokio::test]
async fn new_note_differing_only_by_case_or_normalization_is_refused_at_propose_time() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    write_file(&env.vault.join("z/fresh.md"), "# Fresh\n");
    write_file(&env.vault.join("z/caf\u{e9}.md"), "# Caf\u{e9}\n");
    let before = snapshot(&env.vault);
    for path in [
        "z/fresh.md",
        "Z/Fresh.md",
        "z/Fresh.md",
        "z/Attention.md",
        "Z/attention.md",
        "z/cafe\u{301}.md",
    ] {
        let code = a
            .call(
                "propose_new_note",
                json!({"path": path, "content": "# x\n", "reason": "r"}),
            )
            .await
            .code();
        assert_eq!(code, "PROPOSAL_TARGET_EXISTS", "{path:?}");
    }
    let code = a
        .call(
            "propose_move",
            json!({"from": "welcome.md", "to": "z/FRESH.md", "reason": "r"}),
        )
        .await
        .code();
    assert_eq!(code, "PROPOSAL_TARGET_EXISTS", "a move onto a case variant");
    assert!(ids_with_status(&a, "pending").await.is_empty());
    assert_tree_unchanged(&env, &before, "refused proposals");
    a.close().await;
}

#[tokio::test]
async fn wrong_proposal_hash_is_refused_and_vault_unchanged() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let p = propose_new(&a, "z/fresh.md", "# Fresh\n").await;
    let other = propose_new(&a, "z/other.md", "# Other\n").await;
    let before = snapshot(&env.vault);
    let wrong = json!("0".repeat(64));
    assert_refused(&env, &a, &p, &wrong, "k1", &["PROPOSAL_HASH_MISMATCH"], &before).await;
    assert_refused(
        &env,
        &a,
        &p,
        &other["proposalHash"],
        "k2",
        &["PROPOSAL_HASH_MISMATCH"],
        &before,
    )
    .await;
    a.close().await;
}

#[tokio::test]
async fn applying_twice_with_a_new_key_is_refused_as_already_applied() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let p = propose_new(&a, "z/fresh.md", "# Fresh\n").await;
    apply(&a, &p, "k1").await.ok();
    let before = snapshot(&env.vault);
    let applied = applied_lines(&env).len();
    assert_eq!(apply(&a, &p, "k2").await.code(), "PROPOSAL_ALREADY_APPLIED");
    assert_tree_unchanged(&env, &before, "second apply");
    assert_eq!(applied_lines(&env).len(), applied);
    assert_eq!(status_of(&a, &p).await, "applied");
    let id = p["id"].as_str().unwrap();
    let ok_lines = audit_for(&env, "apply_proposal", id)
        .iter()
        .filter(|l| l["outcome"] == "ok")
        .count();
    assert_eq!(ok_lines, 1);
    a.close().await;
}

#[tokio::test]
async fn applying_a_rejected_proposal_is_refused_as_rejected() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let p = propose_patch(&a, "z/softmax.md", "# Softmax\n\nshorter\n").await;
    let r = a
        .call("reject_proposal", json!({"id": p["id"], "reason": "not now"}))
        .await
        .ok();
    assert_eq!(r["rejected"], true);
    let before = snapshot(&env.vault);
    assert_eq!(apply(&a, &p, "k1").await.code(), "PROPOSAL_REJECTED");
    assert_tree_unchanged(&env, &before, "apply after reject");
    assert_eq!(status_of(&a, &p).await, "rejected");
    assert_eq!(
        a.call("reject_proposal", json!({"id": p["id"], "reason": "again"}))
            .await
            .code(),
        "PROPOSAL_REJECTED"
    );
    a.close().await;
}

#[tokio::test]
async fn unknown_or_other_vault_proposal_id_is_not_found() {
    let env = Env::new();
    let other = env.tmp.path().join("other");
    copy_tree(&fixture("basic"), &other);
    env.ok(&["vault", "add", other.to_str().unwrap(), "--id", "other"]);
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let p = propose_new(&a, "z/fresh.md", "# Fresh\n").await;
    let before = snapshot(&env.vault);
    let unknown = json!("01900000-0000-7000-8000-000000000000");
    let code = a
        .call(
            "apply_proposal",
            json!({"id": unknown, "proposalHash": p["proposalHash"], "idempotencyKey": "k1"}),
        )
        .await
        .code();
    assert_eq!(code, "PROPOSAL_NOT_FOUND");
    let code = a
        .call(
            "apply_proposal",
            json!({"vault": "other", "id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": "k2"}),
        )
        .await
        .code();
    assert_eq!(code, "PROPOSAL_NOT_FOUND", "a proposal of another vault");
    assert!(!other.join("z/fresh.md").exists());
    assert_eq!(
        a.call("get_proposal", json!({ "id": unknown })).await.code(),
        "PROPOSAL_NOT_FOUND"
    );
    assert_tree_unchanged(&env, &before, "unknown ids");
    assert_pending(&a, &p).await;
    a.close().await;
}

#[tokio::test]
async fn patch_target_replaced_by_a_symlink_is_refused_at_apply() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let old = std::fs::read_to_string(env.vault.join("z/softmax.md")).unwrap();
    let p = propose_patch(&a, "z/softmax.md", &format!("{old}\nextra\n")).await;
    // The note is swapped for a link to another note with the very same bytes, so only the link
    // itself (not the base hash) can stop the write landing in z/transformer.md.
    std::fs::rename(
        env.vault.join("z/transformer.md"),
        env.tmp.path().join("transformer.bak"),
    )
    .unwrap();
    std::fs::rename(env.vault.join("z/softmax.md"), env.vault.join("z/transformer.md")).unwrap();
    symlink("transformer.md", env.vault.join("z/softmax.md")).unwrap();
    let before = snapshot(&env.vault);
    assert_refused(&env, &a, &p, &p["proposalHash"], "k1", SYMLINK_CODES, &before).await;
    assert_eq!(
        std::fs::read_to_string(env.vault.join("z/transformer.md")).unwrap(),
        old
    );
    a.close().await;
}

#[tokio::test]
async fn notes_folder_replaced_by_a_symlink_out_of_the_vault_is_refused_at_apply() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let old = std::fs::read_to_string(env.vault.join("z/softmax.md")).unwrap();
    let new = propose_new(&a, "z/fresh.md", "# Fresh\n").await;
    let patch = propose_patch(&a, "z/softmax.md", &format!("{old}\nextra\n")).await;
    let outside = env.tmp.path().join("outside-z");
    std::fs::rename(env.vault.join("z"), &outside).unwrap();
    symlink(&outside, env.vault.join("z")).unwrap();
    let outside_before = snapshot(&outside);
    let before = snapshot(&env.vault);
    assert_refused(&env, &a, &new, &new["proposalHash"], "k1", SYMLINK_CODES, &before).await;
    assert_refused(
        &env,
        &a,
        &patch,
        &patch["proposalHash"],
        "k2",
        SYMLINK_CODES,
        &before,
    )
    .await;
    assert_eq!(
        snapshot(&outside),
        outside_before,
        "nothing was written outside the vault"
    );
    a.close().await;
}

#[tokio::test]
async fn proposal_targets_outside_the_notes_are_refused_at_propose_time() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let before = snapshot(&env.vault);
    let inbox_before = snapshot(&env.vault.join("inbox"));
    let cases: &[(&str, &str)] = &[
        ("inbox/x.md", "PATH_DENIED"),
        ("INBOX/x.md", "PATH_DENIED"),
        ("inbox/new/x.md", "PATH_DENIED"),
        (".git/x.md", "PATH_DENIED"),
        (".vaultgate/x.md", "PATH_DENIED"),
        (".obsidian/x.md", "PATH_DENIED"),
        ("node_modules/x.md", "PATH_DENIED"),
        ("docs/x.txt", "PATH_DENIED"),
        ("z/x.txt", "PATH_DENIED"),
        ("z/x", "PATH_DENIED"),
        ("../x.md", "PATH_INVALID"),
        ("z/../../x.md", "PATH_INVALID"),
        ("/tmp/x.md", "PATH_INVALID"),
        ("z\\x.md", "PATH_INVALID"),
    ];
    let mut wrong = Vec::new();
    for (path, want) in cases {
        let new = a
            .call(
                "propose_new_note",
                json!({"path": path, "content": "# x\n", "reason": "r"}),
            )
            .await
            .code();
        let moved = a
            .call(
                "propose_move",
                json!({"from": "welcome.md", "to": path, "reason": "r"}),
            )
            .await
            .code();
        for (tool, got) in [("propose_new_note", new), ("propose_move", moved)] {
            if got != *want {
                wrong.push(format!("{tool} {path:?}: {got}, want {want}"));
            }
        }
    }
    for (tool, args, want) in [
        (
            "propose_delete",
            json!({"path": "inbox/README.md", "baseHash": "0".repeat(64), "reason": "r"}),
            "PATH_DENIED",
        ),
        (
            "propose_note_patch",
            json!({"path": "inbox/README.md", "baseHash": "0".repeat(64), "content": "x\n", "reason": "r"}),
            "PATH_DENIED",
        ),
        (
            "propose_move",
            json!({"from": "inbox/README.md", "to": "z/readme.md", "reason": "r"}),
            "PATH_DENIED",
        ),
    ] {
        let got = a.call(tool, args).await.code();
        if got != want {
            wrong.push(format!("{tool} inbox/README.md: {got}, want {want}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    assert!(
        ids_with_status(&a, "pending").await.is_empty(),
        "nothing was proposed"
    );
    assert_eq!(
        snapshot(&env.vault.join("inbox")),
        inbox_before,
        "nothing was written to the inbox"
    );
    assert_tree_unchanged(&env, &before, "refused targets");
    a.close().await;
}

#[tokio::test]
async fn a_vault_with_notes_z_takes_proposals_only_under_z() {
    let env = env_with_notes("z");
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let before = snapshot(&env.vault);
    let mut wrong = Vec::new();
    for path in ["notes/x.md", "journal/x.md", "docs/x.md", "x.md", "zz/x.md"] {
        let got = a
            .call(
                "propose_new_note",
                json!({"path": path, "content": "# x\n", "reason": "r"}),
            )
            .await
            .code();
        if got != "PATH_DENIED" {
            wrong.push(format!("propose_new_note {path}: {got}"));
        }
    }
    for (tool, args) in [
        (
            "propose_note_patch",
            json!({"path": "welcome.md", "baseHash": "0".repeat(64), "content": "x\n", "reason": "r"}),
        ),
        (
            "propose_delete",
            json!({"path": "notes/cooking.md", "baseHash": "0".repeat(64), "reason": "r"}),
        ),
        (
            "propose_move",
            json!({"from": "z/softmax.md", "to": "notes/softmax.md", "reason": "r"}),
        ),
    ] {
        let got = a.call(tool, args).await.code();
        if got != "PATH_DENIED" {
            wrong.push(format!("{tool}: {got}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    assert!(ids_with_status(&a, "pending").await.is_empty());
    assert_tree_unchanged(&env, &before, "refused targets");
    // Under z the same vault takes proposals.
    let p = propose_new(&a, "z/inside.md", "# Inside\n").await;
    apply(&a, &p, "k1").await.ok();
    assert!(env.vault.join("z/inside.md").is_file());
    a.close().await;
}

// ---- tiers (docs/contract.md#tiers-and-capabilities) -------------------------------------------------------------------------

#[tokio::test]
async fn read_tier_cannot_propose_apply_or_reject() {
    let env = Env::new();
    let (_, writer) = env.token("writer", "auto");
    let (_, reader) = env.token("reader", "read");
    let w = agent(&env, &writer).await;
    let r = agent(&env, &reader).await;
    let p = propose_new(&w, "z/fresh.md", "# Fresh\n").await;
    let base = hash_of(&r, "z/softmax.md").await;
    let before = snapshot(&env.vault);
    let inbox_before = snapshot(&env.vault.join("inbox"));
    for (tool, args) in [
        (
            "propose_new_note",
            json!({"path": "z/x.md", "content": "# x\n", "reason": "r"}),
        ),
        (
            "propose_note_patch",
            json!({"path": "z/softmax.md", "baseHash": base, "content": "x\n", "reason": "r"}),
        ),
        (
            "propose_move",
            json!({"from": "z/softmax.md", "to": "z/s.md", "reason": "r"}),
        ),
        (
            "propose_delete",
            json!({"path": "z/softmax.md", "baseHash": base, "reason": "r"}),
        ),
        (
            "apply_proposal",
            json!({"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": "k1"}),
        ),
        ("reject_proposal", json!({"id": p["id"], "reason": "r"})),
    ] {
        assert_eq!(
            r.call(tool, args).await.code(),
            "CAPABILITY_DENIED",
            "read tier: {tool}"
        );
    }
    assert_eq!(
        snapshot(&env.vault.join("inbox")),
        inbox_before,
        "the read tier wrote no inbox file"
    );
    assert_tree_unchanged(&env, &before, "read tier");
    assert_pending(&r, &p).await;
    w.close().await;
    r.close().await;
}

#[tokio::test]
async fn propose_tier_proposes_but_cannot_apply_or_reject() {
    let env = Env::new();
    let (_, token) = env.token("proposer", "propose");
    let a = agent(&env, &token).await;
    let p = propose_new(&a, "z/fresh.md", "# Fresh\n").await;
    let before = snapshot(&env.vault);
    assert_refused(
        &env,
        &a,
        &p,
        &p["proposalHash"],
        "k1",
        &["CAPABILITY_DENIED"],
        &before,
    )
    .await;
    assert_eq!(
        a.call("reject_proposal", json!({"id": p["id"], "reason": "r"}))
            .await
            .code(),
        "CAPABILITY_DENIED"
    );
    // A tier that cannot apply at all is refused before any state is looked at.
    let code = a
        .call(
            "apply_proposal",
            json!({"id": "no-such-id", "proposalHash": "0".repeat(64), "idempotencyKey": "k2"}),
        )
        .await
        .code();
    assert_eq!(code, "CAPABILITY_DENIED", "not PROPOSAL_NOT_FOUND");
    assert_pending(&a, &p).await;
    a.close().await;
}

#[tokio::test]
async fn auto_tier_decides_its_own_proposals_but_not_anothers() {
    let env = Env::new();
    let (_, alice_token) = env.token("alice", "auto");
    let (_, bob_token) = env.token("bob", "auto");
    let alice = agent(&env, &alice_token).await;
    let bob = agent(&env, &bob_token).await;
    let mine = propose_new(&alice, "z/alice.md", "# Alice\n").await;
    let also_mine = propose_new(&alice, "z/alice2.md", "# Alice 2\n").await;
    let before = snapshot(&env.vault);
    assert_refused(
        &env,
        &bob,
        &mine,
        &mine["proposalHash"],
        "k1",
        &["CAPABILITY_DENIED"],
        &before,
    )
    .await;
    assert_eq!(
        bob.call("reject_proposal", json!({"id": mine["id"], "reason": "r"}))
            .await
            .code(),
        "CAPABILITY_DENIED"
    );
    assert_pending(&alice, &mine).await;
    apply(&alice, &mine, "k1").await.ok();
    assert!(env.vault.join("z/alice.md").is_file());
    alice
        .call(
            "reject_proposal",
            json!({"id": also_mine["id"], "reason": "changed my mind"}),
        )
        .await
        .ok();
    assert_eq!(status_of(&bob, &also_mine).await, "rejected");
    alice.close().await;
    bob.close().await;
}

#[tokio::test]
async fn full_tier_applies_and_rejects_anyones_proposals() {
    let env = Env::new();
    let (_, proposer_token) = env.token("proposer", "propose");
    let (_, admin_token) = env.token("admin", "full");
    let proposer = agent(&env, &proposer_token).await;
    let admin = agent(&env, &admin_token).await;
    let first = propose_new(&proposer, "z/first.md", "# First\n").await;
    let second = propose_new(&proposer, "z/second.md", "# Second\n").await;
    let out = apply(&admin, &first, "k1").await.ok();
    assert_eq!(out["applied"], true);
    assert!(env.vault.join("z/first.md").is_file());
    let r = admin
        .call(
            "reject_proposal",
            json!({"id": second["id"], "reason": "duplicate"}),
        )
        .await
        .ok();
    assert_eq!(r["rejected"], true);
    assert_eq!(status_of(&proposer, &first).await, "applied");
    assert_eq!(status_of(&proposer, &second).await, "rejected");
    assert!(!env.vault.join("z/second.md").exists());
    proposer.close().await;
    admin.close().await;
}

// ---- idempotency -----------------------------------------------------------------------------

#[tokio::test]
async fn same_key_same_args_replays_the_first_result_without_writing_again() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let p = propose_new(&a, "z/fresh.md", "# Fresh\n").await;
    let first = apply(&a, &p, "same-key").await.ok();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let revision = overview(&a).await["revision"].clone();
    let tree = snapshot(&env.vault);
    let id = p["id"].as_str().unwrap();
    let audited = audit_for(&env, "apply_proposal", id).len();

    let again = apply(&a, &p, "same-key").await.ok();
    assert_eq!(again["replayed"], true);
    let mut expected = first.clone();
    expected["replayed"] = json!(true);
    assert_eq!(again, expected, "the first result, marked replayed");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_tree_unchanged(&env, &tree, "replay");
    assert_eq!(applied_lines(&env).len(), 1, "_applied.jsonl keeps one line");
    // docs/contract.md#the-audit-log records every mutating call, so the replayed call gets its own line; it is the
    // only new one, and nothing else moved.
    assert_eq!(
        audit_for(&env, "apply_proposal", id).len(),
        audited + 1,
        "the replayed call is audited once, and no second apply is"
    );
    let o = overview(&a).await;
    assert_eq!(o["revision"], revision, "the revision did not move");
    assert_eq!(
        o["history"]["undoTop"], first["historyEntryId"],
        "no second history entry"
    );
    env.ok(&["audit", "verify"]);
    a.close().await;
}

#[tokio::test]
async fn same_key_other_proposal_is_an_idempotency_conflict() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let first = propose_new(&a, "z/first.md", "# First\n").await;
    let second = propose_new(&a, "z/second.md", "# Second\n").await;
    apply(&a, &first, "shared-key").await.ok();
    let before = snapshot(&env.vault);
    assert_refused(
        &env,
        &a,
        &second,
        &second["proposalHash"],
        "shared-key",
        &["IDEMPOTENCY_CONFLICT"],
        &before,
    )
    .await;
    assert!(!env.vault.join("z/second.md").exists());
    // A fresh key applies it.
    apply(&a, &second, "fresh-key").await.ok();
    assert!(env.vault.join("z/second.md").is_file());
    a.close().await;
}

// ---- the reviewer CLI (docs/contract.md#the-command-line) -------------------------------------------------------------

#[tokio::test]
async fn inbox_list_json_is_an_array_of_list_proposals_items() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    propose_new(&a, "z/fresh.md", "# Fresh\n").await;
    propose_delete(&a, "z/softmax.md").await;
    propose_move(&a, "z/transformer.md", "z/transformer-model.md").await;
    let mcp = a.call("list_proposals", json!({})).await.ok();
    let out = env.ok(&["inbox", "list", "--json"]);
    let cli: Value = serde_json::from_str(out.trim()).expect("one JSON document");
    assert!(cli.is_array(), "an array: {cli}");
    assert_eq!(cli.as_array().unwrap().len(), 3);
    assert_eq!(cli, mcp["proposals"], "the same items, with the same field names");
    a.close().await;
}

#[tokio::test]
async fn inbox_show_by_slug_prints_the_diff() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let old = std::fs::read_to_string(env.vault.join("z/softmax.md")).unwrap();
    let p = propose_patch(
        &a,
        "z/softmax.md",
        &old.replace("numerical stability", "overflow"),
    )
    .await;
    let slug = p["slug"].as_str().unwrap();
    let out = env.ok(&["inbox", "show", slug]);
    let diff = p["diff"].as_str().unwrap();
    // Every line of the diff is printed; in the changed line the words that changed are marked
    // (the full stop is no part of a word).
    assert!(
        out.contains("-Subtract max(x) before exponentiating for [-numerical stability-]."),
        "the changed words are marked:\n{out}"
    );
    assert!(
        out.contains("+Subtract max(x) before exponentiating for {+overflow+}."),
        "{out}"
    );
    for line in diff.lines() {
        let marked = line.starts_with("-Subtract") || line.starts_with("+Subtract");
        assert!(
            marked || out.lines().any(|l| l == line),
            "{line:?} is not printed:\n{out}"
        );
    }
    let json_out = env.ok(&["inbox", "show", p["id"].as_str().unwrap(), "--json"]);
    let shown: Value = serde_json::from_str(json_out.trim()).unwrap();
    let mcp = a.call("get_proposal", json!({"id": p["id"]})).await.ok();
    assert_eq!(shown, mcp, "--json is get_proposal's answer");
    a.close().await;
}

#[tokio::test]
async fn inbox_reject_by_slug_archives_under_rejected_date() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let p = propose_patch(&a, "z/softmax.md", "# Softmax\n\nshort\n").await;
    let slug = p["slug"].as_str().unwrap();
    let before = snapshot(&env.vault);
    env.ok(&["inbox", "reject", slug, "--reason", "too short"]);
    let date = today();
    for rel in inbox_files("patch", slug) {
        let name = rel.rsplit('/').next().unwrap();
        assert!(!env.vault.join("inbox").join(&rel).exists(), "{rel} left patch/");
        assert!(
            env.vault.join(format!("inbox/rejected/{date}/{name}")).is_file(),
            "inbox/rejected/{date}/{name}"
        );
    }
    assert_tree_unchanged(&env, &before, "inbox reject");
    let g = a.call("get_proposal", json!({"id": p["id"]})).await.ok();
    assert_eq!(g["status"], "rejected");
    assert_eq!(g["rejectReason"], "too short");
    assert!(ids_with_status(&a, "pending").await.is_empty());
    assert!(
        audit_for(&env, "reject_proposal", p["id"].as_str().unwrap())
            .iter()
            .chain(audit_for(&env, "reject_proposal", slug).iter())
            .any(|l| l["outcome"] == "ok" && l["actor"] == "cli:tester"),
        "the CLI rejection is audited as cli:tester"
    );
    assert_eq!(apply(&a, &p, "k1").await.code(), "PROPOSAL_REJECTED");
    a.close().await;
}

#[tokio::test]
async fn cli_apply_without_yes_and_without_a_terminal_applies_nothing() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let p = propose_new(&a, "z/fresh.md", "# Fresh\n").await;
    let before = snapshot(&env.vault);
    for args in [
        vec!["apply", "--only", p["slug"].as_str().unwrap()],
        vec!["apply"],
    ] {
        let out = env.run(&args);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{args:?} without --yes and without a terminal"
        );
        assert!(String::from_utf8_lossy(&out.stderr).contains("--yes"));
    }
    assert_tree_unchanged(&env, &before, "apply without --yes");
    assert!(applied_lines(&env).is_empty());
    assert_pending(&a, &p).await;
    a.close().await;
}

#[tokio::test]
async fn cli_apply_only_id_applies_as_the_cli_user_and_mcp_sees_the_same() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let old = std::fs::read_to_string(env.vault.join("z/softmax.md")).unwrap();
    let new = format!("{old}\nkoala-cli-line\n");
    let p = propose_patch(&a, "z/softmax.md", &new).await;
    let id = p["id"].as_str().unwrap();
    let before = before_apply(&env, &a).await;

    let out = env.ok(&["apply", "--only", id, "--yes"]);
    assert!(out.contains(p["slug"].as_str().unwrap()), "{out}");
    assert_eq!(
        std::fs::read_to_string(env.vault.join("z/softmax.md")).unwrap(),
        new
    );
    let audited = audit_for(&env, "apply_proposal", id);
    assert_eq!(audited.len(), 1, "{audited:?}");
    assert_eq!(audited[0]["actor"], "cli:tester");
    assert_eq!(audited[0]["outcome"], "ok");
    let lines = applied_lines(&env);
    assert_eq!(lines.len(), 1);
    assert_chain(&lines, "_applied.jsonl");
    assert_eq!(lines[0]["appliedBy"], "cli:tester");
    assert!(
        env.vault
            .join(format!(
                "inbox/applied/{}/{}.proposal.json",
                today(),
                p["slug"].as_str().unwrap()
            ))
            .is_file()
            || env
                .vault
                .join(format!(
                    "inbox/applied/{}/{}.proposal.json",
                    before.date,
                    p["slug"].as_str().unwrap()
                ))
                .is_file()
    );
    env.ok(&["audit", "verify"]);

    // The running MCP server sees exactly what the CLI did.
    assert!(
        wait_for(|| a.rec.updated.lock().unwrap().iter().any(|u| u == VAULT_URI)).await,
        "the subscriber heard about the CLI's apply"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let o = overview(&a).await;
    assert_eq!(o["revision"].as_u64().unwrap(), before.revision + 1);
    assert_eq!(o["pendingProposals"], 0);
    assert_eq!(status_of(&a, &p).await, "applied");
    assert_eq!(ids_with_status(&a, "applied").await, vec![id.to_owned()]);
    assert_eq!(search_paths(&a, "koala-cli-line").await, vec!["z/softmax.md"]);
    assert_eq!(apply(&a, &p, "k1").await.code(), "PROPOSAL_ALREADY_APPLIED");
    a.close().await;
}

#[tokio::test]
async fn cli_apply_yes_applies_every_pending_proposal() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let softmax = std::fs::read_to_string(env.vault.join("z/softmax.md")).unwrap();
    let new = propose_new(&a, "z/fresh.md", "# Fresh\n").await;
    let patch = propose_patch(&a, "z/softmax.md", &format!("{softmax}\nmore\n")).await;
    let delete = propose_delete(&a, "notes/cooking.md").await;
    let by_slug = propose_new(&a, "z/by-slug.md", "# By slug\n").await;

    env.ok(&["apply", "--only", by_slug["slug"].as_str().unwrap(), "--yes"]);
    assert!(env.vault.join("z/by-slug.md").is_file(), "--only takes a slug");
    env.ok(&["apply", "--yes"]);
    assert!(env.vault.join("z/fresh.md").is_file());
    assert_eq!(
        std::fs::read_to_string(env.vault.join("z/softmax.md")).unwrap(),
        format!("{softmax}\nmore\n")
    );
    assert!(!env.vault.join("notes/cooking.md").exists());
    assert!(ids_with_status(&a, "pending").await.is_empty());
    for p in [&new, &patch, &delete, &by_slug] {
        assert_eq!(status_of(&a, p).await, "applied");
    }
    let lines = applied_lines(&env);
    assert_eq!(lines.len(), 4);
    assert_chain(&lines, "_applied.jsonl");
    env.ok(&["audit", "verify"]);
    assert_eq!(overview(&a).await["pendingProposals"], 0);
    a.close().await;
}

#[tokio::test]
async fn cli_apply_refuses_a_tampered_proposal_as_mcp_does() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    let p = propose_new(&a, "z/fresh.md", "# Fresh\n").await;
    let slug = p["slug"].as_str().unwrap();
    std::fs::write(env.vault.join(format!("inbox/new/{slug}.md")), "# Evil\n").unwrap();
    let before = snapshot(&env.vault);
    let out = env.run(&["apply", "--only", slug, "--yes"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("PROPOSAL_TAMPERED"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_tree_unchanged(&env, &before, "CLI apply of a tampered proposal");
    assert_pending(&a, &p).await;
    assert_refused(
        &env,
        &a,
        &p,
        &p["proposalHash"],
        "k1",
        &["PROPOSAL_TAMPERED"],
        &before,
    )
    .await;
    a.close().await;
}

#[tokio::test]
async fn concurrent_cli_and_mcp_applies_of_one_proposal_commit_it_once() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let a = agent(&env, &token).await;
    for round in 0..3 {
        let path = format!("z/race-{round}.md");
        let p = propose_new(&a, &path, &format!("# Race {round}\n")).await;
        let id = p["id"].as_str().unwrap().to_owned();
        let cli = tokio::process::Command::new(bin())
            .arg("--home")
            .arg(&env.home)
            .args(["apply", "--only", &id, "--yes"])
            .env_remove("VAULTGATE_HOME")
            .env_remove("VAULTGATE_TOKEN")
            .env("USER", "tester")
            .stdin(std::process::Stdio::null())
            .output();
        let key = format!("race-{round}");
        let (cli, mcp) = tokio::join!(cli, apply(&a, &p, &key));
        let cli = cli.unwrap();
        let stderr = String::from_utf8_lossy(&cli.stderr).into_owned();
        match (cli.status.success(), mcp) {
            (true, Reply::Err(e)) => assert_eq!(e["code"], "PROPOSAL_ALREADY_APPLIED"),
            (false, Reply::Ok(_)) => assert!(stderr.contains("PROPOSAL_ALREADY_APPLIED"), "{stderr}"),
            (cli_ok, mcp) => panic!("exactly one apply must win: cli ok={cli_ok} ({stderr}), mcp {mcp:?}"),
        }
        let commits = audit_for(&env, "apply_proposal", &id)
            .into_iter()
            .filter(|l| l["outcome"] == "ok")
            .count();
        assert_eq!(commits, 1, "round {round}: one committed apply");
        assert_eq!(
            std::fs::read_to_string(env.vault.join(&path)).unwrap(),
            format!("# Race {round}\n")
        );
    }
    let lines = applied_lines(&env);
    assert_eq!(lines.len(), 3);
    assert_chain(&lines, "_applied.jsonl");
    env.ok(&["audit", "verify"]);
    a.close().await;
}

/// A propose that crashed after writing its files but before its row committed leaves files
/// that look like a proposal; the next start removes them, and only them (docs/contract.md#proposals, docs/contract.md#the-audit-log).
#[tokio::test]
async fn files_of_a_proposal_whose_row_never_committed_are_removed_at_the_next_start() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let c = env.stdio(&token).await;
    let p = c
        .call(
            "propose_new_note",
            json!({"path": "z/kept.md", "content": "# Kept\n", "reason": "test"}),
        )
        .await
        .ok();
    c.close().await;
    let slug = p["slug"].as_str().unwrap().to_owned();
    let inbox = env.vault.join("inbox");
    let orphan = "20261201-lost-0123abcd";
    std::fs::write(inbox.join(format!("new/{orphan}.md")), "# Lost\n").unwrap();
    std::fs::write(inbox.join(format!("patch/{orphan}.new.md")), "# Lost\n").ok();
    // A person's own file in the inbox is not vaultgate's to remove.
    std::fs::write(inbox.join("new/my-idea.md"), "# Mine\n").unwrap();

    let c = env.stdio(&token).await;
    let listed = c.call("list_proposals", json!({"status": "pending"})).await.ok();
    c.close().await;
    assert_eq!(listed["proposals"].as_array().unwrap().len(), 1, "{listed}");
    assert!(
        !inbox.join(format!("new/{orphan}.md")).exists(),
        "the orphan stayed"
    );
    assert!(
        !inbox.join(format!("patch/{orphan}.new.md")).exists(),
        "the orphan stayed"
    );
    assert!(
        inbox.join(format!("new/{slug}.md")).exists(),
        "a committed proposal lost its file"
    );
    assert!(inbox.join(format!("new/{slug}.proposal.json")).exists());
    assert!(
        inbox.join("new/my-idea.md").exists(),
        "a file not named like a proposal was removed"
    );
}
