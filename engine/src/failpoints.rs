//! Test-only crash and pause injection. The edge reads its settings from the environment and
//! passes them in; the engine reads no environment itself. Off (`Failpoints::default()`) in
//! every real run, and compiled out of release builds: only a build with debug assertions (the
//! tests') or the `failpoints` cargo feature can abort or pause on a setting.

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Where to abort or pause the process, as named steps of the write transaction.
#[derive(Debug, Clone, Default)]
pub struct Failpoints {
    /// Abort (as a power cut or `kill -9` would: no destructors, no flushing) at this step; or,
    /// for `index_update`, make the index update after a commit fail.
    pub abort_at: Option<String>,
    /// Pause at this step: create `<pause_file>.paused`, wait until `pause_file` exists.
    pub pause_at: Option<String>,
    pub pause_file: Option<PathBuf>,
}

/// How long a pause waits for its release at most.
const PAUSE_LIMIT: Duration = Duration::from_secs(60);

impl Failpoints {
    /// Whether this build injects anything at all.
    pub const COMPILED_IN: bool = cfg!(any(debug_assertions, feature = "failpoints"));

    pub(crate) fn hit(&self, step: &str) {
        if !Self::COMPILED_IN {
            return;
        }
        if self.pause_at.as_deref() == Some(step)
            && let Some(release) = &self.pause_file
        {
            let mut marker = release.clone().into_os_string();
            marker.push(".paused");
            if let Err(e) = std::fs::write(&marker, step) {
                tracing::warn!(error = %e, "failpoint: cannot write the pause marker");
            }
            let deadline = Instant::now() + PAUSE_LIMIT;
            while !release.exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        if self.abort_at.as_deref() == Some(step) {
            tracing::warn!(step, "failpoint: aborting");
            std::process::abort();
        }
    }

    /// Whether a named operation is to fail (not abort).
    pub(crate) fn fails(&self, name: &str) -> bool {
        Self::COMPILED_IN && self.abort_at.as_deref() == Some(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cargo test` (debug) injects; `cargo test --release` without the feature injects nothing.
    #[test]
    fn only_a_build_that_compiles_them_in_injects() {
        let f = Failpoints {
            abort_at: Some("index_update".into()),
            ..Failpoints::default()
        };
        assert_eq!(f.fails("index_update"), Failpoints::COMPILED_IN);
        assert!(!f.fails("another"));
        assert_eq!(
            Failpoints::COMPILED_IN,
            cfg!(debug_assertions) || cfg!(feature = "failpoints")
        );
    }
}
