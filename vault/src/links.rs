//! Pure link handling: extracting wiki links (`[[Target]]`, `[[Target|label]]`,
//! `[[Target#heading]]`, `![[embed]]`) and Markdown links to `*.md` from prose lines, and resolving
//! them against the set of catalog notes.

use std::ops::Range;

use policy::VaultPath;

use crate::note::{ProseLine, prose_lines, split_frontmatter};
use crate::search::fold;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkKind {
    Wiki,
    Embed,
    Markdown,
}

/// One link occurrence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub kind: LinkKind,
    /// As written: a wiki link's text before `|` (heading included), a Markdown link's destination.
    pub target: String,
    /// 1-based line of the file.
    pub line: usize,
}

/// Extensions of attachments that wiki links and embeds commonly point at; such a link is neither
/// an outlink (only notes are in the catalog) nor broken.
const ATTACHMENTS: &[&str] = &[
    "png",
    "jpg",
    "jpeg",
    "gif",
    "svg",
    "webp",
    "bmp",
    "avif",
    "ico",
    "pdf",
    "mp3",
    "wav",
    "ogg",
    "m4a",
    "flac",
    "webm",
    "mp4",
    "mov",
    "mkv",
    "ogv",
    "canvas",
    "excalidraw",
    "base",
    "csv",
    "json",
    "txt",
    "zip",
];

/// One link found by [`scan_line`], with where it sits in the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkSpan {
    pub kind: LinkKind,
    /// As in [`Link::target`].
    pub target: String,
    /// The link in line bytes: a wiki link or embed from `[[` (or `!`) to `]]`, a Markdown link's
    /// destination as written (inside `<…>` if so).
    pub span: Range<usize>,
    /// The file part of the target, in line bytes: before `#` for wiki links, before `#`/`?` for
    /// Markdown destinations (still percent-encoded), trimmed as the resolver trims it. This is
    /// what a move rewrites.
    pub file: Range<usize>,
}

/// A link of a whole text with its position: what the reader and the move rewrite both use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextLink {
    /// 1-based line of the file.
    pub line: usize,
    pub kind: LinkKind,
    pub target: String,
    /// [`LinkSpan::span`], in bytes of the whole text.
    pub span: Range<usize>,
    /// [`LinkSpan::file`], in bytes of the whole text.
    pub file: Range<usize>,
}

