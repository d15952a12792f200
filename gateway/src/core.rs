//! The service layer: every operation once, for the MCP transports and the CLI alike.
//! Authentication, capability checks, vault resolution, the call itself and its audit record.

use std::collections::BTreeMap;
use std::sync::Arc;

use audit::{AuditLog, Durability, Entry, Outcome};
use inbox::{Credential, State};
use policy::{ErrorCode, Tier};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use vault::Vault;

use crate::auth::{self, Token};
use crate::changes::VaultChanged;
use crate::error::GatewayError;
use crate::home::{Config, Home, SecretKey};
use crate::tools::{self, HistoryTops, IndexStatus, OverviewOut, VaultItem, VaultListOut};

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

/// Who performs an operation: an authenticated MCP caller, or the OS user at the CLI (who owns
/// the home and so acts with full authority over its vaults).
#[derive(Debug, Clone)]
pub enum Actor {
    Caller(Caller),
    Cli(String),
}

impl Actor {
    /// The idempotency-key namespace and the `createdBy` id.
    pub fn principal_id(&self) -> String {
        match self {
            Actor::Caller(c) => c.credential.id.as_str().to_owned(),
            Actor::Cli(u) => format!("cli:{u}"),
        }
    }

    /// A short human label (`decided_by`, `_applied.jsonl`).
    pub fn label(&self) -> String {
        match self {
            Actor::Caller(c) => format!("{} ({})", c.credential.name, c.credential.id.as_str()),
            Actor::Cli(u) => format!("cli:{u}"),
        }
    }

