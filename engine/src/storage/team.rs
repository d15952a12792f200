//! The seam a team's shared state plugs into (docs/contract.md#team-mode): where a gateway in
//! team mode reads every request's credential, makes credential changes and appends its audit
//! records. The team's PostgreSQL implements it outside this crate; the engine keeps deciding.
//!
//! It must never hold a token's `jti` (a team credential's `jti` field is the SHA-256 of it, hex)
//! or answer a change it could not record with its audit record in the same commit.

use inbox::{Credential, CredentialId, NewCredential};
use policy::Tier;

use crate::error::GatewayError;

/// A team's shared state, as one gateway of it sees it. Every method reads or writes the team's
/// database now (no cache here): an unreachable database is `AUDIT_UNAVAILABLE`.
pub trait TeamState: Send + Sync {
    /// The team's id: the audience of every token of the team (known once the database answered).
    fn team_id(&self) -> Result<String, GatewayError>;
    /// This gateway's name in the team (records carry it).
    fn gateway(&self) -> &str;
    /// Moves in the commit of every credential change.
    fn credential_generation(&self) -> Result<i64, GatewayError>;
    /// The row for `id`; its `jti` is the SHA-256 (hex) of the token's.
    fn credential(&self, id: &str) -> Result<Option<Credential>, GatewayError>;
    /// Every credential (their `jti` fields empty).
    fn credentials(&self) -> Result<Vec<Credential>, GatewayError>;
    /// Stores `new` under `id` with its `credential.issue` record, in one commit.
    fn issue_credential(
        &self,
        actor: &audit::Actor,
        id: CredentialId,
        new: NewCredential,
    ) -> Result<Credential, GatewayError>;
    /// Revokes `id` (the first revocation time is kept), with its record.
    fn revoke_credential(&self, actor: &audit::Actor, id: &str, now: i64) -> Result<(), GatewayError>;
    /// Revokes `id` and renames it `<name>-<last 12 of its id>` (its name free for the next
    /// one), with its `credential.revoke` record.
    fn retire_credential(&self, actor: &audit::Actor, id: &str, now: i64) -> Result<(), GatewayError>;
    /// Changes `id`'s tier, with its record.
    fn set_credential_tier(&self, actor: &audit::Actor, id: &str, tier: Tier) -> Result<(), GatewayError>;
    /// Appends one record to the team's chain; answers once it is committed.
    fn append_audit(&self, entry: audit::Entry) -> Result<audit::AuditRecord, GatewayError>;
    /// Notes that this gateway is alive (`team status` lists gateways seen in ten minutes).
    fn heartbeat(&self) -> Result<(), GatewayError>;
    /// The team's vaults, by id.
    fn vaults(&self) -> Result<Vec<crate::remote::TeamVault>, GatewayError>;
    /// Registers `vault` for every gateway, with its `vault.add` record, in one commit.
    fn add_vault(&self, actor: &audit::Actor, vault: &crate::remote::TeamVault) -> Result<(), GatewayError>;
    /// Forgets the vault `id` (its remote is not touched), with its `vault.remove` record.
    fn remove_vault(&self, actor: &audit::Actor, id: &str) -> Result<(), GatewayError>;

    /// `vault`'s registered head and, once its history was found rewritten, the head seen then.
    fn vault_head(&self, vault: &str) -> Result<(Option<String>, Option<String>), GatewayError>;
    /// Registers `head` as `vault`'s if the registered head is still `expected` (`None`: whatever
    /// it is); ignored while the vault is marked rewritten.
    fn register_head(&self, vault: &str, expected: Option<&str>, head: &str) -> Result<(), GatewayError>;
    /// Marks `vault`'s history rewritten (its branch seen at `seen`) with its
    /// `vault.history_rewritten` record, once, and only while its registered head is still
    /// `registered` (what the caller's check read: a `vault resync` committed meanwhile wins):
    /// true when this call marked it.
    fn mark_rewritten(&self, vault: &str, registered: Option<&str>, seen: &str)
    -> Result<bool, GatewayError>;
    /// `vault resync`: `head` is registered again and the mark cleared, with its record.
    fn resync_vault(&self, actor: &audit::Actor, vault: &str, head: &str) -> Result<(), GatewayError>;

