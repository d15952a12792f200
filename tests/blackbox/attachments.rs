//! docs/contract.md#notes-as-data-and-attachments `list_attachments` and `read_attachment_text` (with the docs/contract.md#limits-and-pagination limits) through the real
//! binary: PDFs built here with lopdf or by hand, one page and many, the opt-in switch followed by
//! a running server, every refusal with its code and reason, hostile PDFs (deep nesting, cyclic
//! page trees, decompression bombs, huge streams) that must neither hang nor grow the server nor
//! leave a worker behind, and the recursive, sorted, policy-filtered listing with its media types.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use lopdf::{Document, EncryptionState, EncryptionVersion, Object, Permissions, Stream, dictionary};
use rmcp::ServiceExt;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

use crate::util::{Client, Env, Reply, bin, copy_tree, fixture};

const MIB: u64 = 1024 * 1024;
const READ: &str = "read_attachment_text";
const LIST: &str = "list_attachments";

// ---- building PDFs ---------------------------------------------------------------------------------

/// The content stream of one page showing `text` (no parentheses or backslashes in it).
fn page_content(text: &str) -> Vec<u8> {
    format!("BT /F1 12 Tf 72 712 Td ({text}) Tj ET").into_bytes()
}

/// A lopdf document with one page per entry of `pages`, each showing its text in Helvetica.
fn document(pages: &[String]) -> Document {
    let mut doc = Document::with_version("1.5");
    let pages_id = doc.new_object_id();
    let font_id = doc.add_object(dictionary! {
        "Type" => "Font",
        "Subtype" => "Type1",
        "BaseFont" => "Helvetica",
    });
    let resources_id = doc.add_object(dictionary! {
        "Font" => dictionary! { "F1" => font_id },
    });
    let kids: Vec<Object> = pages
        .iter()
        .map(|text| {
            let content_id = doc.add_object(Stream::new(dictionary! {}, page_content(text)));
            doc.add_object(dictionary! {
                "Type" => "Page",
                "Parent" => pages_id,
                "Contents" => content_id,
            })
            .into()
        })
        .collect();
    doc.objects.insert(
        pages_id,
        Object::Dictionary(dictionary! {
            "Type" => "Pages",
            "Kids" => kids,
            "Count" => i64::try_from(pages.len()).unwrap(),
            "Resources" => resources_id,
            "MediaBox" => vec![0.into(), 0.into(), 612.into(), 792.into()],
        }),
    );
    let catalog_id = doc.add_object(dictionary! {
        "Type" => "Catalog",
        "Pages" => pages_id,
    });
    doc.trailer.set("Root", catalog_id);
    doc
}

fn save(mut doc: Document) -> Vec<u8> {
    let mut out = Vec::new();
    doc.save_to(&mut out).unwrap();
    out
}

fn pdf(pages: &[String]) -> Vec<u8> {
    save(document(pages))
}

/// `n` pages, page N showing "page N marker".
fn numbered(n: usize) -> Vec<u8> {
    pdf(&(1..=n).map(|i| format!("page {i} marker")).collect::<Vec<_>>())
}

/// A one-page PDF encrypted (RC4, revision 2) with a user password: the empty password opens
/// nothing.
fn encrypted() -> Vec<u8> {
    let mut doc = document(&["top secret text".into()]);
    doc.trailer.set(
        "ID",
        Object::Array(vec![
            Object::string_literal(b"0123456789abcdef".to_vec()),
            Object::string_literal(b"0123456789abcdef".to_vec()),
        ]),
    );
    let state = EncryptionState::try_from(EncryptionVersion::V1 {
        document: &doc,
        owner_password: "owner-pass",
        user_password: "user-pass",
        permissions: Permissions::PRINTABLE,
    })
    .unwrap();
    doc.encrypt(&state).unwrap();
    let bytes = save(doc);
    assert!(
        bytes.windows(8).any(|w| w == b"/Encrypt"),
        "the test PDF is encrypted"
    );
    bytes
}

/// A PDF written by hand from raw object bodies (object N is `objects[N-1]`; the catalog is
/// object 1), with a correct cross-reference table: for what lopdf would refuse to write.
fn raw_pdf(objects: &[Vec<u8>]) -> Vec<u8> {
    let mut out = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n".to_vec();
    let mut offsets = Vec::new();
    for (i, body) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend(format!("{} 0 obj\n", i + 1).as_bytes());
        out.extend(body);
        out.extend(b"\nendobj\n");
    }
    let xref = out.len();
    out.extend(format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes());
    for o in offsets {
        out.extend(format!("{o:010} 00000 n \n").as_bytes());
    }
    out.extend(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    out
}

fn stream_object(dict_extra: &str, data: &[u8]) -> Vec<u8> {
    let mut body = format!("<< /Length {}{dict_extra} >>\nstream\n", data.len()).into_bytes();
    body.extend(data);
    body.extend(b"\nendstream");
    body
}

/// One page by hand: catalog, page tree, font, page (with `page_extra` in its dictionary) and the
/// content stream (with `stream_extra` in its dictionary).
fn raw_one_page(page_extra: &[u8], stream_extra: &str, content: &[u8]) -> Vec<u8> {
    let mut page = b"<< /Type /Page /Parent 2 0 R /Contents 5 0 R ".to_vec();
    page.extend(page_extra);
    page.extend(b" >>");
    raw_pdf(&[
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [4 0 R] /Count 1 /Resources << /Font << /F1 3 0 R >> >> /MediaBox [0 0 612 792] >>"
            .to_vec(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_vec(),
        page,
        stream_object(stream_extra, content),
    ])
}

/// Deflate's bits, least significant first; Huffman codes most significant bit first.
struct Bits {
    out: Vec<u8>,
    acc: u8,
    n: u8,
}

impl Bits {
    fn put(&mut self, value: u32, count: u8) {
        for i in 0..count {
            self.acc |= (((value >> i) & 1) as u8) << self.n;
            self.n += 1;
            if self.n == 8 {
                self.out.push(self.acc);
                self.acc = 0;
                self.n = 0;
            }
        }
    }
    fn code(&mut self, code: u32, len: u8) {
        for i in (0..len).rev() {
            self.put((code >> i) & 1, 1);
        }
    }
}

/// A zlib stream of `1 + 1032 * zero_bytes + 258` NUL bytes in about `zero_bytes` bytes: one
/// dynamic-Huffman block whose length-258 code (285) and distance-1 code are both one bit `0`,
/// so every zero byte of the body is four 258-byte copies (deflate's best ratio, ~1032:1).
fn zlib_bomb(zero_bytes: usize) -> Vec<u8> {
    let mut b = Bits {
        out: vec![0x78, 0x9c],
        acc: 0,
        n: 0,
    };
    b.put(1, 1); // BFINAL
    b.put(2, 2); // dynamic Huffman
    b.put(29, 5); // HLIT: 286 literal/length codes
    b.put(1, 5); // HDIST: 2 distance codes
    b.put(15, 4); // HCLEN: all 19 code-length codes (also makes the header end on a byte)
    // Code-length code lengths in RFC 1951 order: 18 → 1 bit, 1 and 2 → 2 bits, others unused.
    for sym in [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15] {
        b.put(
            match sym {
                18 => 1,
                1 | 2 => 2,
                _ => 0,
            },
            3,
        );
    }
    let (z18, one, two) = ((0, 1), (2, 2), (3, 2));
    // Literal/length lengths: 0 → 2, 1..=255 → 0, 256 → 2, 257..=284 → 0, 285 → 1.
    b.code(two.0, two.1);
    b.code(z18.0, z18.1);
    b.put(127, 7); // 138 zeros
    b.code(z18.0, z18.1);
    b.put(106, 7); // 117 zeros
    b.code(two.0, two.1);
    b.code(z18.0, z18.1);
    b.put(17, 7); // 28 zeros
    b.code(one.0, one.1);
    // Distance lengths: 0 → 1, 1 → 1.
    b.code(one.0, one.1);
    b.code(one.0, one.1);
    // Canonical codes: 285 → 0, literal 0 → 10, end of block → 11; distance 1 → 0.
    b.code(0b10, 2); // one literal NUL
    b.put(0, 2); // one copy: the header is now byte-aligned
    assert_eq!(b.n, 0, "the bomb's header ends on a byte");
    b.out.resize(b.out.len() + zero_bytes, 0);
    b.code(0b11, 2); // end of block
    b.put(0, 6);
    let len = 1 + 258 * (1 + 4 * zero_bytes as u64);
    let adler = ((len % 65521) << 16) | 1;
    b.out.extend((adler as u32).to_be_bytes());
    b.out
}

/// `data` deflated by lopdf (zlib, level 9).
fn deflate(data: Vec<u8>) -> Vec<u8> {
    let mut s = Stream::new(dictionary! {}, data);
    s.compress().unwrap();
    assert!(s.dict.get(b"Filter").is_ok(), "lopdf compressed it");
    s.content
}

// ---- the vault and the server ----------------------------------------------------------------------

/// A fresh home whose `basic` vault was registered with `vault add --pdf-text`.
fn pdf_env() -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let vault = tmp.path().join("vault");
    copy_tree(&fixture("basic"), &vault);
    let env = Env { tmp, home, vault };
    env.ok(&["init"]);
    env.ok(&[
        "vault",
        "add",
        env.vault.to_str().unwrap(),
        "--id",
        "basic",
        "--pdf-text",
    ]);
    assert_eq!(
        vault_entry(&env, "basic").get("pdf_text"),
        Some(&toml::Value::Boolean(true)),
        "vault add --pdf-text writes pdf_text = true"
    );
    // Turning PDF text on is an operator change like any other: it has its audit record.
    let tail = env.ok(&["audit", "tail", "-n", "3", "--json"]);
    assert!(
        tail.contains("vault_pdf_text"),
        "vault add --pdf-text is not audited: {tail}"
    );
    env
}

