//! History undo/redo (docs/contract.md#history) through the real binary: rmcp stdio clients and the CLI.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::util::{Env, Reply, bin};

/// Every file of the vault outside `.vaultgate/` and the inbox: path → bytes.
fn snapshot(vault: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let rel = e.path().strip_prefix(root).unwrap().to_str().unwrap().to_owned();
            if rel == ".vaultgate" || rel == "inbox" {
                continue;
            }
            if e.file_type().unwrap().is_dir() {
                walk(root, &e.path(), out);
            } else {
                out.insert(rel, std::fs::read(e.path()).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(vault, vault, &mut out);
    out
}

/// What the history tests ask of a checked session.
trait History {
    async fn status(&self) -> Value;
    async fn undo(&self, id: &Value, key: &str) -> Reply;
    async fn redo(&self, id: &Value, key: &str) -> Reply;
    async fn apply(&self, p: &Value) -> Value;
    async fn new_note(&self, path: &str, content: &str) -> Value;
    async fn patch(&self, path: &str, content: &str) -> Value;
}

impl History for crate::util::Checked {
    async fn status(&self) -> Value {
        self.ok("history_status", json!({})).await
    }

    async fn undo(&self, id: &Value, key: &str) -> Reply {
        self.call(
            "history_undo",
            json!({"expectedHistoryEntryId": id, "idempotencyKey": key}),
        )
        .await
    }

    async fn redo(&self, id: &Value, key: &str) -> Reply {
        self.call(
            "history_redo",
            json!({"expectedHistoryEntryId": id, "idempotencyKey": key}),
        )
        .await
    }

    /// Applies a proposal the `propose_*` answer `p` describes; returns its `historyEntryId`.
    async fn apply(&self, p: &Value) -> Value {
        let a = self
            .ok(
                "apply_proposal",
                json!({"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": format!("apply-{}", p["id"].as_str().unwrap())}),
            )
            .await;
        assert_eq!(a["applied"], true, "{a}");
        a["historyEntryId"].clone()
    }

    async fn new_note(&self, path: &str, content: &str) -> Value {
        let p = self
            .ok(
                "propose_new_note",
                json!({"path": path, "content": content, "reason": "history test"}),
            )
            .await;
        self.apply(&p).await
    }

    async fn patch(&self, path: &str, content: &str) -> Value {
        let hash = self.ok("read_note", json!({"path": path})).await["hash"].clone();
        let p = self
            .ok(
                "propose_note_patch",
                json!({"path": path, "baseHash": hash, "content": content, "reason": "history test"}),
            )
            .await;
        self.apply(&p).await
    }
}

/// A schema-checking client that lists the three history tools.
struct Agent;

impl Agent {
    async fn connect(env: &Env, token: &str) -> crate::util::Checked {
        let c = crate::util::Checked::open(env, token).await;
        for tool in ["history_status", "history_undo", "history_redo"] {
            assert!(c.lists(tool), "{tool} is listed with an outputSchema");
        }
        c
    }
}

/// The CLI with extra environment (a failpoint).
fn run_with(env: &Env, vars: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = Command::new(bin());
    cmd.arg("--home")
        .arg(&env.home)
        .args(args)
        .env_remove("VAULTGATE_HOME")
        .env_remove("VAULTGATE_TOKEN")
        .env_remove("VAULTGATE_TEST_FAILPOINT")
        .env("USER", "tester")
        .stdin(std::process::Stdio::null());
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn cli_status(env: &Env) -> Value {
    serde_json::from_str(&env.ok(&["history", "status", "--json"])).unwrap()
}

/// Audit records of one tool, as `audit tail --json` shows them.
fn audited(env: &Env, tool: &str) -> Vec<Value> {
    let v: Value = serde_json::from_str(&env.ok(&["audit", "tail", "-n", "1000", "--json"])).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .filter(|r| r["tool"] == tool)
        .cloned()
        .collect()
}

#[tokio::test]
async fn undo_of_a_new_note_removes_it_and_redo_restores_it() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let c = Agent::connect(&env, &token).await;
    assert_eq!(c.status().await, json!({"transitionInProgress": false}));
    let before = snapshot(&env.vault);
    let h = c.new_note("z/fresh.md", "# Fresh\n\nnew text\n").await;
    let after = snapshot(&env.vault);
    assert_eq!(
        c.status().await,
        json!({"undoTop": h, "transitionInProgress": false})
    );

    let s = c.undo(&h, "u1").await.ok();
    assert_eq!(s, json!({"redoTop": h, "transitionInProgress": false}));
    assert!(!env.vault.join("z/fresh.md").exists());
    assert_eq!(snapshot(&env.vault), before);
    assert_eq!(c.status().await, s);

    // A lost answer retried with the same key replays it and does nothing; another use of the key is refused.
    assert_eq!(c.undo(&h, "u1").await.ok(), s);
    assert_eq!(c.redo(&h, "u1").await.code(), "IDEMPOTENCY_CONFLICT");
    assert_eq!(snapshot(&env.vault), before);

    let s = c.redo(&h, "r1").await.ok();
    assert_eq!(s, json!({"undoTop": h, "transitionInProgress": false}));
    assert_eq!(snapshot(&env.vault), after);
    assert_eq!(
        std::fs::read(env.vault.join("z/fresh.md")).unwrap(),
        b"# Fresh\n\nnew text\n"
    );
    let found = c.ok("search_note_content", json!({"query": "new text"})).await;
    assert_eq!(found["hits"][0]["path"], "z/fresh.md");

    // Each call is audited once (the replay too), and the chain holds.
    assert_eq!(audited(&env, "history_undo").len(), 2);
    assert_eq!(
        audited(&env, "history_redo").len(),
        2,
        "the conflict and the redo"
    );
    env.ok(&["audit", "verify"]);
    c.close().await;
}

#[tokio::test]
async fn undo_of_a_patch_restores_the_bytes_exactly() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let c = Agent::connect(&env, &token).await;
    // CRLF, no final newline, and non-ASCII: bytes, not text, come back.
    std::fs::write(
        env.vault.join("z/softmax.md"),
        "---\r\ntitle: Softmax\r\n---\r\n注意 softmax",
    )
    .unwrap();
    let before = snapshot(&env.vault);
    let h = c.patch("z/softmax.md", "# Softmax\n\nrewritten\n").await;
    let patched = snapshot(&env.vault);
    assert_ne!(patched, before);

    c.undo(&h, "u1").await.ok();
    assert_eq!(snapshot(&env.vault), before);
    c.redo(&h, "r1").await.ok();
    assert_eq!(snapshot(&env.vault), patched);
    env.ok(&["audit", "verify"]);
    c.close().await;
}

#[tokio::test]
async fn undo_of_a_delete_restores_the_note_from_the_trash() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let c = Agent::connect(&env, &token).await;
    let before = snapshot(&env.vault);
    let hash = c.ok("read_note", json!({"path": "z/transformer.md"})).await["hash"].clone();
    let p = c
        .ok(
            "propose_delete",
            json!({"path": "z/transformer.md", "baseHash": hash, "reason": "history test"}),
        )
        .await;
    let h = c.apply(&p).await;
    let trash = env
        .vault
        .join(".vaultgate/trash")
        .join(p["id"].as_str().unwrap())
        .join("z/transformer.md");
    assert!(!env.vault.join("z/transformer.md").exists());
    assert!(trash.is_file(), "applied deletes go to the trash");
    let deleted = snapshot(&env.vault);

    c.undo(&h, "u1").await.ok();
    assert_eq!(snapshot(&env.vault), before);
    assert!(!trash.exists(), "the restored note is no longer in the trash");
    let read = c.ok("read_note", json!({"path": "z/transformer.md"})).await;
    assert_eq!(read["hash"], hash);

    c.redo(&h, "r1").await.ok();
    assert_eq!(snapshot(&env.vault), deleted);
    assert!(trash.is_file(), "redo puts it back in the trash");
    env.ok(&["audit", "verify"]);
    c.close().await;
}

