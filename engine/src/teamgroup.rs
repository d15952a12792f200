//! One push for a group of a team vault's applies (docs/contract.md#team-lease "One push for a
//! group"). The applies of this gateway that wait for a vault while one of them holds its lease
//! ride with that one, the group's leader: each in turn checks its proposal, records its intent and
//! builds its one commit on the commit before it; then the leader pushes the last commit once, by
//! compare-and-swap to the head the first was built on. Each job records the commit it was built
//! on as its base, as one pushed alone does: recovery (crate::teamsettle) pushes a commit again
//! only onto that base, so never another job's commit with it. The push's unknown outcome is
//! settled by the same table (proposals::recovery) for the whole group: its last commit landed,
//! or none did. Each member keeps its own checks, intent, commit, record and answer.
//!
//! It must never let a member build on a commit whose job is not recorded, let members that meet
//! (crate::group::Claims) share a group, or let a member answer before the push that carries its
//! commit landed.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use proposals::Proposal;

use crate::api::ApplyOut;
use crate::call::Call;
use crate::core::{Core, VaultHandle};
use crate::error::GatewayError;
use crate::group::Claims;
use crate::remote::TeamVault;
use crate::storage::team::VaultHold;
use crate::storage::{TeamProposal, TeamState};

/// At most this many applies share one push.
pub(crate) const MAX_MEMBERS: usize = 8;

/// Each team vault's gate in this process (`Core::team_groups`).
#[derive(Default)]
pub(crate) struct Gates {
    gates: Mutex<HashMap<String, Arc<Gate>>>,
}

#[derive(Default)]
struct Gate {
    state: Mutex<GateState>,
    turn: Condvar,
}

#[derive(Default)]
struct GateState {
    /// An apply of this process leads: it waits for the vault's lease or holds it.
    led: bool,
    /// The applies waiting, first come first served, with what they touch.
    waiting: VecDeque<(u64, Claims)>,
    next: u64,
    /// Waiters the open group took in.
    invited: HashMap<u64, Arc<Group>>,
    /// The leader's group while it takes members.
    open: Option<Arc<Group>>,
}

/// What a group's push came to, for each member.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    /// The pushed commit holds every member's; `indexed`: this gateway's clone holds it too.
    Landed { indexed: bool },
    /// The remote moved: no member's commit can land (each is decided again alone).
    NotLanded,
    /// The push failed; `uncertain`: it may still land (the jobs stay for recovery).
    Failed { why: String, uncertain: bool },
}

/// A group of applies sharing one push under one hold of the vault's lease.
pub(crate) struct Group {
    /// The leader's hold: every member's records carry its fence.
    pub(crate) hold: Arc<dyn VaultHold>,
    state: Mutex<GroupState>,
    changed: Condvar,
}

