//! Review diffs: what a person reads in `patch/<slug>.diff` and `get_proposal.diff`.

use similar::TextDiff;

/// Line-based unified diff of `old` → `new` with headers `--- a/<path>` and `+++ b/<path>` and three
/// lines of context; for a new note pass `old = ""`. Identical texts give `""` (no headers, no
/// hunks). A last line without a newline is marked `\ No newline at end of file`, as `diff -u` does.
///
/// No deadline is set: a deadline needs a clock, and this crate has none; `similar`'s Myers
/// heuristics bound the work on large, unrelated texts instead.
pub fn unified_diff(path: &str, old: &str, new: &str) -> String {
    TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn identical_texts_have_no_hunks() {
        for text in ["", "a\n", "注意\nb", "x\n\n\ny"] {
            let d = unified_diff("z/a.md", text, text);
            assert!(!d.contains("@@"), "{d:?}");
            assert_eq!(d, "");
        }
    }

    #[test]
    fn new_note_diff_adds_every_line() {
        let d = unified_diff("z/attention.md", "", "# Attention\nbody\n");
        assert_eq!(
            d,
            "--- a/z/attention.md\n+++ b/z/attention.md\n@@ -0,0 +1,2 @@\n+# Attention\n+body\n"
        );
    }

    #[test]
    fn one_changed_line_has_three_lines_of_context() {
        let old: String = (1..=10).map(|i| format!("line {i}\n")).collect();
        let new = old.replace("line 5\n", "line five\n");
        let d = unified_diff("n.md", &old, &new);
        assert_eq!(
            d,
            "--- a/n.md\n+++ b/n.md\n@@ -2,7 +2,7 @@\n\
             \x20line 2\n line 3\n line 4\n-line 5\n+line five\n line 6\n line 7\n line 8\n"
        );
    }

    #[test]
    fn missing_final_newline_is_marked() {
        let d = unified_diff("n.md", "a\n", "a\nb");
        assert_eq!(
            d,
            "--- a/n.md\n+++ b/n.md\n@@ -1 +1,2 @@\n a\n+b\n\\ No newline at end of file\n"
        );
    }

    /// A minimal `patch` for the property below: applies a unified diff as `unified_diff` writes it.
    fn apply_unified(old: &str, diff: &str) -> String {
        let old_lines: Vec<&str> = old.split_inclusive('\n').collect();
        let lines: Vec<&str> = diff.split_inclusive('\n').skip(2).collect();
        let (mut out, mut pos, mut i) = (String::new(), 0usize, 0usize);
        while i < lines.len() {
            let header = lines[i].strip_prefix("@@ -").unwrap();
            let range = header.split(' ').next().unwrap();
            let (start, len) = match range.split_once(',') {
                Some((s, l)) => (s.parse::<usize>().unwrap(), l.parse::<usize>().unwrap()),
                None => (range.parse::<usize>().unwrap(), 1),
            };
            let first = if len == 0 { start } else { start - 1 };
            out.extend(old_lines[pos..first].iter().copied());
            pos = first;
            i += 1;
            while i < lines.len() && !lines[i].starts_with("@@ ") {
                let (tag, mut value) = lines[i].split_at(1);
                i += 1;
                if lines.get(i).is_some_and(|l| l.starts_with("\\ No newline")) {
                    value = value.strip_suffix('\n').unwrap();
                    i += 1;
                }
                match tag {
                    " " => {
                        assert_eq!(old_lines[pos], value);
                        out.push_str(value);
                        pos += 1;
                    }
                    "-" => {
                        assert_eq!(old_lines[pos], value);
                        pos += 1;
                    }
                    "+" => out.push_str(value),
                    other => panic!("unexpected line tag {other:?}"),
                }
            }
        }
        out.extend(old_lines[pos..].iter().copied());
        out
    }

    fn text() -> impl Strategy<Value = String> {
        (
            prop::collection::vec(
                prop::sample::select(vec!["a", "b", "c", "注意", "", "- x", "+ y", "@@ z"]),
                0..30,
            ),
            any::<bool>(),
        )
            .prop_map(|(lines, final_newline)| {
                let mut s = lines.join("\n");
                if final_newline && !s.is_empty() {
                    s.push('\n');
                }
                s
            })
    }

    proptest! {
        #[test]
        fn applying_the_diff_to_its_base_gives_the_new_text(old in text(), new in text()) {
            let d = unified_diff("n.md", &old, &new);
            prop_assert_eq!(d.is_empty(), old == new);
            if !d.is_empty() {
                prop_assert!(d.starts_with("--- a/n.md\n+++ b/n.md\n@@ "));
            }
            prop_assert_eq!(apply_unified(&old, &d), new);
        }
    }
}
