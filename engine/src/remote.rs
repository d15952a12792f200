//! Team vaults (docs/contract.md#team-mode): notes that live in a git remote, each gateway keeping
//! its own clone under `<home>/vaults/<id>/` as a cache it reads and indexes. This module checks a
//! remote's URL and branch, clones, fetches forward and pushes an apply's commit by
//! compare-and-swap on the branch; it never lets git prompt.
//!
//! It must never run a transport other than `file`, `https` and `ssh`, take a URL or branch that
//! git could read as an option, or move a clone's branch backwards (a remote whose new head does
//! not descend from the clone's is left alone and reported).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::GatewayError;
use crate::git::{GitError, Program};

/// A vault of the team, as the team's database registers it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TeamVault {
    pub id: String,
    pub name: String,
    pub remote: String,
    pub branch: String,
    /// Folders whose notes proposals may write (`.`: the whole vault).
    pub notes: Vec<String>,
    pub standards: Vec<String>,
}

/// What git may see of the operator's environment when it talks to a remote: their own global
/// configuration (credential helpers, `core.sshCommand`), their SSH agent and their `PATH`.
static ENVIRONMENT: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();

/// The variables kept for remote git commands, picked by the edge (the engine reads no
/// environment) from the operator's.
pub const KEPT: &[&str] = &["HOME", "XDG_CONFIG_HOME", "SSH_AUTH_SOCK", "PATH"];

/// Sets, once per process, the variables of [`KEPT`] that remote git commands run with.
pub fn use_environment(vars: Vec<(String, String)>) {
    let kept = vars
        .into_iter()
        .filter(|(k, _)| KEPT.contains(&k.as_str()))
        .collect();
    let _ = ENVIRONMENT.set(kept);
}

/// SECURITY(T-TEAM7): the remotes a team vault may have: `https://`, `ssh://`, `file://`, an
/// absolute path to a bare repository, or scp-like `user@host:path`. Nothing git could read as
/// an option, no transport helper (`ext::`, `fd::`, `<helper>::`), no control characters.
pub fn check_remote_url(url: &str) -> Result<(), GatewayError> {
    let refuse = |why: &str| {
        Err(GatewayError::InvalidArgument(format!(
            "remote: {why}; use https://…, ssh://…, user@host:path, file://… or the absolute path of a bare repository"
        )))
    };
    if url.is_empty() || url.len() > 2048 {
        return refuse("1 to 2048 bytes");
    }
    if url.starts_with('-') || url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return refuse("no leading '-', spaces or control characters");
    }
    if url.contains("::") {
        return refuse("no transport helper (`name::address`)");
    }
    let lower = url.to_ascii_lowercase();
    if lower.starts_with("https://") || lower.starts_with("ssh://") || lower.starts_with("file:///") {
        return Ok(());
    }
    if url.starts_with('/') {
        return Ok(());
    }
    if lower.contains("://") {
        return refuse("only the https, ssh and file transports");
    }
    // scp-like: `[user@]host:path`, the host before the first ':' with no '/' in it.
    match url.split_once(':') {
        Some((host, path)) if !host.is_empty() && !host.contains('/') && !path.is_empty() => Ok(()),
        _ => refuse("not a URL git reads as a remote"),
    }
}

/// A branch name as `git check-ref-format --branch` takes it, and never an option.
pub fn check_branch(program: &Program, branch: &str) -> Result<(), GatewayError> {
    let refuse = || {
        Err(GatewayError::InvalidArgument(format!(
            "branch '{branch}' is not a branch name git accepts"
        )))
    };
    if branch.is_empty() || branch.len() > 255 || branch.starts_with('-') {
        return refuse();
    }
    let mut cmd = local(program, Path::new("/"));
    cmd.args(["check-ref-format", "--branch", branch]);
    match crate::git::run(cmd, "check-ref-format", None) {
        Ok(_) => Ok(()),
        Err(GitError::Failed { .. }) => refuse(),
        Err(e) => Err(git_error(e)),
    }
}

