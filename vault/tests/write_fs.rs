//! The write side on a real vault: atomic, contained writes (T-PATH), the cross-process write
//! lock, and case/normalization collisions (docs/contract.md#paths, docs/contract.md#proposals).
#![cfg(unix)]
#![allow(clippy::unwrap_used)]

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use policy::{ErrorCode, FolderPath, Layout, PathError, VaultPath};
use sha2::{Digest, Sha256};
use vault::fs::VaultFs;
use vault::write::{Area, WriteError, WriteMode};

const SECRET: &[u8] = b"OUTSIDE-SECRET-5e2a";

fn p(s: &str) -> VaultPath {
    VaultPath::parse(s).unwrap()
}

/// notes = ["notes"], standards = ["docs"], inbox = "inbox".
fn layout() -> Layout {
    Layout::new(
        vec![FolderPath::parse("notes").unwrap()],
        vec![FolderPath::parse("docs").unwrap()],
        p("inbox"),
        None,
    )
}

fn put(path: &Path, bytes: &[u8]) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, bytes).unwrap();
}

/// `<tmp>/vault` with a few notes, and `<tmp>/outside.md` and `<tmp>/outside/` beside it.
fn build() -> (tempfile::TempDir, VaultFs) {
    let tmp = tempfile::tempdir().unwrap();
    let v = tmp.path().join("vault");
    put(&v.join("notes/a.md"), b"# A\n");
    put(&v.join("notes/sub/b.md"), b"# B\n");
    put(&v.join("inbox/new/p.md"), b"# P\n");
    put(&tmp.path().join("outside.md"), SECRET);
    put(&tmp.path().join("outside/keep.md"), SECRET);
    let vfs = VaultFs::open(&v, layout()).unwrap();
    (tmp, vfs)
}

