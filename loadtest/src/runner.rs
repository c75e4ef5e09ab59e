//! `loadtest run SCENARIO.toml`: starts (or attaches to) the target, runs
//! the scenario's phases in order with its faults injected on the side,
//! and gathers everything the report shows.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use chrono::{DateTime, Utc};
use futures_util::stream::{self, StreamExt};
use serde::Serialize;
use tokio::sync::oneshot;

use crate::api::{self, Compute, Created, Placement};
use crate::inspect::{Databases, Invariant};
use crate::mem;
use crate::progress::{self, Progress};
use crate::scenario::{Fault, FaultKind, Phase, PhaseKind, Rng, Scenario, TargetKind};
use crate::stats::{summarize, Summary};
use crate::tls::Tls;

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// No progress on stderr.
    pub quiet: bool,
}

// ---------------------------------------------------------------- watcher

enum Seen {
    Active(Instant),
    Error(Instant, String),
}

/// Watches one project's servers leave BUILD: one walk of the BUILD list
/// per tick, then one `GET /servers/{id}` for each server that left it
/// (so the watcher's load is a list of what is building plus one show per
/// server, not lists of everything done lately). A server is seen done
/// only when its show says ACTIVE or ERROR: the servers of a cell that is
/// down are left out of every filtered list (Nova's behaviour, as the
/// Compute API's), so a server missing from the BUILD list may just be in
/// a down cell; its show (status UNKNOWN, or an error) leaves it waiting.
struct Watcher {
    compute: Compute,
    waiting: Mutex<HashMap<String, (Instant, oneshot::Sender<Seen>)>>,
    poll: Duration,
    stop: AtomicBool,
}

impl Watcher {
    fn register(&self, id: &str, accepted: Instant) -> oneshot::Receiver<Seen> {
        let (tx, rx) = oneshot::channel();
        self.waiting
            .lock()
            .expect("waiting")
            .insert(id.to_owned(), (accepted, tx));
        rx
    }

    fn forget(&self, id: &str) {
        self.waiting.lock().expect("waiting").remove(id);
    }

    async fn run(self: Arc<Self>) {
        while !self.stop.load(Ordering::Acquire) {
            let sent = Instant::now();
            if !self.waiting.lock().expect("waiting").is_empty() {
                self.tick(sent).await;
            }
            let spent = sent.elapsed();
            if spent < self.poll {
                tokio::time::sleep(self.poll - spent).await;
            }
        }
    }

    async fn tick(&self, sent: Instant) {
        let build = match self.compute.list_all(false, "status=BUILD").await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "poll of the BUILD list failed");
                return;
            }
        };
        let got = Instant::now();
        let building: HashSet<&str> = build.iter().map(|s| s.id.as_str()).collect();
        let out: Vec<String> = self
            .waiting
            .lock()
            .expect("waiting")
            .iter()
            .filter(|(id, (accepted, _))| *accepted < sent && !building.contains(id.as_str()))
            .map(|(id, _)| id.clone())
            .collect();
        if out.is_empty() {
            return;
        }
        // Each server that left the BUILD list, asked once: ACTIVE or
        // ERROR ends its wait (seen when the BUILD list came back without
        // it); anything else (a down cell's partial record
        // with status UNKNOWN, a 404, an error) leaves it waiting.
        let shown: Vec<(String, Option<Seen>)> = stream::iter(out)
            .map(|id| async move {
                let seen = match self.compute.show(&id).await {
                    Ok(Some(s)) if s.status == "ACTIVE" => Some(Seen::Active(got)),
                    Ok(Some(s)) if s.status == "ERROR" => Some(Seen::Error(
                        got,
                        s.fault.unwrap_or_else(|| "(no fault message)".to_owned()),
                    )),
                    Ok(_) => None,
                    Err(e) => {
                        tracing::warn!(error = %format!("{e:#}"), server = %id, "show failed");
                        None
                    }
                };
                (id, seen)
            })
            .buffer_unordered(WATCH_SHOWS_IN_FLIGHT)
            .collect()
            .await;
        let mut w = self.waiting.lock().expect("waiting");
        for (id, seen) in shown {
            let Some(seen) = seen else { continue };
            if let Some((_, tx)) = w.remove(&id) {
                let _ = tx.send(seen);
            }
        }
    }
}

/// How many `GET /servers/{id}` one watcher tick has in flight.
const WATCH_SHOWS_IN_FLIGHT: usize = 16;

// ---------------------------------------------------------------- records

#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Active,
    Error(String),
    Stuck,
    Refused(u16, String),
}

#[derive(Debug, Clone)]
struct ServerRec {
    id: Option<String>,
    tenant: usize,
    flavor: String,
    /// The zone requested, if any.
    zone: Option<String>,
    /// The compute host requested (2.74 `host`), if any.
    host: Option<String>,
    /// The cell it was in at its phase's peak (embedded target).
    cell: Option<String>,
    /// Its host then, if it had one (embedded target).
    node: Option<String>,
    /// Seconds since the run started, POST sent.
    t_post: f64,
    accept: Option<Duration>,
    accepted_wall: Option<DateTime<Utc>>,
    outcome: Outcome,
    /// Seconds since the run started, seen out of BUILD (or given up on).
    t_done: Option<f64>,
    /// POST sent → seen ACTIVE.
    tta: Option<Duration>,
}

struct Tenant {
    name: String,
    compute: Compute,
    watcher: Arc<Watcher>,
    /// The key pair its creates name (`target.key_pairs`).
    key_name: Option<&'static str>,
}

// ---------------------------------------------------------------- fleet

/// One cell's parts, taken over from the region so faults can stop them.
pub struct CellParts {
    /// `cell1`, …
    pub name: String,
    /// Its database URL.
    pub db_url: String,
    /// Its bus URL.
    pub bus_url: String,
    bus: Arc<dyn fabric::bus::Transport>,
    conductor: Option<cell_conductor::Handle>,
    hosts: Vec<(String, Option<compute::HostHandle>)>,
}

impl CellParts {
    async fn shutdown(self) {
        for (_, h) in self.hosts {
            if let Some(h) = h {
                h.shutdown().await;
            }
        }
        if let Some(c) = self.conductor {
            c.shutdown().await;
        }
        self.bus.close().await;
    }
}

/// A fault as it was applied.
#[derive(Debug, Clone, Serialize)]
pub struct FaultRecord {
    /// What.
    pub kind: FaultKind,
    /// Which cell.
    pub cell: String,
    /// Which host or conductor.
    pub target: String,
    /// Seconds after the run started.
    pub at_secs: f64,
    /// Servers ACTIVE when it fired.
    pub active_before: u64,
    /// `applied`, or why not.
    pub result: String,
    /// Seconds after the run started when it was restored (stop-broker,
    /// stop-database).
    pub until_secs: Option<f64>,
    /// `restored`, or why not.
    pub restore_result: Option<String>,
    /// Seconds from the restore until the first server of the cell that
    /// was sent after it reached ACTIVE; `None` when none did (not
    /// recovered, or nothing sent to the cell after the restore).
    pub recovered_after_secs: Option<f64>,
}

impl FaultRecord {
    fn label(&self) -> String {
        let k = serde_json::to_value(self.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        match self.until_secs {
            Some(u) => format!("{k} {} at {:.1}s until {u:.1}s", self.target, self.at_secs),
            None => format!("{k} {} at {:.1}s", self.target, self.at_secs),
        }
    }

    /// Whether the fault was applied.
    fn applied(&self) -> bool {
        self.result == "applied"
    }

    /// The seconds a failure is the fault's: from when it fired until it
    /// was restored and the cell recovered (a first server sent after the
    /// restore became ACTIVE); open-ended for faults never restored and
    /// cells not seen to recover.
    fn window(&self) -> (f64, f64) {
        let end = match (self.until_secs, self.recovered_after_secs) {
            (Some(u), Some(r)) => u + r,
            _ => f64::INFINITY,
        };
        (self.at_secs, end)
    }
}

async fn apply_fault(
    cells: &tokio::sync::Mutex<Vec<CellParts>>,
    admin_db: &str,
    f: &Fault,
) -> (String, String) {
    let mut cells = cells.lock().await;
    let Some(cell) = cells.iter_mut().find(|c| c.name == f.cell) else {
        return (f.cell.clone(), format!("no cell {}", f.cell));
    };
    match f.kind {
        FaultKind::StopHost => {
            let slot = cell
                .hosts
                .iter_mut()
                .find(|(name, h)| h.is_some() && f.host.as_ref().is_none_or(|want| want == name));
            match slot {
                Some((name, h)) => {
                    let name = name.clone();
                    if let Some(h) = h.take() {
                        h.shutdown().await;
                    }
                    (name, "applied".to_owned())
                }
                None => (
                    f.host.clone().unwrap_or_else(|| cell.name.clone()),
                    "no running host of that name in the cell".to_owned(),
                ),
            }
        }
        FaultKind::StopConductor => {
            let name = format!("{}-conductor", cell.name);
            match cell.conductor.take() {
                Some(c) => {
                    c.shutdown().await;
                    (name, "applied".to_owned())
                }
                None => (name, "already stopped".to_owned()),
            }
        }
        FaultKind::StopBroker => {
            let (name, url) = (format!("{}-broker", cell.name), cell.bus_url.clone());
            drop(cells);
            match crate::outage::stop_broker(&url).await {
                Ok(()) => (name, "applied".to_owned()),
                Err(e) => (name, format!("failed: {e:#}")),
            }
        }
        FaultKind::StopDatabase => {
            let (name, url) = (format!("{}-database", cell.name), cell.db_url.clone());
            drop(cells);
            match crate::outage::stop_database(admin_db, &url).await {
                Ok(_) => (name, "applied".to_owned()),
                Err(e) => (name, format!("failed: {e:#}")),
            }
        }
    }
}

/// Ends a stop-broker or stop-database outage: `restored` or why not.
async fn restore_fault(
    cells: &tokio::sync::Mutex<Vec<CellParts>>,
    admin_db: &str,
    f: &Fault,
) -> String {
    let (bus_url, db_url) = {
        let cells = cells.lock().await;
        match cells.iter().find(|c| c.name == f.cell) {
            Some(c) => (c.bus_url.clone(), c.db_url.clone()),
            None => return format!("no cell {}", f.cell),
        }
    };
    let r = match f.kind {
        FaultKind::StopBroker => crate::outage::start_broker(&bus_url).await,
        FaultKind::StopDatabase => crate::outage::start_database(admin_db, &db_url).await,
        _ => Ok(()),
    };
    match r {
        Ok(()) => "restored".to_owned(),
        Err(e) => format!("failed: {e:#}"),
    }
}

// ---------------------------------------------------------------- reports

/// Deletes of one phase.
#[derive(Debug, Clone, Serialize)]
pub struct DeleteReport {
    /// `DELETE`s sent.
    pub requested: usize,
    /// Answers (status → count; 0 = no answer).
    pub statuses: BTreeMap<u16, usize>,
    /// `DELETE` → answer.
    pub latency: Summary,
    /// First `DELETE` → none of them listed any more.
    pub seconds_until_gone: f64,
    /// Still listed when the wait gave up.
    pub left: usize,
}

/// Many tenants: each project sees exactly its own servers.
#[derive(Debug, Clone, Serialize)]
pub struct Isolation {
    /// Projects.
    pub tenants: usize,
    /// Whether every project's list held exactly its own servers.
    pub holds: bool,
    /// What differed.
    pub violations: Vec<String>,
}

/// One phase's figures.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseReport {
    /// Name.
    pub name: String,
    /// Kind.
    pub kind: PhaseKind,
    /// Requests in flight (at most).
    pub concurrency: usize,
    /// Projects used.
    pub tenants: usize,
    /// Seconds after the run started.
    pub started_secs: f64,
    /// How long the phase took (deletes included).
    pub seconds: f64,
    /// `POST /servers` sent.
    pub requested: usize,
    /// Answered 202.
    pub accepted: usize,
    /// Refused (status → count; 0 = no answer).
    pub refused: BTreeMap<u16, usize>,
    /// Reached ACTIVE.
    pub active: usize,
    /// Reached ERROR.
    pub error: usize,
    /// Still BUILD when the wait gave up.
    pub stuck_in_build: usize,
    /// Servers per flavor requested.
    pub flavors: BTreeMap<String, usize>,
    /// Servers per availability zone requested (those requesting one).
    pub requested_zones: BTreeMap<String, usize>,
    /// `POST` → 202.
    pub accept_latency: Summary,
    /// `POST` sent → seen ACTIVE (resolution: the poll interval).
    pub time_to_active: Summary,
    /// Time-to-ACTIVE split by build phase (embedded target): see
    /// docs/BENCHMARKS.md for how each is measured.
    pub build_phases: BTreeMap<String, Summary>,
    /// Accepted per second over the submissions.
    pub accepts_per_second: f64,
    /// ACTIVE per second, first POST → last ACTIVE.
    pub boots_per_second: f64,
    /// Steady: creates not sent because `concurrency` were in flight.
    pub skipped_at_cap: usize,
    /// Churn: servers replaced (deleted and booted again).
    pub replaced: usize,
    /// Boot-and-list: one `GET /servers/detail?limit=1000` page.
    pub list: Option<Summary>,
    /// Servers that page returned.
    pub list_page_size: Option<usize>,
    /// Many tenants: isolation.
    pub isolation: Option<Isolation>,
    /// Deletes.
    pub deletes: Option<DeleteReport>,
    /// Live servers per cell at the phase's peak (embedded target).
    pub servers_per_cell: BTreeMap<String, usize>,
    /// Hosts by the number of servers they held at the peak: index =
    /// servers, value = hosts (embedded target).
    pub servers_per_host_histogram: Vec<usize>,
    /// Live servers per availability zone at the phase's peak, by their
    /// host's zone (embedded target).
    pub servers_per_zone: BTreeMap<String, usize>,
    /// This phase's servers that requested a zone and sit on a host of
    /// another zone at the peak (embedded target; should be 0).
    pub outside_requested_zone: usize,
    /// A few of them: server, requested zone, host and its zone.
    pub outside_requested_zone_examples: Vec<String>,
    /// Creates that named a compute host (`requested_hosts`).
    pub requested_hosts: usize,
    /// Of them, servers on another host at the phase's peak (embedded
    /// target; should be 0).
    pub outside_requested_host: usize,
    /// A few of them: server, requested host, host.
    pub outside_requested_host_examples: Vec<String>,
    /// Invariants checked at the end of the phase (embedded target).
    pub invariants: Vec<Invariant>,
}

