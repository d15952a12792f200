//! The one write transaction (docs/contract.md#proposals "Rules of the write path", docs/contract.md#critical-operations, docs/contract.md#history, docs/contract.md#the-audit-log) shared by
//! `apply_proposal`, history undo/redo and executed critical challenges, driven through the real
//! binary on real files:
//! - thousands of applies in one session keep working (`_applied.jsonl` has no size limit and
//!   stays one hash-linked chain);
//! - a crash at every step followed by an outside edit of a file the transaction touches is
//!   rolled back at the next start: what the transaction wrote is put back, the edit is kept
//!   byte for byte, the proposal is pending again, `apply.rolled_back` is audited once, and the
//!   next operations work (`VAULTGATE_TEST_FAILPOINT`);
//! - an edit that lands in the middle of a live move is never overwritten
//!   (`VAULTGATE_TEST_PAUSE`, and a stress variant with an editor thread);
//! - a failing index update after the commit answers `index: "failed"` and is repaired by the
//!   next sync.
#![cfg(unix)]

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

use crate::util::{Client, Env, Reply, bin, bounded, call, ok};

/// The bound on every wait: a process, a tool call, a server start, a marker file.
const WAIT: Duration = Duration::from_secs(60);
/// What `std::process::abort` raises.
const SIGABRT: i32 = 6;
/// The steps of every transaction, in order (apply names; history and critical add a prefix).
const STEPS: [&str; 5] = [
    "after_intent",
    "after_first_op",
    "after_write",
    "after_audit",
    "after_commit",
];
const ROLLED_BACK: &str = "apply.rolled_back";
/// What a person writes into a file that does not exist (when the transaction had not yet
/// created it, or had already removed it).
const PERSON_NEW: &[u8] = b"# Written by a person\n\nwhile vaultgate was not looking\n";
/// What a person appends to a file that exists.
const PERSON_LINE: &[u8] = b"\nA line a person added while vaultgate was not looking.\n";

// ---- processes ----------------------------------------------------------------------------------

/// The CLI with this home, never inheriting a VAULTGATE_* variable; plus `vars`.
fn cli_cmd(env: &Env, args: &[&str], vars: &[(&str, &str)]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(bin());
    cmd.arg("--home")
        .arg(&env.home)
        .args(args)
        .env_remove("VAULTGATE_HOME")
        .env_remove("VAULTGATE_TOKEN")
        .env_remove("VAULTGATE_TEST_FAILPOINT")
        .env_remove("VAULTGATE_TEST_PAUSE")
        .env_remove("VAULTGATE_TEST_PAUSE_FILE")
        .env("USER", "tester")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd
}

async fn cli(env: &Env, args: &[&str], vars: &[(&str, &str)]) -> Output {
    let child = cli_cmd(env, args, vars).spawn().unwrap();
    bounded(&format!("vaultgate {args:?}"), child.wait_with_output())
        .await
        .unwrap()
}

