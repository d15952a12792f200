//! Calls handed to a vault's applier (docs/contract.md#team-lease "One applier at a time"): a
//! gateway that receives an apply while another gateway holds the vault's lease queues the call
//! in `vaultgate.calls` and announces it on [`CALLS_CHANNEL`]; the holder takes it, runs it as
//! its caller (grouped with its own applies, under the lease it holds) and writes the answer
//! back. Every step is one conditional statement whose row count decides: a call is taken once,
//! taken back once, answered only by whoever holds it. A call outlives its receiver's wait (a
//! job): it is run when the holder takes it, and a retry of it waits for it.
//!
//! It must never hand a call to a gateway that does not hold the lease, let a process that does
//! not hold it take one, or answer a call another gateway took back.

use engine::error::GatewayError;
use engine::storage::team::{Handed, HandedCall};
use serde_json::Value;

use crate::lease::TICKET_LIVES;
use crate::{PgState, db, within};

/// Where handed calls are announced (the payload: the vault's id).
pub const CALLS_CHANNEL: &str = "vaultgate_calls";

/// Rows older than this are forgotten by the next take: their receiver stopped waiting long ago
/// (a handed call is run at most `job_ttl_seconds` after it was queued).
const FORGOTTEN_AFTER: &str = "1 hour";

impl PgState {
    /// Queues `call` while a gateway other than its receiver holds the vault's lease, and
    /// announces it, in one commit: whether it was queued.
    pub fn hand_call(&self, call: &HandedCall) -> Result<bool, GatewayError> {
        let mut client = self.client()?;
        within(&self.stale, async {
            let tx = client.transaction().await.map_err(db)?;
            let n = tx
                .execute(
                    "INSERT INTO vaultgate.calls (id, vault, gateway, credential, transport, tool, args)
                     SELECT $1, $2, $3, $4, $5, $6, $7
                     WHERE EXISTS (SELECT 1 FROM vaultgate.leases
                                   WHERE vault = $2 AND holder <> $3 AND expires_at > now())",
                    &[
                        &call.id,
                        &call.vault,
                        &call.gateway,
                        &call.credential,
                        &call.transport,
                        &call.tool,
                        &call.args,
                    ],
                )
                .await
                .map_err(db)?;
            if n == 1 {
                tx.execute("SELECT pg_notify($1, $2)", &[&CALLS_CHANNEL, &call.vault])
                    .await
                    .map_err(db)?;
            }
            tx.commit().await.map_err(db)?;
            Ok(n == 1)
        })?
    }

