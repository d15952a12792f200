//! A private PostgreSQL cluster for one test binary: initdb in a temporary folder, 127.0.0.1, a
//! free port; as the `postgres` user when run as root, since initdb refuses root.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use teamstate::PgState;

/// PostgreSQL's server programs: Debian keeps them out of PATH.
fn bin(program: &str) -> PathBuf {
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output()
        && out.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if dir.join(program).exists() {
            return dir.join(program);
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin").join(program))
        .filter(|p| p.exists())
        .collect();
    found.sort();
    found.pop().unwrap_or_else(|| {
        panic!("PostgreSQL's {program} is not installed (Debian: apt-get install postgresql)")
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// `program args` as the `postgres` user when this runs as root.
fn as_postgres(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid",
            "postgres",
            "--regid",
            "postgres",
            "--init-groups",
            "--",
        ])
        .arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// A private PostgreSQL cluster, stopped when dropped.
pub struct Cluster {
    _dir: tempfile::TempDir,
    child: Child,
    pub port: u16,
}

impl Cluster {
    pub fn start() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        if is_root() {
            let ok = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .unwrap()
                .success();
            assert!(ok, "chown to postgres");
        }
        let data = dir.path().join("data");
        let out = as_postgres(&bin("initdb"))
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = spawn_postgres(dir.path(), port);
        let c = Cluster {
            _dir: dir,
            child,
            port,
        };
        c.wait_listening();
        c
    }

    fn wait_listening(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "PostgreSQL did not listen within 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the server at once, as `pg_ctl stop -m immediate` does (SIGQUIT): no checkpoint,
    /// every connection cut.
    pub fn stop(&mut self) {
        kill("QUIT", &[self.child.id()]);
        self.child.wait().unwrap();
    }

    /// Freezes the server and every backend (SIGSTOP): connections stay open, nothing answers.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Lets a paused server go on (SIGCONT).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    /// The server is stopped first (so it forks nothing new while its backends are stopped) and
    /// continued last (so it cannot reap a child between the listing and that child's signal).
    /// A backend that had already exited when listed may be gone: that is not a failure.
    fn signal(&self, sig: &str) {
        let server = self.child.id();
        if sig == "STOP" {
            kill(sig, &[server]);
        }
        for pid in children(server) {
            if !try_kill(sig, pid) {
                assert!(
                    !std::path::Path::new(&format!("/proc/{pid}")).exists(),
                    "kill -s {sig} {pid}"
                );
            }
        }
        if sig != "STOP" {
            kill(sig, &[server]);
        }
    }

    /// Starts the stopped server again on the same data and port (it recovers from its log).
    pub fn start_again(&mut self) {
        self.child = spawn_postgres(self._dir.path(), self.port);
        self.wait_listening();
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// A store in a database of its own.
    pub fn store(&self, db: &str) -> PgState {
        let admin = connect_retrying(&self.url());
        admin.query(&format!("CREATE DATABASE {db}"), &[]).unwrap();
        PgState::connect(&format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)).unwrap()
    }
}

/// Sends `sig` to `pids` through the shell's own `kill` (a minimal Debian has no procps).
fn kill(sig: &str, pids: &[u32]) {
    let list: Vec<String> = pids.iter().map(u32::to_string).collect();
    let ok = Command::new("sh")
        .args(["-c", &format!("kill -s {sig} {}", list.join(" "))])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -s {sig} {list:?}");
}

/// Sends `sig` to one process; false when the shell's `kill` failed.
fn try_kill(sig: &str, pid: u32) -> bool {
    Command::new("sh")
        .args(["-c", &format!("kill -s {sig} {pid} 2>/dev/null")])
        .status()
        .unwrap()
        .success()
}

/// The processes whose parent is `parent`, read from /proc.
fn children(parent: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|st| st.rsplit_once(')').map(|(_, rest)| rest.to_owned()))
                .and_then(|rest| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                == Some(parent)
        })
        .collect()
}

/// `postgres` on the cluster in `dir` (its data in `dir/data`, its log `dir/postgres.log`).
fn spawn_postgres(dir: &Path, port: u16) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("postgres.log"))
        .unwrap();
    as_postgres(&bin("postgres"))
        .arg("-D")
        .arg(dir.join("data"))
        .args(["-p", &port.to_string(), "-k"])
        .arg(dir)
        .args([
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "fsync=off",
            "-c",
            "shared_buffers=32MB",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// The server listens a moment before it accepts connections.
pub fn connect_retrying(url: &str) -> PgState {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match PgState::connect(url) {
            Ok(s) => return s,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "PostgreSQL did not accept a connection: {e}"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
