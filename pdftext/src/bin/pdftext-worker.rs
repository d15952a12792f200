//! A PDF worker on its own: the same loop `vaultgate pdf-worker` runs, here so that this
//! crate's tests can run a real worker process. It limits itself before it reads the PDF.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    pdftext::worker::serve(std::io::stdin().lock(), std::io::stdout().lock())
}
