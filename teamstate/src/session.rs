//! One gateway's seat in its team: the engine's [`TeamState`] over the team's database, with the
//! gateway's own [`ChainWriter`] (docs/contract.md#team-mode). Opened once per process.

use std::sync::{Arc, Condvar, Mutex};

use engine::Tier;
use engine::error::GatewayError;
use engine::storage::team::{Fence, Handed, HandedCall, VaultHold};
use engine::storage::{NewTeamProposal, TeamChallenge, TeamDone, TeamJob, TeamProposal, TeamState};
use inbox::{Credential, CredentialId, NewCredential};

use crate::{ChainWriter, PgState};

/// A gateway of a team, as the engine uses it. Its seat (the connections, the chain's writer,
/// the team's id) is taken at the first call that finds the database: a gateway started while
/// the database is away serves once it is back, refusing every call meanwhile.
pub struct TeamSession {
    url: String,
    gateway: String,
    /// The key check of this home's secret: a request is served only while it is the team's.
    key_check: String,
    seat: Mutex<Seating>,
    generation: SharedRead,
}

#[derive(Default)]
struct Seating {
    seat: Option<Arc<Seat>>,
    /// When the last attempt failed: calls within [`RETRY`] of it fail at once instead of each
    /// waiting for a connection of its own to time out.
    failed_at: Option<std::time::Instant>,
}

/// The generation a read answers when this home's secret is not the team's any more (a real
/// generation is never negative).
const ROTATED: i64 = -1;

/// How long after a failed attempt to connect calls are refused without a new attempt.
const RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// What a connected session holds.
struct Seat {
    store: Arc<PgState>,
    writer: ChainWriter,
    team_id: String,
}

/// Reads of the credentials' generation that requests arriving together share: a request may
/// take the answer of a read that started after it arrived (that read is as fresh as its own),
/// never of one that started before. Under load one read answers many requests.
#[derive(Default)]
struct SharedRead {
    state: Mutex<Reads>,
    done: Condvar,
}

#[derive(Default)]
struct Reads {
    /// Reads started so far: a read's ticket is this count when it starts.
    started: u64,
    in_flight: bool,
    /// The newest finished read: its ticket and answer (`None`: it failed).
    last: Option<(u64, Option<i64>)>,
}

impl SharedRead {
    fn read(&self, fresh: impl Fn() -> Result<i64, GatewayError>) -> Result<i64, GatewayError> {
        let lock = || {
            self.state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        let mut st = lock();
        let arrival = st.started;
        loop {
            if let Some((ticket, answer)) = st.last
                && ticket >= arrival
            {
                return answer.ok_or(GatewayError::AuditUnavailable);
            }
            if st.in_flight {
                st = self
                    .done
                    .wait(st)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                continue;
            }
            let ticket = st.started;
            st.started += 1;
            st.in_flight = true;
            drop(st);
            let answer = fresh();
            st = lock();
            st.in_flight = false;
            st.last = Some((ticket, answer.as_ref().ok().copied()));
            self.done.notify_all();
            return answer;
        }
    }
}

impl TeamSession {
    /// The session of `gateway` in the team at `url`. A database that cannot be reached now
    /// leaves the session unseated (every call `AUDIT_UNAVAILABLE` until it is back); one that
    /// answers but holds no team, or no gateway of that name, is refused.
    pub fn open(url: &str, gateway: &str, secret: &[u8]) -> Result<TeamSession, GatewayError> {
        crate::check_database_url(url)?;
        let session = TeamSession {
            url: url.to_owned(),
            gateway: gateway.to_owned(),
            key_check: crate::team::key_check(secret),
            seat: Mutex::default(),
            generation: SharedRead::default(),
        };
        match session.seat() {
            Ok(_) => {}
            Err(GatewayError::AuditUnavailable) => {
                tracing::warn!("the team database cannot be reached; calls are refused until it answers");
            }
            Err(e) => return Err(e),
        }
        Ok(session)
    }

