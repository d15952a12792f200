//! Round-trip-preserving edits of a note's frontmatter (docs/contract.md#notes-as-data-and-attachments, `propose_frontmatter_update`).
//!
//! The YAML text is edited line by line, never re-serialised: only the lines of the keys the update
//! names change; every other byte (other keys, their comments and order, the body) stays as it was.
//! A value is written plain only when it cannot be read as anything but that string, else
//! double-quoted. The result is re-read with the one bounded parser (`frontmatter`) and refused
//! unless exactly the intended keys changed.

use std::fmt::Write as _;

use serde_json::{Map, Value};

use crate::frontmatter::{self, StrictError};
use crate::note::{self, BlockSpan};
use crate::search::fold;

/// One update: keys to set (any JSON value) or remove, tags to add or remove.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Update {
    pub set: Map<String, Value>,
    pub unset: Vec<String>,
    pub add_tags: Vec<String>,
    pub remove_tags: Vec<String>,
}

/// Why an update was refused (all `INVALID_ARGUMENT` on the wire).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FmEditError {
    #[error("the note's frontmatter cannot be edited: {0}")]
    Frontmatter(StrictError),
    #[error("`{0}` is both set and unset")]
    SetAndUnset(String),
    #[error("tag `{0}` is both added and removed")]
    AddAndRemove(String),
    #[error(
        "`{0}` is named in set/unset and tags are edited with addTags/removeTags too; use one or the other"
    )]
    TagsTwice(String),
    #[error("a frontmatter key must not be empty")]
    EmptyKey,
    #[error("{0:?} is not a tag (a tag is non-empty and has no spaces, commas or control characters)")]
    BadTag(String),
    #[error("`{0}` is neither a list nor a string of tags, so tags cannot be added or removed")]
    TagsNotList(String),
    #[error("#{0} occurs only as an inline tag in the note's text; remove it with propose_note_patch")]
    InlineTag(String),
    #[error("the update changes nothing")]
    NoChange,
    #[error("the frontmatter's layout ({0}) cannot be edited in place; use propose_note_patch")]
    Layout(String),
    #[error("the edited frontmatter would not read back as intended ({0}); nothing was proposed")]
    Verify(String),
}

/// The note's text with `u` applied to its frontmatter (a block is created when there is none).
pub fn update(text: &str, u: &Update) -> Result<String, FmEditError> {
    check_update(u)?;
    let span = note::block_span(text);
    let (map, layout) = match &span {
        Some(s) => {
            let yaml =
                note::block_yaml(text, s).map_err(|e| FmEditError::Frontmatter(StrictError::Bounds(e)))?;
            let map = frontmatter::parse_mapping(&yaml).map_err(FmEditError::Frontmatter)?;
            let layout = scan(text, s)?;
            check_layout(&layout, &map)?;
            (map, layout)
        }
        None => (Map::new(), Layout::default()),
    };
    let nl = newline_of(text, span.as_ref());
    let plan = plan(text, span.as_ref(), &map, u)?;
    if plan.expected == map {
        return Err(FmEditError::NoChange);
    }
    let new = render(text, span.as_ref(), &layout, &map, &plan, nl)?;
    verify(text, span.as_ref(), &layout, &map, &new, &plan)?;
    Ok(new)
}

fn check_update(u: &Update) -> Result<(), FmEditError> {
    for k in u.set.keys().chain(u.unset.iter()) {
        if k.is_empty() {
            return Err(FmEditError::EmptyKey);
        }
    }
    if let Some(k) = u.unset.iter().find(|k| u.set.contains_key(*k)) {
        return Err(FmEditError::SetAndUnset(k.clone()));
    }
    let tags_edited = !u.add_tags.is_empty() || !u.remove_tags.is_empty();
    if tags_edited
        && let Some(k) = u
            .set
            .keys()
            .chain(u.unset.iter())
            .find(|k| *k == "tags" || *k == "tag")
    {
        return Err(FmEditError::TagsTwice(k.clone()));
    }
    for t in u.add_tags.iter().chain(u.remove_tags.iter()) {
        let bare = bare_tag(t);
        if bare.is_empty()
            || bare
                .chars()
                .any(|c| c.is_whitespace() || c == ',' || c.is_control())
        {
            return Err(FmEditError::BadTag(t.clone()));
        }
    }
    let removed: Vec<String> = u.remove_tags.iter().map(|t| fold(bare_tag(t))).collect();
    if let Some(t) = u.add_tags.iter().find(|t| removed.contains(&fold(bare_tag(t)))) {
        return Err(FmEditError::AddAndRemove(t.clone()));
    }
    Ok(())
}

fn bare_tag(t: &str) -> &str {
    t.strip_prefix('#').unwrap_or(t)
}

/// The line ending the edited lines use: the block's own, else the note's first, else LF.
fn newline_of(text: &str, span: Option<&BlockSpan>) -> &'static str {
    let head = match span {
        Some(s) => &text[..s.yaml_start],
        None => text.split_inclusive('\n').next().unwrap_or_default(),
    };
    if head.ends_with("\r\n") { "\r\n" } else { "\n" }
}

