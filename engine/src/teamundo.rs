//! Undo and redo on a team vault (docs/contract.md#team-mode, #history): the vault's one linear
//! history is the sequence of commits vaultgate pushed to its remote — each apply an entry (its
//! `Vaultgate-History-Entry`), each `undo`/`redo` commit moving that entry between the done and
//! the undone stacks, a new apply clearing the undone one. `history_undo`/`history_redo` act on
//! the top, refuse a file changed since (`HISTORY_STALE`), and push one commit that puts back the
//! entry's files as they were before (undo) or after (redo), by compare-and-swap like an apply.
//!
//! It must never write a file that is not exactly as the entry left it on the side it starts
//! from, or answer a transition whose push it has not seen land.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use inbox::Transition;

use crate::call::{Call, TxnRecord};
use crate::core::{Core, VaultHandle, rfc3339};
use crate::error::{GatewayError, Refused};
use crate::git::{FILE_MODE, TreeEntry};
use crate::history::HistoryStatusOut;
use crate::remote::PushedChange;
use crate::storage::TeamState;
use crate::txn::internal;

/// The vaultgate commits read to rebuild the history (older ones cannot be undone).
const MAX_ENTRIES: usize = 1_000;

/// One entry of the history: its id and the commit that made it.
#[derive(Debug, Clone)]
struct Entry {
    id: String,
    change: PushedChange,
}

/// The done and undone stacks (tops last), from the clone's branch.
fn stacks(core: &Core, v: &VaultHandle) -> Result<(Vec<Entry>, Vec<Entry>), GatewayError> {
    let dir = v.reader.fs().root();
    let mut commits = crate::remote::vaultgate_commits(&core.git, dir, "HEAD", &[], MAX_ENTRIES)?;
    commits.reverse();
    let (mut done, mut undone): (Vec<Entry>, Vec<Entry>) = (Vec::new(), Vec::new());
    for change in commits {
        let Some(id) = trailer(&change, "Vaultgate-History-Entry") else {
            continue;
        };
        match change.subject.split(' ').next().unwrap_or_default() {
            "undo" => {
                if done.last().is_some_and(|e| e.id == id)
                    && let Some(e) = done.pop()
                {
                    undone.push(e);
                }
            }
            "redo" => {
                if undone.last().is_some_and(|e| e.id == id)
                    && let Some(e) = undone.pop()
                {
                    done.push(e);
                }
            }
            // A permanent deletion is a barrier: nothing before it can be undone or redone.
            crate::critical::DELETE_PERMANENT => {
                done.clear();
                undone.clear();
            }
            _ => {
                undone.clear();
                done.push(Entry { id, change });
            }
        }
    }
    Ok((done, undone))
}

fn trailer(c: &PushedChange, key: &str) -> Option<String> {
    c.trailers.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
}

/// Each file of `e` with the blob ids it had before and after (`None`: absent), as the
/// transition `t` starts from (`from`) and leaves it (`to`).
#[allow(clippy::type_complexity)]
fn sides(
    core: &Core,
    v: &VaultHandle,
    repo: &crate::git::Repo,
    e: &Entry,
    t: Transition,
) -> Result<Vec<(String, Option<String>, Option<String>)>, GatewayError> {
    let git = crate::changelog::git_error;
    let mut out = Vec::new();
    for (_, path) in &e.change.files {
        // Only notes the layout lets vaultgate write (the commit holds nothing else).
        let p = policy::VaultPath::parse(path)?;
        v.layout().check_write_target(&p)?;
        let before = repo
            .blob_id(&format!("{}^", e.change.commit), &repo.repo_path(path))
            .map_err(git)?;
        let after = repo
            .blob_id(&e.change.commit, &repo.repo_path(path))
            .map_err(git)?;
        out.push(match t {
            Transition::Undo => (path.clone(), after, before),
            Transition::Redo => (path.clone(), before, after),
        });
    }
    let _ = core;
    Ok(out)
}

/// The undo top, when a file of it is no longer as it left it.
fn stale_top(core: &Core, v: &VaultHandle, done: &[Entry]) -> Result<Option<String>, GatewayError> {
    let Some(top) = done.last() else { return Ok(None) };
    let repo = repo(core, v)?;
    for (path, from, _) in sides(core, v, &repo, top, Transition::Undo)? {
        let now = repo
            .blob_id("HEAD", &repo.repo_path(&path))
            .map_err(crate::changelog::git_error)?;
        if now != from {
            return Ok(Some(top.id.clone()));
        }
    }
    Ok(None)
}

