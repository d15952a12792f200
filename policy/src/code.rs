//! The stable wire codes of docs/contract.md#error-codes. Append-only: a code, once shipped, is never renamed or removed.

use serde::{Deserialize, Serialize};

macro_rules! codes {
    ($($variant:ident),* $(,)?) => {
        /// A stable error code as sent to clients and printed by the CLI.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        pub enum ErrorCode { $($variant),* }

        impl ErrorCode {
            /// Every code, in SPEC order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),*];

            /// The code as it appears on the wire.
            pub fn as_str(self) -> &'static str {
                match self { $(ErrorCode::$variant => stringify!($variant)),* }
            }
        }
    };
}

codes!(
    UNAUTHORIZED,
    CREDENTIAL_REVOKED,
    CREDENTIAL_EXPIRED,
    CAPABILITY_DENIED,
    VAULT_TARGET_REQUIRED,
    VAULT_NOT_FOUND,
    PATH_INVALID,
    PATH_DENIED,
    PATH_OUTSIDE_VAULT,
    NOT_FOUND,
    NOT_TEXT,
    TOO_LARGE,
    INVALID_ARGUMENT,
    EDIT_NOT_UNIQUE,
    PROPOSAL_NOT_FOUND,
    PROPOSAL_ALREADY_APPLIED,
    PROPOSAL_REJECTED,
    PROPOSAL_HASH_MISMATCH,
    PROPOSAL_TAMPERED,
    PROPOSAL_STALE_BASE,
    PROPOSAL_TARGET_EXISTS,
    IDEMPOTENCY_CONFLICT,
    CHALLENGE_REQUIRED,
    CHALLENGE_MISMATCH,
    CHALLENGE_EXPIRED,
    CHALLENGE_CONSUMED,
    CHALLENGE_STALE,
    HISTORY_NOT_TOP,
    HISTORY_STALE,
    OUTPUT_LIMIT_EXCEEDED,
    QUOTA_EXCEEDED,
    AUDIT_UNAVAILABLE,
    APPROVAL_DECLINED,
    VAULT_BUSY,
    VAULT_HISTORY_REWRITTEN,
    INTERNAL,
);

impl ErrorCode {
    /// Whether the same call may succeed if simply sent again later.
    pub fn retryable(self) -> bool {
        matches!(
            self,
            ErrorCode::INTERNAL | ErrorCode::AUDIT_UNAVAILABLE | ErrorCode::VAULT_BUSY
        )
    }
}

