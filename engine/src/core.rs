//! The service layer: every operation once, for the MCP transports and the CLI alike.
//! Authentication, capability checks, vault resolution, the call itself and its audit record.

use std::collections::BTreeMap;
use std::sync::Arc;

use audit::{AuditLog, Durability, Entry, Outcome};
use inbox::{Credential, State};
use policy::ErrorCode;
use serde::de::DeserializeOwned;
use serde_json::Value;
use vault::Vault;

use crate::call::{Audited, Call, ResultIds};
use crate::changes::VaultChanged;
use crate::cursor::{self, Binding, Position, ReadLimits};
use crate::error::GatewayError;
use crate::failpoints::Failpoints;
use crate::home::{Config, Home, SecretKey};

pub use crate::actors::{Actor, Caller, Operator, Surface, Transport};

/// One opened vault.
pub struct VaultHandle {
    pub id: String,
    pub name: String,
    pub(crate) reader: Vault,
    /// This process's queue of writes to the vault (group commit).
    pub(crate) group: Arc<crate::group::Group>,
    /// The right to write the vault's files (crate::storage::Lease).
    pub(crate) lease: crate::storage::FolderLease,
    /// A team vault's remote (docs/contract.md#team-mode): its notes change only by a push there.
    pub(crate) remote: Option<String>,
    /// A team vault's clone being checked out (crate::checkout::Checkout): a note read waits
    /// for it.
    pub(crate) checkout: Option<crate::checkout::Checkout>,
}

impl VaultHandle {
    /// Whether its notes live in a team's remote (docs/contract.md#team-mode).
    pub fn is_team(&self) -> bool {
        self.remote.is_some()
    }

    /// The note at `path`, whole (see [`VaultHandle::reading`]).
    pub(crate) fn read_note(&self, path: &str) -> Result<vault::ReadNote, crate::error::GatewayError> {
        let _checked_out = self.reading()?;
        Ok(self.reader.read_note(path)?)
    }

    /// Held while notes of a team vault's clone are read, so none is read half written
    /// (crate::checkout::Checkout); `VAULT_BUSY` past `checkout::READ_WAIT`. Never held across a
    /// sync of the clone (that waits for it), nor taken again while held.
    pub(crate) fn reading(&self) -> Result<Option<crate::checkout::Reading>, crate::error::GatewayError> {
        self.checkout.as_ref().map_or(Ok(None), |c| c.read_of(&self.id))
    }

    /// The vault's layout (notes, standards and inbox folders).
    pub fn layout(&self) -> &policy::Layout {
        self.reader.layout()
    }

    /// The vault's files as the write transaction reaches them (crate::storage::VaultBackend):
    /// the local folder.
    pub(crate) fn files(&self) -> Box<dyn crate::storage::VaultBackend + '_> {
        Box::new(crate::files::Files::of(self))
    }

    /// Where the vault's outside changes come from (crate::storage::ChangeFeed): its watcher.
    pub(crate) fn feed(&self) -> Box<dyn crate::storage::ChangeFeed + '_> {
        Box::new(crate::storage::FolderFeed {
            root: self.reader.fs().root(),
            quiet: std::time::Duration::from_millis(150),
        })
    }

    /// The right to write the vault's files (crate::storage::Lease): its write lock.
    pub(crate) fn lease(&self) -> crate::storage::FolderLeaseOn<'_> {
        crate::storage::FolderLeaseOn {
            lease: &self.lease,
            fs: self.reader.fs(),
        }
    }

    /// Where the vault's search index lives.
    pub fn index_file(&self) -> std::path::PathBuf {
        self.reader.index_file()
    }
}

