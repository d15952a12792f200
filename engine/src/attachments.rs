//! `list_attachments` and `read_attachment_text` (docs/contract.md#notes-as-data-and-attachments). The engine decides what may be
//! read — the vault's opt-in, the path policy, the size, that it is a PDF at all — and hands the
//! bytes to the edge's [`PdfWorker`], which parses them in a separate process. Nothing here
//! parses a PDF.

use std::collections::BTreeSet;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use pdftext::wire::{Document, Failure, FailureKind, Request, SandboxStatus};
use policy::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::core::{PageCall, VaultHandle};
use crate::cursor::Position;
use crate::error::{GatewayError, Unreadable};

/// PDFs larger than this are not read (`TOO_LARGE`).
pub const MAX_PDF_BYTES: u64 = 64 * 1024 * 1024;
/// Pages answered when `pages` is absent.
pub const DEFAULT_PAGES: u32 = 10;
/// `maxChars`: default and most, per page.
pub const DEFAULT_MAX_CHARS: u32 = 20_000;
pub const MAX_MAX_CHARS: u32 = 50_000;
/// Worker runs at once per process; more wait for a slot.
const WORKER_SLOTS: usize = 2;
/// How long a call waits for a slot before it is refused.
const SLOT_WAIT: Duration = Duration::from_secs(60);

/// Runs a PDF through the worker process; the edge provides it (it knows the binary).
pub trait PdfWorker: Send + Sync {
    /// The text `req` asks for, parsed in a worker process that sandboxes itself first; a
    /// worker that cannot is a [`FailureKind::Sandbox`] and never sees the document, unless
    /// `allow_without_sandbox` (`[pdf]` in `gateway.toml`).
    fn extract(&self, pdf: &[u8], req: &Request, allow_without_sandbox: bool) -> Result<Document, Failure>;

