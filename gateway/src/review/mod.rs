//! The review page (docs/contract.md#the-review-page-and-in-client-approval): `/review/` on the loopback listener of `vaultgate serve`, the OS
//! user's operator surface beside the CLI. Every decision calls the engine function the CLI calls,
//! as `review:<user>`; this module only parses forms, checks the page's own security (Host,
//! session path + cookie, CSRF, Origin, headers) and renders.
//!
//! It must never accept an agent's bearer token, never let its cookie reach another path, and
//! never show untrusted text unescaped.

pub(crate) mod pages;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use maud::Markup;

use engine::core::{Core, Operator, now_unix, rfc3339};
use engine::error::GatewayError;
use engine::review::Session;
use engine::{Transition, VaultHandle};
use pages::Frame;
use policy::{ErrorCode, Tier};

/// The longest form body the page posts (a reason of 4,000 characters, escaped, fits easily).
const MAX_FORM_BYTES: usize = 64 * 1024;
/// How many of the newest audit records the Audit page filters.
const AUDIT_SCAN: usize = 2000;
/// How many pending proposals the Inbox shows (the newest).
const INBOX_SHOW: u32 = 500;
/// How many matching records it shows.
const AUDIT_SHOW: usize = 200;
/// Logs up to this size are verified line by line on every visit of the Audit page.
const VERIFY_ALWAYS_BYTES: u64 = 64 * 1024 * 1024;
const COOKIE: &str = "vg_review";

struct Page {
    core: Arc<Core>,
    /// The tunnel's supervisor of this `serve` (`None`: it has no place for a profile).
    tunnel: Option<Arc<crate::tunnel::Supervisor>>,
    /// The address this listener is bound to (its port for the Host check, all of it for the
    /// server proof).
    served: SocketAddr,
    port: u16,
}

/// The `/review` routes, for the listener bound to `served`.
pub fn router(core: Arc<Core>, served: SocketAddr, tunnel: Option<Arc<crate::tunnel::Supervisor>>) -> Router {
    let page = Arc::new(Page {
        core,
        tunnel,
        served,
        port: served.port(),
    });
    Router::new()
        .route("/review", any(handle))
        .route("/review/", any(handle))
        .route("/review/{*rest}", any(handle))
        .with_state(page)
}

/// The response headers of every `/review` answer (docs/contract.md#the-review-page-and-in-client-approval).
fn secure(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    for (k, v) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'self'; frame-ancestors 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::CACHE_CONTROL, "no-store"),
        (header::REFERRER_POLICY, "same-origin"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ] {
        h.insert(k, HeaderValue::from_static(v));
    }
    resp
}

fn html(status: StatusCode, m: Markup) -> Response {
    (status, axum::response::Html(m.into_string())).into_response()
}

fn redirect(to: &str) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

/// One place maps an error code to the page's HTTP status.
fn status_for(e: &GatewayError) -> StatusCode {
    use ErrorCode as C;
    let c = e.code();
    if c == C::CAPABILITY_DENIED || matches!(e, GatewayError::Forbidden(_)) {
        StatusCode::FORBIDDEN
    } else if c == C::UNAUTHORIZED || c == C::CREDENTIAL_REVOKED || c == C::CREDENTIAL_EXPIRED {
        StatusCode::UNAUTHORIZED
    } else if c == C::NOT_FOUND || c == C::PROPOSAL_NOT_FOUND || c == C::VAULT_NOT_FOUND {
        StatusCode::NOT_FOUND
    } else if c == C::AUDIT_UNAVAILABLE {
        StatusCode::SERVICE_UNAVAILABLE
    } else if c == C::INTERNAL {
        StatusCode::INTERNAL_SERVER_ERROR
    } else if c == C::TOO_LARGE || c == C::OUTPUT_LIMIT_EXCEEDED {
        StatusCode::PAYLOAD_TOO_LARGE
    } else if c == C::QUOTA_EXCEEDED {
        StatusCode::TOO_MANY_REQUESTS
    } else if c == C::INVALID_ARGUMENT || c == C::PATH_INVALID || c == C::VAULT_TARGET_REQUIRED {
        StatusCode::BAD_REQUEST
    } else {
        // Stale, tampered, already decided, not the top: the state moved under the reviewer.
        StatusCode::CONFLICT
    }
}

