//! `query_notes` (docs/contract.md#notes-as-data-and-attachments) through the real binary: every operator on numbers, dates, strings
//! and lists, missing fields and wrong types, sorting both ways with missing last, built-ins,
//! `fields[]`, paging, cursor binding, limits, and the index following applies and outside edits.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::util::{Client, Env, Reply};

/// Six papers: typed frontmatter, a string where a number is expected (c), none at all (d), a
/// null (f), dates with offsets.
const PAPERS: &[(&str, &str)] = &[
    (
        "papers/a.md",
        "---\ntitle: Attention Is All You Need\nyear: 2017\nauthors: [Vaswani, Shazeer]\nstatus: Read\npublished: 2017-06-12\nscore: 4.5\nbytes: lots\ntags: [ml, nlp]\n---\nBody #transformer\n",
    ),
    (
        "papers/b.md",
        "---\ntitle: Neural Machine Translation\nyear: 2015\nauthors: [Bahdanau]\nstatus: queue\npublished: 2014-09-01T12:00:00Z\ntags: [ml]\n---\nBody\n",
    ),
    (
        "papers/c.md",
        "---\ntitle: Wrong Types\nyear: \"2020\"\nauthors: Single Author\nstatus: READ\npublished: soon\n---\nBody\n",
    ),
    ("papers/d.md", "# Delta\n\nNo frontmatter, an inline #ml tag.\n"),
    (
        "papers/e.md",
        "---\ntitle: Épée 注意力\nyear: 2021\nauthors: []\nstatus: reading\npublished: 2021-01-01\n---\nBody\n",
    ),
    (
        "papers/f.md",
        "---\ntitle: Fin de siècle\nyear: 1999\nstatus:\npublished: 1999-12-31T23:59:59-01:00\n---\nBody\n",
    ),
];

async fn setup() -> (Env, Client) {
    let env = Env::new();
    std::fs::create_dir_all(env.vault.join("papers")).unwrap();
    for (p, text) in PAPERS {
        std::fs::write(env.vault.join(p), text).unwrap();
    }
    let (_, token) = env.token("reader", "read");
    let c = env.stdio(&token).await;
    wait_fresh(&c).await;
    (env, c)
}

/// Until the index answers (the first pass runs in the background; until then reads scan,
/// which answer alike but would not test the index).
async fn wait_fresh(c: &Client) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let o = c.call("get_vault_overview", json!({})).await.ok();
        if o["index"]["fresh"] == true {
            return;
        }
        assert!(Instant::now() < deadline, "the index never went fresh: {o}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn names(v: &Value) -> Vec<String> {
    v["notes"]
        .as_array()
        .unwrap_or_else(|| panic!("no notes: {v}"))
        .iter()
        .map(|n| {
            let p = n["path"].as_str().unwrap();
            p.strip_prefix("papers/")
                .and_then(|s| s.strip_suffix(".md"))
                .unwrap_or(p)
                .to_owned()
        })
        .collect()
}

/// The papers one condition admits, in path order.
async fn one(c: &Client, field: &str, op: &str, value: Value) -> Vec<String> {
    let cond = if value.is_null() {
        json!({"field": field, "op": op})
    } else {
        json!({"field": field, "op": op, "value": value})
    };
    names(
        &c.call(
            "query_notes",
            json!({"pathPrefix": "papers", "where": [cond], "limit": 200}),
        )
        .await
        .ok(),
    )
}

