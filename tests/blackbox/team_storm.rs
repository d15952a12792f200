//! docs/contract.md#team-mode, a storm of overlapping edits: agents on three gateways patch the
//! very notes a person edits and pushes at the same time. Each apply lands on top of what the
//! person pushed or answers `PROPOSAL_STALE_BASE`; nothing is merged or overwritten, so every
//! line the person pushed and every line of an applied patch is in the note once, and no line of
//! a refused patch is. Afterwards nothing is left in flight and every clone converges.

use std::collections::BTreeMap;

use serde_json::json;

use crate::team::{git, is_ancestor};
use crate::team_writes::{apply_args, person_pushes, team_with_vault};
use crate::util::{Reply, call};

const NOTES: usize = 3;
const ROUNDS: usize = 6;

fn note(k: usize) -> String {
    format!("shared/s{k}.md")
}

/// What an agent's patch did: the note, its line, and the commit it landed in (`None`: stale).
type Outcome = (usize, String, Option<String>);

#[tokio::test]
async fn agents_patching_the_notes_a_person_pushes_to_land_on_top_or_are_stale_and_lose_no_line() {
    let (team, remote, person) = team_with_vault(&["g1", "g2", "g3"]);
    git(&remote, &["config", "core.logAllRefUpdates", "always"]);
    for k in 0..NOTES {
        let path = person.join(note(k));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let filler: String = (0..6).map(|l| format!("filler {l}\n")).collect();
        std::fs::write(path, format!("# S{k}\n\n{filler}")).unwrap();
    }
    git(&person, &["add", "-A"]);
    git(&person, &["commit", "--quiet", "-m", "shared notes"]);
    git(&person, &["push", "--quiet", "origin", "main"]);
    let (_, token) = team.g(0).token("agent", "full");
    let mut clients = Vec::new();
    for g in &team.gateways {
        clients.push(g.stdio(&token).await);
    }
    for c in &clients {
        crate::team::eventually("every gateway reads the shared notes", || async {
            matches!(
                call(c, "read_note", json!({"path": note(NOTES - 1)})).await,
                Reply::Ok(_)
            )
        })
        .await;
    }

    // Agent i reads a note through its gateway, proposes it with a line appended, and applies it
    // through the next gateway (a busy vault retried with the same key).
    let agent = |i: usize| {
        let (mine, next) = (&clients[i], &clients[(i + 1) % 3]);
        async move {
            let mut done: Vec<Outcome> = Vec::new();
            for n in 0..ROUNDS {
                let k = (i + n) % NOTES;
                let read = call(mine, "read_note", json!({"path": note(k)})).await.ok();
                let line = format!("agent {i} {n}");
                let content = format!("{}{line}\n", read["content"].as_str().unwrap());
                let p = match call(
                    mine,
                    "propose_note_patch",
                    json!({"path": note(k), "baseHash": read["hash"], "content": content, "reason": "storm"}),
                )
                .await
                {
                    Reply::Ok(p) => p,
                    Reply::Err(e) if e["code"] == json!("PROPOSAL_STALE_BASE") => {
                        done.push((k, line, None));
                        continue;
                    }
                    Reply::Err(e) => panic!("agent {i} round {n}: propose: {e}"),
                };
                let key = format!("storm-{i}-{n}");
                let landed = loop {
                    match call(next, "apply_proposal", apply_args(&p, &key)).await {
                        Reply::Ok(v) => break Some(v["commit"].as_str().unwrap().to_owned()),
                        Reply::Err(e) if e["code"] == json!("VAULT_BUSY") => continue,
                        Reply::Err(e) if e["code"] == json!("PROPOSAL_STALE_BASE") => break None,
                        Reply::Err(e) => panic!("agent {i} round {n}: apply: {e}"),
                    }
                };
                done.push((k, line, landed));
            }
            done
        }
    };
    // The person inserts a line under a note's title and pushes, the way obsidian-git does: pull,
    // commit, push; a push the branch moved past is dropped and made again on top.
    let pushes = async {
        let mut mine: Vec<(usize, String, String)> = Vec::new();
        for n in 0..2 * ROUNDS {
            tokio::time::sleep(std::time::Duration::from_millis(120)).await;
            let k = n % NOTES;
            let line = format!("person {n}");
            let commit = person_pushes(&person, &line, || {
                let path = person.join(note(k));
                let text = std::fs::read_to_string(&path).unwrap();
                let (title, rest) = text.split_once('\n').unwrap();
                std::fs::write(&path, format!("{title}\n{line}\n{rest}")).unwrap();
            });
            mine.push((k, line, commit));
        }
        mine
    };
    let (a0, a1, a2, pushed) = tokio::join!(agent(0), agent(1), agent(2), pushes);
    let patches: Vec<Outcome> = a0.into_iter().chain(a1).chain(a2).collect();
    let landed = patches.iter().filter(|p| p.2.is_some()).count();
    eprintln!(
        "storm: {landed} patches landed, {} stale, {} pushes of the person",
        patches.len() - landed,
        pushed.len()
    );
    assert!(landed > 0, "no patch landed");

    // Each note at the branch's head: every line the person pushed to it and every line of a
    // landed patch, once; no line of a stale one.
    let mut wanted: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
    for (k, line, _) in &pushed {
        wanted.entry(*k).or_default().push(line);
    }
    for (k, line, commit) in &patches {
        let text = git(&remote, &["show", &format!("main:{}", note(*k))]);
        let times = text.lines().filter(|l| l == line).count();
        match commit {
            Some(_) => wanted.entry(*k).or_default().push(line),
            None => assert_eq!(times, 0, "{line} of a stale patch is in {}:\n{text}", note(*k)),
        }
    }
    for (k, lines) in &wanted {
        let text = git(&remote, &["show", &format!("main:{}", note(*k))]);
        for line in lines {
            let times = text.lines().filter(|l| l == line).count();
            assert_eq!(times, 1, "{line} in {}:\n{text}", note(*k));
        }
    }
    // Each landed patch is one commit, the one its caller was told; each person's push is kept.
    // (The branch only moving forward, no job or handed call left, the chains, the clones: the
    // invariants every team scenario ends with, last.)
    let log = git(&remote, &["log", "--format=%H %s", "main", "--", "shared/"]);
    for (_, line, commit) in patches.iter().filter(|p| p.2.is_some()) {
        let commit = commit.as_deref().unwrap();
        assert!(log.contains(commit), "{line}: {commit} is not on main");
    }
    let applies = git(
        &remote,
        &[
            "log",
            "--format=%(trailers:key=Vaultgate-Job,valueonly,separator=)",
            "main",
        ],
    );
    let jobs: Vec<&str> = applies.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(
        jobs.len(),
        landed,
        "one job's commit for each landed patch:\n{applies}"
    );
    for (_, line, commit) in &pushed {
        assert!(
            is_ancestor(&remote, commit, "main"),
            "the person's {line} ({commit}) is not on main"
        );
    }
    // Every gateway reads what the branch holds, and never fails to read a note meanwhile.
    for (g, c) in team.gateways.iter().zip(&clients) {
        for k in 0..NOTES {
            let main = git(&remote, &["show", &format!("main:{}", note(k))]);
            crate::team::eventually("every gateway reads the branch's notes", || async {
                match call(c, "read_note", json!({"path": note(k)})).await {
                    Reply::Ok(v) => v["content"] == json!(main),
                    Reply::Err(e) => panic!("{} through {}: {e}", note(k), g.home.display()),
                }
            })
            .await;
        }
    }
    for c in clients {
        c.close().await;
    }
    crate::team_invariants::hold(&team, &remote).await;
}
