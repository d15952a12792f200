use std::process::{Command, Stdio};
use std::sync::Arc;
use std::thread;

use audit::{Actor, AuditLog, AuditRecord, Durability, tail, verify};

use crate::common::{at, entry, home};

const CHILD_LOG: &str = "AUDIT_TEST_CHILD_LOG";
const CHILD_NAME: &str = "AUDIT_TEST_CHILD_NAME";
pub const PER_WRITER: u64 = 500;

/// Starts a child process that appends `PER_WRITER` records as `who` to the log at `path`.
pub fn spawn_appender(path: &std::path::Path, who: &str) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["concurrency::child_appender", "--exact", "--test-threads=1"])
        .env(CHILD_LOG, path)
        .env(CHILD_NAME, who)
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

fn append_many(log: &AuditLog, who: &str) -> Vec<AuditRecord> {
    (1..=PER_WRITER)
        .map(|i| {
            // Every tenth append is fsynced, as a refusal or a mutating call would be.
            let durability = if i % 10 == 0 {
                Durability::Sync
            } else {
                Durability::Flush
            };
            log.append(entry(who, i), at(i), durability).unwrap()
        })
        .collect()
}

fn assert_one_chain(path: &std::path::Path, writers: &[&str]) {
    let report = verify(path).unwrap();
    assert_eq!(report.broken, None);
    let total = PER_WRITER * writers.len() as u64;
    assert_eq!(report.records, total);
    let all = tail(path, usize::MAX).unwrap();
    assert_eq!(all.len() as u64, total);
    for (i, r) in all.iter().enumerate() {
        assert_eq!(r.seq, i as u64 + 1, "no gaps, no duplicates");
    }
    for who in writers {
        let n = all
            .iter()
            .filter(|r| matches!(&r.actor, Actor::Credential { name, .. } if name == who))
            .count() as u64;
        assert_eq!(n, PER_WRITER, "every record of {who} is there");
    }
}

#[test]
fn two_threads_sharing_one_handle_produce_one_chain() {
    let (_dir, path) = home();
    let log = Arc::new(AuditLog::open(&path).unwrap());
    let handles: Vec<_> = ["t1", "t2"]
        .into_iter()
        .map(|who| {
            let log = Arc::clone(&log);
            thread::spawn(move || append_many(&log, who))
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_one_chain(&path, &["t1", "t2"]);
}

/// Durable appends share their fsyncs (group commit); however they interleave, every record is
/// in the one chain when its append returns.
#[test]
fn eight_threads_of_durable_appends_produce_one_chain() {
    let (_dir, path) = home();
    let log = Arc::new(AuditLog::open(&path).unwrap());
    let writers = ["s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8"];
    let handles: Vec<_> = writers
        .into_iter()
        .map(|who| {
            let log = Arc::clone(&log);
            thread::spawn(move || {
                for i in 1..=PER_WRITER / 10 {
                    log.append(entry(who, i), at(i), Durability::Sync).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let report = verify(&path).unwrap();
    assert_eq!(report.broken, None);
    assert_eq!(report.records, PER_WRITER / 10 * writers.len() as u64);
    let all = tail(&path, usize::MAX).unwrap();
    for (i, r) in all.iter().enumerate() {
        assert_eq!(r.seq, i as u64 + 1, "no gaps, no duplicates");
    }
}

#[test]
fn two_handles_in_one_process_exclude_each_other_through_the_file_lock() {
    let (_dir, path) = home();
    let handles: Vec<_> = ["h1", "h2"]
        .into_iter()
        .map(|who| {
            let log = AuditLog::open(&path).unwrap();
            thread::spawn(move || append_many(&log, who))
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_one_chain(&path, &["h1", "h2"]);
}

#[test]
fn two_processes_and_this_one_append_concurrently_into_one_chain() {
    let (_dir, path) = home();
    let children: Vec<_> = ["p1", "p2"]
        .into_iter()
        .map(|who| spawn_appender(&path, who))
        .collect();
    let log = AuditLog::open(&path).unwrap();
    append_many(&log, "parent");
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    assert_one_chain(&path, &["p1", "p2", "parent"]);
}

/// The body of a child process spawned by the test above; a no-op when run as a normal test.
#[test]
fn child_appender() {
    let (Some(path), Some(who)) = (std::env::var_os(CHILD_LOG), std::env::var(CHILD_NAME).ok()) else {
        return;
    };
    let log = AuditLog::open(std::path::Path::new(&path)).unwrap();
    append_many(&log, &who);
}
