//! The one cursor of every list and search tool (docs/contract.md#limits-and-pagination): an opaque string that names where
//! the next page starts. It carries a stable key (a sort key, an index row, a proposal's
//! `createdAt` and row), never an offset, and is sealed with an HMAC over the tool, the vault,
//! the other arguments and the credential, so a client can neither forge one nor carry it to
//! another call. A search cursor also names the vault revision it was made at.
//!
//! Wire form: base64url (no padding) of `payload ‖ mac[..16]`, at most 128 characters; long keys
//! are cut to a head and a hash (`vault::Key`) to fit.

use std::time::Duration;

use ring::hmac;
use serde_json::Value;
use vault::data::{PosKey, QueryPos};
use vault::{Key, NotesPos, RankPos, RecentPos, SearchPos};

use crate::error::GatewayError;
use crate::home::SecretKey;

/// docs/contract.md#limits-and-pagination: ids, `cursor` included, are at most 128 bytes.
pub const MAX_CURSOR_BYTES: usize = 128;
const MAC_BYTES: usize = 16;
/// 128 base64 characters hold 96 bytes.
const MAX_PAYLOAD: usize = MAX_CURSOR_BYTES / 4 * 3 - MAC_BYTES;
const DOMAIN: &[u8] = b"vaultgate.cursor.v1\0";

/// The limits of what a read answers (docs/contract.md#limits-and-pagination). Defaults here; the lead wires them to
/// `gateway.toml [limits]` (`max_output_bytes`, `search_budget_ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLimits {
    /// A tool result's JSON is at most this long (`max_output_bytes`).
    pub max_output_bytes: usize,
    /// How long a search examines candidates (`search_budget_ms`).
    pub search_budget: Duration,
}

impl ReadLimits {
    pub const DEFAULT: ReadLimits = ReadLimits {
        max_output_bytes: 16 * 1024 * 1024,
        search_budget: Duration::from_millis(2000),
    };
}

impl Default for ReadLimits {
    fn default() -> ReadLimits {
        ReadLimits::DEFAULT
    }
}

/// Where a page starts, per tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Position {
    Notes(NotesPos),
    /// `list_tags`: most used first, then by folded name.
    Tags {
        count: u64,
        name: Key,
    },
    Recent(RecentPos),
    /// `list_proposals`: newest first, by `createdAt` then row.
    Proposals {
        created_at: Key,
        row: i64,
    },
    /// `get_note_history`: newest first; the next page starts before change `seq`, under the
    /// note's name `path` there (the walk follows moves).
    History {
        seq: i64,
        path: Key,
    },
    /// `query_notes`: after this (sort key, path) in the call's order.
    Query(QueryPos),
    /// `list_attachments`: after this path.
    Attachments(Key),
    /// A search, valid only at the vault revision it was made at.
    Search {
        revision: u64,
        pos: SearchPos,
    },
}

/// What a cursor is bound to: the call as sent, less `cursor` and `limit` (which may change
/// between pages), on the vault it resolved to, for one credential.
#[derive(Debug, Clone, Copy)]
pub struct Binding<'a> {
    pub tool: &'a str,
    pub vault: &'a str,
    pub credential: &'a str,
    pub args: &'a Value,
}

impl Binding<'_> {
    fn message(&self, payload: &[u8]) -> Vec<u8> {
        // Absent and null are the same call; `vault` is bound as resolved.
        let args = match self.args {
            Value::Object(m) => Value::Object(
                m.iter()
                    .filter(|(k, v)| !v.is_null() && !matches!(k.as_str(), "cursor" | "limit" | "vault"))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            ),
            other => other.clone(),
        };
        let mut m = Vec::with_capacity(128 + payload.len());
        m.extend_from_slice(DOMAIN);
        for part in [
            self.tool,
            self.vault,
            self.credential,
            &audit::canonical_json(&args),
        ] {
            m.extend_from_slice(&(part.len() as u64).to_be_bytes());
            m.extend_from_slice(part.as_bytes());
        }
        m.extend_from_slice(payload);
        m
    }
}

fn mac(secret: &[u8; 32], binding: &Binding<'_>, payload: &[u8]) -> [u8; MAC_BYTES] {
    let key = proposals::keys::hmac_key(secret, proposals::keys::CURSOR);
    let tag = hmac::sign(&key, &binding.message(payload));
    let mut out = [0u8; MAC_BYTES];
    out.copy_from_slice(&tag.as_ref()[..MAC_BYTES]);
    out
}

