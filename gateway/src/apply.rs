//! The apply transaction of SPEC §6 — the only code path that writes notes.
//!
//! Under the vault's exclusive write lock (shared by every process): look up the idempotency key,
//! check the proposal (checks 1–6 in SPEC order, nothing written on any refusal), record an intent
//! with the whole plan, store before/after blobs, write the notes atomically, archive the proposal
//! files, append `_applied.jsonl`, make the audit line durable, then commit in one SQLite
//! transaction (applied + revision + history + intent removed). Every step after the intent is
//! idempotent, so an interrupted apply is rolled forward by `recover` at the next start or apply.

use std::sync::Arc;

use policy::{ErrorCode, VaultPath};
use proposals::{Kind, Proposal};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use vault::write::{Area, WriteMode};

use crate::core::{Actor, Core, VaultHandle, rfc3339};
use crate::error::GatewayError;
use crate::proposing::{
    InboxFiles, already_applied, current, inbox_path, proposal_not_found, rejected, today,
};
use crate::tools::ApplyOut;

/// One file operation of a plan. Hashes make each one idempotent: a file already at `after` is done.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub(crate) enum Op {
    /// Write `after` (a blob in `.vaultgate/objects`) over `before` (`None`: must not exist).
    Write {
        path: String,
        before: Option<String>,
        after: String,
    },
    /// Move the file (at `before`) to the vault trash.
    Trash {
        path: String,
        before: String,
        to: String,
    },
    /// Remove the file (at `before`): the source of a move, after its copy is written.
    Remove { path: String, before: String },
}

/// Everything needed to finish an apply, stored in the intent record before anything is written.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Plan {
    proposal_id: String,
    slug: String,
    kind: Kind,
    target: String,
    proposal_hash: String,
    history_id: String,
    ops: Vec<Op>,
    /// (from, to) under the inbox folder.
    archive: Vec<(String, String)>,
    actor: String,
    started_at: String,
    /// The result the caller gets (and an idempotent retry gets again).
    result: ApplyOut,
    audit: AuditPlan,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AuditPlan {
    actor: audit::Actor,
    args_hash: String,
    idempotency: Option<(String, String)>,
}

/// Test-only crash injection: `VAULTGATE_TEST_FAILPOINT=<step>` aborts the process at that step,
/// as a power cut or `kill -9` would (no destructors, no flushing).
pub(crate) fn failpoint(step: &str) {
    if std::env::var("VAULTGATE_TEST_FAILPOINT").is_ok_and(|s| s == step) {
        tracing::warn!(step, "failpoint: aborting");
        std::process::abort();
    }
}

fn object_path(hash: &str) -> Result<VaultPath, GatewayError> {
    Ok(VaultPath::parse(&format!(
        ".vaultgate/objects/{}/{hash}",
        hash.get(..2).unwrap_or("00")
    ))?)
}

fn internal(e: impl std::fmt::Display) -> GatewayError {
    GatewayError::Internal(e.to_string())
}

fn refusal(code: ErrorCode, msg: impl Into<String>) -> GatewayError {
    GatewayError::Proposal(code, msg.into())
}