    /// Starts a worker that only sets its sandbox up and says how that went (`doctor`), or why
    /// no worker answered.
    fn probe_sandbox(&self) -> Result<SandboxStatus, String>;
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListAttachmentsArgs {
    pub vault: Option<String>,
    /// Only files under this folder (default: the whole vault).
    pub dir: Option<String>,
    /// Maximum files (default 200, at most 500).
    pub limit: Option<u32>,
    /// The `nextCursor` of the previous page of this same listing.
    pub cursor: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReadAttachmentArgs {
    pub vault: Option<String>,
    /// The PDF, e.g. `papers/attention.pdf`.
    pub path: String,
    /// 1-based page numbers (at most 50; default: the first 10); a page past the end is absent.
    pub pages: Option<Vec<u32>>,
    /// Characters per page (default 20,000, at most 50,000); longer pages are cut and marked.
    pub max_chars: Option<u32>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttachmentTextOut {
    pub path: String,
    pub page_count: u32,
    pub pages: Vec<PageText>,
    /// A page was cut at `maxChars`, or pages were left out to stay within the output limit.
    pub truncated: bool,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct PageText {
    /// 1-based.
    pub page: u32,
    pub text: String,
    /// Cut at `maxChars`, or to keep the result within the output limit.
    pub truncated: bool,
    /// Why this page has no text although the document opened (it could not be read); the
    /// other pages are unaffected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// At most `WORKER_SLOTS` worker processes at once, and at most one per credential: a burst of
/// calls cannot fork-bomb the machine or multiply the workers' memory limit, and one credential
/// cannot hold every worker while others wait.
#[derive(Default)]
pub(crate) struct Slots {
    busy: Mutex<Busy>,
    freed: Condvar,
}

/// The credentials whose PDF is being read now, one worker each.
#[derive(Default)]
struct Busy {
    holders: BTreeSet<String>,
}

struct Slot<'a> {
    slots: &'a Slots,
    credential: String,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut busy = self
            .slots
            .busy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        busy.holders.remove(&self.credential);
        // Waiters wait for different things (any slot, or their credential's): wake them all.
        self.slots.freed.notify_all();
    }
}

/// Why no slot was had in time.
#[derive(Debug, PartialEq, Eq)]
enum NoSlot {
    /// The credential's own other call held its one worker all along.
    Credential,
    /// Every worker was busy with other credentials.
    All,
}

impl Slots {
    /// A worker slot for `credential`, waiting at most `wait` until the credential has no other
    /// worker running and fewer than `WORKER_SLOTS` run in all.
    fn take(&self, credential: &str, wait: Duration) -> Result<Slot<'_>, NoSlot> {
        let until = Instant::now() + wait;
        let mut busy = self
            .busy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            let own = busy.holders.contains(credential);
            if !own && busy.holders.len() < WORKER_SLOTS {
                break;
            }
            let Some(left) = until.checked_duration_since(Instant::now()) else {
                return Err(if own { NoSlot::Credential } else { NoSlot::All });
            };
            busy = self
                .freed
                .wait_timeout(busy, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        busy.holders.insert(credential.to_owned());
        Ok(Slot {
            slots: self,
            credential: credential.to_owned(),
        })
    }
}

/// Attachments and their text.
pub struct Attachments<'a> {
    pub(crate) core: &'a crate::core::Core,
    /// The edge's PDF worker, and the bound on its runs at once.
    pub(crate) pdf_worker: &'a std::sync::OnceLock<std::sync::Arc<dyn PdfWorker>>,
    pub(crate) pdf_slots: &'a Slots,
}

impl Attachments<'_> {
    /// `list_attachments`: a page of the vault's non-note files after the cursor's path.
    pub fn list_attachments(
        &self,
        v: &VaultHandle,
        page: &PageCall<'_>,
        args: &ListAttachmentsArgs,
    ) -> Result<vault::attach::ListAttachments, GatewayError> {
        let after = match self.core.open_cursor(v, page, args.cursor.as_deref())? {
            None => None,
            Some(Position::Attachments(p)) => Some(p),
            Some(_) => return Err(crate::core::not_this_cursor()),
        };
        let (mut out, next) =
            v.reader
                .list_attachments_page(args.dir.as_deref(), args.limit, after.as_ref())?;
        out.next_cursor = next.map(|p| self.core.seal(v, page, &Position::Attachments(p)));
        Ok(out)
    }

    /// Sets the edge's PDF worker; without one, `read_attachment_text` answers `INTERNAL`.
    pub fn set_pdf_worker(&self, worker: Arc<dyn PdfWorker>) {
        let _ = self.pdf_worker.set(worker);
    }

    /// Whether the vault's `gateway.toml` entry has `pdf_text = true`, read now so that turning
    /// it off takes effect at the next call; a file that cannot be read counts as off.
    pub fn pdf_text_on(&self, vault: &str) -> bool {
        self.core.refresh();
        self.core
            .config()
            .vaults
            .iter()
            .find(|v| v.id == vault)
            .is_some_and(|v| v.pdf_text)
    }

    /// `read_attachment_text`: a PDF's text page by page, parsed by the worker process, for
    /// `credential` (one worker at a time each).
    pub fn read_attachment_text(
        &self,
        v: &VaultHandle,
        credential: &str,
        args: &ReadAttachmentArgs,
    ) -> Result<AttachmentTextOut, GatewayError> {
        let max_chars = args.max_chars.unwrap_or(DEFAULT_MAX_CHARS);
        if !(1..=MAX_MAX_CHARS).contains(&max_chars) {
            return Err(GatewayError::InvalidArgument(format!(
                "maxChars is 1 to {MAX_MAX_CHARS}, got {max_chars}"
            )));
        }
        if let Some(pages) = &args.pages
            && pages.contains(&0)
        {
            return Err(GatewayError::InvalidArgument("pages are numbered from 1".into()));
        }
        // Read now, like the opt-in: a changed setting holds at the next call.
        self.core.refresh();
        let config = self.core.config();
        let pdf_text = config
            .vaults
            .iter()
            .find(|vc| vc.id == v.id)
            .is_some_and(|vc| vc.pdf_text);
        let allow_without_sandbox = config.pdf.allow_without_sandbox;
        // SECURITY(T-PDF): the opt-in comes first, so a vault that has not turned PDF text on
        // answers the same whatever the path names.
        if !pdf_text {
            return Err(GatewayError::CapabilityDenied(format!(
                "PDF text is off for vault '{}' (pdf_text in gateway.toml): the text would leave this \
                 machine through the client. The operator turns it on with `vaultgate vault pdf-text {} on` \
                 or on the review page's Vaults page",
                v.id, v.id
            )));
        }
        // SECURITY(T-PDF): the slot first, so calls waiting for a worker hold no document: at
        // most WORKER_SLOTS PDFs (64 MiB each) are in memory at once, however many calls come.
        // SECURITY(T-PDF3): and one worker per credential: its second call waits for the first.
        let _slot = self
            .pdf_slots
            .take(credential, SLOT_WAIT)
            .map_err(|why| {
                GatewayError::Attachment(
                    Unreadable::NotText,
                    match why {
                        NoSlot::Credential => "another PDF of this credential was being read for a minute (one at a time per credential); try again later",
                        NoSlot::All => "every PDF worker stayed busy for a minute; try again later",
                    }
                    .into(),
                )
            })?;
        let (bytes, _) = v
            .reader
            .read_pdf(&args.path, MAX_PDF_BYTES)
            .map_err(|e| match e.code() {
                ErrorCode::NOT_TEXT => GatewayError::Attachment(
                    Unreadable::NotText,
                    format!("{} is not a PDF: only PDF text can be read", args.path),
                ),
                ErrorCode::TOO_LARGE => GatewayError::Attachment(
                    Unreadable::TooLarge,
                    format!(
                        "{} is larger than {} MiB, the most a PDF may be to be read",
                        args.path,
                        MAX_PDF_BYTES >> 20
                    ),
                ),
                _ => GatewayError::Vault(e),
            })?;
        let worker = self
            .pdf_worker
            .get()
            .ok_or_else(|| GatewayError::Internal("no PDF worker is configured".into()))?;
        let req = Request {
            pages: args.pages.clone(),
            default_pages: DEFAULT_PAGES,
            max_chars,
            // The text appears twice in a result (structured and as text), JSON-escaped.
            max_total_bytes: (self.core.read_limits().max_output_bytes / 4) as u64,
        };
        let doc = worker.extract(&bytes, &req, allow_without_sandbox).map_err(|f| {
            let why = match f.kind {
                FailureKind::Encrypted => "it is encrypted",
                FailureKind::Corrupt => "it could not be parsed",
                FailureKind::Limit => "reading it went past the worker's limits",
                // SECURITY(T-PDF3): no sandbox, no parse: the operator decides, by name.
                FailureKind::Sandbox => {
                    tracing::warn!(reason = %f.reason, "PDF worker without its sandbox: PDF text refused");
                    return GatewayError::CapabilityDenied(format!(
                        "{} was not read: {}. PDF text needs the worker's sandbox (a seccomp filter); \
                         the operator may set `[pdf] allow_without_sandbox = true` in gateway.toml to \
                         parse PDFs without it (a parser bug could then reach the network, other \
                         processes and files); `vaultgate doctor` shows the sandbox",
                        args.path, f.reason
                    ));
                }
            };
            tracing::info!(kind = ?f.kind, "PDF text refused");
            GatewayError::Attachment(
                Unreadable::NotText,
                format!("{} has no readable text: {why} ({})", args.path, f.reason),
            )
        })?;
        Ok(AttachmentTextOut {
            path: args.path.clone(),
            page_count: doc.page_count,
            truncated: doc.truncated,
            pages: doc
                .pages
                .into_iter()
                .map(|p| PageText {
                    page: p.page,
                    text: p.text,
                    truncated: p.truncated,
                    error: p.error,
                })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// SECURITY(T-PDF3): one credential's calls take turns; other credentials' calls run beside
    /// them, two at most.
    #[test]
    fn one_worker_per_credential_and_two_in_all() {
        let slots = Slots::default();
        let a = slots.take("a", Duration::ZERO).unwrap();
        assert_eq!(
            slots.take("a", Duration::from_millis(50)).err(),
            Some(NoSlot::Credential)
        );
        let b = slots.take("b", Duration::ZERO).unwrap();
        assert_eq!(slots.take("c", Duration::ZERO).err(), Some(NoSlot::All));
        drop(a);
        let a = slots.take("a", Duration::ZERO).unwrap();
        drop(b);
        drop(a);
        let _c = slots.take("c", Duration::ZERO).unwrap();
    }

    /// A waiting call goes on when its credential's other call ends, whoever else waits.
    #[test]
    fn a_credentials_second_call_waits_for_its_first() {
        let slots = Slots::default();
        let running = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    let _slot = slots.take("same", Duration::from_secs(30)).unwrap();
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(30));
                    running.fetch_sub(1, Ordering::SeqCst);
                });
            }
            // Another credential is not held up by them.
            let started = Instant::now();
            let other = slots.take("other", Duration::from_secs(30)).unwrap();
            assert!(started.elapsed() < Duration::from_secs(5));
            drop(other);
        });
        assert_eq!(most.load(Ordering::SeqCst), 1);
    }
}
