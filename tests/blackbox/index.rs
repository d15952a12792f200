//! The search index (docs/contract.md#search-and-the-index) through the real binary: a running server keeps it fresh from the
//! file watcher, `get_vault_overview.index` reports it, `vaultgate index` builds and rebuilds it,
//! and a broken index file never breaks a server.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::util::{Client, Env};

async fn overview_index(c: &Client) -> Value {
    c.call("get_vault_overview", json!({})).await.ok()["index"].clone()
}

/// Polls until the server answers from a fresh index (the first pass runs in the background).
async fn wait_fresh(c: &Client) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let index = overview_index(c).await;
        if index["fresh"] == true {
            return index;
        }
        assert!(Instant::now() < deadline, "the index never went fresh: {index}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn search(c: &Client, q: &str) -> Value {
    c.call("search_note_content", json!({ "query": q })).await.ok()
}

/// `(path, line)` of each hit.
fn hit_lines(v: &Value) -> Vec<(String, u64)> {
    v["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["path"].as_str().unwrap().to_owned(),
                h["line"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Polls `search_note_content` for `q` until a hit appears (at most `within`); returns how long.
async fn time_until_found(c: &Client, q: &str, within: Duration) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < within {
        if !search(c, q).await["hits"].as_array().unwrap().is_empty() {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    None
}

#[tokio::test]
async fn a_note_edited_on_disk_while_serving_is_found_within_a_second() {
    let env = Env::new();
    let (_, token) = env.token("reader", "read");
    let c = env.stdio(&token).await;
    let index = wait_fresh(&c).await;
    assert_eq!(index["staleFiles"], 0, "{index}");
    assert_ne!(index["indexedAt"], "1970-01-01T00:00:00Z", "{index}");
    assert!(
        search(&c, "quixotic-walrus").await["hits"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    // An existing note gains a new word: only re-indexing makes it a candidate. Twice (a busy
    // test machine may stall once); the quicker must be within a second.
    let path = env.vault.join("z/softmax.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut quickest = Duration::MAX;
    for word in ["quixotic-walrus", "laconic-heron"] {
        let now = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, format!("{now}A {word} appears.\n")).unwrap();
        let took = time_until_found(&c, word, Duration::from_secs(3))
            .await
            .unwrap_or_else(|| panic!("{word} is found within 3 s"));
        quickest = quickest.min(took);
    }
    assert!(quickest <= Duration::from_secs(1), "found after {quickest:?}");
    let lines = text.lines().count() as u64;
    assert_eq!(
        hit_lines(&search(&c, "QUIXOTIC-walrus").await),
        vec![("z/softmax.md".to_owned(), lines + 1)]
    );

    // A new note, and a deleted one.
    std::fs::write(
        env.vault.join("z/new-note.md"),
        "# New\n\nzebra-crossing 斑马线\n",
    )
    .unwrap();
    std::fs::remove_file(env.vault.join("notes/cooking.md")).unwrap();
    time_until_found(&c, "斑马线", Duration::from_secs(3))
        .await
        .expect("the new note is found");
    let index = wait_fresh(&c).await;
    assert_eq!(index["staleFiles"], 0);
    let o = c.call("get_vault_overview", json!({})).await.ok();
    let recent = c.call("list_recent_notes", json!({"limit": 200})).await.ok();
    let listed: Vec<&str> = recent["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["path"].as_str().unwrap())
        .collect();
    assert!(
        listed.contains(&"z/new-note.md") && !listed.contains(&"notes/cooking.md"),
        "{listed:?}"
    );
    assert_eq!(
        o["notes"].as_u64().unwrap() + o["standards"].as_u64().unwrap(),
        listed.len() as u64
    );
    c.close().await;
}

#[tokio::test]
async fn an_edit_that_keeps_size_and_mtime_becomes_searchable() {
    let env = Env::new();
    let (_, token) = env.token("reader", "read");
    let c = env.stdio(&token).await;
    wait_fresh(&c).await;
    let path = env.vault.join("z/softmax.md");
    let before = std::fs::read_to_string(&path).unwrap();
    let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
    // The same number of bytes, one word swapped, and the old mtime put back: an editor saving
    // within the file system's timestamp granularity looks exactly like this to a size and
    // mtime check.
    let word = "exponentiating";
    assert!(before.contains(word));
    let swapped = "q".repeat(word.len() - 4) + "zyxw";
    let after = before.replacen(word, &swapped, 1);
    assert_eq!(after.len(), before.len());
    assert!(search(&c, &swapped).await["hits"].as_array().unwrap().is_empty());
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    std::io::Write::write_all(&mut &f, after.as_bytes()).unwrap();
    f.set_modified(modified).unwrap();
    drop(f);
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(
        (meta.len(), meta.modified().unwrap()),
        (before.len() as u64, modified)
    );

    time_until_found(&c, &swapped, Duration::from_secs(10))
        .await
        .unwrap_or_else(|| panic!("{swapped}, written with the old size and mtime, is never found"));
    c.close().await;
}

#[test]
fn processes_starting_at_once_on_a_never_indexed_vault_build_its_index_once() {
    let env = Env::new();
    let extra = 3000;
    for i in 0..extra {
        let dir = env.vault.join(format!("gen/{:02}", i % 50));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(format!("note-{i:05}.md")),
            format!("# Note {i}\n\nGenerated text {i} for the build lock.\n"),
        )
        .unwrap();
    }
    let notes = extra + 11;
    let runs: Vec<std::process::Child> = (0..3)
        .map(|_| {
            std::process::Command::new(crate::util::bin())
                .arg("--home")
                .arg(&env.home)
                .arg("index")
                .env_remove("VAULTGATE_HOME")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut added = Vec::new();
    for run in runs {
        let out = run.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // "updated vault 'basic': N notes in the index (A added, U updated, R removed, K unchanged)"
        let n: usize = stdout
            .split_once('(')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no count of added notes in {stdout:?}"));
        assert!(
            stdout.contains(&format!("{notes} notes in the index")),
            "{stdout}"
        );
        added.push(n);
    }
    added.sort_unstable();
    assert_eq!(
        added,
        vec![0, 0, notes],
        "each of three processes started at once reports the notes it indexed"
    );
}

#[tokio::test]
async fn the_index_cli_builds_then_rebuilds_and_servers_use_it() {
    let env = Env::new();
    let out = env.ok(&["index"]);
    assert!(
        out.starts_with("updated vault 'basic': 11 notes in the index (11 added"),
        "{out}"
    );
    assert!(env.vault.join(".vaultgate/index.sqlite").is_file());
    let again = env.ok(&["index", "--vault", "basic"]);
    assert!(
        again.contains("(0 added, 0 updated, 0 removed, 11 unchanged)"),
        "{again}"
    );
    let rebuilt = env.run(&["index", "--rebuild"]);
    assert!(rebuilt.status.success());
    let stdout = String::from_utf8(rebuilt.stdout).unwrap();
    assert!(
        stdout.starts_with("rebuilt vault 'basic': 11 notes in the index (0 added, 11 updated"),
        "{stdout}"
    );
    // No terminal: no progress bar.
    assert!(!String::from_utf8_lossy(&rebuilt.stderr).contains("indexing"));

    let missing = env.run(&["index", "--vault", "nope"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("VAULT_NOT_FOUND"));

    let (_, token) = env.token("reader", "read");
    let c = env.stdio(&token).await;
    wait_fresh(&c).await;
    assert_eq!(
        hit_lines(&search(&c, "numerical stability").await),
        vec![("z/softmax.md".to_owned(), 10)]
    );
    // The index itself is never visible to a tool.
    assert_eq!(
        c.call("read_note", json!({"path": ".vaultgate/index.sqlite"}))
            .await
            .code(),
        "PATH_DENIED"
    );
    c.close().await;
}

#[tokio::test]
async fn a_corrupted_index_file_does_not_break_the_server() {
    let env = Env::new();
    env.ok(&["index"]);
    let file = env.vault.join(".vaultgate/index.sqlite");
    std::fs::write(&file, b"definitely not sqlite ".repeat(500)).unwrap();
    let _ = std::fs::remove_file(env.vault.join(".vaultgate/index.sqlite-wal"));
    let _ = std::fs::remove_file(env.vault.join(".vaultgate/index.sqlite-shm"));

    let (_, token) = env.token("reader", "read");
    let c = env.stdio(&token).await;
    let expected = vec![("z/softmax.md".to_owned(), 10)];
    assert_eq!(hit_lines(&search(&c, "numerical stability").await), expected);
    // Rebuilt in the background.
    wait_fresh(&c).await;
    assert_eq!(hit_lines(&search(&c, "numerical stability").await), expected);
    assert!(
        std::fs::read(&file).unwrap().starts_with(b"SQLite format 3\0"),
        "the broken index was rebuilt as a database"
    );

    // Broken again while serving, then a note changes: reads stay right, the index recovers.
    std::fs::write(&file, b"garbage again ".repeat(4000)).unwrap();
    assert_eq!(hit_lines(&search(&c, "numerical stability").await), expected);
    let tags = c.call("list_tags", json!({})).await.ok();
    assert!(!tags["tags"].as_array().unwrap().is_empty());
    std::fs::write(
        env.vault.join("z/after.md"),
        "# After\n\nnumerical stability again\n",
    )
    .unwrap();
    time_until_found(&c, "stability again", Duration::from_secs(3))
        .await
        .expect("found after the index broke");
    wait_fresh(&c).await;
    assert_eq!(
        hit_lines(&search(&c, "numerical stability").await),
        vec![("z/after.md".to_owned(), 3), ("z/softmax.md".to_owned(), 10)]
    );

    // Deleted while serving: noticed, rebuilt.
    std::fs::remove_file(&file).unwrap();
    assert_eq!(hit_lines(&search(&c, "numerical stability").await).len(), 2);
    wait_fresh(&c).await;
    assert!(file.is_file());
    c.close().await;
}

/// Two processes (a server and a stdio process, each with its own index worker on the one index)
/// apply edits to the same note in turn, as fast as they can: every apply answers once its notes
/// are indexed, and when both are done the index holds the note as it is on disk — its last token
/// found, no earlier one — although each apply's index update now runs after the vault's writer
/// is free.
#[tokio::test]
async fn two_processes_editing_one_note_leave_the_index_as_the_disk_is() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let srv = crate::http::Server::start(&env);
    let http = srv.client(&token).await;
    let stdio = env.stdio(&token).await;
    wait_fresh(&http).await;
    wait_fresh(&stdio).await;
    const NOTE: &str = "notes/contended.md";
    let first = "# Contended\n\nmarker zqtokstart\n";
    let p = crate::util::propose_new(&http, NOTE, first, "the contended note").await;
    http.call(
        "apply_proposal",
        json!({"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": "c-0"}),
    )
    .await
    .ok();

    async fn edit_rounds(c: &Client, who: &str, rounds: usize) -> Vec<String> {
        let mut mine = Vec::new();
        let mut done = 0;
        let mut attempt = 0;
        while done < rounds {
            attempt += 1;
            assert!(attempt < rounds * 20, "{who}: too many stale bases");
            let note = c.call("read_note", json!({"path": NOTE})).await.ok();
            let text = note["content"].as_str().unwrap();
            let token = format!("zqtok{who}{done}");
            let line = text.lines().last().unwrap().to_owned();
            let next = text.replacen(&line, &format!("marker {token}"), 1);
            let proposed = c
                .call(
                    "propose_note_patch",
                    json!({"path": NOTE, "baseHash": note["hash"], "content": next, "reason": "race"}),
                )
                .await;
            let crate::util::Reply::Ok(p) = proposed else {
                continue;
            };
            let applied = c
                .call(
                    "apply_proposal",
                    json!({"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": format!("{who}-{attempt}")}),
                )
                .await;
            if let crate::util::Reply::Ok(out) = applied {
                assert_eq!(out["index"], "updated", "{out}");
                mine.push(token);
                done += 1;
            }
        }
        mine
    }
    let (a, b) = tokio::join!(edit_rounds(&http, "h", 8), edit_rounds(&stdio, "s", 8));
    let text = std::fs::read_to_string(env.vault.join(NOTE)).unwrap();
    let last = text
        .lines()
        .last()
        .unwrap()
        .trim_start_matches("marker ")
        .to_owned();
    assert!(a.contains(&last) || b.contains(&last), "{text}");
    for c in [&http, &stdio] {
        assert_eq!(
            hit_lines(&search(c, &last).await),
            [(NOTE.to_owned(), 3)],
            "the last edit is indexed"
        );
        for old in a.iter().chain(&b).filter(|t| **t != last) {
            assert!(
                hit_lines(&search(c, old).await).is_empty(),
                "{old} was replaced, yet the index still finds it"
            );
        }
    }
    stdio.close().await;
    http.close().await;
}
