//! One phase of a run: its boots, lists and deletes against the target.

use super::*;

pub(super) async fn run_phase(
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
