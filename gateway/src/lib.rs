//! The edge of vaultgate: MCP over stdio (and Streamable HTTP), authentication, the CLI, and the
//! service layer (`core`) that runs each operation once for all of them.
//!
//! It is the only crate that knows MCP, JSON-RPC, HTTP, environment variables and the runtime;
//! handlers stay thin and never write to a vault themselves.
#![forbid(unsafe_code)]

pub mod apply;
pub mod auth;
pub mod changes;
pub mod cli;
mod clientconf;
pub mod core;
pub mod critical;
mod demo;
mod describe;
pub mod error;
pub mod history;
pub mod home;
pub mod http;
mod logging;
pub mod mcp;
pub mod proposing;
mod resources;
mod serve;
pub mod tools;
