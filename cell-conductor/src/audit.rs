//! Placement reconciliation of one cell (issue 31): what `nova-manage
//! placement audit --delete` and `heal_allocations` do by hand, done by the
//! cell conductor every `audit_interval` on its own, and on an operator's
//! request (`cell-manage placement audit` / `heal-allocations`, the
//! `placement_audit` and `heal_allocations` calls).
//!
//! A [`Scan`] reads, per compute node of the cell (its provider in
//! placement has the node's uuid), the provider's consumers once, and
//! compares them with the cell's instances:
//!
//! - a live instance on the node, settled (ACTIVE, SHUTOFF, PAUSED,
//!   SUSPENDED, no task) but without an allocation: `missing`;
//! - a consumer on the node that is a live instance of another node:
//!   `misplaced` (its claim belongs on that node's provider);
//! - a consumer that is no live instance of the cell (deleted, or unknown):
//!   `orphaned`.
//!
//! The periodic audit creates missing allocations, moves misplaced settled
//! ones, and removes an orphan once it has been seen so twice, one audit
//! apart: a claim the scheduler has just made for a build whose instance
//! row is not written yet is never taken for an orphan. The operator's
//! audit reads twice, [`CONFIRM_AFTER`] apart, for the same reason.
//!
//! Instances in BUILD, in ERROR (a failed build's claim is removed on
//! purpose) or with a task under way are never given a claim.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use fabric::ids::{InstanceUuid, ProviderUuid};
use fabric::rpc::{self, finding, vm_state as vs};
use tracing::{info, warn};

use crate::db::instances::InstanceRow;
use crate::error::{chain, ConductorError, Result};
use crate::metrics;
use crate::placement::{PlacementError, Resources};
use crate::service::Conductor;

/// How long the operator's audit waits before it reads orphans again.
pub const CONFIRM_AFTER: Duration = Duration::from_secs(1);

/// What one periodic audit did.
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

/// A compute node's provider.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Node {
    host: String,
    node: String,
    provider: ProviderUuid,
}

/// What one read of the providers found.
#[derive(Debug, Default)]
struct Scan {
    providers: usize,
    unread: Vec<String>,
    /// Settled live instances of the node without an allocation there.
    missing: Vec<(InstanceRow, Node)>,
    /// Live instances of another node: the instance, the node holding the
    /// claim, the instance's own node (when it has a compute node record).
    misplaced: Vec<(InstanceRow, Node, Option<Node>)>,
    /// Consumers that are no live instance of the cell.
    orphans: Vec<(String, Node)>,
}

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

fn finding(consumer: &str, on: &Node, kind: &str) -> rpc::AllocationFinding {
    rpc::AllocationFinding {
        consumer: consumer.to_owned(),
        provider: on.provider.to_string(),
        host: on.host.clone(),
        node: on.node.clone(),
        kind: kind.to_owned(),
        ..Default::default()
    }
}

/// Records on `f` what an operator's action came to: `done` (logged and
/// counted under `metric`), or failed with the reason.
fn record(
    f: &mut rpc::AllocationFinding,
    result: std::result::Result<(), String>,
    done: &str,
    metric: &'static str,
) {
    match result {
        Ok(()) => {
            info!(consumer = %f.consumer, provider = %f.provider, action = done,
                "allocation reconciled (operator's request)");
            metrics::healed(metric);
            f.action = done.to_owned();
        }
        Err(e) => {
            f.action = finding::FAILED.to_owned();
            f.detail = e;
        }
    }
}

impl Conductor {
    /// The cell's compute nodes with a provider uuid, keyed by host and node.
    async fn nodes(&self) -> Result<HashMap<(String, String), Node>> {
        Ok(self
            .db
            .compute_nodes()
            .await?
            .into_iter()
            .filter_map(|n| {
                let provider = n.uuid.parse::<ProviderUuid>().ok()?;
                let key = (n.host.clone(), n.hypervisor_hostname.clone());
                let node = Node {
                    host: n.host,
                    node: n.hypervisor_hostname,
                    provider,
                };
                Some((key, node))
            })
            .collect())
    }

