//! The gateway's home: `gateway.toml`, `secret.key`, `state.sqlite`, `audit.jsonl` (docs/contract.md#concepts).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};

use crate::error::GatewayError;

/// The 32-byte secret that signs tokens, proposal metadata and plan hashes.
#[derive(Clone)]
pub struct SecretKey([u8; 32]);

impl SecretKey {
    pub fn bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretKey([redacted])")
    }
}

/// `gateway.toml`.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The token audience: tokens of another home are refused.
    pub gateway_id: String,
    /// The vault a call uses when it names none and the credential sees several (`vault set-default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_vault: Option<String>,
    /// Streamable HTTP (`vaultgate serve`).
    #[serde(default)]
    pub server: ServerConfig,
    /// Bounds on every input and output.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// The review page.
    #[serde(default)]
    pub review: ReviewConfig,
    /// ChatGPT's tunnel.
    #[serde(default)]
    pub tunnel: TunnelConfig,
    /// The PDF worker of `read_attachment_text`.
    #[serde(default)]
    pub pdf: PdfConfig,
    /// The registered vaults (`vault add`).
    #[serde(default)]
    pub vaults: Vec<VaultConfig>,
    /// Team mode (`vaultgate team init` or `team join`): this home is a gateway of a team.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<TeamConfig>,
}

/// `gateway.toml [team]`: written by `vaultgate team init` or `team join` (docs/contract.md#team-mode).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TeamConfig {
    /// The team's PostgreSQL database, a libpq URL (`postgres://user@host:port/db`). A password
    /// in it is read from here and never printed; `PGPASSWORD` or a password file also work.
    pub database: String,
    /// This gateway's name in the team: 1-64 characters of `A-Za-z0-9._@-`.
    pub name: String,
    /// How often a serving gateway fetches its team vaults' remotes to see people's pushes.
    #[serde(default = "default_fetch_seconds")]
    pub fetch_seconds: u64,
}

fn default_fetch_seconds() -> u64 {
    15
}

impl TeamConfig {
    /// A gateway of the team's database at `database`, named `name`, with the defaults.
    pub fn new(database: &str, name: &str) -> TeamConfig {
        TeamConfig {
            database: database.to_owned(),
            name: name.to_owned(),
            fetch_seconds: default_fetch_seconds(),
        }
    }
}

/// `gateway.toml [tunnel]`: written by `vaultgate tunnel setup`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TunnelConfig {
    /// `tunnel_<32 hex>`, from the OpenAI platform.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tunnel_id: Option<String>,
    /// The absolute path of `tunnel-client`, resolved at setup.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<PathBuf>,
    /// `serve` starts the tunnel without `--tunnel`.
    pub autostart: bool,
}

/// `gateway.toml [pdf]`: this machine's PDF worker (docs/contract.md#notes-as-data-and-attachments).
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PdfConfig {
    /// Parse PDFs even where the worker cannot sandbox itself (no seccomp filter: not Linux on
    /// x86-64 or Arm64, an old kernel, a container that forbids it). Off, `read_attachment_text`
    /// answers `CAPABILITY_DENIED` there and the document is never handed to a worker; on, a
    /// parser bug could reach the network, other processes and the user's files. `vaultgate
    /// doctor` says whether the sandbox can be set up.
    pub allow_without_sandbox: bool,
}

/// `gateway.toml [review]`.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ReviewConfig {
    /// `serve` also serves `/review/`.
    pub enabled: bool,
    /// How long a code printed by `vaultgate review` can be used (once).
    pub login_code_ttl_seconds: u64,
    /// How long a review session lasts (its cookie's Max-Age).
    pub session_seconds: u64,
}

impl Default for ReviewConfig {
    fn default() -> Self {
        ReviewConfig {
            enabled: true,
            login_code_ttl_seconds: 120,
            session_seconds: 12 * 3600,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// The loopback port `serve` binds (`--port` overrides it).
    pub port: u16,
    /// Origins allowed besides loopback ones, e.g. a tunnel's; a request with another `Origin` is refused.
    pub allowed_origins: Vec<String>,
    /// A larger request body is answered 413.
    pub max_body_bytes: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            port: 8765,
            allowed_origins: Vec::new(),
            // A 2 MiB proposal of any text fits once JSON-escaped.
            max_body_bytes: 8 * 1024 * 1024,
        }
    }
}

