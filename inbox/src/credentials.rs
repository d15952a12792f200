//! Credential rows. The row is authoritative: tier, scope, expiry and revocation are read from it
//! on every request (docs/contract.md#concepts).

use policy::Tier;
use rusqlite::{OptionalExtension, Row, params};
use serde::Serialize;

use crate::db::{State, StateError};

/// A credential id (`cred_` + UUIDv7, no hyphens).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct CredentialId(pub String);

impl CredentialId {
    pub fn generate() -> CredentialId {
        CredentialId(format!("cred_{}", uuid::Uuid::now_v7().simple()))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A stored credential. Never holds a token.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Credential {
    pub id: CredentialId,
    pub name: String,
    pub tier: Tier,
    /// Vault ids this credential may see; empty means every vault.
    pub vaults: Vec<String>,
    /// The stored scope could not be read: the credential sees no vault at all.
    #[serde(skip)]
    pub scope_unreadable: bool,
    #[serde(skip)]
    pub jti: String,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub revoked_at: Option<i64>,
    /// The last authenticated request, to the minute (docs/contract.md#the-review-page-and-in-client-approval: the Credentials page).
    pub last_used_at: Option<i64>,
    /// docs/contract.md#the-review-page-and-in-client-approval: the holder's client may ask a person to approve an apply one tier step up.
    pub approve_in_client: bool,
}

impl Credential {
    pub fn may_see_vault(&self, vault: &str) -> bool {
        // SECURITY(T-AUTH6): a damaged scope narrows to nothing, never widens to every vault.
        !self.scope_unreadable && (self.vaults.is_empty() || self.vaults.iter().any(|v| v == vault))
    }
    pub fn is_revoked(&self) -> bool {
        self.revoked_at.is_some()
    }
    pub fn is_expired(&self, now: i64) -> bool {
        self.expires_at.is_some_and(|e| now >= e)
    }
}

/// What `token issue` supplies.
pub struct NewCredential {
    pub name: String,
    pub tier: Tier,
    pub vaults: Vec<String>,
    pub jti: String,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub approve_in_client: bool,
}

impl NewCredential {
    /// The credential as stored under `id`, just issued (never used, not revoked).
    pub fn stored(self, id: CredentialId) -> Credential {
        Credential {
            id,
            name: self.name,
            tier: self.tier,
            vaults: self.vaults,
            scope_unreadable: false,
            jti: self.jti,
            created_at: self.created_at,
            expires_at: self.expires_at,
            revoked_at: None,
            last_used_at: None,
            approve_in_client: self.approve_in_client,
        }
    }
}

/// The stored scope: exactly a JSON array of vault ids; anything else (truncated, another type,
/// an empty id) is unreadable.
fn parse_scope(stored: &str) -> Option<Vec<String>> {
    let ids: Vec<String> = serde_json::from_str(stored).ok()?;
    if ids.iter().any(String::is_empty) {
        return None;
    }
    Some(ids)
}

const COLUMNS: &str =
    "id, name, tier, vaults, jti, created_at, expires_at, revoked_at, last_used_at, approve_in_client";

fn from_row(row: &Row<'_>) -> rusqlite::Result<Credential> {
    let tier: String = row.get(2)?;
    let stored: String = row.get(3)?;
    let (vaults, scope_unreadable) = match parse_scope(&stored) {
        Some(v) => (v, false),
        None => {
            tracing::warn!("a credential's stored vault scope is unreadable; it sees no vault");
            (Vec::new(), true)
        }
    };
    Ok(Credential {
        id: CredentialId(row.get(0)?),
        name: row.get(1)?,
        // An unknown tier in the row is treated as the least privilege, never more.
        tier: tier.parse().unwrap_or(Tier::Read),
        vaults,
        scope_unreadable,
        jti: row.get(4)?,
        created_at: row.get(5)?,
        expires_at: row.get(6)?,
        revoked_at: row.get(7)?,
        last_used_at: row.get(8)?,
        approve_in_client: row.get::<_, i64>(9)? != 0,
    })
}

impl State {
    pub fn create_credential(&self, new: NewCredential) -> Result<Credential, StateError> {
        let conn = self.conn()?;
        create_credential_on(&conn, new)
    }

    /// Notes a use of the credential at `at` (the caller throttles: this is a write).
    pub fn touch_credential(&self, id: &CredentialId, at: i64) -> Result<(), StateError> {
        let conn = self.conn()?;
        conn.prepare_cached("UPDATE credentials SET last_used_at = ?2 WHERE id = ?1")?
            .execute(rusqlite::params![id.as_str(), at])?;
        Ok(())
    }

    /// The row for an id, read fresh (called on every request).
    pub fn credential(&self, id: &str) -> Result<Option<Credential>, StateError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(&format!("SELECT {COLUMNS} FROM credentials WHERE id = ?1"))?;
        Ok(stmt.query_row([id], from_row).optional()?)
    }

    /// The credentials' generation: it moves with every change to any credential, committed in
    /// that change's transaction (a trigger), so an unchanged value means every row read at it
    /// is still what the table holds.
    pub fn credential_generation(&self) -> Result<i64, StateError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached("SELECT n FROM credential_generation WHERE id = 1")?;
        Ok(stmt.query_row([], |r| r.get(0))?)
    }

