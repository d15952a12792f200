//! The PDF worker process, both ends.
//!
//! The parent ([`run`]) starts the worker with an empty environment and writes ONE JSON header
//! line to its stdin. The worker limits itself, enters its sandbox ([`crate::sandbox`]) and says
//! on ONE line whether the sandbox holds; only then does the parent send the raw PDF bytes (and
//! not at all when the sandbox does not hold and the header did not allow that). The worker
//! answers ONE more line:
//!
//! ```text
//! stdin:  {"limits":{"memoryBytes":…,"cpuSeconds":…,"maxInputBytes":…},"request":{…},"allowWithoutSandbox":false}\n
//! stdout: {"sandbox":{"seccomp":true,"landlock":"full"}}\n
//! stdin:  <PDF bytes to EOF>
//! stdout: {"ok":{"pageCount":…,"pages":[{"page":1,"text":"…","truncated":false}],"truncated":false}}\n
//!     or  {"err":{"kind":"corrupt","reason":"…"}}\n
//! ```
//!
//! A worker that fails before its sandbox (a bad header, a limit it cannot set) answers its
//! `{"err":…}` line in place of the sandbox line. The worker ([`serve`]) limits itself and gives
//! up its rights before it reads the PDF; the parent kills it at the deadline. Both ends are in
//! this module, so the format is private to it. [`main`] is the worker's command line, with the
//! probe (`--probe`, [`probe_sandbox`]) beside the worker loop.

use std::ffi::OsString;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::wire::{Document, Failure, Request, SandboxStatus};

mod probe;
pub use probe::{ProbeReport, probe_sandbox};

const MIB: u64 = 1024 * 1024;

/// The longest header line the worker reads, newline excluded.
const MAX_HEADER_BYTES: u64 = 64 * 1024;

/// Open files the worker may have: stdin, stdout, stderr and a little slack.
const MAX_OPEN_FILES: u64 = 16;

/// The longest first line (the sandbox's status, or a failure) the parent reads.
const MAX_STATUS_BYTES: u64 = 64 * 1024;

/// Limits of one worker run.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Address-space limit the worker sets on itself (RLIMIT_AS); vaultgate: 1 GiB.
    pub memory_bytes: u64,
    /// RLIMIT_CPU soft limit (hard = soft + 1); vaultgate: 20.
    pub cpu_seconds: u64,
    /// Wall clock; the parent kills the worker after it; vaultgate: 30 s.
    pub deadline: Duration,
    /// 64 MiB in vaultgate; a bigger input is refused by the parent before spawning
    /// (Failure Limit) and by the worker.
    pub max_input_bytes: u64,
    /// The parent reads at most this much of the worker's stdout; more = Failure Limit.
    pub max_reply_bytes: u64,
    /// The document goes to a worker whose sandbox could not be set up (no seccomp filter), and
    /// that worker reads it; vaultgate: `[pdf] allow_without_sandbox`, false by default. When
    /// false such a worker is a Failure Sandbox and never sees a byte of the document.
    pub allow_without_sandbox: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: 1024 * MIB,
            cpu_seconds: 20,
            deadline: Duration::from_secs(30),
            max_input_bytes: 64 * MIB,
            max_reply_bytes: 32 * MIB,
            allow_without_sandbox: false,
        }
    }
}

/// The header line the parent writes before the PDF bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Header {
    limits: HeaderLimits,
    request: Request,
    /// Read the PDF even without the sandbox ([`Limits::allow_without_sandbox`]).
    allow_without_sandbox: bool,
}

/// The part of [`Limits`] the worker enforces on itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct HeaderLimits {
    memory_bytes: u64,
    cpu_seconds: u64,
    max_input_bytes: u64,
}

/// The worker's first line: its sandbox, or why it stopped before it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Opening {
    #[serde(rename = "sandbox")]
    Sandbox(SandboxStatus),
    #[serde(rename = "err")]
    Err(Failure),
}

/// The worker's last line: the answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Reply {
    #[serde(rename = "ok")]
    Ok(Document),
    #[serde(rename = "err")]
    Err(Failure),
}

