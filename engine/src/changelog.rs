//! Every change vaultgate commits, kept for `get_note_history` and `read_note {hash}`, and the
//! git commit each makes where the vault has git on (docs/contract.md#git-history).
//!
//! The change's row, with its commit queued, is written in the transaction's own state commit, so
//! a crash between the engine's commit and git's leaves a queued commit that the next change or
//! start makes. The queue is made oldest first, under the vault's write lock, and a commit whose
//! content `HEAD` already holds is not made twice.

use std::collections::BTreeMap;

use inbox::{Change, GitDone, NewChange};
use proposals::ops::{FileOp, Zone};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::core::{VaultHandle, rfc3339};
use crate::error::GatewayError;
use crate::git::{FILE_MODE, GitError, Identity, Repo, TreeEntry};
use crate::history::History;
use crate::txn::{Intent, TxnKind};
use crate::versions::content_of;

/// A subject line is at most this many characters (docs/contract.md#git-history).
const SUBJECT_CHARS: usize = 72;
/// How many queued commits one drain looks at per query.
const QUEUE_BATCH: usize = 64;
/// `get_note_history`: default and largest page.
pub(crate) const HISTORY_DEFAULT: usize = 50;
pub(crate) const HISTORY_MAX: usize = 200;

/// The commit a change makes, decided at the change's commit point.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PendingCommit {
    pub subject: String,
    pub body: String,
    pub trailers: Vec<(String, String)>,
    pub author_name: String,
    pub author_email: String,
    pub date: String,
    /// Vault paths with the content hash they get (`None`: removed).
    pub files: Vec<(String, Option<String>)>,
}

impl PendingCommit {
    pub(crate) fn message(&self) -> String {
        let mut m = self.subject.clone();
        m.push_str("\n\n");
        if !self.body.is_empty() {
            m.push_str(&self.body);
            m.push_str("\n\n");
        }
        for (k, v) in &self.trailers {
            m.push_str(&format!("{k}: {v}\n"));
        }
        m
    }
}

/// A change's row before it is stored.
pub(crate) struct ChangeRow {
    kind: String,
    history_entry_id: String,
    actor: String,
    reason: String,
    ts: String,
    audit_seq: u64,
    notes: Value,
    paths: Vec<String>,
    git: Option<Value>,
}

impl ChangeRow {
    /// What the change's answer says of git before the queue is made: `queued` or `off`.
    pub(crate) fn git_at_commit(&self) -> &'static str {
        if self.git.is_some() { "queued" } else { "off" }
    }

    pub(crate) fn as_new(&self) -> NewChange<'_> {
        NewChange {
            kind: &self.kind,
            history_entry_id: &self.history_entry_id,
            actor: &self.actor,
            reason: &self.reason,
            ts: &self.ts,
            audit_seq: self.audit_seq,
            notes: &self.notes,
            paths: &self.paths,
            git: self.git.as_ref(),
        }
    }
}

/// The note a path of `zone` stands for: a note itself, or its copy in the vault trash.
fn note_of(zone: Zone, path: &str) -> Option<String> {
    match zone {
        Zone::Note => Some(path.to_owned()),
        Zone::Machine => {
            let rest = path.strip_prefix(".vaultgate/trash/")?;
            rest.split_once('/').map(|(_, note)| note.to_owned())
        }
        Zone::Inbox => None,
    }
}

/// One note a change wrote or removed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NoteChange {
    pub(crate) path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) from: Option<String>,
    pub(crate) before: Option<String>,
    pub(crate) after: Option<String>,
}

/// What the ops do to notes: each note written or removed, with its hashes (a note's copy in
/// the trash stands for the note).
fn note_changes(ops: &[FileOp]) -> Vec<NoteChange> {
    let change =
        |path: String, from: Option<String>, before: Option<&String>, after: Option<&String>| NoteChange {
            path,
            from,
            before: before.cloned(),
            after: after.cloned(),
        };
    let mut notes = Vec::new();
    for op in ops {
        match op {
            FileOp::Put {
                zone,
                path,
                before,
                after,
            } => notes.extend(note_of(*zone, path).map(|n| change(n, None, before.as_ref(), Some(after)))),
            FileOp::Delete { zone, path, before } => {
                notes.extend(note_of(*zone, path).map(|n| change(n, None, Some(before), None)));
            }
            FileOp::Rename {
                from_zone,
                from,
                to_zone,
                to,
                hash,
            } => match (*from_zone == Zone::Note, *to_zone == Zone::Note) {
                (true, true) => notes.push(change(to.clone(), Some(from.clone()), Some(hash), Some(hash))),
                (false, true) => notes.push(change(to.clone(), None, None, Some(hash))),
                _ => notes.extend(note_of(*from_zone, from).map(|n| change(n, None, Some(hash), None))),
            },
        }
    }
    notes
}

