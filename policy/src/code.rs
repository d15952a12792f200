//! The stable wire codes of SPEC §11. Append-only: a code, once shipped, is never renamed or removed.

use serde::{Deserialize, Serialize};

macro_rules! codes {
    ($($variant:ident),* $(,)?) => {
        /// A stable error code as sent to clients and printed by the CLI.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        pub enum ErrorCode { $($variant),* }

        impl ErrorCode {
            /// Every code, in SPEC order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),*];

            /// The code as it appears on the wire.
            pub fn as_str(self) -> &'static str {
                match self { $(ErrorCode::$variant => stringify!($variant)),* }
            }
        }
    };
}

codes!(
    UNAUTHORIZED,
    CREDENTIAL_REVOKED,
    CREDENTIAL_EXPIRED,
    CAPABILITY_DENIED,
    VAULT_TARGET_REQUIRED,
    VAULT_NOT_FOUND,
    PATH_INVALID,
    PATH_DENIED,
    PATH_OUTSIDE_VAULT,
    NOT_FOUND,
    NOT_TEXT,
    TOO_LARGE,
    INVALID_ARGUMENT,
    EDIT_NOT_UNIQUE,
    PROPOSAL_NOT_FOUND,
    PROPOSAL_ALREADY_APPLIED,
    PROPOSAL_REJECTED,
    PROPOSAL_HASH_MISMATCH,
    PROPOSAL_TAMPERED,
    PROPOSAL_STALE_BASE,
    PROPOSAL_TARGET_EXISTS,
    IDEMPOTENCY_CONFLICT,
    CHALLENGE_REQUIRED,
    CHALLENGE_MISMATCH,
    CHALLENGE_EXPIRED,
    CHALLENGE_CONSUMED,
    CHALLENGE_STALE,
    HISTORY_NOT_TOP,
    HISTORY_STALE,
    OUTPUT_LIMIT_EXCEEDED,
    QUOTA_EXCEEDED,
    AUDIT_UNAVAILABLE,
    APPROVAL_DECLINED,
    INTERNAL,
);

impl ErrorCode {
    /// Whether the same call may succeed if simply sent again later.
    pub fn retryable(self) -> bool {
        matches!(self, ErrorCode::INTERNAL | ErrorCode::AUDIT_UNAVAILABLE)
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Snapshot of the code list: codes are append-only (SPEC §11).
    #[test]
    fn code_list_is_the_spec_list_in_order() {
        let names: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            names.join(","),
            "UNAUTHORIZED,CREDENTIAL_REVOKED,CREDENTIAL_EXPIRED,CAPABILITY_DENIED,VAULT_TARGET_REQUIRED,\
VAULT_NOT_FOUND,PATH_INVALID,PATH_DENIED,PATH_OUTSIDE_VAULT,NOT_FOUND,NOT_TEXT,TOO_LARGE,\
INVALID_ARGUMENT,EDIT_NOT_UNIQUE,PROPOSAL_NOT_FOUND,PROPOSAL_ALREADY_APPLIED,PROPOSAL_REJECTED,\
PROPOSAL_HASH_MISMATCH,PROPOSAL_TAMPERED,PROPOSAL_STALE_BASE,PROPOSAL_TARGET_EXISTS,\
IDEMPOTENCY_CONFLICT,CHALLENGE_REQUIRED,CHALLENGE_MISMATCH,CHALLENGE_EXPIRED,CHALLENGE_CONSUMED,\
CHALLENGE_STALE,HISTORY_NOT_TOP,HISTORY_STALE,OUTPUT_LIMIT_EXCEEDED,QUOTA_EXCEEDED,\
AUDIT_UNAVAILABLE,APPROVAL_DECLINED,INTERNAL"
        );
    }

    #[test]
    fn serde_uses_the_wire_name() {
        let s = serde_json::to_string(&ErrorCode::PATH_DENIED).unwrap_or_default();
        assert_eq!(s, "\"PATH_DENIED\"");
    }
}
