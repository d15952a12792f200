//! The read API end to end over a fresh temporary vault: exact outputs of every call.
#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime};

use policy::{ErrorCode, FolderPath, Layout, VaultPath};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use vault::{ContentQuery, Vault, VaultError};

const T0: &str = "2026-11-29T20:31:47Z";

const ATTENTION: &str = "---
title: Attention Is All You Need
aliases: [Transformer paper]
description: Notes on self-attention
tags: [ml, paper]
---
# Attention

Self-attention relates positions. 注意力机制 is the Chinese term.
See [[Transformers]] and [[Missing Note|label]].
Also [[z/rnn#History]] and ![[diagram.png]] and [gone](../gone.md).
";

fn long_line() -> String {
    format!("{}注意力{}", "字".repeat(300), "尾".repeat(197))
}

/// (path, content, hours before T0 for the mtime)
fn files() -> Vec<(&'static str, String, i64)> {
    vec![
        ("z/attention.md", ATTENTION.to_owned(), 0),
        (
            "z/transformers.md",
            "---\ntags: ml\n---\n# Transformers\nBuilt on [[attention]] #deep-learning\nThe Q K V matrices.\n"
                .to_owned(),
            1,
        ),
        ("z/rnn.md", "# RNN\nRecurrent nets predate attention. #ML #读书\n".to_owned(), 2),
        ("zz/other.md", "# Other\nattention here too\n注意力 again\n".to_owned(), 3),
        ("maps/index.md", "---\ntags: [MOC]\n---\n# Index\n[[z/attention.md]]\n".to_owned(), 4),
        ("MOC Machine Learning.md", "# ML map\n- [[attention]]\n- [[transformers]]\n".to_owned(), 5),
        (
            "docs/style.md",
            "---\ntitle: Style Guide\ndescription: How we write\n---\nUse the attention budget wisely.\n"
                .to_owned(),
            6,
        ),
        ("docs/naming.md", "# Naming\nNo description.\n".to_owned(), 7),
        ("long.md", format!("# Long\n{}\n", long_line()), 8),
        ("code.md", "# Code\n```text\n[[Fenced]] #fenced attention\n```\n`[[inline]]` x\n".to_owned(), 9),
        ("inbox/new/draft.md", "# Draft\nattention 注意力 draft [[attention]] #inboxonly\n".to_owned(), -1),
        (".obsidian/secret.md", "attention #hidden\n".to_owned(), 0),
        ("readme.txt", "attention in a text file\n".to_owned(), 0),
    ]
}

fn t0() -> SystemTime {
    SystemTime::from(OffsetDateTime::parse(T0, &Rfc3339).unwrap())
}

fn hours_before(h: i64) -> SystemTime {
    let d = Duration::from_secs(h.unsigned_abs() * 3600);
    if h >= 0 { t0() - d } else { t0() + d }
}

fn write(root: &Path, rel: &str, bytes: &[u8], modified: SystemTime) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(&p, bytes).unwrap();
    fs::File::options()
        .write(true)
        .open(&p)
        .unwrap()
        .set_modified(modified)
        .unwrap();
}

fn layout() -> Layout {
    Layout::new(
        vec![FolderPath::Root],
        vec![FolderPath::parse("docs").unwrap()],
        VaultPath::parse("inbox").unwrap(),
        None,
    )
}

fn vault() -> (tempfile::TempDir, Vault) {
    let dir = tempfile::tempdir().unwrap();
    for (path, content, h) in files() {
        write(dir.path(), path, content.as_bytes(), hours_before(h));
    }
    write(dir.path(), "assets/pic.png", &[0x89, 0x50, 0xff, 0xfe], t0());
    let v = Vault::open(dir.path(), layout()).unwrap();
    (dir, v)
}

fn code<T: std::fmt::Debug>(r: Result<T, VaultError>) -> ErrorCode {
    r.unwrap_err().code()
}

fn to_json<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap()
}

