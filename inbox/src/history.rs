//! History undo/redo records (docs/contract.md#history): reading one entry, the tops a transition would leave, and
//! an undo's or redo's part of its commit point (`finish_history_transition_on`, run inside
//! [`crate::Tx`]; [`State::finish_history_transition`] runs it alone).
//!
//! The linear-history rules live here, once: only the newest `done` entry can be undone, never a
//! barrier and never past one; only the oldest `undone` entry can be redone. Nothing here touches
//! files; the caller has already written them under the vault's write lock.

use std::fmt;
use std::str::FromStr;

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::db::{State, StateError, json_column, non_negative};
use crate::intents::{HistoryTops, IdemKey};

/// Where an entry stands in the linear history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HistoryState {
    Done,
    Undone,
}

impl HistoryState {
    pub fn as_str(self) -> &'static str {
        match self {
            HistoryState::Done => "done",
            HistoryState::Undone => "undone",
        }
    }
}

impl fmt::Display for HistoryState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `state` column the schema's CHECK should have refused (a hand-edited database).
#[derive(Debug, thiserror::Error)]
#[error("unknown history state '{0}'")]
pub struct UnknownHistoryState(pub String);

impl FromStr for HistoryState {
    type Err = UnknownHistoryState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "done" => Ok(HistoryState::Done),
            "undone" => Ok(HistoryState::Undone),
            other => Err(UnknownHistoryState(other.to_owned())),
        }
    }
}

/// A move along the history: undo takes the newest `done` entry to `undone`, redo the reverse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transition {
    Undo,
    Redo,
}

impl Transition {
    pub fn as_str(self) -> &'static str {
        match self {
            Transition::Undo => "undo",
            Transition::Redo => "redo",
        }
    }

    /// The state the entry must be in before the transition.
    pub fn from_state(self) -> HistoryState {
        match self {
            Transition::Undo => HistoryState::Done,
            Transition::Redo => HistoryState::Undone,
        }
    }

    /// The state the entry is in after it.
    pub fn to_state(self) -> HistoryState {
        match self {
            Transition::Undo => HistoryState::Undone,
            Transition::Redo => HistoryState::Done,
        }
    }
}

/// One stored history entry.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryEntry {
    /// The `historyEntryId`.
    pub id: String,
    pub vault: String,
    /// Per vault, increasing, never reused.
    pub seq: u64,
    pub label: String,
    pub kind: String,
    pub created_by: String,
    /// RFC 3339 UTC.
    pub created_at: String,
    /// `[{path, before, after, trash?}]` with content hashes (`null`: no file).
    pub paths: Value,
    pub state: HistoryState,
    /// A write that cannot be undone (permanent deletion).
    pub barrier: bool,
}

/// One undo or redo to commit.
#[derive(Debug, Clone, Copy)]
pub struct HistoryTransition<'a> {
    /// The open intent the transition was recorded under; deleted by the commit.
    pub intent_id: i64,
    pub vault: &'a str,
    pub entry_id: &'a str,
    pub transition: Transition,
    /// The answer the caller gets, stored with the idempotency key.
    pub result: &'a Value,
    /// RFC 3339 UTC.
    pub at: &'a str,
    pub idempotency: Option<IdemKey<'a>>,
    /// The notes as the transition left them (not counted again as a disk change).
    pub disk: Option<crate::DiskAfter<'a>>,
}

/// What the commit point did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransitionCommit {
    /// The vault's revision after the transition.
    pub revision: u64,
}

const ENTRY_COLUMNS: &str = "id, vault, seq, label, kind, created_by, created_at, paths_json, state, barrier";

fn entry_from_row(row: &Row<'_>) -> rusqlite::Result<HistoryEntry> {
    let state: String = row.get(8)?;
    Ok(HistoryEntry {
        id: row.get(0)?,
        vault: row.get(1)?,
        seq: non_negative(row.get(2)?),
        label: row.get(3)?,
        kind: row.get(4)?,
        created_by: row.get(5)?,
        created_at: row.get(6)?,
        paths: json_column(row, 7)?,
        state: state.parse().map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(8, rusqlite::types::Type::Text, Box::new(e))
        })?,
        barrier: row.get(9)?,
    })
}