/// `gateway.toml [limits]`. Every field has its documented default, so an older
/// `gateway.toml` (or one that names a few) loads; a limit may be lowered or raised per home.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// How long a critical tool's challenge can be confirmed.
    pub challenge_ttl_seconds: u64,
    /// Terms in a search `query`.
    pub max_query_terms: u64,
    /// Bytes in one search term.
    pub max_term_bytes: u64,
    /// Items in a search's `tag[]`.
    pub max_tags: u64,
    /// Bytes in `pathPrefix` and in every path.
    pub max_path_bytes: u64,
    /// Conditions in `query_notes.where[]`.
    pub max_where: u64,
    /// Names in `query_notes.fields[]`.
    pub max_fields: u64,
    /// Entries in each of `set`, `unset`, `addTags` and `removeTags`.
    pub max_entries: u64,
    /// Bytes in each of those values, and in each `tag[]` item.
    pub max_value_bytes: u64,
    /// Page numbers in `read_attachment_text.pages`.
    pub max_pages: u64,
    /// Characters in a `reason`.
    pub max_reason_chars: u64,
    /// Bytes in an `idempotencyKey` (at least 1, of `[A-Za-z0-9._:-]`).
    pub max_key_bytes: u64,
    /// Bytes in an id (`id`, `challengeId`, `expectedHistoryEntryId`, `cursor`), a hash or `vault`.
    pub max_id_bytes: u64,
    /// Items in `edits[]`.
    pub max_edits: u64,
    /// Items in `delete_permanent.paths[]`.
    pub max_delete_paths: u64,
    /// Bytes of a proposal's content (the read limit: a larger note could never be read back).
    pub max_proposal_bytes: u64,
    /// Pending proposals one credential may hold in a vault's inbox.
    pub max_pending_per_credential: u64,
    /// Bytes of the pending proposals one credential may hold.
    pub max_pending_bytes_per_credential: u64,
    /// Bytes of pending proposals in one vault's inbox.
    pub max_inbox_bytes: u64,
    /// Bytes of a tool result; a larger list is cut (`truncated`).
    pub max_output_bytes: u64,
    /// How long a search examines candidates before answering what it found.
    pub search_budget_ms: u64,
    /// Legacy HTTP sessions open at once.
    pub max_sessions: u64,
    /// Legacy HTTP sessions open at once for one credential (its longest idle one is closed first).
    pub max_sessions_per_credential: u64,
    /// Seconds a legacy HTTP session may stay idle before it is closed.
    pub session_idle_seconds: u64,
    /// Unauthenticated refusals are audited once a window, with a count.
    pub refusal_window_seconds: u64,
    /// How long an in-client approval waits for the person's answer.
    pub approval_timeout_seconds: u64,
    /// How long an apply, reject, undo/redo or executed challenge waits for the vault's writer
    /// before it answers `VAULT_BUSY` (under the ChatGPT tunnel's 30 s deadline).
    pub apply_wait_seconds: u64,
    /// A job (an agent's apply, undo or redo) left queued by a process that stopped is run again
    /// by the next server to start only within this many seconds of when it began to wait for
    /// the vault's writer; an older one fails without running (an apply's proposal stays pending).
    pub job_ttl_seconds: u64,
}

const MIB: u64 = 1024 * 1024;

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            challenge_ttl_seconds: 300,
            max_query_terms: 32,
            max_term_bytes: 256,
            max_tags: 32,
            max_path_bytes: 1024,
            max_where: 32,
            max_fields: 64,
            max_entries: 200,
            max_value_bytes: 4 * 1024,
            max_pages: 50,
            max_reason_chars: 4_000,
            max_key_bytes: 200,
            max_id_bytes: 128,
            max_edits: 200,
            max_delete_paths: 1_000,
            max_proposal_bytes: 2 * MIB,
            max_pending_per_credential: 500,
            max_pending_bytes_per_credential: 64 * MIB,
            max_inbox_bytes: 256 * MIB,
            max_output_bytes: 16 * MIB,
            search_budget_ms: 2_000,
            max_sessions: 1_024,
            max_sessions_per_credential: 64,
            session_idle_seconds: 3_600,
            refusal_window_seconds: 60,
            approval_timeout_seconds: 120,
            apply_wait_seconds: 25,
            job_ttl_seconds: 600,
        }
    }
}

