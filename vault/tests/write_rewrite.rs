//! `Vault::plan_move`: the exact texts a move's link rewrites produce (docs/contract.md#proposals).
#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::Path;

use policy::{ErrorCode, FolderPath, Layout, VaultPath};
use sha2::{Digest, Sha256};
use vault::Vault;
use vault::rewrite::LinkRewrite;

fn p(s: &str) -> VaultPath {
    VaultPath::parse(s).unwrap()
}

/// notes = ["."], standards = ["docs"], inbox = "inbox".
fn root_layout() -> Layout {
    Layout::new(
        vec![FolderPath::Root],
        vec![FolderPath::parse("docs").unwrap()],
        p("inbox"),
        None,
    )
}

fn vault(files: &[(&str, &str)], layout: Layout) -> (tempfile::TempDir, Vault) {
    let tmp = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let full = tmp.path().join(path);
        fs::create_dir_all(full.parent().unwrap()).unwrap();
        fs::write(full, text).unwrap();
    }
    let v = Vault::open(tmp.path(), layout).unwrap();
    (tmp, v)
}

fn hash(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

fn find<'a>(plan: &'a [LinkRewrite], path: &str) -> &'a LinkRewrite {
    plan.iter()
        .find(|r| r.path.as_str() == path)
        .unwrap_or_else(|| panic!("no rewrite for {path}"))
}

const ATTENTION: &str = "# Attention\nSelf [[attention#Top]] and [[#local]].\nSee [other](../b/other.md).\n";

const OTHER: &str = r#"---
title: Other
related: "[[attention]]"
---
# Other

