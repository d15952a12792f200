//! Attacks: the path corpus, token forgery and revocation, the audit chain.
//!
//! Every test builds its own home and copy of the `basic` vault; hostile files, secrets outside the
//! vault and escaping symlinks are created at run time (docs/contract.md#concepts, docs/contract.md#transports-and-protocol-versions, docs/contract.md#paths, docs/contract.md#the-audit-log, docs/contract.md#the-command-line). Table-driven tests
//! collect every mismatch and fail once, listing them all.

use std::io::Read;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jsonwebtoken::Algorithm;
use serde_json::{Value, json};

use crate::util::{Client, Env, Reply, bin, call};

/// Planted in every file no tool may ever show.
const MARKER: &str = "VGSECRETMARKER7f3a9c";
const START_TIMEOUT: Duration = Duration::from_secs(15);

const INVALID: &[&str] = &["PATH_INVALID"];
const DENIED: &[&str] = &["PATH_DENIED"];
const OUTSIDE: &[&str] = &["PATH_OUTSIDE_VAULT"];
const NOT_FOUND: &[&str] = &["NOT_FOUND"];
/// docs/contract.md#paths does not name a code for a symlink loop; anything but success is acceptable.
const LOOP: &[&str] = &["NOT_FOUND", "PATH_OUTSIDE_VAULT"];
/// docs/contract.md#paths never percent-decodes, so `%2e%2e` is an odd but literal name (`NOT_FOUND`); refusing
/// it outright (`PATH_INVALID`) is stricter and fine. It must never be decoded into `..`.
const ENCODED: &[&str] = &["PATH_INVALID", "NOT_FOUND"];

// ---- helpers ---------------------------------------------------------------------------------

fn reply_json(r: &Reply) -> &Value {
    match r {
        Reply::Ok(v) | Reply::Err(v) => v,
    }
}

fn write_file(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn now_unix() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

/// Sleeps until the token's `exp` is strictly in the past, whole seconds included.
fn wait_past_exp(token: &str) {
    let exp = claims_of(token)["exp"]
        .as_i64()
        .expect("an --expires token carries exp");
    while now_unix() <= exp {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(200));
}

fn short(s: &str) -> String {
    if s.chars().count() > 120 {
        format!("{}…", s.chars().take(120).collect::<String>())
    } else {
        s.to_owned()
    }
}

fn audit_text(env: &Env) -> String {
    std::fs::read_to_string(env.home.join("audit.jsonl")).unwrap_or_default()
}

fn audit_records(env: &Env) -> Vec<Value> {
    audit_text(env)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("audit line is not JSON ({e}): {l}")))
        .collect()
}

fn is_denied_with(r: &Value, code: &str) -> bool {
    r["outcome"] == "denied" && r["code"] == code
}

/// `token list --json`, parsed as the single JSON document it must be.
fn token_list(env: &Env) -> Vec<Value> {
    let out = env.ok(&["token", "list", "--json"]);
    let v: Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("token list --json is not one JSON document ({e}): {out}"));
    v.as_array()
        .unwrap_or_else(|| panic!("token list --json is not an array: {out}"))
        .clone()
}

fn tier_of(env: &Env, name: &str) -> Option<String> {
    token_list(env)
        .into_iter()
        .find(|c| c["name"] == name)
        .map(|c| c["tier"].as_str().unwrap_or_default().to_owned())
}

/// Issues a credential with extra `token issue` arguments; returns (id, token).
fn issue(env: &Env, name: &str, extra: &[&str]) -> (String, String) {
    let mut args = vec![
        "token", "issue", "--name", name, "--tier", "read", "--format", "json",
    ];
    args.extend_from_slice(extra);
    let v: Value = serde_json::from_str(&env.ok(&args)).unwrap();
    (
        v["id"].as_str().unwrap().to_owned(),
        v["token"].as_str().unwrap().to_owned(),
    )
}

/// The `seq` numbers a message names (`seq 7`, `seq=7`, `seq: 7`).
fn named_seqs(text: &str) -> Vec<u64> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("seq") {
        rest = &rest[i + 3..];
        let digits: String = rest
            .trim_start_matches([' ', '=', ':', '#', '"'])
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if let Ok(n) = digits.parse() {
            out.push(n);
        }
    }
    out
}

// ---- tokens ----------------------------------------------------------------------------------

fn b64url(input: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in input.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

fn claims_of(token: &str) -> Value {
    jsonwebtoken::dangerous::insecure_decode_claims::<Value>(token).expect("a JWT payload")
}

/// A JWT made by hand (the gateway's jsonwebtoken carries no crypto backend of its own).
pub(crate) fn sign(claims: &Value, alg: Algorithm, key: &[u8]) -> String {
    let (name, hmac) = match alg {
        Algorithm::HS256 => ("HS256", ring::hmac::HMAC_SHA256),
        Algorithm::HS384 => ("HS384", ring::hmac::HMAC_SHA384),
        Algorithm::HS512 => ("HS512", ring::hmac::HMAC_SHA512),
        other => panic!("tests sign HMAC tokens only, not {other:?}"),
    };
    let header = json!({"typ": "JWT", "alg": name});
    let input = format!(
        "{}.{}",
        b64url(header.to_string().as_bytes()),
        b64url(claims.to_string().as_bytes())
    );
    let tag = ring::hmac::sign(&ring::hmac::Key::new(hmac, key), input.as_bytes());
    format!("{input}.{}", b64url(tag.as_ref()))
}

fn real_key(env: &Env) -> Vec<u8> {
    let key = std::fs::read(env.home.join("secret.key")).unwrap();
    assert_eq!(
        key.len(),
        32,
        "docs/contract.md#concepts: secret.key is 32 random bytes"
    );
    key
}

fn random_key() -> Vec<u8> {
    let mut key = vec![0u8; 32];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut key)
        .unwrap();
    key
}

