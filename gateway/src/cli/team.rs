//! `vaultgate team …`: putting a home in a team (docs/contract.md#team-mode), and what a gateway
//! of a team needs at start: its seat in the team's database.

use super::*;

use engine::home::TeamConfig;
use teamstate::{PgState, Role, TeamSession};

/// The engine of a home in team mode: the home's own core, with the team's credentials and
/// audit chain.
pub(crate) fn attach_team(core: Core, team: &TeamConfig) -> Result<Core, GatewayError> {
    check_database_url(&team.database)?;
    let session = TeamSession::open(&team.database, &team.name, core.secret().bytes())?;
    Ok(core.with_team(Arc::new(session)))
}

/// The team database's URL, checked before anything is written (teamstate checks it again at
/// every connection).
pub(crate) fn check_database_url(url: &str) -> Result<(), GatewayError> {
    teamstate::check_database_url(url).map(drop)
}

/// The URL without its password, for a person to read.
pub(super) fn shown_url(url: &str) -> String {
    // postgres://user:password@host/… → postgres://user@host/…
    let Some((scheme, rest)) = url.split_once("://") else {
        return "(not a URL)".into();
    };
    // The authority ends at the first '/' or '?'; its user part at its last '@' (a password may
    // hold an unescaped '@').
    let authority = rest.find(['/', '?']).map_or(rest, |end| &rest[..end]);
    let (auth, tail) = match authority.rfind('@') {
        Some(at) => (&rest[..at], &rest[at..]),
        None => ("", rest),
    };
    let user = auth.split(':').next().unwrap_or("");
    let mut shown = format!("{scheme}://{user}{tail}");
    // A password given as a query parameter.
    if let Some(q) = shown.find('?') {
        let (base, query) = shown.split_at(q + 1);
        let kept: Vec<&str> = query
            .split('&')
            .filter(|kv| !kv.to_ascii_lowercase().starts_with("password="))
            .collect();
        shown = format!("{base}{}", kept.join("&"));
    }
    shown
}

/// `USER@HOST`, as far as it makes a valid gateway name.
fn default_name(user: &str) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .unwrap_or_default();
    let clean = |s: &str| -> String {
        s.trim()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            .collect()
    };
    let (user, host) = (clean(user), clean(&host));
    let name = match (user.is_empty(), host.is_empty()) {
        (false, false) => format!("{user}@{host}"),
        (false, true) => user,
        (true, false) => host,
        (true, true) => "gateway".into(),
    };
    name.chars().take(64).collect()
}

fn gateway_name(name: Option<String>, user: &str) -> Result<String, GatewayError> {
    let name = name.unwrap_or_else(|| default_name(user));
    if !teamstate::valid_gateway_name(&name) {
        return Err(GatewayError::InvalidArgument(format!(
            "'{name}': a gateway name is 1-64 characters of A-Z a-z 0-9 . _ @ -"
        )));
    }
    Ok(name)
}

/// Refuses a home that already serves something: team mode starts from a fresh home.
fn refuse_used_home(home: &Home, command: &str) -> Result<(), GatewayError> {
    if !home.exists() {
        return Ok(());
    }
    let config = home.load_config()?;
    if let Some(team) = &config.team {
        return Err(GatewayError::InvalidArgument(format!(
            "this home is already the team gateway '{}'; a home in team mode stays in it",
            team.name
        )));
    }
    if !config.vaults.is_empty() {
        return Err(GatewayError::InvalidArgument(format!(
            "this home has vaults: `{command}` puts a fresh home in team mode; use another \
             --home (or VAULTGATE_HOME) for the team"
        )));
    }
    if !engine::credentials::list_credentials(home)?.is_empty() {
        return Err(GatewayError::InvalidArgument(format!(
            "this home has credentials: `{command}` puts a fresh home in team mode; use another \
             --home (or VAULTGATE_HOME) for the team"
        )));
    }
    Ok(())
}

/// Puts the home in team mode (`[team]` in `gateway.toml`, under its lock; its folder vaults
/// forgotten, their files untouched), then records `event` (on `target`) in the team's chain as
/// this gateway's first record, unless the team's setup recorded it already.
fn enter(
    home: &Home,
    database: &str,
    name: &str,
    user: &str,
    record: Option<(&str, &str)>,
) -> Result<(), GatewayError> {
    {
        let _lock = home.lock_config()?;
        let mut config = home.load_config()?;
        config.team = Some(TeamConfig::new(database, name));
        config.vaults.clear();
        config.default_vault = None;
        home.save_config(&config)?;
    }
    let core = open_core(home)?;
    match record {
        Some((event, target)) => audit_team(&core, event, user, Some(target)),
        None => Ok(()),
    }
}

