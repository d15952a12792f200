//! The team's credentials (docs/contract.md#team-mode): one table every gateway reads on every
//! request, so a revocation or a tier change committed on one gateway holds for the next request
//! on all of them. A change commits its row, the credentials' generation and its audit record in
//! one transaction and announces the credential on the channel [`CREDENTIALS_CHANNEL`] (delivered
//! at commit), so open streams can close at once. The database holds the SHA-256 of each token's
//! `jti`, never the `jti`: the team secret alone cannot revive or impersonate a credential.

use engine::Tier;
use engine::error::GatewayError;
use inbox::{Credential, CredentialId, NewCredential};
use sha2::Digest;
use time::OffsetDateTime;

use crate::chain::seal_in;
use crate::{PgState, db, within};

/// Where credential changes are announced (LISTEN); the payload is the credential's id.
pub const CREDENTIALS_CHANNEL: &str = "vaultgate_credentials";

/// A team credential as a request reads it: the row, and the hash its token's `jti` must match.
#[derive(Debug, Clone)]
pub struct TeamCredential {
    /// Its `jti` field is empty: the database does not hold it.
    pub credential: Credential,
    jti_sha256: String,
}

impl TeamCredential {
    /// The row as the engine checks it: its `jti` field the SHA-256 (hex) the token's must hash to.
    pub fn with_hashed_jti(self) -> Credential {
        Credential {
            jti: self.jti_sha256,
            ..self.credential
        }
    }

    /// Whether `jti` (from a token whose signature verified) is this credential's.
    pub fn jti_matches(&self, jti: &str) -> bool {
        // As the local check: the token's signature verified before, so nothing is guessed here.
        hex::encode(sha2::Sha256::digest(jti.as_bytes())) == self.jti_sha256
    }
}

const COLUMNS: &str =
    "id, name, tier, vaults, jti_sha256, created_at, expires_at, revoked_at, approve_in_client";

fn from_row(r: &tokio_postgres::Row) -> Result<TeamCredential, GatewayError> {
    let tier: String = r.get(2);
    let vaults: serde_json::Value = r.get(3);
    let scope: Option<Vec<String>> = serde_json::from_value(vaults)
        .ok()
        .filter(|v: &Vec<String>| v.iter().all(|s| !s.is_empty()));
    Ok(TeamCredential {
        credential: Credential {
            id: CredentialId(r.get(0)),
            name: r.get(1),
            tier: tier.parse().map_err(|_| {
                GatewayError::Internal(format!("a team credential has the unknown tier {tier}"))
            })?,
            // SECURITY(T-AUTH6): a damaged scope narrows to nothing.
            scope_unreadable: scope.is_none(),
            vaults: scope.unwrap_or_default(),
            jti: String::new(),
            created_at: r.get(5),
            expires_at: r.get(6),
            revoked_at: r.get(7),
            last_used_at: None,
            approve_in_client: r.get(8),
        },
        jti_sha256: r.get(4),
    })
}

/// A credential change: what its audit record says.
fn change_entry(event: &str, actor: &audit::Actor, id: &str, args: serde_json::Value) -> audit::Entry {
    let mut e = audit::Entry::new(event, actor.clone(), audit::Outcome::Ok);
    e.target = Some(id.to_owned());
    e.args_hash = Some(audit::args_hash(&args));
    e
}

impl PgState {
    /// `token issue` on a team: the row (with the SHA-256 of `new.jti`), the generation and the
    /// `credential.issue` record of `gateway`, in one transaction.
    pub fn issue_credential(
        &self,
        gateway: &str,
        actor: &audit::Actor,
        new: NewCredential,
    ) -> Result<Credential, GatewayError> {
        self.issue_credential_as(gateway, actor, CredentialId::generate(), new)
    }

