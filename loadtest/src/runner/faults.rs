//! Faults of a run: applying and restoring them, and what a report
//! says of them (recovery times, errors by fault).

use super::*;

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
    /// stop-host, kill-host: seconds from the stop until `os-services`
    /// showed the host down (`None`: not within [`DEAD_HOST_WATCH`]).
    pub noticed_after_secs: Option<f64>,
    /// stop-host, kill-host: seconds from the stop until no server was left in BUILD
    /// on the host (re-driven to another host, or in ERROR).
    pub builds_recovered_after_secs: Option<f64>,
}

/// How long a stopped host is watched for its notice and its builds.
pub(super) const DEAD_HOST_WATCH: Duration = Duration::from_secs(120);

/// Watches the host a stop-host fault stopped: until `os-services` shows
/// it down, then until no server is left in BUILD on it; records both
/// times (from `t0`, when the fault fired) in entry `idx` of `log`.
pub(super) async fn watch_dead_host(
    api: Compute,
    host: String,
    t0: Instant,
    log: Arc<Mutex<Vec<FaultRecord>>>,
    idx: usize,
) {
    let mut noticed = None;
    while noticed.is_none() && t0.elapsed() < DEAD_HOST_WATCH {
        if let Ok(states) = api.compute_service_states().await {
            if states.iter().any(|(h, s)| *h == host && s == "down") {
                noticed = Some(t0.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut recovered = None;
    let query = format!("all_tenants=1&host={host}&status=BUILD");
    while noticed.is_some() && recovered.is_none() && t0.elapsed() < DEAD_HOST_WATCH {
        if let Ok(left) = api.list_all(false, &query).await {
            if left.is_empty() {
                recovered = Some(t0.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut log = log.lock().expect("faults");
    log[idx].noticed_after_secs = noticed.map(|d| d.as_secs_f64());
    log[idx].builds_recovered_after_secs = recovered.map(|d| d.as_secs_f64());
}

impl FaultRecord {
    pub(super) fn label(&self) -> String {
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
    pub(super) fn applied(&self) -> bool {
        self.result == "applied"
    }

    /// The seconds a failure is the fault's: from when it fired until it
    /// was restored and the cell recovered (a first server sent after the
    /// restore became ACTIVE); open-ended for faults never restored and
    /// cells not seen to recover.
    pub(super) fn window(&self) -> (f64, f64) {
        let end = match (self.until_secs, self.recovered_after_secs) {
            (Some(u), Some(r)) => u + r,
            _ => f64::INFINITY,
        };
        (self.at_secs, end)
    }
}

pub(super) async fn apply_fault(
    cells: &tokio::sync::Mutex<Vec<CellParts>>,
    admin_db: &str,
    f: &Fault,
) -> (String, String) {
    if f.kind == FaultKind::KillHost {
        let host = f.host.clone().unwrap_or_default();
        return (
            host,
            run_hook(f.command.as_deref().unwrap_or_default()).await,
        );
    }
    let mut cells = cells.lock().await;
    let Some(cell) = cells.iter_mut().find(|c| c.name == f.cell) else {
        return (f.cell.clone(), format!("no cell {}", f.cell));
    };
    match f.kind {
        // Above: it needs no cell of an embedded region.
        FaultKind::KillHost => unreachable!("kill-host is applied by its command"),
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

/// How long a kill-host fault's command may run.
pub(super) const HOOK_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs a fault's command (no shell, no input, killed after
/// [`HOOK_TIMEOUT`]): `applied` when it exits 0, else why not (its last
/// line of stderr).
pub(super) async fn run_hook(argv: &[String]) -> String {
    let Some((program, args)) = argv.split_first() else {
        return "failed: no command".to_owned();
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    match tokio::time::timeout(HOOK_TIMEOUT, cmd.output()).await {
        Err(_) => format!(
            "failed: {program} did not finish within {} s",
            HOOK_TIMEOUT.as_secs()
        ),
        Ok(Err(e)) => format!("failed: cannot run {program}: {e}"),
        Ok(Ok(o)) if o.status.success() => "applied".to_owned(),
        Ok(Ok(o)) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let last = err
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            format!("failed: {program} exited with {}: {last}", o.status)
        }
    }
}

/// Ends an outage (a stopped broker or database, a stopped conductor
/// started again): `restored` or why not.
pub(super) async fn restore_fault(
    cells: &tokio::sync::Mutex<Vec<CellParts>>,
    admin_db: &str,
    f: &Fault,
) -> String {
    if f.kind == FaultKind::StopConductor {
        let mut cells = cells.lock().await;
        let Some(cell) = cells.iter_mut().find(|c| c.name == f.cell) else {
            return format!("no cell {}", f.cell);
        };
        if cell.conductor.is_some() {
            return "restored (it was running)".to_owned();
        }
        let Some(opts) = cell.conductor_options.clone() else {
            return "failed: this target cannot start the conductor again".to_owned();
        };
        return match cell_conductor::run_with(opts).await {
            Ok(h) => {
                cell.conductor = Some(h);
                "restored".to_owned()
            }
            Err(e) => format!("failed: {e:#}"),
        };
    }
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

/// What a spawn failed by `fleet.spawn_failure_rate` says.
pub(super) const SPAWN_FAILURE_RATE_MESSAGE: &str =
    "injected spawn failure (scenario fleet.spawn_failure_rate)";

/// Seconds from the restore of outage `f` until the first server of its
/// cell sent after the restore was seen ACTIVE.
pub(super) fn recovered_after(f: &FaultRecord, recs: &[ServerRec]) -> Option<f64> {
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
pub(super) fn could_touch(f: &FaultRecord, r: &ServerRec) -> bool {
    let other_cell = r
        .cell
        .as_deref()
        .is_some_and(|c| c != "cell0" && c != f.cell);
    let other_host = f.kind.is_host() && r.node.as_deref().is_some_and(|n| n != f.target);
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
pub(super) fn errors_by_fault(
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

/// Samples `os-services` once a second until `done`: counts the live hosts
/// it shows down. Excused: a host a stop-host or kill-host fault stopped, and every
/// host of a cell whose conductor, broker or database a fault stopped
/// (their heartbeats cannot be written then). Host names start with their
/// cell's (`cell1-host01`). Hosts down in the first sample, taken before
/// any fault fired, were dead before the run and are not live hosts.
pub(super) async fn watch_liveness(
    api: Compute,
    log: Arc<Mutex<Vec<FaultRecord>>>,
    done: Arc<AtomicBool>,
) -> LivenessSamples {
    let mut out = LivenessSamples::default();
    let mut hosts = std::collections::BTreeSet::new();
    while !done.load(Ordering::Acquire) {
        if let Ok(states) = api.compute_service_states().await {
            let (stopped, cells): (Vec<String>, Vec<String>) = {
                let log = log.lock().expect("faults");
                if out.samples == 0 && log.is_empty() {
                    out.down_at_start = states
                        .iter()
                        .filter(|(_, s)| s == "down")
                        .map(|(h, _)| h.clone())
                        .collect();
                }
                let applied = log.iter().filter(|f| f.applied());
                let stopped = applied
                    .clone()
                    .filter(|f| f.kind.is_host())
                    .map(|f| f.target.clone())
                    .collect();
                let cells = applied
                    .filter(|f| !f.kind.is_host())
                    .map(|f| format!("{}-", f.cell))
                    .collect();
                (stopped, cells)
            };
            out.samples += 1;
            for (host, state) in states {
                let excused = stopped.contains(&host)
                    || out.down_at_start.contains(&host)
                    || cells.iter().any(|c| host.starts_with(c.as_str()));
                if state == "down" && !excused {
                    out.false_down += 1;
                    hosts.insert(host);
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    out.false_down_hosts = hosts.into_iter().collect();
    out
}

/// Applies the scenario's faults when due (by time or by boots), restores
/// the outages when their time is up (at the latest once `done`), and
/// watches every stopped host until it shows down and holds no build.
pub(super) async fn drive_faults(
    cells: Arc<tokio::sync::Mutex<Vec<CellParts>>>,
    log: Arc<Mutex<Vec<FaultRecord>>>,
    ctx: Arc<Ctx>,
    done: Arc<AtomicBool>,
    admin_db: String,
    admin_api: Option<Compute>,
    mut pending: Vec<Fault>,
) {
    let mut watchers = Vec::new();
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
            f.at_secs.is_some_and(|t| t <= now) || f.after_boots.is_some_and(|n| n <= active)
        });
        pending = rest;
        for f in due {
            let at = ctx.now();
            let fired = Instant::now();
            let (target, result) = apply_fault(&cells, &admin_db, &f).await;
            if let (true, "applied", Some(api)) = (f.kind.is_host(), result.as_str(), &admin_api) {
                let idx = log.lock().expect("faults").len();
                watchers.push(tokio::spawn(watch_dead_host(
                    api.clone(),
                    target.clone(),
                    fired,
                    log.clone(),
                    idx,
                )));
            }
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
                noticed_after_secs: None,
                builds_recovered_after_secs: None,
            });
        }
        let now = ctx.now();
        let (due, rest): (Vec<_>, Vec<_>) = restores.into_iter().partition(|(t, _, _)| *t <= now);
        restores = rest;
        for (_, idx, f) in due {
            restore(idx, f).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for (_, idx, f) in restores {
        restore(idx, f).await;
    }
    for w in watchers {
        let _ = w.await;
    }
}
