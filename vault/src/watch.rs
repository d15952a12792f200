//! Watching a vault folder for changes made outside vaultgate, debounced into batches.
//!
//! It only reports; callers decide what a change means (revision, index update, announcements).

use std::path::{Component, Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use notify::{RecursiveMode, Watcher};

/// Keeps the OS watch alive; dropping it stops watching (the worker thread then ends).
pub struct Watch {
    _watcher: notify::RecommendedWatcher,
}

/// Longest a burst of events is held back before it is reported.
const MAX_HOLD: Duration = Duration::from_millis(800);

/// Watches `root` recursively and calls `on_change` with the changed vault-relative paths once a
/// burst of events has been quiet for `quiet` (and at most `MAX_HOLD` after it began). Events in
/// hidden folders (`.vaultgate/`, `.git/`, `.obsidian/`) are ignored.
pub fn watch(
    root: &Path,
    quiet: Duration,
    on_change: impl Fn(Vec<PathBuf>) + Send + 'static,
) -> notify::Result<Watch> {
    let root = root.to_path_buf();
    let (tx, rx) = mpsc::channel::<notify::Result<notify::Event>>();
    // Access events (every open of a note, ours included) are dropped on notify's own thread:
    // sent on, each read would wake the worker for nothing.
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if !matches!(&event, Ok(e) if matches!(e.kind, notify::EventKind::Access(_))) {
            let _ = tx.send(event);
        }
    })?;
    watcher.watch(&root, RecursiveMode::Recursive)?;
    std::thread::Builder::new()
        .name("vault-watch".into())
        .spawn(move || worker(&root, &rx, quiet, on_change))
        .map_err(|e| notify::Error::generic(&e.to_string()))?;
    Ok(Watch { _watcher: watcher })
}

fn relevant(root: &Path, path: &Path) -> Option<PathBuf> {
    let rel = path.strip_prefix(root).ok()?;
    let hidden = rel.components().any(|c| match c {
        Component::Normal(s) => s.to_str().is_none_or(|s| s.starts_with('.')),
        _ => true,
    });
    (!hidden && !rel.as_os_str().is_empty()).then(|| rel.to_path_buf())
}

fn worker(
    root: &Path,
    rx: &mpsc::Receiver<notify::Result<notify::Event>>,
    quiet: Duration,
    on_change: impl Fn(Vec<PathBuf>),
) {
    let mut pending: Vec<PathBuf> = Vec::new();
    let mut started: Option<Instant> = None;
    loop {
        let wait = match started {
            None => Duration::from_secs(3600),
            Some(t) => quiet.min(MAX_HOLD.saturating_sub(t.elapsed())),
        };
        match rx.recv_timeout(wait) {
            Ok(Ok(event)) => {
                for p in &event.paths {
                    if let Some(rel) = relevant(root, p) {
                        pending.push(rel);
                        started.get_or_insert_with(Instant::now);
                    }
                }
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "vault watch error"),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if started.take().is_some() {
                    pending.sort();
                    pending.dedup();
                    on_change(std::mem::take(&mut pending));
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_change_is_reported_once_and_hidden_folders_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join(".vaultgate")).unwrap();
        let (tx, rx) = mpsc::channel();
        let _w = watch(&root, Duration::from_millis(100), move |paths| {
            let _ = tx.send(paths);
        })
        .unwrap();
        std::fs::write(root.join(".vaultgate/index"), "x").unwrap();
        std::fs::write(root.join("a.md"), "one").unwrap();
        std::fs::write(root.join("a.md"), "two").unwrap();
        let batch = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(batch, vec![PathBuf::from("a.md")]);
        assert!(
            rx.recv_timeout(Duration::from_millis(400)).is_err(),
            "one batch for one burst"
        );
    }
}