Stem [[attention]], label [[attention|the paper]], heading [[Attention#Scaled dot]], embed ![[attention]].
Path [[z/attention]], with ext [[z/attention.md|x]], relative [[../z/attention]], spaced [[ attention | s ]].
Markdown [paper](../z/attention.md#sec), absolute [abs](/z/attention.md), title [t](../z/attention.md "T").
| table | [[attention\|alias]] |
`[[attention]]` inline code stays, as do [[other]] [[missing]] ![[pic.png]] [web](https://x.com/attention.md).
```md
[[attention]] fenced stays
```
"#;

const OTHER_AFTER: &str = r#"---
title: Other
related: "[[attention]]"
---
# Other

Stem [[注意力]], label [[注意力|the paper]], heading [[注意力#Scaled dot]], embed ![[注意力]].
Path [[y/new dir/注意力]], with ext [[y/new dir/注意力.md|x]], relative [[../y/new dir/注意力]], spaced [[ 注意力 | s ]].
Markdown [paper](../y/new%20dir/注意力.md#sec), absolute [abs](/y/new%20dir/注意力.md), title [t](../y/new%20dir/注意力.md "T").
| table | [[注意力\|alias]] |
`[[attention]]` inline code stays, as do [[other]] [[missing]] ![[pic.png]] [web](https://x.com/attention.md).
```md
[[attention]] fenced stays
```
"#;

#[test]
fn links_in_every_style_are_rewritten_and_nothing_else_changes() {
    let files = [
        ("z/attention.md", ATTENTION),
        ("b/other.md", OTHER),
        ("b/unrelated.md", "No links to it: [[other]], [x](other.md).\n"),
        ("docs/std.md", "Standard citing [[attention]].\n"),
        ("inbox/new/p.md", "Pending [[attention]] stays.\n"),
    ];
    let (_tmp, v) = vault(&files, root_layout());
    let plan = v
        .plan_move(&p("z/attention.md"), &p("y/new dir/注意力.md"))
        .unwrap();
    let paths: Vec<&str> = plan.iter().map(|r| r.path.as_str()).collect();
    // Sorted by path; the inbox and notes without links to it are left out.
    assert_eq!(paths, ["b/other.md", "docs/std.md", "z/attention.md"]);

    let other = find(&plan, "b/other.md");
    assert_eq!(other.new_text, OTHER_AFTER);
    assert_eq!(other.count, 12);
    assert_eq!(other.base_hash, hash(OTHER));

    let std = find(&plan, "docs/std.md");
    assert_eq!(std.new_text, "Standard citing [[注意力]].\n");
    assert_eq!(std.count, 1);

    // The moved note: its self link, and its relative link now made from its new folder.
    let moved = find(&plan, "z/attention.md");
    assert_eq!(
        moved.new_text,
        "# Attention\nSelf [[注意力#Top]] and [[#local]].\nSee [other](../../b/other.md).\n"
    );
    assert_eq!(moved.count, 2);
    assert_eq!(moved.base_hash, hash(ATTENTION));
}

#[test]
fn a_stem_link_that_still_resolves_is_left_alone() {
    let files = [
        ("z/attention.md", "# A\n"),
        (
            "b/other.md",
            "[[attention]] and [[z/attention|p]] and [m](../z/attention.md)\n",
        ),
    ];
    let (_tmp, v) = vault(&files, root_layout());
    let plan = v.plan_move(&p("z/attention.md"), &p("y/attention.md")).unwrap();
    assert_eq!(plan.len(), 1);
    assert_eq!(
        plan[0].new_text,
        "[[attention]] and [[y/attention|p]] and [m](../y/attention.md)\n"
    );
    assert_eq!(plan[0].count, 2);
}

#[test]
fn a_stem_that_is_not_unique_after_the_move_becomes_a_path() {
    let files = [
        ("a/x.md", "# X\n"),
        ("c/note.md", "# Note\n"),
        ("d/q.md", "[[x]] then [[note]] then ![[X.md]]\n"),
    ];
    let (_tmp, v) = vault(&files, root_layout());
    let plan = v.plan_move(&p("a/x.md"), &p("b/note.md")).unwrap();
    assert_eq!(plan.len(), 1);
    // `[[note]]` meant `c/note.md`; after the move it would pick `b/note.md`, so it is pinned.
    assert_eq!(
        plan[0].new_text,
        "[[b/note]] then [[c/note]] then ![[b/note.md]]\n"
    );
    assert_eq!(plan[0].count, 3);
}

#[test]
fn markdown_links_get_relative_paths_and_keep_crlf_and_fragments() {
    let files = [
        ("notes/My Note.md", "# M\n"),
        (
            "notes/deep/er/src.md",
            "a [l](../../My%20Note.md#h) b\r\n[k](<../../My Note.md>)\r\n[j](./../../My%20Note.md?x)\r\n",
        ),
        ("notes/same.md", "[s](./My%20Note.md) [t](My%20Note.md)\n"),
    ];
    let (_tmp, v) = vault(&files, root_layout());
    let plan = v
        .plan_move(&p("notes/My Note.md"), &p("notes/deep/Other (1) 100%.md"))
        .unwrap();
    assert_eq!(plan.len(), 2);
    assert_eq!(
        find(&plan, "notes/deep/er/src.md").new_text,
        "a [l](../Other%20%281%29%20100%25.md#h) b\r\n[k](<../Other%20%281%29%20100%25.md>)\r\n[j](../Other%20%281%29%20100%25.md?x)\r\n"
    );
    assert_eq!(
        find(&plan, "notes/same.md").new_text,
        "[s](./deep/Other%20%281%29%20100%25.md) [t](deep/Other%20%281%29%20100%25.md)\n"
    );
}

#[test]
fn cjk_names_and_wiki_relative_links() {
    let files = [
        ("知识/注意力.md", "# 注意\n"),
        ("知识/索引.md", "[[注意力]] [[./注意力|本地]] [链接](注意力.md)\n"),
    ];
    let (_tmp, v) = vault(&files, root_layout());
    let plan = v
        .plan_move(&p("知识/注意力.md"), &p("知识/机制/自注意力.md"))
        .unwrap();
    assert_eq!(plan.len(), 1);
    assert_eq!(
        plan[0].new_text,
        "[[自注意力]] [[./机制/自注意力|本地]] [链接](机制/自注意力.md)\n"
    );
    assert_eq!(plan[0].count, 3);
}

#[test]
fn notes_apply_may_not_write_are_not_planned() {
    // notes = ["notes"]: the standard in `docs/` is read for links but never rewritten.
    let layout = Layout::new(
        vec![FolderPath::parse("notes").unwrap()],
        vec![FolderPath::parse("docs").unwrap()],
        p("inbox"),
        None,
    );
    let files = [
        ("notes/a.md", "# A\n"),
        ("notes/b.md", "[[notes/a]]\n"),
        ("docs/s.md", "[[notes/a]]\n"),
    ];
    let (_tmp, v) = vault(&files, layout);
    let plan = v.plan_move(&p("notes/a.md"), &p("notes/sub/a2.md")).unwrap();
    let paths: Vec<&str> = plan.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(paths, ["notes/b.md"]);
    assert_eq!(plan[0].new_text, "[[notes/sub/a2]]\n");
}

#[test]
fn nothing_to_rewrite_is_an_empty_plan() {
    let files = [("a.md", "# A\n"), ("b.md", "[[c]]\n"), ("c.md", "")];
    let (_tmp, v) = vault(&files, root_layout());
    assert!(v.plan_move(&p("a.md"), &p("sub/a.md")).unwrap().is_empty());
}

#[test]
fn unplannable_moves_are_refused() {
    let files = [("a.md", "# A\n"), ("b.md", "[[a]]\n"), ("inbox/x.md", "")];
    let (_tmp, v) = vault(&files, root_layout());
    let code = |from: &str, to: &str| v.plan_move(&p(from), &p(to)).unwrap_err().code();
    assert_eq!(code("missing.md", "x.md"), ErrorCode::NOT_FOUND);
    assert_eq!(code("a.md", "inbox/a.md"), ErrorCode::PATH_DENIED);
    assert_eq!(code("a.md", ".git/a.md"), ErrorCode::PATH_DENIED);
    assert_eq!(code("inbox/x.md", "x.md"), ErrorCode::PATH_DENIED);
    assert_eq!(code("a.md", "a.txt"), ErrorCode::PATH_DENIED);
    // A wiki link cannot name a file with `#` in it: refused rather than broken.
    assert_eq!(code("a.md", "a#1.md"), ErrorCode::INVALID_ARGUMENT);
}

#[test]
fn plan_then_write_leaves_every_link_resolving() {
    use vault::write::{Area, WriteMode};
    let files = [
        ("z/attention.md", ATTENTION),
        ("b/other.md", OTHER),
        ("docs/std.md", "Standard citing [[attention]].\n"),
    ];
    let (tmp, v) = vault(&files, root_layout());
    let (from, to) = (p("z/attention.md"), p("y/new dir/注意力.md"));
    let plan = v.plan_move(&from, &to).unwrap();
    let fs = v.fs();
    let _lock = fs.write_lock().unwrap();
    for r in &plan {
        let (_, base) = fs.read_for_write(Area::Note, &r.path).unwrap().unwrap();
        assert_eq!(base, r.base_hash);
        fs.write_atomic(Area::Note, &r.path, r.new_text.as_bytes(), WriteMode::Replace)
            .unwrap();
    }
    fs.rename(Area::Note, &from, Area::Note, &to).unwrap();
    let related = v.related("y/new dir/注意力.md").unwrap();
    let backlinks: Vec<&str> = related.backlinks.iter().map(|n| n.path.as_str()).collect();
    assert_eq!(backlinks, ["b/other.md", "docs/std.md"]);
    assert!(related.broken_links.is_empty(), "{:?}", related.broken_links);
    let other = v.related("b/other.md").unwrap();
    let broken: Vec<&str> = other.broken_links.iter().map(|b| b.target.as_str()).collect();
    assert_eq!(broken, ["missing"]);
    assert!(Path::new(&tmp.path().join("y/new dir/注意力.md")).is_file());
}