    /// As [`PgState::issue_credential`], under `id` (the token was signed for it already).
    pub fn issue_credential_as(
        &self,
        gateway: &str,
        actor: &audit::Actor,
        id: CredentialId,
        new: NewCredential,
    ) -> Result<Credential, GatewayError> {
        let vaults = serde_json::to_value(&new.vaults).map_err(|e| GatewayError::Internal(e.to_string()))?;
        // SECURITY(T-TEAM3): only the hash of the jti is stored.
        let jti_sha256 = hex::encode(sha2::Sha256::digest(new.jti.as_bytes()));
        let entry = change_entry(
            "credential.issue",
            actor,
            id.as_str(),
            serde_json::json!({"name": new.name, "tier": new.tier.as_str(), "vaults": new.vaults}),
        );
        let mut client = self.client()?;
        within(&self.stale, async {
            let tx = client.transaction().await.map_err(db)?;
            let inserted = tx
                .execute(
                    &format!("INSERT INTO vaultgate.credentials ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, $8)"),
                    &[
                        &id.as_str(),
                        &new.name,
                        &new.tier.as_str(),
                        &vaults,
                        &jti_sha256,
                        &new.created_at,
                        &new.expires_at,
                        &new.approve_in_client,
                    ],
                )
                .await;
            match inserted {
                Ok(_) => {}
                Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) => {
                    return Err(inbox::StateError::DuplicateName(new.name.clone()).into());
                }
                Err(e) => return Err(db(e)),
            }
            changed(&tx, id.as_str()).await?;
            seal_in(&tx, gateway, vec![entry], OffsetDateTime::now_utc()).await?;
            tx.commit().await.map_err(db)
        })??;
        // The database does not hold the jti: neither does what it answers.
        let mut stored = new.stored(id);
        stored.jti.clear();
        Ok(stored)
    }

    /// The row for `id`, read fresh: what every request checks its token against.
    pub fn credential(&self, id: &str) -> Result<Option<TeamCredential>, GatewayError> {
        let client = self.client()?;
        let row = within(
            &self.stale,
            client.query_typed_opt(
                &format!("SELECT {COLUMNS} FROM vaultgate.credentials WHERE id = $1"),
                &[(&id, tokio_postgres::types::Type::TEXT)],
            ),
        )?
        .map_err(db)?;
        row.as_ref().map(from_row).transpose()
    }

    /// Every credential, oldest first (`token list`; their `jti` fields empty).
    pub fn list_credentials(&self) -> Result<Vec<Credential>, GatewayError> {
        let client = self.client()?;
        let rows = within(
            &self.stale,
            client.query(
                &format!("SELECT {COLUMNS} FROM vaultgate.credentials ORDER BY created_at, id"),
                &[],
            ),
        )?
        .map_err(db)?;
        rows.iter()
            .map(|r| {
                from_row(r).map(|t| Credential {
                    jti: String::new(),
                    ..t.credential
                })
            })
            .collect()
    }

    /// The credentials' generation: it moves in the transaction of every change, so a cache of
    /// rows read at an unchanged generation is still what the table holds.
    pub fn credential_generation(&self) -> Result<i64, GatewayError> {
        self.credential_generation_and_key().map(|(n, _)| n)
    }

    /// The credentials' generation and the team secret's key check, read together.
    pub(crate) fn credential_generation_and_key(&self) -> Result<(i64, Option<String>), GatewayError> {
        let client = self.client()?;
        within(&self.stale, async {
            // Prepared once per connection: one round trip on every request, nothing to plan.
            let read = client
                .prepare_cached(
                    "SELECT g.n, t.key_check FROM vaultgate.credential_generation g
                     LEFT JOIN vaultgate.team t ON t.one WHERE g.one",
                )
                .await?;
            client.query_one(&read, &[]).await
        })?
        .map(|r| (r.get(0), r.get(1)))
        .map_err(db)
    }

    /// `token revoke` on a team (the first revocation time is kept), with its record.
    pub fn revoke_credential(
        &self,
        gateway: &str,
        actor: &audit::Actor,
        id: &str,
        now: i64,
    ) -> Result<(), GatewayError> {
        self.change(
            gateway,
            "UPDATE vaultgate.credentials SET revoked_at = COALESCE(revoked_at, $2::bigint) WHERE id = $1",
            &now,
            change_entry("credential.revoke", actor, id, serde_json::json!({"id": id})),
            id,
        )
    }

    /// A tunnel credential set aside (`tunnel setup` again): revoked and renamed
    /// `<name>-<last 12 of its id>`, so its name is free, with its `credential.revoke` record.
    pub fn retire_credential(
        &self,
        gateway: &str,
        actor: &audit::Actor,
        id: &str,
        now: i64,
    ) -> Result<(), GatewayError> {
        self.change(
            gateway,
            "UPDATE vaultgate.credentials SET revoked_at = COALESCE(revoked_at, $2::bigint),
             name = name || '-' || right(id, 12) WHERE id = $1",
            &now,
            change_entry("credential.revoke", actor, id, serde_json::json!({"id": id})),
            id,
        )
    }

    /// `token set-tier` on a team, with its record.
    pub fn set_credential_tier(
        &self,
        gateway: &str,
        actor: &audit::Actor,
        id: &str,
        tier: Tier,
    ) -> Result<(), GatewayError> {
        self.change(
            gateway,
            "UPDATE vaultgate.credentials SET tier = $2::text WHERE id = $1",
            &tier.as_str(),
            change_entry(
                "credential.set_tier",
                actor,
                id,
                serde_json::json!({"id": id, "tier": tier.as_str()}),
            ),
            id,
        )
    }

    /// One credential's change: `update` (`$1` the id, `$2` the value), the generation, the
    /// record, the announcement; nothing of it when no row has the id.
    fn change(
        &self,
        gateway: &str,
        update: &str,
        value: &(dyn tokio_postgres::types::ToSql + Sync),
        entry: audit::Entry,
        id: &str,
    ) -> Result<(), GatewayError> {
        let mut client = self.client()?;
        within(&self.stale, async {
            let tx = client.transaction().await.map_err(db)?;
            let rows = tx.execute(update, &[&id, value]).await.map_err(db)?;
            if rows == 0 {
                // Dropped: rolled back, nothing written.
                return Err(inbox::StateError::CredentialNotFound(id.to_owned()).into());
            }
            // SECURITY(T-TEAM4): the row, the generation and the record commit together.
            changed(&tx, id).await?;
            // The chain's head last: its lock is held only to the commit.
            seal_in(&tx, gateway, vec![entry], OffsetDateTime::now_utc()).await?;
            tx.commit().await.map_err(db)
        })?
    }
}