/// `team init --import`: a local home becomes the team's first gateway, with its credentials.
fn import(home: &Home, database: &str, name: Option<String>, user: &str) -> Result<(), GatewayError> {
    check_database_url(database)?;
    let name = gateway_name(name, user)?;
    if !home.exists() {
        return Err(GatewayError::NoHome(home.dir.clone()));
    }
    let config = home.load_config()?;
    if config.team.is_some() {
        return refuse_used_home(home, "team init --import");
    }
    let pending = engine::vaults::pending_proposals(home)?;
    if pending > 0 {
        return Err(GatewayError::InvalidArgument(format!(
            "{pending} proposals are pending in this home's vaults: apply or reject them first \
             (`vaultgate inbox list`); this version moves credentials into a team, not proposals"
        )));
    }
    let credentials = engine::credentials::list_credentials(home)?;
    // The whole log verified: the team's chain names where a sound chain ended.
    let head = engine::audit_log::verified_head(home)?;
    let secret = home.load_secret()?;
    let store = PgState::connect(database)?;
    store.import_team(
        secret.bytes(),
        &name,
        env!("CARGO_PKG_VERSION"),
        &config.gateway_id,
        &credentials,
        head.clone(),
        &Operator::cli(user).audit_actor(),
    )?;
    drop(store);
    enter(home, database, &name, user, None)?;
    let vaults: Vec<&str> = config.vaults.iter().map(|v| v.id.as_str()).collect();
    out(&format!(
        "team {} created in {} with this home as its admin gateway '{name}'; {} credentials moved \
         in (their tokens stay valid)\nthe team's chain opens naming this home's last record ({})\n{}\
         next: vaultgate team secret export --out FILE for the others",
        config.gateway_id,
        shown_url(database),
        credentials.len(),
        head.map_or("none".into(), |(seq, hash)| format!("seq {seq}, {hash}")),
        if vaults.is_empty() {
            String::new()
        } else {
            format!(
                "vaults {} are no longer served here (their folders are untouched): put each in a git \
                 remote and run vaultgate vault add --remote URL --id ID\n",
                vaults.join(", ")
            )
        }
    ));
    Ok(())
}

pub(super) fn team_config(home: &Home) -> Result<TeamConfig, GatewayError> {
    if !home.exists() {
        return Err(GatewayError::NoHome(home.dir.clone()));
    }
    home.load_config()?.team.ok_or_else(|| {
        GatewayError::InvalidArgument(
            "this home is not in team mode: `vaultgate team init` or `vaultgate team join` first".into(),
        )
    })
}

/// One record of a team command, in the team's chain.
fn audit_team(core: &Core, event: &str, user: &str, target: Option<&str>) -> Result<(), GatewayError> {
    core.settings()
        .record_team_command(&Operator::cli(user), event, target)
}

/// The statements `team grant-reviewer ROLE` runs, for `team init` to show.
const GRANT_HINT: &str = "let a PostgreSQL role run reviewer gateways (list, apply, reject; never \
credentials, vaults or settings): create it (CREATE ROLE reviewer_ana LOGIN PASSWORD '…'), then \
run `vaultgate team grant-reviewer reviewer_ana` here; the reviewer joins with \
`--role reviewer` and a URL naming that role";

