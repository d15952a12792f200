//! In-client approval over MCP (docs/contract.md#the-review-page-and-in-client-approval): carries the engine's question to the person through
//! the client and the answer back. The engine decides whether to ask and whether an answer
//! counts; this module only speaks the protocol.
//!
//! - 2025 protocols: `elicitation/create` (form mode), sent from the tool call's own task so that
//!   over Streamable HTTP it rides that call's response stream. The engine runs on a blocking
//!   thread and waits for the answer on a channel; no lock is held meanwhile.
//! - 2026-07-28: servers may not send requests, so the question leaves in an input-required
//!   result with the engine's sealed state, and the client's retry brings the answer.

use std::collections::BTreeMap;
use std::time::Duration;

use engine::{ApprovalAnswer, ApprovalQuestion, ApprovalRequest};
use rmcp::model::{
    BooleanSchema, CallToolRequestParams, ElicitRequest, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationSchema, InputRequest, InputRequests, InputRequiredResult,
    PrimitiveSchemaDefinition, ProtocolVersion,
};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer};
use serde_json::Value;

/// The key of our one input request in an input-required result.
const INPUT_KEY: &str = "approval";
/// The blocking side waits this much longer than the person may take, so a lost answer
/// (a client that never replies, a dropped task) still ends the call as declined.
const GRACE: Duration = Duration::from_secs(5);

/// What this request's session can do, read off the request.
pub enum Mode {
    /// No form elicitation declared.
    Unavailable,
    /// A 2025 session: ask now.
    Ask,
    /// 2026-07-28, first round: answer with an input-required result.
    Defer,
    /// 2026-07-28, the retry: the sealed state and the person's answer.
    Answered(String, ApprovalAnswer),
}

pub fn mode(request: &CallToolRequestParams, ctx: &RequestContext<RoleServer>) -> Mode {
    let form = ctx
        .client_capabilities()
        .and_then(|c| c.elicitation)
        // A bare `elicitation: {}` means form mode (MCP 2025-06-18).
        .is_some_and(|e| e.form.is_some() || e.url.is_none());
    let stateless = ctx.protocol_version() == Some(ProtocolVersion::V_2026_07_28);
    match (stateless, &request.request_state) {
        (true, Some(state)) => {
            let answer = request
                .input_responses
                .as_ref()
                .and_then(|r| r.get(INPUT_KEY))
                .and_then(|v| serde_json::from_value::<ElicitResult>(v.clone()).ok())
                .map_or(ApprovalAnswer::Declined, |r| answer_of(&r));
            Mode::Answered(state.clone(), answer)
        }
        _ if !form => Mode::Unavailable,
        (true, None) => Mode::Defer,
        (false, _) => Mode::Ask,
    }
}

/// Only `accept` with `approve: true` approves; a missing or non-boolean field does not.
fn answer_of(r: &ElicitResult) -> ApprovalAnswer {
    let approve = r.content.as_ref().and_then(|c| c.get("approve"));
    match (&r.action, approve) {
        (ElicitationAction::Accept, Some(Value::Bool(true))) => ApprovalAnswer::Approved,
        _ => ApprovalAnswer::Declined,
    }
}

fn params(q: &ApprovalQuestion) -> ElicitRequestParams {
    let approve = BooleanSchema::new()
        .title("Apply this proposal")
        .description("true applies it now; anything else leaves the vault unchanged");
    let mut schema = ElicitationSchema::new(BTreeMap::from([(
        "approve".to_owned(),
        PrimitiveSchemaDefinition::Boolean(approve),
    )]));
    schema.required = Some(vec!["approve".to_owned()]);
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: q.message.clone(),
        requested_schema: schema,
    }
}

/// Asks the person (2025 protocols) and waits at most the question's timeout; a cancelled call,
/// a closed session or any error is a decline.
pub async fn ask(
    peer: &Peer<RoleServer>,
    ctx: &RequestContext<RoleServer>,
    q: &ApprovalQuestion,
) -> ApprovalAnswer {
    let asked = peer.create_elicitation_with_timeout(params(q), Some(q.timeout));
    let answered = tokio::select! {
        r = tokio::time::timeout(q.timeout, asked) => r,
        () = ctx.ct.cancelled() => return ApprovalAnswer::Declined,
    };
    match answered {
        Ok(Ok(r)) => answer_of(&r),
        Ok(Err(e)) => {
            tracing::info!(error = %e, "the in-client approval got no answer");
            ApprovalAnswer::Declined
        }
        Err(_) => ApprovalAnswer::Declined,
    }
}

/// How long the blocking side waits for [`ask`] to report.
pub fn wait_for(q: &ApprovalQuestion) -> Duration {
    q.timeout.saturating_add(GRACE)
}

/// The input-required result carrying `req` (2026-07-28).
pub fn input_required(req: &ApprovalRequest) -> InputRequiredResult {
    let mut requests = InputRequests::new();
    requests.insert(
        INPUT_KEY.to_owned(),
        InputRequest::Elicitation(ElicitRequest::new(params(&req.question))),
    );
    InputRequiredResult::new(Some(requests), Some(req.state.clone()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn result(action: ElicitationAction, content: Option<Value>) -> ElicitResult {
        serde_json::from_value(serde_json::json!({
            "action": serde_json::to_value(action).unwrap(),
            "content": content,
        }))
        .unwrap()
    }

    #[test]
    fn only_an_accept_with_approve_true_approves() {
        use serde_json::json;
        let cases = [
            (
                ElicitationAction::Accept,
                Some(json!({"approve": true})),
                ApprovalAnswer::Approved,
            ),
            (
                ElicitationAction::Accept,
                Some(json!({"approve": false})),
                ApprovalAnswer::Declined,
            ),
            (
                ElicitationAction::Accept,
                Some(json!({"approve": "true"})),
                ApprovalAnswer::Declined,
            ),
            (
                ElicitationAction::Accept,
                Some(json!({})),
                ApprovalAnswer::Declined,
            ),
            (ElicitationAction::Accept, None, ApprovalAnswer::Declined),
            (
                ElicitationAction::Decline,
                Some(json!({"approve": true})),
                ApprovalAnswer::Declined,
            ),
            (
                ElicitationAction::Cancel,
                Some(json!({"approve": true})),
                ApprovalAnswer::Declined,
            ),
        ];
        for (action, content, expected) in cases {
            assert_eq!(
                answer_of(&result(action, content.clone())),
                expected,
                "{content:?}"
            );
        }
    }

    #[test]
    fn the_schema_asks_for_one_required_boolean() {
        let q = ApprovalQuestion {
            message: "m".into(),
            timeout: Duration::from_secs(1),
        };
        let v = serde_json::to_value(params(&q)).unwrap();
        assert_eq!(v["requestedSchema"]["properties"]["approve"]["type"], "boolean");
        assert_eq!(v["requestedSchema"]["required"], serde_json::json!(["approve"]));
        assert_eq!(v["mode"], "form");
    }
}
