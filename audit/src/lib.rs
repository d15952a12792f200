//! audit
#![forbid(unsafe_code)]
