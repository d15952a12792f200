//! T-PATH: a real vault on disk with escaping, hidden-pointing and looping symlinks. Every read,
//! listing and walk must stay inside the vault's readable folders, and the secret outside the
//! vault must never appear in anything returned.
#![cfg(unix)]
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use policy::{FolderPath, Layout, PathError, VaultPath};
use vault::fs::{DirEntry, EntryKind, FsError, MAX_DEPTH, MAX_READ_BYTES, VaultFs};

const SECRET: &str = "TOP-SECRET-8d1f0c";
const GIT_SECRET: &str = "GIT-CONFIG-SECRET-77aa";
const PRIVATE: &str = "PRIVATE-DIARY-31bc";

fn p(s: &str) -> VaultPath {
    VaultPath::parse(s).unwrap()
}

fn folder(s: &str) -> FolderPath {
    FolderPath::parse(s).unwrap()
}

/// notes = ["notes"], standards = ["docs"], inbox = "inbox"; `private/` exists but is unreadable.
fn notes_layout() -> Layout {
    Layout::new(vec![folder("notes")], vec![folder("docs")], p("inbox"), None)
}

/// notes = ["."], standards = ["docs"], inbox = "inbox": the whole vault is readable.
fn root_layout() -> Layout {
    Layout::new(vec![FolderPath::Root], vec![folder("docs")], p("inbox"), None)
}

fn write(path: &Path, bytes: &[u8]) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, bytes).unwrap();
}

/// Builds `<tmp>/vault` with its hostile symlinks, and secrets beside it in `<tmp>`.
fn build() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path();
    let v = base.join("vault");

    // Outside the vault.
    write(&base.join("secret.md"), SECRET.as_bytes());
    write(&base.join("outside/s.md"), SECRET.as_bytes());

    // Ordinary content.
    write(&v.join("notes/a.md"), b"# A\n");
    write(&v.join("notes/sub/b.md"), b"# B\n");
    write(&v.join("notes/readme.txt"), b"plain text\n");
    write(&v.join("docs/std.md"), b"# Standard\n");
    write(&v.join("inbox/p.md"), b"# Pending\n");
    write(&v.join("private/diary.md"), PRIVATE.as_bytes());
    write(&v.join("top.md"), b"# Top\n");

    // Hidden and machine data.
    write(&v.join(".git/config"), GIT_SECRET.as_bytes());
    write(&v.join(".obsidian/app.json"), GIT_SECRET.as_bytes());
    write(&v.join("notes/.hidden.md"), GIT_SECRET.as_bytes());

    // Content limits.
    write(&v.join("notes/bad.md"), &[b'#', b' ', 0xff, 0xfe, b'\n']);
    let limit = usize::try_from(MAX_READ_BYTES).unwrap();
    write(&v.join("notes/big.md"), &vec![b'a'; limit + 1]);
    write(&v.join("notes/exact.md"), &vec![b'a'; limit]);

    let n = v.join("notes");
    // Escaping files: absolute and relative.
    symlink(base.join("secret.md"), n.join("abs_secret.md")).unwrap();
    symlink("../../secret.md", n.join("rel_secret.md")).unwrap();
    // Escaping folders, one of them to a place that does not exist.
    symlink("../../outside", n.join("outside_dir")).unwrap();
    symlink(base.join("outside"), n.join("abs_outside_dir")).unwrap();
    symlink("../../etc", n.join("etc_link")).unwrap();
    // Inside the vault, but hidden or unreadable.
    symlink("../.git/config", n.join("git_config.md")).unwrap();
    symlink("../.git", n.join("git_dir")).unwrap();
    symlink("../private/diary.md", n.join("private_link.md")).unwrap();
    symlink("../private", n.join("private_dir")).unwrap();
    symlink("..", n.join("up")).unwrap();
    // Through a hidden folder and back out: refused, hidden folders are never traversed.
    symlink("../.git/../notes/a.md", n.join("via_git.md")).unwrap();
    // Harmless links.
    symlink("a.md", n.join("alias.md")).unwrap();
    symlink("chain2.md", n.join("chain1.md")).unwrap();
    symlink("./chain3.md", n.join("chain2.md")).unwrap();
    symlink("sub/b.md", n.join("chain3.md")).unwrap();
    symlink("sub", n.join("linked_sub")).unwrap();
    symlink("../docs", n.join("docs_link")).unwrap();
    // A chain that ends outside.
    symlink("chain_mid.md", n.join("chain_out.md")).unwrap();
    symlink("../../secret.md", n.join("chain_mid.md")).unwrap();
    // Loops and dangling links.
    symlink("loop_b.md", n.join("loop_a.md")).unwrap();
    symlink("loop_a.md", n.join("loop_b.md")).unwrap();
    symlink("self_loop", n.join("self_loop")).unwrap();
    symlink("nothing.md", n.join("dangling.md")).unwrap();
    // Folder cycles.
    symlink(".", n.join("cycle")).unwrap();
    symlink("..", n.join("sub/back")).unwrap();
    tmp
}

