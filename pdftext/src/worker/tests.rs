//! The worker loop in this process (with its limits left off), and the parent side against
//! real child processes that play a worker.
#![allow(clippy::unwrap_used)]

use std::io;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::{Header, HeaderLimits, Limits, Opening, Reply, guarded, run, serve_with};
use crate::build::text_pdf;
use crate::wire::{Document, Failure, FailureKind, Landlock, Page, Request, SandboxStatus};

fn req() -> Request {
    Request {
        pages: None,
        default_pages: 10,
        max_chars: 1000,
        max_total_bytes: 100_000,
    }
}

/// A header; `allow`: read the PDF without the sandbox (which the in-process worker never has).
fn header_with(max_input_bytes: u64, allow: bool) -> Vec<u8> {
    let mut line = serde_json::to_vec(&Header {
        limits: HeaderLimits {
            memory_bytes: 1 << 30,
            cpu_seconds: 20,
            max_input_bytes,
        },
        request: req(),
        allow_without_sandbox: allow,
    })
    .unwrap();
    line.push(b'\n');
    line
}

fn header_line(max_input_bytes: u64) -> Vec<u8> {
    header_with(max_input_bytes, true)
}

/// The sandbox line of a worker left unconfined in this process.
const LEFT_OFF: &str = "{\"sandbox\":{\"seccomp\":false,\"seccompError\":\"left off for a test in the same process\",\"landlock\":\"off\",\"landlockError\":\"left off for a test in the same process\"}}\n";

/// Runs the worker loop in this process without touching its limits or entering its sandbox;
/// the reply line (after the sandbox line, when there is one) and the exit code.
fn serve_here(input: &[u8]) -> (String, ExitCode) {
    let mut out = Vec::new();
    let code = serve_with(input, &mut out, false);
    let out = String::from_utf8(out).unwrap();
    let reply = out.strip_prefix(LEFT_OFF).unwrap_or(&out).to_owned();
    (reply, code)
}

fn reply_of(line: &str) -> Reply {
    assert!(line.ends_with('\n'), "{line:?}");
    assert_eq!(line.matches('\n').count(), 1, "{line:?}");
    serde_json::from_str(line).unwrap()
}

fn failure_of(line: &str) -> Failure {
    match reply_of(line) {
        Reply::Err(failure) => failure,
        Reply::Ok(doc) => panic!("expected a failure, got {doc:?}"),
    }
}

#[test]
fn serve_answers_its_sandbox_then_one_line_in_the_wire_format() {
    let mut input = br#"{"limits":{"memoryBytes":1073741824,"cpuSeconds":20,"maxInputBytes":67108864},"request":{"pages":[1,7],"defaultPages":10,"maxChars":1000,"maxTotalBytes":100000},"allowWithoutSandbox":true}"#.to_vec();
    input.push(b'\n');
    input.extend_from_slice(&text_pdf(&[&["Hello"]]).unwrap());
    let mut out = Vec::new();
    let code = serve_with(input.as_slice(), &mut out, false);
    assert_eq!(code, ExitCode::SUCCESS);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        format!(
            "{LEFT_OFF}{}",
            "{\"ok\":{\"pageCount\":1,\"pages\":[{\"page\":1,\"text\":\"Hello\",\"truncated\":false}],\"truncated\":false}}\n"
        )
    );
}

/// Stdin that says whether anything past the header was asked for.
struct Watched {
    header: Vec<u8>,
    read_past_header: std::rc::Rc<std::cell::Cell<bool>>,
}

impl io::Read for Watched {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.header.is_empty() {
            self.read_past_header.set(true);
            let n = buf.len().min(9);
            buf[..n].copy_from_slice(&b"%PDF-1.4\n"[..n]);
            return Ok(n);
        }
        let n = buf.len().min(self.header.len());
        buf[..n].copy_from_slice(&self.header[..n]);
        self.header.drain(..n);
        Ok(n)
    }
}

