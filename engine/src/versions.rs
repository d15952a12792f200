//! A note's versions: `get_note_history` walks the change rows of one path back across moves,
//! `read_note {hash}` returns only versions that walk lists (from the history objects, else git),
//! and a permanent deletion purges what only the deleted notes held.

use std::sync::Arc;

use proposals::ops::Zone;
use serde::{Deserialize, Serialize};

use crate::changelog::{HISTORY_DEFAULT, HISTORY_MAX, NoteChange, git_error};
use crate::core::{PageCall, VaultHandle};
use crate::cursor::Position;
use crate::error::GatewayError;
use crate::history::History;
use crate::storage::VaultBackend;

impl History<'_> {
    /// `get_note_history`: the changes vaultgate made to the note at `path`, newest first,
    /// following it back across moves; stops where it began (`new`) or at a permanent deletion.
    pub fn note_history(
        &self,
        v: &VaultHandle,
        page: &PageCall<'_>,
        path: &str,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<NoteHistoryOut, GatewayError> {
        let limit = match limit {
            None => HISTORY_DEFAULT,
            Some(n) if (1..=HISTORY_MAX as u32).contains(&n) => n as usize,
            Some(n) => {
                return Err(GatewayError::InvalidArgument(format!(
                    "limit must be between 1 and {HISTORY_MAX}, got {n}"
                )));
            }
        };
        if v.remote.is_some() {
            return crate::teamhistory::note_history(self.core, v, path, limit, cursor);
        }
        let start = policy::VaultPath::parse(path)?;
        v.layout().check_read(&start)?;
        let (mut cur, mut before) = match self.core.open_cursor(v, page, cursor)? {
            None => (start.to_string(), None),
            Some(Position::History { seq, path }) => {
                let row = self
                    .core
                    .state
                    .change(&v.id, seq)?
                    .ok_or_else(|| GatewayError::InvalidArgument("this cursor names no change".into()))?;
                let notes: Vec<NoteChange> = serde_json::from_value(row.notes).unwrap_or_default();
                let name = notes
                    .iter()
                    .flat_map(|n| std::iter::once(n.path.clone()).chain(n.from.clone()))
                    .find(|p| path.order_of(p) == Some(std::cmp::Ordering::Equal))
                    .ok_or_else(|| GatewayError::InvalidArgument("this cursor names no change".into()))?;
                (name, Some(seq))
            }
            Some(_) => return Err(crate::core::not_this_cursor()),
        };
        let mut walk = self.walk_history(v, &mut cur, &mut before, limit + 1)?;
        let truncated = walk.len() > limit;
        walk.truncate(limit);
        let next_cursor = match walk.last() {
            Some(((seq, name), _)) if truncated => Some(self.core.seal(
                v,
                page,
                &Position::History {
                    seq: *seq,
                    path: vault::Key::exact(name),
                },
            )),
            _ => None,
        };
        Ok(NoteHistoryOut {
            entries: walk.into_iter().map(|(_, e)| e).collect(),
            truncated,
            next_cursor,
        })
    }

    /// Walks up to `want` entries back from (`cur`, `before`), newest first. Leaves `cur` and
    /// `before` where the walk stopped. Each entry comes with the (seq, next path) to resume at.
    fn walk_history(
        &self,
        v: &VaultHandle,
        cur: &mut String,
        before: &mut Option<i64>,
        want: usize,
    ) -> Result<Vec<Walked>, GatewayError> {
        let mut out = Vec::new();
        'outer: while out.len() < want {
            let rows = self
                .core
                .state
                .changes_of_path(&v.id, cur, *before, want - out.len())?;
            if rows.is_empty() {
                break;
            }
            for row in rows {
                *before = Some(row.seq);
                let notes: Vec<NoteChange> = serde_json::from_value(row.notes.clone()).unwrap_or_default();
                let Some(n) = notes.iter().find(|n| n.path == *cur).cloned() else {
                    // Names `cur` only as a move's source: that note moved away, and the one now
                    // at `cur` came later (made outside vaultgate). Its history ends here.
                    break 'outer;
                };
                let barrier = is_barrier(&row.kind);
                let began = row.kind == "new" && n.before.is_none();
                let next = n.from.clone();
                if let Some(from) = &next {
                    *cur = from.clone();
                }
                out.push((
                    (row.seq, cur.clone()),
                    HistoryItem {
                        ts: row.ts.clone(),
                        kind: row.kind.clone(),
                        actor: row.actor.clone(),
                        reason: row.reason.clone(),
                        history_entry_id: row.history_entry_id.clone(),
                        hash_before: n.before.clone(),
                        hash_after: n.after.clone(),
                        commit: (row.git == "committed").then(|| row.git_commit.clone()).flatten(),
                    },
                ));
                if barrier || began {
                    break 'outer;
                }
                if next.is_some() || out.len() >= want {
                    // The name changed (query again under it), or the page is full.
                    continue 'outer;
                }
            }
        }
        Ok(out)
    }

    /// `read_note {hash}`: one of the versions `get_note_history` lists for `path`, from the
    /// history objects, or from a commit vaultgate made where git is on. Anything else —
    /// a hash only the user's own commits hold, a version behind a permanent deletion — is
    /// `NOT_FOUND`: never an arbitrary walk of the repository.
    pub fn read_version(
        &self,
        v: &Arc<VaultHandle>,
        path: &str,
        hash: &str,
    ) -> Result<vault::ReadNote, GatewayError> {
        let not_found = || {
            GatewayError::from(crate::error::Refused::VersionNotFound {
                path: path.to_owned(),
                hash: hash.to_owned(),
            })
        };
        if hash.len() != 64
            || !hash
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        {
            return Err(GatewayError::InvalidArgument(
                "hash is a note's lowercase hex SHA-256 (64 characters)".into(),
            ));
        }
        if v.remote.is_some() {
            return crate::teamhistory::read_version(self.core, v, path, hash)?.ok_or_else(not_found);
        }
        let start = policy::VaultPath::parse(path)?;
        v.layout().check_read(&start)?;
        let mut cur = start.to_string();
        let mut before = None;
        // Bounded: a note's history is read a page at a time until the version is found.
        let mut found = None;
        for _ in 0..1_000 {
            let walk = self.walk_history(v, &mut cur, &mut before, HISTORY_MAX)?;
            let done = walk.len() < HISTORY_MAX;
            for ((seq, _), item) in walk {
                // docs/contract.md#critical-operations: what a permanent deletion removed is not readable again.
                if is_barrier(&item.kind) {
                    continue;
                }
                if item.hash_after.as_deref() == Some(hash) || item.hash_before.as_deref() == Some(hash) {
                    found = Some((seq, item));
                    break;
                }
            }
            if found.is_some() || done {
                break;
            }
        }
        let Some((seq, item)) = found else {
            return Err(not_found());
        };
        let bytes = match v.files().blob(hash) {
            Ok(b) => Some(b),
            Err(_) => self.version_from_git(v, seq, hash)?,
        };
        let bytes = bytes.ok_or_else(not_found)?;
        if proposals::sha256_hex(&bytes) != hash {
            return Err(not_found());
        }
        let mut note = v.reader.read_version(path, bytes, item.ts)?;
        note.path = start.to_string();
        Ok(note)
    }

    /// A version from the commit vaultgate made for change `seq` (or its parent, for the
    /// version the change replaced).
    fn version_from_git(
        &self,
        v: &VaultHandle,
        seq: i64,
        hash: &str,
    ) -> Result<Option<Vec<u8>>, GatewayError> {
        let Some(row) = self.core.state.change(&v.id, seq)? else {
            return Ok(None);
        };
        let (Some(commit), true) = (row.git_commit.as_deref(), row.git == "committed") else {
            return Ok(None);
        };
        let Some(repo) = self.repo_of(v).map_err(git_error)? else {
            return Ok(None);
        };
        let notes: Vec<NoteChange> = serde_json::from_value(row.notes).unwrap_or_default();
        for n in notes {
            let candidates = [
                (n.after.as_deref(), commit.to_owned(), n.path.clone()),
                (
                    n.before.as_deref(),
                    format!("{commit}^"),
                    n.from.clone().unwrap_or(n.path.clone()),
                ),
            ];
            for (h, rev, p) in candidates {
                if h != Some(hash) {
                    continue;
                }
                if let Some(id) = repo.blob_id(&rev, &repo.repo_path(&p)).map_err(git_error)?
                    && let Some(bytes) = repo
                        .read_blob(&id, vault::fs::MAX_READ_BYTES as usize)
                        .map_err(git_error)?
                {
                    return Ok(Some(bytes));
                }
            }
        }
        Ok(None)
    }
}

