//! The read tools answered from an index snapshot, with the semantics of the per-call scan in
//! `reader.rs` (docs/contract.md#the-mcp-surface): the index narrows, the same `search`, `note` and `links` functions decide.

use std::collections::{HashMap, HashSet};
use std::time::SystemTime;

use policy::{FolderPath, NoteClass, VaultPath};
use serde_json::Map;

use crate::data;
use crate::fs::{EntryKind, VaultFs};
use crate::index::IndexError;
use crate::index::db::{Catalog, Entry, Grams, Snapshot};
use crate::index::grams::{LEVELS, NARROWING_GRAMS, all_of, match_query, term_query_tokens};
use crate::index::record::{from_nanos, name_key, nanos};
use crate::links::{Link, Resolution};
use crate::note::{Note, NoteHeader, stem};
use crate::rank::{Fields, Match, NoteRanker, RankedHit, Weights, hit_lines, judge};
use crate::reader::{cap_standards, knowledge_page, knowledge_top, recent_is_after, rfc3339};
use crate::search::{Ranker, Step, fold_into, knowledge_score, snippet};
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

/// The arguments of `search_content`, checked.
#[derive(Debug, Clone)]
pub struct ContentArgs {
    /// Folded and distinct.
    pub terms: Vec<String>,
    pub mode: Match,
    pub per_note: usize,
    pub limit: usize,
    pub prefix: FolderPath,
    pub tags: Vec<String>,
    pub page: SearchPage,
}

/// What a search asks the index once: each term's query grams, and the weights.
struct Plan {
    /// Per term: its `grams::NARROWING_GRAMS` rarest counted tokens (empty: the term cannot narrow).
    tokens: Vec<Vec<String>>,
    /// Per term: the notes holding its rarest gram.
    df: Vec<u64>,
    weights: Weights,
    /// The least size of a readable note (bounds the notes not yet named).
    least: u64,
    /// Per term: whether a note not among the head candidates may still hold it in a title,
    /// alias or heading (a term too short to narrow: the index cannot tell).
    open_fields: Vec<bool>,
}

impl Plan {
    fn new(snap: &Snapshot<'_>, terms: &[String]) -> Result<Plan, IndexError> {
        let cat = &snap.catalog;
        let &(notes, bytes, least) = cat.sizes.get_or_init(|| {
            let (mut n, mut total, mut least) = (0u64, 0u64, u64::MAX);
            for e in cat.entries.iter().filter(|e| e.readable) {
                n += 1;
                total += e.size;
                least = least.min(e.size);
            }
            (n, total, if n == 0 { 0 } else { least })
        });
        // Per term: its counted tokens with the notes holding each, rarest first.
        let mut tokens: Vec<Vec<String>> = Vec::with_capacity(terms.len());
        let mut df: Vec<u64> = Vec::with_capacity(terms.len());
        for t in terms {
            let mut counted: Vec<(u64, usize, String)> = Vec::new();
            for (k, g) in term_query_tokens(t).into_iter().enumerate() {
                counted.push((gram_count(snap, &g)?, k, g));
            }
            counted.sort_unstable();
            df.push(counted.first().map_or(notes, |c| c.0));
            tokens.push(counted.into_iter().take(NARROWING_GRAMS).map(|c| c.2).collect());
        }
        Ok(Plan {
            weights: Weights::new(notes, bytes, &df),
            df: df.clone(),
            open_fields: tokens.iter().map(Vec::is_empty).collect(),
            tokens,
            least,
        })
    }

    fn all_narrow(&self) -> bool {
        self.tokens.iter().all(|t| !t.is_empty())
    }

    /// At most how many notes may match, from the gram counts: the rarest term's (`all`), the
    /// sum of the terms' (`any`).
    fn candidates_at_most(&self, mode: Match) -> u64 {
        match mode {
            Match::All => self.df.iter().copied().min().unwrap_or(0),
            Match::Any => self.df.iter().sum(),
        }
    }

    fn narrows(&self, i: usize) -> bool {
        !self.tokens[i].is_empty()
    }