/// SECURITY(T-PDF3): a worker without its sandbox says so and reads no byte of the document,
/// unless the header allows it.
#[test]
fn serve_without_a_sandbox_refuses_the_document_unless_allowed() {
    let read_past_header = std::rc::Rc::new(std::cell::Cell::new(false));
    let input = Watched {
        header: header_with(1000, false),
        read_past_header: read_past_header.clone(),
    };
    let mut out = Vec::new();
    assert_eq!(serve_with(input, &mut out, false), ExitCode::SUCCESS);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        format!(
            "{LEFT_OFF}{}",
            "{\"err\":{\"kind\":\"sandbox\",\"reason\":\"the PDF worker cannot sandbox itself on this machine: left off for a test in the same process\"}}\n"
        )
    );
    assert!(!read_past_header.get(), "the worker read past the header");

    let input = Watched {
        header: header_with(1000, true),
        read_past_header: read_past_header.clone(),
    };
    let mut out = Vec::new();
    serve_with(input, &mut out, false);
    assert!(read_past_header.get(), "allowed, the worker reads the document");
    let out = String::from_utf8(out).unwrap();
    assert!(out.starts_with(LEFT_OFF), "{out}");
}

#[test]
fn serve_answers_failures_in_the_wire_format() {
    let mut input = header_line(1000);
    input.extend_from_slice(b"not a pdf");
    let (line, code) = serve_here(&input);
    assert_eq!(code, ExitCode::SUCCESS);
    assert_eq!(
        line,
        "{\"err\":{\"kind\":\"corrupt\",\"reason\":\"the file is not a PDF\"}}\n"
    );
}

#[test]
fn serve_refuses_a_bad_header() {
    for input in [
        &b"not json\n%PDF-1.4"[..],
        b"",
        b"{\"limits\":",
        b"[]\n",
        // Unknown fields are refused, not ignored.
        b"{\"limits\":{\"memoryBytes\":1,\"cpuSeconds\":1,\"maxInputBytes\":1},\"request\":{\"pages\":null,\"defaultPages\":1,\"maxChars\":1,\"maxTotalBytes\":1},\"extra\":1}\n",
        // No memory or no CPU time is no request.
        b"{\"limits\":{\"memoryBytes\":0,\"cpuSeconds\":1,\"maxInputBytes\":1},\"request\":{\"pages\":null,\"defaultPages\":1,\"maxChars\":1,\"maxTotalBytes\":1}}\n",
        b"{\"limits\":{\"memoryBytes\":1,\"cpuSeconds\":0,\"maxInputBytes\":1},\"request\":{\"pages\":null,\"defaultPages\":1,\"maxChars\":1,\"maxTotalBytes\":1}}\n",
    ] {
        let (line, code) = serve_here(input);
        assert_eq!(code, ExitCode::SUCCESS);
        let failure = failure_of(&line);
        assert_eq!(
            failure,
            Failure::new(FailureKind::Limit, "the PDF worker got a malformed request"),
            "{}",
            String::from_utf8_lossy(input)
        );
    }
}

#[test]
fn serve_refuses_a_header_over_64_kib() {
    let mut input = vec![b' '; 64 * 1024 + 1];
    input.extend_from_slice(b"\n%PDF-1.4");
    let (line, _) = serve_here(&input);
    assert_eq!(
        failure_of(&line),
        Failure::new(FailureKind::Limit, "the request to the PDF worker is too long")
    );

    // Exactly 64 KiB of header is still read (it is valid JSON padded with spaces).
    let mut header = header_line(1000);
    header.pop();
    header.resize(64 * 1024, b' ');
    header.push(b'\n');
    header.extend_from_slice(b"not a pdf");
    let (line, _) = serve_here(&header);
    assert_eq!(failure_of(&line).reason, "the file is not a PDF");
}

