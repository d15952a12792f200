//! `query_notes` p50 on a generated vault, through the vault API (no MCP):
//! `cargo run --release -p vault --example query_bench -- <dir> [notes]`. Prints the index build
//! rate, the peak RSS and the p50 of a selective and a broad query.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::time::Instant;

use policy::{FolderPath, Layout, VaultPath};
use serde_json::json;
use vault::Vault;

const AUTHORS: &[&str] = &[
    "Vaswani",
    "Shazeer",
    "Parmar",
    "Uszkoreit",
    "Jones",
    "Gomez",
    "Kaiser",
    "Polosukhin",
    "Bahdanau",
    "Cho",
    "Bengio",
    "Hinton",
    "LeCun",
    "Sutskever",
    "Graves",
    "Schmidhuber",
    "Hochreiter",
];
const STATUS: &[&str] = &["read", "queue", "reading", "skimmed"];
const TAGS: &[&str] = &["ml", "nlp", "project/alpha", "cooking", "notes", "注意"];

fn hwm_mib() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|k| k.parse::<f64>().ok())
        .map_or(f64::NAN, |k| k / 1024.0)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().expect("a folder"));
    let n: usize = args.next().map_or(100_000, |s| s.parse().unwrap());
    if !dir.join("f0000").exists() {
        let filler = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. ".repeat(16);
        for i in 0..n {
            let folder = dir.join(format!("f{:04}", i / 100));
            if i % 100 == 0 {
                std::fs::create_dir_all(&folder).unwrap();
            }
            let text = format!(
                "---\ntitle: Note {i}\ntags: [{}, {}]\nyear: {}\nauthors: [{}, {}]\nstatus: {}\ncreated: 2024-{:02}-{:02}\n---\n# Note {i}\n\n{filler}\n",
                TAGS[i % TAGS.len()],
                TAGS[(i / 7) % TAGS.len()],
                1990 + i % 35,
                AUTHORS[i % AUTHORS.len()],
                AUTHORS[(i / AUTHORS.len() + 3) % AUTHORS.len()],
                STATUS[(i / 7) % STATUS.len()],
                1 + (i / 28) % 12,
                1 + i % 28,
            );
            std::fs::write(folder.join(format!("n{i:06}.md")), text).unwrap();
        }
    }
    let layout = Layout::new(
        vec![FolderPath::Root],
        vec![],
        VaultPath::parse("inbox").unwrap(),
        None,
    );
    let v = Vault::open(&dir, layout).unwrap();
    let started = Instant::now();
    let rep = v.refresh_index(true, &mut |_, _| {}).unwrap();
    let secs = started.elapsed().as_secs_f64();
    println!(
        "index build (rebuild): {} notes in {secs:.1} s = {:.0} notes/s; peak RSS {:.0} MiB",
        rep.notes,
        rep.notes as f64 / secs,
        hwm_mib()
    );
    // A reopened handle loads the catalog from the file, as a server starting on a built index.
    drop(v);
    let layout = Layout::new(
        vec![FolderPath::Root],
        vec![],
        VaultPath::parse("inbox").unwrap(),
        None,
    );
    let v = Vault::open(&dir, layout).unwrap();
    v.manual_index();
    let started = Instant::now();
    v.refresh_index(false, &mut |_, _| {}).unwrap();
    println!(
        "reopen + unchanged pass (walk, catalog load): {:.2} s",
        started.elapsed().as_secs_f64()
    );
    let spec = |w: serde_json::Value, sort: Option<serde_json::Value>| vault::data::QuerySpec {
        conditions: serde_json::from_value(w).unwrap(),
        sort: sort.map(|s| serde_json::from_value(s).unwrap()),
        fields: vec!["year".into(), "authors".into(), "status".into()],
        ..Default::default()
    };
    let queries = [
        (
            "selective (year = 2017 and authors contains vaswani)",
            spec(
                json!([{"field": "year", "op": "eq", "value": 2017}, {"field": "authors", "op": "contains", "value": "vaswani"}]),
                None,
            ),
        ),
        (
            "broad (year >= 2002, sorted by year desc)",
            spec(
                json!([{"field": "year", "op": "gte", "value": 2002}]),
                Some(json!({"field": "year", "order": "desc"})),
            ),
        ),
        (
            "broad by path (status ne read)",
            spec(json!([{"field": "status", "op": "ne", "value": "read"}]), None),
        ),
        (
            "title contains (folds every title)",
            spec(
                json!([{"field": "title", "op": "contains", "value": "note 99"}]),
                None,
            ),
        ),
    ];
    for (name, q) in &queries {
        let mut times = Vec::new();
        let mut rows = 0;
        for _ in 0..41 {
            let t = Instant::now();
            let (out, _) = v.query_notes_page(q, None, 8 << 20).unwrap();
            times.push(t.elapsed().as_secs_f64() * 1e3);
            rows = out.notes.len();
        }
        times.sort_by(f64::total_cmp);
        println!(
            "query_notes {name}: p50 {:.2} ms, max {:.2} ms ({rows} rows)",
            times[20], times[40]
        );
    }
    println!("peak RSS after queries {:.0} MiB", hwm_mib());
}
