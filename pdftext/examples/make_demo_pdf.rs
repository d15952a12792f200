//! Writes the demo vault's PDF: `cargo run -p pdftext --example make_demo_pdf -- <out>`
//! (vaultgate's is gateway/demo/vault/reading/papers/vaultgate-demo.pdf).

use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(out) = std::env::args_os().nth(1) else {
        eprintln!("usage: make_demo_pdf <out.pdf>");
        return ExitCode::from(2);
    };
    let bytes = match pdftext::build::text_pdf(&pdftext::build::DEMO_PAGES) {
        Ok(bytes) => bytes,
        Err(e) => {
            eprintln!("make_demo_pdf: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = std::fs::write(&out, &bytes) {
        eprintln!("make_demo_pdf: {}: {e}", out.to_string_lossy());
        return ExitCode::FAILURE;
    }
    eprintln!("wrote {} bytes to {}", bytes.len(), out.to_string_lossy());
    ExitCode::SUCCESS
}