    pub fn audit_actor(&self) -> audit::Actor {
        match self {
            Actor::Caller(c) => c.actor(),
            Actor::Cli(u) => audit::Actor::Cli { user: u.clone() },
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
    pub reader: Vault,
}

/// Shared state of one gateway process.
pub struct Core {
    pub home: Home,
    pub config: Config,
    secret: SecretKey,
    pub state: State,
    pub audit: AuditLog,
    vaults: BTreeMap<String, Arc<VaultHandle>>,
    changes: tokio::sync::broadcast::Sender<VaultChanged>,
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
        let config = home.load_config()?;
        let secret = home.load_secret()?;
        let state = State::open(&home.state_path())?;
        let audit = AuditLog::open(&home.audit_path())?;
        let mut vaults = BTreeMap::new();
        for v in &config.vaults {
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
        Ok(Core {
            home,
            config,
            secret,
            state,
            audit,
            vaults,
            changes,
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

    /// Verifies the token and reads the credential row fresh: revocation, expiry and tier changes
    /// apply to the very next call. Refusals are audited.
    pub fn authenticate(&self, token: &Token, transport: Transport) -> Result<Caller, GatewayError> {
        let result = self.authenticate_inner(token, transport);
        if let Err(e) = &result {
            self.record_refusal("auth", None, None, transport, e);
        }
        result
    }

    fn authenticate_inner(&self, token: &Token, transport: Transport) -> Result<Caller, GatewayError> {
        let claims = auth::verify(&self.secret, &self.config.gateway_id, token.expose())?;
        let credential = self
            .state
            .credential(&claims.sub)?
            .ok_or(GatewayError::Unauthorized("unknown credential"))?;
        // SECURITY(T-AUTH2): a token names one issuance; a re-issued or forged jti is refused.
        if credential.jti != claims.jti {
            return Err(GatewayError::Unauthorized("token superseded"));
        }
        if credential.is_revoked() {
            return Err(GatewayError::CredentialRevoked);
        }
        if credential.is_expired(now_unix()) {
            return Err(GatewayError::CredentialExpired);
        }
        Ok(Caller {
            credential,
            transport,
        })
    }

    /// Audits an HTTP refusal decided before a credential was known (a missing token, a session owned by another credential).
    pub fn record_auth_refusal(&self, transport: Transport, e: &GatewayError) {
        self.record_refusal("auth", None, None, transport, e);
    }

    fn record_refusal(
        &self,
        event: &str,
        tool: Option<&str>,
        args: Option<&Value>,
        transport: Transport,
        e: &GatewayError,
    ) {
        let entry = Entry {
            event: event.into(),
            actor: audit::Actor::Credential {
                credential_id: String::new(),
                name: String::new(),
                tier: String::new(),
                transport: transport.as_str().into(),
            },
            vault: None,
            tool: tool.map(str::to_owned),
            target: None,
            proposal_id: None,
            challenge_id: None,
            outcome: outcome_for(e),
            code: Some(e.code().as_str().into()),
            args_hash: args.map(audit::args_hash),
        };
        self.write_audit(entry, Durability::Sync);
    }

    fn write_audit(&self, entry: Entry, durability: Durability) {
        if let Err(e) = self
            .audit
            .append(entry, time::OffsetDateTime::now_utc(), durability)
        {
            tracing::error!(error = %e, "audit append failed");
        }
    }

    // ---- tool calls ----------------------------------------------------------------------------

    /// Runs one tool call end to end for an MCP transport. `Ok(None)` means the tool is unknown
    /// (a JSON-RPC error at the edge, not a tool result).
    pub fn call_tool(
        &self,
        token: &Token,
        transport: Transport,
        tool: &str,
        args: Map<String, Value>,
    ) -> Option<Result<Value, GatewayError>> {
        policy::tools::find(tool)?;
        if !tools::CATALOG.iter().any(|t| t.name == tool) {
            return None;
        }
        let caller = match self.authenticate(token, transport) {
            Ok(c) => c,
            Err(e) => return Some(Err(e)),
        };
        self.call_tool_as(&caller, tool, args)
    }

    /// Runs one tool call for an already authenticated caller (HTTP authenticates per request in
    /// its middleware, immediately before).
    pub fn call_tool_as(
        &self,
        caller: &Caller,
        tool: &str,
        args: Map<String, Value>,
    ) -> Option<Result<Value, GatewayError>> {
        let spec = policy::tools::find(tool)?;
        if !tools::CATALOG.iter().any(|t| t.name == tool) {
            return None;
        }
        let caller = caller.clone();
        let args = Value::Object(args);
        let mut resolved: Option<String> = None;
        let result = if caller.credential.tier.allows(spec.capability()) {
            self.dispatch(&caller, tool, &args, &mut resolved)
        } else {
            Err(GatewayError::CapabilityDenied(format!(
                "the '{}' tier may not call {tool}; ask the vault owner for a higher tier",
                caller.credential.tier
            )))
        };
        let (outcome, code) = match &result {
            Ok(_) => (Outcome::Ok, None),
            Err(e) => (outcome_for(e), Some(e.code().as_str().to_owned())),
        };
        // A successful apply wrote its own durable record inside the transaction (with auditSeq).
        // A replay wrote nothing and is recorded like any other call.
        let replayed = result
            .as_ref()
            .is_ok_and(|v| v.get("replayed") == Some(&Value::Bool(true)));
        if tool == "apply_proposal" && result.is_ok() && !replayed {
            return Some(result);
        }
        // A successful undo/redo, or its replay, wrote its own durable record.
        if matches!(tool, "history_undo" | "history_redo") && result.is_ok() {
            return Some(result);
        }
        if crate::critical::audited_itself(tool, &result) {
            return Some(result);
        }
        let proposal_id = match (&result, tool) {
            (Ok(v), t) if t.starts_with("propose_") => v.get("id").and_then(Value::as_str).map(str::to_owned),
            _ => args.get("id").and_then(Value::as_str).map(str::to_owned),
        };
        let target = args
            .get("path")
            .or_else(|| args.get("to"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let entry = Entry {
            event: "tool_call".into(),
            actor: caller.actor(),
            vault: resolved.or_else(|| result_vault(&args)),
            tool: Some(tool.into()),
            target,
            proposal_id,
            challenge_id: crate::critical::audit_challenge_id(&args, &result),
            outcome,
            code,
            args_hash: Some(audit::args_hash(&args)),
        };
        // Reads are flushed; refusals and mutations are made durable before the answer.
        let durability = if spec.is_mutating() || result.is_err() {
            Durability::Sync
        } else {
            Durability::Flush
        };
        self.write_audit(entry, durability);
        Some(result)
    }

    /// Resolves the vault a call acts on and remembers it for the audit record.
    fn target(
        &self,
        caller: &Caller,
        requested: Option<&str>,
        resolved: &mut Option<String>,
    ) -> Result<Arc<VaultHandle>, GatewayError> {
        if let Some(id) = requested {
            *resolved = Some(id.to_owned());
        }
        let v = self.resolve_vault(&caller.credential, requested)?;
        *resolved = Some(v.id.clone());
        Ok(v)
    }

    fn dispatch(
        &self,
        caller: &Caller,
        tool: &str,
        args: &Value,
        resolved: &mut Option<String>,
    ) -> Result<Value, GatewayError> {
        match tool {
            "vault_list" => {
                let _: tools::NoArgs = parse(args)?;
                to_value(self.vault_list(&caller.credential))
            }
            "get_vault_overview" => {
                let a: tools::VaultArg = parse(args)?;
                let v = self.target(caller, a.vault.as_deref(), resolved)?;
                to_value(self.overview(&v)?)
            }
            "search_knowledge" => {
                let a: tools::SearchKnowledgeArgs = parse(args)?;
                let v = self.target(caller, a.vault.as_deref(), resolved)?;
                to_value(
                    v.reader
                        .search_knowledge(&a.query, &a.tag.unwrap_or_default(), a.limit)?,
                )
            }
            "search_note_content" => {
                let a: tools::SearchNoteContentArgs = parse(args)?;
                let v = self.target(caller, a.vault.as_deref(), resolved)?;
                let q = vault::ContentQuery {
                    query: a.query,
                    limit: a.limit,
                    tags: a.tag.unwrap_or_default(),
                    path_prefix: a.path_prefix,
                };
                to_value(v.reader.search_content(&q)?)
            }
            "read_note" => {
                let a: tools::PathArgs = parse(args)?;
                let v = self.target(caller, a.vault.as_deref(), resolved)?;
                to_value(v.reader.read_note(&a.path)?)
            }
            "list_notes" => {
                let a: tools::ListNotesArgs = parse(args)?;
                let v = self.target(caller, a.vault.as_deref(), resolved)?;
                to_value(v.reader.list_notes(a.dir.as_deref(), a.limit)?)
            }
            "list_standards" => {
                let a: tools::VaultArg = parse(args)?;
                let v = self.target(caller, a.vault.as_deref(), resolved)?;
                to_value(v.reader.list_standards()?)
            }
            "list_tags" => {
                let a: tools::VaultArg = parse(args)?;
                let v = self.target(caller, a.vault.as_deref(), resolved)?;
                to_value(v.reader.list_tags()?)
            }
            "get_related_notes" => {
                let a: tools::PathArgs = parse(args)?;
                let v = self.target(caller, a.vault.as_deref(), resolved)?;
                to_value(v.reader.related(&a.path)?)
            }
            "list_recent_notes" => {
                let a: tools::RecentArgs = parse(args)?;
                let v = self.target(caller, a.vault.as_deref(), resolved)?;
                to_value(v.reader.recent(a.limit, a.since.as_deref())?)
            }
            "list_proposals" => {
                let a: tools::ListProposalsArgs = parse(args)?;
                let v = self.target(caller, a.vault.as_deref(), resolved)?;
                to_value(self.list_proposals(&v, a.status.as_deref(), a.limit)?)
            }
            "get_proposal" => {
                let a: tools::ProposalIdArgs = parse(args)?;
                let v = self.target(caller, a.vault.as_deref(), resolved)?;
                to_value(self.get_proposal(&v, &a.id)?)
            }
            "propose_new_note" => {
                let a: tools::ProposeNewArgs = parse(args)?;
                let v = self.target(caller, a.vault.as_deref(), resolved)?;
                to_value(self.propose_new(
                    &Actor::Caller(caller.clone()),
                    &v,
                    &a.path,
                    &a.content,
                    &a.reason,
                )?)
            }
            "propose_note_patch" => {
                let a: tools::ProposePatchArgs = parse(args)?;
                let v = self.target(caller, a.vault.as_deref(), resolved)?;
                to_value(self.propose_patch(&Actor::Caller(caller.clone()), &v, a)?)
            }
            "propose_move" => {
                let a: tools::ProposeMoveArgs = parse(args)?;
                let v = self.target(caller, a.vault.as_deref(), resolved)?;
                to_value(self.propose_move(&Actor::Caller(caller.clone()), &v, &a.from, &a.to, &a.reason)?)
            }
            "propose_delete" => {
                let a: tools::ProposeDeleteArgs = parse(args)?;
                let v = self.target(caller, a.vault.as_deref(), resolved)?;
                to_value(self.propose_delete(
                    &Actor::Caller(caller.clone()),
                    &v,
                    &a.path,
                    &a.base_hash,
                    &a.reason,
                )?)
            }
            "reject_proposal" => {
                let a: tools::RejectArgs = parse(args)?;
                let v = self.target(caller, a.vault.as_deref(), resolved)?;
                to_value(self.reject_proposal(&Actor::Caller(caller.clone()), &v, &a.id, &a.reason)?)
            }
            "apply_proposal" => {
                let a: tools::ApplyArgs = parse(args)?;
                let v = self.target(caller, a.vault.as_deref(), resolved)?;
                let args_hash = audit::args_hash(args);
                to_value(self.apply_proposal(
                    &Actor::Caller(caller.clone()),
                    &v,
                    &a.id,
                    &a.proposal_hash,
                    &a.idempotency_key,
                    &args_hash,
                )?)
            }
            "history_status" => {
                let a: tools::VaultArg = parse(args)?;
                let v = self.target(caller, a.vault.as_deref(), resolved)?;
                to_value(self.history_status(&v)?)
            }
            "history_undo" | "history_redo" => {
                let a: crate::history::HistoryMoveArgs = parse(args)?;
                let v = self.target(caller, a.vault.as_deref(), resolved)?;
                let t = if tool == "history_undo" {
                    inbox::Transition::Undo
                } else {
                    inbox::Transition::Redo
                };
                to_value(self.history_transition(
                    &Actor::Caller(caller.clone()),
                    &v,
                    t,
                    &a.expected_history_entry_id,
                    &a.idempotency_key,
                    &audit::args_hash(args),
                )?)
            }
            "delete_permanent" => {
                let a: crate::critical::DeletePermanentArgs = parse(args)?;
                let v = self.target(caller, a.vault.as_deref(), resolved)?;
                self.delete_permanent(caller, &v, args)
            }
            "empty_trash" => {
                let a: crate::critical::EmptyTrashArgs = parse(args)?;
                let v = self.target(caller, a.vault.as_deref(), resolved)?;
                self.empty_trash(caller, &v, args)
            }
            other => Err(GatewayError::Internal(format!(
                "tool '{other}' is in the catalog but not dispatched"
            ))),
        }
    }

    /// Records a successful or refused read that is not a tool call (resources).
    pub fn record_read<T>(
        &self,
        caller: &Caller,
        event: &str,
        target: &str,
        result: &Result<T, GatewayError>,
    ) {
        let (outcome, code) = match result {
            Ok(_) => (Outcome::Ok, None),
            Err(e) => (outcome_for(e), Some(e.code().as_str().to_owned())),
        };
        let durability = if result.is_ok() {
            Durability::Flush
        } else {
            Durability::Sync
        };
        self.write_audit(
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
            },
            durability,
        );
    }

    // ---- vaults ------------------------------------------------------------------------------

    fn visible<'a>(&'a self, cred: &'a Credential) -> impl Iterator<Item = &'a Arc<VaultHandle>> + 'a {
        self.vaults.values().filter(move |v| cred.may_see_vault(&v.id))
    }

    /// SPEC §4: explicit id, else the only visible vault, else the default; a vault outside the
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

    /// Audits a CLI decision (applies record themselves on success).
    pub fn record_cli<T>(
        &self,
        actor: &Actor,
        tool: &str,
        vault: &str,
        proposal_id: Option<&str>,
        result: &Result<T, GatewayError>,
    ) {
        let (outcome, code) = match result {
            Ok(_) => (Outcome::Ok, None),
            Err(e) => (outcome_for(e), Some(e.code().as_str().to_owned())),
        };
        self.write_audit(
            Entry {
                event: "cli".into(),
                actor: actor.audit_actor(),
                vault: Some(vault.to_owned()),
                tool: Some(tool.to_owned()),
                target: None,
                proposal_id: proposal_id.map(str::to_owned),
                challenge_id: None,
                outcome,
                code,
                args_hash: None,
            },
            Durability::Sync,
        );
    }

    pub fn vault_list(&self, cred: &Credential) -> VaultListOut {
        let vaults = self
            .visible(cred)
            .map(|v| VaultItem {
                id: v.id.clone(),
                name: v.name.clone(),
                is_default: self.config.default_vault.as_deref() == Some(v.id.as_str()),
                note_count: v.reader.note_count() as u64,
            })
            .collect();
        VaultListOut { vaults }
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

    // ---- credential administration (CLI only) ---------------------------------------------------

    /// Issues a credential and its token; audited as a credential change by the CLI user.
    pub fn issue_credential(
        &self,
        user: &str,
        name: &str,
        tier: Tier,
        vaults: Vec<String>,
        expires_in: Option<i64>,
    ) -> Result<(Credential, Token), GatewayError> {
        for v in &vaults {
            if !self.vaults.contains_key(v) {
                return Err(GatewayError::VaultNotFound(v.clone()));
            }
        }
        if name.trim().is_empty() {
            return Err(GatewayError::InvalidArgument("--name must not be empty".into()));
        }
        let now = now_unix();
        let jti = uuid::Uuid::new_v4().simple().to_string();
        let expires_at = expires_in.map(|s| now + s);
        let cred = self.state.create_credential(inbox::NewCredential {
            name: name.to_owned(),
            tier,
            vaults,
            jti: jti.clone(),
            created_at: now,
            expires_at,
        })?;
        let token = auth::issue(
            &self.secret,
            &auth::Claims {
                iss: auth::ISSUER.into(),
                aud: self.config.gateway_id.clone(),
                sub: cred.id.as_str().to_owned(),
                jti,
                iat: now,
                exp: expires_at,
            },
        )?;
        self.audit_admin(user, "credential.issue", &cred, Some(tier))?;
        Ok((cred, token))
    }

    pub fn revoke_credential(&self, user: &str, id_or_name: &str) -> Result<Credential, GatewayError> {
        let cred = self.state.find_credential(id_or_name)?;
        self.state.revoke_credential(&cred.id, now_unix())?;
        self.audit_admin(user, "credential.revoke", &cred, None)?;
        Ok(self.state.find_credential(cred.id.as_str())?)
    }

    pub fn set_credential_tier(
        &self,
        user: &str,
        id_or_name: &str,
        tier: Tier,
    ) -> Result<Credential, GatewayError> {
        let cred = self.state.find_credential(id_or_name)?;
        self.state.set_credential_tier(&cred.id, tier)?;
        self.audit_admin(user, "credential.set_tier", &cred, Some(tier))?;
        Ok(self.state.find_credential(cred.id.as_str())?)
    }

    fn audit_admin(
        &self,
        user: &str,
        event: &str,
        cred: &Credential,
        tier: Option<Tier>,
    ) -> Result<(), GatewayError> {
        let args = serde_json::json!({ "credentialId": cred.id.as_str(), "name": cred.name, "tier": tier.map(|t| t.as_str()) });
        self.audit.append(
            Entry {
                event: event.into(),
                actor: audit::Actor::Cli {
                    user: user.to_owned(),
                },
                vault: None,
                tool: None,
                target: Some(cred.id.as_str().to_owned()),
                proposal_id: None,
                challenge_id: None,
                outcome: Outcome::Ok,
                code: None,
                args_hash: Some(audit::args_hash(&args)),
            },
            time::OffsetDateTime::now_utc(),
            Durability::Sync,
        )?;
        Ok(())
    }
}

fn outcome_for(e: &GatewayError) -> Outcome {
    match e.code() {
        ErrorCode::INTERNAL => Outcome::Error,
        _ => Outcome::Denied,
    }
}

fn result_vault(args: &Value) -> Option<String> {
    args.get("vault").and_then(Value::as_str).map(str::to_owned)
}

/// Parses tool arguments strictly: unknown fields and wrong types are `INVALID_ARGUMENT`.
fn parse<T: DeserializeOwned>(args: &Value) -> Result<T, GatewayError> {
    T::deserialize(args).map_err(|e| GatewayError::InvalidArgument(format!("bad arguments: {e}")))
}

fn to_value<T: serde::Serialize>(v: T) -> Result<Value, GatewayError> {
    serde_json::to_value(v).map_err(|e| GatewayError::Internal(format!("serializing a result: {e}")))
}
