//! ChatGPT's Secure MCP Tunnel: `vaultgate tunnel setup`, `serve --tunnel` supervising OpenAI's
//! `tunnel-client`, `tunnel status`, and the review page's Tunnel page. The real client is replaced
//! by `tests/fake/tunnel-client` (same CLI shape; Python 3, standard library only), put on `PATH`
//! through a per-test bin folder so a test can make it appear later. The fake records its argv and
//! environment (`fake-run-<pid>.json`), forwards one MCP call to the gateway with the profile's
//! headers (`fake-forwarded.json`) and answers `health` from a control file (`fake-health.json`),
//! all in the profile directory `$XDG_CACHE_HOME/vaultgate/mcp-tunnel/<gateway_id>`.
//!
//! The API key must reach the child only as `CONTROL_PLANE_API_KEY`, and nothing of
//! `vaultgate serve`'s environment outside the allow-list may reach it at all.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reqwest::redirect::Policy;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::http::edit_config;
use crate::util::{Env, bin};

/// Every wait in this file is bounded by this.
const WAIT: Duration = Duration::from_secs(10);
const FAKE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake/tunnel-client");
const TUNNEL_ID: &str = "tunnel_0123456789abcdef0123456789abcdef";
const CREDENTIAL: &str = "chatgpt-tunnel";
const INSTALL: &str = "brew install openai/tools/tunnel-client";
const COOKIE: &str = "vg_review";

/// The only variables of `vaultgate serve`'s own environment that may reach the child.
const ALLOWED: [&str; 22] = [
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
    "path",
    "home",
    "lang",
    "lc_all",
    "tz",
    "tmpdir",
    "ssl_cert_file",
    "ssl_cert_dir",
    "https_proxy",
    "http_proxy",
    "no_proxy",
];
/// The variables vaultgate itself gives the child: the key, the header, and the mark by which a
/// later `serve` knows its orphan (`child.json`'s `mark`).
const GIVEN: [&str; 3] = [
    "CONTROL_PLANE_API_KEY",
    "VAULTGATE_TUNNEL_AUTHORIZATION",
    MARK_VAR,
];
/// The variable that marks a process as the child vaultgate started.
const MARK_VAR: &str = "VAULTGATE_TUNNEL_CHILD";

/// Set in `vaultgate serve`'s environment; none may reach the child (the last three must be
/// replaced by vaultgate's own values).
const HOSTILE: [(&str, &str); 8] = [
    ("LOG_HTTP_RAW_UNSAFE", "1"),
    ("OPENAI_API_KEY", "sk-should-not-pass"),
    ("MCP_EXTRA_HEADERS", "x"),
    ("CONTROL_PLANE_BASE_URL", "http://127.0.0.1:9/evil"),
    ("VAULTGATE_TOKEN", "vg-token-should-not-pass"),
    ("CONTROL_PLANE_API_KEY", "hostile-key-from-serve-env"),
    ("VAULTGATE_TUNNEL_AUTHORIZATION", "Bearer hostile-from-serve-env"),
    ("VAULTGATE_TUNNEL_CHILD", "hostile-mark-from-serve-env"),
];

// ---- processes ---------------------------------------------------------------------------------------

/// Whether `pid` is a live process (a zombie is not).
fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, Some('Z' | 'X') | None)
}

fn wait_gone(pid: u32, what: &str) {
    let deadline = Instant::now() + WAIT;
    while alive(pid) {
        assert!(
            Instant::now() < deadline,
            "{what}: pid {pid} still runs after {WAIT:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `/proc/<pid>/cmdline`, NULs shown as spaces.
fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// The start time of a process in clock ticks since boot (`/proc/<pid>/stat` field 22).
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(19)?.parse().ok()
}

/// A start time in ticks as Unix seconds.
fn ticks_to_unix(ticks: u64) -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let btime: f64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let hz: f64 = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0);
    btime + ticks as f64 / hz
}

/// `recorded` is how vaultgate wrote the start time of `was` (clock ticks, Unix seconds or Unix
/// milliseconds, as a number or a string of digits); the same for `now`'s start time, so a forged
/// record differs from a genuine one in nothing but the process it names. An unrecognised
/// format is kept as is.
fn same_format_start_time(recorded: &Value, was: u64, now: u64) -> Value {
    let (r, as_string) = match recorded {
        Value::Number(n) => (n.as_f64().unwrap(), false),
        Value::String(s) => match s.parse::<f64>() {
            Ok(r) => (r, true),
            Err(_) => return recorded.clone(),
        },
        _ => return recorded.clone(),
    };
    let integral = recorded.as_u64().is_some() || (as_string && !recorded.as_str().unwrap().contains('.'));
    let candidates = [
        (was as f64, now as f64, 0.5),
        (ticks_to_unix(was), ticks_to_unix(now), 5.0),
        (ticks_to_unix(was) * 1000.0, ticks_to_unix(now) * 1000.0, 5000.0),
    ];
    for (w, n, tolerance) in candidates {
        if (r - w).abs() <= tolerance {
            // Keep vaultgate's own offset from the process's start.
            let v = n + (r - w);
            return match (as_string, integral) {
                (true, true) => json!(format!("{}", v.round() as u64)),
                (true, false) => json!(format!("{v}")),
                (false, true) => json!(v.round() as u64),
                (false, false) => json!(v),
            };
        }
    }
    recorded.clone()
}

fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A minimal blocking `GET`: the whole response, or `None`.
fn raw_get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

// ---- the fixture -------------------------------------------------------------------------------------

/// A home with the `basic` vault, a bin folder first on `PATH` (holding the fake or not), a
/// `HOME` and an `XDG_CACHE_HOME` inside the temporary folder, and an API key.
struct Tunnel {
    env: Env,
    bin: PathBuf,
    path: String,
    user_home: PathBuf,
    /// `XDG_CACHE_HOME`, or `None` to leave it unset (the cache is then `$HOME/.cache`).
    cache: Option<PathBuf>,
    key: String,
}

impl Tunnel {
    fn new(with_fake: bool) -> Tunnel {
        Tunnel::with_cache(with_fake, true)
    }

