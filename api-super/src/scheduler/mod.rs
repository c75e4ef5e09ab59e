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
            service_down_time_secs: 60,
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
mod tests {
    use super::placement::{ProviderAllocation, Usage};
    use super::*;
    use cell_mapping::CellMapping;

    fn cell(n: u8) -> CellMapping {
        CellMapping {
            id: n as i64,
            uuid: format!("00000000-0000-0000-0000-0000000000{n:02}")
                .parse()
                .unwrap(),
            name: Some(format!("cell{n}")),
            transport_url: format!("inproc://c{n}"),
            database_connection: format!("sqlite://c{n}"),
            disabled: false,
        }
    }

    /// `n` hosts over `azs` zones, host i with i*1024 MB free.
    fn make_hosts(n: usize, azs: &[&str]) -> Vec<Candidate> {
        (0..n)
            .map(|i| {
                let rp = format!("rp{i}");
                let mut resources = BTreeMap::new();
                resources.insert(
                    "MEMORY_MB".to_owned(),
                    Usage {
                        capacity: 65536,
                        used: 65536 - (i as i64 + 1) * 1024,
                    },
                );
                resources.insert(
                    "VCPU".to_owned(),
                    Usage {
                        capacity: 16,
                        used: 0,
                    },
                );
                let mut allocations = BTreeMap::new();
                allocations.insert(
                    rp.clone(),
                    ProviderAllocation {
                        resources: [("MEMORY_MB".to_owned(), 512)].into_iter().collect(),
                    },
                );
                Candidate {
                    info: Arc::new(HostInfo {
                        host: format!("host{i}"),
                        node: format!("host{i}"),
                        provider: rp,
                        cell: cell(1 + (i % 2) as u8),
                        availability_zone: azs[i % azs.len()].to_owned(),
                        service_up: true,
                        service_disabled: false,
                        service_forced_down: false,
                        aggregate_metadata: BTreeMap::new(),
                        failed_builds: 0,
                        hypervisor_version: 1_000,
                        supported_instances: vec![[
                            if i % 2 == 0 { "x86_64" } else { "aarch64" }.to_owned(),
                            "fake".to_owned(),
                            "hvm".to_owned(),
                        ]],
                    }),
                    allocation: AllocationRequest { allocations },
                    summary: ProviderSummary { resources },
                }
            })
            .collect()
    }

    fn req() -> Request {
        Request {
            resources: [("MEMORY_MB".to_owned(), 512)].into_iter().collect(),
            ..Default::default()
        }
    }

    fn weighers(m: f64) -> Vec<Box<dyn Weigher>> {
        vec![Box::new(weighers::ram::RamWeigher { multiplier: m })]
    }

    #[test]
    fn spread_prefers_the_freest_and_pack_the_fullest() {
        let (o, _) = decide(
            make_hosts(4, &["nova"]),
            &req(),
            &filters::defaults(),
            &weighers(1.0),
        );
        assert_eq!(o[0].info.host, "host3");
        let (o, _) = decide(
            make_hosts(4, &["nova"]),
            &req(),
            &filters::defaults(),
            &weighers(-1.0),
        );
        assert_eq!(o[0].info.host, "host0");
    }

    #[test]
    fn filters_count_what_they_remove() {
        let mut hosts = make_hosts(6, &["az1", "az2"]);
        Arc::make_mut(&mut hosts[0].info).service_up = false;
        Arc::make_mut(&mut hosts[2].info).service_disabled = true;
        let mut r = req();
        r.availability_zone = Some("az1".into());
        let (o, removed) = decide(hosts, &r, &filters::defaults(), &weighers(1.0));
        assert_eq!(o.len(), 1, "{o:?}");
        assert_eq!(o[0].info.host, "host4");
        assert_eq!(
            removed,
            vec![
                ("ForcedHostFilter", 0),
                ("RequestedDestinationFilter", 0),
                ("ComputeFilter", 2),
                ("AvailabilityZoneFilter", 3),
                ("ImagePropertiesFilter", 0),
                ("AggregateInstanceExtraSpecsFilter", 0),
                ("ServerGroupAffinityFilter", 0),
                ("ServerGroupAntiAffinityFilter", 0),
            ]
        );
    }

