//! Pure parsing of one note (docs/contract.md#concepts): YAML frontmatter, title, aliases, description, tags, links,
//! and the "prose lines" (outside frontmatter and fenced code, inline code blanked) that links and
//! inline tags are read from.
//!
//! Nothing here fails: malformed input degrades (invalid YAML is no frontmatter), and a block
//! over the bounds of `frontmatter` is not parsed (docs/contract.md#limits-and-pagination).

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::frontmatter::{self, FrontmatterError};
use crate::links::{self, Link};
use crate::search::fold;

/// Everything the read side knows about one note's text.
#[derive(Debug, Clone, PartialEq)]
pub struct Note {
    /// Frontmatter `title`, else the first `# ` heading, else the file stem.
    pub title: String,
    /// The frontmatter as a JSON object (`{}` when there is none, it is not a valid YAML mapping,
    /// or it was not parsed: see `frontmatter_error`).
    pub frontmatter: Map<String, Value>,
    /// Why the frontmatter block was not parsed (too large, or aliases expanding too far).
    pub frontmatter_error: Option<FrontmatterError>,
    pub aliases: Vec<String>,
    pub description: Option<String>,
    /// Frontmatter tags then inline tags, without `#`, first spelling kept, distinct case-insensitively.
    pub tags: Vec<String>,
    pub created: Option<String>,
    pub updated: Option<String>,
    /// Wiki, embed and Markdown links in text order, with 1-based line numbers.
    pub links: Vec<Link>,
}

/// What `read_note` answers beside the text: the title and the frontmatter, without the links,
/// tags and prose lines [`Note::parse`] also works out (the read path's cost is mostly those).
#[derive(Debug, Clone, PartialEq)]
pub struct NoteHeader {
    pub title: String,
    pub frontmatter: Map<String, Value>,
    pub frontmatter_error: Option<FrontmatterError>,
}

impl NoteHeader {
    /// The same title and frontmatter [`Note::parse`] gives for `text`.
    pub fn parse(text: &str, stem: &str) -> NoteHeader {
        let fm = split_frontmatter(text);
        let title = field_string(&fm.fields, "title")
            .or_else(|| first_heading(prose(text, fm.body_line)))
            .unwrap_or_else(|| stem.to_owned());
        NoteHeader {
            title,
            frontmatter: fm.fields,
            frontmatter_error: fm.error,
        }
    }
}

impl Note {
    /// Parses a note's whole text; `stem` is the file name without `.md` (the last-resort title).
    pub fn parse(text: &str, stem: &str) -> Note {
        let fm = split_frontmatter(text);
        let lines = prose_lines(text, fm.body_line);
        let fields = fm.fields;
        let frontmatter_error = fm.error;
        let title = field_string(&fields, "title")
            .or_else(|| first_heading(lines.iter()))
            .unwrap_or_else(|| stem.to_owned());
        let aliases = string_list(fields.get("aliases").or_else(|| fields.get("alias")), false);
        let mut tags = string_list(fields.get("tags").or_else(|| fields.get("tag")), true);
        for line in &lines {
            inline_tags(&line.masked, &mut tags);
        }
        let mut seen = Vec::with_capacity(tags.len());
        tags.retain(|t| {
            let f = fold(t);
            let fresh = !seen.contains(&f);
            seen.push(f);
            fresh
        });
        Note {
            title,
            aliases,
            description: field_string(&fields, "description"),
            tags,
            created: field_string(&fields, "created"),
            updated: field_string(&fields, "updated"),
            links: links::extract(&lines),
            frontmatter: fields,
            frontmatter_error,
        }
    }