    fn with_cache(with_fake: bool, xdg: bool) -> Tunnel {
        let env = Env::new();
        let root = env.tmp.path().canonicalize().unwrap();
        let bin = root.join("bin");
        let user_home = root.join("user");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&user_home).unwrap();
        let cache = xdg.then(|| root.join("cache"));
        // The fake's `#!/usr/bin/env python3` needs python3 on the child's PATH; nothing there
        // may be a real tunnel-client.
        let python = python_dir();
        let others = [python, PathBuf::from("/usr/bin"), PathBuf::from("/bin")];
        for d in &others {
            assert!(
                !d.join("tunnel-client").exists(),
                "a real tunnel-client in {} spoils these tests",
                d.display()
            );
        }
        let path = std::env::join_paths(std::iter::once(bin.clone()).chain(others))
            .unwrap()
            .into_string()
            .unwrap();
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
        let seed = format!("{}{nanos}", root.display());
        let key = format!("sk-tunnel_{}", hex::encode(Sha256::digest(seed.as_bytes())));
        let t = Tunnel {
            env,
            bin,
            path,
            user_home,
            cache,
            key,
        };
        if with_fake {
            t.install_fake();
        }
        t
    }

    /// Where the fake goes: the first folder of `PATH`.
    fn client_path(&self) -> PathBuf {
        self.bin.join("tunnel-client")
    }

    /// Copies the fake into the bin folder (a copy, so its canonical path is this one).
    fn install_fake(&self) {
        std::fs::copy(FAKE, self.client_path()).unwrap();
        std::fs::set_permissions(self.client_path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// `vaultgate --home H ARGS` with this fixture's PATH, HOME and cache; no VAULTGATE_* from
    /// the test process.
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin());
        cmd.arg("--home")
            .arg(&self.env.home)
            .args(args)
            .env_remove("VAULTGATE_HOME")
            .env_remove("VAULTGATE_TOKEN")
            .env("USER", "tester")
            .env("PATH", &self.path)
            .env("HOME", &self.user_home);
        match &self.cache {
            Some(c) => cmd.env("XDG_CACHE_HOME", c),
            None => cmd.env_remove("XDG_CACHE_HOME"),
        };
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        let out = self.command(args).stdin(Stdio::null()).output().unwrap();
        self.assert_no_key(
            &String::from_utf8_lossy(&out.stdout),
            &format!("stdout of {args:?}"),
        );
        self.assert_no_key(
            &String::from_utf8_lossy(&out.stderr),
            &format!("stderr of {args:?}"),
        );
        out
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "vaultgate {args:?} failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn assert_no_key(&self, text: &str, what: &str) {
        assert!(!text.contains(&self.key), "the API key is in {what}: {text}");
    }

    /// Writes `content` to a key file outside the home and returns its path.
    fn key_file(&self, name: &str, content: &str) -> PathBuf {
        let f = self.env.tmp.path().join(name);
        std::fs::write(&f, content).unwrap();
        f
    }

    /// `vaultgate tunnel setup --tunnel-id TUNNEL_ID --api-key-file F EXTRA…` with this
    /// fixture's key (padded with whitespace, which setup trims); the key file is deleted after.
    fn setup(&self, extra: &[&str]) -> Output {
        let f = self.key_file("api-key", &format!("  {}\n\n", self.key));
        let mut args = vec![
            "tunnel",
            "setup",
            "--tunnel-id",
            TUNNEL_ID,
            "--api-key-file",
            f.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let out = self.run(&args);
        std::fs::remove_file(&f).unwrap();
        out
    }

    fn setup_ok(&self, extra: &[&str]) {
        let out = self.setup(extra);
        assert!(
            out.status.success(),
            "tunnel setup {extra:?} failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        // A configuration change like any other: the engine wrote it, and it is on record.
        let last = crate::util::audit_lines(&self.env)
            .into_iter()
            .rev()
            .find(|r| r["tool"] == "tunnel_setup")
            .expect("tunnel setup is audited");
        assert_eq!(
            (&last["outcome"], &last["event"]),
            (&json!("ok"), &json!("cli")),
            "{last}"
        );
        assert_eq!(self.config()["tunnel"]["tunnel_id"].as_str(), Some(TUNNEL_ID));
        assert!(
            !last.to_string().contains(&self.key),
            "the API key is on record: {last}"
        );
    }

    fn config(&self) -> toml::Table {
        toml::from_str(&std::fs::read_to_string(self.env.home.join("gateway.toml")).unwrap()).unwrap()
    }

    fn profile_dir(&self) -> PathBuf {
        let gateway_id = self.config()["gateway_id"].as_str().unwrap().to_owned();
        let cache = self
            .cache
            .clone()
            .unwrap_or_else(|| self.user_home.join(".cache"));
        cache.join("vaultgate/mcp-tunnel").join(gateway_id)
    }

    /// `tunnel status --json`, which exits 0 in every phase and never shows the key.
    fn status(&self) -> Value {
        let out = self.ok(&["tunnel", "status", "--json"]);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("tunnel status --json: {e}: {out}"))
    }

    /// Polls `tunnel status --json` until its phase is `phase`.
    fn wait_phase(&self, phase: &str, what: &str) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let s = self.status();
            if s["phase"] == phase {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: phase not {phase} within {WAIT:?}: {s}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Writes the fake's control file: whether its control plane poll succeeds.
    fn set_poll_ok(&self, ok: bool) {
        let dir = self.profile_dir();
        let tmp = dir.join("fake-health.json.tmp");
        std::fs::write(&tmp, json!({ "poll_ok": ok }).to_string()).unwrap();
        std::fs::rename(&tmp, dir.join("fake-health.json")).unwrap();
    }

    /// Every `fake-run-<pid>.json` the fake wrote, oldest first.
    fn runs(&self) -> Vec<Value> {
        let Ok(dir) = std::fs::read_dir(self.profile_dir()) else {
            return Vec::new();
        };
        let mut runs: Vec<Value> = dir
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("fake-run-") && n.ends_with(".json"))
            })
            .map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
            .collect();
        runs.sort_by(|a, b| {
            a["startedAt"]
                .as_f64()
                .partial_cmp(&b["startedAt"].as_f64())
                .unwrap()
        });
        runs
    }

    /// Waits for a start of the fake by a pid not in `known`; returns its record.
    fn wait_new_run(&self, known: &[u32], what: &str) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(r) = self.runs().into_iter().find(|r| !known.contains(&run_pid(r))) {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: no new tunnel-client start within {WAIT:?}; status {}",
                self.status()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The live (unrevoked) credentials whose name starts with `chatgpt-tunnel`, and all of them.
    fn tunnel_credentials(&self) -> (Vec<Value>, Vec<Value>) {
        let list: Value = serde_json::from_str(&self.ok(&["token", "list", "--json"])).unwrap();
        let all: Vec<Value> = list
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["name"].as_str().unwrap().starts_with(CREDENTIAL))
            .cloned()
            .collect();
        let live = all.iter().filter(|c| c["revoked"] != true).cloned().collect();
        (live, all)
    }

    /// The one live `chatgpt-tunnel` credential.
    fn live_credential(&self) -> Value {
        let (live, all) = self.tunnel_credentials();
        assert_eq!(live.len(), 1, "one live tunnel credential: {all:?}");
        // SECURITY(T-TUNNEL3): no in-client approval unless setup asks for it (the card's click;
        // ChatGPT declares no elicitation, whose wait would outlast the tunnel's 30 s).
        assert_eq!(live[0]["approveInClient"], false, "{all:?}");
        assert_eq!(live[0]["name"], CREDENTIAL, "{all:?}");
        live[0].clone()
    }

    /// `vaultgate serve --port P ARGS` with this fixture's environment plus `extra`.
    fn serve(&self, args: &[&str], extra: &[(&str, &str)]) -> Server {
        self.serve_with_umask(None, args, extra)
    }

    /// As [`Tunnel::serve`], started through `sh -c 'umask U; exec …'` when `umask` is given.
    fn serve_with_umask(&self, umask: Option<&str>, args: &[&str], extra: &[(&str, &str)]) -> Server {
        let port = free_port();
        let stderr = self.env.tmp.path().join(format!("serve-{port}.stderr"));
        let direct = self.command(&["serve", "--port", &port.to_string()]);
        let mut cmd = match umask {
            None => direct,
            Some(u) => {
                let mut sh = Command::new("sh");
                sh.args(["-c", "umask \"$0\" && exec \"$@\"", u])
                    .arg(direct.get_program())
                    .args(direct.get_args());
                for (k, v) in direct.get_envs() {
                    match v {
                        Some(v) => sh.env(k, v),
                        None => sh.env_remove(k),
                    };
                }
                sh
            }
        };
        cmd.args(args)
            .envs(extra.iter().copied())
            .env("VAULTGATE_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap());
        let mut s = Server {
            child: cmd.spawn().unwrap(),
            port,
            stderr,
        };
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
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A test that fails half-way leaves no fake running (the fake also ends itself once the
/// temporary folder is gone).
impl Drop for Tunnel {
    fn drop(&mut self) {
        // Best effort, never a panic (this may run while one unwinds).
        let Ok(text) = std::fs::read_to_string(self.env.home.join("gateway.toml")) else {
            return;
        };
        let Some(gateway_id) = text
            .parse::<toml::Table>()
            .ok()
            .and_then(|t| t.get("gateway_id").and_then(|g| g.as_str().map(str::to_owned)))
        else {
            return;
        };
        let cache = self
            .cache
            .clone()
            .unwrap_or_else(|| self.user_home.join(".cache"));
        let Ok(dir) = std::fs::read_dir(cache.join("vaultgate/mcp-tunnel").join(gateway_id)) else {
            return;
        };
        let client = self.client_path().to_string_lossy().into_owned();
        for name in dir.filter_map(|e| e.ok()?.file_name().into_string().ok()) {
            let Some(pid) = name
                .strip_prefix("fake-run-")
                .and_then(|n| n.strip_suffix(".json"))
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if alive(pid) && cmdline(pid).contains(&client) {
                let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
            }
        }
    }
}

/// The folder of the interpreter `python3` really is: a version manager's shim (pyenv) would
/// re-export its own variables into the fake's environment.
fn python_dir() -> PathBuf {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 runs");
    assert!(out.status.success(), "python3: {out:?}");
    let exe = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    let dir = exe.parent().expect("sys.executable has a folder").to_owned();
    assert!(dir.join("python3").is_file(), "no python3 in {}", dir.display());
    dir
}

fn run_pid(run: &Value) -> u32 {
    u32::try_from(run["pid"].as_u64().unwrap()).unwrap()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// `vaultgate serve` as a child process; SIGKILLed when dropped.
struct Server {
    child: Child,
    port: u16,
    stderr: PathBuf,
}

impl Server {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Sends SIGTERM and waits for the server to exit.
    fn terminate(&mut self) {
        let sent = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -TERM {}", self.pid());
        let deadline = Instant::now() + WAIT;
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "vaultgate serve still runs {WAIT:?} after SIGTERM: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL: the server gets no chance to clean up.
    fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Ends a process this test started outside the fixture (`sleep`), or an orphaned fake, on drop.
struct KillOnDrop(Vec<u32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for pid in &self.0 {
            if alive(*pid) {
                let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
            }
        }
    }
}

// ---- the review page ---------------------------------------------------------------------------------

fn web() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .timeout(WAIT)
        .build()
        .unwrap()
}

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

/// The value of the first form field `name="NAME" value="…"` in an HTML page.
fn hidden(body: &str, name: &str) -> String {
    let needle = format!("name=\"{name}\" value=\"");
    let at = body
        .find(&needle)
        .unwrap_or_else(|| panic!("no {needle}…\" in the page: {body}"))
        + needle.len();
    body[at..at + body[at..].find('"').unwrap()].to_owned()
}

/// The opening tag of the element with `id="ID"`.
fn open_tag(body: &str, id: &str) -> String {
    let open = format!("id=\"{id}\"");
    let at = body
        .find(&open)
        .unwrap_or_else(|| panic!("no element {open} in the page: {body}"));
    let start = body[..at].rfind('<').unwrap();
    let end = at + body[at..].find('>').unwrap() + 1;
    body[start..end].to_owned()
}

/// A logged-in review session: B = `/review/s/<sp>` and the cookie.
struct Review {
    base: String,
    cookie: String,
}

impl Review {
    /// Logs in with the link `vaultgate review` prints.
    async fn login(t: &Tunnel, srv: &Server) -> Review {
        let out = t.ok(&["review"]);
        let link = out
            .split_whitespace()
            .find(|w| w.starts_with("http://") && w.contains("/review/login?code="))
            .unwrap_or_else(|| panic!("no login link in `vaultgate review`'s output: {out}"));
        let path = link.strip_prefix(&srv.base()).unwrap_or_else(|| panic!("{link}"));
        let resp = web().get(format!("{}{path}", srv.base())).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 303, "a fresh login code");
        let location = resp.headers()["location"].to_str().unwrap().to_owned();
        let base = location.strip_suffix('/').unwrap_or(&location).to_owned();
        assert!(base.starts_with("/review/s/"), "{location}");
        let cookie = resp
            .headers()
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap())
            .find_map(|c| {
                c.split(';')
                    .next()
                    .filter(|kv| kv.starts_with(&format!("{COOKIE}=")))
            })
            .expect("a session cookie")
            .to_owned();
        Review { base, cookie }
    }

    /// `GET B/tunnel`: the page, which never shows the key.
    async fn tunnel_page(&self, t: &Tunnel, srv: &Server) -> String {
        let resp = web()
            .get(format!("{}{}/tunnel", srv.base(), self.base))
            .header("Cookie", &self.cookie)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let body = resp.text().await.unwrap();
        assert_eq!(status, 200, "GET {}/tunnel: {body}", self.base);
        t.assert_no_key(&body, "the review Tunnel page");
        body
    }

    /// Posts the Start (`start`) or Stop (`stop`) form of the Tunnel page.
    async fn press(&self, t: &Tunnel, srv: &Server, action: &str) {
        let page = self.tunnel_page(t, srv).await;
        assert!(
            page.contains(&format!("tunnel/{action}")),
            "no {action} form: {page}"
        );
        let csrf = hidden(&page, "csrf");
        let resp = web()
            .post(format!("{}{}/tunnel/{action}", srv.base(), self.base))
            .header("Cookie", &self.cookie)
            .header("Origin", srv.base())
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(format!("csrf={}", enc(&csrf)))
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let body = resp.text().await.unwrap();
        assert!(
            (200..400).contains(&status),
            "POST {}/tunnel/{action}: HTTP {status}: {body}",
            self.base
        );
        t.assert_no_key(&body, "the answer to a Tunnel form");
    }
}

/// The phase the Tunnel page shows.
fn page_phase(page: &str) -> String {
    let tag = open_tag(page, "tunnel-phase");
    let at = tag
        .find("data-phase=\"")
        .unwrap_or_else(|| panic!("no data-phase in {tag}"))
        + "data-phase=\"".len();
    tag[at..at + tag[at..].find('"').unwrap()].to_owned()
}

fn has_disabled(tag: &str) -> bool {
    tag.trim_end_matches(['>', '/'])
        .split_whitespace()
        .any(|a| a == "disabled" || a.starts_with("disabled="))
}

// ---- 1. connected through the fake: environment, secrets, the forwarded call ---------------------------

#[tokio::test]
async fn serve_tunnel_is_starting_until_the_control_plane_polls_then_connected() {
    let t = Tunnel::new(true);
    t.setup_ok(&[]);
    let key_path = t.env.home.join("tunnel.key");
    assert_eq!(mode(&key_path), 0o600, "tunnel.key is 0600");
    assert_eq!(std::fs::read_to_string(&key_path).unwrap().trim(), t.key);
    let gateway_toml = std::fs::read_to_string(t.env.home.join("gateway.toml")).unwrap();
    t.assert_no_key(&gateway_toml, "gateway.toml");
    let tunnel = t.config()["tunnel"].as_table().expect("[tunnel]").clone();
    assert_eq!(tunnel["tunnel_id"].as_str(), Some(TUNNEL_ID), "{tunnel:?}");
    assert_eq!(
        tunnel["command"].as_str().map(PathBuf::from),
        Some(t.client_path()),
        "setup stores the tunnel-client it found on PATH: {tunnel:?}"
    );
    let cred = t.live_credential();
    assert_eq!(cred["tier"], "auto", "{cred}");

    let mut srv = t.serve(&["--tunnel"], &HOSTILE);
    let run = t.wait_new_run(&[], "serve --tunnel");
    let pid = run_pid(&run);
    let dir = t.profile_dir();
    assert_eq!(mode(&dir), 0o700, "the profile directory is 0700");

    // Starting while the control plane has not polled, for a few seconds.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let s = t.status();
        assert_eq!(s["phase"], "starting", "no control plane poll yet: {s}");
        assert_eq!(s["pid"], json!(pid), "{s}");
        std::thread::sleep(Duration::from_millis(300));
    }
    let s = t.status();
    assert_eq!(s["phase"], "starting", "{s}");
    assert_eq!(
        s["health"]["control_plane_poll"]["ok"], false,
        "the last health result is shown: {s}"
    );
    let checks = std::fs::read_to_string(dir.join("fake-health-calls.log")).unwrap_or_default();
    assert!(
        checks.lines().count() >= 2,
        "health is checked about every second while starting: {checks:?}"
    );

    t.set_poll_ok(true);
    let s = t.wait_phase("connected", "after the first control plane poll");
    assert_eq!(s["pid"], json!(pid), "{s}");
    assert_eq!(s["health"]["control_plane_poll"]["ok"], true, "{s}");
    assert_eq!(s["health"]["result"], "ok", "{s}");
    assert_eq!(
        s["command"].as_str().map(PathBuf::from),
        Some(t.client_path()),
        "{s}"
    );
    let text = t.ok(&["tunnel", "status"]);
    assert!(
        text.lines().any(|l| l.trim() == "phase: connected"),
        "text status: {text}"
    );

    // How the child was started: argv, the profile, the environment.
    let profile = dir.join("profile.yaml");
    let argv: Vec<String> = serde_json::from_value(run["argv"].clone()).unwrap();
    assert_eq!(
        argv,
        [
            t.client_path().to_str().unwrap(),
            "run",
            "--config",
            profile.to_str().unwrap()
        ],
        "the child's argv"
    );
    let config = &run["config"];
    assert_eq!(config["config_version"], 1, "{config}");
    assert_eq!(config["control_plane"]["tunnel_id"], TUNNEL_ID, "{config}");
    assert_eq!(
        config["control_plane"]["api_key"], "env:CONTROL_PLANE_API_KEY",
        "{config}"
    );
    assert_eq!(
        config["health"]["url_file"],
        dir.join("health.url").to_str().unwrap(),
        "{config}"
    );
    assert_eq!(
        config["process"]["pid_file"],
        dir.join("tunnel-client.pid").to_str().unwrap(),
        "{config}"
    );
    assert_eq!(
        config["mcp"]["server_urls"][0]["url"],
        format!("{}/mcp", srv.base()),
        "{config}"
    );
    assert_eq!(
        config["mcp"]["extra_headers"]["Authorization"], "env:VAULTGATE_TUNNEL_AUTHORIZATION",
        "{config}"
    );
    t.assert_no_key(&std::fs::read_to_string(&profile).unwrap(), "profile.yaml");

    let child_env = run["env"].as_object().unwrap();
    assert_eq!(
        child_env["CONTROL_PLANE_API_KEY"],
        t.key.as_str(),
        "the key from tunnel.key"
    );
    let auth = child_env["VAULTGATE_TUNNEL_AUTHORIZATION"].as_str().unwrap();
    assert!(
        auth.starts_with("Bearer ") && auth.len() > "Bearer ".len() && !auth.contains("hostile"),
        "{auth}"
    );
    assert_eq!(child_env["PATH"], t.path.as_str(), "PATH passes");
    for (k, _) in &HOSTILE[..5] {
        assert!(
            !child_env.contains_key(*k),
            "{k} reached the child: {child_env:?}"
        );
    }
    let foreign: BTreeSet<&String> = child_env
        .keys()
        .filter(|k| !ALLOWED.contains(&k.as_str()) && !GIVEN.contains(&k.as_str()))
        .collect();
    assert!(foreign.is_empty(), "outside the allow-list: {foreign:?}");

    // The key is in no argv.
    for (what, args) in [
        ("the child's /proc cmdline", cmdline(pid)),
        ("serve's /proc cmdline", cmdline(srv.pid())),
        ("the child's recorded argv", argv.join(" ")),
    ] {
        assert!(!args.is_empty(), "{what} is empty");
        t.assert_no_key(&args, what);
    }

    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("child.json")).expect("child.json")).unwrap();
    assert_eq!(record["pid"], json!(pid), "{record}");
    assert!(
        record["exe"].as_str().is_some_and(|e| !e.is_empty()) && !record["startTime"].is_null(),
        "{record}"
    );
    // The record names the program vaultgate ran (the fake is a script: its interpreter is the
    // executable), when the child started, and the mark in the child's environment (not the one
    // in serve's).
    {
        use std::os::unix::fs::MetadataExt;
        let client = std::fs::metadata(t.client_path()).unwrap();
        let mut want = json!({
            "pid": pid,
            "exe": t.client_path(),
            "exeDev": client.dev(),
            "exeIno": client.ino(),
            "startTime": start_ticks(pid).unwrap(),
        });
        want["mark"] = record["mark"].clone();
        assert_eq!(record, want);
    }
    assert_eq!(child_env[MARK_VAR], record["mark"], "{record}");
    assert!(record["mark"].as_str().is_some_and(|m| m.len() >= 32), "{record}");
    assert_eq!(mode(&dir.join("child.json")), 0o600, "child.json is 0600");

    // The fake's one forwarded MCP call went through as chatgpt-tunnel.
    let forwarded = dir.join("fake-forwarded.json");
    let deadline = Instant::now() + WAIT;
    while !forwarded.exists() {
        assert!(
            Instant::now() < deadline,
            "the fake forwarded no call within {WAIT:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let fwd: Value = serde_json::from_str(&std::fs::read_to_string(&forwarded).unwrap()).unwrap();
    assert_eq!(fwd["ok"], true, "the forwarded vault_list: {fwd}");
    let vaults = fwd["result"]["structuredContent"]["vaults"].as_array().unwrap();
    assert!(vaults.iter().any(|v| v["id"] == "basic"), "{fwd}");
    let audit = std::fs::read_to_string(t.env.home.join("audit.jsonl")).unwrap();
    let calls: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["event"] == "tool_call" && r["tool"] == "vault_list")
        .collect();
    assert!(
        calls.iter().any(|r| r["actor"]["name"] == CREDENTIAL
            && r["actor"]["transport"] == "http"
            && r["actor"]["credentialId"] == cred["id"]
            && r["outcome"] == "ok"),
        "a vault_list tool_call by {CREDENTIAL} over http: {calls:?}"
    );
    t.assert_no_key(&audit, "audit.jsonl");

    // No OAuth discovery, even for a valid bearer.
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-authorization-server",
    ] {
        for bearer in [None, Some(auth)] {
            let mut req = web().get(format!("{}{path}", srv.base()));
            if let Some(b) = bearer {
                req = req.header("Authorization", b);
            }
            let status = req.send().await.unwrap().status().as_u16();
            assert_eq!(status, 404, "GET {path} (bearer: {})", bearer.is_some());
        }
    }

    // The review page shows the phase and both forms, never the key.
    let review = Review::login(&t, &srv).await;
    let page = review.tunnel_page(&t, &srv).await;
    assert_eq!(page_phase(&page), "connected", "{page}");
    assert!(!has_disabled(&open_tag(&page, "tunnel-start")), "{page}");
    open_tag(&page, "tunnel-stop");

    // Ending serve ends the child; nothing it logged holds the key.
    srv.terminate();
    wait_gone(pid, "after SIGTERM to serve");
    t.assert_no_key(&srv.stderr(), "serve's stderr");
    t.assert_no_key(
        &std::fs::read_to_string(t.env.home.join("audit.jsonl")).unwrap(),
        "audit.jsonl",
    );
    let s = t.status();
    assert_eq!(s["phase"], "stopped", "no serve, no child: {s}");
    assert_eq!(s["pid"], Value::Null, "{s}");
}

