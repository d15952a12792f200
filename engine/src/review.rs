//! Review-page logins (docs/contract.md#the-review-page-and-in-client-approval): the one-time code `vaultgate review` mints, the session its
//! first use opens, the CSRF token bound to that session, and the record `serve` leaves so the
//! CLI finds the live server of its home.
//!
//! Secrets (code, cookie) are 256 random bits and only their SHA-256 is stored. The session path
//! is a second random value: it scopes the cookie (`Path=`) so no other page of the host is sent it.

use std::net::SocketAddr;
use std::path::Path;

use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::core::{Operator, now_unix};
use crate::error::GatewayError;
use crate::home::Home;
use audit::{Durability, Entry, Outcome};

/// What `serve` records in the home while it listens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerRecord {
    pub pid: u32,
    pub host: String,
    pub port: u16,
}

/// A live session, as the page sees it: who, and the token its forms must carry.
#[derive(Debug, Clone)]
pub struct Session {
    pub path: String,
    pub operator: Operator,
    pub csrf: String,
    pub expires_at: i64,
    id_hash: String,
}

/// What a first use of a code opened: the cookie value (secret) and the session path.
pub struct Login {
    pub cookie: String,
    pub path: String,
    pub max_age: u64,
    pub operator: Operator,
}

fn random_hex(bytes: usize) -> Result<String, GatewayError> {
    let mut buf = vec![0u8; bytes];
    SystemRandom::new()
        .fill(&mut buf)
        .map_err(|_| GatewayError::Internal("no randomness".into()))?;
    Ok(hex::encode(buf))
}

fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// Codes, cookies and session paths are lowercase hex of a fixed length; anything else is
/// refused before a database lookup.
fn well_formed(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn csrf_message(id_hash: &str) -> Vec<u8> {
    format!("vaultgate review csrf\0{id_hash}").into_bytes()
}

const SECRET_BYTES: usize = 32;
const PATH_BYTES: usize = 16;

fn not_logged_in() -> GatewayError {
    GatewayError::Unauthorized("no review session here: run `vaultgate review` for a new login link")
}

/// The review page's one-time login codes and sessions.
pub struct ReviewSessions<'a> {
    pub(crate) core: &'a crate::core::Core,
}

