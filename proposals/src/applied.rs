//! `<inbox>/_applied.jsonl`: one line per applied proposal, hash-chained like the audit log
//! (docs/contract.md#proposals, docs/contract.md#the-audit-log).

use std::io::{BufRead, Read};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::canonical::{canonical_json, sha256_hex};
use crate::model::Kind;

/// `prev` of the first line (seq 1): 64 zeros, as in the audit log.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// One applied proposal as a line of `<inbox>/_applied.jsonl`, hash-chained like the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppliedLine {
    /// 1 for the first line, then +1.
    pub seq: u64,
    /// RFC 3339 UTC.
    pub ts: String,
    /// The previous line's `hash`, or [`GENESIS`].
    pub prev: String,
    /// Hex SHA-256 of this line's canonical JSON without `hash`.
    pub hash: String,
    pub id: String,
    pub slug: String,
    pub kind: Kind,
    pub target: String,
    pub proposal_hash: String,
    /// Who applied it: a credential id, or `cli:<user>`.
    pub applied_by: String,
}

/// The line that follows `prev` (or the first line when `None`). `seq` saturates at `u64::MAX`,
/// which [`verify_applied_chain`] then reports; no inbox gets there.
#[expect(
    clippy::too_many_arguments,
    reason = "one parameter per field of the line, named at the call site"
)]
pub fn chain_applied(
    prev: Option<&AppliedLine>,
    id: String,
    slug: String,
    kind: Kind,
    target: String,
    proposal_hash: String,
    applied_by: String,
    ts: String,
) -> AppliedLine {
    let mut line = AppliedLine {
        seq: prev.map_or(1, |p| p.seq.saturating_add(1)),
        ts,
        prev: prev.map_or_else(|| GENESIS.to_owned(), |p| p.hash.clone()),
        hash: String::new(),
        id,
        slug,
        kind,
        target,
        proposal_hash,
        applied_by,
    };
    line.hash = line_hash(&line);
    line
}

/// Checks a whole file's lines from the first: seq 1, 2, …, each `prev` the line before's `hash`
/// (the first [`GENESIS`]), each `hash` recomputed. `Err` holds the 0-based index of the first line
/// that fails; an altered line is itself the one named, a removed line names its successor.
pub fn verify_applied_chain(lines: &[AppliedLine]) -> Result<(), usize> {
    let mut check = ChainCheck::default();
    for (index, line) in lines.iter().enumerate() {
        if !check.accept(line) {
            return Err(index);
        }
    }
    Ok(())
}

/// Longest line [`verify_applied_stream`] reads; lines are a few hundred bytes, the cap keeps a
/// hostile line from growing the buffer without bound.
pub const MAX_APPLIED_LINE_BYTES: u64 = 1 << 20;

/// What [`verify_applied_stream`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainReport {
    /// Lines that verified, from seq 1 up to (not including) the first broken one.
    pub lines: u64,
    /// The last line that verified: the one the next line chains on.
    pub last: Option<AppliedLine>,
    /// The first line that fails, if any; nothing after it is read.
    pub broken: Option<ChainBreak>,
}

/// The first line of `_applied.jsonl` that fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainBreak {
    /// 0-based among the non-blank lines, as [`verify_applied_chain`] counts.
    pub index: u64,
    /// 1-based line number in the file (blank lines counted).
    pub line: u64,
    pub reason: BreakReason,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BreakReason {
    /// Not an [`AppliedLine`] (not UTF-8 JSON of that shape, or a torn fragment).
    Parse(String),
    /// Over [`MAX_APPLIED_LINE_BYTES`].
    TooLong,
    /// A wrong `seq`, `prev` or `hash`: the line was altered, removed, reordered or replayed.
    Link,
}

/// Why [`verify_applied_stream`] could not read to the end; a broken chain is not an error.
#[derive(Debug, thiserror::Error)]
pub enum AppliedStreamError {
    #[error("reading _applied.jsonl: {0}")]
    Io(#[from] std::io::Error),
}

/// [`verify_applied_chain`] over a stream of JSON lines, in constant memory (one line at a time),
/// so `_applied.jsonl` needs no size limit (docs/contract.md#proposals). Blank lines are skipped. The crate does no
/// I/O of its own: the caller opens the file.
pub fn verify_applied_stream(reader: impl BufRead) -> Result<ChainReport, AppliedStreamError> {
    verify_applied_stream_with(reader, |_| {})
}

/// [`verify_applied_stream`], calling `on_line` with each line that verified, in order (to look
/// for a proposal id on the same pass).
pub fn verify_applied_stream_with(
    mut reader: impl BufRead,
    mut on_line: impl FnMut(&AppliedLine),
) -> Result<ChainReport, AppliedStreamError> {
    let mut check = ChainCheck::default();
    let mut report = ChainReport {
        lines: 0,
        last: None,
        broken: None,
    };
    let mut buf = Vec::new();
    let mut line_no: u64 = 0;
    loop {
        buf.clear();
        let read = (&mut reader)
            .take(MAX_APPLIED_LINE_BYTES + 1)
            .read_until(b'\n', &mut buf)?;
        if read == 0 {
            return Ok(report);
        }
        line_no += 1;
        let reason = if buf.len() as u64 > MAX_APPLIED_LINE_BYTES {
            Some(BreakReason::TooLong)
        } else if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        } else {
            match serde_json::from_slice::<AppliedLine>(&buf) {
                Err(e) => Some(BreakReason::Parse(e.to_string())),
                Ok(line) if check.accept(&line) => {
                    on_line(&line);
                    report.lines += 1;
                    report.last = Some(line);
                    None
                }
                Ok(_) => Some(BreakReason::Link),
            }
        };
        if let Some(reason) = reason {
            report.broken = Some(ChainBreak {
                index: report.lines,
                line: line_no,
                reason,
            });
            return Ok(report);
        }
    }
}