fn config(env: &Env) -> toml::Table {
    std::fs::read_to_string(env.home.join("gateway.toml"))
        .unwrap()
        .parse()
        .unwrap()
}

fn vault_entry(env: &Env, id: &str) -> toml::Table {
    config(env)["vaults"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_table().unwrap().clone())
        .find(|v| v["id"].as_str() == Some(id))
        .unwrap_or_else(|| panic!("no vault {id} in gateway.toml"))
}

fn put(env: &Env, rel: &str, bytes: &[u8]) -> PathBuf {
    let p = env.vault.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, bytes).unwrap();
    p
}

/// A client of `vaultgate stdio` that knows the server's pid and checks every success against
/// the tool's declared `outputSchema`, as the official SDKs do.
struct Agent {
    client: Client,
    pid: u32,
    schemas: HashMap<String, jsonschema::Validator>,
}

impl Agent {
    async fn open(env: &Env, token: &str) -> Agent {
        let mut cmd = tokio::process::Command::new(bin());
        cmd.arg("stdio")
            .arg("--home")
            .arg(&env.home)
            .env_remove("VAULTGATE_HOME")
            .env("VAULTGATE_TOKEN", token)
            .stderr(std::process::Stdio::null());
        let transport = TokioChildProcess::new(cmd).unwrap();
        let pid = transport.id().expect("the server runs");
        let client = Client {
            inner: ().serve(transport).await.unwrap(),
        };
        let mut schemas = HashMap::new();
        for tool in client.inner.list_all_tools().await.expect("tools/list") {
            let t = serde_json::to_value(&tool).unwrap();
            if let Some(schema) = t.get("outputSchema") {
                schemas.insert(
                    t["name"].as_str().unwrap().to_owned(),
                    jsonschema::draft202012::new(schema).unwrap(),
                );
            }
        }
        Agent { client, pid, schemas }
    }

    async fn call(&self, tool: &str, args: Value) -> Reply {
        let reply = self.client.call(tool, args.clone()).await;
        if let Reply::Ok(v) = &reply {
            let schema = self
                .schemas
                .get(tool)
                .unwrap_or_else(|| panic!("{tool} declares no outputSchema"));
            let errors: Vec<String> = schema.iter_errors(v).map(|e| e.to_string()).collect();
            assert!(
                errors.is_empty(),
                "{tool}({args}) breaks its outputSchema: {errors:?}\n{v}"
            );
        }
        reply
    }

    async fn ok(&self, tool: &str, args: Value) -> Value {
        match self.call(tool, args.clone()).await {
            Reply::Ok(v) => v,
            Reply::Err(e) => panic!("{tool}({args}): expected success, got {e}"),
        }
    }

    async fn close(self) {
        self.client.close().await;
    }
}

fn err(r: Reply) -> Value {
    match r {
        Reply::Err(e) => e,
        Reply::Ok(v) => panic!("expected a refusal, got {v}"),
    }
}

/// Asserts the refusal's code and returns its message.
fn refused(r: Reply, code: &str, what: &str) -> String {
    let e = err(r);
    assert_eq!(e["code"], code, "{what}: {e}");
    e["message"].as_str().unwrap().to_owned()
}

fn pages_of(v: &Value) -> Vec<u64> {
    v["pages"]
        .as_array()
        .unwrap_or_else(|| panic!("no pages[]: {v}"))
        .iter()
        .map(|p| p["page"].as_u64().unwrap())
        .collect()
}

fn page(v: &Value, n: u64) -> &Value {
    v["pages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["page"] == n)
        .unwrap_or_else(|| panic!("no page {n}: {v}"))
}

fn text(v: &Value, n: u64) -> String {
    page(v, n)["text"].as_str().unwrap().to_owned()
}

// ---- processes --------------------------------------------------------------------------------------

/// `(ppid, state, starttime)` of a process, from `/proc/<pid>/stat`.
fn stat(pid: u32) -> Option<(u32, char, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest: Vec<&str> = s.rsplit_once(')')?.1.split_whitespace().collect();
    Some((
        rest.get(1)?.parse().ok()?,
        rest.first()?.chars().next()?,
        rest.get(19)?.parse().ok()?,
    ))
}

/// Page faults of the children `pid` has reaped (`cminflt` + `cmajflt` of `/proc/<pid>/stat`). The
/// kernel adds a child's faults when its parent reaps it, so growth across a call proves, whatever
/// the timing, that a child process ran and ended during it: a worker too quick to be seen by
/// polling still leaves this trace, and an exec'd binary always faults.
fn reaped_faults(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest: Vec<&str> = s.rsplit_once(')').unwrap().1.split_whitespace().collect();
    rest[8].parse::<u64>().unwrap() + rest[10].parse::<u64>().unwrap()
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// The resident memory of `pid` now, in bytes (`VmRSS`).
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status");
    kib * 1024
}

/// `vaultgate pdf-worker` children of `parent`: `(pid, starttime, state)`.
fn workers_of(parent: u32) -> Vec<(u32, u64, char)> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Some((ppid, state, start)) = stat(pid) else {
            continue;
        };
        if ppid == parent && (state == 'Z' || cmdline(pid).contains("pdf-worker")) {
            found.push((pid, start, state));
        }
    }
    found
}

/// Records every `pdf-worker` child of a server while it runs (polled every 2 ms). Polling can miss
/// a worker that lives only a few milliseconds, so whether a worker ran is decided by
/// [`reaped_faults`]; this watch serves to find workers left behind.
struct WorkerWatch {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<BTreeSet<(u32, u64)>>,
}

