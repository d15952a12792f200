//! The review page (`/review/` of `vaultgate serve`) attacked over raw HTTP: one-time login codes,
//! the session cookie's attributes, CSRF and Origin on every POST, bearer tokens and review cookies
//! crossing between `/review` and `/mcp`, hostile proposal text, foreign `Host` headers, the
//! security headers, and `vaultgate review` without a live server. Every attack must be refused,
//! audited and change nothing; a control request with the right credentials proves each refusal
//! is meaningful (the same request minus the attack succeeds).
//!
//! Redirects are never followed and cookies are sent by hand, so each 303 and Set-Cookie is seen.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use reqwest::Method;
use reqwest::header::HeaderMap;
use reqwest::redirect::Policy;
use serde_json::{Value, json};

use crate::http::{Server, bearer, edit_config, initialize, post};
use crate::util::{Client, Env, audit_lines};

/// Every wait in this file is bounded by this.
const WAIT: Duration = Duration::from_secs(10);
const VAULT: &str = "basic";
/// The note the proposals patch.
const NOTE: &str = "z/attention.md";
const COOKIE: &str = "vg_review";

// ---- HTTP plumbing -----------------------------------------------------------------------------------

fn web() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .timeout(WAIT)
        .build()
        .unwrap()
}

/// Percent-encodes one form value (all but RFC 3986 unreserved bytes).
fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// An `application/x-www-form-urlencoded` body.
fn form(fields: &[(&str, &str)]) -> String {
    fields
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// Headers or form fields.
type Pairs<'a> = Vec<(&'a str, &'a str)>;

/// A whole response, read.
struct Page {
    status: u16,
    headers: HeaderMap,
    body: String,
}

impl Page {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn set_cookies(&self) -> Vec<String> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect()
    }

    fn location(&self) -> String {
        self.header("location")
            .unwrap_or_else(|| panic!("HTTP {} without Location: {}", self.status, self.body))
            .to_owned()
    }

    /// The first `<input … name="csrf" value="…">` of the page.
    fn csrf(&self) -> String {
        hidden(&self.body, "csrf")
    }

    fn expect(&self, status: u16, what: &str) {
        assert_eq!(self.status, status, "{what}: {}", self.body);
    }
}

/// The value of the first form field `name="NAME" value="…"` in an HTML page.
fn hidden(body: &str, name: &str) -> String {
    let needle = format!("name=\"{name}\" value=\"");
    let at = body
        .find(&needle)
        .unwrap_or_else(|| panic!("no {needle}…\" in the page: {body}"))
        + needle.len();
    let value = &body[at..at + body[at..].find('"').unwrap()];
    assert!(!value.is_empty(), "empty {name} field");
    value.to_owned()
}

/// The inner HTML of the element whose opening tag holds `id="ID"`, up to the first `</TAG>`.
fn element(body: &str, tag: &str, id: &str) -> String {
    let open = format!("id=\"{id}\"");
    let at = body
        .find(&open)
        .unwrap_or_else(|| panic!("no <{tag} {open}> in the page: {body}"));
    let start = at + body[at..].find('>').unwrap() + 1;
    let end = start + body[start..].find(&format!("</{tag}>")).unwrap();
    body[start..end].to_owned()
}

/// The opening tag of the element with `id="ID"`, e.g. `<div id="result" data-outcome="ok">`.
fn open_tag(body: &str, id: &str) -> String {
    let open = format!("id=\"{id}\"");
    let at = body
        .find(&open)
        .unwrap_or_else(|| panic!("no element {open} in the page: {body}"));
    let start = body[..at].rfind('<').unwrap();
    let end = at + body[at..].find('>').unwrap() + 1;
    body[start..end].to_owned()
}

/// Sends one request to the server; `headers` may replace `Host`.
async fn send(
    srv: &Server,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<String>,
) -> Page {
    let mut req = web().request(method, format!("{}{path}", srv.base()));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(b) = body {
        req = req
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(b);
    }
    let resp = req.send().await.expect("request failed at the transport level");
    Page {
        status: resp.status().as_u16(),
        headers: resp.headers().clone(),
        body: resp.text().await.unwrap(),
    }
}

async fn get(srv: &Server, path: &str, headers: &[(&str, &str)]) -> Page {
    send(srv, Method::GET, path, headers, None).await
}

async fn post_form(srv: &Server, path: &str, headers: &[(&str, &str)], fields: &[(&str, &str)]) -> Page {
    send(srv, Method::POST, path, headers, Some(form(fields))).await
}

/// `http://127.0.0.1:<port>`: the Origin a browser sends for the page itself.
fn same_origin(srv: &Server) -> String {
    format!("http://127.0.0.1:{}", srv.port)
}

// ---- logging in --------------------------------------------------------------------------------------

/// `vaultgate review`'s login URL: the printed `http://` token holding `/review/login?code=`.
fn login_link(env: &Env, srv: &Server) -> String {
    let out = env.ok(&["review"]);
    let link = out
        .split_whitespace()
        .find(|t| t.starts_with("http://") && t.contains("/review/login?code="))
        .unwrap_or_else(|| panic!("no login link in `vaultgate review`'s output: {out}"))
        .to_owned();
    let prefix = format!("{}/review/login?code=", same_origin(srv));
    assert!(link.starts_with(&prefix), "{link} is not {prefix}<code>");
    assert!(link.len() > prefix.len(), "an empty login code: {link}");
    link
}

/// The path-and-query part of a login link.
fn login_path(srv: &Server, link: &str) -> String {
    link.strip_prefix(&same_origin(srv)).unwrap().to_owned()
}

fn code_of(link: &str) -> String {
    link.split_once("code=").unwrap().1.to_owned()
}

/// One `Set-Cookie` value: name, value and the attributes (names lower-cased).
struct SetCookie {
    name: String,
    value: String,
    attrs: Vec<(String, String)>,
}

impl SetCookie {
    fn parse(header: &str) -> SetCookie {
        let mut parts = header.split(';').map(str::trim);
        let (name, value) = parts.next().unwrap().split_once('=').unwrap();
        let attrs = parts
            .map(|a| match a.split_once('=') {
                Some((k, v)) => (k.trim().to_ascii_lowercase(), v.trim().to_owned()),
                None => (a.to_ascii_lowercase(), String::new()),
            })
            .collect();
        SetCookie {
            name: name.to_owned(),
            value: value.to_owned(),
            attrs,
        }
    }

    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A logged-in review session.
struct Session {
    /// B = `/review/s/<sp>` (no trailing slash).
    base: String,
    /// The session id, the cookie's value.
    sid: String,
    /// `Location` of the login answer.
    location: String,
    /// The whole `Set-Cookie` of the login answer.
    set_cookie: String,
}

impl Session {
    fn cookie(&self) -> String {
        format!("{COOKIE}={}", self.sid)
    }

    fn page(&self, rest: &str) -> String {
        format!("{}{rest}", self.base)
    }

    fn inbox(&self) -> String {
        self.page(&format!("/v/{VAULT}/inbox"))
    }

    fn proposal(&self, id: &str) -> String {
        self.page(&format!("/v/{VAULT}/p/{id}"))
    }

