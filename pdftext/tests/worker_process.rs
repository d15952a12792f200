//! The parent side against a real worker process: the `pdftext-worker` binary of this crate,
//! which runs the same loop as `vaultgate pdf-worker`, limits and all.
#![allow(clippy::unwrap_used)]

use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use pdftext::build::text_pdf;
use pdftext::wire::{Failure, FailureKind, Request};
use pdftext::worker::{Limits, ProbeReport, probe_sandbox, run};

fn worker() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_pdftext-worker"))
}

fn req() -> Request {
    Request {
        pages: None,
        default_pages: 10,
        max_chars: 10_000,
        max_total_bytes: 1_000_000,
    }
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

/// One page whose content stream is `content`, deflated.
fn pdf_with_deflated_content(content: &[u8]) -> Vec<u8> {
    let data = zlib(content);
    let mut out = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    let mut object = |out: &mut Vec<u8>, body: &[u8]| {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n", offsets.len()).as_bytes());
        out.extend_from_slice(body);
        out.extend_from_slice(b"\nendobj\n");
    };
    object(&mut out, b"<< /Type /Catalog /Pages 2 0 R >>");
    object(&mut out, b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>");
    object(
        &mut out,
        b"<< /Type /Page /Parent 2 0 R /Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R >>",
    );
    let mut stream = format!("<< /Filter /FlateDecode /Length {} >>\nstream\n", data.len()).into_bytes();
    stream.extend_from_slice(&data);
    stream.extend_from_slice(b"\nendstream");
    object(&mut out, &stream);
    object(
        &mut out,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    );
    let xref = out.len();
    out.extend_from_slice(format!("xref\n0 {}\n0000000000 65535 f \n", offsets.len() + 1).as_bytes());
    for offset in &offsets {
        out.extend_from_slice(format!("{offset:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            offsets.len() + 1
        )
        .as_bytes(),
    );
    out
}

#[test]
fn a_real_worker_reads_a_pdf() {
    let pdf = text_pdf(&[&["first page"], &["second page"]]).unwrap();
    let doc = run(worker(), &[], &pdf, &req(), &Limits::default()).unwrap();
    assert_eq!(doc.page_count, 2);
    let texts: Vec<&str> = doc.pages.iter().map(|p| p.text.as_str()).collect();
    assert_eq!(texts, ["first page", "second page"]);
}

#[test]
fn a_real_worker_reports_what_is_not_a_pdf() {
    assert_eq!(
        run(worker(), &[], b"GIF89a not a pdf", &req(), &Limits::default()),
        Err(Failure::new(FailureKind::Corrupt, "the file is not a PDF"))
    );
}

#[test]
fn a_real_worker_refuses_a_zip_bomb() {
    let mut content = b"BT /F1 12 Tf 72 712 Td (Hello) Tj ET\n".to_vec();
    content.resize(100 * 1024 * 1024, b' ');
    let pdf = pdf_with_deflated_content(&content);
    assert!(pdf.len() < 200 * 1024);
    assert_eq!(
        run(worker(), &[], &pdf, &req(), &Limits::default()),
        Err(Failure::new(
            FailureKind::Limit,
            "a stream in the PDF inflates to more than 64 MiB"
        ))
    );
}

/// 60 MB of tiny operands, within the decompression limit: the content parser needs far more
/// memory for them than the worker may have, and the worker dies of it, not the machine.
#[test]
fn a_real_worker_dies_at_its_memory_limit() {
    let content = b"0 ".repeat(30 * 1024 * 1024);
    let pdf = pdf_with_deflated_content(&content);
    let limits = Limits {
        memory_bytes: 256 * 1024 * 1024,
        ..Limits::default()
    };
    let started = Instant::now();
    let got = run(worker(), &[], &pdf, &req(), &limits);
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(
        got,
        Err(Failure::new(
            FailureKind::Limit,
            "the PDF parser gave up within the worker's limits (256 MiB of memory, 20 s of CPU)"
        ))
    );
}

/// The first line of a real worker that got `header` (and no PDF yet), with the worker still
/// waiting for the document: its stdin, its stdout after that line, and the line.
#[cfg(target_os = "linux")]
struct Waiting {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    first: String,
}

#[cfg(target_os = "linux")]
fn waiting_worker(header: &str) -> Waiting {
    use std::io::BufRead as _;
    use std::process::{Command, Stdio};

    let mut child = Command::new(worker())
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(header.as_bytes()).unwrap();
    stdin.write_all(b"\n").unwrap();
    stdin.flush().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    Waiting {
        child,
        stdin,
        stdout,
        first,
    }
}

/// `Name:` lines of `/proc/<pid>/status`, e.g. `Seccomp` → `2`.
#[cfg(target_os = "linux")]
fn proc_status(pid: u32, name: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
        .trim()
        .to_owned()
}

/// SECURITY(T-PDF, T-PDF3): the worker has set its limits and entered its sandbox by the time it
/// says so on its first line, before it reads a byte of the PDF: seen from /proc while it waits
/// for the PDF bytes.
#[cfg(target_os = "linux")]
#[test]
fn a_real_worker_limits_and_sandboxes_itself_before_reading_the_pdf() {
    use std::io::Read as _;

    let mut w = waiting_worker(
        "{\"limits\":{\"memoryBytes\":268435456,\"cpuSeconds\":5,\"maxInputBytes\":1000},\
         \"request\":{\"pages\":null,\"defaultPages\":10,\"maxChars\":100,\"maxTotalBytes\":1000},\
         \"allowWithoutSandbox\":false}",
    );
    eprintln!("the worker's sandbox: {}", w.first.trim_end());
    let first: serde_json::Value = serde_json::from_str(&w.first).unwrap();
    assert_eq!(first["sandbox"]["seccomp"], true, "{first}");
    let pid = w.child.id();
    let table = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let limit = |name: &str| -> String {
        let line = table.lines().find(|l| l.starts_with(name)).unwrap();
        line[name.len()..]
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ")
    };
    // The soft limit is checked; the hard one may be lower where this process's already was.
    assert_eq!(limit("Max address space").split(' ').next(), Some("268435456"));
    assert_eq!(limit("Max cpu time"), "5 6");
    assert_eq!(limit("Max file size"), "0 0");
    assert_eq!(limit("Max core file size"), "0 0");
    assert_eq!(limit("Max open files"), "16 16");
    assert_eq!(limit("Max processes"), "0 0");
    // Mode 2 is a filter; one filter, its own, and no way back to privileges.
    assert_eq!(proc_status(pid, "Seccomp"), "2");
    assert_eq!(proc_status(pid, "Seccomp_filters"), "1");
    assert_eq!(proc_status(pid, "NoNewPrivs"), "1");

    w.stdin.write_all(b"not a pdf").unwrap();
    drop(w.stdin);
    let mut reply = String::new();
    w.stdout.read_to_string(&mut reply).unwrap();
    assert!(w.child.wait().unwrap().success());
    assert_eq!(
        reply,
        "{\"err\":{\"kind\":\"corrupt\",\"reason\":\"the file is not a PDF\"}}\n"
    );
}

// ---- the sandbox holds, and parsing still works in it -------------------------------------------

/// A PDF, the pages asked for, and the (page, text) expected.
type Case = (&'static str, Vec<u8>, Option<Vec<u32>>, Vec<(u32, String)>);

/// Real PDFs of several makings, each read in full by a sandboxed worker: the filter refuses
/// nothing parsing needs (a refused call would be a failure or a crash here).
#[test]
fn real_pdfs_of_every_making_are_read_inside_the_sandbox() {
    let demo = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../gateway/demo/vault/reading/papers/vaultgate-demo.pdf"),
    )
    .unwrap();
    let many: Vec<String> = (1..=60).map(|i| format!("page {i} of many")).collect();
    let many_pages: Vec<Vec<&str>> = many.iter().map(|p| vec![p.as_str()]).collect();
    let many_refs: Vec<&[&str]> = many_pages.iter().map(Vec::as_slice).collect();
    let mut compressed = pdftext::build::text_document(&[&["compressed one"], &["compressed two"]]);
    compressed.compress();
    let mut compressed_bytes = Vec::new();
    compressed.save_to(&mut compressed_bytes).unwrap();
    let long_line = "word ".repeat(20_000);
    let cases: Vec<Case> =
        vec![
            (
                "the committed demo PDF",
                demo,
                None,
                vec![
                (
                    1,
                    "Attention Is All You Need (demo copy)\nTransformers replace recurrence with attention."
                        .into(),
                ),
                (2, "Page two: the vault keeps the PDF, vaultgate reads its text.".into()),
            ],
            ),
            (
                "sixty pages, the last three asked for",
                text_pdf(&many_refs).unwrap(),
                Some(vec![58, 59, 60]),
                (58..=60).map(|i| (i, format!("page {i} of many"))).collect(),
            ),
            (
                "compressed streams",
                compressed_bytes,
                None,
                vec![(1, "compressed one".into()), (2, "compressed two".into())],
            ),
            (
                "a deflated hand-written content stream",
                pdf_with_deflated_content(b"BT /F1 12 Tf 72 712 Td (deflated by hand) Tj ET"),
                None,
                vec![(1, "deflated by hand".into())],
            ),
            (
                "encrypted with an empty user password (RC4)",
                encrypted_v2(),
                None,
                vec![(1, "Secret text".into())],
            ),
            (
                "a 100 kB line (the reply grows)",
                text_pdf(&[&[long_line.trim_end()]]).unwrap(),
                None,
                vec![(1, long_line.trim_end().chars().take(10_000).collect())],
            ),
        ];
    for (name, pdf, pages, want) in cases {
        let request = Request { pages, ..req() };
        let doc = run(worker(), &[], &pdf, &request, &Limits::default())
            .unwrap_or_else(|f| panic!("{name}: {f:?}"));
        let got: Vec<(u32, String)> = doc.pages.iter().map(|p| (p.page, p.text.clone())).collect();
        assert_eq!(got, want, "{name}");
    }
}

fn encrypted_v2() -> Vec<u8> {
    let mut doc = pdftext::build::text_document(&[&["Secret text"]]);
    let state = lopdf::EncryptionState::try_from(lopdf::EncryptionVersion::V2 {
        document: &doc,
        owner_password: "owner",
        user_password: "",
        key_length: 128,
        permissions: lopdf::Permissions::all(),
    })
    .unwrap();
    doc.encrypt(&state).unwrap();
    let mut out = Vec::new();
    doc.save_to(&mut out).unwrap();
    out
}

/// Deep nesting takes the parser's stack: whatever it answers, it is an answer of the worker's
/// own making (a failure or text), not a worker killed by its filter.
#[test]
fn deep_nesting_ends_as_a_failure_inside_the_sandbox() {
    let depth = 200_000;
    let mut content = b"BT /F1 12 Tf 72 712 Td ".to_vec();
    content.extend(std::iter::repeat_n(b'[', depth));
    content.extend(std::iter::repeat_n(b']', depth));
    content.extend_from_slice(b" TJ (after) Tj ET");
    let got = run(
        worker(),
        &[],
        &pdf_with_deflated_content(&content),
        &req(),
        &Limits::default(),
    );
    match got {
        Ok(doc) => assert_eq!(doc.page_count, 1),
        Err(f) => assert!(
            f.kind == FailureKind::Corrupt || f.reason.starts_with("the PDF parser gave up"),
            "{f:?}"
        ),
    }
}

// ---- the probe: what the sandbox refuses, and that the same works without it ----------------------

/// `pdftext-worker --probe ARGS`: its report and whatever else it printed (an exec'd program's
/// output).
fn probe(args: &[&str]) -> (Option<ProbeReport>, String) {
    let out = std::process::Command::new(worker())
        .arg("--probe")
        .args(args)
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let report = text
        .lines()
        .last()
        .and_then(|l| serde_json::from_str::<ProbeReport>(l).ok());
    (report, text)
}

/// Sandboxed, ACTION fails with EPERM (or EACCES); with `--no-sandbox` the very same works.
fn refused_in_the_sandbox_only(action: &[&str]) {
    let (report, text) = probe(action);
    let report = report.unwrap_or_else(|| panic!("{action:?}: no report: {text}"));
    assert!(report.sandbox.seccomp, "{action:?}: {report:?}");
    assert_eq!(
        report.ok,
        Some(false),
        "{action:?} worked inside the sandbox: {report:?}"
    );
    assert!(
        matches!(report.errno, Some(1 | 13)),
        "{action:?}: not EPERM or EACCES: {report:?}"
    );

    let mut unconfined = vec!["--no-sandbox"];
    unconfined.extend_from_slice(action);
    let (report, text) = probe(&unconfined);
    let report = report.unwrap_or_else(|| panic!("{action:?}: no report: {text}"));
    assert!(!report.sandbox.seccomp);
    assert_eq!(
        report.ok,
        Some(true),
        "{action:?} failed even without the sandbox, so its refusal proves nothing: {report:?}"
    );
}

#[test]
fn the_sandbox_refuses_a_socket_and_a_connection() {
    refused_in_the_sandbox_only(&["socket"]);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    refused_in_the_sandbox_only(&["connect", &addr]);
}

#[test]
fn the_sandbox_refuses_to_open_any_file() {
    let dir = std::env::temp_dir().join(format!("pdftext-probe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let note = dir.join("note.md");
    std::fs::write(&note, "# a note beside the PDF\n").unwrap();
    refused_in_the_sandbox_only(&["open", note.to_str().unwrap()]);
    refused_in_the_sandbox_only(&["open", "/etc/passwd"]);
    refused_in_the_sandbox_only(&["open", "/proc/self/status"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_sandbox_refuses_a_new_process_and_another_program() {
    refused_in_the_sandbox_only(&["spawn", "/bin/true"]);
    // exec: the program replaces the probe, so without the sandbox it is the program that answers.
    let (report, _) = probe(&["exec", "/bin/echo", "exec ran"]);
    let report = report.unwrap();
    assert_eq!(report.ok, Some(false), "{report:?}");
    assert!(matches!(report.errno, Some(1 | 13)), "{report:?}");
    let (report, text) = probe(&["--no-sandbox", "exec", "/bin/echo", "exec ran"]);
    assert!(report.is_none(), "{text}");
    assert_eq!(text, "exec ran\n");
}

/// What `doctor` asks: a plain probe, through the parent side.
#[test]
fn the_plain_probe_reports_the_sandbox_in_force() {
    let status = probe_sandbox(worker(), &[], Duration::from_secs(10)).unwrap();
    eprintln!("{}", status.describe());
    assert!(status.in_force(), "{status:?}");
    let bad = probe_sandbox(Path::new("/nonexistent/worker"), &[], Duration::from_secs(10));
    assert!(bad.unwrap_err().starts_with("could not start the PDF worker"));
}