#[tokio::test]
async fn every_operator_on_numbers_dates_strings_and_lists() {
    let (_env, c) = setup().await;
    let cases: Vec<(&str, &str, Value, &[&str])> = vec![
        // Numbers (c's "2020" is a string: only ne matches it).
        ("year", "eq", json!(2017), &["a"]),
        ("year", "eq", json!(2017.0), &["a"]),
        ("year", "ne", json!(2017), &["b", "c", "d", "e", "f"]),
        ("year", "lt", json!(2017), &["b", "f"]),
        ("year", "lte", json!(2017), &["a", "b", "f"]),
        ("year", "gt", json!(2017), &["e"]),
        ("year", "gte", json!(2015), &["a", "b", "e"]),
        ("year", "eq", json!("2020"), &["c"]),
        ("year", "gt", json!("2000"), &["c"]),
        ("score", "lte", json!(4.5), &["a"]),
        ("score", "gt", json!(4.5), &[]),
        // Dates in time order: f is 2000-01-01T00:59:59Z, b noon UTC.
        ("published", "gt", json!("2000-01-01"), &["a", "b", "e", "f"]),
        ("published", "lt", json!("2000-01-01T01:00:00+00:00"), &["f"]),
        ("published", "eq", json!("2000-01-01T00:59:59Z"), &["f"]),
        ("published", "eq", json!("2017-06-12T00:00:00Z"), &["a"]),
        ("published", "ne", json!("2017-06-12"), &["b", "c", "d", "e", "f"]),
        (
            "published",
            "gte",
            json!("2014-09-01T13:00:00+01:00"),
            &["a", "b", "e"],
        ),
        ("published", "lte", json!("2014-09-01T11:59:59Z"), &["f"]),
        ("published", "contains", json!("2017-06"), &["a"]),
        // A date against a plain string is another type.
        ("published", "lt", json!("zzz"), &["c"]),
        // Strings, case-insensitively.
        ("status", "eq", json!("read"), &["a", "c"]),
        ("status", "ne", json!("READ"), &["b", "d", "e", "f"]),
        ("status", "contains", json!("REA"), &["a", "c", "e"]),
        ("status", "lt", json!("R"), &["b"]),
        ("status", "gte", json!("read"), &["a", "c", "e"]),
        ("status", "gt", json!("read"), &["e"]),
        ("title", "contains", json!("注意"), &["e"]),
        ("title", "eq", json!("ÉPÉE 注意力"), &["e"]),
        ("title", "eq", json!("delta"), &["d"]),
        // Lists: membership; eq never matches a list; a string field takes substrings.
        ("authors", "contains", json!("vaswani"), &["a"]),
        ("authors", "contains", json!("Vas"), &[]),
        ("authors", "eq", json!("Vaswani"), &[]),
        ("authors", "ne", json!("Vaswani"), &["a", "b", "c", "d", "e", "f"]),
        ("authors", "contains", json!("single"), &["c"]),
        ("authors", "gt", json!("a"), &["c"]),
        ("tags", "contains", json!("ML"), &["a", "b", "d"]),
        ("tags", "contains", json!("#transformer"), &["a"]),
        ("tags", "eq", json!("ml"), &[]),
        // Presence: f's null status is absent; a missing field matches only ne and exists false.
        ("status", "exists", Value::Null, &["a", "b", "c", "e"]),
        ("status", "exists", json!(true), &["a", "b", "c", "e"]),
        ("status", "exists", json!(false), &["d", "f"]),
        ("authors", "exists", json!(true), &["a", "b", "c", "e"]),
        ("nothing", "exists", json!(false), &["a", "b", "c", "d", "e", "f"]),
        ("nothing", "ne", json!(1), &["a", "b", "c", "d", "e", "f"]),
        ("nothing", "eq", json!(1), &[]),
        ("nothing", "lt", json!(1), &[]),
        ("nothing", "contains", json!("x"), &[]),
        // Booleans.
        ("year", "eq", json!(true), &[]),
    ];
    for (field, op, value, want) in cases {
        let got = one(&c, field, op, value.clone()).await;
        assert_eq!(got, want, "{field} {op} {value}");
    }
    // Conditions are ANDed, with tag[] and pathPrefix.
    let v = c
        .call(
            "query_notes",
            json!({"where": [
                {"field": "year", "op": "gte", "value": 2000},
                {"field": "tags", "op": "contains", "value": "ml"}
            ], "tag": ["#NLP"]}),
        )
        .await
        .ok();
    assert_eq!(names(&v), ["a"]);
    c.close().await;
}