fn search(query: &str) -> ContentQuery {
    ContentQuery {
        query: query.to_owned(),
        ..ContentQuery::default()
    }
}

/// (path, line, score) of each hit.
fn hits(v: &Vault, q: &ContentQuery) -> Vec<(String, usize, usize)> {
    v.search_content(q)
        .unwrap()
        .hits
        .into_iter()
        .map(|h| (h.path, h.line, h.score))
        .collect()
}

#[test]
fn read_note_returns_the_whole_file_with_metadata() {
    let (_d, v) = vault();
    let got = to_json(&v.read_note("z/attention.md").unwrap());
    assert_eq!(
        got,
        json!({
            "path": "z/attention.md",
            "title": "Attention Is All You Need",
            "frontmatter": {
                "title": "Attention Is All You Need",
                "aliases": ["Transformer paper"],
                "description": "Notes on self-attention",
                "tags": ["ml", "paper"],
            },
            "content": ATTENTION,
            "hash": hex::encode(Sha256::digest(ATTENTION.as_bytes())),
            "bytes": ATTENTION.len(),
            "modified": T0,
        })
    );
    // No frontmatter: `{}`, title from the heading; the inbox is readable.
    let draft = v.read_note("inbox/new/draft.md").unwrap();
    assert_eq!(draft.frontmatter, Some(serde_json::Map::new()));
    assert_eq!(draft.title, "Draft");
    assert_eq!(to_json(&draft)["frontmatter"], json!({}));
}

#[test]
fn read_note_refusals() {
    let (_d, v) = vault();
    assert_eq!(code(v.read_note("z")), ErrorCode::NOT_FOUND);
    assert_eq!(code(v.read_note("z/none.md")), ErrorCode::NOT_FOUND);
    assert_eq!(code(v.read_note("../outside.md")), ErrorCode::PATH_INVALID);
    assert_eq!(code(v.read_note("")), ErrorCode::PATH_INVALID);
    assert_eq!(code(v.read_note(".obsidian/secret.md")), ErrorCode::PATH_DENIED);
    assert_eq!(code(v.read_note("assets/pic.png")), ErrorCode::NOT_TEXT);
}

#[test]
fn list_notes_lists_one_level_folders_first() {
    let (_d, v) = vault();
    assert_eq!(
        to_json(&v.list_notes(None, None).unwrap()),
        json!({
            "entries": [
                {"path": "assets", "kind": "folder"},
                {"path": "docs", "kind": "folder"},
                {"path": "inbox", "kind": "folder"},
                {"path": "maps", "kind": "folder"},
                {"path": "z", "kind": "folder"},
                {"path": "zz", "kind": "folder"},
                {"path": "MOC Machine Learning.md", "kind": "note", "title": "ML map"},
                {"path": "code.md", "kind": "note", "title": "Code"},
                {"path": "long.md", "kind": "note", "title": "Long"},
                {"path": "readme.txt", "kind": "file"},
            ],
            "truncated": false,
        })
    );
    assert_eq!(
        v.list_notes(Some("."), None).unwrap(),
        v.list_notes(Some(""), None).unwrap()
    );
    let z = v.list_notes(Some("z"), Some(2)).unwrap();
    assert_eq!(
        to_json(&z),
        json!({
            "entries": [
                {"path": "z/attention.md", "kind": "note", "title": "Attention Is All You Need"},
                {"path": "z/rnn.md", "kind": "note", "title": "RNN"},
            ],
            "truncated": true,
        })
    );
    let inbox = v.list_notes(Some("inbox/new/"), None).unwrap();
    assert_eq!(inbox.entries.len(), 1);
    assert_eq!(inbox.entries[0].title.as_deref(), Some("Draft"));
}