/// One line of the block: absolute byte offsets and its text without the line ending.
#[derive(Debug, Clone, Copy)]
struct Line<'a> {
    start: usize,
    text: &'a str,
    end: usize,
}

impl Line<'_> {
    /// Where the text ends (before the line ending).
    fn text_end(&self) -> usize {
        self.start + self.text.len()
    }
}

/// One top-level key: its line, the last line of its value, and where its value starts.
#[derive(Debug, Clone)]
struct Entry {
    key: String,
    first: usize,
    last: usize,
    /// Byte offset in the key line just after the `:`.
    value_off: usize,
}

#[derive(Debug, Clone, Default)]
struct Layout<'a> {
    lines: Vec<Line<'a>>,
    entries: Vec<Entry>,
}

impl Layout<'_> {
    fn find(&self, key: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.key == key)
    }

    /// The bytes of an entry, key line to last value line.
    fn text_of<'t>(&self, text: &'t str, e: &Entry) -> &'t str {
        &text[self.lines[e.first].start..self.lines[e.last].text_end()]
    }
}

/// Splits the block into top-level entries: a key line at column 0, then every following line up
/// to the next key line, less trailing blank and column-0 comment lines (those stay between keys).
fn scan<'a>(text: &'a str, span: &BlockSpan) -> Result<Layout<'a>, FmEditError> {
    let mut layout = Layout::default();
    let mut pos = span.yaml_start;
    for seg in text[span.yaml_start..span.yaml_end].split_inclusive('\n') {
        let body = seg.strip_suffix('\n').unwrap_or(seg);
        let body = body.strip_suffix('\r').unwrap_or(body);
        let i = layout.lines.len();
        layout.lines.push(Line {
            start: pos,
            text: body,
            end: pos + seg.len(),
        });
        pos += seg.len();
        if body.trim().is_empty() || body.starts_with('#') {
            continue;
        }
        let continuation =
            body.starts_with([' ', '\t']) || body == "-" || body.starts_with("- ") || body.starts_with("-\t");
        if continuation {
            match layout.entries.last_mut() {
                Some(e) => e.last = i,
                None => return Err(FmEditError::Layout("a value before the first key".into())),
            }
            continue;
        }
        let (key, value_off) =
            key_of(body).ok_or_else(|| FmEditError::Layout(format!("the line {:?}", clip(body))))?;
        layout.entries.push(Entry {
            key,
            first: i,
            last: i,
            value_off,
        });
    }
    Ok(layout)
}

fn clip(s: &str) -> String {
    s.chars().take(60).collect()
}

/// The key of a column-0 `key: value` line as the parser reads it, and where its value starts.
/// Anchored, tagged, complex and flow keys are not recognised (the caller refuses the block).
fn key_of(line: &str) -> Option<(String, usize)> {
    let b = line.as_bytes();
    let key_end = match *b.first()? {
        b'"' => {
            let mut i = 1;
            loop {
                match b.get(i)? {
                    b'\\' => i += 2,
                    b'"' => break i + 1,
                    _ => i += 1,
                }
            }
        }
        b'\'' => {
            let mut i = 1;
            loop {
                match (b.get(i)?, b.get(i + 1)) {
                    (b'\'', Some(b'\'')) => i += 2,
                    (b'\'', _) => break i + 1,
                    _ => i += 1,
                }
            }
        }
        c if b"&*!?[]{}|>%@`,#:".contains(&c) => return None,
        _ => {
            let colon =
                (0..b.len()).find(|&i| b[i] == b':' && matches!(b.get(i + 1), None | Some(b' ' | b'\t')))?;
            if line[..colon].contains(" #") || line[..colon].contains("\t#") {
                return None;
            }
            colon
        }
    };
    let rest = &line[key_end..];
    let after_ws = rest.trim_start_matches([' ', '\t']);
    let colon = key_end + (rest.len() - after_ws.len());
    if b.get(colon) != Some(&b':') || !matches!(b.get(colon + 1), None | Some(b' ' | b'\t')) {
        return None;
    }
    // The parser itself says what the key text means (quotes, escapes, `1`, `true`…).
    let one = frontmatter::parse_mapping(&format!("{}: null\n", line[..key_end].trim_end())).ok()?;
    let mut keys = one.into_iter();
    match (keys.next(), keys.next()) {
        (Some((k, Value::Null)), None) => Some((k, colon + 1)),
        _ => None,
    }
}

/// The scan must account for every key the parser read, once each; anything else (merge keys,
/// keys the scan cannot see) is a layout this editor does not touch.
fn check_layout(layout: &Layout<'_>, map: &Map<String, Value>) -> Result<(), FmEditError> {
    let mut seen: Vec<&str> = Vec::with_capacity(layout.entries.len());
    for e in &layout.entries {
        if seen.contains(&e.key.as_str()) || !map.contains_key(&e.key) {
            return Err(FmEditError::Layout(format!("the key {:?}", clip(&e.key))));
        }
        seen.push(&e.key);
    }
    if seen.len() != map.len() {
        return Err(FmEditError::Layout("keys the line scan does not see".into()));
    }
    Ok(())
}