fn gateway_id(env: &Env) -> String {
    let toml = std::fs::read_to_string(env.home.join("gateway.toml")).unwrap();
    toml.lines()
        .find_map(|l| {
            let v = l
                .trim()
                .strip_prefix("gateway_id")?
                .trim_start()
                .strip_prefix('=')?;
            Some(v.trim().trim_matches('"').to_owned())
        })
        .expect("gateway.toml has gateway_id")
}

/// A token the gateway must refuse, and the code it must refuse it with.
struct Attack {
    name: &'static str,
    token: String,
    code: &'static str,
}

/// Builds every forged, expired and revoked token against this home. Also returns a token that
/// the test re-signed with the real key and the original claims: it must be accepted, which
/// proves the forgeries fail for their one defect and not for a bug in this file.
fn token_attacks(env: &Env) -> (Vec<Attack>, String) {
    let (id, real) = env.token("victim", "read");
    let claims = claims_of(&real);
    let gid = gateway_id(env);
    assert_eq!(
        claims["sub"],
        id.as_str(),
        "docs/contract.md#concepts: sub is the credential id"
    );
    assert_eq!(
        claims["aud"],
        gid.as_str(),
        "docs/contract.md#concepts: aud is the gateway id"
    );
    assert_eq!(
        claims["iss"], "vaultgate",
        "docs/contract.md#concepts: iss is vaultgate"
    );
    let key = real_key(env);
    let with = |field: &str, value: Value| {
        let mut c = claims.clone();
        c[field] = value;
        c
    };
    let real_header = real.split('.').next().unwrap().to_owned();
    let real_sig = real.rsplit('.').next().unwrap().to_owned();
    let none_header = b64url(br#"{"alg":"none","typ":"JWT"}"#);
    let payload = b64url(claims.to_string().as_bytes());

    let (_, expiring) = issue(env, "short-lived", &["--expires", "1s"]);
    let (_, revoked) = issue(env, "revoked", &[]);
    env.ok(&["token", "revoke", "revoked"]);

    let u = "UNAUTHORIZED";
    let attacks = [
        ("garbage", "not-a-token".into(), u),
        ("three garbage parts", "aaaa.bbbb.cccc".into(), u),
        (
            "signed with a different key",
            sign(&claims, Algorithm::HS256, &random_key()),
            u,
        ),
        (
            "wrong audience",
            sign(&with("aud", json!("other")), Algorithm::HS256, &key),
            u,
        ),
        (
            "wrong issuer",
            sign(&with("iss", json!("evil")), Algorithm::HS256, &key),
            u,
        ),
        (
            "unknown credential",
            sign(&with("sub", json!("cred_0000")), Algorithm::HS256, &key),
            u,
        ),
        ("alg none", format!("{none_header}.{payload}."), u),
        (
            "alg none with the real signature",
            format!("{none_header}.{payload}.{real_sig}"),
            u,
        ),
        (
            "alg HS512 with the real key",
            sign(&claims, Algorithm::HS512, &key),
            u,
        ),
        (
            "payload changed, signature kept",
            format!(
                "{real_header}.{}.{real_sig}",
                b64url(with("tier", json!("full")).to_string().as_bytes())
            ),
            u,
        ),
        ("expired", expiring, "CREDENTIAL_EXPIRED"),
        ("revoked", revoked, "CREDENTIAL_REVOKED"),
    ]
    .into_iter()
    .map(|(name, token, code)| Attack { name, token, code })
    .collect();
    (attacks, sign(&claims, Algorithm::HS256, &key))
}

/// What one `vaultgate stdio` start did.
struct Start {
    /// `None`: still running at the deadline (it accepted the token) and was killed.
    exit: Option<i32>,
    stdout: Vec<u8>,
    stderr: String,
}

/// Starts `vaultgate stdio` with `token` (or none) and stdin held open, as a client would.
fn start_stdio(env: &Env, token: Option<&str>) -> Start {
    let mut cmd = Command::new(bin());
    cmd.arg("stdio")
        .arg("--home")
        .arg(&env.home)
        .env_remove("VAULTGATE_HOME")
        .env_remove("VAULTGATE_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(t) = token {
        cmd.env("VAULTGATE_TOKEN", t);
    }
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + START_TIMEOUT;
    let exit = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(25));
    };
    let mut stdout = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut stdout).unwrap();
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    Start { exit, stdout, stderr }
}

/// Checks docs/contract.md#transports-and-protocol-versions: exit 1, nothing on stdout, a clear message on stderr (naming the error code,
/// docs/contract.md#the-command-line), and the token never echoed.
fn check_refused_start(what: &str, token: Option<&str>, expect: &str, s: &Start, failures: &mut Vec<String>) {
    if s.exit != Some(1) {
        failures.push(format!("{what}: exit {:?}, want 1 (None = kept serving)", s.exit));
    }
    if !s.stdout.is_empty() {
        failures.push(format!(
            "{what}: wrote to stdout: {:?}",
            String::from_utf8_lossy(&s.stdout)
        ));
    }
    if !s.stderr.contains(expect) {
        failures.push(format!(
            "{what}: stderr does not mention {expect}: {:?}",
            s.stderr
        ));
    }
    if let Some(t) = token.filter(|t| t.len() > 12)
        && s.stderr.contains(t)
    {
        failures.push(format!("{what}: stderr echoes the token"));
    }
}

// ---- a hostile vault -------------------------------------------------------------------------

