//! What every [`StateStore`] guarantees at a write's commit point, written once: each check takes
//! a [`StateWorld`] (a store plus what a test needs to set it up and look inside) and panics,
//! naming the guarantee, when the store breaks it. `inbox::State` runs it in this crate's tests; a
//! store elsewhere (a shared database) runs the same suite with the `conformance` feature.

use serde_json::json;

use super::state::{StateStore, transact};

/// A state store, and a view of it.
pub trait StateWorld {
    fn store(&self) -> &dyn StateStore;
    /// Creates a pending proposal `id` of `vault`.
    fn pending(&self, vault: &str, id: &str);
    /// Decides the proposal otherwise (a reject won the race).
    fn reject(&self, id: &str);
    /// `pending`, `applied`, `rejected`.
    fn status(&self, vault: &str, id: &str) -> String;
    fn revision(&self, vault: &str) -> u64;
    fn audit_head(&self) -> Option<inbox::AuditHead>;
    /// The answer recorded for `key` of `principal`, if any.
    fn key_answer(&self, principal: &str, key: &str) -> Option<serde_json::Value>;
    /// The vault's registered fingerprint.
    fn fingerprint(&self, vault: &str) -> Option<String>;
    /// How many intents of the vault are open.
    fn open_intents(&self, vault: &str) -> usize;
    /// A history entry's state (`done`, `undone`), if it exists.
    fn history_state(&self, vault: &str, id: &str) -> Option<String>;
    /// Creates a critical call's challenge `id` of `vault`, consumed, its intent open.
    fn consumed_challenge(&self, vault: &str, id: &str);
}

/// Every check, in order; each uses its own ids in vault `v`.
pub fn run_all(world: &dyn StateWorld) {
    the_parts_of_a_commit_land_together(world);
    a_failing_part_leaves_nothing(world);
    a_decided_proposal_commits_nothing(world);
    only_the_top_entry_moves_and_a_refused_transition_writes_nothing(world);
    a_challenge_commits_once(world);
    a_history_entry_already_there_answers_as_is(world);
    an_open_intent_holds_its_key(world);
}

fn head(seq: u64) -> inbox::AuditHead {
    inbox::AuditHead {
        seq,
        hash: format!("hash-{seq}"),
    }
}

fn key(k: &str) -> inbox::IdemKey<'_> {
    inbox::IdemKey {
        credential_id: "cred-conformance",
        key: k,
        tool: "apply_proposal",
        args_hash: "args",
    }
}

fn apply<'a>(
    intent_id: i64,
    proposal_id: &'a str,
    at: &'a str,
    result: &'a serde_json::Value,
    idempotency: &'a inbox::IdemKey<'a>,
) -> inbox::FinishApply<'a> {
    inbox::FinishApply {
        intent_id,
        proposal_id,
        by: "by",
        at,
        result,
        history: None,
        idempotency: Some(idempotency),
    }
}

fn entry<'a>(id: &'a str, paths: &'a serde_json::Value) -> inbox::NewHistory<'a> {
    inbox::NewHistory {
        id,
        label: "conformance",
        kind: "patch",
        created_by: "by",
        created_at: "2026-01-01T00:00:00Z",
        paths,
        barrier: false,
    }
}

fn disk<'a>(fingerprint: &'a str, writes: &'a [(String, Option<String>)]) -> inbox::DiskAfter<'a> {
    inbox::DiskAfter {
        fingerprint: Some(fingerprint),
        writes,
        change: None,
        head: None,
    }
}

