//! The append-only writer shared by every process that serves or administers one home.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard};

use time::OffsetDateTime;

use crate::chain::{GENESIS, seal};
use crate::error::AuditError;
use crate::file::{
    MAX_LINE_BYTES, byte_at, last_lines, line_ending_at, open_lock_for_write, open_log_for_append, stable_len,
};
use crate::record::{AuditRecord, Entry};

/// How far a record must have travelled before [`AuditLog::append`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Handed to the operating system (survives a crash of this process, not of the machine).
    Flush,
    /// `fsync`ed: survives power loss. For mutating calls, refusals and credential changes.
    Sync,
}

/// The end of the chain as this handle last left it. Valid only while the file still has
/// exactly `len` bytes; any other length means another process appended (or worse).
#[derive(Debug, Clone)]
struct Head {
    len: u64,
    seq: u64,
    hash: String,
}

#[derive(Debug)]
struct State {
    log: File,
    lock: fd_lock::RwLock<File>,
    head: Option<Head>,
}

/// A handle on `audit.jsonl`. `Send + Sync`; share it in an `Arc`.
///
/// Every append runs "read the tail → seal → write" under an in-process `Mutex` *and* an
/// exclusive `flock` on `audit.jsonl.lock`, because the HTTP server, each stdio server and the
/// CLI are separate processes appending to the same file; without the lock two of them could
/// read the same tail and write two records with the same `seq`.
///
/// `Durability::Sync` appends share their fsyncs (group commit): the `fdatasync` runs after both
/// locks are released, and one that starts after a line was written makes that line durable, so
/// concurrent callers wait for one sync instead of queueing one each behind the lock.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    state: Mutex<State>,
    syncs: Mutex<Syncs>,
    synced: Condvar,
}

/// Which file, and how many of its bytes, a finished `fdatasync` made durable.
#[derive(Debug, Default)]
struct Syncs {
    durable: Option<(FileKey, u64)>,
    in_flight: bool,
}

/// A file's identity: a replaced log is a new file whose bytes no earlier sync covered.
type FileKey = (u64, u64);

#[cfg(unix)]
/// The sync bookkeeping holds no invariant a panic could break half-way: carry on.
fn lock_syncs(m: &Mutex<Syncs>) -> MutexGuard<'_, Syncs> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

fn file_key(m: &std::fs::Metadata) -> FileKey {
    use std::os::unix::fs::MetadataExt;
    (m.dev(), m.ino())
}

#[cfg(not(unix))]
fn file_key(_m: &std::fs::Metadata) -> FileKey {
    (0, 0)
}

impl AuditLog {
    /// Opens the log at `path`, creating it (mode 0600 on unix) and its sidecar lock if missing.
    /// Nothing is read until the first append.
    pub fn open(path: &Path) -> Result<AuditLog, AuditError> {
        let log = open_log_for_append(path)?;
        let lock = fd_lock::RwLock::new(open_lock_for_write(path)?);
        Ok(AuditLog {
            path: path.to_path_buf(),
            state: Mutex::new(State {
                log,
                lock,
                head: None,
            }),
            syncs: Mutex::new(Syncs::default()),
            synced: Condvar::new(),
        })
    }

    /// The path this log appends to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Seals `entry` as the next record (seq, `ts` = `now` in UTC to the millisecond, prev, hash),
    /// writes it as one line and returns it.
    ///
    /// Refuses, writing nothing, when the log ends in a torn line ([`AuditError::TornTail`]),
    /// when its last line is not a record ([`AuditError::Parse`]), or when it is shorter than
    /// this handle left it ([`AuditError::Shrunk`]).
    pub fn append(
        &self,
        entry: Entry,
        now: OffsetDateTime,
        durability: Durability,
    ) -> Result<AuditRecord, AuditError> {
        self.append_with(entry, now, durability, false)
    }