/// Plants secrets outside the vault, hidden and tooling files inside it, and escaping symlinks.
fn plant_hostile_files(env: &Env) {
    let v = &env.vault;
    let tmp = env.tmp.path();
    let note = format!("---\ntitle: {MARKER}\ntags: [leak]\n---\n# {MARKER}\nsecret {MARKER} #leak\n");
    // Outside the vault: one file, one folder.
    write_file(&tmp.join("outside.md"), &note);
    write_file(&tmp.join("outside_dir/secret.md"), &note);
    // Hidden and tooling places inside the vault.
    write_file(&v.join(".git/config"), &format!("[core]\n\tsecret = {MARKER}\n"));
    for rel in [
        ".git/leak.md",
        ".obsidian/app.json",
        ".obsidian/leak.md",
        ".vaultgate/x",
        ".env",
        "z/.hidden.md",
        "node_modules/x.md",
        "target/x.md",
        "z/node_modules/y.md",
    ] {
        write_file(&v.join(rel), &note);
    }
    let link = |target: &Path, at: &str| symlink(target, v.join(at)).unwrap();
    link(&tmp.join("outside.md"), "z/out.md"); // absolute, outside
    link(Path::new("../../outside.md"), "z/rel.md"); // relative, climbing out
    link(Path::new("../.git/config"), "z/hid.md"); // into a hidden folder
    link(Path::new("../.git"), "z/gitdir"); // a folder link into a hidden folder
    link(&tmp.join("outside_dir"), "linked"); // folder link, absolute, outside
    link(Path::new("chain2.md"), "z/chain.md"); // chain: z/chain.md -> z/chain2.md -> outside
    link(&tmp.join("outside.md"), "z/chain2.md");
    link(Path::new("loop2.md"), "z/loop1.md"); // loop
    link(Path::new("loop1.md"), "z/loop2.md");
    link(Path::new("../outside_dir"), "notes2"); // symlinked parent folder, relative
    link(Path::new("attention.md"), "z/alias.md"); // legit, inside the vault
    link(Path::new("nowhere.md"), "z/dangling.md");
}

/// Outside the vault or hidden: must never appear in a listing or search.
fn is_forbidden(path: &str) -> bool {
    let first = path.split('/').next().unwrap_or_default();
    path.split('/')
        .any(|s| s.starts_with('.') || s == "node_modules" || s == "target")
        || first == "linked"
        || first == "notes2"
        || [
            "z/out.md",
            "z/rel.md",
            "z/hid.md",
            "z/gitdir",
            "z/chain.md",
            "z/chain2.md",
        ]
        .contains(&path)
}

/// A path of exactly `n` bytes below `z/` whose segments are all short and ordinary.
fn long_path(n: usize) -> String {
    let mut s = String::from("z");
    while s.len() + 101 + 10 <= n {
        s.push('/');
        s.push_str(&"a".repeat(100));
    }
    let last = n - s.len() - 1 - 3;
    s.push('/');
    s.push_str(&"b".repeat(last));
    s.push_str(".md");
    assert_eq!(s.len(), n);
    s
}

/// One row of the path-attack table.
struct Case {
    tool: &'static str,
    args: Value,
    expect: &'static [&'static str],
}

fn read(path: impl Into<String>, expect: &'static [&'static str]) -> Case {
    Case {
        tool: "read_note",
        args: json!({ "path": path.into() }),
        expect,
    }
}

fn list(dir: &str, expect: &'static [&'static str]) -> Case {
    Case {
        tool: "list_notes",
        args: json!({ "dir": dir }),
        expect,
    }
}

fn related(path: &str, expect: &'static [&'static str]) -> Case {
    Case {
        tool: "get_related_notes",
        args: json!({ "path": path }),
        expect,
    }
}

fn search_in(prefix: &str, expect: &'static [&'static str]) -> Case {
    Case {
        tool: "search_note_content",
        args: json!({ "query": "a", "pathPrefix": prefix }),
        expect,
    }
}

fn path_corpus() -> Vec<Case> {
    vec![
        // Empty, traversal, `.` segments.
        read("", INVALID),
        read("../x", INVALID),
        read("../outside.md", INVALID),
        read("z/../../etc/passwd", INVALID),
        read("z/../welcome.md", INVALID),
        read("z/./attention.md", INVALID),
        read("./welcome.md", INVALID),
        read("z/attention.md/..", INVALID),
        read(".", INVALID),
        read("..", INVALID),
        // Absolute, drive letters, UNC, backslashes.
        read("/etc/passwd", INVALID),
        read("/z/attention.md", INVALID),
        read("C:/x.md", INVALID),
        read("c:x", INVALID),
        read("C:\\Windows\\win.ini", INVALID),
        read("//srv/share", INVALID),
        read("//srv/share/x.md", INVALID),
        read("\\\\srv\\share", INVALID),
        read("z\\attention.md", INVALID),
        read("..\\outside.md", INVALID),
        // Percent-encoded: never decoded. `z/%2e%2e/welcome.md` would read welcome.md if it were.
        read("%2e%2e/x", ENCODED),
        read("..%2fx", ENCODED),
        read("%2e%2e/outside.md", ENCODED),
        read("z/%2e%2e/welcome.md", ENCODED),
        read("%2e%2e%2foutside.md", ENCODED),
        // NUL and control characters.
        read("z/attention.md\0", INVALID),
        read("z/atten\0tion.md", INVALID),
        read("z/a\u{1}.md", INVALID),
        read("z/attention\n.md", INVALID),
        read("z/\u{1b}[31m.md", INVALID),
        read("z/\u{7f}.md", INVALID),
        read("z/\u{85}.md", INVALID),
        // Length: 1024 bytes is allowed (and absent), 1025 is not.
        read(long_path(1024), NOT_FOUND),
        read(long_path(1025), INVALID),
        read(long_path(4000), INVALID),
        // Alternate data streams, trailing dot or space.
        read("z/attention.md:stream", INVALID),
        read("z/attention.md::$DATA", INVALID),
        read("z/attention.md.", INVALID),
        read("z/attention.md ", INVALID),
        read("z./attention.md", INVALID),
        read("z /attention.md", INVALID),
        // Reserved device names, whole segment or stem, any case.
        read("CON", INVALID),
        read("nul.md", INVALID),
        read("z/COM1.txt", INVALID),
        read("lpt9.md", INVALID),
        read("z/aux.md", INVALID),
        read("z/Prn.md", INVALID),
        read("con/x.md", INVALID),
        // Zero-width and bidirectional-control characters.
        read("z/atten\u{200B}tion.md", INVALID),
        read("z/attention\u{200D}.md", INVALID),
        read("z/\u{202E}dm.noitnetta", INVALID),
        read("z/attention\u{2066}.md", INVALID),
        read("\u{FEFF}welcome.md", INVALID),
        // Hidden and tooling folders, existing or not (the answer reveals nothing).
        read(".git/config", DENIED),
        read(".git/absent", DENIED),
        read(".git/leak.md", DENIED),
        read(".git", DENIED),
        read(".obsidian/app.json", DENIED),
        read(".obsidian/leak.md", DENIED),
        read(".vaultgate/x", DENIED),
        read(".vaultgate/index.sqlite", DENIED),
        read(".env", DENIED),
        read("z/.hidden.md", DENIED),
        read("z/.absent.md", DENIED),
        read("node_modules/x.md", DENIED),
        read("z/node_modules/y.md", DENIED),
        read("target/x.md", DENIED),
        // Symlinks.
        read("z/out.md", OUTSIDE),
        read("z/rel.md", OUTSIDE),
        read("z/hid.md", DENIED),
        read("z/gitdir/config", DENIED),
        read("z/gitdir/leak.md", DENIED),
        read("linked/secret.md", OUTSIDE),
        read("z/chain.md", OUTSIDE),
        read("z/chain2.md", OUTSIDE),
        read("z/loop1.md", LOOP),
        read("z/loop2.md", LOOP),
        read("notes2/secret.md", OUTSIDE),
        read("z/dangling.md", NOT_FOUND),
        read("z/missing.md", NOT_FOUND),
        // list_notes `dir`.
        list("..", INVALID),
        list("../", INVALID),
        list("/etc", INVALID),
        list("z/../..", INVALID),
        list("C:/", INVALID),
        list("z\\sub", INVALID),
        list("z:stream", INVALID),
        list("\u{202E}z", INVALID),
        list(".git", DENIED),
        list(".obsidian", DENIED),
        list(".vaultgate", DENIED),
        list("node_modules", DENIED),
        list("target", DENIED),
        list("z/gitdir", DENIED),
        list("linked", OUTSIDE),
        list("notes2", OUTSIDE),
        // get_related_notes.
        related("../welcome.md", INVALID),
        related("/etc/passwd", INVALID),
        related(".git/leak.md", DENIED),
        related("z/hid.md", DENIED),
        related("z/out.md", OUTSIDE),
        related("linked/secret.md", OUTSIDE),
        related("z/chain.md", OUTSIDE),
        // search_note_content `pathPrefix`.
        search_in("../", INVALID),
        search_in("/etc", INVALID),
        search_in("z/../..", INVALID),
        search_in("C:", INVALID),
        search_in(".git", DENIED),
        search_in(".obsidian", DENIED),
        search_in("node_modules", DENIED),
        search_in("target", DENIED),
    ]
}