    fn seat(&self) -> Result<Arc<Seat>, GatewayError> {
        let mut seating = self
            .seat
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(seat) = &seating.seat {
            return Ok(seat.clone());
        }
        if seating.failed_at.is_some_and(|at| at.elapsed() < RETRY) {
            return Err(GatewayError::AuditUnavailable);
        }
        match Seat::connect(&self.url, &self.gateway) {
            Ok(seat) => {
                let seat = Arc::new(seat);
                seating.seat = Some(seat.clone());
                seating.failed_at = None;
                Ok(seat)
            }
            Err(e) => {
                seating.failed_at = Some(std::time::Instant::now());
                Err(e)
            }
        }
    }
}

impl Seat {
    fn connect(url: &str, gateway: &str) -> Result<Seat, GatewayError> {
        let store = Arc::new(PgState::connect(url)?);
        let status = store.team_status()?.ok_or_else(|| {
            GatewayError::Config(
                "the team database holds no team: run `vaultgate team init` or `team join` again".into(),
            )
        })?;
        if !store.gateway_known(gateway)? {
            return Err(GatewayError::Config(format!(
                "the team has no gateway named '{gateway}': it was removed, or this home joined \
                 another database; ask an admin"
            )));
        }
        store.gateway_seen(gateway, env!("CARGO_PKG_VERSION"))?;
        // The chain's appends on a connection of their own: a batch's commit (its WAL flush)
        // never holds up the credential reads every request makes.
        let writer = ChainWriter::start(Arc::new(PgState::connect(url)?), gateway)?;
        Ok(Seat {
            store,
            writer,
            team_id: status.team_id,
        })
    }
}

impl TeamState for TeamSession {
    fn team_id(&self) -> Result<String, GatewayError> {
        Ok(self.seat()?.team_id.clone())
    }

    fn gateway(&self) -> &str {
        &self.gateway
    }

    fn credential_generation(&self) -> Result<i64, GatewayError> {
        // SECURITY(T-TEAM4): read after the request arrived, shared with those that arrived
        // with it.
        // SECURITY(T-TEAM3): a secret the team rotated away serves nothing: not a token it
        // signed, not a request, until this home imports the new one.
        let generation = self.generation.read(|| {
            let (n, check) = self.seat()?.store.credential_generation_and_key()?;
            Ok(if check.as_deref() == Some(self.key_check.as_str()) {
                n
            } else {
                ROTATED
            })
        })?;
        if generation == ROTATED {
            return Err(GatewayError::Unauthorized(
                "this gateway's team secret is no longer the team's (an admin ran `vaultgate team \
                 secret rotate`): its operator runs `vaultgate team secret import --secret-file F` \
                 with the new secret",
            ));
        }
        Ok(generation)
    }

    fn credential(&self, id: &str) -> Result<Option<Credential>, GatewayError> {
        Ok(self.seat()?.store.credential(id)?.map(|t| t.with_hashed_jti()))
    }

    fn credentials(&self) -> Result<Vec<Credential>, GatewayError> {
        self.seat()?.store.list_credentials()
    }

    fn issue_credential(
        &self,
        actor: &audit::Actor,
        id: CredentialId,
        new: NewCredential,
    ) -> Result<Credential, GatewayError> {
        self.seat()?
            .store
            .issue_credential_as(&self.gateway, actor, id, new)
    }

    fn revoke_credential(&self, actor: &audit::Actor, id: &str, now: i64) -> Result<(), GatewayError> {
        self.seat()?
            .store
            .revoke_credential(&self.gateway, actor, id, now)
    }

    fn retire_credential(&self, actor: &audit::Actor, id: &str, now: i64) -> Result<(), GatewayError> {
        self.seat()?
            .store
            .retire_credential(&self.gateway, actor, id, now)
    }

    fn set_credential_tier(&self, actor: &audit::Actor, id: &str, tier: Tier) -> Result<(), GatewayError> {
        self.seat()?
            .store
            .set_credential_tier(&self.gateway, actor, id, tier)
    }

    fn append_audit(&self, entry: audit::Entry) -> Result<audit::AuditRecord, GatewayError> {
        self.seat()?.writer.append(entry)
    }

    fn heartbeat(&self) -> Result<(), GatewayError> {
        self.seat()?
            .store
            .gateway_seen(&self.gateway, env!("CARGO_PKG_VERSION"))
    }

    fn vaults(&self) -> Result<Vec<engine::remote::TeamVault>, GatewayError> {
        self.seat()?.store.team_vaults()
    }

    fn add_vault(&self, actor: &audit::Actor, vault: &engine::remote::TeamVault) -> Result<(), GatewayError> {
        self.seat()?.store.add_team_vault(&self.gateway, actor, vault)
    }

    fn remove_vault(&self, actor: &audit::Actor, id: &str) -> Result<(), GatewayError> {
        self.seat()?.store.remove_team_vault(&self.gateway, actor, id)
    }

    fn vault_head(&self, vault: &str) -> Result<(Option<String>, Option<String>), GatewayError> {
        self.seat()?.store.vault_head(vault)
    }

    fn register_head(&self, vault: &str, expected: Option<&str>, head: &str) -> Result<(), GatewayError> {
        self.seat()?.store.register_head(vault, expected, head)
    }

    fn mark_rewritten(
        &self,
        vault: &str,
        registered: Option<&str>,
        seen: &str,
    ) -> Result<bool, GatewayError> {
        let mut entry = audit::Entry::new(
            "vault.history_rewritten",
            audit::Actor::Cli {
                user: format!("gateway:{}", self.gateway),
            },
            audit::Outcome::Denied,
        );
        entry.vault = Some(vault.to_owned());
        entry.target = Some(seen.to_owned());
        self.seat()?
            .store
            .mark_rewritten(&self.gateway, vault, registered, seen, entry)
    }

