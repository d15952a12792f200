//! Review diffs: what a person reads in `patch/<slug>.diff` and `get_proposal.diff`.

use similar::{ChangeTag, TextDiff};

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

/// What one line of a hunk does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineKind {
    Context,
    Added,
    Removed,
}

/// One line of a hunk with its numbers in the old and the new text (1-based), its text without
/// the line break, and whether the file ends after it without one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffLine {
    pub kind: LineKind,
    pub old: Option<u64>,
    pub new: Option<u64>,
    pub text: String,
    pub no_newline: bool,
}

/// One `@@` hunk of a unified diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    pub header: String,
    pub lines: Vec<DiffLine>,
}

impl Hunk {
    /// Each removed line paired with the added line that replaces it (the pairing of
    /// [`Hunk::side_by_side`]), as indexes into `lines`.
    pub fn pairs(&self) -> Vec<(usize, usize)> {
        self.rows()
            .into_iter()
            .filter_map(|r| match r {
                (Some(i), Some(j)) if self.lines[i].kind == LineKind::Removed => Some((i, j)),
                _ => None,
            })
            .collect()
    }

    /// The word marks of each removed line and the added line paired with it ([`Hunk::pairs`]),
    /// by their indexes in the hunk, while `budget` (bytes of paired lines, see
    /// [`MAX_MARKED_BYTES`]) lasts; lines over [`MAX_MARKED_LINE`] bytes are left out.
    pub fn marks(&self, budget: &mut usize) -> std::collections::HashMap<usize, Vec<Piece>> {
        let mut out = std::collections::HashMap::new();
        for (i, j) in self.pairs() {
            let (old, new) = (&self.lines[i].text, &self.lines[j].text);
            let cost = old.len() + new.len();
            if old.len().max(new.len()) <= MAX_MARKED_LINE && cost <= *budget {
                *budget -= cost;
                let (o, n) = words(old, new);
                out.insert(i, o);
                out.insert(j, n);
            }
        }
        out
    }

    /// The hunk as side-by-side rows of line indexes: what [`Hunk::side_by_side`] pairs.
    pub fn rows(&self) -> Vec<(Option<usize>, Option<usize>)> {
        let mut rows = Vec::new();
        let mut i = 0;
        while i < self.lines.len() {
            if self.lines[i].kind == LineKind::Context {
                rows.push((Some(i), Some(i)));
                i += 1;
                continue;
            }
            let run = |from: usize, kind: LineKind| {
                self.lines[from..].iter().take_while(|l| l.kind == kind).count()
            };
            let removed = run(i, LineKind::Removed);
            let added = run(i + removed, LineKind::Added);
            for k in 0..removed.max(added) {
                rows.push((
                    (k < removed).then_some(i + k),
                    (k < added).then_some(i + removed + k),
                ));
            }
            i += removed + added;
        }
        rows
    }

    /// The hunk as side-by-side rows: context on both sides, each run of removed lines paired
    /// with the run of added lines that follows it, the shorter side padded with `None`.
    pub fn side_by_side(&self) -> Vec<(Option<&DiffLine>, Option<&DiffLine>)> {
        self.rows()
            .into_iter()
            .map(|(o, n)| (o.map(|i| &self.lines[i]), n.map(|j| &self.lines[j])))
            .collect()
    }
}

/// The longest line whose changed words are marked: a word diff of two very long lines
/// (minified text) would cost more than it shows.
pub const MAX_MARKED_LINE: usize = 4096;

/// At most this many bytes of paired lines are word-diffed in one diff; later pairs stay
/// unmarked. SECURITY(T-DIFF1): a word diff costs up to the square of a line's words, so an
/// agent's proposal of thousands of long rewritten lines cannot make a reviewer's page slow.
pub const MAX_MARKED_BYTES: usize = 256 * 1024;

/// One piece of a changed line: its text, and whether the line it is paired with lacks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub text: String,
    pub changed: bool,
}