#[tokio::test]
async fn sorting_both_ways_puts_missing_last_and_builtins_and_fields_answer() {
    let (env, c) = setup().await;
    let sorted = |field: &'static str, order: &'static str| {
        let c = &c;
        async move {
            names(
                &c.call(
                    "query_notes",
                    json!({"pathPrefix": "papers", "sort": {"field": field, "order": order}}),
                )
                .await
                .ok(),
            )
        }
    };
    // Numbers, then the string "2020", then d (no year) last in both orders.
    assert_eq!(sorted("year", "asc").await, ["f", "b", "a", "e", "c", "d"]);
    assert_eq!(sorted("year", "desc").await, ["c", "e", "a", "b", "f", "d"]);
    // Null (f) and missing (d) both last, in path order.
    assert_eq!(sorted("status", "asc").await, ["b", "a", "c", "e", "d", "f"]);
    assert_eq!(sorted("status", "desc").await, ["e", "a", "c", "b", "d", "f"]);
    assert_eq!(sorted("published", "asc").await, ["f", "b", "a", "e", "c", "d"]);
    assert_eq!(sorted("nothing", "desc").await, ["a", "b", "c", "d", "e", "f"]);
    assert_eq!(sorted("path", "desc").await, ["f", "e", "d", "c", "b", "a"]);
    // Code point order of the folded titles: "é" comes after every ASCII letter.
    assert_eq!(sorted("title", "asc").await, ["a", "d", "f", "b", "c", "e"]);
    // Default: path ascending; rows carry path and title only.
    let v = c.call("query_notes", json!({"pathPrefix": "papers"})).await.ok();
    assert_eq!(names(&v), ["a", "b", "c", "d", "e", "f"]);
    assert_eq!(v["truncated"], false);
    assert!(v.get("nextCursor").is_none());
    assert_eq!(
        v["notes"][0],
        json!({"path": "papers/a.md", "title": "Attention Is All You Need"})
    );
    // fields[]: frontmatter values as written, built-ins winning over keys of their name.
    let v = c
        .call(
            "query_notes",
            json!({"pathPrefix": "papers", "limit": 1, "fields": ["year", "authors", "bytes", "tags", "modified", "path", "nothing", "score", "year"]}),
        )
        .await
        .ok();
    let a = &v["notes"][0];
    let bytes = std::fs::metadata(env.vault.join("papers/a.md")).unwrap().len();
    let f = a["fields"].as_object().unwrap();
    assert_eq!(f["year"], 2017);
    assert_eq!(f["score"], 4.5);
    assert_eq!(f["authors"], json!(["Vaswani", "Shazeer"]));
    assert_eq!(f["bytes"], bytes);
    assert_eq!(f["tags"], json!(["ml", "nlp", "transformer"]));
    assert_eq!(f["path"], "papers/a.md");
    assert!(f["modified"].as_str().unwrap().ends_with('Z'), "{a}");
    assert!(!f.contains_key("nothing"), "a missing field is left out: {a}");
    assert_eq!(f.len(), 7, "{a}");
    assert_eq!(one(&c, "bytes", "eq", json!(bytes)).await, ["a"]);
    assert_eq!(one(&c, "bytes", "eq", json!("lots")).await, Vec::<String>::new());
    assert_eq!(
        one(&c, "modified", "gt", json!("2000-01-01")).await,
        ["a", "b", "c", "d", "e", "f"]
    );
    assert_eq!(
        one(&c, "modified", "lt", json!("2000-01-01")).await,
        Vec::<String>::new()
    );
    assert_eq!(one(&c, "path", "contains", json!("PAPERS/C")).await, ["c"]);
    // Outside a prefix, the fixture's notes are rows too (inbox excluded).
    let all = c.call("query_notes", json!({"limit": 200})).await.ok();
    let all = names(&all);
    assert!(all.contains(&"z/attention.md".to_owned()), "{all:?}");
    assert!(!all.iter().any(|p| p.starts_with("inbox/")), "{all:?}");
    c.close().await;
}