    /// As [`AuditLog::append`], and first the free-space check of
    /// [`AuditLog::check_appendable`] under the same lock: a read call asks this instead of a
    /// separate check before it runs (it changes nothing, so refusing its answer is as early as
    /// refusing the call), which spares each read a second lock and its stats.
    pub fn append_reserving(
        &self,
        entry: Entry,
        now: OffsetDateTime,
        durability: Durability,
    ) -> Result<AuditRecord, AuditError> {
        self.append_with(entry, now, durability, true)
    }

    fn append_with(
        &self,
        entry: Entry,
        now: OffsetDateTime,
        durability: Durability,
        reserve: bool,
    ) -> Result<AuditRecord, AuditError> {
        let (record, file, key, end) = {
            let mut state = self.lock_state();
            let State { log, lock, head } = &mut *state;
            let _exclusive = lock.write()?;

            let meta = follow_path(&self.path, log)?;
            let len = meta.len();
            if reserve {
                let available = available_bytes(log)?;
                if available < RESERVE_BYTES {
                    return Err(AuditError::NoSpace {
                        available,
                        needed: RESERVE_BYTES,
                    });
                }
            }
            let (last_seq, prev) = match head {
                Some(h) if h.len == len => (h.seq, h.hash.clone()),
                // Kept cached, so appends stay refused while the file is shorter than we left it.
                Some(h) if h.len > len => {
                    return Err(AuditError::Shrunk {
                        expected_at_least: h.len,
                        actual: len,
                    });
                }
                _ => read_head(log, len)?,
            };

            let (record, line) = seal(entry, last_seq, &prev, now)?;
            if line.len() as u64 > MAX_LINE_BYTES {
                return Err(AuditError::RecordTooLarge {
                    len: line.len() as u64,
                    max: MAX_LINE_BYTES,
                });
            }
            // Forget the cache first: if the write fails half-way, the next append must look at
            // the file (and will find the torn line) instead of trusting a length that no longer
            // holds.
            *head = None;
            // One write_all on an O_APPEND file, under the exclusive lock: the line lands whole at
            // the end, never interleaved with another writer's.
            if let Err(e) = (&*log).write_all(line.as_bytes()) {
                // SECURITY(T-AUDIT5): a write cut short (a full disk) leaves our own fragment,
                // which nobody was told about; we still hold the lock and know where it began,
                // so it goes at once instead of blocking every later append.
                if log.set_len(len).is_ok() {
                    *head = None;
                }
                return Err(e.into());
            }
            let end = len + line.len() as u64;
            *head = Some(Head {
                len: end,
                seq: record.seq,
                hash: record.hash.clone(),
            });
            let file = match durability {
                Durability::Sync => Some(log.try_clone()?),
                Durability::Flush => None,
            };
            (record, file, file_key(&meta), end)
        };
        if let Some(file) = file {
            self.sync_through(&file, key, end)?;
        }
        Ok(record)
    }

    /// Makes every record appended so far durable: the sync a group commit shares after its
    /// members appended with [`Durability::Flush`] (one `fdatasync` for all of them, or none
    /// when a concurrent sync already covered them).
    /// It syncs the handle every append of this log went through (never a file reopened by its
    /// name), and refuses, as appends do, when the log at its path is another file.
    pub fn sync(&self) -> Result<(), AuditError> {
        let (file, meta) = {
            let mut state = self.lock_state();
            let meta = follow_path(&self.path, &mut state.log)?;
            (state.log.try_clone()?, meta)
        };
        self.sync_through(&file, file_key(&meta), meta.len())
    }