#[tokio::test]
async fn undo_of_a_move_restores_the_old_path_and_the_links_in_other_notes() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let c = Agent::connect(&env, &token).await;
    let before = snapshot(&env.vault);
    let p = c
        .ok(
            "propose_move",
            json!({"from": "z/attention.md", "to": "ml/attention-mechanism.md", "reason": "history test"}),
        )
        .await;
    let rewrites = p["linkRewrites"].as_array().unwrap();
    assert!(rewrites.len() >= 3, "several notes link to it: {p}");
    let h = c.apply(&p).await;
    let moved = snapshot(&env.vault);
    assert!(!moved.contains_key("z/attention.md"));
    assert!(moved.contains_key("ml/attention-mechanism.md"));
    for r in rewrites {
        let path = r["path"].as_str().unwrap();
        if path != "z/attention.md" {
            assert_ne!(moved[path], before[path], "{path} was rewritten");
        }
    }

    // Byte for byte: the note at its old path, every rewritten link as it was.
    c.undo(&h, "u1").await.ok();
    assert_eq!(snapshot(&env.vault), before);
    let related = c.ok("get_related_notes", json!({"path": "z/attention.md"})).await;
    assert!(related["backlinks"].as_array().unwrap().len() >= 3, "{related}");

    c.redo(&h, "r1").await.ok();
    assert_eq!(snapshot(&env.vault), moved);
    c.undo(&h, "u2").await.ok();
    assert_eq!(snapshot(&env.vault), before);
    env.ok(&["audit", "verify"]);
    c.close().await;
}

