//! Two processes sharing one `state.sqlite`: each `State` handle here is its own connection, as a
//! server and a CLI would be. Transitions out of `pending` must have exactly one winner.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::{Arc, Barrier};
use std::thread;

use inbox::{NewProposal, ProposalStatus, State};
use serde_json::{Value, json};

fn propose(s: &State, id: &str) {
    let meta = json!({"id": id, "slug": id, "vault": "v"});
    s.insert_proposal(&NewProposal {
        vault: "v",
        id,
        slug: id,
        kind: "new",
        target: "notes/a.md",
        created_by: "cred_1",
        created_at: "2026-05-01T00:00:01Z",
        meta: &meta,
    })
    .unwrap();
}

fn two_handles(path: &Path) -> (Arc<State>, Arc<State>) {
    (
        Arc::new(State::open(path).unwrap()),
        Arc::new(State::open(path).unwrap()),
    )
}

const ROUNDS: usize = 100;

/// Runs `op(handle, worker, id)` for every id from two threads on two handles, in lockstep, and
/// returns which worker won each id.
fn race(op: fn(&State, usize, &str) -> bool) -> (tempfile::TempDir, State, Vec<Vec<usize>>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.sqlite");
    let (a, b) = two_handles(&path);
    let ids: Vec<String> = (0..ROUNDS).map(|i| format!("p{i}")).collect();
    for id in &ids {
        propose(&a, id);
    }
    let barrier = Arc::new(Barrier::new(2));
    let workers: Vec<_> = [a, b]
        .into_iter()
        .enumerate()
        .map(|(worker, state)| {
            let ids = ids.clone();
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                ids.iter()
                    .map(|id| {
                        barrier.wait();
                        op(&state, worker, id)
                    })
                    .collect::<Vec<bool>>()
            })
        })
        .collect();
    let results: Vec<Vec<bool>> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let winners = (0..ROUNDS)
        .map(|i| (0..2).filter(|&w| results[w][i]).collect())
        .collect();
    (dir, State::open(&path).unwrap(), winners)
}

#[test]
fn racing_applies_on_two_handles_have_exactly_one_winner() {
    let (_dir, s, winners) = race(|s, worker, id| {
        s.mark_applied(
            id,
            &format!("w{worker}"),
            "2026-05-01T00:00:02Z",
            &json!({"by": worker}),
        )
        .unwrap()
    });
    for (i, w) in winners.iter().enumerate() {
        assert_eq!(w.len(), 1, "p{i}: winners {w:?}");
        let p = s.proposal("v", &format!("p{i}")).unwrap().unwrap();
        assert_eq!(p.status, ProposalStatus::Applied);
        // The stored result is the winner's, never overwritten by the loser.
        assert_eq!(p.result, Some(json!({"by": w[0]})));
        assert_eq!(p.decided_by, Some(format!("w{}", w[0])));
    }
    assert_eq!(s.count_pending("v").unwrap(), 0);
}

#[test]
fn apply_racing_reject_has_exactly_one_winner() {
    let (_dir, s, winners) = race(|s, worker, id| {
        if worker == 0 {
            s.mark_applied(id, "applier", "2026-05-01T00:00:02Z", &Value::Null)
                .unwrap()
        } else {
            s.mark_rejected(id, "rejecter", "2026-05-01T00:00:02Z", "no")
                .unwrap()
        }
    });
    for (i, w) in winners.iter().enumerate() {
        assert_eq!(w.len(), 1, "p{i}: winners {w:?}");
        let p = s.proposal("v", &format!("p{i}")).unwrap().unwrap();
        let expected = if w[0] == 0 {
            ProposalStatus::Applied
        } else {
            ProposalStatus::Rejected
        };
        assert_eq!(p.status, expected);
        assert_eq!(p.reject_reason.is_some(), expected == ProposalStatus::Rejected);
    }
}

#[test]
fn fifty_distinct_proposals_applied_concurrently_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.sqlite");
    let (a, b) = two_handles(&path);
    for i in 0..50 {
        propose(&a, &format!("p{i}"));
    }
    let barrier = Arc::new(Barrier::new(50));
    let workers: Vec<_> = (0..50)
        .map(|i| {
            let state = Arc::clone(if i % 2 == 0 { &a } else { &b });
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                barrier.wait();
                state
                    .mark_applied(&format!("p{i}"), "c", "2026-05-01T00:00:02Z", &json!(i))
                    .unwrap()
            })
        })
        .collect();
    for w in workers {
        assert!(w.join().unwrap());
    }
    assert_eq!(b.count_pending("v").unwrap(), 0);
    let applied = a.list_proposals("v", Some(ProposalStatus::Applied), 100).unwrap();
    assert_eq!(applied.len(), 50);
}

#[test]
fn racing_idempotency_puts_store_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.sqlite");
    let (a, b) = two_handles(&path);
    let barrier = Arc::new(Barrier::new(2));
    let workers: Vec<_> = [a, b]
        .into_iter()
        .enumerate()
        .map(|(worker, state)| {
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                (0..ROUNDS)
                    .map(|i| {
                        barrier.wait();
                        let hash = format!("h{worker}");
                        state
                            .idempotency_put(
                                "c",
                                &format!("k{i}"),
                                "apply_proposal",
                                &hash,
                                &json!(worker),
                                "2026-05-01T00:00:02Z",
                            )
                            .unwrap()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let results: Vec<Vec<inbox::IdemPut>> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    for (i, pair) in results[0].iter().zip(&results[1]).enumerate() {
        let (winner, existing) = match pair {
            (inbox::IdemPut::Stored, inbox::IdemPut::Existing(r)) => (0, r),
            (inbox::IdemPut::Existing(r), inbox::IdemPut::Stored) => (1, r),
            other => panic!("k{i}: {other:?}"),
        };
        // The loser sees the winner's record.
        assert_eq!(existing.args_hash, format!("h{winner}"));
        assert_eq!(existing.result, json!(winner));
    }
}