/// The proposal applied, the revision moved, the key answered, the vault's head and the audit
/// head registered, the intent closed: all in one commit.
pub fn the_parts_of_a_commit_land_together(world: &dyn StateWorld) {
    let store = world.store();
    world.pending("v", "together");
    let before = world.revision("v");
    let intent = store
        .begin_intent("v", "together", &json!({"plan": 1}), "2026-01-01T00:00:00Z")
        .expect("an intent");
    let answer = json!({"applied": true});
    let writes = vec![("notes/together.md".to_owned(), Some("h1".to_owned()))];
    let at = "2026-01-01T00:00:00Z";
    let committed = transact(store, |tx| {
        let c = tx.finish_apply(&apply(intent, "together", at, &answer, &key("k-together")))?;
        tx.register_head("v", &disk("fp", &writes))?;
        tx.append_audit(&head(10))?;
        Ok(c)
    })
    .expect("the commit");
    assert!(committed.is_some(), "a pending proposal's apply commits");
    assert_eq!(
        world.status("v", "together"),
        "applied",
        "the proposal is applied"
    );
    assert_eq!(world.revision("v"), before + 1, "the revision moves by one");
    let answered = world.key_answer("cred-conformance", "k-together");
    assert_eq!(answered, Some(answer), "the key answers");
    assert_eq!(
        world.audit_head(),
        Some(head(10)),
        "the audit head is the commit's record"
    );
    assert_eq!(
        world.fingerprint("v").as_deref(),
        Some("fp"),
        "the vault's head is registered"
    );
    assert_eq!(world.open_intents("v"), 0, "the commit closes its intent");
}

/// A part that fails takes every part before it back: nothing of the transaction stays.
pub fn a_failing_part_leaves_nothing(world: &dyn StateWorld) {
    let store = world.store();
    world.pending("v", "fails");
    let before = (world.revision("v"), world.audit_head(), world.fingerprint("v"));
    let intent = store
        .begin_intent("v", "fails", &json!({}), "2026-01-01T00:00:00Z")
        .expect("an intent");
    let writes = Vec::new();
    let out: Result<(), _> = transact(store, |tx| {
        tx.finish_apply(&apply(intent, "fails", "t", &json!({}), &key("k-fails")))?;
        tx.register_head("v", &disk("fp-of-a-failed-commit", &writes))?;
        tx.append_audit(&head(20))?;
        Err(crate::error::GatewayError::Internal("a later part fails".into()))
    });
    assert!(out.is_err());
    assert_eq!(
        world.status("v", "fails"),
        "pending",
        "a failed commit leaves the proposal pending"
    );
    let after = (world.revision("v"), world.audit_head(), world.fingerprint("v"));
    assert_eq!(
        after, before,
        "a failed commit moves no revision, audit head or vault head"
    );
    assert_eq!(
        world.key_answer("cred-conformance", "k-fails"),
        None,
        "a failed commit answers no key"
    );
    assert_eq!(
        world.open_intents("v"),
        1,
        "a failed commit keeps its intent (recovery decides)"
    );
}

/// A proposal decided meanwhile: the apply's part answers `None` and changes nothing.
pub fn a_decided_proposal_commits_nothing(world: &dyn StateWorld) {
    let store = world.store();
    world.pending("v", "decided");
    let intent = store
        .begin_intent("v", "decided", &json!({}), "2026-01-01T00:00:00Z")
        .expect("an intent");
    world.reject("decided");
    let before = world.revision("v");
    let c = transact(store, |tx| {
        tx.finish_apply(&apply(intent, "decided", "t", &json!({}), &key("k-decided")))
    })
    .expect("the transaction runs");
    assert!(c.is_none(), "an apply of a rejected proposal does not commit");
    assert_eq!(world.status("v", "decided"), "rejected");
    assert_eq!(world.revision("v"), before);
    assert_eq!(world.key_answer("cred-conformance", "k-decided"), None);
}