    fn resync_vault(&self, actor: &audit::Actor, vault: &str, head: &str) -> Result<(), GatewayError> {
        let mut entry = audit::Entry::new("vault.resync", actor.clone(), audit::Outcome::Ok);
        entry.vault = Some(vault.to_owned());
        entry.target = Some(head.to_owned());
        self.seat()?.store.resync_vault(&self.gateway, vault, head, entry)
    }

    fn settings(&self) -> Result<Vec<(String, serde_json::Value)>, GatewayError> {
        self.seat()?.store.team_settings()
    }

    fn set_setting(
        &self,
        actor: &audit::Actor,
        key: &str,
        value: Option<&serde_json::Value>,
    ) -> Result<(), GatewayError> {
        self.seat()?
            .store
            .set_team_setting(&self.gateway, actor, key, value)
    }

    fn insert_proposal(
        &self,
        p: &NewTeamProposal<'_>,
        entry: audit::Entry,
    ) -> Result<audit::AuditRecord, GatewayError> {
        self.seat()?.store.insert_proposal(&self.gateway, p, entry)
    }

    fn proposal(&self, vault: &str, id: &str) -> Result<Option<TeamProposal>, GatewayError> {
        self.seat()?.store.proposal(vault, id)
    }

    fn list_proposals(
        &self,
        vault: &str,
        status: inbox::ProposalStatus,
        limit: u32,
        after: Option<(&str, i64)>,
    ) -> Result<Vec<TeamProposal>, GatewayError> {
        self.seat()?.store.list_proposals(vault, status, limit, after)
    }

    fn pending_sizes(&self, vault: &str) -> Result<Vec<(String, u64)>, GatewayError> {
        self.seat()?.store.pending_sizes(vault)
    }

