//! Link rewrites for a move (docs/contract.md#proposals): `propose_move` reports them, apply performs them.
//!
//! What counts as a link, where it sits and what it points at is defined once: `links::scan_text`
//! (the scanner the read side's `links::extract` runs) and `links::Resolver`. This module only
//! replaces the file part of the links whose meaning the move would change; every other byte
//! stays as it was. The result is parsed and resolved again before it is returned, so a plan
//! never breaks a link.

use std::ops::Range;

use policy::VaultPath;
use sha2::{Digest, Sha256};

use crate::fs::FsError;
use crate::links::{self, Link, LinkKind, Resolution, Resolver, ends_with_md, percent_decode};
use crate::note::{Note, stem};
use crate::reader::Vault;
use crate::types::VaultError;

/// One note whose links a move rewrites.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkRewrite {
    /// The note as it is now. For the moved note itself this is `from`, and `new_text` is what is
    /// written at `to`.
    pub path: VaultPath,
    /// Links rewritten in this note.
    pub count: usize,
    /// SHA-256 hex of the note's bytes as read: apply rewrites only if they are unchanged.
    pub base_hash: String,
    /// The whole new text: the old one with only link targets replaced.
    pub new_text: String,
}

impl Vault {
    /// The rewrites that keep every link meaning the same when `from` moves to `to`.
    ///
    /// Every catalog note (notes and standards, never the inbox) that may hold an affected link
    /// is read (found by the index's link keys; every note when the index cannot answer); each
    /// link that resolves to a note now, and would resolve elsewhere after the move (links to
    /// `from`, the moved note's own relative links, and a stem link that `to` would capture), is
    /// rewritten to point where it pointed, in its own style: a stem link stays a stem link when the stem is unique
    /// after the move (else it becomes a vault path), a path link stays a path link (`./`/`../`
    /// relative ones stay relative), `.md` is kept or left out as written, `#heading`, `|label`
    /// and `!` are untouched; Markdown links get a relative path (vault-absolute if written with a
    /// leading `/`), percent-encoded. Links in code, frontmatter and broken links are left alone.
    ///
    /// Notes apply could not write (outside `notes`, or reached through a symlink) are skipped
    /// and logged. The caller checks that `to` is free. `INVALID_ARGUMENT` when some link cannot
    /// be expressed so that it still resolves (a `#` or `|` in a wiki-linked name).
    pub fn plan_move(&self, from: &VaultPath, to: &VaultPath) -> Result<Vec<LinkRewrite>, VaultError> {
        let layout = self.layout();
        layout.check_write_target(from)?;
        layout.check_write_target(to)?;
        // From the index when it answers: its resolver of the catalog and the few notes that can
        // hold an affected link. Otherwise (index building or unaware of `from`) every note.
        let (old, sources) = match self.index_move_sources(from, to) {
            Some(found) => found,
            None => {
                let all = self.catalog_paths();
                (Resolver::new(&all), all)
            }
        };
        if !old.contains(from) {
            return Err(FsError::NotFound.into());
        }
        let ctx = Move {
            from,
            to,
            new: old.moving(from, to),
            old,
        };
        let mut plan = Vec::new();
        for source in &sources {
            let file = match self.fs().read_text(source) {
                Ok(file) => file,
                Err(e) => {
                    tracing::debug!(path = %source, error = %e, "note skipped by the move plan");
                    continue;
                }
            };
            let planned = ctx.rewrite_note(source, &file.text);
            if matches!(planned, Ok(None)) {
                continue;
            }
            // Apply writes only real `*.md` files under `notes`: a rewrite it would refuse would
            // make the whole move unappliable.
            let writable = layout.check_write_target(source).is_ok()
                && matches!(self.fs().resolve(source), Ok(Some(real)) if &real == source);
            if !writable {
                tracing::info!(path = %source, "links not rewritten: apply may not write this note");
                continue;
            }
            let Some((new_text, count)) = planned? else {
                continue;
            };
            plan.push(LinkRewrite {
                path: source.clone(),
                count,
                base_hash: hex::encode(Sha256::digest(file.bytes())),
                new_text,
            });
        }
        Ok(plan)
    }
}

