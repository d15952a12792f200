//! Crash safety and concurrency of the apply transaction (docs/contract.md#proposals, docs/contract.md#the-audit-log) with real processes on real
//! files: processes racing to apply one proposal, fifty concurrent applies, an abort at every
//! `VAULTGATE_TEST_FAILPOINT` step, real SIGKILLs in the middle of a batch, and the idempotent
//! replay of an apply whose answer was lost in a crash. After every crash the next start (or the
//! next apply) must leave each proposal either applied and archived or still pending, each note
//! at its old bytes or exactly the proposed ones, `_applied.jsonl` and the audit chain valid, and
//! nothing applied twice. With no outside edit, an interrupted apply is always finished, and it
//! leaves exactly one success record in the audit log: the call's own when the crash came after
//! its audit line, else one `apply.recovered`.
#![cfg(unix)]

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, JsonObject};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::Barrier;
use tokio::task::JoinSet;

use crate::util::{Client, Env, Reply, bin, bounded, call, to_reply};

/// Every step at which the apply transaction can abort the process (in the order it reaches
/// them): the intent is recorded, the first file operation of the plan is done (archive moves of
/// the proposal files are operations of the plan too), all of them are done, the audit line is
/// written, the transaction is committed.
const FAILPOINTS: [&str; 5] = [
    "after_intent",
    "after_first_op",
    "after_write",
    "after_audit",
    "after_commit",
];
/// The steps that come before the audit line: recovery writes the one success record.
const BEFORE_AUDIT: [&str; 3] = ["after_intent", "after_first_op", "after_write"];
/// What `std::process::abort` raises.
const SIGABRT: i32 = 6;
const SIGKILL: i32 = 9;
const TEMP_PREFIX: &str = ".vaultgate-tmp-";

// ---- processes --------------------------------------------------------------------------------

/// The CLI with this home, never inheriting a VAULTGATE_* variable; `failpoint` set only if given.
fn cli_cmd(env: &Env, args: &[&str], failpoint: Option<&str>) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(bin());
    cmd.arg("--home")
        .arg(&env.home)
        .args(args)
        .env_remove("VAULTGATE_HOME")
        .env_remove("VAULTGATE_TOKEN")
        .env_remove("VAULTGATE_TEST_FAILPOINT")
        .env("USER", "tester")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(step) = failpoint {
        cmd.env("VAULTGATE_TEST_FAILPOINT", step);
    }
    cmd
}

async fn run_cmd(mut cmd: tokio::process::Command, what: &str) -> Output {
    let child = cmd.spawn().unwrap();
    bounded(what, child.wait_with_output()).await.unwrap()
}

