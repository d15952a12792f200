//! The team and its roles in a real PostgreSQL (docs/contract.md#team-mode): a database holds one
//! team, joined only with its secret (checked against a key check value, the secret never
//! stored); a reviewer gateway's PostgreSQL role reads everything and appends to the audit but
//! cannot issue, change or revoke a credential, register a vault or change a setting — the
//! database refuses, as `CAPABILITY_DENIED`, and nothing changes; no gateway role, not even the
//! tables' owner, can change or delete an audit record.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use audit::{Actor, Entry, Outcome};
use common::Cluster;
use engine::Tier;
use engine::error::GatewayError;
use inbox::NewCredential;
use teamstate::{PgState, Role};
use time::OffsetDateTime;

fn admin() -> Actor {
    Actor::Cli { user: "ana".into() }
}

fn new(name: &str) -> NewCredential {
    NewCredential {
        name: name.into(),
        tier: Tier::Propose,
        vaults: vec![],
        jti: format!("jti-{name}"),
        created_at: 1_800_000_000,
        expires_at: None,
        approve_in_client: false,
    }
}

fn denied<T: std::fmt::Debug>(r: Result<T, GatewayError>) {
    match r {
        Err(GatewayError::CapabilityDenied(msg)) => assert!(msg.contains("reviewer"), "{msg}"),
        other => panic!("expected CAPABILITY_DENIED, got {other:?}"),
    }
}

fn refused<T: std::fmt::Debug>(r: Result<T, GatewayError>, says: &str) {
    match r {
        Err(GatewayError::InvalidArgument(msg)) => assert!(msg.contains(says), "{msg}"),
        other => panic!("expected a refusal saying {says:?}, got {other:?}"),
    }
}

fn head(store: &PgState) -> (u64, String) {
    store.audit_chain_head().unwrap()
}

