//! docs/contract.md#limits-and-pagination through the real binary: sealed cursors walk every list and search exactly once,
//! cursors bound to other calls are refused, side lists are capped with exact counts, and an
//! answer over `max_output_bytes` is `OUTPUT_LIMIT_EXCEEDED`.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::util::{Client, Env};

/// `bulk/n0000.md` … : `notes` notes titled "Compass i" for i < 1000 (1,000 `search_knowledge`
/// hits), and for i < 500 two lines that hold `needle thread` (score 2) and `thread` (score 1):
/// 1,000 `search_note_content` hits.
fn bulk_env(notes: usize) -> Env {
    let env = Env::new();
    let dir = env.vault.join("bulk");
    std::fs::create_dir_all(dir.join("sub-a")).unwrap();
    std::fs::create_dir_all(dir.join("sub-b")).unwrap();
    for i in 0..notes {
        let title = if i < 1000 {
            format!("Compass {i}")
        } else {
            format!("Other {i}")
        };
        let body = if i < 500 {
            format!("needle thread {i}\nthe thread only {i}\n")
        } else {
            format!("plain body {i}\n")
        };
        std::fs::write(
            dir.join(format!("n{i:04}.md")),
            format!("---\ntitle: {title}\n---\n{body}"),
        )
        .unwrap();
    }
    env
}

/// Calls `tool` page by page (changing `limit` as `limits` says, the last one repeating) and
/// returns every item of `field` in order.
async fn walk(c: &Client, tool: &str, args: Value, field: &str, limits: &[u64]) -> Vec<Value> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for page in 0.. {
        assert!(page < 100, "{tool} never ended");
        let mut a = args.clone();
        a["limit"] = json!(limits[page.min(limits.len() - 1)]);
        if let Some(c) = &cursor {
            a["cursor"] = json!(c);
        }
        let out = c.call(tool, a).await.ok();
        let got = out[field].as_array().unwrap();
        items.extend(got.iter().cloned());
        let truncated = out["truncated"].as_bool().unwrap();
        // `nextCursor` is present exactly when `truncated` is true.
        assert_eq!(out.get("nextCursor").is_some(), truncated, "{out}");
        if !truncated {
            break;
        }
        let next = out["nextCursor"].as_str().unwrap();
        assert!(next.len() <= 128, "cursor of {} bytes", next.len());
        cursor = Some(next.to_owned());
    }
    items
}

fn paths(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .map(|i| i["path"].as_str().unwrap().to_owned())
        .collect()
}

fn once(v: &[String]) -> BTreeSet<String> {
    let set: BTreeSet<String> = v.iter().cloned().collect();
    assert_eq!(set.len(), v.len(), "an item came twice");
    set
}

#[tokio::test]
async fn list_notes_pages_walk_a_folder_of_1200_notes_exactly_once() {
    let env = bulk_env(1200);
    let (_, token) = env.token("reader", "read");
    let c = env.stdio(&token).await;
    let items = walk(
        &c,
        "list_notes",
        json!({"dir": "bulk"}),
        "entries",
        &[500, 137, 333],
    )
    .await;
    let got = paths(&items);
    let mut want: Vec<String> = vec!["bulk/sub-a".into(), "bulk/sub-b".into()];
    want.extend((0..1200).map(|i| format!("bulk/n{i:04}.md")));
    // Folders first, then files by path: the stable order, every entry once.
    assert_eq!(got, want);
    once(&got);
    c.close().await;
}

#[tokio::test]
async fn search_pages_walk_1000_hits_exactly_once_in_rank_order() {
    let env = bulk_env(1200);
    let (_, token) = env.token("reader", "read");
    let c = env.stdio(&token).await;

    let hits = walk(
        &c,
        "search_note_content",
        json!({"query": "needle thread"}),
        "hits",
        &[200, 77],
    )
    .await;
    let keys: Vec<String> = hits
        .iter()
        .map(|h| format!("{}:{}", h["path"].as_str().unwrap(), h["line"]))
        .collect();
    let want: BTreeSet<String> = (0..500)
        .flat_map(|i| [format!("bulk/n{i:04}.md:4"), format!("bulk/n{i:04}.md:5")])
        .collect();
    assert_eq!(once(&keys), want);
    // Ranked across pages: note scores never rise, and each note's two lines come together,
    // the one holding both terms first.
    let scores: Vec<u64> = hits.iter().map(|h| h["score"].as_u64().unwrap()).collect();
    assert!(
        scores.windows(2).all(|w| w[0] >= w[1]),
        "rank order broken across pages"
    );
    for pair in keys.chunks(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert!(a.ends_with(":4") && b.ends_with(":5"), "{a} {b}");
        assert_eq!(a.split(':').next(), b.split(':').next(), "{a} {b}");
    }

    let hits = walk(
        &c,
        "search_knowledge",
        json!({"query": "compass"}),
        "hits",
        &[200, 150],
    )
    .await;
    let got = paths(&hits);
    let want: BTreeSet<String> = (0..1000).map(|i| format!("bulk/n{i:04}.md")).collect();
    assert_eq!(once(&got), want);
    c.close().await;
}