/// One planned move and the link resolution before and after it.
struct Move<'a> {
    from: &'a VaultPath,
    to: &'a VaultPath,
    old: Resolver,
    new: Resolver,
}

impl Move<'_> {
    /// The note at `source` with its links rewritten and how many, `None` when nothing changes.
    fn rewrite_note(&self, source: &VaultPath, text: &str) -> Result<Option<(String, usize)>, VaultError> {
        // The moved note resolves its links from its new place afterwards.
        let moved = if source == self.from { self.to } else { source };
        let mut edits: Vec<(Range<usize>, String)> = Vec::new();
        for found in links::scan_text(text) {
            let link = Link {
                kind: found.kind,
                target: found.target,
                line: found.line,
            };
            let Some(want) = self.wanted(source, &link) else {
                continue;
            };
            if self.new.resolve(moved, &link) == Resolution::Note(want.clone()) {
                continue; // still right after the move
            }
            let written = &text[found.file.clone()];
            let replacement = match link.kind {
                LinkKind::Wiki | LinkKind::Embed => self.wiki_file(moved, &link, written, &want),
                LinkKind::Markdown => self.markdown_file(moved, &link, written, &want),
            }
            .ok_or_else(|| unexpressible(source))?;
            edits.push((found.file, replacement));
        }
        if edits.is_empty() {
            return Ok(None);
        }
        let mut out = String::with_capacity(text.len() + 64);
        let mut last = 0;
        for (range, replacement) in &edits {
            out.push_str(&text[last..range.start]);
            out.push_str(replacement);
            last = range.end;
        }
        out.push_str(&text[last..]);
        self.verify(source, moved, text, &out)?;
        Ok(Some((out, edits.len())))
    }

    /// Where `link` (in the note at `source`) must point after the move: `None` for links that
    /// point at no note now (broken or attachments), which are left alone.
    fn wanted(&self, source: &VaultPath, link: &Link) -> Option<VaultPath> {
        match self.old.resolve(source, link) {
            Resolution::Note(p) if &p == self.from => Some(self.to.clone()),
            Resolution::Note(p) => Some(p),
            Resolution::Broken | Resolution::NotANote => None,
        }
    }

    /// Every link of the new text resolves, after the move, to where the old one pointed.
    fn verify(&self, source: &VaultPath, moved: &VaultPath, old: &str, new: &str) -> Result<(), VaultError> {
        let name = stem(moved.file_name());
        let (before, after) = (Note::parse(old, name).links, Note::parse(new, name).links);
        let kept = before.len() == after.len()
            && before.iter().zip(&after).all(|(b, a)| {
                b.kind == a.kind
                    && b.line == a.line
                    && self
                        .wanted(source, b)
                        .is_none_or(|want| self.new.resolve(moved, a) == Resolution::Note(want))
            });
        if kept { Ok(()) } else { Err(unexpressible(source)) }
    }

    /// The new file part of a wiki link or embed pointing at `want`, in the style of `written`.
    fn wiki_file(&self, moved: &VaultPath, link: &Link, written: &str, want: &VaultPath) -> Option<String> {
        let with_md = ends_with_md(written);
        let spell = |p: &str| {
            if with_md {
                p.to_owned()
            } else {
                strip_md(p).to_owned()
            }
        };
        let full = spell(want.as_str());
        let first = if written.starts_with("./") || written.starts_with("../") {
            let rel = relative(moved, want);
            spell(&if rel.starts_with("../") {
                rel
            } else {
                format!("./{rel}")
            })
        } else if written.contains('/') || !self.stem_is_unique(want) {
            full.clone()
        } else {
            spell(want.file_name())
        };
        [first, full].into_iter().find(|candidate| {
            // These would end or split the link: `[[a|b]]`, `[[a#b]]`, `[[a]]b]]`.
            !candidate.contains(['|', '#', '[', ']'])
                && self.new.resolve(moved, &with_target(link, candidate)) == Resolution::Note(want.clone())
        })
    }

    /// The new path part of a Markdown destination pointing at `want`, in the style of `written`.
    fn markdown_file(
        &self,
        moved: &VaultPath,
        link: &Link,
        written: &str,
        want: &VaultPath,
    ) -> Option<String> {
        let decoded = percent_decode(written).unwrap_or_default();
        let plain = if decoded.starts_with('/') {
            format!("/{want}")
        } else {
            let rel = relative(moved, want);
            if written.starts_with("./") && !rel.starts_with("../") {
                format!("./{rel}")
            } else {
                rel
            }
        };
        let candidate = encode_destination(&plain);
        (self.new.resolve(moved, &with_target(link, &candidate)) == Resolution::Note(want.clone()))
            .then_some(candidate)
    }

    /// Is `want`'s file name the only one of its (case-folded) kind after the move?
    fn stem_is_unique(&self, want: &VaultPath) -> bool {
        self.new.count_named(want.file_name()) == 1
    }
}

