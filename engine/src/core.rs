//! The service layer: every operation once, for the MCP transports and the CLI alike.
//! Authentication, capability checks, vault resolution, the call itself and its audit record.

use std::collections::BTreeMap;
use std::sync::Arc;

use audit::{AuditLog, Durability, Entry, Outcome};
use inbox::{Credential, State};
use policy::{ErrorCode, Tier};
use serde::de::DeserializeOwned;
use serde_json::Value;
use vault::Vault;

use crate::api::{HistoryTops, IndexStatus, OverviewOut, VaultItem, VaultListOut};
use crate::auth::{self, Token};
use crate::call::{Audited, Call, ResultIds};
use crate::changes::VaultChanged;
use crate::cursor::{self, Binding, Position, ReadLimits};
use crate::error::GatewayError;
use crate::failpoints::Failpoints;
use crate::home::{Config, Home, SecretKey};

/// How a caller reached the gateway (recorded in the audit actor).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Stdio,
    Http,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Stdio => "stdio",
            Transport::Http => "http",
        }
    }
}

/// An authenticated MCP caller, valid for one request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub credential: Credential,
    pub transport: Transport,
}

/// Where the operator acts from: the terminal or the review page (docs/contract.md#the-command-line, docs/contract.md#the-review-page-and-in-client-approval).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    Cli,
    Review,
}

/// The OS user who owns the home, acting with full authority over its vaults from one surface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operator {
    pub surface: Surface,
    pub user: String,
}

impl Operator {
    pub fn cli(user: &str) -> Operator {
        Operator {
            surface: Surface::Cli,
            user: user.to_owned(),
        }
    }

    pub fn review(user: &str) -> Operator {
        Operator {
            surface: Surface::Review,
            user: user.to_owned(),
        }
    }

    /// `cli:<user>` or `review:<user>`: the audit actor, `createdBy` and idempotency namespace.
    pub fn label(&self) -> String {
        match self.surface {
            Surface::Cli => format!("cli:{}", self.user),
            Surface::Review => format!("review:{}", self.user),
        }
    }

    /// The audit event of this surface's operations.
    pub fn event(&self) -> &'static str {
        match self.surface {
            Surface::Cli => "cli",
            Surface::Review => "review",
        }
    }

    pub fn audit_actor(&self) -> audit::Actor {
        let user = self.user.clone();
        match self.surface {
            Surface::Cli => audit::Actor::Cli { user },
            Surface::Review => audit::Actor::Review { user },
        }
    }
}

/// Who performs an operation: an authenticated MCP caller, or the operator (CLI or review page).
#[derive(Debug, Clone)]
pub enum Actor {
    Caller(Caller),
    Operator(Operator),
}

impl Actor {
    /// The idempotency-key namespace and the `createdBy` id.
    pub fn principal_id(&self) -> String {
        match self {
            Actor::Caller(c) => c.credential.id.as_str().to_owned(),
            Actor::Operator(o) => o.label(),
        }
    }

    /// A short human label (`decided_by`, `_applied.jsonl`).
    pub fn label(&self) -> String {
        match self {
            Actor::Caller(c) => format!("{} ({})", c.credential.name, c.credential.id.as_str()),
            Actor::Operator(o) => o.label(),
        }
    }

    pub fn audit_actor(&self) -> audit::Actor {
        match self {
            Actor::Caller(c) => c.actor(),
            Actor::Operator(o) => o.audit_actor(),
        }
    }
}

impl Caller {
    fn actor(&self) -> audit::Actor {
        audit::Actor::Credential {
            credential_id: self.credential.id.as_str().to_owned(),
            name: self.credential.name.clone(),
            tier: self.credential.tier.as_str().to_owned(),
            transport: self.transport.as_str().to_owned(),
        }
    }
}

/// One opened vault.
pub struct VaultHandle {
    pub id: String,
    pub name: String,
    pub(crate) reader: Vault,
}

impl VaultHandle {
    /// The vault's layout (notes, standards and inbox folders).
    pub fn layout(&self) -> &policy::Layout {
        self.reader.layout()
    }

    /// Where the vault's search index lives.
    pub fn index_file(&self) -> std::path::PathBuf {
        self.reader.index_file()
    }
}

