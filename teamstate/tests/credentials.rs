//! The team's credentials in a real PostgreSQL (docs/contract.md#team-mode): issued through one
//! gateway, a credential is read by every other at its next request; revoked or re-tiered through
//! any, the next read on every gateway sees it (no cache), the change is announced to a listener
//! at commit, and each change commits with its audit record in the one chain — or not at all.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use audit::{Actor, GENESIS};
use common::Cluster;
use engine::Tier;
use inbox::NewCredential;
use teamstate::{CREDENTIALS_CHANNEL, Heard, Listener, PgState};

fn admin(who: &str) -> Actor {
    Actor::Cli { user: who.into() }
}

fn new(name: &str, jti: &str) -> NewCredential {
    NewCredential {
        name: name.into(),
        tier: Tier::Propose,
        vaults: vec!["team".into()],
        jti: jti.into(),
        created_at: 1_800_000_000,
        expires_at: None,
        approve_in_client: false,
    }
}

/// The chain's records as (event, gateway, target), checked with the offline verifier.
fn chain(store: &PgState, dir: &std::path::Path) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    store.export_audit(0, &mut out).unwrap();
    let file = dir.join("chain.jsonl");
    std::fs::write(&file, &out).unwrap();
    let report = audit::verify_file(&file).unwrap();
    assert_eq!(report.broken, None);
    if report.records > 0 {
        assert_eq!(report.first.unwrap().1, GENESIS);
    }
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["event"].as_str().unwrap().to_owned(),
                v["gateway"].as_str().unwrap().to_owned(),
                v["target"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

#[test]
fn a_credential_changed_on_one_gateway_holds_for_the_next_read_on_every_gateway_with_its_record() {
    let cluster = Cluster::start();
    let g1 = cluster.store("team");
    let url = format!("postgres://postgres@127.0.0.1:{}/team", cluster.port);
    let g2 = PgState::connect(&url).unwrap();
    let g3 = PgState::connect(&url).unwrap();
    let heard = Listener::start(&url, CREDENTIALS_CHANNEL).unwrap();
    let dir = tempfile::tempdir().unwrap();

    // Issued on g1: read on g2 and g3; its token's jti matches there, another does not.
    let issued = g1
        .issue_credential("g1", &admin("ana"), new("agent", "jti-secret-1"))
        .unwrap();
    let id = issued.id.as_str().to_owned();
    assert_eq!(heard.next(Duration::from_secs(5)), Heard::Payload(id.clone()));
    let on_g2 = g2.credential(&id).unwrap().expect("issued on g1, read on g2");
    assert_eq!(on_g2.credential.name, "agent");
    assert_eq!(on_g2.credential.tier, Tier::Propose);
    assert!(on_g2.credential.may_see_vault("team") && !on_g2.credential.may_see_vault("other"));
    let on_g3 = g3.credential(&id).unwrap().unwrap();
    assert!(on_g3.jti_matches("jti-secret-1"));
    assert!(!on_g3.jti_matches("jti-secret-2"));
    // The database keeps no jti: only its hash.
    let stored = g1
        .query("SELECT row_to_json(c)::text FROM vaultgate.credentials c", &[])
        .unwrap();
    assert!(!stored[0].get::<_, String>(0).contains("jti-secret-1"));

    // Re-tiered on g2: g1 reads the new tier at once.
    let before = g1.credential_generation().unwrap();
    g2.set_credential_tier("g2", &admin("bo"), &id, Tier::Auto)
        .unwrap();
    assert_eq!(heard.next(Duration::from_secs(5)), Heard::Payload(id.clone()));
    assert_eq!(g1.credential(&id).unwrap().unwrap().credential.tier, Tier::Auto);
    assert!(g3.credential_generation().unwrap() > before);

    // Revoked on g3: revoked on g1 and g2 at their next read.
    g3.revoke_credential("g3", &admin("cy"), &id, 1_800_000_100)
        .unwrap();
    assert_eq!(heard.next(Duration::from_secs(5)), Heard::Payload(id.clone()));
    for g in [&g1, &g2, &g3] {
        let c = g.credential(&id).unwrap().unwrap().credential;
        assert_eq!(c.revoked_at, Some(1_800_000_100));
        assert!(c.is_revoked());
    }
    // Revoked again: the first time stays.
    g1.revoke_credential("g1", &admin("ana"), &id, 1_900_000_000)
        .unwrap();
    assert_eq!(
        g2.credential(&id).unwrap().unwrap().credential.revoked_at,
        Some(1_800_000_100)
    );
    assert_eq!(heard.next(Duration::from_secs(5)), Heard::Payload(id.clone()));

    // Refusals change nothing: no row, no generation, no record, no announcement.
    let generation = g1.credential_generation().unwrap();
    let records = chain(&g1, dir.path()).len();
    assert!(matches!(
        g2.revoke_credential("g2", &admin("bo"), "cred_nobody", 1),
        Err(engine::error::GatewayError::State(
            inbox::StateError::CredentialNotFound(_)
        ))
    ));
    assert!(matches!(
        g2.issue_credential("g2", &admin("bo"), new("agent", "jti-other")),
        Err(engine::error::GatewayError::State(
            inbox::StateError::DuplicateName(_)
        ))
    ));
    assert_eq!(g3.credential_generation().unwrap(), generation);
    assert_eq!(heard.next(Duration::from_millis(300)), Heard::Quiet);

    // Every change is one record of the chain, by the gateway that made it, in order.
    let events = chain(&g3, dir.path());
    assert_eq!(events.len(), records);
    assert_eq!(
        events,
        vec![
            ("credential.issue".to_owned(), "g1".to_owned(), id.clone()),
            ("credential.set_tier".to_owned(), "g2".to_owned(), id.clone()),
            ("credential.revoke".to_owned(), "g3".to_owned(), id.clone()),
            ("credential.revoke".to_owned(), "g1".to_owned(), id.clone()),
        ]
    );

    // A flood nobody reads is bounded: the listener keeps QUEUE payloads and says it missed some.
    g1.query(
        "SELECT pg_notify('vaultgate_credentials', n::text) FROM generate_series(1, 1500) n",
        &[],
    )
    .unwrap();
    // Time for the 1,500 to arrive while nobody reads.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(heard.next(Duration::from_secs(5)), Heard::Missed);
    let mut kept = 0;
    while let Heard::Payload(_) = heard.next(Duration::from_millis(300)) {
        kept += 1;
    }
    assert_eq!(kept, teamstate::QUEUE);
}
