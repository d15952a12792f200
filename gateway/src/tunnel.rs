//! ChatGPT's Secure MCP Tunnel (SPEC §17): vaultgate supervises OpenAI's `tunnel-client` so
//! that nobody types a token or a command line.
//!
//! - `setup` stores the tunnel id and `tunnel-client`'s absolute path in `gateway.toml`, the
//!   runtime API key in `<home>/tunnel.key` (0600), and rotates the `chatgpt-tunnel` credential.
//! - [`Supervisor`] (inside `serve`) writes a profile into a private directory, starts the child
//!   with an environment built from an allow-list plus the key and the credential's bearer token,
//!   and asks `tunnel-client health --require-control-plane-poll --json` whether it is connected.
//! - `status` is read by any process: the supervisor's last word in `status.json`, checked
//!   against the live process, and the binary looked up again on every call.
//!
//! SECURITY(T-TUNNEL1): the API key and the token reach the child only through its environment:
//! never argv, a log line, the page or a file other than `tunnel.key`.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use engine::core::{Core, Operator};
use engine::error::GatewayError;
use engine::home::{Home, TunnelConfig};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What to do when `tunnel-client` is not found; vaultgate never installs it.
pub const INSTALL: &str = "install tunnel-client: `brew install openai/tools/tunnel-client`, or unpack a release \
archive from https://github.com/openai/tunnel-client/releases and put `tunnel-client` on PATH (or name it in \
[tunnel] command)";

/// The variables of vaultgate's own environment the child may see: what a program needs to run,
/// find certificates and reach the internet through a proxy. Nothing else passes: in particular
/// not `LOG_HTTP_RAW_UNSAFE` (logs raw requests with their headers), `OPENAI_API_KEY` (a fallback
/// key), or `MCP_*` / `CONTROL_PLANE_*` / `HEALTH_*` (they override the profile).
const ALLOWED_ENV: &[&str] = &[
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
    "https_proxy",
    "http_proxy",
    "no_proxy",
];
/// The child reads its runtime API key from here (the profile names it).
const KEY_VAR: &str = "CONTROL_PLANE_API_KEY";
/// The whole `Authorization` header value for the local `/mcp` (the profile names it).
const AUTH_VAR: &str = "VAULTGATE_TUNNEL_AUTHORIZATION";
/// A runtime API key file is a line of a few hundred bytes at most.
const MAX_KEY_BYTES: u64 = 4096;
/// `tunnel-client health --json` prints well under this.
const HEALTH_MAX_BYTES: u64 = 64 * 1024;
/// The child's log is cut back to empty past this size, so months of running fill no disk.
const LOG_MAX_BYTES: u64 = 4 * 1024 * 1024;

