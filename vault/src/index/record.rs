//! What the index keeps of one note, computed from its text with the very parse the per-call scan
//! uses (`Note::parse`), so answers from the index equal answers from the files.

use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use policy::{NoteClass, VaultPath};

use crate::data::NoteData;
use crate::fs::TextFile;
use crate::index::grams::{TokenBuf, doc_tokens};
use crate::links::{Link, LinkKind, percent_decode};
use crate::note::{Note, stem};
use crate::search::fold;

/// One catalog note as the index stores it.
#[derive(Debug, Clone)]
pub struct NoteRecord {
    pub path: VaultPath,
    pub class: NoteClass,
    pub size: u64,
    /// Nanoseconds since the Unix epoch (negative before it).
    pub mtime: i64,
    /// `None`: the file is in the catalog but could not be read as a note (not UTF-8, too large…).
    pub content: Option<Content>,
}

/// What a readable note contributes.
#[derive(Debug, Clone)]
pub struct Content {
    pub title: String,
    pub aliases: Vec<String>,
    pub description: Option<String>,
    /// `Note::tags`, in order.
    pub tags: Vec<String>,
    /// Each link with its `link_key`.
    pub links: Vec<(Link, String)>,
    /// The whole file text.
    pub body: String,
    /// `grams::doc_tokens` of the folded body.
    pub body_tokens: String,
    /// `grams::doc_tokens` of the folded metadata (`meta_text`).
    pub meta_tokens: String,
    /// `grams::doc_tokens` of what the ranking weighs most (`head_text`).
    pub head_tokens: String,
    /// The frontmatter object as JSON (`query_notes` answers its values from it).
    pub frontmatter: String,
    /// What `query_notes` compares (title, tags, typed frontmatter).
    pub data: NoteData,
}

impl NoteRecord {
    /// The record of a note read whole; size and time are those of the handle that was read.
    pub fn from_file(path: VaultPath, class: NoteClass, file: TextFile, buf: &mut TokenBuf) -> NoteRecord {
        let note = Note::parse(&file.text, stem(path.file_name()));
        let body_tokens = doc_tokens(&file.text, buf, true).to_owned();
        let head_tokens =
            doc_tokens(&head_text(&note.title, &note.aliases, &file.text), buf, false).to_owned();
        let meta_tokens = doc_tokens(
            &meta_text(
                &note.title,
                &note.aliases,
                note.description.as_deref(),
                &note.tags,
            ),
            buf,
            false,
        )
        .to_owned();
        let frontmatter = serde_json::to_string(&note.frontmatter).unwrap_or_else(|_| "{}".into());
        let data = NoteData::new(note.title.clone(), note.tags.clone(), &note.frontmatter);
        let links = note
            .links
            .into_iter()
            .map(|l| {
                let key = link_key(&l);
                (l, key)
            })
            .collect();
        NoteRecord {
            path,
            class,
            size: file.text.len() as u64,
            mtime: nanos(file.modified),
            content: Some(Content {
                title: note.title,
                aliases: note.aliases,
                description: note.description,
                tags: note.tags,
                links,
                body: file.text,
                body_tokens,
                meta_tokens,
                head_tokens,
                frontmatter,
                data,
            }),
        }
    }

    /// A catalog file that could not be read as a note, with the walk's size and time.
    pub fn unreadable(path: VaultPath, class: NoteClass, size: u64, modified: SystemTime) -> NoteRecord {
        NoteRecord {
            path,
            class,
            size,
            mtime: nanos(modified),
            content: None,
        }
    }
}

/// The metadata fields `search_knowledge` looks at, one per line: every field is a substring of
/// it, so (folded by `doc_tokens`, per character as `search::fold`) its grams hold every folded
/// field's grams.
pub fn meta_text(title: &str, aliases: &[String], description: Option<&str>, tags: &[String]) -> String {
    let mut s = title.to_owned();
    for a in aliases {
        s.push('\n');
        s.push_str(a);
    }
    s.push('\n');
    s.push_str(description.unwrap_or_default());
    for t in tags {
        s.push('\n');
        s.push_str(t);
    }
    s
}

