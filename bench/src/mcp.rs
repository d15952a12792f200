//! One MCP client for every server measured (rmcp, as in the black-box tests): stdio child
//! processes and Streamable HTTP, plus the timing loops (sequential and N concurrent clients).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, JsonObject, Tool};
use rmcp::service::{Peer, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;

use crate::stats::{Summary, iterations, summarize};

/// No single call may take longer than this; a slower one counts as an error.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(180);
/// Connecting (spawn + initialize) may take this long (basic-memory starts slowly).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(300);

pub struct Client {
    inner: RunningService<RoleClient, ()>,
    /// The server's process id, for stdio servers.
    pub pid: Option<u32>,
}

impl Client {
    /// Spawns `cmd` as an MCP stdio server (stderr to `stderr_log`) and initializes.
    pub async fn stdio(cmd: tokio::process::Command, stderr_log: &Path) -> Result<Client, String> {
        let log = std::fs::File::create(stderr_log).map_err(|e| format!("{}: {e}", stderr_log.display()))?;
        let (transport, _) = TokioChildProcess::builder(cmd)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("spawn failed: {e}"))?;
        let pid = transport.id();
        let inner = tokio::time::timeout(CONNECT_TIMEOUT, ().serve(transport))
            .await
            .map_err(|_| format!("initialize timed out after {CONNECT_TIMEOUT:?}"))?
            .map_err(|e| format!("initialize failed: {e}"))?;
        Ok(Client { inner, pid })
    }

    /// Connects over Streamable HTTP with `Authorization: Bearer <token>` (legacy `initialize`).
    pub async fn http(url: &str, token: Option<&str>) -> Result<Client, String> {
        let mut cfg = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
        if let Some(t) = token {
            cfg = cfg.auth_header(t.to_owned());
        }
        let transport = StreamableHttpClientTransport::from_config(cfg);
        let inner = tokio::time::timeout(CONNECT_TIMEOUT, ().serve(transport))
            .await
            .map_err(|_| "initialize timed out".to_owned())?
            .map_err(|e| format!("initialize failed: {e}"))?;
        Ok(Client { inner, pid: None })
    }

    pub fn peer(&self) -> Peer<RoleClient> {
        self.inner.peer().clone()
    }

    pub async fn tools(&self) -> Result<Vec<Tool>, String> {
        tokio::time::timeout(CALL_TIMEOUT, self.inner.list_all_tools())
            .await
            .map_err(|_| "tools/list timed out".to_owned())?
            .map_err(|e| format!("tools/list failed: {e}"))
    }

    /// Calls a tool; a transport error, a timeout and an `isError` result are all `Err`.
    pub async fn call(&self, tool: &str, args: Value) -> Result<Value, String> {
        call_peer(self.inner.peer(), tool, args).await
    }

    pub async fn close(self) {
        let _ = tokio::time::timeout(Duration::from_secs(10), self.inner.cancel()).await;
    }
}

/// A successful result's `structuredContent`, else its text blocks joined (as a JSON string).
pub async fn call_peer(peer: &Peer<RoleClient>, tool: &str, args: Value) -> Result<Value, String> {
    let mut p = CallToolRequestParams::new(tool.to_owned());
    let args: JsonObject = match args {
        Value::Object(m) => m,
        _ => JsonObject::new(),
    };
    p.arguments = Some(args);
    let r = tokio::time::timeout(CALL_TIMEOUT, peer.call_tool(p))
        .await
        .map_err(|_| format!("{tool} timed out after {CALL_TIMEOUT:?}"))?
        .map_err(|e| format!("{tool}: {e}"))?;
    let text: String = r
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n");
    if r.is_error == Some(true) {
        let mut t = text;
        t.truncate(300);
        return Err(format!("{tool} returned an error: {t}"));
    }
    Ok(r.structured_content.unwrap_or(Value::String(text)))
}

/// Runs `op` sequentially: `warmup` untimed calls, then as many timed calls as fit `budget`
/// (judged from the last warm-up call), at least `min` and at most `max`.
pub async fn timed(
    warmup: usize,
    budget: Duration,
    min: usize,
    max: usize,
    mut op: impl AsyncFnMut(usize) -> Result<(), String>,
) -> Summary {
    let mut i = 0;
    let mut last = Duration::ZERO;
    let mut first_error = None;
    for _ in 0..warmup.max(1) {
        let t = Instant::now();
        if let Err(e) = op(i).await {
            first_error.get_or_insert(e);
        }
        last = t.elapsed();
        i += 1;
        // A slow operation is warm after one call; more would only spend the budget.
        if last > budget / 4 {
            break;
        }
    }
    // The warm-up's estimate, but never less than the budget's worth (a slow first call must not
    // starve a fast operation) nor more than three budgets (a fast warm-up must not hide slow calls).
    let n = iterations(last, budget, min, max);
    let mut lat = Vec::with_capacity(n);
    let mut errors = 0;
    let start = Instant::now();
    let mut k = 0;
    while k < max.max(min) {
        let el = start.elapsed();
        if k >= min && (el > budget * 3 || (k >= n && el >= budget)) {
            break;
        }
        let t = Instant::now();
        match op(i).await {
            Ok(()) => lat.push(t.elapsed()),
            Err(e) => {
                errors += 1;
                first_error.get_or_insert(e);
            }
        }
        i += 1;
        k += 1;
    }
    let mut s = summarize(&lat, start.elapsed(), errors);
    s.first_error = first_error;
    s
}