    /// One read of every provider of the cell (or of `only`); `None` when
    /// placement is not configured.
    async fn scan(&self, only: Option<ProviderUuid>) -> Result<Option<Scan>> {
        let nodes = self.nodes().await?;
        let mut scan = Scan::default();
        for n in nodes
            .values()
            .filter(|n| only.is_none_or(|p| p == n.provider))
        {
            let consumers = match self.placement.consumers_of(n.provider).await {
                Ok(c) => c,
                Err(PlacementError::NotConfigured) => return Ok(None),
                Err(e) => {
                    warn!(host = %n.host, node = %n.node, error = %chain(&e), "could not read the provider's allocations; skipped");
                    scan.unread.push(format!("{}: {}", n.provider, chain(&e)));
                    continue;
                }
            };
            scan.providers += 1;
            let uuids: Vec<InstanceUuid> =
                consumers.iter().filter_map(|c| c.parse().ok()).collect();
            let rows = self.db.instances_for_host(&n.host, &uuids).await?;
            let on_node = |r: &InstanceRow| {
                !r.deleted
                    && r.host.as_deref() == Some(n.host.as_str())
                    && r.node.as_deref() == Some(n.node.as_str())
            };
            for r in rows.iter().filter(|r| on_node(r) && settled(r)) {
                if !consumers.contains(&r.uuid) {
                    scan.missing.push((r.clone(), n.clone()));
                }
            }
            for c in &consumers {
                match rows.iter().find(|r| r.uuid == *c) {
                    Some(r) if on_node(r) => {}
                    Some(r) if !r.deleted => {
                        let key = (
                            r.host.clone().unwrap_or_default(),
                            r.node.clone().unwrap_or_default(),
                        );
                        let own = nodes.get(&key).cloned();
                        scan.misplaced.push((r.clone(), n.clone(), own));
                    }
                    _ => scan.orphans.push((c.clone(), n.clone())),
                }
            }
        }
        Ok(Some(scan))
    }

    /// Puts `r`'s claim (from its flavor) on `to`, replacing any it has.
    async fn put_claim(&self, r: &InstanceRow, to: &Node) -> std::result::Result<(), String> {
        let uuid = r
            .uuid
            .parse::<InstanceUuid>()
            .map_err(|_| "not an instance uuid".to_owned())?;
        match self
            .placement
            .move_claim(uuid, to.provider, resources(r), &r.project_id, &r.user_id)
            .await
        {
            Ok(true) => Ok(()),
            Ok(false) => Err(format!(
                "provider {} has no room for the instance's allocation",
                to.provider
            )),
            Err(e) => Err(chain(&e)),
        }
    }

    async fn remove(&self, consumer: &str) -> std::result::Result<(), String> {
        let uuid = consumer
            .parse::<InstanceUuid>()
            .map_err(|_| "not an instance uuid".to_owned())?;
        self.placement
            .delete_allocations(uuid)
            .await
            .map_err(|e| chain(&e))
    }

    /// One periodic audit of every compute node of the cell.
    pub(crate) async fn audit_placement(&self, suspects: &Suspects) -> Result<AuditReport> {
        let mut report = AuditReport::default();
        let Some(scan) = self.scan(None).await? else {
            // Nothing to reconcile against.
            return Ok(report);
        };
        report.providers = scan.providers;
        for (r, n) in &scan.missing {
            match self.put_claim(r, n).await {
                Ok(()) => {
                    info!(instance = %r.uuid, provider = %n.provider, "missing allocation created");
                    metrics::healed("allocation_healed");
                    report.healed += 1;
                }
                Err(e) => {
                    warn!(instance = %r.uuid, error = %e, "could not create the allocation; next audit")
                }
            }
        }
        for (r, _, own) in &scan.misplaced {
            let Some(to) = own.as_ref().filter(|_| settled(r)) else {
                continue;
            };
            match self.put_claim(r, to).await {
                Ok(()) => {
                    info!(instance = %r.uuid, provider = %to.provider, "allocation put back on the instance's node");
                    metrics::healed("allocation_moved");
                    report.moved += 1;
                }
                Err(e) => {
                    warn!(instance = %r.uuid, error = %e, "could not move the allocation; next audit")
                }
            }
        }
        let seen: HashSet<String> = scan.orphans.into_iter().map(|(c, _)| c).collect();
        let before = std::mem::take(&mut *suspects.0.lock().unwrap_or_else(|p| p.into_inner()));
        let mut next = HashSet::new();
        for c in seen {
            if !before.contains(&c) {
                report.suspects += 1;
                next.insert(c);
                continue;
            }
            match self.remove(&c).await {
                Ok(()) => {
                    info!(consumer = %c, "orphaned allocations removed (no live instance of this cell, two audits running)");
                    metrics::healed("orphan_removed");
                    report.removed += 1;
                }
                Err(e) => {
                    warn!(consumer = %c, error = %e, "could not remove orphaned allocations; next audit");
                    next.insert(c);
                }
            }
        }
        *suspects.0.lock().unwrap_or_else(|p| p.into_inner()) = next;
        Ok(report)
    }