/// The changed words of a removed line and of the added line that replaces it (paired by
/// [`Hunk::side_by_side`]): `similar`'s word diff, as pieces on each side, neighbours of one kind
/// joined. Lines with no word in common are one unmarked piece each: marking every word says
/// nothing the line's own tint does not.
pub fn words(old: &str, new: &str) -> (Vec<Piece>, Vec<Piece>) {
    fn push(side: &mut Vec<Piece>, text: &str, changed: bool) {
        match side.last_mut() {
            Some(last) if last.changed == changed => last.text.push_str(text),
            _ => side.push(Piece {
                text: text.to_owned(),
                changed,
            }),
        }
    }
    let whole = |s: &str| {
        vec![Piece {
            text: s.to_owned(),
            changed: false,
        }]
    };
    // Unicode word boundaries (UAX #29): punctuation is not part of a word, and CJK text, which has
    // no spaces, is marked by the word rather than as one long "word".
    let diff = TextDiff::from_unicode_words(old, new);
    let (mut o, mut n) = (Vec::new(), Vec::new());
    let mut shared = false;
    for change in diff.iter_all_changes() {
        let text = change.value();
        match change.tag() {
            ChangeTag::Equal => {
                // Spaces and punctuation in common are no word in common.
                shared |= text.chars().any(char::is_alphanumeric);
                push(&mut o, text, false);
                push(&mut n, text, false);
            }
            ChangeTag::Delete => push(&mut o, text, true),
            ChangeTag::Insert => push(&mut n, text, true),
        }
    }
    if shared { (o, n) } else { (whole(old), whole(new)) }
}

/// One frontmatter key a change touches, as a reviewer reads it: `status: draft → done`,
/// `tags: +x −y`, `due: — → 2026-12-24` (added), `owner: ann → —` (removed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldChange {
    pub key: String,
    pub before: Option<serde_json::Value>,
    pub after: Option<serde_json::Value>,
}

impl std::fmt::Display for FieldChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use serde_json::Value;
        fn shown(v: &Value) -> String {
            match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            }
        }
        match (&self.before, &self.after) {
            (Some(Value::Array(a)), Some(Value::Array(b))) => {
                let added: Vec<String> = b.iter().filter(|x| !a.contains(x)).map(shown).collect();
                let removed: Vec<String> = a.iter().filter(|x| !b.contains(x)).map(shown).collect();
                let mut parts: Vec<String> = added.iter().map(|x| format!("+{x}")).collect();
                parts.extend(removed.iter().map(|x| format!("\u{2212}{x}")));
                if parts.is_empty() {
                    // The same items in another order.
                    parts.push("reordered".to_owned());
                }
                write!(f, "{}: {}", self.key, parts.join(" "))
            }
            (before, after) => {
                let side = |v: &Option<Value>| v.as_ref().map_or_else(|| "\u{2014}".to_owned(), shown);
                write!(f, "{}: {} \u{2192} {}", self.key, side(before), side(after))
            }
        }
    }
}

/// The frontmatter keys whose values differ between `before` and `after` (parsed YAML), in key
/// order: what "frontmatter changes are listed key by key" lists.
pub fn field_changes(
    before: &serde_json::Map<String, serde_json::Value>,
    after: &serde_json::Map<String, serde_json::Value>,
) -> Vec<FieldChange> {
    let mut keys: Vec<&String> = before.keys().chain(after.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| before.get(*k) != after.get(*k))
        .map(|k| FieldChange {
            key: k.clone(),
            before: before.get(k).cloned(),
            after: after.get(k).cloned(),
        })
        .collect()
}

