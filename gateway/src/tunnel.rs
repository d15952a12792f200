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

/// The folder the private profile folder `<base>/vaultgate/mcp-tunnel/<gateway id>` goes under:
/// `$XDG_CACHE_HOME`, else `$HOME/.cache`.
fn cache_base(env: &BTreeMap<String, String>) -> Result<PathBuf, GatewayError> {
    env.get("XDG_CACHE_HOME")
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
        })
}

/// The folders vaultgate makes below the cache folder, the gateway's own last.
const LEVELS: [&str; 2] = ["vaultgate", "mcp-tunnel"];

/// Why the profile folder is not used, and what a person should do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Refused {
    what: String,
    next: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.next.is_empty() {
            write!(f, "{}", self.what)
        } else {
            write!(f, "{}; {}", self.what, self.next)
        }
    }
}

/// The user vaultgate runs as: what owns its folders and files, and runs its child.
fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// How a folder on the way is opened: without following a link, and (on Linux) without needing
/// read permission, so a folder the user may only search can be passed.
#[cfg(target_os = "linux")]
const DIR_FLAGS: rustix::fs::OFlags = rustix::fs::OFlags::PATH
    .union(rustix::fs::OFlags::DIRECTORY)
    .union(rustix::fs::OFlags::NOFOLLOW)
    .union(rustix::fs::OFlags::CLOEXEC);
#[cfg(not(target_os = "linux"))]
const DIR_FLAGS: rustix::fs::OFlags = rustix::fs::OFlags::RDONLY
    .union(rustix::fs::OFlags::DIRECTORY)
    .union(rustix::fs::OFlags::NOFOLLOW)
    .union(rustix::fs::OFlags::CLOEXEC);

fn mode(m: u32) -> rustix::fs::Mode {
    rustix::fs::Mode::from_bits_truncate(m as rustix::fs::RawMode)
}

/// The profile folder, opened and checked: its path (with no link in it), which the child is
/// given, and a handle on the folder itself, relative to which vaultgate opens every file in it
/// (never following a link), so nothing can be swapped between a check and a use.
struct Files {
    dir: PathBuf,
    fd: std::fs::File,
}