impl ErrorCode {
    /// What the code means, for the generated error reference (`docs/reference/errors.md`).
    /// A `match` without a wildcard: a new code does not build until it is documented.
    pub fn meaning(self) -> &'static str {
        use ErrorCode::*;
        match self {
            UNAUTHORIZED => {
                "The request carried no token, a malformed one, one this home did not sign, or one for another gateway."
            }
            CREDENTIAL_REVOKED => "The token was valid, but its credential has been revoked.",
            CREDENTIAL_EXPIRED => "The token's credential has passed its expiry.",
            CAPABILITY_DENIED => {
                "The credential's tier does not allow this tool or this apply (a vault outside its scope is `VAULT_NOT_FOUND` instead); also a client that cannot ask its user when the apply needs an in-client approval."
            }
            VAULT_TARGET_REQUIRED => {
                "Several vaults are open to this credential and no default is set, so the call must name one."
            }
            VAULT_NOT_FOUND => "No vault with that id is registered, or it is not open to this credential.",
            PATH_INVALID => {
                "The path is not a valid vault-relative path: absolute, `..`, a backslash, a control character, empty segments, too long, or the wrong extension."
            }
            PATH_DENIED => {
                "The path is valid but outside what this call may touch: a hidden folder, `.vaultgate/`, the inbox as a target, or a note outside the vault's notes folders."
            }
            PATH_OUTSIDE_VAULT => "A symlink on the path leads out of the vault.",
            NOT_FOUND => "No note, attachment, entry or version exists at that path or id.",
            NOT_TEXT => {
                "The file is not UTF-8 text, or (for `read_attachment_text`) the PDF is encrypted, corrupt or yields no text."
            }
            TOO_LARGE => "The file is over the read limit (2 MiB for a note).",
            INVALID_ARGUMENT => {
                "An argument is missing, of the wrong type, over a limit of `[limits]` (the message names it), or a cursor is forged, reused with other arguments, or outdated."
            }
            EDIT_NOT_UNIQUE => {
                "An edit's `oldText` of `propose_note_patch` occurs more than once (or not at all) in the note, so the edit would be ambiguous."
            }
            PROPOSAL_NOT_FOUND => "No proposal with that id exists in this vault.",
            PROPOSAL_ALREADY_APPLIED => "The proposal was applied already.",
            PROPOSAL_REJECTED => "The proposal was rejected and can no longer be applied.",
            PROPOSAL_HASH_MISMATCH => {
                "The `proposalHash` sent does not equal the one recorded for the proposal."
            }
            PROPOSAL_TAMPERED => {
                "The proposal's files in the inbox were changed, moved or removed after it was made: the signature or the content hash no longer verifies."
            }
            PROPOSAL_STALE_BASE => {
                "The target note changed since the proposal was made (its hash is not `baseHash`), or it was edited while the apply ran and the apply was rolled back."
            }
            PROPOSAL_TARGET_EXISTS => {
                "A new note or a move would land on a path that exists, or on one that differs from an existing path only by case or Unicode normalization."
            }
            IDEMPOTENCY_CONFLICT => "The `idempotencyKey` was used before with other arguments.",
            CHALLENGE_REQUIRED => {
                "A critical tool was called without a complete challenge: the answer carries a fresh challenge."
            }
            CHALLENGE_MISMATCH => {
                "The challenge was made for other arguments, another key or another credential, or its `planHash` is wrong."
            }
            CHALLENGE_EXPIRED => "The challenge is older than `challenge_ttl_seconds`.",
            CHALLENGE_CONSUMED => "The challenge was executed already; a critical call runs once.",
            CHALLENGE_STALE => "The vault changed since the challenge was made, so its plan no longer holds.",
            HISTORY_NOT_TOP => "`expectedHistoryEntryId` is not the entry at the top of the vault's history.",
            HISTORY_STALE => {
                "A file the undo or redo would write changed since that entry; `staleTop` names it."
            }
            OUTPUT_LIMIT_EXCEEDED => {
                "One item of the answer alone is larger than `max_output_bytes` (a huge diff, for example)."
            }
            QUOTA_EXCEEDED => {
                "The credential holds too many pending proposals, or too many bytes of them, or the vault's inbox is full."
            }
            AUDIT_UNAVAILABLE => {
                "The call's audit record could not be written (a full disk, a broken or replaced log), so nothing was done."
            }
            APPROVAL_DECLINED => {
                "The person declined the in-client approval, cancelled it, or did not answer in time."
            }
            VAULT_BUSY => {
                "The vault's writer did not finish this apply, reject, undo/redo or challenge within `apply_wait_seconds`; it goes on, and happens once."
            }
            VAULT_HISTORY_REWRITTEN => {
                "A team vault's remote branch no longer descends from the head the team registered: someone rewrote its history, so nothing is applied there."
            }
            INTERNAL => "Something failed inside the gateway; the operator's log (stderr) says what.",
        }
    }

    /// What to do next, for the same reference.
    pub fn next_step(self) -> &'static str {
        use ErrorCode::*;
        match self {
            UNAUTHORIZED => {
                "Send `Authorization: Bearer <token>` (HTTP) or set `VAULTGATE_TOKEN` (stdio) with a token from `vaultgate token issue` of this home."
            }
            CREDENTIAL_REVOKED | CREDENTIAL_EXPIRED => {
                "Ask the owner for a new token (`vaultgate token issue`); the old one never works again."
            }
            CAPABILITY_DENIED => {
                "Use a tool your tier allows (`describe --json` lists them), ask the owner to raise the tier (`vaultgate token set-tier`), or have a person apply on the review page or with `vaultgate apply`."
            }
            VAULT_TARGET_REQUIRED => {
                "Pass `vault` (ids from `vault_list`), or set a default with `vaultgate vault set-default`."
            }
            VAULT_NOT_FOUND => "Call `vault_list` for the vaults this credential can see.",
            PATH_INVALID => {
                "Use a vault-relative path such as `z/attention.md`, as `list_notes` returns them."
            }
            PATH_DENIED => {
                "Use a path inside the vault's notes; the owner sets the folders with `vault add --notes`."
            }
            PATH_OUTSIDE_VAULT => {
                "Nothing to do from the client; the owner can replace the link with the file itself."
            }
            NOT_FOUND => {
                "Find the path with `list_notes` or `search_note_content`, or the version with `get_note_history`."
            }
            NOT_TEXT => {
                "Read notes as UTF-8 Markdown; for other files use `list_attachments`, and for PDFs `read_attachment_text` where the owner turned it on."
            }
            TOO_LARGE => "Split the note by hand; agents cannot read or propose notes over the limit.",
            INVALID_ARGUMENT => {
                "Fix the argument the message names; for a changed vault, search again without the cursor."
            }
            EDIT_NOT_UNIQUE => "Read the note again and make `oldText` longer so it occurs exactly once.",
            PROPOSAL_NOT_FOUND => "List proposals with `list_proposals` (or `vaultgate inbox list`).",
            PROPOSAL_ALREADY_APPLIED | PROPOSAL_REJECTED => {
                "Nothing to do; make a new proposal if the change is still wanted."
            }
            PROPOSAL_HASH_MISMATCH => "Fetch the proposal with `get_proposal` and send its `proposalHash`.",
            PROPOSAL_TAMPERED => {
                "Reject the proposal (`vaultgate inbox reject`) and propose the change again; find who edited the inbox."
            }
            PROPOSAL_STALE_BASE => {
                "Read the note again (`read_note`) and propose the change against its new hash."
            }
            PROPOSAL_TARGET_EXISTS => "Choose another path, or propose a patch to the existing note.",
            IDEMPOTENCY_CONFLICT => {
                "Use a new `idempotencyKey` for a different call, or resend the first call's exact arguments."
            }
            CHALLENGE_REQUIRED | CHALLENGE_MISMATCH | CHALLENGE_STALE => {
                "Check the fresh `challenge` in the answer and repeat the same call with its `challengeId`, `planHash` and `acknowledged: true`."
            }
            CHALLENGE_EXPIRED => "Repeat the first call for a new challenge, then confirm it in time.",
            CHALLENGE_CONSUMED => {
                "Nothing to do: the operation ran. Call the tool again with a new key for a new operation."
            }
            HISTORY_NOT_TOP => "Call `history_status` and pass the top entry's id.",
            HISTORY_STALE => "Look at the file `staleTop` names; undo by hand or propose the change instead.",
            OUTPUT_LIMIT_EXCEEDED => {
                "Make the narrower call the message names (fewer paths, a smaller page, one proposal at a time)."
            }
            QUOTA_EXCEEDED => {
                "Wait for the owner to apply or reject pending proposals, or ask them to raise `[limits]` in `gateway.toml`."
            }
            AUDIT_UNAVAILABLE => {
                "The owner frees disk space or repairs the log (`vaultgate doctor`); then retry with the same `idempotencyKey`."
            }
            APPROVAL_DECLINED => "Nothing was changed; ask the person, or leave the proposal for review.",
            VAULT_BUSY => {
                "Send the same call again with the same idempotencyKey: it answers the result once the write is done."
            }
            VAULT_HISTORY_REWRITTEN => {
                "A person finds out why the history was rewritten; then an operator runs `vaultgate vault resync ID --yes`."
            }
            INTERNAL => "Retry later; the owner reads the server's log and runs `vaultgate doctor`.",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Snapshot of the code list: codes are append-only (docs/contract.md#error-codes).
    #[test]
    fn code_list_is_the_spec_list_in_order() {
        let names: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            names.join(","),
            "UNAUTHORIZED,CREDENTIAL_REVOKED,CREDENTIAL_EXPIRED,CAPABILITY_DENIED,VAULT_TARGET_REQUIRED,\
VAULT_NOT_FOUND,PATH_INVALID,PATH_DENIED,PATH_OUTSIDE_VAULT,NOT_FOUND,NOT_TEXT,TOO_LARGE,\
INVALID_ARGUMENT,EDIT_NOT_UNIQUE,PROPOSAL_NOT_FOUND,PROPOSAL_ALREADY_APPLIED,PROPOSAL_REJECTED,\
PROPOSAL_HASH_MISMATCH,PROPOSAL_TAMPERED,PROPOSAL_STALE_BASE,PROPOSAL_TARGET_EXISTS,\
IDEMPOTENCY_CONFLICT,CHALLENGE_REQUIRED,CHALLENGE_MISMATCH,CHALLENGE_EXPIRED,CHALLENGE_CONSUMED,\
CHALLENGE_STALE,HISTORY_NOT_TOP,HISTORY_STALE,OUTPUT_LIMIT_EXCEEDED,QUOTA_EXCEEDED,\
AUDIT_UNAVAILABLE,APPROVAL_DECLINED,VAULT_BUSY,VAULT_HISTORY_REWRITTEN,INTERNAL"
        );
    }

    #[test]
    fn serde_uses_the_wire_name() {
        let s = serde_json::to_string(&ErrorCode::PATH_DENIED).unwrap_or_default();
        assert_eq!(s, "\"PATH_DENIED\"");
    }
}
