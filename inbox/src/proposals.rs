//! Proposal rows (docs/contract.md#proposals): the signed metadata as JSON plus the columns it is looked up by, and
//! the one-way transitions out of `pending`.
//!
//! The metadata is kept as `serde_json::Value` so this crate does not fix the `proposals` crate's
//! types; the gateway converts. The row's columns are checked against the metadata on insert so
//! a lookup by slug can never return metadata for another proposal.

use std::fmt;
use std::str::FromStr;

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::Serialize;
use serde_json::Value;

use crate::db::{State, StateError, constraint_violation, json_column, non_negative, opt_json_column};

/// Where a proposal is in its life. Only `Pending` may change, and only once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProposalStatus {
    Pending,
    Applied,
    Rejected,
}

impl ProposalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ProposalStatus::Pending => "pending",
            ProposalStatus::Applied => "applied",
            ProposalStatus::Rejected => "rejected",
        }
    }
}

impl fmt::Display for ProposalStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unknown proposal status '{0}'")]
pub struct UnknownStatus(pub String);

impl FromStr for ProposalStatus {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "pending" => Ok(ProposalStatus::Pending),
            "applied" => Ok(ProposalStatus::Applied),
            "rejected" => Ok(ProposalStatus::Rejected),
            other => Err(UnknownStatus(other.to_owned())),
        }
    }
}

/// What `propose_*` records. `meta` is the `.proposal.json` object as signed.
#[derive(Debug, Clone, Copy)]
pub struct NewProposal<'a> {
    pub vault: &'a str,
    pub id: &'a str,
    pub slug: &'a str,
    pub kind: &'a str,
    pub target: &'a str,
    /// Credential id of the creator.
    pub created_by: &'a str,
    /// RFC 3339 UTC, the metadata's `createdAt`.
    pub created_at: &'a str,
    pub meta: &'a Value,
}

/// A proposal row as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredProposal {
    pub id: String,
    pub slug: String,
    pub vault: String,
    pub kind: String,
    pub target: String,
    pub created_by: String,
    pub created_at: String,
    pub status: ProposalStatus,
    pub meta: Value,
    pub decided_at: Option<String>,
    /// Credential id or `cli:<user>`.
    pub decided_by: Option<String>,
    /// The apply result (applied only).
    pub result: Option<Value>,
    pub reject_reason: Option<String>,
}

pub(crate) const COLUMNS: &str = "id, slug, vault, kind, target, created_by, created_at, status, meta_json, \
                       decided_at, decided_by, result_json, reject_reason";

pub(crate) fn from_row(row: &Row<'_>) -> rusqlite::Result<StoredProposal> {
    let status: String = row.get(7)?;
    let status = status.parse::<ProposalStatus>().map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(7, rusqlite::types::Type::Text, Box::new(e))
    })?;
    Ok(StoredProposal {
        id: row.get(0)?,
        slug: row.get(1)?,
        vault: row.get(2)?,
        kind: row.get(3)?,
        target: row.get(4)?,
        created_by: row.get(5)?,
        created_at: row.get(6)?,
        status,
        meta: json_column(row, 8)?,
        decided_at: row.get(9)?,
        decided_by: row.get(10)?,
        result: opt_json_column(row, 11)?,
        reject_reason: row.get(12)?,
    })
}

