//! `query_notes` (docs/contract.md#notes-as-data-and-attachments): the catalog's readable notes as rows of typed frontmatter fields,
//! filtered, sorted and paged. The index keeps every note's [`NoteData`] in its catalog (built by
//! the same code that indexes the note), so a query reads no file; the scan fallback builds the
//! same rows from `Note::parse`, so both answer alike.
//!
//! The rules where docs/contract.md#notes-as-data-and-attachments is silent (also in the tool's description):
//! - Types. A frontmatter value is a number (a YAML number), a date (a string that is an RFC 3339
//!   date-time, or a `YYYY-MM-DD` calendar date taken as midnight UTC), a string (any other
//!   string), a boolean, a list, a mapping or null. A condition's `value` is a number, a string
//!   (a date when it reads as one, by the same rule) or a boolean; anything else is refused.
//!   Strings are never read as numbers (`"2024"` is a string).
//! - `eq`/`lt`/`lte`/`gt`/`gte` compare a field of the condition's type: numbers as numbers,
//!   dates by instant, strings case-insensitively (per-character lowercase, then code point
//!   order), booleans with false < true. A field of another type (a list included), missing or
//!   null never matches them. `ne` is exactly "not `eq`": it matches a missing field too.
//! - `contains`: on a list, some element `eq` the value; on a string or date field, the value
//!   (a string) is a case-insensitive substring of the field's text; on `tags`, the note carries
//!   the tag as `tag[]` means it (case-insensitive, `#` optional, `a/b` carries `a`). Else no.
//! - `exists` takes `true` (the default) or `false`: whether the field is present and not null.
//! - Built-ins: `path` and `title` are strings, `tags` the list of frontmatter and inline tags,
//!   `modified` the file's time (a date), `bytes` its size (a number). They win over frontmatter
//!   keys of the same name; other fields are top-level frontmatter keys, matched exactly.
//! - Sorting: by the field's value, ascending or descending, with ties (and notes of equal value)
//!   in path order; values of different types sort numbers, dates, strings, booleans (reversed
//!   by `desc`); a missing, null, list or mapping value sorts last in both orders. `path` sorts
//!   by its exact text (the catalog's order), other strings case-insensitively.
//! - Rows carry `path` and `title`; `fields` (only when `fields[]` names any) maps each named
//!   field the note has to its value as the frontmatter holds it (built-ins: `tags` a list,
//!   `modified` RFC 3339, `bytes` a number); a field the note lacks is left out.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::sync::Arc;

use policy::{FolderPath, VaultPath};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::search::fold;
use crate::types::{Key, VaultError};

/// Rows per page by default, and at most (docs/contract.md#notes-as-data-and-attachments).
pub const DEFAULT_LIMIT: usize = 50;
pub const MAX_LIMIT: usize = 200;

// ---- what a note contributes ------------------------------------------------------------------

/// A frontmatter value as queries compare it: a view into a [`NoteData`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Val<'a> {
    Num(f64),
    /// A date string: its instant (ns since the Unix epoch) and its folded text.
    Date(i128, &'a str),
    /// Any other string, folded.
    Text(&'a str),
    Bool(bool),
    /// A list's elements (nested lists and mappings inside it are `Other`: they equal nothing).
    List(Items<'a>),
    Null,
    /// A mapping (or a nested list inside a list): present, comparable to nothing.
    Other,
}

/// A list value's elements.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Items<'a> {
    /// The encoded elements (see [`NoteData`]).
    bytes: &'a [u8],
    len: u32,
}

impl<'a> Items<'a> {
    pub fn iter(self) -> impl Iterator<Item = Val<'a>> {
        let mut r = Reader(self.bytes);
        (0..self.len).map_while(move |_| r.value())
    }
}

// ---- the packed form ----------------------------------------------------------------------------
//
// A `NoteData` is one byte buffer (one allocation per note: there is one per readable note in
// memory). Integers are little-endian; a "str" is a LEB128 length then its UTF-8 bytes.
//
//   header   u32 field count, u32 tag count, u32 offset of the first field
//   title    str as spelled, then u8 1 and the folded str, or u8 0 when folding changes nothing
//   tags     as the title, one after the other
//   offsets  only with more than `SCAN_MAX` fields: u32 offset of each field, for binary search
//   fields   sorted by key: str key, then a value
//
// A value is a tag byte and its payload: Null, Other, False, True (none); Num (f64 bits, u64);
// Date (i64 seconds, u32 nanoseconds, folded str); Text (folded str); List (LEB128 count, then
// that many values, none of them a list).

const T_NULL: u8 = 0;
const T_OTHER: u8 = 1;
const T_FALSE: u8 = 2;
const T_TRUE: u8 = 3;
const T_NUM: u8 = 4;
const T_DATE: u8 = 5;
const T_TEXT: u8 = 6;
const T_LIST: u8 = 7;
const HEADER: usize = 12;
/// Up to this many fields a lookup scans them in order (memory read in order, which the cache
/// fetches ahead); beyond, it binary-searches an offset table.
const SCAN_MAX: usize = 16;

/// Reads a packed buffer from the front. Every read of a short or bad buffer ends (`None`);
/// the buffers are only ever written by [`Writer`], so that never happens.
#[derive(Clone, Copy)]
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (a, b) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = b;
        Some(a)
    }

    fn byte(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u32(&mut self) -> Option<u32> {
        self.take(4)?.try_into().ok().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Option<u64> {
        self.take(8)?.try_into().ok().map(u64::from_le_bytes)
    }

    fn len(&mut self) -> Option<usize> {
        let mut n: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            n |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return usize::try_from(n).ok();
            }
        }
        None
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.len()?;
        self.take(n)
    }

    fn str(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.bytes()?).ok()
    }

    /// A string as spelled and folded.
    fn folding(&mut self) -> Option<(&'a str, &'a str)> {
        let spelled = self.str()?;
        match self.byte()? {
            0 => Some((spelled, spelled)),
            _ => Some((spelled, self.str()?)),
        }
    }

    fn value(&mut self) -> Option<Val<'a>> {
        Some(match self.byte()? {
            T_NULL => Val::Null,
            T_FALSE => Val::Bool(false),
            T_TRUE => Val::Bool(true),
            T_NUM => Val::Num(f64::from_bits(self.u64()?)),
            T_DATE => {
                let secs = self.u64()? as i64;
                let nanos = self.u32()?;
                Val::Date(i128::from(secs) * 1_000_000_000 + i128::from(nanos), self.str()?)
            }
            T_TEXT => Val::Text(self.str()?),
            T_LIST => {
                let len = u32::try_from(self.len()?).ok()?;
                let start = self.0;
                for _ in 0..len {
                    self.value()?;
                }
                let used = start.len() - self.0.len();
                Val::List(Items {
                    bytes: start.get(..used)?,
                    len,
                })
            }
            _ => Val::Other,
        })
    }
}