/// Whether `entry` is the one `t` must act on now: undo takes the newest `done` entry unless it is
/// a barrier; redo the oldest `undone` one.
fn is_top(conn: &Connection, vault: &str, entry: &str, t: Transition) -> Result<bool, StateError> {
    let sql = match t {
        Transition::Undo => {
            "SELECT id, barrier FROM history WHERE vault = ?1 AND state = 'done' ORDER BY seq DESC LIMIT 1"
        }
        Transition::Redo => {
            "SELECT id, barrier FROM history WHERE vault = ?1 AND state = 'undone' ORDER BY seq ASC LIMIT 1"
        }
    };
    let top: Option<(String, bool)> = conn
        .query_row(sql, [vault], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    // A barrier is never undone, and it is always the newest `done` entry it can be, so undo
    // never passes it either.
    Ok(matches!(top, Some((id, barrier)) if id == entry && !barrier))
}

impl State {
    /// One history entry of this vault.
    pub fn history_entry(&self, vault: &str, id: &str) -> Result<Option<HistoryEntry>, StateError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {ENTRY_COLUMNS} FROM history WHERE vault = ?1 AND id = ?2"
        ))?;
        Ok(stmt.query_row([vault, id], entry_from_row).optional()?)
    }

    /// The vault's entries, oldest first.
    pub fn history_entries(&self, vault: &str) -> Result<Vec<HistoryEntry>, StateError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {ENTRY_COLUMNS} FROM history WHERE vault = ?1 ORDER BY seq"
        ))?;
        let rows = stmt.query_map([vault], entry_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Whether `entry` is the one `t` must act on now (see [`State::history_tops`]).
    pub fn history_is_top(&self, vault: &str, entry: &str, t: Transition) -> Result<bool, StateError> {
        let conn = self.conn()?;
        is_top(&conn, vault, entry, t)
    }

    /// The tops [`State::history_tops`] will report once `t` of `entry` commits, read now (the
    /// caller holds the vault's write lock, so no other transition can come between).
    pub fn history_tops_after(
        &self,
        vault: &str,
        entry: &str,
        t: Transition,
    ) -> Result<HistoryTops, StateError> {
        let conn = self.conn()?;
        // `?3` is the entry's state once the transition is done.
        let (undo, redo) = conn.query_row(
            "WITH h AS (
                SELECT id, seq, barrier, CASE WHEN id = ?2 THEN ?3 ELSE state END AS state
                FROM history WHERE vault = ?1
             )
             SELECT
                (SELECT CASE WHEN barrier THEN NULL ELSE id END FROM h
                 WHERE state = 'done' ORDER BY seq DESC LIMIT 1),
                (SELECT id FROM h WHERE state = 'undone' ORDER BY seq ASC LIMIT 1)",
            params![vault, entry, t.to_state().as_str()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        Ok(HistoryTops { undo, redo })
    }

    /// The commit point of an undo or redo, in one SQLite transaction: the entry moves
    /// `done ↔ undone`, the vault's revision moves, the idempotency key (if any) records the
    /// answer, and the intent is deleted. All of it happens or none of it.
    ///
    /// `Ok(None)` when the entry is no longer the top for this transition: nothing changes and the
    /// intent is **kept** (only its plan says how to put the files back); the caller rolls back,
    /// then calls [`State::finish_intent`]. `IntentNotFound` when the intent is gone or belongs to
    /// another vault.
    pub fn finish_history_transition(
        &self,
        t: &HistoryTransition<'_>,
    ) -> Result<Option<TransitionCommit>, StateError> {
        self.transact(|tx| {
            let Some(c) = tx.finish_history_transition(t)? else {
                return Ok(None);
            };
            if let Some(d) = &t.disk {
                tx.register_head(t.vault, d)?;
            }
            Ok(Some(c))
        })
    }
}

/// [`State::finish_history_transition`] inside the caller's transaction.
pub(crate) fn finish_history_transition_on(
    tx: &Connection,
    t: &HistoryTransition<'_>,
) -> Result<Option<TransitionCommit>, StateError> {
    let intent_vault: Option<String> = tx
        .query_row(
            "SELECT vault FROM apply_intents WHERE id = ?1",
            [t.intent_id],
            |r| r.get(0),
        )
        .optional()?;
    if intent_vault.as_deref() != Some(t.vault) {
        return Err(StateError::IntentNotFound(t.intent_id));
    }
    // Nothing is written before this check: a `None` changes nothing.
    if !is_top(tx, t.vault, t.entry_id, t.transition)? {
        return Ok(None);
    }
    tx.execute(
        "UPDATE history SET state = ?3 WHERE vault = ?1 AND id = ?2",
        params![t.vault, t.entry_id, t.transition.to_state().as_str()],
    )?;
    let revision: i64 = tx.query_row(
        "INSERT INTO vault_revisions (vault, revision) VALUES (?1, 1)
         ON CONFLICT(vault) DO UPDATE SET revision = revision + 1
         RETURNING revision",
        [t.vault],
        |r| r.get(0),
    )?;
    // Recorded in the same commit, so a retry after a crash never finds the transition done
    // without also finding its answer.
    // (Its job is marked done with it.)
    if let Some(k) = &t.idempotency {
        crate::intents::put_key_on(tx, k, t.result, t.at)?;
    }
    tx.execute("DELETE FROM apply_intents WHERE id = ?1", [t.intent_id])?;
    Ok(Some(TransitionCommit {
        revision: non_negative(revision),
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;
    use crate::intents::NewHistory;

    fn open() -> (tempfile::TempDir, State) {
        let dir = tempfile::tempdir().unwrap();
        let s = State::open(&dir.path().join("state.sqlite")).unwrap();
        (dir, s)
    }

    fn add(s: &State, vault: &str, id: &str, barrier: bool) {
        let paths = json!([{"path": "notes/a.md", "before": null, "after": id}]);
        s.add_history(
            vault,
            &NewHistory {
                id,
                label: "new notes/a.md",
                kind: "new",
                created_by: "cred_1",
                created_at: "2026-05-01T00:00:05Z",
                paths: &paths,
                barrier,
            },
        )
        .unwrap();
    }

    fn commit(s: &State, vault: &str, entry: &str, t: Transition) -> Option<TransitionCommit> {
        let intent = s
            .begin_intent(vault, &format!("history:{entry}"), &json!({}), "t1")
            .unwrap();
        let result = json!({"transitionInProgress": false});
        let out = s
            .finish_history_transition(&HistoryTransition {
                intent_id: intent,
                vault,
                entry_id: entry,
                transition: t,
                result: &result,
                at: "t2",
                idempotency: None,
                disk: Some(crate::DiskAfter {
                    fingerprint: Some("fp"),
                    writes: &[],
                    change: None,
                    head: None,
                }),
            })
            .unwrap();
        if out.is_none() {
            assert!(
                s.finish_intent(intent).unwrap(),
                "a refused commit keeps its intent"
            );
        }
        out
    }

    fn states(s: &State, vault: &str) -> Vec<(String, HistoryState)> {
        s.history_entries(vault)
            .unwrap()
            .into_iter()
            .map(|e| (e.id, e.state))
            .collect()
    }

    #[test]
    fn undo_and_redo_walk_the_linear_history() {
        let (_d, s) = open();
        add(&s, "v", "e1", false);
        add(&s, "v", "e2", false);
        assert_eq!(s.revision("v").unwrap(), 0);

        // Only the top moves.
        assert!(!s.history_is_top("v", "e1", Transition::Undo).unwrap());
        assert_eq!(commit(&s, "v", "e1", Transition::Undo), None);
        assert_eq!(
            s.history_tops_after("v", "e2", Transition::Undo).unwrap(),
            HistoryTops {
                undo: Some("e1".into()),
                redo: Some("e2".into())
            }
        );
        assert_eq!(
            commit(&s, "v", "e2", Transition::Undo),
            Some(TransitionCommit { revision: 1 })
        );
        assert_eq!(
            s.history_tops("v").unwrap(),
            HistoryTops {
                undo: Some("e1".into()),
                redo: Some("e2".into())
            }
        );
        assert_eq!(commit(&s, "v", "e1", Transition::Undo).unwrap().revision, 2);
        assert_eq!(
            s.history_tops("v").unwrap(),
            HistoryTops {
                undo: None,
                redo: Some("e1".into())
            }
        );
        // Redo takes the oldest undone entry first.
        assert_eq!(commit(&s, "v", "e2", Transition::Redo), None);
        assert_eq!(
            s.history_tops_after("v", "e1", Transition::Redo).unwrap(),
            HistoryTops {
                undo: Some("e1".into()),
                redo: Some("e2".into())
            }
        );
        assert_eq!(commit(&s, "v", "e1", Transition::Redo).unwrap().revision, 3);
        assert_eq!(
            states(&s, "v"),
            [
                ("e1".into(), HistoryState::Done),
                ("e2".into(), HistoryState::Undone)
            ]
        );
        assert!(s.open_intents("v").unwrap().is_empty());
        // Entries of another vault are not this vault's.
        assert_eq!(s.history_entry("w", "e1").unwrap(), None);
        assert!(!s.history_is_top("w", "e2", Transition::Redo).unwrap());
        let e = s.history_entry("v", "e2").unwrap().unwrap();
        assert_eq!((e.seq, e.kind.as_str(), e.barrier), (2, "new", false));
        assert_eq!(e.paths[0]["after"], "e2");
    }

    #[test]
    fn the_commit_records_the_idempotency_key_and_drops_the_intent_atomically() {
        let (_d, s) = open();
        add(&s, "v", "e1", false);
        let intent = s.begin_intent("v", "history:e1", &json!({}), "t1").unwrap();
        let result = json!({"redoTop": "e1", "transitionInProgress": false});
        let t = HistoryTransition {
            intent_id: intent,
            vault: "v",
            entry_id: "e1",
            transition: Transition::Undo,
            result: &result,
            at: "t2",
            idempotency: Some(IdemKey {
                credential_id: "cred_1",
                key: "k1",
                tool: "history_undo",
                args_hash: "a1",
            }),
            disk: None,
        };
        // An intent of another vault is not this transition's.
        assert!(matches!(
            s.finish_history_transition(&HistoryTransition { vault: "w", ..t }),
            Err(StateError::IntentNotFound(i)) if i == intent
        ));
        assert_eq!(s.history_tops("v").unwrap().undo.as_deref(), Some("e1"));
        assert_eq!(s.idempotency_get("cred_1", "k1").unwrap(), None);

        assert!(s.finish_history_transition(&t).unwrap().is_some());
        let rec = s.idempotency_get("cred_1", "k1").unwrap().unwrap();
        assert!(rec.same_call("history_undo", "a1"));
        assert_eq!(rec.result, result);
        assert!(s.open_intents("v").unwrap().is_empty());
        assert!(matches!(
            s.finish_history_transition(&t),
            Err(StateError::IntentNotFound(_))
        ));
    }

    #[test]
    fn a_barrier_is_never_undone_and_never_passed() {
        let (_d, s) = open();
        add(&s, "v", "e1", false);
        add(&s, "v", "del", true);
        assert_eq!(s.history_tops("v").unwrap(), HistoryTops::default());
        // Neither the barrier nor anything below it can be undone.
        assert!(!s.history_is_top("v", "del", Transition::Undo).unwrap());
        assert!(!s.history_is_top("v", "e1", Transition::Undo).unwrap());
        assert_eq!(commit(&s, "v", "del", Transition::Undo), None);
        assert_eq!(commit(&s, "v", "e1", Transition::Undo), None);
        assert_eq!(
            states(&s, "v"),
            [
                ("e1".into(), HistoryState::Done),
                ("del".into(), HistoryState::Done)
            ]
        );
        assert_eq!(s.revision("v").unwrap(), 0, "refused commits change nothing");
        assert!(s.history_entry("v", "del").unwrap().unwrap().barrier);

        // Entries after the barrier undo down to it and stop there.
        add(&s, "v", "e3", false);
        assert_eq!(
            s.history_tops_after("v", "e3", Transition::Undo).unwrap(),
            HistoryTops {
                undo: None,
                redo: Some("e3".into())
            }
        );
        assert!(commit(&s, "v", "e3", Transition::Undo).is_some());
        assert_eq!(
            s.history_tops("v").unwrap(),
            HistoryTops {
                undo: None,
                redo: Some("e3".into())
            }
        );
        assert_eq!(commit(&s, "v", "del", Transition::Undo), None);

        // A barrier written after an undo clears the redo branch like any forward write.
        add(&s, "v", "del2", true);
        assert_eq!(s.history_tops("v").unwrap(), HistoryTops::default());
        assert_eq!(commit(&s, "v", "e3", Transition::Redo), None);
        assert_eq!(s.history_entry("v", "e3").unwrap(), None);
    }
}
