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
    /// A refusal of a proposal, an apply, a history step or a quota: a fact (docs/contract.md#error-codes).
    #[error(transparent)]
    Refused(#[from] Refused),
    /// An earlier refusal made again with its code and message, where its cause (an I/O error)
    /// does not clone: a rolled-back transaction answers every waiter with it.
    #[error("{1}")]
    Again(ErrorCode, String),
    /// A critical-call refusal (docs/contract.md#critical-operations) with a fresh challenge for the call as sent, when one
    /// could be issued.
    #[error("{1}")]
    Challenge(
        proposals::challenge::Refusal,
        String,
        Option<Box<serde_json::Value>>,
    ),
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
    /// The vault's writer did not finish the call within `apply_wait_seconds`
    /// (docs/contract.md#applying-a-proposal); the write goes on, and the same key answers it.
    #[error("{0}")]
    VaultBusy(String),
    /// A team vault's remote no longer descends from the head the team registered
    /// (docs/contract.md#team-mode); nothing is applied there until `vault resync`.
    #[error("{0}")]
    HistoryRewritten(String),
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
    Attachment(Unreadable, String),
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
            GatewayError::Refused(r) => match r {
                Refused::StaleBase { .. } => ErrorCode::PROPOSAL_STALE_BASE,
                Refused::HashMismatch => ErrorCode::PROPOSAL_HASH_MISMATCH,
                Refused::Tampered { .. } => ErrorCode::PROPOSAL_TAMPERED,
                Refused::TargetExists { .. } | Refused::TargetCollides { .. } => {
                    ErrorCode::PROPOSAL_TARGET_EXISTS
                }
                Refused::ProposalNotFound { .. } => ErrorCode::PROPOSAL_NOT_FOUND,
                Refused::AlreadyApplied { .. } | Refused::DecidedMeanwhile => {
                    ErrorCode::PROPOSAL_ALREADY_APPLIED
                }
                Refused::Rejected { .. } | Refused::RejectedWhileApplying { .. } => {
                    ErrorCode::PROPOSAL_REJECTED
                }
                Refused::EditNotUnique { .. } => ErrorCode::EDIT_NOT_UNIQUE,
                Refused::NoteMissing { .. } | Refused::VersionNotFound { .. } => ErrorCode::NOT_FOUND,
                Refused::QuotaExceeded { .. } => ErrorCode::QUOTA_EXCEEDED,
                Refused::PathTooLong { .. } => ErrorCode::PATH_INVALID,
                Refused::HistoryNotTop { .. } => ErrorCode::HISTORY_NOT_TOP,
                Refused::HistoryStale { .. } => ErrorCode::HISTORY_STALE,
                Refused::ChallengeStale { .. } => ErrorCode::CHALLENGE_STALE,
                Refused::IdempotencyConflict { .. } => ErrorCode::IDEMPOTENCY_CONFLICT,
                Refused::NotApplied { first, .. } => first.unwrap_or(ErrorCode::INTERNAL),
            },
            GatewayError::Again(code, _) => *code,
            GatewayError::Attachment(Unreadable::NotText, _) => ErrorCode::NOT_TEXT,
            GatewayError::Attachment(Unreadable::TooLarge, _) => ErrorCode::TOO_LARGE,
            GatewayError::Challenge(r, _, _) => {
                use proposals::challenge::Refusal;
                match r {
                    Refusal::Required => ErrorCode::CHALLENGE_REQUIRED,
                    Refusal::Mismatch(_) => ErrorCode::CHALLENGE_MISMATCH,
                    Refusal::Consumed => ErrorCode::CHALLENGE_CONSUMED,
                    Refusal::Expired => ErrorCode::CHALLENGE_EXPIRED,
                    Refusal::Stale { .. } => ErrorCode::CHALLENGE_STALE,
                }
            }
            GatewayError::OutputLimitExceeded(_) => ErrorCode::OUTPUT_LIMIT_EXCEEDED,
            GatewayError::AuditUnavailable => ErrorCode::AUDIT_UNAVAILABLE,
            GatewayError::ApprovalDeclined(_) => ErrorCode::APPROVAL_DECLINED,
            GatewayError::VaultBusy(_) => ErrorCode::VAULT_BUSY,
            GatewayError::HistoryRewritten(_) => ErrorCode::VAULT_HISTORY_REWRITTEN,
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

/// Why an attachment cannot be read as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreadable {
    /// Not a PDF, no readable text, or no worker free.
    NotText,
    /// Over the size a PDF may be to be read.
    TooLarge,
}