/// All links of the prose lines, in text order.
pub fn extract(lines: &[ProseLine<'_>]) -> Vec<Link> {
    let mut out = Vec::new();
    for l in lines {
        out.extend(scan_line(&l.masked).into_iter().map(|s| Link {
            kind: s.kind,
            target: s.target,
            line: l.number,
        }));
    }
    out
}

/// Every link of a note's text (frontmatter and code skipped, as [`crate::note::Note::parse`]
/// reads it), in text order, with byte positions in `text`.
pub fn scan_text(text: &str) -> Vec<TextLink> {
    let fm = split_frontmatter(text);
    let mut starts = vec![0];
    starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
    let mut out = Vec::new();
    for line in prose_lines(text, fm.body_line) {
        let Some(&offset) = starts.get(line.number - 1) else {
            continue;
        };
        out.extend(scan_line(&line.masked).into_iter().map(|s| TextLink {
            line: line.number,
            kind: s.kind,
            target: s.target,
            span: offset + s.span.start..offset + s.span.end,
            file: offset + s.file.start..offset + s.file.end,
        }));
    }
    out
}

/// The one link scanner: every wiki link, embed and Markdown link to a `*.md` note of one prose
/// line (inline code already masked), in text order.
pub fn scan_line(line: &str) -> Vec<LinkSpan> {
    let mut out = Vec::new();
    wiki_links(line, &mut out);
    markdown_links(line, &mut out);
    out.sort_by_key(|l| l.span.start);
    out
}

fn wiki_links(line: &str, out: &mut Vec<LinkSpan>) {
    let mut from = 0;
    while let Some(k) = line[from..].find("[[") {
        let open = from + k;
        let inner_start = open + 2;
        let Some(len) = line[inner_start..].find("]]") else {
            return;
        };
        let inner = &line[inner_start..inner_start + len];
        // `[[a [[b]]`: the innermost opening wins.
        if let Some(nested) = inner.rfind("[[") {
            from = inner_start + nested;
            continue;
        }
        from = inner_start + len + 2;
        let before_pipe = inner.split('|').next().unwrap_or_default();
        // In tables the pipe is escaped: `[[Target\|label]]`.
        let target = before_pipe.strip_suffix('\\').unwrap_or(before_pipe).trim();
        // `[[#heading]]` points into the note itself.
        if target.is_empty() || target.starts_with('#') {
            continue;
        }
        let target_start = inner_start + leading_ws(before_pipe);
        // The resolver's file part: before the first `#`, trimmed.
        let head = target.split('#').next().unwrap_or_default();
        let file_start = target_start + leading_ws(head);
        let embed = line[..open].ends_with('!');
        out.push(LinkSpan {
            kind: if embed { LinkKind::Embed } else { LinkKind::Wiki },
            target: target.to_owned(),
            span: if embed { open - 1 } else { open }..from,
            file: file_start..file_start + head.trim().len(),
        });
    }
}

fn markdown_links(line: &str, out: &mut Vec<LinkSpan>) {
    let mut from = 0;
    while let Some(k) = line[from..].find("](") {
        let start = from + k + 2;
        let rest = &line[start..];
        let (dest, dest_start, consumed) = if let Some(r) = rest.strip_prefix('<') {
            match r.find('>') {
                Some(e) => (&r[..e], start + 1, e + 2),
                None => {
                    from = start;
                    continue;
                }
            }
        } else {
            let mut depth = 0usize;
            let mut end = rest.len();
            for (i, c) in rest.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' if depth == 0 => {
                        end = i;
                        break;
                    }
                    ')' => depth -= 1,
                    c if c.is_whitespace() => {
                        end = i;
                        break;
                    }
                    _ => {}
                }
            }
            (&rest[..end], start, end)
        };
        from = start + consumed;
        if markdown_note_path(dest).is_some() {
            let path = dest.trim().split(['#', '?']).next().unwrap_or_default();
            let file_start = dest_start + leading_ws(dest);
            out.push(LinkSpan {
                kind: LinkKind::Markdown,
                target: dest.to_owned(),
                span: dest_start..dest_start + dest.len(),
                file: file_start..file_start + path.len(),
            });
        }
    }
}

fn leading_ws(s: &str) -> usize {
    s.len() - s.trim_start().len()
}

/// The decoded path of a Markdown link destination that points at a `*.md` note: no URL scheme
/// (`http:`, `mailto:`, `obsidian:`…), fragment and query dropped, percent-decoded.
fn markdown_note_path(dest: &str) -> Option<String> {
    let dest = dest.trim();
    if has_scheme(dest) {
        return None;
    }
    let path = dest.split(['#', '?']).next().unwrap_or_default();
    let decoded = percent_decode(path)?;
    ends_with_md(&decoded).then_some(decoded)
}

pub(crate) fn has_scheme(s: &str) -> bool {
    let mut chars = s.chars();
    if !chars.next().is_some_and(|c| c.is_ascii_alphabetic()) {
        return false;
    }
    for c in chars {
        match c {
            ':' => return true,
            c if c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.') => {}
            _ => return false,
        }
    }
    false
}

/// Decodes `%XX` escapes; a `%` not followed by two hex digits stays literal. `None` when the
/// result is not UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let (Some(h), Some(l)) = (b.get(i + 1).and_then(hex), b.get(i + 2).and_then(hex))
        {
            out.push(h << 4 | l);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).ok()
}

fn hex(b: &u8) -> Option<u8> {
    (*b as char).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

pub(crate) fn ends_with_md(s: &str) -> bool {
    s.len() > 3 && s.is_char_boundary(s.len() - 3) && s[s.len() - 3..].eq_ignore_ascii_case(".md")
}

/// Joins `rel` onto the folder `base` (segments), resolving `.` and `..`; `None` above the root.
fn normalize<'a>(base: impl IntoIterator<Item = &'a str>, rel: &'a str) -> Option<String> {
    let mut segs: Vec<&str> = base.into_iter().collect();
    for seg in rel.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                segs.pop()?;
            }
            s => segs.push(s),
        }
    }
    Some(segs.join("/"))
}

/// What a link points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    Note(VaultPath),
    /// Nothing in the catalog: a broken link.
    Broken,
    /// Not a note link at all (an attachment): neither an outlink nor broken.
    NotANote,
}

