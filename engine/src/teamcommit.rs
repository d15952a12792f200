//! A team job's one commit (docs/contract.md#team-mode): a function of its job row, its
//! proposal and the base it builds on alone, so whichever gateway settles a job left behind
//! builds the very commit the row names and pushes that one, never another.
//!
//! It must never read the clock or anything else the row does not fix but the base's tree and,
//! from this gateway's clone, a name that folds alike and a move's links: where those differ
//! between gateways the commit built again differs, and is never pushed for the row's.

use std::collections::BTreeMap;

use proposals::Kind;
use proposals::Proposal;
use proposals::ops::{FileOp, Zone};
use proposals::plan::{ApplyFacts, PlannedRewrite, TargetState};
use serde_json::Value;

use crate::call::Call;
use crate::core::{Core, VaultHandle, rfc3339};
use crate::error::GatewayError;
use crate::git::{FILE_MODE, Repo, TreeEntry};
use crate::storage::TeamJob;
use crate::txn::internal;

/// The largest note an apply reads from the remote's history to check its base.
const MAX_NOTE: usize = 64 << 20;

/// What a job's commit is made of besides its proposal and base, fixed once its intent is
/// recorded and noted in its job row with the commit: whichever gateway settles the job builds
/// the same commit from the row (docs/contract.md#team-mode).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CommitMeta {
    /// The author and committer date: the intent's.
    pub(crate) date: String,
    pub(crate) history_id: String,
    pub(crate) actor: audit::Actor,
    /// docs/contract.md#team-mode: the gateway that received the call.
    pub(crate) received_by: String,
    pub(crate) intent_seq: u64,
    pub(crate) intent_hash: String,
}

impl CommitMeta {
    /// For `job` of `call`, whose `apply.intent` record is `intent` (nothing read later).
    pub(crate) fn fixed(call: &Call<'_>, job: &TeamJob, intent: &audit::AuditRecord) -> CommitMeta {
        CommitMeta {
            date: rfc3339(intent.ts),
            history_id: crate::ids::HistoryEntryId::new().to_string(),
            actor: call.actor().audit_actor(),
            received_by: call.received_by().unwrap_or(&job.gateway).to_owned(),
            intent_seq: intent.seq,
            intent_hash: intent.hash.clone(),
        }
    }

    pub(crate) fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// One job's commit, from its row, its proposal and a base.
pub(crate) struct Recipe<'a> {
    pub(crate) core: &'a Core,
    pub(crate) v: &'a VaultHandle,
    pub(crate) p: &'a Proposal,
    pub(crate) content: Option<&'a str>,
    pub(crate) job: &'a str,
    pub(crate) meta: &'a CommitMeta,
}

