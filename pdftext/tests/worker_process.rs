//! The parent side against a real worker process: the `pdftext-worker` binary of this crate,
//! which runs the same loop as `vaultgate pdf-worker`, limits and all.
#![allow(clippy::unwrap_used)]

use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use pdftext::build::text_pdf;
use pdftext::wire::{Failure, FailureKind, Request};
use pdftext::worker::{Limits, run};

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

/// The worker has set its limits by the time it reads the PDF: seen from /proc while it waits
/// for the PDF bytes.
#[cfg(target_os = "linux")]
#[test]
fn a_real_worker_limits_itself_before_reading_the_pdf() {
    use std::io::Read as _;
    use std::process::{Command, Stdio};

    let mut child = Command::new(worker())
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(
            b"{\"limits\":{\"memoryBytes\":268435456,\"cpuSeconds\":5,\"maxInputBytes\":1000},\
              \"request\":{\"pages\":null,\"defaultPages\":10,\"maxChars\":100,\"maxTotalBytes\":1000}}\n",
        )
        .unwrap();
    stdin.flush().unwrap();
    let path = format!("/proc/{}/limits", child.id());
    let limit = |table: &str, name: &str| -> String {
        let line = table.lines().find(|l| l.starts_with(name)).unwrap();
        line[name.len()..]
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ")
    };
    let started = Instant::now();
    let table = loop {
        let table = std::fs::read_to_string(&path).unwrap();
        // The address space is the last limit the worker sets.
        if limit(&table, "Max address space").starts_with("268435456 ")
            || started.elapsed() > Duration::from_secs(10)
        {
            break table;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    // The soft limit is checked; the hard one may be lower where this process's already was.
    assert_eq!(
        limit(&table, "Max address space").split(' ').next(),
        Some("268435456")
    );
    assert_eq!(limit(&table, "Max cpu time"), "5 6");
    assert_eq!(limit(&table, "Max file size"), "0 0");
    assert_eq!(limit(&table, "Max core file size"), "0 0");
    assert_eq!(limit(&table, "Max open files"), "16 16");
    assert_eq!(limit(&table, "Max processes"), "0 0");

    drop(stdin);
    let mut reply = String::new();
    child.stdout.take().unwrap().read_to_string(&mut reply).unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(
        reply,
        "{\"err\":{\"kind\":\"corrupt\",\"reason\":\"the file is not a PDF\"}}\n"
    );
}
