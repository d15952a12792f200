//! In-client approval (docs/contract.md#the-review-page-and-in-client-approval) seen from a client the project did not write: the official MCP
//! Python SDK, driven by `tests/python/approval_client.py` as a subprocess (interpreter from
//! `VAULTGATE_PYTHON`, else `python3`; it needs `pip install mcp==2.3.0`). A credential issued with
//! `--approve-in-client` applies one tier step above its own only after the person accepts the
//! `elicitation/create` prompt — over stdio, legacy Streamable HTTP and the stateless 2026-07-28
//! protocol — and every other answer, a client without the capability, a credential without the
//! flag, two steps up, critical tools and undo/redo change nothing, and (where SPEC says so) ask
//! nobody.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};

use crate::http::Server;
use crate::util::{Client, Env, bin};

const HARNESS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/approval_client.py");
/// One Python session, sleeps included, takes a few seconds; this only bounds a hang.
const SESSION_TIMEOUT: Duration = Duration::from_secs(90);

const COOKING: &str = "notes/cooking.md";
/// A line of `notes/cooking.md` and what the tests' patch makes of it: one line out, two in.
const STEP: &str = "2. Scramble them soft, then set aside.";
const STEP_SPLIT: &str = "2. Scramble them soft.\n   Then set them aside.";

// ---- credentials and configuration ----------------------------------------------------------------

/// Issues a credential with the in-client approval flag and returns (id, token).
pub(crate) fn flagged(env: &Env, name: &str, tier: &str) -> (String, String) {
    let mut args = vec![
        "token",
        "issue",
        "--name",
        name,
        "--tier",
        tier,
        "--approve-in-client",
        "--format",
        "json",
    ];
    if tier == "full" {
        args.push("--yes");
    }
    let v: Value = serde_json::from_str(&env.ok(&args)).unwrap();
    (
        v["id"].as_str().unwrap().to_owned(),
        v["token"].as_str().unwrap().to_owned(),
    )
}

/// Sets `[limits] approval_timeout_seconds` in `gateway.toml` (read by every server at start).
pub(crate) fn set_approval_timeout(env: &Env, seconds: i64) {
    let path = env.home.join("gateway.toml");
    let mut doc: toml::Table = toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    doc.entry("limits")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()))
        .as_table_mut()
        .unwrap()
        .insert("approval_timeout_seconds".into(), toml::Value::Integer(seconds));
    std::fs::write(&path, toml::to_string(&doc).unwrap()).unwrap();
}

// ---- the Python SDK session ---------------------------------------------------------------------------

/// The interpreter, once it has been seen to import the SDK. A machine without it fails every
/// test here with the command that fixes it: these tests never skip.
pub(crate) fn python() -> &'static str {
    static PYTHON: OnceLock<String> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let py = std::env::var("VAULTGATE_PYTHON").unwrap_or_else(|_| "python3".to_owned());
        let fix = format!(
            "the in-client approval tests drive the official MCP Python SDK: run \
             `{py} -m pip install 'mcp==2.3.0'` (or set VAULTGATE_PYTHON to an interpreter that has it)"
        );
        match Command::new(&py).args(["-c", "import mcp"]).output() {
            Ok(out) if out.status.success() => py,
            Ok(out) => panic!(
                "`{py} -c 'import mcp'` failed: {}\n{fix}",
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => panic!("cannot run `{py}`: {e}\n{fix}"),
        }
    })
}

/// Where the Python client connects.
#[derive(Clone, Copy)]
pub(crate) enum Via<'a> {
    /// The SDK launches `vaultgate stdio --home H` with `VAULTGATE_TOKEN`.
    Stdio(&'a Env),
    /// Streamable HTTP with `Authorization: Bearer`.
    Http(&'a Server),
}

/// What one session printed: `{protocolVersion, calls[], prompts[]}` (see the script's header).
struct Run {
    out: Value,
    stderr: String,
}

/// Runs one Python session: `mode` is `legacy` or `auto`, `answer` the script's `--answer`
/// (comma-separated, one per prompt; `none` declares no elicitation capability), `calls` in order.
async fn session(via: Via<'_>, token: &str, mode: &str, answer: &str, calls: &[(&str, Value)]) -> Run {
    session_env(via, token, mode, answer, calls, &[]).await
}

/// As [`session`], with extra environment for the harness (e.g. `APPROVAL_PROMPTED_FILE`).
async fn session_env(
    via: Via<'_>,
    token: &str,
    mode: &str,
    answer: &str,
    calls: &[(&str, Value)],
    extra_env: &[(&str, &Path)],
) -> Run {
    let (parsed, stderr) = python_session(
        HARNESS,
        via,
        &["--token", token, "--mode", mode, "--answer", answer],
        calls,
        extra_env,
    )
    .await;
    let run = Run { out: parsed, stderr };
    // `_rounds` records each round it drives; every other call is one record.
    if calls.iter().any(|(tool, _)| *tool == "_rounds") {
        return run;
    }
    assert_eq!(
        run.out["calls"].as_array().map(Vec::len),
        Some(calls.len()),
        "one record per call: {run}"
    );
    run
}

/// Runs one Python SDK harness (`harness`, its leading `args`, then `--call TOOL JSON` per call)
/// against `via`, and returns the one JSON object it printed and its stderr. Shared by the
/// in-client approval and approval card tests.
pub(crate) async fn python_session(
    harness: &str,
    via: Via<'_>,
    args: &[&str],
    calls: &[(&str, Value)],
    extra_env: &[(&str, &Path)],
) -> (Value, String) {
    let mut cmd = tokio::process::Command::new(python());
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    cmd.arg(harness).args(args);
    match via {
        Via::Stdio(env) => cmd.arg("--exe").arg(bin()).arg("--home").arg(&env.home),
        Via::Http(srv) => cmd.arg("--url").arg(srv.url()),
    };
    for (tool, args) in calls {
        cmd.arg("--call").arg(tool).arg(args.to_string());
    }
    cmd.env_remove("VAULTGATE_HOME")
        .env_remove("VAULTGATE_TOKEN")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(SESSION_TIMEOUT, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("the Python session did not end within {SESSION_TIMEOUT:?}"))
        .expect("running the Python harness");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if let Via::Http(srv) = via {
        assert!(
            out.status.success(),
            "the Python harness failed ({}):\n{stderr}\nserver: {}",
            out.status,
            srv.stderr()
        );
    }
    assert!(
        out.status.success(),
        "the Python harness failed ({}):\n{stderr}",
        out.status
    );
    let parsed: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the harness printed no JSON ({e}): {}\n{stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    (parsed, stderr)
}

impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tail: String = {
            let chars: Vec<char> = self.stderr.chars().collect();
            chars[chars.len().saturating_sub(3000)..].iter().collect()
        };
        write!(
            f,
            "{}\n-- harness stderr --\n{tail}",
            serde_json::to_string_pretty(&self.out).unwrap()
        )
    }
}

