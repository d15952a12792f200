//! Keeping the index fresh: incremental passes after edits, additions, deletions and renames;
//! targeted updates; a garbage or deleted index file; the background thread; two handles on one
//! index file.
#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime};

use policy::{FolderPath, Layout, VaultPath};
use vault::{ContentQuery, SyncReport, Vault};

fn layout() -> Layout {
    Layout::new(
        vec![FolderPath::Root],
        vec![FolderPath::parse("docs").unwrap()],
        VaultPath::parse("inbox").unwrap(),
        None,
    )
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(&p, text).unwrap();
}

/// Writes and moves the time forward, so even a same-size edit shows.
fn edit(root: &Path, rel: &str, text: &str) {
    write(root, rel, text);
    let later = SystemTime::now() + Duration::from_secs(5);
    fs::File::options()
        .write(true)
        .open(root.join(rel))
        .unwrap()
        .set_modified(later)
        .unwrap();
}

fn seed(root: &Path) {
    write(root, "a.md", "# A\nalpha [[b]]\n");
    write(root, "b.md", "# B\nbeta #tag\n");
    write(root, "sub/c.md", "# C\ngamma 注意力\n");
    write(
        root,
        "docs/rule.md",
        "---\ndescription: a rule\n---\n# Rule\ndelta\n",
    );
}

fn paths(v: &Vault, q: &str) -> Vec<String> {
    let q = ContentQuery {
        query: q.to_owned(),
        ..ContentQuery::default()
    };
    let mut p: Vec<String> = v
        .search_content(&q)
        .unwrap()
        .hits
        .into_iter()
        .map(|h| h.path)
        .collect();
    p.dedup();
    p
}

fn refresh(v: &Vault) -> SyncReport {
    v.refresh_index(false, &mut |_, _| {}).unwrap()
}

fn manual(root: &Path) -> Vault {
    let v = Vault::open(root, layout()).unwrap();
    v.manual_index();
    v
}

fn vp(s: &str) -> VaultPath {
    VaultPath::parse(s).unwrap()
}

#[test]
fn a_pass_reads_only_what_changed() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path());
    let v = manual(dir.path());
    let first = refresh(&v);
    assert_eq!(
        (first.added, first.updated, first.removed, first.notes),
        (4, 0, 0, 4)
    );
    assert!(v.index_file().is_file());
    let again = refresh(&v);
    assert_eq!((again.added, again.updated, again.unchanged), (0, 0, 4));

    edit(dir.path(), "a.md", "# A\nomega [[b]]\n");
    write(dir.path(), "new.md", "# New\nepsilon\n");
    fs::remove_file(dir.path().join("b.md")).unwrap();
    fs::rename(dir.path().join("sub/c.md"), dir.path().join("sub/moved.md")).unwrap();
    assert!(!v.index_health().fresh);
    assert_eq!(v.index_health().stale_files, 5);

    let r = refresh(&v);
    assert_eq!((r.added, r.updated, r.removed, r.unchanged), (2, 1, 2, 1));
    assert!(v.index_health().fresh);
    assert!(paths(&v, "alpha").is_empty());
    assert_eq!(paths(&v, "omega"), ["a.md"]);
    assert_eq!(paths(&v, "epsilon"), ["new.md"]);
    assert!(paths(&v, "beta").is_empty());
    assert_eq!(paths(&v, "注意力"), ["sub/moved.md"]);
    assert_eq!(v.counts().unwrap().tags, 0);
    assert_eq!(v.related("a.md").unwrap().broken_links.len(), 1);
}

#[test]
fn update_paths_reindexes_single_notes_and_folders() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path());
    let v = manual(dir.path());
    refresh(&v);

    edit(dir.path(), "b.md", "# B\nzeta #other\n");
    v.update_paths(&[vp("b.md")]);
    assert!(v.index_health().fresh);
    assert_eq!(paths(&v, "zeta"), ["b.md"]);
    assert_eq!(v.list_tags().unwrap().tags[0].name, "other");

    fs::remove_file(dir.path().join("a.md")).unwrap();
    v.update_paths(&[vp("a.md")]);
    assert!(v.index_health().fresh);
    assert_eq!(v.note_count(), 2);

    // A folder renamed: both names are reported, the notes under them move.
    fs::rename(dir.path().join("sub"), dir.path().join("moved")).unwrap();
    v.update_paths(&[vp("sub"), vp("moved")]);
    assert!(v.index_health().fresh);
    assert_eq!(paths(&v, "gamma"), ["moved/c.md"]);

    // Paths outside the catalog change nothing.
    write(dir.path(), "inbox/x.md", "# X\ngamma\n");
    write(dir.path(), "notes.txt", "gamma\n");
    v.update_paths(&[vp("inbox/x.md"), vp("notes.txt")]);
    assert_eq!(paths(&v, "gamma"), ["moved/c.md"]);
}

