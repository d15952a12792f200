//! A team gateway ends the open sessions of a credential revoked (or expired) on any gateway as
//! soon as the team's database announces the change (docs/contract.md#team-mode), instead of at
//! their next request: a listening client's stream closes at once.
//!
//! Announcements are hints: each one is decided by reading the credential's row, a lost or
//! flooded listener sweeps every session, and so does a timer (a half-open connection hears
//! nothing). The next request of a session is refused anyway: this only closes streams sooner.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use rmcp::transport::common::server_side_http::SessionId;
use rmcp::transport::streamable_http_server::session::SessionManager;
use teamstate::{CREDENTIALS_CHANNEL, Heard, Listener};

use super::Gate;

/// How often every session's credential is read again, whatever was heard.
const SWEEP: Duration = Duration::from_secs(15);

/// Starts the watcher of `gate`'s sessions on the team database at `url`; it ends with the gate.
pub(super) fn watch(gate: &Arc<Gate>, url: String) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let gate = Arc::downgrade(gate);
    let started = std::thread::Builder::new()
        .name("team-revocations".into())
        .spawn(move || run(&gate, &url, &rt));
    if let Err(e) = started {
        tracing::warn!(error = %e, "the team's revocation watcher did not start");
    }
}

fn run(gate: &Weak<Gate>, url: &str, rt: &tokio::runtime::Handle) {
    let mut listener: Option<Listener> = None;
    let mut swept = Instant::now();
    loop {
        if gate.strong_count() == 0 {
            return;
        }
        let heard = match &listener {
            Some(l) => l.next(Duration::from_secs(1)),
            None => match Listener::start(url, CREDENTIALS_CHANNEL) {
                Ok(l) => {
                    listener = Some(l);
                    // What changed while nobody listened.
                    Heard::Missed
                }
                Err(_) => {
                    std::thread::sleep(Duration::from_secs(1));
                    Heard::Quiet
                }
            },
        };
        let only = match heard {
            Heard::Payload(id) => Some(id),
            Heard::Quiet if swept.elapsed() < SWEEP => continue,
            Heard::Quiet | Heard::Missed => None,
            Heard::Lost => {
                listener = None;
                None
            }
        };
        let Some(g) = gate.upgrade() else {
            return;
        };
        if only.is_none() {
            swept = Instant::now();
        }
        close_refused(&g, only.as_deref(), rt);
    }
}

/// Closes every session (of `only`, when given) whose credential no longer authenticates.
fn close_refused(gate: &Gate, only: Option<&str>, rt: &tokio::runtime::Handle) {
    let owned: Vec<(String, String)> = match gate.sessions.lock() {
        Ok(s) => s
            .bound
            .iter()
            .filter(|(_, b)| only.is_none_or(|id| b.credential == id))
            .map(|(sid, b)| (sid.clone(), b.credential.clone()))
            .collect(),
        Err(_) => return,
    };
    let mut verdicts = std::collections::HashMap::new();
    let now = engine::core::now_unix();
    for (sid, credential) in owned {
        let gone = *verdicts.entry(credential.clone()).or_insert_with(|| {
            match gate.core.credentials().by_id(&credential) {
                Ok(Some(c)) => c.is_revoked() || c.is_expired(now),
                Ok(None) => true,
                // Unreachable: the next request decides (and is refused while it lasts).
                Err(_) => false,
            }
        });
        if !gone {
            continue;
        }
        if let Ok(mut s) = gate.sessions.lock() {
            s.forget(&sid);
        }
        if let Err(e) = rt.block_on(gate.manager.close_session(&SessionId::from(sid))) {
            tracing::warn!(error = %e, "closing a revoked credential's session failed");
        }
    }
}
