//! Proposals made through any gateway of the team (docs/contract.md#team-mode): one row each,
//! content included, with the job that applies it. Every decision is a conditional UPDATE whose
//! row count names the one winner, committed with its audit record; every write a job makes is
//! fenced by the vault's lease (lease.rs).
//!
//! It must never decide whether a proposal may be applied (the engine checks it against the
//! remote's head) or leave a decision without its record.

use engine::error::GatewayError;
use engine::storage::team::Fence;
use engine::storage::{NewTeamProposal, TeamDone, TeamJob, TeamProposal};
use inbox::{IdemRecord, ProposalStatus, StoredProposal};
use time::OffsetDateTime;
use tokio_postgres::Row;

use crate::chain::seal_in;
use crate::lease::fence_in;
use crate::{PgState, db, within};

const COLUMNS: &str = "id, slug, vault, kind, target, created_by, created_at, status, meta, \
                       decided_at, decided_by, result, reject_reason, n, job, job_gateway, job_base, job_commit, job_key, pushed, \
                       COALESCE(pushed_at > now() - interval '30 seconds', false), \
                       EXTRACT(EPOCH FROM now() - job_at)::bigint, job_meta";
/// Where a query that adds `content` after [`COLUMNS`] finds it.
const CONTENT: usize = 23;

/// A vault's jobs, as `team status` and `doctor` show them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobCounts {
    /// Every job: in flight, or left.
    pub pending: u64,
    /// Jobs whose gateway does not hold the vault's lease now: left by a gateway that stopped.
    pub left: u64,
    /// How long ago the oldest job began (the database's clock).
    pub oldest_seconds: Option<u64>,
}

fn proposal_of(r: &Row, content: Option<String>) -> Result<TeamProposal, GatewayError> {
    let status: String = r.get(7);
    let status: ProposalStatus = status
        .parse()
        .map_err(|_| GatewayError::Internal(format!("a team proposal has the status '{status}'")))?;
    let job = r.get::<_, Option<String>>(14).map(|id| TeamJob {
        id,
        gateway: r.get::<_, Option<String>>(15).unwrap_or_default(),
        base: r.get(16),
        commit: r.get(17),
        key: r.get(18),
        // On the database's clock, the same for every gateway.
        age_seconds: r.get::<_, Option<i64>>(21).and_then(|a| u64::try_from(a).ok()),
        meta: r.get(22),
    });
    Ok(TeamProposal {
        row: StoredProposal {
            id: r.get(0),
            slug: r.get(1),
            vault: r.get(2),
            kind: r.get(3),
            target: r.get(4),
            created_by: r.get(5),
            created_at: r.get(6),
            status,
            meta: r.get(8),
            decided_at: r.get(9),
            decided_by: r.get(10),
            result: r.get(11),
            reject_reason: r.get(12),
        },
        n: r.get(13),
        content,
        job,
        pushed: serde_json::from_value(r.get(19)).unwrap_or_default(),
        may_still_land: r.get(20),
    })
}