    async fn get(&self, srv: &Server, rest: &str) -> Page {
        get(srv, &self.page(rest), &[("Cookie", &self.cookie())]).await
    }
}

/// Consumes one login link: asserts the 303 with one `vg_review` cookie and returns the session.
async fn use_link(srv: &Server, link: &str, extra: &[(&str, &str)]) -> Session {
    let page = get(srv, &login_path(srv, link), extra).await;
    page.expect(303, "a fresh login code");
    let location = page.location();
    let sp = location
        .strip_prefix("/review/s/")
        .and_then(|r| r.strip_suffix('/'))
        .unwrap_or_else(|| panic!("Location {location} is not /review/s/<sp>/"));
    assert!(
        !sp.is_empty() && !sp.contains('/'),
        "Location {location} is not /review/s/<sp>/"
    );
    let cookies: Vec<String> = page
        .set_cookies()
        .into_iter()
        .filter(|c| SetCookie::parse(c).name == COOKIE)
        .collect();
    assert_eq!(cookies.len(), 1, "one {COOKIE} cookie: {cookies:?}");
    let c = SetCookie::parse(&cookies[0]);
    assert!(!c.value.is_empty(), "an empty session id");
    Session {
        base: format!("/review/s/{sp}"),
        sid: c.value,
        location,
        set_cookie: cookies[0].clone(),
    }
}

async fn login(env: &Env, srv: &Server) -> Session {
    let link = login_link(env, srv);
    use_link(srv, &link, &[]).await
}

/// A refused login: the status, an HTML page, and no session cookie.
fn assert_no_login(page: &Page, status: u16, what: &str) {
    page.expect(status, what);
    assert!(
        page.header("content-type")
            .is_some_and(|c| c.starts_with("text/html")),
        "{what}: the refusal is an HTML page, got {:?}",
        page.header("content-type")
    );
    assert!(
        page.set_cookies()
            .iter()
            .map(|c| SetCookie::parse(c))
            .all(|c| c.name != COOKIE || c.value.is_empty()),
        "{what}: a refused login set a session cookie: {:?}",
        page.set_cookies()
    );
    assert!(page.header("location").is_none(), "{what}: redirected");
}

// ---- the home's state --------------------------------------------------------------------------------

/// A proposal patching `NOTE`, made by an agent over MCP: (id, proposalHash).
async fn propose(c: &Client, content: &str, reason: &str) -> (String, String) {
    let hash = c.call("read_note", json!({"path": NOTE})).await.ok()["hash"].clone();
    let p = c
        .call(
            "propose_note_patch",
            json!({"path": NOTE, "baseHash": hash, "content": content, "reason": reason}),
        )
        .await
        .ok();
    (
        p["id"].as_str().unwrap().to_owned(),
        p["proposalHash"].as_str().unwrap().to_owned(),
    )
}

/// An agent that may propose, and one pending patch of `NOTE` by it: (id, proposalHash).
async fn one_proposal(env: &Env) -> (String, String) {
    let (_, token) = env.token("agent", "propose");
    let c = env.stdio(&token).await;
    let p = propose(&c, "# Attention\n\nrewritten by the agent\n", "a rewrite").await;
    c.close().await;
    p
}

fn pending(env: &Env) -> BTreeSet<String> {
    let out = env.ok(&["inbox", "list", "--status", "pending", "--json"]);
    let items: Vec<Value> = serde_json::from_str(&out).unwrap();
    items
        .iter()
        .map(|it| it["id"].as_str().unwrap().to_owned())
        .collect()
}

/// What an attack must not change: the notes, the pending proposals, the history, the credentials.
#[derive(Debug, PartialEq)]
struct State {
    note: Vec<u8>,
    pending: BTreeSet<String>,
    history: String,
    credentials: String,
}

fn state(env: &Env) -> State {
    State {
        note: std::fs::read(env.vault.join(NOTE)).unwrap(),
        pending: pending(env),
        history: env.ok(&["history", "status", "--json"]),
        credentials: env.ok(&["token", "list", "--json"]),
    }
}

fn audit_len(env: &Env) -> usize {
    audit_lines(env).len()
}

/// Unauthenticated refusals (bad code, cookie, session path, Host) are aggregated per window,
/// code and remote (docs/contract.md#the-audit-log); a 1 s window makes their counts reach the log within the test.
fn short_refusal_window(env: &Env) {
    edit_config(env, "limits", |t| {
        t.insert("refusal_window_seconds".into(), toml::Value::Integer(1));
    });
}

/// Waits until the unauthenticated refusals recorded after the first `before` audit lines add
/// up to `n` (the sum of their `count`s), and asserts they do not exceed it.
async fn assert_unauthenticated(env: &Env, before: usize, n: u64, what: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let records: Vec<Value> = audit_lines(env)
            .into_iter()
            .skip(before)
            .filter(|l| l["event"] == json!("auth") && l["outcome"] == json!("denied"))
            .collect();
        let sum: u64 = records.iter().map(|r| r["count"].as_u64().unwrap_or(1)).sum();
        if sum >= n {
            assert_eq!(sum, n, "{what}: audited refusals {records:?}");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {sum} of {n} refusals audited within {WAIT:?}: {records:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Asserts the one record written since the first `before` audit lines is the reviewer's
/// refusal of `target` (a path below B, e.g. `v/basic/p/<id>/apply`); it is written before the
/// answer, so it is there at once.
fn assert_review_refusal(env: &Env, before: usize, target: &str, what: &str) {
    let new: Vec<Value> = audit_lines(env).into_iter().skip(before).collect();
    assert_eq!(new.len(), 1, "{what}: one audit record, got {new:?}");
    let r = &new[0];
    assert_eq!(r["outcome"], json!("denied"), "{what}: {r}");
    assert_eq!(r["event"], json!("review.refused"), "{what}: {r}");
    assert_eq!(r["actor"], json!("review:tester"), "{what}: {r}");
    assert_eq!(r["target"], json!(target), "{what}: {r}");
    assert!(r["code"].is_string(), "{what}: {r}");
}

// ---- 1. login codes ----------------------------------------------------------------------------------

#[tokio::test]
async fn a_login_code_works_once_and_made_up_codes_are_403() {
    let env = Env::new();
    short_refusal_window(&env);
    let srv = Server::start(&env);
    let link = login_link(&env, &srv);
    let path = login_path(&srv, &link);

    let first = use_link(&srv, &link, &[]).await;
    // The session it opened works.
    first
        .get(&srv, &format!("/v/{VAULT}/inbox"))
        .await
        .expect(200, "the new session's inbox");

    let before = audit_len(&env);
    let again = get(&srv, &path, &[]).await;
    assert_no_login(&again, 403, "the same code a second time");

    // Near misses of a fresh, unused code, and junk: refused, and the code is not spent by them.
    let link = login_link(&env, &srv);
    let code = code_of(&link);
    let made_up: String = code.chars().map(|c| if c == 'A' { 'B' } else { 'A' }).collect();
    assert_ne!(made_up, code);
    for bad in [
        format!("/review/login?code={made_up}"),
        format!("/review/login?code={code}x"),
        format!("/review/login?code={}", &code[..code.len() - 1]),
    ] {
        assert_no_login(&get(&srv, &bad, &[]).await, 403, &bad);
    }
    for bad in ["/review/login?code=", "/review/login"] {
        let page = get(&srv, bad, &[]).await;
        assert!((400..500).contains(&page.status), "{bad}: HTTP {}", page.status);
        assert_no_login(&page, page.status, bad);
    }
    // Control: the fresh code still logs in.
    use_link(&srv, &link, &[]).await;
    // Each of the 6 refusals is audited.
    assert_unauthenticated(&env, before, 6, "refused login codes").await;
}

/// `review --open` with a stand-in opener on PATH that records its argv: the argv names a file in
/// the home (mode 0600) and holds no login code; that file's link logs in once.
// SECURITY(T-REVIEW6): any local user reads `/proc/*/cmdline`; the first use of a code wins.
#[tokio::test]
async fn review_open_hands_the_browser_a_private_file_never_the_code() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    let srv = Server::start(&env);
    let bin_dir = env.tmp.path().join("opener");
    std::fs::create_dir_all(&bin_dir).unwrap();
    let argv_file = env.tmp.path().join("opener-argv");
    let opener = bin_dir.join("xdg-open");
    std::fs::write(
        &opener,
        format!(
            // Written whole, then renamed: the test reads it as soon as it exists.
            "#!/bin/sh\nprintf '%s\\n' \"$0\" \"$@\" > '{0}.tmp' && mv '{0}.tmp' '{0}'\n",
            argv_file.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&opener, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::process::Command::new(crate::util::bin())
        .arg("--home")
        .arg(&env.home)
        .args(["review", "--open"])
        .env_remove("VAULTGATE_HOME")
        .env("PATH", path)
        .env("USER", "tester")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The printed link stays for people who copy it.
    let printed = String::from_utf8(out.stdout).unwrap();
    let link = printed
        .split_whitespace()
        .find(|t| t.contains("/review/login?code="))
        .unwrap_or_else(|| panic!("no link printed: {printed}"))
        .to_owned();
    let code = code_of(&link);
    // The opener is spawned, not waited for: wait for its record.
    let until = Instant::now() + WAIT;
    while !argv_file.exists() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let argv = std::fs::read_to_string(&argv_file).unwrap();
    assert!(
        !argv.contains(&code) && !argv.contains("code="),
        "the code is in the opener's argv: {argv}"
    );
    let args: Vec<&str> = argv.lines().skip(1).collect();
    assert_eq!(args.len(), 1, "one argument, the page: {argv}");
    let page = std::path::Path::new(args[0]);
    assert!(
        page.starts_with(&env.home),
        "{} is not in the home",
        page.display()
    );
    let meta = std::fs::symlink_metadata(page).unwrap();
    assert!(meta.is_file());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "the page's mode");
    let html = std::fs::read_to_string(page).unwrap();
    assert!(html.contains(&link), "the page leads to the printed link: {html}");
    // And that link logs in, once.
    let session = use_link(&srv, &link, &[]).await;
    assert!(session.location.starts_with("/review/s/"));
    assert_no_login(
        &get(&srv, &login_path(&srv, &link), &[]).await,
        403,
        "a second use",
    );
}

#[tokio::test]
async fn a_login_code_raced_by_eight_requests_opens_one_session() {
    let env = Env::new();
    let srv = Server::start(&env);
    let link = login_link(&env, &srv);
    let path = login_path(&srv, &link);
    let url = format!("{}{path}", srv.base());
    let mut tries = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let url = url.clone();
        tries.spawn(async move {
            let resp = web().get(url).send().await.expect("transport");
            Page {
                status: resp.status().as_u16(),
                headers: resp.headers().clone(),
                body: resp.text().await.unwrap(),
            }
        });
    }
    let pages: Vec<Page> = tries.join_all().await;
    let won: Vec<&Page> = pages.iter().filter(|p| p.status == 303).collect();
    assert_eq!(
        won.len(),
        1,
        "{:?}",
        pages.iter().map(|p| p.status).collect::<Vec<_>>()
    );
    for p in pages.iter().filter(|p| p.status != 303) {
        assert_no_login(p, 403, "a racing use of the code");
    }
}

#[tokio::test]
async fn an_expired_login_code_is_403() {
    let env = Env::new();
    // 3 s, not 1: the control below must log in within the TTL on a loaded machine.
    const TTL: u64 = 3;
    short_refusal_window(&env);
    edit_config(&env, "review", |t| {
        t.insert(
            "login_code_ttl_seconds".into(),
            toml::Value::Integer(i64::try_from(TTL).unwrap()),
        );
    });
    let srv = Server::start(&env);

    // Control: a code used at once logs in.
    login(&env, &srv).await;

    let link = login_link(&env, &srv);
    tokio::time::sleep(Duration::from_secs(TTL + 1)).await;
    let before = audit_len(&env);
    assert_no_login(
        &get(&srv, &login_path(&srv, &link), &[]).await,
        403,
        "a code past its TTL",
    );
    assert_unauthenticated(&env, before, 1, "an expired login code").await;
}

// ---- 2. the cookie -----------------------------------------------------------------------------------

#[tokio::test]
async fn the_session_cookie_is_httponly_strict_and_scoped_to_its_session_path() {
    let env = Env::new();
    let srv = Server::start(&env);
    let link = login_link(&env, &srv);
    // Session fixation: a cookie the attacker planted is not adopted.
    let planted = format!("{COOKIE}=attacker-chosen-session-id");
    let a = use_link(&srv, &link, &[("Cookie", &planted)]).await;
    assert_ne!(a.sid, "attacker-chosen-session-id");
    let b = login(&env, &srv).await;

    for s in [&a, &b] {
        let c = SetCookie::parse(&s.set_cookie);
        assert_eq!(c.name, COOKIE);
        assert!(c.attr("httponly").is_some(), "no HttpOnly: {}", s.set_cookie);
        assert_eq!(c.attr("samesite"), Some("Strict"), "{}", s.set_cookie);
        assert_eq!(c.attr("path"), Some(s.base.as_str()), "{}", s.set_cookie);
        assert_eq!(
            format!("{}/", c.attr("path").unwrap()),
            s.location,
            "the cookie's Path is the redirect's"
        );
        assert_eq!(c.attr("max-age"), Some("43200"), "{}", s.set_cookie);
        assert!(
            c.attr("domain").is_none(),
            "a Domain widens the cookie: {}",
            s.set_cookie
        );
        assert!(s.sid.len() >= 16, "a guessable session id: {}", s.sid);
        assert!(!s.base.contains(&s.sid), "the session id is in the URL");
    }
    assert_ne!(a.sid, b.sid, "two logins share a session id");
    assert_ne!(a.base, b.base, "two logins share a session path");

    // The redirect chain of a login: B/ → B/v/basic/inbox → the inbox.
    let root = get(&srv, &a.location, &[("Cookie", &a.cookie())]).await;
    root.expect(303, "B/");
    assert_eq!(root.location(), a.inbox());
    let inbox = get(&srv, &a.inbox(), &[("Cookie", &a.cookie())]).await;
    inbox.expect(200, "the inbox");
    assert!(inbox.body.contains("id=\"inbox\""), "{}", inbox.body);

    // The code and the session id are secrets: neither is logged.
    let audit = std::fs::read_to_string(env.home.join("audit.jsonl")).unwrap();
    let log = srv.stderr();
    for secret in [code_of(&link), a.sid.clone(), b.sid.clone()] {
        assert!(!audit.contains(&secret), "a review secret reached the audit log");
        assert!(!log.contains(&secret), "a review secret reached the server log");
    }
}

// ---- 3. CSRF and Origin ------------------------------------------------------------------------------

#[tokio::test]
async fn an_apply_without_csrf_with_another_sessions_csrf_or_a_foreign_origin_is_403_and_changes_nothing() {
    let env = Env::new();
    let srv = Server::start(&env);
    let (id, _) = one_proposal(&env).await;
    let s1 = login(&env, &srv).await;
    let s2 = login(&env, &srv).await;

    let page1 = s1.get(&srv, &format!("/v/{VAULT}/p/{id}")).await;
    page1.expect(200, "the proposal page");
    assert!(
        page1.body.contains("id=\"apply\""),
        "no form#apply: {}",
        page1.body
    );
    let csrf1 = page1.csrf();
    let hash = hidden(&page1.body, "proposalHash");
    let csrf2 = s2.get(&srv, &format!("/v/{VAULT}/p/{id}")).await.csrf();
    assert_ne!(csrf1, csrf2, "two sessions share a CSRF token");

    let apply = format!("{}/apply", s1.proposal(&id));
    let cookie = s1.cookie();
    let origin = same_origin(&srv);
    let before = state(&env);
    assert!(before.pending.contains(&id));

    let attacks: [(&str, Pairs, Pairs); 6] = [
        (
            "no csrf",
            vec![("Cookie", &cookie), ("Origin", &origin)],
            vec![("proposalHash", &hash)],
        ),
        (
            "an empty csrf",
            vec![("Cookie", &cookie), ("Origin", &origin)],
            vec![("csrf", ""), ("proposalHash", &hash)],
        ),
        (
            "session 2's csrf with session 1's cookie",
            vec![("Cookie", &cookie), ("Origin", &origin)],
            vec![("csrf", &csrf2), ("proposalHash", &hash)],
        ),
        (
            "Origin: http://evil.example",
            vec![("Cookie", &cookie), ("Origin", "http://evil.example")],
            vec![("csrf", &csrf1), ("proposalHash", &hash)],
        ),
        (
            "Origin: null",
            vec![("Cookie", &cookie), ("Origin", "null")],
            vec![("csrf", &csrf1), ("proposalHash", &hash)],
        ),
        (
            "Origin: the loopback on another port",
            vec![("Cookie", &cookie), ("Origin", "http://127.0.0.1:1")],
            vec![("csrf", &csrf1), ("proposalHash", &hash)],
        ),
    ];
    let target = format!("v/{VAULT}/p/{id}/apply");
    for (what, headers, fields) in &attacks {
        let n = audit_len(&env);
        let page = post_form(&srv, &apply, headers, fields).await;
        page.expect(403, what);
        assert_eq!(state(&env), before, "{what} changed something");
        assert_review_refusal(&env, n, &target, what);
    }
    // A GET never decides.
    let page = get(&srv, &apply, &[("Cookie", &cookie)]).await;
    assert!(
        (400..500).contains(&page.status),
        "GET apply: HTTP {}",
        page.status
    );
    assert_eq!(state(&env), before, "GET apply changed something");

    // Control: cookie + csrf + same Origin applies.
    let page = post_form(
        &srv,
        &apply,
        &[("Cookie", &cookie), ("Origin", &origin)],
        &[("csrf", &csrf1), ("proposalHash", &hash)],
    )
    .await;
    page.expect(200, "the right apply");
    let result = open_tag(&page.body, "result");
    assert!(
        result.starts_with("<div") && result.contains("data-outcome=\"ok\""),
        "the result is not ok: {result}"
    );
    assert!(!pending(&env).contains(&id), "applied but still pending");
    assert_eq!(
        std::fs::read_to_string(env.vault.join(NOTE)).unwrap(),
        "# Attention\n\nrewritten by the agent\n"
    );
    let ok: Vec<Value> = audit_lines(&env)
        .into_iter()
        .filter(|l| {
            l["outcome"] == json!("ok")
                && l["event"] == json!("review")
                && l["actor"] == json!("review:tester")
                && l["tool"] == json!("apply_proposal")
        })
        .collect();
    assert_eq!(ok.len(), 1, "the apply is audited once as review:tester");
}

#[tokio::test]
async fn every_post_form_needs_the_csrf_token() {
    let env = Env::new();
    let srv = Server::start(&env);
    // Something to undo: one patch applied by an auto-tier agent; then one pending proposal.
    let (cred_id, token) = env.token("agent", "auto");
    let c = env.stdio(&token).await;
    let (id, hash) = propose(&c, "# Attention\n\nfirst\n", "first").await;
    let applied = c
        .call(
            "apply_proposal",
            json!({"id": id, "proposalHash": hash, "idempotencyKey": "first"}),
        )
        .await
        .ok();
    assert_eq!(applied["applied"], json!(true), "{applied}");
    let (id, _) = propose(&c, "# Attention\n\nsecond\n", "second").await;
    c.close().await;

    let s = login(&env, &srv).await;
    let history = s.get(&srv, &format!("/v/{VAULT}/history")).await;
    history.expect(200, "the history page");
    let expected = hidden(&element(&history.body, "form", "undo"), "expected");
    let cookie = s.cookie();
    let origin = same_origin(&srv);
    let before = state(&env);
    assert!(before.pending.contains(&id));

    let posts: [(String, Pairs); 6] = [
        (
            s.page(&format!("/v/{VAULT}/history/undo")),
            vec![("expected", &expected)],
        ),
        (format!("{}/reject", s.proposal(&id)), vec![("reason", "no")]),
        (
            s.page("/credentials/issue"),
            vec![("name", "sneaky"), ("tier", "read"), ("vault", VAULT)],
        ),
        (
            s.page(&format!("/credentials/{cred_id}/tier")),
            vec![("tier", "read")],
        ),
        (s.page(&format!("/credentials/{cred_id}/revoke")), vec![]),
        (s.page("/logout"), vec![]),
    ];
    let headers = [("Cookie", cookie.as_str()), ("Origin", origin.as_str())];
    for (path, fields) in &posts {
        let n = audit_len(&env);
        let page = post_form(&srv, path, &headers, fields).await;
        page.expect(403, path);
        assert_eq!(state(&env), before, "POST {path} without csrf changed something");
        let target = path.strip_prefix(&format!("{}/", s.base)).unwrap();
        assert_review_refusal(&env, n, target, path);
    }
    // The refused logout did not end the session.
    s.get(&srv, &format!("/v/{VAULT}/inbox"))
        .await
        .expect(200, "the session after a refused logout");

    // Control: each of the same POSTs with the csrf token does its work (a refusal of a
    // mistyped path would look the same, since the token is checked first).
    let csrf = history.csrf();
    let ok = |page: &Page, what: &str| {
        page.expect(200, what);
        let result = open_tag(&page.body, "result");
        assert!(result.contains("data-outcome=\"ok\""), "{what}: {result}");
    };
    for (path, fields) in &posts[..2] {
        let mut fields = fields.clone();
        fields.push(("csrf", &csrf));
        ok(&post_form(&srv, path, &headers, &fields).await, path);
    }
    let now = state(&env);
    assert!(!now.pending.contains(&id), "the reject did not reject");
    assert_ne!(now.history, before.history, "the undo did not undo");
    assert_ne!(now.note, before.note, "the undo did not restore the note");

    let (path, fields) = &posts[2];
    let mut fields = fields.clone();
    fields.push(("csrf", &csrf));
    let issued = post_form(&srv, path, &headers, &fields).await;
    issued.expect(200, "issue");
    assert!(
        issued.body.contains("id=\"token\""),
        "no code#token: {}",
        issued.body
    );
    let creds: Vec<Value> = serde_json::from_str(&env.ok(&["token", "list", "--json"])).unwrap();
    assert!(creds.iter().any(|c| c["name"] == json!("sneaky")), "{creds:?}");

    for (path, fields) in &posts[3..5] {
        let mut fields = fields.clone();
        fields.push(("csrf", &csrf));
        ok(&post_form(&srv, path, &headers, &fields).await, path);
    }
    let creds: Vec<Value> = serde_json::from_str(&env.ok(&["token", "list", "--json"])).unwrap();
    let agent = creds.iter().find(|c| c["id"] == json!(cred_id)).unwrap();
    assert_eq!(
        (&agent["revoked"], &agent["tier"]),
        (&json!(true), &json!("read")),
        "{agent}"
    );

    let out = post_form(&srv, &posts[5].0, &headers, &[("csrf", &csrf)]).await;
    out.expect(303, "logout");
    s.get(&srv, &format!("/v/{VAULT}/inbox"))
        .await
        .expect(401, "the session after its logout");
}

#[tokio::test]
async fn the_full_tier_needs_its_confirmation_posted() {
    let env = Env::new();
    let srv = Server::start(&env);
    let (cred_id, _) = env.token("agent", "propose");
    let s = login(&env, &srv).await;
    let page = s.get(&srv, "/credentials").await;
    page.expect(200, "the credentials page");
    assert!(
        page.body.contains(&format!("data-id=\"{cred_id}\"")),
        "{}",
        page.body
    );
    let csrf = page.csrf();
    let origin = same_origin(&srv);
    let headers = [("Cookie", s.cookie()), ("Origin", origin)];
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let tier = s.page(&format!("/credentials/{cred_id}/tier"));
    let issue = s.page("/credentials/issue");
    let before = state(&env);

    for (path, fields) in [
        (&tier, vec![("csrf", csrf.as_str()), ("tier", "full")]),
        (&tier, vec![("csrf", &csrf), ("tier", "full"), ("confirm", "no")]),
        (&issue, vec![("csrf", &csrf), ("name", "root"), ("tier", "full")]),
    ] {
        let page = post_form(&srv, path, &headers, &fields).await;
        page.expect(200, &format!("{path} {fields:?}"));
        assert!(
            page.body.contains("id=\"confirm-full\""),
            "no confirmation: {}",
            page.body
        );
        assert!(!page.body.contains("id=\"token\""), "a token before confirming");
        assert_eq!(state(&env), before, "{path} {fields:?} changed something");
    }

    // Control: posted with confirm=yes, both take effect.
    let page = post_form(
        &srv,
        &tier,
        &headers,
        &[("csrf", &csrf), ("tier", "full"), ("confirm", "yes")],
    )
    .await;
    page.expect(200, "confirmed tier");
    assert!(open_tag(&page.body, "result").contains("data-outcome=\"ok\""));
    let page = post_form(
        &srv,
        &issue,
        &headers,
        &[
            ("csrf", &csrf),
            ("name", "root"),
            ("tier", "full"),
            ("confirm", "yes"),
        ],
    )
    .await;
    page.expect(200, "confirmed issue");
    assert!(page.body.contains("id=\"token\""), "{}", page.body);
    let creds: Vec<Value> = serde_json::from_str(&env.ok(&["token", "list", "--json"])).unwrap();
    let tiers: BTreeSet<(String, String)> = creds
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_owned(),
                c["tier"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        tiers,
        BTreeSet::from([
            ("agent".to_owned(), "full".to_owned()),
            ("root".to_owned(), "full".to_owned())
        ])
    );
    // Reloading the credentials page never shows a token again.
    let token = element(&page.body, "code", "token");
    let again = s.get(&srv, "/credentials").await;
    assert!(!again.body.contains(&token), "the token is shown again");
}

// ---- 4. bearer tokens and cookies stay on their side -------------------------------------------------

#[tokio::test]
async fn a_bearer_token_never_opens_review_and_a_review_cookie_never_opens_mcp() {
    let env = Env::new();
    let (_, full) = env.token("root", "full");
    short_refusal_window(&env);
    let srv = Server::start(&env);
    let (id, _) = one_proposal(&env).await;
    let s = login(&env, &srv).await;
    let page = s.get(&srv, &format!("/v/{VAULT}/p/{id}")).await;
    page.expect(200, "control: the proposal page with the cookie");
    let csrf = page.csrf();
    let hash = hidden(&page.body, "proposalHash");
    let auth = bearer(&full);
    let before = state(&env);
    let lines = audit_len(&env);

    // A full-tier token on review pages, with no cookie.
    for path in [s.page("/"), s.inbox(), s.proposal(&id), s.page("/credentials")] {
        let page = get(&srv, &path, &[("Authorization", &auth)]).await;
        page.expect(401, &format!("bearer on {path}"));
    }
    let origin = same_origin(&srv);
    let page = post_form(
        &srv,
        &format!("{}/apply", s.proposal(&id)),
        &[("Authorization", &auth), ("Origin", &origin)],
        &[("csrf", &csrf), ("proposalHash", &hash)],
    )
    .await;
    page.expect(401, "an apply with a bearer token and a valid csrf but no cookie");
    assert_eq!(state(&env), before);
    // … nor on the login URL: no code, a made-up code, or the token itself as the code.
    for path in [
        "/review/login".to_owned(),
        "/review/login?code=made-up".to_owned(),
        format!("/review/login?code={full}"),
    ] {
        let page = get(&srv, &path, &[("Authorization", &auth)]).await;
        assert!(
            (400..500).contains(&page.status),
            "bearer on {path}: HTTP {}",
            page.status
        );
        assert_no_login(&page, page.status, &path);
    }

    // The review cookie on /mcp, alone or as a bearer token.
    let cookie = s.cookie();
    let resp = post(&srv, None, &[("Cookie", &cookie)], &initialize(1, "2025-06-18")).await;
    assert_eq!(resp.status().as_u16(), 401, "the review cookie on /mcp");
    let as_bearer = bearer(&s.sid);
    let resp = post(&srv, Some(&as_bearer), &[], &initialize(1, "2025-06-18")).await;
    assert_eq!(
        resp.status().as_u16(),
        401,
        "the session id as a bearer token on /mcp"
    );
    // Control: the agent's token opens /mcp.
    let resp = post(&srv, Some(&auth), &[], &initialize(1, "2025-06-18")).await;
    assert_eq!(resp.status().as_u16(), 200, "control: the bearer token on /mcp");
    assert_eq!(state(&env), before);
    // 5 on review pages, 3 on the login URL, 2 on /mcp.
    assert_unauthenticated(&env, lines, 10, "bearer tokens and cookies on the wrong side").await;
}

#[tokio::test]
async fn a_cookie_opens_only_its_own_live_session() {
    let env = Env::new();
    short_refusal_window(&env);
    let srv = Server::start(&env);
    let (id, _) = one_proposal(&env).await;
    let s1 = login(&env, &srv).await;
    let s2 = login(&env, &srv).await;
    let c1 = s1.cookie();
    let lines = audit_len(&env);

    // On another session's path, a made-up one, or with a tampered id.
    let made_up: String = s1.base["/review/s/".len()..]
        .chars()
        .map(|c| if c == 'a' { 'b' } else { 'a' })
        .collect();
    let tampered = {
        let mut sid = s1.sid.clone();
        let last = sid.pop().unwrap();
        sid.push(if last == 'A' { 'B' } else { 'A' });
        format!("{COOKIE}={sid}")
    };
    let refused = [
        ("session 1's cookie on session 2's path", s2.inbox(), c1.clone()),
        (
            "a cookie on a made-up session path",
            format!("/review/s/{made_up}/v/{VAULT}/inbox"),
            c1.clone(),
        ),
        ("a tampered session id", s1.inbox(), tampered),
        ("no cookie", s1.inbox(), String::new()),
        ("another cookie name", s1.inbox(), format!("other={}", s1.sid)),
    ];
    for (what, path, cookie) in &refused {
        let headers: Vec<(&str, &str)> = if cookie.is_empty() {
            vec![]
        } else {
            vec![("Cookie", cookie.as_str())]
        };
        get(&srv, path, &headers).await.expect(401, what);
    }
    // Control: each cookie on its own path.
    get(&srv, &s1.inbox(), &[("Cookie", &c1)]).await.expect(200, "s1");
    get(&srv, &s2.inbox(), &[("Cookie", &s2.cookie())])
        .await
        .expect(200, "s2");

    // Logged out: the cookie (and its csrf) are dead, the other session lives.
    let page = s1.get(&srv, &format!("/v/{VAULT}/p/{id}")).await;
    let csrf = page.csrf();
    let hash = hidden(&page.body, "proposalHash");
    let origin = same_origin(&srv);
    let out = post_form(
        &srv,
        &s1.page("/logout"),
        &[("Cookie", &c1), ("Origin", &origin)],
        &[("csrf", &csrf)],
    )
    .await;
    assert!(
        (200..400).contains(&out.status),
        "logout: HTTP {}: {}",
        out.status,
        out.body
    );
    let cleared = out
        .set_cookies()
        .into_iter()
        .map(|c| SetCookie::parse(&c))
        .find(|c| c.name == COOKIE)
        .expect("logout clears the cookie");
    assert!(cleared.value.is_empty() || cleared.attr("max-age") == Some("0"));
    assert_ne!(cleared.value, s1.sid);

    let before = state(&env);
    get(&srv, &s1.inbox(), &[("Cookie", &c1)])
        .await
        .expect(401, "a logged-out session");
    post_form(
        &srv,
        &format!("{}/apply", s1.proposal(&id)),
        &[("Cookie", &c1), ("Origin", &origin)],
        &[("csrf", &csrf), ("proposalHash", &hash)],
    )
    .await
    .expect(401, "an apply in a logged-out session");
    assert_eq!(state(&env), before);
    get(&srv, &s2.inbox(), &[("Cookie", &s2.cookie())])
        .await
        .expect(200, "the other session after a logout");
    assert_unauthenticated(&env, lines, 7, "cookies out of place").await;
}

// ---- 5. hostile proposal text ------------------------------------------------------------------------

const SCRIPT: &str = "<script>alert(1)</script>";
const IMG: &str = "\"><img src=x onerror=alert(1)>";

/// No raw markup of the hostile text survives into `html`.
fn assert_no_markup(what: &str, html: &str) {
    for raw in ["<script>alert", "<img src=x", "onerror=alert(1)>"] {
        assert!(!html.contains(raw), "{what} holds raw {raw:?}: {html}");
    }
}

/// No raw markup or control character of the hostile text survives into `html`.
fn assert_inert(what: &str, html: &str) {
    assert_no_markup(what, html);
    for c in ['\u{7}', '\u{9b}', '\u{1b}', '\u{202e}', '\u{202c}', '\u{200b}'] {
        assert!(!html.contains(c), "{what} holds a raw control {c:?}: {html}");
    }
}

/// The hostile text is shown, escaped: as HTML entities and with visible control escapes.
fn assert_shown_escaped(what: &str, html: &str) {
    assert!(html.contains("&lt;script&gt;alert(1)"), "{what}: {html}");
    assert!(html.contains("&lt;img src=x"), "{what}: {html}");
    // policy::text::escape: every hidden character as \u{XXXX}.
    for esc in [
        "\\u{0007}",
        "\\u{009B}",
        "\\u{001B}[31m",
        "\\u{202E}9876-5432\\u{202C}",
        "zero\\u{200B}width",
    ] {
        assert!(html.contains(esc), "{what} lacks the visible {esc}: {html}");
    }
}

#[tokio::test]
async fn hostile_proposal_text_is_shown_escaped_never_as_markup() {
    let env = Env::new();
    let srv = Server::start(&env);
    // SECURITY(T-BIDI): the red-team's account number, reordered by U+202E unless escaped.
    let hostile = format!(
        "{SCRIPT} {IMG} bell\u{7} csi\u{9b}31m esc\u{1b}[31m red \
         Transfer to account: \u{202e}9876-5432\u{202c} zero\u{200b}width"
    );
    let (_, token) = env.token("agent", "propose");
    let c = env.stdio(&token).await;
    let (patch, _) = propose(&c, &format!("# Attention\n\n{hostile}\n"), &hostile).await;
    let created = c
        .call(
            "propose_new_note",
            json!({"path": "notes/xss.md", "content": format!("{hostile}\n"), "reason": hostile}),
        )
        .await
        .ok();
    let created = created["id"].as_str().unwrap().to_owned();
    c.close().await;
    let s = login(&env, &srv).await;

    let page = s.get(&srv, &format!("/v/{VAULT}/p/{patch}")).await;
    page.expect(200, "the patch's page");
    assert_inert("the patch's page", &page.body);
    assert_shown_escaped("pre#reason", &element(&page.body, "pre", "reason"));
    assert_shown_escaped("the patch's page", &page.body);
    assert!(page.body.contains("id=\"diff-split\""), "{}", page.body);
    assert!(page.body.contains("id=\"diff-unified\""), "{}", page.body);

    let page = s.get(&srv, &format!("/v/{VAULT}/p/{created}")).await;
    page.expect(200, "the new note's page");
    assert_inert("the new note's page", &page.body);
    assert_shown_escaped("pre#content", &element(&page.body, "pre", "content"));
    assert_shown_escaped("pre#reason", &element(&page.body, "pre", "reason"));

    let inbox = s.get(&srv, &format!("/v/{VAULT}/inbox")).await;
    inbox.expect(200, "the inbox");
    assert_inert("the inbox", &inbox.body);
    for id in [&patch, &created] {
        assert!(
            inbox.body.contains(&format!("data-id=\"{id}\"")),
            "{id} not in the inbox"
        );
    }
    assert!(
        inbox.body.contains("&lt;script&gt;"),
        "the reason is not in the inbox"
    );

    // Hostile text in the URL is not reflected as markup either.
    for rest in [
        format!("/v/{VAULT}/p/%3Cscript%3Ealert(1)%3C%2Fscript%3E"),
        "/v/%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E/inbox".to_owned(),
    ] {
        let page = s.get(&srv, &rest).await;
        assert!((400..500).contains(&page.status), "{rest}: HTTP {}", page.status);
        assert_inert(&rest, &page.body);
    }
}

#[tokio::test]
async fn hostile_strings_an_agent_put_in_the_audit_log_are_inert_on_the_audit_page() {
    let env = Env::new();
    let srv = Server::start(&env);
    // SECURITY(T-BIDI): the red-team's account number, reordered by U+202E unless escaped.
    let hostile = format!(
        "{SCRIPT} {IMG} bell\u{7} csi\u{9b}31m esc\u{1b}[31m red \
         Transfer to account: \u{202e}9876-5432\u{202c} zero\u{200b}width"
    );
    let (_, token) = env.token("agent", "read");
    let c = env.stdio(&token).await;
    // Refused, and audited with the strings echoed (cut) in `vault` and `target`.
    c.call("read_note", json!({"path": "welcome.md", "vault": hostile}))
        .await
        .code();
    c.call("read_note", json!({"path": hostile})).await.code();
    c.close().await;
    let audit = std::fs::read_to_string(env.home.join("audit.jsonl")).unwrap();
    assert!(
        audit.contains("<script>alert(1)"),
        "the hostile text is not in the log"
    );

    let s = login(&env, &srv).await;
    let page = s.get(&srv, "/audit").await;
    page.expect(200, "the audit page");
    assert_inert("the audit page", &page.body);
    assert_shown_escaped("the audit page", &page.body);
    assert!(page.body.contains("id=\"chain-status\""), "{}", page.body);

    // The filter's echo of the query holds no markup (its control characters are the reviewer's
    // own query, kept so that the form resubmits it).
    let q = enc(&hostile);
    let page = s
        .get(&srv, &format!("/audit?credential={q}&vault={q}&outcome={q}"))
        .await;
    assert!(page.status < 500, "HTTP {}", page.status);
    assert_no_markup("the filtered audit page", &page.body);
}

// ---- 6. Host -----------------------------------------------------------------------------------------

#[tokio::test]
async fn a_non_loopback_host_is_403_on_login_pages_and_posts() {
    let env = Env::new();
    short_refusal_window(&env);
    let srv = Server::start(&env);
    let (id, _) = one_proposal(&env).await;
    let s = login(&env, &srv).await;
    let page = s.get(&srv, &format!("/v/{VAULT}/p/{id}")).await;
    let csrf = page.csrf();
    let hash = hidden(&page.body, "proposalHash");
    let cookie = s.cookie();
    let before = state(&env);
    let lines = audit_len(&env);

    for host in [
        format!("evil.example:{}", srv.port),
        format!("127.0.0.1.nip.io:{}", srv.port),
    ] {
        // A fresh, valid code: only the Host is wrong.
        let link = login_link(&env, &srv);
        let page = get(&srv, &login_path(&srv, &link), &[("Host", &host)]).await;
        assert_no_login(&page, 403, &format!("login with Host {host}"));

        get(&srv, &s.inbox(), &[("Host", &host), ("Cookie", &cookie)])
            .await
            .expect(403, &format!("the inbox with Host {host}"));

        // DNS rebinding: the attacker's page is same-origin with its own name.
        let origin = format!("http://{host}");
        post_form(
            &srv,
            &format!("{}/apply", s.proposal(&id)),
            &[("Host", &host), ("Cookie", &cookie), ("Origin", &origin)],
            &[("csrf", &csrf), ("proposalHash", &hash)],
        )
        .await
        .expect(403, &format!("an apply with Host {host}"));
        assert_eq!(state(&env), before, "Host {host} changed something");
    }
    assert_unauthenticated(&env, lines, 6, "foreign Host headers").await;

    // Control: with the loopback Host the same requests are served.
    let loopback = format!("127.0.0.1:{}", srv.port);
    get(&srv, &s.inbox(), &[("Host", &loopback), ("Cookie", &cookie)])
        .await
        .expect(200, "the inbox with the loopback Host");
    let origin = same_origin(&srv);
    post_form(
        &srv,
        &format!("{}/apply", s.proposal(&id)),
        &[("Host", &loopback), ("Cookie", &cookie), ("Origin", &origin)],
        &[("csrf", &csrf), ("proposalHash", &hash)],
    )
    .await
    .expect(200, "the apply with the loopback Host");
    assert!(!pending(&env).contains(&id));
}

// ---- 7. headers --------------------------------------------------------------------------------------

#[tokio::test]
async fn pages_and_refusals_carry_the_security_headers() {
    let env = Env::new();
    let srv = Server::start(&env);
    let (id, _) = one_proposal(&env).await;
    let s = login(&env, &srv).await;
    let mut pages = vec![];
    for rest in [
        format!("/v/{VAULT}/inbox"),
        format!("/v/{VAULT}/p/{id}"),
        format!("/v/{VAULT}/history"),
        "/credentials".to_owned(),
    ] {
        let page = s.get(&srv, &rest).await;
        page.expect(200, &rest);
        for id in ["id=\"nav\"", "id=\"logout\""] {
            assert!(page.body.contains(id), "{rest} lacks {id}");
        }
        pages.push((rest, page));
    }
    pages.push((
        "a refused login".to_owned(),
        get(&srv, "/review/login?code=made-up", &[]).await,
    ));
    pages.push((
        "a request without a cookie".to_owned(),
        get(&srv, &s.inbox(), &[]).await,
    ));
    for (what, page) in &pages {
        for (name, value) in [
            (
                "content-security-policy",
                "default-src 'self'; frame-ancestors 'none'",
            ),
            ("x-content-type-options", "nosniff"),
            ("cache-control", "no-store"),
            ("referrer-policy", "same-origin"),
        ] {
            assert_eq!(
                page.header(name),
                Some(value),
                "{what} (HTTP {}): header {name}",
                page.status
            );
        }
    }
}

// ---- 8. `vaultgate review` needs a live server of its home -------------------------------------------

/// Asserts `vaultgate review ARGS` exits 1 with an error and prints no link.
fn assert_review_refused(env: &Env, args: &[&str], what: &str) {
    let mut all = vec!["review"];
    all.extend_from_slice(args);
    let out = env.run(&all);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{what}: {stdout}\n{stderr}");
    assert!(!stderr.trim().is_empty(), "{what}: no error message");
    for printed in [&stdout, &stderr] {
        assert!(
            !printed.contains("/review/login") && !printed.contains("code="),
            "{what}: a login link was printed: {printed}"
        );
    }
}

#[tokio::test]
async fn review_refuses_without_a_live_server_of_its_home() {
    let env = Env::new();
    assert_review_refused(&env, &[], "no server ever ran");
    let unused = {
        let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        l.local_addr().unwrap().port().to_string()
    };
    assert_review_refused(&env, &["--port", &unused], "no server on --port");

    let srv = Server::start(&env);
    let port = srv.port.to_string();
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(env.home.join("server.json")).unwrap()).unwrap();
    assert_eq!(record["port"], json!(srv.port), "{record}");
    assert_eq!(record["host"], json!("127.0.0.1"), "{record}");
    assert!(record["pid"].is_u64(), "{record}");
    // Control: with the server up, a working link.
    let link = login_link(&env, &srv);
    use_link(&srv, &link, &[]).await;

    // SECURITY(T-REVIEW5): another home's live server is not this home's, and a process that
    // merely listens on a port is no server at all: neither is handed a code.
    let other = Env::new();
    assert_review_refused(&other, &["--port", &port], "a server of another home");
    let squatter = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let squatted = squatter.local_addr().unwrap().port().to_string();
    let answers = std::thread::spawn(move || {
        // Answers like a web server, with a made-up proof.
        use std::io::{Read, Write};
        if let Ok((mut c, _)) = squatter.accept() {
            let mut buf = [0u8; 4096];
            let _ = c.read(&mut buf);
            let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 64\r\n\r\n");
            let _ = c.write_all("ab".repeat(32).as_bytes());
        }
    });
    assert_review_refused(&env, &["--port", &squatted], "a process squatting a port");
    answers.join().unwrap();

    // A smarter squatter relays the question to the real server (Host rewritten, so the real
    // server answers) and hands back its genuine proof: it names the real server's address, not
    // the squatter's, so still no code.
    let relay = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let relayed = relay.local_addr().unwrap().port().to_string();
    let (from_host, to_host) = (format!("127.0.0.1:{relayed}"), format!("127.0.0.1:{port}"));
    let real = srv.port;
    let relaying = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let Ok((mut c, _)) = relay.accept() else {
            return false;
        };
        // The whole request head (it may arrive in several writes).
        let mut asked = Vec::new();
        let mut chunk = [0u8; 1024];
        while !asked.windows(4).any(|w| w == b"\r\n\r\n") {
            match c.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => asked.extend_from_slice(&chunk[..n]),
            }
        }
        let asked = String::from_utf8_lossy(&asked).replace(&from_host, &to_host);
        let mut up = std::net::TcpStream::connect(("127.0.0.1", real)).unwrap();
        up.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        up.write_all(asked.as_bytes()).unwrap();
        // One whole answer (head and Content-Length body), whether or not the server closes.
        let mut answer = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&answer).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let len = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().to_owned())
                    })
                    .and_then(|v| v.parse::<usize>().ok())
                    .unwrap_or(0);
                if body.len() >= len {
                    break;
                }
            }
            match up.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&chunk[..n]),
            }
        }
        let genuine = String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200");
        let _ = c.write_all(&answer);
        genuine
    });
    assert_review_refused(
        &env,
        &["--port", &relayed],
        "a squatter relaying to the real server",
    );
    assert!(
        relaying.join().unwrap(),
        "the relay did not get a genuine answer from the real server, so it proved nothing"
    );

    // Killed (no clean shutdown: server.json stays behind).
    drop(srv);
    assert!(
        env.home.join("server.json").exists(),
        "a killed server removed server.json"
    );
    assert_review_refused(&env, &[], "the server was killed");
    assert_review_refused(&env, &["--port", &port], "the server was killed, --port");
}

