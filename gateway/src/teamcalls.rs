//! One applier at a time (docs/contract.md#team-lease "One applier at a time"): a team vault's
//! apply, undo, redo or executed critical call received while another gateway holds the vault's lease is handed to that
//! gateway, which runs it as its caller — through [`crate::dispatch::call_tool_here`], so checked,
//! keyed, grouped with its own applies and audited like a call it received — and writes the
//! answer back; the receiver answers it. A call the holder does not take (it let the lease go
//! meanwhile), or took and left (it lost the lease: died, cut off), is taken back and run here
//! with the same idempotency key, which settles whatever the first run left. A call still
//! queued or running when its receiver stops waiting stays (a job): the holder runs it, and a
//! retry with the same key waits for it.
//!
//! It must never run a handed call with a credential it did not read again, hand a call a person
//! must approve (nobody could be asked), or answer a call without the key that makes running it
//! twice harmless.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use engine::error::GatewayError;
use engine::storage::{Handed, HandedCall};
use engine::{Audited, Caller, ClientApproval, Core};
use serde_json::{Map, Value, json};
use teamstate::{CALLS_CHANNEL, Heard, Listener};

/// The calls handed on: writes that wait for the vault's writer and carry an idempotency key
/// (besides a critical call's second call, which executes its challenge).
const HANDED: &[&str] = &["apply_proposal", "history_undo", "history_redo"];
/// The largest arguments handed on (an apply's, undo's or redo's are a few hundred bytes; larger
/// ones, unknown fields and all, are refused where they arrived).
const MAX_ARGS_BYTES: usize = 16 << 10;
/// At most this many handed calls run at once in one gateway (each a blocking thread).
const MAX_RUNNING: usize = 16;
/// How often the applier looks for handed calls while it holds a lease, when nothing announced
/// one.
const LOOK_EVERY: Duration = Duration::from_millis(100);
/// A call taken by a gateway that has not held the lease for this long, and is not waiting in
/// line for it, is taken back.
const LEFT_AFTER: Duration = Duration::from_millis(1_500);
/// A call taken by a gateway waiting in line for the lease this long is taken back (its answer
/// may have been lost: the database was away when it was written).
const LEFT_WAITING: Duration = Duration::from_secs(10);
/// The longest pause between two looks of a receiver at its handed call.
const MAX_PAUSE: Duration = Duration::from_millis(25);

