//! Relevance ranking of `search_note_content` (docs/contract.md#the-mcp-surface): which notes
//! match (exactly: every term, or any, as case-insensitive substrings), how each matching note
//! scores, and the page of hit lines, grouped per note, in note rank order.
//!
//! The score is BM25 over the matched terms: for each term, its inverse document frequency times
//! the saturated count of its occurrences, normalised by the note's length, plus fixed bonuses
//! (also times the term's idf) when the title, an alias or a heading holds it. Both readers (the
//! index and the scan) compute it here, from the same integers, so they agree to the last digit.
//!
//! The index does not read every matching note: `Weights::bound` is the best score a note can
//! still reach given what the index knows of it (its length, and that no gram of a term reaches
//! a level), and a note whose bound is below the page's worst kept note cannot enter the page.

use std::time::Instant;

use crate::search::{Step, in_field};
use crate::types::{Key, RankPos, SearchPage, SearchPos};

/// How a note must hold the terms to match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Match {
    /// Every term (`match: "all"`, the default).
    #[default]
    All,
    /// At least one term (`match: "any"`).
    Any,
}

/// BM25's saturation and length normalisation (the usual values).
const K1: f64 = 1.2;
const B: f64 = 0.75;
/// Bonuses, in units of a term's idf: a title match is worth a note full of the term.
const TITLE: f64 = K1 + 1.0;
const ALIAS: f64 = 1.5;
const HEADING: f64 = 1.0;
/// Scores are answered as integers: the sum times this, rounded.
const SCALE: f64 = 1000.0;

/// What one matching note holds of one term.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TermFacts {
    /// Occurrences in the folded text (not overlapping).
    pub tf: u32,
    pub title: bool,
    pub alias: bool,
    pub heading: bool,
}

/// A matching note, judged: what it holds of each term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    /// The text's length in bytes.
    pub len: u64,
    pub terms: Vec<TermFacts>,
}

/// A note's title and aliases, or that they (and its headings) are known to hold no term.
pub enum Fields<'f> {
    Some {
        title: &'f str,
        aliases: &'f [String],
    },
    /// The index found no term's grams among them: no field bonus, nothing to look at.
    None,
}

/// Judges a note: `folded` is `search::fold(body)`, `terms` folded and distinct. `None` when the
/// note does not match. Its lines are found only for a note that enters the page (`hit_lines`).
pub fn judge(body: &str, folded: &str, terms: &[String], mode: Match, fields: &Fields<'_>) -> Option<Judged> {
    let tf: Vec<u32> = terms
        .iter()
        .map(|t| u32::try_from(folded.matches(t.as_str()).count()).unwrap_or(u32::MAX))
        .collect();
    let matches = match mode {
        Match::All => tf.iter().all(|n| *n > 0),
        Match::Any => tf.iter().any(|n| *n > 0),
    };
    if !matches {
        return None;
    }
    let facts = match fields {
        Fields::None => tf
            .iter()
            .map(|&tf| TermFacts {
                tf,
                ..TermFacts::default()
            })
            .collect(),
        Fields::Some { title, aliases } => {
            let headings: Vec<String> = crate::note::heading_lines(body)
                .map(|(_, h)| crate::search::fold(h))
                .collect();
            terms
                .iter()
                .zip(&tf)
                .map(|(t, &tf)| TermFacts {
                    tf,
                    title: tf > 0 && in_field(title, t),
                    alias: tf > 0 && aliases.iter().any(|a| in_field(a, t)),
                    heading: tf > 0 && headings.iter().any(|h| h.contains(t.as_str())),
                })
                .collect()
        }
    };
    Some(Judged {
        len: body.len() as u64,
        terms: facts,
    })
}

