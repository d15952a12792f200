use std::path::Path;
use std::sync::OnceLock;

use audit::{Broken, GENESIS, verify};
use proptest::prelude::*;

use crate::common::{forge_line, home, lines, write_lines, write_log};

fn broken(path: &Path) -> Broken {
    verify(path).unwrap().broken.expect("tampering must be detected")
}

fn assert_broken_at(path: &Path, line: u64, reason_has: &str) {
    let b = broken(path);
    assert_eq!((b.line, b.seq), (line, line), "{b:?}");
    assert!(b.reason.contains(reason_has), "{b:?}");
}

/// A 12-record log, written once and copied into a fresh file per proptest case.
fn pristine() -> &'static [u8] {
    static LOG: OnceLock<Vec<u8>> = OnceLock::new();
    LOG.get_or_init(|| {
        let (_dir, path) = home();
        write_log(&path, 12);
        std::fs::read(&path).unwrap()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    /// Any single changed byte, anywhere (including a `\n`), is reported at the line it is in.
    #[test]
    fn any_changed_byte_is_named_at_its_own_line(pos_seed in any::<prop::sample::Index>(), mask in 1u8..=255) {
        let base = pristine();
        let pos = pos_seed.index(base.len());
        let mut bytes = base.to_vec();
        bytes[pos] ^= mask;
        let (_dir, path) = home();
        std::fs::write(&path, &bytes).unwrap();

        let line = base[..pos].iter().filter(|&&b| b == b'\n').count() as u64 + 1;
        let report = verify(&path).unwrap();
        let b = report.broken.clone().expect("a changed byte must be detected");
        prop_assert_eq!((b.line, b.seq), (line, line), "{:?}", b);
        prop_assert_eq!(report.records, line - 1);
    }
}

#[test]
fn deleting_a_line_is_named_where_it_was() {
    for victim in [0usize, 4, 8] {
        let (_dir, path) = home();
        write_log(&path, 10);
        let mut all = lines(&path);
        all.remove(victim);
        write_lines(&path, &all);
        assert_broken_at(&path, victim as u64 + 1, "seq gap");
    }
}

#[test]
fn swapping_two_lines_is_detected_at_the_first() {
    let (_dir, path) = home();
    write_log(&path, 10);
    let mut all = lines(&path);
    all.swap(3, 6);
    write_lines(&path, &all);
    assert_broken_at(&path, 4, "seq gap");
}

#[test]
fn duplicating_a_line_is_detected_at_the_copy() {
    let (_dir, path) = home();
    write_log(&path, 10);
    let mut all = lines(&path);
    let copy = all[4].clone();
    all.insert(5, copy);
    write_lines(&path, &all);
    assert_broken_at(&path, 6, "seq out of order");
}

#[test]
fn truncating_mid_line_leaves_a_torn_last_line() {
    let (_dir, path) = home();
    write_log(&path, 10);
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len - 40)
        .unwrap();
    assert_broken_at(&path, 10, "torn last line");
}

#[test]
fn truncating_at_a_line_boundary_shows_against_the_known_head() {
    let (_dir, path) = home();
    let records = write_log(&path, 10);
    let mut all = lines(&path);
    all.truncate(7);
    write_lines(&path, &all);
    let report = verify(&path).unwrap();
    // A shorter chain is self-consistent; the cut shows against the head the writer returned.
    assert_eq!(report.broken, None);
    assert_eq!(report.records, 7);
    assert_ne!(report.last_hash.as_deref(), Some(records[9].hash.as_str()));
}

#[test]
fn a_non_json_line_is_named() {
    let (_dir, path) = home();
    write_log(&path, 5);
    let mut all = lines(&path);
    all[2] = b"hello\n".to_vec();
    write_lines(&path, &all);
    assert_broken_at(&path, 3, "not valid JSON");

    all[2] = b"\n".to_vec();
    write_lines(&path, &all);
    assert_broken_at(&path, 3, "empty line");
}

#[test]
fn a_missing_or_unknown_field_is_named_even_when_rehashed() {
    let (_dir, path) = home();
    write_log(&path, 5);
    forge_line(&path, 2, true, |m| {
        m.remove("event");
    });
    assert_broken_at(&path, 3, "missing field `event`");

    let (_dir, path) = home();
    write_log(&path, 5);
    forge_line(&path, 2, true, |m| {
        m.insert("token".into(), "secret".into());
    });
    assert_broken_at(&path, 3, "unknown field `token`");
}

#[test]
fn a_null_field_is_not_canonical() {
    let (_dir, path) = home();
    write_log(&path, 5);
    forge_line(&path, 2, false, |m| {
        m.insert("code".into(), serde_json::Value::Null);
    });
    assert_broken_at(&path, 3, "canonical form");
}

#[test]
fn a_prev_that_does_not_link_is_named() {
    let (_dir, path) = home();
    write_log(&path, 5);
    forge_line(&path, 3, true, |m| {
        m.insert("prev".into(), GENESIS.into());
    });
    assert_broken_at(&path, 4, "prev mismatch");
}

#[test]
fn a_rehashed_forgery_breaks_the_next_link() {
    // The limit of an unkeyed chain: whoever recomputes the altered line's hash moves the
    // detection to the following line (and must rewrite every later line to hide it).
    let (_dir, path) = home();
    write_log(&path, 5);
    forge_line(&path, 2, true, |m| {
        m.insert("outcome".into(), "denied".into());
    });
    assert_broken_at(&path, 4, "prev mismatch");
}

#[test]
fn the_first_line_must_link_to_genesis() {
    let (_dir, path) = home();
    write_log(&path, 3);
    forge_line(&path, 0, true, |m| {
        m.insert("prev".into(), "ab".repeat(32).into());
    });
    assert_broken_at(&path, 1, "prev mismatch");
}
