//! The one frontmatter parser (docs/contract.md#limits-and-pagination): a YAML block becomes a JSON object, within bounds.
//!
//! A block over [`MAX_BLOCK_BYTES`] is not parsed at all. Aliases are where YAML's size hides: a
//! few kilobytes of anchors can name billions of nodes ("billion laughs"), and the parser expands
//! every alias it meets. So values are built by a visitor that spends a budget of
//! [`MAX_EXPANDED_BYTES`] on every node the parser hands it — aliases replayed included — and
//! stops the parse the moment the budget is spent, before that node's value is allocated. What a
//! note can cost is then bounded by its own size plus the budget, whatever its aliases say.
//!
//! It never fails a caller: invalid YAML is an empty object, as before; only a block refused for
//! its size or its expansion is reported, as [`FrontmatterError`].

use std::cell::Cell;
use std::fmt;

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor,
};
use serde_json::{Map, Value};

/// A YAML block larger than this is not parsed (docs/contract.md#limits-and-pagination).
pub const MAX_BLOCK_BYTES: usize = 64 * 1024;

/// A block whose nodes, aliases expanded, would come to more than this is not parsed (docs/contract.md#limits-and-pagination).
pub const MAX_EXPANDED_BYTES: usize = 1024 * 1024;

/// What one node costs beyond its text, so that an alias of an empty node is not free.
const NODE_COST: usize = 8;

/// Why a frontmatter block was not parsed: the short reason `read_note` shows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrontmatterError {
    #[error("frontmatter is {bytes} bytes; the limit is {MAX_BLOCK_BYTES}, so it was not parsed")]
    TooLarge { bytes: usize },
    #[error("frontmatter aliases expand past {MAX_EXPANDED_BYTES} bytes, so it was not parsed")]
    AliasExpansion,
}

/// Parses one frontmatter block (the text between the `---` lines). Empty, invalid or
/// non-mapping YAML is an empty object; a block over the bounds is an error.
pub fn parse_block(yaml: &str) -> Result<Map<String, Value>, FrontmatterError> {
    match parse_mapping(yaml) {
        Ok(m) => Ok(m),
        Err(StrictError::Bounds(e)) => Err(e),
        Err(StrictError::Invalid(e)) => {
            tracing::debug!(error = %e, "invalid YAML frontmatter ignored");
            Ok(Map::new())
        }
        Err(StrictError::NotMapping) => Ok(Map::new()),
    }
}

/// Why [`parse_mapping`] refused a block: what [`parse_block`] degrades to an empty object, told
/// apart for the writers that must not edit what they cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StrictError {
    #[error(transparent)]
    Bounds(FrontmatterError),
    #[error("the frontmatter is not valid YAML: {0}")]
    Invalid(String),
    #[error("the frontmatter is not a YAML mapping (key: value lines)")]
    NotMapping,
}

/// The same parse as [`parse_block`] (same bounds), but invalid and non-mapping YAML are errors.
/// An empty or comments-only block is an empty mapping.
pub fn parse_mapping(yaml: &str) -> Result<Map<String, Value>, StrictError> {
    // SECURITY(T-YAML): note text is untrusted; its size and its alias expansion are bounded.
    if yaml.len() > MAX_BLOCK_BYTES {
        return Err(StrictError::Bounds(FrontmatterError::TooLarge {
            bytes: yaml.len(),
        }));
    }
    if yaml.trim().is_empty() {
        return Ok(Map::new());
    }
    let budget = Budget {
        left: Cell::new(MAX_EXPANDED_BYTES),
        spent: Cell::new(false),
    };
    let parsed = Node(&budget).deserialize(yaml_serde::Deserializer::from_str(yaml));
    match parsed {
        Ok(Value::Object(m)) => Ok(m),
        Ok(Value::Null) => Ok(Map::new()),
        Ok(_) => Err(StrictError::NotMapping),
        Err(_) if budget.spent.get() => Err(StrictError::Bounds(FrontmatterError::AliasExpansion)),
        Err(e) => {
            // The parser's own guard against alias repetition is the same attack, caught first.
            if e.to_string().contains("repetition limit") {
                return Err(StrictError::Bounds(FrontmatterError::AliasExpansion));
            }
            Err(StrictError::Invalid(e.to_string()))
        }
    }
}

