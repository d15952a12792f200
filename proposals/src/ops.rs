//! The file operations of a write transaction (docs/contract.md#proposals "Rules of the write path"), as data.
//!
//! Apply, undo/redo and executed challenges all become one list of [`FileOp`]s, each naming the
//! exact bytes (a SHA-256 hex) a file must hold before and after it. That makes every operation
//! idempotent and judgeable after a crash: [`FileOp::state`] says, from what is on disk now,
//! whether it has not run yet, has run, or meets bytes nobody planned (an outside edit), and
//! [`FileOp::inverse`] is the operation that takes it back. The engine executes them; this module
//! decides nothing about the disk.

use serde::{Deserialize, Serialize};

/// Which part of a vault a path lives in; each has its own write rules in `vault::write`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Zone {
    /// `*.md` under a notes folder: proposal targets.
    Note,
    /// The vault's inbox (proposal files and their archive).
    Inbox,
    /// `.vaultgate/` (trash, objects).
    Machine,
}

/// One step of a transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum FileOp {
    /// Write the blob `after` at `path`, replacing exactly `before` (`None`: the file must not
    /// exist). Both blobs are kept in the object store (rollback and undo need them).
    Put {
        zone: Zone,
        path: String,
        before: Option<String>,
        after: String,
    },
    /// Remove `path`, which must hold `before` (a blob kept in the object store).
    Delete {
        zone: Zone,
        path: String,
        before: String,
    },
    /// Move the file holding `hash` from `from` to `to` (which must not exist). Needs no blob:
    /// the bytes travel with the file.
    Rename {
        from_zone: Zone,
        from: String,
        to_zone: Zone,
        to: String,
        hash: String,
    },
}

/// Where an operation stands, judged from the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpState {
    /// Not run yet: every file it touches holds what it expects before.
    Before,
    /// Done: every file it touches holds what it leaves.
    After,
    /// A file holds bytes this operation neither expects nor leaves: changed outside vaultgate.
    Other,
}

impl FileOp {
    /// The files the operation touches.
    pub fn paths(&self) -> Vec<(Zone, &str)> {
        match self {
            FileOp::Put { zone, path, .. } | FileOp::Delete { zone, path, .. } => vec![(*zone, path)],
            FileOp::Rename {
                from_zone,
                from,
                to_zone,
                to,
                ..
            } => vec![(*from_zone, from), (*to_zone, to)],
        }
    }

    /// The state of the operation given the current hash of each file it touches (`None`:
    /// absent). `current` is asked once per path, in [`FileOp::paths`] order.
    pub fn state(&self, mut current: impl FnMut(Zone, &str) -> Option<String>) -> OpState {
        match self {
            FileOp::Put {
                zone,
                path,
                before,
                after,
            } => {
                let now = current(*zone, path);
                if now.as_deref() == Some(after.as_str()) {
                    OpState::After
                } else if now == *before {
                    OpState::Before
                } else {
                    OpState::Other
                }
            }
            FileOp::Delete { zone, path, before } => match current(*zone, path) {
                None => OpState::After,
                Some(h) if h == *before => OpState::Before,
                Some(_) => OpState::Other,
            },
            FileOp::Rename {
                from_zone,
                from,
                to_zone,
                to,
                hash,
            } => {
                let src = current(*from_zone, from);
                let dst = current(*to_zone, to);
                match (src, dst) {
                    (Some(s), None) if s == *hash => OpState::Before,
                    (None, Some(d)) if d == *hash => OpState::After,
                    _ => OpState::Other,
                }
            }
        }
    }

    /// What the operation leaves at each path it touches: the content hash, or `None` where it
    /// leaves nothing.
    pub fn leaves(&self) -> Vec<(Zone, &str, Option<&str>)> {
        match self {
            FileOp::Put {
                zone, path, after, ..
            } => vec![(*zone, path.as_str(), Some(after.as_str()))],
            FileOp::Delete { zone, path, .. } => vec![(*zone, path.as_str(), None)],
            FileOp::Rename {
                from_zone,
                from,
                to_zone,
                to,
                hash,
            } => vec![
                (*from_zone, from.as_str(), None),
                (*to_zone, to.as_str(), Some(hash.as_str())),
            ],
        }
    }

    /// The operation that takes this one back: applied to its `After` state it yields its
    /// `Before` state, byte for byte.
    pub fn inverse(&self) -> FileOp {
        match self.clone() {
            FileOp::Put {
                zone,
                path,
                before: Some(before),
                after,
            } => FileOp::Put {
                zone,
                path,
                before: Some(after),
                after: before,
            },
            FileOp::Put {
                zone,
                path,
                before: None,
                after,
            } => FileOp::Delete {
                zone,
                path,
                before: after,
            },
            FileOp::Delete { zone, path, before } => FileOp::Put {
                zone,
                path,
                before: None,
                after: before,
            },
            FileOp::Rename {
                from_zone,
                from,
                to_zone,
                to,
                hash,
            } => FileOp::Rename {
                from_zone: to_zone,
                from: to,
                to_zone: from_zone,
                to: from,
                hash,
            },
        }
    }

    /// The blobs the operation or its inverse may have to write.
    pub fn blobs(&self) -> Vec<&str> {
        match self {
            FileOp::Put { before, after, .. } => {
                let mut b = vec![after.as_str()];
                b.extend(before.as_deref());
                b
            }
            FileOp::Delete { before, .. } => vec![before.as_str()],
            FileOp::Rename { .. } => Vec::new(),
        }
    }
}

/// The operations that take a whole list back, in the order to run them.
pub fn inverse_all(ops: &[FileOp]) -> Vec<FileOp> {
    ops.iter().rev().map(FileOp::inverse).collect()
}