fn open(tmp: &tempfile::TempDir, layout: Layout) -> VaultFs {
    VaultFs::open(&tmp.path().join("vault"), layout).unwrap()
}

fn read_err(vfs: &VaultFs, path: &str) -> FsError {
    match vfs.read_text(&p(path)) {
        Ok(file) => panic!("{path}: expected an error, read {:?}", file.text),
        Err(e) => e,
    }
}

fn names(entries: &[DirEntry]) -> BTreeSet<String> {
    entries.iter().map(|e| e.path.as_str().to_owned()).collect()
}

#[test]
fn ordinary_and_harmless_symlinked_notes_are_read() {
    let tmp = build();
    let vfs = open(&tmp, notes_layout());
    assert_eq!(vfs.read_text(&p("notes/a.md")).unwrap().text, "# A\n");
    assert_eq!(vfs.read_text(&p("notes/sub/b.md")).unwrap().text, "# B\n");
    assert_eq!(vfs.read_text(&p("notes/alias.md")).unwrap().text, "# A\n");
    assert_eq!(vfs.read_text(&p("notes/chain1.md")).unwrap().text, "# B\n");
    assert_eq!(vfs.read_text(&p("notes/linked_sub/b.md")).unwrap().text, "# B\n");
    assert_eq!(vfs.read_text(&p("notes/cycle/cycle/a.md")).unwrap().text, "# A\n");
    assert_eq!(
        vfs.read_text(&p("notes/docs_link/std.md")).unwrap().text,
        "# Standard\n"
    );
    let file = vfs.read_text(&p("docs/std.md")).unwrap();
    assert_eq!(file.bytes(), b"# Standard\n");
}

#[test]
fn symlinks_leaving_the_vault_are_outside() {
    let tmp = build();
    let vfs = open(&tmp, notes_layout());
    for path in [
        "notes/abs_secret.md",
        "notes/rel_secret.md",
        "notes/chain_out.md",
        "notes/outside_dir/s.md",
        "notes/abs_outside_dir/s.md",
        "notes/etc_link/passwd",
        "notes/linked_sub/back/outside_dir/s.md",
    ] {
        let e = read_err(&vfs, path);
        assert!(matches!(e, FsError::Path(PathError::Outside)), "{path}: {e:?}");
    }
    let e = vfs.list_dir(&folder("notes/outside_dir")).unwrap_err();
    assert!(matches!(e, FsError::Path(PathError::Outside)), "{e:?}");
}

#[test]
fn symlinks_to_hidden_or_unreadable_places_are_denied() {
    let tmp = build();
    let vfs = open(&tmp, notes_layout());
    for path in [
        "notes/git_config.md",
        "notes/git_dir/config",
        "notes/private_link.md",
        "notes/private_dir/diary.md",
        "notes/up/top.md",
        "notes/via_git.md",
    ] {
        let e = read_err(&vfs, path);
        assert!(matches!(e, FsError::Path(PathError::Denied(_))), "{path}: {e:?}");
    }
    for dir in ["notes/git_dir", "notes/private_dir", "notes/up"] {
        let e = vfs.list_dir(&folder(dir)).unwrap_err();
        assert!(matches!(e, FsError::Path(PathError::Denied(_))), "{dir}: {e:?}");
    }
}