/// Seals `pos` into a cursor for the next call bound as `binding`.
pub fn seal(secret: &SecretKey, binding: &Binding<'_>, pos: &Position) -> String {
    seal_with(secret.bytes(), binding, pos)
}

fn seal_with(secret: &[u8; 32], binding: &Binding<'_>, pos: &Position) -> String {
    let payload = encode_fitting(pos);
    let mut bytes = payload.clone();
    bytes.extend_from_slice(&mac(secret, binding, &payload));
    b64_encode(&bytes)
}

/// Opens a cursor sent with a call bound as `binding`. Anything but a cursor this gateway sealed
/// for this very call (other arguments, another credential, another tool, a changed byte) is
/// `INVALID_ARGUMENT`.
pub fn open(secret: &SecretKey, binding: &Binding<'_>, cursor: &str) -> Result<Position, GatewayError> {
    open_with(secret.bytes(), binding, cursor)
}

fn open_with(secret: &[u8; 32], binding: &Binding<'_>, cursor: &str) -> Result<Position, GatewayError> {
    let bad = || {
        GatewayError::InvalidArgument("cursor is not valid for this call: pass the nextCursor of the previous page of the same call (same arguments but limit), or leave it out to start over".into())
    };
    if cursor.len() > MAX_CURSOR_BYTES {
        return Err(GatewayError::InvalidArgument(format!(
            "cursor is at most {MAX_CURSOR_BYTES} bytes"
        )));
    }
    let bytes = b64_decode(cursor).ok_or_else(bad)?;
    if bytes.len() <= MAC_BYTES {
        return Err(bad());
    }
    let (payload, tag) = bytes.split_at(bytes.len() - MAC_BYTES);
    // SECURITY(T-PAGE1): sealed cursors; compared in constant time.
    let want = mac(secret, binding, payload);
    if !constant_eq(&want, tag) {
        return Err(bad());
    }
    decode(payload).ok_or_else(bad)
}

/// A search cursor made at another revision: the vault moved since.
pub fn check_revision(pos: &Position, now: u64) -> Result<(), GatewayError> {
    match pos {
        Position::Search { revision, .. } if *revision != now => Err(GatewayError::InvalidArgument(
            "the vault changed; search again (without cursor)".into(),
        )),
        _ => Ok(()),
    }
}

fn constant_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

// ---- the payload -------------------------------------------------------------------------------

const T_NOTES: u8 = 1;
const T_TAGS: u8 = 2;
const T_RECENT: u8 = 3;
const T_PROPOSALS: u8 = 4;
const T_SEARCH: u8 = 5;
const T_HISTORY: u8 = 6;
const T_QUERY: u8 = 7;
const T_ATTACHMENTS: u8 = 8;

/// `PosKey` kinds in a `T_QUERY` payload.
const K_MISSING: u8 = 0;
const K_NUM: u8 = 1;
const K_DATE: u8 = 2;
const K_TEXT: u8 = 3;
const K_FALSE: u8 = 4;
const K_TRUE: u8 = 5;

/// The payload with exact keys, or, when that is too long, with keys cut shorter and shorter.
fn encode_fitting(pos: &Position) -> Vec<u8> {
    let mut out = encode(pos, None);
    for n in [48, 32, 24, 16, 8, 0] {
        if out.len() <= MAX_PAYLOAD {
            break;
        }
        out = encode(pos, Some(n));
    }
    out
}

