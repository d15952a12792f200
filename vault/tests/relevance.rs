//! Relevance: a small checked-in corpus (`fixtures/relevance`) with known-item queries (a note's
//! subject; the note is the answer) and topical ones (several notes relevant), scored by hit@5
//! and MRR@10 over the ranked notes. The floors are the levels the ranking reached when it was
//! written, so ranking cannot silently regress; the table printed beside them (`--nocapture`)
//! compares a plain BM25 over words and the old path order.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::time::Duration;

use policy::{FolderPath, Layout, VaultPath};
use vault::{ContentQuery, Match, Vault};

fn fixture() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/relevance"))
}

fn copy(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&dst).unwrap();
            copy(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}

/// A query and the notes relevant to it.
type Judged = Vec<(String, Vec<String>)>;

/// The known-item and the topical queries.
fn queries() -> (Judged, Judged) {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture().join("queries.json")).unwrap()).unwrap();
    let known = v["known_item"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            (
                q[0].as_str().unwrap().to_owned(),
                vec![q[1].as_str().unwrap().to_owned()],
            )
        })
        .collect();
    let topical = v["topical"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            let rel = q[1]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap().to_owned())
                .collect();
            (q[0].as_str().unwrap().to_owned(), rel)
        })
        .collect();
    (known, topical)
}

/// hit@5 and MRR@10 of rankings (notes best first) against the relevant sets.
fn metrics(ranked: &[Vec<String>], relevant: &[Vec<String>]) -> (f64, f64) {
    let n = ranked.len() as f64;
    let mut hit5 = 0.0;
    let mut mrr = 0.0;
    for (r, rel) in ranked.iter().zip(relevant) {
        if let Some(k) = r.iter().take(10).position(|p| rel.contains(p)) {
            mrr += 1.0 / (k + 1) as f64;
            if k < 5 {
                hit5 += 1.0;
            }
        }
    }
    (hit5 / n, mrr / n)
}

fn ranked_notes(v: &Vault, q: &str, mode: Match) -> Vec<String> {
    let hits = v
        .search_content(&ContentQuery {
            query: q.to_owned(),
            mode,
            per_note: Some(1),
            limit: Some(200),
            ..ContentQuery::default()
        })
        .unwrap()
        .hits;
    hits.into_iter().map(|h| h.path).collect()
}

/// Plain BM25 over lowercase words (OR over the query's words, no field weights): the usual
/// baseline of the search servers we compared with.
fn bm25_baseline(docs: &[(String, String)], q: &str) -> Vec<String> {
    let words = |s: &str| -> Vec<String> {
        s.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect()
    };
    let tokenized: Vec<Vec<String>> = docs.iter().map(|(_, t)| words(t)).collect();
    let n = docs.len() as f64;
    let avg = tokenized.iter().map(Vec::len).sum::<usize>() as f64 / n;
    let terms: BTreeSet<String> = words(q).into_iter().collect();
    let mut scored: Vec<(f64, &String)> = Vec::new();
    for ((path, _), toks) in docs.iter().zip(&tokenized) {
        let mut s = 0.0;
        for t in &terms {
            let df = tokenized.iter().filter(|d| d.contains(t)).count() as f64;
            let tf = toks.iter().filter(|w| *w == t).count() as f64;
            if tf > 0.0 {
                let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                s += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * toks.len() as f64 / avg));
            }
        }
        if s > 0.0 {
            scored.push((s, path));
        }
    }
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    scored.into_iter().map(|(_, p)| p.clone()).collect()
}

#[test]
fn the_right_note_comes_first() {
    let dir = tempfile::tempdir().unwrap();
    copy(fixture(), dir.path());
    std::fs::remove_file(dir.path().join("queries.json")).unwrap();
    let layout = Layout::new(
        vec![FolderPath::Root],
        vec![],
        VaultPath::parse("inbox").unwrap(),
        None,
    );
    let scan = Vault::open(dir.path(), layout.clone()).unwrap();
    let ix = Vault::open(dir.path(), layout).unwrap();
    ix.refresh_index(false, &mut |_, _| {}).unwrap();
    assert!(ix.wait_index_ready(Duration::ZERO));
    let mut docs: Vec<(String, String)> = Vec::new();
    let mut stack = vec![dir.path().to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir.path()).unwrap().to_string_lossy().into_owned();
                docs.push((rel, std::fs::read_to_string(&p).unwrap()));
            }
        }
    }
    docs.sort();

    let (known, topical) = queries();
    let mut table: HashMap<(&str, &str), (f64, f64)> = HashMap::new();
    for (kind, set) in [("known-item", &known), ("topical", &topical)] {
        let relevant: Vec<Vec<String>> = set.iter().map(|(_, r)| r.clone()).collect();
        for (name, mode) in [("all", Match::All), ("any", Match::Any)] {
            let ranked: Vec<Vec<String>> = set.iter().map(|(q, _)| ranked_notes(&ix, q, mode)).collect();
            // The scan ranks exactly as the index does.
            let scanned: Vec<Vec<String>> = set.iter().map(|(q, _)| ranked_notes(&scan, q, mode)).collect();
            assert_eq!(ranked, scanned, "{kind} {name}");
            table.insert((kind, name), metrics(&ranked, &relevant));
        }
        let base: Vec<Vec<String>> = set.iter().map(|(q, _)| bm25_baseline(&docs, q)).collect();
        table.insert((kind, "bm25"), metrics(&base, &relevant));
        // Path order, as before ranking: the matching notes sorted by path.
        let by_path: Vec<Vec<String>> = set
            .iter()
            .map(|(q, _)| {
                let mut r = ranked_notes(&ix, q, Match::All);
                r.sort();
                r
            })
            .collect();
        table.insert((kind, "path order"), metrics(&by_path, &relevant));
    }
    for kind in ["known-item", "topical"] {
        for how in ["all", "any", "bm25", "path order"] {
            let (h, m) = table[&(kind, how)];
            eprintln!("{kind:10} {how:10} hit@5 {h:.3}  MRR@10 {m:.3}");
        }
    }
    let at_least = |kind, how, h: f64, m: f64| {
        let (gh, gm) = table[&(kind, how)];
        assert!(
            gh >= h && gm >= m,
            "{kind} {how}: hit@5 {gh:.3} MRR@10 {gm:.3}, floor {h} {m}"
        );
    };
    at_least("known-item", "all", FLOORS[0].0, FLOORS[0].1);
    at_least("known-item", "any", FLOORS[1].0, FLOORS[1].1);
    at_least("topical", "all", FLOORS[2].0, FLOORS[2].1);
    at_least("topical", "any", FLOORS[3].0, FLOORS[3].1);
}

/// (hit@5, MRR@10) reached: known-item all, known-item any, topical all, topical any.
const FLOORS: [(f64, f64); 4] = [(1.0, 1.0), (1.0, 1.0), (0.57, 0.57), (1.0, 0.99)];