pub(crate) fn team_cmd(home: &Home, cmd: TeamCmd, user: &str) -> Result<(), GatewayError> {
    match cmd {
        TeamCmd::Init {
            database,
            name,
            import: true,
        } => import(home, &database, name, user),
        TeamCmd::Init {
            database,
            name,
            import: false,
        } => {
            check_database_url(&database)?;
            let name = gateway_name(name, user)?;
            refuse_used_home(home, "team init")?;
            home.init()?;
            let secret = home.load_secret()?;
            let store = PgState::connect(&database)?;
            let team_id = store.init_team(secret.bytes(), &name, env!("CARGO_PKG_VERSION"))?;
            drop(store);
            enter(home, &database, &name, user, Some(("team.init", &team_id)))?;
            out(&format!(
                "team {team_id} created in {}; this home is its admin gateway '{name}'\n\
                 next: vaultgate team secret export --out FILE, then on another machine:\n  \
                 vaultgate team join --database URL --secret-file FILE\n\
                 reviewers: {GRANT_HINT}",
                shown_url(&database)
            ));
            Ok(())
        }
        TeamCmd::Join {
            database,
            secret_file,
            name,
            role,
        } => {
            check_database_url(&database)?;
            let name = gateway_name(name, user)?;
            refuse_used_home(home, "team join")?;
            let secret = read_secret_file(&secret_file)?;
            let role = match role {
                TeamRole::Admin => Role::Admin,
                TeamRole::Reviewer => Role::Reviewer,
            };
            // The team checks the secret before this home changes.
            let store = PgState::connect(&database)?;
            let team_id = store.join_team(&secret, &name, role, env!("CARGO_PKG_VERSION"))?;
            drop(store);
            home.init()?;
            home.replace_secret(&secret)?;
            enter(home, &database, &name, user, Some(("team.join", &name)))?;
            out(&format!(
                "joined team {team_id} as the {} gateway '{name}' ({})\nnext: vaultgate token issue --name NAME (on an admin gateway), then vaultgate serve",
                role.as_str(),
                shown_url(&database)
            ));
            Ok(())
        }
        TeamCmd::Status { json } => super::team_status::status(home, json),
        TeamCmd::Secret(TeamSecretCmd::Export { out: file }) => {
            team_config(home)?;
            let core = open_core(home)?;
            write_secret_file(&file, core.secret().bytes())?;
            audit_team(&core, "team.secret_export", user, None)?;
            out(&format!(
                "wrote the team secret to {} (mode 0600): it can mint tokens of every tier; move \
                 it privately, run `vaultgate team join` with it, then delete it",
                file.display()
            ));
            Ok(())
        }
        TeamCmd::Secret(TeamSecretCmd::Rotate { yes }) => {
            let team = team_config(home)?;
            let what = "A new team secret: every token of the team stops working and must be issued \
                        again, and every other gateway refuses every request until its operator \
                        runs `vaultgate team secret import` with the new secret.";
            if !yes {
                use std::io::IsTerminal;
                if !std::io::stdin().is_terminal() {
                    return Err(GatewayError::InvalidArgument(format!(
                        "{what} Pass --yes to confirm."
                    )));
                }
                err(&format!("{what} Rotate? [y/N] "));
                let mut line = String::new();
                std::io::stdin().read_line(&mut line)?;
                if !matches!(line.trim(), "y" | "Y" | "yes") {
                    return Err(GatewayError::InvalidArgument("not rotated".into()));
                }
            }
            let mut secret = [0u8; 32];
            ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret)
                .map_err(|_| GatewayError::Internal("no randomness for a new secret".into()))?;
            let store = PgState::connect(&team.database)?;
            // SECURITY(T-TEAM3): the new secret is on disk before the team switches to it, so a
            // crash between the commit and `secret.key`'s replacement loses nothing: importing
            // `secret.key.next` finishes it (refused while it is not the team's).
            let next = home.dir.join("secret.key.next");
            write_secret_file(&next, &secret).map_err(|e| {
                GatewayError::InvalidArgument(format!(
                    "{e}; an earlier rotation may have stopped half-way: run `vaultgate team secret \
                     import --secret-file {}` (refused unless it is the team's secret), or delete it \
                     and rotate again",
                    next.display()
                ))
            })?;
            if let Err(e) = store.rotate_secret(&team.name, &Operator::cli(user).audit_actor(), &secret) {
                // Not rotated: nothing to keep.
                let _ = std::fs::remove_file(&next);
                return Err(e);
            }
            home.replace_secret(&secret)?;
            std::fs::remove_file(&next)?;
            out(
                "rotated the team secret: issue every token again (`vaultgate token issue`), restart \
                 a `vaultgate serve` running from this home, and give each other gateway's operator \
                 the new secret (`vaultgate team secret export`, then `vaultgate team secret import` \
                 there)",
            );
            Ok(())
        }
        TeamCmd::Secret(TeamSecretCmd::Import { secret_file }) => {
            let team = team_config(home)?;
            let secret = read_secret_file(&secret_file)?;
            let store = PgState::connect(&team.database)?;
            if !store.is_team_secret(&secret)? {
                return Err(GatewayError::InvalidArgument(
                    "this secret is not the team's: ask an admin for `vaultgate team secret export`".into(),
                ));
            }
            home.replace_secret(&secret)?;
            drop(store);
            let core = open_core(home)?;
            audit_team(&core, "team.secret_import", user, None)?;
            out("this gateway holds the team's secret again; restart a running `vaultgate serve`");
            Ok(())
        }
        TeamCmd::Remove { name } => {
            let team = team_config(home)?;
            let store = PgState::connect(&team.database)?;
            store.remove_gateway(&team.name, &Operator::cli(user).audit_actor(), &name)?;
            out(&format!(
                "removed the gateway '{name}' from the team; drop its PostgreSQL role now (DROP ROLE …), \
                 and issue new tokens if that machine held any"
            ));
            Ok(())
        }
        TeamCmd::Set { key, value } => {
            let core = open_core(home)?;
            core.settings()
                .team_set(&engine::Operator::cli(user), &key, &value)?;
            out(&format!(
                "team setting {key} = {value} (every gateway reads it at its next sync)"
            ));
            Ok(())
        }
        TeamCmd::GrantReviewer { role } => {
            let team = team_config(home)?;
            check_database_url(&team.database)?;
            let store = PgState::connect(&team.database)?;
            store.grant_reviewer(&role)?;
            drop(store);
            let core = open_core(home)?;
            audit_team(&core, "team.grant_reviewer", user, Some(&role))?;
            out(&format!(
                "the PostgreSQL role {role} may now run reviewer gateways: `vaultgate team join \
                 --role reviewer` with a URL naming it"
            ));
            Ok(())
        }
    }
}