    /// Returns once the first `end` bytes of the file `key` are durable: at once when a sync that
    /// began after they were written has finished, else after a sync of its own (or of another
    /// caller's that began after them).
    fn sync_through(&self, file: &File, key: FileKey, end: u64) -> Result<(), AuditError> {
        let mut g = lock_syncs(&self.syncs);
        loop {
            if g.durable.is_some_and(|(k, upto)| k == key && upto >= end) {
                return Ok(());
            }
            if !g.in_flight {
                g.in_flight = true;
                drop(g);
                // Every byte written before the sync starts is covered by it.
                let covered = file.metadata().map(|m| m.len());
                let result = covered.and_then(|len| file.sync_data().map(|()| len));
                g = lock_syncs(&self.syncs);
                g.in_flight = false;
                self.synced.notify_all();
                let len = result?;
                if g.durable.is_none_or(|(k, upto)| k != key || upto < len) {
                    g.durable = Some((key, len));
                }
                if len >= end {
                    return Ok(());
                }
                continue;
            }
            g = match self.synced.wait(g) {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
        }
    }

    /// The log's length in bytes at a moment when no cooperating writer is mid-line: every record
    /// appended after this call starts at or after it. Noted before a transaction, it tells crash
    /// recovery where to look for the transaction's own line ([`AuditLog::find_since`]).
    pub fn end_offset(&self) -> Result<u64, AuditError> {
        let file = File::open(&self.path)?;
        Ok(stable_len(&self.path, &file)?)
    }

    /// The first record at or after byte `offset` for which `pred` is true, read as a stream (the
    /// cost follows what was appended since `offset`, not the log). `offset` is clamped to the
    /// length; one inside a line skips to the next line. A torn last line (an append cut short,
    /// so no caller was told it succeeded) is not a record and is ignored; any other line that is
    /// not a record is [`AuditError::Parse`], so a damaged log is never read as "not written".
    /// Lines are parsed, not verified: hashes and links are [`crate::verify`]'s job.
    pub fn find_since(
        &self,
        offset: u64,
        pred: impl FnMut(&AuditRecord) -> bool,
    ) -> Result<Option<AuditRecord>, AuditError> {
        find_since(&self.path, offset, pred)
    }

    /// Whether a record could be appended now, without writing one: the log is the file this
    /// handle opened, its last line is a record (no torn tail), and its file system has at least
    /// [`RESERVE_BYTES`] free. A mutating call asks first, so that a full disk refuses it before
    /// it changes anything (docs/contract.md#the-audit-log); the append itself still decides.
    pub fn check_appendable(&self) -> Result<(), AuditError> {
        let mut state = self.lock_state();
        let State { log, lock, head } = &mut *state;
        // The shared lock: another process's append in progress would otherwise look like a torn
        // tail and refuse a call that nothing is wrong with. Writers hold the exclusive lock only
        // for one write, so this waits for at most that.
        let _shared = lock.read()?;
        let len = follow_path(&self.path, log)?.len();
        match head {
            Some(h) if h.len == len => {}
            Some(h) if h.len > len => {
                return Err(AuditError::Shrunk {
                    expected_at_least: h.len,
                    actual: len,
                });
            }
            // Not cached: only an append fills the cache, from what it wrote itself.
            _ => {
                read_head(log, len)?;
            }
        }
        let available = available_bytes(log)?;
        if available < RESERVE_BYTES {
            return Err(AuditError::NoSpace {
                available,
                needed: RESERVE_BYTES,
            });
        }
        Ok(())
    }

    /// At the start of a process (docs/contract.md#the-audit-log): a torn last line (a crash or a full disk cut an
    /// append short, so no caller was told about it) is dropped and `record(dropped)` is appended
    /// in its place, under one exclusive lock. A fragment that is a whole record lacking only its
    /// newline gets the newline instead. `Ok(None)`: nothing was torn.
    pub fn repair_on_open(
        &self,
        now: OffsetDateTime,
        record: impl FnOnce(&Dropped) -> Entry,
    ) -> Result<Option<(Dropped, AuditRecord)>, AuditError> {
        let mut state = self.lock_state();
        let State { log, lock, head } = &mut *state;
        let _exclusive = lock.write()?;
        let len = follow_path(&self.path, log)?.len();
        if len == 0 || byte_at(log, len - 1)? == b'\n' {
            return Ok(None);
        }
        *head = None;
        let fragment = line_ending_at(log, len)?;
        if crate::repair::completes_the_chain(log, fragment.offset, &fragment.bytes).is_some() {
            (&*log).write_all(b"\n")?;
            log.sync_data()?;
            return Ok(None);
        }
        let dropped = Dropped {
            offset: fragment.offset,
            len: len - fragment.offset,
            sha256: crate::chain::sha256_hex(&fragment.bytes),
        };
        log.set_len(fragment.offset)?;
        log.sync_all()?;
        let (last_seq, prev) = read_head(log, fragment.offset)?;
        let (rec, line) = seal(record(&dropped), last_seq, &prev, now)?;
        if let Err(e) = (&*log).write_all(line.as_bytes()) {
            let _ = log.set_len(fragment.offset);
            return Err(e.into());
        }
        log.sync_data()?;
        *head = Some(Head {
            len: fragment.offset + line.len() as u64,
            seq: rec.seq,
            hash: rec.hash.clone(),
        });
        Ok(Some((dropped, rec)))
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(guard) => guard,
            Err(poisoned) => {
                // A panic mid-append cannot leave the file inconsistent (the line is one write),
                // but it may leave the cache stale: drop it and carry on.
                self.state.clear_poison();
                let mut guard = poisoned.into_inner();
                guard.head = None;
                guard
            }
        }
    }
}

