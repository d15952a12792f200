//! Text that reaches a person (CLI output, the review page, the approval card, git messages,
//! approval prompts), and the one line splitter of diffs, counts and line numbers
//! (docs/contract.md, [Text people see](../../docs/contract.md#text-people-see)).
//!
//! An agent's reason, a note's diff or an echoed argument must neither drive a terminal nor hide,
//! reorder or forge what a reviewer reads. Which characters are invisible is Unicode's answer,
//! not a hand list: the general category and the default-ignorable property come from
//! `icu_properties` (its data is Unicode [`UNICODE_VERSION`]).

use std::borrow::Cow;
use std::fmt::Write as _;

use icu_properties::props::{DefaultIgnorableCodePoint, GeneralCategory};
use icu_properties::{
    CodePointMapData, CodePointMapDataBorrowed, CodePointSetData, CodePointSetDataBorrowed,
};

/// The Unicode version of the character data behind these rules and the path rules (the data of
/// `icu_properties_data` as Cargo.lock pins it; `vaultgate describe` names it).
pub const UNICODE_VERSION: &str = "18.0.0";

pub(crate) const CATEGORY: CodePointMapDataBorrowed<'static, GeneralCategory> =
    CodePointMapData::<GeneralCategory>::new();
const DEFAULT_IGNORABLE: CodePointSetDataBorrowed<'static> =
    CodePointSetData::new::<DefaultIgnorableCodePoint>();

/// Whether `c` is shown to a person escaped: C0 controls but newline and tab, DEL, C1 controls,
/// every format character (category Cf: bidi marks, embeddings, overrides and isolates,
/// zero-width spaces and joiners, tags, U+0600, U+1D173…), every default-ignorable code point
/// (variation selectors, U+034F, U+17B5, U+180B…), the line and paragraph separators, and the
/// blank letters that render as nothing (U+115F, U+1160, U+3164, U+FFA0, U+2800).
// SECURITY(T-TERM): an ANSI sequence cannot drive the terminal; SECURITY(T-BIDI): a bidi override
// or an invisible character cannot reorder or hide what a reviewer reads.
pub fn is_hidden(c: char) -> bool {
    if c.is_ascii() {
        return matches!(c, '\0'..='\u{8}' | '\u{b}'..='\u{1f}' | '\u{7f}');
    }
    matches!(
        c,
        '\u{80}'
            ..='\u{9f}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{115f}'
                | '\u{1160}'
                | '\u{3164}'
                | '\u{ffa0}'
                | '\u{2800}'
    ) || CATEGORY.get(c) == GeneralCategory::Format
        || DEFAULT_IGNORABLE.contains(c)
}

/// Writes `c` as `\u{XXXX}` (upper-case hex, at least four digits).
fn push_escaped(out: &mut String, c: char) {
    let _ = write!(out, "\\u{{{:04X}}}", c as u32);
}

/// The one escaper of text shown to a person: every [`is_hidden`] character becomes `\u{XXXX}`;
/// newline and tab stay. Text without one is returned as is (borrowed).
pub fn escape(s: &str) -> Cow<'_, str> {
    let Some(first) = s.find(is_hidden) else {
        return Cow::Borrowed(s);
    };
    let mut out = String::with_capacity(s.len() + 16);
    out.push_str(&s[..first]);
    for c in s[first..].chars() {
        if is_hidden(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// One line of text for a prompt field or a subject, inside double quotes: escaped as by
/// [`escape`], and newline (`\n`), tab (`\t`), `"` and `\` too, so the text can neither end its
/// line or its quotes nor reorder what is shown around it.
// SECURITY(T-APPROVE3): an agent's reason cannot pose as one of the approval prompt's fields.
pub fn escape_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if is_hidden(c) => push_escaped(&mut out, c),
            c => out.push(c),
        }
    }
    out
}

/// The lines of `s` without their endings, where a line ends at `\n`, `\r\n` or a lone `\r`
/// (as a Markdown renderer and the diff read it). A text ending in a line break has no empty
/// last line; `""` has no lines. Every count, number and hunk of a diff uses this one splitter.
// SECURITY(T-CR): a lone CR cannot hide lines from the `+N −M` a reviewer decides on.
pub fn lines(s: &str) -> Lines<'_> {
    Lines { rest: s }
}