/// Runs one row; records a mismatch, and any leak, in `failures`.
async fn check_case(c: &Client, case: &Case, tmp: &str, failures: &mut Vec<String>) {
    let label = short(&format!("{} {}", case.tool, case.args));
    let r = call(c, case.tool, case.args.clone()).await;
    let text = reply_json(&r).to_string();
    if text.contains(MARKER) {
        failures.push(format!("{label}: LEAKED the secret: {}", short(&text)));
    }
    if text.contains(tmp) {
        failures.push(format!("{label}: reveals an absolute path: {}", short(&text)));
    }
    match r {
        Reply::Ok(v) => failures.push(format!(
            "{label}: want {:?}, got success {}",
            case.expect,
            short(&v.to_string())
        )),
        Reply::Err(e) => {
            let code = e["code"].as_str().unwrap_or_default();
            if !case.expect.contains(&code) {
                failures.push(format!("{label}: want {:?}, got {code}", case.expect));
            }
        }
    }
}

fn assert_no_failures(what: &str, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{what}: {} failure(s):\n  {}",
        failures.len(),
        failures.join("\n  ")
    );
}

// ---- 1. paths --------------------------------------------------------------------------------

#[tokio::test]
async fn path_attack_corpus_is_refused_with_the_spec_codes_and_leaks_nothing() {
    let env = Env::new();
    plant_hostile_files(&env);
    let (_, token) = env.token("reader", "read");
    let c = env.stdio(&token).await;
    let tmp = env.tmp.path().to_str().unwrap().to_owned();

    let corpus = path_corpus();
    assert!(corpus.iter().filter(|c| c.tool == "read_note").count() >= 40);
    let mut failures = Vec::new();
    for case in &corpus {
        check_case(&c, case, &tmp, &mut failures).await;
    }

    // PATH_INVALID and PATH_DENIED reveal nothing about what exists: an existing and a missing
    // target get the same answer.
    for (exists, absent) in [
        (".git/config", ".git/absent"),
        ("z/.hidden.md", "z/.absent.md"),
        ("node_modules/x.md", "node_modules/absent.md"),
        ("../outside.md", "../absent.md"),
    ] {
        let a = call(&c, "read_note", json!({ "path": exists })).await;
        let b = call(&c, "read_note", json!({ "path": absent })).await;
        let a = reply_json(&a).to_string().replace(exists, "<p>");
        let b = reply_json(&b).to_string().replace(absent, "<p>");
        if a != b {
            failures.push(format!("{exists} and {absent} answer differently: {a} vs {b}"));
        }
    }
    c.close().await;
    assert_no_failures("path corpus", &failures);
}

#[tokio::test]
async fn a_symlink_to_a_note_inside_the_vault_reads_like_the_note() {
    let env = Env::new();
    plant_hostile_files(&env);
    let (_, token) = env.token("reader", "read");
    let c = env.stdio(&token).await;
    let alias = call(&c, "read_note", json!({ "path": "z/alias.md" })).await.ok();
    let real = call(&c, "read_note", json!({ "path": "z/attention.md" }))
        .await
        .ok();
    assert_eq!(alias["path"], "z/alias.md");
    assert_eq!(alias["content"], real["content"]);
    assert_eq!(
        alias["hash"],
        "c7aa231fa541e9e69ba4e19ecc16753b24fb35c5d09814038db0e580e23be296"
    );
    assert_eq!(alias["title"], "Attention");
    c.close().await;
}

