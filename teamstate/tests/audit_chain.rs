//! The team's audit chain in a real PostgreSQL (docs/contract.md#team-mode): four gateways append
//! at once, each over its own connection, and the chain stays one — gapless `seq`, every record
//! linked to the one before, each naming its gateway, each gateway's records in its own order —
//! and its export verifies as a home's log does, naming a record altered in the database.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;

use audit::{Actor, Entry, GENESIS, Outcome};
use common::Cluster;
use teamstate::PgState;
use time::OffsetDateTime;

fn entry(gateway: &str, i: usize) -> Entry {
    let mut e = Entry::new(
        "tool_call",
        Actor::Cli {
            user: gateway.to_owned(),
        },
        Outcome::Ok,
    );
    e.tool = Some("read_note".into());
    e.target = Some(format!("{gateway}/{i}"));
    e
}

fn connect(cluster: &Cluster, db: &str) -> PgState {
    PgState::connect(&format!("postgres://postgres@127.0.0.1:{}/{db}", cluster.port)).unwrap()
}

/// Exports the chain to a file and checks it with the offline verifier.
fn export(store: &PgState, since: u64, dir: &std::path::Path) -> (u64, audit::FileReport, String) {
    let mut out = Vec::new();
    let n = store.export_audit(since, &mut out).unwrap();
    let file = dir.join(format!("export-{since}.jsonl"));
    std::fs::write(&file, &out).unwrap();
    (
        n,
        audit::verify_file(&file).unwrap(),
        String::from_utf8(out).unwrap(),
    )
}

#[test]
fn four_gateways_appending_at_once_make_one_gapless_chain_that_verifies_and_names_an_altered_record() {
    let cluster = Cluster::start();
    // A fresh database that four gateways migrate at once: one creates, the others wait.
    common::connect_retrying(&cluster.url())
        .query("CREATE DATABASE chain", &[])
        .unwrap();
    let dir = tempfile::tempdir().unwrap();

    // Four gateways, 30 batches each of 1 to 4 records, all at once.
    let names = ["g1", "g2", "ana@laptop", "build-01"];
    let batches = 30;
    let mut sent = BTreeMap::new();
    std::thread::scope(|s| {
        let handles: Vec<_> = names
            .iter()
            .map(|&name| {
                let cluster = &cluster;
                s.spawn(move || {
                    let store = connect(cluster, "chain");
                    let mut i = 0;
                    let mut seqs = Vec::new();
                    for b in 0..batches {
                        let batch: Vec<Entry> = (0..1 + b % 4)
                            .map(|_| {
                                i += 1;
                                entry(name, i)
                            })
                            .collect();
                        let sealed = store
                            .append_audit(name, batch, OffsetDateTime::now_utc())
                            .unwrap();
                        // A batch is contiguous: one lock of the head.
                        for w in sealed.windows(2) {
                            assert_eq!(w[1].seq, w[0].seq + 1);
                            assert_eq!(w[1].prev, w[0].hash);
                        }
                        seqs.extend(sealed.iter().map(|r| r.seq));
                    }
                    (name, i, seqs)
                })
            })
            .collect();
        for h in handles {
            let (name, n, seqs) = h.join().unwrap();
            sent.insert(name, (n, seqs));
        }
    });
    let first = connect(&cluster, "chain");
    let total: usize = sent.values().map(|(n, _)| n).sum();
    assert_eq!(total, 4 * (0..batches).map(|b| 1 + b % 4).sum::<usize>());

    // One chain: seq 1..=total, verified from its start, as the head says.
    let (n, report, text) = export(&first, 0, dir.path());
    assert_eq!(n as usize, total);
    assert_eq!(report.broken, None);
    assert_eq!(report.records as usize, total);
    assert_eq!(report.first, Some((1, GENESIS.to_owned())));
    let head = first.audit_chain_head().unwrap();
    assert_eq!(report.last.clone(), Some(head.clone()));
    assert_eq!(head.0 as usize, total);

    // Every record names its gateway; each gateway's records keep its order.
    let mut seen: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let g = v["gateway"]
            .as_str()
            .expect("every record names its gateway")
            .to_owned();
        let target = v["target"].as_str().unwrap();
        let (tg, i) = target.rsplit_once('/').unwrap();
        assert_eq!(tg, g, "the record is the one its gateway sent");
        seen.entry(g).or_default().push(i.parse().unwrap());
    }
    for (name, (n, seqs)) in &sent {
        assert_eq!(
            seen[*name],
            (1..=*n).collect::<Vec<_>>(),
            "{name}'s records in order"
        );
        assert_eq!(seqs.len(), *n);
    }

    // After a seq: the records after it, linked to that seq's hash.
    let (n, part, _) = export(&first, 50, dir.path());
    assert_eq!(n as usize, total - 50);
    assert_eq!(part.broken, None);
    assert_eq!(part.first.as_ref().map(|(s, _)| *s), Some(51));

    // A record altered in the database (a column rewritten by someone with access): the export
    // names it.
    first
        .query(
            "UPDATE vaultgate.audit SET line = replace(line, '\"read_note\"', '\"read_notes\"') WHERE seq = 77",
            &[],
        )
        .unwrap();
    let (_, report, _) = export(&first, 0, dir.path());
    let broken = report.broken.expect("an altered record breaks the chain");
    assert_eq!(broken.seq, 77, "{}", broken.reason);

    // Refused before any work: a bad gateway name, an oversized batch.
    assert!(
        first
            .append_audit("g 1", vec![entry("g1", 1)], OffsetDateTime::now_utc())
            .is_err()
    );
    let big: Vec<Entry> = (0..=teamstate::MAX_BATCH).map(|i| entry("g1", i)).collect();
    assert!(first.append_audit("g1", big, OffsetDateTime::now_utc()).is_err());
    assert_eq!(first.audit_chain_head().unwrap(), head, "nothing appended");
}
