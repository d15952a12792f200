//! Configuration changes of the vault set — `vault add`, `vault remove`, `vault set-default` — as
//! engine operations: checked, written to `gateway.toml` and audited here, whichever surface asks
//! (the CLI, the demo), with the operator as actor (docs/contract.md#concepts). They run on a core
//! opened without its vaults ([`Core::open_for_configuration`]), so a vault whose folder is gone
//! can still be removed.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::json;

use crate::call::ResultIds;
use crate::core::{Operator, VaultHandle};
use crate::error::GatewayError;
use crate::home::VaultConfig;

/// What `vault add` asks for; unset fields take the default layout.
#[derive(Debug, Clone)]
pub struct VaultAdd {
    pub path: PathBuf,
    pub id: Option<String>,
    pub name: Option<String>,
    pub notes: Vec<String>,
    pub standards: Vec<String>,
    pub inbox: Option<String>,
    pub default: bool,
}

impl ResultIds for VaultConfig {}

/// Proposals still pending in the home's vaults (`team init --import` moves none yet).
pub fn pending_proposals(home: &crate::home::Home) -> Result<u64, GatewayError> {
    let state = inbox::State::open(&home.state_path())?;
    let mut n = 0;
    for v in &home.load_config()?.vaults {
        n += state.count_pending(&v.id)?;
    }
    Ok(n)
}

fn not_a_team() -> GatewayError {
    GatewayError::InvalidArgument("this home is not a team gateway".into())
}

/// What a team gateway takes from the team's database over its own `gateway.toml`
/// (docs/contract.md#team-mode): the team's vaults and its settings (`limits.*`).
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct TeamView {
    pub vaults: Vec<VaultConfig>,
    /// `limits` field → value, set by `team set`.
    pub limits: serde_json::Map<String, serde_json::Value>,
    /// The team's default vault (`team set default_vault`, or `vault set-default` on a team
    /// gateway).
    pub default_vault: Option<String>,
}

/// Adds the team's vaults to `config` and lays the team's limits over its own.
pub(crate) fn team_overlay(
    core: &crate::core::Core,
    config: &mut crate::home::Config,
) -> Result<(), GatewayError> {
    let team = core.team_vaults.lock().map(|t| t.clone()).unwrap_or_default();
    config.vaults.extend(team.vaults);
    if let Some(d) = team.default_vault
        && config.vaults.iter().any(|v| v.id == d)
    {
        config.default_vault = Some(d);
    }
    if !team.limits.is_empty() {
        config.limits = limits_with(&config.limits, &team.limits)?;
    }
    Ok(())
}

/// `limits` with `set` laid over it; a field that is not a limit, or a value it cannot take, is
/// refused.
fn limits_with(
    limits: &crate::home::LimitsConfig,
    set: &serde_json::Map<String, serde_json::Value>,
) -> Result<crate::home::LimitsConfig, GatewayError> {
    let mut all = match serde_json::to_value(limits) {
        Ok(serde_json::Value::Object(m)) => m,
        _ => return Err(GatewayError::Internal("the limits are not an object".into())),
    };
    for (k, v) in set {
        all.insert(k.clone(), v.clone());
    }
    serde_json::from_value(serde_json::Value::Object(all))
        .map_err(|e| GatewayError::InvalidArgument(format!("team setting: {e}")))
}

/// A vault id: 1–64 of `a-z`, `0-9`, `-`, `_` (the CLI's argument parser asks this too).
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// The id a folder name suggests: lower-case letters and digits, other runs as one `-`.
fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    let out = out.trim_end_matches('-').to_owned();
    if out.is_empty() { "vault".into() } else { out }
}

/// Configuration changes, each checked, written and audited here (and tunnel.rs).
pub struct Settings<'a> {
    pub(crate) core: &'a crate::core::Core,
}