#[tokio::test]
async fn an_oversize_form_is_refused_audited_and_changes_nothing() {
    let env = Env::new();
    let srv = Server::start(&env);
    let (id, _) = one_proposal(&env).await;
    let s = login(&env, &srv).await;
    let page = s.get(&srv, &format!("/v/basic/p/{id}")).await;
    page.expect(200, "the proposal page");
    let csrf = page.csrf();
    let origin = same_origin(&srv);
    let headers = [("Cookie", s.cookie()), ("Origin", origin)];
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let path = s.page(&format!("/v/basic/p/{id}/reject"));
    let before_state = state(&env);
    let before = audit_len(&env);
    let huge = "r".repeat(70 * 1024);
    let refused = post_form(&srv, &path, &headers, &[("csrf", &csrf), ("reason", &huge)]).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert_eq!(state(&env), before_state, "an oversize form changed something");
    assert_review_refusal(
        &env,
        before,
        &format!("v/basic/p/{id}/reject"),
        "an oversize form",
    );
    // Control: the same form with a short reason rejects.
    let ok = post_form(&srv, &path, &headers, &[("csrf", &csrf), ("reason", "not now")]).await;
    ok.expect(200, "a short reason");
    assert_ne!(state(&env), before_state, "the control changed nothing");
}

