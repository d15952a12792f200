//! Jobs (docs/contract.md#applying-a-proposal): an apply, undo or redo an agent asked for is a
//! durable row from the moment it waits for the vault's writer until its key answers or it fails.
//! A process that dies (kill -9, a crash) loses none: the next gateway process takes its queued
//! jobs over and runs them again, as their callers, through the very same call; the idempotency
//! key makes each happen once. No job is taken over past `[limits] job_ttl_seconds`: it fails.
//!
//! Which process waits for a job is told by a lock file under `<home>/jobs/`, held while the
//! process lives: a job is taken over only when its owner's lock is free (the owner is gone), and
//! only by one process (the row's owner changes by compare-and-swap). A call that used a person's
//! answer is not a job: that answer counts once, for the call that asked.

use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

use serde_json::Value;

use crate::actors::{Actor, Caller, Transport};
use crate::call::Call;
use crate::core::Core;
use crate::error::GatewayError;
use crate::home::Home;

/// The calls that become jobs.
const JOB_TOOLS: [&str; 3] = ["apply_proposal", "history_undo", "history_redo"];
/// A job taken over this many times (each run ended by a crash) fails instead of running again.
const MAX_ATTEMPTS: i64 = 3;

/// The jobs service: [`Core::jobs`].
pub struct Jobs<'a> {
    pub(crate) core: &'a Core,
}

/// This process, as the owner of the jobs it records: its id and the lock that says it lives.
pub(crate) struct Owner {
    pub(crate) id: String,
    path: PathBuf,
    /// Held (exclusively) until the process ends; closing the file releases it.
    _lock: std::fs::File,
}

impl Drop for Owner {
    /// A process that ends in order takes its lock file with it (its queued jobs, if any, are
    /// then anyone's to take over).
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A job taken over from a stopped process, ready to run again as its caller.
#[derive(Debug)]
pub struct Orphan {
    pub job: inbox::Job,
    pub caller: Caller,
    /// The call's arguments, as they were.
    pub args: Value,
}

/// A job this call recorded or joined: [`Jobs::finish`] ends it.
#[derive(Debug, Clone, Copy)]
pub struct JobRef {
    pub id: i64,
    /// This call made the row (or took it over): only then does its failure end the job; a
    /// retry that joined it leaves the first call to finish it.
    pub made: bool,
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

/// An owner id is 32 hex digits; anything else never names a file.
fn valid_owner(owner: &str) -> bool {
    owner.len() == 32 && owner.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether the process that owns `owner`'s jobs is gone: its lock file is missing or free. A
/// shared probe: two processes checking at once do not take each other for the owner.
pub(crate) fn owner_gone(home: &Home, owner: &str) -> bool {
    if !valid_owner(owner) {
        return true;
    }
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .open(jobs_dir(home).join(format!("{owner}.lock")))
    {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return true,
        Err(_) => return false,
    };
    let lock = fd_lock::RwLock::new(file);
    lock.try_read().is_ok()
}

/// The job ttl in milliseconds (a huge setting saturates, never wraps).
fn ttl_ms(core: &Core) -> i64 {
    i64::try_from(core.config().limits.job_ttl_seconds)
        .unwrap_or(i64::MAX)
        .saturating_mul(1000)
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
        let dir = self.dir();
        // Private like the rest of the home.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        let mut tries = 0;
        let owner = loop {
            tries += 1;
            let id = uuid::Uuid::new_v4().simple().to_string();
            let path = dir.join(format!("{id}.lock"));
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)?;
            let mut lock = fd_lock::RwLock::new(file);
            // A fresh name: nobody else holds it.
            let guard = lock.try_write()?;
            // Held until the file closes (the process ends); the guard borrows the lock.
            std::mem::forget(guard);
            let file = lock.into_inner();
            // Another process's sweep may have removed the file between its creation and the
            // lock: then a new name (a lock on a removed file would tell nobody we live).
            let same = std::fs::metadata(&path)
                .ok()
                .zip(file.metadata().ok())
                .is_some_and(|(on_disk, held)| on_disk.ino() == held.ino() && on_disk.dev() == held.dev());
            if same {
                break Owner {
                    id,
                    path,
                    _lock: file,
                };
            }
            if tries >= 3 {
                return Err(GatewayError::Internal(
                    "the jobs folder keeps losing this process's lock file".into(),
                ));
            }
        };
        // Another thread may have won the race: its owner stands, this one (and its file) goes.
        let _ = self.core.jobs_owner.set(owner);
        self.core
            .jobs_owner
            .get()
            .ok_or_else(|| GatewayError::Internal("the job owner vanished".into()))
    }