impl PgState {
    /// Stores a new pending proposal with its record.
    pub fn insert_proposal(
        &self,
        gateway: &str,
        p: &NewTeamProposal<'_>,
        entry: audit::Entry,
    ) -> Result<audit::AuditRecord, GatewayError> {
        let r = &p.row;
        let bytes = i64::try_from(p.bytes).unwrap_or(i64::MAX);
        let mut client = self.client()?;
        within(&self.stale, async {
            let tx = client.transaction().await.map_err(db)?;
            let mut sealed = seal_in(&tx, gateway, vec![entry], OffsetDateTime::now_utc()).await?;
            tx.execute(
                "INSERT INTO vaultgate.proposals (id, vault, slug, kind, target, created_by, created_at, meta, content, diff, bytes)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                &[
                    &r.id, &r.vault, &r.slug, &r.kind, &r.target, &r.created_by, &r.created_at, r.meta,
                    &p.content, &p.diff, &bytes,
                ],
            )
            .await
            .map_err(db)?;
            tx.commit().await.map_err(db)?;
            sealed
                .pop()
                .ok_or_else(|| GatewayError::Internal("a proposal's record was not sealed".into()))
        })?
    }

    /// The proposal `id` of `vault`, with its content.
    pub fn proposal(&self, vault: &str, id: &str) -> Result<Option<TeamProposal>, GatewayError> {
        let client = self.client()?;
        let row = within(
            &self.stale,
            client.query_opt(
                &format!("SELECT {COLUMNS}, content FROM vaultgate.proposals WHERE vault = $1 AND id = $2"),
                &[&vault, &id],
            ),
        )?
        .map_err(db)?;
        row.map(|r| proposal_of(&r, r.get(CONTENT))).transpose()
    }

    /// A page of `vault`'s proposals of `status`, newest first, after `(created_at, n)`.
    pub fn list_proposals(
        &self,
        vault: &str,
        status: ProposalStatus,
        limit: u32,
        after: Option<(&str, i64)>,
    ) -> Result<Vec<TeamProposal>, GatewayError> {
        let client = self.client()?;
        let limit = i64::from(limit);
        let status = status.as_str();
        let rows = match after {
            None => within(
                &self.stale,
                client.query(
                    &format!(
                        "SELECT {COLUMNS} FROM vaultgate.proposals WHERE vault = $1 AND status = $2
                         ORDER BY created_at DESC, n DESC LIMIT $3"
                    ),
                    &[&vault, &status, &limit],
                ),
            )?,
            Some((at, n)) => within(
                &self.stale,
                client.query(
                    &format!(
                        "SELECT {COLUMNS} FROM vaultgate.proposals WHERE vault = $1 AND status = $2
                         AND (created_at, n) < ($4, $5)
                         ORDER BY created_at DESC, n DESC LIMIT $3"
                    ),
                    &[&vault, &status, &limit, &at, &n],
                ),
            )?,
        }
        .map_err(db)?;
        rows.iter().map(|r| proposal_of(r, None)).collect()
    }

    /// Who made each pending proposal of `vault` and its size.
    pub fn pending_sizes(&self, vault: &str) -> Result<Vec<(String, u64)>, GatewayError> {
        let client = self.client()?;
        let rows = within(
            &self.stale,
            client.query(
                "SELECT created_by, bytes FROM vaultgate.proposals WHERE vault = $1 AND status = 'pending'",
                &[&vault],
            ),
        )?
        .map_err(db)?;
        Ok(rows
            .iter()
            .map(|r| (r.get(0), u64::try_from(r.get::<_, i64>(1)).unwrap_or(0)))
            .collect())
    }

    /// Rejects a pending proposal that no job is applying, with its record.
    pub fn reject_proposal(
        &self,
        gateway: &str,
        id: &str,
        (by, at, reason): (&str, &str, &str),
        key: Option<(&inbox::IdemKey<'_>, &serde_json::Value)>,
        entry: audit::Entry,
    ) -> Result<Option<audit::AuditRecord>, GatewayError> {
        let mut client = self.client()?;
        within(&self.stale, async {
            let tx = client.transaction().await.map_err(db)?;
            let moved = tx
                .execute(
                    "UPDATE vaultgate.proposals SET status = 'rejected', decided_by = $2, decided_at = $3,
                     reject_reason = $4 WHERE id = $1 AND status = 'pending' AND job IS NULL",
                    &[&id, &by, &at, &reason],
                )
                .await
                .map_err(db)?;
            if moved == 0 {
                return Ok(None);
            }
            if let Some((k, answer)) = key {
                tx.execute(
                    "INSERT INTO vaultgate.idempotency_keys (credential_id, key, tool, args_hash, result, created_at)
                     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
                    &[&k.credential_id, &k.key, &k.tool, &k.args_hash, answer, &at],
                )
                .await
                .map_err(db)?;
            }
            let mut sealed = seal_in(&tx, gateway, vec![entry], OffsetDateTime::now_utc()).await?;
            tx.commit().await.map_err(db)?;
            Ok(sealed.pop())
        })?
    }

    /// Gives a pending proposal without a job the job `job`, with its `apply.intent` record.
    pub fn begin_job(
        &self,
        fence: &Fence,
        id: &str,
        job: &TeamJob,
        entry: audit::Entry,
    ) -> Result<Option<audit::AuditRecord>, GatewayError> {
        let mut client = self.client()?;
        within(&self.stale, async {
            let tx = client.transaction().await.map_err(db)?;
            fence_in(&tx, fence).await?;
            let took = tx
                .execute(
                    "UPDATE vaultgate.proposals SET job = $2, job_gateway = $3, job_base = NULL,
                     job_commit = NULL, job_meta = NULL, job_key = $4, job_at = now()
                     WHERE id = $1 AND status = 'pending' AND job IS NULL",
                    &[&id, &job.id, &job.gateway, &job.key],
                )
                .await
                .map_err(db)?;
            if took == 0 {
                return Ok(None);
            }
            let mut sealed = seal_in(&tx, &job.gateway, vec![entry], OffsetDateTime::now_utc()).await?;
            tx.commit().await.map_err(db)?;
            Ok(sealed.pop())
        })?
    }

    /// Notes the commit a job is about to push on `base`, and what else it is made of.
    pub fn job_attempt(
        &self,
        fence: &Fence,
        id: &str,
        job: &str,
        base: &str,
        commit: &str,
        meta: &serde_json::Value,
    ) -> Result<(), GatewayError> {
        let n = self.fenced_execute(
            fence,
            "UPDATE vaultgate.proposals SET job_base = $3, job_commit = $4, job_meta = $5,
             pushed_at = now(), pushed = pushed || to_jsonb($4::text) WHERE id = $1 AND job = $2",
            &[&id, &job, &base, &commit, meta],
        )?;
        if n == 0 {
            return Err(GatewayError::Internal(format!(
                "the apply of {id} lost its job before it pushed; nothing was pushed"
            )));
        }
        Ok(())
    }

    /// The job landed: the proposal applied, the key's answer kept, with the call's record.
    pub fn finish_job(
        &self,
        fence: &Fence,
        gateway: &str,
        id: &str,
        job: &str,
        done: &TeamDone<'_>,
        entry: audit::Entry,
    ) -> Result<Option<audit::AuditRecord>, GatewayError> {
        let mut client = self.client()?;
        within(&self.stale, async {
            let tx = client.transaction().await.map_err(db)?;
            fence_in(&tx, fence).await?;
            let mut sealed = seal_in(&tx, gateway, vec![entry], OffsetDateTime::now_utc()).await?;
            let record = sealed
                .pop()
                .ok_or_else(|| GatewayError::Internal("an apply's record was not sealed".into()))?;
            let result = (done.result)(record.seq);
            let moved = tx
                .execute(
                    "UPDATE vaultgate.proposals SET status = 'applied', decided_by = $3, decided_at = $4,
                     result = $5, job = NULL, job_at = NULL WHERE id = $1 AND job = $2 AND status = 'pending'",
                    &[&id, &job, &done.by, &done.at, &result],
                )
                .await
                .map_err(db)?;
            if moved == 0 {
                // Dropped: the record is not committed either.
                return Ok(None);
            }
            if let Some(k) = &done.key {
                tx.execute(
                    "INSERT INTO vaultgate.idempotency_keys (credential_id, key, tool, args_hash, result, created_at)
                     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
                    &[&k.credential_id, &k.key, &k.tool, &k.args_hash, &result, &done.at],
                )
                .await
                .map_err(db)?;
            }
            tx.commit().await.map_err(db)?;
            Ok(Some(record))
        })?
    }

    /// An answer kept under `key` (the first stays) with its record, in one commit.
    pub fn keep_answer(
        &self,
        fence: &Fence,
        gateway: &str,
        key: &inbox::IdemKey<'_>,
        result: &(dyn Fn(u64) -> serde_json::Value + Sync),
        entry: audit::Entry,
    ) -> Result<audit::AuditRecord, GatewayError> {
        let at = time::format_description::well_known::Rfc3339;
        let now = OffsetDateTime::now_utc();
        let created = now
            .format(&at)
            .map_err(|e| GatewayError::Internal(e.to_string()))?;
        let mut client = self.client()?;
        within(&self.stale, async {
            let tx = client.transaction().await.map_err(db)?;
            fence_in(&tx, fence).await?;
            let mut sealed = seal_in(&tx, gateway, vec![entry], now).await?;
            let record = sealed
                .pop()
                .ok_or_else(|| GatewayError::Internal("a record was not sealed".into()))?;
            let answer = result(record.seq);
            tx.execute(
                "INSERT INTO vaultgate.idempotency_keys (credential_id, key, tool, args_hash, result, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
                &[&key.credential_id, &key.key, &key.tool, &key.args_hash, &answer, &created],
            )
            .await
            .map_err(db)?;
            tx.commit().await.map_err(db)?;
            Ok(record)
        })?
    }

    /// The job did not land: pending again, with no job.
    pub fn drop_job(&self, fence: &Fence, id: &str, job: &str) -> Result<(), GatewayError> {
        self.fenced_execute(
            fence,
            "UPDATE vaultgate.proposals SET job = NULL, job_gateway = NULL, job_base = NULL,
             job_commit = NULL, job_meta = NULL, job_key = NULL, job_at = NULL
             WHERE id = $1 AND job = $2",
            &[&id, &job],
        )
        .map(drop)
    }

    /// The ids of at most `limit` of `vault`'s proposals that have a job, the oldest job first.
    pub fn left_jobs(&self, vault: &str, limit: u32) -> Result<Vec<String>, GatewayError> {
        let client = self.client()?;
        let rows = within(
            &self.stale,
            client.query(
                "SELECT id FROM vaultgate.proposals WHERE vault = $1 AND job IS NOT NULL
                 ORDER BY job_at NULLS FIRST, id LIMIT $2",
                &[&vault, &i64::from(limit)],
            ),
        )?
        .map_err(db)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// How long (seconds) the oldest of `vault`'s jobs whose gateway holds no live lease on it
    /// has been left (`job_counts`'s `left`); `None`: none is.
    pub fn oldest_left_job(&self, vault: &str) -> Result<Option<u64>, GatewayError> {
        let client = self.client()?;
        let row = within(
            &self.stale,
            client.query_one(
                // A job without its time (made before the column) counts as old.
                "SELECT max(COALESCE(EXTRACT(EPOCH FROM now() - p.job_at), 1e9))::bigint
                 FROM vaultgate.proposals p WHERE p.vault = $1 AND p.job IS NOT NULL
                 AND NOT EXISTS (SELECT 1 FROM vaultgate.leases l WHERE l.vault = p.vault
                                 AND l.holder = p.job_gateway AND l.expires_at > now())",
                &[&vault],
            ),
        )?
        .map_err(db)?;
        Ok(row
            .get::<_, Option<i64>>(0)
            .map(|s| u64::try_from(s).unwrap_or(0)))
    }

    /// `vault`'s jobs: applies in flight, and those left by a gateway that stopped (or whose push
    /// had no answer): a job whose gateway does not hold the vault's lease now, which the next
    /// write to the vault (or the next apply or rejection of its proposal), or a serving
    /// gateway's idle sweep, settles.
    pub fn job_counts(&self, vault: &str) -> Result<JobCounts, GatewayError> {
        let client = self.client()?;
        let row = within(
            &self.stale,
            client.query_one(
                "SELECT count(*),
                        count(*) FILTER (WHERE NOT EXISTS (
                            SELECT 1 FROM vaultgate.leases l WHERE l.vault = p.vault
                            AND l.holder = p.job_gateway AND l.expires_at > now())),
                        max(EXTRACT(EPOCH FROM now() - p.job_at))::bigint
                 FROM vaultgate.proposals p WHERE p.vault = $1 AND p.job IS NOT NULL",
                &[&vault],
            ),
        )?
        .map_err(db)?;
        let count = |i: usize| u64::try_from(row.get::<_, i64>(i)).unwrap_or(0);
        Ok(JobCounts {
            pending: count(0),
            left: count(1),
            oldest_seconds: row.get::<_, Option<i64>>(2).and_then(|s| u64::try_from(s).ok()),
        })
    }

    /// The first answer under `principal`'s `key`.
    pub fn idempotency(&self, principal: &str, key: &str) -> Result<Option<IdemRecord>, GatewayError> {
        let client = self.client()?;
        let row = within(
            &self.stale,
            client.query_opt(
                "SELECT tool, args_hash, result, created_at FROM vaultgate.idempotency_keys
                 WHERE credential_id = $1 AND key = $2",
                &[&principal, &key],
            ),
        )?
        .map_err(db)?;
        Ok(row.map(|r| IdemRecord {
            tool: r.get(0),
            args_hash: r.get(1),
            result: r.get(2),
            created_at: r.get(3),
        }))
    }
}