/// The note files a commit of `ops` holds: what each op leaves in the notes (`None`: removed),
/// as the transaction records it for the watchers.
fn commit_files(ops: &[FileOp]) -> Vec<(String, Option<String>)> {
    ops.iter()
        .flat_map(FileOp::leaves)
        .filter(|(zone, _, _)| *zone == Zone::Note)
        .map(|(_, path, hash)| (path.to_owned(), hash.map(str::to_owned)))
        .collect()
}

/// A move is written as a new file and a removed one: paired into one entry with `from`, by
/// content, or (`loose`, for a move, its undo or redo) the one created with the one removed
/// when a link rewrite changed the moved note itself.
fn pair_moves(notes: &mut Vec<NoteChange>, loose: bool) {
    let mut i = 0;
    while i < notes.len() {
        let n = &notes[i];
        if n.before.is_none() && n.from.is_none() && n.after.is_some() {
            let after = n.after.clone();
            if let Some(j) = notes
                .iter()
                .position(|m| m.after.is_none() && m.before.is_some() && m.before == after)
            {
                let removed = notes.remove(j);
                let i = if j < i { i - 1 } else { i };
                notes[i].from = Some(removed.path);
                notes[i].before = removed.before;
            }
        }
        i += 1;
    }
    if loose {
        let created: Vec<usize> = (0..notes.len())
            .filter(|&i| notes[i].before.is_none() && notes[i].from.is_none())
            .collect();
        let removed: Vec<usize> = (0..notes.len()).filter(|&i| notes[i].after.is_none()).collect();
        if let ([c], [r]) = (created.as_slice(), removed.as_slice()) {
            let gone = notes[*r].clone();
            notes[*c].from = Some(gone.path);
            notes[*c].before = gone.before;
            notes.remove(*r);
        }
    }
}

