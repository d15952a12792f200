//! Jobs (docs/contract.md#applying-a-proposal): an apply, undo or redo an agent asked for is a
//! durable row from the moment it waits for the vault's writer until its key answers or it fails.
//! A process that dies (kill -9, a crash, a closed laptop) loses none: the next gateway process
//! runs its queued jobs again, as their callers, through the very same call; the idempotency key
//! makes each happen once. Nothing lands after `[limits] job_ttl_seconds`: an older job fails.
//!
//! Which process waits for a job is told by a lock file under `<home>/jobs/`, held while the
//! process lives: a job is taken over only when its owner's lock is free (the owner is gone).

use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;

use serde_json::Value;

use crate::actors::{Actor, Caller, Transport};
use crate::call::Call;
use crate::core::{Core, VaultHandle};
use crate::error::GatewayError;
use crate::home::Home;

/// The jobs service: [`Core::jobs`].
pub struct Jobs<'a> {
    pub(crate) core: &'a Core,
}

/// This process, as the owner of the jobs it records: its id and the lock that says it lives.
pub(crate) struct Owner {
    pub(crate) id: String,
    /// Held (exclusively) until the process ends; closing the file releases it.
    _lock: std::fs::File,
}

/// A queued job whose process is gone, ready to run again as its caller.
#[derive(Debug)]
pub struct Orphan {
    pub job: inbox::Job,
    pub caller: Caller,
    pub args: Value,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Where the owners' lock files are.
fn jobs_dir(home: &Home) -> PathBuf {
    home.dir.join("jobs")
}

/// Whether the process that owns `owner`'s jobs is gone: its lock file is missing or free.
pub(crate) fn owner_gone(home: &Home, owner: &str) -> bool {
    // An owner id is 32 hex digits; anything else never names a file.
    if owner.len() != 32 || !owner.bytes().all(|b| b.is_ascii_hexdigit()) {
        return true;
    }
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(jobs_dir(home).join(format!("{owner}.lock")))
    {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return true,
        Err(_) => return false,
    };
    let mut lock = fd_lock::RwLock::new(file);
    lock.try_write().is_ok()
}

impl Jobs<'_> {
    fn dir(&self) -> PathBuf {
        jobs_dir(&self.core.home)
    }