#[test]
fn serve_refuses_an_oversized_input() {
    let pdf = text_pdf(&[&["Hello"]]).unwrap();
    let mut input = header_line(u64::try_from(pdf.len()).unwrap() - 1);
    input.extend_from_slice(&pdf);
    let (line, code) = serve_here(&input);
    assert_eq!(code, ExitCode::SUCCESS);
    let failure = failure_of(&line);
    assert_eq!(failure.kind, FailureKind::Limit);
    assert!(
        failure.reason.starts_with("the PDF is larger than "),
        "{failure:?}"
    );

    // Exactly at the limit is fine.
    let mut input = header_line(u64::try_from(pdf.len()).unwrap());
    input.extend_from_slice(&pdf);
    let (line, _) = serve_here(&input);
    assert!(matches!(reply_of(&line), Reply::Ok(_)), "{line}");
}

#[test]
fn a_panic_in_the_parser_is_a_corrupt_pdf() {
    assert_eq!(
        guarded(|| panic!("lopdf fell over")),
        Err(Failure::new(FailureKind::Corrupt, "the PDF could not be parsed"))
    );
    assert_eq!(guarded(|| Ok(doc())), Ok(doc()));
}

#[test]
fn serve_fails_when_it_cannot_answer() {
    struct Broken;
    impl io::Write for Broken {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from(io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut input = header_line(1000);
    input.extend_from_slice(b"not a pdf");
    assert_eq!(serve_with(input.as_slice(), Broken, false), ExitCode::FAILURE);
}

fn limits(deadline: Duration) -> Limits {
    Limits {
        deadline,
        ..Limits::default()
    }
}

fn sandboxed() -> SandboxStatus {
    SandboxStatus {
        seccomp: true,
        seccomp_error: None,
        landlock: Landlock::Full,
        landlock_error: None,
    }
}

fn unsandboxed() -> SandboxStatus {
    SandboxStatus {
        seccomp: false,
        seccomp_error: Some("the kernel refused the seccomp filter: no".into()),
        landlock: Landlock::Off,
        landlock_error: Some("this kernel has no Landlock".into()),
    }
}

/// The first line of a worker with `sandbox`.
fn opening(sandbox: SandboxStatus) -> String {
    serde_json::to_string(&Opening::Sandbox(sandbox)).unwrap()
}

/// `run` on `/bin/sh -c script sh extra...`, a worker whose sandbox holds: `script` runs after
/// it printed its sandbox line.
fn sh(script: &str, extra: &[&str], limits: &Limits) -> Result<Document, Failure> {
    let script = format!("printf '%s\\n' '{}'; {script}", opening(sandboxed()));
    let mut args = vec!["-c", &script, "sh"];
    args.extend_from_slice(extra);
    run(Path::new("/bin/sh"), &args, b"%PDF-1.4 whatever", &req(), limits)
}

fn doc() -> Document {
    Document {
        page_count: 3,
        pages: vec![Page {
            page: 2,
            text: "from the worker: \"quoted\", tab\t, é".into(),
            truncated: true,
            error: None,
        }],
        truncated: true,
    }
}

#[test]
fn run_maps_a_good_reply() {
    let line = serde_json::to_string(&Reply::Ok(doc())).unwrap();
    let got = sh(
        "cat >/dev/null; printf '%s\\n' \"$1\"",
        &[&line],
        &limits(Duration::from_secs(10)),
    );
    assert_eq!(got, Ok(doc()));
}

#[test]
fn run_passes_the_workers_failure_on() {
    let failure = Failure::new(FailureKind::Encrypted, "the PDF is encrypted");
    let line = serde_json::to_string(&Reply::Err(failure.clone())).unwrap();
    let got = sh(
        "cat >/dev/null; printf '%s\\n' \"$1\"",
        &[&line],
        &limits(Duration::from_secs(10)),
    );
    assert_eq!(got, Err(failure));
}

#[test]
fn run_sends_the_header_and_the_pdf_with_no_environment_from_root() {
    let pdf = b"%PDF-1.4 some bytes";
    let header = header_with(Limits::default().max_input_bytes, false);
    let expected = (header.len() + pdf.len()).to_string();
    let line = serde_json::to_string(&Reply::Ok(doc())).unwrap();
    // Answers only if stdin held exactly as many bytes as the header line and the PDF, HOME is
    // not set and the working directory is the root.
    let script = "printf '%s\\n' \"$3\"; n=$(wc -c); [ \"$n\" -eq \"$2\" ] && [ -z \"$HOME\" ] && [ \"$(pwd)\" = / ] && printf '%s\\n' \"$1\"; exit 0";
    let got = run(
        Path::new("/bin/sh"),
        &["-c", script, "sh", &line, &expected, &opening(sandboxed())],
        pdf,
        &req(),
        &limits(Duration::from_secs(10)),
    );
    assert_eq!(got, Ok(doc()));
}

#[test]
fn run_kills_the_worker_at_the_deadline() {
    let started = Instant::now();
    // dash forks the sleep: it outlives the killed shell and holds its stdout open, and `run`
    // still answers at the deadline (5 s, not 100, so that it does not linger after the tests).
    let got = sh("cat >/dev/null; sleep 5", &[], &limits(Duration::from_secs(1)));
    let elapsed = started.elapsed();
    assert_eq!(
        got,
        Err(Failure::new(
            FailureKind::Limit,
            "the PDF took longer than 1 s to read"
        ))
    );
    assert!(elapsed >= Duration::from_secs(1), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
}

#[test]
fn run_kills_a_worker_that_does_not_read_its_input() {
    // 8 MiB does not fit in a pipe: the writer thread blocks until the worker dies.
    let pdf = vec![b'x'; 8 * 1024 * 1024];
    let started = Instant::now();
    let script = format!("printf '%s\\n' '{}'; exec sleep 100", opening(sandboxed()));
    let got = run(
        Path::new("/bin/sh"),
        &["-c", &script],
        &pdf,
        &req(),
        &limits(Duration::from_secs(1)),
    );
    assert_eq!(got.unwrap_err().reason, "the PDF took longer than 1 s to read");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn run_maps_a_crash() {
    let got = sh(
        "ulimit -c 0; cat >/dev/null; kill -SEGV $$",
        &[],
        &limits(Duration::from_secs(10)),
    );
    let failure = got.unwrap_err();
    assert_eq!(failure.kind, FailureKind::Limit);
    assert_eq!(
        failure.reason,
        "the PDF parser gave up within the worker's limits (1024 MiB of memory, 20 s of CPU)"
    );
    let got = sh(
        "ulimit -c 0; cat >/dev/null; kill -ABRT $$",
        &[],
        &limits(Duration::from_secs(10)),
    );
    assert!(got.unwrap_err().reason.starts_with("the PDF parser gave up"));
}

#[test]
fn run_maps_the_cpu_limit_and_a_kill() {
    let got = sh(
        "ulimit -c 0; cat >/dev/null; kill -XCPU $$",
        &[],
        &limits(Duration::from_secs(10)),
    );
    assert_eq!(
        got,
        Err(Failure::new(
            FailureKind::Limit,
            "the PDF needed more than 20 s of CPU time to read"
        ))
    );
    let got = sh(
        "cat >/dev/null; kill -KILL $$",
        &[],
        &limits(Duration::from_secs(10)),
    );
    assert_eq!(
        got,
        Err(Failure::new(
            FailureKind::Limit,
            "the PDF worker was killed at its CPU or memory limit"
        ))
    );
}

#[test]
fn run_refuses_a_reply_over_the_limit() {
    let limits = Limits {
        max_reply_bytes: 1024 * 1024,
        ..limits(Duration::from_secs(20))
    };
    let started = Instant::now();
    let got = sh("cat>/dev/null; head -c 100000000 /dev/zero", &[], &limits);
    assert_eq!(
        got,
        Err(Failure::new(
            FailureKind::Limit,
            "the PDF worker's answer was larger than 1 MiB"
        ))
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn run_maps_bad_exits_and_bad_replies() {
    let l = limits(Duration::from_secs(10));
    assert_eq!(
        sh("cat >/dev/null; exit 3", &[], &l),
        Err(Failure::new(
            FailureKind::Corrupt,
            "the PDF worker failed with exit code 3"
        ))
    );
    assert_eq!(
        sh("cat >/dev/null; echo hello", &[], &l),
        Err(Failure::new(
            FailureKind::Corrupt,
            "the PDF worker gave no readable answer"
        ))
    );
    assert_eq!(
        sh("cat >/dev/null", &[], &l),
        Err(Failure::new(
            FailureKind::Corrupt,
            "the PDF worker gave no answer"
        ))
    );
    // Two answers are no answer.
    let line = serde_json::to_string(&Reply::Ok(doc())).unwrap();
    assert_eq!(
        sh("cat >/dev/null; printf '%s\\n%s\\n' \"$1\" \"$1\"", &[&line], &l),
        Err(Failure::new(
            FailureKind::Corrupt,
            "the PDF worker gave no readable answer"
        ))
    );
    // A good answer from a worker that then fails is not taken.
    assert_eq!(
        sh("cat >/dev/null; printf '%s\\n' \"$1\"; exit 1", &[&line], &l),
        Err(Failure::new(
            FailureKind::Corrupt,
            "the PDF worker failed with exit code 1"
        ))
    );
}

/// What a worker that prints `first` and then copies its stdin to `copy` received once `run`
/// answered (and the copy ended), and what `run` answered. The worker answers `doc()` once it
/// has read the header and the PDF.
fn received(first: &str, pdf: &[u8], limits: &Limits) -> (Vec<u8>, Result<Document, Failure>) {
    let dir = tempfile_dir();
    let copy = dir.join("received");
    let header = header_with(limits.max_input_bytes, limits.allow_without_sandbox);
    let expected = (header.len() + pdf.len()).to_string();
    let line = serde_json::to_string(&Reply::Ok(doc())).unwrap();
    // `head` runs before the first line is out (on the shell's stdin, kept as fd 3: an
    // asynchronous command's own stdin is /dev/null) and is a child of the shell: killed with it
    // or not, it copies what arrives until EOF.
    let script =
        "exec 3<&0; head -c \"$2\" <&3 > \"$3\" & printf '%s\\n' \"$1\"; wait; printf '%s\\n' \"$4\"";
    let got = run(
        Path::new("/bin/sh"),
        &[
            "-c",
            script,
            "sh",
            first,
            &expected,
            copy.to_str().unwrap(),
            &line,
        ],
        pdf,
        &req(),
        limits,
    );
    // Give a `head` that outlived a killed shell a moment to see EOF.
    let until = Instant::now() + Duration::from_secs(5);
    let mut last = None;
    let bytes = loop {
        let bytes = std::fs::read(&copy).unwrap_or_default();
        if last.as_ref() == Some(&bytes) && bytes.len() >= header.len() || Instant::now() > until {
            break bytes;
        }
        last = Some(bytes);
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = std::fs::remove_dir_all(&dir);
    (bytes, got)
}

fn tempfile_dir() -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "pdftext-worker-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// SECURITY(T-PDF3): the document goes only to a worker that said its sandbox holds; one that
/// could not set it up gets the header alone and the call is a Failure Sandbox naming why —
/// unless `allow_without_sandbox`.
#[test]
fn run_sends_the_pdf_only_to_a_sandboxed_worker() {
    let pdf = b"%PDF-1.4 the document";
    let l = limits(Duration::from_secs(10));
    let header = header_with(l.max_input_bytes, false);
    let mut all = header.clone();
    all.extend_from_slice(pdf);

    let (got_bytes, got) = received(&opening(sandboxed()), pdf, &l);
    assert_eq!(got, Ok(doc()));
    assert_eq!(got_bytes, all);

    let (got_bytes, got) = received(&opening(unsandboxed()), pdf, &l);
    assert_eq!(
        got,
        Err(Failure::new(
            FailureKind::Sandbox,
            "the PDF worker cannot sandbox itself on this machine: the kernel refused the seccomp filter: no"
        ))
    );
    assert_eq!(
        String::from_utf8_lossy(&got_bytes),
        String::from_utf8_lossy(&header),
        "an unsandboxed worker got more than the header"
    );

    let allowed = Limits {
        allow_without_sandbox: true,
        ..l
    };
    let mut all = header_with(allowed.max_input_bytes, true);
    all.extend_from_slice(pdf);
    let (got_bytes, got) = received(&opening(unsandboxed()), pdf, &allowed);
    assert_eq!(got, Ok(doc()));
    assert_eq!(got_bytes, all);
}

/// A worker that stopped before its sandbox answers with its failure in its place; a first line
/// of another protocol is no answer.
#[test]
fn run_takes_a_failure_in_place_of_the_sandbox_line() {
    let l = limits(Duration::from_secs(10));
    let failure = Failure::new(FailureKind::Limit, "the PDF worker could not limit its memory");
    let line = serde_json::to_string(&Reply::Err(failure.clone())).unwrap();
    let run_sh = |script: &str| {
        run(
            Path::new("/bin/sh"),
            &["-c", script, "sh", &line],
            b"%PDF-1.4",
            &req(),
            &l,
        )
    };
    assert_eq!(run_sh("printf '%s\\n' \"$1\""), Err(failure));
    // Something after it: two answers.
    assert_eq!(
        run_sh("printf '%s\\n%s\\n' \"$1\" \"$1\""),
        Err(Failure::new(
            FailureKind::Corrupt,
            "the PDF worker gave no readable answer"
        ))
    );
    // An answer before any sandbox line, from a worker that then waits for the document.
    let ok = serde_json::to_string(&Reply::Ok(doc())).unwrap();
    let started = Instant::now();
    assert_eq!(
        run(
            Path::new("/bin/sh"),
            &["-c", "printf '%s\\n' \"$1\"; cat >/dev/null", "sh", &ok],
            b"%PDF-1.4",
            &req(),
            &l,
        ),
        Err(Failure::new(
            FailureKind::Corrupt,
            "the PDF worker gave no readable answer"
        ))
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "it waited for the deadline"
    );
}

#[test]
fn run_reports_a_worker_that_cannot_start() {
    let got = run(
        Path::new("/nonexistent/vaultgate"),
        &["pdf-worker"],
        b"%PDF-1.4",
        &req(),
        &Limits::default(),
    );
    let failure = got.unwrap_err();
    assert_eq!(failure.kind, FailureKind::Limit);
    assert!(
        failure.reason.starts_with("could not start the PDF worker: "),
        "{failure:?}"
    );
}

#[test]
fn run_refuses_an_oversized_input_before_spawning() {
    let limits = Limits {
        max_input_bytes: 10,
        ..Limits::default()
    };
    // The program does not exist: refusing after a spawn would say so instead.
    let got = run(
        Path::new("/nonexistent/vaultgate"),
        &["pdf-worker"],
        &[b'x'; 11],
        &req(),
        &limits,
    );
    assert_eq!(
        got,
        Err(Failure::new(
            FailureKind::Limit,
            "the PDF is larger than 10 bytes"
        ))
    );
}

#[test]
fn run_from_many_threads_at_once() {
    let line = serde_json::to_string(&Reply::Ok(doc())).unwrap();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..6)
            .map(|_| {
                scope.spawn(|| {
                    sh(
                        "cat >/dev/null; printf '%s\\n' \"$1\"",
                        &[&line],
                        &limits(Duration::from_secs(20)),
                    )
                })
            })
            .collect();
        for handle in handles {
            assert_eq!(handle.join().unwrap(), Ok(doc()));
        }
    });
}

#[test]
fn sizes_and_durations_for_people() {
    assert_eq!(super::size(64 * 1024 * 1024), "64 MiB");
    assert_eq!(super::size(1536 * 1024), "1.5 MiB");
    assert_eq!(super::size(100), "100 bytes");
    assert_eq!(super::seconds(Duration::from_secs(30)), "30 s");
    assert_eq!(super::seconds(Duration::from_millis(1500)), "1.5 s");
}