fn repo(core: &Core, v: &VaultHandle) -> Result<crate::git::Repo, GatewayError> {
    crate::git::Repo::discover(&core.git, v.reader.fs().root())
        .map_err(crate::changelog::git_error)?
        .ok_or_else(|| internal(format!("the clone of vault '{}' is gone", v.id)))
}

/// `history_status` on a team vault.
pub(crate) fn status(core: &Core, v: &VaultHandle) -> Result<HistoryStatusOut, GatewayError> {
    let (done, undone) = stacks(core, v)?;
    Ok(HistoryStatusOut {
        stale_top: stale_top(core, v, &done)?,
        undo_top: done.last().map(|e| e.id.clone()),
        redo_top: undone.last().map(|e| e.id.clone()),
        transition_in_progress: false,
        git: None,
    })
}

/// The entry `t` would act on now, for the CLI to show.
pub(crate) fn top(
    core: &Core,
    v: &VaultHandle,
    t: Transition,
) -> Result<Option<crate::history::HistoryEntryView>, GatewayError> {
    let (done, undone) = stacks(core, v)?;
    let e = match t {
        Transition::Undo => done.last(),
        Transition::Redo => undone.last(),
    };
    let Some(e) = e else { return Ok(None) };
    let repo = repo(core, v)?;
    let paths = sides(core, v, &repo, e, Transition::Redo)?
        .into_iter()
        .map(|(path, before, after)| crate::history::PathChange {
            path,
            before,
            after,
            trash: None,
        })
        .collect();
    Ok(Some(crate::history::HistoryEntryView {
        id: e.id.clone(),
        label: e.change.subject.clone(),
        kind: e.change.subject.split(' ').next().unwrap_or_default().to_owned(),
        created_by: trailer(&e.change, "Vaultgate-Credential").unwrap_or_default(),
        created_at: e.change.date.clone(),
        state: match t {
            Transition::Undo => "done".into(),
            Transition::Redo => "undone".into(),
        },
        paths,
    }))
}

/// The job id of `principal`'s `key`: the same on every retry, so a transition whose push landed
/// before its gateway could record it is found on the branch.
fn job_of(principal: &str, key: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{principal}\n{key}").as_bytes());
    format!("t_{}", &hex::encode(digest)[..32])
}