/// One gateway process: the context every service shares (home, configuration, key, state
/// database, audit log, vaults) and the state each service keeps, handed to that service only.
/// Operations live on the services ([`Core::reads`], [`Core::proposals`], [`Core::writes`], …);
/// what is here is what they all need: opening, the audit append, vault resolution and the
/// audited call.
pub struct Core {
    pub home: Home,
    /// The configuration and the vaults it names, replaced whole when `gateway.toml` changes.
    pub(crate) loaded: std::sync::RwLock<Arc<Loaded>>,
    /// Serialises reloads, so one request opens a new vault once.
    reloading: std::sync::Mutex<()>,
    /// A core opened for configuration changes opens no vault, now or on reload.
    with_vaults: bool,
    pub(crate) secret: SecretKey,
    pub state: State,
    pub audit: Arc<AuditLog>,
    announcer: tokio::sync::broadcast::Sender<VaultChanged>,
    pub(crate) failpoints: Failpoints,
    /// The `git` vaults with git on are committed with (docs/contract.md#git-history).
    pub(crate) git: crate::git::Program,
    // Each service's own state, reachable only through its accessor.
    pub(crate) refusals: crate::refusals::Refusals,
    auth_cache: crate::authcache::AuthCache,
    asking: std::sync::Mutex<std::collections::HashSet<String>>,
    pdf_worker: std::sync::OnceLock<Arc<dyn crate::attachments::PdfWorker>>,
    pdf_slots: crate::attachments::Slots,
    own_writes: std::sync::Mutex<crate::changes::OwnWrites>,
    watching: crate::changes::Watching,
    /// This process as the owner of the jobs it records (crate::jobs), made on first use.
    pub(crate) jobs_owner: std::sync::OnceLock<crate::jobs::Owner>,
    /// A home in team mode: the team's credentials and audit chain (docs/contract.md#team-mode).
    pub(crate) team: Option<Arc<dyn crate::storage::TeamState>>,
    /// The team's vaults and settings, as last synced (crate::vaults::Settings::sync_team_vaults).
    pub(crate) team_vaults: std::sync::Mutex<crate::vaults::TeamView>,
    /// This gateway's applies to each team vault, led and grouped (crate::teamgroup).
    pub(crate) team_groups: crate::teamgroup::Gates,
}

/// `gateway.toml` as it was read, and the vaults it names, opened.
pub(crate) struct Loaded {
    pub(crate) config: Arc<Config>,
    pub(crate) vaults: BTreeMap<String, Arc<VaultHandle>>,
    /// What the file looked like when read: a save (a rename) or an edit changes it.
    pub(crate) stamp: Option<Stamp>,
}

/// Device, inode, length and modification time of `gateway.toml`.
pub(crate) type Stamp = (u64, u64, u64, i64, i64);

