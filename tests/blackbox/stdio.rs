//! Stdio protocol surface: initialize, tools/list, every read tool with exact results, resources.
//!
//! Every call goes through [`Session`], which checks each success `structuredContent` against the
//! tool's declared `outputSchema` (JSON Schema 2020-12), as the official SDKs and the MCP
//! Inspector do, and that no answer leaks the absolute location of a vault. Expected values come
//! from `tests/fixtures/vaults/basic.expect.md`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::time::SystemTime;

use rmcp::model::ReadResourceRequestParams;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::util::{Client, Env, Reply, audit_lines, copy_tree, fixture};

// ---- helpers ------------------------------------------------------------------------------------

/// The demo vault's two-page PDF, as a PDF any test can read.
const DEMO_PDF: &[u8] = include_bytes!("../../gateway/demo/vault/reading/papers/vaultgate-demo.pdf");

/// The read tools of docs/contract.md#the-mcp-surface this build serves.
const READ_TOOLS: [&str; 14] = [
    "vault_list",
    "get_vault_overview",
    "search_knowledge",
    "search_note_content",
    "read_note",
    "get_note_history",
    "list_notes",
    "list_standards",
    "list_tags",
    "get_related_notes",
    "list_recent_notes",
    "query_notes",
    "list_attachments",
    "read_attachment_text",
];

/// A connected client that validates every success against the tool's `outputSchema`.
struct Session {
    client: Client,
    /// Tool name → its compiled output schema (`None`: the tool declared none).
    validators: HashMap<String, Option<jsonschema::Validator>>,
    /// The test's temporary folder: no answer may contain it (no absolute paths).
    tmp: String,
}

impl Session {
    async fn open(env: &Env, token: &str) -> Session {
        let client = env.stdio(token).await;
        let tools = client.inner.list_all_tools().await.expect("tools/list");
        let mut validators = HashMap::new();
        for tool in tools {
            let t = serde_json::to_value(&tool).unwrap();
            let name = t["name"].as_str().unwrap().to_owned();
            let validator = t.get("outputSchema").map(|schema| {
                jsonschema::draft202012::new(schema).unwrap_or_else(|e| {
                    panic!("{name}: outputSchema is not a valid JSON Schema 2020-12: {e}\n{schema}")
                })
            });
            validators.insert(name, validator);
        }
        Session {
            client,
            validators,
            tmp: env.tmp.path().to_str().unwrap().to_owned(),
        }
    }

    async fn call(&self, tool: &str, args: Value) -> Reply {
        let reply = self.client.call(tool, args.clone()).await;
        if let Reply::Ok(v) = &reply {
            self.check_output(tool, &args, v);
        }
        reply
    }

    fn check_output(&self, tool: &str, args: &Value, v: &Value) {
        let validator = self
            .validators
            .get(tool)
            .unwrap_or_else(|| panic!("{tool} answered but is not in tools/list"))
            .as_ref()
            .unwrap_or_else(|| panic!("{tool} returned structuredContent but declares no outputSchema"));
        let errors: Vec<String> = validator
            .iter_errors(v)
            .map(|e| format!("at {}: {e}", e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{tool}({args}): structuredContent does not validate against its outputSchema:\n{}\n{v}",
            errors.join("\n")
        );
        let text = v.to_string();
        assert!(
            !text.contains(&self.tmp),
            "{tool}({args}) leaks an absolute path: {text}"
        );
    }

    async fn ok(&self, tool: &str, args: Value) -> Value {
        match self.call(tool, args.clone()).await {
            Reply::Ok(v) => v,
            Reply::Err(e) => panic!("{tool}({args}): expected success, got {e}"),
        }
    }

    async fn err(&self, tool: &str, args: Value) -> Value {
        match self.call(tool, args.clone()).await {
            Reply::Ok(v) => panic!("{tool}({args}): expected an error, got {v}"),
            Reply::Err(e) => e,
        }
    }

    async fn code(&self, tool: &str, args: Value) -> String {
        self.err(tool, args).await["code"].as_str().unwrap().to_owned()
    }

    async fn read_resource(&self, uri: &str) -> Result<Value, rmcp::ServiceError> {
        self.client
            .inner
            .read_resource(ReadResourceRequestParams::new(uri))
            .await
            .map(|r| serde_json::to_value(r).unwrap())
    }

    async fn close(self) {
        self.client.close().await;
    }
}

/// A fresh env with a `read` credential and a validating session on it.
async fn reader() -> (Env, Session) {
    let env = Env::new();
    let (_, token) = env.token("reader", "read");
    let s = Session::open(&env, &token).await;
    (env, s)
}

/// Issues a credential with extra CLI arguments (e.g. `--vault ID`); returns (id, token).
fn issue(env: &Env, name: &str, tier: &str, extra: &[&str]) -> (String, String) {
    let mut args = vec![
        "token", "issue", "--name", name, "--tier", tier, "--format", "json",
    ];
    args.extend_from_slice(extra);
    let v: Value = serde_json::from_str(&env.ok(&args)).unwrap();
    (
        v["id"].as_str().unwrap().to_owned(),
        v["token"].as_str().unwrap().to_owned(),
    )
}

/// Registers a second copy of the fixture as vault `second` (with one extra note only it has).
fn add_second_vault(env: &Env) {
    let v2 = env.tmp.path().join("v2");
    copy_tree(&fixture("basic"), &v2);
    std::fs::write(
        v2.join("only-in-second.md"),
        "# Only in second\n\nThis note lives in v2.\n",
    )
    .unwrap();
    env.ok(&["vault", "add", v2.to_str().unwrap(), "--id", "second"]);
}

/// Removes `default_vault` from gateway.toml (top-level key), as if no default were configured.
fn clear_default_vault(env: &Env) {
    let path = env.home.join("gateway.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("default_vault"),
        "the first vault added is the default:\n{text}"
    );
    let kept: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("default_vault"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&path, kept).unwrap();
}

fn fixture_text(path: &str) -> String {
    std::fs::read_to_string(fixture("basic").join(path)).unwrap()
}

fn fixture_line(path: &str, line: usize) -> String {
    fixture_text(path).lines().nth(line - 1).unwrap().to_owned()
}

/// The titles of basic.expect.md.
fn title_of(path: &str) -> &'static str {
    match path {
        "welcome.md" => "Welcome",
        "z/attention.md" => "Attention",
        "z/softmax.md" => "Softmax",
        "z/transformer.md" => "Transformer",
        "z/moc-ml.md" => "MOC - Machine Learning",
        "notes/cooking.md" => "Cooking",
        "notes/untitled.md" => "untitled",
        "notes/中文笔记.md" => "中文读书笔记",
        "journal/2026-01-05.md" => "Monday, 5 January 2026",
        "docs/style.md" => "Note style",
        "docs/tags.md" => "Tagging rules",
        "inbox/README.md" => "Inbox",
        other => panic!("no title known for {other}"),
    }
}

fn parse_rfc3339_utc(s: &str) -> OffsetDateTime {
    let t = OffsetDateTime::parse(s, &Rfc3339).unwrap_or_else(|e| panic!("{s:?} is not RFC 3339: {e}"));
    assert!(t.offset().is_utc(), "{s:?} is not UTC");
    t
}