/// A git command that touches no remote.
pub(crate) fn local(program: &Program, dir: &Path) -> Command {
    let mut cmd = Command::new(program.path());
    cmd.env_clear()
        .env("LC_ALL", "C")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ALLOW_PROTOCOL", "")
        .args(["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"])
        .arg("-C")
        .arg(dir);
    cmd
}

/// A git command that talks to a remote: the operator's global configuration and agent, the
/// three transports, and no prompt (a missing credential fails instead).
fn networked(program: &Program, dir: &Path) -> Command {
    let mut cmd = Command::new(program.path());
    cmd.env_clear();
    for (k, v) in ENVIRONMENT.get().map(Vec::as_slice).unwrap_or_default() {
        cmd.env(k, v);
    }
    cmd.env("LC_ALL", "C")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ASKPASS", "")
        .env("SSH_ASKPASS", "/bin/false")
        .env("SSH_ASKPASS_REQUIRE", "force")
        .env("GIT_NO_LAZY_FETCH", "1")
        // SECURITY(T-TEAM7): every other transport (ext, fd, git, http without TLS…) refused.
        .env("GIT_ALLOW_PROTOCOL", "file:https:ssh")
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
            "-c",
            "gc.auto=0",
            "-c",
            "maintenance.auto=false",
        ])
        .arg("-C")
        .arg(dir);
    cmd
}

fn git_error(e: GitError) -> GatewayError {
    match e {
        // Another git at work in the clone: over in a moment (retryable).
        GitError::Busy(why) => GatewayError::VaultBusy(format!(
            "the team vault's clone is busy ({why}); retry with the same idempotencyKey"
        )),
        e => GatewayError::Config(format!("the team vault's remote: {e}")),
    }
}

/// Whether `branch` exists on `remote` (before a vault is registered).
pub fn branch_exists(program: &Program, remote: &str, branch: &str) -> Result<bool, GatewayError> {
    check_remote_url(remote)?;
    check_branch(program, branch)?;
    let mut cmd = networked(program, Path::new("/"));
    cmd.args(["ls-remote", "--heads", "--", remote])
        .arg(format!("refs/heads/{branch}"));
    let out = crate::git::run(cmd, "ls-remote", None).map_err(git_error)?;
    Ok(!out.is_empty())
}

/// The commit the remote's branch is at now (`None`: the branch is gone).
pub fn remote_head(program: &Program, vault: &TeamVault) -> Result<Option<String>, GatewayError> {
    check_remote_url(&vault.remote)?;
    check_branch(program, &vault.branch)?;
    let mut cmd = networked(program, Path::new("/"));
    cmd.args(["ls-remote", "--heads", "--", &vault.remote])
        .arg(format!("refs/heads/{}", vault.branch));
    let out = crate::git::run(cmd, "ls-remote", None).map_err(git_error)?;
    Ok(String::from_utf8_lossy(&out)
        .split_whitespace()
        .next()
        .map(str::to_owned))
}

/// The commit a clone at `dir` is at (`None`: no clone there).
pub fn clone_head(program: &Program, dir: &Path) -> Option<String> {
    dir.join(".git")
        .is_dir()
        .then(|| head(program, dir).ok())
        .flatten()
}

/// How a clone stands against its remote's head `remote`, from what the clone holds (nothing
/// is fetched).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    UpToDate,
    /// The remote moved on; the next fetch brings it.
    Behind,
    /// The remote's head is known here and does not descend from the clone's.
    Rewritten,
}

/// [`Standing`] of the clone at `dir` against `remote` (a commit id).
pub fn standing(program: &Program, dir: &Path, remote: &str) -> Result<Standing, GatewayError> {
    let ours = head(program, dir)?;
    if ours == remote {
        return Ok(Standing::UpToDate);
    }
    let mut known = local(program, dir);
    known.args([
        "cat-file",
        "-e",
        "--end-of-options",
        &format!("{remote}^{{commit}}"),
    ]);
    if crate::git::run(known, "cat-file", None).is_err() {
        return Ok(Standing::Behind);
    }
    let mut ancestor = local(program, dir);
    ancestor.args(["merge-base", "--is-ancestor", &ours, remote]);
    Ok(match crate::git::run(ancestor, "merge-base", None) {
        Ok(_) => Standing::Behind,
        Err(_) => Standing::Rewritten,
    })
}

