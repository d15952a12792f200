//! The catalog's scope with a non-default layout: notes and standards only, readable folders only.
#![allow(clippy::unwrap_used)]

use std::fs;

use policy::{ErrorCode, FolderPath, Layout, VaultPath};
use serde_json::json;
use vault::{ContentQuery, Vault};

fn vault() -> (tempfile::TempDir, Vault) {
    let dir = tempfile::tempdir().unwrap();
    let files: &[(&str, &str)] = &[
        ("notes/a.md", "# A\n[[b]] [[c]] [b again](sub/b.md)\n"),
        ("notes/sub/b.md", "# B\nneedle\n"),
        (
            "notes/crlf.md",
            "---\r\ntitle: [broken\r\n---\r\nline four needle \r\n#crlf-tag\r\n",
        ),
        ("other/c.md", "# C\nneedle\n"),
        (
            "docs/s.md",
            "---\ndescription: A rule\n---\n# S\nSee [[b]]. needle\n",
        ),
        ("inbox/x.md", "# X\nneedle [[b]]\n"),
    ];
    for (path, text) in files {
        let p = dir.path().join(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }
    let layout = Layout::new(
        vec![FolderPath::parse("notes").unwrap()],
        vec![FolderPath::parse("docs").unwrap()],
        VaultPath::parse("inbox").unwrap(),
        None,
    );
    let v = Vault::open(dir.path(), layout).unwrap();
    (dir, v)
}

#[test]
fn catalog_covers_notes_and_standards_only() {
    let (_d, v) = vault();
    assert_eq!(
        serde_json::to_value(v.counts().unwrap()).unwrap(),
        json!({"notes": 3, "standards": 1, "tags": 1})
    );
    assert_eq!(v.note_count(), 3);
    let q = ContentQuery {
        query: "NEEDLE".to_owned(),
        ..ContentQuery::default()
    };
    let mut hits: Vec<(String, usize, String)> = v
        .search_content(&q)
        .unwrap()
        .hits
        .into_iter()
        .map(|h| (h.path, h.line, h.snippet))
        .collect();
    // Which notes, not their rank (the shortest note holding the term ranks first).
    assert_eq!(hits[0].0, "notes/sub/b.md");
    hits.sort();
    assert_eq!(
        hits,
        [
            ("docs/s.md".to_owned(), 5, "See [[b]]. needle".to_owned()),
            ("notes/crlf.md".to_owned(), 4, "line four needle".to_owned()),
            ("notes/sub/b.md".to_owned(), 2, "needle".to_owned()),
        ]
    );
}

#[test]
fn unreadable_folders_are_invisible() {
    let (_d, v) = vault();
    assert_eq!(
        v.read_note("other/c.md").unwrap_err().code(),
        ErrorCode::PATH_DENIED
    );
    let root: Vec<String> = v
        .list_notes(None, None)
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.path)
        .collect();
    assert_eq!(root, ["docs", "inbox", "notes"]);
}

#[test]
fn links_into_unreadable_folders_are_broken_and_standards_backlink() {
    let (_d, v) = vault();
    assert_eq!(
        serde_json::to_value(v.related("notes/a.md").unwrap()).unwrap(),
        json!({
            "outlinks": [{"path": "notes/sub/b.md", "title": "B"}],
            "backlinks": [],
            "brokenLinks": [{"target": "c", "line": 2}],
            "mocs": [],
            "counts": {"outlinks": 1, "backlinks": 0, "brokenLinks": 1, "mocs": 0},
            "truncated": false,
        })
    );
    let b = v.related("notes/sub/b.md").unwrap();
    let back: Vec<String> = b.backlinks.into_iter().map(|n| n.path).collect();
    assert_eq!(back, ["docs/s.md", "notes/a.md"]);
}

#[test]
fn invalid_yaml_is_no_frontmatter_and_crlf_lines_count() {
    let (_d, v) = vault();
    let n = v.read_note("notes/crlf.md").unwrap();
    assert_eq!(n.title, "crlf");
    assert!(n.frontmatter.as_ref().is_some_and(serde_json::Map::is_empty));
    let tags = serde_json::to_value(v.list_tags().unwrap()).unwrap();
    assert_eq!(
        tags,
        json!({"tags": [{"name": "crlf-tag", "count": 1}], "truncated": false})
    );
    let std = serde_json::to_value(v.list_standards().unwrap()).unwrap();
    assert_eq!(
        std,
        json!({"standards": [{"path": "docs/s.md", "title": "S", "description": "A rule"}], "truncated": false, "count": 1})
    );
}