#[test]
fn list_notes_refusals() {
    let (_d, v) = vault();
    assert_eq!(code(v.list_notes(None, Some(0))), ErrorCode::INVALID_ARGUMENT);
    assert_eq!(code(v.list_notes(None, Some(501))), ErrorCode::INVALID_ARGUMENT);
    assert!(v.list_notes(None, Some(500)).is_ok());
    assert_eq!(code(v.list_notes(Some("nope"), None)), ErrorCode::NOT_FOUND);
    assert_eq!(
        code(v.list_notes(Some("z/attention.md"), None)),
        ErrorCode::NOT_FOUND
    );
    assert_eq!(
        code(v.list_notes(Some(".obsidian"), None)),
        ErrorCode::PATH_DENIED
    );
    assert_eq!(code(v.list_notes(Some("../x"), None)), ErrorCode::PATH_INVALID);
}

#[test]
fn list_standards_with_titles_and_descriptions() {
    let (_d, v) = vault();
    assert_eq!(
        to_json(&v.list_standards().unwrap()),
        json!({"standards": [
            {"path": "docs/naming.md", "title": "Naming", "description": ""},
            {"path": "docs/style.md", "title": "Style Guide", "description": "How we write"},
        ], "truncated": false, "count": 2})
    );
}

#[test]
fn list_tags_counts_notes_case_insensitively_without_inbox_or_code() {
    let (_d, v) = vault();
    assert_eq!(
        to_json(&v.list_tags().unwrap()),
        json!({"tags": [
            {"name": "ml", "count": 3},
            {"name": "deep-learning", "count": 1},
            {"name": "MOC", "count": 1},
            {"name": "paper", "count": 1},
            {"name": "读书", "count": 1},
        ], "truncated": false})
    );
}

#[test]
fn counts_and_note_count_leave_out_standards_and_inbox() {
    let (_d, v) = vault();
    assert_eq!(
        to_json(&v.counts().unwrap()),
        json!({"notes": 8, "standards": 2, "tags": 5})
    );
    assert_eq!(v.note_count(), 8);
}

#[test]
fn related_notes_outlinks_backlinks_broken_links_and_mocs() {
    let (_d, v) = vault();
    assert_eq!(
        to_json(&v.related("z/attention.md").unwrap()),
        json!({
            "outlinks": [
                {"path": "z/rnn.md", "title": "RNN"},
                {"path": "z/transformers.md", "title": "Transformers"},
            ],
            "backlinks": [
                {"path": "MOC Machine Learning.md", "title": "ML map"},
                {"path": "maps/index.md", "title": "Index"},
                {"path": "z/transformers.md", "title": "Transformers"},
            ],
            "brokenLinks": [
                {"target": "Missing Note", "line": 10},
                {"target": "../gone.md", "line": 11},
            ],
            "mocs": [
                {"path": "MOC Machine Learning.md", "title": "ML map"},
                {"path": "maps/index.md", "title": "Index"},
            ],
            "truncated": false,
            "counts": {"outlinks": 2, "backlinks": 3, "brokenLinks": 2, "mocs": 2},
        })
    );
    // Links in code are not links; nothing links to it.
    assert_eq!(
        to_json(&v.related("code.md").unwrap()),
        json!({"outlinks": [], "backlinks": [], "brokenLinks": [], "mocs": [], "truncated": false,
            "counts": {"outlinks": 0, "backlinks": 0, "brokenLinks": 0, "mocs": 0}})
    );
    assert_eq!(code(v.related("z/none.md")), ErrorCode::NOT_FOUND);
    assert_eq!(code(v.related("a\\b.md")), ErrorCode::PATH_INVALID);
}