/// (path, line) of each content hit, in answer order.
fn hit_lines(v: &Value) -> Vec<(String, u64)> {
    v["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["path"].as_str().unwrap().to_owned(),
                h["line"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn owned(expected: &[(&str, u64)]) -> Vec<(String, u64)> {
    expected.iter().map(|(p, l)| ((*p).to_owned(), *l)).collect()
}

/// Checks every content hit: title, the line holds a term, snippet from the line; and the ranking:
/// note scores never rise, a note's hits come together with its one score, at most `perNote`
/// (3) of them, those holding more terms first.
fn check_content_hits(v: &Value, terms: &[&str]) {
    let hits = v["hits"].as_array().unwrap();
    let mut notes: Vec<(&str, u64, Vec<usize>)> = Vec::new();
    for h in v["hits"].as_array().unwrap() {
        let path = h["path"].as_str().unwrap();
        let line = fixture_line(path, h["line"].as_u64().unwrap() as usize);
        assert_eq!(h["title"], title_of(path), "title of hit {h}");
        let folded = line.to_lowercase();
        let held = terms
            .iter()
            .filter(|t| folded.contains(&t.to_lowercase()))
            .count();
        assert!(held > 0, "hit {h} holds no term; line is {line:?}");
        let score = h["score"].as_u64().unwrap();
        assert!(score > 0, "score of hit {h}");
        match notes.last_mut() {
            Some((p, sc, held_by)) if *p == path => {
                assert_eq!(*sc, score, "one note, one score: {v}");
                held_by.push(held);
            }
            _ => {
                assert!(
                    notes.iter().all(|(p, _, _)| *p != path),
                    "{path}'s hits apart: {v}"
                );
                if let Some((_, sc, _)) = notes.last() {
                    assert!(*sc >= score, "note scores rise: {v}");
                }
                notes.push((path, score, vec![held]));
            }
        }
        let snippet = h["snippet"].as_str().unwrap();
        assert!(snippet.chars().count() <= 200, "snippet over 200 chars: {h}");
        assert!(
            !snippet.trim().is_empty() && line.contains(snippet.trim()),
            "snippet {snippet:?} is not taken from line {line:?}"
        );
    }
    assert!(hits.len() <= 60);
    for (p, _, held_by) in notes {
        assert!(held_by.len() <= 3, "{p}: more than perNote lines: {v}");
        assert!(
            held_by.windows(2).all(|w| w[0] >= w[1]),
            "{p}: lines holding more terms first: {v}"
        );
    }
}

/// `{path, title}` items as a sorted set of pairs.
fn refs(v: &Value) -> BTreeSet<(String, String)> {
    v.as_array()
        .unwrap_or_else(|| panic!("expected an array, got {v}"))
        .iter()
        .map(|r| {
            (
                r["path"].as_str().unwrap().to_owned(),
                r["title"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn refs_of(paths: &[&str]) -> BTreeSet<(String, String)> {
    paths
        .iter()
        .map(|p| ((*p).to_owned(), title_of(p).to_owned()))
        .collect()
}

fn set_mtime(path: &Path, t: OffsetDateTime) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::from(t)).unwrap();
}

fn tool_call_lines(env: &Env) -> Vec<Value> {
    audit_lines(env)
        .into_iter()
        .filter(|l| l["event"] == "tool_call")
        .collect()
}

fn string_values(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| string_values(x, out)),
        Value::Object(o) => o.values().for_each(|x| string_values(x, out)),
        _ => {}
    }
}

// ---- initialize and tools/list ---------------------------------------------------------------------

#[tokio::test]
async fn initialize_reports_vaultgate_identity_instructions_and_capabilities() {
    let (_env, s) = reader().await;
    let info = s.client.inner.peer_info().expect("the server sent its info");
    let info = serde_json::to_value(&*info).unwrap();

    let server = &info["serverInfo"];
    assert_eq!(server["name"], "vaultgate");
    assert_eq!(server["version"], env!("CARGO_PKG_VERSION"));
    assert!(
        server["title"].as_str().is_some_and(|t| !t.trim().is_empty()),
        "serverInfo.title: {server}"
    );

    let instructions = info["instructions"].as_str().expect("instructions");
    let lower = instructions.to_lowercase();
    assert!(instructions.contains("vaultgate://invariants"), "{instructions}");
    assert!(instructions.contains("vaultgate://vault/"), "{instructions}");
    assert!(lower.contains("proposal"), "writes are proposals: {instructions}");
    assert!(instructions.contains("idempotencyKey"), "{instructions}");
    assert!(
        lower.contains("same idempotencykey"),
        "retry with the same key: {instructions}"
    );
    assert!(
        lower.contains("two calls"),
        "critical tools need two calls: {instructions}"
    );

    let caps = info["capabilities"].as_object().expect("capabilities");
    for cap in ["tools", "resources", "logging"] {
        assert!(caps.contains_key(cap), "capability {cap} missing: {caps:?}");
    }
    s.close().await;
}

#[tokio::test]
async fn tools_list_has_every_read_tool_with_read_only_annotations_and_schemas() {
    let (_env, s) = reader().await;
    let tools: Vec<Value> = s
        .client
        .inner
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| serde_json::to_value(t).unwrap())
        .collect();
    let names: BTreeSet<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(
        READ_TOOLS.iter().all(|t| names.contains(t)),
        "every read tool is listed: {names:?}"
    );
    assert_eq!(tools.len(), names.len(), "no tool is listed twice");
    // The write half is annotated by kind (docs/contract.md#the-mcp-surface).
    for t in &tools {
        let name = t["name"].as_str().unwrap();
        let ann = &t["annotations"];
        if name.starts_with("propose_") {
            assert_eq!(ann["readOnlyHint"], false, "{name}");
            assert_eq!(ann["destructiveHint"], false, "{name}");
        } else if ["apply_proposal", "reject_proposal"].contains(&name) {
            assert_eq!(ann["destructiveHint"], true, "{name}");
        }
    }
    let tools: Vec<Value> = tools
        .into_iter()
        .filter(|t| READ_TOOLS.contains(&t["name"].as_str().unwrap()))
        .collect();

    // docs/contract.md#the-mcp-surface table: inputs besides `vault`, and the main output fields; the list and search
    // tools of docs/contract.md#limits-and-pagination also take `cursor` (and `list_tags` a `limit`).
    let inputs: BTreeMap<&str, &[&str]> = BTreeMap::from([
        ("vault_list", &[][..]),
        ("get_vault_overview", &[][..]),
        ("search_knowledge", &["query", "tag", "limit", "cursor"][..]),
        (
            "search_note_content",
            &[
                "query",
                "match",
                "perNote",
                "limit",
                "tag",
                "pathPrefix",
                "cursor",
            ][..],
        ),
        ("read_note", &["path", "hash"][..]),
        ("get_note_history", &["path", "limit", "cursor"][..]),
        ("list_notes", &["dir", "limit", "cursor"][..]),
        ("list_standards", &[][..]),
        ("list_tags", &["limit", "cursor"][..]),
        ("get_related_notes", &["path"][..]),
        ("list_recent_notes", &["limit", "since", "cursor"][..]),
        (
            "query_notes",
            &["where", "tag", "pathPrefix", "fields", "sort", "limit", "cursor"][..],
        ),
        ("list_attachments", &["dir", "limit", "cursor"][..]),
        ("read_attachment_text", &["path", "pages", "maxChars"][..]),
    ]);
    let required: BTreeMap<&str, &[&str]> = BTreeMap::from([
        ("read_attachment_text", &["path"][..]),
        ("search_knowledge", &["query"][..]),
        ("search_note_content", &["query"][..]),
        ("read_note", &["path"][..]),
        ("get_note_history", &["path"][..]),
        ("get_related_notes", &["path"][..]),
    ]);
    let outputs: BTreeMap<&str, &[&str]> = BTreeMap::from([
        ("vault_list", &["vaults"][..]),
        (
            "get_vault_overview",
            &[
                "notes",
                "standards",
                "tags",
                "pendingProposals",
                "revision",
                "index",
                "history",
            ][..],
        ),
        ("search_knowledge", &["hits"][..]),
        ("search_note_content", &["hits", "truncated"][..]),
        (
            "read_note",
            &[
                "path",
                "title",
                "frontmatter",
                "content",
                "hash",
                "bytes",
                "modified",
            ][..],
        ),
        ("get_note_history", &["entries", "truncated"][..]),
        ("list_notes", &["entries", "truncated"][..]),
        ("list_standards", &["standards"][..]),
        ("list_tags", &["tags"][..]),
        (
            "get_related_notes",
            &["outlinks", "backlinks", "brokenLinks", "mocs"][..],
        ),
        ("list_recent_notes", &["notes"][..]),
        ("query_notes", &["notes", "truncated"][..]),
        ("list_attachments", &["attachments", "truncated"][..]),
        (
            "read_attachment_text",
            &["path", "pageCount", "pages", "truncated"][..],
        ),
    ]);

    for t in &tools {
        let name = t["name"].as_str().unwrap();
        assert_eq!(t["annotations"]["readOnlyHint"], true, "{name}: {t}");
        assert_ne!(t["annotations"]["destructiveHint"], true, "{name}: {t}");

        let input = &t["inputSchema"];
        assert_eq!(input["type"], "object", "{name} inputSchema: {input}");
        let props: BTreeSet<&str> = input["properties"]
            .as_object()
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let mut expected: BTreeSet<&str> = inputs[name].iter().copied().collect();
        if name != "vault_list" {
            expected.insert("vault");
        }
        assert_eq!(props, expected, "{name} input properties: {input}");
        let req: BTreeSet<&str> = input["required"]
            .as_array()
            .map(|r| r.iter().map(|x| x.as_str().unwrap()).collect())
            .unwrap_or_default();
        let expected_req: BTreeSet<&str> = required
            .get(name)
            .copied()
            .unwrap_or_default()
            .iter()
            .copied()
            .collect();
        assert_eq!(req, expected_req, "{name}: required inputs ({input})");
        if name != "vault_list" {
            let ty = input["properties"]["vault"]["type"].to_string();
            assert!(ty.contains("string"), "{name}: vault is a string id: {input}");
        }
        if let Some(tag) = input["properties"].get("tag") {
            assert!(
                tag["type"].to_string().contains("array"),
                "{name}: tag[] is an array: {tag}"
            );
        }

        let output = t
            .get("outputSchema")
            .unwrap_or_else(|| panic!("{name} has no outputSchema"));
        assert_eq!(output["type"], "object", "{name} outputSchema: {output}");
        jsonschema::draft202012::new(output).unwrap_or_else(|e| panic!("{name}: {e}"));
        let out_props = output["properties"].as_object().expect("output properties");
        for field in outputs[name] {
            assert!(
                out_props.contains_key(*field),
                "{name} outputSchema lacks {field}: {output}"
            );
        }
    }
    s.close().await;
}

#[tokio::test]
async fn every_read_tool_success_validates_against_its_output_schema() {
    let (env, s) = reader().await;
    // A PDF to read, and PDF text turned on for the vault (off by default).
    std::fs::write(env.vault.join("z/paper.pdf"), DEMO_PDF).unwrap();
    env.ok(&["vault", "pdf-text", "basic", "on"]);
    // Each tool at least once, on notes with and without frontmatter, empty and full lists.
    let calls = [
        ("vault_list", json!({})),
        ("get_vault_overview", json!({})),
        ("search_knowledge", json!({"query": "attention"})),
        ("search_knowledge", json!({"query": "zzzz-no-such-term"})),
        ("search_note_content", json!({"query": "attention", "limit": 3})),
        ("search_note_content", json!({"query": "zzzz-no-such-term"})),
        ("read_note", json!({"path": "z/attention.md"})),
        ("read_note", json!({"path": "notes/untitled.md"})),
        ("read_note", json!({"path": "inbox/README.md"})),
        ("get_note_history", json!({"path": "z/attention.md"})),
        ("list_notes", json!({})),
        ("list_notes", json!({"dir": "notes"})),
        ("list_standards", json!({})),
        ("list_tags", json!({})),
        ("get_related_notes", json!({"path": "z/attention.md"})),
        ("get_related_notes", json!({"path": "docs/style.md"})),
        ("list_recent_notes", json!({"limit": 5})),
        ("list_recent_notes", json!({"since": "2999-01-01T00:00:00Z"})),
        ("query_notes", json!({})),
        (
            "query_notes",
            json!({"where": [{"field": "tags", "op": "contains", "value": "ml"}], "fields": ["tags", "modified", "bytes", "title", "nope"], "sort": {"field": "modified", "order": "desc"}, "limit": 1}),
        ),
        ("list_attachments", json!({})),
        ("list_attachments", json!({"dir": "notes"})),
        ("read_attachment_text", json!({"path": "z/paper.pdf"})),
        (
            "read_attachment_text",
            json!({"path": "z/paper.pdf", "pages": [2, 9], "maxChars": 5}),
        ),
    ];
    let mut seen = BTreeSet::new();
    for (tool, args) in calls {
        // `ok` validates against the outputSchema.
        s.ok(tool, args).await;
        seen.insert(tool);
    }
    assert_eq!(seen, READ_TOOLS.into_iter().collect::<BTreeSet<_>>());
    s.close().await;
}

#[tokio::test]
async fn the_output_schema_check_rejects_results_that_break_the_declared_shape() {
    // Guards the guard: the schemas are strict enough for the SDKs' check to catch a bad result.
    let (_env, s) = reader().await;
    let schema = |tool: &str| s.validators[tool].as_ref().unwrap();
    let good = json!({"hits": [{"path": "a.md", "line": 1, "snippet": "x", "title": "A", "score": 1}], "truncated": false});
    assert!(schema("search_note_content").is_valid(&good));
    for bad in [
        json!({"hits": []}),
        json!({"hits": [{"path": "a.md", "line": "1", "snippet": "x", "title": "A", "score": 1}], "truncated": false}),
        json!({"hits": [{"path": "a.md", "snippet": "x", "title": "A", "score": 1}], "truncated": false}),
    ] {
        assert!(!schema("search_note_content").is_valid(&bad), "{bad}");
    }
    assert!(!schema("read_note").is_valid(&json!({"path": "a.md"})));
    assert!(!schema("vault_list").is_valid(&json!({"vaults": [{"id": "basic"}]})));
    s.close().await;
}

// ---- read_note ------------------------------------------------------------------------------------

#[tokio::test]
async fn read_note_returns_exact_content_hash_bytes_title_and_frontmatter() {
    let (env, s) = reader().await;
    let v = s.ok("read_note", json!({"path": "z/attention.md"})).await;
    let bytes = std::fs::read(env.vault.join("z/attention.md")).unwrap();
    assert_eq!(v["path"], "z/attention.md");
    assert_eq!(v["title"], "Attention");
    assert_eq!(v["content"].as_str().unwrap().as_bytes(), &bytes[..]);
    assert_eq!(v["content"], fixture_text("z/attention.md"));
    assert_eq!(v["hash"], hex::encode(Sha256::digest(&bytes)));
    assert_eq!(
        v["hash"],
        "c7aa231fa541e9e69ba4e19ecc16753b24fb35c5d09814038db0e580e23be296"
    );
    assert_eq!(v["bytes"], 755);
    assert_eq!(
        v["frontmatter"],
        json!({
            "title": "Attention",
            "aliases": ["Self-Attention", "注意力"],
            "description": "Scaled dot-product attention, the core operation of a transformer.",
            "tags": ["ml", "transformer"],
            "created": "2026-01-02",
            "updated": "2026-01-04",
        })
    );
    let modified = parse_rfc3339_utc(v["modified"].as_str().unwrap());
    let on_disk = OffsetDateTime::from(
        std::fs::metadata(env.vault.join("z/attention.md"))
            .unwrap()
            .modified()
            .unwrap(),
    );
    assert_eq!(modified.unix_timestamp(), on_disk.unix_timestamp());
    s.close().await;
}

#[tokio::test]
async fn read_note_title_falls_back_to_heading_then_stem_and_frontmatter_is_an_empty_object() {
    let (_env, s) = reader().await;
    for (path, bytes, hash) in [
        (
            "notes/cooking.md",
            312,
            "42a15f4c6ab8f615a5ef44e6d263a255d0add3f5f299175ae3cd106b8d190143",
        ),
        (
            "notes/untitled.md",
            105,
            "2fd06f61bf4595a69c8dd14c0e71988808fc74e41dfb7091419d0e346e057ac9",
        ),
        (
            "notes/中文笔记.md",
            326,
            "f4e8c3bbfc5564fe82c0a6fffb1928e77942c3b0b72170fe8c09952a648e67ba",
        ),
        (
            "journal/2026-01-05.md",
            218,
            "73ba492faa531c96d73b8144695af373c2210912587ac7ff7da6af71834bafb1",
        ),
    ] {
        let v = s.ok("read_note", json!({"path": path})).await;
        assert_eq!(v["path"], path);
        assert_eq!(v["title"], title_of(path), "{path}");
        assert_eq!(v["bytes"], bytes, "{path}");
        assert_eq!(v["hash"], hash, "{path}");
        assert_eq!(v["content"], fixture_text(path), "{path}");
    }
    let cooking = s.ok("read_note", json!({"path": "notes/cooking.md"})).await;
    assert_eq!(cooking["frontmatter"], json!({}));
    let journal = s.ok("read_note", json!({"path": "journal/2026-01-05.md"})).await;
    assert_eq!(
        journal["frontmatter"],
        json!({"created": "2026-01-05", "tags": ["journal"]})
    );
    s.close().await;
}

#[tokio::test]
async fn read_note_of_a_missing_note_is_not_found_and_a_folder_is_not_a_note() {
    let (_env, s) = reader().await;
    assert_eq!(
        s.code("read_note", json!({"path": "z/nope.md"})).await,
        "NOT_FOUND"
    );
    assert_eq!(s.code("read_note", json!({"path": "z"})).await, "NOT_FOUND");
    assert_eq!(
        s.code("get_related_notes", json!({"path": "z/nope.md"})).await,
        "NOT_FOUND"
    );
    assert_eq!(
        s.code("read_note", json!({"path": "../basic.expect.md"})).await,
        "PATH_INVALID"
    );
    s.close().await;
}

// ---- list_notes ---------------------------------------------------------------------------------

/// Adds hidden, denied and non-note entries to the vault copy.
fn add_non_note_entries(vault: &Path) {
    for (path, text) in [
        (".obsidian/workspace.md", "zebraquark hidden\n"),
        (".hidden.md", "zebraquark hidden file\n"),
        (".env", "SECRET=zebraquark\n"),
        ("node_modules/pkg/readme.md", "zebraquark in node_modules\n"),
        ("target/debug/notes.md", "zebraquark in target\n"),
        ("diagram.png", "not really a png\n"),
        ("notes/recipe.txt", "two eggs\n"),
        ("z/figures/attention.svg", "<svg/>\n"),
        ("z/.trash/old.md", "zebraquark in a hidden subfolder\n"),
    ] {
        let p = vault.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}

/// `(path, kind, title)` of each entry, sorted by path.
fn entries(v: &Value) -> Vec<(String, String, Option<String>)> {
    let mut out: Vec<_> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["path"].as_str().unwrap().to_owned(),
                e["kind"].as_str().unwrap().to_owned(),
                e.get("title").map(|t| t.as_str().unwrap().to_owned()),
            )
        })
        .collect();
    out.sort();
    out
}

fn entry(path: &str, kind: &str, title: Option<&str>) -> (String, String, Option<String>) {
    (path.to_owned(), kind.to_owned(), title.map(str::to_owned))
}

#[tokio::test]
async fn list_notes_root_is_one_level_without_hidden_or_denied_entries() {
    let env = Env::new();
    add_non_note_entries(&env.vault);
    let (_, token) = env.token("reader", "read");
    let s = Session::open(&env, &token).await;

    let v = s.ok("list_notes", json!({})).await;
    assert_eq!(
        entries(&v),
        vec![
            entry("diagram.png", "file", None),
            entry("docs", "folder", None),
            entry("inbox", "folder", None),
            entry("journal", "folder", None),
            entry("notes", "folder", None),
            entry("welcome.md", "note", Some("Welcome")),
            entry("z", "folder", None),
        ],
        "{v}"
    );
    assert_eq!(v["truncated"], false);

    // Hidden and denied folders cannot be listed either, and search never sees them.
    assert_eq!(
        s.code("list_notes", json!({"dir": ".obsidian"})).await,
        "PATH_DENIED"
    );
    assert_eq!(
        s.code("list_notes", json!({"dir": "node_modules"})).await,
        "PATH_DENIED"
    );
    let hits = s.ok("search_note_content", json!({"query": "zebraquark"})).await;
    assert_eq!(hits["hits"], json!([]), "{hits}");
    s.close().await;
}

#[tokio::test]
async fn list_notes_subfolder_gives_note_titles_folders_and_plain_files() {
    let env = Env::new();
    add_non_note_entries(&env.vault);
    let (_, token) = env.token("reader", "read");
    let s = Session::open(&env, &token).await;

    let notes = s.ok("list_notes", json!({"dir": "notes"})).await;
    assert_eq!(
        entries(&notes),
        vec![
            entry("notes/cooking.md", "note", Some("Cooking")),
            entry("notes/recipe.txt", "file", None),
            entry("notes/untitled.md", "note", Some("untitled")),
            entry("notes/中文笔记.md", "note", Some("中文读书笔记")),
        ],
        "{notes}"
    );
    let z = s.ok("list_notes", json!({"dir": "z"})).await;
    assert_eq!(
        entries(&z),
        vec![
            entry("z/attention.md", "note", Some("Attention")),
            entry("z/figures", "folder", None),
            entry("z/moc-ml.md", "note", Some("MOC - Machine Learning")),
            entry("z/softmax.md", "note", Some("Softmax")),
            entry("z/transformer.md", "note", Some("Transformer")),
        ],
        "{z}"
    );
    assert_eq!(z["truncated"], false);
    assert_eq!(
        s.code("list_notes", json!({"dir": "no-such-folder"})).await,
        "NOT_FOUND"
    );
    s.close().await;
}

#[tokio::test]
async fn list_notes_limit_truncates_and_a_limit_outside_1_to_500_is_invalid_argument() {
    let (_env, s) = reader().await;
    let all = s.ok("list_notes", json!({})).await;
    let all_entries = entries(&all);
    assert_eq!(all_entries.len(), 6, "{all}");

    let two = s.ok("list_notes", json!({"limit": 2})).await;
    assert_eq!(two["entries"].as_array().unwrap().len(), 2, "{two}");
    assert_eq!(two["truncated"], true);
    for e in entries(&two) {
        assert!(all_entries.contains(&e), "{e:?} is not in the full listing");
    }
    let exact = s.ok("list_notes", json!({"limit": 6})).await;
    assert_eq!(entries(&exact), all_entries);
    assert_eq!(exact["truncated"], false);
    let max = s.ok("list_notes", json!({"limit": 500})).await;
    assert_eq!(max["truncated"], false);

    assert_eq!(
        s.code("list_notes", json!({"limit": 501})).await,
        "INVALID_ARGUMENT"
    );
    assert_eq!(
        s.code("list_notes", json!({"limit": 0})).await,
        "INVALID_ARGUMENT"
    );
    s.close().await;
}

// ---- list_standards, list_tags ----------------------------------------------------------------------

#[tokio::test]
async fn list_standards_lists_the_docs_notes_with_titles_and_descriptions() {
    let (_env, s) = reader().await;
    let v = s.ok("list_standards", json!({})).await;
    assert_eq!(
        v,
        json!({"standards": [
            {"path": "docs/style.md", "title": "Note style", "description": "How notes in this vault are written."},
            {"path": "docs/tags.md", "title": "Tagging rules", "description": "Which tags exist and when to use them."},
        ], "truncated": false, "count": 2})
    );
    s.close().await;
}

#[tokio::test]
async fn list_tags_counts_notes_per_tag_over_frontmatter_and_inline_tags() {
    let (_env, s) = reader().await;
    let v = s.ok("list_tags", json!({})).await;
    let tags: Vec<(String, u64)> = v["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_owned(),
                t["count"].as_u64().unwrap(),
            )
        })
        .collect();
    let got: BTreeMap<String, u64> = tags.iter().cloned().collect();
    assert_eq!(got.len(), tags.len(), "each tag once: {v}");
    let expected: BTreeMap<String, u64> = [
        ("ml", 3),
        ("transformer", 2),
        ("math", 1),
        ("architecture", 1),
        ("moc", 1),
        ("food", 1),
        ("读书", 1),
        ("学习", 1),
        ("journal", 1),
        ("project/vaultgate", 1),
    ]
    .into_iter()
    .map(|(n, c)| (n.to_owned(), c))
    .collect();
    assert_eq!(got, expected, "{v}");
    s.close().await;
}

