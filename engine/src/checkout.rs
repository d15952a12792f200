//! A team vault's clone moving forward while notes of it are read (docs/contract.md#team-mode):
//! the reads of every process of the home wait for the checkout, so none answers a note half
//! written or gone for a moment.
//!
//! It must never be held across a sync of the clone by a reader (the checkout waits for it),
//! nor wait without end: a read waits at most [`READ_WAIT`] for a checkout, a checkout at most
//! [`CHECKOUT_WAIT`] for reads (a paused or stuck process of the home answers `VAULT_BUSY`
//! instead of stopping every reader). A lock file that cannot be made is logged and left out.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The longest a read waits for a checkout of its clone (one takes well under a second).
pub(crate) const READ_WAIT: Duration = Duration::from_secs(5);
/// The longest a checkout waits for the reads under way (each reads one note).
pub(crate) const CHECKOUT_WAIT: Duration = Duration::from_secs(10);

/// A lock not taken within its wait: another process of the home holds it (paused or stuck).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stuck;

/// Tries `take` until it holds (`Ok(true)`) or `wait` passed; an error of the lock itself is
/// `Ok(false)`: left out, as a lock file that cannot be made.
fn within(wait: Duration, take: impl Fn() -> Result<(), std::fs::TryLockError>) -> Result<bool, Stuck> {
    let until = Instant::now() + wait;
    let mut pause = Duration::from_micros(200);
    loop {
        match take() {
            Ok(()) => return Ok(true),
            Err(std::fs::TryLockError::WouldBlock) if Instant::now() < until => {
                std::thread::sleep(pause);
                // Short: a read waiting for a checkout is in as soon as it ends.
                pause = (pause * 2).min(Duration::from_millis(2));
            }
            Err(std::fs::TryLockError::WouldBlock) => return Err(Stuck),
            Err(std::fs::TryLockError::Error(_)) => return Ok(false),
        }
    }
}

/// A team vault's clone being checked out ([`crate::remote::checkout`]), told to every process
/// reading it: git replaces a file by removing it and writing it anew, so a read meanwhile
/// would answer `NOT_FOUND`, or part of the note, for a note the branch holds whole. Every
/// process of a home (each stdio client starts one) syncs the clone, so the lock is two
/// `flock`s beside it, each taken on a file opened for the purpose (so threads of one process
/// exclude each other too): a reader
/// passes `.<name>.checkout-next` (shared) and holds `.<name>.checkout` (shared) while it
/// reads; a checkout holds the first (exclusive) while it waits for the readers to leave the
/// second, so a stream of readers cannot keep it out. A fetch takes neither: reads wait only
/// for the checkout. A lock that cannot be taken (the files cannot be made) is logged and left
/// out: reads go on as before.
#[derive(Debug, Clone)]
pub(crate) struct Checkout {
    next: PathBuf,
    now: PathBuf,
}

/// A read of a team vault's clone under way ([`Checkout::reading`]).
pub(crate) struct Reading {
    _now: std::fs::File,
}

impl Checkout {
    pub(crate) fn of(dir: &Path) -> Option<Checkout> {
        let parent = dir.parent()?;
        let name = dir.file_name()?.to_string_lossy();
        Some(Checkout {
            next: parent.join(format!(".{name}.checkout-next")),
            now: parent.join(format!(".{name}.checkout")),
        })
    }

