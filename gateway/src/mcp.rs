//! The MCP surface (rmcp): initialize, the static tool catalog, resources. Thin: every call goes
//! to `Core`, and every error becomes a result in `error_result`, the one mapping to the wire.
// docs/contract.md#the-mcp-surface requires the logging capability (vault-change log messages); rmcp marks it deprecated
// (SEP-2577) but still negotiates it for the protocol versions we serve.
#![allow(deprecated)]

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ResourceContents,
    ServerCapabilities, ServerConfig, SetLevelRequestParams,
};
use rmcp::model::{
    InitializeRequestParams, InitializeResult, LoggingLevel, LoggingMessageNotificationParam,
    ResourceUpdatedNotificationParam, SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};

use crate::resources;
use crate::tools::CATALOG;
use engine::auth::Token;
use engine::core::{Caller, Core, Transport};
use engine::error::GatewayError;
use engine::{ApprovalAnswer, ApprovalQuestion, ClientApproval};

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
    conn: Arc<Conn>,
    /// The stdio token (from `VAULTGATE_TOKEN`); `None` over HTTP, where the auth middleware
    /// authenticates each request and hands its `Caller` down in the request extensions.
    token: Option<Token>,
}

impl McpServer {
    pub fn stdio(core: Arc<Core>, token: Token) -> McpServer {
        McpServer {
            core,
            conn: Arc::default(),
            token: Some(token),
        }
    }

    pub fn http(core: Arc<Core>) -> McpServer {
        McpServer {
            core,
            conn: Arc::default(),
            token: None,
        }
    }