/// Memory of the process around the fleet's start.
#[derive(Debug, Clone, Serialize, Default)]
pub struct MemoryReport {
    /// RSS before the region started.
    pub rss_before_fleet: u64,
    /// RSS once every host registered.
    pub rss_after_fleet: u64,
    /// (after − before) / hypervisors.
    pub bytes_per_hypervisor: f64,
    /// RSS at the end of the run.
    pub rss_end: u64,
    /// Peak RSS of the run (`VmHWM`).
    pub peak_bytes: u64,
}

/// The target as it ran.
#[derive(Debug, Clone, Serialize)]
pub struct TargetReport {
    /// Embedded or not.
    pub embedded: bool,
    /// Cells (embedded).
    pub cells: u32,
    /// Hypervisors (embedded).
    pub hypervisors: u64,
    /// Seconds until every host registered (embedded).
    pub start_seconds: f64,
    /// The region's `[region]` section as used (embedded), or the URL.
    pub config: serde_json::Value,
    /// Hosts whose spawns fail.
    pub failing_hosts: Vec<String>,
    /// Extra spawn latency per host: p50/p95/max (ms).
    pub host_spawn_latency_ms: Summary,
    /// Hosts per zone and per further aggregate, read back through the
    /// Compute API (embedded).
    pub layout: crate::fleet::Layout,
}

/// Per-second counts.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Throughput {
    /// Bucket width, seconds.
    pub bucket_seconds: f64,
    /// 202s per bucket.
    pub accepted: Vec<u64>,
    /// ACTIVE per bucket.
    pub active: Vec<u64>,
    /// ERROR per bucket.
    pub error: Vec<u64>,
    /// DELETE answered per bucket.
    pub deleted: Vec<u64>,
}

/// The zone check's name among the broken invariants: every server that
/// requested a zone is on a host of that zone.
pub const SERVERS_IN_REQUESTED_ZONE: &str = "servers in their requested zone";
/// The broken-invariant name of servers off the host they named.
pub const SERVERS_ON_REQUESTED_HOST: &str = "servers on their requested host";

/// The many-tenants check's name among the broken invariants: each
/// project lists exactly its own servers.
pub const TENANT_ISOLATION: &str = "each project lists exactly its own servers";

/// What the run's invariant checks came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum InvariantsOutcome {
    /// Checked, and every one holds.
    Hold,
    /// At least one is broken (see [`RunReport::broken`]).
    Broken,
    /// The no-leak invariants could not be checked (a URL target whose
    /// credentials are not an administrator's, or without a placement
    /// endpoint); the reason is in `invariants_not_checked`. The run
    /// fails unless the user accepted that (`--allow-unchecked`).
    NotChecked,
}

/// Everything a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// Scenario name.
    pub scenario: String,
    /// The scenario as parsed.
    pub spec: Scenario,
    /// Start (UTC).
    pub started_at: DateTime<Utc>,
    /// Cores, load.
    pub machine: serde_json::Value,
    /// The target.
    pub target: TargetReport,
    /// Memory.
    pub memory: MemoryReport,
    /// The phases.
    pub phases: Vec<PhaseReport>,
    /// Over time.
    pub throughput: Throughput,
    /// Faults applied.
    pub faults: Vec<FaultRecord>,
    /// Errors (ERROR faults, refusals, timeouts) grouped by the fault in
    /// force when they happened, then by message.
    pub errors_by_fault: BTreeMap<String, BTreeMap<String, usize>>,
    /// Spawns the fake hosts failed on purpose (`fleet.failing_hosts`,
    /// `fleet.spawn_failure_rate`), reschedules included (embedded target).
    pub injected_spawn_failures: Option<u64>,
    /// Invariants after the last phase.
    pub invariants: Vec<Invariant>,
    /// Whether they were checked (on a URL target: through the APIs, when
    /// the credentials are an administrator's).
    pub invariants_checked: bool,
    /// Why they were not checked, when they were not.
    pub invariants_not_checked: Option<String>,
    /// What the checks came to: hold, broken or not checked
    /// ([`RunReport::outcome`]).
    pub invariants_outcome: InvariantsOutcome,
    /// Seconds, first phase start → end.
    pub seconds: f64,
}

impl RunReport {
    /// Names of the invariants that do not hold (at the end or after any
    /// phase).
    pub fn broken(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for i in self
            .phases
            .iter()
            .flat_map(|p| p.invariants.iter())
            .chain(self.invariants.iter())
        {
            if !i.holds && !out.iter().any(|n| n == i.name) {
                out.push(i.name.to_owned());
            }
        }
        if self.phases.iter().any(|p| p.outside_requested_zone > 0) {
            out.push(SERVERS_IN_REQUESTED_ZONE.to_owned());
        }
        if self.phases.iter().any(|p| p.outside_requested_host > 0) {
            out.push(SERVERS_ON_REQUESTED_HOST.to_owned());
        }
        if self
            .phases
            .iter()
            .any(|p| p.isolation.as_ref().is_some_and(|i| !i.holds))
        {
            out.push(TENANT_ISOLATION.to_owned());
        }
        out
    }

    /// Broken when any check broke (those of the phases included), else
    /// not checked when the no-leak invariants could not be read, else
    /// hold.
    pub fn outcome(&self) -> InvariantsOutcome {
        if !self.broken().is_empty() {
            InvariantsOutcome::Broken
        } else if !self.invariants_checked {
            InvariantsOutcome::NotChecked
        } else {
            InvariantsOutcome::Hold
        }
    }

    /// Why the run fails (the binary's exit status), if it does: a broken
    /// invariant always; invariants not checked unless `allow_unchecked`
    /// (the user's explicit `--allow-unchecked`).
    pub fn failure(&self, allow_unchecked: bool) -> Option<String> {
        match self.outcome() {
            InvariantsOutcome::Hold => None,
            InvariantsOutcome::Broken => {
                Some(format!("invariant broken: {}", self.broken().join("; ")))
            }
            InvariantsOutcome::NotChecked if allow_unchecked => None,
            InvariantsOutcome::NotChecked => Some(format!(
                "invariants not checked ({}); pass --allow-unchecked to accept a run whose \
                 invariants could not be checked",
                self.invariants_not_checked
                    .as_deref()
                    .unwrap_or("no reason recorded")
            )),
        }
    }
}

// ---------------------------------------------------------------- the run

struct Ctx {
    t0: Instant,
    tenants: Vec<Tenant>,
    flavor_ids: HashMap<String, String>,
    image: String,
    active_total: Arc<AtomicU64>,
    deleted_at: Mutex<Vec<f64>>,
    records: Mutex<Vec<ServerRec>>,
    quiet: bool,
    rng: Mutex<Rng>,
    /// The tenant that sends the creates naming a host (the region's
    /// administrator), when a phase asks for them.
    admin_tenant: Option<usize>,
    /// The fleet's compute hosts (requested hosts are drawn from them).
    hosts: Vec<String>,
}

fn nova_message(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            v.as_object()
                .and_then(|o| o.values().next())
                .and_then(|e| e["message"].as_str().map(str::to_owned))
        })
        .unwrap_or_else(|| body.chars().take(200).collect())
}

impl Ctx {
    fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    fn pick_zone(&self, p: &Phase) -> Option<String> {
        if p.availability_zones.is_empty() {
            return None;
        }
        let names: Vec<&String> = p.availability_zones.keys().collect();
        let weights: Vec<u32> = p.availability_zones.values().copied().collect();
        let i = self.rng.lock().expect("rng").weighted(&weights);
        Some(names[i].clone())
    }