/// Moves the generation and announces `id`, inside the change's transaction (NOTIFY is
/// delivered at commit, and not at all on a rollback).
async fn changed(tx: &tokio_postgres::Transaction<'_>, id: &str) -> Result<(), GatewayError> {
    tx.execute(
        "UPDATE vaultgate.credential_generation SET n = n + 1 WHERE one",
        &[],
    )
    .await
    .map_err(db)?;
    tx.execute("SELECT pg_notify($1, $2)", &[&CREDENTIALS_CHANNEL, &id])
        .await
        .map_err(db)?;
    Ok(())
}

/// Moves a home's `credentials` into the team inside `tx` (`team init --import`): same ids and
/// rows, the SHA-256 of each `jti` (SECURITY(T-TEAM3)), and one move of the generation.
pub(crate) async fn import(
    tx: &tokio_postgres::Transaction<'_>,
    credentials: &[Credential],
) -> Result<(), GatewayError> {
    for c in credentials {
        let vaults = serde_json::to_value(&c.vaults).map_err(|e| GatewayError::Internal(e.to_string()))?;
        let jti_sha256 = hex::encode(sha2::Sha256::digest(c.jti.as_bytes()));
        tx.execute(
            &format!(
                "INSERT INTO vaultgate.credentials ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
            ),
            &[
                &c.id.as_str(),
                &c.name,
                &c.tier.as_str(),
                &vaults,
                &jti_sha256,
                &c.created_at,
                &c.expires_at,
                &c.revoked_at,
                &c.approve_in_client,
            ],
        )
        .await
        .map_err(db)?;
    }
    tx.execute(
        "UPDATE vaultgate.credential_generation SET n = n + 1 WHERE one",
        &[],
    )
    .await
    .map_err(db)?;
    Ok(())
}