    /// `placement_audit`: orphaned allocations (seen in two reads
    /// [`CONFIRM_AFTER`] apart) and misplaced ones; with `delete`, orphans
    /// lose their allocations and settled misplaced instances get theirs
    /// on their own node.
    pub(crate) async fn placement_audit(
        &self,
        r: rpc::PlacementAudit,
    ) -> Result<rpc::AllocationReport> {
        let only = match r.provider_uuid.as_str() {
            "" => None,
            p => Some(p.parse::<ProviderUuid>().map_err(|_| {
                ConductorError::BadRequest(format!("{p:?} is not a resource provider uuid"))
            })?),
        };
        let mut out = rpc::AllocationReport::default();
        let Some(first) = self.scan(only).await? else {
            out.no_placement = true;
            return Ok(out);
        };
        let orphans = if first.orphans.is_empty() {
            first.orphans
        } else {
            tokio::time::sleep(CONFIRM_AFTER).await;
            let Some(again) = self.scan(only).await? else {
                out.no_placement = true;
                return Ok(out);
            };
            let still: HashSet<&String> = again.orphans.iter().map(|(c, _)| c).collect();
            first
                .orphans
                .into_iter()
                .filter(|(c, _)| still.contains(c))
                .collect()
        };
        out.providers = first.providers as u32;
        out.unread = first.unread;
        let mut removed = HashSet::new();
        for (c, n) in &orphans {
            let mut f = finding(c, n, finding::ORPHANED);
            // One delete removes the consumer's allocations everywhere.
            if r.delete && removed.insert(c.clone()) {
                record(
                    &mut f,
                    self.remove(c).await,
                    finding::DELETED,
                    "orphan_removed",
                );
            } else if r.delete {
                f.action = finding::DELETED.to_owned();
            }
            out.findings.push(f);
        }
        for (row, on, own) in &first.misplaced {
            let mut f = finding(&row.uuid, on, finding::MISPLACED);
            let Some(to) = own else {
                f.detail = format!(
                    "the instance is on host {:?} node {:?}, which has no compute node record",
                    row.host.as_deref().unwrap_or_default(),
                    row.node.as_deref().unwrap_or_default()
                );
                out.findings.push(f);
                continue;
            };
            f.detail = to.provider.to_string();
            if r.delete {
                if !settled(row) {
                    f.detail = format!("{} (a task is under way; left alone)", to.provider);
                } else {
                    let done = self.put_claim(row, to).await;
                    record(&mut f, done, finding::MOVED, "allocation_moved");
                }
            }
            out.findings.push(f);
        }
        Ok(out)
    }

    /// `heal_allocations`: settled instances without an allocation get one
    /// from their flavor (at most `max_count`; none with `dry_run`).
    pub(crate) async fn heal_allocations(
        &self,
        r: rpc::HealAllocations,
    ) -> Result<rpc::AllocationReport> {
        let mut out = rpc::AllocationReport::default();
        let mut only = None;
        let mut instance = None;
        if !r.instance_uuid.is_empty() {
            let uuid = r.instance_uuid.parse::<InstanceUuid>().map_err(|_| {
                ConductorError::BadRequest(format!("{:?} is not an instance uuid", r.instance_uuid))
            })?;
            // Not an instance of this cell (or deleted): nothing to heal here.
            let Some(row) = self.db.instance(uuid).await?.filter(|i| !i.deleted) else {
                return Ok(out);
            };
            let key = (
                row.host.clone().unwrap_or_default(),
                row.node.clone().unwrap_or_default(),
            );
            match self.nodes().await?.remove(&key) {
                Some(n) => only = Some(n.provider),
                None if row.host.is_some() => {
                    out.no_node = true;
                    return Ok(out);
                }
                // Never scheduled: no node, nothing to heal.
                None => return Ok(out),
            }
            instance = Some(row.uuid);
        }
        let Some(scan) = self.scan(only).await? else {
            out.no_placement = true;
            return Ok(out);
        };
        out.providers = scan.providers as u32;
        out.unread = scan.unread;
        let wanted: Vec<&(InstanceRow, Node)> = scan
            .missing
            .iter()
            .filter(|(row, _)| instance.as_ref().is_none_or(|u| *u == row.uuid))
            .collect();
        let limit = match r.max_count {
            0 => usize::MAX,
            n => n as usize,
        };
        out.more = wanted.len() > limit;
        for (row, n) in wanted.into_iter().take(limit) {
            let mut f = finding(&row.uuid, n, finding::MISSING);
            if !r.dry_run {
                let done = self.put_claim(row, n).await;
                record(&mut f, done, finding::CREATED, "allocation_healed");
            }
            out.findings.push(f);
        }
        Ok(out)
    }
}
