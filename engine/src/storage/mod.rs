//! The seams between the write transaction and where things are kept (docs/contract.md#rules-of-the-write-path):
//! a vault's files ([`VaultBackend`]), the right to write them ([`Lease`]), the state a write
//! commits to ([`StateStore`]) and the news of what changed outside vaultgate ([`ChangeFeed`],
//! which feeds the one index updater, `changes::rescan`). The transaction's file steps and lease
//! go through these traits, its commit point through [`StateStore`]; today's implementations are
//! the local folder (`files::Files`), the vault's write lock ([`FolderLease`]), `inbox::State`
//! and the folder's watcher ([`FolderFeed`]). A backend that keeps notes
//! elsewhere (a git remote) implements the same traits and passes the same
//! [`conformance`] suite, and the transaction does not change.
//!
//! It must never let a backend decide recovery (that is `proposals::recovery`, from what
//! [`VaultBackend::observe`] reports) or write a file that is not at the state the step expects.

use std::sync::atomic::{AtomicU64, Ordering};

use proposals::ops::{FileOp, OpState, Zone};

use crate::error::GatewayError;

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod state;
#[cfg(any(test, feature = "conformance"))]
pub mod state_conformance;
pub mod team;

pub use state::{StateStore, StateTx};
pub use team::{
    Handed, HandedCall, NewTeamProposal, TeamChallenge, TeamDone, TeamJob, TeamProposal, TeamState,
};

/// The result of one compare-and-swap step.
#[derive(Debug, PartialEq, Eq)]
pub enum Cas {
    Done,
    /// The file did not hold what the step expected (changed outside vaultgate): nothing written.
    Conflict(String),
    /// The backend cannot tell whether the step landed (a push whose answer was lost); the
    /// transaction settles it from [`VaultBackend::op_state`], never by guessing: [`run_step`].
    Ambiguous,
}

/// Runs one step and settles an ambiguous outcome by observing what the backend holds now: the
/// step's `after` state is [`Cas::Done`], bytes nobody planned are [`Cas::Conflict`], and a step
/// still at its `before` state did not land — an error, so the transaction rolls back (and the
/// caller's retry with its key runs it again), never a second attempt that might land twice.
pub fn run_step(b: &dyn VaultBackend, op: &FileOp) -> Result<Cas, GatewayError> {
    match b.exec(op)? {
        Cas::Ambiguous => match b.op_state(op)? {
            OpState::After => Ok(Cas::Done),
            OpState::Other => Ok(Cas::Conflict(
                op.paths()
                    .first()
                    .map(|(_, p)| (*p).to_owned())
                    .unwrap_or_default(),
            )),
            OpState::Before => Err(GatewayError::Internal(
                "a file step's outcome was unknown and it has not landed; nothing was committed: retry with the same idempotency key".into(),
            )),
        },
        settled => Ok(settled),
    }
}

/// A vault's files as the write transaction sees them: reads without following links, a store of
/// content-addressed blobs (what rollback, undo and redo restore from), and steps that each write
/// only if every file they touch still holds the exact bytes the step expects.
pub trait VaultBackend {
    /// The file's bytes and SHA-256, read without following any link; `None` when absent.
    fn read(&self, zone: Zone, path: &str) -> Result<Option<(Vec<u8>, String)>, GatewayError>;

    /// The file's SHA-256; `None` when absent.
    fn hash(&self, zone: Zone, path: &str) -> Result<Option<String>, GatewayError> {
        Ok(self.read(zone, path)?.map(|(_, h)| h))
    }

    /// Keeps `bytes` (which hash to `hash`) in the blob store; already there is fine.
    fn store_blob(&self, hash: &str, bytes: &[u8]) -> Result<(), GatewayError>;

    /// A blob, checked against its name (`INTERNAL` when missing or corrupt).
    fn blob(&self, hash: &str) -> Result<Vec<u8>, GatewayError>;

    fn has_blob(&self, hash: &str) -> Result<bool, GatewayError>;

    /// Removes a blob; false when there was none.
    fn remove_blob(&self, hash: &str) -> Result<bool, GatewayError>;