fn unexpressible(source: &VaultPath) -> VaultError {
    VaultError::InvalidArgument(format!(
        "the move would change where links in {source} point, and they cannot be rewritten to keep them"
    ))
}

/// `link` with its target replaced (the resolver reads only the file part).
fn with_target(link: &Link, target: &str) -> Link {
    Link {
        kind: link.kind,
        target: target.to_owned(),
        line: link.line,
    }
}

fn strip_md(s: &str) -> &str {
    if ends_with_md(s) { &s[..s.len() - 3] } else { s }
}

/// The path of `to` relative to the folder of `source`, `/`-separated (`../` to go up).
fn relative(source: &VaultPath, to: &VaultPath) -> String {
    let mut folder: Vec<&str> = source.segments().collect();
    folder.pop();
    let target: Vec<&str> = to.segments().collect();
    let common = folder
        .iter()
        .zip(&target)
        .take_while(|(a, b)| a == b)
        .count()
        // The file name itself is never a common folder.
        .min(target.len() - 1);
    let mut parts: Vec<&str> = vec![".."; folder.len() - common];
    parts.extend(&target[common..]);
    parts.join("/")
}

/// Percent-encodes what would end, split or be decoded out of a Markdown destination: `%`,
/// whitespace (spaces become `%20`), `#`, `?`, `<`, `>`, `(`, `)`. Other characters (CJK
/// included) stay as they are, as Obsidian writes them.
fn encode_destination(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        if c == '%' || c.is_whitespace() || matches!(c, '#' | '?' | '<' | '>' | '(' | ')') {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn p(s: &str) -> VaultPath {
        VaultPath::parse(s).unwrap()
    }

    #[test]
    fn relative_paths() {
        assert_eq!(relative(&p("a/x.md"), &p("a/y.md")), "y.md");
        assert_eq!(relative(&p("a/x.md"), &p("b/y.md")), "../b/y.md");
        assert_eq!(relative(&p("x.md"), &p("b/c/y.md")), "b/c/y.md");
        assert_eq!(relative(&p("a/b/x.md"), &p("y.md")), "../../y.md");
        assert_eq!(relative(&p("a/b/x.md"), &p("a/y.md")), "../y.md");
        // A folder named like the target file.
        assert_eq!(relative(&p("y.md/x.md"), &p("y.md")), "../y.md");
    }

    #[test]
    fn destination_encoding() {
        assert_eq!(encode_destination("my note.md"), "my%20note.md");
        assert_eq!(encode_destination("100%.md"), "100%25.md");
        assert_eq!(encode_destination("a(1)#?.md"), "a%281%29%23%3F.md");
        assert_eq!(encode_destination("注意 力.md"), "注意%20力.md");
        assert_eq!(encode_destination("a\u{3000}b.md"), "a%E3%80%80b.md");
    }

    #[test]
    fn scanned_file_parts_are_what_a_move_replaces() {
        let text = "[[A]] [[ B |l]] ![[C#h]] [[D\\|e]] [[#self]] [x](a%20b.md#f) [y](<c d.md> \"t\") [z](http://e.md) `[[code]]` [[a [[inner]]";
        let files: Vec<&str> = links::scan_text(text)
            .iter()
            .map(|l| &text[l.file.clone()])
            .collect();
        assert_eq!(files, ["A", "B", "C", "D", "a%20b.md", "c d.md", "inner"]);
    }
}
