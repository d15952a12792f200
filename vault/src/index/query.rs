//! The read tools answered from an index snapshot, with the semantics of the per-call scan in
//! `reader.rs` (docs/contract.md#the-mcp-surface): the index narrows, the same `search`, `note` and `links` functions decide.

use std::collections::{HashMap, HashSet};
use std::time::SystemTime;

use policy::{FolderPath, NoteClass, VaultPath};
use serde_json::Map;

use crate::data;
use crate::fs::{EntryKind, VaultFs};
use crate::index::IndexError;
use crate::index::db::{Catalog, Entry, Snapshot};
use crate::index::grams::match_query;
use crate::index::record::{from_nanos, name_key, nanos};
use crate::links::{Link, Resolution};
use crate::note::{Note, stem};
use crate::reader::{cap_standards, knowledge_page, knowledge_top, recent_is_after, rfc3339, to_u32};
use crate::search::{Ranked, Ranker, Step, knowledge_score, snippet};
use crate::types::{
    ContentHit, ContentHits, Counts, Key, ListStandards, ListTags, MAX_LIST_ITEMS, NoteRef, RecentNote,
    RecentNotes, RecentPos, Related, SearchPage, SearchPos, StandardItem, TagCount,
};

/// A `Note` with the fields the index keeps (frontmatter and dates are not needed by any caller).
fn stored_note(
    title: String,
    aliases: Vec<String>,
    description: Option<String>,
    tags: Vec<String>,
    links: Vec<Link>,
) -> Note {
    Note {
        title,
        frontmatter: Map::new(),
        frontmatter_error: None,
        aliases,
        description,
        tags,
        created: None,
        updated: None,
        links,
    }
}

/// `search::fold` of `s` into `out` (cleared first), faster: ASCII, and the CJK and Hangul blocks
/// (which have no case), skip the case tables. The result is the same character for character
/// (see the test that checks every character).
fn fold_into(s: &str, out: &mut String) {
    out.clear();
    let mut rest = s;
    while !rest.is_empty() {
        // The ASCII run first, a byte at a time; then one other character.
        let run = rest.bytes().position(|b| !b.is_ascii()).unwrap_or(rest.len());
        let start = out.len();
        out.push_str(&rest[..run]);
        out[start..].make_ascii_lowercase();
        rest = &rest[run..];
        let mut chars = rest.chars();
        if let Some(c) = chars.next() {
            if caseless(c) {
                out.push(c);
            } else {
                out.extend(c.to_lowercase());
            }
            rest = chars.as_str();
        }
    }
}

/// Characters of blocks without case: CJK symbols, kana, CJK ideographs, Hangul syllables.
fn caseless(c: char) -> bool {
    matches!(u32::from(c), 0x3000..=0x9FFF | 0xAC00..=0xD7A3 | 0xF900..=0xFAFF)
}

/// The exact step of one note: its hit lines `(score, 1-based line, text)` in line order when
/// every term occurs in some line, exactly as the scan computes them with `search::terms_in_line`
/// (the whole text is folded once: folding keeps every line break where it is, as no character
/// folds to or from one, so line k of the folded text is the fold of line k).
struct Matcher<'t> {
    terms: &'t [String],
    folded: String,
}

impl<'t> Matcher<'t> {
    fn new(terms: &'t [String]) -> Matcher<'t> {
        Matcher {
            terms,
            folded: String::new(),
        }
    }

    fn hit_lines<'b>(&mut self, body: &'b str) -> Option<Vec<(usize, usize, &'b str)>> {
        fold_into(body, &mut self.folded);
        // A term missing from the whole text is missing from every line.
        if !self.terms.iter().all(|t| self.folded.contains(t.as_str())) {
            return None;
        }
        let mut seen = vec![false; self.terms.len()];
        let mut out = Vec::new();
        // Lines as people and diffs count them: a lone CR ends one too (policy::text::lines).
        for (n, (line, folded)) in policy::text::lines(body)
            .zip(policy::text::lines(&self.folded))
            .enumerate()
        {
            let mut score = 0;
            for (s, t) in seen.iter_mut().zip(self.terms) {
                if folded.contains(t.as_str()) {
                    *s = true;
                    score += 1;
                }
            }
            if score > 0 {
                out.push((score, n + 1, line));
            }
        }
        seen.iter().all(|s| *s).then_some(out)
    }
}