    /// This process's owner id, its lock taken on first use.
    fn owner(&self) -> Result<&Owner, GatewayError> {
        if let Some(o) = self.core.jobs_owner.get() {
            return Ok(o);
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        let dir = self.dir();
        // Private like the rest of the home.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(dir.join(format!("{id}.lock")))?;
        let mut lock = fd_lock::RwLock::new(file);
        // A fresh name: nobody else can hold it.
        let guard = lock.try_write()?;
        // Held until the file closes (the process ends); the guard borrows the lock.
        std::mem::forget(guard);
        let owner = Owner {
            id,
            _lock: lock.into_inner(),
        };
        // Another thread may have won the race: its owner stands, this lock file goes.
        let path = dir.join(format!("{}.lock", owner.id));
        let won = self.core.jobs_owner.set(owner).is_ok();
        if !won {
            let _ = std::fs::remove_file(path);
        }
        self.core
            .jobs_owner
            .get()
            .ok_or_else(|| GatewayError::Internal("the job owner vanished".into()))
    }

    /// Records the job of a keyed write by an agent (the operator's CLI and review page wait in
    /// their own terminal or browser: theirs are not jobs). Its commit is not fsynced: a process
    /// crash keeps it, and the write's own intent makes it durable against power loss.
    pub(crate) fn submit(
        &self,
        call: &Call<'_>,
        v: &VaultHandle,
        key: &str,
    ) -> Result<Option<i64>, GatewayError> {
        let Actor::Caller(caller) = call.actor() else {
            return Ok(None);
        };
        let owner = self.owner()?;
        let args = call.args().to_string();
        let job = inbox::NewJob {
            vault: &v.id,
            principal: caller.credential.id.as_str(),
            key,
            tool: call.tool(),
            args: &args,
            transport: caller.transport.as_str(),
            owner: &owner.id,
            submitted_ms: now_ms(),
        };
        let state = &self.core.state;
        Ok(Some(state.deferring_sync(|| state.job_submit(&job))?))
    }

    /// Ends a job with its call's outcome (a success is usually already `done`: the key's answer
    /// marked it in the effect's own commit).
    pub fn finish<T>(&self, id: i64, outcome: &Result<T, GatewayError>) {
        let code = outcome.as_ref().err().map(|e| e.code().as_str());
        let state = &self.core.state;
        if let Err(e) = state.deferring_sync(|| state.job_finish(id, code, now_ms())) {
            // The job stays queued; the next process sees its key answered, or runs it again.
            tracing::warn!(error = %e, job = id, "recording a job's end failed");
        }
    }

    /// The queued jobs whose process is gone, to be run again by this one. On the way, a job past
    /// `job_ttl_seconds` fails (`VAULT_BUSY`: its proposal stays pending) and a job whose
    /// credential was revoked or expired fails with that refusal: neither runs.
    pub fn orphans(&self) -> Result<Vec<Orphan>, GatewayError> {
        let state = &self.core.state;
        let now = now_ms();
        let ttl_ms = self.core.config().limits.job_ttl_seconds.saturating_mul(1000) as i64;
        // Finished jobs are kept a day, for `doctor` and a person's questions; keys keep answers.
        state.jobs_prune(now.saturating_sub(86_400_000))?;
        let mine = self.core.jobs_owner.get().map(|o| o.id.clone());
        let mut alive = std::collections::BTreeMap::new();
        let mut out = Vec::new();
        let mut others_alive = 0usize;
        for job in state.jobs_queued()? {
            if Some(&job.owner) == mine.as_ref() {
                continue;
            }
            let gone = *alive
                .entry(job.owner.clone())
                .or_insert_with(|| self.owner_gone(&job.owner));
            if !gone {
                others_alive += 1;
                continue;
            }
            let fail = |e: GatewayError| {
                tracing::info!(
                    job = job.id,
                    code = e.code().as_str(),
                    "a job left by a stopped process ends without running"
                );
                state.job_finish(job.id, Some(e.code().as_str()), now)
            };
            if now.saturating_sub(job.submitted_ms) > ttl_ms {
                fail(GatewayError::VaultBusy(format!(
                    "the job waited longer than job_ttl_seconds ({} s)",
                    ttl_ms / 1000
                )))?;
                continue;
            }
            match self.caller(&job, now) {
                Ok((caller, args)) => out.push(Orphan { job, caller, args }),
                Err(e) => fail(e)?,
            }
        }
        if others_alive > 0 {
            tracing::info!(
                jobs = others_alive,
                "queued jobs whose process still runs are left to it"
            );
        }
        // The lock files of processes that are gone and own no queued job.
        for (owner, gone) in alive {
            if gone && !out.iter().any(|o| o.job.owner == owner) {
                let _ = std::fs::remove_file(self.dir().join(format!("{owner}.lock")));
            }
        }
        Ok(out)
    }

    fn owner_gone(&self, owner: &str) -> bool {
        owner_gone(&self.core.home, owner)
    }

    /// The job's caller as its credential is now: a revoked or expired credential, or one that
    /// no longer exists, runs nothing (SECURITY(T-AUTH3)).
    fn caller(&self, job: &inbox::Job, now_ms: i64) -> Result<(Caller, Value), GatewayError> {
        let credential = self
            .core
            .state
            .credential(&job.principal)?
            .ok_or(GatewayError::Unauthorized("unknown credential"))?;
        if credential.is_revoked() {
            return Err(GatewayError::CredentialRevoked);
        }
        if credential.is_expired(now_ms / 1000) {
            return Err(GatewayError::CredentialExpired);
        }
        let transport = if job.transport == "stdio" {
            Transport::Stdio
        } else {
            Transport::Http
        };
        let args = serde_json::from_str(&job.args)
            .map_err(|e| GatewayError::InvalidArgument(format!("the job's arguments do not parse: {e}")))?;
        Ok((
            Caller {
                credential,
                transport,
            },
            args,
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::home::Home;

    fn home(dir: &tempfile::TempDir) -> Home {
        Home {
            dir: dir.path().join("home"),
        }
    }

    /// A job of `core`'s process for `credential`, submitted `age_ms` ago.
    fn queue(core: &Core, credential: &str, key: &str, age_ms: i64) -> i64 {
        let owner = core.jobs().owner().unwrap().id.clone();
        core.state
            .job_submit(&inbox::NewJob {
                vault: "main",
                principal: credential,
                key,
                tool: "apply_proposal",
                args: r#"{"id":"p","proposalHash":"h","idempotencyKey":"k"}"#,
                transport: "stdio",
                owner: &owner,
                submitted_ms: now_ms() - age_ms,
            })
            .unwrap()
    }

    fn credential(core: &Core, name: &str) -> String {
        core.state
            .create_credential(inbox::NewCredential {
                name: name.into(),
                tier: policy::Tier::Auto,
                vaults: vec![],
                jti: format!("jti-{name}"),
                created_at: 0,
                expires_at: None,
                approve_in_client: false,
            })
            .unwrap()
            .id
            .as_str()
            .to_owned()
    }

    #[test]
    fn a_live_processs_jobs_are_left_to_it_and_taken_over_once_it_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        home(&dir).init().unwrap();
        let first = Core::open(home(&dir)).unwrap();
        let agent = credential(&first, "agent");
        let id = queue(&first, &agent, "k1", 0);
        let second = Core::open(home(&dir)).unwrap();
        assert!(second.jobs().orphans().unwrap().is_empty(), "its process lives");
        assert!(
            first.jobs().orphans().unwrap().is_empty(),
            "a process never takes its own"
        );
        drop(first);
        let orphans = second.jobs().orphans().unwrap();
        assert_eq!(orphans.len(), 1);
        assert_eq!(orphans[0].job.id, id);
        assert_eq!(orphans[0].caller.credential.name, "agent");
        assert_eq!(orphans[0].caller.transport, Transport::Stdio);
        assert_eq!(orphans[0].args["idempotencyKey"], "k");
    }

    #[test]
    fn an_old_job_and_a_revoked_callers_job_fail_without_running() {
        let dir = tempfile::tempdir().unwrap();
        home(&dir).init().unwrap();
        let first = Core::open(home(&dir)).unwrap();
        let agent = credential(&first, "agent");
        let gone = credential(&first, "gone");
        let old = queue(&first, &agent, "old", 601_000);
        let revoked = queue(&first, &gone, "revoked", 0);
        let fresh = queue(&first, &agent, "fresh", 0);
        first
            .state
            .revoke_credential(&inbox::CredentialId(gone.clone()), 1)
            .unwrap();
        drop(first);
        let second = Core::open(home(&dir)).unwrap();
        let orphans = second.jobs().orphans().unwrap();
        assert_eq!(orphans.iter().map(|o| o.job.id).collect::<Vec<_>>(), vec![fresh]);
        let ended = |id| second.state.job(id).unwrap().unwrap();
        assert_eq!(
            (ended(old).1.as_str(), ended(old).2.as_deref()),
            ("failed", Some("VAULT_BUSY"))
        );
        assert_eq!(
            (ended(revoked).1.as_str(), ended(revoked).2.as_deref()),
            ("failed", Some("CREDENTIAL_REVOKED"))
        );
    }
}
