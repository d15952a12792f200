//! `vaultgate serve`: MCP Streamable HTTP on loopback (docs/contract.md#transports-and-protocol-versions). Every request passes, in order:
//! Host check → Origin check → body-size check → bearer authentication → session binding, and
//! only then reaches rmcp's Streamable HTTP service and the same `McpServer` as stdio.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rmcp::transport::common::server_side_http::SessionId;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::mcp::McpServer;
use engine::auth::Token;
use engine::core::{Core, Transport};
use engine::error::GatewayError;

/// How long one request may take to produce its response head.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Resolves `--host` to a loopback address or refuses (docs/contract.md#transports-and-protocol-versions).
pub fn loopback_addr(host: &str, port: u16) -> Result<SocketAddr, GatewayError> {
    let ip: IpAddr = match host {
        "localhost" => IpAddr::from([127, 0, 0, 1]),
        other => other
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| {
                GatewayError::InvalidArgument(format!("--host '{other}' is not an IP address or 'localhost'"))
            })?,
    };
    // SECURITY(T-HTTP1): never listen beyond this machine; tunnels reach us through loopback.
    if !ip.is_loopback() {
        return Err(GatewayError::InvalidArgument(format!(
            "refusing to bind {ip}: vaultgate serves loopback only (127.0.0.1, ::1, localhost); \
             expose it through a tunnel that connects to loopback instead"
        )));
    }
    Ok(SocketAddr::new(ip, port))
}

mod revocations;

/// Per-process HTTP state shared by the middleware.
struct Gate {
    core: Arc<Core>,
    port: u16,
    allowed_origins: Vec<String>,
    max_body: usize,
    /// `Mcp-Session-Id` → the credential that opened it.
    sessions: Mutex<Sessions>,
    /// rmcp's legacy sessions: closed here when a limit needs room.
    manager: Arc<LocalSessionManager>,
}

/// Legacy sessions and who opened them. Bounded (docs/contract.md#limits-and-pagination): at most `max` open, at most
/// `per_credential` for one credential; to make room the longest idle one is closed first. A
/// forgotten session is refused (404) rather than left unguarded.
struct Sessions {
    bound: HashMap<String, Bound>,
    max: usize,
    per_credential: usize,
}

struct Bound {
    credential: String,
    last_used: Instant,
}

impl Sessions {
    fn new(max: usize, per_credential: usize) -> Sessions {
        Sessions {
            bound: HashMap::new(),
            max: max.max(1),
            per_credential: per_credential.max(1),
        }
    }

    fn owner(&self, sid: &str) -> Option<&str> {
        self.bound.get(sid).map(|b| b.credential.as_str())
    }

    fn touch(&mut self, sid: &str, now: Instant) {
        if let Some(b) = self.bound.get_mut(sid) {
            b.last_used = now;
        }
    }

    /// Binds a new session; returns the sessions to close so the limits hold.
    fn bind(&mut self, sid: String, credential: String, now: Instant) -> Vec<String> {
        let mut close = Vec::new();
        let mine = self.bound.values().filter(|b| b.credential == credential).count();
        for _ in self.per_credential..mine.saturating_add(1) {
            match self.longest_idle(Some(&credential)) {
                Some(old) => close.push(self.remove(&old)),
                None => break,
            }
        }
        for _ in self.max..self.bound.len().saturating_add(1) {
            match self.longest_idle(None) {
                Some(old) => close.push(self.remove(&old)),
                None => break,
            }
        }
        self.bound.insert(
            sid,
            Bound {
                credential,
                last_used: now,
            },
        );
        close
    }

    fn longest_idle(&self, of: Option<&str>) -> Option<String> {
        self.bound
            .iter()
            .filter(|(_, b)| of.is_none_or(|c| b.credential == c))
            .min_by_key(|(_, b)| b.last_used)
            .map(|(sid, _)| sid.clone())
    }

    fn remove(&mut self, sid: &str) -> String {
        self.bound.remove(sid);
        sid.to_owned()
    }

    fn forget(&mut self, sid: &str) {
        self.bound.remove(sid);
    }