/// The candidates of a gram query, as catalog positions in path order: those whose ids are in
/// path order stream from the full-text index in id order (so a search that has its answer
/// stops reading); the few added since are fetched whole and sorted.
struct Candidates<'s> {
    ordered: rusqlite::Rows<'s>,
    cat: &'s Catalog,
    next_ordered: Option<usize>,
    late: std::iter::Peekable<std::vec::IntoIter<usize>>,
}

impl Candidates<'_> {
    fn pull_ordered(&mut self) -> Result<Option<usize>, IndexError> {
        while let Some(r) = self.ordered.next()? {
            if let Some(p) = self.cat.position(r.get(0)?) {
                return Ok(Some(p));
            }
        }
        Ok(None)
    }

    fn next(&mut self) -> Result<Option<usize>, IndexError> {
        if self.next_ordered.is_none() {
            self.next_ordered = self.pull_ordered()?;
        }
        match (self.next_ordered, self.late.peek()) {
            (Some(o), Some(&l)) if l < o => Ok(self.late.next()),
            (Some(o), _) => {
                self.next_ordered = None;
                Ok(Some(o))
            }
            (None, _) => Ok(self.late.next()),
        }
    }
}

/// The catalog positions under `prefix`, in path order.
fn prefix_range(cat: &Catalog, prefix: &FolderPath) -> std::ops::Range<usize> {
    match prefix {
        FolderPath::Root => 0..cat.entries.len(),
        FolderPath::Dir(d) => {
            let d = d.as_str();
            let lo = cat.partition_point(|e| e.path.as_str() < d);
            let len = cat
                .entries
                .focus()
                .narrow(lo..)
                .into_iter()
                .take_while(|e| e.path.as_str().starts_with(d))
                .count();
            lo..lo + len
        }
    }
}

fn title_or_stem(snap: &Snapshot<'_>, e: &Entry) -> Result<String, IndexError> {
    let stored = if e.readable { snap.title(e.id)? } else { None };
    Ok(stored.unwrap_or_else(|| stem(e.path.file_name()).to_owned()))
}

/// Whether the file still has the size and time it was indexed with.
fn unchanged(fs: &VaultFs, e: &Entry) -> bool {
    fs.metadata(&e.path)
        .is_ok_and(|m| m.kind == EntryKind::File && m.size == e.size && nanos(m.modified) == e.mtime)
}

/// How one pass of the exact step treats each note's text.
struct Texts {
    /// Notes found changed since they were indexed: their current text (`None`: unreadable now).
    fresh: HashMap<usize, Option<String>>,
    /// Check every candidate's size and time before using its indexed text.
    verify_all: bool,
}

/// One hit line before its snippet is cut: the note's catalog position and the line's text.
type Line = (usize, String);