impl Run {
    fn call(&self, i: usize) -> &Value {
        &self.out["calls"][i]
    }

    /// Call `i` succeeded: its structuredContent.
    fn ok(&self, i: usize) -> Value {
        let c = self.call(i);
        assert!(
            c["exception"].is_null() && c["isError"] == json!(false),
            "call {i} ({}) should succeed: {self}",
            c["tool"]
        );
        assert!(
            c["structured"].is_object(),
            "call {i}: success carries structuredContent: {self}"
        );
        c["structured"].clone()
    }

    /// Call `i` was refused with a docs/contract.md#the-mcp-surface error envelope: the envelope.
    fn err(&self, i: usize) -> Value {
        let c = self.call(i);
        assert!(
            c["exception"].is_null(),
            "call {i} ({}) should be a tool error, not a JSON-RPC/SDK error: {self}",
            c["tool"]
        );
        assert_eq!(
            c["isError"],
            json!(true),
            "call {i} ({}) should fail: {self}",
            c["tool"]
        );
        assert!(
            c["structured"].is_null(),
            "call {i}: errors carry no structuredContent: {self}"
        );
        let e = &c["error"];
        assert_eq!(e["ok"], json!(false), "call {i}: {self}");
        assert!(
            e["message"].as_str().is_some_and(|m| !m.is_empty()),
            "call {i}: {self}"
        );
        assert!(e["retryable"].is_boolean(), "call {i}: {self}");
        e.clone()
    }

    fn code(&self, i: usize) -> String {
        self.err(i)["code"].as_str().unwrap().to_owned()
    }

    fn assert_code(&self, i: usize, code: &str) {
        assert_eq!(self.code(i), code, "call {i} ({}): {self}", self.call(i)["tool"]);
    }

    /// Every elicitation request the client received.
    fn prompts(&self) -> Vec<Value> {
        self.out["prompts"].as_array().unwrap().clone()
    }

    fn assert_never_asked(&self) {
        assert!(self.prompts().is_empty(), "nobody may be asked here: {self}");
    }

    fn protocol(&self) -> &str {
        self.out["protocolVersion"].as_str().unwrap_or_default()
    }
}

// ---- proposals, the vault and the audit log --------------------------------------------------------

