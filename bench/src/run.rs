//! The benchmark run: for each vault size, generate the vault, set up vaultgate, measure it over
//! stdio and HTTP, measure each installed peer on the same queries, then write the report.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::mcp::{self, CallGen, Client};
use crate::peers::{self, Avail, BasicMemory, Peers};
use crate::report;
use crate::stats::{Summary, summarize};
use crate::synth::{self, Generator, Manifest, Query, Rng};
use crate::vaultgate::{self, Gate, Server};
use crate::{Config, Only};

static START: OnceLock<Instant> = OnceLock::new();

/// Progress on stderr (stdout stays quiet), with the seconds since the run started.
pub fn say(msg: &str) {
    let t = START.get_or_init(Instant::now).elapsed().as_secs_f64();
    let mut e = std::io::stderr().lock();
    let _ = writeln!(e, "[{t:7.1}s] {msg}");
}

/// One measured line of the report.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Row {
    /// A stable lookup key: `system/transport/op/detail-key/clients`.
    pub key: String,
    pub op: String,
    pub detail: String,
    pub system: String,
    pub transport: String,
    pub clients: usize,
    pub s: Summary,
    pub note: String,
}

/// A single measured fact (a duration, a memory peak, a rate) or a reason it was not measured.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Fact {
    pub key: String,
    pub label: String,
    pub value: String,
    pub num: Option<f64>,
}

/// A `perf` profile of one workload.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Profile {
    pub title: String,
    pub text: String,
}

#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct SizeResult {
    pub notes: usize,
    pub manifest: Option<Manifest>,
    pub rows: Vec<Row>,
    pub facts: Vec<Fact>,
    /// Correctness checks and failures seen during the run (a failure is never hidden).
    pub checks: Vec<String>,
    pub profiles: Vec<Profile>,
    pub peers: Vec<(String, String)>,
}

impl SizeResult {
    #[allow(clippy::too_many_arguments)] // one report row has this many columns
    fn row(
        &mut self,
        system: &str,
        transport: &str,
        op: &str,
        dkey: &str,
        detail: &str,
        clients: usize,
        s: Summary,
        note: &str,
    ) {
        if let Some(e) = &s.first_error {
            self.checks.push(format!(
                "{system} {transport} {op} {dkey}: {} failed call(s), first: {e}",
                s.errors
            ));
        }
        let line = format!(
            "{system:<12} {transport:<6} {op:<22} {dkey:<10} x{clients} n={:<5} p50={} ms p99={} ms {}/s",
            s.calls,
            crate::stats::ms(s.p50_ms),
            crate::stats::ms(s.p99_ms),
            crate::stats::rate(s.per_sec)
        );
        say(&line);
        self.rows.push(Row {
            key: format!("{system}/{transport}/{op}/{dkey}/{clients}"),
            op: op.to_owned(),
            detail: detail.to_owned(),
            system: system.to_owned(),
            transport: transport.to_owned(),
            clients,
            s,
            note: note.to_owned(),
        });
    }

    fn fact(&mut self, key: &str, label: &str, value: String, num: Option<f64>) {
        say(&format!("{label}: {value}"));
        self.facts.push(Fact {
            key: key.to_owned(),
            label: label.to_owned(),
            value,
            num,
        });
    }

    fn check(&mut self, msg: String) {
        say(&msg);
        self.checks.push(msg);
    }

    pub fn find(&self, key: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.key == key)
    }

    pub fn num(&self, key: &str) -> Option<f64> {
        self.facts.iter().find(|f| f.key == key).and_then(|f| f.num)
    }
}

/// Everything the report needs.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct RunResult {
    pub sizes: Vec<SizeResult>,
    /// The machine and the run's settings, as they were when it ran.
    #[serde(default)]
    pub machine: Vec<(String, String)>,
    #[serde(default)]
    pub command: String,
    #[serde(default)]
    pub budget: f64,
    #[serde(default)]
    pub throughput_secs: f64,
    #[serde(default)]
    pub seed: u64,
    pub vaultgate_version: String,
    pub has_index_command: bool,
    pub peers: Vec<(String, String)>,
    pub started: String,
    pub wall_secs: f64,
    pub profile_note: String,
    /// basic-memory's initial index rate (notes/s) on the largest vault it ran on.
    pub bm_rate: Option<f64>,
    /// What the run measured (`--only`): `all` or `writes` (empty in results from before the option).
    #[serde(default)]
    pub only: String,
}

fn ensure(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))
}

fn abs(p: &Path) -> Result<PathBuf, String> {
    std::path::absolute(p).map_err(|e| format!("{}: {e}", p.display()))
}

/// Rewrites the report from `results.json` without measuring anything.
pub fn render_only(cfg: &Config) -> Result<(), String> {
    let path = cfg.out.join("results.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut run: RunResult = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if run.machine.is_empty() {
        // Results from before the machine was recorded with them: describe this machine now.
        run.machine = report::machine(&cfg.binary_note);
        run.command = cfg.command.clone();
        run.budget = cfg.budget;
        run.throughput_secs = cfg.throughput_secs;
        run.seed = cfg.seed;
    }
    std::fs::write(&cfg.report, report::render(&run))
        .map_err(|e| format!("{}: {e}", cfg.report.display()))?;
    say(&format!("wrote {} from {}", cfg.report.display(), path.display()));
    Ok(())
}

pub async fn all(cfg: &Config) -> Result<(), String> {
    START.get_or_init(Instant::now);
    let started = report::now_utc();
    ensure(&cfg.out)?;
    let out = abs(&cfg.out)?;
    let bin = abs(&cfg.vaultgate)?;
    if !bin.is_file() {
        return Err(format!(
            "{} not found: build it with `cargo build --release`",
            bin.display()
        ));
    }
    let peers_dir = abs(&cfg.peers)?;
    let peers = Peers::detect(&peers_dir, &out);
    let peer_status = vec![
        ("ripgrep".to_owned(), peers.ripgrep.describe()),
        ("filesystem MCP server".to_owned(), peers.filesystem.describe()),
        ("basic-memory".to_owned(), peers.basic_memory.describe()),
    ];
    for (k, v) in &peer_status {
        say(&format!("peer {k}: {v}"));
    }
    let mut sizes = cfg.sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    let largest = sizes.last().copied().unwrap_or(0);
    let mut result = RunResult {
        sizes: Vec::new(),
        machine: report::machine(&cfg.binary_note),
        command: cfg.command.clone(),
        budget: cfg.budget,
        throughput_secs: cfg.throughput_secs,
        seed: cfg.seed,
        vaultgate_version: String::new(),
        has_index_command: false,
        peers: peer_status,
        started,
        wall_secs: 0.0,
        profile_note: String::new(),
        bm_rate: None,
        only: cfg.only.name().to_owned(),
    };
    for &n in &sizes {
        say(&format!("==== {n} notes ===="));
        let profile = cfg.profile && n == largest && cfg.only == Only::All;
        let r = size(cfg, &out, &bin, &peers, n, profile, &mut result).await;
        result.sizes.push(r);
        result.wall_secs = START.get_or_init(Instant::now).elapsed().as_secs_f64();
        // Written after every size, so an interrupted run still leaves what it measured.
        let json = serde_json::to_string_pretty(&result).map_err(|e| e.to_string())?;
        std::fs::write(out.join("results.json"), json).map_err(|e| e.to_string())?;
        let md = report::render(&result);
        std::fs::write(&cfg.report, md).map_err(|e| format!("{}: {e}", cfg.report.display()))?;
    }
    say(&format!(
        "wrote {} and {}",
        cfg.report.display(),
        out.join("results.json").display()
    ));
    Ok(())
}

/// The 1-minute load average, as `/proc/loadavg` says.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

/// The read_note paths of a run: a fixed random sample of the vault.
fn sample_paths(g: &Generator, k: usize) -> Arc<Vec<String>> {
    let mut r = Rng::new(g.seed ^ 0xA11CE);
    Arc::new((0..k).map(|_| g.path(r.below(g.n))).collect())
}

fn detail(q: &Query, m: &Manifest) -> String {
    let hits = m.matching_notes.get(q.key).copied().unwrap_or(0);
    format!("{} `{}` ({hits} notes)", q.what, q.text)
}

