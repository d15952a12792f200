//! One call and its one audit record.
//!
//! Every operation an edge can start runs inside a [`Call`]: [`crate::Core::call`] for MCP tools,
//! [`crate::Core::cli_call`] for the CLI. The call learns on the way what its record names (the
//! vault it resolved to, the proposal or challenge), and either a transaction writes the record
//! itself — inside the transaction, before its commit (docs/contract.md#proposals, docs/contract.md#the-audit-log) — or [`Call::finish`] writes it
//! at the end. The answer leaves as [`Audited`], which only this module builds: nothing can answer
//! without its record, and nothing can write a second one for the same call.

use std::sync::Arc;

use audit::{Durability, Entry, Outcome};
use serde_json::Value;

use crate::core::{Actor, Caller, Core, VaultHandle, outcome_for, to_value};
use crate::error::GatewayError;

/// An answer whose audit record has been written (or, for a failed append, an `AUDIT_UNAVAILABLE`
/// refusal). Built only by the engine.
#[derive(Debug)]
pub struct Audited<T> {
    value: T,
    seq: Option<u64>,
}

impl<T> Audited<T> {
    pub fn into_inner(self) -> T {
        self.value
    }

    pub fn value(&self) -> &T {
        &self.value
    }

    /// The `seq` of the call's record (`None` when it could not be written).
    pub fn seq(&self) -> Option<u64> {
        self.seq
    }
    /// The outcome of a call another gateway of the team ran and recorded (as record `seq`
    /// of the team's chain): docs/contract.md#team-lease "One applier at a time".
    pub fn relayed(value: T, seq: u64) -> Audited<T> {
        Audited {
            value,
            seq: Some(seq),
        }
    }
}

/// What a transaction puts in the record it writes for its call.
#[derive(Debug, Clone)]
pub(crate) struct TxnRecord {
    /// `None`: the call's own event (`tool_call` / `cli`).
    pub event: Option<String>,
    pub outcome: Outcome,
    pub code: Option<String>,
    pub target: Option<String>,
    pub proposal_id: Option<String>,
    pub challenge_id: Option<String>,
    /// `"client"`: the change was approved in the caller's client (docs/contract.md#the-review-page-and-in-client-approval).
    pub approval: Option<String>,
}

impl TxnRecord {
    /// A change that succeeded, as the call's own event (`event`: another event, such as an
    /// intent's), naming its target and proposal.
    pub(crate) fn ok(event: Option<&str>, target: Option<&str>, proposal_id: Option<&str>) -> TxnRecord {
        TxnRecord {
            event: event.map(str::to_owned),
            outcome: Outcome::Ok,
            code: None,
            target: target.map(str::to_owned),
            proposal_id: proposal_id.map(str::to_owned),
            challenge_id: None,
            approval: None,
        }
    }
}

/// One call in progress.
pub struct Call<'a> {
    core: &'a Core,
    actor: Actor,
    tool: &'static str,
    args: &'a Value,
    event: &'static str,
    vault: Option<String>,
    recorded: Option<u64>,
    /// The call ran without [`Core::audit_preflight`] (a read): its record checks the free space
    /// itself, and without room the answer is refused.
    reserve: bool,
    /// A write's place in its vault's group (crate::group), which holds the vault's lease.
    member: Option<std::sync::Arc<crate::group::Member>>,
    /// The group commits its members together (else the write runs alone and syncs as it goes).
    shared: bool,
    /// A person's answer was used for this call (once): it is not a job (crate::jobs).
    person_answered: std::cell::Cell<bool>,
    /// The gateway of the team that received the call, when another one handed it here
    /// (docs/contract.md#team-lease "One applier at a time"): its commit names that one.
    received_by: Option<String>,
}

