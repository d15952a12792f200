//! In-client approval (docs/contract.md#the-review-page-and-in-client-approval): a credential issued with `--approve-in-client` may have one
//! proposal applied one tier step above its own, once a person approved exactly that proposal
//! in the caller's client. The engine decides whether to ask, what the question says and whether
//! an answer counts; the edge only carries the question (MCP elicitation) and the answer back.
//!
//! SECURITY(T-APPROVE1): the client program is trusted to ask honestly, so the opt-in is a tier
//! raise and is shown as one; the lift is one step, for `apply_proposal` only (never critical
//! tools, undo or redo), and bound to one proposal hash.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::call::Call;
use crate::core::{Actor, VaultHandle, now_unix};
use crate::error::GatewayError;
use crate::ids::{ProposalHash, ProposalId};

/// The reason is cut to this many characters in the question (docs/contract.md#the-review-page-and-in-client-approval).
const REASON_CHARS: usize = 300;
/// A sealed request state longer than this is not ours.
const MAX_STATE_BYTES: usize = 2048;

/// What the person is asked, and how long the answer may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalQuestion {
    /// Fixed fields first (vault, kind, targets, diff size, hash prefix), the reason last.
    pub message: String,
    pub timeout: Duration,
}

/// The person's answer as the client reported it. Anything but an `accept` with `approve: true`
/// in time — decline, cancel, `false`, a missing field, a timeout, a closed session — is
/// `Declined`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalAnswer {
    Approved,
    Declined,
}

/// How the caller's session can reach a person.
pub enum ClientApproval<'a> {
    /// The session declared no form elicitation (or the caller is not an MCP client).
    Unavailable,
    /// Ask now and wait for the answer (2025 protocols: `elicitation/create` on the session).
    /// Called without any lock held.
    Ask(&'a (dyn Fn(&ApprovalQuestion) -> ApprovalAnswer + Sync)),
    /// 2026-07-28: the question goes back to the client in an input-required result
    /// ([`GatewayError::ApprovalAsked`]), sealed with the state the retry must carry.
    Defer,
    /// 2026-07-28, the retry: the sealed state the question went out with, and the answer.
    Answered { state: &'a str, answer: ApprovalAnswer },
    /// The approval card (MCP Apps): the person clicked Approve on the card, which carries the
    /// sealed approval this server put in a result's `_meta` ([`Approvals::app_approval`]).
    App(&'a str),
}

/// Where a person's yes came from, as the audit record names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// Elicitation, or the 2026-07-28 input-required round.
    Client,
    /// The approval card's Approve or Reject.
    App,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Client => "client",
            Via::App => "app",
        }
    }
}

/// A sealed approval for the card: the value goes only into result `_meta`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppApproval {
    pub value: String,
    /// Unix seconds; the card asks `get_proposal` for a fresh one after it.
    pub expires_at: i64,
}

/// A question to return in an input-required result, with the state that binds its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRequest {
    pub question: ApprovalQuestion,
    /// Opaque to the client: HMAC-sealed under the home's secret.
    pub state: String,
}

/// An approval that holds for one apply of one proposal: not `Clone`, consumed by that apply.
#[derive(Debug)]
pub(crate) struct Approved {
    proposal_id: String,
    proposal_hash: String,
    pub(crate) via: Via,
}

impl Approved {
    /// Whether the person approved this proposal, as it is now (the id, and check 3 on the hash
    /// they were shown).
    pub(crate) fn covers(&self, proposal_id: &str, proposal_hash: &str) -> bool {
        self.proposal_id == proposal_id
            && proposals::plan::check_given_hash(proposal_hash, &self.proposal_hash).is_ok()
    }
}

/// A credential's claim on asking, released when dropped (answered, declined, timed out or
/// failed alike).
struct Asking<'a> {
    set: &'a std::sync::Mutex<std::collections::HashSet<String>>,
    credential: String,
}

impl<'a> Asking<'a> {
    fn claim(
        set: &'a std::sync::Mutex<std::collections::HashSet<String>>,
        credential: &str,
    ) -> Option<Asking<'a>> {
        let mut g = set.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        g.insert(credential.to_owned()).then(|| Asking {
            set,
            credential: credential.to_owned(),
        })
    }
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        let mut g = self.set.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        g.remove(&self.credential);
    }
}

