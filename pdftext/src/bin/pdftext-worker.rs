//! A PDF worker on its own: the same command line `vaultgate pdf-worker` has (the worker loop,
//! or `--probe`), here so that this crate's tests can run a real worker process. It limits and
//! sandboxes itself before it reads the PDF.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    pdftext::worker::main(&args)
}
