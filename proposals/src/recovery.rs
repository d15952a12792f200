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
}