fn refused_page(e: &GatewayError) -> Response {
    let (title, next) = match status_for(e) {
        StatusCode::UNAUTHORIZED => ("Not logged in", "Run `vaultgate review` for a new login link."),
        StatusCode::FORBIDDEN => (
            "Refused",
            "Reload the page you came from, or run `vaultgate review` for a new login link.",
        ),
        _ => ("Error", ""),
    };
    html(
        status_for(e),
        pages::bare(title, &pages::t(&e.client_message()), next),
    )
}

fn remote(req: &Request) -> Option<IpAddr> {
    req.extensions()
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
}

async fn handle(State(page): State<Arc<Page>>, req: Request) -> Response {
    secure(route(page, req).await)
}

async fn route(page: Arc<Page>, req: Request) -> Response {
    let from = remote(&req);
    // SECURITY(T-HTTP2): the page answers loopback names of this port only (DNS rebinding).
    let Some(host) = crate::http::loopback_host(req.headers(), page.port) else {
        let e =
            GatewayError::Forbidden("Host must be 127.0.0.1, localhost or [::1] with the served port".into());
        return unauthenticated(&page, from, e).await;
    };
    let path = req.uri().path().to_owned();
    let rest = path.strip_prefix("/review").unwrap_or("").trim_start_matches('/');
    let segs: Vec<String> = rest.split('/').map(str::to_owned).collect();
    let query = parse_pairs(req.uri().query().unwrap_or("").as_bytes());
    let method = req.method().clone();
    match (
        method.clone(),
        segs.iter().map(String::as_str).collect::<Vec<_>>().as_slice(),
    ) {
        (Method::GET, ["login"]) => {
            let code = first(&query, "code").unwrap_or_default().to_owned();
            let core = page.core.clone();
            match blocking(move || core.review().review_login(&code)).await {
                Ok(login) => {
                    let mut r = redirect(&format!("/review/s/{}/", login.path));
                    let cookie = format!(
                        "{COOKIE}={}; Path=/review/s/{}; HttpOnly; SameSite=Strict; Max-Age={}",
                        login.cookie, login.path, login.max_age
                    );
                    if let Ok(v) = HeaderValue::from_str(&cookie) {
                        r.headers_mut().insert(header::SET_COOKIE, v);
                    }
                    r
                }
                Err(e @ GatewayError::AuditUnavailable) => refused_page(&e),
                Err(e) => unauthenticated(&page, from, e).await,
            }
        }
        // Proves to `vaultgate review` that this server is its home's (T-REVIEW5).
        (Method::GET, ["identify"]) => {
            let nonce = first(&query, "nonce").unwrap_or_default().to_owned();
            let core = page.core.clone();
            let served = page.served;
            match blocking(move || core.review().server_proof(&nonce, &served)).await {
                Ok(proof) => proof.into_response(),
                Err(e) => (status_for(&e), e.client_message()).into_response(),
            }
        }
        (Method::GET, ["static", "style.css"]) => asset("text/css; charset=utf-8", pages::STYLE),
        (Method::GET, ["static", "app.js"]) => asset("text/javascript; charset=utf-8", pages::SCRIPT),
        (Method::GET, ["logged-out"]) => html(
            StatusCode::OK,
            pages::bare(
                "Logged out",
                "This review session has ended.",
                "Run `vaultgate review` to log in again.",
            ),
        ),
        (_, ["s", sp, ..]) => {
            let sp = (*sp).to_owned();
            let rest: Vec<String> = segs[2..].iter().filter(|s| !s.is_empty()).cloned().collect();
            let cookie = cookie(req.headers());
            let origin = req
                .headers()
                .get(header::ORIGIN)
                .map(|o| o.to_str().unwrap_or("\u{0}").to_owned());
            // Bounded before anything else; an oversize body is refused after the session is
            // known, so it is audited like every other refusal.
            let form = if method == Method::POST {
                axum::body::to_bytes(req.into_body(), MAX_FORM_BYTES)
                    .await
                    .map(|b| parse_pairs(&b))
                    .map_err(|_| {
                        GatewayError::InvalidArgument(format!("form body over {MAX_FORM_BYTES} bytes"))
                    })
            } else {
                Ok(Vec::new())
            };
            let asked = Asked {
                method,
                rest,
                query,
                form: Vec::new(),
                origin,
                host,
                port: page.port,
            };
            let core = page.core.clone();
            let tunnel = page.tunnel.clone();
            // One blocking hop per request: the session lookup, the refusal's record and the page.
            let answered = tokio::task::spawn_blocking(move || {
                let s = match core.review().review_session(&sp, cookie.as_deref()) {
                    Ok(s) => s,
                    Err(e @ GatewayError::AuditUnavailable) => return refused_page(&e),
                    Err(e) => return refuse_unauthenticated(&core, from, &e),
                };
                match form {
                    Ok(form) => in_session(&core, tunnel.as_ref(), &s, Asked { form, ..asked }),
                    Err(e) => refuse_in_session(&core, &s, &asked.rest.join("/"), &e),
                }
            })
            .await;
            answered
                .unwrap_or_else(|_| refused_page(&GatewayError::Internal("the page handler failed".into())))
        }
        _ => html(
            StatusCode::NOT_FOUND,
            pages::bare(
                "Not found",
                "There is no such review page.",
                "Run `vaultgate review` for a login link.",
            ),
        ),
    }
}