/// docs/contract.md#the-review-page-and-in-client-approval: the Credentials page's box opts a new credential into in-client approval — only
/// when ticked, carried through the `full` confirmation, shown on the list, with its warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_issue_form_opts_into_in_client_approval_only_when_ticked() {
    let env = Env::new();
    let srv = Server::start(&env);
    let s = login(&env, &srv).await;
    let page = s.get(&srv, "/credentials").await;
    page.expect(200, "the credentials page");
    assert!(
        page.body.contains("name=\"approveInClient\"") && page.body.contains("approve-in-client-warning"),
        "the box and its warning are on the issue form"
    );
    let csrf = page.csrf();
    let origin = same_origin(&srv);
    let headers = [("Cookie", s.cookie()), ("Origin", origin)];
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let issue = s.page("/credentials/issue");
    for fields in [
        vec![("csrf", csrf.as_str()), ("name", "plain"), ("tier", "propose")],
        vec![
            ("csrf", &csrf),
            ("name", "odd-value"),
            ("tier", "propose"),
            ("approveInClient", "on"),
        ],
        vec![
            ("csrf", &csrf),
            ("name", "ticked"),
            ("tier", "propose"),
            ("approveInClient", "yes"),
        ],
    ] {
        post_form(&srv, &issue, &headers, &fields)
            .await
            .expect(200, &format!("{fields:?}"));
    }
    // Through the second confirmation of `full`, the box survives.
    let confirm = post_form(
        &srv,
        &issue,
        &headers,
        &[
            ("csrf", &csrf),
            ("name", "root"),
            ("tier", "full"),
            ("approveInClient", "yes"),
        ],
    )
    .await;
    assert!(confirm.body.contains("id=\"confirm-full\""));
    assert!(
        confirm.body.contains("name=\"approveInClient\" value=\"yes\""),
        "the confirmation carries the box: {}",
        confirm.body
    );
    post_form(
        &srv,
        &issue,
        &headers,
        &[
            ("csrf", &csrf),
            ("name", "root"),
            ("tier", "full"),
            ("approveInClient", "yes"),
            ("confirm", "yes"),
        ],
    )
    .await
    .expect(200, "confirmed full");

    let creds: Vec<Value> = serde_json::from_str(&env.ok(&["token", "list", "--json"])).unwrap();
    let flags: BTreeSet<(String, bool)> = creds
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_owned(),
                c["approveInClient"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        flags,
        BTreeSet::from([
            ("plain".to_owned(), false),
            ("odd-value".to_owned(), false),
            ("ticked".to_owned(), true),
            ("root".to_owned(), true),
        ])
    );
    let list = s.get(&srv, "/credentials").await;
    assert_eq!(
        list.body.matches("class=\"tag approve-in-client\"").count(),
        2,
        "the list marks exactly the two opted-in credentials"
    );
}