    /// Drops the bindings of sessions rmcp has closed (idle timeout, client gone).
    fn retain_live(&mut self, live: &std::collections::HashSet<String>) {
        self.bound.retain(|sid, _| live.contains(sid));
    }
}

/// The routes of the listener bound to `served`: `/mcp`, `/healthz` and the review page.
pub fn router(core: Arc<Core>, served: SocketAddr, tunnel: Option<Arc<crate::tunnel::Supervisor>>) -> Router {
    let port = served.port();
    let max_body = core.config().server.max_body_bytes;
    let limits = &core.config().limits;
    let idle = Duration::from_secs(limits.session_idle_seconds.max(1));
    let mut manager = LocalSessionManager::default();
    // SECURITY(T-HTTP5): an abandoned session is closed and everything it holds freed.
    manager.session_config.keep_alive = Some(idle);
    let manager = Arc::new(manager);
    let gate = Arc::new(Gate {
        allowed_origins: core.config().server.allowed_origins.clone(),
        core: core.clone(),
        port,
        max_body,
        sessions: Mutex::new(Sessions::new(
            usize::try_from(limits.max_sessions).unwrap_or(usize::MAX),
            usize::try_from(limits.max_sessions_per_credential).unwrap_or(usize::MAX),
        )),
        manager: manager.clone(),
    });
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_hosts([
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("[::1]:{port}"),
        ])
        // Our own Origin check runs first (loopback origins on any port plus the configured list).
        .disable_allowed_origins()
        .with_max_request_body_bytes(max_body)
        .with_legacy_session_mode(true)
        // A stateless (2026-07-28) answer that is one terminal message leaves as one JSON body
        // instead of an SSE stream (fewer writes); legacy sessions keep their SSE streams.
        .with_json_response(true);
    config.sse_keep_alive = Some(Duration::from_secs(15));
    let mcp_core = core.clone();
    let service = StreamableHttpService::new(move || Ok(McpServer::http(mcp_core.clone())), manager, config);
    tokio::spawn(sweep_sessions(Arc::downgrade(&gate), idle));
    if core.team().is_some()
        && let Some(team) = &core.config().team
    {
        revocations::watch(&gate, team.database.clone());
    }
    let app = Router::new()
        .route_service("/mcp", service)
        .layer(middleware::from_fn_with_state(gate.clone(), guard))
        .route(
            "/healthz",
            get(|| async { axum::Json(serde_json::json!({"status": "ok"})) }),
        );
    // SECURITY(T-REVIEW2): the review page has its own guard (session cookie), never /mcp's bearer.
    let review = core.config().review.enabled;
    let app = if review {
        app.merge(crate::review::router(core, served, tunnel))
    } else {
        app
    };
    app.layer(middleware::from_fn_with_state((port, review), host_everywhere))
}

/// SECURITY(T-HTTP2): the Host check comes first on every route — `/healthz` and unknown paths
/// too — so a rebinding page learns nothing, not even that a server is there. `/mcp`'s guard and
/// the review page's make the same check themselves (the one audited, the other an HTML page).
async fn host_everywhere(State((port, review)): State<(u16, bool)>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let guarded = path == "/mcp" || (review && (path == "/review" || path.starts_with("/review/")));
    if !guarded && !host_ok(req.headers(), port) {
        let e =
            GatewayError::Forbidden("Host must be 127.0.0.1, localhost or [::1] with the served port".into());
        return refuse(StatusCode::FORBIDDEN, &e);
    }
    next.run(req).await
}

/// Forgets bindings of sessions rmcp has closed, and logs the live count when it changes (an
/// operator metric at debug level; tests read it from stderr).
async fn sweep_sessions(gate: std::sync::Weak<Gate>, idle: Duration) {
    let every = (idle / 4).clamp(Duration::from_millis(200), Duration::from_secs(30));
    let mut last = usize::MAX;
    loop {
        tokio::time::sleep(every).await;
        let Some(gate) = gate.upgrade() else {
            return;
        };
        let live: std::collections::HashSet<String> = gate
            .manager
            .sessions
            .read()
            .await
            .keys()
            .map(|k| k.to_string())
            .collect();
        let n = live.len();
        if let Ok(mut s) = gate.sessions.lock() {
            s.retain_live(&live);
        }
        if n != last {
            tracing::debug!(live_sessions = n, "legacy MCP sessions");
            last = n;
        }
    }
}