    #[test]
    fn forced_host_keeps_only_that_host() {
        let mut r = req();
        r.force_host = Some("host1".into());
        let (o, _) = decide(
            make_hosts(4, &["nova"]),
            &r,
            &filters::defaults(),
            &weighers(1.0),
        );
        assert_eq!(o.len(), 1);
        assert_eq!(o[0].info.host, "host1");
    }

    #[test]
    fn requested_destination_keeps_that_host_and_still_filters() {
        let mut r = req();
        r.requested_host = Some("host1".into());
        let (o, removed) = decide(
            make_hosts(4, &["nova"]),
            &r,
            &filters::defaults(),
            &weighers(1.0),
        );
        assert_eq!(o.len(), 1);
        assert_eq!(o[0].info.host, "host1");
        assert_eq!(removed[1], ("RequestedDestinationFilter", 3));
        // The other filters still run: a disabled requested host is no host.
        let mut hosts = make_hosts(4, &["nova"]);
        Arc::make_mut(&mut hosts[1].info).service_disabled = true;
        let (o, _) = decide(hosts, &r, &filters::defaults(), &weighers(1.0));
        assert!(o.is_empty(), "{o:?}");
        // A node: only the host that has it.
        let hosts = make_hosts(4, &["nova"]);
        let mut r = req();
        r.requested_node = Some(hosts[2].info.node.clone());
        let (o, _) = decide(hosts, &r, &filters::defaults(), &weighers(1.0));
        assert_eq!(o.len(), 1);
        assert_eq!(o[0].info.host, "host2");
    }

    #[test]
    fn in_tree_names_the_one_provider_of_a_named_host() {
        let mut hosts = make_hosts(3, &["nova"]);
        // host2 has two nodes (as an ironic-like host would).
        let mut second = (*hosts[2].info).clone();
        second.node = "host2-b".into();
        second.provider = "rp2b".into();
        hosts.push(Candidate {
            info: Arc::new(second),
            ..hosts[2].clone()
        });
        let map: host_state::HostMap = hosts.iter().map(|c| Arc::clone(&c.info)).collect();
        let mut r = req();
        assert_eq!(in_tree(&map, &r), None, "no host named");
        r.force_host = Some("host1".into());
        assert_eq!(in_tree(&map, &r), Some("rp1"));
        r.force_host = None;
        r.requested_host = Some("host0".into());
        assert_eq!(in_tree(&map, &r), Some("rp0"));
        r.requested_host = Some("host2".into());
        assert_eq!(in_tree(&map, &r), None, "two nodes: the filters choose");
        r.requested_node = Some("host2-b".into());
        assert_eq!(in_tree(&map, &r), Some("rp2b"));
        r.requested_host = Some("nope".into());
        assert_eq!(in_tree(&map, &r), None, "unknown: the filters say no");
    }

    #[test]
    fn host_map_finds_hosts_nodes_and_zones_by_index() {
        let mut hosts = make_hosts(4, &["az1", "az2"]);
        let mut second = (*hosts[2].info).clone();
        second.node = "host2-b".into();
        second.provider = "rp2b".into();
        let second = Arc::new(second);
        // az2's hosts are host1 and host3: disable both, so az2 has none
        // enabled.
        for i in [1, 3] {
            Arc::make_mut(&mut hosts[i].info).service_disabled = true;
        }
        let map: host_state::HostMap = hosts
            .iter()
            .map(|c| Arc::clone(&c.info))
            .chain([second])
            .collect();
        let providers = |host: Option<&str>, node: Option<&str>| {
            let mut v: Vec<String> = map.named(host, node).map(|h| h.provider.clone()).collect();
            v.sort();
            v
        };
        assert_eq!(providers(Some("host2"), None), ["rp2", "rp2b"]);
        assert_eq!(providers(Some("host2"), Some("host2-b")), ["rp2b"]);
        assert_eq!(providers(None, Some("host2-b")), ["rp2b"]);
        assert_eq!(
            providers(Some("host1"), Some("host2-b")),
            Vec::<String>::new()
        );
        assert_eq!(providers(Some("nope"), None), Vec::<String>::new());
        assert_eq!(providers(None, None).len(), 5);
        assert_eq!(map.nodes_of("host2").len(), 2);
        assert!(map.nodes_of("nope").is_empty());
        assert_eq!(map.get("rp3").map(|h| h.host.as_str()), Some("host3"));
        assert!(map.zone_available("az1"));
        assert!(!map.zone_available("az2"), "all its services disabled");
        assert!(!map.zone_available("az3"));
    }

