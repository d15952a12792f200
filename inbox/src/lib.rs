//! Durable state of the gateway: `state.sqlite` (credentials, per-vault revisions; proposals,
//! challenges, idempotency keys and history as they land) with versioned schema migrations.
//!
//! It never decides policy: callers pass already-validated values; it stores and reads them.
#![forbid(unsafe_code)]

mod approvals;
mod challenges;
mod changes;
mod credentials;
mod db;
mod history;
mod idempotency;
mod intents;
mod jobs;
// `crate::` below: this module shares its name with the `proposals` crate.
mod proposals;
mod recorded;
mod review;
mod tx;

pub use crate::challenges::{NewChallenge, StoredChallenge};
pub use crate::changes::{Change, GitDone, NewChange};
pub use crate::credentials::{Credential, CredentialId, NewCredential};
pub use crate::db::{DiskAfter, State, StateError};
pub use crate::history::{
    HistoryEntry, HistoryState, HistoryTransition, Transition, TransitionCommit, UnknownHistoryState,
};
pub use crate::idempotency::{IdemPut, IdemRecord};
pub use crate::intents::{
    ApplyCommit, FinishApply, HistoryTops, INTENT_STARTED, IdemKey, Intent, NewHistory,
};
pub use crate::jobs::{Job, NewJob};
pub use crate::proposals::{NewProposal, PendingRef, ProposalStatus, StoredProposal, UnknownStatus};
pub use crate::recorded::{AuditHead, Recorded};
pub use crate::review::{NewReviewSession, ReviewSession};
pub use crate::tx::Tx;