impl WorkerWatch {
    fn start(server: u32) -> WorkerWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut seen = BTreeSet::new();
            while !flag.load(Ordering::Relaxed) {
                for (pid, start, state) in workers_of(server) {
                    if state != 'Z' {
                        seen.insert((pid, start));
                    }
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            seen
        });
        WorkerWatch { stop, thread }
    }

    fn finish(self) -> BTreeSet<(u32, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

// ---- 1. pages and their text ------------------------------------------------------------------------

#[tokio::test]
async fn each_page_answers_its_own_text_the_first_ten_by_default_and_absent_pages_are_left_out() {
    let env = pdf_env();
    put(&env, "papers/one.pdf", &pdf(&["Hello from one page".into()]));
    put(&env, "papers/many.pdf", &numbered(30));
    let (_, token) = env.token("reader", "read");
    let a = Agent::open(&env, &token).await;

    let one = a
        .ok(READ, json!({"path": "papers/one.pdf", "vault": "basic"}))
        .await;
    assert_eq!(one["path"], "papers/one.pdf", "{one}");
    assert_eq!(one["pageCount"], 1, "{one}");
    assert_eq!(pages_of(&one), [1], "{one}");
    assert_eq!(text(&one, 1).trim(), "Hello from one page", "{one}");
    assert_eq!(page(&one, 1)["truncated"], false, "{one}");
    assert_eq!(one["truncated"], false, "{one}");

    // Default: the first ten pages, each with its own text and nothing of another page's.
    let first = a.ok(READ, json!({"path": "papers/many.pdf"})).await;
    assert_eq!(first["pageCount"], 30, "{first}");
    assert_eq!(pages_of(&first), (1..=10).collect::<Vec<_>>(), "{first}");
    for n in 1..=10 {
        assert_eq!(text(&first, n).trim(), format!("page {n} marker"), "{first}");
        assert_eq!(page(&first, n)["truncated"], false, "{first}");
    }
    assert_eq!(first["truncated"], false, "{first}");

    // Explicit pages: those past the end are simply absent, not an error.
    let some = a
        .ok(READ, json!({"path": "papers/many.pdf", "pages": [3, 30, 31, 99]}))
        .await;
    assert_eq!(some["pageCount"], 30, "{some}");
    let got: BTreeSet<u64> = pages_of(&some).into_iter().collect();
    assert_eq!(got, BTreeSet::from([3, 30]), "{some}");
    assert_eq!(text(&some, 3).trim(), "page 3 marker", "{some}");
    assert_eq!(text(&some, 30).trim(), "page 30 marker", "{some}");
    assert_eq!(some["truncated"], false, "{some}");
    let none = a
        .ok(READ, json!({"path": "papers/one.pdf", "pages": [2, 50]}))
        .await;
    assert_eq!(none["pageCount"], 1, "{none}");
    assert_eq!(pages_of(&none), Vec::<u64>::new(), "{none}");

    // Fifty pages is the most one may ask for.
    let fifty = a
        .ok(
            READ,
            json!({"path": "papers/many.pdf", "pages": (1..=50).collect::<Vec<_>>()}),
        )
        .await;
    assert_eq!(pages_of(&fifty).len(), 30, "{fifty}");

    // maxChars cuts a page's text to its first maxChars characters and says so, on the page and
    // at the top; a page that fits is left whole.
    let whole2 = text(&first, 2);
    let whole10 = text(&first, 10);
    let limit = whole2.chars().count();
    assert!(whole10.chars().count() > limit, "{whole2:?} {whole10:?}");
    let cut = a
        .ok(
            READ,
            json!({"path": "papers/many.pdf", "pages": [2, 10], "maxChars": limit}),
        )
        .await;
    assert_eq!(text(&cut, 2), whole2, "{cut}");
    assert_eq!(page(&cut, 2)["truncated"], false, "{cut}");
    assert_eq!(
        text(&cut, 10),
        whole10.chars().take(limit).collect::<String>(),
        "{cut}"
    );
    assert_eq!(page(&cut, 10)["truncated"], true, "{cut}");
    assert_eq!(cut["truncated"], true, "{cut}");
    let four = a
        .ok(
            READ,
            json!({"path": "papers/many.pdf", "pages": [7], "maxChars": 4}),
        )
        .await;
    assert_eq!(
        text(&four, 7),
        text(&first, 7).chars().take(4).collect::<String>(),
        "{four}"
    );
    assert_eq!(page(&four, 7)["truncated"], true, "{four}");
    assert_eq!(four["truncated"], true, "{four}");

    // Limits: refused with INVALID_ARGUMENT naming what was over, before any work.
    let over = |args: Value| {
        let a = &a;
        async move {
            let e = err(a.call(READ, args.clone()).await);
            assert_eq!(e["code"], "INVALID_ARGUMENT", "{args}: {e}");
            e["message"].as_str().unwrap().to_owned()
        }
    };
    let msg = over(json!({"path": "papers/many.pdf", "pages": (1..=51).collect::<Vec<_>>()})).await;
    assert!(msg.contains("pages") && msg.contains("limits.max_pages"), "{msg}");
    let msg = over(json!({"path": "papers/many.pdf", "pages": [1, 0]})).await;
    assert!(msg.contains("page"), "{msg}");
    let msg = over(json!({"path": "papers/many.pdf", "maxChars": 0})).await;
    assert!(msg.contains("maxChars"), "{msg}");
    let msg = over(json!({"path": "papers/many.pdf", "maxChars": 50_001})).await;
    assert!(
        msg.contains("maxChars")
            && ["50000", "50,000", "50 000", "50_000"]
                .iter()
                .any(|n| msg.contains(n)),
        "{msg}"
    );
    // A limit is checked before the file is looked at.
    let msg = over(json!({"path": "papers/missing.pdf", "maxChars": 50_001})).await;
    assert!(msg.contains("maxChars"), "{msg}");
    a.ok(
        READ,
        json!({"path": "papers/many.pdf", "pages": [1], "maxChars": 50_000}),
    )
    .await;
    a.ok(
        READ,
        json!({"path": "papers/many.pdf", "pages": [1], "maxChars": 1}),
    )
    .await;
    a.close().await;
}

/// Pages that would take the result past `max_output_bytes` are left out (the last one kept may be
/// cut, and says so), and the answer is marked truncated and stays within the limit.
#[tokio::test]
async fn pages_past_the_output_limit_are_left_out_and_marked_truncated() {
    let env = pdf_env();
    // Ten pages of 10,000 characters each: 100 kB of text, which a result carries twice.
    let pages: Vec<String> = (1..=10)
        .map(|n| format!("P{n:02} {}", "abcdefghij".repeat(1_000))[..10_000].to_owned())
        .collect();
    put(&env, "big.pdf", &pdf(&pages));
    // 150 kB for a result once the 64 KiB the server keeps for the envelope is taken off.
    let path = env.home.join("gateway.toml");
    let mut doc = config(&env);
    let cap = 64 * 1024 + 150_000;
    doc["limits"]
        .as_table_mut()
        .unwrap()
        .insert("max_output_bytes".into(), toml::Value::Integer(cap));
    std::fs::write(&path, toml::to_string(&doc).unwrap()).unwrap();

    let (_, token) = env.token("reader", "read");
    let a = Agent::open(&env, &token).await;
    let mut p = rmcp::model::CallToolRequestParams::new(READ.to_owned());
    p.arguments = Some(
        json!({"path": "big.pdf", "maxChars": 50_000})
            .as_object()
            .unwrap()
            .clone(),
    );
    let raw = a.client.inner.call_tool(p).await.unwrap();
    let block = raw.content[0].as_text().unwrap().text.clone();
    assert!(
        block.len() <= cap as usize,
        "the result is {} bytes, over max_output_bytes {cap}",
        block.len()
    );
    let v = crate::util::to_reply(raw).ok();
    assert_eq!(v["pageCount"], 10, "{}", &block[..200.min(block.len())]);
    let got = pages_of(&v);
    assert!(
        !got.is_empty() && got.len() < 10,
        "some pages fit, not all: {got:?}"
    );
    assert_eq!(
        got,
        (1..=got.len() as u64).collect::<Vec<_>>(),
        "the first pages are kept"
    );
    let summary: Vec<(u64, usize, bool)> = got
        .iter()
        .map(|n| {
            (
                *n,
                text(&v, *n).chars().count(),
                page(&v, *n)["truncated"] == true,
            )
        })
        .collect();
    for (i, n) in got.iter().enumerate() {
        let t = text(&v, *n);
        let want = &pages[*n as usize - 1];
        let last = i + 1 == got.len();
        if t.trim() == want {
            assert_eq!(page(&v, *n)["truncated"], false, "page {n} is whole: {summary:?}");
        } else {
            // Only the last page kept may be cut, to what fits; then it says so.
            assert!(
                last && !t.is_empty() && want.starts_with(t.trim_start()),
                "page {n} is neither whole nor the cut last page: (page, characters, truncated) {summary:?}"
            );
            assert_eq!(page(&v, *n)["truncated"], true, "page {n} is cut: {summary:?}");
        }
    }
    assert_eq!(v["truncated"], true, "pages were left out: {summary:?}");
    a.close().await;
}

// ---- 2. the opt-in ----------------------------------------------------------------------------------

#[tokio::test]
async fn pdf_text_is_off_until_the_vault_turns_it_on_and_a_running_server_follows_the_switch() {
    let env = Env::new();
    put(&env, "papers/one.pdf", &pdf(&["switched text".into()]));
    put(&env, "img.png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR");
    assert_ne!(
        vault_entry(&env, "basic").get("pdf_text"),
        Some(&toml::Value::Boolean(true)),
        "vault add without --pdf-text leaves it off"
    );
    let (_, token) = env.token("reader", "read");
    let a = Agent::open(&env, &token).await;

    // Off: denied, naming the setting, before the file is looked at (missing, or not a PDF).
    for path in ["papers/one.pdf", "papers/missing.pdf", "img.png"] {
        let msg = refused(
            a.call(READ, json!({"path": path})).await,
            "CAPABILITY_DENIED",
            path,
        );
        assert!(msg.contains("pdf_text"), "{path}: {msg}");
    }
    // Listing is not document text: it answers either way.
    let listed = a.ok(LIST, json!({})).await;
    assert!(
        listed["attachments"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["path"] == "papers/one.pdf"),
        "{listed}"
    );

    // On: the same session answers at once.
    let out = env.run(&["vault", "pdf-text", "basic", "on"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        !String::from_utf8_lossy(&out.stdout).trim().is_empty()
            || !String::from_utf8_lossy(&out.stderr).trim().is_empty(),
        "vault pdf-text prints what it did"
    );
    assert_eq!(
        vault_entry(&env, "basic").get("pdf_text"),
        Some(&toml::Value::Boolean(true))
    );
    let v = a.ok(READ, json!({"path": "papers/one.pdf"})).await;
    assert_eq!(text(&v, 1).trim(), "switched text", "{v}");
    assert_eq!(
        a.call(READ, json!({"path": "papers/missing.pdf"})).await.code(),
        "NOT_FOUND"
    );

    // Off again: denied again, on the same session.
    env.ok(&["vault", "pdf-text", "basic", "off"]);
    assert_ne!(
        vault_entry(&env, "basic").get("pdf_text"),
        Some(&toml::Value::Boolean(true))
    );
    let msg = refused(
        a.call(READ, json!({"path": "papers/one.pdf"})).await,
        "CAPABILITY_DENIED",
        "after off",
    );
    assert!(msg.contains("pdf_text"), "{msg}");
    // A fresh server agrees.
    let b = Agent::open(&env, &token).await;
    assert_eq!(
        b.call(READ, json!({"path": "papers/one.pdf"})).await.code(),
        "CAPABILITY_DENIED"
    );
    // An unknown vault is refused by the CLI.
    assert!(!env.run(&["vault", "pdf-text", "nope", "on"]).status.success());
    b.close().await;
    a.close().await;
}

/// Over HTTP (an rmcp Streamable HTTP client, legacy session): the same tools, and the same switch
/// followed by the running server.
#[tokio::test]
async fn http_clients_read_attachments_and_the_serving_process_follows_the_switch() {
    let env = Env::new();
    put(&env, "papers/two.pdf", &numbered(2));
    let (_, token) = env.token("web", "read");
    let srv = crate::http::Server::start(&env);
    let c = srv.client(&token).await;
    let listed = c.call(LIST, json!({"dir": "papers"})).await.ok();
    assert_eq!(
        listing(&listed),
        [(
            "papers/two.pdf".to_owned(),
            "application/pdf".to_owned(),
            numbered(2).len() as u64
        )],
        "{listed}"
    );
    let msg = refused(
        c.call(READ, json!({"path": "papers/two.pdf"})).await,
        "CAPABILITY_DENIED",
        "off",
    );
    assert!(msg.contains("pdf_text"), "{msg}");
    env.ok(&["vault", "pdf-text", "basic", "on"]);
    let v = c
        .call(READ, json!({"path": "papers/two.pdf", "pages": [2]}))
        .await
        .ok();
    assert_eq!(v["pageCount"], 2, "{v}");
    assert_eq!(text(&v, 2).trim(), "page 2 marker", "{v}");
    env.ok(&["vault", "pdf-text", "basic", "off"]);
    assert_eq!(
        c.call(READ, json!({"path": "papers/two.pdf"})).await.code(),
        "CAPABILITY_DENIED"
    );
    c.close().await;
}

/// `max_pages` lowered in `gateway.toml [limits]` is the limit applied.
#[tokio::test]
async fn a_lowered_max_pages_is_the_limit_applied() {
    let env = pdf_env();
    put(&env, "many.pdf", &numbered(12));
    let path = env.home.join("gateway.toml");
    let mut doc = config(&env);
    doc["limits"]
        .as_table_mut()
        .unwrap()
        .insert("max_pages".into(), toml::Value::Integer(5));
    std::fs::write(&path, toml::to_string(&doc).unwrap()).unwrap();
    let (_, token) = env.token("reader", "read");
    let a = Agent::open(&env, &token).await;
    let msg = refused(
        a.call(READ, json!({"path": "many.pdf", "pages": [1, 2, 3, 4, 5, 6]}))
            .await,
        "INVALID_ARGUMENT",
        "six pages",
    );
    assert!(msg.contains("limits.max_pages"), "{msg}");
    let v = a
        .ok(READ, json!({"path": "many.pdf", "pages": [8, 9, 10, 11, 12]}))
        .await;
    assert_eq!(pages_of(&v), [8, 9, 10, 11, 12], "{v}");
    a.close().await;
}

// ---- 3. refusals ------------------------------------------------------------------------------------

#[tokio::test]
async fn broken_encrypted_oversized_and_non_pdf_files_are_refused_with_their_reason() {
    let env = pdf_env();
    let good = numbered(3);
    put(&env, "good.pdf", &good);
    put(&env, "broken/truncated.pdf", &good[..good.len() / 2]);
    put(&env, "broken/garbage.pdf", b"this is not a PDF at all\n");
    put(
        &env,
        "broken/header-only.pdf",
        b"%PDF-1.7\n1 0 obj << /Type /Catalog /Pages 2 0 R\n%% nothing more",
    );
    put(&env, "broken/secret.pdf", &encrypted());
    put(
        &env,
        "img.png",
        b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01",
    );
    put(
        &env,
        "fake.pdf",
        b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01",
    );
    put(&env, ".secret/a.pdf", &good);
    // 64 MiB and one byte, sparse: a PDF header, then nothing.
    let big = put(&env, "big.pdf", b"%PDF-1.7\n");
    std::fs::File::options()
        .write(true)
        .open(&big)
        .unwrap()
        .set_len(64 * MIB + 1)
        .unwrap();
    let outside = env.tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("x.pdf"), &good).unwrap();
    std::os::unix::fs::symlink(outside.join("x.pdf"), env.vault.join("link.pdf")).unwrap();
    std::os::unix::fs::symlink("good.pdf", env.vault.join("alias.pdf")).unwrap();

    let (_, token) = env.token("reader", "read");
    let a = Agent::open(&env, &token).await;
    let read = |path: &'static str| {
        let a = &a;
        async move { a.call(READ, json!({"path": path})).await }
    };
    assert_eq!(text(&read("good.pdf").await.ok(), 1).trim(), "page 1 marker");
    // A link inside the vault reads as the file it names.
    let alias = read("alias.pdf").await.ok();
    assert_eq!(alias["path"], "alias.pdf", "{alias}");
    assert_eq!(text(&alias, 3).trim(), "page 3 marker", "{alias}");

    let truncated = refused(read("broken/truncated.pdf").await, "NOT_TEXT", "truncated");
    let garbage = refused(read("broken/garbage.pdf").await, "NOT_TEXT", "garbage");
    let header = refused(read("broken/header-only.pdf").await, "NOT_TEXT", "header only");
    let secret = refused(read("broken/secret.pdf").await, "NOT_TEXT", "encrypted");
    assert!(secret.to_lowercase().contains("encrypted"), "{secret}");
    for (what, msg) in [("truncated", &truncated), ("header only", &header)] {
        assert!(
            !msg.to_lowercase().contains("encrypted"),
            "{what}: a corrupt file is not called encrypted: {msg}"
        );
    }
    assert!(!garbage.to_lowercase().contains("encrypted"), "{garbage}");
    // Not PDFs at all: a picture, a note, a picture named .pdf.
    refused(read("img.png").await, "NOT_TEXT", "png");
    refused(read("welcome.md").await, "NOT_TEXT", "note");
    refused(read("fake.pdf").await, "NOT_TEXT", "png named .pdf");
    refused(read("missing.pdf").await, "NOT_FOUND", "missing");
    refused(read("big.pdf").await, "TOO_LARGE", "over 64 MiB");
    // Paths: refused as read_note refuses them, whether or not the file exists.
    for (path, code) in [
        ("../x.pdf", "PATH_INVALID"),
        ("/etc/x.pdf", "PATH_INVALID"),
        ("a/../good.pdf", "PATH_INVALID"),
        (".secret/a.pdf", "PATH_DENIED"),
        (".secret/none.pdf", "PATH_DENIED"),
        ("node_modules/x.pdf", "PATH_DENIED"),
        ("link.pdf", "PATH_OUTSIDE_VAULT"),
    ] {
        refused(read(path).await, code, path);
        let note = a.call("read_note", json!({"path": path})).await.code();
        assert_eq!(note, code, "read_note refuses {path} alike");
    }
    // And the server still reads.
    assert_eq!(text(&read("good.pdf").await.ok(), 3).trim(), "page 3 marker");
    a.close().await;
}

