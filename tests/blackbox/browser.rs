//! Real-browser harness for the review page: `vaultgate serve` for an Env, a headless Chromium
//! driven through chromedriver (WebDriver, via fantoccini), and the one-time login link that
//! `vaultgate review` prints. The tests of the page itself are in `review_browser.rs`.
//!
//! The browser is required, never optional: without chromedriver the tests fail and say how to
//! install it (`.ci/run` does).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::{Client as WebDriver, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};

use crate::util::{Env, bin};

/// Every wait in the browser tests is bounded by this (a cold Chromium on a busy 2-core machine
/// takes seconds to start).
pub(crate) const WAIT: Duration = Duration::from_secs(30);

const POLL: Duration = Duration::from_millis(100);

/// A free loopback port: bound, read, released (a tiny race we accept in tests).
fn free_port() -> u16 {
    let l = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    l.local_addr().unwrap().port()
}

/// A minimal blocking `GET` on 127.0.0.1: the whole response (head and body), or `None`.
pub(crate) fn raw_get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    // chromedriver keeps the connection open whatever the request says: read up to Content-Length.
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(_) if buf.is_empty() => return None,
            Err(_) => break,
        }
        if complete(&buf) {
            break;
        }
    }
    Some(String::from_utf8_lossy(&buf).into_owned())
}

/// Whether a response's head is in and its body has the Content-Length it announces.
fn complete(buf: &[u8]) -> bool {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    head.lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .is_some_and(|len| buf.len() >= end + 4 + len)
}

/// The body of a raw response.
pub(crate) fn body_of(response: &str) -> &str {
    response.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

// ---- vaultgate serve ------------------------------------------------------------------------------

/// `vaultgate --home H serve --port P` for an Env, as a child process killed when dropped.
pub(crate) struct Serve {
    child: Child,
    pub(crate) port: u16,
    stderr: PathBuf,
}

impl Serve {
    /// Starts the server on a free 127.0.0.1 port and waits until `GET /healthz` answers 200.
    pub(crate) fn start(env: &Env) -> Serve {
        let port = free_port();
        let stderr = env.tmp.path().join(format!("serve-{port}.stderr"));
        let child = Command::new(bin())
            .arg("--home")
            .arg(&env.home)
            .arg("serve")
            .arg("--port")
            .arg(port.to_string())
            .env_remove("VAULTGATE_HOME")
            .env_remove("VAULTGATE_TOKEN")
            .env("USER", "tester")
            .env("VAULTGATE_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let mut s = Serve { child, port, stderr };
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = s.child.try_wait().unwrap() {
                panic!("vaultgate serve exited early ({status}): {}", s.stderr());
            }
            if raw_get(port, "/healthz").is_some_and(|r| r.starts_with("HTTP/1.1 200")) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "vaultgate serve did not answer /healthz within {WAIT:?}: {}",
                s.stderr()
            );
            std::thread::sleep(POLL);
        }
    }

    /// `http://127.0.0.1:P`.
    pub(crate) fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub(crate) fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// A fresh one-time login link: `vaultgate --home H review --port P` prints it on stdout, as
    /// the last whitespace-separated token of the first line that starts with `http`.
    pub(crate) fn login_link(&self, env: &Env) -> String {
        let out = env.ok(&["review", "--port", &self.port.to_string()]);
        let link = out
            .lines()
            .find(|l| l.trim_start().starts_with("http"))
            .and_then(|l| l.split_whitespace().last())
            .unwrap_or_else(|| panic!("`vaultgate review` printed no link line: {out:?}"))
            .to_owned();
        let prefix = format!("{}/review/login?code=", self.origin());
        assert!(
            link.starts_with(&prefix) && link.len() > prefix.len(),
            "the login link is not {prefix}<code>: {link:?} (stdout {out:?})"
        );
        link
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---- chromedriver + Chromium ---------------------------------------------------------------------

/// `CHROMEDRIVER`, else `/usr/bin/chromedriver`, else `chromedriver` on PATH; a missing driver
/// fails the test (it is never skipped).
fn chromedriver_path() -> PathBuf {
    if let Some(p) = std::env::var_os("CHROMEDRIVER").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "CHROMEDRIVER={} is not a file; unset it to use /usr/bin/chromedriver \
             (.ci/run installs the Debian packages `chromium` and `chromium-driver`)",
            p.display()
        );
        return p;
    }
    let default = Path::new("/usr/bin/chromedriver");
    if default.is_file() {
        return default.to_owned();
    }
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("chromedriver"))
            .find(|p| p.is_file())
    });
    on_path.unwrap_or_else(|| {
        panic!(
            "chromedriver not found (CHROMEDRIVER, /usr/bin/chromedriver, PATH): the review page's \
             browser tests need it. `.ci/run` installs it as root: apt-get install chromium \
             chromium-driver (Debian packages `chromium` and `chromium-driver`)"
        )
    })
}

