//! Group commit of a vault's writes (docs/contract.md#rules-of-the-write-path "Many writers share their syncs"): applies that wait
//! for the vault's writer are taken together, under one hold of its write lock, and share their
//! fsyncs. Each keeps its own checks, intent, files, audit record, commit and `_applied.jsonl`
//! line; what they share is the sync that makes a step of all of them durable at once:
//!
//! | phase  | each member, in turn where ordered         | then one sync for the group        |
//! |--------|--------------------------------------------|------------------------------------|
//! | intent | records its intent (log written, unsynced) | the state database's log           |
//! | files  | runs its file operations                   | every folder they touched          |
//! | audit  | appends its record, in submission order    | the audit log                      |
//! | commit | commits, in submission order               | the state database's log           |
//! | post   | its `_applied.jsonl` line, git, in order   | `_applied.jsonl`                   |
//!
//! A member never starts a phase before the sync of the one before covered every member, so each
//! transaction keeps the order of docs/contract.md#rules-of-the-write-path (intent durable before
//! a file is touched, folders before the audit line, the audit line before the commit). A member
//! that fails leaves the group (its own rollback syncs alone); the others go on. Members touch
//! disjoint notes ([`Claims`]); a job whose claims meet an earlier one's waits for the next group.
//!
//! It must never let a member run a phase while another member's sync of the phase before is
//! pending, nor hold the write lock after its last member left.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// At most this many writes share one group.
pub(crate) const MAX_GROUP: usize = 64;

/// The steps a member takes, in this order (see the table above).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Intent = 0,
    Files = 1,
    Audit = 2,
    Commit = 3,
    Post = 4,
}

const PHASES: usize = 5;

/// What a write will touch, known before it takes the lock: two jobs whose claims meet never
/// share a group, so a group's members never read or write each other's files.
#[derive(Debug, Clone, Default)]
pub(crate) struct Claims {
    /// Alone in its group (undo, redo, critical calls, moves, deletes, reject).
    exclusive: bool,
    /// Proposal ids and idempotency keys: equal keys meet.
    keys: Vec<String>,
    /// Notes, folded as the file system may fold them (docs/contract.md#paths): equal folds meet.
    notes: Vec<String>,
    /// Folders a note lives in, (folded, as spelled): two spellings of one fold meet, since both
    /// could be created.
    folders: Vec<(String, String)>,
}

impl Claims {
    /// A write that runs alone.
    pub(crate) fn exclusive() -> Claims {
        Claims {
            exclusive: true,
            ..Claims::default()
        }
    }

    /// What an apply of `p` by `principal` under `key` touches, local or team (crate::teamgroup):
    /// a new note or a whole-text patch writes its target alone; a move (links rewritten
    /// anywhere) and a delete (the trash) run alone.
    pub(crate) fn of_apply(p: &proposals::Proposal, principal: &str, key: &str) -> Claims {
        match p.kind {
            proposals::Kind::New | proposals::Kind::Patch => Claims::shared()
                .key(format!("proposal {}", p.id))
                .key(format!("key {principal}\n{key}"))
                .note(&p.target),
            _ => Claims::exclusive(),
        }
    }

    /// A write that may share a group with writes it does not meet.
    pub(crate) fn shared() -> Claims {
        Claims::default()
    }

    pub(crate) fn is_exclusive(&self) -> bool {
        self.exclusive
    }

    pub(crate) fn key(mut self, key: String) -> Claims {
        self.keys.push(key);
        self
    }

    /// The note at `path` and every folder above it.
    pub(crate) fn note(mut self, path: &str) -> Claims {
        let folded = vault::write::fold_name(path);
        let mut at = 0;
        while let Some(i) = path[at..].find('/') {
            let end = at + i;
            self.folders
                .push((vault::write::fold_name(&path[..end]), path[..end].to_owned()));
            at = end + 1;
        }
        self.notes.push(folded);
        self
    }

    /// SECURITY(T-PROP4): two writes that meet never share a group.
    pub(crate) fn meets(&self, other: &Claims) -> bool {
        self.exclusive
            || other.exclusive
            || self.keys.iter().any(|k| other.keys.contains(k))
            || self
                .notes
                .iter()
                .any(|n| other.notes.contains(n) || other.folders.iter().any(|(f, _)| f == n))
            || other
                .notes
                .iter()
                .any(|n| self.folders.iter().any(|(f, _)| f == n))
            || self.folders.iter().any(|(f, spelled)| {
                other
                    .folders
                    .iter()
                    .any(|(g, other_spelled)| f == g && spelled != other_spelled)
            })
    }
}