/// Stdout and stderr of a finished process, for messages and code checks.
fn text(out: &Output) -> String {
    format!(
        "[{}] stdout: {} stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

async fn cli_ok(env: &Env, args: &[&str], when: &str) -> String {
    let out = cli(env, args, &[]).await;
    assert!(
        out.status.success(),
        "{when}: vaultgate {args:?} failed: {}",
        text(&out)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `vaultgate stdio` with an rmcp client, with `vars` in the server's environment.
async fn stdio(env: &Env, token: &str, vars: &[(&str, &str)]) -> Client {
    let mut cmd = tokio::process::Command::new(bin());
    cmd.arg("stdio")
        .arg("--home")
        .arg(&env.home)
        .env_remove("VAULTGATE_HOME")
        .env_remove("VAULTGATE_TEST_FAILPOINT")
        .env_remove("VAULTGATE_TEST_PAUSE")
        .env_remove("VAULTGATE_TEST_PAUSE_FILE")
        .env("VAULTGATE_TOKEN", token)
        .stderr(Stdio::null());
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let transport = TokioChildProcess::new(cmd).unwrap();
    Client {
        inner: bounded("starting vaultgate stdio", ().serve(transport))
            .await
            .unwrap(),
    }
}

/// `vaultgate audit verify` exits 0.
async fn audit_verifies(env: &Env, when: &str) {
    cli_ok(env, &["audit", "verify"], &format!("{when}: audit verify")).await;
}

/// The ids `vaultgate inbox list --status S --json` lists.
async fn listed(env: &Env, status: &str) -> BTreeSet<String> {
    let out = cli_ok(
        env,
        &["inbox", "list", "--status", status, "--json"],
        "inbox list",
    )
    .await;
    let items: Vec<Value> = serde_json::from_str(&out).unwrap();
    items
        .iter()
        .map(|i| i["id"].as_str().unwrap().to_owned())
        .collect()
}

/// A restart: a CLI command that opens the home (and so recovers first).
async fn restart(env: &Env, when: &str) {
    let out = cli_ok(env, &["inbox", "list", "--json"], &format!("{when}: the restart")).await;
    let _: Vec<Value> = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("{when}: inbox list --json is not a JSON array: {e}: {out}"));
}

/// A fresh home with a vault made of `files` (vault-relative path → bytes), registered as `basic`.
fn env_with(files: &[(String, Vec<u8>)]) -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let vault = tmp.path().join("vault");
    std::fs::create_dir_all(vault.join("inbox")).unwrap();
    for (rel, bytes) in files {
        let p = vault.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
    let env = Env { tmp, home, vault };
    env.ok(&["init"]);
    env.ok(&["vault", "add", env.vault.to_str().unwrap(), "--id", "basic"]);
    env
}

/// Waits (bounded) until `marker` exists; panics with the child's output if it exits first.
async fn wait_for_marker(
    mut child: tokio::process::Child,
    marker: &Path,
    what: &str,
) -> tokio::process::Child {
    let start = Instant::now();
    loop {
        if marker.exists() {
            return child;
        }
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().await.unwrap();
            panic!(
                "{what}: the process exited without pausing at the step: {}",
                text(&out)
            );
        }
        assert!(
            start.elapsed() < WAIT,
            "{what}: no pause marker {} within {WAIT:?}",
            marker.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ---- what is on disk ----------------------------------------------------------------------------

type Snapshot = BTreeMap<String, Vec<u8>>;

fn walk(root: &Path, dir: &Path, out: &mut Snapshot) {
    // A folder that cannot be read fails the test: an empty snapshot would make every
    // before/after comparison pass.
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for e in entries {
        let e = e.unwrap();
        let rel = e.path().strip_prefix(root).unwrap().to_str().unwrap().to_owned();
        if rel == ".vaultgate" || rel == "inbox" {
            continue;
        }
        if e.file_type().unwrap().is_dir() {
            walk(root, &e.path(), out);
        } else {
            out.insert(rel, std::fs::read(e.path()).unwrap());
        }
    }
}

/// Every file of the vault outside `.vaultgate/` and the inbox: the notes as a person sees them.
fn notes(vault: &Path) -> Snapshot {
    let mut out = Snapshot::new();
    walk(vault, vault, &mut out);
    out
}

/// Describes how two snapshots differ (paths only), for assertion messages.
fn diff(now: &Snapshot, want: &Snapshot) -> String {
    let paths: BTreeSet<&String> = now.keys().chain(want.keys()).collect();
    let mut lines = Vec::new();
    for p in paths {
        match (now.get(p), want.get(p)) {
            (Some(a), Some(b)) if a == b => {}
            (Some(a), Some(b)) => lines.push(format!(
                "  {p}: differs ({} bytes, expected {} bytes): now {:?}",
                a.len(),
                b.len(),
                String::from_utf8_lossy(&a[..a.len().min(300)])
            )),
            (Some(_), None) => lines.push(format!("  {p}: exists, expected absent")),
            (None, Some(_)) => lines.push(format!("  {p}: absent, expected present")),
            (None, None) => {}
        }
    }
    lines.join("\n")
}

fn assert_notes(env: &Env, want: &Snapshot, when: &str) {
    let now = notes(&env.vault);
    assert!(
        now == *want,
        "{when}: the notes are not as expected:\n{}",
        diff(&now, want)
    );
}

/// A person's edit of a file from outside: appends a line to it if it exists, else creates it.
/// Returns the bytes it now holds.
fn outside_edit(vault: &Path, rel: &str) -> Vec<u8> {
    let p = vault.join(rel);
    match std::fs::read(&p) {
        Ok(mut bytes) => {
            let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
            f.write_all(PERSON_LINE).unwrap();
            f.sync_all().unwrap();
            bytes.extend_from_slice(PERSON_LINE);
            bytes
        }
        Err(_) => {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, PERSON_NEW).unwrap();
            PERSON_NEW.to_vec()
        }
    }
}

fn read_jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: bad line {l}: {e}", path.display())))
        .collect()
}

fn audit_records(env: &Env) -> Vec<Value> {
    read_jsonl(&env.home.join("audit.jsonl"))
}

fn applied_lines(env: &Env) -> Vec<Value> {
    read_jsonl(&env.vault.join("inbox/_applied.jsonl"))
}

/// Audit records of `tool` whose `field` is `value`.
fn records_of<'a>(records: &'a [Value], tool: &str, field: &str, value: &str) -> Vec<&'a Value> {
    records
        .iter()
        .filter(|r| r["tool"] == tool && r[field].as_str() == Some(value))
        .collect()
}

/// `(ok records that are not rollbacks, apply.rolled_back records)` of `tool` whose `field` is `value`.
fn count_records(records: &[Value], tool: &str, field: &str, value: &str) -> (usize, usize) {
    let mine = records_of(records, tool, field, value);
    let rolled = mine.iter().filter(|r| r["event"] == ROLLED_BACK).count();
    let ok = mine
        .iter()
        .filter(|r| r["event"] != ROLLED_BACK && r["outcome"] == "ok")
        .count();
    (ok, rolled)
}

/// The rollback record comes after every success record the crashed transaction had written.
fn assert_rollback_is_last(records: &[Value], tool: &str, field: &str, value: &str, when: &str) {
    let mine = records_of(records, tool, field, value);
    let rb = mine
        .iter()
        .filter(|r| r["event"] == ROLLED_BACK)
        .map(|r| r["seq"].as_u64().unwrap())
        .max();
    let last_ok = mine
        .iter()
        .filter(|r| r["event"] != ROLLED_BACK && r["outcome"] == "ok")
        .map(|r| r["seq"].as_u64().unwrap())
        .max();
    if let (Some(rb), Some(ok)) = (rb, last_ok) {
        assert!(
            rb > ok,
            "{when}: the rollback record (seq {rb}) precedes a success record (seq {ok})"
        );
    }
}

fn panic_text(e: tokio::task::JoinError) -> String {
    if !e.is_panic() {
        return e.to_string();
    }
    let p = e.into_panic();
    if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else {
        "a panic".into()
    }
}

/// Runs `case(step)` for every step, one after the other, each in its own task so that one
/// failing step does not hide the others; fails at the end naming every failed step.
async fn each_step<F, Fut>(name: &str, f: F)
where
    F: Fn(&'static str) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut failed = Vec::new();
    for step in STEPS {
        let started = Instant::now();
        match tokio::spawn(f(step)).await {
            Ok(()) => eprintln!("{name} {step}: ok ({:?})", started.elapsed()),
            Err(e) => failed.push(format!("--- {step}: {}", panic_text(e))),
        }
    }
    assert!(
        failed.is_empty(),
        "{name}: {} of {} steps failed:\n{}",
        failed.len(),
        STEPS.len(),
        failed.join("\n")
    );
}

// ---- proposals ----------------------------------------------------------------------------------

/// One proposal: its id, hash and the propose answer.
#[derive(Clone, Debug)]
struct Proposed {
    id: String,
    hash: String,
    answer: Value,
}

async fn propose(c: &Client, tool: &str, args: Value) -> Proposed {
    let v = ok(c, tool, args).await;
    Proposed {
        id: v["id"].as_str().unwrap().to_owned(),
        hash: v["proposalHash"].as_str().unwrap().to_owned(),
        answer: v,
    }
}

async fn propose_new(c: &Client, path: &str, content: &str) -> Proposed {
    propose(
        c,
        "propose_new_note",
        json!({"path": path, "content": content, "reason": "txn test"}),
    )
    .await
}

async fn base_hash(c: &Client, path: &str) -> Value {
    ok(c, "read_note", json!({"path": path})).await["hash"].clone()
}

async fn propose_move(c: &Client, from: &str, to: &str) -> Proposed {
    propose(
        c,
        "propose_move",
        json!({"from": from, "to": to, "reason": "txn test"}),
    )
    .await
}

/// The paths of the other notes a move proposal rewrites links in.
fn rewritten(p: &Proposed, from: &str) -> Vec<String> {
    p.answer["linkRewrites"]
        .as_array()
        .unwrap_or_else(|| panic!("a move answers linkRewrites: {}", p.answer))
        .iter()
        .map(|r| r["path"].as_str().unwrap().to_owned())
        .filter(|p| p != from)
        .collect()
}

async fn apply_mcp(c: &Client, p: &Proposed, key: &str) -> Value {
    let a = ok(
        c,
        "apply_proposal",
        json!({"id": p.id, "proposalHash": p.hash, "idempotencyKey": key}),
    )
    .await;
    assert_eq!(a["applied"], true, "{a}");
    a
}

/// After any crash or rollback: a fresh new-note proposal applies through the CLI, the way a
/// reviewer would, and lands exactly as proposed.
async fn a_fresh_proposal_applies(env: &Env, token: &str, when: &str) -> String {
    let path = "z/fresh-after-the-crash.md";
    let content = "# Fresh\n\nproposed after the crash\n";
    let c = stdio(env, token, &[]).await;
    let p = propose_new(&c, path, content).await;
    c.close().await;
    let out = cli(env, &["apply", "--only", &p.id, "--yes"], &[]).await;
    assert!(
        out.status.success(),
        "{when}: a fresh proposal does not apply: {}",
        text(&out)
    );
    assert_eq!(
        std::fs::read(env.vault.join(path)).ok().as_deref(),
        Some(content.as_bytes()),
        "{when}: the fresh proposal's note"
    );
    assert!(
        listed(env, "applied").await.contains(&p.id),
        "{when}: the fresh proposal is listed as applied"
    );
    path.to_owned()
}

// ================================================================================================
// 1. ten thousand applies
// ================================================================================================

/// How many propose + apply pairs the long test runs in one session.
const MANY_APPLIES: usize = 10_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_applies_keep_working() {
    let env = Env::new();
    let (_, token) = env.token("bulk-writer", "auto");
    let c = stdio(&env, &token, &[]).await;
    let started = Instant::now();
    let path_of = |i: usize| format!("bulk/ten-thousand-applies/a-note-with-a-rather-long-name-{i:05}.md");
    for i in 0..MANY_APPLIES {
        let content = format!("# Bulk note {i}\n\nnote {i} of {MANY_APPLIES}\n");
        let p = propose_new(&c, &path_of(i), &content).await;
        let a = match call(
            &c,
            "apply_proposal",
            json!({"id": p.id, "proposalHash": p.hash, "idempotencyKey": format!("bulk-{i}")}),
        )
        .await
        {
            Reply::Ok(a) => a,
            Reply::Err(e) => panic!("apply number {} (of {MANY_APPLIES}) failed: {e}", i + 1),
        };
        assert_eq!(a["applied"], true, "apply {i}: {a}");
        if (i + 1) % 1000 == 0 {
            let t = started.elapsed();
            eprintln!(
                "{} applies in {t:.1?} ({:.1} propose+apply per second)",
                i + 1,
                (i + 1) as f64 / t.as_secs_f64()
            );
        }
    }
    let t = started.elapsed();
    eprintln!(
        "{MANY_APPLIES} propose+apply pairs in {t:.1?}: {:.1} per second",
        MANY_APPLIES as f64 / t.as_secs_f64()
    );

    // `_applied.jsonl`: one line per apply, well past the old 2 MiB limit, one unbroken chain.
    let log = env.vault.join("inbox/_applied.jsonl");
    let size = std::fs::metadata(&log).unwrap().len();
    eprintln!("_applied.jsonl: {size} bytes");
    assert!(size > 4 * 1024 * 1024, "_applied.jsonl is only {size} bytes");
    let lines = applied_lines(&env);
    assert_eq!(lines.len(), MANY_APPLIES, "one _applied.jsonl line per apply");
    let mut hashes = BTreeSet::new();
    for (i, w) in lines.windows(2).enumerate() {
        assert!(
            w[0]["hash"].is_string() && w[0]["hash"].as_str().unwrap().len() == 64,
            "_applied.jsonl line {}: no hash: {}",
            i + 1,
            w[0]
        );
        assert_eq!(
            w[1]["prev"],
            w[0]["hash"],
            "_applied.jsonl line {}: prev is not line {}'s hash",
            i + 2,
            i + 1
        );
    }
    for l in &lines {
        assert!(
            hashes.insert(l["hash"].as_str().unwrap().to_owned()),
            "a hash twice: {l}"
        );
    }
    let ids: BTreeSet<&str> = lines.iter().map(|l| l["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), MANY_APPLIES, "every apply has its own line");

    // Everything else still works: reject, undo, a critical challenge, the audit chain.
    let p = propose_new(&c, "bulk/to-be-rejected.md", "# No\n").await;
    let r = ok(&c, "reject_proposal", json!({"id": p.id, "reason": "not wanted"})).await;
    assert_eq!(r["rejected"], true, "{r}");

    let top = ok(&c, "history_status", json!({})).await["undoTop"].clone();
    assert!(top.is_string(), "a history top after {MANY_APPLIES} applies");
    let s = ok(
        &c,
        "history_undo",
        json!({"expectedHistoryEntryId": top, "idempotencyKey": "undo-top"}),
    )
    .await;
    assert_eq!(s["redoTop"], top, "{s}");
    assert!(
        !env.vault.join(path_of(MANY_APPLIES - 1)).exists(),
        "the undo removed the last note"
    );

    let doomed = path_of(0);
    let first = json!({"paths": [doomed], "idempotencyKey": "purge-1"});
    let ch = ok(&c, "delete_permanent", first.clone()).await;
    assert_eq!(ch["status"], "challenge", "{ch}");
    let mut second = first.clone();
    second["challengeId"] = ch["challenge"]["challengeId"].clone();
    second["planHash"] = ch["challenge"]["planHash"].clone();
    second["acknowledged"] = true.into();
    let done = ok(&c, "delete_permanent", second).await;
    assert_eq!(done["status"], "executed", "{done}");
    assert!(!env.vault.join(&doomed).exists(), "permanently deleted");
    c.close().await;
    audit_verifies(&env, "after ten thousand applies").await;
}

// ================================================================================================
// 2. the rollback matrix: crash at a step, an outside edit, restart
// ================================================================================================

/// Which file the person edits while the crashed transaction waits for recovery.
#[derive(Clone, Copy, Debug)]
enum Edit {
    /// The proposal's target (new: the note to create; patch: the patched note; delete: the
    /// note to delete).
    Target,
    /// A note whose links the move rewrites.
    Linker,
    /// The moved note's new copy (its destination path).
    Destination,
}

const MOVE_FROM: &str = "z/softmax.md";
const MOVE_TO: &str = "z/softmax-function.md";

async fn propose_kind(c: &Client, env: &Env, kind: &str) -> (Proposed, String) {
    match kind {
        "new" => {
            let path = "z/crash-new.md";
            (
                propose_new(c, path, "# Crash\n\nwritten by an apply\n").await,
                path.into(),
            )
        }
        "patch" => {
            let path = "z/attention.md";
            let old = std::fs::read_to_string(env.vault.join(path)).unwrap();
            let new = format!("{old}\n## Added by a patch\n\nmore text\n");
            let p = propose(
                c,
                "propose_note_patch",
                json!({"path": path, "baseHash": base_hash(c, path).await, "content": new, "reason": "txn test"}),
            )
            .await;
            (p, path.into())
        }
        "move" => (propose_move(c, MOVE_FROM, MOVE_TO).await, MOVE_TO.into()),
        "delete" => {
            let path = "z/transformer.md";
            let p = propose(
                c,
                "propose_delete",
                json!({"path": path, "baseHash": base_hash(c, path).await, "reason": "txn test"}),
            )
            .await;
            (p, path.into())
        }
        other => panic!("unknown kind {other}"),
    }
}

/// The notes after a clean apply of `kind` on the basic fixture.
async fn clean_apply(kind: &str) -> Snapshot {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let c = stdio(&env, &token, &[]).await;
    let (p, _) = propose_kind(&c, &env, kind).await;
    c.close().await;
    let out = cli(&env, &["apply", "--only", &p.id, "--yes"], &[]).await;
    assert!(out.status.success(), "a clean apply of a {kind}: {}", text(&out));
    notes(&env.vault)
}

/// One case of the matrix for applies: crash `vaultgate apply` at `step`, edit, restart, check.
async fn apply_case(kind: &'static str, edit: Edit, step: &'static str, clean_after: Arc<Snapshot>) {
    let when = format!("{kind} apply crashed at {step}, {edit:?} edited");
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let c = stdio(&env, &token, &[]).await;
    let (p, target) = propose_kind(&c, &env, kind).await;
    c.close().await;
    let before = notes(&env.vault);

    let out = cli(
        &env,
        &["apply", "--only", &p.id, "--yes"],
        &[("VAULTGATE_TEST_FAILPOINT", step)],
    )
    .await;
    assert_eq!(
        out.status.signal(),
        Some(SIGABRT),
        "{when}: the apply aborts at the failpoint: {}",
        text(&out)
    );

    // While nothing runs, a person edits a file the transaction touches.
    let edited = match edit {
        Edit::Target | Edit::Destination => target.clone(),
        Edit::Linker => {
            let linkers = rewritten(&p, MOVE_FROM);
            assert!(
                !linkers.is_empty(),
                "{when}: the move rewrites links: {}",
                p.answer
            );
            linkers[0].clone()
        }
    };
    let edit_bytes = outside_edit(&env.vault, &edited);

    restart(&env, &when).await;
    let committed = step == "after_commit";
    let mut want = if committed {
        (*clean_after).clone()
    } else {
        before.clone()
    };
    want.insert(edited.clone(), edit_bytes.clone());
    assert_notes(&env, &want, &when);
    assert_eq!(
        std::fs::read(env.vault.join(&edited)).unwrap(),
        edit_bytes,
        "{when}: the person's edit of {edited} is kept byte for byte"
    );

    let records = audit_records(&env);
    let (ok_n, rolled) = count_records(&records, "apply_proposal", "proposalId", &p.id);
    let in_log = applied_lines(&env)
        .iter()
        .filter(|l| l["id"].as_str() == Some(p.id.as_str()))
        .count();
    if committed {
        assert!(listed(&env, "applied").await.contains(&p.id), "{when}: applied");
        assert_eq!((ok_n, rolled), (1, 0), "{when}: one success record, no rollback");
        assert_eq!(in_log, 1, "{when}: one _applied.jsonl line");
    } else {
        assert!(
            listed(&env, "pending").await.contains(&p.id),
            "{when}: the proposal is pending again"
        );
        assert!(
            !listed(&env, "applied").await.contains(&p.id),
            "{when}: not applied"
        );
        assert_eq!(rolled, 1, "{when}: one {ROLLED_BACK} record for the proposal");
        // Only a crash after the audit line leaves a success record behind (the log is
        // append-only); the rollback record then follows it.
        let max_ok = usize::from(step == "after_audit");
        assert!(
            ok_n <= max_ok,
            "{when}: {ok_n} success records for a rolled back apply"
        );
        assert_rollback_is_last(&records, "apply_proposal", "proposalId", &p.id, &when);
        assert_eq!(
            in_log, 0,
            "{when}: no _applied.jsonl line for a rolled back apply"
        );
        if kind == "delete" {
            let trashed = env.vault.join(".vaultgate/trash").join(&p.id).join(&target);
            assert!(
                !trashed.exists(),
                "{when}: the trash copy the apply wrote is removed"
            );
        }
        // Inbox files are where a pending proposal's are.
        let kind_dir = env.vault.join("inbox").join(kind);
        let meta = std::fs::read_dir(&kind_dir)
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .any(|e| e.file_name().to_string_lossy().ends_with(".proposal.json"))
            })
            .unwrap_or(false);
        assert!(meta, "{when}: the proposal's files are back in inbox/{kind}/");
    }
    audit_verifies(&env, &when).await;

    // Nothing is blocked: a fresh proposal applies, and the old one can still be decided.
    a_fresh_proposal_applies(&env, &token, &when).await;
    if !committed {
        let out = cli(&env, &["inbox", "reject", &p.id, "--reason", "rolled back"], &[]).await;
        assert!(
            out.status.success(),
            "{when}: rejecting the rolled back proposal: {}",
            text(&out)
        );
        assert!(listed(&env, "rejected").await.contains(&p.id), "{when}: rejected");
    }
    assert_eq!(
        std::fs::read(env.vault.join(&edited)).unwrap(),
        edit_bytes,
        "{when}: the person's edit survives the next operations"
    );
    audit_verifies(&env, &format!("{when}, at the end")).await;
}

async fn apply_matrix(kind: &'static str, edit: Edit) {
    let clean = Arc::new(clean_apply(kind).await);
    each_step(&format!("rollback_matrix {kind} ({edit:?} edited)"), |step| {
        let clean = clean.clone();
        async move { apply_case(kind, edit, step, clean).await }
    })
    .await;
}

#[tokio::test]
async fn rollback_matrix_new_note() {
    apply_matrix("new", Edit::Target).await;
}

#[tokio::test]
async fn rollback_matrix_patch() {
    apply_matrix("patch", Edit::Target).await;
}

#[tokio::test]
async fn rollback_matrix_move_with_a_linking_note_edited() {
    apply_matrix("move", Edit::Linker).await;
}

#[tokio::test]
async fn rollback_matrix_move_with_the_new_copy_edited() {
    apply_matrix("move", Edit::Destination).await;
}

#[tokio::test]
async fn rollback_matrix_delete() {
    apply_matrix("delete", Edit::Target).await;
}

// ---- undo / redo ----------------------------------------------------------------------------------

async fn history_status(env: &Env) -> Value {
    serde_json::from_str(&cli_ok(env, &["history", "status", "--json"], "history status").await).unwrap()
}

/// Crash `vaultgate history undo|redo` of a move at `history_<step>`, edit a linking note, restart.
async fn history_case(which: &'static str, step: &'static str) {
    let tool = format!("history_{which}");
    let failpoint = format!("history_{step}");
    let when = format!("{which} crashed at {failpoint}");
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let original = notes(&env.vault);
    let c = stdio(&env, &token, &[]).await;
    let p = propose_move(&c, MOVE_FROM, MOVE_TO).await;
    let h = apply_mcp(&c, &p, "apply-move").await["historyEntryId"].clone();
    let moved = notes(&env.vault);
    if which == "redo" {
        ok(
            &c,
            "history_undo",
            json!({"expectedHistoryEntryId": h, "idempotencyKey": "undo-first"}),
        )
        .await;
        assert_notes(&env, &original, &format!("{when}: the undo before the redo"));
    }
    c.close().await;
    let (before, after) = if which == "undo" {
        (moved, original)
    } else {
        (original, moved)
    };
    let ok_before = count_records(&audit_records(&env), &tool, "target", h.as_str().unwrap()).0;

    let out = cli(
        &env,
        &["history", which, "--yes"],
        &[("VAULTGATE_TEST_FAILPOINT", &failpoint)],
    )
    .await;
    assert_eq!(
        out.status.signal(),
        Some(SIGABRT),
        "{when}: the {which} aborts at the failpoint: {}",
        text(&out)
    );
    let linker = rewritten(&p, MOVE_FROM)[0].clone();
    let edit_bytes = outside_edit(&env.vault, &linker);

    restart(&env, &when).await;
    let committed = step == "after_commit";
    let mut want = if committed { after } else { before };
    want.insert(linker.clone(), edit_bytes.clone());
    assert_notes(&env, &want, &when);

    let status = history_status(&env).await;
    let top_field = match (which, committed) {
        ("undo", false) | ("redo", true) => "undoTop",
        _ => "redoTop",
    };
    assert_eq!(status[top_field], h, "{when}: history status {status}");
    assert_eq!(status["transitionInProgress"], false, "{when}: {status}");

    let records = audit_records(&env);
    let (ok_n, rolled) = count_records(&records, &tool, "target", h.as_str().unwrap());
    let ok_n = ok_n - ok_before;
    if committed {
        assert_eq!(
            (ok_n, rolled),
            (1, 0),
            "{when}: one success record, no rollback record"
        );
    } else {
        assert_eq!(
            rolled, 1,
            "{when}: one {ROLLED_BACK} record with tool {tool} and target {h}"
        );
        assert!(
            ok_n <= usize::from(step == "after_audit"),
            "{when}: {ok_n} success records for a rolled back {which}"
        );
        assert_rollback_is_last(&records, &tool, "target", h.as_str().unwrap(), &when);
    }
    audit_verifies(&env, &when).await;

    // Nothing is blocked: a fresh proposal applies and its history entry can be undone.
    let fresh = a_fresh_proposal_applies(&env, &token, &when).await;
    let out = cli(&env, &["history", "undo", "--yes"], &[]).await;
    assert!(
        out.status.success(),
        "{when}: undoing the fresh apply: {}",
        text(&out)
    );
    assert!(
        !env.vault.join(&fresh).exists(),
        "{when}: the fresh note was undone"
    );
    assert_eq!(
        std::fs::read(env.vault.join(&linker)).unwrap(),
        edit_bytes,
        "{when}: the person's edit survives the next operations"
    );
    audit_verifies(&env, &format!("{when}, at the end")).await;
}

#[tokio::test]
async fn rollback_matrix_undo() {
    each_step("rollback_matrix undo", |step| history_case("undo", step)).await;
}

#[tokio::test]
async fn rollback_matrix_redo() {
    each_step("rollback_matrix redo", |step| history_case("redo", step)).await;
}

// ---- a critical challenge ------------------------------------------------------------------------

const DOOMED_A: &str = "z/attention.md";
const DOOMED_B: &str = "notes/cooking.md";

fn second_call(first: &Value, challenge: &Value) -> Value {
    let mut a = first.clone();
    a["challengeId"] = challenge["challengeId"].clone();
    a["planHash"] = challenge["planHash"].clone();
    a["acknowledged"] = true.into();
    a
}

/// Crash an executing `delete_permanent` at `critical_<step>`, edit one of its files, restart.
async fn critical_case(step: &'static str) {
    let failpoint = format!("critical_{step}");
    let when = format!("delete_permanent crashed at {failpoint}");
    let env = Env::new();
    let (_, token) = env.token("agent", "auto");
    let before = notes(&env.vault);

    let crashing = stdio(&env, &token, &[("VAULTGATE_TEST_FAILPOINT", &failpoint)]).await;
    let first = json!({"paths": [DOOMED_A, DOOMED_B], "idempotencyKey": "purge"});
    let ch = ok(&crashing, "delete_permanent", first.clone()).await;
    assert_eq!(ch["status"], "challenge", "{when}: {ch}");
    let challenge = ch["challenge"].clone();
    let challenge_id = challenge["challengeId"].as_str().unwrap().to_owned();
    let cut = bounded(
        "the crashing delete_permanent",
        crashing.try_call("delete_permanent", second_call(&first, &challenge)),
    )
    .await;
    assert!(
        cut.is_err(),
        "{when}: the server answered instead of aborting: {cut:?}"
    );
    crashing.close().await;

    let edit_bytes = outside_edit(&env.vault, DOOMED_A);
    restart(&env, &when).await;
    let committed = step == "after_commit";
    let mut want = before.clone();
    if committed {
        want.remove(DOOMED_B);
    }
    want.insert(DOOMED_A.into(), edit_bytes.clone());
    assert_notes(&env, &want, &when);

    let records = audit_records(&env);
    let (_, rolled) = count_records(&records, "delete_permanent", "challengeId", &challenge_id);
    assert_eq!(
        rolled,
        usize::from(!committed),
        "{when}: {ROLLED_BACK} records with tool delete_permanent and this challengeId"
    );
    assert_rollback_is_last(&records, "delete_permanent", "challengeId", &challenge_id, &when);
    audit_verifies(&env, &when).await;

    // Nothing is blocked: a fresh proposal applies, and a fresh challenge executes.
    let fresh = a_fresh_proposal_applies(&env, &token, &when).await;
    let c = stdio(&env, &token, &[]).await;
    let first = json!({"paths": [fresh], "idempotencyKey": "purge-fresh"});
    let ch = ok(&c, "delete_permanent", first.clone()).await;
    assert_eq!(ch["status"], "challenge", "{when}: {ch}");
    let done = ok(&c, "delete_permanent", second_call(&first, &ch["challenge"])).await;
    assert_eq!(done["status"], "executed", "{when}: {done}");
    assert!(
        !env.vault.join(&fresh).exists(),
        "{when}: the fresh challenge deleted its note"
    );
    c.close().await;
    assert_eq!(
        std::fs::read(env.vault.join(DOOMED_A)).unwrap(),
        edit_bytes,
        "{when}: the person's edit survives the next operations"
    );
    audit_verifies(&env, &format!("{when}, at the end")).await;
}

#[tokio::test]
async fn rollback_matrix_delete_permanent() {
    each_step("rollback_matrix delete_permanent", critical_case).await;
}

// ================================================================================================
// 3. an edit in the middle of a live move
// ================================================================================================

const LINKERS: usize = 50;
const MOVED: &str = "target.md";
const MOVED_TO: &str = "renamed-target.md";

fn linker_path(i: usize) -> String {
    format!("links/link-{i:02}.md")
}

/// A vault with one note linked from `LINKERS` notes, and a few unrelated notes.
fn linked_vault() -> Env {
    let mut files = vec![(
        MOVED.to_owned(),
        b"# Target\n\nThe note everyone links to.\n".to_vec(),
    )];
    for i in 0..LINKERS {
        files.push((
            linker_path(i),
            format!("# Link {i}\n\nSee [[target]] for the details of item {i}.\n").into_bytes(),
        ));
    }
    for i in 0..10 {
        files.push((
            format!("other/unrelated-{i}.md"),
            format!("# Unrelated {i}\n\nNo links here.\n").into_bytes(),
        ));
    }
    env_with(&files)
}

/// Proposes the move of `target.md` and checks that it rewrites every linking note.
async fn propose_linked_move(env: &Env) -> (String, Proposed) {
    let (_, token) = env.token("mover", "auto");
    let c = stdio(env, &token, &[]).await;
    let p = propose_move(&c, MOVED, MOVED_TO).await;
    c.close().await;
    let rewrites: BTreeSet<String> = rewritten(&p, MOVED).into_iter().collect();
    let linkers: BTreeSet<String> = (0..LINKERS).map(linker_path).collect();
    assert!(
        linkers.is_subset(&rewrites),
        "the move rewrites every linking note: {}",
        p.answer
    );
    (token, p)
}

#[tokio::test]
async fn a_linking_note_edited_during_a_move_is_never_overwritten() {
    let env = linked_vault();
    let (token, p) = propose_linked_move(&env).await;
    let before = notes(&env.vault);
    let release = env.tmp.path().join("release");
    let marker = env.tmp.path().join("release.paused");
    let release_s = release.to_str().unwrap().to_owned();

    let child = cli_cmd(
        &env,
        &["apply", "--only", &p.id, "--yes"],
        &[
            ("VAULTGATE_TEST_PAUSE", "after_first_op"),
            ("VAULTGATE_TEST_PAUSE_FILE", &release_s),
        ],
    )
    .spawn()
    .unwrap();
    let child = wait_for_marker(child, &marker, "the paused apply").await;

    // The person appends a line to one linking note while the apply waits.
    let edited = linker_path(LINKERS / 2);
    let edit_bytes = outside_edit(&env.vault, &edited);
    std::fs::write(&release, b"go").unwrap();
    let out = bounded("the released apply", child.wait_with_output())
        .await
        .unwrap();

    assert!(
        !out.status.success(),
        "the apply must not succeed over an edit: {}",
        text(&out)
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("PROPOSAL_STALE_BASE"),
        "the apply names PROPOSAL_STALE_BASE: {}",
        text(&out)
    );
    assert_eq!(
        std::fs::read(env.vault.join(&edited)).unwrap(),
        edit_bytes,
        "the edited note keeps the person's line, byte for byte"
    );
    assert_eq!(
        std::fs::read(env.vault.join(MOVED)).ok(),
        before.get(MOVED).cloned(),
        "the moved note is back at its source"
    );
    assert!(!env.vault.join(MOVED_TO).exists(), "the destination is absent");
    let mut want = before.clone();
    want.insert(edited.clone(), edit_bytes.clone());
    assert_notes(&env, &want, "after the refused move");
    assert!(
        listed(&env, "pending").await.contains(&p.id),
        "the proposal is pending"
    );
    let records = audit_records(&env);
    let (ok_n, _) = count_records(&records, "apply_proposal", "proposalId", &p.id);
    assert_eq!(ok_n, 0, "no success record for the refused move");
    assert!(
        !applied_lines(&env)
            .iter()
            .any(|l| l["id"].as_str() == Some(p.id.as_str())),
        "no _applied.jsonl line for the refused move"
    );
    audit_verifies(&env, "after the refused move").await;

    // Nothing is left half-done: a later apply works and the edit survives it.
    let c = stdio(&env, &token, &[]).await;
    let q = propose_new(&c, "other/later.md", "# Later\n").await;
    c.close().await;
    let out = cli(&env, &["apply", "--only", &q.id, "--yes"], &[]).await;
    assert!(out.status.success(), "a later apply: {}", text(&out));
    assert_eq!(std::fs::read(env.vault.join(&edited)).unwrap(), edit_bytes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn linking_notes_edited_in_a_loop_while_a_move_applies_lose_no_line() {
    const EDITED: usize = 10;
    // Pauses between the editor's sweeps: from a tight loop to a slow typist.
    const SWEEP_PAUSES_US: [u64; 4] = [200, 2_000, 10_000, 40_000];
    let mut outcomes = Vec::new();
    for pause_us in SWEEP_PAUSES_US {
        let when = format!("editor pausing {pause_us} µs between sweeps");
        let env = linked_vault();
        let (_, p) = propose_linked_move(&env).await;
        let before = notes(&env.vault);
        // Every fifth linking note is edited; the others only the apply may touch.
        let edited: Vec<String> = (0..EDITED).map(|i| linker_path(i * (LINKERS / EDITED))).collect();

        let stop = Arc::new(AtomicBool::new(false));
        let editor = {
            let stop = stop.clone();
            let vault = env.vault.clone();
            let edited = edited.clone();
            std::thread::spawn(move || {
                let mut written: Vec<(String, String)> = Vec::new();
                let mut sweep = 0u64;
                let deadline = Instant::now() + WAIT;
                while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                    for rel in &edited {
                        let line = format!("editor sweep {sweep} wrote this line into {rel}\n");
                        // Saved the way editors save (a temp file renamed over the note), the
                        // case the transaction guarantees (ARCHITECTURE.md: the window left is
                        // an in-place write into the same inode during the check).
                        let path = vault.join(rel);
                        let mut text = std::fs::read(&path).unwrap();
                        text.extend_from_slice(line.as_bytes());
                        let name = path.file_name().unwrap().to_string_lossy().into_owned();
                        let tmp = path.with_file_name(format!(".{name}.editor-save"));
                        std::fs::write(&tmp, &text).unwrap();
                        std::fs::rename(&tmp, &path).unwrap();
                        written.push((rel.clone(), line));
                    }
                    sweep += 1;
                    std::thread::sleep(Duration::from_micros(pause_us));
                }
                written
            })
        };
        let out = cli(&env, &["apply", "--only", &p.id, "--yes"], &[]).await;
        stop.store(true, Ordering::SeqCst);
        let written = editor.join().unwrap();
        let applied = out.status.success();
        eprintln!(
            "{when}: the apply {} with {} editor lines written: {}",
            if applied { "succeeded" } else { "was refused" },
            written.len(),
            text(&out)
        );
        outcomes.push(applied);

        let now = notes(&env.vault);
        let mut lost = Vec::new();
        for (rel, line) in &written {
            let text = String::from_utf8_lossy(now.get(rel).map_or(&[][..], Vec::as_slice)).into_owned();
            if !text.contains(line.as_str()) {
                lost.push(format!("{rel}: {}", line.trim_end()));
            }
        }
        assert!(
            lost.is_empty(),
            "{when}: {} of {} lines the editor wrote are gone (apply: {}):\n{}",
            lost.len(),
            written.len(),
            text(&out),
            lost.iter().take(20).cloned().collect::<Vec<_>>().join("\n")
        );
        let untouched: Vec<String> = (0..LINKERS)
            .map(linker_path)
            .filter(|l| !edited.contains(l))
            .collect();
        if applied {
            assert!(
                !now.contains_key(MOVED),
                "{when}: the source is gone after the move"
            );
            assert!(now.contains_key(MOVED_TO), "{when}: the destination exists");
            for rel in &untouched {
                let t = String::from_utf8_lossy(&now[rel]).into_owned();
                assert!(
                    t.contains("[[renamed-target]]") && !t.contains("[[target]]"),
                    "{when}: {rel} was not rewritten: {t}"
                );
            }
        } else {
            assert_eq!(out.status.code(), Some(1), "{when}: {}", text(&out));
            assert!(
                text(&out).contains("PROPOSAL_STALE_BASE"),
                "{when}: a refused move names PROPOSAL_STALE_BASE: {}",
                text(&out)
            );
            assert_eq!(
                now.get(MOVED),
                before.get(MOVED),
                "{when}: the source is in place"
            );
            assert!(!now.contains_key(MOVED_TO), "{when}: the destination is absent");
            for rel in &untouched {
                assert_eq!(now.get(rel), before.get(rel), "{when}: {rel} changed");
            }
            assert!(listed(&env, "pending").await.contains(&p.id), "{when}: pending");
        }
        audit_verifies(&env, &when).await;
    }
    eprintln!("move outcomes (applied?) per editor pace: {outcomes:?}");
}

// ================================================================================================
// 5. a failing index update
// ================================================================================================

#[tokio::test]
async fn a_failing_index_update_answers_index_failed() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let word = "quixotriplexwombat";
    let path = "z/index-failure.md";
    let content = format!("# Index failure\n\nThe unique word is {word}.\n");

    let c = stdio(&env, &token, &[("VAULTGATE_TEST_FAILPOINT", "index_update")]).await;
    let p = propose_new(&c, path, &content).await;
    let a = apply_mcp(&c, &p, "apply-index-fails").await;
    assert_eq!(
        a["index"], "failed",
        "the apply says the index update failed: {a}"
    );
    assert_eq!(a["target"], path, "{a}");
    let read = ok(&c, "read_note", json!({"path": path})).await;
    assert_eq!(read["content"], content.as_str(), "the note is applied");
    c.close().await;
    assert_eq!(std::fs::read_to_string(env.vault.join(path)).unwrap(), content);
    assert!(
        listed(&env, "applied").await.contains(&p.id),
        "the proposal is applied"
    );

    // The next start syncs the index: the note becomes searchable (bounded wait).
    let c = stdio(&env, &token, &[]).await;
    let start = Instant::now();
    let found = loop {
        let r = ok(&c, "search_note_content", json!({"query": word})).await;
        let hit = r["hits"].as_array().unwrap().iter().any(|h| h["path"] == path);
        if hit || start.elapsed() > WAIT {
            break hit;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(found, "search_note_content finds {word} after the restart");
    c.close().await;
    audit_verifies(&env, "after the index failure").await;
}

/// docs/contract.md#proposals, docs/contract.md#the-audit-log: the audit line belongs to the transaction. When it cannot be written, the apply
/// rolls back and answers `AUDIT_UNAVAILABLE`: the note is not created, the proposal stays
/// pending, and the idempotency key is not used up, so the same call succeeds later.
#[tokio::test]
async fn an_apply_whose_audit_line_cannot_be_written_rolls_back() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let path = "z/audit-unwritable.md";
    let content = "# Audit\n\nonly with its record\n";
    let c = stdio(&env, &token, &[]).await;
    let p = propose_new(&c, path, content).await;
    c.close().await;
    let before = std::fs::read(env.home.join("audit.jsonl")).unwrap();

    let c = stdio(&env, &token, &[("VAULTGATE_TEST_FAILPOINT", "audit_append")]).await;
    let args = json!({"id": p.id, "proposalHash": p.hash, "idempotencyKey": "audit-k1"});
    match call(&c, "apply_proposal", args.clone()).await {
        Reply::Err(e) => assert_eq!(e["code"], "AUDIT_UNAVAILABLE", "{e}"),
        Reply::Ok(v) => panic!("the apply succeeded without its audit line: {v}"),
    }
    // Reads fail closed too: no record, no answer.
    match call(&c, "read_note", json!({"path": "z/attention.md"})).await {
        Reply::Err(e) => assert_eq!(e["code"], "AUDIT_UNAVAILABLE", "{e}"),
        Reply::Ok(v) => panic!("a read answered without its audit line: {v}"),
    }
    let resource = c
        .inner
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "vaultgate://vault/basic",
        ))
        .await;
    match resource {
        Err(e) => assert!(
            e.to_string().contains("AUDIT_UNAVAILABLE") || format!("{e:?}").contains("AUDIT_UNAVAILABLE"),
            "{e:?}"
        ),
        Ok(r) => panic!("a resource read answered without its audit line: {r:?}"),
    }
    c.close().await;
    assert!(!env.vault.join(path).exists(), "the note was rolled back");
    assert!(
        listed(&env, "pending").await.contains(&p.id),
        "the proposal is pending"
    );
    assert_eq!(
        std::fs::read(env.home.join("audit.jsonl")).unwrap(),
        before,
        "nothing was appended to the log"
    );

    // The same key works once the log can be written: it was never stored.
    let c = stdio(&env, &token, &[]).await;
    let a = ok(&c, "apply_proposal", args).await;
    assert_eq!(
        (a["applied"].clone(), a["replayed"].clone()),
        (json!(true), json!(false)),
        "{a}"
    );
    c.close().await;
    assert_eq!(std::fs::read_to_string(env.vault.join(path)).unwrap(), content);
    audit_verifies(&env, "after the audit failure").await;
}