impl ReviewSessions<'_> {
    /// Mints a one-time login code for `operator` (the CLI user), valid for
    /// `[review] login_code_ttl_seconds`. Audited before the code is shown.
    pub fn mint_review_code(&self, operator: &Operator) -> Result<String, GatewayError> {
        self.core.audit_preflight()?;
        let code = random_hex(SECRET_BYTES)?;
        let now = now_unix();
        let ttl = i64::try_from(self.core.config().review.login_code_ttl_seconds).unwrap_or(i64::MAX);
        self.core
            .state
            .add_review_code(&sha256_hex(&code), &operator.user, now, now.saturating_add(ttl))?;
        let entry = Entry::new("review.code", operator.audit_actor(), Outcome::Ok);
        self.core.append_audit(entry, Durability::Sync)?;
        Ok(code)
    }

    /// SECURITY(T-REVIEW1): a code opens one session, once, in time; a second or late use is
    /// refused (and audited like any unauthenticated refusal by the edge).
    pub fn review_login(&self, code: &str) -> Result<Login, GatewayError> {
        let refused = || {
            GatewayError::Forbidden(
                "this login link was used already or has expired: run `vaultgate review` for a new one"
                    .into(),
            )
        };
        if !well_formed(code, SECRET_BYTES * 2) {
            return Err(refused());
        }
        self.core.audit_preflight()?;
        let cookie = random_hex(SECRET_BYTES)?;
        let path = random_hex(PATH_BYTES)?;
        let now = now_unix();
        let max_age = self.core.config().review.session_seconds.max(60);
        let expires_at = now.saturating_add(i64::try_from(max_age).unwrap_or(i64::MAX));
        let id_hash = sha256_hex(&cookie);
        let user = self
            .core
            .state
            .redeem_review_code(
                &sha256_hex(code),
                now,
                &inbox::NewReviewSession {
                    id_hash: &id_hash,
                    path: &path,
                    expires_at,
                },
            )?
            .ok_or_else(refused)?;
        let operator = Operator::review(&user);
        let entry = Entry::new("review.login", operator.audit_actor(), Outcome::Ok);
        self.core.append_audit(entry, Durability::Sync)?;
        Ok(Login {
            cookie,
            path,
            max_age,
            operator,
        })
    }

    /// SECURITY(T-REVIEW2): the session of `path`, only with its own cookie; any other
    /// combination (no cookie, another session's, an ended or expired one) is `UNAUTHORIZED`.
    pub fn review_session(&self, path: &str, cookie: Option<&str>) -> Result<Session, GatewayError> {
        self.core.refresh();
        let cookie = cookie.ok_or_else(not_logged_in)?;
        if !well_formed(path, PATH_BYTES * 2) || !well_formed(cookie, SECRET_BYTES * 2) {
            return Err(not_logged_in());
        }
        let row = self
            .core
            .state
            .review_session(path, now_unix())?
            .ok_or_else(not_logged_in)?;
        // Hashes compared: timing can only tell how much of an attacker's own hash matched.
        if sha256_hex(cookie) != row.id_hash {
            return Err(not_logged_in());
        }
        Ok(Session {
            csrf: self.csrf_for(&row.id_hash),
            operator: Operator::review(&row.user),
            path: row.path,
            expires_at: row.expires_at,
            id_hash: row.id_hash,
        })
    }

    /// The CSRF token of a session: an HMAC of its id under the home's secret, so it is bound
    /// to this session and needs no storage.
    fn csrf_for(&self, id_hash: &str) -> String {
        let tag = ring::hmac::sign(&self.csrf_key(), &csrf_message(id_hash));
        hex::encode(tag.as_ref())
    }

    fn proof_key(&self) -> ring::hmac::Key {
        proposals::keys::hmac_key(self.core.secret().bytes(), proposals::keys::REVIEW_SERVER_PROOF)
    }

    fn csrf_key(&self) -> ring::hmac::Key {
        proposals::keys::hmac_key(self.core.secret().bytes(), proposals::keys::REVIEW_CSRF)
    }

    /// SECURITY(T-REVIEW3): every state-changing request carries its session's CSRF token.
    pub fn check_csrf(&self, session: &Session, given: Option<&str>) -> Result<(), GatewayError> {
        // Verified as an HMAC (constant time), not compared as text.
        let ok = given.and_then(|g| hex::decode(g).ok()).is_some_and(|tag| {
            ring::hmac::verify(&self.csrf_key(), &csrf_message(&session.id_hash), &tag).is_ok()
        });
        if ok {
            Ok(())
        } else {
            Err(GatewayError::Forbidden(
                "this form is stale or not from this session's page; reload the page and try again".into(),
            ))
        }
    }

    /// Ends the session (Logout), audited.
    pub fn review_logout(&self, session: &Session) -> Result<(), GatewayError> {
        self.core.audit_preflight()?;
        self.core.state.end_review_session(&session.id_hash, now_unix())?;
        let entry = Entry::new("review.logout", session.operator.audit_actor(), Outcome::Ok);
        self.core.append_audit(entry, Durability::Sync)?;
        Ok(())
    }

    /// Audits a refused review-page request of a logged-in session (a bad CSRF token or Origin).
    pub fn record_review_refusal(
        &self,
        session: &Session,
        what: &str,
        e: &GatewayError,
    ) -> Result<(), GatewayError> {
        let mut entry = Entry::new("review.refused", session.operator.audit_actor(), Outcome::Denied);
        entry.code = Some(e.code().as_str().to_owned());
        entry.target = Some(what.to_owned());
        self.core.append_audit(entry, Durability::Sync).map(|_| ())
    }
}

/// A fresh random nonce for [`ReviewSessions::server_proof`].
pub fn new_nonce() -> Result<String, GatewayError> {
    random_hex(SECRET_BYTES)
}

impl ReviewSessions<'_> {
    /// SECURITY(T-REVIEW5): proves that the server listening on `served` is this home's: an HMAC
    /// of the caller's nonce and that address under the home's secret. `vaultgate review` checks
    /// it against the address it connected to before it mints a code, so a process squatting a
    /// port never receives a login code for the real server — not even by relaying the question
    /// to it (the real server's answer names the real server's address).
    pub fn server_proof(&self, nonce: &str, served: &SocketAddr) -> Result<String, GatewayError> {
        if !well_formed(nonce, SECRET_BYTES * 2) {
            return Err(GatewayError::InvalidArgument(
                "nonce: 64 lowercase hex digits".into(),
            ));
        }
        let message = proof_message(&self.core.config().gateway_id, nonce, served);
        Ok(hex::encode(
            ring::hmac::sign(&self.proof_key(), &message).as_ref(),
        ))
    }

    /// Whether `proof` is the answer of this home's server listening on `served` to `nonce`.
    pub fn is_server_proof(&self, nonce: &str, served: &SocketAddr, proof: &str) -> bool {
        let message = proof_message(&self.core.config().gateway_id, nonce, served);
        hex::decode(proof.trim())
            .is_ok_and(|tag| ring::hmac::verify(&self.proof_key(), &message, &tag).is_ok())
    }
}

fn proof_message(gateway_id: &str, nonce: &str, served: &SocketAddr) -> Vec<u8> {
    format!("vaultgate review server\0{gateway_id}\0{served}\0{nonce}").into_bytes()
}

