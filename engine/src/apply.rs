//! `apply_proposal` (docs/contract.md#proposals): the engine gathers the facts under the vault's write lock,
//! [`proposals::plan::decide`] decides checks 3–6 and the file operations, and the one
//! transaction of [`crate::txn`] runs them. Nothing here compares a hash.

use std::sync::Arc;

use policy::VaultPath;
use proposals::ops::Zone;
use proposals::plan::{ApplyFacts, Decision, PlannedRewrite, Refusal, TargetState};
use proposals::{Kind, Proposal};
use serde_json::Value;

use crate::api::ApplyOut;
use crate::approval::ClientApproval;
use crate::call::Call;
use crate::core::{VaultHandle, rfc3339};
use crate::error::{GatewayError, Refused, Stale};
use crate::ids::{ProposalHash, ProposalId};
use crate::proposing::{InboxFiles, inbox_path, today};
use crate::txn::{AuditPlan, Intent, Keyed, TxnKind, internal};

/// A file's bytes and their hash, as read under the lock.
type Bytes = (Vec<u8>, String);

/// `PROPOSAL_HASH_MISMATCH` as the client reads it.
pub(crate) fn hash_mismatch() -> GatewayError {
    Refused::HashMismatch.into()
}

/// The wire refusal of each decision.
pub(crate) fn refused(d: Decision, p: &Proposal) -> GatewayError {
    match d {
        Decision::Path(e) => GatewayError::Path(e),
        Decision::Refused(Refusal::HashMismatch) => hash_mismatch(),
        Decision::Refused(Refusal::Tampered(what)) => Refused::Tampered {
            what: what.to_string(),
        }
        .into(),
        Decision::Refused(Refusal::TargetExists) => crate::proposing::exists_str(&p.target),
        // SECURITY(T-PROP2): a proposal applies only to the exact bytes it was made against.
        Decision::Refused(Refusal::StaleBase { actual: None, .. }) => Refused::StaleBase {
            path: p.from.as_deref().unwrap_or(&p.target).to_owned(),
            why: Stale::Gone,
        }
        .into(),
        Decision::Refused(Refusal::RewriteStale { path }) => Refused::StaleBase {
            path: path.to_string(),
            why: Stale::WhilePlanned,
        }
        .into(),
        Decision::Refused(Refusal::StaleBase { .. }) => Refused::StaleBase {
            path: p.from.as_deref().unwrap_or(&p.target).to_owned(),
            why: Stale::SinceProposed,
        }
        .into(),
    }
}

/// The write path: apply (here), the one journaled transaction and recovery (txn.rs), housekeeping (maintain.rs).
pub struct Writes<'a> {
    pub(crate) core: &'a crate::core::Core,
}