impl Recipe<'_> {
    /// The proposal checked against `base` (docs/contract.md#applying-a-proposal checks 3–6)
    /// and its one commit on it, a function of the job row, the proposal and `base` alone; the
    /// note paths it writes or removes.
    pub(crate) fn build(&self, repo: &Repo, base: &str) -> Result<(String, Vec<String>), GatewayError> {
        let p = self.p;
        let git = crate::changelog::git_error;
        // The facts, from the head's tree (never the clone's files, which a fetch may move).
        let read_at = |raw: &str| -> Result<Option<Vec<u8>>, GatewayError> {
            let path = policy::VaultPath::parse(raw)?;
            match repo.blob_id(base, &repo.repo_path(path.as_str())).map_err(git)? {
                Some(id) => Ok(Some(repo.read_blob(&id, MAX_NOTE).map_err(git)?.ok_or_else(
                    || GatewayError::Internal(format!("'{raw}' is unreadable in the remote")),
                )?)),
                None => Ok(None),
            }
        };
        let state_of = |raw: &str, bytes: &Option<Vec<u8>>| -> Result<TargetState, GatewayError> {
            Ok(match bytes {
                Some(b) => TargetState::Present {
                    hash: proposals::sha256_hex(b),
                },
                None => match self
                    .v
                    .reader
                    .fs()
                    .find_collision(&policy::VaultPath::parse(raw)?)?
                {
                    Some(other) => TargetState::Collides {
                        existing: other.to_string(),
                    },
                    None => TargetState::Missing,
                },
            })
        };
        let source = p.from.as_deref().unwrap_or(&p.target);
        let source_bytes = read_at(source)?;
        let current = state_of(source, &source_bytes)?;
        let destination = match p.kind {
            Kind::Move => Some(state_of(&p.target, &read_at(&p.target)?)?),
            _ => None,
        };
        // Every text a step writes, by its hash.
        let mut texts: std::collections::HashMap<String, Vec<u8>> = std::collections::HashMap::new();
        for b in [self.content.map(|c| c.as_bytes().to_vec()), source_bytes.clone()]
            .into_iter()
            .flatten()
        {
            texts.insert(proposals::sha256_hex(&b), b);
        }
        let mut facts = ApplyFacts {
            // The remote's history keeps a deleted note; the plan's trash step removes it.
            trash_path: (p.kind == Kind::Delete).then(|| format!(".vaultgate/trash/{}", p.id)),
            ..ApplyFacts::default()
        };
        if let (Kind::Move, Some(moved)) = (p.kind, &source_bytes)
            && matches!(
                destination,
                Some(TargetState::Missing | TargetState::Collides { .. })
            )
        {
            let from = policy::VaultPath::parse(source)?;
            let mut moved = moved.clone();
            for r in self
                .v
                .reader
                .plan_move(&from, &policy::VaultPath::parse(&p.target)?)?
            {
                if r.path == from {
                    moved = r.new_text.into_bytes();
                    continue;
                }
                // SECURITY(T-PROP7): each rewrite replaces exactly the bytes it was computed
                // from, as the head holds them (plan::decide refuses it otherwise).
                let now = read_at(r.path.as_str())?.map(|b| proposals::sha256_hex(&b));
                let after = proposals::sha256_hex(r.new_text.as_bytes());
                texts.insert(after.clone(), r.new_text.into_bytes());
                facts.rewrites.push(PlannedRewrite {
                    path: r.path.to_string(),
                    before: r.base_hash,
                    now,
                    after,
                });
            }
            let moved_hash = proposals::sha256_hex(&moved);
            texts.insert(moved_hash.clone(), moved);
            facts.moved_hash = Some(moved_hash);
        }
        let plan = proposals::plan::decide(
            self.core.secret().bytes(),
            self.v.reader.layout(),
            p,
            &p.proposal_hash,
            self.content.map(str::as_bytes),
            &current,
            destination.as_ref(),
            &facts,
        )
        .map_err(|d| crate::apply::refused(d, p))?;
        let mut changes: BTreeMap<String, TreeEntry> = BTreeMap::new();
        let mut touched = Vec::new();
        for op in plan.ops.iter().take(plan.note_ops) {
            match op {
                FileOp::Put {
                    zone: Zone::Note,
                    path,
                    after,
                    ..
                } => {
                    let bytes = texts
                        .get(after)
                        .ok_or_else(|| internal("a write without its text"))?;
                    let blob = repo.write_blob(bytes).map_err(git)?;
                    changes.insert(repo.repo_path(path), Some((FILE_MODE.to_owned(), blob)));
                    touched.push(path.clone());
                }
                FileOp::Delete {
                    zone: Zone::Note,
                    path,
                    ..
                }
                | FileOp::Rename {
                    from_zone: Zone::Note,
                    from: path,
                    ..
                } => {
                    changes.insert(repo.repo_path(path), None);
                    touched.push(path.clone());
                }
                other => return Err(internal(format!("a team apply cannot run {other:?}"))),
            }
        }
        // A commit names its tree: `base` is listed as it.
        let tree = repo.tree_with(Some(base), &changes).map_err(git)?;
        let (message, who) = crate::changelog::team_apply_commit(p, self.meta, self.job);
        let commit = repo.commit_tree(&tree, Some(base), &message, &who).map_err(git)?;
        Ok((commit, touched))
    }
}