/// Runs `tool` at the gateway holding its team vault's lease, when another one holds it: the
/// answer it wrote back. `None`: run it here (no team vault, nobody else holds the lease, the
/// holder let it go, or the database did not answer: the call here fails closed).
pub(crate) fn hand(
    core: &Core,
    caller: &Caller,
    tool: &str,
    args: &Map<String, Value>,
    approval: &ClientApproval<'_>,
) -> Option<Audited<Result<Value, GatewayError>>> {
    let team = core.team()?;
    // SECURITY(T-APPROVE1): a call a person may have to approve stays where the person is.
    let unattended = !matches!(approval, ClientApproval::App(_) | ClientApproval::Answered { .. })
        && !caller.credential.approve_in_client;
    let key = args
        .get("idempotencyKey")
        .and_then(Value::as_str)
        .filter(|k| !k.trim().is_empty())?;
    let spec = policy::tools::find(tool)?;
    let critical = spec.kind == policy::tools::ToolKind::Critical;
    if !(HANDED.contains(&tool) || critical) || !unattended {
        return None;
    }
    let value = Value::Object(args.clone());
    if critical && !engine::critical::executes_challenge(&value) {
        return None;
    }
    // A tier that may not make the call is refused here, at no other gateway's cost.
    if !spec.allowed_for(caller.credential.tier, caller.credential.approve_in_client) {
        return None;
    }
    // Bounded before it is stored for another gateway: an argument over a limit is refused (and
    // recorded) here, as core.call refuses it.
    if engine::limits::check_args(tool, &value, &core.config().limits).is_err()
        || value.to_string().len() > MAX_ARGS_BYTES
    {
        return None;
    }
    let requested = args.get("vault").and_then(Value::as_str);
    let v = core.resolve_vault(&caller.credential, requested).ok()?;
    if !v.is_team() {
        return None;
    }
    // A key answered already is answered here, without waiting for anyone.
    if !matches!(team.idempotency(caller.credential.id.as_str(), key), Ok(None)) {
        return None;
    }
    let call = HandedCall {
        id: uuid::Uuid::now_v7().to_string(),
        vault: v.id.clone(),
        gateway: team.gateway().to_owned(),
        credential: caller.credential.id.as_str().to_owned(),
        transport: caller.transport.as_str().to_owned(),
        tool: tool.to_owned(),
        args: value,
    };
    // A retry of a call handed earlier (its receiver stopped waiting) waits for that one.
    let ttl = core.config().limits.job_ttl_seconds;
    let earlier = match team.pending_like(&call, ttl) {
        Ok(earlier) => earlier,
        Err(e) => {
            tracing::debug!(error = %e, "the handed calls could not be looked at");
            return None;
        }
    };
    let own = earlier.is_none();
    let id = match earlier {
        Some(id) => id,
        None => match team.hand_call(&call) {
            Ok(true) => call.id.clone(),
            Ok(false) => return None,
            Err(e) => {
                tracing::debug!(error = %e, "a call could not be handed to the vault's applier");
                return None;
            }
        },
    };
    let wait = Duration::from_secs(core.config().limits.apply_wait_seconds.max(1));
    let deadline = Instant::now() + wait;
    let mut pause = Duration::from_millis(2);
    // Since when the gateway that took it has not held the lease.
    let mut left_since: Option<Instant> = None;
    loop {
        std::thread::sleep(pause);
        pause = (pause * 2).min(MAX_PAUSE);
        let now = Instant::now();
        let here = match team.handed(&id) {
            // Another call's answer (the one this retries): the key answers this one, here,
            // with a record of its own.
            Ok(Handed::Answered(_)) if !own => true,
            Ok(Handed::Answered(answer)) => {
                if let Err(e) = team.forget_handed(&id) {
                    tracing::debug!(error = %e, "an answered handed call was not forgotten");
                }
                return Some(answered(core, caller, spec, args, &v.id, answer));
            }
            Ok(Handed::Gone) => true,
            // Queued, and nobody else holds the lease any more: run here.
            Ok(Handed::Waiting {
                taken_by: None,
                holder,
                ..
            }) => {
                holder.is_none_or(|h| h == team.gateway())
                    && team.take_back_handed(&id, None).unwrap_or(false)
            }
            Ok(Handed::Waiting {
                taken_by: Some(by),
                holder,
                taker_queued,
            }) => match holder.as_deref() == Some(by.as_str()) {
                true => {
                    left_since = None;
                    false
                }
                false => {
                    // A taker waiting in line for the lease runs the call at its turn (taken
                    // back, it would wait in line again here); one neither holding nor waiting
                    // for the lease has left it.
                    let since = *left_since.get_or_insert(now);
                    let left = match taker_queued {
                        true => LEFT_WAITING,
                        false => LEFT_AFTER,
                    };
                    now.duration_since(since) >= left
                        && team.take_back_handed(&id, Some(&by)).unwrap_or(false)
                }
            },
            Err(e) => {
                tracing::debug!(error = %e, "a handed call could not be looked at");
                false
            }
        };
        if here {
            return None;
        }
        if now >= deadline {
            // A job: it stays queued (run when the lease's holder takes it, within
            // `job_ttl_seconds`) or runs on, and the retry with the same key waits for it or
            // answers its result.
            let busy = GatewayError::VaultBusy(format!(
                "another gateway of the team is applying to vault '{}' and did not finish this \
                 call within {} s; the call stays queued for it (it runs within {} s or never): \
                 retry with the same idempotencyKey for its result",
                v.id,
                wait.as_secs(),
                ttl
            ));
            return Some(core.call(caller, spec, &Value::Object(args.clone()), |_| {
                Err::<Value, _>(busy)
            }));
        }
    }
}

/// The answer a holder wrote back, once this gateway's clone holds its commit; a refusal the
/// holder could not record is recorded here.
fn answered(
    core: &Core,
    caller: &Caller,
    spec: &'static policy::tools::ToolSpec,
    args: &Map<String, Value>,
    vault: &str,
    answer: Value,
) -> Audited<Result<Value, GatewayError>> {
    let result = match (answer.get("ok"), answer.get("error")) {
        (Some(v), _) => {
            let mut v = v.clone();
            // Read-your-writes: the caller's next read comes here.
            if let Some(commit) = v.get("commit").and_then(Value::as_str)
                && !engine::hold_pushed(core, vault, commit)
                && v.get("index").is_some()
            {
                v["index"] = json!("failed");
            }
            Ok(v)
        }
        (None, Some(e)) => Err(refusal(e)),
        (None, None) => Err(GatewayError::Internal(
            "a handed call's answer is malformed".into(),
        )),
    };
    match answer.get("seq").and_then(Value::as_u64) {
        Some(seq) => Audited::relayed(result, seq),
        None => core.call(caller, spec, &Value::Object(args.clone()), |_| result),
    }
}

/// A refusal as the holder answered it: its code and message.
fn refusal(e: &Value) -> GatewayError {
    let code = e
        .get("code")
        .cloned()
        .and_then(|c| serde_json::from_value::<policy::ErrorCode>(c).ok());
    let message = e
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("the gateway that ran this call refused it")
        .to_owned();
    match code {
        Some(code) => GatewayError::Again(code, message),
        None => GatewayError::Internal(message),
    }
}

/// The answer to write back for `out`.
fn answer_of(out: &Audited<Result<Value, GatewayError>>) -> Value {
    let mut answer = match out.value() {
        Ok(v) => json!({ "ok": v }),
        Err(e) => json!({ "error": { "code": e.code().as_str(), "message": e.to_string() } }),
    };
    if let Some(seq) = out.seq() {
        answer["seq"] = json!(seq);
    }
    answer
}

