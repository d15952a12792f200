//! Text that reaches a person (CLI output, the review page, git messages, approval prompts): an
//! agent's reason, a note's diff or an echoed argument must not drive the terminal (SPEC §4).

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` is escaped: C0 controls except newline and tab, DEL, and C1 controls. CR is
/// escaped too: on a terminal it returns to the line start, so text after it overwrites what a
/// reviewer was meant to see.
fn needs_escape(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        '\u{0}'..='\u{1f}' | '\u{7f}' | '\u{80}'..='\u{9f}' => true,
        _ => false,
    }
}

/// Replaces every control character but `\n` and `\t` with a visible escape: `\x1b` for C0 and
/// DEL, `\u{9b}` for C1. Text without one is returned as is (borrowed).
// SECURITY(T-TERM): an ANSI sequence (cursor up, erase line, OSC title, 8-bit CSI) in a reason or
// a diff cannot hide or forge lines of what the reviewer reads.
pub fn escape_controls(s: &str) -> Cow<'_, str> {
    let Some(first) = s.find(needs_escape) else {
        return Cow::Borrowed(s);
    };
    let mut out = String::with_capacity(s.len() + 8);
    out.push_str(&s[..first]);
    for c in s[first..].chars() {
        if !needs_escape(c) {
            out.push(c);
        } else if (c as u32) < 0x80 {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
    Cow::Owned(out)
}

/// One line of text for a prompt field, inside double quotes: every control character is
/// escaped as by [`escape_controls`], and so are newline (`\n`), tab (`\t`), the line and paragraph
/// separators and the bidirectional overrides (`\u{202e}`), `"` and `\`, so the text can neither
/// end its line or its quotes nor reorder what is shown around it.
// SECURITY(T-APPROVE3): an agent's reason cannot pose as one of the approval prompt's fields.
pub fn escape_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            // Line and paragraph separators, and the invisible format characters (Unicode `Cf`:
            // bidi marks and overrides, zero-width spaces and joiners, word joiner and invisible
            // operators, BOM, interlinear annotation, tags).
            '\u{00ad}'
            | '\u{061c}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{e0000}'..='\u{e007f}' => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c if needs_escape(c) => out.push_str(&escape_controls(c.encode_utf8(&mut [0; 4]))),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ansi_sequences_become_visible() {
        assert_eq!(escape_controls("a\x1b[2K\x1b[1Ab"), "a\\x1b[2K\\x1b[1Ab");
        assert_eq!(escape_controls("\x1b]0;title\x07"), "\\x1b]0;title\\x07");
        assert_eq!(escape_controls("x\u{9b}31m"), "x\\u{9b}31m");
        assert_eq!(escape_controls("line\r\nnext"), "line\\x0d\nnext");
        assert_eq!(escape_controls("del\u{7f}"), "del\\x7f");
        assert_eq!(escape_controls("nul\0"), "nul\\x00");
    }

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        for s in [
            "",
            "plain",
            "tab\tand\nnewline",
            "中文 é \u{a0} \u{202e}",
            "a\\x1b",
        ] {
            assert!(matches!(escape_controls(s), Cow::Borrowed(b) if b == s), "{s:?}");
        }
    }

    /// The inverse of `escape_controls` for text without backslashes of its own.
    fn unescape(s: &str) -> String {
        let mut out = String::new();
        let mut rest = s;
        while let Some(i) = rest.find('\\') {
            out.push_str(&rest[..i]);
            let tail = &rest[i..];
            let (code, len) = if let Some(hex) = tail.strip_prefix("\\x") {
                (u32::from_str_radix(&hex[..2], 16).unwrap(), 4)
            } else {
                let end = tail.find('}').unwrap();
                (u32::from_str_radix(&tail[3..end], 16).unwrap(), end + 1)
            };
            out.push(char::from_u32(code).unwrap());
            rest = &tail[len..];
        }
        out.push_str(rest);
        out
    }

    proptest! {
        #[test]
        fn output_holds_no_control_but_newline_and_tab(s in "[\\p{Cc}a-zé中\\[;\u{80}-\u{a0} ]{0,64}") {
            let out = escape_controls(&s);
            prop_assert!(out.chars().all(|c| c == '\n' || c == '\t' || !c.is_control()), "{out:?}");
            // Nothing is lost: reading the escapes back gives the input.
            prop_assert_eq!(unescape(&out), s);
        }

        #[test]
        fn any_text_comes_out_without_controls(s in any::<String>()) {
            let out = escape_controls(&s);
            prop_assert!(out.chars().all(|c| c == '\n' || c == '\t' || !c.is_control()));
        }

        #[test]
        fn text_without_controls_is_unchanged(s in "[^\\p{Cc}]*|[^\\p{Cc}]*[\\n\\t][^\\p{Cc}]*") {
            prop_assert_eq!(escape_controls(&s), Cow::Borrowed(s.as_str()));
        }
    }

    #[test]
    fn escape_line_keeps_text_on_one_quoted_line() {
        assert_eq!(escape_line("plain text"), "plain text");
        assert_eq!(escape_line("a\nb\tc"), "a\\nb\\tc");
        assert_eq!(escape_line("say \"hi\" \\"), "say \\\"hi\\\" \\\\");
        assert_eq!(escape_line("\x1b[31m\r"), "\\x1b[31m\\x0d");
        assert_eq!(escape_line("\u{202e}evil\u{2028}"), "\\u{202e}evil\\u{2028}");
        assert_eq!(
            escape_line("a\u{200b}b\u{61c}\u{feff}\u{e0041}"),
            "a\\u{200b}b\\u{61c}\\u{feff}\\u{e0041}"
        );
        let hostile: String = (0u32..0x3000).filter_map(char::from_u32).collect();
        let out = escape_line(&hostile);
        assert!(
            !out.chars()
                .any(|c| c.is_control() || c == '\u{2028}' || c == '\u{202e}')
        );
    }
}
