//! The pure core of vaultgate's write half. An agent never writes a vault file: each write it asks
//! for becomes a [`Proposal`], metadata whose [`proposal_hash`] pins what would change (kind, target,
//! source, new content, base) and whose [`signature`] (HMAC-SHA256 under a key derived from
//! `secret.key`) pins everything else, so a separate apply step can tell an intact proposal from an
//! altered one. This crate holds that model and its canonical JSON and hashes, patch edits
//! ([`apply_edits`]), review diffs ([`unified_diff`]), the hash chain of `_applied.jsonl`
//! ([`AppliedLine`]), and the apply decision ([`plan::check`], [`plan::decide`]) that the engine's
//! write transaction runs for the MCP tools, the CLI and the review page alike (docs/contract.md#proposals),
//! what recovery does with an interrupted write ([`recovery::decide`]), and what a team apply does
//! with a push whose outcome is unknown ([`recovery::settle_unknown_push`]).
//!
//! It must never do I/O, read a clock or draw randomness: ids, times and file states are parameters.
#![forbid(unsafe_code)]

mod applied;
mod canonical;
pub mod challenge;
pub mod diff;
mod edit;
pub mod keys;
mod model;
pub mod ops;
pub mod plan;
pub mod recovery;
mod seal;
mod slug;

pub use applied::{
    AppliedLine, AppliedStreamError, BreakReason, ChainBreak, ChainReport, GENESIS, MAX_APPLIED_LINE_BYTES,
    chain_applied, verify_applied_chain, verify_applied_stream, verify_applied_stream_with,
};
pub use canonical::{canonical_json, sha256_hex};
pub use diff::unified_diff;
pub use edit::{Edit, EditError, apply_edits};
pub use model::{CreatedBy, Draft, Kind, Proposal, UnknownKind};
pub use seal::{SIGNATURE_KEY_LABEL, Verdict, proposal_hash, seal, signature, verify};
pub use slug::slug;
