//! Chain hashing: canonical JSON, record hashes, and sealing an [`Entry`] into an [`AuditRecord`].
//!
//! Pure: no I/O, no clock. `seal` and `check_hash_and_form` must agree byte for byte, so both go
//! through [`record_map`] and [`canonical_json`].

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::error::AuditError;
use crate::record::{AuditRecord, Entry, rfc3339_millis};

/// `prev` of the first record (seq 1): 64 zeros.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Canonical JSON: object keys sorted by Unicode code point, no insignificant whitespace, strings
/// escaped exactly as `serde_json` does (`"`, `\`, and control characters only).
///
/// Keys are sorted here explicitly rather than trusting `serde_json::Map`'s iteration order,
/// which becomes insertion order if any crate in the build enables `preserve_order`. Comparing
/// UTF-8 bytes is the same as comparing code points.
pub fn canonical_json(v: &Value) -> String {
    let mut out = String::new();
    write_value(v, &mut out);
    out
}

/// Lowercase hex SHA-256 of the canonical JSON of a tool call's arguments.
pub fn args_hash(args: &Value) -> String {
    sha256_hex(canonical_json(args).as_bytes())
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn write_value(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => write_object(map, out),
    }
}

fn write_object(map: &Map<String, Value>, out: &mut String) {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    out.push('{');
    for (i, (key, value)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(key, out);
        out.push(':');
        write_value(value, out);
    }
    out.push('}');
}