    /// Records the job of a keyed write by an agent — not the operator's (the CLI and the review
    /// page wait in their terminal or browser), and not a call a person's answer was used for.
    /// Its commit is not fsynced: a process crash keeps it, and the write's own intent makes it
    /// durable against power loss.
    pub(crate) fn submit(
        &self,
        call: &Call<'_>,
        vault: &str,
        key: &str,
    ) -> Result<Option<JobRef>, GatewayError> {
        let Actor::Caller(caller) = call.actor() else {
            return Ok(None);
        };
        // SECURITY(T-PROP8): a person's answer counts once, for the call that asked.
        if !JOB_TOOLS.contains(&call.tool()) || call.person_answered() {
            return Ok(None);
        }
        let owner = self.owner()?;
        let args = call.args().to_string();
        let job = inbox::NewJob {
            vault,
            principal: caller.credential.id.as_str(),
            key,
            tool: call.tool(),
            args: &args,
            transport: caller.transport.as_str(),
            owner: &owner.id,
            submitted_ms: now_ms(),
        };
        let state = &self.core.state;
        let (id, made) = state.deferring_sync(|| state.job_submit(&job))?;
        Ok(Some(JobRef { id, made }))
    }

    /// Ends a job with its call's outcome. A success is usually already `done` (the key's answer
    /// marked it in the effect's own commit); a failure ends it only for the call that made or
    /// took over the job, and is made durable at once (a lost mark would run it again).
    pub fn finish<T>(&self, job: JobRef, outcome: &Result<T, GatewayError>) {
        let state = &self.core.state;
        let ended = match outcome {
            Ok(_) => state.deferring_sync(|| state.job_finish(job.id, None, now_ms())),
            Err(_) if !job.made => return,
            Err(e) => state.job_finish(job.id, Some(e.code().as_str()), now_ms()),
        };
        if let Err(e) = ended {
            // The job stays queued; the next process finds its key answered, or runs it again.
            tracing::warn!(error = %e, job = job.id, "recording a job's end failed");
        }
    }

    /// The queued jobs whose process is gone, oldest first: each to be [`Jobs::take`]n just
    /// before it runs. On the way, finished jobs older than a day and lock files nobody holds or
    /// names are cleared (best effort).
    pub fn orphans(&self) -> Result<Vec<inbox::Job>, GatewayError> {
        let state = &self.core.state;
        let now = now_ms();
        if let Err(e) = state.jobs_prune(now.saturating_sub(86_400_000)) {
            tracing::warn!(error = %e, "forgetting finished jobs failed");
        }
        let mine = self.core.jobs_owner.get().map(|o| o.id.clone());
        let mut gone = std::collections::BTreeMap::new();
        let mut out = Vec::new();
        let mut others_alive = 0usize;
        let queued = state.jobs_queued()?;
        for job in &queued {
            if Some(&job.owner) == mine.as_ref() {
                continue;
            }
            let is_gone = *gone
                .entry(job.owner.clone())
                .or_insert_with(|| owner_gone(&self.core.home, &job.owner));
            if is_gone {
                out.push(job.clone());
            } else {
                others_alive += 1;
            }
        }
        if others_alive > 0 {
            tracing::info!(
                jobs = others_alive,
                "queued jobs whose process still runs are left to it"
            );
        }
        self.sweep(&queued);
        Ok(out)
    }

