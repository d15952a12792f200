//! The approval card (`ui://vaultgate/proposal`, docs/contract.md#the-review-page-and-in-client-approval)
//! in a real host in a real browser: `tests/apphost` is a minimal MCP Apps host — the official
//! TypeScript client declaring the UI extension and the ext-apps SDK's `AppBridge` — served on
//! loopback by Node; it calls a tool through `vaultgate serve`, renders the tool's UI resource in a
//! sandboxed iframe (`allow-scripts allow-forms`, the spec's default CSP) in headless Chromium,
//! and hands the card the tool's input and result. The tests read the card inside the iframe,
//! click Approve, and check the effect outside the browser: the note on disk and the audit log.
//!
//! The host's packages are required, never optional: without `tests/apphost/node_modules` the
//! tests fail and say to run `npm ci --prefix tests/apphost` (`.ci/run` does).
//!
//! `VAULTGATE_SCREENSHOTS=1` also writes the cards' screenshots to `docs/images/card-*.png`;
//! otherwise nothing is written into the repository. The time from the tool result to the card's
//! "rendered" log is printed (eprintln), never asserted.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use serde_json::{Value, json};

use crate::browser::{Browser, Serve, WAIT};
use crate::util::{Client, Env, audit_lines};

const APPHOST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/apphost");
const IMAGES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/images");

/// The patch: one word of one line of `notes/cooking.md`.
const COOKING: &str = "notes/cooking.md";
const STEP: &str = "2. Scramble them soft, then set aside.";
const STEP_NEW: &str = "2. Scramble them gently, then set aside.";
/// The note the frontmatter change is made on (created through a proposal first).
const PLAN: &str = "notes/plan.md";
const PLAN_TEXT: &str = "---\ntitle: Plan\nstatus: draft\n---\n# Plan\n\nShip the approval card.\n";
/// The move: a note three others link to (a wikilink by name, one with a relative Markdown link).
const MOVE_FROM: &str = "z/softmax.md";
const MOVE_TO: &str = "z/softmax-function.md";
/// The notes that link to it in the fixture (basic.expect.md, Links).
const MOVE_BACKLINKS: [&str; 3] = ["journal/2026-01-05.md", "z/attention.md", "z/moc-ml.md"];

// ---- the host ----------------------------------------------------------------------------------------

/// `node tests/apphost/host.mjs <MCP URL>` with the bearer token in its environment; killed when
/// dropped.
struct AppHost {
    child: Child,
    port: u16,
    stderr: PathBuf,
}

impl AppHost {
    fn start(env: &Env, mcp_url: &str, token: &str) -> AppHost {
        let dir = Path::new(APPHOST);
        for pkg in [
            "@modelcontextprotocol/ext-apps",
            "@modelcontextprotocol/client",
            "esbuild",
        ] {
            assert!(
                dir.join("node_modules").join(pkg).is_dir(),
                "tests/apphost/node_modules/{pkg} is missing: the approval card's browser tests need \
                 the test host's packages. Run `npm ci --prefix tests/apphost` (Node 20+; .ci/run does)"
            );
        }
        let stderr = env.tmp.path().join("apphost.stderr");
        let mut child = Command::new("node")
            .arg(dir.join("host.mjs"))
            .arg(mcp_url)
            .env("VAULTGATE_TOKEN", token)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run `node` (Node 20+ on PATH is needed for tests/apphost): {e}")
            });
        // The first line is `listening <port>`; read it off a thread so the wait is bounded.
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(out).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut host = AppHost {
            child,
            port: 0,
            stderr,
        };
        let line = rx.recv_timeout(WAIT).unwrap_or_default();
        match line
            .trim()
            .strip_prefix("listening ")
            .and_then(|p| p.parse().ok())
        {
            Some(port) => host.port = port,
            None => panic!(
                "the test host did not print `listening <port>` within {WAIT:?} (got {line:?}): {}",
                host.stderr()
            ),
        }
        host
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// The host page that calls `tool` with `args` and renders its card.
    fn page(&self, tool: &str, args: &Value, theme: &str) -> String {
        format!(
            "http://127.0.0.1:{}/?tool={}&args={}&theme={}",
            self.port,
            encode(tool),
            encode(&args.to_string()),
            encode(theme)
        )
    }
}

