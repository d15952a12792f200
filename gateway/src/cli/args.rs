//! The command line as clap parses it: every command, its arguments and their `--help`.

use super::*;

#[derive(Parser)]
#[command(
    name = "vaultgate",
    version,
    about = "A local MCP gateway that lets AI agents read your Markdown vault and propose changes — never damage it.",
    long_about = "A local MCP gateway that lets AI agents read your Markdown vault and propose changes — never damage it.\n\n\
Quick start:\n  vaultgate init\n  vaultgate vault add ~/notes\n  vaultgate token issue --name claude --format claude\n\n\
Try it without touching your notes:\n  vaultgate demo"
)]
pub(crate) struct Cli {
    /// The gateway's home (config, secret, state, audit log). Default: $VAULTGATE_HOME, else
    /// $XDG_DATA_HOME/vaultgate, else ~/.local/share/vaultgate.
    #[arg(long, global = true, value_name = "DIR")]
    pub(crate) home: Option<PathBuf>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
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
    /// Team mode: gateways on many machines sharing one PostgreSQL database (credentials and one
    /// audit chain).
    #[command(subcommand)]
    Team(TeamCmd),
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
pub(crate) enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Subcommand)]
pub(crate) enum VaultCmd {
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
    /// Team mode: accept a team vault's rewritten remote history (after a person decided it is
    /// right): its branch head becomes the registered head, every gateway clones it again, and
    /// applies to it work again.
    Resync {
        /// The vault id.
        id: String,
        /// Accept the rewritten history (required: changes applied since may be gone from it).
        #[arg(long)]
        yes: bool,
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
pub(crate) enum OnOff {
    On,
    Off,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum GitAction {
    On,
    Off,
    Status,
}

#[derive(Args)]
pub(crate) struct VaultAddArgs {
    /// The vault folder (a local home; a team vault takes --remote instead).
    #[arg(required_unless_present = "remote", conflicts_with = "remote")]
    pub(crate) path: Option<PathBuf>,
    /// On a team gateway: the git remote holding the notes (https://…, ssh://…, user@host:path,
    /// file://… or a bare repository's path), registered for every gateway of the team.
    #[arg(long, value_name = "URL", requires = "id")]
    pub(crate) remote: Option<String>,
    /// With --remote: the branch the notes are on.
    #[arg(long, value_name = "BRANCH", default_value = "main", requires = "remote")]
    pub(crate) branch: String,
    /// Vault id (default: a slug of the folder name).
    #[arg(long, value_parser = parse_vault_id)]
    pub(crate) id: Option<String>,
    /// Display name (default: the folder name).
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// Folders whose *.md notes proposals may write (repeatable; default: the whole vault).
    #[arg(long = "notes", value_name = "DIR")]
    pub(crate) notes: Vec<String>,
    /// Standards folders (repeatable; default: `docs` if it exists).
    #[arg(long = "standards", value_name = "DIR")]
    pub(crate) standards: Vec<String>,
    /// Inbox folder where proposals land (default: `inbox`).
    #[arg(long, value_name = "DIR")]
    pub(crate) inbox: Option<String>,
    /// Make it the default vault.
    #[arg(long)]
    pub(crate) default: bool,
    /// Commit every change vaultgate makes to the folder's git repository (as `vault git ID on`).
    #[arg(long)]
    pub(crate) git: bool,
    /// Let `read_attachment_text` give clients the text of the vault's PDFs (as `vault pdf-text ID
    /// on`). Off by default: the text then leaves this machine with whatever the client sends on.
    #[arg(long)]
    pub(crate) pdf_text: bool,
}

#[derive(Args)]
pub(crate) struct DemoArgs {
    /// Where to put the demo vault and home (default: a new temporary folder, kept afterwards).
    #[arg(long, value_name = "DIR")]
    pub(crate) dir: Option<PathBuf>,
    /// Prepare and print the configurations, then exit without serving.
    #[arg(long)]
    pub(crate) no_serve: bool,
    /// Serve over stdin/stdout instead of HTTP (for launching the demo from an MCP client).
    #[arg(long)]
    pub(crate) stdio: bool,
    /// HTTP port (default 8765; 0 picks a free one).
    #[arg(long)]
    pub(crate) port: Option<u16>,
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
pub(crate) enum TokenCmd {
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
pub(crate) enum TunnelCmd {
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
        /// Let the person approve on ChatGPT's approval card what the tier alone may not apply, one
        /// tier step up (`auto`: anyone's proposals). ChatGPT is then trusted to show the card to
        /// its user honestly: a tier raise for whoever holds the tunnel.
        #[arg(long)]
        approve_in_client: bool,
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
pub(crate) enum InboxCmd {
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
pub(crate) enum StatusArg {
    Pending,
    Applied,
    Rejected,
}

impl StatusArg {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StatusArg::Pending => "pending",
            StatusArg::Applied => "applied",
            StatusArg::Rejected => "rejected",
        }
    }
}

#[derive(Subcommand)]
pub(crate) enum HistoryCmd {
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
pub(crate) enum AuditCmd {
    /// Recompute every hash and link; exit 1 naming the first broken record.
    Verify {
        /// Check an export of `vaultgate audit export` instead of the home's log (offline: no
        /// home needed).
        #[arg(long, value_name = "FILE")]
        file: Option<PathBuf>,
    },
    /// Write the records after a seq as JSON Lines in the log's own format, each checked first;
    /// stops with exit 1 at a broken record.
    Export {
        /// Only the records after this seq (default: every record).
        #[arg(long, value_name = "SEQ", default_value_t = 0)]
        since: u64,
        /// Write to this new file (never over an existing one) instead of stdout.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
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

#[derive(Subcommand)]
pub(crate) enum TeamCmd {
    /// Make a PostgreSQL database a team's, with this home (created when absent) as its first
    /// admin gateway; this home's secret.key becomes the team secret.
    Init {
        /// The team's database: a libpq URL, postgres://USER@HOST:PORT/DB (on a loopback address).
        #[arg(long, value_name = "URL")]
        database: String,
        /// This gateway's name in the team (default USER@HOST): 1-64 of A-Za-z0-9._@-.
        #[arg(long)]
        name: Option<String>,
        /// Bring this home's credentials into the team (same ids: issued tokens stay valid); the
        /// team's chain opens naming where this home's log ended. Its vaults are registered again
        /// with `vault add --remote`; the home's log stays here.
        #[arg(long = "import")]
        import: bool,
    },
    /// Put a fresh home (created when absent) in an existing team, with the secret an admin
    /// exported.
    Join {
        /// The team's database: a libpq URL, as given to `team init`.
        #[arg(long, value_name = "URL")]
        database: String,
        /// The team secret, written by `vaultgate team secret export` on an admin's machine.
        #[arg(long, value_name = "FILE")]
        secret_file: PathBuf,
        /// This gateway's name in the team (default USER@HOST).
        #[arg(long)]
        name: Option<String>,
        /// What this gateway may do; a reviewer's database role must have been granted with
        /// `team grant-reviewer`.
        #[arg(long, value_enum, default_value_t = TeamRole::Admin)]
        role: TeamRole,
    },
    /// The team as this gateway sees it: the database, this gateway, the gateways seen in the
    /// last ten minutes.
    Status {
        /// One JSON document on stdout.
        #[arg(long)]
        json: bool,
    },
    /// The team secret.
    #[command(subcommand)]
    Secret(TeamSecretCmd),
    /// As an admin: forget the gateway NAME (a lost or retired machine); its database role's
    /// records are refused from then on. Drop that PostgreSQL role afterwards.
    Remove {
        /// The gateway's name, as `team status` lists it.
        name: String,
    },
    /// As an admin: let the PostgreSQL role ROLE run reviewer gateways (list, apply, reject, undo;
    /// never credentials, vaults or settings).
    GrantReviewer {
        /// An existing PostgreSQL role (CREATE ROLE ... LOGIN), not a superuser.
        role: String,
    },
    /// As an admin: a team setting, the same on every gateway (over each gateway.toml's own):
    /// limits.<name> of the limits (e.g. limits.max_pending_per_credential 100),
    /// pdf_text.<vault> on|off, default_vault ID, lease_seconds N (3–300: how long a vault's
    /// lease outlives its holder's last renewal).
    Set {
        /// limits.<name>, pdf_text.<vault>, default_vault or lease_seconds.
        key: String,
        /// The value; `default` removes the team's setting.
        value: String,
    },
}

#[derive(Subcommand)]
pub(crate) enum TeamSecretCmd {
    /// Write the team secret to a new file (mode 0600) for `team join` on another machine; it
    /// can mint tokens of every tier, so move it privately and delete it after.
    Export {
        /// The new file (never over an existing one).
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// As an admin: make a new team secret (this home takes it). Every token of the team must be
    /// issued again, and every other gateway refuses requests until it imports the new secret.
    Rotate {
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
    /// Take the team's new secret (after `team secret rotate`), exported by an admin; checked
    /// against the team's before this home changes.
    Import {
        /// The team secret, written by `vaultgate team secret export`.
        #[arg(long, value_name = "FILE")]
        secret_file: PathBuf,
    },
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum TeamRole {
    Admin,
    Reviewer,
}
