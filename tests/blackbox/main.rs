//! Black-box tests: the real `vaultgate` binary, driven through the CLI and a real MCP client
//! (rmcp over stdio), on fixture vaults copied into a fresh temporary folder per test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

// Shared: the fixture home, CLI runs, MCP clients, bounded calls (`call`, `ok`), the audit log.
mod util;

mod approval; // in-client approval through the official Python SDK (stdio, HTTP, both protocols)
mod attachments; // list_attachments, read_attachment_text and the sandboxed PDF worker
mod audit_closed; // a full disk or a broken log refuses every call before anything changes
mod audit_export; // audit export and audit verify --file: offline, byte-exact, named breaks
mod browser; // the headless-Chromium harness of the review page tests
mod card; // the approval card over the protocol: the resource, _meta, sealed approvals
mod card_browser; // the approval card in a real MCP Apps host (ext-apps AppBridge) in headless Chromium
mod crash; // kill -9 at every step of every write, then recovery
mod critical; // delete_permanent and empty_trash through their two-phase challenge
mod frontmatter; // propose_frontmatter_update changes only the named keys
mod git; // one commit per change, nothing of the repository's runs, hostile repositories
mod history; // undo and redo, shared by every client
mod http; // Streamable HTTP: Host, Origin, bearer, sessions, sizes, loopback only
mod index; // the search index stays fresh, and answers as the scan would
mod limits; // every input bounded before work, the inbox quotas
mod load; // the read path under concurrent load
mod notify; // change announcements to subscribers and loggers
mod operator; // what the operator reads and runs: escaped text, CLI, doctor
mod paging; // sealed cursors walk every list exactly once
mod proposals; // every proposal kind and every refusal code of apply
mod query; // query_notes over frontmatter
mod review_browser; // the review page in a real browser
mod review_http; // the review page attacked over raw HTTP; review --open
mod security; // path corpus, token forgery and revocation, invisible characters
mod shell; // completions and man pages, checked by the shells
mod smoke; // the stdio surface: initialize, tools/list, every read tool
mod stdio; // stdio transport: tokens, revocation, the audit of every call
mod team; // team mode: gateways on one PostgreSQL share credentials and one audit chain
mod team_applier; // team mode: an apply received while another gateway holds the lease runs there
mod team_approval; // team mode: a person's click on the card is used once across the team
mod team_critical; // team mode: a challenge issued on one gateway executes once on any
mod team_faults; // team mode: a remote that declines pushes, or is gone, changes nothing
mod team_group; // team mode: applies waiting on one gateway share one push
mod team_invariants; // team mode: what every team scenario ends with
mod team_lease; // team mode: a gateway cut off from the database mid-apply is fenced out
mod team_soak; // team mode: three gateways soaked with kills and a person pushing
mod team_storm; // team mode: agents patch the notes a person pushes to; nothing is lost
mod team_upkeep; // team mode: a serving gateway packs its clones when git counts too many loose objects
mod team_writes; // team mode: proposals in the database, applies pushed to the vault's remote
mod tunnel; // the ChatGPT tunnel: setup, supervision, the profile folder, orphans
mod txn; // the one write transaction: rollback, partial success, exactly once