/// A judged note's hit lines `(terms held, 1-based line, text)`, the lines holding the most terms
/// first (then by line), at most `per_note`.
pub fn hit_lines<'b>(
    body: &'b str,
    folded: &str,
    terms: &[String],
    j: &Judged,
    per_note: usize,
) -> Vec<(u32, u32, &'b str)> {
    let mut lines = Vec::new();
    // Folding keeps every line break where it is (no character folds to or from one), so line k
    // of the folded text is the fold of line k; a lone CR ends a line as people count them.
    for (n, (line, f)) in policy::text::lines(body)
        .zip(policy::text::lines(folded))
        .enumerate()
    {
        let held = terms
            .iter()
            .zip(&j.terms)
            .filter(|(t, n)| n.tf > 0 && f.contains(t.as_str()))
            .count();
        if held > 0 {
            lines.push((
                u32::try_from(held).unwrap_or(u32::MAX),
                u32::try_from(n + 1).unwrap_or(u32::MAX),
                line,
            ));
        }
    }
    lines.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    lines.truncate(per_note.max(1));
    lines
}

/// The collection statistics a score needs: each term's idf and the mean note length.
#[derive(Debug, Clone, PartialEq)]
pub struct Weights {
    idf: Vec<f64>,
    mean_len: f64,
}

impl Weights {
    /// `notes`: readable notes in the vault; `bytes`: their total length; `df[i]`: the notes that
    /// may hold term i (those holding its rarest gram of `grams::term_query_tokens`; every note
    /// for a term that has none).
    pub fn new(notes: u64, bytes: u64, df: &[u64]) -> Weights {
        let n = notes as f64;
        let idf = df
            .iter()
            .map(|&d| {
                let d = (d.min(notes)) as f64;
                (1.0 + (n - d + 0.5) / (d + 0.5)).ln()
            })
            .collect();
        let mean_len = if notes == 0 {
            1.0
        } else {
            (bytes as f64 / n).max(1.0)
        };
        Weights { idf, mean_len }
    }

    /// The saturated count of `f` occurrences in a note of `len` bytes (`None`: unbounded).
    fn part(&self, f: Option<u32>, len: u64) -> f64 {
        match f {
            None => K1 + 1.0,
            Some(0) => 0.0,
            Some(f) => {
                let f = f64::from(f);
                f * (K1 + 1.0) / (f + K1 * (1.0 - B + B * len as f64 / self.mean_len))
            }
        }
    }

    /// The note's score.
    pub fn score(&self, j: &Judged) -> u32 {
        let mut s = 0.0;
        for (t, idf) in j.terms.iter().zip(&self.idf) {
            let mut x = self.part(Some(t.tf), j.len);
            if t.title {
                x += TITLE;
            }
            if t.alias {
                x += ALIAS;
            }
            if t.heading {
                x += HEADING;
            }
            s += idf * x;
        }
        quantize(s, f64::round)
    }

    /// The best score a note of `len` bytes can have when term i occurs at most `most[i]` times
    /// in it (`None`: unknown), and, where `fields[i]` is false, in none of its title, aliases
    /// and headings.
    pub fn bound(&self, most: &[Option<u32>], fields: &[bool], len: u64) -> u32 {
        let mut s = 0.0;
        for ((m, f), idf) in most.iter().zip(fields).zip(&self.idf) {
            let mut x = self.part(*m, len);
            if *f {
                x += TITLE + ALIAS + HEADING;
            }
            s += idf * x;
        }
        // Rounded as scores are (rounding keeps order, so a score never rounds above the bound
        // of a larger sum); the epsilon covers a last-bit difference between the two sums.
        quantize(s + 1e-9, f64::round)
    }
}

fn quantize(s: f64, round: fn(f64) -> f64) -> u32 {
    let q = round(s * SCALE);
    if q.is_nan() || q <= 0.0 {
        0
    } else if q >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        q as u32
    }
}

// ---- one page of notes ------------------------------------------------------------------------

/// One answered hit line of a ranked note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankedHit<T> {
    pub score: u32,
    pub path: String,
    pub line: u32,
    pub item: T,
}