#[test]
fn direct_access_to_hidden_and_unreadable_paths_is_denied_before_io() {
    let tmp = build();
    let vfs = open(&tmp, notes_layout());
    for path in [
        ".git/config",
        ".obsidian/app.json",
        "notes/.hidden.md",
        "private/diary.md",
    ] {
        let e = read_err(&vfs, path);
        assert!(matches!(e, FsError::Path(PathError::Denied(_))), "{path}: {e:?}");
    }
    // Denied whether or not it exists: nothing is revealed.
    let e = read_err(&vfs, ".git/does-not-exist");
    assert!(matches!(e, FsError::Path(PathError::Denied(_))), "{e:?}");
}

#[test]
fn loops_and_dangling_links_are_not_found() {
    let tmp = build();
    let vfs = open(&tmp, notes_layout());
    for path in [
        "notes/loop_a.md",
        "notes/self_loop",
        "notes/dangling.md",
        "notes/self_loop/x.md",
    ] {
        let e = read_err(&vfs, path);
        assert!(matches!(e, FsError::NotFound), "{path}: {e:?}");
    }
}

#[test]
fn size_and_encoding_limits() {
    let tmp = build();
    let vfs = open(&tmp, notes_layout());
    let exact = vfs.read_text(&p("notes/exact.md")).unwrap();
    assert_eq!(exact.bytes().len() as u64, MAX_READ_BYTES);
    assert!(matches!(read_err(&vfs, "notes/big.md"), FsError::TooLarge));
    assert!(matches!(read_err(&vfs, "notes/bad.md"), FsError::NotText));
}

#[test]
fn missing_paths_folders_and_files_as_folders_are_not_found() {
    let tmp = build();
    let vfs = open(&tmp, notes_layout());
    for path in [
        "notes/missing.md",
        "notes/sub",
        "notes",
        "notes/a.md/x",
        "notes/linked_sub",
    ] {
        assert!(matches!(read_err(&vfs, path), FsError::NotFound), "{path}");
    }
    for dir in ["notes/a.md", "notes/missing", "notes/alias.md"] {
        let e = vfs.list_dir(&folder(dir)).unwrap_err();
        assert!(matches!(e, FsError::NotFound), "{dir}: {e:?}");
    }
}