fn is_barrier(kind: &str) -> bool {
    kind == crate::critical::DELETE_PERMANENT || kind == crate::critical::EMPTY_TRASH
}

/// Every lowercase 64-hex run in `text`: the content hashes a stored JSON names.
fn hashes_in(text: &str, out: &mut std::collections::HashSet<String>) {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let start = i;
        while i < b.len() && (b[i].is_ascii_digit() || (b'a'..=b'f').contains(&b[i])) {
            i += 1;
        }
        if i - start == 64 {
            out.insert(text[start..i].to_owned());
        }
        i += 1;
    }
}

impl History<'_> {
    /// docs/contract.md#critical-operations: after a permanent deletion, the history objects that only the deleted notes'
    /// versions use are removed, so `read_note {hash}` (or anyone with the vault folder) cannot
    /// bring them back. A hash any other change or history entry names is kept.
    pub(crate) fn purge_deleted_versions(
        &self,
        v: &VaultHandle,
        barrier_audit_seq: u64,
    ) -> Result<usize, GatewayError> {
        let Some(barrier) = self.core.state.change_by_audit_seq(barrier_audit_seq)? else {
            return Ok(0);
        };
        let notes: Vec<NoteChange> = serde_json::from_value(barrier.notes.clone()).unwrap_or_default();
        // The deleted notes' versions: (change, before, after) of each entry the walk followed.
        let mut mine = std::collections::HashSet::new();
        let mut walked = std::collections::HashSet::new();
        walked.insert((barrier.seq, None, None));
        for n in &notes {
            let mut cur = n.path.clone();
            let mut before = Some(barrier.seq);
            for ((seq, _), item) in self.walk_history(v, &mut cur, &mut before, 100_000)? {
                mine.extend(item.hash_before.clone());
                mine.extend(item.hash_after.clone());
                walked.insert((seq, item.hash_before, item.hash_after));
            }
            mine.extend(n.before.clone());
        }
        if mine.is_empty() {
            return Ok(0);
        }
        // Every other note entry keeps its hashes (a move's rewritten linking notes share its
        // row); so does every history entry no followed change wrote (entries of older versions).
        let mut kept = std::collections::HashSet::new();
        let mut entries = std::collections::HashSet::new();
        for row in self.core.state.all_changes(&v.id)? {
            let others: Vec<NoteChange> = serde_json::from_value(row.notes.clone()).unwrap_or_default();
            let mut followed = row.seq == barrier.seq;
            for e in others {
                if walked.contains(&(row.seq, e.before.clone(), e.after.clone())) {
                    followed = true;
                } else if row.seq != barrier.seq {
                    kept.extend(e.before);
                    kept.extend(e.after);
                }
            }
            if followed {
                entries.insert(row.history_entry_id.clone());
            }
        }
        for (id, paths) in self.core.state.history_paths(&v.id)? {
            if !entries.contains(&id) {
                hashes_in(&paths, &mut kept);
            }
        }
        let files = v.files();
        let mut removed = 0;
        for h in mine.difference(&kept) {
            if files.remove_blob(h)? {
                removed += 1;
            }
        }
        Ok(removed)
    }
}

/// Where the content of a commit's file comes from: the history objects, else the note itself
/// while it still holds exactly those bytes (a moved note's bytes travel with the file).
pub(crate) fn content_of(files: &dyn VaultBackend, path: &str, hash: &str) -> Option<Vec<u8>> {
    if let Ok(b) = files.blob(hash) {
        return Some(b);
    }
    match files.read(Zone::Note, path) {
        Ok(Some((bytes, h))) if h == hash => Some(bytes),
        _ => None,
    }
}

/// A history entry with where the walk resumes after it: (change seq, the note's name there).
type Walked = ((i64, String), HistoryItem);

/// One change of `get_note_history`.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HistoryItem {
    pub ts: String,
    pub kind: String,
    pub actor: String,
    pub reason: String,
    pub history_entry_id: String,
    pub hash_before: Option<String>,
    pub hash_after: Option<String>,
    /// The git commit vaultgate made for this change, where git is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

/// `get_note_history`.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NoteHistoryOut {
    pub entries: Vec<HistoryItem>,
    pub truncated: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}
