//! Calls handed to a vault's applier against a real PostgreSQL (docs/contract.md#team-lease "One
//! applier at a time"): queued only while another gateway holds the lease, taken only by the
//! process holding it, once; taken back once (from the queue, or from a taker); answered only by
//! the taker that still has it; a retry finds the call it repeats until that one is answered.
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
        Handed::Waiting { taken_by: None, holder: Some(h), taker_queued: false } if h == "g1"
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
            holder: None,
            taker_queued: false
        }
    ));
    assert!(!g2.hand_call(&call("c5", "g2")).unwrap());
    assert_eq!(g1.handed_counts("notes").unwrap(), (1, 0));

    // A call queued longer ago than the ttl is not taken, and forgotten.
    let again = g1.lock_vault("notes", "g1", Duration::from_secs(1)).unwrap();
    std::thread::sleep(Duration::from_millis(1_100));
    assert!(g1.take_handed("g1", "notes", 10, 1).unwrap().is_empty());
    assert_eq!(g2.handed("c4").unwrap(), Handed::Gone);
    assert_eq!(g1.handed_counts("notes").unwrap(), (0, 0));
    drop(again);
}

#[test]
fn a_retry_finds_the_call_it_repeats_while_that_one_is_not_answered() {
    let cluster = Cluster::start();
    let g1 = Arc::new(cluster.store("retries"));
    let url = format!("{}/retries", cluster.url().trim_end_matches("/postgres"));
    let g2 = Arc::new(PgState::connect(&url).unwrap());
    let hold = g1.lock_vault("notes", "g1", Duration::from_secs(5)).unwrap();
    assert!(g2.hand_call(&call("k1", "g2")).unwrap());

    // The same call again, through another gateway: it finds k1. Other arguments (another key),
    // another credential or another tool find nothing.
    let retry = HandedCall {
        id: "r1".into(),
        ..call("k1", "g3")
    };
    let like = |c: &HandedCall, ttl| g2.pending_like(c, ttl).unwrap();
    assert_eq!(like(&retry, 600).as_deref(), Some("k1"));
    assert_eq!(like(&call("k2", "g2"), 600), None);
    let stranger = HandedCall {
        credential: "other".into(),
        ..retry.clone()
    };
    assert_eq!(like(&stranger, 600), None);
    let undo = HandedCall {
        tool: "history_undo".into(),
        ..retry.clone()
    };
    assert_eq!(like(&undo, 600), None);

    // Queued longer ago than the ttl (never taken now): not found; taken: found, whatever its
    // age; answered: not pending any more.
    std::thread::sleep(Duration::from_millis(1_100));
    assert_eq!(like(&retry, 1), None);
    assert_eq!(g1.take_handed("g1", "notes", 10, 600).unwrap().len(), 1);
    assert_eq!(like(&retry, 1).as_deref(), Some("k1"));
    assert!(g1.answer_handed("g1", "k1", &json!({"ok": 1})).unwrap());
    assert_eq!(like(&retry, 600), None);
    drop(hold);
}

#[test]
fn a_taker_waiting_in_line_for_the_lease_is_told_apart_from_one_that_left() {
    let cluster = Cluster::start();
    let g1 = Arc::new(cluster.store("line"));
    let url = format!("{}/line", cluster.url().trim_end_matches("/postgres"));
    let g2 = Arc::new(PgState::connect(&url).unwrap());
    let hold = g1.lock_vault("notes", "g1", Duration::from_secs(5)).unwrap();
    assert!(g2.hand_call(&call("w1", "g2")).unwrap());
    assert_eq!(g1.take_handed("g1", "notes", 10, 600).unwrap().len(), 1);
    let seen = |holder: Option<&str>, queued: bool| Handed::Waiting {
        taken_by: Some("g1".into()),
        holder: holder.map(str::to_owned),
        taker_queued: queued,
    };
    assert_eq!(g2.handed("w1").unwrap(), seen(Some("g1"), false));

    // g1 lets the lease go and g3 takes it: g1 neither holds nor waits (it left)...
    drop(hold);
    let other = g2.lock_vault("notes", "g3", Duration::from_secs(5)).unwrap();
    assert_eq!(g2.handed("w1").unwrap(), seen(Some("g3"), false));
    // ...until it waits in line for the lease again (its ticket live).
    let waiting = {
        let g1 = g1.clone();
        std::thread::spawn(move || g1.lock_vault("notes", "g1", Duration::from_secs(10)).map(drop))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while g2.handed("w1").unwrap() != seen(Some("g3"), true) {
        assert!(std::time::Instant::now() < deadline, "{:?}", g2.handed("w1"));
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(other);
    waiting.join().unwrap().unwrap();
}
