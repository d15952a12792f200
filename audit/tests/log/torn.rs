use audit::{AuditError, AuditLog, Durability, Repair, repair_torn_tail, tail, verify};

use crate::common::{at, entry, forge_line, home, lines, write_lines, write_log};

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
fn a_torn_tail_refuses_appends_until_repaired_and_the_fragment_is_kept() {
    let (_dir, path) = home();
    let records = write_log(&path, 3);
    let clean_len = std::fs::metadata(&path).unwrap().len();
    let fragment = b"{\"actor\":\"cli:al";
    append_raw(&path, fragment);

    let log = AuditLog::open(&path).unwrap();
    match log.append(entry("agent", 4), at(4), Durability::Sync) {
        Err(AuditError::TornTail { offset, remnant_len }) => {
            assert_eq!((offset, remnant_len), (clean_len, fragment.len() as u64));
        }
        other => panic!("expected TornTail, got {other:?}"),
    }
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        clean_len + fragment.len() as u64,
        "a refused append writes nothing"
    );
    let b = verify(&path).unwrap().broken.unwrap();
    assert_eq!((b.line, b.seq), (4, 4));
    assert!(b.reason.contains("torn last line"), "{b:?}");

    let Repair::MovedAside {
        offset,
        len,
        saved_to,
    } = repair_torn_tail(&path).unwrap()
    else {
        panic!("expected MovedAside");
    };
    assert_eq!((offset, len), (clean_len, fragment.len() as u64));
    assert_eq!(std::fs::read(&saved_to).unwrap(), fragment);
    assert_eq!(repair_torn_tail(&path).unwrap(), Repair::Clean);

    let next = log.append(entry("agent", 4), at(4), Durability::Sync).unwrap();
    assert_eq!((next.seq, next.prev.as_str()), (4, records[2].hash.as_str()));
    let report = verify(&path).unwrap();
    assert_eq!((report.records, report.broken), (4, None));
}

#[test]
fn a_whole_record_missing_only_its_newline_is_completed_not_cut() {
    let (_dir, path) = home();
    write_log(&path, 3);
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len - 1)
        .unwrap();
    assert_eq!(repair_torn_tail(&path).unwrap(), Repair::Completed { seq: 3 });
    let report = verify(&path).unwrap();
    assert_eq!((report.records, report.broken), (3, None));
}

#[test]
fn a_log_cut_under_a_live_writer_refuses_appends() {
    let (_dir, path) = home();
    let log = AuditLog::open(&path).unwrap();
    for i in 1..=5 {
        log.append(entry("agent", i), at(i), Durability::Flush).unwrap();
    }
    let mut all = lines(&path);
    all.truncate(3);
    write_lines(&path, &all);
    let cut_len = std::fs::metadata(&path).unwrap().len();
    assert!(matches!(
        log.append(entry("agent", 6), at(6), Durability::Flush),
        Err(AuditError::Shrunk { actual, .. }) if actual == cut_len
    ));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), cut_len);
}

#[test]
fn a_garbage_last_line_refuses_appends() {
    let (_dir, path) = home();
    write_log(&path, 2);
    append_raw(&path, b"garbage\n");
    let log = AuditLog::open(&path).unwrap();
    assert!(matches!(
        log.append(entry("agent", 3), at(3), Durability::Flush),
        Err(AuditError::Parse { .. })
    ));
}

#[test]
fn chaining_onto_an_altered_last_line_still_names_that_line() {
    let (_dir, path) = home();
    write_log(&path, 3);
    forge_line(&path, 2, false, |m| {
        m.insert("outcome".into(), "denied".into());
    });
    let log = AuditLog::open(&path).unwrap();
    log.append(entry("agent", 4), at(4), Durability::Flush).unwrap();
    let b = verify(&path).unwrap().broken.unwrap();
    assert_eq!((b.line, b.seq), (3, 3));
    assert_eq!(tail(&path, 1).unwrap()[0].seq, 4);
}
