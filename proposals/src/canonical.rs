//! Canonical JSON and SHA-256: the byte strings every hash and signature in this crate is taken over.
//!
//! The rules are the audit log's (docs/contract.md#the-audit-log), so one description fits every hashed record vaultgate
//! writes: object keys sorted by Unicode code point, no insignificant whitespace, strings escaped
//! exactly as `serde_json` escapes them (`"`, `\` and control characters; everything else verbatim).

use sha2::{Digest, Sha256};

/// Canonical JSON of `v`: keys sorted by code point, no whitespace, minimal escapes. It is the
/// audit log's own function, so there is exactly one definition of the bytes vaultgate hashes.
pub use audit::canonical_json;

/// Lowercase hex SHA-256 of `bytes` (a note's hash, docs/contract.md#concepts).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// True for a lowercase hex SHA-256 (64 characters of `0-9a-f`), the only form hashes take here.
pub(crate) fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;
    use serde_json::{Map, Value, json};

    use super::*;

    #[test]
    fn keys_are_sorted_whatever_the_insertion_order() {
        let mut a = Map::new();
        a.insert("b".into(), json!(1));
        a.insert("a".into(), json!({"y": [1, 2], "x": null}));
        let mut b = Map::new();
        b.insert("a".into(), json!({"x": null, "y": [1, 2]}));
        b.insert("b".into(), json!(1));
        let (a, b) = (Value::Object(a), Value::Object(b));
        assert_eq!(canonical_json(&a), canonical_json(&b));
        assert_eq!(canonical_json(&a), r#"{"a":{"x":null,"y":[1,2]},"b":1}"#);
    }

    #[test]
    fn keys_sort_by_code_point_not_utf16() {
        // U+FFFF < U+10000 by code point; UTF-16 (JavaScript) order would put U+10000 first.
        let v = json!({"\u{10000}": 1, "\u{ffff}": 2, "é": 3, "z": 4, "Z": 5, "": 6});
        assert_eq!(
            canonical_json(&v),
            "{\"\":6,\"Z\":5,\"z\":4,\"é\":3,\"\u{ffff}\":2,\"\u{10000}\":1}"
        );
    }

    #[test]
    fn strings_escape_only_quote_backslash_and_controls() {
        let v = json!("q\" b\\ n\n r\r t\t \u{08}\u{0c}\u{01}\u{1f} \u{7f} / é 注意 \u{2028} 😀");
        assert_eq!(
            canonical_json(&v),
            "\"q\\\" b\\\\ n\\n r\\r t\\t \\b\\f\\u0001\\u001f \u{7f} / é 注意 \u{2028} 😀\""
        );
    }

    #[test]
    fn scalars_and_empty_containers() {
        let v = json!({
            "t": true, "f": false, "n": null, "i": -3, "u": u64::MAX, "a": [], "o": {}
        });
        assert_eq!(
            canonical_json(&v),
            r#"{"a":[],"f":false,"i":-3,"n":null,"o":{},"t":true,"u":18446744073709551615}"#
        );
    }

    #[test]
    fn sha256_of_empty_input_is_the_known_constant() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert!(is_sha256_hex(&sha256_hex(b"x")));
        assert!(!is_sha256_hex(&sha256_hex(b"x").to_uppercase()));
        assert!(!is_sha256_hex("abc"));
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<String>().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(any::<String>(), inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn canonical_json_parses_back_to_the_same_value_and_is_a_fixed_point(v in arb_json()) {
            let text = canonical_json(&v);
            let parsed: Value = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(&parsed, &v);
            prop_assert_eq!(canonical_json(&parsed), text.clone());
            // No insignificant whitespace: serde_json's compact form agrees when keys are sorted.
            prop_assert_eq!(serde_json::to_string(&v).unwrap().len(), text.len());
        }
    }
}
