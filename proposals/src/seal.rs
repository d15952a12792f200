//! Sealing and verifying proposals: [`proposal_hash`] pins what the proposal would change,
//! [`signature`] pins the whole metadata, [`verify`] checks both.
//!
//! SECURITY: `secret.key` also signs tokens (JWT HS256) and challenge plan hashes (docs/contract.md#concepts, docs/contract.md#critical-operations). So
//! that no HMAC vaultgate ever shows a client can stand for a proposal signature, proposals are
//! signed with a key derived from the secret for this one purpose ([`SIGNATURE_KEY_LABEL`]), not
//! with the secret itself.

use ring::hmac;
use serde_json::{Map, Value};

use crate::canonical::{canonical_json, is_sha256_hex, sha256_hex};
use crate::model::{Draft, Kind, Proposal};
use crate::slug::slug;

/// The label under which the proposal signing key is derived from `secret.key`:
/// `key = HMAC-SHA256(secret, label)`. Changing it invalidates every pending proposal.
pub const SIGNATURE_KEY_LABEL: &[u8] = crate::keys::PROPOSAL_SIGNATURE;

/// The outcome of [`verify`], checked in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The proposal hash matches the fields and the signature matches the metadata.
    Ok,
    /// `proposal_hash` is not the hash of kind, target, from, contentHash and baseHash.
    HashMismatch,
    /// The signature does not verify under this secret (or is not 64 lowercase hex digits).
    BadSignature,
}

/// Gives a draft its id, slug, proposal hash and signature.
///
/// It signs what it is given; check [`Draft::check_shape`] first if the draft may be malformed.
pub fn seal(draft: Draft, id: String, secret: &[u8]) -> Proposal {
    let Draft {
        kind,
        vault,
        target,
        from,
        content_hash,
        base_hash,
        reason,
        created_by,
        created_at,
    } = draft;
    let proposal_hash = proposal_hash(
        kind,
        &target,
        from.as_deref(),
        content_hash.as_deref(),
        base_hash.as_deref(),
    );
    let mut p = Proposal {
        slug: slug(&target, &id, &created_at),
        id,
        kind,
        vault,
        target,
        from,
        content_hash,
        base_hash,
        created_at,
        created_by,
        reason,
        proposal_hash,
        signature: String::new(),
    };
    p.signature = signature(secret, &p);
    p
}

/// Hex SHA-256 over the canonical JSON of `{kind, target, from, contentHash, baseHash}`, absent
/// values as `null`.
pub fn proposal_hash(
    kind: Kind,
    target: &str,
    from: Option<&str>,
    content_hash: Option<&str>,
    base_hash: Option<&str>,
) -> String {
    let opt = |s: Option<&str>| s.map_or(Value::Null, |s| Value::String(s.to_owned()));
    let mut m = Map::new();
    m.insert("kind".into(), kind.as_str().into());
    m.insert("target".into(), target.into());
    m.insert("from".into(), opt(from));
    m.insert("contentHash".into(), opt(content_hash));
    m.insert("baseHash".into(), opt(base_hash));
    sha256_hex(canonical_json(&Value::Object(m)).as_bytes())
}

/// Hex HMAC-SHA256 over the canonical JSON of the metadata without `signature` (absent options are
/// absent, as in the file), keyed by the proposal key derived from `secret`.
pub fn signature(secret: &[u8], p: &Proposal) -> String {
    let tag = hmac::sign(&signing_key(secret), signed_bytes(p).as_bytes());
    hex::encode(tag.as_ref())
}

/// Recomputes the proposal hash from the fields, then verifies the signature in constant time.
pub fn verify(secret: &[u8], p: &Proposal) -> Verdict {
    let expected = proposal_hash(
        p.kind,
        &p.target,
        p.from.as_deref(),
        p.content_hash.as_deref(),
        p.base_hash.as_deref(),
    );
    // Not a secret (the agent is told it), so an ordinary comparison is fine.
    if p.proposal_hash != expected {
        return Verdict::HashMismatch;
    }
    // Only the canonical spelling verifies, so the stored signature has exactly one valid form.
    if !is_sha256_hex(&p.signature) {
        return Verdict::BadSignature;
    }
    let Ok(tag) = hex::decode(&p.signature) else {
        return Verdict::BadSignature;
    };
    match hmac::verify(&signing_key(secret), signed_bytes(p).as_bytes(), &tag) {
        Ok(()) => Verdict::Ok,
        Err(_) => Verdict::BadSignature,
    }
}

fn signing_key(secret: &[u8]) -> hmac::Key {
    crate::keys::hmac_key(secret, crate::keys::PROPOSAL_SIGNATURE)
}

fn signed_bytes(p: &Proposal) -> String {
    canonical_json(&Value::Object(unsigned_metadata(p)))
}