fn stamp(path: &std::path::Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

pub fn now_unix() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

pub fn rfc3339(t: time::OffsetDateTime) -> String {
    t.to_offset(time::UtcOffset::UTC)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

impl Core {
    /// Opens an existing home and every registered vault.
    pub fn open(home: Home) -> Result<Core, GatewayError> {
        Core::open_with(home, Failpoints::default())
    }

    /// As [`Core::open`], with test-only crash injection.
    pub fn open_with(home: Home, failpoints: Failpoints) -> Result<Core, GatewayError> {
        Core::open_parts(home, failpoints, true)
    }

    /// The home without its vaults: for configuration changes of the vault set
    /// ([`crate::vaults`]), which must work when a registered vault's folder is gone.
    pub fn open_for_configuration(home: Home) -> Result<Core, GatewayError> {
        Core::open_parts(home, Failpoints::default(), false)
    }

    fn open_parts(home: Home, failpoints: Failpoints, with_vaults: bool) -> Result<Core, GatewayError> {
        let stamp = stamp(&home.config_path());
        let config = home.load_config()?;
        let secret = home.load_secret()?;
        let state = State::open(&home.state_path())?;
        let audit = Arc::new(open_audit(&home, &state)?);
        let vaults = if with_vaults {
            crate::vaults::open_vaults(&config, None)?
        } else {
            BTreeMap::new()
        };
        let (changes, _) = tokio::sync::broadcast::channel(256);
        let refusals = crate::refusals::Refusals::new(
            audit.clone(),
            std::time::Duration::from_secs(config.limits.refusal_window_seconds),
        );
        Ok(Core {
            home,
            loaded: std::sync::RwLock::new(Arc::new(Loaded {
                config: Arc::new(config),
                vaults,
                stamp,
            })),
            reloading: std::sync::Mutex::new(()),
            with_vaults,
            secret,
            state,
            audit,
            refusals,
            announcer: changes,
            failpoints,
            pdf_worker: std::sync::OnceLock::new(),
            pdf_slots: crate::attachments::Slots::default(),
            own_writes: Default::default(),
            watching: Default::default(),
            jobs_owner: Default::default(),
            asking: Default::default(),
            git: Default::default(),
            auth_cache: Default::default(),
            team: None,
            team_vaults: Default::default(),
            team_groups: Default::default(),
        })
    }

    /// This core as a gateway of a team: credentials are the team's, read fresh by every
    /// request, and every record (aggregated refusals too) goes to the team's chain.
    pub fn with_team(mut self, team: Arc<dyn crate::storage::TeamState>) -> Core {
        let sink = team.clone();
        self.refusals = crate::refusals::Refusals::to(
            Arc::new(move |entry| sink.append_audit(entry).map(drop).map_err(|e| e.to_string())),
            std::time::Duration::from_secs(self.config().limits.refusal_window_seconds),
        );
        self.team = Some(team);
        self
    }

    pub fn team(&self) -> Option<&dyn crate::storage::TeamState> {
        self.team.as_deref()
    }

    /// The audience of this home's tokens: the team's id in team mode, else the home's id.
    pub fn audience(&self) -> Result<String, GatewayError> {
        match &self.team {
            Some(t) => t.team_id(),
            None => Ok(self.config().gateway_id.clone()),
        }
    }

    // ---- configuration ----------------------------------------------------------------------------

    /// The configuration as last read. Requests see a change to `gateway.toml` because each
    /// first calls [`Core::refresh`].
    pub fn config(&self) -> Arc<Config> {
        self.loaded().config.clone()
    }

    pub(crate) fn loaded(&self) -> Arc<Loaded> {
        match self.loaded.read() {
            Ok(l) => l.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Whether `gateway.toml` changed since it was read (one `stat`): cheap enough for an async
    /// worker, which then leaves the reload ([`Core::refresh`]) to a thread that may block.
    pub fn config_changed(&self) -> bool {
        let now = stamp(&self.home.config_path());
        now.is_some() && now != self.loaded().stamp
    }

    /// Reads `gateway.toml` again if it changed since it was read (one `stat` when it did not),
    /// so `vault add`, `remove`, `set-default` and settings reach a running server at its next
    /// request (docs/contract.md#the-command-line). A file that does not parse, or a vault that does not
    /// open, leaves the configuration as it was, logged once per change.
    pub fn refresh(&self) {
        if !self.config_changed() {
            return;
        }
        let _one = self.reloading.lock().unwrap_or_else(|p| p.into_inner());
        let before = self.loaded();
        let now = stamp(&self.home.config_path());
        if now.is_none() || now == before.stamp {
            return;
        }
        let reloaded = self.home.load_config().and_then(|mut config| {
            crate::vaults::team_overlay(self, &mut config)?;
            let vaults = if self.with_vaults {
                crate::vaults::open_vaults(&config, Some(&before))?
            } else {
                BTreeMap::new()
            };
            Ok((config, vaults))
        });
        let next = match reloaded {
            Ok((config, vaults)) => Loaded {
                config: Arc::new(config),
                vaults,
                stamp: now,
            },
            Err(e) => {
                tracing::warn!(error = %e, "gateway.toml changed but cannot be used; keeping the configuration read before");
                // Remembered, so a broken file is reported once, not at every request.
                Loaded {
                    config: before.config.clone(),
                    vaults: before.vaults.clone(),
                    stamp: now,
                }
            }
        };
        let added: Vec<Arc<VaultHandle>> = next
            .vaults
            .iter()
            .filter(|(id, h)| before.vaults.get(*id).is_none_or(|b| !Arc::ptr_eq(b, h)))
            .map(|(_, h)| h.clone())
            .collect();
        let removed: Vec<String> = before
            .vaults
            .keys()
            .filter(|id| !next.vaults.contains_key(*id))
            .cloned()
            .collect();
        if !added.is_empty() || !removed.is_empty() {
            tracing::info!(
                added = added.len(),
                removed = removed.len(),
                "gateway.toml changed; vaults reloaded"
            );
        }
        match self.loaded.write() {
            Ok(mut l) => *l = Arc::new(next),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(next),
        }
        self.changes().vaults_changed(&added, &removed);
    }

    // ---- the services ---------------------------------------------------------------------------

    /// Search, notes, tags, links, queries and the overview.
    pub fn reads(&self) -> crate::reading::Reads<'_> {
        crate::reading::Reads { core: self }
    }

    /// Authentication, refusal records and credential administration.
    pub fn credentials(&self) -> crate::credentials::Credentials<'_> {
        crate::credentials::Credentials {
            core: self,
            auth_cache: &self.auth_cache,
            refusals: &self.refusals,
        }
    }

    /// Proposing, listing, reading and rejecting proposals, and the inbox quotas.
    pub fn proposals(&self) -> crate::proposing::Proposals<'_> {
        crate::proposing::Proposals { core: self }
    }

    /// Where writes record their intents and commit (crate::storage::StateStore).
    pub(crate) fn store(&self) -> &dyn crate::storage::StateStore {
        &self.state
    }

    pub fn jobs(&self) -> crate::jobs::Jobs<'_> {
        crate::jobs::Jobs { core: self }
    }

    /// The write path: apply, the one journaled transaction, recovery and housekeeping.
    pub fn writes(&self) -> crate::apply::Writes<'_> {
        crate::apply::Writes { core: self }
    }

    /// Undo/redo, note history and the git change log.
    pub fn history(&self) -> crate::history::History<'_> {
        crate::history::History { core: self }
    }

    /// Two-phase challenges for critical operations.
    pub fn challenges(&self) -> crate::critical::Challenges<'_> {
        crate::critical::Challenges { core: self }
    }

    /// A person's yes inside the client (elicitation) and the sealed approvals.
    pub fn approvals(&self) -> crate::approval::Approvals<'_> {
        crate::approval::Approvals {
            core: self,
            asking: &self.asking,
        }
    }

    /// Attachments and their text (the PDF worker).
    pub fn attachments(&self) -> crate::attachments::Attachments<'_> {
        crate::attachments::Attachments {
            core: self,
            pdf_worker: &self.pdf_worker,
            pdf_slots: &self.pdf_slots,
        }
    }

    /// The review page's logins and sessions.
    pub fn review(&self) -> crate::review::ReviewSessions<'_> {
        crate::review::ReviewSessions { core: self }
    }

    /// Change detection: the watcher's view of edits made outside vaultgate.
    pub fn changes(&self) -> crate::changes::Changes<'_> {
        crate::changes::Changes {
            core: self,
            own_writes: &self.own_writes,
            watching: &self.watching,
        }
    }

    /// The operator's decisions from the CLI and the review page.
    pub fn decisions(&self) -> crate::operator::Decisions<'_> {
        crate::operator::Decisions { core: self }
    }

    /// Configuration changes: vaults, PDF text, the tunnel's credential.
    pub fn settings(&self) -> crate::vaults::Settings<'_> {
        crate::vaults::Settings { core: self }
    }

    /// Tells every connection of this process that a vault changed.
    pub fn announce(&self, change: VaultChanged) {
        // No receiver is fine: nobody is connected.
        let _ = self.announcer.send(change);
    }

    pub fn subscribe_changes(&self) -> tokio::sync::broadcast::Receiver<VaultChanged> {
        self.announcer.subscribe()
    }

    pub fn all_vaults(&self) -> Vec<Arc<VaultHandle>> {
        self.loaded().vaults.values().cloned().collect()
    }

    pub fn secret(&self) -> &SecretKey {
        &self.secret
    }

    /// Refuses, before anything changes, a mutating call whose record could not be appended
    /// (docs/contract.md#the-audit-log): the log is not the file this process opened, ends torn, or its disk is (almost)
    /// full. The append itself still decides; this keeps a full disk from half-doing a call.
    pub(crate) fn audit_preflight(&self) -> Result<(), GatewayError> {
        // SECURITY(T-AUDIT4): fail closed before the first change, not after it.
        if self.failpoints.fails("audit_append") {
            return Err(GatewayError::AuditUnavailable);
        }
        // The team's chain: its append (or the change's own commit) decides.
        if self.team.is_some() {
            return Ok(());
        }
        self.audit.check_appendable().map_err(|e| {
            tracing::error!(error = %e, "the audit log cannot take a record; the call is refused");
            GatewayError::AuditUnavailable
        })
    }

    /// Appends one record; the only way the engine writes to the audit log. Any failure is
    /// `AUDIT_UNAVAILABLE` (logged with its cause): the call that needed the record is refused.
    pub(crate) fn append_audit(&self, entry: Entry, durability: Durability) -> Result<u64, GatewayError> {
        self.append_audit_record(entry, durability).map(|h| h.seq)
    }

    /// As [`Core::append_audit`], returning the new head (seq and hash).
    pub(crate) fn append_audit_record(
        &self,
        entry: Entry,
        durability: Durability,
    ) -> Result<inbox::AuditHead, GatewayError> {
        self.append_audit_with(entry, durability, false)
    }

    /// As [`Core::append_audit`], for a call that skipped [`Core::audit_preflight`]: the append
    /// makes its free-space check (docs/contract.md#the-audit-log: no room, no record, no answer).
    pub(crate) fn append_audit_reserving(
        &self,
        entry: Entry,
        durability: Durability,
    ) -> Result<u64, GatewayError> {
        self.append_audit_with(entry, durability, true).map(|h| h.seq)
    }

    fn append_audit_with(
        &self,
        entry: Entry,
        durability: Durability,
        reserve: bool,
    ) -> Result<inbox::AuditHead, GatewayError> {
        // Test-only: the log refuses appends as a full disk would.
        if self.failpoints.fails("audit_append") {
            return Err(GatewayError::AuditUnavailable);
        }
        // SECURITY(T-TEAM5): in team mode every record is the team's; no answer without it.
        if let Some(team) = &self.team {
            let rec = team.append_audit(entry)?;
            return Ok(inbox::AuditHead {
                seq: rec.seq,
                hash: rec.hash,
            });
        }
        let now = time::OffsetDateTime::now_utc();
        let appended = if reserve {
            self.audit.append_reserving(entry, now, durability)
        } else {
            self.audit.append(entry, now, durability)
        };
        match appended {
            Ok(rec) => Ok(inbox::AuditHead {
                seq: rec.seq,
                hash: rec.hash,
            }),
            Err(e) => {
                tracing::error!(error = %e, "audit append failed");
                Err(GatewayError::AuditUnavailable)
            }
        }
    }

    /// Notes a head this process wrote in the state database, so a later replaced log is
    /// noticed (docs/contract.md#the-audit-log). Best effort: the head only guards against a lost log, and the next
    /// mutating commit or start notes it again.
    pub(crate) fn note_head(&self, head: &inbox::AuditHead) {
        // The team's chain has its own head, in the team's database.
        if self.team.is_some() {
            return;
        }
        if let Err(e) = self.state.note_audit_head(head) {
            tracing::warn!(error = %e, "noting the audit head failed");
        }
    }

    /// Runs one tool call for an authenticated caller: the capability check of the tool table,
    /// then `op`, then exactly one audit record. The edge parses the arguments inside `op`, so a
    /// malformed call is recorded like any other refusal. A call whose transaction wrote its own
    /// record (a committed or rolled-back write) is not recorded again; a call whose record
    /// cannot be written answers `AUDIT_UNAVAILABLE` (docs/contract.md#the-audit-log).
    pub fn call<T: serde::Serialize>(
        &self,
        caller: &Caller,
        spec: &'static policy::tools::ToolSpec,
        args: &Value,
        op: impl FnOnce(&mut Call<'_>) -> Result<T, GatewayError>,
    ) -> Audited<Result<Value, GatewayError>> {
        crate::call::tool_call(self, None, caller, spec, args, op)
    }

    /// [`Core::call`] for a call the team's gateway `received_by` received and handed to this
    /// one, which holds the vault's lease (docs/contract.md#team-lease "One applier at a time").
    pub fn call_handed<T: serde::Serialize>(
        &self,
        received_by: &str,
        caller: &Caller,
        spec: &'static policy::tools::ToolSpec,
        args: &Value,
        op: impl FnOnce(&mut Call<'_>) -> Result<T, GatewayError>,
    ) -> Audited<Result<Value, GatewayError>> {
        crate::call::tool_call(self, Some(received_by), caller, spec, args, op)
    }

    /// Runs one CLI operation as the OS user, recorded exactly like a tool call (event `cli`).
    pub fn cli_call<T: ResultIds>(
        &self,
        user: &str,
        tool: &'static str,
        args: &Value,
        op: impl FnOnce(&mut Call<'_>) -> Result<T, GatewayError>,
    ) -> Audited<Result<T, GatewayError>> {
        self.operator_call(&Operator::cli(user), tool, args, op)
    }

    /// Runs one operator operation (CLI or review page), recorded exactly like a tool call with
    /// the surface's event (`cli`, `review`).
    pub fn operator_call<T: ResultIds>(
        &self,
        operator: &Operator,
        tool: &'static str,
        args: &Value,
        op: impl FnOnce(&mut Call<'_>) -> Result<T, GatewayError>,
    ) -> Audited<Result<T, GatewayError>> {
        // A blocking thread: the review page's session check or a CLI process; either way the
        // configuration is read as it is now.
        self.refresh();
        let actor = || Actor::Operator(operator.clone());
        // The operator's arguments are bounded exactly like a tool's (docs/contract.md#limits-and-pagination).
        if let Err(e) = crate::limits::check_args(tool, args, &self.config().limits) {
            return Call::new(self, actor(), tool, args, operator.event()).finish(Err(e), Durability::Sync);
        }
        let mut call = Call::new(self, actor(), tool, args, operator.event());
        let mutating = policy::tools::find(tool).is_none_or(|s| s.is_mutating());
        let result = if mutating {
            self.audit_preflight().and_then(|()| op(&mut call))
        } else {
            op(&mut call)
        };
        call.finish(result, Durability::Sync)
    }

    /// A read that is not a tool call (resources), answered only with its record: a record that
    /// cannot be written turns the answer into `AUDIT_UNAVAILABLE` (docs/contract.md#the-audit-log).
    pub fn record_read<T>(
        &self,
        caller: &Caller,
        event: &str,
        target: &str,
        result: Result<T, GatewayError>,
    ) -> Result<T, GatewayError> {
        let (outcome, code) = match &result {
            Ok(_) => (Outcome::Ok, None),
            Err(e) => (outcome_for(e), Some(e.code().as_str().to_owned())),
        };
        let durability = if result.is_ok() {
            Durability::Flush
        } else {
            Durability::Sync
        };
        let appended = self.append_audit(
            Entry {
                event: event.into(),
                actor: caller.actor(),
                vault: None,
                tool: None,
                target: Some(target.to_owned()),
                proposal_id: None,
                challenge_id: None,
                outcome,
                code,
                args_hash: None,
                count: None,
                approval: None,
                gateway: None,
            },
            durability,
        );
        match appended {
            Ok(_) => result,
            // SECURITY(T-AUDIT4): no record, no answer.
            Err(e) => {
                tracing::error!(error = %e, "audit append failed; the read is refused");
                Err(GatewayError::AuditUnavailable)
            }
        }
    }

    /// The vaults `cred` may see, in id order.
    pub(crate) fn visible(&self, cred: &Credential) -> Vec<Arc<VaultHandle>> {
        self.loaded()
            .vaults
            .values()
            .filter(|v| cred.may_see_vault(&v.id))
            .cloned()
            .collect()
    }

    /// docs/contract.md#the-mcp-surface: explicit id, else the only visible vault, else the default; a vault outside the
    /// credential's scope is indistinguishable from one that does not exist.
    pub fn resolve_vault(
        &self,
        cred: &Credential,
        requested: Option<&str>,
    ) -> Result<Arc<VaultHandle>, GatewayError> {
        let loaded = self.loaded();
        if let Some(id) = requested {
            return loaded
                .vaults
                .get(id)
                .filter(|v| cred.may_see_vault(&v.id))
                .cloned()
                .ok_or_else(|| GatewayError::VaultNotFound(id.to_owned()));
        }
        let mut visible = loaded.vaults.values().filter(|v| cred.may_see_vault(&v.id));
        let first = visible.next();
        if let Some(only) = first
            && visible.next().is_none()
        {
            return Ok(only.clone());
        }
        if let Some(default) = loaded.config.default_vault.as_deref()
            && let Some(v) = loaded.vaults.get(default).filter(|v| cred.may_see_vault(&v.id))
        {
            return Ok(v.clone());
        }
        if first.is_none() {
            return Err(GatewayError::VaultNotFound("(none visible)".into()));
        }
        Err(GatewayError::VaultTargetRequired)
    }

    /// The CLI's vault: explicit id, else the default, else the only one.
    pub fn vault_for_cli(&self, requested: Option<&str>) -> Result<Arc<VaultHandle>, GatewayError> {
        let loaded = self.loaded();
        if let Some(id) = requested {
            return loaded
                .vaults
                .get(id)
                .cloned()
                .ok_or_else(|| GatewayError::VaultNotFound(id.to_owned()));
        }
        if let Some(v) = loaded
            .config
            .default_vault
            .as_deref()
            .and_then(|d| loaded.vaults.get(d))
        {
            return Ok(v.clone());
        }
        let mut all = loaded.vaults.values();
        match (all.next(), all.next()) {
            (Some(only), None) => Ok(only.clone()),
            (None, _) => Err(GatewayError::VaultNotFound(
                "(no vault registered; vaultgate vault add PATH)".into(),
            )),
            _ => Err(GatewayError::VaultTargetRequired),
        }
    }

    /// The read limits (docs/contract.md#limits-and-pagination), from `gateway.toml [limits]`. The output cap keeps 64 KiB
    /// for the JSON-RPC envelope, so a result at the cap still fits a client's 16 MiB message limit.
    pub fn read_limits(&self) -> ReadLimits {
        const ENVELOPE: u64 = 64 * 1024;
        let config = self.config();
        let l = &config.limits;
        ReadLimits {
            max_output_bytes: usize::try_from(l.max_output_bytes.saturating_sub(ENVELOPE))
                .unwrap_or(usize::MAX),
            search_budget: std::time::Duration::from_millis(l.search_budget_ms.max(1)),
        }
    }

    /// The position a call's `cursor` names (`None`: the first page). A search cursor made
    /// before the vault last moved is refused.
    pub(crate) fn open_cursor(
        &self,
        v: &VaultHandle,
        page: &PageCall<'_>,
        cursor: Option<&str>,
    ) -> Result<Option<Position>, GatewayError> {
        let Some(c) = cursor else { return Ok(None) };
        let pos = cursor::open(&self.secret, &page.binding(&v.id), c)?;
        if matches!(pos, Position::Search { .. }) {
            cursor::check_revision(&pos, self.state.revision(&v.id)?)?;
        }
        Ok(Some(pos))
    }

    pub(crate) fn seal(&self, v: &VaultHandle, page: &PageCall<'_>, pos: &Position) -> String {
        cursor::seal(&self.secret, &page.binding(&v.id), pos)
    }
}

/// A change committed only with its record: the record's failure is the answer as it is; the
/// database's is a state error.
pub(crate) fn recorded(e: inbox::Recorded<GatewayError>) -> GatewayError {
    match e {
        inbox::Recorded::State(e) => e.into(),
        inbox::Recorded::Record(e) => e,
    }
}

/// Opens the home's audit log for a new process (docs/contract.md#the-audit-log): refuses when the state database has
/// seen records the log no longer holds (never a silent restart), drops a torn last line with one
/// `audit.repaired` record, and notes the head.
fn open_audit(home: &Home, state: &State) -> Result<AuditLog, GatewayError> {
    let path = home.audit_path();
    // SECURITY(T-AUDIT7): a missing or replaced log is an operator's decision, not a new chain.
    if let Some(problem) = crate::audit_log::head_status(&path, state)?.problem() {
        return Err(GatewayError::AuditBroken(problem));
    }
    let audit = AuditLog::open(&path)?;
    // SECURITY(T-AUDIT5): a torn tail blocks every append; the next process repairs it.
    let repaired = audit.repair_on_open(time::OffsetDateTime::now_utc(), |d| {
        let mut e = Entry::new(
            "audit.repaired",
            audit::Actor::Cli {
                user: "vaultgate".into(),
            },
            Outcome::Ok,
        );
        e.target = Some(format!("offset:{} len:{} sha256:{}", d.offset, d.len, d.sha256));
        e.count = Some(d.len);
        e
    });
    match repaired {
        Ok(Some((d, _))) => {
            tracing::warn!(
                offset = d.offset,
                len = d.len,
                "dropped a torn last line of the audit log"
            );
        }
        Ok(None) => {}
        // Appends stay refused (fail closed); the process still starts, to answer with that.
        Err(e) => tracing::error!(error = %e, "repairing the audit log's torn tail failed"),
    }
    match audit::tail(&path, 1) {
        Ok(mut last) => {
            if let Some(r) = last.pop()
                && let Err(e) = state.note_audit_head(&inbox::AuditHead {
                    seq: r.seq,
                    hash: r.hash,
                })
            {
                tracing::warn!(error = %e, "noting the audit head failed");
            }
        }
        Err(e) => tracing::warn!(error = %e, "reading the audit head failed"),
    }
    Ok(audit)
}

/// The call a page belongs to: its tool, its arguments as sent and the credential (what a
/// cursor is sealed to, with the vault it resolved to).
#[derive(Debug, Clone, Copy)]
pub struct PageCall<'a> {
    pub tool: &'a str,
    pub args: &'a Value,
    pub credential: &'a str,
}

impl<'a> PageCall<'a> {
    fn binding<'b>(&'b self, vault: &'b str) -> Binding<'b> {
        Binding {
            tool: self.tool,
            vault,
            credential: self.credential,
            args: self.args,
        }
    }
}

/// A cursor sealed for another tool of the same arguments cannot happen (the tool is sealed in),
/// but a decoded position of the wrong kind is refused like any forged cursor.
pub(crate) fn not_this_cursor() -> GatewayError {
    GatewayError::InvalidArgument("cursor is not valid for this call".into())
}

pub(crate) fn outcome_for(e: &GatewayError) -> Outcome {
    match e.code() {
        ErrorCode::INTERNAL => Outcome::Error,
        _ => Outcome::Denied,
    }
}

/// Parses tool arguments strictly: unknown fields and wrong types are `INVALID_ARGUMENT`.
pub fn parse<T: DeserializeOwned>(args: &Value) -> Result<T, GatewayError> {
    T::deserialize(args).map_err(|e| GatewayError::InvalidArgument(format!("bad arguments: {e}")))
}

pub(crate) fn to_value<T: serde::Serialize>(v: T) -> Result<Value, GatewayError> {
    serde_json::to_value(v).map_err(|e| GatewayError::Internal(format!("serializing a result: {e}")))
}
