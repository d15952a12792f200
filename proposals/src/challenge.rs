//! Two-phase challenges for critical tools (docs/contract.md#critical-operations): the [`Plan`] a first call is shown, its
//! [`plan_hash`] (an HMAC the client cannot forge), and [`decide`], which says whether a second call
//! may execute or which refusal applies.
//!
//! SECURITY(T-CRIT1): the plan hash is keyed with a key derived from `secret.key` for this one
//! purpose ([`PLAN_HASH_KEY_LABEL`]), so no proposal signature or token HMAC can stand for a plan
//! hash, and no plan hash for either.
//!
//! Pure: the caller passes the stored challenge, the current revision and `now`.

use ring::hmac;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::canonical::{canonical_json, is_sha256_hex, sha256_hex};

/// The label under which the plan-hash key is derived from `secret.key`:
/// `key = HMAC-SHA256(secret, label)`. Changing it invalidates every open challenge.
pub const PLAN_HASH_KEY_LABEL: &[u8] = crate::keys::PLAN_HASH;

/// The fields a second call adds to the first call's arguments.
pub const CHALLENGE_FIELDS: [&str; 3] = ["challengeId", "planHash", "acknowledged"];

/// What a critical tool's effect is (docs/contract.md#critical-operations): nothing it does can be undone.
pub const RECOVERABILITY: &str = "irreversible";

/// Everything a challenge pins. `planHash` is the HMAC of its canonical JSON (camelCase keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Plan {
    pub tool: String,
    pub vault: String,
    /// The call's [`normalized_arguments`] (the `idempotencyKey` included).
    pub arguments: Value,
    /// Vault-relative paths of every file the call would remove, sorted, without duplicates.
    pub affected: Vec<String>,
    pub count: u64,
    /// The vault revision the plan was made against.
    pub revision: u64,
    pub credential_id: String,
    pub challenge_id: String,
    /// RFC 3339 UTC.
    pub expires_at: String,
}

/// The parts of a [`Plan`] the gateway supplies; [`Plan::new`] normalizes and counts.
#[derive(Debug, Clone)]
pub struct PlanInput<'a> {
    pub tool: &'a str,
    pub vault: &'a str,
    /// The call's arguments as sent (challenge fields, if any, are dropped).
    pub arguments: &'a Value,
    pub affected: Vec<String>,
    pub revision: u64,
    pub credential_id: &'a str,
    pub challenge_id: &'a str,
    pub expires_at: &'a str,
}

impl Plan {
    pub fn new(input: PlanInput<'_>) -> Plan {
        let mut affected = input.affected;
        affected.sort_unstable();
        affected.dedup();
        Plan {
            tool: input.tool.to_owned(),
            vault: input.vault.to_owned(),
            arguments: normalized_arguments(input.arguments),
            count: affected.len() as u64,
            affected,
            revision: input.revision,
            credential_id: input.credential_id.to_owned(),
            challenge_id: input.challenge_id.to_owned(),
            expires_at: input.expires_at.to_owned(),
        }
    }

    /// The plan as hashed, built by hand so hashing cannot fail; a test keeps it equal to serde's.
    fn to_json(&self) -> Value {
        json!({
            "tool": self.tool,
            "vault": self.vault,
            "arguments": self.arguments,
            "affected": self.affected,
            "count": self.count,
            "revision": self.revision,
            "credentialId": self.credential_id,
            "challengeId": self.challenge_id,
            "expiresAt": self.expires_at,
        })
    }

    fn signed_bytes(&self) -> String {
        canonical_json(&self.to_json())
    }
}

/// A tool's arguments as a challenge compares them: without the [`CHALLENGE_FIELDS`] and
/// without `null` members (an explicit `null` means "absent", as in the typed arguments), with
/// `paths` sorted and deduplicated when it is an array of strings. Everything else, the
/// `idempotencyKey` and `vault` included, is kept as sent.
pub fn normalized_arguments(args: &Value) -> Value {
    let Value::Object(map) = args else {
        return args.clone();
    };
    let mut out = Map::new();
    for (k, v) in map {
        if CHALLENGE_FIELDS.contains(&k.as_str()) || v.is_null() {
            continue;
        }
        out.insert(k.clone(), v.clone());
    }
    if let Some(Value::Array(items)) = out.get("paths")
        && let Some(mut paths) = items
            .iter()
            .map(|p| p.as_str().map(str::to_owned))
            .collect::<Option<Vec<String>>>()
    {
        paths.sort_unstable();
        paths.dedup();
        out.insert("paths".into(), Value::from(paths));
    }
    Value::Object(out)
}

