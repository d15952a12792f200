//! The reader's link extraction and a move's link rewrites use one scanner: on a document full
//! of traps they see exactly the same links, and the rewrite touches only those.
#![allow(clippy::unwrap_used)]

use policy::{FolderPath, Layout, VaultPath};
use vault::Vault;
use vault::links::{LinkKind, scan_text};
use vault::note::Note;

const TRICKY: &str = r#"---
title: "[[not a link]]"
related: "[x](a.md)"
---
# Tricky 注意
Wiki [[a]] alias [[a|the A]] heading [[a#Head]] embed ![[a]] md [text](a.md) cjk [[注意力]] [注](注意力.md).
Inline `[[a]]` and `` [x](a.md) `` stay code; escaped \[\[a\]\] is text, \[[a]] is a link.
```md
[[a]] in a fence
```
~~~
[z](a.md)
~~~
| table | [[a\|alias]] |
Nested [[x [[a]] broken [[missing]] web [w](https://e.com/a.md) self [[#local]] <[[a#h|l]]>
"#;

fn p(s: &str) -> VaultPath {
    VaultPath::parse(s).unwrap()
}

#[test]
fn reader_and_rewrite_scanner_see_the_same_links() {
    use LinkKind::*;
    let reader: Vec<(LinkKind, String, usize)> = Note::parse(TRICKY, "tricky")
        .links
        .into_iter()
        .map(|l| (l.kind, l.target, l.line))
        .collect();
    let scanned = scan_text(TRICKY);
    let scanner: Vec<(LinkKind, String, usize)> = scanned
        .iter()
        .map(|l| (l.kind, l.target.clone(), l.line))
        .collect();
    assert_eq!(reader, scanner);
    let expected: Vec<(LinkKind, String, usize)> = [
        (Wiki, "a", 6),
        (Wiki, "a", 6),
        (Wiki, "a#Head", 6),
        (Embed, "a", 6),
        (Markdown, "a.md", 6),
        (Wiki, "注意力", 6),
        (Markdown, "注意力.md", 6),
        (Wiki, "a", 7),
        (Wiki, "a", 14),
        (Wiki, "a", 15),
        (Wiki, "missing", 15),
        (Wiki, "a#h", 15),
    ]
    .into_iter()
    .map(|(k, t, n)| (k, t.to_owned(), n))
    .collect();
    assert_eq!(reader, expected);
    // The spans name the link text itself.
    let files: Vec<&str> = scanned.iter().map(|l| &TRICKY[l.file.clone()]).collect();
    assert_eq!(
        files,
        [
            "a",
            "a",
            "a",
            "a",
            "a.md",
            "注意力",
            "注意力.md",
            "a",
            "a",
            "a",
            "missing",
            "a"
        ]
    );
    let spans: Vec<&str> = scanned.iter().map(|l| &TRICKY[l.span.clone()]).collect();
    assert_eq!(
        &spans[..5],
        ["[[a]]", "[[a|the A]]", "[[a#Head]]", "![[a]]", "a.md"]
    );
    assert_eq!(spans[8], "[[a\\|alias]]");
}

#[test]
fn a_move_rewrites_exactly_the_links_the_reader_sees() {
    let tmp = tempfile::tempdir().unwrap();
    for (path, text) in [
        ("a.md", "# A\n"),
        ("注意力.md", "# 注意力\n"),
        ("tricky.md", TRICKY),
    ] {
        std::fs::write(tmp.path().join(path), text).unwrap();
    }
    let layout = Layout::new(vec![FolderPath::Root], vec![], p("inbox"), None);
    let v = Vault::open(tmp.path(), layout).unwrap();
    let plan = v.plan_move(&p("a.md"), &p("b.md")).unwrap();
    assert_eq!(plan.len(), 1, "{plan:?}");
    let r = &plan[0];
    assert_eq!(r.path, p("tricky.md"));
    // Every link the reader resolves to a.md, and nothing else (not code, frontmatter, escapes).
    let to_a = Note::parse(TRICKY, "tricky")
        .links
        .iter()
        .filter(|l| l.target == "a" || l.target.starts_with("a#") || l.target == "a.md")
        .count();
    assert_eq!(r.count, to_a);
    let expected = TRICKY
        .replace(
            "Wiki [[a]] alias [[a|the A]] heading [[a#Head]] embed ![[a]] md [text](a.md)",
            "Wiki [[b]] alias [[b|the A]] heading [[b#Head]] embed ![[b]] md [text](b.md)",
        )
        .replace("\\[[a]] is a link", "\\[[b]] is a link")
        .replace("[[a\\|alias]]", "[[b\\|alias]]")
        .replace("Nested [[x [[a]]", "Nested [[x [[b]]")
        .replace("<[[a#h|l]]>", "<[[b#h|l]]>");
    assert_eq!(r.new_text, expected);
}