/// One vault's queue of writes and the group holding its write lock, shared by this process's
/// threads (other processes wait on the lock itself).
#[derive(Debug, Default)]
pub(crate) struct Group {
    state: Mutex<Queue>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct Queue {
    next_ticket: u64,
    next_run: u64,
    waiting: VecDeque<(u64, Claims)>,
    /// Tickets taken into the running group: (run, index).
    admitted: HashMap<u64, (u64, usize)>,
    /// A leader is taking the lock.
    leading: bool,
    run: Option<Run>,
}

/// The vault's lease (or, in tests, anything): held until dropped.
pub(crate) type Held = crate::storage::LeaseHold;

#[derive(Debug)]
struct Run {
    id: u64,
    /// Released (the lock file closed) when the last member leaves.
    lock: Option<Held>,
    /// The epoch of that hold.
    epoch: u64,
    left: Vec<bool>,
    phases: [PhaseState; PHASES],
}

#[derive(Debug, Default)]
struct PhaseState {
    /// Members whose ordered turn in this phase is over.
    turned: Vec<bool>,
    arrived: Vec<bool>,
    syncs: vault::write::Syncs,
    syncing: bool,
    /// The phase's sync result, once it ran.
    result: Option<Result<(), String>>,
}

impl Run {
    fn new(id: u64, lock: Held, members: usize) -> Run {
        let phase = || PhaseState {
            turned: vec![false; members],
            arrived: vec![false; members],
            ..PhaseState::default()
        };
        Run {
            id,
            epoch: lock.epoch,
            lock: Some(lock),
            left: vec![false; members],
            phases: [phase(), phase(), phase(), phase(), phase()],
        }
    }
}

fn lock(m: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    // The queue's flags are set in single statements: a panic leaves none half-changed.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Group {
    /// Waits for this write's turn and returns its membership, which holds the vault's write lock
    /// (with others) until every member has left. The first waiter takes the lock with `take`
    /// (which also settles interrupted writes) and admits every waiting write that meets none
    /// before it, up to [`MAX_GROUP`], in submission order.
    pub(crate) fn join<E>(
        self: &Arc<Self>,
        claims: Claims,
        take: impl FnOnce() -> Result<Held, E>,
    ) -> Result<Member, E> {
        let mut q = lock(&self.state);
        let ticket = q.next_ticket;
        q.next_ticket += 1;
        q.waiting.push_back((ticket, claims));
        tracing::debug!(waiting = q.waiting.len(), "a write waits for the vault's writer");
        let mut take = Some(take);
        loop {
            if let Some((run, index)) = q.admitted.remove(&ticket) {
                return Ok(self.member(run, index));
            }
            let first = q.waiting.front().map(|(t, _)| *t) == Some(ticket);
            if first && q.run.is_none() && !q.leading {
                let Some(take) = take.take() else {
                    // Unreachable: a leader leaves the queue whether it got the lock or not.
                    q = self.changed.wait(q).unwrap_or_else(PoisonError::into_inner);
                    continue;
                };
                q.leading = true;
                drop(q);
                // A panic while taking the lock (it settles interrupted writes) must not leave the
                // queue led by nobody: the guard steps down and takes the ticket out.
                let leader = Leading {
                    group: self,
                    ticket,
                    done: false,
                };
                let taken = take();
                q = lock(&self.state);
                q.leading = false;
                leader.defuse();
                let held = match taken {
                    Ok(held) => held,
                    Err(e) => {
                        q.waiting.retain(|(t, _)| *t != ticket);
                        self.changed.notify_all();
                        return Err(e);
                    }
                };
                let members = admit(&mut q.waiting);
                tracing::debug!(
                    members = members.len(),
                    left_waiting = q.waiting.len(),
                    "a write group formed"
                );
                let id = q.next_run;
                q.next_run += 1;
                for (index, t) in members.iter().enumerate().skip(1) {
                    q.admitted.insert(*t, (id, index));
                }
                q.run = Some(Run::new(id, held, members.len()));
                self.changed.notify_all();
                return Ok(self.member(id, 0));
            }
            q = self.changed.wait(q).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// How many writes wait to be admitted (tests).
    #[cfg(test)]
    fn waiting(&self) -> usize {
        lock(&self.state).waiting.len()
    }

    fn member(self: &Arc<Self>, run: u64, index: usize) -> Member {
        Member {
            group: Arc::clone(self),
            run,
            index,
        }
    }
}

/// Steps a leader down if taking the lock panicked.
struct Leading<'a> {
    group: &'a Group,
    ticket: u64,
    done: bool,
}

impl Leading<'_> {
    fn defuse(mut self) {
        self.done = true;
    }
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut q = lock(&self.group.state);
        q.leading = false;
        q.waiting.retain(|(t, _)| *t != self.ticket);
        self.group.changed.notify_all();
    }
}