fn asset(kind: &'static str, text: &'static str) -> Response {
    let mut r = text.into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    r
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, GatewayError> + Send + 'static,
) -> Result<T, GatewayError> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|_| Err(GatewayError::Internal("the page handler failed".into())))
}

/// A refusal before any session was known: recorded like every unauthenticated refusal
/// (aggregated, docs/contract.md#the-audit-log), then answered.
async fn unauthenticated(page: &Page, from: Option<IpAddr>, e: GatewayError) -> Response {
    let core = page.core.clone();
    tokio::task::spawn_blocking(move || refuse_unauthenticated(&core, from, &e))
        .await
        .unwrap_or_else(|_| refused_page(&GatewayError::AuditUnavailable))
}

/// Records an unauthenticated refusal and answers it (`AUDIT_UNAVAILABLE` without its record).
fn refuse_unauthenticated(core: &Core, from: Option<IpAddr>, e: &GatewayError) -> Response {
    match core
        .credentials()
        .record_unauthenticated(engine::Transport::Http, from, e)
    {
        Ok(()) => refused_page(e),
        Err(_) => refused_page(&GatewayError::AuditUnavailable),
    }
}

/// Records a refused request of a live session (`review.refused`) and answers it.
fn refuse_in_session(core: &Core, s: &Session, what: &str, e: &GatewayError) -> Response {
    match core.review().record_review_refusal(s, what, e) {
        Ok(()) => refused_page(e),
        Err(_) => refused_page(&GatewayError::AuditUnavailable),
    }
}

fn cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_owned())
}

type Pairs = Vec<(String, String)>;

fn parse_pairs(b: &[u8]) -> Pairs {
    form_urlencoded::parse(b).into_owned().collect()
}

fn first<'a>(p: &'a Pairs, key: &str) -> Option<&'a str> {
    p.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

fn all<'a>(p: &'a Pairs, key: &str) -> Vec<&'a str> {
    p.iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// One request of a logged-in session, read off the wire.
struct Asked {
    method: Method,
    rest: Vec<String>,
    query: Pairs,
    form: Pairs,
    origin: Option<String>,
    host: String,
    port: u16,
}

