//! The command line: thin commands over `Core`, errors mapped to exit codes in `run`.

mod args;
mod decide;
pub(crate) mod review;
mod team;
mod team_status;
mod tokens;
mod tunnel;
mod vaults;

pub use args::TokenFormat;
use args::*;
use decide::*;
use review::*;
use team::*;
pub(crate) use tokens::parse_duration;
use tokens::*;
use tunnel::*;
use vaults::*;

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
    // Team vaults' remotes: git sees the operator's own configuration and agent, nothing else.
    engine::remote::use_environment(env.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
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
    // A release build without the `failpoints` feature reads none of these.
    if !engine::Failpoints::COMPILED_IN {
        return engine::Failpoints::default();
    }
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
    let core = match core.config().team.clone() {
        Some(team) => {
            let core = attach_team(core, &team)?;
            // Every command sees the team's vaults as this home's clones hold them (a serving
            // gateway keeps them fresh; an apply fetches what it needs): no command waits for
            // every remote.
            core.settings().team_vaults_as_cloned();
            core
        }
        None => core,
    };
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
    // An export is checked on its own: no home needed.
    if let Command::Audit(AuditCmd::Verify { file: Some(file) }) = &cli.command {
        verify_export(file)?;
        return Ok(ExitCode::SUCCESS);
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
    // A team gateway's database, chain and vaults (docs/contract.md#team-mode).
    if let Ok(config) = home.load_config()
        && let Some(team) = &config.team
    {
        for check in doctor_checks(home, team) {
            report.ok &= check.status != engine::doctor::Status::Fail;
            report.checks.push(check);
        }
    }
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
        Command::Team(cmd) => team_cmd(&home, cmd, &user),
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
            crate::teamsync::start(&core);
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

fn parse_vault_id(s: &str) -> Result<String, String> {
    if engine::vaults::valid_id(s) {
        Ok(s.to_owned())
    } else {
        Err(format!("'{s}': a vault id is 1-64 chars of a-z, 0-9, '-' or '_'"))
    }
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