    fn open(path: &Path) -> Option<std::fs::File> {
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path);
        match opened {
            Ok(f) => Some(f),
            Err(e) => {
                // Once per process: every read would say it again.
                static TOLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
                if !TOLD.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    tracing::warn!(error = %e, file = %path.display(), "a clone's checkout lock could not be opened; reads go on without it");
                }
                None
            }
        }
    }

    /// Both locks, `next` first, each within `wait` (shared by a read, exclusive by a checkout);
    /// `None`: a lock file that cannot be made or locked, left out.
    fn take(&self, wait: Duration, shared: bool) -> Result<Option<(std::fs::File, std::fs::File)>, Stuck> {
        let lock = |f: &std::fs::File| match shared {
            true => f.try_lock_shared(),
            false => f.try_lock(),
        };
        let Some(next) = Self::open(&self.next) else {
            return Ok(None);
        };
        if !within(wait, || lock(&next))? {
            return Ok(None);
        }
        let Some(now) = Self::open(&self.now) else {
            return Ok(None);
        };
        // A read finds no checkout holding it (each takes `next` first); a checkout waits for the
        // reads under way, and dropping `next` on the way out lets the reads waiting for it in.
        if !within(wait, || lock(&now))? {
            return Ok(None);
        }
        Ok(Some((now, next)))
    }

    /// Waits (at most `wait`) until no checkout is under way or waiting, then holds one off until
    /// dropped. Never taken twice by one thread: a checkout waiting between the two would wait
    /// for the first, and the second for it.
    pub(crate) fn reading(&self, wait: Duration) -> Result<Option<Reading>, Stuck> {
        // `next` is let go at once: only a checkout waiting for it must keep new reads out.
        Ok(self.take(wait, true)?.map(|(now, _next)| Reading { _now: now }))
    }

    /// [`Checkout::reading`] for a read of vault `id`, within [`READ_WAIT`]: a checkout that does
    /// not end by then (its process paused or stuck) is `VAULT_BUSY`, never a note half written.
    pub(crate) fn read_of(&self, id: &str) -> Result<Option<Reading>, crate::error::GatewayError> {
        self.reading(READ_WAIT).map_err(|Stuck| {
            crate::error::GatewayError::VaultBusy(format!(
                "the clone of vault '{id}' is being updated by a process of this home that has not \
                 finished for {} s (paused or stuck?); nothing was read: retry, and run `vaultgate \
                 doctor` if it lasts",
                READ_WAIT.as_secs()
            ))
        })
    }

    /// Waits (at most `wait`) for the reads under way (new ones wait), then holds every read off
    /// until dropped.
    pub(crate) fn writing(&self, wait: Duration) -> Result<Option<(std::fs::File, std::fs::File)>, Stuck> {
        self.take(wait, false)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Version `i` of a note big enough that git takes a while to write it.
    fn big(i: usize) -> String {
        (0..20_000)
            .map(|n| format!("line {n} of version {i}\n"))
            .collect()
    }

    #[test]
    fn a_checkout_or_a_read_that_never_ends_holds_the_other_off_for_its_wait_only() {
        let tmp = tempfile::tempdir().unwrap();
        let clone = tmp.path().join("notes");
        let c = Checkout::of(&clone).unwrap();
        let short = Duration::from_millis(300);
        // A checkout whose process stopped mid-way (here: held, and never let go).
        let stuck = c.writing(short).unwrap().unwrap();
        let asked = Instant::now();
        assert_eq!(c.reading(short).err(), Some(Stuck));
        assert!(asked.elapsed() >= short, "gave up after {:?}", asked.elapsed());
        // Another checkout waits for it as long, too.
        assert_eq!(c.writing(short).err(), Some(Stuck));
        drop(stuck);
        // A read whose process stopped mid-way: a checkout gives up, and reads go on meanwhile.
        let reading = c.reading(short).unwrap().unwrap();
        assert_eq!(c.writing(short).err(), Some(Stuck));
        let other = c.reading(short).unwrap();
        assert!(other.is_some());
        drop((reading, other));
        // Nothing held: each is taken at once.
        let asked = Instant::now();
        let w = c.writing(Duration::from_secs(5)).unwrap();
        assert!(w.is_some());
        drop(w);
        assert!(c.reading(Duration::from_secs(5)).unwrap().is_some());
        assert!(asked.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_note_read_while_its_clone_is_checked_out_is_read_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let clone = tmp.path().join("notes");
        std::fs::create_dir(&clone).unwrap();
        let program = crate::git::Program::default();
        let git = |args: &[&str]| {
            let out = crate::remote::local(&program, clone.as_path())
                .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success(), "git {args:?}: {out:?}");
            String::from_utf8(out.stdout).unwrap().trim().to_owned()
        };
        git(&["init", "--quiet", "-b", "main"]);
        let mut commits = Vec::new();
        for i in 0..2 {
            std::fs::create_dir_all(clone.as_path().join("conf")).unwrap();
            std::fs::write(clone.as_path().join("conf/big.md"), big(i)).unwrap();
            git(&["add", "-A"]);
            git(&["commit", "--quiet", "-m", "v"]);
            commits.push(git(&["rev-parse", "HEAD"]));
        }
        let layout = policy::Layout::new(
            vec![policy::FolderPath::parse("conf").unwrap()],
            vec![],
            policy::VaultPath::parse("inbox").unwrap(),
            None,
        );
        let v = crate::core::VaultHandle {
            id: "team".into(),
            name: "team".into(),
            reader: vault::Vault::open(clone.as_path(), layout).unwrap(),
            group: Default::default(),
            lease: Default::default(),
            remote: Some("unused".into()),
            checkout: Checkout::of(clone.as_path()),
        };
        let versions = [big(0), big(1)];
        let stop = std::sync::atomic::AtomicBool::new(false);
        let done = std::sync::atomic::AtomicUsize::new(0);
        let (reads, torn) = std::thread::scope(|s| {
            let readers: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        let (mut reads, mut torn) = (0, Vec::new());
                        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                            match v.read_note("conf/big.md") {
                                Ok(n) if versions.contains(&n.content) => {}
                                Ok(n) => torn.push(format!("{} bytes", n.content.len())),
                                Err(e) => torn.push(e.to_string()),
                            }
                            reads += 1;
                            done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        (reads, torn)
                    })
                })
                .collect();
            // At least 40 checkouts, and enough reads among them on a busy machine.
            let mut round = 0;
            while round < 40 || (done.load(std::sync::atomic::Ordering::SeqCst) <= 40 && round < 4000) {
                crate::remote::checkout(&program, clone.as_path(), &commits[round % 2]).unwrap();
                round += 1;
                // Checkouts come a fetch apart, never back to back.
                std::thread::sleep(Duration::from_millis(3));
            }
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            readers
                .into_iter()
                .map(|r| r.join().unwrap())
                .fold((0, Vec::new()), |(n, mut t), (m, u)| {
                    t.extend(u);
                    (n + m, t)
                })
        });
        assert!(reads > 40, "{reads} reads");
        assert!(
            torn.is_empty(),
            "{} of {reads} reads were not whole: {:?}",
            torn.len(),
            &torn[..torn.len().min(5)]
        );
    }
}
