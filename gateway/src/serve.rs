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
        let server = McpServer::stdio(core, token);
        let running = server
            .serve(rmcp::transport::io::stdio_pipes())
            .await
            .map_err(|e| GatewayError::Internal(format!("MCP initialization failed: {e}")))?;
        running
            .waiting()
            .await
            .map_err(|e| GatewayError::Internal(format!("MCP server task failed: {e}")))?;
        Ok(())
    })
}

/// A line for the person at the terminal (stderr; stdout may belong to JSON-RPC).
pub(crate) fn announce(s: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{s}");
}