struct Kept<T> {
    score: u32,
    path: String,
    /// The note's hit lines not yet answered on earlier pages: `(line, item)`.
    hits: Vec<(u32, T)>,
    /// Hit lines answered on earlier pages (when this is the note the cursor stopped in).
    skipped: u32,
}

/// The page of a ranked content search: notes are offered in any order; it keeps the best ones
/// after the cursor's position until they hold more than `limit` hits, and knows the worst score
/// that can still enter (`threshold`).
///
/// SECURITY(T-PAGE2): once the page's deadline passes (after at least one note, so every call
/// answers something), the search stops and answers the hits ranked so far, `truncated`, with no
/// position to continue from: a ranking cut short cannot be continued.
pub struct NoteRanker<T> {
    limit: usize,
    after: Option<RankPos>,
    deadline: Option<Instant>,
    examined: bool,
    cut: bool,
    /// By rank: score descending, then path.
    kept: Vec<Kept<T>>,
    kept_hits: usize,
    /// A hit was dropped or left unread: more exist than the kept ones.
    more: bool,
}

impl<T> NoteRanker<T> {
    pub fn new(page: &SearchPage, limit: usize) -> NoteRanker<T> {
        NoteRanker {
            limit: limit.max(1),
            after: page.from.after.clone(),
            deadline: page.budget.map(|b| Instant::now() + b),
            examined: false,
            cut: false,
            kept: Vec::new(),
            kept_hits: 0,
            more: false,
        }
    }

    /// Whether the page's time is spent.
    pub fn spent(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// Whether to examine another note (never `Skip`).
    pub fn before_note(&mut self) -> Step {
        if self.examined && self.spent() {
            self.cut = true;
            return Step::Stop;
        }
        self.examined = true;
        Step::Examine
    }

    /// The score a note must reach to enter the page (one scoring exactly this may still enter,
    /// by path); `None` while every matching note enters.
    pub fn threshold(&self) -> Option<u32> {
        (self.kept_hits > self.limit)
            .then(|| self.kept.last().map(|k| k.score))
            .flatten()
    }

    /// Whether a note of this score at `path` can no longer enter the page (the caller then
    /// skips finding its lines and calls `more_exist`).
    pub fn cannot_enter(&self, score: u32, path: &str) -> bool {
        self.threshold().is_some_and(|t| {
            score < t || (score == t && self.kept.last().is_some_and(|k| k.path.as_str() < path))
        })
    }

    /// Notes the caller knows exist but will not examine (they cannot enter the page).
    pub fn more_exist(&mut self) {
        self.more = true;
    }

    /// A matching note: its score and its hit lines `(line, item)` in the order answered.
    pub fn offer(&mut self, score: u32, path: &str, hits: Vec<(u32, T)>) {
        let mut skipped = 0u32;
        let mut hits = hits;
        if let Some(a) = &self.after {
            let before = score > a.score
                || (score == a.score
                    && matches!(
                        a.path.order_of(path),
                        Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)
                    ));
            if before {
                let same = score == a.score && a.path.order_of(path) == Some(std::cmp::Ordering::Equal);
                if !same {
                    return;
                }
                skipped = a.line;
                hits.drain(..hits.len().min(a.line as usize));
            }
        }
        if hits.is_empty() {
            return;
        }
        let at = self
            .kept
            .partition_point(|k| k.score > score || (k.score == score && k.path.as_str() < path));
        if self.kept_hits > self.limit && at >= self.kept.len() {
            self.more = true;
            return;
        }
        self.kept_hits += hits.len();
        self.kept.insert(
            at,
            Kept {
                score,
                path: path.to_owned(),
                hits,
                skipped,
            },
        );
        // Drop notes from the end while the others still hold more than `limit` hits.
        while let Some(last) = self.kept.last()
            && self.kept_hits - last.hits.len() > self.limit
        {
            self.kept_hits -= last.hits.len();
            self.kept.pop();
            self.more = true;
        }
    }

