//! Operator logs: `tracing` to stderr only (stdout belongs to JSON-RPC). Level from `VAULTGATE_LOG`.

use std::collections::BTreeMap;

pub fn init(env: &BTreeMap<String, String>) {
    let filter = env.get("VAULTGATE_LOG").cloned().unwrap_or_else(|| "warn".into());
    let filter = tracing_subscriber::EnvFilter::try_new(&filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}
