//! proposals
#![forbid(unsafe_code)]
