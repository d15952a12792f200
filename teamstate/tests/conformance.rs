//! The team's state in a real PostgreSQL: a private cluster per test binary (initdb in a temporary
//! folder, 127.0.0.1, a free port; as the `postgres` user when run as root, since initdb refuses
//! root), then the engine's state conformance suite against it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Cluster;
use engine::storage::StateStore;
use engine::storage::state_conformance::{self, StateWorld};
use teamstate::PgState;

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
    assert_eq!(world.0.schema_version().unwrap(), 15);
    state_conformance::run_all(&world);
    // A second gateway connecting to the same database finds the schema and changes nothing.
    let again = PgState::connect(&format!(
        "postgres://postgres@127.0.0.1:{}/conformance",
        cluster.port
    ))
    .unwrap();
    assert_eq!(again.schema_version().unwrap(), 15);
    assert_eq!(
        Pg(again).status("v", "together"),
        "applied",
        "one database, seen by both"
    );
}

#[test]
fn a_reviewer_gateways_role_passes_the_state_conformance_suite_too() {
    // A reviewer applies, rejects, undoes and redoes: everything the suite commits.
    let cluster = Cluster::start();
    let admin = cluster.store("reviewed");
    admin.query("CREATE ROLE reviewer_two LOGIN", &[]).unwrap();
    admin.grant_reviewer("reviewer_two").unwrap();
    let world = Pg(PgState::connect(&format!(
        "postgres://reviewer_two@127.0.0.1:{}/reviewed",
        cluster.port
    ))
    .unwrap());
    state_conformance::run_all(&world);
}
