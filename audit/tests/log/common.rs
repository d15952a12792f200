use std::path::{Path, PathBuf};

use audit::{Actor, AuditLog, AuditRecord, Durability, Entry, Outcome};
use time::OffsetDateTime;

/// A fresh temp dir and the `audit.jsonl` path inside it.
pub fn home() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    (dir, path)
}

/// A deterministic clock: 2026-11-29T20:31:47.123Z plus `i` milliseconds.
pub fn at(i: u64) -> OffsetDateTime {
    time::macros::datetime!(2026-11-29 20:31:47.123 UTC) + time::Duration::milliseconds(i as i64)
}

pub fn entry(who: &str, i: u64) -> Entry {
    let mut e = Entry::new(
        "tool_call",
        Actor::Credential {
            credential_id: format!("cred_{who}"),
            name: who.to_owned(),
            tier: "propose".to_owned(),
            transport: "http".to_owned(),
        },
        Outcome::Ok,
    );
    e.vault = Some("work".to_owned());
    e.tool = Some("read_note".to_owned());
    e.target = Some(format!("notes/{i}.md"));
    e
}

/// Appends `n` records and returns them.
pub fn write_log(path: &Path, n: u64) -> Vec<AuditRecord> {
    let log = AuditLog::open(path).unwrap();
    (1..=n)
        .map(|i| log.append(entry("agent", i), at(i), Durability::Flush).unwrap())
        .collect()
}

/// The file's lines, each with its `\n`.
pub fn lines(path: &Path) -> Vec<Vec<u8>> {
    std::fs::read(path)
        .unwrap()
        .split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

pub fn write_lines(path: &Path, lines: &[Vec<u8>]) {
    std::fs::write(path, lines.concat()).unwrap();
}

/// Hex SHA-256, computed independently of the crate.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// Rewrites line `idx` (0-based) through `edit` on its JSON and, if `rehash`, stores a hash that
/// matches the edited content: the forgery of someone who knows the format.
pub fn forge_line(
    path: &Path,
    idx: usize,
    rehash: bool,
    edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>),
) {
    let mut all = lines(path);
    let mut value: serde_json::Value = serde_json::from_slice(&all[idx]).unwrap();
    let map = value.as_object_mut().unwrap();
    edit(map);
    if rehash {
        map.remove("hash");
        let h = sha256_hex(audit::canonical_json(&value).as_bytes());
        value.as_object_mut().unwrap().insert("hash".into(), h.into());
    }
    all[idx] = format!("{}\n", audit::canonical_json(&value)).into_bytes();
    write_lines(path, &all);
}
