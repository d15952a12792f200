//! inbox
#![forbid(unsafe_code)]
