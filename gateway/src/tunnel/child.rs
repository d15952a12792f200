//! The child process on record (SECURITY(T-TUNNEL5)): a process is signalled only if it is the one vaultgate started (start time, user, program, a random marker), through a pidfd.

use super::*;

/// What identifies the child vaultgate started, across a crash of `serve`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ChildRecord {
    pub(crate) pid: u32,
    /// The program vaultgate ran (`tunnel-client`, its links resolved): the path, and the file
    /// itself by device and inode.
    pub(crate) exe: PathBuf,
    pub(crate) exe_dev: u64,
    pub(crate) exe_ino: u64,
    /// Clock ticks since boot (`/proc/<pid>/stat` field 22).
    pub(crate) start_time: u64,
    /// The value of [`MARK_VAR`] in the child's environment, new at every start.
    pub(crate) mark: String,
}

pub(crate) fn proc_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The real, effective, saved and file-system uids of `pid` (`/proc/<pid>/status`).
pub(crate) fn proc_uids(pid: u32) -> Option<Vec<u32>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    let uids: Vec<u32> = line
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    (!uids.is_empty()).then_some(uids)
}

/// At most this much of a process's command line is read.
pub(crate) const CMDLINE_MAX_BYTES: u64 = 64 * 1024;

/// Whether `pid` runs the file `dev`/`ino`: as its executable (`/proc/<pid>/exe`), or, a script,
/// as the file its interpreter was given (one of the first two arguments, an absolute path:
/// `python3 /path/tunnel-client run …`, or `/usr/bin/env python3 /path/tunnel-client …`).
pub(crate) fn proc_runs(pid: u32, dev: u64, ino: u64) -> bool {
    use std::io::Read as _;
    use std::os::unix::fs::MetadataExt;
    let same = |p: &Path| std::fs::metadata(p).is_ok_and(|m| (m.dev(), m.ino()) == (dev, ino));
    if same(Path::new(&format!("/proc/{pid}/exe"))) {
        return true;
    }
    let mut cmdline = Vec::new();
    if std::fs::File::open(format!("/proc/{pid}/cmdline"))
        .and_then(|f| f.take(CMDLINE_MAX_BYTES).read_to_end(&mut cmdline))
        .is_err()
    {
        return false;
    }
    cmdline.split(|b| *b == 0).skip(1).take(2).any(|arg| {
        use std::os::unix::ffi::OsStrExt;
        let p = Path::new(std::ffi::OsStr::from_bytes(arg));
        p.is_absolute() && same(p)
    })
}

/// At most this much of a process's environment is searched for the mark.
pub(crate) const ENVIRON_MAX_BYTES: u64 = 256 * 1024;

/// Whether the environment `pid` started with holds `MARK_VAR=mark`.
pub(crate) fn proc_has_mark(pid: u32, mark: &str) -> bool {
    use std::io::Read as _;
    let want = format!("{MARK_VAR}={mark}");
    let mut env = Vec::new();
    std::fs::File::open(format!("/proc/{pid}/environ"))
        .and_then(|f| f.take(ENVIRON_MAX_BYTES).read_to_end(&mut env))
        .is_ok_and(|_| env.split(|b| *b == 0).any(|v| v == want.as_bytes()))
}

/// The record of a child just started from `exe`: `None` when it cannot be read (it has
/// already exited, or there is no `/proc`).
pub(crate) fn identify(pid: u32, mark: &str, exe: &Path) -> Option<ChildRecord> {
    use std::os::unix::fs::MetadataExt;
    let exe = std::fs::canonicalize(exe).ok()?;
    let meta = std::fs::metadata(&exe).ok()?;
    Some(ChildRecord {
        pid,
        exe,
        exe_dev: meta.dev(),
        exe_ino: meta.ino(),
        start_time: proc_start_time(pid)?,
        mark: mark.to_owned(),
    })
}

/// SECURITY(T-TUNNEL5): why the process `rec` names is not the child vaultgate started (`None`:
/// it is). All of these must hold: it runs since the recorded time (a reused pid fails this), as
/// this user (every uid of it), the recorded executable (the same file), and carries the mark
/// vaultgate put in its child's environment (a process someone else started does not).
pub(crate) fn not_ours(rec: &ChildRecord) -> Option<String> {
    let pid = rec.pid;
    if proc_start_time(pid) != Some(rec.start_time) {
        return Some(format!("pid {pid} does not run since the recorded time"));
    }
    let me = euid();
    match proc_uids(pid) {
        Some(uids) if uids.iter().all(|u| *u == me) => {}
        Some(uids) => {
            return Some(format!(
                "pid {pid} runs as uids {uids:?}, not as this user ({me})"
            ));
        }
        None => return Some(format!("the user of pid {pid} cannot be read")),
    }
    if !proc_runs(pid, rec.exe_dev, rec.exe_ino) {
        return Some(format!(
            "pid {pid} does not run the recorded {}",
            rec.exe.display()
        ));
    }
    if !proc_has_mark(pid, &rec.mark) {
        return Some(format!("pid {pid} does not carry the mark of vaultgate's child"));
    }
    None
}

/// Signals vaultgate's own child, started by this process and not yet reaped (so its pid
/// cannot belong to anyone else).
pub(crate) fn signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

/// SECURITY(T-TUNNEL5): sends `sig` to the process `rec` names only if it is the child vaultgate
/// started ([`not_ours`]), checked right before. A pidfd is taken first and the signal sent
/// through it: should the process end and its pid be reused after the check, the signal reaches
/// nobody. Whether it was sent.
#[cfg(target_os = "linux")]
pub(crate) fn signal_if_ours(rec: &ChildRecord, sig: rustix::process::Signal) -> bool {
    let Some(pid) = i32::try_from(rec.pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    let Ok(pidfd) = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) else {
        return false;
    };
    if let Some(why) = not_ours(rec) {
        tracing::debug!(pid = rec.pid, %why, "not signalled: not vaultgate's child");
        return false;
    }
    rustix::process::pidfd_send_signal(&pidfd, sig).is_ok()
}

/// Without `/proc` and pidfds the identity of an orphan cannot be proven: it is never signalled.
#[cfg(not(target_os = "linux"))]
pub(crate) fn signal_if_ours(_rec: &ChildRecord, _sig: rustix::process::Signal) -> bool {
    false
}

/// SIGTERM, then SIGKILL after `grace`, to the process `rec` names while it is vaultgate's child
/// (checked before each signal).
pub(crate) async fn end_process(rec: &ChildRecord, grace: Duration) {
    if !signal_if_ours(rec, rustix::process::Signal::TERM) {
        return;
    }
    let deadline = tokio::time::Instant::now() + grace;
    while tokio::time::Instant::now() < deadline {
        if not_ours(rec).is_some() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    signal_if_ours(rec, rustix::process::Signal::KILL);
}

/// Cuts the child's log back to empty once it passes [`LOG_MAX_BYTES`].
pub(crate) fn bound_log(files: &Files) {
    use rustix::fs::OFlags;
    let flags = OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    if let Ok(fd) = rustix::fs::openat(&files.fd, LOG, flags, rustix::fs::Mode::empty()) {
        let f = std::fs::File::from(fd);
        if f.metadata().is_ok_and(|m| m.is_file() && m.len() > LOG_MAX_BYTES) {
            let _ = f.set_len(0);
        }
    }
}

// ---- status --------------------------------------------------------------------------------------