/// A session's request, answered on a blocking thread (every engine call is synchronous).
fn in_session(
    core: &Core,
    tunnel: Option<&Arc<crate::tunnel::Supervisor>>,
    s: &Session,
    a: Asked,
) -> Response {
    if a.method == Method::POST {
        // SECURITY(T-REVIEW3): a state change needs this page's own Origin and this session's
        // CSRF token; a cross-site form carries neither.
        let own = format!("http://{}", a.host);
        let checked = if a.origin.as_deref() != Some(own.as_str()) {
            Err(GatewayError::Forbidden(
                "this request did not come from the review page itself (Origin)".into(),
            ))
        } else {
            core.review().check_csrf(s, first(&a.form, "csrf"))
        };
        if let Err(e) = checked {
            return refuse_in_session(core, s, &a.rest.join("/"), &e);
        }
    } else if a.method != Method::GET {
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    }
    let base = format!("/review/s/{}", s.path);
    let vaults: Vec<(String, String)> = core
        .all_vaults()
        .iter()
        .map(|v| (v.id.clone(), v.name.clone()))
        .collect();
    let default_vault = core
        .vault_for_cli(None)
        .map(|v| v.id.clone())
        .ok()
        .or_else(|| vaults.first().map(|(id, _)| id.clone()))
        .unwrap_or_default();
    let segs: Vec<&str> = a.rest.iter().map(String::as_str).collect();
    let vault = match segs.as_slice() {
        ["v", v, ..] => (*v).to_owned(),
        _ => default_vault.clone(),
    };
    let here = match segs.as_slice() {
        ["v", _, "history", ..] => "history",
        ["v", ..] => "inbox",
        [p, ..] => p,
        [] => "inbox",
    };
    let frame = Frame {
        base: &base,
        csrf: &s.csrf,
        user: &s.operator.user,
        vaults: &vaults,
        vault: &vault,
        here,
    };
    let ctx = Ctx {
        core,
        tunnel,
        s,
        op: &s.operator,
        f: &frame,
        a: &a,
    };
    let post = a.method == Method::POST;
    let answered = match (post, segs.as_slice()) {
        (false, []) => Ok(redirect(&format!("{base}/v/{default_vault}/inbox"))),
        (false, ["switch"]) => {
            let asked = first(&a.query, "vault").unwrap_or(&default_vault);
            core.vault_for_cli(Some(asked))
                .map(|v| redirect(&format!("{base}/v/{}/inbox", v.id)))
        }
        (false, ["v", v, "inbox"]) => ctx.inbox(v, false),
        (false, ["v", v, "inbox", "rows"]) => ctx.inbox(v, true),
        (false, ["v", v, "p", id]) => ctx.proposal(v, id),
        (true, ["v", v, "p", id, "apply"]) => Ok(ctx.apply(v, id)),
        (true, ["v", v, "p", id, "reject"]) => Ok(ctx.reject(v, id)),
        (false, ["v", v, "history"]) => ctx.history(v),
        (true, ["v", v, "history", "undo"]) => Ok(ctx.transition(v, Transition::Undo)),
        (true, ["v", v, "history", "redo"]) => Ok(ctx.transition(v, Transition::Redo)),
        (false, ["credentials"]) => ctx.credentials(),
        (true, ["credentials", "issue"]) => Ok(ctx.issue()),
        (true, ["credentials", id, "tier"]) => Ok(ctx.set_tier(id)),
        (true, ["credentials", id, "revoke"]) => Ok(ctx.revoke(id)),
        (false, ["audit"]) => ctx.audit(),
        (false, ["vaults"]) => Ok(ctx.vaults()),
        (true, ["vaults", v, "pdf-text"]) => Ok(ctx.pdf_text(v)),
        (false, ["tunnel"]) => Ok(ctx.tunnel_page()),
        (true, ["tunnel", "start"]) => Ok(ctx.tunnel_switch(true)),
        (true, ["tunnel", "stop"]) => Ok(ctx.tunnel_switch(false)),
        (true, ["logout"]) => Ok(ctx.logout()),
        _ => Err(GatewayError::not_found()),
    };
    answered.unwrap_or_else(|e| {
        html(
            status_for(&e),
            pages::result(&frame, Err(coded(&e)), &format!("{base}/"), maud::html! {}),
        )
    })
}

fn coded(e: &GatewayError) -> (String, String) {
    (e.code().as_str().to_owned(), e.client_message())
}

struct Ctx<'a> {
    core: &'a Core,
    tunnel: Option<&'a Arc<crate::tunnel::Supervisor>>,
    s: &'a Session,
    op: &'a Operator,
    f: &'a Frame<'a>,
    a: &'a Asked,
}

