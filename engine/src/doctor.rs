//! `vaultgate doctor` (docs/contract.md#the-command-line): checks the home and every vault and says, for each finding, what
//! a person should do next. It only reads: without a home it creates nothing, and it never opens a
//! [`crate::Core`] (which would repair a torn audit tail or recover interrupted writes), so what it
//! reports is the state as found.

use std::io::BufRead;
use std::path::Path;

use serde::Serialize;

use crate::attachments::PdfWorker;
use crate::home::{Config, Home};

/// How a check came out. `Fail` means a person is needed (`doctor` exits 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

/// One finding: what was checked (and found) and the next step (empty when there is none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    pub status: Status,
    pub what: String,
    pub next: String,
}

impl Check {
    fn ok(what: impl Into<String>) -> Check {
        Check {
            status: Status::Ok,
            what: what.into(),
            next: String::new(),
        }
    }
    fn warn(what: impl Into<String>, next: impl Into<String>) -> Check {
        Check {
            status: Status::Warn,
            what: what.into(),
            next: next.into(),
        }
    }
    fn fail(what: impl Into<String>, next: impl Into<String>) -> Check {
        Check {
            status: Status::Fail,
            what: what.into(),
            next: next.into(),
        }
    }
}

/// Every finding, in the order checked; `ok` is false when any of them failed.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub ok: bool,
    pub checks: Vec<Check>,
}

impl Report {
    fn new(checks: Vec<Check>) -> Report {
        Report {
            ok: !checks.iter().any(|c| c.status == Status::Fail),
            checks,
        }
    }
}

/// Rolled-back transactions younger than this are reported.
const ROLLBACK_WINDOW: time::Duration = time::Duration::days(7);
/// At most this many rollbacks are listed one by one; the rest are counted.
const MAX_ROLLBACK_LINES: usize = 20;
/// The audit event of a rolled-back transaction (engine/src/txn.rs).
const ROLLED_BACK: &str = crate::txn::ROLLED_BACK;

/// Runs every check against `home` as it is now.
pub fn doctor(home: &Home, now: time::OffsetDateTime) -> Report {
    if !home.exists() {
        return Report::new(vec![Check::fail("home", "run vaultgate init")]);
    }
    let mut checks = Vec::new();
    let owner = current_uid(home);
    checks.push(check_secret(home, owner));
    checks.push(check_private(&home.dir, "home", 0o700, owner));
    let state_path = home.state_path();
    let state = if state_path.is_file() {
        checks.push(check_private(&state_path, "state.sqlite", 0o600, owner));
        match inbox::State::open(&state_path) {
            Ok(s) => Some(s),
            Err(e) => {
                checks.push(Check::fail(
                    format!("state.sqlite cannot be opened: {e}"),
                    "restore state.sqlite from a backup",
                ));
                None
            }
        }
    } else {
        checks.push(Check::fail("state.sqlite is missing", "run vaultgate init"));
        None
    };
    // A team gateway's vaults and audit chain are the team's: the edge checks them.
    let team = home.load_config().is_ok_and(|c| c.team.is_some());
    match home.load_config() {
        Ok(config) => {
            if !team {
                check_vaults(&config, state.as_ref(), &mut checks);
            }
            if let Some(state) = &state {
                check_jobs(home, &config, state, &mut checks);
            }
        }
        Err(e) => checks.push(Check::fail(
            format!("gateway.toml: {e}"),
            format!("fix {}", home.config_path().display()),
        )),
    }
    if !team {
        check_audit(home, state.as_ref(), now, &mut checks);
    }
    Report::new(checks)
}