/// Where a key line's trailing comment starts (its `#`), outside quotes.
fn comment_at(value: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    let mut prev = ' ';
    let mut chars = value.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match quote {
            Some('"') => match c {
                '\\' => {
                    chars.next();
                }
                '"' => quote = None,
                _ => {}
            },
            Some(_) => {
                if c == '\'' {
                    if chars.peek().is_some_and(|&(_, n)| n == '\'') {
                        chars.next();
                    } else {
                        quote = None;
                    }
                }
            }
            None => {
                if c == '#' && (prev == ' ' || prev == '\t') {
                    return Some(i);
                }
                if (c == '"' || c == '\'') && matches!(prev, ' ' | '\t' | '[' | '{' | ',' | ':') {
                    quote = Some(c);
                }
            }
        }
        prev = c;
    }
    None
}

/// What the update comes to: the expected map, and the tag key and list when tags change.
struct Plan {
    expected: Map<String, Value>,
    tags: Option<(String, Vec<Value>)>,
}

fn plan(
    text: &str,
    span: Option<&BlockSpan>,
    map: &Map<String, Value>,
    u: &Update,
) -> Result<Plan, FmEditError> {
    let mut expected = map.clone();
    for (k, v) in &u.set {
        expected.insert(k.clone(), v.clone());
    }
    for k in &u.unset {
        expected.remove(k);
    }
    let mut tags = None;
    if !u.add_tags.is_empty() || !u.remove_tags.is_empty() {
        let key = if map.contains_key("tags") || !map.contains_key("tag") {
            "tags"
        } else {
            "tag"
        };
        let current: Vec<Value> = match map.get(key) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items.clone(),
            // A string of tags is split as the read side splits it.
            Some(Value::String(s)) => s
                .split(|c: char| c == ',' || c.is_whitespace())
                .map(|t| t.trim_start_matches('#'))
                .filter(|t| !t.is_empty())
                .map(|t| Value::String(t.to_owned()))
                .collect(),
            Some(v @ (Value::Number(_) | Value::Bool(_))) => vec![v.clone()],
            Some(_) => return Err(FmEditError::TagsNotList(key.to_owned())),
        };
        let item_tag = |v: &Value| -> Option<String> {
            let s = match v {
                Value::String(s) => s.trim().to_owned(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => return None,
            };
            Some(fold(s.trim_start_matches('#')))
        };
        let removed: Vec<String> = u.remove_tags.iter().map(|t| fold(bare_tag(t))).collect();
        let mut list: Vec<Value> = current
            .iter()
            .filter(|v| !item_tag(v).is_some_and(|t| removed.contains(&t)))
            .cloned()
            .collect();
        let had: Vec<String> = current.iter().filter_map(item_tag).collect();
        let inline: Option<Vec<String>> = (!removed.is_empty()).then(|| {
            let body_line = span.map_or(0, |s| s.body_line);
            note::inline_tags_of(text, body_line)
                .iter()
                .map(|t| fold(t))
                .collect()
        });
        for (t, folded) in u.remove_tags.iter().zip(&removed) {
            if !had.contains(folded) && inline.as_ref().is_some_and(|i| i.contains(folded)) {
                return Err(FmEditError::InlineTag(bare_tag(t).to_owned()));
            }
        }
        for t in &u.add_tags {
            let bare = bare_tag(t);
            if !list
                .iter()
                .any(|v| item_tag(v).as_deref() == Some(fold(bare).as_str()))
            {
                list.push(Value::String(bare.to_owned()));
            }
        }
        if list != current {
            expected.insert(key.to_owned(), Value::Array(list.clone()));
            tags = Some((key.to_owned(), list));
        }
    }
    Ok(Plan { expected, tags })
}

/// The keys of the result in order: the old ones less the removed, then the new ones.
fn expected_order(layout: &Layout<'_>, plan: &Plan) -> Vec<String> {
    let mut order: Vec<String> = layout
        .entries
        .iter()
        .map(|e| e.key.clone())
        .filter(|k| plan.expected.contains_key(k))
        .collect();
    for k in plan.expected.keys() {
        if !order.contains(k) {
            order.push(k.clone());
        }
    }
    // New tags go last, after the new keys of `set`.
    if let Some((k, _)) = &plan.tags
        && layout.find(k).is_none()
        && let Some(i) = order.iter().position(|o| o == k)
    {
        let k = order.remove(i);
        order.push(k);
    }
    order
}

fn render(
    text: &str,
    span: Option<&BlockSpan>,
    layout: &Layout<'_>,
    map: &Map<String, Value>,
    plan: &Plan,
    nl: &str,
) -> Result<String, FmEditError> {
    // (start, end, replacement) over the original text, in order.
    let mut edits: Vec<(usize, usize, String)> = Vec::new();
    let mut appended = String::new();
    for k in expected_order(layout, plan) {
        let Some(v) = plan.expected.get(&k) else { continue };
        match layout.find(&k) {
            // Unchanged: its bytes stay.
            Some(_) if map.get(&k) == Some(v) => {}
            Some(e) => edits.push(replace_value(layout, e, v, nl)),
            None => {
                let _ = write!(appended, "{}:{}{nl}", key_text(&k), value_text(v, "  - ", nl));
            }
        }
    }
    for e in &layout.entries {
        if !plan.expected.contains_key(&e.key) {
            edits.push((
                layout.lines[e.first].start,
                layout.lines[e.last].end,
                String::new(),
            ));
        }
    }
    edits.sort_by_key(|e| e.0);
    let mut out = String::with_capacity(text.len() + appended.len() + 64);
    match span {
        Some(s) => {
            let mut at = 0;
            for (start, end, with) in &edits {
                out.push_str(&text[at..*start]);
                out.push_str(with);
                at = *end;
            }
            out.push_str(&text[at..s.yaml_end]);
            out.push_str(&appended);
            out.push_str(&text[s.yaml_end..]);
        }
        None => {
            let (bom, rest) = match text.strip_prefix('\u{feff}') {
                Some(rest) => ("\u{feff}", rest),
                None => ("", text),
            };
            let _ = write!(out, "{bom}---{nl}{appended}---{nl}{rest}");
        }
    }
    Ok(out)
}