/// `search_note_content` (see `Vault::search_content`): candidates in path order, the exact
/// substring AND on each note's text (the same per-line test as `search::terms_in_line`),
/// stopping once the answer cannot change.
///
/// Notes are judged on their indexed text, which the watcher keeps within a second of the files;
/// every note that an answer returns is then checked against the file's size and time, and if it
/// changed, the search runs again on its current text (read through `VaultFs`), so no returned
/// hit is ever stale.
#[allow(clippy::too_many_arguments)]
pub fn search_content(
    fs: &VaultFs,
    snap: &Snapshot<'_>,
    terms: &[String],
    limit: usize,
    prefix: &FolderPath,
    tags: &[String],
    page: &SearchPage,
    stale: &mut Vec<VaultPath>,
) -> Result<(ContentHits, Option<SearchPos>), IndexError> {
    let query = match_query(terms.iter().map(String::as_str));
    let mut texts = Texts {
        fresh: HashMap::new(),
        verify_all: false,
    };
    let mut verified: HashSet<usize> = HashSet::new();
    for attempt in 0..4 {
        texts.verify_all = attempt == 3;
        let (ranker, titles) = exact_pass(
            fs,
            snap,
            terms,
            limit,
            prefix,
            tags,
            page,
            query.as_deref(),
            &mut texts,
            stale,
        )?;
        let (hits, truncated, next): (Vec<Ranked<Line>>, bool, Option<SearchPos>) = ranker.finish();
        let mut moved = false;
        if !texts.verify_all {
            for h in &hits {
                let pos = h.item.0;
                if texts.fresh.contains_key(&pos) || !verified.insert(pos) {
                    continue;
                }
                let e = &snap.catalog.entries[pos];
                if !unchanged(fs, e) {
                    moved = true;
                    stale.push(e.path.clone());
                    texts
                        .fresh
                        .insert(pos, fs.read_text(&e.path).ok().map(|f| f.text));
                }
            }
        }
        if moved {
            continue;
        }
        let hits = hits
            .into_iter()
            .map(|h| ContentHit {
                snippet: snippet(&h.item.1, terms),
                title: titles.get(&h.item.0).cloned().unwrap_or_default(),
                path: h.path,
                line: h.line as usize,
                score: h.score as usize,
            })
            .collect();
        return Ok((
            ContentHits {
                hits,
                truncated,
                next_cursor: None,
            },
            next,
        ));
    }
    // Unreachable: the last attempt checks every note as it goes and never asks for another.
    Err(IndexError::Io(std::io::Error::other("search did not settle")))
}

/// One pass of the exact step: the ranker holding, per score, the first `limit` hit lines in
/// (path, line) order, and the titles of their notes.
#[allow(clippy::too_many_arguments)]
fn exact_pass(
    fs: &VaultFs,
    snap: &Snapshot<'_>,
    terms: &[String],
    limit: usize,
    prefix: &FolderPath,
    tags: &[String],
    page: &SearchPage,
    query: Option<&str>,
    texts: &mut Texts,
    stale: &mut Vec<VaultPath>,
) -> Result<(Ranker<Line>, HashMap<usize, String>), IndexError> {
    let cat = &snap.catalog;
    let range = prefix_range(cat, prefix);
    let mut ranker: Ranker<Line> = Ranker::new(page, limit, to_u32(terms.len()));
    let mut titles: HashMap<usize, String> = HashMap::new();
    let mut matcher = Matcher::new(terms);

    let mut stmt;
    let mut cands = match query {
        None => None,
        Some(q) => {
            let late_ids = snap.body_matching_after(q, cat.ordered_upto)?;
            let mut late: Vec<usize> = late_ids.into_iter().filter_map(|id| cat.position(id)).collect();
            late.sort_unstable();
            stmt = snap.conn().prepare_cached(
                "SELECT rowid FROM body_grams WHERE body_grams MATCH ?1 AND rowid <= ?2 ORDER BY rowid",
            )?;
            let rows = stmt.query(rusqlite::params![q, cat.ordered_upto])?;
            Some(Candidates {
                ordered: rows,
                cat,
                next_ordered: None,
                late: late.into_iter().peekable(),
            })
        }
    };
    let mut all = range.clone();
    loop {
        let i = match cands.as_mut() {
            Some(c) => match c.next()? {
                Some(i) => i,
                None => break,
            },
            None => match all.next() {
                Some(i) => i,
                None => break,
            },
        };
        if !range.contains(&i) {
            if i >= range.end {
                break;
            }
            continue;
        }
        let e = &cat.entries[i];
        if !prefix.contains(&e.path) {
            continue;
        }
        match ranker.before_note(e.path.as_str()) {
            Step::Skip => continue,
            Step::Stop => break,
            Step::Examine => {}
        }
        if !texts.fresh.contains_key(&i) && texts.verify_all && !unchanged(fs, e) {
            stale.push(e.path.clone());
            texts.fresh.insert(i, fs.read_text(&e.path).ok().map(|f| f.text));
        }
        let indexed;
        let (body, fresh) = match texts.fresh.get(&i) {
            Some(Some(t)) => (t.as_str(), true),
            Some(None) => continue,
            None => {
                if !e.readable {
                    continue;
                }
                let Some(b) = snap.body(e.id)? else { continue };
                indexed = b;
                (indexed.as_str(), false)
            }
        };
        let Some(lines) = matcher.hit_lines(body) else {
            continue;
        };

        let (carries, title) = if fresh {
            let note = Note::parse(body, stem(e.path.file_name()));
            (tags.iter().all(|t| note.has_tag(t)), note.title)
        } else {
            let carries = tags.is_empty() || {
                let note = stored_note(String::new(), Vec::new(), None, snap.tags(e.id)?, Vec::new());
                tags.iter().all(|t| note.has_tag(t))
            };
            (carries, title_or_stem(snap, e)?)
        };
        if !carries {
            continue;
        }
        titles.insert(i, title);
        for (score, line, text) in lines {
            ranker.offer(to_u32(score), e.path.as_str(), to_u32(line), || {
                (i, text.to_owned())
            });
        }
        // Later notes come after in path order: once the top score holds `limit` hits and more
        // exist, nothing can change the answer.
        if ranker.after_note() {
            break;
        }
    }
    Ok((ranker, titles))
}

