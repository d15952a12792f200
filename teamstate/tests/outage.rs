//! The team's audit chain through one gateway's writer, against a real PostgreSQL: calls made at
//! once share batches and each answers only once its record is in; with the database stopped
//! (an immediate shutdown) every append fails closed with `AUDIT_UNAVAILABLE` and nothing is
//! half-written; started again, the same writer appends again and the chain has no gap.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use audit::{Actor, Entry, GENESIS, Outcome};
use common::Cluster;
use engine::error::GatewayError;
use teamstate::{ChainWriter, Heard, Listener, PgState};

fn entry(who: &str, i: usize) -> Entry {
    let mut e = Entry::new("tool_call", Actor::Cli { user: who.into() }, Outcome::Ok);
    e.target = Some(format!("{who}/{i}"));
    e
}

fn verified(store: &PgState, dir: &std::path::Path) -> audit::FileReport {
    let mut out = Vec::new();
    store.export_audit(0, &mut out).unwrap();
    let file = dir.join("export.jsonl");
    std::fs::write(&file, &out).unwrap();
    audit::verify_file(&file).unwrap()
}

#[test]
fn calls_at_once_share_batches_and_the_database_stopped_fails_every_append_closed_until_it_is_back() {
    let mut cluster = Cluster::start();
    let store = Arc::new(cluster.store("outage"));
    let dir = tempfile::tempdir().unwrap();
    let writer = ChainWriter::start(store.clone(), "g1").unwrap();

    // Eight callers at once, forty records each.
    let (threads, each) = (8, 40);
    let answered: Vec<Vec<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let writer = &writer;
                s.spawn(move || {
                    (0..each)
                        .map(|i| writer.append(entry(&format!("t{t}"), i)).unwrap().seq)
                        .collect::<Vec<u64>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let total = threads * each;
    for seqs in &answered {
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "a caller's records in its order"
        );
    }
    let mut all: Vec<u64> = answered.concat();
    all.sort_unstable();
    assert_eq!(
        all,
        (1..=total as u64).collect::<Vec<_>>(),
        "each record once, no gap"
    );
    assert!(
        writer.batches() < total as u64,
        "calls at once share batches: {} batches for {total} records",
        writer.batches()
    );
    let report = verified(&store, dir.path());
    assert_eq!((report.records as usize, report.broken.clone()), (total, None));
    assert_eq!(report.first, Some((1, GENESIS.to_owned())));

    // The database stops at once: every append is refused, promptly, as unavailable, and a
    // listener says it lost its connection (rather than staying quiet).
    let listener = Listener::start(
        &format!("postgres://postgres@127.0.0.1:{}/outage", cluster.port),
        teamstate::CREDENTIALS_CHANNEL,
    )
    .unwrap();
    assert_eq!(listener.next(Duration::from_millis(50)), Heard::Quiet);
    cluster.stop();
    assert_eq!(listener.next(Duration::from_secs(10)), Heard::Lost);
    for i in 0..3 {
        let began = Instant::now();
        match writer.append(entry("down", i)) {
            Err(GatewayError::AuditUnavailable) => {}
            other => panic!("an append with the database down: {other:?}"),
        }
        assert!(began.elapsed() < Duration::from_secs(15), "refused promptly");
    }
    assert!(matches!(
        store.audit_chain_head(),
        Err(GatewayError::AuditUnavailable)
    ));

    // Back: the same writer appends again, right after the last record before the outage.
    cluster.start_again();
    let deadline = Instant::now() + Duration::from_secs(30);
    let record = loop {
        match writer.append(entry("back", 0)) {
            Ok(r) => break r,
            Err(GatewayError::AuditUnavailable) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("after the restart: {e:?}"),
        }
    };
    assert_eq!(
        record.seq,
        total as u64 + 1,
        "nothing from the outage is in the chain"
    );
    let report = verified(&store, dir.path());
    assert_eq!((report.records as usize, report.broken), (total + 1, None));
    assert_eq!(store.audit_chain_head().unwrap(), (record.seq, record.hash));
}

#[test]
fn a_database_that_stalls_fails_each_call_within_the_deadline_and_serves_again_once_it_moves() {
    let cluster = Cluster::start();
    let store = cluster.store("stall");
    let now = time::OffsetDateTime::now_utc;
    assert_eq!(
        store.append_audit("g1", vec![entry("before", 0)], now()).unwrap()[0].seq,
        1
    );

    // Frozen: connections open, nothing answers. The call gives up, as unavailable, within the
    // store's deadline (10 s) instead of waiting for ever.
    cluster.pause();
    let began = Instant::now();
    let stalled = store.append_audit("g1", vec![entry("stalled", 0)], now());
    let took = began.elapsed();
    cluster.resume();
    assert!(
        matches!(stalled, Err(GatewayError::AuditUnavailable)),
        "{stalled:?}"
    );
    assert!(took < Duration::from_secs(20), "gave up after {took:?}");

    // Moving again: the next call opens a new connection and appends right after the last
    // record; the stalled one left nothing.
    let deadline = Instant::now() + Duration::from_secs(30);
    let record = loop {
        match store.append_audit("g1", vec![entry("after", 0)], now()) {
            Ok(r) => break r,
            Err(GatewayError::AuditUnavailable) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("after the stall: {e:?}"),
        }
    };
    assert_eq!(record[0].seq, 2);
    let dir = tempfile::tempdir().unwrap();
    let report = verified(&store, dir.path());
    assert_eq!((report.records, report.broken), (2, None));
}
