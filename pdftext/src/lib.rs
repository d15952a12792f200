//! PDF text extraction for vaultgate's `read_attachment_text`: the wire types between the
//! gateway and its PDF worker, the extraction itself (lopdf), the worker's main loop and the
//! parent-side function that runs one worker under a deadline.
//!
//! PDFs come from the web, so the parser is attack surface. This crate must never parse a PDF
//! anywhere but inside the worker process (`vaultgate pdf-worker`, which limits its own memory,
//! CPU time, files and processes and then sandboxes itself — seccomp, Landlock — before it reads
//! a byte of the document), and it never touches the vault, the network or the environment: the
//! parent hands the bytes over a pipe and gets one line of JSON back.
#![forbid(unsafe_code)]

pub mod build;
mod extract;
mod sandbox;
pub mod wire;
pub mod worker;

/// The extraction itself. Runs lopdf; call it only inside the worker (the worker calls it).
///
/// Pages are 1-based; the requested list is sorted and deduplicated, 0 and numbers past the
/// end are left out. A page whose text lopdf cannot get is answered with empty text, unless
/// every page asked for fails, which is a [`wire::FailureKind::Corrupt`] (or
/// [`wire::FailureKind::Limit`] when a stream would inflate past the decompression limit).
pub fn extract(pdf: &[u8], req: &wire::Request) -> Result<wire::Document, wire::Failure> {
    extract::extract(pdf, req)
}

#[cfg(test)]
mod tests;