/// One registered vault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VaultConfig {
    /// The id clients name (`vault`); letters, digits, `-` and `_`.
    pub id: String,
    /// The name shown to people.
    pub name: String,
    /// The vault folder, absolute.
    pub path: PathBuf,
    /// Folders whose `*.md` notes proposals may write; `.` is the whole vault.
    #[serde(default = "default_notes")]
    pub notes: Vec<String>,
    /// Standards folders, listed by `list_standards` and served as resources.
    #[serde(default)]
    pub standards: Vec<String>,
    /// The folder where proposals land, inside the vault.
    #[serde(default = "default_inbox")]
    pub inbox: String,
    /// The folders agents may read; unset, the notes, standards and inbox folders.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readable: Option<Vec<String>>,
    /// `read_attachment_text` may send this vault's PDF text to clients; off unless
    /// set, because the text then leaves the machine with whatever the client sends on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[schemars(extend("default" = false))]
    pub pdf_text: bool,
    /// A team vault's remote (docs/contract.md#team-mode): from the team's database, never read
    /// from or written to `gateway.toml`.
    #[serde(skip)]
    #[schemars(skip)]
    pub remote: Option<String>,
}

fn default_notes() -> Vec<String> {
    vec![".".into()]
}
fn default_inbox() -> String {
    "inbox".into()
}

impl VaultConfig {
    /// The validated layout; a config that names an invalid folder is an error, not a silent default.
    pub fn layout(&self) -> Result<policy::Layout, GatewayError> {
        let folder = |s: &String| {
            policy::FolderPath::parse(s).map_err(|e| {
                GatewayError::Config(format!("vault '{}': folder '{s}' in gateway.toml: {e}", self.id))
            })
        };
        let notes = self.notes.iter().map(folder).collect::<Result<Vec<_>, _>>()?;
        let standards = self.standards.iter().map(folder).collect::<Result<Vec<_>, _>>()?;
        let readable = match &self.readable {
            Some(r) => Some(r.iter().map(folder).collect::<Result<Vec<_>, _>>()?),
            None => None,
        };
        let inbox = policy::VaultPath::parse(&self.inbox)
            .map_err(|e| GatewayError::Config(format!("vault '{}': inbox '{}': {e}", self.id, self.inbox)))?;
        Ok(policy::Layout::new(notes, standards, inbox, readable))
    }
}

/// Where the home is and what it holds.
#[derive(Debug, Clone)]
pub struct Home {
    pub dir: PathBuf,
}