/// Builds a packed buffer.
#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn u32(&mut self, n: u32) {
        self.0.extend_from_slice(&n.to_le_bytes());
    }

    fn len(&mut self, mut n: usize) {
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                self.0.push(b);
                return;
            }
            self.0.push(b | 0x80);
        }
    }

    fn str(&mut self, s: &str) {
        self.len(s.len());
        self.0.extend_from_slice(s.as_bytes());
    }

    fn folding(&mut self, s: &str) {
        self.str(s);
        let folded = fold(s);
        if folded == s {
            self.0.push(0);
        } else {
            self.0.push(1);
            self.str(&folded);
        }
    }

    /// A scalar (its folded text only: values as spelled are read from the index's copy of the
    /// frontmatter). Lists inside a list are `Other`.
    fn scalar(&mut self, v: &Value) {
        match (v, typed(v)) {
            (Value::Null, _) => self.0.push(T_NULL),
            (_, Some(Typed::Bool(b))) => self.0.push(if b { T_TRUE } else { T_FALSE }),
            (_, Some(Typed::Num(n))) => {
                self.0.push(T_NUM);
                self.0.extend_from_slice(&n.to_bits().to_le_bytes());
            }
            (_, Some(Typed::Str(Some(t), folded))) => {
                self.0.push(T_DATE);
                let secs = i64::try_from(t.div_euclid(1_000_000_000)).unwrap_or(i64::MAX);
                let nanos = u32::try_from(t.rem_euclid(1_000_000_000)).unwrap_or(0);
                self.0.extend_from_slice(&secs.to_le_bytes());
                self.u32(nanos);
                self.str(&folded);
            }
            (_, Some(Typed::Str(None, folded))) => {
                self.0.push(T_TEXT);
                self.str(&folded);
            }
            _ => self.0.push(T_OTHER),
        }
    }

    fn value(&mut self, v: &Value) {
        match v {
            Value::Array(list) => {
                self.0.push(T_LIST);
                self.len(list.len());
                for item in list {
                    self.scalar(item);
                }
            }
            v => self.scalar(v),
        }
    }

    fn at(&self) -> u32 {
        u32::try_from(self.0.len()).unwrap_or(u32::MAX)
    }

    fn set_u32(&mut self, at: usize, n: u32) {
        if let Some(slot) = self.0.get_mut(at..at + 4) {
            slot.copy_from_slice(&n.to_le_bytes());
        }
    }
}

/// A scalar JSON value typed as queries compare it: a string with its instant when it reads as
/// a date, and its folded text.
enum Typed {
    Num(f64),
    Bool(bool),
    Str(Option<i128>, String),
}

fn typed(v: &Value) -> Option<Typed> {
    match v {
        Value::Number(n) => n.as_f64().map(Typed::Num),
        Value::Bool(b) => Some(Typed::Bool(*b)),
        Value::String(s) => Some(Typed::Str(date_of(s), fold(s))),
        _ => None,
    }
}

/// The instant a date string names: an RFC 3339 date-time, or a `YYYY-MM-DD` date (midnight
/// UTC). Nothing else is a date.
pub fn date_of(s: &str) -> Option<i128> {
    let b = s.as_bytes();
    if b.len() < 10 || !b[..4].iter().all(u8::is_ascii_digit) || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    if b.len() == 10 {
        let format = time::macros::format_description!("[year]-[month]-[day]");
        return time::Date::parse(s, &format)
            .ok()
            .map(|d| d.midnight().assume_utc().unix_timestamp_nanos());
    }
    OffsetDateTime::parse(s, &Rfc3339)
        .ok()
        .map(OffsetDateTime::unix_timestamp_nanos)
}

/// What the index keeps of a readable note for queries: its title, tags and typed frontmatter.
///
/// One of these lives in memory for every readable note (inline in its catalog entry, so a
/// generation's copy of an entry shares it), so it is packed into one shared buffer (see "the
/// packed form" above): a string that folds to itself stored once, keys and values inline,
/// fields sorted by key. Finding a field reads that buffer only.
#[derive(Debug, Clone, PartialEq)]
pub struct NoteData {
    buf: Arc<[u8]>,
}

impl Default for NoteData {
    fn default() -> NoteData {
        NoteData::new(String::new(), Vec::new(), &Map::new())
    }
}

impl NoteData {
    pub fn new(title: String, tags: Vec<String>, frontmatter: &Map<String, Value>) -> NoteData {
        // A built-in wins over a key of its name (docs/contract.md#notes-as-data-and-attachments), so such a key is never looked up:
        // its value would be memory for nothing (`title` and `tags` are in most notes).
        let mut fields: Vec<(&String, &Value)> = frontmatter
            .iter()
            .filter(|(k, _)| !matches!(Field::parse(k), Ok(f) if !matches!(f, Field::Key(_))))
            .collect();
        fields.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        let mut w = Writer(Vec::with_capacity(64 + title.len() * 2 + 32 * fields.len()));
        w.u32(u32::try_from(fields.len()).unwrap_or(u32::MAX));
        w.u32(u32::try_from(tags.len()).unwrap_or(u32::MAX));
        w.u32(0);
        w.folding(&title);
        for t in &tags {
            w.folding(t);
        }
        let table = w.0.len();
        if fields.len() > SCAN_MAX {
            w.0.resize(table + 4 * fields.len(), 0);
        }
        let first = w.at();
        w.set_u32(8, first);
        for (i, (k, v)) in fields.iter().enumerate() {
            if fields.len() > SCAN_MAX {
                let at = w.at();
                w.set_u32(table + 4 * i, at);
            }
            w.str(k);
            w.value(v);
        }
        NoteData { buf: Arc::from(w.0) }
    }

    fn header(&self) -> (usize, usize, usize) {
        let mut r = Reader(&self.buf);
        let mut n = || r.u32().map_or(0, |n| n as usize);
        (n(), n(), n())
    }

    fn title_pair(&self) -> (&str, &str) {
        Reader(self.buf.get(HEADER..).unwrap_or(&[]))
            .folding()
            .unwrap_or(("", ""))
    }

    pub fn title(&self) -> &str {
        self.title_pair().0
    }

