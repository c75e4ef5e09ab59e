//! Scenario files: the fleet, the target, the phases and the faults of one
//! `loadtest run`, in TOML.
//!
//! ```toml
//! name = "tiny"
//! seed = 7
//!
//! [fleet]
//! cells = 1
//! hosts_per_cell = 3
//! spawn_latency = { kind = "uniform", min_ms = 5, max_ms = 50 }
//! failing_hosts = 0.0          # share of hosts whose spawns all fail
//! spawn_failure_rate = 0.0     # chance that any one spawn fails (every
//!                              # host; a reschedule draws again)
//! availability_zones = 2       # az1, az2: each cell's hosts alternate
//! aggregates = 2               # lt-group1, lt-group2 (loadtest_group=<i>)
//! host_vcpus = 8               # each fake host (placement inventory);
//! host_memory_mb = 16384       #   default 16 VCPU, 65536 MB, 1000 GB
//! host_disk_gb = 200
//!
//! [target]
//! kind = "embedded"            # or "url" with compute_url, identity_url, …
//!                              # (http:// or https://; user_domain_name
//!                              # and project_domain_name default to
//!                              # Default; a URL target's invariants are
//!                              # checked through the APIs when its user
//!                              # is an administrator, placement_url or
//!                              # the catalog's placement endpoint, else
//!                              # the run fails unless --allow-unchecked)
//! compute_microversion = "2.90"  # the default; 2.37 or later
//! ca_file = "ca.pem"           # url: PEM bundle trusted besides the
//!                              # system's roots (relative to the scenario
//!                              # file; default OS_CACERT)
//! insecure = false             # url: true skips certificate checks
//!                              # (like `openstack --insecure`; warns)
//! key_pairs = false            # true: every tenant imports a key pair
//!                              # and names it in each create (`key_name`)
//!
//! [region]                     # passed to region::RegionConfig's [region]
//! heartbeat_interval_secs = 10
//!
//! [[phase]]
//! kind = "boot-and-delete"
//! servers = 10
//! concurrency = 4
//! flavors = { "m1.tiny" = 3, "m1.small" = 1 }
//! availability_zones = { az1 = 1, az2 = 1 }   # requested zone mix
//! requested_hosts = 0.25       # share naming a host (2.74, admin; embedded)
//!
//! [[fault]]
//! kind = "stop-host"
//! cell = "cell1"
//! after_boots = 5
//!
//! [[fault]]                    # cells on PostgreSQL + RabbitMQ only
//! kind = "stop-database"       # or "stop-broker"
//! cell = "cell1"
//! at_secs = 2.0
//! duration_secs = 3.0          # then restored
//!
//! [[fault]]                    # any target, a URL's too
//! kind = "kill-host"           # a hook: the command kills the host's
//! cell = "cell1"               # compute process (no shell; 30 s at most)
//! host = "cell1-spare-0001"
//! command = ["kill", "-9", "4242"]
//! after_boots = 5
//! ```
//!
//! `stop-broker` closes the connections of the cell's RabbitMQ vhost and
//! refuses new ones; `stop-database` refuses connections to the cell's
//! PostgreSQL database and ends its sessions (see [`crate::outage`]). On
//! the embedded default (in-process buses, SQLite files) both are refused
//! before anything starts. `kill-host` runs its command (a fault hook: the
//! operator says how a compute process of the deployment is killed, e.g.
//! `kill -9` of its pid, or over ssh) and then, as after `stop-host`,
//! times how long the region takes to show the host down and to leave no
//! build on it. It is the only fault a URL target takes.
//!
//! Every table refuses unknown keys, so a misspelt knob is an error naming
//! it rather than a silently ignored setting.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// One scenario file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Name, used in the report.
    pub name: String,
    /// Seed of the random choices (flavor mix, latency draws, failing hosts).
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// The simulated fleet (embedded target only).
    #[serde(default)]
    pub fleet: Fleet,
    /// Where to run.
    #[serde(default)]
    pub target: TargetSpec,
    /// Keys of region::RegionConfig's `[region]` section, passed through
    /// as they are (the fleet's `cells` / `hosts_per_cell` and free listen
    /// ports are filled in unless given here).
    #[serde(default)]
    pub region: toml::Table,
    /// A whole region configuration file to start from (relative to the
    /// scenario file); `[region]` keys override it.
    #[serde(default)]
    pub region_file: Option<PathBuf>,
    /// The phases, run in order.
    #[serde(default, rename = "phase")]
    pub phases: Vec<Phase>,
    /// Faults injected during the run.
    #[serde(default, rename = "fault")]
    pub faults: Vec<Fault>,
}