#[test]
fn a_garbage_index_file_is_replaced_and_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path());
    fs::create_dir_all(dir.path().join(".vaultgate")).unwrap();
    fs::write(
        dir.path().join(".vaultgate/index.sqlite"),
        b"this is not a database, just garbage bytes".repeat(200),
    )
    .unwrap();
    let v = manual(dir.path());
    let r = refresh(&v);
    assert_eq!(r.added, 4);
    assert!(v.index_health().fresh);
    assert_eq!(paths(&v, "gamma"), ["sub/c.md"]);
}

#[test]
fn an_index_corrupted_while_open_never_breaks_a_read_and_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path());
    let v = manual(dir.path());
    refresh(&v);
    let file = v.index_file();
    let garbage = b"garbage".repeat(20_000);
    fs::write(&file, &garbage).unwrap();
    for _ in 0..3 {
        // Answered correctly: from pages SQLite still holds, or by the scan once it notices.
        assert_eq!(paths(&v, "gamma"), ["sub/c.md"]);
        assert_eq!(v.note_count(), 3);
    }
    let r = refresh(&v);
    assert_eq!(r.notes, 4);
    assert!(v.index_health().fresh);
    assert!(
        fs::read(&file).unwrap() != garbage,
        "the garbage file was replaced"
    );
    assert_eq!(paths(&v, "delta"), ["docs/rule.md"]);
}

#[test]
fn a_deleted_index_is_noticed_and_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path());
    let v = manual(dir.path());
    refresh(&v);
    for suffix in ["", "-wal", "-shm"] {
        let _ = fs::remove_file(format!("{}{suffix}", v.index_file().display()));
    }
    // The scan answers meanwhile.
    assert_eq!(paths(&v, "alpha"), ["a.md"]);
    assert!(!v.index_health().fresh);
    let r = refresh(&v);
    assert_eq!(r.added, 4);
    assert!(v.index_file().is_file());
    assert!(v.index_health().fresh);
    assert_eq!(paths(&v, "alpha"), ["a.md"]);
}

#[test]
fn a_background_index_builds_itself_and_follows_index_sync() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path());
    let v = Vault::open(dir.path(), layout()).unwrap();
    // Before the first pass, reads scan (and are right).
    v.start_index();
    assert_eq!(paths(&v, "alpha"), ["a.md"]);
    assert!(v.wait_index_ready(Duration::from_secs(10)));
    assert!(v.index_health().fresh);
    assert!(v.index_health().indexed_at.is_some());

    edit(dir.path(), "a.md", "# A\nkappa\n");
    v.index_sync(v.catalog_files());
    assert!(v.index_health().fresh);
    assert_eq!(paths(&v, "kappa"), ["a.md"]);

    write(dir.path(), "later.md", "# Later\nlambda\n");
    v.update_paths(&[vp("later.md")]);
    assert!(v.index_health().fresh);
    assert_eq!(paths(&v, "lambda"), ["later.md"]);
}

#[test]
fn two_handles_share_one_index_file() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path());
    let a = manual(dir.path());
    let b = manual(dir.path());
    assert_eq!(refresh(&a).added, 4);
    // The other handle finds it built.
    assert_eq!(refresh(&b).unchanged, 4);
    edit(dir.path(), "b.md", "# B\nmu\n");
    refresh(&a);
    // `b` did nothing, yet its next read sees the new generation.
    assert!(b.index_health().fresh);
    assert_eq!(paths(&b, "mu"), ["b.md"]);
}

#[test]
fn rebuild_rereads_every_note() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path());
    let v = manual(dir.path());
    refresh(&v);
    let mut seen = Vec::new();
    let r = v
        .refresh_index(true, &mut |done, total| seen.push((done, total)))
        .unwrap();
    assert_eq!((r.updated, r.unchanged, r.notes), (4, 0, 4));
    assert_eq!(seen.first(), Some(&(0, 4)));
    assert_eq!(seen.last(), Some(&(4, 4)));
    assert!(v.index_health().fresh);
}
