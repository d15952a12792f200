//! Pure search primitives with the exact semantics of docs/contract.md#the-mcp-surface: query terms, case folding, line
//! matching, snippets, and the metadata score of `search_knowledge`.
//!
//! Matching is case-insensitive *substring* matching (not tokens), so it works for CJK text and for
//! one- or two-character terms.

use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

use crate::note::Note;
use crate::types::{Key, MatchedField, RankPos, SearchPage, SearchPos};

/// A snippet is at most this many characters (Unicode scalar values, not bytes).
pub const SNIPPET_CHARS: usize = 200;

const ELLIPSIS: char = '…';

/// Case folding used on both terms and text: per-character lowercase.
///
/// Per character (not `str::to_lowercase`) so that folding a whole file and folding it line by line
/// agree (`str::to_lowercase` maps a word-final `Σ` by context).
pub fn fold(s: &str) -> String {
    s.chars().flat_map(char::to_lowercase).collect()
}

/// Whether a metadata field (a title, an alias…) holds the folded `term`: the one rule both
/// searches use for a title match.
pub fn in_field(field: &str, term: &str) -> bool {
    fold(field).contains(term)
}

/// `fold` of `s` into `out` (cleared first), faster: ASCII, and the CJK and Hangul blocks (which
/// have no case), skip the case tables. The result is the same character for character (see the
/// test that checks every character).
pub fn fold_into(s: &str, out: &mut String) {
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

/// Splits a query into folded, distinct terms: Unicode whitespace separates terms, and a
/// `"quoted phrase"` (starting a term) is one term. An unclosed quote runs to the end.
pub fn parse_terms(query: &str) -> Vec<String> {
    let mut terms: Vec<String> = Vec::new();
    // Linear, not quadratic, in the number of terms.
    let mut seen: HashSet<String> = HashSet::new();
    for term in terms_of(query) {
        if seen.insert(term.clone()) {
            terms.push(term);
        }
    }
    terms
}

/// The tokenizer of [`parse_terms`], lazily and without removing repeats, so a caller can bound
/// a query (docs/contract.md#limits-and-pagination) while reading it rather than after.
pub fn terms_of(query: &str) -> impl Iterator<Item = String> + '_ {
    let mut chars = query.chars().peekable();
    std::iter::from_fn(move || {
        loop {
            while chars.next_if(|c| c.is_whitespace()).is_some() {}
            let &first = chars.peek()?;
            let mut term = String::new();
            if first == '"' {
                chars.next();
                for c in chars.by_ref() {
                    if c == '"' {
                        break;
                    }
                    term.push(c);
                }
            } else {
                while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                    term.push(c);
                }
            }
            let term = fold(&term);
            if !term.is_empty() {
                return Some(term);
            }
        }
    })
}

/// A line folded for matching, with the way back to the original characters.
struct FoldedLine {
    folded: String,
    /// For each original character, the byte offset in `folded` where its lowercase starts.
    starts: Vec<usize>,
}

impl FoldedLine {
    fn new(line: &str) -> FoldedLine {
        let mut folded = String::with_capacity(line.len());
        let mut starts = Vec::with_capacity(line.len());
        for c in line.chars() {
            starts.push(folded.len());
            folded.extend(c.to_lowercase());
        }
        FoldedLine { folded, starts }
    }

    /// The original character range of the earliest occurrence of any term.
    fn first_match(&self, terms: &[String]) -> Option<(usize, usize)> {
        let (at, len) = terms
            .iter()
            .filter_map(|t| self.folded.find(t.as_str()).map(|at| (at, t.len())))
            .min()?;
        let start = self.starts.partition_point(|&s| s <= at).saturating_sub(1);
        let end = self.starts.partition_point(|&s| s < at + len);
        Some((start, end.max(start + 1)))
    }
}

/// Which of `terms` (already folded) occur in `line`, as a mask.
pub fn terms_in_line(line: &str, terms: &[String]) -> Vec<bool> {
    let folded = fold(line);
    terms.iter().map(|t| folded.contains(t.as_str())).collect()
}