#[test]
fn recent_notes_newest_first_with_since() {
    let (_d, v) = vault();
    assert_eq!(
        to_json(&v.recent(Some(3), None).unwrap()),
        json!({"notes": [
            {"path": "z/attention.md", "title": "Attention Is All You Need", "modified": T0},
            {"path": "z/transformers.md", "title": "Transformers", "modified": "2026-11-29T19:31:47Z"},
            {"path": "z/rnn.md", "title": "RNN", "modified": "2026-11-29T18:31:47Z"},
        ], "truncated": true})
    );
    let since: Vec<String> = v
        .recent(None, Some("2026-11-29T17:31:47Z"))
        .unwrap()
        .notes
        .into_iter()
        .map(|n| n.path)
        .collect();
    assert_eq!(
        since,
        ["z/attention.md", "z/transformers.md", "z/rnn.md", "zz/other.md"]
    );
    assert_eq!(v.recent(None, None).unwrap().notes.len(), 10);
    assert_eq!(
        code(v.recent(None, Some("yesterday"))),
        ErrorCode::INVALID_ARGUMENT
    );
    assert_eq!(code(v.recent(Some(201), None)), ErrorCode::INVALID_ARGUMENT);
    assert_eq!(code(v.recent(Some(0), None)), ErrorCode::INVALID_ARGUMENT);
}

/// (path, line) of each hit.
fn lines(v: &Vault, q: &ContentQuery) -> Vec<(String, usize)> {
    v.search_content(q)
        .unwrap()
        .hits
        .into_iter()
        .map(|h| (h.path, h.line))
        .collect()
}

fn l(path: &str, line: usize) -> (String, usize) {
    (path.to_owned(), line)
}

/// Hits come by note score (non-increasing), each note's hits together, `score` the note's.
fn assert_ranked(got: &[(String, usize, usize)]) {
    for w in got.windows(2) {
        assert!(w[0].2 >= w[1].2, "not ranked: {got:?}");
        if w[0].0 == w[1].0 {
            assert_eq!(w[0].2, w[1].2, "one note, one score: {got:?}");
        }
    }
    let mut notes: Vec<&str> = got.iter().map(|h| h.0.as_str()).collect();
    notes.dedup();
    let mut distinct = notes.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(notes.len(), distinct.len(), "a note's hits are together: {got:?}");
}

#[test]
fn search_content_finds_cjk_and_skips_inbox() {
    let (_d, v) = vault();
    let got = v.search_content(&search("注意力")).unwrap();
    let scored: Vec<(String, usize, usize)> = got
        .hits
        .iter()
        .map(|h| (h.path.clone(), h.line, h.score))
        .collect();
    assert_ranked(&scored);
    // The 500-character line of `long.md` holds the term once: the longest note ranks last.
    assert_eq!(
        lines(&v, &search("注意力")),
        [l("zz/other.md", 3), l("z/attention.md", 9), l("long.md", 2)]
    );
    assert!(!got.truncated);
    assert_eq!(got.hits[1].title, "Attention Is All You Need");
    assert_eq!(
        got.hits[1].snippet,
        "Self-attention relates positions. 注意力机制 is the Chinese term."
    );
    let long = got.hits[2].clone();
    assert_eq!(long.title, "Long");
    // A 500-character line with the term at character 300: a char-safe window of 200 characters.
    let expected = format!("…{}注意力{}…", "字".repeat(97), "尾".repeat(98));
    assert_eq!(long.snippet, expected);
    assert_eq!(long.snippet.chars().count(), 200);
    assert_eq!(long_line().chars().count(), 500);
    // Only the inbox draft says "draft".
    assert!(v.search_content(&search("draft")).unwrap().hits.is_empty());
    assert!(v.search_content(&search("hidden")).unwrap().hits.is_empty());
}

#[test]
fn search_content_one_char_terms_and_case_insensitivity() {
    let (_d, v) = vault();
    assert_eq!(lines(&v, &search("q")), [l("z/transformers.md", 6)]);
    assert_eq!(hits(&v, &search("Q")), hits(&v, &search("q")));
    assert!(hits(&v, &search("q"))[0].2 > 0, "a one-letter term scores too");
    assert_eq!(lines(&v, &search("力")), lines(&v, &search("注意力")));
    assert_eq!(hits(&v, &search("ATTENTION")), hits(&v, &search("attention")));
}