    /// An earlier call like `call` that is not answered yet: taken, or queued less than
    /// `ttl_seconds` ago (an older one is never taken).
    pub fn pending_like(&self, call: &HandedCall, ttl_seconds: u64) -> Result<Option<String>, GatewayError> {
        let client = self.client()?;
        let ttl = ttl_seconds.min(86_400) as f64;
        let row = within(
            &self.stale,
            client.query_opt(
                "SELECT id FROM vaultgate.calls
                 WHERE vault = $1 AND credential = $2 AND tool = $3 AND args = $4 AND answer IS NULL
                   AND (taken_by IS NOT NULL OR queued_at > now() - make_interval(secs => $5))
                 ORDER BY queued_at LIMIT 1",
                &[&call.vault, &call.credential, &call.tool, &call.args, &ttl],
            ),
        )?
        .map_err(db)?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Takes for `gateway` the oldest calls queued for `vault` less than `ttl_seconds` ago, at
    /// most `limit`, while the database says `gateway` holds the vault's lease (the caller checks
    /// that this process is the one holding it); forgets rows long past, and queued ones too old
    /// to be taken.
    pub fn take_handed(
        &self,
        gateway: &str,
        vault: &str,
        limit: u32,
        ttl_seconds: u64,
    ) -> Result<Vec<HandedCall>, GatewayError> {
        let client = self.client()?;
        let (limit, ttl) = (i64::from(limit), ttl_seconds.min(86_400) as f64);
        let rows = within(
            &self.stale,
            client.query(
                "UPDATE vaultgate.calls SET taken_by = $2, taken_at = now()
                 WHERE id IN (SELECT id FROM vaultgate.calls
                              WHERE vault = $1 AND taken_by IS NULL
                                AND queued_at > now() - make_interval(secs => $4)
                                AND EXISTS (SELECT 1 FROM vaultgate.leases
                                            WHERE vault = $1 AND holder = $2 AND expires_at > now())
                              ORDER BY queued_at LIMIT $3 FOR UPDATE SKIP LOCKED)
                 RETURNING id, vault, gateway, credential, transport, tool, args, queued_at",
                &[&vault, &gateway, &limit, &ttl],
            ),
        )?
        .map_err(db)?;
        let forgot = format!(
            "DELETE FROM vaultgate.calls WHERE queued_at < now() - interval '{FORGOTTEN_AFTER}'
                 OR (taken_by IS NULL AND queued_at < now() - make_interval(secs => $1))"
        );
        within(&self.stale, client.execute(&forgot, &[&ttl]))?.map_err(db)?;
        let mut taken = rows
            .iter()
            .map(|r| {
                (
                    r.get::<_, std::time::SystemTime>(7),
                    HandedCall {
                        id: r.get(0),
                        vault: r.get(1),
                        gateway: r.get(2),
                        credential: r.get(3),
                        transport: r.get(4),
                        tool: r.get(5),
                        args: r.get::<_, Value>(6),
                    },
                )
            })
            .collect::<Vec<_>>();
        taken.sort_by_key(|(at, _)| *at);
        Ok(taken.into_iter().map(|(_, c)| c).collect())
    }

    /// Where the handed call `id` is, with the vault's lease holder now.
    pub fn handed(&self, id: &str) -> Result<Handed, GatewayError> {
        let client = self.client()?;
        let sql = format!(
            "SELECT c.taken_by, c.answer,
                    (SELECT holder FROM vaultgate.leases l
                     WHERE l.vault = c.vault AND l.expires_at > now()),
                    EXISTS (SELECT 1 FROM vaultgate.lease_queue q
                            WHERE q.vault = c.vault AND q.holder = c.taken_by
                              AND q.seen_at > now() - interval '{TICKET_LIVES}')
             FROM vaultgate.calls c WHERE c.id = $1"
        );
        let row = within(&self.stale, client.query_opt(&sql, &[&id]))?.map_err(db)?;
        Ok(match row {
            None => Handed::Gone,
            Some(r) => match r.get::<_, Option<Value>>(1) {
                Some(answer) => Handed::Answered(answer),
                None => Handed::Waiting {
                    taken_by: r.get(0),
                    holder: r.get(2),
                    taker_queued: r.get(3),
                },
            },
        })
    }

    /// Takes the call `id` back from the queue (`from` = `None`) or from the gateway `from`
    /// that took it and did not answer: the row is gone either way.
    pub fn take_back_handed(&self, id: &str, from: Option<&str>) -> Result<bool, GatewayError> {
        let client = self.client()?;
        let n = within(
            &self.stale,
            client.execute(
                "DELETE FROM vaultgate.calls
                 WHERE id = $1 AND answer IS NULL AND taken_by IS NOT DISTINCT FROM $2",
                &[&id, &from],
            ),
        )?
        .map_err(db)?;
        Ok(n == 1)
    }

    /// Writes the answer of the call `id` that `gateway` took: `false` when it was taken back.
    pub fn answer_handed(&self, gateway: &str, id: &str, answer: &Value) -> Result<bool, GatewayError> {
        let client = self.client()?;
        let n = within(
            &self.stale,
            client.execute(
                "UPDATE vaultgate.calls SET answer = $3 WHERE id = $1 AND taken_by = $2 AND answer IS NULL",
                &[&id, &gateway, answer],
            ),
        )?
        .map_err(db)?;
        Ok(n == 1)
    }

    /// Forgets the call `id`.
    pub fn forget_handed(&self, id: &str) -> Result<(), GatewayError> {
        let client = self.client()?;
        within(
            &self.stale,
            client.execute("DELETE FROM vaultgate.calls WHERE id = $1", &[&id]),
        )?
        .map_err(db)?;
        Ok(())
    }

    /// The calls handed to `vault`'s applier and not answered yet: (queued, taken).
    pub fn handed_counts(&self, vault: &str) -> Result<(u64, u64), GatewayError> {
        let client = self.client()?;
        let row = within(
            &self.stale,
            client.query_one(
                "SELECT count(*) FILTER (WHERE taken_by IS NULL), count(*) FILTER (WHERE taken_by IS NOT NULL)
                 FROM vaultgate.calls WHERE vault = $1 AND answer IS NULL",
                &[&vault],
            ),
        )?
        .map_err(db)?;
        let count = |i: usize| u64::try_from(row.get::<_, i64>(i)).unwrap_or(0);
        Ok((count(0), count(1)))
    }

    /// Whether this process holds `vault`'s lease now.
    pub fn holds_lease(&self, vault: &str) -> bool {
        self.lines.holds(vault)
    }
}