/// [`AuditLog::find_since`] on the file at `path`.
fn find_since(
    path: &Path,
    offset: u64,
    mut pred: impl FnMut(&AuditRecord) -> bool,
) -> Result<Option<AuditRecord>, AuditError> {
    let file = File::open(path)?;
    // Bytes below this length no longer change (append-only), so the rest is read unlocked.
    let len = stable_len(path, &file)?;
    let mut pos = offset.min(len);
    (&file).seek(SeekFrom::Start(pos))?;
    let mut reader = BufReader::with_capacity(1 << 16, (&file).take(len - pos));
    if pos > 0 && byte_at(&file, pos - 1)? != b'\n' {
        // Inside a line: that line began before `offset`.
        pos += reader.skip_until(b'\n')? as u64;
    }
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let read = (&mut reader)
            .take(MAX_LINE_BYTES + 1)
            .read_until(b'\n', &mut buf)?;
        if read == 0 {
            return Ok(None);
        }
        let at = pos;
        pos += read as u64;
        if buf.last() != Some(&b'\n') {
            if buf.len() as u64 > MAX_LINE_BYTES {
                return Err(AuditError::Parse {
                    offset: at,
                    reason: format!("line is longer than {MAX_LINE_BYTES} bytes"),
                });
            }
            // The torn tail: its append never returned.
            return Ok(None);
        }
        buf.pop();
        let record: AuditRecord = serde_json::from_slice(&buf).map_err(|e| AuditError::Parse {
            offset: at,
            reason: e.to_string(),
        })?;
        if pred(&record) {
            return Ok(Some(record));
        }
    }
}

/// The (seq, hash) of the last record, read backwards from the end of the file.
fn read_head(log: &File, len: u64) -> Result<(u64, String), AuditError> {
    if len == 0 {
        return Ok((0, GENESIS.to_owned()));
    }
    // A torn tail (a write cut short by a crash, power loss or a full disk) is refused, not
    // worked around. Writing after the fragment would leave a line `verify` fails on forever;
    // chaining from the last complete line and leaving the fragment would require `verify` to
    // skip unterminated lines, a gap a forger could use; cutting it here would make the hot path
    // truncate the log. So appends fail closed, loudly, until an operator runs the repair
    // (`repair_torn_tail`), which saves the fragment before removing it.
    if byte_at(log, len - 1)? != b'\n' {
        let fragment = line_ending_at(log, len)?;
        return Err(AuditError::TornTail {
            offset: fragment.offset,
            remnant_len: len - fragment.offset,
        });
    }
    let Some(line) = last_lines(log, len, 1)?.pop() else {
        return Ok((0, GENESIS.to_owned()));
    };
    // The link only needs the stored seq and hash. Whether that record is intact is `verify`'s
    // question; if it was altered, `verify` names that line, and chaining on does not hide it.
    let record: AuditRecord = serde_json::from_slice(&line.bytes).map_err(|e| AuditError::Parse {
        offset: line.offset,
        reason: e.to_string(),
    })?;
    Ok((record.seq, record.hash))
}