/// Gives a phase a failed result if its sync panicked.
struct Syncing<'a> {
    member: &'a Member,
    phase: usize,
    done: bool,
}

impl Syncing<'_> {
    fn defuse(mut self) {
        self.done = true;
    }
}

impl Drop for Syncing<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let g = &self.member.group;
        let mut q = lock(&g.state);
        if let Some(run) = q.run.as_mut().filter(|r| r.id == self.member.run) {
            run.phases[self.phase].syncing = false;
            run.phases[self.phase].result = Some(Err("the sync failed".into()));
        }
        g.changed.notify_all();
    }
}

/// Takes the group out of the front of the queue: the first waiter, then each later one that
/// meets neither a member nor a waiter it would overtake, up to [`MAX_GROUP`].
fn admit(waiting: &mut VecDeque<(u64, Claims)>) -> Vec<u64> {
    let mut members: Vec<(u64, Claims)> = Vec::new();
    let mut passed: Vec<(u64, Claims)> = Vec::new();
    if let Some(first) = waiting.pop_front() {
        let alone = first.1.exclusive;
        members.push(first);
        // Looks at most this far down the queue (bounded work under the queue's mutex).
        let mut looked = 0;
        while !alone && members.len() < MAX_GROUP && looked < 2 * MAX_GROUP {
            looked += 1;
            let Some(next) = waiting.pop_front() else { break };
            if next.1.exclusive {
                waiting.push_front(next);
                break;
            }
            let meets = members.iter().chain(passed.iter()).any(|(_, c)| c.meets(&next.1));
            if meets {
                passed.push(next);
            } else {
                members.push(next);
            }
        }
    }
    for p in passed.into_iter().rev() {
        waiting.push_front(p);
    }
    members.into_iter().map(|(t, _)| t).collect()
}

/// One write's place in a running group. Dropping it leaves the group (a failed or finished
/// write); the last to leave releases the vault's write lock.
#[derive(Debug)]
pub(crate) struct Member {
    group: Arc<Group>,
    run: u64,
    index: usize,
}

impl Member {
    /// The epoch of the lease the group holds.
    pub(crate) fn epoch(&self) -> u64 {
        lock(&self.group.state)
            .run
            .as_ref()
            .filter(|r| r.id == self.run)
            .map_or(0, |r| r.epoch)
    }

    /// Waits until every earlier member finished (or left) its turn in `phase`, then runs `f`:
    /// what the members do in a phase of ordered steps happens in submission order.
    pub(crate) fn turn<T>(&self, phase: Phase, f: impl FnOnce() -> T) -> T {
        let g = &self.group;
        let mut q = lock(&g.state);
        loop {
            let ready = match q.run.as_ref() {
                Some(run) if run.id == self.run => {
                    (0..self.index).all(|j| run.left[j] || run.phases[phase as usize].turned[j])
                }
                _ => true,
            };
            if ready {
                break;
            }
            q = g.changed.wait(q).unwrap_or_else(PoisonError::into_inner);
        }
        drop(q);
        let out = f();
        let mut q = lock(&g.state);
        if let Some(run) = q.run.as_mut().filter(|r| r.id == self.run) {
            run.phases[phase as usize].turned[self.index] = true;
        }
        g.changed.notify_all();
        out
    }