impl Drop for AppHost {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

// ---- setup ---------------------------------------------------------------------------------------------

/// Issues a `propose` credential with the in-client approval flag; returns its token.
fn flagged_propose(env: &Env) -> String {
    let out = env.ok(&[
        "token",
        "issue",
        "--name",
        "card-host",
        "--tier",
        "propose",
        "--approve-in-client",
        "--format",
        "json",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    v["token"].as_str().unwrap().to_owned()
}

fn file(env: &Env, path: &str) -> String {
    std::fs::read_to_string(env.vault.join(path)).unwrap()
}

async fn hash_of(c: &Client, path: &str) -> String {
    c.call("read_note", json!({ "path": path })).await.ok()["hash"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The three proposals, all by the flagged credential (a `propose` credential may approve only
/// its own): (patch, frontmatter, move) ids.
async fn propose_all(env: &Env, token: &str) -> (String, String, String) {
    let c = env.stdio(token).await;
    let cooking = file(env, COOKING);
    assert!(cooking.contains(STEP), "fixture {COOKING} has {STEP:?}");
    let base = hash_of(&c, COOKING).await;
    let patch = c
        .call(
            "propose_note_patch",
            json!({"path": COOKING, "baseHash": base, "content": cooking.replace(STEP, STEP_NEW),
                   "reason": "Soft is vague: say how."}),
        )
        .await
        .ok();

    // A note with frontmatter to change: proposed, then applied by the operator.
    let new = c
        .call(
            "propose_new_note",
            json!({"path": PLAN, "content": PLAN_TEXT, "reason": "a plan to track"}),
        )
        .await
        .ok();
    env.ok(&["apply", "--only", new["id"].as_str().unwrap(), "--yes"]);
    assert_eq!(file(env, PLAN), PLAN_TEXT);
    let base = hash_of(&c, PLAN).await;
    let fm = c
        .call(
            "propose_frontmatter_update",
            json!({"path": PLAN, "baseHash": base, "set": {"status": "done"},
                   "reason": "The card shipped."}),
        )
        .await
        .ok();

    let mv = c
        .call(
            "propose_move",
            json!({"from": MOVE_FROM, "to": MOVE_TO, "reason": "Name the note for what it does."}),
        )
        .await
        .ok();
    assert!(
        !mv["linkRewrites"].as_array().unwrap().is_empty(),
        "notes link to {MOVE_FROM}: {mv}"
    );
    c.close().await;
    let id = |v: &Value| v["id"].as_str().unwrap().to_owned();
    (id(&patch), id(&fm), id(&mv))
}

// ---- the card in the browser -----------------------------------------------------------------------

/// What the host page recorded (top frame).
async fn host_state(b: &Browser) -> Value {
    b.execute(
        "return {ready: window.__ready, error: window.__error, rendered: window.__rendered, \
         calls: window.__calls, opened: window.__opened, logs: window.__logs, sizes: window.__sizes}",
    )
    .await
}

/// Waits (top frame) until the card has logged `rendered <state>` `n` times; returns the host's
/// record. Panics on a host error.
async fn wait_rendered(b: &Browser, host: &AppHost, n: usize) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let s = host_state(b).await;
        if let Some(e) = s["error"].as_str() {
            panic!(
                "the test host failed: {e}\nhost stderr: {}\n{}",
                host.stderr(),
                b.describe().await
            );
        }
        if s["rendered"].as_array().is_some_and(|r| r.len() >= n) {
            return s;
        }
        if Instant::now() >= deadline {
            panic!(
                "the card did not log `rendered` {n} time(s) within {WAIT:?}: {s}\nhost stderr: {}\n{}",
                host.stderr(),
                b.describe().await
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Opens the host page for `get_proposal(id)`, waits for the card's first render, and switches
/// into its iframe. Returns the milliseconds from the tool result to the rendered card.
async fn open_card(b: &Browser, host: &AppHost, id: &str, theme: &str) -> f64 {
    open_card_at(b, &host.page("get_proposal", &json!({ "id": id }), theme), host).await
}

async fn open_card_at(b: &Browser, url: &str, host: &AppHost) -> f64 {
    b.goto(url).await;
    let s = wait_rendered(b, host, 1).await;
    let ms = s["rendered"][0]["ms"]
        .as_f64()
        .unwrap_or_else(|| panic!("no render time recorded: {s}"));
    let frame = b.wait_for("iframe#card").await;
    assert_eq!(
        frame.attr("sandbox").await.unwrap().as_deref(),
        Some("allow-scripts allow-forms"),
        "the card runs in the sandboxed iframe"
    );
    frame.enter_frame().await.unwrap();
    wait_state(b, "pending").await;
    ms
}

/// Waits (inside the card) until `#card-state` reads `want`.
async fn wait_state(b: &Browser, want: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let now = b
            .execute(
                "const e = document.getElementById('card-state'); return e ? e.textContent.trim() : null",
            )
            .await;
        if now == json!(want) {
            return;
        }
        if Instant::now() >= deadline {
            let msg = b
                .execute("const m = document.getElementById('message'); return m ? m.textContent : null")
                .await;
            panic!(
                "the card's #card-state is {now}, not {want:?}, after {WAIT:?} (message {msg}); {}",
                b.describe().await
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Inside the card: whether element `a` (CSS) comes before element `b` in document order.
async fn precedes(b: &Browser, first: &str, second: &str) -> bool {
    let v =
        b.wd.execute(
            "const a = document.querySelector(arguments[0]), b = document.querySelector(arguments[1]);\
             if (!a || !b) return null;\
             return !!(a.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING);",
            vec![json!(first), json!(second)],
        )
        .await
        .unwrap();
    v.as_bool()
        .unwrap_or_else(|| panic!("the card has no `{first}` or no `{second}`"))
}

async fn texts(b: &Browser, css: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in b.all(css).await {
        out.push(e.text().await.unwrap());
    }
    out
}

/// From inside the card: back to the host page, and (with VAULTGATE_SCREENSHOTS=1) the iframe's
/// screenshot to `docs/images/<name>.png`.
async fn leave_and_screenshot(b: &Browser, name: &str) {
    b.wd.enter_parent_frame().await.unwrap();
    if std::env::var("VAULTGATE_SCREENSHOTS").as_deref() != Ok("1") {
        return;
    }
    // The height the card asked for is applied on the next frame.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let png = b.wait_for("iframe#card").await.screenshot().await.unwrap();
    std::fs::create_dir_all(IMAGES).unwrap();
    let path = Path::new(IMAGES).join(format!("{name}.png"));
    std::fs::write(&path, png).unwrap();
    eprintln!("card_browser: wrote {}", path.display());
}

/// sRGB relative luminance of a computed `rgb(r, g, b)` / `rgba(...)` colour.
fn luminance(css: &str) -> f64 {
    let inner = css
        .split_once('(')
        .and_then(|(_, rest)| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("not an rgb() colour: {css}"));
    let c: Vec<f64> = inner
        .split(',')
        .take(3)
        .map(|p| p.trim().parse::<f64>().unwrap() / 255.0)
        .collect();
    let lin = |v: f64| {
        if v <= 0.03928 {
            v / 12.92
        } else {
            ((v + 0.055) / 1.055).powf(2.4)
        }
    };
    0.2126 * lin(c[0]) + 0.7152 * lin(c[1]) + 0.0722 * lin(c[2])
}

async fn body_background(b: &Browser) -> String {
    b.execute("return getComputedStyle(document.body).backgroundColor")
        .await
        .as_str()
        .unwrap()
        .to_owned()
}

// ---- the tests ---------------------------------------------------------------------------------------

#[tokio::test]
async fn card_browser_renders_a_patch_a_frontmatter_change_and_a_move_and_approves_in_the_host() {
    let env = Env::new();
    let token = flagged_propose(&env);
    let (patch, fm, mv) = propose_all(&env, &token).await;
    let srv = Serve::start(&env);
    let host = AppHost::start(&env, &format!("{}/mcp", srv.origin()), &token);
    let b = Browser::new().await;
    let mut times = Vec::new();

    // The patch: fixed fields, then the diff with the changed word marked, then the reason.
    let ms = open_card(&b, &host, &patch, "light").await;
    times.push(("patch", ms));
    assert_eq!(b.text("#card-kind").await.trim(), "Patch");
    assert_eq!(b.text("#card-target").await.trim(), COOKING);
    assert!(
        precedes(&b, "#card-fields", "#diff-unified").await,
        "the fields come before the diff"
    );
    assert!(
        precedes(&b, "#diff-unified", "#reason").await,
        "the diff comes before the reason"
    );
    assert!(
        precedes(&b, "#card-fields", "#reason").await,
        "the fields come before the reason"
    );
    let dels = texts(&b, "#diff-unified del.w").await;
    let inss = texts(&b, "#diff-unified ins.w").await;
    assert!(
        dels.iter().any(|t| t.contains("soft")),
        "the removed word is marked: {dels:?}"
    );
    assert!(
        inss.iter().any(|t| t.contains("gently")),
        "the added word is marked: {inss:?}"
    );
    assert!(
        !inss.iter().any(|t| t.contains("Scramble")),
        "only the changed word is marked, not the line: {inss:?}"
    );
    assert_eq!(b.text("#reason").await.trim(), "Soft is vague: say how.");
    let approve = b.wait_for("#approve").await;
    assert!(
        approve.is_displayed().await.unwrap(),
        "a pending own proposal shows Approve"
    );
    leave_and_screenshot(&b, "card-patch").await;

    // The frontmatter change: the key, its old and new value.
    let ms = open_card(&b, &host, &fm, "light").await;
    times.push(("frontmatter", ms));
    assert_eq!(b.text("#card-target").await.trim(), PLAN);
    let fields = texts(&b, "#field-changes li").await;
    assert!(
        fields.iter().any(|t| t.contains("status: draft → done")),
        "#field-changes lists status: draft → done: {fields:?}"
    );
    assert!(precedes(&b, "#card-fields", "#field-changes").await);
    assert!(precedes(&b, "#card-fields", "#reason").await);
    leave_and_screenshot(&b, "card-frontmatter").await;

    // The move: from, to, and every note whose links are rewritten.
    let ms = open_card(&b, &host, &mv, "light").await;
    times.push(("move", ms));
    assert_eq!(b.text("#card-from").await.trim(), MOVE_FROM);
    assert_eq!(b.text("#card-target").await.trim(), MOVE_TO);
    let rewrites = texts(&b, "#link-rewrites > li").await;
    for p in MOVE_BACKLINKS {
        assert!(
            rewrites.iter().any(|t| t.starts_with(p)),
            "#link-rewrites lists {p}: {rewrites:?}"
        );
    }
    assert!(precedes(&b, "#card-fields", "#link-rewrites").await);
    assert!(precedes(&b, "#card-fields", "#reason").await);
    leave_and_screenshot(&b, "card-move").await;

    // Approve the patch from its card.
    let old = file(&env, COOKING);
    open_card(&b, &host, &patch, "light").await;
    assert_eq!(file(&env, COOKING), old, "nothing changes before the click");
    b.click("#approve").await;
    wait_state(&b, "applied").await;
    assert_eq!(
        file(&env, COOKING),
        old.replace(STEP, STEP_NEW),
        "the note on disk holds the approved text"
    );
    b.wd.enter_parent_frame().await.unwrap();
    let s = wait_rendered(&b, &host, 2).await;
    let calls: Vec<&str> = s["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        calls,
        ["approve_proposal_in_app", "get_proposal"],
        "the card approved, then read the proposal again: {s}"
    );
    let last_state = s["rendered"].as_array().unwrap().last().unwrap()["state"].clone();
    assert_eq!(last_state, "applied", "{s}");

    let records = audit_lines(&env);
    let apply = records
        .iter()
        .rev()
        .find(|r| r["tool"] == "approve_proposal_in_app" || r["tool"] == "apply_proposal")
        .unwrap_or_else(|| panic!("no apply in the audit log: {records:#?}"));
    assert_eq!(
        apply["approval"], "app",
        "the apply is audited as the card's: {apply:#}"
    );
    assert_eq!(apply["outcome"], "ok", "{apply:#}");
    b.close().await;

    for (what, ms) in &times {
        eprintln!("card_browser: {what}: tool result to rendered card: {ms:.1} ms");
    }
    drop(host);
    drop(srv);
}

#[tokio::test]
async fn card_browser_follows_the_hosts_dark_theme_and_opens_the_review_page_through_the_host() {
    let env = Env::new();
    let token = flagged_propose(&env);
    let (patch, _, _) = propose_all(&env, &token).await;
    let srv = Serve::start(&env);
    let host = AppHost::start(&env, &format!("{}/mcp", srv.origin()), &token);
    let b = Browser::new().await;

    let ms = open_card(&b, &host, &patch, "light").await;
    let light = body_background(&b).await;
    assert!(
        luminance(&light) > 0.7,
        "the light card's background is light: {light}"
    );
    b.wd.enter_parent_frame().await.unwrap();

    let dark_ms = open_card(&b, &host, &patch, "dark").await;
    let dark = body_background(&b).await;
    assert!(
        luminance(&dark) < 0.3,
        "the dark card's background is dark: {dark}"
    );
    assert_eq!(
        b.execute("return document.documentElement.dataset.theme").await,
        json!("dark"),
        "the card took the theme from the host context"
    );
    assert!(b.wait_for("#diff-unified").await.is_displayed().await.unwrap());
    leave_and_screenshot(&b, "card-dark").await;

    // "Open in the review page" asks the host to open the running server's review page: the
    // page itself, never a login link.
    open_card(&b, &host, &patch, "light").await;
    b.click("#open-review").await;
    b.wd.enter_parent_frame().await.unwrap();
    let deadline = Instant::now() + WAIT;
    let opened = loop {
        let s = host_state(&b).await;
        if let Some(url) = s["opened"][0].as_str() {
            break url.to_owned();
        }
        if Instant::now() >= deadline {
            panic!("the host was asked to open nothing within {WAIT:?}: {s}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(opened, format!("{}/review/", srv.origin()));
    assert!(
        !opened.contains("code") && !opened.contains("login"),
        "no login code in the link the card opens: {opened}"
    );

    // A host that renders the card without declaring the extension: the model's call brings no
    // view, so the card asks for it; it shows the proposal, escaped by the server, and no Approve
    // (no approval goes to a client that did not declare the extension).
    let undeclared = format!(
        "{}&declare=0",
        host.page("get_proposal", &json!({ "id": patch }), "light")
    );
    open_card_at(&b, &undeclared, &host).await;
    assert!(b.wait_for("#diff-unified").await.is_displayed().await.unwrap());
    assert!(precedes(&b, "#card-fields", "#reason").await);
    assert_eq!(
        b.execute("return document.getElementById('decide').hidden").await,
        json!(true),
        "no Approve without a declared extension"
    );
    b.close().await;

    eprintln!("card_browser: patch (light, again): tool result to rendered card: {ms:.1} ms");
    eprintln!("card_browser: patch (dark): tool result to rendered card: {dark_ms:.1} ms");
}
