//! ChatGPT's Secure MCP Tunnel (docs/contract.md#the-chatgpt-tunnel): vaultgate supervises OpenAI's `tunnel-client` so
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

mod child;
mod profile;
mod supervisor;

use child::*;
use profile::*;
pub use supervisor::Supervisor;

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
/// A random value, new at every start, by which a later `serve` knows the child as vaultgate's
/// (SECURITY(T-TUNNEL5)): a process someone else started does not carry it.
const MARK_VAR: &str = "VAULTGATE_TUNNEL_CHILD";
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

/// `tunnel status --json` (docs/contract.md#the-chatgpt-tunnel).
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
/// record, and whether the child it names still runs. A profile folder that cannot be used is
/// `failed`, with the reason as the last error (docs/contract.md#the-chatgpt-tunnel).
pub fn status(home: &Home, config: &engine::home::Config, env: &BTreeMap<String, String>) -> Status {
    let command = resolve(&config.tunnel, env.get("PATH").map(String::as_str));
    let set_up = config.tunnel.tunnel_id.is_some() && home.tunnel_key_path().exists();
    let mut s = Status {
        phase: Phase::Stopped,
        pid: None,
        health: None,
        last_error: None,
        command: None,
        install: None,
        set_up,
    };
    match cache_base(env).map(|base| open_profile(&base, &config.gateway_id, false)) {
        Err(_) | Ok(Ok(None)) => {}
        Ok(Err(refused)) => {
            s.phase = Phase::Failed;
            s.last_error = Some(refused.to_string());
        }
        Ok(Ok(Some(files))) => {
            let recorded = files
                .read_own(STATUS)
                .ok()
                .flatten()
                .and_then(|b| serde_json::from_slice::<Status>(&b).ok());
            if let Some(mut r) = recorded {
                // A record of a running child counts only while that child runs.
                if matches!(r.phase, Phase::Starting | Phase::Connected) {
                    let live = files
                        .child_record()
                        .ok()
                        .flatten()
                        .is_some_and(|c| not_ours(&c).is_none());
                    if !live {
                        r.phase = Phase::Stopped;
                        r.pid = None;
                    }
                }
                s = r;
            }
        }
    }
    s.set_up = set_up;
    with_lookup(s, command)
}