#[tokio::test]
async fn one_history_is_shared_by_every_client() {
    let env = Env::new();
    let (_, a_token) = env.token("client-a", "auto");
    let (_, b_token) = env.token("client-b", "auto");
    let a = Agent::connect(&env, &a_token).await;
    let b = Agent::connect(&env, &b_token).await;
    let h = a.new_note("z/from-a.md", "# From A\n").await;

    // B sees A's change on top and undoes it.
    let top = b.status().await;
    assert_eq!(top["undoTop"], h);
    let s = b.undo(&top["undoTop"], "b-undo").await.ok();
    assert_eq!(s["redoTop"], h);
    assert!(!env.vault.join("z/from-a.md").exists());
    // A sees it undone and redoes it; its own key space is separate from B's.
    assert_eq!(a.status().await["redoTop"], h);
    a.redo(&h, "b-undo").await.ok();
    assert!(env.vault.join("z/from-a.md").is_file());
    assert_eq!(
        b.status().await,
        json!({"undoTop": h, "transitionInProgress": false})
    );
    a.close().await;
    b.close().await;
}

#[tokio::test]
async fn an_expected_id_that_is_not_the_top_is_refused_and_nothing_changes() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let c = Agent::connect(&env, &token).await;
    // Nothing to undo or redo yet.
    assert_eq!(c.undo(&json!("h_none"), "k0").await.code(), "HISTORY_NOT_TOP");
    let h1 = c.new_note("z/one.md", "# One\n").await;
    let h2 = c.new_note("z/two.md", "# Two\n").await;
    let before = snapshot(&env.vault);

    assert_eq!(c.undo(&h1, "k1").await.code(), "HISTORY_NOT_TOP");
    assert_eq!(c.undo(&json!("h_unknown"), "k2").await.code(), "HISTORY_NOT_TOP");
    assert_eq!(c.redo(&h2, "k3").await.code(), "HISTORY_NOT_TOP");
    assert_eq!(snapshot(&env.vault), before);
    assert_eq!(c.status().await["undoTop"], h2);

    // Undo walks down the history one entry at a time; redo walks back up in order.
    c.undo(&h2, "k4").await.ok();
    let s = c.undo(&h1, "k5").await.ok();
    assert_eq!(s, json!({"redoTop": h1, "transitionInProgress": false}));
    assert_eq!(c.redo(&h2, "k6").await.code(), "HISTORY_NOT_TOP");
    let s = c.redo(&h1, "k7").await.ok();
    assert_eq!(
        s,
        json!({"undoTop": h1, "redoTop": h2, "transitionInProgress": false})
    );
    // Bad arguments are refused as such.
    assert_eq!(
        c.code(
            "history_undo",
            json!({"expectedHistoryEntryId": h1, "idempotencyKey": ""})
        )
        .await,
        "INVALID_ARGUMENT"
    );
    assert_eq!(
        c.code("history_undo", json!({"expectedHistoryEntryId": h1}))
            .await,
        "INVALID_ARGUMENT"
    );
    c.close().await;
}

