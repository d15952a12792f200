//! The system under test: a fresh vaultgate home over a generated vault, `vaultgate stdio` and
//! `vaultgate serve` as child processes, the CLI (index), and process memory from `/proc`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::mcp::Client;

pub struct Gate {
    pub bin: PathBuf,
    pub home: PathBuf,
    pub vault: PathBuf,
    pub token: String,
    pub logs: PathBuf,
}

/// The system calls that make data durable, as `strace -e trace=` names them.
pub const SYNC_CALLS: &[&str] = &["fsync", "fdatasync", "sync_file_range", "syncfs", "msync"];

/// The vault id every benchmark uses.
pub const VAULT_ID: &str = "bench";

impl Gate {
    /// A new home in `dir/home` (removed first) with `vault` registered as `bench` and an `auto`
    /// credential (enough to propose and apply its own proposals).
    pub fn setup(bin: &Path, dir: &Path, vault: &Path) -> Result<Gate, String> {
        let home = dir.join("home");
        if home.exists() {
            std::fs::remove_dir_all(&home).map_err(|e| format!("{}: {e}", home.display()))?;
        }
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs).map_err(|e| e.to_string())?;
        let mut g = Gate {
            bin: bin.to_owned(),
            home,
            vault: vault.to_owned(),
            token: String::new(),
            logs,
        };
        g.cli(&["init"])?;
        let vault_arg = vault.to_str().ok_or("vault path is not UTF-8")?;
        g.cli(&["vault", "add", vault_arg, "--id", VAULT_ID])?;
        let issued = g.cli(&[
            "token", "issue", "--name", "bench", "--tier", "auto", "--format", "json",
        ])?;
        let v: Value = serde_json::from_str(&issued).map_err(|e| format!("token issue output: {e}"))?;
        g.token = v["token"]
            .as_str()
            .ok_or("token issue printed no token")?
            .to_owned();
        Ok(g)
    }

    fn command(&self) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("--home")
            .arg(&self.home)
            .env_remove("VAULTGATE_HOME")
            .env_remove("VAULTGATE_TOKEN")
            .env("VAULTGATE_LOG", "warn")
            .stdin(Stdio::null());
        c
    }

    /// Runs the CLI; stdout on success, stderr as the error.
    pub fn cli(&self, args: &[&str]) -> Result<String, String> {
        let out = self
            .command()
            .args(args)
            .output()
            .map_err(|e| format!("vaultgate {args:?}: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "vaultgate {} exited {}: {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// `vaultgate --version`.
    pub fn version(&self) -> String {
        self.cli(&["--version"])
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|e| e)
    }

    /// Whether this build has `vaultgate index` (docs/contract.md#the-command-line); the search index may not exist yet.
    pub fn has_index_command(&self) -> bool {
        self.cli(&["--help"])
            .is_ok_and(|h| h.lines().any(|l| l.split_whitespace().next() == Some("index")))
    }

    /// Times one CLI run.
    pub fn timed_cli(&self, args: &[&str]) -> Result<Duration, String> {
        let t = Instant::now();
        self.cli(args)?;
        Ok(t.elapsed())
    }

    /// Starts `vaultgate stdio` with the bench token and connects the client.
    pub async fn stdio(&self, label: &str) -> Result<Client, String> {
        let mut cmd = tokio::process::Command::new(&self.bin);
        cmd.arg("stdio")
            .arg("--home")
            .arg(&self.home)
            .env_remove("VAULTGATE_HOME")
            .env("VAULTGATE_LOG", "warn")
            .env("VAULTGATE_TOKEN", &self.token);
        Client::stdio(cmd, &self.logs.join(format!("stdio-{label}.stderr"))).await
    }

    /// Starts `vaultgate stdio` like [`Gate::stdio`], under `strace -f -c -o <summary>` counting
    /// the sync system calls ([`SYNC_CALLS`]); the summary is written when the process exits.
    pub async fn stdio_traced(&self, label: &str, strace: &Path, summary: &Path) -> Result<Client, String> {
        let mut cmd = tokio::process::Command::new(strace);
        cmd.args(["-f", "-c", "-o"])
            .arg(summary)
            .arg("-e")
            // `execve` (of vaultgate itself) is there so that the summary always has a table: strace
            // writes nothing at all when no traced call was made.
            .arg(format!("trace={},execve", SYNC_CALLS.join(",")))
            .arg("--")
            .arg(&self.bin)
            .arg("stdio")
            .arg("--home")
            .arg(&self.home)
            .env_remove("VAULTGATE_HOME")
            .env("VAULTGATE_LOG", "warn")
            .env("VAULTGATE_TOKEN", &self.token);
        Client::stdio(cmd, &self.logs.join(format!("stdio-{label}.stderr"))).await
    }

    /// Starts `vaultgate serve` on a free loopback port and waits for `/healthz`.
    pub fn serve(&self) -> Result<Server, String> {
        let port = TcpListener::bind(("127.0.0.1", 0))
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let log = self.logs.join(format!("serve-{port}.stderr"));
        let child = self
            .command()
            .arg("serve")
            .arg("--port")
            .arg(port.to_string())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).map_err(|e| e.to_string())?)
            .spawn()
            .map_err(|e| format!("vaultgate serve: {e}"))?;
        let mut s = Server { child, port };
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(Some(status)) = s.child.try_wait() {
                let err = std::fs::read_to_string(&log).unwrap_or_default();
                return Err(format!("vaultgate serve exited early ({status}): {}", err.trim()));
            }
            if healthz(port) {
                return Ok(s);
            }
            if Instant::now() > deadline {
                return Err("vaultgate serve did not answer /healthz within 120 s".to_owned());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `vaultgate serve` as a child process; killed when dropped.
pub struct Server {
    child: Child,
    pub port: u16,
}

impl Server {
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn healthz(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if write!(
        s,
        "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .is_err()
    {
        return false;
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.starts_with("HTTP/1.1 200")
}

/// Memory of a live process from `/proc/<pid>/status`: (peak resident `VmHWM`, current `VmRSS`),
/// in MiB.
pub fn memory_mib(pid: u32) -> Option<(f64, f64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<f64> {
        let line = s.lines().find(|l| l.starts_with(name))?;
        let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb / 1024.0)
    };
    Some((field("VmHWM:")?, field("VmRSS:")?))
}

/// Resets the peak resident memory (`VmHWM`) of `pid` to its current one, so that the next read
/// gives the peak of what ran since (`/proc/<pid>/clear_refs`, Linux, own processes). Best
/// effort: where it fails, later peaks include the earlier ones.
pub fn reset_peak(pid: u32) {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

/// CPU seconds (user + system) a live process has used, from `/proc/<pid>/stat` (ticks of 1/100 s).
pub fn cpu_secs(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// CPU seconds of several processes together.
pub fn cpu_sum(pids: &[u32]) -> Option<f64> {
    pids.iter().map(|p| cpu_secs(*p)).sum()
}

/// The calls of `syscalls` summed from an `strace -c` summary (`% time  seconds  usecs/call  calls
/// [errors]  syscall` lines); `None` until the file holds a whole table (its `total` line).
pub fn strace_calls(summary: &str, syscalls: &[&str]) -> Option<u64> {
    if !summary
        .lines()
        .any(|l| l.split_whitespace().last() == Some("total"))
    {
        return None;
    }
    let mut n = 0;
    for l in summary.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        let (Some(name), Some(calls)) = (f.last(), f.get(3)) else {
            continue;
        };
        if syscalls.contains(name)
            && let Ok(c) = calls.parse::<u64>()
        {
            n += c;
        }
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strace_summary_calls() {
        let s = "% time     seconds  usecs/call     calls    errors syscall\n\
                 ------ ----------- ----------- --------- --------- ----------------\n\
                  97.10    0.051000         120       425           fsync\n\
                   2.90    0.001500          30        50         2 fdatasync\n\
                 ------ ----------- ----------- --------- --------- ----------------\n\
                 100.00    0.052500         110       475         2 total\n";
        assert_eq!(strace_calls(s, SYNC_CALLS), Some(475));
        assert_eq!(strace_calls(s, &["fsync"]), Some(425));
        // No sync call at all: strace prints the header and an all-zero total.
        let none = "% time     seconds  usecs/call     calls    errors syscall\n\
                    ------ ----------- ----------- --------- --------- ----------------\n\
                    100.00    0.000000           0         0           total\n";
        assert_eq!(strace_calls(none, SYNC_CALLS), Some(0));
        assert_eq!(strace_calls("", SYNC_CALLS), None);
        let partial = "% time     seconds  usecs/call     calls    errors syscall\n\
                        ------ ----------- ----------- --------- --------- ----------------\n\
                        97.10    0.051000         120       425           fsync\n";
        assert_eq!(strace_calls(partial, SYNC_CALLS), None);
    }
}
