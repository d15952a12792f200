//! Patch edits (`propose_note_patch` with `edits[]`): exact, unique text replacements.

use serde::{Deserialize, Serialize};

/// Replace the one occurrence of `old_text` with `new_text`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Edit {
    /// Must occur exactly once in the text as it stands when this edit is applied.
    pub old_text: String,
    pub new_text: String,
}

/// Why a list of edits cannot be applied. `index` is the 0-based position in the list; no variant
/// carries note text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    #[error("no edits given")]
    Empty,
    #[error("edit {index}: oldText is empty")]
    EmptyOldText { index: usize },
    #[error("edit {index}: oldText does not occur in the note")]
    NotFound { index: usize },
    #[error("edit {index}: oldText occurs {count} times; it must occur exactly once")]
    NotUnique { index: usize, count: usize },
}

/// Applies `edits` in order, each to the result of the ones before it. Each `old_text` must occur
/// exactly once in the text as it stands, counting overlapping occurrences (`aa` occurs twice in
/// `aaa`), so no edit can land somewhere the agent did not mean. All or nothing: on error the
/// caller keeps `base`.
pub fn apply_edits(base: &str, edits: &[Edit]) -> Result<String, EditError> {
    if edits.is_empty() {
        return Err(EditError::Empty);
    }
    let mut text = base.to_owned();
    for (index, edit) in edits.iter().enumerate() {
        let Some(first) = edit.old_text.chars().next() else {
            return Err(EditError::EmptyOldText { index });
        };
        let mut found = text.match_indices(edit.old_text.as_str()).map(|(at, _)| at);
        let Some(at) = found.next() else {
            return Err(EditError::NotFound { index });
        };
        let count = 1 + overlapping_count(&text[at + first.len_utf8()..], &edit.old_text);
        if count > 1 {
            return Err(EditError::NotUnique { index, count });
        }
        text.replace_range(at..at + edit.old_text.len(), &edit.new_text);
    }
    Ok(text)
}