/// `tunnel_` and 32 lowercase hex digits.
pub fn valid_tunnel_id(s: &str) -> bool {
    s.strip_prefix("tunnel_").is_some_and(|h| {
        h.len() == 32
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Reads a runtime API key: one line of `[0-9A-Za-z_-]`, at most 4 KiB.
pub fn read_api_key(path: &Path) -> Result<String, GatewayError> {
    use std::io::Read as _;
    let unreadable = |e: std::io::Error| {
        GatewayError::InvalidArgument(format!("cannot read the API key file {}: {e}", path.display()))
    };
    // Read at most one byte past the bound: a device or a growing file cannot make this unbounded.
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(unreadable)?
        .take(MAX_KEY_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > MAX_KEY_BYTES {
        return Err(GatewayError::InvalidArgument(format!(
            "{} is not an API key file (over {MAX_KEY_BYTES} bytes)",
            path.display()
        )));
    }
    let text = String::from_utf8_lossy(&bytes);
    let key = text.trim();
    if key.is_empty()
        || !key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        // Never echo the content: it may be a secret of another kind.
        return Err(GatewayError::InvalidArgument(format!(
            "{} does not hold a runtime API key (one line of letters, digits, _ and -)",
            path.display()
        )));
    }
    Ok(key.to_owned())
}

/// Finds `tunnel-client`: `[tunnel] command` when it names an executable file, else `PATH`.
/// Asked again on every status call, so installing it needs no restart.
pub fn resolve(config: &TunnelConfig, path_var: Option<&str>) -> Option<PathBuf> {
    if let Some(cmd) = &config.command
        && is_executable(cmd)
    {
        return Some(cmd.clone());
    }
    std::env::split_paths(path_var?)
        .filter(|d| d.is_absolute())
        .map(|d| d.join("tunnel-client"))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The private profile directory: `$XDG_CACHE_HOME/vaultgate/mcp-tunnel/<gateway id>`.
pub fn profile_dir(gateway_id: &str, env: &BTreeMap<String, String>) -> Result<PathBuf, GatewayError> {
    let base = env
        .get("XDG_CACHE_HOME")
        .filter(|v| Path::new(v).is_absolute())
        .map(PathBuf::from)
        .or_else(|| {
            env.get("HOME")
                .filter(|v| Path::new(v).is_absolute())
                .map(|h| Path::new(h).join(".cache"))
        })
        .ok_or_else(|| {
            GatewayError::Config(
                "neither XDG_CACHE_HOME nor HOME is set: no place for the tunnel profile".into(),
            )
        })?;
    Ok(base.join("vaultgate").join("mcp-tunnel").join(gateway_id))
}

struct Files {
    dir: PathBuf,
}

impl Files {
    fn profile(&self) -> PathBuf {
        self.dir.join("profile.yaml")
    }
    fn health_url(&self) -> PathBuf {
        self.dir.join("health.url")
    }
    fn pid_file(&self) -> PathBuf {
        self.dir.join("tunnel-client.pid")
    }
    fn child(&self) -> PathBuf {
        self.dir.join("child.json")
    }
    fn status(&self) -> PathBuf {
        self.dir.join("status.json")
    }
    fn log(&self) -> PathBuf {
        self.dir.join("tunnel-client.log")
    }

    /// Creates the directory 0700 (and tightens an existing one).
    fn ensure(&self) -> Result<(), GatewayError> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(&self.dir)?;
        std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o700))?;
        Ok(())
    }
}

/// Writes `text` to `path` with mode 0600, atomically.
fn write_private(path: &Path, text: &str) -> Result<(), GatewayError> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    // A leftover (or planted) temp file is replaced, never written through.
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// A YAML double-quoted scalar (JSON's string syntax is valid YAML).
fn q(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

/// The profile `tunnel-client run --config` reads: its `main` channel points at our `/mcp`, the
/// key and the `Authorization` header come from the child's environment (`env:` references).
fn profile(tunnel_id: &str, files: &Files, mcp_url: &str) -> String {
    let path = |p: PathBuf| q(&p.to_string_lossy());
    format!(
        "# Written by vaultgate for tunnel-client; rewritten at every start.\n\
         config_version: 1\n\
         control_plane:\n  tunnel_id: {}\n  api_key: {}\n\
         health:\n  listen_addr: \"127.0.0.1:0\"\n  url_file: {}\n\
         process:\n  pid_file: {}\n\
         log:\n  level: info\n  format: json\n\
         mcp:\n  server_urls:\n    - channel: main\n      url: {}\n  extra_headers:\n    Authorization: {}\n",
        q(tunnel_id),
        q(&format!("env:{KEY_VAR}")),
        path(files.health_url()),
        path(files.pid_file()),
        q(mcp_url),
        q(&format!("env:{AUTH_VAR}")),
    )
}

fn allowed_env(own: &BTreeMap<String, String>) -> impl Iterator<Item = (&String, &String)> {
    own.iter().filter(|(k, _)| ALLOWED_ENV.contains(&k.as_str()))
}

// ---- the child process on record ---------------------------------------------------------------

/// What identifies our child across a crash: its pid, the executable and when it started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ChildRecord {
    pid: u32,
    exe: PathBuf,
    /// Clock ticks since boot (`/proc/<pid>/stat` field 22).
    start_time: u64,
}

fn proc_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn proc_exe(pid: u32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe")).ok()
}

/// Whether `rec` still describes a live process: the same pid, started at the same instant,
/// running the recorded program — as its executable, or (a script) as the file its interpreter
/// was given. A reused pid fails the start time, and a stranger the program.
fn still_running(rec: &ChildRecord) -> bool {
    if proc_start_time(rec.pid) != Some(rec.start_time) {
        return false;
    }
    if proc_exe(rec.pid).is_some_and(|e| same_file(&e, &rec.exe)) {
        return true;
    }
    std::fs::read(format!("/proc/{}/cmdline", rec.pid)).is_ok_and(|c| {
        c.split(|b| *b == 0)
            .take(3)
            .any(|arg| !arg.is_empty() && same_file(Path::new(&*String::from_utf8_lossy(arg)), &rec.exe))
    })
}

fn same_file(a: &Path, b: &Path) -> bool {
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    canon(a) == canon(b)
}

fn signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

/// SIGTERM, then SIGKILL after `grace`, to a process that is `rec` (checked before each signal).
async fn end_process(rec: &ChildRecord, grace: Duration) {
    if !still_running(rec) {
        return;
    }
    signal(rec.pid, rustix::process::Signal::TERM);
    let deadline = tokio::time::Instant::now() + grace;
    while tokio::time::Instant::now() < deadline {
        if !still_running(rec) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if still_running(rec) {
        signal(rec.pid, rustix::process::Signal::KILL);
    }
}

/// An exclusive, non-blocking `flock` on `path`, released when the file is dropped (or the
/// process dies).
fn take_lock(path: &Path) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .ok()?;
    rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive)
        .ok()
        .map(|()| f)
}