/// Lowercase hex SHA-256 of the canonical normalized arguments (stored and audited; not secret).
pub fn arguments_hash(args: &Value) -> String {
    sha256_hex(canonical_json(&normalized_arguments(args)).as_bytes())
}

/// Lowercase hex HMAC-SHA256 of the plan's canonical JSON under the plan-hash key.
pub fn plan_hash(secret: &[u8], plan: &Plan) -> String {
    hex::encode(hmac::sign(&plan_key(secret), plan.signed_bytes().as_bytes()).as_ref())
}

/// Whether `given` is the plan hash of `plan`, compared in constant time. Only the canonical
/// spelling (64 lowercase hex digits) is accepted, so a plan has exactly one valid hash.
pub fn verify_plan_hash(secret: &[u8], plan: &Plan, given: &str) -> bool {
    if !is_sha256_hex(given) {
        return false;
    }
    let Ok(tag) = hex::decode(given) else {
        return false;
    };
    hmac::verify(&plan_key(secret), plan.signed_bytes().as_bytes(), &tag).is_ok()
}

fn plan_key(secret: &[u8]) -> hmac::Key {
    crate::keys::hmac_key(secret, crate::keys::PLAN_HASH)
}

/// A challenge as stored: its plan, when it expires and whether it has been used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    pub plan: Plan,
    /// Unix seconds; the challenge is expired from this instant on.
    pub expires_at: i64,
    pub consumed: bool,
}

/// A second call, as the gateway sees it.
#[derive(Debug, Clone, Copy)]
pub struct Attempt<'a> {
    pub tool: &'a str,
    /// The vault the call resolved to.
    pub vault: &'a str,
    pub credential_id: &'a str,
    /// The arguments as sent, challenge fields included.
    pub arguments: &'a Value,
    /// Unix seconds.
    pub now: i64,
    /// The vault's revision now.
    pub revision: u64,
}

/// What a call's challenge fields say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase<'a> {
    /// None of the challenge fields: a first call, answered with a challenge.
    First,
    /// All of them, with `acknowledged: true`.
    Second {
        challenge_id: &'a str,
        plan_hash: &'a str,
    },
    /// Some but not all, or `acknowledged` other than `true`: `CHALLENGE_REQUIRED`.
    Incomplete,
}

/// Classifies a call by its challenge fields (a `null` field counts as absent).
pub fn phase(args: &Value) -> Phase<'_> {
    let field = |k: &str| args.get(k).filter(|v| !v.is_null());
    if CHALLENGE_FIELDS.iter().all(|k| field(k).is_none()) {
        return Phase::First;
    }
    match (
        field("challengeId").and_then(Value::as_str),
        field("planHash").and_then(Value::as_str),
        field("acknowledged"),
    ) {
        (Some(challenge_id), Some(plan_hash), Some(Value::Bool(true))) if !challenge_id.is_empty() => {
            Phase::Second {
                challenge_id,
                plan_hash,
            }
        }
        _ => Phase::Incomplete,
    }
}

/// The part of a second call that does not match its challenge. One code (`CHALLENGE_MISMATCH`);
/// the variants exist for logs and tests, and the client is told only what it can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    /// No challenge with this id for this credential and vault (another credential's challenge
    /// looks exactly like one that does not exist).
    Unknown,
    Tool,
    /// Other arguments, or another `idempotencyKey`.
    Arguments,
    /// Not the plan hash that was issued.
    PlanHash,
}

/// Why a second call does not execute, in the order [`decide`] checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Required,
    Mismatch(Mismatch),
    Consumed,
    Expired,
    Stale { planned: u64, now: u64 },
}

impl Refusal {
    /// The fact the client is told (the gateway adds the next step).
    pub fn fact(self) -> &'static str {
        match self {
            Refusal::Required => {
                "a critical call needs challengeId, planHash and acknowledged: true together"
            }
            Refusal::Mismatch(Mismatch::Unknown) => "no such challenge for this credential and vault",
            Refusal::Mismatch(Mismatch::Tool) => "the challenge was issued for another tool",
            Refusal::Mismatch(Mismatch::Arguments) => {
                "the arguments or the idempotencyKey differ from the call the challenge was issued for"
            }
            Refusal::Mismatch(Mismatch::PlanHash) => "planHash is not the one this challenge was issued with",
            Refusal::Consumed => "this challenge has already been used; nothing was done again",
            Refusal::Expired => "this challenge has expired",
            Refusal::Stale { .. } => "the vault changed since the challenge was issued",
        }
    }
}

