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
}

/// Every check, in order; each uses its own proposal ids in vault `v`.
pub fn run_all(world: &dyn StateWorld) {
    the_parts_of_a_commit_land_together(world);
    a_failing_part_leaves_nothing(world);
    a_decided_proposal_commits_nothing(world);
    an_open_intent_holds_its_key(world);
}

fn head(seq: u64) -> inbox::AuditHead {
    inbox::AuditHead {
        seq,
        hash: format!("hash-{seq}"),
    }
}

fn key<'a>(k: &'a str) -> inbox::IdemKey<'a> {
    inbox::IdemKey {
        credential_id: "cred-conformance",
        key: k,
        tool: "apply_proposal",
        args_hash: "args",
    }
}

/// The proposal applied, the revision moved, the key answered, the vault's head and the audit
/// head registered: all in one commit.
pub fn the_parts_of_a_commit_land_together(world: &dyn StateWorld) {
    let store = world.store();
    world.pending("v", "together");
    let before = world.revision("v");
    let intent = store
        .begin_intent("v", "together", &json!({"plan": 1}), "2026-01-01T00:00:00Z")
        .expect("an intent");
    let answer = json!({"applied": true});
    let writes = vec![("notes/together.md".to_owned(), Some("h1".to_owned()))];
    let committed = transact(store, |tx| {
        let c = tx.finish_apply(
            intent,
            "together",
            "by",
            "2026-01-01T00:00:00Z",
            &answer,
            None,
            Some(&key("k-together")),
        )?;
        tx.register_head(
            "v",
            &inbox::DiskAfter {
                fingerprint: Some("fp"),
                writes: &writes,
                change: None,
                head: None,
            },
        )?;
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
    assert_eq!(
        world.key_answer("cred-conformance", "k-together"),
        Some(answer),
        "the key answers"
    );
    assert_eq!(
        world.audit_head(),
        Some(head(10)),
        "the audit head is the commit's record"
    );
}

/// A part that fails takes every part before it back: nothing of the transaction stays.
pub fn a_failing_part_leaves_nothing(world: &dyn StateWorld) {
    let store = world.store();
    world.pending("v", "fails");
    let before = (world.revision("v"), world.audit_head());
    let intent = store
        .begin_intent("v", "fails", &json!({}), "2026-01-01T00:00:00Z")
        .expect("an intent");
    let out: Result<(), _> = transact(store, |tx| {
        tx.finish_apply(
            intent,
            "fails",
            "by",
            "t",
            &json!({}),
            None,
            Some(&key("k-fails")),
        )?;
        tx.append_audit(&head(20))?;
        Err(crate::error::GatewayError::Internal("a later part fails".into()))
    });
    assert!(out.is_err());
    assert_eq!(
        world.status("v", "fails"),
        "pending",
        "a failed commit leaves the proposal pending"
    );
    assert_eq!(
        (world.revision("v"), world.audit_head()),
        before,
        "a failed commit moves nothing"
    );
    assert_eq!(
        world.key_answer("cred-conformance", "k-fails"),
        None,
        "a failed commit answers no key"
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
        tx.finish_apply(
            intent,
            "decided",
            "by",
            "t",
            &json!({}),
            None,
            Some(&key("k-decided")),
        )
    })
    .expect("the transaction runs");
    assert!(c.is_none(), "an apply of a rejected proposal does not commit");
    assert_eq!(world.status("v", "decided"), "rejected");
    assert_eq!(world.revision("v"), before);
    assert_eq!(world.key_answer("cred-conformance", "k-decided"), None);
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