/// What each concurrent client calls: `(client index, iteration) → (tool, arguments)`.
pub type CallGen = Arc<dyn Fn(usize, usize) -> (String, Value) + Send + Sync>;

/// `peers.len()` clients call in closed loops for `duration` (after `warmup` calls each);
/// latencies of all clients together, throughput over the wall time.
pub async fn concurrent(
    peers: Vec<Peer<RoleClient>>,
    warmup: usize,
    duration: Duration,
    calls: CallGen,
) -> Summary {
    for (c, p) in peers.iter().enumerate() {
        for i in 0..warmup {
            let (tool, args) = calls(c, i);
            let _ = call_peer(p, &tool, args).await;
        }
    }
    let start = Instant::now();
    let deadline = start + duration;
    let mut set = tokio::task::JoinSet::new();
    for (c, p) in peers.into_iter().enumerate() {
        let calls = calls.clone();
        set.spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0;
            let mut first_error = None;
            let mut i = warmup;
            // At least one call each, however slow.
            while lat.is_empty() && errors == 0 || Instant::now() < deadline {
                let (tool, args) = calls(c, i);
                let t = Instant::now();
                match call_peer(&p, &tool, args).await {
                    Ok(_) => lat.push(t.elapsed()),
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert(e);
                    }
                }
                i += 1;
            }
            (lat, errors, first_error)
        });
    }
    let mut lat = Vec::new();
    let mut errors = 0;
    let mut first_error = None;
    while let Some(r) = set.join_next().await {
        match r {
            Ok((l, e, f)) => {
                lat.extend(l);
                errors += e;
                if let Some(f) = f {
                    first_error.get_or_insert(f);
                }
            }
            Err(e) => {
                errors += 1;
                first_error.get_or_insert(format!("client task failed: {e}"));
            }
        }
    }
    let mut s = summarize(&lat, start.elapsed(), errors);
    s.first_error = first_error;
    s
}

/// `clients` clients run `work` in closed loops for `duration` (after `warmup` units each, one
/// client after the other); a unit is whatever `work(client index, iteration)` returns, e.g. a
/// propose then an apply. Calling `work` may prepare its arguments untimed: only awaiting the
/// future it returns is timed. A unit counts when it answers `Ok`; an `Err` counts as an error
/// (the first one is kept). Latencies of all clients together, throughput over the wall time.
pub async fn concurrent_work<F, Fut>(clients: usize, warmup: usize, duration: Duration, work: F) -> Summary
where
    F: Fn(usize, usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    let work = Arc::new(work);
    let mut first_error = None;
    for c in 0..clients {
        for i in 0..warmup {
            if let Err(e) = work(c, i).await {
                first_error.get_or_insert(format!("(warm-up) {e}"));
            }
        }
    }
    let start = Instant::now();
    let deadline = start + duration;
    let mut set = tokio::task::JoinSet::new();
    for c in 0..clients {
        let work = work.clone();
        set.spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0;
            let mut first_error = None;
            let mut i = warmup;
            // At least one unit each, however slow.
            while lat.is_empty() && errors == 0 || Instant::now() < deadline {
                let unit = work(c, i);
                let t = Instant::now();
                match unit.await {
                    Ok(()) => lat.push(t.elapsed()),
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert(e);
                    }
                }
                i += 1;
            }
            (lat, errors, first_error)
        });
    }
    let mut lat = Vec::new();
    let mut errors = 0;
    // A failure in the timed loop says more than one in the warm-up: it goes first.
    let mut timed_error = None;
    while let Some(r) = set.join_next().await {
        match r {
            Ok((l, e, f)) => {
                lat.extend(l);
                errors += e;
                if let Some(f) = f {
                    timed_error.get_or_insert(f);
                }
            }
            Err(e) => {
                errors += 1;
                timed_error.get_or_insert(format!("client task failed: {e}"));
            }
        }
    }
    let mut s = summarize(&lat, start.elapsed(), errors);
    s.first_error = timed_error.or(first_error);
    s
}