/// What the sealed state binds (docs/contract.md#the-review-page-and-in-client-approval): the credential, the call's arguments (vault, id,
/// proposal hash, idempotency key), a nonce for single use, and an expiry.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Sealed {
    c: String,
    a: String,
    n: String,
    e: i64,
}

/// May `cred` decide a proposal `created_by` made, or only with a person's yes? The one place
/// the engine asks `policy::may_apply` (docs/contract.md#tiers-and-capabilities).
pub(crate) fn may_apply(cred: &inbox::Credential, created_by: &str) -> policy::MayApply {
    policy::may_apply(cred.tier, cred.approve_in_client, cred.id.as_str() == created_by)
}

/// A person's yes in the client, and the sealed approvals it leaves.
pub struct Approvals<'a> {
    pub(crate) core: &'a crate::core::Core,
    /// Credentials with a question waiting for a person (docs/contract.md#the-review-page-and-in-client-approval).
    pub(crate) asking: &'a std::sync::Mutex<std::collections::HashSet<String>>,
}

impl Approvals<'_> {
    /// Own proposals need `auto`, anyone's `full` (docs/contract.md#tiers-and-capabilities); the operator owns the home.
    /// As [`Approvals::authorize_decision`], for an apply a person approved in the caller's client:
    /// the tier one step up (docs/contract.md#the-review-page-and-in-client-approval), for a credential that opted in.
    pub(crate) fn authorize_approved(&self, actor: &Actor, created_by: &str) -> Result<(), GatewayError> {
        let Actor::Caller(c) = actor else {
            return self.authorize_decision(actor, created_by);
        };
        // SECURITY(T-APPROVE1): the person may have taken minutes; the credential row is read
        // again, so a revocation, a lower tier or a withdrawn opt-in meanwhile wins.
        let fresh = self
            .core
            .credentials()
            .by_id(c.credential.id.as_str())?
            .ok_or(GatewayError::CredentialRevoked)?;
        if fresh.is_revoked() {
            return Err(GatewayError::CredentialRevoked);
        }
        if fresh.is_expired(crate::core::now_unix()) {
            return Err(GatewayError::CredentialExpired);
        }
        if may_apply(&fresh, created_by) != policy::MayApply::Deny {
            return Ok(());
        }
        Err(GatewayError::CapabilityDenied(format!(
            "the '{}' tier may not apply this proposal, even with a person's approval",
            fresh.tier
        )))
    }

    pub fn authorize_decision(&self, actor: &Actor, created_by: &str) -> Result<(), GatewayError> {
        match actor {
            Actor::Operator(_) => Ok(()),
            Actor::Caller(c) => {
                // Deciding without a person's yes: the tier alone (rejects never take one).
                if may_apply(&c.credential, created_by) == policy::MayApply::Allow {
                    Ok(())
                } else {
                    Err(GatewayError::CapabilityDenied(format!(
                        "the '{}' tier may decide only its own proposals; this one was made by another client",
                        c.credential.tier
                    )))
                }
            }
        }
    }

    /// Decides, before the write lock is taken, whether this apply needs a person's approval
    /// and obtains it. `Ok(None)`: no approval is involved (the tier alone decides under the
    /// lock, which also refuses what it may not do). `Ok(Some)`: approved, for this proposal.
    pub(crate) fn client_approval(
        &self,
        call: &Call<'_>,
        v: &VaultHandle,
        id: &ProposalId,
        given_hash: &ProposalHash,
        approval: &ClientApproval<'_>,
    ) -> Result<Option<Approved>, GatewayError> {
        let out = self.obtain_approval(call, v, id, given_hash, approval);
        if matches!(out, Ok(Some(_))) {
            // A person's yes is used once: the write is not a job another process could run.
            call.note_person_answered();
        }
        out
    }

    fn obtain_approval(
        &self,
        call: &Call<'_>,
        v: &VaultHandle,
        id: &ProposalId,
        given_hash: &ProposalHash,
        approval: &ClientApproval<'_>,
    ) -> Result<Option<Approved>, GatewayError> {
        let Actor::Caller(caller) = call.actor() else {
            return Ok(None);
        };
        let cred = &caller.credential;
        if let ClientApproval::App(sealed) = approval {
            return self.use_app_approval(cred, v, id, sealed).map(Some);
        }
        if !cred.approve_in_client {
            return Ok(None);
        }
        // docs/contract.md#applying-a-proposal check 1, early: nobody is asked about a proposal that cannot be applied.
        let row = self.core.proposals().pending(v, id.as_str())?;
        if may_apply(cred, &row.created_by) != policy::MayApply::NeedsPersonYes {
            return Ok(None);
        }
        let recorded_hash = crate::proposing::row_hash(&row);
        // Check 3, early: a person is asked only about the proposal the call names exactly.
        proposals::plan::check_given_hash(recorded_hash, given_hash.as_str())
            .map_err(|_| GatewayError::from(crate::error::Refused::HashMismatch))?;
        let approved = || Approved {
            proposal_id: row.id.clone(),
            proposal_hash: recorded_hash.to_owned(),
            via: Via::Client,
        };
        match approval {
            // Answered above.
            ClientApproval::App(_) => Err(GatewayError::Internal(
                "an app approval reached the question".into(),
            )),
            ClientApproval::Unavailable => Err(GatewayError::CapabilityDenied(format!(
                "the '{}' tier may apply this proposal only with a person's approval, and this client \
                 cannot ask one (it declared no form elicitation); approve it on the review page \
                 (`vaultgate review`) or with `vaultgate apply --only {}`",
                cred.tier, row.id
            ))),
            ClientApproval::Ask(ask) => {
                let question = self.approval_question(v, id)?;
                // SECURITY(T-APPROVE1): one question at a time per credential, so an agent cannot
                // flood its user with prompts or hold a thread per waiting call.
                let _asking = Asking::claim(self.asking, cred.id.as_str()).ok_or_else(|| {
                    GatewayError::from(crate::error::Refused::QuotaExceeded {
                        which: crate::error::Quota::OneQuestionAtATime,
                        message:
                            "another apply of this credential is already waiting for the person's answer; \
                         wait for it, then try again"
                                .into(),
                    })
                })?;
                match ask(&question) {
                    ApprovalAnswer::Approved => Ok(Some(approved())),
                    ApprovalAnswer::Declined => Err(declined(question.timeout)),
                }
            }
            ClientApproval::Defer => {
                let question = self.approval_question(v, id)?;
                let state = self.seal_approval(cred.id.as_str(), &call.args_hash(), &question)?;
                Err(GatewayError::ApprovalAsked(Box::new(ApprovalRequest {
                    question,
                    state,
                })))
            }
            ClientApproval::Answered { state, answer } => {
                let expires = self.open_approval(state, cred.id.as_str(), &call.args_hash())?;
                // SECURITY(T-APPROVE2): a sealed state carries one answer, whatever it is, in any
                // process: a decline cannot be resent as an accept.
                if !self.use_once(v, &expires.1, expires.0)? {
                    return Err(GatewayError::ApprovalDeclined(
                        "this approval was already used; call apply_proposal again to be asked again".into(),
                    ));
                }
                if *answer != ApprovalAnswer::Approved {
                    return Err(declined(self.approval_timeout()));
                }
                Ok(Some(approved()))
            }
        }
    }

    /// The sealed approval the card may carry for proposal `id`, or `None` when this credential
    /// may not decide it with a person's click (docs/contract.md#the-review-page-and-in-client-approval):
    /// it opted in, the proposal is pending, and its tier one step up may apply it. The edge asks
    /// only for sessions that declared the UI extension, and puts the value only in `_meta`.
    pub fn app_approval(
        &self,
        cred: &inbox::Credential,
        v: &VaultHandle,
        id: &ProposalId,
    ) -> Result<Option<AppApproval>, GatewayError> {
        if !cred.approve_in_client {
            return Ok(None);
        }
        let row = match self.core.proposals().pending(v, id.as_str()) {
            Ok(row) => row,
            Err(_) => return Ok(None),
        };
        if may_apply(cred, &row.created_by) == policy::MayApply::Deny {
            return Ok(None);
        }
        let hash = crate::proposing::row_hash(&row);
        let ttl = i64::try_from(self.approval_timeout().as_secs()).unwrap_or(i64::MAX);
        let sealed = AppSealed {
            c: cred.id.as_str().to_owned(),
            v: v.id.clone(),
            p: row.id.clone(),
            h: hash.to_owned(),
            n: uuid::Uuid::new_v4().simple().to_string(),
            e: now_unix().saturating_add(ttl),
        };
        Ok(Some(AppApproval {
            value: self.seal(&sealed, app_message)?,
            expires_at: sealed.e,
        }))
    }

    /// The proposal hash a sealed card approval was minted for, if it is one of ours for this
    /// credential, vault and proposal (not yet checked for expiry or use): the hash the apply
    /// then names, so check 3 holds the person to what the card showed.
    pub fn app_approved_hash(
        &self,
        cred: &inbox::Credential,
        v: &VaultHandle,
        id: &ProposalId,
        sealed: &str,
    ) -> Result<ProposalHash, GatewayError> {
        let s = self.open_app(cred, v, id, sealed)?;
        Ok(ProposalHash::from_wire(s.h))
    }

    fn open_app(
        &self,
        cred: &inbox::Credential,
        v: &VaultHandle,
        id: &ProposalId,
        sealed: &str,
    ) -> Result<AppSealed, GatewayError> {
        // SECURITY(T-APPROVE4): missing, forged, another credential's or another proposal's
        // approval: refused alike, before anything in it is believed.
        let denied = || {
            GatewayError::CapabilityDenied(
                "this approval is not one this server gave this credential for this proposal; \
                 the card asks get_proposal for a fresh one (or decide on the review page)"
                    .into(),
            )
        };
        let s: AppSealed = self.unseal(sealed, app_message).ok_or_else(denied)?;
        if s.c != cred.id.as_str() || s.v != v.id || s.p != id.as_str() {
            return Err(denied());
        }
        Ok(s)
    }

    /// Uses a person's approval (its nonce) once: in any process, and on a team vault across the
    /// team (docs/contract.md#team-mode). False when it was used already.
    fn use_once(&self, v: &VaultHandle, nonce: &str, expires_at: i64) -> Result<bool, GatewayError> {
        match crate::teamwrite::team_of(self.core, v) {
            Some(team) => team.use_approval(nonce, expires_at),
            None => Ok(self.core.state.use_approval(nonce, expires_at)?),
        }
    }

    /// An Approve or Reject click on the card: the sealed approval opened, in time, for a
    /// credential that (still) opted in and may decide this proposal one step up, used once.
    fn use_app_approval(
        &self,
        cred: &inbox::Credential,
        v: &VaultHandle,
        id: &ProposalId,
        sealed: &str,
    ) -> Result<Approved, GatewayError> {
        let s = self.open_app(cred, v, id, sealed)?;
        if now_unix() >= s.e {
            return Err(GatewayError::CapabilityDenied(
                "this approval expired; the card asks get_proposal for a fresh one".into(),
            ));
        }
        if !cred.approve_in_client {
            return Err(GatewayError::CapabilityDenied(
                "this credential no longer approves in the client; decide on the review page or with the CLI"
                    .into(),
            ));
        }
        // SECURITY(T-APPROVE2): one click, one decision, in any process; used before the
        // proposal is looked at, so a replayed approval is refused as one whatever became of it.
        if !self.use_once(v, &s.n, s.e)? {
            return Err(GatewayError::CapabilityDenied(
                "this approval was already used; the card asks get_proposal for a fresh one".into(),
            ));
        }
        let row = self.core.proposals().pending(v, id.as_str())?;
        if may_apply(cred, &row.created_by) == policy::MayApply::Deny {
            return Err(GatewayError::CapabilityDenied(format!(
                "the '{}' tier may not decide this proposal, even with a person's approval",
                cred.tier
            )));
        }
        Ok(Approved {
            proposal_id: s.p,
            proposal_hash: s.h,
            via: Via::App,
        })
    }

    /// A Reject click on the card: the approval used once, then the credential's tier one step
    /// up must allow deciding this proposal. Returns what the record names.
    pub(crate) fn app_reject(
        &self,
        call: &Call<'_>,
        v: &VaultHandle,
        id: &ProposalId,
        sealed: &str,
    ) -> Result<Approved, GatewayError> {
        let Actor::Caller(caller) = call.actor() else {
            return Err(GatewayError::CapabilityDenied("the card is a client's".into()));
        };
        self.use_app_approval(&caller.credential, v, id, sealed)
    }

    /// The question for proposal `id`, built from what the CLI and the review page show.
    fn approval_question(&self, v: &VaultHandle, id: &ProposalId) -> Result<ApprovalQuestion, GatewayError> {
        let p = self.core.proposals().get_proposal(v, id)?;
        let it = &p.item;
        let (added, removed) = self.change_size(v, &p)?;
        Ok(ApprovalQuestion {
            message: approval_message(
                &v.id,
                &it.kind,
                it.from.as_deref(),
                &it.target,
                (added, removed),
                &it.proposal_hash,
                &it.reason,
            ),
            timeout: self.approval_timeout(),
        })
    }

    /// The `+N −M` a person is shown for a proposal: its diff's lines, or for a move the lines
    /// its link rewrites change (the question, the card).
    pub fn change_size(
        &self,
        v: &VaultHandle,
        p: &crate::api::GetProposalOut,
    ) -> Result<(u64, u64), GatewayError> {
        let it = &p.item;
        if it.kind == "move" && it.status == "pending" {
            // A move changes what its link rewrites change: the person sees their size.
            self.move_rewrite_counts(v, it.from.as_deref().unwrap_or_default(), &it.target)
        } else {
            Ok(proposals::diff::counts(&proposals::diff::hunks(&p.diff)))
        }
    }

    /// The `+N −M` of a move: the lines its link rewrites change, over every note they touch.
    fn move_rewrite_counts(&self, v: &VaultHandle, from: &str, to: &str) -> Result<(u64, u64), GatewayError> {
        let (from, to) = (policy::VaultPath::parse(from)?, policy::VaultPath::parse(to)?);
        let mut total = (0, 0);
        for r in v.reader.plan_move(&from, &to)? {
            let before = crate::proposing::now_text(v, r.path.as_str());
            let diff = proposals::unified_diff(r.path.as_str(), &before, &r.new_text);
            let (a, d) = proposals::diff::counts(&proposals::diff::hunks(&diff));
            total = (total.0 + a, total.1 + d);
        }
        Ok(total)
    }

    fn approval_timeout(&self) -> Duration {
        Duration::from_secs(self.core.config().limits.approval_timeout_seconds)
    }

    fn approval_key(&self) -> ring::hmac::Key {
        proposals::keys::hmac_key(self.core.secret().bytes(), proposals::keys::APPROVAL)
    }

    fn seal_approval(
        &self,
        credential: &str,
        args_hash: &str,
        q: &ApprovalQuestion,
    ) -> Result<String, GatewayError> {
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let ttl = i64::try_from(q.timeout.as_secs()).unwrap_or(i64::MAX);
        let sealed = Sealed {
            c: credential.to_owned(),
            a: args_hash.to_owned(),
            n: nonce,
            e: now_unix().saturating_add(ttl),
        };
        self.seal(&sealed, state_message)
    }

    /// `value` as `<hex JSON>.<hex HMAC>` under the approval key, over `message(body)`: each kind
    /// of sealed value has its own message, so one never opens as another.
    fn seal<T: Serialize>(&self, value: &T, message: fn(&str) -> Vec<u8>) -> Result<String, GatewayError> {
        let body = hex::encode(serde_json::to_vec(value).map_err(|e| GatewayError::Internal(e.to_string()))?);
        let tag = ring::hmac::sign(&self.approval_key(), &message(&body));
        Ok(format!("{body}.{}", hex::encode(tag.as_ref())))
    }

    /// The value [`Approvals::seal`] sealed, once its HMAC verified (in constant time, before
    /// anything in it is believed); `None` for anything else.
    fn unseal<T: serde::de::DeserializeOwned>(
        &self,
        sealed: &str,
        message: fn(&str) -> Vec<u8>,
    ) -> Option<T> {
        if sealed.len() > MAX_STATE_BYTES {
            return None;
        }
        let (body, tag) = sealed.split_once('.')?;
        let tag = hex::decode(tag).ok()?;
        ring::hmac::verify(&self.approval_key(), &message(body), &tag).ok()?;
        serde_json::from_slice(&hex::decode(body).ok()?).ok()
    }

    /// Opens a sealed state for this credential and these arguments: `(expires_at, nonce)`.
    fn open_approval(
        &self,
        state: &str,
        credential: &str,
        args_hash: &str,
    ) -> Result<(i64, String), GatewayError> {
        let invalid = || {
            GatewayError::InvalidArgument(
                "requestState is not an approval this server asked for this call; call apply_proposal again"
                    .into(),
            )
        };
        let sealed: Sealed = self.unseal(state, state_message).ok_or_else(invalid)?;
        if sealed.c != credential || sealed.a != args_hash {
            return Err(invalid());
        }
        if now_unix() >= sealed.e {
            return Err(GatewayError::ApprovalDeclined(
                "the approval came too late; call apply_proposal again to be asked again".into(),
            ));
        }
        Ok((sealed.e, sealed.n))
    }
}

