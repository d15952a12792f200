//! What makes authenticating every request cheap without making it less fresh (docs/contract.md#paths).
//!
//! Two caches, each bounded:
//! - tokens whose signature, issuer and audience were verified, by their exact text (a token
//!   differing in one byte is verified anew), with their claims; expiry is judged per request.
//! - credential rows, valid only at the credentials' generation they were read at. The generation
//!   moves in the commit of every change to any credential (a trigger, whoever made it), and is
//!   read on every request, so a revocation or tier change by another process applies to the very
//!   next request, as a fresh row read would.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use inbox::Credential;

use crate::auth::{self, Claims};
use crate::error::GatewayError;
use crate::home::SecretKey;

/// Tokens and rows kept at most; past it the cache starts over (a flood of distinct valid
/// tokens costs verifications, never memory).
const MAX_ENTRIES: usize = 1024;

#[derive(Default)]
pub(crate) struct AuthCache {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    tokens: HashMap<String, Claims>,
    /// The generation `rows` were read at (`None`: nothing read yet).
    generation: Option<i64>,
    rows: HashMap<String, Credential>,
}

impl AuthCache {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Only caches: a panic half-way leaves nothing a later request could trust wrongly, as
        // every entry is checked again (generation, expiry) before use.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The token's claims: verified once per distinct token text, its `exp` judged at `now`.
    pub(crate) fn claims(
        &self,
        secret: &SecretKey,
        audience: &str,
        token: &str,
        now: i64,
    ) -> Result<Claims, GatewayError> {
        if let Some(c) = self.lock().tokens.get(token) {
            // As `auth::verify` judges it (no leeway).
            if c.exp.is_some_and(|exp| exp < now) {
                return Err(GatewayError::CredentialExpired);
            }
            return Ok(c.clone());
        }
        let claims = auth::verify(secret, audience, token)?;
        let mut g = self.lock();
        if g.tokens.len() >= MAX_ENTRIES {
            g.tokens.clear();
        }
        g.tokens.insert(token.to_owned(), claims.clone());
        Ok(claims)
    }

    /// The credential row for `id` as the table holds it now: from the cache when the generation
    /// has not moved since it was read, else read again.
    /// `generation` is the credentials' generation read for this request, before `read`.
    pub(crate) fn credential(
        &self,
        generation: i64,
        id: &str,
        read: impl FnOnce() -> Result<Option<Credential>, GatewayError>,
    ) -> Result<Option<Credential>, GatewayError> {
        {
            let g = self.lock();
            if g.generation == Some(generation)
                && let Some(c) = g.rows.get(id)
            {
                return Ok(Some(c.clone()));
            }
        }
        // Read after the generation: the row is at least as new as the generation it is kept at.
        let row = read()?;
        let mut g = self.lock();
        if g.generation.is_none_or(|seen| seen < generation) {
            g.rows.clear();
            g.generation = Some(generation);
        }
        if g.generation == Some(generation) {
            if g.rows.len() >= MAX_ENTRIES {
                g.rows.clear();
            }
            match &row {
                Some(c) => g.rows.insert(id.to_owned(), c.clone()),
                None => g.rows.remove(id),
            };
        }
        Ok(row)
    }
}
