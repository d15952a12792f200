//! Property tests for `VaultPath` (T-PATH): whatever the input, a parsed path never escapes.
#![allow(clippy::unwrap_used)]

use policy::path::validate_segment;
use policy::{FolderPath, VaultPath};
use proptest::prelude::*;

/// Strings built from the characters path attacks are made of.
fn attack_string() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("/".to_owned()),
        Just("//".to_owned()),
        Just(".".to_owned()),
        Just("..".to_owned()),
        Just("\\".to_owned()),
        Just(":".to_owned()),
        Just("\0".to_owned()),
        Just(" ".to_owned()),
        Just("%2e".to_owned()),
        Just("%2F".to_owned()),
        Just("\u{200B}".to_owned()),
        Just("\u{202E}".to_owned()),
        Just("con".to_owned()),
        Just(".git".to_owned()),
        Just("C:".to_owned()),
        "[a-zA-Z0-9_é日-]{1,6}",
    ];
    prop::collection::vec(piece, 0..12).prop_map(|v| v.concat())
}

fn assert_safe(p: &VaultPath) {
    let s = p.as_str();
    assert!(!s.is_empty());
    assert!(!s.starts_with('/'), "{s:?}");
    assert!(
        !s.contains('\\') && !s.contains('\0') && !s.contains(':'),
        "{s:?}"
    );
    assert!(s.len() <= 1024);
    for seg in p.segments() {
        assert!(!seg.is_empty() && seg != "." && seg != "..", "{s:?}");
        assert!(validate_segment(seg).is_ok(), "{s:?}");
    }
    // Parsing is idempotent: the normalized form parses to itself.
    assert_eq!(&VaultPath::parse(s).unwrap(), p);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn parsed_attack_strings_never_escape(raw in attack_string()) {
        if let Ok(p) = VaultPath::parse(&raw) {
            assert_safe(&p);
        }
    }

    #[test]
    fn parsed_arbitrary_strings_never_escape(raw in any::<String>()) {
        if let Ok(p) = VaultPath::parse(&raw) {
            assert_safe(&p);
        }
    }

    #[test]
    fn join_adds_exactly_one_segment(base in "[a-z]{1,8}(/[a-z]{1,8}){0,3}", seg in attack_string()) {
        let Ok(base) = VaultPath::parse(&base) else { return Ok(()) };
        if let Ok(joined) = base.join(&seg) {
            assert_safe(&joined);
            prop_assert_eq!(joined.segments().count(), base.segments().count() + 1);
            prop_assert_eq!(joined.file_name(), seg.as_str());
            prop_assert_eq!(joined.parent(), Some(base));
        }
    }

    #[test]
    fn containment_is_component_wise(
        folder in "[a-z]{1,6}(/[a-z]{1,6}){0,2}",
        path in "[a-z]{1,6}(/[a-z]{1,6}){0,4}",
    ) {
        // Random names may be device names (`con`, `aux`); those are not this property's concern.
        let (Ok(f), Ok(p)) = (FolderPath::parse(&folder), VaultPath::parse(&path)) else {
            return Ok(());
        };
        let fs: Vec<&str> = folder.split('/').collect();
        let ps: Vec<&str> = path.split('/').collect();
        prop_assert_eq!(f.contains(&p), ps.starts_with(&fs));
    }

    #[test]
    fn a_string_prefix_is_not_containment(name in "[a-z]{1,8}", suffix in "[a-z0-9]{1,4}") {
        // `notes` must not contain `notes2/x.md`.
        let (Ok(f), Ok(p), Ok(inside)) = (
            FolderPath::parse(&name),
            VaultPath::parse(&format!("{name}{suffix}/x.md")),
            VaultPath::parse(&format!("{name}/{suffix}/x.md")),
        ) else {
            return Ok(());
        };
        prop_assert!(!f.contains(&p));
        prop_assert!(!f.contains_folded(&p));
        prop_assert!(f.contains(&inside));
    }
}