fn refuse(status: StatusCode, e: &GatewayError) -> Response {
    let mut resp = (status, axum::Json(e.to_json())).into_response();
    // docs/contract.md#team-mode: an unreachable audit (a team's database) is worth a retry soon.
    if status == StatusCode::SERVICE_UNAVAILABLE {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    if status == StatusCode::UNAUTHORIZED {
        let v = format!(
            "Bearer realm=\"vaultgate\", error=\"invalid_token\", error_description=\"{}\"",
            e.code().as_str()
        );
        if let Ok(h) = HeaderValue::from_str(&v) {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, h);
        }
    }
    resp
}

/// `Host` must name loopback with the served port (DNS-rebinding protection).
fn host_ok(headers: &HeaderMap, port: u16) -> bool {
    loopback_host(headers, port).is_some()
}

/// The request's `Host` (lowercased) when it names loopback with the served port.
pub(crate) fn loopback_host(headers: &HeaderMap, port: u16) -> Option<String> {
    let host = headers.get(header::HOST)?.to_str().ok()?.to_ascii_lowercase();
    ["127.0.0.1", "localhost", "[::1]"]
        .iter()
        .any(|name| host == format!("{name}:{port}"))
        .then_some(host)
}

/// `Origin`, when present, must be a loopback origin (any port: local tools such as the MCP
/// Inspector run on their own port) or one listed in `gateway.toml`.
fn origin_ok(headers: &HeaderMap, allowed: &[String]) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let Ok(origin) = origin.to_str() else {
        return false;
    };
    let origin = origin.to_ascii_lowercase();
    if allowed.iter().any(|a| a.eq_ignore_ascii_case(&origin)) {
        return true;
    }
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    let host = match rest.strip_prefix("[::1]") {
        Some(after) => return after.is_empty() || valid_port_suffix(after),
        None => rest,
    };
    let (name, after) = match host.find(':') {
        Some(i) => (&host[..i], &host[i..]),
        None => (host, ""),
    };
    matches!(name, "127.0.0.1" | "localhost") && (after.is_empty() || valid_port_suffix(after))
}

fn valid_port_suffix(s: &str) -> bool {
    s.strip_prefix(':')
        .is_some_and(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
}

fn bearer(headers: &HeaderMap) -> Option<Token> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return None;
    }
    Some(Token::new(token.trim().to_owned()))
}

/// Answers a refusal made before any credential was known, after recording it (aggregated per
/// window, code and remote: docs/contract.md#the-audit-log). A refusal whose record cannot be written answers
/// `AUDIT_UNAVAILABLE` instead.
async fn unauthenticated(
    gate: &Gate,
    remote: Option<IpAddr>,
    status: StatusCode,
    e: GatewayError,
) -> Response {
    let core = gate.core.clone();
    let recorded = tokio::task::spawn_blocking(move || {
        let r = core
            .credentials()
            .record_unauthenticated(Transport::Http, remote, &e);
        (r, e)
    })
    .await;
    match recorded {
        Ok((Ok(()), e)) => refuse(status, &e),
        _ => refuse(StatusCode::SERVICE_UNAVAILABLE, &GatewayError::AuditUnavailable),
    }
}

/// Answers a refusal of an authenticated request after recording it.
async fn refused_caller(
    gate: &Gate,
    caller: engine::core::Caller,
    status: StatusCode,
    e: GatewayError,
) -> Response {
    let core = gate.core.clone();
    let recorded = tokio::task::spawn_blocking(move || {
        let r = core.credentials().record_caller_refusal(&caller, &e);
        (r, e)
    })
    .await;
    match recorded {
        Ok((Ok(()), e)) => refuse(status, &e),
        _ => refuse(StatusCode::SERVICE_UNAVAILABLE, &GatewayError::AuditUnavailable),
    }
}

