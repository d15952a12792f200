//! The index answers exactly what the per-call scan answers: every read tool, on a hand-made vault
//! (CJK, short terms, case folding, frontmatter, links, tags, standards, an unreadable note) and
//! on random vaults with random queries.
#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime};

use policy::{FolderPath, Layout, VaultPath};
use proptest::prelude::*;
use vault::{ContentQuery, Match, Vault};

fn layout() -> Layout {
    Layout::new(
        vec![FolderPath::Root],
        vec![FolderPath::parse("docs").unwrap()],
        VaultPath::parse("inbox").unwrap(),
        None,
    )
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

fn t(hours: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_790_000_000 - hours * 3600)
}

/// A vault opened twice: one handle scans, the other answers from a freshly built index.
fn pair(root: &Path) -> (Vault, Vault) {
    let scan = Vault::open(root, layout()).unwrap();
    let ix = Vault::open(root, layout()).unwrap();
    ix.refresh_index(false, &mut |_, _| {}).unwrap();
    assert!(ix.wait_index_ready(Duration::ZERO), "reads use the index");
    assert!(ix.index_health().fresh);
    (scan, ix)
}

fn query(q: &str, limit: Option<u32>, tags: &[&str], prefix: Option<&str>) -> ContentQuery {
    ContentQuery {
        query: q.to_owned(),
        mode: Match::All,
        per_note: None,
        limit,
        tags: tags.iter().map(|s| (*s).to_owned()).collect(),
        path_prefix: prefix.map(str::to_owned),
    }
}

/// Every read tool, compared as JSON (errors by code).
fn assert_same_answers(scan: &Vault, ix: &Vault, queries: &[String], notes: &[String]) {
    fn j<T: serde::Serialize>(r: Result<T, vault::VaultError>) -> String {
        match r {
            Ok(v) => serde_json::to_string(&v).unwrap(),
            Err(e) => format!("error {}", e.code()),
        }
    }
    for q in queries {
        for (limit, tags, prefix) in [
            (None, &[][..], None),
            (Some(1), &[][..], None),
            (Some(3), &[][..], None),
            (Some(200), &["ml"][..], None),
            (None, &[][..], Some("z")),
            (Some(2), &["#Paper"][..], Some(".")),
        ] {
            for (mode, per_note) in [
                (Match::All, None),
                (Match::Any, None),
                (Match::All, Some(1)),
                (Match::Any, Some(50)),
            ] {
                let cq = ContentQuery {
                    mode,
                    per_note,
                    ..query(q, limit, tags, prefix)
                };
                assert_eq!(
                    j(scan.search_content(&cq)),
                    j(ix.search_content(&cq)),
                    "search_content {cq:?}"
                );
            }
        }
        for (tags, limit) in [(&[][..], None), (&["ml"][..], Some(2))] {
            let tags: Vec<String> = tags.iter().map(|s| (*s).to_owned()).collect();
            assert_eq!(
                j(scan.search_knowledge(q, &tags, limit)),
                j(ix.search_knowledge(q, &tags, limit)),
                "search_knowledge {q:?} {tags:?} {limit:?}"
            );
        }
    }
    for n in notes {
        assert_eq!(j(scan.related(n)), j(ix.related(n)), "related {n}");
    }
    assert_eq!(j(scan.list_tags()), j(ix.list_tags()));
    assert_eq!(j(scan.list_standards()), j(ix.list_standards()));
    assert_eq!(j(scan.counts()), j(ix.counts()));
    assert_eq!(scan.note_count(), ix.note_count());
    for (limit, since) in [
        (None, None),
        (Some(2), None),
        (Some(200), Some("2026-09-21T00:00:00Z")),
    ] {
        assert_eq!(
            j(scan.recent(limit, since)),
            j(ix.recent(limit, since)),
            "recent {limit:?} {since:?}"
        );
    }
}

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
ΟΔΟΣ and Straße and İstanbul; a line with \"quotes\" and ${{x}}.
";

