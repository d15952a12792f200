//! A vault's lease (docs/contract.md#team-mode): the right to write its remote, one gateway of
//! the team at a time. A row per vault whose expiry is on the database's clock
//! (`lease_seconds`, 10 s), taken by anyone once it expired, each take with an epoch one greater
//! than the last; the holder renews it every second and releases it when done. Every write a
//! hold records runs [`fence_in`] first, in its own transaction: the lease must still be that
//! epoch's and unexpired, so a holder that lost it (a sleeping laptop, a half-open connection,
//! a process stopped mid-apply) records nothing once another took over. Waiters take turns:
//! in a process, first come first served ([`Lines`]); across the team, the first waiter of each
//! gateway holds a ticket in `vaultgate.lease_queue`, and a free lease goes to the live ticket
//! queued first, so no gateway's callers starve while others race.
//!
//! It must never take a lease that has not expired, count a renewal that did not answer as one
//! that did, or let a hold believe itself valid past the expiry the database last granted.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use engine::error::GatewayError;
use engine::storage::team::{Fence, VaultHold};

use crate::{PgState, db, within};

/// How often a hold renews its lease.
const RENEW_EVERY: Duration = Duration::from_secs(1);
/// A renewal without an answer by then counts as not made.
const RENEW_DEADLINE: Duration = Duration::from_secs(2);
/// How much sooner than the database's expiry a hold stops trusting itself: a margin for the
/// two clocks' rates and for the time between a check and the write it allows.
const MARGIN: Duration = Duration::from_millis(500);

/// How long a waiter's ticket counts without being refreshed: a gateway that died waiting holds
/// up the line at most this long.
pub(crate) const TICKET_LIVES: &str = "2 seconds";
/// How often a waiting ticket is refreshed.
const TICKET_REFRESH: Duration = Duration::from_millis(500);
/// The most writes one take of a lease serves in a gateway before it goes back to the team's line.
const LOCAL_TURN: u32 = 4;
/// The longest pause between two asks of a first waiter.
const MAX_PAUSE: Duration = Duration::from_millis(20);

/// The lease's length: the team's `lease_seconds`, else 10 s (read by the statement itself).
const SECONDS: &str = "COALESCE((SELECT (value #>> '{}')::float8 FROM vaultgate.settings \
                       WHERE key = 'lease_seconds'), 10)";

/// This process's waiters for each vault's lease: only the first of a vault asks the database,
/// the others wait their turn here (first come, first served). A hold given up while others of
/// the process wait is handed to the first of them (at most [`LOCAL_TURN`] writes per take, so
/// the other gateways' turn comes): no release, no ask, and the clone is already current.
#[derive(Default)]
pub(crate) struct Lines {
    lines: Mutex<HashMap<String, Arc<Line>>>,
    next: AtomicU64,
    /// How many holds of each vault's lease this process has taken and not released (a hold
    /// handed on stays the same hold): who may take the calls handed to the vault's applier.
    held: Mutex<HashMap<String, usize>>,
}

#[derive(Default)]
struct Line {
    state: Mutex<LineState>,
    turn: Condvar,
}

#[derive(Default)]
struct LineState {
    waiting: VecDeque<u64>,
    /// A hold handed on, for the first waiter.
    handed: Option<VaultLock>,
}

/// A place in a vault's line; leaving it (dropped) lets the next one ask.
struct Place {
    line: Arc<Line>,
    me: u64,
}

impl Drop for Place {
    fn drop(&mut self) {
        let orphan = match self.line.state.lock() {
            Ok(mut s) => {
                s.waiting.retain(|n| *n != self.me);
                // Handed on to no one (the last waiter gave up): released below.
                match s.waiting.is_empty() {
                    true => s.handed.take(),
                    false => None,
                }
            }
            Err(_) => None,
        };
        self.line.turn.notify_all();
        drop(orphan);
    }
}

