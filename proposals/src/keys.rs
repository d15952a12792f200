//! The one key derivation: every HMAC and the token key are `HMAC-SHA256(secret.key, label)`,
//! one label per use, so a tag made for one use is never valid for another and the home's
//! secret itself signs nothing. The labels are listed here and nowhere else.

use ring::hmac;

/// Proposal signatures (`proposals::seal`).
pub const PROPOSAL_SIGNATURE: &[u8] = b"vaultgate/proposal-signature/v1";
/// Critical-plan hashes (`proposals::challenge`).
pub const PLAN_HASH: &[u8] = b"vaultgate/plan-hash/v1";
/// Sealed page cursors.
pub const CURSOR: &[u8] = b"vaultgate/cursor/v1";
/// Sealed in-client approval state.
pub const APPROVAL: &[u8] = b"vaultgate/approval/v1";
/// The review page's CSRF tokens.
pub const REVIEW_CSRF: &[u8] = b"vaultgate/review-csrf/v1";
/// The running server's proof of identity to `vaultgate review`.
pub const REVIEW_SERVER_PROOF: &[u8] = b"vaultgate/review-server-proof/v1";
/// Bearer tokens (JWT, HS256), issued with the header `kid` [`TOKEN_KID`].
pub const TOKEN: &[u8] = b"vaultgate/token/v1";
/// The `kid` of tokens signed with the [`TOKEN`] key. Tokens without a `kid` were issued
/// before keys were derived and are verified with the secret as it is, so no credential stops
/// working at an upgrade.
pub const TOKEN_KID: &str = "t1";

/// Every label, for the test that keeps them distinct.
pub const LABELS: [&[u8]; 7] = [
    PROPOSAL_SIGNATURE,
    PLAN_HASH,
    CURSOR,
    APPROVAL,
    REVIEW_CSRF,
    REVIEW_SERVER_PROOF,
    TOKEN,
];

/// The key for `label`, as bytes (the token library takes bytes).
pub fn derive(secret: &[u8], label: &[u8]) -> [u8; 32] {
    let root = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let tag = hmac::sign(&root, label);
    let mut out = [0u8; 32];
    out.copy_from_slice(tag.as_ref());
    out
}

/// The HMAC-SHA256 key for `label`.
pub fn hmac_key(secret: &[u8], label: &[u8]) -> hmac::Key {
    hmac::Key::new(hmac::HMAC_SHA256, &derive(secret, label))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_label_gives_its_own_key_and_none_is_the_secret() {
        let secret = [7u8; 32];
        let mut seen = std::collections::BTreeSet::new();
        for label in LABELS {
            let k = derive(&secret, label);
            assert_ne!(k, secret);
            assert!(seen.insert(k), "two labels give one key");
        }
        assert_eq!(seen.len(), LABELS.len());
        assert_ne!(derive(&[8u8; 32], CURSOR), derive(&secret, CURSOR));
    }
}