/// SECURITY(T-TUNNEL4): opens the profile folder `<base>/vaultgate/mcp-tunnel/<gateway id>`;
/// with `create`, makes every missing folder on the way 0700 whatever the umask, and the profile
/// folder 0700 if others may read it (`None`: it does not exist, and `create` is false; without
/// `create` nothing is changed).
///
/// The folder the user named (`base`, or the nearest folder above it that exists) is opened
/// following links, as the user chose it; from there down every level is opened relative to the
/// one above without following a link, and used only if it is owned by this user (a folder above
/// the profile folder may also be root's) and nobody else can write to it (a folder above the
/// profile folder may be sticky, as `/tmp` is, where nobody can move another's entries). So
/// nobody else can replace the folder or any folder on the way to it, which matters because the
/// child opens its files by path. Folders above `base` are the user's choice and not checked (as
/// OpenSSH's StrictModes stops at the home folder). A refused folder is left exactly as it is.
fn open_profile(base: &Path, gateway_id: &str, create: bool) -> Result<Option<Files>, Refused> {
    use rustix::fs::{AtFlags, FileType, Mode, OFlags};
    use rustix::io::Errno;
    use std::ffi::OsStr;
    use std::os::unix::fs::MetadataExt;
    let leaf = base.join(LEVELS[0]).join(LEVELS[1]).join(gateway_id);
    // What is wrong with `at` (the profile folder itself when `is_leaf`, else a folder on the way).
    let refuse = |at: &Path, is_leaf: bool, problem: String, next: String| Refused {
        what: if is_leaf {
            format!("the tunnel profile folder {} {problem}", leaf.display())
        } else {
            format!(
                "the tunnel profile folder {} cannot be used: {} {problem}",
                leaf.display(),
                at.display()
            )
        },
        next,
    };
    if gateway_id.is_empty() || gateway_id == "." || gateway_id == ".." || gateway_id.contains(['/', '\0']) {
        return Err(Refused {
            what: format!("the gateway id {gateway_id:?} is not a folder name"),
            next: "restore gateway_id in gateway.toml".into(),
        });
    }
    // The part of `base` that exists (its links resolved), and the names still to make below it.
    let parts: Vec<std::path::Component<'_>> = base.components().collect();
    let (found, missing) = (1..=parts.len())
        .rev()
        .find_map(|k| {
            let prefix: PathBuf = parts[..k].iter().collect();
            std::fs::canonicalize(prefix).ok().map(|c| (c, &parts[k..]))
        })
        .ok_or_else(|| refuse(base, false, "cannot be found".into(), String::new()))?;
    let mut names: Vec<&OsStr> = Vec::new();
    for c in missing {
        let std::path::Component::Normal(n) = c else {
            return Err(refuse(
                base,
                false,
                "is not a plain path (it holds `..`)".into(),
                "set XDG_CACHE_HOME to a plain absolute path".into(),
            ));
        };
        names.push(n);
    }
    names.extend(LEVELS.iter().map(OsStr::new));
    names.push(OsStr::new(gateway_id));

    let open_dir = |parent: &std::fs::File, name: &OsStr| {
        rustix::fs::openat(parent, name, DIR_FLAGS, Mode::empty()).map(std::fs::File::from)
    };
    let me = euid();
    // Whether `dir` (open, at `at`) may be used: see above.
    let check = |dir: &std::fs::File, at: &Path, is_leaf: bool| -> Result<u32, Refused> {
        let meta = dir
            .metadata()
            .map_err(|e| refuse(at, is_leaf, format!("cannot be examined: {e}"), String::new()))?;
        let perm = meta.mode() & 0o7777;
        let shown = at.display();
        if is_leaf && meta.uid() != me {
            return Err(refuse(
                at,
                is_leaf,
                format!("is owned by uid {}, not by this user ({me})", meta.uid()),
                format!("remove it (vaultgate creates it again), or make it yours: chown {me} {shown}"),
            ));
        }
        if !is_leaf && meta.uid() != me && meta.uid() != 0 {
            return Err(refuse(
                at,
                is_leaf,
                format!(
                    "is owned by uid {}, neither this user ({me}) nor root",
                    meta.uid()
                ),
                "set XDG_CACHE_HOME to a folder of your own".into(),
            ));
        }
        if perm & 0o022 != 0 && (is_leaf || perm & 0o1000 == 0) {
            return Err(refuse(
                at,
                is_leaf,
                format!("is writable by other users (mode {perm:o})"),
                format!("chmod go-w {shown}"),
            ));
        }
        Ok(perm)
    };

    // Exactly 0700, whatever the umask left.
    let make_private = |parent: &std::fs::File, name: &std::ffi::OsStr, path: &Path, is_leaf: bool| {
        rustix::fs::chmodat(parent, name, mode(0o700), AtFlags::empty()).map_err(|e| {
            refuse(
                path,
                is_leaf,
                format!("cannot be made private: {e}"),
                String::new(),
            )
        })
    };
    let mut path = found.clone();
    let mut parent = rustix::fs::openat(
        rustix::fs::CWD,
        &found,
        DIR_FLAGS.difference(OFlags::NOFOLLOW),
        Mode::empty(),
    )
    .map(std::fs::File::from)
    .map_err(|e| refuse(&found, false, format!("cannot be opened: {e}"), String::new()))?;
    check(&parent, &path, false)?;
    for (i, &name) in names.iter().enumerate() {
        let is_leaf = i + 1 == names.len();
        path.push(name);
        let dir = match open_dir(&parent, name) {
            Ok(dir) => dir,
            Err(e) if e == Errno::NOENT && !create => return Ok(None),
            Err(e) if e == Errno::NOENT => {
                match rustix::fs::mkdirat(&parent, name, mode(0o700)) {
                    // The umask may have taken bits away: exactly 0700. The folder above is
                    // checked, so nobody else can have put something else under this name.
                    Ok(()) => make_private(&parent, name, &path, is_leaf)?,
                    Err(e) if e == Errno::EXIST => {}
                    Err(e) => {
                        return Err(refuse(
                            &path,
                            is_leaf,
                            format!("cannot be created: {e}"),
                            format!("create it: mkdir -m 700 {}", path.display()),
                        ));
                    }
                }
                open_dir(&parent, name)
                    .map_err(|e| refuse(&path, is_leaf, format!("cannot be opened: {e}"), String::new()))?
            }
            Err(e) => {
                let kind = rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW)
                    .map(|st| FileType::from_raw_mode(st.st_mode));
                return Err(match kind {
                    Ok(FileType::Symlink) => refuse(
                        &path,
                        is_leaf,
                        "is a symbolic link".into(),
                        format!(
                            "remove the link ({}); vaultgate creates the folder itself",
                            path.display()
                        ),
                    ),
                    Ok(FileType::Directory) | Err(_) => {
                        refuse(&path, is_leaf, format!("cannot be opened: {e}"), String::new())
                    }
                    Ok(_) => refuse(
                        &path,
                        is_leaf,
                        "is not a folder".into(),
                        format!("remove {}", path.display()),
                    ),
                });
            }
        };
        let perm = check(&dir, &path, is_leaf)?;
        if is_leaf {
            if create && perm != 0o700 {
                // The user's own, and nobody else's to write: take back what others may read
                // (only when asked to make it: `status` and `doctor` change nothing).
                make_private(&parent, name, &path, is_leaf)?;
            }
            return Ok(Some(Files { dir: path, fd: dir }));
        }
        parent = dir;
    }
    Err(refuse(&path, true, "cannot be reached".into(), String::new()))
}