#[tokio::test]
async fn listings_and_searches_never_expose_outside_or_hidden_files() {
    let env = Env::new();
    plant_hostile_files(&env);
    let (_, token) = env.token("reader", "read");
    let c = env.stdio(&token).await;
    let mut failures = Vec::new();
    let seen = |failures: &mut Vec<String>, what: &str, v: &Value, paths: Vec<String>| {
        if v.to_string().contains(MARKER) {
            failures.push(format!("{what}: LEAKED the secret: {}", short(&v.to_string())));
        }
        for p in paths.into_iter().filter(|p| is_forbidden(p)) {
            failures.push(format!("{what}: exposes {p}"));
        }
    };
    let paths = |v: &Value, list: &str| -> Vec<String> {
        v[list]
            .as_array()
            .unwrap_or_else(|| panic!("no `{list}` array in {v}"))
            .iter()
            .map(|e| e["path"].as_str().unwrap_or_default().to_owned())
            .collect()
    };

    let root = call(&c, "list_notes", json!({})).await.ok();
    let root_paths = paths(&root, "entries");
    assert!(
        root_paths.iter().any(|p| p == "welcome.md"),
        "sanity: the root lists welcome.md: {root}"
    );
    seen(&mut failures, "list_notes (root)", &root, root_paths);
    for dir in ["z", "notes", "docs", "journal"] {
        let v = call(&c, "list_notes", json!({ "dir": dir })).await.ok();
        let p = paths(&v, "entries");
        seen(&mut failures, &format!("list_notes {dir}"), &v, p);
    }
    let recent = call(&c, "list_recent_notes", json!({ "limit": 200 })).await.ok();
    let p = paths(&recent, "notes");
    assert!(
        p.iter().any(|p| p == "z/attention.md"),
        "sanity: recent lists notes: {recent}"
    );
    seen(&mut failures, "list_recent_notes", &recent, p);
    for query in [MARKER, "secret", "a", "leak"] {
        let v = call(&c, "search_note_content", json!({ "query": query, "limit": 200 }))
            .await
            .ok();
        let p = paths(&v, "hits");
        if query == MARKER && !p.is_empty() {
            failures.push(format!("search_note_content {MARKER}: found {p:?}"));
        }
        seen(&mut failures, &format!("search_note_content {query}"), &v, p);
        let v = call(&c, "search_knowledge", json!({ "query": query, "limit": 200 }))
            .await
            .ok();
        let p = paths(&v, "hits");
        seen(&mut failures, &format!("search_knowledge {query}"), &v, p);
    }
    for prefix in ["linked", "notes2"] {
        // A symlinked folder that leaves the vault: refused, or searched as empty.
        match call(
            &c,
            "search_note_content",
            json!({ "query": "secret", "pathPrefix": prefix }),
        )
        .await
        {
            Reply::Ok(v) => {
                let p = paths(&v, "hits");
                if !p.is_empty() {
                    failures.push(format!("search_note_content pathPrefix {prefix}: found {p:?}"));
                }
                seen(
                    &mut failures,
                    &format!("search_note_content pathPrefix {prefix}"),
                    &v,
                    p,
                );
            }
            Reply::Err(e) => seen(
                &mut failures,
                &format!("search_note_content pathPrefix {prefix}"),
                &e,
                vec![],
            ),
        }
    }
    let tags = call(&c, "list_tags", json!({})).await.ok();
    if tags["tags"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "leak")
    {
        failures.push(format!("list_tags counts a hidden or outside note: {tags}"));
    }
    seen(&mut failures, "list_tags", &tags, vec![]);
    for (tool, list) in [
        ("get_related_notes", "backlinks"),
        ("get_related_notes", "outlinks"),
    ] {
        let v = call(&c, tool, json!({ "path": "z/attention.md" })).await.ok();
        let p = paths(&v, list);
        seen(&mut failures, &format!("{tool} {list}"), &v, p);
    }
    c.close().await;
    assert_no_failures("listings", &failures);
}

// ---- 2. tokens at start ----------------------------------------------------------------------

#[tokio::test]
async fn stdio_refuses_to_start_with_a_missing_forged_expired_or_revoked_token() {
    let env = Env::new();
    let (attacks, resigned) = token_attacks(&env);
    let mut failures = Vec::new();

    let s = start_stdio(&env, None);
    check_refused_start("no VAULTGATE_TOKEN", None, "VAULTGATE_TOKEN", &s, &mut failures);
    let s = start_stdio(&env, Some(""));
    check_refused_start(
        "empty VAULTGATE_TOKEN",
        None,
        "VAULTGATE_TOKEN",
        &s,
        &mut failures,
    );
    for a in &attacks {
        if a.code == "CREDENTIAL_EXPIRED" {
            wait_past_exp(&a.token);
        }
        let s = start_stdio(&env, Some(&a.token));
        check_refused_start(a.name, Some(&a.token), a.code, &s, &mut failures);
    }
    assert_no_failures("stdio start", &failures);

    // Control: the same claims, signed by this test with the real key, are accepted; so each
    // refusal above is due to its one defect.
    let c = env.stdio(&resigned).await;
    call(&c, "read_note", json!({ "path": "welcome.md" })).await.ok();
    c.close().await;
}