// ---- 2. Stop and Start on the review page, the cache under $HOME --------------------------------------

#[tokio::test]
async fn review_stop_ends_the_child_start_starts_a_new_one_and_serve_ending_ends_it() {
    // No XDG_CACHE_HOME: the profile lives under $HOME/.cache.
    let t = Tunnel::with_cache(true, false);
    t.setup_ok(&[]);
    let mut srv = t.serve(&["--tunnel"], &[]);
    let first = run_pid(&t.wait_new_run(&[], "serve --tunnel"));
    assert!(
        t.user_home.join(".cache/vaultgate/mcp-tunnel").is_dir(),
        "the profile is under $HOME/.cache without XDG_CACHE_HOME"
    );
    t.set_poll_ok(true);
    t.wait_phase("connected", "serve --tunnel");

    let review = Review::login(&t, &srv).await;
    review.press(&t, &srv, "stop").await;
    wait_gone(first, "after Stop on the review page");
    let s = t.wait_phase("stopped", "after Stop");
    assert_eq!(s["pid"], Value::Null, "{s}");
    assert_eq!(page_phase(&review.tunnel_page(&t, &srv).await), "stopped");
    assert!(
        srv.child.try_wait().unwrap().is_none(),
        "Stop ends the tunnel, not serve"
    );

    review.press(&t, &srv, "start").await;
    let second = run_pid(&t.wait_new_run(&[first], "after Start on the review page"));
    assert!(alive(second), "the new child runs");
    let s = t.wait_phase("connected", "after Start");
    assert_eq!(s["pid"], json!(second), "{s}");

    srv.terminate();
    wait_gone(second, "after SIGTERM to serve");
}