/// Shared state of one gateway process.
pub struct Core {
    pub home: Home,
    pub config: Config,
    secret: SecretKey,
    pub state: State,
    pub audit: Arc<AuditLog>,
    /// Unauthenticated refusals, aggregated (docs/contract.md#the-audit-log).
    refusals: crate::refusals::Refusals,
    vaults: BTreeMap<String, Arc<VaultHandle>>,
    changes: tokio::sync::broadcast::Sender<VaultChanged>,
    pub(crate) failpoints: Failpoints,
    /// The edge's PDF worker (`read_attachment_text`), and the bound on its runs at once.
    pub(crate) pdf_worker: std::sync::OnceLock<Arc<dyn crate::attachments::PdfWorker>>,
    pub(crate) pdf_slots: crate::attachments::Slots,
    pub(crate) own_writes: std::sync::Mutex<crate::changes::OwnWrites>,
    /// Credentials with an in-client approval question waiting for a person (docs/contract.md#the-review-page-and-in-client-approval).
    pub(crate) asking: std::sync::Mutex<std::collections::HashSet<String>>,
    /// The `git` vaults with git on are committed with (docs/contract.md#git-history).
    pub(crate) git: crate::git::Program,
    /// Verified tokens and credential rows, checked against the generation on every request.
    auth_cache: crate::authcache::AuthCache,
}

/// A credential's name (it reaches audit records, git authors and a reviewer's screen): 1 to
/// 128 bytes, not blank, no control characters.
pub fn check_credential_name(s: &str) -> Result<(), String> {
    if s.trim().is_empty() || s.len() > 128 {
        return Err("a name is 1 to 128 bytes, not blank".into());
    }
    if s.chars().any(char::is_control) {
        return Err("a name may not hold control characters".into());
    }
    Ok(())
}

