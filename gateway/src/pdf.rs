//! The PDF worker as the engine sees it: this same binary run as `vaultgate pdf-worker`, one
//! process per document, with the limits of `pdftext::worker::Limits`, sandboxed before it reads
//! the document (docs/contract.md#notes-as-data-and-attachments); and `vaultgate pdf-worker --probe` for `doctor`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use engine::attachments::PdfWorker;
use pdftext::wire::{Document, Failure, FailureKind, Request, SandboxStatus};

/// The argument that turns this binary into the worker (`cli::main` checks it first).
pub(crate) const WORKER_ARG: &str = "pdf-worker";

/// How long `doctor` waits for the probe's report.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// `vaultgate pdf-worker [--probe …]`: `args` are those after `pdf-worker`.
pub(crate) fn worker_main(args: &[OsString]) -> ExitCode {
    pdftext::worker::main(args)
}

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

    fn exe(&self) -> Result<&PathBuf, String> {
        self.exe
            .as_ref()
            .map_err(|e| format!("could not find vaultgate's own binary to start the PDF worker: {e}"))
    }
}

impl PdfWorker for WorkerProcess {
    fn extract(&self, pdf: &[u8], req: &Request, allow_without_sandbox: bool) -> Result<Document, Failure> {
        let exe = self.exe().map_err(|reason| Failure {
            kind: FailureKind::Limit,
            reason,
        })?;
        let limits = pdftext::worker::Limits {
            allow_without_sandbox,
            ..self.limits.clone()
        };
        pdftext::worker::run(exe, &[WORKER_ARG], pdf, req, &limits)
    }

    fn probe_sandbox(&self) -> Result<SandboxStatus, String> {
        pdftext::worker::probe_sandbox(self.exe()?, &[WORKER_ARG], PROBE_TIMEOUT)
    }
}
