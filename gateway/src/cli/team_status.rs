//! `vaultgate team status`: the team's database, its gateways and each team vault's heads,
//! lease and jobs, read from the database and the remotes (docs/contract.md#team-mode).

use super::*;

use teamstate::PgState;

use super::team::{check_database_url, shown_url, team_config};

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    database: DatabaseStatus,
    gateway: GatewayStatus,
    gateways: Vec<teamstate::GatewaySeen>,
    vaults: Vec<VaultStatus>,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct VaultStatus {
    vault: String,
    /// The gateway that last held the vault's lease (the one applying now when `held`).
    applier: Option<Applier>,
    remote_head: Option<String>,
    local_head: Option<String>,
    pending_jobs: u64,
    /// Jobs left by a gateway that stopped (its gateway does not hold the lease now).
    left_jobs: u64,
    /// How long ago the oldest job began, in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    oldest_job_seconds: Option<u64>,
    /// Calls other gateways handed to the lease's holder, not answered yet.
    handed_calls: HandedCalls,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct HandedCalls {
    /// Not taken yet.
    queued: u64,
    /// Taken by the holder, running.
    running: u64,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Applier {
    gateway: String,
    epoch: i64,
    since: String,
    held: bool,
    /// Gateways waiting for the lease, first in line first.
    waiting: Vec<String>,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct DatabaseStatus {
    url: String,
    reachable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    schema_version: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    team_id: Option<String>,
}

#[derive(serde::Serialize)]
struct GatewayStatus {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<String>,
}

/// `team status`: exit 1 when the database cannot be reached (it says so first).
pub(super) fn status(home: &Home, json: bool) -> Result<(), GatewayError> {
    let team = team_config(home)?;
    check_database_url(&team.database)?;
    let seen = PgState::connect(&team.database).and_then(|store| {
        let status = store.team_status()?;
        let role = store.gateway_role(&team.name)?;
        let mut leases = store.leases()?;
        let mut vaults = Vec::new();
        for v in store.team_vaults()? {
            let jobs = store.job_counts(&v.id)?;
            let handed = store.handed_counts(&v.id)?;
            let lease = leases
                .iter()
                .position(|l| l.vault == v.id)
                .map(|i| leases.swap_remove(i));
            let applier = lease.map(|l| Applier {
                gateway: l.holder,
                epoch: l.epoch,
                since: l.since,
                held: l.held,
                waiting: l.waiting,
            });
            vaults.push((v, jobs, handed, applier));
        }
        Ok((status, role, vaults))
    });
    let (status, role, vaults, failure) = match seen {
        Ok((status, role, vaults)) => (status, role, vaults, None),
        Err(e) => (None, None, Vec::new(), Some(e)),
    };
    let git = engine::git::Program::default();
    let vaults: Vec<VaultStatus> = vaults
        .into_iter()
        .map(|(v, jobs, (queued, running), applier)| VaultStatus {
            vault: v.id.clone(),
            applier,
            // Unreachable: shown as unknown, the status goes on.
            remote_head: engine::remote::remote_head(&git, &v).ok().flatten(),
            local_head: engine::remote::clone_head(&git, &home.dir.join("vaults").join(&v.id)),
            pending_jobs: jobs.pending,
            left_jobs: jobs.left,
            oldest_job_seconds: jobs.oldest_seconds,
            handed_calls: HandedCalls { queued, running },
        })
        .collect();
    let reachable = failure.is_none();
    let report = Status {
        database: DatabaseStatus {
            url: shown_url(&team.database),
            reachable,
            schema_version: status.as_ref().map(|s| s.schema_version),
            team_id: status.as_ref().map(|s| s.team_id.clone()),
        },
        gateway: GatewayStatus {
            name: team.name.clone(),
            role,
        },
        gateways: status.map(|s| s.gateways).unwrap_or_default(),
        vaults,
    };
    if json {
        json_out(&report)?;
    } else {
        out(&format!(
            "database: {} ({})",
            report.database.url,
            match (&report.database.schema_version, reachable) {
                (Some(v), true) => format!("reachable, schema version {v}"),
                _ => "unreachable".into(),
            }
        ));
        out(&format!(
            "gateway: {} ({})",
            report.gateway.name,
            report.gateway.role.as_deref().unwrap_or("unknown")
        ));
        for g in &report.gateways {
            out(&format!(
                "  {}\t{}\tlast seen {}\t{}",
                g.name, g.role, g.last_seen, g.version
            ));
        }
        let short = |h: &Option<String>| {
            h.as_deref()
                .map_or("unknown".into(), |h| h.chars().take(12).collect::<String>())
        };
        for v in &report.vaults {
            let note = match (&v.remote_head, &v.local_head) {
                (Some(r), Some(l)) if r == l => "up to date",
                (_, None) => "not cloned here yet",
                (None, _) => "remote unreachable",
                _ => "behind (fetched within fetch_seconds while serving)",
            };
            out(&format!(
                "vault {}: remote {}, here {} ({note})",
                v.vault,
                short(&v.remote_head),
                short(&v.local_head)
            ));
            if let Some(a) = &v.applier {
                let waiting = match a.waiting.is_empty() {
                    true => String::new(),
                    false => format!("; waiting: {}", a.waiting.join(", ")),
                };
                let left = match (v.left_jobs, v.oldest_job_seconds) {
                    (0, _) => String::new(),
                    (n, Some(s)) => {
                        format!(", {n} left by a gateway that stopped (the oldest began {s} s ago)")
                    }
                    (n, None) => format!(", {n} left by a gateway that stopped"),
                };
                let handed = match (v.handed_calls.queued, v.handed_calls.running) {
                    (0, 0) => String::new(),
                    (q, r) => format!("; calls handed to it by other gateways: {r} running, {q} queued"),
                };
                out(&format!(
                    "  lease: {} (epoch {}, since {}){}; {} job(s) in flight{left}{waiting}{handed}",
                    a.gateway,
                    a.epoch,
                    a.since,
                    if a.held { ", applying now" } else { ", free" },
                    v.pending_jobs.saturating_sub(v.left_jobs)
                ));
            }
        }
    }
    failure.map_or(Ok(()), Err)
}