// ---- 3. an orphan of a SIGKILLed serve, and a pid that is no longer ours ------------------------------

#[tokio::test]
async fn the_next_serve_ends_the_orphan_of_a_killed_serve_but_not_a_stranger_with_its_pid() {
    let t = Tunnel::new(true);
    t.setup_ok(&[]);
    let dir = t.profile_dir();
    let mut a = t.serve(&["--tunnel"], &[]);
    let orphan = run_pid(&t.wait_new_run(&[], "the first serve --tunnel"));
    let mut cleanup = KillOnDrop(vec![orphan]);
    let deadline = Instant::now() + WAIT;
    while !dir.join("child.json").exists() {
        assert!(Instant::now() < deadline, "no child.json within {WAIT:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    a.kill();
    std::thread::sleep(Duration::from_millis(500));
    assert!(alive(orphan), "SIGKILL gives serve no chance to end its child");
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("child.json")).unwrap()).unwrap();
    assert_eq!(record["pid"], json!(orphan), "{record}");
    let orphan_start = start_ticks(orphan).unwrap();

    let mut b = t.serve(&["--tunnel"], &[]);
    wait_gone(orphan, "the next serve --tunnel ends the orphan");
    let second = run_pid(&t.wait_new_run(&[orphan], "the second serve --tunnel"));
    cleanup.0.push(second);
    assert!(alive(second));
    b.terminate();
    wait_gone(second, "after SIGTERM to serve");

    // A stranger now has the recorded pid: same record, another program. Started by
    // `[tunnel] autostart` this time.
    let mut stranger = Command::new("sleep").arg("300").spawn().unwrap();
    cleanup.0.push(stranger.id());
    let mut forged = record.clone();
    forged["pid"] = json!(stranger.id());
    forged["startTime"] = same_format_start_time(
        &record["startTime"],
        orphan_start,
        start_ticks(stranger.id()).unwrap(),
    );
    // Planted as vaultgate writes it (the user's own, 0600): only the process check refuses it.
    write_mode(&dir.join("child.json"), &forged.to_string(), 0o600);
    edit_config(&t.env, "tunnel", |tunnel| {
        tunnel.insert("autostart".into(), toml::Value::Boolean(true));
    });
    let c = t.serve(&[], &[]);
    let third = run_pid(&t.wait_new_run(&[orphan, second], "serve with [tunnel] autostart"));
    cleanup.0.push(third);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        stranger.try_wait().unwrap().is_none(),
        "a pid that runs another program is never killed: {forged}"
    );
    drop(c);
    let _ = stranger.kill();
    let _ = stranger.wait();
}

