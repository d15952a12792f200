//! The audit log: vaultgate's security record. Every tool call, allowed or refused, every
//! credential change and every CLI action becomes one line of `<home>/audit.jsonl`, a JSON
//! object chained to the line before it by SHA-256 (`prev` → `hash`), so that altering,
//! deleting, inserting or reordering a line is detected by [`verify`], which names the first
//! line that fails (docs/contract.md#the-audit-log). [`AuditLog`] is the writer shared by every process of one home
//! (HTTP server, stdio servers, CLI): it serialises appends with a cross-process file lock and
//! can make each line durable before the audited call answers. This crate depends on no other
//! workspace crate.
//!
//! It never rewrites or truncates the log; the only exception is [`repair_torn_tail`], an
//! explicit operator action that removes an unterminated fragment no caller was ever told
//! about, after saving it beside the log.
#![forbid(unsafe_code)]

mod chain;
mod error;
mod export;
mod file;
mod record;
mod repair;
mod verify;
mod writer;

pub use chain::{GENESIS, MAX_ECHO_BYTES, args_hash, canonical_json, cut_echo, seal};
pub use error::AuditError;
pub use export::{Exported, FileReport, export, verify_file};
pub use record::{Actor, AuditRecord, Entry, Outcome};
pub use repair::{Repair, repair_torn_tail, restart_chain};
pub use verify::{Broken, VerifyReport, tail, verify};
pub use writer::{AuditLog, Dropped, Durability, RESERVE_BYTES};
