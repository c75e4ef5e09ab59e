//! Host discovery: map the unmapped compute nodes (or compute services) of
//! every enabled cell, or of one given cell.
//!
//! Unlike upstream, concurrent runs are safe and converge: host mappings are
//! inserted with `ON CONFLICT DO NOTHING` on the unique host index (so a run
//! that loses a race simply finds the mapping there), and compute nodes are
//! marked mapped only after their host mapping exists (so an interrupted run
//! is completed by the next one). A host found by a run counts as
//! discovered when it is mapped to that cell afterwards, whoever inserted the
//! mapping; several concurrent runs therefore report the same hosts.
//!
//! [`run_periodic`] is what api-super calls to discover hosts every N
//! seconds ([`DiscoveryConfig`]).

use std::time::Duration;

use fabric::ids::CellUuid;
use serde::{Deserialize, Serialize};

use crate::db::{ApiDb, CellDb, CellMapping};
use crate::Error;

/// Options of one discovery run.
#[derive(Debug, Clone, Default)]
pub struct DiscoverOptions {
    /// Only this cell (even when disabled); otherwise every enabled cell.
    pub cell: Option<CellUuid>,
    /// Look at compute services instead of compute nodes.
    pub by_service: bool,
}

/// What one cell's discovery found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellReport {
    /// The cell.
    pub cell: CellUuid,
    /// Its name.
    pub name: Option<String>,
    /// Unmapped hosts found in the cell, now mapped to it.
    pub mapped: Vec<String>,
    /// Of those, how many this run inserted (the rest: a concurrent run).
    pub inserted: usize,
    /// Hosts found in this cell but mapped to another cell (left alone).
    pub elsewhere: Vec<String>,
}

/// The outcome of [`discover_hosts`].
#[derive(Debug, Default)]
pub struct Discovery {
    /// One report per cell looked at.
    pub cells: Vec<CellReport>,
    /// Cells that could not be looked at (e.g. database unreachable).
    pub failed: Vec<(CellUuid, Error)>,
    /// Disabled cells skipped.
    pub skipped_disabled: Vec<CellUuid>,
}

impl Discovery {
    /// Every (cell, host) discovered, sorted.
    pub fn mapped_hosts(&self) -> Vec<(CellUuid, String)> {
        let mut v: Vec<_> = self
            .cells
            .iter()
            .flat_map(|c| c.mapped.iter().map(move |h| (c.cell, h.clone())))
            .collect();
        v.sort();
        v
    }
}

/// Discovers hosts; `status` gets one human-readable line per step.
pub async fn discover_hosts(
    api: &ApiDb,
    opts: &DiscoverOptions,
    status: &mut (dyn FnMut(String) + Send),
) -> Result<Discovery, Error> {
    let cells: Vec<CellMapping> = match &opts.cell {
        Some(u) => vec![api.cell_required(u).await?],
        None => api.cells().await?,
    };
    status(format!("Found {} cell mapping(s).", cells.len()));
    let mut out = Discovery::default();
    for cell in cells {
        if cell.is_cell0() {
            status("Skipping cell0 since it does not contain hosts.".to_owned());
            continue;
        }
        if cell.disabled && opts.cell.is_none() {
            status(format!("Skipping disabled cell {}.", cell.uuid));
            out.skipped_disabled.push(cell.uuid);
            continue;
        }
        status(format!(
            "Getting {} from cell '{}': {}",
            if opts.by_service {
                "compute services"
            } else {
                "compute nodes"
            },
            cell.name_or_empty(),
            cell.uuid
        ));
        match discover_cell(api, &cell, opts.by_service).await {
            Ok(report) => {
                for h in &report.mapped {
                    status(format!("Mapped host '{h}' to cell {}", cell.uuid));
                }
                for h in &report.elsewhere {
                    status(format!(
                        "Host '{h}' of cell {} is already mapped to another cell; left alone",
                        cell.uuid
                    ));
                }
                metrics::counter!(crate::metrics::HOSTS_DISCOVERED)
                    .increment(report.inserted as u64);
                out.cells.push(report);
            }
            Err(e) => {
                status(format!(
                    "Cannot discover hosts of cell {}: {}",
                    cell.uuid,
                    e.one_line()
                ));
                out.failed.push((cell.uuid, e));
            }
        }
    }
    Ok(out)
}

async fn discover_cell(
    api: &ApiDb,
    cell: &CellMapping,
    by_service: bool,
) -> Result<CellReport, Error> {
    let db = CellDb::open(&cell.database_connection).await?;
    let res = async {
        let found = if by_service {
            let hosts = db.compute_service_hosts().await?;
            let mapped: std::collections::HashSet<String> = api
                .hosts_cells(&hosts)
                .await?
                .into_iter()
                .map(|(h, _)| h)
                .collect();
            hosts.into_iter().filter(|h| !mapped.contains(h)).collect()
        } else {
            db.unmapped_compute_hosts().await?
        };
        let inserted = api.map_hosts(cell.id, &found).await?.len();
        let mut report = CellReport {
            cell: cell.uuid,
            name: cell.name.clone(),
            mapped: Vec::new(),
            inserted,
            elsewhere: Vec::new(),
        };
        for (host, cell_id) in api.hosts_cells(&found).await? {
            if cell_id == cell.id {
                report.mapped.push(host);
            } else {
                report.elsewhere.push(host);
            }
        }
        report.mapped.sort();
        report.elsewhere.sort();
        if !by_service {
            // Upstream also marks nodes whose host is mapped elsewhere.
            db.mark_mapped(&found).await?;
        }
        Ok(report)
    }
    .await;
    db.close().await;
    res
}

/// Periodic discovery settings (api-super's `[discovery]` section).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiscoveryConfig {
    /// Seconds between two discoveries; 0 turns periodic discovery off.
    pub interval_secs: u64,
    /// Discover by compute service instead of compute node.
    pub by_service: bool,
}

/// Discovers hosts of every enabled cell every `config.interval_secs`
/// seconds, forever (returns at once when the interval is 0). Safe to run in
/// every api-super replica at once. Spawn it; abort the task to stop it.
pub async fn run_periodic(api: ApiDb, config: DiscoveryConfig) {
    if config.interval_secs == 0 {
        return;
    }
    let opts = DiscoverOptions {
        cell: None,
        by_service: config.by_service,
    };
    let mut tick = tokio::time::interval(Duration::from_secs(config.interval_secs));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match discover_hosts(&api, &opts, &mut |line| tracing::debug!("{line}")).await {
            Ok(d) => {
                for (cell, host) in d.mapped_hosts() {
                    tracing::info!(%cell, %host, "discovered host");
                }
                for (cell, e) in &d.failed {
                    tracing::warn!(%cell, error = %e.one_line(), "host discovery failed for a cell");
                }
            }
            Err(e) => tracing::warn!(error = %e.one_line(), "host discovery failed"),
        }
    }
}
