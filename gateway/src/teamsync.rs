//! A serving team gateway keeps its team vaults' clones fresh (docs/contract.md#team-mode): it
//! fetches every `[team] fetch_seconds` (15 s) to see people's pushes, and at once when the
//! team's database announces a vault added or removed; each round also notes the gateway
//! alive. A fetched change reaches the index through the vault's watcher, note by note. A
//! thread of its own packs the clones when due; another settles, every 5 s, the jobs a stopped
//! gateway left on a vault nobody writes to.

use std::sync::Arc;
use std::time::Duration;

use engine::core::Core;
use teamstate::{Heard, Listener, VAULTS_CHANNEL};

/// How often a serving gateway looks for jobs left on its team vaults.
const SETTLE_EVERY: Duration = Duration::from_secs(5);

/// Starts the syncing thread of a team gateway (nothing for a local home); it ends with `core`.
pub(crate) fn start(core: &Arc<Core>) {
    let Some(team) = core.config().team.clone() else {
        return;
    };
    if core.team().is_none() {
        return;
    }
    // The calls other gateways hand to this one while it holds a vault's lease.
    crate::teamcalls::start(core);
    // A gateway starts serving from its remotes as they are now (the CLI opened the clones as
    // they were).
    core.settings().sync_team_vaults();
    let every = Duration::from_secs(team.fetch_seconds.max(1));
    let weak = Arc::downgrade(core);
    let started = std::thread::Builder::new()
        .name("team-vaults".into())
        .spawn(move || {
            loop {
                // A listener of its own; gone (the database restarted), it is started again.
                let listener = Listener::start(&team.database, VAULTS_CHANNEL).ok();
                loop {
                    let heard = match &listener {
                        Some(l) => l.next(every),
                        // The database away: try again soon, so its vaults are served
                        // shortly after it is back.
                        None => {
                            std::thread::sleep(every.min(Duration::from_secs(2)));
                            Heard::Lost
                        }
                    };
                    let Some(core) = weak.upgrade() else {
                        return;
                    };
                    core.settings().sync_team_vaults();
                    if let Some(team) = core.team()
                        && let Err(e) = team.heartbeat()
                    {
                        tracing::warn!(error = %e, "noting this gateway alive in the team failed");
                    }
                    drop(core);
                    if heard == Heard::Lost {
                        break;
                    }
                }
            }
        });
    if let Err(e) = started {
        tracing::warn!(error = %e, "the team vaults' sync did not start");
    }
    // Jobs a stopped gateway left on a vault nobody writes to, settled (engine::settle_idle_jobs).
    let weak = Arc::downgrade(core);
    let started = std::thread::Builder::new()
        .name("team-recovery".into())
        .spawn(move || {
            loop {
                std::thread::sleep(SETTLE_EVERY);
                let Some(core) = weak.upgrade() else {
                    return;
                };
                engine::settle_idle_jobs(&core);
            }
        });
    if let Err(e) = started {
        tracing::warn!(error = %e, "the team's idle recovery did not start");
    }
    // The clones packed when due (engine::pack_team_clones), every minute, on a thread of their
    // own: a long repack must not hold back the fetches.
    let weak = Arc::downgrade(core);
    let started = std::thread::Builder::new()
        .name("team-pack".into())
        .spawn(move || {
            loop {
                let Some(core) = weak.upgrade() else {
                    return;
                };
                engine::pack_team_clones(&core);
                drop(core);
                std::thread::sleep(Duration::from_secs(60));
            }
        });
    if let Err(e) = started {
        tracing::warn!(error = %e, "the team clones' packing did not start");
    }
}
