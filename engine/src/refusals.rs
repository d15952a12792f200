//! Refusals of requests that carry no valid credential, aggregated (docs/contract.md#the-audit-log): at most one record
//! per window per kind and remote, each with a `count`, so an unauthenticated flood cannot fill
//! the disk.
//!
//! The first refusal of a (kind, remote) is written at once, so a lone failed login is in the log
//! before its answer. Later ones inside the window are only counted; a flusher thread writes
//! their sum once the window since the last record has passed, and whatever is still counted is
//! written when the [`Refusals`] is dropped (a clean shutdown).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use audit::{AuditLog, Durability, Entry};

/// Distinct (kind, remote) pairs kept at once; past it, new remotes share one bucket, so the map
/// stays bounded whatever the peers.
const MAX_KEYS: usize = 4096;
const OVERFLOW_REMOTE: &str = "(other)";

/// What one aggregated record stands for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct RefusalKey {
    /// The refusal's code (`UNAUTHORIZED`, `CREDENTIAL_REVOKED`, …).
    pub code: String,
    /// `http`, `stdio`.
    pub transport: &'static str,
    /// The peer address, when the transport has one.
    pub remote: String,
}

#[derive(Debug)]
struct Slot {
    /// When the last record of this key was written.
    written_at: Instant,
    /// Refusals counted since, not yet written.
    pending: u64,
}

/// Where the aggregated records go: the home's log, or a team's chain.
pub(crate) type Sink = Arc<dyn Fn(Entry) -> Result<(), String> + Send + Sync>;

struct Inner {
    audit: Sink,
    window: Duration,
    slots: Mutex<Slots>,
}

#[derive(Default)]
struct Slots {
    map: HashMap<RefusalKey, Slot>,
    flusher: bool,
}

/// The aggregator of one process; dropping it writes what is still counted.
pub(crate) struct Refusals {
    inner: Arc<Inner>,
}

/// What the caller must do about one refusal.
pub(crate) enum Noted {
    /// Write this record now (the first of a window) and answer only once it is written.
    Write(Box<Entry>),
    /// Counted; a later record carries it.
    Counted,
}

impl Refusals {
    /// Records to the home's log.
    pub(crate) fn new(log: Arc<AuditLog>, window: Duration) -> Refusals {
        Refusals::to(
            Arc::new(move |entry| {
                log.append(entry, time::OffsetDateTime::now_utc(), Durability::Sync)
                    .map(drop)
                    .map_err(|e| e.to_string())
            }),
            window,
        )
    }

    /// Records to `audit`.
    pub(crate) fn to(audit: Sink, window: Duration) -> Refusals {
        Refusals {
            inner: Arc::new(Inner {
                audit,
                window: window.max(Duration::from_millis(100)),
                slots: Mutex::new(Slots::default()),
            }),
        }
    }

    /// Notes one refusal of `key`. `Noted::Write`: no record of this key in the last window, so
    /// the caller writes this one (count 1 plus anything still counted) before answering.
    pub(crate) fn note(&self, key: RefusalKey, make: impl FnOnce(&RefusalKey, u64) -> Entry) -> Noted {
        let now = Instant::now();
        let mut slots = lock(&self.inner.slots);
        let key = if slots.map.len() >= MAX_KEYS && !slots.map.contains_key(&key) {
            RefusalKey {
                remote: OVERFLOW_REMOTE.to_owned(),
                ..key
            }
        } else {
            key
        };
        match slots.map.get_mut(&key) {
            Some(slot) if now.duration_since(slot.written_at) < self.inner.window => {
                slot.pending += 1;
                if !slots.flusher {
                    slots.flusher = true;
                    self.spawn_flusher();
                }
                Noted::Counted
            }
            Some(slot) => {
                let count = slot.pending + 1;
                slot.written_at = now;
                slot.pending = 0;
                Noted::Write(Box::new(make(&key, count)))
            }
            None => {
                let entry = make(&key, 1);
                slots.map.insert(
                    key,
                    Slot {
                        written_at: now,
                        pending: 0,
                    },
                );
                Noted::Write(Box::new(entry))
            }
        }
    }

