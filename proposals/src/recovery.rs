//! What recovery does with an interrupted write (docs/contract.md#rules-of-the-write-path): one pure
//! decision from what the write's intent recorded and what its backend observes now. The engine
//! gathers the observation under the vault's writer and executes the decision; no other code
//! decides whether an interrupted write is finished or rolled back.

use crate::ops::OpState;

/// What a backend observes of an interrupted write now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observed<'a> {
    /// A local folder: each of the intent's operations judged from the disk, in the intent's order.
    Files(&'a [OpState]),
}

/// The decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// A rollback had begun: it is finished (every file it wrote gets its before bytes).
    ResumeRollBack,
    /// Operation `op` (the first such) finds bytes the write neither read nor made — an outside
    /// edit: the write is rolled back and the edit kept.
    RollBack { op: usize },
    /// Every file is at its before or after state: the `remaining` operations still at their
    /// before state are run, then the write is recorded and committed.
    Finish { remaining: usize },
}

/// `rolling_back`: the intent says a rollback began (its step, or the flag of a challenge's
/// intent).
pub fn decide(rolling_back: bool, observed: Observed<'_>) -> Recovery {
    if rolling_back {
        return Recovery::ResumeRollBack;
    }
    match observed {
        Observed::Files(states) => {
            if let Some(op) = states.iter().position(|s| *s == OpState::Other) {
                return Recovery::RollBack { op };
            }
            Recovery::Finish {
                remaining: states.iter().filter(|s| **s == OpState::Before).count(),
            }
        }
    }
}

/// What a team vault's remote shows of a commit pushed onto `base` by compare-and-swap whose
/// push had no answer (docs/contract.md#team-mode): read from the remote, never a clone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteShows {
    /// The remote cannot be read now.
    Unreadable,
    /// The commit is the branch's head or an ancestor of it.
    Landed,
    /// The branch's head is still `base`: the push may land yet.
    AtBase,
    /// The branch moved past `base` without the commit: it can never land (fast-forward only,
    /// and the push's lease names `base`).
    Past,
}

/// What is done with a push whose outcome was unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownPush {
    /// It landed: the apply is recorded with that commit.
    Record,
    /// The same commit is pushed again to the same base (harmless if the first lands too).
    PushAgain,
    /// It cannot land: the proposal is checked again against the new head (rebuilt over
    /// changes to other notes, else `PROPOSAL_STALE_BASE`).
    Recheck,
    /// Nothing can be known now: the job is kept and the caller told to retry (`VAULT_BUSY`).
    Wait,
}

/// The design's table for an unknown push outcome. `push_again`: this gateway holds the commit
/// and has time left for one more push. Without it, a remote still at `base` is checked again
/// too: the new commit's push names the same base, so at most one of the two lands, and the
/// check finds the first one on the branch if it is the one.
pub fn settle_unknown_push(shows: RemoteShows, push_again: bool) -> UnknownPush {
    match shows {
        RemoteShows::Landed => UnknownPush::Record,
        RemoteShows::AtBase if push_again => UnknownPush::PushAgain,
        RemoteShows::AtBase | RemoteShows::Past => UnknownPush::Recheck,
        RemoteShows::Unreadable => UnknownPush::Wait,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use OpState::*;

    #[test]
    fn the_decision_table() {
        let cases: &[(bool, &[OpState], Recovery)] = &[
            // Nothing observed can outweigh a rollback that began.
            (true, &[After, After], Recovery::ResumeRollBack),
            (true, &[Other], Recovery::ResumeRollBack),
            (true, &[], Recovery::ResumeRollBack),
            // Crashed before the first operation, after the last, or in between: finish.
            (false, &[], Recovery::Finish { remaining: 0 }),
            (
                false,
                &[Before, Before, Before],
                Recovery::Finish { remaining: 3 },
            ),
            (false, &[After, Before, Before], Recovery::Finish { remaining: 2 }),
            (false, &[After, After, After], Recovery::Finish { remaining: 0 }),
            // An outside edit anywhere: roll back, naming the first operation that found one.
            (false, &[Other], Recovery::RollBack { op: 0 }),
            (false, &[After, Other, Before], Recovery::RollBack { op: 1 }),
            (false, &[After, After, Other], Recovery::RollBack { op: 2 }),
            (false, &[Before, Other, Other], Recovery::RollBack { op: 1 }),
        ];
        for (rolling_back, states, want) in cases {
            assert_eq!(
                decide(*rolling_back, Observed::Files(states)),
                *want,
                "rolling_back {rolling_back}, states {states:?}"
            );
        }
    }

    #[test]
    fn the_unknown_push_table() {
        use RemoteShows::*;
        let cases = [
            (Landed, true, UnknownPush::Record),
            (Landed, false, UnknownPush::Record),
            (AtBase, true, UnknownPush::PushAgain),
            (AtBase, false, UnknownPush::Recheck),
            (Past, true, UnknownPush::Recheck),
            (Past, false, UnknownPush::Recheck),
            (Unreadable, true, UnknownPush::Wait),
            (Unreadable, false, UnknownPush::Wait),
        ];
        for (shows, again, want) in cases {
            assert_eq!(
                settle_unknown_push(shows, again),
                want,
                "{shows:?}, push again {again}"
            );
        }
    }
}
