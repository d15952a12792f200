//! `pdf-worker --probe [--no-sandbox] [ACTION ARG...]`, both ends: a worker that reads no
//! document. It limits itself and enters the sandbox exactly as [`super::serve`] does, then
//! tries ACTION — something the sandbox must refuse — and reports on ONE line of JSON
//! ([`ProbeReport`]):
//!
//! - no ACTION: nothing; the report says whether the sandbox holds (`doctor` asks this, through
//!   [`probe_sandbox`]);
//! - `socket`: a UDP socket bound to 127.0.0.1;
//! - `connect ADDR`: a TCP connection to ADDR, a loopback `ip:port` only;
//! - `open PATH`: opens PATH for reading (and reads nothing);
//! - `spawn PATH [ARG...]`: runs PATH as a new process, with the probe's streams, and waits;
//! - `exec PATH [ARG...]`: becomes PATH (on success PATH answers, not the probe);
//! - `pause`: reports, then waits for EOF on stdin (a test reads `/proc/<pid>/status` meanwhile).
//!
//! `--no-sandbox` leaves the limits and the sandbox off: the same action unconfined, so a test
//! shows the action works and that the sandbox is what refuses it. The probe gives its caller
//! nothing the caller could not do itself: the same user, no document, no output but the report.

use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{HeaderLimits, Limits, kill_and_reap, limit_self, write_line};
use crate::wire::SandboxStatus;

/// The probe's arguments, for a usage line.
pub(super) const USAGE: &str = "--probe [--no-sandbox] [socket | connect IP:PORT | open PATH | spawn PATH [ARG...] | exec PATH [ARG...] | pause]";

/// The longest report the parent reads.
const MAX_REPORT_BYTES: u64 = 64 * 1024;

/// What a probe found: its sandbox, and how the one thing it tried went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProbeReport {
    pub sandbox: SandboxStatus,
    /// The action and its arguments, e.g. `open /etc/passwd`; absent for a plain probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tried: Option<String>,
    /// Whether it worked (for `spawn`: the program ran and exited 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    /// The OS error it failed with (1 is EPERM, 13 EACCES).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno: Option<i32>,
    /// The same for a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

enum Action {
    Nothing,
    Socket,
    Connect(SocketAddr),
    Open(OsString),
    Spawn(OsString, Vec<OsString>),
    Exec(OsString, Vec<OsString>),
    Pause,
}

fn parse(args: &[OsString]) -> Option<(bool, Action)> {
    let (unconfined, args) = match args.split_first() {
        Some((flag, rest)) if flag == "--no-sandbox" => (true, rest),
        _ => (false, args),
    };
    let (name, rest) = match args.split_first() {
        None => return Some((unconfined, Action::Nothing)),
        Some((name, rest)) => (name.to_str()?, rest),
    };
    let action = match (name, rest) {
        ("socket", []) => Action::Socket,
        ("pause", []) => Action::Pause,
        ("connect", [addr]) => {
            let addr: SocketAddr = addr.to_str()?.parse().ok()?;
            // Only this machine: the probe is no way to reach anything else.
            if !addr.ip().is_loopback() {
                return None;
            }
            Action::Connect(addr)
        }
        ("open", [path]) => Action::Open(path.clone()),
        ("spawn", [path, args @ ..]) => Action::Spawn(path.clone(), args.to_vec()),
        ("exec", [path, args @ ..]) => Action::Exec(path.clone(), args.to_vec()),
        _ => return None,
    };
    Some((unconfined, action))
}