async fn guard(State(gate): State<Arc<Gate>>, mut req: Request, next: Next) -> Response {
    let remote = req
        .extensions()
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    // SECURITY(T-HTTP2): DNS rebinding — a web page's Host/Origin never match loopback.
    if !host_ok(req.headers(), gate.port) {
        let e =
            GatewayError::Forbidden("Host must be 127.0.0.1, localhost or [::1] with the served port".into());
        return unauthenticated(&gate, remote, StatusCode::FORBIDDEN, e).await;
    }
    if !origin_ok(req.headers(), &gate.allowed_origins) {
        let e = GatewayError::Forbidden(
            "Origin not allowed; add it to [server] allowed_origins in gateway.toml".into(),
        );
        return unauthenticated(&gate, remote, StatusCode::FORBIDDEN, e).await;
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let too_large = || GatewayError::InvalidArgument(format!("request body over {} bytes", gate.max_body));
    let oversize = declared.is_some_and(|n| n > gate.max_body as u64);
    // SECURITY(T-AUTH3): every request authenticates on its own; the row is read fresh each time.
    let Some(token) = bearer(req.headers()) else {
        if oversize {
            return unauthenticated(&gate, remote, StatusCode::PAYLOAD_TOO_LARGE, too_large()).await;
        }
        let e = GatewayError::Unauthorized("missing or malformed Authorization: Bearer header");
        return unauthenticated(&gate, remote, StatusCode::UNAUTHORIZED, e).await;
    };
    let core = gate.core.clone();
    // Most requests are decided from memory and one read, here; a refusal (its record) or a due
    // note of last use writes, so those go to a thread that may block.
    let fast = core
        .credentials()
        .authenticate_without_writing(&token, Transport::Http);
    let caller = match fast {
        Some(c) => c,
        None => {
            match tokio::task::spawn_blocking(move || {
                core.credentials()
                    .authenticate_from(&token, Transport::Http, remote)
            })
            .await
            {
                Ok(Ok(c)) => c,
                // A refusal's record could not be written: no record, no (other) answer.
                Ok(Err(e @ GatewayError::AuditUnavailable)) => {
                    return refuse(StatusCode::SERVICE_UNAVAILABLE, &e);
                }
                Ok(Err(e)) => {
                    if oversize {
                        return refuse(StatusCode::PAYLOAD_TOO_LARGE, &too_large());
                    }
                    return refuse(StatusCode::UNAUTHORIZED, &e);
                }
                Err(_) => {
                    return refuse(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        &GatewayError::Internal("auth".into()),
                    );
                }
            }
        }
    };
    // SECURITY(T-HTTP3): declared oversize bodies are refused before reading (rmcp enforces the
    // same limit while streaming a body without a length); audited as this caller's refusal.
    if oversize {
        return refused_caller(&gate, caller, StatusCode::PAYLOAD_TOO_LARGE, too_large()).await;
    }
    let cred_id = caller.credential.id.as_str().to_owned();
    // SECURITY(T-HTTP4): a session id carries no authority; it stays with the credential that opened it.
    let session = req
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(sid) = &session {
        let owner = gate.sessions.lock().ok().and_then(|mut m| {
            let o = m.owner(sid).map(str::to_owned);
            if o.as_deref() == Some(cred_id.as_str()) {
                m.touch(sid, Instant::now());
            }
            o
        });
        match owner {
            // Unknown here (never opened through this gate, or forgotten): the client re-initializes.
            None => {
                return (
                    StatusCode::NOT_FOUND,
                    Body::from("unknown or expired MCP session; initialize again"),
                )
                    .into_response();
            }
            Some(o) if o != cred_id => {
                let e = GatewayError::Forbidden("this MCP session belongs to another credential".into());
                return refused_caller(&gate, caller, StatusCode::FORBIDDEN, e).await;
            }
            Some(_) => {}
        }
    }
    let closing = req.method() == axum::http::Method::DELETE;
    req.extensions_mut().insert(caller);
    let mut resp = match tokio::time::timeout(REQUEST_TIMEOUT, next.run(req)).await {
        Ok(r) => r,
        Err(_) => return (StatusCode::GATEWAY_TIMEOUT, Body::from("request timed out")).into_response(),
    };
    // A session ended answers 204, as clients expect of a DELETE (the transport says 202).
    if closing && resp.status() == StatusCode::ACCEPTED {
        *resp.status_mut() = StatusCode::NO_CONTENT;
    }
    let mut close = Vec::new();
    if let Ok(mut m) = gate.sessions.lock() {
        match &session {
            None => {
                if let Some(new_sid) = resp.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()) {
                    close = m.bind(new_sid.to_owned(), cred_id, Instant::now());
                }
            }
            Some(sid) if closing || resp.status() == StatusCode::NOT_FOUND => m.forget(sid),
            Some(_) => {}
        }
    }
    for sid in close {
        if let Err(e) = gate.manager.close_session(&SessionId::from(sid)).await {
            tracing::warn!(error = %e, "closing a session to make room failed");
        }
    }
    resp
}

