//! The service of vaultgate: every operation exactly once, for every edge (MCP over stdio and
//! HTTP, the CLI, the review page). Authentication, capability checks, vault resolution, reads,
//! proposals, the one journaled write transaction (apply, undo/redo, executed challenges), crash
//! recovery, change detection and the audit record of every call.
//!
//! It must never speak a wire protocol (no rmcp, axum or clap), read the environment, or write a
//! vault file other than through `vault::write` inside the transaction of `txn`. Every answer
//! leaves as an [`Audited`] value: nothing outside this crate builds an audit entry.
#![forbid(unsafe_code)]

mod actors;
pub mod api;
mod apply;
pub mod approval;
pub mod attachments;
pub mod audit_log;
pub mod auth;
mod authcache;
mod call;
pub mod changelog;
pub mod changes;
mod checkout;
pub mod core;
pub mod credentials;
pub mod critical;
pub mod cursor;
pub mod doctor;
pub mod error;
mod failpoints;
mod files;
pub mod git;
mod group;
pub mod history;
pub mod home;
pub mod ids;
pub mod jobs;
pub mod limits;
mod maintain;
mod operator;
pub mod proposing;
pub mod reading;
mod refusals;
pub mod remote;
pub mod review;
pub mod storage;
mod teamcommit;
mod teamcritical;
mod teamgroup;
mod teamhistory;
mod teampush;
mod teamsettle;
mod teamundo;
mod teamwrite;
pub mod tunnel;
mod txn;
pub mod vaults;
pub mod versions;

pub use crate::approval::{AppApproval, ApprovalAnswer, ApprovalQuestion, ApprovalRequest, ClientApproval};
pub use crate::call::{Audited, Call, ResultIds};
pub use crate::core::{Actor, Caller, Core, Operator, Surface, Transport, VaultHandle};
pub use crate::error::GatewayError;
pub use crate::failpoints::Failpoints;
pub use crate::maintain::pack_team_clones;
pub use crate::teampush::hold_pushed;
pub use crate::teamsettle::settle_idle_jobs;
pub use inbox::{Credential, Transition};
pub use policy::Tier;
/// Review diffs as people read them: hunks, changed words and changed links, for the CLI and the page.
pub mod diff;

/// The read answers of the vault, as the engine hands them out (their schemas are the tools'
/// output schemas).
pub mod reads {
    pub use vault::attach::ListAttachments;
    pub use vault::data::QueryNotes;
    pub use vault::{
        ContentHits, KnowledgeHits, ListNotes, ListStandards, ListTags, ReadNote, RecentNotes, Related,
    };
}
