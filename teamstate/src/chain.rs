//! The team's audit chain (docs/contract.md#team-mode): one chain for every gateway of a team, in
//! the table `vaultgate.audit`, its head the row `vaultgate.audit_chain_head`. A gateway appends a
//! batch of records in one transaction that locks the head, seals each record after the one
//! before with the gateway's name (the very sealing of a home's log, [`audit::seal`]) and moves
//! the head: `seq` is gapless (a transaction that fails takes its numbers with it), appends of
//! many gateways interleave as whole batches, and an export of the chain verifies as a home's
//! log does.
//!
//! The head lock is the chain's only serialisation point: one lock per batch, never one per
//! record, so a gateway batching its calls keeps the chain from being the team's bottleneck.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use engine::error::GatewayError;
use time::OffsetDateTime;
use tokio_postgres::types::Type;

use crate::{PgState, db, within};

/// Records one append may carry: bounded before any work (a batch holds the head's lock).
pub const MAX_BATCH: usize = 256;

/// Rows an export reads at a time.
const EXPORT_PAGE: i64 = 1000;

/// An append's bounds, checked before any work: true when there is nothing to append.
fn check_append(gateway: &str, entries: &[audit::Entry]) -> Result<bool, GatewayError> {
    if !valid_gateway_name(gateway) {
        return Err(GatewayError::InvalidArgument(
            "a gateway name is 1-64 characters of A-Z a-z 0-9 . _ @ -".into(),
        ));
    }
    if entries.len() > MAX_BATCH {
        return Err(GatewayError::InvalidArgument(format!(
            "at most {MAX_BATCH} audit records in one append"
        )));
    }
    Ok(entries.is_empty())
}

/// Whether `name` can name a gateway of a team: 1–64 characters of `[A-Za-z0-9._@-]`.
pub fn valid_gateway_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'@' | b'-'))
}

impl PgState {
    /// Appends `entries` to the team's chain as records written by `gateway`, all stamped `now`,
    /// in order, in one transaction; answers them sealed (their `seq` and `hash`).
    pub fn append_audit(
        &self,
        gateway: &str,
        entries: Vec<audit::Entry>,
        now: OffsetDateTime,
    ) -> Result<Vec<audit::AuditRecord>, GatewayError> {
        if check_append(gateway, &entries)? {
            return Ok(Vec::new());
        }
        let mut client = self.client()?;
        let sealed = within(&self.stale, self.append_on(&mut client, gateway, entries, now))?;
        self.remember_head(&sealed);
        sealed
    }

    /// [`PgState::append_audit`] as a task of this store's own runtime (the chain's writer): no
    /// thread stands between it and its connection.
    async fn append_audit_here(
        &self,
        gateway: &str,
        entries: Vec<audit::Entry>,
        now: OffsetDateTime,
    ) -> Result<Vec<audit::AuditRecord>, GatewayError> {
        if check_append(gateway, &entries)? {
            return Ok(Vec::new());
        }
        self.drop_stale();
        let sealed = tokio::time::timeout(crate::DB_DEADLINE, async {
            let mut client = self.pool.get().await.map_err(crate::pool_error)?;
            self.append_on(&mut client, gateway, entries, now).await
        })
        .await
        .unwrap_or_else(|_| {
            self.stale.store(true, std::sync::atomic::Ordering::SeqCst);
            tracing::warn!("the team database did not answer in time");
            Err(GatewayError::AuditUnavailable)
        });
        self.remember_head(&sealed);
        sealed
    }

    /// Where the chain's head is after this store's append (unknown after a failure).
    fn remember_head(&self, sealed: &Result<Vec<audit::AuditRecord>, GatewayError>) {
        let guessed = match sealed {
            Ok(records) => records.last().map(|r| (r.seq, r.hash.clone())),
            Err(_) => None,
        };
        if let Ok(mut g) = self.chain_guess.lock() {
            *g = guessed;
        }
    }