/// The iterator of [`lines`].
#[derive(Debug, Clone)]
pub struct Lines<'a> {
    rest: &'a str,
}

impl<'a> Iterator for Lines<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        if self.rest.is_empty() {
            return None;
        }
        let bytes = self.rest.as_bytes();
        match memchr::memchr2(b'\n', b'\r', bytes) {
            None => {
                let line = self.rest;
                self.rest = "";
                Some(line)
            }
            Some(i) => {
                let line = &self.rest[..i];
                let end = if bytes[i] == b'\r' && bytes.get(i + 1) == Some(&b'\n') {
                    i + 2
                } else {
                    i + 1
                };
                self.rest = &self.rest[end..];
                Some(line)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ansi_sequences_become_visible() {
        assert_eq!(escape("a\x1b[2K\x1b[1Ab"), "a\\u{001B}[2K\\u{001B}[1Ab");
        assert_eq!(escape("\x1b]0;title\x07"), "\\u{001B}]0;title\\u{0007}");
        assert_eq!(escape("x\u{9b}31m"), "x\\u{009B}31m");
        assert_eq!(escape("line\r\nnext"), "line\\u{000D}\nnext");
        assert_eq!(escape("del\u{7f}"), "del\\u{007F}");
        assert_eq!(escape("nul\0"), "nul\\u{0000}");
    }

    #[test]
    fn invisible_and_reordering_characters_become_visible() {
        // The red-team's transfer: shown as typed, not as "2345-6789".
        assert_eq!(
            escape("Transfer to account: \u{202e}9876-5432\u{202c}"),
            "Transfer to account: \\u{202E}9876-5432\\u{202C}"
        );
        // Bidi controls, Cf, default-ignorable code points and the blank letters.
        for c in [
            '\u{061C}',
            '\u{200B}',
            '\u{200C}',
            '\u{200D}',
            '\u{200E}',
            '\u{200F}',
            '\u{202A}',
            '\u{202E}',
            '\u{2066}',
            '\u{2069}',
            '\u{FEFF}',
            '\u{00AD}',
            '\u{0600}',
            '\u{1D173}',
            '\u{FE00}',
            '\u{FE0F}',
            '\u{E0100}',
            '\u{E01EF}',
            '\u{034F}',
            '\u{17B5}',
            '\u{180B}',
            '\u{180F}',
            '\u{115F}',
            '\u{1160}',
            '\u{3164}',
            '\u{FFA0}',
            '\u{2800}',
            '\u{E0041}',
            '\u{2028}',
            '\u{2029}',
        ] {
            let shown = escape(&c.to_string()).into_owned();
            assert_eq!(shown, format!("\\u{{{:04X}}}", c as u32), "U+{:04X}", c as u32);
        }
    }

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        for s in [
            "",
            "plain",
            "tab\tand\nnewline",
            "中文 é \u{a0} ß — “quoted”",
            "a\\x1b",
            "עברית عربي",
        ] {
            assert!(matches!(escape(s), Cow::Borrowed(b) if b == s), "{s:?}");
        }
    }

    /// The inverse of `escape` for text without backslashes of its own.
    fn unescape(s: &str) -> String {
        let mut out = String::new();
        let mut rest = s;
        while let Some(i) = rest.find("\\u{") {
            out.push_str(&rest[..i]);
            let tail = &rest[i..];
            let end = tail.find('}').unwrap();
            out.push(char::from_u32(u32::from_str_radix(&tail[3..end], 16).unwrap()).unwrap());
            rest = &tail[end + 1..];
        }
        out.push_str(rest);
        out
    }

    proptest! {
        #[test]
        fn output_holds_nothing_hidden_and_loses_nothing(s in "[\\p{Cc}\\p{Cf}a-zé中\\[;\u{80}-\u{a0} \u{fe00}-\u{fe0f}\u{3164}]{0,64}") {
            let out = escape(&s);
            prop_assert!(out.chars().all(|c| !is_hidden(c)), "{out:?}");
            prop_assert_eq!(unescape(&out), s);
        }

        #[test]
        fn any_text_comes_out_without_controls(s in any::<String>()) {
            let out = escape(&s);
            prop_assert!(out.chars().all(|c| c == '\n' || c == '\t' || !c.is_control()));
            prop_assert!(out.chars().all(|c| !is_hidden(c)));
        }

        #[test]
        fn text_without_hidden_characters_is_unchanged(s in "[^\\p{Cc}\\p{Cf}\\p{Cn}\\p{Zl}\\p{Zp}\\p{Default_Ignorable_Code_Point}\u{115f}\u{1160}\u{3164}\u{ffa0}\u{2800}]*") {
            prop_assert_eq!(escape(&s), Cow::Borrowed(s.as_str()));
        }

        #[test]
        fn lines_split_at_lf_crlf_and_a_lone_cr(s in "[ab\r\n]{0,40}") {
            let ours: Vec<&str> = lines(&s).collect();
            let rebuilt: String = ours.concat();
            prop_assert_eq!(rebuilt, s.replace(['\r', '\n'], ""));
            let breaks = s.matches("\r\n").count() + s.replace("\r\n", "").matches(['\r', '\n']).count();
            let expected = breaks + usize::from(!s.is_empty() && !s.ends_with(['\r', '\n']));
            prop_assert_eq!(ours.len(), expected);
        }
    }

    /// `UNICODE_VERSION` names the data Cargo.lock pins: an upgrade of `icu_properties_data` must
    /// come with a look at its Unicode version (its README says it) and this constant.
    #[test]
    fn the_named_unicode_version_is_the_pinned_datas() {
        let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock")).unwrap();
        let pinned = lock
            .split("[[package]]")
            .find(|p| p.contains("name = \"icu_properties_data\""))
            .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = ")))
            .unwrap();
        assert_eq!((pinned, UNICODE_VERSION), ("\"2.4.0\"", "18.0.0"));
        // A code point the data assigns: U+1FAE9 (Unicode 16), and one it does not: U+0378.
        assert_ne!(CATEGORY.get('\u{1FAE9}'), GeneralCategory::Unassigned);
        assert_eq!(CATEGORY.get('\u{0378}'), GeneralCategory::Unassigned);
    }

    #[test]
    fn a_lone_cr_is_a_line_break() {
        assert_eq!(lines("a\rb\r\nc\nd").collect::<Vec<_>>(), ["a", "b", "c", "d"]);
        assert_eq!(lines("a\n").collect::<Vec<_>>(), ["a"]);
        assert_eq!(lines("a\r").collect::<Vec<_>>(), ["a"]);
        assert_eq!(lines("\r\r").collect::<Vec<_>>(), ["", ""]);
        assert_eq!(lines("\n\r\n\r").collect::<Vec<_>>(), ["", "", ""]);
        assert_eq!(lines("").count(), 0);
        let joined: String = (0..31).map(|i| format!("line {i}\r")).collect();
        assert_eq!(lines(&joined).count(), 31);
    }

    #[test]
    fn escape_line_keeps_text_on_one_quoted_line() {
        assert_eq!(escape_line("plain text"), "plain text");
        assert_eq!(escape_line("a\nb\tc"), "a\\nb\\tc");
        assert_eq!(escape_line("say \"hi\" \\"), "say \\\"hi\\\" \\\\");
        assert_eq!(escape_line("\x1b[31m\r"), "\\u{001B}[31m\\u{000D}");
        assert_eq!(escape_line("\u{202e}evil\u{2028}"), "\\u{202E}evil\\u{2028}");
        assert_eq!(
            escape_line("a\u{200b}b\u{61c}\u{feff}\u{e0041}"),
            "a\\u{200B}b\\u{061C}\\u{FEFF}\\u{E0041}"
        );
        let hostile: String = (0u32..0x3000).filter_map(char::from_u32).collect();
        let out = escape_line(&hostile);
        assert!(!out.chars().any(|c| c.is_control() || is_hidden(c)));
    }
}