fn hand_made(root: &Path) -> Vec<String> {
    let files: Vec<(&str, String)> = vec![
        ("z/attention.md", ATTENTION.to_owned()),
        (
            "z/transformers.md",
            "---\ntags: ml\n---\n# Transformers\nBuilt on [[attention]] #deep-learning\nThe Q K V matrices.\n"
                .to_owned(),
        ),
        ("z/rnn.md", "# RNN\nRecurrent nets predate attention. #ML #读书\n".to_owned()),
        ("zz/other.md", "# Other\nattention here too\n注意力 again\nοδος σ ς\n".to_owned()),
        ("maps/index.md", "---\ntags: [MOC]\n---\n# Index\n[[z/attention.md]]\n".to_owned()),
        ("MOC Machine Learning.md", "# ML map\n- [[attention]]\n- [[transformers]]\n".to_owned()),
        (
            "docs/style.md",
            "---\ntitle: Style Guide\ndescription: How we write\n---\nUse the attention budget wisely.\n"
                .to_owned(),
        ),
        ("docs/naming.md", "# Naming\nNo description.\n".to_owned()),
        ("long.md", format!("# Long\n{}注意力{}\n", "字".repeat(300), "尾".repeat(197))),
        ("code.md", "# Code\n```text\n[[Fenced]] #fenced attention\n```\n`[[inline]]` x\n".to_owned()),
        ("crlf.md", "# CRLF\r\nline two attention\r\nab\r\n".to_owned()),
        ("my note.md", "# Spaces\n[back](z/attention.md) [[RNN]]\n".to_owned()),
        ("inbox/new/draft.md", "# Draft\nattention 注意力 draft [[attention]] #inboxonly\n".to_owned()),
        (".obsidian/secret.md", "attention #hidden\n".to_owned()),
        ("readme.txt", "attention in a text file\n".to_owned()),
    ];
    for (i, (path, text)) in files.iter().enumerate() {
        write(root, path, text.as_bytes(), t(i as u64));
    }
    // In the catalog, but not text: counted, never searched.
    write(root, "binary.md", &[0xff, 0xfe, b'a', b't', b't'], t(20));
    files
        .iter()
        .map(|(p, _)| (*p).to_owned())
        .chain(["binary.md".to_owned(), "nope.md".to_owned()])
        .collect()
}

#[test]
fn every_read_tool_answers_as_the_scan_does() {
    let dir = tempfile::tempdir().unwrap();
    let notes = hand_made(dir.path());
    let (scan, ix) = pair(dir.path());
    let queries: Vec<String> = [
        "attention",
        "ATTENTION",
        "注意力",
        "注意",
        "力",
        "q",
        "Q K",
        "ab",
        "attention 注意力",
        "\"relates positions\"",
        "\"positions relates\"",
        "paper",
        "ml",
        "#ml",
        "#",
        "ΟΔΟΣ",
        "οδοσ",
        "ς",
        "straße",
        "i̇stanbul",
        "\"quotes\"",
        "${{",
        "attention nowhere-to-be-found",
        "draft",
        "hidden",
        "transformer",
        "line two",
        "   ",
        "字",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    assert_same_answers(&scan, &ix, &queries, &notes);
}

#[test]
fn the_index_is_really_used_it_answers_from_the_stored_body() {
    // An edit that keeps size and time (only a cache can miss it) shows which path answered.
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.md", b"# A\nalpha\n", t(1));
    let (scan, ix) = pair(dir.path());
    write(dir.path(), "a.md", b"# A\nomega\n", t(1));
    let q = query("alpha", None, &[], None);
    assert!(scan.search_content(&q).unwrap().hits.is_empty());
    assert_eq!(ix.search_content(&q).unwrap().hits.len(), 1);
}

#[test]
fn a_changed_file_is_read_again_by_the_exact_step() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.md", b"# A\nalpha beta\n", t(1));
    let (scan, ix) = pair(dir.path());
    // Same candidates (both terms still there), other lines: the exact step reads the file.
    write(dir.path(), "a.md", b"# A\n\nbeta\nalpha\n", t(2));
    let q = query("alpha beta", None, &[], None);
    // The lines are the file's; the score's statistics (the vault's mean note length) are the
    // index's until the watcher catches up, so the score may differ by that.
    let lines = |v: &Vault| -> Vec<(String, usize, String)> {
        let hits = v.search_content(&q).unwrap().hits;
        hits.into_iter().map(|h| (h.path, h.line, h.snippet)).collect()
    };
    assert_eq!(lines(&ix), lines(&scan));
    assert_eq!(
        lines(&ix),
        [
            ("a.md".to_owned(), 3, "beta".to_owned()),
            ("a.md".to_owned(), 4, "alpha".to_owned())
        ]
    );
}