/// What the parent's stdout reader passes on.
enum Out {
    /// The first line (with its newline), or as much as came before EOF or the limit.
    First(io::Result<Vec<u8>>),
    /// Everything after it, bounded by `max_reply_bytes` + 1.
    Rest(io::Result<Vec<u8>>),
}

/// What the parent makes of the worker's first line.
enum Verdict {
    /// Sandboxed (or allowed without): send the document.
    Go,
    /// Not sandboxed and not allowed to run so: kill it, this is the answer.
    Refuse(Failure),
    /// The worker failed before its sandbox: this is its answer, nothing may follow.
    Failed(Failure),
    /// Nothing at all: the exit status says why.
    Silent,
    /// Not a line of this protocol.
    Unreadable,
}

/// Parent side: runs `program args...` (vaultgate passes its own current_exe() and
/// ["pdf-worker"]) with an EMPTY environment, cwd "/", stdin and stdout piped, stderr null;
/// writes the header line from a separate thread, and the PDF bytes only once the worker's
/// first line says its sandbox holds (or `limits.allow_without_sandbox`); reads stdout bounded
/// by `max_reply_bytes`; kills the child (and reaps it) at the deadline.
///
/// Every way the worker can fail is a [`Failure`] whose reason names the limit where the exit
/// says so, and never holds document text; a worker without its sandbox is a
/// [`crate::wire::FailureKind::Sandbox`] naming why. Blocking (std::process); callable from
/// many threads at once.
pub fn run(
    program: &Path,
    args: &[&str],
    pdf: &[u8],
    req: &Request,
    limits: &Limits,
) -> Result<Document, Failure> {
    if u64::try_from(pdf.len()).unwrap_or(u64::MAX) > limits.max_input_bytes {
        return Err(too_large(limits.max_input_bytes));
    }
    let header = Header {
        limits: HeaderLimits {
            memory_bytes: limits.memory_bytes,
            cpu_seconds: limits.cpu_seconds,
            max_input_bytes: limits.max_input_bytes,
        },
        request: req.clone(),
        allow_without_sandbox: limits.allow_without_sandbox,
    };
    let mut header = serde_json::to_vec(&header)
        .map_err(|_| Failure::limit("could not write the request for the PDF worker"))?;
    header.push(b'\n');
    let body = pdf.to_vec();

    let mut child = Command::new(program)
        .args(args)
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| Failure::limit(format!("could not start the PDF worker: {e}")))?;
    let started = Instant::now();
    // A deadline too far away to represent is no deadline.
    let deadline = started.checked_add(limits.deadline);

    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        kill_and_reap(&mut child);
        return Err(Failure::limit("could not start the PDF worker: no pipes to it"));
    };
    // SECURITY(T-PDF3): the document goes out only on `go`, sent once the worker's first line
    // said its sandbox holds. A worker that stops reading (it refused the input, or died) makes
    // the write fail with a broken pipe; the thread then just ends. Dropping stdin is the
    // worker's EOF; a `go` never sent (the sender dropped) ends the thread with no document
    // written.
    let (go, go_rx) = mpsc::channel::<()>();
    let writer = thread::Builder::new()
        .name("pdf-worker-stdin".into())
        .spawn(move || {
            if stdin.write_all(&header).and_then(|()| stdin.flush()).is_ok() && go_rx.recv().is_ok() {
                let _ = stdin.write_all(&body);
            }
        });
    if writer.is_err() {
        kill_and_reap(&mut child);
        return Err(Failure::limit(
            "could not start the PDF worker: no thread to feed it",
        ));
    }
    let (tx, rx) = mpsc::channel::<Out>();
    let cap = limits.max_reply_bytes.saturating_add(1);
    let reader = thread::Builder::new()
        .name("pdf-worker-stdout".into())
        .spawn(move || {
            let mut stdout = BufReader::new(stdout);
            let mut first = Vec::new();
            let read = (&mut stdout)
                .take(MAX_STATUS_BYTES + 1)
                .read_until(b'\n', &mut first)
                .map(|_| first);
            let whole = matches!(&read, Ok(line) if line.ends_with(b"\n"));
            if tx.send(Out::First(read)).is_err() || !whole {
                return;
            }
            let mut rest = Vec::new();
            let read = stdout.take(cap).read_to_end(&mut rest).map(|_| rest);
            let _ = tx.send(Out::Rest(read));
        });
    if reader.is_err() {
        kill_and_reap(&mut child);
        return Err(Failure::limit(
            "could not start the PDF worker: no thread to read it",
        ));
    }
    let too_long = |buf: &Vec<u8>| u64::try_from(buf.len()).unwrap_or(u64::MAX) > limits.max_reply_bytes;

    let mut first: Option<Verdict> = None;
    let mut rest: Option<io::Result<Vec<u8>>> = None;
    let mut pause = Duration::from_millis(1);
    let status = loop {
        while let Ok(out) = rx.try_recv() {
            match out {
                Out::First(read) => {
                    let verdict = judge_opening(&read, limits);
                    match &verdict {
                        Verdict::Go => {
                            let _ = go.send(());
                        }
                        Verdict::Refuse(failure) => {
                            kill_and_reap(&mut child);
                            return Err(failure.clone());
                        }
                        Verdict::Unreadable => {
                            kill_and_reap(&mut child);
                            return Err(unreadable());
                        }
                        Verdict::Failed(_) | Verdict::Silent => {}
                    }
                    first = Some(verdict);
                }
                Out::Rest(read) => {
                    if let Ok(buf) = &read
                        && too_long(buf)
                    {
                        kill_and_reap(&mut child);
                        return Err(reply_too_large(limits.max_reply_bytes));
                    }
                    rest = Some(read);
                }
            }
        }
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(_) => {
                kill_and_reap(&mut child);
                return Err(Failure::limit("lost track of the PDF worker"));
            }
        }
        let now = Instant::now();
        if let Some(deadline) = deadline {
            if now >= deadline {
                kill_and_reap(&mut child);
                return Err(deadline_passed(limits.deadline));
            }
            pause = pause.min(deadline - now);
        }
        thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    };
    drop(go);

    if let Some(failure) = exit_failure(status, limits) {
        return Err(failure);
    }
    // The worker has exited, so its stdout is at EOF unless it left a process behind holding it:
    // wait no longer than the deadline, with a little grace.
    let left = || {
        deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::MAX)
            .max(Duration::from_millis(500))
    };
    let late = || Failure::limit("the PDF worker's answer did not arrive in time");
    let first = match first {
        Some(verdict) => verdict,
        None => match rx.recv_timeout(left()) {
            Ok(Out::First(read)) => judge_opening(&read, limits),
            Ok(Out::Rest(_)) => return Err(unreadable()),
            Err(_) => return Err(late()),
        },
    };
    let answer = match first {
        Verdict::Go | Verdict::Failed(_) => match rest {
            Some(read) => read,
            None => match rx.recv_timeout(left()) {
                Ok(Out::Rest(read)) => read,
                Ok(Out::First(_)) => return Err(unreadable()),
                Err(_) => return Err(late()),
            },
        },
        Verdict::Refuse(failure) => return Err(failure),
        Verdict::Silent => return Err(Failure::corrupt("the PDF worker gave no answer")),
        Verdict::Unreadable => return Err(unreadable()),
    };
    let buf = answer.map_err(|_| Failure::corrupt("could not read the PDF worker's answer"))?;
    if too_long(&buf) {
        return Err(reply_too_large(limits.max_reply_bytes));
    }
    match first {
        // Its failure was its answer: nothing may follow it.
        Verdict::Failed(failure) if buf.is_empty() => Err(failure),
        Verdict::Failed(_) => Err(unreadable()),
        _ => parse_reply(&buf),
    }
}

