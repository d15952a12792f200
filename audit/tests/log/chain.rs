use audit::{AuditLog, Durability, GENESIS, verify};

use crate::common::{at, entry, home, write_log};

#[test]
fn a_thousand_appends_form_one_valid_chain() {
    let (_dir, path) = home();
    let records = write_log(&path, 1000);
    let report = verify(&path).unwrap();
    assert_eq!(report.broken, None);
    assert_eq!(report.records, 1000);
    assert_eq!(report.last_hash.as_deref(), Some(records[999].hash.as_str()));
    assert_eq!(records[0].prev, GENESIS);
    for (i, pair) in records.windows(2).enumerate() {
        assert_eq!(pair[1].seq, i as u64 + 2);
        assert_eq!(pair[1].prev, pair[0].hash);
    }
}

#[test]
fn an_empty_log_verifies_with_no_records() {
    let (_dir, path) = home();
    AuditLog::open(&path).unwrap();
    let report = verify(&path).unwrap();
    assert_eq!((report.records, report.last_hash, report.broken), (0, None, None));
}

#[test]
fn verify_of_a_missing_file_is_an_io_error() {
    let (_dir, path) = home();
    assert!(matches!(verify(&path), Err(audit::AuditError::Io(_))));
}

#[test]
fn reopening_continues_the_chain() {
    let (_dir, path) = home();
    let first = write_log(&path, 3);
    let log = AuditLog::open(&path).unwrap();
    let next = log.append(entry("agent", 4), at(4), Durability::Sync).unwrap();
    assert_eq!(next.seq, 4);
    assert_eq!(next.prev, first[2].hash);
    assert_eq!(verify(&path).unwrap().records, 4);
}

#[cfg(unix)]
#[test]
fn the_log_and_its_lock_are_created_private() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, path) = home();
    AuditLog::open(&path).unwrap();
    for f in [path.clone(), dir.path().join("audit.jsonl.lock")] {
        let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", f.display());
    }
}