/// What a card's approval binds (docs/contract.md#the-review-page-and-in-client-approval): the
/// credential, the vault, the proposal and its hash, a single-use nonce and an expiry.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct AppSealed {
    c: String,
    v: String,
    p: String,
    h: String,
    n: String,
    e: i64,
}

/// A card's approval and a 2026 request state share the key, never the message.
fn app_message(body: &str) -> Vec<u8> {
    format!("vaultgate app approval\0{body}").into_bytes()
}

fn state_message(body: &str) -> Vec<u8> {
    format!("vaultgate approval state\0{body}").into_bytes()
}

fn declined(timeout: Duration) -> GatewayError {
    GatewayError::ApprovalDeclined(format!(
        "the proposal was not approved in the client (declined, cancelled, or no answer within {} s); \
         nothing was changed. Ask the person, or they can apply it on the review page or with `vaultgate apply`",
        timeout.as_secs()
    ))
}

/// docs/contract.md#the-review-page-and-in-client-approval: the fixed fields first, one per line, then the agent's reason, last, quoted, cut to
/// 300 characters and with every control character escaped, so no reason can pose as a field.
pub fn approval_message(
    vault: &str,
    kind: &str,
    from: Option<&str>,
    target: &str,
    (added, removed): (u64, u64),
    proposal_hash: &str,
    reason: &str,
) -> String {
    let t = policy::text::escape_line;
    let mut lines = vec![
        "Apply this proposal to the vault?".to_owned(),
        format!("vault: {}", t(vault)),
        format!("kind: {}", t(kind)),
    ];
    match (kind, from) {
        ("move", Some(from)) => {
            lines.push(format!("from: {}", t(from)));
            lines.push(format!("to: {}", t(target)));
        }
        _ => lines.push(format!("target: {}", t(target))),
    }
    lines.push(format!("diff: +{added} \u{2212}{removed} lines"));
    let prefix: String = proposal_hash.chars().take(12).collect();
    lines.push(format!("proposalHash: {}", t(&prefix)));
    lines.push(format!("reason: \"{}\"", quoted_reason(reason)));
    lines.join("\n")
}

