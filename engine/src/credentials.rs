//! The credential service: authenticating every request fresh against the credential table,
//! auditing refusals (aggregated for unauthenticated floods) and the operator's issue, revoke
//! and tier changes, each committed only with its audit record.

use audit::{Durability, Entry, Outcome};
use inbox::{Credential, State};
use policy::Tier;

use crate::auth::{self, Token};
use crate::core::{Caller, Core, Operator, Transport, now_unix, outcome_for, recorded};
use crate::error::GatewayError;
use crate::home::Home;

/// Authentication and credential administration.
pub struct Credentials<'a> {
    pub(crate) core: &'a Core,
    /// Verified tokens and credential rows, checked against the generation on every request.
    pub(crate) auth_cache: &'a crate::authcache::AuthCache,
    /// Unauthenticated refusals, aggregated (docs/contract.md#the-audit-log).
    pub(crate) refusals: &'a crate::refusals::Refusals,
}

/// A credential's name (it reaches audit records, git authors and a reviewer's screen): 1 to
/// 128 bytes, not blank, no control characters.
pub fn check_credential_name(s: &str) -> Result<(), String> {
    if s.trim().is_empty() || s.len() > 128 {
        return Err("a name is 1 to 128 bytes, not blank".into());
    }
    if s.chars().any(char::is_control) {
        return Err("a name may not hold control characters".into());
    }
    Ok(())
}

/// Every credential of the home, for `token list` (no vault is opened).
pub fn list_credentials(home: &Home) -> Result<Vec<Credential>, GatewayError> {
    Ok(State::open(&home.state_path())?.list_credentials()?)
}