    fn folded_title(&self) -> &str {
        self.title_pair().1
    }

    /// `Note::tags` as spelled and folded.
    fn tag_pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        let (_, n, _) = self.header();
        let mut r = Reader(self.buf.get(HEADER..).unwrap_or(&[]));
        let title = r.folding();
        (0..n).map_while(move |_| title.and(r.folding()))
    }

    /// `Note::tags`, as spelled.
    pub fn tags(&self) -> impl Iterator<Item = &str> {
        self.tag_pairs().map(|t| t.0)
    }

    pub fn field(&self, key: &str) -> Option<Val<'_>> {
        let (n, _, first) = self.header();
        let want = key.as_bytes();
        if n <= SCAN_MAX {
            let mut r = Reader(self.buf.get(first..)?);
            for _ in 0..n {
                let k = r.bytes()?;
                let v = r.value()?;
                if k == want {
                    return Some(v);
                }
            }
            return None;
        }
        let table = first.checked_sub(4 * n)?;
        let at = |i: usize| -> Option<Reader<'_>> {
            let mut t = Reader(self.buf.get(table + 4 * i..)?);
            Some(Reader(self.buf.get(t.u32()? as usize..)?))
        };
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let mut r = at(mid)?;
            match r.bytes()?.cmp(want) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return r.value(),
            }
        }
        None
    }

    /// `Note::has_tag` with `wanted` already folded and without `#`.
    fn carries(&self, wanted: &str) -> bool {
        self.tag_pairs().any(|t| tag_matches(t.1, wanted))
    }
}

/// A folded tag carries a folded wanted tag: the same, or a nested tag under it.
pub(crate) fn tag_matches(tag: &str, wanted: &str) -> bool {
    tag == wanted || tag.strip_prefix(wanted).is_some_and(|rest| rest.starts_with('/'))
}

/// One candidate row: a catalog note with its data.
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    /// The row's place in the [`Columns`] given with it (unused without).
    pub at: usize,
    pub path: &'a VaultPath,
    /// Nanoseconds since the Unix epoch.
    pub mtime: i64,
    pub size: u64,
    pub data: &'a NoteData,
}

// ---- the call -----------------------------------------------------------------------------------

/// A condition's operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum QueryOp {
    Eq,
    Ne,
    Lt,
    Lte,
    Gt,
    Gte,
    Contains,
    Exists,
}

