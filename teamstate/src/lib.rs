//! The team's state in PostgreSQL: the write transaction's [`StateStore`] over one database that
//! every gateway of a team shares (the schema `vaultgate`, versioned migrations). An apply, an
//! undo or redo and a challenge each commit through a conditional UPDATE whose row count decides
//! the one winner, inside one transaction (the server's default isolation, READ COMMITTED); a new
//! history entry's `seq` assumes one writer per vault (the vault's lease; two at once would
//! meet the unique index and fail, never fork the history).
//!
//! It must never decide policy (the engine does), hold a token or a password in a log, leave a
//! transaction open when a part fails, or answer a call it could not record: an unreachable
//! database is `AUDIT_UNAVAILABLE`, and the connection is opened again at the first call after. As
//! a `StateStore` it is not wired yet: the transaction always registers a change row (its git
//! commit), which this store refuses — a team vault's changes are its remote's commits — so it
//! cannot commit today's writes yet. [`TeamSession`] (session.rs) is what a team gateway uses
//! today: the engine's `TeamState` over the credentials and the chain below.
//! The team's audit chain ([`PgState::append_audit`], chain.rs) is the second piece: its head is
//! `audit_chain_head`; `audit_head` is what [`StateTx::append_audit`] registers until the
//! transaction seals its record in that chain. The team's credentials (credentials.rs) are the
//! third: read fresh by every request, each change committed with its generation and its record
//! and announced to [`Listener`]s. Proposals made through any gateway, with their content and the
//! job applying each (proposals.rs), are the fourth; each vault's lease (lease.rs), the right to
//! write its remote with the epoch that fences every write made under it, the fifth.
#![forbid(unsafe_code)]

mod calls;
mod chain;
mod challenges;
mod credentials;
mod lease;
mod listen;
mod migrations;
mod proposals;
mod session;
mod team;
mod vaults;

pub use calls::CALLS_CHANNEL;
pub use chain::{ChainWriter, MAX_BATCH, valid_gateway_name};
pub use credentials::{CREDENTIALS_CHANNEL, TeamCredential};
pub use lease::{Lease, VaultLock};
pub use listen::{Heard, Listener, QUEUE};
pub use proposals::JobCounts;
pub use session::TeamSession;
pub use team::{GatewaySeen, Role, TeamStatus};
pub use vaults::VAULTS_CHANNEL;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake};

use engine::error::GatewayError;
use engine::storage::{StateStore, StateTx};
use serde_json::Value;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};

use migrations::MIGRATIONS;

/// The team's state: a pool of connections (each call takes one, its statements prepared once per
/// connection), driven by this store's own runtime; a connection that was lost is replaced at the
/// next call.
pub struct PgState {
    /// Runs the connections' I/O; callers (blocking threads) wait on their queries' answers.
    /// Always `Some` until dropped (taken in `Drop`, which must not block inside a runtime).
    rt: Option<tokio::runtime::Runtime>,
    pool: deadpool_postgres::Pool,
    /// The chain's head as this store's last append left it (chain.rs): the next append is
    /// sealed after it and sent as one statement, right while no one else appended.
    chain_guess: Mutex<Option<(u64, String)>>,
    /// Set when a call passed [`DB_DEADLINE`]: a connection may be stuck mid-answer, so the next
    /// call drops every idle one and opens another.
    stale: AtomicBool,
    /// This process's waiters for each vault's lease, in line (lease.rs).
    lines: lease::Lines,
}

/// How long one exchange with the database may take (a statement, a commit, a connection)
/// before the database counts as unreachable: a server that accepts and then stalls must not
/// hold a call (docs/contract.md#team-mode, fail closed).
pub(crate) const DB_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// A connection the pool could not give, as the engine's error.
fn pool_error(e: deadpool_postgres::PoolError) -> GatewayError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => db(e),
        deadpool_postgres::PoolError::Timeout(_) => {
            tracing::warn!("the team database did not answer a connection in time");
            GatewayError::AuditUnavailable
        }
        other => GatewayError::Internal(format!("the team database's pool: {other}")),
    }
}

/// Connections one store opens at most (each call holds one while it runs).
const POOL_SIZE: usize = 4;

