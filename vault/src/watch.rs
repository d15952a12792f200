//! Watching a vault folder for changes made outside vaultgate, debounced into batches.
//!
//! It only reports; callers decide what a change means (revision, index update, announcements).
//!
//! On Linux it speaks inotify itself rather than through `notify`: that crate's fixed mask
//! includes `IN_OPEN`, so every note any process opened (each `read_note` of every gateway on the
//! vault) woke each watching process, and it watches hidden folders too (a `git add` of a large
//! vault is a storm of events under `.git/`). Here hidden folders are never watched and opens are
//! never asked for. Elsewhere `notify` serves.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What one burst of events changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changes {
    /// The vault-relative paths named (files and folders), sorted, without duplicates.
    pub paths: Vec<PathBuf>,
    /// Events were lost (the kernel's queue overflowed, a folder could not be watched): anything
    /// may have changed, and only a walk can tell.
    pub lost: bool,
}

/// Longest a burst of events is held back before it is reported.
const MAX_HOLD: Duration = Duration::from_millis(800);
/// Paths one burst names at most; beyond them (a checkout, an unpacked archive) the burst is
/// reported as lost, and the walk it starts finds every change anyway.
const MAX_PATHS: usize = 10_000;

/// What the event source hands the debouncer.
enum Signal {
    Paths(Vec<PathBuf>),
    Lost,
}

/// Watches `root` recursively and calls `on_change` once a burst of events has been quiet for
/// `quiet` (and at most `MAX_HOLD` after it began). Events in hidden folders (`.vaultgate/`,
/// `.git/`, `.obsidian/`) and tooling folders (`node_modules/`, `target/`) are ignored.
pub fn watch(
    root: &Path,
    quiet: Duration,
    on_change: impl Fn(Changes) + Send + 'static,
) -> std::io::Result<Watch> {
    imp::watch(root, quiet, on_change)
}

