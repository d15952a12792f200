//! A vault's lease against a real PostgreSQL: one holder at a time, an epoch that grows at every
//! take, renewals that keep a hold past `lease_seconds`, and the fence — once another gateway
//! took a lapsed lease over, every write of the old hold is refused and leaves nothing (no
//! record, no kept answer), and the old hold knows it lapsed by its own clock even while the
//! database does not answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use audit::{Actor, Entry, Outcome};
use common::Cluster;
use engine::error::GatewayError;
use engine::storage::team::{Fence, VaultHold};
use teamstate::PgState;

/// Two gateways' stores on the database `db`.
fn two(cluster: &Cluster, db: &str) -> (Arc<PgState>, Arc<PgState>) {
    let g1 = cluster.store(db);
    let url = format!("{}/{db}", cluster.url().trim_end_matches("/postgres"));
    (Arc::new(g1), Arc::new(PgState::connect(&url).unwrap()))
}

fn lease_seconds(store: &PgState, n: u64) {
    store
        .query(
            "INSERT INTO vaultgate.settings (key, value) VALUES ('lease_seconds', $1)
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            &[&serde_json::json!(n)],
        )
        .unwrap();
}

fn busy(r: Result<impl Sized, GatewayError>) -> bool {
    matches!(r, Err(GatewayError::VaultBusy(_)))
}

/// A write that commits a chain record and a kept answer under `fence`.
fn keep(store: &PgState, fence: &Fence, key: &str) -> Result<audit::AuditRecord, GatewayError> {
    let k = inbox::IdemKey {
        credential_id: "cred",
        key,
        tool: "history_undo",
        args_hash: "h",
    };
    let entry = Entry::new("tool_call", Actor::Cli { user: "t".into() }, Outcome::Ok);
    store.keep_answer(fence, "g", &k, &|_| serde_json::json!({"ok": true}), entry)
}

#[test]
fn one_holder_at_a_time_and_every_take_has_a_greater_epoch() {
    let cluster = Cluster::start();
    let (g1, g2) = two(&cluster, "lease_one");

    let h1 = g1.lock_vault("notes", "g1", Duration::from_secs(1)).unwrap();
    let e1 = h1.fence().epoch;
    assert!(
        busy(g2.lock_vault("notes", "g2", Duration::from_millis(300))),
        "a held lease is not taken"
    );
    // Another vault's lease is its own.
    let other = g2.lock_vault("other", "g2", Duration::from_secs(1)).unwrap();
    let leases = g1.leases().unwrap();
    assert_eq!(leases.len(), 2);
    assert!(
        leases
            .iter()
            .any(|l| l.vault == "notes" && l.holder == "g1" && l.epoch == e1 && l.held)
    );
    drop(other);
    drop(h1);
    let h2 = g2.lock_vault("notes", "g2", Duration::from_secs(1)).unwrap();
    assert!(
        h2.fence().epoch > e1,
        "a take after a release has a greater epoch"
    );
    let leases = g1.leases().unwrap();
    assert!(
        leases
            .iter()
            .any(|l| l.vault == "notes" && l.holder == "g2" && l.held)
    );
    assert!(
        leases.iter().any(|l| l.vault == "other" && !l.held),
        "released: free"
    );
    drop(h2);

    // Four threads on two gateways taking it in turn: never two holders; a gateway hands a
    // hold on to its own next waiter at most three times, else every take has a new epoch.
    let inside = AtomicUsize::new(0);
    let epochs = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..4 {
            let (store, name) = match t % 2 {
                0 => (&g1, "g1"),
                _ => (&g2, "g2"),
            };
            let (inside, epochs) = (&inside, &epochs);
            s.spawn(move || {
                for _ in 0..5 {
                    let h = store.lock_vault("notes", name, Duration::from_secs(20)).unwrap();
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders at once");
                    epochs.lock().unwrap().push((h.fence().epoch, name));
                    std::thread::sleep(Duration::from_millis(5));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    drop(h);
                }
            });
        }
    });
    let epochs = epochs.into_inner().unwrap();
    assert_eq!(epochs.len(), 20);
    assert!(
        epochs
            .windows(2)
            .all(|w| w[0].0 < w[1].0 || (w[0].0 == w[1].0 && w[0].1 == w[1].1)),
        "epochs never go back, and one is shared only within a gateway: {epochs:?}"
    );
    let mut per = std::collections::BTreeMap::new();
    for (e, _) in &epochs {
        *per.entry(*e).or_insert(0) += 1;
    }
    assert!(
        per.values().all(|n| *n <= 4),
        "at most 4 holds per take: {epochs:?}"
    );
    let epochs: Vec<i64> = epochs.iter().map(|(e, _)| *e).collect();
    assert!(epochs[0] > e1);
}

