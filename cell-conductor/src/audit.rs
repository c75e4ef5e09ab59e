//! Placement reconciliation of one cell, on its own (issue 31): what
//! `nova-manage placement audit --delete` and `heal_allocations` do by
//! hand, done by the cell conductor every `audit_interval`.
//!
//! Per compute node of the cell (its provider in placement has the node's
//! uuid) one read of the provider's allocations, compared with the cell's
//! instances:
//!
//! - a live instance on the node, settled (ACTIVE, SHUTOFF, PAUSED,
//!   SUSPENDED, no task) but without an allocation gets one from its
//!   flavor (`healed`);
//! - a consumer on the node that is a live instance of another node has its
//!   allocations put on that node's provider (`moved`);
//! - a consumer that is no live instance of the cell (deleted, or unknown)
//!   loses its allocations once it has been seen so twice, one audit
//!   apart: a claim the scheduler has just made for a build whose instance
//!   row is not written yet is never taken for an orphan (`removed`).
//!
//! Instances in BUILD, in ERROR (a failed build's claim is removed on
//! purpose) or with a task under way are left alone.

use std::collections::{HashMap, HashSet};

use fabric::ids::{InstanceUuid, ProviderUuid};
use fabric::rpc::vm_state as vs;
use tracing::{info, warn};

use crate::db::instances::InstanceRow;
use crate::error::{chain, Result};
use crate::metrics;
use crate::placement::{PlacementError, Resources};
use crate::service::Conductor;

/// What one audit did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditReport {
    /// Providers read.
    pub providers: usize,
    /// Missing allocations created.
    pub healed: u32,
    /// Allocations put back on the instance's own node.
    pub moved: u32,
    /// Orphaned allocations removed.
    pub removed: u32,
    /// Orphans seen for the first time (removed at the next audit if
    /// still orphaned).
    pub suspects: u32,
}

/// Consumers seen orphaned by the previous audit (per conductor).
#[derive(Debug, Default)]
pub struct Suspects(std::sync::Mutex<HashSet<String>>);

fn settled(r: &InstanceRow) -> bool {
    r.task_state.is_none()
        && matches!(
            r.vm_state.as_deref(),
            Some(vs::ACTIVE | vs::STOPPED | vs::PAUSED | vs::SUSPENDED)
        )
}

fn resources(r: &InstanceRow) -> Resources {
    Resources {
        vcpus: r.vcpus.unwrap_or(0),
        memory_mb: r.memory_mb.unwrap_or(0),
        disk_gb: r.root_gb.unwrap_or(0) + r.ephemeral_gb.unwrap_or(0),
    }
}

impl Conductor {
    /// One audit of every compute node of the cell.
    pub(crate) async fn audit_placement(&self, suspects: &Suspects) -> Result<AuditReport> {
        let mut report = AuditReport::default();
        let nodes = self.db.compute_nodes().await?;
        let providers: HashMap<(String, String), ProviderUuid> = nodes
            .iter()
            .filter_map(|n| {
                let p = n.uuid.parse::<ProviderUuid>().ok()?;
                Some(((n.host.clone(), n.hypervisor_hostname.clone()), p))
            })
            .collect();
        let mut seen_orphans = HashSet::new();
        for ((host, node), provider) in &providers {
            let consumers = match self.placement.consumers_of(*provider).await {
                Ok(c) => c,
                // Nothing to reconcile against.
                Err(PlacementError::NotConfigured) => return Ok(report),
                Err(e) => {
                    warn!(%host, %node, error = %chain(&e), "could not read the provider's allocations; next audit");
                    continue;
                }
            };
            report.providers += 1;
            let uuids: Vec<InstanceUuid> =
                consumers.iter().filter_map(|c| c.parse().ok()).collect();
            let rows = self.db.instances_for_host(host, &uuids).await?;
            let on_node = |r: &InstanceRow| {
                !r.deleted && r.host.as_deref() == Some(host) && r.node.as_deref() == Some(node)
            };
            for r in rows.iter().filter(|r| on_node(r) && settled(r)) {
                if consumers.contains(&r.uuid) {
                    continue;
                }
                self.put_claim(r, *provider, "healed", &mut report).await;
            }
            for c in &consumers {
                match rows.iter().find(|r| r.uuid == *c) {
                    Some(r) if on_node(r) => {}
                    Some(r) if !r.deleted => {
                        // Live on another node: its claim belongs there.
                        let key = (
                            r.host.clone().unwrap_or_default(),
                            r.node.clone().unwrap_or_default(),
                        );
                        if let (Some(to), true) = (providers.get(&key), settled(r)) {
                            self.put_claim(r, *to, "moved", &mut report).await;
                        }
                    }
                    _ => {
                        seen_orphans.insert(c.clone());
                    }
                }
            }
        }
        let before = std::mem::take(&mut *suspects.0.lock().unwrap_or_else(|p| p.into_inner()));
        let mut next = HashSet::new();
        for c in seen_orphans {
            if !before.contains(&c) {
                report.suspects += 1;
                next.insert(c);
                continue;
            }
            let Ok(uuid) = c.parse::<InstanceUuid>() else {
                continue;
            };
            match self.placement.delete_allocations(uuid).await {
                Ok(()) => {
                    info!(consumer = %c, "orphaned allocations removed (no live instance of this cell, two audits running)");
                    metrics::healed("orphan_removed");
                    report.removed += 1;
                }
                Err(e) => {
                    warn!(consumer = %c, error = %chain(&e), "could not remove orphaned allocations; next audit");
                    next.insert(c);
                }
            }
        }
        *suspects.0.lock().unwrap_or_else(|p| p.into_inner()) = next;
        Ok(report)
    }

    async fn put_claim(
        &self,
        r: &InstanceRow,
        to: ProviderUuid,
        what: &'static str,
        report: &mut AuditReport,
    ) {
        let Ok(uuid) = r.uuid.parse::<InstanceUuid>() else {
            return;
        };
        match self
            .placement
            .move_claim(uuid, to, resources(r), &r.project_id, &r.user_id)
            .await
        {
            Ok(true) => {
                info!(instance = %r.uuid, provider = %to, what, "allocation reconciled");
                if what == "healed" {
                    metrics::healed("allocation_healed");
                    report.healed += 1;
                } else {
                    metrics::healed("allocation_moved");
                    report.moved += 1;
                }
            }
            Ok(false) => {
                warn!(instance = %r.uuid, provider = %to, "the provider has no room for the instance's allocation")
            }
            Err(e) => {
                warn!(instance = %r.uuid, error = %chain(&e), "could not reconcile the allocation; next audit")
            }
        }
    }
}
