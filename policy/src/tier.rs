//! Permission tiers and what each may do (docs/contract.md#tiers-and-capabilities).

use serde::{Deserialize, Serialize};

/// A credential's permission tier, from least to most powerful.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    Read,
    Propose,
    #[default]
    Auto,
    Full,
}

/// Something a tool call needs the credential's tier to grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Capability {
    /// Read tools, `list_proposals`, `get_proposal`, `history_status`.
    Read,
    /// `propose_*`.
    Propose,
    /// Apply or reject proposals the credential itself created.
    DecideOwn,
    /// Apply or reject anyone's proposals.
    DecideAny,
    /// `history_undo` / `history_redo`.
    History,
    /// Critical tools, always through the two-phase challenge.
    Critical,
}

impl Capability {
    /// What deciding a proposal needs: `DecideOwn` for the caller's own, `DecideAny` otherwise.
    pub fn to_decide(own: bool) -> Capability {
        if own {
            Capability::DecideOwn
        } else {
            Capability::DecideAny
        }
    }
}

/// What a credential may do about applying one proposal: the one authorization rule of applying
/// (docs/contract.md#tiers-and-capabilities, and in-client approval in
/// docs/contract.md#the-review-page-and-in-client-approval).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MayApply {
    /// The tier alone allows it.
    Allow,
    /// Only with a person's yes in the client: the tier one step up, for a credential that opted
    /// in (`--approve-in-client`).
    NeedsPersonYes,
    Deny,
}

/// May a credential of `tier` apply a proposal (`own`: one it made itself)? `approve_in_client`
/// is its opt-in to a person's yes lifting the tier exactly one step ([`Tier::approval_lifts`]).
// SECURITY(T-APPROVE1): the lift is decided here and nowhere else.
pub fn may_apply(tier: Tier, approve_in_client: bool, own: bool) -> MayApply {
    let cap = Capability::to_decide(own);
    if tier.allows(cap) {
        MayApply::Allow
    } else if approve_in_client && tier.approval_lifts(cap) {
        MayApply::NeedsPersonYes
    } else {
        MayApply::Deny
    }
}

impl Tier {
    pub const ALL: [Tier; 4] = [Tier::Read, Tier::Propose, Tier::Auto, Tier::Full];

    /// The single table of docs/contract.md#tiers-and-capabilities.
    pub fn allows(self, cap: Capability) -> bool {
        use Capability::*;
        match cap {
            Read => true,
            Propose => self >= Tier::Propose,
            DecideOwn | History | Critical => self >= Tier::Auto,
            DecideAny => self >= Tier::Full,
        }
    }

    /// In-client approval (docs/contract.md#the-review-page-and-in-client-approval): whether a person's approval through the client lets this
    /// tier apply a proposal it alone may not — exactly one step up, `DecideOwn` for `propose`
    /// and `DecideAny` for `auto`; never for `read` (it proposes nothing) or `full` (nothing above).
    pub fn approval_lifts(self, cap: Capability) -> bool {
        matches!(
            (self, cap),
            (Tier::Propose, Capability::DecideOwn) | (Tier::Auto, Capability::DecideAny)
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Read => "read",
            Tier::Propose => "propose",
            Tier::Auto => "auto",
            Tier::Full => "full",
        }
    }
}

impl std::fmt::Display for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Tier {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "read" => Ok(Tier::Read),
            "propose" => Ok(Tier::Propose),
            "auto" => Ok(Tier::Auto),
            "full" => Ok(Tier::Full),
            other => Err(format!(
                "unknown tier '{other}' (expected read, propose, auto or full)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn may_apply_is_the_tier_table_with_one_opted_in_step() {
        use MayApply::*;
        let table = [
            // (tier, own) -> without the opt-in, with it
            ((Tier::Read, true), (Deny, Deny)),
            ((Tier::Read, false), (Deny, Deny)),
            ((Tier::Propose, true), (Deny, NeedsPersonYes)),
            ((Tier::Propose, false), (Deny, Deny)),
            ((Tier::Auto, true), (Allow, Allow)),
            ((Tier::Auto, false), (Deny, NeedsPersonYes)),
            ((Tier::Full, true), (Allow, Allow)),
            ((Tier::Full, false), (Allow, Allow)),
        ];
        for ((tier, own), (plain, opted)) in table {
            assert_eq!(may_apply(tier, false, own), plain, "{tier} own={own}");
            assert_eq!(may_apply(tier, true, own), opted, "{tier} own={own} opted in");
        }
    }

    #[test]
    fn approval_lifts_exactly_one_step_and_only_for_applying() {
        use Capability::*;
        for tier in Tier::ALL {
            for cap in [Read, Propose, DecideOwn, DecideAny, History, Critical] {
                let lifted = tier.approval_lifts(cap);
                let expected = matches!((tier, cap), (Tier::Propose, DecideOwn) | (Tier::Auto, DecideAny));
                assert_eq!(lifted, expected, "{tier} {cap:?}");
                // A lift is only ever for something the tier lacks and the next tier has.
                if lifted {
                    assert!(!tier.allows(cap));
                }
            }
        }
    }
    use Capability::*;

    #[test]
    fn tier_table_matches_spec() {
        // (tier, [Read, Propose, DecideOwn, DecideAny, History, Critical])
        let table = [
            (Tier::Read, [true, false, false, false, false, false]),
            (Tier::Propose, [true, true, false, false, false, false]),
            (Tier::Auto, [true, true, true, false, true, true]),
            (Tier::Full, [true, true, true, true, true, true]),
        ];
        for (tier, expected) in table {
            let got = [Read, Propose, DecideOwn, DecideAny, History, Critical].map(|c| tier.allows(c));
            assert_eq!(got, expected, "{tier}");
        }
    }

    #[test]
    fn tier_names_round_trip() {
        for t in Tier::ALL {
            assert_eq!(t.as_str().parse::<Tier>(), Ok(t));
        }
        assert!("admin".parse::<Tier>().is_err());
    }
}