#[test]
fn a_hold_renews_past_lease_seconds_and_one_taken_over_is_fenced_out() {
    let cluster = Cluster::start();
    let (g1, g2) = two(&cluster, "lease_fence");
    lease_seconds(&g1, 3);

    let h1 = g1.lock_vault("notes", "g1", Duration::from_secs(1)).unwrap();
    std::thread::sleep(Duration::from_millis(4500));
    assert!(
        busy(g2.lock_vault("notes", "g2", Duration::from_millis(200))),
        "renewed: still held past lease_seconds"
    );
    h1.check().unwrap();
    keep(&g1, h1.fence(), "k1").unwrap();

    // Its time runs out behind its back (as when its renewals stop reaching the database), and
    // another gateway takes it over.
    g1.query(
        "UPDATE vaultgate.leases SET expires_at = now() WHERE vault = 'notes'",
        &[],
    )
    .unwrap();
    let h2 = g2.lock_vault("notes", "g2", Duration::from_secs(1)).unwrap();
    assert_eq!(h2.fence().epoch, h1.fence().epoch + 1);
    let head = g1.audit_chain_head().unwrap();
    assert!(busy(keep(&g1, h1.fence(), "k2")), "the old epoch records nothing");
    assert!(busy(g1.drop_job(h1.fence(), "p", "j")));
    assert_eq!(
        g1.audit_chain_head().unwrap(),
        head,
        "no record of the refused write"
    );
    assert!(g1.idempotency("cred", "k2").unwrap().is_none(), "no answer kept");
    // Its next renewal hears it lost the lease.
    let deadline = Instant::now() + Duration::from_secs(5);
    while h1.check().is_ok() {
        assert!(
            Instant::now() < deadline,
            "the old hold never learned it was taken over"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The new holder writes; the old one's release leaves it held.
    keep(&g2, h2.fence(), "k3").unwrap();
    drop(h1);
    assert!(busy(g1.lock_vault("notes", "g1", Duration::from_millis(200))));
    keep(&g2, h2.fence(), "k4").unwrap();
}

#[test]
fn a_hold_whose_renewals_go_unanswered_lapses_by_its_own_clock() {
    let cluster = Cluster::start();
    let (g1, g2) = two(&cluster, "lease_clock");
    lease_seconds(&g1, 3);
    let h1 = g1.lock_vault("notes", "g1", Duration::from_secs(1)).unwrap();
    h1.check().unwrap();

    // The database answers nothing: no renewal is counted, and the hold stops trusting itself
    // before the database's expiry (3 s after the last renewal it granted).
    cluster.pause();
    let paused = Instant::now();
    while h1.check().is_ok() {
        assert!(
            paused.elapsed() < Duration::from_secs(3),
            "the hold outlived its lease"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Released while nothing answers: given up after a bound, not the database's deadlines
    // (the call that drops it is failing already).
    let old = h1.fence().clone();
    let dropping = Instant::now();
    drop(h1);
    assert!(
        dropping.elapsed() < Duration::from_secs(5),
        "{:?}",
        dropping.elapsed()
    );
    std::thread::sleep(Duration::from_millis(3500).saturating_sub(paused.elapsed()));
    cluster.resume();

    // Expired on the database's clock: another gateway takes it, and the old epoch is fenced.
    let h2 = g2.lock_vault("notes", "g2", Duration::from_secs(5)).unwrap();
    assert!(h2.fence().epoch > old.epoch);
    assert!(busy(keep(&g1, &old, "late")));
    keep(&g2, h2.fence(), "now").unwrap();
}

/// Waiters take turns: in a gateway in the order they came, the hold handed on to the next
/// at most three times; then the lease goes to the gateway whose waiter queued first, before
/// the first gateway's newer callers (who would win a race of asks as often as not). A waiter
/// that gives up leaves no ticket behind.
#[test]
fn waiters_take_turns_across_gateways_and_within_one() {
    let cluster = Cluster::start();
    let (g1, g2) = two(&cluster, "lease_turns");
    for round in 0..3 {
        let held = g1.lock_vault("notes", "g1", Duration::from_secs(1)).unwrap();
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let waiter = |store: &Arc<PgState>, name: &'static str| {
            let (store, order) = (store.clone(), order.clone());
            std::thread::spawn(move || {
                let hold = store.lock_vault("notes", name, Duration::from_secs(10)).unwrap();
                order.lock().unwrap().push((name, hold.fence().epoch));
                std::thread::sleep(Duration::from_millis(50));
                drop(hold);
            })
        };
        // g2's caller waits first; then five callers of g1, in order.
        let mut threads = vec![waiter(&g2, "g2")];
        std::thread::sleep(Duration::from_millis(300));
        // `team status` shows who waits.
        let notes = g1.leases().unwrap().into_iter().find(|l| l.vault == "notes");
        assert_eq!(notes.map(|l| l.waiting), Some(vec!["g2".to_owned()]));
        for name in ["g1-1", "g1-2", "g1-3", "g1-4", "g1-5"] {
            threads.push(waiter(&g1, name));
            std::thread::sleep(Duration::from_millis(100));
        }
        let first = held.fence().epoch;
        drop(held);
        for t in threads {
            t.join().unwrap();
        }
        let order = order.lock().unwrap().clone();
        let (e, f) = (first, first + 1);
        assert_eq!(
            order,
            [
                ("g1-1", e),
                ("g1-2", e),
                ("g1-3", e),
                ("g2", f),
                ("g1-4", f + 1),
                ("g1-5", f + 1)
            ],
            "round {round}"
        );
    }
    // A wait that ends without the lease takes its ticket out of the line.
    let held = g1.lock_vault("notes", "g1", Duration::from_secs(1)).unwrap();
    assert!(busy(g2.lock_vault("notes", "g2", Duration::from_millis(300))));
    let left = g1
        .query("SELECT count(*) FROM vaultgate.lease_queue", &[])
        .unwrap();
    assert_eq!(left[0].get::<_, i64>(0), 0);
    drop(held);
}