    /// Who is calling, decided freshly for this request.
    async fn caller(&self, ctx: &RequestContext<RoleServer>) -> Result<Caller, GatewayError> {
        match &self.token {
            Some(token) => {
                // As over HTTP: decided here when it needs no write (memory and one read).
                if let Some(caller) = self
                    .core
                    .credentials()
                    .authenticate_without_writing(token, Transport::Stdio)
                {
                    return Ok(caller);
                }
                let core = self.core.clone();
                let token = token.clone();
                blocking(move || core.credentials().authenticate(&token, Transport::Stdio))
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

/// Per-connection announcement preferences (a legacy session, or the stdio connection).
struct Conn {
    /// Resource URIs this connection subscribed to (`resources/subscribe`).
    subscriptions: Mutex<HashSet<String>>,
    /// Set by `logging/setLevel`; no log messages are sent before a client asks for them.
    log_level: Mutex<Option<LoggingLevel>>,
    forwarding: std::sync::atomic::AtomicBool,
    /// Dropped with the connection: its forwarding task then ends (rather than living on, holding
    /// a subscription, until the process exits).
    alive: tokio::sync::watch::Sender<()>,
}

impl Default for Conn {
    fn default() -> Self {
        Conn {
            subscriptions: Mutex::default(),
            log_level: Mutex::default(),
            forwarding: std::sync::atomic::AtomicBool::default(),
            alive: tokio::sync::watch::Sender::new(()),
        }
    }
}

fn rank(l: LoggingLevel) -> u8 {
    match l {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

fn vault_uri(id: &str) -> String {
    format!("vaultgate://vault/{id}")
}

/// Whether the credential behind this connection may still hear about `vault` (re-read each time,
/// so a revoked or re-scoped credential stops hearing at once).
fn may_hear(core: &Core, credential_id: &str, vault: &str) -> bool {
    match core.credentials().by_id(credential_id) {
        Ok(Some(c)) => !c.is_revoked() && !c.is_expired(engine::core::now_unix()) && c.may_see_vault(vault),
        _ => false,
    }
}

impl McpServer {
    /// Forwards vault changes to this connection's peer for as long as it is open.
    fn start_forwarding(&self, peer: rmcp::Peer<RoleServer>, credential_id: String) {
        if self
            .conn
            .forwarding
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return;
        }
        let core = self.core.clone();
        // Weak: the task must not keep its own connection alive.
        let weak = Arc::downgrade(&self.conn);
        let mut alive = self.conn.alive.subscribe();
        let mut rx = core.subscribe_changes();
        tokio::spawn(async move {
            loop {
                let change = tokio::select! {
                    // The connection is gone (its sender dropped): stop.
                    _ = alive.changed() => return,
                    r = rx.recv() => match r {
                        Ok(c) => c,
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    },
                };
                let Some(conn) = weak.upgrade() else {
                    return;
                };
                let uri = vault_uri(&change.vault);
                let subscribed = conn
                    .subscriptions
                    .lock()
                    .map(|s| s.contains(&uri))
                    .unwrap_or(false);
                let level = conn.log_level.lock().ok().and_then(|l| *l);
                let wants_log = level.is_some_and(|l| rank(l) <= rank(LoggingLevel::Info));
                drop(conn);
                if !subscribed && !wants_log {
                    continue;
                }
                let (c2, id, v) = (core.clone(), credential_id.clone(), change.vault.clone());
                if !blocking(move || may_hear(&c2, &id, &v)).await.unwrap_or(false) {
                    continue;
                }
                if subscribed
                    && peer
                        .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                        .await
                        .is_err()
                {
                    return;
                }
                if wants_log {
                    let mut p = LoggingMessageNotificationParam::new(
                        LoggingLevel::Info,
                        serde_json::json!({"type": "vault.changed", "vault": change.vault, "revision": change.revision}),
                    );
                    p.logger = Some("vaultgate.vault".into());
                    if peer.notify_logging_message(p).await.is_err() {
                        return;
                    }
                }
            }
        });
    }
}

/// A refusal or failure as a tool result: `isError`, one text block of docs/contract.md#the-mcp-surface JSON, and no
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

/// Runs a tool call on a blocking thread while this task stays free to ask the person whatever
/// the engine asks (2025 sessions, docs/contract.md#the-review-page-and-in-client-approval): the request must leave from the tool call's own
/// task, and the engine must not hold a thread's lock while a person decides.
async fn ask_while_calling(
    core: Arc<Core>,
    caller: Caller,
    name: String,
    args: serde_json::Map<String, serde_json::Value>,
    context: &RequestContext<RoleServer>,
) -> Result<Option<engine::Audited<Result<serde_json::Value, GatewayError>>>, McpError> {
    type Asked = (ApprovalQuestion, std::sync::mpsc::SyncSender<ApprovalAnswer>);
    let (questions, mut asked) = tokio::sync::mpsc::channel::<Asked>(1);
    let mut call = tokio::task::spawn_blocking(move || {
        let ask = move |q: &ApprovalQuestion| {
            let (answer_to, answer) = std::sync::mpsc::sync_channel(1);
            if questions.blocking_send((q.clone(), answer_to)).is_err() {
                return ApprovalAnswer::Declined;
            }
            answer
                .recv_timeout(crate::approval::wait_for(q))
                .unwrap_or(ApprovalAnswer::Declined)
        };
        crate::dispatch::call_tool(&core, &caller, &name, args, &ClientApproval::Ask(&ask))
    });
    loop {
        tokio::select! {
            done = &mut call => {
                return done.map_err(|_| McpError::internal_error("the request worker stopped", None));
            }
            Some((q, answer_to)) = asked.recv() => {
                let answer = crate::approval::ask(&context.peer, context, &q).await;
                let _ = answer_to.send(answer);
            }
        }
    }
}

/// Whether a call runs on the async worker itself: `read_note` of the current note only — one
/// file read (bounded by the read limit), its frontmatter parsed (bounded), and the call's record
/// appended (no sync for a read). An earlier version (`hash`) reads history objects or runs git,
/// so it goes to a blocking thread with searches, queries, lists, PDFs and every write.
// SECURITY(T-LIMIT3): a `read` client cannot stall the async workers with git subprocesses.
fn runs_inline(name: &str, args: &serde_json::Map<String, serde_json::Value>) -> bool {
    name == "read_note" && !args.contains_key("hash")
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, McpError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| McpError::internal_error("the request worker stopped", None))
}

impl ServerHandler for McpServer {
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        // A session's announcements go to the credential that opened it.
        if let Ok(caller) = self.caller(&context).await {
            self.start_forwarding(context.peer.clone(), caller.credential.id.as_str().to_owned());
        }
        self.negotiate_initialize(&request)
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let caller = self.caller(&context).await.map_err(|e| rpc_error(&e))?;
        let id = request.uri.strip_prefix("vaultgate://vault/").ok_or_else(|| {
            McpError::invalid_params("only vaultgate://vault/{id} can be subscribed to", None)
        })?;
        self.core
            .resolve_vault(&caller.credential, Some(id))
            .map_err(|e| rpc_error(&e))?;
        if let Ok(mut s) = self.conn.subscriptions.lock() {
            s.insert(request.uri);
        }
        self.start_forwarding(context.peer.clone(), caller.credential.id.as_str().to_owned());
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if let Ok(mut s) = self.conn.subscriptions.lock() {
            s.remove(&request.uri);
        }
        Ok(())
    }

    /// 2026-07-28 subscriptions: only vault overview URIs of visible vaults are accepted.
    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        let mut accepted = SubscriptionFilter::new();
        accepted.resource_subscriptions = requested.resource_subscriptions.as_ref().map(|uris| {
            uris.iter()
                .filter(|u| u.starts_with("vaultgate://vault/"))
                .cloned()
                .collect()
        });
        Some(accepted)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let caller = self
            .caller(context.request_context())
            .await
            .map_err(|e| rpc_error(&e))?;
        let credential_id = caller.credential.id.as_str().to_owned();
        let accepted: HashSet<String> = context
            .accepted()
            .resource_subscriptions
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        let mut rx = self.core.subscribe_changes();
        loop {
            let change = tokio::select! {
                _ = context.cancelled() => return Ok(()),
                c = rx.recv() => match c {
                    Ok(c) => c,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
                },
            };
            let uri = vault_uri(&change.vault);
            if !accepted.contains(&uri) {
                continue;
            }
            let (core, id, v) = (self.core.clone(), credential_id.clone(), change.vault.clone());
            if !blocking(move || may_hear(&core, &id, &v)).await? {
                continue;
            }
            if context.sink().notify_resource_updated(uri).await.is_err() {
                return Ok(());
            }
        }
    }

    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_logging()
            .build();
        // The approval card (docs/contract.md#the-review-page-and-in-client-approval).
        capabilities.extensions = Some(
            [(
                crate::card::EXTENSION.to_owned(),
                crate::card::extension_settings(),
            )]
            .into_iter()
            .collect(),
        );
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
        let mode = if request.name == "apply_proposal" {
            crate::approval::mode(&request, &context)
        } else {
            crate::approval::Mode::Unavailable
        };
        // The card's view goes to a session that declared the extension, and to a request the
        // card itself makes (`_meta["vaultgate/card"]`: hosts render the card without declaring
        // the extension); a sealed approval only to the former. Other clients pay nothing.
        let card_approval = crate::card::declared(context.client_capabilities().as_ref());
        // rmcp moves a request's `_meta` into the context.
        let wants_view = card_approval
            || crate::card::asks_view(Some(&context.meta))
            || crate::card::asks_view(request.meta.as_deref());
        let core = self.core.clone();
        let name = request.name.to_string();
        let args = request.arguments.clone().unwrap_or_default();
        let card_caller = (wants_view && crate::card::renders(&request.name)).then(|| caller.clone());
        let outcome = match mode {
            crate::approval::Mode::Ask => ask_while_calling(core, caller, name, args, &context).await?,
            // A call whose work is small and bounded runs here, not on a blocking thread: the
            // hand-off would cost more than the call (about 25 µs each way on 2 cores).
            // A team's record waits for the team's database: never on an async worker.
            crate::approval::Mode::Unavailable if runs_inline(&name, &args) && self.core.team().is_none() => {
                crate::dispatch::call_tool(&core, &caller, &name, args, &ClientApproval::Unavailable)
            }
            mode => {
                let wait = policy::tools::find(&name)
                    .filter(|s| s.waits_for_writer())
                    .map(|_| Duration::from_secs(core.config().limits.apply_wait_seconds));
                let tool = name.clone();
                // SECURITY(T-LIMIT4): a write that outlives its wait keeps a blocking thread until
                // the writer is free; at most MAX_WAITING_WRITES such calls wait at once, so
                // retries with new keys cannot take every thread the reads need.
                let waiting = match wait {
                    Some(wait) => match Waiting::claim(&WAITING_WRITES, MAX_WAITING_WRITES) {
                        Some(w) => Some(w),
                        None => {
                            // Refused before anything started, and recorded like any refusal.
                            let refused = blocking(move || {
                                let spec = policy::tools::find(&tool);
                                let args = serde_json::Value::Object(args);
                                let busy = vault_busy(&tool, wait);
                                match spec {
                                    Some(spec) => core
                                        .call(&caller, spec, &args, |_| Err::<serde_json::Value, _>(busy))
                                        .into_inner(),
                                    None => Err(busy),
                                }
                            })
                            .await?;
                            return Ok(match refused {
                                Ok(v) => structured(v).into(),
                                Err(e) => error_result(&e).into(),
                            });
                        }
                    },
                    None => None,
                };
                let work = blocking(move || {
                    let _waiting = waiting;
                    let approval = match &mode {
                        crate::approval::Mode::Defer => ClientApproval::Defer,
                        crate::approval::Mode::Answered(state, answer) => ClientApproval::Answered {
                            state,
                            answer: *answer,
                        },
                        _ => ClientApproval::Unavailable,
                    };
                    crate::dispatch::call_tool(&core, &caller, &name, args, &approval)
                });
                match wait {
                    None => work.await?,
                    // docs/contract.md#applying-a-proposal: past the wait the call answers
                    // VAULT_BUSY and the write goes on (its blocking task is not cancelled), so
                    // it happens once and its key answers the retry.
                    Some(wait) => match tokio::time::timeout(wait, work).await {
                        Ok(outcome) => outcome?,
                        Err(_) => return Ok(error_result(&vault_busy(&tool, wait)).into()),
                    },
                }
            }
        };
        match outcome.map(engine::Audited::into_inner) {
            None => Err(McpError::invalid_params(
                format!("unknown tool '{}'", request.name),
                None,
            )),
            Some(Ok(value)) => {
                let mut result = structured(value);
                if let Some(caller) = card_caller {
                    result.meta = card_meta(
                        &self.core,
                        caller,
                        &request,
                        result.structured_content.as_ref(),
                        card_approval,
                    )
                    .await;
                }
                Ok(result.into())
            }
            Some(Err(GatewayError::ApprovalAsked(req))) => Ok(CallToolResponse::InputRequired(
                crate::approval::input_required(&req),
            )),
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
            .map(|mut all| {
                all.push(crate::card::resource());
                ListResourcesResult::with_all_items(all)
            })
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
        if request.uri == crate::card::URI {
            let core = self.core.clone();
            blocking(move || core.record_read(&caller, "resource_read", crate::card::URI, Ok(())))
                .await?
                .map_err(|e| rpc_error(&e))?;
            return Ok(ReadResourceResult::new(vec![crate::card::contents()]).into());
        }
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
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let caller = self.caller(&context).await.map_err(|e| rpc_error(&e))?;
        if let Ok(mut l) = self.conn.log_level.lock() {
            *l = Some(request.level);
        }
        self.start_forwarding(context.peer.clone(), caller.credential.id.as_str().to_owned());
        Ok(())
    }
}

/// Calls waiting for a vault's writer in this process, and how many may.
static WAITING_WRITES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
const MAX_WAITING_WRITES: usize = 64;

/// One call's place among those waiting for a writer, given back when its write ends (not when
/// its caller stops waiting).
struct Waiting(&'static std::sync::atomic::AtomicUsize);

impl Waiting {
    fn claim(count: &'static std::sync::atomic::AtomicUsize, max: usize) -> Option<Waiting> {
        use std::sync::atomic::Ordering;
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Waiting(count))
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

fn vault_busy(tool: &str, waited: Duration) -> GatewayError {
    GatewayError::VaultBusy(format!(
        "the vault's writer did not finish this {tool} within {} s (another write holds it); it goes on \
         and happens once: send the same call again, with the same idempotencyKey, for its result",
        waited.as_secs()
    ))
}

/// The approval card's `_meta` for a result it renders: the proposal named by the call's `id`
/// argument, or by the new proposal's `id` (propose_*), in the call's vault.
async fn card_meta(
    core: &Arc<Core>,
    caller: Caller,
    request: &CallToolRequestParams,
    structured: Option<&serde_json::Value>,
    with_approval: bool,
) -> Option<rmcp::model::MetaObject> {
    let args = request.arguments.as_ref();
    let text = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).map(str::to_owned);
    let id = text(args.and_then(|a| a.get("id"))).or_else(|| text(structured.and_then(|s| s.get("id"))))?;
    let vault = text(args.and_then(|a| a.get("vault")));
    let core = core.clone();
    blocking(move || crate::card::result_meta(&core, &caller, vault.as_deref(), &id, with_approval))
        .await
        .ok()
        .flatten()
}

/// A success: `structuredContent` and the text block that repeats it. The text is written by
/// serde_json's writer, not through `Value`'s `Display` (the formatting machinery, several times
/// slower on a large note): a large `read_note` pays one encode for it.
fn structured(value: serde_json::Value) -> CallToolResult {
    let text = serde_json::to_string(&value).unwrap_or_else(|_| value.to_string());
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(value);
    result
}

#[cfg(test)]
mod waiting_tests {
    use super::*;

    #[test]
    fn at_most_max_writes_wait_and_each_place_is_given_back() {
        static COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let a = Waiting::claim(&COUNT, 2);
        let b = Waiting::claim(&COUNT, 2);
        assert!(a.is_some() && b.is_some());
        assert!(Waiting::claim(&COUNT, 2).is_none(), "a third waits nowhere");
        drop(a);
        let c = Waiting::claim(&COUNT, 2);
        assert!(c.is_some(), "a place given back is taken again");
        drop((b, c));
        assert_eq!(COUNT.load(std::sync::atomic::Ordering::Acquire), 0);
    }
}