/// Replaces an entry's value (from after its `:` to the end of its last line), keeping the key
/// text, the key line's comment and a block list's style.
fn replace_value(layout: &Layout<'_>, e: &Entry, v: &Value, nl: &str) -> (usize, usize, String) {
    let key_line = layout.lines[e.first];
    let value = &key_line.text[e.value_off..];
    let comment = comment_at(value).map(|i| &value[i..]);
    let inline_value = comment.map_or(value, |c| &value[..value.len() - c.len()]).trim();
    // A block list keeps its item indentation.
    let prefix = if inline_value.is_empty() && e.last > e.first {
        layout.lines[e.first + 1..=e.last]
            .iter()
            .map(|l| l.text)
            .find(|t| !t.trim().is_empty() && !t.trim_start().starts_with('#'))
            .and_then(|t| {
                let ws = t.len() - t.trim_start_matches([' ', '\t']).len();
                let rest = &t[ws..];
                (rest == "-" || rest.starts_with("- ")).then(|| format!("{}- ", &t[..ws]))
            })
    } else {
        None
    };
    let start = key_line.start + e.value_off;
    let end = layout.lines[e.last].text_end();
    let mut with = String::new();
    match (v, prefix) {
        (Value::Array(items), Some(prefix)) if !items.is_empty() => {
            if let Some(c) = comment {
                let _ = write!(with, " {c}");
            }
            for item in items {
                let _ = write!(with, "{nl}{prefix}{}", scalar(item, false));
            }
        }
        _ => {
            let _ = write!(with, " {}", scalar(v, false));
            if let Some(c) = comment {
                let _ = write!(with, " {c}");
            }
        }
    }
    (start, end, with)
}

/// A new key's value after its `:`: non-empty lists as block lists (as Obsidian writes them).
fn value_text(v: &Value, prefix: &str, nl: &str) -> String {
    match v {
        Value::Array(items) if !items.is_empty() => items
            .iter()
            .map(|i| format!("{nl}{prefix}{}", scalar(i, false)))
            .collect(),
        _ => format!(" {}", scalar(v, false)),
    }
}

fn key_text(k: &str) -> String {
    if plain_ok(k, false) {
        k.to_owned()
    } else {
        double_quoted(k)
    }
}

/// One value as YAML text on one line; `flow` inside `[…]`/`{…}`.
fn scalar(v: &Value, flow: bool) -> String {
    match v {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => {
            if plain_ok(s, flow) {
                s.clone()
            } else {
                double_quoted(s)
            }
        }
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(|i| scalar(i, true)).collect();
            format!("[{}]", inner.join(", "))
        }
        Value::Object(m) => {
            let inner: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{}: {}", key_text(k), scalar(v, true)))
                .collect();
            format!("{{{}}}", inner.join(", "))
        }
    }
}

/// Words YAML 1.1 readers (Obsidian's among them) take for booleans, nulls or numbers.
const RESERVED: &[&str] = &[
    "y", "n", "yes", "no", "on", "off", "true", "false", "null", "nan", "inf",
];

/// Whether `s` may be written plain: it starts with a letter, holds only letters, digits, single
/// inner spaces and `_-./`, is no reserved word, and the parser reads it back as this string.
fn plain_ok(s: &str, flow: bool) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    if !first.is_alphabetic()
        || s.ends_with(' ')
        || s.contains("  ")
        || !s
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | ' '))
        || RESERVED.iter().any(|r| r.eq_ignore_ascii_case(s))
    {
        return false;
    }
    let (doc, want) = if flow {
        (
            format!("k: [{s}]\n"),
            Value::Array(vec![Value::String(s.to_owned())]),
        )
    } else {
        (format!("k: {s}\n"), Value::String(s.to_owned()))
    };
    frontmatter::parse_mapping(&doc).is_ok_and(|m| m.len() == 1 && m.get("k") == Some(&want))
}

/// A YAML double-quoted scalar: every character YAML does not print, or reads as a line break
/// (NEL, LS, PS), is escaped, so the value stays on its one line.
fn double_quoted(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\t' => o.push_str("\\t"),
            '\r' => o.push_str("\\r"),
            ' '..='~' => o.push(c),
            '\u{2028}' | '\u{2029}' | '\u{feff}' => {
                let _ = write!(o, "\\u{:04X}", u32::from(c));
            }
            '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'.. => o.push(c),
            _ => {
                let _ = write!(o, "\\u{:04X}", u32::from(c));
            }
        }
    }
    o.push('"');
    o
}