// ---- 4. hostile PDFs --------------------------------------------------------------------------------

/// What a hostile PDF may answer besides `NOT_TEXT`.
enum Expect {
    /// Anything within the limits.
    Any,
    /// Its text, cut (`truncated`).
    Cut,
    /// Page 1 with exactly this text.
    Text(&'static str),
}

struct Hostile {
    name: &'static str,
    bytes: Vec<u8>,
    pages: Vec<u64>,
    expect: Expect,
}

fn hostile(name: &'static str, bytes: Vec<u8>, expect: Expect) -> Hostile {
    Hostile {
        name,
        bytes,
        pages: vec![1, 2],
        expect,
    }
}

/// The server still reads a good PDF and a note.
async fn good(a: &Agent) {
    let v = a.ok(READ, json!({"path": "good.pdf"})).await;
    assert_eq!(text(&v, 1).trim(), "page 1 marker", "{v}");
    assert_eq!(text(&v, 2).trim(), "page 2 marker", "{v}");
    let note = a.ok("read_note", json!({"path": "welcome.md"})).await;
    assert_eq!(note["title"], "Welcome", "{note}");
}

/// Reads each hostile file through the server and asserts it is refused (`NOT_TEXT`) or answered
/// with bounded text, within 35 s; then that the server still answers a good PDF and a note, that
/// its resident memory grew by less than 32 MiB, that extraction ran in a worker child, and that
/// no worker is left behind.
async fn survives(env: &Env, files: &[Hostile]) {
    put(env, "good.pdf", &numbered(2));
    for f in files {
        put(env, f.name, &f.bytes);
    }
    let (_, token) = env.token("reader", "read");
    let a = Agent::open(env, &token).await;
    good(&a).await;
    good(&a).await;
    let before = rss(a.pid);
    let watch = WorkerWatch::start(a.pid);

    // Every file is tried (and the checks after them run) before the test fails.
    let mut failures: Vec<String> = Vec::new();
    for f in files {
        let name = f.name;
        let faults = reaped_faults(a.pid);
        let started = Instant::now();
        let reply = tokio::time::timeout(
            Duration::from_secs(60),
            a.call(READ, json!({"path": name, "pages": f.pages})),
        )
        .await
        .unwrap_or_else(|_| panic!("{name}: no answer within 60 s"));
        let took = started.elapsed();
        if reaped_faults(a.pid) == faults {
            failures.push(format!(
                "{name}: the server reaped no child while it answered: extraction must run in a worker process"
            ));
        }
        match &reply {
            Reply::Err(e) => eprintln!("{name}: {took:?}: {} {}", e["code"], e["message"]),
            Reply::Ok(v) => eprintln!(
                "{name}: {took:?}: pageCount {} pages {:?} truncated {}",
                v["pageCount"],
                pages_of(v),
                v["truncated"]
            ),
        }
        if took >= Duration::from_secs(35) {
            failures.push(format!("{name}: answered after {took:?}"));
        }
        match reply {
            Reply::Err(e) => {
                if e["code"] != "NOT_TEXT" {
                    failures.push(format!("{name}: refused with {e}, not NOT_TEXT"));
                }
            }
            Reply::Ok(v) => {
                for p in v["pages"].as_array().unwrap() {
                    let t = p["text"].as_str().unwrap();
                    if t.chars().count() > 20_000 {
                        failures.push(format!(
                            "{name}: page {} has {} characters, over the default maxChars",
                            p["page"],
                            t.chars().count()
                        ));
                    }
                    if p["truncated"] == true && v["truncated"] != true {
                        failures.push(format!(
                            "{name}: page {} is cut but the answer is not truncated",
                            p["page"]
                        ));
                    }
                }
                match f.expect {
                    Expect::Any => {}
                    Expect::Cut => {
                        if v["truncated"] != true {
                            failures.push(format!("{name}: answered uncut: pageCount {}", v["pageCount"]));
                        }
                    }
                    // Its text, or the page marked unreadable: never a blank page that looks read.
                    Expect::Text(want) => {
                        let marked = page(&v, 1)["error"].is_string() && text(&v, 1).is_empty();
                        if pages_of(&v) != [1] || (text(&v, 1).trim() != want && !marked) {
                            failures.push(format!(
                                "{name}: neither refused, nor its text ({want:?}), nor marked unreadable: {v}"
                            ));
                        }
                    }
                }
            }
        }
        assert!(
            stat(a.pid).is_some_and(|(_, s, _)| s != 'Z'),
            "{name}: the server died"
        );
        good(&a).await;
    }

    let seen = watch.finish();
    let after = rss(a.pid);
    if after >= before + 32 * MIB {
        failures.push(format!(
            "the server's VmRSS grew from {} MiB to {} MiB",
            before / MIB,
            after / MIB
        ));
    }
    // Workers end with their call (allow them a moment to be reaped).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left: Vec<_> = seen
            .iter()
            .filter(|(pid, start)| stat(*pid).is_some_and(|(_, _, s)| s == *start))
            .map(|(pid, _)| (*pid, stat(*pid).unwrap().1, cmdline(*pid)))
            .collect();
        let live: Vec<_> = workers_of(a.pid);
        if left.is_empty() && live.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            failures.push(format!(
                "workers left behind (pid, state, cmdline): {left:?}; children of the server now: {live:?}"
            ));
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    a.close().await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test]
async fn deeply_nested_and_cyclic_pdfs_are_refused_in_bounded_time_and_the_server_carries_on() {
    let env = pdf_env();
    let depth = 200_000;
    let nested = |open: &str, inner: &str, close: &str| {
        let mut s = open.repeat(depth).into_bytes();
        s.extend(inner.as_bytes());
        s.extend(close.repeat(depth).as_bytes());
        s
    };
    // Nesting in a content stream: an array of arrays as TJ's operand.
    let mut content = b"BT /F1 12 Tf 72 712 Td ".to_vec();
    content.extend(nested("[", "", "]"));
    content.extend(b" TJ ET");
    let deep_content = raw_one_page(b"", "", &content);
    // Nesting in an object: the page dictionary holds a 200,000-deep array, then a dictionary.
    let mut extra = b"/Deep ".to_vec();
    extra.extend(nested("[", "", "]"));
    let deep_array = raw_one_page(&extra, "", &page_content("under a deep array"));
    let mut extra = b"/Deep ".to_vec();
    extra.extend(nested("<< /A ", "1", " >>"));
    let deep_dict = raw_one_page(&extra, "", &page_content("under a deep dictionary"));
    // A page tree that contains itself.
    let cyclic = raw_pdf(&[
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [2 0 R 4 0 R 6 0 R] /Count 3 /Resources << /Font << /F1 3 0 R >> >> >>"
            .to_vec(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_vec(),
        b"<< /Type /Page /Parent 2 0 R /Contents 5 0 R >>".to_vec(),
        stream_object("", &page_content("in a cycle")),
        b"<< /Type /Pages /Parent 2 0 R /Kids [6 0 R 2 0 R] /Count 2 >>".to_vec(),
    ]);
    survives(
        &env,
        &[
            hostile("hostile/deep-content.pdf", deep_content, Expect::Any),
            hostile(
                "hostile/deep-array.pdf",
                deep_array,
                Expect::Text("under a deep array"),
            ),
            hostile(
                "hostile/deep-dict.pdf",
                deep_dict,
                Expect::Text("under a deep dictionary"),
            ),
            hostile("hostile/cyclic.pdf", cyclic, Expect::Any),
        ],
    )
    .await;
}

#[tokio::test]
async fn decompression_bombs_and_huge_streams_are_cut_or_refused_without_growing_the_server() {
    let env = pdf_env();
    // 2 MiB that inflate to 2 GiB of NULs.
    let bomb = zlib_bomb(2 * MIB as usize);
    let single = raw_one_page(b"", " /Filter /FlateDecode", &bomb);
    // A bomb deflated again: a few kB that inflate to 2 MiB, then to 8 GiB.
    let inner = zlib_bomb(8 * MIB as usize);
    let outer = deflate(inner);
    assert!(outer.len() < 64 * 1024, "{}", outer.len());
    let double = raw_one_page(b"", " /Filter [/FlateDecode /FlateDecode]", &outer);
    // 40 MiB of uncompressed `q` (save graphics state): twenty million nested operators.
    let huge_ops = raw_one_page(b"", "", &b"q ".repeat(20 * MIB as usize));
    // 24 MB of text shown on one page: far more than any page may answer.
    let mut shown = b"BT /F1 12 Tf 72 712 Td ".to_vec();
    let line = format!("({}) Tj\n", "abcdefghij".repeat(100));
    shown.extend(line.repeat(24_000).as_bytes());
    shown.extend(b"ET");
    let huge_text = raw_one_page(b"", "", &shown);
    // Fifty pages sharing one 12 MiB stream of six million operators: CPU for every page asked.
    let kids: String = (0..50).map(|i| format!("{} 0 R ", 4 + i)).collect();
    let mut objects = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        format!("<< /Type /Pages /Kids [{kids}] /Count 50 /Resources << /Font << /F1 3 0 R >> >> >>")
            .into_bytes(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_vec(),
    ];
    for _ in 0..50 {
        objects.push(b"<< /Type /Page /Parent 2 0 R /Contents 54 0 R >>".to_vec());
    }
    objects.push(stream_object("", &b"0 0 m ".repeat(2 * MIB as usize)));
    let heavy = raw_pdf(&objects);
    survives(
        &env,
        &[
            hostile("hostile/bomb.pdf", single, Expect::Any),
            hostile("hostile/bomb-twice.pdf", double, Expect::Any),
            hostile("hostile/huge-ops.pdf", huge_ops, Expect::Any),
            hostile("hostile/huge-text.pdf", huge_text, Expect::Cut),
            Hostile {
                name: "hostile/fifty-heavy-pages.pdf",
                bytes: heavy,
                pages: (1..=50).collect(),
                expect: Expect::Any,
            },
        ],
    )
    .await;
}

// ---- 5. list_attachments ----------------------------------------------------------------------------

/// Each listed file: path → (media type, bytes).
fn listing(v: &Value) -> Vec<(String, String, u64)> {
    v["attachments"]
        .as_array()
        .unwrap_or_else(|| panic!("no attachments[]: {v}"))
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_owned(),
                f["mediaType"].as_str().unwrap().to_owned(),
                f["bytes"].as_u64().unwrap(),
            )
        })
        .collect()
}

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0";