/// Calls running here for other gateways.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Starts the thread that takes the calls handed to this gateway while it holds a lease (nothing
/// for a local home); it ends with `core`.
pub(crate) fn start(core: &Arc<Core>) {
    let Some(team) = core.config().team.clone() else {
        return;
    };
    if core.team().is_none() {
        return;
    }
    let weak = Arc::downgrade(core);
    let started = std::thread::Builder::new()
        .name("team-applier".into())
        .spawn(move || {
            loop {
                // A listener of its own; gone (the database restarted), it is started again.
                let listener = Listener::start(&team.database, CALLS_CHANNEL).ok();
                loop {
                    let heard = match &listener {
                        Some(l) => l.next(LOOK_EVERY),
                        None => {
                            std::thread::sleep(Duration::from_secs(1));
                            Heard::Lost
                        }
                    };
                    let Some(core) = weak.upgrade() else {
                        return;
                    };
                    take_handed(&core);
                    drop(core);
                    if heard == Heard::Lost {
                        break;
                    }
                }
            }
        });
    if let Err(e) = started {
        tracing::warn!(error = %e, "the team's applier thread did not start");
    }
}

/// Takes the calls handed for each team vault whose lease this process holds, each run on a
/// thread of its own.
fn take_handed(core: &Arc<Core>) {
    let Some(team) = core.team() else { return };
    let ttl = core.config().limits.job_ttl_seconds;
    for v in core.all_vaults().into_iter().filter(|v| v.is_team()) {
        let free = MAX_RUNNING.saturating_sub(RUNNING.load(Ordering::SeqCst));
        if free == 0 {
            return;
        }
        let calls = match team.take_handed(&v.id, free as u32, ttl) {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, vault = %v.id, "handed calls could not be taken");
                continue;
            }
        };
        for call in calls {
            RUNNING.fetch_add(1, Ordering::SeqCst);
            let core = core.clone();
            let id = call.id.clone();
            let spawned = std::thread::Builder::new()
                .name("team-handed".into())
                .spawn(move || {
                    run_handed(&core, call);
                    RUNNING.fetch_sub(1, Ordering::SeqCst);
                });
            if let Err(e) = spawned {
                RUNNING.fetch_sub(1, Ordering::SeqCst);
                // Its receiver takes it back once this gateway lets the lease go.
                tracing::warn!(error = %e, call = %id, "a handed call could not be started");
            }
        }
    }
}

/// Runs one handed call as its caller and writes the answer back.
fn run_handed(core: &Core, call: HandedCall) {
    let Some(team) = core.team() else { return };
    tracing::debug!(call = %call.id, tool = %call.tool, from = %call.gateway, "running a call handed by another gateway");
    let answer = match caller_of(core, &call).and_then(|caller| run_as(core, &caller, &call)) {
        Ok(out) => answer_of(&out),
        // Unrecorded here: the receiver records the refusal.
        Err(e) => json!({ "error": { "code": e.code().as_str(), "message": e.to_string() } }),
    };
    match team.answer_handed(&call.id, &answer) {
        Ok(true) => {}
        // Taken back: its receiver runs it with the same key, which answers it.
        Ok(false) => tracing::debug!(call = %call.id, "a handed call was taken back before its answer"),
        Err(e) => tracing::warn!(error = %e, "a handed call's answer was not written back"),
    }
}

/// The call as its caller, in this process; `Err`: it did not run (nothing recorded).
fn run_as(
    core: &Core,
    caller: &Caller,
    call: &HandedCall,
) -> Result<Audited<Result<Value, GatewayError>>, GatewayError> {
    let Value::Object(args) = call.args.clone() else {
        return Err(GatewayError::InvalidArgument(
            "the call's arguments are not an object".into(),
        ));
    };
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        crate::dispatch::call_tool_here(
            core,
            caller,
            &call.tool,
            args,
            &ClientApproval::Unavailable,
            Some(&call.gateway),
        )
    }));
    match run {
        Ok(Some(out)) => Ok(out),
        Ok(None) => Err(GatewayError::InvalidArgument(format!(
            "unknown tool '{}'",
            call.tool
        ))),
        Err(_) => Err(GatewayError::Internal("running the call panicked".into())),
    }
}

/// The handed call's caller as its credential is now (SECURITY(T-TEAM4)): a revoked, expired or
/// unknown credential runs nothing; its tier and vaults are checked by the call itself.
fn caller_of(core: &Core, call: &HandedCall) -> Result<Caller, GatewayError> {
    let team = core
        .team()
        .ok_or(GatewayError::Unauthorized("not a team gateway"))?;
    let credential = team
        .credential(&call.credential)?
        .ok_or(GatewayError::Unauthorized("unknown credential"))?;
    if credential.is_revoked() {
        return Err(GatewayError::CredentialRevoked);
    }
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    if credential.is_expired(now) {
        return Err(GatewayError::CredentialExpired);
    }
    let transport = match call.transport.as_str() {
        "stdio" => engine::Transport::Stdio,
        _ => engine::Transport::Http,
    };
    Ok(Caller {
        credential,
        transport,
    })
}