/// Runs git in `dir` with a fixed identity and no system or global configuration.
fn git(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=Person",
            "-c",
            "user.email=person@example.invalid",
        ])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `td.git` cell of a vault's row on the Vaults page.
fn git_cell(body: &str) -> String {
    let at = body
        .find("class=\"git")
        .unwrap_or_else(|| panic!("no git cell: {body}"));
    let end = body[at..].find("</td>").map_or(body.len(), |e| at + e);
    body[at..end].to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_vaults_page_shows_git_status_and_what_waits_in_its_queue() {
    let env = Env::new();
    git(&env.vault, &["init", "-q", "-b", "main"]);
    git(&env.vault, &["add", "."]);
    git(&env.vault, &["commit", "-q", "-m", "notes"]);
    let srv = Server::start(&env);
    let s = login(&env, &srv).await;

    let vaults = || async {
        let page = s.get(&srv, "/vaults").await;
        page.expect(200, "the vaults page");
        git_cell(&page.body)
    };
    let off = vaults().await;
    assert!(off.contains("data-git=\"off\""), "{off}");
    assert!(
        off.contains("vaultgate vault git basic on"),
        "the next step is shown: {off}"
    );

    env.ok(&["vault", "git", "basic", "on"]);
    let on = vaults().await;
    assert!(
        on.contains("data-git=\"on\"") && on.contains("data-queued=\"0\""),
        "{on}"
    );

    // Another git holds the index: the apply's commit waits, and the page says so.
    std::fs::write(env.vault.join(".git/index.lock"), b"").unwrap();
    let (id, _) = one_proposal(&env).await;
    let applied = env.ok(&["apply", "--only", &id, "--yes"]);
    assert!(
        applied.contains(", git queued)"),
        "the CLI says the commit waits: {applied}"
    );
    let queued = vaults().await;
    assert!(queued.contains("data-queued=\"1\""), "{queued}");
    assert!(
        queued.contains("1 commit(s) queued") && queued.contains("index lock"),
        "{queued}"
    );
}

/// The Vaults page's PDF-text switch (docs/contract.md#notes-as-data-and-attachments): it shows the vault's setting, needs the CSRF
/// token like every form, is audited as the reviewer's, and the running server follows it at the
/// next call of an already open session, both ways.
#[tokio::test]
async fn the_vaults_page_switches_pdf_text_for_a_running_server() {
    let env = Env::new();
    std::fs::write(
        env.vault.join("z/paper.pdf"),
        include_bytes!("../../gateway/demo/vault/reading/papers/vaultgate-demo.pdf"),
    )
    .unwrap();
    let srv = Server::start(&env);
    let (_, token) = env.token("reader", "read");
    let agent = env.stdio(&token).await;
    let read = json!({"path": "z/paper.pdf", "pages": [1]});
    let denied = agent.call("read_attachment_text", read.clone()).await.code();
    assert_eq!(denied, "CAPABILITY_DENIED");

    let s = login(&env, &srv).await;
    let vaults = s.get(&srv, "/vaults").await;
    vaults.expect(200, "the Vaults page");
    assert!(vaults.body.contains("data-pdf-text=\"off\""), "{}", vaults.body);
    let path = s.page(&format!("/vaults/{VAULT}/pdf-text"));
    let cookie = s.cookie();
    let origin = same_origin(&srv);
    let headers = [("Cookie", cookie.as_str()), ("Origin", origin.as_str())];
    // Without the token: refused, nothing changed.
    post_form(&srv, &path, &headers, &[("on", "1")])
        .await
        .expect(403, "the switch without csrf");
    let still = agent.call("read_attachment_text", read.clone()).await.code();
    assert_eq!(
        still, "CAPABILITY_DENIED",
        "the refused switch changed the setting"
    );

    let csrf = vaults.csrf();
    let on = post_form(&srv, &path, &headers, &[("on", "1"), ("csrf", &csrf)]).await;
    on.expect(200, "turning PDF text on");
    assert!(
        open_tag(&on.body, "result").contains("data-outcome=\"ok\""),
        "{}",
        on.body
    );
    let text = agent.call("read_attachment_text", read.clone()).await.ok();
    assert!(
        text["pages"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Attention Is All You Need (demo copy)"),
        "{text}"
    );
    let shown = s.get(&srv, "/vaults").await;
    assert!(shown.body.contains("data-pdf-text=\"on\""), "{}", shown.body);
    let tail = env.ok(&["audit", "tail", "-n", "5", "--json"]);
    assert!(tail.contains("vault_pdf_text"), "not audited: {tail}");

    let off = post_form(&srv, &path, &headers, &[("on", "0"), ("csrf", &csrf)]).await;
    off.expect(200, "turning PDF text off");
    let again = agent.call("read_attachment_text", read).await.code();
    assert_eq!(again, "CAPABILITY_DENIED", "off did not take effect at once");
    agent.close().await;
}

/// docs/contract.md#the-review-page-and-in-client-approval: a changed line shows which words
/// changed, in both views, and a changed word is escaped like every other text.
#[tokio::test]
async fn a_changed_line_marks_its_changed_words_in_both_views() {
    let env = Env::new();
    let srv = Server::start(&env);
    let old = std::fs::read_to_string(env.vault.join(NOTE)).unwrap();
    let line = old
        .lines()
        .find(|l| l.split_whitespace().count() >= 4 && !l.starts_with(['#', '-']) && !l.contains(':'))
        .expect("a prose line")
        .to_owned();
    let last = line.split_whitespace().last().unwrap().to_owned();
    let changed = line.replacen(&last, "<b>bold</b>", 1);
    let (_, token) = env.token("agent", "propose");
    let c = env.stdio(&token).await;
    let (id, _) = propose(&c, &old.replacen(&line, &changed, 1), "one word").await;
    c.close().await;
    let s = login(&env, &srv).await;
    let page = s.get(&srv, &format!("/v/{VAULT}/p/{id}")).await;
    page.expect(200, "the patch's page");
    assert_inert("the patch's page", &page.body);
    let del = format!(
        "<del class=\"w\">{}</del>",
        last.replace('&', "&amp;").replace('<', "&lt;")
    );
    let ins = "<ins class=\"w\">&lt;b&gt;bold&lt;/b&gt;</ins>";
    // Once in the split view and once in the unified one.
    assert_eq!(page.body.matches(&del).count(), 2, "{del} in:\n{}", page.body);
    assert_eq!(page.body.matches(ins).count(), 2, "{ins} in:\n{}", page.body);
    // The words both lines share are not marked.
    let first = line.split_whitespace().next().unwrap();
    assert!(
        !page.body.contains(&format!("<del class=\"w\">{first}")),
        "{}",
        page.body
    );
}

/// A retargeted link reads as a link change on the review page and in `inbox show`.
#[tokio::test]
async fn a_retargeted_link_reads_as_a_link_change_on_the_page_and_the_terminal() {
    let env = Env::new();
    let srv = Server::start(&env);
    let old = std::fs::read_to_string(env.vault.join(NOTE)).unwrap();
    assert!(old.contains("[[softmax]]"));
    let new = old.replacen("[[softmax]]", "[[transformer]]", 1);
    let line = new.lines().position(|l| l.contains("[[transformer]]")).unwrap() + 1;
    let (_, token) = env.token("agent", "propose");
    let c = env.stdio(&token).await;
    let (id, _) = propose(&c, &new, "point at the transformer").await;
    c.close().await;
    let change = format!("[[softmax]] \u{2192} [[transformer]] (line {line})");

    let s = login(&env, &srv).await;
    let page = s.get(&srv, &format!("/v/{VAULT}/p/{id}")).await;
    page.expect(200, "the patch's page");
    let shown = element(&page.body, "ul", "link-changes");
    assert!(shown.contains(&change), "{change} not in:\n{shown}");

    let out = env.ok(&["inbox", "show", &id]);
    assert!(out.contains(&format!("  link: {change}")), "{out}");
}

/// Frontmatter changes read key by key on the review page and in `inbox show`.
#[tokio::test]
async fn frontmatter_changes_read_key_by_key_on_the_page_and_the_terminal() {
    let env = Env::new();
    let srv = Server::start(&env);
    let old = std::fs::read_to_string(env.vault.join(NOTE)).unwrap();
    assert!(old.contains("tags: [ml, transformer]\n") && old.contains("updated: 2026-01-04\n"));
    let new = old
        .replacen(
            "tags: [ml, transformer]\n",
            "tags: [ml, attention]\nstatus: done\n",
            1,
        )
        .replacen("updated: 2026-01-04\n", "updated: 2026-12-05\n", 1);
    let (_, token) = env.token("agent", "propose");
    let c = env.stdio(&token).await;
    let (id, _) = propose(&c, &new, "retag").await;
    c.close().await;
    let want = [
        "status: \u{2014} \u{2192} done",
        "tags: +attention \u{2212}transformer",
        "updated: 2026-01-04 \u{2192} 2026-12-05",
    ];

    let s = login(&env, &srv).await;
    let page = s.get(&srv, &format!("/v/{VAULT}/p/{id}")).await;
    page.expect(200, "the patch's page");
    let shown = element(&page.body, "ul", "field-changes");
    for w in want {
        assert!(shown.contains(w), "{w} not in:\n{shown}");
    }
    assert_eq!(shown.matches("<li>").count(), want.len(), "{shown}");

    let out = env.ok(&["inbox", "show", &id]);
    let fields: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix("  field: ")).collect();
    assert_eq!(fields, want, "{out}");
}

/// A move lists every note whose links it rewrites with each rewritten link, on the review page
/// and in `inbox show`.
#[tokio::test]
async fn a_move_lists_each_rewritten_link_on_the_page_and_the_terminal() {
    let env = Env::new();
    let srv = Server::start(&env);
    let (_, token) = env.token("agent", "propose");
    let c = env.stdio(&token).await;
    let p = c
        .call(
            "propose_move",
            json!({"from": "z/softmax.md", "to": "z/soft-max.md", "reason": "rename"}),
        )
        .await
        .ok();
    c.close().await;
    let id = p["id"].as_str().unwrap().to_owned();
    let line = std::fs::read_to_string(env.vault.join(NOTE))
        .unwrap()
        .lines()
        .position(|l| l.contains("[[softmax]]"))
        .unwrap()
        + 1;
    let change = format!("[[softmax]] \u{2192} [[soft-max]] (line {line})");

    let s = login(&env, &srv).await;
    let page = s.get(&srv, &format!("/v/{VAULT}/p/{id}")).await;
    page.expect(200, "the move's page");
    // Each rewritten note, then its links (the list nests one list per note).
    let shown = &page.body[page.body.find("id=\"link-rewrites\"").unwrap()..];
    let at = shown
        .find(&format!("<code>{NOTE}</code>"))
        .expect("the note is listed");
    assert!(
        shown[at..].contains(&change),
        "{change} not under {NOTE}:\n{shown}"
    );

    let out = env.ok(&["inbox", "show", &id]);
    let block: Vec<&str> = out
        .lines()
        .skip_while(|l| *l != format!("  rewrites {NOTE}:"))
        .skip(1)
        .take_while(|l| l.starts_with("    "))
        .collect();
    assert!(block.contains(&format!("    {change}").as_str()), "{out}");
}

/// docs/contract.md#team-mode: the review page of a team gateway lists the team's proposals from
/// its database (one made through another gateway included) and its apply is the team's: one
/// commit pushed to the vault's remote, recorded in the team's chain as the reviewer's.
#[tokio::test]
async fn a_team_gateways_review_page_applies_a_proposal_made_on_another_gateway_as_one_pushed_commit() {
    let (team, remote, _person) = crate::team_writes::team_with_vault(&["g1", "g2"]);
    let (_, token) = team.g(0).token("agent", "propose");
    let c = team.g(0).stdio(&token).await;
    let p = crate::util::call(
        &c,
        "propose_new_note",
        json!({"path": "reviewed/a.md", "content": "# Reviewed\n", "reason": "review it"}),
    )
    .await
    .ok();
    c.close().await;
    let id = p["id"].as_str().unwrap().to_owned();

    let srv = Server::start(team.g(1));
    let s = login(team.g(1), &srv).await;
    let inbox = s.get(&srv, "/v/notes/inbox").await;
    inbox.expect(200, "the team vault's inbox");
    assert!(
        inbox.body.contains(&id),
        "the proposal made on g1 is listed on g2: {}",
        inbox.body
    );
    let page = s.get(&srv, &format!("/v/notes/p/{id}")).await;
    page.expect(200, "the proposal page");
    let (csrf, hash) = (page.csrf(), hidden(&page.body, "proposalHash"));
    let before = crate::team_writes::head(&remote);
    let page = post_form(
        &srv,
        &format!("{}/v/notes/p/{id}/apply", s.base),
        &[("Cookie", &s.cookie()), ("Origin", &same_origin(&srv))],
        &[("csrf", &csrf), ("proposalHash", &hash)],
    )
    .await;
    page.expect(200, "the apply");
    let result = open_tag(&page.body, "result");
    assert!(result.contains("data-outcome=\"ok\""), "{result}");
    let head = crate::team_writes::head(&remote);
    assert_ne!(head, before);
    assert_eq!(
        crate::team::git(&remote, &["rev-parse", &format!("{head}^")]).trim(),
        before
    );
    assert!(crate::team_writes::message(&remote, &head).contains(&format!("Vaultgate-Proposal: {id}")));
    assert_eq!(
        crate::team::git(&remote, &["show", &format!("{head}:reviewed/a.md")]),
        "# Reviewed\n"
    );
    let chain = team.chain(0);
    assert!(
        chain.iter().any(|r| r["tool"] == json!("apply_proposal")
            && r["outcome"] == json!("ok")
            && r["gateway"] == json!("g2")
            && r["actor"].as_str().is_some_and(|a| a.starts_with("review:"))),
        "{chain:?}"
    );
}