fn default_seed() -> u64 {
    1
}

/// The simulated fleet.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Fleet {
    /// Cells besides cell0.
    pub cells: u32,
    /// Fake hosts per cell.
    pub hosts_per_cell: u32,
    /// Extra spawn time of each host, drawn once per host.
    pub spawn_latency: Latency,
    /// Share (0..=1) of hosts whose spawns all fail.
    pub failing_hosts: f64,
    /// Probability (0..=1) that any one spawn fails, on every host; drawn
    /// per spawn, so a reschedule onto an alternate draws again.
    pub spawn_failure_rate: f64,
    /// VCPUs of each fake host (default: compute's 16, × 16 allocation
    /// ratio); region::RegionConfig's `host_vcpus`.
    pub host_vcpus: Option<u32>,
    /// Memory of each fake host, MB (default 65536, × 1.5).
    pub host_memory_mb: Option<u64>,
    /// Local disk of each fake host, GB (default 1000, × 1.0).
    pub host_disk_gb: Option<u64>,
    /// Availability zones `az1` … `azN`: each cell's hosts spread over
    /// them (host `j` of a cell in zone `j mod N`), one aggregate
    /// `lt-az<k>` with that `availability_zone` per zone, created through
    /// the Compute API once the fleet is up (embedded target).
    pub availability_zones: Option<u32>,
    /// Further host aggregates `lt-group1` … `lt-groupN` with metadata
    /// `loadtest_group=<i>`, host `g` of the fleet in group `g mod N`
    /// (embedded target).
    pub aggregates: Option<u32>,
}

impl Default for Fleet {
    fn default() -> Self {
        Self {
            cells: 1,
            hosts_per_cell: 4,
            spawn_latency: Latency::Fixed { ms: 0 },
            failing_hosts: 0.0,
            spawn_failure_rate: 0.0,
            host_vcpus: None,
            host_memory_mb: None,
            host_disk_gb: None,
            availability_zones: None,
            aggregates: None,
        }
    }
}

impl Fleet {
    /// The per-host resources set, as region::RegionConfig keys and values.
    pub fn host_resources(&self) -> Vec<(&'static str, u64)> {
        [
            ("host_vcpus", self.host_vcpus.map(u64::from)),
            ("host_memory_mb", self.host_memory_mb),
            ("host_disk_gb", self.host_disk_gb),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k, v?)))
        .collect()
    }
}

/// A latency distribution.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Latency {
    /// Always `ms`.
    Fixed {
        /// Milliseconds.
        ms: u64,
    },
    /// Uniform in `[min_ms, max_ms]`.
    Uniform {
        /// Lower bound.
        min_ms: u64,
        /// Upper bound.
        max_ms: u64,
    },
    /// Normal-ish (Irwin–Hall of 12 uniforms), clamped at 0.
    Normal {
        /// Mean.
        mean_ms: f64,
        /// Standard deviation.
        stddev_ms: f64,
    },
}

impl Latency {
    /// One draw.
    pub fn draw(&self, rng: &mut Rng) -> u64 {
        match *self {
            Latency::Fixed { ms } => ms,
            Latency::Uniform { min_ms, max_ms } => {
                min_ms + (rng.next_f64() * (max_ms - min_ms + 1) as f64) as u64
            }
            Latency::Normal { mean_ms, stddev_ms } => {
                let z: f64 = (0..12).map(|_| rng.next_f64()).sum::<f64>() - 6.0;
                (mean_ms + z * stddev_ms).max(0.0).round() as u64
            }
        }
    }
}