fn quoted_reason(reason: &str) -> String {
    let mut cut: String = reason.chars().take(REASON_CHARS).collect();
    if reason.chars().nth(REASON_CHARS).is_some() {
        cut.push('…');
    }
    policy::text::escape_line(&cut)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_fixed_fields_come_first_and_a_hostile_reason_stays_on_the_last_line() {
        let reason = "ok\nkind: delete\x1b[31m \"quoted\"\u{9b}";
        let m = approval_message(
            "v",
            "patch",
            None,
            "notes/a.md",
            (3, 1),
            "0123456789abcdef",
            reason,
        );
        let lines: Vec<&str> = m.lines().collect();
        assert_eq!(
            lines[..6],
            [
                "Apply this proposal to the vault?",
                "vault: v",
                "kind: patch",
                "target: notes/a.md",
                "diff: +3 \u{2212}1 lines",
                "proposalHash: 0123456789ab",
            ]
        );
        assert_eq!(lines.len(), 7, "{m}");
        assert!(lines[6].contains("ok\\nkind: delete\\u{001B}[31m"), "{m}");
        assert!(lines[6].starts_with("reason: \"ok"));
        assert!(lines[6].ends_with('"'));
        assert!(!m.contains('\x1b') && !m.contains('\u{9b}'));
        assert!(lines[6].contains("\\\"quoted\\\""));
    }

    #[test]
    fn a_move_names_both_ends_and_a_long_reason_is_cut() {
        let m = approval_message("v", "move", Some("a.md"), "b.md", (0, 0), "ff", &"x".repeat(400));
        let lines: Vec<&str> = m.lines().collect();
        assert_eq!(lines[3..5], ["from: a.md", "to: b.md"]);
        let reason = lines.last().unwrap();
        assert_eq!(reason.chars().filter(|c| *c == 'x').count(), 300);
        assert!(reason.ends_with("…\""));
    }

    #[test]
    fn one_question_at_a_time_per_credential() {
        let set = std::sync::Mutex::default();
        let first = Asking::claim(&set, "c1").unwrap();
        assert!(Asking::claim(&set, "c1").is_none(), "a second question waits");
        let other = Asking::claim(&set, "c2");
        assert!(other.is_some(), "another credential is independent");
        drop(first);
        assert!(Asking::claim(&set, "c1").is_some(), "free again once answered");
    }
}