/// docs/contract.md#proposals "Cost follows the change": the write path keeps the change fingerprint and the search
/// index by the notes it touched, without walking the vault. After many mixed applies (new,
/// patch, move, delete, undo, redo) both must equal what a fresh walk finds: a restart's
/// start-up scan (a whole walk) moves no revision, and `vaultgate index` finds nothing to add,
/// update or remove.
#[tokio::test]
async fn fingerprint_and_index_after_mixed_applies_equal_a_fresh_walk() {
    // docs/contract.md#proposals "Cost follows the change": nothing on the write path walks the vault, so what the
    // writes keep incrementally (fingerprint, index) must equal what a full walk finds.
    const APPLIES: usize = 1000;
    let env = Env::new();
    let (_, token) = env.token("mixed-writer", "full");
    let c = stdio(&env, &token, &[]).await;
    let mut live: Vec<String> = Vec::new();
    let mut key = 0usize;
    let mut next_key = || {
        key += 1;
        format!("mixed-{key}")
    };
    let mut applies = 0usize;
    let mut i = 0usize;
    while applies < APPLIES {
        i += 1;
        // new
        let path = format!("z/mixed/n{i:04}.md");
        let p = propose_new(
            &c,
            &path,
            &format!("# N{i}\n\nsee [[n{:04}]]\n", i.saturating_sub(1)),
        )
        .await;
        apply_mcp(&c, &p, &next_key()).await;
        applies += 1;
        live.push(path);
        // patch an older one
        if i.is_multiple_of(3) && live.len() > 2 {
            let target = live[i % live.len()].clone();
            let base = base_hash(&c, &target).await;
            let p = propose(
                &c,
                "propose_note_patch",
                json!({"path": target, "baseHash": base, "content": format!("# patched {i}\n"), "reason": "mix"}),
            )
            .await;
            apply_mcp(&c, &p, &next_key()).await;
            applies += 1;
        }
        // move one (links to it are rewritten)
        if i.is_multiple_of(5) && live.len() > 3 {
            let from = live.remove(1);
            let to = format!("z/mixed/moved/m{i:04}.md");
            let p = propose_move(&c, &from, &to).await;
            apply_mcp(&c, &p, &next_key()).await;
            applies += 1;
            live.push(to);
        }
        // delete one
        if i.is_multiple_of(7) && live.len() > 4 {
            let target = live.remove(2);
            let base = base_hash(&c, &target).await;
            let p = propose(
                &c,
                "propose_delete",
                json!({"path": target, "baseHash": base, "reason": "mix"}),
            )
            .await;
            apply_mcp(&c, &p, &next_key()).await;
            applies += 1;
        }
        // undo the newest change, then redo it
        if i.is_multiple_of(11) {
            let s = ok(&c, "history_status", json!({})).await;
            let top = s["undoTop"].as_str().unwrap().to_owned();
            ok(
                &c,
                "history_undo",
                json!({"expectedHistoryEntryId": top, "idempotencyKey": next_key()}),
            )
            .await;
            ok(
                &c,
                "history_redo",
                json!({"expectedHistoryEntryId": top, "idempotencyKey": next_key()}),
            )
            .await;
        }
    }
    let before = ok(&c, "get_vault_overview", json!({})).await;
    c.close().await;

    // A restart walks the whole vault and compares it with the recorded fingerprint.
    let c = stdio(&env, &token, &[]).await;
    let after = ok(&c, "get_vault_overview", json!({})).await;
    c.close().await;
    assert_eq!(
        before["revision"], after["revision"],
        "the start-up scan found a difference the writes had not recorded: {before} vs {after}"
    );
    assert_eq!(after["index"]["staleFiles"], 0, "{after}");

    let out = cli_ok(&env, &["index"], "vaultgate index").await;
    assert!(
        out.contains("(0 added, 0 updated, 0 removed,"),
        "the index differed from the files after the writes: {out}"
    );

    // What the incrementally kept index answers equals what a rebuild from the files answers.
    let linked = live[live.len() / 2].clone();
    let answers = |c: Client| {
        let linked = linked.clone();
        async move {
            let mut out = Vec::new();
            for q in ["patched", "see", "N1", "N99"] {
                let v = ok(&c, "search_note_content", json!({"query": q, "limit": 100})).await;
                out.push(v["hits"].clone());
            }
            let o = ok(&c, "get_vault_overview", json!({})).await;
            out.push(json!([o["notes"], o["tags"]]));
            out.push(ok(&c, "get_related_notes", json!({"path": linked})).await);
            c.close().await;
            out
        }
    };
    let kept = answers(stdio(&env, &token, &[]).await).await;
    cli_ok(&env, &["index", "--rebuild"], "vaultgate index --rebuild").await;
    let rebuilt = answers(stdio(&env, &token, &[]).await).await;
    assert!(
        kept.iter()
            .take(4)
            .all(|r| r.as_array().is_some_and(|a| !a.is_empty())),
        "the queries find something: {kept:?}"
    );
    assert_eq!(
        kept, rebuilt,
        "the kept index and a rebuilt one answer differently"
    );
    audit_verifies(&env, "after the mixed applies").await;
}