/// docs/contract.md#applying-a-proposal: jobs a stopped process left queued wait for the next
/// `serve` or stdio server (the tunnel's and the clients' calls start one).
fn check_jobs(home: &Home, config: &Config, state: &inbox::State, checks: &mut Vec<Check>) {
    let queued = match state.jobs_queued() {
        Ok(q) => q,
        Err(e) => {
            checks.push(Check::fail(
                format!("jobs cannot be read: {e}"),
                "restore state.sqlite from a backup",
            ));
            return;
        }
    };
    let now_ms = time::OffsetDateTime::now_utc()
        .unix_timestamp()
        .saturating_mul(1000);
    let ttl_ms = i64::try_from(config.limits.job_ttl_seconds)
        .unwrap_or(i64::MAX)
        .saturating_mul(1000);
    let (mut left, mut expired) = (0, 0);
    for j in queued.iter().filter(|j| crate::jobs::owner_gone(home, &j.owner)) {
        if now_ms.saturating_sub(j.submitted_ms) > ttl_ms {
            expired += 1;
        } else {
            left += 1;
        }
    }
    if left > 0 {
        checks.push(Check::warn(
            format!(
                "{left} job(s) left queued by a stopped process: the next vaultgate server runs them if it starts within job_ttl_seconds ({} s) of their call",
                config.limits.job_ttl_seconds
            ),
            "vaultgate serve",
        ));
    }
    if expired > 0 {
        checks.push(Check::warn(
            format!("{expired} job(s) left by a stopped process are past job_ttl_seconds: the next start ends them without running (their proposals stay pending)"),
            "vaultgate serve",
        ));
    }
}

/// The user this process runs as, on Linux from `/proc/self`; elsewhere the home's owner stands
/// in (the home is created by its user).
#[cfg(unix)]
fn current_uid(home: &Home) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .or_else(|_| std::fs::metadata(&home.dir))
        .ok()
        .map(|m| m.uid())
}

#[cfg(not(unix))]
fn current_uid(_home: &Home) -> Option<u32> {
    None
}

// SECURITY(T-SECRET2): whoever can read secret.key can mint a token of any tier.
fn check_secret(home: &Home, owner: Option<u32>) -> Check {
    let path = home.secret_path();
    let shown = path.display();
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(m) => m,
        Err(e) => return Check::fail(format!("secret.key: {e}"), "run vaultgate init"),
    };
    if !meta.is_file() {
        return Check::fail(
            format!("{shown} is not a regular file"),
            "replace it with the original key file (tokens signed by it stop working otherwise)",
        );
    }
    if meta.len() != 32 {
        return Check::fail(
            format!("{shown} holds {} bytes, not 32", meta.len()),
            "restore the original key from a backup (a new key invalidates every token)",
        );
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Check::fail(
                format!("{shown} has mode {mode:o}: other users may read it"),
                format!("chmod 600 {shown}; then issue new tokens if anyone else could read it"),
            );
        }
        if let Some(uid) = owner
            && meta.uid() != uid
        {
            return Check::fail(
                format!("{shown} is owned by uid {}, not by this user ({uid})", meta.uid()),
                format!("chown the file to the user who runs vaultgate: chown {uid} {shown}"),
            );
        }
        if mode != 0o600 {
            return Check::warn(format!("{shown} has mode {mode:o}"), format!("chmod 600 {shown}"));
        }
    }
    Check::ok("secret.key: 32 bytes, mode 600, owned by this user")
}

/// The home folder and `state.sqlite`: nobody but the owner may look inside.
fn check_private(path: &Path, name: &str, want: u32, owner: Option<u32>) -> Check {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) => return Check::fail(format!("{name}: {e}"), "run vaultgate init"),
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let mode = meta.permissions().mode() & 0o777;
        let shown = path.display();
        if mode & 0o077 != 0 {
            return Check::fail(
                format!("{name} {shown} has mode {mode:o}: other users may read it"),
                format!("chmod {want:o} {shown}"),
            );
        }
        if let Some(uid) = owner
            && meta.uid() != uid
        {
            return Check::fail(
                format!(
                    "{name} {shown} is owned by uid {}, not by this user ({uid})",
                    meta.uid()
                ),
                format!("chown {uid} {shown}"),
            );
        }
    }
    let _ = (meta, want, owner);
    Check::ok(format!("{name}: not readable by other users"))
}