impl Place {
    /// The hold handed on to this waiter, waiting for one at most `pause`. One that lapsed
    /// meanwhile (its renewals unanswered) is let go (released outside the line's lock).
    fn handed(&self, pause: Duration) -> Option<VaultLock> {
        let handed = {
            let mut s = self.line.state.lock().ok()?;
            if s.handed.is_none() {
                s = self.line.turn.wait_timeout(s, pause).ok()?.0;
            }
            s.handed.take()
        };
        handed.filter(|h| h.check().is_ok())
    }
}

impl Lines {
    /// Whether this process holds `vault`'s lease now (by its own count of takes and releases).
    pub(crate) fn holds(&self, vault: &str) -> bool {
        self.held
            .lock()
            .map(|h| h.get(vault).is_some_and(|n| *n > 0))
            .unwrap_or(false)
    }

    fn count(&self, vault: &str, taken: bool) {
        if let Ok(mut h) = self.held.lock() {
            let n = h.entry(vault.to_owned()).or_default();
            *n = match taken {
                true => n.saturating_add(1),
                false => n.saturating_sub(1),
            };
            if *n == 0 {
                h.remove(vault);
            }
        }
    }

    fn line(&self, vault: &str) -> Option<Arc<Line>> {
        Some(
            self.lines
                .lock()
                .ok()?
                .entry(vault.to_owned())
                .or_default()
                .clone(),
        )
    }

    /// Joins `vault`'s line and waits to be first until `deadline` (then `None`, out of line).
    fn first(&self, vault: &str, deadline: Instant) -> Option<Place> {
        let line = self.line(vault)?;
        let me = self.next.fetch_add(1, Ordering::SeqCst);
        let place = Place { line, me };
        let mut s = place.line.state.lock().ok()?;
        s.waiting.push_back(me);
        while s.waiting.front() != Some(&me) {
            let left = deadline.checked_duration_since(Instant::now())?;
            s = place.line.turn.wait_timeout(s, left).ok()?.0;
        }
        drop(s);
        Some(place)
    }
}

/// A held lease of one vault; renewed by a task of the store's runtime until dropped, then
/// released (the next take does not wait for its expiry).
pub struct VaultLock {
    store: Arc<PgState>,
    fence: Fence,
    held: Arc<Held>,
    renewer: Option<tokio::task::AbortHandle>,
    /// How many writes this take of the lease served, this one included.
    turn: u32,
}

/// What the renewer tells the hold.
struct Held {
    /// The database said the lease is not this epoch's any more (or expired).
    lost: AtomicBool,
    /// Until when this machine may trust the hold: the last granted expiry, counted from before
    /// its request was sent, less [`MARGIN`].
    until: Mutex<Instant>,
}

impl Held {
    fn granted(&self, sent: Instant, seconds: f64) {
        let left = Duration::try_from_secs_f64(seconds.max(0.0)).unwrap_or_default();
        if let Ok(mut until) = self.until.lock() {
            *until = (sent + left).checked_sub(MARGIN).unwrap_or(sent);
        }
    }
}

impl VaultHold for VaultLock {
    fn fence(&self) -> &Fence {
        &self.fence
    }

    fn check(&self) -> Result<(), GatewayError> {
        let until = self
            .held
            .until
            .lock()
            .map(|u| *u)
            .unwrap_or_else(|_| Instant::now());
        if self.held.lost.load(Ordering::SeqCst) || Instant::now() >= until {
            return Err(lapsed(&self.fence.vault));
        }
        Ok(())
    }
}

/// `VAULT_BUSY`: the hold of `vault` lapsed or was taken over.
fn lapsed(vault: &str) -> GatewayError {
    GatewayError::VaultBusy(format!(
        "this gateway's lease on vault '{vault}' ran out before the write was recorded (the team \
         database did not answer its renewal in time, or another gateway took it over); nothing \
         more is written under it: retry with the same idempotencyKey"
    ))
}