/// At most this much of `child.json` or `status.json` is read.
const RECORD_MAX_BYTES: u64 = 64 * 1024;

impl Files {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
    fn profile(&self) -> PathBuf {
        self.path(PROFILE)
    }
    fn health_url(&self) -> PathBuf {
        self.path(HEALTH_URL)
    }
    fn log(&self) -> PathBuf {
        self.path(LOG)
    }

    /// Removes `name` from the folder (never anything a link leads to).
    fn remove(&self, name: &str) {
        let _ = rustix::fs::unlinkat(&self.fd, name, rustix::fs::AtFlags::empty());
    }

    /// Creates `name` anew (a leftover is removed first), exactly 0600 whatever the umask.
    fn create(&self, name: &str, append: bool) -> std::io::Result<std::fs::File> {
        use rustix::fs::OFlags;
        self.remove(name);
        let mut flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        if append {
            flags |= OFlags::APPEND;
        }
        let fd = rustix::fs::openat(&self.fd, name, flags, mode(0o600))?;
        rustix::fs::fchmod(&fd, mode(0o600))?;
        Ok(std::fs::File::from(fd))
    }

    /// Writes `text` to `name` with mode 0600, atomically.
    fn write(&self, name: &str, text: &str) -> std::io::Result<()> {
        let tmp = format!("{name}.tmp");
        let mut f = self.create(&tmp, false)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        rustix::fs::renameat(&self.fd, &tmp, &self.fd, name)?;
        Ok(())
    }

    /// SECURITY(T-TUNNEL5): `name` as vaultgate wrote it: a regular file (not followed if a
    /// link), the user's own, mode 0600, at most 64 KiB. `Ok(None)`: there is none; `Err`: why
    /// what is there is not taken for vaultgate's.
    fn read_own(&self, name: &str) -> Result<Option<Vec<u8>>, String> {
        use rustix::fs::OFlags;
        use std::io::Read as _;
        use std::os::unix::fs::MetadataExt;
        let path = self.path(name);
        let shown = path.display();
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(&self.fd, name, flags, rustix::fs::Mode::empty()) {
            Ok(fd) => fd,
            Err(e) if e == rustix::io::Errno::NOENT => return Ok(None),
            Err(e) if e == rustix::io::Errno::LOOP => return Err(format!("{shown} is a symbolic link")),
            Err(e) => return Err(format!("{shown} cannot be opened: {e}")),
        };
        let f = std::fs::File::from(fd);
        let meta = f.metadata().map_err(|e| format!("{shown}: {e}"))?;
        let me = euid();
        if !meta.is_file() {
            return Err(format!("{shown} is not a regular file"));
        }
        if meta.uid() != me {
            return Err(format!(
                "{shown} is owned by uid {}, not by this user ({me})",
                meta.uid()
            ));
        }
        if meta.mode() & 0o7777 != 0o600 {
            return Err(format!("{shown} has mode {:o}, not 600", meta.mode() & 0o7777));
        }
        let mut bytes = Vec::new();
        f.take(RECORD_MAX_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("{shown}: {e}"))?;
        if bytes.len() as u64 > RECORD_MAX_BYTES {
            return Err(format!("{shown} is over {RECORD_MAX_BYTES} bytes"));
        }
        Ok(Some(bytes))
    }

