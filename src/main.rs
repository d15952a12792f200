//! The `vaultgate` binary: everything lives in the `gateway` crate.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    gateway::cli::main()
}
