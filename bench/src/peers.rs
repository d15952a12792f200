//! The peers measured beside vaultgate, each only where it installed: ripgrep (a full scan per
//! query, as a subprocess), the official filesystem MCP server (npm) and basic-memory (PyPI),
//! both driven through the same rmcp client as vaultgate.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::mcp::Client;

/// Where a peer stands on this machine.
#[derive(Clone, Debug)]
pub enum Avail {
    /// Installed: what to run, and its version.
    Ready { path: PathBuf, version: String },
    /// Not installed, with the reason (the install step's failure, or what is missing).
    Missing(String),
}

impl Avail {
    pub fn describe(&self) -> String {
        match self {
            Avail::Ready { version, .. } => format!("installed ({version})"),
            Avail::Missing(r) => format!("did not install: {r}"),
        }
    }
}

pub struct Peers {
    pub ripgrep: Avail,
    pub filesystem: Avail,
    pub basic_memory: Avail,
}

/// Reasons recorded by `bench/run.sh` for installs that failed: `name<TAB>reason` lines.
pub(crate) fn install_failures(out: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(out.join("peer-install.tsv"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once('\t')?;
            Some((k.trim().to_owned(), v.trim().to_owned()))
        })
        .collect()
}

fn first_line(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    s.lines()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_owned())
}

pub(crate) fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

impl Peers {
    /// Looks for each peer where `bench/run.sh` installs it.
    pub fn detect(peers_dir: &Path, out: &Path) -> Peers {
        let failed = install_failures(out);
        let missing = |name: &str, default: &str| {
            Avail::Missing(failed.get(name).cloned().unwrap_or_else(|| default.to_owned()))
        };
        let ripgrep = match which("rg") {
            Some(p) => {
                let v = first_line(Command::new(&p).arg("--version")).unwrap_or_else(|| "rg".to_owned());
                Avail::Ready { path: p, version: v }
            }
            None => missing(
                "ripgrep",
                "`rg` not on PATH (bench/run.sh installs it with apt-get)",
            ),
        };
        let script = peers_dir.join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
        let filesystem = match (which("node"), script.is_file()) {
            (Some(_), true) => {
                let pkg = peers_dir.join("node_modules/@modelcontextprotocol/server-filesystem/package.json");
                let v = std::fs::read_to_string(pkg)
                    .ok()
                    .and_then(|s| serde_json::from_str::<Value>(&s).ok())
                    .and_then(|v| v["version"].as_str().map(str::to_owned))
                    .unwrap_or_else(|| "?".to_owned());
                Avail::Ready {
                    path: script,
                    version: format!("@modelcontextprotocol/server-filesystem {v}"),
                }
            }
            (None, _) => missing("filesystem", "`node` not on PATH"),
            (_, false) => missing(
                "filesystem",
                "bench/.peers has no @modelcontextprotocol/server-filesystem (bench/run.sh installs it)",
            ),
        };
        let bm = peers_dir.join("bm-venv/bin/basic-memory");
        let basic_memory = if bm.is_file() {
            let v = first_line(Command::new(&bm).arg("--version").env("HOME", out))
                .unwrap_or_else(|| "basic-memory".to_owned());
            Avail::Ready { path: bm, version: v }
        } else {
            missing(
                "basic-memory",
                "bench/.peers/bm-venv has no basic-memory (bench/run.sh installs it)",
            )
        };
        Peers {
            ripgrep,
            filesystem,
            basic_memory,
        }
    }
}

// ---- ripgrep ------------------------------------------------------------------------------------

