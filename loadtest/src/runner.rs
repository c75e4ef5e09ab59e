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
    /// How to start the conductor again (a restored stop-conductor).
    conductor_options: Option<cell_conductor::ConductorOptions>,
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

mod embedded;
mod faults;
mod phase;
mod reports;
pub use embedded::*;
pub use faults::*;
use phase::*;
pub use reports::*;

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

    // The administrator's client of an embedded region, or a URL target's
    // client when it has faults (the faults' watchers read os-services
    // and every tenant's servers with it).
    let mut admin_api: Option<Compute> = None;
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
            admin_api = Some(admin_compute.clone());
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
                        password_file: None,
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
            let identity_url = api::identity_base(t.identity_url.as_deref().unwrap_or_default());
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
                password_file: None,
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
            // A kill-host fault's watcher reads os-services and every
            // project's servers: with these credentials (an
            // administrator's, or its times stay unknown).
            if !s.faults.is_empty() {
                admin_api = Some(compute.clone());
            }
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
    // Liveness under the load: what os-services shows, once a second.
    let liveness_task = admin_api
        .clone()
        .map(|api| tokio::spawn(watch_liveness(api, fault_log.clone(), faults_done.clone())));
    // A URL target takes kill-host faults only (their commands act on
    // the deployment): no cell of it is in this process.
    let fault_task = (embedded.is_some() || !s.faults.is_empty()).then(|| {
        let (cells, admin_db) = match embedded.as_ref() {
            Some(e) => (e.cells.clone(), e.region.api_db_url.clone()),
            None => (Arc::default(), String::new()),
        };
        let (log, ctx, done) = (fault_log.clone(), ctx.clone(), faults_done.clone());
        let admin_api = admin_api.clone();
        let pending: Vec<Fault> = s.faults.clone();
        tokio::spawn(drive_faults(
            cells, log, ctx, done, admin_db, admin_api, pending,
        ))
    });

    let mut phases = Vec::new();
    let mut failed = None;
    for (i, p) in s.phases.iter().enumerate() {
        let label = p.label(i);
        if p.wait_secs > 0.0 {
            tokio::time::sleep(Duration::from_secs_f64(p.wait_secs)).await;
        }
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
    let liveness = match liveness_task {
        Some(t) => t.await.ok(),
        None => None,
    };
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
        liveness,
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

#[cfg(test)]
mod tests;