/// How long opening a connection may take before the database counts as unreachable.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether `e` says the database cannot be reached (rather than that a statement failed).
fn unreachable(e: &tokio_postgres::Error) -> bool {
    let io = std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>());
    // Class 08: connection exception; 57P: the server shutting down or restarting; 53: out of
    // connections or resources; 57014: a query cancelled (a statement timeout). Each passes.
    let class = e.code().is_some_and(|c| {
        let c = c.code();
        c.starts_with("08") || c.starts_with("57P") || c.starts_with("53") || c == "57014"
    });
    e.is_closed() || io || class
}

/// A store's failure, as the engine's error. An unreachable database fails closed:
/// `AUDIT_UNAVAILABLE`, retryable, nothing changed (docs/contract.md#team-mode). A write the
/// gateway's database role may not make (a reviewer gateway changing a credential) is
/// `CAPABILITY_DENIED`: the database enforces the roles, not the gateway.
fn db(e: tokio_postgres::Error) -> GatewayError {
    // SECURITY(T-TEAM5): no call goes on unaudited.
    if unreachable(&e) {
        tracing::warn!(error = %e, "the team database cannot be reached");
        return GatewayError::AuditUnavailable;
    }
    if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) {
        return GatewayError::CapabilityDenied(
            "this gateway's database role may not make this change: a reviewer gateway may not \
             issue, change or revoke credentials, add or remove vaults or change team settings; \
             ask an admin"
                .into(),
        );
    }
    // The server's own words ("db error" alone says nothing); never a password: libpq URLs are
    // not echoed by the server.
    match e.as_db_error() {
        Some(d) => GatewayError::Internal(format!(
            "the team database: {} ({})",
            d.message(),
            d.code().code()
        )),
        None => GatewayError::Internal(format!("the team database: {e}")),
    }
}

impl Drop for PgState {
    /// Without waiting for the connection's task: a store dropped inside an async task (or a
    /// failed connect there) must not block or panic that runtime.
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// A new connection, made on `rt` (connecting needs its reactor) while this thread waits, within
/// [`DB_DEADLINE`] (the handshake too): the caller runs the connection's task.
pub(crate) fn connect(
    rt: &tokio::runtime::Runtime,
    config: &tokio_postgres::Config,
) -> Result<
    (
        Client,
        tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>,
    ),
    GatewayError,
> {
    let config = config.clone();
    let unused = AtomicBool::new(false);
    within(
        &unused,
        rt.spawn(async move { tokio::time::timeout(DB_DEADLINE, config.connect(NoTls)).await }),
    )?
    .map_err(|e| GatewayError::Internal(format!("connecting to the team database: {e}")))?
    .map_err(|_| {
        tracing::warn!("the team database did not answer a connection in time");
        GatewayError::AuditUnavailable
    })?
    .map_err(db)
}

/// Waits for `f` on this thread, at most [`DB_DEADLINE`]: the client's queries need no runtime of
/// their own (their connection runs on the store's), so a blocking thread of any runtime may wait
/// here. Past the deadline the call is `AUDIT_UNAVAILABLE` and `stale` marks the connection for
/// replacement (its answer may still be on the way, and the next request would queue behind it).
fn within<F: Future>(stale: &AtomicBool, f: F) -> Result<F::Output, GatewayError> {
    let deadline = std::time::Instant::now() + DB_DEADLINE;
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Arc::new(Unpark(std::thread::current())).into();
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return Ok(v);
        }
        let now = std::time::Instant::now();
        if now >= deadline {
            stale.store(true, Ordering::SeqCst);
            tracing::warn!("the team database did not answer in time");
            return Err(GatewayError::AuditUnavailable);
        }
        std::thread::park_timeout(deadline - now);
    }
}