    /// One append on `client`.
    async fn append_on(
        &self,
        client: &mut deadpool_postgres::Object,
        gateway: &str,
        entries: Vec<audit::Entry>,
        now: OffsetDateTime,
    ) -> Result<Vec<audit::AuditRecord>, GatewayError> {
        let guess = self.chain_guess.lock().ok().and_then(|g| g.clone());
        {
            // Two round trips when the head is where this store left it: BEGIN and the rows
            // (written only if the head, locked first, is still the guessed one) sent together,
            // then COMMIT. Not one statement on its own: a call that gave up waiting must leave
            // nothing behind, and a transaction not committed is rolled back with its
            // connection. A head that moved writes nothing and falls back to reading it.
            if let Some((seq, prev)) = guess {
                let rows = Rows::seal(gateway, entries.clone(), seq, &prev, now)?;
                let c: &deadpool_postgres::ClientWrapper = client;
                let (began, written) =
                    tokio::join!(c.batch_execute("BEGIN"), rows.insert_after(c, seq, &prev));
                let end = match (began, written) {
                    (Ok(()), Ok(true)) => "COMMIT",
                    (Err(e), _) | (Ok(()), Err(e)) => {
                        let _ = c.batch_execute("ROLLBACK").await;
                        return Err(db(e));
                    }
                    (Ok(()), Ok(false)) => "ROLLBACK",
                };
                c.batch_execute(end).await.map_err(db)?;
                if end == "COMMIT" {
                    return Ok(rows.sealed);
                }
                tracing::debug!("the team's chain moved since this gateway's last append");
            }
            let tx = client.transaction().await.map_err(db)?;
            let sealed = seal_in(&tx, gateway, entries, now).await?;
            tx.commit().await.map_err(db)?;
            Ok(sealed)
        }
    }

    /// The chain's head: the last record's `seq` and `hash` (0 and `GENESIS` before any).
    pub fn audit_chain_head(&self) -> Result<(u64, String), GatewayError> {
        let client = self.client()?;
        let row = within(
            &self.stale,
            client.query_one("SELECT seq, hash FROM vaultgate.audit_chain_head WHERE one", &[]),
        )?
        .map_err(db)?;
        let seq = u64::try_from(row.get::<_, i64>(0))
            .map_err(|_| GatewayError::Internal("the team's audit head has a negative seq".into()))?;
        Ok((seq, row.get(1)))
    }

    /// The last `n` records of the chain, oldest first (`audit tail`).
    pub fn audit_tail(&self, n: usize) -> Result<Vec<audit::AuditRecord>, GatewayError> {
        let n = i64::try_from(n.min(10_000)).unwrap_or(10_000);
        let rows = {
            let client = self.client()?;
            within(
                &self.stale,
                client.query(
                    "SELECT line FROM vaultgate.audit ORDER BY seq DESC LIMIT $1",
                    &[&n],
                ),
            )?
            .map_err(db)?
        };
        let mut records = rows
            .iter()
            .map(|r| {
                serde_json::from_str(r.get::<_, &str>(0)).map_err(|e| {
                    GatewayError::AuditBroken(format!("a record of the team's chain does not parse: {e}"))
                })
            })
            .collect::<Result<Vec<audit::AuditRecord>, _>>()?;
        records.reverse();
        Ok(records)
    }

    /// Writes every record after `since` to `out`, in `seq` order, one line each: the format of
    /// a home's log (docs/contract.md#the-audit-log), so `audit verify --file` checks it.
    /// Answers how many it wrote.
    pub fn export_audit(&self, since: u64, out: &mut dyn Write) -> Result<u64, GatewayError> {
        let mut after = i64::try_from(since).unwrap_or(i64::MAX);
        let mut written = 0u64;
        loop {
            // The connection is held for one page only: a slow reader of the export must not
            // stall this gateway's calls.
            let rows = {
                let client = self.client()?;
                within(
                    &self.stale,
                    client.query(
                        "SELECT seq, line FROM vaultgate.audit WHERE seq > $1 ORDER BY seq LIMIT $2",
                        &[&after, &EXPORT_PAGE],
                    ),
                )?
                .map_err(db)?
            };
            let Some(last) = rows.last() else {
                break;
            };
            after = last.get(0);
            for row in &rows {
                out.write_all(row.get::<_, &str>(1).as_bytes())?;
                out.write_all(b"\n")?;
                written += 1;
            }
        }
        out.flush()?;
        Ok(written)
    }
}