    /// Removes a file of the vault's own areas (held copies of a permanent deletion); absent is fine.
    fn remove(&self, zone: Zone, path: &str) -> Result<(), GatewayError>;

    /// Runs one step that is in its `Before` state. SECURITY(T-PROP7): a file changed since it
    /// was checked is never overwritten; the step answers [`Cas::Conflict`] and writes nothing.
    /// [`Cas::Ambiguous`] when the backend cannot know whether it landed; callers go through
    /// [`run_step`].
    fn exec(&self, op: &FileOp) -> Result<Cas, GatewayError>;

    /// Where each step of a write stands now, in order: what recovery decides from.
    fn observe(&self, ops: &[FileOp]) -> Result<Vec<OpState>, GatewayError> {
        ops.iter().map(|op| self.op_state(op)).collect()
    }

    /// Where one step stands now.
    fn op_state(&self, op: &FileOp) -> Result<OpState, GatewayError> {
        let mut hashes = Vec::new();
        for (zone, path) in op.paths() {
            hashes.push(self.hash(zone, path)?);
        }
        let mut it = hashes.into_iter();
        Ok(op.state(|_, _| it.next().flatten()))
    }
}

/// The right to write a vault, held by one writer at a time. Each hold has an epoch, greater
/// than every earlier hold's of the same lease, recorded in the write's intent and checked at its
/// commit point: a writer whose hold was lost (a lease that expired) cannot commit. The check is
/// at the commit only: a lease that can expire must also fence the file steps themselves (a
/// remote's compare-and-swap on its ref does), since they run before it.
pub trait Lease {
    /// Waits for the hold.
    fn acquire(&self) -> Result<LeaseHold, GatewayError>;

    /// Whether the hold of `epoch` still holds: [`GatewayError`] when it does not (the write is
    /// not committed).
    fn check(&self, epoch: u64) -> Result<(), GatewayError>;
}

/// Where a vault's outside changes come from: a file watcher here, a fetch of the remote for a
/// vault whose notes live in git. Every feed delivers its batches to the same index updater
/// (`changes::rescan`), which decides from the files what moved; a feed only says where to look,
/// and says `lost` when it cannot tell (then the updater walks).
pub trait ChangeFeed {
    /// Delivers batches to `sink` (on the feed's own thread) until the returned guard is dropped.
    fn follow(&self, sink: Box<dyn Fn(vault::watch::Changes) + Send>) -> Result<FeedGuard, GatewayError>;
}

/// A running [`ChangeFeed`]: dropping it stops the feed.
pub struct FeedGuard(#[allow(dead_code)] Box<dyn Send>);

impl FeedGuard {
    pub fn new(running: Box<dyn Send>) -> FeedGuard {
        FeedGuard(running)
    }
}

/// The local feed: the folder's watcher, its events gathered into bursts once quiet for `quiet`.
pub struct FolderFeed<'a> {
    pub(crate) root: &'a std::path::Path,
    pub(crate) quiet: std::time::Duration,
}

impl ChangeFeed for FolderFeed<'_> {
    fn follow(&self, sink: Box<dyn Fn(vault::watch::Changes) + Send>) -> Result<FeedGuard, GatewayError> {
        let watch = vault::watch::watch(self.root, self.quiet, sink)?;
        Ok(FeedGuard::new(Box::new(watch)))
    }
}

/// A hold of a [`Lease`]: released when dropped.
#[derive(Debug)]
pub struct LeaseHold {
    pub epoch: u64,
    _held: Box<dyn std::any::Any + Send>,
}

impl LeaseHold {
    pub fn new(epoch: u64, held: Box<dyn std::any::Any + Send>) -> LeaseHold {
        LeaseHold { epoch, _held: held }
    }
}

/// The local lease: the vault's write lock (an exclusive `flock` every process of the machine
/// respects, released by the kernel when its holder dies, so no hold outlives its writer) and
/// this vault handle's counter of holds. The `flock` is what fences writers; it cannot be lost
/// while held, so the check never fails here. Epochs count one handle's holds only: they restart
/// in every process and when the configuration reopens the vault, and recovery does not read them.
#[derive(Debug, Default)]
pub struct FolderLease {
    epochs: AtomicU64,
}