/// What `serve` takes from its edge besides the core: the environment (for the tunnel's child
/// and profile directory) and whether to start the tunnel (docs/contract.md#the-chatgpt-tunnel).
pub struct Extras {
    pub env: std::collections::BTreeMap<String, String>,
    pub tunnel: bool,
    /// The OS user, for the record of starting the tunnel.
    pub user: String,
}

/// Binds `addr` and serves until Ctrl-C.
pub fn serve(core: Arc<Core>, addr: SocketAddr, extras: Extras) -> Result<(), GatewayError> {
    let listener = std::net::TcpListener::bind(addr).map_err(|e| {
        GatewayError::InvalidArgument(format!(
            "cannot listen on {addr}: {e} (is another server running? try --port)"
        ))
    })?;
    serve_std(core, listener, extras)
}

/// Serves on an already bound listener until Ctrl-C or SIGTERM. While it listens, the home
/// records its pid, host and port, so `vaultgate review` finds it (docs/contract.md#the-review-page-and-in-client-approval); with the tunnel,
/// `tunnel-client` runs as its child and ends with it (docs/contract.md#the-chatgpt-tunnel).
pub fn serve_std(
    core: Arc<Core>,
    listener: std::net::TcpListener,
    extras: Extras,
) -> Result<(), GatewayError> {
    listener.set_nonblocking(true)?;
    crate::serve::runtime()?.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let local = listener.local_addr()?;
        // An answer leaves in several small writes (SSE): with Nagle's algorithm on, each call on
        // a kept-alive connection would wait for the client's delayed ACK (~40 ms).
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::warn!(error = %e, "TCP_NODELAY could not be set on an accepted connection");
            }
        });
        let _watches = engine::changes::start(&core);
        crate::teamsync::start(&core);
        crate::serve::resume_jobs(&core);
        let pid = std::process::id();
        engine::review::write_server_record(
            &core.home,
            &engine::review::ServerRecord {
                pid,
                host: local.ip().to_string(),
                port: local.port(),
            },
        )?;
        tracing::info!(%local, "serving MCP over Streamable HTTP");
        let review = if core.config().review.enabled {
            format!(
                "\nreview page: run `vaultgate --home {} review` for a one-time login link",
                core.home.dir.display()
            )
        } else {
            String::new()
        };
        // Also ends an orphan of a crashed `serve` (docs/contract.md#the-chatgpt-tunnel), with or without --tunnel.
        let tunnel = match crate::tunnel::Supervisor::new(core.clone(), extras.env, local).await {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!(error = %e, "the tunnel cannot be supervised by this server");
                None
            }
        };
        if extras.tunnel {
            let started = match &tunnel {
                Some(t) => t.start(&engine::core::Operator::cli(&extras.user)).await,
                None => Err(GatewayError::Config(
                    "no place for the tunnel profile (set HOME)".into(),
                )),
            };
            match started {
                Ok(()) => crate::serve::announce(&format!(
                    "tunnel: tunnel-client started; `vaultgate --home {} tunnel status` says when ChatGPT can reach it",
                    core.home.dir.display()
                )),
                Err(e) => crate::serve::announce(&format!("tunnel: not started: {}", e.client_message())),
            }
        }
        crate::serve::announce(&format!(
            "vaultgate serving MCP at http://{local}/mcp (Ctrl-C to stop){review}"
        ));
        let app = router(core.clone(), local, tunnel.clone());
        let served = axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
            .with_graceful_shutdown(shutdown())
            .await;
        if let Some(t) = &tunnel
            && let Err(e) = t.stop(None).await
        {
            tracing::warn!(error = %e, "stopping tunnel-client failed");
        }
        engine::review::remove_server_record(&core.home, pid);
        served?;
        // Refusals still counted are written before the process ends (docs/contract.md#the-audit-log).
        core.credentials().flush_refusals();
        Ok(())
    })
}