    /// The team's settings (`limits.<name>` → value), by key.
    fn settings(&self) -> Result<Vec<(String, serde_json::Value)>, GatewayError>;
    /// Sets (or, `None`, removes) a team setting, with its `team.set` record, in one commit.
    fn set_setting(
        &self,
        actor: &audit::Actor,
        key: &str,
        value: Option<&serde_json::Value>,
    ) -> Result<(), GatewayError>;

    /// Stores a new pending proposal, its content and its record (`entry`), in one commit.
    fn insert_proposal(
        &self,
        p: &NewTeamProposal<'_>,
        entry: audit::Entry,
    ) -> Result<audit::AuditRecord, GatewayError>;
    /// The proposal `id` of `vault`, with its content and its job.
    fn proposal(&self, vault: &str, id: &str) -> Result<Option<TeamProposal>, GatewayError>;
    /// The ids of at most `limit` of `vault`'s proposals that have a job, the oldest job first:
    /// under the vault's lease, jobs a gateway left (it stopped, or its push had no answer).
    fn left_jobs(&self, vault: &str, limit: u32) -> Result<Vec<String>, GatewayError>;
    /// How long (seconds) the oldest of `vault`'s jobs whose gateway holds no live lease on it
    /// has been left; `None`: no job is left.
    fn oldest_left_job(&self, vault: &str) -> Result<Option<u64>, GatewayError>;
    /// A page of `vault`'s proposals of `status`, newest first, after `(created_at, row)`
    /// (content not read).
    fn list_proposals(
        &self,
        vault: &str,
        status: inbox::ProposalStatus,
        limit: u32,
        after: Option<(&str, i64)>,
    ) -> Result<Vec<TeamProposal>, GatewayError>;
    /// Every pending proposal of `vault`: who made it and how many bytes it holds (quotas).
    fn pending_sizes(&self, vault: &str) -> Result<Vec<(String, u64)>, GatewayError>;
    /// Rejects a pending proposal with no job running, with its record (and, for a decision
    /// made on the card, its answer kept under the caller's key). `None`: it was not.
    fn reject_proposal(
        &self,
        id: &str,
        by: &str,
        at: &str,
        reason: &str,
        key: Option<(&inbox::IdemKey<'_>, &serde_json::Value)>,
        entry: audit::Entry,
    ) -> Result<Option<audit::AuditRecord>, GatewayError>;
    /// The right to write `vault`'s remote, one gateway of the team at a time: its lease, with
    /// an epoch greater than every earlier hold's (waits at most `wait`, else `VAULT_BUSY`).
    /// Renewed while held; released when the hold is dropped; a hold that cannot renew lapses
    /// when the lease's time runs out (docs/contract.md#team-mode).
    fn lock_vault(&self, vault: &str, wait: std::time::Duration) -> Result<Box<dyn VaultHold>, GatewayError>;
    /// Gives a pending proposal with no job the job `job`, with its `apply.intent` record.
    /// `None`: the proposal is decided, or has a job already.
    fn begin_job(
        &self,
        fence: &Fence,
        id: &str,
        job: &TeamJob,
        entry: audit::Entry,
    ) -> Result<Option<audit::AuditRecord>, GatewayError>;
    /// Notes the commit `job` is about to push, the base it builds on and the rest it is made of
    /// (`meta`): what recovery reads, on any gateway.
    fn job_attempt(
        &self,
        fence: &Fence,
        id: &str,
        job: &str,
        base: &str,
        commit: &str,
        meta: &serde_json::Value,
    ) -> Result<(), GatewayError>;
    /// The job landed: the proposal applied, its answer kept under the key, with the call's
    /// record. `None`: the proposal no longer has this job.
    fn finish_job(
        &self,
        fence: &Fence,
        id: &str,
        job: &str,
        done: &TeamDone<'_>,
        entry: audit::Entry,
    ) -> Result<Option<audit::AuditRecord>, GatewayError>;
    /// The job did not land: the proposal is pending again with no job.
    fn drop_job(&self, fence: &Fence, id: &str, job: &str) -> Result<(), GatewayError>;
    /// A change that is not an apply (an undo or redo pushed): its answer kept under `key` (the
    /// first one stays) with the call's record, in one commit.
    fn keep_answer(
        &self,
        fence: &Fence,
        key: &inbox::IdemKey<'_>,
        result: &(dyn Fn(u64) -> serde_json::Value + Sync),
        entry: audit::Entry,
    ) -> Result<audit::AuditRecord, GatewayError>;
    /// The first answer kept under a key of `principal`.
    fn idempotency(&self, principal: &str, key: &str) -> Result<Option<inbox::IdemRecord>, GatewayError>;

    /// Records a critical call's challenge for every gateway of the team.
    fn create_challenge(&self, c: &inbox::NewChallenge<'_>) -> Result<(), GatewayError>;
    /// The challenge `id`, with the commits an execution of it was about to push.
    fn challenge(&self, id: &str) -> Result<Option<TeamChallenge>, GatewayError>;
    /// The one execution: consumes an unused challenge with its intent and the intent's record,
    /// in one commit. `None`: it was used already.
    fn consume_challenge(
        &self,
        fence: &Fence,
        id: &str,
        at: i64,
        intent: &serde_json::Value,
        entry: audit::Entry,
    ) -> Result<Option<audit::AuditRecord>, GatewayError>;
    /// Notes a commit the execution of `id` is about to push.
    fn challenge_attempt(&self, fence: &Fence, id: &str, commit: &str) -> Result<(), GatewayError>;
    /// The execution landed: its answer kept with the record, in one commit. `None`: finished
    /// already.
    fn finish_challenge(
        &self,
        fence: &Fence,
        id: &str,
        result: &(dyn Fn(u64) -> serde_json::Value + Sync),
        entry: audit::Entry,
    ) -> Result<Option<audit::AuditRecord>, GatewayError>;
    /// Nothing the execution pushed landed: the challenge is unused again.
    fn release_challenge(&self, fence: &Fence, id: &str) -> Result<(), GatewayError>;
    /// Forgets unused challenges that expired before `before`.
    fn prune_challenges(&self, before: i64) -> Result<(), GatewayError>;
    /// Uses a person's approval (its nonce, valid until `expires_at`) once across the team:
    /// false when it was used already.
    fn use_approval(&self, nonce: &str, expires_at: i64) -> Result<bool, GatewayError>;

    /// Hands `call` to the gateway holding its vault's lease (docs/contract.md#team-lease "One
    /// applier at a time"), announced to it: `false` (nothing queued) when no other gateway
    /// holds the lease now.
    fn hand_call(&self, call: &HandedCall) -> Result<bool, GatewayError>;
    /// An earlier call like `call` (its vault, credential, tool and arguments, the idempotency
    /// key among them) handed and not answered yet: taken by a gateway, or queued less than
    /// `ttl_seconds` ago. Its receiver may have stopped waiting; a retry waits for it instead.
    fn pending_like(&self, call: &HandedCall, ttl_seconds: u64) -> Result<Option<String>, GatewayError>;
    /// Takes, oldest first, at most `limit` calls handed to this gateway for `vault`, queued
    /// less than `ttl_seconds` ago: none unless this process holds the vault's lease now.
    fn take_handed(&self, vault: &str, limit: u32, ttl_seconds: u64)
    -> Result<Vec<HandedCall>, GatewayError>;
    /// Where the handed call `id` is.
    fn handed(&self, id: &str) -> Result<Handed, GatewayError>;
    /// Takes back the handed call `id` to run it here: from the queue (`from` = `None`), or
    /// from the gateway `from` that took it and did not answer. `false`: someone was faster.
    fn take_back_handed(&self, id: &str, from: Option<&str>) -> Result<bool, GatewayError>;
    /// The answer of the handed call `id`, which this gateway took. `false`: it was taken back.
    fn answer_handed(&self, id: &str, answer: &serde_json::Value) -> Result<bool, GatewayError>;
    /// Forgets the handed call `id` (its receiver answered it, or gave up waiting).
    fn forget_handed(&self, id: &str) -> Result<(), GatewayError>;
}

/// A call a gateway handed to the vault's applier, to be run there as its caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandedCall {
    pub id: String,
    pub vault: String,
    /// The gateway that received it.
    pub gateway: String,
    /// The caller's credential, read again (revoked, expired, its tier) by whoever runs it.
    pub credential: String,
    /// `stdio` or `http`.
    pub transport: String,
    pub tool: String,
    pub args: serde_json::Value,
}

/// Where a handed call is.
#[derive(Debug, Clone, PartialEq)]
pub enum Handed {
    /// Not (or no longer) in the queue.
    Gone,
    /// Waiting: `taken_by` runs it (`None`: queued); `holder`: who holds the vault's lease now;
    /// `taker_queued`: the taker, not holding the lease, is waiting in line for it (alive).
    Waiting {
        taken_by: Option<String>,
        holder: Option<String>,
        taker_queued: bool,
    },
    /// Run, with its answer.
    Answered(serde_json::Value),
}

/// Which hold of a vault's lease a write is made under: every write a hold records checks, in
/// its own transaction, that the lease is still this epoch's and unexpired (SECURITY(T-TEAM9)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub vault: String,
    pub epoch: i64,
}

