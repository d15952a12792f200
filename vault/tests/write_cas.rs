//! Compare-and-swap writes and append-only files on a real vault (docs/contract.md#proposals, "never overwrite an
//! edit", "appended, never rewritten, no size limit"), containment included (T-PATH).
#![cfg(unix)]
#![allow(clippy::unwrap_used)]

use std::fs;
use std::io::BufRead;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use policy::{ErrorCode, FolderPath, Layout, PathError, VaultPath};
use sha2::{Digest, Sha256};
use vault::fs::VaultFs;
use vault::write::{Area, WriteError};

fn p(s: &str) -> VaultPath {
    VaultPath::parse(s).unwrap()
}

fn sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

fn layout() -> Layout {
    Layout::new(
        vec![FolderPath::parse("notes").unwrap()],
        vec![],
        p("inbox"),
        None,
    )
}

/// `<base>/vault` with `notes/a.md` = "old", and `<base>/outside.md` beside it.
fn build_in(base: &Path) -> (PathBuf, VaultFs) {
    let v = base.join("vault");
    fs::create_dir_all(v.join("notes/sub")).unwrap();
    fs::create_dir_all(v.join("inbox")).unwrap();
    fs::write(v.join("notes/a.md"), b"old").unwrap();
    fs::write(base.join("outside.md"), b"SECRET").unwrap();
    let vfs = VaultFs::open(&v, layout()).unwrap();
    (v, vfs)
}

fn build() -> (tempfile::TempDir, PathBuf, VaultFs) {
    let tmp = tempfile::tempdir().unwrap();
    let (v, vfs) = build_in(tmp.path());
    (tmp, v, vfs)
}

/// Every name below `dir`, hidden ones included, relative and sorted.
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
            if e.file_type().unwrap().is_dir() {
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

/// Nothing staged, held or set aside is left anywhere in the vault.
fn no_litter(v: &Path) {
    let litter: Vec<String> = tree(v)
        .into_iter()
        .filter(|n| n.contains(".vaultgate-tmp-") || n.contains(".vaultgate-held-") || n.contains("conflict"))
        .collect();
    assert!(litter.is_empty(), "left behind: {litter:?}");
}

fn is_conflict(r: Result<(), WriteError>, path: &str) {
    match r {
        Err(WriteError::Conflict(got)) => assert_eq!(got, p(path)),
        other => panic!("expected Conflict({path}), got {other:?}"),
    }
}

fn replace_cycle(v: &Path, vfs: &VaultFs) {
    let a = p("notes/a.md");
    // Changed since it was read: refused, the edit kept.
    fs::write(v.join("notes/a.md"), b"their edit").unwrap();
    is_conflict(
        vfs.replace_if(Area::Note, &a, b"ours", &sha(b"old")),
        "notes/a.md",
    );
    assert_eq!(fs::read(v.join("notes/a.md")).unwrap(), b"their edit");
    // Unchanged: replaced.
    vfs.replace_if(Area::Note, &a, b"ours", &sha(b"their edit"))
        .unwrap();
    assert_eq!(fs::read(v.join("notes/a.md")).unwrap(), b"ours");
    assert_eq!(
        vfs.read_for_write(Area::Note, &a).unwrap().unwrap().1,
        sha(b"ours")
    );
    // Gone: nothing holds the expected bytes.
    is_conflict(
        vfs.replace_if(Area::Note, &p("notes/gone.md"), b"x", &sha(b"")),
        "notes/gone.md",
    );
    is_conflict(
        vfs.replace_if(Area::Note, &p("notes/nofolder/x.md"), b"x", &sha(b"")),
        "notes/nofolder/x.md",
    );
    assert!(!v.join("notes/gone.md").exists() && !v.join("notes/nofolder").exists());
    no_litter(v);
}

#[test]
fn replace_if_replaces_only_the_expected_bytes() {
    let (_tmp, v, vfs) = build();
    replace_cycle(&v, &vfs);
}

/// The same on tmpfs, the other file system the exchange must work on.
#[test]
fn replace_if_on_tmpfs() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        return;
    }
    let tmp = tempfile::tempdir_in(shm).unwrap();
    let (v, vfs) = build_in(tmp.path());
    replace_cycle(&v, &vfs);
}