// ---- 4. no tunnel-client, then one appears ------------------------------------------------------------

#[tokio::test]
async fn status_is_missing_with_the_install_command_until_tunnel_client_appears_on_path() {
    let t = Tunnel::new(false);
    t.setup_ok(&[]);
    let tunnel = t.config()["tunnel"].as_table().expect("[tunnel]").clone();
    assert!(
        !tunnel.contains_key("command"),
        "nothing found, nothing stored: {tunnel:?}"
    );

    let s = t.status();
    assert_eq!(s["phase"], "missing", "{s}");
    assert_eq!(s["pid"], Value::Null, "{s}");
    assert_eq!(s["command"], Value::Null, "{s}");
    assert!(s["install"].as_str().is_some_and(|i| i.contains(INSTALL)), "{s}");
    let text = t.ok(&["tunnel", "status"]);
    assert!(text.lines().any(|l| l.trim() == "phase: missing"), "{text}");
    // doctor: set up but not installed is a failure with its next step.
    let doctor = t.run(&["doctor"]);
    let report = String::from_utf8_lossy(&doctor.stdout).into_owned();
    assert_eq!(doctor.status.code(), Some(1), "{report}");
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("fail") && l.contains("tunnel-client") && l.contains(INSTALL)),
        "{report}"
    );

    let mut srv = t.serve(&[], &[]);
    let review = Review::login(&t, &srv).await;
    let page = review.tunnel_page(&t, &srv).await;
    assert_eq!(page_phase(&page), "missing", "{page}");
    assert!(
        has_disabled(&open_tag(&page, "tunnel-start")),
        "Start is disabled: {page}"
    );
    assert!(
        page.contains(INSTALL),
        "the page shows the install command: {page}"
    );

    // The same PATH, now with a tunnel-client: found on the next call, nothing restarted.
    t.install_fake();
    let s = t.status();
    assert_eq!(s["phase"], "stopped", "{s}");
    assert_eq!(
        s["command"].as_str().map(PathBuf::from),
        Some(t.client_path()),
        "{s}"
    );
    assert_eq!(s["pid"], Value::Null, "{s}");
    let text = t.ok(&["tunnel", "status"]);
    assert!(text.lines().any(|l| l.trim() == "phase: stopped"), "{text}");
    let report = t.ok(&["doctor"]);
    let line = format!("tunnel-client: {}", t.client_path().display());
    assert!(
        report.lines().any(|l| l.starts_with("ok") && l.contains(&line)),
        "{report}"
    );
    assert!(t.runs().is_empty(), "nothing was started");
    assert!(
        srv.child.try_wait().unwrap().is_none(),
        "the same serve still runs"
    );

    // And gone again: missing again on the next call.
    std::fs::remove_file(t.client_path()).unwrap();
    let s = t.status();
    assert_eq!(s["phase"], "missing", "{s}");
    assert_eq!(s["command"], Value::Null, "{s}");
    srv.terminate();
}

