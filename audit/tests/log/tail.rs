use audit::{AuditError, AuditLog, tail};

use crate::common::{home, write_log};

#[test]
fn tail_returns_the_last_records_oldest_first() {
    let (_dir, path) = home();
    let records = write_log(&path, 50);
    assert_eq!(tail(&path, 5).unwrap(), records[45..].to_vec());
    assert_eq!(tail(&path, 1).unwrap(), records[49..].to_vec());
    assert_eq!(tail(&path, 50).unwrap(), records);
    assert_eq!(tail(&path, 500).unwrap(), records);
    assert!(tail(&path, 0).unwrap().is_empty());
}

#[test]
fn tail_of_a_large_log_reads_only_its_end() {
    let (_dir, path) = home();
    let records = write_log(&path, 20_000);
    assert_eq!(tail(&path, 3).unwrap(), records[19_997..].to_vec());
}

#[test]
fn tail_of_an_empty_or_missing_log() {
    let (_dir, path) = home();
    assert!(matches!(tail(&path, 3), Err(AuditError::Io(_))));
    AuditLog::open(&path).unwrap();
    assert!(tail(&path, 3).unwrap().is_empty());
}

#[test]
fn tail_skips_a_torn_fragment_and_names_a_bad_line_by_offset() {
    let (_dir, path) = home();
    let records = write_log(&path, 3);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(b"{\"seq\":4,\"ts");
    std::fs::write(&path, &bytes).unwrap();
    assert_eq!(tail(&path, 2).unwrap(), records[1..].to_vec());

    let good_len = bytes.len() - 12;
    bytes.truncate(good_len);
    bytes.extend_from_slice(b"not json\n");
    std::fs::write(&path, &bytes).unwrap();
    match tail(&path, 2) {
        Err(AuditError::Parse { offset, .. }) => assert_eq!(offset, good_len as u64),
        other => panic!("expected Parse, got {other:?}"),
    }
}