    fn reject_proposal(
        &self,
        id: &str,
        by: &str,
        at: &str,
        reason: &str,
        key: Option<(&inbox::IdemKey<'_>, &serde_json::Value)>,
        entry: audit::Entry,
    ) -> Result<Option<audit::AuditRecord>, GatewayError> {
        self.seat()?
            .store
            .reject_proposal(&self.gateway, id, (by, at, reason), key, entry)
    }

    fn lock_vault(&self, vault: &str, wait: std::time::Duration) -> Result<Box<dyn VaultHold>, GatewayError> {
        Ok(Box::new(self.seat()?.store.lock_vault(
            vault,
            &self.gateway,
            wait,
        )?))
    }

    fn begin_job(
        &self,
        fence: &Fence,
        id: &str,
        job: &TeamJob,
        entry: audit::Entry,
    ) -> Result<Option<audit::AuditRecord>, GatewayError> {
        self.seat()?.store.begin_job(fence, id, job, entry)
    }

    fn job_attempt(
        &self,
        fence: &Fence,
        id: &str,
        job: &str,
        base: &str,
        commit: &str,
        meta: &serde_json::Value,
    ) -> Result<(), GatewayError> {
        self.seat()?.store.job_attempt(fence, id, job, base, commit, meta)
    }

    fn finish_job(
        &self,
        fence: &Fence,
        id: &str,
        job: &str,
        done: &TeamDone<'_>,
        entry: audit::Entry,
    ) -> Result<Option<audit::AuditRecord>, GatewayError> {
        self.seat()?
            .store
            .finish_job(fence, &self.gateway, id, job, done, entry)
    }

    fn keep_answer(
        &self,
        fence: &Fence,
        key: &inbox::IdemKey<'_>,
        result: &(dyn Fn(u64) -> serde_json::Value + Sync),
        entry: audit::Entry,
    ) -> Result<audit::AuditRecord, GatewayError> {
        self.seat()?
            .store
            .keep_answer(fence, &self.gateway, key, result, entry)
    }

    fn left_jobs(&self, vault: &str, limit: u32) -> Result<Vec<String>, GatewayError> {
        self.seat()?.store.left_jobs(vault, limit)
    }

    fn oldest_left_job(&self, vault: &str) -> Result<Option<u64>, GatewayError> {
        self.seat()?.store.oldest_left_job(vault)
    }

    fn drop_job(&self, fence: &Fence, id: &str, job: &str) -> Result<(), GatewayError> {
        self.seat()?.store.drop_job(fence, id, job)
    }

    fn idempotency(&self, principal: &str, key: &str) -> Result<Option<inbox::IdemRecord>, GatewayError> {
        self.seat()?.store.idempotency(principal, key)
    }

    fn create_challenge(&self, c: &inbox::NewChallenge<'_>) -> Result<(), GatewayError> {
        self.seat()?.store.create_challenge(c)
    }

    fn challenge(&self, id: &str) -> Result<Option<TeamChallenge>, GatewayError> {
        self.seat()?.store.challenge(id)
    }

    fn consume_challenge(
        &self,
        fence: &Fence,
        id: &str,
        at: i64,
        intent: &serde_json::Value,
        entry: audit::Entry,
    ) -> Result<Option<audit::AuditRecord>, GatewayError> {
        self.seat()?
            .store
            .consume_challenge(fence, &self.gateway, id, at, intent, entry)
    }

    fn challenge_attempt(&self, fence: &Fence, id: &str, commit: &str) -> Result<(), GatewayError> {
        self.seat()?.store.challenge_attempt(fence, id, commit)
    }

    fn finish_challenge(
        &self,
        fence: &Fence,
        id: &str,
        result: &(dyn Fn(u64) -> serde_json::Value + Sync),
        entry: audit::Entry,
    ) -> Result<Option<audit::AuditRecord>, GatewayError> {
        self.seat()?
            .store
            .finish_challenge(fence, &self.gateway, id, result, entry)
    }

    fn release_challenge(&self, fence: &Fence, id: &str) -> Result<(), GatewayError> {
        self.seat()?.store.release_challenge(fence, id)
    }

    fn prune_challenges(&self, before: i64) -> Result<(), GatewayError> {
        self.seat()?.store.prune_challenges(before)
    }

    fn use_approval(&self, nonce: &str, expires_at: i64) -> Result<bool, GatewayError> {
        self.seat()?.store.use_approval(
            nonce,
            expires_at,
            time::OffsetDateTime::now_utc().unix_timestamp(),
        )
    }

    fn hand_call(&self, call: &HandedCall) -> Result<bool, GatewayError> {
        self.seat()?.store.hand_call(call)
    }

    fn pending_like(&self, call: &HandedCall, ttl_seconds: u64) -> Result<Option<String>, GatewayError> {
        self.seat()?.store.pending_like(call, ttl_seconds)
    }

    fn take_handed(
        &self,
        vault: &str,
        limit: u32,
        ttl_seconds: u64,
    ) -> Result<Vec<HandedCall>, GatewayError> {
        let store = &self.seat()?.store;
        // The database's holder is a gateway's name, which its other processes share: only the
        // process holding the lease takes.
        if !store.holds_lease(vault) {
            return Ok(Vec::new());
        }
        store.take_handed(&self.gateway, vault, limit, ttl_seconds)
    }

    fn handed(&self, id: &str) -> Result<Handed, GatewayError> {
        self.seat()?.store.handed(id)
    }

    fn take_back_handed(&self, id: &str, from: Option<&str>) -> Result<bool, GatewayError> {
        self.seat()?.store.take_back_handed(id, from)
    }

    fn answer_handed(&self, id: &str, answer: &serde_json::Value) -> Result<bool, GatewayError> {
        self.seat()?.store.answer_handed(&self.gateway, id, answer)
    }

    fn forget_handed(&self, id: &str) -> Result<(), GatewayError> {
        self.seat()?.store.forget_handed(id)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::sync::mpsc;

    #[test]
    fn a_request_never_takes_a_read_that_started_before_it_arrived() {
        let shared = Arc::new(SharedRead::default());
        let calls = Arc::new(AtomicI64::new(0));
        let (release, held) = mpsc::channel::<()>();
        let held = Arc::new(Mutex::new(held));
        let fresh = {
            let (calls, held) = (calls.clone(), held.clone());
            move || {
                let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
                held.lock().unwrap().recv().unwrap();
                Ok(n)
            }
        };
        let reader = |fresh: _| {
            let shared = shared.clone();
            std::thread::spawn(move || shared.read(fresh).unwrap())
        };
        let a = reader(fresh.clone());
        while calls.load(Ordering::SeqCst) < 1 {
            std::thread::yield_now();
        }
        // B arrives while A's read (1) is in flight: that read may predate a change B must see.
        let b = reader(fresh);
        release.send(()).unwrap();
        assert_eq!(a.join().unwrap(), 1);
        // B either starts a read of its own (2) or, wrongly, answered with A's.
        while calls.load(Ordering::SeqCst) < 2 && !b.is_finished() {
            std::thread::yield_now();
        }
        release.send(()).unwrap();
        assert_eq!(
            b.join().unwrap(),
            2,
            "B took a read that started before it arrived"
        );
    }

    #[test]
    fn requests_arriving_together_share_reads() {
        let shared = Arc::new(SharedRead::default());
        let calls = Arc::new(AtomicI64::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (shared, calls) = (shared.clone(), calls.clone());
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        shared
                            .read(|| {
                                std::thread::sleep(std::time::Duration::from_millis(1));
                                Ok(calls.fetch_add(1, Ordering::SeqCst))
                            })
                            .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(calls.load(Ordering::SeqCst) < 8 * 50 / 2, "{calls:?}");
    }
}