    /// Removes the lock files that no live process holds and no queued job names.
    fn sweep(&self, queued: &[inbox::Job]) {
        let Ok(entries) = std::fs::read_dir(self.dir()) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(owner) = name.to_str().and_then(|n| n.strip_suffix(".lock")) else {
                continue;
            };
            if !valid_owner(owner)
                || queued.iter().any(|j| j.owner == owner)
                || self.core.jobs_owner.get().is_some_and(|o| o.id == owner)
            {
                continue;
            }
            if owner_gone(&self.core.home, owner) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    /// Takes over an orphaned job, checked just before it runs: still queued and still its dead
    /// owner's; younger than `job_ttl_seconds`; not taken over too often; its credential still
    /// valid. One that may not run ends (`failed`, with the reason's code) and answers `None`; so
    /// does one another process took first. A passing error (the state busy) leaves it queued.
    pub fn take(&self, job: &inbox::Job) -> Result<Option<Orphan>, GatewayError> {
        let state = &self.core.state;
        let now = now_ms();
        let fail = |e: GatewayError| {
            tracing::warn!(
                job = job.id,
                code = e.code().as_str(),
                "a job left by a stopped process ends without running"
            );
            state.job_finish(job.id, Some(e.code().as_str()), now)?;
            Ok(None)
        };
        let ttl = ttl_ms(self.core);
        if now.saturating_sub(job.submitted_ms) > ttl {
            return fail(GatewayError::VaultBusy(format!(
                "the job waited longer than job_ttl_seconds ({} s)",
                ttl / 1000
            )));
        }
        if job.attempts >= MAX_ATTEMPTS {
            return fail(GatewayError::Internal(format!(
                "the job was taken over {} times, and each run ended with its process",
                job.attempts
            )));
        }
        let caller = match self.caller(job, now) {
            Ok(c) => c,
            Err(e @ (GatewayError::State(_) | GatewayError::Io(_))) => return Err(e),
            Err(e) => return fail(e),
        };
        let args: Value = match serde_json::from_str(&job.args) {
            Ok(a) => a,
            Err(e) => {
                return fail(GatewayError::InvalidArgument(format!(
                    "the job's arguments do not parse: {e}"
                )));
            }
        };
        // The arguments stay as they were (the key's answer is bound to them); a call that named
        // no vault must still reach the vault it was made for.
        let named = args.get("vault").and_then(Value::as_str).map(str::to_owned);
        if named
            .or_else(|| self.core.config().default_vault.clone())
            .as_deref()
            != Some(job.vault.as_str())
        {
            return fail(GatewayError::InvalidArgument(format!(
                "the job was made for vault '{}', which its arguments no longer reach (the default vault changed)",
                job.vault
            )));
        }
        let me = self.owner()?.id.clone();
        if !state.job_claim(job.id, &job.owner, &me)? {
            return Ok(None);
        }
        Ok(Some(Orphan {
            job: inbox::Job {
                owner: me,
                attempts: job.attempts + 1,
                ..job.clone()
            },
            caller,
            args,
        }))
    }

    /// The job's caller as its credential is now: a revoked or expired credential, or one that
    /// no longer exists, runs nothing (SECURITY(T-PROP8)). Its tier and vaults are checked again
    /// by the call itself.
    fn caller(&self, job: &inbox::Job, now_ms: i64) -> Result<Caller, GatewayError> {
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
        Ok(Caller {
            credential,
            transport,
        })
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
                args: r#"{"id":"p","proposalHash":"h","idempotencyKey":"k","vault":"main"}"#,
                transport: "stdio",
                owner: &owner,
                submitted_ms: now_ms() - age_ms,
            })
            .unwrap()
            .0
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

    fn lock_files(dir: &tempfile::TempDir) -> usize {
        std::fs::read_dir(home(dir).dir.join("jobs"))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    #[test]
    fn a_live_processs_jobs_are_left_to_it_and_taken_over_once_by_one_process_once_it_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        home(&dir).init().unwrap();
        let first = Core::open(home(&dir)).unwrap();
        let agent = credential(&first, "agent");
        let id = queue(&first, &agent, "k1", 0);
        let second = Core::open(home(&dir)).unwrap();
        let third = Core::open(home(&dir)).unwrap();
        assert!(second.jobs().orphans().unwrap().is_empty(), "its process lives");
        assert!(
            first.jobs().orphans().unwrap().is_empty(),
            "a process never takes its own"
        );
        drop(first);
        let found = second.jobs().orphans().unwrap();
        assert_eq!(found.iter().map(|j| j.id).collect::<Vec<_>>(), vec![id]);
        // Two processes find it; one takes it.
        let also = third.jobs().orphans().unwrap();
        let taken = second.jobs().take(&found[0]).unwrap().unwrap();
        assert!(third.jobs().take(&also[0]).unwrap().is_none(), "taken twice");
        assert_eq!(taken.caller.credential.name, "agent");
        assert_eq!(taken.caller.transport, Transport::Stdio);
        assert_eq!(taken.args["idempotencyKey"], "k");
        // Now the second process is its owner, and it lives.
        assert!(third.jobs().orphans().unwrap().is_empty());
    }