impl Drop for VaultLock {
    /// Releases the lease, waiting at most [`RENEW_DEADLINE`]: a call failing because the
    /// database stalls must not wait out two more deadlines here (the lease expires by itself).
    fn drop(&mut self) {
        if self.turn < LOCAL_TURN && self.check().is_ok() && self.renewer.is_some() {
            let line = self.store.lines.line(&self.fence.vault);
            if let Some(line) = line
                && let Ok(mut s) = line.state.lock()
                && !s.waiting.is_empty()
                && s.handed.is_none()
            {
                s.handed = Some(VaultLock {
                    store: self.store.clone(),
                    fence: self.fence.clone(),
                    held: self.held.clone(),
                    renewer: self.renewer.take(),
                    turn: self.turn + 1,
                });
                drop(s);
                line.turn.notify_all();
                return;
            }
        }
        if let Some(r) = self.renewer.take() {
            r.abort();
        }
        self.store.lines.count(&self.fence.vault, false);
        let Ok(rt) = self.store.runtime() else { return };
        let (pool, fence) = (self.store.pool.clone(), self.fence.clone());
        let release = rt.spawn(async move {
            let once = async {
                let client = pool.get().await.ok()?;
                client
                    .execute(
                        "UPDATE vaultgate.leases SET expires_at = now()
                         WHERE vault = $1 AND epoch = $2 AND expires_at > now()",
                        &[&fence.vault, &fence.epoch],
                    )
                    .await
                    .ok()
            };
            tokio::time::timeout(RENEW_DEADLINE, once).await.ok().flatten()
        });
        let unused = AtomicBool::new(false);
        if !matches!(within(&unused, release), Ok(Ok(Some(_)))) {
            // Not released: it expires on its own.
            tracing::warn!(vault = %self.fence.vault, "a vault's lease was not released; it runs out by itself");
        }
    }
}

/// Fails the transaction's write unless `fence` is the lease's unexpired epoch; the row is
/// locked (shared) until the transaction ends, so no takeover commits in between.
///
/// SECURITY(T-TEAM9): a deposed holder records nothing.
pub(crate) async fn fence_in(c: &tokio_postgres::Transaction<'_>, fence: &Fence) -> Result<(), GatewayError> {
    let held = c
        .query_opt(
            "SELECT 1 FROM vaultgate.leases WHERE vault = $1 AND epoch = $2
             AND expires_at > clock_timestamp() FOR SHARE",
            &[&fence.vault, &fence.epoch],
        )
        .await
        .map_err(db)?;
    match held {
        Some(_) => Ok(()),
        None => Err(lapsed(&fence.vault)),
    }
}