    /// Finds by id or, failing that, by exact name.
    pub fn find_credential(&self, id_or_name: &str) -> Result<Credential, StateError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM credentials WHERE id = ?1 OR name = ?1 ORDER BY id = ?1 DESC LIMIT 1"
        ))?;
        stmt.query_row([id_or_name], from_row)
            .optional()?
            .ok_or_else(|| StateError::CredentialNotFound(id_or_name.to_owned()))
    }

    pub fn list_credentials(&self) -> Result<Vec<Credential>, StateError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM credentials ORDER BY created_at, id"
        ))?;
        let rows = stmt.query_map([], from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Marks the credential revoked (idempotent: the first revocation time is kept).
    pub fn revoke_credential(&self, id: &CredentialId, now: i64) -> Result<(), StateError> {
        let conn = self.conn()?;
        revoke_credential_on(&conn, id, now)
    }

    pub fn set_credential_tier(&self, id: &CredentialId, tier: Tier) -> Result<(), StateError> {
        let conn = self.conn()?;
        set_credential_tier_on(&conn, id, tier)
    }
}

pub(crate) fn create_credential_on(
    conn: &rusqlite::Connection,
    new: NewCredential,
) -> Result<Credential, StateError> {
    let id = CredentialId::generate();
    let vaults = serde_json::to_string(&new.vaults).unwrap_or_else(|_| "[]".into());
    let res = conn.execute(
        &format!("INSERT INTO credentials ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, NULL, ?8)"),
        params![
            id.0,
            new.name,
            new.tier.as_str(),
            vaults,
            new.jti,
            new.created_at,
            new.expires_at,
            i64::from(new.approve_in_client)
        ],
    );
    match res {
        Ok(_) => {}
        Err(rusqlite::Error::SqliteFailure(e, _)) if e.code == rusqlite::ErrorCode::ConstraintViolation => {
            return Err(StateError::DuplicateName(new.name));
        }
        Err(e) => return Err(e.into()),
    }
    Ok(new.stored(id))
}

pub(crate) fn revoke_credential_on(
    conn: &rusqlite::Connection,
    id: &CredentialId,
    now: i64,
) -> Result<(), StateError> {
    conn.execute(
        "UPDATE credentials SET revoked_at = COALESCE(revoked_at, ?2) WHERE id = ?1",
        params![id.0, now],
    )?;
    Ok(())
}

/// Revokes the credential and renames it, freeing its name for a successor (a rotation).
pub(crate) fn retire_credential_on(
    conn: &rusqlite::Connection,
    id: &CredentialId,
    now: i64,
    new_name: &str,
) -> Result<(), StateError> {
    conn.execute(
        "UPDATE credentials SET revoked_at = COALESCE(revoked_at, ?2), name = ?3 WHERE id = ?1",
        params![id.0, now, new_name],
    )?;
    Ok(())
}

