//! The candidate step's vocabulary: which n-grams of a note's folded text the full-text index
//! holds, and which of them a folded query term needs.
//!
//! A gram is indexed when all its characters are letters or digits (`char::is_alphanumeric`, so
//! CJK too): every trigram of such characters, and every unigram and bigram that also holds a
//! non-ASCII character (so one- and two-character CJK terms narrow too; short ASCII terms match
//! most notes anyway). Whether a gram is indexed depends on its own characters only, so a term
//! that occurs in a note has all its indexed grams among the note's tokens: the notes holding a
//! term's tokens are a superset of the notes containing it. The candidate step may let through a
//! note that does not match, never drop one that does; the exact step decides. (Grams across
//! spaces and punctuation are left out: they are a third of all grams and rarely narrow.)
//!
//! Each gram is encoded as one token of FTS5's `ascii` tokenizer: ASCII letters and digits and
//! every non-ASCII character stand for themselves (folded text has no ASCII capitals, so the
//! tokenizer's own folding changes nothing), and distinct grams are distinct tokens.

use std::collections::HashMap;
#[cfg(test)]
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

/// The FTS5 `tokenize` option the encoding is made for.
pub const TOKENIZER: &str = "ascii";

/// At most this many tokens in one candidate query (shared between its terms): enough to
/// narrow well, few enough that intersecting them stays cheap.
const MAX_QUERY_GRAMS: usize = 9;

/// A gram packed into a `u64`: each character + 1 in 21 bits (0: none), so grams of different
/// lengths never collide.
fn pack(chars: &[char]) -> u64 {
    chars
        .iter()
        .fold(0u64, |acc, &c| (acc << 21) | (u64::from(c) + 1))
}

/// A multiplicative hasher for packed grams (the default SipHash is several times slower here,
/// and the keys are not attacker-chosen in a way that matters for a per-note set).
#[derive(Default)]
struct GramHasher(u64);

impl Hasher for GramHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b) ^ self.0.rotate_left(8));
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = (x ^ (x >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A gram that occurs at least this many times in a note also gets the token `gram·level`
/// (U+00B7 is not alphanumeric, so no gram holds it): the ranking bounds how often a term can
/// occur in a note the index has not named at a level (see `vault::rank`).
pub const LEVELS: [u32; 7] = [2, 3, 4, 6, 8, 12, 16];

/// The separator of a level token.
const LEVEL_MARK: char = '\u{B7}';

/// The token of `gram` at `level` (1: the gram itself).
pub fn level_token(gram: &str, level: u32) -> String {
    if level <= 1 {
        gram.to_owned()
    } else {
        format!("{gram}{LEVEL_MARK}{level}")
    }
}

/// Reusable buffers for `doc_tokens`.
#[derive(Default)]
pub struct TokenBuf {
    seen: HashMap<u64, u32, BuildHasherDefault<GramHasher>>,
    out: String,
}

fn encode(chars: &[char]) -> String {
    chars.iter().collect()
}

/// May `c` be part of an indexed gram?
fn indexed(c: char) -> bool {
    c.is_alphanumeric()
}

/// Feeds folded characters and records the indexed grams ending at each.
struct Grams<'b> {
    buf: &'b mut TokenBuf,
    window: [char; 3],
    /// How many indexed characters end the window.
    run: usize,
}

impl Grams<'_> {
    fn emit(&mut self, len: usize) {
        let gram = &self.window[3 - len..];
        let n = self.buf.seen.entry(pack(gram)).or_insert(0);
        *n += 1;
        if *n == 1 {
            self.buf.out.extend(gram);
            self.buf.out.push(' ');
        }
    }

    fn push(&mut self, c: char) {
        self.window = [self.window[1], self.window[2], c];
        if !indexed(c) {
            self.run = 0;
            return;
        }
        self.run += 1;
        if !c.is_ascii() {
            self.emit(1);
        }
        if self.run >= 2 && !(c.is_ascii() && self.window[1].is_ascii()) {
            self.emit(2);
        }
        if self.run >= 3 {
            self.emit(3);
        }
    }
}