/// Why a note no longer matches what a proposal was made against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stale {
    /// Since the agent read it (checked when proposing).
    SinceRead {
        expected: String,
        actual: Option<String>,
    },
    /// It is gone.
    Gone,
    /// Since the proposal was made (checked when applying).
    SinceProposed,
    /// While a move's link rewrites were planned.
    WhilePlanned,
    /// While the apply ran (its transaction was rolled back).
    WhileApplying,
}

/// Which inbox quota a proposal would exceed (docs/contract.md#limits-and-pagination).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quota {
    PendingPerCredential,
    PendingBytesPerCredential,
    InboxBytes,
    /// One question at a time per credential waits for a person.
    OneQuestionAtATime,
}

/// A refusal as a fact, with what its message needs. The wire code of each is chosen in
/// [`GatewayError::code`] and nowhere else.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("{}", stale_message(path, why))]
    StaleBase { path: String, why: Stale },
    #[error("proposalHash does not match this proposal; use the one propose_* or get_proposal returned")]
    HashMismatch,
    #[error("{what}; the proposal cannot be applied, propose again")]
    Tampered { what: String },
    #[error("{path} already exists; propose a patch instead, or pick another path")]
    TargetExists { path: String },
    #[error(
        "{path} differs from the existing {existing} only by case or Unicode normalization; pick another name"
    )]
    TargetCollides { path: String, existing: String },
    #[error("no proposal '{id}' in this vault (see list_proposals)")]
    ProposalNotFound { id: String },
    #[error("proposal {id} was already applied")]
    AlreadyApplied { id: String },
    #[error("the proposal was decided meanwhile")]
    DecidedMeanwhile,
    #[error("proposal {id} was rejected")]
    Rejected { id: String },
    #[error("proposal {id} was decided while its apply ran")]
    RejectedWhileApplying { id: String },
    /// `count` 0: the text does not occur at all.
    #[error("{}", edit_message(*index, *count))]
    EditNotUnique { index: usize, count: usize },
    #[error("{path} does not exist")]
    NoteMissing { path: String },
    #[error("{path} has no version {hash} in vaultgate's history (see get_note_history)")]
    VersionNotFound { path: String, hash: String },
    #[error("{message}")]
    QuotaExceeded { which: Quota, message: String },
    #[error("{what} is {len} bytes; the limit is {limit} (limits.max_path_bytes)")]
    PathTooLong { what: String, len: u64, limit: u64 },
    #[error("{message}")]
    HistoryNotTop { message: String },
    #[error("{message}")]
    HistoryStale { message: String },
    #[error(
        "{path} changed while the deletion ran; nothing was deleted. Call again without challenge fields for a new challenge"
    )]
    ChallengeStale { path: String },
    /// `what`: the kind of call (`apply`, `undo/redo`).
    #[error("this idempotencyKey was used with other arguments; use a new key for a new {what}")]
    IdempotencyConflict { what: &'static str },
    /// A batch of the CLI's applies of which some failed; `first` is the first failure's code.
    #[error("{failed} proposal(s) not applied")]
    NotApplied { failed: usize, first: Option<ErrorCode> },
}

fn stale_message(path: &str, why: &Stale) -> String {
    match why {
        Stale::SinceRead { expected, actual } => format!(
            "{path} changed since you read it (baseHash {expected}, now {}); read_note it again and re-propose",
            actual.as_deref().unwrap_or("missing")
        ),
        Stale::Gone => format!("{path} no longer exists; read the vault again and re-propose"),
        Stale::SinceProposed => {
            format!("{path} changed since the proposal was made; read_note it again and re-propose")
        }
        Stale::WhilePlanned => format!("{path} changed while the move was planned; apply again"),
        Stale::WhileApplying => format!(
            "{path} changed while the apply ran; everything it wrote was put back and the proposal is pending. Read the note again and re-propose"
        ),
    }
}

fn edit_message(index: usize, count: usize) -> String {
    if count == 0 {
        format!("edits[{index}].oldText does not occur in the note; copy it exactly from read_note")
    } else {
        format!(
            "edits[{index}].oldText occurs {count} times; include more surrounding text so it occurs once"
        )
    }
}
