//! Tokens: HS256 JWTs signed with `secret.key`, algorithm, issuer and audience pinned (docs/contract.md#concepts).
//! A valid signature only names a credential; the database row decides everything else.

use jsonwebtoken::crypto::{CryptoProvider, JwtSigner, JwtVerifier, KeyUtils};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use proposals::keys;

use crate::error::GatewayError;
use crate::home::SecretKey;

pub const ISSUER: &str = "vaultgate";

/// A bearer token. `Debug` never prints it.
#[derive(Clone)]
pub struct Token(String);

impl Token {
    pub fn new(s: String) -> Token {
        Token(s)
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token([redacted])")
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    pub iss: String,
    pub aud: String,
    pub sub: String,
    pub jti: String,
    pub iat: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exp: Option<i64>,
}

/// HMAC-SHA256 over ring, the only algorithm tokens use. jsonwebtoken is built without its own
/// crypto backends, so the RSA, ECDSA and EdDSA stacks are not even compiled in.
struct Hs256(ring::hmac::Key);

impl signature::Signer<Vec<u8>> for Hs256 {
    fn try_sign(&self, msg: &[u8]) -> Result<Vec<u8>, signature::Error> {
        Ok(ring::hmac::sign(&self.0, msg).as_ref().to_vec())
    }
}

impl JwtSigner for Hs256 {
    fn algorithm(&self) -> Algorithm {
        Algorithm::HS256
    }
}

impl signature::Verifier<Vec<u8>> for Hs256 {
    fn verify(&self, msg: &[u8], sig: &Vec<u8>) -> Result<(), signature::Error> {
        // Constant-time comparison inside ring.
        ring::hmac::verify(&self.0, msg, sig).map_err(|_| signature::Error::new())
    }
}

impl JwtVerifier for Hs256 {
    fn algorithm(&self) -> Algorithm {
        Algorithm::HS256
    }
}

// SECURITY(T-AUTH1, T-DEP1): every algorithm but HS256 is refused by the provider itself, and no
// other backend is compiled in.
fn hs256_signer(alg: &Algorithm, key: &EncodingKey) -> jsonwebtoken::errors::Result<Box<dyn JwtSigner>> {
    if *alg != Algorithm::HS256 {
        return Err(ErrorKind::InvalidAlgorithm.into());
    }
    Ok(Box::new(Hs256(ring::hmac::Key::new(
        ring::hmac::HMAC_SHA256,
        key.as_bytes(),
    ))))
}

fn hs256_verifier(alg: &Algorithm, key: &DecodingKey) -> jsonwebtoken::errors::Result<Box<dyn JwtVerifier>> {
    if *alg != Algorithm::HS256 {
        return Err(ErrorKind::InvalidAlgorithm.into());
    }
    Ok(Box::new(Hs256(ring::hmac::Key::new(
        ring::hmac::HMAC_SHA256,
        key.try_get_as_bytes()?,
    ))))
}

static PROVIDER: CryptoProvider = CryptoProvider {
    signer_factory: hs256_signer,
    verifier_factory: hs256_verifier,
    // JWK helpers are never called: keys are raw secrets from `secret.key`.
    key_utils: KeyUtils::new_unimplemented(),
};

/// Installs the HS256 provider once per process (a second install is a no-op).
fn provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = PROVIDER.install_default();
    });
}

pub fn issue(secret: &SecretKey, claims: &Claims) -> Result<Token, GatewayError> {
    provider();
    let key = EncodingKey::from_secret(&keys::derive(secret.bytes(), keys::TOKEN))
        .map_err(|e| GatewayError::Internal(format!("token key: {e}")))?;
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some(keys::TOKEN_KID.to_owned());
    jsonwebtoken::encode(&header, claims, &key)
        .map(Token)
        .map_err(|e| GatewayError::Internal(format!("token encoding: {e}")))
}