#[test]
fn replace_if_keeps_the_mode_and_the_conflict_code() {
    use std::os::unix::fs::PermissionsExt;
    let (_tmp, v, vfs) = build();
    let a = v.join("notes/a.md");
    fs::set_permissions(&a, fs::Permissions::from_mode(0o640)).unwrap();
    vfs.replace_if(Area::Note, &p("notes/a.md"), b"x", &sha(b"old"))
        .unwrap();
    assert_eq!(fs::metadata(&a).unwrap().permissions().mode() & 0o777, 0o640);
    let e = vfs
        .replace_if(Area::Note, &p("notes/a.md"), b"y", &sha(b"old"))
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::PROPOSAL_STALE_BASE);
}

#[test]
fn create_if_absent_refuses_an_existing_file() {
    let (_tmp, v, vfs) = build();
    vfs.create_if_absent(Area::Note, &p("notes/sub/new.md"), b"new")
        .unwrap();
    assert_eq!(fs::read(v.join("notes/sub/new.md")).unwrap(), b"new");
    let e = vfs
        .create_if_absent(Area::Note, &p("notes/a.md"), b"x")
        .unwrap_err();
    assert!(
        matches!(e, WriteError::Exists(ref got) if got == &p("notes/a.md")),
        "{e:?}"
    );
    assert_eq!(fs::read(v.join("notes/a.md")).unwrap(), b"old");
    no_litter(&v);
}

#[test]
fn remove_if_removes_only_the_expected_bytes() {
    let (_tmp, v, vfs) = build();
    let a = p("notes/a.md");
    fs::write(v.join("notes/a.md"), b"their edit").unwrap();
    is_conflict(vfs.remove_if(Area::Note, &a, &sha(b"old")), "notes/a.md");
    assert_eq!(fs::read(v.join("notes/a.md")).unwrap(), b"their edit");
    no_litter(&v);
    vfs.remove_if(Area::Note, &a, &sha(b"their edit")).unwrap();
    assert!(!v.join("notes/a.md").exists());
    is_conflict(vfs.remove_if(Area::Note, &a, &sha(b"their edit")), "notes/a.md");
    no_litter(&v);
}

#[test]
fn rename_if_moves_only_the_expected_bytes() {
    let (_tmp, v, vfs) = build();
    let (a, b) = (p("notes/a.md"), p("notes/new/b.md"));
    fs::write(v.join("notes/a.md"), b"their edit").unwrap();
    is_conflict(
        vfs.rename_if(Area::Note, &a, Area::Note, &b, &sha(b"old")),
        "notes/a.md",
    );
    assert_eq!(fs::read(v.join("notes/a.md")).unwrap(), b"their edit");
    assert!(!v.join("notes/new/b.md").exists());
    vfs.rename_if(Area::Note, &a, Area::Note, &b, &sha(b"their edit"))
        .unwrap();
    assert!(!v.join("notes/a.md").exists());
    assert_eq!(fs::read(v.join("notes/new/b.md")).unwrap(), b"their edit");
    // The destination is never replaced.
    fs::write(v.join("notes/c.md"), b"c").unwrap();
    let e = vfs
        .rename_if(Area::Note, &p("notes/c.md"), Area::Note, &b, &sha(b"c"))
        .unwrap_err();
    assert!(matches!(e, WriteError::Exists(ref got) if got == &b), "{e:?}");
    assert_eq!(fs::read(v.join("notes/new/b.md")).unwrap(), b"their edit");
    assert_eq!(fs::read(v.join("notes/c.md")).unwrap(), b"c");
    // Across areas, as an applied delete's move to the trash.
    let trash = vfs.trash_path(&p("notes/c.md"), "t1").unwrap();
    vfs.rename_if(Area::Note, &p("notes/c.md"), Area::Machine, &trash, &sha(b"c"))
        .unwrap();
    assert_eq!(fs::read(v.join(".vaultgate/trash/t1/notes/c.md")).unwrap(), b"c");
    no_litter(&v);
}