// ---- random vaults -----------------------------------------------------------------------------

/// Characters chosen to stress folding and n-grams: ASCII in both cases, CJK, Greek sigma forms,
/// a character whose lowercase is two characters, punctuation, spaces and line breaks.
const ALPHABET: &[&str] = &[
    "a",
    "b",
    "c",
    "A",
    "B",
    "ab",
    "abc",
    "注",
    "意",
    "力",
    "注意力",
    "Σ",
    "σ",
    "ς",
    "İ",
    "i",
    " ",
    " ",
    "\n",
    "\n",
    "#",
    "#t",
    "#T",
    "[[n1]]",
    "[[N2|x]]",
    "[x](n3.md)",
    "-",
    "\"",
    "\t",
    "\r\n",
];

fn text_strategy() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(ALPHABET), 0..60).prop_map(|parts| parts.concat())
}

/// A query term taken from the vault's own text: `(file, start, length, upper-cased)`.
type TermPick = (prop::sample::Index, prop::sample::Index, usize, bool);

fn term_strategy() -> impl Strategy<Value = TermPick> {
    (
        any::<prop::sample::Index>(),
        any::<prop::sample::Index>(),
        1usize..6,
        any::<bool>(),
    )
}

fn pick_term(files: &[(&str, String, u64)], (f, at, len, upper): &TermPick) -> String {
    let chars: Vec<char> = files[f.index(files.len())].1.chars().collect();
    if chars.is_empty() {
        return "a".to_owned();
    }
    let start = at.index(chars.len());
    let s: String = chars[start..(start + len).min(chars.len())].iter().collect();
    if *upper { s.to_uppercase() } else { s }
}

const NAMES: &[&str] = &[
    "n1.md",
    "N2.md",
    "n3.md",
    "d/n1.md",
    "docs/s.md",
    "z/x.md",
    "z/注.md",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn random_vaults_and_queries_answer_as_the_scan_does(
        files in prop::collection::vec((prop::sample::select(NAMES), text_strategy(), 0u64..5), 1..7),
        picks in prop::collection::vec(prop::collection::vec(term_strategy(), 1..3), 1..8),
    ) {
        let dir = tempfile::tempdir().unwrap();
        for (name, text, age) in &files {
            write(dir.path(), name, text.as_bytes(), t(*age));
        }
        let (scan, ix) = pair(dir.path());
        let terms: Vec<Vec<String>> = picks
            .iter()
            .map(|ts| ts.iter().map(|p| pick_term(&files, p)).collect())
            .collect();
        let queries: Vec<String> = terms
            .iter()
            .map(|ts| ts.iter().map(|t| format!("\"{t}\"")).collect::<Vec<_>>().join(" "))
            .chain(terms.iter().map(|ts| ts.join(" ")))
            .collect();
        let notes: Vec<String> = NAMES.iter().map(|s| (*s).to_owned()).collect();
        assert_same_answers(&scan, &ix, &queries, &notes);
    }
}

// ---- the bounded path: many candidates ---------------------------------------------------------