fn check_vaults(config: &Config, state: Option<&inbox::State>, checks: &mut Vec<Check>) {
    if config.vaults.is_empty() {
        checks.push(Check::warn("no vault is registered", "vaultgate vault add PATH"));
    }
    for v in &config.vaults {
        let id = &v.id;
        let shown = v.path.display();
        match std::fs::metadata(&v.path) {
            Ok(m) if m.is_dir() => checks.push(Check::ok(format!("vault {id}: {shown} is a folder"))),
            Ok(_) => {
                checks.push(Check::fail(
                    format!("vault {id}: {shown} is not a folder"),
                    format!("put the vault back at {shown}, or vaultgate vault remove {id}"),
                ));
                continue;
            }
            Err(e) => {
                checks.push(Check::fail(
                    format!("vault {id}: {shown}: {e}"),
                    format!("put the vault back at {shown}, or vaultgate vault remove {id}"),
                ));
                continue;
            }
        }
        let index = v
            .path
            .join(vault::write::MACHINE_DIR)
            .join(vault::index::INDEX_FILE);
        checks.push(match vault::index::check_file(&index) {
            Ok(true) => Check::ok(format!("vault {id}: index healthy")),
            Ok(false) => Check::ok(format!(
                "vault {id}: no index yet (servers and `vaultgate index` build it)"
            )),
            Err(e) => Check::fail(
                format!("vault {id}: index {}: {e}", index.display()),
                format!("vaultgate index --vault {id} --rebuild"),
            ),
        });
        if let Some(state) = state {
            check_git(v, state, checks);
            match state.open_intents(id) {
                Ok(open) if !open.is_empty() => checks.push(Check::warn(
                    format!("vault {id}: {} interrupted write(s) await recovery", open.len()),
                    format!("vaultgate history status --vault {id} (any command that opens the vault finishes or rolls them back)"),
                )),
                Ok(_) => {}
                Err(e) => checks.push(Check::fail(
                    format!("vault {id}: interrupted writes cannot be read: {e}"),
                    "restore state.sqlite from a backup",
                )),
            }
        }
    }
}

/// docs/contract.md#the-command-line, docs/contract.md#git-history: the git queue is empty (a waiting commit names why it waits).
fn check_git(v: &crate::home::VaultConfig, state: &inbox::State, checks: &mut Vec<Check>) {
    let id = &v.id;
    let (on, queued) = match (state.git_enabled(id), state.queue_len(id)) {
        (Ok(on), Ok(q)) => (on, q),
        (Err(e), _) | (_, Err(e)) => {
            checks.push(Check::fail(
                format!("vault {id}: git queue cannot be read: {e}"),
                "restore state.sqlite from a backup",
            ));
            return;
        }
    };
    if queued == 0 {
        if on {
            checks.push(Check::ok(format!("vault {id}: git on, git queue empty")));
        }
        return;
    }
    let why = match crate::git::Repo::discover(&crate::git::Program::default(), &v.path) {
        Ok(Some(repo)) => repo
            .busy()
            .unwrap_or_else(|| "nothing holds the repository now".into()),
        Ok(None) => "the vault folder is no longer in a git work tree".into(),
        Err(e) => e.to_string(),
    };
    checks.push(Check::warn(
        format!("vault {id}: git queue holds {queued} commit(s) ({why})"),
        format!(
            "finish or abort the merge/rebase, or remove a stale .git/index.lock; the commits are made at the next change or start (or `vaultgate vault git {id} off --drop-queue`)"
        ),
    ));
}