/// Records that this process serves the home at `host:port` (replacing an older record).
pub fn write_server_record(home: &Home, record: &ServerRecord) -> Result<(), GatewayError> {
    let text = serde_json::to_string(record).map_err(|e| GatewayError::Internal(e.to_string()))?;
    let path = home.server_record_path();
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, &path)?;
    Ok(())
}

/// Removes the record if it is still this process's.
pub fn remove_server_record(home: &Home, pid: u32) {
    let path = home.server_record_path();
    if read_server_record_at(&path).is_some_and(|r| r.pid == pid) {
        let _ = std::fs::remove_file(&path);
    }
}

/// The record of the server of this home, if one was written (it may be stale: the caller
/// checks that something listens).
pub fn read_server_record(home: &Home) -> Option<ServerRecord> {
    read_server_record_at(&home.server_record_path())
}

fn read_server_record_at(path: &Path) -> Option<ServerRecord> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::Core;

    fn core() -> (tempfile::TempDir, Core) {
        let dir = tempfile::tempdir().unwrap();
        let home = Home {
            dir: dir.path().join("home"),
        };
        home.init().unwrap();
        (dir, Core::open(home).unwrap())
    }

    #[test]
    fn a_login_opens_one_session_bound_to_its_cookie_and_csrf() {
        let (_d, core) = core();
        let code = core.review().mint_review_code(&Operator::cli("ann")).unwrap();
        let login = core.review().review_login(&code).unwrap();
        assert_eq!(login.operator, Operator::review("ann"));
        assert!(core.review().review_login(&code).is_err(), "a code works once");
        let s = core
            .review()
            .review_session(&login.path, Some(&login.cookie))
            .unwrap();
        assert_eq!(s.operator.label(), "review:ann");
        core.review().check_csrf(&s, Some(&s.csrf)).unwrap();
        assert!(core.review().check_csrf(&s, None).is_err());
        assert!(core.review().check_csrf(&s, Some(&"0".repeat(64))).is_err());
        // Another session's token does not pass, nor its cookie on this path.
        let other = core
            .review()
            .review_login(&core.review().mint_review_code(&Operator::cli("ann")).unwrap())
            .unwrap();
        let o = core
            .review()
            .review_session(&other.path, Some(&other.cookie))
            .unwrap();
        assert!(core.review().check_csrf(&s, Some(&o.csrf)).is_err());
        assert!(
            core.review()
                .review_session(&login.path, Some(&other.cookie))
                .is_err()
        );
        assert!(core.review().review_session(&login.path, None).is_err());
        core.review().review_logout(&s).unwrap();
        assert!(
            core.review()
                .review_session(&login.path, Some(&login.cookie))
                .is_err()
        );
        assert!(
            core.review()
                .review_session(&other.path, Some(&other.cookie))
                .is_ok()
        );
        let events: Vec<String> = crate::audit_log::tail(&core.home.audit_path(), 10)
            .unwrap()
            .into_iter()
            .map(|r| r.event)
            .collect();
        assert_eq!(
            events,
            [
                "review.code",
                "review.login",
                "review.code",
                "review.login",
                "review.logout"
            ]
        );
    }

    #[test]
    fn a_late_code_opens_nothing() {
        let (_d, core) = core();
        let mut config = core.home.load_config().unwrap();
        config.review.login_code_ttl_seconds = 0;
        core.home.save_config(&config).unwrap();
        core.refresh();
        let code = core.review().mint_review_code(&Operator::cli("ann")).unwrap();
        assert!(matches!(
            core.review().review_login(&code),
            Err(GatewayError::Forbidden(_))
        ));
    }

    #[test]
    fn only_this_home_proves_it_is_the_server() {
        let (_d, mine) = core();
        let (_e, other) = core();
        let here: SocketAddr = "127.0.0.1:8765".parse().unwrap();
        let nonce = new_nonce().unwrap();
        let proof = mine.review().server_proof(&nonce, &here).unwrap();
        assert!(mine.review().is_server_proof(&nonce, &here, &proof));
        assert!(!other.review().is_server_proof(&nonce, &here, &proof));
        assert!(
            !mine
                .review()
                .is_server_proof(&new_nonce().unwrap(), &here, &proof)
        );
        assert!(!mine.review().is_server_proof(&nonce, &here, "not hex"));
        // The real server's answer, relayed by whatever listens elsewhere, proves nothing there.
        for elsewhere in ["127.0.0.1:8766", "[::1]:8765"] {
            assert!(
                !mine
                    .review()
                    .is_server_proof(&nonce, &elsewhere.parse().unwrap(), &proof)
            );
        }
        assert!(mine.review().server_proof("short", &here).is_err());
    }

    #[test]
    fn secrets_are_fixed_length_hex() {
        assert!(well_formed(&"a".repeat(64), 64));
        for bad in [
            "",
            "A".repeat(64).as_str(),
            "g".repeat(64).as_str(),
            "a".repeat(63).as_str(),
        ] {
            assert!(!well_formed(bad, 64), "{bad}");
        }
    }
}
