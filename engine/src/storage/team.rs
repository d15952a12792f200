//! The seam a team's shared state plugs into (docs/contract.md#team-mode): where a gateway in
//! team mode reads every request's credential, makes credential changes and appends its audit
//! records. The team's PostgreSQL implements it outside this crate; the engine keeps deciding.
//!
//! It must never hold a token's `jti` (a team credential's `jti` field is the SHA-256 of it, hex)
//! or answer a change it could not record with its audit record in the same commit.

use inbox::{Credential, CredentialId, NewCredential};
use policy::Tier;

use crate::error::GatewayError;

/// A team's shared state, as one gateway of it sees it. Every method reads or writes the team's
/// database now (no cache here): an unreachable database is `AUDIT_UNAVAILABLE`.
pub trait TeamState: Send + Sync {
    /// The team's id: the audience of every token of the team (known once the database answered).
    fn team_id(&self) -> Result<String, GatewayError>;
    /// This gateway's name in the team (records carry it).
    fn gateway(&self) -> &str;
    /// Moves in the commit of every credential change.
    fn credential_generation(&self) -> Result<i64, GatewayError>;
    /// The row for `id`; its `jti` is the SHA-256 (hex) of the token's.
    fn credential(&self, id: &str) -> Result<Option<Credential>, GatewayError>;
    /// Every credential (their `jti` fields empty).
    fn credentials(&self) -> Result<Vec<Credential>, GatewayError>;
    /// Stores `new` under `id` with its `credential.issue` record, in one commit.
    fn issue_credential(
        &self,
        actor: &audit::Actor,
        id: CredentialId,
        new: NewCredential,
    ) -> Result<Credential, GatewayError>;
    /// Revokes `id` (the first revocation time is kept), with its record.
    fn revoke_credential(&self, actor: &audit::Actor, id: &str, now: i64) -> Result<(), GatewayError>;
    /// Changes `id`'s tier, with its record.
    fn set_credential_tier(&self, actor: &audit::Actor, id: &str, tier: Tier) -> Result<(), GatewayError>;
    /// Appends one record to the team's chain; answers once it is committed.
    fn append_audit(&self, entry: audit::Entry) -> Result<audit::AuditRecord, GatewayError>;
    /// Notes that this gateway is alive (`team status` lists gateways seen in ten minutes).
    fn heartbeat(&self) -> Result<(), GatewayError>;
    /// The team's vaults, by id.
    fn vaults(&self) -> Result<Vec<crate::remote::TeamVault>, GatewayError>;
    /// Registers `vault` for every gateway, with its `vault.add` record, in one commit.
    fn add_vault(&self, actor: &audit::Actor, vault: &crate::remote::TeamVault) -> Result<(), GatewayError>;
    /// Forgets the vault `id` (its remote is not touched), with its `vault.remove` record.
    fn remove_vault(&self, actor: &audit::Actor, id: &str) -> Result<(), GatewayError>;
}

/// Whether `jti` (from a token whose signature verified) is the one whose SHA-256 a team row holds.
pub fn team_jti_matches(stored_sha256: &str, jti: &str) -> bool {
    use sha2::Digest;
    !stored_sha256.is_empty() && hex::encode(sha2::Sha256::digest(jti.as_bytes())) == stored_sha256
}
