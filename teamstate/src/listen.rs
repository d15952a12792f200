//! A connection of its own that LISTENs (docs/contract.md#team-mode): a notification belongs to
//! the session that asked for it, so a listener never shares its connection or goes through a
//! pool. Announcements are hints to act at once (close a revoked credential's streams, fetch a
//! vault); every decision still reads its row.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use engine::error::GatewayError;
use tokio_postgres::AsyncMessage;

use crate::{db, within};

/// Payloads held for a reader that has not asked yet.
pub const QUEUE: usize = 1024;

/// Payloads announced on one channel, as they arrive.
pub struct Listener {
    payloads: mpsc::Receiver<String>,
    /// Set when a payload was dropped because nobody was reading.
    missed: Arc<AtomicBool>,
    _client: tokio_postgres::Client,
    /// Runs the connection; shut down without waiting when dropped.
    rt: Option<tokio::runtime::Runtime>,
}

/// What [`Listener::next`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// A payload.
    Payload(String),
    /// Nothing within the wait.
    Quiet,
    /// The connection ended: nothing more will be heard; start a new listener and read again
    /// what may have changed meanwhile.
    Lost,
    /// More came than [`QUEUE`] payloads while nobody read: some were dropped; read again what
    /// may have changed.
    Missed,
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl Listener {
    /// Connects to `url` and listens on `channel` (lower-case letters and `_` only).
    pub fn start(url: &str, channel: &str) -> Result<Listener, GatewayError> {
        if channel.is_empty() || !channel.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
            return Err(GatewayError::InvalidArgument(format!(
                "not a channel name: {channel}"
            )));
        }
        let config = crate::check_database_url(url)?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(GatewayError::Io)?;
        let connected = crate::connect(&rt, &config);
        let (client, mut connection) = match connected {
            Ok(c) => c,
            Err(e) => {
                rt.shutdown_background();
                return Err(e);
            }
        };
        let (send, payloads) = mpsc::sync_channel(QUEUE);
        let missed = Arc::new(AtomicBool::new(false));
        let overflow = missed.clone();
        rt.spawn(async move {
            loop {
                match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                    Some(Ok(AsyncMessage::Notification(n))) => {
                        match send.try_send(n.payload().to_owned()) {
                            Ok(()) => {}
                            // Bounded: a flood nobody reads costs a flag, not memory.
                            Err(mpsc::TrySendError::Full(_)) => overflow.store(true, Ordering::SeqCst),
                            Err(mpsc::TrySendError::Disconnected(_)) => break,
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "the team database's listening connection ended");
                        break;
                    }
                    None => break,
                }
            }
        });
        let listener = Listener {
            payloads,
            missed,
            _client: client,
            rt: Some(rt),
        };
        let stale = std::sync::atomic::AtomicBool::new(false);
        within(
            &stale,
            listener._client.batch_execute(&format!("LISTEN {channel}")),
        )?
        .map_err(db)?;
        Ok(listener)
    }

    /// The next payload, waiting at most `wait`.
    pub fn next(&self, wait: Duration) -> Heard {
        if self.missed.swap(false, Ordering::SeqCst) {
            return Heard::Missed;
        }
        match self.payloads.recv_timeout(wait) {
            Ok(p) => Heard::Payload(p),
            Err(mpsc::RecvTimeoutError::Timeout) => Heard::Quiet,
            Err(mpsc::RecvTimeoutError::Disconnected) => Heard::Lost,
        }
    }
}