impl Settings<'_> {
    /// `vault add`: registers a folder as a vault. The first vault, or `default`, becomes the
    /// default.
    pub fn vault_add(&self, operator: &Operator, args: VaultAdd) -> Result<VaultConfig, GatewayError> {
        // docs/contract.md#team-mode: a team's vaults live in a git remote, never in one
        // machine's folder.
        if self.core.config().team.is_some() {
            return Err(GatewayError::InvalidArgument(
                "this home is a team gateway: a team's vaults live in a git remote (`vault add \
                 --remote URL`), which this version cannot serve yet; a folder vault needs a \
                 local home (another --home)"
                    .into(),
            ));
        }
        let record = json!({"vault": args.id, "name": args.name, "default": args.default});
        self.core
            .operator_call(operator, "vault_add", &record, |call| {
                let vc = self.register_vault(args)?;
                call.set_vault(&vc.id);
                Ok(vc)
            })
            .into_inner()
    }

    /// `vault remove`: forgets a vault (its files are not touched).
    pub fn vault_remove(&self, operator: &Operator, id: &str) -> Result<(), GatewayError> {
        self.core
            .operator_call(operator, "vault_remove", &json!({"vault": id}), |call| {
                call.set_vault(id);
                // Held to the save: a change made meanwhile by another process is not lost.
                let _edit = self.core.home.lock_config()?;
                let mut config = self.core.home.load_config()?;
                let before = config.vaults.len();
                config.vaults.retain(|v| v.id != id);
                if config.vaults.len() == before {
                    return Err(GatewayError::VaultNotFound(id.to_owned()));
                }
                if config.default_vault.as_deref() == Some(id) {
                    config.default_vault = config.vaults.first().map(|v| v.id.clone());
                }
                self.core.home.save_config(&config)?;
                crate::changelog::forget_vault(&self.core.home, id)
            })
            .into_inner()
    }

    /// The record of a team command (`team init`, `team join`, …) in the team's chain.
    pub fn record_team_command(
        &self,
        operator: &Operator,
        event: &str,
        target: Option<&str>,
    ) -> Result<(), GatewayError> {
        if self.core.team.is_none() {
            return Err(GatewayError::Internal("not a team gateway".into()));
        }
        let mut entry = audit::Entry::new(event, operator.audit_actor(), audit::Outcome::Ok);
        entry.target = target.map(str::to_owned);
        self.core.append_audit(entry, audit::Durability::Sync).map(drop)
    }

    /// `vault add --remote` on a team gateway: the branch must exist on the remote; registered
    /// for every gateway at once (the outer result), then cloned here (the inner one).
    pub fn team_vault_add(
        &self,
        operator: &Operator,
        vault: crate::remote::TeamVault,
    ) -> Result<Result<crate::remote::Synced, GatewayError>, GatewayError> {
        let team = self.core.team().ok_or_else(not_a_team)?;
        if !valid_id(&vault.id) {
            return Err(GatewayError::InvalidArgument(format!(
                "vault id '{}' must be 1-64 chars of a-z, 0-9, '-' or '_'",
                vault.id
            )));
        }
        for folder in vault.notes.iter().chain(&vault.standards) {
            policy::FolderPath::parse(folder)
                .map_err(|e| GatewayError::InvalidArgument(format!("folder '{folder}': {e}")))?;
        }
        if !crate::remote::branch_exists(&self.core.git, &vault.remote, &vault.branch)? {
            return Err(GatewayError::InvalidArgument(format!(
                "the remote has no branch '{}': push one first (or pass --branch)",
                vault.branch
            )));
        }
        team.add_vault(&operator.audit_actor(), &vault)?;
        let synced = self.sync_team_vaults();
        Ok(synced
            .into_iter()
            .find(|(id, _)| *id == vault.id)
            .map(|(_, r)| r)
            .unwrap_or_else(|| Err(GatewayError::Internal("the new vault was not synced".into()))))
    }

    /// `vault remove` on a team gateway: forgotten by every gateway; the remote is not touched.
    pub fn team_vault_remove(&self, operator: &Operator, id: &str) -> Result<(), GatewayError> {
        let team = self.core.team().ok_or_else(not_a_team)?;
        team.remove_vault(&operator.audit_actor(), id)?;
        self.sync_team_vaults();
        Ok(())
    }

    /// `vault resync ID --yes` on a team gateway: the remote's branch head as it is now becomes
    /// the registered head (its rewritten history accepted), every gateway is told and its clone
    /// follows. Answers the head.
    pub fn team_vault_resync(&self, operator: &Operator, id: &str) -> Result<String, GatewayError> {
        let team = self.core.team().ok_or_else(not_a_team)?;
        let vault = team
            .vaults()?
            .into_iter()
            .find(|v| v.id == id)
            .ok_or_else(|| GatewayError::VaultNotFound(id.to_owned()))?;
        let head = crate::remote::remote_head(&self.core.git, &vault)?.ok_or_else(|| {
            GatewayError::Config(format!(
                "the remote of vault '{id}' has no branch '{}' now",
                vault.branch
            ))
        })?;
        team.resync_vault(&operator.audit_actor(), id, &head)?;
        // The clone follows the accepted history at its next fetch (this one).
        self.sync_team_vaults();
        Ok(head)
    }

    /// `team set KEY VALUE` (admin): a team setting, the same on every gateway. KEY is
    /// `limits.<name>` of docs/contract.md#limits-and-pagination; VALUE `default` removes it.
    pub fn team_set(&self, operator: &Operator, key: &str, value: &str) -> Result<(), GatewayError> {
        let team = self.core.team().ok_or_else(not_a_team)?;
        let team_vault = |id: &str| -> Result<(), GatewayError> {
            match team.vaults()?.iter().any(|v| v.id == id) {
                true => Ok(()),
                false => Err(GatewayError::VaultNotFound(id.to_owned())),
            }
        };
        let parsed = match value {
            "default" => None,
            v => Some(serde_json::from_str(v).unwrap_or_else(|_| serde_json::Value::String(v.to_owned()))),
        };
        let parsed = match (key, key.strip_prefix("limits."), key.strip_prefix("pdf_text.")) {
            (_, Some(name), _) => {
                if let Some(v) = &parsed {
                    let mut one = serde_json::Map::new();
                    one.insert(name.to_owned(), v.clone());
                    limits_with(&crate::home::LimitsConfig::default(), &one)?;
                }
                parsed
            }
            (_, _, Some(vault)) => {
                team_vault(vault)?;
                match value {
                    "default" => None,
                    "on" | "true" => Some(serde_json::Value::Bool(true)),
                    "off" | "false" => Some(serde_json::Value::Bool(false)),
                    _ => {
                        return Err(GatewayError::InvalidArgument(format!(
                            "{key} takes on or off (or default)"
                        )));
                    }
                }
            }
            ("lease_seconds", _, _) => match value {
                "default" => None,
                v => match v.parse::<u64>() {
                    Ok(n @ 3..=300) => Some(serde_json::Value::from(n)),
                    _ => {
                        return Err(GatewayError::InvalidArgument(
                            "lease_seconds takes whole seconds from 3 to 300 (or default: 10)".into(),
                        ));
                    }
                },
            },
            ("default_vault", _, _) => {
                if value != "default" {
                    team_vault(value)?;
                }
                parsed.map(|_| serde_json::Value::String(value.to_owned()))
            }
            _ => {
                return Err(GatewayError::InvalidArgument(format!(
                    "'{key}' is not a team setting: this version takes limits.<name> (see \
                     `vaultgate doctor`'s limits), pdf_text.<vault>, default_vault and lease_seconds"
                )));
            }
        };
        team.set_setting(&operator.audit_actor(), key, parsed.as_ref())?;
        self.sync_team_vaults();
        Ok(())
    }

    /// Whether `id` is one of the team's vaults (never on a local home).
    fn is_team_vault(&self, id: &str) -> Result<bool, GatewayError> {
        match self.core.team() {
            Some(team) => Ok(team.vaults()?.iter().any(|v| v.id == id)),
            None => Ok(false),
        }
    }

    /// Brings every team vault's clone up to its remote (cloning new ones) and makes the set the
    /// one requests see. A vault whose remote cannot be reached keeps its clone (served as it
    /// is) or, never cloned, is left out; each outcome is answered by vault id.
    pub fn sync_team_vaults(&self) -> Vec<(String, Result<crate::remote::Synced, GatewayError>)> {
        self.team_vaults_now(true)
    }

    /// The team's vaults as this home's clones hold them (a missing clone is made): what a CLI
    /// command opens, without waiting for every remote (an apply fetches what it needs itself).
    pub fn team_vaults_as_cloned(&self) -> Vec<(String, Result<crate::remote::Synced, GatewayError>)> {
        self.team_vaults_now(false)
    }

    fn team_vaults_now(&self, fetch: bool) -> Vec<(String, Result<crate::remote::Synced, GatewayError>)> {
        let Some(team) = self.core.team() else {
            return Vec::new();
        };
        let listed = match team.vaults() {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "the team's vaults cannot be listed; keeping the clones as they are");
                return Vec::new();
            }
        };
        let settings = match team.settings() {
            Ok(set) => Some(set),
            Err(e) => {
                tracing::warn!(error = %e, "the team's settings cannot be read; keeping the last ones");
                None
            }
        };
        let setting = |key: &str| {
            settings
                .as_ref()
                .and_then(|set| set.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()))
        };
        let mut configs = Vec::new();
        let mut outcomes = Vec::new();
        for v in listed {
            // SECURITY(T-TEAM7): a row's id becomes a folder name under the home: one that is
            // not a vault id (written into the database behind vaultgate's back) is skipped.
            if !valid_id(&v.id) {
                tracing::error!(
                    "the team database holds a vault whose id is not a vault id; it is not served"
                );
                continue;
            }
            // Absolute: the clone is read, watched and handed to git from wherever the process is.
            let relative = self.core.home.dir.join("vaults").join(&v.id);
            let dir = std::path::absolute(&relative).unwrap_or(relative);
            let held = (!fetch)
                .then(|| crate::remote::clone_head(&self.core.git, &dir))
                .flatten();
            let synced = match held {
                Some(head) => Ok(crate::remote::Synced::At(head)),
                None => crate::teampush::sync_checked(self.core, team, &v, &dir),
            };
            match &synced {
                Ok(crate::remote::Synced::Diverged { clone, remote }) => {
                    tracing::error!(vault = %v.id, %clone, %remote, "the remote's history does not descend from this clone's; the clone is kept as it is");
                }
                Err(e) => tracing::warn!(vault = %v.id, error = %e, "a team vault could not be synced"),
                Ok(_) => {}
            }
            if dir.join(".git").is_dir() {
                configs.push(VaultConfig {
                    id: v.id.clone(),
                    name: v.name.clone(),
                    path: dir,
                    notes: v.notes.clone(),
                    standards: v.standards.clone(),
                    inbox: "inbox".into(),
                    readable: None,
                    pdf_text: setting(&format!("pdf_text.{}", v.id)) == Some(serde_json::Value::Bool(true)),
                    remote: Some(v.remote.clone()),
                });
            }
            outcomes.push((v.id, synced));
        }
        let mut limits = serde_json::Map::new();
        for (k, v) in settings.iter().flatten() {
            if let Some(name) = k.strip_prefix("limits.") {
                limits.insert(name.to_owned(), v.clone());
            }
        }
        let default_vault = setting("default_vault").and_then(|v| v.as_str().map(str::to_owned));
        let changed = match self.core.team_vaults.lock() {
            Ok(mut t)
                if settings.is_some()
                    && (t.vaults != configs || t.limits != limits || t.default_vault != default_vault) =>
            {
                t.vaults = configs;
                t.limits = limits;
                t.default_vault = default_vault;
                true
            }
            Ok(mut t) if settings.is_none() && t.vaults != configs => {
                t.vaults = configs;
                true
            }
            _ => false,
        };
        if changed {
            // The next refresh opens the new set (stamp unknown: read again).
            let mut l = self
                .core
                .loaded
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let (config, vaults) = (l.config.clone(), l.vaults.clone());
            *l = Arc::new(crate::core::Loaded {
                config,
                vaults,
                stamp: None,
            });
        }
        self.core.refresh();
        outcomes
    }

    /// `vault set-default`.
    pub fn vault_set_default(&self, operator: &Operator, id: &str) -> Result<(), GatewayError> {
        if self.is_team_vault(id)? {
            return self.team_set(operator, "default_vault", id);
        }
        self.core
            .operator_call(operator, "vault_set_default", &json!({"vault": id}), |call| {
                call.set_vault(id);
                // Held to the save: a change made meanwhile by another process is not lost.
                let _edit = self.core.home.lock_config()?;
                let mut config = self.core.home.load_config()?;
                if !config.vaults.iter().any(|v| v.id == id) {
                    return Err(GatewayError::VaultNotFound(id.to_owned()));
                }
                config.default_vault = Some(id.to_owned());
                self.core.home.save_config(&config)
            })
            .into_inner()
    }

    /// The rules of a new vault: its id, no vault inside or around another, the default layout.
    fn register_vault(&self, args: VaultAdd) -> Result<VaultConfig, GatewayError> {
        // Held to the save: a change made meanwhile by another process is not lost.
        let _edit = self.core.home.lock_config()?;
        let mut config = self.core.home.load_config()?;
        let path = std::fs::canonicalize(&args.path)
            .map_err(|e| GatewayError::InvalidArgument(format!("{}: {e}", args.path.display())))?;
        if !path.is_dir() {
            return Err(GatewayError::InvalidArgument(format!(
                "{} is not a folder",
                path.display()
            )));
        }
        let folder_name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("vault")
            .to_owned();
        let id = args.id.unwrap_or_else(|| slug(&folder_name));
        if !valid_id(&id) {
            return Err(GatewayError::InvalidArgument(format!(
                "vault id '{id}' must be 1-64 chars of a-z, 0-9, '-' or '_'"
            )));
        }
        if config.vaults.iter().any(|v| v.id == id) {
            return Err(GatewayError::InvalidArgument(format!(
                "a vault with id '{id}' exists; pass --id"
            )));
        }
        // SECURITY(T-VAULT): one file, one vault. Nested vaults would give a note two path policies,
        // two write locks and two histories, and a vault's `.vaultgate/` would be another's note.
        for v in &config.vaults {
            let other = std::fs::canonicalize(&v.path).unwrap_or_else(|_| v.path.clone());
            let relation = if path == other {
                "is"
            } else if path.starts_with(&other) {
                "is inside"
            } else if other.starts_with(&path) {
                "contains"
            } else {
                continue;
            };
            return Err(GatewayError::InvalidArgument(format!(
                "{} {relation} vault '{}' ({}); a folder can belong to one vault only",
                path.display(),
                v.id,
                other.display()
            )));
        }
        let standards = if args.standards.is_empty() {
            if path.join("docs").is_dir() {
                vec!["docs".to_owned()]
            } else {
                vec![]
            }
        } else {
            args.standards
        };
        let vc = VaultConfig {
            id: id.clone(),
            name: args.name.unwrap_or(folder_name),
            path,
            notes: if args.notes.is_empty() {
                vec![".".into()]
            } else {
                args.notes
            },
            standards,
            inbox: args.inbox.unwrap_or_else(|| "inbox".into()),
            readable: None,
            // Off until `vault_pdf_text` turns it on: the one audited way to change it.
            pdf_text: false,
            remote: None,
        };
        vc.layout()?;
        if args.default || config.vaults.is_empty() {
            config.default_vault = Some(id);
        }
        config.vaults.push(vc.clone());
        self.core.home.save_config(&config)?;
        Ok(vc)
    }

    /// `vault git ID on|off` (docs/contract.md#git-history), under the vault's write lock so no change is queued
    /// between the check and the switch. Off refuses while commits wait, unless `drop_queue`.
    pub fn vault_git(
        &self,
        operator: &Operator,
        v: &Arc<VaultHandle>,
        on: bool,
        drop_queue: bool,
    ) -> Result<crate::changelog::GitStatus, GatewayError> {
        let args =
            serde_json::json!({"vault": v.id, "git": if on { "on" } else { "off" }, "dropQueue": drop_queue});
        self.core
            .operator_call(operator, "vault_git", &args, |call| {
                call.set_vault(&v.id);
                // docs/contract.md#team-mode: every change to a team vault is a commit already.
                if v.remote.is_some() {
                    return Err(GatewayError::InvalidArgument(format!(
                        "vault '{}' is a team vault: every change vaultgate makes to it is a commit \
                         pushed to its remote; `vault git` is for local vaults",
                        v.id
                    )));
                }
                let _lock = v.reader.fs().write_lock()?;
                if on {
                    let status = self.core.history().git_on(v)?;
                    // Commits queued before an earlier `off --drop-queue` are gone; anything queued
                    // while git was on is made now.
                    self.core.history().drain_git(v);
                    Ok(status)
                } else {
                    self.core.history().git_off(v, drop_queue).map(|(s, _)| s)
                }
            })
            .into_inner()
    }

    /// Turns PDF text (`read_attachment_text`, docs/contract.md#notes-as-data-and-attachments) on or off for a vault in
    /// `gateway.toml`; a running server reads the changed file at its next request, so it takes
    /// effect at once. Audited like every operator change.
    pub fn vault_pdf_text(&self, operator: &Operator, vault: &str, on: bool) -> Result<bool, GatewayError> {
        // A team vault's setting is the team's (docs/contract.md#team-mode).
        if self.is_team_vault(vault)? {
            self.team_set(
                operator,
                &format!("pdf_text.{vault}"),
                if on { "on" } else { "off" },
            )?;
            return Ok(on);
        }
        let args = serde_json::json!({"vault": vault, "pdfText": on});
        self.core
            .operator_call(operator, "vault_pdf_text", &args, |call| {
                call.set_vault(vault);
                // Held to the save: a change made meanwhile by another process is not lost.
                let _edit = self.core.home.lock_config()?;
                let mut config = self.core.home.load_config()?;
                let Some(v) = config.vaults.iter_mut().find(|v| v.id == vault) else {
                    return Err(GatewayError::VaultNotFound(vault.to_owned()));
                };
                v.pdf_text = on;
                self.core.home.save_config(&config)?;
                Ok(on)
            })
            .into_inner()
    }

    /// `vaultgate tunnel setup` (docs/contract.md#the-chatgpt-tunnel): rotates the tunnel's credential and
    /// records the tunnel id and the `tunnel-client` found in `gateway.toml`, audited as one
    /// operator change. The API key file is the edge's to write.
    pub fn tunnel_setup(
        &self,
        operator: &Operator,
        tunnel_id: &str,
        command: Option<std::path::PathBuf>,
        grant: crate::tunnel::TunnelGrant,
    ) -> Result<inbox::Credential, GatewayError> {
        let args = serde_json::json!({
            "tunnelId": tunnel_id,
            "command": command.as_ref().map(|c| c.display().to_string()),
            "tier": grant.tier.as_str(),
            "vaults": grant.vaults,
            "approveInClient": grant.approve_in_client,
        });
        self.core
            .operator_call(operator, "tunnel_setup", &args, |_call| {
                let credential = self.rotate_tunnel_credential(operator, grant)?;
                // Held to the save: a change made meanwhile by another process is not lost.
                let _edit = self.core.home.lock_config()?;
                let mut config = self.core.home.load_config()?;
                config.tunnel.tunnel_id = Some(tunnel_id.to_owned());
                if let Some(c) = command {
                    config.tunnel.command = Some(c);
                }
                self.core.home.save_config(&config)?;
                Ok(credential)
            })
            .into_inner()
    }
}