/// Where to run.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct TargetSpec {
    /// `embedded` (default) or `url`.
    pub kind: TargetKind,
    /// The Compute API (`url`).
    pub compute_url: Option<String>,
    /// Identity (`url`).
    pub identity_url: Option<String>,
    /// Placement (`url`; default from the catalog).
    pub placement_url: Option<String>,
    /// User (`url`; default `OS_USERNAME`).
    pub username: Option<String>,
    /// Name of the environment variable holding the password (default
    /// `OS_PASSWORD`); passwords are not written in scenario files.
    pub password_env: Option<String>,
    /// Project (`url`; default `OS_PROJECT_NAME`).
    pub project: Option<String>,
    /// The user's domain, by name (`url`; default `OS_USER_DOMAIN_NAME`,
    /// else `Default`).
    pub user_domain_name: Option<String>,
    /// The project's domain, by name (`url`; default
    /// `OS_PROJECT_DOMAIN_NAME`, else `Default`).
    pub project_domain_name: Option<String>,
    /// The Compute API microversion every request asks for (default
    /// [`crate::api::COMPUTE_MICROVERSION`]; at least 2.37, which the
    /// creates' `"networks": "none"` needs).
    pub compute_microversion: Option<String>,
    /// A PEM bundle of CA certificates trusted besides the system's roots
    /// for the https endpoints (`url`; default `OS_CACERT`; relative to
    /// the scenario file).
    pub ca_file: Option<PathBuf>,
    /// Skip certificate verification of the https endpoints (`url`; like
    /// the openstack CLI's `--insecure`).
    pub insecure: bool,
    /// Every tenant imports a key pair ([`crate::api::LOADTEST_KEY_PAIR`])
    /// before the phases and names it in each create, as most servers of a
    /// real cloud have one.
    pub key_pairs: bool,
    /// Image name or id (default: the region's CirrOS-like image).
    pub image: Option<String>,
    /// The embedded region's data directory (default: a fresh temporary
    /// one, removed at the end).
    pub data_dir: Option<PathBuf>,
    /// Milliseconds between polls of the BUILD list.
    pub poll_interval_ms: Option<u64>,
    /// The embedded region's log filter (default `error`: a scenario with
    /// failing hosts would otherwise log every failed spawn).
    pub log_filter: Option<String>,
}

/// The kind of target.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, Default, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum TargetKind {
    /// An in-process region.
    #[default]
    Embedded,
    /// A running compute endpoint.
    Url,
}

/// What a phase does.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum PhaseKind {
    /// Boot `servers`, then delete them all.
    BootAndDelete,
    /// Boot `servers`, time `list_runs` lists, delete.
    BootAndList,
    /// Boot `servers` as fast as they go (`concurrency` in flight).
    Burst,
    /// Send `rate` creates per second for `duration_secs`.
    Steady,
    /// Hold `population` servers for `duration_secs`, replacing `rate`
    /// per second (delete the oldest, boot a new one).
    Churn,
    /// Boot `servers` spread over `tenants` projects (each with its own
    /// user), check that each project sees only its own, delete.
    ManyTenants,
}