#[test]
fn search_content_is_and_over_terms_ranked_by_note_then_lines_holding_most_terms() {
    let (_d, v) = vault();
    let got = hits(&v, &search("attention 注意力"));
    assert_ranked(&got);
    // At most three lines a note (the default `perNote`), the line holding both terms first.
    assert_eq!(
        got.iter().map(|h| (h.0.clone(), h.1)).collect::<Vec<_>>(),
        [
            l("z/attention.md", 9),
            l("z/attention.md", 2),
            l("z/attention.md", 4),
            l("zz/other.md", 2),
            l("zz/other.md", 3),
        ]
    );
    // The note whose title holds the term ranks above the one that only mentions it.
    assert!(got[0].2 > got[3].2);
    let per_note = |n| ContentQuery {
        per_note: Some(n),
        ..search("attention 注意力")
    };
    assert_eq!(
        lines(&v, &per_note(1)),
        [l("z/attention.md", 9), l("zz/other.md", 2)]
    );
    assert_eq!(lines(&v, &per_note(50)).len(), 6);
    for bad in [0, 51] {
        assert_eq!(
            code(v.search_content(&per_note(bad))),
            ErrorCode::INVALID_ARGUMENT
        );
    }
    // Frontmatter counts; a quoted phrase is one term.
    assert_eq!(
        lines(&v, &search("paper")),
        [l("z/attention.md", 3), l("z/attention.md", 5)]
    );
    assert_eq!(
        lines(&v, &search("\"relates positions\"")),
        [l("z/attention.md", 9)]
    );
    assert!(hits(&v, &search("\"positions relates\"")).is_empty());
    assert!(hits(&v, &search("attention nowhere-to-be-found")).is_empty());
}

#[test]
fn search_content_any_finds_notes_holding_some_terms_the_most_first() {
    let (_d, v) = vault();
    let any = |q: &str| ContentQuery {
        mode: vault::Match::Any,
        ..search(q)
    };
    let got = hits(&v, &any("attention nowhere-to-be-found"));
    assert_eq!(got, hits(&v, &search("attention")));
    let both = hits(&v, &any("注意力 positions"));
    assert_ranked(&both);
    // `z/attention.md` holds both terms: first; the notes holding one follow.
    assert_eq!(both[0].0, "z/attention.md");
    let notes: std::collections::BTreeSet<&str> = both.iter().map(|h| h.0.as_str()).collect();
    let all_of = hits(&v, &search("注意力 positions"));
    assert!(all_of.iter().all(|h| notes.contains(h.0.as_str())));
    assert!(notes.contains("long.md") && notes.contains("zz/other.md"));
    assert!(hits(&v, &any("nowhere-to-be-found elsewhere-neither")).is_empty());
}

#[test]
fn search_content_limit_and_truncated() {
    let (_d, v) = vault();
    let q = ContentQuery {
        limit: Some(2),
        ..search("attention")
    };
    let got = v.search_content(&q).unwrap();
    assert!(got.truncated);
    // The note titled "Attention…" first.
    assert_eq!(
        got.hits.into_iter().map(|h| (h.path, h.line)).collect::<Vec<_>>(),
        [l("z/attention.md", 2), l("z/attention.md", 4)]
    );
    let all = v.search_content(&search("attention")).unwrap();
    assert!(!all.truncated);
    let q = ContentQuery {
        limit: Some(all.hits.len() as u32),
        ..search("attention")
    };
    assert!(!v.search_content(&q).unwrap().truncated);
    for bad in [0, 201] {
        let q = ContentQuery {
            limit: Some(bad),
            ..search("attention")
        };
        assert_eq!(code(v.search_content(&q)), ErrorCode::INVALID_ARGUMENT);
    }
    assert_eq!(
        code(v.search_content(&search(" \t "))),
        ErrorCode::INVALID_ARGUMENT
    );
}