/// The worker's first line, judged: its sandbox against what `limits` allow.
fn judge_opening(read: &io::Result<Vec<u8>>, limits: &Limits) -> Verdict {
    let Ok(line) = read else {
        return Verdict::Unreadable;
    };
    if line.is_empty() {
        return Verdict::Silent;
    }
    let Some(line) = line.strip_suffix(b"\n") else {
        return Verdict::Unreadable;
    };
    match serde_json::from_slice::<Opening>(line) {
        Ok(Opening::Sandbox(sandbox)) if sandbox.in_force() || limits.allow_without_sandbox => Verdict::Go,
        Ok(Opening::Sandbox(sandbox)) => Verdict::Refuse(unsandboxed(&sandbox)),
        Ok(Opening::Err(failure)) => Verdict::Failed(failure),
        Err(_) => Verdict::Unreadable,
    }
}

/// A worker that could not sandbox itself, refused (by either end).
fn unsandboxed(sandbox: &SandboxStatus) -> Failure {
    Failure::sandbox(format!(
        "the PDF worker cannot sandbox itself on this machine: {}",
        sandbox
            .seccomp_error
            .as_deref()
            .unwrap_or("no seccomp filter, reason unknown")
    ))
}

fn unreadable() -> Failure {
    Failure::corrupt("the PDF worker gave no readable answer")
}

