//! Running the MCP server on a transport.

use std::sync::Arc;

use rmcp::ServiceExt;

use crate::mcp::McpServer;
use engine::auth::Token;
use engine::core::Core;
use engine::error::GatewayError;

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, GatewayError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(GatewayError::Io)
}

/// Serves one client over stdin/stdout until it disconnects.
pub fn stdio(core: Arc<Core>, token: Token) -> Result<(), GatewayError> {
    runtime()?.block_on(async move {
        let _watches = engine::changes::start(&core);
        resume_jobs(&core);
        // SECURITY(T-HTTP3): a stdio message is bounded like an HTTP body; a longer line is
        // dropped as it streams in (memory stays bounded), and the connection goes on.
        let max_line = core.config().server.max_body_bytes;
        let (read, write) = rmcp::transport::io::stdio_pipes();
        let transport = rmcp::transport::async_rw::AsyncRwTransport::new_server(read, write)
            .with_max_line_length(max_line);
        let server = McpServer::stdio(core, token);
        let running = server
            .serve(transport)
            .await
            .map_err(|e| GatewayError::Internal(format!("MCP initialization failed: {e}")))?;
        running
            .waiting()
            .await
            .map_err(|e| GatewayError::Internal(format!("MCP server task failed: {e}")))?;
        Ok(())
    })
}

/// Runs the jobs a stopped process left queued (crate::jobs), beside the transport.
pub(crate) fn resume_jobs(core: &Arc<Core>) {
    let core = core.clone();
    tokio::task::spawn_blocking(move || crate::jobs::resume(&core));
}

/// A line for the person at the terminal (stderr; stdout may belong to JSON-RPC).
pub(crate) fn announce(s: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{s}");
}