/// Notes holding the terms 0–20 times each, of many lengths, some in titles and headings: more
/// candidates than the index judges without asking for levels, so the index reads only the notes
/// whose bound can still enter the page. The answer must still be the scan's, page for page.
#[test]
fn many_candidates_rank_as_the_scan_does_page_for_page() {
    let dir = tempfile::tempdir().unwrap();
    let mut seed = 7u64;
    let mut next = |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    let words = ["lighthouse", "orchard", "lantern", "harbor", "注意力", "x"];
    for i in 0..400 {
        let mut body = String::new();
        if next(10) == 0 {
            body.push_str(&format!("# About the {}\n", words[next(6) as usize]));
        }
        for _ in 0..next(30) {
            let w = words[next(6) as usize];
            let filler = "filler text ".repeat(next(8) as usize);
            body.push_str(&format!("{filler}{w} {}\n", if next(3) == 0 { w } else { "and" }));
        }
        let title = if next(15) == 0 {
            "Lighthouse keeping"
        } else {
            "Note"
        };
        write(
            dir.path(),
            &format!("n/{i:03}.md"),
            format!("---\ntitle: {title} {i}\n---\n{body}").as_bytes(),
            t(1),
        );
    }
    let (scan, ix) = pair(dir.path());
    for q in [
        "lighthouse",
        "lighthouse orchard",
        "harbor 注意力",
        "x lantern",
        "lantern harbor orchard",
    ] {
        for mode in [Match::All, Match::Any] {
            for limit in [Some(1), Some(7), None] {
                let cq = ContentQuery {
                    mode,
                    ..query(q, limit, &[], None)
                };
                // Every page, as the cursor walks: the scan's and the index's are the same.
                let (mut from_s, mut from_i) = (vault::SearchPage::default(), vault::SearchPage::default());
                for _ in 0..8 {
                    let (a, na) = scan.search_content_page(&cq, &from_s).unwrap();
                    let (b, nb) = ix.search_content_page(&cq, &from_i).unwrap();
                    assert_eq!(
                        serde_json::to_string(&a).unwrap(),
                        serde_json::to_string(&b).unwrap(),
                        "{cq:?}"
                    );
                    assert_eq!(na, nb, "{cq:?}");
                    match na {
                        Some(n) => {
                            from_s.from = n.clone();
                            from_i.from = n;
                        }
                        None => break,
                    }
                }
            }
        }
    }
}

/// SECURITY(T-PAGE2): a spent budget stops the index between its level lists and its notes: the
/// answer is what was ranked, `truncated`, without a position to continue from.
#[test]
fn a_spent_budget_answers_ranked_and_truncated_without_a_cursor() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..300 {
        write(
            dir.path(),
            &format!("n/{i:03}.md"),
            format!("# N {i}\nlighthouse lantern {}\n", "lighthouse ".repeat(i % 5)).as_bytes(),
            t(1),
        );
    }
    let (_scan, ix) = pair(dir.path());
    let spent = vault::SearchPage {
        from: vault::SearchPos::default(),
        budget: Some(Duration::ZERO),
    };
    let q = ContentQuery {
        mode: Match::Any,
        ..query("lighthouse lantern", None, &[], None)
    };
    let (hits, next) = ix.search_content_page(&q, &spent).unwrap();
    assert!(hits.truncated && next.is_none(), "{hits:?}");
    assert!(
        !hits.hits.is_empty() && hits.hits.len() <= 3,
        "one note judged: {hits:?}"
    );
    let (all, _) = ix.search_content_page(&q, &vault::SearchPage::default()).unwrap();
    assert_eq!(all.hits.len(), 60);
}

/// In a large vault a term in every note (or one too short to narrow) weighs nothing: every
/// score rounds to 0, the ranking is path order, and the index stops after the page instead of
/// judging every note. It must still answer what the scan answers, page for page.
#[test]
fn terms_in_every_note_rank_by_path_as_the_scan_does() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..7000 {
        let extra = if i % 7 == 0 { "x common x\n" } else { "" };
        write(
            dir.path(),
            &format!("n/{i:04}.md"),
            format!("# N{i}\ncommon x {i}\n{extra}").as_bytes(),
            t(1),
        );
    }
    let (scan, ix) = pair(dir.path());
    for q in ["x", "common", "common x"] {
        let cq = query(q, Some(5), &[], None);
        let (mut from_s, mut from_i) = (vault::SearchPage::default(), vault::SearchPage::default());
        for page in 0..2 {
            let (a, na) = scan.search_content_page(&cq, &from_s).unwrap();
            let (b, nb) = ix.search_content_page(&cq, &from_i).unwrap();
            assert_eq!(
                serde_json::to_string(&a).unwrap(),
                serde_json::to_string(&b).unwrap(),
                "{q} page {page}"
            );
            assert!(b.hits.iter().all(|h| h.score == 0), "{b:?}");
            assert!(b.truncated && nb.is_some());
            assert_eq!(na, nb);
            from_s.from = na.unwrap();
            from_i.from = nb.unwrap();
        }
    }
}