/// The worker's command line after `pdf-worker` (`vaultgate pdf-worker`, and this crate's
/// `pdftext-worker`): nothing → [`serve`] on stdin and stdout; `--probe …` → the probe's
/// report of the sandbox (what `doctor` runs, and the tests' way to try what the sandbox must
/// refuse). Anything else is a usage error (exit 2).
pub fn main(args: &[OsString]) -> ExitCode {
    match args.split_first() {
        None => serve(io::stdin().lock(), io::stdout().lock()),
        Some((flag, rest)) if flag == "--probe" => probe::main(rest),
        Some(_) => {
            let _ = writeln!(io::stderr(), "usage: pdf-worker [{}]", probe::USAGE);
            ExitCode::from(2)
        }
    }
}

/// Worker side: the whole of `vaultgate pdf-worker`. Reads ONE header line (JSON, at most
/// 64 KiB) from `input`; FIRST sets its own rlimits (RLIMIT_AS, RLIMIT_CPU, RLIMIT_FSIZE = 0,
/// RLIMIT_CORE = 0, RLIMIT_NOFILE 16, RLIMIT_NPROC 0 where the platform has it) — a limit that
/// cannot be set is a Failure{Limit} reply, never a run without it; then enters its sandbox
/// ([`crate::sandbox`]: a seccomp allow-list, and Landlock where the kernel has it) and writes
/// ONE line `{"sandbox": SandboxStatus}`. Without the seccomp filter it stops there with a
/// Failure{Sandbox} reply, unless the header allows running without. Then reads the PDF bytes
/// to EOF bounded by maxInputBytes; calls [`crate::extract`]; writes ONE JSON line
/// `{"ok": Document}` or `{"err": Failure}` to `output`. A panic inside lopdf is answered as
/// Failure{Corrupt}. Returns the process exit code: success when it wrote a reply. Uses no
/// async runtime and no threads.
pub fn serve(input: impl Read, output: impl Write) -> ExitCode {
    serve_with(input, output, true)
}

/// [`serve`], with the rlimits and the sandbox left off when `confine` is false: only for tests
/// in this process, where confining the test runner itself would be harmful. Such a worker says
/// it has no sandbox, and so reads the document only when the header allows that.
fn serve_with(input: impl Read, mut output: impl Write, confine: bool) -> ExitCode {
    let reply = match answer(input, &mut output, confine) {
        Ok(doc) => Reply::Ok(doc),
        Err(failure) => Reply::Err(failure),
    };
    match write_line(&mut output, &reply) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}