fn check_audit(
    home: &Home,
    state: Option<&inbox::State>,
    now: time::OffsetDateTime,
    checks: &mut Vec<Check>,
) {
    let path = home.audit_path();
    let report = if path.exists() {
        match audit::verify(&path) {
            Ok(r) => Some(r),
            Err(e) => {
                checks.push(Check::fail(
                    format!("audit log {} cannot be read: {e}", path.display()),
                    "check the file's permissions and the disk",
                ));
                return;
            }
        }
    } else {
        None
    };
    match report.as_ref().and_then(|r| r.broken.as_ref()) {
        Some(b) if b.reason.starts_with("torn last line") => checks.push(Check::fail(
            format!("audit chain: seq {} (line {}) is torn: {}", b.seq, b.line, b.reason),
            "vaultgate audit repair",
        )),
        Some(b) => checks.push(Check::fail(
            format!("audit chain broken at seq {} (line {}): {}", b.seq, b.line, b.reason),
            "keep audit.jsonl as evidence (copy it aside), find out who changed it, then vaultgate audit restart --yes",
        )),
        None => match audit_head_check(&path, state, report.as_ref()) {
            // A missing or replaced log "holds" trivially; say only what is wrong with it.
            Some(problem) => checks.push(problem),
            None => {
                let n = report.as_ref().map_or(0, |r| r.records);
                checks.push(Check::ok(format!("audit chain holds ({n} records)")));
            }
        },
    }
    if report.is_some() {
        rolled_back_since(&path, now - ROLLBACK_WINDOW, checks);
    }
}

/// Whether the log holds every record the state database has seen (docs/contract.md#the-audit-log: a missing or
/// replaced log is never silently restarted). The same check servers run at start.
fn audit_head_check(
    path: &Path,
    state: Option<&inbox::State>,
    report: Option<&audit::VerifyReport>,
) -> Option<Check> {
    let state = state?;
    if report.is_some_and(|r| r.broken.is_some()) {
        return None;
    }
    match crate::audit_log::head_status(path, state) {
        Ok(status) => status.problem().map(|p| {
            Check::fail(
                format!("audit log: {p}"),
                "restore audit.jsonl from a backup, or vaultgate audit restart --yes",
            )
        }),
        Err(e) => Some(Check::fail(
            format!("audit head cannot be compared with state.sqlite: {e}"),
            "check state.sqlite and audit.jsonl are readable",
        )),
    }
}

/// A `warn` line per transaction rolled back since `since` (newest last), from the audit log.
fn rolled_back_since(path: &Path, since: time::OffsetDateTime, checks: &mut Vec<Check>) {
    let Ok(file) = std::fs::File::open(path) else {
        return;
    };
    let mut found = Vec::new();
    let mut total = 0usize;
    for line in std::io::BufReader::new(file).split(b'\n') {
        let Ok(line) = line else { break };
        // Cheap filter first: only rollback lines are parsed.
        if !line
            .windows(ROLLED_BACK.len())
            .any(|w| w == ROLLED_BACK.as_bytes())
        {
            continue;
        }
        // A `Value`, not an `AuditRecord`: a newer record shape must not hide a rollback.
        let Ok(r) = serde_json::from_slice::<serde_json::Value>(&line) else {
            continue;
        };
        let ts = r["ts"].as_str().and_then(|t| {
            time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok()
        });
        if r["event"] != ROLLED_BACK || ts.is_none_or(|t| t < since) {
            continue;
        }
        total += 1;
        if found.len() == MAX_ROLLBACK_LINES {
            found.remove(0);
        }
        found.push(r);
    }
    for r in &found {
        let field = |k: &str| r[k].as_str().map(str::to_owned);
        let vault = field("vault").unwrap_or_else(|| "?".into());
        let what = field("tool").unwrap_or_else(|| "a write".into());
        let target = field("target")
            .or_else(|| field("proposalId"))
            .map(|t| format!(" of {t}"))
            .unwrap_or_default();
        checks.push(Check::warn(
            format!(
                "vault {vault}: {what}{target} was rolled back at {} (audit seq {})",
                field("ts").unwrap_or_default(),
                r["seq"]
            ),
            "nothing was changed; look at the note and propose again if the change is still wanted",
        ));
    }
    if total > found.len() {
        checks.push(Check::warn(
            format!(
                "{} more transactions were rolled back in the last 7 days",
                total - found.len()
            ),
            "vaultgate audit tail -n 200 | grep rolled_back",
        ));
    }
}