/// Every kind of file, and every kind that must not be listed; returns what must be, in
/// byte order of the path.
fn attachments_vault(env: &Env) -> Vec<(String, String, u64)> {
    let listed: Vec<(&str, &str, Vec<u8>)> = vec![
        ("a.pdf", "application/pdf", pdf(&["a".into()])),
        ("文档.pdf", "application/pdf", pdf(&["wen dang".into()])),
        ("img.png", "image/png", PNG.to_vec()),
        (
            "photo.jpg",
            "image/jpeg",
            b"\xff\xd8\xff\xe0\0\x10JFIF\0\x01".to_vec(),
        ),
        ("anim.gif", "image/gif", b"GIF89a\x01\0\x01\0\0\0\0;".to_vec()),
        (
            "pic.webp",
            "image/webp",
            b"RIFF\x1a\0\0\0WEBPVP8 \x0e\0\0\0".to_vec(),
        ),
        (
            "docs/diagram.svg",
            "image/svg+xml",
            b"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1\" height=\"1\"/>\n".to_vec(),
        ),
        ("B.txt", "text/plain", b"plain text\n".to_vec()),
        ("deep-x.txt", "text/plain", b"beside deep/\n".to_vec()),
        ("deep/er/z.csv", "text/csv", b"a,b\n1,2\n".to_vec()),
        ("data.json", "application/json", b"{\"a\": 1}\n".to_vec()),
        (
            "arch.zip",
            "application/zip",
            b"PK\x05\x06\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0".to_vec(),
        ),
        ("fake.pdf", "application/octet-stream", PNG.to_vec()),
        ("notpng.png", "application/octet-stream", b"just text\n".to_vec()),
        ("blob.xyz", "application/octet-stream", b"\0\x01\x02".to_vec()),
        ("LICENSE", "application/octet-stream", b"Apache-2.0\n".to_vec()),
    ];
    let mut want = Vec::new();
    for (path, media, bytes) in listed {
        put(env, path, &bytes);
        want.push((path.to_owned(), media.to_owned(), bytes.len() as u64));
    }
    // A link inside the vault to a file inside it is read as that file.
    // (Relative: an absolute link is refused even when it points inside, as read_note refuses it.)
    std::os::unix::fs::symlink("img.png", env.vault.join("alias.png")).unwrap();
    want.push(("alias.png".into(), "image/png".into(), PNG.len() as u64));
    for (path, bytes) in [
        ("notes/x.md", b"# x\n".to_vec()),
        (".hidden/h.pdf", pdf(&["hidden".into()])),
        (".dotfile.txt", b"hidden\n".to_vec()),
        ("deep/.cache/c.txt", b"hidden\n".to_vec()),
        ("inbox/attach.pdf", pdf(&["inbox".into()])),
        ("node_modules/pkg/index.json", b"{}\n".to_vec()),
        ("target/debug/bin.o", b"\x7fELF".to_vec()),
    ] {
        put(env, path, &bytes);
    }
    let outside = env.tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("o.pdf"), pdf(&["outside".into()])).unwrap();
    std::os::unix::fs::symlink(outside.join("o.pdf"), env.vault.join("outside.pdf")).unwrap();
    std::os::unix::fs::symlink(&outside, env.vault.join("outdir")).unwrap();
    want.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    want
}