    /// Whether the note carries `tag` (case-insensitive, leading `#` ignored). A nested tag counts
    /// for its parents, as in Obsidian: `project/alpha` carries `project`.
    pub fn has_tag(&self, tag: &str) -> bool {
        let wanted = fold(tag.trim_start_matches('#'));
        self.tags.iter().any(|t| {
            let t = fold(t);
            t == wanted
                || t.strip_prefix(wanted.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        })
    }
}

/// The file stem: the last segment without a `.md` extension (ASCII case-insensitive).
/// A map of content (docs/contract.md#the-mcp-surface): tagged `#moc`, or named `MOC…`. The one rule of
/// `get_related_notes`' `mocs`, from the index and a scan alike.
pub(crate) fn is_moc(note: &Note, path: &policy::VaultPath) -> bool {
    note.has_tag("moc") || stem(path.file_name()).starts_with("MOC")
}

pub fn stem(file_name: &str) -> &str {
    match file_name.len().checked_sub(3) {
        Some(i) if file_name.is_char_boundary(i) && file_name[i..].eq_ignore_ascii_case(".md") => {
            &file_name[..i]
        }
        _ => file_name,
    }
}

/// Parsed frontmatter and where the body starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Frontmatter {
    pub fields: Map<String, Value>,
    /// Set when the block was not parsed (`fields` is then empty).
    pub error: Option<FrontmatterError>,
    /// 0-based index of the first body line (0 when there is no frontmatter block).
    pub body_line: usize,
}

/// Where a frontmatter block sits in a note's text, as byte offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockSpan {
    /// Just after the opening `---` line (and its line ending).
    pub yaml_start: usize,
    /// Where the closing `---`/`...` line starts.
    pub yaml_end: usize,
    /// Just after the closing line (and its line ending, if any): the first byte of the body.
    pub body_start: usize,
    /// 0-based index of the first body line.
    pub body_line: usize,
}

/// The frontmatter block of `text`, if it has one: a first line `---` (a BOM and trailing
/// whitespace allowed) up to the next `---` or `...` line. The one rule of where a block is, for
/// readers ([`split_frontmatter`]) and writers (`fmedit`) alike.
pub fn block_span(text: &str) -> Option<BlockSpan> {
    let mut segs = text.split_inclusive('\n');
    let first = segs.next()?;
    if line_of(first).trim_start_matches('\u{feff}').trim_end() != "---" {
        return None;
    }
    let yaml_start = first.len();
    let mut pos = yaml_start;
    for seg in segs {
        let t = line_of(seg).trim_end();
        if t == "---" || t == "..." {
            return Some(BlockSpan {
                yaml_start,
                yaml_end: pos,
                body_start: pos + seg.len(),
                // Counted as every line number is (a lone CR ends a line too).
                body_line: policy::text::lines(&text[..pos + seg.len()]).count(),
            });
        }
        pos += seg.len();
    }
    None
}

/// A `split_inclusive('\n')` segment without its line ending, as `str::lines` yields it.
fn line_of(seg: &str) -> &str {
    match seg.strip_suffix('\n') {
        Some(l) => l.strip_suffix('\r').unwrap_or(l),
        None => seg,
    }
}

/// Splits off a frontmatter block ([`block_span`]). An unclosed block is no frontmatter; an
/// invalid or non-mapping YAML block is an empty object whose lines still do not count as body; a
/// block over the bounds is an empty object with `error` set.
pub fn split_frontmatter(text: &str) -> Frontmatter {
    let Some(span) = block_span(text) else {
        return Frontmatter {
            fields: Map::new(),
            error: None,
            body_line: 0,
        };
    };
    let (fields, error) = match block_yaml(text, &span) {
        Ok(yaml) => match frontmatter::parse_block(&yaml) {
            Ok(fields) => (fields, None),
            Err(e) => (Map::new(), Some(e)),
        },
        Err(e) => (Map::new(), Some(e)),
    };
    Frontmatter {
        fields,
        error,
        body_line: span.body_line,
    }
}

/// The YAML text the parser sees for a block: its lines with `\n` endings. A block past the size
/// limit is refused before it is copied, so a huge block costs no second copy of the note.
pub fn block_yaml(text: &str, span: &BlockSpan) -> Result<String, FrontmatterError> {
    let region = text.get(span.yaml_start..span.yaml_end).unwrap_or_default();
    let bytes = region.lines().fold(0usize, |n, l| n.saturating_add(l.len() + 1));
    if bytes > frontmatter::MAX_BLOCK_BYTES {
        return Err(FrontmatterError::TooLarge { bytes });
    }
    let mut yaml = String::with_capacity(bytes);
    for line in region.lines() {
        yaml.push_str(line);
        yaml.push('\n');
    }
    Ok(yaml)
}

