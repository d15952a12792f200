//! The audit log's operator side, for `vaultgate audit` and `vaultgate doctor`: read it back,
//! repair it, and check (or restart) its chain against the head the state database last saw
//! (docs/contract.md#the-audit-log). Appending stays the engine's.

use std::path::{Path, PathBuf};

pub use audit::{
    AuditError, AuditRecord, Exported, FileReport, GENESIS, Repair, repair_torn_tail, tail, verify,
    verify_file,
};
use inbox::{AuditHead, State};

use crate::error::GatewayError;
use crate::home::Home;

/// How `audit.jsonl` compares with the head recorded in `state.sqlite`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadStatus {
    /// The log holds (at least) every record the state database has seen, or nothing was ever
    /// recorded.
    Ok,
    /// `audit.jsonl` does not exist, yet records up to `known_seq` were written.
    Missing { known_seq: u64, known_hash: String },
    /// `audit.jsonl` ends before `known_seq` (it holds `found_seq` records), or holds another
    /// record at that seq: it was truncated or replaced.
    Replaced {
        known_seq: u64,
        known_hash: String,
        found_seq: u64,
    },
}

impl HeadStatus {
    /// The problem and the next step, for a person; `None` when the head is fine.
    pub fn problem(&self) -> Option<String> {
        match self {
            HeadStatus::Ok => None,
            HeadStatus::Missing { known_seq, .. } => Some(format!(
                "audit.jsonl is missing, but state.sqlite has seen records up to seq {known_seq}; \
                 restore it from a backup, or run `vaultgate audit restart --yes` to open a new \
                 chain that names the old head"
            )),
            HeadStatus::Replaced {
                known_seq, found_seq, ..
            } => Some(format!(
                "audit.jsonl was truncated or replaced: it ends at seq {found_seq}, but \
                 state.sqlite has seen records up to seq {known_seq}; restore it from a backup, \
                 or run `vaultgate audit restart --yes` to open a new chain that names the old head"
            )),
        }
    }
}

/// Compares the home's `audit.jsonl` with the head in its `state.sqlite`. Reads only the last
/// line of the log.
pub fn head_check(home: &Home) -> Result<HeadStatus, GatewayError> {
    let state = State::open(&home.state_path())?;
    head_status(&home.audit_path(), &state)
}

/// The whole chain as `audit verify` and the review page report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainStatus {
    Holds {
        records: u64,
    },
    /// What is wrong and the next step.
    Broken(String),
}

/// Checks the head against the state database, then every line's hash and link.
pub fn chain_status(home: &Home) -> Result<ChainStatus, GatewayError> {
    // A log that lost its later records verifies as a shorter chain: the head the state
    // database saw tells (docs/contract.md#the-audit-log).
    if let Some(problem) = head_check(home)?.problem() {
        return Ok(ChainStatus::Broken(problem));
    }
    let report = verify(&home.audit_path())?;
    Ok(match report.broken {
        None => ChainStatus::Holds {
            records: report.records,
        },
        Some(b) => ChainStatus::Broken(format!(
            "audit chain broken at seq {} (line {}): {}",
            b.seq, b.line, b.reason
        )),
    })
}

/// The home log's last record (seq and hash), the whole log verified first (against the state
/// database's head too): what `team init --import` names as where the home's chain ended.
/// `None` for a log with no record.
pub fn verified_head(home: &Home) -> Result<Option<(u64, String)>, GatewayError> {
    if let ChainStatus::Broken(problem) = chain_status(home)? {
        return Err(GatewayError::AuditBroken(problem));
    }
    Ok(tail(&home.audit_path(), 1)?.pop().map(|r| (r.seq, r.hash)))
}

/// `vaultgate audit export`: every record after `since` written to `out` as JSON Lines in the
/// log's own format, each checked as `audit verify` checks it (the head against the state
/// database first). The export stops at a broken line, which is an error naming its seq; the
/// records before it were written.
pub fn export(
    home: &Home,
    since: u64,
    out: &mut dyn std::io::Write,
) -> Result<audit::Exported, GatewayError> {
    if let Some(problem) = head_check(home)?.problem() {
        return Err(GatewayError::AuditBroken(problem));
    }
    let e = audit::export(&home.audit_path(), since, out)?;
    match &e.broken {
        None => Ok(e),
        Some(b) => Err(GatewayError::AuditBroken(format!(
            "audit chain broken at seq {} (line {}): {}; the export stops before it",
            b.seq, b.line, b.reason
        ))),
    }
}

pub(crate) fn head_status(path: &Path, state: &State) -> Result<HeadStatus, GatewayError> {
    let Some(known) = state.audit_head()?.filter(|h| h.seq > 0) else {
        return Ok(HeadStatus::Ok);
    };
    if !path.exists() {
        return Ok(HeadStatus::Missing {
            known_seq: known.seq,
            known_hash: known.hash,
        });
    }
    let last = tail(path, 1)?.pop();
    let found_seq = last.as_ref().map_or(0, |r| r.seq);
    let same_head = last
        .as_ref()
        .is_some_and(|r| r.seq > known.seq || (r.seq == known.seq && r.hash == known.hash));
    if same_head {
        return Ok(HeadStatus::Ok);
    }
    Ok(HeadStatus::Replaced {
        known_seq: known.seq,
        known_hash: known.hash,
        found_seq,
    })
}

/// What [`restart`] did.
#[derive(Debug, Clone)]
pub struct Restarted {
    /// Where the file that stood in the log's place was moved (nothing when it was missing).
    pub moved_aside: Option<PathBuf>,
    /// The first record of the new chain.
    pub record: AuditRecord,
}

/// `vaultgate audit restart --yes`: opens a new chain whose first record (`audit.restarted`)
/// names the last known `seq` (its `count`) and `hash` (its `target`), and makes it the head the
/// state database knows. Refused when the chain is intact.
pub fn restart(home: &Home, user: &str) -> Result<Restarted, GatewayError> {
    let state = State::open(&home.state_path())?;
    let path = home.audit_path();
    let (known_seq, known_hash) = match head_status(&path, &state)? {
        HeadStatus::Ok => {
            return Err(GatewayError::InvalidArgument(
                "the audit chain matches the state database; there is nothing to restart".into(),
            ));
        }
        HeadStatus::Missing {
            known_seq,
            known_hash,
        }
        | HeadStatus::Replaced {
            known_seq,
            known_hash,
            ..
        } => (known_seq, known_hash),
    };
    let mut entry = audit::Entry::new(
        "audit.restarted",
        audit::Actor::Cli {
            user: user.to_owned(),
        },
        audit::Outcome::Ok,
    );
    entry.target = Some(format!("seq:{known_seq} hash:{known_hash}"));
    entry.count = Some(known_seq);
    let (moved_aside, record) = audit::restart_chain(&path, time::OffsetDateTime::now_utc(), entry)?;
    state.reset_audit_head(&AuditHead {
        seq: record.seq,
        hash: record.hash.clone(),
    })?;
    Ok(Restarted { moved_aside, record })
}