/// One `where` condition as sent.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    /// A top-level frontmatter key, or a built-in: `path`, `title`, `tags`, `modified`, `bytes`.
    pub field: String,
    pub op: QueryOp,
    /// A number, a string (a date when RFC 3339 or `YYYY-MM-DD`) or a boolean; for `exists`,
    /// `true` (the default) or `false`.
    pub value: Option<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SortOrder {
    #[default]
    Asc,
    Desc,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SortSpec {
    /// A frontmatter key or a built-in, as in `where`.
    pub field: String,
    /// `asc` (default) or `desc`; notes lacking the field come last either way.
    pub order: Option<SortOrder>,
}

/// The arguments of `query_notes` besides vault and cursor.
#[derive(Debug, Clone, Default)]
pub struct QuerySpec {
    pub conditions: Vec<Condition>,
    pub tags: Vec<String>,
    pub path_prefix: Option<String>,
    pub fields: Vec<String>,
    pub sort: Option<SortSpec>,
    pub limit: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    Path,
    Title,
    Tags,
    Modified,
    Bytes,
    Key(String),
}

impl Field {
    fn parse(name: &str) -> Result<Field, VaultError> {
        if name.is_empty() {
            return Err(VaultError::InvalidArgument("a field name is empty".into()));
        }
        Ok(match name {
            "path" => Field::Path,
            "title" => Field::Title,
            "tags" => Field::Tags,
            "modified" => Field::Modified,
            "bytes" => Field::Bytes,
            k => Field::Key(k.to_owned()),
        })
    }

    fn name(&self) -> &str {
        match self {
            Field::Path => "path",
            Field::Title => "title",
            Field::Tags => "tags",
            Field::Modified => "modified",
            Field::Bytes => "bytes",
            Field::Key(k) => k,
        }
    }
}

/// A condition's value, typed.
#[derive(Debug, Clone, PartialEq)]
pub enum Want {
    Num(f64),
    /// Its instant and its folded text (for `contains`).
    Date(i128, String),
    Text(String),
    Bool(bool),
}

impl Want {
    fn of(v: &Value) -> Option<Want> {
        Some(match typed(v)? {
            Typed::Bool(b) => Want::Bool(b),
            Typed::Num(n) => Want::Num(n),
            Typed::Str(Some(t), folded) => Want::Date(t, folded),
            Typed::Str(None, folded) => Want::Text(folded),
        })
    }

    fn text(&self) -> Option<&str> {
        match self {
            Want::Date(_, s) | Want::Text(s) => Some(s),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Cond {
    pub field: Field,
    pub op: QueryOp,
    pub want: Want,
}

/// A checked `query_notes` call.
#[derive(Debug, Clone)]
pub struct Query {
    pub conds: Vec<Cond>,
    /// Folded, without `#`.
    pub tags: Vec<String>,
    pub prefix: FolderPath,
    /// Distinct, in the order asked.
    pub fields: Vec<Field>,
    pub sort: Field,
    pub desc: bool,
    pub limit: usize,
}

impl Query {
    /// Checks the arguments (types, operators, values); the prefix's readability is the
    /// caller's to check.
    pub fn parse(spec: &QuerySpec) -> Result<Query, VaultError> {
        let limit = match spec.limit {
            None => DEFAULT_LIMIT,
            Some(n) if (1..=MAX_LIMIT).contains(&(n as usize)) => n as usize,
            Some(n) => {
                return Err(VaultError::InvalidArgument(format!(
                    "limit must be between 1 and {MAX_LIMIT}, got {n}"
                )));
            }
        };
        let mut conds = Vec::with_capacity(spec.conditions.len());
        for (i, c) in spec.conditions.iter().enumerate() {
            let field = Field::parse(&c.field)?;
            let want = match (c.op, &c.value) {
                (QueryOp::Exists, None) => Want::Bool(true),
                (QueryOp::Exists, Some(Value::Bool(b))) => Want::Bool(*b),
                (QueryOp::Exists, Some(_)) => {
                    return Err(VaultError::InvalidArgument(format!(
                        "where[{i}]: exists takes value true or false"
                    )));
                }
                (_, None) => {
                    return Err(VaultError::InvalidArgument(format!(
                        "where[{i}]: value is required"
                    )));
                }
                (_, Some(v)) => Want::of(v).ok_or_else(|| {
                    VaultError::InvalidArgument(format!(
                        "where[{i}]: value must be a number, a string or a boolean"
                    ))
                })?,
            };
            conds.push(Cond {
                field,
                op: c.op,
                want,
            });
        }
        let mut fields: Vec<Field> = Vec::new();
        for f in &spec.fields {
            let f = Field::parse(f)?;
            if !fields.contains(&f) {
                fields.push(f);
            }
        }
        let (sort, desc) = match &spec.sort {
            None => (Field::Path, false),
            Some(s) => (
                Field::parse(&s.field)?,
                s.order.unwrap_or_default() == SortOrder::Desc,
            ),
        };
        let prefix = match spec.path_prefix.as_deref() {
            None => FolderPath::Root,
            Some(p) => FolderPath::parse(p)?,
        };
        let tags = spec
            .tags
            .iter()
            .map(|t| fold(t.trim().trim_start_matches('#')))
            .filter(|t| !t.is_empty())
            .collect();
        Ok(Query {
            conds,
            tags,
            prefix,
            fields,
            sort,
            desc,
            limit,
        })
    }

    /// The row passes every condition, tag and the prefix.
    pub fn admits(&self, row: &Row<'_>) -> bool {
        self.prefix.contains(row.path)
            && self.tags.iter().all(|t| row.data.carries(t))
            && self.conds.iter().all(|c| holds(c, row))
    }
}

// ---- the rules ----------------------------------------------------------------------------------

/// A field's value in one row.
#[derive(Debug, Clone)]
enum Got<'a> {
    Val(Val<'a>),
    /// The path, as spelled.
    Str(&'a str),
    Title(&'a NoteData),
    Tags(&'a NoteData),
    /// ns since the epoch.
    Time(i64),
    Num(f64),
    Missing,
}

fn get<'a>(row: &Row<'a>, field: &Field) -> Got<'a> {
    match field {
        Field::Path => Got::Str(row.path.as_str()),
        Field::Title => Got::Title(row.data),
        Field::Tags => Got::Tags(row.data),
        Field::Modified => Got::Time(row.mtime),
        Field::Bytes => Got::Num(row.size as f64),
        Field::Key(k) => row.data.field(k).map_or(Got::Missing, Got::Val),
    }
}

/// A comparable scalar.
#[derive(Debug, Clone, PartialEq)]
enum Scalar<'a> {
    Num(f64),
    Date(i128),
    Text(Cow<'a, str>),
    Bool(bool),
}

impl Scalar<'_> {
    fn rank(&self) -> u8 {
        match self {
            Scalar::Num(_) => 0,
            Scalar::Date(_) => 1,
            Scalar::Text(_) => 2,
            Scalar::Bool(_) => 3,
        }
    }
}

/// The value as a comparable scalar (strings folded); `None` for lists, mappings, null, missing.
fn scalar<'a>(g: &Got<'a>) -> Option<Scalar<'a>> {
    match g {
        Got::Val(Val::Num(n)) | Got::Num(n) => Some(Scalar::Num(*n)),
        Got::Val(Val::Date(t, _)) => Some(Scalar::Date(*t)),
        Got::Val(Val::Text(s)) => Some(Scalar::Text(Cow::Borrowed(s))),
        Got::Val(Val::Bool(b)) => Some(Scalar::Bool(*b)),
        // A title that reads as a date (a daily note's) is a date, as in frontmatter.
        Got::Title(d) => Some(
            date_of(d.title()).map_or_else(|| Scalar::Text(Cow::Borrowed(d.folded_title())), Scalar::Date),
        ),
        Got::Str(s) => Some(date_of(s).map_or_else(|| Scalar::Text(Cow::Owned(fold(s))), Scalar::Date)),
        Got::Time(n) => Some(Scalar::Date(i128::from(*n))),
        _ => None,
    }
}

fn want_scalar(w: &Want) -> Scalar<'_> {
    match w {
        Want::Num(n) => Scalar::Num(*n),
        Want::Date(t, _) => Scalar::Date(*t),
        Want::Text(s) => Scalar::Text(Cow::Borrowed(s)),
        Want::Bool(b) => Scalar::Bool(*b),
    }
}

/// How two scalars of one type compare; `None` across types.
fn compare(a: &Scalar<'_>, b: &Scalar<'_>) -> Option<Ordering> {
    match (a, b) {
        (Scalar::Num(x), Scalar::Num(y)) => x.partial_cmp(y),
        (Scalar::Date(x), Scalar::Date(y)) => Some(x.cmp(y)),
        (Scalar::Text(x), Scalar::Text(y)) => Some(x.as_ref().cmp(y.as_ref())),
        (Scalar::Bool(x), Scalar::Bool(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

/// `eq` of one value (a list element included) and the condition's value.
fn equal(g: &Got<'_>, want: &Want) -> bool {
    scalar(g).is_some_and(|s| compare(&s, &want_scalar(want)) == Some(Ordering::Equal))
}

/// Whether one condition holds for the row.
pub fn holds(c: &Cond, row: &Row<'_>) -> bool {
    let g = get(row, &c.field);
    let order = || scalar(&g).and_then(|s| compare(&s, &want_scalar(&c.want)));
    match c.op {
        QueryOp::Eq => equal(&g, &c.want),
        QueryOp::Ne => !equal(&g, &c.want),
        QueryOp::Lt => order() == Some(Ordering::Less),
        QueryOp::Lte => matches!(order(), Some(Ordering::Less | Ordering::Equal)),
        QueryOp::Gt => order() == Some(Ordering::Greater),
        QueryOp::Gte => matches!(order(), Some(Ordering::Greater | Ordering::Equal)),
        QueryOp::Exists => {
            let present = !matches!(g, Got::Missing | Got::Val(Val::Null));
            present == (c.want == Want::Bool(true))
        }
        QueryOp::Contains => match &g {
            Got::Val(Val::List(items)) => items.iter().any(|v| equal(&Got::Val(v), &c.want)),
            Got::Title(d) => c.want.text().is_some_and(|w| d.folded_title().contains(w)),
            Got::Tags(d) => c
                .want
                .text()
                .is_some_and(|w| d.carries(w.trim_start_matches('#'))),
            Got::Val(Val::Text(s) | Val::Date(_, s)) => c.want.text().is_some_and(|w| s.contains(w)),
            Got::Str(s) => c.want.text().is_some_and(|w| fold(s).contains(w)),
            Got::Time(n) => c
                .want
                .text()
                .is_some_and(|w| fold(&crate::reader::rfc3339(crate::index::time_of(*n))).contains(w)),
            _ => false,
        },
    }
}

// ---- key columns --------------------------------------------------------------------------------

/// What one frontmatter key holds in a row, as far as a condition or a sort key can be decided
/// without reading the note. A broad query reads one of these per row, in order, instead of each
/// note's own scattered fields; text, lists and dates' spellings still come from the note.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyCell {
    Missing,
    Null,
    Num(f64),
    /// Split as a `Cell::Date` is, so a cell stays 16 bytes.
    Date {
        secs: i64,
        nanos: u32,
    },
    Bool(bool),
    Text,
    List,
    Other,
}

impl KeyCell {
    pub fn of(v: Option<Val<'_>>) -> KeyCell {
        match v {
            None => KeyCell::Missing,
            Some(Val::Null) => KeyCell::Null,
            Some(Val::Num(n)) => KeyCell::Num(n),
            Some(Val::Date(t, _)) => KeyCell::Date {
                secs: i64::try_from(t.div_euclid(1_000_000_000)).unwrap_or(i64::MAX),
                nanos: u32::try_from(t.rem_euclid(1_000_000_000)).unwrap_or(0),
            },
            Some(Val::Bool(b)) => KeyCell::Bool(b),
            Some(Val::Text(_)) => KeyCell::Text,
            Some(Val::List(_)) => KeyCell::List,
            Some(Val::Other) => KeyCell::Other,
        }
    }

    /// The sort key, when the cell alone gives it (`Some(None)`: sorts last).
    fn sort_key(self) -> Option<Option<Scalar<'static>>> {
        match self {
            KeyCell::Num(n) => Some(Some(Scalar::Num(n))),
            KeyCell::Date { secs, nanos } => Some(Some(Scalar::Date(
                i128::from(secs) * 1_000_000_000 + i128::from(nanos),
            ))),
            KeyCell::Bool(b) => Some(Some(Scalar::Bool(b))),
            KeyCell::Text => None,
            KeyCell::Missing | KeyCell::Null | KeyCell::List | KeyCell::Other => Some(None),
        }
    }
}

/// Whether `c` holds for a row whose key holds `cell`, exactly as [`holds`] decides it; `None`
/// when that needs the note (a text compared with a text, a substring, a list's elements).
fn holds_cell(c: &Cond, cell: KeyCell) -> Option<bool> {
    use KeyCell as K;
    match c.op {
        QueryOp::Exists => {
            let present = !matches!(cell, K::Missing | K::Null);
            Some(present == (c.want == Want::Bool(true)))
        }
        QueryOp::Contains => match cell {
            K::Missing | K::Null | K::Other | K::Num(_) | K::Bool(_) => Some(false),
            K::Date { .. } | K::Text | K::List => None,
        },
        op => {
            if cell == K::Text && matches!(c.want, Want::Text(_)) {
                return None;
            }
            let order = cell
                .sort_key()
                .flatten()
                .and_then(|s| compare(&s, &want_scalar(&c.want)));
            Some(match op {
                QueryOp::Eq => order == Some(Ordering::Equal),
                QueryOp::Ne => order != Some(Ordering::Equal),
                QueryOp::Lt => order == Some(Ordering::Less),
                QueryOp::Lte => matches!(order, Some(Ordering::Less | Ordering::Equal)),
                QueryOp::Gt => order == Some(Ordering::Greater),
                QueryOp::Gte => matches!(order, Some(Ordering::Greater | Ordering::Equal)),
                QueryOp::Exists | QueryOp::Contains => return None,
            })
        }
    }
}

/// Key columns for one call's rows (by `Row::at`): those of the keys its conditions and sort
/// name that the caller has.
#[derive(Default)]
pub struct Columns<'c> {
    pub keys: Vec<(&'c str, &'c [KeyCell])>,
}

impl Columns<'_> {
    fn get(&self, key: &str, at: usize) -> Option<KeyCell> {
        self.keys
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, col)| col.get(at).copied())
    }
}