async fn cli(env: &Env, args: &[&str], failpoint: Option<&str>) -> Output {
    run_cmd(cli_cmd(env, args, failpoint), &format!("vaultgate {args:?}")).await
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `vaultgate audit verify` must exit 0.
async fn audit_verifies(env: &Env, when: &str) {
    let out = cli(env, &["audit", "verify"], None).await;
    assert!(
        out.status.success(),
        "{when}: audit verify failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
}

/// `vaultgate stdio` (start-up runs recovery) with an rmcp client; like `Env::stdio`, plus the
/// failpoint the server process reads.
async fn stdio(env: &Env, token: &str, failpoint: Option<&str>) -> Client {
    let mut cmd = tokio::process::Command::new(bin());
    cmd.arg("stdio")
        .arg("--home")
        .arg(&env.home)
        .env_remove("VAULTGATE_HOME")
        .env_remove("VAULTGATE_TEST_FAILPOINT")
        .env("VAULTGATE_TOKEN", token)
        .stderr(Stdio::null());
    if let Some(step) = failpoint {
        cmd.env("VAULTGATE_TEST_FAILPOINT", step);
    }
    let transport = TokioChildProcess::new(cmd).unwrap();
    Client {
        inner: bounded("starting vaultgate stdio", ().serve(transport))
            .await
            .unwrap(),
    }
}

fn params(tool: &str, args: Value) -> CallToolRequestParams {
    let mut p = CallToolRequestParams::new(tool.to_owned());
    let args: JsonObject = match args {
        Value::Object(m) => m,
        other => panic!("arguments must be an object, got {other}"),
    };
    p.arguments = Some(args);
    p
}

async fn revision(c: &Client) -> u64 {
    call(c, "get_vault_overview", json!({})).await.ok()["revision"]
        .as_u64()
        .unwrap()
}

/// Checks that are reported together at the end of a test rather than stopping it, so that one
/// wrong revision count or one leftover temp file does not hide the checks that follow it.
#[derive(Default)]
struct Findings(Vec<String>);

impl Findings {
    /// The revision moved once per applied proposal.
    fn revision(&mut self, when: &str, got: u64, want: u64) {
        if got != want {
            self.0.push(format!("{when}: revision {got}, expected {want}"));
        }
    }

    /// No temp file of an atomic write is left outside `.vaultgate/`.
    fn no_temp_files(&mut self, vault: &Path, when: &str) {
        let temps = temp_files(vault);
        if !temps.is_empty() {
            self.0
                .push(format!("{when}: temp files left in the vault: {temps:?}"));
        }
    }

    fn assert_all_held(self) {
        assert!(
            self.0.is_empty(),
            "{} check(s) failed:\n{}",
            self.0.len(),
            self.0.join("\n")
        );
    }
}

/// A small xorshift generator; the seed is printed so a failing run can be replayed.
struct Rng(u64);

impl Rng {
    fn seeded() -> Rng {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            | 1;
        eprintln!("crash rng seed: {seed}");
        Rng(seed)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

// ---- proposals --------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Proposed {
    id: String,
    slug: String,
    kind: &'static str,
    hash: String,
    target: String,
    /// The proposed text (new, patch).
    content: Option<String>,
    /// The target's bytes when proposed (`None`: it did not exist).
    old: Option<Vec<u8>>,
}

impl Proposed {
    /// The proposal's file names inside `<inbox>/<kind>/` (docs/contract.md#proposals).
    fn inbox_files(&self) -> Vec<String> {
        let s = &self.slug;
        match self.kind {
            "new" => vec![format!("{s}.md"), format!("{s}.proposal.json")],
            "patch" => vec![
                format!("{s}.new.md"),
                format!("{s}.diff"),
                format!("{s}.proposal.json"),
            ],
            _ => vec![format!("{s}.proposal.json")],
        }
    }

    fn apply_args(&self, key: &str) -> Value {
        json!({"id": self.id, "proposalHash": self.hash, "idempotencyKey": key})
    }
}

async fn propose(
    c: &Client,
    env: &Env,
    tool: &str,
    kind: &'static str,
    args: Value,
    content: Option<&str>,
) -> Proposed {
    let r = call(c, tool, args.clone()).await;
    let r = match r {
        Reply::Ok(v) => v,
        Reply::Err(e) => panic!("{tool} {args}: {e}"),
    };
    let target = r["target"]
        .as_str()
        .or_else(|| args["path"].as_str())
        .or_else(|| args["to"].as_str())
        .unwrap()
        .to_owned();
    Proposed {
        id: r["id"].as_str().unwrap().to_owned(),
        slug: r["slug"].as_str().unwrap().to_owned(),
        kind,
        hash: r["proposalHash"].as_str().unwrap().to_owned(),
        old: std::fs::read(env.vault.join(&target)).ok(),
        target,
        content: content.map(str::to_owned),
    }
}

async fn propose_new(c: &Client, env: &Env, path: &str, content: &str) -> Proposed {
    let args = json!({"path": path, "content": content, "reason": "crash test"});
    propose(c, env, "propose_new_note", "new", args, Some(content)).await
}

async fn propose_patch(c: &Client, env: &Env, path: &str, content: &str) -> Proposed {
    let note = call(c, "read_note", json!({"path": path})).await.ok();
    let args = json!({"path": path, "baseHash": note["hash"], "content": content, "reason": "crash test"});
    propose(c, env, "propose_note_patch", "patch", args, Some(content)).await
}

async fn propose_move(c: &Client, env: &Env, from: &str, to: &str) -> Proposed {
    let args = json!({"from": from, "to": to, "reason": "crash test"});
    let mut p = propose(c, env, "propose_move", "move", args, None).await;
    p.old = std::fs::read(env.vault.join(from)).ok();
    p
}

async fn propose_delete(c: &Client, env: &Env, path: &str) -> Proposed {
    let note = call(c, "read_note", json!({"path": path})).await.ok();
    let args = json!({"path": path, "baseHash": note["hash"], "reason": "crash test"});
    propose(c, env, "propose_delete", "delete", args, None).await
}

/// One proposal of each kind on the basic fixture (the move rewrites links in other notes).
async fn propose_kind(c: &Client, env: &Env, kind: &str) -> Proposed {
    match kind {
        "new" => propose_new(c, env, "z/crash-new.md", "# Crash\n\nwritten by an apply\n").await,
        "patch" => {
            let old = std::fs::read_to_string(env.vault.join("z/attention.md")).unwrap();
            let new = format!("{old}\n## Added by a patch\n\nmore text\n");
            propose_patch(c, env, "z/attention.md", &new).await
        }
        "move" => propose_move(c, env, "z/softmax.md", "z/softmax-function.md").await,
        "delete" => propose_delete(c, env, "z/transformer.md").await,
        other => panic!("unknown kind {other}"),
    }
}

// ---- what is on disk ----------------------------------------------------------------------------

type Snapshot = BTreeMap<String, Vec<u8>>;

fn walk(dir: &Path, rel: &str, out: &mut Vec<(String, PathBuf)>) {
    // A folder that cannot be read fails the test: an empty snapshot would make every
    // before/after comparison pass.
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for e in entries {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        let path = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        let ty = e.file_type().unwrap();
        if ty.is_dir() {
            walk(&e.path(), &path, out);
        } else {
            out.push((path, e.path()));
        }
    }
}

/// Every file of the vault outside `.vaultgate/` and the inbox: the notes as a person sees them.
fn notes(vault: &Path) -> Snapshot {
    let mut files = Vec::new();
    walk(vault, "", &mut files);
    files
        .into_iter()
        .filter(|(rel, _)| !rel.starts_with(".vaultgate/") && !rel.starts_with("inbox/"))
        .map(|(rel, path)| {
            let bytes = std::fs::read(&path).unwrap();
            (rel, bytes)
        })
        .collect()
}

/// Every file of the vault except the machine folder (notes and inbox).
fn everything(vault: &Path) -> Snapshot {
    let mut files = Vec::new();
    walk(vault, "", &mut files);
    files
        .into_iter()
        .filter(|(rel, _)| !rel.starts_with(".vaultgate/"))
        .map(|(rel, path)| {
            let bytes = std::fs::read(&path).unwrap();
            (rel, bytes)
        })
        .collect()
}

/// Temp files of atomic writes outside `.vaultgate/` (there must never be any once recovered).
fn temp_files(vault: &Path) -> Vec<String> {
    let mut files = Vec::new();
    walk(vault, "", &mut files);
    files
        .into_iter()
        .map(|(rel, _)| rel)
        .filter(|rel| !rel.starts_with(".vaultgate/"))
        .filter(|rel| rel.rsplit('/').any(|seg| seg.starts_with(TEMP_PREFIX)))
        .collect()
}

fn assert_no_temp_files(vault: &Path, when: &str) {
    let temps = temp_files(vault);
    assert!(
        temps.is_empty(),
        "{when}: temp files left in the vault: {temps:?}"
    );
}

/// Every path is at its `before` bytes or its `after` bytes (absent counts as a state).
fn assert_each_note_old_or_new(now: &Snapshot, before: &Snapshot, after: &Snapshot, when: &str) {
    let paths: BTreeSet<&String> = now.keys().chain(before.keys()).chain(after.keys()).collect();
    for path in paths {
        let (n, b, a) = (now.get(path), before.get(path), after.get(path));
        assert!(
            n == b || n == a,
            "{when}: {path} is neither its old nor its proposed state (now {:?} bytes)",
            n.map(Vec::len)
        );
    }
}

fn read_jsonl(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: bad line {l}: {e}", path.display())))
        .collect()
}

fn applied_lines(env: &Env) -> Vec<Value> {
    read_jsonl(&env.vault.join("inbox/_applied.jsonl"))
}

fn audit_records(env: &Env) -> Vec<Value> {
    read_jsonl(&env.home.join("audit.jsonl"))
}

/// Canonical JSON (docs/contract.md#the-audit-log): keys sorted by code point, no whitespace, serde_json's escapes.
fn canonical(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            let items: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", serde_json::to_string(k).unwrap(), canonical(&m[k])))
                .collect();
            format!("{{{}}}", items.join(","))
        }
        Value::Array(items) => format!("[{}]", items.iter().map(canonical).collect::<Vec<_>>().join(",")),
        other => serde_json::to_string(other).unwrap(),
    }
}

/// `_applied.jsonl` is a valid chain: seq 1..n, each `prev` the previous `hash` (64 zeros first),
/// each `hash` the SHA-256 of the line's canonical JSON without `hash`; ids are unique.
fn assert_applied_chain(lines: &[Value]) {
    let mut prev = "0".repeat(64);
    let mut ids = BTreeSet::new();
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(
            line["seq"].as_u64(),
            Some(i as u64 + 1),
            "_applied.jsonl line {i}: seq"
        );
        assert_eq!(
            line["prev"].as_str(),
            Some(prev.as_str()),
            "_applied.jsonl line {i}: prev"
        );
        let mut without = line.as_object().unwrap().clone();
        let hash = without.remove("hash").unwrap();
        let want = hex::encode(Sha256::digest(canonical(&Value::Object(without)).as_bytes()));
        assert_eq!(
            hash.as_str(),
            Some(want.as_str()),
            "_applied.jsonl line {i}: hash"
        );
        prev = want;
        let id = line["id"].as_str().unwrap().to_owned();
        assert!(ids.insert(id.clone()), "proposal {id} is in _applied.jsonl twice");
    }
}