/// Every page of a call, following nextCursor; fails on a page past `max_pages`.
async fn walk(c: &Client, args: &Value, limit: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..100 {
        let mut a = args.clone();
        a["limit"] = json!(limit);
        if let Some(cur) = &cursor {
            a["cursor"] = json!(cur);
        }
        let v = c.call("query_notes", a).await.ok();
        let page = v["notes"].as_array().unwrap();
        assert!(page.len() <= limit, "{v}");
        out.extend(page.iter().map(|n| n["path"].as_str().unwrap().to_owned()));
        match v.get("nextCursor") {
            Some(n) => {
                assert_eq!(v["truncated"], true);
                cursor = Some(n.as_str().unwrap().to_owned());
            }
            None => {
                assert_eq!(v["truncated"], false);
                return out;
            }
        }
    }
    panic!("paging did not end");
}

#[tokio::test]
async fn paging_visits_each_row_once_and_a_cursor_is_bound_to_its_call() {
    let (_env, c) = setup().await;
    let calls = [
        json!({}),
        json!({"sort": {"field": "year"}}),
        json!({"sort": {"field": "year", "order": "desc"}}),
        json!({"sort": {"field": "title", "order": "desc"}}),
        json!({"sort": {"field": "path", "order": "desc"}}),
        json!({"sort": {"field": "published"}, "where": [{"field": "status", "op": "ne", "value": "x"}]}),
    ];
    for args in &calls {
        let mut whole = args.clone();
        whole["limit"] = json!(200);
        let all: Vec<String> = c.call("query_notes", whole).await.ok()["notes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["path"].as_str().unwrap().to_owned())
            .collect();
        assert!(all.len() > 10, "{all:?}");
        for limit in 1..=all.len() {
            assert_eq!(walk(&c, args, limit).await, all, "{args} limit {limit}");
        }
    }
    // A cursor changes nothing but where the page starts; limit may change, nothing else.
    let first = c
        .call("query_notes", json!({"sort": {"field": "year"}, "limit": 2}))
        .await
        .ok();
    let cursor = first["nextCursor"].as_str().unwrap();
    let next = c
        .call(
            "query_notes",
            json!({"sort": {"field": "year"}, "limit": 3, "cursor": cursor}),
        )
        .await
        .ok();
    assert_eq!(next["notes"].as_array().unwrap().len(), 3);
    for other in [
        json!({"sort": {"field": "year", "order": "desc"}, "cursor": cursor}),
        json!({"sort": {"field": "year"}, "pathPrefix": "papers", "cursor": cursor}),
        json!({"sort": {"field": "year"}, "fields": ["year"], "cursor": cursor}),
        json!({"cursor": cursor}),
    ] {
        assert_eq!(
            c.call("query_notes", other.clone()).await.code(),
            "INVALID_ARGUMENT",
            "{other}"
        );
    }
    let forged = format!("{}A", &cursor[..cursor.len() - 1]);
    let forged = if forged == cursor {
        format!("{}B", &cursor[..cursor.len() - 1])
    } else {
        forged
    };
    assert_eq!(
        c.call(
            "query_notes",
            json!({"sort": {"field": "year"}, "cursor": forged})
        )
        .await
        .code(),
        "INVALID_ARGUMENT"
    );
    // Another tool's cursor is not one of ours.
    let recent = c.call("list_recent_notes", json!({"limit": 1})).await.ok();
    let theirs = recent["nextCursor"].as_str().unwrap();
    assert_eq!(
        c.call("query_notes", json!({"cursor": theirs})).await.code(),
        "INVALID_ARGUMENT"
    );
    c.close().await;
}

fn message(r: Reply) -> String {
    match r {
        Reply::Err(e) => format!("{} {}", e["code"].as_str().unwrap(), e["message"]),
        Reply::Ok(v) => panic!("expected an error, got {v}"),
    }
}

#[tokio::test]
async fn limits_and_bad_arguments_are_refused() {
    let (_env, c) = setup().await;
    let cond = json!({"field": "year", "op": "gt", "value": 1});
    let m = message(
        c.call("query_notes", json!({"where": vec![cond.clone(); 33]}))
            .await,
    );
    assert!(
        m.starts_with("INVALID_ARGUMENT") && m.contains("max_where"),
        "{m}"
    );
    let m = message(c.call("query_notes", json!({"fields": vec!["f"; 65]})).await);
    assert!(
        m.starts_with("INVALID_ARGUMENT") && m.contains("max_fields"),
        "{m}"
    );
    // At the limits: answered.
    c.call(
        "query_notes",
        json!({"where": vec![cond; 32], "fields": (0..64).map(|i| format!("f{i}")).collect::<Vec<_>>()}),
    )
    .await
    .ok();
    for bad in [
        json!({"limit": 0}),
        json!({"limit": 201}),
        json!({"where": [{"field": "year", "op": "like", "value": 1}]}),
        json!({"where": [{"field": "year", "op": "eq"}]}),
        json!({"where": [{"field": "year", "op": "eq", "value": null}]}),
        json!({"where": [{"field": "year", "op": "eq", "value": [1]}]}),
        json!({"where": [{"field": "year", "op": "eq", "value": {"a": 1}}]}),
        json!({"where": [{"field": "year", "op": "exists", "value": "yes"}]}),
        json!({"where": [{"field": "", "op": "exists"}]}),
        json!({"where": [{"field": "year", "op": "eq", "value": 1, "extra": 1}]}),
        json!({"sort": {"field": "year", "order": "up"}}),
        json!({"sort": "year"}),
        json!({"fields": [""]}),
        json!({"pathPrefix": "../x"}),
        json!({"unknown": 1}),
    ] {
        let code = c.call("query_notes", bad.clone()).await.code();
        assert!(
            code == "INVALID_ARGUMENT" || code == "PATH_INVALID",
            "{bad}: {code}"
        );
    }
    assert_eq!(
        c.call("query_notes", json!({"limit": 200})).await.ok()["truncated"],
        false
    );
    c.close().await;
}

#[tokio::test]
async fn the_index_follows_an_apply_and_an_outside_edit() {
    let (env, c) = setup().await;
    let (_, token) = env.token("writer", "auto");
    let w = env.stdio(&token).await;
    let year_2030 = || async { one(&c, "year", "eq", json!(2030)).await };
    assert!(year_2030().await.is_empty());

    // An applied patch is answered at once.
    let note = w.call("read_note", json!({"path": "papers/b.md"})).await.ok();
    let text = note["content"]
        .as_str()
        .unwrap()
        .replace("year: 2015", "year: 2030");
    let p = w
        .call(
            "propose_note_patch",
            json!({"path": "papers/b.md", "baseHash": note["hash"], "content": text, "reason": "test"}),
        )
        .await
        .ok();
    let applied = w
        .call(
            "apply_proposal",
            json!({"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": "k-query-1"}),
        )
        .await
        .ok();
    assert_eq!(applied["index"], "updated", "{applied}");
    let seen = one(&w, "year", "eq", json!(2030)).await;
    assert_eq!(seen, ["b"]);
    assert_eq!(one(&w, "year", "eq", json!(2015)).await, Vec::<String>::new());

    // A file edited outside is answered within a few seconds (the watcher), by the other
    // server too.
    std::fs::write(
        env.vault.join("papers/d.md"),
        "---\nyear: 2030\nstatus: new\n---\n# Delta\n",
    )
    .unwrap();
    std::fs::write(env.vault.join("papers/g.md"), "---\nyear: 2030\n---\n# G\n").unwrap();
    std::fs::remove_file(env.vault.join("papers/a.md")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = year_2030().await;
        let gone = one(&c, "authors", "contains", json!("vaswani")).await;
        if got == ["b", "d", "g"] && gone.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the index did not follow: {got:?} {gone:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(one(&c, "tags", "contains", json!("ml")).await, ["b"]);
    w.close().await;
    c.close().await;
}
