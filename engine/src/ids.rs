//! Newtypes for the ids and hashes that cross the engine's API, so a proposal id is never passed
//! where a challenge id is expected and a note hash never where a proposal hash is.

use std::fmt;

use serde::{Deserialize, Serialize};

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Wraps a value from the wire or the state database; checks happen where it is used.
            pub fn from_wire(s: impl Into<String>) -> $name {
                $name(s.into())
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

id_type!(
    /// A vault's id in `gateway.toml`.
    VaultId
);
id_type!(
    /// A proposal's id (UUIDv7) — or, where the CLI accepts it, its slug.
    ProposalId
);
id_type!(
    /// A proposal's `proposalHash` (SHA-256 hex over its canonical fields).
    ProposalHash
);
id_type!(
    /// The SHA-256 hex of a note's bytes (`baseHash`, `contentHash`).
    NoteHash
);
id_type!(
    /// A history entry's id (`h_<uuid>`).
    HistoryEntryId
);
id_type!(
    /// A two-phase challenge's id (UUIDv7).
    ChallengeId
);

impl HistoryEntryId {
    /// A new, time-ordered entry id.
    pub fn new() -> HistoryEntryId {
        HistoryEntryId(format!("h_{}", uuid::Uuid::now_v7().simple()))
    }
}

impl Default for HistoryEntryId {
    fn default() -> Self {
        HistoryEntryId::new()
    }
}