/// What one [`sync`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Synced {
    /// The clone was made, at this commit.
    Cloned(String),
    /// The clone moved forward to this commit (or was there already).
    At(String),
    /// The remote's head does not descend from the clone's: the clone was left as it was.
    Diverged { clone: String, remote: String },
}

/// Brings the clone of `vault` at `dir` to the remote's branch head: clones it when absent,
/// else fetches and moves forward, restoring the work tree to that commit (the clone is a cache:
/// an edit made in it directly is discarded).
pub fn sync(program: &Program, dir: &Path, vault: &TeamVault) -> Result<Synced, GatewayError> {
    check_remote_url(&vault.remote)?;
    check_branch(program, &vault.branch)?;
    // git runs in the clone's parent (`-C`): a relative home (`--home homes/ana`) would name the
    // clone twice over.
    let dir = &std::path::absolute(dir)?;
    // One git at a time in a clone of this process (the fetch round and an apply's own sync).
    let _held = hold(dir);
    if !dir.join(".git").is_dir() {
        let parent = dir
            .parent()
            .ok_or_else(|| GatewayError::Internal("a clone folder has no parent".into()))?;
        std::fs::create_dir_all(parent)?;
        // Cloned beside the final folder first, so a failed clone leaves nothing half made.
        let partial: PathBuf = parent.join(format!(".{}.cloning", vault.id));
        if partial.exists() {
            std::fs::remove_dir_all(&partial)?;
        }
        let mut cmd = networked(program, parent);
        cmd.args([
            "clone",
            "--quiet",
            "--no-checkout",
            "--no-tags",
            "--single-branch",
            "--branch",
            &vault.branch,
            "--",
            &vault.remote,
        ])
        .arg(&partial);
        crate::git::run(cmd, "clone", None).map_err(git_error)?;
        // SECURITY(T-TEAM7): vaultgate's own folder (the index) is never written by a checkout,
        // whatever the remote tracks there; and it stays out of git's view.
        std::fs::write(partial.join(".git/info/sparse-checkout"), "/*\n!/.vaultgate/\n")?;
        std::fs::write(partial.join(".git/info/exclude"), ".vaultgate/\n")?;
        for (key, value) in [
            ("core.sparseCheckout", "true"),
            ("core.sparseCheckoutCone", "false"),
        ] {
            let mut set = local(program, &partial);
            set.args(["config", key, value]);
            crate::git::run(set, "config", None).map_err(git_error)?;
        }
        let mut fill = local(program, &partial);
        fill.args(["reset", "--quiet", "--hard", "HEAD"]);
        crate::git::run(fill, "reset", None).map_err(git_error)?;
        std::fs::rename(&partial, dir)?;
        return Ok(Synced::Cloned(head(program, dir)?));
    }
    let mut fetch = networked(program, dir);
    fetch.args([
        "fetch",
        "--quiet",
        "--no-tags",
        "--",
        "origin",
        &format!("+refs/heads/{0}:refs/remotes/origin/{0}", vault.branch),
    ]);
    crate::git::run(fetch, "fetch", None).map_err(git_error)?;
    let ours = head(program, dir)?;
    let theirs = rev(program, dir, &format!("refs/remotes/origin/{}", vault.branch))?;
    if ours == theirs {
        return Ok(Synced::At(ours));
    }
    let mut ancestor = local(program, dir);
    ancestor.args(["merge-base", "--is-ancestor", &ours, &theirs]);
    if crate::git::run(ancestor, "merge-base", None).is_err() {
        return Ok(Synced::Diverged {
            clone: ours,
            remote: theirs,
        });
    }
    checkout(program, dir, &theirs)?;
    Ok(Synced::At(theirs))
}

