//! The team's vaults (docs/contract.md#team-mode): one row each, written by admins only (a
//! reviewer's role has no write on the table: T-TEAM1), with its record in the same commit and an
//! announcement on [`VAULTS_CHANNEL`], so every gateway clones or forgets it at once.

use engine::error::GatewayError;
use engine::remote::TeamVault;
use time::OffsetDateTime;

use crate::chain::seal_in;
use crate::{PgState, db, within};

/// Where vault registrations are announced (LISTEN); the payload is the vault's id.
pub const VAULTS_CHANNEL: &str = "vaultgate_vaults";

fn list(v: &[String]) -> Result<serde_json::Value, GatewayError> {
    serde_json::to_value(v).map_err(|e| GatewayError::Internal(e.to_string()))
}

fn strings(v: serde_json::Value) -> Vec<String> {
    serde_json::from_value(v).unwrap_or_default()
}

impl PgState {
    /// Every team vault, by id.
    pub fn team_vaults(&self) -> Result<Vec<TeamVault>, GatewayError> {
        let client = self.client()?;
        let rows = within(
            &self.stale,
            client.query(
                "SELECT id, name, remote, branch, notes, standards FROM vaultgate.vaults ORDER BY id",
                &[],
            ),
        )?
        .map_err(db)?;
        Ok(rows
            .iter()
            .map(|r| TeamVault {
                id: r.get(0),
                name: r.get(1),
                remote: r.get(2),
                branch: r.get(3),
                notes: strings(r.get(4)),
                standards: strings(r.get(5)),
            })
            .collect())
    }

    /// Registers `vault` as `gateway` did, with its `vault.add` record (refused when the id is
    /// taken).
    pub fn add_team_vault(
        &self,
        gateway: &str,
        actor: &audit::Actor,
        vault: &TeamVault,
    ) -> Result<(), GatewayError> {
        let (notes, standards) = (list(&vault.notes)?, list(&vault.standards)?);
        let mut entry = audit::Entry::new("vault.add", actor.clone(), audit::Outcome::Ok);
        entry.vault = Some(vault.id.clone());
        entry.args_hash = Some(audit::args_hash(&serde_json::json!({
            "vault": vault.id, "name": vault.name, "remote": vault.remote, "branch": vault.branch,
        })));
        let mut client = self.client()?;
        within(&self.stale, async {
            let tx = client.transaction().await.map_err(db)?;
            let added = tx
                .execute(
                    "INSERT INTO vaultgate.vaults (id, name, remote, branch, notes, standards)
                     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
                    &[
                        &vault.id,
                        &vault.name,
                        &vault.remote,
                        &vault.branch,
                        &notes,
                        &standards,
                    ],
                )
                .await
                .map_err(db)?;
            if added == 0 {
                return Err(GatewayError::InvalidArgument(format!(
                    "the team has a vault with id '{}' already; pass another --id",
                    vault.id
                )));
            }
            announced(&tx, &vault.id).await?;
            seal_in(&tx, gateway, vec![entry], OffsetDateTime::now_utc()).await?;
            tx.commit().await.map_err(db)
        })?
    }

    /// Forgets the vault `id`, with its `vault.remove` record.
    pub fn remove_team_vault(
        &self,
        gateway: &str,
        actor: &audit::Actor,
        id: &str,
    ) -> Result<(), GatewayError> {
        let mut entry = audit::Entry::new("vault.remove", actor.clone(), audit::Outcome::Ok);
        entry.vault = Some(id.to_owned());
        let mut client = self.client()?;
        within(&self.stale, async {
            let tx = client.transaction().await.map_err(db)?;
            let removed = tx
                .execute("DELETE FROM vaultgate.vaults WHERE id = $1", &[&id])
                .await
                .map_err(db)?;
            if removed == 0 {
                return Err(GatewayError::VaultNotFound(id.to_owned()));
            }
            announced(&tx, id).await?;
            seal_in(&tx, gateway, vec![entry], OffsetDateTime::now_utc()).await?;
            tx.commit().await.map_err(db)
        })?
    }
}