/// The inline `#tags` of a note's body (outside frontmatter, fenced and inline code), in order.
pub fn inline_tags_of(text: &str, body_line: usize) -> Vec<String> {
    let mut tags = Vec::new();
    for line in prose_lines(text, body_line) {
        inline_tags(&line.masked, &mut tags);
    }
    tags
}

/// A scalar frontmatter field as trimmed, non-empty text.
fn field_string(fields: &Map<String, Value>, key: &str) -> Option<String> {
    scalar_string(fields.get(key)?)
}

fn scalar_string(v: &Value) -> Option<String> {
    let s = match v {
        Value::String(s) => s.trim().to_owned(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => return None,
    };
    (!s.is_empty()).then_some(s)
}

/// A string or a list of scalars. For tags, strings are further split on commas and whitespace
/// and a leading `#` is dropped.
fn string_list(v: Option<&Value>, tags: bool) -> Vec<String> {
    let items: Vec<String> = match v {
        Some(Value::Array(items)) => items.iter().filter_map(scalar_string).collect(),
        Some(v) => scalar_string(v).into_iter().collect(),
        None => Vec::new(),
    };
    if !tags {
        return items;
    }
    items
        .iter()
        .flat_map(|s| s.split(|c: char| c == ',' || c.is_whitespace()))
        .map(|t| t.trim_start_matches('#'))
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect()
}

/// One body line outside fenced code.
#[derive(Debug, Clone, PartialEq)]
pub struct ProseLine<'a> {
    /// 1-based, counted from the first line of the file.
    pub number: usize,
    pub raw: &'a str,
    /// `raw` with inline code spans replaced by spaces (same byte offsets).
    pub masked: Cow<'a, str>,
}

/// The body lines from `body_line` on that are not inside a fenced code block (the fence lines
/// themselves excluded), with inline code blanked.
pub fn prose_lines(text: &str, body_line: usize) -> Vec<ProseLine<'_>> {
    prose(text, body_line).collect()
}

/// [`prose_lines`], one line at a time: a reader that needs only the first heading stops there
/// instead of walking (and masking) a long note to its end.
pub fn prose(text: &str, body_line: usize) -> impl Iterator<Item = ProseLine<'_>> {
    let mut fence: Option<(u8, usize)> = None;
    policy::text::lines(text)
        .enumerate()
        .skip(body_line)
        .filter_map(move |(idx, raw)| {
            if let Some((ch, len)) = fence {
                if is_fence_close(raw, ch, len) {
                    fence = None;
                }
                return None;
            }
            if let Some(open) = fence_open(raw) {
                fence = Some(open);
                return None;
            }
            Some(ProseLine {
                number: idx + 1,
                raw,
                masked: mask_inline_code(raw),
            })
        })
}

/// The line without up to three spaces of indentation, or `None` when indented more.
fn unindent(line: &str) -> Option<&str> {
    let t = line.trim_start_matches(' ');
    (line.len() - t.len() <= 3).then_some(t)
}

fn fence_open(line: &str) -> Option<(u8, usize)> {
    let t = unindent(line)?;
    let ch = *t.as_bytes().first()?;
    if ch != b'`' && ch != b'~' {
        return None;
    }
    let len = t.bytes().take_while(|&b| b == ch).count();
    // A backtick fence's info string may not contain a backtick (that is inline code).
    (len >= 3 && !(ch == b'`' && t[len..].contains('`'))).then_some((ch, len))
}

fn is_fence_close(line: &str, ch: u8, len: usize) -> bool {
    let Some(t) = unindent(line) else { return false };
    let run = t.bytes().take_while(|&b| b == ch).count();
    run >= len && t[run..].trim().is_empty()
}

