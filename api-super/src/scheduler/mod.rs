//! The global scheduler: one placement query across all cells, host
//! filters and weighers, claims with retry on conflict, alternates in the
//! chosen host's cell.
//!
//! [`decide`] is the pure part (filter and weigh a snapshot of candidate
//! hosts); [`Scheduler::select`] adds placement (candidates, claims) and the
//! host map ([`host_state`]).

pub mod filters;
pub mod host_state;
pub mod placement;
pub mod request_context;
pub mod source;
pub mod weighers;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use filters::Filter;
use host_state::{HostInfo, HostStateCache};
use placement::{
    AllocationRequest, PlacementError, ProviderSummary, Resources, SchedulerPlacement,
};
use weighers::Weigher;

/// `[scheduler]` options.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerConfig {
    /// `limit` of the allocation-candidates query (Nova's
    /// `max_placement_results`).
    pub max_placement_results: usize,
    /// When above 0 (and below `max_placement_results`): a one-server
    /// request first asks placement for this many candidates, and asks
    /// again with `max_placement_results` only when fewer than
    /// `max_attempts` of them pass the filters while placement may hold
    /// more. Meant with placement's `randomize_allocation_candidates` on
    /// (the sample is then a random one, and builds spread); with it off
    /// every sample is the same first providers. 0: one query of
    /// `max_placement_results`, as Nova.
    pub candidate_sample: usize,
    /// Hosts tried per instance: the chosen one plus `max_attempts - 1`
    /// alternates in its cell.
    pub max_attempts: usize,
    /// RAM weigher multiplier (> 0 spread, < 0 pack).
    pub ram_weight_multiplier: f64,
    /// CPU weigher multiplier (> 0 spread, < 0 pack).
    pub cpu_weight_multiplier: f64,
    /// Disk weigher multiplier (> 0 spread, < 0 pack).
    pub disk_weight_multiplier: f64,
    /// `BuildFailureWeigher` multiplier (>= 0): how much a host's recent
    /// build failures weigh it down.
    pub build_failure_weight_multiplier: f64,
    /// How long the host map (mappings, services, zones) is cached (ms).
    pub host_state_cache_ms: u64,
    /// A compute service without a heartbeat for this long is down (s).
    pub service_down_time_secs: u64,
    /// Zone of hosts in no zone aggregate.
    pub default_availability_zone: String,
    /// `ServerGroupSoftAffinityWeigher` multiplier (>= 0).
    pub soft_affinity_weight_multiplier: f64,
    /// `ServerGroupSoftAntiAffinityWeigher` multiplier (>= 0).
    pub soft_anti_affinity_weight_multiplier: f64,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            max_placement_results: 1000,
            candidate_sample: 0,
            max_attempts: 3,
            ram_weight_multiplier: 1.0,
            cpu_weight_multiplier: 1.0,
            disk_weight_multiplier: 1.0,
            build_failure_weight_multiplier: 1_000_000.0,
            host_state_cache_ms: 1000,
            service_down_time_secs: 5,
            default_availability_zone: "nova".to_owned(),
            soft_affinity_weight_multiplier: 1.0,
            soft_anti_affinity_weight_multiplier: 1.0,
        }
    }
}

/// The provider whose tree placement is asked for, when `req` forces or
/// requests one host (or node) with exactly one compute node: the
/// candidates are then that node's, whatever the size of the fleet (a
/// plain request returns at most `max_placement_results`, which may leave
/// the named host out). `None` otherwise (no host named, an unknown one,
/// or a host with several nodes): the filters pick among all candidates.
fn in_tree<'m>(map: &'m host_state::HostMap, req: &Request) -> Option<&'m str> {
    let host = req.force_host.as_deref().or(req.requested_host.as_deref());
    let node = req.force_node.as_deref().or(req.requested_node.as_deref());
    if host.is_none() && node.is_none() {
        return None;
    }
    let mut named = map.named(host, node);
    match (named.next(), named.next()) {
        (Some(h), None) => Some(h.provider.as_str()),
        _ => None,
    }
}

/// What one instance needs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Request {
    /// Resources by class.
    pub resources: Resources,
    /// Requested zone.
    pub availability_zone: Option<String>,
    /// Forced host.
    pub force_host: Option<String>,
    /// Forced node.
    pub force_node: Option<String>,
    /// Requested host and node (2.74): only they pass, the filters run.
    pub requested_host: Option<String>,
    /// Requested node.
    pub requested_node: Option<String>,
    /// The flavor's extra specs.
    pub flavor_extra_specs: BTreeMap<String, String>,
    /// The server group the instances join (`scheduler_hints.group`).
    pub group: Option<GroupSpec>,
    /// The image's scheduling properties (`ImagePropertiesFilter`).
    pub image: crate::image_props::ImageProps,
}