/// The clone at `dir` held by this caller: this process's lock, then an exclusive `flock` on a
/// file beside the clone, so processes sharing a home take turns too. Released when dropped
/// (the `flock` first; a killed process's with its death).
pub(crate) struct CloneHeld {
    _file: Option<std::fs::File>,
    _guard: std::sync::MutexGuard<'static, ()>,
}

/// Git's lock files in a clone that a git killed mid-way (a gateway killed during a reset or a
/// fetch) leaves behind; under [`hold`] none can be live, and while one stays every later git
/// that needs it fails ("another git process seems to be running").
const GIT_LOCKS: &[&str] = &[
    "index.lock",
    "HEAD.lock",
    "ORIG_HEAD.lock",
    "FETCH_HEAD.lock",
    "packed-refs.lock",
    "config.lock",
    "shallow.lock",
];

/// Moves the clone at `dir` (held) and its files to `commit`, while no note of it is read
/// ([`crate::checkout::Checkout`]).
pub(crate) fn checkout(program: &Program, dir: &Path, commit: &str) -> Result<(), GatewayError> {
    let _reads_wait = match crate::checkout::Checkout::of(dir) {
        Some(c) => c.writing(crate::checkout::CHECKOUT_WAIT).map_err(|_| {
            GatewayError::VaultBusy(format!(
                "a read of the clone of vault '{}' has not finished for {} s (a paused or stuck \
                 process of this home?); the clone was not moved: it is moved at the next sync",
                dir.file_name().unwrap_or_default().to_string_lossy(),
                crate::checkout::CHECKOUT_WAIT.as_secs()
            ))
        })?,
        None => None,
    };
    let mut reset = local(program, dir);
    reset.args(["reset", "--quiet", "--hard", commit]);
    crate::git::run(reset, "reset", None).map_err(git_error)?;
    Ok(())
}

/// Holds the clone at `dir` (see [`CloneHeld`]) and clears the git locks a killed process left.
fn hold(dir: &Path) -> CloneHeld {
    type Locks = std::sync::Mutex<std::collections::HashMap<PathBuf, &'static std::sync::Mutex<()>>>;
    static LOCKS: std::sync::OnceLock<Locks> = std::sync::OnceLock::new();
    let lock: &'static std::sync::Mutex<()> = {
        let mut all = LOCKS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // One small lock per clone folder for the process's life (a handful of vaults).
        all.entry(std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf()))
            .or_insert_with(|| Box::leak(Box::default()))
    };
    let guard = lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let file = lock_file(dir);
    if file.is_some() {
        clear_stale_locks(dir);
    }
    CloneHeld {
        _file: file,
        _guard: guard,
    }
}

/// `.<name>.lock` beside the clone, locked exclusively (waiting for another process's turn);
/// `None` when it cannot be made (then only this process's lock holds, and no git lock is
/// taken for stale).
fn lock_file(dir: &Path) -> Option<std::fs::File> {
    let parent = dir.parent()?;
    let name = dir.file_name()?.to_string_lossy();
    std::fs::create_dir_all(parent).ok()?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(parent.join(format!(".{name}.lock")))
        .ok()?;
    match file.lock() {
        Ok(()) => Some(file),
        Err(e) => {
            tracing::warn!(error = %e, "a clone's lock file could not be locked");
            None
        }
    }
}

/// Removes the git lock files in the clone at `dir` (its `.git` and `.git/refs`): under the
/// clone's `flock`, every one is a killed process's.
fn clear_stale_locks(dir: &Path) {
    let git = dir.join(".git");
    let mut found: Vec<PathBuf> = GIT_LOCKS.iter().map(|n| git.join(n)).collect();
    let mut folders = vec![git.join("refs")];
    while let Some(folder) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => folders.push(path),
                Ok(t) if t.is_file() && path.extension().is_some_and(|x| x == "lock") => found.push(path),
                _ => {}
            }
        }
    }
    for path in found {
        if std::fs::remove_file(&path).is_ok() {
            tracing::warn!(lock = %path.display(), "removed a git lock a stopped gateway left in its clone");
        }
    }
}