    #[test]
    fn build_failure_weigher_sinks_failing_hosts() {
        let w = weighers::build_failure::BuildFailureWeigher {
            multiplier: 1_000_000.0,
        };
        let mut hosts = make_hosts(4, &["nova"]);
        assert_eq!(w.weigh(&hosts[0], &req()), 0.0);
        // host3 has the most free RAM but failed once, host2 twice.
        Arc::make_mut(&mut hosts[3].info).failed_builds = 1;
        Arc::make_mut(&mut hosts[2].info).failed_builds = 2;
        assert_eq!(w.weigh(&hosts[3], &req()), -1.0);
        assert_eq!(w.name(), "BuildFailureWeigher");
        let ws: Vec<Box<dyn Weigher>> = vec![
            Box::new(weighers::ram::RamWeigher { multiplier: 1.0 }),
            Box::new(w),
        ];
        let (o, _) = decide(hosts.clone(), &req(), &filters::defaults(), &ws);
        assert_eq!(names(&o), ["host1", "host0", "host3", "host2"]);
        // Weighed down, not filtered: alone, a failing host is still chosen.
        let (o, _) = decide(vec![hosts[2].clone()], &req(), &filters::defaults(), &ws);
        assert_eq!(names(&o), ["host2"]);
        // Multiplier 0: the failures do not count.
        let ws: Vec<Box<dyn Weigher>> = vec![
            Box::new(weighers::ram::RamWeigher { multiplier: 1.0 }),
            Box::new(weighers::build_failure::BuildFailureWeigher { multiplier: 0.0 }),
        ];
        let (o, _) = decide(hosts.clone(), &req(), &filters::defaults(), &ws);
        assert_eq!(names(&o), ["host3", "host2", "host1", "host0"]);
        // Every host failed as often: no difference, RAM decides.
        for h in &mut hosts {
            Arc::make_mut(&mut h.info).failed_builds = 5;
        }
        let ws: Vec<Box<dyn Weigher>> = vec![
            Box::new(weighers::ram::RamWeigher { multiplier: 1.0 }),
            Box::new(weighers::build_failure::BuildFailureWeigher {
                multiplier: 1_000_000.0,
            }),
        ];
        let (o, _) = decide(hosts, &req(), &filters::defaults(), &ws);
        assert_eq!(names(&o), ["host3", "host2", "host1", "host0"]);
    }

    #[test]
    fn disk_weigher_spreads_or_packs_by_free_disk() {
        let mut hosts = make_hosts(4, &["nova"]);
        // Free disk: host0 300, host1 100, host2 400, host3 200 GB.
        for (h, free) in hosts.iter_mut().zip([300, 100, 400, 200]) {
            h.summary.resources.insert(
                "DISK_GB".to_owned(),
                Usage {
                    capacity: 1000,
                    used: 1000 - free,
                },
            );
        }
        let disk = |m: f64| -> Vec<Box<dyn Weigher>> {
            vec![Box::new(weighers::disk::DiskWeigher { multiplier: m })]
        };
        let w = weighers::disk::DiskWeigher { multiplier: 1.0 };
        assert_eq!(w.name(), "DiskWeigher");
        assert_eq!(w.weigh(&hosts[2], &req()), 400.0);
        let (o, _) = decide(hosts.clone(), &req(), &filters::defaults(), &disk(1.0));
        assert_eq!(names(&o), ["host2", "host0", "host3", "host1"]);
        let (o, _) = decide(hosts.clone(), &req(), &filters::defaults(), &disk(-1.0));
        assert_eq!(names(&o), ["host1", "host3", "host0", "host2"]);
        // Against RAM (host3 freest): the larger multiplier wins.
        let ws: Vec<Box<dyn Weigher>> = vec![
            Box::new(weighers::ram::RamWeigher { multiplier: 1.0 }),
            Box::new(weighers::disk::DiskWeigher { multiplier: 2.0 }),
        ];
        let (o, _) = decide(hosts, &req(), &filters::defaults(), &ws);
        assert_eq!(o[0].info.host, "host2");
        // No disk inventory anywhere: neutral (ties by name).
        let (o, _) = decide(
            make_hosts(3, &["nova"]),
            &req(),
            &filters::defaults(),
            &disk(1.0),
        );
        assert_eq!(names(&o), ["host0", "host1", "host2"]);
    }