#[test]
fn listing_leaves_out_hidden_escaping_and_broken_entries() {
    let tmp = build();
    let vfs = open(&tmp, notes_layout());
    let entries = vfs.list_dir(&folder("notes")).unwrap();
    let expected: BTreeSet<String> = [
        "a.md",
        "alias.md",
        "bad.md",
        "big.md",
        "chain1.md",
        "chain2.md",
        "chain3.md",
        "cycle",
        "docs_link",
        "exact.md",
        "linked_sub",
        "readme.txt",
        "sub",
    ]
    .iter()
    .map(|n| format!("notes/{n}"))
    .collect();
    assert_eq!(names(&entries), expected);
    let kind = |name: &str| entries.iter().find(|e| e.path.as_str() == name).unwrap().kind;
    assert_eq!(kind("notes/linked_sub"), EntryKind::Folder);
    assert_eq!(kind("notes/alias.md"), EntryKind::File);
    let alias = entries
        .iter()
        .find(|e| e.path.as_str() == "notes/alias.md")
        .unwrap();
    assert_eq!(alias.size, 4, "a symlink is listed with its target's size");

    // Through a symlinked folder, entries keep the link's name.
    let linked = vfs.list_dir(&folder("notes/linked_sub")).unwrap();
    let expected: BTreeSet<String> = ["notes/linked_sub/b.md", "notes/linked_sub/back"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    assert_eq!(names(&linked), expected, "`back -> ..` is `notes`, readable");

    // At the root only readable folders show; `private`, `.git`, `top.md` do not.
    let root = vfs.list_dir(&FolderPath::Root).unwrap();
    let expected: BTreeSet<String> = ["docs", "inbox", "notes"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    assert_eq!(names(&root), expected);
}

#[test]
fn walk_finds_notes_once_and_omits_bad_entries() {
    let tmp = build();
    let vfs = open(&tmp, notes_layout());
    let walked = vfs.walk_markdown(&[folder("notes"), folder("docs"), folder("inbox")]);
    let expected: BTreeSet<String> = [
        "docs/std.md",
        "inbox/p.md",
        "notes/a.md",
        "notes/alias.md",
        "notes/bad.md",
        "notes/chain1.md",
        "notes/chain2.md",
        "notes/chain3.md",
        // `notes/cycle -> .` is the folder being walked: not entered.
        "notes/docs_link/std.md",
        "notes/exact.md",
        "notes/linked_sub/b.md",
        "notes/sub/b.md",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    assert_eq!(names(&walked), expected);
    assert_eq!(walked.len(), expected.len(), "no duplicates");
    assert!(walked.iter().all(|e| e.kind == EntryKind::File));
}

#[test]
fn walk_of_a_fully_readable_vault_terminates_without_cycles() {
    let tmp = build();
    let base = tmp.path().join("vault");
    // Two folders linking to each other, and a link to the root from deep inside.
    write(&base.join("x/x.md"), b"x");
    write(&base.join("y/y.md"), b"y");
    symlink("../y", base.join("x/to_y")).unwrap();
    symlink("../x", base.join("y/to_x")).unwrap();
    symlink("../../..", base.join("notes/sub/root")).unwrap();
    let vfs = open(&tmp, root_layout());
    let walked = names(&vfs.walk_markdown(&[FolderPath::Root, folder("docs"), folder("x")]));
    for expected in [
        "top.md",
        "private/diary.md",
        "x/x.md",
        "x/to_y/y.md",
        "y/to_x/x.md",
    ] {
        assert!(walked.contains(expected), "{expected} missing from {walked:?}");
    }
    // y/to_x/to_y would be y again, which is being walked.
    assert!(!walked.contains("y/to_x/to_y/y.md"));
    assert!(!walked.iter().any(|p| p.contains("/root/")), "{walked:?}");
    assert!(!walked.iter().any(|p| p.starts_with(".git") || p.contains("/.")));
    // With the root readable, `notes/up -> ..` may be read through.
    assert_eq!(vfs.read_text(&p("notes/up/top.md")).unwrap().text, "# Top\n");
    assert_eq!(
        vfs.read_text(&p("notes/up/private/diary.md")).unwrap().text,
        PRIVATE
    );
    // Hidden stays hidden, whatever the layout.
    assert!(matches!(
        read_err(&vfs, "notes/git_config.md"),
        FsError::Path(PathError::Denied(_))
    ));
    assert!(matches!(
        read_err(&vfs, "notes/rel_secret.md"),
        FsError::Path(PathError::Outside)
    ));
}

#[test]
fn walk_stops_at_max_depth() {
    let tmp = tempfile::tempdir().unwrap();
    let mut dir = tmp.path().to_path_buf();
    for level in 1..=MAX_DEPTH + 3 {
        dir = dir.join(format!("d{level}"));
        write(&dir.join(format!("n{level}.md")), b"n");
    }
    let vfs = VaultFs::open(tmp.path(), root_layout()).unwrap();
    let walked = vfs.walk_markdown(&[FolderPath::Root]);
    assert_eq!(walked.len(), MAX_DEPTH);
    assert!(walked.iter().all(|e| e.path.segments().count() <= MAX_DEPTH + 1));
}

#[test]
fn the_outside_secret_never_appears_in_any_result() {
    let tmp = build();
    for layout in [notes_layout(), root_layout()] {
        let vfs = open(&tmp, layout);
        let mut seen = String::new();
        let read = |seen: &mut String, path: &VaultPath| match vfs.read_text(path) {
            Ok(file) => seen.push_str(&file.text),
            Err(e) => seen.push_str(&format!("{e} {e:?}")),
        };
        let walked = vfs.walk_markdown(&[FolderPath::Root, folder("notes")]);
        seen.push_str(&format!("{walked:?}"));
        for e in &walked {
            read(&mut seen, &e.path);
        }
        let mut folders = vec![FolderPath::Root];
        while let Some(f) = folders.pop() {
            let Ok(entries) = vfs.list_dir(&f) else { continue };
            for e in entries {
                seen.push_str(&format!("{e:?}"));
                read(&mut seen, &e.path);
                if e.kind == EntryKind::Folder && e.path.segments().count() < 6 {
                    folders.push(FolderPath::Dir(e.path));
                }
            }
        }
        for path in [
            "notes/abs_secret.md",
            "notes/rel_secret.md",
            "notes/outside_dir/s.md",
        ] {
            read(&mut seen, &p(path));
        }
        assert!(seen.contains("# A"), "the sweep did read notes");
        assert!(!seen.contains(SECRET), "outside secret leaked");
        assert!(!seen.contains(GIT_SECRET), "hidden file leaked");
    }
}

#[test]
fn metadata_and_resolve_report_the_real_target() {
    let tmp = build();
    let vfs = open(&tmp, notes_layout());
    let meta = vfs.metadata(&p("notes/alias.md")).unwrap();
    assert_eq!(
        (meta.kind, meta.size, meta.path.as_str()),
        (EntryKind::File, 4, "notes/alias.md")
    );
    assert_eq!(
        vfs.metadata(&p("notes/linked_sub")).unwrap().kind,
        EntryKind::Folder
    );
    assert_eq!(
        vfs.resolve(&p("notes/chain1.md")).unwrap(),
        Some(p("notes/sub/b.md"))
    );
    assert_eq!(vfs.resolve(&p("notes/cycle/cycle")).unwrap(), Some(p("notes")));
    assert!(matches!(
        vfs.resolve(&p("notes/rel_secret.md")),
        Err(FsError::Path(PathError::Outside))
    ));
    assert!(matches!(
        vfs.metadata(&p("notes/missing.md")),
        Err(FsError::NotFound)
    ));
}

#[test]
fn a_fifo_is_not_read_and_does_not_block() {
    let tmp = build();
    let fifo = tmp.path().join("vault/notes/pipe.md");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        return; // no mkfifo on this system
    }
    let vfs = open(&tmp, notes_layout());
    assert!(matches!(read_err(&vfs, "notes/pipe.md"), FsError::NotFound));
    assert!(!names(&vfs.list_dir(&folder("notes")).unwrap()).contains("notes/pipe.md"));
    assert!(!names(&vfs.walk_markdown(&[folder("notes")])).contains("notes/pipe.md"));
}

/// SECURITY(T-PATH): a FIFO is never even opened: a writer waiting for a reader is not let
/// through by a read of its name (opening is itself an act on a FIFO, as on a device).
#[test]
fn a_fifo_is_never_opened_by_a_read() {
    let tmp = build();
    let fifo = tmp.path().join("vault/notes/waiting.md");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        return; // no mkfifo on this system
    }
    let opened = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (fifo, opened) = (fifo.clone(), opened.clone());
        // Blocks in open until some reader opens the FIFO.
        std::thread::spawn(move || {
            let f = std::fs::OpenOptions::new().write(true).open(&fifo);
            opened.store(true, std::sync::atomic::Ordering::SeqCst);
            drop(f);
        })
    };
    let vfs = open(&tmp, notes_layout());
    for _ in 0..5 {
        assert!(matches!(read_err(&vfs, "notes/waiting.md"), FsError::NotFound));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        !opened.load(std::sync::atomic::Ordering::SeqCst),
        "a read opened the FIFO"
    );
    // Let the writer go: this reader pairs with it.
    drop(std::fs::File::open(&fifo).unwrap());
    writer.join().unwrap();
}

#[test]
fn nested_readable_folders_are_walked_even_beside_an_unreadable_root() {
    let tmp = tempfile::tempdir().unwrap();
    let v = tmp.path();
    write(&v.join("a/b/x.md"), b"x");
    write(&v.join("a/hidden_from_policy.md"), b"no");
    write(&v.join("Node_Modules/m.md"), b"no");
    symlink("../Node_Modules/m.md", v.join("a/b/nm.md")).unwrap();
    let layout = Layout::new(vec![folder("a/b")], vec![], p("inbox"), None);
    let vfs = VaultFs::open(v, layout).unwrap();
    let walked = names(&vfs.walk_markdown(&[FolderPath::Root, folder("a/b")]));
    assert_eq!(walked, BTreeSet::from(["a/b/x.md".to_owned()]));
    let e = read_err(&vfs, "a/b/nm.md");
    assert!(matches!(e, FsError::Path(PathError::Denied(_))), "{e:?}");
}
