//! The team itself (docs/contract.md#team-mode): one row naming it and holding a key check value
//! of the team secret (never the secret), and the gateways that joined, each with its role. A
//! role is the database's to enforce: [`PgState::grant_reviewer`] gives a PostgreSQL role
//! everything a reviewer gateway writes and nothing of what only admins write.

use engine::error::GatewayError;
use serde::Serialize;

use crate::chain::valid_gateway_name;
use crate::{PgState, db, within};

/// What a gateway may do on its team.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Admin,
    Reviewer,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Reviewer => "reviewer",
        }
    }
}

/// A gateway seen lately, for `team status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewaySeen {
    pub name: String,
    pub role: String,
    /// RFC 3339, UTC.
    pub last_seen: String,
    pub version: String,
}

/// The team as the database has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TeamStatus {
    pub team_id: String,
    pub schema_version: i32,
    /// Seen in the last ten minutes, by name.
    pub gateways: Vec<GatewaySeen>,
}

// SECURITY(T-TEAM3): the database holds this, never the secret.
/// The key check value of a team secret: what proves a secret is the team's without holding it.
pub(crate) fn key_check(secret: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
    hex::encode(ring::hmac::sign(&key, b"vaultgate team key check v1").as_ref())
}

fn refused(msg: &str) -> GatewayError {
    GatewayError::InvalidArgument(msg.to_owned())
}

// SECURITY(T-TEAM1): what a reviewer role may write; everything else is refused by the database.
/// Tables a reviewer gateway writes (everything a call, an apply or a history step touches);
/// credentials, vaults, settings and the team are an admin's alone, and the audit is insert-only.
const REVIEWER_WRITES: &[&str] = &[
    "proposals",
    "apply_intents",
    "vault_revisions",
    "vault_fingerprints",
    "vault_writes",
    "history",
    "idempotency_keys",
    "jobs",
    "challenges",
    "audit_head",
    "vault_heads",
    "approvals_used",
    "leases",
    "lease_queue",
    "calls",
];

impl PgState {
    /// `team init`: makes this database a team's (refused when it already holds one: join it)
    /// with `gateway` as its first admin. Answers the team's id.
    pub fn init_team(&self, secret: &[u8], gateway: &str, version: &str) -> Result<String, GatewayError> {
        check_name(gateway)?;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let mut client = self.client()?;
        within(&self.stale, async {
            let tx = client.transaction().await.map_err(db)?;
            found_team(&tx, &id, secret, gateway, version).await?;
            tx.commit().await.map_err(db)
        })??;
        Ok(id)
    }

    /// `team init --import`: makes this database the team `team_id` (the importing home's
    /// token audience, so its tokens stay valid) with `gateway` as its first admin, and moves
    /// `credentials` in (same ids; the SHA-256 of each `jti`), the chain opening with a
    /// `team.import` record naming where the home's own chain ended — one commit, or nothing.
    #[allow(clippy::too_many_arguments)]
    pub fn import_team(
        &self,
        secret: &[u8],
        gateway: &str,
        version: &str,
        team_id: &str,
        credentials: &[inbox::Credential],
        local_head: Option<(u64, String)>,
        actor: &audit::Actor,
    ) -> Result<(), GatewayError> {
        check_name(gateway)?;
        let mut entry = audit::Entry::new("team.import", actor.clone(), audit::Outcome::Ok);
        entry.target = Some(match &local_head {
            Some((seq, hash)) => format!("seq {seq} {hash}"),
            None => "an empty log".into(),
        });
        entry.count = Some(credentials.len() as u64);
        let mut client = self.client()?;
        within(&self.stale, async {
            let tx = client.transaction().await.map_err(db)?;
            found_team(&tx, team_id, secret, gateway, version).await?;
            crate::credentials::import(&tx, credentials).await?;
            crate::chain::seal_in(&tx, gateway, vec![entry], time::OffsetDateTime::now_utc()).await?;
            tx.commit().await.map_err(db)
        })?
    }

    /// `team join`: adds `gateway` with `role` to the team whose secret `secret` is (checked
    /// against the key check value). Answers the team's id.
    pub fn join_team(
        &self,
        secret: &[u8],
        gateway: &str,
        role: Role,
        version: &str,
    ) -> Result<String, GatewayError> {
        check_name(gateway)?;
        let mut client = self.client()?;
        within(&self.stale, async {
            let tx = client.transaction().await.map_err(db)?;
            let Some(team) = tx
                .query_opt("SELECT id, key_check FROM vaultgate.team WHERE one", &[])
                .await
                .map_err(db)?
            else {
                return Err(refused(
                    "this database holds no team yet: an admin runs `vaultgate team init` first",
                ));
            };
            let stored: String = team.get(1);
            if stored != key_check(secret) {
                return Err(refused(
                    "this secret is not the team's: ask an admin for `vaultgate team secret export`",
                ));
            }
            add_gateway(&tx, gateway, role, version).await?;
            tx.commit().await.map_err(db)?;
            Ok(team.get(0))
        })?
    }