/// `CHROMIUM`, else `/usr/bin/chromium`.
fn chromium_path() -> PathBuf {
    let p = std::env::var_os("CHROMIUM")
        .filter(|p| !p.is_empty())
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    assert!(
        p.is_file(),
        "Chromium not found at {} (set CHROMIUM): the review page's browser tests need it. \
         `.ci/run` installs the Debian packages `chromium` and `chromium-driver`",
        p.display()
    );
    p
}

/// chromedriver on a free port, in a process group of its own, so that dropping it also ends the
/// Chromium it started (even when a test panics before closing its session).
struct Driver {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Driver {
    fn start(dir: &Path) -> Driver {
        let exe = chromedriver_path();
        let port = free_port();
        let log = dir.join("chromedriver.log");
        let child = Command::new(&exe)
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", exe.display()));
        let mut d = Driver { child, port, log };
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = d.child.try_wait().unwrap() {
                panic!("chromedriver exited early ({status}): {}", d.log());
            }
            let ready = raw_get(port, "/status").is_some_and(|r| {
                serde_json::from_str::<Value>(body_of(&r))
                    .is_ok_and(|v| v["value"]["ready"] == Value::Bool(true))
            });
            if ready {
                return d;
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver was not ready within {WAIT:?}: {}",
                d.log()
            );
            std::thread::sleep(POLL);
        }
    }