/// The frontmatter keys a query's conditions and sort read, each once.
pub fn column_keys(q: &Query) -> Vec<&str> {
    let mut keys: Vec<&str> = Vec::new();
    for f in q.conds.iter().map(|c| &c.field).chain([&q.sort]) {
        if let Field::Key(k) = f
            && !keys.contains(&k.as_str())
        {
            keys.push(k);
        }
    }
    keys
}

// ---- sorting and paging -------------------------------------------------------------------------

/// A row's sort key: `None` sorts last in both orders.
fn sort_key<'a>(row: &Row<'a>, field: &Field) -> Option<Scalar<'a>> {
    match field {
        // The exact path: the catalog's order.
        Field::Path => Some(Scalar::Text(Cow::Borrowed(row.path.as_str()))),
        f => scalar(&get(row, f)),
    }
}

/// Present values: by type, then value (reversed by `desc`); absent last; ties by exact path,
/// which is the rows' order, so by position (comparing the paths themselves would read two
/// scattered strings per tie, and most comparisons of a broad sort are ties).
fn row_order(a: (&Option<Scalar<'_>>, usize), b: (&Option<Scalar<'_>>, usize), desc: bool) -> Ordering {
    let by_value = match (a.0, b.0) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Greater,
        (Some(_), None) => Ordering::Less,
        (Some(x), Some(y)) => {
            let o = x
                .rank()
                .cmp(&y.rank())
                .then_with(|| compare(x, y).unwrap_or(Ordering::Equal));
            if desc { o.reverse() } else { o }
        }
    };
    by_value.then_with(|| a.1.cmp(&b.1))
}

/// A row in the call's order, for the page's heap.
struct Ranked<'a> {
    key: Option<Scalar<'a>>,
    i: usize,
    desc: bool,
}

impl Ord for Ranked<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        row_order((&self.key, self.i), (&other.key, other.i), self.desc)
    }
}

impl PartialOrd for Ranked<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Ranked<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ranked<'_> {}

/// A sort key as a cursor carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PosKey {
    /// Absent (and for `path` sorts, where the path is the key).
    Missing,
    /// `f64::to_bits`.
    Num(u64),
    Date(i128),
    Text(Key),
    Bool(bool),
}

/// Where a `query_notes` page continues: after this (key, path) in the call's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryPos {
    pub key: PosKey,
    pub path: Key,
}