impl Core {
    /// `apply_proposal` for MCP callers and the CLI alike.
    pub fn apply_proposal(
        &self,
        actor: &Actor,
        v: &Arc<VaultHandle>,
        id: &str,
        given_hash: &str,
        idempotency_key: &str,
        args_hash: &str,
    ) -> Result<ApplyOut, GatewayError> {
        if idempotency_key.trim().is_empty() {
            return Err(GatewayError::InvalidArgument(
                "idempotencyKey must not be empty".into(),
            ));
        }
        let principal = actor.principal_id();
        // SECURITY(T-PROP3): the same key with the same arguments answers with the first result and
        // does nothing; other arguments under a used key are refused.
        if let Some(rec) = self.state.idempotency_get(&principal, idempotency_key)? {
            return replay(rec, args_hash);
        }
        let fs = v.reader.fs();
        // SECURITY(T-PROP4): one writer per vault across every process (server, CLI).
        let _lock = fs.write_lock()?;
        // Another process may have finished the same key while we waited for the lock.
        if let Some(rec) = self.state.idempotency_get(&principal, idempotency_key)? {
            return replay(rec, args_hash);
        }
        self.recover(v)?;

        // 1. exists for this vault and pending
        let row = self
            .state
            .proposal(&v.id, id)?
            .ok_or_else(|| proposal_not_found(id))?;
        match row.status {
            inbox::ProposalStatus::Applied => return Err(already_applied(&row.id)),
            inbox::ProposalStatus::Rejected => return Err(rejected(&row.id)),
            inbox::ProposalStatus::Pending => {}
        }
        // 2. the tier may apply this proposal (own or anyone's)
        self.authorize_decision(actor, &row.created_by)?;
        let p: Proposal = serde_json::from_value(row.meta.clone()).map_err(internal)?;
        // 3.–4. hash, files, signature, content
        if given_hash != p.proposal_hash {
            return Err(refusal(
                ErrorCode::PROPOSAL_HASH_MISMATCH,
                "proposalHash does not match this proposal; use the one propose_* or get_proposal returned",
            ));
        }
        let files = InboxFiles::of(p.kind, &p.slug);
        let content = self.check_files(v, &p, &row.meta, &files)?;
        // 5.–6. targets, under the lock, without following links
        let mut ops = Vec::new();
        let mut history_paths = Vec::new();
        let target = VaultPath::parse(&p.target)?;
        v.reader.layout().check_write_target(&target)?;
        let base = p.base_hash.clone();
        match p.kind {
            Kind::New => {
                if current(v, &target)?.is_some() || fs.find_collision(&target)?.is_some() {
                    return Err(crate::proposing::exists(&target));
                }
                let (bytes, after) = content.ok_or_else(|| tampered("content file missing"))?;
                self.store_object(v, &after, &bytes)?;
                history_paths.push(serde_json::json!({"path": p.target, "before": null, "after": after}));
                ops.push(Op::Write {
                    path: p.target.clone(),
                    before: None,
                    after,
                });
            }
            Kind::Patch => {
                let (old, now) = current(v, &target)?.ok_or_else(|| stale_missing(&target))?;
                expect_base(&target, base.as_deref(), &now)?;
                let (bytes, after) = content.ok_or_else(|| tampered("content file missing"))?;
                self.store_object(v, &now, &old)?;
                self.store_object(v, &after, &bytes)?;
                history_paths.push(serde_json::json!({"path": p.target, "before": now, "after": after}));
                ops.push(Op::Write {
                    path: p.target.clone(),
                    before: Some(now),
                    after,
                });
            }
            Kind::Delete => {
                let (old, now) = current(v, &target)?.ok_or_else(|| stale_missing(&target))?;
                expect_base(&target, base.as_deref(), &now)?;
                self.store_object(v, &now, &old)?;
                let to = fs.trash_path(&target, &p.id)?;
                history_paths
                    .push(serde_json::json!({"path": p.target, "before": now, "after": null, "trash": to}));
                ops.push(Op::Trash {
                    path: p.target.clone(),
                    before: now,
                    to: to.to_string(),
                });
            }
            Kind::Move => {
                let from_s = p.from.clone().ok_or_else(|| tampered("a move without `from`"))?;
                let from = VaultPath::parse(&from_s)?;
                v.reader.layout().check_write_target(&from)?;
                let (old, now) = current(v, &from)?.ok_or_else(|| stale_missing(&from))?;
                expect_base(&from, base.as_deref(), &now)?;
                if current(v, &target)?.is_some() || fs.find_collision(&target)?.is_some_and(|c| c != from) {
                    return Err(crate::proposing::exists(&target));
                }
                self.store_object(v, &now, &old)?;
                let rewrites = v.reader.plan_move(&from, &target)?;
                // A note that links to itself moves with its own links rewritten.
                let mut moved = old.clone();
                for r in &rewrites {
                    if r.path == from {
                        moved = r.new_text.clone().into_bytes();
                    }
                }
                let moved_hash = proposals::sha256_hex(&moved);
                self.store_object(v, &moved_hash, &moved)?;
                history_paths
                    .push(serde_json::json!({"path": p.target, "before": null, "after": moved_hash}));
                ops.push(Op::Write {
                    path: p.target.clone(),
                    before: None,
                    after: moved_hash,
                });
                for r in rewrites.iter().filter(|r| r.path != from) {
                    let (cur, cur_hash) = current(v, &r.path)?.ok_or_else(|| stale_missing(&r.path))?;
                    let after = proposals::sha256_hex(r.new_text.as_bytes());
                    self.store_object(v, &cur_hash, &cur)?;
                    self.store_object(v, &after, r.new_text.as_bytes())?;
                    history_paths
                        .push(serde_json::json!({"path": r.path, "before": cur_hash, "after": after}));
                    ops.push(Op::Write {
                        path: r.path.to_string(),
                        before: Some(cur_hash),
                        after,
                    });
                }
                history_paths.push(serde_json::json!({"path": from_s, "before": now, "after": null}));
                ops.push(Op::Remove {
                    path: from_s,
                    before: now,
                });
            }
        }
        let now = time::OffsetDateTime::now_utc();
        let date = today(now);
        let archive: Vec<(String, String)> = files
            .files
            .iter()
            .map(|(_, rel)| (rel.clone(), InboxFiles::archived(rel, "applied", &date)))
            .collect();
        let archived_to =
            inbox_path(v, &archive.last().map(|a| a.1.clone()).unwrap_or_default())?.to_string();
        let history_id = format!("h_{}", uuid::Uuid::now_v7().simple());
        let plan = Plan {
            proposal_id: p.id.clone(),
            slug: p.slug.clone(),
            kind: p.kind,
            target: p.target.clone(),
            proposal_hash: p.proposal_hash.clone(),
            history_id: history_id.clone(),
            ops,
            archive,
            actor: actor.label(),
            started_at: rfc3339(now),
            result: ApplyOut {
                applied: true,
                target: p.target.clone(),
                history_entry_id: history_id,
                archived_to,
                audit_seq: 0,
                index: "updated".into(),
                replayed: false,
            },
            audit: AuditPlan {
                actor: actor.audit_actor(),
                args_hash: args_hash.to_owned(),
                idempotency: Some((principal, idempotency_key.to_owned())),
            },
        };
        let plan_json = serde_json::to_value(&plan).map_err(internal)?;
        let intent = self.state.begin_intent(&v.id, &p.id, &plan_json, &rfc3339(now))?;
        failpoint("after_intent");
        let history_paths = Value::Array(history_paths);
        self.roll_forward(v, intent, plan, Some(history_paths), false)
    }

