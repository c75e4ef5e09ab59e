//! What a run reports: per phase, deletes, isolation, memory, the
//! target and throughput, as `report.json` holds them.

use super::*;

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
/// The broken-invariant name of servers still in BUILD at their phase's
/// timeout: every build ends ACTIVE or in ERROR with a fault (issue 31),
/// so a stuck one is a failure, never an outcome.
pub const NO_SERVER_LEFT_IN_BUILD: &str = "no server left in BUILD";
/// The broken-invariant name of live hosts `os-services` showed down.
pub const NO_LIVE_HOST_SHOWN_DOWN: &str = "no live host shown down";

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
    /// What `os-services` showed of the hosts during the run (embedded
    /// targets): the false positives of liveness under load.
    pub liveness: Option<LivenessSamples>,
}

/// Samples of `os-services` taken once a second during a run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LivenessSamples {
    /// Samples taken.
    pub samples: u64,
    /// Host-samples that showed a host down that no fault had stopped (in
    /// a cell whose conductor, broker and database no fault had touched).
    pub false_down: u64,
    /// Those hosts.
    pub false_down_hosts: Vec<String>,
    /// Hosts already down in the first sample, before any fault: dead
    /// before the run (a URL target's), not counted.
    pub down_at_start: Vec<String>,
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
        if self.phases.iter().any(|p| p.stuck_in_build > 0) {
            out.push(NO_SERVER_LEFT_IN_BUILD.to_owned());
        }
        if self.liveness.as_ref().is_some_and(|l| l.false_down > 0) {
            out.push(NO_LIVE_HOST_SHOWN_DOWN.to_owned());
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

pub(super) fn throughput(recs: &[ServerRec], deleted: &[f64], seconds: f64) -> Throughput {
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

pub(super) fn rate(n: usize, secs: f64) -> f64 {
    if n == 0 || !secs.is_finite() || secs <= 0.0 {
        0.0
    } else {
        n as f64 / secs
    }
}