/// One phase.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    /// What it does.
    pub kind: PhaseKind,
    /// Name in the report (default: the kind and its index).
    #[serde(default)]
    pub name: Option<String>,
    /// Servers to boot (boot-and-*, burst, many-tenants).
    #[serde(default)]
    pub servers: Option<usize>,
    /// Requests in flight.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// Requests per second (steady, churn).
    #[serde(default)]
    pub rate: Option<f64>,
    /// Seconds (steady, churn).
    #[serde(default)]
    pub duration_secs: Option<f64>,
    /// Servers held (churn).
    #[serde(default)]
    pub population: Option<usize>,
    /// Timed lists (boot-and-list; default 10).
    #[serde(default)]
    pub list_runs: Option<usize>,
    /// Projects to spread the servers over (default 1: the run's own
    /// project; embedded target only above 1).
    #[serde(default = "one")]
    pub tenants: usize,
    /// Flavor name → weight (default `m1.tiny`).
    #[serde(default)]
    pub flavors: BTreeMap<String, u32>,
    /// Availability zone → weight of the creates' requested zone (default:
    /// none requested). On the embedded target the zones must be the
    /// fleet's (`az1` … `azN`) or the default zone `nova`.
    #[serde(default)]
    pub availability_zones: BTreeMap<String, u32>,
    /// The share of the creates (0 to 1; boot-and-* and burst phases) that
    /// name a compute host of the fleet, drawn at random, with 2.74's
    /// `host`, sent by the region's administrator (embedded target): the
    /// scheduler asks placement for that host's tree only and still runs
    /// the filters. The report counts those that landed elsewhere.
    #[serde(default)]
    pub requested_hosts: f64,
    /// Delete this phase's servers at its end (default true).
    #[serde(default = "yes")]
    pub delete: bool,
    /// Give up waiting for ACTIVE / for the deletes after this long.
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
    /// Seconds to wait before the phase starts (e.g. for the hosts of a
    /// cell whose broker was away to report again; default none).
    #[serde(default)]
    pub wait_secs: f64,
}

fn default_concurrency() -> usize {
    16
}
fn one() -> usize {
    1
}
fn yes() -> bool {
    true
}
fn default_timeout() -> u64 {
    600
}

impl Phase {
    /// The name in the report.
    pub fn label(&self, index: usize) -> String {
        self.name.clone().unwrap_or_else(|| {
            let k = serde_json::to_value(self.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            format!("{}-{k}", index + 1)
        })
    }
}

/// A fault to inject.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// What to stop.
    pub kind: FaultKind,
    /// The cell (`cell1`, …).
    pub cell: String,
    /// The host (stop-host: default the cell's first running host;
    /// kill-host: required).
    #[serde(default)]
    pub host: Option<String>,
    /// kill-host: the command that kills the host's compute process
    /// (program and arguments, run without a shell).
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Seconds after the first phase starts.
    #[serde(default)]
    pub at_secs: Option<f64>,
    /// After this many servers reached ACTIVE (whole run).
    #[serde(default)]
    pub after_boots: Option<u64>,
    /// How long the outage lasts before it is restored (stop-broker and
    /// stop-database: required; stop-conductor: optional, the conductor is
    /// started again after it; restored at the end of the run at the
    /// latest).
    #[serde(default)]
    pub duration_secs: Option<f64>,
}

/// What a fault stops.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// A compute agent.
    StopHost,
    /// A compute process, killed by the fault's command (a hook).
    KillHost,
    /// A cell's conductor.
    StopConductor,
    /// A cell's RabbitMQ vhost (cells on RabbitMQ only).
    StopBroker,
    /// A cell's PostgreSQL database (cells on PostgreSQL only).
    StopDatabase,
}

impl FaultKind {
    /// Whether it takes one host away (its servers only are the fault's).
    pub fn is_host(self) -> bool {
        matches!(self, Self::StopHost | Self::KillHost)
    }
}

