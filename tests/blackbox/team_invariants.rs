//! What every team scenario ends with, whatever it did to the team (docs/contract.md#team-mode):
//! once the team is healthy, an apply lands through it, and then no job and no handed call is
//! left, the remote's branch only ever moved forward, each job's commit is on it once and
//! matches the proposal the database holds applied (both ways), each commit names the intent
//! record of its own job in the chain every gateway verifies, every clone holds exactly the
//! branch, and the lease's epoch only grows.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::{Value, json};

use crate::team::{Team, git, is_ancestor};
use crate::team_writes::apply_args;
use crate::util::call;

/// The vault of `team_with_vault`.
const VAULT: &str = "notes";

/// Checks the invariants on `team` (its vault `notes` on `remote`). Issues a credential of its
/// own, so call it once per team, at the scenario's end.
pub(crate) async fn hold(team: &Team, remote: &Path) {
    let (_, token) = team.g(0).token("invariants", "full");
    let db = teamstate::PgState::connect(&team.url).unwrap();
    let epoch = || -> i64 {
        db.query(
            "SELECT COALESCE(max(epoch), 0) FROM vaultgate.leases WHERE vault = $1",
            &[&VAULT],
        )
        .unwrap()[0]
            .get(0)
    };
    let epoch_before = epoch();
    // A healthy team applies: one proposal made through the last gateway, applied through the
    // first (its take of the lease also settles any job a scenario's dead gateway left).
    let first = team.g(0).stdio(&token).await;
    let last = team.g(team.gateways.len() - 1).stdio(&token).await;
    let p = call(
        &last,
        "propose_new_note",
        json!({"path": "invariants/healthy.md", "content": "# Healthy\n", "reason": "the team is healthy"}),
    )
    .await
    .ok();
    let mut out = Value::Null;
    for _ in 0..3 {
        match call(&first, "apply_proposal", apply_args(&p, "invariants-healthy")).await {
            crate::util::Reply::Ok(v) => {
                out = v;
                break;
            }
            // A dead holder's lease still running out: the retry with the key answers.
            crate::util::Reply::Err(e) if e["code"] == json!("VAULT_BUSY") => continue,
            crate::util::Reply::Err(e) => panic!("the team did not apply: {e}"),
        }
    }
    assert_eq!(out["applied"], json!(true), "the team did not apply: {out}");
    let main = git(remote, &["rev-parse", "main"]).trim().to_owned();
    assert_eq!(out["commit"], json!(main), "the apply is the branch's head");

    // Fencing: the apply took the vault's lease at an epoch greater than every one before, and
    // every gateway reports that one.
    let epoch_after = epoch();
    assert!(
        epoch_after > epoch_before,
        "the lease was taken at epoch {epoch_after}, not past {epoch_before}"
    );
    for g in &team.gateways {
        let s: Value = serde_json::from_str(&g.ok(&["team", "status", "--json"])).unwrap();
        // The one vault of `team_with_vault`.
        let v = &s["vaults"][0];
        assert_eq!(v["applier"]["epoch"], json!(epoch_after), "{s}");
    }
    let count = |sql: &str| db.query(sql, &[]).unwrap()[0].get::<_, i64>(0);
    crate::team::eventually("no job and no handed call is left", || async {
        count("SELECT count(*) FROM vaultgate.proposals WHERE job IS NOT NULL") == 0
            && count("SELECT count(*) FROM vaultgate.calls WHERE answer IS NULL") == 0
    })
    .await;

    // The branch only moved forward: each reflog entry descends from the one before.
    let reflog = git(remote, &["reflog", "show", "--format=%H", "main"]);
    let entries: Vec<&str> = reflog.lines().collect();
    for w in entries.windows(2) {
        assert!(
            is_ancestor(remote, w[1], w[0]),
            "{} → {} is not a fast-forward",
            w[1],
            w[0]
        );
    }

    // Each job's commit once on the branch, as the commit of the proposal the database holds
    // applied; each applied proposal's commit on the branch, with its trailer.
    let log = git(
        remote,
        &[
            "log",
            "--format=%H%x09%(trailers:key=Vaultgate-Job,valueonly,separator=%x2C)%x09%(trailers:key=Vaultgate-Proposal,valueonly,separator=%x2C)%x09%(trailers:key=Vaultgate-Audit,valueonly,separator=%x2C)",
            "main",
        ],
    );
    let commits: Vec<Vec<&str>> = log
        .lines()
        .map(|l| l.split('\t').collect::<Vec<_>>())
        .filter(|r| !r[1].is_empty() || !r[3].is_empty())
        .collect();
    let mut jobs = BTreeSet::new();
    let mut by_proposal: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for c in &commits {
        assert!(!c[1].is_empty(), "{} names a record but no job", c[0]);
        assert!(jobs.insert(c[1]), "the job {} made two commits on main", c[1]);
        if c[2] != "none" {
            by_proposal.entry(c[2]).or_default().push(c[0]);
        }
    }
    let applied: BTreeMap<String, Option<String>> = db
        .query(
            "SELECT id, result->>'commit' FROM vaultgate.proposals WHERE vault = $1 AND status = 'applied'",
            &[&VAULT],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    for (proposal, on_main) in &by_proposal {
        assert_eq!(on_main.len(), 1, "proposal {proposal} landed as {on_main:?}");
        assert_eq!(
            applied.get(*proposal),
            Some(&Some(on_main[0].to_owned())),
            "proposal {proposal} is on main as {} but the database holds {:?}",
            on_main[0],
            applied.get(*proposal)
        );
    }
    for (proposal, commit) in &applied {
        assert!(
            by_proposal.contains_key(proposal.as_str()),
            "proposal {proposal} is applied as {commit:?}, which is not on main"
        );
    }

    // Each commit names its own job's intent record in the chain, which every gateway verifies.
    // The whole chain (a long run holds more records than `audit tail` shows).
    let exported = team.g(0).ok(&["audit", "export"]);
    let chain: Vec<Value> = exported
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let records: BTreeMap<String, &Value> = chain.iter().map(|r| (r["seq"].to_string(), r)).collect();
    for c in &commits {
        let (seq, hash) = c[3].split_once(' ').unwrap_or((c[3], ""));
        let record = records
            .get(seq)
            .unwrap_or_else(|| panic!("{} names record {seq}, which is not in the chain", c[0]));
        assert_eq!(record["hash"], json!(hash), "{} names record {seq}", c[0]);
        if c[2] != "none" {
            assert_eq!(record["proposalId"], json!(c[2]), "{}: {record}", c[0]);
        }
    }
    for g in &team.gateways {
        g.ok(&["audit", "verify"]);
    }
    eprintln!(
        "invariants: {} job commits, {} applied proposals, {} reflog entries",
        commits.len(),
        applied.len(),
        entries.len()
    );

    // Every clone converges on the branch: at its head, with nothing else in its tree.
    let others: Vec<crate::util::Client> = {
        let mut v = Vec::new();
        for i in 1..team.gateways.len().saturating_sub(1) {
            v.push(team.g(i).stdio(&token).await);
        }
        v
    };
    for (i, g) in team.gateways.iter().enumerate() {
        let clone = g.home.join("vaults").join(VAULT);
        crate::team::eventually(&format!("gateway {i}'s clone reaches {main}"), || async {
            git(&clone, &["rev-parse", "HEAD"]).trim() == main
        })
        .await;
        let dirty = git(&clone, &["status", "--porcelain", "--untracked-files=all"]);
        assert_eq!(dirty, "", "gateway {i}'s clone differs from main");
    }
    first.close().await;
    last.close().await;
    for c in others {
        c.close().await;
    }
}