// ---- 5. setup --------------------------------------------------------------------------------------------

#[test]
fn setup_validates_its_input_rotates_the_credential_and_needs_yes_for_full() {
    let t = Tunnel::new(true);
    let good_key = t.key_file("good-key", &t.key);
    for bad in [
        "tunnel_0123",
        "0123456789abcdef0123456789abcdef",
        "TUNNEL_0123456789abcdef0123456789abcdef",
        "tunnel_0123456789ABCDEF0123456789abcdef",
        "tunnel_0123456789abcdef0123456789abcdef0",
        "tunnel_0123456789abcdef0123456789abcdeg",
        "tunnel_0123456789abcdef0123456789abcde",
    ] {
        let out = t.run(&[
            "tunnel",
            "setup",
            "--tunnel-id",
            bad,
            "--api-key-file",
            good_key.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(2), "tunnel id {bad:?}: {out:?}");
    }
    let missing = t.env.tmp.path().join("no-such-key");
    let out = t.run(&[
        "tunnel",
        "setup",
        "--tunnel-id",
        TUNNEL_ID,
        "--api-key-file",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "a missing key file: {out:?}");
    for (name, content) in [("bad-chars", "sk key!"), ("blank", " \n")] {
        let f = t.key_file(name, content);
        let out = t.run(&[
            "tunnel",
            "setup",
            "--tunnel-id",
            TUNNEL_ID,
            "--api-key-file",
            f.to_str().unwrap(),
        ]);
        assert!(!out.status.success(), "key {content:?} accepted");
    }
    assert!(
        !t.env.home.join("tunnel.key").exists(),
        "a refused setup stores no key"
    );
    assert!(
        t.tunnel_credentials().1.is_empty(),
        "a refused setup issues nothing"
    );

    t.setup_ok(&[]);
    let first = t.live_credential();
    assert_eq!(first["tier"], "auto", "{first}");

    // Again: the old credential is revoked, a new one is live under the name.
    t.setup_ok(&[]);
    let second = t.live_credential();
    assert_ne!(second["id"], first["id"], "setup rotates the credential");
    let (_, all) = t.tunnel_credentials();
    let old = all
        .iter()
        .find(|c| c["id"] == first["id"])
        .unwrap_or_else(|| panic!("the old credential is still listed: {all:?}"));
    assert_eq!(old["revoked"], true, "{old}");

    let out = t.setup(&["--tier", "full"]);
    assert!(!out.status.success(), "--tier full without --yes: {out:?}");
    assert_eq!(
        t.live_credential()["id"],
        second["id"],
        "a refused setup rotates nothing"
    );

    t.setup_ok(&["--tier", "full", "--yes"]);
    let full = t.live_credential();
    assert_eq!(full["tier"], "full", "{full}");
    assert!(
        t.tunnel_credentials()
            .1
            .iter()
            .filter(|c| c["id"] == second["id"])
            .all(|c| c["revoked"] == true),
        "rotated"
    );

    t.setup_ok(&["--tier", "read", "--vault", "basic"]);
    let scoped = t.live_credential();
    assert_eq!(scoped["tier"], "read", "{scoped}");
    assert_eq!(scoped["vaults"], json!(["basic"]), "{scoped}");
    assert_eq!(mode(&t.env.home.join("tunnel.key")), 0o600);
    assert_eq!(
        std::fs::read_to_string(t.env.home.join("tunnel.key"))
            .unwrap()
            .trim(),
        t.key
    );
}

/// A second `serve` of the same home (on another port) neither sweeps nor starts the tunnel the
/// first one runs: one supervisor per home, by a lock on the profile folder.
#[tokio::test]
async fn a_second_serve_of_the_home_leaves_the_running_tunnel_alone() {
    let t = Tunnel::new(true);
    t.setup_ok(&[]);
    let mut a = t.serve(&["--tunnel"], &[]);
    let child = run_pid(&t.wait_new_run(&[], "serve --tunnel"));
    let _cleanup = KillOnDrop(vec![child]);
    let mut b = t.serve(&["--tunnel"], &[]);
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        alive(child),
        "the second serve ended the first one's tunnel-client"
    );
    assert_eq!(
        t.runs().len(),
        1,
        "the second serve started another tunnel-client"
    );
    b.terminate();
    assert!(
        alive(child),
        "ending the second serve ended the first one's child"
    );
    a.terminate();
    wait_gone(child, "after SIGTERM to the serve that runs it");
}

// ---- 6. the profile folder: made private whatever the umask, refused when it is not ------------------

/// These tests hand files and folders to another user (`nobody`), which only root can do; CI
/// runs them as root.
fn assert_root() {
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata("/proc/self").unwrap().uid(),
        0,
        "these tests chown to nobody and run a process as nobody: run them as root"
    );
}

const NOBODY: u32 = 65534;

fn chown_nobody(p: &Path) {
    std::os::unix::fs::lchown(p, Some(NOBODY), Some(NOBODY)).unwrap();
}