#[test]
fn refused_token_attempts_are_audited_as_denied_without_the_token() {
    let env = Env::new();
    let (attacks, _) = token_attacks(&env);
    let mut failures = Vec::new();
    for a in &attacks {
        if a.code == "CREDENTIAL_EXPIRED" {
            wait_past_exp(&a.token);
        }
        let before = audit_records(&env).len();
        let s = start_stdio(&env, Some(&a.token));
        assert_eq!(s.exit, Some(1), "{}: the start must be refused", a.name);
        let new = audit_records(&env).split_off(before);
        if !new.iter().any(|r| is_denied_with(r, a.code)) {
            failures.push(format!(
                "{}: no audit record with outcome denied, code {}: {new:?}",
                a.name, a.code
            ));
        }
    }
    let log = audit_text(&env);
    for a in &attacks {
        let sig = a.token.rsplit('.').next().unwrap_or_default();
        if log.contains(&a.token) || (sig.len() > 20 && log.contains(sig)) {
            failures.push(format!("{}: the audit log holds the token", a.name));
        }
    }
    assert_no_failures("audit of refused tokens", &failures);
    let out = env.run(&["audit", "verify"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn stdio_start_without_a_token_is_audited_as_denied() {
    // docs/contract.md#the-audit-log: every refusal, authentication included, is recorded.
    let env = Env::new();
    let before = audit_records(&env).len();
    let s = start_stdio(&env, None);
    assert_eq!(s.exit, Some(1));
    let new = audit_records(&env).split_off(before);
    assert!(
        new.iter().any(|r| is_denied_with(r, "UNAUTHORIZED")),
        "no denied UNAUTHORIZED record for a start without a token: {new:?}"
    );
}

// ---- 3. changes mid-session ------------------------------------------------------------------

#[tokio::test]
async fn revoked_token_is_refused_on_the_next_call() {
    let env = Env::new();
    let (_, token) = env.token("agent", "read");
    let (other_id, other_token) = env.token("other", "read");
    let (_, bystander_token) = env.token("bystander", "read");
    let c = env.stdio(&token).await;
    let c2 = env.stdio(&other_token).await;
    let c3 = env.stdio(&bystander_token).await;
    call(&c, "read_note", json!({ "path": "z/attention.md" }))
        .await
        .ok();
    call(&c2, "read_note", json!({ "path": "z/attention.md" }))
        .await
        .ok();

    env.ok(&["token", "revoke", "agent"]); // by name
    env.ok(&["token", "revoke", &other_id]); // by id
    let before = audit_records(&env).len();
    let r = call(&c, "read_note", json!({ "path": "z/attention.md" })).await;
    assert!(
        !reply_json(&r).to_string().contains(&token),
        "the refusal must not echo the token"
    );
    assert_eq!(r.code(), "CREDENTIAL_REVOKED");
    // Every later call, whatever the tool.
    assert_eq!(
        call(&c, "list_notes", json!({})).await.code(),
        "CREDENTIAL_REVOKED"
    );
    assert_eq!(
        call(&c, "vault_list", json!({})).await.code(),
        "CREDENTIAL_REVOKED"
    );
    assert_eq!(
        call(&c2, "read_note", json!({ "path": "welcome.md" }))
            .await
            .code(),
        "CREDENTIAL_REVOKED"
    );
    // Another credential is not affected.
    call(&c3, "read_note", json!({ "path": "welcome.md" })).await.ok();
    let new = audit_records(&env).split_off(before);
    assert!(
        new.iter()
            .filter(|r| is_denied_with(r, "CREDENTIAL_REVOKED"))
            .count()
            >= 4,
        "each refused call is audited as denied CREDENTIAL_REVOKED: {new:?}"
    );
    c.close().await;
    c2.close().await;
    c3.close().await;
}

#[tokio::test]
async fn expired_token_is_refused_on_the_next_call() {
    let env = Env::new();
    // 3 s rather than 2 s: `exp` is whole seconds, and the first call must land before it.
    let (_, token) = issue(&env, "agent", &["--expires", "3s"]);
    let c = env.stdio(&token).await;
    call(&c, "read_note", json!({ "path": "z/attention.md" }))
        .await
        .ok();
    wait_past_exp(&token);
    assert_eq!(
        call(&c, "read_note", json!({ "path": "z/attention.md" }))
            .await
            .code(),
        "CREDENTIAL_EXPIRED"
    );
    assert_eq!(
        call(&c, "list_notes", json!({})).await.code(),
        "CREDENTIAL_EXPIRED"
    );
    let last = audit_records(&env).pop().unwrap();
    assert!(
        is_denied_with(&last, "CREDENTIAL_EXPIRED"),
        "the refusal is audited: {last}"
    );
    c.close().await;
}

#[tokio::test]
async fn tier_change_applies_to_the_next_call() {
    let env = Env::new();
    let (id, token) = env.token("agent", "read");
    let c = env.stdio(&token).await;
    let last_call_tier = |env: &Env| -> String {
        let rec = audit_records(env)
            .into_iter()
            .rev()
            .find(|r| r["actor"]["credentialId"] == id.as_str())
            .expect("an audit record for the agent's call");
        rec["actor"]["tier"].as_str().unwrap_or_default().to_owned()
    };
    call(&c, "read_note", json!({ "path": "welcome.md" })).await.ok();
    assert_eq!(last_call_tier(&env), "read");

    env.ok(&["token", "set-tier", "agent", "propose"]);
    assert_eq!(tier_of(&env, "agent").as_deref(), Some("propose"));
    let change = audit_records(&env).pop().unwrap();
    assert_eq!(
        change["actor"], "cli:tester",
        "the credential change is audited by the CLI user: {change}"
    );
    call(&c, "read_note", json!({ "path": "welcome.md" })).await.ok();
    assert_eq!(
        last_call_tier(&env),
        "propose",
        "the next call runs with the new tier"
    );

    env.ok(&["token", "set-tier", &id, "read"]);
    call(&c, "list_notes", json!({})).await.ok();
    assert_eq!(last_call_tier(&env), "read");
    c.close().await;
}

#[test]
fn raising_a_tier_to_full_needs_explicit_confirmation() {
    let env = Env::new();
    env.token("agent", "read");

    // No --yes and no terminal (stdin is /dev/null): refused, unchanged.
    let out = env.run(&["token", "set-tier", "agent", "full"]);
    assert_eq!(out.status.code(), Some(1), "set-tier full without --yes");
    assert!(!out.stderr.is_empty(), "a refusal explains itself on stderr");
    assert_eq!(tier_of(&env, "agent").as_deref(), Some("read"));

    env.ok(&["token", "set-tier", "agent", "full", "--yes"]);
    assert_eq!(tier_of(&env, "agent").as_deref(), Some("full"));

    let out = env.run(&[
        "token", "issue", "--name", "boss", "--tier", "full", "--format", "json",
    ]);
    assert_eq!(out.status.code(), Some(1), "issue --tier full without --yes");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("eyJ"),
        "no token printed"
    );
    assert_eq!(tier_of(&env, "boss"), None, "no credential created");
    assert_eq!(token_list(&env).len(), 1);

    // Lower tiers need no confirmation.
    env.ok(&["token", "set-tier", "agent", "auto"]);
    assert_eq!(tier_of(&env, "agent").as_deref(), Some("auto"));
}

// ---- 4. CLI contract -------------------------------------------------------------------------

fn has_key(v: &Value, key: &str) -> bool {
    match v {
        Value::Object(m) => m.iter().any(|(k, v)| k == key || has_key(v, key)),
        Value::Array(a) => a.iter().any(|v| has_key(v, key)),
        _ => false,
    }
}

#[test]
fn token_list_json_is_one_array_without_tokens() {
    let env = Env::new();
    let (id_a, tok_a) = env.token("alpha", "read");
    let (id_b, tok_b) = env.token("beta", "propose");
    let out = env.ok(&["token", "list", "--json"]);
    let v: Value = serde_json::from_str(&out).expect("one JSON document");
    let items = v.as_array().expect("a JSON array");
    assert_eq!(items.len(), 2);
    let ids: Vec<&str> = items.iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert!(
        ids.contains(&id_a.as_str()) && ids.contains(&id_b.as_str()),
        "{out}"
    );
    assert!(!has_key(&v, "token"), "no field named token: {out}");
    for t in [&tok_a, &tok_b] {
        let sig = t.rsplit('.').next().unwrap();
        assert!(
            !out.contains(t.as_str()) && !out.contains(sig),
            "token list --json holds a token"
        );
    }
    // The human listing neither.
    let human = env.ok(&["token", "list"]);
    assert!(!human.contains(tok_a.as_str()) && !human.contains(tok_b.as_str()));
}

#[tokio::test]
async fn token_issue_format_token_prints_only_the_token() {
    let env = Env::new();
    let out = env.ok(&[
        "token", "issue", "--name", "bare", "--tier", "read", "--format", "token",
    ]);
    let token = out.strip_suffix('\n').expect("ends with a newline");
    assert!(
        !token.is_empty() && !token.contains(char::is_whitespace),
        "exactly the token: {out:?}"
    );
    assert_eq!(token.split('.').count(), 3, "a JWT: {out:?}");
    let listed = token_list(&env);
    assert_eq!(claims_of(token)["sub"], listed[0]["id"]);
    let c = env.stdio(token).await;
    call(&c, "read_note", json!({ "path": "welcome.md" })).await.ok();
    c.close().await;
}

#[test]
fn unknown_subcommand_is_a_usage_error_exit_2() {
    let env = Env::new();
    for args in [
        &["frobnicate"][..],
        &["token", "frobnicate"],
        &["token", "issue"],
        &["token", "issue", "--name", "x", "--tier", "godmode"],
        &["token", "list", "--no-such-flag"],
    ] {
        let out = env.run(args);
        assert_eq!(out.status.code(), Some(2), "vaultgate {args:?}");
        assert!(
            out.stdout.is_empty(),
            "vaultgate {args:?}: usage errors go to stderr"
        );
        assert!(!out.stderr.is_empty(), "vaultgate {args:?}: says what is wrong");
    }
    assert!(
        token_list(&env).is_empty(),
        "no credential created by a usage error"
    );
}

#[test]
fn home_option_works_before_and_after_the_subcommand() {
    let env = Env::new();
    let (id, _) = env.token("agent", "read");
    // A decoy home in the environment: ignoring --home would read it instead.
    let decoy = env.tmp.path().join("decoy");
    std::fs::create_dir_all(&decoy).unwrap();
    let home = env.home.to_str().unwrap();
    let mut outputs = Vec::new();
    for args in [
        vec!["--home", home, "token", "list", "--json"],
        vec!["token", "--home", home, "list", "--json"],
        vec!["token", "list", "--json", "--home", home],
    ] {
        let out = Command::new(bin())
            .args(&args)
            .env("VAULTGATE_HOME", &decoy)
            .env_remove("VAULTGATE_TOKEN")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert!(stdout.contains(&id), "{args:?} read another home: {stdout}");
        outputs.push(stdout);
    }
    assert!(outputs.windows(2).all(|w| w[0] == w[1]));
}

// ---- 5. audit chain --------------------------------------------------------------------------

/// A session with allowed and refused calls and credential changes, as the audit log sees it.
/// Returns every token used.
async fn busy_session(env: &Env) -> Vec<String> {
    let (_, token) = env.token("agent", "read");
    let (_, spare) = env.token("spare", "read");
    let c = env.stdio(&token).await;
    call(&c, "read_note", json!({ "path": "z/attention.md" }))
        .await
        .ok();
    assert_eq!(
        call(&c, "read_note", json!({ "path": "../x" })).await.code(),
        "PATH_INVALID"
    );
    assert_eq!(
        call(&c, "read_note", json!({ "path": ".git/config" }))
            .await
            .code(),
        "PATH_DENIED"
    );
    call(&c, "list_notes", json!({ "dir": "z" })).await.ok();
    env.ok(&["token", "set-tier", "agent", "propose"]);
    call(&c, "search_note_content", json!({ "query": "attention" }))
        .await
        .ok();
    env.ok(&["token", "revoke", "spare"]);
    let forged = sign(&claims_of(&token), Algorithm::HS256, &random_key());
    assert_eq!(start_stdio(env, Some(&forged)).exit, Some(1));
    call(&c, "get_related_notes", json!({ "path": "z/attention.md" }))
        .await
        .ok();
    env.ok(&["token", "revoke", "agent"]);
    assert_eq!(
        call(&c, "list_notes", json!({})).await.code(),
        "CREDENTIAL_REVOKED"
    );
    c.close().await;
    vec![token, spare, forged]
}

fn verify(env: &Env) -> (Option<i32>, String) {
    let out = env.run(&["audit", "verify"]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

#[tokio::test]
async fn audit_verify_names_the_line_whose_byte_was_altered() {
    let env = Env::new();
    let tokens = busy_session(&env).await;
    let (code, text) = verify(&env);
    assert_eq!(code, Some(0), "the untouched chain verifies: {text}");

    let path = env.home.join("audit.jsonl");
    let original = std::fs::read_to_string(&path).unwrap();
    for t in &tokens {
        let sig = t.rsplit('.').next().unwrap();
        assert!(
            !original.contains(t.as_str()) && !original.contains(sig),
            "the audit log holds a token"
        );
    }
    let lines: Vec<&str> = original.lines().collect();
    assert!(
        lines.len() >= 10,
        "every call, refusal and credential change is a line: {original}"
    );

    // Line k, in the middle, with an argsHash: change one hex digit of it.
    let k = (lines.len() / 2..lines.len() - 1)
        .find(|&i| lines[i].contains("\"argsHash\":\""))
        .expect("a middle line with argsHash");
    let seq_k = serde_json::from_str::<Value>(lines[k]).unwrap()["seq"]
        .as_u64()
        .unwrap();
    let at = lines[k].find("\"argsHash\":\"").unwrap() + "\"argsHash\":\"".len() + 5;
    let mut bytes = lines[k].as_bytes().to_vec();
    bytes[at] = if bytes[at] == b'0' { b'1' } else { b'0' };
    let mut altered: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    altered[k] = String::from_utf8(bytes).unwrap();
    std::fs::write(&path, altered.join("\n") + "\n").unwrap();
    let (code, text) = verify(&env);
    assert_eq!(code, Some(1), "an altered byte breaks the chain: {text}");
    let named = named_seqs(&text);
    assert!(named.contains(&seq_k), "names seq {seq_k}: {text}");
    assert!(
        named.iter().all(|&n| n >= seq_k),
        "names no earlier line than seq {seq_k}: {text}"
    );

    // Restored, it verifies again (so the failure above was the altered byte).
    std::fs::write(&path, &original).unwrap();
    assert_eq!(verify(&env).0, Some(0));
}

#[tokio::test]
async fn audit_verify_detects_a_deleted_line() {
    let env = Env::new();
    busy_session(&env).await;
    assert_eq!(verify(&env).0, Some(0));
    let path = env.home.join("audit.jsonl");
    let original = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = original.lines().collect();
    let k = lines.len() / 2;
    let seq_k = serde_json::from_str::<Value>(lines[k]).unwrap()["seq"]
        .as_u64()
        .unwrap();
    lines.remove(k);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let (code, text) = verify(&env);
    assert_eq!(code, Some(1), "a deleted line breaks the chain: {text}");
    let named = named_seqs(&text);
    assert!(
        named.contains(&seq_k) || named.contains(&(seq_k + 1)),
        "names the gap at seq {seq_k} or {}: {text}",
        seq_k + 1
    );
}

/// SECURITY(T-PATH): the invisible characters the red-team passed the path check with, in a
/// proposal's target and a read: each is `PATH_INVALID`, and nothing reaches the inbox. The same
/// name without it, a Persian word with its ZWNJ and an emoji with its U+FE0F are proposed.
#[tokio::test]
async fn invisible_characters_in_a_target_are_path_invalid() {
    let env = Env::new();
    let (_, token) = env.token("writer", "propose");
    let c = env.stdio(&token).await;
    let hidden = [
        '\u{0600}',
        '\u{1D173}',
        '\u{FE0F}',
        '\u{E0100}',
        '\u{034F}',
        '\u{115F}',
        '\u{3164}',
        '\u{2800}',
        '\u{17B5}',
        '\u{180B}',
        '\u{200B}',
        '\u{202E}',
        '\u{E000}',
        '\u{0378}',
    ];
    for h in hidden {
        let path = format!("notes/b{h}.md");
        let what = format!("U+{:04X}", h as u32);
        let r = c
            .call(
                "propose_new_note",
                json!({"path": path, "content": "x\n", "reason": "r"}),
            )
            .await;
        assert_eq!(r.code(), "PATH_INVALID", "propose {what}");
        let r = c.call("read_note", json!({"path": path})).await;
        assert_eq!(r.code(), "PATH_INVALID", "read {what}");
    }
    // The red-team's own target: U+1D173 then U+FE0F.
    let r = c
        .call(
            "propose_new_note",
            json!({"path": "notes/b\u{1D173}\u{FE0F}.md", "content": "x\n", "reason": "r"}),
        )
        .await;
    assert_eq!(r.code(), "PATH_INVALID");
    let listed = c.call("list_proposals", json!({})).await.ok();
    assert_eq!(listed["proposals"].as_array().unwrap().len(), 0, "{listed}");
    // Controls: legitimate names go through.
    for ok in [
        "notes/b.md",
        "notes/\u{0645}\u{06CC}\u{200C}\u{062E}\u{0648}\u{0627}\u{0647}\u{0645}.md",
        "notes/\u{2764}\u{FE0F}.md",
    ] {
        let r = c
            .call(
                "propose_new_note",
                json!({"path": ok, "content": "x\n", "reason": "r"}),
            )
            .await
            .ok();
        assert_eq!(r["target"], ok);
    }
    c.close().await;
}

/// The path rules' Unicode version (which code points are unassigned) is the one `describe` names.
#[test]
fn describe_names_the_unicode_version_of_the_path_rules() {
    let env = Env::new();
    let d: Value = serde_json::from_str(&env.ok(&["describe", "--json"])).unwrap();
    assert_eq!(d["unicodeVersion"], "18.0.0", "{d}");
    assert!(env.ok(&["describe"]).contains("(Unicode 18.0.0)"));
}