// ---- get_related_notes --------------------------------------------------------------------------------

#[tokio::test]
async fn get_related_notes_of_attention_has_outlinks_backlinks_broken_links_and_mocs() {
    let (_env, s) = reader().await;
    let v = s.ok("get_related_notes", json!({"path": "z/attention.md"})).await;
    assert_eq!(
        refs(&v["outlinks"]),
        refs_of(&["z/softmax.md", "z/transformer.md"]),
        "{v}"
    );
    assert_eq!(
        refs(&v["backlinks"]),
        refs_of(&[
            "z/softmax.md",
            "z/transformer.md",
            "z/moc-ml.md",
            "notes/中文笔记.md",
            "welcome.md",
        ]),
        "{v}"
    );
    assert_eq!(
        v["brokenLinks"],
        json!([{"target": "Missing Page", "line": 25}]),
        "{v}"
    );
    assert_eq!(refs(&v["mocs"]), refs_of(&["z/moc-ml.md"]), "{v}");
    assert_eq!(v["outlinks"].as_array().unwrap().len(), 2, "no duplicates: {v}");
    assert_eq!(v["backlinks"].as_array().unwrap().len(), 5, "no duplicates: {v}");
    s.close().await;
}

#[tokio::test]
async fn get_related_notes_resolves_relative_markdown_links_and_cjk_stems() {
    let (_env, s) = reader().await;
    let journal = s
        .ok("get_related_notes", json!({"path": "journal/2026-01-05.md"}))
        .await;
    assert_eq!(
        refs(&journal["outlinks"]),
        refs_of(&["z/softmax.md"]),
        "{journal}"
    );
    assert_eq!(journal["backlinks"], json!([]));
    assert_eq!(journal["brokenLinks"], json!([]));
    assert_eq!(journal["mocs"], json!([]));

    let softmax = s.ok("get_related_notes", json!({"path": "z/softmax.md"})).await;
    assert_eq!(refs(&softmax["outlinks"]), refs_of(&["z/attention.md"]));
    assert_eq!(
        refs(&softmax["backlinks"]),
        refs_of(&["z/attention.md", "z/moc-ml.md", "journal/2026-01-05.md"]),
        "{softmax}"
    );
    assert_eq!(refs(&softmax["mocs"]), refs_of(&["z/moc-ml.md"]));

    let moc = s.ok("get_related_notes", json!({"path": "z/moc-ml.md"})).await;
    assert_eq!(
        refs(&moc["outlinks"]),
        refs_of(&[
            "z/attention.md",
            "z/softmax.md",
            "z/transformer.md",
            "notes/中文笔记.md"
        ]),
        "{moc}"
    );
    assert_eq!(refs(&moc["backlinks"]), refs_of(&["welcome.md"]));
    assert_eq!(moc["mocs"], json!([]));
    s.close().await;
}