#[tokio::test]
async fn attachments_are_listed_recursively_in_path_order_with_media_types_and_nothing_hidden() {
    let env = Env::new();
    let want = attachments_vault(&env);
    // A known modification time.
    let when = SystemTime::UNIX_EPOCH + Duration::from_secs(1_577_934_245); // 2020-01-02T03:04:05Z
    std::fs::File::options()
        .write(true)
        .open(env.vault.join("a.pdf"))
        .unwrap()
        .set_modified(when)
        .unwrap();
    let (_, token) = env.token("reader", "read");
    let a = Agent::open(&env, &token).await;

    let all = a.ok(LIST, json!({})).await;
    assert_eq!(listing(&all), want, "{all:#}");
    assert_eq!(all["truncated"], false, "{all}");
    assert!(all.get("nextCursor").is_none(), "{all}");
    for f in all["attachments"].as_array().unwrap() {
        let p = f["path"].as_str().unwrap();
        let m = f["modified"].as_str().unwrap();
        let t = time::OffsetDateTime::parse(m, &time::format_description::well_known::Rfc3339)
            .unwrap_or_else(|e| panic!("{p}: modified {m:?} is not RFC 3339: {e}"));
        assert_eq!(t.offset(), time::UtcOffset::UTC, "{p}: {m} is UTC");
        let on_disk: SystemTime = std::fs::metadata(env.vault.join(p)).unwrap().modified().unwrap();
        let diff = (SystemTime::from(t)
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
            - on_disk
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64())
        .abs();
        assert!(diff < 1.0, "{p}: modified {m} is not the file's mtime");
    }
    let a_pdf = &all["attachments"][listing(&all).iter().position(|f| f.0 == "a.pdf").unwrap()];
    assert!(
        a_pdf["modified"]
            .as_str()
            .unwrap()
            .starts_with("2020-01-02T03:04:05"),
        "{a_pdf}"
    );
    assert_eq!(
        all,
        a.ok(LIST, json!({"vault": "basic", "limit": 500})).await,
        "the vault argument and a larger limit change nothing"
    );

    // Pages of two visit every file once, in order; the limit may change between pages.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut calls = 0;
    loop {
        let mut args = json!({"limit": 2});
        if let Some(c) = &cursor {
            args["cursor"] = json!(c);
        }
        let page = a.ok(LIST, args).await;
        calls += 1;
        let items = listing(&page);
        assert!(items.len() <= 2, "{page}");
        seen.extend(items);
        if page["truncated"] == true {
            cursor = Some(
                page["nextCursor"]
                    .as_str()
                    .expect("truncated carries nextCursor")
                    .to_owned(),
            );
        } else {
            assert!(page.get("nextCursor").is_none(), "{page}");
            break;
        }
        assert!(calls <= want.len(), "paging never ends: {seen:?}");
    }
    assert_eq!(seen, want);
    let first = a.ok(LIST, json!({"limit": 2})).await;
    let c = first["nextCursor"].as_str().unwrap().to_owned();
    let rest = a.ok(LIST, json!({"limit": 500, "cursor": c})).await;
    assert_eq!(listing(&rest), want[2..].to_vec(), "{rest}");

    // A cursor is bound to its arguments and to its tool.
    assert_eq!(
        a.call(LIST, json!({"dir": "deep", "cursor": c})).await.code(),
        "INVALID_ARGUMENT"
    );
    assert_eq!(
        a.call(LIST, json!({"cursor": "not-a-cursor"})).await.code(),
        "INVALID_ARGUMENT"
    );
    let q = a.ok("query_notes", json!({"limit": 1})).await;
    let qc = q["nextCursor"].as_str().expect("query_notes pages").to_owned();
    assert_eq!(
        a.call(LIST, json!({"cursor": qc})).await.code(),
        "INVALID_ARGUMENT"
    );
    for limit in [0, 501] {
        let msg = refused(
            a.call(LIST, json!({"limit": limit})).await,
            "INVALID_ARGUMENT",
            "limit",
        );
        assert!(msg.contains("limit"), "{msg}");
    }

    // dir: one folder and what is below it, nothing that merely shares its name's prefix.
    let deep = a.ok(LIST, json!({"dir": "deep"})).await;
    assert_eq!(
        listing(&deep),
        [want.iter().find(|f| f.0 == "deep/er/z.csv").unwrap().clone()]
    );
    assert_eq!(
        listing(&a.ok(LIST, json!({"dir": "deep/er"})).await),
        listing(&deep)
    );
    let docs = a.ok(LIST, json!({"dir": "docs"})).await;
    assert_eq!(
        listing(&docs).iter().map(|f| f.0.as_str()).collect::<Vec<_>>(),
        ["docs/diagram.svg"]
    );
    assert!(listing(&a.ok(LIST, json!({"dir": "notes"})).await).is_empty());
    // A folder one may not read is refused as list_notes refuses it.
    for dir in [".hidden", "../x", "node_modules", "/etc"] {
        let want_code = a.call("list_notes", json!({"dir": dir})).await.code();
        assert_eq!(
            a.call(LIST, json!({"dir": dir})).await.code(),
            want_code,
            "list_attachments refuses dir {dir} as list_notes does"
        );
    }
    a.close().await;
}

#[tokio::test]
async fn folders_the_vault_does_not_make_readable_are_never_listed_or_read() {
    let env = pdf_env();
    put(&env, "z/fig.png", PNG);
    put(&env, "z/p.pdf", &pdf(&["readable text".into()]));
    put(&env, "z/sub/t.txt", b"t\n");
    put(&env, "secret/s.pdf", &pdf(&["secret text".into()]));
    put(&env, "secret/deeper/s.csv", b"a\n");
    put(&env, "top.pdf", &pdf(&["top".into()]));
    put(&env, "notes/n.csv", b"n\n");
    let path = env.home.join("gateway.toml");
    let mut doc = config(&env);
    doc["vaults"].as_array_mut().unwrap()[0]
        .as_table_mut()
        .unwrap()
        .insert(
            "readable".into(),
            toml::Value::Array(vec![toml::Value::String("z".into())]),
        );
    std::fs::write(&path, toml::to_string(&doc).unwrap()).unwrap();
    let (_, token) = env.token("reader", "read");
    let a = Agent::open(&env, &token).await;

    let all = a.ok(LIST, json!({})).await;
    let paths: Vec<String> = listing(&all).into_iter().map(|f| f.0).collect();
    assert_eq!(paths, ["z/fig.png", "z/p.pdf", "z/sub/t.txt"], "{all}");
    let mut paged = Vec::new();
    let mut args = json!({"limit": 1});
    loop {
        let page = a.ok(LIST, args.clone()).await;
        paged.extend(listing(&page).into_iter().map(|f| f.0));
        match page["nextCursor"].as_str() {
            Some(c) => args = json!({"limit": 1, "cursor": c}),
            None => break,
        }
        assert!(paged.len() <= 3, "{paged:?}");
    }
    assert_eq!(paged, paths);
    for dir in ["secret", "secret/deeper", "notes"] {
        let note_code = a.call("list_notes", json!({"dir": dir})).await.code();
        assert_eq!(note_code, "PATH_DENIED", "list_notes {dir}");
        assert_eq!(
            a.call(LIST, json!({"dir": dir})).await.code(),
            "PATH_DENIED",
            "list_attachments {dir}"
        );
    }
    assert_eq!(
        text(&a.ok(READ, json!({"path": "z/p.pdf"})).await, 1).trim(),
        "readable text"
    );
    for path in ["secret/s.pdf", "top.pdf", "secret/none.pdf"] {
        assert_eq!(
            a.call(READ, json!({"path": path})).await.code(),
            "PATH_DENIED",
            "{path}"
        );
    }
    a.close().await;
}