impl PgState {
    /// One statement made under `fence`, in a transaction of its own: the rows it changed.
    pub(crate) fn fenced_execute(
        &self,
        fence: &Fence,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<u64, GatewayError> {
        let mut client = self.client()?;
        within(&self.stale, async {
            let tx = client.transaction().await.map_err(db)?;
            fence_in(&tx, fence).await?;
            let n = tx.execute(sql, params).await.map_err(db)?;
            tx.commit().await.map_err(db)?;
            Ok(n)
        })?
    }

    /// Takes `vault`'s lease for `holder` (a gateway's name) once it is free or expired and no
    /// waiter queued before this one is still waiting, waiting at most `wait` (then `VAULT_BUSY`),
    /// and starts renewing it.
    pub fn lock_vault(
        self: &Arc<Self>,
        vault: &str,
        holder: &str,
        wait: Duration,
    ) -> Result<VaultLock, GatewayError> {
        // A free lease is taken only by the live ticket queued first (`$3`; none: when no live
        // ticket waits); the row of a held one is not even locked by the ask.
        let take = format!(
            "WITH taken AS (
                 INSERT INTO vaultgate.leases AS l (vault, epoch, holder, since, expires_at)
                 SELECT $1, 1, $2, now(), now() + make_interval(secs => {SECONDS})
                 WHERE NOT EXISTS (SELECT 1 FROM vaultgate.leases
                                   WHERE vault = $1 AND expires_at > now())
                   AND NOT EXISTS (SELECT 1 FROM vaultgate.lease_queue q
                                   WHERE q.vault = $1 AND q.seen_at > now() - interval '{TICKET_LIVES}'
                                     AND q.queued_at < COALESCE((SELECT queued_at FROM vaultgate.lease_queue
                                                                 WHERE ticket = $3), 'infinity'))
                 ON CONFLICT (vault) DO UPDATE SET epoch = l.epoch + 1, holder = EXCLUDED.holder,
                     since = EXCLUDED.since, expires_at = EXCLUDED.expires_at
                 WHERE l.expires_at <= now()
                 RETURNING l.epoch, extract(epoch FROM l.expires_at - now())::float8
             ), served AS (
                 DELETE FROM vaultgate.lease_queue WHERE ticket = $3 AND EXISTS (SELECT 1 FROM taken)
             )
             SELECT * FROM taken"
        );
        let deadline = Instant::now() + wait;
        let busy = || {
            GatewayError::VaultBusy(format!(
                "another gateway of the team is applying to vault '{vault}'; retry with the same idempotencyKey"
            ))
        };
        let Some(place) = self.lines.first(vault, deadline) else {
            return Err(busy());
        };
        let mut ticket = Ticket {
            store: self,
            id: None,
            refreshed: Instant::now(),
        };
        let mut pause = Duration::from_millis(2);
        loop {
            if let Some(hold) = place.handed(Duration::ZERO) {
                return Ok(hold);
            }
            let client = self.client()?;
            let sent = Instant::now();
            let id = ticket.id.as_deref();
            let taken = within(&self.stale, client.query_opt(&take, &[&vault, &holder, &id]))?.map_err(db)?;
            drop(client);
            if let Some(row) = taken {
                // The ticket left the line with the take.
                ticket.id = None;
                let held = Arc::new(Held {
                    lost: AtomicBool::new(false),
                    until: Mutex::new(sent),
                });
                held.granted(sent, row.get(1));
                let fence = Fence {
                    vault: vault.to_owned(),
                    epoch: row.get(0),
                };
                let renewer = self.renew(&fence, held.clone())?;
                self.lines.count(vault, true);
                return Ok(VaultLock {
                    store: self.clone(),
                    fence,
                    held,
                    renewer: Some(renewer),
                    turn: 1,
                });
            }
            if Instant::now() + pause > deadline {
                return Err(busy());
            }
            ticket.keep(vault, holder)?;
            if let Some(hold) = place.handed(pause) {
                return Ok(hold);
            }
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }

    /// Renews the lease of `fence` every second until aborted or told it is lost.
    fn renew(&self, fence: &Fence, held: Arc<Held>) -> Result<tokio::task::AbortHandle, GatewayError> {
        let pool = self.pool.clone();
        let fence = fence.clone();
        let renew = format!(
            "UPDATE vaultgate.leases SET expires_at = now() + make_interval(secs => {SECONDS})
             WHERE vault = $1 AND epoch = $2 AND expires_at > now()
             RETURNING extract(epoch FROM expires_at - now())::float8"
        );
        let task = self.runtime()?.spawn(async move {
            loop {
                tokio::time::sleep(RENEW_EVERY).await;
                let sent = Instant::now();
                let once = async {
                    let client = pool.get().await.ok()?;
                    client.query_opt(&renew, &[&fence.vault, &fence.epoch]).await.ok()
                };
                match tokio::time::timeout(RENEW_DEADLINE, once).await {
                    Ok(Some(Some(row))) => held.granted(sent, row.get(0)),
                    Ok(Some(None)) => {
                        tracing::warn!(vault = %fence.vault, epoch = fence.epoch, "this gateway's lease was taken over");
                        held.lost.store(true, Ordering::SeqCst);
                        return;
                    }
                    // Unanswered: not counted; the hold lapses by itself if none answers.
                    _ => tracing::debug!(vault = %fence.vault, "a lease renewal had no answer"),
                }
            }
        });
        Ok(task.abort_handle())
    }

    /// Each vault's lease as the database holds it, by vault.
    pub fn leases(&self) -> Result<Vec<Lease>, GatewayError> {
        let client = self.client()?;
        let rows = within(
            &self.stale,
            client.query(
                &format!(
                    "SELECT vault, holder, epoch,
                            to_char(since AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),
                            expires_at > now(),
                            ARRAY(SELECT q.holder FROM vaultgate.lease_queue q
                                  WHERE q.vault = l.vault AND q.seen_at > now() - interval '{TICKET_LIVES}'
                                  ORDER BY q.queued_at)
                     FROM vaultgate.leases l ORDER BY vault"
                ),
                &[],
            ),
        )?
        .map_err(db)?;
        Ok(rows
            .iter()
            .map(|r| Lease {
                vault: r.get(0),
                holder: r.get(1),
                epoch: r.get(2),
                since: r.get(3),
                held: r.get(4),
                waiting: r.get(5),
            })
            .collect())
    }
}

/// This gateway's place in the team's line for a vault's lease, while its first waiter waits:
/// queued at the first ask that found the lease taken, refreshed every [`TICKET_REFRESH`], and
/// taken out of the line when the wait ends without the lease.
struct Ticket<'s> {
    store: &'s PgState,
    id: Option<String>,
    refreshed: Instant,
}