fn write_string(s: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let b = c as u32 as usize;
                out.push_str("\\u00");
                out.push(char::from(HEX[b >> 4]));
                out.push(char::from(HEX[b & 0xf]));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The record as a JSON object, its `hash` field taken out.
fn record_map(record: &AuditRecord) -> Result<Map<String, Value>, serde_json::Error> {
    match serde_json::to_value(record)? {
        Value::Object(mut map) => {
            map.remove("hash");
            Ok(map)
        }
        // A struct always serializes to an object; kept as an error rather than a panic.
        _ => Err(serde::ser::Error::custom("record did not encode as an object")),
    }
}

fn canonical_map(map: &Map<String, Value>) -> String {
    let mut out = String::new();
    write_object(map, &mut out);
    out
}

/// Longest echoed client string a record keeps whole (docs/contract.md#the-audit-log).
pub const MAX_ECHO_BYTES: usize = 256;

/// `s` itself when it has at most [`MAX_ECHO_BYTES`] bytes; otherwise its longest prefix of at
/// most that many bytes that ends on a character boundary, then `…sha256:` and the hex SHA-256 of
/// the whole value, so the record still identifies what was sent.
pub fn cut_echo(s: String) -> String {
    if s.len() <= MAX_ECHO_BYTES {
        return s;
    }
    let mut end = MAX_ECHO_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…sha256:{}", &s[..end], sha256_hex(s.as_bytes()))
}

/// Builds the record that follows (`last_seq`, `prev`) and its line (canonical JSON + `\n`):
/// the one way an entry becomes a record, for a home's log and for a team's chain alike.
pub fn seal(
    entry: Entry,
    last_seq: u64,
    prev: &str,
    now: OffsetDateTime,
) -> Result<(AuditRecord, String), AuditError> {
    let seq = last_seq
        .checked_add(1)
        .ok_or(AuditError::SeqExhausted { last: last_seq })?;
    let ts = rfc3339_millis::normalize(now).map_err(|reason| AuditError::Timestamp { reason })?;
    let Entry {
        event,
        actor,
        vault,
        tool,
        target,
        proposal_id,
        challenge_id,
        outcome,
        code,
        args_hash,
        count,
        approval,
        gateway,
    } = entry;
    // SECURITY(T-AUDIT6): strings a client chose are cut here, where every entry becomes a
    // record, so no caller can forget it and no input makes a line too long to write.
    let mut record = AuditRecord {
        seq,
        ts,
        prev: prev.to_owned(),
        hash: String::new(),
        event,
        actor,
        vault: vault.map(cut_echo),
        tool: tool.map(cut_echo),
        target: target.map(cut_echo),
        proposal_id: proposal_id.map(cut_echo),
        challenge_id: challenge_id.map(cut_echo),
        outcome,
        code,
        args_hash,
        count,
        approval: approval.map(cut_echo),
        gateway: gateway.map(cut_echo),
    };
    let mut map = record_map(&record)?;
    record.hash = sha256_hex(canonical_map(&map).as_bytes());
    map.insert("hash".to_owned(), Value::String(record.hash.clone()));
    let mut line = canonical_map(&map);
    line.push('\n');
    Ok((record, line))
}

/// Why a parsed record does not stand on its own (chain links are checked by the caller).
pub(crate) enum SelfCheck {
    Valid,
    HashMismatch { computed: String },
    NotCanonical,
}

/// Recomputes `record`'s hash and canonical text and compares them with what was stored.
pub(crate) fn check_hash_and_form(
    record: &AuditRecord,
    raw_line: &[u8],
) -> Result<SelfCheck, serde_json::Error> {
    let mut map = record_map(record)?;
    let computed = sha256_hex(canonical_map(&map).as_bytes());
    if computed != record.hash {
        return Ok(SelfCheck::HashMismatch { computed });
    }
    map.insert("hash".to_owned(), Value::String(record.hash.clone()));
    if canonical_map(&map).as_bytes() != raw_line {
        return Ok(SelfCheck::NotCanonical);
    }
    Ok(SelfCheck::Valid)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::record::{Actor, Outcome};
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn keys_sort_by_code_point_at_every_depth() {
        let v = json!({"b": 1, "a": {"z": [3, {"y": null, "x": true}], "Z": "s"}, "é": 0, "e": 0});
        assert_eq!(
            canonical_json(&v),
            r#"{"a":{"Z":"s","z":[3,{"x":true,"y":null}]},"b":1,"e":0,"é":0}"#
        );
    }

    #[test]
    fn code_point_order_is_not_utf16_order() {
        // U+FF61 < U+1F600 by code point; UTF-16 would put the surrogate pair (0xD83D) first.
        let v = json!({"\u{1F600}": 1, "\u{FF61}": 2});
        assert_eq!(canonical_json(&v), "{\"\u{FF61}\":2,\"\u{1F600}\":1}");
    }

    #[test]
    fn strings_escape_like_serde_json() {
        let s = "q\"b\\n\nr\rt\tb\u{8}f\u{c}c\u{1}\u{1f}d\u{7f}é😀";
        assert_eq!(canonical_json(&json!(s)), serde_json::to_string(s).unwrap());
    }

    #[test]
    fn args_hash_ignores_key_order_and_whitespace() {
        let a: Value = serde_json::from_str(r#"{"path": "a.md", "opts": {"x": 1, "y": 2}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"opts":{"y":2,"x":1},"path":"a.md"}"#).unwrap();
        assert_eq!(args_hash(&a), args_hash(&b));
        assert_eq!(args_hash(&a).len(), 64);
        assert_ne!(args_hash(&a), args_hash(&json!({"path": "b.md"})));
        // Known vector: SHA-256 of `{}`.
        assert_eq!(
            args_hash(&json!({})),
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }

    #[test]
    fn sealed_line_is_the_canonical_record_and_hash_excludes_itself() {
        let entry = Entry::new("tool_call", Actor::Cli { user: "alice".into() }, Outcome::Ok);
        let now = time::macros::datetime!(2026-11-29 20:31:47.123 UTC);
        let (record, line) = seal(entry, 0, GENESIS, now).unwrap();
        assert_eq!(record.seq, 1);
        assert_eq!(record.prev, GENESIS);
        let without_hash = format!(
            r#"{{"actor":"cli:alice","event":"tool_call","outcome":"ok","prev":"{GENESIS}","seq":1,"ts":"2026-11-29T20:31:47.123Z"}}"#
        );
        assert_eq!(record.hash, sha256_hex(without_hash.as_bytes()));
        let expected = format!(
            r#"{{"actor":"cli:alice","event":"tool_call","hash":"{}","outcome":"ok","prev":"{GENESIS}","seq":1,"ts":"2026-11-29T20:31:47.123Z"}}"#,
            record.hash
        );
        assert_eq!(line, format!("{expected}\n"));
        assert!(matches!(
            check_hash_and_form(&record, expected.as_bytes()).unwrap(),
            SelfCheck::Valid
        ));
    }

    #[test]
    fn long_echoed_strings_are_cut_with_the_hash_of_the_whole() {
        let long = "é".repeat(1 << 19); // 1 MiB, two bytes a character
        let mut entry = Entry::new("tool_call", Actor::Cli { user: "u".into() }, Outcome::Denied);
        entry.vault = Some(long.clone());
        entry.target = Some(long.clone());
        entry.proposal_id = Some(long.clone());
        entry.challenge_id = Some(long.clone());
        entry.tool = Some(long.clone());
        let (record, line) = seal(entry, 0, GENESIS, time::OffsetDateTime::UNIX_EPOCH).unwrap();
        assert!(line.len() < 4096, "line of {} bytes", line.len());
        let expected = format!("{}…sha256:{}", "é".repeat(128), sha256_hex(long.as_bytes()));
        for field in [
            &record.vault,
            &record.target,
            &record.proposal_id,
            &record.challenge_id,
            &record.tool,
        ] {
            assert_eq!(field.as_deref(), Some(expected.as_str()));
        }
        // An odd cut never splits a character; a short value is kept whole.
        let odd = format!("a{}", "é".repeat(200));
        assert!(cut_echo(odd.clone()).starts_with(&odd[..255]));
        assert_eq!(cut_echo("notes/a.md".into()), "notes/a.md");
        assert_eq!(cut_echo("x".repeat(256)), "x".repeat(256));
    }

    #[test]
    fn count_is_part_of_the_hashed_record() {
        let mut entry = Entry::new("auth", Actor::Cli { user: "u".into() }, Outcome::Denied);
        entry.count = Some(7);
        let (record, line) = seal(entry, 0, GENESIS, time::OffsetDateTime::UNIX_EPOCH).unwrap();
        assert!(line.contains(r#""count":7"#));
        assert!(matches!(
            check_hash_and_form(&record, line.trim_end().as_bytes()).unwrap(),
            SelfCheck::Valid
        ));
    }

    #[test]
    fn seq_cannot_overflow() {
        let entry = Entry::new("e", Actor::Cli { user: "u".into() }, Outcome::Ok);
        let err = seal(entry, u64::MAX, GENESIS, time::OffsetDateTime::UNIX_EPOCH).unwrap_err();
        assert!(matches!(err, AuditError::SeqExhausted { .. }));
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            ".{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((".{0,6}", inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    /// Rebuilds every object of `v` with its keys inserted in reverse order.
    fn reinsert_reversed(v: &Value) -> Value {
        match v {
            Value::Array(items) => Value::Array(items.iter().map(reinsert_reversed).collect()),
            Value::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                entries.reverse();
                Value::Object(
                    entries
                        .into_iter()
                        .map(|(k, v)| (k.clone(), reinsert_reversed(v)))
                        .collect(),
                )
            }
            other => other.clone(),
        }
    }

    proptest! {
        #[test]
        fn canonical_json_round_trips_and_is_stable(v in arb_json()) {
            let text = canonical_json(&v);
            let parsed: Value = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(&parsed, &v);
            prop_assert_eq!(canonical_json(&parsed), text.clone());
            prop_assert_eq!(canonical_json(&reinsert_reversed(&v)), text);
        }
    }
}
