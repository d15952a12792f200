//! The MCP surface (rmcp): initialize, the static tool catalog, resources. Thin: every call goes
//! to `Core`, and every error becomes a result in `error_result`, the one mapping to the wire.
// SPEC §4 requires the logging capability (vault-change log messages); rmcp marks it deprecated
// (SEP-2577) but still negotiates it for the protocol versions we serve.
#![allow(deprecated)]

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ResourceContents,
    ServerCapabilities, ServerConfig, SetLevelRequestParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};

use crate::auth::Token;
use crate::core::{Caller, Core, Transport};
use crate::error::GatewayError;
use crate::resources;
use crate::tools::CATALOG;

pub const INSTRUCTIONS: &str = "vaultgate serves Markdown knowledge vaults. Before anything else, read the resource \
`vaultgate://invariants` and `vaultgate://vault/{id}` for the vault you work on (vault_list gives the ids). \
Reads are direct. You never write a file: every change is a proposal that a reviewer applies. \
If the answer to a mutating call was lost, retry it only with the same idempotencyKey, never a new one. \
Critical tools (permanent deletion) need two calls: the first returns a challenge, the second repeats the \
call with challengeId, planHash and acknowledged: true.";

/// One MCP connection's handler. The credential is re-read from the database on every request.
#[derive(Clone)]
pub struct McpServer {
    core: Arc<Core>,
    /// The stdio token (from `VAULTGATE_TOKEN`); `None` over HTTP, where the auth middleware
    /// authenticates each request and hands its `Caller` down in the request extensions.
    token: Option<Token>,
}

impl McpServer {
    pub fn stdio(core: Arc<Core>, token: Token) -> McpServer {
        McpServer {
            core,
            token: Some(token),
        }
    }

    pub fn http(core: Arc<Core>) -> McpServer {
        McpServer { core, token: None }
    }

    /// Who is calling, decided freshly for this request.
    async fn caller(&self, ctx: &RequestContext<RoleServer>) -> Result<Caller, GatewayError> {
        match &self.token {
            Some(token) => {
                let core = self.core.clone();
                let token = token.clone();
                blocking(move || core.authenticate(&token, Transport::Stdio))
                    .await
                    .map_err(|_| GatewayError::Internal("auth worker stopped".into()))?
            }
            None => ctx
                .extensions
                .get::<http::request::Parts>()
                .and_then(|p| p.extensions.get::<Caller>())
                .cloned()
                .ok_or(GatewayError::Unauthorized(
                    "no authenticated credential on this request",
                )),
        }
    }
}

/// A refusal or failure as a tool result: `isError`, one text block of SPEC §4 JSON, and no
/// `structuredContent` (SDKs validate it against the output schema even on errors).
pub fn error_result(e: &GatewayError) -> CallToolResult {
    if e.code() == policy::ErrorCode::INTERNAL {
        tracing::error!(error = %e, "internal error in a tool call");
    }
    CallToolResult::error(vec![ContentBlock::text(e.to_json().to_string())])
}

/// Protocol-level refusal for non-tool requests (resources): JSON-RPC error with the code in data.
fn rpc_error(e: &GatewayError) -> McpError {
    let data = Some(e.to_json());
    match e.code() {
        policy::ErrorCode::INTERNAL => McpError::internal_error(e.client_message(), data),
        policy::ErrorCode::NOT_FOUND | policy::ErrorCode::VAULT_NOT_FOUND => {
            McpError::resource_not_found(e.client_message(), data)
        }
        _ => McpError::invalid_params(e.client_message(), data),
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, McpError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| McpError::internal_error("the request worker stopped", None))
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .enable_logging()
            .build();
        let mut info = Implementation::new("vaultgate", env!("CARGO_PKG_VERSION"));
        info.title = Some("vaultgate — safe MCP access to Markdown vaults".into());
        ServerConfig::new(capabilities)
            .with_server_info(info)
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(CATALOG.clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if policy::tools::find(&request.name).is_none() || !CATALOG.iter().any(|t| t.name == request.name) {
            return Err(McpError::invalid_params(
                format!("unknown tool '{}'", request.name),
                None,
            ));
        }
        let caller = match self.caller(&context).await {
            Ok(c) => c,
            Err(e) => return Ok(error_result(&e).into()),
        };
        let core = self.core.clone();
        let name = request.name.to_string();
        let args = request.arguments.unwrap_or_default();
        let outcome = blocking(move || core.call_tool_as(&caller, &name, args)).await?;
        match outcome {
            None => Err(McpError::invalid_params(
                format!("unknown tool '{}'", request.name),
                None,
            )),
            Some(Ok(value)) => Ok(CallToolResult::structured(value).into()),
            Some(Err(e)) => Ok(error_result(&e).into()),
        }
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let caller = self.caller(&context).await.map_err(|e| rpc_error(&e))?;
        let core = self.core.clone();
        blocking(move || resources::list(&core, &caller))
            .await?
            .map(ListResourcesResult::with_all_items)
            .map_err(|e| rpc_error(&e))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(ListResourceTemplatesResult::with_all_items(resources::templates()))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let caller = self.caller(&context).await.map_err(|e| rpc_error(&e))?;
        let core = self.core.clone();
        let uri = request.uri.clone();
        let text = blocking(move || resources::read(&core, &caller, &uri))
            .await?
            .map_err(|e| rpc_error(&e))?;
        let mut contents = ResourceContents::text(text, request.uri);
        if let ResourceContents::TextResourceContents { mime_type, .. } = &mut contents {
            *mime_type = Some("text/markdown".into());
        }
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    async fn set_level(
        &self,
        _request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        // Accepted; vault-change log messages are sent only to clients that set a level.
        Ok(())
    }
}