/// Ctrl-C, or SIGTERM (a service manager's stop).
async fn shutdown() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            if let Ok(v) = HeaderValue::from_str(v) {
                h.insert(*k, v);
            }
        }
        h
    }

    #[test]
    fn host_must_be_loopback_with_our_port() {
        for ok in ["127.0.0.1:8765", "localhost:8765", "[::1]:8765", "LOCALHOST:8765"] {
            assert!(host_ok(&headers(&[("host", ok)]), 8765), "{ok}");
        }
        for bad in [
            "evil.com:8765",
            "127.0.0.1:80",
            "localhost",
            "127.0.0.1.evil.com:8765",
            "",
            "0.0.0.0:8765",
        ] {
            assert!(!host_ok(&headers(&[("host", bad)]), 8765), "{bad}");
        }
        assert!(!host_ok(&HeaderMap::new(), 8765));
    }

    #[test]
    fn origin_rules() {
        let allowed = vec!["https://chatgpt.com".to_owned()];
        assert!(origin_ok(&HeaderMap::new(), &allowed));
        for ok in [
            "http://localhost:6274",
            "http://127.0.0.1:8765",
            "http://[::1]:3000",
            "https://chatgpt.com",
            "http://localhost",
        ] {
            assert!(origin_ok(&headers(&[("origin", ok)]), &allowed), "{ok}");
        }
        for bad in [
            "http://evil.com",
            "http://localhost.evil.com",
            "http://127.0.0.1.nip.io:8765",
            "null",
            "http://localhost:80x",
            "file://",
            "https://chatgpt.com.evil.com",
        ] {
            assert!(!origin_ok(&headers(&[("origin", bad)]), &allowed), "{bad}");
        }
    }

    #[test]
    fn session_bindings_are_bounded_per_credential_and_in_all() {
        let t0 = Instant::now();
        let at = |i: u64| t0 + Duration::from_millis(i);
        let mut s = Sessions::new(5, 3);
        assert!(s.bind("a1".into(), "a".into(), at(1)).is_empty());
        assert!(s.bind("a2".into(), "a".into(), at(2)).is_empty());
        assert!(s.bind("a3".into(), "a".into(), at(3)).is_empty());
        s.touch("a1", at(4));
        // A fourth session of `a` closes a's longest idle one (a2: a1 was used since).
        assert_eq!(s.bind("a4".into(), "a".into(), at(5)), vec!["a2".to_owned()]);
        assert_eq!(s.owner("a2"), None);
        assert!(s.bind("b1".into(), "b".into(), at(6)).is_empty());
        assert!(s.bind("b2".into(), "b".into(), at(7)).is_empty());
        // Six in all: the longest idle of everyone (a3) makes room.
        assert_eq!(s.bind("c1".into(), "c".into(), at(8)), vec!["a3".to_owned()]);
        assert_eq!(s.bound.len(), 5);
        assert_eq!(s.owner("c1"), Some("c"));
        s.forget("b1");
        assert_eq!(s.owner("b1"), None);
        let live = ["a1", "c1"].iter().map(|x| x.to_string()).collect();
        s.retain_live(&live);
        assert_eq!(s.bound.len(), 2);
    }

    #[test]
    fn only_loopback_binds() {
        assert!(loopback_addr("127.0.0.1", 1).is_ok());
        assert!(loopback_addr("::1", 1).is_ok());
        assert!(loopback_addr("[::1]", 1).is_ok());
        assert!(loopback_addr("localhost", 1).is_ok());
        assert!(loopback_addr("0.0.0.0", 1).is_err());
        assert!(loopback_addr("192.168.1.2", 1).is_err());
        assert!(loopback_addr("example.com", 1).is_err());
    }
}