#[tokio::test]
async fn an_outside_edit_makes_the_top_stale_and_undo_writes_nothing() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let c = Agent::connect(&env, &token).await;
    let h = c.patch("z/softmax.md", "# Softmax\n\nby the agent\n").await;
    assert_eq!(c.status().await.get("staleTop"), None);

    std::fs::write(env.vault.join("z/softmax.md"), "# Softmax\n\nby a person\n").unwrap();
    let before = snapshot(&env.vault);
    assert_eq!(
        c.status().await,
        json!({"undoTop": h, "staleTop": h, "transitionInProgress": false})
    );
    assert_eq!(c.undo(&h, "u1").await.code(), "HISTORY_STALE");
    assert_eq!(snapshot(&env.vault), before, "the person's edit is kept");
    assert_eq!(c.status().await["undoTop"], h);
    let refused = audited(&env, "history_undo");
    assert_eq!(refused.last().unwrap()["code"], "HISTORY_STALE");

    // A deleted file is stale too.
    std::fs::remove_file(env.vault.join("z/softmax.md")).unwrap();
    assert_eq!(c.undo(&h, "u2").await.code(), "HISTORY_STALE");
    assert!(!env.vault.join("z/softmax.md").exists());
    c.close().await;
}

#[tokio::test]
async fn a_new_apply_after_an_undo_clears_redo() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let c = Agent::connect(&env, &token).await;
    let h1 = c.new_note("z/one.md", "# One\n").await;
    c.undo(&h1, "u1").await.ok();
    assert_eq!(c.status().await["redoTop"], h1);

    let h2 = c.new_note("z/two.md", "# Two\n").await;
    assert_eq!(
        c.status().await,
        json!({"undoTop": h2, "transitionInProgress": false})
    );
    assert_eq!(c.redo(&h1, "r1").await.code(), "HISTORY_NOT_TOP");
    assert!(!env.vault.join("z/one.md").exists());
    c.close().await;
}

#[tokio::test]
async fn read_and_propose_tiers_cannot_undo_or_redo() {
    let env = Env::new();
    let (_, writer) = env.token("writer", "auto");
    let w = Agent::connect(&env, &writer).await;
    let h = w.new_note("z/one.md", "# One\n").await;
    for tier in ["read", "propose"] {
        let (_, token) = env.token(tier, tier);
        let c = Agent::connect(&env, &token).await;
        assert_eq!(c.status().await["undoTop"], h, "{tier} may read the history");
        assert_eq!(c.undo(&h, "u").await.code(), "CAPABILITY_DENIED", "{tier}");
        assert_eq!(c.redo(&h, "r").await.code(), "CAPABILITY_DENIED", "{tier}");
        c.close().await;
    }
    assert!(env.vault.join("z/one.md").is_file());
    assert_eq!(w.status().await["undoTop"], h);
    w.close().await;
    env.ok(&["audit", "verify"]);
}