    /// The body query of the notes that may match: holding every narrowing term (`all`) or
    /// one (`any`); `None` when no term narrows. A superset: the exact step decides.
    fn base_query(&self, mode: Match) -> Option<String> {
        let narrowing = self.tokens.iter().filter(|t| !t.is_empty()).count();
        // Every note must hold each term: the terms narrow one another, so each term's rarest
        // gram is enough, and each list not read saves more than the few notes it would remove.
        let per = if mode == Match::All && narrowing > 1 {
            1
        } else {
            usize::MAX
        };
        let each: Vec<String> = self
            .tokens
            .iter()
            .filter(|t| !t.is_empty())
            .map(|t| format!("({})", all_of(&t[..t.len().min(per)], 1)))
            .collect();
        if each.is_empty() {
            return None;
        }
        Some(match mode {
            Match::All => each.join(" AND "),
            Match::Any => each.join(" OR "),
        })
    }

    /// The bound of a note of `len` bytes whose term i occurs at most `most[i]` times (`None`:
    /// unknown), the narrowing terms in none of its title, aliases and headings.
    fn bound(&self, most: &[Option<u32>], len: u64) -> u32 {
        self.weights.bound(most, &self.open_fields, len)
    }
}

/// Gram counts a generation remembers.
const MAX_KNOWN_DF: usize = 4096;