/// The hunks of a diff written by [`unified_diff`], with line numbers: what a reviewer's page
/// renders, so it shows exactly the diff the CLI prints. Headers and anything that is not a
/// hunk line are skipped. Lines split as `similar` wrote them, at `\n`, `\r\n` or a lone `\r`
/// ([`policy::text::lines`]), so a CR-joined run of lines counts as the lines it is.
// SECURITY(T-CR): a lone CR can neither hide added lines from `+N −M` nor swallow a hunk header.
pub fn hunks(diff: &str) -> Vec<Hunk> {
    let mut out: Vec<Hunk> = Vec::new();
    let (mut old_no, mut new_no) = (0u64, 0u64);
    for line in policy::text::lines(diff) {
        if let Some(rest) = line.strip_prefix("@@ -") {
            let mut ranges = rest.split(' ');
            let start = |r: Option<&str>| -> u64 {
                r.and_then(|r| r.trim_start_matches('+').split(',').next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0)
            };
            let (o, n) = (start(ranges.next()), start(ranges.next()));
            // `-0,0` names the line before the first: the next line is 1.
            old_no = o.max(1);
            new_no = n.max(1);
            out.push(Hunk {
                header: line.to_owned(),
                lines: Vec::new(),
            });
            continue;
        }
        let Some(hunk) = out.last_mut() else {
            continue;
        };
        if line.starts_with('\\') {
            if let Some(last) = hunk.lines.last_mut() {
                last.no_newline = true;
            }
            continue;
        }
        let (kind, text) = match line.split_at_checked(1) {
            Some((" ", t)) => (LineKind::Context, t),
            Some(("+", t)) => (LineKind::Added, t),
            Some(("-", t)) => (LineKind::Removed, t),
            // An empty context line some tools write without its space.
            None => (LineKind::Context, ""),
            Some(_) => continue,
        };
        let (old, new) = match kind {
            LineKind::Context => (Some(old_no), Some(new_no)),
            LineKind::Added => (None, Some(new_no)),
            LineKind::Removed => (Some(old_no), None),
        };
        if old.is_some() {
            old_no += 1;
        }
        if new.is_some() {
            new_no += 1;
        }
        hunk.lines.push(DiffLine {
            kind,
            old,
            new,
            text: text.to_owned(),
            no_newline: false,
        });
    }
    out
}

/// The diff as a terminal shows it (`inbox show`, `apply`): the unified diff's lines, with the
/// words that changed inside a changed line marked `[-old-]` and `{+new+}`, as `git diff
/// --word-diff=plain` marks them. Each item is one terminal line (split as [`hunks`] splits).
pub fn for_terminal(diff: &str) -> Vec<String> {
    let mut out: Vec<String> = policy::text::lines(diff)
        .take_while(|l| !l.starts_with("@@"))
        .map(str::to_owned)
        .collect();
    let mut budget = MAX_MARKED_BYTES;
    for h in hunks(diff) {
        out.push(h.header.clone());
        let marks = h.marks(&mut budget);
        for (i, l) in h.lines.iter().enumerate() {
            let sign = match l.kind {
                LineKind::Context => ' ',
                LineKind::Added => '+',
                LineKind::Removed => '-',
            };
            let text = match marks.get(&i) {
                Some(pieces) => pieces
                    .iter()
                    .map(|p| match (p.changed, l.kind) {
                        (false, _) => p.text.clone(),
                        (true, LineKind::Added) => format!("{{+{}+}}", p.text),
                        (true, _) => format!("[-{}-]", p.text),
                    })
                    .collect(),
                None => l.text.clone(),
            };
            out.push(format!("{sign}{text}"));
            if l.no_newline {
                out.push("\\ No newline at end of file".to_owned());
            }
        }
    }
    out
}