/// SECURITY(T-AUDIT7): if `audit.jsonl` was deleted or replaced since we opened it, appends are
/// refused: following the path would silently start a new chain (docs/contract.md#the-audit-log — only
/// `vaultgate audit restart --yes` may), and writing to the old inode would write into the void.
#[cfg(unix)]
/// Refuses when `path` no longer names the file this handle appends to; else that file's
/// metadata (one `fstat` serves both checks).
fn follow_path(path: &Path, log: &mut File) -> Result<std::fs::Metadata, AuditError> {
    use std::os::unix::fs::MetadataExt;
    let ours = log.metadata()?;
    let same = match std::fs::metadata(path) {
        Ok(on_disk) => on_disk.dev() == ours.dev() && on_disk.ino() == ours.ino(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(e.into()),
    };
    if !same {
        return Err(AuditError::Replaced(path.to_path_buf()));
    }
    Ok(ours)
}

#[cfg(not(unix))]
fn follow_path(_path: &Path, log: &mut File) -> Result<std::fs::Metadata, AuditError> {
    // std exposes no stable file identity here; a replaced log is not detected on this platform.
    Ok(log.metadata()?)
}

/// Free bytes a mutating call needs on the log's file system before it changes anything: its
/// line (at most a few KiB) and the state commit that follows it, with room to spare.
pub const RESERVE_BYTES: u64 = 256 * 1024;

/// What [`AuditLog::repair_on_open`] dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// Where the torn bytes began.
    pub offset: u64,
    pub len: u64,
    /// Hex SHA-256 of the dropped bytes.
    pub sha256: String,
}