    /// The thread that writes counted refusals once their window has passed; it ends when
    /// nothing is counted any more, or when the aggregator is gone.
    fn spawn_flusher(&self) {
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        let tick = (self.inner.window / 4).clamp(Duration::from_millis(25), Duration::from_millis(500));
        let spawned = std::thread::Builder::new()
            .name("vaultgate-refusals".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(tick);
                    let Some(inner) = weak.upgrade() else { return };
                    if !inner.flush(false) {
                        return;
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the refusal flusher; counts are written at shutdown");
        }
    }
}

impl Refusals {
    /// Writes every count now, whatever its window.
    pub(crate) fn flush_all(&self) {
        self.inner.flush(true);
    }
}

impl Drop for Refusals {
    fn drop(&mut self) {
        self.inner.flush(true);
    }
}

impl Inner {
    /// Writes every count whose window has passed (`all`: every count). Returns whether any is
    /// still counted; when none is, the flusher flag is cleared in the same critical section, so
    /// the next count starts a new flusher.
    fn flush(&self, all: bool) -> bool {
        let now = Instant::now();
        let (due, counting) = {
            let mut slots = lock(&self.slots);
            let mut due = Vec::new();
            for (key, slot) in slots.map.iter_mut() {
                if slot.pending > 0 && (all || now.duration_since(slot.written_at) >= self.window) {
                    due.push((key.clone(), slot.pending));
                    slot.pending = 0;
                    slot.written_at = now;
                }
            }
            let window = self.window;
            slots
                .map
                .retain(|_, s| s.pending > 0 || now.duration_since(s.written_at) < window);
            let counting = slots.map.values().any(|s| s.pending > 0);
            if !counting {
                slots.flusher = false;
            }
            (due, counting)
        };
        for (key, count) in due {
            let entry = refusal_entry(&key, count);
            if let Err(e) = (self.audit)(entry) {
                // No caller is waiting for these; the count is lost, and said so.
                tracing::error!(error = %e, count, code = %key.code, "writing aggregated refusals failed");
            }
        }
        counting
    }
}

/// The record of `count` refusals of `key`.
pub(crate) fn refusal_entry(key: &RefusalKey, count: u64) -> Entry {
    let mut e = Entry::new(
        "auth",
        audit::Actor::Credential {
            credential_id: String::new(),
            name: String::new(),
            tier: String::new(),
            transport: key.transport.to_owned(),
        },
        audit::Outcome::Denied,
    );
    e.code = Some(key.code.clone());
    e.target = Some(format!("remote:{}", key.remote));
    e.count = Some(count);
    e
}

fn lock(m: &Mutex<Slots>) -> MutexGuard<'_, Slots> {
    // Counts hold no invariant a panic could break half-way.
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn key(remote: &str) -> RefusalKey {
        RefusalKey {
            code: "UNAUTHORIZED".into(),
            transport: "http",
            remote: remote.into(),
        }
    }

    #[test]
    fn a_flood_becomes_a_few_records_whose_counts_sum_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = Arc::new(AuditLog::open(&path).unwrap());
        let r = Refusals::new(log.clone(), Duration::from_millis(200));
        let mut written = 0;
        for i in 0..500 {
            for remote in ["127.0.0.1", "::1"] {
                if let Noted::Write(e) = r.note(key(remote), refusal_entry) {
                    let e = *e;
                    log.append(e, time::OffsetDateTime::now_utc(), Durability::Flush)
                        .unwrap();
                    written += 1;
                }
            }
            if i % 100 == 0 {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        assert_eq!(written, 2, "one immediate record per remote");
        drop(r);
        let records = audit::tail(&path, 100).unwrap();
        assert!(records.len() <= 6, "{} records", records.len());
        let sum: u64 = records.iter().map(|r| r.count.unwrap()).sum();
        assert_eq!(sum, 1000);
        assert!(audit::verify(&path).unwrap().broken.is_none());
    }
}