pub(crate) fn set_credential_tier_on(
    conn: &rusqlite::Connection,
    id: &CredentialId,
    tier: Tier,
) -> Result<(), StateError> {
    conn.execute(
        "UPDATE credentials SET tier = ?2 WHERE id = ?1",
        params![id.0, tier.as_str()],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn new(name: &str, tier: Tier) -> NewCredential {
        NewCredential {
            name: name.into(),
            tier,
            vaults: vec![],
            jti: "j".into(),
            created_at: 100,
            expires_at: None,
            approve_in_client: false,
        }
    }

    #[test]
    fn every_change_to_a_credential_moves_the_generation_seen_by_another_connection() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sqlite");
        let writer = State::open(&path).unwrap();
        // Another process's server: its own connection to the same file.
        let server = State::open(&path).unwrap();
        let mut seen = server.credential_generation().unwrap();
        let mut moved = |what: &str| {
            let now = server.credential_generation().unwrap();
            assert!(now > seen, "{what} did not move the generation ({seen} -> {now})");
            seen = now;
        };
        let c = writer.create_credential(new("claude", Tier::Auto)).unwrap();
        moved("issuing");
        writer.set_credential_tier(&c.id, Tier::Read).unwrap();
        moved("a tier change");
        writer.touch_credential(&c.id, 150).unwrap();
        moved("noting a use");
        writer.revoke_credential(&c.id, 200).unwrap();
        moved("revoking");
        writer
            .conn()
            .unwrap()
            .execute(
                "UPDATE credentials SET expires_at = 1 WHERE id = ?1",
                [c.id.as_str()],
            )
            .unwrap();
        moved("any other update, by any code path");
        writer
            .conn()
            .unwrap()
            .execute("DELETE FROM credentials WHERE id = ?1", [c.id.as_str()])
            .unwrap();
        moved("deleting");
        let before = server.credential_generation().unwrap();
        let _ = server.credential(c.id.as_str()).unwrap();
        let _ = writer.list_credentials().unwrap();
        assert_eq!(server.credential_generation().unwrap(), before, "reads moved it");
    }

    #[test]
    fn create_find_revoke_set_tier() {
        let dir = tempfile::tempdir().unwrap();
        let s = State::open(&dir.path().join("s.sqlite")).unwrap();
        let c = s.create_credential(new("claude", Tier::Auto)).unwrap();
        assert!(c.id.as_str().starts_with("cred_"));
        assert!(matches!(
            s.create_credential(new("claude", Tier::Read)),
            Err(StateError::DuplicateName(_))
        ));
        assert_eq!(s.find_credential("claude").unwrap().id, c.id);
        assert_eq!(s.find_credential(c.id.as_str()).unwrap().name, "claude");
        assert!(matches!(
            s.find_credential("nobody"),
            Err(StateError::CredentialNotFound(_))
        ));
        s.set_credential_tier(&c.id, Tier::Full).unwrap();
        assert_eq!(s.credential(c.id.as_str()).unwrap().unwrap().tier, Tier::Full);
        s.revoke_credential(&c.id, 200).unwrap();
        s.revoke_credential(&c.id, 300).unwrap();
        assert_eq!(
            s.credential(c.id.as_str()).unwrap().unwrap().revoked_at,
            Some(200)
        );
        assert_eq!(s.list_credentials().unwrap().len(), 1);
    }

    #[test]
    fn the_in_client_approval_flag_is_stored_and_off_by_default() {
        let dir = tempfile::tempdir().unwrap();
        let s = State::open(&dir.path().join("s.sqlite")).unwrap();
        let plain = s.create_credential(new("plain", Tier::Propose)).unwrap();
        let mut flagged = new("flagged", Tier::Propose);
        flagged.approve_in_client = true;
        let flagged = s.create_credential(flagged).unwrap();
        assert!(flagged.approve_in_client);
        assert!(
            !s.credential(plain.id.as_str())
                .unwrap()
                .unwrap()
                .approve_in_client
        );
        assert!(
            s.credential(flagged.id.as_str())
                .unwrap()
                .unwrap()
                .approve_in_client
        );
    }

    #[test]
    fn scope_and_expiry() {
        let c = Credential {
            id: CredentialId("x".into()),
            name: "n".into(),
            tier: Tier::Read,
            vaults: vec!["a".into()],
            scope_unreadable: false,
            jti: String::new(),
            created_at: 0,
            expires_at: Some(10),
            revoked_at: None,
            last_used_at: None,
            approve_in_client: false,
        };
        assert!(c.may_see_vault("a") && !c.may_see_vault("b"));
        assert!(!c.is_expired(9) && c.is_expired(10));
    }

    #[test]
    fn an_unreadable_stored_scope_sees_no_vault() {
        let dir = tempfile::tempdir().unwrap();
        let s = State::open(&dir.path().join("s.sqlite")).unwrap();
        let mut scoped = new("scoped", Tier::Read);
        scoped.vaults = vec!["a".into()];
        let c = s.create_credential(scoped).unwrap();
        assert!(c.may_see_vault("a") && !c.may_see_vault("b"));
        for stored in [
            "[\"a\"",
            "garbage",
            "{\"a\": 1}",
            "42",
            "\"a\"",
            "[1]",
            "[\"\"]",
            "null",
        ] {
            s.conn()
                .unwrap()
                .execute(
                    "UPDATE credentials SET vaults = ?1 WHERE id = ?2",
                    [stored, c.id.as_str()],
                )
                .unwrap();
            let read = s.credential(c.id.as_str()).unwrap().unwrap();
            assert!(!read.may_see_vault("a"), "{stored}");
            assert!(
                !read.may_see_vault("b"),
                "{stored}: a damaged scope must not widen"
            );
        }
        s.conn()
            .unwrap()
            .execute(
                "UPDATE credentials SET vaults = '[]' WHERE id = ?1",
                [c.id.as_str()],
            )
            .unwrap();
        assert!(s.credential(c.id.as_str()).unwrap().unwrap().may_see_vault("b"));
    }
}