/// `search_knowledge` (see `Vault::search_knowledge`) over the indexed metadata, one page.
pub fn search_knowledge(
    snap: &Snapshot<'_>,
    terms: &[String],
    tags: &[String],
    limit: usize,
    page: &SearchPage,
) -> Result<(crate::types::KnowledgeHits, Option<SearchPos>), IndexError> {
    let cat = &snap.catalog;
    // A tag term matches without its `#`; every field hit contains that shorter string too.
    let narrowing = terms.iter().map(|t| {
        let bare = t.trim_start_matches('#');
        if bare.is_empty() { t.as_str() } else { bare }
    });
    let query = match_query(narrowing);
    // The ranker takes notes in path order.
    let mut candidates: Vec<(usize, _, Vec<String>)> = snap
        .metadata_matching(query.as_deref())?
        .into_iter()
        .filter_map(|(id, m, note_tags)| Some((cat.position(id)?, m, note_tags)))
        .collect();
    candidates.sort_unstable_by_key(|(pos, _, _)| *pos);
    let mut ranker = Ranker::new(page, limit, knowledge_top(terms));
    for (pos, m, note_tags) in candidates {
        let e = &cat.entries[pos];
        match ranker.before_note(e.path.as_str()) {
            Step::Skip => continue,
            Step::Stop => break,
            Step::Examine => {}
        }
        let note = stored_note(m.title, m.aliases, m.description, note_tags, Vec::new());
        if !e.readable || !tags.iter().all(|t| note.has_tag(t)) {
            continue;
        }
        let Some((matched, score)) = knowledge_score(&note, terms) else {
            continue;
        };
        ranker.offer(score, e.path.as_str(), 0, || (matched, note.title));
        if ranker.after_note() {
            break;
        }
    }
    Ok(knowledge_page(ranker))
}

/// `list_tags`: most used first, then by folded name; each tag as first spelled by path order.
pub fn list_tags(snap: &Snapshot<'_>) -> Result<ListTags, IndexError> {
    let mut tags = snap.tag_counts()?;
    tags.sort_by(|(fa, _, ca), (fb, _, cb)| cb.cmp(ca).then_with(|| fa.cmp(fb)));
    Ok(ListTags {
        tags: tags
            .into_iter()
            .map(|(_, name, count)| TagCount { name, count })
            .collect(),
        truncated: false,
        next_cursor: None,
    })
}