// ---- 6. the worker's sandbox ------------------------------------------------------------------------

/// `pages` pages sharing one content stream of `ops` path operators: seconds of CPU for the
/// worker when every page is asked for, and little memory (pages are parsed one at a time).
fn slow_pdf(pages: usize, ops: usize) -> Vec<u8> {
    let kids: String = (0..pages).map(|i| format!("{} 0 R ", 4 + i)).collect();
    let mut objects = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        format!("<< /Type /Pages /Kids [{kids}] /Count {pages} /Resources << /Font << /F1 3 0 R >> >> >>")
            .into_bytes(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_vec(),
    ];
    for _ in 0..pages {
        objects.push(format!("<< /Type /Page /Parent 2 0 R /Contents {} 0 R >>", 4 + pages).into_bytes());
    }
    let mut content = b"0 0 m ".repeat(ops);
    content.extend_from_slice(b"BT /F1 12 Tf 72 712 Td (slow but read) Tj ET");
    objects.push(stream_object("", &content));
    raw_pdf(&objects)
}

/// `Name:` of `/proc/<pid>/status`, e.g. `Seccomp` → `2`; None once the process is gone.
fn proc_status(pid: u32, name: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .map(|v| v.trim().to_owned())
}

/// When a worker was seen (since its first sighting), its `Seccomp` and its `NoNewPrivs`.
type Sighting = (Duration, String, String);

/// What a [`SandboxWatch`] saw: every sighting of each live worker, by (pid, starttime), and the
/// most workers alive at once.
struct Sightings {
    workers: std::collections::BTreeMap<(u32, u64), Vec<Sighting>>,
    most_at_once: usize,
}

/// Watches the live `pdf-worker` children of a server (every 2 ms): their sandbox and how many
/// run at once.
struct SandboxWatch {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Sightings>,
}

impl SandboxWatch {
    fn start(server: u32) -> SandboxWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut seen = Sightings {
                workers: std::collections::BTreeMap::new(),
                most_at_once: 0,
            };
            let mut first: HashMap<(u32, u64), Instant> = HashMap::new();
            while !flag.load(Ordering::Relaxed) {
                let live: Vec<_> = workers_of(server)
                    .into_iter()
                    .filter(|(_, _, state)| *state != 'Z')
                    .collect();
                seen.most_at_once = seen.most_at_once.max(live.len());
                for (pid, start, _) in live {
                    let (Some(seccomp), Some(nnp)) =
                        (proc_status(pid, "Seccomp"), proc_status(pid, "NoNewPrivs"))
                    else {
                        continue;
                    };
                    let since = first.entry((pid, start)).or_insert_with(Instant::now).elapsed();
                    seen.workers
                        .entry((pid, start))
                        .or_default()
                        .push((since, seccomp, nnp));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            seen
        });
        SandboxWatch { stop, thread }
    }

    fn finish(self) -> Sightings {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// SECURITY(T-PDF3): the worker a server starts for `read_attachment_text` runs under a seccomp
/// filter (`Seccomp: 2`, no new privileges) while it parses, seen from `/proc` through the real
/// binary.
#[tokio::test]
async fn the_servers_pdf_worker_parses_under_a_seccomp_filter() {
    let env = pdf_env();
    put(&env, "slow.pdf", &slow_pdf(10, 200_000));
    let (_, token) = env.token("reader", "read");
    let a = Agent::open(&env, &token).await;
    let watch = SandboxWatch::start(a.pid);
    let v = a
        .ok(
            READ,
            json!({"path": "slow.pdf", "pages": (1..=10).collect::<Vec<u32>>()}),
        )
        .await;
    let seen = watch.finish();
    assert_eq!(text(&v, 10).trim(), "slow but read", "{v}");
    a.close().await;

    assert!(
        !seen.workers.is_empty(),
        "no worker was seen while the slow PDF was read"
    );
    let longest = seen
        .workers
        .values()
        .map(|s| s.last().map_or(Duration::ZERO, |l| l.0))
        .max()
        .unwrap_or_default();
    assert!(
        longest >= Duration::from_millis(300),
        "the worker was seen for {longest:?} only: the PDF is not slow enough to watch it"
    );
    for (worker, sightings) in &seen.workers {
        // Its first moments (exec, the header, its limits) come before the sandbox: past them,
        // every sighting shows the filter.
        let late: Vec<_> = sightings
            .iter()
            .filter(|(since, _, _)| *since >= Duration::from_millis(200))
            .collect();
        for (since, seccomp, nnp) in &late {
            assert_eq!(
                (seccomp.as_str(), nnp.as_str()),
                ("2", "1"),
                "worker {worker:?} at {since:?}: Seccomp {seccomp}, NoNewPrivs {nnp}"
            );
        }
    }
    assert!(
        seen.workers
            .values()
            .flatten()
            .any(|(_, seccomp, _)| seccomp == "2"),
        "no worker was ever seen with Seccomp: 2: {:?}",
        seen.workers
    );
}

/// `vaultgate pdf-worker --probe [--no-sandbox] ARGS` through the real binary: its report, and
/// whatever else it printed.
fn probe(args: &[&str]) -> (Option<Value>, String) {
    let out = std::process::Command::new(bin())
        .arg("pdf-worker")
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
        .and_then(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("sandbox").is_some());
    (report, text)
}

/// SECURITY(T-PDF3): what a parser bug would try next — a socket, a connection, the vault's note
/// or another file, a new process, another program — fails inside the worker's sandbox with
/// EPERM (or EACCES), and works with the sandbox left off (so the refusal is the sandbox's).
#[test]
fn inside_the_workers_sandbox_no_socket_no_file_no_process_works() {
    let env = Env::new();
    let note = env.vault.join("welcome.md");
    assert!(note.is_file());
    let secret = env.home.join("secret.key");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let actions: Vec<Vec<&str>> = vec![
        vec!["socket"],
        vec!["connect", &addr],
        vec!["open", note.to_str().unwrap()],
        vec!["open", "/etc/passwd"],
        vec!["open", secret.to_str().unwrap()],
        vec!["spawn", "/bin/true"],
    ];
    let mut failures = Vec::new();
    for action in &actions {
        let (report, text) = probe(action);
        match report {
            Some(r)
                if r["sandbox"]["seccomp"] == true
                    && r["ok"] == false
                    && (r["errno"] == 1 || r["errno"] == 13) => {}
            _ => failures.push(format!("{action:?} inside the sandbox: {text}")),
        }
        let mut unconfined = vec!["--no-sandbox"];
        unconfined.extend_from_slice(action);
        let (report, text) = probe(&unconfined);
        if !report.is_some_and(|r| r["ok"] == true) {
            failures.push(format!(
                "{action:?} failed without the sandbox too, so its refusal proves nothing: {text}"
            ));
        }
    }
    // exec: without the sandbox the program replaces the probe and answers itself.
    let (report, text) = probe(&["exec", "/bin/echo", "exec ran"]);
    if !report.is_some_and(|r| r["ok"] == false && r["errno"] == 1) {
        failures.push(format!("exec inside the sandbox: {text}"));
    }
    let (_, text) = probe(&["--no-sandbox", "exec", "/bin/echo", "exec ran"]);
    if text != "exec ran\n" {
        failures.push(format!("exec without the sandbox: {text:?}"));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A probe that pauses is the worker, sandboxed, at rest: `Seccomp: 2` in `/proc`.
#[test]
fn a_paused_probe_shows_the_filter_in_proc() {
    use std::io::BufRead as _;
    let mut child = std::process::Command::new(bin())
        .args(["pdf-worker", "--probe", "pause"])
        .env_clear()
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let report: Value = serde_json::from_str(&line).unwrap();
    eprintln!("the worker's sandbox here: {}", report["sandbox"]);
    assert_eq!(report["sandbox"]["seccomp"], true, "{report}");
    assert_eq!(proc_status(child.id(), "Seccomp").as_deref(), Some("2"));
    assert_eq!(proc_status(child.id(), "NoNewPrivs").as_deref(), Some("1"));
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
}

/// `doctor` runs the probe: here, where the sandbox holds, an ok line says so.
#[test]
fn doctor_reports_the_pdf_workers_sandbox() {
    let env = Env::new();
    let out = env.ok(&["doctor"]);
    assert!(
        out.lines()
            .any(|l| l.starts_with("ok    PDF worker sandbox: seccomp filter in force")),
        "{out}"
    );
}

/// Runs `f` on a thread of its own under a seccomp filter that answers ENOSYS to `seccomp(2)`:
/// a kernel without seccomp, as far as any process started from that thread can tell (they
/// inherit the filter). The rest of this test process is not filtered.
#[cfg(target_os = "linux")]
fn where_seccomp_is_missing<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let filter: seccompiler::BpfProgram = seccompiler::SeccompFilter::new(
                    [(libc::SYS_seccomp, vec![])].into_iter().collect(),
                    seccompiler::SeccompAction::Allow,
                    seccompiler::SeccompAction::Errno(libc::ENOSYS as u32),
                    std::env::consts::ARCH.try_into().unwrap(),
                )
                .unwrap()
                .try_into()
                .unwrap();
                seccompiler::apply_filter(&filter).unwrap();
                f()
            })
            .join()
            .unwrap()
    })
}

