//! The record format: what a caller supplies ([`Entry`]) and what one line holds ([`AuditRecord`]).

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

/// How the audited call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Ok,
    Denied,
    Error,
}

/// Who made the call.
///
/// On the wire a credential is the object `{credentialId, name, tier, transport}` and the local
/// CLI user is the string `"cli:<user>"`, the same user on the review page `"review:<user>"`
/// (docs/contract.md#the-audit-log, docs/contract.md#the-review-page-and-in-client-approval).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "ActorRepr", into = "ActorRepr")]
pub enum Actor {
    Credential {
        credential_id: String,
        name: String,
        tier: String,
        transport: String,
    },
    Cli {
        user: String,
    },
    /// The OS user acting on the review page (docs/contract.md#the-review-page-and-in-client-approval).
    Review {
        user: String,
    },
}

const CLI_PREFIX: &str = "cli:";
const REVIEW_PREFIX: &str = "review:";

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum ActorRepr {
    Cli(String),
    Credential(CredentialRepr),
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CredentialRepr {
    credential_id: String,
    name: String,
    tier: String,
    transport: String,
}

impl From<Actor> for ActorRepr {
    fn from(actor: Actor) -> Self {
        match actor {
            Actor::Credential {
                credential_id,
                name,
                tier,
                transport,
            } => ActorRepr::Credential(CredentialRepr {
                credential_id,
                name,
                tier,
                transport,
            }),
            Actor::Cli { user } => ActorRepr::Cli(format!("{CLI_PREFIX}{user}")),
            Actor::Review { user } => ActorRepr::Cli(format!("{REVIEW_PREFIX}{user}")),
        }
    }
}

impl TryFrom<ActorRepr> for Actor {
    type Error = String;

    fn try_from(repr: ActorRepr) -> Result<Self, Self::Error> {
        match repr {
            ActorRepr::Cli(s) => {
                if let Some(user) = s.strip_prefix(CLI_PREFIX) {
                    Ok(Actor::Cli {
                        user: user.to_owned(),
                    })
                } else if let Some(user) = s.strip_prefix(REVIEW_PREFIX) {
                    Ok(Actor::Review {
                        user: user.to_owned(),
                    })
                } else {
                    Err(format!(
                        "actor string must start with `{CLI_PREFIX}` or `{REVIEW_PREFIX}`"
                    ))
                }
            }
            ActorRepr::Credential(c) => Ok(Actor::Credential {
                credential_id: c.credential_id,
                name: c.name,
                tier: c.tier,
                transport: c.transport,
            }),
        }
    }
}

/// What a caller supplies; `seq`, `ts`, `prev` and `hash` are filled in by the log.
///
/// It must never hold tokens or note contents (docs/contract.md#the-audit-log): `target` is a path or id,
/// `args_hash` a hash ([`crate::args_hash`]), never the arguments themselves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub event: String,
    pub actor: Actor,
    pub vault: Option<String>,
    pub tool: Option<String>,
    pub target: Option<String>,
    pub proposal_id: Option<String>,
    pub challenge_id: Option<String>,
    pub outcome: Outcome,
    pub code: Option<String>,
    pub args_hash: Option<String>,
    /// How many events one record stands for (aggregated refusals, docs/contract.md#the-audit-log); `None` is one.
    pub count: Option<u64>,
    /// Who approved the change beyond the caller's tier: `"client"` (in-client approval, docs/contract.md#the-review-page-and-in-client-approval).
    pub approval: Option<String>,
    /// The team gateway that writes it (team mode); `None` in a home's own log.
    pub gateway: Option<String>,
}

impl Entry {
    /// An entry with every optional field absent.
    pub fn new(event: impl Into<String>, actor: Actor, outcome: Outcome) -> Self {
        Entry {
            event: event.into(),
            actor,
            vault: None,
            tool: None,
            target: None,
            proposal_id: None,
            challenge_id: None,
            outcome,
            code: None,
            args_hash: None,
            count: None,
            approval: None,
            gateway: None,
        }
    }
}

/// One line of `audit.jsonl` as stored.
///
/// Field names are camelCase on the wire; absent optional fields are omitted, never `null`
/// (a `null` is reported by [`crate::verify`] as a non-canonical line). `ts` is RFC 3339 UTC with
/// millisecond precision, e.g. `2026-11-29T20:31:47.123Z`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuditRecord {
    pub seq: u64,
    #[serde(with = "rfc3339_millis")]
    pub ts: OffsetDateTime,
    pub prev: String,
    pub hash: String,
    pub event: String,
    pub actor: Actor,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vault: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposal_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub challenge_id: Option<String>,
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<String>,
    /// The team gateway that wrote the record (team mode, docs/contract.md#team-mode); absent in a
    /// home's own log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
}