    fn log(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(40).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The whole group: chromedriver and every Chromium process it started.
        let _ = Command::new("kill")
            .arg("-KILL")
            .arg("--")
            .arg(format!("-{}", self.child.id()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A headless Chromium session. Fields drop in order: the WebDriver client, then the driver
/// (and its browser), then the profile folder.
pub(crate) struct Browser {
    pub(crate) wd: WebDriver,
    driver: Driver,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Chromium with JavaScript on.
    pub(crate) async fn new() -> Browser {
        Browser::launch(false).await
    }

    /// Chromium with JavaScript off for every page (as a person who disabled it); checked on a
    /// page of its own before it is handed out.
    pub(crate) async fn without_javascript() -> Browser {
        let b = Browser::launch(true).await;
        assert!(
            !b.runs_page_scripts().await,
            "the JavaScript-disabled browser ran a page script"
        );
        b
    }

    async fn launch(no_javascript: bool) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let driver = Driver::start(profile.path());
        let mut options = json!({
            "args": [
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--window-size=1280,900",
                format!("--user-data-dir={}", profile.path().join("chromium").display()),
            ],
            "binary": chromium_path().display().to_string(),
        });
        if no_javascript {
            options["prefs"] = json!({"profile.managed_default_content_settings.javascript": 2});
        }
        let mut caps = serde_json::Map::new();
        caps.insert("browserName".into(), json!("chrome"));
        caps.insert("goog:chromeOptions".into(), options);
        let wd = tokio::time::timeout(
            WAIT,
            ClientBuilder::new(HttpConnector::new())
                .capabilities(caps)
                .connect(&format!("http://127.0.0.1:{}", driver.port)),
        )
        .await
        .unwrap_or_else(|_| panic!("no WebDriver session within {WAIT:?}: {}", driver.log()))
        .unwrap_or_else(|e| panic!("no WebDriver session ({e}): {}", driver.log()));
        Browser {
            wd,
            driver,
            _profile: profile,
        }
    }

    /// Whether a page's own `<script>` runs in this browser (a data: page, no server involved).
    pub(crate) async fn runs_page_scripts(&self) -> bool {
        self.goto(
            "data:text/html,<p id=probe>static</p>\
             <script>document.getElementById('probe').textContent='scripted'</script>",
        )
        .await;
        let text = self.text("#probe").await;
        assert!(
            text == "static" || text == "scripted",
            "probe page shows {text:?}"
        );
        text == "scripted"
    }

    /// Ends the WebDriver session (chromedriver closes Chromium); dropping does the rest.
    pub(crate) async fn close(self) {
        let _ = tokio::time::timeout(WAIT, self.wd.clone().close()).await;
    }

    pub(crate) async fn goto(&self, url: &str) {
        self.wd
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("cannot open {url}: {e}"));
    }

    pub(crate) async fn url(&self) -> String {
        self.wd.current_url().await.unwrap().to_string()
    }

    pub(crate) async fn source(&self) -> String {
        self.wd.source().await.unwrap()
    }

    pub(crate) async fn execute(&self, script: &str) -> Value {
        self.wd
            .execute(script, vec![])
            .await
            .unwrap_or_else(|e| panic!("script {script:?} failed: {e}"))
    }

    /// Where the browser is and what it shows, for failure messages.
    pub(crate) async fn describe(&self) -> String {
        let url = self.wd.current_url().await.map(|u| u.to_string());
        let src = self.wd.source().await.unwrap_or_default();
        let cut: String = src.chars().take(3000).collect();
        format!(
            "at {url:?}; page source (first 3000 chars):\n{cut}\nchromedriver log tail:\n{}",
            self.driver.log()
        )
    }

    /// The first element matching `css`, waiting up to `WAIT` for it to appear.
    pub(crate) async fn wait_for(&self, css: &str) -> Element {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Ok(e) = self.wd.find(Locator::Css(css)).await {
                return e;
            }
            if Instant::now() >= deadline {
                panic!("no element `{css}` within {WAIT:?}, {}", self.describe().await);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Every element matching `css` now (possibly none).
    pub(crate) async fn all(&self, css: &str) -> Vec<Element> {
        self.wd.find_all(Locator::Css(css)).await.unwrap()
    }

    /// The rendered text of the first element matching `css` (waited for).
    pub(crate) async fn text(&self, css: &str) -> String {
        self.wait_for(css).await.text().await.unwrap()
    }

    /// Waits for `css` and clicks it. Retried until `WAIT`: a live region (the inbox rows the page
    /// refreshes every 2 s) may replace the element between finding and clicking it.
    pub(crate) async fn click(&self, css: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            let err = match self.wd.find(Locator::Css(css)).await {
                Ok(e) => match e.click().await {
                    Ok(()) => return,
                    Err(err) => err.to_string(),
                },
                Err(err) => err.to_string(),
            };
            if Instant::now() >= deadline {
                panic!(
                    "cannot click `{css}` within {WAIT:?} ({err}), {}",
                    self.describe().await
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Polls until `document.readyState` is `complete` (images, failed ones too, are settled).
    pub(crate) async fn wait_loaded(&self) {
        let deadline = Instant::now() + WAIT;
        while self.execute("return document.readyState").await != json!("complete") {
            if Instant::now() >= deadline {
                panic!(
                    "the page did not finish loading within {WAIT:?}, {}",
                    self.describe().await
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

// ---- the harness itself ---------------------------------------------------------------------------

/// The browser reaches the running gateway: it shows exactly the body `/healthz` serves.
#[tokio::test]
async fn the_browser_opens_the_running_servers_healthz() {
    let env = Env::new();
    let srv = Serve::start(&env);
    let raw = raw_get(srv.port, "/healthz").expect("GET /healthz");
    let body = body_of(&raw).trim().to_owned();
    assert!(!body.is_empty(), "/healthz has a body: {raw:?}");
    let b = Browser::new().await;
    b.goto(&format!("{}/healthz", srv.origin())).await;
    let shown = b.text("body").await;
    assert_eq!(shown.trim(), body, "{}", b.describe().await);
    b.close().await;
}

/// The two browsers differ exactly in running page scripts.
#[tokio::test]
async fn only_the_javascript_disabled_browser_refuses_page_scripts() {
    let on = Browser::new().await;
    assert!(
        on.runs_page_scripts().await,
        "the default browser runs page scripts"
    );
    on.close().await;
    let off = Browser::without_javascript().await;
    assert!(!off.runs_page_scripts().await, "the other one does not");
    off.close().await;
}