#[tokio::test]
async fn the_cli_shows_undoes_and_redoes_the_top() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let c = Agent::connect(&env, &token).await;
    let h = c.new_note("z/fresh.md", "# Fresh\n").await;
    c.close().await;
    let id = h.as_str().unwrap();

    assert_eq!(
        cli_status(&env),
        json!({"undoTop": h, "transitionInProgress": false})
    );
    let human = env.ok(&["history", "status", "--vault", "basic"]);
    assert!(human.contains(id), "{human}");

    // Without a terminal and without --yes: refused, nothing changes.
    for cmd in ["undo", "redo"] {
        let out = env.run(&["history", cmd]);
        assert_eq!(out.status.code(), Some(1), "history {cmd}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("--yes"));
    }
    assert!(env.vault.join("z/fresh.md").is_file());

    let out = env.ok(&["history", "undo", "--yes"]);
    assert!(
        out.contains(id) && out.contains("z/fresh.md"),
        "shows the entry: {out}"
    );
    assert!(!env.vault.join("z/fresh.md").exists());
    assert_eq!(
        cli_status(&env),
        json!({"redoTop": h, "transitionInProgress": false})
    );
    // Nothing left to undo.
    let out = env.run(&["history", "undo", "--yes"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("HISTORY_NOT_TOP"));

    env.ok(&["history", "redo", "--yes", "--vault", "basic"]);
    assert_eq!(std::fs::read(env.vault.join("z/fresh.md")).unwrap(), b"# Fresh\n");
    assert_eq!(
        cli_status(&env),
        json!({"undoTop": h, "transitionInProgress": false})
    );
    let undos = audited(&env, "history_undo");
    assert_eq!(undos.len(), 2, "the undo and the refused one");
    assert_eq!(undos[0]["actor"], "cli:tester");
    env.ok(&["audit", "verify"]);
}

/// The steps of the undo/redo transaction (docs/contract.md#proposals "Rules of the write path"), in order.
const HISTORY_STEPS: [&str; 5] = [
    "history_after_intent",
    "history_after_first_op",
    "history_after_write",
    "history_after_audit",
    "history_after_commit",
];

/// Success records of `tool` for history entry `h`: (the call's own, `history.recovered`).
fn history_ok_records(env: &Env, tool: &str, h: &Value) -> (usize, usize) {
    let mine: Vec<Value> = audited(env, tool)
        .into_iter()
        .filter(|r| r["outcome"] == "ok" && r["target"] == *h && r["event"] != "apply.rolled_back")
        .collect();
    let recovered = mine.iter().filter(|r| r["event"] == "history.recovered").count();
    (mine.len() - recovered, recovered)
}

#[tokio::test]
async fn an_interrupted_undo_is_finished_before_anything_else() {
    for step in HISTORY_STEPS {
        let env = Env::new();
        let (_, token) = env.token("writer", "auto");
        let c = Agent::connect(&env, &token).await;
        let before = snapshot(&env.vault);
        let p = c
            .ok(
                "propose_move",
                json!({"from": "z/attention.md", "to": "ml/attention-mechanism.md", "reason": "history test"}),
            )
            .await;
        let h = c.apply(&p).await;
        c.close().await;
        let moved = snapshot(&env.vault);

        // The process dies at the step.
        let out = run_with(
            &env,
            &[("VAULTGATE_TEST_FAILPOINT", step)],
            &["history", "undo", "--yes"],
        );
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&out.status),
            Some(6),
            "{step}: the undo aborts at the failpoint: {}",
            String::from_utf8_lossy(&out.stderr)
        );

        // The next process that opens the home (here `history status`) finishes it first:
        // nothing else touched the files, so every one is at its before or after state.
        assert_eq!(
            cli_status(&env),
            json!({"redoTop": h, "transitionInProgress": false}),
            "{step}"
        );
        assert_eq!(snapshot(&env.vault), before, "{step}: the undo is finished");
        // Exactly one success record: the call's own once its audit line was written, else
        // the one recovery writes.
        let want = if step == "history_after_audit" || step == "history_after_commit" {
            (1, 0)
        } else {
            (0, 1)
        };
        assert_eq!(
            history_ok_records(&env, "history_undo", &h),
            want,
            "{step}: (call, history.recovered) success records"
        );

        // Nothing is blocked: redo and undo work as usual.
        env.ok(&["history", "redo", "--yes"]);
        assert_eq!(
            cli_status(&env),
            json!({"undoTop": h, "transitionInProgress": false}),
            "{step}"
        );
        assert_eq!(snapshot(&env.vault), moved, "{step}: redone");
        let c = Agent::connect(&env, &token).await;
        c.undo(&h, "u1").await.ok();
        assert_eq!(snapshot(&env.vault), before, "{step}");
        c.close().await;
        env.ok(&["audit", "verify"]);
    }
}