/// The first page's cursor of a search that has more hits.
async fn first_cursor(c: &Client, tool: &str, args: Value) -> String {
    let out = c.call(tool, args).await.ok();
    assert_eq!(out["truncated"], true, "{out}");
    out["nextCursor"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_cursor_of_another_call_credential_or_forged_is_invalid() {
    let env = bulk_env(600);
    let (_, token) = env.token("reader", "read");
    let (_, other) = env.token("other", "read");
    let c = env.stdio(&token).await;
    let args = json!({"query": "needle", "limit": 10});
    let cursor = first_cursor(&c, "search_note_content", args.clone()).await;

    // The same call with another limit goes on.
    let next = c
        .call(
            "search_note_content",
            json!({"query": "needle", "limit": 20, "cursor": cursor}),
        )
        .await
        .ok();
    assert_eq!(next["hits"].as_array().unwrap().len(), 20);

    // Other arguments, another tool, a changed character, garbage.
    let other_args = json!({"query": "thread", "limit": 10, "cursor": cursor});
    assert_eq!(
        c.call("search_note_content", other_args).await.code(),
        "INVALID_ARGUMENT"
    );
    let prefixed = json!({"query": "needle", "pathPrefix": "bulk", "cursor": cursor});
    assert_eq!(
        c.call("search_note_content", prefixed).await.code(),
        "INVALID_ARGUMENT"
    );
    let other_tool = json!({"query": "needle", "cursor": cursor});
    assert_eq!(
        c.call("search_knowledge", other_tool).await.code(),
        "INVALID_ARGUMENT"
    );
    let mut forged = cursor.clone().into_bytes();
    let last = forged.len() - 1;
    forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    let call = json!({"query": "needle", "limit": 10, "cursor": forged});
    assert_eq!(
        c.call("search_note_content", call).await.code(),
        "INVALID_ARGUMENT"
    );
    let call = json!({"query": "needle", "limit": 10, "cursor": "bm90IGEgY3Vyc29y"});
    assert_eq!(
        c.call("search_note_content", call).await.code(),
        "INVALID_ARGUMENT"
    );
    let list_cursor = first_cursor(&c, "list_notes", json!({"dir": "bulk", "limit": 5})).await;
    let call = json!({"dir": "z", "limit": 5, "cursor": list_cursor});
    assert_eq!(c.call("list_notes", call).await.code(), "INVALID_ARGUMENT");
    c.close().await;

    // Another credential cannot use it, even with the very same arguments.
    let o = env.stdio(&other).await;
    let call = json!({"query": "needle", "limit": 10, "cursor": cursor});
    assert_eq!(
        o.call("search_note_content", call).await.code(),
        "INVALID_ARGUMENT"
    );
    o.close().await;
}

#[tokio::test]
async fn a_search_cursor_is_refused_once_an_apply_moved_the_vault() {
    let env = bulk_env(600);
    let (_, token) = env.token("writer", "auto");
    let c = env.stdio(&token).await;
    let content = first_cursor(&c, "search_note_content", json!({"query": "needle", "limit": 10})).await;
    let knowledge = first_cursor(&c, "search_knowledge", json!({"query": "compass", "limit": 10})).await;
    let listing = first_cursor(&c, "list_notes", json!({"dir": "bulk", "limit": 10})).await;

    let p = c
        .call(
            "propose_new_note",
            json!({"path": "z/paging-new.md", "content": "# New\n", "reason": "test"}),
        )
        .await
        .ok();
    let applied = c
        .call(
            "apply_proposal",
            json!({"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": "k-paging"}),
        )
        .await
        .ok();
    assert_eq!(applied["applied"], true);

    for (tool, args) in [
        (
            "search_note_content",
            json!({"query": "needle", "limit": 10, "cursor": content}),
        ),
        (
            "search_knowledge",
            json!({"query": "compass", "limit": 10, "cursor": knowledge}),
        ),
    ] {
        let r = c.call(tool, args).await;
        let crate::util::Reply::Err(e) = r else {
            panic!("{tool}: a stale search cursor was accepted: {r:?}")
        };
        assert_eq!(e["code"], "INVALID_ARGUMENT");
        assert!(
            e["message"].as_str().unwrap().contains("the vault changed"),
            "{e}"
        );
    }
    // A listing cursor points at a stable key and goes on.
    let next = c
        .call(
            "list_notes",
            json!({"dir": "bulk", "limit": 10, "cursor": listing}),
        )
        .await
        .ok();
    assert_eq!(next["entries"][0]["path"], "bulk/n0008.md");
    c.close().await;
}

#[tokio::test]
async fn list_proposals_pages_walk_every_proposal_once_newest_first() {
    let env = Env::new();
    let (_, token) = env.token("writer", "propose");
    let c = env.stdio(&token).await;
    let mut ids = Vec::new();
    for i in 0..7 {
        let p = c
            .call(
                "propose_new_note",
                json!({"path": format!("z/p{i}.md"), "content": format!("# P{i}\n"), "reason": "test"}),
            )
            .await
            .ok();
        ids.push(p["id"].as_str().unwrap().to_owned());
    }
    let items = walk(&c, "list_proposals", json!({}), "proposals", &[3, 2]).await;
    let got: Vec<String> = items
        .iter()
        .map(|p| p["id"].as_str().unwrap().to_owned())
        .collect();
    ids.reverse();
    assert_eq!(got, ids, "newest first, each once");
    c.close().await;
}

#[tokio::test]
async fn list_tags_and_recent_notes_page_through_everything() {
    let env = Env::new();
    let dir = env.vault.join("tagged");
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..60 {
        // Tag t{k} is carried by k+1 notes, so counts differ and tie.
        let tags: Vec<String> = (0..=(i % 7)).map(|k| format!("#t{k}-{}", i % 3)).collect();
        std::fs::write(
            dir.join(format!("r{i:02}.md")),
            format!("# R{i}\n{}\n", tags.join(" ")),
        )
        .unwrap();
    }
    let (_, token) = env.token("reader", "read");
    let c = env.stdio(&token).await;
    let all = c.call("list_tags", json!({})).await.ok();
    assert_eq!(all["truncated"], false);
    let all: Vec<Value> = all["tags"].as_array().unwrap().clone();
    assert!(all.len() > 10);
    assert_eq!(walk(&c, "list_tags", json!({}), "tags", &[4, 3]).await, all);

    let all = c.call("list_recent_notes", json!({"limit": 200})).await.ok();
    assert_eq!(all["truncated"], false);
    let all = paths(all["notes"].as_array().unwrap());
    let paged = paths(&walk(&c, "list_recent_notes", json!({}), "notes", &[7, 11]).await);
    assert_eq!(paged, all);
    once(&paged);
    c.close().await;
}

#[tokio::test]
async fn related_lists_are_capped_at_1000_with_exact_counts() {
    let env = Env::new();
    let dir = env.vault.join("fans");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(env.vault.join("hub.md"), "# Hub\n").unwrap();
    for i in 0..1100 {
        std::fs::write(dir.join(format!("f{i:04}.md")), format!("# F{i}\nsee [[hub]]\n")).unwrap();
    }
    let (_, token) = env.token("reader", "read");
    let c = env.stdio(&token).await;
    let out = c.call("get_related_notes", json!({"path": "hub.md"})).await.ok();
    assert_eq!(out["backlinks"].as_array().unwrap().len(), 1000);
    assert_eq!(out["counts"]["backlinks"], 1100);
    assert_eq!(out["counts"]["outlinks"], 0);
    assert_eq!(out["truncated"], true);
    let small = c
        .call("get_related_notes", json!({"path": "fans/f0001.md"}))
        .await
        .ok();
    assert_eq!(small["truncated"], false);
    assert_eq!(small["counts"]["outlinks"], 1);
    c.close().await;
}

#[tokio::test]
async fn a_diff_over_the_output_limit_is_output_limit_exceeded() {
    let env = Env::new();
    // Under the 2 MiB read limit, but each control character is six bytes of JSON (seven in the
    // text block): the edit's diff holds the old and the new line, over 16 MiB as a result.
    let big = format!("MARK{}\n", "\u{1}".repeat(2_000_000));
    std::fs::write(env.vault.join("z/big.md"), &big).unwrap();
    let (_, token) = env.token("writer", "propose");
    let c = env.stdio(&token).await;
    let base = c.call("read_note", json!({"path": "z/big.md"})).await.code();
    assert_eq!(
        base, "OUTPUT_LIMIT_EXCEEDED",
        "its text twice, escaped, is over 16 MiB too"
    );
    let hash = sha256_hex(big.as_bytes());
    let edit = json!({"path": "z/big.md", "baseHash": hash, "reason": "big",
        "edits": [{"oldText": "MARK", "newText": "MORE"}]});
    let r = c.call("propose_note_patch", edit).await;
    let crate::util::Reply::Err(e) = r else {
        panic!("an answer over 16 MiB was sent")
    };
    assert_eq!(e["code"], "OUTPUT_LIMIT_EXCEEDED");
    let message = e["message"].as_str().unwrap();
    assert!(message.contains("vaultgate inbox show"), "{message}");
    let pending = c.call("list_proposals", json!({})).await.ok();
    let id = pending["proposals"][0]["id"].as_str().unwrap().to_owned();
    assert!(
        message.contains(&id),
        "the message names the recorded proposal: {message}"
    );
    assert_eq!(
        c.call("get_proposal", json!({"id": id})).await.code(),
        "OUTPUT_LIMIT_EXCEEDED"
    );
    // A small proposal is shown as before.
    let base = c.call("read_note", json!({"path": "welcome.md"})).await.ok();
    let small = c
        .call(
            "propose_note_patch",
            json!({"path": "welcome.md", "baseHash": base["hash"], "content": "# Small\n", "reason": "small"}),
        )
        .await
        .ok();
    assert!(small["diff"].as_str().unwrap().contains("+# Small"));
    c.close().await;
}

fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(b))
}
