//! Operator logs: `tracing` to stderr only (stdout belongs to JSON-RPC). Level from `VAULTGATE_LOG`.

use std::collections::BTreeMap;

/// The crates of this workspace: the only ones whose level `VAULTGATE_LOG` can raise.
const OURS: &[&str] = &[
    "vaultgate",
    "gateway",
    "engine",
    "vault",
    "inbox",
    "audit",
    "policy",
    "proposals",
];

pub fn init(env: &BTreeMap<String, String>) {
    let spec = env.get("VAULTGATE_LOG").map(String::as_str).unwrap_or("warn");
    let filter = tracing_subscriber::EnvFilter::try_new(filter_for(spec))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

/// SECURITY(T-LOG1): dependencies stay at `warn` whatever `VAULTGATE_LOG` says: at debug rmcp logs
/// whole requests and results (note text) and the HTTP stack logs headers (bearer tokens). A bare
/// level applies to our crates; `target=level` directives are kept only for our crates.
pub fn filter_for(spec: &str) -> String {
    let mut out = vec!["warn".to_owned()];
    for d in spec.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        match d.split_once('=') {
            None => out.extend(OURS.iter().map(|c| format!("{c}={d}"))),
            Some((target, _)) => {
                let krate = target.split("::").next().unwrap_or_default();
                if OURS.contains(&krate) && !target.contains(['[', '{']) {
                    out.push(d.to_owned());
                }
            }
        }
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::filter_for;

    #[test]
    fn dependencies_never_rise_above_warn() {
        let ours: Vec<String> = super::OURS.iter().map(|c| format!("{c}=warn")).collect();
        assert_eq!(filter_for("warn"), format!("warn,{}", ours.join(",")));
        let f = filter_for("debug");
        assert!(
            f.starts_with("warn,") && f.contains("engine=debug") && !f.contains("rmcp"),
            "{f}"
        );
        let f = filter_for("rmcp=trace,h2=trace,engine::txn=debug,hyper=debug");
        assert_eq!(f, "warn,engine::txn=debug");
        let f = filter_for("trace");
        assert!(!f.split(',').any(|d| d == "trace"), "{f}");
    }
}