#[cfg(unix)]
fn available_bytes(file: &File) -> std::io::Result<u64> {
    let st = rustix::fs::fstatvfs(file)?;
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

#[cfg(not(unix))]
fn available_bytes(_file: &File) -> std::io::Result<u64> {
    Ok(u64::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::record::{Actor, Outcome};

    fn entry(i: usize) -> Entry {
        let mut e = Entry::new("tool_call", Actor::Cli { user: "alice".into() }, Outcome::Ok);
        e.target = Some(format!("notes/{i}.md"));
        e
    }

    #[test]
    fn audit_log_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<AuditLog>();
    }

    #[test]
    fn cache_is_used_when_length_matches_and_refreshed_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let a = AuditLog::open(&path).unwrap();
        let b = AuditLog::open(&path).unwrap();
        let now = OffsetDateTime::UNIX_EPOCH;
        let r1 = a.append(entry(1), now, Durability::Flush).unwrap();
        let r2 = b.append(entry(2), now, Durability::Flush).unwrap();
        let r3 = a.append(entry(3), now, Durability::Flush).unwrap();
        assert_eq!((r1.seq, r2.seq, r3.seq), (1, 2, 3));
        assert_eq!(r2.prev, r1.hash);
        assert_eq!(r3.prev, r2.hash);
    }

    /// A group's shared sync covers the appends it follows, and refuses when the log at its
    /// path was replaced after them (it never syncs another file and calls the records durable).
    #[cfg(unix)]
    #[test]
    fn the_shared_sync_covers_flushed_appends_and_refuses_a_replaced_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).unwrap();
        let now = OffsetDateTime::UNIX_EPOCH;
        log.append(entry(1), now, Durability::Flush).unwrap();
        log.append(entry(2), now, Durability::Flush).unwrap();
        log.sync().unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        assert!(
            lock_syncs(&log.syncs)
                .durable
                .is_some_and(|(_, upto)| upto == len),
            "both lines durable"
        );
        log.append(entry(3), now, Durability::Flush).unwrap();
        std::fs::rename(&path, dir.path().join("moved.jsonl")).unwrap();
        std::fs::write(&path, b"").unwrap();
        assert!(matches!(log.sync(), Err(AuditError::Replaced(_))));
    }

    #[cfg(unix)]
    #[test]
    fn a_replaced_or_deleted_log_is_refused_not_restarted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).unwrap();
        let now = OffsetDateTime::UNIX_EPOCH;
        log.append(entry(1), now, Durability::Flush).unwrap();
        std::fs::rename(&path, dir.path().join("moved.jsonl")).unwrap();
        let err = log.append(entry(2), now, Durability::Flush).unwrap_err();
        assert!(matches!(err, AuditError::Replaced(_)), "{err:?}");
        assert!(matches!(log.check_appendable(), Err(AuditError::Replaced(_))));
        std::fs::write(&path, b"").unwrap();
        assert!(matches!(
            log.append(entry(3), now, Durability::Flush),
            Err(AuditError::Replaced(_))
        ));
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            0,
            "nothing written to the new file"
        );
    }

    #[test]
    fn a_torn_tail_is_dropped_on_open_and_recorded_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).unwrap();
        let now = OffsetDateTime::UNIX_EPOCH;
        let r1 = log.append(entry(1), now, Durability::Flush).unwrap();
        let clean_len = std::fs::metadata(&path).unwrap().len();
        {
            let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
            f.write_all(b"{\"seq\":2,\"garbage").unwrap();
        }
        assert!(log.check_appendable().is_err(), "a torn tail is not appendable");
        let log = AuditLog::open(&path).unwrap();
        let (dropped, rec) = log
            .repair_on_open(now, |d| {
                let mut e = Entry::new("audit.repaired", Actor::Cli { user: "u".into() }, Outcome::Ok);
                e.count = Some(d.len);
                e
            })
            .unwrap()
            .unwrap();
        assert_eq!(dropped.offset, clean_len);
        assert_eq!(dropped.len, 17);
        assert_eq!(dropped.sha256, crate::chain::sha256_hex(b"{\"seq\":2,\"garbage"));
        assert_eq!(
            (rec.seq, rec.prev.as_str(), rec.count),
            (2, r1.hash.as_str(), Some(17))
        );
        assert!(log.repair_on_open(now, |_| unreachable!()).unwrap().is_none());
        let report = crate::verify(&path).unwrap();
        assert_eq!((report.records, report.broken), (2, None));
        log.append(entry(3), now, Durability::Flush).unwrap();
    }

    /// A line that crosses a page boundary becomes visible a page at a time, so a check that read
    /// the tail without the lock once saw another writer's append as a torn line and refused.
    #[test]
    fn an_append_in_progress_elsewhere_never_looks_torn() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let writer = AuditLog::open(&path).unwrap();
        let checker = AuditLog::open(&path).unwrap();
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let checks = s.spawn(|| {
                let mut n = 0u64;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Err(e) = checker.check_appendable() {
                        return Err(format!("check {n}: {e}"));
                    }
                    n += 1;
                }
                Ok(n)
            });
            let now = OffsetDateTime::UNIX_EPOCH;
            for i in 0..4000 {
                let mut e = entry(i);
                // Lines of varying length land across page boundaries at many offsets.
                e.target = Some("x".repeat(200 + (i * 37) % 3000));
                writer.append(e, now, Durability::Flush).unwrap();
            }
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            let checked = checks.join().unwrap().unwrap();
            assert!(checked > 0, "the checker ran");
        });
    }

    #[test]
    fn oversized_records_are_refused_before_writing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).unwrap();
        let mut e = entry(0);
        // Echoed strings are cut (chain.rs); a name the gateway itself holds is not.
        e.actor = Actor::Cli {
            user: "x".repeat(usize::try_from(MAX_LINE_BYTES).unwrap()),
        };
        let err = log
            .append(e, OffsetDateTime::UNIX_EPOCH, Durability::Flush)
            .unwrap_err();
        assert!(matches!(err, AuditError::RecordTooLarge { .. }));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    }
}
