//! Review diffs as people read them: numbered hunks and changed words (`proposals::diff`), and the
//! links a change retargets, found by the vault's one link scanner. The review page and the CLI
//! render these; `get_proposal.diff` stays the plain unified diff.

pub use proposals::diff::*;

/// A link a proposal changes: `from` → `to` in a changed line, or one it adds or removes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkChange {
    /// The link as written before (`None`: added).
    pub from: Option<String>,
    /// The link as written after (`None`: removed).
    pub to: Option<String>,
    /// Its line: in the new text, or in the old one for a removed link.
    pub line: u64,
}

impl std::fmt::Display for LinkChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.from, &self.to) {
            (Some(a), Some(b)) => write!(f, "{a} \u{2192} {b} (line {})", self.line),
            (None, Some(b)) => write!(f, "+ {b} (line {})", self.line),
            (Some(a), None) => write!(f, "\u{2212} {a} (line {})", self.line),
            (None, None) => Ok(()),
        }
    }
}

/// The links each changed line changes: in a removed line paired with an added one, the links
/// only one side has, paired in order (`[[A]]` → `[[B]]`); in any other changed line, its links
/// as added or removed. Wiki links and embeds as written, Markdown links by their destination.
pub fn link_changes(hunks: &[Hunk]) -> Vec<LinkChange> {
    let links = |text: &str| -> Vec<String> {
        vault::links::scan_line(text)
            .into_iter()
            .filter_map(|l| text.get(l.span).map(str::to_owned))
            .collect()
    };
    let mut out = Vec::new();
    for h in hunks {
        let pairs = h.pairs();
        let paired = |i: usize| pairs.iter().any(|(a, b)| *a == i || *b == i);
        for &(i, j) in &pairs {
            let (old, new) = (links(&h.lines[i].text), links(&h.lines[j].text));
            let mut gone: Vec<&String> = old.iter().collect();
            let mut came: Vec<&String> = Vec::new();
            for l in &new {
                match gone.iter().position(|g| *g == l) {
                    Some(k) => {
                        gone.remove(k);
                    }
                    None => came.push(l),
                }
            }
            let line = h.lines[j].new.unwrap_or(0);
            for k in 0..gone.len().max(came.len()) {
                out.push(LinkChange {
                    from: gone.get(k).map(|s| (*s).clone()),
                    to: came.get(k).map(|s| (*s).clone()),
                    line: if k < came.len() {
                        line
                    } else {
                        h.lines[i].old.unwrap_or(0)
                    },
                });
            }
        }
        for (i, l) in h.lines.iter().enumerate() {
            if paired(i) || l.kind == LineKind::Context {
                continue;
            }
            for link in links(&l.text) {
                let (from, to, line) = match l.kind {
                    LineKind::Added => (None, Some(link), l.new),
                    _ => (Some(link), None, l.old),
                };
                out.push(LinkChange {
                    from,
                    to,
                    line: line.unwrap_or(0),
                });
            }
        }
    }
    out.sort_by_key(|c| c.line);
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_retargeted_link_is_one_change_and_new_or_removed_links_are_listed() {
        let old = "# N\n\nsee [[Alpha]] and [[Keep]]\nold line with [[Gone]]\nplain\n";
        let new = "# N\n\nsee [[Beta]] and [[Keep]]\nplain\nnew line with [x](notes/x.md)\n";
        let shown: Vec<String> = link_changes(&hunks(&unified_diff("n.md", old, new)))
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            shown,
            [
                "[[Alpha]] \u{2192} [[Beta]] (line 3)",
                "\u{2212} [[Gone]] (line 4)",
                "+ notes/x.md (line 5)"
            ]
        );
        // Text that changes without touching a link changes no link.
        let same = link_changes(&hunks(&unified_diff("n.md", "a [[A]] b\n", "a [[A]] c\n")));
        assert!(same.is_empty(), "{same:?}");
    }
}