/// Re-reads the result: the body and the block's fence lines are the same bytes, the parser
/// reads exactly the expected map, the keys keep their order and untouched keys their bytes.
fn verify(
    old: &str,
    span: Option<&BlockSpan>,
    layout: &Layout<'_>,
    map: &Map<String, Value>,
    new: &str,
    plan: &Plan,
) -> Result<(), FmEditError> {
    // SECURITY(T-FMEDIT): a value must not escape its key (a `---` closing the block early, a
    // newline starting another key): only what the update names may change.
    let bad = |what: &str| FmEditError::Verify(what.to_owned());
    let nspan = note::block_span(new).ok_or_else(|| bad("no frontmatter block"))?;
    let old_body = match span {
        Some(s) => &old[s.body_start..],
        None => old.strip_prefix('\u{feff}').unwrap_or(old),
    };
    if &new[nspan.body_start..] != old_body {
        return Err(bad("the body would change"));
    }
    if let Some(s) = span
        && (new[..nspan.yaml_start] != old[..s.yaml_start]
            || new[nspan.yaml_end..nspan.body_start] != old[s.yaml_end..s.body_start])
    {
        return Err(bad("the block's fences would change"));
    }
    let yaml = note::block_yaml(new, &nspan).map_err(|e| FmEditError::Verify(e.to_string()))?;
    let got = frontmatter::parse_mapping(&yaml).map_err(|e| FmEditError::Verify(e.to_string()))?;
    if got != plan.expected {
        let differs = plan
            .expected
            .iter()
            .find(|(k, v)| got.get(*k) != Some(*v))
            .map(|(k, _)| k.as_str())
            .or_else(|| {
                got.keys()
                    .find(|k| !plan.expected.contains_key(*k))
                    .map(String::as_str)
            })
            .unwrap_or_default();
        return Err(FmEditError::Verify(format!("key {:?}", clip(differs))));
    }
    let nlayout = scan(new, &nspan)?;
    let order: Vec<&str> = nlayout.entries.iter().map(|e| e.key.as_str()).collect();
    if order != expected_order(layout, plan) {
        return Err(bad("the keys' order would change"));
    }
    for e in &layout.entries {
        let untouched = plan
            .expected
            .get(&e.key)
            .is_some_and(|v| map.get(&e.key) == Some(v));
        if untouched
            && let Some(ne) = nlayout.find(&e.key)
            && nlayout.text_of(new, ne) != layout.text_of(old, e)
        {
            return Err(bad("another key's text would change"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn set(pairs: Value) -> Update {
        Update {
            set: pairs.as_object().unwrap().clone(),
            ..Update::default()
        }
    }

    fn fm(text: &str) -> Map<String, Value> {
        let s = note::block_span(text).unwrap();
        frontmatter::parse_mapping(&note::block_yaml(text, &s).unwrap()).unwrap()
    }

    fn body(text: &str) -> &str {
        &text[note::block_span(text).unwrap().body_start..]
    }

    #[test]
    fn a_set_changes_one_line_and_keeps_comments_order_and_body() {
        let t = "---\n# lead comment\nzeta: 1 # z\ntitle: Old # keep me\n\nalpha: [a, b]\n---\n# Body\n\ntext #tag\n";
        let n = update(t, &set(json!({"title": "New title"}))).unwrap();
        assert_eq!(
            n,
            "---\n# lead comment\nzeta: 1 # z\ntitle: New title # keep me\n\nalpha: [a, b]\n---\n# Body\n\ntext #tag\n"
        );
    }

    #[test]
    fn new_keys_are_appended_and_a_missing_block_is_created() {
        let t = "---\ntitle: T\n---\nbody\n";
        let n = update(
            t,
            &set(json!({"year": 2024, "read": false, "authors": ["A. B", "C"]})),
        )
        .unwrap();
        assert_eq!(
            n,
            "---\ntitle: T\nauthors:\n  - A. B\n  - C\nread: false\nyear: 2024\n---\nbody\n"
        );
        let n = update("no block\r\nhere\r\n", &set(json!({"title": "T"}))).unwrap();
        assert_eq!(n, "---\r\ntitle: T\r\n---\r\nno block\r\nhere\r\n");
        // A body starting with a thematic break stays the body.
        let n = update("---\nnot closed\n", &set(json!({"k": "v"}))).unwrap();
        assert_eq!(n, "---\nk: v\n---\n---\nnot closed\n");
        let n = update("\u{feff}body", &set(json!({"k": "v"}))).unwrap();
        assert_eq!(n, "\u{feff}---\nk: v\n---\nbody");
    }

    #[test]
    fn crlf_blocks_get_crlf_lines() {
        let t = "---\r\na: 1\r\ntags:\r\n  - x\r\n---\r\nbody\r\n";
        let u = Update {
            set: json!({"b": "two"}).as_object().unwrap().clone(),
            add_tags: vec!["z".into()],
            ..Update::default()
        };
        let n = update(t, &u).unwrap();
        assert_eq!(
            n,
            "---\r\na: 1\r\ntags:\r\n  - x\r\n  - z\r\nb: two\r\n---\r\nbody\r\n"
        );
    }

    #[test]
    fn values_yaml_would_misread_are_quoted() {
        for v in [
            "---",
            "*x",
            "&a",
            "<<",
            "yes",
            "No",
            "ON",
            "~",
            "null",
            "Null",
            "true",
            "42",
            "0x1F",
            "1e3",
            "-1",
            ".5",
            "2026-01-01",
            " lead",
            "trail ",
            "a #b",
            "a: b",
            "#x",
            "line\nbreak",
            "tab\there",
            "'q'",
            "\"dq\"",
            "[x]",
            "{x}",
            "a, b",
            "!tag",
            "%x",
            "@x",
            "`x`",
            "|",
            ">",
            "?",
            "-",
            "",
            "\u{2028}",
            "\u{85}",
            "\u{7f}",
            "\u{feff}x",
            "x\\y",
            "...",
        ] {
            let n = update("---\na: 1\n---\n", &set(json!({"k": v}))).unwrap();
            assert_eq!(fm(&n)["k"], json!(v), "{v:?} → {n}");
            assert!(n.contains("k: \""), "{v:?} is quoted: {n}");
        }
        for v in ["plain", "Two words", "東京の論文", "project/alpha", "a.b-c_d"] {
            let n = update("---\na: 1\n---\n", &set(json!({"k": v}))).unwrap();
            assert!(n.contains(&format!("k: {v}\n")), "{v:?} is plain: {n}");
        }
        // Keys too.
        let n = update("---\na: 1\n---\n", &set(json!({"yes": 1, "a b: c": 2, "東": 3}))).unwrap();
        assert_eq!(
            Value::Object(fm(&n)),
            json!({"a": 1, "yes": 1, "a b: c": 2, "東": 3})
        );
        assert!(
            n.contains("\"yes\": 1") && n.contains("\"a b: c\": 2") && n.contains("東: 3"),
            "{n}"
        );
    }

    #[test]
    fn nested_values_round_trip() {
        let v =
            json!({"m": {"x": [1, "yes", null, {"y": "---"}], "empty": []}, "e": {}, "f": 1.5, "neg": -3});
        let n = update("---\na: 1\n---\n", &set(v.clone())).unwrap();
        let got = fm(&n);
        for (k, want) in v.as_object().unwrap() {
            assert_eq!(&got[k], want, "{n}");
        }
    }

    #[test]
    fn unset_removes_the_whole_entry_only() {
        let t = "---\na: 1\n# about b\nb:\n  - x\n  - y\n\nc: |\n  text\n\n  more\nd: 4\n---\nbody";
        let u = Update {
            unset: vec!["b".into(), "c".into(), "missing".into()],
            ..Update::default()
        };
        let n = update(t, &u).unwrap();
        assert_eq!(n, "---\na: 1\n# about b\n\nd: 4\n---\nbody");
    }

    #[test]
    fn tags_are_edited_in_their_own_style() {
        let add = |t: &str, add: &[&str], rm: &[&str]| {
            update(
                t,
                &Update {
                    add_tags: add.iter().map(|s| (*s).to_owned()).collect(),
                    remove_tags: rm.iter().map(|s| (*s).to_owned()).collect(),
                    ..Update::default()
                },
            )
        };
        assert_eq!(
            add("---\ntags: [a, b] # t\n---\n", &["c"], &["a"]).unwrap(),
            "---\ntags: [b, c] # t\n---\n"
        );
        assert_eq!(
            add("---\ntags:\n- a\n- b\nx: 1\n---\n", &["#c"], &["B"]).unwrap(),
            "---\ntags:\n- a\n- c\nx: 1\n---\n"
        );
        assert_eq!(
            add("---\ntags: 3\n---\n", &["a"], &[]).unwrap(),
            "---\ntags: [3, a]\n---\n"
        );
        assert_eq!(
            add("---\ntags: a, b\n---\n", &["c"], &[]).unwrap(),
            "---\ntags: [a, b, c]\n---\n"
        );
        assert_eq!(
            add("---\ntags:\n---\n", &["c"], &[]).unwrap(),
            "---\ntags: [c]\n---\n"
        );
        assert_eq!(
            add("---\ntag: a\n---\n", &["c"], &[]).unwrap(),
            "---\ntag: [a, c]\n---\n"
        );
        assert_eq!(
            add("---\nt: 1\n---\n", &["c", "yes"], &[]).unwrap(),
            "---\nt: 1\ntags:\n  - c\n  - \"yes\"\n---\n"
        );
        assert_eq!(
            add("---\ntags:\n  - a\n---\n", &[], &["a"]).unwrap(),
            "---\ntags: []\n---\n"
        );
        // Already there (any case) and nothing else: no change.
        assert_eq!(
            add("---\ntags: [A]\n---\n", &["a"], &[]),
            Err(FmEditError::NoChange)
        );
        // Only inline: refused; in both: removed from the frontmatter.
        assert_eq!(
            add("---\ntags: [a]\n---\nsee #inl\n", &[], &["inl"]),
            Err(FmEditError::InlineTag("inl".into()))
        );
        assert_eq!(
            add("no block #inl\n", &[], &["#inl"]),
            Err(FmEditError::InlineTag("inl".into()))
        );
        assert_eq!(
            add("---\ntags: [inl]\n---\n#inl\n", &[], &["inl"]).unwrap(),
            "---\ntags: []\n---\n#inl\n"
        );
        assert_eq!(
            add("---\ntags: {a: 1}\n---\n", &["a"], &[]),
            Err(FmEditError::TagsNotList("tags".into()))
        );
        for bad in ["", "#", "a b", "a,b", "a\u{7}"] {
            assert_eq!(
                add("---\n---\n", &[bad], &[]),
                Err(FmEditError::BadTag(bad.into()))
            );
        }
        assert_eq!(
            add("---\n---\n", &["a"], &["#A"]),
            Err(FmEditError::AddAndRemove("a".into()))
        );
    }

    #[test]
    fn refusals() {
        let both = Update {
            set: json!({"a": 1}).as_object().unwrap().clone(),
            unset: vec!["a".into()],
            ..Update::default()
        };
        assert_eq!(
            update("---\n---\n", &both),
            Err(FmEditError::SetAndUnset("a".into()))
        );
        let tags_twice = Update {
            set: json!({"tags": ["a"]}).as_object().unwrap().clone(),
            add_tags: vec!["b".into()],
            ..Update::default()
        };
        assert_eq!(
            update("---\n---\n", &tags_twice),
            Err(FmEditError::TagsTwice("tags".into()))
        );
        assert_eq!(
            update("---\na: 1\n---\n", &set(json!({"a": 1}))),
            Err(FmEditError::NoChange)
        );
        assert_eq!(
            update("---\na: '1'\n---\n", &set(json!({"a": "1"}))),
            Err(FmEditError::NoChange)
        );
        let none = Update {
            unset: vec!["x".into()],
            ..Update::default()
        };
        assert_eq!(update("body\n", &none), Err(FmEditError::NoChange));
        assert_eq!(
            update("---\n---\n", &set(json!({"": 1}))),
            Err(FmEditError::EmptyKey)
        );
        for bad in [
            "---\n- a\n- b\n---\n",
            "---\njust text\n---\n",
            "---\na: [1\n---\n",
            "---\na: 1\na: 2\n---\n",
        ] {
            assert!(
                matches!(
                    update(bad, &set(json!({"k": 1}))),
                    Err(FmEditError::Frontmatter(_))
                ),
                "{bad:?}"
            );
        }
        let big = format!("---\na: \"{}\"\n---\n", "x".repeat(frontmatter::MAX_BLOCK_BYTES));
        assert!(matches!(
            update(&big, &set(json!({"k": 1}))),
            Err(FmEditError::Frontmatter(StrictError::Bounds(_)))
        ));
        // Layouts the line scan cannot follow are refused, not guessed at.
        for odd in [
            "---\n? complex\n: v\n---\n",
            "---\n&a k: v\n---\n",
            "---\n\"a\":b\n---\n",
        ] {
            let r = update(odd, &set(json!({"k": 1})));
            assert!(
                matches!(r, Err(FmEditError::Layout(_) | FmEditError::Frontmatter(_))),
                "{odd:?}: {r:?}"
            );
        }
        // An edit that breaks an alias does not pass the re-read.
        let r = update("---\nbase: &b 1\ncopy: *b\n---\n", &set(json!({"base": 2})));
        assert!(matches!(r, Err(FmEditError::Verify(_))), "{r:?}");
    }

    #[test]
    fn multi_line_values_are_replaced_whole() {
        let t = "---\nnote: |\n  one\n\n  two\n# between\nk: \"multi\n  line\"\nz: 1\n---\n";
        let n = update(t, &set(json!({"note": "short", "k": "v"}))).unwrap();
        assert_eq!(n, "---\nnote: short\n# between\nk: v\nz: 1\n---\n");
    }

    // Random blocks: keys in any order, comments, CRLF, CJK, lists of both styles, block scalars.
    fn value_line() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(" plain words".to_owned()),
            Just(" 東京 大学".to_owned()),
            Just(" 'single # not a comment'".to_owned()),
            Just(" \"dq: with \\\" quote\"".to_owned()),
            Just(" 2024".to_owned()),
            Just(" true".to_owned()),
            Just(" ~".to_owned()),
            Just(" [a, 'b c', 3]".to_owned()),
            Just(" {x: 1, y: [z]}".to_owned()),
            Just(" x # trailing comment".to_owned()),
            Just("\n  - one\n  - 二\n".to_owned()),
            Just("\n- one\n# inner\n- two\n".to_owned()),
            Just(" |\n  block\n\n  text\n".to_owned()),
            Just(" >-\n  folded\n  text\n".to_owned()),
            Just("\n  nested: 1\n  more: [x]\n".to_owned()),
        ]
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            prop::sample::select(vec![
                "---",
                "*x",
                "&a",
                "<<",
                "yes",
                "no",
                "~",
                "null",
                "007",
                "1.0",
                " lead",
                "trail ",
                "a #b",
                "k: v",
                "line\nbreak",
                "東京",
                "plain",
                "...",
                "[x",
                "\u{2028}",
                "é",
                "- item",
            ])
            .prop_map(|s| Value::String(s.to_owned())),
            "\\PC{0,12}".prop_map(Value::String),
            any::<i64>().prop_map(Value::from),
            any::<bool>().prop_map(Value::Bool),
            Just(Value::Null),
            (-1.0e6f64..1.0e6)
                .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ];
        leaf.prop_recursive(2, 8, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-z東]{1,4}", inner, 0..3)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    const KEYS: &[&str] = &[
        "title",
        "zeta",
        "Alpha",
        "年",
        "tags",
        "mid-key",
        "\"quoted key\"",
        "n1",
    ];

    prop_compose! {
        fn note_text()(
            picks in prop::sample::subsequence(KEYS.to_vec(), 0..=KEYS.len()).prop_shuffle(),
            values in prop::collection::vec(value_line(), KEYS.len()),
            comments in prop::collection::vec(any::<bool>(), KEYS.len()),
            has_block in prop::bool::weighted(0.85),
            crlf in any::<bool>(),
            body in "(\\PC|\n|#inl|---){0,40}",
        ) -> (String, bool) {
            let mut t = String::new();
            if has_block {
                t.push_str("---\n# top comment\n");
                for (i, k) in picks.iter().enumerate() {
                    if comments[i] {
                        t.push_str("# about it\n\n");
                    }
                    let v = if *k == "tags" && i % 2 == 0 { " [a, 'B']".to_owned() } else { values[i].clone() };
                    t.push_str(&format!("{k}:{v}"));
                    if !t.ends_with('\n') {
                        t.push('\n');
                    }
                }
                t.push_str("---\n");
            }
            // The body may hold `---` lines, but never opens a block of its own.
            t.push_str("Body");
            t.push_str(&body);
            if crlf {
                t = t.replace('\n', "\r\n");
            }
            (t, crlf)
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn only_the_intended_keys_change(
            (text, crlf) in note_text(),
            sets in prop::collection::btree_map(prop::sample::select(vec!["title", "zeta", "new", "年", "n1", "yes", "a b"]), json_value(), 0..4),
            unset in prop::collection::vec(prop::sample::select(vec!["Alpha", "mid-key", "quoted key", "gone"]), 0..3),
            add in prop::collection::vec(prop::sample::select(vec!["x", "東京", "a", "yes", "p/q"]), 0..3),
            remove in prop::collection::vec(prop::sample::select(vec!["b", "zz"]), 0..2),
        ) {
            let u = Update {
                set: sets.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect(),
                unset: unset.iter().map(|s| (*s).to_owned()).collect(),
                add_tags: add.iter().map(|s| (*s).to_owned()).collect(),
                remove_tags: remove.iter().map(|s| (*s).to_owned()).collect(),
            };
            let before = note::block_span(&text);
            let old_map = before.map(|s| frontmatter::parse_mapping(&note::block_yaml(&text, &s).unwrap()).unwrap()).unwrap_or_default();
            let old_body = before.map_or(text.as_str(), |s| &text[s.body_start..]);
            match update(&text, &u) {
                Ok(new) => {
                    prop_assert_eq!(body(&new), old_body);
                    let got = fm(&new);
                    for (k, v) in &old_map {
                        let touched = u.set.contains_key(k) || u.unset.contains(k)
                            || (k == "tags" && (!u.add_tags.is_empty() || !u.remove_tags.is_empty()));
                        if !touched {
                            prop_assert_eq!(got.get(k), Some(v), "{} changed", k);
                        }
                    }
                    for (k, v) in &u.set {
                        prop_assert_eq!(got.get(k), Some(v));
                    }
                    for k in &u.unset {
                        prop_assert!(!got.contains_key(k));
                    }
                    for k in got.keys() {
                        prop_assert!(old_map.contains_key(k) || u.set.contains_key(k) || k == "tags", "{} appeared", k);
                    }
                    if !u.add_tags.is_empty() || !u.remove_tags.is_empty() {
                        let tags: Vec<String> = match got.get("tags") {
                            Some(Value::Array(items)) => items.iter().map(|v| fold(v.as_str().unwrap_or_default())).collect(),
                            Some(Value::String(s)) => s.split([',', ' ']).map(fold).collect(),
                            _ => Vec::new(),
                        };
                        for t in &u.add_tags { prop_assert!(tags.contains(&fold(t))); }
                        for t in &u.remove_tags { prop_assert!(!tags.contains(&fold(t))); }
                    }
                    // Every line of the block keeps the note's line ending (LF when it has none).
                    let s = note::block_span(&new).unwrap();
                    let block = &new[..s.body_start];
                    if crlf && text.contains('\n') {
                        prop_assert_eq!(block.matches('\n').count(), block.matches("\r\n").count(), "{}", block);
                    } else {
                        prop_assert!(!block.contains('\r'));
                    }
                }
                Err(FmEditError::NoChange) => {}
                Err(FmEditError::InlineTag(_)) => prop_assert!(!u.remove_tags.is_empty()),
                Err(FmEditError::TagsNotList(_)) => prop_assert!(old_map.get("tags").is_some_and(Value::is_object)),
                Err(e) => prop_assert!(false, "{e} for {text:?} / {u:?}"),
            }
        }
    }
}
