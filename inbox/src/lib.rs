//! Durable state of the gateway: `state.sqlite` (credentials, per-vault revisions; proposals,
//! challenges, idempotency keys and history as they land) with versioned schema migrations.
//!
//! It never decides policy: callers pass already-validated values; it stores and reads them.
#![forbid(unsafe_code)]

mod credentials;
mod db;

pub use credentials::{Credential, CredentialId, NewCredential};
pub use db::{State, StateError};
