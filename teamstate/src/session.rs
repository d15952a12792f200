//! One gateway's seat in its team: the engine's [`TeamState`] over the team's database, with the
//! gateway's own [`ChainWriter`] (docs/contract.md#team-mode). Opened once per process.

use std::sync::Arc;

use engine::Tier;
use engine::error::GatewayError;
use engine::storage::TeamState;
use inbox::{Credential, CredentialId, NewCredential};

use crate::{ChainWriter, PgState};

/// A gateway of a team, as the engine uses it.
pub struct TeamSession {
    store: Arc<PgState>,
    writer: ChainWriter,
    team_id: String,
    gateway: String,
}

impl TeamSession {
    /// Connects as `gateway` to the team in `url`. Refused when the database holds no team, or
    /// no gateway of that name (the home was not set up with `team init` or `team join` there).
    pub fn open(url: &str, gateway: &str) -> Result<TeamSession, GatewayError> {
        let store = Arc::new(PgState::connect(url)?);
        let status = store.team_status()?.ok_or_else(|| {
            GatewayError::Config(
                "the team database holds no team: run `vaultgate team init` or `team join` again".into(),
            )
        })?;
        if !store.gateway_known(gateway)? {
            return Err(GatewayError::Config(format!(
                "the team has no gateway named '{gateway}': it was removed, or this home joined \
                 another database; ask an admin"
            )));
        }
        store.gateway_seen(gateway, env!("CARGO_PKG_VERSION"))?;
        let writer = ChainWriter::start(store.clone(), gateway)?;
        Ok(TeamSession {
            store,
            writer,
            team_id: status.team_id,
            gateway: gateway.to_owned(),
        })
    }

    /// The store underneath (status, exports, grants).
    pub fn store(&self) -> &PgState {
        &self.store
    }
}

impl TeamState for TeamSession {
    fn team_id(&self) -> &str {
        &self.team_id
    }

    fn gateway(&self) -> &str {
        &self.gateway
    }

    fn credential_generation(&self) -> Result<i64, GatewayError> {
        self.store.credential_generation()
    }

    fn credential(&self, id: &str) -> Result<Option<Credential>, GatewayError> {
        Ok(self.store.credential(id)?.map(|t| t.with_hashed_jti()))
    }

    fn credentials(&self) -> Result<Vec<Credential>, GatewayError> {
        self.store.list_credentials()
    }

    fn issue_credential(
        &self,
        actor: &audit::Actor,
        id: CredentialId,
        new: NewCredential,
    ) -> Result<Credential, GatewayError> {
        self.store.issue_credential_as(&self.gateway, actor, id, new)
    }

    fn revoke_credential(&self, actor: &audit::Actor, id: &str, now: i64) -> Result<(), GatewayError> {
        self.store.revoke_credential(&self.gateway, actor, id, now)
    }

    fn set_credential_tier(&self, actor: &audit::Actor, id: &str, tier: Tier) -> Result<(), GatewayError> {
        self.store.set_credential_tier(&self.gateway, actor, id, tier)
    }

    fn append_audit(&self, entry: audit::Entry) -> Result<audit::AuditRecord, GatewayError> {
        self.writer.append(entry)
    }

    fn vaults(&self) -> Result<Vec<engine::remote::TeamVault>, GatewayError> {
        self.store.team_vaults()
    }

    fn add_vault(&self, actor: &audit::Actor, vault: &engine::remote::TeamVault) -> Result<(), GatewayError> {
        self.store.add_team_vault(&self.gateway, actor, vault)
    }

    fn remove_vault(&self, actor: &audit::Actor, id: &str) -> Result<(), GatewayError> {
        self.store.remove_team_vault(&self.gateway, actor, id)
    }
}