/// `history_undo` / `history_redo` on a team vault.
pub(crate) fn transition(
    core: &Core,
    team: &dyn TeamState,
    call: &mut Call<'_>,
    v: &Arc<VaultHandle>,
    t: Transition,
    expected: &str,
    key: &str,
) -> Result<HistoryStatusOut, GatewayError> {
    if key.trim().is_empty() {
        return Err(GatewayError::InvalidArgument(
            "idempotencyKey must not be empty".into(),
        ));
    }
    let first = |team: &dyn TeamState, call: &Call<'_>| -> Result<Option<HistoryStatusOut>, GatewayError> {
        match team.idempotency(&call.actor().principal_id(), key)? {
            None => Ok(None),
            Some(rec) if rec.same_call(call.tool(), &call.args_hash()) => {
                serde_json::from_value(rec.result).map(Some).map_err(internal)
            }
            Some(_) => Err(Refused::IdempotencyConflict { what: "undo/redo" }.into()),
        }
    };
    if let Some(out) = first(team, call)? {
        return Ok(out);
    }
    let vault = team
        .vaults()?
        .into_iter()
        .find(|r| r.id == v.id)
        .ok_or_else(|| GatewayError::VaultNotFound(v.id.clone()))?;
    let wait = Duration::from_secs(core.config().limits.apply_wait_seconds.max(1));
    // SECURITY(T-PROP4): one writer per team vault across the team's gateways.
    let hold = team.lock_vault(&v.id, wait)?;
    let fence = hold.fence();
    crate::teamsettle::settle_left_jobs(core, team, hold.as_ref(), v, None);
    if let Some(out) = first(team, call)? {
        return Ok(out);
    }
    if team.vault_head(&v.id)?.1.is_some() {
        return Err(crate::teampush::rewritten(&v.id));
    }
    let dir = v.reader.fs().root();
    let job = job_of(&call.actor().principal_id(), key);
    let repo = repo(core, v)?;
    let date = rfc3339(time::OffsetDateTime::now_utc());
    let mut last = String::new();
    for _ in 0..3 {
        let base = match crate::teampush::sync_checked(core, team, &vault, dir)? {
            crate::remote::Synced::Cloned(h) | crate::remote::Synced::At(h) => h,
            crate::remote::Synced::Diverged { .. } => return Err(crate::teampush::rewritten(&v.id)),
        };
        // SECURITY(T-TEAM8): this key's transition landed before its gateway recorded it
        // (however many commits came after it).
        if crate::teampush::job_on_branch(core, dir, &job)?.is_some() {
            return finish(core, team, fence, call, v, t, expected, key, None);
        }
        let (done, undone) = stacks(core, v)?;
        let top = match t {
            Transition::Undo => done.last(),
            Transition::Redo => undone.last(),
        };
        let Some(entry) = top.filter(|e| e.id == expected) else {
            let tops = inbox::HistoryTops {
                undo: done.last().map(|e| e.id.clone()),
                redo: undone.last().map(|e| e.id.clone()),
            };
            return Err(crate::history::not_top(t, expected, &tops));
        };
        // SECURITY(T-PROP2): every file exactly as the entry left it on the side we start from.
        let mut changes: BTreeMap<String, TreeEntry> = BTreeMap::new();
        for (path, from, to) in sides(core, v, &repo, entry, t)? {
            let now = repo
                .blob_id(&base, &repo.repo_path(&path))
                .map_err(crate::changelog::git_error)?;
            if now != from {
                return Err(crate::history::stale(t, &entry.id, &path, "changed since"));
            }
            changes.insert(repo.repo_path(&path), to.map(|id| (FILE_MODE.to_owned(), id)));
        }
        let intent = team.append_audit(call.entry_for(TxnRecord::ok(Some("history.intent"), None, None)))?;
        core.failpoints.hit("team_undo.after_intent");
        let tree = repo
            .tree_with(Some(&base), &changes)
            .map_err(crate::changelog::git_error)?;
        let (message, who) = crate::changelog::team_change_commit(
            &format!("{} {}", t.as_str(), entry.change.subject),
            &entry.id,
            &call.actor().audit_actor(),
            &intent,
            (call.received_by().unwrap_or(team.gateway()), &job),
            &date,
        );
        let commit = repo
            .commit_tree(&tree, Some(&base), &message, &who)
            .map_err(crate::changelog::git_error)?;
        // A hold that lapsed pushes nothing.
        hold.check()?;
        // Not settled: VAULT_BUSY; the retry finds this key's job on the branch if it landed.
        let unused = std::cell::Cell::new(false);
        let landed = crate::teampush::push_settled(core, dir, &vault, (&commit, &base), &mut last, &unused)?;
        if landed {
            core.failpoints.hit("team_undo.after_push");
            return finish(core, team, fence, call, v, t, expected, key, Some(&commit));
        }
    }
    Err(GatewayError::VaultBusy(format!(
        "the remote of vault '{}' kept moving during the {} ({}); retry with the same idempotencyKey",
        v.id,
        t.as_str(),
        policy::text::escape_line(last.lines().last().unwrap_or_default())
    )))
}

/// The transition landed (`commit`, or found on the branch): the clone moved to it, the answer
/// (the new status) kept under the key with the call's record.
#[allow(clippy::too_many_arguments)]
fn finish(
    core: &Core,
    team: &dyn TeamState,
    fence: &crate::storage::team::Fence,
    call: &mut Call<'_>,
    v: &VaultHandle,
    t: Transition,
    expected: &str,
    key: &str,
    commit: Option<&str>,
) -> Result<HistoryStatusOut, GatewayError> {
    let dir = v.reader.fs().root();
    if let Some(commit) = commit {
        crate::remote::advance(&core.git, dir, commit)?;
        if let Err(e) = team.register_head(&v.id, None, commit) {
            tracing::warn!(vault = %v.id, error = %e, "the commit was not registered as the head yet");
        }
    }
    let mut out = status(core, v)?;
    out.git = Some("committed".into());
    let (principal, args_hash) = (call.actor().principal_id(), call.args_hash());
    let idem = inbox::IdemKey {
        credential_id: &principal,
        key,
        tool: call.tool(),
        args_hash: &args_hash,
    };
    let answer = |_: u64| serde_json::to_value(&out).unwrap_or(serde_json::Value::Null);
    let record = TxnRecord::ok(None, Some(expected), None);
    call.record_in(record, |entry| {
        team.keep_answer(fence, &idem, &answer, entry).map(Some)
    })?;
    // The notes the transition wrote are searchable at once.
    let _ = t;
    Ok(out)
}
