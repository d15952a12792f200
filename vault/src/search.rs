//! Pure search primitives with the exact semantics of SPEC §4: query terms, case folding, line
//! matching, snippets, and the metadata score of `search_knowledge`.
//!
//! Matching is case-insensitive *substring* matching (not tokens), so it works for CJK text and for
//! one- or two-character terms.

use crate::note::Note;
use crate::types::MatchedField;

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

/// Splits a query into folded, distinct terms: Unicode whitespace separates terms, and a
/// `"quoted phrase"` (starting a term) is one term. An unclosed quote runs to the end.
pub fn parse_terms(query: &str) -> Vec<String> {
    let mut terms: Vec<String> = Vec::new();
    for term in terms_of(query) {
        if !terms.contains(&term) {
            terms.push(term);
        }
    }
    terms
}

/// The tokenizer of [`parse_terms`], lazily and without removing repeats, so a caller can bound
/// a query (SPEC §14) while reading it rather than after.
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
    let title = fold(&note.title);
    let aliases: Vec<String> = note.aliases.iter().map(|a| fold(a)).collect();
    let description = note.description.as_deref().map(fold).unwrap_or_default();
    let tags: Vec<String> = note.tags.iter().map(|t| fold(t)).collect();
    let mut seen = [false; 4];
    let mut score = 0;
    for term in terms {
        // `#rust` finds the tag `rust`: tags are stored without `#`.
        let tag_term = term.trim_start_matches('#');
        let hit = |field: MatchedField| match field {
            MatchedField::Title => title.contains(term.as_str()),
            MatchedField::Alias => aliases.iter().any(|a| a.contains(term.as_str())),
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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
