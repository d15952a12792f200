//! The read side of a vault: contained file access (`fs`), notes with frontmatter, links and tags,
//! and search with the exact semantics of SPEC §4.
//!
//! It never writes into a vault; every file it opens goes through `fs::VaultFs` and the path policy.
#![forbid(unsafe_code)]

pub mod fs;