/// What is left to spend on nodes, and whether it ran out.
struct Budget {
    left: Cell<usize>,
    spent: Cell<bool>,
}

/// Builds one node's value, paying for it first.
#[derive(Clone, Copy)]
struct Node<'b>(&'b Budget);

impl Node<'_> {
    fn pay<E: de::Error>(self, text_bytes: usize) -> Result<(), E> {
        let cost = NODE_COST.saturating_add(text_bytes);
        match self.0.left.get().checked_sub(cost) {
            Some(left) => {
                self.0.left.set(left);
                Ok(())
            }
            None => {
                self.0.spent.set(true);
                Err(E::custom("frontmatter expansion budget spent"))
            }
        }
    }

    fn float<E: de::Error>(self, f: f64) -> Result<Value, E> {
        self.pay(0)?;
        // NaN and infinities have no JSON number: keep their YAML spelling.
        Ok(serde_json::Number::from_f64(f).map_or_else(
            || {
                Value::String(
                    if f.is_nan() {
                        ".nan"
                    } else if f > 0.0 {
                        ".inf"
                    } else {
                        "-.inf"
                    }
                    .to_owned(),
                )
            },
            Value::Number,
        ))
    }
}

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Value, E> {
        self.pay(0)?;
        Ok(Value::Bool(b))
    }

    fn visit_i64<E: de::Error>(self, i: i64) -> Result<Value, E> {
        self.pay(0)?;
        Ok(Value::from(i))
    }

    fn visit_u64<E: de::Error>(self, u: u64) -> Result<Value, E> {
        self.pay(0)?;
        Ok(Value::from(u))
    }

    // Integers beyond 64 bits are kept as the nearest float, as YAML's own number type does.
    #[allow(clippy::cast_precision_loss)]
    fn visit_i128<E: de::Error>(self, i: i128) -> Result<Value, E> {
        self.float(i as f64)
    }

    #[allow(clippy::cast_precision_loss)]
    fn visit_u128<E: de::Error>(self, u: u128) -> Result<Value, E> {
        self.float(u as f64)
    }

    fn visit_f64<E: de::Error>(self, f: f64) -> Result<Value, E> {
        self.float(f)
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Value, E> {
        self.pay(s.len())?;
        Ok(Value::String(s.to_owned()))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.pay(0)?;
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.pay(0)?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.pay(0)?;
        let mut out = Map::new();
        while let Some(key) = map.next_key_seed(self)? {
            let key = key_string(key);
            // A repeated key is invalid YAML, as the YAML value type has always treated it.
            if out.contains_key(&key) {
                return Err(de::Error::custom("duplicate key in a YAML mapping"));
            }
            let value = map.next_value_seed(self)?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }

    /// A tagged node (`!tag value`): the tag is dropped, the value kept.
    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Value, A::Error> {
        let (_tag, variant) = data.variant::<de::IgnoredAny>()?;
        variant.newtype_variant_seed(self)
    }
}

/// JSON keys are strings; YAML keys may be anything.
fn key_string(k: Value) -> String {
    match k {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    /// `levels` anchors, each a list of `fan` aliases of the one before: `fan^levels` leaves.
    fn laughs(levels: usize, fan: usize) -> String {
        let mut y = String::from("a0: &a0 [\"lol\"]\n");
        for i in 1..=levels {
            let refs = vec![format!("*a{}", i - 1); fan].join(", ");
            y.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
        }
        y
    }

    #[test]
    fn a_mapping_becomes_an_object_with_every_scalar_kind() {
        let m = parse_block("title: T\nn: 3\nneg: -2\nf: 1.5\nok: true\nnone: ~\nnan: .nan\ntags: [a, b]\n")
            .unwrap();
        assert_eq!(
            Value::Object(m),
            json!({"title": "T", "n": 3, "neg": -2, "f": 1.5, "ok": true, "none": null,
                   "nan": ".nan", "tags": ["a", "b"]})
        );
    }

    #[test]
    fn tags_are_dropped_and_keys_stringified() {
        let m = parse_block("when: !date 2026-01-01\n1: one\ntrue: yes-key\n").unwrap();
        assert_eq!(
            Value::Object(m),
            json!({"when": "2026-01-01", "1": "one", "true": "yes-key"})
        );
    }

    #[test]
    fn modest_aliases_are_expanded() {
        let m = parse_block("base: &b {x: 1}\ncopy: *b\n").unwrap();
        assert_eq!(m["copy"], json!({"x": 1}));
        // 4^5 = 1024 leaves: far inside the budget (and the parser's own repetition limit).
        let m = parse_block(&laughs(5, 4)).unwrap();
        assert_eq!(m["a5"].as_array().unwrap().len(), 4);
        assert_eq!(m["a5"][3][3][3][3][3][0], json!("lol"));
    }

    #[test]
    fn an_alias_bomb_is_refused_not_expanded() {
        let bomb = laughs(9, 10);
        assert!(bomb.len() < MAX_BLOCK_BYTES, "the bomb itself is small");
        let started = std::time::Instant::now();
        assert_eq!(parse_block(&bomb), Err(FrontmatterError::AliasExpansion));
        // Refused after spending the budget, not after a billion nodes.
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn a_long_string_aliased_many_times_is_refused() {
        let long = "x".repeat(60_000);
        let y = format!("s: &s \"{long}\"\nl: [{}]\n", vec!["*s"; 30].join(", "));
        assert_eq!(parse_block(&y), Err(FrontmatterError::AliasExpansion));
    }

    #[test]
    fn a_block_over_the_size_limit_is_not_parsed() {
        let y = format!("title: \"{}\"\n", "y".repeat(MAX_BLOCK_BYTES));
        assert_eq!(
            parse_block(&y),
            Err(FrontmatterError::TooLarge { bytes: y.len() })
        );
        let fits = format!("t: {}\n", "y".repeat(MAX_BLOCK_BYTES - 10));
        assert!(fits.len() <= MAX_BLOCK_BYTES);
        assert_eq!(
            parse_block(&fits).unwrap()["t"].as_str().unwrap().len(),
            MAX_BLOCK_BYTES - 10
        );
    }

    #[test]
    fn invalid_duplicate_or_non_mapping_yaml_is_an_empty_object() {
        for y in [
            "a: [unclosed\n",
            "a: 1\na: 2\n",
            "- just\n- a list\n",
            "plain\n",
            "   \n",
            "x: *nowhere\n",
        ] {
            assert_eq!(parse_block(y), Ok(Map::new()), "{y:?}");
        }
    }

    #[test]
    fn the_strict_parse_tells_invalid_and_non_mapping_apart() {
        assert!(matches!(
            parse_mapping("a: [unclosed\n"),
            Err(StrictError::Invalid(_))
        ));
        assert!(matches!(
            parse_mapping("a: 1\na: 2\n"),
            Err(StrictError::Invalid(_))
        ));
        assert_eq!(parse_mapping("- just\n- a list\n"), Err(StrictError::NotMapping));
        assert_eq!(parse_mapping("plain\n"), Err(StrictError::NotMapping));
        assert_eq!(parse_mapping("   \n"), Ok(Map::new()));
        assert_eq!(parse_mapping("# only a comment\n"), Ok(Map::new()));
        assert_eq!(
            parse_mapping(&laughs(9, 10)),
            Err(StrictError::Bounds(FrontmatterError::AliasExpansion))
        );
        assert_eq!(Value::Object(parse_mapping("a: 1\n").unwrap()), json!({"a": 1}));
    }

    proptest! {
        /// Any anchor/alias shape either parses or is refused; nothing expands past the budget.
        #[test]
        fn expansion_never_passes_the_budget(levels in 1usize..12, fan in 1usize..12, pad in 0usize..2000) {
            let mut y = laughs(levels, fan);
            y.push_str(&format!("pad: \"{}\"\n", "p".repeat(pad)));
            match parse_block(&y) {
                Ok(m) => {
                    let size = serde_json::to_string(&Value::Object(m)).unwrap().len();
                    prop_assert!(size <= MAX_EXPANDED_BYTES * 2, "{size}");
                    // What parsed really was within reach of the budget: fan^levels leaves.
                    prop_assert!((fan as f64).powi(levels as i32) * 8.0 <= MAX_EXPANDED_BYTES as f64 * 2.0);
                }
                Err(e) => prop_assert_eq!(e, FrontmatterError::AliasExpansion),
            }
        }
    }
}
