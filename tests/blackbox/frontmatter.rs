//! docs/contract.md#notes-as-data-and-attachments `propose_frontmatter_update`, through the real binary: a patch that changes only the
//! frontmatter block (created when absent), applied like any patch; values YAML would misread
//! round-trip as strings; every refusal is INVALID_ARGUMENT and proposes nothing; docs/contract.md#limits-and-pagination limits.

use serde_json::{Map, Value, json};

use crate::util::{Client, Env, Reply};

async fn read(c: &Client, path: &str) -> Value {
    c.call("read_note", json!({"path": path})).await.ok()
}

fn write(env: &Env, path: &str, text: &str) {
    let p = env.vault.join(path);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn file(env: &Env, path: &str) -> String {
    std::fs::read_to_string(env.vault.join(path)).unwrap()
}

/// Proposes `update` on `path` with the hash read_note gives now.
async fn propose(c: &Client, path: &str, mut update: Value) -> Reply {
    let hash = read(c, path).await["hash"].clone();
    let args = update.as_object_mut().unwrap();
    args.insert("path".into(), json!(path));
    args.insert("baseHash".into(), hash);
    args.insert("reason".into(), json!("frontmatter test"));
    c.call("propose_frontmatter_update", update).await
}

async fn pending(c: &Client) -> usize {
    c.call("list_proposals", json!({"status": "pending"})).await.ok()["proposals"]
        .as_array()
        .unwrap()
        .len()
}

fn fm(note: &Value) -> Map<String, Value> {
    note["frontmatter"].as_object().cloned().unwrap_or_default()
}

/// One case: a note's text, its body (what follows the block), an update, and the keys it sets
/// (value) or removes (null) in the frontmatter map.
struct Case {
    path: &'static str,
    text: &'static str,
    body: &'static str,
    update: Value,
    changes: Value,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            path: "fm/commented.md",
            text: "---\n# reading notes\nzeta: last-first # odd order\ntitle: Old title\nyear: 2017 # the year\nauthors:\n  - A. Vaswani\n  - N. Shazeer\ntags: [paper, ml]\n---\n# Body\n\nText with #inline tag.\n---\nA rule above.\n",
            body: "# Body\n\nText with #inline tag.\n---\nA rule above.\n",
            update: json!({"set": {"read": true, "year": 2018}, "unset": ["zeta"], "addTags": ["nlp"]}),
            changes: json!({"read": true, "year": 2018, "zeta": null, "tags": ["paper", "ml", "nlp"]}),
        },
        Case {
            path: "fm/none.md",
            text: "# No frontmatter\n\nJust a body, with a #tag.\n",
            body: "# No frontmatter\n\nJust a body, with a #tag.\n",
            update: json!({"set": {"title": "Now titled", "authors": ["X", "Y"]}, "addTags": ["new"]}),
            changes: json!({"title": "Now titled", "authors": ["X", "Y"], "tags": ["new"]}),
        },
        Case {
            path: "fm/crlf.md",
            text: "---\r\ntitle: Windows\r\ntags:\r\n  - a\r\n  - b\r\n---\r\nBody line one\r\nline two\r\n",
            body: "Body line one\r\nline two\r\n",
            update: json!({"set": {"status": "done"}, "removeTags": ["a"], "addTags": ["c"]}),
            changes: json!({"status": "done", "tags": ["b", "c"]}),
        },
        Case {
            path: "fm/中文.md",
            text: "---\n标题: 旧的\n作者: [张三, 李四]\nread: false\n---\n正文不变。#标签\n",
            body: "正文不变。#标签\n",
            update: json!({"set": {"标题": "新的标题", "read": true, "出版社": "人民邮电出版社"}}),
            changes: json!({"标题": "新的标题", "read": true, "出版社": "人民邮电出版社"}),
        },
    ]
}