    /// SECURITY(T-PROP1): verifies that the inbox files are where they should be, that the metadata file equals the
    /// stored metadata, that the signature verifies and the content hashes to `contentHash`.
    /// Returns the content bytes and their hash for new notes and patches.
    fn check_files(
        &self,
        v: &VaultHandle,
        p: &Proposal,
        stored_meta: &Value,
        files: &InboxFiles,
    ) -> Result<Option<(Vec<u8>, String)>, GatewayError> {
        match proposals::verify(self.secret().bytes(), p) {
            proposals::Verdict::Ok => {}
            proposals::Verdict::HashMismatch => {
                return Err(tampered(
                    "the stored metadata no longer hashes to its proposalHash",
                ));
            }
            proposals::Verdict::BadSignature => {
                return Err(tampered("the metadata signature does not verify"));
            }
        }
        let fs = v.reader.fs();
        let meta_rel = files.get("meta").ok_or_else(|| internal("no metadata file"))?;
        let (meta_bytes, _) = fs
            .read_for_write(Area::Inbox, &inbox_path(v, meta_rel)?)?
            .ok_or_else(|| tampered("the proposal's metadata file is missing from the inbox"))?;
        let on_disk: Value =
            serde_json::from_slice(&meta_bytes).map_err(|_| tampered("the metadata file is not JSON"))?;
        if &on_disk != stored_meta {
            return Err(tampered(
                "the metadata file in the inbox differs from the recorded proposal",
            ));
        }
        // Every file of the proposal must still be in the inbox (the diff is informational, but a
        // missing one means someone has been rearranging the inbox).
        for (role, rel) in &files.files {
            if *role != "meta" && fs.read_for_write(Area::Inbox, &inbox_path(v, rel)?)?.is_none() {
                return Err(tampered(&format!(
                    "the proposal's {role} file is missing from the inbox"
                )));
            }
        }
        let Some(rel) = files.get("content") else {
            return Ok(None);
        };
        let (bytes, hash) = fs
            .read_for_write(Area::Inbox, &inbox_path(v, rel)?)?
            .ok_or_else(|| tampered("the proposal's content file is missing from the inbox"))?;
        if p.content_hash.as_deref() != Some(hash.as_str()) {
            return Err(tampered("the content file no longer hashes to contentHash"));
        }
        Ok(Some((bytes, hash)))
    }

