//! Black-box tests of the `audit` crate through its public API, one binary with modules.
#![allow(clippy::unwrap_used)]

mod chain;
mod common;
mod concurrency;
mod export;
mod fields;
mod since;
mod tail;
mod tamper;
mod torn;
