//! The one operator action that may touch bytes already in the log: dealing with a torn tail.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::chain::GENESIS;
use crate::error::AuditError;
use crate::file::{byte_at, last_lines, line_ending_at, open_lock_for_write};
use crate::record::AuditRecord;
use crate::verify::check_line;

/// What [`repair_torn_tail`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repair {
    /// The log ends with `\n` (or is empty): nothing to do.
    Clean,
    /// The fragment was a whole, valid record that links to the previous line and lacked only its
    /// `\n`; the newline was appended and the record kept.
    Completed { seq: u64 },
    /// The fragment (`len` bytes from `offset`) was copied to `saved_to`, fsynced, and then cut
    /// from the log.
    MovedAside {
        offset: u64,
        len: u64,
        saved_to: PathBuf,
    },
}

/// Repairs a log whose last line is unterminated: the trace of a write interrupted by a crash,
/// power loss or a full disk. Meant for an explicit operator command (`vaultgate audit repair`),
/// never for the append path.
///
/// A torn fragment was never acknowledged to any caller (an append returns only after its whole
/// line is written), so it is not a record; but it is evidence, so it is saved beside the log as
/// `audit.jsonl.torn-<offset>` (mode 0600) before being cut. If the fragment is in fact a
/// complete record missing only its newline, the newline is appended instead and nothing is cut.
pub fn repair_torn_tail(path: &Path) -> Result<Repair, AuditError> {
    let mut lock = fd_lock::RwLock::new(open_lock_for_write(path)?);
    let _exclusive = lock.write()?;
    let mut log = OpenOptions::new().read(true).write(true).open(path)?;
    let len = log.metadata()?.len();
    if len == 0 || byte_at(&log, len - 1)? == b'\n' {
        return Ok(Repair::Clean);
    }
    let fragment = line_ending_at(&log, len)?;

    if let Some(seq) = completes_the_chain(&log, fragment.offset, &fragment.bytes) {
        log.seek(SeekFrom::End(0))?;
        log.write_all(b"\n")?;
        log.sync_data()?;
        return Ok(Repair::Completed { seq });
    }

    let saved_to = save_fragment(path, fragment.offset, &fragment.bytes)?;
    log.set_len(fragment.offset)?;
    log.sync_all()?;
    Ok(Repair::MovedAside {
        offset: fragment.offset,
        len: len - fragment.offset,
        saved_to,
    })
}

/// `Some(seq)` if `fragment` is a valid record that follows the last complete line before it.
pub(crate) fn completes_the_chain(log: &File, offset: u64, fragment: &[u8]) -> Option<u64> {
    let (last_seq, prev) = if offset == 0 {
        (0, GENESIS.to_owned())
    } else {
        let line = last_lines(log, offset, 1).ok()?.pop()?;
        let record: AuditRecord = serde_json::from_slice(&line.bytes).ok()?;
        (record.seq, record.hash)
    };
    let record = check_line(fragment, last_seq.checked_add(1)?, &prev).ok()?;
    Some(record.seq)
}

fn save_fragment(log: &Path, offset: u64, bytes: &[u8]) -> Result<PathBuf, AuditError> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    for n in 0..100u32 {
        let mut name = log.as_os_str().to_owned();
        name.push(format!(".torn-{offset}"));
        if n > 0 {
            name.push(format!("-{n}"));
        }
        let candidate = PathBuf::from(name);
        match options.open(&candidate) {
            Ok(mut file) => {
                file.write_all(bytes)?;
                file.sync_all()?;
                sync_parent(&candidate)?;
                return Ok(candidate);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(AuditError::NoRepairName(log.to_path_buf()))
}

/// Makes the new file's name durable before the log is cut.
fn sync_parent(path: &Path) -> Result<(), AuditError> {
    #[cfg(unix)]
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        File::open(dir)?.sync_all()?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// Opens a new chain at `path` (docs/contract.md#the-audit-log `vaultgate audit restart --yes`): whatever file is there
/// now (a replacement, an empty file) is first moved aside as `audit.jsonl.replaced-<n>` and
/// kept, then `entry` is written as seq 1 and made durable. Returns where the old file went.
///
/// Only for an operator who has been told the log is missing or replaced: every running
/// process refuses to append to a replaced log, so they must be restarted afterwards.
pub fn restart_chain(
    path: &Path,
    now: time::OffsetDateTime,
    entry: crate::record::Entry,
) -> Result<(Option<PathBuf>, AuditRecord), AuditError> {
    let mut lock = fd_lock::RwLock::new(open_lock_for_write(path)?);
    let _exclusive = lock.write()?;
    let moved = if path.exists() {
        let mut aside = None;
        for n in 1..1000u32 {
            let mut name = path.as_os_str().to_owned();
            name.push(format!(".replaced-{n}"));
            let candidate = PathBuf::from(name);
            if !candidate.exists() {
                aside = Some(candidate);
                break;
            }
        }
        let aside = aside.ok_or_else(|| AuditError::NoRepairName(path.to_path_buf()))?;
        std::fs::rename(path, &aside)?;
        Some(aside)
    } else {
        None
    };
    let log = crate::file::open_log_for_append(path)?;
    let (record, line) = crate::chain::seal(entry, 0, GENESIS, now)?;
    (&log).write_all(line.as_bytes())?;
    log.sync_all()?;
    sync_parent(path)?;
    Ok((moved, record))
}
