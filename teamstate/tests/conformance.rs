//! The team's state in a real PostgreSQL: a private cluster per test binary (initdb in a temporary
//! folder, 127.0.0.1, a free port; as the `postgres` user when run as root, since initdb refuses
//! root), then the engine's state conformance suite against it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use engine::storage::StateStore;
use engine::storage::state_conformance::{self, StateWorld};
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
struct Cluster {
    _dir: tempfile::TempDir,
    child: Child,
    port: u16,
}

impl Cluster {
    fn start() -> Cluster {
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
        let log = std::fs::File::create(dir.path().join("postgres.log")).unwrap();
        let child = as_postgres(&bin("postgres"))
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-k"])
            .arg(dir.path())
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
            .unwrap();
        let c = Cluster {
            _dir: dir,
            child,
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "PostgreSQL did not listen within 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        c
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// A store in a database of its own.
    fn store(&self, db: &str) -> PgState {
        let admin = connect_retrying(&self.url());
        admin.query(&format!("CREATE DATABASE {db}"), &[]).unwrap();
        PgState::connect(&format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)).unwrap()
    }
}

/// The server listens a moment before it accepts connections.
fn connect_retrying(url: &str) -> PgState {
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

/// The team's store, and a view of it for the suite.
struct Pg(PgState);

impl StateWorld for Pg {
    fn store(&self) -> &dyn StateStore {
        &self.0
    }
    fn pending(&self, vault: &str, id: &str) {
        let meta = serde_json::json!({"id": id});
        self.0
            .query(
                "INSERT INTO vaultgate.proposals (id, vault, slug, kind, target, created_by, created_at, meta)
                 VALUES ($1, $2, $1, 'new', 'notes/x.md', 'cred', '2026-01-01T00:00:00Z', $3)",
                &[&id, &vault, &meta],
            )
            .unwrap();
    }
    fn reject(&self, id: &str) {
        let n = self
            .0
            .query(
                "UPDATE vaultgate.proposals SET status = 'rejected' WHERE id = $1 AND status = 'pending' RETURNING id",
                &[&id],
            )
            .unwrap();
        assert_eq!(n.len(), 1);
    }
    fn status(&self, vault: &str, id: &str) -> String {
        self.0
            .query(
                "SELECT status FROM vaultgate.proposals WHERE vault = $1 AND id = $2",
                &[&vault, &id],
            )
            .unwrap()[0]
            .get(0)
    }
    fn revision(&self, vault: &str) -> u64 {
        self.0
            .query(
                "SELECT revision FROM vaultgate.vault_revisions WHERE vault = $1",
                &[&vault],
            )
            .unwrap()
            .first()
            .map_or(0, |r| r.get::<_, i64>(0) as u64)
    }
    fn audit_head(&self) -> Option<inbox::AuditHead> {
        self.0
            .query("SELECT seq, hash FROM vaultgate.audit_head", &[])
            .unwrap()
            .first()
            .map(|r| inbox::AuditHead {
                seq: r.get::<_, i64>(0) as u64,
                hash: r.get(1),
            })
    }
    fn key_answer(&self, principal: &str, key: &str) -> Option<serde_json::Value> {
        self.0
            .query(
                "SELECT result FROM vaultgate.idempotency_keys WHERE credential_id = $1 AND key = $2",
                &[&principal, &key],
            )
            .unwrap()
            .first()
            .map(|r| r.get(0))
    }
    fn fingerprint(&self, vault: &str) -> Option<String> {
        self.0
            .query(
                "SELECT fingerprint FROM vaultgate.vault_fingerprints WHERE vault = $1",
                &[&vault],
            )
            .unwrap()
            .first()
            .map(|r| r.get(0))
    }
    fn open_intents(&self, vault: &str) -> usize {
        self.0
            .query(
                "SELECT id FROM vaultgate.apply_intents WHERE vault = $1",
                &[&vault],
            )
            .unwrap()
            .len()
    }
    fn history_state(&self, vault: &str, id: &str) -> Option<String> {
        self.0
            .query(
                "SELECT state FROM vaultgate.history WHERE vault = $1 AND id = $2",
                &[&vault, &id],
            )
            .unwrap()
            .first()
            .map(|r| r.get(0))
    }
    fn consumed_challenge(&self, vault: &str, id: &str) {
        let intent = serde_json::json!({"intent": 1});
        self.0
            .query(
                "INSERT INTO vaultgate.challenges (id, vault, consumed_at, intent) VALUES ($1, $2, 1, $3)",
                &[&id, &vault, &intent],
            )
            .unwrap();
    }
}

#[test]
fn the_team_database_passes_the_state_conformance_suite_and_migrates_once() {
    let cluster = Cluster::start();
    let world = Pg(cluster.store("conformance"));
    assert_eq!(world.0.schema_version().unwrap(), 1);
    state_conformance::run_all(&world);
    // A second gateway connecting to the same database finds the schema and changes nothing.
    let again = PgState::connect(&format!(
        "postgres://postgres@127.0.0.1:{}/conformance",
        cluster.port
    ))
    .unwrap();
    assert_eq!(again.schema_version().unwrap(), 1);
    assert_eq!(
        Pg(again).status("v", "together"),
        "applied",
        "one database, seen by both"
    );
}
