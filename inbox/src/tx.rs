//! One transaction of the state database, for a commit point made of parts
//! (docs/contract.md#rules-of-the-write-path): the write's own change (an apply, an undo or redo,
//! an executed challenge), the vault's new head (fingerprint, the notes it wrote, the change's row)
//! and the audit head of the record that belongs to it. [`State::transact`] commits them together
//! or not at all.

use rusqlite::OptionalExtension;
use serde_json::Value;

use crate::db::{State, StateError};
use crate::intents::{ApplyCommit, FinishApply, IdemKey, NewHistory};
use crate::{AuditHead, DiskAfter, HistoryTransition, TransitionCommit};

/// An open transaction; see [`State::transact`].
pub struct Tx<'c> {
    c: &'c rusqlite::Connection,
}

impl State {
    /// Runs `f` in one IMMEDIATE transaction: everything it records commits when it returns `Ok`,
    /// nothing when it returns `Err` (or panics).
    pub fn transact<T, E: From<StateError>>(&self, f: impl FnOnce(&Tx<'_>) -> Result<T, E>) -> Result<T, E> {
        let mut conn = self.conn()?;
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(StateError::from)?;
        let out = f(&Tx { c: &tx })?;
        tx.commit().map_err(StateError::from)?;
        Ok(out)
    }
}

impl Tx<'_> {
    /// The apply's change: `None` (nothing changed) when the proposal is no longer pending.
    pub fn finish_apply(&self, f: &FinishApply<'_>) -> Result<Option<ApplyCommit>, StateError> {
        crate::intents::finish_apply_on(self.c, f)
    }

    /// An undo's or redo's change: `None` (nothing changed) when the entry is no longer the top.
    pub fn finish_history_transition(
        &self,
        t: &HistoryTransition<'_>,
    ) -> Result<Option<TransitionCommit>, StateError> {
        crate::history::finish_history_transition_on(self.c, t)
    }

    /// An executed challenge's result: its vault and revision, `None` when it has no open intent.
    pub fn finish_challenge(
        &self,
        id: &str,
        result: &Value,
        changed: bool,
    ) -> Result<Option<(String, u64)>, StateError> {
        crate::challenges::finish_challenge_on(self.c, id, result, changed)
    }

    /// Appends a `done` history entry (clearing the redo branch); its `seq`. An entry of this id
    /// already there (an earlier run of the same commit) is its answer, and nothing changes: a
    /// part never fails for a duplicate, which would abort a shared database's transaction.
    pub fn add_history(&self, vault: &str, entry: &NewHistory<'_>) -> Result<u64, StateError> {
        let existing: Option<i64> = self
            .c
            .prepare_cached("SELECT seq FROM history WHERE vault = ?1 AND id = ?2")?
            .query_row([vault, entry.id], |r| r.get(0))
            .optional()?;
        match existing {
            Some(seq) => Ok(crate::db::non_negative(seq)),
            None => crate::intents::insert_history(self.c, vault, entry),
        }
    }

    /// The vault as the write left it: fingerprint, the notes it wrote, the change's row (and the
    /// audit head, when `d` carries one: the old callers' way; [`Tx::append_audit`] is the part).
    pub fn register_head(&self, vault: &str, d: &DiskAfter<'_>) -> Result<(), StateError> {
        Ok(crate::db::record_disk(self.c, vault, d)?)
    }

    /// Records a key's first answer (and marks its job done).
    pub fn put_key(&self, k: &IdemKey<'_>, result: &Value, at: &str) -> Result<(), StateError> {
        crate::intents::put_key_on(self.c, k, result, at)
    }

    /// The audit record that belongs to this commit: the state knows of it once this commits.
    pub fn append_audit(&self, head: &AuditHead) -> Result<(), StateError> {
        Ok(crate::recorded::raise_head(self.c, head)?)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_failing_part_rolls_back_every_part_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let s = State::open(&dir.path().join("state.sqlite")).unwrap();
        let head = AuditHead {
            seq: 7,
            hash: "h7".into(),
        };
        let out: Result<(), StateError> = s.transact(|tx| {
            tx.append_audit(&head)?;
            Err(StateError::IntentNotFound(1))
        });
        assert!(out.is_err());
        assert_eq!(
            s.audit_head().unwrap(),
            None,
            "nothing of a failed transaction stays"
        );
        s.transact(|tx| tx.append_audit(&head)).unwrap();
        assert_eq!(s.audit_head().unwrap(), Some(head));
    }
}