impl Scenario {
    /// Reads and checks a scenario file.
    pub fn load(path: &Path) -> Result<Scenario> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("read scenario {}", path.display()))?;
        let mut s = Self::parse(&text).with_context(|| format!("scenario {}", path.display()))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        for f in [&mut s.region_file, &mut s.target.ca_file]
            .into_iter()
            .flatten()
        {
            if f.is_relative() {
                *f = dir.join(&*f);
            }
        }
        Ok(s)
    }

    /// Parses and checks scenario text.
    pub fn parse(text: &str) -> Result<Scenario> {
        let s: Scenario = toml::from_str(text).map_err(|e| anyhow::anyhow!("{e}"))?;
        s.validate()?;
        Ok(s)
    }

    /// Checks what serde cannot: ranges, and the knobs each phase needs.
    pub fn validate(&self) -> Result<()> {
        let f = &self.fleet;
        if self.target.kind == TargetKind::Embedded {
            if f.cells == 0 || f.hosts_per_cell == 0 {
                bail!("fleet.cells and fleet.hosts_per_cell must be at least 1");
            }
            for (k, v) in f.host_resources() {
                if v == 0 {
                    bail!("fleet.{k} must be at least 1");
                }
            }
        }
        if let Some(n) = f.availability_zones {
            if self.target.kind == TargetKind::Url {
                bail!(
                    "fleet.availability_zones needs target.kind = \"embedded\" (a deployment \
                     by URL has its own zones: request them with a phase's availability_zones)"
                );
            }
            if n == 0 || n > f.hosts_per_cell {
                bail!(
                    "fleet.availability_zones must be between 1 and fleet.hosts_per_cell ({}), \
                     so that every cell has hosts in every zone",
                    f.hosts_per_cell
                );
            }
        }
        if let Some(n) = f.aggregates {
            if self.target.kind == TargetKind::Url {
                bail!("fleet.aggregates needs target.kind = \"embedded\"");
            }
            if n == 0 || n as u64 > f.cells as u64 * f.hosts_per_cell as u64 {
                bail!("fleet.aggregates must be between 1 and the fleet's number of hosts");
            }
        }
        if !(0.0..=1.0).contains(&f.failing_hosts) {
            bail!("fleet.failing_hosts must be between 0 and 1");
        }
        if !(0.0..=1.0).contains(&f.spawn_failure_rate) {
            bail!("fleet.spawn_failure_rate must be between 0 and 1");
        }
        match f.spawn_latency {
            Latency::Uniform { min_ms, max_ms } if min_ms > max_ms => {
                bail!("fleet.spawn_latency: min_ms is above max_ms")
            }
            Latency::Normal { mean_ms, stddev_ms } if mean_ms < 0.0 || stddev_ms < 0.0 => {
                bail!("fleet.spawn_latency: mean_ms and stddev_ms must not be negative")
            }
            _ => {}
        }
        if let Some(v) = &self.target.compute_microversion {
            check_compute_microversion("target.compute_microversion", v)?;
        }
        for (k, url) in [
            ("compute_url", &self.target.compute_url),
            ("identity_url", &self.target.identity_url),
            ("placement_url", &self.target.placement_url),
        ] {
            if let Some(u) = url {
                check_endpoint_url(&format!("target.{k}"), u)?;
            }
        }
        if self.target.kind == TargetKind::Embedded {
            for (k, v) in [
                ("user_domain_name", &self.target.user_domain_name),
                ("project_domain_name", &self.target.project_domain_name),
            ] {
                if v.is_some() {
                    bail!("target.{k} needs target.kind = \"url\" (the embedded region's users are in Default)");
                }
            }
            if self.target.ca_file.is_some() || self.target.insecure {
                bail!(
                    "target.ca_file / target.insecure need target.kind = \"url\" \
                     (the embedded region speaks plain http)"
                );
            }
        }
        if self.target.kind == TargetKind::Url {
            if self.target.compute_url.is_none() {
                bail!("target.compute_url is required when target.kind = \"url\"");
            }
            if self.target.identity_url.is_none() {
                bail!("target.identity_url is required when target.kind = \"url\"");
            }
            if let Some((k, _)) = f.host_resources().first() {
                bail!("fleet.{k} needs target.kind = \"embedded\"");
            }
            if f.failing_hosts > 0.0
                || f.spawn_failure_rate > 0.0
                || f.spawn_latency != (Latency::Fixed { ms: 0 })
            {
                bail!(
                    "fleet.failing_hosts / fleet.spawn_failure_rate / fleet.spawn_latency \
                     need target.kind = \"embedded\""
                );
            }
            if let Some(i) = self
                .faults
                .iter()
                .position(|f| f.kind != FaultKind::KillHost)
            {
                bail!(
                    "fault[{i}]: only kill-host faults apply to target.kind = \"url\" \
                     (the others reach into the embedded region)"
                );
            }
            if !self.region.is_empty() || self.region_file.is_some() {
                bail!("region / region_file need target.kind = \"embedded\"");
            }
        }
        if self.phases.is_empty() {
            bail!("phase: a scenario needs at least one [[phase]]");
        }
        for (i, p) in self.phases.iter().enumerate() {
            let at = format!("phase[{i}] ({})", p.label(i));
            if p.concurrency == 0 {
                bail!("{at}.concurrency must be at least 1");
            }
            if p.tenants == 0 {
                bail!("{at}.tenants must be at least 1");
            }
            if p.tenants > 1 && self.target.kind == TargetKind::Url {
                bail!("{at}.tenants above 1 needs target.kind = \"embedded\" (it creates projects as the region's admin)");
            }
            if p.flavors.values().any(|w| *w == 0) {
                bail!("{at}.flavors: weights must be at least 1");
            }
            if p.availability_zones.values().any(|w| *w == 0) {
                bail!("{at}.availability_zones: weights must be at least 1");
            }
            if !(0.0..=1.0).contains(&p.requested_hosts) {
                bail!("{at}.requested_hosts must be between 0 and 1");
            }
            if p.requested_hosts > 0.0 {
                if self.target.kind != TargetKind::Embedded {
                    bail!("{at}.requested_hosts needs target.kind = \"embedded\" (the creates are the region's admin's)");
                }
                let minor = self
                    .target
                    .compute_microversion
                    .as_deref()
                    .and_then(|v| v.strip_prefix("2."))
                    .and_then(|m| m.parse::<u32>().ok());
                if minor.is_some_and(|m| m < 74) {
                    bail!("{at}.requested_hosts needs target.compute_microversion 2.74 or later (2.74's `host`)");
                }
            }
            if self.target.kind == TargetKind::Embedded {
                let zones = f.availability_zones.unwrap_or(0);
                let default = crate::fleet::default_zone();
                if let Some(z) = p.availability_zones.keys().find(|z| {
                    **z != default && !(1..=zones).any(|k| crate::fleet::zone_name(k) == **z)
                }) {
                    bail!(
                        "{at}.availability_zones: {z:?} is not a zone of the fleet ({})",
                        std::iter::once(default.clone())
                            .chain((1..=zones).map(crate::fleet::zone_name))
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                }
            }
            let need = |v: bool, field: &str| -> Result<()> {
                if !v {
                    bail!("{at}.{field} is required for this kind of phase");
                }
                Ok(())
            };
            match p.kind {
                PhaseKind::BootAndDelete
                | PhaseKind::BootAndList
                | PhaseKind::Burst
                | PhaseKind::ManyTenants => {
                    need(p.servers.is_some_and(|n| n > 0), "servers")?;
                }
                PhaseKind::Steady => {
                    need(p.rate.is_some_and(|r| r > 0.0), "rate")?;
                    need(p.duration_secs.is_some_and(|d| d > 0.0), "duration_secs")?;
                }
                PhaseKind::Churn => {
                    need(p.rate.is_some_and(|r| r > 0.0), "rate")?;
                    need(p.duration_secs.is_some_and(|d| d > 0.0), "duration_secs")?;
                    need(p.population.is_some_and(|n| n > 0), "population")?;
                }
            }
            if p.kind == PhaseKind::ManyTenants && p.tenants < 2 {
                bail!("{at}.tenants must be at least 2 for a many-tenants phase");
            }
        }
        for (i, fault) in self.faults.iter().enumerate() {
            if fault.at_secs.is_none() == fault.after_boots.is_none() {
                bail!("fault[{i}]: give exactly one of at_secs and after_boots");
            }
            if fault.host.is_some() && !fault.kind.is_host() {
                bail!("fault[{i}].host only applies to kind = \"stop-host\" or \"kill-host\"");
            }
            match (&fault.command, fault.kind) {
                (Some(c), FaultKind::KillHost) if c.first().is_some_and(|p| !p.is_empty()) => {}
                (_, FaultKind::KillHost) => {
                    bail!("fault[{i}].command (a non-empty program and its arguments) is required for kill-host");
                }
                (Some(_), _) => bail!("fault[{i}].command only applies to kind = \"kill-host\""),
                (None, _) => {}
            }
            if fault.kind == FaultKind::KillHost && fault.host.is_none() {
                bail!("fault[{i}].host is required for kill-host (the host its command kills)");
            }
            let restorable = matches!(fault.kind, FaultKind::StopBroker | FaultKind::StopDatabase);
            match fault.duration_secs {
                Some(_) if fault.kind.is_host() => {
                    bail!(
                        "fault[{i}].duration_secs does not apply to stop-host or kill-host \
                         (a stopped host stays stopped)"
                    );
                }
                None if restorable => {
                    bail!("fault[{i}].duration_secs is required for this kind of fault");
                }
                Some(d) if d.is_nan() || d <= 0.0 => {
                    bail!("fault[{i}].duration_secs must be above 0");
                }
                _ => {}
            }
            let n: Option<u32> = fault.cell.strip_prefix("cell").and_then(|n| n.parse().ok());
            // A URL target's cells are the deployment's: the name is a label.
            if self.target.kind == TargetKind::Embedded
                && !n.is_some_and(|n| n >= 1 && n <= f.cells)
            {
                bail!(
                    "fault[{i}].cell: {:?} is not a cell of the fleet (cell1 … cell{})",
                    fault.cell,
                    f.cells
                );
            }
        }
        Ok(())
    }
}

