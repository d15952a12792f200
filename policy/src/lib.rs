//! Pure rules of vaultgate: permission tiers and capabilities, the tool risk table, vault-relative
//! paths (`VaultPath`) and the path policy, the escaping of text shown to a person, and the stable
//! error codes of docs/contract.md#error-codes.
//!
//! This crate does no I/O and depends on no other workspace crate; it must never touch the file system.
#![forbid(unsafe_code)]

pub mod code;
pub mod path;
pub mod text;
pub mod tier;
pub mod tools;

pub use code::ErrorCode;
pub use path::{FolderPath, Layout, NoteClass, PathError, VaultPath};

pub use tier::{Capability, MayApply, Tier, may_apply};
pub use tools::{TOOLS, ToolKind, ToolSpec};