/// Moves the clone at `dir` forward to `commit`, which it holds already (an apply's own commit,
/// pushed): no fetch (the next one moves the remote-tracking branch). A clone not behind
/// `commit` is left as it is.
pub fn advance(program: &Program, dir: &Path, commit: &str) -> Result<Synced, GatewayError> {
    let _held = hold(dir);
    let ours = head(program, dir)?;
    if ours == commit {
        return Ok(Synced::At(ours));
    }
    let mut ancestor = local(program, dir);
    ancestor.args(["merge-base", "--is-ancestor", &ours, commit]);
    if crate::git::run(ancestor, "merge-base", None).is_err() {
        return Ok(Synced::Diverged {
            clone: ours,
            remote: commit.to_owned(),
        });
    }
    checkout(program, dir, commit)?;
    Ok(Synced::At(commit.to_owned()))
}

/// The paths a commit of the clone at `dir` changed since `from` (renames as a removal and an
/// addition): what the index reads again after the clone moved forward by a fetch.
pub fn changed_since(
    program: &Program,
    dir: &Path,
    from: &str,
    to: &str,
) -> Result<Vec<String>, GatewayError> {
    let mut diff = local(program, dir);
    diff.args([
        "diff",
        "--name-only",
        "-z",
        "--no-renames",
        "--end-of-options",
        from,
        to,
    ]);
    let out = crate::git::run(diff, "diff", None).map_err(git_error)?;
    Ok(out
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect())
}

/// Whether `newer` is `older` or descends from it, in the clone at `dir` (a commit the clone
/// does not hold is not an ancestor: a clone of the branch holds all of its history).
pub fn descends(program: &Program, dir: &Path, older: &str, newer: &str) -> bool {
    if older == newer {
        return true;
    }
    let mut ancestor = local(program, dir);
    ancestor.args(["merge-base", "--is-ancestor", "--end-of-options", older, newer]);
    crate::git::run(ancestor, "merge-base", None).is_ok()
}

/// How many commits `rev` holds in the clone at `dir`: a team vault's revision. The branch only
/// moves forward, so every push makes it grow, and every gateway counts the same at one head.
pub fn commit_count(program: &Program, dir: &Path, rev: &str) -> Result<u64, GatewayError> {
    let mut count = local(program, dir);
    count.args(["rev-list", "--count", "--end-of-options", rev]);
    let out = crate::git::run(count, "rev-list", None).map_err(git_error)?;
    String::from_utf8_lossy(&out)
        .trim()
        .parse()
        .map_err(|e| GatewayError::Internal(format!("git rev-list --count answered oddly: {e}")))
}

/// Moves the clone at `dir` to `commit` (which it holds), whatever its own history: only for a
/// history the team accepted (`vault resync`).
pub fn reset_to(program: &Program, dir: &Path, commit: &str) -> Result<Synced, GatewayError> {
    let _held = hold(dir);
    checkout(program, dir, commit)?;
    Ok(Synced::At(commit.to_owned()))
}

/// What became of a push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pushed {
    /// The branch is at the commit now.
    Landed,
    /// The remote refused it: its branch is not at the base any more; nothing changed there.
    Refused(String),
    /// A rule of the remote said no (a hook: branch protection, a freeze, a check): what the
    /// remote said, as one line; nothing changed there, and the same push would be refused again.
    Declined(String),
    /// No answer (a time-out, a broken connection): settled by reading the remote ([`observe`]).
    Unknown(String),
}

/// What a remote that declined a push said: its own lines (`remote: …`, a hook's output) and the
/// refused ref's, as one line of at most 400 characters.
fn declined(detail: &str) -> String {
    let said: Vec<&str> = detail
        .lines()
        .map(str::trim)
        .filter_map(|l| match l.strip_prefix("remote:") {
            Some(r) => Some(r.trim()),
            None => l.contains("[remote rejected]").then_some(l),
        })
        .filter(|l| !l.is_empty())
        .collect();
    policy::text::escape_line(&said.join(" / "))
        .chars()
        .take(400)
        .collect()
}

