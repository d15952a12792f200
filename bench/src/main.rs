//! `vaultgate-bench`: generates synthetic vaults and measures vaultgate through a real MCP client
//! (stdio and Streamable HTTP) beside its peers (ripgrep, the filesystem MCP server, basic-memory),
//! then writes BENCHMARKS.md. Run it through `bench/run.sh`, which builds and installs the peers.
//!
//! It only reads and writes under its output folder and talks to servers it started on loopback.
#![forbid(unsafe_code)]

mod contention;
mod mcp;
mod peers;
mod report;
mod run;
mod stats;
mod synth;
mod vaultgate;
mod wrk;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

#[derive(Parser, Clone, Debug)]
#[command(
    name = "vaultgate-bench",
    about = "Benchmarks vaultgate and its peers over generated vaults and writes BENCHMARKS.md.",
    args_override_self = true
)]
pub struct Config {
    /// Vault sizes (notes), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
    pub sizes: Vec<usize>,
    /// The vaultgate binary to measure.
    #[arg(long, default_value = "target/release/vaultgate")]
    pub vaultgate: PathBuf,
    /// Where the peers are installed (node_modules, bm-venv).
    #[arg(long, default_value = "bench/.peers")]
    pub peers: PathBuf,
    /// Scratch folder: vaults, homes, logs, raw results.
    #[arg(long, default_value = "bench/out")]
    pub out: PathBuf,
    /// The report to write.
    #[arg(long, default_value = "BENCHMARKS.md")]
    pub report: PathBuf,
    /// Seed of the vault generator.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Time budget of one sequential measurement, in seconds (iteration counts follow from it).
    #[arg(long, default_value_t = 3.0)]
    pub budget: f64,
    /// Duration of one throughput measurement (1 or 8 clients), in seconds.
    #[arg(long, default_value_t = 3.0)]
    pub throughput_secs: f64,
    /// Run basic-memory only on vaults up to this many notes (its initial index is slow).
    #[arg(long, default_value_t = 1000)]
    pub bm_max_notes: usize,
    /// Give up on basic-memory's initial index after this many seconds.
    #[arg(long, default_value_t = 600)]
    pub bm_index_timeout: u64,
    /// Profile the largest size's misses with `perf record` (when perf works here).
    #[arg(long)]
    pub profile: bool,
    /// What the measured binary was built from, as printed in the report.
    #[arg(long, default_value = "")]
    pub binary_note: String,
    /// Only rewrite the report from `<out>/results.json` (no measurement).
    #[arg(long)]
    pub render_only: bool,
    /// The command that reproduces this run, as printed in the report.
    #[arg(long, default_value = "bash bench/run.sh")]
    pub command: String,
    /// What to measure: `all`, or only `writes` (per size: the index build, propose+apply with 1 and
    /// 8 clients over stdio and HTTP, syncs per write, the fsync floor and memory; no reads,
    /// throughput, peers, freshness or profiles), or only `search` (the index build, then reads
    /// and searches of one client per transport).
    #[arg(long, value_enum, default_value_t = Only::All)]
    pub only: Only,
}

/// Which measurements a run makes (`--only`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Only {
    /// Everything: reads, throughput, peers, writes, freshness, memory (and profiles with --profile).
    All,
    /// The write path only, with the floor and memory.
    Writes,
    /// The searches and reads of one client per transport only (with the index build): no
    /// throughput, peers, writes, freshness or profiles.
    Search,
}

impl Only {
    pub fn name(self) -> &'static str {
        match self {
            Only::All => "all",
            Only::Writes => "writes",
            Only::Search => "search",
        }
    }
}

impl Config {
    pub fn budget(&self) -> Duration {
        Duration::from_secs_f64(self.budget)
    }
    pub fn throughput(&self) -> Duration {
        Duration::from_secs_f64(self.throughput_secs)
    }
}

fn main() -> ExitCode {
    let cfg = Config::parse();
    if cfg.render_only {
        return match run::render_only(&cfg) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                run::say(&format!("error: {e}"));
                ExitCode::FAILURE
            }
        };
    }
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            run::say(&format!("tokio runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run::all(&cfg)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            run::say(&format!("error: {e}"));
            ExitCode::FAILURE
        }
    }
}