/// Every file and folder below `dir` (relative, sorted), symlinks not followed.
fn tree(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let rel = e
                .path()
                .strip_prefix(base)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                out.push(format!("{rel}/"));
                walk(base, &e.path(), out);
            } else {
                out.push(rel);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

fn no_temp_files(dir: &Path) {
    let temps: Vec<String> = tree(dir)
        .into_iter()
        .filter(|n| n.rsplit('/').any(|s| s.starts_with(".vaultgate-tmp-")))
        .collect();
    assert!(temps.is_empty(), "temp files left: {temps:?}");
}

fn outside_untouched(tmp: &Path) {
    assert_eq!(fs::read(tmp.join("outside.md")).unwrap(), SECRET);
    assert_eq!(tree(&tmp.join("outside")), ["keep.md"]);
    assert_eq!(fs::read(tmp.join("outside/keep.md")).unwrap(), SECRET);
}

#[test]
fn atomic_write_creates_and_replaces_with_exact_bytes() {
    let (tmp, vfs) = build();
    let v = tmp.path().join("vault");
    let note = p("notes/new.md");
    vfs.write_atomic(
        Area::Note,
        &note,
        "# New\n注意\n".as_bytes(),
        WriteMode::Exclusive,
    )
    .unwrap();
    assert_eq!(
        fs::read(v.join("notes/new.md")).unwrap(),
        "# New\n注意\n".as_bytes()
    );
    vfs.write_atomic(Area::Note, &note, b"replaced", WriteMode::Replace)
        .unwrap();
    assert_eq!(fs::read(v.join("notes/new.md")).unwrap(), b"replaced");
    // Replace also creates; an empty file is a file.
    vfs.write_atomic(Area::Note, &p("notes/empty.md"), b"", WriteMode::Replace)
        .unwrap();
    assert_eq!(fs::read(v.join("notes/empty.md")).unwrap(), b"");
    no_temp_files(&v);
}

#[test]
fn replace_keeps_the_file_mode() {
    use std::os::unix::fs::PermissionsExt;
    let (tmp, vfs) = build();
    let a = tmp.path().join("vault/notes/a.md");
    fs::set_permissions(&a, fs::Permissions::from_mode(0o600)).unwrap();
    vfs.write_atomic(Area::Note, &p("notes/a.md"), b"x", WriteMode::Replace)
        .unwrap();
    assert_eq!(fs::metadata(&a).unwrap().permissions().mode() & 0o777, 0o600);
}

#[test]
fn exclusive_refuses_an_existing_file_and_leaves_it() {
    let (tmp, vfs) = build();
    let v = tmp.path().join("vault");
    let before = tree(&v);
    let e = vfs
        .write_atomic(Area::Note, &p("notes/a.md"), b"other", WriteMode::Exclusive)
        .unwrap_err();
    assert!(
        matches!(e, WriteError::Exists(ref x) if x == &p("notes/a.md")),
        "{e:?}"
    );
    assert_eq!(e.code(), ErrorCode::PROPOSAL_TARGET_EXISTS);
    assert_eq!(fs::read(v.join("notes/a.md")).unwrap(), b"# A\n");
    assert_eq!(tree(&v), before);
}

#[test]
fn missing_parent_folders_are_created_inside_the_area_only() {
    let (tmp, vfs) = build();
    let v = tmp.path().join("vault");
    vfs.write_atomic(Area::Note, &p("notes/x/y/z.md"), b"z", WriteMode::Exclusive)
        .unwrap();
    assert_eq!(fs::read(v.join("notes/x/y/z.md")).unwrap(), b"z");
    vfs.write_atomic(Area::Inbox, &p("inbox/patch/s.diff"), b"d", WriteMode::Exclusive)
        .unwrap();
    assert_eq!(fs::read(v.join("inbox/patch/s.diff")).unwrap(), b"d");
    vfs.write_atomic(
        Area::Machine,
        &p(".vaultgate/history/1.json"),
        b"{}",
        WriteMode::Exclusive,
    )
    .unwrap();
    assert_eq!(fs::read(v.join(".vaultgate/history/1.json")).unwrap(), b"{}");

    // With notes = ["notes/deep"], a missing `notes/` is above the area: not created.
    let deep = Layout::new(
        vec![FolderPath::parse("notes2/deep").unwrap()],
        vec![],
        p("inbox"),
        None,
    );
    let vfs2 = VaultFs::open(&v, deep).unwrap();
    let e = vfs2
        .write_atomic(Area::Note, &p("notes2/deep/a.md"), b"a", WriteMode::Exclusive)
        .unwrap_err();
    assert!(matches!(e, WriteError::NotFound), "{e:?}");
    assert!(!v.join("notes2").exists());
    fs::create_dir(v.join("notes2")).unwrap();
    vfs2.write_atomic(Area::Note, &p("notes2/deep/a.md"), b"a", WriteMode::Exclusive)
        .unwrap();
    assert_eq!(fs::read(v.join("notes2/deep/a.md")).unwrap(), b"a");
    no_temp_files(&v);
}

/// (area, path): refused with `PATH_DENIED` before the file system is touched.
const REFUSED: &[(Area, &str)] = &[
    (Area::Note, "inbox/x.md"),
    (Area::Note, "Inbox/x.md"),
    (Area::Note, "inbox/new/p.md"),
    (Area::Note, ".git/x.md"),
    (Area::Note, ".vaultgate/x.md"),
    (Area::Note, "notes/.hidden.md"),
    (Area::Note, "notes/x.txt"),
    (Area::Note, "notes"),
    (Area::Note, "docs/s.md"),
    (Area::Note, "top.md"),
    (Area::Note, "notes/node_modules/a.md"),
    (Area::Inbox, "notes/a.md"),
    (Area::Inbox, "inbox"),
    (Area::Inbox, "Inbox/x.md"),
    (Area::Inbox, "inbox/.git/x"),
    (Area::Inbox, "inbox/target/x.md"),
    (Area::Inbox, ".vaultgate/x"),
    (Area::Inbox, "inboxx/x.md"),
    (Area::Machine, ".vaultgate"),
    (Area::Machine, "notes/a.md"),
    (Area::Machine, ".git/x"),
    (Area::Machine, ".vaultgate/.git/x"),
    (Area::Machine, ".vaultgate/x/.y"),
    (Area::Machine, "x/.vaultgate/y"),
    (Area::Machine, ".VaultGate/x"),
];

#[test]
fn writes_outside_their_area_are_refused_and_touch_nothing() {
    let (tmp, vfs) = build();
    let v = tmp.path().join("vault");
    let before = tree(&v);
    for &(area, raw) in REFUSED {
        let path = p(raw);
        let denied = |r: Result<(), WriteError>| {
            assert!(
                matches!(r, Err(WriteError::Path(PathError::Denied(_)))),
                "{area:?} {raw}: {r:?}"
            );
        };
        denied(vfs.write_atomic(area, &path, b"x", WriteMode::Exclusive));
        denied(vfs.write_atomic(area, &path, b"x", WriteMode::Replace));
        denied(vfs.remove_file(area, &path));
        denied(vfs.rename(area, &path, Area::Note, &p("notes/moved.md")));
        denied(vfs.rename(Area::Note, &p("notes/a.md"), area, &path));
        denied(vfs.read_for_write(area, &path).map(|_| ()));
    }
    assert_eq!(tree(&v), before);
}

#[test]
fn symlinked_target_files_are_refused_and_their_targets_untouched() {
    let (tmp, vfs) = build();
    let v = tmp.path().join("vault");
    symlink(tmp.path().join("outside.md"), v.join("notes/abs.md")).unwrap();
    symlink("../../outside.md", v.join("notes/rel.md")).unwrap();
    symlink("a.md", v.join("notes/inside.md")).unwrap();
    symlink("missing.md", v.join("notes/dangling.md")).unwrap();
    symlink("../inbox/new/p.md", v.join("notes/to_inbox.md")).unwrap();
    let cases: &[(&str, Option<PathError>)] = &[
        ("notes/abs.md", Some(PathError::Outside)),
        ("notes/rel.md", Some(PathError::Outside)),
        ("notes/inside.md", None),
        ("notes/dangling.md", None),
        ("notes/to_inbox.md", None),
    ];
    let before = tree(&v);
    for (raw, outside) in cases {
        let path = p(raw);
        let check = |r: Result<(), WriteError>| match (outside, r) {
            (Some(_), Err(WriteError::Path(PathError::Outside))) => {}
            (None, Err(WriteError::Path(PathError::Denied(_)))) => {}
            (_, r) => panic!("{raw}: {r:?}"),
        };
        check(vfs.write_atomic(Area::Note, &path, b"pwned", WriteMode::Replace));
        check(vfs.write_atomic(Area::Note, &path, b"pwned", WriteMode::Exclusive));
        check(vfs.read_for_write(Area::Note, &path).map(|_| ()));
        check(vfs.remove_file(Area::Note, &path));
        check(vfs.rename(Area::Note, &path, Area::Note, &p("notes/moved.md")));
        check(vfs.rename(Area::Note, &p("notes/sub/b.md"), Area::Note, &path));
    }
    assert_eq!(tree(&v), before);
    assert_eq!(fs::read(v.join("notes/a.md")).unwrap(), b"# A\n");
    assert_eq!(fs::read(v.join("inbox/new/p.md")).unwrap(), b"# P\n");
    assert!(!v.join("notes/missing.md").exists());
    outside_untouched(tmp.path());
    no_temp_files(&v);
}

#[test]
fn symlinked_parent_folders_are_refused_and_their_targets_untouched() {
    let (tmp, vfs) = build();
    let v = tmp.path().join("vault");
    symlink(tmp.path().join("outside"), v.join("notes/abs_dir")).unwrap();
    symlink("../../outside", v.join("notes/rel_dir")).unwrap();
    symlink("sub", v.join("notes/inside_dir")).unwrap();
    symlink("../inbox", v.join("notes/inbox_dir")).unwrap();
    // A link that goes in, then out through a second link.
    symlink("abs_dir", v.join("notes/chain_dir")).unwrap();
    let cases: &[(&str, bool)] = &[
        ("notes/abs_dir/keep.md", true),
        ("notes/abs_dir/new.md", true),
        ("notes/rel_dir/new.md", true),
        ("notes/rel_dir/deeper/new.md", true),
        ("notes/chain_dir/new.md", true),
        ("notes/inside_dir/b.md", false),
        ("notes/inside_dir/new.md", false),
        ("notes/inbox_dir/new/p.md", false),
    ];
    let before = tree(&v);
    for &(raw, outside) in cases {
        let path = p(raw);
        let check = |r: Result<(), WriteError>| match (outside, r) {
            (true, Err(WriteError::Path(PathError::Outside))) => {}
            (false, Err(WriteError::Path(PathError::Denied(_)))) => {}
            (_, r) => panic!("{raw}: {r:?}"),
        };
        check(vfs.write_atomic(Area::Note, &path, b"pwned", WriteMode::Replace));
        check(vfs.write_atomic(Area::Note, &path, b"pwned", WriteMode::Exclusive));
        check(vfs.rename(Area::Note, &p("notes/a.md"), Area::Note, &path));
        // Reading, removing and moving away refuse the path too (a missing file reads as none
        // only when no symlink is on the way).
        check(vfs.read_for_write(Area::Note, &path).map(|_| ()));
        check(vfs.remove_file(Area::Note, &path));
    }
    assert_eq!(tree(&v), before);
    assert_eq!(fs::read(v.join("notes/sub/b.md")).unwrap(), b"# B\n");
    outside_untouched(tmp.path());
}

#[test]
fn symlinked_machine_folder_is_refused() {
    let (tmp, vfs) = build();
    let v = tmp.path().join("vault");
    symlink(tmp.path().join("outside"), v.join(".vaultgate")).unwrap();
    let e = vfs.write_lock().unwrap_err();
    assert!(matches!(e, WriteError::Path(PathError::Outside)), "{e:?}");
    let e = vfs
        .write_atomic(
            Area::Machine,
            &p(".vaultgate/trash/x.md"),
            b"x",
            WriteMode::Exclusive,
        )
        .unwrap_err();
    assert!(matches!(e, WriteError::Path(PathError::Outside)), "{e:?}");
    outside_untouched(tmp.path());

    // A real `.vaultgate/` whose `trash` leads out, relatively and absolutely.
    fs::remove_file(v.join(".vaultgate")).unwrap();
    fs::create_dir(v.join(".vaultgate")).unwrap();
    symlink("../../outside", v.join(".vaultgate/trash")).unwrap();
    symlink(tmp.path().join("outside.md"), v.join(".vaultgate/write.lock")).unwrap();
    let e = vfs
        .write_atomic(
            Area::Machine,
            &p(".vaultgate/trash/x.md"),
            b"x",
            WriteMode::Exclusive,
        )
        .unwrap_err();
    assert!(matches!(e, WriteError::Path(PathError::Outside)), "{e:?}");
    let e = vfs.write_lock().unwrap_err();
    assert!(matches!(e, WriteError::Path(PathError::Outside)), "{e:?}");
    outside_untouched(tmp.path());
}

#[test]
fn rename_moves_without_overwriting_and_creates_folders() {
    let (tmp, vfs) = build();
    let v = tmp.path().join("vault");
    vfs.rename(
        Area::Note,
        &p("notes/a.md"),
        Area::Note,
        &p("notes/new/dir/a2.md"),
    )
    .unwrap();
    assert!(!v.join("notes/a.md").exists());
    assert_eq!(fs::read(v.join("notes/new/dir/a2.md")).unwrap(), b"# A\n");

    // Never over an existing file: both stay as they were.
    let e = vfs
        .rename(
            Area::Note,
            &p("notes/new/dir/a2.md"),
            Area::Note,
            &p("notes/sub/b.md"),
        )
        .unwrap_err();
    assert!(
        matches!(e, WriteError::Exists(ref x) if x == &p("notes/sub/b.md")),
        "{e:?}"
    );
    assert_eq!(fs::read(v.join("notes/new/dir/a2.md")).unwrap(), b"# A\n");
    assert_eq!(fs::read(v.join("notes/sub/b.md")).unwrap(), b"# B\n");

    // Between areas: a proposal file to `applied/<date>/`, a note to the trash.
    vfs.rename(
        Area::Inbox,
        &p("inbox/new/p.md"),
        Area::Inbox,
        &p("inbox/applied/2026-11-29/p.md"),
    )
    .unwrap();
    assert_eq!(
        fs::read(v.join("inbox/applied/2026-11-29/p.md")).unwrap(),
        b"# P\n"
    );
    let trash = vfs.trash_path(&p("notes/sub/b.md"), "0190b5c2-aaaa").unwrap();
    assert_eq!(trash.as_str(), ".vaultgate/trash/0190b5c2-aaaa/notes/sub/b.md");
    vfs.rename(Area::Note, &p("notes/sub/b.md"), Area::Machine, &trash)
        .unwrap();
    assert_eq!(fs::read(v.join(trash.as_str())).unwrap(), b"# B\n");
    assert!(!v.join("notes/sub/b.md").exists());

    let e = vfs
        .rename(Area::Note, &p("notes/gone.md"), Area::Note, &p("notes/x.md"))
        .unwrap_err();
    assert!(matches!(e, WriteError::NotFound), "{e:?}");
    assert!(!v.join("notes/x.md").exists());
    no_temp_files(&v);
}

#[test]
fn trash_path_validates_the_id() {
    let (_tmp, vfs) = build();
    assert!(vfs.trash_path(&p("notes/a.md"), "../x").is_err());
    assert!(vfs.trash_path(&p("notes/a.md"), "a/b").is_err());
    assert!(vfs.trash_path(&p("notes/a.md"), "").is_err());
}

#[test]
fn remove_file_removes_only_regular_files() {
    let (tmp, vfs) = build();
    let v = tmp.path().join("vault");
    vfs.remove_file(Area::Note, &p("notes/a.md")).unwrap();
    assert!(!v.join("notes/a.md").exists());
    let e = vfs.remove_file(Area::Note, &p("notes/a.md")).unwrap_err();
    assert!(matches!(e, WriteError::NotFound), "{e:?}");
    fs::create_dir(v.join("notes/dir.md")).unwrap();
    let e = vfs.remove_file(Area::Note, &p("notes/dir.md")).unwrap_err();
    assert!(matches!(e, WriteError::Path(PathError::Denied(_))), "{e:?}");
    assert!(v.join("notes/dir.md").is_dir());
}

#[test]
fn read_for_write_returns_bytes_and_hash() {
    let (_tmp, vfs) = build();
    let (bytes, hash) = vfs.read_for_write(Area::Note, &p("notes/a.md")).unwrap().unwrap();
    assert_eq!(bytes, b"# A\n");
    assert_eq!(hash, hex::encode(Sha256::digest(b"# A\n")));
    assert!(
        vfs.read_for_write(Area::Note, &p("notes/none.md"))
            .unwrap()
            .is_none()
    );
    assert!(
        vfs.read_for_write(Area::Note, &p("notes/no/such.md"))
            .unwrap()
            .is_none()
    );
    let (bytes, _) = vfs
        .read_for_write(Area::Inbox, &p("inbox/new/p.md"))
        .unwrap()
        .unwrap();
    assert_eq!(bytes, b"# P\n");
}

#[test]
fn lock_is_exclusive_across_handles_and_threads() {
    let (tmp, vfs) = build();
    let v = tmp.path().join("vault");
    let other = VaultFs::open(&v, layout()).unwrap();
    let held = vfs.try_write_lock().unwrap().expect("free at first");
    assert!(v.join(".vaultgate/write.lock").is_file());
    assert!(other.try_write_lock().unwrap().is_none());
    assert!(vfs.try_write_lock().unwrap().is_none(), "not re-entrant");

    // A blocking taker waits until the holder lets go.
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let lock = other.write_lock().unwrap();
        tx.send(Instant::now()).unwrap();
        drop(lock);
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "took a held lock"
    );
    let released = Instant::now();
    drop(held);
    let taken = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(taken >= released);
    waiter.join().unwrap();
    assert!(vfs.try_write_lock().unwrap().is_some());
}