/// Parses the team database's URL and refuses a host that is not this machine.
///
/// SECURITY(T-TEAM6): connections are not encrypted (no TLS stack is built in), so any other host
/// would carry credential rows, audit records and a password in the clear: the database is
/// reached on a loopback address or a local socket only, and a remote server through a tunnel
/// (`ssh -L`) to a loopback port.
pub fn check_database_url(url: &str) -> Result<tokio_postgres::Config, GatewayError> {
    let config: tokio_postgres::Config = url.parse().map_err(|_| {
        GatewayError::Config("the team database is a libpq URL: postgres://USER@HOST:PORT/DB".into())
    })?;
    if config.get_hosts().is_empty() {
        return Err(GatewayError::Config(
            "the team database URL names no host: postgres://USER@127.0.0.1:5432/DB".into(),
        ));
    }
    for host in config.get_hosts() {
        let local = match host {
            tokio_postgres::config::Host::Tcp(name) => {
                name == "localhost"
                    || name
                        .trim_matches(['[', ']'])
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback())
            }
            tokio_postgres::config::Host::Unix(_) => true,
        };
        if !local {
            return Err(GatewayError::Config(
                "the team database must be on a loopback address (127.0.0.1, ::1, localhost) or \
                 a local socket: vaultgate does not encrypt its database connection. Reach a \
                 remote server through an SSH tunnel (ssh -L 5433:localhost:5432 HOST) and use \
                 postgres://USER@127.0.0.1:5433/DB"
                    .into(),
            ));
        }
    }
    Ok(config)
}

impl PgState {
    /// Connects to `url` (a libpq URL, [`check_database_url`]) and brings the schema `vaultgate`
    /// up to date.
    pub fn connect(url: &str) -> Result<PgState, GatewayError> {
        let mut config = check_database_url(url)?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(GatewayError::Io)?;
        let manager = deadpool_postgres::Manager::from_config(
            config.clone(),
            NoTls,
            deadpool_postgres::ManagerConfig {
                // A closed connection is replaced; a stalled one is dropped by `stale`.
                recycling_method: deadpool_postgres::RecyclingMethod::Fast,
            },
        );
        let pool = deadpool_postgres::Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(DB_DEADLINE))
            .create_timeout(Some(DB_DEADLINE))
            .build()
            .map_err(|e| GatewayError::Internal(format!("the team database's pool: {e}")))?;
        let state = PgState {
            rt: Some(rt),
            pool,
            chain_guess: Mutex::default(),
            stale: AtomicBool::new(false),
            lines: lease::Lines::default(),
        };
        state.migrate()?;
        Ok(state)
    }

    fn runtime(&self) -> Result<&tokio::runtime::Runtime, GatewayError> {
        self.rt
            .as_ref()
            .ok_or_else(|| GatewayError::Internal("the team database's runtime is gone".into()))
    }

    /// After a call passed the deadline: every idle connection is dropped (the one that stalled
    /// is among them, or still in a caller's hands and dropped when it comes back next time).
    fn drop_stale(&self) {
        if self.stale.swap(false, Ordering::SeqCst) {
            self.pool.retain(|_, _| false);
        }
    }

    /// A connection of the pool, opened first if none is idle (after an outage, a new one): a call
    /// after an outage works without a new store.
    fn client(&self) -> Result<deadpool_postgres::Object, GatewayError> {
        let rt = self.runtime()?;
        self.drop_stale();
        // Connecting spawns the connection's task: on this store's runtime.
        let _entered = rt.enter();
        let unused = AtomicBool::new(false);
        within(&unused, self.pool.get())?.map_err(pool_error)
    }

    fn migrate(&self) -> Result<(), GatewayError> {
        let mut client = self.client()?;
        let known = MIGRATIONS.len() as i32;
        // Up to date: nothing to lock or create (a reviewer gateway's role may not create).
        let current = within(
            &self.stale,
            client.query_opt("SELECT n FROM vaultgate.schema_version", &[]),
        )?;
        if let Ok(Some(row)) = current {
            let n: i32 = row.get(0);
            if n > known {
                return Err(GatewayError::Config(format!(
                    "the team database's schema is version {n}, newer than this gateway knows \
                     ({known}): upgrade vaultgate on this machine"
                )));
            }
            if n == known {
                return Ok(());
            }
        }
        within(&self.stale, async {
            let tx = client.transaction().await?;
            // Gateways starting at once on a fresh database: one creates, the others wait.
            tx.execute("SELECT pg_advisory_xact_lock(7365636572746561)", &[]).await?;
            tx.batch_execute(
                "CREATE SCHEMA IF NOT EXISTS vaultgate;
                 CREATE TABLE IF NOT EXISTS vaultgate.schema_version (one boolean PRIMARY KEY CHECK (one), n integer NOT NULL);
                 INSERT INTO vaultgate.schema_version VALUES (true, 0) ON CONFLICT DO NOTHING;
                 LOCK TABLE vaultgate.schema_version IN EXCLUSIVE MODE;",
            )
            .await?;
            let n: i32 = tx
                .query_one("SELECT n FROM vaultgate.schema_version", &[])
                .await?
                .get(0);
            for (i, sql) in MIGRATIONS.iter().enumerate().skip(n.max(0) as usize) {
                tx.batch_execute(sql).await?;
                tx.execute("UPDATE vaultgate.schema_version SET n = $1", &[&(i as i32 + 1)])
                    .await?;
            }
            tx.commit().await
        })?
        .map_err(db)
    }

    /// The schema version in force.
    pub fn schema_version(&self) -> Result<i32, GatewayError> {
        let client = self.client()?;
        within(
            &self.stale,
            client.query_one("SELECT n FROM vaultgate.schema_version", &[]),
        )?
        .map(|r| r.get(0))
        .map_err(db)
    }

    /// Runs `sql` and answers its rows (the team's views and tests).
    pub fn query(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, GatewayError> {
        let client = self.client()?;
        within(&self.stale, client.query(sql, params))?.map_err(db)
    }
}