/// The metadata must be an object, and every indexed field it carries must equal its column.
fn check_meta(p: &NewProposal<'_>) -> Result<(), StateError> {
    if !p.meta.is_object() {
        return Err(StateError::InvalidMeta("(not a JSON object)"));
    }
    let fields: [(&'static str, &str); 7] = [
        ("/id", p.id),
        ("/slug", p.slug),
        ("/vault", p.vault),
        ("/kind", p.kind),
        ("/target", p.target),
        ("/createdBy/credentialId", p.created_by),
        ("/createdAt", p.created_at),
    ];
    for (pointer, column) in fields {
        if let Some(v) = p.meta.pointer(pointer)
            && v.as_str() != Some(column)
        {
            return Err(StateError::InvalidMeta(pointer));
        }
    }
    Ok(())
}

/// The `pending → applied` transition on any connection or transaction. True iff this call made it.
pub(crate) fn mark_applied_on(
    conn: &Connection,
    id: &str,
    by: &str,
    at: &str,
    result: &Value,
) -> rusqlite::Result<bool> {
    let n = conn.execute(
        "UPDATE proposals SET status = 'applied', decided_at = ?2, decided_by = ?3, result_json = ?4
         WHERE id = ?1 AND status = 'pending'",
        params![id, at, by, result.to_string()],
    )?;
    Ok(n == 1)
}

/// The newest applied proposal of vault `?1`. CROSS JOIN keeps history the outer loop: the
/// newest entry first, its proposal by index, so this costs the same in a vault of any age
/// (docs/contract.md#proposals "Cost follows the change").
const LAST_APPLIED: &str = "FROM history h
     CROSS JOIN proposals p ON p.history_entry_id = h.id
     WHERE h.vault = ?1 AND h.barrier = 0 AND p.vault = ?1 AND p.status = 'applied'
     ORDER BY h.seq DESC LIMIT 1";

impl State {
    /// Records a new pending proposal. Fails with `DuplicateProposalId` or `DuplicateSlug` (slugs
    /// are unique per vault) and `InvalidMeta` when the metadata disagrees with the columns.
    pub fn insert_proposal(&self, p: &NewProposal<'_>) -> Result<(), StateError> {
        let conn = self.conn()?;
        insert_proposal_on(&conn, p)
    }

    /// The vault's proposal whose id is `id_or_slug` or, failing that, whose slug is.
    pub fn proposal(&self, vault: &str, id_or_slug: &str) -> Result<Option<StoredProposal>, StateError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM proposals WHERE vault = ?1 AND (id = ?2 OR slug = ?2)
             ORDER BY id = ?2 DESC LIMIT 1"
        ))?;
        Ok(stmt.query_row([vault, id_or_slug], from_row).optional()?)
    }

    /// The vault's most recently applied proposal (by its history entry), if any: what a crash
    /// right after an apply's commit may have left out of `_applied.jsonl`.
    pub fn last_applied(&self, vault: &str) -> Result<Option<StoredProposal>, StateError> {
        let conn = self.conn()?;
        let cols: Vec<String> = COLUMNS.split(',').map(|c| format!("p.{}", c.trim())).collect();
        let mut stmt = conn.prepare_cached(&format!("SELECT {} {LAST_APPLIED}", cols.join(", ")))?;
        Ok(stmt.query_row([vault], from_row).optional()?)
    }

    /// The vault's applied proposals after the applied proposal `after` in the order of their
    /// history (all of them when `after` is `None`), oldest first, at most `limit`: what a crash
    /// after a group's commits can leave without their `_applied.jsonl` lines. `None` when
    /// `after` is not an applied proposal of the vault (undone since, or unknown).
    pub fn applied_after(
        &self,
        vault: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Option<Vec<StoredProposal>>, StateError> {
        let conn = self.conn()?;
        let from: i64 = match after {
            None => -1,
            Some(id) => {
                let seq: Option<i64> = conn
                    .prepare_cached(
                        "SELECT h.seq FROM history h CROSS JOIN proposals p ON p.history_entry_id = h.id
                         WHERE h.vault = ?1 AND h.barrier = 0 AND p.vault = ?1 AND p.status = 'applied'
                           AND p.id = ?2",
                    )?
                    .query_row(params![vault, id], |r| r.get(0))
                    .optional()?;
                match seq {
                    Some(seq) => seq,
                    None => return Ok(None),
                }
            }
        };
        let cols: Vec<String> = COLUMNS.split(',').map(|c| format!("p.{}", c.trim())).collect();
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {} FROM history h CROSS JOIN proposals p ON p.history_entry_id = h.id
             WHERE h.vault = ?1 AND h.barrier = 0 AND p.vault = ?1 AND p.status = 'applied' AND h.seq > ?2
             ORDER BY h.seq ASC LIMIT ?3",
            cols.join(", ")
        ))?;
        let rows = stmt.query_map(params![vault, from, limit], from_row)?;
        Ok(Some(rows.collect::<Result<_, _>>()?))
    }

    /// The vault's proposals, newest first (ties in insertion order, newest first), at most `limit`.
    pub fn list_proposals(
        &self,
        vault: &str,
        status: Option<ProposalStatus>,
        limit: u32,
    ) -> Result<Vec<StoredProposal>, StateError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM proposals WHERE vault = ?1 AND (?2 IS NULL OR status = ?2)
             ORDER BY created_at DESC, rowid DESC LIMIT ?3"
        ))?;
        let rows = stmt.query_map(
            params![vault, status.map(ProposalStatus::as_str), limit],
            from_row,
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// One page of the vault's proposals, newest first: the `limit` after the stable key
    /// `(createdAt, row)` of `after` (the last item of the previous page), each with its row.
    pub fn list_proposals_page(
        &self,
        vault: &str,
        status: Option<ProposalStatus>,
        limit: u32,
        after: Option<(&str, i64)>,
    ) -> Result<Vec<(i64, StoredProposal)>, StateError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {COLUMNS}, rowid FROM proposals WHERE vault = ?1 AND (?2 IS NULL OR status = ?2)
             AND (?3 IS NULL OR created_at < ?3 OR (created_at = ?3 AND rowid < ?4))
             ORDER BY created_at DESC, rowid DESC LIMIT ?5"
        ))?;
        let (at, row) = after.map_or((None, 0), |(a, r)| (Some(a), r));
        let rows = stmt.query_map(
            params![vault, status.map(ProposalStatus::as_str), at, row, limit],
            |r| Ok((r.get(13)?, from_row(r)?)),
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn count_pending(&self, vault: &str) -> Result<u64, StateError> {
        let conn = self.conn()?;
        let n: i64 = conn.query_row(
            "SELECT COUNT(*) FROM proposals WHERE vault = ?1 AND status = 'pending'",
            [vault],
            |r| r.get(0),
        )?;
        Ok(non_negative(n))
    }

    /// `pending → applied`. True iff this call made the transition: across every process sharing
    /// the file exactly one caller wins. The apply transaction uses [`State::finish_apply`], which
    /// does this together with the revision, history and intent.
    pub fn mark_applied(&self, id: &str, by: &str, at: &str, result: &Value) -> Result<bool, StateError> {
        let conn = self.conn()?;
        Ok(mark_applied_on(&conn, id, by, at, result)?)
    }

    /// `pending → rejected`. True iff this call made the transition.
    pub fn mark_rejected(&self, id: &str, by: &str, at: &str, reason: &str) -> Result<bool, StateError> {
        let conn = self.conn()?;
        mark_rejected_on(&conn, id, by, at, reason)
    }
}