    #[test]
    fn no_valid_host_details_name_every_filter() {
        let r = NoValidHost {
            candidates: 3,
            unmapped: 0,
            removed: vec![("ComputeFilter", 1), ("AvailabilityZoneFilter", 2)],
            claim_conflicts: 0,
        };
        let d = r.details();
        assert!(d.contains("ComputeFilter removed 1"), "{d}");
        assert!(d.contains("AvailabilityZoneFilter removed 2"), "{d}");
    }

    fn group(policy: &str, hosts: &[&str], max: i64) -> Option<GroupSpec> {
        Some(GroupSpec {
            uuid: "g".into(),
            policy: policy.into(),
            max_server_per_host: max,
            hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
        })
    }

    fn all_weighers() -> Vec<Box<dyn Weigher>> {
        vec![
            Box::new(weighers::ram::RamWeigher { multiplier: 1.0 }),
            Box::new(weighers::affinity::SoftAffinityWeigher { multiplier: 10.0 }),
            Box::new(weighers::affinity::SoftAntiAffinityWeigher { multiplier: 10.0 }),
        ]
    }

    fn names(o: &[Candidate]) -> Vec<&str> {
        o.iter().map(|c| c.info.host.as_str()).collect()
    }

    #[test]
    fn extra_specs_must_match_aggregate_metadata() {
        let mut hosts = make_hosts(4, &["nova"]);
        for i in [1, 3] {
            Arc::make_mut(&mut hosts[i].info)
                .aggregate_metadata
                .insert("ssd".into(), ["true".to_owned()].into_iter().collect());
        }
        Arc::make_mut(&mut hosts[3].info)
            .aggregate_metadata
            .insert("cores".into(), ["32".to_owned()].into_iter().collect());
        let mut r = req();
        // Another scope is not this filter's business.
        r.flavor_extra_specs
            .insert("hw:cpu_policy".into(), "dedicated".into());
        let (o, _) = decide(hosts.clone(), &r, &filters::defaults(), &weighers(1.0));
        assert_eq!(o.len(), 4);
        r.flavor_extra_specs
            .insert("aggregate_instance_extra_specs:ssd".into(), "true".into());
        let (o, removed) = decide(hosts.clone(), &r, &filters::defaults(), &weighers(1.0));
        assert_eq!(names(&o), ["host3", "host1"]);
        assert!(removed.contains(&("AggregateInstanceExtraSpecsFilter", 2)));
        // Unscoped keys count too; operators as Nova's.
        r.flavor_extra_specs.insert("cores".into(), ">= 16".into());
        let (o, _) = decide(hosts.clone(), &r, &filters::defaults(), &weighers(1.0));
        assert_eq!(names(&o), ["host3"]);
        r.flavor_extra_specs.insert("cores".into(), ">= 64".into());
        let (o, _) = decide(hosts, &r, &filters::defaults(), &weighers(1.0));
        assert!(o.is_empty());
    }

    #[test]
    fn affinity_keeps_the_members_hosts() {
        let mut r = req();
        r.group = group("affinity", &[], 1);
        let (o, _) = decide(
            make_hosts(4, &["nova"]),
            &r,
            &filters::defaults(),
            &weighers(1.0),
        );
        assert_eq!(o.len(), 4, "no member yet: anywhere");
        r.group = group("affinity", &["host1"], 1);
        let (o, removed) = decide(
            make_hosts(4, &["nova"]),
            &r,
            &filters::defaults(),
            &weighers(1.0),
        );
        assert_eq!(names(&o), ["host1"]);
        assert!(removed.contains(&("ServerGroupAffinityFilter", 3)));
    }