/// Verifies signature, algorithm, issuer and audience. Expiry is judged by the caller against the
/// row (the row is authoritative), but an `exp` in the past is refused here too.
pub fn verify(secret: &SecretKey, audience: &str, token: &str) -> Result<Claims, GatewayError> {
    // SECURITY(T-AUTH1): only HS256; `none` and every other alg fail inside jsonwebtoken.
    provider();
    let mut v = Validation::new(Algorithm::HS256);
    v.set_issuer(&[ISSUER]);
    v.set_audience(&[audience]);
    v.set_required_spec_claims(&["iss", "aud", "sub"]);
    v.validate_exp = true;
    v.leeway = 0;
    v.required_spec_claims.remove("exp");
    // The key the token names: derived (`kid` t1), or the secret itself for a token issued
    // before keys were derived (no `kid`). Any other `kid` is refused.
    let kid = jsonwebtoken::decode_header(token)
        .map_err(|_| GatewayError::Unauthorized("malformed token"))?
        .kid;
    let derived;
    let key_bytes: &[u8] = match kid.as_deref() {
        Some(keys::TOKEN_KID) => {
            derived = keys::derive(secret.bytes(), keys::TOKEN);
            &derived
        }
        None => secret.bytes(),
        Some(_) => return Err(GatewayError::Unauthorized("unknown key id")),
    };
    let key =
        DecodingKey::from_secret(key_bytes).map_err(|e| GatewayError::Internal(format!("token key: {e}")))?;
    match jsonwebtoken::decode::<Claims>(token, &key, &v) {
        Ok(data) => Ok(data.claims),
        Err(e) => Err(match e.kind() {
            jsonwebtoken::errors::ErrorKind::ExpiredSignature => GatewayError::CredentialExpired,
            jsonwebtoken::errors::ErrorKind::InvalidAudience => GatewayError::Unauthorized("wrong audience"),
            jsonwebtoken::errors::ErrorKind::InvalidIssuer => GatewayError::Unauthorized("wrong issuer"),
            jsonwebtoken::errors::ErrorKind::InvalidSignature => GatewayError::Unauthorized("bad signature"),
            jsonwebtoken::errors::ErrorKind::InvalidAlgorithm => {
                GatewayError::Unauthorized("algorithm not allowed")
            }
            _ => GatewayError::Unauthorized("malformed token"),
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn key(b: u8) -> SecretKey {
        crate::home::test_secret([b; 32])
    }

    fn claims(aud: &str, exp: Option<i64>) -> Claims {
        Claims {
            iss: ISSUER.into(),
            aud: aud.into(),
            sub: "cred_1".into(),
            jti: "j".into(),
            iat: 0,
            exp,
        }
    }

    #[test]
    fn round_trip_and_refusals() {
        let k = key(1);
        let t = issue(&k, &claims("vg-a", None)).unwrap();
        assert_eq!(verify(&k, "vg-a", t.expose()).unwrap().sub, "cred_1");
        assert!(matches!(
            verify(&k, "vg-b", t.expose()),
            Err(GatewayError::Unauthorized("wrong audience"))
        ));
        assert!(matches!(
            verify(&key(2), "vg-a", t.expose()),
            Err(GatewayError::Unauthorized(_))
        ));
        let expired = issue(&k, &claims("vg-a", Some(1))).unwrap();
        assert!(matches!(
            verify(&k, "vg-a", expired.expose()),
            Err(GatewayError::CredentialExpired)
        ));
        assert!(matches!(
            verify(&k, "vg-a", "not.a.token"),
            Err(GatewayError::Unauthorized(_))
        ));
        assert_eq!(format!("{t:?}"), "Token([redacted])");
    }

    /// Tokens issued before keys were derived carry no `kid` and were signed with the secret:
    /// they stay valid. A `kid` token is valid only under the derived key, and an unknown `kid`
    /// is refused.
    #[test]
    fn tokens_name_their_key() {
        let k = key(1);
        let c = claims("vg-a", None);
        let t = issue(&k, &c).unwrap();
        let header = jsonwebtoken::decode_header(t.expose()).unwrap();
        assert_eq!(header.kid.as_deref(), Some(keys::TOKEN_KID));
        provider();
        let raw = EncodingKey::from_secret(k.bytes()).unwrap();
        let old = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &c, &raw).unwrap();
        assert_eq!(verify(&k, "vg-a", &old).unwrap().sub, "cred_1");
        let mut h = Header::new(Algorithm::HS256);
        h.kid = Some(keys::TOKEN_KID.to_owned());
        let mixed = jsonwebtoken::encode(&h, &c, &raw).unwrap();
        assert!(matches!(
            verify(&k, "vg-a", &mixed),
            Err(GatewayError::Unauthorized(_))
        ));
        h.kid = Some("t9".to_owned());
        let derived = EncodingKey::from_secret(&keys::derive(k.bytes(), keys::TOKEN)).unwrap();
        let unknown = jsonwebtoken::encode(&h, &c, &derived).unwrap();
        assert!(matches!(
            verify(&k, "vg-a", &unknown),
            Err(GatewayError::Unauthorized("unknown key id"))
        ));
    }

    #[test]
    fn alg_none_is_refused() {
        use base64_like::encode;
        let header = encode(br#"{"alg":"none","typ":"JWT"}"#);
        let body = encode(br#"{"iss":"vaultgate","aud":"vg-a","sub":"cred_1","jti":"j","iat":0}"#);
        let forged = format!("{header}.{body}.");
        assert!(verify(&key(1), "vg-a", &forged).is_err());
    }

    /// Tiny base64url (no padding) so the test needs no extra dependency.
    mod base64_like {
        pub fn encode(input: &[u8]) -> String {
            const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
            let mut out = String::new();
            for chunk in input.chunks(3) {
                let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
                let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
                let chars = chunk.len() + 1;
                for i in 0..chars {
                    out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
                }
            }
            out
        }
    }
}