/// The index document of a note's text: its indexed grams (see the module doc) after folding
/// as `search::fold` does (per character), space-separated, and with `counted` the level token
/// of each gram at every level of `LEVELS` it reaches.
pub fn doc_tokens<'b>(text: &str, buf: &'b mut TokenBuf, counted: bool) -> &'b str {
    buf.seen.clear();
    buf.out.clear();
    let mut g = Grams {
        buf,
        window: ['\0'; 3],
        run: 0,
    };
    for c in text.chars() {
        if c.is_ascii() {
            g.push(c.to_ascii_lowercase());
        } else {
            for l in c.to_lowercase() {
                g.push(l);
            }
        }
    }
    if counted {
        let TokenBuf { seen, out } = &mut *buf;
        for (&gram, &n) in seen.iter() {
            for level in LEVELS.into_iter().take_while(|l| n >= *l) {
                out.extend(unpack(gram));
                out.push(LEVEL_MARK);
                out.push_str(&level.to_string());
                out.push(' ');
            }
        }
    }
    buf.out.as_str()
}

/// The characters `pack` packed.
fn unpack(mut packed: u64) -> impl Iterator<Item = char> {
    let mut chars = ['\0'; 3];
    let mut n = 0;
    while packed != 0 && n < 3 {
        chars[n] = char::from_u32(((packed & 0x1F_FFFF) as u32).saturating_sub(1)).unwrap_or('\0');
        packed >>= 21;
        n += 1;
    }
    chars.into_iter().take(n).rev()
}

/// The tokens that every note containing the folded `term` holds (empty: the term cannot
/// narrow): its distinct indexed trigrams if it has any, else its indexed bigrams, else its
/// indexed unigrams.
pub fn term_tokens(term: &str) -> Vec<String> {
    let chars: Vec<char> = term.chars().collect();
    for len in [3, 2, 1] {
        let grams: Vec<&[char]> = chars
            .windows(len)
            .filter(|w| w.iter().all(|c| indexed(*c)) && (len == 3 || w.iter().any(|c| !c.is_ascii())))
            .collect();
        if grams.is_empty() {
            continue;
        }
        let mut out: Vec<String> = Vec::with_capacity(grams.len());
        for g in &grams {
            let t = encode(g);
            if !out.contains(&t) {
                out.push(t);
            }
        }
        return out;
    }
    Vec::new()
}

/// The FTS5 query a note must match to be a candidate for every one of `terms` (folded), or
/// `None` when no term narrows (every note is a candidate).
pub fn match_query<'a>(terms: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let per_term: Vec<Vec<String>> = terms
        .into_iter()
        .map(term_tokens)
        .filter(|t| !t.is_empty())
        .collect();
    // Share the budget between terms (every term narrows), at least two tokens each.
    let each = (MAX_QUERY_GRAMS / per_term.len().max(1)).max(2);
    let mut tokens: Vec<String> = Vec::new();
    for term in per_term {
        for t in spread(&term, each) {
            if tokens.len() < MAX_QUERY_GRAMS && !tokens.contains(t) {
                tokens.push(t.clone());
            }
        }
    }
    if tokens.is_empty() {
        return None;
    }
    // Tokens are letters and digits only, so quoting each makes it one FTS5 string.
    let quoted: Vec<String> = tokens.iter().map(|t| format!("\"{t}\"")).collect();
    Some(quoted.join(" AND "))
}

/// At most this many of a term's tokens are counted (a long quoted phrase has hundreds).
const COUNTED_GRAMS: usize = 8;

/// The tokens of `term` whose note counts the ranking uses: at most `COUNTED_GRAMS` of
/// `term_tokens`, evenly spaced. Empty: the term cannot narrow. The rarest of them bounds the
/// notes holding the term (its document frequency) and, with the next rarest, names them.
pub fn term_query_tokens(term: &str) -> Vec<String> {
    let all = term_tokens(term);
    spread(&all, COUNTED_GRAMS).cloned().collect()
}

/// How many of a term's rarest tokens a candidate query asks for: the rarest narrows most, the
/// second removes most of what it lets through (a term's rarest trigram may still be common:
/// `ant` of `lantern`); each further one costs another list to read.
pub const NARROWING_GRAMS: usize = 2;

/// The FTS5 query "every one of `tokens` at `level`" (`tokens` non-empty).
pub fn all_of(tokens: &[String], level: u32) -> String {
    // Tokens are letters, digits and the level mark only, so quoting each makes it one string.
    let quoted: Vec<String> = tokens
        .iter()
        .map(|t| format!("\"{}\"", level_token(t, level)))
        .collect();
    quoted.join(" AND ")
}