/// Lines added and removed (`+N −M`).
pub fn counts(hunks: &[Hunk]) -> (u64, u64) {
    let count = |k| {
        hunks
            .iter()
            .flat_map(|h| &h.lines)
            .filter(|l| l.kind == k)
            .count() as u64
    };
    (count(LineKind::Added), count(LineKind::Removed))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_lone_cr_is_a_line_break_in_hunks_and_counts() {
        let old = "# Note\nkeep\n";
        let added: String = (0..31).map(|i| format!("hidden {i}\r")).collect();
        let new = format!("# Note\n{added}\n");
        let h = hunks(&unified_diff("n.md", old, &new));
        // 31 CR-joined lines are added (the last ends in CR LF); "keep" goes.
        assert_eq!(counts(&h), (31, 1));
        let texts: Vec<&str> = h[0].lines.iter().map(|l| l.text.as_str()).collect();
        assert!(
            texts.contains(&"hidden 0") && texts.contains(&"hidden 30"),
            "{texts:?}"
        );
        // A second hunk after a CR-ended line is still its own hunk.
        let long: String = (0..20).map(|i| format!("l{i}\r")).collect();
        let changed = long.replace("l1\r", "L1\r").replace("l18\r", "L18\r");
        let h = hunks(&unified_diff("n.md", &long, &changed));
        assert_eq!(h.len(), 2, "{h:?}");
        assert_eq!(counts(&h), (2, 2));
    }

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

    #[test]
    fn hunks_number_lines_and_pair_changes_side_by_side() {
        let old: String = (1..=10).map(|i| format!("line {i}\n")).collect();
        let new = old.replace("line 5\n", "line five\nline 5b\n");
        let h = hunks(&unified_diff("n.md", &old, &new));
        assert_eq!(h.len(), 1);
        let nums: Vec<_> = h[0].lines.iter().map(|l| (l.kind, l.old, l.new)).collect();
        assert_eq!(nums[2], (LineKind::Context, Some(4), Some(4)));
        assert_eq!(nums[3], (LineKind::Removed, Some(5), None));
        assert_eq!(nums[4], (LineKind::Added, None, Some(5)));
        assert_eq!(nums[5], (LineKind::Added, None, Some(6)));
        assert_eq!(nums[6], (LineKind::Context, Some(6), Some(7)));
        let rows = h[0].side_by_side();
        assert_eq!(rows.len(), 8);
        assert_eq!(rows[3].0.map(|l| l.text.as_str()), Some("line 5"));
        assert_eq!(rows[3].1.map(|l| l.text.as_str()), Some("line five"));
        assert_eq!(
            (rows[4].0, rows[4].1.map(|l| l.text.as_str())),
            (None, Some("line 5b"))
        );
        assert_eq!(counts(&h), (2, 1));
    }

    #[test]
    fn hunks_of_a_new_note_start_at_line_one_and_mark_a_missing_newline() {
        let h = hunks(&unified_diff("n.md", "", "a\nb"));
        let lines = &h[0].lines;
        assert_eq!((lines[0].new, lines[1].new), (Some(1), Some(2)));
        assert!(lines[1].no_newline && !lines[0].no_newline);
        assert!(hunks("").is_empty());
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

        #[test]
        fn every_hunk_line_names_its_lines_in_both_texts(old in text(), new in text()) {
            let (o, n): (Vec<&str>, Vec<&str>) = (old.lines().collect(), new.lines().collect());
            for h in hunks(&unified_diff("n.md", &old, &new)) {
                for l in &h.lines {
                    if let Some(i) = l.old {
                        prop_assert_eq!(o.get(i as usize - 1).copied(), Some(l.text.as_str()));
                    }
                    if let Some(i) = l.new {
                        prop_assert_eq!(n.get(i as usize - 1).copied(), Some(l.text.as_str()));
                    }
                }
            }
        }
    }

    #[test]
    fn words_marks_only_what_changed_in_a_line() {
        let (o, n) = words(
            "Subtract max(x) before exponentiating for stability.",
            "Subtract max(x) before exponentiating for overflow.",
        );
        let marked = |side: &[Piece]| -> Vec<String> {
            side.iter()
                .filter(|p| p.changed)
                .map(|p| p.text.clone())
                .collect()
        };
        // The full stop is no part of the word (Unicode word boundaries).
        assert_eq!(marked(&o), ["stability"]);
        assert_eq!(marked(&n), ["overflow"]);
        let joined = |side: &[Piece]| side.iter().map(|p| p.text.as_str()).collect::<String>();
        assert_eq!(joined(&o), "Subtract max(x) before exponentiating for stability.");
        assert_eq!(joined(&n), "Subtract max(x) before exponentiating for overflow.");
        // A link whose target changed: its target is the changed word (the link itself is listed
        // as a link change).
        let (o, n) = words("see [[Alpha]] here", "see [[Beta]] here");
        assert_eq!(
            (marked(&o), marked(&n)),
            (vec!["Alpha".to_owned()], vec!["Beta".to_owned()])
        );
        // CJK has no spaces: the changed characters are marked, not the whole line.
        let (o, n) = words(
            "注意力是稀缺资源，学习时要减少切换。",
            "注意力是宝贵资源，学习时要减少切换。",
        );
        assert_eq!(
            (marked(&o), marked(&n)),
            (vec!["稀缺".to_owned()], vec!["宝贵".to_owned()])
        );
        // Nothing in common: no marks (a shared full stop is no word).
        let (o, n) = words("one two", "three four");
        assert!(o.iter().chain(&n).all(|p| !p.changed));
        let (o, n) = words("One two.", "Three four.");
        assert!(o.iter().chain(&n).all(|p| !p.changed));
    }

    #[test]
    fn a_terminal_diff_marks_changed_words_and_keeps_every_other_line() {
        let old = "a\nkeep this line\nthe quick brown fox\nz\n";
        let new = "a\nkeep this line\nthe quick red fox\nadded\nz";
        let diff = unified_diff("n.md", old, new);
        let shown = for_terminal(&diff);
        let plain: Vec<&str> = policy::text::lines(&diff).collect();
        assert_eq!(shown.len(), plain.len(), "{shown:#?}\n{plain:#?}");
        assert!(
            shown.contains(&"-the quick [-brown-] fox".to_owned()),
            "{shown:#?}"
        );
        assert!(shown.contains(&"+the quick {+red+} fox".to_owned()), "{shown:#?}");
        assert!(shown.contains(&"+added".to_owned()), "{shown:#?}");
        assert!(shown.contains(&" keep this line".to_owned()), "{shown:#?}");
        // Lines that are not a changed pair read exactly as in the unified diff.
        for (s, p) in shown.iter().zip(&plain) {
            if !s.contains("[-") && !s.contains("{+") {
                assert_eq!(s, p);
            }
        }
    }

    #[test]
    fn frontmatter_changes_read_key_by_key() {
        let map = |v: serde_json::Value| v.as_object().unwrap().clone();
        let before = map(serde_json::json!({"status": "draft", "tags": ["a", "b"], "owner": "ann", "n": 1}));
        let after =
            map(serde_json::json!({"status": "done", "tags": ["b", "x"], "due": "2026-12-24", "n": 1}));
        let shown: Vec<String> = field_changes(&before, &after)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            shown,
            [
                "due: \u{2014} \u{2192} 2026-12-24",
                "owner: ann \u{2192} \u{2014}",
                "status: draft \u{2192} done",
                "tags: +x \u{2212}a",
            ]
        );
        assert!(field_changes(&before, &before).is_empty());
    }

    #[test]
    fn word_marks_stop_at_the_diffs_budget() {
        let line = |w: &str| format!("{} {w}\n", "word ".repeat(799));
        let old: String = (0..100).map(|_| line("old")).collect();
        let new: String = (0..100).map(|_| line("new")).collect();
        let hs = hunks(&unified_diff("n.md", &old, &new));
        let mut budget = MAX_MARKED_BYTES;
        let marked: usize = hs.iter().map(|h| h.marks(&mut budget).len() / 2).sum();
        let per_pair = line("old").len() - 1 + line("new").len() - 1;
        assert_eq!(
            marked,
            MAX_MARKED_BYTES / per_pair,
            "pairs marked within the budget"
        );
        assert!(marked < 100);
        // The terminal shows every line whatever the budget.
        assert_eq!(
            for_terminal(&unified_diff("n.md", &old, &new)).len(),
            policy::text::lines(&unified_diff("n.md", &old, &new)).count()
        );
    }
}
