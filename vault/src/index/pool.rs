//! The few threads index searches run on.
//!
//! A search's transient memory (bodies read, folded text, SQLite's iterators) is freed on the
//! thread that allocated it, into that thread's glibc arena, which keeps it. Run on every
//! blocking thread of a busy server (one per concurrent call), searches grew one arena each and
//! held tens of MiB resident for nothing; run here, at most `threads()` arenas hold them, and
//! the cores are as busy (calls beyond them queue, as they would for the cores).

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex, OnceLock};

type Job = Box<dyn FnOnce() + Send>;

/// Jobs queued beyond the running ones before a caller waits to queue its own.
const QUEUE: usize = 64;

/// Two per core: a search also waits (file checks, pages the OS must fetch), and another one
/// may run meanwhile.
fn threads() -> usize {
    std::thread::available_parallelism().map_or(4, |n| (2 * n.get()).clamp(2, 8))
}

fn queue() -> Option<&'static SyncSender<Job>> {
    static QUEUE_TX: OnceLock<Option<SyncSender<Job>>> = OnceLock::new();
    QUEUE_TX
        .get_or_init(|| {
            let (tx, rx) = sync_channel::<Job>(QUEUE);
            let rx = Arc::new(Mutex::new(rx));
            let mut started = 0;
            for i in 0..threads() {
                let rx = rx.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("vault-search-{i}"))
                    .spawn(move || work(&rx));
                match spawned {
                    Ok(_) => started += 1,
                    Err(e) => tracing::warn!(error = %e, "cannot start a search thread"),
                }
            }
            (started > 0).then_some(tx)
        })
        .as_ref()
}

fn work(rx: &Mutex<Receiver<Job>>) {
    loop {
        let job = {
            let rx = rx.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            rx.recv()
        };
        match job {
            // Each job catches its own panic (see `run`): the thread goes on.
            Ok(job) => job(),
            Err(_) => return,
        }
    }
}

/// Runs `f` on a search thread and waits for it; on the calling thread when there is none. A
/// panic in `f` resumes on the caller, as if `f` had run there.
pub(crate) fn run<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let Some(tx) = queue() else {
        return f();
    };
    let (done_tx, done) = sync_channel(1);
    // Shared with the job so that a queue that refuses it (never: the threads live as long as
    // the process) hands it back to run here.
    let slot = Arc::new(Mutex::new(Some(f)));
    let job_slot = slot.clone();
    let job: Job = Box::new(move || {
        let f = job_slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(f) = f {
            let _ = done_tx.send(catch_unwind(AssertUnwindSafe(f)));
        }
    });
    if tx.send(job).is_ok()
        && let Ok(out) = done.recv()
    {
        return out.unwrap_or_else(|p| resume_unwind(p));
    }
    let f = slot
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    match f {
        Some(f) => f(),
        // The job took `f` and its thread ended without an answer: only a panic while sending.
        None => resume_unwind(Box::new("a search thread stopped")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn runs_elsewhere_and_hands_back_answers_and_panics() {
        let here = std::thread::current().id();
        let (v, there) = run(|| (6 * 7, std::thread::current().id()));
        assert_eq!(v, 42);
        assert_ne!(here, there);
        let caught = catch_unwind(|| run(|| panic!("boom")));
        assert!(caught.is_err());
        // The threads survive a panic.
        assert_eq!(run(|| 1), 1);
    }
}