/// The lowest compute microversion a scenario may ask for (2.37: a create
/// with `"networks": "none"`).
pub const MIN_COMPUTE_MINOR: u32 = 37;

/// Refuses `v` (named `what` in the error) unless it is a compute
/// microversion `2.N` with N at least [`MIN_COMPUTE_MINOR`].
pub fn check_compute_microversion(what: &str, v: &str) -> Result<()> {
    let minor = v
        .strip_prefix("2.")
        .filter(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|m| m.parse::<u32>().ok());
    if minor.is_none_or(|m| m < MIN_COMPUTE_MINOR) {
        bail!(
            "{what}: {v:?} is not a compute microversion 2.{MIN_COMPUTE_MINOR} \
             or later (2.N; the creates send \"networks\": \"none\", which needs 2.{MIN_COMPUTE_MINOR})"
        );
    }
    Ok(())
}

/// Refuses an endpoint the clients cannot reach: anything but `http://`
/// and `https://` (the scheme in any case).
pub fn check_endpoint_url(what: &str, url: &str) -> Result<()> {
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("http" | "https") => Ok(()),
        _ => bail!("{what}: {url:?} is not an http:// or https:// URL"),
    }
}

/// A small deterministic generator (xorshift64*), enough for flavor mixes
/// and latency draws.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Seeded.
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// Next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// An index picked by weight.
    pub fn weighted(&mut self, weights: &[u32]) -> usize {
        let total: u64 = weights.iter().map(|w| *w as u64).sum();
        if total == 0 {
            return 0;
        }
        let mut x = self.next_u64() % total;
        for (i, w) in weights.iter().enumerate() {
            if x < *w as u64 {
                return i;
            }
            x -= *w as u64;
        }
        weights.len() - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_stay_in_range() {
        let mut r = Rng::new(3);
        for _ in 0..1000 {
            let v = Latency::Uniform {
                min_ms: 5,
                max_ms: 9,
            }
            .draw(&mut r);
            assert!((5..=9).contains(&v));
        }
        let picks: Vec<usize> = (0..1000).map(|_| r.weighted(&[3, 1])).collect();
        let zeros = picks.iter().filter(|p| **p == 0).count();
        assert!((650..850).contains(&zeros), "{zeros}");
    }
}