/// Seals `entries` into the chain inside `tx`, as records of `gateway`: locks the head (call it
/// last in a transaction that does other work, so the lock is held only to the commit), inserts
/// each record after the one before, and moves the head. Nothing is visible before `tx` commits,
/// and a rolled-back `tx` leaves no gap.
pub(crate) async fn seal_in(
    tx: &tokio_postgres::Transaction<'_>,
    gateway: &str,
    entries: Vec<audit::Entry>,
    now: OffsetDateTime,
) -> Result<Vec<audit::AuditRecord>, GatewayError> {
    // The head locked through the owner's function: no gateway role writes the head row; the
    // insert trigger checks each record follows it, and moves it (SECURITY(T-TEAM2)).
    // Typed statements: one round trip each (no separate prepare), and the batch's records in
    // one INSERT, so a batch costs four exchanges (BEGIN, the head, the rows, COMMIT) whatever
    // its size. The trigger still checks each row in order against the head it moved.
    let head = tx
        .query_typed_one("SELECT seq, hash FROM vaultgate.audit_head_locked()", &[])
        .await
        .map_err(db)?;
    let seq = u64::try_from(head.get::<_, i64>(0))
        .map_err(|_| GatewayError::Internal("the team's audit head has a negative seq".into()))?;
    let prev: String = head.get(1);
    let rows = Rows::seal(gateway, entries, seq, &prev, now)?;
    rows.insert(tx).await.map_err(db)?;
    Ok(rows.sealed)
}

/// Records sealed after a head, as the rows of one INSERT.
struct Rows {
    sealed: Vec<audit::AuditRecord>,
    seqs: Vec<i64>,
    hashes: Vec<String>,
    gateways: Vec<String>,
    lines: Vec<String>,
}

impl Rows {
    /// Seals `entries` of `gateway` after the record `(seq, prev)`.
    fn seal(
        gateway: &str,
        entries: Vec<audit::Entry>,
        mut seq: u64,
        prev: &str,
        now: OffsetDateTime,
    ) -> Result<Rows, GatewayError> {
        let mut prev = prev.to_owned();
        let mut rows = Rows {
            sealed: Vec::with_capacity(entries.len()),
            seqs: Vec::new(),
            hashes: Vec::new(),
            gateways: vec![gateway.to_owned(); entries.len()],
            lines: Vec::new(),
        };
        for mut entry in entries {
            entry.gateway = Some(gateway.to_owned());
            let (record, line) = audit::seal(entry, seq, &prev, now)?;
            rows.seqs.push(
                i64::try_from(record.seq)
                    .map_err(|_| GatewayError::Internal("the team's audit seq overflows".into()))?,
            );
            rows.hashes.push(record.hash.clone());
            rows.lines.push(line.trim_end_matches('\n').to_owned());
            seq = record.seq;
            prev.clone_from(&record.hash);
            rows.sealed.push(record);
        }
        Ok(rows)
    }

    /// The rows, only if the chain's head is still `(seq, hash)`: the head is locked before any
    /// row is written (as every append locks it first, so two
    /// appends never wait on each other's rows), and a head that moved writes nothing (false).
    async fn insert_after(
        &self,
        c: &deadpool_postgres::ClientWrapper,
        seq: u64,
        hash: &str,
    ) -> Result<bool, tokio_postgres::Error> {
        let seq = i64::try_from(seq).unwrap_or(-1);
        // Prepared once per connection: this runs for every batch.
        let insert = c
            .prepare_cached(
                "INSERT INTO vaultgate.audit (seq, hash, gateway, line)
                 SELECT s, h, g, l FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[]) AS u(s, h, g, l)
                 WHERE (SELECT hd.seq = $5::bigint AND hd.hash = $6::text FROM vaultgate.audit_head_locked() hd)
                 ORDER BY s
                 RETURNING seq",
            )
            .await?;
        let inserted = c
            .query(
                &insert,
                &[&self.seqs, &self.hashes, &self.gateways, &self.lines, &seq, &hash],
            )
            .await?;
        Ok(inserted.len() == self.seqs.len())
    }

    /// The rows in one statement (the chain's guard checks them against the head it locks).
    async fn insert<C: tokio_postgres::GenericClient>(&self, c: &C) -> Result<(), tokio_postgres::Error> {
        c.query_typed(
            "INSERT INTO vaultgate.audit (seq, hash, gateway, line)
             SELECT s, h, g, l FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[]) AS u(s, h, g, l)
             ORDER BY s",
            &[
                (&self.seqs, Type::INT8_ARRAY),
                (&self.hashes, Type::TEXT_ARRAY),
                (&self.gateways, Type::TEXT_ARRAY),
                (&self.lines, Type::TEXT_ARRAY),
            ],
        )
        .await
        .map(drop)
    }
}

/// A record waiting for its batch, and where its answer goes.
struct Queued {
    entry: audit::Entry,
    answer: mpsc::SyncSender<Result<audit::AuditRecord, GatewayError>>,
}