fn shown(name: &str, args: &[&OsStr]) -> String {
    let mut s = name.to_owned();
    for a in args {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Worker side: `args` are those after `--probe`.
pub(super) fn main(args: &[OsString]) -> ExitCode {
    let Some((unconfined, action)) = parse(args) else {
        let _ = writeln!(io::stderr(), "usage: pdf-worker {USAGE}");
        return ExitCode::from(2);
    };
    let sandbox = if unconfined {
        crate::sandbox::left_off("left off (--no-sandbox)")
    } else {
        let defaults = Limits::default();
        let limits = HeaderLimits {
            memory_bytes: defaults.memory_bytes,
            cpu_seconds: defaults.cpu_seconds,
            max_input_bytes: defaults.max_input_bytes,
        };
        match limit_self(&limits) {
            Ok(()) => crate::sandbox::enter(),
            // The worker would stop here too; the report says why.
            Err(failure) => crate::sandbox::left_off(&failure.reason),
        }
    };
    let mut report = ProbeReport {
        sandbox,
        tried: None,
        ok: None,
        errno: None,
        error: None,
    };
    let mut outcome = |tried: String, result: io::Result<bool>| {
        report.tried = Some(tried);
        match result {
            Ok(ok) => report.ok = Some(ok),
            Err(e) => {
                report.ok = Some(false);
                report.errno = e.raw_os_error();
                report.error = Some(e.to_string());
            }
        }
    };
    match action {
        Action::Nothing => {}
        Action::Socket => outcome("socket".into(), UdpSocket::bind(("127.0.0.1", 0)).map(|_| true)),
        Action::Connect(addr) => outcome(
            format!("connect {addr}"),
            TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map(|_| true),
        ),
        Action::Open(path) => outcome(shown("open", &[&path]), std::fs::File::open(&path).map(|_| true)),
        Action::Spawn(path, args) => {
            let mut shown_args: Vec<&OsStr> = vec![&path];
            shown_args.extend(args.iter().map(OsString::as_os_str));
            outcome(
                shown("spawn", &shown_args),
                Command::new(&path)
                    .args(&args)
                    .env_clear()
                    .status()
                    .map(|s| s.success()),
            );
        }
        Action::Exec(path, args) => {
            let mut shown_args: Vec<&OsStr> = vec![&path];
            shown_args.extend(args.iter().map(OsString::as_os_str));
            outcome(shown("exec", &shown_args), Err(exec(&path, &args)));
        }
        Action::Pause => {
            report.tried = Some("pause".into());
            if write_line(&mut io::stdout().lock(), &report).is_err() {
                return ExitCode::FAILURE;
            }
            let _ = io::stdin().lock().read_to_end(&mut Vec::new());
            return ExitCode::SUCCESS;
        }
    }
    match write_line(&mut io::stdout().lock(), &report) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}

/// Becomes `path`; returns only when that failed.
#[cfg(unix)]
fn exec(path: &OsStr, args: &[OsString]) -> io::Error {
    use std::os::unix::process::CommandExt as _;
    Command::new(path).args(args).env_clear().exec()
}

#[cfg(not(unix))]
fn exec(_path: &OsStr, _args: &[OsString]) -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, "exec is for Unix only")
}

/// Parent side: runs `program args... --probe` (vaultgate: its own binary and `pdf-worker`) with
/// an empty environment, cwd "/", no stdin, and reads its report within `timeout` (killed
/// after). What the worker would have for a sandbox on this machine now, or why no probe
/// answered.
pub fn probe_sandbox(program: &Path, args: &[&str], timeout: Duration) -> Result<SandboxStatus, String> {
    let mut child = Command::new(program)
        .args(args)
        .arg("--probe")
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("could not start the PDF worker: {e}"))?;
    let Some(stdout) = child.stdout.take() else {
        kill_and_reap(&mut child);
        return Err("could not start the PDF worker: no pipe from it".into());
    };
    let (tx, rx) = mpsc::channel();
    let reader = thread::Builder::new()
        .name("pdf-probe-stdout".into())
        .spawn(move || {
            let mut buf = Vec::new();
            let read = stdout.take(MAX_REPORT_BYTES).read_to_end(&mut buf).map(|_| buf);
            let _ = tx.send(read);
        });
    if reader.is_err() {
        kill_and_reap(&mut child);
        return Err("could not start the PDF worker: no thread to read it".into());
    }
    let read = match rx.recv_timeout(timeout) {
        Ok(read) => read,
        Err(_) => {
            kill_and_reap(&mut child);
            return Err(format!(
                "the PDF worker's probe did not answer within {} s",
                timeout.as_secs()
            ));
        }
    };
    // Its stdout is closed: it has ended or is about to.
    let until = Instant::now() + Duration::from_secs(1);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < until => thread::sleep(Duration::from_millis(5)),
            _ => {
                kill_and_reap(&mut child);
                break None;
            }
        }
    };
    let buf = read.map_err(|e| format!("could not read the PDF worker's probe: {e}"))?;
    let line = buf.strip_suffix(b"\n").unwrap_or(&buf);
    match serde_json::from_slice::<ProbeReport>(line) {
        Ok(report) => Ok(report.sandbox),
        Err(_) => Err(match status {
            Some(status) if !status.success() => {
                format!("the PDF worker's probe failed ({status})")
            }
            _ => "the PDF worker's probe gave no readable answer".into(),
        }),
    }
}
