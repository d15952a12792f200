//! glibc's allocator, tuned for a long-running server before it starts.
//!
//! glibc raises its mmap threshold to the size of each large block freed (up to 32 MiB), and
//! its trim threshold to twice that. After a server frees one walk of a large vault or one broad
//! query's rows, each of its arenas keeps megabytes it no longer uses. A serve on 100,000 notes
//! held 128–131 MiB after a few searches and queries, against 94 MiB with the threshold fixed.
//! The crates here make no foreign calls, so `mallopt` is out of reach; glibc's tunables, read
//! once at start-up, are the way in. So `serve` and `stdio` re-execute themselves once with the tunable set, before
//! anything else has run (no thread, no file opened, no byte read from stdin).

use std::ffi::OsString;

/// The tunable, and the value glibc starts from (128 KiB), made fixed.
const TUNABLE: &str = "glibc.malloc.mmap_threshold";
const VALUE: &str = "131072";

/// Replaces this process with itself, the tunable added, unless it is set already (by an
/// earlier pass, or by the operator). Returns only when that is not done or not possible:
/// the server then runs with glibc's defaults.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn settle() {
    use std::os::unix::process::CommandExt;
    let current = std::env::var_os("GLIBC_TUNABLES").unwrap_or_default();
    let Some(tunables) = with_tunable(&current) else {
        return;
    };
    let mut args = std::env::args_os();
    let Some(arg0) = args.next() else { return };
    // The very file this process runs, even if its path has been replaced since.
    let err = std::process::Command::new("/proc/self/exe")
        .arg0(arg0)
        .args(args)
        .env("GLIBC_TUNABLES", tunables)
        .exec();
    // Still here: exec failed (no /proc, say). Nothing has changed; run as we are.
    let _ = err;
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn settle() {}

/// `current` with the tunable appended, or `None` when it names it already.
fn with_tunable(current: &std::ffi::OsStr) -> Option<OsString> {
    let text = current.to_string_lossy();
    if text.split(':').any(|t| t.split('=').next() == Some(TUNABLE)) {
        return None;
    }
    let mut out = OsString::from(current);
    if !out.is_empty() {
        out.push(":");
    }
    out.push(format!("{TUNABLE}={VALUE}"));
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tunable_is_added_once_and_others_are_kept() {
        assert_eq!(
            with_tunable("".as_ref()),
            Some(OsString::from("glibc.malloc.mmap_threshold=131072"))
        );
        assert_eq!(
            with_tunable("glibc.malloc.arena_max=2".as_ref()),
            Some(OsString::from(
                "glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=131072"
            ))
        );
        assert_eq!(with_tunable("glibc.malloc.mmap_threshold=131072".as_ref()), None);
        // The operator's own value wins.
        assert_eq!(
            with_tunable("a=1:glibc.malloc.mmap_threshold=1048576".as_ref()),
            None
        );
    }
}