/// The snippet of a hit line: the trimmed line, or, when longer than `SNIPPET_CHARS`, a window
/// around the first matched term with `…` marks, at most `SNIPPET_CHARS` characters in all.
pub fn snippet(line: &str, terms: &[String]) -> String {
    let line = line.trim();
    let chars: Vec<char> = line.chars().collect();
    let n = chars.len();
    if n <= SNIPPET_CHARS {
        return line.to_owned();
    }
    let (at, end) = FoldedLine::new(line).first_match(terms).unwrap_or((0, 0));
    let term_len = end.saturating_sub(at);
    // Both marks take one character each; center the term in what is left.
    let inner = SNIPPET_CHARS - 2;
    let start = at.saturating_sub(inner.saturating_sub(term_len) / 2);
    let mut out = String::with_capacity(SNIPPET_CHARS * 4);
    if start == 0 {
        out.extend(&chars[..SNIPPET_CHARS - 1]);
        out.push(ELLIPSIS);
    } else if start + SNIPPET_CHARS > n {
        out.push(ELLIPSIS);
        out.extend(&chars[n - (SNIPPET_CHARS - 1)..]);
    } else {
        out.push(ELLIPSIS);
        out.extend(&chars[start..start + inner]);
        out.push(ELLIPSIS);
    }
    out
}

/// Field weights of `search_knowledge`.
const WEIGHTS: [(MatchedField, u32); 4] = [
    (MatchedField::Title, 4),
    (MatchedField::Alias, 3),
    (MatchedField::Tag, 2),
    (MatchedField::Description, 1),
];

/// Scores a note's metadata against folded terms: `None` unless every term is found in at least
/// one field; else the fields that matched any term (in `MatchedField` order) and the sum over terms
/// of the best field weight.
pub fn knowledge_score(note: &Note, terms: &[String]) -> Option<(Vec<MatchedField>, u32)> {
    let description = note.description.as_deref().map(fold).unwrap_or_default();
    let tags: Vec<String> = note.tags.iter().map(|t| fold(t)).collect();
    let mut seen = [false; 4];
    let mut score = 0;
    for term in terms {
        // `#rust` finds the tag `rust`: tags are stored without `#`.
        let tag_term = term.trim_start_matches('#');
        let hit = |field: MatchedField| match field {
            MatchedField::Title => in_field(&note.title, term),
            MatchedField::Alias => note.aliases.iter().any(|a| in_field(a, term)),
            MatchedField::Tag => !tag_term.is_empty() && tags.iter().any(|t| t.contains(tag_term)),
            MatchedField::Description => description.contains(term.as_str()),
        };
        let mut best = 0;
        for (field, weight) in WEIGHTS {
            if hit(field) {
                seen[field as usize] = true;
                best = best.max(weight);
            }
        }
        if best == 0 {
            return None;
        }
        score += best;
    }
    let matched = MatchedField::ALL
        .into_iter()
        .filter(|f| seen[*f as usize])
        .collect();
    Some((matched, score))
}

// ---- ranked pages under a time budget ----------------------------------------------------------

/// One ranked hit of a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ranked<T> {
    pub score: u32,
    pub path: String,
    pub line: u32,
    pub item: T,
}

/// What the caller does with the next note (see `Ranker::before_note`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Examine,
    Skip,
    Stop,
}

/// One page of `search_knowledge` (score descending, then path), on both paths (scan and index).
/// The caller offers the hits of each note in path order; the ranker keeps, per score, only the
/// first `limit` (nothing later in path order can displace them).
///
/// SECURITY(T-PAGE2): once the page's deadline passes, the ranker stops the examination (after
/// at least one note, so every call answers something) and the page answers the hits found so
/// far, ranked, `truncated`, with no position to continue from. (`start` is still honoured for a
/// cursor an earlier build made.)
pub struct Ranker<T> {
    limit: usize,
    start: Option<(Key, u32)>,
    after: Option<RankPos>,
    /// The best score a hit after `after` can have.
    top: u32,
    deadline: Option<Instant>,
    buckets: BTreeMap<u32, Vec<Ranked<T>>>,
    /// Hits offered (after `start` and `after`).
    total: usize,
    last_note: Option<String>,
    cut: bool,
}