impl PgState {
    /// The team's settings, by key.
    pub fn team_settings(&self) -> Result<Vec<(String, serde_json::Value)>, GatewayError> {
        let client = self.client()?;
        let rows = within(
            &self.stale,
            client.query("SELECT key, value FROM vaultgate.settings ORDER BY key", &[]),
        )?
        .map_err(db)?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Sets (`None`: removes) the team setting `key` as `gateway` did, with its `team.set` record,
    /// announced like a vault change so every gateway reads it again. Admins only (T-TEAM1).
    pub fn set_team_setting(
        &self,
        gateway: &str,
        actor: &audit::Actor,
        key: &str,
        value: Option<&serde_json::Value>,
    ) -> Result<(), GatewayError> {
        let mut entry = audit::Entry::new("team.set", actor.clone(), audit::Outcome::Ok);
        entry.target = Some(key.to_owned());
        entry.args_hash = Some(audit::args_hash(&serde_json::json!({"key": key, "value": value})));
        let mut client = self.client()?;
        within(&self.stale, async {
            let tx = client.transaction().await.map_err(db)?;
            match value {
                Some(v) => {
                    tx.execute(
                        "INSERT INTO vaultgate.settings (key, value) VALUES ($1, $2)
                         ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                        &[&key, v],
                    )
                    .await
                }
                None => {
                    tx.execute("DELETE FROM vaultgate.settings WHERE key = $1", &[&key])
                        .await
                }
            }
            .map_err(db)?;
            announced(&tx, "").await?;
            seal_in(&tx, gateway, vec![entry], OffsetDateTime::now_utc()).await?;
            tx.commit().await.map_err(db)
        })?
    }
}

impl PgState {
    /// `vault`'s registered head and, when its history was found rewritten, the head seen then.
    pub fn vault_head(&self, vault: &str) -> Result<(Option<String>, Option<String>), GatewayError> {
        let client = self.client()?;
        let row = within(
            &self.stale,
            client.query_opt(
                "SELECT head, rewritten FROM vaultgate.vault_heads WHERE vault = $1",
                &[&vault],
            ),
        )?
        .map_err(db)?;
        Ok(row.map_or((None, None), |r| (r.get(0), r.get(1))))
    }

    /// Registers `head` as `vault`'s if its registered head is still `expected` (`None`:
    /// whatever it is); never while its history is marked rewritten.
    pub fn register_head(&self, vault: &str, expected: Option<&str>, head: &str) -> Result<(), GatewayError> {
        let client = self.client()?;
        within(
            &self.stale,
            client.execute(
                "INSERT INTO vaultgate.vault_heads (vault, head) VALUES ($1, $2)
                 ON CONFLICT (vault) DO UPDATE SET head = EXCLUDED.head, at = now()
                 WHERE vault_heads.rewritten IS NULL AND vault_heads.head IS DISTINCT FROM EXCLUDED.head
                   AND ($3::text IS NULL OR vault_heads.head = $3)",
                &[&vault, &head, &expected],
            ),
        )?
        .map_err(db)
        .map(drop)
    }

    /// Marks `vault`'s history rewritten (its branch at `seen`), with `entry`, the first time
    /// only: true when this call marked it.
    pub fn mark_rewritten(
        &self,
        gateway: &str,
        vault: &str,
        registered: Option<&str>,
        seen: &str,
        entry: audit::Entry,
    ) -> Result<bool, GatewayError> {
        let mut client = self.client()?;
        within(&self.stale, async {
            let tx = client.transaction().await.map_err(db)?;
            let marked = tx
                .execute(
                    "INSERT INTO vaultgate.vault_heads (vault, rewritten) VALUES ($1, $2)
                     ON CONFLICT (vault) DO UPDATE SET rewritten = EXCLUDED.rewritten, at = now()
                     WHERE vault_heads.rewritten IS NULL AND vault_heads.head IS NOT DISTINCT FROM $3",
                    &[&vault, &seen, &registered],
                )
                .await
                .map_err(db)?;
            if marked == 0 {
                return Ok(false);
            }
            seal_in(&tx, gateway, vec![entry], OffsetDateTime::now_utc()).await?;
            tx.commit().await.map_err(db)?;
            Ok(true)
        })?
    }

    /// `vault resync`: `head` is `vault`'s registered head again and its history is no longer
    /// marked rewritten, with `entry`, announced so every gateway clones again.
    pub fn resync_vault(
        &self,
        gateway: &str,
        vault: &str,
        head: &str,
        entry: audit::Entry,
    ) -> Result<(), GatewayError> {
        let mut client = self.client()?;
        within(&self.stale, async {
            let tx = client.transaction().await.map_err(db)?;
            tx.execute(
                "INSERT INTO vaultgate.vault_heads (vault, head) VALUES ($1, $2)
                 ON CONFLICT (vault) DO UPDATE SET head = EXCLUDED.head, rewritten = NULL, at = now()",
                &[&vault, &head],
            )
            .await
            .map_err(db)?;
            announced(&tx, vault).await?;
            seal_in(&tx, gateway, vec![entry], OffsetDateTime::now_utc()).await?;
            tx.commit().await.map_err(db)
        })?
    }
}

/// Announces `id` at the commit of `tx`.
async fn announced(tx: &tokio_postgres::Transaction<'_>, id: &str) -> Result<(), GatewayError> {
    tx.execute("SELECT pg_notify($1, $2)", &[&VAULTS_CHANNEL, &id])
        .await
        .map_err(db)
        .map(drop)
}
