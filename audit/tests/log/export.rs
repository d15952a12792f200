use audit::{GENESIS, export, verify_file};

use crate::common::{forge_line, home, lines, write_lines, write_log};

fn exported(log: &std::path::Path, since: u64) -> (audit::Exported, Vec<u8>) {
    let mut out = Vec::new();
    let e = export(log, since, &mut out).unwrap();
    (e, out)
}

#[test]
fn an_export_from_the_start_is_the_log_byte_for_byte_and_verifies_from_genesis() {
    let (_d, path) = home();
    let records = write_log(&path, 30);
    let (e, out) = exported(&path, 0);
    assert_eq!(out, std::fs::read(&path).unwrap());
    assert_eq!(
        (e.records, e.first_seq, e.last_seq, e.log_records),
        (30, Some(1), Some(30), 30)
    );
    assert_eq!(e.broken, None);

    let file = path.with_file_name("export.jsonl");
    std::fs::write(&file, &out).unwrap();
    let r = verify_file(&file).unwrap();
    assert_eq!(r.records, 30);
    assert_eq!(r.first, Some((1, GENESIS.to_owned())));
    assert_eq!(r.last, Some((30, records[29].hash.clone())));
    assert_eq!(r.broken, None);
}

#[test]
fn an_export_since_a_seq_holds_the_records_after_it_linked_to_the_one_it_leaves_out() {
    let (_d, path) = home();
    let records = write_log(&path, 30);
    let (e, out) = exported(&path, 12);
    assert_eq!((e.records, e.first_seq, e.last_seq), (18, Some(13), Some(30)));
    assert_eq!(out, lines(&path)[12..].concat());

    let file = path.with_file_name("export.jsonl");
    std::fs::write(&file, &out).unwrap();
    let r = verify_file(&file).unwrap();
    assert_eq!(
        r.first,
        Some((13, records[11].hash.clone())),
        "links to seq 12's hash"
    );
    assert_eq!(r.last, Some((30, records[29].hash.clone())));
    assert_eq!(r.broken, None);

    // Past the last record: nothing, and an empty file verifies as empty.
    let (e, out) = exported(&path, 30);
    assert_eq!(
        (e.records, e.first_seq, e.last_seq, e.log_records),
        (0, None, None, 30)
    );
    assert!(out.is_empty());
    std::fs::write(&file, &out).unwrap();
    assert_eq!(verify_file(&file).unwrap().records, 0);
}

#[test]
fn a_flipped_byte_a_deleted_line_or_a_cut_line_of_an_export_is_named_by_its_seq() {
    let (_d, path) = home();
    write_log(&path, 20);
    let (_, out) = exported(&path, 5);
    let file = path.with_file_name("export.jsonl");
    let original: Vec<Vec<u8>> = out.split_inclusive(|&b| b == b'\n').map(<[u8]>::to_vec).collect();

    // One byte of seq 10's target (line 5 of the export).
    let mut flipped = original.clone();
    let at = flipped[4].windows(8).position(|w| w == b"\"target\"").unwrap() + 11;
    flipped[4][at] ^= 0x01;
    write_lines(&file, &flipped);
    let b = verify_file(&file)
        .unwrap()
        .broken
        .expect("a flipped byte breaks the export");
    assert_eq!((b.seq, b.line), (10, 5), "{}", b.reason);

    // Seq 12 deleted: the line after it is named as the missing seq.
    let mut deleted = original.clone();
    deleted.remove(6);
    write_lines(&file, &deleted);
    let b = verify_file(&file)
        .unwrap()
        .broken
        .expect("a deleted line breaks the export");
    assert_eq!(b.seq, 12, "{}", b.reason);

    // A rehashed forgery of seq 15 still breaks seq 16's link.
    write_lines(&file, &original);
    forge_line(&file, 9, true, |m| {
        m.insert("actor".into(), "cli:someone-else".into());
    });
    let b = verify_file(&file)
        .unwrap()
        .broken
        .expect("a forged line breaks the next link");
    assert_eq!(b.seq, 16, "{}", b.reason);

    // The last line cut short.
    let mut cut = original.concat();
    cut.truncate(cut.len() - 10);
    std::fs::write(&file, &cut).unwrap();
    let b = verify_file(&file).unwrap().broken.expect("a cut line is named");
    assert_eq!(b.seq, 20, "{}", b.reason);
}

#[test]
fn an_export_claiming_seq_one_must_link_to_genesis() {
    let (_d, path) = home();
    write_log(&path, 3);
    let file = path.with_file_name("export.jsonl");
    std::fs::copy(&path, &file).unwrap();
    forge_line(&file, 0, true, |m| {
        m.insert("prev".into(), "11".repeat(32).into());
    });
    let b = verify_file(&file)
        .unwrap()
        .broken
        .expect("seq 1 links to genesis");
    assert_eq!((b.seq, b.line), (1, 1), "{}", b.reason);
}

#[test]
fn an_export_whose_first_line_claims_seq_zero_or_no_seq_is_broken_there() {
    let (_d, path) = home();
    write_log(&path, 3);
    let file = path.with_file_name("export.jsonl");
    for (claim, rehash) in [(serde_json::json!(0), true), (serde_json::json!("one"), false)] {
        std::fs::copy(&path, &file).unwrap();
        forge_line(&file, 0, rehash, |m| {
            m.insert("seq".into(), claim.clone());
        });
        let b = verify_file(&file).unwrap().broken.expect("no record number");
        assert_eq!((b.seq, b.line), (0, 1), "{}", b.reason);
    }
}

#[test]
fn the_log_is_exported_only_up_to_its_first_broken_line() {
    let (_d, path) = home();
    write_log(&path, 10);
    let mut all = lines(&path);
    all[6][20] ^= 0x01; // seq 7
    write_lines(&path, &all);
    let (e, out) = exported(&path, 2);
    let b = e.broken.expect("the broken line is reported");
    assert_eq!(b.seq, 7);
    assert_eq!((e.records, e.last_seq, e.log_records), (4, Some(6), 6));
    assert_eq!(out, all[2..6].concat(), "nothing from the broken line on");
}