impl Ticket<'_> {
    /// Queues the ticket (once), or refreshes it when due.
    fn keep(&mut self, vault: &str, holder: &str) -> Result<(), GatewayError> {
        let client = self.store.client()?;
        match &self.id {
            None => {
                let id = uuid::Uuid::new_v4().simple().to_string();
                // Tickets of gateways that died waiting long ago are cleared on the way.
                let queue = "WITH gone AS (DELETE FROM vaultgate.lease_queue
                                           WHERE seen_at < now() - interval '1 minute')
                             INSERT INTO vaultgate.lease_queue (ticket, vault, holder) VALUES ($1, $2, $3)";
                within(&self.store.stale, client.execute(queue, &[&id, &vault, &holder]))?.map_err(db)?;
                self.id = Some(id);
            }
            Some(id) if self.refreshed.elapsed() >= TICKET_REFRESH => {
                let refresh = "UPDATE vaultgate.lease_queue SET seen_at = now() WHERE ticket = $1";
                within(&self.store.stale, client.execute(refresh, &[id]))?.map_err(db)?;
            }
            Some(_) => return Ok(()),
        }
        self.refreshed = Instant::now();
        Ok(())
    }
}

impl Drop for Ticket<'_> {
    /// A wait that ended without the lease leaves the line (else the ticket stops counting
    /// after [`TICKET_LIVES`]), waiting at most [`RENEW_DEADLINE`]: a wait that failed because
    /// the database stalls must not wait out its deadlines again here.
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let Ok(rt) = self.store.runtime() else { return };
        let pool = self.store.pool.clone();
        let leave = rt.spawn(async move {
            let once = async {
                let client = pool.get().await.ok()?;
                let leave = "DELETE FROM vaultgate.lease_queue WHERE ticket = $1";
                client.execute(leave, &[&id]).await.ok()
            };
            tokio::time::timeout(RENEW_DEADLINE, once).await.ok().flatten()
        });
        let unused = AtomicBool::new(false);
        if !matches!(within(&unused, leave), Ok(Ok(Some(_)))) {
            tracing::debug!("a lease ticket was left; it stops counting by itself");
        }
    }
}

/// A vault's lease as `team status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub vault: String,
    /// The gateway that took it last.
    pub holder: String,
    pub epoch: i64,
    /// When it was taken (RFC 3339, UTC).
    pub since: String,
    /// Unexpired and not released: a write is under way.
    pub held: bool,
    /// The gateways waiting for it, first in line first.
    pub waiting: Vec<String>,
}