impl Home {
    /// `--home`, else `$VAULTGATE_HOME`, else `$XDG_DATA_HOME/vaultgate`, else
    /// `~/.local/share/vaultgate`. The environment is passed in, never read here.
    pub fn resolve(flag: Option<&Path>, env: &BTreeMap<String, String>) -> Result<Home, GatewayError> {
        let nonempty = |k: &str| env.get(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        let dir = if let Some(f) = flag {
            f.to_path_buf()
        } else if let Some(h) = nonempty("VAULTGATE_HOME") {
            h
        } else if let Some(x) = nonempty("XDG_DATA_HOME") {
            x.join("vaultgate")
        } else if let Some(h) = nonempty("HOME") {
            h.join(".local/share/vaultgate")
        } else {
            return Err(GatewayError::Config(
                "cannot find a home: pass --home DIR or set VAULTGATE_HOME".into(),
            ));
        };
        Ok(Home { dir })
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.join("gateway.toml")
    }
    pub fn secret_path(&self) -> PathBuf {
        self.dir.join("secret.key")
    }
    pub fn state_path(&self) -> PathBuf {
        self.dir.join("state.sqlite")
    }
    /// Where `serve` records its pid, host and port, so `vaultgate review` finds it (docs/contract.md#the-review-page-and-in-client-approval).
    pub fn server_record_path(&self) -> PathBuf {
        self.dir.join("server.json")
    }
    /// The tunnel's runtime API key (docs/contract.md#the-chatgpt-tunnel), mode 0600.
    pub fn tunnel_key_path(&self) -> PathBuf {
        self.dir.join("tunnel.key")
    }
    pub fn audit_path(&self) -> PathBuf {
        self.dir.join("audit.jsonl")
    }

    pub fn exists(&self) -> bool {
        self.config_path().is_file() && self.secret_path().is_file()
    }

    /// Creates the home (idempotent: existing files are kept). Returns whether anything was created.
    pub fn init(&self) -> Result<bool, GatewayError> {
        let mut created = false;
        create_private_dir(&self.dir)?;
        if !self.secret_path().exists() {
            let mut key = [0u8; 32];
            SystemRandom::new()
                .fill(&mut key)
                .map_err(|_| GatewayError::Internal("the system random source failed".into()))?;
            write_private_new(&self.secret_path(), &key)?;
            created = true;
        }
        if !self.config_path().exists() {
            let config = Config {
                gateway_id: format!("vg-{}", uuid::Uuid::new_v4().simple()),
                default_vault: None,
                server: ServerConfig::default(),
                limits: LimitsConfig::default(),
                review: ReviewConfig::default(),
                tunnel: TunnelConfig::default(),
                pdf: PdfConfig::default(),
                vaults: Vec::new(),
                team: None,
            };
            self.save_config(&config)?;
            created = true;
        }
        // Created empty with mode 0600 first, so SQLite (which gives its -wal and -shm files the
        // database's mode) never makes a world-readable state file.
        if !self.state_path().exists() {
            write_private_new(&self.state_path(), &[])?;
        }
        // Creating the database runs its migrations.
        inbox::State::open(&self.state_path())?;
        Ok(created)
    }

    pub fn load_config(&self) -> Result<Config, GatewayError> {
        let text = std::fs::read_to_string(self.config_path()).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                GatewayError::NoHome(self.dir.clone())
            } else {
                GatewayError::Io(e)
            }
        })?;
        toml::from_str(&text)
            .map_err(|e| GatewayError::Config(format!("{}: {e}", self.config_path().display())))
    }

    /// Holds `gateway.lock` (an exclusive `flock`) until dropped: a read-modify-write of
    /// `gateway.toml` under it cannot lose another process's change made at the same moment
    /// (two terminals running `vault add`). Readers need no lock: the file is replaced whole.
    pub fn lock_config(&self) -> Result<ConfigLock, GatewayError> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(self.dir.join("gateway.lock"))?;
        let mut lock = fd_lock::RwLock::new(file);
        loop {
            match lock.write() {
                Ok(guard) => {
                    // Held until the file closes (`ConfigLock` is dropped); the guard borrows it.
                    std::mem::forget(guard);
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(ConfigLock {
            _file: lock.into_inner(),
        })
    }

    /// Writes `gateway.toml` atomically (temp file, fsync, rename).
    pub fn save_config(&self, config: &Config) -> Result<(), GatewayError> {
        let text = toml::to_string_pretty(config).map_err(|e| GatewayError::Internal(e.to_string()))?;
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir)?;
        tmp.write_all(text.as_bytes())?;
        tmp.as_file().sync_all()?;
        tmp.persist(self.config_path())
            .map_err(|e| GatewayError::Io(e.error))?;
        Ok(())
    }

    /// Replaces `secret.key` with `key` (`team join`: the team's secret), atomically and mode
    /// 0600 from the start.
    pub fn replace_secret(&self, key: &[u8; 32]) -> Result<(), GatewayError> {
        self.replace_private(&self.secret_path(), key)
    }

    /// Replaces the home's file `path` with `bytes`, atomically and mode 0600 from the start.
    pub(crate) fn replace_private(&self, path: &Path, bytes: &[u8]) -> Result<(), GatewayError> {
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir)?;
        tmp.write_all(bytes)?;
        tmp.as_file().sync_all()?;
        tmp.persist(path).map_err(|e| GatewayError::Io(e.error))?;
        std::fs::File::open(&self.dir)?.sync_all()?;
        Ok(())
    }

    /// A team gateway's tunnel token (docs/contract.md#team-mode): the team's database keeps
    /// only its `jti`'s hash, so the token itself is kept here, mode 0600.
    pub fn tunnel_token_path(&self) -> PathBuf {
        self.dir.join("tunnel.token")
    }

    /// Reads `secret.key`, refusing one that other users could read or replace: whoever reads it
    /// can mint tokens of any tier.
    pub fn load_secret(&self) -> Result<SecretKey, GatewayError> {
        let path = self.secret_path();
        let mut file = std::fs::File::open(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                GatewayError::NoHome(self.dir.clone())
            } else {
                GatewayError::Io(e)
            }
        })?;
        // SECURITY(T-SECRET2): the mode is read from the open handle, so it is the file's own.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = file.metadata()?.permissions().mode();
            if mode & 0o077 != 0 {
                return Err(GatewayError::Config(format!(
                    "{} is open to other users (mode {:o}); run `chmod 600 {}` and issue new tokens if others could read it",
                    path.display(),
                    mode & 0o777,
                    path.display()
                )));
            }
        }
        let mut bytes = Vec::with_capacity(33);
        // One byte more than a key, so an oversized file is refused without reading it all.
        std::io::Read::read_to_end(&mut std::io::Read::take(&mut file, 33), &mut bytes)?;
        let key: [u8; 32] = bytes
            .try_into()
            .map_err(|_| GatewayError::Config("secret.key must be exactly 32 bytes".into()))?;
        Ok(SecretKey(key))
    }
}