/// `list_standards`: every standards note by path.
pub fn list_standards(snap: &Snapshot<'_>) -> Result<ListStandards, IndexError> {
    let mut standards = Vec::new();
    for e in snap
        .catalog
        .entries
        .iter()
        .filter(|e| e.class == NoteClass::Standard)
    {
        let stored = if e.readable { snap.meta(e.id)? } else { None };
        let (title, description) = match stored {
            Some(m) => (m.title, m.description.unwrap_or_default()),
            None => (stem(e.path.file_name()).to_owned(), String::new()),
        };
        standards.push(StandardItem {
            path: e.path.to_string(),
            title,
            description,
        });
    }
    Ok(cap_standards(standards))
}

/// `get_related_notes` of `path`, whose current parse is `this`.
pub fn related(snap: &Snapshot<'_>, path: &VaultPath, this: &Note) -> Result<Related, IndexError> {
    let cat = &snap.catalog;
    let resolver = cat.resolver();
    let (outlinks, broken_links) = crate::links::links_out(resolver, path, &this.links);
    let outlinks = outlinks
        .into_iter()
        .map(|p| {
            let title = match cat.find(&p) {
                Some(e) => title_or_stem(snap, e)?,
                None => stem(p.file_name()).to_owned(),
            };
            Ok(NoteRef {
                path: p.to_string(),
                title,
            })
        })
        .collect::<Result<Vec<_>, IndexError>>()?;

    // Only notes with a link whose key is this note's name can link here; the resolver decides.
    let mut sources: Vec<usize> = snap
        .linking(&name_key(path))?
        .into_iter()
        .filter_map(|id| cat.position(id))
        .collect();
    sources.sort_unstable();
    let mut backlinks = Vec::new();
    let mut mocs = Vec::new();
    for i in sources {
        let e = &cat.entries[i];
        if e.path == *path || !e.readable {
            continue;
        }
        let links = snap.links(e.id)?;
        let here = Resolution::Note(path.clone());
        if !links.iter().any(|l| resolver.resolve(&e.path, l) == here) {
            continue;
        }
        let note = stored_note(
            title_or_stem(snap, e)?,
            Vec::new(),
            None,
            snap.tags(e.id)?,
            Vec::new(),
        );
        let item = NoteRef {
            path: e.path.to_string(),
            title: note.title.clone(),
        };
        if crate::note::is_moc(&note, &e.path) {
            mocs.push(item.clone());
        }
        backlinks.push(item);
    }
    Ok(Related::capped(
        outlinks,
        backlinks,
        broken_links,
        mocs,
        MAX_LIST_ITEMS,
    ))
}

/// `list_recent_notes`: newest first, then by path.
pub fn recent(
    snap: &Snapshot<'_>,
    limit: usize,
    since: Option<SystemTime>,
    after: Option<&RecentPos>,
) -> Result<(RecentNotes, Option<RecentPos>), IndexError> {
    let cat = &snap.catalog;
    let since = since.map(nanos);
    let mut picked: Vec<&Entry> = cat
        .entries
        .iter()
        .filter(|e| since.is_none_or(|s| e.mtime >= s))
        .filter(|e| after.is_none_or(|p| recent_is_after(p, e.mtime, e.path.as_str())))
        .collect();
    // Stable: equal times stay in path order.
    picked.sort_by_key(|e| std::cmp::Reverse(e.mtime));
    let truncated = picked.len() > limit;
    picked.truncate(limit);
    let next = match picked.last() {
        Some(e) if truncated => Some(RecentPos {
            mtime: e.mtime,
            path: Key::exact(e.path.as_str()),
        }),
        _ => None,
    };
    let notes = picked
        .into_iter()
        .map(|e| {
            Ok(RecentNote {
                path: e.path.to_string(),
                title: title_or_stem(snap, e)?,
                modified: rfc3339(from_nanos(e.mtime)),
            })
        })
        .collect::<Result<Vec<_>, IndexError>>()?;
    Ok((
        RecentNotes {
            notes,
            truncated,
            next_cursor: None,
        },
        next,
    ))
}

