//! Reading the log back: [`verify`] the whole chain, or [`tail`] the last records.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::chain::{GENESIS, SelfCheck, check_hash_and_form};
use crate::error::AuditError;
use crate::file::{MAX_LINE_BYTES, byte_at, last_lines, line_ending_at, stable_len};
use crate::record::AuditRecord;

/// The result of [`verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Records that verified, from seq 1 up to (not including) the first broken line.
    pub records: u64,
    /// The hash of the last record that verified; `None` for an empty log (or a broken line 1).
    /// Comparing it with a previously noted head is the only way to detect a log cut at a line
    /// boundary: such a cut leaves a valid, shorter chain.
    pub last_hash: Option<String>,
    /// The first line that fails, if any.
    pub broken: Option<Broken>,
}

/// The first line that fails verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broken {
    /// The seq this line should hold (one more than the last verified record). Reported even when
    /// the line cannot be parsed or holds another seq, so an altered line 5 is "seq 5", and a
    /// deleted record 5 is "seq 5" too.
    pub seq: u64,
    /// 1-based line number.
    pub line: u64,
    /// What is wrong, for a human.
    pub reason: String,
}

/// Recomputes every line's hash, canonical form, `seq` continuity and `prev` link, and reports
/// the first line that fails: the altered line itself, not the one after it.
///
/// Reads up to the length the log had at a moment when no writer was mid-line, so it can run
/// while the gateway appends. A chain problem is a [`VerifyReport::broken`], not an error;
/// errors are I/O only.
pub fn verify(path: &Path) -> Result<VerifyReport, AuditError> {
    let file = File::open(path)?;
    let len = stable_len(path, &file)?;
    let mut reader = BufReader::with_capacity(1 << 16, (&file).take(len));
    let mut records: u64 = 0;
    let mut last_hash: Option<String> = None;
    let mut line_no: u64 = 0;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let read = (&mut reader)
            .take(MAX_LINE_BYTES + 1)
            .read_until(b'\n', &mut buf)?;
        if read == 0 {
            break;
        }
        line_no += 1;
        let expected_seq = records + 1;
        let problem = if buf.last() != Some(&b'\n') {
            Some(if buf.len() as u64 > MAX_LINE_BYTES {
                format!("line is longer than {MAX_LINE_BYTES} bytes")
            } else {
                "torn last line: no trailing newline (a write was interrupted); \
                 `vaultgate audit repair` completes it or moves it aside"
                    .to_owned()
            })
        } else {
            buf.pop();
            match check_line(&buf, expected_seq, last_hash.as_deref().unwrap_or(GENESIS)) {
                Ok(record) => {
                    records = expected_seq;
                    last_hash = Some(record.hash);
                    None
                }
                Err(reason) => Some(reason),
            }
        };
        if let Some(reason) = problem {
            return Ok(VerifyReport {
                records,
                last_hash,
                broken: Some(Broken {
                    seq: expected_seq,
                    line: line_no,
                    reason,
                }),
            });
        }
    }
    Ok(VerifyReport {
        records,
        last_hash,
        broken: None,
    })
}

/// Checks one line (without its `\n`) as the record that must hold `expected_seq` and link to
/// `prev`. Checks run from the line alone outward, so damage inside a line is named there.
pub(crate) fn check_line(raw: &[u8], expected_seq: u64, prev: &str) -> Result<AuditRecord, String> {
    if raw.is_empty() {
        return Err("empty line".to_owned());
    }
    let value: Value = serde_json::from_slice(raw).map_err(|e| format!("line is not valid JSON: {e}"))?;
    let record =
        AuditRecord::deserialize(&value).map_err(|e| format!("line is not a valid audit record: {e}"))?;
    match check_hash_and_form(&record, raw) {
        Ok(SelfCheck::Valid) => {}
        Ok(SelfCheck::HashMismatch { computed }) => {
            return Err(format!(
                "hash mismatch: the line stores {} but its content hashes to {computed}; \
                 the line was altered",
                record.hash
            ));
        }
        Ok(SelfCheck::NotCanonical) => {
            return Err(
                "line is not in canonical form (key order, whitespace, escaping or a \
                        null field); the line was altered"
                    .to_owned(),
            );
        }
        Err(e) => return Err(format!("record cannot be re-encoded: {e}")),
    }
    if record.seq > expected_seq {
        return Err(format!(
            "seq gap: expected {expected_seq}, found {}; a record was deleted or lines reordered",
            record.seq
        ));
    }
    if record.seq < expected_seq {
        return Err(format!(
            "seq out of order: expected {expected_seq}, found {}; a line was duplicated or \
             lines reordered",
            record.seq
        ));
    }
    if record.prev != prev {
        return Err(format!(
            "prev mismatch: the line links to {} but the previous line's hash is {prev}",
            record.prev
        ));
    }
    Ok(record)
}

/// The last `n` records, oldest first, read backwards from the end (the cost depends on `n`, not
/// on the size of the log).
///
/// An unterminated fragment at the very end (a torn write, see [`AuditError::TornTail`]) is not a
/// record and is skipped; [`verify`] reports it. Lines are parsed, not verified: hashes and links
/// are [`verify`]'s job.
pub fn tail(path: &Path, n: usize) -> Result<Vec<AuditRecord>, AuditError> {
    let file = File::open(path)?;
    let len = stable_len(path, &file)?;
    let end = if len == 0 || byte_at(&file, len - 1)? == b'\n' {
        len
    } else {
        line_ending_at(&file, len)?.offset
    };
    last_lines(&file, end, n)?
        .into_iter()
        .map(|line| {
            serde_json::from_slice(&line.bytes).map_err(|e| AuditError::Parse {
                offset: line.offset,
                reason: e.to_string(),
            })
        })
        .collect()
}
