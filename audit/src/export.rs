//! An export of the chain (`vaultgate audit export`: the records after a seq, as JSON Lines in
//! the log's own format) and the offline check of one (`vaultgate audit verify --file`).
//! docs/contract.md#the-audit-log
//!
//! An export is made only of lines that verified from the first record of the log: it never
//! copies past a broken line, so a file that verifies is a true copy of the chain.

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::Path;

use crate::error::AuditError;
use crate::file::stable_len;
use crate::verify::{Broken, First, walk};

/// What [`export`] wrote, or where the log broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exported {
    /// Records written.
    pub records: u64,
    /// The seq of the first and of the last record written.
    pub first_seq: Option<u64>,
    pub last_seq: Option<u64>,
    /// Records of the log that verified (written or skipped by `since`).
    pub log_records: u64,
    /// The first line of the log that fails: nothing after it was written, and the export must
    /// not be used.
    pub broken: Option<Broken>,
}

/// Writes every record of the log at `log` whose seq is above `since` to `out`, byte for byte,
/// each verified as [`crate::verify`] does while the log is read up to a length no writer was
/// half-way through. Errors are I/O only; a broken chain is [`Exported::broken`].
pub fn export(log: &Path, since: u64, out: &mut dyn Write) -> Result<Exported, AuditError> {
    let file = File::open(log)?;
    let len = stable_len(log, &file)?;
    let mut reader = BufReader::with_capacity(1 << 16, (&file).take(len));
    let mut records = 0u64;
    let mut first_seq = None;
    let walked = walk(&mut reader, First::Genesis, |seq, line| {
        if seq > since {
            out.write_all(line)?;
            out.write_all(b"\n")?;
            records += 1;
            first_seq.get_or_insert(seq);
        }
        Ok(())
    })?;
    out.flush()?;
    Ok(Exported {
        records,
        first_seq,
        last_seq: first_seq.map(|f| f + records - 1),
        log_records: walked.records,
        broken: walked.broken,
    })
}

/// What [`verify_file`] found in an export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileReport {
    /// Records that verified.
    pub records: u64,
    /// The first record's seq and the hash it links to: `GENESIS` for an export from seq 1, else
    /// the hash of a record the file does not hold (compare it with the chain it came from).
    pub first: Option<(u64, String)>,
    /// The last record's seq and hash.
    pub last: Option<(u64, String)>,
    /// The first line that fails.
    pub broken: Option<Broken>,
}

/// Checks an export offline: every line's hash and form, seq continuity from the first line's
/// seq, and every link; a first record of seq 1 must link to `GENESIS`.
pub fn verify_file(path: &Path) -> Result<FileReport, AuditError> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    let mut reader = BufReader::with_capacity(1 << 16, (&file).take(len));
    let walked = walk(&mut reader, First::AsWritten, |_, _| Ok(()))?;
    Ok(FileReport {
        records: walked.records,
        first: walked.first,
        last: walked.last,
        broken: walked.broken,
    })
}