/// One pending proposal as the inbox quotas see it (docs/contract.md#limits-and-pagination): who made it and which files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingRef {
    pub created_by: String,
    pub kind: String,
    pub slug: String,
}

impl State {
    /// Every pending proposal of `vault`, oldest first: the inbox quotas count them and size
    /// their files. One range of the `(vault, status, created_at)` index: it costs what is
    /// pending, never the vault's decided history.
    pub fn pending_refs(&self, vault: &str) -> Result<Vec<PendingRef>, StateError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(
            "SELECT created_by, kind, slug FROM proposals
             WHERE vault = ?1 AND status = 'pending' ORDER BY created_at",
        )?;
        let rows = stmt.query_map([vault], |r| {
            Ok(PendingRef {
                created_by: r.get(0)?,
                kind: r.get(1)?,
                slug: r.get(2)?,
            })
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }
}

pub(crate) fn insert_proposal_on(conn: &rusqlite::Connection, p: &NewProposal<'_>) -> Result<(), StateError> {
    check_meta(p)?;
    let res = conn.execute(
        "INSERT INTO proposals (id, vault, slug, kind, target, created_by, created_at, status, meta_json)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'pending', ?8)",
        params![
            p.id,
            p.vault,
            p.slug,
            p.kind,
            p.target,
            p.created_by,
            p.created_at,
            p.meta.to_string()
        ],
    );
    match res {
        Ok(_) => Ok(()),
        Err(e) => Err(match constraint_violation(&e) {
            Some(rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY) => {
                StateError::DuplicateProposalId(p.id.to_owned())
            }
            Some(rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE) => StateError::DuplicateSlug {
                vault: p.vault.to_owned(),
                slug: p.slug.to_owned(),
            },
            _ => e.into(),
        }),
    }
}

/// Moves a pending proposal to `rejected`; its files are still to be archived
/// (`archive_pending`) until [`State::mark_archived`].
pub(crate) fn mark_rejected_on(
    conn: &rusqlite::Connection,
    id: &str,
    by: &str,
    at: &str,
    reason: &str,
) -> Result<bool, StateError> {
    let n = conn.execute(
        "UPDATE proposals SET status = 'rejected', decided_at = ?2, decided_by = ?3, reject_reason = ?4,
                              archive_pending = 1
         WHERE id = ?1 AND status = 'pending'",
        params![id, at, by, reason],
    )?;
    Ok(n == 1)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;

    /// An RFC 3339 time `secs` seconds into the test's day.
    fn t(secs: u32) -> String {
        format!("2026-05-01T00:{:02}:{:02}Z", secs / 60, secs % 60)
    }

    fn meta(vault: &str, id: &str, slug: &str) -> Value {
        json!({"id": id, "slug": slug, "vault": vault, "kind": "new", "target": "notes/a.md",
               "createdBy": {"credentialId": "cred_1", "name": "claude"}, "reason": "r"})
    }

    fn insert(s: &State, vault: &str, id: &str, slug: &str, at: u32) -> Result<(), StateError> {
        let mut m = meta(vault, id, slug);
        let at = t(at);
        m["createdAt"] = json!(at);
        s.insert_proposal(&NewProposal {
            vault,
            id,
            slug,
            kind: "new",
            target: "notes/a.md",
            created_by: "cred_1",
            created_at: &at,
            meta: &m,
        })
    }

    fn open() -> (tempfile::TempDir, State) {
        let dir = tempfile::tempdir().unwrap();
        let s = State::open(&dir.path().join("state.sqlite")).unwrap();
        (dir, s)
    }

    #[test]
    fn lookup_by_id_then_slug_within_the_vault() {
        let (_d, s) = open();
        insert(&s, "v", "p1", "first", 10).unwrap();
        // A second proposal whose slug is the first one's id: the id wins.
        insert(&s, "v", "p2", "p1", 11).unwrap();
        assert_eq!(s.proposal("v", "p1").unwrap().unwrap().id, "p1");
        assert_eq!(s.proposal("v", "first").unwrap().unwrap().id, "p1");
        assert_eq!(s.proposal("v", "p2").unwrap().unwrap().slug, "p1");
        assert!(s.proposal("other", "p1").unwrap().is_none());
        assert!(s.proposal("v", "nope").unwrap().is_none());
        let p = s.proposal("v", "first").unwrap().unwrap();
        assert_eq!(p.status, ProposalStatus::Pending);
        let mut expected = meta("v", "p1", "first");
        expected["createdAt"] = json!(t(10));
        assert_eq!(p.meta, expected);
        assert_eq!((p.decided_at, p.result, p.created_at), (None, None, t(10)));
    }

    #[test]
    fn duplicates_and_inconsistent_metadata_are_refused() {
        let (_d, s) = open();
        insert(&s, "v", "p1", "a", 10).unwrap();
        assert!(
            matches!(insert(&s, "v", "p1", "b", 10), Err(StateError::DuplicateProposalId(id)) if id == "p1")
        );
        assert!(
            matches!(insert(&s, "v", "p2", "a", 10), Err(StateError::DuplicateSlug { slug, .. }) if slug == "a")
        );
        // The same slug in another vault is fine.
        insert(&s, "w", "p3", "a", 10).unwrap();

        let m = meta("v", "p9", "other-slug");
        let p = NewProposal {
            vault: "v",
            id: "p9",
            slug: "s9",
            kind: "new",
            target: "notes/a.md",
            created_by: "cred_1",
            created_at: "2026-05-01T00:00:01Z",
            meta: &m,
        };
        assert!(matches!(
            s.insert_proposal(&p),
            Err(StateError::InvalidMeta("/slug"))
        ));
        let m = meta("v", "p9", "s9");
        let p = NewProposal {
            created_by: "cred_2",
            meta: &m,
            ..p
        };
        assert!(matches!(
            s.insert_proposal(&p),
            Err(StateError::InvalidMeta("/createdBy/credentialId"))
        ));
        let mut m = meta("v", "p9", "s9");
        m["createdAt"] = json!("2026-05-01T09:00:00Z");
        assert!(matches!(
            s.insert_proposal(&NewProposal {
                meta: &m,
                created_by: "cred_1",
                ..p
            }),
            Err(StateError::InvalidMeta("/createdAt"))
        ));
        let m = json!(["not", "an", "object"]);
        assert!(matches!(
            s.insert_proposal(&NewProposal { meta: &m, ..p }),
            Err(StateError::InvalidMeta(_))
        ));
        assert!(s.proposal("v", "p9").unwrap().is_none());
    }

    #[test]
    fn list_is_newest_first_and_filters_by_status() {
        let (_d, s) = open();
        insert(&s, "v", "p1", "a", 10).unwrap();
        insert(&s, "v", "p2", "b", 30).unwrap();
        insert(&s, "v", "p3", "c", 20).unwrap();
        insert(&s, "v", "p4", "d", 30).unwrap();
        insert(&s, "w", "p5", "e", 99).unwrap();
        let ids = |ps: Vec<StoredProposal>| ps.into_iter().map(|p| p.id).collect::<Vec<_>>();
        assert_eq!(
            ids(s.list_proposals("v", None, 10).unwrap()),
            ["p4", "p2", "p3", "p1"]
        );
        assert_eq!(ids(s.list_proposals("v", None, 2).unwrap()), ["p4", "p2"]);
        assert_eq!(s.count_pending("v").unwrap(), 4);

        assert!(
            s.mark_applied("p2", "cred_1", &t(40), &json!({"ok": true}))
                .unwrap()
        );
        assert!(s.mark_rejected("p3", "cli:me", &t(41), "no").unwrap());
        assert_eq!(s.count_pending("v").unwrap(), 2);
        assert_eq!(s.count_pending("w").unwrap(), 1);
        let pending = s.list_proposals("v", Some(ProposalStatus::Pending), 10).unwrap();
        assert_eq!(ids(pending), ["p4", "p1"]);
        let applied = s.list_proposals("v", Some(ProposalStatus::Applied), 10).unwrap();
        assert_eq!(applied.len(), 1);
        assert_eq!(applied[0].result, Some(json!({"ok": true})));
        assert_eq!(applied[0].decided_by.as_deref(), Some("cred_1"));
        let rejected = s.list_proposals("v", Some(ProposalStatus::Rejected), 10).unwrap();
        assert_eq!(rejected[0].reject_reason.as_deref(), Some("no"));
        assert_eq!(rejected[0].decided_at, Some(t(41)));
    }

    #[test]
    fn pages_walk_every_proposal_once_newest_first() {
        let (_d, s) = open();
        // Equal times are ordered by row: the key is stable, not an offset.
        for (i, at) in [10, 30, 20, 30, 30, 5].iter().enumerate() {
            insert(&s, "v", &format!("p{i}"), &format!("s{i}"), *at).unwrap();
        }
        let all: Vec<String> = s
            .list_proposals("v", None, 100)
            .unwrap()
            .into_iter()
            .map(|p| p.id)
            .collect();
        let mut walked = Vec::new();
        let mut after: Option<(String, i64)> = None;
        loop {
            let page = s
                .list_proposals_page("v", None, 2, after.as_ref().map(|(a, r)| (a.as_str(), *r)))
                .unwrap();
            let Some((row, last)) = page.last() else { break };
            after = Some((last.created_at.clone(), *row));
            walked.extend(page.into_iter().map(|(_, p)| p.id));
        }
        assert_eq!(walked, all);
        assert_eq!(walked.len(), 6);
    }

    #[test]
    fn transitions_happen_once_and_only_from_pending() {
        let (_d, s) = open();
        insert(&s, "v", "p1", "a", 10).unwrap();
        insert(&s, "v", "p2", "b", 10).unwrap();
        assert!(s.mark_applied("p1", "x", &t(1), &json!(1)).unwrap());
        assert!(!s.mark_applied("p1", "y", &t(2), &json!(2)).unwrap());
        assert!(!s.mark_rejected("p1", "y", &t(2), "late").unwrap());
        let p = s.proposal("v", "p1").unwrap().unwrap();
        assert_eq!(
            (p.status, p.decided_by.as_deref(), p.decided_at),
            (ProposalStatus::Applied, Some("x"), Some(t(1)))
        );
        assert_eq!(p.reject_reason, None);

        assert!(s.mark_rejected("p2", "x", &t(1), "no").unwrap());
        assert!(!s.mark_applied("p2", "y", &t(2), &json!(2)).unwrap());
        assert_eq!(s.proposal("v", "p2").unwrap().unwrap().result, None);
        assert!(!s.mark_applied("missing", "y", &t(2), &json!(2)).unwrap());
    }

    #[test]
    fn status_round_trips() {
        for st in [
            ProposalStatus::Pending,
            ProposalStatus::Applied,
            ProposalStatus::Rejected,
        ] {
            assert_eq!(st.as_str().parse::<ProposalStatus>().unwrap(), st);
            assert_eq!(serde_json::to_value(st).unwrap(), json!(st.as_str()));
        }
        assert!("Pending".parse::<ProposalStatus>().is_err());
    }

    /// The repair before every write asks for the newest applied proposal: the answer follows
    /// the history, and the query plan looks it up by index instead of scanning every applied
    /// proposal (so a write costs the same in an old vault as in a new one).
    #[test]
    fn last_applied_is_the_newest_history_entry_found_by_index() {
        let (_d, s) = open();
        assert!(s.last_applied("v").unwrap().is_none());
        for (k, id) in ["p1", "p2", "p3"].iter().enumerate() {
            insert(&s, "v", id, id, 10 + k as u32).unwrap();
            let h = format!("h{k}");
            s.add_history(
                "v",
                &crate::NewHistory {
                    id: &h,
                    label: "l",
                    kind: "new",
                    created_by: "cred_1",
                    created_at: &t(20),
                    paths: &json!([]),
                    barrier: false,
                },
            )
            .unwrap();
        }
        // Applied out of creation order: p3 first, then p1, then p2.
        for (id, h) in [("p3", "h0"), ("p1", "h1"), ("p2", "h2")] {
            assert!(
                s.mark_applied(id, "claude", &t(30), &json!({"historyEntryId": h}))
                    .unwrap()
            );
        }
        assert_eq!(s.last_applied("v").unwrap().unwrap().id, "p2");
        assert!(s.last_applied("w").unwrap().is_none());

        let conn = s.conn().unwrap();
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN SELECT p.id {LAST_APPLIED}"))
            .unwrap()
            .query_map(["v"], |r| r.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(
            plan.iter().any(|l| l.contains("proposals_by_history_id")),
            "the lookup does not use the index: {plan:?}"
        );
        assert!(
            !plan.iter().any(|l| l.contains("SCAN")),
            "the lookup scans: {plan:?}"
        );
    }

    #[test]
    fn pending_refs_are_the_vaults_pending_rows_only() {
        let (_d, s) = open();
        insert(&s, "v", "p1", "s1", 1).unwrap();
        insert(&s, "v", "p2", "s2", 2).unwrap();
        insert(&s, "w", "p3", "s3", 3).unwrap();
        assert!(s.mark_rejected("p1", "claude", &t(9), "no").unwrap());
        let refs = s.pending_refs("v").unwrap();
        assert_eq!(
            refs,
            [PendingRef {
                created_by: "cred_1".into(),
                kind: "new".into(),
                slug: "s2".into()
            }]
        );
        assert_eq!(s.pending_refs("w").unwrap().len(), 1);
        assert!(s.pending_refs("x").unwrap().is_empty());
    }
}