/// The title, the aliases and the heading lines, one per line: the fields `rank` weighs most, so
/// a note whose field holds a term holds its grams here (the ranking examines those notes first).
pub fn head_text(title: &str, aliases: &[String], text: &str) -> String {
    let mut s = title.to_owned();
    for a in aliases {
        s.push('\n');
        s.push_str(a);
    }
    for (_, h) in crate::note::heading_lines(text) {
        s.push('\n');
        s.push_str(h);
    }
    s
}

/// The name a link can only resolve to: the folded stem of the file it names.
///
/// `links::Resolver` resolves a link to a note whose folded file name equals the folded last
/// segment of the link's path (a wiki link's text before `#` with `.md` added when missing; a
/// Markdown link's percent-decoded destination before `#`/`?`), whether it matches the exact path,
/// a path suffix or a case variant. So a note's backlinks are among the links whose key is its
/// `name_key`; the resolver then decides each one.
pub fn link_key(link: &Link) -> String {
    let file: Cow<'_, str> = match link.kind {
        LinkKind::Wiki | LinkKind::Embed => {
            let file = link.target.split('#').next().unwrap_or_default().trim();
            if ends_with_md(file) {
                Cow::Borrowed(file)
            } else {
                Cow::Owned(format!("{file}.md"))
            }
        }
        LinkKind::Markdown => {
            let dest = link.target.trim();
            let path = dest.split(['#', '?']).next().unwrap_or_default();
            percent_decode(path).map_or(Cow::Borrowed(path), Cow::Owned)
        }
    };
    let last = file.rsplit('/').next().unwrap_or_default();
    fold(stem(last))
}

/// The key of the links that may point at `path` (see `link_key`).
pub fn name_key(path: &VaultPath) -> String {
    fold(stem(path.file_name()))
}

/// As `links::ends_with_md`: a name longer than `.md` ending in it, ASCII case-insensitively.
fn ends_with_md(s: &str) -> bool {
    s.len() > 3 && s.is_char_boundary(s.len() - 3) && s[s.len() - 3..].eq_ignore_ascii_case(".md")
}

/// A time as nanoseconds since the Unix epoch, saturating at the `i64` range (years 1678–2262).
pub fn nanos(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_nanos()).map_or(i64::MIN, |n| -n),
    }
}

/// The inverse of `nanos`.
pub fn from_nanos(n: i64) -> SystemTime {
    if n >= 0 {
        UNIX_EPOCH + Duration::from_nanos(n.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_nanos(n.unsigned_abs())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::links::Resolver;

    fn p(s: &str) -> VaultPath {
        VaultPath::parse(s).unwrap()
    }

    #[test]
    fn nanos_round_trip() {
        for t in [
            UNIX_EPOCH,
            UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789),
            UNIX_EPOCH - Duration::new(86_400, 5),
        ] {
            assert_eq!(from_nanos(nanos(t)), t);
        }
    }

    #[test]
    fn every_resolved_link_carries_its_targets_name_key() {
        let paths: Vec<VaultPath> = [
            "z/attention.md",
            "z/Attention Mechanism.md",
            "a/b/Deep Note.MD",
            "top.md",
            "notes/读书.md",
            "x/my note.md",
        ]
        .iter()
        .map(|s| p(s))
        .collect();
        let resolver = Resolver::new(paths.iter());
        let text = "[[attention]] [[ATTENTION#h]] [[z/attention.md|x]] ![[Attention Mechanism]]\n\
                    [[deep note]] [[b/Deep Note.md]] [[./top]] [[../top]] [[读书]] [[TOP.MD]]\n\
                    [t](../top.md) [t](/z/attention.md#x) [t](my%20note.md?x) [t](<my note.md>)\n\
                    [t](Attention%20Mechanism.md) [[missing]] [[pic.png]] [[#self]]\n";
        for source in &paths {
            let note = Note::parse(text, "s");
            for link in &note.links {
                if let crate::links::Resolution::Note(t) = resolver.resolve(source, link) {
                    assert_eq!(link_key(link), name_key(&t), "{link:?} from {source} -> {t}");
                }
            }
        }
    }
}