impl<'a> Call<'a> {
    pub(crate) fn new(
        core: &'a Core,
        actor: Actor,
        tool: &'static str,
        args: &'a Value,
        event: &'static str,
    ) -> Call<'a> {
        Call {
            core,
            actor,
            tool,
            args,
            event,
            vault: None,
            recorded: None,
            reserve: false,
            member: None,
            shared: false,
            person_answered: std::cell::Cell::new(false),
            received_by: None,
        }
    }

    /// Notes the gateway that received this call, which handed it here.
    pub(crate) fn handed_by(&mut self, received_by: Option<&str>) {
        self.received_by = received_by.map(str::to_owned);
    }

    /// The gateway that received this call when another gateway of the team handed it here.
    pub(crate) fn received_by(&self) -> Option<&str> {
        self.received_by.as_deref()
    }

    /// Notes that a person's answer was used for this call.
    pub(crate) fn note_person_answered(&self) {
        self.person_answered.set(true);
    }

    pub(crate) fn person_answered(&self) -> bool {
        self.person_answered.get()
    }

    /// The group commit this write shares, if any.
    pub(crate) fn member(&self) -> Option<std::sync::Arc<crate::group::Member>> {
        self.member.clone().filter(|_| self.shared)
    }

    /// The epoch of the lease this write holds (0 outside a write).
    pub(crate) fn lease_epoch(&self) -> u64 {
        self.member.as_ref().map_or(0, |m| m.epoch())
    }

    pub(crate) fn set_member(&mut self, member: Option<std::sync::Arc<crate::group::Member>>, shared: bool) {
        self.member = member;
        self.shared = shared;
    }

    /// Marks a call that skipped [`Core::audit_preflight`]: its record makes the check instead.
    pub(crate) fn check_space_at_record(&mut self) {
        self.reserve = true;
    }

    pub fn actor(&self) -> &Actor {
        &self.actor
    }

    pub fn args(&self) -> &'a Value {
        self.args
    }

    /// The call's own audit event (`tool_call`, `cli`).
    pub fn event(&self) -> &'static str {
        self.event
    }

    pub fn tool(&self) -> &'static str {
        self.tool
    }

    /// The hash of the arguments as sent (idempotency and the audit record).
    pub fn args_hash(&self) -> String {
        audit::args_hash(self.args)
    }

    /// Resolves the vault the call acts on (docs/contract.md#the-mcp-surface) and remembers it for the record.
    pub fn vault(&mut self, requested: Option<&str>) -> Result<Arc<VaultHandle>, GatewayError> {
        if let Some(id) = requested {
            self.vault = Some(id.to_owned());
        }
        let v = match &self.actor {
            Actor::Caller(c) => self.core.resolve_vault(&c.credential, requested)?,
            Actor::Operator(_) => self.core.vault_for_cli(requested)?,
        };
        self.vault = Some(v.id.clone());
        Ok(v)
    }

    /// Names the vault for the record without resolving it (the CLI already holds the handle).
    pub fn set_vault(&mut self, id: &str) {
        self.vault = Some(id.to_owned());
    }

    pub(crate) fn recorded(&self) -> bool {
        self.recorded.is_some()
    }

    fn entry(&self, event: String, outcome: Outcome, code: Option<String>) -> Entry {
        Entry {
            event,
            actor: self.actor.audit_actor(),
            vault: self
                .vault
                .clone()
                .or_else(|| self.args.get("vault").and_then(Value::as_str).map(str::to_owned)),
            tool: Some(self.tool.to_owned()),
            target: self
                .args
                .get("path")
                .or_else(|| self.args.get("to"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            proposal_id: self.args.get("id").and_then(Value::as_str).map(str::to_owned),
            challenge_id: self
                .args
                .get("challengeId")
                .and_then(Value::as_str)
                .map(str::to_owned),
            outcome,
            code,
            args_hash: Some(audit::args_hash(self.args)),
            count: None,
            approval: None,
            gateway: None,
        }
    }

    /// The record a transaction writes for this call, durable before its commit. At most once
    /// per call: a second attempt is an internal error, never a second record.
    pub(crate) fn record_txn(&mut self, r: TxnRecord) -> Result<u64, GatewayError> {
        self.record_txn_head(r).map(|h| h.seq)
    }

    /// As [`Call::record_txn`], with the line's hash (a git commit names it, docs/contract.md#git-history).
    pub(crate) fn record_txn_head(&mut self, r: TxnRecord) -> Result<inbox::AuditHead, GatewayError> {
        let head = self.record_head(r)?;
        self.core.note_head(&head);
        Ok(head)
    }

    /// As [`Call::record_txn`], for a change committed in one state transaction with its record
    /// (which stores the returned head itself).
    pub(crate) fn record_head(&mut self, r: TxnRecord) -> Result<inbox::AuditHead, GatewayError> {
        self.record_head_as(r, Durability::Sync)
    }

    /// [`Call::record_head`]; with [`Durability::Flush`] the caller syncs the log (a group commit).
    pub(crate) fn record_head_as(
        &mut self,
        r: TxnRecord,
        durability: Durability,
    ) -> Result<inbox::AuditHead, GatewayError> {
        if self.recorded.is_some() {
            return Err(GatewayError::Internal(format!(
                "{} tried to write a second audit record",
                self.tool
            )));
        }
        let entry = self.entry_for(r);
        let head = self.core.append_audit_record(entry, durability)?;
        self.recorded = Some(head.seq);
        Ok(head)
    }

    /// The record of this call as `r` describes it, for a store that seals it in the commit of
    /// the change itself (a team's database); nothing is written here.
    pub(crate) fn entry_for(&self, r: TxnRecord) -> Entry {
        let mut entry = self.entry(
            r.event.unwrap_or_else(|| self.event.to_owned()),
            r.outcome,
            r.code,
        );
        if r.target.is_some() {
            entry.target = r.target;
        }
        if r.proposal_id.is_some() {
            entry.proposal_id = r.proposal_id;
        }
        if r.challenge_id.is_some() {
            entry.challenge_id = r.challenge_id;
        }
        entry.approval = r.approval;
        entry
    }

    /// The call's record, sealed by `commit` together with its change (`None`: the change did
    /// not commit, and the call's own record is written when it ends). At most once per call.
    pub(crate) fn record_in(
        &mut self,
        r: TxnRecord,
        commit: impl FnOnce(Entry) -> Result<Option<audit::AuditRecord>, GatewayError>,
    ) -> Result<Option<audit::AuditRecord>, GatewayError> {
        if self.recorded.is_some() {
            return Err(GatewayError::Internal(format!(
                "{} tried to write a second audit record",
                self.tool
            )));
        }
        let done = commit(self.entry_for(r))?;
        if let Some(rec) = &done {
            self.recorded = Some(rec.seq);
        }
        Ok(done)
    }

    /// Ends the call: writes its record unless a transaction did, and answers.
    pub(crate) fn finish<T>(
        self,
        result: Result<T, GatewayError>,
        durability: Durability,
    ) -> Audited<Result<T, GatewayError>>
    where
        T: ResultIds,
    {
        if let Some(seq) = self.recorded {
            return Audited {
                value: result,
                seq: Some(seq),
            };
        }
        let (event, outcome, code) = match &result {
            Ok(_) => (self.event, Outcome::Ok, None),
            // The question went to the person; the retry carrying the answer is its own call.
            Err(GatewayError::ApprovalAsked(_)) => ("approval.asked", Outcome::Ok, None),
            Err(e) => (self.event, outcome_for(e), Some(e.code().as_str().to_owned())),
        };
        let mut entry = self.entry(event.to_owned(), outcome, code);
        if let Ok(v) = &result {
            if let Some(id) = v.proposal_id() {
                entry.proposal_id = Some(id);
            }
            if entry.challenge_id.is_none() {
                entry.challenge_id = v.challenge_id();
            }
        }
        let appended = if self.reserve {
            self.core.append_audit_reserving(entry, durability)
        } else {
            self.core.append_audit(entry, durability)
        };
        match appended {
            Ok(seq) => Audited {
                value: result,
                seq: Some(seq),
            },
            // SECURITY(T-AUDIT4): the log fails closed: no record, no answer.
            Err(e) => {
                tracing::error!(tool = self.tool, error = %e, "audit append failed; the call is refused");
                Audited {
                    value: Err(GatewayError::AuditUnavailable),
                    seq: None,
                }
            }
        }
    }
}

/// Ids an answer contributes to its record (a new proposal's id, an issued challenge's id).
pub trait ResultIds {
    fn proposal_id(&self) -> Option<String> {
        None
    }
    fn challenge_id(&self) -> Option<String> {
        None
    }
}

impl ResultIds for Value {
    fn proposal_id(&self) -> Option<String> {
        // `propose_*` answers with the new proposal's id; other answers carry no `id` field.
        self.get("id")
            .and_then(Value::as_str)
            .filter(|_| self.get("proposalHash").is_some())
            .map(str::to_owned)
    }

    fn challenge_id(&self) -> Option<String> {
        self.pointer("/challenge/challengeId")
            .and_then(Value::as_str)
            .map(str::to_owned)
    }
}

macro_rules! no_ids {
    ($($t:ty),*) => { $(impl ResultIds for $t {})* };
}
no_ids!(
    (),
    crate::changelog::GitStatus,
    bool,
    String,
    u64,
    crate::api::ApplyOut,
    crate::api::RejectOut,
    crate::history::HistoryStatusOut,
    inbox::Credential
);

impl<T: ResultIds> ResultIds for Option<T> {
    fn proposal_id(&self) -> Option<String> {
        self.as_ref().and_then(ResultIds::proposal_id)
    }
    fn challenge_id(&self) -> Option<String> {
        self.as_ref().and_then(ResultIds::challenge_id)
    }
}

/// [`Core::call`] and [`Core::call_handed`]: the capability check of the tool table, then `op`,
/// then exactly one audit record; `received_by`: the gateway of the team that received the call
/// and handed it to this one.
pub(crate) fn tool_call<T: serde::Serialize>(
    core: &Core,
    received_by: Option<&str>,
    caller: &Caller,
    spec: &'static policy::tools::ToolSpec,
    args: &Value,
    op: impl FnOnce(&mut Call<'_>) -> Result<T, GatewayError>,
) -> Audited<Result<Value, GatewayError>> {
    // The configuration was brought up to date when the caller was authenticated (a call
    // may run on an async worker, which must not open vaults).
    // Bounds first (docs/contract.md#limits-and-pagination): an argument over a limit is refused, and recorded, before
    // anything else runs.
    if let Err(e) = crate::limits::check_args(spec.name, args, &core.config().limits) {
        return Call::new(core, Actor::Caller(caller.clone()), spec.name, args, "tool_call")
            .finish(Err(e), Durability::Sync);
    }
    let mut call = Call::new(core, Actor::Caller(caller.clone()), spec.name, args, "tool_call");
    call.handed_by(received_by);
    // docs/contract.md#proposals: a tier that cannot apply at all is refused before any state is read, unless
    // a person's approval in the client may lift it one step (docs/contract.md#the-review-page-and-in-client-approval).
    let result = if spec.allowed_for(caller.credential.tier, caller.credential.approve_in_client) {
        // Reads too: a line written into the last free bytes could be cut short, so every
        // call is refused while the log's disk is (almost) full, not only the unlucky one. A
        // read changes nothing, so its record makes the check (one lock, not two).
        if spec.is_mutating() {
            core.audit_preflight()
                .and_then(|()| op(&mut call))
                .and_then(to_value)
        } else {
            call.check_space_at_record();
            op(&mut call).and_then(to_value)
        }
    } else {
        Err(GatewayError::CapabilityDenied(format!(
            "the '{}' tier may not call {}; ask the vault owner for a higher tier",
            caller.credential.tier, spec.name
        )))
    };
    // Reads are flushed; refusals and mutations are made durable before the answer.
    let durability = if spec.is_mutating() || result.is_err() {
        Durability::Sync
    } else {
        Durability::Flush
    };
    call.finish(result, durability)
}
