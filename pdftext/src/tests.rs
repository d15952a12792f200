//! Tests of the extraction (in this process: the documents here are built by the tests).
#![allow(clippy::unwrap_used)]

use std::io::Write as _;
use std::time::{Duration, Instant};

use crate::build::{DEMO_PAGES, text_document, text_pdf};
use crate::extract::{cut_bytes, cut_chars, normalise};
use crate::wire::{Document, Failure, FailureKind, Page, Request};

const MIB: usize = 1024 * 1024;

fn req(pages: Option<Vec<u32>>) -> Request {
    Request {
        pages,
        default_pages: 10,
        max_chars: 100_000,
        max_total_bytes: 10 * 1024 * 1024,
    }
}

fn texts(doc: &Document) -> Vec<(u32, &str)> {
    doc.pages.iter().map(|p| (p.page, p.text.as_str())).collect()
}

fn numbered(n: u32) -> Vec<u8> {
    let lines: Vec<String> = (1..=n).map(|i| format!("page {i:02} text")).collect();
    let pages: Vec<[&str; 1]> = lines.iter().map(|l| [l.as_str()]).collect();
    let refs: Vec<&[&str]> = pages.iter().map(|p| p.as_slice()).collect();
    text_pdf(&refs).unwrap()
}

/// A PDF written by hand: `objects[i]` is the body of object `i + 1`; object 1 must be the
/// catalog. Offsets and the cross-reference table are computed.
fn raw_pdf(objects: &[Vec<u8>]) -> Vec<u8> {
    let mut out = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n".to_vec();
    let mut offsets = Vec::new();
    for (i, body) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n", i + 1).as_bytes());
        out.extend_from_slice(body);
        out.extend_from_slice(b"\nendobj\n");
    }
    let xref = out.len();
    out.extend_from_slice(format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes());
    for offset in offsets {
        out.extend_from_slice(format!("{offset:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    out
}

fn stream(dict: &str, data: &[u8]) -> Vec<u8> {
    let mut body = format!("<< {dict} /Length {} >>\nstream\n", data.len()).into_bytes();
    body.extend_from_slice(data);
    body.extend_from_slice(b"\nendstream");
    body
}

/// Catalog, page tree, font and one page per content stream: objects 1..=3, then a page and
/// its content for each entry of `contents` (a content is a stream dictionary and its bytes).
fn pdf_with_contents(contents: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut objects = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        Vec::new(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_vec(),
    ];
    let mut kids = Vec::new();
    for (dict, data) in contents {
        let page = objects.len() + 1;
        kids.push(format!("{page} 0 R"));
        objects.push(
            format!(
                "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] \
                 /Resources << /Font << /F1 3 0 R >> >> /Contents {} 0 R >>",
                page + 1
            )
            .into_bytes(),
        );
        objects.push(stream(dict, data));
    }
    objects[1] = format!(
        "<< /Type /Pages /Kids [{}] /Count {} >>",
        kids.join(" "),
        kids.len()
    )
    .into_bytes();
    raw_pdf(&objects)
}

fn hello_content() -> (&'static str, Vec<u8>) {
    ("", b"BT /F1 12 Tf 72 712 Td (Hello) Tj ET".to_vec())
}

/// A zlib stream that inflates to `1 + 258 * matches` zero bytes, written directly (one fixed
/// Huffman block: a literal 0, then `matches` copies of length 258 at distance 1), so that
/// building a bomb of gigabytes costs 13 bits per 258 bytes and no compressor time.
fn zero_bomb(matches: u64) -> Vec<u8> {
    struct Bits {
        out: Vec<u8>,
        acc: u64,
        n: u32,
    }
    /// A Huffman code of `len` bits, which deflate writes most significant bit first: as a
    /// value to write least significant bit first.
    fn reversed(code: u64, len: u32) -> u64 {
        (0..len).fold(0, |acc, i| acc | (((code >> i) & 1) << (len - 1 - i)))
    }
    impl Bits {
        /// `len` bits of `value`, least significant first (deflate's bit order).
        fn put(&mut self, value: u64, len: u32) {
            self.acc |= value << self.n;
            self.n += len;
            while self.n >= 8 {
                self.out.push((self.acc & 0xff) as u8);
                self.acc >>= 8;
                self.n -= 8;
            }
        }
    }
    let mut bits = Bits {
        out: Vec::with_capacity(usize::try_from(matches * 13 / 8 + 16).unwrap()),
        acc: 0,
        n: 0,
    };
    bits.out.extend_from_slice(&[0x78, 0xda]);
    bits.put(1, 1); // BFINAL
    bits.put(1, 2); // BTYPE 01: fixed Huffman codes
    bits.put(reversed(0x30, 8), 8); // literal 0
    // Length 258 is symbol 285 (8 bits: 0xc5), no extra bits; distance 1 is code 0 (5 bits).
    let pattern = reversed(0xc5, 8) | (reversed(0, 5) << 8);
    for _ in 0..matches {
        bits.put(pattern, 13);
    }
    bits.put(reversed(0, 7), 7); // end of block
    if bits.n > 0 {
        bits.put(0, 8 - bits.n);
    }
    // Adler-32 of n zero bytes: a stays 1, b grows by 1 per byte.
    let total = 1 + 258 * matches;
    let adler = ((total % 65521) << 16) | 1;
    bits.out
        .extend_from_slice(&u32::try_from(adler).unwrap().to_be_bytes());
    bits.out
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

fn encrypted(user_password: &str, version: u8) -> Vec<u8> {
    let mut doc = text_document(&[&["Secret text"]]);
    let key = [7u8; 32];
    let state = match version {
        2 => lopdf::EncryptionState::try_from(lopdf::EncryptionVersion::V2 {
            document: &doc,
            owner_password: "owner",
            user_password,
            key_length: 128,
            permissions: lopdf::Permissions::all(),
        }),
        5 => {
            let filter: std::sync::Arc<dyn lopdf::encryption::crypt_filters::CryptFilter> =
                std::sync::Arc::new(lopdf::encryption::crypt_filters::Aes256CryptFilter);
            lopdf::EncryptionState::try_from(lopdf::EncryptionVersion::V5 {
                encrypt_metadata: true,
                crypt_filters: std::collections::BTreeMap::from([(b"StdCF".to_vec(), filter)]),
                file_encryption_key: &key,
                stream_filter: b"StdCF".to_vec(),
                string_filter: b"StdCF".to_vec(),
                owner_password: "owner",
                user_password,
                permissions: lopdf::Permissions::all(),
            })
        }
        _ => unreachable!(),
    }
    .unwrap();
    doc.encrypt(&state).unwrap();
    let mut out = Vec::new();
    doc.save_to(&mut out).unwrap();
    out
}

fn assert_failure(result: Result<Document, Failure>, kind: FailureKind) -> Failure {
    match result {
        Err(failure) => {
            assert_eq!(failure.kind, kind, "{failure:?}");
            failure
        }
        Ok(doc) => panic!("expected a {kind:?} failure, got {doc:?}"),
    }
}

#[test]
fn one_page_with_known_text() {
    let pdf = text_pdf(&[&["Hello, vault."]]).unwrap();
    let doc = crate::extract(&pdf, &req(None)).unwrap();
    assert_eq!(
        doc,
        Document {
            page_count: 1,
            pages: vec![Page {
                page: 1,
                text: "Hello, vault.".into(),
                truncated: false,
                error: None
            }],
            truncated: false,
        }
    );
}

#[test]
fn hand_written_content_stream_is_read() {
    let pdf = pdf_with_contents(&[hello_content()]);
    let doc = crate::extract(&pdf, &req(None)).unwrap();
    assert_eq!(texts(&doc), vec![(1, "Hello")]);
}

#[test]
fn default_is_the_first_ten_pages() {
    let pdf = numbered(30);
    let doc = crate::extract(&pdf, &req(None)).unwrap();
    assert_eq!(doc.page_count, 30);
    let expected: Vec<(u32, String)> = (1..=10).map(|i| (i, format!("page {i:02} text"))).collect();
    let got: Vec<(u32, String)> = doc.pages.iter().map(|p| (p.page, p.text.clone())).collect();
    assert_eq!(got, expected);
    // Pages left out because they were not asked for do not make the document truncated.
    assert!(!doc.truncated);

    let mut all = req(None);
    all.default_pages = 50;
    let doc = crate::extract(&pdf, &all).unwrap();
    assert_eq!(doc.pages.len(), 30);
    assert_eq!(doc.pages[29].text, "page 30 text");
}

#[test]
fn page_selection_is_sorted_deduplicated_and_bounded() {
    let pdf = numbered(30);
    let doc = crate::extract(&pdf, &req(Some(vec![30, 5, 3, 3, 0, 31, 100, 5]))).unwrap();
    assert_eq!(doc.page_count, 30);
    assert_eq!(
        texts(&doc),
        vec![(3, "page 03 text"), (5, "page 05 text"), (30, "page 30 text")]
    );
    assert!(!doc.truncated);

    let past_the_end = crate::extract(&pdf, &req(Some(vec![31, 40]))).unwrap();
    assert_eq!(past_the_end.page_count, 30);
    assert!(past_the_end.pages.is_empty());
    assert!(!past_the_end.truncated);

    let nothing = crate::extract(&pdf, &req(Some(vec![]))).unwrap();
    assert!(nothing.pages.is_empty());
}

#[test]
fn max_chars_cuts_on_a_char_boundary() {
    let pdf = text_pdf(&[&["café crème"], &["short"]]).unwrap();
    let mut r = req(None);
    r.max_chars = 4;
    let doc = crate::extract(&pdf, &r).unwrap();
    assert_eq!(
        doc.pages,
        vec![
            Page {
                page: 1,
                text: "café".into(),
                truncated: true,
                error: None
            },
            Page {
                page: 2,
                text: "shor".into(),
                truncated: true,
                error: None
            },
        ]
    );
    assert!(doc.truncated);

    r.max_chars = 5;
    let doc = crate::extract(&pdf, &r).unwrap();
    assert_eq!(texts(&doc), vec![(1, "café "), (2, "short")]);
    assert!(doc.pages[0].truncated);
    assert!(!doc.pages[1].truncated);
    assert!(doc.truncated);

    r.max_chars = 10;
    let doc = crate::extract(&pdf, &r).unwrap();
    assert_eq!(texts(&doc), vec![(1, "café crème"), (2, "short")]);
    assert!(!doc.truncated);
}

#[test]
fn total_budget_leaves_out_later_pages() {
    // Every page's text is 12 bytes.
    let pdf = numbered(30);
    let mut r = req(None);
    r.max_total_bytes = 30;
    let doc = crate::extract(&pdf, &r).unwrap();
    assert_eq!(
        doc.pages,
        vec![
            Page {
                page: 1,
                text: "page 01 text".into(),
                truncated: false,
                error: None
            },
            Page {
                page: 2,
                text: "page 02 text".into(),
                truncated: false,
                error: None
            },
            Page {
                page: 3,
                text: "page 0".into(),
                truncated: true,
                error: None
            },
        ]
    );
    assert!(doc.truncated);

    // A budget spent exactly by the last page asked for truncates nothing.
    r.max_total_bytes = 36;
    r.pages = Some(vec![1, 2, 3]);
    let doc = crate::extract(&pdf, &r).unwrap();
    assert_eq!(doc.pages.len(), 3);
    assert!(!doc.truncated);
    assert!(doc.pages.iter().all(|p| !p.truncated));

    // The same budget with more pages asked for leaves the rest out.
    r.pages = None;
    let doc = crate::extract(&pdf, &r).unwrap();
    assert_eq!(doc.pages.len(), 3);
    assert!(doc.truncated);
    assert!(doc.pages.iter().all(|p| !p.truncated));

    r.max_total_bytes = 0;
    let doc = crate::extract(&pdf, &r).unwrap();
    assert!(doc.pages.is_empty());
    assert!(doc.truncated);
    assert_eq!(doc.page_count, 30);
}

#[test]
fn budget_cuts_on_a_char_boundary() {
    let pdf = text_pdf(&[&["café"]]).unwrap();
    let mut r = req(None);
    r.max_total_bytes = 4; // "caf" is 3 bytes, "é" 2 more
    let doc = crate::extract(&pdf, &r).unwrap();
    assert_eq!(texts(&doc), vec![(1, "caf")]);
    assert!(doc.pages[0].truncated);
    assert!(doc.truncated);
}

#[test]
fn a_file_cut_in_half_is_corrupt() {
    let pdf = text_pdf(&[&["first page"], &["second page"], &["third page"]]).unwrap();
    let half = &pdf[..pdf.len() / 2];
    assert_failure(crate::extract(half, &req(None)), FailureKind::Corrupt);
}

#[test]
fn garbage_is_corrupt() {
    let not_a_pdf = assert_failure(
        crate::extract(b"this is not a PDF, only text", &req(None)),
        FailureKind::Corrupt,
    );
    assert_eq!(not_a_pdf.reason, "the file is not a PDF");
    assert_failure(crate::extract(b"", &req(None)), FailureKind::Corrupt);
    let noise: Vec<u8> = (0..64 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    assert_failure(crate::extract(&noise, &req(None)), FailureKind::Corrupt);
    let mut header_then_noise = b"%PDF-1.7\n".to_vec();
    header_then_noise.extend_from_slice(&noise);
    assert_failure(
        crate::extract(&header_then_noise, &req(None)),
        FailureKind::Corrupt,
    );
}

#[test]
fn a_pdf_without_pages_is_corrupt() {
    let pdf = raw_pdf(&[
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [] /Count 0 >>".to_vec(),
    ]);
    let failure = assert_failure(crate::extract(&pdf, &req(None)), FailureKind::Corrupt);
    assert_eq!(failure.reason, "the PDF has no pages");
}

#[test]
fn a_user_password_makes_it_encrypted() {
    for version in [2, 5] {
        let pdf = encrypted("user-secret", version);
        let failure = assert_failure(crate::extract(&pdf, &req(None)), FailureKind::Encrypted);
        assert_eq!(failure.reason, "the PDF is encrypted");
    }
}

#[test]
fn an_empty_user_password_is_read() {
    for version in [2, 5] {
        let pdf = encrypted("", version);
        // It is encrypted on disk: the text is not there in the clear.
        assert!(!pdf.windows(6).any(|w| w == b"Secret"));
        let doc = crate::extract(&pdf, &req(None)).unwrap();
        assert_eq!(texts(&doc), vec![(1, "Secret text")], "V{version}");
    }
}

#[test]
fn deeply_nested_arrays_do_not_hang() {
    let depth = 100_000;
    let mut nested = vec![b'['; depth];
    nested.extend(std::iter::repeat_n(b']', depth));

    // In an object the page refers to.
    let mut objects = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        b"<< /Type /Page /Parent 2 0 R /Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R /Extra 6 0 R >>"
            .to_vec(),
        stream("", b"BT /F1 12 Tf 72 712 Td (Hello) Tj ET"),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_vec(),
    ];
    objects.push(nested.clone());
    let started = Instant::now();
    let in_object = crate::extract(&raw_pdf(&objects), &req(None));
    assert!(started.elapsed() < Duration::from_secs(20));
    if let Ok(doc) = &in_object {
        assert_eq!(texts(doc), vec![(1, "Hello")]);
    }

    // In the content stream itself, as an operand of TJ.
    let mut content = b"BT /F1 12 Tf 72 712 Td ".to_vec();
    content.extend_from_slice(&nested);
    content.extend_from_slice(b" TJ (after) Tj ET");
    let started = Instant::now();
    let in_content = crate::extract(&pdf_with_contents(&[("", content)]), &req(None));
    assert!(started.elapsed() < Duration::from_secs(20));
    match in_content {
        Ok(doc) => assert!(doc.pages[0].text.len() < 1000),
        Err(failure) => assert_eq!(failure.kind, FailureKind::Corrupt),
    }

    // And as the whole file after the header.
    let mut file = b"%PDF-1.4\n1 0 obj\n".to_vec();
    file.extend_from_slice(&nested);
    file.extend_from_slice(b"\nendobj\ntrailer\n<< /Root 1 0 R >>\n%%EOF\n");
    let started = Instant::now();
    assert_failure(crate::extract(&file, &req(None)), FailureKind::Corrupt);
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn the_bomb_builder_inflates_to_zeros() {
    use std::io::Read as _;
    let bomb = zero_bomb(1000);
    let mut out = Vec::new();
    flate2::read::ZlibDecoder::new(bomb.as_slice())
        .read_to_end(&mut out)
        .unwrap();
    assert_eq!(out.len(), 1 + 258 * 1000);
    assert!(out.iter().all(|&b| b == 0));
}

#[test]
fn a_zip_bomb_content_stream_is_refused_not_inflated() {
    // 4 GiB of zeros, deflated twice: about 50 KB in the file.
    let inner = zero_bomb(4 * 1024 * MIB as u64 / 258);
    let outer = zlib(&inner);
    assert!(outer.len() < 64 * 1024, "{} bytes", outer.len());
    let pdf = pdf_with_contents(&[("/Filter [/FlateDecode /FlateDecode]", outer)]);
    let started = Instant::now();
    let failure = assert_failure(crate::extract(&pdf, &req(None)), FailureKind::Limit);
    assert_eq!(failure.reason, "a stream in the PDF inflates to more than 64 MiB");
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn a_bomb_page_next_to_a_good_one_is_empty() {
    // 256 MiB of zeros in one layer: about 1.7 MB in the file.
    let bomb = zero_bomb(256 * MIB as u64 / 258);
    let pdf = pdf_with_contents(&[hello_content(), ("/Filter /FlateDecode", bomb)]);
    let doc = crate::extract(&pdf, &req(None)).unwrap();
    assert_eq!(doc.page_count, 2);
    assert_eq!(texts(&doc), vec![(1, "Hello"), (2, "")]);
}

#[test]
fn a_bomb_in_an_object_stream_is_refused_while_loading() {
    let bomb = zero_bomb(256 * MIB as u64 / 258);
    let mut objects = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        b"<< /Type /Page /Parent 2 0 R /Contents 4 0 R >>".to_vec(),
        stream("", b"BT ET"),
    ];
    objects.push(stream("/Type /ObjStm /N 1 /First 4 /Filter /FlateDecode", &bomb));
    let started = Instant::now();
    let result = crate::extract(&raw_pdf(&objects), &req(None));
    assert!(started.elapsed() < Duration::from_secs(30));
    // lopdf decodes object streams eagerly, while loading: the whole document is refused.
    assert_eq!(
        result,
        Err(Failure::new(
            FailureKind::Limit,
            "a stream in the PDF inflates to more than 64 MiB"
        ))
    );
}

#[test]
fn a_bomb_in_the_cross_reference_stream_is_a_limit() {
    let bomb = zero_bomb(256 * MIB as u64 / 258);
    let mut pdf = b"%PDF-1.5\n".to_vec();
    let offset = pdf.len();
    pdf.extend_from_slice(b"1 0 obj\n");
    pdf.extend_from_slice(
        format!(
            "<< /Type /XRef /Size 1 /W [1 1 1] /Root 1 0 R /Filter /FlateDecode /Length {} >>\nstream\n",
            bomb.len()
        )
        .as_bytes(),
    );
    pdf.extend_from_slice(&bomb);
    pdf.extend_from_slice(format!("\nendstream\nendobj\nstartxref\n{offset}\n%%EOF").as_bytes());
    let started = Instant::now();
    let result = crate::extract(&pdf, &req(None));
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(
        result,
        Err(Failure::new(
            FailureKind::Limit,
            "a stream in the PDF inflates to more than 64 MiB"
        ))
    );
}

#[test]
fn normalisation_is_light() {
    assert_eq!(normalise("a  \r\nb\t \rc"), "a\nb\nc");
    assert_eq!(
        normalise("\n\n  \nfirst\n\n\n\n  \nsecond\n\n"),
        "first\n\nsecond"
    );
    assert_eq!(
        normalise("nul\0 bell\u{7} esc\u{1b} del\u{7f} c1\u{85}."),
        "nul bell esc del c1."
    );
    assert_eq!(
        normalise("\tindented\n\ttab\tinside"),
        "\tindented\n\ttab\tinside"
    );
    assert_eq!(normalise("unicode stays: é ✓ 漢字"), "unicode stays: é ✓ 漢字");
    assert_eq!(normalise(""), "");
    assert_eq!(normalise(" \n\t\n"), "");
}

#[test]
fn control_characters_in_a_pdf_string_are_dropped() {
    let content = b"BT /F1 12 Tf 72 712 Td (A\\000B\\007C\\014D) Tj ET".to_vec();
    let doc = crate::extract(&pdf_with_contents(&[("", content)]), &req(None)).unwrap();
    assert_eq!(texts(&doc), vec![(1, "ABCD")]);
}

#[test]
fn cutting_helpers() {
    let mut s = String::from("añb");
    assert!(!cut_chars(&mut s, 3));
    assert!(cut_chars(&mut s, 2));
    assert_eq!(s, "añ");
    let mut s = String::from("añb");
    cut_bytes(&mut s, 2);
    assert_eq!(s, "a");
    let mut s = String::from("añb");
    cut_bytes(&mut s, 10);
    assert_eq!(s, "añb");
    let mut s = String::from("x");
    assert!(cut_chars(&mut s, 0));
    assert_eq!(s, "");
}

const DEMO_PATH: &str = "../gateway/demo/vault/reading/papers/vaultgate-demo.pdf";

fn demo_expectations(doc: &Document) {
    assert_eq!(doc.page_count, 2);
    assert!(!doc.truncated);
    assert_eq!(
        texts(doc),
        vec![
            (
                1,
                "Attention Is All You Need (demo copy)\nTransformers replace recurrence with attention."
            ),
            (2, "Page two: the vault keeps the PDF, vaultgate reads its text."),
        ]
    );
}

#[test]
fn the_demo_pdf_builder_writes_the_demo_text() {
    let pdf = text_pdf(&DEMO_PAGES).unwrap();
    assert!(pdf.len() < 4096, "{} bytes", pdf.len());
    demo_expectations(&crate::extract(&pdf, &req(None)).unwrap());
}

#[test]
fn the_committed_demo_pdf_has_the_demo_text() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(DEMO_PATH);
    let pdf = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(pdf.len() < 4096, "{} bytes", pdf.len());
    demo_expectations(&crate::extract(&pdf, &req(None)).unwrap());
}
