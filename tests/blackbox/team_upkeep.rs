//! Team mode over months: a gateway's clone of a team vault is its own, and every git command
//! vaultgate runs there has git's automatic packing off (it must never run inside an apply). A
//! serving gateway packs the clone itself once git counts too many loose objects; else every
//! object it fetched or built would stay a file of its own for good. Locks a dead pass left are
//! cleared once older than a pass can run.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::http::Server;
use crate::team::git;
use crate::team_writes::{apply_args, head, message, team_with_vault};
use crate::util::{call, propose_new};

/// `git ARGS` in `dir` with `input` on stdin; its stdout.
fn git_fed(dir: &std::path::Path, args: &[&str], input: &str) -> String {
    let mut child = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Person")
        .env("GIT_AUTHOR_EMAIL", "person@example.com")
        .env("GIT_COMMITTER_NAME", "Person")
        .env("GIT_COMMITTER_EMAIL", "person@example.com")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let fed = input.to_owned();
    let writer = std::thread::spawn(move || stdin.write_all(fed.as_bytes()).unwrap());
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(out.status.success(), "git {args:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `count-objects -v`'s `field` in `dir`.
fn objects(dir: &std::path::Path, field: &str) -> u64 {
    let counted = git(dir, &["count-objects", "-v"]);
    counted
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}: ")))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("count-objects without {field}: {counted}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_serving_gateway_packs_its_clone_once_loose_objects_pile_up() {
    let (team, remote, _person) = team_with_vault(&["g1"]);
    let clone = team.g(0).home.join("vaults").join("notes");
    assert!(clone.join(".git").is_dir(), "no clone at {}", clone.display());
    // 20,000 loose objects, reachable, as months of fetches and applies leave them.
    let pile = team.root.path().join("pile");
    std::fs::create_dir_all(&pile).unwrap();
    let paths: Vec<String> = (0..20_000)
        .map(|i| {
            let p = pile.join(format!("n{i}"));
            std::fs::write(&p, format!("note {i}\n")).unwrap();
            p.to_str().unwrap().to_owned()
        })
        .collect();
    let blobs = git_fed(
        &clone,
        &["hash-object", "-w", "--stdin-paths"],
        &(paths.join("\n") + "\n"),
    );
    let listing: String = blobs
        .lines()
        .enumerate()
        .map(|(i, b)| format!("100644 blob {b}\tn{i:05}.md\n"))
        .collect();
    let tree = git_fed(&clone, &["mktree"], &listing);
    let commit = git(&clone, &["commit-tree", tree.trim(), "-m", "pile"]);
    git(&clone, &["update-ref", "refs/pile", commit.trim()]);
    let before = objects(&clone, "count");
    assert!(before >= 20_000, "{before} loose objects");
    // A machine that died mid-pass left its locks: older than a pass can run, they are cleared
    // (else `maintenance.lock` would skip every pass for good).
    let stale = std::time::SystemTime::now() - Duration::from_secs(3600);
    let locks = [
        ".git/objects/maintenance.lock",
        ".git/objects/pack/multi-pack-index.lock",
    ];
    for lock in locks {
        let file = std::fs::File::create(clone.join(lock)).unwrap();
        file.set_modified(stale).unwrap();
    }

    let srv = Server::start(team.g(0));
    let deadline = Instant::now() + Duration::from_secs(90);
    while objects(&clone, "count") > 100 {
        assert!(
            Instant::now() < deadline,
            "the clone still holds {} loose objects: {}",
            objects(&clone, "count"),
            srv.stderr()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(objects(&clone, "in-pack") >= 20_000);
    for lock in locks {
        assert!(!clone.join(lock).exists(), "{lock} was left");
    }
    // Nothing reachable was lost: the pile's tree is whole.
    assert_eq!(git(&clone, &["ls-tree", "refs/pile"]).lines().count(), 20_000);
    // Packed, the clone still serves reads and applies.
    let (_, token) = team.g(0).token("agent", "full");
    let c = team.g(0).stdio(&token).await;
    let note = call(&c, "read_note", json!({"path": "z/plan.md"})).await.ok();
    assert!(
        note["content"].as_str().is_some_and(|t| t.contains("Plan")),
        "{note}"
    );
    let p = propose_new(&c, "packed.md", "# Packed\n", "after the pack").await;
    let a = call(&c, "apply_proposal", apply_args(&p, "k-packed")).await.ok();
    assert_eq!(a["commit"].as_str(), Some(head(&remote).as_str()), "{a}");
    assert!(message(&remote, "main").contains("Vaultgate-Proposal"));
    drop(srv);
}
