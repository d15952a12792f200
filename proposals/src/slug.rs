//! Slugs: the inbox file-name stem of a proposal, readable by people and safe on every file system.

/// Longest stem part of a slug, in bytes (all ASCII).
const MAX_STEM: usize = 40;

/// `<date>-<stem>-<id8>`, e.g. `20261129-attention-3f9a1c2e`; only `[a-z0-9-]`, at most 58 bytes,
/// never a leading, trailing or doubled `-`.
///
/// - date: the first eight ASCII digits of `created_at` (`2026-11-29T…` → `20261129`), fewer if it
///   has fewer, `00000000` if it has none;
/// - stem: the target's file name without its last extension (as `Path::file_stem`), ASCII
///   letters and digits lowercased, every run of other ASCII characters one `-`, non-ASCII
///   characters dropped, cut to 40 bytes without ending on `-`; `note` when nothing is left;
/// - id8: the last eight hex digits of `id` (a UUIDv7's random tail), lowercased, `00000000` if none.
///
/// The date and stem are for people; uniqueness comes from the id, and the inbox still has to
/// refuse to overwrite an existing file.
pub fn slug(target: &str, id: &str, created_at: &str) -> String {
    let date: String = created_at.chars().filter(char::is_ascii_digit).take(8).collect();
    let hex: Vec<char> = id
        .chars()
        .filter(char::is_ascii_hexdigit)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    let id8: String = hex[hex.len().saturating_sub(8)..].iter().collect();
    let or_zeros = |s: String| if s.is_empty() { "00000000".to_owned() } else { s };
    format!("{}-{}-{}", or_zeros(date), kebab_stem(target), or_zeros(id8))
}

fn kebab_stem(target: &str) -> String {
    let name = target.rsplit(['/', '\\']).next().unwrap_or(target);
    let stem = match name.rfind('.') {
        Some(dot) if dot > 0 => &name[..dot],
        _ => name,
    };
    let mut out = String::new();
    let mut dash = false;
    for c in stem.chars() {
        if c.is_ascii_alphanumeric() {
            let dash = std::mem::take(&mut dash) && !out.is_empty();
            // Stop rather than end on a dash or pass the limit.
            if out.len() + usize::from(dash) + 1 > MAX_STEM {
                break;
            }
            if dash {
                out.push('-');
            }
            out.push(c.to_ascii_lowercase());
        } else if c.is_ascii() {
            dash = true;
        }
        // Non-ASCII: dropped, not a separator (`Café` → `caf`).
    }
    if out.is_empty() { "note".to_owned() } else { out }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::*;

    const ID: &str = "0193a5b0-0000-7000-8000-00003f9a1c2e";
    const AT: &str = "2026-11-29T10:00:00Z";

    #[test]
    fn slug_table() {
        let cases = [
            ("z/attention.md", "20261129-attention-3f9a1c2e"),
            (
                "Attention Is All You Need.md",
                "20261129-attention-is-all-you-need-3f9a1c2e",
            ),
            ("a/b/  --Weird__Name!!  .md", "20261129-weird-name-3f9a1c2e"),
            ("notes/注意力.md", "20261129-note-3f9a1c2e"),
            ("notes/注意 attention.md", "20261129-attention-3f9a1c2e"),
            ("Café au lait.md", "20261129-caf-au-lait-3f9a1c2e"),
            ("v1.2.notes.md", "20261129-v1-2-notes-3f9a1c2e"),
            // As `Path::file_stem`: a leading dot does not start an extension.
            (".md", "20261129-md-3f9a1c2e"),
            ("", "20261129-note-3f9a1c2e"),
            ("dir.d/README", "20261129-readme-3f9a1c2e"),
            ("win\\path\\Note.md", "20261129-note-3f9a1c2e"),
        ];
        for (target, want) in cases {
            assert_eq!(slug(target, ID, AT), want, "{target:?}");
        }
    }

    #[test]
    fn long_stems_are_cut_to_forty_without_a_trailing_dash() {
        let s = slug(&format!("{}.md", "a".repeat(100)), ID, AT);
        assert_eq!(s, format!("20261129-{}-3f9a1c2e", "a".repeat(40)));
        // 39 letters, then a separator: the dash would be the 40th byte, so it goes.
        let s = slug(&format!("{} bcd.md", "a".repeat(39)), ID, AT);
        assert_eq!(s, format!("20261129-{}-3f9a1c2e", "a".repeat(39)));
    }

    #[test]
    fn odd_ids_and_times_still_give_a_slug() {
        assert_eq!(slug("a.md", "", ""), "00000000-a-00000000");
        assert_eq!(slug("a.md", "XYZ-1f", "1999"), "1999-a-1f");
        assert_eq!(slug("a.md", "ABCDEF0123", AT), "20261129-a-cdef0123");
    }

    proptest! {
        #[test]
        fn slug_is_always_lowercase_ascii_kebab_of_at_most_60_bytes(
            target in any::<String>(),
            id in any::<String>(),
            created_at in any::<String>(),
        ) {
            let s = slug(&target, &id, &created_at);
            prop_assert!(!s.is_empty() && s.len() <= 60, "{s:?}");
            prop_assert!(s.bytes().all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-')), "{s:?}");
            prop_assert!(!s.starts_with('-') && !s.ends_with('-') && !s.contains("--"), "{s:?}");
            prop_assert_eq!(s.split('-').count() >= 3, true);
        }

        #[test]
        fn slug_of_a_real_id_ends_with_its_last_eight_hex(target in "[^\u{0}]{0,80}", n in any::<u128>()) {
            let hex = format!("{n:032x}");
            let id = format!(
                "{}-{}-{}-{}-{}",
                &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..]
            );
            let s = slug(&target, &id, AT);
            prop_assert!(s.starts_with("20261129-"));
            let tail = format!("-{}", &hex[24..]);
            prop_assert!(s.ends_with(&tail), "{} {}", s, tail);
        }
    }
}