/// Pushes `commit` to the branch of `vault` if and only if the branch is at `base`
/// (`--force-with-lease`: compare-and-swap, never a force over someone's work; a rewind is
/// refused by the remote's own fast-forward rule too). No hook runs here.
pub fn push(
    program: &Program,
    dir: &Path,
    vault: &TeamVault,
    commit: &str,
    base: &str,
    deadline: std::time::Duration,
) -> Result<Pushed, GatewayError> {
    check_remote_url(&vault.remote)?;
    check_branch(program, &vault.branch)?;
    let target = format!("refs/heads/{}", vault.branch);
    let mut cmd = networked(program, dir);
    cmd.args([
        "push",
        "--no-verify",
        "--no-signed",
        &format!("--force-with-lease={target}:{base}"),
        "--",
        &vault.remote,
        &format!("{commit}:{target}"),
    ]);
    match crate::git::run_within(cmd, "push", None, deadline) {
        Ok(_) => Ok(Pushed::Landed),
        Err(GitError::Failed { detail, .. }) => {
            // git names a refused ref ("[rejected] … (stale info)", "(fetch first)", a
            // remote's "[remote rejected]"); anything else (no answer) is unknown.
            let refused = [
                "[rejected]",
                "[remote rejected]",
                "stale info",
                "non-fast-forward",
            ]
            .iter()
            .any(|m| detail.contains(m));
            Ok(
                if detail.contains("[remote rejected]") && detail.contains("hook declined") {
                    Pushed::Declined(declined(&detail))
                } else if refused {
                    Pushed::Refused(detail)
                } else {
                    Pushed::Unknown(detail)
                },
            )
        }
        Err(e) => Ok(Pushed::Unknown(e.to_string())),
    }
}

/// What the remote's branch shows now of `commit`, pushed onto `base` by compare-and-swap: read
/// from the remote itself (its head, then a fetch for ancestry), never from a clone's guess. How
/// a push without an answer is settled ([`proposals::recovery::settle_unknown_push`]).
pub fn observe(
    program: &Program,
    dir: &Path,
    vault: &TeamVault,
    commit: &str,
    base: &str,
) -> proposals::recovery::RemoteShows {
    use proposals::recovery::RemoteShows;
    let Ok(head) = remote_head(program, vault) else {
        return RemoteShows::Unreadable;
    };
    let Some(head) = head else {
        // An empty or deleted branch holds no commit; the next fetch judges it.
        return RemoteShows::Past;
    };
    if head == commit {
        return RemoteShows::Landed;
    }
    if head == base {
        return RemoteShows::AtBase;
    }
    if sync(program, dir, vault).is_err() {
        return RemoteShows::Unreadable;
    }
    let mut ancestor = local(program, dir);
    ancestor.args(["merge-base", "--is-ancestor", commit, &head]);
    match crate::git::run(ancestor, "merge-base", None) {
        Ok(_) => RemoteShows::Landed,
        Err(_) => RemoteShows::Past,
    }
}

/// Whether `commit` is on the clone's branch: the head or an ancestor (a commit the clone does
/// not hold is not).
pub fn on_branch(program: &Program, dir: &Path, commit: &str) -> bool {
    let mut cmd = local(program, dir);
    cmd.args(["merge-base", "--is-ancestor", "--end-of-options", commit, "HEAD"]);
    crate::git::run(cmd, "merge-base", None).is_ok()
}

/// Whether this clone's object store holds `commit` (one this gateway built, pushed or not).
pub fn holds(program: &Program, dir: &Path, commit: &str) -> bool {
    let mut cmd = local(program, dir);
    cmd.args(["cat-file", "-e", &format!("{commit}^{{commit}}")]);
    crate::git::run(cmd, "cat-file", None).is_ok()
}