#[test]
fn search_content_tag_and_prefix_filters() {
    let (_d, v) = vault();
    let ml = ContentQuery {
        tags: vec!["ML".to_owned()],
        ..search("attention")
    };
    let expected = [
        l("z/attention.md", 2),
        l("z/attention.md", 4),
        l("z/attention.md", 7),
        l("z/rnn.md", 2),
        l("z/transformers.md", 5),
    ];
    assert_eq!(lines(&v, &ml), expected);
    assert_ranked(&hits(&v, &ml));
    let both = ContentQuery {
        tags: vec!["#paper".to_owned(), "ml".to_owned()],
        ..search("attention")
    };
    assert_eq!(lines(&v, &both), expected[..3]);
    // `z` is a folder prefix by components: `zz/other.md` is not under it.
    let z = ContentQuery {
        path_prefix: Some("z".to_owned()),
        ..search("attention")
    };
    assert_eq!(lines(&v, &z), expected);
    let file = ContentQuery {
        path_prefix: Some("z/rnn.md".to_owned()),
        ..search("attention")
    };
    assert_eq!(lines(&v, &file), [l("z/rnn.md", 2)]);
    let root = ContentQuery {
        path_prefix: Some(".".to_owned()),
        ..search("attention")
    };
    assert_eq!(hits(&v, &root), hits(&v, &search("attention")));
    let bad = ContentQuery {
        path_prefix: Some("../z".to_owned()),
        ..search("attention")
    };
    assert_eq!(code(v.search_content(&bad)), ErrorCode::PATH_INVALID);
    let hidden = ContentQuery {
        path_prefix: Some(".obsidian".to_owned()),
        ..search("attention")
    };
    assert_eq!(code(v.search_content(&hidden)), ErrorCode::PATH_DENIED);
}

#[test]
fn search_knowledge_matches_metadata_with_weights() {
    let (_d, v) = vault();
    assert_eq!(
        to_json(&v.search_knowledge("attention", &[], None).unwrap()),
        json!({"hits": [
            {"path": "z/attention.md", "title": "Attention Is All You Need", "matched": ["title", "description"], "score": 4},
        ], "truncated": false})
    );
    assert_eq!(
        to_json(&v.search_knowledge("TRANSFORMER", &[], None).unwrap()),
        json!({"hits": [
            {"path": "z/transformers.md", "title": "Transformers", "matched": ["title"], "score": 4},
            {"path": "z/attention.md", "title": "Attention Is All You Need", "matched": ["alias"], "score": 3},
        ], "truncated": false})
    );
    let ml: Vec<(String, u32)> = v
        .search_knowledge("ml", &[], None)
        .unwrap()
        .hits
        .into_iter()
        .map(|h| (h.path, h.score))
        .collect();
    assert_eq!(
        ml,
        [
            ("MOC Machine Learning.md".to_owned(), 4),
            ("z/attention.md".to_owned(), 2),
            ("z/rnn.md".to_owned(), 2),
            ("z/transformers.md".to_owned(), 2),
        ]
    );
    let paper = v.search_knowledge("ml", &["paper".to_owned()], Some(1)).unwrap();
    assert_eq!(paper.hits.len(), 1);
    assert_eq!(paper.hits[0].path, "z/attention.md");
    assert_eq!(v.search_knowledge("ml", &[], Some(2)).unwrap().hits.len(), 2);
    assert!(
        v.search_knowledge("attention nowhere", &[], None)
            .unwrap()
            .hits
            .is_empty()
    );
    assert!(v.search_knowledge("draft", &[], None).unwrap().hits.is_empty());
    assert_eq!(
        code(v.search_knowledge("", &[], None)),
        ErrorCode::INVALID_ARGUMENT
    );
    assert_eq!(
        code(v.search_knowledge("x", &[], Some(201))),
        ErrorCode::INVALID_ARGUMENT
    );
}