    /// `team secret rotate` (an admin, as `gateway`): `secret` becomes the team's (its key check
    /// replaces the old one) and the credentials' generation moves, with the `team.secret_rotate`
    /// record, in one commit. From then on every gateway holding the old secret refuses every
    /// request (its generation read compares the key check) until it imports the new one.
    pub fn rotate_secret(
        &self,
        gateway: &str,
        actor: &audit::Actor,
        secret: &[u8],
    ) -> Result<(), GatewayError> {
        let mut client = self.client()?;
        within(&self.stale, async {
            let tx = client.transaction().await.map_err(db)?;
            tx.execute(
                "UPDATE vaultgate.team SET key_check = $1 WHERE one",
                &[&key_check(secret)],
            )
            .await
            .map_err(db)?;
            tx.execute(
                "UPDATE vaultgate.credential_generation SET n = n + 1 WHERE one",
                &[],
            )
            .await
            .map_err(db)?;
            let mut entry = audit::Entry::new("team.secret_rotate", actor.clone(), audit::Outcome::Ok);
            entry.tool = Some("team_secret_rotate".into());
            crate::chain::seal_in(&tx, gateway, vec![entry], time::OffsetDateTime::now_utc()).await?;
            tx.commit().await.map_err(db)
        })?
    }

    /// Whether `secret` is the team's now (its key check).
    pub fn is_team_secret(&self, secret: &[u8]) -> Result<bool, GatewayError> {
        let client = self.client()?;
        let row = within(
            &self.stale,
            client.query_opt("SELECT key_check FROM vaultgate.team WHERE one", &[]),
        )?
        .map_err(db)?;
        Ok(row.is_some_and(|r| r.get::<_, String>(0) == key_check(secret)))
    }

    /// `team remove NAME` (an admin, as `gateway`): forgets the gateway `name`, with its
    /// `team.remove` record. Its role's records are refused from then on (the chain accepts a
    /// record only from the role of a gateway it knows); the admin then drops that role.
    pub fn remove_gateway(
        &self,
        gateway: &str,
        actor: &audit::Actor,
        name: &str,
    ) -> Result<(), GatewayError> {
        if name == gateway {
            return Err(refused(
                "a gateway cannot remove itself: run `vaultgate team remove` on another admin gateway",
            ));
        }
        let mut entry = audit::Entry::new("team.remove", actor.clone(), audit::Outcome::Ok);
        entry.target = Some(name.to_owned());
        let mut client = self.client()?;
        within(&self.stale, async {
            let tx = client.transaction().await.map_err(db)?;
            let gone = tx
                .execute("DELETE FROM vaultgate.gateways WHERE name = $1", &[&name])
                .await
                .map_err(db)?;
            if gone == 0 {
                return Err(refused(
                    "the team has no gateway of that name (see `vaultgate team status`)",
                ));
            }
            crate::chain::seal_in(&tx, gateway, vec![entry], time::OffsetDateTime::now_utc()).await?;
            tx.commit().await.map_err(db)
        })?
    }

    /// Whether the team has a gateway named `gateway`.
    pub fn gateway_known(&self, gateway: &str) -> Result<bool, GatewayError> {
        let client = self.client()?;
        within(
            &self.stale,
            client.query_opt("SELECT 1 FROM vaultgate.gateways WHERE name = $1", &[&gateway]),
        )?
        .map(|r| r.is_some())
        .map_err(db)
    }

    /// This gateway's role, as the team registered it.
    pub fn gateway_role(&self, gateway: &str) -> Result<Option<String>, GatewayError> {
        let client = self.client()?;
        within(
            &self.stale,
            client.query_opt("SELECT role FROM vaultgate.gateways WHERE name = $1", &[&gateway]),
        )?
        .map(|r| r.map(|r| r.get(0)))
        .map_err(db)
    }

    /// Notes that `gateway` is alive (each gateway does this now and then).
    pub fn gateway_seen(&self, gateway: &str, version: &str) -> Result<(), GatewayError> {
        let client = self.client()?;
        within(
            &self.stale,
            client.execute(
                "UPDATE vaultgate.gateways SET last_seen = now(), version = $2 WHERE name = $1",
                &[&gateway, &version],
            ),
        )?
        .map(drop)
        .map_err(db)
    }

    /// `team status`: the team, the schema, and the gateways seen in the last ten minutes.
    pub fn team_status(&self) -> Result<Option<TeamStatus>, GatewayError> {
        let schema_version = self.schema_version()?;
        let client = self.client()?;
        let Some(team) = within(
            &self.stale,
            client.query_opt("SELECT id FROM vaultgate.team WHERE one", &[]),
        )?
        .map_err(db)?
        else {
            return Ok(None);
        };
        let rows = within(&self.stale, client.query(
            "SELECT name, role, to_char(last_seen AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), version
             FROM vaultgate.gateways WHERE last_seen > now() - interval '10 minutes' ORDER BY name",
            &[],
        ))?
        .map_err(db)?;
        Ok(Some(TeamStatus {
            team_id: team.get(0),
            schema_version,
            gateways: rows
                .iter()
                .map(|r| GatewaySeen {
                    name: r.get(0),
                    role: r.get(1),
                    last_seen: r.get(2),
                    version: r.get(3),
                })
                .collect(),
        }))
    }