/// How many notes hold `gram` in this generation (remembered until the next write).
fn gram_count(snap: &Snapshot<'_>, gram: &str) -> Result<u64, IndexError> {
    let cat = &snap.catalog;
    if let Some(&d) = lock(&cat.df).get(gram) {
        return Ok(d);
    }
    let d = snap.token_count(gram)?;
    let mut known = lock(&cat.df);
    // Bounded: a generation lives until the next write, its queries may not.
    if known.len() >= MAX_KNOWN_DF {
        known.clear();
    }
    known.insert(gram.to_owned(), d);
    Ok(d)
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `search_note_content` (see `Vault::search_content`): the matching notes ranked
/// (`rank`), each judged exactly on its text; the index names the notes to examine and bounds
/// the ones it does not name, so a search stops once no other note can enter the page.
///
/// Notes are judged on their indexed text, which the watcher keeps within a second of the files;
/// every note that an answer returns is then checked against the file's size and time, and if it
/// changed, the search runs again on its current text (read through `VaultFs`), so no returned
/// hit is ever stale.
pub fn search_content(
    fs: &VaultFs,
    snap: &Snapshot<'_>,
    a: &ContentArgs,
    stale: &mut Vec<VaultPath>,
) -> Result<(ContentHits, Option<SearchPos>), IndexError> {
    let plan = Plan::new(snap, &a.terms)?;
    let mut texts = Texts {
        fresh: HashMap::new(),
        verify_all: false,
    };
    let mut verified: HashSet<usize> = HashSet::new();
    for attempt in 0..4 {
        texts.verify_all = attempt == 3;
        let ranker = ranked_pass(fs, snap, a, &plan, &mut texts, stale)?;
        let (hits, truncated, next): (Vec<RankedHit<Line>>, bool, Option<SearchPos>) = ranker.finish();
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
        let mut titles: HashMap<usize, String> = HashMap::new();
        let mut out = Vec::with_capacity(hits.len());
        for h in hits {
            let pos = h.item.0;
            if let std::collections::hash_map::Entry::Vacant(v) = titles.entry(pos) {
                let e = &snap.catalog.entries[pos];
                v.insert(match texts.fresh.get(&pos) {
                    Some(Some(t)) => NoteHeader::parse(t, stem(e.path.file_name())).title,
                    _ => title_or_stem(snap, e)?,
                });
            }
            out.push(ContentHit {
                snippet: snippet(&h.item.1, &a.terms),
                title: titles.get(&pos).cloned().unwrap_or_default(),
                path: h.path,
                line: h.line as usize,
                score: h.score as usize,
            });
        }
        let hits = out;
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

/// One pass: the notes whose title, aliases or headings may hold a term first (the bounds leave
/// those bonuses out); then the other candidates, best bound first, until no note left can enter
/// the page. A candidate's bound comes from the level tokens (`grams::LEVELS`): a note the index
/// does not name at level c for a term holds that term fewer than c times.
fn ranked_pass(
    fs: &VaultFs,
    snap: &Snapshot<'_>,
    a: &ContentArgs,
    plan: &Plan,
    texts: &mut Texts,
    stale: &mut Vec<VaultPath>,
) -> Result<NoteRanker<Line>, IndexError> {
    let cat = &snap.catalog;
    let range = prefix_range(cat, &a.prefix);
    let mut ex = Examiner {
        fs,
        snap,
        a,
        plan,
        texts,
        stale,
        ranker: NoteRanker::new(&a.page, a.limit),
        examined: HashSet::new(),
        folded: String::new(),
    };
    let positions = |ids: Vec<i64>| -> Vec<usize> {
        let mut p: Vec<usize> = ids
            .into_iter()
            .filter_map(|id| cat.position(id))
            .filter(|p| range.contains(p))
            .collect();
        p.sort_unstable();
        p
    };

    // When no note can score above 0 (terms in nearly every note, or too short to narrow, in a
    // large vault: their weight rounds away), the ranking is path order: notes are examined in it,
    // and the search stops once a note can no longer enter. Likewise when no term narrows.
    let unknown = vec![None; plan.tokens.len()];
    let any_field = vec![true; plan.tokens.len()];
    let flat = plan.weights.bound(&unknown, &any_field, plan.least) == 0;
    let Some(base) = plan.base_query(a.mode).filter(|_| !flat) else {
        for i in range.clone() {
            let e = &cat.entries[i];
            // Field bonuses included: these notes were not sorted by the head stage.
            let bound = plan.weights.bound(&unknown, &any_field, e.size);
            if ex.ranker.cannot_enter(bound, e.path.as_str()) {
                ex.ranker.more_exist();
                // In path order the rest bound no higher once the bound is flat.
                if flat {
                    break;
                }
                continue;
            }
            if !ex.examine(i, true)? {
                break;
            }
        }
        return Ok(ex.ranker);
    };
    let heads: Vec<String> = plan
        .tokens
        .iter()
        .filter(|t| !t.is_empty())
        .map(|t| format!("({})", all_of(t, 1)))
        .collect();
    for i in positions(snap.grams_matching(Grams::Head, &heads.join(" OR "))?) {
        if !ex.examine(i, true)? {
            return Ok(ex.ranker);
        }
    }
    // Many candidates, one term or `any`: first the notes holding a common term at least twice
    // and every note holding a rare one (lists far shorter than all the notes holding the
    // terms); every other note holds each common term at most once and no rare one, and the
    // candidates are named only if one of those could still enter the page. (`all` of several
    // terms reads its one candidate list: the terms narrow one another.)
    let top_down = plan.all_narrow()
        && (a.mode == Match::Any || plan.tokens.len() == 1)
        && plan.candidates_at_most(a.mode) > TOP_DOWN_FROM;
    // Sorted (by `positions`).
    let mut seen: Vec<usize> = Vec::new();
    if top_down {
        let n = plan.tokens.len();
        // Per term: whether it is rare (its whole list is read), and the list.
        let lists = plan
            .tokens
            .iter()
            .zip(&plan.df)
            .map(|(t, &df)| {
                let rare = df <= TOP_DOWN_FROM;
                let level = if rare { 1 } else { LEVELS[0] };
                Ok((
                    rare,
                    // A level list by the rarest gram alone: a second gram's list costs more
                    // to intersect than the few notes it would remove cost to bound.
                    positions(snap.grams_matching(
                        Grams::Body,
                        &all_of(&t[..t.len().min(if rare { 2 } else { 1 })], level),
                    )?),
                ))
            })
            .collect::<Result<Vec<(bool, Vec<usize>)>, IndexError>>()?;
        seen = lists.iter().flat_map(|(_, l)| l.iter().copied()).collect();
        seen.sort_unstable();
        seen.dedup();
        let unjudged: Vec<usize> = seen
            .iter()
            .copied()
            .filter(|p| !ex.examined.contains(p))
            .collect();
        // A list that does not name the note: a rare term not at all, a common one at most once.
        let absent = |rare: bool| Some(if rare { 0 } else { LEVELS[0] - 1 });
        let mut most = Vec::with_capacity(unjudged.len() * n);
        for p in &unjudged {
            most.extend(
                lists
                    .iter()
                    .map(|(rare, l)| l.binary_search(p).map_or(absent(*rare), |_| None)),
            );
        }
        if !judge_by_bound(&mut ex, unjudged, 1, most)? {
            return Ok(ex.ranker);
        }
        let rest: Vec<Option<u32>> = lists.iter().map(|(rare, _)| absent(*rare)).collect();
        if ex
            .ranker
            .threshold()
            .is_some_and(|t| plan.bound(&rest, plan.least) < t)
        {
            ex.ranker.more_exist();
            return Ok(ex.ranker);
        }
    }
    // `all`: one list (every note holds every term). `any`: each term's own list, so a note's
    // bound counts only the terms it may hold (a rare term's weight must not lift every note).
    let held: Vec<Vec<usize>> = match a.mode {
        Match::All => Vec::new(),
        Match::Any => plan
            .tokens
            .iter()
            .map(|t| Ok(positions(snap.grams_matching(Grams::Body, &all_of(t, 1))?)))
            .collect::<Result<_, IndexError>>()?,
    };
    let mut cands: Vec<usize> = match a.mode {
        Match::All => positions(snap.grams_matching(Grams::Body, &base)?),
        Match::Any => {
            let mut c = held.concat();
            c.sort_unstable();
            c.dedup();
            c
        }
    };
    // The notes named above are judged or bounded out already (their bound was below the
    // page's, which only rises), and the bound below is not theirs.
    cands.retain(|p| !ex.examined.contains(p) && seen.binary_search(p).is_err());
    if cands.len() <= EXAMINE_ALL {
        // Fewer than the level lists would cost to read: each is judged.
        for i in cands {
            if !ex.examine(i, !plan.all_narrow())? {
                return Ok(ex.ranker);
            }
        }
        return any_rest(&mut ex, a, plan, range).map(|()| ex.ranker);
    }
    // After the notes named above, what is left holds each term at most once.
    let (first, known) = if top_down {
        (LEVELS.len(), Some(LEVELS[0] - 1))
    } else {
        (0, None)
    };
    let mut most = Vec::with_capacity(cands.len() * plan.tokens.len());
    for p in &cands {
        most.extend((0..plan.tokens.len()).map(|i| match held.get(i) {
            Some(l) if l.binary_search(p).is_err() => Some(0),
            _ => known,
        }));
    }
    if !judge_by_bound(&mut ex, cands, first, most)? {
        return Ok(ex.ranker);
    }
    any_rest(&mut ex, a, plan, range)?;
    Ok(ex.ranker)
}

/// Judges `cands` best bound first until none left can enter the page. Candidate k's term i
/// occurs at most `most[k * n + i]` times (`None`: unknown) until the index, asked level by level
/// from `LEVELS[first]` up, says fewer: a candidate it stops naming at a level holds the term
/// fewer times than that level (a known lower count is kept). Ok(false): the budget is spent.
fn judge_by_bound(
    ex: &mut Examiner<'_, '_>,
    cands: Vec<usize>,
    first: usize,
    mut most: Vec<Option<u32>>,
) -> Result<bool, IndexError> {
    let (snap, plan) = (ex.snap, ex.plan);
    let cat = &snap.catalog;
    let n = plan.tokens.len();
    // By note id: the level lists name ids, and one lookup beats two.
    let at: HashMap<i64, usize, crate::index::db::Ids> = cands
        .iter()
        .enumerate()
        .map(|(k, &p)| (cat.entries[p].id, k))
        .collect();
    let mut named = vec![false; cands.len()];
    'terms: for (i, tokens) in plan.tokens.iter().enumerate() {
        if tokens.is_empty() {
            continue;
        }
        let mut alive: Vec<usize> = (0..cands.len()).collect();
        for &level in LEVELS.iter().skip(first) {
            // SECURITY(T-PAGE2): the lists of 32 common terms take long to read; once the budget
            // is spent, the levels not asked stay unknown (the bounds stay true, only looser).
            if ex.ranker.spent() {
                break 'terms;
            }
            named.fill(false);
            // The rarest gram alone (see above): looser by a few notes, cheaper by a list.
            for id in snap.grams_matching(Grams::Body, &all_of(&tokens[..1], level))? {
                if let Some(&k) = at.get(&id) {
                    named[k] = true;
                }
            }
            alive.retain(|&k| {
                if !named[k] {
                    let m = &mut most[k * n + i];
                    *m = Some(m.map_or(level - 1, |m| m.min(level - 1)));
                }
                named[k]
            });
            if alive.is_empty() {
                break;
            }
        }
    }
    // Best bound first, ties by path; a heap, since only the first few are ever taken.
    let mut order: std::collections::BinaryHeap<(u32, std::cmp::Reverse<usize>)> = cands
        .iter()
        .zip(most.chunks(n.max(1)))
        .map(|(&p, m)| (plan.bound(m, cat.entries[p].size), std::cmp::Reverse(p)))
        .collect();
    while let Some((bound, std::cmp::Reverse(i))) = order.pop() {
        // The rest bound lower still, or as low and later by path.
        if ex.ranker.cannot_enter(bound, cat.entries[i].path.as_str()) {
            ex.ranker.more_exist();
            return Ok(true);
        }
        // Not among the notes whose title, aliases or headings may hold a narrowing term (a
        // term too short to narrow may be in them still).
        if !ex.examine(i, !plan.all_narrow())? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Queries that may match more notes than this read the notes holding a term twice first.
#[cfg(not(test))]
const TOP_DOWN_FROM: u64 = 2048;
/// Small in tests, so a vault of a few hundred notes takes both paths.
#[cfg(test)]
const TOP_DOWN_FROM: u64 = 64;

/// Candidates up to this many are all judged, without asking the index for their levels.
const EXAMINE_ALL: usize = 128;

/// `any`: a note holding no narrowing term may still hold a short one.
fn any_rest(
    ex: &mut Examiner<'_, '_>,
    a: &ContentArgs,
    plan: &Plan,
    range: std::ops::Range<usize>,
) -> Result<(), IndexError> {
    if a.mode != Match::Any || plan.all_narrow() {
        return Ok(());
    }
    let none: Vec<Option<u32>> = (0..a.terms.len())
        .map(|i| if plan.narrows(i) { Some(0) } else { None })
        .collect();
    if ex
        .ranker
        .threshold()
        .is_some_and(|t| plan.bound(&none, plan.least) < t)
    {
        ex.ranker.more_exist();
        return Ok(());
    }
    for i in range {
        if !ex.examined.contains(&i) && !ex.examine(i, true)? {
            break;
        }
    }
    Ok(())
}

/// The exact step of one pass.
struct Examiner<'p, 's> {
    fs: &'p VaultFs,
    snap: &'p Snapshot<'s>,
    a: &'p ContentArgs,
    plan: &'p Plan,
    texts: &'p mut Texts,
    stale: &'p mut Vec<VaultPath>,
    ranker: NoteRanker<Line>,
    examined: HashSet<usize>,
    folded: String,
}

impl Examiner<'_, '_> {
    /// Judges the note at catalog position `i` and offers it; false when the budget is spent.
    /// `fields`: whether its title, aliases and headings may hold a term (else the index knows
    /// they do not).
    fn examine(&mut self, i: usize, fields: bool) -> Result<bool, IndexError> {
        let snap = self.snap;
        let e = &snap.catalog.entries[i];
        if !self.a.prefix.contains(&e.path) || !self.examined.insert(i) {
            return Ok(true);
        }
        if self.ranker.before_note() == Step::Stop {
            return Ok(false);
        }
        let texts = &mut *self.texts;
        if !texts.fresh.contains_key(&i) && texts.verify_all && !unchanged(self.fs, e) {
            self.stale.push(e.path.clone());
            texts
                .fresh
                .insert(i, self.fs.read_text(&e.path).ok().map(|f| f.text));
        }
        let indexed;
        let (body, head) = match texts.fresh.get(&i) {
            Some(Some(t)) => {
                let note = Note::parse(t, stem(e.path.file_name()));
                if !self.a.tags.iter().all(|tag| note.has_tag(tag)) {
                    return Ok(true);
                }
                // The text changed since it was indexed: its fields are looked at, whatever the
                // index said of them.
                (t.as_str(), Some((note.title, note.aliases)))
            }
            Some(None) => return Ok(true),
            None => {
                if !e.readable {
                    return Ok(true);
                }
                if !self.a.tags.is_empty() {
                    let note = stored_note(String::new(), Vec::new(), None, snap.tags(e.id)?, Vec::new());
                    if !self.a.tags.iter().all(|t| note.has_tag(t)) {
                        return Ok(true);
                    }
                }
                let Some(b) = snap.body(e.id)? else {
                    return Ok(true);
                };
                indexed = b;
                let head = if fields {
                    Some(match snap.meta(e.id)? {
                        Some(m) => (m.title, m.aliases),
                        None => (stem(e.path.file_name()).to_owned(), Vec::new()),
                    })
                } else {
                    None
                };
                (indexed.as_str(), head)
            }
        };
        fold_into(body, &mut self.folded);
        let fields = match &head {
            Some((title, aliases)) => Fields::Some { title, aliases },
            None => Fields::None,
        };
        let Some(j) = judge(body, &self.folded, &self.a.terms, self.a.mode, &fields) else {
            return Ok(true);
        };
        let score = self.plan.weights.score(&j);
        // Most notes of a common term score below the page: their lines are never looked for.
        if self.ranker.cannot_enter(score, e.path.as_str()) {
            self.ranker.more_exist();
            return Ok(true);
        }
        let hits = hit_lines(body, &self.folded, &self.a.terms, &j, self.a.per_note)
            .into_iter()
            .map(|(_, line, text)| (line, (i, text.to_owned())))
            .collect();
        self.ranker.offer(score, e.path.as_str(), hits);
        Ok(true)
    }
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
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use policy::{FolderPath, Layout, VaultPath};

    use crate::rank::Match;
    use crate::reader::Vault;
    use crate::types::{ContentQuery, SearchPage};

    /// The notes named twice first (`TOP_DOWN_FROM` is 64 here): every page of every mode is the
    /// scan's. (`tests/index_exact.rs` covers the path that names all candidates first.)
    #[test]
    fn reading_the_notes_named_twice_first_ranks_as_the_scan_does() {
        let dir = tempfile::tempdir().unwrap();
        let mut seed = 11u64;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let words = ["lighthouse", "orchard", "lantern", "harbor", "注意力", "x"];
        for i in 0..300 {
            let mut body = String::new();
            if next(10) == 0 {
                body.push_str(&format!("# About the {}\n", words[next(6) as usize]));
            }
            for _ in 0..next(25) {
                let w = words[next(6) as usize];
                let filler = "filler text ".repeat(next(8) as usize);
                body.push_str(&format!("{filler}{w} {}\n", if next(3) == 0 { w } else { "and" }));
            }
            let p = dir.path().join(format!("n/{i:03}.md"));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, format!("---\ntitle: Note {i}\n---\n{body}")).unwrap();
        }
        let layout = Layout::new(
            vec![FolderPath::Root],
            vec![],
            VaultPath::parse("inbox").unwrap(),
            None,
        );
        let scan = Vault::open(dir.path(), layout.clone()).unwrap();
        let ix = Vault::open(dir.path(), layout).unwrap();
        ix.refresh_index(false, &mut |_, _| {}).unwrap();
        assert!(ix.wait_index_ready(Duration::ZERO));
        for q in [
            "lighthouse",
            "lighthouse orchard",
            "harbor 注意力",
            "lantern harbor orchard",
        ] {
            for mode in [Match::All, Match::Any] {
                for limit in [Some(1), Some(7), None] {
                    let cq = ContentQuery {
                        query: q.to_owned(),
                        mode,
                        limit,
                        ..ContentQuery::default()
                    };
                    let (mut from_s, mut from_i) = (SearchPage::default(), SearchPage::default());
                    for _ in 0..8 {
                        let (a, na) = scan.search_content_page(&cq, &from_s).unwrap();
                        let (b, nb) = ix.search_content_page(&cq, &from_i).unwrap();
                        assert_eq!(
                            serde_json::to_string(&a).unwrap(),
                            serde_json::to_string(&b).unwrap(),
                            "{cq:?}"
                        );
                        assert_eq!(na, nb, "{cq:?}");
                        match na {
                            Some(n) => {
                                from_s.from = n.clone();
                                from_i.from = n;
                            }
                            None => break,
                        }
                    }
                }
            }
        }
    }
}