fn answer(input: impl Read, output: &mut impl Write, confine: bool) -> Result<Document, Failure> {
    let mut input = BufReader::new(input);
    let header = read_header(&mut input)?;
    let sandbox = if confine {
        limit_self(&header.limits)?;
        crate::sandbox::enter()
    } else {
        crate::sandbox::left_off("left off for a test in the same process")
    };
    write_line(output, &Opening::Sandbox(sandbox.clone()))
        .map_err(|_| Failure::limit("the PDF worker could not report its sandbox"))?;
    // SECURITY(T-PDF3): no sandbox, no document (the parent does not send it either).
    if !sandbox.in_force() && !header.allow_without_sandbox {
        return Err(unsandboxed(&sandbox));
    }
    let pdf = read_pdf(&mut input, header.limits.max_input_bytes)?;
    guarded(|| crate::extract(&pdf, &header.request))
}

/// Runs the extraction, a panic in it answered as a corrupt PDF (an abort, such as out of
/// memory, still ends the worker: the parent maps its signal).
fn guarded(extract: impl FnOnce() -> Result<Document, Failure>) -> Result<Document, Failure> {
    std::panic::catch_unwind(AssertUnwindSafe(extract))
        .unwrap_or_else(|_| Err(Failure::corrupt("the PDF could not be parsed")))
}

fn malformed_request() -> Failure {
    Failure::limit("the PDF worker got a malformed request")
}

fn read_header(input: &mut impl BufRead) -> Result<Header, Failure> {
    let mut line = Vec::new();
    input
        .take(MAX_HEADER_BYTES + 1)
        .read_until(b'\n', &mut line)
        .map_err(|_| malformed_request())?;
    if line.pop() != Some(b'\n') {
        return Err(
            if u64::try_from(line.len()).unwrap_or(u64::MAX) >= MAX_HEADER_BYTES {
                Failure::limit("the request to the PDF worker is too long")
            } else {
                malformed_request()
            },
        );
    }
    let header: Header = serde_json::from_slice(&line).map_err(|_| malformed_request())?;
    if header.limits.memory_bytes == 0 || header.limits.cpu_seconds == 0 {
        return Err(malformed_request());
    }
    Ok(header)
}

fn read_pdf(input: &mut impl Read, max_input_bytes: u64) -> Result<Vec<u8>, Failure> {
    let mut pdf = Vec::new();
    input
        .take(max_input_bytes.saturating_add(1))
        .read_to_end(&mut pdf)
        .map_err(|_| Failure::limit("the PDF worker could not read the PDF"))?;
    if u64::try_from(pdf.len()).unwrap_or(u64::MAX) > max_input_bytes {
        return Err(too_large(max_input_bytes));
    }
    Ok(pdf)
}

fn write_line(output: &mut impl Write, value: &impl Serialize) -> io::Result<()> {
    let mut line = serde_json::to_vec(value).map_err(io::Error::other)?;
    line.push(b'\n');
    output.write_all(&line)?;
    output.flush()
}

/// Lowers this process's own limits; a limit can always be lowered, so failing to is an error.
#[cfg(unix)]
fn limit_self(limits: &HeaderLimits) -> Result<(), Failure> {
    use rlimit::Resource;
    lower(Resource::CORE, 0, 0, "core dumps")?;
    lower(Resource::FSIZE, 0, 0, "file writes")?;
    lower(Resource::NOFILE, MAX_OPEN_FILES, MAX_OPEN_FILES, "open files")?;
    if Resource::NPROC.is_supported() {
        lower(Resource::NPROC, 0, 0, "processes")?;
    }
    lower(
        Resource::CPU,
        limits.cpu_seconds,
        limits.cpu_seconds.saturating_add(1),
        "CPU time",
    )?;
    lower(Resource::AS, limits.memory_bytes, limits.memory_bytes, "memory")?;
    Ok(())
}

/// Sets `resource` to `soft`/`hard`, or lower where the current hard limit already is lower.
#[cfg(unix)]
fn lower(resource: rlimit::Resource, soft: u64, hard: u64, what: &str) -> Result<(), Failure> {
    let cannot = || Failure::limit(format!("the PDF worker could not limit its {what}"));
    if !resource.is_supported() {
        return Err(cannot());
    }
    let (_, current_hard) = resource.get().map_err(|_| cannot())?;
    let hard = hard.min(current_hard);
    let soft = soft.min(hard);
    resource.set(soft, hard).map_err(|_| cannot())
}