fn set_mode(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Writes `text` to a new file `p` with exactly `mode`, whatever the umask.
fn write_mode(p: &Path, text: &str, mode: u32) {
    let _ = std::fs::remove_file(p);
    std::fs::write(p, text).unwrap();
    set_mode(p, mode);
}

/// A `child.json` naming `pid` (a binary, not a script) exactly as vaultgate records the child it
/// starts: its pid, its executable (path, device and inode), its start time in clock ticks and the
/// mark vaultgate put in its environment.
fn record_of(pid: u32, mark: &str) -> Value {
    use std::os::unix::fs::MetadataExt;
    let exe = format!("/proc/{pid}/exe");
    let meta = std::fs::metadata(&exe).unwrap();
    json!({
        "pid": pid,
        "exe": std::fs::read_link(&exe).unwrap(),
        "exeDev": meta.dev(),
        "exeIno": meta.ino(),
        "startTime": start_ticks(pid).unwrap(),
        "mark": mark,
    })
}

impl Tunnel {
    /// Removes the profile folder, whatever it is now (a symlink, someone else's folder).
    fn remove_profile(&self) {
        let dir = self.profile_dir();
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.file_type().is_symlink() => std::fs::remove_file(&dir).unwrap(),
            Ok(_) => std::fs::remove_dir_all(&dir).unwrap(),
            Err(_) => {}
        }
        let parent = dir.parent().unwrap();
        if parent.exists() {
            set_mode(parent, 0o700);
        }
    }

    /// A profile folder as vaultgate makes it (0700, the user's own), empty.
    fn fresh_profile(&self) -> PathBuf {
        self.remove_profile();
        let dir = self.profile_dir();
        std::fs::create_dir_all(&dir).unwrap();
        set_mode(&dir, 0o700);
        dir
    }
}

/// Every folder under `root` (and `root` itself) with its mode, and every file.
fn tree(root: &Path) -> (Vec<(PathBuf, u32)>, Vec<PathBuf>) {
    let mut dirs = vec![(root.to_owned(), mode(root))];
    let mut files = Vec::new();
    let mut i = 0;
    while i < dirs.len() {
        let d = dirs[i].0.clone();
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                dirs.push((p.clone(), mode(&p)));
            } else {
                files.push(p);
            }
        }
        i += 1;
    }
    (dirs, files)
}

/// SECURITY(T-TUNNEL4): with `umask 000`, every folder `serve` creates on the way to the profile
/// folder (here `XDG_CACHE_HOME` itself and a folder above it as well) is 0700, and its files 0600.
#[test]
fn serve_under_umask_000_creates_every_profile_folder_0700_and_its_files_0600() {
    let mut t = Tunnel::new(true);
    let root = t.env.tmp.path().canonicalize().unwrap();
    // Neither folder exists: vaultgate creates both, then vaultgate/mcp-tunnel/<gateway id>.
    t.cache = Some(root.join("cache/xdg"));
    t.setup_ok(&[]);
    let mut srv = t.serve_with_umask(Some("000"), &["--tunnel"], &[]);
    let pid = run_pid(&t.wait_new_run(&[], "serve --tunnel under umask 000"));
    let _cleanup = KillOnDrop(vec![pid]);
    let dir = t.profile_dir();
    let deadline = Instant::now() + WAIT;
    while !dir.join("child.json").exists() {
        assert!(Instant::now() < deadline, "no child.json within {WAIT:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (dirs, _) = tree(&root.join("cache"));
    assert_eq!(
        dirs.len(),
        5,
        "cache, xdg, vaultgate, mcp-tunnel, the gateway's: {dirs:?}"
    );
    for (d, m) in &dirs {
        assert_eq!(*m, 0o700, "{} is {m:o} under umask 000", d.display());
    }
    for name in [
        "child.json",
        "profile.yaml",
        "status.json",
        "supervisor.lock",
        "tunnel-client.log",
    ] {
        assert_eq!(mode(&dir.join(name)), 0o600, "{name} under umask 000");
    }
    srv.terminate();
    wait_gone(pid, "after SIGTERM to serve");
    let (_, files) = tree(&root.join("cache"));
    for f in files.iter().filter(|f| {
        f.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| ["status.json", "supervisor.lock", "tunnel-client.log"].contains(&n))
    }) {
        assert_eq!(mode(f), 0o600, "{} after serve ended", f.display());
    }
}

/// `serve --tunnel` with the profile folder in a state it must refuse: no child starts, and
/// `tunnel status --json`, `doctor` and serve's own announcement say why.
fn assert_refused(t: &Tunnel, what: &str, why: &str) {
    let dir = t.profile_dir();
    let mut srv = t.serve(&["--tunnel"], &[]);
    // The fake records its start within milliseconds; give it a second.
    std::thread::sleep(Duration::from_millis(1000));
    assert!(
        t.runs().is_empty(),
        "{what}: a tunnel-client was started in a refused profile folder\n{}",
        srv.stderr()
    );
    let s = t.status();
    assert_eq!(s["phase"], "failed", "{what}: {s}");
    assert_eq!(s["pid"], Value::Null, "{what}: {s}");
    let err = s["lastError"].as_str().unwrap_or_default();
    assert!(
        err.contains(why) && err.contains(dir.parent().unwrap().to_str().unwrap()),
        "{what}: the last error names the folder and says {why:?}: {s}"
    );
    let doctor = t.run(&["doctor"]);
    let report = String::from_utf8_lossy(&doctor.stdout).into_owned();
    assert_eq!(doctor.status.code(), Some(1), "{what}: doctor fails: {report}");
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("fail") && l.contains("tunnel profile folder") && l.contains(why)),
        "{what}: doctor says {why:?}: {report}"
    );
    srv.terminate();
    assert!(
        srv.stderr().contains("tunnel: not started") && srv.stderr().contains(why),
        "{what}: serve says why: {}",
        srv.stderr()
    );
}

/// SECURITY(T-TUNNEL4): the profile folder is opened without following links and used only when
/// the user owns it and nobody else can write to it (nor to a folder above it).
#[test]
fn a_symlinked_foreign_or_group_writable_profile_folder_is_refused_and_status_says_why() {
    assert_root();
    let t = Tunnel::new(true);
    t.setup_ok(&[]);
    let dir = t.profile_dir();
    let parent = dir.parent().unwrap().to_owned();

    // A symlink in place of the folder, to a folder of the user's that looks right.
    t.remove_profile();
    let elsewhere = t.env.tmp.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    set_mode(&elsewhere, 0o700);
    std::fs::create_dir_all(&parent).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &dir).unwrap();
    assert_refused(&t, "a symlinked profile folder", "is a symbolic link");
    assert!(
        std::fs::read_dir(&elsewhere).unwrap().next().is_none(),
        "nothing was written through the symlink"
    );

    // Another user's folder.
    chown_nobody(&t.fresh_profile());
    assert_refused(&t, "a profile folder of another user", "owned by uid 65534");

    // The user's, but group-writable: left as it is, not tightened and used.
    set_mode(&t.fresh_profile(), 0o770);
    assert_refused(&t, "a group-writable profile folder", "writable by other users");
    assert_eq!(mode(&dir), 0o770, "a refused folder is not touched");

    // The folder is fine, the one above it is writable by anyone.
    t.fresh_profile();
    set_mode(&parent, 0o777);
    assert_refused(&t, "a world-writable folder above it", "writable by other users");

    // Put right, the same home starts the tunnel.
    t.fresh_profile();
    let mut srv = t.serve(&["--tunnel"], &[]);
    let pid = run_pid(&t.wait_new_run(&[], "serve --tunnel in a private profile folder"));
    let _cleanup = KillOnDrop(vec![pid]);
    let s = t.wait_phase("starting", "a private profile folder");
    assert_eq!(s["lastError"], Value::Null, "{s}");
    let report = t.ok(&["doctor"]);
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("ok") && l.contains("tunnel profile folder")),
        "{report}"
    );
    srv.terminate();
    wait_gone(pid, "after SIGTERM to serve");
}