/// The `Vaultgate-Audit` trailers of the commits the clone at `dir` holds on its branch, newest
/// first: `(commit, seq, hash)` (a trailer that is not `<seq> <hash>` comes with seq 0, which no
/// record has). Commits without one (a person's) are left out.
pub fn audit_trailers(program: &Program, dir: &Path) -> Result<Vec<(String, u64, String)>, GatewayError> {
    let mut cmd = local(program, dir);
    cmd.args([
        "log",
        "--no-show-signature",
        "--format=%H%x09%(trailers:key=Vaultgate-Audit,valueonly,separator=%x09)",
        "HEAD",
    ]);
    let out = crate::git::run(cmd, "log", None).map_err(git_error)?;
    let mut found = Vec::new();
    for line in String::from_utf8_lossy(&out).lines() {
        let mut parts = line.split('\t');
        let Some(commit) = parts.next() else { continue };
        for value in parts.filter(|v| !v.trim().is_empty()) {
            let (seq, hash) = value.trim().split_once(' ').unwrap_or((value, ""));
            found.push((
                commit.to_owned(),
                seq.parse().unwrap_or(0),
                hash.trim().to_owned(),
            ));
        }
    }
    Ok(found)
}

/// One commit vaultgate pushed that touched a path, as [`vaultgate_commits`] reads it.
#[derive(Debug, Clone)]
pub struct PushedChange {
    pub commit: String,
    /// RFC 3339 (the author date, fixed when the apply began).
    pub date: String,
    pub subject: String,
    /// The message's body, trailers left out.
    pub body: String,
    /// `(key, value)` of the `Vaultgate-*` trailers.
    pub trailers: Vec<(String, String)>,
    /// `(status, path)` of every file it changed (`A`, `M`, `D`; renames as a delete and an add).
    pub files: Vec<(char, String)>,
}