impl<T> Ranker<T> {
    /// `top`: the highest score any hit can have.
    pub fn new(page: &SearchPage, limit: usize, top: u32) -> Ranker<T> {
        let after = page.from.after.clone();
        let top = after.as_ref().map_or(top, |a| a.score.min(top));
        Ranker {
            limit: limit.max(1),
            start: page.from.start.clone(),
            after,
            top,
            deadline: page.budget.map(|b| Instant::now() + b),
            buckets: BTreeMap::new(),
            total: 0,
            last_note: None,
            cut: false,
        }
    }

    /// Whether to examine the note at `path` (notes come in path order).
    pub fn before_note(&mut self, path: &str) -> Step {
        if let Some((k, line)) = &self.start {
            match k.order_of(path) {
                Some(std::cmp::Ordering::Less) => return Step::Skip,
                // A note the previous page examined to its end.
                Some(std::cmp::Ordering::Equal) if *line == u32::MAX => return Step::Skip,
                _ => {}
            }
        }
        if self.last_note.is_some() && self.deadline.is_some_and(|d| Instant::now() >= d) {
            self.cut = true;
            return Step::Stop;
        }
        // From here on the note counts as examined, whatever the caller finds in it.
        self.last_note = Some(path.to_owned());
        Step::Examine
    }

    /// A hit line of the note being examined; `item` is built only when the hit is kept.
    pub fn offer(&mut self, score: u32, path: &str, line: u32, item: impl FnOnce() -> T) {
        if let Some((k, l)) = &self.start
            && k.order_of(path) == Some(std::cmp::Ordering::Equal)
            && line <= *l
        {
            return;
        }
        if let Some(a) = &self.after {
            let after = score < a.score
                || (score == a.score
                    && match a.path.order_of(path) {
                        Some(std::cmp::Ordering::Less) => false,
                        Some(std::cmp::Ordering::Equal) => line > a.line,
                        _ => true,
                    });
            if !after {
                return;
            }
        }
        self.total += 1;
        let bucket = self.buckets.entry(score).or_default();
        if bucket.len() < self.limit {
            bucket.push(Ranked {
                score,
                path: path.to_owned(),
                line,
                item: item(),
            });
        }
    }

    /// A note with hits is done; true when the answer can no longer change (stop reading).
    pub fn after_note(&self) -> bool {
        self.total > self.limit && self.buckets.get(&self.top).is_some_and(|b| b.len() >= self.limit)
    }