/// A server group as the scheduler sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSpec {
    /// Group uuid.
    pub uuid: String,
    /// `affinity`, `anti-affinity`, `soft-affinity` or `soft-anti-affinity`.
    pub policy: String,
    /// `rules.max_server_per_host` (anti-affinity; 1 when absent).
    pub max_server_per_host: i64,
    /// The hosts of the group's live members, once per member (the
    /// scheduler adds each host it picks within a request).
    pub hosts: Vec<String>,
}

impl GroupSpec {
    /// How many members are on `host`.
    pub fn members_on(&self, host: &str) -> usize {
        self.hosts.iter().filter(|h| *h == host).count()
    }
}

/// A candidate host: what the filters and weighers see.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The host (shared with the host state map: a candidate costs no
    /// copy of it).
    pub info: Arc<HostInfo>,
    /// The allocation request placement proposed for it.
    pub allocation: AllocationRequest,
    /// Its provider summary.
    pub summary: ProviderSummary,
}

impl Candidate {
    /// Free amount of `class` (capacity minus used).
    pub fn free(&self, class: &str) -> f64 {
        self.summary
            .resources
            .get(class)
            .map(|u| (u.capacity - u.used) as f64)
            .unwrap_or(0.0)
    }

    fn consume(&mut self, r: &Resources) {
        for (class, amount) in r {
            if let Some(u) = self.summary.resources.get_mut(class) {
                u.used += amount;
            }
        }
    }
}

/// Why no host was found: what placement returned and what each filter
/// removed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NoValidHost {
    /// Candidates placement returned.
    pub candidates: usize,
    /// Candidates that were no known (mapped) compute node.
    pub unmapped: usize,
    /// Hosts removed by each filter, in order.
    pub removed: Vec<(&'static str, usize)>,
    /// Hosts that passed but could not be claimed (conflicts).
    pub claim_conflicts: usize,
}

impl NoValidHost {
    /// The fault message.
    pub const MESSAGE: &'static str = "No valid host was found. ";

    /// The fault details.
    pub fn details(&self) -> String {
        let mut s = format!(
            "There are not enough hosts available. Placement returned {} candidate(s)",
            self.candidates
        );
        if self.unmapped > 0 {
            s.push_str(&format!(", {} not mapped to a cell", self.unmapped));
        }
        for (name, n) in &self.removed {
            s.push_str(&format!("; {name} removed {n}"));
        }
        if self.claim_conflicts > 0 {
            s.push_str(&format!(
                "; {} claim(s) refused by placement",
                self.claim_conflicts
            ));
        }
        s.push('.');
        s
    }
}

/// The host chosen for one instance, claimed in placement, and the
/// alternates kept in its cell.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    /// Instance.
    pub instance_uuid: String,
    /// The host.
    pub host: HostInfo,
    /// Alternates (same cell), best first.
    pub alternates: Vec<HostInfo>,
}