/// `vaultgate stdio` with `token`, spoken to line by line (JSON-RPC over its pipes, no client
/// library: all of it runs on the calling thread): the replies to `calls`.
fn stdio_calls(env: &Env, token: &str, calls: &[(&str, Value)]) -> Vec<Reply> {
    use std::io::{BufRead as _, Write as _};
    let mut child = std::process::Command::new(bin())
        .arg("--home")
        .arg(&env.home)
        .arg("stdio")
        .env_remove("VAULTGATE_HOME")
        .env("VAULTGATE_TOKEN", token)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut send = |v: Value| {
        stdin.write_all(format!("{v}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    };
    let mut answer = |id: i64| -> Value {
        loop {
            let mut line = String::new();
            assert!(
                stdout.read_line(&mut line).unwrap() > 0,
                "the server closed its stdout"
            );
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "sandbox-test", "version": "1.0"}}}),
    );
    answer(1);
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let mut replies = Vec::new();
    for (i, (tool, args)) in calls.iter().enumerate() {
        let id = 2 + i64::try_from(i).unwrap();
        send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": args}}));
        let v = answer(id);
        let result: rmcp::model::CallToolResult =
            serde_json::from_value(v["result"].clone()).unwrap_or_else(|e| panic!("{e}: {v}"));
        replies.push(crate::util::to_reply(result));
    }
    // EOF ends the server.
    drop(stdin);
    let _ = child.wait();
    replies
}

/// SECURITY(T-PDF3): where the worker cannot set its sandbox up (here: a kernel without seccomp,
/// as the server and its workers see it), `read_attachment_text` answers `CAPABILITY_DENIED`
/// naming the reason and `[pdf] allow_without_sandbox`, and `doctor` warns; with the setting on,
/// the text is read (and `doctor` says PDFs are parsed without the sandbox).
#[cfg(target_os = "linux")]
#[test]
fn without_a_sandbox_pdf_text_is_capability_denied_unless_the_operator_allows_it() {
    let env = pdf_env();
    put(&env, "papers/one.pdf", &pdf(&["Hello from one page".into()]));
    let (_, token) = env.token("reader", "read");
    let read = || stdio_calls(&env, &token, &[(READ, json!({"path": "papers/one.pdf"}))]).remove(0);

    let (reply, doctor) = where_seccomp_is_missing(|| (read(), env.run(&["doctor"])));
    let msg = refused(reply, "CAPABILITY_DENIED", "no sandbox");
    assert!(msg.contains("[pdf] allow_without_sandbox"), "{msg}");
    assert!(msg.contains("seccomp"), "the reason is named: {msg}");
    assert!(!msg.contains("Hello"), "{msg}");
    let doctor = String::from_utf8(doctor.stdout).unwrap();
    eprintln!("refused: {msg}\ndoctor:\n{doctor}");
    assert!(
        doctor.lines().any(
            |l| l.starts_with("warn  PDF worker sandbox cannot be set up here")
                && l.contains("CAPABILITY_DENIED")
                && l.contains("allow_without_sandbox")
        ),
        "{doctor}"
    );
    // Outside that thread the same home reads the PDF: the refusal was the sandbox's.
    assert_eq!(text(&read().ok(), 1).trim(), "Hello from one page");

    crate::http::edit_config(&env, "pdf", |t| {
        t.insert("allow_without_sandbox".into(), toml::Value::Boolean(true));
    });
    let (reply, doctor) = where_seccomp_is_missing(|| (read(), env.run(&["doctor"])));
    assert_eq!(text(&reply.ok(), 1).trim(), "Hello from one page");
    let doctor = String::from_utf8(doctor.stdout).unwrap();
    assert!(
        doctor.lines().any(
            |l| l.starts_with("warn  PDF worker sandbox cannot be set up here")
                && l.contains("parsed without it")
        ),
        "{doctor}"
    );
}

/// The pid of the `vaultgate serve` of this home.
fn server_pid(env: &Env) -> u32 {
    let home = env.home.to_str().unwrap().to_owned();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let cmd = cmdline(pid);
        if cmd.contains(&home) && cmd.contains(" serve") {
            return pid;
        }
    }
    panic!("no vaultgate serve for {home}");
}

/// Two concurrent slow reads through one HTTP server, by the clients of `tokens`: their answers
/// and the most workers seen alive at once.
async fn two_reads_at_once(env: &Env, srv: &crate::http::Server, tokens: [&str; 2]) -> (Vec<Reply>, usize) {
    let mut clients = Vec::new();
    for token in tokens {
        clients.push(srv.client(token).await);
    }
    let watch = SandboxWatch::start(server_pid(env));
    let args = json!({"path": "slow.pdf", "pages": (1..=10).collect::<Vec<u32>>()});
    let (a, b) = tokio::join!(
        clients[0].call(READ, args.clone()),
        clients[1].call(READ, args.clone())
    );
    let seen = watch.finish();
    for c in clients {
        c.close().await;
    }
    (vec![a, b], seen.most_at_once)
}

/// SECURITY(T-PDF3): one credential's two concurrent PDF calls never run two workers at once (the
/// second waits for the first and is answered); two credentials' calls run side by side (which
/// shows the watch would see two).
#[tokio::test]
async fn one_credentials_pdf_calls_take_turns_and_two_credentials_run_side_by_side() {
    let env = pdf_env();
    put(&env, "slow.pdf", &slow_pdf(10, 200_000));
    let (_, one) = env.token("one", "read");
    let (_, other) = env.token("other", "read");
    let srv = crate::http::Server::start(&env);

    let (replies, most) = two_reads_at_once(&env, &srv, [&one, &one]).await;
    for r in replies {
        assert_eq!(text(&r.ok(), 10).trim(), "slow but read");
    }
    assert_eq!(most, 1, "one credential ran {most} workers at once");

    let (replies, most) = two_reads_at_once(&env, &srv, [&one, &other]).await;
    for r in replies {
        assert_eq!(text(&r.ok(), 10).trim(), "slow but read");
    }
    assert_eq!(most, 2, "two credentials' calls did not run side by side");
}

// ---- 7. the demo ------------------------------------------------------------------------------------

#[tokio::test]
async fn the_demo_vault_lists_its_paper_and_reads_both_pages() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("demo");
    let out = std::process::Command::new(bin())
        .args(["demo", "--no-serve", "--dir"])
        .arg(&dir)
        .env_remove("VAULTGATE_HOME")
        .env_remove("VAULTGATE_TOKEN")
        .env("USER", "tester")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let env = Env {
        home: dir.join("home"),
        vault: dir.join("vault"),
        tmp,
    };
    let rel = "reading/papers/vaultgate-demo.pdf";
    let on_disk = std::fs::read(env.vault.join(rel)).expect("the demo vault holds the paper");
    assert!(on_disk.starts_with(b"%PDF-"));
    let (_, token) = env.token("reader", "read");
    let a = Agent::open(&env, &token).await;

    let papers = a.ok(LIST, json!({"dir": "reading/papers"})).await;
    let entry = papers["attachments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == rel)
        .unwrap_or_else(|| panic!("{rel} not listed: {papers}"))
        .clone();
    assert_eq!(entry["mediaType"], "application/pdf", "{entry}");
    assert_eq!(entry["bytes"], on_disk.len() as u64, "{entry}");
    let everything = a.ok(LIST, json!({})).await;
    assert!(listing(&everything).iter().any(|f| f.0 == rel), "{everything}");

    let v = match a.call(READ, json!({"path": rel})).await {
        Reply::Ok(v) => v,
        Reply::Err(e) => {
            assert_eq!(e["code"], "CAPABILITY_DENIED", "{e}");
            env.ok(&["vault", "pdf-text", "demo", "on"]);
            a.ok(READ, json!({"path": rel})).await
        }
    };
    assert!(v["pageCount"].as_u64().unwrap() >= 2, "{v}");
    let one = text(&v, 1);
    let two = text(&v, 2);
    assert!(one.contains("Attention Is All You Need (demo copy)"), "{one:?}");
    assert!(
        two.contains("Page two: the vault keeps the PDF, vaultgate reads its text."),
        "{two:?}"
    );
    assert!(!one.contains("Page two"), "{one:?}");
    a.close().await;
}