/// The commits carrying a `Vaultgate-Proposal` trailer from `rev` back that touched any of
/// `paths`, newest first, at most `limit` (people's own commits are not vaultgate's changes).
pub fn vaultgate_commits(
    program: &Program,
    dir: &Path,
    rev: &str,
    paths: &[String],
    limit: usize,
) -> Result<Vec<PushedChange>, GatewayError> {
    let mut cmd = local(program, dir);
    cmd.args([
        "log",
        "-z",
        "--no-renames",
        "--name-status",
        // Every file of a commit that touched the path (a move's source too), not the path alone.
        "--full-diff",
        "--no-show-signature",
        "--grep=^Vaultgate-Proposal: ",
        &format!("--max-count={limit}"),
        "--format=%x1e%H%x1f%aI%x1f%s%x1f%b",
        "--end-of-options",
        rev,
        "--",
    ]);
    cmd.args(paths);
    let out = crate::git::run(cmd, "log", None).map_err(git_error)?;
    let text = String::from_utf8_lossy(&out);
    let mut found = Vec::new();
    for rec in text.split('\u{1e}').filter(|r| !r.trim_matches('\0').is_empty()) {
        let mut f = rec.splitn(4, '\u{1f}');
        let (Some(commit), Some(date), Some(subject), Some(rest)) = (f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        // The body ends at the first NUL; name-status fields follow, NUL-separated.
        let (message, names) = rest.split_once('\0').unwrap_or((rest, ""));
        let mut trailers = Vec::new();
        let mut body = Vec::new();
        for line in message.lines() {
            match line.split_once(": ") {
                Some((k, v)) if k.starts_with("Vaultgate-") => {
                    trailers.push((k.to_owned(), v.trim().to_owned()))
                }
                _ => body.push(line),
            }
        }
        let mut files = Vec::new();
        let mut it = names
            .split('\0')
            .map(|s| s.trim_start_matches('\n'))
            .filter(|s| !s.is_empty());
        while let (Some(status), Some(path)) = (it.next(), it.next()) {
            files.push((status.chars().next().unwrap_or('M'), path.to_owned()));
        }
        found.push(PushedChange {
            commit: commit.trim().to_owned(),
            date: date.to_owned(),
            subject: subject.to_owned(),
            body: body.join("\n").trim().to_owned(),
            trailers,
            files,
        });
    }
    Ok(found)
}

/// The blobs at `specs` (`<commit>:<path>`, `<commit>^:<path>`) in one `git cat-file --batch`,
/// each at most `limit` bytes; `None` where there is none.
pub fn blobs(
    program: &Program,
    dir: &Path,
    specs: &[String],
    limit: usize,
) -> Result<Vec<Option<Vec<u8>>>, GatewayError> {
    if specs.is_empty() {
        return Ok(Vec::new());
    }
    let mut input = Vec::new();
    for s in specs {
        if s.contains('\n') {
            return Err(GatewayError::InvalidArgument("a path with a line break".into()));
        }
        input.extend_from_slice(s.as_bytes());
        input.push(b'\n');
    }
    let mut cmd = local(program, dir);
    cmd.args(["cat-file", "--batch"]);
    let out = crate::git::run(cmd, "cat-file", Some(&input)).map_err(git_error)?;
    let mut found = Vec::with_capacity(specs.len());
    let mut at = 0;
    for _ in specs {
        let Some(end) = out[at..].iter().position(|b| *b == b'\n') else {
            break;
        };
        let header = String::from_utf8_lossy(&out[at..at + end]).into_owned();
        at += end + 1;
        let mut parts = header.split(' ');
        match (
            parts.next(),
            parts.next(),
            parts.next().and_then(|n| n.parse::<usize>().ok()),
        ) {
            (Some(_), Some(kind), Some(size)) => {
                let bytes = out.get(at..at + size).map(<[u8]>::to_vec);
                at += size + 1;
                found.push(bytes.filter(|b| kind == "blob" && b.len() <= limit));
            }
            _ => found.push(None),
        }
    }
    found.resize(specs.len(), None);
    Ok(found)
}

fn rev(program: &Program, dir: &Path, name: &str) -> Result<String, GatewayError> {
    let mut cmd = local(program, dir);
    cmd.args(["rev-parse", "--verify", "--quiet", "--end-of-options", name]);
    let out = crate::git::run(cmd, "rev-parse", None).map_err(git_error)?;
    Ok(String::from_utf8_lossy(&out).trim().to_owned())
}

fn head(program: &Program, dir: &Path) -> Result<String, GatewayError> {
    rev(program, dir, "HEAD")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_declining_remote_is_quoted_on_one_line_and_bounded() {
        let detail = "remote: main is frozen\nremote: \u{1b}[31mask ops\u{1b}[0m\nTo /srv/notes.git\n                       ! [remote rejected] abc -> main (pre-receive hook declined)\nerror: failed to push some refs";
        let said = declined(detail);
        assert!(
            said.contains("main is frozen") && said.contains("(pre-receive hook declined)"),
            "{said}"
        );
        assert!(
            !said.contains('\n') && !said.contains('\u{1b}') && !said.contains("error: failed"),
            "{said}"
        );
        let long = format!(
            "remote: {}\n ! [remote rejected] x (hook declined)",
            "y".repeat(5000)
        );
        assert!(declined(&long).chars().count() <= 400);
    }

    #[test]
    fn only_the_three_transports_and_nothing_git_reads_as_an_option() {
        for ok in [
            "https://git.example.com/team/notes.git",
            "ssh://git@example.com/team/notes.git",
            "git@github.com:team/notes.git",
            "file:///srv/git/notes.git",
            "/srv/git/notes.git",
        ] {
            assert!(check_remote_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-uhttps://x",
            "--upload-pack=touch /tmp/x",
            "ext::sh -c touch% /tmp/pwned",
            "fd::17",
            "http://plain.example.com/notes.git",
            "git://example.com/notes.git",
            "ftp://example.com/notes.git",
            "https://example.com/a b",
            "https://example.com/\nx",
            "relative/path",
            "notes.git",
            "file://host/notes.git",
        ] {
            assert!(check_remote_url(bad).is_err(), "{bad:?}");
        }
    }
}