// ---- status --------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Missing,
    Stopped,
    Starting,
    Connected,
    Failed,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Missing => "missing",
            Phase::Stopped => "stopped",
            Phase::Starting => "starting",
            Phase::Connected => "connected",
            Phase::Failed => "failed",
        }
    }
}

/// `tunnel status --json` (SPEC §17).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub phase: Phase,
    pub pid: Option<u32>,
    /// The last `tunnel-client health --json` answer.
    pub health: Option<Value>,
    pub last_error: Option<String>,
    pub command: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub install: Option<String>,
    /// Whether `tunnel setup` was run on this home.
    pub set_up: bool,
}

/// The tunnel's status as any process sees it: the binary looked up now, the supervisor's last
/// record, and whether the child it names still runs.
pub fn status(home: &Home, config: &engine::home::Config, env: &BTreeMap<String, String>) -> Status {
    let command = resolve(&config.tunnel, env.get("PATH").map(String::as_str));
    let set_up = config.tunnel.tunnel_id.is_some() && home.tunnel_key_path().exists();
    let recorded: Option<Status> = profile_dir(&config.gateway_id, env)
        .ok()
        .map(|dir| Files { dir })
        .and_then(|f| std::fs::read(f.status()).ok().map(|b| (f, b)))
        .and_then(|(f, b)| {
            let mut s: Status = serde_json::from_slice(&b).ok()?;
            // A record of a running child counts only while that child runs.
            if matches!(s.phase, Phase::Starting | Phase::Connected) {
                let live = std::fs::read(f.child())
                    .ok()
                    .and_then(|b| serde_json::from_slice::<ChildRecord>(&b).ok())
                    .is_some_and(|r| still_running(&r));
                if !live {
                    s.phase = Phase::Stopped;
                    s.pid = None;
                }
            }
            Some(s)
        });
    let mut s = recorded.unwrap_or(Status {
        phase: Phase::Stopped,
        pid: None,
        health: None,
        last_error: None,
        command: None,
        install: None,
        set_up,
    });
    s.set_up = set_up;
    with_lookup(s, command)
}

/// `s` with the binary as just looked up: `missing` (and the install command) when none is
/// found and no child runs, else the recorded phase.
fn with_lookup(mut s: Status, command: Option<PathBuf>) -> Status {
    let running = matches!(s.phase, Phase::Starting | Phase::Connected);
    if command.is_none() && !running {
        s.phase = Phase::Missing;
        s.install = Some(INSTALL.to_owned());
    } else {
        if s.phase == Phase::Missing {
            s.phase = Phase::Stopped;
        }
        s.install = None;
    }
    s.command = command;
    s
}

// ---- setup ---------------------------------------------------------------------------------------

/// What `tunnel setup` did.
pub struct SetupOut {
    pub credential: engine::Credential,
    pub command: Option<PathBuf>,
}