    /// A compute host for one create, drawn with the phase's
    /// `requested_hosts` share (none otherwise).
    fn pick_host(&self, p: &Phase) -> Option<String> {
        if p.requested_hosts <= 0.0 || self.hosts.is_empty() || self.admin_tenant.is_none() {
            return None;
        }
        let mut rng = self.rng.lock().expect("rng");
        if rng.next_f64() >= p.requested_hosts {
            return None;
        }
        let i = (rng.next_u64() % self.hosts.len() as u64) as usize;
        Some(self.hosts[i].clone())
    }

    fn pick_flavor(&self, p: &Phase) -> String {
        if p.flavors.is_empty() {
            return "m1.tiny".to_owned();
        }
        let names: Vec<&String> = p.flavors.keys().collect();
        let weights: Vec<u32> = p.flavors.values().copied().collect();
        let i = self.rng.lock().expect("rng").weighted(&weights);
        names[i].clone()
    }

    async fn boot_one(
        &self,
        tenant: usize,
        (flavor, zone): (String, Option<String>),
        name: String,
        timeout: Duration,
        prog: &Progress,
    ) -> ServerRec {
        self.boot_on(tenant, (flavor, zone, None), name, timeout, prog)
            .await
    }

    /// [`Self::boot_one`], naming compute host `host` when given (sent by
    /// the administrator's tenant).
    async fn boot_on(
        &self,
        tenant: usize,
        (flavor, zone, host): (String, Option<String>, Option<String>),
        name: String,
        timeout: Duration,
        prog: &Progress,
    ) -> ServerRec {
        let tenant = match (&host, self.admin_tenant) {
            (Some(_), Some(a)) => a,
            _ => tenant,
        };
        let t = &self.tenants[tenant];
        let posted = Instant::now();
        let t_post = self.now();
        let fid = self.flavor_ids.get(&flavor).cloned().unwrap_or_default();
        let res = t
            .compute
            .create(
                &name,
                &fid,
                &self.image,
                (zone.as_deref(), host.as_deref(), t.key_name),
            )
            .await;
        let accepted = Instant::now();
        let mut rec = ServerRec {
            id: None,
            tenant,
            flavor,
            zone,
            host,
            cell: None,
            node: None,
            t_post,
            accept: None,
            accepted_wall: None,
            outcome: Outcome::Stuck,
            t_done: None,
            tta: None,
        };
        match res {
            Ok(Created::Accepted(id)) => {
                rec.accept = Some(accepted - posted);
                rec.accepted_wall = Some(Utc::now());
                let rx = t.watcher.register(&id, accepted);
                let left = timeout.saturating_sub(posted.elapsed());
                match tokio::time::timeout(left, rx).await {
                    Ok(Ok(Seen::Active(at))) => {
                        rec.outcome = Outcome::Active;
                        rec.tta = Some(at - posted);
                        rec.t_done = Some((at - self.t0).as_secs_f64());
                        self.active_total.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(Ok(Seen::Error(at, msg))) => {
                        rec.outcome = Outcome::Error(msg);
                        rec.t_done = Some((at - self.t0).as_secs_f64());
                    }
                    _ => {
                        t.watcher.forget(&id);
                        rec.outcome = Outcome::Stuck;
                        rec.t_done = Some(self.now());
                    }
                }
                rec.id = Some(id);
            }
            Ok(Created::Refused(status, body)) => {
                rec.outcome = Outcome::Refused(status, nova_message(&body));
            }
            Err(e) => rec.outcome = Outcome::Refused(0, format!("{e:#}")),
        }
        prog.done.fetch_add(1, Ordering::Relaxed);
        if rec.outcome != Outcome::Active {
            prog.errors.fetch_add(1, Ordering::Relaxed);
        }
        rec
    }

    /// Boots `n` servers with `p.concurrency` in flight.
    async fn boot_many(&self, p: &Phase, label: &str, n: usize, prog: &Progress) -> Vec<ServerRec> {
        type Pick = (usize, (String, Option<String>, Option<String>));
        let picks: Vec<Pick> = (0..n)
            .map(|i| {
                let host = self.pick_host(p);
                (
                    i % p.tenants,
                    (self.pick_flavor(p), self.pick_zone(p), host),
                )
            })
            .collect();
        let timeout = Duration::from_secs(p.timeout_secs);
        stream::iter(picks.into_iter().enumerate())
            .map(|(i, (tenant, pick))| {
                self.boot_on(tenant, pick, format!("lt-{label}-{i:06}"), timeout, prog)
            })
            .buffer_unordered(p.concurrency)
            .collect()
            .await
    }

    /// Deletes servers (tenant, id) and waits until none of them is listed.
    async fn delete_many(
        &self,
        items: &[(usize, String)],
        concurrency: usize,
        timeout: Duration,
        prog: &Progress,
    ) -> DeleteReport {
        let t0 = Instant::now();
        let answers: Vec<(Duration, u16)> = stream::iter(items.iter())
            .map(|(tenant, id)| async move {
                let s = Instant::now();
                let status = self.tenants[*tenant].compute.delete(id).await.unwrap_or(0);
                self.deleted_at.lock().expect("deleted").push(self.now());
                prog.done.fetch_add(1, Ordering::Relaxed);
                (s.elapsed(), status)
            })
            .buffer_unordered(concurrency.max(1))
            .collect()
            .await;
        let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
        let mut lat = Vec::new();
        for (d, s) in answers {
            lat.push(d);
            *statuses.entry(s).or_default() += 1;
        }
        let left = self.wait_gone(items, t0, timeout).await;
        DeleteReport {
            requested: items.len(),
            statuses,
            latency: summarize(&mut lat),
            seconds_until_gone: t0.elapsed().as_secs_f64(),
            left,
        }
    }

    async fn wait_gone(&self, items: &[(usize, String)], t0: Instant, timeout: Duration) -> usize {
        let mut by_tenant: BTreeMap<usize, HashSet<&str>> = BTreeMap::new();
        for (t, id) in items {
            by_tenant.entry(*t).or_default().insert(id.as_str());
        }
        loop {
            let mut left = 0;
            for (t, ours) in &by_tenant {
                left += match self.tenants[*t].compute.list_all(false, "").await {
                    Ok(l) => l.iter().filter(|s| ours.contains(s.id.as_str())).count(),
                    Err(_) => ours.len(),
                };
            }
            if left == 0 || t0.elapsed() > timeout {
                return left;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// The embedded target's handles.
struct Embedded {
    region: region::Region,
    cells: Arc<tokio::sync::Mutex<Vec<CellParts>>>,
    dbs: Databases,
    placement: Placement,
    /// The fleet's zones and aggregates as the Compute API shows them.
    layout: crate::fleet::Layout,
    /// The fake hosts' knobs (one for every cell).
    hypervisor: Option<compute::driver::fake::FakeHypervisor>,
    data_dir: PathBuf,
    remove_data: bool,
}

/// Builds the region configuration: `region_file` (or the defaults), the
/// fleet's shape, free ports and a data directory, then the scenario's
/// `[region]` keys on top, checked by region::RegionSection itself.
pub fn region_config(s: &Scenario, data_dir: &std::path::Path) -> Result<region::RegionConfig> {
    let mut cfg: region::RegionConfig = match &s.region_file {
        Some(p) => toml::from_str(
            &std::fs::read_to_string(p).with_context(|| format!("read {}", p.display()))?,
        )
        .map_err(|e| anyhow::anyhow!("region_file {}: {e}", p.display()))?,
        None => region::RegionConfig::default(),
    };
    let mut table = toml::Table::try_from(&cfg.region).context("region section")?;
    let set = |t: &mut toml::Table, k: &str, v: toml::Value| {
        t.insert(k.to_owned(), v);
    };
    let fleet = [
        ("cells", s.fleet.cells as i64),
        ("hosts_per_cell", s.fleet.hosts_per_cell as i64),
    ];
    for (k, v) in fleet {
        set(&mut table, k, toml::Value::Integer(v));
    }
    set(&mut table, "fake_spawn_latency_ms", toml::Value::Integer(0));
    for k in [
        "identity_listen",
        "placement_listen",
        "compute_listen",
        "image_listen",
        "serial_proxy_listen",
    ] {
        set(&mut table, k, toml::Value::String("127.0.0.1:0".to_owned()));
    }
    set(
        &mut table,
        "data_dir",
        toml::Value::String(data_dir.display().to_string()),
    );
    let resources = s.fleet.host_resources();
    for (k, v) in &resources {
        set(&mut table, k, toml::Value::Integer(*v as i64));
    }
    for (k, v) in &s.region {
        if k == "cells" || k == "hosts_per_cell" || resources.iter().any(|(r, _)| r == k) {
            bail!("region.{k}: give the fleet's shape as fleet.{k}");
        }
        table.insert(k.clone(), v.clone());
    }
    cfg.region = toml::Value::Table(table)
        .try_into()
        .map_err(|e| anyhow::anyhow!("region: {e}"))?;
    if let Some(f) = &s.target.log_filter {
        cfg.telemetry.log_filter = f.clone();
    } else if s.region_file.is_none() {
        cfg.telemetry.log_filter = "error".to_owned();
    }
    cfg.telemetry.metrics_listen = String::new();
    Ok(cfg)
}

/// Refuses, before anything starts, faults that cannot be injected on
/// the region `cfg` describes.
pub fn check_faults(s: &Scenario, cfg: &region::RegionConfig) -> Result<()> {
    for (i, f) in s.faults.iter().enumerate() {
        match f.kind {
            FaultKind::StopBroker if cfg.region.transport_url.is_empty() => bail!(
                "fault[{i}]: stop-broker needs cells on RabbitMQ ([region] transport_url): \
                 the embedded default's cells use in-process buses, which have no broker to stop"
            ),
            FaultKind::StopBroker => {
                crate::outage::check_broker(&cfg.region.bus_url(&f.cell))
                    .with_context(|| format!("fault[{i}]"))?;
            }
            FaultKind::StopDatabase if !cfg.region.on_postgres() => bail!(
                "fault[{i}]: stop-database needs cells on PostgreSQL ([region] database_url): \
                 the embedded default's cells are SQLite files inside this process, which \
                 cannot be taken away from it"
            ),
            _ => {}
        }
    }
    Ok(())
}

async fn start_embedded(
    s: &Scenario,
    rng: &mut Rng,
) -> Result<(Embedded, TargetReport, MemoryReport)> {
    let (data_dir, remove_data) = match &s.target.data_dir {
        Some(d) => (d.clone(), false),
        None => (crate::embed::temp_data_dir(), true),
    };
    let cfg = region_config(s, &data_dir)?;
    check_faults(s, &cfg)?;
    let telemetry = fabric::telemetry::init("loadtest", &cfg.telemetry)?;
    let hypervisors = s.fleet.cells as u64 * s.fleet.hosts_per_cell as u64;
    eprintln!(
        "starting an embedded region: {} cells x {} fake hosts ({hypervisors} hypervisors), data in {}",
        s.fleet.cells,
        s.fleet.hosts_per_cell,
        data_dir.display()
    );
    let before = mem::read();
    let t = Instant::now();
    let mut r = region::Region::start(&cfg, Some(telemetry)).await?;
    let start_seconds = t.elapsed().as_secs_f64();
    let after = mem::read();
    eprintln!(
        "region up in {start_seconds:.1}s; RSS {} MiB -> {} MiB",
        before.rss_bytes >> 20,
        after.rss_bytes >> 20
    );
    let memory = MemoryReport {
        rss_before_fleet: before.rss_bytes,
        rss_after_fleet: after.rss_bytes,
        bytes_per_hypervisor: after.rss_bytes.saturating_sub(before.rss_bytes) as f64
            / hypervisors.max(1) as f64,
        ..Default::default()
    };
    // The fake hosts' knobs: a latency drawn per host, and failing hosts.
    let hv = r.cells.first().map(|c| c.hypervisor.clone());
    let names: Vec<String> = r
        .cells
        .iter()
        .flat_map(|c| c.hosts.iter().map(|h| h.host().to_owned()))
        .collect();
    let mut lat = Vec::new();
    let mut failing = Vec::new();
    if let Some(hv) = &hv {
        for n in &names {
            let ms = s.fleet.spawn_latency.draw(rng);
            lat.push(Duration::from_millis(ms));
            if ms > 0 {
                hv.delay_spawns(n, Duration::from_millis(ms));
            }
        }
        let n_fail = (s.fleet.failing_hosts * names.len() as f64).round() as usize;
        let mut pool: Vec<&String> = names.iter().collect();
        for _ in 0..n_fail.min(pool.len()) {
            let i = (rng.next_u64() % pool.len() as u64) as usize;
            let h = pool.swap_remove(i);
            hv.fail_spawns(h, FAILING_HOST_MESSAGE);
            failing.push(h.clone());
        }
        failing.sort();
        if s.fleet.spawn_failure_rate > 0.0 {
            for n in &names {
                hv.fail_spawn_share(n, s.fleet.spawn_failure_rate, SPAWN_FAILURE_RATE_MESSAGE);
            }
        }
    }
    let cells: Vec<CellParts> = std::mem::take(&mut r.cells)
        .into_iter()
        .map(|c| CellParts {
            name: c.name,
            db_url: c.db_url,
            bus_url: c.bus_url,
            bus: c.bus,
            conductor: Some(c.conductor),
            hosts: c
                .hosts
                .into_iter()
                .map(|h| (h.host().to_owned(), Some(h)))
                .collect(),
        })
        .collect();
    let dbs = Databases::open(
        &r.api_db_url,
        &r.cell0_db_url,
        &cells
            .iter()
            .map(|c| (c.name.clone(), c.db_url.clone()))
            .collect::<Vec<_>>(),
    )
    .await?;
    let identity_url = format!("http://{}", r.identity.addr);
    let (admin_token, _) = region::password_token(&identity_url, &r.admin).await?;
    let placement = Placement::new(
        &format!("http://{}", r.placement.addr),
        &admin_token,
        &Tls::default(),
    )?;
    // Zones and aggregates, through the Compute API as an operator would.
    let admin = compute_client(
        s,
        &format!("http://{}", r.compute.addr),
        &admin_token,
        &Tls::default(),
    )?;
    let by_cell: Vec<(String, Vec<String>)> = cells
        .iter()
        .map(|c| {
            (
                c.name.clone(),
                c.hosts.iter().map(|(n, _)| n.clone()).collect(),
            )
        })
        .collect();
    let planned = crate::fleet::plan(
        &by_cell,
        s.fleet.availability_zones.unwrap_or(0),
        s.fleet.aggregates.unwrap_or(0),
    );
    let layout = if planned.is_empty() {
        crate::fleet::read(&admin, &names).await?
    } else {
        let l = crate::fleet::create(&admin, &planned, &names, 16)
            .await
            .context("create the fleet's zones and aggregates")?;
        eprintln!(
            "{}",
            crate::fleet::describe(&planned, Duration::from_secs_f64(l.seconds))
        );
        l
    };
    let target = TargetReport {
        embedded: true,
        cells: s.fleet.cells,
        hypervisors,
        start_seconds,
        config: {
            let mut c = serde_json::to_value(&cfg.region)?;
            for k in ["database_url", "transport_url"] {
                if let Some(u) = c
                    .get(k)
                    .and_then(|v| v.as_str())
                    .map(cell_mapping::url::mask)
                {
                    c[k] = serde_json::Value::String(u);
                }
            }
            c
        },
        failing_hosts: failing,
        host_spawn_latency_ms: summarize(&mut lat),
        layout: layout.clone(),
    };
    Ok((
        Embedded {
            region: r,
            cells: Arc::new(tokio::sync::Mutex::new(cells)),
            dbs,
            placement,
            layout,
            hypervisor: hv,
            data_dir,
            remove_data,
        },
        target,
        memory,
    ))
}

/// A Compute API client asking for the scenario's microversion.
fn compute_client(s: &Scenario, url: &str, token: &str, tls: &Tls) -> Result<Compute> {
    let c = Compute::new(url, token, tls)?;
    Ok(match &s.target.compute_microversion {
        Some(v) => c.with_microversion(v),
        None => c,
    })
}

fn new_tenant(name: &str, compute: Compute, poll: Duration) -> Tenant {
    let watcher = Arc::new(Watcher {
        compute: compute.clone(),
        waiting: Mutex::new(HashMap::new()),
        poll,
        stop: AtomicBool::new(false),
    });
    tokio::spawn(watcher.clone().run());
    Tenant {
        name: name.to_owned(),
        compute,
        watcher,
        key_name: None,
    }
}

/// Runs a scenario end to end.
pub async fn run(s: &Scenario, opts: &RunOptions) -> Result<RunReport> {
    s.validate()?;
    let started_at = Utc::now();
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let (calibration_ms, cache_probe_ns) = tokio::task::spawn_blocking(|| {
        (
            crate::machine::calibration_ms(),
            crate::machine::cache_probe_ns(),
        )
    })
    .await
    .context("machine calibration")?;
    let mut rng = Rng::new(s.seed);
    let poll = Duration::from_millis(s.target.poll_interval_ms.unwrap_or(100));
    let max_tenants = s.phases.iter().map(|p| p.tenants).max().unwrap_or(1);
    let wants_hosts = s.phases.iter().any(|p| p.requested_hosts > 0.0);

    let (embedded, target, mut memory, mut tenants, image, url_checks) = match s.target.kind {
        TargetKind::Embedded => {
            let (e, target, memory) = start_embedded(s, &mut rng).await?;
            let r = &e.region;
            let identity_url = format!("http://{}", r.identity.addr);
            let compute_url = format!("http://{}", r.compute.addr);
            // The embedded region speaks plain http.
            let tls = Tls::default();
            let (token, _) = region::password_token(&identity_url, &r.member).await?;
            let (admin_token, _) = region::password_token(&identity_url, &r.admin).await?;
            let admin_compute = compute_client(s, &compute_url, &admin_token, &tls)?;
            api::lift_quotas_for(&tls, &admin_compute, &identity_url, &token).await?;
            let mut tenants = vec![new_tenant(
                &r.member.project,
                compute_client(s, &compute_url, &token, &tls)?,
                poll,
            )];
            if max_tenants > 1 {
                let run = &uuid::Uuid::new_v4().simple().to_string()[..6];
                for k in 1..max_tenants {
                    let name = format!("lt-{run}-t{k:03}");
                    let (_, password) =
                        api::create_tenant(&tls, &identity_url, &admin_token, &name).await?;
                    let creds = region::Credentials {
                        username: name.clone(),
                        password,
                        project: name.clone(),
                    };
                    let (tok, _) = region::password_token(&identity_url, &creds).await?;
                    api::lift_quotas_for(&tls, &admin_compute, &identity_url, &tok).await?;
                    tenants.push(new_tenant(
                        &name,
                        compute_client(s, &compute_url, &tok, &tls)?,
                        poll,
                    ));
                }
            }
            // Creates that name a host are the administrator's (2.74): a
            // tenant of their own, after the phases' tenants.
            if wants_hosts {
                api::lift_quotas_for(&tls, &admin_compute, &identity_url, &admin_token).await?;
                tenants.push(new_tenant(
                    &r.admin.project,
                    compute_client(s, &compute_url, &admin_token, &tls)?,
                    poll,
                ));
            }
            let image = match &s.target.image {
                Some(i) if uuid::Uuid::parse_str(i).is_ok() => i.clone(),
                other => {
                    let name = other.as_deref().unwrap_or(api_super::image::CIRROS_NAME);
                    api::image_id_by_name(&tls, &r.image.url(), &token, name).await?
                }
            };
            (Some(e), target, memory, tenants, image, None)
        }
        TargetKind::Url => {
            let t = &s.target;
            let tls = Tls::for_target(t)?;
            let identity_url = t.identity_url.clone().unwrap_or_default();
            let env = |k: &str| std::env::var(k).ok();
            let creds = region::Credentials {
                username: t
                    .username
                    .clone()
                    .or_else(|| env("OS_USERNAME"))
                    .context("target.username (or OS_USERNAME)")?,
                password: env(t.password_env.as_deref().unwrap_or("OS_PASSWORD")).with_context(
                    || {
                        format!(
                            "the password: set {}",
                            t.password_env.as_deref().unwrap_or("OS_PASSWORD")
                        )
                    },
                )?,
                project: t
                    .project
                    .clone()
                    .or_else(|| env("OS_PROJECT_NAME"))
                    .context("target.project (or OS_PROJECT_NAME)")?,
            };
            // Domains by name: the scenario's, the environment's, else
            // identity's default domain.
            let login = fabric::login::ServiceCredentials {
                user_domain_name: t
                    .user_domain_name
                    .clone()
                    .or_else(|| env("OS_USER_DOMAIN_NAME"))
                    .unwrap_or_default(),
                project_domain_name: t
                    .project_domain_name
                    .clone()
                    .or_else(|| env("OS_PROJECT_DOMAIN_NAME"))
                    .unwrap_or_default(),
                ..creds.service(&identity_url)
            };
            let token = api::password_login(&tls, &login)
                .await
                .with_context(|| format!("log in to {identity_url} as {}", creds.username))?;
            let compute_url = t.compute_url.clone().unwrap_or_default();
            let image_name = t
                .image
                .clone()
                .unwrap_or_else(|| api_super::image::CIRROS_NAME.to_owned());
            let image = if uuid::Uuid::parse_str(&image_name).is_ok() {
                image_name
            } else {
                let u = api::catalog_url(&tls, &identity_url, &token, "image").await?;
                api::image_id_by_name(&tls, &u, &token, &image_name).await?
            };
            let target = TargetReport {
                embedded: false,
                cells: 0,
                hypervisors: 0,
                start_seconds: 0.0,
                config: serde_json::json!({
                    "compute_url": compute_url,
                    "compute_microversion": t
                        .compute_microversion
                        .as_deref()
                        .unwrap_or(api::COMPUTE_MICROVERSION),
                }),
                failing_hosts: Vec::new(),
                host_spawn_latency_ms: summarize(&mut []),
                layout: crate::fleet::Layout::default(),
            };
            let compute = compute_client(s, &compute_url, &token, &tls)?;
            api::lift_quotas_for(&tls, &compute, &identity_url, &token).await?;
            // The invariants through the APIs, with these credentials
            // (an administrator's, or they are skipped with the reason).
            let placement_url = match &t.placement_url {
                Some(u) => Ok(u.clone()),
                None => api::catalog_url(&tls, &identity_url, &token, "placement").await,
            };
            let url_checks = match placement_url {
                Ok(u) => Ok((compute.clone(), api::Placement::new(&u, &token, &tls)?)),
                Err(e) => Err(format!("no placement endpoint: {e:#}")),
            };
            let tenants = vec![new_tenant(&creds.project, compute, poll)];
            (
                None,
                target,
                MemoryReport::default(),
                tenants,
                image,
                Some(url_checks),
            )
        }
    };
    if s.target.key_pairs {
        for t in &mut tenants {
            t.compute
                .import_key_pair()
                .await
                .with_context(|| format!("the key pair of tenant {}", t.name))?;
            t.key_name = Some(api::LOADTEST_KEY_PAIR.0);
        }
    }

    // Flavor names → ids.
    let mut flavor_ids = HashMap::new();
    for p in &s.phases {
        let names: Vec<String> = if p.flavors.is_empty() {
            vec!["m1.tiny".to_owned()]
        } else {
            p.flavors.keys().cloned().collect()
        };
        for n in names {
            if let std::collections::hash_map::Entry::Vacant(slot) = flavor_ids.entry(n.clone()) {
                let id = tenants[0]
                    .compute
                    .flavor_id(&n)
                    .await
                    .with_context(|| format!("flavor {n:?} of the scenario"))?;
                slot.insert(id);
            }
        }
    }

    let (admin_tenant, hosts) = match &embedded {
        Some(e) if wants_hosts => (Some(tenants.len() - 1), e.region_hosts().await),
        _ => (None, Vec::new()),
    };
    let ctx = Arc::new(Ctx {
        admin_tenant,
        hosts,
        t0: Instant::now(),
        tenants,
        flavor_ids,
        image,
        active_total: Arc::new(AtomicU64::new(0)),
        deleted_at: Mutex::new(Vec::new()),
        records: Mutex::new(Vec::new()),
        quiet: opts.quiet,
        rng: Mutex::new(rng),
    });

    // Faults, on the side; outages restored when their time is up, and
    // at the latest once the phases are over.
    let fault_log: Arc<Mutex<Vec<FaultRecord>>> = Arc::new(Mutex::new(Vec::new()));
    let faults_done = Arc::new(AtomicBool::new(false));
    let fault_task = embedded.as_ref().map(|e| {
        let (cells, log, ctx, done) = (
            e.cells.clone(),
            fault_log.clone(),
            ctx.clone(),
            faults_done.clone(),
        );
        let admin_db = e.region.api_db_url.clone();
        let mut pending: Vec<Fault> = s.faults.clone();
        tokio::spawn(async move {
            // (due, index in the log, fault)
            let mut restores: Vec<(f64, usize, Fault)> = Vec::new();
            let restore = |idx: usize, f: Fault| {
                let (cells, log, ctx, admin_db) =
                    (cells.clone(), log.clone(), ctx.clone(), admin_db.clone());
                async move {
                    let result = restore_fault(&cells, &admin_db, &f).await;
                    let at = ctx.now();
                    if !ctx.quiet {
                        eprintln!(
                            "fault restored at {at:.1}s: {:?} {}: {result}",
                            f.kind, f.cell
                        );
                    }
                    let mut log = log.lock().expect("faults");
                    log[idx].until_secs = Some(at);
                    log[idx].restore_result = Some(result);
                }
            };
            while (!pending.is_empty() || !restores.is_empty()) && !done.load(Ordering::Acquire) {
                let now = ctx.now();
                let active = ctx.active_total.load(Ordering::Relaxed);
                let (due, rest): (Vec<Fault>, Vec<Fault>) = pending.into_iter().partition(|f| {
                    f.at_secs.is_some_and(|t| t <= now)
                        || f.after_boots.is_some_and(|n| n <= active)
                });
                pending = rest;
                for f in due {
                    let at = ctx.now();
                    let (target, result) = apply_fault(&cells, &admin_db, &f).await;
                    if !ctx.quiet {
                        eprintln!("fault at {at:.1}s: {:?} {target}: {result}", f.kind);
                    }
                    let mut log = log.lock().expect("faults");
                    if let Some(d) = f.duration_secs {
                        // The outage lasts `d` once in force; restored even
                        // when the stop failed half-way (restoring is
                        // harmless when nothing was stopped).
                        restores.push((ctx.now() + d, log.len(), f.clone()));
                    }
                    log.push(FaultRecord {
                        kind: f.kind,
                        cell: f.cell.clone(),
                        target,
                        at_secs: at,
                        active_before: active,
                        result,
                        until_secs: None,
                        restore_result: None,
                        recovered_after_secs: None,
                    });
                }
                let now = ctx.now();
                let (due, rest): (Vec<_>, Vec<_>) =
                    restores.into_iter().partition(|(t, _, _)| *t <= now);
                restores = rest;
                for (_, idx, f) in due {
                    restore(idx, f).await;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            for (_, idx, f) in restores {
                restore(idx, f).await;
            }
        })
    });

    let mut phases = Vec::new();
    let mut failed = None;
    for (i, p) in s.phases.iter().enumerate() {
        let label = p.label(i);
        match run_phase(&ctx, embedded.as_ref(), p, &label).await {
            Ok(r) => phases.push(r),
            Err(e) => {
                failed = Some(e.context(format!("phase {label}")));
                break;
            }
        }
    }
    faults_done.store(true, Ordering::Release);
    if let Some(t) = fault_task {
        let _ = t.await;
    }
    if let Some(e) = failed {
        return Err(e);
    }
    let seconds = ctx.now();
    let (invariants, not_checked) = match (&embedded, &url_checks) {
        (Some(e), _) => (settled_invariants(e).await?, None),
        (None, Some(Ok((compute, placement)))) => {
            match settled_api_invariants(compute, placement).await {
                Ok(v) => (v, None),
                Err(e) => (Vec::new(), Some(format!("{e:#}"))),
            }
        }
        (None, Some(Err(why))) => (Vec::new(), Some(why.clone())),
        (None, None) => (Vec::new(), Some("no way to read them".to_owned())),
    };
    if let Some(why) = &not_checked {
        eprintln!("invariants not checked: {why}");
    }
    for t in &ctx.tenants {
        t.watcher.stop.store(true, Ordering::Release);
    }
    let end = mem::read();
    memory.rss_end = end.rss_bytes;
    memory.peak_bytes = end.peak_bytes;
    let mut faults = fault_log.lock().expect("faults").clone();
    let records = std::mem::take(&mut *ctx.records.lock().expect("records"));
    for f in faults.iter_mut() {
        f.recovered_after_secs = recovered_after(f, &records);
    }
    let deleted = std::mem::take(&mut *ctx.deleted_at.lock().expect("deleted"));
    let mut report = RunReport {
        scenario: s.name.clone(),
        spec: s.clone(),
        started_at,
        machine: serde_json::json!({
            "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "loadavg_before": load_before.trim(),
            "loadavg_after": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
            "calibration_ms": calibration_ms,
            "cache_probe_ns": cache_probe_ns,
        }),
        target,
        memory,
        phases,
        throughput: throughput(&records, &deleted, seconds),
        errors_by_fault: errors_by_fault(&records, &faults),
        injected_spawn_failures: embedded
            .as_ref()
            .and_then(|e| e.hypervisor.as_ref())
            .map(|hv| hv.injected_failures()),
        faults,
        invariants_checked: not_checked.is_none(),
        invariants_not_checked: not_checked,
        invariants_outcome: InvariantsOutcome::Hold,
        invariants,
        seconds,
    };
    report.invariants_outcome = report.outcome();
    if let Some(e) = embedded {
        e.dbs.close().await;
        let cells = std::mem::take(&mut *e.cells.lock().await);
        for c in cells {
            c.shutdown().await;
        }
        e.region.shutdown().await;
        if e.remove_data {
            std::fs::remove_dir_all(&e.data_dir).ok();
        }
    }
    Ok(report)
}

/// The invariants once the region settled: checked again (up to 30 s)
/// while any is broken, since deletes release allocations shortly after
/// the list stops showing the server, or while a database cannot be read
/// (a cell recovering from an outage).
async fn settled_invariants(e: &Embedded) -> Result<Vec<Invariant>> {
    // A read can fail while a cell recovers from an outage: retried.
    settle(|| e.dbs.invariants(&e.placement), true).await
}

/// [`settled_invariants`] for a target by URL, through the APIs
/// ([`crate::inspect::api_invariants`]). An API that refuses (not an
/// administrator) is an error at once.
async fn settled_api_invariants(
    compute: &Compute,
    placement: &api::Placement,
) -> Result<Vec<Invariant>> {
    settle(|| crate::inspect::api_invariants(compute, placement), false).await
}

/// Reads the invariants with `read` until they all hold or 30 s have
/// passed; a failed read is retried within that time when `retry_errors`.
async fn settle<F, Fut>(mut read: F, retry_errors: bool) -> Result<Vec<Invariant>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Vec<Invariant>>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match read().await {
            Ok(v) if v.iter().all(|i| i.holds) || Instant::now() > deadline => return Ok(v),
            Err(err) if !retry_errors || Instant::now() > deadline => {
                return Err(err.context("read the invariants"))
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn run_phase(
    ctx: &Arc<Ctx>,
    embedded: Option<&Embedded>,
    p: &Phase,
    label: &str,
) -> Result<PhaseReport> {
    let started = Instant::now();
    let started_secs = ctx.now();
    let prog = Arc::new(Progress::default());
    let timeout = Duration::from_secs(p.timeout_secs);
    let tag = &uuid::Uuid::new_v4().simple().to_string()[..4];
    let name = format!("{label}-{tag}");
    let mut skipped_at_cap = 0usize;
    let mut replaced = 0usize;
    let mut deleted_early: Vec<(usize, String)> = Vec::new();
    let bar = progress::spawn(format!("{label} boot"), prog.clone(), ctx.quiet);
    let mut recs: Vec<ServerRec> = match p.kind {
        PhaseKind::BootAndDelete
        | PhaseKind::BootAndList
        | PhaseKind::Burst
        | PhaseKind::ManyTenants => {
            let n = p.servers.unwrap_or(0);
            prog.total.store(n as u64, Ordering::Relaxed);
            ctx.boot_many(p, &name, n, &prog).await
        }
        PhaseKind::Steady => {
            let rate = p.rate.unwrap_or(1.0);
            let dur = Duration::from_secs_f64(p.duration_secs.unwrap_or(1.0));
            prog.total
                .store((rate * dur.as_secs_f64()).ceil() as u64, Ordering::Relaxed);
            let in_flight = Arc::new(AtomicU64::new(0));
            let mut tasks = tokio::task::JoinSet::new();
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let mut i = 0usize;
            while started.elapsed() < dur {
                tick.tick().await;
                if started.elapsed() >= dur {
                    break;
                }
                if in_flight.load(Ordering::Relaxed) >= p.concurrency as u64 {
                    skipped_at_cap += 1;
                    continue;
                }
                in_flight.fetch_add(1, Ordering::Relaxed);
                let (c, f, inf, pr) = (
                    ctx.clone(),
                    (ctx.pick_flavor(p), ctx.pick_zone(p)),
                    in_flight.clone(),
                    prog.clone(),
                );
                let (tenant, nm) = (i % p.tenants, format!("lt-{name}-{i:06}"));
                tasks.spawn(async move {
                    let r = c.boot_one(tenant, f, nm, timeout, &pr).await;
                    inf.fetch_sub(1, Ordering::Relaxed);
                    r
                });
                i += 1;
            }
            prog.total.store(i as u64, Ordering::Relaxed);
            let mut out = Vec::new();
            while let Some(r) = tasks.join_next().await {
                out.push(r.context("boot task")?);
            }
            out
        }
        PhaseKind::Churn => {
            let pop = p.population.unwrap_or(1);
            let rate = p.rate.unwrap_or(1.0);
            let dur = Duration::from_secs_f64(p.duration_secs.unwrap_or(1.0));
            prog.total.store(
                pop as u64 + (rate * dur.as_secs_f64()).ceil() as u64,
                Ordering::Relaxed,
            );
            let first = ctx.boot_many(p, &name, pop, &prog).await;
            let live: Arc<Mutex<VecDeque<(usize, String)>>> = Arc::new(Mutex::new(
                first
                    .iter()
                    .filter(|r| r.outcome == Outcome::Active)
                    .filter_map(|r| Some((r.tenant, r.id.clone()?)))
                    .collect(),
            ));
            let churn_started = Instant::now();
            let in_flight = Arc::new(AtomicU64::new(0));
            let gone: Arc<Mutex<Vec<(usize, String)>>> = Arc::new(Mutex::new(Vec::new()));
            let mut tasks = tokio::task::JoinSet::new();
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let mut i = pop;
            while churn_started.elapsed() < dur {
                tick.tick().await;
                if churn_started.elapsed() >= dur {
                    break;
                }
                if in_flight.load(Ordering::Relaxed) >= p.concurrency as u64 {
                    skipped_at_cap += 1;
                    continue;
                }
                let Some(victim) = live.lock().expect("live").pop_front() else {
                    skipped_at_cap += 1;
                    continue;
                };
                in_flight.fetch_add(1, Ordering::Relaxed);
                replaced += 1;
                let (c, f, inf, pr) = (
                    ctx.clone(),
                    (ctx.pick_flavor(p), ctx.pick_zone(p)),
                    in_flight.clone(),
                    prog.clone(),
                );
                let (live, gone) = (live.clone(), gone.clone());
                let (tenant, nm) = (victim.0, format!("lt-{name}-{i:06}"));
                tasks.spawn(async move {
                    let _ = c.tenants[victim.0].compute.delete(&victim.1).await;
                    c.deleted_at.lock().expect("deleted").push(c.now());
                    gone.lock().expect("gone").push(victim);
                    let r = c.boot_one(tenant, f, nm, timeout, &pr).await;
                    if r.outcome == Outcome::Active {
                        if let Some(id) = &r.id {
                            live.lock().expect("live").push_back((r.tenant, id.clone()));
                        }
                    }
                    inf.fetch_sub(1, Ordering::Relaxed);
                    r
                });
                i += 1;
            }
            prog.total.store(i as u64, Ordering::Relaxed);
            let mut out = first;
            while let Some(r) = tasks.join_next().await {
                out.push(r.context("churn task")?);
            }
            deleted_early = std::mem::take(&mut *gone.lock().expect("gone"));
            out
        }
    };
    prog.finished.store(true, Ordering::Release);
    if let Some(b) = bar {
        let _ = b.await;
    }

    // The peak: distribution and build phases, read before any delete.
    let early: HashSet<&str> = deleted_early.iter().map(|(_, id)| id.as_str()).collect();
    let active_ids: HashSet<String> = recs
        .iter()
        .filter(|r| r.outcome == Outcome::Active)
        .filter_map(|r| r.id.clone())
        .collect();
    let (mut servers_per_cell, mut histogram, mut build_phases) =
        (BTreeMap::new(), Vec::new(), BTreeMap::new());
    let (mut servers_per_zone, mut outside_zone) = (BTreeMap::new(), Vec::new());
    let mut outside_host: Vec<String> = Vec::new();
    if let Some(e) = embedded {
        let live = e.dbs.live_instances().await?;
        let (per_cell, per_host) = e.dbs.distribution(&live);
        servers_per_cell = per_cell;
        let default_zone = crate::fleet::default_zone();
        let zone_of = |node: &str| {
            e.layout
                .zone_of
                .get(node)
                .cloned()
                .unwrap_or_else(|| default_zone.clone())
        };
        // Every zone, those holding nothing included.
        servers_per_zone = e
            .layout
            .hosts_per_zone
            .keys()
            .map(|z| (z.clone(), 0))
            .collect();
        for (node, n) in &per_host {
            *servers_per_zone.entry(zone_of(node)).or_default() += n;
        }
        let cell_of: HashMap<&str, &str> = live
            .iter()
            .map(|i| (i.uuid.as_str(), i.cell.as_str()))
            .collect();
        let node_of: HashMap<&str, &str> = live
            .iter()
            .filter(|i| i.cell != "cell0")
            .filter_map(|i| Some((i.uuid.as_str(), i.node.as_deref()?)))
            .collect();
        for r in recs.iter_mut() {
            if let Some(c) = r.id.as_deref().and_then(|id| cell_of.get(id)) {
                r.cell = Some((*c).to_owned());
            }
            if let Some(n) = r.id.as_deref().and_then(|id| node_of.get(id)) {
                r.node = Some((*n).to_owned());
            }
        }
        for r in &recs {
            let (Some(id), Some(want)) = (&r.id, &r.zone) else {
                continue;
            };
            if let Some(node) = node_of.get(id.as_str()) {
                let got = zone_of(node);
                if got != *want {
                    outside_zone.push(format!(
                        "server {id} requested {want}, is on {node} in {got}"
                    ));
                }
            }
        }
        // Servers that named a host and sit on another (the scheduler
        // keeps only the named host: should be none).
        for r in &recs {
            let (Some(id), Some(want)) = (&r.id, &r.host) else {
                continue;
            };
            if let Some(node) = node_of.get(id.as_str()) {
                if node != want {
                    outside_host.push(format!("server {id} requested {want}, is on {node}"));
                }
            }
        }
        let hosts = e.region_hosts().await;
        for h in &hosts {
            let n = per_host.get(h).copied().unwrap_or(0);
            if histogram.len() <= n {
                histogram.resize(n + 1, 0);
            }
            histogram[n] += 1;
        }
        let times = e.dbs.build_times(&active_ids).await?;
        build_phases = split_phases(&recs, &times);
    }

    let list = if p.kind == PhaseKind::BootAndList {
        let runs = p.list_runs.unwrap_or(10);
        let c = &ctx.tenants[0].compute;
        let (first, _) = c.list_page("/servers/detail?limit=1000").await?;
        let mut lat = Vec::new();
        for _ in 0..runs {
            let (took, _) = c.get_timed("/servers/detail?limit=1000").await?;
            lat.push(took);
        }
        Some((summarize(&mut lat), first.len()))
    } else {
        None
    };

    let isolation = if p.kind == PhaseKind::ManyTenants {
        let mut violations = Vec::new();
        for (k, t) in ctx.tenants.iter().enumerate().take(p.tenants) {
            let own: HashSet<&str> = recs
                .iter()
                .filter(|r| r.tenant == k)
                .filter_map(|r| r.id.as_deref())
                .collect();
            let seen = t.compute.list_all(false, "").await?;
            let foreign = seen.iter().filter(|s| !own.contains(s.id.as_str())).count();
            let seen_ids: HashSet<&str> = seen.iter().map(|s| s.id.as_str()).collect();
            let missing = own.iter().filter(|id| !seen_ids.contains(*id)).count();
            if foreign > 0 || missing > 0 {
                violations.push(format!(
                    "{}: lists {foreign} servers of other projects, misses {missing} of its own",
                    t.name
                ));
            }
        }
        Some(Isolation {
            tenants: p.tenants,
            holds: violations.is_empty(),
            violations,
        })
    } else {
        None
    };

    let deletes = if p.delete {
        let items: Vec<(usize, String)> = recs
            .iter()
            .filter_map(|r| Some((r.tenant, r.id.clone()?)))
            .filter(|(_, id)| !early.contains(id.as_str()))
            .collect();
        let dprog = Arc::new(Progress::default());
        dprog.total.store(items.len() as u64, Ordering::Relaxed);
        let bar = progress::spawn(format!("{label} delete"), dprog.clone(), ctx.quiet);
        let mut d = ctx
            .delete_many(&items, p.concurrency, timeout, &dprog)
            .await;
        dprog.finished.store(true, Ordering::Release);
        if let Some(b) = bar {
            let _ = b.await;
        }
        if !deleted_early.is_empty() {
            d.left += ctx.wait_gone(&deleted_early, Instant::now(), timeout).await;
        }
        Some(d)
    } else {
        None
    };
    let invariants = match embedded {
        Some(e) => settled_invariants(e).await?,
        None => Vec::new(),
    };

    let mut accept_lat: Vec<Duration> = recs.iter().filter_map(|r| r.accept).collect();
    let mut tta: Vec<Duration> = recs.iter().filter_map(|r| r.tta).collect();
    let mut refused: BTreeMap<u16, usize> = BTreeMap::new();
    let mut flavors: BTreeMap<String, usize> = BTreeMap::new();
    let mut requested_zones: BTreeMap<String, usize> = BTreeMap::new();
    let (mut active, mut error, mut stuck) = (0, 0, 0);
    for r in &recs {
        *flavors.entry(r.flavor.clone()).or_default() += 1;
        if let Some(z) = &r.zone {
            *requested_zones.entry(z.clone()).or_default() += 1;
        }
        match &r.outcome {
            Outcome::Active => active += 1,
            Outcome::Error(_) => error += 1,
            Outcome::Stuck => stuck += 1,
            Outcome::Refused(s, _) => *refused.entry(*s).or_default() += 1,
        }
    }
    let first_post = recs.iter().map(|r| r.t_post).fold(f64::INFINITY, f64::min);
    let last_accept = recs
        .iter()
        .filter_map(|r| Some(r.t_post + r.accept?.as_secs_f64()))
        .fold(0.0, f64::max);
    let last_active = recs
        .iter()
        .filter(|r| r.outcome == Outcome::Active)
        .filter_map(|r| r.t_done)
        .fold(0.0, f64::max);
    let accepted = accept_lat.len();
    let report = PhaseReport {
        name: label.to_owned(),
        kind: p.kind,
        concurrency: p.concurrency,
        tenants: p.tenants,
        started_secs,
        seconds: started.elapsed().as_secs_f64(),
        requested: recs.len(),
        accepted,
        refused,
        active,
        error,
        stuck_in_build: stuck,
        flavors,
        requested_zones,
        accept_latency: summarize(&mut accept_lat),
        time_to_active: summarize(&mut tta),
        build_phases,
        accepts_per_second: rate(accepted, last_accept - first_post),
        boots_per_second: rate(active, last_active - first_post),
        skipped_at_cap,
        replaced,
        list_page_size: list.as_ref().map(|l| l.1),
        list: list.map(|l| l.0),
        isolation,
        deletes,
        servers_per_cell,
        servers_per_host_histogram: histogram,
        servers_per_zone,
        outside_requested_zone: outside_zone.len(),
        outside_requested_zone_examples: outside_zone.into_iter().take(10).collect(),
        requested_hosts: recs.iter().filter(|r| r.host.is_some()).count(),
        outside_requested_host: outside_host.len(),
        outside_requested_host_examples: outside_host.into_iter().take(10).collect(),
        invariants,
    };
    ctx.records.lock().expect("records").append(&mut recs);
    Ok(report)
}

fn rate(n: usize, secs: f64) -> f64 {
    if n == 0 || !secs.is_finite() || secs <= 0.0 {
        0.0
    } else {
        n as f64 / secs
    }
}

impl Embedded {
    async fn region_hosts(&self) -> Vec<String> {
        self.cells
            .lock()
            .await
            .iter()
            .flat_map(|c| c.hosts.iter().map(|(n, _)| n.clone()))
            .collect()
    }
}

/// Time-to-ACTIVE split at the timestamps the region records:
/// `api_accept` POST → 202 (client clock); `scheduling` POST → the
/// super-conductor starts writing the instance into its cell, the
/// scheduler's choice and the placement claim made (the API answers 202
/// once the build request is written and schedules in the background, so
/// it overlaps `api_accept`); `cell_create` → the instance landed in its
/// cell (the row written, the build request replaced by the mapping to
/// the cell); `cell_to_host` → the host starts
/// `compute__do_build_and_run_instance` (the cast, the host's queue);
/// `host_prepare` → `compute_spawn` starts (block devices, networking);
/// `spawn` the `compute_spawn` event; `report_lag` spawn finished → seen
/// ACTIVE by the poller (the poll interval's share).
fn split_phases(
    recs: &[ServerRec],
    times: &HashMap<String, crate::inspect::BuildTimes>,
) -> BTreeMap<String, Summary> {
    let mut cols: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
    let ms = |a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>| -> Option<Duration> {
        let d = (b? - a?).num_microseconds()?;
        Some(Duration::from_micros(d.max(0) as u64))
    };
    for r in recs.iter().filter(|r| r.outcome == Outcome::Active) {
        if let Some(a) = r.accept {
            cols.entry("1_api_accept").or_default().push(a);
        }
        let Some(t) = r.id.as_ref().and_then(|id| times.get(id)) else {
            continue;
        };
        let posted_wall = r
            .accepted_wall
            .zip(r.accept)
            .and_then(|(w, a)| chrono::Duration::from_std(a).ok().map(|a| w - a));
        let seen_wall = posted_wall
            .zip(r.tta)
            .and_then(|(p, d)| chrono::Duration::from_std(d).ok().map(|d| p + d));
        for (k, v) in [
            ("2_scheduling", ms(posted_wall, t.scheduled)),
            ("3_cell_create", ms(t.scheduled, t.mapped)),
            ("4_cell_to_host", ms(t.mapped, t.build_start)),
            ("5_host_prepare", ms(t.build_start, t.spawn_start)),
            ("6_spawn", ms(t.spawn_start, t.spawn_finish)),
            ("7_report_lag", ms(t.spawn_finish, seen_wall)),
        ] {
            if let Some(v) = v {
                cols.entry(k).or_default().push(v);
            }
        }
    }
    cols.into_iter()
        .map(|(k, mut v)| (k.to_owned(), summarize(&mut v)))
        .collect()
}

fn throughput(recs: &[ServerRec], deleted: &[f64], seconds: f64) -> Throughput {
    let n = (seconds.ceil() as usize).max(1);
    let mut t = Throughput {
        bucket_seconds: 1.0,
        accepted: vec![0; n],
        active: vec![0; n],
        error: vec![0; n],
        deleted: vec![0; n],
    };
    let idx = |x: f64| ((x.max(0.0)) as usize).min(n - 1);
    for r in recs {
        if let Some(a) = r.accept {
            t.accepted[idx(r.t_post + a.as_secs_f64())] += 1;
        }
        match (&r.outcome, r.t_done) {
            (Outcome::Active, Some(d)) => t.active[idx(d)] += 1,
            (Outcome::Error(_), Some(d)) => t.error[idx(d)] += 1,
            _ => {}
        }
    }
    for d in deleted {
        t.deleted[idx(*d)] += 1;
    }
    t
}

/// `msg` with every UUID replaced by `<uuid>`, so messages naming their
/// instance group together.
pub fn without_uuids(msg: &str) -> String {
    let b = msg.as_bytes();
    let is_uuid = |w: &[u8]| {
        w.len() == 36
            && w.iter().enumerate().all(|(i, c)| match i {
                8 | 13 | 18 | 23 => *c == b'-',
                _ => c.is_ascii_hexdigit(),
            })
    };
    let mut out = String::with_capacity(msg.len());
    let mut i = 0;
    while i < b.len() {
        if i + 36 <= b.len() && is_uuid(&b[i..i + 36]) {
            out.push_str("<uuid>");
            i += 36;
        } else {
            let ch = msg[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// Whether `msg` names `word` (not as the prefix of a longer name).
fn names(msg: &str, word: &str) -> bool {
    msg.match_indices(word).any(|(i, _)| {
        !msg[i + word.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    })
}

/// The marker of the fake hosts' injected spawn failures.
const FAILING_HOST_MESSAGE: &str = "injected spawn failure (scenario fleet.failing_hosts)";

/// What a spawn failed by `fleet.spawn_failure_rate` says.
const SPAWN_FAILURE_RATE_MESSAGE: &str =
    "injected spawn failure (scenario fleet.spawn_failure_rate)";

/// Seconds from the restore of outage `f` until the first server of its
/// cell sent after the restore was seen ACTIVE.
fn recovered_after(f: &FaultRecord, recs: &[ServerRec]) -> Option<f64> {
    let until = f.until_secs?;
    recs.iter()
        .filter(|r| r.outcome == Outcome::Active && r.t_post >= until)
        .filter(|r| r.cell.as_deref() == Some(f.cell.as_str()))
        .filter_map(|r| r.t_done)
        .min_by(f64::total_cmp)
        .map(|t| t - until)
}

/// Whether fault `f` can have caused what happened to `r`, by where `r`
/// was at its phase's peak: a server known to be in another cell (cell0
/// aside: any fault can leave a server without a valid host) or, for a
/// stopped host, known to be on another host is not the fault's.
fn could_touch(f: &FaultRecord, r: &ServerRec) -> bool {
    let other_cell = r
        .cell
        .as_deref()
        .is_some_and(|c| c != "cell0" && c != f.cell);
    let other_host =
        f.kind == FaultKind::StopHost && r.node.as_deref().is_some_and(|n| n != f.target);
    !other_cell && !other_host
}

/// Groups the errors by their cause: `fleet.failing_hosts` and
/// `fleet.spawn_failure_rate` for the injected spawn failures; the fault
/// whose host or conductor the message names; a restored outage
/// (stop-broker, stop-database) when the server was in flight between the
/// outage's start and its cell's recovery (the first server sent to the
/// cell after the restore ACTIVE); otherwise the last fault never
/// restored applied before the error (the one in force), or `no fault`.
/// The last two only take a server the fault could have touched
/// ([`could_touch`]: its cell, and for a stopped host its host, when
/// known). Messages are grouped with their UUIDs masked.
fn errors_by_fault(
    recs: &[ServerRec],
    faults: &[FaultRecord],
) -> BTreeMap<String, BTreeMap<String, usize>> {
    let mut out: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for r in recs {
        let msg = match &r.outcome {
            Outcome::Active => continue,
            Outcome::Error(m) => format!("ERROR: {m}"),
            Outcome::Stuck => "still BUILD at the phase's timeout".to_owned(),
            Outcome::Refused(0, m) => format!("no answer: {m}"),
            Outcome::Refused(s, m) => format!("HTTP {s}: {m}"),
        };
        let at = r.t_done.unwrap_or(r.t_post);
        let in_window = |f: &&FaultRecord| {
            let (from, to) = f.window();
            r.t_post <= to && at >= from
        };
        let label = if msg.contains(FAILING_HOST_MESSAGE) {
            "fleet.failing_hosts".to_owned()
        } else if msg.contains(SPAWN_FAILURE_RATE_MESSAGE) {
            "fleet.spawn_failure_rate".to_owned()
        } else if let Some(f) = faults
            .iter()
            .find(|f| f.applied() && names(&msg, &f.target))
        {
            f.label()
        } else if let Some(f) = faults
            .iter()
            .rfind(|f| f.applied() && f.until_secs.is_some() && in_window(f) && could_touch(f, r))
        {
            // An outage that was restored: what was in flight while it
            // lasted or before its cell recovered.
            f.label()
        } else {
            faults
                .iter()
                .rfind(|f| {
                    f.applied() && f.until_secs.is_none() && f.at_secs <= at && could_touch(f, r)
                })
                .map(FaultRecord::label)
                .unwrap_or_else(|| "no fault".to_owned())
        };
        let msg = without_uuids(&msg);
        *out.entry(label).or_default().entry(msg).or_default() += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(outcome: Outcome, t: f64) -> ServerRec {
        ServerRec {
            id: None,
            tenant: 0,
            flavor: String::new(),
            zone: None,
            host: None,
            cell: None,
            node: None,
            t_post: t,
            accept: None,
            accepted_wall: None,
            outcome,
            t_done: Some(t),
            tta: None,
        }
    }

    fn phase_report(name: &str) -> PhaseReport {
        PhaseReport {
            name: name.to_owned(),
            kind: PhaseKind::ManyTenants,
            concurrency: 1,
            tenants: 2,
            started_secs: 0.0,
            seconds: 1.0,
            requested: 2,
            accepted: 2,
            refused: BTreeMap::new(),
            active: 2,
            error: 0,
            stuck_in_build: 0,
            flavors: BTreeMap::new(),
            requested_zones: BTreeMap::new(),
            accept_latency: summarize(&mut []),
            time_to_active: summarize(&mut []),
            build_phases: BTreeMap::new(),
            accepts_per_second: 0.0,
            boots_per_second: 0.0,
            skipped_at_cap: 0,
            replaced: 0,
            list: None,
            list_page_size: None,
            isolation: None,
            deletes: None,
            servers_per_cell: BTreeMap::new(),
            servers_per_host_histogram: Vec::new(),
            servers_per_zone: BTreeMap::new(),
            outside_requested_zone: 0,
            outside_requested_zone_examples: Vec::new(),
            requested_hosts: 0,
            outside_requested_host: 0,
            outside_requested_host_examples: Vec::new(),
            invariants: Vec::new(),
        }
    }

    fn run_report(phases: Vec<PhaseReport>, invariants: Vec<Invariant>) -> RunReport {
        let spec = Scenario::parse(
            "name = \"t\"\n[[phase]]\nkind = \"many-tenants\"\nservers = 2\ntenants = 2\n",
        )
        .unwrap();
        RunReport {
            scenario: "t".into(),
            spec,
            started_at: Utc::now(),
            machine: serde_json::Value::Null,
            target: TargetReport {
                embedded: true,
                cells: 1,
                hypervisors: 1,
                start_seconds: 0.0,
                config: serde_json::Value::Null,
                failing_hosts: Vec::new(),
                host_spawn_latency_ms: summarize(&mut []),
                layout: crate::fleet::Layout::default(),
            },
            memory: MemoryReport::default(),
            phases,
            throughput: Throughput::default(),
            faults: Vec::new(),
            errors_by_fault: BTreeMap::new(),
            injected_spawn_failures: None,
            invariants,
            invariants_checked: true,
            invariants_not_checked: None,
            invariants_outcome: InvariantsOutcome::Hold,
            seconds: 1.0,
        }
    }

    fn holding(name: &'static str, holds: bool) -> Invariant {
        Invariant {
            name,
            holds,
            violations: usize::from(!holds),
            examples: Vec::new(),
        }
    }

    /// A broken invariant, a many-tenants isolation violation and
    /// invariants that could not be checked each fail the run (the
    /// binary's exit status); only the last can be accepted, explicitly.
    #[test]
    fn broken_isolation_and_unchecked_invariants_fail_the_run() {
        let ok = run_report(
            vec![phase_report("p")],
            vec![holding(crate::inspect::NO_BUILD_REQUEST_LEFT, true)],
        );
        assert_eq!(ok.outcome(), InvariantsOutcome::Hold);
        assert_eq!(ok.failure(false), None);

        let broken = run_report(
            vec![phase_report("p")],
            vec![holding(crate::inspect::NO_BUILD_REQUEST_LEFT, false)],
        );
        assert_eq!(broken.outcome(), InvariantsOutcome::Broken);
        let why = broken.failure(true).expect("a broken invariant fails");
        assert!(why.contains(crate::inspect::NO_BUILD_REQUEST_LEFT), "{why}");

        let mut leaky = phase_report("tenants");
        leaky.isolation = Some(Isolation {
            tenants: 2,
            holds: false,
            violations: vec!["t1: lists 1 servers of other projects".into()],
        });
        let isolation = run_report(vec![leaky], Vec::new());
        assert_eq!(isolation.broken(), [TENANT_ISOLATION]);
        assert_eq!(isolation.outcome(), InvariantsOutcome::Broken);
        let why = isolation.failure(true).expect("isolation broken fails");
        assert!(why.contains(TENANT_ISOLATION), "{why}");
        assert!(report_summary_says(
            &isolation,
            "invariants: BROKEN: each project"
        ));

        let mut unchecked = run_report(vec![phase_report("p")], Vec::new());
        unchecked.invariants_checked = false;
        unchecked.invariants_not_checked = Some("not an administrator".into());
        assert_eq!(unchecked.outcome(), InvariantsOutcome::NotChecked);
        let why = unchecked
            .failure(false)
            .expect("unchecked fails by default");
        assert!(
            why.contains("not an administrator") && why.contains("--allow-unchecked"),
            "{why}"
        );
        assert_eq!(unchecked.failure(true), None);
        assert!(report_summary_says(
            &unchecked,
            "invariants: NOT CHECKED: not an administrator"
        ));
        assert_eq!(
            serde_json::to_value(InvariantsOutcome::NotChecked).unwrap(),
            "not-checked"
        );
    }

    fn report_summary_says(r: &RunReport, what: &str) -> bool {
        let s = crate::report::summary(r);
        s.contains(what) || panic!("{what:?} not in {s}")
    }

    /// Each build phase runs from one recorded timestamp to the next:
    /// scheduling ends when the instance is written into its cell, cell
    /// create when its mapping names the cell.
    #[test]
    fn time_to_active_splits_at_the_recorded_timestamps() {
        let posted = Utc::now();
        let at = |ms: i64| Some(posted + chrono::Duration::milliseconds(ms));
        let mut r = rec(Outcome::Active, 0.0);
        r.id = Some("i1".into());
        r.accept = Some(Duration::from_millis(30));
        r.accepted_wall = at(30);
        r.tta = Some(Duration::from_millis(1000));
        let times = HashMap::from([(
            "i1".to_owned(),
            crate::inspect::BuildTimes {
                scheduled: at(100),
                mapped: at(140),
                build_start: at(300),
                spawn_start: at(450),
                spawn_finish: at(850),
            },
        )]);
        let split = split_phases(&[r], &times);
        let got: Vec<(&str, f64)> = split
            .iter()
            .map(|(k, s)| (k.as_str(), s.p50_ms.round()))
            .collect();
        assert_eq!(
            got,
            [
                ("1_api_accept", 30.0),
                ("2_scheduling", 100.0),
                ("3_cell_create", 40.0),
                ("4_cell_to_host", 160.0),
                ("5_host_prepare", 150.0),
                ("6_spawn", 400.0),
                ("7_report_lag", 150.0),
            ]
        );
    }

    #[test]
    fn errors_group_by_cause_with_uuids_masked() {
        let f = FaultRecord {
            kind: FaultKind::StopHost,
            cell: "cell1".into(),
            target: "cell1-host01".into(),
            at_secs: 2.0,
            active_before: 3,
            result: "applied".into(),
            until_secs: None,
            restore_result: None,
            recovered_after_secs: None,
        };
        let recs = vec![
            rec(Outcome::Error("Build of instance 0a55f66d-6df0-4ba2-9f24-3d46330bec51 failed on host cell1-host08: injected spawn failure (scenario fleet.failing_hosts)".into()), 1.0),
            rec(Outcome::Error("Build of instance 1c4faea9-19a4-4065-863f-218d30a1cffa failed on host cell1-host08: injected spawn failure (scenario fleet.failing_hosts)".into()), 3.0),
            rec(Outcome::Error("lost on cell1-host01: gone".into()), 1.0),
            rec(Outcome::Error("lost on cell1-host010: gone".into()), 1.0),
            rec(Outcome::Stuck, 5.0),
            rec(Outcome::Refused(409, "quota".into()), 1.0),
            rec(Outcome::Active, 1.0),
        ];
        let g = errors_by_fault(&recs, &[f]);
        let hosts = &g["fleet.failing_hosts"];
        assert_eq!(hosts.len(), 1, "{g:#?}");
        assert_eq!(hosts.values().next(), Some(&2));
        assert!(hosts
            .keys()
            .next()
            .unwrap()
            .contains("instance <uuid> failed"));
        let fault = &g["stop-host cell1-host01 at 2.0s"];
        assert_eq!(fault["ERROR: lost on cell1-host01: gone"], 1);
        assert_eq!(fault["still BUILD at the phase's timeout"], 1);
        assert_eq!(g["no fault"]["ERROR: lost on cell1-host010: gone"], 1);
        assert_eq!(g["no fault"]["HTTP 409: quota"], 1);
    }

    #[test]
    fn a_fault_owns_only_servers_of_its_cell_and_a_stopped_host_only_its_own() {
        let fault = |kind, cell: &str, target: &str, at| FaultRecord {
            kind,
            cell: cell.into(),
            target: target.into(),
            at_secs: at,
            active_before: 0,
            result: "applied".into(),
            until_secs: None,
            restore_result: None,
            recovered_after_secs: None,
        };
        // cell1's conductor stops first, then a host of cell2.
        let faults = [
            fault(FaultKind::StopConductor, "cell1", "cell1-conductor", 1.0),
            fault(FaultKind::StopHost, "cell2", "cell2-host03", 2.0),
        ];
        let stuck = |cell: Option<&str>, node: Option<&str>| {
            let mut r = rec(Outcome::Stuck, 5.0);
            r.cell = cell.map(str::to_owned);
            r.node = node.map(str::to_owned);
            r
        };
        let recs = vec![
            stuck(Some("cell1"), Some("cell1-host01")),
            stuck(Some("cell2"), Some("cell2-host03")),
            // In cell2 on a host that kept running: not the stopped
            // host's, and not cell1's conductor's either.
            stuck(Some("cell2"), Some("cell2-host04")),
            // Where it was is unknown, or it has no host (cell0): the
            // last fault in force.
            stuck(None, None),
            stuck(Some("cell0"), None),
            rec(
                Outcome::Error(format!("Build of instance x: {SPAWN_FAILURE_RATE_MESSAGE}")),
                5.0,
            ),
        ];
        let g = errors_by_fault(&recs, &faults);
        let stuck_msg = "still BUILD at the phase's timeout";
        assert_eq!(
            g["stop-conductor cell1-conductor at 1.0s"][stuck_msg], 1,
            "{g:#?}"
        );
        assert_eq!(g["stop-host cell2-host03 at 2.0s"][stuck_msg], 3, "{g:#?}");
        assert_eq!(g["no fault"][stuck_msg], 1, "{g:#?}");
        assert_eq!(g["fleet.spawn_failure_rate"].values().sum::<usize>(), 1);
    }

    #[test]
    fn a_restored_outage_owns_what_was_in_flight_until_recovery() {
        let f = FaultRecord {
            kind: FaultKind::StopDatabase,
            cell: "cell1".into(),
            target: "cell1-database".into(),
            at_secs: 2.0,
            active_before: 3,
            result: "applied".into(),
            until_secs: Some(5.0),
            restore_result: Some("restored".into()),
            recovered_after_secs: None,
        };
        let mut sent_before = rec(Outcome::Error("db".into()), 1.0);
        sent_before.t_done = Some(3.0);
        let mut recs = vec![
            rec(Outcome::Error("early".into()), 1.0),
            sent_before,
            rec(Outcome::Error("during".into()), 4.0),
            rec(Outcome::Error("recovering".into()), 6.0),
            rec(Outcome::Error("later".into()), 9.0),
        ];
        recs[0].t_done = Some(1.5);
        let mut ok = rec(Outcome::Active, 7.0);
        ok.cell = Some("cell1".into());
        ok.t_done = Some(8.0);
        let mut other_cell = rec(Outcome::Active, 5.5);
        other_cell.cell = Some("cell2".into());
        recs.push(ok);
        recs.push(other_cell);
        let mut f = f;
        // Recovered: the first cell1 server sent after 5.0 s, ACTIVE at 8.0 s.
        f.recovered_after_secs = recovered_after(&f, &recs);
        assert_eq!(f.recovered_after_secs, Some(3.0));
        let g = errors_by_fault(&recs, std::slice::from_ref(&f));
        let under = &g["stop-database cell1-database at 2.0s until 5.0s"];
        assert_eq!(under.len(), 3, "{g:#?}");
        assert!(under.contains_key("ERROR: db") && under.contains_key("ERROR: recovering"));
        assert_eq!(g["no fault"].len(), 2, "{g:#?}");
        assert!(
            g["no fault"].contains_key("ERROR: early")
                && g["no fault"].contains_key("ERROR: later")
        );
    }
}
