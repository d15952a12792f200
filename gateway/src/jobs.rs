//! Running again the jobs a stopped process left queued (engine::jobs): each taken over just
//! before it runs, as its caller, through the same call an agent makes, so it is checked, keyed
//! and audited like the first.

use std::sync::Arc;

use engine::approval::ClientApproval;
use engine::core::Core;
use engine::error::GatewayError;
use engine::jobs::JobRef;

/// Runs every orphaned job once, oldest first; called on a blocking thread at start.
pub(crate) fn resume(core: &Arc<Core>) {
    let orphans = match core.jobs().orphans() {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!(error = %e, "the jobs a stopped process left could not be read");
            return;
        }
    };
    for job in orphans {
        // Checked (age, credential, still unclaimed) and claimed right before it runs.
        let o = match core.jobs().take(&job) {
            Ok(Some(o)) => o,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(error = %e, job = job.id, "a job left by a stopped process could not be taken over; the next start tries again");
                continue;
            }
        };
        tracing::info!(job = o.job.id, tool = %o.job.tool, vault = %o.job.vault, "running a job a stopped process left queued");
        // No person can be asked: the caller is gone. A write that needs a person's yes is refused.
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match o.args {
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
        }));
        let outcome = run.unwrap_or_else(|_| Err(GatewayError::Internal("running the job panicked".into())));
        // A call refused before it reached the writer ends its job here (a write ends its own).
        core.jobs().finish(
            JobRef {
                id: o.job.id,
                made: true,
            },
            &outcome,
        );
    }
}