impl Writes<'_> {
    /// `apply_proposal` for MCP callers and the CLI alike. `approval` is how the caller's
    /// client can ask a person (docs/contract.md#the-review-page-and-in-client-approval); operators pass [`ClientApproval::Unavailable`].
    pub fn apply_proposal(
        &self,
        call: &mut Call<'_>,
        v: &Arc<VaultHandle>,
        id: &ProposalId,
        given_hash: &ProposalHash,
        idempotency_key: &str,
        approval: &ClientApproval<'_>,
    ) -> Result<ApplyOut, GatewayError> {
        if let Some(team) = crate::teamwrite::team_of(self.core, v) {
            return crate::teamwrite::apply(
                self.core,
                team,
                call,
                v,
                id,
                given_hash,
                idempotency_key,
                approval,
            );
        }
        let (mut out, settle) = self.write(
            call,
            v,
            Keyed::Key {
                key: idempotency_key,
                what: "apply",
                first: |first| first_apply(first).map(|out| (out, None)),
            },
            self.claims(call, v, id, idempotency_key),
            // SECURITY(T-APPROVE1): asked before the lock, so nothing waits on a person; the
            // answer counts only for this proposal and hash, and every check below runs again.
            |call| {
                self.core
                    .approvals()
                    .client_approval(call, v, id, given_hash, approval)
            },
            |call, approved| self.apply_locked(call, v, id, given_hash, idempotency_key, approved),
        )?;
        // The vault's writer is free again: the next write runs while this one's notes are
        // indexed, and the answer says whether they are.
        if let Some(settle) = settle {
            out.index = settle.finish(self.core, v).into();
        }
        Ok(out)
    }

    /// What an apply will touch, read before the lock, so it can share a group commit with
    /// applies that touch nothing of it (crate::group::Claims::of_apply); anything not readable
    /// here runs alone (the checks under the lock answer it).
    fn claims(
        &self,
        call: &Call<'_>,
        v: &VaultHandle,
        id: &ProposalId,
        idempotency_key: &str,
    ) -> crate::group::Claims {
        let Ok(row) = self.core.proposals().pending(v, id.as_str()) else {
            return crate::group::Claims::exclusive();
        };
        match serde_json::from_value::<Proposal>(row.meta) {
            Ok(p) => crate::group::Claims::of_apply(&p, &call.actor().principal_id(), idempotency_key),
            Err(_) => crate::group::Claims::exclusive(),
        }
    }

    /// `approve_proposal_in_app`: the card's Approve (docs/contract.md#the-review-page-and-in-client-approval),
    /// `apply_proposal` for the hash the sealed approval was minted for, the approval standing
    /// in for the person's yes (used once; every check of the apply again under the lock).
    pub fn approve_in_app(
        &self,
        call: &mut Call<'_>,
        v: &Arc<VaultHandle>,
        id: &ProposalId,
        approval: &str,
        idempotency_key: &str,
    ) -> Result<ApplyOut, GatewayError> {
        let crate::core::Actor::Caller(c) = call.actor() else {
            return Err(GatewayError::CapabilityDenied("the card is a client's".into()));
        };
        let hash = self
            .core
            .approvals()
            .app_approved_hash(&c.credential, v, id, approval)?;
        self.apply_proposal(
            call,
            v,
            id,
            &hash,
            idempotency_key,
            &ClientApproval::App(approval),
        )
    }

    /// `apply_proposal` under the vault's write lock, its key unused and interrupted writes
    /// settled: the checks of docs/contract.md#applying-a-proposal, then the transaction.
    fn apply_locked(
        &self,
        call: &mut Call<'_>,
        v: &Arc<VaultHandle>,
        id: &ProposalId,
        given_hash: &ProposalHash,
        idempotency_key: &str,
        approved: Option<crate::approval::Approved>,
    ) -> Result<(ApplyOut, Option<crate::txn::Settle>), GatewayError> {
        let principal = call.actor().principal_id();
        let args_hash = call.args_hash();
        let fs = v.reader.fs();

        // 1. exists for this vault and pending
        let row = self.core.proposals().pending(v, id.as_str())?;
        // 2. the tier may apply this proposal (own or anyone's)
        match &approved {
            Some(a) if a.covers(&row.id, given_hash.as_str()) => {
                self.core
                    .approvals()
                    .authorize_approved(call.actor(), &row.created_by)?;
            }
            _ => self
                .core
                .approvals()
                .authorize_decision(call.actor(), &row.created_by)?,
        }
        let p: Proposal = serde_json::from_value(row.meta.clone()).map_err(internal)?;
        // SECURITY(T-PROP4): only a new note or a whole-text patch was claimed shareable (`claims`).
        if call.member().is_some() && !matches!(p.kind, Kind::New | Kind::Patch) {
            return Err(internal(format!(
                "{} joined a shared group as a {}",
                p.id,
                p.kind.as_str()
            )));
        }
        let files = v.files();
        let inbox_files = InboxFiles::of(p.kind, &p.slug);

        // One instant decides the archive folder's date and the stored `decided_at` (the intent's
        // `started_at`), so `get_proposal` finds the files even across midnight.
        let now = time::OffsetDateTime::now_utc();
        // The facts, read once under the lock, without following links.
        let (content, archive) = self.inbox_facts(v, &row.meta, &inbox_files, now)?;
        let note_state = |raw: &str| -> Result<(TargetState, Option<Bytes>), GatewayError> {
            let path = VaultPath::parse(raw)?;
            let now = files.read(Zone::Note, raw)?;
            let state = match (&now, fs.find_collision(&path)?) {
                (Some((_, hash)), _) => TargetState::Present { hash: hash.clone() },
                (None, Some(other)) => TargetState::Collides {
                    existing: other.to_string(),
                },
                (None, None) => TargetState::Missing,
            };
            Ok((state, now))
        };
        let source = p.from.as_deref().unwrap_or(&p.target);
        let (current, current_bytes) = note_state(source)?;
        let destination = match p.kind {
            Kind::Move => Some(note_state(&p.target)?.0),
            _ => None,
        };
        let mut facts = ApplyFacts {
            archive,
            ..ApplyFacts::default()
        };
        // Blobs first (rollback and undo restore from them), then the intent, then the files.
        let mut blobs: Vec<(String, Vec<u8>)> = Vec::new();
        if let Some((bytes, hash)) = &current_bytes {
            blobs.push((hash.clone(), bytes.clone()));
        }
        if let Some(bytes) = &content {
            blobs.push((proposals::sha256_hex(bytes), bytes.clone()));
        }
        match p.kind {
            Kind::Delete if current_bytes.is_some() => {
                facts.trash_path = Some(fs.trash_path(&VaultPath::parse(&p.target)?, &p.id)?.to_string());
            }
            Kind::Move
                if current_bytes.is_some()
                    && matches!(
                        destination,
                        Some(TargetState::Missing | TargetState::Collides { .. })
                    ) =>
            {
                let from = VaultPath::parse(source)?;
                let to = VaultPath::parse(&p.target)?;
                let rewrites = v.reader.plan_move(&from, &to)?;
                let mut moved = current_bytes.as_ref().map(|(b, _)| b.clone()).unwrap_or_default();
                for r in &rewrites {
                    if r.path == from {
                        moved = r.new_text.clone().into_bytes();
                        continue;
                    }
                    // What is on disk now; plan::decide refuses a rewrite computed from other
                    // bytes (SECURITY(T-PROP7)).
                    let now = files.read(Zone::Note, r.path.as_str())?;
                    let now_hash = now.as_ref().map(|(_, h)| h.clone());
                    if let Some(before) = now {
                        let (bytes, hash) = before;
                        blobs.push((hash, bytes));
                    }
                    let after = proposals::sha256_hex(r.new_text.as_bytes());
                    blobs.push((after.clone(), r.new_text.clone().into_bytes()));
                    facts.rewrites.push(PlannedRewrite {
                        path: r.path.to_string(),
                        before: r.base_hash.clone(),
                        now: now_hash,
                        after,
                    });
                }
                let moved_hash = proposals::sha256_hex(&moved);
                blobs.push((moved_hash.clone(), moved));
                facts.moved_hash = Some(moved_hash);
            }
            _ => {}
        }
        let plan = proposals::plan::decide(
            self.core.secret().bytes(),
            v.reader.layout(),
            &p,
            given_hash.as_str(),
            content.as_deref(),
            &current,
            destination.as_ref(),
            &facts,
        )
        .map_err(|d| refused(d, &p))?;
        for (hash, bytes) in &blobs {
            files.store_blob(hash, bytes)?;
        }

        let archived_to = facts
            .archive
            .last()
            .map(|(_, to, _)| to.clone())
            .unwrap_or_default();
        let intent = Intent {
            txn: TxnKind::Apply {
                proposal_id: p.id.clone(),
                slug: p.slug.clone(),
                proposal_kind: p.kind,
                target: p.target.clone(),
                proposal_hash: p.proposal_hash.clone(),
                history_id: crate::ids::HistoryEntryId::new().to_string(),
                archived_to,
                reason: p.reason.clone(),
                created_by: Some(p.created_by.clone()),
            },
            ops: plan.ops,
            note_ops: plan.note_ops,
            audit: AuditPlan {
                actor: call.actor().audit_actor(),
                actor_label: call.actor().label(),
                event: call.event().to_owned(),
                tool: call.tool().into(),
                args_hash,
                idempotency: Some((principal, idempotency_key.to_owned())),
                log_offset: self.core.audit.end_offset()?,
                approval: approved.map(|a| a.via.as_str().to_owned()),
            },
            started_at: rfc3339(now),
            rolling_back: false,
            epoch: call.lease_epoch(),
        };
        let at = self.begin_txn(call, v, &p.id, &intent)?;
        self.failpoint(&intent.txn, "after_intent");
        let committed = self.run_txn(v, &at, &intent, inbox::INTENT_STARTED, Some(call))?;
        let mut out: ApplyOut = serde_json::from_value(committed.result).map_err(internal)?;
        out.index = committed.index.into();
        Ok((out, committed.settle))
    }

    /// SECURITY(T-PROP1): the proposal's inbox files as they are: the metadata file must equal
    /// the stored metadata (else `PROPOSAL_TAMPERED`), every file must be there. Returns the
    /// content bytes (new/patch) for the decision, and each file's archive move.
    #[allow(clippy::type_complexity)]
    fn inbox_facts(
        &self,
        v: &VaultHandle,
        stored_meta: &Value,
        inbox_files: &InboxFiles,
        now: time::OffsetDateTime,
    ) -> Result<(Option<Vec<u8>>, Vec<(String, String, String)>), GatewayError> {
        let files = v.files();
        let tampered = |what: &str| {
            GatewayError::from(Refused::Tampered {
                what: what.to_string(),
            })
        };
        let date = today(now);
        let mut content = None;
        let mut archive = Vec::new();
        for (role, rel) in &inbox_files.files {
            let path = inbox_path(v, rel)?.to_string();
            let (bytes, hash) = files
                .read(Zone::Inbox, &path)?
                .ok_or_else(|| tampered(&format!("the proposal's {role} file is missing from the inbox")))?;
            match *role {
                "meta" => {
                    let on_disk: Value = serde_json::from_slice(&bytes)
                        .map_err(|_| tampered("the metadata file is not JSON"))?;
                    if &on_disk != stored_meta {
                        return Err(tampered(
                            "the metadata file in the inbox differs from the recorded proposal",
                        ));
                    }
                }
                "content" => content = Some(bytes),
                _ => {}
            }
            let to = inbox_path(v, &InboxFiles::archived(rel, "applied", &date))?.to_string();
            archive.push((path, to, hash));
        }
        Ok((content, archive))
    }
}

/// The first answer to a key used again, marked as replayed.
fn first_apply(result: serde_json::Value) -> Result<ApplyOut, GatewayError> {
    let mut out: ApplyOut = serde_json::from_value(result).map_err(internal)?;
    out.replayed = true;
    Ok(out)
}