/// The records an apply transaction wrote for one proposal: (`tool_call`, `apply.recovered`).
/// Those carry the target; a replayed call is recorded too, like any call, but without one.
fn apply_records(records: &[Value], id: &str) -> (usize, usize) {
    let mine = records.iter().filter(|r| {
        r["tool"] == "apply_proposal"
            && r["outcome"] == "ok"
            && r["proposalId"].as_str() == Some(id)
            && r["target"].is_string()
    });
    let mut counts = (0, 0);
    for r in mine {
        match r["event"].as_str() {
            Some("apply.recovered") => counts.1 += 1,
            _ => counts.0 += 1,
        }
    }
    counts
}

/// Status of every proposal of the vault, from `vaultgate inbox list --json`.
async fn statuses(env: &Env) -> BTreeMap<String, String> {
    let mut all = BTreeMap::new();
    for status in ["pending", "applied", "rejected"] {
        let out = cli(env, &["inbox", "list", "--status", status, "--json"], None).await;
        assert!(out.status.success(), "inbox list: {}", stderr(&out));
        let items: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
        for it in items {
            all.insert(it["id"].as_str().unwrap().to_owned(), status.to_owned());
        }
    }
    all
}

/// Where a proposal's files are: all in `<inbox>/<kind>/` (pending) or all in
/// `<inbox>/applied/<date>/` (archived); anything else is a broken state.
#[derive(Debug, PartialEq, Eq)]
enum Place {
    Pending,
    Archived,
}