/// The metadata as serde writes it, minus `signature`. Built by hand so signing cannot fail; a test
/// keeps it equal to the serde form.
fn unsigned_metadata(p: &Proposal) -> Map<String, Value> {
    let mut created_by = Map::new();
    created_by.insert("credentialId".into(), p.created_by.credential_id.clone().into());
    created_by.insert("name".into(), p.created_by.name.clone().into());
    let mut m = Map::new();
    m.insert("id".into(), p.id.clone().into());
    m.insert("slug".into(), p.slug.clone().into());
    m.insert("kind".into(), p.kind.as_str().into());
    m.insert("vault".into(), p.vault.clone().into());
    m.insert("target".into(), p.target.clone().into());
    for (key, value) in [
        ("from", &p.from),
        ("contentHash", &p.content_hash),
        ("baseHash", &p.base_hash),
    ] {
        if let Some(value) = value {
            m.insert(key.into(), value.clone().into());
        }
    }
    m.insert("createdAt".into(), p.created_at.clone().into());
    m.insert("createdBy".into(), Value::Object(created_by));
    m.insert("reason".into(), p.reason.clone().into());
    m.insert("proposalHash".into(), p.proposal_hash.clone().into());
    m
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::*;
    use crate::model::CreatedBy;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn draft(kind: Kind) -> Draft {
        let h = |s: &str| sha256_hex(s.as_bytes());
        Draft {
            kind,
            vault: "main".into(),
            target: "z/attention.md".into(),
            from: (kind == Kind::Move).then(|| "inbox-free/old.md".into()),
            content_hash: matches!(kind, Kind::New | Kind::Patch).then(|| h("new")),
            base_hash: (kind != Kind::New).then(|| h("base")),
            reason: "because".into(),
            created_by: CreatedBy {
                credential_id: "cred-1".into(),
                name: "claude".into(),
            },
            created_at: "2026-11-29T10:00:00Z".into(),
        }
    }

    const ID: &str = "0193a5b0-0000-7000-8000-00003f9a1c2e";

    #[test]
    fn seal_then_verify_is_ok_for_every_kind() {
        for kind in Kind::ALL {
            let p = seal(draft(kind), ID.into(), SECRET);
            assert_eq!(verify(SECRET, &p), Verdict::Ok, "{kind}");
            assert_eq!(p.check_shape(), Ok(()));
            assert_eq!(p.slug, "20261129-attention-3f9a1c2e");
            assert!(is_sha256_hex(&p.proposal_hash) && is_sha256_hex(&p.signature));
        }
    }

    #[test]
    fn proposal_hash_is_over_the_five_fields_with_nulls() {
        let want =
            sha256_hex(br#"{"baseHash":null,"contentHash":"c","from":null,"kind":"new","target":"a.md"}"#);
        assert_eq!(proposal_hash(Kind::New, "a.md", None, Some("c"), None), want);
        // Absent and empty are different proposals.
        assert_ne!(
            proposal_hash(Kind::Move, "a.md", Some(""), None, Some("b")),
            proposal_hash(Kind::Move, "a.md", None, None, Some("b"))
        );
    }

    #[test]
    fn signed_bytes_are_the_serde_form_without_signature() {
        for kind in Kind::ALL {
            let p = seal(draft(kind), ID.into(), SECRET);
            let mut v = serde_json::to_value(&p).unwrap();
            v.as_object_mut().unwrap().remove("signature");
            assert_eq!(Value::Object(unsigned_metadata(&p)), v);
        }
    }

    #[test]
    fn signature_is_hmac_under_the_derived_key() {
        let p = seal(draft(Kind::Patch), ID.into(), SECRET);
        let derived = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, SECRET), SIGNATURE_KEY_LABEL);
        let key = hmac::Key::new(hmac::HMAC_SHA256, derived.as_ref());
        assert_eq!(
            p.signature,
            hex::encode(hmac::sign(&key, signed_bytes(&p).as_bytes()))
        );
        // Not the raw secret: a plan hash or token HMAC over the same bytes would not verify.
        let raw = hmac::Key::new(hmac::HMAC_SHA256, SECRET);
        assert_ne!(
            p.signature,
            hex::encode(hmac::sign(&raw, signed_bytes(&p).as_bytes()))
        );
    }

    type Mutation = (&'static str, fn(&mut Proposal));

    /// One change per field of the metadata.
    const MUTATIONS: &[Mutation] = &[
        ("id", |p| p.id.push('0')),
        ("slug", |p| p.slug.push('x')),
        ("kind", |p| {
            p.kind = if p.kind == Kind::Delete {
                Kind::Patch
            } else {
                Kind::Delete
            }
        }),
        ("vault", |p| p.vault = "other".into()),
        ("target", |p| p.target = "z/other.md".into()),
        ("from", |p| {
            p.from = if p.from.is_some() {
                None
            } else {
                Some("x.md".into())
            }
        }),
        ("contentHash", |p| {
            p.content_hash = Some(sha256_hex(p.content_hash.as_deref().unwrap_or("").as_bytes()))
        }),
        ("baseHash", |p| {
            p.base_hash = Some(sha256_hex(p.base_hash.as_deref().unwrap_or("").as_bytes()))
        }),
        ("createdAt", |p| p.created_at = "2026-11-30T10:00:00Z".into()),
        ("createdBy.credentialId", |p| {
            p.created_by.credential_id = "cred-2".into()
        }),
        ("createdBy.name", |p| p.created_by.name = "mallory".into()),
        ("reason", |p| p.reason.push('!')),
        ("proposalHash", |p| p.proposal_hash = sha256_hex(b"other")),
        ("signature", |p| p.signature = sha256_hex(b"other")),
        ("signature spelled in capitals", |p| {
            p.signature = p.signature.to_uppercase()
        }),
        ("signature truncated", |p| {
            p.signature.pop();
        }),
        ("signature empty", |p| p.signature.clear()),
    ];

    #[test]
    fn changing_any_field_of_a_sealed_proposal_is_detected() {
        for kind in Kind::ALL {
            let sealed = seal(draft(kind), ID.into(), SECRET);
            for (field, mutate) in MUTATIONS {
                let mut p = sealed.clone();
                mutate(&mut p);
                assert_ne!(p, sealed, "{kind}: mutation of {field} changed nothing");
                let verdict = verify(SECRET, &p);
                assert!(
                    matches!(verdict, Verdict::HashMismatch | Verdict::BadSignature),
                    "{kind}: {field} gave {verdict:?}"
                );
            }
        }
    }

    #[test]
    fn fields_in_the_proposal_hash_give_hash_mismatch_others_bad_signature() {
        let sealed = seal(draft(Kind::Patch), ID.into(), SECRET);
        for (field, mutate) in MUTATIONS {
            let mut p = sealed.clone();
            mutate(&mut p);
            let want = match *field {
                "kind" | "target" | "from" | "contentHash" | "baseHash" | "proposalHash" => {
                    Verdict::HashMismatch
                }
                _ => Verdict::BadSignature,
            };
            assert_eq!(verify(SECRET, &p), want, "{field}");
        }
    }

    #[test]
    fn another_secret_gives_bad_signature() {
        let p = seal(draft(Kind::New), ID.into(), SECRET);
        assert_eq!(verify(b"another secret", &p), Verdict::BadSignature);
        assert_eq!(verify(b"", &p), Verdict::BadSignature);
    }

    fn arb_kind() -> impl Strategy<Value = Kind> {
        prop::sample::select(Kind::ALL.to_vec())
    }

    prop_compose! {
        fn arb_draft()(
            kind in arb_kind(),
            vault in ".*",
            target in ".*",
            from in proptest::option::of(".*"),
            content_hash in proptest::option::of("[0-9a-f]{64}"),
            base_hash in proptest::option::of("[0-9a-f]{64}"),
            reason in ".*",
            credential_id in ".*",
            name in ".*",
            created_at in ".*",
        ) -> Draft {
            Draft { kind, vault, target, from, content_hash, base_hash, reason,
                created_by: CreatedBy { credential_id, name }, created_at }
        }
    }

    proptest! {
        #[test]
        fn any_sealed_draft_verifies_and_only_under_its_secret(
            d in arb_draft(),
            id in ".*",
            secret in prop::collection::vec(any::<u8>(), 0..80),
            other in prop::collection::vec(any::<u8>(), 0..80),
        ) {
            let p = seal(d, id, &secret);
            prop_assert_eq!(verify(&secret, &p), Verdict::Ok);
            // The JSON file reads back to a proposal that still verifies.
            let back: Proposal = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
            prop_assert_eq!(verify(&secret, &back), Verdict::Ok);
            // HMAC pads short keys with zeros, so a key and its zero-extension are the same key.
            let same_key = {
                let (short, long) =
                    if secret.len() <= other.len() { (&secret, &other) } else { (&other, &secret) };
                long.starts_with(short) && long[short.len()..].iter().all(|b| *b == 0) && long.len() <= 64
            };
            if !same_key {
                prop_assert_eq!(verify(&other, &p), Verdict::BadSignature);
            }
        }

        #[test]
        fn changing_the_reason_breaks_the_signature(d in arb_draft(), extra in ".+") {
            let mut p = seal(d, ID.into(), SECRET);
            p.reason.push_str(&extra);
            prop_assert_eq!(verify(SECRET, &p), Verdict::BadSignature);
        }
    }
}