#[test]
fn one_team_per_database_joined_with_its_secret_and_a_reviewer_role_the_database_confines() {
    let cluster = Cluster::start();
    let g1 = cluster.store("team");
    let secret = [7u8; 32];
    let id = g1.init_team(&secret, "g1", "0.1.0").unwrap();
    refused(g1.init_team(&secret, "g9", "0.1.0"), "already holds a team");
    refused(
        g1.join_team(&[8u8; 32], "g2", Role::Admin, "0.1.0"),
        "not the team's",
    );
    let stored = g1
        .query("SELECT row_to_json(t)::text FROM vaultgate.team t", &[])
        .unwrap();
    assert!(
        !stored[0].get::<_, String>(0).contains(&hex(&secret)),
        "the secret is not stored"
    );

    // A reviewer gateway: its own PostgreSQL role, granted by an admin.
    g1.query("CREATE ROLE reviewer_one LOGIN", &[]).unwrap();
    refused(g1.grant_reviewer("reviewer one; DROP TABLE x"), "role name");
    refused(g1.grant_reviewer("postgres"), "superuser");
    g1.grant_reviewer("reviewer_one").unwrap();
    let g2 = PgState::connect(&format!(
        "postgres://reviewer_one@127.0.0.1:{}/team",
        cluster.port
    ))
    .unwrap();
    assert_eq!(g2.join_team(&secret, "g2", Role::Reviewer, "0.1.0").unwrap(), id);
    assert!(matches!(
        g2.join_team(&secret, "g2", Role::Reviewer, "0.1.0"),
        Err(GatewayError::State(inbox::StateError::DuplicateName(_)))
    ));
    g2.gateway_seen("g2", "0.1.1").unwrap();
    let status = g2.team_status().unwrap().expect("a team");
    assert_eq!(status.team_id, id);
    assert_eq!(status.schema_version, 15);
    let seen: Vec<(&str, &str, &str)> = status
        .gateways
        .iter()
        .map(|g| (g.name.as_str(), g.role.as_str(), g.version.as_str()))
        .collect();
    assert_eq!(seen, vec![("g1", "admin", "0.1.0"), ("g2", "reviewer", "0.1.1")]);

    // The admin issues; the reviewer reads, and may not issue, re-tier or revoke.
    let cred = g1.issue_credential("g1", &admin(), new("agent")).unwrap();
    let cid = cred.id.as_str().to_owned();
    assert_eq!(g2.credential(&cid).unwrap().unwrap().credential.name, "agent");
    let (generation, chain) = (g1.credential_generation().unwrap(), head(&g1));
    denied(g2.issue_credential("g2", &admin(), new("other")));
    denied(g2.revoke_credential("g2", &admin(), &cid, 1_800_000_001));
    denied(g2.set_credential_tier("g2", &admin(), &cid, Tier::Full));
    let after = g1.credential(&cid).unwrap().unwrap().credential;
    assert_eq!((after.tier, after.revoked_at), (Tier::Propose, None));
    assert_eq!(g1.credential_generation().unwrap(), generation);
    assert_eq!(head(&g1), chain, "no record of a change that did not happen");
    let names = g1.query("SELECT name FROM vaultgate.credentials", &[]).unwrap();
    assert_eq!(names.len(), 1, "the reviewer's issue left no row");

    // It appends to the audit, and cannot change, delete or write what only admins write.
    let mut e = Entry::new("tool_call", Actor::Cli { user: "bo".into() }, Outcome::Ok);
    e.tool = Some("list_proposals".into());
    let r = g2.append_audit("g2", vec![e], OffsetDateTime::now_utc()).unwrap();
    assert_eq!(r[0].seq, chain.0 + 1);
    for sql in [
        "UPDATE vaultgate.audit SET line = 'x' WHERE seq = 1",
        "DELETE FROM vaultgate.audit WHERE seq = 1",
        "INSERT INTO vaultgate.vaults VALUES ('v', 'file:///r', 'main')",
        "INSERT INTO vaultgate.settings VALUES ('lease_seconds', '5')",
        "UPDATE vaultgate.team SET key_check = 'x'",
        "UPDATE vaultgate.credential_generation SET n = 0",
    ] {
        denied(g2.query(sql, &[]));
    }

    // Nor write the chain's head, insert a record that does not follow it or is not its own,
    // or make itself an admin.
    let before = head(&g1);
    let mut e = Entry::new("tool_call", Actor::Cli { user: "bo".into() }, Outcome::Ok);
    e.tool = Some("forged".into());
    denied(g2.append_audit("g1", vec![e], OffsetDateTime::now_utc()));
    denied(g2.query("UPDATE vaultgate.audit_chain_head SET seq = 1000", &[]));
    let forged = format!(
        "{{\"gateway\":\"g2\",\"hash\":\"{h}\",\"prev\":\"{p}\",\"seq\":{n}}}",
        h = "ab".repeat(32),
        p = before.1,
        n = before.0 + 1
    );
    let next = i64::try_from(before.0 + 1).unwrap();
    let hash = "ab".repeat(32);
    assert!(
        g2.query(
            "INSERT INTO vaultgate.audit (seq, hash, gateway, line) VALUES ($1, $2, 'g2', $3)",
            &[&next, &hash, &forged],
        )
        .is_err()
    );
    // A record sealed on another prev, or a batch whose second record does not follow its
    // first, is refused whole, though each line hashes to its own hash.
    let sealed = |seq: u64, prev: &str| {
        let mut e = Entry::new("tool_call", Actor::Cli { user: "bo".into() }, Outcome::Ok);
        e.gateway = Some("g2".into());
        let (r, line) = audit::seal(e, seq, prev, OffsetDateTime::now_utc()).unwrap();
        (i64::try_from(r.seq).unwrap(), r.hash, line.trim_end().to_owned())
    };
    let insert = "INSERT INTO vaultgate.audit (seq, hash, gateway, line) VALUES ($1, $2, 'g2', $3)";
    let (n, h, l) = sealed(before.0, &"00".repeat(32));
    assert!(
        g2.query(insert, &[&n, &h, &l]).is_err(),
        "a record on another prev"
    );
    let (n1, h1, l1) = sealed(before.0, &before.1);
    let (n2, h2, l2) = sealed(before.0 + 1, &"11".repeat(32));
    assert!(
        g2.query(
            "INSERT INTO vaultgate.audit (seq, hash, gateway, line) VALUES ($1, $2, 'g2', $3), ($4, $5, 'g2', $6)",
            &[&n1, &h1, &l1, &n2, &h2, &l2],
        )
        .is_err(),
        "a batch that does not chain"
    );
    denied(g2.query(
        "UPDATE vaultgate.gateways SET role = 'admin' WHERE name = 'g2'",
        &[],
    ));
    denied(g2.query(
        "INSERT INTO vaultgate.gateways (name, role, version) VALUES ('g7', 'admin', 'x')",
        &[],
    ));
    assert_eq!(head(&g1), before, "nothing reached the chain");
    // Only an existing, confinable role becomes a reviewer.
    for (role, says) in [
        ("public", "not public"),
        ("pg_monitor", "not public"),
        ("postgres", "superuser"),
        ("nobody_here", "no PostgreSQL role"),
    ] {
        refused(g1.grant_reviewer(role), says);
    }

    // The tables' owner (an admin gateway that is no superuser) cannot change the audit either.
    g1.query("CREATE ROLE owner_one LOGIN", &[]).unwrap();
    g1.query("CREATE DATABASE owned OWNER owner_one", &[]).unwrap();
    let owner = PgState::connect(&format!("postgres://owner_one@127.0.0.1:{}/owned", cluster.port)).unwrap();
    let mut e = Entry::new("cli", admin(), Outcome::Ok);
    e.target = Some("x".into());
    owner
        .append_audit("g1", vec![e], OffsetDateTime::now_utc())
        .unwrap();
    denied(owner.query("UPDATE vaultgate.audit SET line = 'x'", &[]));
    denied(owner.query("DELETE FROM vaultgate.audit", &[]));
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A gateway's check of a vault's history reads the registered head, fetches, and only then
/// marks the history rewritten; a `vault resync` committed in between must win: the mark made
/// against the head read before it is refused, and the vault stays resynced.
#[test]
fn a_rewritten_mark_checked_against_a_head_a_resync_replaced_is_refused() {
    let cluster = Cluster::start();
    let g1 = cluster.store("team");
    g1.init_team(&[7u8; 32], "g1", "0.1.0").unwrap();
    let mark = |registered: Option<&str>, seen: &str| {
        let mut entry = Entry::new(
            "vault.history_rewritten",
            Actor::Cli {
                user: "gateway:g1".into(),
            },
            Outcome::Denied,
        );
        entry.vault = Some("notes".into());
        g1.mark_rewritten("g1", "notes", registered, seen, entry).unwrap()
    };
    g1.register_head("notes", None, "a").unwrap();
    // A head read that is no longer the registered one marks nothing.
    assert!(!mark(Some("z"), "b"));
    assert_eq!(g1.vault_head("notes").unwrap(), (Some("a".into()), None));
    // Marked once against the head read.
    assert!(mark(Some("a"), "b"));
    assert!(!mark(Some("a"), "b"));
    assert_eq!(
        g1.vault_head("notes").unwrap(),
        (Some("a".into()), Some("b".into()))
    );
    let marks = |g: &PgState| {
        let mut out = Vec::new();
        g.export_audit(0, &mut out).unwrap();
        String::from_utf8(out)
            .unwrap()
            .lines()
            .filter(|r| r.contains("vault.history_rewritten"))
            .count()
    };
    assert_eq!(marks(&g1), 1);
    // An operator accepts the new history; a check that read the old head before that is refused.
    g1.resync_vault(
        "g1",
        "notes",
        "b",
        Entry::new("vault.resync", admin(), Outcome::Ok),
    )
    .unwrap();
    assert!(!mark(Some("a"), "c"));
    assert_eq!(g1.vault_head("notes").unwrap(), (Some("b".into()), None));
    assert_eq!(marks(&g1), 1);
    // A rewrite after the resync is still marked.
    assert!(mark(Some("b"), "c"));
    assert_eq!(marks(&g1), 2);
}
