//! One gateway's seat in its team: the engine's [`TeamState`] over the team's database, with the
//! gateway's own [`ChainWriter`] (docs/contract.md#team-mode). Opened once per process.

use std::sync::{Arc, Condvar, Mutex};

use engine::Tier;
use engine::error::GatewayError;
use engine::storage::TeamState;
use inbox::{Credential, CredentialId, NewCredential};

use crate::{ChainWriter, PgState};

/// A gateway of a team, as the engine uses it.
pub struct TeamSession {
    store: Arc<PgState>,
    writer: ChainWriter,
    team_id: String,
    gateway: String,
    generation: SharedRead,
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
    /// Connects as `gateway` to the team in `url`. Refused when the database holds no team, or
    /// no gateway of that name (the home was not set up with `team init` or `team join` there).
    pub fn open(url: &str, gateway: &str) -> Result<TeamSession, GatewayError> {
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
        Ok(TeamSession {
            store,
            writer,
            team_id: status.team_id,
            gateway: gateway.to_owned(),
            generation: SharedRead::default(),
        })
    }

    /// The store underneath (status, exports, grants).
    pub fn store(&self) -> &PgState {
        &self.store
    }
}

impl TeamState for TeamSession {
    fn team_id(&self) -> &str {
        &self.team_id
    }

    fn gateway(&self) -> &str {
        &self.gateway
    }

    fn credential_generation(&self) -> Result<i64, GatewayError> {
        // SECURITY(T-TEAM4): read after the request arrived, shared with those that arrived
        // with it.
        self.generation.read(|| self.store.credential_generation())
    }

    fn credential(&self, id: &str) -> Result<Option<Credential>, GatewayError> {
        Ok(self.store.credential(id)?.map(|t| t.with_hashed_jti()))
    }

    fn credentials(&self) -> Result<Vec<Credential>, GatewayError> {
        self.store.list_credentials()
    }

    fn issue_credential(
        &self,
        actor: &audit::Actor,
        id: CredentialId,
        new: NewCredential,
    ) -> Result<Credential, GatewayError> {
        self.store.issue_credential_as(&self.gateway, actor, id, new)
    }

    fn revoke_credential(&self, actor: &audit::Actor, id: &str, now: i64) -> Result<(), GatewayError> {
        self.store.revoke_credential(&self.gateway, actor, id, now)
    }

    fn set_credential_tier(&self, actor: &audit::Actor, id: &str, tier: Tier) -> Result<(), GatewayError> {
        self.store.set_credential_tier(&self.gateway, actor, id, tier)
    }

    fn append_audit(&self, entry: audit::Entry) -> Result<audit::AuditRecord, GatewayError> {
        self.writer.append(entry)
    }

    fn heartbeat(&self) -> Result<(), GatewayError> {
        self.store.gateway_seen(&self.gateway, env!("CARGO_PKG_VERSION"))
    }

    fn vaults(&self) -> Result<Vec<engine::remote::TeamVault>, GatewayError> {
        self.store.team_vaults()
    }

    fn add_vault(&self, actor: &audit::Actor, vault: &engine::remote::TeamVault) -> Result<(), GatewayError> {
        self.store.add_team_vault(&self.gateway, actor, vault)
    }

    fn remove_vault(&self, actor: &audit::Actor, id: &str) -> Result<(), GatewayError> {
        self.store.remove_team_vault(&self.gateway, actor, id)
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
