//! A team vault's note history (docs/contract.md#team-mode): `get_note_history` and
//! `read_note {hash}` answer from the commits vaultgate pushed to the remote (those with a
//! `Vaultgate-Proposal` trailer), as this gateway's clone holds them, following a note back
//! across its moves. A person's own commits are not vaultgate's changes and are not listed; a
//! permanent deletion ends a note's history (nothing before it is read).
//!
//! It must never read a version that the listing does not name (no arbitrary walk of the
//! repository), or read a path the layout does not let a client read.

use crate::changelog::HISTORY_MAX;
use crate::core::{Core, VaultHandle};
use crate::error::GatewayError;
use crate::remote::PushedChange;
use crate::versions::{HistoryItem, NoteHistoryOut};

/// The largest version read.
const MAX_VERSION: usize = 64 << 20;
/// How many commits one walk looks at at most (a note's whole history, bounded).
const MAX_WALK: usize = 10_000;

/// One change of the note, with the path it had before and after.
struct Step {
    change: PushedChange,
    before: Option<String>,
    after: Option<String>,
}

/// The note's changes from the clone's head back, newest first (at most `want`), and whether
/// there were more.
fn walk(core: &Core, v: &VaultHandle, path: &str, want: usize) -> Result<(Vec<Step>, bool), GatewayError> {
    let dir = v.reader.fs().root();
    let mut cur = path.to_owned();
    let mut rev = "HEAD".to_owned();
    let mut steps = Vec::new();
    let mut looked = 0;
    'walk: while steps.len() <= want && looked < MAX_WALK {
        let batch = crate::remote::vaultgate_commits(&core.git, dir, &rev, std::slice::from_ref(&cur), 64)?;
        if batch.is_empty() {
            break;
        }
        looked += batch.len();
        for change in batch {
            rev = format!("{}^", change.commit);
            let Some((status, _)) = change.files.iter().find(|(_, p)| *p == cur).cloned() else {
                continue;
            };
            let kind = change.subject.split(' ').next().unwrap_or_default().to_owned();
            // A move adds the note here and removes it where it was.
            let from = match (status, kind.as_str()) {
                ('A', "move") => change
                    .files
                    .iter()
                    .find(|(s, p)| *s == 'D' && *p != cur)
                    .map(|(_, p)| p.clone()),
                _ => None,
            };
            // docs/contract.md#critical-operations: a permanent deletion ends the note's history
            // here; no version before it is listed or read.
            if status == 'D' && kind == crate::critical::DELETE_PERMANENT {
                steps.push(Step {
                    change,
                    before: None,
                    after: None,
                });
                break 'walk;
            }
            let (before, after) = match status {
                'A' => (from.clone(), Some(cur.clone())),
                'D' => (Some(cur.clone()), None),
                _ => (Some(cur.clone()), Some(cur.clone())),
            };
            // SECURITY(T-TEAM8): a move's source the layout does not let clients read (a commit
            // made to look like vaultgate's) ends the walk; its bytes are never listed.
            let from =
                from.filter(|f| policy::VaultPath::parse(f).is_ok_and(|p| v.layout().check_read(&p).is_ok()));
            let began = status == 'A' && from.is_none();
            steps.push(Step {
                change,
                before,
                after,
            });
            if began {
                break 'walk;
            }
            if let Some(from) = from {
                cur = from;
                continue 'walk;
            }
            if steps.len() > want {
                break 'walk;
            }
        }
    }
    let more = steps.len() > want;
    steps.truncate(want);
    Ok((steps, more))
}

/// The listed changes with their versions' bytes: `(item, before, after)`.
#[allow(clippy::type_complexity)]
fn items(
    core: &Core,
    v: &VaultHandle,
    steps: Vec<Step>,
) -> Result<Vec<(HistoryItem, Option<Vec<u8>>, Option<Vec<u8>>)>, GatewayError> {
    let mut specs = Vec::new();
    for s in &steps {
        specs.push(match &s.before {
            Some(p) => format!("{}^:{p}", s.change.commit),
            None => format!("{}^:", s.change.commit),
        });
        specs.push(match &s.after {
            Some(p) => format!("{}:{p}", s.change.commit),
            None => format!("{}:", s.change.commit),
        });
    }
    let mut blobs = crate::remote::blobs(&core.git, v.reader.fs().root(), &specs, MAX_VERSION)?.into_iter();
    let trailer = |c: &PushedChange, key: &str| {
        c.trailers
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for s in steps {
        let (before, after) = (blobs.next().flatten(), blobs.next().flatten());
        let before = before.filter(|_| s.before.is_some());
        let after = after.filter(|_| s.after.is_some());
        out.push((
            HistoryItem {
                ts: s.change.date.clone(),
                kind: s.change.subject.split(' ').next().unwrap_or_default().to_owned(),
                actor: trailer(&s.change, "Vaultgate-Credential"),
                reason: s.change.body.clone(),
                history_entry_id: trailer(&s.change, "Vaultgate-History-Entry"),
                hash_before: before.as_deref().map(proposals::sha256_hex),
                hash_after: after.as_deref().map(proposals::sha256_hex),
                commit: Some(s.change.commit.clone()),
            },
            before,
            after,
        ));
    }
    Ok(out)
}

/// `get_note_history` on a team vault: the first `limit` changes (no cursor: a longer history
/// answers `truncated: true`; ask with a larger `limit`, up to 200).
pub(crate) fn note_history(
    core: &Core,
    v: &VaultHandle,
    path: &str,
    limit: usize,
    cursor: Option<&str>,
) -> Result<NoteHistoryOut, GatewayError> {
    if cursor.is_some() {
        return Err(GatewayError::InvalidArgument(
            "a team vault's note history takes no cursor: ask with a larger limit (up to 200)".into(),
        ));
    }
    let start = policy::VaultPath::parse(path)?;
    v.layout().check_read(&start)?;
    let (steps, truncated) = walk(core, v, start.as_str(), limit)?;
    Ok(NoteHistoryOut {
        entries: items(core, v, steps)?.into_iter().map(|(i, _, _)| i).collect(),
        truncated,
        next_cursor: None,
    })
}

/// `read_note {hash}` on a team vault: a version the note's history lists.
pub(crate) fn read_version(
    core: &Core,
    v: &VaultHandle,
    path: &str,
    hash: &str,
) -> Result<Option<vault::ReadNote>, GatewayError> {
    let start = policy::VaultPath::parse(path)?;
    v.layout().check_read(&start)?;
    let (steps, _) = walk(core, v, start.as_str(), HISTORY_MAX * 5)?;
    for (item, before, after) in items(core, v, steps)? {
        let bytes = if item.hash_after.as_deref() == Some(hash) {
            after
        } else if item.hash_before.as_deref() == Some(hash) {
            before
        } else {
            continue;
        };
        if let Some(bytes) = bytes {
            let mut note = v.reader.read_version(path, bytes, item.ts)?;
            note.path = start.to_string();
            return Ok(Some(note));
        }
    }
    Ok(None)
}