/// Replaces inline code spans (a run of N backticks up to the next run of exactly N on the same
/// line) by spaces, byte for byte, so offsets stay valid.
fn mask_inline_code(line: &str) -> Cow<'_, str> {
    if !line.contains('`') {
        return Cow::Borrowed(line);
    }
    let b = line.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'`' => {
                let start = i;
                while i < b.len() && b[i] == b'`' {
                    i += 1;
                }
                let n = i - start;
                let mut j = i;
                while j < b.len() {
                    if b[j] == b'`' {
                        let s = j;
                        while j < b.len() && b[j] == b'`' {
                            j += 1;
                        }
                        if j - s == n {
                            out[start..j].fill(b' ');
                            i = j;
                            break;
                        }
                    } else {
                        j += 1;
                    }
                }
            }
            _ => i += 1,
        }
    }
    // Only whole characters were blanked (the span ends are ASCII backticks), so this holds.
    String::from_utf8(out).map_or(Cow::Borrowed(line), Cow::Owned)
}

/// The ATX heading lines (levels 1–6) outside fenced code, whole, with their 1-based numbers;
/// frontmatter is not told apart (a YAML comment that looks like a heading counts, which only
/// ranks: see `rank`).
pub fn heading_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    prose(text, 0).filter_map(|l| {
        let t = unindent(l.raw)?;
        let marks = t.bytes().take_while(|&b| b == b'#').count();
        let rest = &t[marks..];
        ((1..=6).contains(&marks) && (rest.is_empty() || rest.starts_with([' ', '\t'])))
            .then_some((l.number, l.raw))
    })
}

/// The text of the first non-empty level-1 ATX heading.
fn first_heading<'a, L: std::borrow::Borrow<ProseLine<'a>>>(
    mut lines: impl Iterator<Item = L>,
) -> Option<String> {
    lines.find_map(|l| {
        let l = l.borrow();
        let t = unindent(l.raw)?;
        let rest = t.strip_prefix('#')?;
        if !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
            return None;
        }
        let mut text = rest.trim();
        // An optional closing sequence of `#`s preceded by a space.
        let without = text.trim_end_matches('#');
        if without.is_empty() || without.ends_with([' ', '\t']) {
            text = without.trim_end();
        }
        (!text.is_empty()).then(|| text.to_owned())
    })
}

fn is_tag_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '-' || c == '/'
}