/// The first operation (index) whose files hold bytes nobody planned, if any. A transaction
/// interrupted by a crash is finished when this is `None` and rolled back otherwise.
pub fn first_conflict(
    ops: &[FileOp],
    mut current: impl FnMut(Zone, &str) -> Option<String>,
) -> Option<usize> {
    ops.iter().position(|op| op.state(&mut current) == OpState::Other)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    type Disk = BTreeMap<(Zone, String), String>;

    /// Runs `op` on a model disk the way the executor does, if it is in its `Before` state.
    fn run(disk: &mut Disk, op: &FileOp) -> bool {
        if op.state(|z, p| disk.get(&(z, p.to_owned())).cloned()) != OpState::Before {
            return false;
        }
        match op {
            FileOp::Put {
                zone, path, after, ..
            } => {
                disk.insert((*zone, path.clone()), after.clone());
            }
            FileOp::Delete { zone, path, .. } => {
                disk.remove(&(*zone, path.clone()));
            }
            FileOp::Rename {
                from_zone,
                from,
                to_zone,
                to,
                hash,
            } => {
                disk.remove(&(*from_zone, from.clone()));
                disk.insert((*to_zone, to.clone()), hash.clone());
            }
        }
        true
    }

    fn op_strategy() -> impl Strategy<Value = FileOp> {
        let zone = prop_oneof![Just(Zone::Note), Just(Zone::Inbox), Just(Zone::Machine)];
        let name = "[a-c]";
        let hash = "[x-z]";
        prop_oneof![
            (zone.clone(), name, proptest::option::of(hash), hash).prop_map(|(zone, p, b, a)| {
                FileOp::Put {
                    zone,
                    path: p,
                    before: b,
                    after: a,
                }
            }),
            (zone.clone(), name, hash).prop_map(|(zone, p, b)| FileOp::Delete {
                zone,
                path: p,
                before: b
            }),
            (zone.clone(), name, zone, name, hash).prop_map(|(fz, f, tz, t, h)| FileOp::Rename {
                from_zone: fz,
                from: f,
                to_zone: tz,
                to: format!("{t}2"),
                hash: h,
            }),
        ]
    }

    proptest! {
        /// SECURITY(T-PROP5): whatever an operation does, its inverse takes the disk back to
        /// exactly what it was, so a rollback restores every file a transaction wrote.
        #[test]
        fn the_inverse_restores_the_disk(op in op_strategy(), extra in proptest::collection::btree_map(("[a-c]", "[x-z]"), "[x-z]", 0..4)) {
            let mut disk: Disk = extra.into_iter().map(|((p, _), h)| ((Zone::Note, p), h)).collect();
            // Put the disk in the op's Before state.
            match &op {
                FileOp::Put { zone, path, before, .. } => match before {
                    Some(b) => { disk.insert((*zone, path.clone()), b.clone()); }
                    None => { disk.remove(&(*zone, path.clone())); }
                },
                FileOp::Delete { zone, path, before } => { disk.insert((*zone, path.clone()), before.clone()); }
                FileOp::Rename { from_zone, from, to_zone, to, hash } => {
                    disk.insert((*from_zone, from.clone()), hash.clone());
                    disk.remove(&(*to_zone, to.clone()));
                }
            }
            let start = disk.clone();
            // A Put whose before equals its after is a no-op that is already After.
            let ran = run(&mut disk, &op);
            if ran {
                prop_assert_eq!(op.state(|z, p| disk.get(&(z, p.to_owned())).cloned()), OpState::After);
                prop_assert!(run(&mut disk, &op.inverse()));
            }
            prop_assert_eq!(disk, start);
        }
    }

    #[test]
    fn an_outside_edit_is_other_for_every_kind() {
        let put = FileOp::Put {
            zone: Zone::Note,
            path: "a.md".into(),
            before: Some("b".into()),
            after: "a".into(),
        };
        assert_eq!(put.state(|_, _| Some("e".into())), OpState::Other);
        assert_eq!(put.state(|_, _| None), OpState::Other);
        let del = FileOp::Delete {
            zone: Zone::Note,
            path: "a.md".into(),
            before: "b".into(),
        };
        assert_eq!(del.state(|_, _| Some("e".into())), OpState::Other);
        assert_eq!(del.state(|_, _| None), OpState::After);
        let ren = FileOp::Rename {
            from_zone: Zone::Note,
            from: "a.md".into(),
            to_zone: Zone::Machine,
            to: ".vaultgate/trash/a.md".into(),
            hash: "b".into(),
        };
        // Both present: someone re-created the source after the move.
        assert_eq!(ren.state(|_, _| Some("b".into())), OpState::Other);
        assert_eq!(ren.state(|_, _| None), OpState::Other);
        assert_eq!(
            first_conflict(&[put.clone(), del.clone()], |_, p| (p == "a.md")
                .then(|| "b".into())),
            None
        );
        assert_eq!(first_conflict(&[del, put], |_, _| Some("z".into())), Some(0));
    }

    #[test]
    fn inverse_all_runs_backwards() {
        let ops = vec![
            FileOp::Put {
                zone: Zone::Note,
                path: "n.md".into(),
                before: None,
                after: "m".into(),
            },
            FileOp::Delete {
                zone: Zone::Note,
                path: "o.md".into(),
                before: "m".into(),
            },
        ];
        let inv = inverse_all(&ops);
        assert_eq!(inv[0], ops[1].inverse());
        assert_eq!(inv[1], ops[0].inverse());
        let mut disk: Disk = [((Zone::Note, "o.md".to_owned()), "m".to_owned())].into();
        let start = disk.clone();
        for op in &ops {
            assert!(run(&mut disk, op));
        }
        for op in &inv {
            assert!(run(&mut disk, op));
        }
        assert_eq!(disk, start);
    }
}
