//! Proposals and the apply transaction (SPEC §6) through the real binary.

use serde_json::json;

use crate::util::Env;

#[tokio::test]
async fn a_new_note_is_proposed_then_applied_and_archived() {
    let env = Env::new();
    let (_, token) = env.token("writer", "auto");
    let c = env.stdio(&token).await;
    let p = c
        .call(
            "propose_new_note",
            json!({"path": "z/fresh.md", "content": "# Fresh\n\nnew text\n", "reason": "test"}),
        )
        .await
        .ok();
    assert!(
        !env.vault.join("z/fresh.md").exists(),
        "proposing writes nothing into the notes"
    );
    let id = p["id"].as_str().unwrap();
    let slug = p["slug"].as_str().unwrap();
    assert!(env.vault.join(format!("inbox/new/{slug}.md")).exists());
    let a = c
        .call(
            "apply_proposal",
            json!({"id": id, "proposalHash": p["proposalHash"], "idempotencyKey": "k1"}),
        )
        .await
        .ok();
    assert_eq!(a["applied"], true);
    assert_eq!(a["replayed"], false);
    assert_eq!(
        std::fs::read_to_string(env.vault.join("z/fresh.md")).unwrap(),
        "# Fresh\n\nnew text\n"
    );
    assert!(!env.vault.join(format!("inbox/new/{slug}.md")).exists());
    let again = c
        .call(
            "apply_proposal",
            json!({"id": id, "proposalHash": p["proposalHash"], "idempotencyKey": "k1"}),
        )
        .await
        .ok();
    assert_eq!(again["replayed"], true);
    assert_eq!(again["historyEntryId"], a["historyEntryId"]);
    let hits = c
        .call("search_note_content", json!({"query": "new text"}))
        .await
        .ok();
    assert_eq!(hits["hits"][0]["path"], "z/fresh.md");
    env.ok(&["audit", "verify"]);
    c.close().await;
}
