//! docs/contract.md#the-audit-log `vaultgate audit export` and `audit verify --file`: an export is
//! the chain's own lines, checked as they are copied; it verifies offline, without a home; a
//! flipped byte or a missing line in it is named by its seq; an export never replaces a file and
//! never copies past a broken or cut log.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::util::{Env, bin, call, propose_new};

/// A home whose log holds calls, a proposal and a credential change.
async fn busy(env: &Env) {
    let (_, token) = env.token("agent", "auto");
    let c = env.stdio(&token).await;
    call(&c, "list_notes", json!({})).await.ok();
    let p = propose_new(&c, "z/exported.md", "# exported\n", "an export test").await;
    assert!(p["id"].is_string(), "{p}");
    call(&c, "read_note", json!({ "path": "../x" })).await.code();
    c.close().await;
    env.ok(&["token", "set-tier", "agent", "propose"]);
}

/// `vaultgate audit verify --file F` with nothing but a PATH: no home, no HOME.
fn verify_file(file: &Path) -> (Option<i32>, String) {
    let out = Command::new(bin())
        .args(["audit", "verify", "--file"])
        .arg(file)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    (out.status.code(), text(&out))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn seq_of(line: &str) -> u64 {
    serde_json::from_str::<Value>(line).unwrap()["seq"]
        .as_u64()
        .unwrap()
}

#[tokio::test]
async fn an_export_is_the_logs_lines_and_verifies_offline_naming_a_flipped_byte_or_a_lost_line_by_seq() {
    let env = Env::new();
    busy(&env).await;
    let log = std::fs::read_to_string(env.home.join("audit.jsonl")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert!(lines.len() >= 6, "{log}");

    // Everything, to a file and to stdout: the log's own bytes, and no new record for exporting.
    let file = env.tmp.path().join("all.jsonl");
    let said = env.ok(&["audit", "export", "--out", file.to_str().unwrap()]);
    assert!(
        said.contains(&format!("exported {} records", lines.len())),
        "{said}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), log);
    assert_eq!(env.ok(&["audit", "export"]), log);
    let (code, out) = verify_file(&file);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains(&format!("{} records", lines.len())), "{out}");
    assert!(out.contains("the chain's start"), "{out}");

    // After seq k: the records after it, linked to seq k's hash.
    let k = 1;
    let since = env.tmp.path().join("since.jsonl");
    env.ok(&[
        "audit",
        "export",
        "--since",
        "1",
        "--out",
        since.to_str().unwrap(),
    ]);
    let part = std::fs::read_to_string(&since).unwrap();
    assert_eq!(
        part,
        lines[k..].iter().map(|l| format!("{l}\n")).collect::<String>()
    );
    assert_eq!(seq_of(part.lines().next().unwrap()), 2);
    let (code, out) = verify_file(&since);
    assert_eq!(code, Some(0), "{out}");
    let hash_k = serde_json::from_str::<Value>(lines[k - 1]).unwrap()["hash"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(out.contains(&hash_k), "names the hash it links to: {out}");

    // One flipped byte inside line j of the export: that line's seq is named, exit 1.
    let mut bytes = part.clone().into_bytes();
    let second = part.lines().next().unwrap().len() + 1;
    let j_seq = seq_of(part.lines().nth(1).unwrap());
    let at = second + part.lines().nth(1).unwrap().find("\"event\"").unwrap() + 10;
    bytes[at] ^= 0x01;
    let flipped = env.tmp.path().join("flipped.jsonl");
    std::fs::write(&flipped, &bytes).unwrap();
    let (code, out) = verify_file(&flipped);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains(&format!("seq {j_seq} ")), "names seq {j_seq}: {out}");

    // A line taken out of the middle: the seq that is missing is named. (Lines cut from the end
    // leave a shorter export that verifies: compare its last hash with the chain's.)
    let mut kept: Vec<&str> = part.lines().collect();
    let gone = seq_of(kept.remove(2));
    let cut = env.tmp.path().join("cut.jsonl");
    std::fs::write(&cut, kept.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
    let (code, out) = verify_file(&cut);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains(&format!("seq {gone} ")), "names seq {gone}: {out}");

    // A file that is not there: a clear error, exit 1.
    let (code, out) = verify_file(&env.tmp.path().join("nowhere.jsonl"));
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("cannot read"), "{out}");
}

#[tokio::test]
async fn an_export_never_replaces_a_file_and_never_copies_a_broken_or_cut_log() {
    let env = Env::new();
    busy(&env).await;
    let path = env.home.join("audit.jsonl");

    let taken = env.tmp.path().join("taken.jsonl");
    std::fs::write(&taken, "keep me\n").unwrap();
    let out = env.run(&["audit", "export", "--out", taken.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("already exists"), "{}", text(&out));
    assert_eq!(std::fs::read_to_string(&taken).unwrap(), "keep me\n");

    // A byte of seq 3 altered in the home's log: refused naming seq 3, no file made, nothing left.
    let original = std::fs::read(&path).unwrap();
    let mut altered = original.clone();
    let third = original
        .split_inclusive(|&b| b == b'\n')
        .take(2)
        .map(<[u8]>::len)
        .sum::<usize>();
    altered[third + 30] ^= 0x01;
    std::fs::write(&path, &altered).unwrap();
    let dir = env.tmp.path().join("exports");
    std::fs::create_dir(&dir).unwrap();
    let out = env.run(&["audit", "export", "--out", dir.join("e.jsonl").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("seq 3 "), "{}", text(&out));
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "no file, no temp file left"
    );
    // To stdout: the two records before it, then exit 1.
    let out = env.run(&["audit", "export"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 2);

    // Cut at a line boundary: a shorter chain that verifies line by line, which the state
    // database's head betrays.
    let keep = original.len()
        - original
            .split_inclusive(|&b| b == b'\n')
            .next_back()
            .map_or(0, <[u8]>::len);
    std::fs::write(&path, &original[..keep]).unwrap();
    let out = env.run(&["audit", "export", "--out", dir.join("e.jsonl").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("truncated or replaced"), "{}", text(&out));
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);

    std::fs::write(&path, &original).unwrap();
    env.ok(&["audit", "export", "--out", dir.join("e.jsonl").to_str().unwrap()]);
    assert_eq!(std::fs::read(dir.join("e.jsonl")).unwrap(), original);
}