struct GroupState {
    /// The last commit built: the next member builds on it.
    tip: String,
    claims: Vec<Claims>,
    /// Members in (the leader too).
    members: usize,
    /// Members taken in whose commit is not built yet.
    pending: usize,
    building: bool,
    /// Takes no member; a member not built by then leaves.
    closed: bool,
    /// The push began: a group ended without an outcome may have landed.
    pushing: bool,
    touched: Vec<String>,
    outcome: Option<Outcome>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How an apply passed the gate.
pub(crate) enum Entered {
    /// It leads: it takes the lease itself, and may open a group.
    Lead(Lead),
    /// It rides in the group a leader opened.
    Ride(Arc<Group>),
}

impl Gates {
    /// Waits (at most `wait`) until the apply touching `claims` leads or is taken into a group;
    /// `VAULT_BUSY` after `wait`.
    pub(crate) fn enter(&self, vault: &str, claims: Claims, wait: Duration) -> Result<Entered, GatewayError> {
        let gate = locked(&self.gates).entry(vault.to_owned()).or_default().clone();
        let deadline = Instant::now() + wait;
        let mut s = locked(&gate.state);
        let me = s.next;
        s.next += 1;
        // A group open now, with room and nothing of this apply in it, takes it at once.
        if let Some(group) = s.open.clone()
            && group.take(&claims)
        {
            return Ok(Entered::Ride(group));
        }
        s.waiting.push_back((me, claims));
        loop {
            if let Some(group) = s.invited.remove(&me) {
                return Ok(Entered::Ride(group));
            }
            if !s.led && s.waiting.front().is_some_and(|(n, _)| *n == me) {
                s.waiting.pop_front();
                s.led = true;
                return Ok(Entered::Lead(Lead {
                    gate: gate.clone(),
                    group: None,
                }));
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                s.waiting.retain(|(n, _)| *n != me);
                drop(s);
                gate.turn.notify_all();
                return Err(GatewayError::VaultBusy(format!(
                    "other applies to vault '{vault}' are under way on this gateway; retry with \
                     the same idempotencyKey"
                )));
            };
            s = gate
                .turn
                .wait_timeout(s, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// An apply that leads: its place at the gate, what it touches, and the hold a group shares.
pub(crate) type Leading = (Lead, Claims, Arc<dyn VaultHold>);

/// The leader's place at the gate; given up (dropped) when its apply ends.
pub(crate) struct Lead {
    gate: Arc<Gate>,
    group: Option<Arc<Group>>,
}

impl Lead {
    /// Opens a group after the leader's commit `tip` when applies of this gateway wait, taking
    /// them in (first come, first served; none that meets a member); `None` when none waits or
    /// one was opened already.
    pub(crate) fn open(
        &mut self,
        hold: &Arc<dyn VaultHold>,
        tip: &str,
        claims: Claims,
        touched: &[String],
    ) -> Option<Arc<Group>> {
        if self.group.is_some() {
            return None;
        }
        let mut s = locked(&self.gate.state);
        if s.waiting.is_empty() {
            return None;
        }
        let group = Arc::new(Group {
            hold: hold.clone(),
            state: Mutex::new(GroupState {
                tip: tip.to_owned(),
                claims: vec![claims],
                members: 1,
                pending: 0,
                building: false,
                closed: false,
                pushing: false,
                touched: touched.to_vec(),
                outcome: None,
            }),
            changed: Condvar::new(),
        });
        let waiting: Vec<(u64, Claims)> = s.waiting.iter().cloned().collect();
        for (n, claims) in waiting {
            if group.take(&claims) {
                s.waiting.retain(|(m, _)| *m != n);
                s.invited.insert(n, group.clone());
            }
        }
        s.open = Some(group.clone());
        drop(s);
        self.gate.turn.notify_all();
        self.group = Some(group.clone());
        Some(group)
    }

    /// Waits (at most `wait`) until every member taken in built its commit, then closes the
    /// group: the commit to push (the last built) and every note the members touch.
    pub(crate) fn close(&self, group: &Group, wait: Duration) -> (String, Vec<String>) {
        let deadline = Instant::now() + wait;
        let mut g = locked(&group.state);
        while g.pending > 0 || g.building {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            g = group
                .changed
                .wait_timeout(g, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        g.closed = true;
        g.pushing = true;
        let out = (g.tip.clone(), g.touched.clone());
        drop(g);
        let mut s = locked(&self.gate.state);
        s.open = None;
        // Invited waiters not woken yet find the group closed and leave it.
        out
    }
}

impl Drop for Lead {
    /// Lets the next waiter lead; a group left without an outcome tells its members so.
    fn drop(&mut self) {
        if let Some(group) = self.group.take() {
            let pushing = locked(&group.state).pushing;
            group.settle(Outcome::Failed {
                why: "the apply leading its group stopped before its push was answered".into(),
                uncertain: pushing,
            });
        }
        let mut s = locked(&self.gate.state);
        s.led = false;
        s.open = None;
        drop(s);
        self.gate.turn.notify_all();
    }
}

/// A member's turn to build; leaving it unbuilt (dropped) lets the next build.
pub(crate) struct Turn<'g> {
    group: &'g Group,
    built: bool,
}

impl Group {
    /// Takes in an apply touching `claims` if there is room and it meets no member.
    fn take(&self, claims: &Claims) -> bool {
        let mut g = locked(&self.state);
        if g.closed || g.members >= MAX_MEMBERS || g.claims.iter().any(|c| c.meets(claims)) {
            return false;
        }
        g.claims.push(claims.clone());
        g.members += 1;
        g.pending += 1;
        true
    }

    /// Waits for this member's turn to build: the commit to build on, or `None` when the group
    /// closed first (the member leaves it).
    pub(crate) fn turn(&self, wait: Duration) -> Option<(Turn<'_>, String)> {
        let deadline = Instant::now() + wait;
        let mut g = locked(&self.state);
        loop {
            if g.closed {
                g.pending = g.pending.saturating_sub(1);
                drop(g);
                self.changed.notify_all();
                return None;
            }
            if !g.building {
                g.building = true;
                let tip = g.tip.clone();
                return Some((
                    Turn {
                        group: self,
                        built: false,
                    },
                    tip,
                ));
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            g = self
                .changed
                .wait_timeout(g, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Settles the group: every member waiting for the push hears `outcome` (the first one
    /// stays).
    pub(crate) fn settle(&self, outcome: Outcome) {
        let mut g = locked(&self.state);
        g.closed = true;
        if g.outcome.is_none() {
            g.outcome = Some(outcome);
        }
        drop(g);
        self.changed.notify_all();
    }

    /// What the group's push came to, waiting at most `wait` (then unknown: it may land).
    pub(crate) fn outcome(&self, wait: Duration) -> Outcome {
        let deadline = Instant::now() + wait;
        let mut g = locked(&self.state);
        loop {
            if let Some(o) = &g.outcome {
                return o.clone();
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return Outcome::Failed {
                    why: "its group's push was not answered in time".into(),
                    uncertain: true,
                };
            };
            g = self
                .changed
                .wait_timeout(g, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl Turn<'_> {
    /// This member's job recorded `commit` (built on the tip): the next builds on it. `false`
    /// when the group closed meanwhile (the commit is not pushed; the member leaves).
    pub(crate) fn built(mut self, commit: &str, touched: &[String]) -> bool {
        let mut g = locked(&self.group.state);
        g.building = false;
        g.pending = g.pending.saturating_sub(1);
        self.built = true;
        let taken = !g.closed;
        if taken {
            g.tip = commit.to_owned();
            g.touched.extend(touched.iter().cloned());
        }
        drop(g);
        self.group.changed.notify_all();
        taken
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if self.built {
            return;
        }
        let mut g = locked(&self.group.state);
        g.building = false;
        g.pending = g.pending.saturating_sub(1);
        drop(g);
        self.group.changed.notify_all();
    }
}

/// An apply taken into a group (crate::teamgroup).
pub(crate) struct Rider<'a> {
    pub(crate) core: &'a Core,
    pub(crate) team: &'a dyn TeamState,
    pub(crate) v: &'a Arc<VaultHandle>,
    pub(crate) vault: &'a TeamVault,
    pub(crate) p: &'a Proposal,
    pub(crate) key: &'a str,
    pub(crate) via: Option<String>,
}

impl Rider<'_> {
    /// In its turn: checks, intent and one commit on the group's last, then the group's push.
    /// `None`: it left the group (its job dropped), to be decided alone on what the remote holds.
    pub(crate) fn ride(
        self,
        call: &mut Call<'_>,
        tp: &TeamProposal,
        group: &Group,
    ) -> Option<Result<ApplyOut, GatewayError>> {
        let wait = 2 * crate::teampush::push_deadline(self.core);
        let (turn, tip) = group.turn(wait)?;
        let (team, fence) = (self.team, group.hold.fence());
        // Under the lease: whoever held it before may have applied it, or answered this key.
        match crate::teamwrite::first_answer(team, call, self.key) {
            Ok(Some(first)) => return Some(Ok(first)),
            Ok(None) => {}
            Err(e) => return Some(Err(e)),
        }
        match crate::teamwrite::pending(team, self.v, &self.p.id) {
            Ok(now) if now.job.is_none() && now.pushed == tp.pushed => {}
            Ok(_) => return None,
            Err(e) => return Some(Err(e)),
        }
        let job = crate::teamwrite::new_job(team, call, self.key);
        let intent = match crate::teamwrite::begin(team, call, fence, self.p, &job, self.via.clone()) {
            Ok(intent) => intent,
            Err(e) => return Some(Err(e)),
        };
        let run = crate::teamwrite::Job {
            core: self.core,
            team,
            v: self.v,
            vault: self.vault,
            hold: group.hold.as_ref(),
            lead: std::cell::RefCell::new(None),
            grouped: std::cell::Cell::new(None),
            registered: None,
            p: self.p,
            content: tp.content.as_deref(),
            meta: crate::teamcommit::CommitMeta::fixed(call, &job, &intent),
            job: &job,
            key: self.key,
            approval: self.via,
            uncertain: std::cell::Cell::new(false),
            pushed: std::cell::RefCell::new(tp.pushed.clone()),
        };
        let leave = |why: &dyn std::fmt::Display| {
            tracing::debug!(vault = %self.v.id, error = %why, "an apply left its group");
            if let Err(e) = team.drop_job(fence, &self.p.id, &job.id) {
                tracing::warn!(error = %e, "an apply that left its group kept its job");
            }
        };
        let history_id = run.meta.history_id.clone();
        // Decided on commits not pushed yet: a refusal is decided again alone.
        let built = crate::teamwrite::repo_of(self.core, self.v.reader.fs().root())
            .and_then(|repo| run.recipe().build(&repo, &tip))
            .and_then(|(commit, touched)| {
                group.hold.check()?;
                let meta = run.meta.to_value();
                team.job_attempt(fence, &self.p.id, &job.id, &tip, &commit, &meta)?;
                Ok((commit, touched))
            });
        let (commit, touched) = match built {
            Ok(built) => built,
            Err(e) => {
                drop(turn);
                leave(&e);
                return None;
            }
        };
        if !turn.built(&commit, &touched) {
            leave(&"the group closed before its commit was built");
            return None;
        }
        match group.outcome(wait) {
            Outcome::Landed { indexed } => {
                run.grouped.set(Some(indexed));
                Some(run.finish(call, &commit, &touched, &history_id))
            }
            Outcome::NotLanded => {
                leave(&"the remote moved under the group's push");
                None
            }
            Outcome::Failed { why, uncertain } => {
                if !uncertain {
                    leave(&why);
                }
                Some(Err(GatewayError::VaultBusy(format!(
                    "{why}; retry with the same idempotencyKey"
                ))))
            }
        }
    }
}

impl crate::teamwrite::Job<'_> {
    /// Opens a group after `commit` when this apply leads and others of this gateway wait, and
    /// closes it once they built theirs: the group, the commit to push and every note touched.
    pub(crate) fn open_group(
        &self,
        commit: &str,
        touched: &[String],
    ) -> Option<(Arc<Group>, String, Vec<String>)> {
        let mut lead = self.lead.borrow_mut();
        let (lead, claims, hold) = lead.as_mut()?;
        let group = lead.open(hold, commit, claims.clone(), touched)?;
        let (tip, all) = lead.close(&group, crate::teampush::push_deadline(self.core));
        Some((group, tip, all))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::team::Fence;

    struct Held(Fence);
    impl VaultHold for Held {
        fn fence(&self) -> &Fence {
            &self.0
        }
        fn check(&self) -> Result<(), GatewayError> {
            Ok(())
        }
    }

    fn hold() -> Arc<dyn VaultHold> {
        Arc::new(Held(Fence {
            vault: "v".into(),
            epoch: 1,
        }))
    }

    #[test]
    fn waiters_ride_with_the_leader_and_build_in_turn() {
        let gates = Arc::new(Gates::default());
        let wait = Duration::from_secs(5);
        let Ok(Entered::Lead(mut lead)) = gates.enter("v", Claims::shared().note("a.md"), wait) else {
            panic!("the first apply leads");
        };
        let riders: Vec<_> = ["b.md", "A.md", "c.md"]
            .into_iter()
            .map(|note| {
                let gates = gates.clone();
                std::thread::spawn(move || {
                    let entered = gates.enter("v", Claims::shared().note(note), wait);
                    match entered {
                        Ok(Entered::Ride(group)) => {
                            let (turn, tip) = group.turn(wait).expect("a turn before the close");
                            assert!(turn.built(&format!("{tip}+{note}"), &[note.to_owned()]));
                            match group.outcome(wait) {
                                Outcome::Landed { .. } => Some(note),
                                other => panic!("{other:?}"),
                            }
                        }
                        // A.md meets a.md: it leads next, once the group is done.
                        Ok(Entered::Lead(_)) => None,
                        Err(e) => panic!("{e}"),
                    }
                })
            })
            .collect();
        // Every rider waits at the gate before the group opens.
        while locked(&locked(&gates.gates)["v"].state).waiting.len() < 3 {
            std::thread::sleep(Duration::from_millis(5));
        }
        let group = lead
            .open(&hold(), "c0", Claims::shared().note("a.md"), &["a.md".into()])
            .expect("waiters: a group");
        let (tip, touched) = lead.close(&group, wait);
        group.settle(Outcome::Landed { indexed: true });
        drop(lead);
        let rode: Vec<_> = riders
            .into_iter()
            .filter_map(|r| r.join().ok().flatten())
            .collect();
        assert_eq!(rode.len(), 2, "b.md and c.md ride; A.md meets a.md");
        // Each built on the one before: the pushed commit carries both.
        assert_eq!(tip.matches('+').count(), 2, "{tip}");
        assert!(tip.starts_with("c0+"), "{tip}");
        assert_eq!(touched.len(), 3);
    }

    #[test]
    fn a_leader_that_stops_before_its_push_frees_its_riders() {
        let gates = Arc::new(Gates::default());
        let wait = Duration::from_secs(5);
        let Ok(Entered::Lead(mut lead)) = gates.enter("v", Claims::shared().note("a.md"), wait) else {
            panic!("the first apply leads");
        };
        let g2 = gates.clone();
        let rider = std::thread::spawn(move || match g2.enter("v", Claims::shared().note("b.md"), wait) {
            Ok(Entered::Ride(group)) => {
                let (turn, tip) = group.turn(wait).expect("a turn");
                assert!(turn.built(&format!("{tip}+b"), &[]));
                group.outcome(wait)
            }
            _ => panic!("rides"),
        });
        while locked(&locked(&gates.gates)["v"].state).waiting.is_empty() {
            std::thread::sleep(Duration::from_millis(5));
        }
        let group = lead
            .open(&hold(), "c0", Claims::shared().note("a.md"), &[])
            .expect("a waiter: a group");
        while locked(&group.state).pending > 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(lead);
        match rider.join() {
            Ok(Outcome::Failed { uncertain, .. }) => assert!(!uncertain, "no push began"),
            other => panic!("{other:?}"),
        }
        // The gate is free: the next apply leads.
        assert!(matches!(
            gates.enter("v", Claims::shared().note("a.md"), wait),
            Ok(Entered::Lead(_))
        ));
    }
}