    /// `team grant-reviewer ROLE` (as an admin): lets the PostgreSQL role `role` run a reviewer
    /// gateway. It reads everything, writes what calls, applies and history steps write, appends
    /// to the audit (never changes it), and cannot write credentials, vaults, settings or the team.
    pub fn grant_reviewer(&self, role: &str) -> Result<(), GatewayError> {
        let plain = (1..=63).contains(&role.len())
            && role
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
            && role
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !plain || role == "public" || role.starts_with("pg_") {
            return Err(refused(
                "a reviewer's PostgreSQL role name is 1-63 of a-z, 0-9 and _, not starting with a \
                 digit, and not public or pg_*",
            ));
        }
        let mut client = self.client()?;
        // Only a role that may pass the admin's rights on: a reviewer's GRANT would merely warn
        // and grant nothing, so it is refused as what it is.
        let may_grant = within(
            &self.stale,
            client.query_one(
                "SELECT has_table_privilege('vaultgate.credentials', 'INSERT WITH GRANT OPTION')",
                &[],
            ),
        )?
        .map_err(db)?
        .get::<_, bool>(0);
        if !may_grant {
            return Err(GatewayError::CapabilityDenied(
                "only an admin gateway (the team database's owner) may grant the reviewer role".into(),
            ));
        }
        // SECURITY(T-TEAM1): only an existing role that is neither a superuser nor this one.
        let found = within(
            &self.stale,
            client.query_opt(
                "SELECT rolsuper, rolname = current_user FROM pg_roles WHERE rolname = $1",
                &[&role],
            ),
        )?
        .map_err(db)?;
        match found.map(|r| (r.get::<_, bool>(0), r.get::<_, bool>(1))) {
            None => {
                return Err(refused(
                    "no PostgreSQL role of that name: create it first (CREATE ROLE … LOGIN)",
                ));
            }
            Some((true, _)) => return Err(refused("a superuser cannot be confined to a reviewer's rights")),
            Some((_, true)) => return Err(refused("this gateway's own role cannot become a reviewer")),
            Some(_) => {}
        }
        let mut sql = format!(
            "REVOKE ALL ON ALL TABLES IN SCHEMA vaultgate FROM {role};
             GRANT USAGE ON SCHEMA vaultgate TO {role};
             GRANT SELECT ON ALL TABLES IN SCHEMA vaultgate TO {role};
             GRANT USAGE ON ALL SEQUENCES IN SCHEMA vaultgate TO {role};
             GRANT INSERT ON vaultgate.audit TO {role};
             GRANT EXECUTE ON FUNCTION vaultgate.audit_head_locked() TO {role};
             GRANT INSERT (name, version), UPDATE (last_seen, version) ON vaultgate.gateways TO {role};"
        );
        for table in REVIEWER_WRITES {
            sql.push_str(&format!(
                "GRANT INSERT, UPDATE, DELETE ON vaultgate.{table} TO {role};"
            ));
        }
        within(&self.stale, async {
            let tx = client.transaction().await?;
            tx.batch_execute(&sql).await?;
            tx.commit().await
        })?
        .map_err(db)
    }
}

fn check_name(gateway: &str) -> Result<(), GatewayError> {
    if valid_gateway_name(gateway) {
        Ok(())
    } else {
        Err(refused(
            "a gateway name is 1-64 characters of A-Z a-z 0-9 . _ @ -",
        ))
    }
}

/// Makes the database the team `id` (refused when it holds one already) with `gateway` as its
/// first admin, inside `tx`.
async fn found_team(
    tx: &tokio_postgres::Transaction<'_>,
    id: &str,
    secret: &[u8],
    gateway: &str,
    version: &str,
) -> Result<(), GatewayError> {
    let made = tx
        .execute(
            "INSERT INTO vaultgate.team (one, id, key_check) VALUES (true, $1, $2) ON CONFLICT DO NOTHING",
            &[&id, &key_check(secret)],
        )
        .await
        .map_err(db)?;
    if made == 0 {
        return Err(refused(
            "this database already holds a team: join it with `vaultgate team join`",
        ));
    }
    add_gateway(tx, gateway, Role::Admin, version).await
}

async fn add_gateway(
    tx: &tokio_postgres::Transaction<'_>,
    gateway: &str,
    role: Role,
    version: &str,
) -> Result<(), GatewayError> {
    // A reviewer's role may not name a role: the column's default is `reviewer`, and `db_role`
    // defaults to the session's user, whose records the chain then accepts under this name.
    let sql = match role {
        Role::Reviewer => {
            "INSERT INTO vaultgate.gateways (name, version) VALUES ($1, $2) ON CONFLICT DO NOTHING"
        }
        Role::Admin => {
            "INSERT INTO vaultgate.gateways (name, role, version) VALUES ($1, 'admin', $2) ON CONFLICT DO NOTHING"
        }
    };
    let added = tx.execute(sql, &[&gateway, &version]).await.map_err(db)?;
    if added == 0 {
        return Err(inbox::StateError::DuplicateName(gateway.to_owned()).into());
    }
    Ok(())
}