/// Occurrences of a non-empty `needle` in `hay`, overlapping ones included.
fn overlapping_count(hay: &str, needle: &str) -> usize {
    let step = needle.chars().next().map_or(1, char::len_utf8);
    let mut count = 0;
    let mut rest = hay;
    while let Some(at) = rest.find(needle) {
        count += 1;
        rest = &rest[at + step..];
    }
    count
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn e(old: &str, new: &str) -> Edit {
        Edit {
            old_text: old.into(),
            new_text: new.into(),
        }
    }

    #[test]
    fn edit_json_is_camel_case_and_strict() {
        let edit: Edit = serde_json::from_value(json!({"oldText": "a", "newText": "b"})).unwrap();
        assert_eq!(edit, e("a", "b"));
        assert!(
            serde_json::from_value::<Edit>(json!({"oldText": "a", "newText": "b", "all": true})).is_err()
        );
        assert!(serde_json::from_value::<Edit>(json!({"old_text": "a", "new_text": "b"})).is_err());
        assert!(serde_json::from_value::<Edit>(json!({"oldText": "a"})).is_err());
    }

    #[test]
    fn apply_edits_table() {
        let base = "# Title\nalpha beta\ngamma beta\n";
        let cases: Vec<(&str, Vec<Edit>, Result<&str, EditError>)> = vec![
            (
                "unique",
                vec![e("alpha", "ALPHA")],
                Ok("# Title\nALPHA beta\ngamma beta\n"),
            ),
            (
                "absent",
                vec![e("delta", "x")],
                Err(EditError::NotFound { index: 0 }),
            ),
            (
                "duplicate",
                vec![e("beta", "x")],
                Err(EditError::NotUnique { index: 0, count: 2 }),
            ),
            ("empty list", vec![], Err(EditError::Empty)),
            (
                "empty oldText",
                vec![e("alpha", "a"), e("", "x")],
                Err(EditError::EmptyOldText { index: 1 }),
            ),
            (
                "made unique by context",
                vec![e("gamma beta", "gamma BETA")],
                Ok("# Title\nalpha beta\ngamma BETA\n"),
            ),
            (
                "deletion",
                vec![e("# Title\n", "")],
                Ok("alpha beta\ngamma beta\n"),
            ),
            (
                "sequential: the second sees the first's result",
                vec![e("alpha", "delta"), e("delta beta", "epsilon")],
                Ok("# Title\nepsilon\ngamma beta\n"),
            ),
            (
                "sequential: a replacement can make a later oldText ambiguous",
                vec![e("gamma", "alpha"), e("alpha", "x")],
                Err(EditError::NotUnique { index: 1, count: 2 }),
            ),
            (
                "sequential: an earlier edit can consume a later oldText",
                vec![e("alpha beta", "zeta"), e("alpha", "x")],
                Err(EditError::NotFound { index: 1 }),
            ),
            (
                "overlapping edits: the second's text was rewritten by the first",
                vec![e("alpha be", "A"), e("beta\ngamma", "x")],
                Err(EditError::NotFound { index: 1 }),
            ),
            (
                "case matters",
                vec![e("ALPHA", "x")],
                Err(EditError::NotFound { index: 0 }),
            ),
        ];
        for (name, edits, want) in cases {
            assert_eq!(apply_edits(base, &edits), want.map(str::to_owned), "{name}");
        }
    }

    #[test]
    fn overlapping_occurrences_count_as_ambiguous() {
        assert_eq!(
            apply_edits("aaa", &[e("aa", "b")]),
            Err(EditError::NotUnique { index: 0, count: 2 })
        );
        assert_eq!(apply_edits("abab a", &[e("aba", "x")]), Ok("xb a".into()));
        assert_eq!(
            apply_edits("ababa", &[e("aba", "x")]),
            Err(EditError::NotUnique { index: 0, count: 2 })
        );
        assert_eq!(
            apply_edits("aaaa", &[e("a", "b")]),
            Err(EditError::NotUnique { index: 0, count: 4 })
        );
    }

    #[test]
    fn cjk_text_is_edited_on_character_boundaries() {
        let base = "# 注意力\n注意力机制是一种方法。\n自注意力也是。\n";
        assert_eq!(
            apply_edits(base, &[e("一种方法", "一種の方法")]),
            Ok("# 注意力\n注意力机制是一種の方法。\n自注意力也是。\n".to_owned())
        );
        assert_eq!(
            apply_edits(base, &[e("注意力", "x")]),
            Err(EditError::NotUnique { index: 0, count: 3 })
        );
        // Overlap across multi-byte characters: "意意" occurs twice in "意意意".
        assert_eq!(
            apply_edits("意意意", &[e("意意", "x")]),
            Err(EditError::NotUnique { index: 0, count: 2 })
        );
        assert_eq!(apply_edits("🙂 ok", &[e("🙂", "😀")]), Ok("😀 ok".into()));
    }

    #[test]
    fn errors_never_carry_note_text() {
        let err = apply_edits("secret body", &[e("secret body x", "y")]).unwrap_err();
        assert!(!err.to_string().contains("secret"));
    }

    proptest! {
        #[test]
        fn replacing_a_unique_substring_is_a_splice(
            prefix in "[a-c注意 \n]{0,30}",
            old in "[a-z注意力\n]{4,12}",
            suffix in "[a-c注意 \n]{0,30}",
            new in "[a-z注意力\n]{0,12}",
        ) {
            let base = format!("{prefix}{old}{suffix}");
            prop_assume!(overlapping_count(&base, &old) == 1);
            let got = apply_edits(&base, &[Edit { old_text: old.clone(), new_text: new.clone() }]);
            prop_assert_eq!(got, Ok(format!("{prefix}{new}{suffix}")));
        }

        #[test]
        fn any_substring_edit_either_splices_or_is_refused(
            base in "[ab意\n]{0,40}",
            start in 0usize..40,
            len in 1usize..6,
        ) {
            let chars: Vec<char> = base.chars().collect();
            prop_assume!(start < chars.len());
            let old: String = chars[start..(start + len).min(chars.len())].iter().collect();
            let count = overlapping_count(&base, &old);
            let got = apply_edits(&base, &[Edit { old_text: old.clone(), new_text: "X".into() }]);
            if count == 1 {
                prop_assert_eq!(got, Ok(base.replacen(&old, "X", 1)));
            } else {
                prop_assert_eq!(got, Err(EditError::NotUnique { index: 0, count }));
            }
        }
    }
}