impl Credentials<'_> {
    /// Verifies the token and reads the credential fresh (its row, or the row kept from an
    /// earlier request while the credentials' generation has not moved): revocation, expiry and
    /// tier changes apply to the very next call. Refusals are audited (aggregated, docs/contract.md#the-audit-log); one whose record
    /// cannot be written answers `AUDIT_UNAVAILABLE`.
    pub fn authenticate(&self, token: &Token, transport: Transport) -> Result<Caller, GatewayError> {
        self.authenticate_from(token, transport, None)
    }

    /// [`Credentials::authenticate`] for a request from `remote` (the peer address, HTTP).
    pub fn authenticate_from(
        &self,
        token: &Token,
        transport: Transport,
        remote: Option<std::net::IpAddr>,
    ) -> Result<Caller, GatewayError> {
        let result = self.authenticate_inner(token, transport);
        if let Err(e) = &result {
            self.record_unauthenticated(transport, remote, e)?;
        }
        result
    }

    /// [`Credentials::authenticate`] when it needs no write: the token verified before, the row from the
    /// cache or one read, nothing to record. `None` when the answer is a refusal (its record must
    /// be written) or the credential's last use is due to be noted: then call
    /// [`Credentials::authenticate_from`], on a thread that may block. Cheap enough to run on an async
    /// worker: memory, and one read of the credentials' generation.
    pub fn authenticate_without_writing(&self, token: &Token, transport: Transport) -> Option<Caller> {
        // A changed `gateway.toml` is read on the blocking path: opening a vault it adds walks
        // the vault, which an async worker must never do.
        if self.core.config_changed() {
            return None;
        }
        // A team's row is read over the network: never on an async worker.
        if self.core.team().is_some() {
            return None;
        }
        match self.check_credential(token, transport) {
            Ok((caller, false)) => Some(caller),
            _ => None,
        }
    }

    fn authenticate_inner(&self, token: &Token, transport: Transport) -> Result<Caller, GatewayError> {
        // Every MCP request passes here (on a thread that may block) unless the fast path above
        // answered it: a changed `gateway.toml` is read before the request is answered.
        self.core.refresh();
        let (caller, touch) = self.check_credential(token, transport)?;
        // Last use to the minute (the Credentials page): the row was read anyway, so at most
        // one write a minute per credential, never one per request.
        if touch
            && let Err(e) = self
                .core
                .state
                .touch_credential(&caller.credential.id, now_unix())
        {
            tracing::warn!(error = %e, "noting a credential's last use failed");
        }
        Ok(caller)
    }

    /// The caller a token names, checked fresh, and whether its last use is due to be noted.
    fn check_credential(&self, token: &Token, transport: Transport) -> Result<(Caller, bool), GatewayError> {
        let now = now_unix();
        let claims =
            self.auth_cache
                .claims(&self.core.secret, &self.core.audience()?, token.expose(), now)?;
        // SECURITY(T-AUTH3): the row as the table holds it now (the generation is read on every
        // request; a cached row is used only while it has not moved).
        let credential = match self.core.team() {
            // SECURITY(T-TEAM4): the team's row, at the generation read for this request.
            Some(team) => self
                .auth_cache
                .credential(team.credential_generation()?, &claims.sub, || {
                    team.credential(&claims.sub)
                }),
            None => self
                .auth_cache
                .credential(self.core.state.credential_generation()?, &claims.sub, || {
                    Ok(self.core.state.credential(&claims.sub)?)
                }),
        }?
        .ok_or(GatewayError::Unauthorized("unknown credential"))?;
        // SECURITY(T-AUTH2): a token names one issuance; a re-issued or forged jti is refused.
        // SECURITY(T-TEAM3): a team row holds the jti's SHA-256, never the jti.
        let same_issuance = match self.core.team() {
            Some(_) => crate::storage::team::team_jti_matches(&credential.jti, &claims.jti),
            None => credential.jti == claims.jti,
        };
        if !same_issuance {
            return Err(GatewayError::Unauthorized("token superseded"));
        }
        if credential.is_revoked() {
            return Err(GatewayError::CredentialRevoked);
        }
        if credential.is_expired(now) {
            return Err(GatewayError::CredentialExpired);
        }
        // A team keeps no last use (a write per credential and minute on every gateway).
        let touch = self.core.team().is_none()
            && credential
                .last_used_at
                .is_none_or(|t| now.saturating_sub(t) >= 60);
        Ok((
            Caller {
                credential,
                transport,
            },
            touch,
        ))
    }

    /// Audits a refusal decided before a credential was known (a missing token, a bad Origin).
    /// `Err(AUDIT_UNAVAILABLE)` when its record had to be written and could not be: answer that.
    pub fn record_auth_refusal(&self, transport: Transport, e: &GatewayError) -> Result<(), GatewayError> {
        self.record_unauthenticated(transport, None, e)
    }

    /// SECURITY(T-AUDIT8): refusals of HTTP requests without a valid credential are aggregated: at
    /// most one record per window (`[limits] refusal_window_seconds`) per code, transport and
    /// remote, with a `count`, so a flood cannot fill the disk. The first of a window is written
    /// before the answer; the rest are counted and written when the window ends or at shutdown.
    pub fn record_unauthenticated(
        &self,
        transport: Transport,
        remote: Option<std::net::IpAddr>,
        e: &GatewayError,
    ) -> Result<(), GatewayError> {
        // A stdio server is the child of one local client and has no remote to flood it from:
        // each of its refusals is recorded on its own.
        if transport == Transport::Stdio {
            let entry = crate::refusals::refusal_entry(
                &crate::refusals::RefusalKey {
                    code: e.code().as_str().to_owned(),
                    transport: transport.as_str(),
                    remote: "local".to_owned(),
                },
                1,
            );
            return self.core.append_audit(entry, Durability::Sync).map(|_| ());
        }
        let key = crate::refusals::RefusalKey {
            code: e.code().as_str().to_owned(),
            transport: transport.as_str(),
            remote: remote.map_or_else(|| "local".to_owned(), |ip| ip.to_string()),
        };
        match self.refusals.note(key, crate::refusals::refusal_entry) {
            crate::refusals::Noted::Counted => Ok(()),
            crate::refusals::Noted::Write(entry) => {
                self.core.append_audit(*entry, Durability::Sync).map(|_| ())
            }
        }
    }

    /// Audits a refusal of an authenticated request decided outside a tool call (an HTTP
    /// session owned by another credential, a body over the limit). `Err(AUDIT_UNAVAILABLE)`
    /// when its record cannot be written: answer that instead.
    pub fn record_caller_refusal(&self, caller: &Caller, e: &GatewayError) -> Result<(), GatewayError> {
        let mut entry = Entry::new("http.refused", caller.actor(), outcome_for(e));
        entry.code = Some(e.code().as_str().to_owned());
        self.core.append_audit(entry, Durability::Sync).map(|_| ())
    }

    /// Writes every aggregated refusal still counted (a clean shutdown; also done on drop).
    pub fn flush_refusals(&self) {
        self.refusals.flush_all();
    }

    /// Issues a credential and its token; audited as a credential change by the CLI user. The
    /// row is committed only together with its durable audit line (docs/contract.md#the-audit-log).
    pub fn issue_credential(
        &self,
        operator: &Operator,
        name: &str,
        tier: Tier,
        vaults: Vec<String>,
        expires_in: Option<i64>,
        approve_in_client: bool,
    ) -> Result<(Credential, Token), GatewayError> {
        for v in &vaults {
            if !self.core.loaded().vaults.contains_key(v) {
                return Err(GatewayError::VaultNotFound(v.clone()));
            }
        }
        check_credential_name(name).map_err(|m| GatewayError::InvalidArgument(format!("name: {m}")))?;
        self.core.audit_preflight()?;
        let now = now_unix();
        let jti = uuid::Uuid::new_v4().simple().to_string();
        let expires_at = expires_in.map(|s| now + s);
        let new = inbox::NewCredential {
            name: name.to_owned(),
            tier,
            vaults,
            jti: jti.clone(),
            created_at: now,
            expires_at,
            approve_in_client,
        };
        if let Some(team) = self.core.team() {
            // Signed first: a signing failure leaves no row; a refused row leaves a token
            // nothing authenticates.
            let id = inbox::CredentialId::generate();
            let token = auth::issue(
                &self.core.secret,
                &auth::Claims {
                    iss: auth::ISSUER.into(),
                    aud: self.core.audience()?,
                    sub: id.as_str().to_owned(),
                    jti,
                    iat: now,
                    exp: expires_at,
                },
            )?;
            let cred = team.issue_credential(&operator.audit_actor(), id, new)?;
            return Ok((cred, token));
        }
        // The token is signed before the row commits, so a signing failure leaves no row.
        let mut token = None;
        let cred = self
            .core
            .state
            .create_credential_recorded(new, |cred| {
                token = Some(auth::issue(
                    &self.core.secret,
                    &auth::Claims {
                        iss: auth::ISSUER.into(),
                        aud: self.core.audience()?,
                        sub: cred.id.as_str().to_owned(),
                        jti: jti.clone(),
                        iat: now,
                        exp: expires_at,
                    },
                )?);
                self.audit_admin(operator, "credential.issue", cred, Some(tier))
            })
            .map_err(recorded)?;
        let token = token.ok_or_else(|| GatewayError::Internal("token not issued".into()))?;
        Ok((cred, token))
    }

    pub fn revoke_credential(
        &self,
        operator: &Operator,
        id_or_name: &str,
    ) -> Result<Credential, GatewayError> {
        let cred = self.find_credential(id_or_name)?;
        if let Some(team) = self.core.team() {
            team.revoke_credential(&operator.audit_actor(), cred.id.as_str(), now_unix())?;
            return self.find_credential(cred.id.as_str());
        }
        self.core.audit_preflight()?;
        self.core
            .state
            .revoke_credential_recorded(&cred.id, now_unix(), || {
                self.audit_admin(operator, "credential.revoke", &cred, None)
            })
            .map_err(recorded)?;
        Ok(self.core.state.find_credential(cred.id.as_str())?)
    }

    pub fn set_credential_tier(
        &self,
        operator: &Operator,
        id_or_name: &str,
        tier: Tier,
    ) -> Result<Credential, GatewayError> {
        let cred = self.find_credential(id_or_name)?;
        if let Some(team) = self.core.team() {
            team.set_credential_tier(&operator.audit_actor(), cred.id.as_str(), tier)?;
            return self.find_credential(cred.id.as_str());
        }
        self.core.audit_preflight()?;
        self.core
            .state
            .set_credential_tier_recorded(&cred.id, tier, || {
                self.audit_admin(operator, "credential.set_tier", &cred, Some(tier))
            })
            .map_err(recorded)?;
        Ok(self.core.state.find_credential(cred.id.as_str())?)
    }

    /// Every credential, read fresh (the Credentials page).
    pub fn all(&self) -> Result<Vec<Credential>, GatewayError> {
        match self.core.team() {
            Some(team) => team.credentials(),
            None => Ok(self.core.state.list_credentials()?),
        }
    }

    /// The credential with this id as its table holds it now (the team's, in team mode).
    pub fn by_id(&self, id: &str) -> Result<Option<Credential>, GatewayError> {
        match self.core.team() {
            Some(team) => team.credential(id),
            None => Ok(self.core.state.credential(id)?),
        }
    }

    /// A credential by id or name (an id first, as the local store looks it up).
    pub fn find_credential(&self, id_or_name: &str) -> Result<Credential, GatewayError> {
        let Some(team) = self.core.team() else {
            return Ok(self.core.state.find_credential(id_or_name)?);
        };
        let all = team.credentials()?;
        all.iter()
            .find(|c| c.id.as_str() == id_or_name)
            .or_else(|| all.iter().find(|c| c.name == id_or_name))
            .cloned()
            .ok_or_else(|| inbox::StateError::CredentialNotFound(id_or_name.to_owned()).into())
    }

    /// The durable record of a credential change, written inside the change's transaction.
    pub(crate) fn audit_admin(
        &self,
        operator: &Operator,
        event: &str,
        cred: &Credential,
        tier: Option<Tier>,
    ) -> Result<inbox::AuditHead, GatewayError> {
        let args = serde_json::json!({
            "credentialId": cred.id.as_str(),
            "name": cred.name,
            "tier": tier.map(|t| t.as_str()),
            "approveInClient": cred.approve_in_client,
        });
        let mut entry = Entry::new(event, operator.audit_actor(), Outcome::Ok);
        entry.target = Some(cred.id.as_str().to_owned());
        entry.args_hash = Some(audit::args_hash(&args));
        self.core.append_audit_record(entry, Durability::Sync)
    }
}
