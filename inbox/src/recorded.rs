//! State changes committed only together with their audit record (docs/contract.md#the-audit-log), and the audit head.
//!
//! Each `*_recorded` function opens one IMMEDIATE transaction, makes its change, calls `record`
//! (which appends the durable audit line and returns the new head), stores that head in the same
//! transaction and commits. When `record` fails the transaction is rolled back: nothing is
//! changed, so the refusal the caller gives is true.

use rusqlite::{Connection, OptionalExtension, params};

use crate::credentials::{Credential, CredentialId, NewCredential};
use crate::db::{State, StateError, non_negative};
use crate::proposals::{COLUMNS, NewProposal, StoredProposal, from_row};

/// The last audit record a process saw written: its `seq` and `hash`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditHead {
    pub seq: u64,
    pub hash: String,
}

/// Why a recorded change did not commit.
#[derive(Debug)]
pub enum Recorded<E> {
    /// The database refused (the change itself or the commit).
    State(StateError),
    /// The record could not be written; the change was rolled back.
    Record(E),
}

impl<E> From<StateError> for Recorded<E> {
    fn from(e: StateError) -> Self {
        Recorded::State(e)
    }
}

impl<E> From<rusqlite::Error> for Recorded<E> {
    fn from(e: rusqlite::Error) -> Self {
        Recorded::State(e.into())
    }
}

/// Raises the stored head to `head` (never lowers it: processes append concurrently).
pub(crate) fn raise_head(conn: &Connection, head: &AuditHead) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO audit_head (id, seq, hash) VALUES (1, ?1, ?2)
         ON CONFLICT(id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash
         WHERE excluded.seq > audit_head.seq",
    )?
    .execute(params![head.seq as i64, head.hash])?;
    Ok(())
}

