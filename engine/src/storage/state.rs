//! The state a write records and commits to (docs/contract.md#rules-of-the-write-path): its intent,
//! written before any file is touched, and its commit point, one transaction whose parts — the
//! write's own change, the vault's new head and the audit record that belongs to it — commit
//! together or not at all. Today's store is `inbox::State` (SQLite, `state.sqlite`). A shared
//! database implements the same trait for the commit point; the rest of the write's state —
//! a critical call's intent in its challenge row, a rollback's marks, the amended answer, the job
//! rows, the key's lookup and recovery's reads — still calls `inbox::State` and moves behind this
//! trait with it.
//!
//! It must never decide anything: whether a change may commit is the transaction's, from what the
//! parts answer (`None`: the proposal or entry moved on; nothing was changed).

use serde_json::Value;

use crate::error::GatewayError;

/// Where writes record their intents and commit.
pub trait StateStore {
    /// Records a write's intent under `key` (unique among open intents); its id.
    fn begin_intent(&self, vault: &str, key: &str, plan: &Value, at: &str) -> Result<i64, GatewayError>;

    /// Runs one transaction: everything `f` records on the [`StateTx`] commits when it returns
    /// `Ok`, nothing when it returns `Err`. `f` runs at most once: a store that must retry (a
    /// serialization failure) answers the error instead, and the write rolls back.
    fn transact(
        &self,
        f: &mut dyn FnMut(&dyn StateTx) -> Result<(), GatewayError>,
    ) -> Result<(), GatewayError>;

    /// Runs `f` (once) with this thread's commits left unsynced: a group's commits are made
    /// durable by one [`StateStore::sync`].
    fn deferring(&self, f: &mut dyn FnMut() -> Result<(), GatewayError>) -> Result<(), GatewayError>;

    /// Makes every commit made so far durable.
    fn sync(&self) -> Result<(), GatewayError>;
}

/// The parts of one commit point, inside [`StateStore::transact`].
pub trait StateTx {
    /// An apply: the proposal applied, the revision moved, its history entry and its key's answer
    /// (its job done with it), the intent closed. `None`: the proposal is no longer pending.
    fn finish_apply(&self, f: &inbox::FinishApply<'_>) -> Result<Option<inbox::ApplyCommit>, GatewayError>;

    /// An undo or redo. `None`: the entry is no longer the top.
    fn finish_transition(
        &self,
        t: &inbox::HistoryTransition<'_>,
    ) -> Result<Option<inbox::TransitionCommit>, GatewayError>;

    /// An executed challenge: its vault and the revision after. `None`: no open intent.
    fn finish_challenge(
        &self,
        id: &str,
        result: &Value,
        changed: bool,
    ) -> Result<Option<(String, u64)>, GatewayError>;

    /// A history entry of a write that is not an apply (a critical call's barrier). An entry of
    /// this id already there answers as is: no part fails for a duplicate (a failed statement
    /// aborts a shared database's whole transaction).
    fn add_history(&self, vault: &str, entry: &inbox::NewHistory<'_>) -> Result<u64, GatewayError>;

    /// The vault as the write left it (fingerprint, notes written, the change's row).
    fn register_head(&self, vault: &str, after: &inbox::DiskAfter<'_>) -> Result<(), GatewayError>;

    /// The audit record of this write: known to the state once this commits.
    fn append_audit(&self, head: &inbox::AuditHead) -> Result<(), GatewayError>;
}

/// [`StateStore::transact`] for a closure that answers a value.
pub(crate) fn transact<T>(
    store: &dyn StateStore,
    f: impl FnOnce(&dyn StateTx) -> Result<T, GatewayError>,
) -> Result<T, GatewayError> {
    let mut f = Some(f);
    let mut out = None;
    store.transact(&mut |tx| {
        let f = f
            .take()
            .ok_or_else(|| GatewayError::Internal("a transaction ran its body twice".into()))?;
        out = Some(f(tx)?);
        Ok(())
    })?;
    out.ok_or_else(|| GatewayError::Internal("a transaction answered nothing".into()))
}

/// [`StateStore::deferring`] for a closure that answers a value.
pub(crate) fn deferring<T>(
    store: &dyn StateStore,
    f: impl FnOnce() -> Result<T, GatewayError>,
) -> Result<T, GatewayError> {
    let mut f = Some(f);
    let mut out = None;
    store.deferring(&mut || {
        let f = f
            .take()
            .ok_or_else(|| GatewayError::Internal("a deferred commit ran twice".into()))?;
        out = Some(f());
        Ok(())
    })?;
    out.ok_or_else(|| GatewayError::Internal("a deferred commit answered nothing".into()))?
}

impl StateStore for inbox::State {
    fn begin_intent(&self, vault: &str, key: &str, plan: &Value, at: &str) -> Result<i64, GatewayError> {
        Ok(inbox::State::begin_intent(self, vault, key, plan, at)?)
    }

    fn transact(
        &self,
        f: &mut dyn FnMut(&dyn StateTx) -> Result<(), GatewayError>,
    ) -> Result<(), GatewayError> {
        inbox::State::transact(self, |tx| f(tx))
    }

    fn deferring(&self, f: &mut dyn FnMut() -> Result<(), GatewayError>) -> Result<(), GatewayError> {
        self.deferring_sync(f)
    }

    fn sync(&self) -> Result<(), GatewayError> {
        Ok(self.sync_log()?)
    }
}

impl StateTx for inbox::Tx<'_> {
    fn finish_apply(&self, f: &inbox::FinishApply<'_>) -> Result<Option<inbox::ApplyCommit>, GatewayError> {
        Ok(inbox::Tx::finish_apply(self, f)?)
    }

    fn finish_transition(
        &self,
        t: &inbox::HistoryTransition<'_>,
    ) -> Result<Option<inbox::TransitionCommit>, GatewayError> {
        Ok(self.finish_history_transition(t)?)
    }

    fn finish_challenge(
        &self,
        id: &str,
        result: &Value,
        changed: bool,
    ) -> Result<Option<(String, u64)>, GatewayError> {
        Ok(inbox::Tx::finish_challenge(self, id, result, changed)?)
    }

    fn add_history(&self, vault: &str, entry: &inbox::NewHistory<'_>) -> Result<u64, GatewayError> {
        Ok(inbox::Tx::add_history(self, vault, entry)?)
    }

    fn register_head(&self, vault: &str, after: &inbox::DiskAfter<'_>) -> Result<(), GatewayError> {
        Ok(inbox::Tx::register_head(self, vault, after)?)
    }

    fn append_audit(&self, head: &inbox::AuditHead) -> Result<(), GatewayError> {
        Ok(inbox::Tx::append_audit(self, head)?)
    }
}