/// Tells the child test process where the test's temp folder is (set on the child only).
const CHILD_ENV: &str = "VAULTGATE_TEST_LOCK_CHILD";

/// Run as a child by `lock_is_exclusive_across_processes`: holds the lock until told to let go.
/// Run directly (no variable set) it does nothing.
#[test]
fn lock_holder_child() {
    let Some(base) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let base = Path::new(&base);
    let vfs = VaultFs::open(&base.join("vault"), layout()).unwrap();
    let lock = vfs.write_lock().unwrap();
    fs::write(base.join("held"), b"").unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !base.join("release").exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(lock);
}

#[test]
fn lock_is_exclusive_across_processes() {
    let (tmp, vfs) = build();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "lock_holder_child", "--test-threads=1"])
        .env(CHILD_ENV, tmp.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !tmp.path().join("held").exists() {
        assert!(Instant::now() < deadline, "child never took the lock");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(vfs.try_write_lock().unwrap().is_none());
    fs::write(tmp.path().join("release"), b"").unwrap();
    assert!(child.wait().unwrap().success());
    // The child exited: its lock went with it.
    assert!(vfs.try_write_lock().unwrap().is_some());
}

#[test]
fn collisions_by_case_and_normalization() {
    let (tmp, vfs) = build();
    let v = tmp.path().join("vault");
    put(&v.join("notes/attention.md"), b"a");
    put(&v.join("notes/cafe\u{301}.md"), b"nfd");
    put(&v.join("notes/Ünï/x.md"), b"x");

    let found = |raw: &str| vfs.find_collision(&p(raw)).unwrap();
    assert_eq!(found("notes/Attention.md"), Some(p("notes/attention.md")));
    assert_eq!(found("notes/ATTENTION.MD"), Some(p("notes/attention.md")));
    assert_eq!(found("notes/caf\u{e9}.md"), Some(p("notes/cafe\u{301}.md")));
    assert_eq!(found("notes/CAF\u{c9}.md"), Some(p("notes/cafe\u{301}.md")));
    // A folder segment collides too: `Notes/` next to `notes/`.
    assert_eq!(found("Notes/new.md"), Some(p("notes")));
    assert_eq!(found("notes/ünï/y.md"), Some(p("notes/Ünï")));
    // Byte-equal is not a collision (it is the file itself); unrelated names are free.
    assert_eq!(found("notes/attention.md"), None);
    assert_eq!(found("notes/cafe\u{301}.md"), None);
    assert_eq!(found("notes/attention2.md"), None);
    assert_eq!(found("notes/missing/dir/x.md"), None);
    assert!(matches!(
        vfs.find_collision(&p(".git/x")),
        Err(WriteError::Path(PathError::Denied(_)))
    ));

    // A symlinked folder on the way is refused like a write through it.
    symlink(tmp.path().join("outside"), v.join("notes/out")).unwrap();
    assert!(matches!(
        vfs.find_collision(&p("notes/out/keep.md")),
        Err(WriteError::Path(PathError::Outside))
    ));
}

#[test]
fn written_notes_are_read_back_by_the_read_side() {
    let (_tmp, vfs) = build();
    vfs.write_atomic(Area::Note, &p("notes/r.md"), b"# R\n", WriteMode::Exclusive)
        .unwrap();
    assert_eq!(vfs.read_text(&p("notes/r.md")).unwrap().text, "# R\n");
    // The machine folder stays invisible to reads.
    vfs.write_atomic(Area::Machine, &p(".vaultgate/x.md"), b"m", WriteMode::Exclusive)
        .unwrap();
    assert!(vfs.read_text(&p(".vaultgate/x.md")).is_err());
}