/// `ts` on the wire: `YYYY-MM-DDTHH:MM:SS.mmmZ`, always UTC, always three fractional digits, so
/// that a record's text is a function of its value (needed for canonical lines).
pub(crate) mod rfc3339_millis {
    use serde::{Deserialize, Deserializer, Serializer, de::Error as _, ser::Error as _};
    use time::format_description::FormatItem;
    use time::macros::format_description;
    use time::{OffsetDateTime, PrimitiveDateTime, UtcOffset};

    const FORMAT: &[FormatItem<'static>] =
        format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");

    /// `now` in UTC, cut to whole milliseconds: exactly the value the line will hold.
    pub(crate) fn normalize(now: OffsetDateTime) -> Result<OffsetDateTime, String> {
        let utc = now.to_offset(UtcOffset::UTC);
        if !(0..=9999).contains(&utc.year()) {
            return Err(format!("year {} is outside 0000..=9999", utc.year()));
        }
        utc.replace_millisecond(utc.millisecond())
            .map_err(|e| e.to_string())
    }

    pub(crate) fn format(ts: &OffsetDateTime) -> Result<String, String> {
        let utc = normalize(*ts)?;
        utc.format(FORMAT).map_err(|e| e.to_string())
    }

    pub(crate) fn parse(s: &str) -> Result<OffsetDateTime, String> {
        PrimitiveDateTime::parse(s, FORMAT)
            .map(PrimitiveDateTime::assume_utc)
            .map_err(|e| format!("`ts` is not RFC 3339 UTC with milliseconds: {e}"))
    }

    pub(crate) fn serialize<S: Serializer>(ts: &OffsetDateTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format(ts).map_err(S::Error::custom)?)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<OffsetDateTime, D::Error> {
        let s = String::deserialize(d)?;
        parse(&s).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn credential() -> Actor {
        Actor::Credential {
            credential_id: "cred_1".into(),
            name: "claude".into(),
            tier: "propose".into(),
            transport: "http".into(),
        }
    }

    #[test]
    fn actor_wire_forms_match_the_spec() {
        assert_eq!(
            serde_json::to_value(credential()).unwrap(),
            json!({"credentialId": "cred_1", "name": "claude", "tier": "propose", "transport": "http"})
        );
        let cli = Actor::Cli { user: "alice".into() };
        assert_eq!(serde_json::to_value(&cli).unwrap(), json!("cli:alice"));
        assert_eq!(serde_json::from_value::<Actor>(json!("cli:alice")).unwrap(), cli);
        let review = Actor::Review { user: "alice".into() };
        assert_eq!(serde_json::to_value(&review).unwrap(), json!("review:alice"));
        assert_eq!(
            serde_json::from_value::<Actor>(json!("review:alice")).unwrap(),
            review
        );
        assert_eq!(
            serde_json::from_value::<Actor>(serde_json::to_value(credential()).unwrap()).unwrap(),
            credential()
        );
    }

    #[test]
    fn malformed_actors_are_rejected() {
        for bad in [
            json!("alice"),
            json!({"credentialId": "c", "name": "n", "tier": "t"}),
            json!({"credentialId": "c", "name": "n", "tier": "t", "transport": "x", "token": "s"}),
            json!(7),
        ] {
            assert!(serde_json::from_value::<Actor>(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn outcome_wire_forms() {
        assert_eq!(serde_json::to_value(Outcome::Ok).unwrap(), json!("ok"));
        assert_eq!(serde_json::to_value(Outcome::Denied).unwrap(), json!("denied"));
        assert_eq!(serde_json::to_value(Outcome::Error).unwrap(), json!("error"));
    }

    #[test]
    fn timestamps_are_utc_milliseconds() {
        let t = time::macros::datetime!(2026-11-29 21:31:47.123_456_789 +01:00);
        assert_eq!(rfc3339_millis::format(&t).unwrap(), "2026-11-29T20:31:47.123Z");
        let back = rfc3339_millis::parse("2026-11-29T20:31:47.123Z").unwrap();
        assert_eq!(back, rfc3339_millis::normalize(t).unwrap());
        assert!(rfc3339_millis::parse("2026-11-29T20:31:47Z").is_err());
        assert!(rfc3339_millis::parse("2026-11-29T20:31:47.123+00:00").is_err());
        let far = time::macros::datetime!(-0001-01-01 00:00 UTC);
        assert!(rfc3339_millis::format(&far).is_err());
    }
}
