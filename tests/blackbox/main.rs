//! Black-box tests: the real `vaultgate` binary, driven through the CLI and a real MCP client
//! (rmcp over stdio), on fixture vaults copied into a fresh temporary folder per test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

mod approval;
mod attachments;
mod audit_closed;
mod browser;
mod crash;
mod critical;
mod frontmatter;
mod git;
mod history;
mod http;
mod index;
mod limits;
mod load;
mod notify;
mod operator;
mod paging;
mod proposals;
mod query;
mod review_browser;
mod review_http;
mod security;
mod shell;
mod smoke;
mod stdio;
mod tunnel;
mod txn;
