//! Calls handed to a vault's applier against a real PostgreSQL (docs/contract.md#team-lease "One
//! applier at a time"): queued only while another gateway holds the lease, taken only by the
//! process holding it, once; taken back once (from the queue, or from a taker); answered only by
//! the taker that still has it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::Cluster;
use engine::storage::team::{Handed, HandedCall};
use serde_json::json;
use teamstate::PgState;

fn call(id: &str, from: &str) -> HandedCall {
    HandedCall {
        id: id.into(),
        vault: "notes".into(),
        gateway: from.into(),
        credential: "cred".into(),
        transport: "http".into(),
        tool: "apply_proposal".into(),
        args: json!({"id": "p", "proposalHash": "h", "idempotencyKey": id}),
    }
}

#[test]
fn a_call_is_handed_only_to_another_holder_taken_by_it_once_and_answered_by_its_taker_only() {
    let cluster = Cluster::start();
    let g1 = Arc::new(cluster.store("calls"));
    let url = format!("{}/calls", cluster.url().trim_end_matches("/postgres"));
    let g2 = Arc::new(PgState::connect(&url).unwrap());

    // Nobody holds the lease: nothing is queued (the receiver applies itself).
    assert!(!g2.hand_call(&call("c0", "g2")).unwrap());
    let hold = g1.lock_vault("notes", "g1", Duration::from_secs(1)).unwrap();
    // Its own gateway holds it: not handed either.
    assert!(!g1.hand_call(&call("c0", "g1")).unwrap());
    assert!(g2.hand_call(&call("c1", "g2")).unwrap());
    assert!(g2.hand_call(&call("c2", "g2")).unwrap());
    assert_eq!(g1.handed_counts("notes").unwrap(), (2, 0));
    assert!(matches!(
        g2.handed("c1").unwrap(),
        Handed::Waiting { taken_by: None, holder: Some(h) } if h == "g1"
    ));

    // Only the holder takes, oldest first, each call once; g2, which does not hold the lease,
    // takes nothing.
    assert!(g1.holds_lease("notes") && !g2.holds_lease("notes"));
    assert!(g2.take_handed("g2", "notes", 10, 600).unwrap().is_empty());
    let taken = g1.take_handed("g1", "notes", 1, 600).unwrap();
    assert_eq!(taken.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["c1"]);
    assert_eq!(taken[0], call("c1", "g2"));
    assert!(
        g1.take_handed("g1", "notes", 10, 600)
            .unwrap()
            .iter()
            .all(|c| c.id == "c2")
    );
    assert!(g1.take_handed("g1", "notes", 10, 600).unwrap().is_empty());
    assert_eq!(g1.handed_counts("notes").unwrap(), (0, 2));

    // c1 answered by its taker; another gateway cannot answer it, nor take it back once answered.
    assert!(!g2.answer_handed("g2", "c1", &json!({"ok": 2})).unwrap());
    assert!(g1.answer_handed("g1", "c1", &json!({"ok": 1, "seq": 7})).unwrap());
    assert!(!g1.answer_handed("g1", "c1", &json!({"ok": 3})).unwrap());
    assert!(!g2.take_back_handed("c1", Some("g1")).unwrap());
    assert_eq!(
        g2.handed("c1").unwrap(),
        Handed::Answered(json!({"ok": 1, "seq": 7}))
    );
    g2.forget_handed("c1").unwrap();
    assert_eq!(g2.handed("c1").unwrap(), Handed::Gone);

    // c2 taken back from its taker (it left): gone, and its late answer is refused.
    assert!(!g2.take_back_handed("c2", None).unwrap(), "taken, not queued");
    assert!(g2.take_back_handed("c2", Some("g1")).unwrap());
    assert!(!g1.answer_handed("g1", "c2", &json!({"ok": 1})).unwrap());
    assert_eq!(g2.handed("c2").unwrap(), Handed::Gone);

    // A queued call withdrawn once; released lease: nothing more is taken, nor handed.
    assert!(g2.hand_call(&call("c3", "g2")).unwrap());
    assert!(g2.take_back_handed("c3", None).unwrap());
    assert!(!g2.take_back_handed("c3", None).unwrap());
    assert!(g2.hand_call(&call("c4", "g2")).unwrap());
    drop(hold);
    assert!(!g1.holds_lease("notes"));
    assert!(g1.take_handed("g1", "notes", 10, 600).unwrap().is_empty());
    assert!(matches!(
        g2.handed("c4").unwrap(),
        Handed::Waiting {
            taken_by: None,
            holder: None
        }
    ));
    assert!(!g2.hand_call(&call("c5", "g2")).unwrap());
    assert_eq!(g1.handed_counts("notes").unwrap(), (1, 0));

    // A call queued longer ago than the ttl is not taken.
    let again = g1.lock_vault("notes", "g1", Duration::from_secs(1)).unwrap();
    std::thread::sleep(Duration::from_millis(1_100));
    assert!(g1.take_handed("g1", "notes", 10, 1).unwrap().is_empty());
    assert_eq!(g1.take_handed("g1", "notes", 10, 600).unwrap().len(), 1);
    drop(again);
}