/// `vaultgate tunnel setup` (SPEC §17).
pub fn setup(
    home: &Home,
    operator: &Operator,
    tunnel_id: &str,
    key_file: &Path,
    tier: engine::Tier,
    vaults: Vec<String>,
    env: &BTreeMap<String, String>,
) -> Result<SetupOut, GatewayError> {
    let key = read_api_key(key_file)?;
    let mut config = home.load_config()?;
    let core = crate::cli::open_core(home)?;
    let credential = core.rotate_tunnel_credential(operator, tier, vaults)?;
    write_private(&home.tunnel_key_path(), &format!("{key}\n"))?;
    config.tunnel.tunnel_id = Some(tunnel_id.to_owned());
    let found = resolve(&config.tunnel, env.get("PATH").map(String::as_str));
    let command = found.map(|p| std::fs::canonicalize(&p).unwrap_or(p));
    if command.is_some() {
        config.tunnel.command = command.clone();
    }
    home.save_config(&config)?;
    Ok(SetupOut { credential, command })
}

// ---- the supervisor (inside `serve`) ------------------------------------------------------------

struct Running {
    child: tokio::process::Child,
    record: ChildRecord,
    generation: u64,
}

/// Runs `tunnel-client` as the child of `serve`, one at a time.
pub struct Supervisor {
    core: Arc<Core>,
    files: Files,
    /// The profile folder's lock, held for the supervisor's life: one `serve` of a home runs
    /// the tunnel; another one neither sweeps nor starts it (`None`: not ours).
    lock: Option<std::fs::File>,
    mcp_url: String,
    env: BTreeMap<String, String>,
    state: Mutex<Inner>,
    /// Serialises start and stop.
    turn: tokio::sync::Mutex<()>,
}

struct Inner {
    running: Option<Running>,
    status: Status,
    generation: u64,
}