/// A held lease of a vault ([`TeamState::lock_vault`]).
pub trait VaultHold: Send + Sync {
    /// What every write made under this hold carries.
    fn fence(&self) -> &Fence;
    /// Whether the hold still holds by this machine's clock (renewed in time, not taken over):
    /// `VAULT_BUSY` when it lapsed. Checked before each push: a hold that lapsed pushes nothing.
    fn check(&self) -> Result<(), GatewayError>;
}

/// A challenge as the team's database keeps it.
#[derive(Debug, Clone)]
pub struct TeamChallenge {
    pub row: inbox::StoredChallenge,
    /// Every commit an execution of it was about to push (whichever lands is its execution).
    pub pushed: Vec<String>,
}

/// A proposal as the team's database keeps it: the row a local inbox would hold, its content,
/// and the job applying it, if one is.
#[derive(Debug, Clone)]
pub struct TeamProposal {
    pub row: inbox::StoredProposal,
    /// Its place in the listing order (the cursor's tie-breaker).
    pub n: i64,
    /// new and patch: the proposed text.
    pub content: Option<String>,
    pub job: Option<TeamJob>,
    /// Every commit a job of it was about to push (whichever lands is its apply).
    pub pushed: Vec<String>,
    /// A job of it began a push within the last 30 s (twice the longest a push may take): a
    /// push under way (its gateway's lease ran out meanwhile, perhaps) may still land.
    pub may_still_land: bool,
}