fn pos_of(key: &Option<Scalar<'_>>, path: &str, sort: &Field) -> QueryPos {
    let key = match key {
        _ if *sort == Field::Path => PosKey::Missing,
        None => PosKey::Missing,
        Some(Scalar::Num(n)) => PosKey::Num(n.to_bits()),
        Some(Scalar::Date(t)) => PosKey::Date(*t),
        Some(Scalar::Text(s)) => PosKey::Text(Key::exact(s)),
        Some(Scalar::Bool(b)) => PosKey::Bool(*b),
    };
    QueryPos {
        key,
        path: Key::exact(path),
    }
}

/// Whether the row comes after the cursor in the call's order (or may: a cut key that cannot
/// tell counts as after, so a row may repeat but is never skipped).
fn is_after(q: &Query, pos: &QueryPos, key: &Option<Scalar<'_>>, path: &str) -> bool {
    let after_path = || pos.path.is_before(path);
    if q.sort == Field::Path {
        return match pos.path.order_of(path) {
            Some(Ordering::Equal) => false,
            Some(o) => (o == Ordering::Greater) != q.desc,
            None => true,
        };
    }
    let by_value = match (key, &pos.key) {
        (None, PosKey::Missing) => Some(Ordering::Equal),
        (None, _) => Some(Ordering::Greater),
        (Some(_), PosKey::Missing) => Some(Ordering::Less),
        (Some(s), p) => {
            let prank = match p {
                PosKey::Num(_) => 0,
                PosKey::Date(_) => 1,
                PosKey::Text(_) => 2,
                _ => 3,
            };
            let o = match s.rank().cmp(&prank) {
                Ordering::Equal => match (s, p) {
                    (Scalar::Num(x), PosKey::Num(y)) => x.partial_cmp(&f64::from_bits(*y)),
                    (Scalar::Date(x), PosKey::Date(y)) => Some(x.cmp(y)),
                    (Scalar::Text(x), PosKey::Text(k)) => k.order_of(x),
                    (Scalar::Bool(x), PosKey::Bool(y)) => Some(x.cmp(y)),
                    _ => None,
                },
                o => Some(o),
            };
            if q.desc { o.map(Ordering::reverse) } else { o }
        }
    };
    match by_value {
        Some(Ordering::Greater) | None => true,
        Some(Ordering::Less) => false,
        Some(Ordering::Equal) => after_path(),
    }
}

/// One row of the answer.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct QueryRow {
    pub path: String,
    pub title: String,
    /// The fields named in `fields[]` that the note has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fields: Option<Map<String, Value>>,
}

/// `query_notes`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueryNotes {
    pub notes: Vec<QueryRow>,
    /// More rows matched than this page holds.
    pub truncated: bool,
    /// Present exactly when `truncated`: pass it as `cursor` for the next page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// One page of the rows (in path order) that `q` admits after `after`, its JSON at most about
/// `max_bytes` long. `frontmatter(i)` gives row `i`'s frontmatter as stored (only asked for the
/// rows answered, and only when `fields[]` names a frontmatter key).
pub fn page<E>(
    q: &Query,
    rows: &[Row<'_>],
    cols: &Columns<'_>,
    after: Option<&QueryPos>,
    max_bytes: usize,
    frontmatter: &mut dyn FnMut(usize) -> Result<Option<Map<String, Value>>, E>,
) -> Result<(QueryNotes, Option<QueryPos>), E> {
    let take = q.limit + 1;
    let holds_in = |c: &Cond, r: &Row<'_>| match &c.field {
        Field::Key(k) => cols
            .get(k, r.at)
            .and_then(|cell| holds_cell(c, cell))
            .unwrap_or_else(|| holds(c, r)),
        _ => holds(c, r),
    };
    let passes = |i: usize| {
        let r = &rows[i];
        let admitted = q.prefix.contains(r.path)
            && q.tags.iter().all(|t| r.data.carries(t))
            && q.conds.iter().all(|c| holds_in(c, r));
        if !admitted {
            return None;
        }
        let key = match &q.sort {
            Field::Key(k) => {
                let known: Option<Option<Scalar<'_>>> = cols.get(k, r.at).and_then(KeyCell::sort_key);
                known.unwrap_or_else(|| sort_key(r, &q.sort))
            }
            f => sort_key(r, f),
        };
        (after.is_none_or(|p| is_after(q, p, &key, r.path.as_str()))).then_some((key, i))
    };
    let mut picked: Vec<(Option<Scalar<'_>>, usize)> = if q.sort == Field::Path {
        // Rows are in path order already: stop as soon as the page is known.
        if q.desc {
            (0..rows.len()).rev().filter_map(passes).take(take).collect()
        } else {
            (0..rows.len()).filter_map(passes).take(take).collect()
        }
    } else {
        // The page's rows so far, worst on top: each further row costs one comparison with
        // it (a heap push only when it is better), and memory stays at the page's size.
        let mut best = std::collections::BinaryHeap::with_capacity(take + 1);
        for (key, i) in (0..rows.len()).filter_map(passes) {
            let r = Ranked { key, i, desc: q.desc };
            if best.len() < take {
                best.push(r);
            } else if best.peek().is_some_and(|worst| r < *worst) {
                best.pop();
                best.push(r);
            }
        }
        best.into_sorted_vec().into_iter().map(|r| (r.key, r.i)).collect()
    };
    let mut truncated = picked.len() > q.limit;
    picked.truncate(q.limit);
    let wants_frontmatter = q.fields.iter().any(|f| matches!(f, Field::Key(_)));
    let mut notes = Vec::with_capacity(picked.len());
    let mut bytes = 0usize;
    let mut last = None;
    for (key, i) in &picked {
        let r = &rows[*i];
        let fields = if q.fields.is_empty() {
            None
        } else {
            let fm = if wants_frontmatter { frontmatter(*i)? } else { None };
            Some(fields_of(q, r, fm.as_ref()))
        };
        let row = QueryRow {
            path: r.path.to_string(),
            title: r.data.title().to_owned(),
            fields,
        };
        // docs/contract.md#limits-and-pagination: a result stays within max_output_bytes; the rest is for the next page.
        let size = serde_json::to_vec(&row).map_or(0, |v| v.len()) + 1;
        if !notes.is_empty() && bytes + size > max_bytes {
            truncated = true;
            break;
        }
        bytes += size;
        notes.push(row);
        last = Some((key, r.path.as_str()));
    }
    let next = match last {
        Some((key, path)) if truncated => Some(pos_of(key, path, &q.sort)),
        _ => None,
    };
    Ok((
        QueryNotes {
            notes,
            truncated,
            next_cursor: None,
        },
        next,
    ))
}