    /// The page: its hits, whether more may exist, and where the next page starts.
    pub fn finish(self) -> (Vec<Ranked<T>>, bool, Option<SearchPos>) {
        if self.cut {
            // SECURITY(T-PAGE2): the hits found so far, ranked among themselves; no position to
            // go on from (docs/contract.md#limits-and-pagination: a ranking cut short cannot be
            // continued, a narrower query can).
            let hits: Vec<Ranked<T>> = self
                .buckets
                .into_values()
                .rev()
                .flatten()
                .take(self.limit)
                .collect();
            return (hits, true, None);
        }
        let truncated = self.total > self.limit;
        let hits: Vec<Ranked<T>> = self
            .buckets
            .into_values()
            .rev()
            .flatten()
            .take(self.limit)
            .collect();
        let next = truncated.then(|| SearchPos {
            start: self.start,
            after: hits.last().map(|h| RankPos {
                score: h.score,
                path: Key::exact(&h.path),
                line: h.line,
            }),
        });
        (hits, truncated, next)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Notes `(path, [(score, line)])` in path order, searched page by page as the readers do.
    fn walk_pages(
        notes: &[(String, Vec<(u32, u32)>)],
        limit: usize,
        budget: bool,
    ) -> Vec<Vec<(u32, String, u32)>> {
        let mut pages = Vec::new();
        let mut from = SearchPos::default();
        for _ in 0..10_000 {
            let page = SearchPage {
                from: from.clone(),
                // Spent at once: every page stops after its first examined note.
                budget: budget.then_some(std::time::Duration::ZERO),
            };
            let mut r: Ranker<()> = Ranker::new(&page, limit, 3);
            for (path, hits) in notes {
                match r.before_note(path) {
                    Step::Skip => continue,
                    Step::Stop => break,
                    Step::Examine => {}
                }
                for (score, line) in hits {
                    r.offer(*score, path, *line, || ());
                }
                if r.after_note() {
                    break;
                }
            }
            let (hits, truncated, next) = r.finish();
            // Without a budget, truncated says a next page exists; a page cut by its budget is
            // truncated and ends the walk.
            assert!(truncated || next.is_none());
            assert!(budget || truncated == next.is_some());
            pages.push(hits.into_iter().map(|h| (h.score, h.path, h.line)).collect());
            match next {
                Some(n) => from = n,
                None => return pages,
            }
        }
        panic!("the pages never ended");
    }

    /// The budget counts from when the examination begins: time a search spent waiting for a
    /// thread (the page was made, the ranker not yet) is not taken from it.
    #[test]
    fn the_budget_starts_with_the_examination() {
        let page = SearchPage {
            from: SearchPos::default(),
            budget: Some(std::time::Duration::from_millis(300)),
        };
        std::thread::sleep(std::time::Duration::from_millis(400));
        let mut r: Ranker<()> = Ranker::new(&page, 10, 3);
        for path in ["a.md", "b.md", "c.md"] {
            assert!(
                matches!(r.before_note(path), Step::Examine),
                "{path} not examined"
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(400));
        assert!(
            matches!(r.before_note("d.md"), Step::Stop),
            "the budget never ran out"
        );
    }

    fn rank(v: &mut [(u32, String, u32)]) {
        v.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| (&a.1, a.2).cmp(&(&b.1, b.2))));
    }

    proptest::proptest! {
        #[test]
        fn pages_answer_every_hit_once_and_a_spent_budget_answers_one_page(
            raw in proptest::collection::vec(proptest::collection::vec((1u32..=3, 1u32..30), 0..6), 0..25),
            limit in 1usize..7,
        ) {
            let notes: Vec<(String, Vec<(u32, u32)>)> = raw
                .into_iter()
                .enumerate()
                .map(|(i, mut hits)| {
                    hits.sort_by_key(|h| h.1);
                    hits.dedup_by_key(|h| h.1);
                    (format!("n{i:03}.md"), hits)
                })
                .collect();
            let mut all: Vec<(u32, String, u32)> = notes
                .iter()
                .flat_map(|(p, hits)| hits.iter().map(move |(s, l)| (*s, p.clone(), *l)))
                .collect();
            rank(&mut all);
            // Without a budget, the pages are the global ranking cut in `limit`s.
            let pages = walk_pages(&notes, limit, false);
            let flat: Vec<_> = pages.iter().flatten().cloned().collect();
            proptest::prop_assert_eq!(&flat, &all);
            proptest::prop_assert!(pages.iter().all(|p| p.len() <= limit));
            // With the budget always spent, the walk goes as without one until a page is cut:
            // that page answers hits found so far, ranked, and ends the walk.
            let unbudgeted = pages;
            let pages = walk_pages(&notes, limit, true);
            let (last, before) = pages.split_last().unwrap();
            proptest::prop_assert_eq!(before, &unbudgeted[..before.len()]);
            let mut ranked = last.clone();
            rank(&mut ranked);
            proptest::prop_assert_eq!(&ranked, last);
            proptest::prop_assert!(last.len() <= limit);
            let mut seen: Vec<_> = pages.iter().flatten().cloned().collect();
            proptest::prop_assert!(seen.iter().all(|h| all.contains(h)));
            let n = seen.len();
            seen.sort();
            seen.dedup();
            proptest::prop_assert_eq!(seen.len(), n, "a hit came twice");
        }
    }

    #[test]
    fn a_cut_key_may_repeat_but_never_skips() {
        let long = format!("{}/b.md", "a".repeat(100));
        let k = Key::exact(&long).cut(16);
        assert_eq!(k.order_of(&long), Some(std::cmp::Ordering::Equal));
        assert!(!k.is_before(&long));
        assert!(!k.is_before("a.md"));
        assert!(k.is_before("b.md"));
        // Same head, another path: unknown, so treated as after.
        assert!(k.is_before(&format!("{}/a.md", "a".repeat(100))));
    }