/// Cuts `s` to `n` characters, ending with `…` when it was longer.
fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(n.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// SECURITY(T-GIT2): a reason's lines reach the message escaped, and a line git (or a person)
/// could take for a trailer is quoted, so only vaultgate's own trailers end the message.
fn body_of(reason: &str) -> String {
    reason
        .trim()
        .lines()
        .map(|line| {
            let line = policy::text::escape_line(line);
            if looks_like_trailer(&line) {
                format!("> {line}")
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Lines git's trailer parser treats specially: a trailer (`Key: value`), a patch divider
/// (`---`, after which it reads nothing), a comment or scissors line (`#`), `(cherry picked from`.
fn looks_like_trailer(line: &str) -> bool {
    let t = line.trim_start();
    if t.starts_with("(cherry picked from") || t.starts_with("---") || t.starts_with('#') {
        return true;
    }
    match t.split_once(':') {
        Some((key, _)) => {
            let key = key.trim_end();
            !key.is_empty() && key.chars().all(|c| c.is_alphanumeric() || c == '-' || c == '_')
        }
        None => false,
    }
}

/// Who made a change, as an author line: a credential's name and id, or the operator.
fn identity_of(actor: &audit::Actor, created_by: Option<&proposals::CreatedBy>, date: &str) -> Identity {
    let (name, email) = match (created_by, actor) {
        (Some(c), _) => (c.name.clone(), crate::git::clean_email_local(&c.credential_id)),
        (
            None,
            audit::Actor::Credential {
                credential_id, name, ..
            },
        ) => (name.clone(), crate::git::clean_email_local(credential_id)),
        (None, audit::Actor::Cli { user }) => (
            format!("cli:{user}"),
            format!("cli.{}", crate::git::clean_email_local(user)),
        ),
        (None, audit::Actor::Review { user }) => (
            format!("review:{user}"),
            format!("review.{}", crate::git::clean_email_local(user)),
        ),
    };
    Identity {
        author_name: crate::git::clean_name(&name),
        author_email: format!("{email}@vaultgate.invalid"),
        author_date: date.to_owned(),
    }
}

/// `Vaultgate-Credential: <name> (<id>, <tier>)` of who applied.
fn credential_trailer(actor: &audit::Actor) -> String {
    match actor {
        audit::Actor::Credential {
            credential_id,
            name,
            tier,
            ..
        } => format!("{} ({credential_id}, {tier})", crate::git::clean_name(name)),
        audit::Actor::Cli { user } => format!("cli:{} (cli, operator)", crate::git::clean_name(user)),
        audit::Actor::Review { user } => {
            format!("review:{} (review, operator)", crate::git::clean_name(user))
        }
    }
}

/// The commit of a change to a team vault (docs/contract.md#team-mode): `subject`, `body` and
/// the trailers of a local commit (`proposal`: its id and hash, or none), `Vaultgate-Audit`
/// naming the change's intent record (written before the push), and the gateway and job that
/// pushed it.
#[allow(clippy::too_many_arguments)]
fn team_commit(
    subject: &str,
    body: &str,
    proposal: Option<(&str, &str)>,
    entry: &str,
    who: Identity,
    actor: &audit::Actor,
    (seq, hash): (u64, &str),
    (gateway, job): (&str, &str),
) -> (String, Identity) {
    let (pid, phash) = proposal.unwrap_or(("none", "none"));
    let commit = PendingCommit {
        subject: cut(&policy::text::escape_line(subject), SUBJECT_CHARS),
        body: body_of(body),
        trailers: vec![
            ("Vaultgate-Proposal".into(), pid.to_owned()),
            ("Vaultgate-Proposal-Hash".into(), phash.to_owned()),
            ("Vaultgate-History-Entry".into(), entry.to_owned()),
            ("Vaultgate-Audit".into(), format!("{seq} {hash}")),
            ("Vaultgate-Credential".into(), credential_trailer(actor)),
            ("Vaultgate-Gateway".into(), crate::git::clean_name(gateway)),
            ("Vaultgate-Job".into(), job.to_owned()),
        ],
        author_name: who.author_name.clone(),
        author_email: who.author_email.clone(),
        date: who.author_date.clone(),
        files: Vec::new(),
    };
    (commit.message(), who)
}

/// The commit of an apply to a team vault: the proposal's kind and target, its reason; the rest
/// from the job's `meta`, so the same job row always makes the same commit.
pub(crate) fn team_apply_commit(
    p: &proposals::Proposal,
    meta: &crate::teamcommit::CommitMeta,
    job: &str,
) -> (String, Identity) {
    team_commit(
        &format!("{} {}", p.kind.as_str(), p.target),
        &p.reason,
        Some((&p.id, &p.proposal_hash)),
        &meta.history_id,
        identity_of(&meta.actor, Some(&p.created_by), &meta.date),
        &meta.actor,
        (meta.intent_seq, &meta.intent_hash),
        (&meta.received_by, job),
    )
}

/// The commit of a change on a team vault that is no proposal's — an undo or redo (`<undo|redo>
/// <the entry's subject>`) or an executed critical call (`delete_permanent <paths>`, a history
/// barrier) — by whoever made it.
pub(crate) fn team_change_commit(
    subject: &str,
    entry: &str,
    actor: &audit::Actor,
    intent: &audit::AuditRecord,
    (gateway, job): (&str, &str),
    date: &str,
) -> (String, Identity) {
    team_commit(
        subject,
        "",
        None,
        entry,
        identity_of(actor, None, date),
        actor,
        (intent.seq, &intent.hash),
        (gateway, job),
    )
}

impl History<'_> {
    /// The change's row (and its commit, when git is on), built at the commit point.
    pub(crate) fn change_row(
        &self,
        v: &VaultHandle,
        intent: &Intent,
        head: &inbox::AuditHead,
        ts: &str,
    ) -> Result<ChangeRow, GatewayError> {
        let a = &intent.audit;
        let mut notes = note_changes(&intent.ops);
        let files = commit_files(&intent.ops);
        let loose = match &intent.txn {
            TxnKind::Apply { proposal_kind, .. } => *proposal_kind == proposals::Kind::Move,
            TxnKind::History { label, .. } => label.starts_with("move "),
            TxnKind::Critical { .. } => false,
        };
        pair_moves(&mut notes, loose);
        let (kind, history_entry_id, reason, subject, proposal, created_by) = match &intent.txn {
            TxnKind::Apply {
                proposal_id,
                proposal_kind,
                target,
                proposal_hash,
                history_id,
                reason,
                created_by,
                ..
            } => (
                proposal_kind.as_str().to_owned(),
                history_id.clone(),
                reason.clone(),
                format!("{} {target}", proposal_kind.as_str()),
                Some((proposal_id.clone(), proposal_hash.clone())),
                created_by.as_ref(),
            ),
            TxnKind::History {
                transition,
                entry_id,
                label,
            } => (
                transition.as_str().to_owned(),
                entry_id.clone(),
                String::new(),
                format!("{} {label}", transition.as_str()),
                None,
                None,
            ),
            TxnKind::Critical { tool, history_id, .. } => {
                let removed: Vec<&str> = notes.iter().map(|n| n.path.as_str()).collect();
                let subject = if tool == crate::critical::DELETE_PERMANENT {
                    format!("{tool} {}", removed.join(", "))
                } else {
                    format!("{tool} ({} files)", removed.len())
                };
                (
                    tool.clone(),
                    history_id.clone(),
                    String::new(),
                    subject,
                    None,
                    None,
                )
            }
        };
        let mut paths: Vec<String> = notes
            .iter()
            .flat_map(|n| std::iter::once(n.path.clone()).chain(n.from.clone()))
            .collect();
        paths.sort();
        paths.dedup();
        let git = if self.core.state.git_enabled(&v.id)? {
            let (pid, phash) = proposal.unwrap_or_else(|| ("none".into(), "none".into()));
            let who = identity_of(&a.actor, created_by, ts);
            let pending = PendingCommit {
                subject: cut(&policy::text::escape_line(&subject), SUBJECT_CHARS),
                body: body_of(&reason),
                trailers: vec![
                    ("Vaultgate-Proposal".into(), pid),
                    ("Vaultgate-Proposal-Hash".into(), phash),
                    ("Vaultgate-History-Entry".into(), history_entry_id.clone()),
                    ("Vaultgate-Audit".into(), format!("{} {}", head.seq, head.hash)),
                    ("Vaultgate-Credential".into(), credential_trailer(&a.actor)),
                ],
                author_name: who.author_name,
                author_email: who.author_email,
                date: ts.to_owned(),
                files,
            };
            Some(serde_json::to_value(&pending).map_err(|e| GatewayError::Internal(e.to_string()))?)
        } else {
            None
        };
        Ok(ChangeRow {
            kind,
            history_entry_id,
            actor: a.actor_label.clone(),
            reason,
            ts: ts.to_owned(),
            audit_seq: head.seq,
            notes: serde_json::to_value(&notes).map_err(|e| GatewayError::Internal(e.to_string()))?,
            paths,
            git,
        })
    }

    /// The vault's repository, when git is on and the folder is in a work tree.
    pub(crate) fn repo_of(&self, v: &VaultHandle) -> Result<Option<Repo>, GitError> {
        Repo::discover(&self.core.git, v.reader.fs().root())
    }

    /// Makes the vault's queued commits, oldest first (called under its write lock). Answers
    /// what became of the newest: `committed` when the queue is empty, `queued` when a commit
    /// must wait, `off` when the vault has git off.
    pub(crate) fn drain_git(&self, v: &VaultHandle) -> &'static str {
        match self.core.state.git_enabled(&v.id) {
            Ok(true) => {}
            Ok(false) => return "off",
            Err(e) => {
                tracing::error!(vault = %v.id, error = %e, "reading the git setting failed");
                return "queued";
            }
        }
        match self.try_drain(v) {
            Ok(()) => "committed",
            Err(GitError::Busy(why)) => {
                tracing::warn!(vault = %v.id, why = %why, "git commit queued");
                "queued"
            }
            Err(e) => {
                tracing::error!(vault = %v.id, error = %e, "git commit failed; it stays queued");
                "queued"
            }
        }
    }

    fn try_drain(&self, v: &VaultHandle) -> Result<(), GitError> {
        let state_err = |e: inbox::StateError| GitError::Failed {
            command: "state".into(),
            detail: e.to_string(),
        };
        let mut repo: Option<Repo> = None;
        loop {
            let batch = self
                .core
                .state
                .queued_commits(&v.id, QUEUE_BATCH)
                .map_err(state_err)?;
            if batch.is_empty() {
                return Ok(());
            }
            if repo.is_none() {
                repo = self.repo_of(v)?;
            }
            let Some(r) = repo.as_ref() else {
                return Err(GitError::Busy(format!(
                    "{} is no longer in a git work tree",
                    v.reader.fs().root().display()
                )));
            };
            for c in batch {
                if let Some(why) = r.busy() {
                    return Err(GitError::Busy(why));
                }
                let done = self.make_commit(r, v, &c)?;
                let id = match done {
                    Made::Committed(ref id) => GitDone::Committed(id),
                    Made::Dropped => GitDone::Dropped,
                };
                self.core.state.finish_git(c.seq, id).map_err(state_err)?;
            }
        }
    }

    /// Makes one queued commit, or finds `HEAD` already holds it.
    fn make_commit(&self, repo: &Repo, v: &VaultHandle, c: &Change) -> Result<Made, GitError> {
        let failed = |detail: String| GitError::Failed {
            command: "commit".into(),
            detail,
        };
        let pending: PendingCommit = match c.git_json.clone().map(serde_json::from_value) {
            Some(Ok(p)) => p,
            _ => {
                tracing::error!(vault = %v.id, change = c.seq, "a queued commit this version cannot read is dropped");
                return Ok(Made::Dropped);
            }
        };
        let files = v.files();
        let mut changes: BTreeMap<String, TreeEntry> = BTreeMap::new();
        for (path, hash) in &pending.files {
            let entry = match hash {
                None => None,
                Some(h) => match content_of(&*files, path, h) {
                    Some(bytes) => Some((FILE_MODE.to_owned(), repo.write_blob(&bytes)?)),
                    None => {
                        tracing::error!(vault = %v.id, change = c.seq, "the content of a queued commit is gone; it is dropped");
                        return Ok(Made::Dropped);
                    }
                },
            };
            changes.insert(repo.repo_path(path), entry);
        }
        for _ in 0..3 {
            let head = repo.head()?;
            // A crash (or a failed state write) came after a ref update: the commit recorded
            // before it is in HEAD's history, even if the user committed on top since.
            if let (Some(h), Some(tried)) = (&head, &c.git_commit)
                && repo.is_ancestor(tried, h)?
            {
                return Ok(Made::Committed(tried.clone()));
            }
            // The user committed the same content meanwhile: nothing is left to commit.
            if let Some(h) = &head
                && !changes.is_empty()
                && self.head_holds(repo, h, &changes)?
            {
                return Ok(Made::Dropped);
            }
            let base = match &head {
                Some(h) => Some(repo.tree_of(h)?),
                None => None,
            };
            let tree = repo.tree_with(base.as_deref(), &changes)?;
            let who = Identity {
                author_name: pending.author_name.clone(),
                author_email: pending.author_email.clone(),
                author_date: pending.date.clone(),
            };
            let commit = repo.commit_tree(&tree, head.as_deref(), &pending.message(), &who)?;
            repo.set_index(&changes)?;
            self.core
                .state
                .note_git_attempt(c.seq, &commit)
                .map_err(|e| failed(e.to_string()))?;
            self.core.failpoints.hit("git_before_ref");
            if repo.update_head(
                &commit,
                head.as_deref(),
                &format!("vaultgate: {}", pending.subject),
            )? {
                self.core.failpoints.hit("git_after_ref");
                return Ok(Made::Committed(commit));
            }
            // HEAD moved meanwhile (someone committed): build again on the new one.
        }
        Err(failed("HEAD kept moving while vaultgate committed".into()))
    }

    /// Whether every path of `changes` already is as the commit would leave it in `head`.
    fn head_holds(
        &self,
        repo: &Repo,
        head: &str,
        changes: &BTreeMap<String, TreeEntry>,
    ) -> Result<bool, GitError> {
        for (path, entry) in changes {
            let have = repo.blob_id(head, path)?;
            if have.as_deref() != entry.as_ref().map(|(_, id)| id.as_str()) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    // ---- operator ---------------------------------------------------------------------------

    /// `vault git ID status`.
    pub fn git_status(&self, v: &VaultHandle) -> Result<GitStatus, GatewayError> {
        let on = self.core.state.git_enabled(&v.id)?;
        let repo = self.repo_of(v).map_err(git_error)?;
        let queued = self.core.state.queue_len(&v.id)?;
        let busy = repo.as_ref().and_then(Repo::busy);
        let head = match &repo {
            Some(r) => r.head().map_err(git_error)?,
            None => None,
        };
        Ok(GitStatus {
            vault: v.id.clone(),
            git: if on { "on" } else { "off" }.into(),
            program: self.core.git.path().display().to_string(),
            repository: repo.as_ref().map(|r| r.top().display().to_string()),
            head,
            queued,
            busy,
        })
    }

    /// `vault git ID on`: the folder must be in a git work tree; `.vaultgate/` and the inbox go to
    /// the repository's `info/exclude`.
    pub(crate) fn git_on(&self, v: &VaultHandle) -> Result<GitStatus, GatewayError> {
        let root = v.reader.fs().root().to_path_buf();
        let Some(repo) = self.repo_of(v).map_err(git_error)? else {
            return Err(not_a_work_tree(&root, Some(&v.id)));
        };
        let inbox = v.layout().inbox.to_string();
        repo.exclude(&[repo.anchored(vault::write::MACHINE_DIR), repo.anchored(&inbox)])
            .map_err(git_error)?;
        self.core
            .state
            .set_git(&v.id, true, &rfc3339(time::OffsetDateTime::now_utc()), false)?;
        self.git_status(v)
    }

    /// `vault git ID off`: refused while commits wait, unless the queue is dropped.
    pub(crate) fn git_off(
        &self,
        v: &VaultHandle,
        drop_queue: bool,
    ) -> Result<(GitStatus, u64), GatewayError> {
        let queued = self.core.state.queue_len(&v.id)?;
        if queued > 0 && !drop_queue {
            return Err(GatewayError::InvalidArgument(format!(
                "{queued} commit(s) are queued for vault '{}' (see `vaultgate doctor`): let them be made (finish the merge or rebase, or remove a stale index.lock, then change something or restart), or pass --drop-queue to turn git off without them",
                v.id
            )));
        }
        let dropped = self.core.state.set_git(
            &v.id,
            false,
            &rfc3339(time::OffsetDateTime::now_utc()),
            drop_queue,
        )?;
        Ok((self.git_status(v)?, dropped))
    }
}

enum Made {
    Committed(String),
    Dropped,
}

pub(crate) fn git_error(e: GitError) -> GatewayError {
    GatewayError::Internal(format!("git: {e}"))
}

/// `vault git ID status`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GitStatus {
    pub vault: String,
    /// `on` or `off`.
    pub git: String,
    /// The `git` vaultgate runs (the first on the operator's `PATH`).
    pub program: String,
    /// The work tree holding the vault folder, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    /// Commits waiting in the queue.
    pub queued: u64,
    /// Why a commit could not be made now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busy: Option<String>,
}

/// `vault remove`: the vault's git setting, changes and queued commits are forgotten.
pub fn forget_vault(home: &crate::home::Home, id: &str) -> Result<(), GatewayError> {
    Ok(inbox::State::open(&home.state_path())?.forget_changes(id)?)
}

/// `vault add --git`: refused, with the next step, when `folder` is in no git work tree.
pub fn check_work_tree(folder: &std::path::Path) -> Result<(), GatewayError> {
    match Repo::discover(&crate::git::Program::default(), folder).map_err(git_error)? {
        Some(_) => Ok(()),
        None => Err(not_a_work_tree(folder, None)),
    }
}

fn not_a_work_tree(folder: &std::path::Path, id: Option<&str>) -> GatewayError {
    let again = match id {
        Some(id) => format!("`vaultgate vault git {id} on`"),
        None => "the command".to_owned(),
    };
    GatewayError::InvalidArgument(format!(
        "{} is not in a git work tree: run `git init` there (or in a folder above it), then {again} again",
        folder.display()
    ))
}

/// The text `vault git ID …` prints.
pub fn describe_git(s: &GitStatus) -> String {
    let mut out = format!("vault '{}': git {}\nprogram: {}", s.vault, s.git, s.program);
    match &s.repository {
        Some(r) => out.push_str(&format!("\nrepository: {r}")),
        None => out.push_str("\nrepository: none (the vault folder is not in a git work tree)"),
    }
    if let Some(h) = &s.head {
        out.push_str(&format!("\nHEAD: {h}"));
    }
    out.push_str(&format!("\nqueued commits: {}", s.queued));
    if let Some(b) = &s.busy {
        out.push_str(&format!("\nbusy: {b}"));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_reason_cannot_add_a_trailer() {
        let body = body_of(
            "Fix it\nVaultgate-Audit: 1 forged\nSigned-off-by: x\n(cherry picked from commit 1)\nsee: https://x\n---\n# -------- >8 --------\nplain line",
        );
        for line in body.lines() {
            assert!(!looks_like_trailer(line) || line.starts_with("> "), "{line}");
        }
        assert!(body.contains("> Vaultgate-Audit: 1 forged"));
        assert!(
            body.contains("\n> ---\n") && body.contains("> # -------- >8"),
            "{body}"
        );
        assert!(body.contains("plain line"));
        assert_eq!(
            body_of("a\u{7}b"),
            "a\\u{7}b".replace("\\u{7}", &policy::text::escape_line("\u{7}"))
        );
    }

    #[test]
    fn a_move_written_as_new_and_removed_files_is_one_entry() {
        let n = |path: &str, before: Option<&str>, after: Option<&str>| NoteChange {
            path: path.into(),
            from: None,
            before: before.map(Into::into),
            after: after.map(Into::into),
        };
        let mut notes = vec![
            n("b.md", None, Some("h")),
            n("c.md", Some("x"), Some("y")),
            n("a.md", Some("h"), None),
        ];
        pair_moves(&mut notes, false);
        assert_eq!(notes.len(), 2);
        assert_eq!(
            (notes[0].from.as_deref(), notes[0].before.as_deref()),
            (Some("a.md"), Some("h"))
        );
        // A self-link rewrite changed the moved note: paired only for a move.
        let mut notes = vec![n("b.md", None, Some("h2")), n("a.md", Some("h"), None)];
        let mut strict = notes.clone();
        pair_moves(&mut strict, false);
        assert_eq!(strict.len(), 2, "not paired by content");
        pair_moves(&mut notes, true);
        assert_eq!(notes.len(), 1);
        assert_eq!(
            (notes[0].before.as_deref(), notes[0].after.as_deref()),
            (Some("h"), Some("h2"))
        );
    }

    #[test]
    fn subjects_are_cut_at_72_characters() {
        let s = cut(&"x".repeat(100), SUBJECT_CHARS);
        assert_eq!(s.chars().count(), 72);
        assert!(s.ends_with('…'));
        assert_eq!(cut("short", 72), "short");
    }

    #[test]
    fn a_move_removes_its_source_and_adds_its_destination() {
        let ops = vec![
            FileOp::Rename {
                from_zone: Zone::Note,
                from: "a.md".into(),
                to_zone: Zone::Note,
                to: "b.md".into(),
                hash: "h".into(),
            },
            FileOp::Rename {
                from_zone: Zone::Note,
                from: "c.md".into(),
                to_zone: Zone::Machine,
                to: ".vaultgate/trash/t1/c.md".into(),
                hash: "k".into(),
            },
        ];
        let (notes, files) = (note_changes(&ops), commit_files(&ops));
        assert_eq!(notes[0].from.as_deref(), Some("a.md"));
        assert_eq!(notes[1].path, "c.md");
        assert_eq!(notes[1].after, None);
        assert_eq!(
            files,
            vec![
                ("a.md".into(), None),
                ("b.md".into(), Some("h".into())),
                ("c.md".into(), None)
            ]
        );
        assert_eq!(
            note_of(Zone::Machine, ".vaultgate/trash/t1/d/e.md").as_deref(),
            Some("d/e.md")
        );
        assert_eq!(note_of(Zone::Machine, ".vaultgate/objects/x"), None);
    }
}