/// `vaultgate doctor`'s line on the profile folder (docs/contract.md#the-command-line, docs/contract.md#the-chatgpt-tunnel): fail when it cannot be used.
pub fn doctor_check(config: &engine::home::Config, env: &BTreeMap<String, String>) -> engine::doctor::Check {
    use engine::doctor::{Check, Status};
    let check = |status, what: String, next: String| Check { status, what, next };
    let base = match cache_base(env) {
        Ok(b) => b,
        Err(e) => {
            return check(
                Status::Fail,
                format!("tunnel profile folder: {e}"),
                "set HOME".into(),
            );
        }
    };
    let dir = base.join(LEVELS[0]).join(LEVELS[1]).join(&config.gateway_id);
    match open_profile(&base, &config.gateway_id, false) {
        Ok(Some(f)) => check(
            Status::Ok,
            format!(
                "tunnel profile folder {}: this user's, nobody else can write to it",
                f.dir.display()
            ),
            String::new(),
        ),
        Ok(None) => check(
            Status::Ok,
            format!(
                "tunnel profile folder {}: not made yet (serve makes it)",
                dir.display()
            ),
            String::new(),
        ),
        Err(r) => check(Status::Fail, r.what, r.next),
    }
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

/// `vaultgate tunnel setup` (docs/contract.md#the-chatgpt-tunnel).
pub fn setup(
    home: &Home,
    operator: &Operator,
    tunnel_id: &str,
    key_file: &Path,
    grant: engine::tunnel::TunnelGrant,
    env: &BTreeMap<String, String>,
) -> Result<SetupOut, GatewayError> {
    let key = read_api_key(key_file)?;
    let config = home.load_config()?;
    let found = resolve(&config.tunnel, env.get("PATH").map(String::as_str));
    let command = found.map(|p| std::fs::canonicalize(&p).unwrap_or(p));
    let core = crate::cli::open_core(home)?;
    let credential = core
        .settings()
        .tunnel_setup(operator, tunnel_id, command.clone(), grant)?;
    // Only after the change is on record: a refused setup leaves no new key behind.
    write_private(&home.tunnel_key_path(), &format!("{key}\n"))?;
    Ok(SetupOut { credential, command })
}

// ---- the supervisor (inside `serve`) ------------------------------------------------------------

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
        let p = profile("tunnel_x", Path::new("/c/vg"), "http://127.0.0.1:1/mcp");
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

    fn perm(p: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    fn set_perm(p: &Path, m: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    }

    #[test]
    fn the_profile_folder_is_made_private_and_refused_when_it_is_not() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap().join("cache/xdg");
        // Not there, not asked to make it: nothing is made.
        assert!(open_profile(&base, "vg-1", false).unwrap().is_none());
        assert!(!base.exists());
        let f = open_profile(&base, "vg-1", true).unwrap().unwrap();
        let leaf = base.join("vaultgate/mcp-tunnel/vg-1");
        assert_eq!(f.dir, leaf);
        for d in leaf.ancestors().take(5) {
            assert_eq!(perm(d), 0o700, "{}", d.display());
        }
        // Its files are made 0600 and read back only as such.
        f.write(CHILD, "{}").unwrap();
        assert_eq!(perm(&leaf.join(CHILD)), 0o600);
        assert_eq!(f.read_own(CHILD).unwrap().unwrap(), b"{}");
        set_perm(&leaf.join(CHILD), 0o644);
        let why = f.read_own(CHILD).unwrap_err();
        assert!(why.contains("has mode 644, not 600"), "{why}");
        std::fs::remove_file(leaf.join(CHILD)).unwrap();
        std::fs::write(tmp.path().join("elsewhere.json"), "{}").unwrap();
        set_perm(&tmp.path().join("elsewhere.json"), 0o600);
        std::os::unix::fs::symlink(tmp.path().join("elsewhere.json"), leaf.join(CHILD)).unwrap();
        let why = f.read_own(CHILD).unwrap_err();
        assert!(why.contains("is a symbolic link"), "{why}");
        assert!(f.read_own(STATUS).unwrap().is_none());
        drop(f);

        // Readable by others: taken back (only when making it). Writable by others: refused and
        // left as it is.
        set_perm(&leaf, 0o755);
        open_profile(&base, "vg-1", false).unwrap().unwrap();
        assert_eq!(perm(&leaf), 0o755);
        open_profile(&base, "vg-1", true).unwrap().unwrap();
        assert_eq!(perm(&leaf), 0o700);
        set_perm(&leaf, 0o770);
        let r = open_profile(&base, "vg-1", true).err().unwrap();
        assert!(r.what.contains("is writable by other users (mode 770)"), "{r}");
        assert_eq!(perm(&leaf), 0o770);
        set_perm(&leaf, 0o700);
        let above = base.join("vaultgate");
        set_perm(&above, 0o777);
        let r = open_profile(&base, "vg-1", true).err().unwrap();
        assert!(
            r.what
                .contains(&format!("cannot be used: {} is writable", above.display())),
            "{r}"
        );
        // Sticky, as /tmp is: nobody moves another's entries, so a folder above may be so.
        set_perm(&above, 0o1777);
        open_profile(&base, "vg-1", true).unwrap().unwrap();
        set_perm(&above, 0o700);

        // A symlink in its place, to a folder that looks right: refused, nothing written there.
        let other = tmp.path().join("other");
        std::fs::create_dir(&other).unwrap();
        set_perm(&other, 0o700);
        std::fs::remove_dir_all(&leaf).unwrap();
        std::os::unix::fs::symlink(&other, &leaf).unwrap();
        for create in [false, true] {
            let r = open_profile(&base, "vg-1", create).err().unwrap();
            assert!(r.what.contains("is a symbolic link"), "{r}");
        }
        assert!(std::fs::read_dir(&other).unwrap().next().is_none());
        // A symlink on the way: refused too.
        std::fs::remove_file(&leaf).unwrap();
        let mcp = base.join("vaultgate/mcp-tunnel");
        std::fs::rename(&mcp, tmp.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("moved"), &mcp).unwrap();
        let r = open_profile(&base, "vg-1", true).err().unwrap();
        assert!(
            r.what.contains("cannot be used") && r.what.contains("is a symbolic link"),
            "{r}"
        );

        for bad in ["", ".", "..", "a/b"] {
            assert!(open_profile(&base, bad, true).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_process_is_ours_only_as_started_with_the_mark() {
        let mark = "0123456789abcdef0123456789abcdef";
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env(MARK_VAR, mark)
            .spawn()
            .unwrap();
        // A vfork'd spawn returns while the kernel may still be laying out the new environment.
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while !proc_has_mark(child.id(), mark) && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        let sleep = std::fs::read_link(format!("/proc/{}/exe", child.id())).unwrap();
        let rec = identify(child.id(), mark, &sleep).unwrap();
        assert_eq!(not_ours(&rec), None);
        let mut other = rec.clone();
        other.start_time += 1;
        assert!(not_ours(&other).unwrap().contains("since the recorded time"));
        let mut other = rec.clone();
        other.exe_ino += 1;
        assert!(not_ours(&other).unwrap().contains("does not run the recorded"));
        let mut other = rec.clone();
        other.mark = "f".repeat(32);
        assert!(not_ours(&other).unwrap().contains("mark"));
        // This test process: its start time is read past a command name with spaces and
        // parentheses, and it carries no mark.
        let own = std::fs::read_link("/proc/self/exe").unwrap();
        let me = identify(std::process::id(), mark, &own).unwrap();
        assert!(not_ours(&me).unwrap().contains("mark"));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(not_ours(&rec).is_some(), "a reaped child is not ours to signal");
    }
}