impl Supervisor {
    /// For the server bound to `served`; ends an orphan of an earlier, crashed `serve`.
    pub async fn new(
        core: Arc<Core>,
        env: BTreeMap<String, String>,
        served: std::net::SocketAddr,
    ) -> Result<Arc<Supervisor>, GatewayError> {
        let files = Files {
            dir: profile_dir(&core.config.gateway_id, &env)?,
        };
        let config = core.home.load_config().unwrap_or_else(|_| core.config.clone());
        let status = status(&core.home, &config, &env);
        let lock = files
            .ensure()
            .ok()
            .and_then(|()| take_lock(&files.dir.join("supervisor.lock")));
        if lock.is_none() {
            tracing::warn!("another serve of this home supervises the tunnel; this one leaves it alone");
        }
        let sup = Arc::new(Supervisor {
            mcp_url: format!("http://{served}/mcp"),
            core,
            files,
            lock,
            env,
            state: Mutex::new(Inner {
                running: None,
                status,
                generation: 0,
            }),
            turn: tokio::sync::Mutex::new(()),
        });
        sup.sweep_orphan().await;
        Ok(sup)
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// SECURITY(T-TUNNEL2): only a process that is still the recorded child (same pid, same
    /// executable, same start time) is ended; a reused pid is left alone.
    async fn sweep_orphan(&self) {
        if self.lock.is_none() {
            return;
        }
        let Ok(bytes) = std::fs::read(self.files.child()) else {
            return;
        };
        if let Ok(rec) = serde_json::from_slice::<ChildRecord>(&bytes)
            && still_running(&rec)
        {
            tracing::warn!(pid = rec.pid, "ending the tunnel-client left by an earlier serve");
            end_process(&rec, Duration::from_secs(5)).await;
        }
        let _ = std::fs::remove_file(self.files.child());
        self.set_status(Phase::Stopped, None, None, None);
    }

    /// The status as this process knows it (the binary looked up now).
    pub fn status(&self) -> Status {
        let mut s = self.inner().status.clone();
        let config = self
            .core
            .home
            .load_config()
            .map(|c| c.tunnel)
            .unwrap_or_else(|_| self.core.config.tunnel.clone());
        let command = resolve(&config, self.env.get("PATH").map(String::as_str));
        s.set_up = config.tunnel_id.is_some() && self.core.home.tunnel_key_path().exists();
        with_lookup(s, command)
    }

    fn set_status(&self, phase: Phase, pid: Option<u32>, health: Option<Value>, error: Option<String>) {
        self.set_status_for(None, phase, pid, health, error);
    }

    /// As [`Supervisor::set_status`]; with `Some(generation)`, only while that child is the
    /// running one (checked under the same lock, so a Stop in between wins).
    fn set_status_for(
        &self,
        generation: Option<u64>,
        phase: Phase,
        pid: Option<u32>,
        health: Option<Value>,
        error: Option<String>,
    ) {
        let mut g = self.inner();
        if let Some(want) = generation
            && g.running.as_ref().map(|r| r.generation) != Some(want)
        {
            return;
        }
        g.status.phase = phase;
        g.status.pid = pid;
        if health.is_some() || phase != Phase::Connected {
            g.status.health = health.or(g.status.health.take());
        }
        if error.is_some() {
            g.status.last_error = error;
        } else if phase == Phase::Connected {
            g.status.last_error = None;
        }
        let text = serde_json::to_string(&g.status).unwrap_or_default();
        drop(g);
        if self.files.ensure().is_ok()
            && let Err(e) = write_private(&self.files.status(), &text)
        {
            tracing::warn!(error = %e, "recording the tunnel status failed");
        }
    }

    /// Starts the child (no-op while one runs), audited as the operator's action: the record
    /// comes first, so a start that cannot be audited does not happen.
    pub async fn start(self: &Arc<Self>, operator: &Operator) -> Result<(), GatewayError> {
        let _turn = self.turn.lock().await;
        self.record(operator, "tunnel.start", None).await?;
        let result = self.start_inner().await;
        if let Err(e) = &result {
            self.set_status(Phase::Failed, None, None, Some(e.to_string()));
            if let Err(r) = self.record(operator, "tunnel.start_failed", Some(e)).await {
                tracing::warn!(error = %r, "recording the failed tunnel start failed");
            }
        }
        result
    }

    async fn record(
        &self,
        operator: &Operator,
        event: &'static str,
        failed: Option<&GatewayError>,
    ) -> Result<(), GatewayError> {
        let core = self.core.clone();
        let op = operator.clone();
        let failed = failed.map(|e| GatewayError::Config(e.to_string()));
        tokio::task::spawn_blocking(move || {
            core.record_operator_action(&op, event, "tunnel", failed.as_ref())
        })
        .await
        .map_err(|_| GatewayError::Internal("the audit worker stopped".into()))?
    }

    async fn start_inner(self: &Arc<Self>) -> Result<(), GatewayError> {
        if self.lock.is_none() {
            return Err(GatewayError::Config(
                "another `vaultgate serve` of this home runs the tunnel; start it there".into(),
            ));
        }
        {
            let mut g = self.inner();
            // A child that exited unnoticed is not running.
            let exited = g
                .running
                .as_mut()
                .is_some_and(|r| !matches!(r.child.try_wait(), Ok(None)));
            if exited {
                g.running = None;
            }
            if g.running.is_some() {
                return Ok(());
            }
        }
        // Read fresh: `tunnel setup` may have run while this server was up.
        let config = &self.core.home.load_config()?.tunnel;
        let tunnel_id = config.tunnel_id.clone().ok_or_else(|| {
            GatewayError::Config("the tunnel is not set up: run `vaultgate tunnel setup`".into())
        })?;
        let bin = resolve(config, self.env.get("PATH").map(String::as_str))
            .ok_or_else(|| GatewayError::Config(format!("tunnel-client was not found; {INSTALL}")))?;
        let key = read_api_key(&self.core.home.tunnel_key_path()).map_err(|_| {
            GatewayError::Config("tunnel.key is missing or damaged: run `vaultgate tunnel setup`".into())
        })?;
        let core = self.core.clone();
        let token = tokio::task::spawn_blocking(move || core.tunnel_token())
            .await
            .map_err(|_| GatewayError::Internal("the token worker stopped".into()))??;
        self.files.ensure()?;
        let _ = std::fs::remove_file(self.files.health_url());
        write_private(
            &self.files.profile(),
            &profile(&tunnel_id, &self.files, &self.mcp_url),
        )?;
        let log = {
            use std::os::unix::fs::OpenOptionsExt;
            // The log of the latest run: what a `failed` phase points at.
            let _ = std::fs::remove_file(self.files.log());
            // O_APPEND: the child always writes at the end, so cutting the file back works.
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(rustix::fs::OFlags::APPEND.bits() as i32)
                .mode(0o600)
                .open(self.files.log())?
        };
        let mut cmd = tokio::process::Command::new(&bin);
        cmd.arg("run")
            .arg("--config")
            .arg(self.files.profile())
            .env_clear()
            .envs(allowed_env(&self.env))
            .env(KEY_VAR, &key)
            .env(AUTH_VAR, format!("Bearer {}", token.expose()))
            .current_dir(&self.files.dir)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true);
        let child = cmd
            .spawn()
            .map_err(|e| GatewayError::Config(format!("starting {} failed: {e}", bin.display())))?;
        let pid = child
            .id()
            .ok_or_else(|| GatewayError::Internal("tunnel-client exited at once".into()))?;
        let record = ChildRecord {
            pid,
            exe: std::fs::canonicalize(&bin).unwrap_or_else(|_| bin.clone()),
            start_time: proc_start_time(pid).unwrap_or(0),
        };
        write_private(
            &self.files.child(),
            &serde_json::to_string(&record).map_err(|e| GatewayError::Internal(e.to_string()))?,
        )?;
        let generation = {
            let mut g = self.inner();
            g.generation += 1;
            let generation = g.generation;
            g.running = Some(Running {
                child,
                record,
                generation,
            });
            g.status.last_error = None;
            generation
        };
        tracing::info!(pid, "started tunnel-client");
        self.set_status(Phase::Starting, Some(pid), None, None);
        tokio::spawn(self.clone().watch(bin, generation));
        Ok(())
    }

