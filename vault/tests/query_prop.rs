//! `query_notes` against a brute-force oracle: random vaults of a few thousand notes with typed
//! frontmatter (numbers, dates, strings with CJK and case variants, lists, nulls, missing keys,
//! values of the wrong type) and random queries. The oracle knows what each note was written with
//! (not what any parser made of it) and applies docs/contract.md#notes-as-data-and-attachments's rules itself. Both the index and the
//! scan answer, paged with a random limit.
#![allow(clippy::unwrap_used)]

use std::cmp::Ordering;
use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime};

use policy::{FolderPath, Layout, VaultPath};
use proptest::prelude::*;
use serde_json::{Value, json};
use vault::Vault;
use vault::data::{Condition, QueryOp, QueryPos, QuerySpec, SortOrder, SortSpec};

fn layout() -> Layout {
    Layout::new(
        vec![FolderPath::Root],
        vec![],
        VaultPath::parse("inbox").unwrap(),
        None,
    )
}

/// A value as written, and what it is.
#[derive(Debug, Clone)]
enum M {
    Num(f64, String),
    /// Its instant (seconds) and text.
    Date(i64, String),
    Str(String),
    Bool(bool),
    List(Vec<M>),
    Null,
}

const WORDS: &[&str] = &[
    "read",
    "Read",
    "READ",
    "reading",
    "queue",
    "Queue",
    "注意力",
    "注意",
    "Épée",
    "épée",
    "ΟΔΟΣ",
    "οδος",
    "7",
    "z",
];
const KEYS: &[&str] = &["year", "status", "authors", "due", "score", "flag"];
const TAGS: &[&str] = &["ml", "ML", "project/alpha", "Project", "注意", "nlp"];

/// Days from 1970-01-01 to y-m-d (proleptic Gregorian), by the usual civil algorithm.
fn days(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }
}

fn scalar(r: &mut Rng) -> M {
    match r.below(5) {
        0 => {
            let n = r.below(40) as i64 - 5;
            M::Num(n as f64, n.to_string())
        }
        1 => {
            let x = (r.below(20) as f64) / 4.0;
            M::Num(x, format!("{x:?}"))
        }
        2 => {
            let (y, m, d) = (
                2020 + r.below(3) as i64,
                1 + r.below(12) as i64,
                1 + r.below(28) as i64,
            );
            let day = days(y, m, d) * 86_400;
            match r.below(3) {
                0 => M::Date(day, format!("{y:04}-{m:02}-{d:02}")),
                1 => {
                    let (h, off) = (r.below(24) as i64, r.below(5) as i64 - 2);
                    let sign = if off < 0 { '-' } else { '+' };
                    M::Date(
                        day + h * 3600 - off * 3600,
                        format!("{y:04}-{m:02}-{d:02}T{h:02}:00:00{sign}{:02}:00", off.abs()),
                    )
                }
                _ => M::Date(day + 1800, format!("{y:04}-{m:02}-{d:02}T00:30:00Z")),
            }
        }
        3 => M::Str((*r.pick(WORDS)).to_owned()),
        _ => M::Bool(r.below(2) == 0),
    }
}

fn value(r: &mut Rng) -> M {
    match r.below(10) {
        0 => M::Null,
        1 | 2 => M::List((0..r.below(4)).map(|_| scalar(r)).collect()),
        _ => scalar(r),
    }
}

fn yaml(m: &M) -> String {
    match m {
        M::Num(_, s) => s.clone(),
        M::Date(_, s) | M::Str(s) => format!("\"{s}\""),
        M::Bool(b) => b.to_string(),
        M::List(items) => format!("[{}]", items.iter().map(yaml).collect::<Vec<_>>().join(", ")),
        M::Null => String::new(),
    }
}