    #[test]
    fn anti_affinity_avoids_the_members_hosts_up_to_the_limit() {
        let mut r = req();
        r.group = group("anti-affinity", &["host3", "host2", "host2"], 1);
        let (o, removed) = decide(
            make_hosts(4, &["nova"]),
            &r,
            &filters::defaults(),
            &weighers(1.0),
        );
        assert_eq!(names(&o), ["host1", "host0"]);
        assert!(removed.contains(&("ServerGroupAntiAffinityFilter", 2)));
        // max_server_per_host 2: host3 (one member) is fine again.
        r.group = group("anti-affinity", &["host3", "host2", "host2"], 2);
        let (o, _) = decide(
            make_hosts(4, &["nova"]),
            &r,
            &filters::defaults(),
            &weighers(1.0),
        );
        assert_eq!(names(&o), ["host3", "host1", "host0"]);
    }

    #[test]
    fn soft_policies_weigh_instead_of_filtering() {
        let mut r = req();
        // host3 has the most free RAM, but host0 has the members.
        r.group = group("soft-affinity", &["host0", "host0"], 1);
        let (o, _) = decide(
            make_hosts(4, &["nova"]),
            &r,
            &filters::defaults(),
            &all_weighers(),
        );
        assert_eq!(o.len(), 4);
        assert_eq!(o[0].info.host, "host0");
        // Soft anti-affinity: the members' hosts come last, none removed.
        r.group = group("soft-anti-affinity", &["host3", "host2"], 1);
        let (o, _) = decide(
            make_hosts(4, &["nova"]),
            &r,
            &filters::defaults(),
            &all_weighers(),
        );
        assert_eq!(names(&o), ["host1", "host0", "host3", "host2"]);
        // Without a group the weighers are neutral.
        let (o, _) = decide(
            make_hosts(4, &["nova"]),
            &req(),
            &filters::defaults(),
            &all_weighers(),
        );
        assert_eq!(o[0].info.host, "host3");
    }

    #[test]
    fn image_properties_keep_the_hosts_that_run_the_guest() {
        use crate::image_props::ImageProps;
        let image = |kv: &[(&str, &str)]| {
            ImageProps::from_image(
                &kv.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            )
            .unwrap()
        };
        let run = |r: &Request| {
            decide(
                make_hosts(4, &["nova"]),
                r,
                &filters::defaults(),
                &weighers(1.0),
            )
        };
        let mut r = req();
        // No scheduling property: every host.
        r.image = image(&[("os_distro", "cirros")]);
        assert_eq!(run(&r).0.len(), 4);
        // Even hosts are x86_64, odd ones aarch64.
        r.image = image(&[("hw_architecture", "aarch64")]);
        let (o, removed) = run(&r);
        assert_eq!(names(&o), ["host3", "host1"]);
        assert!(
            removed.contains(&("ImagePropertiesFilter", 2)),
            "{removed:?}"
        );
        r.image = image(&[
            ("architecture", "amd64"),
            ("img_hv_type", "fake"),
            ("hw_vm_mode", "hvm"),
        ]);
        assert_eq!(names(&run(&r).0), ["host2", "host0"]);
        // All three must match one triple.
        r.image = image(&[("hw_architecture", "x86_64"), ("img_hv_type", "qemu")]);
        assert!(run(&r).0.is_empty());
        // The version counts once a triple matches (hosts report 1.0).
        r.image = image(&[
            ("hw_architecture", "x86_64"),
            ("img_hv_requested_version", ">=1.0"),
        ]);
        assert_eq!(run(&r).0.len(), 2);
        r.image = image(&[
            ("hw_architecture", "x86_64"),
            ("img_hv_requested_version", ">=2.0"),
        ]);
        assert!(run(&r).0.is_empty());
        // A host that reports nothing runs no image that names a property.
        let mut hosts = make_hosts(2, &["nova"]);
        Arc::make_mut(&mut hosts[0].info)
            .supported_instances
            .clear();
        r.image = image(&[("img_hv_type", "fake")]);
        let (o, _) = decide(hosts, &r, &filters::defaults(), &weighers(1.0));
        assert_eq!(names(&o), ["host1"]);
    }
}
