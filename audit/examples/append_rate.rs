//! Measures append throughput: `cargo run --release -p audit --example append_rate [DIR]`.
//! DIR (default: a temp dir) matters for `Sync`: fsync on tmpfs costs nothing.
//! Prints to stderr (stdout belongs to JSON-RPC in this workspace's binaries; kept uniform).

use std::time::Instant;

use audit::{Actor, AuditError, AuditLog, Durability, Entry, Outcome};
use time::OffsetDateTime;

fn entry(i: u64) -> Entry {
    let mut e = Entry::new(
        "tool_call",
        Actor::Credential {
            credential_id: "cred_0123456789".into(),
            name: "claude-desktop".into(),
            tier: "propose".into(),
            transport: "http".into(),
        },
        Outcome::Ok,
    );
    e.vault = Some("work".into());
    e.tool = Some("read_note".into());
    e.target = Some(format!("projects/notes/{i}.md"));
    e.args_hash = Some(audit::args_hash(&serde_json::json!({ "path": i })));
    e
}

fn rate(logs: &[&AuditLog], n: u64, durability: Durability) -> Result<f64, AuditError> {
    let start = Instant::now();
    for i in 0..n {
        let log = logs[(i as usize) % logs.len()];
        log.append(entry(i), OffsetDateTime::now_utc(), durability)?;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = match std::env::args_os().nth(1) {
        Some(parent) => tempfile::tempdir_in(parent)?,
        None => tempfile::tempdir()?,
    };
    let path = dir.path().join("audit.jsonl");
    let a = AuditLog::open(&path)?;
    let b = AuditLog::open(&path)?;

    let flush = rate(&[&a], 200_000, Durability::Flush)?;
    eprintln!("Flush, one handle (cached tail):        {flush:>9.0} appends/s");
    let miss = rate(&[&a, &b], 50_000, Durability::Flush)?;
    eprintln!("Flush, two handles (tail re-read each): {miss:>9.0} appends/s");
    let sync = rate(&[&a], 2_000, Durability::Sync)?;
    eprintln!("Sync (fsync each):                      {sync:>9.0} appends/s");

    let report = audit::verify(&path)?;
    let start = Instant::now();
    audit::verify(&path)?;
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "verify: {} records, broken: {:?}, {:.0} records/s",
        report.records,
        report.broken,
        report.records as f64 / secs
    );
    Ok(())
}
