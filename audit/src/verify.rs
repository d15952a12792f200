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
    let walk = walk(&mut reader, First::Genesis, |_, _| Ok(()))?;
    Ok(VerifyReport {
        records: walk.records,
        last_hash: walk.last_hash,
        broken: walk.broken,
    })
}

/// Where the first record of a stream links.
#[derive(Clone, Copy)]
pub(crate) enum First {
    /// A whole log: seq 1, linked to [`GENESIS`].
    Genesis,
    /// An export: the seq and `prev` the first line holds, unless it is seq 1 (then [`GENESIS`]).
    AsWritten,
}

/// What [`walk`] found.
pub(crate) struct Walk {
    /// Lines that verified.
    pub records: u64,
    /// The seq of the first line that verified, and the `prev` it links to.
    pub first: Option<(u64, String)>,
    /// The seq and hash of the last line that verified.
    pub last: Option<(u64, String)>,
    /// `last`'s hash, or `None`.
    pub last_hash: Option<String>,
    pub broken: Option<Broken>,
}

/// Checks every line of `reader` in order and hands each verified one (its seq and bytes, without
/// the `\n`) to `each`; stops at the first line that fails.
pub(crate) fn walk(
    reader: &mut impl BufRead,
    first: First,
    mut each: impl FnMut(u64, &[u8]) -> std::io::Result<()>,
) -> Result<Walk, AuditError> {
    let mut w = Walk {
        records: 0,
        first: None,
        last: None,
        last_hash: None,
        broken: None,
    };
    let mut line_no: u64 = 0;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let read = (&mut *reader)
            .take(MAX_LINE_BYTES + 1)
            .read_until(b'\n', &mut buf)?;
        if read == 0 {
            break;
        }
        line_no += 1;
        // What this line must hold: the next seq after the last verified one, linked to it.
        let (expected_seq, prev) = match (&w.last, first) {
            (Some((seq, hash)), _) => (seq + 1, hash.clone()),
            (None, First::Genesis) => (1, GENESIS.to_owned()),
            (None, First::AsWritten) => match as_written(&buf) {
                Some((1, _)) => (1, GENESIS.to_owned()),
                Some(start) if start.0 > 1 => start,
                // Named as "seq 0": the line does not say which record it is.
                _ => (0, GENESIS.to_owned()),
            },
        };
        let problem = if buf.last() != Some(&b'\n') {
            Some(if buf.len() as u64 > MAX_LINE_BYTES {
                format!("line is longer than {MAX_LINE_BYTES} bytes")
            } else {
                "torn last line: no trailing newline (a write was interrupted); \
                 `vaultgate audit repair` completes it or moves it aside"
                    .to_owned()
            })
        } else if expected_seq == 0 {
            Some("the first line holds no record number (a seq of 1 or more)".to_owned())
        } else {
            buf.pop();
            match check_line(&buf, expected_seq, &prev) {
                Ok(record) => {
                    each(expected_seq, &buf)?;
                    w.records += 1;
                    if w.first.is_none() {
                        w.first = Some((expected_seq, prev));
                    }
                    w.last_hash = Some(record.hash.clone());
                    w.last = Some((expected_seq, record.hash));
                    None
                }
                Err(reason) => Some(reason),
            }
        };
        if let Some(reason) = problem {
            w.broken = Some(Broken {
                seq: expected_seq,
                line: line_no,
                reason,
            });
            break;
        }
    }
    Ok(w)
}

/// The `seq` and `prev` a line claims, read without trusting it (it is checked next).
fn as_written(line: &[u8]) -> Option<(u64, String)> {
    #[derive(Deserialize)]
    struct Claims {
        seq: u64,
        prev: String,
    }
    let text = line.strip_suffix(b"\n").unwrap_or(line);
    serde_json::from_slice::<Claims>(text)
        .ok()
        .map(|c| (c.seq, c.prev))
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