fn fields_of(q: &Query, r: &Row<'_>, fm: Option<&Map<String, Value>>) -> Map<String, Value> {
    let mut out = Map::new();
    for f in &q.fields {
        let v = match f {
            Field::Path => Some(Value::String(r.path.to_string())),
            Field::Title => Some(Value::String(r.data.title().to_owned())),
            Field::Tags => Some(Value::Array(
                r.data.tags().map(|t| Value::String(t.to_owned())).collect(),
            )),
            Field::Modified => Some(Value::String(crate::reader::rfc3339(crate::index::time_of(
                r.mtime,
            )))),
            Field::Bytes => Some(Value::from(r.size)),
            Field::Key(k) => fm.and_then(|m| m.get(k)).cloned(),
        };
        if let Some(v) = v {
            out.insert(f.name().to_owned(), v);
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn data(fm: Value) -> NoteData {
        let Value::Object(m) = fm else { panic!() };
        NoteData::new("My Title".into(), vec!["Project/Alpha".into(), "ML".into()], &m)
    }

    fn check(fm: Value, field: &str, op: QueryOp, value: Option<Value>) -> bool {
        let d = data(fm);
        let path = VaultPath::parse("z/Note.md").unwrap();
        let row = Row {
            at: 0,
            path: &path,
            mtime: 1_700_000_000_000_000_000,
            size: 1234,
            data: &d,
        };
        let q = Query::parse(&QuerySpec {
            conditions: vec![Condition {
                field: field.into(),
                op,
                value,
            }],
            ..QuerySpec::default()
        })
        .unwrap();
        q.admits(&row)
    }

    use QueryOp::*;

    #[test]
    fn numbers_compare_as_numbers() {
        let fm = json!({"year": 2017, "score": 4.5});
        assert!(check(fm.clone(), "year", Eq, Some(json!(2017.0))));
        assert!(check(fm.clone(), "year", Lt, Some(json!(2100))));
        assert!(check(fm.clone(), "year", Gte, Some(json!(2017))));
        assert!(!check(fm.clone(), "year", Gt, Some(json!(2017))));
        assert!(check(fm.clone(), "score", Lte, Some(json!(4.5))));
        // 10 > 9 as numbers (as text it would be less).
        assert!(check(json!({"n": 10}), "n", Gt, Some(json!(9))));
        // A string is never a number.
        assert!(!check(json!({"n": "10"}), "n", Gt, Some(json!(9))));
        assert!(!check(json!({"n": "10"}), "n", Eq, Some(json!(10))));
        assert!(check(json!({"n": "10"}), "n", Ne, Some(json!(10))));
    }

    #[test]
    fn dates_compare_in_time_order() {
        let fm = json!({"d": "2024-03-01T10:00:00+02:00"});
        // 08:00Z: the same instant, spelled otherwise.
        assert!(check(fm.clone(), "d", Eq, Some(json!("2024-03-01T08:00:00Z"))));
        assert!(check(fm.clone(), "d", Gt, Some(json!("2024-03-01"))));
        assert!(check(fm.clone(), "d", Lt, Some(json!("2024-03-02"))));
        // As text "2024-03-01T10" > "2024-03-01T09:30:00Z", in time it is before.
        assert!(check(fm.clone(), "d", Lt, Some(json!("2024-03-01T09:30:00Z"))));
        // A date against a plain string: another type.
        assert!(!check(fm.clone(), "d", Gt, Some(json!("2000"))));
        assert!(!check(json!({"d": "soon"}), "d", Lt, Some(json!("2024-01-01"))));
        // Not calendar dates: strings.
        assert!(date_of("2024-02-30").is_none());
        assert!(date_of("2024-1-05").is_none());
        assert!(date_of("2024-01-05 10:00").is_none());
        assert!(date_of("2024-01-05").is_some());
        // modified is a date.
        assert!(check(json!({}), "modified", Gt, Some(json!("2023-01-01"))));
        assert!(check(
            json!({}),
            "modified",
            Lt,
            Some(json!("2023-12-01T00:00:00Z"))
        ));
    }

    #[test]
    fn strings_compare_case_insensitively() {
        let fm = json!({"status": "Read", "who": "Ωmega 注意力"});
        assert!(check(fm.clone(), "status", Eq, Some(json!("READ"))));
        assert!(!check(fm.clone(), "status", Ne, Some(json!("read"))));
        assert!(check(fm.clone(), "status", Lt, Some(json!("s"))));
        assert!(check(fm.clone(), "status", Gt, Some(json!("QUEUE"))));
        assert!(check(fm.clone(), "who", Contains, Some(json!("ωMEGA"))));
        assert!(check(fm.clone(), "who", Contains, Some(json!("意"))));
        assert!(!check(fm.clone(), "who", Contains, Some(json!(1))));
        assert!(check(fm.clone(), "title", Eq, Some(json!("my title"))));
        assert!(check(fm.clone(), "path", Contains, Some(json!("Z/NOTE"))));
    }

    #[test]
    fn lists_test_membership_and_equal_nothing() {
        let fm = json!({"authors": ["Vaswani", "Shazeer"], "nums": [1, 2], "nested": [[1]]});
        assert!(check(fm.clone(), "authors", Contains, Some(json!("vaswani"))));
        assert!(!check(fm.clone(), "authors", Contains, Some(json!("vas"))));
        assert!(!check(fm.clone(), "authors", Eq, Some(json!("Vaswani"))));
        assert!(check(fm.clone(), "authors", Ne, Some(json!("Vaswani"))));
        assert!(check(fm.clone(), "nums", Contains, Some(json!(2))));
        assert!(!check(fm.clone(), "nums", Contains, Some(json!("2"))));
        assert!(!check(fm.clone(), "nums", Gt, Some(json!(0))));
        assert!(!check(fm.clone(), "nested", Contains, Some(json!(1))));
        // tags: frontmatter and inline, nested tags carry their parents.
        assert!(check(fm.clone(), "tags", Contains, Some(json!("project"))));
        assert!(check(fm.clone(), "tags", Contains, Some(json!("#ml"))));
        assert!(!check(fm.clone(), "tags", Contains, Some(json!("proj"))));
        assert!(!check(fm, "tags", Eq, Some(json!("ml"))));
    }

    #[test]
    fn missing_null_and_other_types() {
        let fm = json!({"a": null, "b": {"x": 1}, "c": true});
        for f in ["a", "zz"] {
            assert!(!check(fm.clone(), f, Exists, None), "{f}");
            assert!(check(fm.clone(), f, Exists, Some(json!(false))), "{f}");
            assert!(check(fm.clone(), f, Ne, Some(json!(1))), "{f}");
            for op in [Eq, Lt, Lte, Gt, Gte, Contains] {
                assert!(!check(fm.clone(), f, op, Some(json!(1))), "{f} {op:?}");
            }
        }
        assert!(check(fm.clone(), "b", Exists, Some(json!(true))));
        assert!(!check(fm.clone(), "b", Eq, Some(json!(1))));
        assert!(check(fm.clone(), "c", Eq, Some(json!(true))));
        assert!(check(fm.clone(), "c", Gt, Some(json!(false))));
        assert!(!check(fm.clone(), "c", Eq, Some(json!("true"))));
        // Built-ins win: a frontmatter `bytes` is not the file's size.
        assert!(check(json!({"bytes": 5}), "bytes", Eq, Some(json!(1234))));
        assert!(check(json!({"title": "x"}), "title", Eq, Some(json!("My Title"))));
    }

    #[test]
    fn bad_values_are_refused() {
        let bad = |op, value: Option<Value>| {
            Query::parse(&QuerySpec {
                conditions: vec![Condition {
                    field: "f".into(),
                    op,
                    value,
                }],
                ..QuerySpec::default()
            })
            .is_err()
        };
        assert!(bad(Eq, None));
        assert!(bad(Eq, Some(json!(null))));
        assert!(bad(Eq, Some(json!([1]))));
        assert!(bad(Contains, Some(json!({"a": 1}))));
        assert!(bad(Exists, Some(json!(1))));
        assert!(!bad(Exists, None));
        assert!(!bad(Exists, Some(json!(false))));
        let limit = |n| {
            Query::parse(&QuerySpec {
                limit: Some(n),
                ..QuerySpec::default()
            })
            .is_ok()
        };
        assert!(!limit(0) && limit(1) && limit(200) && !limit(201));
    }

    #[test]
    fn packed_fields_read_back_as_written() {
        let d = data(json!({
            "a_key_longer_than_fourteen_bytes": "Long",
            "year": 2017,
            "ok": true,
            "none": null,
            "map": {"x": 1},
            "when": "2024-03-05",
            "名前": "ÄBC",
            "list": ["One", 2, ["nested"]],
            "title": "Shadowed"
        }));
        assert_eq!(
            d.field("a_key_longer_than_fourteen_bytes"),
            Some(Val::Text("long"))
        );
        assert_eq!(d.field("year"), Some(Val::Num(2017.0)));
        assert_eq!(d.field("ok"), Some(Val::Bool(true)));
        assert_eq!(d.field("none"), Some(Val::Null));
        assert_eq!(d.field("map"), Some(Val::Other));
        assert_eq!(d.field("名前"), Some(Val::Text("äbc")));
        let Some(Val::Date(t, text)) = d.field("when") else {
            panic!()
        };
        assert_eq!((t, text), (date_of("2024-03-05").unwrap(), "2024-03-05"));
        let Some(Val::List(items)) = d.field("list") else {
            panic!()
        };
        let items: Vec<Val<'_>> = items.iter().collect();
        assert_eq!(items, [Val::Text("one"), Val::Num(2.0), Val::Other]);
        assert_eq!(d.field("missing"), None);
        // Shadowed by the built-in `title`, so not kept.
        assert_eq!(d.field("title"), None);
        assert_eq!(d.field("yea"), None);
        assert_eq!(d.title(), "My Title");
        assert_eq!(d.tags().collect::<Vec<_>>(), ["Project/Alpha", "ML"]);
        assert!(d.carries("project") && d.carries("ml") && !d.carries("alpha"));
        // More fields than the linear-scan cut-off use the binary search, with the same answers.
        let many: Map<String, Value> = (0..40).map(|i| (format!("k{i:02}"), json!(i))).collect();
        let d = NoteData::new("t".into(), vec![], &many);
        for i in 0..40 {
            assert_eq!(d.field(&format!("k{i:02}")), Some(Val::Num(f64::from(i))));
        }
        assert_eq!(d.field("k40"), None);
    }

    #[test]
    fn packed_strings_of_any_length_and_case_read_back() {
        let d = NoteData::default();
        assert_eq!((d.title(), d.tags().count(), d.field("x")), ("", 0, None));
        // Lengths past one LEB128 byte; strings that fold to themselves are stored once.
        let long_key = "k".repeat(300);
        let long_value = "Ä".repeat(200);
        let mut m = Map::new();
        m.insert(long_key.clone(), json!(long_value));
        m.insert("list".into(), json!(["x".repeat(130), {"a": 1}, false, null]));
        let d = NoteData::new("already folded".into(), vec!["lower".into(), "Upper".into()], &m);
        assert_eq!(d.title(), "already folded");
        assert_eq!(d.folded_title(), "already folded");
        assert_eq!(d.tags().collect::<Vec<_>>(), ["lower", "Upper"]);
        assert!(d.carries("lower") && d.carries("upper"));
        assert_eq!(d.field(&long_key), Some(Val::Text(&"ä".repeat(200))));
        let Some(Val::List(items)) = d.field("list") else {
            panic!()
        };
        let x = "x".repeat(130);
        assert_eq!(
            items.iter().collect::<Vec<_>>(),
            [Val::Text(&x), Val::Other, Val::Bool(false), Val::Null]
        );
    }

    #[test]
    fn sorting_puts_absent_last_both_ways() {
        // Rows are in path order: their position is the tie-break.
        let paths = ["a", "a2", "b", "c", "d"];
        let k = |v: Option<Scalar<'static>>, p: &str| (v, paths.iter().position(|x| *x == p).unwrap());
        let mut rows = [
            k(None, "a"),
            k(Some(Scalar::Num(2.0)), "b"),
            k(Some(Scalar::Num(1.0)), "c"),
            k(Some(Scalar::Text("x".into())), "d"),
            k(Some(Scalar::Num(2.0)), "a2"),
        ];
        rows.sort_by(|a, b| row_order((&a.0, a.1), (&b.0, b.1), false));
        let order: Vec<_> = rows.iter().map(|r| paths[r.1]).collect();
        assert_eq!(order, ["c", "a2", "b", "d", "a"]);
        rows.sort_by(|a, b| row_order((&a.0, a.1), (&b.0, b.1), true));
        let order: Vec<_> = rows.iter().map(|r| paths[r.1]).collect();
        assert_eq!(order, ["d", "a2", "b", "c", "a"]);
    }
}