/// After apply, `read_note`'s map is the old one with exactly the intended changes, the body is
/// byte for byte the same, and a CRLF note has only CRLF line endings.
#[tokio::test]
async fn only_the_named_keys_change_and_the_body_keeps_its_bytes() {
    let env = Env::new();
    for c in cases() {
        write(&env, c.path, c.text);
    }
    let (_, token) = env.token("fm", "propose");
    let a = env.stdio(&token).await;
    for c in cases() {
        let before = read(&a, c.path).await;
        let mut want = fm(&before);
        for (k, v) in c.changes.as_object().unwrap() {
            if v.is_null() {
                want.remove(k);
            } else {
                want.insert(k.clone(), v.clone());
            }
        }
        let p = propose(&a, c.path, c.update).await.ok();
        assert_eq!(p["baseHash"], before["hash"], "{}", c.path);
        assert!(p["diff"].as_str().unwrap().contains("@@"), "{}: {p}", c.path);
        assert_eq!(file(&env, c.path), c.text, "propose never touches the note");
        env.ok(&["apply", "--only", p["id"].as_str().unwrap(), "--yes"]);

        let after = file(&env, c.path);
        assert!(after.ends_with(c.body), "{}: the body changed:\n{after}", c.path);
        assert!(after.starts_with("---"), "{}", c.path);
        let note = read(&a, c.path).await;
        assert_eq!(fm(&note), want, "{}:\n{after}", c.path);
        if c.text.contains("\r\n") {
            assert_eq!(
                after.matches('\n').count(),
                after.matches("\r\n").count(),
                "{after:?}"
            );
        }
    }
    // The comments and order of the keys left alone stay as they were.
    let commented = file(&env, "fm/commented.md");
    assert!(
        commented.starts_with("---\n# reading notes\ntitle: Old title\nyear: 2018 # the year\nauthors:\n  - A. Vaswani\n  - N. Shazeer\n"),
        "{commented}"
    );
    a.close().await;
}

/// Values plain YAML would read as something else are written quoted and read back as strings.
#[tokio::test]
async fn values_yaml_would_misread_round_trip_as_strings() {
    let env = Env::new();
    write(&env, "fm/odd.md", "---\ntitle: Odd values\n---\nbody\n");
    let (_, token) = env.token("fm", "propose");
    let a = env.stdio(&token).await;
    let odd = [
        "---",
        "*x",
        "&anchor",
        "<<",
        "yes",
        "no",
        "~",
        "null",
        "true",
        "1.5",
        "0042",
        " lead",
        "trail ",
        "a #b",
        "k: v",
        "two\nlines",
        "[x]",
        "{y}",
        "...",
        "- item",
        "!tag",
        "%",
    ];
    let set: Map<String, Value> = odd
        .iter()
        .enumerate()
        .map(|(i, v)| (format!("v{i:02}"), json!(v)))
        .collect();
    let p = propose(&a, "fm/odd.md", json!({"set": set})).await.ok();
    env.ok(&["apply", "--only", p["id"].as_str().unwrap(), "--yes"]);
    let got = fm(&read(&a, "fm/odd.md").await);
    for (k, v) in &set {
        assert_eq!(got.get(k), Some(v), "{k}: {}", file(&env, "fm/odd.md"));
    }
    // Read back by a YAML 1.1 reader (Obsidian's), a plain `yes` or `null` would be a boolean or
    // nothing: every one of these values must stand quoted in the file itself.
    let text = file(&env, "fm/odd.md");
    for k in set.keys() {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{k}: ")))
            .unwrap_or_else(|| panic!("{k} is not on a line of its own: {text}"));
        assert!(
            line.starts_with('"') || line.starts_with('\''),
            "{k} is written plain as {line:?}"
        );
    }
    assert_eq!(got["title"], "Odd values");
    assert!(text.ends_with("\n---\nbody\n"));
    a.close().await;
}

/// A stale base is refused like any patch: at propose when the hash is not the note's, at apply
/// when the note changed after the proposal.
#[tokio::test]
async fn a_stale_base_is_refused_at_propose_and_at_apply() {
    let env = Env::new();
    write(&env, "fm/stale.md", "---\ntitle: T\n---\nbody\n");
    let (_, token) = env.token("fm", "full");
    let a = env.stdio(&token).await;
    let wrong = a
        .call(
            "propose_frontmatter_update",
            json!({"path": "fm/stale.md", "baseHash": "0".repeat(64), "set": {"k": 1}, "reason": "r"}),
        )
        .await
        .code();
    assert_eq!(wrong, "PROPOSAL_STALE_BASE");

    let p = propose(&a, "fm/stale.md", json!({"set": {"k": 1}})).await.ok();
    write(&env, "fm/stale.md", "---\ntitle: T\n---\nbody edited meanwhile\n");
    let code = a
        .call(
            "apply_proposal",
            json!({"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": "fm-stale"}),
        )
        .await
        .code();
    assert_eq!(code, "PROPOSAL_STALE_BASE");
    assert_eq!(
        file(&env, "fm/stale.md"),
        "---\ntitle: T\n---\nbody edited meanwhile\n"
    );
    assert_eq!(pending(&a).await, 1, "the proposal stays pending");
    a.close().await;
}