fn to_json(m: &M) -> Value {
    match m {
        M::Num(n, s) => s.parse::<i64>().map_or_else(|_| json!(n), |i| json!(i)),
        M::Date(_, s) | M::Str(s) => json!(s),
        M::Bool(b) => json!(b),
        M::List(items) => Value::Array(items.iter().map(to_json).collect()),
        M::Null => Value::Null,
    }
}

/// One note as the oracle knows it.
#[derive(Debug)]
struct N {
    path: String,
    title: String,
    tags: Vec<String>,
    fields: Vec<(String, M)>,
    mtime: i64,
    bytes: u64,
}

fn fold(s: &str) -> String {
    s.chars().flat_map(char::to_lowercase).collect()
}

fn build(root: &Path, seed: u64, count: usize) -> Vec<N> {
    let mut r = Rng(seed | 1);
    let mut notes = Vec::with_capacity(count);
    for i in 0..count {
        let path = format!("{}/n{i:05}.md", ["a", "b", "b/c", "d"][i % 4]);
        let mut fields = Vec::new();
        for k in KEYS {
            if r.below(3) != 0 {
                fields.push(((*k).to_owned(), value(&mut r)));
            }
        }
        let mut fm_tags: Vec<String> = (0..r.below(3)).map(|_| (*r.pick(TAGS)).to_owned()).collect();
        let inline = (r.below(3) == 0).then(|| (*r.pick(&["ml", "nlp", "project/alpha"])).to_owned());
        let title_kind = r.below(3);
        let title_word = format!("{} {i}", r.pick(WORDS));
        let mut text = String::from("---\n");
        if title_kind == 0 {
            text.push_str(&format!("title: \"{title_word}\"\n"));
        }
        for (k, v) in &fields {
            text.push_str(&format!("{k}: {}\n", yaml(v)));
        }
        if !fm_tags.is_empty() {
            text.push_str(&format!(
                "tags: [{}]\n",
                fm_tags
                    .iter()
                    .map(|t| format!("\"{t}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        text.push_str("---\n");
        if title_kind == 1 {
            text.push_str(&format!("# {title_word}\n"));
        }
        if let Some(t) = &inline {
            text.push_str(&format!("Body #{t}\n"));
        }
        let title = if title_kind == 2 {
            format!("n{i:05}")
        } else {
            title_word
        };
        if let Some(t) = inline {
            fm_tags.push(t);
        }
        let mut tags: Vec<String> = Vec::new();
        for t in fm_tags {
            if !tags.iter().any(|x| fold(x) == fold(&t)) {
                tags.push(t);
            }
        }
        if title_kind == 0 {
            fields.push(("title".into(), M::Str(title.clone())));
        }
        if !tags.is_empty() && fields.iter().all(|(k, _)| k != "tags") && text.contains("tags: [") {
            // The frontmatter `tags` key as written (a built-in wins over it in queries).
            let written: Vec<M> = text
                .lines()
                .find(|l| l.starts_with("tags: ["))
                .map(|l| {
                    l["tags: [".len()..l.len() - 1]
                        .split(", ")
                        .map(|t| M::Str(t.trim_matches('"').to_owned()))
                        .collect()
                })
                .unwrap_or_default();
            fields.push(("tags".into(), M::List(written)));
        }
        let mtime = 1_700_000_000 + r.below(1000) as i64 * 60;
        let p = root.join(&path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, &text).unwrap();
        fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(mtime as u64))
            .unwrap();
        notes.push(N {
            path,
            title,
            tags,
            fields,
            mtime,
            bytes: text.len() as u64,
        });
    }
    notes.sort_by(|a, b| a.path.cmp(&b.path));
    notes
}

// ---- the oracle ----------------------------------------------------------------------------------

/// A comparable value: (type rank, number, instant, folded text, bool).
#[derive(Debug, Clone, PartialEq)]
enum S {
    Num(f64),
    Date(i64),
    Text(String),
    Bool(bool),
}

fn rank(s: &S) -> u8 {
    match s {
        S::Num(_) => 0,
        S::Date(_) => 1,
        S::Text(_) => 2,
        S::Bool(_) => 3,
    }
}

fn cmp_same(a: &S, b: &S) -> Option<Ordering> {
    match (a, b) {
        (S::Num(x), S::Num(y)) => x.partial_cmp(y),
        (S::Date(x), S::Date(y)) => Some(x.cmp(y)),
        (S::Text(x), S::Text(y)) => Some(x.cmp(y)),
        (S::Bool(x), S::Bool(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

fn s_of(m: &M) -> Option<S> {
    match m {
        M::Num(n, _) => Some(S::Num(*n)),
        M::Date(t, _) => Some(S::Date(*t)),
        M::Str(s) => Some(S::Text(fold(s))),
        M::Bool(b) => Some(S::Bool(*b)),
        _ => None,
    }
}

/// A field's value in one note.
enum G<'a> {
    M(&'a M),
    Tags(&'a [String]),
    Missing,
}

fn get<'a>(n: &'a N, f: &str, path_m: &'a M, title_m: &'a M, mt: &'a M, by: &'a M) -> G<'a> {
    match f {
        "path" => G::M(path_m),
        "title" => G::M(title_m),
        "modified" => G::M(mt),
        "bytes" => G::M(by),
        "tags" => G::Tags(&n.tags),
        k => n
            .fields
            .iter()
            .find(|(x, _)| x == k)
            .map_or(G::Missing, |(_, v)| G::M(v)),
    }
}

/// How a condition value reads (the oracle's own date rule: the generator's shapes).
fn want_of(v: &Value) -> S {
    match v {
        Value::Number(n) => S::Num(n.as_f64().unwrap()),
        Value::Bool(b) => S::Bool(*b),
        Value::String(s) => match oracle_date(s) {
            Some(t) => S::Date(t),
            None => S::Text(fold(s)),
        },
        _ => unreachable!(),
    }
}

fn oracle_date(s: &str) -> Option<i64> {
    let num = |a: usize, b: usize| s.get(a..b).and_then(|x| x.parse::<i64>().ok());
    let (y, m, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    if s.as_bytes().get(4) != Some(&b'-') || s.as_bytes().get(7) != Some(&b'-') || !(1..=12).contains(&m) {
        return None;
    }
    let day = days(y, m, d) * 86_400;
    match s.len() {
        10 => Some(day),
        20 if s.ends_with('Z') => Some(day + num(11, 13)? * 3600 + num(14, 16)? * 60 + num(17, 19)?),
        25 => {
            let off = num(20, 22)? * 3600 + num(23, 25)? * 60;
            let off = if s.as_bytes()[19] == b'-' { -off } else { off };
            Some(day + num(11, 13)? * 3600 + num(14, 16)? * 60 + num(17, 19)? - off)
        }
        _ => None,
    }
}

fn text_of(m: &M) -> Option<String> {
    match m {
        M::Str(s) | M::Date(_, s) => Some(fold(s)),
        _ => None,
    }
}

fn holds(n: &N, c: &Condition) -> bool {
    let path_m = M::Str(n.path.clone());
    let title_m = match oracle_date(&n.title) {
        Some(t) => M::Date(t, n.title.clone()),
        None => M::Str(n.title.clone()),
    };
    // `modified` is a date whose text is its RFC 3339 form (what `contains` looks into).
    let mt = M::Date(
        n.mtime,
        vault::rfc3339(SystemTime::UNIX_EPOCH + Duration::from_secs(n.mtime as u64)),
    );
    let by = M::Num(n.bytes as f64, String::new());
    let g = get(n, &c.field, &path_m, &title_m, &mt, &by);
    let present = !matches!(&g, G::Missing | G::M(M::Null));
    if c.op == QueryOp::Exists {
        return present == c.value.as_ref().is_none_or(|v| v == &json!(true));
    }
    let raw = c.value.as_ref().unwrap();
    let want = want_of(raw);
    let order = match &g {
        G::M(m) => s_of(m).and_then(|s| cmp_same(&s, &want)),
        _ => None,
    };
    let eq = order == Some(Ordering::Equal);
    match c.op {
        QueryOp::Eq => eq,
        QueryOp::Ne => !eq,
        QueryOp::Lt => order == Some(Ordering::Less),
        QueryOp::Lte => matches!(order, Some(Ordering::Less | Ordering::Equal)),
        QueryOp::Gt => order == Some(Ordering::Greater),
        QueryOp::Gte => matches!(order, Some(Ordering::Greater | Ordering::Equal)),
        QueryOp::Contains => {
            let wtext = raw.as_str().map(fold);
            match g {
                G::M(M::List(items)) => items
                    .iter()
                    .any(|it| s_of(it).and_then(|s| cmp_same(&s, &want)) == Some(Ordering::Equal)),
                G::Tags(tags) => wtext.is_some_and(|w| {
                    let w = w.trim_start_matches('#').to_owned();
                    tags.iter().any(|t| {
                        let t = fold(t);
                        t == w || t.starts_with(&format!("{w}/"))
                    })
                }),
                G::M(m) => match (text_of(m), wtext) {
                    (Some(t), Some(w)) => t.contains(&w),
                    _ => false,
                },
                G::Missing => false,
            }
        }
        QueryOp::Exists => unreachable!(),
    }
}

fn sort_key(n: &N, field: &str) -> Option<S> {
    match field {
        "path" => Some(S::Text(n.path.clone())),
        "title" => Some(oracle_date(&n.title).map_or_else(|| S::Text(fold(&n.title)), S::Date)),
        "modified" => Some(S::Date(n.mtime)),
        "bytes" => Some(S::Num(n.bytes as f64)),
        "tags" => None,
        k => n.fields.iter().find(|(x, _)| x == k).and_then(|(_, v)| s_of(v)),
    }
}

fn oracle(notes: &[N], spec: &QuerySpec) -> Vec<String> {
    let mut hits: Vec<(&N, Option<S>)> = notes
        .iter()
        .filter(|n| spec.conditions.iter().all(|c| holds(n, c)))
        .filter(|n| {
            spec.path_prefix
                .as_ref()
                .is_none_or(|p| n.path.starts_with(&format!("{p}/")))
        })
        .map(|n| {
            let field = spec.sort.as_ref().map_or("path", |s| s.field.as_str());
            (n, sort_key(n, field))
        })
        .collect();
    let desc = spec
        .sort
        .as_ref()
        .is_some_and(|s| s.order == Some(SortOrder::Desc));
    hits.sort_by(|(a, ka), (b, kb)| {
        let o = match (ka, kb) {
            (None, None) => Ordering::Equal,
            (None, _) => Ordering::Greater,
            (_, None) => Ordering::Less,
            (Some(x), Some(y)) => {
                let o = rank(x)
                    .cmp(&rank(y))
                    .then(cmp_same(x, y).unwrap_or(Ordering::Equal));
                if desc { o.reverse() } else { o }
            }
        };
        o.then_with(|| a.path.cmp(&b.path))
    });
    hits.into_iter().map(|(n, _)| n.path.clone()).collect()
}

// ---- the queries ---------------------------------------------------------------------------------

fn cond_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        (-6i64..40).prop_map(|n| json!(n)),
        (0u32..20).prop_map(|n| json!(f64::from(n) / 4.0)),
        proptest::sample::select(WORDS).prop_map(|w| json!(w)),
        proptest::sample::select(vec![
            "2021-06-15",
            "2020-01-01",
            "2022-12-28T23:00:00Z",
            "2021-03-03T05:00:00+02:00",
            "2021",
            "n0",
            "a/n0",
            "ML",
            "#ml",
            "project",
        ])
        .prop_map(|w| json!(w)),
        any::<bool>().prop_map(|b| json!(b)),
    ]
}

fn field() -> impl Strategy<Value = String> {
    proptest::sample::select(vec![
        "year", "status", "authors", "due", "score", "flag", "nope", "path", "title", "tags", "modified",
        "bytes",
    ])
    .prop_map(str::to_owned)
}

fn condition() -> impl Strategy<Value = Condition> {
    let op = proptest::sample::select(vec![
        QueryOp::Eq,
        QueryOp::Ne,
        QueryOp::Lt,
        QueryOp::Lte,
        QueryOp::Gt,
        QueryOp::Gte,
        QueryOp::Contains,
        QueryOp::Exists,
    ]);
    (field(), op, cond_value(), any::<bool>()).prop_map(|(field, op, value, b)| Condition {
        field,
        op,
        value: Some(if op == QueryOp::Exists { json!(b) } else { value }),
    })
}

fn spec() -> impl Strategy<Value = QuerySpec> {
    (
        proptest::collection::vec(condition(), 0..3),
        proptest::option::of(proptest::sample::select(vec!["a", "b", "b/c", "d"])),
        proptest::option::of((field(), any::<bool>())),
        1u32..200,
    )
        .prop_map(|(conditions, prefix, sort, limit)| QuerySpec {
            conditions,
            tags: Vec::new(),
            path_prefix: prefix.map(str::to_owned),
            fields: Vec::new(),
            sort: sort.map(|(field, desc)| SortSpec {
                field,
                order: Some(if desc { SortOrder::Desc } else { SortOrder::Asc }),
            }),
            limit: Some(limit),
        })
}

/// Every page of the query, following the positions.
fn walk(v: &Vault, spec: &QuerySpec) -> Vec<String> {
    let mut out = Vec::new();
    let mut after: Option<QueryPos> = None;
    loop {
        let (page, next) = v.query_notes_page(spec, after.as_ref(), usize::MAX).unwrap();
        assert_eq!(page.truncated, next.is_some());
        out.extend(page.notes.into_iter().map(|n| n.path));
        match next {
            Some(p) => after = Some(p),
            None => return out,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3))]
    #[test]
    fn the_answer_is_the_oracles(seed in any::<u64>(), specs in proptest::collection::vec(spec(), 40)) {
        let tmp = tempfile::tempdir().unwrap();
        let notes = build(tmp.path(), seed, 2500);
        let indexed = Vault::open(tmp.path(), layout()).unwrap();
        indexed.refresh_index(false, &mut |_, _| {}).unwrap();
        let scanning = Vault::open(tmp.path(), layout()).unwrap();
        for (i, spec) in specs.iter().enumerate() {
            let want = oracle(&notes, spec);
            prop_assert_eq!(&walk(&indexed, spec), &want, "{:?}", spec);
            // The scan reads every file: a few queries only.
            if i < 2 {
                prop_assert_eq!(&walk(&scanning, spec), &want, "scan {:?}", spec);
            }
        }
        // fields[]: each named field as written, missing ones left out.
        let spec = QuerySpec {
            fields: KEYS.iter().map(|k| (*k).to_owned()).chain(["bytes".to_owned(), "tags".to_owned()]).collect(),
            limit: Some(200),
            ..QuerySpec::default()
        };
        let (page, _) = indexed.query_notes_page(&spec, None, usize::MAX).unwrap();
        for row in page.notes {
            let n = notes.iter().find(|n| n.path == row.path).unwrap();
            prop_assert_eq!(&row.title, &n.title);
            let mut want = serde_json::Map::new();
            for k in KEYS {
                if let Some((_, v)) = n.fields.iter().find(|(x, _)| x == k) {
                    want.insert((*k).to_owned(), to_json(v));
                }
            }
            want.insert("bytes".into(), json!(n.bytes));
            want.insert("tags".into(), json!(n.tags));
            prop_assert_eq!(row.fields.unwrap(), want, "{}", row.path);
        }
    }
}
