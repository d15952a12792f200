//! `AuditLog::end_offset` and `find_since`: how crash recovery learns whether a transaction's
//! line was already written, so it never writes a second success record.

use audit::{Actor, AuditError, AuditLog, AuditRecord, Durability};

use crate::common::{at, entry, home, lines};
use crate::concurrency::{PER_WRITER, spawn_appender};

fn target_is(r: &AuditRecord, t: &str) -> bool {
    r.target.as_deref() == Some(t)
}

fn by(r: &AuditRecord, who: &str) -> bool {
    matches!(&r.actor, Actor::Credential { name, .. } if name == who)
}

fn append_raw(path: &std::path::Path, bytes: &[u8]) {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap()
        .write_all(bytes)
        .unwrap();
}

#[test]
fn finds_only_records_appended_after_the_offset() {
    let (_dir, path) = home();
    let log = AuditLog::open(&path).unwrap();
    assert_eq!(log.end_offset().unwrap(), 0);
    assert_eq!(log.find_since(0, |_| true).unwrap(), None);
    let r1 = log.append(entry("a", 1), at(1), Durability::Sync).unwrap();
    let r2 = log.append(entry("a", 2), at(2), Durability::Sync).unwrap();
    let mark = log.end_offset().unwrap();
    assert_eq!(mark, std::fs::metadata(&path).unwrap().len());
    let r3 = log.append(entry("a", 3), at(3), Durability::Sync).unwrap();

    assert_eq!(log.find_since(0, |r| r.seq == 2).unwrap(), Some(r2.clone()));
    assert_eq!(log.find_since(0, |_| true).unwrap(), Some(r1));
    // Records before the mark are not looked at.
    assert_eq!(log.find_since(mark, |r| r.seq <= 2).unwrap(), None);
    assert_eq!(log.find_since(mark, |_| true).unwrap(), Some(r3.clone()));
    // Inside line 2: that line started before the offset, so the first candidate is line 3.
    let line1 = lines(&path)[0].len() as u64;
    assert_eq!(log.find_since(line1 + 5, |_| true).unwrap(), Some(r3));
    assert_eq!(log.find_since(line1, |_| true).unwrap(), Some(r2));
    // Past the end: clamped, nothing there.
    assert_eq!(log.find_since(u64::MAX, |_| true).unwrap(), None);
    let end = log.end_offset().unwrap();
    assert_eq!(log.find_since(end, |_| true).unwrap(), None);
}

/// A torn tail is an append that never returned: not a record, even if it holds a whole one but
/// for the `\n`. A damaged complete line is an error, never "not written".
#[test]
fn a_torn_tail_is_not_a_record_and_damage_is_an_error() {
    let (_dir, path) = home();
    let log = AuditLog::open(&path).unwrap();
    log.append(entry("a", 1), at(1), Durability::Sync).unwrap();
    let mark = log.end_offset().unwrap();
    let r2 = log.append(entry("a", 2), at(2), Durability::Sync).unwrap();
    let whole = lines(&path).pop().unwrap();
    // The same record again, cut before its newline.
    append_raw(&path, &whole[..whole.len() - 1]);
    assert_eq!(log.find_since(mark, |r| r.seq == 2).unwrap(), Some(r2.clone()));
    let tail_start = std::fs::metadata(&path).unwrap().len() - (whole.len() as u64 - 1);
    assert_eq!(log.find_since(tail_start, |_| true).unwrap(), None);
    assert_eq!(log.find_since(mark, |r| r.seq == 3).unwrap(), None);
    append_raw(&path, b"\nnot json\n");
    match log.find_since(mark, |r| r.seq == 3) {
        Err(AuditError::Parse { offset, .. }) => assert!(offset > tail_start),
        other => panic!("expected Parse, got {other:?}"),
    }
}

/// Two processes and this one append while this one searches: every search sees whole lines
/// only (no `Parse` from a half-written line), and afterwards each writer's records are found
/// after the mark and none from before it.
#[test]
fn finds_records_while_two_processes_append() {
    let (_dir, path) = home();
    let log = AuditLog::open(&path).unwrap();
    for i in 1..=5 {
        log.append(entry("before", i), at(i), Durability::Flush).unwrap();
    }
    let mark = log.end_offset().unwrap();
    let mut children: Vec<_> = ["p1", "p2"]
        .into_iter()
        .map(|who| spawn_appender(&path, who))
        .collect();
    let mut searches = 0;
    for i in 1..=200 {
        log.append(entry("parent", i), at(i), Durability::Flush).unwrap();
        let found = log.find_since(mark, |r| {
            by(r, "parent") && target_is(r, &format!("notes/{i}.md"))
        });
        assert!(found.unwrap().is_some(), "the parent's own record {i}");
        // Any record of the children seen so far parses.
        log.find_since(mark, |r| by(r, "p1") && target_is(r, "notes/never.md"))
            .unwrap();
        searches += 1;
    }
    for child in &mut children {
        assert!(child.wait().unwrap().success());
    }
    assert_eq!(searches, 200);
    for who in ["p1", "p2"] {
        let last = format!("notes/{PER_WRITER}.md");
        let r = log
            .find_since(mark, |r| by(r, who) && target_is(r, &last))
            .unwrap()
            .unwrap();
        assert!(r.seq > 5, "{who}'s record is after the mark");
    }
    assert_eq!(log.find_since(mark, |r| by(r, "before")).unwrap(), None);
    assert!(log.find_since(0, |r| by(r, "before")).unwrap().is_some());
    let total = 5 + 200 + 2 * PER_WRITER;
    assert_eq!(audit::verify(&path).unwrap().records, total);
}