/// Inline `#tags` of one masked line: a `#` at the line start or after whitespace (so not a URL
/// fragment, a heading marker or `[[note#heading]]`), then tag characters, not digits only.
fn inline_tags(line: &str, out: &mut Vec<String>) {
    let mut prev: Option<char> = None;
    for (i, c) in line.char_indices() {
        if c == '#' && prev.is_none_or(char::is_whitespace) {
            let rest = &line[i + 1..];
            let len: usize = rest
                .chars()
                .take_while(|&c| is_tag_char(c))
                .map(char::len_utf8)
                .sum();
            let tag = rest[..len].trim_end_matches('/');
            if !tag.is_empty() && !tag.starts_with('/') && !tag.chars().all(char::is_numeric) {
                out.push(tag.to_owned());
            }
        }
        prev = Some(c);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(text: &str) -> Note {
        Note::parse(text, "stem")
    }

    proptest::proptest! {
        /// `read_note`'s light parse answers exactly what the full parse does.
        #[test]
        fn the_header_parse_agrees_with_the_full_parse(
            parts in proptest::collection::vec(proptest::prop_oneof![
                proptest::strategy::Just("---\n".to_owned()),
                proptest::strategy::Just("title: T\n".to_owned()),
                proptest::strategy::Just("title: [a, b]\n".to_owned()),
                proptest::strategy::Just("tags: [x]\n".to_owned()),
                proptest::strategy::Just("# Heading\n".to_owned()),
                proptest::strategy::Just("```\n".to_owned()),
                proptest::strategy::Just("~~~\n".to_owned()),
                proptest::strategy::Just("    # indented\n".to_owned()),
                proptest::strategy::Just("a: &x [1]\nb: *x\n".to_owned()),
                proptest::strategy::Just(": bad: yaml\n".to_owned()),
                proptest::strategy::Just("\r\n".to_owned()),
                "[a-z #`\\[\\]:-]{0,12}\n",
            ], 0..14)
        ) {
            let text: String = parts.concat();
            let full = Note::parse(&text, "stem");
            let header = NoteHeader::parse(&text, "stem");
            proptest::prop_assert_eq!(header.title, full.title);
            proptest::prop_assert_eq!(header.frontmatter, full.frontmatter);
            proptest::prop_assert_eq!(header.frontmatter_error, full.frontmatter_error);
        }
    }

    #[test]
    fn frontmatter_is_parsed_into_a_json_object() {
        let n = parse("---\ntitle: Hello\ncount: 3\nnested: {a: [1, x]}\n1: one\n---\nbody\n");
        assert_eq!(
            Value::Object(n.frontmatter),
            json!({"title": "Hello", "count": 3, "nested": {"a": [1, "x"]}, "1": "one"})
        );
        assert_eq!(n.title, "Hello");
    }

    #[test]
    fn frontmatter_variants() {
        // `...` closes, CRLF and a BOM are tolerated.
        assert_eq!(split_frontmatter("---\na: 1\n...\nx").body_line, 3);
        let crlf = split_frontmatter("\u{feff}---\r\ntitle: T\r\n---\r\nbody");
        assert_eq!(crlf.fields.get("title"), Some(&json!("T")));
        assert_eq!(crlf.body_line, 3);
        // Empty block.
        let empty = split_frontmatter("---\n---\n# H\n");
        assert!(empty.fields.is_empty());
        assert_eq!(empty.body_line, 2);
        // Unclosed: no frontmatter at all.
        assert_eq!(split_frontmatter("---\ntitle: x\n").body_line, 0);
        // Not on the first line: no frontmatter.
        assert_eq!(split_frontmatter("\n---\na: 1\n---\n").body_line, 0);
    }

    #[test]
    fn invalid_or_non_mapping_yaml_is_no_frontmatter_but_no_failure() {
        let n = parse("---\ntitle: [unclosed\n---\n# Heading\n");
        assert!(n.frontmatter.is_empty());
        assert_eq!(n.title, "Heading");
        let n = parse("---\n- a\n- b\n---\nx\n");
        assert!(n.frontmatter.is_empty());
        assert_eq!(n.title, "stem");
    }

    #[test]
    fn a_frontmatter_block_over_the_bounds_is_not_parsed_but_the_note_is() {
        // Over 64 KiB: refused by size, the body still starts after the block.
        let big = format!(
            "---\ntitle: T\npad: \"{}\"\n---\n# Heading #body\n",
            "p".repeat(70_000)
        );
        let n = parse(&big);
        assert!(n.frontmatter.is_empty());
        assert!(matches!(n.frontmatter_error, Some(FrontmatterError::TooLarge { bytes }) if bytes > 70_000));
        assert_eq!(n.title, "Heading #body");
        assert_eq!(n.tags, ["body"]);
        // An alias bomb: refused by expansion.
        let mut bomb = String::from("---\ntitle: Bomb\na0: &a0 [\"lol\"]\n");
        for i in 1..=9 {
            let refs = vec![format!("*a{}", i - 1); 10].join(", ");
            bomb.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
        }
        bomb.push_str("---\nbody\n");
        let n = parse(&bomb);
        assert_eq!(n.frontmatter_error, Some(FrontmatterError::AliasExpansion));
        assert_eq!(n.title, "stem");
        assert_eq!(split_frontmatter(&bomb).body_line, 13);
        // Within bounds: no error.
        assert_eq!(parse("---\ntitle: ok\n---\n").frontmatter_error, None);
    }

    #[test]
    fn heading_lines_are_atx_headings_outside_code() {
        let text = "# One\n#tag\n```\n## not\n```\n   ### Three\n    # indented code\n####### seven\n##\n";
        let got: Vec<(usize, &str)> = heading_lines(text).collect();
        assert_eq!(got, [(1, "# One"), (6, "   ### Three"), (9, "##")]);
    }

    #[test]
    fn title_falls_back_to_heading_then_stem() {
        assert_eq!(parse("---\ntitle: '  FM  '\n---\n# H\n").title, "FM");
        assert_eq!(parse("intro\n## Sub\n# Main Title ##\n").title, "Main Title");
        assert_eq!(parse("```\n# not a heading\n```\n#tag\n# Real\n").title, "Real");
        assert_eq!(parse("no heading\n").title, "stem");
        assert_eq!(parse("---\ntitle: 2024\n---\n").title, "2024");
    }

    #[test]
    fn aliases_description_dates() {
        let n = parse(
            "---\naliases: [One, Two]\ndescription: ' Desc '\ncreated: 2024-01-02\nupdated: 2024-02-03T10:00:00Z\n---\n",
        );
        assert_eq!(n.aliases, ["One", "Two"]);
        assert_eq!(n.description.as_deref(), Some("Desc"));
        assert_eq!(n.created.as_deref(), Some("2024-01-02"));
        assert_eq!(n.updated.as_deref(), Some("2024-02-03T10:00:00Z"));
        assert_eq!(
            parse("---\naliases: Only one, really\n---\n").aliases,
            ["Only one, really"]
        );
        assert_eq!(parse("---\nalias: Legacy\n---\n").aliases, ["Legacy"]);
    }

    #[test]
    fn frontmatter_tags_as_string_or_list() {
        assert_eq!(parse("---\ntags: 'a, #b c'\n---\n").tags, ["a", "b", "c"]);
        // Unquoted, ` #` starts a YAML comment.
        assert_eq!(parse("---\ntags: a, #b c\n---\n").tags, ["a"]);
        assert_eq!(
            parse("---\ntags: [\"#x\", y/z, 42]\n---\n").tags,
            ["x", "y/z", "42"]
        );
        assert_eq!(
            parse("---\ntags:\n  - One\n  - one\n---\n#ONE #two\n").tags,
            ["One", "two"]
        );
    }

    #[test]
    fn inline_tags_rules() {
        let n = parse(
            "# Heading\n#start mid #nested/tag #读书 #with-dash_x\n\
             not#tag http://x.com/#frag #123 #1a ##double #trail/ (#paren)\n\
             `#code` ```#code2``` #after\n```\n#fenced\n```\n~~~~\n#tilde\n~~~~\n#end",
        );
        assert_eq!(
            n.tags,
            [
                "start",
                "nested/tag",
                "读书",
                "with-dash_x",
                "1a",
                "trail",
                "after",
                "end"
            ]
        );
    }

    #[test]
    fn tags_in_frontmatter_lines_are_not_inline_tags() {
        let n = parse("---\ndescription: see #hidden\n---\n#shown\n");
        assert_eq!(n.tags, ["shown"]);
    }

    #[test]
    fn has_tag_is_case_insensitive_and_hierarchical() {
        let n = parse("#Project/Alpha #MOC\n");
        assert!(n.has_tag("moc"));
        assert!(n.has_tag("#project"));
        assert!(n.has_tag("project/alpha"));
        assert!(!n.has_tag("proj"));
        assert!(!n.has_tag("alpha"));
    }

    #[test]
    fn inline_code_masking_keeps_offsets() {
        assert_eq!(mask_inline_code("a `b` c"), "a     c");
        assert_eq!(
            mask_inline_code("a ``x ` y`` z"),
            format!("a {} z", " ".repeat(9))
        );
        assert_eq!(mask_inline_code("unclosed ` tick"), "unclosed ` tick");
        assert_eq!(mask_inline_code("`注意` x").len(), "`注意` x".len());
        assert_eq!(
            mask_inline_code(r"\`not code` x`"),
            format!(r"\`not code{}", " ".repeat(4))
        );
    }

    #[test]
    fn fences_need_matching_char_and_length() {
        let lines = prose_lines("a\n````\nx\n```\ny\n````\nb\n~~~\n```\n~~~\nc", 0);
        let nums: Vec<usize> = lines.iter().map(|l| l.number).collect();
        assert_eq!(nums, [1, 7, 11]);
    }

    #[test]
    fn stem_strips_md_only() {
        assert_eq!(stem("Note.MD"), "Note");
        assert_eq!(stem("a.txt"), "a.txt");
        assert_eq!(stem("md"), "md");
        assert_eq!(stem("读.md"), "读");
    }
}