/// Every credential of the home, for `token list` (no vault is opened).
pub fn list_credentials(home: &Home) -> Result<Vec<Credential>, GatewayError> {
    Ok(State::open(&home.state_path())?.list_credentials()?)
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
        let config = home.load_config()?;
        let secret = home.load_secret()?;
        let state = State::open(&home.state_path())?;
        let audit = Arc::new(open_audit(&home, &state)?);
        let mut vaults = BTreeMap::new();
        for v in config.vaults.iter().filter(|_| with_vaults) {
            let layout = v.layout()?;
            let reader = Vault::open(&v.path, layout).map_err(|e| {
                GatewayError::Config(format!("vault '{}' at {}: {e}", v.id, v.path.display()))
            })?;
            vaults.insert(
                v.id.clone(),
                Arc::new(VaultHandle {
                    id: v.id.clone(),
                    name: v.name.clone(),
                    reader,
                }),
            );
        }
        let (changes, _) = tokio::sync::broadcast::channel(256);
        let refusals = crate::refusals::Refusals::new(
            audit.clone(),
            std::time::Duration::from_secs(config.limits.refusal_window_seconds),
        );
        Ok(Core {
            home,
            config,
            secret,
            state,
            audit,
            refusals,
            vaults,
            changes,
            failpoints,
            pdf_worker: std::sync::OnceLock::new(),
            pdf_slots: crate::attachments::Slots::default(),
            own_writes: Default::default(),
            asking: Default::default(),
            git: Default::default(),
            auth_cache: Default::default(),
        })
    }

    /// Tells every connection of this process that a vault changed.
    pub fn announce(&self, change: VaultChanged) {
        // No receiver is fine: nobody is connected.
        let _ = self.changes.send(change);
    }

    pub fn subscribe_changes(&self) -> tokio::sync::broadcast::Receiver<VaultChanged> {
        self.changes.subscribe()
    }

    pub fn all_vaults(&self) -> Vec<Arc<VaultHandle>> {
        self.vaults.values().cloned().collect()
    }

    pub fn secret(&self) -> &SecretKey {
        &self.secret
    }

    // ---- authentication ---------------------------------------------------------------------

    /// Verifies the token and reads the credential fresh (its row, or the row kept from an
    /// earlier request while the credentials' generation has not moved): revocation, expiry and
    /// tier changes apply to the very next call. Refusals are audited (aggregated, docs/contract.md#the-audit-log); one whose record
    /// cannot be written answers `AUDIT_UNAVAILABLE`.
    pub fn authenticate(&self, token: &Token, transport: Transport) -> Result<Caller, GatewayError> {
        self.authenticate_from(token, transport, None)
    }

    /// [`Core::authenticate`] for a request from `remote` (the peer address, HTTP).
    pub fn authenticate_from(
        &self,
        token: &Token,
        transport: Transport,
        remote: Option<std::net::IpAddr>,
    ) -> Result<Caller, GatewayError> {
        let result = self.authenticate_inner(token, transport);
        if let Err(e) = &result {
            self.record_unauthenticated(transport, remote, e)?;
        }
        result
    }

    /// [`Core::authenticate`] when it needs no write: the token verified before, the row from the
    /// cache or one read, nothing to record. `None` when the answer is a refusal (its record must
    /// be written) or the credential's last use is due to be noted: then call
    /// [`Core::authenticate_from`], on a thread that may block. Cheap enough to run on an async
    /// worker: memory, and one read of the credentials' generation.
    pub fn authenticate_without_writing(&self, token: &Token, transport: Transport) -> Option<Caller> {
        match self.check_credential(token, transport) {
            Ok((caller, false)) => Some(caller),
            _ => None,
        }
    }

    fn authenticate_inner(&self, token: &Token, transport: Transport) -> Result<Caller, GatewayError> {
        let (caller, touch) = self.check_credential(token, transport)?;
        // Last use to the minute (the Credentials page): the row was read anyway, so at most
        // one write a minute per credential, never one per request.
        if touch && let Err(e) = self.state.touch_credential(&caller.credential.id, now_unix()) {
            tracing::warn!(error = %e, "noting a credential's last use failed");
        }
        Ok(caller)
    }

    /// The caller a token names, checked fresh, and whether its last use is due to be noted.
    fn check_credential(&self, token: &Token, transport: Transport) -> Result<(Caller, bool), GatewayError> {
        let now = now_unix();
        let claims = self
            .auth_cache
            .claims(&self.secret, &self.config.gateway_id, token.expose(), now)?;
        // SECURITY(T-AUTH3): the row as the table holds it now (the generation is read on every
        // request; a cached row is used only while it has not moved).
        let credential = self
            .auth_cache
            .credential(&self.state, &claims.sub)?
            .ok_or(GatewayError::Unauthorized("unknown credential"))?;
        // SECURITY(T-AUTH2): a token names one issuance; a re-issued or forged jti is refused.
        if credential.jti != claims.jti {
            return Err(GatewayError::Unauthorized("token superseded"));
        }
        if credential.is_revoked() {
            return Err(GatewayError::CredentialRevoked);
        }
        if credential.is_expired(now) {
            return Err(GatewayError::CredentialExpired);
        }
        let touch = credential
            .last_used_at
            .is_none_or(|t| now.saturating_sub(t) >= 60);
        Ok((
            Caller {
                credential,
                transport,
            },
            touch,
        ))
    }

    /// Audits a refusal decided before a credential was known (a missing token, a bad Origin).
    /// `Err(AUDIT_UNAVAILABLE)` when its record had to be written and could not be: answer that.
    pub fn record_auth_refusal(&self, transport: Transport, e: &GatewayError) -> Result<(), GatewayError> {
        self.record_unauthenticated(transport, None, e)
    }

    /// SECURITY(T-AUDIT8): refusals of HTTP requests without a valid credential are aggregated: at
    /// most one record per window (`[limits] refusal_window_seconds`) per code, transport and
    /// remote, with a `count`, so a flood cannot fill the disk. The first of a window is written
    /// before the answer; the rest are counted and written when the window ends or at shutdown.
    pub fn record_unauthenticated(
        &self,
        transport: Transport,
        remote: Option<std::net::IpAddr>,
        e: &GatewayError,
    ) -> Result<(), GatewayError> {
        // A stdio server is the child of one local client and has no remote to flood it from:
        // each of its refusals is recorded on its own.
        if transport == Transport::Stdio {
            let entry = crate::refusals::refusal_entry(
                &crate::refusals::RefusalKey {
                    code: e.code().as_str().to_owned(),
                    transport: transport.as_str(),
                    remote: "local".to_owned(),
                },
                1,
            );
            return self.append_audit(entry, Durability::Sync).map(|_| ());
        }
        let key = crate::refusals::RefusalKey {
            code: e.code().as_str().to_owned(),
            transport: transport.as_str(),
            remote: remote.map_or_else(|| "local".to_owned(), |ip| ip.to_string()),
        };
        match self.refusals.note(key, crate::refusals::refusal_entry) {
            crate::refusals::Noted::Counted => Ok(()),
            crate::refusals::Noted::Write(entry) => self.append_audit(*entry, Durability::Sync).map(|_| ()),
        }
    }

    /// Audits a refusal of an authenticated request decided outside a tool call (an HTTP
    /// session owned by another credential, a body over the limit). `Err(AUDIT_UNAVAILABLE)`
    /// when its record cannot be written: answer that instead.
    pub fn record_caller_refusal(&self, caller: &Caller, e: &GatewayError) -> Result<(), GatewayError> {
        let mut entry = Entry::new("http.refused", caller.actor(), outcome_for(e));
        entry.code = Some(e.code().as_str().to_owned());
        self.append_audit(entry, Durability::Sync).map(|_| ())
    }

    /// Writes every aggregated refusal still counted (a clean shutdown; also done on drop).
    pub fn flush_refusals(&self) {
        self.refusals.flush_all();
    }

    /// Refuses, before anything changes, a mutating call whose record could not be appended
    /// (docs/contract.md#the-audit-log): the log is not the file this process opened, ends torn, or its disk is (almost)
    /// full. The append itself still decides; this keeps a full disk from half-doing a call.
    pub(crate) fn audit_preflight(&self) -> Result<(), GatewayError> {
        // SECURITY(T-AUDIT4): fail closed before the first change, not after it.
        if self.failpoints.fails("audit_append") {
            return Err(GatewayError::AuditUnavailable);
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
        if let Err(e) = self.state.note_audit_head(head) {
            tracing::warn!(error = %e, "noting the audit head failed");
        }
    }

    // ---- tool calls ----------------------------------------------------------------------------

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
        // Bounds first (docs/contract.md#limits-and-pagination): an argument over a limit is refused, and recorded, before
        // anything else runs.
        if let Err(e) = crate::limits::check_args(spec.name, args, &self.config.limits) {
            return Call::new(self, Actor::Caller(caller.clone()), spec.name, args, "tool_call")
                .finish(Err(e), Durability::Sync);
        }
        let mut call = Call::new(self, Actor::Caller(caller.clone()), spec.name, args, "tool_call");
        // docs/contract.md#proposals: a tier that cannot apply at all is refused before any state is read, unless
        // a person's approval in the client may lift it one step (docs/contract.md#the-review-page-and-in-client-approval).
        let result = if spec.allowed_for(caller.credential.tier, caller.credential.approve_in_client) {
            // Reads too: a line written into the last free bytes could be cut short, so every
            // call is refused while the log's disk is (almost) full, not only the unlucky one. A
            // read changes nothing, so its record makes the check (one lock, not two).
            if spec.is_mutating() {
                self.audit_preflight()
                    .and_then(|()| op(&mut call))
                    .and_then(to_value)
            } else {
                call.check_space_at_record();
                op(&mut call).and_then(to_value)
            }
        } else {
            Err(GatewayError::CapabilityDenied(format!(
                "the '{}' tier may not call {}; ask the vault owner for a higher tier",
                caller.credential.tier, spec.name
            )))
        };
        // Reads are flushed; refusals and mutations are made durable before the answer.
        let durability = if spec.is_mutating() || result.is_err() {
            Durability::Sync
        } else {
            Durability::Flush
        };
        call.finish(result, durability)
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
        let actor = || Actor::Operator(operator.clone());
        // The operator's arguments are bounded exactly like a tool's (docs/contract.md#limits-and-pagination).
        if let Err(e) = crate::limits::check_args(tool, args, &self.config.limits) {
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

    // ---- vaults ------------------------------------------------------------------------------

    fn visible<'a>(&'a self, cred: &'a Credential) -> impl Iterator<Item = &'a Arc<VaultHandle>> + 'a {
        self.vaults.values().filter(move |v| cred.may_see_vault(&v.id))
    }

    /// docs/contract.md#the-mcp-surface: explicit id, else the only visible vault, else the default; a vault outside the
    /// credential's scope is indistinguishable from one that does not exist.
    pub fn resolve_vault(
        &self,
        cred: &Credential,
        requested: Option<&str>,
    ) -> Result<Arc<VaultHandle>, GatewayError> {
        if let Some(id) = requested {
            return self
                .vaults
                .get(id)
                .filter(|v| cred.may_see_vault(&v.id))
                .cloned()
                .ok_or_else(|| GatewayError::VaultNotFound(id.to_owned()));
        }
        let mut visible = self.visible(cred);
        let first = visible.next();
        if let Some(only) = first
            && visible.next().is_none()
        {
            return Ok(only.clone());
        }
        if let Some(default) = self.config.default_vault.as_deref()
            && let Some(v) = self.vaults.get(default).filter(|v| cred.may_see_vault(&v.id))
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
        if let Some(id) = requested {
            return self
                .vaults
                .get(id)
                .cloned()
                .ok_or_else(|| GatewayError::VaultNotFound(id.to_owned()));
        }
        if let Some(v) = self
            .config
            .default_vault
            .as_deref()
            .and_then(|d| self.vaults.get(d))
        {
            return Ok(v.clone());
        }
        match self.vaults.len() {
            1 => Ok(self
                .vaults
                .values()
                .next()
                .cloned()
                .ok_or(GatewayError::VaultTargetRequired)?),
            0 => Err(GatewayError::VaultNotFound(
                "(no vault registered; vaultgate vault add PATH)".into(),
            )),
            _ => Err(GatewayError::VaultTargetRequired),
        }
    }

    // ---- reads (the vault answers; the engine keeps the edge from touching it) -----------------

    /// The read limits (docs/contract.md#limits-and-pagination), from `gateway.toml [limits]`. The output cap keeps 64 KiB
    /// for the JSON-RPC envelope, so a result at the cap still fits a client's 16 MiB message limit.
    pub fn read_limits(&self) -> ReadLimits {
        const ENVELOPE: u64 = 64 * 1024;
        let l = &self.config.limits;
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

    /// The search state a cursor carries, and the revision the next cursor is made at.
    fn search_from(
        &self,
        v: &VaultHandle,
        page: &PageCall<'_>,
        cursor: Option<&str>,
    ) -> Result<(vault::SearchPage, u64), GatewayError> {
        // Read before searching: a change during the search makes the next cursor stale, never
        // a stale cursor look fresh.
        let revision = self.state.revision(&v.id)?;
        let from = match self.open_cursor(v, page, cursor)? {
            None => vault::SearchPos::default(),
            Some(Position::Search { pos, .. }) => pos,
            Some(_) => return Err(not_this_cursor()),
        };
        Ok((
            vault::SearchPage {
                from,
                budget: Some(self.read_limits().search_budget),
            },
            revision,
        ))
    }

    pub fn search_knowledge(
        &self,
        v: &VaultHandle,
        page: &PageCall<'_>,
        query: &str,
        tags: &[String],
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<vault::KnowledgeHits, GatewayError> {
        let (from, revision) = self.search_from(v, page, cursor)?;
        let (mut out, next) = v.reader.search_knowledge_page(query, tags, limit, &from)?;
        out.next_cursor = next.map(|pos| self.seal(v, page, &Position::Search { revision, pos }));
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn search_content(
        &self,
        v: &VaultHandle,
        page: &PageCall<'_>,
        query: String,
        limit: Option<u32>,
        tags: Vec<String>,
        path_prefix: Option<String>,
        cursor: Option<&str>,
    ) -> Result<vault::ContentHits, GatewayError> {
        let (from, revision) = self.search_from(v, page, cursor)?;
        let (mut out, next) = v.reader.search_content_page(
            &vault::ContentQuery {
                query,
                limit,
                tags,
                path_prefix,
            },
            &from,
        )?;
        out.next_cursor = next.map(|pos| self.seal(v, page, &Position::Search { revision, pos }));
        Ok(out)
    }

    /// `vaultgate index`: brings the vault's search index up to date (or rebuilds it), reporting
    /// progress as (done, total).
    pub fn refresh_index(
        &self,
        v: &VaultHandle,
        rebuild: bool,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<vault::SyncReport, GatewayError> {
        v.reader
            .refresh_index(rebuild, progress)
            .map_err(|e| GatewayError::Internal(format!("indexing vault '{}': {e}", v.id)))
    }

    /// A standards note's text (the `vaultgate://standards/` resource); anything else is
    /// `NOT_FOUND`, like a note that does not exist.
    pub fn read_standard(&self, v: &VaultHandle, path: &str) -> Result<String, GatewayError> {
        let vp = policy::VaultPath::parse(path)?;
        if v.reader.layout().classify(&vp) != policy::NoteClass::Standard {
            return Err(GatewayError::not_found());
        }
        Ok(v.reader.read_note(path)?.content)
    }

    pub fn read_note(&self, v: &VaultHandle, path: &str) -> Result<vault::ReadNote, GatewayError> {
        Ok(v.reader.read_note(path)?)
    }

    pub fn list_notes(
        &self,
        v: &VaultHandle,
        page: &PageCall<'_>,
        dir: Option<&str>,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<vault::ListNotes, GatewayError> {
        let after = match self.open_cursor(v, page, cursor)? {
            None => None,
            Some(Position::Notes(p)) => Some(p),
            Some(_) => return Err(not_this_cursor()),
        };
        let (mut out, next) = v.reader.list_notes_page(dir, limit, after.as_ref())?;
        out.next_cursor = next.map(|p| self.seal(v, page, &Position::Notes(p)));
        Ok(out)
    }

    pub fn list_standards(&self, v: &VaultHandle) -> Result<vault::ListStandards, GatewayError> {
        Ok(v.reader.list_standards()?)
    }

    /// `list_tags`, a page (default and at most 1,000 tags) after the cursor's (count, name).
    pub fn list_tags(
        &self,
        v: &VaultHandle,
        page: &PageCall<'_>,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<vault::ListTags, GatewayError> {
        let limit = match limit {
            None => vault::MAX_LIST_ITEMS,
            Some(n) if (1..=vault::MAX_LIST_ITEMS).contains(&(n as usize)) => n as usize,
            Some(n) => {
                return Err(GatewayError::InvalidArgument(format!(
                    "limit must be between 1 and {}, got {n}",
                    vault::MAX_LIST_ITEMS
                )));
            }
        };
        let after = match self.open_cursor(v, page, cursor)? {
            None => None,
            Some(Position::Tags { count, name }) => Some((count, name)),
            Some(_) => return Err(not_this_cursor()),
        };
        let mut out = v.reader.list_tags()?;
        // The order is count descending, then folded name: the same key the cursor carries.
        if let Some((count, name)) = &after {
            out.tags.retain(|t| {
                let c = t.count as u64;
                c < *count || (c == *count && name.is_before(&vault::search::fold(&t.name)))
            });
        }
        out.truncated = out.tags.len() > limit;
        out.tags.truncate(limit);
        out.next_cursor = match out.tags.last() {
            Some(t) if out.truncated => Some(self.seal(
                v,
                page,
                &Position::Tags {
                    count: t.count as u64,
                    name: vault::Key::exact(&vault::search::fold(&t.name)),
                },
            )),
            _ => None,
        };
        Ok(out)
    }

    pub fn related(&self, v: &VaultHandle, path: &str) -> Result<vault::Related, GatewayError> {
        Ok(v.reader.related(path)?)
    }

    pub fn recent(
        &self,
        v: &VaultHandle,
        page: &PageCall<'_>,
        limit: Option<u32>,
        since: Option<&str>,
        cursor: Option<&str>,
    ) -> Result<vault::RecentNotes, GatewayError> {
        let after = match self.open_cursor(v, page, cursor)? {
            None => None,
            Some(Position::Recent(p)) => Some(p),
            Some(_) => return Err(not_this_cursor()),
        };
        let (mut out, next) = v.reader.recent_page(limit, since, after.as_ref())?;
        out.next_cursor = next.map(|p| self.seal(v, page, &Position::Recent(p)));
        Ok(out)
    }

    /// `query_notes`: a page of rows after the cursor's (sort key, path), within the output limit.
    pub fn query_notes(
        &self,
        v: &VaultHandle,
        page: &PageCall<'_>,
        args: crate::api::QueryNotesArgs,
    ) -> Result<vault::data::QueryNotes, GatewayError> {
        let after = match self.open_cursor(v, page, args.cursor.as_deref())? {
            None => None,
            Some(Position::Query(p)) => Some(p),
            Some(_) => return Err(not_this_cursor()),
        };
        let spec = vault::data::QuerySpec {
            conditions: args.where_.unwrap_or_default(),
            tags: args.tag.unwrap_or_default(),
            path_prefix: args.path_prefix,
            fields: args.fields.unwrap_or_default(),
            sort: args.sort,
            limit: args.limit,
        };
        // The rows appear twice in a result (structured and as text).
        let max_bytes = self.read_limits().max_output_bytes / 2;
        let (mut out, next) = v.reader.query_notes_page(&spec, after.as_ref(), max_bytes)?;
        out.next_cursor = next.map(|p| self.seal(v, page, &Position::Query(p)));
        Ok(out)
    }

    /// `list_proposals`: newest first, a page after the cursor's (createdAt, row). `page` is
    /// `None` for the CLI, which takes no cursor.
    pub fn list_proposals_page(
        &self,
        v: &VaultHandle,
        page: Option<&PageCall<'_>>,
        status: Option<&str>,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<crate::api::ListProposalsOut, GatewayError> {
        let status = status.unwrap_or("pending");
        let bad_status = || GatewayError::InvalidArgument("status is pending, applied or rejected".into());
        if !matches!(status, "pending" | "applied" | "rejected") {
            return Err(bad_status());
        }
        let limit = limit.unwrap_or(50);
        if !(1..=500).contains(&limit) {
            return Err(GatewayError::InvalidArgument("limit is 1 to 500".into()));
        }
        let status: inbox::ProposalStatus = status.parse().map_err(|_| bad_status())?;
        let after = match (page, cursor) {
            (Some(p), c) => match self.open_cursor(v, p, c)? {
                None => None,
                Some(Position::Proposals { created_at, row }) => Some((created_at, row)),
                Some(_) => return Err(not_this_cursor()),
            },
            (None, Some(_)) => return Err(not_this_cursor()),
            (None, None) => None,
        };
        // A created_at the cursor had to cut cannot be compared in SQL: such a cursor was never
        // sealed for a real timestamp (RFC 3339 is short).
        let after_at = match &after {
            Some((k, row)) if k.hash.is_none() => Some((String::from_utf8_lossy(&k.head).into_owned(), *row)),
            Some(_) => return Err(not_this_cursor()),
            None => None,
        };
        let mut rows = self.state.list_proposals_page(
            &v.id,
            Some(status),
            limit + 1,
            after_at.as_ref().map(|(a, r)| (a.as_str(), *r)),
        )?;
        let truncated = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let next_cursor = match (rows.last(), page) {
            (Some((row, last)), Some(p)) if truncated => Some(self.seal(
                v,
                p,
                &Position::Proposals {
                    created_at: vault::Key::exact(&last.created_at),
                    row: *row,
                },
            )),
            _ => None,
        };
        Ok(crate::api::ListProposalsOut {
            proposals: rows
                .iter()
                .filter_map(|(_, r)| crate::proposing::item(r))
                .collect(),
            truncated,
            next_cursor,
        })
    }

    pub fn vault_list(&self, cred: &Credential) -> VaultListOut {
        let mut vaults: Vec<VaultItem> = self
            .visible(cred)
            .take(vault::MAX_LIST_ITEMS + 1)
            .map(|v| VaultItem {
                id: v.id.clone(),
                name: v.name.clone(),
                is_default: self.config.default_vault.as_deref() == Some(v.id.as_str()),
                note_count: v.reader.note_count() as u64,
            })
            .collect();
        let truncated = vaults.len() > vault::MAX_LIST_ITEMS;
        vaults.truncate(vault::MAX_LIST_ITEMS);
        VaultListOut { vaults, truncated }
    }

    pub fn overview(&self, v: &VaultHandle) -> Result<OverviewOut, GatewayError> {
        let counts = v.reader.counts()?;
        let tops = self.state.history_tops(&v.id)?;
        Ok(OverviewOut {
            vault: v.id.clone(),
            notes: counts.notes as u64,
            standards: counts.standards as u64,
            tags: counts.tags as u64,
            pending_proposals: self.state.count_pending(&v.id)?,
            revision: self.state.revision(&v.id)?,
            index: {
                // Compared with the files now: `fresh` only when reads use the index and no
                // catalog file differs from it.
                let health = v.reader.index_health();
                IndexStatus {
                    indexed_at: vault::rfc3339(health.indexed_at.unwrap_or(std::time::UNIX_EPOCH)),
                    fresh: health.fresh,
                    stale_files: health.stale_files as u64,
                }
            },
            history: HistoryTops {
                undo_top: tops.undo,
                redo_top: tops.redo,
            },
        })
    }

    pub fn vault_handles(&self, cred: &Credential) -> Vec<Arc<VaultHandle>> {
        self.visible(cred).cloned().collect()
    }

    // ---- credential administration (operators only) ---------------------------------------------------

    /// Issues a credential and its token; audited as a credential change by the CLI user. The
    /// row is committed only together with its durable audit line (docs/contract.md#the-audit-log).
    pub fn issue_credential(
        &self,
        operator: &Operator,
        name: &str,
        tier: Tier,
        vaults: Vec<String>,
        expires_in: Option<i64>,
        approve_in_client: bool,
    ) -> Result<(Credential, Token), GatewayError> {
        for v in &vaults {
            if !self.vaults.contains_key(v) {
                return Err(GatewayError::VaultNotFound(v.clone()));
            }
        }
        check_credential_name(name).map_err(|m| GatewayError::InvalidArgument(format!("name: {m}")))?;
        self.audit_preflight()?;
        let now = now_unix();
        let jti = uuid::Uuid::new_v4().simple().to_string();
        let expires_at = expires_in.map(|s| now + s);
        // The token is signed before the row commits, so a signing failure leaves no row.
        let mut token = None;
        let cred = self
            .state
            .create_credential_recorded(
                inbox::NewCredential {
                    name: name.to_owned(),
                    tier,
                    vaults,
                    jti: jti.clone(),
                    created_at: now,
                    expires_at,
                    approve_in_client,
                },
                |cred| {
                    token = Some(auth::issue(
                        &self.secret,
                        &auth::Claims {
                            iss: auth::ISSUER.into(),
                            aud: self.config.gateway_id.clone(),
                            sub: cred.id.as_str().to_owned(),
                            jti: jti.clone(),
                            iat: now,
                            exp: expires_at,
                        },
                    )?);
                    self.audit_admin(operator, "credential.issue", cred, Some(tier))
                },
            )
            .map_err(recorded)?;
        let token = token.ok_or_else(|| GatewayError::Internal("token not issued".into()))?;
        Ok((cred, token))
    }

    pub fn revoke_credential(
        &self,
        operator: &Operator,
        id_or_name: &str,
    ) -> Result<Credential, GatewayError> {
        let cred = self.state.find_credential(id_or_name)?;
        self.audit_preflight()?;
        self.state
            .revoke_credential_recorded(&cred.id, now_unix(), || {
                self.audit_admin(operator, "credential.revoke", &cred, None)
            })
            .map_err(recorded)?;
        Ok(self.state.find_credential(cred.id.as_str())?)
    }

    pub fn set_credential_tier(
        &self,
        operator: &Operator,
        id_or_name: &str,
        tier: Tier,
    ) -> Result<Credential, GatewayError> {
        let cred = self.state.find_credential(id_or_name)?;
        self.audit_preflight()?;
        self.state
            .set_credential_tier_recorded(&cred.id, tier, || {
                self.audit_admin(operator, "credential.set_tier", &cred, Some(tier))
            })
            .map_err(recorded)?;
        Ok(self.state.find_credential(cred.id.as_str())?)
    }

    /// Every credential, read fresh (the Credentials page).
    pub fn credentials(&self) -> Result<Vec<Credential>, GatewayError> {
        Ok(self.state.list_credentials()?)
    }

    /// A credential by id or name.
    pub fn find_credential(&self, id_or_name: &str) -> Result<Credential, GatewayError> {
        Ok(self.state.find_credential(id_or_name)?)
    }

    /// The durable record of a credential change, written inside the change's transaction.
    pub(crate) fn audit_admin(
        &self,
        operator: &Operator,
        event: &str,
        cred: &Credential,
        tier: Option<Tier>,
    ) -> Result<inbox::AuditHead, GatewayError> {
        let args = serde_json::json!({
            "credentialId": cred.id.as_str(),
            "name": cred.name,
            "tier": tier.map(|t| t.as_str()),
            "approveInClient": cred.approve_in_client,
        });
        let mut entry = Entry::new(event, operator.audit_actor(), Outcome::Ok);
        entry.target = Some(cred.id.as_str().to_owned());
        entry.args_hash = Some(audit::args_hash(&args));
        self.append_audit_record(entry, Durability::Sync)
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

fn to_value<T: serde::Serialize>(v: T) -> Result<Value, GatewayError> {
    serde_json::to_value(v).map_err(|e| GatewayError::Internal(format!("serializing a result: {e}")))
}