/// `query_notes` over the catalog's readable notes (their typed data is in the catalog: no
/// file and no row is read but the answered rows' frontmatter).
pub fn query_notes(
    snap: &Snapshot<'_>,
    q: &data::Query,
    after: Option<&data::QueryPos>,
    max_bytes: usize,
) -> Result<(data::QueryNotes, Option<data::QueryPos>), IndexError> {
    let cat = &snap.catalog;
    let range = prefix_range(cat, &q.prefix);
    let start = range.start;
    // Sized once for the whole range: grown by doubling, the row list of a 100,000-note vault
    // held its old and new buffers at once (10 MB where 4 do).
    let mut ids = Vec::with_capacity(range.len());
    let mut rows: Vec<data::Row<'_>> = Vec::with_capacity(range.len());
    for (j, e) in cat.entries.focus().narrow(range).into_iter().enumerate() {
        let Some(d) = e.data.as_ref() else { continue };
        ids.push(e.id);
        rows.push(data::Row {
            at: start + j,
            path: &e.path,
            mtime: e.mtime,
            size: e.size,
            data: d,
        });
    }
    // By catalog position, so `Row::at` indexes them.
    let held: Vec<(&str, std::sync::Arc<Vec<data::KeyCell>>)> = data::column_keys(q)
        .into_iter()
        .map(|k| (k, cat.column(k)))
        .collect();
    let cols = data::Columns {
        keys: held.iter().map(|(k, c)| (*k, c.as_slice())).collect(),
    };
    data::page(q, &rows, &cols, after, max_bytes, &mut |i| {
        snap.frontmatter(ids[i])
    })
}

/// Catalog counts for the overview.
pub fn counts(snap: &Snapshot<'_>) -> Result<Counts, IndexError> {
    let cat = &snap.catalog;
    Ok(Counts {
        notes: cat.count(NoteClass::Note),
        standards: cat.count(NoteClass::Standard),
        tags: snap.distinct_tags()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::{fold, terms_in_line};

    #[test]
    fn fold_into_is_search_fold_for_every_character() {
        let mut buf = String::new();
        for c in (0..=0x10FFFF).filter_map(char::from_u32) {
            let s = format!("a{c}");
            fold_into(&s, &mut buf);
            assert_eq!(buf, fold(&s), "{:X}", u32::from(c));
        }
    }

    /// The scan's per-note computation (reader.rs), for comparison.
    fn scan_lines<'b>(body: &'b str, terms: &[String]) -> Option<Vec<(usize, usize, &'b str)>> {
        let mut seen = vec![false; terms.len()];
        let mut out = Vec::new();
        for (n, line) in policy::text::lines(body).enumerate() {
            let mask = terms_in_line(line, terms);
            let score = mask.iter().filter(|m| **m).count();
            if score > 0 {
                seen.iter_mut().zip(&mask).for_each(|(s, m)| *s |= *m);
                out.push((score, n + 1, line));
            }
        }
        seen.iter().all(|s| *s).then_some(out)
    }

    #[test]
    fn the_whole_text_matcher_finds_the_lines_the_scan_finds() {
        let bodies = [
            "Alpha beta\nbeta\r\n\nALPHA alpha\rbeta\nlast line alpha",
            "aaa\naa\na\n",
            "ΟΔΟΣ σ\nİstanbul i̇\r\n注意力\n\n注意",
            "",
            "\n\n\n",
            "no newline at the end beta",
        ];
        let queries: &[&[&str]] = &[
            &["alpha"],
            &["alpha", "beta"],
            &["aa"],
            &["a", "aa", "aaa"],
            &["σ", "i̇", "注意"],
            &["line", "beta"],
            &["a\nb"],
            &["beta\r"],
            &["missing"],
        ];
        for body in bodies {
            for q in queries {
                let terms: Vec<String> = q.iter().map(|t| fold(t)).collect();
                let mut m = Matcher::new(&terms);
                assert_eq!(m.hit_lines(body), scan_lines(body, &terms), "{body:?} {terms:?}");
            }
        }
    }
}