    /// The child on record, if `child.json` is vaultgate's own record of one.
    fn child_record(&self) -> Result<Option<ChildRecord>, String> {
        let Some(bytes) = self.read_own(CHILD)? else {
            return Ok(None);
        };
        let rec: ChildRecord = serde_json::from_slice(&bytes).map_err(|e| {
            format!(
                "{} is not a record of vaultgate's: {e}",
                self.path(CHILD).display()
            )
        })?;
        if rec.mark.len() < 32 {
            return Err(format!("{} holds no mark", self.path(CHILD).display()));
        }
        Ok(Some(rec))
    }

    /// An exclusive, non-blocking `flock` on `supervisor.lock`, released when the file is
    /// dropped (or the process dies).
    fn lock(&self) -> Option<std::fs::File> {
        use rustix::fs::OFlags;
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, LOCK, flags, mode(0o600)).ok()?;
        let _ = rustix::fs::fchmod(&fd, mode(0o600));
        rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive).ok()?;
        Some(std::fs::File::from(fd))
    }
}

const PROFILE: &str = "profile.yaml";
const HEALTH_URL: &str = "health.url";
const PID_FILE: &str = "tunnel-client.pid";
const CHILD: &str = "child.json";
const STATUS: &str = "status.json";
const LOG: &str = "tunnel-client.log";
const LOCK: &str = "supervisor.lock";

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
fn profile(tunnel_id: &str, dir: &Path, mcp_url: &str) -> String {
    let path = |name: &str| q(&dir.join(name).to_string_lossy());
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
        path(HEALTH_URL),
        path(PID_FILE),
        q(mcp_url),
        q(&format!("env:{AUTH_VAR}")),
    )
}

fn allowed_env(own: &BTreeMap<String, String>) -> impl Iterator<Item = (&String, &String)> {
    own.iter().filter(|(k, _)| ALLOWED_ENV.contains(&k.as_str()))
}

// ---- the child process on record ---------------------------------------------------------------

/// What identifies the child vaultgate started, across a crash of `serve`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ChildRecord {
    pid: u32,
    /// The program vaultgate ran (`tunnel-client`, its links resolved): the path, and the file
    /// itself by device and inode.
    exe: PathBuf,
    exe_dev: u64,
    exe_ino: u64,
    /// Clock ticks since boot (`/proc/<pid>/stat` field 22).
    start_time: u64,
    /// The value of [`MARK_VAR`] in the child's environment, new at every start.
    mark: String,
}

fn proc_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The real, effective, saved and file-system uids of `pid` (`/proc/<pid>/status`).
fn proc_uids(pid: u32) -> Option<Vec<u32>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    let uids: Vec<u32> = line
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    (!uids.is_empty()).then_some(uids)
}

/// At most this much of a process's command line is read.
const CMDLINE_MAX_BYTES: u64 = 64 * 1024;

