//! The PDF worker as the engine sees it: this same binary run as `vaultgate pdf-worker`, one
//! process per document, with the limits of `pdftext::worker::Limits` (docs/contract.md#notes-as-data-and-attachments).

use std::path::PathBuf;

use engine::attachments::PdfWorker;
use pdftext::wire::{Document, Failure, FailureKind, Request};

/// The argument that turns this binary into the worker (`cli::main` checks it first).
pub(crate) const WORKER_ARG: &str = "pdf-worker";

pub(crate) struct WorkerProcess {
    /// This binary, found once at start (a binary replaced later still starts as it was found).
    exe: Result<PathBuf, String>,
    limits: pdftext::worker::Limits,
}

impl WorkerProcess {
    pub(crate) fn new() -> WorkerProcess {
        WorkerProcess {
            exe: std::env::current_exe().map_err(|e| e.to_string()),
            limits: pdftext::worker::Limits::default(),
        }
    }
}

impl PdfWorker for WorkerProcess {
    fn extract(&self, pdf: &[u8], req: &Request) -> Result<Document, Failure> {
        let exe = self.exe.as_ref().map_err(|e| Failure {
            kind: FailureKind::Limit,
            reason: format!("could not find vaultgate's own binary to start the PDF worker: {e}"),
        })?;
        pdftext::worker::run(exe, &[WORKER_ARG], pdf, req, &self.limits)
    }
}
