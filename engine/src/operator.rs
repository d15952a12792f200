//! The operator's decisions (docs/contract.md#the-command-line, docs/contract.md#the-review-page-and-in-client-approval): apply, reject, undo and redo as the OS user, from
//! the CLI or the review page. Each is the tool's own engine function run inside one
//! [`Core::operator_call`], so both surfaces make the same checks and leave the same record with
//! their own actor (`cli:<user>`, `review:<user>`).

use std::sync::Arc;

use crate::api::{ApplyOut, RejectOut};
use crate::core::{Operator, VaultHandle};
use crate::error::GatewayError;
use crate::history::HistoryStatusOut;
use crate::ids::{HistoryEntryId, ProposalHash, ProposalId};
use inbox::Transition;

/// A fresh idempotency key for one operator decision: a person's click or command is one intent.
fn fresh_key(operator: &Operator) -> String {
    format!("{}-{}", operator.event(), uuid::Uuid::now_v7().simple())
}

/// The operator's decisions, from the CLI and the review page.
pub struct Decisions<'a> {
    pub(crate) core: &'a crate::core::Core,
}

impl Decisions<'_> {
    /// Applies the proposal `id` whose hash the operator was shown (docs/contract.md#proposals: every check runs).
    pub fn operator_apply(
        &self,
        operator: &Operator,
        v: &Arc<VaultHandle>,
        id: &str,
        proposal_hash: &str,
    ) -> Result<ApplyOut, GatewayError> {
        let key = fresh_key(operator);
        let args = serde_json::json!({"vault": v.id, "id": id, "proposalHash": proposal_hash, "idempotencyKey": key});
        self.core
            .operator_call(operator, "apply_proposal", &args, |call| {
                call.set_vault(&v.id);
                self.core.writes().apply_proposal(
                    call,
                    v,
                    &ProposalId::from_wire(id.to_owned()),
                    &ProposalHash::from_wire(proposal_hash.to_owned()),
                    &key,
                    &crate::approval::ClientApproval::Unavailable,
                )
            })
            .into_inner()
    }

    /// Rejects the pending proposal `id` with the operator's reason.
    pub fn operator_reject(
        &self,
        operator: &Operator,
        v: &Arc<VaultHandle>,
        id: &str,
        reason: &str,
    ) -> Result<RejectOut, GatewayError> {
        let args = serde_json::json!({"vault": v.id, "id": id, "reason": reason});
        self.core
            .operator_call(operator, "reject_proposal", &args, |call| {
                call.set_vault(&v.id);
                self.core
                    .proposals()
                    .reject_proposal(call, v, &ProposalId::from_wire(id.to_owned()), reason)
            })
            .into_inner()
    }

    /// Undoes or redoes the entry the operator was shown (`expected`: `HISTORY_NOT_TOP` when it is
    /// no longer the top).
    pub fn operator_history(
        &self,
        operator: &Operator,
        v: &Arc<VaultHandle>,
        t: Transition,
        expected: &str,
    ) -> Result<HistoryStatusOut, GatewayError> {
        let tool = crate::history::tool_name(t);
        let key = fresh_key(operator);
        let args =
            serde_json::json!({"vault": v.id, "expectedHistoryEntryId": expected, "idempotencyKey": key});
        self.core
            .operator_call(operator, tool, &args, |call| {
                call.set_vault(&v.id);
                self.core.history().history_transition(
                    call,
                    v,
                    t,
                    &HistoryEntryId::from_wire(expected.to_owned()),
                    &key,
                )
            })
            .into_inner()
    }

    /// Records a refused undo/redo that never reached the transaction (nothing to undo, or the
    /// top could not be read), so every operator attempt leaves one line.
    pub fn operator_history_refused(
        &self,
        operator: &Operator,
        v: &VaultHandle,
        t: Transition,
        e: GatewayError,
    ) -> GatewayError {
        let tool = crate::history::tool_name(t);
        let args = serde_json::json!({"vault": v.id});
        match self
            .core
            .operator_call(operator, tool, &args, |call| {
                call.set_vault(&v.id);
                Err::<(), _>(e)
            })
            .into_inner()
        {
            Err(e) => e,
            Ok(()) => GatewayError::Internal("a refusal was answered as a success".into()),
        }
    }
}