impl Ctx<'_> {
    fn vault(&self, id: &str) -> Result<Arc<VaultHandle>, GatewayError> {
        self.core.vault_for_cli(Some(id))
    }

    /// The page of a decision: ok with its message, or the error with its code and status.
    fn decided(&self, r: Result<String, GatewayError>, back: &str) -> Response {
        match r {
            Ok(msg) => html(
                StatusCode::OK,
                pages::result(self.f, Ok(msg), back, maud::html! {}),
            ),
            Err(e) => html(
                status_for(&e),
                pages::result(self.f, Err(coded(&e)), back, maud::html! {}),
            ),
        }
    }

    fn inbox(&self, v: &str, rows_only: bool) -> Result<Response, GatewayError> {
        let v = self.vault(v)?;
        // Newest first, as the engine lists them; beyond the first 500 the page says so.
        let list = self
            .core
            .proposals()
            .list_proposals(&v, Some("pending"), Some(INBOX_SHOW))?;
        let now = time::OffsetDateTime::now_utc();
        Ok(if rows_only {
            html(StatusCode::OK, pages::inbox_rows(self.f, &list.proposals, now))
        } else {
            html(
                StatusCode::OK,
                pages::inbox(self.f, &list.proposals, list.truncated, now),
            )
        })
    }

    fn proposal(&self, v: &str, id: &str) -> Result<Response, GatewayError> {
        let v = self.vault(v)?;
        let p = self
            .core
            .proposals()
            .get_proposal(&v, &engine::ids::ProposalId::from_wire(id.to_owned()))?;
        let parts = pages::Parts::of(self.core, &v, &p)?;
        Ok(html(StatusCode::OK, pages::proposal(self.f, &parts.view(&p))))
    }

    fn apply(&self, v: &str, id: &str) -> Response {
        let back = format!("{}/inbox", self.f.v());
        let r = self.vault(v).and_then(|v| {
            let hash = first(&self.a.form, "proposalHash").unwrap_or_default();
            self.core.decisions().operator_apply(self.op, &v, id, hash)
        });
        self.decided(
            r.map(|a| {
                format!(
                    "applied to {} (history {}, audit seq {})",
                    a.target, a.history_entry_id, a.audit_seq
                )
            }),
            &back,
        )
    }

    fn reject(&self, v: &str, id: &str) -> Response {
        let back = format!("{}/inbox", self.f.v());
        let r = self.vault(v).and_then(|v| {
            let reason = first(&self.a.form, "reason").unwrap_or_default();
            self.core.decisions().operator_reject(self.op, &v, id, reason)
        });
        self.decided(
            r.map(|r| format!("rejected; archived to {}", r.archived_to)),
            &back,
        )
    }

    fn history(&self, v: &str) -> Result<Response, GatewayError> {
        let v = self.vault(v)?;
        let undo = self.core.history().history_top(&v, Transition::Undo)?;
        let redo = self.core.history().history_top(&v, Transition::Redo)?;
        let status = self.core.history().history_status(&v)?;
        Ok(html(
            StatusCode::OK,
            pages::history(self.f, &status, undo.as_ref(), redo.as_ref()),
        ))
    }

    fn transition(&self, v: &str, t: Transition) -> Response {
        let back = format!("{}/history", self.f.v());
        let r = self.vault(v).and_then(|v| match first(&self.a.form, "expected") {
            Some(expected) if !expected.is_empty() => {
                self.core.decisions().operator_history(self.op, &v, t, expected)
            }
            _ => Err(self.core.decisions().operator_history_refused(
                self.op,
                &v,
                t,
                GatewayError::InvalidArgument(
                    "the form names no history entry; reload the History page".into(),
                ),
            )),
        });
        self.decided(r.map(|_| format!("{}: done", t.as_str())), &back)
    }

    fn credentials(&self) -> Result<Response, GatewayError> {
        let now = now_unix();
        let ts = |t: Option<i64>, none: &str| {
            t.and_then(|t| time::OffsetDateTime::from_unix_timestamp(t).ok())
                .map(rfc3339)
                .unwrap_or_else(|| none.to_owned())
        };
        let rows: Vec<pages::CredentialRow> = self
            .core
            .credentials()
            .all()?
            .iter()
            .map(|c| pages::CredentialRow {
                id: c.id.as_str().to_owned(),
                name: c.name.clone(),
                tier: c.tier.as_str().to_owned(),
                scope: if c.scope_unreadable {
                    "(unreadable: no vault)".to_owned()
                } else if c.vaults.is_empty() {
                    "every vault".to_owned()
                } else {
                    c.vaults.join(", ")
                },
                approve_in_client: c.approve_in_client,
                last_used: ts(c.last_used_at, "never"),
                expires: ts(c.expires_at, "never"),
                status: if c.is_revoked() {
                    "revoked"
                } else if c.is_expired(now) {
                    "expired"
                } else {
                    "active"
                },
                revoked: c.is_revoked(),
            })
            .collect();
        Ok(html(StatusCode::OK, pages::credentials(self.f, &rows)))
    }

    fn confirmed(&self) -> bool {
        first(&self.a.form, "confirm") == Some("yes")
    }

    fn tier(&self) -> Result<Tier, GatewayError> {
        first(&self.a.form, "tier")
            .unwrap_or_default()
            .parse()
            .map_err(|_| GatewayError::InvalidArgument("tier must be read, propose, auto or full".into()))
    }

    fn issue(&self) -> Response {
        let back = format!("{}/credentials", self.f.base);
        let name = first(&self.a.form, "name").unwrap_or_default().trim().to_owned();
        let tier = match self.tier() {
            Ok(t) => t,
            Err(e) => return self.decided(Err(e), &back),
        };
        let vaults: Vec<String> = all(&self.a.form, "vault")
            .into_iter()
            .map(str::to_owned)
            .collect();
        let expires = first(&self.a.form, "expires")
            .unwrap_or_default()
            .trim()
            .to_owned();
        // docs/contract.md#the-review-page-and-in-client-approval: opt-in only; anything but the box's own value leaves it off.
        let approve_in_client = first(&self.a.form, "approveInClient") == Some("yes");
        if tier == Tier::Full && !self.confirmed() {
            let mut fields: Vec<(&str, &str)> =
                vec![("name", &name), ("tier", "full"), ("expires", &expires)];
            if approve_in_client {
                fields.push(("approveInClient", "yes"));
            }
            fields.extend(vaults.iter().map(|v| ("vault", v.as_str())));
            let action = format!("{}/credentials/issue", self.f.base);
            return html(
                StatusCode::OK,
                pages::confirm_full(self.f, &action, &format!("the new credential '{name}'"), &fields),
            );
        }
        let expires_in = if expires.is_empty() {
            None
        } else {
            match crate::cli::parse_duration(&expires) {
                Ok(s) => Some(s),
                Err(m) => {
                    return self.decided(Err(GatewayError::InvalidArgument(format!("expires: {m}"))), &back);
                }
            }
        };
        match self.core.credentials().issue_credential(
            self.op,
            &name,
            tier,
            vaults,
            expires_in,
            approve_in_client,
        ) {
            Ok((cred, token)) => {
                let exe = std::env::current_exe().unwrap_or_else(|_| "vaultgate".into());
                let target = crate::clientconf::Target {
                    exe: &exe,
                    home: &self.core.home.dir,
                    port: self.a.port,
                };
                use crate::clientconf as cc;
                let configs = vec![
                    (
                        "Claude Desktop, Claude Code, Cursor (stdio)".to_owned(),
                        cc::mcp_servers_stdio(&target, &token),
                    ),
                    (
                        "Claude Code (HTTP, .mcp.json)".to_owned(),
                        cc::claude_http(&target, &token),
                    ),
                    (
                        "Cursor (HTTP, .cursor/mcp.json)".to_owned(),
                        cc::cursor_http(&target, &token),
                    ),
                    (
                        "Codex (stdio, ~/.codex/config.toml)".to_owned(),
                        cc::codex_stdio(&target, &token),
                    ),
                    (
                        "Codex (HTTP, ~/.codex/config.toml)".to_owned(),
                        cc::codex_http(&target, &token),
                    ),
                    ("MCP Inspector".to_owned(), cc::inspector(&target, &token)),
                ];
                html(
                    StatusCode::OK,
                    pages::issued(self.f, &cred.name, token.expose(), &configs),
                )
            }
            Err(e) => self.decided(Err(e), &back),
        }
    }

    fn set_tier(&self, id: &str) -> Response {
        let back = format!("{}/credentials", self.f.base);
        let tier = match self.tier() {
            Ok(t) => t,
            Err(e) => return self.decided(Err(e), &back),
        };
        if tier == Tier::Full && !self.confirmed() {
            let name = self
                .core
                .credentials()
                .find_credential(id)
                .map(|c| c.name)
                .unwrap_or_else(|_| id.to_owned());
            let action = format!("{}/credentials/{id}/tier", self.f.base);
            return html(
                StatusCode::OK,
                pages::confirm_full(self.f, &action, &format!("'{name}'"), &[("tier", "full")]),
            );
        }
        let r = self.core.credentials().set_credential_tier(self.op, id, tier);
        self.decided(r.map(|c| format!("'{}' is now {}", c.name, c.tier)), &back)
    }

    fn tunnel_page(&self) -> Response {
        let status = self.tunnel.map(|t| t.status());
        html(StatusCode::OK, pages::tunnel(self.f, status.as_ref()))
    }

    /// Start or Stop (docs/contract.md#the-chatgpt-tunnel): the supervisor's async call, waited for on this blocking thread.
    fn tunnel_switch(&self, start: bool) -> Response {
        let back = format!("{}/tunnel", self.f.base);
        let Some(sup) = self.tunnel else {
            return self.decided(
                Err(GatewayError::Config(
                    "this server has no place for a tunnel profile (neither XDG_CACHE_HOME nor HOME is set)"
                        .into(),
                )),
                &back,
            );
        };
        let rt = tokio::runtime::Handle::current();
        let r = if start {
            rt.block_on(sup.start(self.op)).map(|()| {
                "started tunnel-client; it is connected once its first control-plane poll succeeds".to_owned()
            })
        } else {
            rt.block_on(sup.stop(Some(self.op)))
                .map(|()| "stopped tunnel-client".to_owned())
        };
        self.decided(r, &back)
    }

    fn pdf_text(&self, vault: &str) -> Response {
        let back = format!("{}/vaults", self.f.base);
        let on = first(&self.a.form, "on") == Some("1");
        let r = self.core.settings().vault_pdf_text(self.op, vault, on).map(|on| {
            if on {
                format!("PDF text is on for vault '{vault}': agents may read the text of its PDFs")
            } else {
                format!("PDF text is off for vault '{vault}'")
            }
        });
        self.decided(r, &back)
    }

    fn revoke(&self, id: &str) -> Response {
        let back = format!("{}/credentials", self.f.base);
        let r = self.core.credentials().revoke_credential(self.op, id);
        self.decided(
            r.map(|c| format!("revoked '{}'; its next request is refused", c.name)),
            &back,
        )
    }

    fn audit(&self) -> Result<Response, GatewayError> {
        let q = &self.a.query;
        let filter = pages::AuditFilter {
            credential: first(q, "credential").unwrap_or_default().trim(),
            vault: first(q, "vault").unwrap_or_default().trim(),
            outcome: first(q, "outcome").unwrap_or_default().trim(),
        };
        // The whole chain is verified on every visit while that is quick; a larger log is
        // verified when asked (a button), its head against the state database always.
        let size = std::fs::metadata(self.core.home.audit_path()).map_or(0, |m| m.len());
        let full = size <= VERIFY_ALWAYS_BYTES || first(q, "verify") == Some("1");
        let chain = if full {
            match engine::audit_log::chain_status(&self.core.home)? {
                engine::audit_log::ChainStatus::Holds { records } => {
                    (true, format!("The chain holds: {records} records verified."))
                }
                engine::audit_log::ChainStatus::Broken(m) => (false, m),
            }
        } else {
            match engine::audit_log::head_check(&self.core.home)?.problem() {
                None => (
                    true,
                    format!(
                        "The head matches the state database ({} MiB not verified line by line on every visit).",
                        size >> 20
                    ),
                ),
                Some(m) => (false, m),
            }
        };
        let records = engine::audit_log::tail(&self.core.home.audit_path(), AUDIT_SCAN)?;
        let scanned = records.len();
        let rows: Vec<pages::AuditRow> = records
            .into_iter()
            .rev()
            .filter_map(|r| {
                let actor = serde_json::to_value(&r.actor).unwrap_or_default();
                let (actor_text, actor_keys) = match &actor {
                    serde_json::Value::String(s) => (s.clone(), vec![s.clone()]),
                    other => {
                        let get = |k: &str| {
                            other
                                .get(k)
                                .and_then(|v| v.as_str())
                                .unwrap_or_default()
                                .to_owned()
                        };
                        (
                            format!("{} ({}, {})", get("name"), get("credentialId"), get("tier")),
                            vec![get("name"), get("credentialId")],
                        )
                    }
                };
                let outcome = serde_json::to_value(r.outcome)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                let keep = (filter.credential.is_empty()
                    || actor_keys.iter().any(|k| k == filter.credential))
                    && (filter.vault.is_empty() || r.vault.as_deref() == Some(filter.vault))
                    && (filter.outcome.is_empty() || outcome == filter.outcome);
                keep.then(|| pages::AuditRow {
                    seq: r.seq,
                    ts: rfc3339(r.ts),
                    actor: actor_text,
                    event: r.event,
                    vault: r.vault.unwrap_or_default(),
                    tool: r.tool.unwrap_or_default(),
                    target: r.target.unwrap_or_default(),
                    outcome,
                    code: r.code.unwrap_or_default(),
                })
            })
            .take(AUDIT_SHOW)
            .collect();
        Ok(html(
            StatusCode::OK,
            pages::audit(self.f, (chain.0, &chain.1), !full, &filter, &rows, scanned),
        ))
    }

    fn vaults(&self) -> Response {
        let rows: Vec<_> = self
            .core
            .all_vaults()
            .iter()
            .map(|v| {
                (
                    v.id.clone(),
                    v.name.clone(),
                    self.core.reads().overview(v).map_err(|e| e.client_message()),
                    self.core.history().git_status(v).map_err(|e| e.client_message()),
                    self.core.attachments().pdf_text_on(&v.id),
                )
            })
            .collect();
        html(StatusCode::OK, pages::vaults(self.f, &rows))
    }

    fn logout(&self) -> Response {
        match self.core.review().review_logout(self.s) {
            Ok(()) => {
                let mut r = redirect("/review/logged-out");
                let clear = format!(
                    "{COOKIE}=; Path={}; HttpOnly; SameSite=Strict; Max-Age=0",
                    self.f.base
                );
                if let Ok(v) = HeaderValue::from_str(&clear) {
                    r.headers_mut().insert(header::SET_COOKIE, v);
                }
                r
            }
            Err(e) => refused_page(&e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_cookie_is_found_among_others_and_only_by_its_name() {
        let first = (header::COOKIE, HeaderValue::from_static("a=1; vg_review_x=2"));
        let one: HeaderMap = [first.clone()].into_iter().collect();
        assert_eq!(cookie(&one), None);
        // Two Cookie headers: the session's is in the second.
        let second = (
            header::COOKIE,
            HeaderValue::from_static("b=3;  vg_review=abc ; c=4"),
        );
        let two: HeaderMap = [first, second].into_iter().collect();
        assert_eq!(cookie(&two).as_deref(), Some("abc"));
    }

    #[test]
    fn refusals_and_conflicts_map_to_their_statuses() {
        let cases = [
            (GatewayError::Forbidden("x".into()), StatusCode::FORBIDDEN),
            (GatewayError::Unauthorized("x"), StatusCode::UNAUTHORIZED),
            (GatewayError::AuditUnavailable, StatusCode::SERVICE_UNAVAILABLE),
            (GatewayError::InvalidArgument("x".into()), StatusCode::BAD_REQUEST),
            (GatewayError::VaultNotFound("x".into()), StatusCode::NOT_FOUND),
            (
                engine::error::Refused::StaleBase {
                    path: "x".into(),
                    why: engine::error::Stale::Gone,
                }
                .into(),
                StatusCode::CONFLICT,
            ),
            (
                engine::error::Refused::ProposalNotFound { id: "x".into() }.into(),
                StatusCode::NOT_FOUND,
            ),
        ];
        for (e, status) in cases {
            assert_eq!(status_for(&e), status, "{e:?}");
        }
    }

    #[test]
    fn every_answer_carries_the_page_headers() {
        let r = secure(StatusCode::OK.into_response());
        let h = r.headers();
        assert_eq!(
            h[header::CONTENT_SECURITY_POLICY],
            "default-src 'self'; frame-ancestors 'none'"
        );
        assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert_eq!(h[header::CACHE_CONTROL], "no-store");
        assert_eq!(h[header::REFERRER_POLICY], "same-origin");
    }
}
