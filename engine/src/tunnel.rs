//! The ChatGPT tunnel's credential (docs/contract.md#the-chatgpt-tunnel): one dedicated credential per home, rotated by
//! `vaultgate tunnel setup`, whose bearer token the supervising edge hands to `tunnel-client`
//! through the child's environment. The engine knows nothing of the process itself.

use audit::{Durability, Entry, Outcome};

use crate::auth::{self, Claims, Token};
use crate::core::{Operator, now_unix, recorded};
use crate::error::GatewayError;
use crate::vaults::Settings;
use inbox::Credential;
use policy::Tier;

/// The name of the tunnel's credential; `token list` shows it like any other.
pub const TUNNEL_CREDENTIAL: &str = "chatgpt-tunnel";

/// What ChatGPT's credential may do (docs/contract.md#the-chatgpt-tunnel).
#[derive(Debug, Clone)]
pub struct TunnelGrant {
    pub tier: Tier,
    /// Empty: every vault.
    pub vaults: Vec<String>,
    /// The person may approve on ChatGPT's approval card (docs/contract.md#the-review-page-and-in-client-approval).
    pub approve_in_client: bool,
}

impl Settings<'_> {
    /// Issues the tunnel's credential. An earlier one is revoked and renamed
    /// (`chatgpt-tunnel-<id>`), so its token stops working at once and the name moves on.
    pub fn rotate_tunnel_credential(
        &self,
        operator: &Operator,
        grant: TunnelGrant,
    ) -> Result<Credential, GatewayError> {
        if let Some(team) = self.core.team() {
            return self.rotate_team_tunnel_credential(team, operator, grant);
        }
        if let Ok(old) = self.core.state.find_credential(TUNNEL_CREDENTIAL)
            && old.name == TUNNEL_CREDENTIAL
        {
            self.core.audit_preflight()?;
            let suffix: String = old
                .id
                .as_str()
                .chars()
                .rev()
                .take(12)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            let retired = format!("{TUNNEL_CREDENTIAL}-{suffix}");
            self.core
                .state
                .retire_credential_recorded(&old.id, now_unix(), &retired, || {
                    self.core
                        .credentials()
                        .audit_admin(operator, "credential.revoke", &old, None)
                })
                .map_err(recorded)?;
        }
        let (cred, _) = self.core.credentials().issue_credential(
            operator,
            TUNNEL_CREDENTIAL,
            grant.tier,
            grant.vaults,
            None,
            grant.approve_in_client,
        )?;
        Ok(cred)
    }

    /// A bearer token of the live tunnel credential, for the child's environment only. It names
    /// the credential's issuance (`jti`), so revoking or rotating the credential refuses it.
    pub fn tunnel_token(&self) -> Result<Token, GatewayError> {
        if let Some(team) = self.core.team() {
            return self.team_tunnel_token(team);
        }
        let cred =
            self.core.state.find_credential(TUNNEL_CREDENTIAL).map_err(|_| {
                GatewayError::Config("no tunnel credential: run `vaultgate tunnel setup`".into())
            })?;
        let now = now_unix();
        if cred.name != TUNNEL_CREDENTIAL || cred.is_revoked() || cred.is_expired(now) {
            return Err(GatewayError::Config(
                "the tunnel credential is revoked or expired: run `vaultgate tunnel setup` again".into(),
            ));
        }
        auth::issue(
            self.core.secret(),
            &Claims {
                iss: auth::ISSUER.into(),
                aud: self.core.config().gateway_id.clone(),
                sub: cred.id.as_str().to_owned(),
                jti: cred.jti.clone(),
                iat: now,
                exp: cred.expires_at,
            },
        )
    }

    /// A team gateway's tunnel credential, `chatgpt-tunnel@<gateway>` (docs/contract.md#team-mode):
    /// issued in the team's database (an earlier one retired: revoked and renamed), its token
    /// kept in the home (the database keeps only the jti's hash, so the token could not be made
    /// again from it).
    fn rotate_team_tunnel_credential(
        &self,
        team: &dyn crate::storage::TeamState,
        operator: &Operator,
        grant: TunnelGrant,
    ) -> Result<Credential, GatewayError> {
        let name = team_tunnel_name(team);
        if let Ok(old) = self.core.credentials().find_credential(&name)
            && old.name == name
        {
            team.retire_credential(&operator.audit_actor(), old.id.as_str(), now_unix())?;
        }
        let (cred, token) = self.core.credentials().issue_credential(
            operator,
            &name,
            grant.tier,
            grant.vaults,
            None,
            grant.approve_in_client,
        )?;
        let home = &self.core.home;
        home.replace_private(&home.tunnel_token_path(), token.expose().as_bytes())?;
        Ok(cred)
    }

    /// The token kept by the last `tunnel setup` of this team gateway, while its credential is
    /// live in the team's database.
    fn team_tunnel_token(&self, team: &dyn crate::storage::TeamState) -> Result<Token, GatewayError> {
        let name = team_tunnel_name(team);
        let missing = || GatewayError::Config("no tunnel credential: run `vaultgate tunnel setup`".into());
        let cred = self
            .core
            .credentials()
            .find_credential(&name)
            .map_err(|_| missing())?;
        if cred.name != name || cred.is_revoked() || cred.is_expired(now_unix()) {
            return Err(GatewayError::Config(
                "the tunnel credential is revoked or expired: run `vaultgate tunnel setup` again".into(),
            ));
        }
        // Bounded: a token is a few hundred bytes.
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut std::io::Read::take(
                std::fs::File::open(self.core.home.tunnel_token_path()).map_err(|_| missing())?,
                16 * 1024,
            ),
            &mut text,
        )?;
        Ok(Token::new(text.trim().to_owned()))
    }

    /// Records an operator's action that changes no engine state (starting or stopping the
    /// tunnel): `event` with `target`, ok or failed with `code`.
    pub fn record_operator_action(
        &self,
        operator: &Operator,
        event: &str,
        target: &str,
        failed: Option<&GatewayError>,
    ) -> Result<(), GatewayError> {
        let outcome = if failed.is_some() {
            Outcome::Error
        } else {
            Outcome::Ok
        };
        let mut entry = Entry::new(event, operator.audit_actor(), outcome);
        entry.target = Some(target.to_owned());
        entry.code = failed.map(|e| e.code().as_str().to_owned());
        self.core.append_audit(entry, Durability::Sync).map(|_| ())
    }
}

/// The name of a team gateway's tunnel credential.
fn team_tunnel_name(team: &dyn crate::storage::TeamState) -> String {
    format!("{TUNNEL_CREDENTIAL}@{}", team.gateway())
}