/// Undo moves only the newest `done` entry; a refused transition answers `None` and writes
/// nothing (its intent stays open for the rollback); an accepted one closes its own intent.
pub fn only_the_top_entry_moves_and_a_refused_transition_writes_nothing(world: &dyn StateWorld) {
    let store = world.store();
    let paths = json!([]);
    transact(store, |tx| {
        tx.add_history("v", &entry("h-older", &paths))?;
        tx.add_history("v", &entry("h-newer", &paths))
    })
    .expect("two entries");
    let before = world.revision("v");
    let answer = json!({"undone": true});
    let undo = |intent: i64, entry_id: &str, k: &str| {
        transact(store, |tx| {
            tx.finish_transition(&inbox::HistoryTransition {
                intent_id: intent,
                vault: "v",
                entry_id,
                transition: inbox::Transition::Undo,
                result: &answer,
                at: "2026-01-01T00:00:00Z",
                idempotency: Some(key(k)),
                disk: None,
            })
        })
        .expect("the transaction runs")
    };
    let intent = store
        .begin_intent("v", "undo-older", &json!({}), "2026-01-01T00:00:00Z")
        .expect("an intent");
    let open = world.open_intents("v");
    assert!(
        undo(intent, "h-older", "k-undo-older").is_none(),
        "an entry under the top cannot be undone"
    );
    assert_eq!(world.history_state("v", "h-older").as_deref(), Some("done"));
    assert_eq!(world.revision("v"), before, "a refused transition moves nothing");
    assert_eq!(world.key_answer("cred-conformance", "k-undo-older"), None);
    assert_eq!(
        world.open_intents("v"),
        open,
        "a refused transition keeps its intent"
    );
    let intent = store
        .begin_intent("v", "undo-newer", &json!({}), "2026-01-01T00:00:00Z")
        .expect("an intent");
    assert!(
        undo(intent, "h-newer", "k-undo-newer").is_some(),
        "the top entry is undone"
    );
    assert_eq!(world.history_state("v", "h-newer").as_deref(), Some("undone"));
    assert_eq!(world.revision("v"), before + 1);
    assert_eq!(
        world.key_answer("cred-conformance", "k-undo-newer"),
        Some(answer.clone())
    );
    assert_eq!(
        world.open_intents("v"),
        open,
        "the undo closes its own intent only"
    );
}

/// An executed challenge commits once: its result recorded, the revision moved when it changed
/// something; a second commit of it answers `None` and changes nothing.
pub fn a_challenge_commits_once(world: &dyn StateWorld) {
    let store = world.store();
    world.consumed_challenge("v", "c-conformance");
    let before = world.revision("v");
    let result = json!({"executed": true});
    let first =
        transact(store, |tx| tx.finish_challenge("c-conformance", &result, true)).expect("the commit");
    assert_eq!(
        first,
        Some(("v".to_owned(), before + 1)),
        "its vault and the moved revision"
    );
    let again = transact(store, |tx| tx.finish_challenge("c-conformance", &result, true))
        .expect("the transaction runs");
    assert_eq!(again, None, "a challenge commits once");
    assert_eq!(world.revision("v"), before + 1);
}

/// A history entry already there (an earlier run of the same commit) answers as is, and the
/// transaction goes on: nothing fails, nothing is cleared.
pub fn a_history_entry_already_there_answers_as_is(world: &dyn StateWorld) {
    let store = world.store();
    let paths = json!([]);
    let seq = transact(store, |tx| tx.add_history("v", &entry("h-twice", &paths))).expect("an entry");
    let again = transact(store, |tx| {
        let again = tx.add_history("v", &entry("h-twice", &paths))?;
        tx.append_audit(&head(30))?;
        Ok(again)
    })
    .expect("the same entry again does not fail its transaction");
    assert_eq!(again, seq, "the entry's own seq");
    assert_eq!(
        world.audit_head(),
        Some(head(30)),
        "the rest of the transaction commits"
    );
}

/// One open intent per key: a second write of the same proposal cannot begin until the first
/// commits (or is rolled back).
pub fn an_open_intent_holds_its_key(world: &dyn StateWorld) {
    let store = world.store();
    world.pending("v", "held");
    store
        .begin_intent("v", "held", &json!({}), "2026-01-01T00:00:00Z")
        .expect("an intent");
    assert!(
        store
            .begin_intent("v", "held", &json!({}), "2026-01-01T00:00:01Z")
            .is_err(),
        "a second intent for an open one is refused"
    );
}