#[cfg(not(unix))]
fn limit_self(_limits: &HeaderLimits) -> Result<(), Failure> {
    Err(Failure::limit(
        "the PDF worker cannot limit itself on this platform",
    ))
}

fn kill_and_reap(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

fn parse_reply(buf: &[u8]) -> Result<Document, Failure> {
    if buf.is_empty() {
        return Err(Failure::corrupt("the PDF worker gave no answer"));
    }
    let line = buf.strip_suffix(b"\n").unwrap_or(buf);
    match serde_json::from_slice::<Reply>(line) {
        Ok(Reply::Ok(doc)) => Ok(doc),
        Ok(Reply::Err(failure)) => Err(failure),
        Err(_) => Err(unreadable()),
    }
}

/// `bytes` for a person: whole MiB where it is some, bytes otherwise.
fn size(bytes: u64) -> String {
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= MIB {
        // Only for display: the precision lost to f64 does not matter here.
        #[allow(clippy::cast_precision_loss)]
        let mib = bytes as f64 / MIB as f64;
        format!("{mib:.1} MiB")
    } else {
        format!("{bytes} bytes")
    }
}

/// `d` in seconds for a person.
fn seconds(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

fn too_large(max_input_bytes: u64) -> Failure {
    Failure::limit(format!("the PDF is larger than {}", size(max_input_bytes)))
}

fn reply_too_large(max_reply_bytes: u64) -> Failure {
    Failure::limit(format!(
        "the PDF worker's answer was larger than {}",
        size(max_reply_bytes)
    ))
}

fn deadline_passed(deadline: Duration) -> Failure {
    Failure::limit(format!("the PDF took longer than {} to read", seconds(deadline)))
}

// Signal numbers, as on Linux (x86, Arm) and the BSDs/macOS but SIGBUS. There is no libc here:
// std reports the number only.
#[cfg(unix)]
const SIGABRT: i32 = 6;
#[cfg(unix)]
const SIGKILL: i32 = 9;
#[cfg(unix)]
const SIGSEGV: i32 = 11;
#[cfg(unix)]
const SIGXCPU: i32 = 24;
#[cfg(all(unix, any(target_os = "linux", target_os = "android")))]
const SIGBUS: i32 = 7;
#[cfg(all(unix, not(any(target_os = "linux", target_os = "android"))))]
const SIGBUS: i32 = 10;

/// Why a worker that exited with `status` gave no text; None for a clean exit.
fn exit_failure(status: ExitStatus, limits: &Limits) -> Option<Failure> {
    if status.success() {
        return None;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return Some(signal_failure(signal, limits));
        }
    }
    #[cfg(not(unix))]
    let _ = limits;
    Some(match status.code() {
        Some(code) => Failure::corrupt(format!("the PDF worker failed with exit code {code}")),
        None => Failure::corrupt("the PDF worker failed"),
    })
}

/// A worker killed by `signal`, not by us (the deadline is handled before).
#[cfg(unix)]
fn signal_failure(signal: i32, limits: &Limits) -> Failure {
    match signal {
        SIGXCPU => Failure::limit(format!(
            "the PDF needed more than {} s of CPU time to read",
            limits.cpu_seconds
        )),
        // RLIMIT_CPU's hard limit, or the system out of memory.
        SIGKILL => Failure::limit("the PDF worker was killed at its CPU or memory limit"),
        // Out of memory (Rust aborts on a failed allocation) or out of stack.
        SIGSEGV | SIGABRT | SIGBUS => Failure::limit(format!(
            "the PDF parser gave up within the worker's limits ({} of memory, {} s of CPU)",
            size(limits.memory_bytes),
            limits.cpu_seconds
        )),
        other => Failure::limit(format!("the PDF worker stopped on signal {other}")),
    }
}

#[cfg(test)]
mod tests;