    /// Adds this member's unsynced files to `phase` and waits until every member still in the
    /// group has: then one of them runs `sync` once, over all of their files, and every member
    /// gets its result.
    pub(crate) fn sync(
        &self,
        phase: Phase,
        files: vault::write::Syncs,
        sync: impl FnOnce(vault::write::Syncs) -> Result<(), String>,
    ) -> Result<(), String> {
        let g = &self.group;
        let mut q = lock(&g.state);
        let p = phase as usize;
        match q.run.as_mut().filter(|r| r.id == self.run) {
            Some(run) => {
                run.phases[p].syncs.merge(files);
                run.phases[p].arrived[self.index] = true;
            }
            // Not in a running group (cannot happen while this member has not left): alone.
            None => {
                drop(q);
                return sync(files);
            }
        }
        g.changed.notify_all();
        loop {
            let Some(run) = q.run.as_mut().filter(|r| r.id == self.run) else {
                return Err("the group ended before its sync".into());
            };
            let all = (0..run.left.len()).all(|j| run.left[j] || run.phases[p].arrived[j]);
            let st = &mut run.phases[p];
            if let Some(r) = &st.result {
                return r.clone();
            }
            if all && !st.syncing {
                st.syncing = true;
                let files = std::mem::take(&mut st.syncs);
                drop(q);
                // A panic in the sync must not leave the others waiting for its result.
                let syncing = Syncing {
                    member: self,
                    phase: p,
                    done: false,
                };
                let r = sync(files);
                syncing.defuse();
                q = lock(&g.state);
                if let Some(run) = q.run.as_mut().filter(|r| r.id == self.run) {
                    run.phases[p].syncing = false;
                    run.phases[p].result = Some(r.clone());
                }
                g.changed.notify_all();
                return r;
            }
            q = g.changed.wait(q).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let g = &self.group;
        let mut q = lock(&g.state);
        let done = match q.run.as_mut().filter(|r| r.id == self.run) {
            Some(run) => {
                run.left[self.index] = true;
                run.left.iter().all(|l| *l)
            }
            None => false,
        };
        if done && let Some(mut run) = q.run.take() {
            // Closing the lock file releases the vault's write lock.
            drop(run.lock.take());
        }
        g.changed.notify_all();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn notes_and_folders_meet_as_the_file_system_would_fold_them() {
        let a = Claims::shared().note("x/A.md");
        assert!(a.meets(&Claims::shared().note("x/a.md")));
        assert!(!a.meets(&Claims::shared().note("x/b.md")));
        // Two spellings of one new folder could both be created.
        assert!(
            Claims::shared()
                .note("X/b.md")
                .meets(&Claims::shared().note("x/c.md"))
        );
        // A note named as another's folder.
        assert!(
            Claims::shared()
                .note("x.md")
                .meets(&Claims::shared().note("X.md/y.md"))
        );
        assert!(
            Claims::shared()
                .key("p1".into())
                .meets(&Claims::shared().key("p1".into()))
        );
        assert!(Claims::exclusive().meets(&Claims::shared()));
    }

    #[test]
    fn a_group_takes_the_waiters_that_meet_nothing_before_them_in_order() {
        let mut w: VecDeque<(u64, Claims)> = VecDeque::new();
        w.push_back((1, Claims::shared().note("a.md")));
        w.push_back((2, Claims::shared().note("a.md")));
        w.push_back((3, Claims::shared().note("b.md")));
        // Meets 2, which it would overtake.
        w.push_back((4, Claims::shared().note("A.md")));
        w.push_back((5, Claims::exclusive()));
        w.push_back((6, Claims::shared().note("c.md")));
        assert_eq!(admit(&mut w), vec![1, 3]);
        assert_eq!(w.iter().map(|(t, _)| *t).collect::<Vec<_>>(), vec![2, 4, 5, 6]);
        assert_eq!(admit(&mut w), vec![2]);
        assert_eq!(admit(&mut w), vec![4]);
        assert_eq!(admit(&mut w), vec![5]);
        assert_eq!(admit(&mut w), vec![6]);
    }
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Stands for the write lock: counts its releases.
    struct Lock(Arc<AtomicUsize>);
    impl Drop for Lock {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn wait_for(what: impl Fn() -> bool) {
        for _ in 0..2000 {
            if what() {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("timed out");
    }

    /// Joins `claims` one after the other (each queued before the next), the first taking the
    /// "lock" only once all are queued, and runs `body(i, member)` on each.
    fn run_jobs(
        claims: Vec<Claims>,
        body: impl Fn(usize, Member) + Send + Sync + 'static,
    ) -> Arc<AtomicUsize> {
        let g = Arc::new(Group::default());
        let released = Arc::new(AtomicUsize::new(0));
        let queued = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let body = Arc::new(body);
        let mut threads = Vec::new();
        for (i, c) in claims.into_iter().enumerate() {
            let (g2, rel, body, q2) = (
                Arc::clone(&g),
                Arc::clone(&released),
                Arc::clone(&body),
                Arc::clone(&queued),
            );
            threads.push(std::thread::spawn(move || {
                let m = g2
                    .join(c, || {
                        // The lock is taken once every job is queued.
                        wait_for(|| q2.load(Ordering::SeqCst));
                        Ok::<Held, ()>(crate::storage::LeaseHold::new(1, Box::new(Lock(rel))))
                    })
                    .unwrap();
                body(i, m);
            }));
            wait_for(|| g.waiting() == i + 1);
        }
        queued.store(true, Ordering::SeqCst);
        for t in threads {
            t.join().unwrap();
        }
        released
    }

    #[test]
    fn members_sync_each_phase_once_and_take_turns_in_submission_order() {
        let syncs = Arc::new(AtomicUsize::new(0));
        let order = Arc::new(Mutex::new(Vec::new()));
        let (s2, o2) = (Arc::clone(&syncs), Arc::clone(&order));
        let claims = (0..6)
            .map(|i| Claims::shared().note(&format!("n{i}.md")))
            .collect();
        let released = run_jobs(claims, move |i, m| {
            // Later members reach the turn first: the turn still goes in submission order.
            std::thread::sleep(Duration::from_millis(5 * (6 - i as u64)));
            m.turn(Phase::Audit, || o2.lock().unwrap().push(i));
            m.sync(Phase::Audit, vault::write::Syncs::default(), |_| {
                s2.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .unwrap();
            m.turn(Phase::Commit, || o2.lock().unwrap().push(10 + i));
        });
        assert_eq!(syncs.load(Ordering::SeqCst), 1, "one sync for the group");
        assert_eq!(
            *order.lock().unwrap(),
            vec![0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15]
        );
        assert_eq!(released.load(Ordering::SeqCst), 1, "one lock, released once");
    }

    #[test]
    fn a_member_that_leaves_does_not_hold_up_the_others_sync_or_turn() {
        let syncs = Arc::new(AtomicUsize::new(0));
        let s2 = Arc::clone(&syncs);
        let claims = (0..4)
            .map(|i| Claims::shared().note(&format!("n{i}.md")))
            .collect();
        run_jobs(claims, move |i, m| {
            if i == 1 {
                // Refused by its checks: leaves without a sync or a turn.
                std::thread::sleep(Duration::from_millis(30));
                drop(m);
                return;
            }
            m.sync(Phase::Intent, vault::write::Syncs::default(), |_| {
                s2.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .unwrap();
            m.turn(Phase::Commit, || ());
        });
        assert_eq!(syncs.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_failed_sync_is_every_members_answer() {
        let claims = (0..3)
            .map(|i| Claims::shared().note(&format!("n{i}.md")))
            .collect();
        let failed = Arc::new(AtomicUsize::new(0));
        let f2 = Arc::clone(&failed);
        run_jobs(claims, move |_, m| {
            let r = m.sync(Phase::Files, vault::write::Syncs::default(), |_| {
                Err("disk".into())
            });
            if r == Err("disk".to_string()) {
                f2.fetch_add(1, Ordering::SeqCst);
            }
        });
        assert_eq!(failed.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn a_panic_taking_the_lock_or_in_a_sync_leaves_nobody_waiting_for_good() {
        let g = Arc::new(Group::default());
        let g2 = Arc::clone(&g);
        let panicked = std::thread::spawn(move || {
            let _ = g2.join(Claims::exclusive(), || -> Result<Held, ()> {
                panic!("recovery panicked")
            });
        })
        .join();
        assert!(panicked.is_err());
        // The next write leads.
        let released = Arc::new(AtomicUsize::new(0));
        let rel = Arc::clone(&released);
        let m = g
            .join(Claims::shared(), || {
                Ok::<Held, ()>(crate::storage::LeaseHold::new(1, Box::new(Lock(rel))))
            })
            .unwrap();
        // A sync that panics answers its phase with an error instead of hanging it.
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            m.sync(Phase::Intent, vault::write::Syncs::default(), |_| {
                panic!("fsync panicked")
            })
        }));
        assert!(caught.is_err());
        assert_eq!(
            m.sync(Phase::Intent, vault::write::Syncs::default(), |_| Ok(())),
            Err("the sync failed".to_string())
        );
        drop(m);
        assert_eq!(released.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn writes_that_meet_run_in_separate_groups_one_lock_each() {
        let syncs = Arc::new(AtomicUsize::new(0));
        let s2 = Arc::clone(&syncs);
        let claims = vec![
            Claims::shared().note("a.md"),
            Claims::shared().note("A.md"),
            Claims::exclusive(),
        ];
        let released = run_jobs(claims, move |_, m| {
            m.sync(Phase::Intent, vault::write::Syncs::default(), |_| {
                s2.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .unwrap();
        });
        assert_eq!(syncs.load(Ordering::SeqCst), 3);
        assert_eq!(released.load(Ordering::SeqCst), 3);
    }
}