    pub(crate) fn store_object(&self, v: &VaultHandle, hash: &str, bytes: &[u8]) -> Result<(), GatewayError> {
        let path = object_path(hash)?;
        match v
            .reader
            .fs()
            .write_atomic(Area::Machine, &path, bytes, WriteMode::Exclusive)
        {
            Ok(()) => Ok(()),
            Err(e) if is_exists(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    pub(crate) fn object(&self, v: &VaultHandle, hash: &str) -> Result<Vec<u8>, GatewayError> {
        let (bytes, got) = v
            .reader
            .fs()
            .read_for_write(Area::Machine, &object_path(hash)?)?
            .ok_or_else(|| internal(format!("history object {hash} is missing")))?;
        if got != hash {
            return Err(internal(format!("history object {hash} is corrupt")));
        }
        Ok(bytes)
    }

    /// SECURITY(T-PROP5): finishes an apply from its intent; every step checks whether it already
    /// happened, so a crash at any point is rolled forward exactly once.
    fn roll_forward(
        &self,
        v: &Arc<VaultHandle>,
        intent: i64,
        mut plan: Plan,
        history_paths: Option<Value>,
        recovering: bool,
    ) -> Result<ApplyOut, GatewayError> {
        let fs = v.reader.fs();
        for op in &plan.ops {
            self.run_op(v, op)?;
        }
        failpoint("after_write");
        for (from, to) in &plan.archive {
            let (from, to) = (inbox_path(v, from)?, inbox_path(v, to)?);
            let src = fs.read_for_write(Area::Inbox, &from)?;
            if src.is_some() {
                match fs.rename(Area::Inbox, &from, Area::Inbox, &to) {
                    Ok(()) => {}
                    Err(e) if is_exists(&e) => fs.remove_file(Area::Inbox, &from)?,
                    Err(e) => return Err(e.into()),
                }
            }
        }
        failpoint("after_archive");
        self.append_applied_line(v, &plan)?;
        failpoint("after_applied_log");
        let entry = audit::Entry {
            event: if recovering {
                "apply.recovered".into()
            } else {
                "tool_call".into()
            },
            actor: plan.audit.actor.clone(),
            vault: Some(v.id.clone()),
            tool: Some("apply_proposal".into()),
            target: Some(plan.target.clone()),
            proposal_id: Some(plan.proposal_id.clone()),
            challenge_id: None,
            outcome: audit::Outcome::Ok,
            code: None,
            args_hash: Some(plan.audit.args_hash.clone()),
        };
        let rec = self
            .audit
            .append(entry, time::OffsetDateTime::now_utc(), audit::Durability::Sync)?;
        plan.result.audit_seq = rec.seq;
        failpoint("after_audit");
        let history = history_paths.unwrap_or_else(|| {
            Value::Array(
                plan.ops
                    .iter()
                    .map(|o| serde_json::to_value(o).unwrap_or(Value::Null))
                    .collect(),
            )
        });
        let result_json = serde_json::to_value(&plan.result).map_err(internal)?;
        let at = rfc3339(time::OffsetDateTime::now_utc());
        // The notes are final once the ops ran (archiving touches only the inbox): one walk serves
        // the commit's fingerprint and the index update after it.
        let files = v.reader.catalog_files();
        let fingerprint = crate::changes::fingerprint_of(&files);
        let label = format!("{} {}", plan.kind.as_str(), plan.target);
        let idem = plan
            .audit
            .idempotency
            .as_ref()
            .map(|(principal, key)| inbox::IdemKey {
                credential_id: principal,
                key,
                tool: "apply_proposal",
                args_hash: &plan.audit.args_hash,
            });
        let committed = self
            .state
            .finish_apply(
                intent,
                &plan.proposal_id,
                &plan.actor,
                &at,
                &result_json,
                Some(&inbox::NewHistory {
                    id: &plan.history_id,
                    label: &label,
                    kind: plan.kind.as_str(),
                    created_by: &plan.actor,
                    created_at: &at,
                    paths: &history,
                    barrier: false,
                }),
                idem.as_ref(),
                Some(&fingerprint),
            )?
            .ok_or_else(|| {
                // Decided (rejected) by someone else while this apply was interrupted: the intent
                // stays for a person; the files it wrote are listed in its plan.
                internal(format!(
                    "proposal {} was decided while its apply was interrupted",
                    plan.proposal_id
                ))
            })?;
        failpoint("after_commit");
        // The notes changed through vaultgate: the revision moved in the commit; record the new
        // fingerprint so the watcher does not count the same change again, and announce it.
        self.settle_after_write_with(v, committed.revision, files);
        Ok(plan.result)
    }

    pub(crate) fn run_op(&self, v: &VaultHandle, op: &Op) -> Result<(), GatewayError> {
        let fs = v.reader.fs();
        match op {
            Op::Write { path, before, after } => {
                let p = VaultPath::parse(path)?;
                let now = current(v, &p)?.map(|(_, h)| h);
                if now.as_deref() == Some(after.as_str()) {
                    return Ok(());
                }
                if now != *before {
                    return Err(stale_during_apply(&p));
                }
                let bytes = self.object(v, after)?;
                let mode = if before.is_none() {
                    WriteMode::Exclusive
                } else {
                    WriteMode::Replace
                };
                fs.write_atomic(Area::Note, &p, &bytes, mode)?;
            }
            Op::Trash { path, before, to } => {
                let p = VaultPath::parse(path)?;
                let to = VaultPath::parse(to)?;
                match current(v, &p)?.map(|(_, h)| h) {
                    Some(h) if h == *before => fs.rename(Area::Note, &p, Area::Machine, &to)?,
                    Some(_) => return Err(stale_during_apply(&p)),
                    None => {
                        if fs.read_for_write(Area::Machine, &to)?.is_none() {
                            return Err(stale_during_apply(&p));
                        }
                    }
                }
            }
            Op::Remove { path, before } => {
                let p = VaultPath::parse(path)?;
                match current(v, &p)?.map(|(_, h)| h) {
                    Some(h) if h == *before => fs.remove_file(Area::Note, &p)?,
                    Some(_) => return Err(stale_during_apply(&p)),
                    None => {}
                }
            }
        }
        Ok(())
    }

    /// Appends one hash-chained line to `<inbox>/_applied.jsonl` unless this proposal is already in it.
    fn append_applied_line(&self, v: &VaultHandle, plan: &Plan) -> Result<(), GatewayError> {
        let path = inbox_path(v, "_applied.jsonl")?;
        let fs = v.reader.fs();
        let existing = fs
            .read_for_write(Area::Inbox, &path)?
            .map(|(b, _)| b)
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&existing);
        let mut last: Option<proposals::AppliedLine> = None;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let parsed: proposals::AppliedLine =
                serde_json::from_str(line).map_err(|e| internal(format!("{path}: {e}")))?;
            if parsed.id == plan.proposal_id {
                return Ok(());
            }
            last = Some(parsed);
        }
        let line = proposals::chain_applied(
            last.as_ref(),
            plan.proposal_id.clone(),
            plan.slug.clone(),
            plan.kind,
            plan.target.clone(),
            plan.proposal_hash.clone(),
            plan.actor.clone(),
            rfc3339(time::OffsetDateTime::now_utc()),
        );
        let mut out = existing;
        if !out.is_empty() && !out.ends_with(b"\n") {
            out.push(b'\n');
        }
        out.extend_from_slice(serde_json::to_string(&line).map_err(internal)?.as_bytes());
        out.push(b'\n');
        fs.write_atomic(Area::Inbox, &path, &out, WriteMode::Replace)?;
        Ok(())
    }

    /// At start: finishes applies a crash interrupted, in every vault (each under its lock).
    pub fn recover_all(&self) {
        for v in self.all_vaults() {
            let has_intents = self
                .state
                .open_intents(&v.id)
                .map(|i| !i.is_empty())
                .unwrap_or(false);
            if !has_intents {
                continue;
            }
            let result = v
                .reader
                .fs()
                .write_lock()
                .map_err(GatewayError::from)
                .and_then(|_lock| self.recover(&v));
            if let Err(e) = result {
                tracing::error!(vault = %v.id, error = %e, "recovering interrupted applies failed");
            }
        }
    }

    /// Finishes every apply of this vault that a crash interrupted (called under the write lock).
    pub fn recover(&self, v: &Arc<VaultHandle>) -> Result<(), GatewayError> {
        for intent in self.state.open_intents(&v.id)? {
            // Other writers' intents (`history:…`, `critical:…`) are keyed by a prefix; proposal
            // ids (UUIDs) never contain ':'.
            if intent.proposal_id.contains(':') {
                continue;
            }
            let plan: Plan = match serde_json::from_value(intent.plan.clone()) {
                Ok(p) => p,
                Err(e) => {
                    tracing::error!(intent = intent.id, error = %e, "unreadable apply intent left in place");
                    continue;
                }
            };
            tracing::warn!(proposal = %plan.proposal_id, "finishing an interrupted apply");
            match self.roll_forward(v, intent.id, plan, None, true) {
                Ok(_) => {}
                Err(e) => {
                    // Files changed outside vaultgate while it was down: leave the intent for a person.
                    tracing::error!(intent = intent.id, error = %e, "cannot finish an interrupted apply");
                    return Err(e);
                }
            }
        }
        // An interrupted undo/redo or critical call is settled before any new write too.
        self.recover_critical(v)?;
        self.recover_history(v)
    }
}

fn replay(rec: inbox::IdemRecord, args_hash: &str) -> Result<ApplyOut, GatewayError> {
    if rec.tool != "apply_proposal" || rec.args_hash != args_hash {
        return Err(refusal(
            ErrorCode::IDEMPOTENCY_CONFLICT,
            "this idempotencyKey was used with other arguments; use a new key for a new apply",
        ));
    }
    let mut out: ApplyOut = serde_json::from_value(rec.result).map_err(internal)?;
    out.replayed = true;
    Ok(out)
}

fn tampered(what: &str) -> GatewayError {
    refusal(
        ErrorCode::PROPOSAL_TAMPERED,
        format!("{what}; the proposal cannot be applied, propose again"),
    )
}

fn stale_missing(p: &VaultPath) -> GatewayError {
    refusal(
        ErrorCode::PROPOSAL_STALE_BASE,
        format!("{p} no longer exists; read the vault again and re-propose"),
    )
}

fn stale_during_apply(p: &VaultPath) -> GatewayError {
    refusal(
        ErrorCode::PROPOSAL_STALE_BASE,
        format!("{p} changed while the apply was interrupted; re-propose"),
    )
}

// SECURITY(T-PROP2): a proposal applies only to the exact bytes it was made against.
fn expect_base(p: &VaultPath, base: Option<&str>, now: &str) -> Result<(), GatewayError> {
    if base == Some(now) {
        Ok(())
    } else {
        Err(refusal(
            ErrorCode::PROPOSAL_STALE_BASE,
            format!("{p} changed since the proposal was made; read_note it again and re-propose"),
        ))
    }
}

pub(crate) fn is_exists(e: &vault::write::WriteError) -> bool {
    matches!(e, vault::write::WriteError::Exists(_))
}