/// One gateway's appends to the team's chain, in batches (docs/contract.md#team-mode): every
/// record queued while the last batch committed goes into the next one, so calls made at once
/// share one lock of the chain's head, and a call alone waits for no one. Each
/// [`ChainWriter::append`] answers once its record is committed, or with the batch's failure
/// (`AUDIT_UNAVAILABLE` when the database cannot be reached): a call never goes on unaudited.
pub struct ChainWriter {
    queue: Option<tokio::sync::mpsc::UnboundedSender<Queued>>,
    /// Told when the writer's task ends (its queue drained).
    ended: std::sync::Mutex<Option<mpsc::Receiver<()>>>,
    batches: Arc<AtomicU64>,
}

impl ChainWriter {
    /// Starts the writer of `gateway` (checked as [`valid_gateway_name`]) over `store`.
    pub fn start(store: Arc<PgState>, gateway: &str) -> Result<ChainWriter, GatewayError> {
        if !valid_gateway_name(gateway) {
            return Err(GatewayError::InvalidArgument(
                "a gateway name is 1-64 characters of A-Z a-z 0-9 . _ @ -".into(),
            ));
        }
        let (queue, mut queued) = tokio::sync::mpsc::unbounded_channel::<Queued>();
        let (end, ended) = mpsc::sync_channel::<()>(1);
        let batches = Arc::new(AtomicU64::new(0));
        let counted = batches.clone();
        let gateway = gateway.to_owned();
        // A task of the store's own runtime, beside its connections' tasks: a batch's round
        // trips cross no thread.
        let runtime = store.runtime()?.handle().clone();
        runtime.spawn(async move {
            while let Some(first) = queued.recv().await {
                let mut batch = vec![first];
                while batch.len() < MAX_BATCH {
                    match queued.try_recv() {
                        Ok(q) => batch.push(q),
                        Err(_) => break,
                    }
                }
                let (entries, answers): (Vec<_>, Vec<_>) =
                    batch.into_iter().map(|q| (q.entry, q.answer)).unzip();
                let sealed = store
                    .append_audit_here(&gateway, entries, OffsetDateTime::now_utc())
                    .await;
                counted.fetch_add(1, Ordering::Relaxed);
                match sealed {
                    Ok(records) => {
                        for (record, answer) in records.into_iter().zip(answers) {
                            // A caller that stopped waiting has nothing to be told.
                            let _ = answer.send(Ok(record));
                        }
                    }
                    Err(e) => {
                        for answer in answers {
                            let _ = answer.send(Err(again(&e)));
                        }
                    }
                }
            }
            let _ = end.send(());
        });
        Ok(ChainWriter {
            queue: Some(queue),
            ended: std::sync::Mutex::new(Some(ended)),
            batches,
        })
    }

    /// Appends `entry` (its `gateway` set to this writer's) and answers its record once it is
    /// committed in the chain.
    pub fn append(&self, entry: audit::Entry) -> Result<audit::AuditRecord, GatewayError> {
        let gone = || GatewayError::Internal("the team's audit writer has stopped".into());
        let (answer, answered) = mpsc::sync_channel(1);
        self.queue
            .as_ref()
            .ok_or_else(gone)?
            .send(Queued { entry, answer })
            .map_err(|_| gone())?;
        answered.recv().map_err(|_| gone())?
    }

    /// Batches committed or failed so far: fewer than the records when calls came at once.
    pub fn batches(&self) -> u64 {
        self.batches.load(Ordering::Relaxed)
    }
}

impl Drop for ChainWriter {
    /// Lets the queued records commit, then stops the worker (waiting at most as long as one
    /// exchange with the database may take).
    fn drop(&mut self) {
        drop(self.queue.take());
        let ended = self.ended.get_mut().ok().and_then(Option::take);
        if let Some(ended) = ended {
            let _ = ended.recv_timeout(crate::DB_DEADLINE);
        }
    }
}

/// A batch's failure, told to each of its callers (an error does not clone).
fn again(e: &GatewayError) -> GatewayError {
    match e {
        GatewayError::AuditUnavailable => GatewayError::AuditUnavailable,
        other => GatewayError::Again(other.code(), other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::valid_gateway_name;

    #[test]
    fn gateway_names_are_short_and_plain() {
        for ok in ["g1", "ana@laptop", "build-01.example_x", &"a".repeat(64)] {
            assert!(valid_gateway_name(ok), "{ok}");
        }
        for bad in ["", &"a".repeat(65), "g 1", "g/1", "g\n1", "ğ", "g:1"] {
            assert!(!valid_gateway_name(bad), "{bad:?}");
        }
    }
}