/// A note's links out, as `get_related_notes` reports them: the notes they resolve to (not the
/// note itself) and the links that resolve to nothing, from the index and a scan alike.
pub(crate) fn links_out(
    resolver: &Resolver,
    path: &VaultPath,
    links: &[Link],
) -> (
    std::collections::BTreeSet<VaultPath>,
    Vec<crate::types::BrokenLink>,
) {
    let mut outlinks = std::collections::BTreeSet::new();
    let mut broken = Vec::new();
    for link in links {
        match resolver.resolve(path, link) {
            Resolution::Note(p) if p != *path => {
                outlinks.insert(p);
            }
            Resolution::Note(_) | Resolution::NotANote => {}
            Resolution::Broken => broken.push(crate::types::BrokenLink {
                target: link.target.clone(),
                line: link.line,
            }),
        }
    }
    (outlinks, broken)
}

/// Resolves links against a set of note paths. Persistent maps: a clone is O(1) and adding or
/// removing a path O(log n), so the index keeps one per catalog generation at the cost of the
/// change, and a planned move derives the resolver "after" from the one "before" (docs/contract.md#proposals).
#[derive(Debug, Default, Clone)]
pub struct Resolver {
    exact: imbl::HashSet<String>,
    /// Folded file name (`note.md`) → (folded path, path).
    by_name: imbl::HashMap<String, Vec<(String, VaultPath)>>,
}

impl Resolver {
    pub fn new<'a>(paths: impl IntoIterator<Item = &'a VaultPath>) -> Resolver {
        let mut r = Resolver::default();
        for p in paths {
            r.insert(p);
        }
        r
    }

    /// Adds a note path (no effect if present).
    pub fn insert(&mut self, p: &VaultPath) {
        if self.exact.insert(p.as_str().to_owned()).is_some() {
            return;
        }
        self.by_name
            .entry(fold(p.file_name()))
            .or_default()
            .push((fold(p.as_str()), p.clone()));
    }

    /// Removes a note path (no effect if absent).
    pub fn remove(&mut self, p: &VaultPath) {
        if self.exact.remove(p.as_str()).is_none() {
            return;
        }
        let name = fold(p.file_name());
        if let Some(list) = self.by_name.get_mut(&name) {
            list.retain(|(_, q)| q != p);
            if list.is_empty() {
                self.by_name.remove(&name);
            }
        }
    }

    /// This resolver as it will be once `from` is moved to `to`.
    pub fn moving(&self, from: &VaultPath, to: &VaultPath) -> Resolver {
        let mut r = self.clone();
        r.remove(from);
        r.insert(to);
        r
    }

    /// Whether `p` is one of the paths.
    pub fn contains(&self, p: &VaultPath) -> bool {
        self.exact.contains(p.as_str())
    }

    /// Every path, and every name with its paths, sorted (tests compare resolvers with this).
    #[cfg(test)]
    pub(crate) fn sorted(&self) -> (Vec<String>, Vec<(String, Vec<String>)>) {
        let mut exact: Vec<String> = self.exact.iter().cloned().collect();
        exact.sort();
        let mut names: Vec<(String, Vec<String>)> = self
            .by_name
            .iter()
            .map(|(k, v)| {
                let mut ps: Vec<String> = v.iter().map(|(_, p)| p.to_string()).collect();
                ps.sort();
                (k.clone(), ps)
            })
            .collect();
        names.sort();
        (exact, names)
    }

    /// How many paths have this file name, compared case-folded.
    pub fn count_named(&self, file_name: &str) -> usize {
        self.by_name.get(&fold(file_name)).map_or(0, Vec::len)
    }

    /// Resolves `link` written in the note at `source`.
    pub fn resolve(&self, source: &VaultPath, link: &Link) -> Resolution {
        let found = match link.kind {
            LinkKind::Wiki | LinkKind::Embed => {
                let file = link.target.split('#').next().unwrap_or_default().trim();
                if file.is_empty() {
                    return Resolution::NotANote;
                }
                if !ends_with_md(file)
                    && let Some((_, ext)) = file.rsplit_once('.')
                    && ATTACHMENTS.iter().any(|a| a.eq_ignore_ascii_case(ext))
                {
                    return Resolution::NotANote;
                }
                self.resolve_wiki(source, file)
            }
            LinkKind::Markdown => {
                let Some(path) = markdown_note_path(&link.target) else {
                    return Resolution::NotANote;
                };
                self.resolve_markdown(source, &path)
            }
        };
        found.map_or(Resolution::Broken, Resolution::Note)
    }

    /// (a) a vault path with or without `.md` (`./` and `../` relative to the source folder);
    /// (b) else a case-insensitive match on the last path components (a bare name is a stem
    /// match), preferring the exact path, then the source's folder, then the shortest path.
    fn resolve_wiki(&self, source: &VaultPath, file: &str) -> Option<VaultPath> {
        let with_md = if ends_with_md(file) {
            file.to_owned()
        } else {
            format!("{file}.md")
        };
        let path = if with_md.starts_with("./") || with_md.starts_with("../") {
            normalize(folder_segments(source), &with_md)?
        } else {
            normalize([], &with_md)?
        };
        self.lookup_exact(&path)
            .or_else(|| self.lookup_suffix(source, &path))
    }

    /// Relative to the source's folder; else as a vault-absolute path (Obsidian's other link
    /// format); a leading `/` means vault-absolute.
    fn resolve_markdown(&self, source: &VaultPath, path: &str) -> Option<VaultPath> {
        let relative = if path.starts_with('/') {
            None
        } else {
            normalize(folder_segments(source), path)
        };
        let absolute = normalize([], path);
        [relative, absolute]
            .into_iter()
            .flatten()
            .find_map(|p| self.lookup_exact(&p).or_else(|| self.lookup_case_insensitive(&p)))
    }

    fn lookup_exact(&self, path: &str) -> Option<VaultPath> {
        if self.exact.contains(path) {
            VaultPath::parse(path).ok()
        } else {
            None
        }
    }

    fn candidates(&self, path: &str) -> (String, &[(String, VaultPath)]) {
        let folded = fold(path);
        let name = folded.rsplit('/').next().unwrap_or_default();
        let list = self.by_name.get(name).map(Vec::as_slice).unwrap_or_default();
        (folded, list)
    }

    fn lookup_case_insensitive(&self, path: &str) -> Option<VaultPath> {
        let (folded, list) = self.candidates(path);
        list.iter()
            .filter(|(f, _)| *f == folded)
            .map(|(_, p)| p)
            .min()
            .cloned()
    }

    fn lookup_suffix(&self, source: &VaultPath, path: &str) -> Option<VaultPath> {
        let (folded, list) = self.candidates(path);
        let suffix = format!("/{folded}");
        let source_folder = source.parent();
        list.iter()
            .filter(|(f, _)| *f == folded || f.ends_with(&suffix))
            .min_by_key(|(f, p)| {
                (
                    *f != folded,
                    p.parent() != source_folder,
                    p.as_str().len(),
                    p.clone(),
                )
            })
            .map(|(_, p)| p.clone())
    }
}