    #[test]
    fn an_old_job_a_revoked_callers_job_and_a_job_taken_over_too_often_fail_without_running() {
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
        let mut ran = Vec::new();
        for job in second.jobs().orphans().unwrap() {
            if let Some(o) = second.jobs().take(&job).unwrap() {
                ran.push(o.job.id);
            }
        }
        assert_eq!(ran, vec![fresh]);
        let state = inbox::State::open(&home(&dir).state_path()).unwrap();
        let ended = |id| state.job(id).unwrap().unwrap();
        assert_eq!(
            (ended(old).1.as_str(), ended(old).2.as_deref()),
            ("failed", Some("VAULT_BUSY"))
        );
        assert_eq!(
            (ended(revoked).1.as_str(), ended(revoked).2.as_deref()),
            ("failed", Some("CREDENTIAL_REVOKED"))
        );
        // The second process dies while running it, twice more: then it is given up.
        drop(second);
        for _ in 0..2 {
            let next = Core::open(home(&dir)).unwrap();
            let job = next.jobs().orphans().unwrap().pop().unwrap();
            assert!(next.jobs().take(&job).unwrap().is_some());
        }
        let last = Core::open(home(&dir)).unwrap();
        let job = last.jobs().orphans().unwrap().pop().unwrap();
        assert!(last.jobs().take(&job).unwrap().is_none());
        assert_eq!(
            (ended(fresh).1.as_str(), ended(fresh).2.as_deref()),
            ("failed", Some("INTERNAL"))
        );
    }

    #[test]
    fn an_agents_keyed_write_is_a_job_unless_a_person_answered_it_or_the_operator_made_it() {
        let dir = tempfile::tempdir().unwrap();
        home(&dir).init().unwrap();
        let core = Core::open(home(&dir)).unwrap();
        let id = credential(&core, "agent");
        let caller = Caller {
            credential: core.state.credential(&id).unwrap().unwrap(),
            transport: Transport::Http,
        };
        let args = serde_json::json!({"id": "p", "idempotencyKey": "k"});
        let call = Call::new(
            &core,
            Actor::Caller(caller.clone()),
            "apply_proposal",
            &args,
            "tool_call",
        );
        let job = core.jobs().submit(&call, "main", "k").unwrap().unwrap();
        assert!(job.made);
        // The same key again joins it.
        let again = core.jobs().submit(&call, "main", "k").unwrap().unwrap();
        assert_eq!((again.id, again.made), (job.id, false));
        // A person's answer was used: no job.
        let asked = Call::new(
            &core,
            Actor::Caller(caller.clone()),
            "apply_proposal",
            &args,
            "tool_call",
        );
        asked.note_person_answered();
        assert!(core.jobs().submit(&asked, "main", "k2").unwrap().is_none());
        // Other tools, and the operator, are not jobs.
        let in_app = Call::new(
            &core,
            Actor::Caller(caller),
            "approve_proposal_in_app",
            &args,
            "tool_call",
        );
        assert!(core.jobs().submit(&in_app, "main", "k3").unwrap().is_none());
        let operator = Call::new(
            &core,
            Actor::Operator(crate::actors::Operator::cli("me")),
            "apply_proposal",
            &args,
            "cli",
        );
        assert!(core.jobs().submit(&operator, "main", "k4").unwrap().is_none());
        assert_eq!(core.state.jobs_queued().unwrap().len(), 1);
    }

    #[test]
    fn a_huge_ttl_never_wraps() {
        let dir = tempfile::tempdir().unwrap();
        home(&dir).init().unwrap();
        let core = Core::open(home(&dir)).unwrap();
        let mut config = core.home.load_config().unwrap();
        config.limits.job_ttl_seconds = u64::MAX;
        core.home.save_config(&config).unwrap();
        let core = Core::open(home(&dir)).unwrap();
        assert_eq!(ttl_ms(&core), i64::MAX);
    }

    #[test]
    fn lock_files_go_with_their_process_and_strays_are_swept() {
        let dir = tempfile::tempdir().unwrap();
        home(&dir).init().unwrap();
        let first = Core::open(home(&dir)).unwrap();
        let agent = credential(&first, "agent");
        queue(&first, &agent, "k1", 0);
        assert_eq!(lock_files(&dir), 1);
        drop(first);
        assert_eq!(lock_files(&dir), 0, "a process that ends takes its lock file");
        // A killed process leaves its file: nobody holds it, no job names it.
        let stray = home(&dir).dir.join(format!("jobs/{}.lock", "c".repeat(32)));
        std::fs::write(&stray, b"").unwrap();
        let second = Core::open(home(&dir)).unwrap();
        second.jobs().orphans().unwrap();
        assert!(!stray.exists(), "a stray lock file is swept");
    }
}