/// docs/contract.md#notes-as-data-and-attachments: whether the PDF worker can sandbox itself on this machine, asked of a worker that
/// `worker` (the edge's) starts for it. A warning, never a failure: only `read_attachment_text`
/// depends on it. Nothing without a home.
pub fn check_pdf_sandbox(report: &mut Report, home: &Home, worker: &dyn PdfWorker) {
    if !home.exists() {
        return;
    }
    let allowed = home.load_config().is_ok_and(|c| c.pdf.allow_without_sandbox);
    let check = match worker.probe_sandbox() {
        Ok(sandbox) if sandbox.in_force() => Check::ok(format!("PDF worker sandbox: {}", sandbox.describe())),
        Ok(sandbox) if allowed => Check::warn(
            format!(
                "PDF worker sandbox cannot be set up here ({}), and [pdf] allow_without_sandbox = true: PDFs are parsed without it",
                sandbox.describe()
            ),
            "run vaultgate where seccomp is available (Linux on x86-64 or Arm64, outside a container that forbids it), or set [pdf] allow_without_sandbox = false in gateway.toml to stop parsing PDFs here",
        ),
        Ok(sandbox) => Check::warn(
            format!(
                "PDF worker sandbox cannot be set up here ({}): read_attachment_text answers CAPABILITY_DENIED",
                sandbox.describe()
            ),
            "run vaultgate where seccomp is available (Linux on x86-64 or Arm64, outside a container that forbids it), or accept the risk with [pdf] allow_without_sandbox = true in gateway.toml",
        ),
        Err(e) => Check::warn(
            format!("PDF worker sandbox could not be probed: {e}"),
            "check that the vaultgate binary can start itself (read_attachment_text needs it)",
        ),
    };
    report.ok &= check.status != Status::Fail;
    report.checks.push(check);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn statuses(r: &Report) -> Vec<(Status, String)> {
        r.checks.iter().map(|c| (c.status, c.what.clone())).collect()
    }

    #[test]
    fn without_a_home_one_failure_and_nothing_created() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home {
            dir: dir.path().join("absent"),
        };
        let r = doctor(&home, time::OffsetDateTime::now_utc());
        assert!(!r.ok);
        assert_eq!(r.checks, vec![Check::fail("home", "run vaultgate init")]);
        assert!(!home.dir.exists());
    }

    #[test]
    fn a_fresh_home_is_healthy() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home {
            dir: dir.path().join("home"),
        };
        home.init().unwrap();
        let r = doctor(&home, time::OffsetDateTime::now_utc());
        assert!(r.ok, "{:?}", statuses(&r));
        assert!(r.checks.iter().all(|c| c.status != Status::Fail));
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["ok"], true);
        assert_eq!(json["checks"][0]["status"], "ok");
    }

    #[test]
    fn a_job_left_by_a_stopped_process_is_a_warning_and_a_live_ones_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home {
            dir: dir.path().join("home"),
        };
        home.init().unwrap();
        let state = inbox::State::open(&home.state_path()).unwrap();
        let job = |key: &str, owner: &str| inbox::NewJob {
            vault: "main",
            principal: "cred",
            key: key.to_owned().leak(),
            tool: "apply_proposal",
            args: "{}",
            transport: "stdio",
            owner: owner.to_owned().leak(),
            submitted_ms: 0,
        };
        // A live owner: its lock file is held.
        std::fs::create_dir_all(home.dir.join("jobs")).unwrap();
        let live = "a".repeat(32);
        let mut lock =
            fd_lock::RwLock::new(std::fs::File::create(home.dir.join(format!("jobs/{live}.lock"))).unwrap());
        let _held = lock.try_write().unwrap();
        state.job_submit(&job("k1", &live)).unwrap();
        let warned = |r: &Report| {
            r.checks
                .iter()
                .any(|c| c.status == Status::Warn && c.what.contains("left queued"))
        };
        assert!(!warned(&doctor(&home, time::OffsetDateTime::now_utc())));
        // A stopped one: no lock file at all (submitted at 0: long past its ttl).
        state.job_submit(&job("k2", &"b".repeat(32))).unwrap();
        let r = doctor(&home, time::OffsetDateTime::now_utc());
        let past = |r: &Report| {
            r.checks.iter().any(|c| {
                c.status == Status::Warn && c.what.starts_with("1 job(s) left by a stopped process are past")
            })
        };
        assert!(past(&r) && !warned(&r), "{:?}", statuses(&r));
        // A fresh one of a stopped process: it will run.
        let fresh = inbox::NewJob {
            submitted_ms: time::OffsetDateTime::now_utc().unix_timestamp() * 1000,
            ..job("k3", &"d".repeat(32))
        };
        state.job_submit(&fresh).unwrap();
        let r = doctor(&home, time::OffsetDateTime::now_utc());
        assert!(past(&r) && warned(&r), "{:?}", statuses(&r));
        assert!(
            r.checks
                .iter()
                .any(|c| c.what.starts_with("1 job(s) left queued")),
            "{:?}",
            statuses(&r)
        );
    }

    #[cfg(unix)]
    #[test]
    fn an_open_secret_fails_with_chmod() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let home = Home {
            dir: dir.path().join("home"),
        };
        home.init().unwrap();
        std::fs::set_permissions(home.secret_path(), std::fs::Permissions::from_mode(0o644)).unwrap();
        let r = doctor(&home, time::OffsetDateTime::now_utc());
        assert!(!r.ok);
        let c = r.checks.iter().find(|c| c.status == Status::Fail).unwrap();
        assert!(c.next.starts_with("chmod 600 "), "{c:?}");
    }

    /// A deleted log is one failure, not an "ok, the chain holds" beside it.
    #[test]
    fn a_deleted_audit_log_is_reported_once_as_a_failure() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home {
            dir: dir.path().join("home"),
        };
        home.init().unwrap();
        let log = audit::AuditLog::open(&home.audit_path()).unwrap();
        let e = audit::Entry::new(
            "cli.test",
            audit::Actor::Cli { user: "me".into() },
            audit::Outcome::Ok,
        );
        let record = log
            .append(e, time::OffsetDateTime::now_utc(), audit::Durability::Flush)
            .unwrap();
        let head = inbox::AuditHead {
            seq: record.seq,
            hash: record.hash,
        };
        inbox::State::open(&home.state_path())
            .unwrap()
            .note_audit_head(&head)
            .unwrap();
        std::fs::remove_file(home.audit_path()).unwrap();
        let r = doctor(&home, time::OffsetDateTime::now_utc());
        assert!(!r.ok);
        let audit: Vec<_> = statuses(&r)
            .into_iter()
            .filter(|(_, w)| w.contains("audit"))
            .collect();
        assert_eq!(audit.len(), 1, "{audit:?}");
        assert_eq!(audit[0].0, Status::Fail, "{audit:?}");
    }

    #[test]
    fn a_recent_rollback_is_a_warning_and_an_old_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home {
            dir: dir.path().join("home"),
        };
        home.init().unwrap();
        let log = audit::AuditLog::open(&home.audit_path()).unwrap();
        let mut e = audit::Entry::new(
            ROLLED_BACK,
            audit::Actor::Cli { user: "me".into() },
            audit::Outcome::Error,
        );
        e.vault = Some("notes".into());
        e.tool = Some("apply_proposal".into());
        e.target = Some("z/a.md".into());
        let now = time::OffsetDateTime::now_utc();
        log.append(e, now, audit::Durability::Flush).unwrap();

        let r = doctor(&home, now);
        assert!(r.ok, "a rollback alone needs nobody: {:?}", statuses(&r));
        let rolled_back = |r: &Report| -> Vec<Check> {
            r.checks
                .iter()
                .filter(|c| c.status == Status::Warn && c.what.contains("rolled back"))
                .cloned()
                .collect()
        };
        let warns = rolled_back(&r);
        assert_eq!(warns.len(), 1, "{:?}", statuses(&r));
        assert!(
            warns[0].what.contains("apply_proposal of z/a.md was rolled back"),
            "{warns:?}"
        );

        let later = doctor(&home, now + time::Duration::days(8));
        assert!(rolled_back(&later).is_empty(), "{:?}", statuses(&later));
    }

    /// A worker that answers the probe with `status`.
    struct Probe(Result<pdftext::wire::SandboxStatus, String>);

    impl PdfWorker for Probe {
        fn extract(
            &self,
            _: &[u8],
            _: &pdftext::wire::Request,
            _: bool,
        ) -> Result<pdftext::wire::Document, pdftext::wire::Failure> {
            unreachable!("doctor reads no PDF")
        }
        fn probe_sandbox(&self) -> Result<pdftext::wire::SandboxStatus, String> {
            self.0.clone()
        }
    }

    fn sandbox(seccomp: bool) -> pdftext::wire::SandboxStatus {
        pdftext::wire::SandboxStatus {
            seccomp,
            seccomp_error: (!seccomp).then(|| "the kernel refused the seccomp filter: EINVAL".into()),
            landlock: pdftext::wire::Landlock::Off,
            landlock_error: Some("this kernel has no Landlock".into()),
        }
    }

    /// docs/contract.md#notes-as-data-and-attachments: the sandbox in force is an ok line; one that cannot be set up is a warning that
    /// names the setting, and says what it means when the setting is on; no home, no line.
    #[test]
    fn the_pdf_sandbox_line_warns_when_it_cannot_be_set_up() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home {
            dir: dir.path().join("home"),
        };
        let line = |probe: Probe| {
            let mut r = doctor(&home, time::OffsetDateTime::now_utc());
            let before = r.checks.len();
            check_pdf_sandbox(&mut r, &home, &probe);
            r.checks[before..].to_vec()
        };
        assert!(line(Probe(Ok(sandbox(true)))).is_empty(), "no home, no line");
        home.init().unwrap();

        let ok = line(Probe(Ok(sandbox(true))));
        assert_eq!(ok.len(), 1);
        assert_eq!(ok[0].status, Status::Ok, "{ok:?}");
        assert!(ok[0].what.contains("seccomp filter in force"), "{ok:?}");

        let off = line(Probe(Ok(sandbox(false))));
        assert_eq!(off[0].status, Status::Warn, "{off:?}");
        assert!(off[0].what.contains("EINVAL"), "{off:?}");
        assert!(off[0].what.contains("CAPABILITY_DENIED"), "{off:?}");
        assert!(
            off[0].next.contains("[pdf] allow_without_sandbox = true"),
            "{off:?}"
        );

        let mut config = home.load_config().unwrap();
        config.pdf.allow_without_sandbox = true;
        home.save_config(&config).unwrap();
        let allowed = line(Probe(Ok(sandbox(false))));
        assert_eq!(allowed[0].status, Status::Warn, "{allowed:?}");
        assert!(allowed[0].what.contains("parsed without it"), "{allowed:?}");

        let broken = line(Probe(Err("could not start the PDF worker: gone".into())));
        assert_eq!(broken[0].status, Status::Warn, "{broken:?}");
        assert!(broken[0].what.contains("gone"), "{broken:?}");
    }
}