/// Decides whether a second call may execute, checking in this order (the first that fails is
/// the answer): all challenge fields present with `acknowledged: true` (`CHALLENGE_REQUIRED`);
/// a known challenge of this credential and vault, for this tool, with the same normalized
/// arguments and key, and exactly its plan hash (`CHALLENGE_MISMATCH`); not used
/// (`CHALLENGE_CONSUMED`); not expired (`CHALLENGE_EXPIRED`); the revision unchanged
/// (`CHALLENGE_STALE`).
///
/// `stored` is the challenge the call's `challengeId` names, if any. Identity is checked before
/// state, so a stranger learns nothing about another credential's challenge.
pub fn decide(secret: &[u8], stored: Option<&Issued>, call: &Attempt<'_>) -> Result<(), Refusal> {
    let Phase::Second {
        challenge_id,
        plan_hash: given,
    } = phase(call.arguments)
    else {
        return Err(Refusal::Required);
    };
    let mismatch = |m| Err(Refusal::Mismatch(m));
    let Some(issued) = stored else {
        return mismatch(Mismatch::Unknown);
    };
    let plan = &issued.plan;
    if plan.challenge_id != challenge_id
        || plan.credential_id != call.credential_id
        || plan.vault != call.vault
    {
        return mismatch(Mismatch::Unknown);
    }
    if plan.tool != call.tool {
        return mismatch(Mismatch::Tool);
    }
    if plan.arguments != normalized_arguments(call.arguments) {
        return mismatch(Mismatch::Arguments);
    }
    // SECURITY(T-CRIT1): recomputed over the stored plan and compared in constant time.
    if !verify_plan_hash(secret, plan, given) {
        return mismatch(Mismatch::PlanHash);
    }
    if issued.consumed {
        return Err(Refusal::Consumed);
    }
    if call.now >= issued.expires_at {
        return Err(Refusal::Expired);
    }
    if call.revision != plan.revision {
        return Err(Refusal::Stale {
            planned: plan.revision,
            now: call.revision,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";
    const NOW: i64 = 1_800_000_000;

    fn first_args() -> Value {
        json!({"paths": ["z/b.md", "z/a.md", "z/b.md"], "idempotencyKey": "k1"})
    }

    fn plan() -> Plan {
        Plan::new(PlanInput {
            tool: "delete_permanent",
            vault: "main",
            arguments: &first_args(),
            affected: vec!["z/b.md".into(), "z/a.md".into(), "z/b.md".into()],
            revision: 7,
            credential_id: "cred_1",
            challenge_id: "c_1",
            expires_at: "2027-01-15T08:05:00Z",
        })
    }

    fn issued() -> Issued {
        Issued {
            plan: plan(),
            expires_at: NOW + 300,
            consumed: false,
        }
    }

    /// The exact second call for `issued()`.
    fn second_args() -> Value {
        let mut a = first_args();
        a["challengeId"] = "c_1".into();
        a["planHash"] = plan_hash(SECRET, &plan()).into();
        a["acknowledged"] = true.into();
        a
    }

    fn attempt(args: &Value) -> Attempt<'_> {
        Attempt {
            tool: "delete_permanent",
            vault: "main",
            credential_id: "cred_1",
            arguments: args,
            now: NOW,
            revision: 7,
        }
    }

    #[test]
    fn plan_normalizes_arguments_and_affected() {
        let p = plan();
        assert_eq!(p.affected, ["z/a.md", "z/b.md"]);
        assert_eq!(p.count, 2);
        assert_eq!(
            p.arguments,
            json!({"paths": ["z/a.md", "z/b.md"], "idempotencyKey": "k1"})
        );
    }

    #[test]
    fn normalized_arguments_drop_challenge_fields_and_nulls_and_sort_paths() {
        let sent = json!({
            "vault": null, "paths": ["b.md", "a.md", "a.md"], "idempotencyKey": "k",
            "challengeId": "c", "planHash": "h", "acknowledged": true,
        });
        assert_eq!(
            normalized_arguments(&sent),
            json!({"paths": ["a.md", "b.md"], "idempotencyKey": "k"})
        );
        // Not an array of strings: kept as sent (the typed arguments refuse it anyway).
        assert_eq!(
            normalized_arguments(&json!({"paths": [1, "a"]})),
            json!({"paths": [1, "a"]})
        );
        assert_eq!(normalized_arguments(&json!("x")), json!("x"));
        assert_eq!(
            arguments_hash(&sent),
            arguments_hash(&json!({"idempotencyKey": "k", "paths": ["a.md", "b.md"]}))
        );
    }

    #[test]
    fn hashed_json_is_the_serde_form() {
        let p = plan();
        assert_eq!(p.to_json(), serde_json::to_value(&p).unwrap());
        let back: Plan = serde_json::from_value(p.to_json()).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn plan_hash_is_hmac_under_the_derived_key_not_the_secret() {
        let p = plan();
        let derived = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, SECRET), PLAN_HASH_KEY_LABEL);
        let key = hmac::Key::new(hmac::HMAC_SHA256, derived.as_ref());
        let want = hex::encode(hmac::sign(&key, p.signed_bytes().as_bytes()));
        assert_eq!(plan_hash(SECRET, &p), want);
        let raw = hmac::Key::new(hmac::HMAC_SHA256, SECRET);
        assert_ne!(
            plan_hash(SECRET, &p),
            hex::encode(hmac::sign(&raw, p.signed_bytes().as_bytes()))
        );
        // Nor the proposal signing key.
        let sig = hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, SECRET),
            crate::SIGNATURE_KEY_LABEL,
        );
        let sig_key = hmac::Key::new(hmac::HMAC_SHA256, sig.as_ref());
        assert_ne!(
            plan_hash(SECRET, &p),
            hex::encode(hmac::sign(&sig_key, p.signed_bytes().as_bytes()))
        );
        assert!(is_sha256_hex(&plan_hash(SECRET, &p)));
    }

    #[test]
    fn phases() {
        let cases: &[(Value, Phase<'_>)] = &[
            (json!({"paths": []}), Phase::First),
            (
                json!({"challengeId": null, "planHash": null, "acknowledged": null}),
                Phase::First,
            ),
            (json!({"acknowledged": true}), Phase::Incomplete),
            (json!({"challengeId": "c", "planHash": "h"}), Phase::Incomplete),
            (
                json!({"challengeId": "c", "acknowledged": true}),
                Phase::Incomplete,
            ),
            (json!({"planHash": "h", "acknowledged": true}), Phase::Incomplete),
            (
                json!({"challengeId": "c", "planHash": "h", "acknowledged": false}),
                Phase::Incomplete,
            ),
            (
                json!({"challengeId": "c", "planHash": "h", "acknowledged": "true"}),
                Phase::Incomplete,
            ),
            (
                json!({"challengeId": "", "planHash": "h", "acknowledged": true}),
                Phase::Incomplete,
            ),
            (
                json!({"challengeId": 1, "planHash": "h", "acknowledged": true}),
                Phase::Incomplete,
            ),
            (
                json!({"challengeId": "c", "planHash": "h", "acknowledged": true}),
                Phase::Second {
                    challenge_id: "c",
                    plan_hash: "h",
                },
            ),
        ];
        for (args, want) in cases {
            assert_eq!(phase(args), *want, "{args}");
        }
    }

    #[test]
    fn the_exact_second_call_executes() {
        let args = second_args();
        assert_eq!(decide(SECRET, Some(&issued()), &attempt(&args)), Ok(()));
        // Whatever order the paths come in, and with their duplicates.
        let mut reordered = args.clone();
        reordered["paths"] = json!(["z/a.md", "z/b.md", "z/a.md"]);
        assert_eq!(decide(SECRET, Some(&issued()), &attempt(&reordered)), Ok(()));
    }

    /// The parts of an attempt besides its arguments.
    struct Who {
        tool: &'static str,
        vault: &'static str,
        credential_id: &'static str,
        now: i64,
        revision: u64,
    }

    type Case = (&'static str, fn(&mut Value, &mut Issued, &mut Who), Refusal);

    /// Each refusal on its own, and the order when several apply.
    const CASES: &[Case] = &[
        (
            "acknowledged alone",
            |a, _, _| *a = json!({"paths": ["z/a.md"], "idempotencyKey": "k1", "acknowledged": true}),
            Refusal::Required,
        ),
        (
            "planHash missing",
            |a, _, _| {
                a.as_object_mut().unwrap().remove("planHash");
            },
            Refusal::Required,
        ),
        (
            "acknowledged false",
            |a, _, _| a["acknowledged"] = false.into(),
            Refusal::Required,
        ),
        (
            "required before everything",
            |a, i, c| {
                a["acknowledged"] = false.into();
                i.consumed = true;
                c.credential_id = "cred_2";
            },
            Refusal::Required,
        ),
        (
            "another credential",
            |_, _, c| c.credential_id = "cred_2",
            Refusal::Mismatch(Mismatch::Unknown),
        ),
        (
            "another credential, even when consumed and expired",
            |_, i, c| {
                c.credential_id = "cred_2";
                i.consumed = true;
                c.now = NOW + 1000;
            },
            Refusal::Mismatch(Mismatch::Unknown),
        ),
        (
            "another vault",
            |_, _, c| c.vault = "other",
            Refusal::Mismatch(Mismatch::Unknown),
        ),
        (
            "another challenge id",
            |a, _, _| a["challengeId"] = "c_2".into(),
            Refusal::Mismatch(Mismatch::Unknown),
        ),
        (
            "another tool",
            |_, _, c| c.tool = "empty_trash",
            Refusal::Mismatch(Mismatch::Tool),
        ),
        (
            "tampered paths",
            |a, _, _| a["paths"] = json!(["z/a.md"]),
            Refusal::Mismatch(Mismatch::Arguments),
        ),
        (
            "another key",
            |a, _, _| a["idempotencyKey"] = "k2".into(),
            Refusal::Mismatch(Mismatch::Arguments),
        ),
        (
            "an added vault argument",
            |a, _, _| a["vault"] = "main".into(),
            Refusal::Mismatch(Mismatch::Arguments),
        ),
        (
            "forged plan hash",
            |a, _, _| a["planHash"] = sha256_hex(b"forged").into(),
            Refusal::Mismatch(Mismatch::PlanHash),
        ),
        (
            "plan hash in capitals",
            |a, _, _| {
                let h = a["planHash"].as_str().unwrap().to_uppercase();
                a["planHash"] = h.into();
            },
            Refusal::Mismatch(Mismatch::PlanHash),
        ),
        (
            "a stored plan altered after issue",
            |_, i, _| {
                i.plan.affected.pop();
            },
            Refusal::Mismatch(Mismatch::PlanHash),
        ),
        (
            "mismatch before consumed",
            |a, i, _| {
                a["planHash"] = sha256_hex(b"forged").into();
                i.consumed = true;
            },
            Refusal::Mismatch(Mismatch::PlanHash),
        ),
        ("consumed", |_, i, _| i.consumed = true, Refusal::Consumed),
        (
            "consumed before expired and stale",
            |_, i, c| {
                i.consumed = true;
                c.now = NOW + 1000;
                c.revision = 8;
            },
            Refusal::Consumed,
        ),
        (
            "expired at the instant",
            |_, _, c| c.now = NOW + 300,
            Refusal::Expired,
        ),
        (
            "expired before stale",
            |_, _, c| {
                c.now = NOW + 301;
                c.revision = 8;
            },
            Refusal::Expired,
        ),
        (
            "revision moved",
            |_, _, c| c.revision = 8,
            Refusal::Stale { planned: 7, now: 8 },
        ),
    ];

    #[test]
    fn refusals_come_in_the_documented_order() {
        for (name, mutate, want) in CASES {
            let mut args = second_args();
            let mut stored = issued();
            let mut who = Who {
                tool: "delete_permanent",
                vault: "main",
                credential_id: "cred_1",
                now: NOW,
                revision: 7,
            };
            mutate(&mut args, &mut stored, &mut who);
            let call = Attempt {
                tool: who.tool,
                vault: who.vault,
                credential_id: who.credential_id,
                arguments: &args,
                now: who.now,
                revision: who.revision,
            };
            let got = decide(SECRET, Some(&stored), &call);
            assert_eq!(got, Err(*want), "{name}");
        }
    }

    #[test]
    fn an_unknown_challenge_is_a_mismatch_and_missing_fields_still_come_first() {
        let args = second_args();
        assert_eq!(
            decide(SECRET, None, &attempt(&args)),
            Err(Refusal::Mismatch(Mismatch::Unknown))
        );
        assert_eq!(
            decide(SECRET, None, &attempt(&first_args())),
            Err(Refusal::Required)
        );
    }

    #[test]
    fn every_refusal_says_its_fact() {
        for r in [
            Refusal::Required,
            Refusal::Mismatch(Mismatch::PlanHash),
            Refusal::Consumed,
            Refusal::Expired,
            Refusal::Stale { planned: 1, now: 2 },
        ] {
            assert!(!r.fact().is_empty(), "{r:?}");
        }
    }

    #[test]
    fn another_secret_does_not_verify() {
        let p = plan();
        assert!(verify_plan_hash(SECRET, &p, &plan_hash(SECRET, &p)));
        assert!(!verify_plan_hash(b"another secret", &p, &plan_hash(SECRET, &p)));
        assert!(!verify_plan_hash(SECRET, &p, ""));
        assert!(!verify_plan_hash(SECRET, &p, &plan_hash(SECRET, &p)[..63]));
    }

    type Field = (&'static str, fn(&mut Plan, &str));

    /// One change per plan field, driven by an arbitrary non-empty string.
    const FIELDS: &[Field] = &[
        ("tool", |p, s| p.tool.push_str(s)),
        ("vault", |p, s| p.vault.push_str(s)),
        ("arguments.idempotencyKey", |p, s| {
            let k = format!("{}{s}", p.arguments["idempotencyKey"].as_str().unwrap_or(""));
            p.arguments["idempotencyKey"] = k.into();
        }),
        ("arguments.paths", |p, s| {
            p.arguments["paths"] = json!([s]);
        }),
        ("affected", |p, s| p.affected.push(s.to_owned())),
        ("count", |p, s| p.count += 1 + s.len() as u64),
        ("revision", |p, s| p.revision += 1 + s.len() as u64),
        ("credentialId", |p, s| p.credential_id.push_str(s)),
        ("challengeId", |p, s| p.challenge_id.push_str(s)),
        ("expiresAt", |p, s| p.expires_at.push_str(s)),
    ];

    prop_compose! {
        fn arb_plan()(
            tool in "[a-z_]{1,16}",
            vault in ".{0,12}",
            key in ".{0,20}",
            paths in prop::collection::vec(".{0,20}", 0..5),
            revision in any::<u32>(),
            credential_id in ".{0,12}",
            challenge_id in ".{0,12}",
            expires_at in ".{0,25}",
        ) -> Plan {
            let arguments = json!({"paths": paths.clone(), "idempotencyKey": key});
            Plan::new(PlanInput {
                tool: &tool, vault: &vault, arguments: &arguments, affected: paths,
                revision: u64::from(revision), credential_id: &credential_id,
                challenge_id: &challenge_id, expires_at: &expires_at,
            })
        }
    }

    proptest! {
        #[test]
        fn any_change_to_any_plan_field_changes_the_hash(p in arb_plan(), s in ".{1,8}") {
            let h = plan_hash(SECRET, &p);
            prop_assert!(verify_plan_hash(SECRET, &p, &h));
            for (field, mutate) in FIELDS {
                let mut q = p.clone();
                mutate(&mut q, &s);
                if q == p {
                    continue; // e.g. `paths` already equal to [s]
                }
                prop_assert_ne!(&plan_hash(SECRET, &q), &h, "{}", field);
                prop_assert!(!verify_plan_hash(SECRET, &q, &h), "{}", field);
            }
        }

        #[test]
        fn forged_hashes_are_refused(p in arb_plan(), forged in "[0-9a-f]{64}", junk in ".*") {
            let h = plan_hash(SECRET, &p);
            prop_assume!(forged != h);
            prop_assert!(!verify_plan_hash(SECRET, &p, &forged));
            prop_assert!(!verify_plan_hash(SECRET, &p, &junk) || junk == h);
            // The unkeyed hash of the same bytes is not it either.
            prop_assert!(!verify_plan_hash(SECRET, &p, &sha256_hex(p.signed_bytes().as_bytes())));
            // And decide refuses it as a mismatch.
            let mut args = p.arguments.clone();
            args["challengeId"] = p.challenge_id.clone().into();
            args["planHash"] = forged.into();
            args["acknowledged"] = true.into();
            let stored = Issued { plan: p.clone(), expires_at: i64::MAX, consumed: false };
            let call = Attempt {
                tool: &p.tool, vault: &p.vault, credential_id: &p.credential_id,
                arguments: &args, now: 0, revision: p.revision,
            };
            let want = if p.challenge_id.is_empty() {
                Refusal::Required
            } else {
                Refusal::Mismatch(Mismatch::PlanHash)
            };
            prop_assert_eq!(decide(SECRET, Some(&stored), &call), Err(want));
        }
    }
}
