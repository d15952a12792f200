//! The edges of vaultgate: MCP over stdio and Streamable HTTP (rmcp + axum), the review page, the
//! CLI (clap), the demo and client configurations. Handlers are thin: parse → engine → map.
//!
//! It owns the wire (JSON-RPC, HTTP, terminal) and the environment, and nothing else: it never
//! decides a check, never touches a vault or the state database, and never builds an audit entry —
//! all of that is the engine's.
#![forbid(unsafe_code)]

mod approval;
pub mod cli;
mod clientconf;
mod demo;
mod describe;
mod dispatch;
pub mod http;
mod jobs;
mod logging;
mod malloc;
pub mod mcp;
mod pdf;
// The generated pages of docs/reference/, held equal to the code by its test.
mod card;
#[cfg(test)]
mod reference;
mod resources;
mod review;
mod serve;
mod teamcalls;
mod teamsync;
pub mod tools;
mod tunnel;
