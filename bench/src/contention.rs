//! How much CPU other processes used while a size was measured: the machine is shared (2 cores),
//! so the report says how quiet it was instead of assuming it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Linux reports process times in clock ticks of 1/100 s (USER_HZ) on every common platform.
const TICKS_PER_SEC: f64 = 100.0;

/// pid → (parent pid, user + system ticks so far).
fn snapshot() -> HashMap<u32, (u32, u64)> {
    let mut m = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return m;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if let Some(v) = parse_stat(&stat) {
            m.insert(pid, v);
        }
    }
    m
}

/// (ppid, utime + stime) from a `/proc/<pid>/stat` line (the command name may hold spaces).
fn parse_stat(stat: &str) -> Option<(u32, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ppid = f.get(1)?.parse().ok()?;
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((ppid, utime + stime))
}

/// Waits until `pids` together use less than a tenth of a core over a second (their start-up
/// work done), at most `limit`; how long it waited, and whether they were quiet by then.
pub fn settle(pids: &[u32], limit: Duration) -> (Duration, bool) {
    let start = Instant::now();
    let ticks = || -> u64 {
        pids.iter()
            .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok())
            .filter_map(|s| parse_stat(&s))
            .map(|(_, t)| t)
            .sum()
    };
    let mut last = ticks();
    while start.elapsed() < limit {
        std::thread::sleep(Duration::from_secs(1));
        let now = ticks();
        // Without /proc every count is 0: never called quiet.
        if now > 0 && now.saturating_sub(last) < (TICKS_PER_SEC / 10.0) as u64 {
            return (start.elapsed(), true);
        }
        last = now;
    }
    (start.elapsed(), false)
}

/// This process and its descendants.
fn mine(snap: &HashMap<u32, (u32, u64)>, me: u32) -> HashSet<u32> {
    let mut set = HashSet::from([me]);
    loop {
        let before = set.len();
        for (pid, (ppid, _)) in snap {
            if set.contains(ppid) {
                set.insert(*pid);
            }
        }
        if set.len() == before {
            return set;
        }
    }
}

/// Samples every second until stopped; the CPU seconds used by processes outside this one's tree.
pub struct Watch {
    stop: Arc<AtomicBool>,
    ticks: Arc<AtomicU64>,
    started: Instant,
    thread: Option<JoinHandle<()>>,
}

impl Watch {
    pub fn start() -> Watch {
        let stop = Arc::new(AtomicBool::new(false));
        let ticks = Arc::new(AtomicU64::new(0));
        let (s, t) = (stop.clone(), ticks.clone());
        let me = std::process::id();
        let thread = std::thread::spawn(move || {
            let mut prev = snapshot();
            while !s.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_secs(1));
                let now = snapshot();
                let ours = mine(&now, me);
                let mut foreign = 0;
                for (pid, (_, cpu)) in &now {
                    if ours.contains(pid) {
                        continue;
                    }
                    let before = prev.get(pid).map_or(0, |p| p.1);
                    foreign += cpu.saturating_sub(before);
                }
                t.fetch_add(foreign, Ordering::Relaxed);
                prev = now;
            }
        });
        Watch {
            stop,
            ticks,
            started: Instant::now(),
            thread: Some(thread),
        }
    }

    /// (CPU seconds other processes used, wall seconds watched).
    pub fn finish(mut self) -> (f64, f64) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        (
            self.ticks.load(Ordering::Relaxed) as f64 / TICKS_PER_SEC,
            self.started.elapsed().as_secs_f64(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_spaces_in_the_name() {
        let line = "1234 (tokio runtime) S 77 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 4 0 1 2 3";
        assert_eq!(parse_stat(line), Some((77, 300)));
    }

    #[test]
    fn descendants_are_ours() {
        let snap = HashMap::from([
            (1, (0, 0)),
            (10, (1, 0)),
            (11, (10, 0)),
            (12, (11, 0)),
            (20, (1, 0)),
        ]);
        let m = mine(&snap, 10);
        assert!(m.contains(&10) && m.contains(&11) && m.contains(&12));
        assert!(!m.contains(&20) && !m.contains(&1));
    }
}