/// A proposal to store.
pub struct NewTeamProposal<'a> {
    pub row: inbox::NewProposal<'a>,
    pub content: Option<&'a str>,
    pub diff: Option<&'a str>,
    /// What the proposal holds, as the quotas count it.
    pub bytes: u64,
}

/// An apply in progress on the team's remote: who runs it, and the commit it pushes on which
/// base once built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamJob {
    pub id: String,
    pub gateway: String,
    pub base: Option<String>,
    pub commit: Option<String>,
    /// The caller's key (`{credentialId, key, tool, argsHash}`): whoever settles a job its
    /// gateway left keeps the answer under it, so the caller's retry gets it.
    pub key: Option<serde_json::Value>,
    /// Seconds since the job began (the database's clock); `None` for one not read back yet.
    pub age_seconds: Option<u64>,
    /// What its commit is made of besides the proposal and `base` (`teamwrite::CommitMeta`),
    /// noted with `commit`.
    pub meta: Option<serde_json::Value>,
}

/// A job that landed.
pub struct TeamDone<'a> {
    pub by: &'a str,
    pub at: &'a str,
    /// The answer, given the seq of the record sealed with it.
    pub result: &'a (dyn Fn(u64) -> serde_json::Value + Sync),
    pub key: Option<inbox::IdemKey<'a>>,
}

/// Whether `jti` (from a token whose signature verified) is the one whose SHA-256 a team row holds.
pub fn team_jti_matches(stored_sha256: &str, jti: &str) -> bool {
    use sha2::Digest;
    !stored_sha256.is_empty() && hex::encode(sha2::Sha256::digest(jti.as_bytes())) == stored_sha256
}