/// A symlink at the file or at any folder on the way is refused by every CAS op, and nothing
/// it points at is touched.
#[test]
fn symlinks_are_refused_at_every_component() {
    let (tmp, v, vfs) = build();
    symlink(tmp.path().join("outside.md"), v.join("notes/abs.md")).unwrap();
    symlink("a.md", v.join("notes/inside.md")).unwrap();
    symlink(tmp.path(), v.join("notes/absdir")).unwrap();
    symlink("sub", v.join("notes/insidedir")).unwrap();
    fs::write(v.join("notes/sub/x.md"), b"x").unwrap();
    let before = tree(&v);
    let refused = |r: Result<(), WriteError>, what: &str| {
        assert!(
            matches!(
                r,
                Err(WriteError::Path(PathError::Outside | PathError::Denied(_)))
            ),
            "{what}: {r:?}"
        );
    };
    for raw in [
        "notes/abs.md",
        "notes/inside.md",
        "notes/absdir/outside.md",
        "notes/insidedir/x.md",
    ] {
        let path = p(raw);
        let expected = if raw.contains("outside") || raw.contains("abs") {
            sha(b"SECRET")
        } else if raw.ends_with("x.md") {
            sha(b"x")
        } else {
            sha(b"old")
        };
        refused(vfs.replace_if(Area::Note, &path, b"pwned", &expected), raw);
        refused(vfs.remove_if(Area::Note, &path, &expected), raw);
        refused(
            vfs.rename_if(Area::Note, &path, Area::Note, &p("notes/moved.md"), &expected),
            raw,
        );
        refused(
            vfs.rename_if(Area::Note, &p("notes/a.md"), Area::Note, &path, &sha(b"old")),
            raw,
        );
        refused(vfs.append_line(Area::Note, &path, b"pwned"), raw);
        refused(vfs.read_last_line(Area::Note, &path).map(drop), raw);
        refused(vfs.open_read_stream(Area::Note, &path).map(drop), raw);
    }
    assert_eq!(tree(&v), before);
    assert_eq!(fs::read(tmp.path().join("outside.md")).unwrap(), b"SECRET");
    assert_eq!(fs::read(v.join("notes/a.md")).unwrap(), b"old");
}

/// An outside editor rewriting the note (atomic rename, as editors save) while apply keeps
/// trying with a base that is already stale: every try is refused, nothing of ours stays, and
/// the editor's last version survives (at the note, or set aside if it landed mid-exchange).
#[test]
fn a_concurrent_editor_never_loses_its_last_version() {
    let (_tmp, v, vfs) = build();
    let note = v.join("notes/a.md");
    fs::write(&note, b"edit-start").unwrap();
    let editor = {
        let v = v.clone();
        std::thread::spawn(move || {
            for i in 0..300 {
                let tmp = v.join(format!("notes/.edit-{i}"));
                fs::write(&tmp, format!("edit-{i}")).unwrap();
                fs::rename(&tmp, v.join("notes/a.md")).unwrap();
            }
        })
    };
    for _ in 0..300 {
        is_conflict(
            vfs.replace_if(Area::Note, &p("notes/a.md"), b"ours", &sha(b"old")),
            "notes/a.md",
        );
    }
    editor.join().unwrap();
    let mut kept: Vec<Vec<u8>> = vec![fs::read(&note).unwrap()];
    for name in tree(&v.join("notes")) {
        if name.contains(".vaultgate-conflict-") {
            kept.push(fs::read(v.join("notes").join(name)).unwrap());
        }
    }
    assert!(kept.iter().all(|k| k.as_slice() != b"ours"), "our bytes stayed");
    assert!(kept.iter().any(|k| k.as_slice() == b"edit-299"), "last edit lost");
    assert!(tree(&v.join(".vaultgate/tmp")).is_empty());
}

