//! gateway
#![forbid(unsafe_code)]
pub mod cli;