    #[test]
    fn terms_split_on_unicode_whitespace_and_keep_phrases() {
        assert_eq!(parse_terms("  Foo\u{3000}bar\tbaz "), ["foo", "bar", "baz"]);
        assert_eq!(parse_terms(r#"a "Quoted Phrase" b"#), ["a", "quoted phrase", "b"]);
        assert_eq!(parse_terms(r#""unclosed phrase"#), ["unclosed phrase"]);
        assert_eq!(parse_terms(r#"x"y"#), [r#"x"y"#]);
        assert_eq!(parse_terms("A a \"\""), ["a"]);
        assert!(parse_terms(" \n ").is_empty());
    }

    #[test]
    fn fold_into_is_fold_for_every_character() {
        let mut buf = String::new();
        for c in (0..=0x10FFFF).filter_map(char::from_u32) {
            let s = format!("a{c}");
            fold_into(&s, &mut buf);
            assert_eq!(buf, fold(&s), "{:X}", u32::from(c));
        }
    }

    #[test]
    fn fold_is_per_character() {
        assert_eq!(fold("ΟΔΟΣ"), "οδοσ");
        assert_eq!(fold("注意力 ABC"), "注意力 abc");
    }

    #[test]
    fn terms_in_line_is_case_insensitive_substring() {
        let terms = parse_terms("ATT 力");
        assert_eq!(terms_in_line("Attention 注意力", &terms), [true, true]);
        assert_eq!(terms_in_line("nothing", &terms), [false, false]);
    }

    #[test]
    fn short_line_snippet_is_the_trimmed_line() {
        assert_eq!(snippet("   hello world  ", &parse_terms("world")), "hello world");
    }

    #[test]
    fn long_line_snippet_is_a_char_safe_window_around_the_term() {
        let line = format!("{}注意力{}", "字".repeat(300), "尾".repeat(197));
        let s = snippet(&line, &parse_terms("注意力"));
        assert_eq!(s.chars().count(), SNIPPET_CHARS);
        assert!(s.starts_with('…') && s.ends_with('…'));
        assert!(s.contains("注意力"));
    }

    #[test]
    fn long_line_snippet_at_the_edges_uses_one_mark() {
        let head = format!("needle {}", "x".repeat(400));
        let s = snippet(&head, &parse_terms("needle"));
        assert_eq!(s.chars().count(), SNIPPET_CHARS);
        assert!(s.starts_with("needle") && s.ends_with('…'));
        let tail = format!("{} needle", "x".repeat(400));
        let s = snippet(&tail, &parse_terms("NEEDLE"));
        assert_eq!(s.chars().count(), SNIPPET_CHARS);
        assert!(s.starts_with('…') && s.ends_with("needle"));
    }

    #[test]
    fn snippet_maps_folded_offsets_back_to_original_chars() {
        // 'İ' folds to two chars; the window must still land on the term.
        let line = format!("{}term{}", "İ".repeat(300), "y".repeat(300));
        let s = snippet(&line, &parse_terms("term"));
        assert_eq!(s.chars().count(), SNIPPET_CHARS);
        assert!(s.contains("term"));
    }

    #[test]
    fn knowledge_score_weights_and_matched_order() {
        let note = Note::parse(
            "---\ntitle: Attention\naliases: [Self-attention]\ndescription: about transformers\ntags: [ml]\n---\n",
            "x",
        );
        let (m, s) = knowledge_score(&note, &parse_terms("attention")).unwrap();
        assert_eq!(m, [MatchedField::Title, MatchedField::Alias]);
        assert_eq!(s, 4);
        let (m, s) = knowledge_score(&note, &parse_terms("transformers #ml")).unwrap();
        assert_eq!(m, [MatchedField::Description, MatchedField::Tag]);
        assert_eq!(s, 3);
        assert!(knowledge_score(&note, &parse_terms("attention missing")).is_none());
    }
}