    /// The page: its hits, whether more exist, and where the next page starts.
    pub fn finish(self) -> (Vec<RankedHit<T>>, bool, Option<SearchPos>) {
        let truncated = self.cut || self.more || self.kept_hits > self.limit;
        let mut out = Vec::with_capacity(self.limit.min(self.kept_hits));
        let mut last: Option<RankPos> = None;
        'notes: for k in self.kept {
            for (answered, (line, item)) in (k.skipped + 1..).zip(k.hits) {
                if out.len() == self.limit {
                    break 'notes;
                }
                last = Some(RankPos {
                    score: k.score,
                    path: Key::exact(&k.path),
                    line: answered,
                });
                out.push(RankedHit {
                    score: k.score,
                    path: k.path.clone(),
                    line,
                    item,
                });
            }
        }
        let next = (truncated && !self.cut).then_some(SearchPos {
            start: None,
            after: last,
        });
        (out, truncated, next)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::search::fold;

    fn judged(body: &str, q: &[&str], mode: Match) -> Option<Judged> {
        let terms: Vec<String> = q.iter().map(|t| fold(t)).collect();
        let aliases = vec!["Alias".to_owned()];
        let fields = Fields::Some {
            title: "A Title",
            aliases: &aliases,
        };
        judge(body, &fold(body), &terms, mode, &fields)
    }

    #[test]
    fn all_needs_every_term_any_needs_one() {
        assert!(judged("alpha\nbeta", &["alpha", "beta"], Match::All).is_some());
        assert!(judged("alpha", &["alpha", "beta"], Match::All).is_none());
        assert!(judged("alpha", &["alpha", "beta"], Match::Any).is_some());
        assert!(judged("gamma", &["alpha", "beta"], Match::Any).is_none());
    }

    #[test]
    fn lines_holding_the_most_terms_come_first_at_most_per_note() {
        let body = "a x\nb\na b\nb a\na\n";
        let j = judged(body, &["a", "b"], Match::All).unwrap();
        let terms = ["a".to_owned(), "b".to_owned()];
        assert_eq!(
            hit_lines(body, &fold(body), &terms, &j, 3)
                .iter()
                .map(|l| (l.0, l.1))
                .collect::<Vec<_>>(),
            [(2, 3), (2, 4), (1, 1)]
        );
    }

    #[test]
    fn counts_and_fields() {
        let j = judged(
            "# Heading alpha\nalpha alpha\ntitle\n",
            &["alpha", "title", "alias"],
            Match::Any,
        )
        .unwrap();
        assert_eq!(
            j.terms[0],
            TermFacts {
                tf: 3,
                title: false,
                alias: false,
                heading: true
            }
        );
        assert_eq!(
            j.terms[1],
            TermFacts {
                tf: 1,
                title: true,
                alias: false,
                heading: false
            }
        );
        // Not in the text: no field bonus either.
        assert_eq!(j.terms[2], TermFacts::default());
    }

    #[test]
    fn more_occurrences_rarer_terms_shorter_notes_and_titles_score_higher() {
        let w = Weights::new(100, 100 * 1000, &[10, 90]);
        let one = |tf, len, title| Judged {
            len,
            terms: vec![
                TermFacts {
                    tf,
                    title,
                    ..TermFacts::default()
                },
                TermFacts::default(),
            ],
        };
        assert!(w.score(&one(3, 1000, false)) > w.score(&one(1, 1000, false)));
        assert!(w.score(&one(1, 500, false)) > w.score(&one(1, 5000, false)));
        assert!(w.score(&one(1, 1000, true)) > w.score(&one(50, 1000, false)));
        let rare = Judged {
            len: 1000,
            terms: vec![
                TermFacts {
                    tf: 1,
                    ..TermFacts::default()
                },
                TermFacts::default(),
            ],
        };
        let common = Judged {
            len: 1000,
            terms: vec![
                TermFacts::default(),
                TermFacts {
                    tf: 1,
                    ..TermFacts::default()
                },
            ],
        };
        assert!(w.score(&rare) > w.score(&common));
    }

