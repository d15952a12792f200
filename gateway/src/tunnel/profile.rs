//! The tunnel's private profile folder (SECURITY(T-TUNNEL4)): every level opened no-follow, made 0700, owned by this user; the files in it and the profile `tunnel-client` reads.

use super::*;

/// The folder the private profile folder `<base>/vaultgate/mcp-tunnel/<gateway id>` goes under:
/// `$XDG_CACHE_HOME`, else `$HOME/.cache`.
pub(crate) fn cache_base(env: &BTreeMap<String, String>) -> Result<PathBuf, GatewayError> {
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
pub(crate) const LEVELS: [&str; 2] = ["vaultgate", "mcp-tunnel"];

/// Why the profile folder is not used, and what a person should do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    pub(crate) what: String,
    pub(crate) next: String,
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
pub(crate) fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// How a folder on the way is opened: without following a link, and (on Linux) without needing
/// read permission, so a folder the user may only search can be passed.
#[cfg(target_os = "linux")]
pub(crate) const DIR_FLAGS: rustix::fs::OFlags = rustix::fs::OFlags::PATH
    .union(rustix::fs::OFlags::DIRECTORY)
    .union(rustix::fs::OFlags::NOFOLLOW)
    .union(rustix::fs::OFlags::CLOEXEC);

#[cfg(not(target_os = "linux"))]
pub(crate) const DIR_FLAGS: rustix::fs::OFlags = rustix::fs::OFlags::RDONLY
    .union(rustix::fs::OFlags::DIRECTORY)
    .union(rustix::fs::OFlags::NOFOLLOW)
    .union(rustix::fs::OFlags::CLOEXEC);

pub(crate) fn mode(m: u32) -> rustix::fs::Mode {
    rustix::fs::Mode::from_bits_truncate(m as rustix::fs::RawMode)
}

/// The profile folder, opened and checked: its path (with no link in it), which the child is
/// given, and a handle on the folder itself, relative to which vaultgate opens every file in it
/// (never following a link), so nothing can be swapped between a check and a use.
pub(crate) struct Files {
    pub(crate) dir: PathBuf,
    pub(crate) fd: std::fs::File,
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
pub(crate) fn open_profile(base: &Path, gateway_id: &str, create: bool) -> Result<Option<Files>, Refused> {
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
pub(crate) const RECORD_MAX_BYTES: u64 = 64 * 1024;

impl Files {
    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
    pub(crate) fn profile(&self) -> PathBuf {
        self.path(PROFILE)
    }
    pub(crate) fn health_url(&self) -> PathBuf {
        self.path(HEALTH_URL)
    }
    pub(crate) fn log(&self) -> PathBuf {
        self.path(LOG)
    }

    /// Removes `name` from the folder (never anything a link leads to).
    pub(crate) fn remove(&self, name: &str) {
        let _ = rustix::fs::unlinkat(&self.fd, name, rustix::fs::AtFlags::empty());
    }

    /// Creates `name` anew (a leftover is removed first), exactly 0600 whatever the umask.
    pub(crate) fn create(&self, name: &str, append: bool) -> std::io::Result<std::fs::File> {
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
    pub(crate) fn write(&self, name: &str, text: &str) -> std::io::Result<()> {
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
    pub(crate) fn read_own(&self, name: &str) -> Result<Option<Vec<u8>>, String> {
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
    pub(crate) fn child_record(&self) -> Result<Option<ChildRecord>, String> {
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
    pub(crate) fn lock(&self) -> Option<std::fs::File> {
        use rustix::fs::OFlags;
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, LOCK, flags, mode(0o600)).ok()?;
        let _ = rustix::fs::fchmod(&fd, mode(0o600));
        rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive).ok()?;
        Some(std::fs::File::from(fd))
    }
}

pub(crate) const PROFILE: &str = "profile.yaml";

pub(crate) const HEALTH_URL: &str = "health.url";

pub(crate) const PID_FILE: &str = "tunnel-client.pid";

pub(crate) const CHILD: &str = "child.json";

pub(crate) const STATUS: &str = "status.json";

pub(crate) const LOG: &str = "tunnel-client.log";

pub(crate) const LOCK: &str = "supervisor.lock";

/// Writes `text` to `path` with mode 0600, atomically.
pub(crate) fn write_private(path: &Path, text: &str) -> Result<(), GatewayError> {
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
pub(crate) fn q(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

/// The profile `tunnel-client run --config` reads: its `main` channel points at our `/mcp`, the
/// key and the `Authorization` header come from the child's environment (`env:` references).
pub(crate) fn profile(tunnel_id: &str, dir: &Path, mcp_url: &str) -> String {
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

pub(crate) fn allowed_env(own: &BTreeMap<String, String>) -> impl Iterator<Item = (&String, &String)> {
    own.iter().filter(|(k, _)| ALLOWED_ENV.contains(&k.as_str()))
}

// ---- the child process on record ---------------------------------------------------------------