/// Filters and weighs `candidates` for `req`: the passing hosts, best
/// first, and how many each filter removed. Pure and deterministic for a
/// given input: equal weights keep placement's order (a stable sort), which
/// placement shuffles (`randomize_allocation_candidates`), so that equally
/// good hosts across a large fleet share the builds instead of the
/// alphabetically first ones taking them all (a 10,000-host run put 2,000
/// servers in 6 of 50 cells when ties broke by host name).
pub fn decide(
    candidates: Vec<Candidate>,
    req: &Request,
    filters: &[Box<dyn Filter>],
    weighers: &[Box<dyn Weigher>],
) -> (Vec<Candidate>, Vec<(&'static str, usize)>) {
    let mut hosts = candidates;
    let mut removed = Vec::new();
    for f in filters {
        let before = hosts.len();
        hosts.retain(|h| f.passes(h, req));
        removed.push((f.name(), before - hosts.len()));
    }
    let mut total = vec![0.0; hosts.len()];
    for w in weighers {
        let raw: Vec<f64> = hosts.iter().map(|h| w.weigh(h, req)).collect();
        for (t, n) in total.iter_mut().zip(weighers::normalize(&raw)) {
            *t += w.multiplier() * n;
        }
    }
    let mut order: Vec<(f64, Candidate)> = total.into_iter().zip(hosts).collect();
    order.sort_by(|(wa, _), (wb, _)| wb.partial_cmp(wa).unwrap_or(std::cmp::Ordering::Equal));
    (order.into_iter().map(|(_, c)| c).collect(), removed)
}

/// Why scheduling failed.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// No host (see the report).
    #[error("No valid host was found.")]
    NoValidHost(NoValidHost),
    /// Placement failed.
    #[error("placement failed")]
    Placement(#[source] PlacementError),
    /// Reading host state failed.
    #[error("cannot read host state")]
    HostState(#[source] source::HostStateError),
    /// A test failed the claim ([`fabric::failpoint::BOOT_CLAIM`]).
    #[error("placement claim failed")]
    Injected(#[source] fabric::failpoint::Injected),
}

/// The scheduler.
#[derive(Debug)]
pub struct Scheduler {
    config: SchedulerConfig,
    placement: Arc<dyn SchedulerPlacement>,
    hosts: HostStateCache,
    filters: Vec<Box<dyn Filter>>,
    weighers: Vec<Box<dyn Weigher>>,
}

impl Scheduler {
    /// A scheduler with the default filters and the configured weighers.
    pub fn new(
        config: SchedulerConfig,
        placement: Arc<dyn SchedulerPlacement>,
        hosts: HostStateCache,
    ) -> Self {
        let weighers: Vec<Box<dyn Weigher>> = vec![
            Box::new(weighers::ram::RamWeigher {
                multiplier: config.ram_weight_multiplier,
            }),
            Box::new(weighers::cpu::CpuWeigher {
                multiplier: config.cpu_weight_multiplier,
            }),
            Box::new(weighers::disk::DiskWeigher {
                multiplier: config.disk_weight_multiplier,
            }),
            Box::new(weighers::build_failure::BuildFailureWeigher {
                multiplier: config.build_failure_weight_multiplier,
            }),
            Box::new(weighers::affinity::SoftAffinityWeigher {
                multiplier: config.soft_affinity_weight_multiplier,
            }),
            Box::new(weighers::affinity::SoftAntiAffinityWeigher {
                multiplier: config.soft_anti_affinity_weight_multiplier,
            }),
        ];
        Self {
            config,
            placement,
            hosts,
            filters: filters::defaults(),
            weighers,
        }
    }

    /// Placement.
    pub fn placement(&self) -> &Arc<dyn SchedulerPlacement> {
        &self.placement
    }

    /// Its configuration (service down time, default zone, ...).
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// The host state cache (invalidated by the operator APIs when they
    /// change a service, an aggregate or a zone).
    pub fn host_state(&self) -> &HostStateCache {
        &self.hosts
    }

    /// Asks placement for at most `limit` candidates for `req` (only the
    /// named host's tree when one is forced or requested: see [`in_tree`])
    /// and keeps
    /// those on mapped hosts (the report counts them and the unmapped).
    async fn candidates(
        &self,
        req: &Request,
        limit: usize,
    ) -> Result<(Vec<Candidate>, NoValidHost), ScheduleError> {
        let map = self.hosts.get().await.map_err(ScheduleError::HostState)?;
        let tree = in_tree(&map, req);
        let cands = self
            .placement
            .candidates(&req.resources, limit, tree)
            .await
            .map_err(ScheduleError::Placement)?;
        let mut report = NoValidHost {
            candidates: cands.allocation_requests.len(),
            ..Default::default()
        };
        let mut hosts = Vec::with_capacity(cands.allocation_requests.len());
        let mut summaries = cands.provider_summaries;
        for ar in cands.allocation_requests {
            let Some((rp, info)) = ar
                .allocations
                .keys()
                .find_map(|rp| map.get(rp).map(|i| (rp, Arc::clone(i))))
            else {
                report.unmapped += 1;
                continue;
            };
            // Its summary is moved, not copied; a host named by several
            // requests (with different sharing providers) copies it from
            // its earlier candidate.
            let summary = match summaries.remove(rp) {
                Some(s) => s,
                None => hosts
                    .iter()
                    .rev()
                    .find(|h: &&Candidate| h.info.provider == *rp)
                    .map(|h| h.summary.clone())
                    .unwrap_or_default(),
            };
            hosts.push(Candidate {
                info,
                allocation: ar,
                summary,
            });
        }
        Ok((hosts, report))
    }

    /// Chooses and claims a host for each of `instances` (all or none: a
    /// failure releases the claims already made).
    #[tracing::instrument(skip_all, fields(instances = instances.len()))]
    pub async fn select(
        &self,
        req: &Request,
        instances: &[String],
        project_id: &str,
        user_id: &str,
    ) -> Result<Vec<Selection>, ScheduleError> {
        let started = std::time::Instant::now();
        let full = self.config.max_placement_results;
        let sample = self.config.candidate_sample;
        let mut result = None;
        if sample > 0 && sample < full && instances.len() == 1 {
            // A sample first. Asked again in full when placement may hold
            // more and the sample leaves too few hosts to choose from
            // (fewer than `max_attempts` pass the filters) or none could
            // be claimed.
            let (sampled, report) = self.candidates(req, sample).await?;
            let complete = report.candidates < sample;
            // Counted in place: no copy of the sample for the check.
            let enough = complete
                || sampled
                    .iter()
                    .filter(|h| self.filters.iter().all(|f| f.passes(h, req)))
                    .count()
                    >= self.config.max_attempts;
            if enough {
                match self
                    .choose(sampled, report, req, instances, project_id, user_id)
                    .await
                {
                    Err(ScheduleError::NoValidHost(_)) if !complete => {}
                    r => result = Some(r),
                }
            }
            metrics::counter!("api_scheduler_candidate_queries_total",
                "query" => if result.is_some() { "sample" } else { "sample_then_full" })
            .increment(1);
        }
        let result = match result {
            Some(r) => r,
            None => {
                let (hosts, report) = self.candidates(req, full).await?;
                self.choose(hosts, report, req, instances, project_id, user_id)
                    .await
            }
        };
        let outcome = match &result {
            Ok(_) => "selected",
            Err(ScheduleError::NoValidHost(_)) => "no_valid_host",
            Err(_) => "error",
        };
        metrics::histogram!("api_scheduler_decision_seconds", "outcome" => outcome)
            .record(started.elapsed().as_secs_f64());
        result
    }

    /// Filters, weighs and claims for each of `instances` among `hosts`
    /// (all or none).
    async fn choose(
        &self,
        mut hosts: Vec<Candidate>,
        mut report: NoValidHost,
        req: &Request,
        instances: &[String],
        project_id: &str,
        user_id: &str,
    ) -> Result<Vec<Selection>, ScheduleError> {
        let mut selections: Vec<Selection> = Vec::new();
        // Each pick counts for the next instance of the request (server
        // group policies spread or pack the batch itself).
        let mut req = req.clone();
        for (k, uuid) in instances.iter().enumerate() {
            // The last (usually the only) instance takes the candidates
            // instead of a copy: nothing is consumed after it.
            let pool = if k + 1 == instances.len() {
                std::mem::take(&mut hosts)
            } else {
                hosts.clone()
            };
            let (ordered, removed) = decide(pool, &req, &self.filters, &self.weighers);
            report.removed = removed;
            let mut chosen = None;
            for (i, c) in ordered.iter().enumerate() {
                if let Err(e) = fabric::failpoint::hit(fabric::failpoint::BOOT_CLAIM) {
                    self.release(&selections).await;
                    return Err(ScheduleError::Injected(e));
                }
                match self
                    .placement
                    .claim(uuid, &c.allocation, project_id, user_id)
                    .await
                {
                    Ok(true) => {
                        chosen = Some(i);
                        break;
                    }
                    Ok(false) => report.claim_conflicts += 1,
                    Err(e) => {
                        self.release(&selections).await;
                        return Err(ScheduleError::Placement(e));
                    }
                }
            }
            let Some(i) = chosen else {
                self.release(&selections).await;
                return Err(ScheduleError::NoValidHost(report));
            };
            let best = &ordered[i];
            let alternates = ordered
                .iter()
                .enumerate()
                .filter(|(j, c)| *j != i && c.info.cell.uuid == best.info.cell.uuid)
                .take(self.config.max_attempts.saturating_sub(1))
                .map(|(_, c)| HostInfo::clone(&c.info))
                .collect();
            let consumed = best
                .allocation
                .allocations
                .values()
                .flat_map(|a| a.resources.iter().map(|(k, v)| (k.clone(), *v)))
                .collect::<BTreeMap<_, _>>();
            if let Some(h) = hosts
                .iter_mut()
                .find(|h| h.info.provider == best.info.provider)
            {
                h.consume(&consumed);
            }
            if let Some(g) = req.group.as_mut() {
                g.hosts.push(best.info.host.clone());
            }
            selections.push(Selection {
                instance_uuid: uuid.clone(),
                host: HostInfo::clone(&best.info),
                alternates,
            });
        }
        Ok(selections)
    }

    /// Releases the claims of `selections` (best effort, logged).
    pub async fn release(&self, selections: &[Selection]) {
        for s in selections {
            if let Err(e) = self.placement.delete_allocations(&s.instance_uuid).await {
                tracing::error!(instance = %s.instance_uuid, error = %e, "could not release a claim");
            }
        }
    }
}

#[cfg(test)]
mod tests;