    /// Follows one child: its exit, and its health (every second while it starts, every ten
    /// once connected).
    async fn watch(self: Arc<Self>, bin: PathBuf, generation: u64) {
        loop {
            let connected = self.inner().status.phase == Phase::Connected;
            tokio::time::sleep(if connected {
                Duration::from_secs(10)
            } else {
                Duration::from_secs(1)
            })
            .await;
            let exited = {
                let mut g = self.inner();
                match g.running.as_mut() {
                    Some(r) if r.generation == generation => r.child.try_wait().ok().flatten(),
                    // Stopped, or replaced by a newer child.
                    _ => return,
                }
            };
            if let Some(code) = exited {
                let pid = {
                    let mut g = self.inner();
                    g.running.take().map(|r| r.record.pid)
                };
                let _ = std::fs::remove_file(self.files.child());
                tracing::warn!(?pid, %code, "tunnel-client exited");
                self.set_status(
                    Phase::Failed,
                    None,
                    None,
                    Some(format!(
                        "tunnel-client exited ({code}); see {}",
                        self.files.log().display()
                    )),
                );
                return;
            }
            self.bound_log();
            let (phase, health, error) = self.health(&bin).await;
            let pid = self.inner().running.as_ref().map(|r| r.record.pid);
            self.set_status_for(Some(generation), phase, pid, health, error);
        }
    }

    /// Cuts the child's log back to empty once it passes [`LOG_MAX_BYTES`].
    fn bound_log(&self) {
        let log = self.files.log();
        if std::fs::metadata(&log).is_ok_and(|m| m.len() > LOG_MAX_BYTES)
            && let Ok(f) = std::fs::OpenOptions::new().write(true).open(&log)
        {
            let _ = f.set_len(0);
        }
    }

    /// Readiness is the control-plane poll, not `/readyz` (SPEC §17).
    async fn health(&self, bin: &Path) -> (Phase, Option<Value>, Option<String>) {
        let mut cmd = tokio::process::Command::new(bin);
        cmd.args(["health", "--url-file"])
            .arg(self.files.health_url())
            .args(["--require-control-plane-poll", "--json"])
            .env_clear()
            .envs(allowed_env(&self.env))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        // Five seconds and 64 KiB: the answer is a small JSON object.
        let read = async {
            use tokio::io::AsyncReadExt as _;
            let mut child = cmd.spawn()?;
            let mut stdout = Vec::new();
            if let Some(out) = child.stdout.take() {
                out.take(HEALTH_MAX_BYTES).read_to_end(&mut stdout).await?;
            }
            let _ = child.kill().await;
            Ok::<_, std::io::Error>(stdout)
        };
        let stdout = match tokio::time::timeout(Duration::from_secs(5), read).await {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => return (Phase::Starting, None, Some(format!("tunnel-client health: {e}"))),
            Err(_) => {
                return (
                    Phase::Starting,
                    None,
                    Some("tunnel-client health did not answer in 5 s".into()),
                );
            }
        };
        let Ok(health) = serde_json::from_slice::<Value>(&stdout) else {
            return (
                Phase::Starting,
                None,
                Some("tunnel-client health printed no JSON".into()),
            );
        };
        let polled = health.pointer("/control_plane_poll/ok") == Some(&Value::Bool(true));
        if polled {
            (Phase::Connected, Some(health), None)
        } else {
            let why = health
                .pointer("/control_plane_poll/error")
                .and_then(Value::as_str)
                .map(|e| format!("not connected yet: {}", policy::text::escape(e)));
            (Phase::Starting, Some(health), why)
        }
    }