#[tokio::test]
async fn an_interrupted_undo_meeting_an_outside_edit_rolls_back_and_keeps_the_edit() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let c = Agent::connect(&env, &token).await;
    let p = c
        .ok(
            "propose_move",
            json!({"from": "z/attention.md", "to": "ml/attention-mechanism.md", "reason": "history test"}),
        )
        .await;
    let h = c.apply(&p).await;
    c.close().await;
    let moved = snapshot(&env.vault);

    let out = run_with(
        &env,
        &[("VAULTGATE_TEST_FAILPOINT", "history_after_write")],
        &["history", "undo", "--yes"],
    );
    assert!(!out.status.success());
    // While nothing ran, a person edits one of the notes whose links the undo had put back.
    let edited = p["linkRewrites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["path"].as_str().unwrap().to_owned())
        .find(|path| path != "z/attention.md")
        .unwrap();
    std::fs::write(env.vault.join(&edited), "# Mine now\n").unwrap();

    // Recovery cannot finish the undo without overwriting that edit: it puts back what it wrote.
    let out = env.run(&["history", "undo", "--yes"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("HISTORY_STALE"));
    let mut expected = moved.clone();
    expected.insert(edited, b"# Mine now\n".to_vec());
    assert_eq!(snapshot(&env.vault), expected);
    assert_eq!(
        cli_status(&env),
        json!({"undoTop": h, "staleTop": h, "transitionInProgress": false})
    );
    let rolled: Vec<Value> = audited(&env, "history_undo")
        .into_iter()
        .filter(|r| r["event"] == "apply.rolled_back")
        .collect();
    assert_eq!(rolled.len(), 1, "one rollback record for the undo: {rolled:?}");
    assert_eq!(rolled[0]["target"], h, "the rollback names the history entry");
    assert!(
        audited(&env, "history_undo")
            .iter()
            .all(|r| r["event"] != "history.rolled_back"),
        "rollbacks are recorded as apply.rolled_back for every kind"
    );
    env.ok(&["audit", "verify"]);
}

/// Issue 34's deterministic intent: an apply reads the clock once, when its intent is written;
/// the proposal's `decidedAt`, the note history's `ts` and the `_applied.jsonl` line are that one
/// instant.
#[tokio::test]
async fn an_apply_has_one_instant_in_its_proposal_its_history_and_its_applied_line() {
    let env = crate::util::Env::new();
    let (_, token) = env.token("writer", "auto");
    let c = env.stdio(&token).await;
    let p = crate::util::propose_new(&c, "notes/instant.md", "# Instant\n", "one instant").await;
    let out = c
        .call(
            "apply_proposal",
            serde_json::json!({"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": "instant-1"}),
        )
        .await
        .ok();
    assert_eq!(out["applied"], true);
    let shown = c
        .call("get_proposal", serde_json::json!({"id": p["id"]}))
        .await
        .ok();
    let history = c
        .call(
            "get_note_history",
            serde_json::json!({"path": "notes/instant.md"}),
        )
        .await
        .ok();
    c.close().await;
    let decided = shown["decidedAt"].as_str().expect("decidedAt");
    assert_eq!(history["entries"][0]["ts"], decided, "{history}");
    let applied = std::fs::read_to_string(env.vault.join("inbox/_applied.jsonl")).unwrap();
    let line: serde_json::Value = serde_json::from_str(applied.lines().last().unwrap()).unwrap();
    assert_eq!(line["id"], p["id"]);
    assert_eq!(line["ts"], decided, "{line}");
}