/// The files matching every term, as a shell user would find them with ripgrep: one full scan for
/// the first term (`rg -i -F -l`), then each further term over the files left (`xargs rg …`).
/// Returns the number of files. `--no-ignore` because the vault lives under an ignored folder.
pub async fn rg_files(rg: &Path, vault: &Path, terms: &[String]) -> Result<usize, String> {
    let q = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
    let rgc = format!(
        "{} -i -F -l --no-ignore --no-messages -g '!inbox/'",
        q(&rg.to_string_lossy())
    );
    let mut pipeline = format!("{rgc} -e {} {}", q(&terms[0]), q(&vault.to_string_lossy()));
    for t in &terms[1..] {
        pipeline.push_str(&format!(" | xargs -r -d '\\n' {rgc} -e {}", q(t)));
    }
    let out = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&pipeline)
        .output()
        .await
        .map_err(|e| format!("rg: {e}"))?;
    // rg exits 1 when nothing matched; anything else non-zero is a failure.
    if !out.status.success() && out.status.code() != Some(1) && out.status.code() != Some(123) {
        return Err(format!(
            "rg pipeline failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().count())
}

// ---- the filesystem MCP server ----------------------------------------------------------------------

/// `node dist/index.js <vault>` through the rmcp stdio client.
pub async fn filesystem(script: &Path, vault: &Path, log: &Path) -> Result<Client, String> {
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg(script).arg(vault);
    Client::stdio(cmd, log).await
}

// ---- basic-memory -------------------------------------------------------------------------------------

/// A basic-memory installation isolated in `dir`: its config and database under `dir/config`,
/// its project `bench` over `dir/vault` (a copy of the generated vault: it rewrites frontmatter).
pub struct BasicMemory {
    pub bin: PathBuf,
    pub dir: PathBuf,
    pub vault: PathBuf,
}

impl BasicMemory {
    pub fn new(bin: &Path, dir: &Path) -> BasicMemory {
        BasicMemory {
            bin: bin.to_owned(),
            dir: dir.to_owned(),
            vault: dir.join("vault"),
        }
    }

    fn env(&self, cmd: &mut tokio::process::Command) {
        cmd.env("HOME", self.dir.join("home"))
            .env("BASIC_MEMORY_CONFIG_DIR", self.dir.join("config"))
            .env("BASIC_MEMORY_AUTO_UPDATE", "false")
            .env("BASIC_MEMORY_LOGFIRE_ENABLED", "false")
            .env("BASIC_MEMORY_CLOUD_PROMO_OPT_OUT", "true")
            .env("BASIC_MEMORY_DEFAULT_SEARCH_TYPE", "text")
            .env("HF_HUB_OFFLINE", "1")
            .env("FASTMCP_CHECK_FOR_UPDATES", "off")
            .env("NO_COLOR", "1");
    }

    /// Registers the project, which indexes every file (`basic-memory project add`); returns
    /// how long that took, or an error (including a timeout).
    pub async fn index(&self, timeout: Duration) -> Result<Duration, String> {
        std::fs::create_dir_all(self.dir.join("home")).map_err(|e| e.to_string())?;
        let mut cmd = tokio::process::Command::new(&self.bin);
        cmd.args(["project", "add", "bench"])
            .arg(&self.vault)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        self.env(&mut cmd);
        let t = Instant::now();
        let out = tokio::time::timeout(timeout, cmd.output())
            .await
            .map_err(|_| {
                format!(
                    "`basic-memory project add` did not finish within {} s",
                    timeout.as_secs()
                )
            })?
            .map_err(|e| format!("basic-memory: {e}"))?;
        if !out.status.success() {
            let mut e = String::from_utf8_lossy(&out.stderr).into_owned();
            e.truncate(400);
            return Err(format!("`basic-memory project add` failed: {e}"));
        }
        Ok(t.elapsed())
    }

    /// `basic-memory mcp --project bench` through the rmcp stdio client.
    pub async fn client(&self, log: &Path) -> Result<Client, String> {
        let mut cmd = tokio::process::Command::new(&self.bin);
        cmd.args(["mcp", "--project", "bench"]);
        self.env(&mut cmd);
        Client::stdio(cmd, log).await
    }
}

/// Copies a folder tree (files and folders only).
pub fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let ty = e.file_type()?;
        let dest = to.join(e.file_name());
        if ty.is_dir() {
            copy_tree(&e.path(), &dest)?;
        } else if ty.is_file() {
            std::fs::copy(e.path(), &dest)?;
        }
    }
    Ok(())
}