#[test]
fn append_line_appends_and_mends_a_torn_tail() {
    let (_tmp, v, vfs) = build();
    let log = p("inbox/_applied.jsonl");
    assert_eq!(vfs.read_last_line(Area::Inbox, &log).unwrap(), None);
    assert!(vfs.open_read_stream(Area::Inbox, &log).unwrap().is_none());
    vfs.append_line(Area::Inbox, &log, b"{\"seq\":1}").unwrap();
    vfs.append_line(Area::Inbox, &log, "{\"seq\":2,\"t\":\"注意\"}".as_bytes())
        .unwrap();
    assert_eq!(
        fs::read_to_string(v.join("inbox/_applied.jsonl")).unwrap(),
        "{\"seq\":1}\n{\"seq\":2,\"t\":\"注意\"}\n"
    );
    assert_eq!(
        vfs.read_last_line(Area::Inbox, &log).unwrap().as_deref(),
        Some("{\"seq\":2,\"t\":\"注意\"}")
    );
    // A crash left half a line: the next line starts on its own line.
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(v.join("inbox/_applied.jsonl"))
        .unwrap();
    std::io::Write::write_all(&mut f, b"{\"seq\":3,\"tor").unwrap();
    vfs.append_line(Area::Inbox, &log, b"{\"seq\":3}").unwrap();
    let text = fs::read_to_string(v.join("inbox/_applied.jsonl")).unwrap();
    assert!(text.ends_with("\n{\"seq\":3,\"tor\n{\"seq\":3}\n"), "{text:?}");
    assert_eq!(
        vfs.read_last_line(Area::Inbox, &log).unwrap().as_deref(),
        Some("{\"seq\":3}")
    );
    // A whitespace-only torn tail is not a line.
    std::io::Write::write_all(&mut f, b"  ").unwrap();
    assert_eq!(
        vfs.read_last_line(Area::Inbox, &log).unwrap().as_deref(),
        Some("{\"seq\":3}")
    );
    // Two lines in one call are refused before anything is written.
    let len = fs::metadata(v.join("inbox/_applied.jsonl")).unwrap().len();
    assert!(matches!(
        vfs.append_line(Area::Inbox, &log, b"a\nb"),
        Err(WriteError::NotALine)
    ));
    assert_eq!(fs::metadata(v.join("inbox/_applied.jsonl")).unwrap().len(), len);
    // Areas still apply.
    assert!(matches!(
        vfs.append_line(Area::Inbox, &p("notes/x.jsonl"), b"x"),
        Err(WriteError::Path(_))
    ));
    no_litter(&v);
}

/// Past the 2 MiB read limit: appends, the last line and the stream still work.
#[test]
fn append_only_files_have_no_size_limit() {
    let (_tmp, v, vfs) = build();
    let log = p("inbox/_applied.jsonl");
    let line = "x".repeat(1000);
    let mut big = String::new();
    for _ in 0..3000 {
        big.push_str(&line);
        big.push('\n');
    }
    fs::write(v.join("inbox/_applied.jsonl"), &big).unwrap();
    assert!(fs::metadata(v.join("inbox/_applied.jsonl")).unwrap().len() > 2 * 1024 * 1024);
    vfs.append_line(Area::Inbox, &log, b"last").unwrap();
    assert_eq!(
        vfs.read_last_line(Area::Inbox, &log).unwrap().as_deref(),
        Some("last")
    );
    let lines: Vec<String> = vfs
        .open_read_stream(Area::Inbox, &log)
        .unwrap()
        .unwrap()
        .lines()
        .map(Result::unwrap)
        .collect();
    assert_eq!(lines.len(), 3001);
    assert_eq!(lines[3000], "last");
    assert!(matches!(
        vfs.read_for_write(Area::Inbox, &log),
        Err(WriteError::TooLarge)
    ));
}