fn folder_segments(source: &VaultPath) -> Vec<&str> {
    let mut segs: Vec<&str> = source.segments().collect();
    segs.pop();
    segs
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::note::Note;

    fn links(text: &str) -> Vec<(LinkKind, String, usize)> {
        Note::parse(text, "x")
            .links
            .into_iter()
            .map(|l| (l.kind, l.target, l.line))
            .collect()
    }

    fn p(s: &str) -> VaultPath {
        VaultPath::parse(s).unwrap()
    }

    #[test]
    fn wiki_links_with_lines_and_kinds() {
        let got = links(
            "---\ntitle: '[[Not a link]]'\n---\n[[A]] and [[B|label]]\n\n![[C#Heading]] [[D#h|l]] [[#self]]\n[[T\\|esc]]",
        );
        assert_eq!(
            got,
            [
                (LinkKind::Wiki, "A".to_owned(), 4),
                (LinkKind::Wiki, "B".to_owned(), 4),
                (LinkKind::Embed, "C#Heading".to_owned(), 6),
                (LinkKind::Wiki, "D#h".to_owned(), 6),
                (LinkKind::Wiki, "T".to_owned(), 7),
            ]
        );
    }

    #[test]
    fn links_in_code_are_ignored() {
        let got = links("```\n[[Fenced]]\n```\n`[[Inline]]` [[Real]]\n~~~md\n[x](a.md)\n~~~\n");
        assert_eq!(got, [(LinkKind::Wiki, "Real".to_owned(), 4)]);
    }

    #[test]
    fn markdown_links_to_md_only() {
        let got = links(
            "[a](x.md) [b](https://e.com/y.md) [c](img.png) [d](sub/My%20Note.md#h) [e](<with space.md>) [f](mailto:a@b.md)\n[g](../up.md \"title\") [h](#frag)",
        );
        assert_eq!(
            got,
            [
                (LinkKind::Markdown, "x.md".to_owned(), 1),
                (LinkKind::Markdown, "sub/My%20Note.md#h".to_owned(), 1),
                (LinkKind::Markdown, "with space.md".to_owned(), 1),
                (LinkKind::Markdown, "../up.md".to_owned(), 2),
            ]
        );
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%20b%E6%B3%A8").unwrap(), "a b注");
        assert_eq!(percent_decode("100%").unwrap(), "100%");
        assert_eq!(percent_decode("%zz").unwrap(), "%zz");
        assert!(percent_decode("%FF").is_none());
    }

    fn resolver() -> Resolver {
        let paths: Vec<VaultPath> = [
            "a/Note.md",
            "b/note.md",
            "b/c/note.md",
            "top.md",
            "z/attention.md",
            "My Note.md",
        ]
        .into_iter()
        .map(p)
        .collect();
        Resolver::new(&paths)
    }

    fn wiki(target: &str) -> Link {
        Link {
            kind: LinkKind::Wiki,
            target: target.to_owned(),
            line: 1,
        }
    }

    fn md(target: &str) -> Link {
        Link {
            kind: LinkKind::Markdown,
            target: target.to_owned(),
            line: 1,
        }
    }

    #[test]
    fn wiki_resolution_by_path_then_stem() {
        let r = resolver();
        let src = p("x/src.md");
        assert_eq!(
            r.resolve(&src, &wiki("z/attention")),
            Resolution::Note(p("z/attention.md"))
        );
        assert_eq!(
            r.resolve(&src, &wiki("z/attention.md")),
            Resolution::Note(p("z/attention.md"))
        );
        assert_eq!(
            r.resolve(&src, &wiki("ATTENTION#h")),
            Resolution::Note(p("z/attention.md"))
        );
        assert_eq!(r.resolve(&src, &wiki("Top")), Resolution::Note(p("top.md")));
        // Several stems: the shortest path from elsewhere, the same folder when there is one.
        assert_eq!(r.resolve(&src, &wiki("note")), Resolution::Note(p("a/Note.md")));
        assert_eq!(
            r.resolve(&p("b/c/x.md"), &wiki("note")),
            Resolution::Note(p("b/c/note.md"))
        );
        // A partial path matches by components.
        assert_eq!(
            r.resolve(&src, &wiki("c/note")),
            Resolution::Note(p("b/c/note.md"))
        );
        assert_eq!(r.resolve(&src, &wiki("B/Note")), Resolution::Note(p("b/note.md")));
        assert_eq!(r.resolve(&src, &wiki("x/note")), Resolution::Broken);
        assert_eq!(r.resolve(&src, &wiki("Missing")), Resolution::Broken);
        assert_eq!(r.resolve(&src, &wiki("ote")), Resolution::Broken);
        assert_eq!(
            r.resolve(&p("z/q.md"), &wiki("./attention")),
            Resolution::Note(p("z/attention.md"))
        );
        assert_eq!(r.resolve(&src, &wiki("pic.PNG")), Resolution::NotANote);
    }

    #[test]
    fn markdown_resolution_relative_then_absolute() {
        let r = resolver();
        assert_eq!(
            r.resolve(&p("z/x.md"), &md("attention.md")),
            Resolution::Note(p("z/attention.md"))
        );
        assert_eq!(
            r.resolve(&p("z/x.md"), &md("../top.md#h")),
            Resolution::Note(p("top.md"))
        );
        assert_eq!(
            r.resolve(&p("z/x.md"), &md("z/attention.md")),
            Resolution::Note(p("z/attention.md"))
        );
        assert_eq!(
            r.resolve(&p("q.md"), &md("My%20Note.md")),
            Resolution::Note(p("My Note.md"))
        );
        assert_eq!(
            r.resolve(&p("q.md"), &md("/a/note.md")),
            Resolution::Note(p("a/Note.md"))
        );
        assert_eq!(r.resolve(&p("q.md"), &md("../../escape.md")), Resolution::Broken);
        assert_eq!(r.resolve(&p("q.md"), &md("gone.md")), Resolution::Broken);
    }
}
