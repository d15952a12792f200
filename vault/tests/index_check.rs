//! `vault::index::check_file`, what `vaultgate doctor` asks of an index: no file yet, a healthy
//! index, and a file that is not one — without changing any of them.
#![allow(clippy::unwrap_used)]

use std::fs;

use policy::{FolderPath, Layout, VaultPath};
use vault::Vault;

#[test]
fn a_missing_a_healthy_and_a_broken_index_are_told_apart() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("a.md"), "# A\n").unwrap();
    let layout = Layout::new(
        vec![FolderPath::Root],
        vec![],
        VaultPath::parse("inbox").unwrap(),
        None,
    );
    let v = Vault::open(dir.path(), layout).unwrap();
    let file = v.index_file();
    assert!(!vault::index::check_file(&file).unwrap(), "no index yet");

    v.refresh_index(false, &mut |_, _| {}).unwrap();
    assert!(
        vault::index::check_file(&file).unwrap(),
        "a built index is healthy"
    );

    let garbage = dir.path().join(".vaultgate/other.sqlite");
    fs::write(&garbage, vec![0x5a; 8192]).unwrap();
    assert!(vault::index::check_file(&garbage).is_err(), "not a database");
    assert_eq!(fs::read(&garbage).unwrap(), vec![0x5a; 8192], "left as it was");
    assert!(
        vault::index::check_file(dir.path()).is_err(),
        "a folder is not an index"
    );
}