// ---- 7. vaultgate never signals a process it did not start ---------------------------------------------

/// Runs a plain `serve` (the orphan sweep runs on every start, with or without `--tunnel`), stops
/// it, asks `tunnel status`, and checks that every process in `spared` still runs.
fn assert_spared(t: &Tunnel, what: &str, spared: &[u32]) {
    let mut srv = t.serve(&[], &[]);
    // The sweep is over before serve answers /healthz; a signal would have landed by now.
    std::thread::sleep(Duration::from_millis(300));
    srv.terminate();
    let s = t.status();
    assert_eq!(s["pid"], Value::Null, "{what}: {s}");
    for pid in spared {
        assert!(
            alive(*pid),
            "{what}: vaultgate signalled pid {pid}, a process it did not start\n{}",
            srv.stderr()
        );
    }
    assert!(
        !srv.stderr().contains("ending the tunnel-client"),
        "{what}: {}",
        srv.stderr()
    );
}

/// SECURITY(T-TUNNEL5): a record is honoured only when it is the user's own file, 0600, in a
/// private profile folder, and the process it names runs that executable, as this user, since
/// that time, with the mark vaultgate gave its child. Each forged record below differs from a
/// genuine one in one thing only (the last, genuine in every respect, is honoured: the forgeries
/// are well-formed, each is refused for its own reason).
#[test]
fn vaultgate_never_signals_a_process_it_did_not_start() {
    use std::os::unix::process::CommandExt;
    assert_root();
    let t = Tunnel::new(true);
    t.setup_ok(&[]);
    let mark = "5f0c6a1e9b7d4e2a8c3f1b6d0e9a7c4b";
    let sleep = |marked: bool, uid: Option<u32>| {
        let mut cmd = Command::new("sleep");
        cmd.arg("600").stdin(Stdio::null());
        if marked {
            cmd.env(MARK_VAR, mark);
        }
        if let Some(uid) = uid {
            cmd.uid(uid).gid(uid);
        }
        cmd.spawn().unwrap()
    };
    // As vaultgate's child would be: its mark in the environment, this user.
    let mut marked = sleep(true, None);
    // The user's own `sleep`, nothing of vaultgate's about it.
    let mut plain = sleep(false, None);
    // Marked, but another user's.
    let mut foreign = sleep(true, Some(NOBODY));
    let all = [marked.id(), plain.id(), foreign.id()];
    let _cleanup = KillOnDrop(all.to_vec());
    let dir = t.profile_dir();
    let parent = dir.parent().unwrap().to_owned();
    let genuine = record_of(marked.id(), mark);
    let plant = |record: &Value, m: u32| {
        let dir = t.fresh_profile();
        write_mode(&dir.join("child.json"), &record.to_string(), m);
        dir
    };

    chown_nobody(&plant(&genuine, 0o600).join("child.json"));
    assert_spared(&t, "child.json owned by another user", &all);

    plant(&genuine, 0o644);
    assert_spared(&t, "child.json readable by others (0644)", &all);

    plant(&genuine, 0o400);
    assert_spared(&t, "child.json of mode 0400", &all);

    use std::os::unix::fs::MetadataExt;
    let truth = std::fs::canonicalize("/bin/true").unwrap();
    let meta = std::fs::metadata(&truth).unwrap();
    let mut other_exe = genuine.clone();
    other_exe["exe"] = json!(truth);
    other_exe["exeDev"] = json!(meta.dev());
    other_exe["exeIno"] = json!(meta.ino());
    plant(&other_exe, 0o600);
    assert_spared(&t, "a record of another executable", &all);

    let mut other_time = genuine.clone();
    other_time["startTime"] = json!(genuine["startTime"].as_u64().unwrap() + 1);
    plant(&other_time, 0o600);
    assert_spared(&t, "a record of another start time", &all);

    plant(&record_of(plain.id(), mark), 0o600);
    assert_spared(&t, "a record of the user's own process, without the mark", &all);

    plant(&record_of(foreign.id(), mark), 0o600);
    assert_spared(&t, "a record of another user's process", &all);

    let elsewhere = t.env.tmp.path().join("elsewhere");
    let _ = std::fs::remove_dir_all(&elsewhere);
    std::fs::create_dir_all(&elsewhere).unwrap();
    set_mode(&elsewhere, 0o700);
    write_mode(&elsewhere.join("child.json"), &genuine.to_string(), 0o600);
    let dir_now = t.fresh_profile();
    std::os::unix::fs::symlink(elsewhere.join("child.json"), dir_now.join("child.json")).unwrap();
    assert_spared(&t, "child.json a symlink to a genuine record", &all);

    t.remove_profile();
    std::os::unix::fs::symlink(&elsewhere, &dir).unwrap();
    assert_spared(
        &t,
        "the profile folder a symlink to a folder with a genuine record",
        &all,
    );

    chown_nobody(&plant(&genuine, 0o600));
    assert_spared(&t, "a genuine record in another user's folder", &all);

    set_mode(&plant(&genuine, 0o600), 0o770);
    assert_spared(&t, "a genuine record in a group-writable folder", &all);

    plant(&genuine, 0o600);
    set_mode(&parent, 0o777);
    assert_spared(&t, "a genuine record below a world-writable folder", &all);

    // The control: the same record, where and as vaultgate writes it, is honoured.
    plant(&genuine, 0o600);
    let mut srv = t.serve(&[], &[]);
    wait_gone(marked.id(), "a genuine record in a private folder");
    assert!(
        srv.stderr().contains("ending the tunnel-client"),
        "{}",
        srv.stderr()
    );
    srv.terminate();
    assert!(alive(plain.id()) && alive(foreign.id()));
    for c in [&mut marked, &mut plain, &mut foreign] {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// docs/contract.md#the-chatgpt-tunnel: `setup --approve-in-client` issues ChatGPT's credential so
/// the person may approve on its card; a setup without it rotates back to a credential that may not.
#[test]
fn setup_with_approve_in_client_lets_chatgpts_card_approve_and_a_rerun_without_it_does_not() {
    let t = Tunnel::new(true);
    t.setup_ok(&["--approve-in-client"]);
    let (live, all) = t.tunnel_credentials();
    assert_eq!(live.len(), 1, "{all:?}");
    assert_eq!(live[0]["approveInClient"], true, "{all:?}");
    assert_eq!(live[0]["tier"], "auto");
    let issued = crate::util::audit_lines(&t.env)
        .into_iter()
        .rev()
        .find(|r| r["tool"] == "tunnel_setup")
        .expect("the setup is audited");
    assert_eq!(issued["outcome"], "ok", "{issued}");
    t.setup_ok(&[]);
    let rotated = t.live_credential();
    assert_ne!(rotated["id"], live[0]["id"]);
}