fn read_secret_file(file: &std::path::Path) -> Result<[u8; 32], GatewayError> {
    use std::io::Read;
    let cannot =
        |e: std::io::Error| GatewayError::InvalidArgument(format!("cannot read {}: {e}", file.display()));
    // Bounded: one byte more than a secret, so `/dev/zero` or a large file is refused unread.
    let mut bytes = Vec::with_capacity(33);
    std::fs::File::open(file)
        .and_then(|f| f.take(33).read_to_end(&mut bytes))
        .map_err(cannot)?;
    bytes.try_into().map_err(|_| {
        GatewayError::InvalidArgument(format!(
            "{} is not a team secret (32 bytes, written by `vaultgate team secret export`)",
            file.display()
        ))
    })
}

fn write_secret_file(file: &std::path::Path, key: &[u8; 32]) -> Result<(), GatewayError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                GatewayError::InvalidArgument(format!(
                    "{} already exists: the secret is never written over a file",
                    file.display()
                ))
            } else {
                GatewayError::Io(e)
            }
        })?;
    f.write_all(key)?;
    f.sync_all()?;
    Ok(())
}

/// `vaultgate audit …` on a team gateway: the team's chain, read from its database.
pub(crate) fn team_audit_cmd(home: &Home, team: &TeamConfig, cmd: AuditCmd) -> Result<(), GatewayError> {
    let store = || PgState::connect(&team.database);
    match cmd {
        AuditCmd::Verify { file: Some(file) } => verify_export(&file),
        AuditCmd::Verify { file: None } => {
            let store = store()?;
            // The export must reach at least the head committed before it started.
            let (head_seq, head_hash) = store.audit_chain_head()?;
            let copy = tempfile::NamedTempFile::new_in(&home.dir)?;
            {
                let mut w = std::io::BufWriter::new(copy.as_file());
                store.export_audit(0, &mut w)?;
            }
            let r = engine::audit_log::verify_file(copy.path())?;
            if let Some(b) = r.broken {
                return Err(GatewayError::AuditBroken(format!(
                    "the team's chain is broken at seq {}: {}",
                    b.seq, b.reason
                )));
            }
            if let Some((first, prev)) = &r.first
                && (*first != 1 || prev != engine::audit_log::GENESIS)
            {
                return Err(GatewayError::AuditBroken(format!(
                    "the team's chain does not start at seq 1 (its first record is seq {first})"
                )));
            }
            let (last_seq, last_hash) = r.last.clone().unwrap_or((0, String::new()));
            if last_seq < head_seq || (last_seq == head_seq && head_seq > 0 && last_hash != head_hash) {
                return Err(GatewayError::AuditBroken(format!(
                    "the team's chain ends at seq {last_seq}, but its head names seq {head_seq}: \
                     records are missing or were replaced"
                )));
            }
            let commits = check_trailers(home, &store, copy.path())?;
            out(&format!(
                "audit chain ok: {} records in the team database (seq 1 to {last_seq}); the last's hash: {last_hash}; \
                 {commits} commits of the team vaults' clones name records of it",
                r.records
            ));
            Ok(())
        }
        AuditCmd::Export { since, out: None } => {
            let store = store()?;
            let stdout = std::io::stdout();
            let mut w = std::io::BufWriter::new(stdout.lock());
            match store.export_audit(since, &mut w) {
                // The reader went away (`| head`): it has what it wanted.
                Err(GatewayError::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                r => r.map(drop),
            }
        }
        AuditCmd::Export {
            since,
            out: Some(file),
        } => {
            let store = store()?;
            let n = write_new_file(&file, |w| store.export_audit(since, w))?;
            out(&format!(
                "exported {n} records of the team's chain to {}; check it with `vaultgate audit verify --file {}`",
                file.display(),
                file.display()
            ));
            Ok(())
        }
        AuditCmd::Tail { n, json } => print_records(&store()?.audit_tail(n)?, json),
        AuditCmd::Repair | AuditCmd::Restart { .. } => Err(GatewayError::InvalidArgument(
            "this home is a team gateway: its audit chain is the team's, in the team database \
             (a transaction keeps it whole); there is nothing to repair or restart here"
                .into(),
        )),
    }
}

/// docs/contract.md#team-mode: every `Vaultgate-Audit` trailer on a team vault's branch (as this
/// gateway's clone holds it) names a record of the chain, by seq and hash. `export` is the chain
/// just verified; answers how many commits were checked.
fn check_trailers(home: &Home, store: &PgState, export: &std::path::Path) -> Result<usize, GatewayError> {
    use std::io::BufRead;
    let mut hashes = std::collections::HashMap::new();
    for line in std::io::BufReader::new(std::fs::File::open(export)?).lines() {
        let rec: serde_json::Value = serde_json::from_str(&line?)
            .map_err(|e| GatewayError::AuditBroken(format!("the team's chain: {e}")))?;
        if let (Some(seq), Some(hash)) = (rec["seq"].as_u64(), rec["hash"].as_str()) {
            hashes.insert(seq, hash.to_owned());
        }
    }
    let program = engine::git::Program::default();
    let mut checked = 0;
    for v in store.team_vaults()? {
        let dir = home.dir.join("vaults").join(&v.id);
        if !engine::vaults::valid_id(&v.id) || !dir.join(".git").is_dir() {
            continue;
        }
        for (commit, seq, hash) in engine::remote::audit_trailers(&program, &dir)? {
            if hashes.get(&seq) != Some(&hash) {
                return Err(GatewayError::AuditBroken(format!(
                    "commit {commit} of team vault '{}' names audit record {seq} {}, which the \
                     team's chain does not hold: the trailer was forged, or the chain lost a record",
                    v.id,
                    policy::text::escape_line(&hash)
                )));
            }
            checked += 1;
        }
    }
    Ok(checked)
}

/// `vaultgate doctor` on a team gateway: the team's database, its chain and each team vault's
/// clone against its remote. Reads only (nothing is fetched or written).
pub(crate) fn doctor_checks(home: &Home, team: &TeamConfig) -> Vec<engine::doctor::Check> {
    use engine::doctor::{Check, Status};
    let check = |status, what: String, next: &str| Check {
        status,
        what,
        next: next.to_owned(),
    };
    let store = match PgState::connect(&team.database) {
        Ok(s) => s,
        Err(e) => {
            return vec![check(
                Status::Fail,
                format!(
                    "team database {}: {}",
                    shown_url(&team.database),
                    e.client_message()
                ),
                "start it, or fix [team] database in gateway.toml; every call is refused (AUDIT_UNAVAILABLE) until it answers",
            )];
        }
    };
    let mut checks = Vec::new();
    let role = store.gateway_role(&team.name).ok().flatten();
    checks.push(match &role {
        Some(role) => check(
            Status::Ok,
            format!(
                "team database {}: reachable, this gateway is '{}' ({role})",
                shown_url(&team.database),
                team.name
            ),
            "",
        ),
        None => check(
            Status::Fail,
            format!("the team has no gateway named '{}'", team.name),
            "an admin removed it, or this home joined another database: join again from a fresh home",
        ),
    });
    if let Ok((seq, _)) = store.audit_chain_head() {
        checks.push(check(
            Status::Ok,
            format!("the team's audit chain: head at seq {seq}"),
            "vaultgate audit verify checks it whole",
        ));
    }
    let vaults = match store.team_vaults() {
        Ok(v) => v,
        Err(e) => {
            checks.push(check(
                Status::Fail,
                format!("team vaults: {}", e.client_message()),
                "",
            ));
            return checks;
        }
    };
    if vaults.is_empty() {
        checks.push(check(
            Status::Warn,
            "no team vault is registered".into(),
            "vaultgate vault add --remote URL --id ID (on an admin gateway)",
        ));
    }
    let git = engine::git::Program::default();
    let leases = store.leases().unwrap_or_default();
    for v in &vaults {
        let dir = home.dir.join("vaults").join(&v.id);
        let id = &v.id;
        let c = match (
            engine::remote::clone_head(&git, &dir),
            engine::remote::remote_head(&git, v),
        ) {
            (None, _) => check(
                Status::Warn,
                format!("vault {id}: not cloned here yet"),
                "vaultgate vault list (or serve) clones it",
            ),
            (Some(_), Err(e)) => check(
                Status::Warn,
                format!("vault {id}: its remote cannot be reached: {}", e.client_message()),
                "check the URL, the network and your git credentials; reads use the clone meanwhile",
            ),
            (Some(_), Ok(None)) => check(
                Status::Fail,
                format!("vault {id}: the remote has no branch '{}'", v.branch),
                "ask the team what happened to the branch",
            ),
            (Some(_), Ok(Some(remote))) => match engine::remote::standing(&git, &dir, &remote) {
                Ok(engine::remote::Standing::UpToDate) => check(
                    Status::Ok,
                    format!("vault {id}: clone up to date with its remote"),
                    "",
                ),
                Ok(engine::remote::Standing::Behind) => check(
                    Status::Ok,
                    format!("vault {id}: clone behind its remote"),
                    "a serving gateway fetches within [team] fetch_seconds",
                ),
                Ok(engine::remote::Standing::Rewritten) => check(
                    Status::Fail,
                    format!(
                        "vault {id}: the remote's history was rewritten (its head does not descend from this clone's)"
                    ),
                    "ask the team what happened; the clone stays as it is until someone decides",
                ),
                Err(e) => check(Status::Fail, format!("vault {id}: {}", e.client_message()), ""),
            },
        };
        checks.push(c);
        if let Ok((_, Some(seen))) = store.vault_head(id) {
            checks.push(check(
                Status::Fail,
                format!(
                    "vault {id}: applies are refused: its branch (at {seen}) no longer descends from the head the team registered"
                ),
                &format!("once a person decided the new history is right: vaultgate vault resync {id} --yes"),
            ));
        }
        match store.job_counts(id) {
            Ok(j) if j.left > 0 => checks.push(check(
                Status::Warn,
                format!(
                    "vault {id}: {} apply job(s) left by a gateway that stopped (the oldest job began {} s ago)",
                    j.left,
                    j.oldest_seconds.unwrap_or(0)
                ),
                "the next write to the vault settles up to 4 of them from the remote, a serving gateway those \
                 older than apply_wait_seconds, and the next apply or rejection of a proposal its own (a job \
                 older than job_ttl_seconds is never pushed again)",
            )),
            Ok(j) if j.pending > 0 => checks.push(check(
                Status::Ok,
                format!("vault {id}: {} apply job(s) in flight", j.pending),
                "",
            )),
            _ => {}
        }
        if let Some(l) = leases.iter().find(|l| &l.vault == id) {
            let now = match l.held {
                true => {
                    "held now: a write is under way, or its gateway stopped and it runs out within lease_seconds"
                }
                false => "free",
            };
            checks.push(check(
                Status::Ok,
                format!(
                    "vault {id}: lease epoch {}, last taken by {} at {} ({now})",
                    l.epoch, l.holder, l.since
                ),
                "",
            ));
        }
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::shown_url;

    #[test]
    fn a_database_url_is_shown_without_its_password() {
        for (url, shown) in [
            (
                "postgres://ana:hunter2@127.0.0.1:5432/team",
                "postgres://ana@127.0.0.1:5432/team",
            ),
            ("postgres://ana@127.0.0.1/team", "postgres://ana@127.0.0.1/team"),
            (
                "postgres://127.0.0.1/team?user=ana&password=hunter2&sslmode=disable",
                "postgres://127.0.0.1/team?user=ana&sslmode=disable",
            ),
            (
                "postgres://ana:p%40ss@localhost/team",
                "postgres://ana@localhost/team",
            ),
            (
                "postgres://ana:pa@ss@localhost/team",
                "postgres://ana@localhost/team",
            ),
            ("postgres://localhost/team", "postgres://localhost/team"),
        ] {
            assert_eq!(shown_url(url), shown, "{url}");
        }
    }
}