    proptest::proptest! {
        #[test]
        fn a_bound_is_never_below_a_score_it_bounds(
            tf in proptest::collection::vec(0u32..40, 1..4),
            most_extra in proptest::collection::vec(0u32..10, 4),
            fields in proptest::collection::vec(proptest::bool::ANY, 4),
            len in 1u64..100_000, n in 1u64..1000, df in 0u64..1000,
        ) {
            let w = Weights::new(n, n * 3000, &vec![df; tf.len()]);
            let terms: Vec<TermFacts> = tf.iter().zip(&fields).map(|(&tf, &f)| TermFacts { tf, title: f && tf > 0, alias: f && tf > 0, heading: f && tf > 0 }).collect();
            let j = Judged { len, terms };
            let most: Vec<Option<u32>> = tf.iter().zip(&most_extra).map(|(t, e)| Some(t + e)).collect();
            proptest::prop_assert!(w.bound(&most, &fields[..tf.len()], len) >= w.score(&j));
            let unknown = vec![None; tf.len()];
            proptest::prop_assert!(w.bound(&unknown, &fields[..tf.len()], len) >= w.score(&j));
            // A longer note bounds lower.
            proptest::prop_assert!(w.bound(&most, &fields[..tf.len()], len + 1000) <= w.bound(&most, &fields[..tf.len()], len));
        }

        /// Pages answer the global ranking cut in `limit`s, whatever order notes come in.
        #[test]
        fn pages_are_the_ranking_cut_in_limits(
            notes in proptest::collection::vec((0u32..5, 1usize..5), 0..20),
            limit in 1usize..7,
            reverse in proptest::bool::ANY,
        ) {
            let notes: Vec<(String, u32, usize)> = notes.into_iter().enumerate().map(|(i, (s, n))| (format!("n{i:02}.md"), s, n)).collect();
            let mut all: Vec<(u32, String, u32)> = notes.iter().flat_map(|(p, s, n)| (1..=*n as u32).map(move |l| (*s, p.clone(), l))).collect();
            all.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
            let mut order = notes.clone();
            if reverse { order.reverse(); }
            let mut from = SearchPos::default();
            let mut got = Vec::new();
            for _ in 0..100 {
                let mut r: NoteRanker<()> = NoteRanker::new(&SearchPage { from: from.clone(), budget: None }, limit);
                for (p, s, n) in &order {
                    // As the readers do: a note that cannot enter is not offered.
                    if r.cannot_enter(*s, p) {
                        r.more_exist();
                    } else {
                        r.offer(*s, p, (1..=*n as u32).map(|l| (l, ())).collect());
                    }
                }
                let (hits, truncated, next) = r.finish();
                proptest::prop_assert!(hits.len() <= limit);
                proptest::prop_assert_eq!(truncated, next.is_some());
                got.extend(hits.into_iter().map(|h| (h.score, h.path, h.line)));
                match next { Some(n) => from = n, None => break }
            }
            proptest::prop_assert_eq!(got, all);
        }
    }

    #[test]
    fn a_spent_budget_answers_what_it_ranked_without_a_cursor() {
        let page = SearchPage {
            from: SearchPos::default(),
            budget: Some(std::time::Duration::ZERO),
        };
        let mut r: NoteRanker<()> = NoteRanker::new(&page, 10);
        assert_eq!(r.before_note(), Step::Examine);
        r.offer(5, "a.md", vec![(1, ())]);
        assert_eq!(r.before_note(), Step::Stop);
        let (hits, truncated, next) = r.finish();
        assert_eq!(hits.len(), 1);
        assert!(truncated && next.is_none());
    }
}