/// One transaction of the team's database.
struct PgTx<'c> {
    tx: deadpool_postgres::Transaction<'c>,
    stale: &'c AtomicBool,
}

impl StateStore for PgState {
    fn begin_intent(&self, vault: &str, key: &str, plan: &Value, at: &str) -> Result<i64, GatewayError> {
        let client = self.client()?;
        let row = within(
            &self.stale,
            client.query_one(
                "INSERT INTO vaultgate.apply_intents (vault, proposal_id, plan, step, started_at, updated_at)
             VALUES ($1, $2, $3, 'started', $4, $4) RETURNING id",
                &[&vault, &key, plan, &at],
            ),
        )?;
        match row {
            Ok(r) => Ok(r.get(0)),
            Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
                Err(inbox::StateError::IntentExists(key.to_owned()).into())
            }
            Err(e) => Err(db(e)),
        }
    }

    fn transact(
        &self,
        f: &mut dyn FnMut(&dyn StateTx) -> Result<(), GatewayError>,
    ) -> Result<(), GatewayError> {
        let mut client = self.client()?;
        let tx = within(&self.stale, client.transaction())?.map_err(db)?;
        let tx = PgTx {
            tx,
            stale: &self.stale,
        };
        // Dropped on an error: the transaction is rolled back.
        f(&tx)?;
        within(&self.stale, tx.tx.commit())?.map_err(db)
    }

    fn deferring(&self, f: &mut dyn FnMut() -> Result<(), GatewayError>) -> Result<(), GatewayError> {
        // Each commit is durable when it returns (synchronous_commit): nothing to defer.
        f()
    }

    fn sync(&self) -> Result<(), GatewayError> {
        Ok(())
    }
}