/// Distinct note paths among `hits[]` of a vaultgate search answer.
fn hit_paths(v: &Value) -> std::collections::BTreeSet<String> {
    v["hits"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|h| h["path"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

async fn size(
    cfg: &Config,
    out: &Path,
    bin: &Path,
    peers: &Peers,
    n: usize,
    profile: bool,
    run: &mut RunResult,
) -> SizeResult {
    let mut r = SizeResult {
        notes: n,
        ..SizeResult::default()
    };
    let g = Generator::new(n, cfg.seed);
    let load_before = loadavg();
    let watch = crate::contention::Watch::start();
    let base = out.join(format!("size-{n}"));
    if base.exists()
        && let Err(e) = std::fs::remove_dir_all(&base)
    {
        r.check(format!("could not clear {}: {e}", base.display()));
        return r;
    }
    let vault = base.join("vault");
    say(&format!("generating {n} notes into {}", vault.display()));
    let manifest = match g.write(&vault) {
        Ok(m) => m,
        Err(e) => {
            r.check(format!("generating the vault failed: {e}"));
            return r;
        }
    };
    r.fact(
        "generate_secs",
        "vault generation",
        format!(
            "{:.1} s ({:.1} MB in {n} notes)",
            manifest.generate_secs,
            manifest.bytes as f64 / 1e6
        ),
        Some(manifest.generate_secs),
    );
    r.manifest = Some(manifest.clone());
    // basic-memory rewrites the files it indexes: it gets its own copy, taken before any write.
    let bm_dir = base.join("basic-memory");
    let bm_wanted =
        cfg.only == Only::All && matches!(peers.basic_memory, Avail::Ready { .. }) && n <= cfg.bm_max_notes;
    if bm_wanted && let Err(e) = peers::copy_tree(&vault, &bm_dir.join("vault")) {
        r.check(format!("copying the vault for basic-memory failed: {e}"));
    }

    let gate = match Gate::setup(bin, &base, &vault) {
        Ok(g) => g,
        Err(e) => {
            r.check(format!("vaultgate setup failed: {e}"));
            return r;
        }
    };
    run.vaultgate_version = gate.version();
    run.has_index_command = gate.has_index_command();
    index_build(&gate, &g, &mut r).await;

    let paths = sample_paths(&g, 2000);
    let server_start = Instant::now();
    let server = match gate.serve() {
        Ok(s) => s,
        Err(e) => {
            r.check(format!("vaultgate serve failed: {e}"));
            return r;
        }
    };
    r.fact(
        "serve_start_secs",
        "`vaultgate serve` start to /healthz",
        format!("{:.2} s", server_start.elapsed().as_secs_f64()),
        Some(server_start.elapsed().as_secs_f64()),
    );
    let t = Instant::now();
    let stdio = gate.stdio("main").await;
    let stdio_connect = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let http = Client::http(&server.url(), Some(&gate.token)).await;
    let http_connect = t.elapsed().as_secs_f64();
    let (stdio, http) = match (stdio, http) {
        (Ok(s), Ok(h)) => (s, h),
        (s, h) => {
            for e in [s.err(), h.err()].into_iter().flatten() {
                r.check(format!("connecting to vaultgate failed: {e}"));
            }
            return r;
        }
    };
    r.fact(
        "connect_secs",
        "client connect (spawn + initialize) stdio / HTTP",
        format!("{stdio_connect:.2} s / {http_connect:.3} s"),
        Some(stdio_connect),
    );

    let all = cfg.only == Only::All;
    // The server's peak resident memory in each phase (VmHWM is reset between phases).
    let mut peaks: Vec<(&str, Option<f64>)> = vec![(
        "start and connect",
        vaultgate::memory_mib(server.pid()).map(|m| m.0),
    )];
    vaultgate::reset_peak(server.pid());
    if all {
        first_answer(&gate, &paths, &mut r).await;
    }
    if cfg.only == Only::Search {
        verify_search(&http, &manifest, &mut r).await;
        for (transport, client) in [("stdio", &stdio), ("HTTP", &http)] {
            vaultgate_reads(cfg, client, transport, &paths, &manifest, &mut r).await;
        }
        return r;
    }
    if all {
        // ---- vaultgate reads, one client per transport ----
        verify_search(&http, &manifest, &mut r).await;
        for (transport, client) in [("stdio", &stdio), ("HTTP", &http)] {
            vaultgate_reads(cfg, client, transport, &paths, &manifest, &mut r).await;
        }
        pdf_text(cfg, &gate, &stdio, &mut r).await;
        peaks.push((
            "one-client reads and searches",
            vaultgate::memory_mib(server.pid()).map(|m| m.0),
        ));
        vaultgate::reset_peak(server.pid());
        // ---- throughput, 1 and 8 clients; then the lean load generator ----
        throughput(cfg, &gate, &server, &paths, &mut r).await;
        lean_http(cfg, &gate, &server, &paths, &base, &mut r);
        peaks.push((
            "throughput (rmcp clients, then wrk)",
            vaultgate::memory_mib(server.pid()).map(|m| m.0),
        ));
        vaultgate::reset_peak(server.pid());

        // ---- peers on the same vault and queries ----
        if let Avail::Ready { path, .. } = &peers.ripgrep {
            ripgrep(cfg, path, &vault, &manifest, &mut r).await;
        }
        // A peer that did not install is reported once, in the peers table.
        if let Avail::Ready { path, .. } = &peers.filesystem {
            filesystem(cfg, path, &vault, &paths, &base, &mut r).await;
        }
        match &peers.basic_memory {
            Avail::Ready { path, .. } if n <= cfg.bm_max_notes => {
                basic_memory(cfg, path, &bm_dir, &g, &paths, &manifest, &mut r).await;
                if let Some(secs) = r.num("bm_index_secs") {
                    run.bm_rate = Some(n as f64 / secs);
                }
            }
            Avail::Ready { .. } => {
                let estimate = match run.bm_rate {
                    Some(rate) => format!(
                        "at the rate its initial index ran on the smaller vault ({rate:.1} notes/s) it would take about \
                         {:.0} min before the first query",
                        n as f64 / rate / 60.0
                    ),
                    None => "its initial index is slow (measured only on smaller vaults)".to_owned(),
                };
                r.peers.push((
                    "basic-memory".to_owned(),
                    format!(
                        "not run at this size: {estimate}, beyond this run's time budget (`--bm-max-notes {}`)",
                        cfg.bm_max_notes
                    ),
                ));
            }
            Avail::Missing(_) => {}
        }
    }

    // ---- writes: propose+apply (1 and 8 clients) against the durable floor, syncs per write ----
    writes(cfg, &gate, &server, &stdio, &http, &g, &base, &mut r).await;

    // ---- freshness while serving ----
    if all {
        freshness(&http, &g, &vault, &mut r).await;
    }

    // ---- memory ----
    peaks.push((
        "writes and freshness",
        vaultgate::memory_mib(server.pid()).map(|m| m.0),
    ));
    let phases: Vec<String> = peaks
        .iter()
        .map(|(phase, m)| format!("{phase} {}", m.map_or("?".to_owned(), |m| format!("{m:.0} MiB"))))
        .collect();
    let now = vaultgate::memory_mib(server.pid()).map(|m| m.1);
    match peaks.iter().filter_map(|(_, m)| *m).reduce(f64::max) {
        Some(peak) => r.fact(
            "rss_serve_mib",
            "vaultgate serve peak RSS over the whole run (the largest VmHWM of its phases)",
            format!(
                "{peak:.1} MiB (now {:.1} MiB); by phase: {}",
                now.unwrap_or(f64::NAN),
                phases.join(", ")
            ),
            Some(peak),
        ),
        None => r.check("vaultgate serve: could not read /proc/<pid>/status".to_owned()),
    }
    let mut procs = Vec::new();
    // With `--only writes` the main stdio process was the writing one, already reported by `writes`.
    if all {
        procs.push(("vaultgate stdio", "rss_stdio_mib", stdio.pid));
    }
    for (label, key, pid) in procs {
        match pid.and_then(vaultgate::memory_mib) {
            Some((hwm, now)) => r.fact(
                key,
                &format!("{label} peak RSS (VmHWM)"),
                format!("{hwm:.1} MiB (now {now:.1} MiB)"),
                Some(hwm),
            ),
            None => r.check(format!("{label}: could not read /proc/<pid>/status")),
        }
    }

    let (foreign, wall) = watch.finish();
    r.fact(
        "foreign_cores",
        "CPU used by other processes on the machine while this size ran",
        format!(
            "{foreign:.0} CPU-seconds over {wall:.0} s = {:.2} of the 2 cores on average",
            foreign / wall.max(1e-9)
        ),
        Some(foreign / wall.max(1e-9)),
    );
    r.fact(
        "loadavg",
        "load average (1 min) before / after this size (from /proc/loadavg; 2 cores)",
        format!("{} / {}", load_before, loadavg()),
        None,
    );
    if profile {
        profiles(cfg, &gate, &server, &http, &g, &paths, &mut r, run).await;
    }
    stdio.close().await;
    http.close().await;
    drop(server);
    r
}

/// `vaultgate index --rebuild` (docs/contract.md#the-command-line), when this build has it; then one changed note.
async fn index_build(gate: &Gate, g: &Generator, r: &mut SizeResult) {
    if !gate.has_index_command() {
        let why = "no index command in this build (`vaultgate --help` lists none): searches scan the files per call".to_owned();
        r.fact("index_build", "index build", why.clone(), None);
        r.fact("index_incremental", "incremental index update", why, None);
        return;
    }
    match gate.timed_cli(&["index", "--vault", vaultgate::VAULT_ID, "--rebuild"]) {
        Ok(d) => {
            let rate = g.n as f64 / d.as_secs_f64();
            r.fact(
                "index_build_secs",
                "index build (`vaultgate index --rebuild`, CLI process)",
                format!("{:.2} s = {rate:.0} notes/s", d.as_secs_f64()),
                Some(d.as_secs_f64()),
            );
            r.facts.push(Fact {
                key: "index_notes_per_sec".to_owned(),
                label: "index build rate".to_owned(),
                value: format!("{rate:.0} notes/s"),
                num: Some(rate),
            });
        }
        Err(e) => r.fact("index_build", "index build", format!("failed: {e}"), None),
    }
    match gate.timed_cli(&["index", "--vault", vaultgate::VAULT_ID]) {
        Ok(d) => r.fact(
            "index_noop_secs",
            "index update with nothing changed (`vaultgate index`)",
            format!("{:.3} s", d.as_secs_f64()),
            Some(d.as_secs_f64()),
        ),
        Err(e) => r.fact(
            "index_noop",
            "index update, nothing changed",
            format!("failed: {e}"),
            None,
        ),
    }
    let path = gate.vault.join(g.path(g.n / 2));
    let edited = std::fs::read_to_string(&path).map(|t| t + "\nAn edited line for the incremental update.\n");
    match edited.and_then(|t| std::fs::write(&path, t)) {
        Ok(()) => match gate.timed_cli(&["index", "--vault", vaultgate::VAULT_ID]) {
            Ok(d) => r.fact(
                "index_incremental_secs",
                "incremental index update, one note changed (`vaultgate index`, CLI process)",
                format!("{:.3} s", d.as_secs_f64()),
                Some(d.as_secs_f64()),
            ),
            Err(e) => r.fact(
                "index_incremental",
                "incremental index update",
                format!("failed: {e}"),
                None,
            ),
        },
        Err(e) => r.check(format!("editing a note for the incremental update failed: {e}")),
    }
}

/// The rare query's hits are exactly the planted notes (so the numbers measure a correct answer).
async fn verify_search(c: &Client, m: &Manifest, r: &mut SizeResult) {
    for q in synth::content_queries() {
        if q.key != "rare-1" && q.key != "rare-3" && q.key != "cjk" {
            continue;
        }
        let want = m.matching_notes.get(q.key).copied().unwrap_or(0);
        match c
            .call("search_note_content", json!({"query": q.text, "limit": 200}))
            .await
        {
            Ok(v) => {
                let got = hit_paths(&v).len();
                let truncated = v["truncated"].as_bool().unwrap_or(false);
                if got == want {
                    r.check(format!(
                        "ok: vaultgate `{}` found the {want} planted notes",
                        q.text
                    ));
                } else if truncated && got <= want {
                    r.check(format!(
                        "ok: vaultgate `{}` answered 200 hits (truncated) from {got} of the {want} notes that hold it",
                        q.text
                    ));
                } else {
                    r.check(format!(
                        "MISMATCH: vaultgate `{}` found {got} notes, {want} hold it",
                        q.text
                    ));
                }
            }
            Err(e) => r.check(format!("vaultgate search `{}` failed: {e}", q.text)),
        }
    }
}

/// Pages of the long PDF `pdf_text` reads.
pub const PDF_PAGES: u32 = 50;

/// `read_attachment_text` (docs/contract.md#notes-as-data-and-attachments): pages per second over a 50-page PDF, a one-page PDF through
/// the server, and the worker's own start cost (spawn, limits, a one-page parse, exit), measured
/// without the server as `worker::run` runs it.
async fn pdf_text(cfg: &Config, gate: &Gate, c: &Client, r: &mut SizeResult) {
    let line = "The quick brown fox jumps over the lazy dog while the vault keeps every note safe.";
    let long: Vec<Vec<&str>> = (0..PDF_PAGES).map(|_| vec![line; 40]).collect();
    let long: Vec<&[&str]> = long.iter().map(Vec::as_slice).collect();
    let mut docs = Vec::new();
    for (name, pages) in [("long", &long[..]), ("short", &[&["One page of text."][..]][..])] {
        let mut doc = pdftext::build::text_document(pages);
        let mut bytes = Vec::new();
        if let Err(e) = doc.save_to(&mut bytes) {
            r.check(format!("writing the {name} PDF failed: {e}"));
            return;
        }
        let dir = gate.vault.join("attachments");
        if let Err(e) = std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(dir.join(format!("{name}.pdf")), &bytes))
        {
            r.check(format!("writing the {name} PDF failed: {e}"));
            return;
        }
        docs.push(bytes);
    }
    if let Err(e) = gate.cli(&["vault", "pdf-text", vaultgate::VAULT_ID, "on"]) {
        r.check(format!("vault pdf-text on failed: {e}"));
        return;
    }
    let peer = c.peer();
    let pages: Vec<u32> = (1..=PDF_PAGES).collect();
    let s = mcp::timed(2, cfg.budget(), 5, 200, async |_| {
        let v = mcp::call_peer(
            &peer,
            "read_attachment_text",
            json!({"path": "attachments/long.pdf", "pages": pages, "maxChars": 50000}),
        )
        .await?;
        match v["pages"].as_array().map(Vec::len) {
            Some(n) if n == PDF_PAGES as usize => Ok(()),
            _ => Err(format!("expected {PDF_PAGES} pages: {v}")),
        }
    })
    .await;
    r.row(
        "vaultgate",
        "stdio",
        "read_attachment_text",
        "50-pages",
        "a 50-page PDF, 40 lines of text a page",
        1,
        s,
        "every page",
    );
    let s = mcp::timed(2, cfg.budget(), 5, 500, async |_| {
        mcp::call_peer(
            &peer,
            "read_attachment_text",
            json!({"path": "attachments/short.pdf"}),
        )
        .await
        .map(drop)
    })
    .await;
    r.row(
        "vaultgate",
        "stdio",
        "read_attachment_text",
        "1-page",
        "a one-page PDF",
        1,
        s,
        "",
    );
    let bin = gate.bin.clone();
    let short = Arc::new(docs.pop().unwrap_or_default());
    let s = mcp::timed(2, cfg.budget(), 5, 500, async |_| {
        let (bin, short) = (bin.clone(), short.clone());
        tokio::task::spawn_blocking(move || {
            let req = pdftext::wire::Request {
                pages: None,
                default_pages: 10,
                max_chars: 20_000,
                max_total_bytes: 4 << 20,
            };
            pdftext::worker::run(
                &bin,
                &["pdf-worker"],
                &short,
                &req,
                &pdftext::worker::Limits::default(),
            )
            .map(drop)
            .map_err(|f| f.reason)
        })
        .await
        .map_err(|e| e.to_string())?
    })
    .await;
    r.row(
        "vaultgate",
        "process",
        "pdf-worker",
        "start",
        "`vaultgate pdf-worker` on a one-page PDF: spawn, limits, parse, answer, exit",
        1,
        s,
        "no server",
    );
}

async fn vaultgate_reads(
    cfg: &Config,
    c: &Client,
    transport: &str,
    paths: &Arc<Vec<String>>,
    m: &Manifest,
    r: &mut SizeResult,
) {
    let peer = c.peer();
    let s = mcp::timed(50, cfg.budget(), 20, 5000, async |i| {
        let p = &paths[i % paths.len()];
        mcp::call_peer(&peer, "read_note", json!({"path": p}))
            .await
            .map(drop)
    })
    .await;
    r.row(
        "vaultgate",
        transport,
        "read_note",
        "random",
        "a random note (~2 KB)",
        1,
        s,
        "",
    );
    for q in synth::content_queries() {
        let s = mcp::timed(2, cfg.budget(), 3, 500, async |_| {
            mcp::call_peer(&peer, "search_note_content", json!({"query": q.text}))
                .await
                .map(drop)
        })
        .await;
        r.row(
            "vaultgate",
            transport,
            "search_note_content",
            q.key,
            &detail(&q, m),
            1,
            s,
            "limit 60 (default)",
        );
    }
    // query_notes: a selective filter (one year and one author: ~1 note in 600) and an
    // unselective one (two thirds of the notes, sorted by a frontmatter field).
    let selective = json!({"where": [
        {"field": "year", "op": "eq", "value": 2017},
        {"field": "authors", "op": "contains", "value": "vaswani"}
    ], "fields": ["year", "authors", "status"]});
    let unselective = json!({"where": [{"field": "year", "op": "gte", "value": 2002}],
        "sort": {"field": "year", "order": "desc"}, "fields": ["year", "status"]});
    for (key, args, what) in [
        ("selective", selective, "year = 2017 and authors contains vaswani"),
        (
            "broad",
            unselective,
            "year >= 2002 (2/3 of the notes), sorted by year desc",
        ),
    ] {
        let s = mcp::timed(5, cfg.budget(), 20, 2000, async |_| {
            mcp::call_peer(&peer, "query_notes", args.clone()).await.map(drop)
        })
        .await;
        r.row(
            "vaultgate",
            transport,
            "query_notes",
            key,
            what,
            1,
            s,
            "limit 50 (default), 3 fields",
        );
    }
    for q in synth::knowledge_queries() {
        let s = mcp::timed(2, cfg.budget(), 3, 500, async |_| {
            mcp::call_peer(&peer, "search_knowledge", json!({"query": q.text}))
                .await
                .map(drop)
        })
        .await;
        r.row(
            "vaultgate",
            transport,
            "search_knowledge",
            q.key,
            &detail(&q, m),
            1,
            s,
            "",
        );
    }
}

/// `read_note` over HTTP with `wrk` (bench/src/wrk.rs): both protocols at 1, 8 and 32
/// connections, each beside the server's CPU per call.
fn lean_http(
    cfg: &Config,
    gate: &Gate,
    server: &Server,
    paths: &Arc<Vec<String>>,
    base: &Path,
    r: &mut SizeResult,
) {
    match crate::wrk::available() {
        Ok(version) => r.fact("wrk_version", "lean HTTP load generator", version, None),
        Err(e) => {
            r.check(format!("wrk did not run: {e}"));
            return;
        }
    }
    let logs = base.join("logs");
    for (dkey, legacy) in [("wrk-2026", false), ("wrk-legacy", true)] {
        for &conns in crate::wrk::CONNECTIONS {
            let cpu = CpuSplit::start(&[server.pid()]);
            match crate::wrk::one(gate, server, paths, cfg.throughput_secs, &logs, legacy, conns) {
                Ok(run) => {
                    let calls = run.summary.calls + run.summary.errors;
                    cpu.finish(r, "cpu", "vaultgate", "read_note", dkey, conns, calls);
                    r.row(
                        "vaultgate",
                        "HTTP",
                        "read_note",
                        dkey,
                        run.detail,
                        conns,
                        run.summary,
                        "wrk; bearer auth + audit",
                    );
                }
                Err(e) => r.check(format!("wrk {dkey} with {conns} connection(s): {e}")),
            }
        }
    }
}

/// Start-up to the first answer on the indexed vault: a new `vaultgate serve` (spawn to its first
/// `read_note` answer over HTTP), and a new `vaultgate stdio` (spawn, initialize, first answer).
async fn first_answer(gate: &Gate, paths: &Arc<Vec<String>>, r: &mut SizeResult) {
    let path = paths.first().cloned().unwrap_or_default();
    let t = Instant::now();
    match gate
        .serve()
        .and_then(|s| crate::wrk::first_read(&s, &gate.token, &path).map(|()| s))
    {
        Ok(s) => {
            let secs = t.elapsed().as_secs_f64();
            r.fact(
                "first_answer_http_secs",
                "a new `vaultgate serve`: spawn to its first `read_note` answer (HTTP)",
                format!("{:.0} ms", secs * 1e3),
                Some(secs),
            );
            drop(s);
        }
        Err(e) => r.check(format!("start-up to the first answer (HTTP): {e}")),
    }
    let t = Instant::now();
    match gate.stdio("first-answer").await {
        Ok(c) => {
            let reply = c.call("read_note", json!({"path": path})).await;
            let secs = t.elapsed().as_secs_f64();
            match reply {
                Ok(_) => r.fact(
                    "first_answer_stdio_secs",
                    "a new `vaultgate stdio`: spawn, initialize and its first `read_note` answer",
                    format!("{:.0} ms", secs * 1e3),
                    Some(secs),
                ),
                Err(e) => r.check(format!("start-up to the first answer (stdio): {e}")),
            }
            c.close().await;
        }
        Err(e) => r.check(format!("start-up to the first answer (stdio): {e}")),
    }
}

/// Where the CPU of a throughput run goes: the server process(es) vs this harness (the clients).
struct CpuSplit {
    pids: Vec<u32>,
    server: Option<f64>,
    client: Option<f64>,
    started: Instant,
}

impl CpuSplit {
    fn start(pids: &[u32]) -> CpuSplit {
        CpuSplit {
            pids: pids.to_vec(),
            server: vaultgate::cpu_sum(pids),
            client: vaultgate::cpu_secs(std::process::id()),
            started: Instant::now(),
        }
    }

    /// Records the split as the fact `<prefix>_<system>_<transport>_<clients>`.
    #[allow(clippy::too_many_arguments)] // one fact has this many parts
    fn finish(
        self,
        r: &mut SizeResult,
        prefix: &str,
        system: &str,
        tool: &str,
        transport: &str,
        clients: usize,
        calls: usize,
    ) {
        let wall = self.started.elapsed().as_secs_f64();
        let (Some(s0), Some(c0), Some(s1), Some(c1)) = (
            self.server,
            self.client,
            vaultgate::cpu_sum(&self.pids),
            vaultgate::cpu_secs(std::process::id()),
        ) else {
            return;
        };
        let per = |cpu: f64| cpu * 1e6 / calls.max(1) as f64;
        r.fact(
            &format!("{prefix}_{system}_{}_{clients}", transport.to_lowercase()),
            &format!(
                "{system}: CPU per `{tool}` call, {clients} {transport} client(s): server / benchmark client"
            ),
            format!(
                "{:.0} µs / {:.0} µs ({:.2} + {:.2} of the 2 cores busy over {wall:.1} s)",
                per(s1 - s0),
                per(c1 - c0),
                (s1 - s0) / wall,
                (c1 - c0) / wall
            ),
            Some(per(s1 - s0)),
        );
    }
}

async fn throughput(
    cfg: &Config,
    gate: &Gate,
    server: &Server,
    paths: &Arc<Vec<String>>,
    r: &mut SizeResult,
) {
    let read: CallGen = {
        let paths = paths.clone();
        Arc::new(move |c, i| {
            let p = &paths[(c * 7919 + i) % paths.len()];
            ("read_note".to_owned(), json!({"path": p}))
        })
    };
    let rare: CallGen = Arc::new(|_, _| ("search_note_content".to_owned(), json!({"query": synth::RARE})));
    for clients in [1usize, 8] {
        // stdio: one server process per client, as MCP hosts do.
        let mut procs = Vec::new();
        for k in 0..clients {
            match gate.stdio(&format!("tp{clients}-{k}")).await {
                Ok(c) => procs.push(c),
                Err(e) => r.check(format!("stdio client {k} of {clients}: {e}")),
            }
        }
        if procs.len() == clients {
            let pids: Vec<u32> = procs.iter().filter_map(|p| p.pid).collect();
            let cpu = CpuSplit::start(&pids);
            let s = mcp::concurrent(
                procs.iter().map(Client::peer).collect(),
                20,
                cfg.throughput(),
                read.clone(),
            )
            .await;
            cpu.finish(
                r,
                "cpu",
                "vaultgate",
                "read_note",
                "stdio",
                clients,
                s.calls + s.errors + 20 * clients,
            );
            r.row(
                "vaultgate",
                "stdio",
                "read_note",
                "loop",
                "closed loop, random notes",
                clients,
                s,
                "one process per client",
            );
        }
        for p in procs {
            p.close().await;
        }
        // HTTP: one session per client, every request authenticated and audited.
        let mut sessions = Vec::new();
        for k in 0..clients {
            match Client::http(&server.url(), Some(&gate.token)).await {
                Ok(c) => sessions.push(c),
                Err(e) => r.check(format!("HTTP client {k} of {clients}: {e}")),
            }
        }
        if sessions.len() == clients {
            let peers: Vec<_> = sessions.iter().map(Client::peer).collect();
            let cpu = CpuSplit::start(&[server.pid()]);
            let s = mcp::concurrent(peers.clone(), 20, cfg.throughput(), read.clone()).await;
            cpu.finish(
                r,
                "cpu",
                "vaultgate",
                "read_note",
                "HTTP",
                clients,
                s.calls + s.errors + 20 * clients,
            );
            r.row(
                "vaultgate",
                "HTTP",
                "read_note",
                "loop",
                "closed loop, random notes",
                clients,
                s,
                "bearer auth + audit",
            );
            let s = mcp::concurrent(peers, 1, cfg.throughput(), rare.clone()).await;
            r.row(
                "vaultgate",
                "HTTP",
                "search_note_content",
                "loop",
                &format!("closed loop, `{}`", synth::RARE),
                clients,
                s,
                "",
            );
        }
        for s in sessions {
            s.close().await;
        }
    }
}

async fn ripgrep(cfg: &Config, rg: &Path, vault: &Path, m: &Manifest, r: &mut SizeResult) {
    for q in synth::content_queries() {
        let terms: Vec<String> = q.text.split_whitespace().map(str::to_owned).collect();
        let want = m.matching_notes.get(q.key).copied().unwrap_or(0);
        match peers::rg_files(rg, vault, &terms).await {
            Ok(got) if got == want => r.check(format!(
                "ok: ripgrep `{}` listed the {want} files that hold it",
                q.text
            )),
            Ok(got) => r.check(format!(
                "MISMATCH: ripgrep `{}` listed {got} files, {want} hold it",
                q.text
            )),
            Err(e) => r.check(format!("ripgrep `{}` failed: {e}", q.text)),
        }
        let s = mcp::timed(1, cfg.budget(), 3, 200, async |_| {
            peers::rg_files(rg, vault, &terms).await.map(drop)
        })
        .await;
        let how = if terms.len() == 1 {
            "`rg -i -F -l`: one full scan"
        } else {
            "`rg -i -F -l` then `xargs rg` per further term"
        };
        r.row(
            "ripgrep",
            "process",
            "search (files)",
            q.key,
            &detail(&q, m),
            1,
            s,
            how,
        );
    }
}

async fn filesystem(
    cfg: &Config,
    script: &Path,
    vault: &Path,
    paths: &Arc<Vec<String>>,
    base: &Path,
    r: &mut SizeResult,
) {
    let log = base.join("logs/filesystem.stderr");
    let c = match peers::filesystem(script, vault, &log).await {
        Ok(c) => c,
        Err(e) => {
            r.peers
                .push(("filesystem MCP server".to_owned(), format!("did not start: {e}")));
            return;
        }
    };
    let vault_s = vault.to_string_lossy().into_owned();
    let peer = c.peer();
    let s = mcp::timed(50, cfg.budget(), 20, 5000, async |i| {
        let p = format!("{vault_s}/{}", paths[i % paths.len()]);
        mcp::call_peer(&peer, "read_text_file", json!({"path": p}))
            .await
            .map(drop)
    })
    .await;
    r.row(
        "filesystem",
        "stdio",
        "read_text_file",
        "random",
        "a random note (~2 KB)",
        1,
        s,
        "",
    );
    let pattern = format!("**/*{}*", synth::TITLE_WORD.word.to_lowercase());
    let s = mcp::timed(1, cfg.budget(), 3, 200, async |_| {
        mcp::call_peer(
            &peer,
            "search_files",
            json!({"path": vault_s, "pattern": pattern}),
        )
        .await
        .map(drop)
    })
    .await;
    r.row(
        "filesystem",
        "stdio",
        "search_files",
        "name-glob",
        &format!("file names `{pattern}`"),
        1,
        s,
        "walks the whole tree; it has no content search",
    );
    let read: CallGen = {
        let paths = paths.clone();
        let vault_s = vault_s.clone();
        Arc::new(move |c, i| {
            let p = format!("{vault_s}/{}", paths[(c * 7919 + i) % paths.len()]);
            ("read_text_file".to_owned(), json!({"path": p}))
        })
    };
    for clients in [1usize, 8] {
        let mut procs = Vec::new();
        for k in 0..clients {
            match peers::filesystem(
                script,
                vault,
                &base.join(format!("logs/filesystem-{clients}-{k}.stderr")),
            )
            .await
            {
                Ok(c) => procs.push(c),
                Err(e) => r.check(format!("filesystem client {k}: {e}")),
            }
        }
        if procs.len() == clients {
            let pids: Vec<u32> = procs.iter().filter_map(|p| p.pid).collect();
            let cpu = CpuSplit::start(&pids);
            let s = mcp::concurrent(
                procs.iter().map(Client::peer).collect(),
                20,
                cfg.throughput(),
                read.clone(),
            )
            .await;
            cpu.finish(
                r,
                "cpu",
                "filesystem",
                "read_text_file",
                "stdio",
                clients,
                s.calls + s.errors + 20 * clients,
            );
            r.row(
                "filesystem",
                "stdio",
                "read_text_file",
                "loop",
                "closed loop, random notes",
                clients,
                s,
                "one process per client",
            );
        }
        for p in procs {
            p.close().await;
        }
    }
    if let Some((hwm, _)) = c.pid.and_then(vaultgate::memory_mib) {
        r.fact(
            "rss_filesystem_mib",
            "filesystem server peak RSS (VmHWM)",
            format!("{hwm:.1} MiB"),
            Some(hwm),
        );
    }
    c.close().await;
}

async fn basic_memory(
    cfg: &Config,
    bin: &Path,
    dir: &Path,
    g: &Generator,
    paths: &Arc<Vec<String>>,
    m: &Manifest,
    r: &mut SizeResult,
) {
    let bm = BasicMemory::new(bin, dir);
    say("basic-memory: indexing its copy of the vault (`basic-memory project add`)");
    match bm.index(Duration::from_secs(cfg.bm_index_timeout)).await {
        Ok(d) => {
            let rate = g.n as f64 / d.as_secs_f64();
            r.fact(
                "bm_index_secs",
                "basic-memory initial index (`basic-memory project add`)",
                format!("{:.1} s = {rate:.1} notes/s", d.as_secs_f64()),
                Some(d.as_secs_f64()),
            );
        }
        Err(e) => {
            r.peers
                .push(("basic-memory".to_owned(), format!("not measured: {e}")));
            return;
        }
    }
    let c = match bm.client(&dir.join("mcp.stderr")).await {
        Ok(c) => c,
        Err(e) => {
            r.peers.push((
                "basic-memory".to_owned(),
                format!("its MCP server did not start: {e}"),
            ));
            return;
        }
    };
    let peer = c.peer();
    // Tool arguments as this version names them.
    let tools = c.tools().await.unwrap_or_default();
    let has_arg = |tool: &str, arg: &str| {
        tools
            .iter()
            .find(|t| t.name == tool)
            .and_then(|t| t.input_schema.get("properties"))
            .and_then(|p| p.get(arg))
            .is_some()
    };
    let folder_arg = if has_arg("write_note", "directory") {
        "directory"
    } else {
        "folder"
    };
    let s = mcp::timed(5, cfg.budget(), 5, 2000, async |i| {
        let p = &paths[i % paths.len()];
        mcp::call_peer(&peer, "read_note", json!({"identifier": p}))
            .await
            .map(drop)
    })
    .await;
    r.row(
        "basic-memory",
        "stdio",
        "read_note",
        "random",
        "a random note by path",
        1,
        s,
        "",
    );
    for q in synth::content_queries() {
        // What it answers, beside what it costs: results on its first page vs the notes that match.
        if let Ok(v) = mcp::call_peer(&peer, "search_notes", json!({"query": q.text})).await {
            let text = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
            let got = text.matches("permalink:").count();
            let want = m.matching_notes.get(q.key).copied().unwrap_or(0);
            r.check(format!(
                "basic-memory `{}`: {got} results on its first page; {want} notes hold every term",
                q.text
            ));
        }
        let s = mcp::timed(1, cfg.budget(), 3, 300, async |_| {
            mcp::call_peer(&peer, "search_notes", json!({"query": q.text}))
                .await
                .map(drop)
        })
        .await;
        r.row(
            "basic-memory",
            "stdio",
            "search_notes",
            q.key,
            &detail(&q, m),
            1,
            s,
            "its FTS index (text mode)",
        );
    }
    let s = mcp::timed(2, cfg.budget(), 3, 300, async |i| {
        let content = g.plain_note(g.n + 2_000_000 + i);
        let mut a = json!({"title": format!("bm-write-{i}"), "content": content});
        a[folder_arg] = json!("bench-writes");
        mcp::call_peer(&peer, "write_note", a).await.map(drop)
    })
    .await;
    r.row(
        "basic-memory",
        "stdio",
        "write_note",
        "new",
        "a new ~2 KB note",
        1,
        s,
        "writes the file directly (no proposal, no review)",
    );
    if let Some((hwm, _)) = c.pid.and_then(vaultgate::memory_mib) {
        r.fact(
            "rss_bm_mib",
            "basic-memory peak RSS (VmHWM)",
            format!("{hwm:.1} MiB"),
            Some(hwm),
        );
    }
    c.close().await;
    r.peers.push(("basic-memory".to_owned(), "measured".to_owned()));
}

/// Clients of the concurrent write runs.
const WRITERS: usize = 8;
/// Untimed pairs of each concurrent writer before its timed loop.
const WARMUP_PAIRS: usize = 2;
/// Operations of each traced process that counts sync calls.
const TRACED_OPS: usize = 50;

/// The write path: sequential propose+apply over stdio (in a process that does nothing else, whose
/// peak RSS is the writing server's) and HTTP, the floor, 8 concurrent writers over HTTP and
/// stdio, and the sync calls per propose and per apply.
#[allow(clippy::too_many_arguments)] // one call site
async fn writes(
    cfg: &Config,
    gate: &Gate,
    server: &Server,
    stdio: &Client,
    http: &Client,
    g: &Generator,
    base: &Path,
    r: &mut SizeResult,
) {
    // With `--only writes` the main stdio process has only connected: it is the writer. Otherwise it
    // served the reads, so a fresh one writes.
    let dedicated = match cfg.only {
        Only::All => Some(gate.stdio("writer").await),
        Only::Writes | Only::Search => None,
    };
    let writer = match &dedicated {
        None => Some(stdio),
        Some(Ok(c)) => Some(c),
        Some(Err(e)) => {
            r.check(format!("starting the writing stdio process failed: {e}"));
            None
        }
    };
    if let Some(w) = writer {
        propose_apply(cfg, w, "stdio", g, r).await;
        match w.pid.and_then(vaultgate::memory_mib) {
            Some((hwm, now)) => r.fact(
                "rss_stdio_writer_mib",
                "`vaultgate stdio` peak RSS (VmHWM) of a process that did only the sequential propose+apply run",
                format!("{hwm:.1} MiB (now {now:.1} MiB)"),
                Some(hwm),
            ),
            None => r.check("writing vaultgate stdio: could not read /proc/<pid>/status".to_owned()),
        }
    }
    if let Some(Ok(c)) = dedicated {
        c.close().await;
    }
    propose_apply(cfg, http, "HTTP", g, r).await;
    floor(cfg, base, &g.plain_note(g.n + 1_000_000), r).await;
    concurrent_writes(cfg, gate, server, g, r).await;
    sync_counts(gate, g, base.parent(), r).await;
    git_writes(cfg, gate, g, r).await;
}

/// The sequential stdio propose+apply again with the vault in a git work tree and git on: what
/// one commit per apply adds at this vault size (it should not grow with the vault: the commit
/// rewrites only the folders on the changed path). Turned off again afterwards.
async fn git_writes(cfg: &Config, gate: &Gate, g: &Generator, r: &mut SizeResult) {
    let git = |args: &[&str]| -> Result<String, String> {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(&gate.vault)
            .args(["-c", "user.name=bench", "-c", "user.email=bench@example.invalid"])
            .args(args)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .map_err(|e| format!("git {args:?}: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        } else {
            Err(format!(
                "git {args:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    };
    let t = Instant::now();
    let setup = git(&["init", "-q"])
        .and_then(|_| gate.cli(&["vault", "git", crate::vaultgate::VAULT_ID, "on"]))
        .and_then(|_| git(&["add", "-A"]))
        .and_then(|_| git(&["commit", "-q", "-m", "the generated vault"]));
    if let Err(e) = setup {
        r.check(format!("git on: setting up the repository failed: {e}"));
        return;
    }
    let secs = t.elapsed().as_secs_f64();
    r.fact(
        "git_first_commit_s",
        "`git init`, `vault git on`, `git add -A`, `git commit` of the whole vault (once, by the user)",
        format!("{secs:.1} s"),
        Some(secs),
    );
    let before = git(&["rev-list", "--count", "HEAD"]).unwrap_or_default();
    match gate.stdio("writer-git").await {
        Ok(c) => {
            propose_apply(cfg, &c, "stdio-git", g, r).await;
            c.close().await;
        }
        Err(e) => r.check(format!("starting the git writer failed: {e}")),
    }
    let after = git(&["rev-list", "--count", "HEAD"]).unwrap_or_default();
    if before == after {
        r.check("git on: no apply made a commit".to_owned());
    }
    if let Err(e) = gate.cli(&["vault", "git", crate::vaultgate::VAULT_ID, "off"]) {
        r.check(format!("git off: {e}"));
    }
}

/// `WRITERS` clients each loop propose_new_note + apply_proposal of their own new notes; a pair
/// counts when the apply answered `applied: true`.
async fn pairs_loop(
    cfg: &Config,
    peers: Vec<rmcp::service::Peer<rmcp::RoleClient>>,
    tag: &str,
    g: &Generator,
    salt: usize,
) -> Summary {
    let peers = Arc::new(peers);
    let gen_ = Generator::new(g.n, g.seed);
    let tag = tag.to_owned();
    mcp::concurrent_work(peers.len(), WARMUP_PAIRS, cfg.throughput(), move |c, i| {
        let peer = peers[c].clone();
        let path = format!("bench-writes/{tag}-c{c}-{i:05}.md");
        let content = gen_.plain_note(gen_.n + salt + c * 100_000 + i);
        let key = format!("bench-{tag}-c{c}-{i}");
        async move {
            let a = propose_apply_once(&peer, &path, &content, &key).await?;
            if a["applied"] != json!(true) {
                return Err(format!("apply_proposal did not apply: {a}"));
            }
            Ok(())
        }
    })
    .await
}

/// Durable propose+apply with `WRITERS` concurrent clients: sessions to the one `vaultgate serve`,
/// then one `vaultgate stdio` process per client (same home and vault, as MCP hosts do).
async fn concurrent_writes(cfg: &Config, gate: &Gate, server: &Server, g: &Generator, r: &mut SizeResult) {
    let detail = "propose_new_note + apply_proposal (~2 KB), closed loop";
    let mut sessions = Vec::new();
    for k in 0..WRITERS {
        match Client::http(&server.url(), Some(&gate.token)).await {
            Ok(c) => sessions.push(c),
            Err(e) => r.check(format!("HTTP writer {k} of {WRITERS}: {e}")),
        }
    }
    if sessions.len() == WRITERS {
        let cpu = CpuSplit::start(&[server.pid()]);
        let s = pairs_loop(
            cfg,
            sessions.iter().map(Client::peer).collect(),
            "w8http",
            g,
            5_000_000,
        )
        .await;
        cpu.finish(
            r,
            "cpu_writes",
            "vaultgate",
            "propose+apply",
            "HTTP",
            WRITERS,
            s.calls + s.errors + WARMUP_PAIRS * WRITERS,
        );
        r.row(
            "vaultgate",
            "HTTP",
            "propose+apply",
            "new-note",
            detail,
            WRITERS,
            s,
            "durable; one session per client, one `serve`",
        );
    }
    for s in sessions {
        s.close().await;
    }
    let mut procs = Vec::new();
    for k in 0..WRITERS {
        match gate.stdio(&format!("w8-{k}")).await {
            Ok(c) => procs.push(c),
            Err(e) => r.check(format!("stdio writer {k} of {WRITERS}: {e}")),
        }
    }
    if procs.len() == WRITERS {
        let pids: Vec<u32> = procs.iter().filter_map(|p| p.pid).collect();
        // A host keeps its server running: measured once each process's start-up scan is done.
        let settled = crate::contention::settle(&pids, Duration::from_secs(120));
        let cpu = CpuSplit::start(&pids);
        let s = pairs_loop(
            cfg,
            procs.iter().map(Client::peer).collect(),
            "w8stdio",
            g,
            6_000_000,
        )
        .await;
        cpu.finish(
            r,
            "cpu_writes",
            "vaultgate",
            "propose+apply",
            "stdio",
            WRITERS,
            s.calls + s.errors + WARMUP_PAIRS * WRITERS,
        );
        r.row(
            "vaultgate",
            "stdio",
            "propose+apply",
            "new-note",
            detail,
            WRITERS,
            s,
            &match settled {
                (waited, true) => format!(
                    "durable; one process per client, same home and vault, measured once their start-up scans were done ({:.0} s after start)",
                    waited.as_secs_f64()
                ),
                (waited, false) => format!(
                    "durable; one process per client, same home and vault, measured {:.0} s after start, before they were quiet",
                    waited.as_secs_f64()
                ),
            },
        );
    }
    for p in procs {
        p.close().await;
    }
}

/// One `vaultgate stdio` under `strace -f -c`: `ops` proposes (and applies, with `apply`), then
/// closed; the sync calls it made from start to exit.
async fn traced_syncs(
    gate: &Gate,
    strace: &Path,
    label: &str,
    ops: usize,
    apply: bool,
    g: &Generator,
    salt: usize,
) -> Result<u64, String> {
    let summary = gate.logs.join(format!("strace-{label}.txt"));
    if summary.exists() {
        std::fs::remove_file(&summary).map_err(|e| format!("{}: {e}", summary.display()))?;
    }
    let c = gate.stdio_traced(label, strace, &summary).await?;
    let peer = c.peer();
    let mut failed = None;
    for i in 0..ops {
        let path = format!("bench-writes/{label}-{i:05}.md");
        let content = g.plain_note(g.n + salt + i);
        let done = if apply {
            propose_apply_once(&peer, &path, &content, &format!("bench-{label}-{i}"))
                .await
                .and_then(|a| {
                    if a["applied"] == json!(true) {
                        Ok(())
                    } else {
                        Err(format!("apply_proposal did not apply: {a}"))
                    }
                })
        } else {
            mcp::call_peer(
                &peer,
                "propose_new_note",
                json!({"path": path, "content": content, "reason": "benchmark"}),
            )
            .await
            .map(drop)
        };
        if let Err(e) = done {
            failed = Some(format!("call {} of {ops}: {e}", i + 1));
            break;
        }
    }
    c.close().await;
    if let Some(e) = failed {
        return Err(e);
    }
    // strace writes its summary once the traced process has exited.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(n) = std::fs::read_to_string(&summary)
            .ok()
            .and_then(|t| vaultgate::strace_calls(&t, vaultgate::SYNC_CALLS))
        {
            return Ok(n);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "no strace summary in {} after the process closed",
                summary.display()
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sync calls per propose and per apply, counted with strace over `TRACED_OPS` calls each, less
/// what a traced process that makes no call syncs (start-up, initialize, shutdown).
async fn sync_counts(gate: &Gate, g: &Generator, out: Option<&Path>, r: &mut SizeResult) {
    let label = "sync calls per propose_new_note / apply_proposal / pair";
    let Some(strace) = peers::which("strace") else {
        // Why, when `bench/run.sh` tried to install it.
        let why = out
            .and_then(|o| peers::install_failures(o).remove("strace"))
            .map_or(String::new(), |w| format!(" ({w})"));
        r.fact(
            "syncs_per_pair",
            label,
            format!("strace not installed: syncs not counted{why}"),
            None,
        );
        return;
    };
    let counted = async {
        let idle = traced_syncs(gate, &strace, "sync-idle", 0, false, g, 7_000_000).await?;
        let propose = traced_syncs(gate, &strace, "sync-propose", TRACED_OPS, false, g, 7_100_000).await?;
        let pair = traced_syncs(gate, &strace, "sync-pair", TRACED_OPS, true, g, 7_200_000).await?;
        Ok::<_, String>((idle, propose, pair))
    };
    match counted.await {
        Ok((idle, propose, pair)) => {
            let n = TRACED_OPS as f64;
            let per_propose = propose.saturating_sub(idle) as f64 / n;
            let per_pair = pair.saturating_sub(idle) as f64 / n;
            let per_apply = per_pair - per_propose;
            r.fact(
                "syncs_per_pair",
                label,
                format!(
                    "{per_propose:.1} / {per_apply:.1} / {per_pair:.1} ({} calls of a `vaultgate stdio` under \
                     `strace -f -c`, over {TRACED_OPS} of each; the {idle} it makes at start-up and shutdown \
                     subtracted)",
                    vaultgate::SYNC_CALLS.join(", "),
                ),
                Some(per_pair),
            );
            r.facts.push(Fact {
                key: "syncs_per_propose".to_owned(),
                label: "sync calls per propose_new_note".to_owned(),
                value: format!("{per_propose:.1}"),
                num: Some(per_propose),
            });
            r.facts.push(Fact {
                key: "syncs_per_apply".to_owned(),
                label: "sync calls per apply_proposal".to_owned(),
                value: format!("{per_apply:.1}"),
                num: Some(per_apply),
            });
        }
        Err(e) => r.fact(
            "syncs_per_pair",
            label,
            format!("strace did not count them: {e}"),
            None,
        ),
    }
}

/// Proposes a new note and applies it; the pair is one durable write through the gateway.
async fn propose_apply_once(
    peer: &rmcp::service::Peer<rmcp::RoleClient>,
    path: &str,
    content: &str,
    key: &str,
) -> Result<Value, String> {
    let p = mcp::call_peer(
        peer,
        "propose_new_note",
        json!({"path": path, "content": content, "reason": "benchmark"}),
    )
    .await?;
    mcp::call_peer(
        peer,
        "apply_proposal",
        json!({"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": key}),
    )
    .await
}

async fn propose_apply(cfg: &Config, c: &Client, transport: &str, g: &Generator, r: &mut SizeResult) {
    let peer = c.peer();
    let tag = transport.to_lowercase();
    let mut propose_lat = Vec::new();
    let mut apply_lat = Vec::new();
    let s = mcp::timed(3, cfg.budget(), 5, 1000, async |i| {
        let path = format!("bench-writes/{tag}-{i:05}.md");
        let content = g.plain_note(g.n + 1_000_000 + i);
        let t = Instant::now();
        let p = mcp::call_peer(
            &peer,
            "propose_new_note",
            json!({"path": path, "content": content, "reason": "benchmark"}),
        )
        .await?;
        let t2 = Instant::now();
        propose_lat.push(t2 - t);
        let a = mcp::call_peer(
            &peer,
            "apply_proposal",
            json!({"id": p["id"], "proposalHash": p["proposalHash"], "idempotencyKey": format!("bench-{tag}-{i}")}),
        )
        .await?;
        apply_lat.push(t2.elapsed());
        if a["applied"] != json!(true) {
            return Err(format!("apply_proposal did not apply: {a}"));
        }
        Ok(())
    })
    .await;
    r.row(
        "vaultgate",
        transport,
        "propose+apply",
        "new-note",
        "propose_new_note + apply_proposal (~2 KB)",
        1,
        s,
        "durable (fsync), audited",
    );
    let wall = Duration::from_secs_f64(1.0);
    let mut ps = summarize(&propose_lat, wall, 0);
    ps.per_sec = f64::NAN;
    let mut aps = summarize(&apply_lat, wall, 0);
    aps.per_sec = f64::NAN;
    r.row(
        "vaultgate",
        transport,
        "propose_new_note",
        "new-note",
        "the first half of propose+apply",
        1,
        ps,
        "incl. warm-up",
    );
    r.row(
        "vaultgate",
        transport,
        "apply_proposal",
        "new-note",
        "the second half of propose+apply",
        1,
        aps,
        "incl. warm-up",
    );
}

/// The floor: write + fsync + rename + fsync(dir) of the same note, in-process, same file system.
async fn floor(cfg: &Config, base: &Path, note: &str, r: &mut SizeResult) {
    let dir = base.join("floor");
    let note = note.to_owned();
    let budget = cfg.budget();
    let res = tokio::task::spawn_blocking(move || -> std::io::Result<Summary> {
        std::fs::create_dir_all(&dir)?;
        let mut lat = Vec::new();
        let start = Instant::now();
        let mut k = 0usize;
        while k < 2000 && (k < 50 || start.elapsed() < budget) {
            let t = Instant::now();
            let tmp = dir.join(format!(".tmp-{k}"));
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(note.as_bytes())?;
            f.sync_all()?;
            drop(f);
            std::fs::rename(&tmp, dir.join(format!("note-{k:05}.md")))?;
            std::fs::File::open(&dir)?.sync_all()?;
            lat.push(t.elapsed());
            k += 1;
        }
        Ok(summarize(&lat, start.elapsed(), 0))
    })
    .await;
    match res {
        Ok(Ok(s)) => r.row(
            "floor",
            "in-process",
            "write+fsync+rename",
            "new-note",
            "the same ~2 KB note, fsync of file and folder",
            1,
            s,
            "no gateway, no client",
        ),
        Ok(Err(e)) => r.check(format!("floor measurement failed: {e}")),
        Err(e) => r.check(format!("floor measurement failed: {e}")),
    }
}

/// How long until a search finds `word`, polling every 5 ms, at most `limit`.
async fn until_found(c: &Client, word: &str, limit: Duration) -> Result<Duration, String> {
    let t = Instant::now();
    loop {
        let v = c
            .call("search_note_content", json!({"query": word, "limit": 5}))
            .await?;
        if !hit_paths(&v).is_empty() {
            return Ok(t.elapsed());
        }
        if t.elapsed() > limit {
            return Err(format!("not found within {} s", limit.as_secs()));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn freshness(c: &Client, g: &Generator, vault: &Path, r: &mut SizeResult) {
    // An editor's save (write a temp file, rename over the note) while the server runs.
    let mut worst: Option<Duration> = None;
    let mut all = Vec::new();
    for trial in 0..3 {
        let word = format!("freshedit{trial}q{}", g.seed);
        let path = vault.join(g.path(1 + trial * 3));
        let saved = std::fs::read_to_string(&path).and_then(|t| {
            let tmp = path.with_extension("md.tmp-editor");
            std::fs::write(&tmp, format!("{t}\nEdited while serving: {word}\n"))?;
            std::fs::rename(&tmp, &path)
        });
        if let Err(e) = saved {
            r.check(format!("editing a note on disk failed: {e}"));
            return;
        }
        match until_found(c, &word, Duration::from_secs(15)).await {
            Ok(d) => {
                all.push(format!("{:.0} ms", d.as_secs_f64() * 1e3));
                worst = Some(worst.map_or(d, |w| w.max(d)));
            }
            Err(e) => {
                all.push(e.clone());
                worst = Some(Duration::from_secs(15));
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    r.fact(
        "fresh_edit_secs",
        "a note edited on disk, until search finds it (3 trials)",
        all.join(", "),
        worst.map(|w| w.as_secs_f64()),
    );
    // A note applied through the gateway, searched right after the apply answered.
    let word = format!("freshapply{}", g.seed);
    let content = format!("{}\nApplied: {word}\n", g.plain_note(g.n + 3_000_000));
    match propose_apply_once(&c.peer(), "bench-writes/fresh-apply.md", &content, "bench-fresh").await {
        Ok(a) => {
            let idx = a["index"].as_str().unwrap_or("-").to_owned();
            match until_found(c, &word, Duration::from_secs(15)).await {
                Ok(d) => r.fact(
                    "fresh_apply_secs",
                    "a note applied through the gateway, until search finds it",
                    format!("{:.0} ms (apply said index: {idx})", d.as_secs_f64() * 1e3),
                    Some(d.as_secs_f64()),
                ),
                Err(e) => r.fact("fresh_apply_secs", "applied note searchable", e, Some(15.0)),
            }
        }
        Err(e) => r.check(format!("propose+apply for freshness failed: {e}")),
    }
}

/// `perf record` of the serve process while it runs one workload; the flat profile's top lines.
async fn perf_of(
    pid: u32,
    secs: u64,
    out: &Path,
    name: &str,
    work: impl std::future::Future<Output = ()>,
) -> Result<String, String> {
    let data = out.join(format!("perf-{name}.data"));
    let rec = tokio::process::Command::new("perf")
        .args(["record", "-F", "499", "--call-graph", "dwarf,16384", "-o"])
        .arg(&data)
        .args(["-p", &pid.to_string(), "--", "sleep", &secs.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    let (rec, ()) = tokio::join!(rec, work);
    let rec = rec.map_err(|e| format!("perf record: {e}"))?;
    if !rec.status.success() {
        return Err(format!("perf record exited {}", rec.status));
    }
    let rep = tokio::process::Command::new("perf")
        .args([
            "report",
            "--stdio",
            "--children",
            "--sort",
            "symbol",
            "--percent-limit",
            "1",
            "-g",
            "none",
            "-i",
        ])
        .arg(&data)
        .output()
        .await
        .map_err(|e| format!("perf report: {e}"))?;
    if !rep.status.success() {
        return Err(format!("perf report exited {}", rep.status));
    }
    Ok(crate::report::perf_summary(&String::from_utf8_lossy(&rep.stdout)))
}

#[allow(clippy::too_many_arguments)] // one call site
async fn profiles(
    cfg: &Config,
    gate: &Gate,
    server: &Server,
    http: &Client,
    g: &Generator,
    paths: &Arc<Vec<String>>,
    r: &mut SizeResult,
    run: &mut RunResult,
) {
    let ok = std::process::Command::new("perf")
        .args(["record", "-o", "/dev/null", "--", "true"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        run.profile_note =
            "perf is not available here: where the time goes is reasoned from the measurements".to_owned();
        return;
    }
    run.profile_note = "`perf record -F 499 --call-graph dwarf -p <vaultgate serve>` for 6 s while the workload \
         runs, then `perf report --children`: inclusive time of the project's functions (share of the server's \
         samples), and the hottest leaves by self time. In this VM the kernel's `finish_task_switch` and \
         `_raw_spin_unlock_irqrestore` collect the samples of blocked threads being switched back in (wake-ups), not \
         work of their own"
        .to_owned();
    let secs = 6;
    let out = gate.logs.clone();
    let dur = Duration::from_secs(secs);
    let pid = server.pid();
    let _ = cfg;
    // 1. search_note_content, common term, one HTTP client.
    let peer = http.peer();
    let work = async {
        let t = Instant::now();
        while t.elapsed() < dur {
            let _ = mcp::call_peer(&peer, "search_note_content", json!({"query": synth::COMMON.word})).await;
        }
    };
    push_profile(
        r,
        "search_note_content `lighthouse`, 1 HTTP client",
        perf_of(pid, secs, &out, "search", work).await,
    );
    // 2. read_note, 8 HTTP clients.
    let mut sessions = Vec::new();
    for _ in 0..8 {
        if let Ok(c) = Client::http(&server.url(), Some(&gate.token)).await {
            sessions.push(c);
        }
    }
    let read: CallGen = {
        let paths = paths.clone();
        Arc::new(move |c, i| {
            (
                "read_note".to_owned(),
                json!({"path": paths[(c * 7919 + i) % paths.len()]}),
            )
        })
    };
    let peers: Vec<_> = sessions.iter().map(Client::peer).collect();
    let work = async {
        let _ = mcp::concurrent(peers, 0, dur, read).await;
    };
    push_profile(
        r,
        "read_note, 8 HTTP clients",
        perf_of(pid, secs, &out, "read", work).await,
    );
    for s in sessions {
        s.close().await;
    }
    // 3. propose+apply, one HTTP client.
    let work = async {
        let t = Instant::now();
        let mut i = 0;
        while t.elapsed() < dur {
            let content = g.plain_note(g.n + 4_000_000 + i);
            let _ = propose_apply_once(
                &peer,
                &format!("bench-writes/prof-{i:05}.md"),
                &content,
                &format!("bench-prof-{i}"),
            )
            .await;
            i += 1;
        }
    };
    push_profile(
        r,
        "propose_new_note + apply_proposal, 1 HTTP client",
        perf_of(pid, secs, &out, "apply", work).await,
    );
}

fn push_profile(r: &mut SizeResult, title: &str, res: Result<String, String>) {
    match res {
        Ok(text) => r.profiles.push(Profile {
            title: title.to_owned(),
            text,
        }),
        Err(e) => r.check(format!("profile of {title} failed: {e}")),
    }
}