/// Whether a vault entry opens as it did: only settings read per call (`pdf_text`) changed.
fn same_opening(a: &crate::home::VaultConfig, b: &crate::home::VaultConfig) -> bool {
    let plain = |v: &crate::home::VaultConfig| crate::home::VaultConfig {
        pdf_text: false,
        ..v.clone()
    };
    plain(a) == plain(b)
}

/// Opens the vaults `config` names, reusing the handle of each whose entry did not change.
pub(crate) fn open_vaults(
    config: &crate::home::Config,
    before: Option<&crate::core::Loaded>,
) -> Result<std::collections::BTreeMap<String, std::sync::Arc<crate::core::VaultHandle>>, GatewayError> {
    let mut vaults = std::collections::BTreeMap::new();
    for v in &config.vaults {
        let same = before.and_then(|b| {
            let old = b.config.vaults.iter().find(|o| o.id == v.id)?;
            same_opening(old, v)
                .then(|| b.vaults.get(&v.id).cloned())
                .flatten()
        });
        let handle = match same {
            Some(h) => h,
            None => {
                let layout = v.layout()?;
                let reader = vault::Vault::open(&v.path, layout).map_err(|e| {
                    GatewayError::Config(format!("vault '{}' at {}: {e}", v.id, v.path.display()))
                })?;
                std::sync::Arc::new(crate::core::VaultHandle {
                    id: v.id.clone(),
                    name: v.name.clone(),
                    reader,
                    group: Arc::default(),
                    lease: crate::storage::FolderLease::default(),
                    remote: v.remote.clone(),
                    checkout: v
                        .remote
                        .as_ref()
                        .and_then(|_| crate::checkout::Checkout::of(&v.path)),
                })
            }
        };
        vaults.insert(v.id.clone(), handle);
    }
    Ok(vaults)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_slugs() {
        assert_eq!(slug("My Notes (2024)"), "my-notes-2024");
        assert_eq!(slug("中文"), "vault");
        assert!(valid_id("a-b_9") && !valid_id("A") && !valid_id("") && !valid_id(&"a".repeat(65)));
    }
}