impl PgTx<'_> {
    fn query_opt(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Option<tokio_postgres::Row>, GatewayError> {
        within(self.stale, self.tx.query_opt(sql, params))?.map_err(db)
    }

    fn execute(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<u64, GatewayError> {
        within(self.stale, self.tx.execute(sql, params))?.map_err(db)
    }

    /// The vault's revision, moved by one.
    fn bump(&self, vault: &str) -> Result<u64, GatewayError> {
        let row = self.query_opt(
            "INSERT INTO vaultgate.vault_revisions (vault, revision) VALUES ($1, 1)
             ON CONFLICT (vault) DO UPDATE SET revision = vault_revisions.revision + 1
             RETURNING revision",
            &[&vault],
        )?;
        Ok(row.map_or(0, |r| r.get::<_, i64>(0).max(0) as u64))
    }

    /// A key's first answer (ignored when the key is taken), and its job done.
    fn put_key(&self, k: &inbox::IdemKey<'_>, result: &Value, at: &str) -> Result<(), GatewayError> {
        self.execute(
            "INSERT INTO vaultgate.idempotency_keys (credential_id, key, tool, args_hash, result, created_at)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
            &[&k.credential_id, &k.key, &k.tool, &k.args_hash, result, &at],
        )?;
        self.execute(
            "UPDATE vaultgate.jobs SET state = 'done', finished_at = now()
             WHERE principal = $1 AND idem_key = $2 AND state = 'queued'",
            &[&k.credential_id, &k.key],
        )?;
        Ok(())
    }

    /// Appends a `done` entry and clears the redo branch; its seq.
    fn insert_history(&self, vault: &str, e: &inbox::NewHistory<'_>) -> Result<u64, GatewayError> {
        let seq: i64 = self
            .query_opt(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM vaultgate.history WHERE vault = $1",
                &[&vault],
            )?
            .map_or(1, |r| r.get(0));
        self.execute(
            "DELETE FROM vaultgate.history WHERE vault = $1 AND state = 'undone'",
            &[&vault],
        )?;
        self.execute(
            "INSERT INTO vaultgate.history (id, vault, seq, label, kind, created_by, created_at, paths, state, barrier)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'done', $9)",
            &[&e.id, &vault, &seq, &e.label, &e.kind, &e.created_by, &e.created_at, e.paths, &e.barrier],
        )?;
        Ok(seq.max(0) as u64)
    }
}

impl StateTx for PgTx<'_> {
    fn finish_apply(&self, f: &inbox::FinishApply<'_>) -> Result<Option<inbox::ApplyCommit>, GatewayError> {
        let inbox::FinishApply {
            intent_id,
            proposal_id,
            by,
            at,
            result,
            history,
            idempotency,
        } = *f;
        let intent = self.query_opt(
            "SELECT vault, proposal_id FROM vaultgate.apply_intents WHERE id = $1",
            &[&intent_id],
        )?;
        let Some(intent) = intent else {
            return Err(inbox::StateError::IntentNotFound(intent_id).into());
        };
        let (vault, intent_proposal): (String, String) = (intent.get(0), intent.get(1));
        let mismatch = || inbox::StateError::IntentMismatch {
            intent_id,
            proposal_id: proposal_id.to_owned(),
        };
        if intent_proposal != proposal_id {
            return Err(mismatch().into());
        }
        let proposal_vault: Option<String> = self
            .query_opt(
                "SELECT vault FROM vaultgate.proposals WHERE id = $1",
                &[&proposal_id],
            )?
            .map(|r| r.get(0));
        match proposal_vault {
            None => return Err(inbox::StateError::ProposalNotFound(proposal_id.to_owned()).into()),
            Some(v) if v != vault => return Err(mismatch().into()),
            Some(_) => {}
        }
        // The one winner: nothing is written before this conditional update.
        let won = self.execute(
            "UPDATE vaultgate.proposals SET status = 'applied', decided_at = $2, decided_by = $3, result = $4
             WHERE id = $1 AND status = 'pending'",
            &[&proposal_id, &at, &by, result],
        )?;
        if won != 1 {
            return Ok(None);
        }
        let revision = self.bump(&vault)?;
        let history_seq = match history {
            Some(e) => Some(self.insert_history(&vault, e)?),
            None => None,
        };
        if let Some(k) = idempotency {
            self.put_key(k, result, at)?;
        }
        self.execute("DELETE FROM vaultgate.apply_intents WHERE id = $1", &[&intent_id])?;
        Ok(Some(inbox::ApplyCommit {
            revision,
            vault,
            history_seq,
        }))
    }

    fn finish_transition(
        &self,
        t: &inbox::HistoryTransition<'_>,
    ) -> Result<Option<inbox::TransitionCommit>, GatewayError> {
        let intent_vault: Option<String> = self
            .query_opt(
                "SELECT vault FROM vaultgate.apply_intents WHERE id = $1",
                &[&t.intent_id],
            )?
            .map(|r| r.get(0));
        if intent_vault.as_deref() != Some(t.vault) {
            return Err(inbox::StateError::IntentNotFound(t.intent_id).into());
        }
        let sql = match t.transition {
            inbox::Transition::Undo => {
                "SELECT id, barrier FROM vaultgate.history WHERE vault = $1 AND state = 'done' ORDER BY seq DESC LIMIT 1"
            }
            inbox::Transition::Redo => {
                "SELECT id, barrier FROM vaultgate.history WHERE vault = $1 AND state = 'undone' ORDER BY seq ASC LIMIT 1"
            }
        };
        let top: Option<(String, bool)> = self.query_opt(sql, &[&t.vault])?.map(|r| (r.get(0), r.get(1)));
        // Only the top moves, never a barrier; nothing is written before this check.
        if !matches!(top, Some((id, barrier)) if id == t.entry_id && !barrier) {
            return Ok(None);
        }
        let (from, to) = match t.transition {
            inbox::Transition::Undo => ("done", "undone"),
            inbox::Transition::Redo => ("undone", "done"),
        };
        // The one winner of two transitions of one entry at once.
        let won = self.execute(
            "UPDATE vaultgate.history SET state = $4 WHERE vault = $1 AND id = $2 AND state = $3",
            &[&t.vault, &t.entry_id, &from, &to],
        )?;
        if won != 1 {
            return Ok(None);
        }
        let revision = self.bump(t.vault)?;
        if let Some(k) = &t.idempotency {
            self.put_key(k, t.result, t.at)?;
        }
        self.execute(
            "DELETE FROM vaultgate.apply_intents WHERE id = $1",
            &[&t.intent_id],
        )?;
        Ok(Some(inbox::TransitionCommit { revision }))
    }

    fn finish_challenge(
        &self,
        id: &str,
        result: &Value,
        changed: bool,
    ) -> Result<Option<(String, u64)>, GatewayError> {
        let vault: Option<String> = self
            .query_opt(
                "UPDATE vaultgate.challenges SET result = $2, intent = NULL
                 WHERE id = $1 AND consumed_at IS NOT NULL AND intent IS NOT NULL
                 RETURNING vault",
                &[&id, result],
            )?
            .map(|r| r.get(0));
        let Some(vault) = vault else {
            return Ok(None);
        };
        let revision = if changed {
            self.bump(&vault)?
        } else {
            self.query_opt(
                "SELECT revision FROM vaultgate.vault_revisions WHERE vault = $1",
                &[&vault],
            )?
            .map_or(0, |r| r.get::<_, i64>(0).max(0) as u64)
        };
        Ok(Some((vault, revision)))
    }

    fn add_history(&self, vault: &str, entry: &inbox::NewHistory<'_>) -> Result<u64, GatewayError> {
        // An entry already there answers as is: a failed INSERT would abort the transaction.
        let existing = self.query_opt(
            "SELECT seq FROM vaultgate.history WHERE vault = $1 AND id = $2",
            &[&vault, &entry.id],
        )?;
        match existing {
            Some(r) => Ok(r.get::<_, i64>(0).max(0) as u64),
            None => self.insert_history(vault, entry),
        }
    }

    fn register_head(&self, vault: &str, after: &inbox::DiskAfter<'_>) -> Result<(), GatewayError> {
        if let Some(fp) = after.fingerprint {
            self.execute(
                "INSERT INTO vaultgate.vault_fingerprints (vault, fingerprint) VALUES ($1, $2)
                 ON CONFLICT (vault) DO UPDATE SET fingerprint = EXCLUDED.fingerprint",
                &[&vault, &fp],
            )?;
        }
        for (path, hash) in after.writes {
            self.execute(
                "INSERT INTO vaultgate.vault_writes (vault, path, hash) VALUES ($1, $2, $3)
                 ON CONFLICT (vault, path) DO UPDATE SET hash = EXCLUDED.hash",
                &[&vault, path, hash],
            )?;
        }
        if after.change.is_some() {
            // The change's row and its git commit are the remote's in team mode: not kept here.
            return Err(GatewayError::Internal(
                "the team database keeps no local change rows (a team vault's changes are its remote's commits)".into(),
            ));
        }
        if let Some(head) = after.head {
            self.append_audit(head)?;
        }
        Ok(())
    }

    fn append_audit(&self, head: &inbox::AuditHead) -> Result<(), GatewayError> {
        self.execute(
            "INSERT INTO vaultgate.audit_head (one, seq, hash) VALUES (true, $1, $2)
             ON CONFLICT (one) DO UPDATE SET seq = EXCLUDED.seq, hash = EXCLUDED.hash
             WHERE EXCLUDED.seq > audit_head.seq",
            &[&(head.seq as i64), &head.hash],
        )?;
        Ok(())
    }
}