fn encode(pos: &Position, cut: Option<usize>) -> Vec<u8> {
    let mut w = Vec::with_capacity(64);
    let key = |w: &mut Vec<u8>, k: &Key| put_key(w, &cut.map_or_else(|| k.clone(), |n| k.cut(n)));
    match pos {
        Position::Notes(p) => {
            w.push(T_NOTES);
            w.push(u8::from(p.file));
            key(&mut w, &p.name);
        }
        Position::Tags { count, name } => {
            w.push(T_TAGS);
            put_uint(&mut w, *count);
            key(&mut w, name);
        }
        Position::Recent(p) => {
            w.push(T_RECENT);
            put_int(&mut w, p.mtime);
            key(&mut w, &p.path);
        }
        Position::Proposals { created_at, row } => {
            w.push(T_PROPOSALS);
            put_int(&mut w, *row);
            key(&mut w, created_at);
        }
        Position::History { seq, path } => {
            w.push(T_HISTORY);
            put_int(&mut w, *seq);
            key(&mut w, path);
        }
        Position::Query(p) => {
            w.push(T_QUERY);
            match &p.key {
                PosKey::Missing => w.push(K_MISSING),
                PosKey::Num(bits) => {
                    w.push(K_NUM);
                    w.extend_from_slice(&bits.to_be_bytes());
                }
                PosKey::Date(t) => {
                    w.push(K_DATE);
                    w.extend_from_slice(&t.to_be_bytes());
                }
                PosKey::Text(k) => {
                    w.push(K_TEXT);
                    key(&mut w, k);
                }
                PosKey::Bool(b) => w.push(if *b { K_TRUE } else { K_FALSE }),
            }
            key(&mut w, &p.path);
        }
        Position::Attachments(path) => {
            w.push(T_ATTACHMENTS);
            key(&mut w, path);
        }
        Position::Search { revision, pos } => {
            w.push(T_SEARCH);
            put_uint(&mut w, *revision);
            let flags = u8::from(pos.start.is_some()) | (u8::from(pos.after.is_some()) << 1);
            w.push(flags);
            if let Some((k, line)) = &pos.start {
                put_uint(&mut w, u64::from(*line));
                key(&mut w, k);
            }
            if let Some(a) = &pos.after {
                put_uint(&mut w, u64::from(a.score));
                put_uint(&mut w, u64::from(a.line));
                key(&mut w, &a.path);
            }
        }
    }
    w
}

fn decode(b: &[u8]) -> Option<Position> {
    let mut r = Reader { b, at: 0 };
    let pos = match r.byte()? {
        T_NOTES => {
            let file = match r.byte()? {
                0 => false,
                1 => true,
                _ => return None,
            };
            Position::Notes(NotesPos { file, name: r.key()? })
        }
        T_TAGS => Position::Tags {
            count: r.uint()?,
            name: r.key()?,
        },
        T_RECENT => Position::Recent(RecentPos {
            mtime: r.int()?,
            path: r.key()?,
        }),
        T_PROPOSALS => Position::Proposals {
            row: r.int()?,
            created_at: r.key()?,
        },
        T_HISTORY => Position::History {
            seq: r.int()?,
            path: r.key()?,
        },
        T_QUERY => {
            let key = match r.byte()? {
                K_MISSING => PosKey::Missing,
                K_NUM => PosKey::Num(u64::from_be_bytes(r.take(8)?.try_into().ok()?)),
                K_DATE => PosKey::Date(i128::from_be_bytes(r.take(16)?.try_into().ok()?)),
                K_TEXT => PosKey::Text(r.key()?),
                K_FALSE => PosKey::Bool(false),
                K_TRUE => PosKey::Bool(true),
                _ => return None,
            };
            Position::Query(QueryPos { key, path: r.key()? })
        }
        T_ATTACHMENTS => Position::Attachments(r.key()?),
        T_SEARCH => {
            let revision = r.uint()?;
            let flags = r.byte()?;
            if flags > 3 {
                return None;
            }
            let start = if flags & 1 != 0 {
                let line = u32::try_from(r.uint()?).ok()?;
                Some((r.key()?, line))
            } else {
                None
            };
            let after = if flags & 2 != 0 {
                let score = u32::try_from(r.uint()?).ok()?;
                let line = u32::try_from(r.uint()?).ok()?;
                Some(RankPos {
                    score,
                    line,
                    path: r.key()?,
                })
            } else {
                None
            };
            Position::Search {
                revision,
                pos: SearchPos { start, after },
            }
        }
        _ => return None,
    };
    (r.at == b.len()).then_some(pos)
}

/// A key: one byte of length (high bit: cut, then 8 bytes of hash follow the head).
fn put_key(w: &mut Vec<u8>, k: &Key) {
    // Heads are cut to fit a cursor long before 127 bytes matter; an exact key that does not
    // fit is cut here rather than mis-encoded.
    let k = if k.head.len() > 0x7f {
        k.cut(0x7f)
    } else {
        k.clone()
    };
    let len = k.head.len() as u8;
    w.push(len | if k.hash.is_some() { 0x80 } else { 0 });
    w.extend_from_slice(&k.head);
    if let Some(h) = k.hash {
        w.extend_from_slice(&h);
    }
}

fn put_uint(w: &mut Vec<u8>, mut n: u64) {
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            w.push(b);
            return;
        }
        w.push(b | 0x80);
    }
}

fn put_int(w: &mut Vec<u8>, n: i64) {
    put_uint(w, ((n << 1) ^ (n >> 63)) as u64);
}

