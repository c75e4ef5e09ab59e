//! The embedded target: a whole region in this process, its
//! configuration from the scenario, and its start.

use super::*;

/// The embedded target's handles.
pub(super) struct Embedded {
    pub(super) region: region::Region,
    pub(super) cells: Arc<tokio::sync::Mutex<Vec<CellParts>>>,
    pub(super) dbs: Databases,
    pub(super) placement: Placement,
    /// The fleet's zones and aggregates as the Compute API shows them.
    pub(super) layout: crate::fleet::Layout,
    /// The fake hosts' knobs (one for every cell).
    pub(super) hypervisor: Option<compute::driver::fake::FakeHypervisor>,
    pub(super) data_dir: PathBuf,
    pub(super) remove_data: bool,
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
    cfg.region.listen_on_free_ports();
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

pub(super) async fn start_embedded(
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
            conductor_options: Some(c.conductor_options),
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
pub(super) fn compute_client(s: &Scenario, url: &str, token: &str, tls: &Tls) -> Result<Compute> {
    let c = Compute::new(url, token, tls)?;
    Ok(match &s.target.compute_microversion {
        Some(v) => c.with_microversion(v),
        None => c,
    })
}

pub(super) fn new_tenant(name: &str, compute: Compute, poll: Duration) -> Tenant {
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

impl Embedded {
    pub(super) async fn region_hosts(&self) -> Vec<String> {
        self.cells
            .lock()
            .await
            .iter()
            .flat_map(|c| c.hosts.iter().map(|(n, _)| n.clone()))
            .collect()
    }
}