impl FolderLease {
    pub(crate) fn acquire_on(&self, fs: &vault::fs::VaultFs) -> Result<LeaseHold, GatewayError> {
        // SECURITY(T-PROP4): one writer per vault across every process (server, CLI).
        let lock = fs.write_lock()?;
        let epoch = self.epochs.fetch_add(1, Ordering::Relaxed) + 1;
        Ok(LeaseHold::new(epoch, Box::new(lock)))
    }

    /// The epoch of the newest hold.
    pub(crate) fn epoch(&self) -> u64 {
        self.epochs.load(Ordering::Relaxed)
    }
}

/// A [`FolderLease`] on one vault's files.
pub(crate) struct FolderLeaseOn<'a> {
    pub lease: &'a FolderLease,
    pub fs: &'a vault::fs::VaultFs,
}

impl Lease for FolderLeaseOn<'_> {
    fn acquire(&self) -> Result<LeaseHold, GatewayError> {
        self.lease.acquire_on(self.fs)
    }

    /// A held `flock` cannot be lost while its file is open; only a newer hold of this process
    /// (which cannot exist while this one is held) would fail the check.
    fn check(&self, epoch: u64) -> Result<(), GatewayError> {
        let current = self.lease.epoch();
        if epoch == current {
            Ok(())
        } else {
            Err(GatewayError::Internal(format!(
                "the vault's write lease moved on (epoch {epoch} held, {current} current)"
            )))
        }
    }
}

