//! Running again the jobs a stopped process left queued (engine::jobs): each as its caller,
//! through the same call an agent makes, so it is checked, keyed and audited like the first.

use std::sync::Arc;

use engine::approval::ClientApproval;
use engine::core::Core;
use engine::error::GatewayError;

/// Runs every orphaned job once, oldest first; called on a blocking thread at start.
pub(crate) fn resume(core: &Arc<Core>) {
    let orphans = match core.jobs().orphans() {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!(error = %e, "the jobs a stopped process left could not be read");
            return;
        }
    };
    for o in orphans {
        tracing::info!(job = o.job.id, tool = %o.job.tool, vault = %o.job.vault, "running a job a stopped process left queued");
        // No person can be asked: the caller is gone. A write that needs a person's yes is refused.
        let outcome = match o.args {
            serde_json::Value::Object(args) => {
                crate::dispatch::call_tool(core, &o.caller, &o.job.tool, args, &ClientApproval::Unavailable)
                    .map(engine::Audited::into_inner)
                    .unwrap_or_else(|| {
                        Err(GatewayError::InvalidArgument(format!(
                            "unknown tool '{}'",
                            o.job.tool
                        )))
                    })
            }
            _ => Err(GatewayError::InvalidArgument(
                "the job's arguments are not an object".into(),
            )),
        };
        // A call refused before it reached the writer ends its job here (a write ends its own).
        core.jobs().finish(o.job.id, &outcome);
    }
}