/// Whether `pid` runs the file `dev`/`ino`: as its executable (`/proc/<pid>/exe`), or, a script,
/// as the file its interpreter was given (one of the first two arguments, an absolute path:
/// `python3 /path/tunnel-client run …`, or `/usr/bin/env python3 /path/tunnel-client …`).
fn proc_runs(pid: u32, dev: u64, ino: u64) -> bool {
    use std::io::Read as _;
    use std::os::unix::fs::MetadataExt;
    let same = |p: &Path| std::fs::metadata(p).is_ok_and(|m| (m.dev(), m.ino()) == (dev, ino));
    if same(Path::new(&format!("/proc/{pid}/exe"))) {
        return true;
    }
    let mut cmdline = Vec::new();
    if std::fs::File::open(format!("/proc/{pid}/cmdline"))
        .and_then(|f| f.take(CMDLINE_MAX_BYTES).read_to_end(&mut cmdline))
        .is_err()
    {
        return false;
    }
    cmdline.split(|b| *b == 0).skip(1).take(2).any(|arg| {
        use std::os::unix::ffi::OsStrExt;
        let p = Path::new(std::ffi::OsStr::from_bytes(arg));
        p.is_absolute() && same(p)
    })
}

/// At most this much of a process's environment is searched for the mark.
const ENVIRON_MAX_BYTES: u64 = 256 * 1024;

/// Whether the environment `pid` started with holds `MARK_VAR=mark`.
fn proc_has_mark(pid: u32, mark: &str) -> bool {
    use std::io::Read as _;
    let want = format!("{MARK_VAR}={mark}");
    let mut env = Vec::new();
    std::fs::File::open(format!("/proc/{pid}/environ"))
        .and_then(|f| f.take(ENVIRON_MAX_BYTES).read_to_end(&mut env))
        .is_ok_and(|_| env.split(|b| *b == 0).any(|v| v == want.as_bytes()))
}

/// The record of a child just started from `exe`: `None` when it cannot be read (it has
/// already exited, or there is no `/proc`).
fn identify(pid: u32, mark: &str, exe: &Path) -> Option<ChildRecord> {
    use std::os::unix::fs::MetadataExt;
    let exe = std::fs::canonicalize(exe).ok()?;
    let meta = std::fs::metadata(&exe).ok()?;
    Some(ChildRecord {
        pid,
        exe,
        exe_dev: meta.dev(),
        exe_ino: meta.ino(),
        start_time: proc_start_time(pid)?,
        mark: mark.to_owned(),
    })
}

/// SECURITY(T-TUNNEL5): why the process `rec` names is not the child vaultgate started (`None`:
/// it is). All of these must hold: it runs since the recorded time (a reused pid fails this), as
/// this user (every uid of it), the recorded executable (the same file), and carries the mark
/// vaultgate put in its child's environment (a process someone else started does not).
fn not_ours(rec: &ChildRecord) -> Option<String> {
    let pid = rec.pid;
    if proc_start_time(pid) != Some(rec.start_time) {
        return Some(format!("pid {pid} does not run since the recorded time"));
    }
    let me = euid();
    match proc_uids(pid) {
        Some(uids) if uids.iter().all(|u| *u == me) => {}
        Some(uids) => {
            return Some(format!(
                "pid {pid} runs as uids {uids:?}, not as this user ({me})"
            ));
        }
        None => return Some(format!("the user of pid {pid} cannot be read")),
    }
    if !proc_runs(pid, rec.exe_dev, rec.exe_ino) {
        return Some(format!(
            "pid {pid} does not run the recorded {}",
            rec.exe.display()
        ));
    }
    if !proc_has_mark(pid, &rec.mark) {
        return Some(format!("pid {pid} does not carry the mark of vaultgate's child"));
    }
    None
}

/// Signals vaultgate's own child, started by this process and not yet reaped (so its pid
/// cannot belong to anyone else).
fn signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

/// SECURITY(T-TUNNEL5): sends `sig` to the process `rec` names only if it is the child vaultgate
/// started ([`not_ours`]), checked right before. A pidfd is taken first and the signal sent
/// through it: should the process end and its pid be reused after the check, the signal reaches
/// nobody. Whether it was sent.
#[cfg(target_os = "linux")]
fn signal_if_ours(rec: &ChildRecord, sig: rustix::process::Signal) -> bool {
    let Some(pid) = i32::try_from(rec.pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    let Ok(pidfd) = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) else {
        return false;
    };
    if let Some(why) = not_ours(rec) {
        tracing::debug!(pid = rec.pid, %why, "not signalled: not vaultgate's child");
        return false;
    }
    rustix::process::pidfd_send_signal(&pidfd, sig).is_ok()
}