fn place(env: &Env, p: &Proposed) -> Result<Place, String> {
    let inbox = env.vault.join("inbox");
    let dates: Vec<PathBuf> = std::fs::read_dir(inbox.join("applied"))
        .map(|rd| rd.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    let files = p.inbox_files();
    let pending = files
        .iter()
        .filter(|f| inbox.join(p.kind).join(f).exists())
        .count();
    let archived = files
        .iter()
        .filter(|f| dates.iter().filter(|d| d.join(f).exists()).count() == 1)
        .count();
    match (pending, archived) {
        (n, 0) if n == files.len() => Ok(Place::Pending),
        (0, n) if n == files.len() => {
            if let (Some(content), "new") = (&p.content, p.kind) {
                let name = &files[0];
                let d = dates.iter().find(|d| d.join(name).exists()).unwrap();
                let archived = std::fs::read_to_string(d.join(name)).unwrap();
                if &archived != content {
                    return Err(format!("archived {name} differs from the proposed text"));
                }
            }
            Ok(Place::Archived)
        }
        _ => Err(format!(
            "{pending} of {} files in the inbox and {archived} archived",
            files.len()
        )),
    }
}

/// The settled state of one proposal after recovery: applied and archived (the notes exactly as
/// proposed, one `_applied.jsonl` line, exactly one success record: the call's own or one
/// `apply.recovered`, never both) or pending (files in the inbox, the target untouched, no line,
/// no record). Returns "applied".
fn check_settled(
    env: &Env,
    p: &Proposed,
    statuses: &BTreeMap<String, String>,
    lines: &[Value],
    records: &[Value],
    when: &str,
) -> bool {
    let status = statuses.get(&p.id).map(String::as_str);
    let applied = match status {
        Some("applied") => true,
        Some("pending") => false,
        other => panic!("{when}: proposal {} ({}) is {other:?}", p.id, p.kind),
    };
    let place = place(env, p).unwrap_or_else(|e| panic!("{when}: proposal {} ({}): {e}", p.id, p.kind));
    let expected_place = if applied { Place::Archived } else { Place::Pending };
    assert_eq!(place, expected_place, "{when}: proposal {} is {status:?}", p.id);
    let in_log = lines.iter().filter(|l| l["id"].as_str() == Some(&p.id)).count();
    assert_eq!(
        in_log,
        usize::from(applied),
        "{when}: _applied.jsonl lines for {}",
        p.id
    );
    let (calls, recovered) = apply_records(records, &p.id);
    assert!(
        calls + recovered == usize::from(applied),
        "{when}: proposal {} ({status:?}) has {calls} apply and {recovered} apply.recovered audit records",
        p.id
    );
    if let Some(content) = &p.content {
        let now = std::fs::read(env.vault.join(&p.target)).ok();
        if applied {
            assert_eq!(
                now.as_deref(),
                Some(content.as_bytes()),
                "{when}: {} after apply",
                p.target
            );
        } else {
            assert_eq!(now, p.old, "{when}: {} of a pending proposal changed", p.target);
        }
    }
    applied
}

// ---- 1. racing processes ------------------------------------------------------------------------

const RACES: usize = 10;

/// After each race: one winner, the note written once, one line, one apply record.
async fn check_race_result(env: &Env, p: &Proposed, winners: usize, round: usize) {
    assert_eq!(winners, 1, "round {round}: exactly one apply succeeds");
    assert_eq!(
        std::fs::read_to_string(env.vault.join(&p.target)).unwrap(),
        p.content.clone().unwrap()
    );
    let lines = applied_lines(env);
    assert_eq!(
        lines.iter().filter(|l| l["id"].as_str() == Some(&p.id)).count(),
        1,
        "round {round}: one _applied.jsonl line"
    );
    assert_eq!(
        lines.len(),
        round + 1,
        "round {round}: _applied.jsonl lines so far"
    );
    assert_eq!(
        apply_records(&audit_records(env), &p.id),
        (1, 0),
        "round {round}: one apply record"
    );
    assert_eq!(place(env, p), Ok(Place::Archived));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_and_a_server_racing_to_apply_one_proposal_apply_it_once() {
    let env = Env::new();
    let (_, writer) = env.token("writer", "auto");
    let (_, admin) = env.token("admin", "full");
    let proposer = stdio(&env, &writer, None).await;
    let applier = stdio(&env, &admin, None).await;
    let rev0 = revision(&proposer).await;
    let mut rng = Rng::seeded();
    let (mut cli_wins, mut mcp_wins) = (0, 0);
    for round in 0..RACES {
        let p = propose_new(
            &proposer,
            &env,
            &format!("z/race-{round}.md"),
            &format!("# Race {round}\n\none writer wins\n"),
        )
        .await;
        let barrier = Arc::new(Barrier::new(2));
        let cmd = cli_cmd(&env, &["apply", "--only", &p.id, "--yes"], None);
        let b = barrier.clone();
        let by_cli = tokio::spawn(async move {
            b.wait().await;
            run_cmd(cmd, "vaultgate apply").await
        });
        let peer = applier.inner.peer().clone();
        let args = p.apply_args(&format!("race-{round}"));
        // Both reach the lock within a few milliseconds (the CLI starts a process, the server
        // answers at once); a varying head start of up to 4 ms for the CLI lets either side win.
        let delay = Duration::from_millis(rng.below(5));
        let b = barrier.clone();
        let by_mcp = tokio::spawn(async move {
            b.wait().await;
            tokio::time::sleep(delay).await;
            to_reply(peer.call_tool(params("apply_proposal", args)).await.unwrap())
        });
        let out = bounded("the CLI apply", by_cli).await.unwrap();
        let reply = bounded("the MCP apply", by_mcp).await.unwrap();
        let cli_ok = out.status.success();
        if !cli_ok {
            assert_eq!(out.status.code(), Some(1), "round {round}: {}", stderr(&out));
            assert!(
                stderr(&out).contains("PROPOSAL_ALREADY_APPLIED"),
                "round {round}: the losing CLI names PROPOSAL_ALREADY_APPLIED: {}",
                stderr(&out)
            );
        }
        let mcp_ok = match reply {
            Reply::Ok(v) => {
                assert_eq!(v["applied"], true);
                assert_eq!(v["replayed"], false);
                true
            }
            Reply::Err(e) => {
                assert_eq!(e["code"], "PROPOSAL_ALREADY_APPLIED", "round {round}: {e}");
                false
            }
        };
        cli_wins += usize::from(cli_ok);
        mcp_wins += usize::from(mcp_ok);
        check_race_result(&env, &p, usize::from(cli_ok) + usize::from(mcp_ok), round).await;
    }
    eprintln!("races won: cli {cli_wins}, mcp {mcp_wins}");
    assert_applied_chain(&applied_lines(&env));
    assert_eq!(
        revision(&proposer).await,
        rev0 + RACES as u64,
        "one revision per apply"
    );
    audit_verifies(&env, "after the races").await;
    proposer.close().await;
    applier.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_racing_to_apply_one_proposal_apply_it_once() {
    let env = Env::new();
    let (_, writer) = env.token("writer", "auto");
    let (_, a) = env.token("admin-a", "full");
    let (_, b) = env.token("admin-b", "full");
    let proposer = stdio(&env, &writer, None).await;
    let servers = [stdio(&env, &a, None).await, stdio(&env, &b, None).await];
    let rev0 = revision(&proposer).await;
    for round in 0..RACES {
        let p = propose_new(
            &proposer,
            &env,
            &format!("z/duel-{round}.md"),
            &format!("# Duel {round}\n\none server wins\n"),
        )
        .await;
        let barrier = Arc::new(Barrier::new(2));
        let mut set = JoinSet::new();
        for (i, s) in servers.iter().enumerate() {
            let peer = s.inner.peer().clone();
            let args = p.apply_args(&format!("duel-{round}-{i}"));
            let b = barrier.clone();
            set.spawn(async move {
                b.wait().await;
                to_reply(peer.call_tool(params("apply_proposal", args)).await.unwrap())
            });
        }
        let replies = bounded("two applies", set.join_all()).await;
        let mut winners = 0;
        for r in replies {
            match r {
                Reply::Ok(v) => {
                    assert_eq!(v["applied"], true);
                    winners += 1;
                }
                Reply::Err(e) => assert_eq!(e["code"], "PROPOSAL_ALREADY_APPLIED", "round {round}: {e}"),
            }
        }
        check_race_result(&env, &p, winners, round).await;
    }
    assert_applied_chain(&applied_lines(&env));
    assert_eq!(
        revision(&proposer).await,
        rev0 + RACES as u64,
        "one revision per apply"
    );
    audit_verifies(&env, "after the races").await;
    proposer.close().await;
    for s in servers {
        s.close().await;
    }
}

// ---- 2. fifty concurrent applies ----------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_applies_from_five_servers_all_commit_once_in_one_chain() {
    const SERVERS: usize = 5;
    const PER_SERVER: usize = 10;
    let env = Env::new();
    let (_, writer) = env.token("writer", "auto");
    let proposer = stdio(&env, &writer, None).await;
    let mut proposed = Vec::new();
    for i in 0..SERVERS * PER_SERVER {
        let content = format!("# Bulk {i}\n\nnote number {i} of fifty\n");
        proposed.push(propose_new(&proposer, &env, &format!("bulk/note-{i:02}.md"), &content).await);
    }
    let rev0 = revision(&proposer).await;
    let mut servers = Vec::new();
    for s in 0..SERVERS {
        let (_, token) = env.token(&format!("applier-{s}"), "full");
        servers.push(stdio(&env, &token, None).await);
    }
    let mut set = JoinSet::new();
    for (i, p) in proposed.iter().enumerate() {
        let peer = servers[i % SERVERS].inner.peer().clone();
        let args = p.apply_args(&format!("bulk-{i}"));
        set.spawn(async move {
            let r = peer.call_tool(params("apply_proposal", args)).await;
            (i, to_reply(r.expect("tools/call transport error")))
        });
    }
    let replies = bounded("fifty applies", set.join_all()).await;
    let mut history_ids = BTreeSet::new();
    let mut audit_seqs = BTreeSet::new();
    for (i, r) in replies {
        let v = match r {
            Reply::Ok(v) => v,
            Reply::Err(e) => panic!("apply {i} failed: {e}"),
        };
        assert_eq!(v["applied"], true);
        assert_eq!(v["replayed"], false);
        assert_eq!(v["target"], proposed[i].target);
        history_ids.insert(v["historyEntryId"].as_str().unwrap().to_owned());
        audit_seqs.insert(v["auditSeq"].as_u64().unwrap());
    }
    assert_eq!(history_ids.len(), 50, "one history entry per apply");
    assert_eq!(audit_seqs.len(), 50, "one audit record per apply");
    for p in &proposed {
        assert_eq!(
            std::fs::read_to_string(env.vault.join(&p.target)).unwrap(),
            p.content.clone().unwrap(),
            "{}",
            p.target
        );
        assert_eq!(place(&env, p), Ok(Place::Archived), "{}", p.target);
    }
    let lines = applied_lines(&env);
    assert_eq!(lines.len(), 50);
    assert_applied_chain(&lines);
    let ids: BTreeSet<String> = proposed.iter().map(|p| p.id.clone()).collect();
    let logged: BTreeSet<String> = lines
        .iter()
        .map(|l| l["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(logged, ids, "_applied.jsonl names exactly the fifty proposals");
    audit_verifies(&env, "after fifty applies").await;
    let records = audit_records(&env);
    let applies: Vec<&Value> = records
        .iter()
        .filter(|r| r["tool"] == "apply_proposal" && r["outcome"] == "ok")
        .collect();
    assert_eq!(applies.len(), 50, "fifty apply records");
    let audited: BTreeSet<String> = applies
        .iter()
        .map(|r| r["proposalId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(audited, ids, "one apply record per proposal");
    // Groups of five processes, one after another, read as if sequential: `_applied.jsonl` in the
    // order of the apply records.
    let in_audit: Vec<&str> = applies
        .iter()
        .map(|r| r["proposalId"].as_str().unwrap())
        .collect();
    let in_chain: Vec<&str> = lines.iter().map(|l| l["id"].as_str().unwrap()).collect();
    assert_eq!(
        in_chain, in_audit,
        "_applied.jsonl in the order of the audit records"
    );
    for seq in &audit_seqs {
        let r = records.iter().find(|r| r["seq"].as_u64() == Some(*seq)).unwrap();
        assert_eq!(r["tool"], "apply_proposal", "auditSeq {seq} is an apply record");
    }
    assert_eq!(
        revision(&proposer).await,
        rev0 + 50,
        "the revision moved by exactly fifty"
    );
    proposer.close().await;
    for s in servers {
        s.close().await;
    }
}

// ---- 3. an abort at every step ------------------------------------------------------------------

/// The notes after a clean apply of one proposal of `kind` on the basic fixture.
async fn clean_apply(kind: &str) -> (Snapshot, Snapshot) {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let c = stdio(&env, &token, None).await;
    let p = propose_kind(&c, &env, kind).await;
    c.close().await;
    let before = notes(&env.vault);
    let out = cli(&env, &["apply", "--only", &p.id, "--yes"], None).await;
    assert!(out.status.success(), "clean apply of a {kind}: {}", stderr(&out));
    (before, notes(&env.vault))
}

/// For every failpoint: propose one `kind`, abort `vaultgate apply` at that step, restart (once
/// by starting a stdio server, once by running the CLI apply again), and check the settled state.
async fn crash_at_every_step(kind: &'static str, steps: &[&str]) {
    let (clean_before, clean_after) = clean_apply(kind).await;
    let mut findings = Findings::default();
    let cases = steps.iter().flat_map(|step| [(step, true), (step, false)]);
    for (step, via_server) in cases {
        let when = format!("{kind} crashed {step}");
        let env = Env::new();
        let (_, token) = env.token("writer", "auto");
        let c = stdio(&env, &token, None).await;
        let p = propose_kind(&c, &env, kind).await;
        let rev0 = revision(&c).await;
        // No server runs while the CLI crashes: nobody but the recovery sees the half-done apply.
        c.close().await;
        let before = notes(&env.vault);
        assert_eq!(before, clean_before, "{when}: the same start as the clean apply");

        let out = cli(&env, &["apply", "--only", &p.id, "--yes"], Some(step)).await;
        assert_eq!(
            out.status.signal(),
            Some(SIGABRT),
            "{when}: the apply aborts at the failpoint ({}): {}",
            out.status,
            stderr(&out)
        );
        assert_no_temp_files(&env.vault, &format!("{when}, before recovery"));
        assert_each_note_old_or_new(
            &notes(&env.vault),
            &before,
            &clean_after,
            &format!("{when}, before recovery"),
        );

        // Restart: a server start-up (recover_all) or the next CLI apply (recover under the lock).
        if via_server {
            let c = stdio(&env, &token, None).await;
            c.close().await;
        } else {
            let out = cli(&env, &["apply", "--only", &p.id, "--yes"], None).await;
            assert!(
                out.status.success()
                    || (out.status.code() == Some(1) && stderr(&out).contains("PROPOSAL_ALREADY_APPLIED")),
                "{when}: applying again after the crash: {} {}",
                out.status,
                stderr(&out)
            );
        }
        let when = format!(
            "{when}, recovered by {}",
            if via_server { "a server start" } else { "the CLI" }
        );
        // A second start must find nothing left to do.
        let c = stdio(&env, &token, None).await;
        assert_no_temp_files(&env.vault, &when);
        let applied = check_settled(
            &env,
            &p,
            &statuses(&env).await,
            &applied_lines(&env),
            &audit_records(&env),
            &when,
        );
        // Nothing edited the notes meanwhile: every file is at its before or after state, so
        // recovery finishes the apply, whatever the step.
        assert!(
            applied,
            "{when}: an interrupted apply with no outside edit is finished"
        );
        let (calls, recovered) = apply_records(&audit_records(&env), &p.id);
        let want_records = if BEFORE_AUDIT.contains(step) {
            (0, 1)
        } else {
            (1, 0)
        };
        assert_eq!(
            (calls, recovered),
            want_records,
            "{when}: (call, apply.recovered) success records"
        );
        let now = notes(&env.vault);
        let want = if applied { &clean_after } else { &before };
        assert!(
            now == *want,
            "{when}: the notes are not exactly the {} state",
            if applied { "applied" } else { "old" }
        );
        assert_applied_chain(&applied_lines(&env));
        findings.revision(&when, revision(&c).await, rev0 + u64::from(applied));
        let overview = call(&c, "get_vault_overview", json!({})).await.ok();
        assert_eq!(
            overview["history"]["undoTop"].is_string(),
            applied,
            "{when}: a history entry exactly when applied: {overview}"
        );
        audit_verifies(&env, &when).await;

        // Applying it once more: success if it was still pending, else PROPOSAL_ALREADY_APPLIED.
        let again = call(&c, "apply_proposal", p.apply_args("after-the-crash")).await;
        match again {
            Reply::Ok(v) => {
                assert!(!applied, "{when}: an applied proposal was applied again: {v}");
                assert_eq!(notes(&env.vault), clean_after, "{when}: applied late");
            }
            Reply::Err(e) => {
                assert!(applied, "{when}: a pending proposal could not be applied: {e}");
                assert_eq!(e["code"], "PROPOSAL_ALREADY_APPLIED", "{when}");
                assert_eq!(
                    notes(&env.vault),
                    clean_after,
                    "{when}: the refusal wrote nothing"
                );
            }
        }
        findings.revision(&format!("{when}, applied again"), revision(&c).await, rev0 + 1);
        assert_eq!(
            applied_lines(&env).len(),
            1,
            "{when}: one _applied.jsonl line in all"
        );
        audit_verifies(&env, &when).await;
        c.close().await;
    }
    findings.assert_all_held();
}

#[tokio::test]
async fn a_new_note_apply_aborted_at_any_step_is_finished_once_at_restart() {
    crash_at_every_step("new", &FAILPOINTS).await;
}

#[tokio::test]
async fn a_patch_apply_aborted_at_any_step_is_finished_once_at_restart() {
    crash_at_every_step("patch", &FAILPOINTS).await;
}

#[tokio::test]
async fn a_move_apply_aborted_at_any_step_is_finished_once_at_restart() {
    crash_at_every_step("move", &FAILPOINTS).await;
}

#[tokio::test]
async fn a_delete_apply_aborted_at_any_step_is_finished_once_at_restart() {
    crash_at_every_step("delete", &FAILPOINTS).await;
}

// ---- 4. real SIGKILL ------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_apply_killed_at_a_random_moment_recovers_every_proposal_once() {
    const ROUNDS: usize = 8;
    const PATCHED: [&str; 4] = ["z/attention.md", "z/moc-ml.md", "notes/cooking.md", "welcome.md"];
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let mut rng = Rng::seeded();
    let mut total_applied = 0;
    let mut findings = Findings::default();
    for round in 0..ROUNDS {
        let c = stdio(&env, &token, None).await;
        let mut proposed = Vec::new();
        for i in 0..16 {
            let content = format!("# Killed {round}.{i}\n\nround {round}, note {i}\n");
            proposed.push(propose_new(&c, &env, &format!("kill/r{round}/n{i:02}.md"), &content).await);
        }
        for path in PATCHED {
            let old = std::fs::read_to_string(env.vault.join(path)).unwrap();
            proposed.push(propose_patch(&c, &env, path, &format!("{old}\nround {round}\n")).await);
        }
        let rev0 = revision(&c).await;
        c.close().await;
        let before = notes(&env.vault);
        let targets: BTreeSet<&str> = proposed.iter().map(|p| p.target.as_str()).collect();

        let delay = 3 + rng.below(200);
        let mut child = cli_cmd(&env, &["apply", "--yes"], None).spawn().unwrap();
        let started = Instant::now();
        tokio::time::sleep(Duration::from_millis(delay)).await;
        let _ = child.start_kill();
        let status = bounded("the killed apply", child.wait()).await.unwrap();
        let killed = status.signal() == Some(SIGKILL);
        eprintln!(
            "round {round}: kill after {delay} ms ({:?}): {}",
            started.elapsed(),
            if killed { "killed" } else { "had finished" }
        );
        assert!(
            killed || status.success(),
            "round {round}: the apply failed on its own: {status}"
        );

        // Recovery: a server start.
        let c = stdio(&env, &token, None).await;
        let when = format!("round {round} (killed after {delay} ms), after recovery");
        findings.no_temp_files(&env.vault, &when);
        let st = statuses(&env).await;
        let lines = applied_lines(&env);
        let records = audit_records(&env);
        let mut applied = 0;
        for p in &proposed {
            applied += u64::from(check_settled(&env, p, &st, &lines, &records, &when));
        }
        let now = notes(&env.vault);
        for (path, bytes) in &before {
            if !targets.contains(path.as_str()) {
                assert_eq!(
                    now.get(path),
                    Some(bytes),
                    "{when}: {path} is not a target but changed"
                );
            }
        }
        // Nothing appeared but the new notes (leftover temp files are reported above).
        let created: BTreeSet<&String> = now
            .keys()
            .filter(|k| !before.contains_key(*k) && !k.contains(TEMP_PREFIX))
            .collect();
        let new_targets: BTreeSet<&String> = proposed
            .iter()
            .filter(|p| p.kind == "new" && now.contains_key(&p.target))
            .map(|p| &p.target)
            .collect();
        assert_eq!(created, new_targets, "{when}: files that appeared");
        assert_applied_chain(&lines);
        findings.revision(&when, revision(&c).await, rev0 + applied);
        audit_verifies(&env, &when).await;
        eprintln!(
            "round {round}: {applied} of {} applied before the kill",
            proposed.len()
        );
        c.close().await;

        // The rest applies normally.
        let out = cli(&env, &["apply", "--yes"], None).await;
        assert!(
            out.status.success(),
            "{when}: applying the rest: {}",
            stderr(&out)
        );
        let st = statuses(&env).await;
        let lines = applied_lines(&env);
        let records = audit_records(&env);
        for p in &proposed {
            assert!(check_settled(
                &env,
                p,
                &st,
                &lines,
                &records,
                &format!("round {round}, finished")
            ));
        }
        total_applied += proposed.len();
        assert_eq!(lines.len(), total_applied, "round {round}: _applied.jsonl lines");
        assert_applied_chain(&lines);
        audit_verifies(&env, &format!("round {round}, finished")).await;
    }
    findings.assert_all_held();
}

// ---- 5. idempotent replay after a crash -------------------------------------------------------------

#[tokio::test]
async fn an_apply_whose_answer_was_lost_in_a_crash_is_replayed_with_its_key() {
    let mut findings = Findings::default();
    for step in FAILPOINTS {
        let when = format!("server crashed {step}");
        let env = Env::new();
        let (_, token) = env.token("writer", "auto");
        let c = stdio(&env, &token, None).await;
        let p = propose_new(&c, &env, "z/replayed.md", "# Replayed\n\nonce only\n").await;
        let rev0 = revision(&c).await;
        c.close().await;

        // The server dies before the client gets the answer.
        let crashing = stdio(&env, &token, Some(step)).await;
        let lost = bounded(
            "the crashing apply",
            crashing.try_call("apply_proposal", p.apply_args("K")),
        )
        .await;
        assert!(lost.is_err(), "{when}: the call got an answer: {lost:?}");
        crashing.close().await;

        // Restart (recovery), then the same call with the same key.
        let c = stdio(&env, &token, None).await;
        let files = everything(&env.vault);
        let lines = applied_lines(&env);
        let records = apply_records(&audit_records(&env), &p.id);
        let rev = revision(&c).await;
        let a = match call(&c, "apply_proposal", p.apply_args("K")).await {
            Reply::Ok(v) => v,
            Reply::Err(e) => panic!("{when}: the retry with the same key was refused: {e}"),
        };
        assert_eq!(a["replayed"], true, "{when}: {a}");
        assert_eq!(a["applied"], true, "{when}: {a}");
        assert_eq!(a["target"], p.target, "{when}");
        assert_eq!(everything(&env.vault), files, "{when}: the replay wrote nothing");
        assert_eq!(applied_lines(&env), lines, "{when}: the replay wrote nothing");
        assert_eq!(
            apply_records(&audit_records(&env), &p.id),
            records,
            "{when}: no second apply record"
        );
        assert_eq!(
            records.0 + records.1,
            1,
            "{when}: exactly one success record for the apply, (call, apply.recovered) = {records:?}"
        );
        assert_eq!(revision(&c).await, rev, "{when}: the replay moved no revision");
        assert_eq!(
            std::fs::read_to_string(env.vault.join(&p.target)).unwrap(),
            p.content.clone().unwrap()
        );
        let overview = call(&c, "get_vault_overview", json!({})).await.ok();
        assert_eq!(
            overview["history"]["undoTop"], a["historyEntryId"],
            "{when}: the replayed history entry"
        );
        let all = audit_records(&env);
        let seq = a["auditSeq"].as_u64().unwrap();
        let rec = all.iter().find(|r| r["seq"].as_u64() == Some(seq)).unwrap();
        assert_eq!(
            rec["proposalId"].as_str(),
            Some(p.id.as_str()),
            "{when}: auditSeq names this apply"
        );
        assert_eq!(rec["outcome"], "ok");
        // The same key with other arguments is a conflict, not a second apply.
        let mut other = p.apply_args("K");
        other["proposalHash"] = json!("0".repeat(64));
        assert_eq!(
            call(&c, "apply_proposal", other).await.code(),
            "IDEMPOTENCY_CONFLICT",
            "{when}"
        );
        // A new key is a new apply: the proposal is already applied.
        let fresh = call(&c, "apply_proposal", p.apply_args("K2")).await.code();
        assert_eq!(fresh, "PROPOSAL_ALREADY_APPLIED", "{when}");
        assert_eq!(applied_lines(&env).len(), 1, "{when}");
        audit_verifies(&env, &when).await;
        // One apply moves the revision once, even when the process died right after its commit.
        findings.revision(&when, rev, rev0 + 1);
        c.close().await;
    }
    findings.assert_all_held();
}

// ---- 6. one success record per transaction ----------------------------------------------------------

/// A crash after the audit line is written but before the commit: recovery finishes the apply and
/// must not write a second success record (`apply.recovered`) next to the call's own.
async fn crash_between_audit_and_commit(kind: &'static str) {
    let when = format!("{kind} crashed after_audit");
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let c = stdio(&env, &token, None).await;
    let p = propose_kind(&c, &env, kind).await;
    c.close().await;
    let out = cli(&env, &["apply", "--only", &p.id, "--yes"], Some("after_audit")).await;
    assert_eq!(
        out.status.signal(),
        Some(SIGABRT),
        "{when}: the apply aborts at the failpoint ({}): {}",
        out.status,
        stderr(&out)
    );
    // The restart: any CLI command that opens the home recovers first.
    let out = cli(&env, &["inbox", "list", "--json"], None).await;
    assert!(out.status.success(), "{when}: inbox list: {}", stderr(&out));

    let st = statuses(&env).await;
    assert_eq!(st.get(&p.id).map(String::as_str), Some("applied"), "{when}");
    let ok_records: Vec<Value> = audit_records(&env)
        .into_iter()
        .filter(|r| {
            r["tool"] == "apply_proposal"
                && r["outcome"] == "ok"
                && r["proposalId"].as_str() == Some(p.id.as_str())
        })
        .collect();
    assert_eq!(
        ok_records.len(),
        1,
        "{when}: exactly one success record for the apply: {ok_records:?}"
    );
    let lines = applied_lines(&env);
    assert_eq!(
        lines
            .iter()
            .filter(|l| l["id"].as_str() == Some(p.id.as_str()))
            .count(),
        1,
        "{when}: one _applied.jsonl line"
    );
    assert_applied_chain(&lines);
    assert_eq!(place(&env, &p), Ok(Place::Archived), "{when}");
    if let Some(content) = &p.content {
        assert_eq!(
            std::fs::read(env.vault.join(&p.target)).ok().as_deref(),
            Some(content.as_bytes()),
            "{when}: the target holds the proposed text"
        );
    }
    audit_verifies(&env, &when).await;
}

#[tokio::test]
async fn a_crash_between_audit_and_commit_leaves_one_success_record() {
    let mut failed = Vec::new();
    for kind in ["new", "patch", "move", "delete"] {
        // Each kind in its own task, so one failing kind does not hide the others.
        if let Err(e) = tokio::spawn(crash_between_audit_and_commit(kind)).await {
            let why = match e.try_into_panic() {
                Ok(p) => p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_else(|| "a panic".into()),
                Err(e) => e.to_string(),
            };
            failed.push(format!("--- {kind}: {why}"));
        }
    }
    assert!(
        failed.is_empty(),
        "{} kind(s) failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

// ---- 2a. a group of applies killed at once ---------------------------------------------------------

/// Issue 34: applies that wait for the vault's writer commit as one group, sharing their syncs.
/// The server is killed (abort, as `kill -9`) in the middle of such a group, at a step every member
/// passes; after the restart each member is applied exactly once — finished by recovery, or run
/// again as its job by the next process — and the same call with the same key answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_of_applies_killed_mid_commit_applies_each_once_none_lost() {
    const MEMBERS: usize = 6;
    for step in ["after_intent", "after_write", "after_audit", "after_commit"] {
        let when = format!("server killed {step} in a group of {MEMBERS}");
        let env = Env::new();
        let (_, token) = env.token("writer", "auto");
        let c = stdio(&env, &token, None).await;
        let held = propose_new(&c, &env, "held.md", "# Held\n").await;
        let mut members = Vec::new();
        for i in 0..MEMBERS {
            let content = format!("# Member {i}\n\nin a group\n");
            members.push(propose_new(&c, &env, &format!("group/m{i}.md"), &content).await);
        }
        c.close().await;

        // The CLI holds the vault's writer, paused in its own apply, while the server's applies
        // queue behind it; released, they are one group. (The server settles interrupted writes
        // as it starts, under the writer: it starts first.)
        // The group's debug lines say when the applies wait and how large their group is.
        let mut srv = crate::http::Server::start_with_vars(
            &env,
            &[
                ("VAULTGATE_TEST_FAILPOINT", step),
                ("VAULTGATE_LOG", "engine=debug"),
            ],
        );
        let release = env.tmp.path().join("release");
        let marker = env.tmp.path().join("release.paused");
        let mut holder = cli_cmd(&env, &["apply", "--only", &held.id, "--yes"], None);
        holder
            .env("VAULTGATE_TEST_PAUSE", "after_first_op")
            .env("VAULTGATE_TEST_PAUSE_FILE", &release);
        let holder = holder.spawn().unwrap();
        let start = Instant::now();
        while !marker.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{when}: the CLI never paused"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut set = JoinSet::new();
        for (i, p) in members.iter().enumerate() {
            let client = srv.client(&token).await;
            let args = p.apply_args(&format!("m{i}"));
            set.spawn(async move { client.try_call("apply_proposal", args).await.is_ok() });
        }
        // Every apply reaches the writer's queue before the writer is free.
        let start = Instant::now();
        while srv
            .stderr()
            .matches("a write waits for the vault's writer")
            .count()
            < MEMBERS
        {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{when}: the applies never queued: {}",
                srv.stderr()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        std::fs::write(&release, b"").unwrap();
        let out = bounded("the holding CLI apply", holder.wait_with_output())
            .await
            .unwrap();
        assert!(out.status.success(), "{when}: the CLI apply: {}", stderr(&out));
        let status = srv.exited(Duration::from_secs(60));
        assert!(
            status.is_some_and(|s| s.signal() == Some(6)),
            "{when}: the server did not abort: {status:?} {}",
            srv.stderr()
        );
        // An HTTP client may keep waiting on a dead server: what finished must not be an answer.
        tokio::time::sleep(Duration::from_millis(500)).await;
        set.abort_all();
        let mut answered = 0;
        while let Some(done) = set.join_next().await {
            if done.is_ok_and(|ok| ok) {
                answered += 1;
            }
        }
        assert_eq!(answered, 0, "{when}: an apply answered before the kill");
        assert!(
            srv.stderr().contains(&format!("members={MEMBERS}")),
            "{when}: the {MEMBERS} applies were one group: {}",
            srv.stderr()
        );
        drop(srv);
        if step == "after_audit" {
            // Killed at the first member past the group's audit sync: every member had written
            // its record (in submission order) before any of them committed.
            let records = audit_records(&env);
            let written = members
                .iter()
                .filter(|p| apply_records(&records, &p.id).0 == 1)
                .count();
            assert_eq!(
                written, MEMBERS,
                "{when}: one group wrote every record before the kill"
            );
        }

        // The restart settles the group: recovery finishes a member or puts it back, and the
        // next process runs each member left pending again, as the job it is
        // (docs/contract.md#applying-a-proposal): none is lost, none applied twice.
        let c = stdio(&env, &token, None).await;
        let start = Instant::now();
        loop {
            let settled = statuses(&env).await;
            let pending: Vec<_> = members
                .iter()
                .filter(|p| settled.get(&p.id).map(String::as_str) != Some("applied"))
                .map(|p| (&p.target, settled.get(&p.id)))
                .collect();
            if pending.is_empty() {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{when}: jobs never ran: {pending:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for (i, p) in members.iter().enumerate() {
            let note = std::fs::read_to_string(env.vault.join(&p.target)).ok();
            assert_eq!(note, p.content, "{when}: {} applied", p.target);
            let a = match call(&c, "apply_proposal", p.apply_args(&format!("m{i}"))).await {
                Reply::Ok(v) => v,
                Reply::Err(e) => panic!("{when}: the retry of {} was refused: {e}", p.target),
            };
            assert_eq!(a["applied"], true, "{when}: {a}");
            assert_eq!(a["replayed"], true, "{when}: the retry answers the job: {a}");
            assert_eq!(
                std::fs::read_to_string(env.vault.join(&p.target)).ok(),
                p.content,
                "{when}: {}",
                p.target
            );
            let (calls, recovered) = apply_records(&audit_records(&env), &p.id);
            assert_eq!(
                calls + recovered,
                1,
                "{when}: one success record for {}",
                p.target
            );
        }
        c.close().await;
        let lines = applied_lines(&env);
        assert_applied_chain(&lines);
        let logged: BTreeSet<&str> = lines.iter().map(|l| l["id"].as_str().unwrap()).collect();
        let mut want: BTreeSet<&str> = members.iter().map(|p| p.id.as_str()).collect();
        want.insert(held.id.as_str());
        assert_eq!(logged, want, "{when}: _applied.jsonl names each apply once");
        audit_verifies(&env, &when).await;
    }
}

// ---- 2b. eight HTTP sessions proposing and applying at once ----------------------------------------

/// Issue 34: eight clients of one server propose and apply at once. Every proposal is applied once,
/// each with its own history entry and audit record; `_applied.jsonl` and the audit log verify as
/// chains; and every note is searchable as soon as its apply answered, though an apply's index
/// update now runs after the vault's write lock is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_http_sessions_proposing_and_applying_at_once_each_apply_once_in_one_chain() {
    const CLIENTS: usize = 8;
    const EACH: usize = 6;
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let srv = crate::http::Server::start(&env);
    let mut set = JoinSet::new();
    for c in 0..CLIENTS {
        let client = srv.client(&token).await;
        set.spawn(async move {
            let mut out = Vec::new();
            for i in 0..EACH {
                let word = format!("zqeight{c}x{i}");
                let path = format!("eight/c{c}-{i}.md");
                let p = call(
                    &client,
                    "propose_new_note",
                    json!({"path": path, "content": format!("# {word}\n\nbody {word}\n"), "reason": "eight at once"}),
                )
                .await
                .ok();
                let applied = call(
                    &client,
                    "apply_proposal",
                    json!({"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": format!("e{c}-{i}")}),
                )
                .await
                .ok();
                assert_eq!(applied["index"], "updated", "{applied}");
                // Read-your-writes: the answer came after the note was indexed.
                let hits = call(&client, "search_note_content", json!({"query": word}))
                    .await
                    .ok();
                assert_eq!(hits["hits"][0]["path"], path.as_str(), "{word}: {hits}");
                out.push((p["id"].as_str().unwrap().to_owned(), applied));
            }
            client.close().await;
            out
        });
    }
    let done: Vec<(String, Value)> = bounded("eight clients", set.join_all())
        .await
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(done.len(), CLIENTS * EACH);
    let history: BTreeSet<&str> = done
        .iter()
        .map(|(_, a)| a["historyEntryId"].as_str().unwrap())
        .collect();
    let seqs: BTreeSet<u64> = done
        .iter()
        .map(|(_, a)| a["auditSeq"].as_u64().unwrap())
        .collect();
    assert_eq!(history.len(), CLIENTS * EACH, "one history entry per apply");
    assert_eq!(seqs.len(), CLIENTS * EACH, "one audit record per apply");
    let lines = applied_lines(&env);
    assert_applied_chain(&lines);
    let logged: BTreeSet<String> = lines
        .iter()
        .map(|l| l["id"].as_str().unwrap().to_owned())
        .collect();
    let ids: BTreeSet<String> = done.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(logged, ids, "_applied.jsonl names every proposal once");
    assert_eq!(lines.len(), CLIENTS * EACH);
    // Applies committed in groups read as if sequential: `_applied.jsonl` lists them in the order
    // of their audit records.
    let mut by_seq: Vec<(u64, &str)> = done
        .iter()
        .map(|(id, a)| (a["auditSeq"].as_u64().unwrap(), id.as_str()))
        .collect();
    by_seq.sort();
    let in_chain: Vec<&str> = lines.iter().map(|l| l["id"].as_str().unwrap()).collect();
    let in_audit: Vec<&str> = by_seq.into_iter().map(|(_, id)| id).collect();
    assert_eq!(
        in_chain, in_audit,
        "_applied.jsonl in the order of the audit records"
    );
    audit_verifies(&env, "after eight clients").await;
}