    /// Stops the child (SIGTERM, then SIGKILL after 5 s), audited when an operator asked.
    pub async fn stop(&self, operator: Option<&Operator>) -> Result<(), GatewayError> {
        let _turn = self.turn.lock().await;
        let running = self.inner().running.take();
        if let Some(mut r) = running {
            // Our own child, not yet reaped: its pid cannot belong to anyone else, so it is
            // signalled without the identity check an orphan needs.
            signal(r.record.pid, rustix::process::Signal::TERM);
            if tokio::time::timeout(Duration::from_secs(5), r.child.wait())
                .await
                .is_err()
            {
                let _ = r.child.kill().await;
            }
            tracing::info!(pid = r.record.pid, "stopped tunnel-client");
        }
        let _ = std::fs::remove_file(self.files.child());
        self.set_status(Phase::Stopped, None, None, None);
        if let Some(op) = operator {
            self.record(op, "tunnel.stop", None).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_api_key_file_is_read_bounded_and_checked() {
        // An endless file is refused after 4 KiB, not read to the end.
        let err = read_api_key(Path::new("/dev/zero")).unwrap_err();
        assert!(err.to_string().contains("over 4096 bytes"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("k");
        std::fs::write(&good, "sk-proj_abc-123\n").unwrap();
        assert_eq!(read_api_key(&good).unwrap(), "sk-proj_abc-123");
        std::fs::write(&good, "not a key!").unwrap();
        let err = read_api_key(&good).unwrap_err();
        assert!(
            !err.to_string().contains("not a key"),
            "the content is never echoed: {err}"
        );
    }

    #[test]
    fn tunnel_ids_are_tunnel_and_32_lowercase_hex() {
        assert!(valid_tunnel_id(&format!(
            "tunnel_{}",
            "0123456789abcdef".repeat(2)
        )));
        for bad in [
            "tunnel_",
            "tunnel_0123456789ABCDEF0123456789abcdef",
            "tunnel_0123456789abcdef0123456789abcde",
            "tunnel_0123456789abcdef0123456789abcdefa",
            "tunel_0123456789abcdef0123456789abcdef",
            "tunnel_0123456789abcdef0123456789abcdeg",
        ] {
            assert!(!valid_tunnel_id(bad), "{bad}");
        }
    }

    #[test]
    fn the_child_sees_only_allowed_variables() {
        let own: BTreeMap<String, String> = [
            ("PATH", "/bin"),
            ("HOME", "/h"),
            ("LOG_HTTP_RAW_UNSAFE", "1"),
            ("OPENAI_API_KEY", "sk"),
            ("MCP_EXTRA_HEADERS", "x"),
            ("VAULTGATE_TOKEN", "t"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let passed: Vec<&str> = allowed_env(&own).map(|(k, _)| k.as_str()).collect();
        assert_eq!(passed, ["HOME", "PATH"]);
    }

    #[test]
    fn the_profile_names_the_key_and_header_only_by_variable() {
        let files = Files {
            dir: PathBuf::from("/c/vg"),
        };
        let p = profile("tunnel_x", &files, "http://127.0.0.1:1/mcp");
        assert!(p.contains("api_key: \"env:CONTROL_PLANE_API_KEY\""), "{p}");
        assert!(
            p.contains("Authorization: \"env:VAULTGATE_TUNNEL_AUTHORIZATION\""),
            "{p}"
        );
        assert!(
            p.contains("- channel: main\n      url: \"http://127.0.0.1:1/mcp\""),
            "{p}"
        );
        assert!(p.contains("url_file: \"/c/vg/health.url\""), "{p}");
    }

    #[test]
    fn a_start_time_is_read_past_a_command_name_with_spaces_and_parentheses() {
        let me = std::process::id();
        assert!(proc_start_time(me).is_some());
        assert!(still_running(&ChildRecord {
            pid: me,
            exe: proc_exe(me).unwrap(),
            start_time: proc_start_time(me).unwrap(),
        }));
        assert!(!still_running(&ChildRecord {
            pid: me,
            exe: PathBuf::from("/bin/true"),
            start_time: proc_start_time(me).unwrap(),
        }));
    }
}