/// An exclusive hold on the home's configuration, released when dropped ([`Home::lock_config`]).
pub struct ConfigLock {
    _file: std::fs::File,
}

fn create_private_dir(dir: &Path) -> Result<(), GatewayError> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir)?;
    Ok(())
}

/// Creates a new file readable only by its owner (mode 0600 from the start, never widened).
fn write_private_new(path: &Path, bytes: &[u8]) -> Result<(), GatewayError> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    Ok(())
}

#[cfg(test)]
pub(crate) fn test_secret(bytes: [u8; 32]) -> SecretKey {
    SecretKey(bytes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn home_resolution_order() {
        let mut env = BTreeMap::new();
        env.insert("HOME".to_string(), "/h".to_string());
        assert_eq!(
            Home::resolve(None, &env).unwrap().dir,
            PathBuf::from("/h/.local/share/vaultgate")
        );
        env.insert("XDG_DATA_HOME".to_string(), "/x".to_string());
        assert_eq!(
            Home::resolve(None, &env).unwrap().dir,
            PathBuf::from("/x/vaultgate")
        );
        env.insert("VAULTGATE_HOME".to_string(), "/v".to_string());
        assert_eq!(Home::resolve(None, &env).unwrap().dir, PathBuf::from("/v"));
        assert_eq!(
            Home::resolve(Some(Path::new("/f")), &env).unwrap().dir,
            PathBuf::from("/f")
        );
        assert!(Home::resolve(None, &BTreeMap::new()).is_err());
    }

    #[test]
    fn init_creates_private_secret_and_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home {
            dir: dir.path().join("home"),
        };
        assert!(home.init().unwrap());
        let key1 = home.load_secret().unwrap();
        assert!(!home.init().unwrap());
        assert_eq!(home.load_secret().unwrap().bytes(), key1.bytes());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(home.secret_path())
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let cfg = home.load_config().unwrap();
        assert!(cfg.gateway_id.starts_with("vg-"));
        assert_eq!(cfg.server.port, 8765);
        assert_eq!(format!("{key1:?}"), "SecretKey([redacted])");
    }

    #[cfg(unix)]
    #[test]
    fn a_secret_open_to_others_is_refused_naming_chmod() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let home = Home {
            dir: dir.path().join("home"),
        };
        home.init().unwrap();
        let path = home.secret_path();
        for mode in [0o644, 0o640, 0o604, 0o620] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = home.load_secret().unwrap_err().to_string();
            assert!(
                e.contains(&format!("chmod 600 {}", path.display())),
                "{mode:o}: {e}"
            );
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
        assert!(home.load_secret().is_ok(), "owner-only read is fine");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&path, [7u8; 33]).unwrap();
        assert!(home.load_secret().is_err(), "33 bytes");
    }
}