// ---- list_recent_notes --------------------------------------------------------------------------------

#[tokio::test]
async fn list_recent_notes_orders_by_mtime_newest_first_and_filters_by_since() {
    let env = Env::new();
    let base = time::macros::datetime!(2026-01-10 00:00 UTC);
    // Newest first; every catalog note gets its own hour; the inbox file is the oldest of all.
    let order = [
        "z/attention.md",
        "notes/中文笔记.md",
        "docs/style.md",
        "welcome.md",
        "z/softmax.md",
        "journal/2026-01-05.md",
        "notes/cooking.md",
        "z/moc-ml.md",
        "docs/tags.md",
        "notes/untitled.md",
        "z/transformer.md",
    ];
    let hour = time::Duration::hours(1);
    let mtime = |i: usize| base + hour * (order.len() - i) as i32;
    for (i, p) in order.iter().enumerate() {
        set_mtime(&env.vault.join(p), mtime(i));
    }
    set_mtime(&env.vault.join("inbox/README.md"), base - hour * 24);
    let (_, token) = env.token("reader", "read");
    let s = Session::open(&env, &token).await;

    let v = s.ok("list_recent_notes", json!({"limit": 11})).await;
    let notes = v["notes"].as_array().unwrap();
    let paths: Vec<&str> = notes.iter().map(|n| n["path"].as_str().unwrap()).collect();
    assert_eq!(paths, order, "{v}");
    for (i, n) in notes.iter().enumerate() {
        assert_eq!(n["title"], title_of(order[i]));
        assert_eq!(
            parse_rfc3339_utc(n["modified"].as_str().unwrap()),
            mtime(i),
            "{n}"
        );
    }

    let three = s.ok("list_recent_notes", json!({"limit": 3})).await;
    let paths: Vec<&str> = three["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, order[..3]);

    // Between the 5th and 6th newest.
    let since = (mtime(5) + time::Duration::minutes(30)).format(&Rfc3339).unwrap();
    let recent = s.ok("list_recent_notes", json!({"since": since})).await;
    let paths: Vec<&str> = recent["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, order[..5], "since {since}: {recent}");

    let none = s
        .ok("list_recent_notes", json!({"since": "2999-01-01T00:00:00Z"}))
        .await;
    assert_eq!(none["notes"], json!([]));
    assert_eq!(
        s.code("list_recent_notes", json!({"since": "yesterday"})).await,
        "INVALID_ARGUMENT"
    );
    s.close().await;
}

// ---- search_note_content ------------------------------------------------------------------------------

/// `attention`: 16 lines in 8 notes hold it; at most 3 a note are answered (the first 3 by line,
/// as each holds the one term), the note whose title is "Attention" first.
const ATTENTION_HITS: [(&str, u64); 11] = [
    ("z/attention.md", 2),
    ("z/attention.md", 4),
    ("z/attention.md", 6),
    ("welcome.md", 8),
    ("z/transformer.md", 4),
    ("z/transformer.md", 10),
    ("z/moc-ml.md", 8),
    ("journal/2026-01-05.md", 9),
    ("z/softmax.md", 11),
    ("notes/cooking.md", 10),
    ("notes/中文笔记.md", 10),
];

/// Every line of the fixture that holds `attention`.
const ATTENTION_LINES: [(&str, u64); 16] = [
    ("journal/2026-01-05.md", 9),
    ("notes/cooking.md", 10),
    ("notes/中文笔记.md", 10),
    ("welcome.md", 8),
    ("z/attention.md", 2),
    ("z/attention.md", 4),
    ("z/attention.md", 6),
    ("z/attention.md", 11),
    ("z/attention.md", 13),
    ("z/attention.md", 22),
    ("z/attention.md", 23),
    ("z/attention.md", 24),
    ("z/moc-ml.md", 8),
    ("z/softmax.md", 11),
    ("z/transformer.md", 4),
    ("z/transformer.md", 10),
];

#[tokio::test]
async fn search_note_content_finds_matching_notes_ranked_with_the_title_match_first() {
    let (_env, s) = reader().await;
    let v = s.ok("search_note_content", json!({"query": "attention"})).await;
    assert_eq!(hit_lines(&v), owned(&ATTENTION_HITS), "{v}");
    assert_eq!(v["truncated"], false);
    check_content_hits(&v, &["attention"]);

    let upper = s.ok("search_note_content", json!({"query": "ATTENTION"})).await;
    assert_eq!(hit_lines(&upper), owned(&ATTENTION_HITS));

    // perNote 50: every line of every matching note.
    let every = s
        .ok(
            "search_note_content",
            json!({"query": "attention", "perNote": 50}),
        )
        .await;
    let mut got = hit_lines(&every);
    got.sort();
    let mut want = owned(&ATTENTION_LINES);
    want.sort();
    assert_eq!(got, want, "{every}");
    for bad in [0, 51] {
        assert_eq!(
            s.code(
                "search_note_content",
                json!({"query": "attention", "perNote": bad})
            )
            .await,
            "INVALID_ARGUMENT"
        );
    }

    let missing = s
        .ok("search_note_content", json!({"query": "Missing Page"}))
        .await;
    assert_eq!(hit_lines(&missing), owned(&[("z/attention.md", 25)]), "{missing}");
    check_content_hits(&missing, &["missing", "page"]);

    let none = s
        .ok("search_note_content", json!({"query": "zzzz-no-such-term"}))
        .await;
    assert_eq!(none, json!({"hits": [], "truncated": false}));
    s.close().await;
}

#[tokio::test]
async fn search_note_content_limit_counts_hits_and_truncated_says_more_existed() {
    let (_env, s) = reader().await;
    let five = s
        .ok("search_note_content", json!({"query": "attention", "limit": 5}))
        .await;
    assert_eq!(hit_lines(&five), owned(&ATTENTION_HITS[..5]), "{five}");
    assert_eq!(five["truncated"], true);
    let exact = s
        .ok("search_note_content", json!({"query": "attention", "limit": 11}))
        .await;
    assert_eq!(hit_lines(&exact), owned(&ATTENTION_HITS));
    assert_eq!(exact["truncated"], false);
    let max = s
        .ok("search_note_content", json!({"query": "attention", "limit": 200}))
        .await;
    assert_eq!(max["truncated"], false);
    assert_eq!(
        s.code("search_note_content", json!({"query": "attention", "limit": 0}))
            .await,
        "INVALID_ARGUMENT"
    );
    assert_eq!(
        s.code("search_note_content", json!({"query": "attention", "limit": 201}))
            .await,
        "INVALID_ARGUMENT"
    );
    s.close().await;
}

#[tokio::test]
async fn search_note_content_matches_cjk_terms_including_a_single_character() {
    let (_env, s) = reader().await;
    let v = s.ok("search_note_content", json!({"query": "注意力"})).await;
    let mut got = hit_lines(&v);
    got.sort();
    assert_eq!(
        got,
        owned(&[
            ("notes/中文笔记.md", 8),
            ("notes/中文笔记.md", 10),
            ("z/attention.md", 5),
            ("z/attention.md", 24),
        ]),
        "{v}"
    );
    check_content_hits(&v, &["注意力"]);

    let two = s.ok("search_note_content", json!({"query": "学习"})).await;
    assert_eq!(
        hit_lines(&two),
        owned(&[("notes/中文笔记.md", 8), ("notes/中文笔记.md", 12)]),
        "{two}"
    );
    let one = s.ok("search_note_content", json!({"query": "学"})).await;
    assert_eq!(
        hit_lines(&one),
        owned(&[
            ("notes/中文笔记.md", 8),
            ("notes/中文笔记.md", 10),
            ("notes/中文笔记.md", 12),
        ]),
        "{one}"
    );
    check_content_hits(&one, &["学"]);
    s.close().await;
}

#[tokio::test]
async fn search_note_content_ands_terms_over_notes_and_ranks_lines_holding_both_first() {
    let (_env, s) = reader().await;
    let v = s
        .ok("search_note_content", json!({"query": "attention 注意力"}))
        .await;
    // The note titled "Attention" first; in each note, the line holding both terms first.
    assert_eq!(
        hit_lines(&v),
        owned(&[
            ("z/attention.md", 24),
            ("z/attention.md", 2),
            ("z/attention.md", 4),
            ("notes/中文笔记.md", 10),
            ("notes/中文笔记.md", 8),
        ]),
        "{v}"
    );
    assert_eq!(v["truncated"], false);
    check_content_hits(&v, &["attention", "注意力"]);

    // A note needs every term somewhere in the file, not on one line.
    let split = s
        .ok(
            "search_note_content",
            json!({"query": "softmax stability", "perNote": 50}),
        )
        .await;
    let mut got = hit_lines(&split);
    got.sort();
    assert_eq!(
        got,
        owned(&[
            ("z/softmax.md", 2),
            ("z/softmax.md", 6),
            ("z/softmax.md", 8),
            ("z/softmax.md", 10),
        ]),
        "{split}"
    );
    check_content_hits(
        &s.ok("search_note_content", json!({"query": "softmax stability"}))
            .await,
        &["softmax", "stability"],
    );
    let none = s
        .ok(
            "search_note_content",
            json!({"query": "attention zzzz-no-such-term"}),
        )
        .await;
    assert_eq!(none["hits"], json!([]));
    s.close().await;
}

#[tokio::test]
async fn search_note_content_match_any_answers_a_question_in_plain_words() {
    let (_env, s) = reader().await;
    // No note holds all these words; `any` finds the notes holding some, most and rarest first.
    let q = "how do eggs and attention heads work";
    let all = s.ok("search_note_content", json!({"query": q})).await;
    assert_eq!(all["hits"], json!([]), "{all}");
    let any = s
        .ok("search_note_content", json!({"query": q, "match": "any"}))
        .await;
    let words: Vec<&str> = q.split(' ').collect();
    check_content_hits(&any, &words);
    let paths: Vec<&str> = any["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["path"].as_str().unwrap())
        .collect();
    assert!(
        paths.contains(&"notes/cooking.md") && paths.contains(&"journal/2026-01-05.md"),
        "{any}"
    );
    assert_eq!(
        s.code("search_note_content", json!({"query": q, "match": "some"}))
            .await,
        "INVALID_ARGUMENT"
    );
    s.close().await;
}

#[tokio::test]
async fn search_note_content_filters_by_path_prefix_and_tag() {
    let (_env, s) = reader().await;
    // A filter keeps the ranking: the vault's answer with the other notes left out.
    let only = |keep: &[&str]| -> Vec<(String, u64)> {
        owned(&ATTENTION_HITS)
            .into_iter()
            .filter(|(p, _)| keep.iter().any(|k| p.starts_with(k)))
            .collect()
    };
    let z = s
        .ok(
            "search_note_content",
            json!({"query": "attention", "pathPrefix": "z"}),
        )
        .await;
    assert_eq!(hit_lines(&z), only(&["z/"]), "{z}");
    let notes = s
        .ok(
            "search_note_content",
            json!({"query": "attention", "pathPrefix": "notes"}),
        )
        .await;
    assert_eq!(
        hit_lines(&notes),
        owned(&[("notes/cooking.md", 10), ("notes/中文笔记.md", 10)]),
        "{notes}"
    );

    let ml = s
        .ok(
            "search_note_content",
            json!({"query": "attention", "tag": ["ml"]}),
        )
        .await;
    assert_eq!(
        hit_lines(&ml),
        only(&["z/attention.md", "z/softmax.md", "z/transformer.md"]),
        "{ml}"
    );
    // An inline tag filters like a frontmatter one; every listed tag is required.
    let food = s
        .ok(
            "search_note_content",
            json!({"query": "attention", "tag": ["food"]}),
        )
        .await;
    assert_eq!(hit_lines(&food), owned(&[("notes/cooking.md", 10)]), "{food}");
    let both = s
        .ok(
            "search_note_content",
            json!({"query": "attention", "tag": ["ml", "architecture"]}),
        )
        .await;
    assert_eq!(
        hit_lines(&both),
        owned(&[("z/transformer.md", 4), ("z/transformer.md", 10)]),
        "{both}"
    );
    s.close().await;
}

#[tokio::test]
async fn search_note_content_never_searches_the_inbox() {
    let env = Env::new();
    std::fs::create_dir_all(env.vault.join("inbox/new")).unwrap();
    std::fs::write(
        env.vault.join("inbox/new/draft.md"),
        "# Draft\n\nattention quasarfrob\n",
    )
    .unwrap();
    let (_, token) = env.token("reader", "read");
    let s = Session::open(&env, &token).await;
    // `reviews` and `formal` occur only in inbox/README.md.
    for q in ["reviews", "formal", "quasarfrob"] {
        let v = s.ok("search_note_content", json!({"query": q})).await;
        assert_eq!(v["hits"], json!([]), "{q}: {v}");
    }
    let v = s.ok("search_note_content", json!({"query": "attention"})).await;
    assert_eq!(hit_lines(&v), owned(&ATTENTION_HITS));
    let k = s.ok("search_knowledge", json!({"query": "Inbox"})).await;
    assert_eq!(k["hits"], json!([]), "{k}");
    // Still readable directly.
    let readme = s.ok("read_note", json!({"path": "inbox/README.md"})).await;
    assert_eq!(readme["title"], "Inbox");
    s.close().await;
}

#[tokio::test]
async fn search_note_content_empty_query_is_invalid_argument() {
    let (_env, s) = reader().await;
    for q in ["", "   ", "\t\n"] {
        assert_eq!(
            s.code("search_note_content", json!({"query": q})).await,
            "INVALID_ARGUMENT",
            "{q:?}"
        );
        assert_eq!(
            s.code("search_knowledge", json!({"query": q})).await,
            "INVALID_ARGUMENT",
            "{q:?}"
        );
    }
    s.close().await;
}

#[tokio::test]
async fn search_note_content_snippet_of_a_long_line_is_at_most_200_characters_around_the_term() {
    let env = Env::new();
    let line = format!("{}注意力 quasarfrob{}", "字".repeat(400), "尾".repeat(400));
    std::fs::write(env.vault.join("z/long.md"), format!("# Long\n\n{line}\n")).unwrap();
    let (_, token) = env.token("reader", "read");
    let s = Session::open(&env, &token).await;
    let v = s.ok("search_note_content", json!({"query": "quasarfrob"})).await;
    assert_eq!(hit_lines(&v), owned(&[("z/long.md", 3)]), "{v}");
    let snippet = v["hits"][0]["snippet"].as_str().unwrap();
    assert!(
        snippet.chars().count() <= 200,
        "{} chars: {snippet}",
        snippet.chars().count()
    );
    assert!(
        snippet.contains("quasarfrob"),
        "the snippet shows the term: {snippet}"
    );
    s.close().await;
}

// ---- search_knowledge ----------------------------------------------------------------------------------

/// A `search_knowledge` hit: path and its `matched` kinds as a set.
type KnowledgeHit = (String, BTreeSet<String>);

/// (path, matched kinds as a set) of each hit, in answer order.
fn knowledge_hits(v: &Value) -> Vec<KnowledgeHit> {
    v["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            let matched: Vec<String> = h["matched"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m.as_str().unwrap().to_owned())
                .collect();
            let set: BTreeSet<String> = matched.iter().cloned().collect();
            assert_eq!(set.len(), matched.len(), "matched has no duplicates: {h}");
            assert_eq!(h["title"], title_of(h["path"].as_str().unwrap()), "{h}");
            (h["path"].as_str().unwrap().to_owned(), set)
        })
        .collect()
}

fn kh(path: &str, matched: &[&str]) -> KnowledgeHit {
    (path.to_owned(), matched.iter().map(|m| (*m).to_owned()).collect())
}

fn assert_ranked_by_score(v: &Value) {
    let scores: Vec<u64> = v["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["score"].as_u64().unwrap())
        .collect();
    assert!(
        scores.windows(2).all(|w| w[0] >= w[1]),
        "hits ranked by score: {v}"
    );
}

#[tokio::test]
async fn search_knowledge_matches_titles_aliases_descriptions_and_tags() {
    let (_env, s) = reader().await;
    let cases: [(&str, Vec<KnowledgeHit>); 6] = [
        ("注意力", vec![kh("z/attention.md", &["alias"])]),
        ("Self-Attention", vec![kh("z/attention.md", &["alias"])]),
        (
            "attention",
            vec![
                kh("z/attention.md", &["title", "alias", "description"]),
                kh("z/transformer.md", &["description"]),
            ],
        ),
        ("probability", vec![kh("z/softmax.md", &["description"])]),
        ("Welcome", vec![kh("welcome.md", &["title"])]),
        ("food", vec![kh("notes/cooking.md", &["tag"])]),
    ];
    for (q, expected) in cases {
        let v = s.ok("search_knowledge", json!({"query": q})).await;
        assert_eq!(knowledge_hits(&v), expected, "{q}: {v}");
        assert_ranked_by_score(&v);
    }
    // Found through its alias; every term must match some field.
    let model = s
        .ok("search_knowledge", json!({"query": "Transformer model"}))
        .await;
    let hits = knowledge_hits(&model);
    assert_eq!(hits.len(), 1, "{model}");
    assert_eq!(hits[0].0, "z/transformer.md");
    assert!(hits[0].1.contains("alias"), "{model}");
    // Tags, frontmatter or inline, by query; `读书` is also in the title.
    let reading = s.ok("search_knowledge", json!({"query": "读书"})).await;
    assert_eq!(
        knowledge_hits(&reading),
        vec![kh("notes/中文笔记.md", &["title", "tag"])],
        "{reading}"
    );
    let arch = s.ok("search_knowledge", json!({"query": "architecture"})).await;
    let arch_hits = knowledge_hits(&arch);
    assert_eq!(arch_hits.len(), 1, "{arch}");
    assert_eq!(arch_hits[0].0, "z/transformer.md");
    assert!(arch_hits[0].1.contains("tag"), "{arch}");
    s.close().await;
}

#[tokio::test]
async fn search_knowledge_tag_filter_keeps_only_notes_carrying_every_tag() {
    let (_env, s) = reader().await;
    let both = s
        .ok(
            "search_knowledge",
            json!({"query": "attention", "tag": ["transformer"]}),
        )
        .await;
    let paths: Vec<String> = knowledge_hits(&both).into_iter().map(|(p, _)| p).collect();
    assert_eq!(paths, ["z/attention.md", "z/transformer.md"], "{both}");
    let arch = s
        .ok(
            "search_knowledge",
            json!({"query": "attention", "tag": ["architecture"]}),
        )
        .await;
    let paths: Vec<String> = knowledge_hits(&arch).into_iter().map(|(p, _)| p).collect();
    assert_eq!(paths, ["z/transformer.md"], "{arch}");
    let moc = s
        .ok("search_knowledge", json!({"query": "attention", "tag": ["moc"]}))
        .await;
    assert_eq!(moc["hits"], json!([]), "{moc}");
    let one = s
        .ok("search_knowledge", json!({"query": "attention", "limit": 1}))
        .await;
    let paths: Vec<String> = knowledge_hits(&one).into_iter().map(|(p, _)| p).collect();
    assert_eq!(paths, ["z/attention.md"], "{one}");
    s.close().await;
}

// ---- get_vault_overview, vault_list ----------------------------------------------------------------------

#[tokio::test]
async fn get_vault_overview_counts_notes_standards_tags_and_reports_revision_and_index() {
    let (_env, s) = reader().await;
    let v = s.ok("get_vault_overview", json!({})).await;
    assert_eq!(v["notes"], 9, "{v}");
    assert_eq!(v["standards"], 2, "{v}");
    assert_eq!(v["tags"], 10, "{v}");
    assert_eq!(v["pendingProposals"], 0, "{v}");
    let revision = v["revision"]
        .as_u64()
        .unwrap_or_else(|| panic!("revision is a counter: {v}"));
    let index = v["index"].as_object().expect("index object");
    parse_rfc3339_utc(index["indexedAt"].as_str().expect("indexedAt"));
    assert!(index["fresh"].is_boolean(), "{v}");
    assert!(index["staleFiles"].is_u64(), "{v}");
    assert!(v["history"].is_object(), "{v}");
    // Nothing changed in between: same revision.
    let again = s.ok("get_vault_overview", json!({"vault": "basic"})).await;
    assert_eq!(again["revision"], revision);
    assert_eq!(again["notes"], 9);
    s.close().await;
}

#[tokio::test]
async fn vault_list_shows_the_default_vault_with_its_note_count_and_no_absolute_paths() {
    let (env, s) = reader().await;
    let v = s.ok("vault_list", json!({})).await;
    assert_eq!(
        v,
        json!({"vaults": [{"id": "basic", "name": "vault", "isDefault": true, "noteCount": 9}], "truncated": false})
    );
    let mut strings = Vec::new();
    string_values(&v, &mut strings);
    for s in strings {
        assert!(
            !s.starts_with('/') && !s.contains(env.vault.to_str().unwrap()),
            "{s}"
        );
    }
    s.close().await;
}

// ---- vault targeting ---------------------------------------------------------------------------------------

#[tokio::test]
async fn omitted_vault_uses_the_default_and_a_named_vault_is_used_when_given() {
    let env = Env::new();
    add_second_vault(&env);
    let (_, token) = env.token("reader", "read");
    let s = Session::open(&env, &token).await;

    let list = s.ok("vault_list", json!({})).await;
    let vaults: BTreeMap<String, (bool, u64)> = list["vaults"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["id"].as_str().unwrap().to_owned(),
                (
                    v["isDefault"].as_bool().unwrap(),
                    v["noteCount"].as_u64().unwrap(),
                ),
            )
        })
        .collect();
    assert_eq!(
        vaults,
        BTreeMap::from([
            ("basic".to_owned(), (true, 9)),
            ("second".to_owned(), (false, 10))
        ]),
        "{list}"
    );

    // The note only the second vault has.
    assert_eq!(
        s.code("read_note", json!({"path": "only-in-second.md"})).await,
        "NOT_FOUND"
    );
    let second = s
        .ok(
            "read_note",
            json!({"path": "only-in-second.md", "vault": "second"}),
        )
        .await;
    assert_eq!(second["title"], "Only in second");
    assert_eq!(s.ok("get_vault_overview", json!({})).await["notes"], 9);
    assert_eq!(
        s.ok("get_vault_overview", json!({"vault": "second"})).await["notes"],
        10
    );
    let listed = s.ok("list_notes", json!({"vault": "second"})).await;
    assert!(
        entries(&listed).contains(&entry("only-in-second.md", "note", Some("Only in second"))),
        "{listed}"
    );
    s.close().await;
}

#[tokio::test]
async fn an_unknown_vault_is_vault_not_found_for_every_tool() {
    let (_env, s) = reader().await;
    let calls = [
        ("get_vault_overview", json!({"vault": "nope"})),
        ("search_knowledge", json!({"vault": "nope", "query": "attention"})),
        (
            "search_note_content",
            json!({"vault": "nope", "query": "attention"}),
        ),
        ("read_note", json!({"vault": "nope", "path": "z/attention.md"})),
        ("list_notes", json!({"vault": "nope"})),
        ("list_standards", json!({"vault": "nope"})),
        ("list_tags", json!({"vault": "nope"})),
        (
            "get_related_notes",
            json!({"vault": "nope", "path": "z/attention.md"}),
        ),
        ("list_recent_notes", json!({"vault": "nope"})),
    ];
    for (tool, args) in calls {
        assert_eq!(s.code(tool, args).await, "VAULT_NOT_FOUND", "{tool}");
    }
    s.close().await;
}

#[tokio::test]
async fn a_credential_scoped_to_one_vault_sees_only_it_and_other_vaults_look_nonexistent() {
    let env = Env::new();
    add_second_vault(&env);
    let (_, token) = issue(&env, "scoped", "read", &["--vault", "second"]);
    let s = Session::open(&env, &token).await;

    let list = s.ok("vault_list", json!({})).await;
    let ids: Vec<&str> = list["vaults"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["second"], "{list}");

    // The only visible vault is the target when none is named, though `basic` is the default.
    let only = s.ok("read_note", json!({"path": "only-in-second.md"})).await;
    assert_eq!(only["title"], "Only in second");

    let hidden = s
        .err("read_note", json!({"vault": "basic", "path": "z/attention.md"}))
        .await;
    let missing = s
        .err("read_note", json!({"vault": "nope", "path": "z/attention.md"}))
        .await;
    assert_eq!(hidden["code"], "VAULT_NOT_FOUND");
    assert_eq!(missing["code"], "VAULT_NOT_FOUND");
    assert_eq!(hidden["retryable"], missing["retryable"]);
    assert_eq!(
        hidden["message"].as_str().unwrap().replace("basic", "ID"),
        missing["message"].as_str().unwrap().replace("nope", "ID"),
        "a vault out of scope answers exactly like one that does not exist"
    );
    assert_eq!(
        s.code("get_vault_overview", json!({"vault": "basic"})).await,
        "VAULT_NOT_FOUND"
    );

    // Resources follow the same scope.
    let uris: Vec<String> = s
        .client
        .inner
        .list_all_resources()
        .await
        .unwrap()
        .iter()
        .map(|r| {
            serde_json::to_value(r).unwrap()["uri"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert!(uris.contains(&"vaultgate://vault/second".to_owned()), "{uris:?}");
    assert!(!uris.iter().any(|u| u.contains("/basic")), "{uris:?}");
    assert!(s.read_resource("vaultgate://vault/basic").await.is_err());
    assert!(
        s.read_resource("vaultgate://standards/basic/docs/style.md")
            .await
            .is_err()
    );
    s.close().await;
}

#[tokio::test]
async fn two_visible_vaults_without_a_default_require_the_vault_argument() {
    let env = Env::new();
    add_second_vault(&env);
    clear_default_vault(&env);
    let (_, token) = env.token("reader", "read");
    let (_, scoped) = issue(&env, "scoped", "read", &["--vault", "second"]);
    let s = Session::open(&env, &token).await;

    let list = s.ok("vault_list", json!({})).await;
    for v in list["vaults"].as_array().unwrap() {
        assert_eq!(v["isDefault"], false, "{list}");
    }
    let calls = [
        ("get_vault_overview", json!({})),
        ("search_knowledge", json!({"query": "attention"})),
        ("search_note_content", json!({"query": "attention"})),
        ("read_note", json!({"path": "z/attention.md"})),
        ("list_notes", json!({})),
        ("list_standards", json!({})),
        ("list_tags", json!({})),
        ("get_related_notes", json!({"path": "z/attention.md"})),
        ("list_recent_notes", json!({})),
    ];
    for (tool, args) in calls {
        assert_eq!(
            s.code(tool, args.clone()).await,
            "VAULT_TARGET_REQUIRED",
            "{tool}"
        );
        let mut named = args;
        named["vault"] = json!("basic");
        s.ok(tool, named).await;
    }
    s.close().await;

    // A credential that sees one vault needs no default.
    let one = Session::open(&env, &scoped).await;
    let v = one.ok("get_vault_overview", json!({})).await;
    assert_eq!(v["notes"], 10);
    one.close().await;
}

// ---- argument and protocol errors ------------------------------------------------------------------------

#[tokio::test]
async fn an_unknown_argument_field_is_invalid_argument() {
    let (_env, s) = reader().await;
    let calls = [
        ("vault_list", json!({"vault": "basic"})),
        ("vault_list", json!({"bogus": 1})),
        ("read_note", json!({"path": "z/attention.md", "bogus": true})),
        ("list_notes", json!({"folder": "z"})),
        (
            "search_note_content",
            json!({"query": "attention", "path_prefix": "z"}),
        ),
        ("list_tags", json!({"vaultId": "basic"})),
    ];
    for (tool, args) in calls {
        assert_eq!(
            s.code(tool, args.clone()).await,
            "INVALID_ARGUMENT",
            "{tool}({args})"
        );
    }
    s.close().await;
}

#[tokio::test]
async fn a_wrong_type_or_missing_required_field_is_invalid_argument() {
    let (_env, s) = reader().await;
    let calls = [
        ("read_note", json!({"path": 5})),
        ("read_note", json!({})),
        ("read_note", json!({"path": "z/attention.md", "vault": 7})),
        ("list_notes", json!({"limit": "ten"})),
        ("list_notes", json!({"limit": -1})),
        ("search_note_content", json!({"query": ["attention"]})),
        ("search_note_content", json!({"query": "attention", "tag": "ml"})),
        ("search_knowledge", json!({})),
        ("get_related_notes", json!({"path": null})),
        ("list_recent_notes", json!({"since": 12})),
    ];
    for (tool, args) in calls {
        assert_eq!(
            s.code(tool, args.clone()).await,
            "INVALID_ARGUMENT",
            "{tool}({args})"
        );
    }
    s.close().await;
}

#[tokio::test]
async fn an_unknown_tool_is_a_json_rpc_error_and_the_session_goes_on() {
    let (_env, s) = reader().await;
    match s.client.try_call("no_such_tool", json!({})).await {
        Err(rmcp::ServiceError::McpError(e)) => {
            assert!(
                [-32602, -32601].contains(&e.code.0),
                "unknown tool: JSON-RPC invalid params or method not found, got {e:?}"
            );
            assert!(e.message.contains("no_such_tool"), "{e:?}");
        }
        Err(other) => panic!("expected a JSON-RPC error, got {other:?}"),
        Ok(r) => panic!("expected a JSON-RPC error, got a tool result {r:?}"),
    }
    // Not a dropped connection.
    assert_eq!(
        s.ok("list_tags", json!({})).await["tags"]
            .as_array()
            .unwrap()
            .len(),
        10
    );
    s.close().await;
}

// ---- resources ------------------------------------------------------------------------------------------

fn resource_text(v: &Value) -> String {
    let contents = v["contents"].as_array().expect("contents");
    assert_eq!(contents.len(), 1, "{v}");
    assert_eq!(contents[0]["mimeType"], "text/markdown", "{v}");
    contents[0]["text"].as_str().expect("text contents").to_owned()
}

#[tokio::test]
async fn resources_list_has_the_invariants_each_vault_overview_and_each_standard() {
    let (_env, s) = reader().await;
    let resources: Vec<Value> = s
        .client
        .inner
        .list_all_resources()
        .await
        .unwrap()
        .iter()
        .map(|r| serde_json::to_value(r).unwrap())
        .collect();
    let uris: BTreeSet<&str> = resources.iter().map(|r| r["uri"].as_str().unwrap()).collect();
    assert_eq!(
        uris,
        BTreeSet::from([
            "ui://vaultgate/proposal",
            "vaultgate://invariants",
            "vaultgate://vault/basic",
            "vaultgate://standards/basic/docs/style.md",
            "vaultgate://standards/basic/docs/tags.md",
        ]),
        "{resources:?}"
    );
    for r in &resources {
        // The approval card is HTML for hosts that render MCP Apps; everything else is Markdown.
        let mime = if r["uri"] == "ui://vaultgate/proposal" {
            "text/html;profile=mcp-app"
        } else {
            "text/markdown"
        };
        assert_eq!(r["mimeType"], mime, "{r}");
        assert!(r["name"].as_str().is_some_and(|n| !n.is_empty()), "{r}");
    }
    s.close().await;
}

#[tokio::test]
async fn reading_each_resource_returns_markdown() {
    let (_env, s) = reader().await;
    let invariants = resource_text(&s.read_resource("vaultgate://invariants").await.unwrap());
    assert!(invariants.starts_with('#'), "{invariants}");
    assert!(invariants.contains("idempotencyKey"), "{invariants}");
    assert!(invariants.to_lowercase().contains("proposal"), "{invariants}");

    let overview = resource_text(&s.read_resource("vaultgate://vault/basic").await.unwrap());
    assert!(overview.starts_with('#'), "{overview}");
    assert!(overview.contains("basic"), "{overview}");
    assert!(
        overview.contains("docs/style.md"),
        "the overview names the standards: {overview}"
    );

    for path in ["docs/style.md", "docs/tags.md"] {
        let v = s
            .read_resource(&format!("vaultgate://standards/basic/{path}"))
            .await
            .unwrap();
        assert_eq!(resource_text(&v), fixture_text(path));
    }
    s.close().await;
}

#[tokio::test]
async fn a_resource_outside_the_standards_folder_or_an_unknown_vault_is_refused() {
    let (_env, s) = reader().await;
    for uri in [
        "vaultgate://standards/basic/z/attention.md",
        "vaultgate://standards/basic/inbox/README.md",
        "vaultgate://standards/basic/docs/../z/attention.md",
        "vaultgate://standards/basic/docs/missing.md",
        "vaultgate://standards/nope/docs/style.md",
        "vaultgate://vault/nope",
        "vaultgate://nothing-here",
    ] {
        match s.read_resource(uri).await {
            Err(rmcp::ServiceError::McpError(_)) => {}
            other => panic!("{uri}: expected a JSON-RPC error, got {other:?}"),
        }
    }
    s.close().await;
}

#[tokio::test]
async fn resource_templates_list_has_the_vault_and_standards_templates() {
    let (_env, s) = reader().await;
    let templates: BTreeSet<String> = s
        .client
        .inner
        .list_all_resource_templates()
        .await
        .unwrap()
        .iter()
        .map(|t| {
            serde_json::to_value(t).unwrap()["uriTemplate"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(
        templates,
        BTreeSet::from([
            "vaultgate://vault/{id}".to_owned(),
            "vaultgate://standards/{id}/{path}".to_owned(),
        ])
    );
    s.close().await;
}

// ---- audit -------------------------------------------------------------------------------------------------

#[tokio::test]
async fn every_tool_call_appends_one_audit_line_with_tool_outcome_and_code() {
    let env = Env::new();
    let (cred_id, token) = env.token("auditor", "read");
    let s = Session::open(&env, &token).await;
    let before = tool_call_lines(&env).len();

    s.ok("read_note", json!({"path": "z/attention.md"})).await;
    s.ok("list_tags", json!({})).await;
    s.err("read_note", json!({"path": "../outside.md"})).await;
    s.err("get_vault_overview", json!({"vault": "nope"})).await;
    s.err("list_notes", json!({"bogus": true})).await;
    s.ok("search_note_content", json!({"query": "attention"})).await;

    let lines = tool_call_lines(&env).split_off(before);
    let got: Vec<(&str, &str, Option<&str>)> = lines
        .iter()
        .map(|l| {
            (
                l["tool"].as_str().unwrap(),
                l["outcome"].as_str().unwrap(),
                l["code"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("read_note", "ok", None),
            ("list_tags", "ok", None),
            ("read_note", "denied", Some("PATH_INVALID")),
            ("get_vault_overview", "denied", Some("VAULT_NOT_FOUND")),
            ("list_notes", "denied", Some("INVALID_ARGUMENT")),
            ("search_note_content", "ok", None),
        ]
    );
    for l in &lines {
        let actor = &l["actor"];
        assert_eq!(actor["credentialId"], cred_id.as_str(), "{l}");
        assert_eq!(actor["name"], "auditor", "{l}");
        assert_eq!(actor["tier"], "read", "{l}");
        assert_eq!(actor["transport"], "stdio", "{l}");
        parse_rfc3339_utc(l["ts"].as_str().unwrap());
        assert!(l["argsHash"].is_string(), "{l}");
    }
    assert_eq!(lines[0]["target"], "z/attention.md");
    s.close().await;
}

#[tokio::test]
async fn the_audit_line_of_a_read_names_the_vault_it_read() {
    let env = Env::new();
    let (_, token) = env.token("auditor", "read");
    let s = Session::open(&env, &token).await;
    s.ok("read_note", json!({"path": "z/attention.md"})).await;
    s.ok("list_tags", json!({"vault": "basic"})).await;
    let lines = tool_call_lines(&env);
    assert_eq!(lines.len(), 2);
    for l in &lines {
        assert_eq!(l["vault"], "basic", "the default vault was read: {l}");
    }
    s.close().await;
}

#[tokio::test]
async fn the_audit_log_never_holds_note_contents_or_the_token() {
    let env = Env::new();
    let (_, token) = env.token("auditor", "read");
    let s = Session::open(&env, &token).await;
    s.ok("read_note", json!({"path": "z/attention.md"})).await;
    s.ok("read_note", json!({"path": "notes/中文笔记.md"})).await;
    s.ok("search_note_content", json!({"query": "weigh every other token"}))
        .await;
    s.ok("get_related_notes", json!({"path": "z/attention.md"})).await;
    s.read_resource("vaultgate://standards/basic/docs/style.md")
        .await
        .unwrap();
    assert_eq!(tool_call_lines(&env).len(), 4);

    let audit = std::fs::read_to_string(env.home.join("audit.jsonl")).unwrap();
    for secret in [
        "Attention lets every token weigh every other token of the sequence.",
        "weigh every other token",
        "注意力是稀缺资源",
        "Scaled dot-product attention, the core operation",
        "One idea per note",
        token.as_str(),
    ] {
        assert!(!audit.contains(secret), "audit.jsonl holds {secret:?}");
    }
    // Not even a piece of the token (its signature part).
    let signature = token.rsplit('.').next().unwrap();
    assert!(!audit.contains(signature));
    s.close().await;
}
