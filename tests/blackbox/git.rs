//! Git history (docs/contract.md#git-history) through the real binary, on real repositories made with the real `git`:
//! - every apply (new, patch, move, delete), undo, redo and executed critical call is exactly one
//!   commit on `HEAD` holding exactly the note files the change wrote or removed, with the author,
//!   committer, subject, body and five `Vaultgate-*` trailers the contract names, and the index
//!   entries of exactly those files set to the committed content (the user's other work stays);
//! - a commit that cannot be made now (a held `index.lock`, a merge or rebase in progress) is
//!   queued, shown by `doctor`, and made in order, once, at the next change or start;
//! - a crash between the engine's commit and the git commit (`after_commit`) is committed once at
//!   the next start, one right after the ref moved (`git_after_ref`) is never committed twice;
//! - no hook, filter, fsmonitor, signing program or `GIT_*` variable of the user ever runs or counts;
//! - `get_note_history` and `read_note {hash}`, with git on and off;
//! - `vault git ID on|off|status` and `vault add --git`;
//! - a hostile reason cannot add, forge or hide a trailer.
#![cfg(unix)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::util::{Client, Env, Reply, bin, bounded, call, ok};

/// The bound on every wait: a process, a tool call, a server start, a queued commit.
const WAIT: Duration = Duration::from_secs(60);
/// What `std::process::abort` raises.
const SIGABRT: i32 = 6;
const COMMITTER: &str = "vaultgate <vaultgate@vaultgate.invalid>";
const TRAILER_KEYS: [&str; 5] = [
    "Vaultgate-Proposal",
    "Vaultgate-Proposal-Hash",
    "Vaultgate-History-Entry",
    "Vaultgate-Audit",
    "Vaultgate-Credential",
];
const ATTENTION: &str = "z/attention.md";
const COOKING: &str = "notes/cooking.md";
const JOURNAL: &str = "journal/2026-01-05.md";

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Stdout and stderr of a finished process, for messages and checks.
fn text(out: &Output) -> String {
    format!(
        "[{}] stdout: {} stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The `GIT_*` variables of the test process: no child inherits them.
fn inherited_git_vars() -> Vec<String> {
    std::env::vars_os()
        .filter_map(|(k, _)| k.to_str().filter(|k| k.starts_with("GIT_")).map(str::to_owned))
        .collect()
}

fn write_script(path: &Path, body: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

// ---- the lab: a home, a vault, a user's HOME, and git ------------------------------------------

/// One commit as `git` records it.
#[derive(Clone, Debug)]
struct Commit {
    id: String,
    parents: Vec<String>,
    /// `Name <email>`.
    author: String,
    committer: String,
    /// The raw message, byte for byte as stored.
    message: String,
    /// path → `A` / `M` / `D` (no rename detection).
    files: BTreeMap<String, String>,
}

impl Commit {
    fn subject(&self) -> &str {
        self.message.split('\n').next().unwrap()
    }
    /// The value of trailer `key` (from the message's last lines).
    fn trailer(&self, key: &str) -> Option<String> {
        let prefix = format!("{key}: ");
        self.message
            .trim_end_matches('\n')
            .rsplit('\n')
            .take(5)
            .find_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
    }
}

fn files(list: &[(&str, &str)]) -> BTreeMap<String, String> {
    list.iter()
        .map(|(p, s)| ((*p).to_owned(), (*s).to_owned()))
        .collect()
}

struct Lab {
    env: Env,
    /// `HOME` (and `XDG_CONFIG_HOME` below it) of every git and vaultgate process.
    user: PathBuf,
    /// An empty hooks folder the test's own git commands use.
    nohooks: PathBuf,
}

impl Lab {
    /// The basic fixture registered as `basic`; no repository.
    fn plain() -> Lab {
        let env = Env::new();
        let user = env.tmp.path().join("user");
        std::fs::create_dir_all(user.join(".config")).unwrap();
        let nohooks = env.tmp.path().join("no-hooks");
        std::fs::create_dir_all(&nohooks).unwrap();
        Lab { env, user, nohooks }
    }

    /// The vault is a fresh repository (nothing committed, git still off for vaultgate).
    fn repo() -> Lab {
        let lab = Lab::plain();
        lab.git(&["init", "-q", "-b", "main"]);
        lab
    }

    /// Git on, and the user has committed the vault as it was.
    async fn with_git() -> Lab {
        let lab = Lab::repo();
        lab.vg_ok(&["vault", "git", "basic", "on"]).await;
        lab.user_commit_all("user: the vault as it was");
        lab
    }

    fn vault(&self) -> &Path {
        &self.env.vault
    }

    fn read(&self, rel: &str) -> Vec<u8> {
        std::fs::read(self.vault().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }

    fn write(&self, rel: &str, bytes: &[u8]) {
        let p = self.vault().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }

    // ---- git, as the user runs it -------------------------------------------------------------

    fn git_cmd_in(&self, dir: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new("git");
        for k in inherited_git_vars() {
            cmd.env_remove(k);
        }
        cmd.env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", &self.user)
            .env("XDG_CONFIG_HOME", self.user.join(".config"))
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=T", "-c", "user.email=t@example.invalid"])
            .args(["-c", "commit.gpgsign=false", "-c", "core.fsmonitor=false"])
            .arg("-c")
            .arg(format!("core.hooksPath={}", self.nohooks.display()))
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    fn git_out(&self, args: &[&str]) -> Output {
        self.git_cmd_in(self.vault(), args).output().unwrap()
    }

    fn git_bytes(&self, args: &[&str]) -> Vec<u8> {
        let out = self.git_out(args);
        assert!(out.status.success(), "git {args:?}: {}", text(&out));
        out.stdout
    }

    fn git(&self, args: &[&str]) -> String {
        String::from_utf8(self.git_bytes(args)).unwrap()
    }

    fn git_succeeds(&self, args: &[&str]) -> bool {
        self.git_out(args).status.success()
    }

    fn user_commit_all(&self, message: &str) {
        self.git(&["add", "-A"]);
        // Whatever the exclude file says (test 7 checks it), the user commits notes only.
        self.git(&[
            "rm",
            "-r",
            "-q",
            "--cached",
            "--ignore-unmatch",
            "--",
            "inbox",
            ".vaultgate",
        ]);
        self.git(&["commit", "-q", "--allow-empty", "-m", message]);
    }

    fn head(&self) -> String {
        self.git(&["rev-parse", "HEAD"]).trim().to_owned()
    }

    fn tree(&self, rev: &str) -> String {
        self.git(&["rev-parse", &format!("{rev}^{{tree}}")])
            .trim()
            .to_owned()
    }

    fn commit(&self, id: &str) -> Commit {
        let info = self.git(&["log", "-1", "--format=%H%n%P%n%an <%ae>%n%cn <%ce>", id]);
        let mut lines = info.lines();
        let id = lines.next().unwrap().to_owned();
        let parents = lines
            .next()
            .unwrap_or("")
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        let author = lines.next().unwrap().to_owned();
        let committer = lines.next().unwrap().to_owned();
        let raw = self.git(&["cat-file", "commit", &id]);
        let message = raw
            .split_once("\n\n")
            .map(|(_, m)| m.to_owned())
            .unwrap_or_default();
        let listing = self.git_bytes(&[
            "diff-tree",
            "-r",
            "--root",
            "--no-commit-id",
            "--no-renames",
            "--name-status",
            "-z",
            &id,
        ]);
        let listing = String::from_utf8(listing).unwrap();
        let parts: Vec<&str> = listing.split('\0').filter(|s| !s.is_empty()).collect();
        let files = parts
            .chunks(2)
            .map(|c| (c[1].to_owned(), c[0].to_owned()))
            .collect();
        Commit {
            id,
            parents,
            author,
            committer,
            message,
            files,
        }
    }

    /// The commits on `HEAD` after `base`, oldest first.
    fn commits_after(&self, base: &str) -> Vec<Commit> {
        self.git(&[
            "rev-list",
            "--reverse",
            "--first-parent",
            &format!("{base}..HEAD"),
        ])
        .lines()
        .map(|id| self.commit(id))
        .collect()
    }

    /// Every commit reachable from any ref whose committer is vaultgate.
    fn vaultgate_commits(&self) -> Vec<Commit> {
        self.git(&["log", "--all", "--format=%H %ce"])
            .lines()
            .filter(|l| l.ends_with(" vaultgate@vaultgate.invalid"))
            .map(|l| self.commit(l.split(' ').next().unwrap()))
            .collect()
    }

    /// How many commits (any ref) carry `Vaultgate-Proposal: <id>`.
    fn commits_of_proposal(&self, id: &str) -> usize {
        self.vaultgate_commits()
            .iter()
            .filter(|c| c.trailer("Vaultgate-Proposal").as_deref() == Some(id))
            .count()
    }

    /// The bytes of `path` in `rev`, if it holds it.
    fn blob(&self, rev: &str, path: &str) -> Option<Vec<u8>> {
        let out = self.git_out(&["cat-file", "blob", &format!("{rev}:{path}")]);
        out.status.success().then_some(out.stdout)
    }

    /// `git interpret-trailers --parse` of `message`, one trailer a line.
    fn parsed_trailers(&self, message: &str) -> Vec<String> {
        let mut child = self
            .git_cmd_in(self.vault(), &["interpret-trailers", "--parse"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(message.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "interpret-trailers: {}", text(&out));
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// `git status --porcelain` (the machine folders aside, test 7 checks them), as a set.
    fn porcelain(&self) -> BTreeSet<String> {
        self.git(&["-c", "core.quotePath=false", "status", "--porcelain"])
            .lines()
            .filter(|l| !l.contains(".vaultgate") && !l[3..].starts_with("inbox"))
            .map(str::to_owned)
            .collect()
    }

    /// `git diff --cached --name-only`: what the user has staged.
    fn staged(&self) -> Vec<String> {
        self.git(&["-c", "core.quotePath=false", "diff", "--cached", "--name-only"])
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn in_index(&self, path: &str) -> bool {
        !self.git(&["ls-files", "--", path]).trim().is_empty()
    }

    // ---- vaultgate -----------------------------------------------------------------------------

    fn vg_cmd(&self, args: &[&str], vars: &[(&str, &str)]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(bin());
        cmd.arg("--home").arg(&self.env.home).args(args);
        for k in inherited_git_vars() {
            cmd.env_remove(k);
        }
        cmd.env_remove("VAULTGATE_HOME")
            .env_remove("VAULTGATE_TOKEN")
            .env_remove("VAULTGATE_TEST_FAILPOINT")
            .env("USER", "tester")
            .env("HOME", &self.user)
            .env("XDG_CONFIG_HOME", self.user.join(".config"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (k, v) in vars {
            cmd.env(k, v);
        }
        cmd
    }

    async fn vg_with(&self, args: &[&str], vars: &[(&str, &str)]) -> Output {
        let child = self.vg_cmd(args, vars).spawn().unwrap();
        bounded(&format!("vaultgate {args:?}"), child.wait_with_output())
            .await
            .unwrap()
    }

    async fn vg(&self, args: &[&str]) -> Output {
        self.vg_with(args, &[]).await
    }

    async fn vg_ok_with(&self, args: &[&str], vars: &[(&str, &str)]) -> String {
        let out = self.vg_with(args, vars).await;
        assert!(out.status.success(), "vaultgate {args:?}: {}", text(&out));
        String::from_utf8(out.stdout).unwrap()
    }

    async fn vg_ok(&self, args: &[&str]) -> String {
        self.vg_ok_with(args, &[]).await
    }

    /// `vault git basic status --json`.
    async fn git_status(&self) -> Value {
        let out = self.vg_ok(&["vault", "git", "basic", "status", "--json"]).await;
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("status --json is not JSON: {e}: {out}"))
    }

    /// The next start of the binary: `apply --yes` with nothing pending opens the vault.
    async fn restart(&self) {
        let out = self.vg(&["apply", "--yes"]).await;
        assert!(
            out.status.success(),
            "apply --yes with nothing pending: {}",
            text(&out)
        );
    }

    async fn stdio_with(&self, token: &str, vars: &[(&str, &str)]) -> Client {
        let mut cmd = tokio::process::Command::new(bin());
        cmd.arg("stdio").arg("--home").arg(&self.env.home);
        for k in inherited_git_vars() {
            cmd.env_remove(k);
        }
        cmd.env_remove("VAULTGATE_HOME")
            .env_remove("VAULTGATE_TEST_FAILPOINT")
            .env("VAULTGATE_TOKEN", token)
            .env("USER", "tester")
            .env("HOME", &self.user)
            .env("XDG_CONFIG_HOME", self.user.join(".config"))
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

    async fn stdio(&self, token: &str) -> Client {
        self.stdio_with(token, &[]).await
    }

    fn audit_line(&self, seq: u64) -> Value {
        std::fs::read_to_string(self.env.home.join("audit.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|l| l["seq"].as_u64() == Some(seq))
            .unwrap_or_else(|| panic!("no audit line with seq {seq}"))
    }

    fn audit_lines(&self) -> Vec<Value> {
        crate::util::audit_lines(&self.env)
    }

    /// Waits (bounded) until `HEAD` has `n` commits after `base`; returns them.
    async fn wait_for_commits(&self, base: &str, n: usize, what: &str) -> Vec<Commit> {
        let start = Instant::now();
        loop {
            let now = self.commits_after(base);
            if now.len() >= n {
                return now;
            }
            assert!(
                start.elapsed() < WAIT,
                "{what}: {} of {n} commits after {WAIT:?}",
                now.len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// No vaultgate commit and no index entry holds a file of `.vaultgate/` or the inbox.
    fn assert_no_machine_files(&self) {
        for c in self.vaultgate_commits() {
            for p in c.files.keys() {
                assert!(
                    !p.starts_with(".vaultgate/") && !p.starts_with("inbox/"),
                    "commit {} ({}) holds {p}",
                    c.id,
                    c.subject()
                );
            }
            for p in self.git(&["ls-tree", "-r", "--name-only", &c.id]).lines() {
                assert!(
                    !p.starts_with(".vaultgate/") && !p.starts_with("inbox/"),
                    "the tree of commit {} ({}) holds {p}",
                    c.id,
                    c.subject()
                );
            }
        }
        for p in self.git(&["ls-files"]).lines() {
            assert!(
                !p.starts_with(".vaultgate/") && !p.starts_with("inbox/"),
                "the index holds {p}"
            );
        }
    }
}

// ---- tool calls --------------------------------------------------------------------------------

async fn code(c: &Client, tool: &str, args: Value) -> String {
    match call(c, tool, args.clone()).await {
        Reply::Ok(v) => panic!("{tool}({args}): expected an error, got {v}"),
        Reply::Err(e) => e["code"].as_str().unwrap().to_owned(),
    }
}

async fn hash_of(c: &Client, path: &str) -> Value {
    ok(c, "read_note", json!({"path": path})).await["hash"].clone()
}

use crate::util::propose_new;

async fn propose_patch(c: &Client, path: &str, content: &str, reason: &str) -> Value {
    let base = hash_of(c, path).await;
    ok(
        c,
        "propose_note_patch",
        json!({"path": path, "baseHash": base, "content": content, "reason": reason}),
    )
    .await
}

async fn propose_move(c: &Client, from: &str, to: &str, reason: &str) -> Value {
    ok(
        c,
        "propose_move",
        json!({"from": from, "to": to, "reason": reason}),
    )
    .await
}

async fn propose_delete(c: &Client, path: &str, reason: &str) -> Value {
    let base = hash_of(c, path).await;
    ok(
        c,
        "propose_delete",
        json!({"path": path, "baseHash": base, "reason": reason}),
    )
    .await
}

/// Applies the proposal `p` describes through MCP; returns the answer.
async fn apply(c: &Client, p: &Value) -> Value {
    let a = ok(
        c,
        "apply_proposal",
        json!({"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": format!("apply-{}", p["id"].as_str().unwrap())}),
    )
    .await;
    assert_eq!(a["applied"], true, "{a}");
    a
}

fn id_of(p: &Value) -> String {
    p["id"].as_str().unwrap().to_owned()
}

/// The paths a move proposal rewrites links in (its source aside).
fn rewritten(p: &Value, from: &str) -> Vec<String> {
    p["linkRewrites"]
        .as_array()
        .unwrap_or_else(|| panic!("a move answers linkRewrites: {p}"))
        .iter()
        .map(|r| r["path"].as_str().unwrap().to_owned())
        .filter(|p| p != from)
        .collect()
}

// ---- what a commit must be ---------------------------------------------------------------------

/// The five trailers of an apply made by `applier` (`name (id, tier)`), the audit one checked
/// against the actual line of `audit.jsonl`.
fn apply_trailers(lab: &Lab, p: &Value, a: &Value, applier: &str) -> Vec<String> {
    let seq = a["auditSeq"]
        .as_u64()
        .unwrap_or_else(|| panic!("apply answers auditSeq: {a}"));
    let line = lab.audit_line(seq);
    assert_eq!(
        line["proposalId"], p["id"],
        "audit line {seq} is the apply's: {line}"
    );
    assert_eq!(line["outcome"], "ok", "{line}");
    vec![
        format!("Vaultgate-Proposal: {}", p["id"].as_str().unwrap()),
        format!("Vaultgate-Proposal-Hash: {}", p["proposalHash"].as_str().unwrap()),
        format!(
            "Vaultgate-History-Entry: {}",
            a["historyEntryId"].as_str().unwrap()
        ),
        format!("Vaultgate-Audit: {seq} {}", line["hash"].as_str().unwrap()),
        format!("Vaultgate-Credential: {applier}"),
    ]
}

/// The message is `subject`, a blank line, the body `reason`, a blank line and exactly
/// `trailers`; git's own trailer parser sees exactly those.
fn assert_message(lab: &Lab, c: &Commit, subject: &str, reason: Option<&str>, trailers: &[String]) {
    let m = &c.message;
    let lines: Vec<&str> = m.trim_end_matches('\n').split('\n').collect();
    let n = lines.len();
    assert_eq!(lines[0], subject, "subject of {}:\n{m}", c.id);
    assert!(n >= 8, "subject, body and five trailers:\n{m}");
    assert_eq!(lines[1], "", "a blank line after the subject:\n{m}");
    assert_eq!(
        &lines[n - 5..],
        trailers,
        "the message ends with the five trailers:\n{m}"
    );
    assert_eq!(lines[n - 6], "", "a blank line before the trailers:\n{m}");
    if let Some(reason) = reason {
        assert_eq!(lines[2..n - 6].join("\n"), reason, "the body is the reason:\n{m}");
    }
    assert_eq!(
        lab.parsed_trailers(m),
        trailers,
        "git interpret-trailers --parse of:\n{m}"
    );
}

/// One new commit after `base`, on `HEAD`, holding exactly `want` (whose content is the
/// work tree's and whose index entries equal `HEAD`'s); the user's work as `wip` says.
fn assert_one_commit(lab: &Lab, base: &str, want: &BTreeMap<String, String>, what: &str) -> Commit {
    let new = lab.commits_after(base);
    assert_eq!(
        new.len(),
        1,
        "{what}: exactly one commit: {:?}",
        new.iter().map(|c| c.subject().to_owned()).collect::<Vec<_>>()
    );
    let c = new[0].clone();
    assert_eq!(
        c.parents,
        [base.to_owned()],
        "{what}: the parent is the previous HEAD"
    );
    assert_eq!(&c.files, want, "{what}: the files of the commit");
    assert_eq!(c.committer, COMMITTER, "{what}");
    assert_committed_files(lab, &c, what);
    c
}

/// The committed files hold the work tree's bytes (removed ones are gone), and their index
/// entries are the committed ones.
fn assert_committed_files(lab: &Lab, c: &Commit, what: &str) {
    for (path, status) in &c.files {
        if status == "D" {
            assert!(!lab.vault().join(path).exists(), "{what}: {path} is removed");
            assert!(!lab.in_index(path), "{what}: {path} left the index");
        } else {
            assert_eq!(
                lab.blob(&c.id, path).as_deref(),
                Some(&lab.read(path)[..]),
                "{what}: {path} is committed as it is on disk"
            );
            assert!(
                lab.git_succeeds(&["diff", "--cached", "--quiet", "HEAD", "--", path]),
                "{what}: the index entry of {path} is HEAD's"
            );
            assert!(
                lab.git_succeeds(&["diff", "--quiet", "--", path]),
                "{what}: the work tree of {path} equals its index entry"
            );
        }
    }
}

// ================================================================================================
// 1. every apply kind
// ================================================================================================

#[tokio::test]
async fn each_apply_kind_is_one_commit_of_exactly_its_files_and_the_users_work_stays() {
    let lab = Lab::with_git().await;
    let (drafter_id, drafter) = lab.env.token("drafter", "propose");
    let (reviewer_id, reviewer) = lab.env.token("reviewer", "full");
    let author = format!("drafter <{drafter_id}@vaultgate.invalid>");
    let applier = format!("reviewer ({reviewer_id}, full)");

    // A remote the user never pushed to.
    let remote = lab.env.tmp.path().join("remote.git");
    lab.git(&["init", "-q", "--bare", remote.to_str().unwrap()]);
    lab.git(&["remote", "add", "origin", remote.to_str().unwrap()]);

    // The user's own work in progress: a dirty file, a staged change, an untracked note.
    let cooking_committed = lab.blob("HEAD", COOKING).unwrap();
    let mut journal = lab.read(JOURNAL);
    journal.extend_from_slice(b"\nA line the user is still writing.\n");
    lab.write(JOURNAL, &journal);
    let mut cooking = lab.read(COOKING);
    cooking.extend_from_slice(b"\nStaged by the user, not committed.\n");
    lab.write(COOKING, &cooking);
    lab.git(&["add", "--", COOKING]);
    lab.write("scratch.md", b"# Scratch\n\nuntracked\n");
    let wip: BTreeSet<String> = [
        format!(" M {JOURNAL}"),
        format!("M  {COOKING}"),
        "?? scratch.md".to_owned(),
    ]
    .into();
    assert_eq!(lab.porcelain(), wip, "the user's work before any apply");

    let d = lab.stdio(&drafter).await;
    let r = lab.stdio(&reviewer).await;
    let user_work_stays = |what: &str| {
        assert_eq!(lab.porcelain(), wip, "{what}: git status --porcelain");
        assert_eq!(lab.staged(), [COOKING], "{what}: git diff --cached --name-only");
        assert_eq!(
            lab.blob("HEAD", COOKING).unwrap(),
            cooking_committed,
            "{what}: the staged change was not committed"
        );
        assert_eq!(lab.read(COOKING), cooking, "{what}");
        assert_eq!(lab.read(JOURNAL), journal, "{what}");
        assert_eq!(lab.read("scratch.md"), b"# Scratch\n\nuntracked\n", "{what}");
    };

    // new
    let base = lab.head();
    let reason = "A note for the git test.";
    let p = propose_new(&d, "z/git-new.md", "# Git new\n\nwritten by an agent\n", reason).await;
    let a = apply(&r, &p).await;
    assert_eq!(a["git"], "committed", "{a}");
    let c = assert_one_commit(&lab, &base, &files(&[("z/git-new.md", "A")]), "new");
    assert_eq!(c.author, author, "new: the author is the proposal's creator");
    assert_message(
        &lab,
        &c,
        "new z/git-new.md",
        Some(reason),
        &apply_trailers(&lab, &p, &a, &applier),
    );
    user_work_stays("new");

    // patch
    let base = lab.head();
    let reason = "Adds a section on heads.";
    let mut patched = lab.read(ATTENTION);
    patched.extend_from_slice(b"\n## Heads\n\nSeveral heads attend in parallel.\n");
    let p = propose_patch(&d, ATTENTION, std::str::from_utf8(&patched).unwrap(), reason).await;
    let a = apply(&r, &p).await;
    assert_eq!(a["git"], "committed", "{a}");
    let c = assert_one_commit(&lab, &base, &files(&[(ATTENTION, "M")]), "patch");
    assert_eq!(lab.blob(&c.id, ATTENTION).unwrap(), patched);
    assert_eq!(c.author, author, "patch");
    assert_message(
        &lab,
        &c,
        "patch z/attention.md",
        Some(reason),
        &apply_trailers(&lab, &p, &a, &applier),
    );
    user_work_stays("patch");

    // move: the old path removed, the new one added, every rewritten linking note
    let base = lab.head();
    let reason = "Files it under ml.";
    let to = "ml/attention-mechanism.md";
    let p = propose_move(&d, ATTENTION, to, reason).await;
    let linkers = rewritten(&p, ATTENTION);
    assert!(linkers.len() >= 3, "several notes link to it: {p}");
    let mut want = files(&[(ATTENTION, "D"), (to, "A")]);
    for l in &linkers {
        want.insert(l.clone(), "M".into());
    }
    let a = apply(&r, &p).await;
    assert_eq!(a["git"], "committed", "{a}");
    let c = assert_one_commit(&lab, &base, &want, "move");
    assert_eq!(lab.blob(&c.id, to).unwrap(), patched, "the moved note's bytes");
    assert_eq!(c.author, author, "move");
    assert_message(
        &lab,
        &c,
        &format!("move {to}"),
        Some(reason),
        &apply_trailers(&lab, &p, &a, &applier),
    );
    user_work_stays("move");

    // delete
    let base = lab.head();
    let reason = "Superseded.";
    let p = propose_delete(&d, "z/transformer.md", reason).await;
    let a = apply(&r, &p).await;
    assert_eq!(a["git"], "committed", "{a}");
    let c = assert_one_commit(&lab, &base, &files(&[("z/transformer.md", "D")]), "delete");
    assert_eq!(c.author, author, "delete");
    assert_message(
        &lab,
        &c,
        "delete z/transformer.md",
        Some(reason),
        &apply_trailers(&lab, &p, &a, &applier),
    );
    user_work_stays("delete");

    // On HEAD's branch; nothing pushed.
    assert_eq!(lab.git(&["symbolic-ref", "HEAD"]).trim(), "refs/heads/main");
    let pushed = lab.git_cmd_in(&remote, &["for-each-ref"]).output().unwrap();
    assert!(
        pushed.status.success() && pushed.stdout.is_empty(),
        "nothing pushed: {}",
        text(&pushed)
    );
    assert_eq!(lab.vaultgate_commits().len(), 4);
    lab.assert_no_machine_files();
    d.close().await;
    r.close().await;
}

// ================================================================================================
// 2. undo, redo, delete_permanent
// ================================================================================================

/// The trailers of a change that is not an apply: only the five keys, in order, at the end;
/// the history entry, the audit line (of `tool`, checked against `audit.jsonl`) and who made it.
fn assert_change_trailers(lab: &Lab, c: &Commit, history_entry: Option<&str>, tool: &str, by: Option<&str>) {
    let parsed = lab.parsed_trailers(&c.message);
    let keys: Vec<&str> = parsed.iter().map(|t| t.split(": ").next().unwrap()).collect();
    let order: Vec<&str> = TRAILER_KEYS
        .iter()
        .copied()
        .filter(|k| keys.contains(k))
        .collect();
    assert_eq!(
        keys,
        order,
        "{}: only Vaultgate trailers, in order:\n{}",
        c.subject(),
        c.message
    );
    for k in [
        "Vaultgate-History-Entry",
        "Vaultgate-Audit",
        "Vaultgate-Credential",
    ] {
        if k == "Vaultgate-History-Entry" && history_entry.is_none() {
            continue;
        }
        assert!(keys.contains(&k), "{}: {k} is there:\n{}", c.subject(), c.message);
    }
    if let Some(h) = history_entry {
        assert_eq!(
            c.trailer("Vaultgate-History-Entry").as_deref(),
            Some(h),
            "{}",
            c.message
        );
    }
    let audit = c.trailer("Vaultgate-Audit").unwrap();
    let (seq, hash) = audit.split_once(' ').unwrap();
    let line = lab.audit_line(seq.parse().unwrap());
    assert_eq!(
        line["hash"],
        hash,
        "{}: the audit trailer is that line's hash: {line}",
        c.subject()
    );
    assert_eq!(
        line["tool"],
        tool,
        "{}: the audit line of the change: {line}",
        c.subject()
    );
    assert_eq!(line["outcome"], "ok", "{line}");
    if let Some(by) = by {
        assert_eq!(
            c.trailer("Vaultgate-Credential").as_deref(),
            Some(by),
            "{}",
            c.message
        );
    }
}

#[tokio::test]
async fn undo_and_redo_are_new_commits_and_a_permanent_delete_commits_the_removal() {
    let lab = Lab::with_git().await;
    let (writer_id, writer) = lab.env.token("writer", "auto");
    let c = lab.stdio(&writer).await;
    let root = lab.head();
    let original = lab.read(ATTENTION);
    let mut patched = original.clone();
    patched.extend_from_slice(b"\nA patch to be undone.\n");

    let p = propose_patch(&c, ATTENTION, std::str::from_utf8(&patched).unwrap(), "to undo").await;
    let a = apply(&c, &p).await;
    assert_eq!(a["git"], "committed", "{a}");
    let h = a["historyEntryId"].as_str().unwrap().to_owned();
    let applied = assert_one_commit(&lab, &root, &files(&[(ATTENTION, "M")]), "the apply");

    // Undo through MCP: a new commit on top, authored by whoever undid it.
    ok(
        &c,
        "history_undo",
        json!({"expectedHistoryEntryId": h, "idempotencyKey": "undo-1"}),
    )
    .await;
    let undo = assert_one_commit(&lab, &applied.id, &files(&[(ATTENTION, "M")]), "the undo");
    assert!(undo.subject().starts_with("undo "), "{}", undo.message);
    assert_eq!(undo.author, format!("writer <{writer_id}@vaultgate.invalid>"));
    assert_eq!(
        lab.blob(&undo.id, ATTENTION).unwrap(),
        original,
        "the undo commits the old bytes"
    );
    assert_eq!(
        lab.tree(&undo.id),
        lab.tree(&root),
        "the undo's tree is the one before the apply"
    );
    assert_change_trailers(
        &lab,
        &undo,
        Some(&h),
        "history_undo",
        Some(&format!("writer ({writer_id}, auto)")),
    );

    // Redo through the CLI: another new commit, authored by the CLI's user.
    lab.vg_ok(&["history", "redo", "--yes"]).await;
    let redo = assert_one_commit(&lab, &undo.id, &files(&[(ATTENTION, "M")]), "the redo");
    assert!(redo.subject().starts_with("redo "), "{}", redo.message);
    assert!(redo.author.starts_with("cli:tester <"), "{}", redo.author);
    assert_eq!(
        lab.tree(&redo.id),
        lab.tree(&applied.id),
        "the redo's tree is the apply's"
    );
    assert_change_trailers(&lab, &redo, Some(&h), "history_redo", None);

    // History is never rewritten: every earlier commit is still an ancestor of HEAD.
    for old in [&root, &applied.id, &undo.id] {
        assert!(
            lab.git_succeeds(&["merge-base", "--is-ancestor", old, "HEAD"]),
            "{old} is an ancestor"
        );
    }
    assert_eq!(lab.git(&["rev-list", "--count", "HEAD"]).trim(), "4");

    // An executed delete_permanent is one commit of the removals.
    let base = lab.head();
    let first = json!({"paths": [COOKING, "z/softmax.md"], "idempotencyKey": "purge-1"});
    let ch = ok(&c, "delete_permanent", first.clone()).await;
    assert_eq!(ch["status"], "challenge", "{ch}");
    assert_eq!(lab.head(), base, "the first call commits nothing");
    let mut second = first.clone();
    second["challengeId"] = ch["challenge"]["challengeId"].clone();
    second["planHash"] = ch["challenge"]["planHash"].clone();
    second["acknowledged"] = true.into();
    let done = ok(&c, "delete_permanent", second).await;
    assert_eq!(done["status"], "executed", "{done}");
    let purge = assert_one_commit(
        &lab,
        &base,
        &files(&[(COOKING, "D"), ("z/softmax.md", "D")]),
        "delete_permanent",
    );
    assert_eq!(purge.author, format!("writer <{writer_id}@vaultgate.invalid>"));
    assert_change_trailers(
        &lab,
        &purge,
        None,
        "delete_permanent",
        Some(&format!("writer ({writer_id}, auto)")),
    );
    let executed = lab
        .audit_lines()
        .into_iter()
        .filter(|l| l["tool"] == "delete_permanent" && l["outcome"] == "ok")
        .filter_map(|l| l["seq"].as_u64())
        .max()
        .unwrap();
    let audit = purge.trailer("Vaultgate-Audit").unwrap();
    assert_eq!(
        audit.split(' ').next().unwrap(),
        executed.to_string(),
        "the audit trailer names the executed call's line, not the challenge's"
    );
    // The user's git history keeps the deleted notes.
    assert!(lab.git_succeeds(&["merge-base", "--is-ancestor", &redo.id, "HEAD"]));
    assert_eq!(lab.blob(&base, COOKING), Some(lab.blob(&root, COOKING).unwrap()));
    lab.assert_no_machine_files();
    c.close().await;
}

// ================================================================================================
// 3. the queue
// ================================================================================================

fn doctor_queue_lines(out: &Output) -> Vec<String> {
    let all = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    all.lines()
        .filter(|l| l.contains("git queue"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn a_held_index_lock_queues_commits_that_the_next_change_makes_in_order_once() {
    let lab = Lab::with_git().await;
    let (_, writer) = lab.env.token("writer", "auto");
    let c = lab.stdio(&writer).await;
    let base = lab.head();
    let lock = lab.vault().join(".git/index.lock");
    std::fs::write(&lock, b"").unwrap();

    let p1 = propose_new(&c, "z/q1.md", "# Q1\n", "first while locked").await;
    let a1 = apply(&c, &p1).await;
    assert_eq!(a1["git"], "queued", "{a1}");
    let mut patched = lab.read(ATTENTION);
    patched.extend_from_slice(b"\nsecond while locked\n");
    let p2 = propose_patch(
        &c,
        ATTENTION,
        std::str::from_utf8(&patched).unwrap(),
        "second while locked",
    )
    .await;
    let a2 = apply(&c, &p2).await;
    assert_eq!(a2["git"], "queued", "{a2}");
    assert_eq!(lab.head(), base, "nothing committed while the lock is held");
    assert_eq!(
        lab.read("z/q1.md"),
        b"# Q1\n",
        "the notes are applied all the same"
    );

    let s = lab.git_status().await;
    assert_eq!(s["git"], "on", "{s}");
    assert_eq!(s["queued"], 2, "{s}");
    let doctor = lab.vg(&["doctor"]).await;
    let lines = doctor_queue_lines(&doctor);
    assert!(
        lines.iter().any(|l| l.contains('2')),
        "doctor shows the git queue and how many wait: {}",
        text(&doctor)
    );
    assert_eq!(lab.head(), base, "doctor commits nothing while the lock is held");

    // The lock goes away; the next change makes the queued commits first, in order, then its own.
    std::fs::remove_file(&lock).unwrap();
    let p3 = propose_new(&c, "z/q3.md", "# Q3\n", "third, unlocked").await;
    let a3 = apply(&c, &p3).await;
    assert_eq!(a3["git"], "committed", "{a3}");
    let new = lab.commits_after(&base);
    let subjects: Vec<&str> = new.iter().map(Commit::subject).collect();
    assert_eq!(
        subjects,
        ["new z/q1.md", "patch z/attention.md", "new z/q3.md"],
        "oldest first"
    );
    let mut parent = base.clone();
    for ((commit, p), (path, status)) in
        new.iter()
            .zip([&p1, &p2, &p3])
            .zip([("z/q1.md", "A"), (ATTENTION, "M"), ("z/q3.md", "A")])
    {
        assert_eq!(commit.parents, [parent.clone()], "{}", commit.subject());
        assert_eq!(commit.files, files(&[(path, status)]), "{}", commit.subject());
        assert_eq!(
            commit.trailer("Vaultgate-Proposal"),
            Some(id_of(p)),
            "{}",
            commit.message
        );
        assert_eq!(lab.commits_of_proposal(&id_of(p)), 1, "{} once", commit.subject());
        assert_committed_files(&lab, commit, commit.subject());
        parent = commit.id.clone();
    }
    assert_eq!(lab.blob(&new[1].id, ATTENTION).unwrap(), patched);
    assert_eq!(lab.git_status().await["queued"], 0);
    let doctor = lab.vg(&["doctor"]).await;
    for l in doctor_queue_lines(&doctor) {
        assert!(
            !l.starts_with("warn") && !l.starts_with("fail"),
            "the queue is empty: {l}"
        );
    }

    // Another start makes nothing more.
    c.close().await;
    lab.restart().await;
    assert_eq!(lab.commits_after(&base).len(), 3);
    lab.assert_no_machine_files();
}

#[tokio::test]
async fn a_merge_or_rebase_in_progress_queues_commits_that_the_next_start_makes() {
    let lab = Lab::with_git().await;
    let (_, writer) = lab.env.token("writer", "auto");
    let base = lab.head();
    let merge_head = lab.vault().join(".git/MERGE_HEAD");
    std::fs::write(&merge_head, format!("{base}\n")).unwrap();
    let c = lab.stdio(&writer).await;
    let p1 = propose_new(&c, "z/m1.md", "# M1\n", "during a merge").await;
    let a1 = apply(&c, &p1).await;
    assert_eq!(a1["git"], "queued", "a merge is in progress: {a1}");

    std::fs::remove_file(&merge_head).unwrap();
    let rebase = lab.vault().join(".git/rebase-merge");
    std::fs::create_dir_all(&rebase).unwrap();
    std::fs::write(rebase.join("head-name"), "refs/heads/main\n").unwrap();
    std::fs::write(rebase.join("onto"), format!("{base}\n")).unwrap();
    let p2 = propose_new(&c, "z/m2.md", "# M2\n", "during a rebase").await;
    let a2 = apply(&c, &p2).await;
    assert_eq!(a2["git"], "queued", "a rebase is in progress: {a2}");
    c.close().await;
    assert_eq!(lab.head(), base);
    assert_eq!(lab.git_status().await["queued"], 2);

    // The rebase ends; the next start (a client connecting) makes both, in order, once.
    std::fs::remove_dir_all(&rebase).unwrap();
    let c = lab.stdio(&writer).await;
    ok(&c, "get_vault_overview", json!({})).await;
    let new = lab.wait_for_commits(&base, 2, "the next start").await;
    let subjects: Vec<&str> = new.iter().map(Commit::subject).collect();
    assert_eq!(subjects, ["new z/m1.md", "new z/m2.md"]);
    for (commit, p) in new.iter().zip([&p1, &p2]) {
        assert_eq!(commit.trailer("Vaultgate-Proposal"), Some(id_of(p)));
        assert_committed_files(&lab, commit, commit.subject());
    }
    c.close().await;
    lab.restart().await;
    assert_eq!(lab.commits_after(&base).len(), 2, "no commit twice");
    assert_eq!(lab.git_status().await["queued"], 0);
}

// ================================================================================================
// 4. crashes around the git commit
// ================================================================================================

#[tokio::test]
async fn a_crash_before_the_git_commit_is_committed_once_at_the_next_start() {
    let lab = Lab::with_git().await;
    let (_, writer) = lab.env.token("writer", "auto");
    let c = lab.stdio(&writer).await;
    let mut patched = lab.read(ATTENTION);
    patched.extend_from_slice(b"\nApplied by a process that died.\n");
    let p = propose_patch(
        &c,
        ATTENTION,
        std::str::from_utf8(&patched).unwrap(),
        "crash test",
    )
    .await;
    c.close().await;
    let base = lab.head();

    // The CLI dies between the engine's commit and the git commit.
    let out = lab
        .vg_with(
            &["apply", "--only", &id_of(&p), "--yes"],
            &[("VAULTGATE_TEST_FAILPOINT", "after_commit")],
        )
        .await;
    assert_eq!(
        out.status.signal(),
        Some(SIGABRT),
        "the apply aborts: {}",
        text(&out)
    );
    assert_eq!(lab.read(ATTENTION), patched, "the note is applied");
    assert_eq!(lab.head(), base, "but not committed");

    // The next start commits it, once.
    lab.restart().await;
    let commit = assert_one_commit(&lab, &base, &files(&[(ATTENTION, "M")]), "after the restart");
    assert_eq!(
        commit.trailer("Vaultgate-Proposal"),
        Some(id_of(&p)),
        "{}",
        commit.message
    );
    assert_eq!(commit.subject(), "patch z/attention.md");
    assert_eq!(lab.blob(&commit.id, ATTENTION).unwrap(), patched);
    let c = lab.stdio(&writer).await;
    ok(&c, "get_vault_overview", json!({})).await;
    c.close().await;
    lab.restart().await;
    assert_eq!(
        lab.commits_after(&base).len(),
        1,
        "no second commit at later starts"
    );
    assert_eq!(lab.commits_of_proposal(&id_of(&p)), 1);
    assert_eq!(lab.git_status().await["queued"], 0);

    // The same when the server dies: the next server start commits it.
    let base = lab.head();
    let c = lab.stdio(&writer).await;
    let p = propose_new(&c, "z/crashed-server.md", "# Crashed\n", "server crash test").await;
    c.close().await;
    let crashing = lab
        .stdio_with(&writer, &[("VAULTGATE_TEST_FAILPOINT", "after_commit")])
        .await;
    let cut = bounded(
        "the aborted server",
        crashing.try_call(
            "apply_proposal",
            json!({"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": "crash-apply"}),
        ),
    )
    .await;
    assert!(cut.is_err(), "the server aborted: {cut:?}");
    crashing.close().await;
    assert_eq!(lab.read("z/crashed-server.md"), b"# Crashed\n");
    assert_eq!(lab.head(), base, "not committed yet");
    let c = lab.stdio(&writer).await;
    ok(&c, "get_vault_overview", json!({})).await;
    let new = lab.wait_for_commits(&base, 1, "the next server start").await;
    assert_eq!(new.len(), 1);
    assert_eq!(new[0].trailer("Vaultgate-Proposal"), Some(id_of(&p)));
    assert_eq!(new[0].files, files(&[("z/crashed-server.md", "A")]));
    c.close().await;
    lab.restart().await;
    assert_eq!(lab.commits_after(&base).len(), 1, "once");
}

#[tokio::test]
async fn a_crash_after_the_git_ref_moved_makes_no_second_commit() {
    let lab = Lab::with_git().await;
    let (_, writer) = lab.env.token("writer", "auto");
    let c = lab.stdio(&writer).await;
    let p = propose_new(&c, "z/ref-moved.md", "# Ref moved\n", "git_after_ref test").await;
    c.close().await;
    let base = lab.head();

    let out = lab
        .vg_with(
            &["apply", "--only", &id_of(&p), "--yes"],
            &[("VAULTGATE_TEST_FAILPOINT", "git_after_ref")],
        )
        .await;
    assert_eq!(
        out.status.signal(),
        Some(SIGABRT),
        "the apply aborts: {}",
        text(&out)
    );
    let new = lab.commits_after(&base);
    assert_eq!(new.len(), 1, "the ref had moved");
    let made = new[0].clone();
    assert_eq!(
        made.trailer("Vaultgate-Proposal"),
        Some(id_of(&p)),
        "{}",
        made.message
    );

    // Later starts find the commit made and make no other.
    lab.restart().await;
    let c = lab.stdio(&writer).await;
    ok(&c, "get_vault_overview", json!({})).await;
    c.close().await;
    lab.restart().await;
    assert_eq!(lab.head(), made.id, "no second commit");
    assert_eq!(lab.commits_of_proposal(&id_of(&p)), 1);
    assert_eq!(lab.git_status().await["queued"], 0);
    assert_committed_files(&lab, &made, "after the restarts");

    // The next change is one commit on top of it.
    let c = lab.stdio(&writer).await;
    let p2 = propose_new(&c, "z/after-ref.md", "# After\n", "the next change").await;
    let a2 = apply(&c, &p2).await;
    assert_eq!(a2["git"], "committed", "{a2}");
    let next = assert_one_commit(
        &lab,
        &made.id,
        &files(&[("z/after-ref.md", "A")]),
        "the next change",
    );
    assert_eq!(next.trailer("Vaultgate-Proposal"), Some(id_of(&p2)));
    assert_eq!(lab.commits_of_proposal(&id_of(&p)), 1);
    c.close().await;
}

// ================================================================================================
// 5. nothing of the user's runs
// ================================================================================================

const HOOKS: [&str; 12] = [
    "pre-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "reference-transaction",
    "post-index-change",
    "pre-auto-gc",
    "post-checkout",
    "post-merge",
    "post-rewrite",
    "pre-push",
    "fsmonitor-watchman",
];

/// Shell lines that record, in `marker`, that the script ran and which process ran it.
fn mark(marker: &Path) -> String {
    format!(
        "echo \"$0 $* <- $(ps -o args= -p $PPID 2>/dev/null)\" >> '{}'",
        marker.display()
    )
}

/// A hooks folder whose every hook marks `markers/<prefix>-<hook>`.
fn trap_hooks(dir: &Path, markers: &Path, prefix: &str) {
    for hook in HOOKS {
        let m = markers.join(format!("{prefix}-{hook}"));
        write_script(&dir.join(hook), &format!("{}\nexit 0", mark(&m)));
    }
}

/// Every marker left, with what it recorded (the script and the process that ran it).
fn markers_left(markers: &Path) -> Vec<String> {
    std::fs::read_dir(markers)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            format!(
                "{}: {}",
                e.file_name().to_string_lossy(),
                std::fs::read_to_string(e.path()).unwrap_or_default().trim()
            )
        })
        .collect()
}

/// A new, a patch (through the CLI), a move and an undo (through the CLI), all with `vars` in
/// vaultgate's environment; returns the commits they made.
async fn four_changes(lab: &Lab, writer: &str, vars: &[(&str, &str)]) -> (Vec<Commit>, String) {
    let base = lab.head();
    let c = lab.stdio_with(writer, vars).await;
    let p = propose_new(&c, "z/trap-new.md", "# Trap\n", "hooks test").await;
    assert_eq!(apply(&c, &p).await["git"], "committed");
    let mut patched = lab.read("z/softmax.md");
    patched.extend_from_slice(b"\npatched under traps\n");
    let p = propose_patch(
        &c,
        "z/softmax.md",
        std::str::from_utf8(&patched).unwrap(),
        "hooks test",
    )
    .await;
    lab.vg_ok_with(&["apply", "--only", &id_of(&p), "--yes"], vars)
        .await;
    let p = propose_move(&c, ATTENTION, "ml/attention.md", "hooks test").await;
    assert_eq!(apply(&c, &p).await["git"], "committed");
    c.close().await;
    lab.vg_ok_with(&["history", "undo", "--yes"], vars).await;
    (lab.commits_after(&base), base)
}

#[tokio::test]
async fn no_hook_filter_fsmonitor_or_signing_program_of_the_repository_runs() {
    let lab = Lab::with_git().await;
    let (writer_id, writer) = lab.env.token("writer", "auto");
    let markers = lab.env.tmp.path().join("markers");
    std::fs::create_dir_all(&markers).unwrap();
    let git_dir = lab.vault().join(".git");
    trap_hooks(&git_dir.join("hooks"), &markers, "repo");
    let trap = |name: &str, tail: &str| {
        let script = lab.env.tmp.path().join("traps").join(name);
        write_script(&script, &format!("{}\n{tail}", mark(&markers.join(name))));
        script.display().to_string()
    };
    let gpg = trap("gpg", "exit 1");
    let fsmonitor = trap("fsmonitor", "exit 1");
    let clean = trap("filter-clean", "cat");
    let smudge = trap("filter-smudge", "cat");
    let textconv = trap("textconv", "cat \"$1\"");
    let editor = trap("editor", "exit 1");
    for (k, v) in [
        ("commit.gpgsign", "true"),
        ("gpg.program", gpg.as_str()),
        ("gpg.format", "openpgp"),
        ("core.fsmonitor", fsmonitor.as_str()),
        ("filter.trap.clean", clean.as_str()),
        ("filter.trap.smudge", smudge.as_str()),
        ("filter.trap.required", "true"),
        ("diff.trap.textconv", textconv.as_str()),
        ("core.editor", editor.as_str()),
        ("gc.auto", "1"),
        ("gc.autoDetach", "false"),
    ] {
        lab.git(&["config", k, v]);
    }
    std::fs::write(git_dir.join("info/attributes"), "* filter=trap diff=trap\n").unwrap();

    let (commits, _) = four_changes(&lab, &writer, &[]).await;
    // First, before any git command of the test could itself trip a trap.
    assert_eq!(
        markers_left(&markers),
        Vec::<String>::new(),
        "nothing of the user's ran"
    );
    assert_eq!(commits.len(), 4, "every change is still committed");
    for c in &commits {
        let raw = lab.git(&["cat-file", "commit", &c.id]);
        assert!(!raw.contains("\ngpgsig"), "{}: not signed:\n{raw}", c.subject());
        assert_eq!(c.committer, COMMITTER, "{}", c.subject());
    }
    assert_eq!(
        commits[0].author,
        format!("writer <{writer_id}@vaultgate.invalid>")
    );
    assert!(
        commits[3].subject().starts_with("undo "),
        "{}",
        commits[3].message
    );
    // What git stored is the notes' bytes (no clean filter applied).
    std::fs::remove_file(git_dir.join("info/attributes")).unwrap();
    // The undo (of the move) is the last change: its files are as committed, and so is the new note.
    assert_committed_files(&lab, &commits[3], "the undo");
    assert_committed_files(&lab, &commits[0], "the new note");
    assert_eq!(markers_left(&markers), Vec::<String>::new());
}

#[tokio::test]
async fn no_global_config_or_git_environment_of_the_user_reaches_git() {
    let lab = Lab::with_git().await;
    let (writer_id, writer) = lab.env.token("writer", "auto");
    let markers = lab.env.tmp.path().join("markers");
    std::fs::create_dir_all(&markers).unwrap();
    let global_hooks = lab.env.tmp.path().join("global-hooks");
    trap_hooks(&global_hooks, &markers, "global");
    let env_hooks = lab.env.tmp.path().join("env-hooks");
    trap_hooks(&env_hooks, &markers, "env");
    let gpg = lab.env.tmp.path().join("traps/gpg");
    write_script(&gpg, &format!("{}\nexit 1", mark(&markers.join("gpg"))));
    let config = format!(
        "[core]\n\thooksPath = {}\n\tfsmonitor = {}\n[commit]\n\tgpgsign = true\n[gpg]\n\tprogram = {}\n[user]\n\tname = Global Intruder\n\temail = intruder@example.invalid\n",
        global_hooks.display(),
        gpg.display(),
        gpg.display()
    );
    std::fs::write(lab.user.join(".gitconfig"), &config).unwrap();
    std::fs::create_dir_all(lab.user.join(".config/git")).unwrap();
    std::fs::write(lab.user.join(".config/git/config"), &config).unwrap();

    // Another repository the environment points at: nothing may land there.
    let elsewhere = lab.env.tmp.path().join("elsewhere.git");
    lab.git(&["init", "-q", "--bare", elsewhere.to_str().unwrap()]);
    let env_hooks_s = env_hooks.display().to_string();
    let elsewhere_s = elsewhere.display().to_string();
    let index_s = lab.env.tmp.path().join("intruder-index").display().to_string();
    let params = format!("'core.hookspath'='{env_hooks_s}'");
    let vars: Vec<(&str, &str)> = vec![
        ("GIT_CONFIG_COUNT", "1"),
        ("GIT_CONFIG_KEY_0", "core.hooksPath"),
        ("GIT_CONFIG_VALUE_0", &env_hooks_s),
        ("GIT_CONFIG_PARAMETERS", &params),
        ("GIT_AUTHOR_NAME", "Env Intruder"),
        ("GIT_AUTHOR_EMAIL", "env-intruder@example.invalid"),
        ("GIT_COMMITTER_NAME", "Env Intruder"),
        ("GIT_COMMITTER_EMAIL", "env-intruder@example.invalid"),
        ("GIT_DIR", &elsewhere_s),
        ("GIT_INDEX_FILE", &index_s),
    ];

    let (commits, _) = four_changes(&lab, &writer, &vars).await;
    assert_eq!(
        markers_left(&markers),
        Vec::<String>::new(),
        "nothing of the user's ran"
    );
    assert_eq!(
        commits.len(),
        4,
        "every change is committed in the vault's repository"
    );
    for c in &commits {
        assert_eq!(c.committer, COMMITTER, "{}", c.subject());
        let raw = lab.git(&["cat-file", "commit", &c.id]);
        assert!(!raw.contains("\ngpgsig"), "{}: not signed", c.subject());
        assert!(!c.author.contains("Intruder"), "{}: {}", c.subject(), c.author);
    }
    assert_eq!(
        commits[0].author,
        format!("writer <{writer_id}@vaultgate.invalid>")
    );
    let there = lab.git_cmd_in(&elsewhere, &["for-each-ref"]).output().unwrap();
    assert!(
        there.stdout.is_empty(),
        "nothing landed in GIT_DIR: {}",
        text(&there)
    );
    assert!(!Path::new(&index_s).exists(), "GIT_INDEX_FILE was not used");
    assert_committed_files(&lab, &commits[3], "the undo");
    assert_committed_files(&lab, &commits[0], "the new note");
}

// ================================================================================================
// 6. get_note_history and read_note {hash}
// ================================================================================================

fn history_entries(v: &Value) -> Vec<Value> {
    v["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("entries[]: {v}"))
        .clone()
}

async fn note_history_case(git: bool) {
    let lab = if git { Lab::with_git().await } else { Lab::plain() };
    let (_, writer) = lab.env.token("writer", "auto");
    let (_, reader) = lab.env.token("reader", "read");
    let w = lab.stdio(&writer).await;
    let r = lab.stdio(&reader).await;
    let v1 = "# History\n\nfirst version\n";
    let v2 = "# History\n\nsecond version\r\nwith CRLF 注意\n";
    let v3 = "---\ntitle: History\n---\n# History\n\nthird version, no final newline";

    let p = propose_new(&w, "z/h.md", v1, "reason one").await;
    let a1 = apply(&w, &p).await;
    assert_eq!(a1["git"], if git { "committed" } else { "off" }, "{a1}");
    let a2 = apply(&w, &propose_patch(&w, "z/h.md", v2, "reason two").await).await;
    // An unrelated change in between is not in this note's history.
    let softmax = lab.read("z/softmax.md");
    let mut s2 = softmax.clone();
    s2.extend_from_slice(b"\nunrelated\n");
    let a_s = apply(
        &w,
        &propose_patch(&w, "z/softmax.md", std::str::from_utf8(&s2).unwrap(), "unrelated").await,
    )
    .await;
    let a3 = apply(&w, &propose_patch(&w, "z/h.md", v3, "reason three").await).await;
    let a4 = apply(&w, &propose_move(&w, "z/h.md", "ml/h.md", "reason four").await).await;
    let (h1, h2, h3) = (
        sha256_hex(v1.as_bytes()),
        sha256_hex(v2.as_bytes()),
        sha256_hex(v3.as_bytes()),
    );

    let full = ok(&r, "get_note_history", json!({"path": "ml/h.md"})).await;
    assert_eq!(full["truncated"], false, "{full}");
    assert!(full.get("nextCursor").is_none_or(Value::is_null), "{full}");
    let entries = history_entries(&full);
    let want: [(&Value, &str, &str, Option<&str>, &str); 4] = [
        (
            &a4["historyEntryId"],
            "move",
            "reason four",
            Some(h3.as_str()),
            h3.as_str(),
        ),
        (
            &a3["historyEntryId"],
            "patch",
            "reason three",
            Some(h2.as_str()),
            h3.as_str(),
        ),
        (
            &a2["historyEntryId"],
            "patch",
            "reason two",
            Some(h1.as_str()),
            h2.as_str(),
        ),
        (&a1["historyEntryId"], "new", "reason one", None, h1.as_str()),
    ];
    assert_eq!(entries.len(), 4, "newest first, following the move: {full}");
    let commits: BTreeMap<String, String> = if git {
        lab.vaultgate_commits()
            .into_iter()
            .filter_map(|c| c.trailer("Vaultgate-History-Entry").map(|h| (h, c.id)))
            .collect()
    } else {
        BTreeMap::new()
    };
    let mut last_ts: Option<OffsetDateTime> = None;
    for (e, (h, kind, reason, before, after)) in entries.iter().zip(want) {
        assert_eq!(&e["historyEntryId"], h, "{e}");
        assert_eq!(e["kind"], kind, "{e}");
        assert_eq!(e["reason"], reason, "{e}");
        assert!(!e["actor"].is_null(), "{e}");
        match before {
            Some(b) => assert_eq!(e["hashBefore"], b, "{e}"),
            None => assert!(e.get("hashBefore").is_none_or(Value::is_null), "{e}"),
        }
        assert_eq!(e["hashAfter"], after, "{e}");
        let ts = OffsetDateTime::parse(e["ts"].as_str().unwrap(), &Rfc3339).unwrap();
        assert_eq!(ts.offset(), time::UtcOffset::UTC, "{e}");
        if let Some(newer) = last_ts {
            assert!(ts <= newer, "newest first: {full}");
        }
        last_ts = Some(ts);
        if git {
            let id = h.as_str().unwrap();
            assert_eq!(e["commit"].as_str(), commits.get(id).map(String::as_str), "{e}");
        } else {
            assert!(
                e.get("commit").is_none_or(Value::is_null),
                "git off: no commit: {e}"
            );
        }
    }
    assert!(
        entries
            .iter()
            .all(|e| e["historyEntryId"] != a_s["historyEntryId"]),
        "the unrelated change is not listed"
    );

    // Paging: one entry a page, then 3 and 2; every entry once, in order.
    for sizes in [vec![1, 1, 1, 1, 1], vec![3, 2]] {
        let mut seen = Vec::new();
        let mut cursor: Option<Value> = None;
        for (page, limit) in sizes.iter().enumerate() {
            let mut args = json!({"path": "ml/h.md", "limit": limit});
            if let Some(c) = &cursor {
                args["cursor"] = c.clone();
            }
            let v = ok(&r, "get_note_history", args).await;
            let got = history_entries(&v);
            assert!(got.len() <= *limit, "{v}");
            seen.extend(got);
            cursor = v.get("nextCursor").filter(|c| !c.is_null()).cloned();
            assert_eq!(v["truncated"], cursor.is_some(), "page {page}: {v}");
            if seen.len() < 4 {
                assert!(cursor.is_some(), "page {page} of {sizes:?}: more follow: {v}");
            }
            if cursor.is_none() {
                break;
            }
        }
        assert!(cursor.is_none(), "{sizes:?}: the pages end");
        assert_eq!(seen, entries, "{sizes:?}: every entry once, in order");
    }

    // Every listed version comes back byte for byte, by its hash, at the note's new path.
    for (v, h) in [(v1, &h1), (v2, &h2), (v3, &h3)] {
        let got = ok(&r, "read_note", json!({"path": "ml/h.md", "hash": h})).await;
        assert_eq!(got["content"], v, "the version {h}");
        assert_eq!(&got["hash"], h, "{got}");
    }
    // The version before vaultgate's first change of a note is listed, and readable.
    let sh = history_entries(&ok(&r, "get_note_history", json!({"path": "z/softmax.md"})).await);
    assert_eq!(sh.len(), 1, "{sh:?}");
    assert_eq!(sh[0]["hashBefore"], sha256_hex(&softmax));
    let got = ok(
        &r,
        "read_note",
        json!({"path": "z/softmax.md", "hash": sha256_hex(&softmax)}),
    )
    .await;
    assert_eq!(got["content"].as_str().unwrap().as_bytes(), &softmax[..]);

    // Unknown, and a version of another note: NOT_FOUND.
    let unknown = "0".repeat(64);
    assert_eq!(
        code(&r, "read_note", json!({"path": "ml/h.md", "hash": unknown})).await,
        "NOT_FOUND"
    );
    assert_eq!(
        code(
            &r,
            "read_note",
            json!({"path": "ml/h.md", "hash": sha256_hex(&softmax)})
        )
        .await,
        "NOT_FOUND",
        "a version of another note"
    );
    if git {
        // Versions only the user's own commits hold are not a walk of the repository.
        let cooking = lab.read(COOKING);
        lab.write(COOKING, b"# Cooking\n\nthe user's rewrite\n");
        lab.user_commit_all("user: rewrite cooking");
        assert_eq!(
            code(
                &r,
                "read_note",
                json!({"path": COOKING, "hash": sha256_hex(&cooking)})
            )
            .await,
            "NOT_FOUND",
            "the version only the user's first commit holds"
        );
        let mine = b"# History\n\nthe user's own version\n";
        lab.write("ml/h.md", mine);
        lab.user_commit_all("user: my version of h");
        lab.write("ml/h.md", b"# History\n\nand another\n");
        lab.user_commit_all("user: another version of h");
        assert_eq!(
            code(
                &r,
                "read_note",
                json!({"path": "ml/h.md", "hash": sha256_hex(mine)})
            )
            .await,
            "NOT_FOUND",
            "a version of this very note that only a user commit holds"
        );
        let got = ok(&r, "read_note", json!({"path": "ml/h.md", "hash": h2})).await;
        assert_eq!(got["content"], v2, "vaultgate's versions stay readable");
    }
    w.close().await;
    r.close().await;
}

#[tokio::test]
async fn note_history_lists_newest_first_pages_follows_moves_and_reads_versions_with_git() {
    note_history_case(true).await;
}

#[tokio::test]
async fn note_history_and_versions_work_with_git_off() {
    note_history_case(false).await;
}

// ================================================================================================
// 7. vault git on / off / status, vault add --git
// ================================================================================================

#[tokio::test]
async fn vault_git_on_needs_a_work_tree_and_excludes_the_machine_folders() {
    let lab = Lab::plain();
    assert!(
        !lab.git_succeeds(&["rev-parse", "--is-inside-work-tree"]),
        "precondition: the temporary vault is not inside a work tree"
    );
    let out = lab.vg(&["vault", "git", "basic", "on"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("git init"), "names git init: {}", text(&out));
    assert_eq!(lab.git_status().await["git"], "off");

    lab.git(&["init", "-q", "-b", "main"]);
    let exclude = lab.vault().join(".git/info/exclude");
    let mut mine = std::fs::read_to_string(&exclude).unwrap_or_default();
    mine.push_str("*.tmp\n");
    std::fs::write(&exclude, &mine).unwrap();
    lab.vg_ok(&["vault", "git", "basic", "on"]).await;
    lab.vg_ok(&["vault", "git", "basic", "on"]).await;
    let now = std::fs::read_to_string(&exclude).unwrap();
    assert!(now.starts_with(&mine), "the user's lines stay: {now}");
    assert_eq!(
        now.lines()
            .filter(|l| l.trim() == ".vaultgate/" || l.trim() == "/.vaultgate/")
            .count(),
        1,
        ".vaultgate/ once: {now}"
    );
    assert!(now.lines().any(|l| l.contains("inbox")), "the inbox: {now}");
    for p in [
        ".vaultgate/index.sqlite",
        "inbox/README.md",
        "inbox/new/x.proposal.json",
    ] {
        assert!(
            lab.git_succeeds(&["check-ignore", "-q", "--no-index", p]),
            "{p} is ignored"
        );
    }
    let s = lab.git_status().await;
    assert_eq!(s["vault"], "basic", "{s}");
    assert_eq!(s["git"], "on", "{s}");
    assert_eq!(s["queued"], 0, "{s}");
    assert!(s["repository"].as_str().is_some_and(|r| !r.is_empty()), "{s}");

    // The user commits everything; the machine folders are not in it.
    lab.git(&["add", "-A"]);
    lab.git(&["commit", "-q", "-m", "user: all"]);
    let (_, writer) = lab.env.token("writer", "auto");
    let c = lab.stdio(&writer).await;
    let base = lab.head();
    let p = propose_new(&c, "z/on.md", "# On\n", "git on").await;
    assert_eq!(apply(&c, &p).await["git"], "committed");
    assert_one_commit(&lab, &base, &files(&[("z/on.md", "A")]), "an apply");
    for p in lab.git(&["ls-tree", "-r", "--name-only", "HEAD"]).lines() {
        assert!(!p.starts_with(".vaultgate/") && !p.starts_with("inbox/"), "{p}");
    }
    lab.assert_no_machine_files();
    c.close().await;

    // `vault add --git`: another vault, git on from the start.
    let second = lab.env.tmp.path().join("second");
    crate::util::copy_tree(&crate::util::fixture("basic"), &second);
    let git2 = |args: &[&str]| {
        let out = lab.git_cmd_in(&second, args).output().unwrap();
        assert!(
            out.status.success(),
            "git {args:?} in the second vault: {}",
            text(&out)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    git2(&["init", "-q", "-b", "main"]);
    lab.vg_ok(&[
        "vault",
        "add",
        second.to_str().unwrap(),
        "--id",
        "second",
        "--git",
    ])
    .await;
    git2(&["add", "-A"]);
    git2(&["commit", "-q", "-m", "user: the second vault"]);
    assert!(
        !git2(&["ls-tree", "-r", "--name-only", "HEAD"])
            .lines()
            .any(|p| p.starts_with(".vaultgate/") || p.starts_with("inbox/")),
        "vault add --git excludes the machine folders"
    );
    let s: Value =
        serde_json::from_str(&lab.vg_ok(&["vault", "git", "second", "status", "--json"]).await).unwrap();
    assert_eq!(s["git"], "on", "{s}");
    assert_eq!(s["vault"], "second", "{s}");
    let ex = std::fs::read_to_string(second.join(".git/info/exclude")).unwrap();
    assert!(ex.lines().any(|l| l.contains(".vaultgate/")), "{ex}");
    let c = lab.stdio(&writer).await;
    let p = ok(
        &c,
        "propose_new_note",
        json!({"vault": "second", "path": "z/second.md", "content": "# Second\n", "reason": "second vault"}),
    )
    .await;
    let a = ok(
        &c,
        "apply_proposal",
        json!({"vault": "second", "id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": "second-1"}),
    )
    .await;
    assert_eq!(a["git"], "committed", "{a}");
    assert_eq!(
        git2(&["log", "-1", "--format=%s|%cn <%ce>"]).trim(),
        format!("new z/second.md|{COMMITTER}"),
        "the first commit of the second vault's repository"
    );
    assert_eq!(
        lab.head(),
        lab.commits_after(&base)[0].id,
        "the first vault got nothing"
    );
    c.close().await;

    // `vault add --git` of a folder in no work tree is refused before anything is registered.
    let third = lab.env.tmp.path().join("third");
    crate::util::copy_tree(&crate::util::fixture("basic"), &third);
    let out = lab
        .vg(&["vault", "add", third.to_str().unwrap(), "--id", "third", "--git"])
        .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("git init"), "names git init: {}", text(&out));
    let list: Value = serde_json::from_str(&lab.vg_ok(&["vault", "list", "--json"]).await).unwrap();
    assert!(
        !list.as_array().unwrap().iter().any(|v| v["id"] == "third"),
        "nothing was registered: {list}"
    );
}

#[tokio::test]
async fn vault_git_off_refuses_while_commits_wait_unless_the_queue_is_dropped() {
    let lab = Lab::with_git().await;
    let (_, writer) = lab.env.token("writer", "auto");
    let c = lab.stdio(&writer).await;
    let base = lab.head();
    let lock = lab.vault().join(".git/index.lock");
    std::fs::write(&lock, b"").unwrap();
    let p = propose_new(&c, "z/waiting.md", "# Waiting\n", "queued").await;
    assert_eq!(apply(&c, &p).await["git"], "queued");

    let out = lab.vg(&["vault", "git", "basic", "off"]).await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "off refuses with a queue: {}",
        text(&out)
    );
    let s = lab.git_status().await;
    assert_eq!(
        (s["git"].clone(), s["queued"].clone()),
        (json!("on"), json!(1)),
        "{s}"
    );

    let audit_before = lab.audit_lines().len();
    lab.vg_ok(&["vault", "git", "basic", "off", "--drop-queue"]).await;
    assert!(
        lab.audit_lines().len() > audit_before,
        "dropping the queue is audited"
    );
    let s = lab.git_status().await;
    assert_eq!(
        (s["git"].clone(), s["queued"].clone()),
        (json!("off"), json!(0)),
        "{s}"
    );

    // With git off nothing is committed, and the dropped commit never comes back.
    std::fs::remove_file(&lock).unwrap();
    let p2 = propose_new(&c, "z/off.md", "# Off\n", "git off").await;
    assert_eq!(apply(&c, &p2).await["git"], "off");
    c.close().await;
    lab.restart().await;
    assert_eq!(lab.head(), base, "nothing committed with git off");

    lab.vg_ok(&["vault", "git", "basic", "on"]).await;
    assert_eq!(lab.git_status().await["queued"], 0);
    let c = lab.stdio(&writer).await;
    let p3 = propose_new(&c, "z/on-again.md", "# On again\n", "git on again").await;
    assert_eq!(apply(&c, &p3).await["git"], "committed");
    let c3 = assert_one_commit(&lab, &base, &files(&[("z/on-again.md", "A")]), "on again");
    assert_eq!(c3.trailer("Vaultgate-Proposal"), Some(id_of(&p3)));
    assert_eq!(
        lab.commits_of_proposal(&id_of(&p)),
        0,
        "the dropped commit is never made"
    );
    lab.assert_no_machine_files();
    c.close().await;
}

// ================================================================================================
// 8. hostile reasons
// ================================================================================================

/// Every character of `m` that is a control character other than newline and tab.
fn controls(m: &str) -> Vec<char> {
    m.chars()
        .filter(|c| c.is_control() && *c != '\n' && *c != '\t')
        .collect()
}

/// `Word: value`, as a trailer looks.
fn looks_like_trailer(line: &str) -> bool {
    line.split_once(": ")
        .is_some_and(|(k, _)| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
}

#[tokio::test]
async fn a_hostile_reason_cannot_add_or_forge_a_trailer() {
    let lab = Lab::with_git().await;
    let (writer_id, writer) = lab.env.token("writer", "auto");
    let applier = format!("writer ({writer_id}, auto)");
    let c = lab.stdio(&writer).await;
    let reasons = [
        // Ends with a paragraph of trailers.
        "Looks harmless.\n\nVaultgate-Audit: 1 forged\nSigned-off-by: x",
        // Nothing but trailers.
        "Signed-off-by: x\nVaultgate-Proposal: 00000000-0000-7000-8000-000000000000\nVaultgate-Credential: admin (forged, full)",
        // Control characters, a C1 line break, git's own trailer forms, a continuation line.
        "colours \u{1b}[31mred\u{1b}[0m, a bell \u{7}, a return\rVaultgate-Audit: 2 forged\n\u{85}Vaultgate-History-Entry: forged\nCo-authored-by:x <x@example.invalid>\n continued\n(cherry picked from commit 0123456789abcdef0123456789abcdef01234567)\nVaultgate-Audit: 1 forged",
        // Trailing blank lines and a final trailer line.
        "Fine.\n\n\nSigned-off-by: x\n\n",
    ];
    for (i, reason) in reasons.iter().enumerate() {
        let base = lab.head();
        let path = format!("z/hostile-{i}.md");
        let p = propose_new(&c, &path, "# Hostile\n", reason).await;
        let a = apply(&c, &p).await;
        assert_eq!(a["git"], "committed", "{a}");
        let commit = assert_one_commit(&lab, &base, &files(&[(&path, "A")]), &format!("reason {i}"));
        let m = &commit.message;
        let trailers = apply_trailers(&lab, &p, &a, &applier);
        assert_message(&lab, &commit, &format!("new {path}"), None, &trailers);
        assert_eq!(
            controls(m),
            Vec::<char>::new(),
            "reason {i}: control characters are escaped:\n{m:?}"
        );
        let lines: Vec<&str> = m.trim_end_matches('\n').split('\n').collect();
        for l in &lines[1..lines.len() - 5] {
            assert!(
                !l.starts_with("Vaultgate-") && !looks_like_trailer(l),
                "reason {i}: a trailer-like line is neutralised: {l:?}\n{m}"
            );
        }
        if i < 2 {
            for forged in reason.lines().filter(|l| l.contains(": ")) {
                assert!(
                    lines.contains(&format!("> {forged}").as_str()),
                    "reason {i}: {forged:?} is kept, neutralised with '> ':\n{m}"
                );
            }
        }
    }
    c.close().await;
}

#[tokio::test]
async fn a_reason_with_a_patch_divider_cannot_hide_or_forge_the_trailers() {
    // `git interpret-trailers` reads trailers only before a line starting with `---`: a reason
    // holding one would otherwise decide which trailers git sees.
    let lab = Lab::with_git().await;
    let (writer_id, writer) = lab.env.token("writer", "auto");
    let c = lab.stdio(&writer).await;
    let reason = "Innocent.\n\nVaultgate-Audit: 1 forged\n---\nthe rest";
    let base = lab.head();
    let p = propose_new(&c, "z/divider.md", "# Divider\n", reason).await;
    let a = apply(&c, &p).await;
    let commit = assert_one_commit(&lab, &base, &files(&[("z/divider.md", "A")]), "divider");
    let trailers = apply_trailers(&lab, &p, &a, &format!("writer ({writer_id}, auto)"));
    assert_message(&lab, &commit, "new z/divider.md", None, &trailers);
    c.close().await;
}

// ---- found in review: deleted versions, a user's commit after a crash, wandering history ---------

/// Two calls of `delete_permanent` for `paths`.
async fn delete_permanently(c: &Client, paths: &[&str], key: &str) -> Value {
    let first = json!({"paths": paths, "idempotencyKey": key});
    let ch = ok(c, "delete_permanent", first.clone()).await;
    let mut second = first;
    second["challengeId"] = ch["challenge"]["challengeId"].clone();
    second["planHash"] = ch["challenge"]["planHash"].clone();
    second["acknowledged"] = true.into();
    ok(c, "delete_permanent", second).await
}

/// The history objects vaultgate keeps, by hash.
fn objects(lab: &Lab) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let root = lab.vault().join(".vaultgate/objects");
    for d in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        for f in std::fs::read_dir(d.path()).into_iter().flatten().flatten() {
            out.insert(f.file_name().to_string_lossy().into_owned());
        }
    }
    out
}

async fn permanently_deleted_versions_cannot_be_read_back(git: bool) {
    let lab = if git { Lab::with_git().await } else { Lab::plain() };
    let (_, writer) = lab.env.token("writer", "full");
    let c = lab.stdio(&writer).await;
    let secret = "# Secret\n\nSECRET v2\n";
    apply(
        &c,
        &propose_new(&c, "z/secret.md", "# Secret\n\nv1\n", "one").await,
    )
    .await;
    apply(&c, &propose_patch(&c, "z/secret.md", secret, "two").await).await;
    // Another note keeps its own versions: a link rewrite shares the move's change.
    let moved = propose_move(&c, "z/softmax.md", "z/softmax-2.md", "moved").await;
    apply(&c, &moved).await;
    let before = ok(&c, "get_note_history", json!({"path": "z/secret.md"})).await;
    let versions: BTreeSet<String> = before["entries"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| [e["hashBefore"].as_str(), e["hashAfter"].as_str()])
        .flatten()
        .map(str::to_owned)
        .collect();
    assert_eq!(versions.len(), 2, "{before}");
    for h in &versions {
        ok(&c, "read_note", json!({"path": "z/secret.md", "hash": h})).await;
    }
    let other = ok(&c, "get_note_history", json!({"path": "z/softmax-2.md"})).await;
    let other_before = other["entries"][0]["hashBefore"].as_str().unwrap().to_owned();

    let done = delete_permanently(&c, &["z/secret.md"], "gone-1").await;
    assert_eq!(done["status"], "executed", "{done}");
    for h in &versions {
        assert_eq!(
            code(&c, "read_note", json!({"path": "z/secret.md", "hash": h})).await,
            "NOT_FOUND",
            "a permanently deleted version ({h}) is not readable"
        );
        assert!(!objects(&lab).contains(h), "the object {h} is removed");
    }
    let kept = ok(
        &c,
        "read_note",
        json!({"path": "z/softmax-2.md", "hash": other_before}),
    )
    .await;
    assert_eq!(
        kept["hash"], other_before,
        "another note's version stays readable"
    );
    c.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn permanently_deleted_versions_cannot_be_read_back_with_git_off() {
    permanently_deleted_versions_cannot_be_read_back(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn permanently_deleted_versions_cannot_be_read_back_with_git_on() {
    permanently_deleted_versions_cannot_be_read_back(true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_after_the_ref_moved_then_a_user_commit_makes_no_second_commit() {
    let lab = Lab::with_git().await;
    let (_, writer) = lab.env.token("writer", "auto");
    let c = lab.stdio(&writer).await;
    let p = propose_patch(
        &c,
        ATTENTION,
        "# Attention\n\nvaultgate's text\n",
        "crash then user",
    )
    .await;
    c.close().await;
    let base = lab.head();
    let out = lab
        .vg_with(
            &["apply", "--only", &id_of(&p), "--yes"],
            &[("VAULTGATE_TEST_FAILPOINT", "git_after_ref")],
        )
        .await;
    assert_eq!(out.status.signal(), Some(SIGABRT), "{}", text(&out));
    let ours = lab.head();
    assert_ne!(ours, base);
    // The user edits the same note and commits on top before vaultgate starts again.
    lab.write(ATTENTION, b"# Attention\n\nthe user's text\n");
    lab.git(&["add", ATTENTION]);
    lab.git(&["commit", "-q", "-m", "user: my text"]);
    let users = lab.head();
    lab.restart().await;
    assert_eq!(lab.head(), users, "no commit was made over the user's");
    assert_eq!(lab.commits_of_proposal(&id_of(&p)), 1);
    assert_eq!(lab.read(ATTENTION), b"# Attention\n\nthe user's text\n");
    assert!(
        !lab.porcelain().iter().any(|l| l.contains(ATTENTION)),
        "{:?}",
        lab.porcelain()
    );
    assert_eq!(lab.git_status().await["queued"], 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_note_made_outside_vaultgate_where_another_moved_away_has_only_its_own_history() {
    let lab = Lab::plain();
    let (_, writer) = lab.env.token("writer", "auto");
    let c = lab.stdio(&writer).await;
    let secret = "# Attention\n\nthe old note's secret\n";
    apply(&c, &propose_patch(&c, ATTENTION, secret, "old").await).await;
    apply(&c, &propose_move(&c, ATTENTION, "z/elsewhere.md", "away").await).await;
    // The user makes a new note at the old name, and vaultgate patches it.
    lab.write(ATTENTION, b"# Attention\n\nby hand\n");
    ok(&c, "read_note", json!({"path": ATTENTION})).await;
    apply(
        &c,
        &propose_patch(&c, ATTENTION, "# Attention\n\nby hand, patched\n", "new").await,
    )
    .await;
    let h = ok(&c, "get_note_history", json!({"path": ATTENTION})).await;
    let entries = h["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "only the new note's change: {h}");
    assert_eq!(entries[0]["reason"], "new");
    assert_eq!(
        code(
            &c,
            "read_note",
            json!({"path": ATTENTION, "hash": sha256_hex(secret.as_bytes())})
        )
        .await,
        "NOT_FOUND",
        "the note that moved away is not read through the new one's name"
    );
    c.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replay_says_what_the_first_answer_said_and_a_detached_head_queues() {
    let lab = Lab::with_git().await;
    let (_, writer) = lab.env.token("writer", "auto");
    let c = lab.stdio(&writer).await;
    let p = propose_new(&c, "z/replay.md", "# Replay\n", "replay").await;
    let args = json!({"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": "replay-1"});
    let first = ok(&c, "apply_proposal", args.clone()).await;
    let again = ok(&c, "apply_proposal", args).await;
    assert_eq!(first["git"], "committed", "{first}");
    assert_eq!(again["git"], "committed", "{again}");
    assert_eq!(again["replayed"], true, "{again}");

    // On a detached HEAD the commit waits for the branch.
    let head = lab.head();
    lab.git(&["checkout", "-q", "--detach"]);
    let a = apply(
        &c,
        &propose_new(&c, "z/detached.md", "# Detached\n", "detached").await,
    )
    .await;
    assert_eq!(a["git"], "queued", "{a}");
    assert_eq!(lab.head(), head, "nothing was committed onto the detached HEAD");
    lab.git(&["checkout", "-q", "main"]);
    apply(&c, &propose_new(&c, "z/back.md", "# Back\n", "back").await).await;
    let made = lab.commits_after(&head);
    assert_eq!(made.len(), 2, "both, on the branch");
    assert_eq!(made[0].subject(), "new z/detached.md", "in order");
    c.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_removed_vault_leaves_no_git_setting_or_history_for_the_next_one_of_its_id() {
    let lab = Lab::with_git().await;
    let (_, writer) = lab.env.token("writer", "auto");
    let c = lab.stdio(&writer).await;
    apply(
        &c,
        &propose_patch(&c, ATTENTION, "# Attention\n\nonce\n", "once").await,
    )
    .await;
    c.close().await;
    lab.vg_ok(&["vault", "remove", "basic"]).await;
    let other = lab.env.tmp.path().join("other");
    crate::util::copy_tree(&crate::util::fixture("basic"), &other);
    lab.vg_ok(&["vault", "add", other.to_str().unwrap(), "--id", "basic"])
        .await;
    assert_eq!(lab.git_status().await["git"], "off");
    let c = lab.stdio(&writer).await;
    let h = ok(&c, "get_note_history", json!({"path": ATTENTION})).await;
    assert_eq!(h["entries"], json!([]), "{h}");
    c.close().await;
}

/// SECURITY(T-GIT5): a partial clone whose promisor remote is an `ext::sh -c …` command the
/// repository itself allows, with a blob missing so that git wants to fetch it: `vault git on`,
/// an apply of that note and a read of its earlier version never run the command. A plain `git`
/// of the user's, as the control, runs it.
#[tokio::test]
async fn a_hostile_partial_clone_never_runs_its_promisor() {
    let lab = Lab::with_git().await;
    let (_, writer) = lab.env.token("writer", "auto");
    let marker = lab.env.tmp.path().join("promisor-ran");
    let blob = lab.git(&["rev-parse", "HEAD:z/softmax.md"]).trim().to_owned();
    lab.vg_ok(&["vault", "git", "basic", "off"]).await;
    for (k, v) in [
        ("core.repositoryformatversion", "1".to_owned()),
        ("extensions.partialClone", "origin".to_owned()),
        (
            "remote.origin.url",
            format!("ext::sh -c touch% {}", marker.display()),
        ),
        ("remote.origin.promisor", "true".to_owned()),
        ("remote.origin.partialclonefilter", "blob:none".to_owned()),
        ("protocol.ext.allow", "always".to_owned()),
        ("protocol.allow", "always".to_owned()),
    ] {
        lab.git(&["config", k, &v]);
    }
    let object = lab.vault().join(".git/objects").join(&blob[..2]).join(&blob[2..]);
    std::fs::remove_file(&object).unwrap_or_else(|e| panic!("{}: {e}", object.display()));

    lab.vg_ok(&["vault", "git", "basic", "on"]).await;
    let c = lab.stdio_with(&writer, &[]).await;
    let mut patched = lab.read("z/softmax.md");
    patched.extend_from_slice(b"\npatched in a hostile partial clone\n");
    let p = propose_patch(
        &c,
        "z/softmax.md",
        std::str::from_utf8(&patched).unwrap(),
        "promisor test",
    )
    .await;
    let _ = apply(&c, &p).await;
    let history = c
        .call("get_note_history", json!({"path": "z/softmax.md"}))
        .await
        .ok();
    if let Some(before) = history["entries"][0]["hashBefore"].as_str() {
        let _ = c
            .call("read_note", json!({"path": "z/softmax.md", "hash": before}))
            .await;
    }
    c.close().await;
    assert!(
        !marker.exists(),
        "vaultgate ran the repository's promisor command"
    );

    // Control: the user's own git, without vaultgate's settings, fetches the blob lazily and so
    // runs the command — the trap was live.
    let out = lab
        .git_cmd_in(lab.vault(), &["cat-file", "-p", &blob])
        .output()
        .unwrap();
    let _ = out;
    assert!(marker.exists(), "the control did not run the promisor command");
}

/// SECURITY(T-LIMIT3): `read_note {hash}` runs git off the async workers. With a `git` that takes
/// seconds, eight reads of an earlier version at once (more than the server has async workers)
/// do not hold up a plain read: it answers first. (When they ran on the workers, it waited.)
#[tokio::test]
async fn slow_version_reads_never_stall_a_plain_read() {
    let lab = Lab::with_git().await;
    let (_, writer) = lab.env.token("writer", "auto");
    let c = lab.stdio_with(&writer, &[]).await;
    let before = hash_of(&c, "z/softmax.md").await.as_str().unwrap().to_owned();
    let mut patched = lab.read("z/softmax.md");
    patched.extend_from_slice(b"\npatched for the slow read\n");
    let p = propose_patch(&c, "z/softmax.md", std::str::from_utf8(&patched).unwrap(), "slow").await;
    assert_eq!(apply(&c, &p).await["git"], "committed");
    c.close().await;
    // Only git holds the earlier version now.
    let object = lab
        .vault()
        .join(".vaultgate/objects")
        .join(&before[..2])
        .join(&before);
    std::fs::remove_file(&object).unwrap_or_else(|e| panic!("{}: {e}", object.display()));

    // A git that answers after 4 s (serve finds git on its PATH and runs it with no environment).
    let real = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v git"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_owned();
    let slow_dir = lab.env.tmp.path().join("slow-git");
    write_script(
        &slow_dir.join("git"),
        &format!("/bin/sleep 4\nexec '{real}' \"$@\""),
    );
    let path = format!(
        "{}:{}",
        slow_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let srv = crate::http::Server::start_with_vars(&lab.env, &[("PATH", &path)]);
    let (_, reader) = lab.env.token("reader", "read");
    let client = std::sync::Arc::new(srv.client(&reader).await);
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (client, order, before) = (client.clone(), order.clone(), before.clone());
        tasks.push(tokio::spawn(async move {
            let r = ok(
                &client,
                "read_note",
                json!({"path": "z/softmax.md", "hash": before}),
            )
            .await;
            assert_eq!(r["hash"], before.as_str());
            order.lock().unwrap().push(format!("version {i}"));
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = ok(&client, "read_note", json!({"path": "z/attention.md"})).await;
    assert!(r["content"].as_str().is_some());
    order.lock().unwrap().push("plain".to_owned());
    for t in tasks {
        t.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(order[0], "plain", "a plain read waited for git: {order:?}");
}