/// At most `n` of `items`, evenly spaced, always including the first and the last.
fn spread<T>(items: &[T], n: usize) -> impl Iterator<Item = &T> {
    let picks = items.len().min(n);
    (0..picks).map(move |i| {
        let at = if picks == 1 {
            0
        } else {
            i * (items.len() - 1) / (picks - 1)
        };
        &items[at]
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::search::fold;

    fn tokens(text: &str) -> HashSet<String> {
        let mut buf = TokenBuf::default();
        doc_tokens(text, &mut buf, false)
            .split(' ')
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn ascii_text_has_distinct_alphanumeric_trigrams_only() {
        let t = tokens("abcABC x-yz, ab");
        let mut got: Vec<&str> = t.iter().map(String::as_str).collect();
        got.sort_unstable();
        assert_eq!(got, ["abc", "bca", "cab"]);
    }

    #[test]
    fn tokens_are_folded_like_search_fold() {
        let text = "ÀÉÎ ΟΔΟΣ İstanbul Straße KELVIN";
        let mut buf = TokenBuf::default();
        let direct = doc_tokens(text, &mut buf, true).to_owned();
        assert_eq!(direct, doc_tokens(&fold(text), &mut buf, true));
        assert!(tokens(text).contains("οδο"));
    }

    #[test]
    fn cjk_text_has_unigrams_and_bigrams_too() {
        let t = tokens("注意力x。好");
        for want in ["注", "意", "力", "注意", "意力", "力x", "注意力", "意力x", "好"] {
            assert!(t.contains(want), "{want} in {t:?}");
        }
        assert!(!t.contains("x") && !t.iter().any(|t| t.contains('。')), "{t:?}");
    }

    #[test]
    fn every_term_of_a_text_finds_its_tokens() {
        let text = "Ünïcode Straße — 注意力 ΟΔΟΣ; x=1 \"q\"\n\tend [[link]] a-b_c 中文。句子";
        let folded = fold(text);
        let all = tokens(text);
        let chars: Vec<char> = folded.chars().collect();
        for i in 0..chars.len() {
            for j in i + 1..=chars.len().min(i + 8) {
                let term: String = chars[i..j].iter().collect();
                for t in term_tokens(&term) {
                    assert!(all.contains(&t), "{term:?} needs {t:?}");
                }
            }
        }
    }

    #[test]
    fn term_tokens_prefer_trigrams_and_short_ascii_terms_do_not_narrow() {
        assert!(term_tokens("ab").is_empty());
        assert!(term_tokens("a").is_empty());
        assert!(term_tokens("c++").is_empty());
        assert_eq!(term_tokens("猫"), ["猫"]);
        assert_eq!(term_tokens("x-猫"), ["猫"]);
        assert_eq!(term_tokens("ab 猫x"), ["猫x"]);
        assert_eq!(term_tokens("abcabc"), ["abc", "bca", "cab"]);
        assert_eq!(
            match_query(["abcdefghij"]).unwrap(),
            "\"abc\" AND \"bcd\" AND \"cde\" AND \"def\" AND \"efg\" AND \"fgh\" AND \"ghi\" AND \"hij\""
        );
        assert_eq!(
            match_query(["abcdefghij", "klmno", "pqrs"]).unwrap(),
            "\"abc\" AND \"def\" AND \"hij\" AND \"klm\" AND \"lmn\" AND \"mno\" AND \"pqr\" AND \"qrs\""
        );
        assert_eq!(term_tokens("foo-bar"), ["foo", "bar"]);
        assert_eq!(match_query(["ab", "c"]), None);
        assert_eq!(
            match_query(["abcd", "猫"]).unwrap(),
            "\"abc\" AND \"bcd\" AND \"猫\""
        );
    }

    #[test]
    fn level_tokens_count_every_occurrence_of_a_gram() {
        let mut buf = TokenBuf::default();
        let got: HashSet<String> = doc_tokens("aaaaa abc abc 猫猫", &mut buf, true)
            .split(' ')
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect();
        // "aaaaa" holds "aaa" three times; "abc" twice; "猫" twice, "猫猫" once.
        for want in ["aaa", "aaa·2", "aaa·3", "abc", "abc·2", "猫", "猫·2", "猫猫"] {
            assert!(got.contains(want), "{want} in {got:?}");
        }
        for not in ["aaa·4", "abc·3", "猫猫·2"] {
            assert!(!got.contains(not), "{not} in {got:?}");
        }
        assert_eq!(level_token("abc", 1), "abc");
        assert_eq!(
            all_of(&["abc".into(), "bcd".into()], 4),
            "\"abc·4\" AND \"bcd·4\""
        );
    }

    #[test]
    fn unpack_is_the_inverse_of_pack() {
        for g in [
            &['a'][..],
            &['a', '猫'],
            &['x', 'y', 'z'],
            &['\u{10FFFF}', 'b', 'c'],
        ] {
            assert_eq!(unpack(pack(g)).collect::<Vec<_>>(), g);
        }
    }
}