impl State {
    /// Runs `change`, then `record` (which sees its result and may decline: `None`, nothing to
    /// record), then commits with the new head. Rolled back on any failure.
    fn with_record<R, E>(
        &self,
        change: impl FnOnce(&Connection) -> Result<R, StateError>,
        record: impl FnOnce(&R) -> Result<Option<AuditHead>, E>,
    ) -> Result<R, Recorded<E>> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let r = change(&tx)?;
        match record(&r) {
            Ok(Some(head)) => raise_head(&tx, &head)?,
            Ok(None) => {}
            // Dropping `tx` rolls the change back.
            Err(e) => return Err(Recorded::Record(e)),
        }
        tx.commit()?;
        Ok(r)
    }

    /// The stored audit head, if any record was ever noted.
    pub fn audit_head(&self) -> Result<Option<AuditHead>, StateError> {
        let conn = self.conn()?;
        Ok(conn
            .query_row("SELECT seq, hash FROM audit_head WHERE id = 1", [], |r| {
                Ok(AuditHead {
                    seq: non_negative(r.get(0)?),
                    hash: r.get(1)?,
                })
            })
            .optional()?)
    }

    /// Notes a head seen in the log (at start, after a transaction's record); never lowers it.
    pub fn note_audit_head(&self, head: &AuditHead) -> Result<(), StateError> {
        let conn = self.conn()?;
        raise_head(&conn, head)?;
        Ok(())
    }

    /// `vaultgate audit restart`: the head of the new chain replaces the old one.
    pub fn reset_audit_head(&self, head: &AuditHead) -> Result<(), StateError> {
        self.conn()?.execute(
            "INSERT INTO audit_head (id, seq, hash) VALUES (1, ?1, ?2)
             ON CONFLICT(id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash",
            params![head.seq as i64, head.hash],
        )?;
        Ok(())
    }

    /// [`State::insert_proposal`], committed only with its record.
    pub fn insert_proposal_recorded<E>(
        &self,
        p: &NewProposal<'_>,
        record: impl FnOnce() -> Result<AuditHead, E>,
    ) -> Result<(), Recorded<E>> {
        self.with_record(
            |c| crate::proposals::insert_proposal_on(c, p),
            |_| record().map(Some),
        )
    }

    /// [`State::create_credential`], committed only with its record (which sees the new row).
    pub fn create_credential_recorded<E>(
        &self,
        new: NewCredential,
        record: impl FnOnce(&Credential) -> Result<AuditHead, E>,
    ) -> Result<Credential, Recorded<E>> {
        self.with_record(
            |c| crate::credentials::create_credential_on(c, new),
            |cred| record(cred).map(Some),
        )
    }

    /// [`State::revoke_credential`], committed only with its record.
    pub fn revoke_credential_recorded<E>(
        &self,
        id: &CredentialId,
        now: i64,
        record: impl FnOnce() -> Result<AuditHead, E>,
    ) -> Result<(), Recorded<E>> {
        self.with_record(
            |c| crate::credentials::revoke_credential_on(c, id, now),
            |_| record().map(Some),
        )
    }

    /// Revokes and renames a credential (a rotation frees its name), committed only with its
    /// record.
    pub fn retire_credential_recorded<E>(
        &self,
        id: &CredentialId,
        now: i64,
        new_name: &str,
        record: impl FnOnce() -> Result<AuditHead, E>,
    ) -> Result<(), Recorded<E>> {
        self.with_record(
            |c| crate::credentials::retire_credential_on(c, id, now, new_name),
            |_| record().map(Some),
        )
    }

    /// [`State::set_credential_tier`], committed only with its record.
    pub fn set_credential_tier_recorded<E>(
        &self,
        id: &CredentialId,
        tier: policy::Tier,
        record: impl FnOnce() -> Result<AuditHead, E>,
    ) -> Result<(), Recorded<E>> {
        self.with_record(
            |c| crate::credentials::set_credential_tier_on(c, id, tier),
            |_| record().map(Some),
        )
    }

    /// [`State::mark_rejected`], committed only with its record; nothing is recorded when the
    /// proposal was no longer pending (`Ok(false)`).
    /// `key`: the caller's idempotency key and its answer, recorded in the same commit.
    pub fn mark_rejected_recorded<E>(
        &self,
        id: &str,
        by: &str,
        at: &str,
        reason: &str,
        key: Option<(&crate::IdemKey<'_>, &serde_json::Value)>,
        record: impl FnOnce() -> Result<AuditHead, E>,
    ) -> Result<bool, Recorded<E>> {
        self.with_record(
            |c| {
                let moved = crate::proposals::mark_rejected_on(c, id, by, at, reason)?;
                if let (true, Some((k, answer))) = (moved, key) {
                    crate::intents::put_key_on(c, k, answer, at)?;
                }
                Ok(moved)
            },
            |moved| if *moved { record().map(Some) } else { Ok(None) },
        )
    }

    /// Rejected proposals of `vault` whose files may still wait in the inbox.
    pub fn unarchived_rejections(&self, vault: &str) -> Result<Vec<StoredProposal>, StateError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM proposals WHERE vault = ?1 AND archive_pending = 1"
        ))?;
        let rows = stmt.query_map([vault], from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The rejected proposal's files are archived.
    pub fn mark_archived(&self, id: &str) -> Result<(), StateError> {
        self.conn()?
            .execute("UPDATE proposals SET archive_pending = 0 WHERE id = ?1", [id])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use policy::Tier;

    fn open() -> (tempfile::TempDir, State) {
        let dir = tempfile::tempdir().unwrap();
        let s = State::open(&dir.path().join("state.sqlite")).unwrap();
        (dir, s)
    }

    fn new(name: &str) -> NewCredential {
        NewCredential {
            name: name.into(),
            tier: Tier::Read,
            vaults: vec![],
            jti: "j".into(),
            created_at: 1,
            expires_at: None,
            approve_in_client: false,
        }
    }

    fn head(seq: u64) -> AuditHead {
        AuditHead {
            seq,
            hash: format!("h{seq}"),
        }
    }

    #[test]
    fn a_credential_commits_only_with_its_record() {
        let (_d, s) = open();
        let failed = s.create_credential_recorded(new("a"), |_| Err::<AuditHead, _>("disk full"));
        assert!(matches!(failed, Err(Recorded::Record("disk full"))));
        assert!(s.list_credentials().unwrap().is_empty(), "rolled back");
        assert_eq!(s.audit_head().unwrap(), None);

        let c = s
            .create_credential_recorded(new("a"), |c| {
                assert!(c.id.as_str().starts_with("cred_"));
                Ok::<_, ()>(head(5))
            })
            .unwrap();
        assert_eq!(s.list_credentials().unwrap().len(), 1);
        assert_eq!(s.audit_head().unwrap(), Some(head(5)));

        assert!(
            s.revoke_credential_recorded(&c.id, 9, || Err::<AuditHead, _>(()))
                .is_err()
        );
        assert!(!s.find_credential("a").unwrap().is_revoked());
        assert!(
            s.set_credential_tier_recorded(&c.id, Tier::Full, || Err::<AuditHead, _>(()))
                .is_err()
        );
        assert_eq!(s.find_credential("a").unwrap().tier, Tier::Read);
        s.revoke_credential_recorded(&c.id, 9, || Ok::<_, ()>(head(6)))
            .unwrap();
        assert!(s.find_credential("a").unwrap().is_revoked());
    }

    #[test]
    fn the_head_only_rises_unless_reset() {
        let (_d, s) = open();
        s.note_audit_head(&head(10)).unwrap();
        s.note_audit_head(&head(4)).unwrap();
        assert_eq!(s.audit_head().unwrap(), Some(head(10)));
        s.reset_audit_head(&head(1)).unwrap();
        assert_eq!(s.audit_head().unwrap(), Some(head(1)));
    }
}