/// Every refusal of docs/contract.md#notes-as-data-and-attachments is INVALID_ARGUMENT and leaves no proposal.
#[tokio::test]
async fn every_refusal_is_invalid_argument_and_proposes_nothing() {
    let env = Env::new();
    let big = format!("---\nblob: \"{}\"\n---\nbody\n", "x".repeat(70 * 1024));
    let notes: Vec<(&str, String)> = vec![
        ("fm/list.md", "---\n- a\n- b\n---\nbody\n".into()),
        ("fm/scalar.md", "---\njust text\n---\nbody\n".into()),
        ("fm/invalid.md", "---\na: [unclosed\n---\nbody\n".into()),
        ("fm/big.md", big),
        (
            "fm/ok.md",
            "---\ntitle: T\ntags: [kept]\n---\nbody with #inline\n".into(),
        ),
    ];
    for (p, t) in &notes {
        write(&env, p, t);
    }
    let (_, token) = env.token("fm", "propose");
    let a = env.stdio(&token).await;
    let refused = [
        ("fm/list.md", json!({"set": {"k": 1}}), "a sequence block"),
        ("fm/scalar.md", json!({"set": {"k": 1}}), "a scalar block"),
        ("fm/invalid.md", json!({"set": {"k": 1}}), "invalid YAML"),
        ("fm/big.md", json!({"set": {"k": 1}}), "a block over 64 KiB"),
        (
            "fm/ok.md",
            json!({"set": {"k": 1}, "unset": ["k"]}),
            "a key set and unset",
        ),
        (
            "fm/ok.md",
            json!({"set": {"title": "T"}}),
            "setting the same value",
        ),
        (
            "fm/ok.md",
            json!({"unset": ["absent"]}),
            "unsetting an absent key",
        ),
        (
            "fm/ok.md",
            json!({"addTags": ["kept"]}),
            "adding a tag already there",
        ),
        ("fm/ok.md", json!({}), "an empty update"),
        (
            "fm/ok.md",
            json!({"removeTags": ["inline"]}),
            "removing an inline #tag",
        ),
        ("fm/ok.md", json!({"addTags": ["a b"]}), "a tag with a space"),
        (
            "fm/ok.md",
            json!({"addTags": ["x"], "removeTags": ["x"]}),
            "a tag added and removed",
        ),
        (
            "fm/ok.md",
            json!({"set": {"tags": ["x"]}, "addTags": ["y"]}),
            "tags set and added",
        ),
    ];
    for (path, update, why) in refused {
        let r = propose(&a, path, update).await;
        match r {
            Reply::Err(e) => assert_eq!(e["code"], "INVALID_ARGUMENT", "{why}: {e}"),
            Reply::Ok(v) => panic!("{why} was proposed: {v}"),
        }
    }
    assert_eq!(pending(&a).await, 0, "nothing was proposed");
    for (p, t) in &notes {
        assert_eq!(&file(&env, p), t, "{p} untouched");
    }
    // The same note takes a real change.
    let ok = propose(&a, "fm/ok.md", json!({"removeTags": ["kept"]}))
        .await
        .ok();
    assert!(ok["diff"].as_str().unwrap().contains("+tags: []"), "{ok}");
    a.close().await;
}

/// docs/contract.md#limits-and-pagination: at most 200 entries in each list, each value at most 4 KiB, refused naming the limit.
#[tokio::test]
async fn limits_are_refused_naming_them() {
    let env = Env::new();
    write(&env, "fm/limits.md", "---\ntitle: T\n---\nbody\n");
    let (_, token) = env.token("fm", "propose");
    let a = env.stdio(&token).await;
    let many: Map<String, Value> = (0..201).map(|i| (format!("k{i}"), json!(i))).collect();
    let names: Vec<String> = (0..201).map(|i| format!("t{i}")).collect();
    let over = [
        (json!({"set": many}), "max_entries"),
        (json!({"unset": names}), "max_entries"),
        (json!({"addTags": names}), "max_entries"),
        (json!({"removeTags": names}), "max_entries"),
        (json!({"set": {"k": "v".repeat(4097)}}), "max_value_bytes"),
        (json!({"addTags": ["t".repeat(4097)]}), "max_value_bytes"),
    ];
    for (update, limit) in over {
        match propose(&a, "fm/limits.md", update).await {
            Reply::Err(e) => {
                assert_eq!(e["code"], "INVALID_ARGUMENT", "{e}");
                assert!(e["message"].as_str().unwrap().contains(limit), "{e}");
            }
            Reply::Ok(v) => panic!("over {limit} was proposed: {v}"),
        }
    }
    // At the limits themselves: accepted.
    // (One value at 4 KiB: 200 of them would pass the 64 KiB block limit, refused on its own.)
    let at: Map<String, Value> = (0..200)
        .map(|i| {
            (
                format!("k{i}"),
                json!(if i == 0 { "v".repeat(4096) } else { "v".into() }),
            )
        })
        .collect();
    propose(&a, "fm/limits.md", json!({"set": at})).await.ok();
    assert_eq!(pending(&a).await, 1);
    a.close().await;
}
