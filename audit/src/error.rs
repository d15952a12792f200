//! The one error type of the crate boundary.

use std::path::PathBuf;

/// Why the audit log could not be opened, appended to, repaired or read.
///
/// Variants state facts (offsets, lengths, seqs); they never carry record contents.
/// A broken chain found by [`crate::verify`] is not an error: it is reported in
/// [`crate::VerifyReport::broken`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    /// The operating system refused a read, write, lock or sync.
    #[error("audit log I/O error: {0}")]
    Io(#[from] std::io::Error),

    /// A complete line that had to be read (the tail before an append, or a line returned by
    /// [`crate::tail`]) is not a valid audit record. Lines are located by byte offset because
    /// they are read backwards from the end, without counting the lines before them.
    #[error(
        "audit log line at byte offset {offset} is not a valid record ({reason}); \
         run `vaultgate audit verify`"
    )]
    Parse { offset: u64, reason: String },

    /// The log ends with an unterminated line: a write was interrupted (crash, power loss, disk
    /// full). Appends are refused until an operator repairs it, so that nothing is ever chained
    /// onto, or silently hidden behind, a fragment.
    #[error(
        "audit log ends with an unterminated line of {remnant_len} bytes at byte offset {offset} \
         (an interrupted write); appends are refused until `vaultgate audit repair` completes or \
         moves the fragment aside"
    )]
    TornTail { offset: u64, remnant_len: u64 },

    /// The log is shorter than this process last left it: something truncated or replaced its
    /// contents. Nothing legitimate does that, so appends are refused.
    #[error(
        "audit log shrank from {expected_at_least} to {actual} bytes since the last append; \
         it was truncated or rewritten, appends are refused (run `vaultgate audit verify`)"
    )]
    Shrunk { expected_at_least: u64, actual: u64 },

    /// The last record's `seq` is `u64::MAX`; no further record can follow it.
    #[error("audit log seq space exhausted after seq {last}")]
    SeqExhausted { last: u64 },

    /// The timestamp cannot be written as RFC 3339 (a year outside 0000..=9999).
    #[error("timestamp cannot be written as RFC 3339: {reason}")]
    Timestamp { reason: String },

    /// A record could not be encoded as JSON (not expected to happen for this crate's types).
    #[error("audit record could not be encoded: {0}")]
    Encode(#[from] serde_json::Error),

    /// The sealed line would exceed the longest line the crate reads back; nothing was written.
    #[error("audit record of {len} bytes exceeds the {max}-byte line limit")]
    RecordTooLarge { len: u64, max: u64 },

    /// `audit.jsonl` is no longer the file this handle opened (deleted, renamed or replaced).
    /// Appending would silently start a new chain, so appends are refused until an operator runs
    /// `vaultgate audit restart --yes` (docs/contract.md#the-audit-log).
    #[error(
        "{0} was deleted or replaced while in use; appends are refused (restart vaultgate; \
         if the log is gone for good, `vaultgate audit restart --yes` opens a new chain)"
    )]
    Replaced(PathBuf),

    /// Less free space than a mutating call needs on the log's file system.
    #[error("the audit log's file system has {available} bytes free, {needed} are needed")]
    NoSpace { available: u64, needed: u64 },

    /// `repair_torn_tail` found no free name beside the log to save a fragment under.
    #[error("no free file name to save the torn fragment beside {0}")]
    NoRepairName(PathBuf),
}