// ---- the writer's wait -------------------------------------------------------------------------------

/// Waits until `srv`'s log holds `line`.
async fn log_shows(srv: &crate::http::Server, line: &str) {
    let start = Instant::now();
    while !srv.stderr().contains(line) {
        assert!(
            start.elapsed() < WAIT,
            "the log never said {line:?}: {}",
            srv.stderr()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The apply of `p` with `key` must answer `VAULT_BUSY` (the writer is held).
async fn busy_apply(h: &Client, p: &Value, key: &str) {
    let args = json!({"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": key});
    match call(h, "apply_proposal", args).await {
        Reply::Err(e) => assert_eq!(e["code"], "VAULT_BUSY", "{e}"),
        Reply::Ok(v) => panic!("the writer is held, yet the apply answered {v}"),
    }
}

/// Lets the operator's paused apply (`hold_the_writer`) finish; it must succeed.
async fn release_the_writer(child: tokio::process::Child, release: &std::path::Path) {
    std::fs::write(release, "").unwrap();
    let out = bounded("the paused apply", child.wait_with_output())
        .await
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
}

/// The operator applies `held` and pauses after its first file step, holding the vault's writer
/// until the returned file is written.
async fn hold_the_writer(env: &Env, held: &Value) -> (tokio::process::Child, std::path::PathBuf) {
    let release = env.tmp.path().join("release");
    let marker = env.tmp.path().join("release.paused");
    let release_s = release.to_str().unwrap().to_owned();
    let child = cli_cmd(
        env,
        &["apply", "--only", held["id"].as_str().unwrap(), "--yes"],
        &[
            ("VAULTGATE_TEST_PAUSE", "after_first_op"),
            ("VAULTGATE_TEST_PAUSE_FILE", &release_s),
        ],
    )
    .spawn()
    .unwrap();
    (wait_for_marker(child, &marker, "the paused apply").await, release)
}

/// docs/contract.md#applying-a-proposal: a call that waits for the vault's writer longer than
/// `[limits] apply_wait_seconds` answers `VAULT_BUSY` (retryable); its write goes on and happens
/// once, and the same call with the same key answers its result.
#[tokio::test]
async fn an_apply_past_its_wait_answers_vault_busy_then_happens_once_and_its_key_answers() {
    let env = Env::new();
    crate::util::set_limits(&env, &[("apply_wait_seconds", 1)]);
    let (_, token) = env.token("agent", "auto");
    let c = env.stdio(&token).await;
    let held = crate::util::propose_new(&c, "notes/held.md", "# Held\n", "the CLI applies it").await;
    let waits = crate::util::propose_new(&c, "notes/waits.md", "# Waits\n", "waits for the writer").await;
    c.close().await;
    let srv = crate::http::Server::start(&env);

    let (child, release) = hold_the_writer(&env, &held).await;

    let h = srv.client(&token).await;
    let args = json!({"id": waits["id"], "proposalHash": waits["proposalHash"], "idempotencyKey": "busy-1"});
    let refused = match call(&h, "apply_proposal", args.clone()).await {
        Reply::Err(e) => e,
        Reply::Ok(v) => panic!("the writer is held, yet the apply answered {v}"),
    };
    assert_eq!(refused["code"], "VAULT_BUSY", "{refused}");
    assert_eq!(refused["retryable"], true, "{refused}");
    assert!(
        !env.vault.join("notes/waits.md").exists(),
        "nothing written while the writer is held"
    );

    // The writer is free again: the operator's apply ends, and the waiting one runs on its own.
    release_the_writer(child, &release).await;
    let start = Instant::now();
    while !env.vault.join("notes/waits.md").exists() {
        assert!(
            start.elapsed() < WAIT,
            "the apply answered VAULT_BUSY never happened"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The same call, the same key: the result of the write that went on, not a second write.
    let answer = loop {
        match call(&h, "apply_proposal", args.clone()).await {
            Reply::Ok(v) => break v,
            Reply::Err(e) if e["code"] == "VAULT_BUSY" && start.elapsed() < WAIT => continue,
            Reply::Err(e) => panic!("the retry with the same key: {e}"),
        }
    };
    assert_eq!(answer["applied"], true, "{answer}");
    assert_eq!(
        answer["replayed"], true,
        "the retry answers the write that went on: {answer}"
    );
    assert_eq!(
        std::fs::read_to_string(env.vault.join("notes/waits.md")).unwrap(),
        "# Waits\n"
    );
    let id = waits["id"].as_str().unwrap();
    let applied = applied_log_once_written(&env, id).await;
    assert_eq!(
        applied.lines().filter(|l| l.contains(id)).count(),
        1,
        "applied once:\n{applied}"
    );
    h.close().await;
}

/// `_applied.jsonl` once it holds `id`'s line (or after [`WAIT`]). The line follows the apply's
/// commit (docs/contract.md#rules-of-the-write-path), so a retry answered from the commit may
/// come back before the writer that ran the job appended it.
async fn applied_log_once_written(env: &Env, id: &str) -> String {
    let start = Instant::now();
    loop {
        let applied = std::fs::read_to_string(env.vault.join("inbox/_applied.jsonl")).unwrap_or_default();
        if applied.lines().any(|l| l.contains(id)) || start.elapsed() > WAIT {
            return applied;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// docs/contract.md#applying-a-proposal: jobs are durable. The server that waited for three
/// applies is killed; the next server runs them as their callers — one applies once, and its key
/// answers the retry; another's credential was revoked in between, and a third's tier lowered, so
/// they write nothing.
#[tokio::test]
async fn jobs_left_by_a_killed_server_run_once_in_the_next_as_their_callers_checked_again() {
    let env = Env::new();
    crate::util::set_limits(&env, &[("apply_wait_seconds", 1)]);
    let (_, token) = env.token("agent", "auto");
    let (_, other) = env.token("other", "auto");
    let c = env.stdio(&token).await;
    let held = crate::util::propose_new(&c, "notes/held.md", "# Held\n", "the CLI applies it").await;
    let waits = crate::util::propose_new(&c, "notes/waits.md", "# Waits\n", "a job").await;
    c.close().await;
    let c = env.stdio(&other).await;
    let revoked = crate::util::propose_new(&c, "notes/revoked.md", "# Revoked\n", "a job").await;
    c.close().await;
    let (_, lowered_token) = env.token("lowered", "auto");
    let c = env.stdio(&lowered_token).await;
    let lowered = crate::util::propose_new(&c, "notes/lowered.md", "# Lowered\n", "a job").await;
    c.close().await;
    let srv = crate::http::Server::start(&env);
    let (child, release) = hold_the_writer(&env, &held).await;

    // The revoked credential's job is older: when the other note lands, it was decided.
    let ho = srv.client(&other).await;
    busy_apply(&ho, &revoked, "job-other").await;
    let hl = srv.client(&lowered_token).await;
    busy_apply(&hl, &lowered, "job-lowered").await;
    let h = srv.client(&token).await;
    busy_apply(&h, &waits, "job-1").await;
    // kill -9 with both jobs waiting for the writer.
    drop(h);
    drop(ho);
    drop(hl);
    drop(srv);

    release_the_writer(child, &release).await;
    assert!(
        !env.vault.join("notes/waits.md").exists(),
        "the killed server's job did not run"
    );
    let out = cli(&env, &["token", "revoke", "other"], &[]).await;
    assert!(out.status.success(), "{}", text(&out));
    // Another caller may now only propose: its job is checked again, as the call it is.
    let out = cli(&env, &["token", "set-tier", "lowered", "propose"], &[]).await;
    assert!(out.status.success(), "{}", text(&out));

    let srv = crate::http::Server::start_logged(&env, "info");
    let start = Instant::now();
    while !env.vault.join("notes/waits.md").exists() {
        assert!(start.elapsed() < WAIT, "the job never ran: {}", srv.stderr());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    log_shows(&srv, "a job left by a stopped process ends without running").await;
    assert!(
        !env.vault.join("notes/revoked.md").exists(),
        "a revoked credential's job ran"
    );
    assert!(
        !env.vault.join("notes/lowered.md").exists(),
        "a job ran with a tier its caller no longer has"
    );
    let denied = crate::util::audit_lines(&env).into_iter().any(|r| {
        r["tool"] == "apply_proposal" && r["proposalId"] == lowered["id"] && r["code"] == "CAPABILITY_DENIED"
    });
    assert!(denied, "the lowered caller's job is refused and recorded");
    let h = srv.client(&token).await;
    let args = json!({"id": waits["id"], "proposalHash": waits["proposalHash"], "idempotencyKey": "job-1"});
    let answer = call(&h, "apply_proposal", args).await.ok();
    assert_eq!(answer["applied"], true, "{answer}");
    assert_eq!(answer["replayed"], true, "the retry answers the job: {answer}");
    let applied = applied_log_once_written(&env, waits["id"].as_str().unwrap()).await;
    for (p, n) in [(&waits, 1), (&revoked, 0), (&lowered, 0)] {
        let id = p["id"].as_str().unwrap();
        assert_eq!(
            applied.lines().filter(|l| l.contains(id)).count(),
            n,
            "{id}:\n{applied}"
        );
    }
    // The job ran as its caller: its record names the agent's credential.
    let ran = crate::util::audit_lines(&env)
        .into_iter()
        .filter(|r| r["proposalId"] == waits["id"] && r["tool"] == "apply_proposal" && r["outcome"] == "ok")
        .collect::<Vec<_>>();
    assert!(!ran.is_empty(), "the job's apply is audited");
    assert_eq!(ran[0]["actor"]["name"], "agent", "{}", ran[0]);
    h.close().await;
    let out = cli(&env, &["audit", "verify"], &[]).await;
    assert!(out.status.success(), "{}", text(&out));
}

/// docs/contract.md#applying-a-proposal: nothing lands after `job_ttl_seconds`. A job left by a
/// killed server past it fails without running; the retry with its key is a new job.
#[tokio::test]
async fn a_job_older_than_its_ttl_fails_without_running_and_its_retry_applies() {
    let env = Env::new();
    crate::util::set_limits(&env, &[("apply_wait_seconds", 1), ("job_ttl_seconds", 2)]);
    let (_, token) = env.token("agent", "auto");
    let c = env.stdio(&token).await;
    let held = crate::util::propose_new(&c, "notes/held.md", "# Held\n", "the CLI applies it").await;
    let late = crate::util::propose_new(&c, "notes/late.md", "# Late\n", "a job").await;
    c.close().await;
    let srv = crate::http::Server::start(&env);
    let (child, release) = hold_the_writer(&env, &held).await;
    let h = srv.client(&token).await;
    busy_apply(&h, &late, "late-1").await;
    drop(h);
    drop(srv);
    release_the_writer(child, &release).await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;

    let srv = crate::http::Server::start_logged(&env, "info");
    log_shows(&srv, "a job left by a stopped process ends without running").await;
    assert!(
        srv.stderr().contains("code=\"VAULT_BUSY\"") || srv.stderr().contains("code=VAULT_BUSY"),
        "{}",
        srv.stderr()
    );
    assert!(
        !env.vault.join("notes/late.md").exists(),
        "a job past its ttl ran"
    );
    let h = srv.client(&token).await;
    let args = json!({"id": late["id"], "proposalHash": late["proposalHash"], "idempotencyKey": "late-1"});
    let answer = call(&h, "apply_proposal", args).await.ok();
    assert_eq!(answer["applied"], true, "{answer}");
    assert_ne!(answer["replayed"], true, "the retry is the first run: {answer}");
    assert_eq!(
        std::fs::read_to_string(env.vault.join("notes/late.md")).unwrap(),
        "# Late\n"
    );
    h.close().await;
}

/// SECURITY(T-LIMIT4): while the writer is held, at most 64 calls of one server wait for it; the
/// next is refused at once with `VAULT_BUSY` — recorded, nothing started — and the 64 apply once
/// the writer is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sixty_fifth_write_waiting_for_a_held_writer_is_refused_at_once_and_recorded() {
    const WAITING: usize = 64;
    let env = Env::new();
    let (_, token) = env.token("agent", "auto");
    let c = env.stdio(&token).await;
    let held = crate::util::propose_new(&c, "notes/held.md", "# Held\n", "the CLI applies it").await;
    let mut proposals = Vec::new();
    for i in 0..=WAITING {
        let path = format!("many/n{i:02}.md");
        proposals.push(crate::util::propose_new(&c, &path, &format!("# n{i}\n"), "one of many").await);
    }
    c.close().await;
    let srv = crate::http::Server::start(&env);
    let (child, release) = hold_the_writer(&env, &held).await;

    let h = Arc::new(srv.client(&token).await);
    let mut waiting = tokio::task::JoinSet::new();
    for (i, p) in proposals.iter().take(WAITING).enumerate() {
        let h = h.clone();
        let args =
            json!({"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": format!("w{i}")});
        waiting.spawn(async move { call(&h, "apply_proposal", args).await });
    }
    // Once all 64 wait (their requests reach the server within milliseconds), the 65th is
    // refused at once, not after the 25 s wait.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let last = &proposals[WAITING];
    let args = json!({"id": last["id"], "proposalHash": last["proposalHash"], "idempotencyKey": "w-last"});
    let start = Instant::now();
    let refused = match call(&h, "apply_proposal", args.clone()).await {
        Reply::Err(e) => e,
        Reply::Ok(v) => panic!("the 65th write applied while the writer is held: {v}"),
    };
    assert_eq!(refused["code"], "VAULT_BUSY", "{refused}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "refused at once, not after waiting: {:?}",
        start.elapsed()
    );
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("same idempotencyKey"),
        "{refused}"
    );
    let recorded = crate::util::audit_lines(&env)
        .into_iter()
        .any(|r| r["tool"] == "apply_proposal" && r["code"] == "VAULT_BUSY");
    assert!(recorded, "the refusal is audited");

    release_the_writer(child, &release).await;
    for r in bounded("the waiting writes", waiting.join_all()).await {
        match r {
            Reply::Ok(v) => assert_eq!(v["applied"], true, "{v}"),
            Reply::Err(e) => panic!("a waiting write: {e}"),
        }
    }
    assert!(
        !env.vault.join(format!("many/n{WAITING:02}.md")).exists(),
        "the refused one started nothing"
    );
    // Its retry with the same key now applies it.
    assert_eq!(call(&h, "apply_proposal", args).await.ok()["applied"], true);
}
