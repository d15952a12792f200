//! Challenges of the critical tools on team vaults (docs/contract.md#team-mode,
//! #critical-operations): issued by any gateway, executed once by whichever gateway receives the
//! second call. Consuming one is a conditional UPDATE committed with the execution's intent
//! record; every commit an execution was about to push is kept, so one that lands late is still
//! recognized as the execution. The approvals a person gives in a client or on the card are used
//! once across the team here too.
//!
//! It must never decide whether a challenge may be executed (the engine decides, under the
//! vault's lock) or leave a consumption without its record.

use engine::error::GatewayError;
use engine::storage::TeamChallenge;
use engine::storage::team::Fence;
use inbox::{NewChallenge, StoredChallenge};
use serde_json::Value;
use time::OffsetDateTime;
use tokio_postgres::Row;

use crate::chain::seal_in;
use crate::lease::fence_in;
use crate::{PgState, db, within};

const COLUMNS: &str = "id, vault, credential_id, tool, args_hash, idempotency_key, plan, plan_hash, \
                       revision, expires_at, created_at, consumed_at, intent, result, pushed";

fn challenge_of(r: &Row) -> TeamChallenge {
    TeamChallenge {
        row: StoredChallenge {
            id: r.get(0),
            vault: r.get(1),
            credential_id: r.get(2),
            tool: r.get(3),
            args_hash: r.get(4),
            idempotency_key: r.get(5),
            plan: r.get(6),
            plan_hash: r.get(7),
            revision: u64::try_from(r.get::<_, i64>(8)).unwrap_or(0),
            expires_at: r.get(9),
            created_at: r.get(10),
            consumed_at: r.get(11),
            intent: r.get(12),
            result: r.get(13),
        },
        pushed: serde_json::from_value(r.get(14)).unwrap_or_default(),
    }
}

impl PgState {
    /// Records an issued challenge (ids are the server's and unique).
    pub fn create_challenge(&self, c: &NewChallenge<'_>) -> Result<(), GatewayError> {
        let client = self.client()?;
        let revision = i64::try_from(c.revision).unwrap_or(i64::MAX);
        within(
            &self.stale,
            client.execute(
                "INSERT INTO vaultgate.challenges (id, vault, credential_id, tool, args_hash, idempotency_key,
                 plan, plan_hash, revision, expires_at, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                &[
                    &c.id, &c.vault, &c.credential_id, &c.tool, &c.args_hash, &c.idempotency_key, c.plan,
                    &c.plan_hash, &revision, &c.expires_at, &c.created_at,
                ],
            ),
        )?
        .map_err(db)
        .map(drop)
    }

    /// The challenge `id`.
    pub fn challenge(&self, id: &str) -> Result<Option<TeamChallenge>, GatewayError> {
        let client = self.client()?;
        let row = within(
            &self.stale,
            client.query_opt(
                &format!("SELECT {COLUMNS} FROM vaultgate.challenges WHERE id = $1 AND tool <> ''"),
                &[&id],
            ),
        )?
        .map_err(db)?;
        Ok(row.as_ref().map(challenge_of))
    }

    /// The one execution: an unused challenge is consumed by `gateway` with its intent and the
    /// intent's record, in one commit. `None`: it was used already.
    pub fn consume_challenge(
        &self,
        fence: &Fence,
        gateway: &str,
        id: &str,
        at: i64,
        intent: &Value,
        entry: audit::Entry,
    ) -> Result<Option<audit::AuditRecord>, GatewayError> {
        let mut client = self.client()?;
        within(&self.stale, async {
            let tx = client.transaction().await.map_err(db)?;
            fence_in(&tx, fence).await?;
            let took = tx
                .execute(
                    "UPDATE vaultgate.challenges SET consumed_at = $2, intent = $3, gateway = $4
                     WHERE id = $1 AND consumed_at IS NULL",
                    &[&id, &at, intent, &gateway],
                )
                .await
                .map_err(db)?;
            if took == 0 {
                return Ok(None);
            }
            let mut sealed = seal_in(&tx, gateway, vec![entry], OffsetDateTime::now_utc()).await?;
            tx.commit().await.map_err(db)?;
            Ok(sealed.pop())
        })?
    }

    /// Notes a commit the execution of `id` is about to push.
    pub fn challenge_attempt(&self, fence: &Fence, id: &str, commit: &str) -> Result<(), GatewayError> {
        let n = self.fenced_execute(
            fence,
            "UPDATE vaultgate.challenges SET pushed = pushed || to_jsonb($2::text)
             WHERE id = $1 AND consumed_at IS NOT NULL AND result IS NULL",
            &[&id, &commit],
        )?;
        if n == 0 {
            return Err(GatewayError::Internal(format!(
                "the execution of challenge {id} was settled by another gateway before it pushed; nothing was pushed"
            )));
        }
        Ok(())
    }

    /// The execution landed: its answer (given the seq of the record sealed with it) kept, with
    /// the record, in one commit. `None`: it was finished already.
    pub fn finish_challenge(
        &self,
        fence: &Fence,
        gateway: &str,
        id: &str,
        result: &(dyn Fn(u64) -> Value + Sync),
        entry: audit::Entry,
    ) -> Result<Option<audit::AuditRecord>, GatewayError> {
        let mut client = self.client()?;
        within(&self.stale, async {
            let tx = client.transaction().await.map_err(db)?;
            fence_in(&tx, fence).await?;
            let mut sealed = seal_in(&tx, gateway, vec![entry], OffsetDateTime::now_utc()).await?;
            let record = sealed
                .pop()
                .ok_or_else(|| GatewayError::Internal("an execution's record was not sealed".into()))?;
            let answer = result(record.seq);
            let moved = tx
                .execute(
                    "UPDATE vaultgate.challenges SET result = $2
                     WHERE id = $1 AND consumed_at IS NOT NULL AND result IS NULL",
                    &[&id, &answer],
                )
                .await
                .map_err(db)?;
            if moved == 0 {
                return Ok(None);
            }
            tx.commit().await.map_err(db)?;
            Ok(Some(record))
        })?
    }

    /// The execution did not happen (nothing it pushed landed): the challenge is unused again.
    pub fn release_challenge(&self, fence: &Fence, id: &str) -> Result<(), GatewayError> {
        self.fenced_execute(
            fence,
            "UPDATE vaultgate.challenges SET consumed_at = NULL, intent = NULL, gateway = NULL
             WHERE id = $1 AND result IS NULL",
            &[&id],
        )
        .map(drop)
    }

    /// Forgets unused challenges that expired before `before` (an execution's row is kept).
    pub fn prune_challenges(&self, before: i64) -> Result<(), GatewayError> {
        let client = self.client()?;
        within(
            &self.stale,
            client.execute(
                "DELETE FROM vaultgate.challenges WHERE tool <> '' AND expires_at < $1 AND consumed_at IS NULL",
                &[&before],
            ),
        )?
        .map_err(db)
        .map(drop)
    }

    /// Uses the approval `nonce` (valid until `expires_at`) once for the whole team: false when
    /// it was used already. Expired nonces are forgotten (their approvals are refused anyway).
    pub fn use_approval(&self, nonce: &str, expires_at: i64, now: i64) -> Result<bool, GatewayError> {
        let client = self.client()?;
        within(&self.stale, async {
            client
                .execute("DELETE FROM vaultgate.approvals_used WHERE expires_at <= $1", &[&now])
                .await?;
            client
                .execute(
                    "INSERT INTO vaultgate.approvals_used (nonce, expires_at) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                    &[&nonce, &expires_at],
                )
                .await
        })?
        .map(|n| n == 1)
        .map_err(db)
    }
}