/// The chain rule, one line at a time: what both verifiers share.
#[derive(Debug, Default)]
struct ChainCheck {
    /// Lines accepted so far.
    count: u64,
    /// The last accepted line's hash (`None`: [`GENESIS`]).
    prev: Option<String>,
}

impl ChainCheck {
    /// Whether `line` is the next link; if so it becomes the head.
    fn accept(&mut self, line: &AppliedLine) -> bool {
        let seq_ok = self.count.checked_add(1) == Some(line.seq);
        let prev = self.prev.as_deref().unwrap_or(GENESIS);
        if !seq_ok || line.prev != prev || line.hash != line_hash(line) {
            return false;
        }
        self.count = line.seq;
        self.prev = Some(line.hash.clone());
        true
    }
}

fn line_hash(line: &AppliedLine) -> String {
    sha256_hex(canonical_json(&Value::Object(unhashed(line))).as_bytes())
}

/// The line as serde writes it, minus `hash`. Built by hand so hashing cannot fail; a test keeps it
/// equal to the serde form.
fn unhashed(line: &AppliedLine) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("seq".into(), line.seq.into());
    m.insert("ts".into(), line.ts.clone().into());
    m.insert("prev".into(), line.prev.clone().into());
    m.insert("id".into(), line.id.clone().into());
    m.insert("slug".into(), line.slug.clone().into());
    m.insert("kind".into(), line.kind.as_str().into());
    m.insert("target".into(), line.target.clone().into());
    m.insert("proposalHash".into(), line.proposal_hash.clone().into());
    m.insert("appliedBy".into(), line.applied_by.clone().into());
    m
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::*;

    fn chain(n: usize) -> Vec<AppliedLine> {
        let mut lines: Vec<AppliedLine> = Vec::new();
        for i in 0..n {
            let line = chain_applied(
                lines.last(),
                format!("id-{i}"),
                format!("20261129-note-{i:08x}"),
                Kind::ALL[i % 4],
                format!("z/{i}.md"),
                sha256_hex(i.to_string().as_bytes()),
                "cred-1".into(),
                format!("2026-11-29T10:00:{:02}Z", i % 60),
            );
            lines.push(line);
        }
        lines
    }

    #[test]
    fn a_fresh_chain_verifies_and_links() {
        let lines = chain(5);
        assert_eq!(verify_applied_chain(&lines), Ok(()));
        assert_eq!(verify_applied_chain(&[]), Ok(()));
        assert_eq!(lines[0].seq, 1);
        assert_eq!(lines[0].prev, GENESIS);
        assert_eq!(lines[4].seq, 5);
        assert_eq!(lines[4].prev, lines[3].hash);
    }

    #[test]
    fn hashed_bytes_are_the_serde_form_without_hash() {
        for line in chain(4) {
            let mut v = serde_json::to_value(&line).unwrap();
            v.as_object_mut().unwrap().remove("hash");
            assert_eq!(Value::Object(unhashed(&line)), v);
        }
    }

    #[test]
    fn line_json_is_camel_case_and_strict() {
        let line = &chain(1)[0];
        let text = serde_json::to_string(line).unwrap();
        assert!(text.contains("\"proposalHash\"") && text.contains("\"appliedBy\""));
        let mut v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(serde_json::from_value::<AppliedLine>(v.clone()).unwrap(), *line);
        v["extra"] = 1.into();
        assert!(serde_json::from_value::<AppliedLine>(v).is_err());
    }

    #[test]
    fn removed_reordered_and_replayed_lines_are_found() {
        let lines = chain(5);
        let mut removed = lines.clone();
        removed.remove(2);
        assert_eq!(verify_applied_chain(&removed), Err(2));
        let mut swapped = lines.clone();
        swapped.swap(1, 3);
        assert_eq!(verify_applied_chain(&swapped), Err(1));
        let mut replayed = lines.clone();
        replayed.push(lines[4].clone());
        assert_eq!(verify_applied_chain(&replayed), Err(5));
        assert_eq!(verify_applied_chain(&lines[1..]), Err(0));
    }

    fn jsonl(lines: &[AppliedLine]) -> String {
        let mut out = String::new();
        for l in lines {
            out.push_str(&serde_json::to_string(l).unwrap());
            out.push('\n');
        }
        out
    }

    #[test]
    fn the_stream_verifier_has_no_size_limit() {
        let lines = chain(12_000);
        let text = jsonl(&lines);
        assert!(text.len() > 4 * 1024 * 1024, "{} bytes", text.len());
        let mut seen = 0;
        let report = verify_applied_stream_with(text.as_bytes(), |_| seen += 1).unwrap();
        assert_eq!(report.broken, None);
        assert_eq!(report.lines, 12_000);
        assert_eq!(seen, 12_000);
        assert_eq!(report.last.as_ref(), lines.last());
        // Read through a small buffer too: nothing depends on the reader holding the whole file.
        let small = std::io::BufReader::with_capacity(64, text.as_bytes());
        assert_eq!(verify_applied_stream(small).unwrap(), report);
    }

    #[test]
    fn the_stream_verifier_names_the_line_the_slice_verifier_names() {
        let lines = chain(6);
        let mut swapped = lines.clone();
        swapped.swap(2, 4);
        let report = verify_applied_stream(jsonl(&swapped).as_bytes()).unwrap();
        let broken = report.broken.unwrap();
        assert_eq!(verify_applied_chain(&swapped), Err(2));
        assert_eq!(
            (broken.index, broken.line, broken.reason),
            (2, 3, BreakReason::Link)
        );
        assert_eq!(report.lines, 2);
        assert_eq!(report.last.as_ref(), Some(&lines[1]));
        // Blank lines are skipped; a torn fragment (a crash mid-append) is named by its line.
        let text = format!(
            "{}\n  \n{}{{\"seq\":3,\"ts",
            jsonl(&lines[..1]),
            jsonl(&lines[1..2])
        );
        let report = verify_applied_stream(text.as_bytes()).unwrap();
        let broken = report.broken.unwrap();
        assert_eq!((report.lines, broken.index, broken.line), (2, 2, 5));
        assert!(matches!(broken.reason, BreakReason::Parse(_)));
        // An over-long line stops the read.
        let long = format!(
            "{}{}\n",
            jsonl(&lines[..1]),
            "x".repeat(MAX_APPLIED_LINE_BYTES as usize + 1)
        );
        let broken = verify_applied_stream(long.as_bytes()).unwrap().broken.unwrap();
        assert_eq!((broken.index, broken.reason), (1, BreakReason::TooLong));
        assert_eq!(verify_applied_stream(&b""[..]).unwrap().lines, 0);
    }

    type Alter = fn(&mut AppliedLine);
    const ALTERATIONS: &[Alter] = &[
        |l| l.seq += 1,
        |l| l.ts.push('x'),
        |l| l.prev = sha256_hex(b"x"),
        |l| l.hash = sha256_hex(b"x"),
        |l| l.id.push('x'),
        |l| l.slug.push('x'),
        |l| {
            l.kind = if l.kind == Kind::New {
                Kind::Patch
            } else {
                Kind::New
            }
        },
        |l| l.target.push('x'),
        |l| l.proposal_hash = sha256_hex(b"x"),
        |l| l.applied_by.push('x'),
    ];

    proptest! {
        #[test]
        fn any_altered_line_is_detected_at_its_index(
            n in 1usize..8,
            at in any::<prop::sample::Index>(),
            which in 0..ALTERATIONS.len(),
        ) {
            let mut lines = chain(n);
            let index = at.index(n);
            ALTERATIONS[which](&mut lines[index]);
            prop_assert_eq!(verify_applied_chain(&lines), Err(index));
        }

        #[test]
        fn any_flipped_byte_of_the_jsonl_is_detected_at_its_line(
            n in 1usize..6,
            at in any::<prop::sample::Index>(),
            bit in 0u8..7,
        ) {
            let lines = chain(n);
            let text: Vec<String> = lines.iter().map(|l| serde_json::to_string(l).unwrap()).collect();
            let total: usize = text.iter().map(String::len).sum();
            let mut flat = at.index(total);
            let (index, offset) = text.iter().enumerate().find_map(|(i, t)| {
                if flat < t.len() { Some((i, flat)) } else { flat -= t.len(); None }
            }).unwrap();
            let mut bytes = text[index].clone().into_bytes();
            bytes[offset] ^= 1 << bit;
            // A flip that breaks the JSON (or its UTF-8) is caught by the parser, which is also at this line.
            let parsed = String::from_utf8(bytes)
                .ok()
                .and_then(|s| serde_json::from_str::<AppliedLine>(&s).ok());
            if let Some(altered) = parsed {
                let mut altered_lines = lines.clone();
                altered_lines[index] = altered;
                prop_assert_eq!(verify_applied_chain(&altered_lines), Err(index));
            }
        }
    }
}