/// Without `/proc` and pidfds the identity of an orphan cannot be proven: it is never signalled.
#[cfg(not(target_os = "linux"))]
fn signal_if_ours(_rec: &ChildRecord, _sig: rustix::process::Signal) -> bool {
    false
}

/// SIGTERM, then SIGKILL after `grace`, to the process `rec` names while it is vaultgate's child
/// (checked before each signal).
async fn end_process(rec: &ChildRecord, grace: Duration) {
    if !signal_if_ours(rec, rustix::process::Signal::TERM) {
        return;
    }
    let deadline = tokio::time::Instant::now() + grace;
    while tokio::time::Instant::now() < deadline {
        if not_ours(rec).is_some() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    signal_if_ours(rec, rustix::process::Signal::KILL);
}

/// Cuts the child's log back to empty once it passes [`LOG_MAX_BYTES`].
fn bound_log(files: &Files) {
    use rustix::fs::OFlags;
    let flags = OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    if let Ok(fd) = rustix::fs::openat(&files.fd, LOG, flags, rustix::fs::Mode::empty()) {
        let f = std::fs::File::from(fd);
        if f.metadata().is_ok_and(|m| m.is_file() && m.len() > LOG_MAX_BYTES) {
            let _ = f.set_len(0);
        }
    }
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
    tier: engine::Tier,
    vaults: Vec<String>,
    env: &BTreeMap<String, String>,
) -> Result<SetupOut, GatewayError> {
    let key = read_api_key(key_file)?;
    let config = home.load_config()?;
    let found = resolve(&config.tunnel, env.get("PATH").map(String::as_str));
    let command = found.map(|p| std::fs::canonicalize(&p).unwrap_or(p));
    write_private(&home.tunnel_key_path(), &format!("{key}\n"))?;
    let core = crate::cli::open_core(home)?;
    let credential = core
        .settings()
        .tunnel_setup(operator, tunnel_id, command.clone(), tier, vaults)?;
    Ok(SetupOut { credential, command })
}

// ---- the supervisor (inside `serve`) ------------------------------------------------------------

struct Running {
    child: tokio::process::Child,
    pid: u32,
    generation: u64,
}

/// Runs `tunnel-client` as the child of `serve`, one at a time.
pub struct Supervisor {
    core: Arc<Core>,
    /// The profile folder, opened and checked when `serve` started; or why it is not used (then
    /// the tunnel does not start, and nothing on record is ended).
    files: Result<Files, Refused>,
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
        let base = cache_base(&env)?;
        let files = match open_profile(&base, &core.config().gateway_id, true) {
            Ok(Some(f)) => Ok(f),
            Ok(None) => Err(Refused {
                what: "the tunnel profile folder was not made".into(),
                next: String::new(),
            }),
            Err(r) => Err(r),
        };
        core.refresh();
        let config = core.config();
        let status = status(&core.home, &config, &env);
        let lock = match &files {
            Ok(f) => {
                let lock = f.lock();
                if lock.is_none() {
                    tracing::warn!(
                        "another serve of this home supervises the tunnel; this one leaves it alone"
                    );
                }
                lock
            }
            Err(r) => {
                tracing::warn!(reason = %r, "the tunnel profile folder is not used: the tunnel does not start");
                None
            }
        };
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

    /// SECURITY(T-TUNNEL2, T-TUNNEL5): ends the child an earlier `serve` left running, only
    /// if the record is vaultgate's own (a regular file of this user's, 0600, in a profile folder
    /// nobody else can write to) and the process it names is still that child ([`not_ours`]).
    /// Anything else is left alone, and logged.
    async fn sweep_orphan(&self) {
        let Ok(files) = &self.files else {
            return;
        };
        if self.lock.is_none() {
            return;
        }
        match files.child_record() {
            Ok(None) => {}
            Ok(Some(rec)) => {
                match not_ours(&rec) {
                    None => {
                        tracing::warn!(pid = rec.pid, "ending the tunnel-client left by an earlier serve");
                        end_process(&rec, Duration::from_secs(5)).await;
                    }
                    Some(why) => tracing::info!(%why, "the recorded tunnel-client no longer runs"),
                }
                files.remove(CHILD);
            }
            Err(why) => {
                tracing::warn!(%why, "child.json is not vaultgate's record: ignored, nothing is signalled");
            }
        }
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
            .unwrap_or_else(|_| self.core.config().tunnel.clone());
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
        // Only the supervisor of the home records (another serve's status is not this one's).
        if let Ok(files) = &self.files
            && self.lock.is_some()
            && let Err(e) = files.write(STATUS, &text)
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
            core.settings()
                .record_operator_action(&op, event, "tunnel", failed.as_ref())
        })
        .await
        .map_err(|_| GatewayError::Internal("the audit worker stopped".into()))?
    }

    async fn start_inner(self: &Arc<Self>) -> Result<(), GatewayError> {
        let files = self
            .files
            .as_ref()
            .map_err(|r| GatewayError::Config(format!("{r}; then restart `vaultgate serve`")))?;
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
        let token = tokio::task::spawn_blocking(move || core.settings().tunnel_token())
            .await
            .map_err(|_| GatewayError::Internal("the token worker stopped".into()))??;
        files.remove(HEALTH_URL);
        files.write(PROFILE, &profile(&tunnel_id, &files.dir, &self.mcp_url))?;
        // The log of the latest run: what a `failed` phase points at. O_APPEND: the child always
        // writes at the end, so cutting the file back works.
        let log = files.create(LOG, true)?;
        let mark = uuid::Uuid::new_v4().simple().to_string();
        let mut cmd = tokio::process::Command::new(&bin);
        cmd.arg("run")
            .arg("--config")
            .arg(files.profile())
            .env_clear()
            .envs(allowed_env(&self.env))
            .env(KEY_VAR, &key)
            .env(AUTH_VAR, format!("Bearer {}", token.expose()))
            .env(MARK_VAR, &mark)
            .current_dir(&files.dir)
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
        match identify(pid, &mark, &bin) {
            Some(record) => files.write(
                CHILD,
                &serde_json::to_string(&record).map_err(|e| GatewayError::Internal(e.to_string()))?,
            )?,
            None => {
                files.remove(CHILD);
                tracing::warn!(
                    pid,
                    "tunnel-client cannot be identified: a crash would leave it running"
                );
            }
        }
        let generation = {
            let mut g = self.inner();
            g.generation += 1;
            let generation = g.generation;
            g.running = Some(Running {
                child,
                pid,
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
        let Ok(files) = &self.files else {
            return;
        };
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
                    g.running.take().map(|r| r.pid)
                };
                files.remove(CHILD);
                tracing::warn!(?pid, %code, "tunnel-client exited");
                self.set_status(
                    Phase::Failed,
                    None,
                    None,
                    Some(format!(
                        "tunnel-client exited ({code}); see {}",
                        files.log().display()
                    )),
                );
                return;
            }
            bound_log(files);
            let (phase, health, error) = self.health(files, &bin).await;
            let pid = self.inner().running.as_ref().map(|r| r.pid);
            self.set_status_for(Some(generation), phase, pid, health, error);
        }
    }

    /// Readiness is the control-plane poll, not `/readyz` (docs/contract.md#the-chatgpt-tunnel).
    async fn health(&self, files: &Files, bin: &Path) -> (Phase, Option<Value>, Option<String>) {
        let mut cmd = tokio::process::Command::new(bin);
        cmd.args(["health", "--url-file"])
            .arg(files.health_url())
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
            // Our own child, and `try_wait` says it is not reaped: its pid cannot belong to
            // anyone else, so it is signalled without the identity check an orphan needs.
            if matches!(r.child.try_wait(), Ok(None)) {
                signal(r.pid, rustix::process::Signal::TERM);
            }
            if tokio::time::timeout(Duration::from_secs(5), r.child.wait())
                .await
                .is_err()
            {
                let _ = r.child.kill().await;
            }
            tracing::info!(pid = r.pid, "stopped tunnel-client");
        }
        if let Ok(files) = &self.files
            && self.lock.is_some()
        {
            files.remove(CHILD);
        }
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