/// Gathers signals into bursts and reports each once it is quiet; ends when the source hangs up.
fn debounce(rx: &mpsc::Receiver<Signal>, quiet: Duration, on_change: impl Fn(Changes)) {
    let mut pending = Changes::default();
    let mut started: Option<Instant> = None;
    loop {
        let wait = match started {
            None => Duration::from_secs(3600),
            Some(t) => quiet.min(MAX_HOLD.saturating_sub(t.elapsed())),
        };
        match rx.recv_timeout(wait) {
            Ok(signal) => {
                match signal {
                    Signal::Paths(paths) if paths.is_empty() => continue,
                    Signal::Paths(paths) => pending.paths.extend(paths),
                    Signal::Lost => pending.lost = true,
                }
                if pending.lost || pending.paths.len() > MAX_PATHS {
                    pending.lost = true;
                    pending.paths = Vec::new();
                }
                started.get_or_insert_with(Instant::now);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if started.take().is_some() {
                    pending.paths.sort();
                    pending.paths.dedup();
                    on_change(std::mem::take(&mut pending));
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

pub use imp::Watch;

#[cfg(target_os = "linux")]
mod imp {
    use std::collections::HashMap;
    use std::ffi::OsStr;
    use std::io;
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};

    use super::{Changes, Signal, debounce};

    /// Keeps the watch alive; dropping it stops both threads (within `IDLE_POLL`).
    pub struct Watch {
        stop: Arc<AtomicBool>,
        watches: Watches,
        root: WatchDescriptor,
    }

    impl Drop for Watch {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Release);
            // Removing the root's watch queues `IN_IGNORED`, which wakes the reader at once.
            let _ = self.watches.remove(self.root.clone());
        }
    }

    /// How often an idle reader looks at its stop flag (should the wake-up above be lost).
    const IDLE_POLL: Duration = Duration::from_secs(5);
    /// Folders below the root that are watched, at most (as the walks' own depth limit).
    const MAX_DEPTH: usize = crate::fs::MAX_DEPTH;

    /// What a folder is watched for: every change to what it holds, never an open or a read.
    fn mask() -> WatchMask {
        WatchMask::CREATE
            | WatchMask::DELETE
            | WatchMask::MODIFY
            | WatchMask::CLOSE_WRITE
            | WatchMask::ATTRIB
            | WatchMask::MOVED_FROM
            | WatchMask::MOVED_TO
            | WatchMask::DELETE_SELF
            | WatchMask::MOVE_SELF
            | WatchMask::ONLYDIR
            | WatchMask::DONT_FOLLOW
            | WatchMask::EXCL_UNLINK
    }

    pub fn watch(
        root: &Path,
        quiet: Duration,
        on_change: impl Fn(Changes) + Send + 'static,
    ) -> io::Result<Watch> {
        let inotify = Inotify::init()?;
        let mut tree = Tree {
            root: root.to_path_buf(),
            watches: inotify.watches(),
            dirs: HashMap::new(),
        };
        // The root may be reached through a symlink (the folder the user named); nothing below is.
        let root_wd = tree.watches.add(root, mask() & !WatchMask::DONT_FOLLOW)?;
        tree.dirs.insert(root_wd.clone(), PathBuf::new());
        // A folder that cannot be watched at start (too many folders for the kernel's limit) is
        // logged; its changes are still caught by the next walk.
        let _ = tree.add_below(&PathBuf::new(), 0, &mut Vec::new());
        let stop = Arc::new(AtomicBool::new(false));
        let handle = Watch {
            stop: stop.clone(),
            watches: inotify.watches(),
            root: root_wd,
        };
        let (tx, rx) = mpsc::channel::<Signal>();
        std::thread::Builder::new()
            .name("vault-watch".into())
            .spawn(move || debounce(&rx, quiet, on_change))?;
        std::thread::Builder::new()
            .name("vault-inotify".into())
            .spawn(move || read_loop(inotify, tree, &stop, &tx))?;
        Ok(handle)
    }

    /// The watched folders: each watch and the vault-relative folder it is on.
    struct Tree {
        root: PathBuf,
        watches: Watches,
        dirs: HashMap<WatchDescriptor, PathBuf>,
    }

    impl Tree {
        /// Watches every visible folder below `rel` (which is watched already). Returns the
        /// paths of the entries found, for a folder that appeared with contents; `Err` when a
        /// folder could not be watched.
        fn add_below(&mut self, rel: &Path, depth: usize, found: &mut Vec<PathBuf>) -> Result<(), ()> {
            let mut ok = true;
            let Ok(entries) = std::fs::read_dir(self.root.join(rel)) else {
                return Ok(());
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                if hidden(&name) {
                    continue;
                }
                let child = rel.join(&name);
                found.push(child.clone());
                // `file_type` does not follow symlinks: a linked folder is not entered.
                let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
                if !is_dir || depth + 1 > MAX_DEPTH {
                    continue;
                }
                match self.watches.add(self.root.join(&child), mask()) {
                    Ok(wd) => {
                        self.dirs.insert(wd, child.clone());
                        ok &= self.add_below(&child, depth + 1, found).is_ok();
                    }
                    // Gone since the listing, or replaced by a symlink (`ONLYDIR`, `DONT_FOLLOW`).
                    Err(e) if matches!(e.raw_os_error(), Some(2 | 20 | 40)) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot watch a vault folder; its changes are noticed by the next walk");
                        ok = false;
                    }
                }
            }
            if ok { Ok(()) } else { Err(()) }
        }

        /// Stops watching `rel` and everything below it (moved away: its watches would name the
        /// old paths).
        fn forget_below(&mut self, rel: &Path) {
            let gone: Vec<WatchDescriptor> = self
                .dirs
                .iter()
                .filter(|(_, p)| p.starts_with(rel))
                .map(|(wd, _)| wd.clone())
                .collect();
            for wd in gone {
                self.dirs.remove(&wd);
                let _ = self.watches.remove(wd);
            }
        }
    }

    /// Names never watched or reported: dot-names and tooling folders (the hard deny-list, which
    /// no read may enter anyway) and names that are not UTF-8.
    fn hidden(name: &OsStr) -> bool {
        name.to_str()
            .is_none_or(|s| policy::path::hard_deny_segment(s).is_err())
    }

    fn read_loop(mut inotify: Inotify, mut tree: Tree, stop: &AtomicBool, tx: &mpsc::Sender<Signal>) {
        // Room for a few hundred events per read (each is 16 bytes plus its name).
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            if stop.load(Ordering::Acquire) {
                return;
            }
            let mut fds = [rustix::event::PollFd::new(&inotify, rustix::event::PollFlags::IN)];
            let timeout = rustix::event::Timespec {
                tv_sec: IDLE_POLL.as_secs() as i64,
                tv_nsec: 0,
            };
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "vault watch stopped");
                    return;
                }
            }
            let events = match inotify.read_events(&mut buffer) {
                Ok(events) => events,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "vault watch stopped");
                    return;
                }
            };
            let mut paths = Vec::new();
            let mut lost = false;
            let mut new_dirs = Vec::new();
            for event in events {
                if event.mask.contains(EventMask::Q_OVERFLOW) {
                    lost = true;
                    continue;
                }
                if event.mask.contains(EventMask::IGNORED) {
                    tree.dirs.remove(&event.wd);
                    continue;
                }
                let Some(dir) = tree.dirs.get(&event.wd) else {
                    continue;
                };
                let Some(name) = event.name else {
                    // An event on the folder itself (deleted, moved): its parent reports the name.
                    continue;
                };
                if hidden(name) {
                    continue;
                }
                let rel = dir.join(name);
                if event.mask.contains(EventMask::ISDIR) {
                    if event.mask.intersects(EventMask::MOVED_FROM | EventMask::DELETE) {
                        tree.forget_below(&rel);
                    }
                    if event.mask.intersects(EventMask::CREATE | EventMask::MOVED_TO) {
                        new_dirs.push(rel.clone());
                    }
                }
                paths.push(rel);
            }
            for rel in new_dirs {
                // Watch it first, then list it: whatever was written into it before the watch
                // existed is in the listing, whatever after is an event.
                let depth = rel.components().count();
                if depth > MAX_DEPTH {
                    continue;
                }
                match tree.watches.add(tree.root.join(&rel), mask()) {
                    Ok(wd) => {
                        tree.dirs.insert(wd, rel.clone());
                        lost |= tree.add_below(&rel, depth, &mut paths).is_err();
                    }
                    Err(e) if matches!(e.raw_os_error(), Some(2 | 20 | 40)) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot watch a new vault folder; its changes are noticed by the next walk");
                        lost = true;
                    }
                }
            }
            if lost {
                tracing::warn!("vault watch lost events; the vault is walked");
                if tx.send(Signal::Lost).is_err() {
                    return;
                }
            }
            if tx.send(Signal::Paths(paths)).is_err() {
                return;
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::io;
    use std::path::Path;
    use std::sync::mpsc;
    use std::time::Duration;

    use notify::{RecursiveMode, Watcher};
    use std::path::{Component, PathBuf};

    use super::{Changes, Signal, debounce};

    fn relevant(root: &Path, path: &Path) -> Option<PathBuf> {
        let rel = path.strip_prefix(root).ok()?;
        let hidden = rel.components().any(|c| match c {
            Component::Normal(s) => s.to_str().is_none_or(|s| s.starts_with('.')),
            _ => true,
        });
        (!hidden && !rel.as_os_str().is_empty()).then(|| rel.to_path_buf())
    }

    /// Keeps the OS watch alive; dropping it stops watching (the worker thread then ends).
    pub struct Watch {
        _watcher: notify::RecommendedWatcher,
    }

    pub fn watch(
        root: &Path,
        quiet: Duration,
        on_change: impl Fn(Changes) + Send + 'static,
    ) -> io::Result<Watch> {
        let root = root.to_path_buf();
        let (tx, rx) = mpsc::channel::<Signal>();
        let at = root.clone();
        let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            let signal = match event {
                Ok(e) if matches!(e.kind, notify::EventKind::Access(_)) => return,
                Ok(e) if e.need_rescan() => Signal::Lost,
                Ok(e) => Signal::Paths(e.paths.iter().filter_map(|p| relevant(&at, p)).collect()),
                Err(e) => {
                    tracing::warn!(error = %e, "vault watch error");
                    Signal::Lost
                }
            };
            let _ = tx.send(signal);
        })
        .map_err(io::Error::other)?;
        watcher
            .watch(&root, RecursiveMode::Recursive)
            .map_err(io::Error::other)?;
        std::thread::Builder::new()
            .name("vault-watch".into())
            .spawn(move || debounce(&rx, quiet, on_change))?;
        Ok(Watch { _watcher: watcher })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn started(root: &Path) -> (Watch, mpsc::Receiver<Changes>) {
        let (tx, rx) = mpsc::channel();
        let w = watch(root, Duration::from_millis(100), move |c| {
            let _ = tx.send(c);
        })
        .unwrap();
        (w, rx)
    }

    #[test]
    fn a_change_is_reported_once_and_hidden_folders_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join(".vaultgate")).unwrap();
        let (_w, rx) = started(&root);
        std::fs::write(root.join(".vaultgate/index"), "x").unwrap();
        std::fs::write(root.join("a.md"), "one").unwrap();
        std::fs::write(root.join("a.md"), "two").unwrap();
        let batch = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(batch.paths, vec![PathBuf::from("a.md")]);
        assert!(!batch.lost);
        assert!(
            rx.recv_timeout(Duration::from_millis(400)).is_err(),
            "one batch for one burst"
        );
    }

    #[test]
    fn reading_a_note_is_no_change() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("n")).unwrap();
        std::fs::write(root.join("n/a.md"), "one").unwrap();
        let (_w, rx) = started(&root);
        for _ in 0..20 {
            assert_eq!(std::fs::read_to_string(root.join("n/a.md")).unwrap(), "one");
        }
        assert!(
            rx.recv_timeout(Duration::from_millis(500)).is_err(),
            "reads reported"
        );
    }

    #[test]
    fn new_nested_folders_are_watched_and_renamed_ones_report_their_new_paths() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let (_w, rx) = started(&root);
        // Made in one go, faster than a watch can be added: the listing catches what the
        // events miss.
        std::fs::create_dir_all(root.join("a/b/c")).unwrap();
        std::fs::write(root.join("a/b/c/x.md"), "x").unwrap();
        let batch = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(batch.paths.contains(&PathBuf::from("a")), "{batch:?}");
        assert!(batch.paths.contains(&PathBuf::from("a/b/c/x.md")), "{batch:?}");
        // Now watched: an edit deep inside is named.
        std::fs::write(root.join("a/b/c/x.md"), "y").unwrap();
        let batch = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(batch.paths, vec![PathBuf::from("a/b/c/x.md")]);
        // Renamed: edits are named under the new path, never the old one.
        std::fs::rename(root.join("a"), root.join("z")).unwrap();
        let batch = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(batch.paths.contains(&PathBuf::from("a")), "{batch:?}");
        assert!(batch.paths.contains(&PathBuf::from("z")), "{batch:?}");
        std::fs::write(root.join("z/b/c/x.md"), "w").unwrap();
        let batch = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(batch.paths, vec![PathBuf::from("z/b/c/x.md")]);
    }

    #[test]
    fn hidden_folders_are_not_watched_even_when_made_later() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let (_w, rx) = started(&root);
        std::fs::create_dir_all(root.join(".git/objects/ab")).unwrap();
        std::fs::write(root.join(".git/objects/ab/cd"), "x").unwrap();
        assert!(
            rx.recv_timeout(Duration::from_millis(500)).is_err(),
            "hidden folder reported"
        );
        std::fs::write(root.join(".git/objects/ab/ef"), "y").unwrap();
        std::fs::write(root.join("b.md"), "b").unwrap();
        let batch = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(batch.paths, vec![PathBuf::from("b.md")]);
    }

    /// A burst naming more than `MAX_PATHS` is reported as lost, holding no paths.
    #[test]
    fn a_huge_burst_is_reported_as_lost_without_its_paths() {
        let (tx, rx) = mpsc::channel();
        let (out_tx, out_rx) = mpsc::channel();
        let worker = std::thread::spawn(move || {
            debounce(&rx, Duration::from_millis(50), move |c| {
                let _ = out_tx.send(c);
            })
        });
        for i in 0..3 {
            let paths = (0..MAX_PATHS / 2)
                .map(|j| PathBuf::from(format!("{i}/{j}.md")))
                .collect();
            tx.send(Signal::Paths(paths)).unwrap();
        }
        let batch = out_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(
            batch.lost && batch.paths.is_empty(),
            "{} paths, lost {}",
            batch.paths.len(),
            batch.lost
        );
        tx.send(Signal::Paths(vec![PathBuf::from("a.md")])).unwrap();
        let batch = out_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(
            batch,
            Changes {
                paths: vec![PathBuf::from("a.md")],
                lost: false
            }
        );
        drop(tx);
        worker.join().unwrap();
    }

    #[test]
    fn dropping_the_watch_ends_its_threads() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let (w, rx) = started(&root);
        drop(w);
        // The debouncer hangs up once the reader has gone: the channel disconnects.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                _ if Instant::now() > deadline => panic!("watch threads still running"),
                _ => {}
            }
        }
    }
}