struct Reader<'b> {
    b: &'b [u8],
    at: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Option<u8> {
        let v = *self.b.get(self.at)?;
        self.at += 1;
        Some(v)
    }

    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }

    fn uint(&mut self) -> Option<u64> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            n |= u64::from(b & 0x7f).checked_shl(shift)?;
            if b & 0x80 == 0 {
                return Some(n);
            }
        }
        None
    }

    fn int(&mut self) -> Option<i64> {
        let u = self.uint()?;
        Some(((u >> 1) as i64) ^ -((u & 1) as i64))
    }

    fn key(&mut self) -> Option<Key> {
        let l = self.byte()?;
        let head = self.take(usize::from(l & 0x7f))?.to_vec();
        let hash = if l & 0x80 != 0 {
            let mut h = [0u8; 8];
            h.copy_from_slice(self.take(8)?);
            Some(h)
        } else {
            None
        };
        Some(Key { head, hash })
    }
}

// ---- base64url without padding ---------------------------------------------------------------

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

fn b64_encode(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for chunk in b.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, x)| acc | (u32::from(*x) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(char::from(B64[((n >> (18 - 6 * i)) & 0x3f) as usize]));
        }
    }
    out
}

fn b64_decode(s: &str) -> Option<Vec<u8>> {
    if s.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    for chunk in s.as_bytes().chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            let v = B64.iter().position(|b| b == c)? as u32;
            n |= v << (18 - 6 * i);
        }
        for i in 0..chunk.len() - 1 {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    // Non-canonical trailing bits would give two spellings of one cursor.
    (b64_encode(&out) == s).then_some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn secret(b: u8) -> [u8; 32] {
        [b; 32]
    }

    fn binding<'a>(args: &'a Value, cred: &'a str) -> Binding<'a> {
        Binding {
            tool: "list_notes",
            vault: "basic",
            credential: cred,
            args,
        }
    }

    fn key() -> impl Strategy<Value = Key> {
        ".{0,300}".prop_map(|s| Key::exact(&s))
    }

    fn position() -> impl Strategy<Value = Position> {
        prop_oneof![
            (any::<bool>(), key()).prop_map(|(file, name)| Position::Notes(NotesPos { file, name })),
            (any::<u64>(), key()).prop_map(|(count, name)| Position::Tags { count, name }),
            (any::<i64>(), key()).prop_map(|(mtime, path)| Position::Recent(RecentPos { mtime, path })),
            (any::<i64>(), key()).prop_map(|(row, created_at)| Position::Proposals { created_at, row }),
            (any::<i64>(), key()).prop_map(|(seq, path)| Position::History { seq, path }),
            (pos_key(), key()).prop_map(|(key, path)| Position::Query(QueryPos { key, path })),
            key().prop_map(Position::Attachments),
            (
                any::<u64>(),
                proptest::option::of((key(), any::<u32>())),
                proptest::option::of((any::<u32>(), key(), any::<u32>()))
            )
                .prop_map(|(revision, start, after)| Position::Search {
                    revision,
                    pos: SearchPos {
                        start,
                        after: after.map(|(score, path, line)| RankPos { score, path, line }),
                    },
                }),
        ]
    }

    fn pos_key() -> impl Strategy<Value = PosKey> {
        prop_oneof![
            Just(PosKey::Missing),
            any::<u64>().prop_map(PosKey::Num),
            any::<i128>().prop_map(PosKey::Date),
            key().prop_map(PosKey::Text),
            any::<bool>().prop_map(PosKey::Bool),
        ]
    }

    /// The key as the cursor may have cut it must still name the original.
    fn names(k: &Key, orig: &Key) -> bool {
        let s = String::from_utf8_lossy(&orig.head);
        k == orig || (k.hash.is_some() && k.order_of(&s) == Some(std::cmp::Ordering::Equal))
    }

    fn same(a: &Position, b: &Position) -> bool {
        match (a, b) {
            (Position::Notes(x), Position::Notes(y)) => x.file == y.file && names(&y.name, &x.name),
            (Position::Tags { count: c, name: n }, Position::Tags { count: d, name: m }) => {
                c == d && names(m, n)
            }
            (Position::Recent(x), Position::Recent(y)) => x.mtime == y.mtime && names(&y.path, &x.path),
            (
                Position::Proposals {
                    created_at: c,
                    row: r,
                },
                Position::Proposals {
                    created_at: d,
                    row: s,
                },
            ) => r == s && names(d, c),
            (Position::History { seq: a, path: p }, Position::History { seq: b, path: q }) => {
                a == b && names(q, p)
            }
            (Position::Query(x), Position::Query(y)) => {
                names(&y.path, &x.path)
                    && match (&x.key, &y.key) {
                        (PosKey::Text(a), PosKey::Text(b)) => names(b, a),
                        (a, b) => a == b,
                    }
            }
            (Position::Attachments(p), Position::Attachments(q)) => names(q, p),
            (Position::Search { revision: r, pos: p }, Position::Search { revision: s, pos: q }) => {
                r == s
                    && match (&p.start, &q.start) {
                        (None, None) => true,
                        (Some((k, l)), Some((m, n))) => l == n && names(m, k),
                        _ => false,
                    }
                    && match (&p.after, &q.after) {
                        (None, None) => true,
                        (Some(a), Some(b)) => {
                            a.score == b.score && a.line == b.line && names(&b.path, &a.path)
                        }
                        _ => false,
                    }
            }
            _ => false,
        }
    }

    proptest! {
        #[test]
        fn a_sealed_cursor_opens_to_its_position_and_fits(pos in position()) {
            let s = secret(7);
            let args = json!({"dir": "z", "limit": 5});
            let c = seal_with(&s, &binding(&args, "cred_a"), &pos);
            prop_assert!(c.len() <= MAX_CURSOR_BYTES, "{} bytes", c.len());
            let back = open_with(&s, &binding(&args, "cred_a"), &c).unwrap();
            prop_assert!(same(&pos, &back), "{pos:?} -> {back:?}");
        }

        #[test]
        fn any_changed_character_is_refused(pos in position(), at in any::<prop::sample::Index>(), with in 0usize..64) {
            let s = secret(7);
            let args = json!({"dir": "z"});
            let c = seal_with(&s, &binding(&args, "cred_a"), &pos);
            let mut bytes = c.clone().into_bytes();
            let i = at.index(bytes.len());
            let replacement = B64[with];
            prop_assume!(bytes[i] != replacement);
            bytes[i] = replacement;
            let forged = String::from_utf8(bytes).unwrap();
            let e = open_with(&s, &binding(&args, "cred_a"), &forged).unwrap_err();
            prop_assert_eq!(e.code(), policy::ErrorCode::INVALID_ARGUMENT);
        }
    }

    #[test]
    fn a_cursor_is_bound_to_the_call_the_credential_and_the_key() {
        let s = secret(1);
        let args = json!({"dir": "z", "limit": 5});
        let pos = Position::Notes(NotesPos {
            file: true,
            name: Key::exact("a.md"),
        });
        let c = seal_with(&s, &binding(&args, "cred_a"), &pos);
        // `limit` may change, `vault` and nulls do not count.
        let other_limit = json!({"dir": "z", "limit": 50, "vault": null, "cursor": c});
        assert_eq!(open_with(&s, &binding(&other_limit, "cred_a"), &c).unwrap(), pos);
        let refused = |b: Binding<'_>, s: &[u8; 32]| {
            open_with(s, &b, &c).unwrap_err().code() == policy::ErrorCode::INVALID_ARGUMENT
        };
        assert!(refused(binding(&json!({"dir": "y"}), "cred_a"), &s));
        assert!(refused(binding(&args, "cred_b"), &s));
        assert!(refused(
            Binding {
                tool: "list_tags",
                ..binding(&args, "cred_a")
            },
            &s
        ));
        assert!(refused(
            Binding {
                vault: "other",
                ..binding(&args, "cred_a")
            },
            &s
        ));
        assert!(refused(binding(&args, "cred_a"), &secret(2)));
        for garbled in ["", "!!!!", "A", &"A".repeat(200), "AAAAAAAAAAAAAAAAAAAAAAAA"] {
            assert!(
                open_with(&s, &binding(&args, "cred_a"), garbled).is_err(),
                "{garbled}"
            );
        }
    }

    #[test]
    fn a_search_cursor_holds_only_at_its_revision() {
        let pos = Position::Search {
            revision: 4,
            pos: SearchPos::default(),
        };
        assert!(check_revision(&pos, 4).is_ok());
        let e = check_revision(&pos, 5).unwrap_err();
        assert_eq!(e.code(), policy::ErrorCode::INVALID_ARGUMENT);
        assert!(e.to_string().contains("the vault changed; search again"));
    }

    proptest! {
        #[test]
        fn base64_round_trips(b in proptest::collection::vec(any::<u8>(), 0..100)) {
            prop_assert_eq!(b64_decode(&b64_encode(&b)).unwrap(), b);
        }
    }
}