#[cfg(all(test, unix))]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::Arc;

    use policy::{FolderPath, Layout, VaultPath};

    use super::*;
    use crate::core::VaultHandle;

    struct Folder {
        tmp: tempfile::TempDir,
        /// Where links lead: outside the vault.
        elsewhere: tempfile::TempDir,
        v: VaultHandle,
    }

    fn folder() -> Folder {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("conf")).unwrap();
        let layout = Layout::new(
            vec![FolderPath::parse("conf").unwrap()],
            vec![],
            VaultPath::parse("inbox").unwrap(),
            None,
        );
        let reader = vault::reader::Vault::open(tmp.path(), layout).unwrap();
        let v = VaultHandle {
            id: "conformance".into(),
            name: "conformance".into(),
            reader,
            group: Arc::default(),
            lease: FolderLease::default(),
            remote: None,
            checkout: None,
        };
        Folder {
            tmp,
            elsewhere: tempfile::tempdir().unwrap(),
            v,
        }
    }

    impl conformance::World for Folder {
        fn backend(&self) -> Box<dyn VaultBackend + '_> {
            self.v.files()
        }

        fn feed(&self) -> Box<dyn ChangeFeed + '_> {
            self.v.feed()
        }

        fn link_outside(&self, path: &str) -> Option<conformance::Outside<'_>> {
            let outside = self.elsewhere.path().join("target.md");
            std::fs::write(&outside, b"outside the vault\n").unwrap();
            let p = self.tmp.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(&outside, &p).unwrap();
            Some((
                b"outside the vault\n".to_vec(),
                Box::new(move || std::fs::read(&outside).unwrap()),
            ))
        }

        fn edit(&self, path: &str, bytes: Option<&[u8]>) {
            let p = self.tmp.path().join(path);
            match bytes {
                Some(b) => {
                    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                    std::fs::write(&p, b).unwrap();
                }
                None => std::fs::remove_file(&p).unwrap(),
            }
        }
    }

    /// `inbox::State` in a temporary folder (kept while the state is open).
    struct Sqlite(#[allow(dead_code)] tempfile::TempDir, inbox::State);

    impl state_conformance::StateWorld for Sqlite {
        fn store(&self) -> &dyn StateStore {
            &self.1
        }
        fn pending(&self, vault: &str, id: &str) {
            let meta = serde_json::json!({"id": id});
            self.1
                .insert_proposal(&inbox::NewProposal {
                    vault,
                    id,
                    slug: id,
                    kind: "new",
                    target: "notes/x.md",
                    created_by: "cred",
                    created_at: "2026-01-01T00:00:00Z",
                    meta: &meta,
                })
                .unwrap();
        }
        fn reject(&self, id: &str) {
            assert!(self.1.mark_rejected(id, "someone", "t", "no").unwrap());
        }
        fn status(&self, vault: &str, id: &str) -> String {
            self.1
                .proposal(vault, id)
                .unwrap()
                .unwrap()
                .status
                .as_str()
                .to_owned()
        }
        fn revision(&self, vault: &str) -> u64 {
            self.1.revision(vault).unwrap()
        }
        fn audit_head(&self) -> Option<inbox::AuditHead> {
            self.1.audit_head().unwrap()
        }
        fn key_answer(&self, principal: &str, key: &str) -> Option<serde_json::Value> {
            self.1.idempotency_get(principal, key).unwrap().map(|r| r.result)
        }
        fn fingerprint(&self, vault: &str) -> Option<String> {
            self.1.fingerprint(vault).unwrap()
        }
        fn open_intents(&self, vault: &str) -> usize {
            self.1.open_intents(vault).unwrap().len()
        }
        fn history_state(&self, vault: &str, id: &str) -> Option<String> {
            self.1
                .history_entry(vault, id)
                .unwrap()
                .map(|e| e.state.as_str().to_owned())
        }
        fn consumed_challenge(&self, vault: &str, id: &str) {
            let plan = serde_json::json!({});
            self.1
                .create_challenge(&inbox::NewChallenge {
                    id,
                    vault,
                    credential_id: "cred",
                    tool: "empty_trash",
                    args_hash: "args",
                    idempotency_key: "k",
                    plan: &plan,
                    plan_hash: "plan",
                    revision: 0,
                    expires_at: i64::MAX,
                    created_at: 0,
                })
                .unwrap();
            let intent = serde_json::json!({"intent": 1});
            assert!(self.1.consume_challenge(id, 1, &intent).unwrap());
        }
    }

    /// A store whose transaction keeps what its body recorded even when the body fails.
    struct Leaky(Sqlite);

    impl StateStore for Leaky {
        fn begin_intent(
            &self,
            vault: &str,
            key: &str,
            plan: &serde_json::Value,
            at: &str,
        ) -> Result<i64, GatewayError> {
            self.0.1.begin_intent(vault, key, plan, at).map_err(Into::into)
        }
        fn transact(
            &self,
            f: &mut dyn FnMut(&dyn StateTx) -> Result<(), GatewayError>,
        ) -> Result<(), GatewayError> {
            self.0.1.transact(|tx| {
                let _ = f(tx);
                Ok::<(), GatewayError>(())
            })
        }
        fn deferring(&self, f: &mut dyn FnMut() -> Result<(), GatewayError>) -> Result<(), GatewayError> {
            f()
        }
        fn sync(&self) -> Result<(), GatewayError> {
            Ok(())
        }
    }

    impl state_conformance::StateWorld for Leaky {
        fn store(&self) -> &dyn StateStore {
            self
        }
        fn pending(&self, vault: &str, id: &str) {
            self.0.pending(vault, id)
        }
        fn reject(&self, id: &str) {
            self.0.reject(id)
        }
        fn status(&self, vault: &str, id: &str) -> String {
            self.0.status(vault, id)
        }
        fn revision(&self, vault: &str) -> u64 {
            self.0.revision(vault)
        }
        fn audit_head(&self) -> Option<inbox::AuditHead> {
            self.0.audit_head()
        }
        fn key_answer(&self, principal: &str, key: &str) -> Option<serde_json::Value> {
            self.0.key_answer(principal, key)
        }
        fn fingerprint(&self, vault: &str) -> Option<String> {
            self.0.fingerprint(vault)
        }
        fn open_intents(&self, vault: &str) -> usize {
            self.0.open_intents(vault)
        }
        fn history_state(&self, vault: &str, id: &str) -> Option<String> {
            self.0.history_state(vault, id)
        }
        fn consumed_challenge(&self, vault: &str, id: &str) {
            self.0.consumed_challenge(vault, id)
        }
    }

    #[test]
    #[should_panic(expected = "a failed commit leaves the proposal pending")]
    fn a_store_that_keeps_a_failed_transactions_parts_fails_the_suite() {
        let dir = tempfile::tempdir().unwrap();
        let state = inbox::State::open(&dir.path().join("state.sqlite")).unwrap();
        state_conformance::a_failing_part_leaves_nothing(&Leaky(Sqlite(dir, state)));
    }

    #[test]
    fn the_sqlite_state_passes_the_state_conformance_suite() {
        let dir = tempfile::tempdir().unwrap();
        let state = inbox::State::open(&dir.path().join("state.sqlite")).unwrap();
        state_conformance::run_all(&Sqlite(dir, state));
    }

    #[test]
    fn the_folder_backend_passes_the_conformance_suite() {
        conformance::run_all(&folder());
    }

    /// A backend that writes a new note's bytes whatever the file holds.
    struct Careless(Folder);

    struct CarelessBackend<'a>(&'a Careless);

    impl VaultBackend for CarelessBackend<'_> {
        fn read(&self, zone: Zone, path: &str) -> Result<Option<(Vec<u8>, String)>, GatewayError> {
            self.0.0.v.files().read(zone, path)
        }
        fn store_blob(&self, hash: &str, bytes: &[u8]) -> Result<(), GatewayError> {
            self.0.0.v.files().store_blob(hash, bytes)
        }
        fn blob(&self, hash: &str) -> Result<Vec<u8>, GatewayError> {
            self.0.0.v.files().blob(hash)
        }
        fn has_blob(&self, hash: &str) -> Result<bool, GatewayError> {
            self.0.0.v.files().has_blob(hash)
        }
        fn remove_blob(&self, hash: &str) -> Result<bool, GatewayError> {
            self.0.0.v.files().remove_blob(hash)
        }
        fn remove(&self, zone: Zone, path: &str) -> Result<(), GatewayError> {
            self.0.0.v.files().remove(zone, path)
        }
        fn exec(&self, op: &FileOp) -> Result<Cas, GatewayError> {
            if let FileOp::Put { path, after, .. } = op {
                let bytes = self.blob(after)?;
                conformance::World::edit(&self.0.0, path, Some(&bytes));
                return Ok(Cas::Done);
            }
            self.0.0.v.files().exec(op)
        }
    }

    impl conformance::World for Careless {
        fn backend(&self) -> Box<dyn VaultBackend + '_> {
            Box::new(CarelessBackend(self))
        }
        fn edit(&self, path: &str, bytes: Option<&[u8]>) {
            self.0.edit(path, bytes)
        }
        fn link_outside(&self, path: &str) -> Option<conformance::Outside<'_>> {
            self.0.link_outside(path)
        }
        /// A feed that never says anything.
        fn feed(&self) -> Box<dyn ChangeFeed + '_> {
            struct Deaf;
            impl ChangeFeed for Deaf {
                fn follow(
                    &self,
                    _: Box<dyn Fn(vault::watch::Changes) + Send>,
                ) -> Result<FeedGuard, GatewayError> {
                    Ok(FeedGuard::new(Box::new(())))
                }
            }
            Box::new(Deaf)
        }
    }

    #[test]
    #[should_panic(expected = "a step on changed bytes answers Conflict")]
    fn a_backend_that_overwrites_an_edit_fails_the_suite() {
        conformance::an_outside_edit_is_never_overwritten(&Careless(folder()));
    }

    #[test]
    #[should_panic(expected = "a step through a link")]
    fn a_backend_that_writes_through_a_link_fails_the_suite() {
        conformance::a_link_is_never_followed(&Careless(folder()));
    }

    #[test]
    #[should_panic(expected = "an outside edit reaches the feed")]
    fn a_feed_that_misses_an_edit_fails_the_suite() {
        conformance::an_outside_edit_reaches_the_feed(&Careless(folder()));
    }

    /// A backend whose every step answers `Ambiguous`; `lands` says whether the step ran first.
    struct Unsure<'a> {
        f: &'a Folder,
        lands: bool,
    }

    impl VaultBackend for Unsure<'_> {
        fn read(&self, zone: Zone, path: &str) -> Result<Option<(Vec<u8>, String)>, GatewayError> {
            self.f.v.files().read(zone, path)
        }
        fn store_blob(&self, hash: &str, bytes: &[u8]) -> Result<(), GatewayError> {
            self.f.v.files().store_blob(hash, bytes)
        }
        fn blob(&self, hash: &str) -> Result<Vec<u8>, GatewayError> {
            self.f.v.files().blob(hash)
        }
        fn has_blob(&self, hash: &str) -> Result<bool, GatewayError> {
            self.f.v.files().has_blob(hash)
        }
        fn remove_blob(&self, hash: &str) -> Result<bool, GatewayError> {
            self.f.v.files().remove_blob(hash)
        }
        fn remove(&self, zone: Zone, path: &str) -> Result<(), GatewayError> {
            self.f.v.files().remove(zone, path)
        }
        /// A step that lands (or conflicts) and then cannot say so.
        fn exec(&self, op: &FileOp) -> Result<Cas, GatewayError> {
            if self.lands
                && let Cas::Conflict(p) = self.f.v.files().exec(op)?
            {
                return Ok(Cas::Conflict(p));
            }
            Ok(Cas::Ambiguous)
        }
    }

    /// The folder behind a backend that never knows whether its steps landed.
    struct UnsureWorld(Folder);

    impl conformance::World for UnsureWorld {
        fn backend(&self) -> Box<dyn VaultBackend + '_> {
            Box::new(Unsure {
                f: &self.0,
                lands: true,
            })
        }
        fn edit(&self, path: &str, bytes: Option<&[u8]>) {
            self.0.edit(path, bytes)
        }
        fn link_outside(&self, path: &str) -> Option<conformance::Outside<'_>> {
            self.0.link_outside(path)
        }
        fn feed(&self) -> Box<dyn ChangeFeed + '_> {
            self.0.feed()
        }
    }

    #[test]
    fn a_backend_that_lands_steps_without_knowing_it_passes_the_suite() {
        conformance::run_all(&UnsureWorld(folder()));
    }

    #[test]
    fn an_ambiguous_step_is_settled_by_what_the_backend_holds() {
        use conformance::World;
        let f = folder();
        let bytes = b"the step's bytes\n";
        let hash = proposals::sha256_hex(bytes);
        f.v.files().store_blob(&hash, bytes).unwrap();
        let put = |path: &str| FileOp::Put {
            zone: Zone::Note,
            path: path.into(),
            before: None,
            after: hash.clone(),
        };
        // It landed: done.
        let landed = Unsure { f: &f, lands: true };
        assert_eq!(run_step(&landed, &put("conf/landed.md")).unwrap(), Cas::Done);
        assert_eq!(std::fs::read(f.tmp.path().join("conf/landed.md")).unwrap(), bytes);
        // It did not land: an error (the transaction rolls back), and nothing was written twice.
        let lost = Unsure { f: &f, lands: false };
        assert!(run_step(&lost, &put("conf/lost.md")).is_err());
        assert!(!f.tmp.path().join("conf/lost.md").exists());
        // A person's bytes are there: a conflict, theirs kept.
        f.edit("conf/theirs.md", Some(b"a person's\n"));
        assert_eq!(
            run_step(&lost, &put("conf/theirs.md")).unwrap(),
            Cas::Conflict("conf/theirs.md".into())
        );
        assert_eq!(
            std::fs::read(f.tmp.path().join("conf/theirs.md")).unwrap(),
            b"a person's\n"
        );
    }

    #[test]
    fn each_hold_of_the_folder_lease_has_a_newer_epoch_and_an_older_one_cannot_commit() {
        let f = folder();
        let first = f.v.lease().acquire().unwrap();
        f.v.lease().check(first.epoch).unwrap();
        let old = first.epoch;
        drop(first);
        let second = f.v.lease().acquire().unwrap();
        assert!(second.epoch > old);
        f.v.lease().check(second.epoch).unwrap();
        assert!(
            f.v.lease().check(old).is_err(),
            "a write planned under an older hold"
        );
        // The hold is the vault's write lock: no other writer gets it meanwhile.
        assert!(f.v.reader.fs().try_write_lock().unwrap().is_none());
        drop(second);
        assert!(f.v.reader.fs().try_write_lock().unwrap().is_some());
    }
}
