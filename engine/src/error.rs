//! The one application error of the edge, and the one place that maps every error to its docs/contract.md#error-codes
//! code, its client message and its CLI exit code.

use std::path::PathBuf;

use policy::ErrorCode;

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("authentication failed: {0}")]
    Unauthorized(&'static str),
    #[error("this credential has been revoked")]
    CredentialRevoked,
    #[error("this credential has expired")]
    CredentialExpired,
    #[error("{0}")]
    CapabilityDenied(String),
    #[error("several vaults are visible and none is the default: pass `vault` (see vault_list)")]
    VaultTargetRequired,
    #[error("no vault '{0}' is visible to this credential (see vault_list)")]
    VaultNotFound(String),
    #[error("{0}")]
    InvalidArgument(String),
    #[error(transparent)]
    Vault(#[from] vault::VaultError),
    #[error("{0}")]
    Path(#[from] policy::PathError),
    #[error(transparent)]
    Write(#[from] vault::write::WriteError),
    #[error(transparent)]
    State(#[from] inbox::StateError),
    #[error(transparent)]
    Audit(#[from] audit::AuditError),
    #[error("no vaultgate home at {0}: run `vaultgate init` (or pass --home DIR)")]
    NoHome(PathBuf),
    #[error("configuration: {0}")]
    Config(String),
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    AuditBroken(String),
    /// A proposal or apply refusal whose SPEC code is decided where it arises.
    #[error("{1}")]
    Proposal(ErrorCode, String),
    /// A critical-call refusal (docs/contract.md#critical-operations) with a fresh challenge for the call as sent, when one
    /// could be issued.
    #[error("{1}")]
    Challenge(ErrorCode, String, Option<Box<serde_json::Value>>),
    /// An HTTP request refused before authentication matters (Host, Origin, session owner).
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// One item of a result is larger than `max_output_bytes` (docs/contract.md#limits-and-pagination); the message names a
    /// narrower call.
    #[error("{0}")]
    OutputLimitExceeded(String),
    /// In-client approval (docs/contract.md#the-review-page-and-in-client-approval) was not given: declined, cancelled, `false`, missing or late.
    #[error("{0}")]
    ApprovalDeclined(String),
    /// Not a refusal: on 2026-07-28 the apply waits for a person's answer, which the client
    /// collects from an input-required result. The edge turns it into that result; it is
    /// audited as `approval.asked`.
    #[error("a person's approval is needed")]
    ApprovalAsked(Box<crate::approval::ApprovalRequest>),
    /// The audit record of the call could not be written (docs/contract.md#the-audit-log): refused, nothing changed.
    #[error("the audit log cannot be written right now; nothing was changed")]
    AuditUnavailable,
    /// An attachment that cannot be read as text (docs/contract.md#notes-as-data-and-attachments): `NOT_TEXT` or `TOO_LARGE`, with
    /// the reason (never the document's own text).
    #[error("{1}")]
    Attachment(ErrorCode, String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl GatewayError {
    /// `NOT_FOUND`, as for a note that does not exist.
    pub fn not_found() -> GatewayError {
        GatewayError::Vault(vault::VaultError::Fs(vault::fs::FsError::NotFound))
    }

    /// The stable wire code. Exhaustive on purpose: a new variant must choose its code.
    pub fn code(&self) -> ErrorCode {
        match self {
            GatewayError::Unauthorized(_) => ErrorCode::UNAUTHORIZED,
            GatewayError::CredentialRevoked => ErrorCode::CREDENTIAL_REVOKED,
            GatewayError::CredentialExpired => ErrorCode::CREDENTIAL_EXPIRED,
            GatewayError::CapabilityDenied(_) => ErrorCode::CAPABILITY_DENIED,
            GatewayError::VaultTargetRequired => ErrorCode::VAULT_TARGET_REQUIRED,
            GatewayError::VaultNotFound(_) => ErrorCode::VAULT_NOT_FOUND,
            GatewayError::InvalidArgument(_) => ErrorCode::INVALID_ARGUMENT,
            GatewayError::Vault(e) => e.code(),
            GatewayError::Path(e) => e.code(),
            GatewayError::Write(e) => e.code(),
            GatewayError::State(inbox::StateError::CredentialNotFound(_)) => ErrorCode::NOT_FOUND,
            GatewayError::State(inbox::StateError::DuplicateName(_)) => ErrorCode::INVALID_ARGUMENT,
            GatewayError::State(_) => ErrorCode::INTERNAL,
            GatewayError::Audit(_) => ErrorCode::INTERNAL,
            GatewayError::NoHome(_) => ErrorCode::NOT_FOUND,
            GatewayError::Config(_) => ErrorCode::INVALID_ARGUMENT,
            GatewayError::Io(_) => ErrorCode::INTERNAL,
            // The contract's code for a log that cannot be written to: broken, missing or replaced.
            GatewayError::AuditBroken(_) => ErrorCode::AUDIT_UNAVAILABLE,
            GatewayError::Forbidden(_) => ErrorCode::UNAUTHORIZED,
            GatewayError::Proposal(code, _) => *code,
            GatewayError::Attachment(code, _) => *code,
            GatewayError::Challenge(code, _, _) => *code,
            GatewayError::OutputLimitExceeded(_) => ErrorCode::OUTPUT_LIMIT_EXCEEDED,
            GatewayError::AuditUnavailable => ErrorCode::AUDIT_UNAVAILABLE,
            GatewayError::ApprovalDeclined(_) => ErrorCode::APPROVAL_DECLINED,
            // Never answered as an error; were it ever, it must not look like success.
            GatewayError::ApprovalAsked(_) => ErrorCode::INTERNAL,
            GatewayError::Internal(_) => ErrorCode::INTERNAL,
        }
    }

    /// What a client is told: the fact and the next step, never internals (those go to the log).
    pub fn client_message(&self) -> String {
        // An attachment refusal already says what can be read, and why not this file.
        if let GatewayError::Attachment(_, m) = self {
            return m.clone();
        }
        match self.code() {
            ErrorCode::INTERNAL => "internal error; the operator's log has details. Retry later.".into(),
            ErrorCode::PATH_INVALID => format!("{self}. Use a vault-relative path like `z/attention.md`."),
            ErrorCode::PATH_DENIED => format!("{self}. Only the vault's readable notes can be used."),
            ErrorCode::PATH_OUTSIDE_VAULT => format!("{self}. The file is a link that leaves the vault."),
            ErrorCode::NOT_FOUND => {
                format!("{self}. Use list_notes or search_note_content to find the path.")
            }
            ErrorCode::NOT_TEXT => format!("{self}. Only UTF-8 text notes can be read."),
            ErrorCode::TOO_LARGE => format!("{self}. Files over 2 MiB cannot be read."),
            ErrorCode::UNAUTHORIZED => format!("{self}. Ask the vault owner for a new token."),
            ErrorCode::CREDENTIAL_REVOKED | ErrorCode::CREDENTIAL_EXPIRED => {
                format!("{self}. Ask the vault owner for a new token.")
            }
            ErrorCode::AUDIT_UNAVAILABLE => {
                format!(
                    "{self}. The operator must free disk space or fix the home; then retry with the same idempotencyKey."
                )
            }
            _ => self.to_string(),
        }
    }

    /// The JSON error body of docs/contract.md#the-mcp-surface.
    pub fn to_json(&self) -> serde_json::Value {
        let code = self.code();
        let mut body = serde_json::json!({
            "ok": false,
            "code": code.as_str(),
            "message": self.client_message(),
            "retryable": code.retryable(),
        });
        if let (GatewayError::Challenge(_, _, Some(c)), Some(o)) = (self, body.as_object_mut()) {
            o.insert("challenge".into(), (**c).clone());
        }
        body
    }
}
