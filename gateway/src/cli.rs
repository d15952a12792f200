//! The command line: thin commands over `Core`, errors mapped to exit codes in `run`.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand, ValueEnum};
use policy::Tier;

use engine::auth::Token;
use engine::core::{Core, Operator};
use engine::error::GatewayError;
use engine::home::Home;

#[derive(Parser)]
#[command(
    name = "vaultgate",
    version,
    about = "A local MCP gateway that lets AI agents read your Markdown vault and propose changes — never damage it.",
    long_about = "A local MCP gateway that lets AI agents read your Markdown vault and propose changes — never damage it.\n\n\
Quick start:\n  vaultgate init\n  vaultgate vault add ~/notes\n  vaultgate token issue --name claude --format claude\n\n\
Try it without touching your notes:\n  vaultgate demo"
)]
struct Cli {
    /// The gateway's home (config, secret, state, audit log). Default: $VAULTGATE_HOME, else
    /// $XDG_DATA_HOME/vaultgate, else ~/.local/share/vaultgate.
    #[arg(long, global = true, value_name = "DIR")]
    home: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create the home: gateway.toml, secret.key (mode 0600), state.sqlite.
    Init,
    /// Register, list and remove vaults.
    #[command(subcommand)]
    Vault(VaultCmd),
    /// Serve MCP over Streamable HTTP at http://127.0.0.1:PORT/mcp (loopback only); every request
    /// needs `Authorization: Bearer <token>`.
    Serve {
        /// Loopback address to bind: 127.0.0.1 (default), ::1 or localhost. Anything else is refused.
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// Port (default: [server] port in gateway.toml, 8765).
        #[arg(long)]
        port: Option<u16>,
        /// Also run the ChatGPT tunnel (`tunnel-client`) as a child, as `[tunnel] autostart` does.
        #[arg(long)]
        tunnel: bool,
    },
    /// Serve MCP over stdin/stdout for one client; the token comes from VAULTGATE_TOKEN.
    Stdio,
    /// Unpack a demo vault into a folder, issue a `full` credential, print client configurations,
    /// then serve it over Streamable HTTP (or stdio with --stdio).
    Demo(DemoArgs),
    /// Issue, list, revoke credentials and change their tier.
    #[command(subcommand)]
    Token(TokenCmd),
    /// Review proposals: list, show, reject.
    #[command(subcommand)]
    Inbox(InboxCmd),
    /// Apply pending proposals: shows each diff and asks y/N on a terminal (without one, needs --yes).
    Apply {
        /// The vault id (default: the default vault).
        #[arg(long)]
        vault: Option<String>,
        /// Apply only this proposal (id or slug).
        #[arg(long, value_name = "ID|SLUG")]
        only: Option<String>,
        /// Apply without asking.
        #[arg(long)]
        yes: bool,
    },
    /// Show, undo or redo the vault's shared history (the one every client sees).
    #[command(subcommand)]
    History(HistoryCmd),
    /// Verify, show or repair the hash-chained audit log.
    #[command(subcommand)]
    Audit(AuditCmd),
    /// Bring a vault's search index (<vault>/.vaultgate/index.sqlite) up to date, or rebuild it;
    /// prints the counts and the time taken (a progress bar on a terminal).
    Index {
        /// The vault id (default: the default vault).
        #[arg(long)]
        vault: Option<String>,
        /// Re-read every note, not only those whose size or time changed.
        #[arg(long)]
        rebuild: bool,
    },
    /// Print the machine contract: tools with schemas and annotations, tiers, error codes.
    Describe {
        /// One JSON document on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Print a one-time login link for the review page of this home's running `vaultgate serve`
    /// (valid once, for [review] login_code_ttl_seconds, 120 s by default).
    Review {
        /// Also open the link in the default browser.
        #[arg(long)]
        open: bool,
        /// The port of the running server (default: the one it recorded in the home).
        #[arg(long)]
        port: Option<u16>,
    },
    /// ChatGPT's Secure MCP Tunnel: set it up once, then `serve --tunnel` runs `tunnel-client`.
    #[command(subcommand)]
    Tunnel(TunnelCmd),
    /// Check the home and every vault: one line per check, `ok|warn|fail  what  next step`;
    /// exits 1 when something needs a person. Changes nothing, and creates nothing without a home.
    Doctor {
        /// One JSON document {ok, checks: [{status, what, next}]}.
        #[arg(long)]
        json: bool,
    },
    /// Print a shell completion script on stdout, e.g.
    /// `vaultgate completions bash > ~/.local/share/bash-completion/completions/vaultgate`.
    Completions {
        /// The shell the script is for.
        #[arg(value_enum)]
        shell: CompletionShell,
    },
    /// Print the man page (roff) on stdout, e.g. `vaultgate man | man -l -`; with --dir, write one
    /// page per command into DIR instead (vaultgate.1, vaultgate-token-issue.1, …).
    Man {
        /// Write the pages into this folder (created if missing) instead of printing one.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Subcommand)]
enum VaultCmd {
    /// Register a folder of Markdown notes.
    Add(VaultAddArgs),
    /// List registered vaults.
    List {
        /// One JSON document on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Unregister a vault (its files are not touched).
    Remove {
        /// The vault id.
        id: String,
    },
    /// Make a vault the default for clients that do not name one.
    SetDefault {
        /// The vault id.
        id: String,
    },
    /// Let agents read the text of the vault's PDFs (`read_attachment_text`), or stop them.
    ///
    /// Off unless turned on: the text of a document then goes to whatever is on the other side of
    /// the client (a tunnel included). A running server reads the setting at every call, so `off`
    /// takes effect at once. The same switch is on the review page's Vaults page.
    PdfText {
        /// The vault id.
        id: String,
        /// on: agents may read PDF text; off: they may not.
        #[arg(value_enum)]
        action: OnOff,
    },
    /// Commit every change vaultgate makes to a vault to its git repository.
    ///
    /// `on` needs the vault folder inside a git work tree and adds `.vaultgate/` and the inbox
    /// to the repository's `.git/info/exclude`. Each apply, undo, redo and executed critical call
    /// then makes one commit of exactly the notes it wrote or removed (no hook, filter or signing
    /// runs; nothing is pushed). While the repository is busy (another git's `index.lock`, a merge
    /// or rebase) commits queue and are made at the next change or start. `off` refuses while
    /// commits are queued unless `--drop-queue`.
    Git {
        /// The vault id.
        id: String,
        /// on: commit each change; off: stop; status: the repository, the git used and the queue.
        #[arg(value_enum)]
        action: GitAction,
        /// With `off`: turn git off even though commits are queued (they are never made).
        #[arg(long)]
        drop_queue: bool,
        /// With `status`: one JSON object.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum OnOff {
    On,
    Off,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum GitAction {
    On,
    Off,
    Status,
}

#[derive(Args)]
struct VaultAddArgs {
    /// The vault folder.
    path: PathBuf,
    /// Vault id (default: a slug of the folder name).
    #[arg(long, value_parser = parse_vault_id)]
    id: Option<String>,
    /// Display name (default: the folder name).
    #[arg(long)]
    name: Option<String>,
    /// Folders whose *.md notes proposals may write (repeatable; default: the whole vault).
    #[arg(long = "notes", value_name = "DIR")]
    notes: Vec<String>,
    /// Standards folders (repeatable; default: `docs` if it exists).
    #[arg(long = "standards", value_name = "DIR")]
    standards: Vec<String>,
    /// Inbox folder where proposals land (default: `inbox`).
    #[arg(long, value_name = "DIR")]
    inbox: Option<String>,
    /// Make it the default vault.
    #[arg(long)]
    default: bool,
    /// Commit every change vaultgate makes to the folder's git repository (as `vault git ID on`).
    #[arg(long)]
    git: bool,
    /// Let `read_attachment_text` give clients the text of the vault's PDFs (as `vault pdf-text ID
    /// on`). Off by default: the text then leaves this machine with whatever the client sends on.
    #[arg(long)]
    pdf_text: bool,
}

#[derive(Args)]
struct DemoArgs {
    /// Where to put the demo vault and home (default: a new temporary folder, kept afterwards).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Prepare and print the configurations, then exit without serving.
    #[arg(long)]
    no_serve: bool,
    /// Serve over stdin/stdout instead of HTTP (for launching the demo from an MCP client).
    #[arg(long)]
    stdio: bool,
    /// HTTP port (default 8765; 0 picks a free one).
    #[arg(long)]
    port: Option<u16>,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum TokenFormat {
    /// The bare token and nothing else.
    Token,
    /// One JSON object {id, name, tier, vaults, expiresAt, token}.
    Json,
    /// Claude Desktop / Claude Code `mcpServers` entry.
    Claude,
    /// Codex `~/.codex/config.toml` entry.
    Codex,
    /// Cursor `.cursor/mcp.json` entry.
    Cursor,
    /// VS Code `.vscode/mcp.json` entry (`servers`).
    Vscode,
}

#[derive(Subcommand)]
enum TokenCmd {
    /// Issue a credential and print its token once, with a client configuration.
    Issue {
        /// A name for the client (unique), e.g. `claude-laptop`.
        #[arg(long, value_parser = parse_name)]
        name: String,
        /// read | propose | auto | full. `full` may apply anyone's proposals and asks for confirmation.
        #[arg(long, default_value = "auto")]
        tier: Tier,
        /// Limit the credential to these vault ids (repeatable; default: every vault).
        #[arg(long = "vault", value_name = "ID")]
        vaults: Vec<String>,
        /// Expiry: 90s, 15m, 12h, 30d (default: never; at most 3650d).
        #[arg(long, value_parser = parse_duration)]
        expires: Option<i64>,
        /// What to print: the token with a client configuration (default), or one of these.
        #[arg(long, value_enum)]
        format: Option<TokenFormat>,
        /// Confirm a `full` tier without asking.
        #[arg(long)]
        yes: bool,
        /// Let this client ask its user to approve an apply the tier alone may not make, inside
        /// the client (MCP elicitation): `propose` may then apply its own proposals, `auto`
        /// anyone's. The client program is trusted to ask honestly, so this raises the tier for
        /// whoever holds the token. No effect on `read` or `full`.
        #[arg(long)]
        approve_in_client: bool,
    },
    /// List credentials (never tokens).
    List {
        /// One JSON document on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a credential by id or name; running servers refuse it on the next call.
    Revoke {
        /// The credential's id or name.
        id: String,
    },
    /// Change a credential's tier; applies to the next call of running servers.
    SetTier {
        /// The credential's id or name.
        id: String,
        /// read | propose | auto | full.
        tier: Tier,
        /// Confirm a `full` tier without asking.
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Subcommand)]
enum TunnelCmd {
    /// Store the tunnel id and the runtime API key (in `<home>/tunnel.key`, 0600; the file given
    /// may then be deleted), find `tunnel-client`, and issue the `chatgpt-tunnel` credential (again:
    /// rotate it). Create the tunnel and a restricted key with Tunnels Read + Use on the OpenAI
    /// platform first.
    Setup {
        /// `tunnel_` and 32 lowercase hex digits, from the OpenAI platform.
        #[arg(long, value_parser = parse_tunnel_id)]
        tunnel_id: String,
        /// A file holding the runtime API key (never pass a key on the command line).
        #[arg(long)]
        api_key_file: PathBuf,
        /// The tier of ChatGPT's credential (default auto; `full` needs --yes).
        #[arg(long, default_value = "auto")]
        tier: Tier,
        /// Limit ChatGPT to these vault ids (repeatable; default: every vault).
        #[arg(long = "vault", value_name = "ID")]
        vaults: Vec<String>,
        /// Confirm a `full` tier without asking.
        #[arg(long)]
        yes: bool,
    },
    /// Show the tunnel's phase: missing | stopped | starting | connected | failed.
    Status {
        /// One JSON document on stdout.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum InboxCmd {
    /// List proposals (pending by default).
    List {
        /// The vault id (default: the default vault).
        #[arg(long)]
        vault: Option<String>,
        /// Which proposals to list.
        #[arg(long, value_enum, default_value_t = StatusArg::Pending)]
        status: StatusArg,
        /// One JSON array of list_proposals items.
        #[arg(long)]
        json: bool,
    },
    /// Show one proposal with its diff.
    Show {
        /// The proposal's id or slug.
        id: String,
        /// The vault id (default: the default vault).
        #[arg(long)]
        vault: Option<String>,
        /// One JSON document on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Reject a pending proposal (its files move to rejected/<date>/).
    Reject {
        /// The proposal's id or slug.
        id: String,
        /// Why it is rejected; recorded with it and audited.
        #[arg(long)]
        reason: String,
        /// The vault id (default: the default vault).
        #[arg(long)]
        vault: Option<String>,
    },
}

/// A proposal status, as `inbox list --status` takes it.
#[derive(Clone, Copy, ValueEnum)]
enum StatusArg {
    Pending,
    Applied,
    Rejected,
}

impl StatusArg {
    fn as_str(self) -> &'static str {
        match self {
            StatusArg::Pending => "pending",
            StatusArg::Applied => "applied",
            StatusArg::Rejected => "rejected",
        }
    }
}

#[derive(Subcommand)]
enum HistoryCmd {
    /// The undo and redo tops, whether the undo top went stale, and any interrupted undo/redo.
    Status {
        /// The vault id (default: the default vault).
        #[arg(long)]
        vault: Option<String>,
        /// One JSON object, as the history_status tool returns it.
        #[arg(long)]
        json: bool,
    },
    /// Undo the newest applied change: shows it and asks y/N on a terminal (without one, needs --yes).
    Undo {
        /// The vault id (default: the default vault).
        #[arg(long)]
        vault: Option<String>,
        /// Undo without asking.
        #[arg(long)]
        yes: bool,
    },
    /// Redo the most recently undone change: shows it and asks y/N on a terminal (without one, needs --yes).
    Redo {
        /// The vault id (default: the default vault).
        #[arg(long)]
        vault: Option<String>,
        /// Redo without asking.
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Subcommand)]
enum AuditCmd {
    /// Recompute every hash and link; exit 1 naming the first broken record.
    Verify,
    /// After a crash cut the last line short: complete it if it is a whole record, else save it
    /// aside (audit.jsonl.torn-OFFSET) and remove it, so appends can continue.
    Repair,
    /// Show the last records.
    Tail {
        /// How many records.
        #[arg(short = 'n', default_value_t = 20)]
        n: usize,
        /// One JSON document on stdout.
        #[arg(long)]
        json: bool,
    },
    /// When audit.jsonl is missing or was replaced (servers refuse to start): open a new chain
    /// whose first record names the last seq and hash the state database knows. The old file,
    /// if any, is kept as audit.jsonl.replaced-N.
    Restart {
        /// Confirm: the records after the last backup are gone for good.
        #[arg(long)]
        yes: bool,
    },
}

/// Writes text for a person to stdout, its control characters escaped (docs/contract.md#the-mcp-surface): reasons, diffs,
/// names and paths come from agents and notes. Commands other than `stdio` own stdout; `stdio`
/// never calls this.
// SECURITY(T-TERM): every human line of the CLI passes here or through `err`.
pub(crate) fn out(s: &str) {
    raw_out(&policy::text::escape(s));
}

/// Writes one JSON document to stdout. serde_json escapes C0 controls; every other character a
/// person would see escaped (DEL, C1, bidi controls, invisible ones: `policy::text::is_hidden`)
/// is written as a JSON `\uXXXX` escape here, which leaves the same JSON value and nothing a
/// terminal acts on or hides.
fn out_json_text(s: &str) {
    raw_out(&json_controls(s));
}

fn json_controls(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.contains(policy::text::is_hidden) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut o = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if policy::text::is_hidden(c) {
            for unit in c.encode_utf16(&mut [0; 2]) {
                o.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            o.push(c);
        }
    }
    std::borrow::Cow::Owned(o)
}

fn raw_out(s: &str) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(s.as_bytes());
    let _ = o.write_all(b"\n");
    let _ = o.flush();
}

/// Writes text for a person to stderr, escaped like [`out`] (errors echo names and ids).
pub(crate) fn err(s: &str) {
    let mut e = std::io::stderr().lock();
    let _ = writeln!(e, "{}", policy::text::escape(s));
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    // SECURITY(T-PDF): the PDF worker is this binary started by itself, with an empty environment;
    // it parses under its own limits and sandbox before anything else here runs (no logging, no
    // config). `pdf-worker --probe` is the same worker reading no document (doctor, tests).
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == crate::pdf::WORKER_ARG)
    {
        let args: Vec<std::ffi::OsString> = std::env::args_os().skip(2).collect();
        return crate::pdf::worker_main(&args);
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        // Usage errors, including every bad option value (the value parsers above), exit 2.
        Err(e) if e.use_stderr() => {
            // Escaped: clap echoes the offending value.
            err(e.to_string().trim_end());
            return ExitCode::from(2);
        }
        Err(e) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    // Before anything else runs: a server re-executes itself once with glibc's allocator tuned.
    if matches!(cli.command, Command::Serve { .. } | Command::Stdio) {
        crate::malloc::settle();
    }
    let env: BTreeMap<String, String> = std::env::vars().collect();
    crate::logging::init(&env);
    let _ = FAILPOINTS.set(failpoints(&env));
    // The operator's git (docs/contract.md#git-history), found once: every git command then runs with a clean environment.
    engine::git::Program::use_path(env.get("PATH").map_or("", String::as_str));
    match run(cli, &env) {
        Ok(code) => code,
        Err(e) => {
            if e.code() == policy::ErrorCode::INTERNAL {
                tracing::error!(error = %e, "command failed");
            }
            err(&format!("error[{}]: {e}", e.code()));
            ExitCode::from(1)
        }
    }
}

/// Test-only crash and pause injection, read once from the environment (SPEC-free: the black-box
/// crash suites set it; nothing else does).
static FAILPOINTS: std::sync::OnceLock<engine::Failpoints> = std::sync::OnceLock::new();

fn failpoints(env: &BTreeMap<String, String>) -> engine::Failpoints {
    let get = |k: &str| env.get(k).filter(|v| !v.is_empty()).cloned();
    engine::Failpoints {
        abort_at: get("VAULTGATE_TEST_FAILPOINT"),
        pause_at: get("VAULTGATE_TEST_PAUSE"),
        pause_file: get("VAULTGATE_TEST_PAUSE_FILE").map(std::path::PathBuf::from),
    }
}

/// Opens the home's engine and settles any write a crash interrupted, in every vault, before
/// the command does anything else.
pub(crate) fn open_core(home: &Home) -> Result<Core, GatewayError> {
    let core = Core::open_with(home.clone(), FAILPOINTS.get().cloned().unwrap_or_default())?;
    core.attachments()
        .set_pdf_worker(std::sync::Arc::new(crate::pdf::WorkerProcess::new()));
    core.writes().recover_all();
    Ok(core)
}

fn cli_user(env: &BTreeMap<String, String>) -> String {
    env.get("USER")
        .or_else(|| env.get("LOGNAME"))
        .cloned()
        .unwrap_or_else(|| "unknown".into())
}

fn run(cli: Cli, env: &BTreeMap<String, String>) -> Result<ExitCode, GatewayError> {
    // Neither needs a home: they describe the binary.
    match cli.command {
        Command::Completions { shell } => {
            completions(shell);
            return Ok(ExitCode::SUCCESS);
        }
        Command::Man { dir } => {
            man(dir.as_deref())?;
            return Ok(ExitCode::SUCCESS);
        }
        _ => {}
    }
    let home = Home::resolve(cli.home.as_deref(), env)?;
    if let Command::Doctor { json } = cli.command {
        return doctor_cmd(&home, json, env);
    }
    run_command(cli.command, home, env).map(|()| ExitCode::SUCCESS)
}

/// The clap tree of the whole CLI, for completions, the man pages and the generated reference.
pub(crate) fn command() -> clap::Command {
    use clap::CommandFactory;
    Cli::command()
}

fn completions(shell: CompletionShell) {
    use clap_complete::Shell;
    let shell = match shell {
        CompletionShell::Bash => Shell::Bash,
        CompletionShell::Zsh => Shell::Zsh,
        CompletionShell::Fish => Shell::Fish,
    };
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut command(), "vaultgate", &mut buf);
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(&buf);
    let _ = o.flush();
}

/// One roff page per command, the top one first: `(file name, page)`.
pub(crate) fn man_pages() -> Result<Vec<(String, Vec<u8>)>, GatewayError> {
    fn walk(cmd: clap::Command, name: String, pages: &mut Vec<(String, Vec<u8>)>) -> std::io::Result<()> {
        // The page's name is the file's; the synopsis keeps the spaced `bin_name` from `build`.
        let mut cmd = cmd.name(name.clone());
        // `help` is a pseudo-command: no page of its own, so no page may name one.
        if cmd.find_subcommand("help").is_some() {
            cmd = cmd.mut_subcommand("help", |h| h.hide(true));
        }
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd.clone()).render(&mut page)?;
        pages.push((format!("{name}.1"), page));
        for sub in cmd
            .get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        {
            walk(sub.clone(), format!("{name}-{}", sub.get_name()), pages)?;
        }
        Ok(())
    }
    let mut pages = Vec::new();
    let mut top = command();
    top.build();
    walk(top, "vaultgate".into(), &mut pages)
        .map_err(|e| GatewayError::Internal(format!("man page: {e}")))?;
    Ok(pages)
}

fn man(dir: Option<&std::path::Path>) -> Result<(), GatewayError> {
    let pages = man_pages()?;
    let Some(dir) = dir else {
        let mut o = std::io::stdout().lock();
        if let Some((_, page)) = pages.first() {
            let _ = o.write_all(page);
        }
        let _ = o.flush();
        return Ok(());
    };
    std::fs::create_dir_all(dir).map_err(GatewayError::Io)?;
    for (name, page) in &pages {
        std::fs::write(dir.join(name), page).map_err(GatewayError::Io)?;
    }
    out(&format!("wrote {} man pages to {}", pages.len(), dir.display()));
    Ok(())
}

/// `vaultgate doctor`: the engine checks, this prints. Exit 1 when a check failed.
fn doctor_cmd(home: &Home, json: bool, env: &BTreeMap<String, String>) -> Result<ExitCode, GatewayError> {
    let mut report = engine::doctor::doctor(home, time::OffsetDateTime::now_utc());
    engine::doctor::check_pdf_sandbox(&mut report, home, &crate::pdf::WorkerProcess::new());
    // The tunnel's line (docs/contract.md#the-command-line, docs/contract.md#the-chatgpt-tunnel) needs PATH, which only the edge reads.
    if let Ok(config) = home.load_config()
        && config.tunnel.tunnel_id.is_some()
    {
        use engine::doctor::{Check, Status};
        let check = match crate::tunnel::resolve(&config.tunnel, env.get("PATH").map(String::as_str)) {
            Some(cmd) => Check {
                status: Status::Ok,
                what: format!("tunnel-client: {}", cmd.display()),
                next: String::new(),
            },
            None => Check {
                status: Status::Fail,
                what: "tunnel-client: not found (the tunnel is set up)".into(),
                next: crate::tunnel::INSTALL.into(),
            },
        };
        report.ok &= check.status != Status::Fail;
        report.checks.push(check);
        // SECURITY(T-TUNNEL4): a profile folder the tunnel cannot use, and why.
        let folder = crate::tunnel::doctor_check(&config, env);
        report.ok &= folder.status != Status::Fail;
        report.checks.push(folder);
    }
    if json {
        json_out(&report)?;
    } else {
        for c in &report.checks {
            let line = format!("{:<4}  {}  {}", c.status.as_str(), c.what, c.next);
            out(line.trim_end());
        }
    }
    Ok(if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn run_command(command: Command, home: Home, env: &BTreeMap<String, String>) -> Result<(), GatewayError> {
    let user = cli_user(env);
    match command {
        Command::Init => {
            let created = home.init()?;
            out(&format!(
                "{} vaultgate home at {}\nnext: vaultgate vault add PATH",
                if created { "created" } else { "kept existing" },
                home.dir.display()
            ));
            Ok(())
        }
        Command::Vault(cmd) => vault_cmd(&home, cmd, &user),
        Command::Serve { host, port, tunnel } => {
            let core = open_core(&home)?;
            let addr = crate::http::loopback_addr(&host, port.unwrap_or(core.config().server.port))?;
            let tunnel = tunnel || core.config().tunnel.autostart;
            crate::http::serve(
                Arc::new(core),
                addr,
                crate::http::Extras {
                    env: env.clone(),
                    tunnel,
                    user: user.clone(),
                },
            )
        }
        Command::Tunnel(cmd) => tunnel_cmd(&home, cmd, &user, env),
        Command::Stdio => {
            let core = Arc::new(open_core(&home)?);
            let Some(token) = env.get("VAULTGATE_TOKEN").filter(|t| !t.is_empty()) else {
                let e = GatewayError::Unauthorized("VAULTGATE_TOKEN is not set");
                // No record, no answer: a refusal that cannot be audited is AUDIT_UNAVAILABLE.
                core.credentials()
                    .record_auth_refusal(engine::core::Transport::Stdio, &e)?;
                return Err(e);
            };
            let token = Token::new(token.clone());
            // A missing or invalid token fails at start, before anything is written to stdout.
            core.credentials()
                .authenticate(&token, engine::core::Transport::Stdio)?;
            crate::serve::stdio(core, token)
        }
        Command::Demo(args) => crate::demo::run(crate::demo::DemoOptions {
            dir: args.dir,
            no_serve: args.no_serve,
            stdio: args.stdio,
            port: args.port,
            user,
        }),
        Command::Token(cmd) => token_cmd(&home, cmd, &user),
        Command::Audit(cmd) => audit_cmd(&home, cmd, &user),
        Command::History(cmd) => history_cmd(&home, cmd, &user),
        Command::Inbox(cmd) => inbox_cmd(&home, cmd, &user),
        Command::Apply { vault, only, yes } => {
            apply_cmd(&home, vault.as_deref(), only.as_deref(), yes, &user)
        }
        Command::Index { vault, rebuild } => index_cmd(&home, vault.as_deref(), rebuild),
        Command::Review { open, port } => review_cmd(&home, open, port, &user),
        Command::Doctor { .. } => Err(GatewayError::Internal("doctor is handled by run".into())),
        Command::Completions { .. } | Command::Man { .. } => Err(GatewayError::Internal(
            "completions and man are handled by run".into(),
        )),
        Command::Describe { json } => {
            let d = crate::describe::describe();
            if json {
                out_json_text(&d.to_string());
            } else {
                out(&crate::describe::human(&d));
            }
            Ok(())
        }
    }
}

/// The core that changes the vault set: without opening the vaults, so a vault whose folder is
/// gone can still be removed.
pub(crate) fn configuration_core(home: &Home) -> Result<Core, GatewayError> {
    Core::open_for_configuration(home.clone())
}

fn vault_cmd(home: &Home, cmd: VaultCmd, user: &str) -> Result<(), GatewayError> {
    match cmd {
        VaultCmd::Add(a) => {
            // `--git` outside a work tree is refused before anything is registered.
            if a.git {
                engine::changelog::check_work_tree(&a.path)?;
            }
            let vc = configuration_core(home)?.settings().vault_add(
                &Operator::cli(user),
                engine::vaults::VaultAdd {
                    path: a.path,
                    id: a.id,
                    name: a.name,
                    notes: a.notes,
                    standards: a.standards,
                    inbox: a.inbox,
                    default: a.default,
                },
            )?;
            out(&format!(
                "added vault '{}' ({}) at {}",
                vc.id,
                vc.name,
                vc.path.display()
            ));
            if a.pdf_text {
                let core = open_core(home)?;
                let on = core
                    .settings()
                    .vault_pdf_text(&Operator::cli(user), &vc.id, true)?;
                out(&describe_pdf_text(&vc.id, on));
            }
            if a.git {
                let core = open_core(home)?;
                let v = core.vault_for_cli(Some(&vc.id))?;
                let s = core.settings().vault_git(&Operator::cli(user), &v, true, false)?;
                out(&engine::changelog::describe_git(&s));
            }
            out("next: vaultgate token issue --name my-client");
            Ok(())
        }
        VaultCmd::PdfText { id, action } => {
            let core = open_core(home)?;
            let on = core
                .settings()
                .vault_pdf_text(&Operator::cli(user), &id, action == OnOff::On)?;
            out(&describe_pdf_text(&id, on));
            Ok(())
        }
        VaultCmd::Git {
            id,
            action,
            drop_queue,
            json,
        } => {
            if drop_queue && action != GitAction::Off {
                return Err(GatewayError::InvalidArgument(
                    "--drop-queue goes with `off`".into(),
                ));
            }
            let core = open_core(home)?;
            let v = core.vault_for_cli(Some(&id))?;
            let s = match action {
                GitAction::Status => core.history().git_status(&v)?,
                GitAction::On => core.settings().vault_git(&Operator::cli(user), &v, true, false)?,
                GitAction::Off => core
                    .settings()
                    .vault_git(&Operator::cli(user), &v, false, drop_queue)?,
            };
            if json {
                return json_out(&s);
            }
            out(&engine::changelog::describe_git(&s));
            Ok(())
        }
        VaultCmd::List { json } => {
            let config = home.load_config()?;
            if json {
                let list: Vec<_> = config
                    .vaults
                    .iter()
                    .map(|v| {
                        serde_json::json!({
                            "id": v.id, "name": v.name, "path": v.path,
                            "isDefault": config.default_vault.as_deref() == Some(v.id.as_str()),
                            "notes": v.notes, "standards": v.standards, "inbox": v.inbox,
                        })
                    })
                    .collect();
                out_json_text(&serde_json::Value::Array(list).to_string());
            } else if config.vaults.is_empty() {
                out("no vaults; add one with: vaultgate vault add PATH");
            } else {
                for v in &config.vaults {
                    let d = if config.default_vault.as_deref() == Some(v.id.as_str()) {
                        " (default)"
                    } else {
                        ""
                    };
                    out(&format!("{}{d}\t{}\t{}", v.id, v.name, v.path.display()));
                }
            }
            Ok(())
        }
        VaultCmd::Remove { id } => {
            configuration_core(home)?
                .settings()
                .vault_remove(&Operator::cli(user), &id)?;
            out(&format!("removed vault '{id}' (its files were not touched)"));
            Ok(())
        }
        VaultCmd::SetDefault { id } => {
            configuration_core(home)?
                .settings()
                .vault_set_default(&Operator::cli(user), &id)?;
            out(&format!("default vault is now '{id}'"));
            Ok(())
        }
    }
}

fn describe_pdf_text(id: &str, on: bool) -> String {
    if on {
        format!("PDF text is on for vault '{id}': read_attachment_text sends PDF text to clients")
    } else {
        format!("PDF text is off for vault '{id}'")
    }
}

/// The longest `--expires`: ten years. Longer is what "never" (no `--expires`) is for.
const MAX_EXPIRES_SECS: i64 = 3650 * 86_400;

/// Parses `90s`, `15m`, `12h`, `30d` into seconds (a clap value parser: a bad value is a usage
/// error, exit 2).
pub fn parse_duration(s: &str) -> Result<i64, String> {
    let bad = || format!("'{s}': use a positive number with s, m, h or d, like 30d (at most 3650d)");
    let Some(unit) = s.chars().last() else {
        return Err(bad());
    };
    let num = &s[..s.len() - unit.len_utf8()];
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let mul = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return Err(bad()),
    };
    let secs = num.parse::<i64>().ok().and_then(|n| n.checked_mul(mul));
    match secs {
        Some(n) if n > 0 && n <= MAX_EXPIRES_SECS => Ok(n),
        Some(0) => Err(bad()),
        _ => Err(format!(
            "'{s}' is too far ahead: at most 3650d (ten years); omit --expires for a credential that never expires"
        )),
    }
}

/// A credential name: shown to the operator in lists and prompts, so no control characters.
fn parse_tunnel_id(s: &str) -> Result<String, String> {
    if crate::tunnel::valid_tunnel_id(s) {
        Ok(s.to_owned())
    } else {
        Err("expected `tunnel_` and 32 lowercase hex digits, as the OpenAI platform shows it".into())
    }
}

fn tunnel_cmd(
    home: &Home,
    cmd: TunnelCmd,
    user: &str,
    env: &BTreeMap<String, String>,
) -> Result<(), GatewayError> {
    match cmd {
        TunnelCmd::Setup {
            tunnel_id,
            api_key_file,
            tier,
            vaults,
            yes,
        } => {
            if tier == Tier::Full {
                confirm_full(yes, "ChatGPT's tunnel credential")?;
            }
            let done = crate::tunnel::setup(
                home,
                &Operator::cli(user),
                &tunnel_id,
                &api_key_file,
                tier,
                vaults,
                env,
            )?;
            out(&format!(
                "tunnel {tunnel_id} is set up: the API key is in {} (mode 0600; you may delete {} now)",
                home.tunnel_key_path().display(),
                api_key_file.display()
            ));
            out(&format!(
                "ChatGPT connects as credential {} ({}, tier {})",
                done.credential.id.as_str(),
                done.credential.name,
                done.credential.tier
            ));
            match &done.command {
                Some(c) => out(&format!("tunnel-client: {}", c.display())),
                None => out(&format!(
                    "tunnel-client was not found on PATH; {}",
                    crate::tunnel::INSTALL
                )),
            }
            out(&format!(
                "next: vaultgate --home {} serve --tunnel, then add the connector in ChatGPT (Connection: Tunnel, No authentication)",
                home.dir.display()
            ));
            out(
                "a tunnel already running keeps the old, now revoked, credential: restart `serve --tunnel` (or Stop and Start on the review page)",
            );
            Ok(())
        }
        TunnelCmd::Status { json } => {
            if !home.exists() {
                return Err(GatewayError::NoHome(home.dir.clone()));
            }
            let config = home.load_config()?;
            let s = crate::tunnel::status(home, &config, env);
            if json {
                out_json_text(&serde_json::to_string(&s).map_err(|e| GatewayError::Internal(e.to_string()))?);
                return Ok(());
            }
            out(&format!("phase: {}", s.phase.as_str()));
            if !s.set_up {
                out("not set up: run `vaultgate tunnel setup --tunnel-id ID --api-key-file F`");
            }
            if let Some(pid) = s.pid {
                out(&format!("pid: {pid}"));
            }
            if let Some(c) = &s.command {
                out(&format!("tunnel-client: {}", c.display()));
            }
            if let Some(i) = &s.install {
                out(i);
            }
            if let Some(h) = &s.health {
                let poll = h.pointer("/control_plane_poll/ok") == Some(&serde_json::Value::Bool(true));
                out(&format!(
                    "last health check: {} (control-plane poll {})",
                    h.get("result").and_then(|r| r.as_str()).unwrap_or("unknown"),
                    if poll { "ok" } else { "not seen yet" }
                ));
            }
            if let Some(e) = &s.last_error {
                out(&format!("last error: {e}"));
            }
            Ok(())
        }
    }
}

fn parse_name(s: &str) -> Result<String, String> {
    engine::credentials::check_credential_name(s)?;
    Ok(s.to_owned())
}

fn parse_vault_id(s: &str) -> Result<String, String> {
    if engine::vaults::valid_id(s) {
        Ok(s.to_owned())
    } else {
        Err(format!("'{s}': a vault id is 1-64 chars of a-z, 0-9, '-' or '_'"))
    }
}

/// `full` needs `--yes` or an interactive y/N (docs/contract.md#tiers-and-capabilities, docs/contract.md#the-command-line).
fn confirm_full(yes: bool, what: &str) -> Result<(), GatewayError> {
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        return Err(GatewayError::InvalidArgument(format!(
            "{what} grants the `full` tier (apply anyone's proposals, permanent deletion); pass --yes to confirm"
        )));
    }
    err(&format!(
        "{what} grants the `full` tier: it may apply anyone's proposals. Continue? [y/N] "
    ));
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    if matches!(line.trim(), "y" | "Y" | "yes") {
        Ok(())
    } else {
        Err(GatewayError::InvalidArgument("not confirmed".into()))
    }
}

/// docs/contract.md#the-review-page-and-in-client-approval: the opt-in is a tier raise, and `token issue` says so.
pub(crate) fn approve_in_client_warning(tier: Tier) -> String {
    match tier {
        Tier::Propose | Tier::Auto => format!(
            "warning: in-client approval is on: whoever holds this token may apply {} once its client \
             says a person approved (the client is trusted to ask honestly), so it acts one tier above \
             '{tier}'. Revoke it with `vaultgate token revoke` if that is not what you want.",
            if tier == Tier::Propose {
                "its own proposals"
            } else {
                "anyone's proposals"
            }
        ),
        Tier::Read | Tier::Full => {
            format!("note: in-client approval has no effect on the '{tier}' tier")
        }
    }
}

fn token_cmd(home: &Home, cmd: TokenCmd, user: &str) -> Result<(), GatewayError> {
    match cmd {
        TokenCmd::Issue {
            name,
            tier,
            vaults,
            expires,
            format,
            yes,
            approve_in_client,
        } => {
            if tier == Tier::Full {
                confirm_full(yes, &format!("credential '{name}'"))?;
            }
            let core = open_core(home)?;
            let (cred, token) = core.credentials().issue_credential(
                &Operator::cli(user),
                &name,
                tier,
                vaults,
                expires,
                approve_in_client,
            )?;
            if approve_in_client {
                // stderr: stdout may be a bare token or one JSON object.
                eprintln!("{}", approve_in_client_warning(tier));
            }
            let exe = std::env::current_exe()?;
            let target = crate::clientconf::Target {
                exe: &exe,
                home: &home.dir,
                port: core.config().server.port,
            };
            let text = crate::clientconf::render(format, &target, &cred, &token);
            if matches!(format, Some(TokenFormat::Json)) {
                out_json_text(&text);
            } else {
                out(&text);
            }
            Ok(())
        }
        TokenCmd::List { json } => {
            if !home.exists() {
                return Err(GatewayError::NoHome(home.dir.clone()));
            }
            let creds = engine::credentials::list_credentials(home)?;
            if json {
                let v: Vec<_> = creds.iter().map(crate::clientconf::credential_json).collect();
                out_json_text(&serde_json::Value::Array(v).to_string());
            } else if creds.is_empty() {
                out("no credentials; issue one with: vaultgate token issue --name NAME");
            } else {
                for c in &creds {
                    let status = if c.is_revoked() {
                        "revoked"
                    } else if c.is_expired(engine::core::now_unix()) {
                        "expired"
                    } else {
                        "active"
                    };
                    let scope = if c.vaults.is_empty() {
                        "*".to_owned()
                    } else {
                        c.vaults.join(",")
                    };
                    let approval = if c.approve_in_client {
                        "\tapprove-in-client"
                    } else {
                        ""
                    };
                    out(&format!(
                        "{}\t{}\t{}\t{status}\tvaults={scope}{approval}",
                        c.id.as_str(),
                        one_line(&c.name),
                        c.tier
                    ));
                }
                // docs/contract.md#the-review-page-and-in-client-approval: the opt-in is a tier raise, and the list says so where it shows it.
                if creds.iter().any(|c| c.approve_in_client && !c.is_revoked()) {
                    eprintln!(
                        "note: approve-in-client credentials may apply one tier above their own once their \
                         client says a person approved; the client is trusted to ask honestly"
                    );
                }
            }
            Ok(())
        }
        TokenCmd::Revoke { id } => {
            let core = open_core(home)?;
            let c = core.credentials().revoke_credential(&Operator::cli(user), &id)?;
            out(&format!(
                "revoked {} ({}); running servers refuse it from the next call",
                c.id.as_str(),
                c.name
            ));
            Ok(())
        }
        TokenCmd::SetTier { id, tier, yes } => {
            if tier == Tier::Full {
                confirm_full(yes, &format!("setting '{id}' to full"))?;
            }
            let core = open_core(home)?;
            let c = core
                .credentials()
                .set_credential_tier(&Operator::cli(user), &id, tier)?;
            out(&format!(
                "{} ({}) is now tier {}; applies from the next call",
                c.id.as_str(),
                c.name,
                c.tier
            ));
            Ok(())
        }
    }
}

fn audit_cmd(home: &Home, cmd: AuditCmd, user: &str) -> Result<(), GatewayError> {
    let path = home.audit_path();
    if !home.exists() {
        return Err(GatewayError::NoHome(home.dir.clone()));
    }
    match cmd {
        AuditCmd::Verify => match engine::audit_log::chain_status(home)? {
            engine::audit_log::ChainStatus::Holds { records } => {
                out(&format!(
                    "audit chain ok: {records} records in {}",
                    path.display()
                ));
                Ok(())
            }
            engine::audit_log::ChainStatus::Broken(problem) => Err(GatewayError::AuditBroken(problem)),
        },
        AuditCmd::Repair => {
            let msg = match engine::audit_log::repair_torn_tail(&path)? {
                engine::audit_log::Repair::Clean => "audit log ends cleanly; nothing to repair".to_owned(),
                engine::audit_log::Repair::Completed { seq } => {
                    format!("completed the last record (seq {seq})")
                }
                engine::audit_log::Repair::MovedAside {
                    offset,
                    len,
                    saved_to,
                } => format!(
                    "moved a torn fragment of {len} bytes at offset {offset} to {}",
                    saved_to.display()
                ),
            };
            out(&msg);
            Ok(())
        }
        AuditCmd::Restart { yes: false } => {
            // A usage error (exit 2), like a missing argument: nothing was looked at or changed.
            clap::Error::raw(
                clap::error::ErrorKind::MissingRequiredArgument,
                "`vaultgate audit restart` opens a new audit chain when audit.jsonl is missing or \
                 was replaced; the records it lost cannot be verified any more. Restore the file \
                 from a backup if you can; otherwise run `vaultgate audit restart --yes`.\n",
            )
            .exit()
        }
        AuditCmd::Restart { yes: true } => {
            let r = engine::audit_log::restart(home, user)?;
            if let Some(old) = &r.moved_aside {
                out(&format!("kept the replaced log as {}", old.display()));
            }
            out(&format!(
                "opened a new audit chain in {} (its first record names the previous head: {})",
                path.display(),
                r.record.target.as_deref().unwrap_or("")
            ));
            Ok(())
        }
        AuditCmd::Tail { n, json } => {
            let records = engine::audit_log::tail(&path, n)?;
            if json {
                json_out(&records)?;
            } else {
                for r in records {
                    json_out(&r)?;
                }
            }
            Ok(())
        }
    }
}

fn json_out<T: serde::Serialize>(v: &T) -> Result<(), GatewayError> {
    out_json_text(&serde_json::to_string(v).map_err(|e| GatewayError::Internal(e.to_string()))?);
    Ok(())
}

/// A field shown on one line (a reason, a name): its newlines and tabs become visible `\n` and
/// `\t`, so it cannot add lines or columns that look like the CLI's own.
fn one_line(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.contains(['\n', '\t']) {
        return std::borrow::Cow::Borrowed(s);
    }
    std::borrow::Cow::Owned(s.replace('\n', "\\n").replace('\t', "\\t"))
}

/// A proposal as a reviewer reads it: who, why, and the diff (all escaped by `out`).
fn show_proposal(p: &engine::api::GetProposalOut) {
    let it = &p.item;
    let from = it.from.as_deref().map(|f| format!("{f} -> ")).unwrap_or_default();
    out(&format!(
        "{} {} {from}{}  [{}]\n  id: {}\n  by: {} ({}) at {}\n  reason: {}\n  proposalHash: {}",
        it.slug,
        it.kind,
        it.target,
        it.status,
        it.id,
        one_line(&it.created_by.name),
        it.created_by.credential_id,
        it.created_at,
        one_line(&it.reason),
        it.proposal_hash
    ));
    if !p.diff.is_empty() {
        // The size a reviewer decides on, and the diff a line per terminal line: a lone CR ends
        // a line here as it does in the count (SECURITY(T-CR)).
        let (added, removed) = engine::diff::counts(&engine::diff::hunks(&p.diff));
        out(&format!("  changes: +{added} \u{2212}{removed} lines"));
        out(&policy::text::lines(&p.diff).collect::<Vec<_>>().join("\n"));
    }
}

fn inbox_cmd(home: &Home, cmd: InboxCmd, user: &str) -> Result<(), GatewayError> {
    let core = open_core(home)?;
    match cmd {
        InboxCmd::List { vault, status, json } => {
            let v = core.vault_for_cli(vault.as_deref())?;
            let status = status.as_str();
            let list = core.proposals().list_proposals(&v, Some(status), Some(500))?;
            if json {
                return json_out(&list.proposals);
            }
            if list.proposals.is_empty() {
                out(&format!("no {status} proposals in vault '{}'", v.id));
            }
            for p in &list.proposals {
                let from = p.from.as_deref().map(|f| format!("{f} -> ")).unwrap_or_default();
                out(&format!(
                    "{}\t{}\t{from}{}\t{}\t{}",
                    p.slug,
                    p.kind,
                    p.target,
                    one_line(&p.created_by.name),
                    one_line(&p.reason)
                ));
            }
            Ok(())
        }
        InboxCmd::Show { id, vault, json } => {
            let v = core.vault_for_cli(vault.as_deref())?;
            let p = core
                .proposals()
                .get_proposal(&v, &engine::ids::ProposalId::from_wire(id.clone()))?;
            if json {
                return json_out(&p);
            }
            show_proposal(&p);
            Ok(())
        }
        InboxCmd::Reject { id, reason, vault } => {
            let v = core.vault_for_cli(vault.as_deref())?;
            let r = core
                .decisions()
                .operator_reject(&Operator::cli(user), &v, &id, &reason)?;
            out(&format!("rejected {id}; archived to {}", r.archived_to));
            Ok(())
        }
    }
}

fn apply_cmd(
    home: &Home,
    vault: Option<&str>,
    only: Option<&str>,
    yes: bool,
    user: &str,
) -> Result<(), GatewayError> {
    let interactive = std::io::stdin().is_terminal();
    if !yes && !interactive {
        return Err(GatewayError::InvalidArgument(
            "apply shows each diff and asks y/N on a terminal; without one, pass --yes".into(),
        ));
    }
    let core = open_core(home)?;
    let v = core.vault_for_cli(vault)?;
    // Every pending proposal as it stands now (not one page of them); ones decided meanwhile by
    // another process are skipped below.
    let ids: Vec<String> = match only {
        Some(id) => vec![id.to_owned()],
        None => core.proposals().pending_proposal_ids(&v)?,
    };
    if ids.is_empty() {
        out(&format!("no pending proposals in vault '{}'", v.id));
        return Ok(());
    }
    let (mut applied, mut failed) = (0usize, 0usize);
    let mut first_code = None;
    for id in ids {
        // One unreadable proposal does not stop the batch.
        let p = match core
            .proposals()
            .get_proposal(&v, &engine::ids::ProposalId::from_wire(id.clone()))
        {
            Ok(p) => p,
            Err(e) => {
                failed += 1;
                first_code.get_or_insert(e.code());
                err(&format!("error[{}]: {id}: {e}", e.code()));
                continue;
            }
        };
        if only.is_none() && p.item.status != "pending" {
            out(&format!("skipped {}: {} meanwhile", p.item.slug, p.item.status));
            continue;
        }
        // The reviewer sees what is applied: the whole proposal when asked or named, its reason
        // otherwise.
        if !yes || only.is_some() {
            show_proposal(&p);
        }
        if !yes {
            err("apply this proposal? [y/N] ");
            let mut line = String::new();
            if std::io::stdin().read_line(&mut line)? == 0 {
                out("no answer (end of input); nothing more is applied");
                break;
            }
            if !matches!(line.trim(), "y" | "Y" | "yes") {
                out(&format!("skipped {}", p.item.slug));
                continue;
            }
        }
        let r = core
            .decisions()
            .operator_apply(&Operator::cli(user), &v, &p.item.id, &p.item.proposal_hash);
        match r {
            Ok(a) => {
                applied += 1;
                let reason = if yes && only.is_none() {
                    format!("\n  reason: {}", one_line(&p.item.reason))
                } else {
                    String::new()
                };
                // Where git is on, whether the commit was made or waits (`vault git ID status`).
                let git = match a.git.as_str() {
                    "off" => String::new(),
                    state => format!(", git {state}"),
                };
                out(&format!(
                    "applied {} -> {} (history {}, audit seq {}{git}){reason}",
                    p.item.slug, a.target, a.history_entry_id, a.audit_seq
                ))
            }
            Err(e) => {
                failed += 1;
                first_code.get_or_insert(e.code());
                err(&format!("error[{}]: {}: {e}", e.code(), p.item.slug));
            }
        }
    }
    if only.is_none() {
        out(&format!(
            "{applied} applied, {failed} not applied in vault '{}'",
            v.id
        ));
    }
    if failed > 0 {
        return Err(engine::error::Refused::NotApplied {
            failed,
            first: first_code,
        }
        .into());
    }
    Ok(())
}

fn history_cmd(home: &Home, cmd: HistoryCmd, user: &str) -> Result<(), GatewayError> {
    let (vault, t, yes) = match cmd {
        HistoryCmd::Status { vault, json } => {
            let core = open_core(home)?;
            let v = core.vault_for_cli(vault.as_deref())?;
            let s = core.history().history_status(&v)?;
            if json {
                return json_out(&s);
            }
            out(&engine::history::describe_status(&v.id, &s));
            return Ok(());
        }
        HistoryCmd::Undo { vault, yes } => (vault, engine::Transition::Undo, yes),
        HistoryCmd::Redo { vault, yes } => (vault, engine::Transition::Redo, yes),
    };
    if !yes && !std::io::stdin().is_terminal() {
        return Err(GatewayError::InvalidArgument(format!(
            "history {} shows the change and asks y/N on a terminal; without one, pass --yes",
            t.as_str()
        )));
    }
    let core = open_core(home)?;
    let v = core.vault_for_cli(vault.as_deref())?;
    // Settles an interrupted write first, so the entry shown is the one that counts.
    let top = match core.history().history_top(&v, t) {
        Ok(Some(entry)) => entry,
        // A refusal before anything ran is recorded as the command's one call.
        refused => {
            let e = match refused {
                Err(e) => e,
                Ok(_) => engine::error::Refused::HistoryNotTop {
                    message: format!("nothing to {} in vault '{}'", t.as_str(), v.id),
                }
                .into(),
            };
            return Err(core
                .decisions()
                .operator_history_refused(&Operator::cli(user), &v, t, e));
        }
    };
    let entry = top;
    out(&entry.describe(t));
    if !yes {
        err(&format!("{} this change? [y/N] ", t.as_str()));
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        if !matches!(line.trim(), "y" | "Y" | "yes") {
            out("nothing changed");
            return Ok(());
        }
    }
    let s = core
        .decisions()
        .operator_history(&Operator::cli(user), &v, t, &entry.id)?;
    out(&format!("{} {}: done", t.as_str(), entry.id));
    out(&engine::history::describe_status(&v.id, &s));
    Ok(())
}

/// `vaultgate review`: a one-time login link for the live server of this home (docs/contract.md#the-review-page-and-in-client-approval).
fn review_cmd(home: &Home, open: bool, port: Option<u16>, user: &str) -> Result<(), GatewayError> {
    if !home.exists() {
        return Err(GatewayError::NoHome(home.dir.clone()));
    }
    let record = engine::review::read_server_record(home);
    let no_server = || {
        GatewayError::InvalidArgument(format!(
            "no vaultgate server of the home {} is running; start one with `vaultgate serve` \
             (or pass --port N for a server on another port)",
            home.dir.display()
        ))
    };
    let (host, port) = match (&record, port) {
        (_, Some(p)) => (
            record.as_ref().map_or("127.0.0.1".to_owned(), |r| r.host.clone()),
            p,
        ),
        (Some(r), None) => {
            // A record left by a server that was killed names a process that is gone.
            if !process_alive(r.pid) {
                return Err(no_server());
            }
            (r.host.clone(), r.port)
        }
        (None, None) => return Err(no_server()),
    };
    let addr = crate::http::loopback_addr(&host, port)?;
    let core = open_core(home)?;
    if !core.config().review.enabled {
        return Err(GatewayError::InvalidArgument(
            "the review page is off: set [review] enabled = true in gateway.toml and restart the server"
                .into(),
        ));
    }
    // SECURITY(T-REVIEW5): a code goes only to a server that proves it holds this home's secret;
    // whatever else listens on the port (another home's server, a squatter) gets nothing.
    let nonce = engine::review::new_nonce()?;
    match identify(addr, &nonce) {
        Some(proof) if core.review().is_server_proof(&nonce, &addr, &proof) => {}
        Some(_) => {
            return Err(GatewayError::InvalidArgument(format!(
                "the server on {addr} is not this home's ({}); start this home's with \
                 `vaultgate --home {} serve`, or pass the --port it listens on",
                home.dir.display(),
                home.dir.display()
            )));
        }
        None => return Err(no_server()),
    }
    let code = core.review().mint_review_code(&Operator::cli(user))?;
    let url = format!("http://{addr}/review/login?code={code}");
    out(&url);
    err(&format!(
        "open it within {} s; it works once (run `vaultgate review` again for another)",
        core.config().review.login_code_ttl_seconds
    ));
    if open {
        let page = write_login_redirect(home, &url)?;
        open_in_browser(&page);
    }
    Ok(())
}

/// The file `review --open` hands the browser: a page that redirects to the login link, written
/// with mode 0600 into the home (mode 0700), as Jupyter does.
// SECURITY(T-REVIEW6): the one-time code never stands in an argv, which every local user can read
// in `/proc/*/cmdline`; only the owner can read this file.
fn write_login_redirect(home: &Home, url: &str) -> Result<std::path::PathBuf, GatewayError> {
    use std::os::unix::fs::OpenOptionsExt;
    let href = url
        .replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;");
    let page = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"0;url={href}\">\
         <title>vaultgate review</title></head>\n<body><p>Opening the review page… \
         If nothing happens, <a href=\"{href}\">open it here</a>. The link works once.</p></body></html>\n"
    );
    let path = home.dir.join("review-login.html");
    // A new file (never one planted in its place), then renamed over the last one.
    let tmp = home.dir.join(format!(".review-login.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(page.as_bytes()))
        .and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e.into());
    }
    Ok(path)
}

/// Asks the server on `addr` for its proof of `nonce` (`GET /review/identify`); `None` when
/// nothing answers like a vaultgate server within a few seconds.
fn identify(addr: std::net::SocketAddr, nonce: &str) -> Option<String> {
    use std::io::Read;
    let timeout = std::time::Duration::from_secs(3);
    let mut s = std::net::TcpStream::connect_timeout(&addr, timeout).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    s.set_write_timeout(Some(timeout)).ok()?;
    write!(
        s,
        "GET /review/identify?nonce={nonce} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut answer = Vec::new();
    // A proof is 64 hex digits; a few KiB is more than any honest answer.
    s.take(16 * 1024).read_to_end(&mut answer).ok()?;
    let text = String::from_utf8(answer).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let ok = head
        .lines()
        .next()
        .is_some_and(|l| l.split(' ').nth(1) == Some("200"));
    ok.then(|| body.trim().to_owned())
}

/// Whether a process with this id still runs (Linux: /proc; elsewhere assumed, the port check
/// decides).
fn process_alive(pid: u32) -> bool {
    let proc = std::path::Path::new("/proc");
    !proc.is_dir() || proc.join(pid.to_string()).exists()
}

/// Opens `page` (a file) with the desktop's opener. Only the file's path is in the opener's argv.
fn open_in_browser(page: &std::path::Path) {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    match std::process::Command::new(opener)
        .arg(page)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        Ok(_) => err("opened in your browser"),
        Err(e) => err(&format!(
            "could not run {opener} ({e}); open the link above yourself"
        )),
    }
}

/// `vaultgate index`: one pass in this process; servers that have the vault open pick it up.
fn index_cmd(home: &Home, vault: Option<&str>, rebuild: bool) -> Result<(), GatewayError> {
    let core = open_core(home)?;
    let v = core.vault_for_cli(vault)?;
    // Progress only for a person watching; scripts get the summary alone.
    let bar = if std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new(0);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{spinner} indexing {pos}/{len} notes [{bar:40}] {eta} left",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let report = core.reads().refresh_index(&v, rebuild, &mut |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    });
    bar.finish_and_clear();
    let r = report?;
    let secs = r.elapsed.as_secs_f64();
    let read = r.added + r.updated;
    out(&format!(
        "{} vault '{}': {} notes in the index ({} added, {} updated, {} removed, {} unchanged) in {:.2}s{}\nindex: {}",
        if rebuild { "rebuilt" } else { "updated" },
        v.id,
        r.notes,
        r.added,
        r.updated,
        r.removed,
        r.unchanged,
        secs,
        if read > 0 && secs > 0.0 {
            format!(", {:.0} notes/s", read as f64 / secs)
        } else {
            String::new()
        },
        v.index_file().display()
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every command says what it does in its own words: a doc comment attached to the wrong
    /// variant shows up as one command without help and a sibling with another's.
    #[test]
    fn every_command_has_its_own_help() {
        fn walk(cmd: &clap::Command, path: &str, problems: &mut Vec<String>) {
            let mut seen = std::collections::HashMap::new();
            for sub in cmd.get_subcommands() {
                let name = format!("{path} {}", sub.get_name());
                match sub.get_about() {
                    None => problems.push(format!("`{name}` has no help")),
                    Some(about) => {
                        if let Some(other) = seen.insert(about.to_string(), name.clone()) {
                            problems.push(format!("`{name}` and `{other}` say the same: {about}"));
                        }
                    }
                }
                walk(sub, &name, problems);
            }
        }
        let mut problems = Vec::new();
        walk(&super::Cli::command(), "vaultgate", &mut problems);
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }
}