async fn note_hash(c: &Client, path: &str) -> String {
    c.call("read_note", json!({ "path": path })).await.ok()["hash"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Proposes the `notes/cooking.md` patch that splits step two (+2 −1 lines).
async fn propose_split(c: &Client, reason: &str) -> Value {
    let base = note_hash(c, COOKING).await;
    let p = c
        .call(
            "propose_note_patch",
            json!({"path": COOKING, "baseHash": base, "reason": reason,
                   "edits": [{"oldText": STEP, "newText": STEP_SPLIT}]}),
        )
        .await
        .ok();
    assert_eq!(diff_size(p["diff"].as_str().unwrap()), (2, 1), "{p}");
    p
}

use crate::util::propose_new;

fn apply_args(p: &Value, key: &str) -> Value {
    json!({"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": key})
}

/// The `+` and `-` lines of a unified diff (headers not counted).
fn diff_size(diff: &str) -> (usize, usize) {
    let plus = diff
        .lines()
        .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
        .count();
    let minus = diff
        .lines()
        .filter(|l| l.starts_with('-') && !l.starts_with("---"))
        .count();
    (plus, minus)
}

fn cooking_after_split(env: &Env) -> String {
    std::fs::read_to_string(env.vault.join(COOKING))
        .unwrap()
        .replace(STEP, STEP_SPLIT)
}

type Tree = BTreeMap<String, Vec<u8>>;

/// Every file of the vault (notes and inbox), byte for byte; `.vaultgate/` (index, locks) aside.
fn snapshot(vault: &Path) -> Tree {
    fn walk(root: &Path, dir: &Path, out: &mut Tree) {
        for e in std::fs::read_dir(dir).unwrap() {
            let path = e.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if rel == ".vaultgate" {
                continue;
            }
            if path.is_dir() {
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

fn assert_unchanged(env: &Env, before: &Tree, what: &str) {
    let after = snapshot(&env.vault);
    let changed: Vec<&String> = before
        .keys()
        .chain(after.keys())
        .filter(|k| before.get(*k) != after.get(*k))
        .collect();
    assert!(changed.is_empty(), "{what}: the vault changed: {changed:?}");
}

/// The ids `vaultgate inbox list --status pending --json` shows.
fn pending_ids(env: &Env) -> Vec<String> {
    let out = env.ok(&["inbox", "list", "--status", "pending", "--json"]);
    let items: Value = serde_json::from_str(out.trim()).unwrap();
    items
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap().to_owned())
        .collect()
}

fn assert_pending(env: &Env, p: &Value, what: &str) {
    let id = p["id"].as_str().unwrap();
    assert!(
        pending_ids(env).iter().any(|i| i == id),
        "{what}: {id} is still pending"
    );
}

use crate::util::audit_lines as audit;

/// The `apply_proposal` records for proposal `p`.
fn apply_records(env: &Env, p: &Value) -> Vec<Value> {
    audit(env)
        .into_iter()
        .filter(|r| r["tool"] == "apply_proposal" && r["proposalId"] == p["id"])
        .collect()
}

/// The `apply_proposal` record of a successful apply (`out` is its result).
fn applied_record(env: &Env, p: &Value, out: &Value) -> Value {
    let records = apply_records(env, p);
    let r = records
        .iter()
        .find(|r| r["seq"] == out["auditSeq"])
        .unwrap_or_else(|| {
            panic!(
                "no apply_proposal record at auditSeq {}: {records:?}",
                out["auditSeq"]
            )
        });
    assert_eq!(r["event"], "tool_call", "{r}");
    assert_eq!(r["outcome"], "ok", "{r}");
    r.clone()
}

/// The apply of `p` was approved in the client by `cred` over `transport`: audited so.
fn assert_client_approved(env: &Env, p: &Value, out: &Value, cred: &str, transport: &str) {
    let r = applied_record(env, p, out);
    assert_eq!(r["approval"], "client", "an in-client approval is audited: {r}");
    assert_eq!(r["actor"]["credentialId"], cred, "{r}");
    assert_eq!(r["actor"]["transport"], transport, "{r}");
    env.ok(&["audit", "verify"]);
}

/// The apply of `p` needed nobody's approval: its record has no `approval`.
fn assert_not_approval(env: &Env, p: &Value, out: &Value) {
    let r = applied_record(env, p, out);
    assert!(r.get("approval").is_none(), "no approval was asked: {r}");
}

/// `APPROVAL_DECLINED` records for `p` by `cred`.
fn declined_records(env: &Env, p: &Value, cred: &str) -> usize {
    apply_records(env, p)
        .iter()
        .filter(|r| r["code"] == "APPROVAL_DECLINED" && r["actor"]["credentialId"] == cred)
        .count()
}

/// A successful first apply: applied, not a replay, at its target.
fn assert_fresh_apply(out: &Value, p: &Value) {
    assert_eq!(out["applied"], true, "{out}");
    assert_eq!(out["replayed"], false, "{out}");
    assert_eq!(out["target"], p["target"], "{out}");
    assert!(
        out["historyEntryId"].as_str().is_some_and(|h| !h.is_empty()),
        "{out}"
    );
}

// ---- the prompt (docs/contract.md#the-review-page-and-in-client-approval) --------------------------------------------------------------------------

/// The fixed fields that open every prompt, in order, for a single-target proposal.
fn fixed_fields(kind: &str, target: &str, (plus, minus): (usize, usize), p: &Value) -> Vec<String> {
    let hash = p["proposalHash"].as_str().unwrap();
    vec![
        "Apply this proposal to the vault?".to_owned(),
        "vault: basic".to_owned(),
        format!("kind: {kind}"),
        format!("target: {target}"),
        format!("diff: +{plus} \u{2212}{minus} lines"),
        format!("proposalHash: {}", &hash[..12]),
    ]
}

fn split_fields(p: &Value) -> Vec<String> {
    fixed_fields("patch", COOKING, (2, 1), p)
}

/// A form-mode request whose schema is exactly one required boolean `approve`.
fn assert_form(prompt: &Value) {
    assert_eq!(prompt["mode"], "form", "{prompt}");
    let s = &prompt["requestedSchema"];
    assert_eq!(s["type"], "object", "{prompt}");
    assert_eq!(s["required"], json!(["approve"]), "{prompt}");
    let props = s["properties"].as_object().unwrap();
    assert_eq!(props.keys().collect::<Vec<_>>(), ["approve"], "{prompt}");
    assert_eq!(props["approve"]["type"], "boolean", "{prompt}");
    assert!(
        props["approve"]["title"].as_str().is_some_and(|t| !t.is_empty()),
        "{prompt}"
    );
}

fn lines(prompt: &Value) -> Vec<String> {
    prompt["message"]
        .as_str()
        .unwrap()
        .split('\n')
        .map(str::to_owned)
        .collect()
}

/// The whole message: the fixed fields, then `reason: "<reason>"` as the last line.
fn assert_prompt(prompt: &Value, fixed: &[String], reason: &str) {
    assert_form(prompt);
    let mut want = fixed.to_vec();
    want.push(format!("reason: \"{reason}\""));
    assert_eq!(lines(prompt), want, "{prompt}");
}

// ---- tests ------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_accepted_prompt_applies_a_propose_credentials_own_proposal_over_stdio_once_and_audits_it() {
    let env = Env::new();
    set_approval_timeout(&env, 10);
    let (cred, token) = flagged(&env, "asker", "propose");
    let c = env.stdio(&token).await;
    let p = propose_split(&c, "split step two").await;
    c.close().await;
    let want = cooking_after_split(&env);

    let run = session(
        Via::Stdio(&env),
        &token,
        "legacy",
        "accept",
        &[
            ("apply_proposal", apply_args(&p, "k-accept")),
            ("apply_proposal", apply_args(&p, "k-accept")),
        ],
    )
    .await;
    assert!(run.protocol().starts_with("2025-"), "a legacy session: {run}");
    let prompts = run.prompts();
    assert_eq!(prompts.len(), 1, "one prompt; the replay asks nobody: {run}");
    assert_prompt(&prompts[0], &split_fields(&p), "split step two");

    let out = run.ok(0);
    assert_fresh_apply(&out, &p);
    assert_eq!(std::fs::read_to_string(env.vault.join(COOKING)).unwrap(), want);
    let again = run.ok(1);
    assert_eq!(again["replayed"], true, "the same key replays: {again}");
    assert_eq!(again["historyEntryId"], out["historyEntryId"]);
    assert!(!pending_ids(&env).contains(&p["id"].as_str().unwrap().to_owned()));
    assert_client_approved(&env, &p, &out, &cred, "stdio");
}

#[tokio::test]
async fn accepting_in_the_client_applies_over_legacy_and_stateless_http_after_declines_that_keep_the_key_free()
 {
    let env = Env::new();
    set_approval_timeout(&env, 2);
    let (cred, token) = flagged(&env, "asker", "propose");
    let c = env.stdio(&token).await;
    let text = "one\ntwo\nthree\n";
    let legacy_p = propose_new(&c, "notes/over-legacy.md", text, "legacy http").await;
    let stateless_p = propose_new(&c, "notes/over-stateless.md", text, "stateless http").await;
    c.close().await;
    let srv = Server::start(&env);

    // Legacy: `initialize`, the request rides the POST's SSE stream.
    let key = "k-legacy";
    let legacy = session(
        Via::Http(&srv),
        &token,
        "legacy",
        "decline,accept",
        &[
            ("apply_proposal", apply_args(&legacy_p, key)),
            ("apply_proposal", apply_args(&legacy_p, key)),
        ],
    )
    .await;
    assert!(
        legacy.protocol().starts_with("2025-"),
        "a legacy session: {legacy}"
    );
    legacy.assert_code(0, "APPROVAL_DECLINED");
    let out = legacy.ok(1);
    assert_fresh_apply(&out, &legacy_p);
    let prompts = legacy.prompts();
    assert_eq!(prompts.len(), 2, "{legacy}");
    let fields = fixed_fields("new", "notes/over-legacy.md", (3, 0), &legacy_p);
    for prompt in &prompts {
        assert_prompt(prompt, &fields, "legacy http");
    }
    assert_eq!(
        std::fs::read_to_string(env.vault.join("notes/over-legacy.md")).unwrap(),
        text
    );
    assert_client_approved(&env, &legacy_p, &out, &cred, "http");
    assert_eq!(declined_records(&env, &legacy_p, &cred), 1);

    // Stateless 2026-07-28: an input-required result, answered by re-sending the call. An answer
    // that comes after approval_timeout_seconds is refused like a decline.
    let key = "k-stateless";
    let stateless = session(
        Via::Http(&srv),
        &token,
        "auto",
        "decline,sleep:4,accept",
        &[
            ("apply_proposal", apply_args(&stateless_p, key)),
            ("apply_proposal", apply_args(&stateless_p, key)),
            ("apply_proposal", apply_args(&stateless_p, key)),
        ],
    )
    .await;
    assert_eq!(
        stateless.protocol(),
        "2026-07-28",
        "the SDK negotiated the stateless protocol: {stateless}"
    );
    stateless.assert_code(0, "APPROVAL_DECLINED");
    stateless.assert_code(1, "APPROVAL_DECLINED");
    let out = stateless.ok(2);
    assert_fresh_apply(&out, &stateless_p);
    let prompts = stateless.prompts();
    assert_eq!(prompts.len(), 3, "{stateless}");
    let fields = fixed_fields("new", "notes/over-stateless.md", (3, 0), &stateless_p);
    for prompt in &prompts {
        assert_prompt(prompt, &fields, "stateless http");
    }
    assert_eq!(
        std::fs::read_to_string(env.vault.join("notes/over-stateless.md")).unwrap(),
        text
    );
    assert_client_approved(&env, &stateless_p, &out, &cred, "http");
    assert_eq!(declined_records(&env, &stateless_p, &cred), 2);
}

#[tokio::test]
async fn declined_cancelled_false_missing_and_timed_out_answers_change_nothing_and_keep_the_key_free() {
    let env = Env::new();
    set_approval_timeout(&env, 2);
    let (cred, token) = flagged(&env, "asker", "propose");
    let c = env.stdio(&token).await;
    let p = propose_split(&c, "split step two").await;
    c.close().await;
    let before = snapshot(&env.vault);
    let key = "k-retry";
    let status = ("get_proposal", json!({ "id": p["id"] }));

    // decline, cancel, accept {approve: false}, accept {} — each followed by get_proposal.
    let mut calls = Vec::new();
    for _ in 0..4 {
        calls.push(("apply_proposal", apply_args(&p, key)));
        calls.push(status.clone());
    }
    let run = session(
        Via::Stdio(&env),
        &token,
        "legacy",
        "decline,cancel,false,missing",
        &calls,
    )
    .await;
    for i in 0..4 {
        run.assert_code(2 * i, "APPROVAL_DECLINED");
        assert_eq!(run.ok(2 * i + 1)["status"], "pending", "after answer {i}: {run}");
    }
    let prompts = run.prompts();
    assert_eq!(prompts.len(), 4, "every apply asked: {run}");
    for prompt in &prompts {
        assert_prompt(prompt, &split_fields(&p), "split step two");
    }
    assert_unchanged(&env, &before, "declined answers");
    assert_pending(&env, &p, "declined answers");
    assert_eq!(declined_records(&env, &p, &cred), 4, "each refusal is audited");

    // No answer within 2 s; the accept the client sends at 5 s is too late and changes nothing.
    let late = session(
        Via::Stdio(&env),
        &token,
        "legacy",
        "sleep:5",
        &[
            ("apply_proposal", apply_args(&p, key)),
            ("_settle", json!({})),
            status.clone(),
        ],
    )
    .await;
    late.assert_code(0, "APPROVAL_DECLINED");
    assert_eq!(late.prompts().len(), 1, "{late}");
    assert_prompt(&late.prompts()[0], &split_fields(&p), "split step two");
    let waited = late.call(0)["seconds"].as_f64().unwrap();
    assert!(
        waited >= 1.5,
        "the server waits approval_timeout_seconds for an answer: {late}"
    );
    assert_eq!(late.ok(2)["status"], "pending", "{late}");
    assert_unchanged(&env, &before, "a timed-out prompt");
    assert_pending(&env, &p, "a timed-out prompt");
    assert_eq!(declined_records(&env, &p, &cred), 5);

    // No key was stored: the same key with an accept applies, as a first apply.
    let fin = session(
        Via::Stdio(&env),
        &token,
        "legacy",
        "accept",
        &[("apply_proposal", apply_args(&p, key))],
    )
    .await;
    let out = fin.ok(0);
    assert_fresh_apply(&out, &p);
    assert_eq!(fin.prompts().len(), 1, "{fin}");
    assert_client_approved(&env, &p, &out, &cred, "stdio");
}

#[tokio::test]
async fn without_the_elicitation_capability_or_without_the_flag_apply_is_refused_and_nobody_is_asked() {
    let env = Env::new();
    set_approval_timeout(&env, 10);
    let (_, flag_token) = flagged(&env, "asker", "propose");
    let (_, plain_token) = env.token("plain", "propose");
    let c = env.stdio(&flag_token).await;
    let pf = propose_new(&c, "notes/flagged.md", "flagged\n", "flagged").await;
    c.close().await;
    let c = env.stdio(&plain_token).await;
    let pu = propose_new(&c, "notes/plain.md", "plain\n", "plain").await;
    c.close().await;
    let before = snapshot(&env.vault);
    let srv = Server::start(&env);

    // A flagged credential, a client without the capability: refused, pointing at the other ways.
    for (via, mode, key) in [
        (Via::Stdio(&env), "legacy", "k-stdio"),
        (Via::Http(&srv), "legacy", "k-http"),
        (Via::Http(&srv), "auto", "k-stateless"),
    ] {
        let run = session(
            via,
            &flag_token,
            mode,
            "none",
            &[("apply_proposal", apply_args(&pf, key))],
        )
        .await;
        run.assert_code(0, "CAPABILITY_DENIED");
        let message = run.err(0)["message"].as_str().unwrap().to_owned();
        assert!(
            message.contains("vaultgate review") && message.contains("vaultgate apply"),
            "the refusal names the review page and the CLI: {run}"
        );
        run.assert_never_asked();
        if mode == "auto" {
            assert_eq!(run.protocol(), "2026-07-28", "{run}");
        }
    }

    // A credential without the flag, a client that could ask: refused, nobody asked.
    let run = session(
        Via::Stdio(&env),
        &plain_token,
        "legacy",
        "accept",
        &[("apply_proposal", apply_args(&pu, "k-plain"))],
    )
    .await;
    run.assert_code(0, "CAPABILITY_DENIED");
    run.assert_never_asked();

    assert_unchanged(&env, &before, "refused applies");
    assert_pending(&env, &pf, "no capability");
    assert_pending(&env, &pu, "no flag");
}

#[tokio::test]
async fn critical_tools_and_undo_redo_never_ask_and_stay_denied_to_a_flagged_propose_credential() {
    let env = Env::new();
    set_approval_timeout(&env, 10);
    let (_, writer) = env.token("writer", "auto");
    let (_, token) = flagged(&env, "asker", "propose");
    // A history entry to aim undo and redo at.
    let w = env.stdio(&writer).await;
    let p = propose_split(&w, "split step two").await;
    let entry = w.call("apply_proposal", apply_args(&p, "k-writer")).await.ok()["historyEntryId"].clone();
    let before = snapshot(&env.vault);

    let run = session(
        Via::Stdio(&env),
        &token,
        "legacy",
        "accept",
        &[
            (
                "delete_permanent",
                json!({"paths": ["welcome.md"], "idempotencyKey": "k-del"}),
            ),
            (
                "delete_permanent",
                json!({"paths": ["welcome.md"], "idempotencyKey": "k-del", "challengeId": "c-1",
                       "planHash": "0".repeat(64), "acknowledged": true}),
            ),
            ("empty_trash", json!({"idempotencyKey": "k-trash"})),
            (
                "history_undo",
                json!({"expectedHistoryEntryId": entry, "idempotencyKey": "k-undo"}),
            ),
            (
                "history_redo",
                json!({"expectedHistoryEntryId": entry, "idempotencyKey": "k-redo"}),
            ),
        ],
    )
    .await;
    for i in 0..5 {
        run.assert_code(i, "CAPABILITY_DENIED");
    }
    run.assert_never_asked();
    assert_unchanged(&env, &before, "denied critical tools and undo/redo");
    let status = w.call("history_status", json!({})).await.ok();
    assert_eq!(status["undoTop"], entry, "{status}");
    w.close().await;
}

#[tokio::test]
async fn a_flagged_auto_credential_applies_its_own_work_unasked_and_anothers_proposal_after_an_accept() {
    let env = Env::new();
    set_approval_timeout(&env, 10);
    let (cred, token) = flagged(&env, "asker", "auto");
    let (_, other) = env.token("other", "propose");
    let c = env.stdio(&token).await;
    let own = propose_split(&c, "split step two").await;
    c.close().await;
    let o = env.stdio(&other).await;
    let theirs = o
        .call(
            "propose_move",
            json!({"from": "notes/untitled.md", "to": "notes/loose-thoughts.md", "reason": "clearer name"}),
        )
        .await
        .ok();
    o.close().await;
    let moved = std::fs::read(env.vault.join("notes/untitled.md")).unwrap();
    let journal = "journal/2026-01-05.md";

    // Its own proposal, a critical first call: the tier allows them, nobody is asked.
    let first = session(
        Via::Stdio(&env),
        &token,
        "legacy",
        "accept",
        &[
            ("apply_proposal", apply_args(&own, "k-own")),
            (
                "delete_permanent",
                json!({"paths": [journal], "idempotencyKey": "k-crit"}),
            ),
        ],
    )
    .await;
    let out = first.ok(0);
    assert_fresh_apply(&out, &own);
    assert_eq!(first.ok(1)["status"], "challenge", "{first}");
    first.assert_never_asked();
    assert_not_approval(&env, &own, &out);
    let entry = out["historyEntryId"].clone();

    // Undo and redo ask nobody; another credential's proposal asks once and applies on accept.
    let second = session(
        Via::Stdio(&env),
        &token,
        "legacy",
        "accept",
        &[
            (
                "history_undo",
                json!({"expectedHistoryEntryId": entry, "idempotencyKey": "k-undo"}),
            ),
            (
                "history_redo",
                json!({"expectedHistoryEntryId": entry, "idempotencyKey": "k-redo"}),
            ),
            ("apply_proposal", apply_args(&theirs, "k-theirs")),
        ],
    )
    .await;
    second.ok(0);
    second.ok(1);
    let out = second.ok(2);
    assert_fresh_apply(&out, &theirs);
    let prompts = second.prompts();
    assert_eq!(
        prompts.len(),
        1,
        "only the other credential's proposal asks: {second}"
    );
    assert_form(&prompts[0]);
    let l = lines(&prompts[0]);
    assert_eq!(l.len(), 8, "{}", prompts[0]);
    assert_eq!(
        l[..5],
        [
            "Apply this proposal to the vault?",
            "vault: basic",
            "kind: move",
            "from: notes/untitled.md",
            "to: notes/loose-thoughts.md",
        ],
        "{}",
        prompts[0]
    );
    let diff = l[5]
        .strip_prefix("diff: +")
        .and_then(|d| d.strip_suffix(" lines"))
        .and_then(|d| d.split_once('\u{2212}'))
        .map(|(n, m)| (n.trim_end(), m));
    assert!(
        diff.is_some_and(|(n, m)| n.parse::<u32>().is_ok() && m.parse::<u32>().is_ok()),
        "diff: +N −M lines: {}",
        prompts[0]
    );
    assert_eq!(
        l[6],
        format!(
            "proposalHash: {}",
            &theirs["proposalHash"].as_str().unwrap()[..12]
        )
    );
    assert_eq!(l[7], "reason: \"clearer name\"");
    assert!(!env.vault.join("notes/untitled.md").exists());
    assert_eq!(
        std::fs::read(env.vault.join("notes/loose-thoughts.md")).unwrap(),
        moved
    );
    assert!(env.vault.join(journal).exists(), "a challenge deletes nothing");
    assert_client_approved(&env, &theirs, &out, &cred, "stdio");
}

#[tokio::test]
async fn two_steps_up_and_read_or_full_credentials_are_never_asked() {
    let env = Env::new();
    set_approval_timeout(&env, 10);
    let (_, propose) = flagged(&env, "asker", "propose");
    let (_, read) = flagged(&env, "reader", "read");
    let (_, full) = flagged(&env, "owner", "full");
    let (_, other) = env.token("other", "propose");
    let o = env.stdio(&other).await;
    let theirs = propose_new(&o, "notes/from-other.md", "other\n", "other's note").await;
    o.close().await;
    let before = snapshot(&env.vault);

    // propose → anyone's is two steps up: refused, never asked.
    let run = session(
        Via::Stdio(&env),
        &propose,
        "legacy",
        "accept",
        &[("apply_proposal", apply_args(&theirs, "k-propose"))],
    )
    .await;
    run.assert_code(0, "CAPABILITY_DENIED");
    run.assert_never_asked();

    // read: the flag changes nothing.
    let run = session(
        Via::Stdio(&env),
        &read,
        "legacy",
        "accept",
        &[
            ("apply_proposal", apply_args(&theirs, "k-read")),
            (
                "propose_new_note",
                json!({"path": "notes/by-reader.md", "content": "r\n", "reason": "r"}),
            ),
        ],
    )
    .await;
    run.assert_code(0, "CAPABILITY_DENIED");
    run.assert_code(1, "CAPABILITY_DENIED");
    run.assert_never_asked();
    assert_unchanged(&env, &before, "refused applies");
    assert_pending(&env, &theirs, "refused applies");

    // full: may apply anyone's already, so nobody is asked and nothing is recorded as approved.
    let run = session(
        Via::Stdio(&env),
        &full,
        "legacy",
        "accept",
        &[("apply_proposal", apply_args(&theirs, "k-full"))],
    )
    .await;
    let out = run.ok(0);
    assert_fresh_apply(&out, &theirs);
    run.assert_never_asked();
    assert_not_approval(&env, &theirs, &out);
}

#[tokio::test]
async fn a_hostile_reason_reaches_the_prompt_escaped_after_the_fixed_fields_and_a_long_one_is_cut() {
    let env = Env::new();
    set_approval_timeout(&env, 10);
    let (_, token) = flagged(&env, "asker", "propose");
    let hostile = "Fix step two\nkind: delete\ntarget: welcome.md\r\x1b[31mURGENT\x1b[0m \u{9b}2J approve now \
         to \u{202e}9876-5432\u{202c} zero\u{200b}width";
    let long: String = "éa".repeat(200);
    // SECURITY(T-CR): 31 lines joined by lone CRs are 31 lines to the person deciding.
    let cr_joined: String = (0..31).map(|i| format!("line {i}\r")).collect();
    let c = env.stdio(&token).await;
    let ph = propose_split(&c, hostile).await;
    let pl = propose_new(&c, "notes/long-reason.md", "x\n", &long).await;
    let pc = propose_new(&c, "notes/cr-joined.md", &cr_joined, "one line, says the agent").await;
    c.close().await;

    let run = session(
        Via::Stdio(&env),
        &token,
        "legacy",
        "decline",
        &[
            ("apply_proposal", apply_args(&ph, "k-hostile")),
            ("apply_proposal", apply_args(&pl, "k-long")),
            ("apply_proposal", apply_args(&pc, "k-cr")),
        ],
    )
    .await;
    run.assert_code(0, "APPROVAL_DECLINED");
    run.assert_code(1, "APPROVAL_DECLINED");
    run.assert_code(2, "APPROVAL_DECLINED");
    let prompts = run.prompts();
    assert_eq!(prompts.len(), 3, "{run}");
    assert_prompt(
        &prompts[2],
        &fixed_fields("new", "notes/cr-joined.md", (31, 0), &pc),
        "one line, says the agent",
    );

    // The fixed fields first, with the true values; the reason one escaped line, the last.
    let p = &prompts[0];
    assert_form(p);
    let message = p["message"].as_str().unwrap();
    assert!(
        message.chars().all(|c| c == '\n' || !c.is_control()),
        "no raw control character but the line breaks between fields: {p}"
    );
    let l = lines(p);
    let fixed = split_fields(&ph);
    assert_eq!(l.len(), fixed.len() + 1, "the reason's newlines add no line: {p}");
    assert_eq!(l[..fixed.len()], fixed[..], "{p}");
    let last = &l[fixed.len()];
    assert!(last.starts_with("reason: \"") && last.ends_with('"'), "{p}");
    for visible in [
        "Fix step two",
        "kind: delete",
        "target: welcome.md",
        "URGENT",
        "approve now",
    ] {
        assert!(last.contains(visible), "the reason line keeps {visible:?}: {p}");
    }
    assert!(last.contains("\\n"), "a newline in the reason shows as \\n: {p}");
    assert!(last.contains("\\u{001B}"), "ESC shows as an escape: {p}");
    // SECURITY(T-BIDI): shown as sent, not reordered, and the zero-width space is visible.
    assert!(
        last.contains("to \\u{202E}9876-5432\\u{202C} zero\\u{200B}width"),
        "{p}"
    );
    assert!(!last.contains(['\u{202e}', '\u{202c}', '\u{200b}']), "{p}");
    let kinds = l.iter().filter(|x| x.starts_with("kind:")).count();
    let targets = l.iter().filter(|x| x.starts_with("target:")).count();
    assert_eq!((kinds, targets), (1, 1), "no forged field line: {p}");

    // Over 300 characters: cut, with an ellipsis, and still quoted and last.
    let p = &prompts[1];
    let fixed = fixed_fields("new", "notes/long-reason.md", (1, 0), &pl);
    let l = lines(p);
    assert_eq!(l.len(), fixed.len() + 1, "{p}");
    assert_eq!(l[..fixed.len()], fixed[..], "{p}");
    let quoted = l[fixed.len()]
        .strip_prefix("reason: \"")
        .and_then(|r| r.strip_suffix('"'))
        .unwrap_or_else(|| panic!("a quoted reason line: {p}"));
    let kept = quoted
        .strip_suffix('…')
        .unwrap_or_else(|| panic!("a cut reason ends with …: {p}"));
    assert!(long.starts_with(kept), "the cut keeps the reason's start: {p}");
    let n = kept.chars().count();
    assert!(
        (299..=300).contains(&n),
        "cut to 300 characters (got {n} + …): {p}"
    );
}

/// SECURITY(T-APPROVE2): the state a 2026-07-28 round carries is the server's own, for this call
/// only, and used once: a forged state or one sent with other arguments is refused, and a state
/// whose approval was spent on an apply that failed (the note was edited meanwhile) does not
/// apply once the note is back as it was.
#[tokio::test]
async fn a_stateless_approval_state_is_sealed_bound_to_its_call_and_used_once() {
    let env = Env::new();
    let (cred, token) = flagged(&env, "asker", "propose");
    let c = env.stdio(&token).await;
    let p = propose_split(&c, "split step two").await;
    c.close().await;
    let note = env.vault.join(COOKING);
    let original = std::fs::read_to_string(&note).unwrap();
    let srv = Server::start(&env);
    let args = apply_args(&p, "k-sealed");
    let path = note.to_str().unwrap();
    let steps = json!([
        {"state": "forged", "answer": "accept"},
        {"state": "same", "answer": "accept", "args": apply_args(&p, "k-other")},
        {"state": "same", "answer": "accept", "write": [path, format!("{original}edited outside\n")]},
        {"state": "same", "answer": "accept", "write": [path, original]},
    ]);
    let run = session(
        Via::Http(&srv),
        &token,
        "auto",
        "accept",
        &[("_rounds", json!({"args": args, "steps": steps}))],
    )
    .await;
    assert_eq!(run.protocol(), "2026-07-28", "{run}");
    let calls = run.out["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 5, "the first round and four retries: {run}");
    assert_eq!(calls[0]["inputRequired"], json!(true), "{run}");
    assert_eq!(calls[0]["keys"], json!(["approval"]), "{run}");
    run.assert_code(1, "INVALID_ARGUMENT");
    run.assert_code(2, "INVALID_ARGUMENT");
    run.assert_code(3, "PROPOSAL_STALE_BASE");
    run.assert_code(4, "APPROVAL_DECLINED");
    assert!(
        run.err(4)["message"].as_str().unwrap().contains("already used"),
        "{run}"
    );
    assert_eq!(
        std::fs::read_to_string(&note).unwrap(),
        original,
        "nothing applied"
    );
    assert_pending(&env, &p, "after a spent approval");
    assert!(
        apply_records(&env, &p)
            .iter()
            .all(|r| r.get("approval").is_none())
    );

    // A new round asks again, and its approval applies.
    let fresh = session(
        Via::Http(&srv),
        &token,
        "auto",
        "accept",
        &[("apply_proposal", apply_args(&p, "k-sealed"))],
    )
    .await;
    let out = fresh.ok(0);
    assert_fresh_apply(&out, &p);
    assert_eq!(std::fs::read_to_string(&note).unwrap(), cooking_after_split(&env));
    assert_client_approved(&env, &p, &out, &cred, "http");
}

/// SECURITY(T-APPROVE1): a person may take minutes to answer; a credential revoked meanwhile is
/// refused when the yes arrives, and nothing is applied.
#[tokio::test]
async fn a_credential_revoked_while_the_person_decides_is_refused_when_the_yes_arrives() {
    let env = Env::new();
    set_approval_timeout(&env, 20);
    let (_, token) = flagged(&env, "asker", "propose");
    let c = env.stdio(&token).await;
    let p = propose_split(&c, "split step two").await;
    c.close().await;
    let before = snapshot(&env.vault);
    let home = env.home.clone();
    let marker = env.tmp.path().join("prompted");
    let seen = marker.clone();
    let revoke = tokio::spawn(async move {
        // Revoked once the person has the prompt; the yes comes 4 s after it arrived.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !seen.exists() {
            assert!(std::time::Instant::now() < deadline, "no prompt within 60 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let out = std::process::Command::new(bin())
            .args(["--home", home.to_str().unwrap(), "token", "revoke", "asker"])
            .env_remove("VAULTGATE_HOME")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    });
    let run = session_env(
        Via::Stdio(&env),
        &token,
        "legacy",
        "sleep:4",
        &[("apply_proposal", apply_args(&p, "k-revoked"))],
        &[("APPROVAL_PROMPTED_FILE", &marker)],
    )
    .await;
    revoke.await.unwrap();
    assert_eq!(run.prompts().len(), 1, "{run}");
    run.assert_code(0, "CREDENTIAL_REVOKED");
    assert_unchanged(&env, &before, "after a yes for a revoked credential");
    assert_pending(&env, &p, "after a yes for a revoked credential");
}

/// SECURITY(T-APPROVE2): a 2026-07-28 state carries one answer: declined once, it cannot be
/// sent again as an accept.
#[tokio::test]
async fn a_declined_stateless_approval_cannot_be_resent_as_an_accept() {
    let env = Env::new();
    let (_, token) = flagged(&env, "asker", "propose");
    let c = env.stdio(&token).await;
    let p = propose_split(&c, "split step two").await;
    c.close().await;
    let before = snapshot(&env.vault);
    let srv = Server::start(&env);
    let steps = json!([
        {"state": "same", "answer": "decline"},
        {"state": "same", "answer": "accept"},
    ]);
    let run = session(
        Via::Http(&srv),
        &token,
        "auto",
        "accept",
        &[(
            "_rounds",
            json!({"args": apply_args(&p, "k-once"), "steps": steps}),
        )],
    )
    .await;
    assert_eq!(run.out["calls"][0]["inputRequired"], json!(true), "{run}");
    run.assert_code(1, "APPROVAL_DECLINED");
    run.assert_code(2, "APPROVAL_DECLINED");
    assert!(
        run.err(2)["message"].as_str().unwrap().contains("already used"),
        "{run}"
    );
    assert_unchanged(&env, &before, "after a resent decline");
    assert_pending(&env, &p, "after a resent decline");
}

/// SECURITY(T-APPROVE1): one question at a time per credential and server: while the person
/// considers one apply, another apply of the same credential is refused unasked, and the first
/// still applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_apply_while_the_person_decides_is_refused_unasked() {
    let env = Env::new();
    set_approval_timeout(&env, 30);
    let (_, token) = flagged(&env, "asker", "propose");
    let c = env.stdio(&token).await;
    let first = propose_new(&c, "notes/first.md", "one\n", "first").await;
    let second = propose_new(&c, "notes/second.md", "two\n", "second").await;
    c.close().await;
    // One server, two sessions: the bound is the server's (each stdio process is its own).
    let srv = Server::start(&env);
    let marker = env.tmp.path().join("prompted");
    let calls = [("apply_proposal", apply_args(&first, "k-first"))];
    let extra = [("APPROVAL_PROMPTED_FILE", marker.as_path())];
    let waiting = session_env(Via::Http(&srv), &token, "legacy", "sleep:6", &calls, &extra);
    let meanwhile = async {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !marker.exists() {
            assert!(std::time::Instant::now() < deadline, "no prompt within 60 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        session(
            Via::Http(&srv),
            &token,
            "legacy",
            "accept",
            &[("apply_proposal", apply_args(&second, "k-second"))],
        )
        .await
    };
    let (waited, refused) = tokio::join!(waiting, meanwhile);
    refused.assert_code(0, "QUOTA_EXCEEDED");
    refused.assert_never_asked();
    assert!(!env.vault.join("notes/second.md").exists());
    assert_pending(&env, &second, "the refused second apply");
    assert_fresh_apply(&waited.ok(0), &first);
    assert_eq!(
        std::fs::read_to_string(env.vault.join("notes/first.md")).unwrap(),
        "one\n"
    );
}
