//! The boot scenario: boot N servers through the Compute API with C in
//! flight, watch them reach ACTIVE by polling the BUILD list (a few list
//! pages per tick, never one GET per server), time the server list, delete
//! everything and check that nothing leaked (no server left, placement
//! usage back to where it was).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use futures_util::stream::{self, StreamExt};
use serde::Serialize;

use crate::api::{Compute, Created, Placement};
use crate::stats::{summarize, Summary};

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct BootSpec {
    /// Servers to boot.
    pub servers: usize,
    /// Creates in flight.
    pub concurrency: usize,
    /// Flavor id.
    pub flavor: String,
    /// Image id (or name: the Compute API resolves it).
    pub image: String,
    /// Prefix of the servers' names.
    pub name_prefix: String,
    /// Pause between two polls of the BUILD list.
    #[serde(serialize_with = "ser_ms")]
    pub poll_interval: Duration,
    /// Give up waiting for ACTIVE after this long.
    #[serde(serialize_with = "ser_ms")]
    pub active_timeout: Duration,
    /// Runs of `GET /servers/detail?limit=1000` to time (0: skip).
    pub list_runs: usize,
    /// Delete everything and check the invariants.
    pub delete: bool,
    /// Progress on stderr.
    pub progress: bool,
}

fn ser_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_millis() as u64)
}

/// Servers that ended in ERROR with one fault message.
#[derive(Debug, Clone, Serialize)]
pub struct FaultCount {
    /// The fault message.
    pub message: String,
    /// How many servers have it.
    pub count: usize,
}

/// The boot phase.
#[derive(Debug, Clone, Serialize)]
pub struct BootPhase {
    /// `POST /servers` sent.
    pub requested: usize,
    /// Answered 202.
    pub accepted: usize,
    /// Answered anything else (status → count).
    pub refused: BTreeMap<u16, usize>,
    /// A few refusal bodies.
    pub refusal_samples: Vec<String>,
    /// Reached ACTIVE.
    pub active: usize,
    /// Reached ERROR.
    pub error: usize,
    /// ERROR fault messages with their counts.
    pub faults: Vec<FaultCount>,
    /// Still BUILD when the wait gave up.
    pub stuck_in_build: usize,
    /// Left BUILD for neither ACTIVE nor ERROR.
    pub other: usize,
    /// `POST` → 202.
    pub accept_latency: Summary,
    /// `POST` sent → seen ACTIVE (an upper bound: the poll that first sees
    /// it gone from BUILD; resolution is the poll interval plus a poll).
    pub time_to_active: Summary,
    /// First `POST` sent → last 202.
    pub submit_seconds: f64,
    /// Accepted per second over `submit_seconds`.
    pub accepts_per_second: f64,
    /// First `POST` sent → last server seen ACTIVE.
    pub seconds: f64,
    /// ACTIVE servers per second over `seconds`: the end-to-end figure.
    pub boots_per_second: f64,
    /// Polls of the BUILD list, and how long one took.
    pub polls: Summary,
    /// Polls that failed.
    pub poll_errors: usize,
}

/// `GET /servers/detail?limit=1000` timings.
#[derive(Debug, Clone, Serialize)]
pub struct ListPhase {
    /// Servers the caller's project holds (all pages).
    pub servers_total: usize,
    /// Servers one page returned.
    pub page_size: usize,
    /// Latency of one page.
    pub latency: Summary,
}

/// The delete phase and the invariants after it.
#[derive(Debug, Clone, Serialize)]
pub struct DeletePhase {
    /// `DELETE` answers (status → count).
    pub statuses: BTreeMap<u16, usize>,
    /// `DELETE` → answer.
    pub latency: Summary,
    /// Seconds from the first `DELETE` until the list shows none of ours.
    pub seconds_until_gone: f64,
    /// Deleted per second over `seconds_until_gone`.
    pub deletes_per_second: f64,
    /// Our servers the list still shows at the end.
    pub servers_left: usize,
    /// Invariant check of placement.
    pub placement: Option<PlacementCheck>,
}

/// Placement before and after.
#[derive(Debug, Clone, Serialize)]
pub struct PlacementCheck {
    /// Resource providers.
    pub providers: usize,
    /// Sum of usages over all providers before the boots.
    pub usage_before: BTreeMap<String, u64>,
    /// Sum of usages at the peak (all booted).
    pub usage_peak: BTreeMap<String, u64>,
    /// … and after the deletes.
    pub usage_after: BTreeMap<String, u64>,
    /// `usage_after == usage_before`.
    pub released: bool,
    /// Milliseconds after the list showed none until usage was back.
    pub settle_ms: u64,
    /// How many of our servers still hold an allocation (checked only
    /// when not released).
    pub leaked: usize,
    /// The first few of them.
    pub leaked_consumers: Vec<String>,
}

/// Everything the scenario measured.
#[derive(Debug, Clone, Serialize)]
pub struct BootReport {
    /// The spec.
    pub spec: BootSpec,
    /// Boots.
    pub boot: BootPhase,
    /// List timings.
    pub list: Option<ListPhase>,
    /// Deletes and invariants.
    pub delete: Option<DeletePhase>,
    /// CPU seconds this process used during the boot phase (user + system,
    /// all threads: the whole region when it is embedded).
    pub boot_cpu_seconds: Option<f64>,
}

impl BootReport {
    /// Whether every invariant held: all requested servers ACTIVE, and
    /// (after delete) no server left and placement usage back.
    pub fn invariants_hold(&self) -> bool {
        let booted = self.boot.active == self.spec.servers;
        let deleted = self
            .delete
            .as_ref()
            .is_none_or(|d| d.servers_left == 0 && d.placement.as_ref().is_none_or(|p| p.released));
        booted && deleted
    }
}

/// Where to run it.
pub struct Target {
    /// The Compute API, logged in.
    pub compute: Compute,
    /// Placement with an administrator's token (for the invariants).
    pub placement: Option<Placement>,
}

#[derive(Default)]
struct Counters {
    accepted: AtomicU64,
    refused: AtomicU64,
    finished: AtomicU64,
    deleted: AtomicU64,
    done: AtomicBool,
}

/// User + system CPU seconds of this process (Linux; `None` elsewhere).
pub fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 (1-based) of the whole line.
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

fn spawn_progress(
    label: &'static str,
    total: usize,
    counters: Arc<Counters>,
    value: fn(&Counters) -> (u64, String),
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let tty = std::io::stderr().is_terminal();
        let started = Instant::now();
        let mut last = (0u64, Instant::now());
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.tick().await;
        loop {
            tick.tick().await;
            let stop = counters.done.load(Ordering::Relaxed);
            let (n, extra) = value(&counters);
            let now = Instant::now();
            let recent = (n - last.0) as f64 / (now - last.1).as_secs_f64().max(1e-3);
            let overall = n as f64 / started.elapsed().as_secs_f64().max(1e-3);
            last = (n, now);
            let left = (total as u64).saturating_sub(n) as f64;
            let eta = if recent > 0.0 {
                format!("{:.0}s", left / recent)
            } else {
                "?".to_owned()
            };
            let width = 30usize;
            let filled = ((n as f64 / total.max(1) as f64) * width as f64) as usize;
            let bar = format!(
                "[{}{}]",
                "#".repeat(filled.min(width)),
                "-".repeat(width - filled.min(width))
            );
            let line = format!(
                "{label} {bar} {n}/{total} {extra} | {recent:.0}/s now, {overall:.0}/s overall | {:.0}s elapsed, ETA {eta}",
                started.elapsed().as_secs_f64()
            );
            let mut err = std::io::stderr().lock();
            if tty {
                let _ = write!(err, "\r\x1b[2K{line}");
                if stop {
                    let _ = writeln!(err);
                }
            } else {
                let _ = writeln!(err, "{line}");
            }
            let _ = err.flush();
            if stop {
                return;
            }
        }
    })
}

#[derive(Default)]
struct Pending {
    /// id → (POST sent, 202 received).
    waiting: HashMap<String, (Instant, Instant)>,
    /// id → time from POST sent to first seen out of BUILD.
    finished: HashMap<String, Duration>,
    /// When the last server was seen out of BUILD.
    last_finish: Option<Instant>,
}

/// Runs the scenario.
pub async fn run(t: &Target, spec: &BootSpec) -> Result<BootReport> {
    let usage_before = match &t.placement {
        Some(p) => Some(p.total_usage().await?),
        None => None,
    };
    let cpu0 = process_cpu_seconds();
    let counters = Arc::new(Counters::default());
    let pending = Arc::new(Mutex::new(Pending::default()));
    let progress = spec.progress.then(|| {
        spawn_progress("boot", spec.servers, counters.clone(), |c| {
            let acc = c.accepted.load(Ordering::Relaxed);
            let fin = c.finished.load(Ordering::Relaxed);
            let refused = c.refused.load(Ordering::Relaxed);
            (
                fin,
                format!(
                    "out of BUILD ({acc} accepted, {} building, {refused} refused)",
                    acc - fin.min(acc)
                ),
            )
        })
    });
    let submit_done = Arc::new(AtomicBool::new(false));

    // The poller: one walk of the BUILD list per tick.
    let poller = {
        let (compute, pending, counters, submit_done) = (
            t.compute.clone(),
            pending.clone(),
            counters.clone(),
            submit_done.clone(),
        );
        let (interval, timeout) = (spec.poll_interval, spec.active_timeout);
        tokio::spawn(async move {
            let mut polls = Vec::new();
            let mut errors = 0usize;
            let started = Instant::now();
            loop {
                let all_in = submit_done.load(Ordering::Acquire);
                if all_in && pending.lock().expect("pending").waiting.is_empty() {
                    break;
                }
                if started.elapsed() > timeout {
                    break;
                }
                let sent = Instant::now();
                match compute.list_all(false, "status=BUILD").await {
                    Ok(build) => {
                        let got = Instant::now();
                        polls.push(got - sent);
                        let building: HashSet<&str> = build.iter().map(|s| s.id.as_str()).collect();
                        let mut p = pending.lock().expect("pending");
                        let out: Vec<(String, Instant)> = p
                            .waiting
                            .iter()
                            .filter(|(id, (_, accepted))| {
                                *accepted < sent && !building.contains(id.as_str())
                            })
                            .map(|(id, (posted, _))| (id.clone(), *posted))
                            .collect();
                        if !out.is_empty() {
                            p.last_finish = Some(got);
                        }
                        for (id, posted) in out {
                            p.waiting.remove(&id);
                            p.finished.insert(id, got - posted);
                            counters.finished.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(e) => {
                        errors += 1;
                        tracing::warn!(error = %e, "poll of the BUILD list failed");
                    }
                }
                let spent = sent.elapsed();
                if spent < interval {
                    tokio::time::sleep(interval - spent).await;
                }
            }
            (polls, errors)
        })
    };

    // The submitters.
    let first_post = Instant::now();
    let results: Vec<Result<(Duration, Created)>> = stream::iter(0..spec.servers)
        .map(|i| {
            let (compute, pending, counters) = (&t.compute, &pending, &counters);
            let name = format!("{}-{i:06}", spec.name_prefix);
            async move {
                let posted = Instant::now();
                let created = compute
                    .create(&name, &spec.flavor, &spec.image, (None, None, None))
                    .await?;
                let accepted = Instant::now();
                match &created {
                    Created::Accepted(id) => {
                        pending
                            .lock()
                            .expect("pending")
                            .waiting
                            .insert(id.clone(), (posted, accepted));
                        counters.accepted.fetch_add(1, Ordering::Relaxed);
                    }
                    Created::Refused(..) => {
                        counters.refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok((accepted - posted, created))
            }
        })
        .buffer_unordered(spec.concurrency.max(1))
        .collect()
        .await;
    let submit_seconds = first_post.elapsed().as_secs_f64();
    submit_done.store(true, Ordering::Release);
    let mut accept_lat = Vec::new();
    let mut refused: BTreeMap<u16, usize> = BTreeMap::new();
    let mut refusal_samples = Vec::new();
    let mut accepted_ids = Vec::new();
    for r in results {
        match r {
            Ok((lat, Created::Accepted(id))) => {
                accept_lat.push(lat);
                accepted_ids.push(id);
            }
            Ok((_, Created::Refused(status, body))) => {
                *refused.entry(status).or_default() += 1;
                if refusal_samples.len() < 5 {
                    refusal_samples.push(format!("HTTP {status}: {body}"));
                }
            }
            Err(e) => {
                *refused.entry(0).or_default() += 1;
                if refusal_samples.len() < 5 {
                    refusal_samples.push(format!("{e:#}"));
                }
            }
        }
    }
    let (mut polls, poll_errors) = poller.await?;
    let cpu1 = process_cpu_seconds();
    counters.done.store(true, Ordering::Relaxed);
    if let Some(p) = progress {
        let _ = p.await;
    }

    // Who is ACTIVE, who is ERROR (with the fault).
    let active: HashSet<String> = t
        .compute
        .list_all(false, "status=ACTIVE")
        .await?
        .into_iter()
        .map(|s| s.id)
        .collect();
    let errors = t.compute.list_all(true, "status=ERROR").await?;
    let p = std::mem::take(&mut *pending.lock().expect("pending"));
    let mut tta = Vec::new();
    let mut n_error = 0;
    let mut other = 0;
    let mut faults: BTreeMap<String, usize> = BTreeMap::new();
    let error_of: HashMap<&str, &Option<String>> =
        errors.iter().map(|s| (s.id.as_str(), &s.fault)).collect();
    for (id, d) in &p.finished {
        if active.contains(id) {
            tta.push(*d);
        } else if let Some(f) = error_of.get(id.as_str()) {
            n_error += 1;
            *faults
                .entry(f.as_deref().unwrap_or("(no fault)").to_owned())
                .or_default() += 1;
        } else {
            other += 1;
        }
    }
    let seconds = p
        .last_finish
        .map(|l| (l - first_post).as_secs_f64())
        .unwrap_or(0.0);
    let n_active = tta.len();
    let stuck = p.waiting.len();
    let boot = BootPhase {
        requested: spec.servers,
        accepted: accepted_ids.len(),
        refused,
        refusal_samples,
        active: n_active,
        error: n_error,
        faults: faults
            .into_iter()
            .map(|(message, count)| FaultCount { message, count })
            .collect(),
        stuck_in_build: stuck,
        other,
        accept_latency: summarize(&mut accept_lat),
        time_to_active: summarize(&mut tta),
        submit_seconds,
        accepts_per_second: accepted_ids.len() as f64 / submit_seconds.max(1e-9),
        seconds,
        boots_per_second: if seconds > 0.0 {
            n_active as f64 / seconds
        } else {
            0.0
        },
        polls: summarize(&mut polls),
        poll_errors,
    };

    let list = if spec.list_runs > 0 {
        Some(time_list(&t.compute, spec.list_runs).await?)
    } else {
        None
    };
    let usage_peak = match &t.placement {
        Some(p) => Some(p.total_usage().await?.0),
        None => None,
    };

    let delete = if spec.delete {
        Some(delete_all(t, spec, &accepted_ids, usage_before, usage_peak).await?)
    } else {
        None
    };
    Ok(BootReport {
        spec: spec.clone(),
        boot,
        list,
        delete,
        boot_cpu_seconds: cpu0.zip(cpu1).map(|(a, b)| b - a),
    })
}

/// Times `GET /servers/detail?limit=1000` `runs` times (after one warm-up).
pub async fn time_list(compute: &Compute, runs: usize) -> Result<ListPhase> {
    let servers_total = compute.list_all(false, "").await?.len();
    let (first, _) = compute.list_page("/servers/detail?limit=1000").await?;
    let mut lat = Vec::with_capacity(runs);
    for _ in 0..runs {
        let (took, _) = compute.get_timed("/servers/detail?limit=1000").await?;
        lat.push(took);
    }
    Ok(ListPhase {
        servers_total,
        page_size: first.len(),
        latency: summarize(&mut lat),
    })
}

async fn delete_all(
    t: &Target,
    spec: &BootSpec,
    ids: &[String],
    usage_before: Option<(BTreeMap<String, u64>, usize)>,
    usage_peak: Option<BTreeMap<String, u64>>,
) -> Result<DeletePhase> {
    let counters = Arc::new(Counters::default());
    let progress = spec.progress.then(|| {
        spawn_progress("delete", ids.len(), counters.clone(), |c| {
            (
                c.deleted.load(Ordering::Relaxed),
                "DELETE answered".to_owned(),
            )
        })
    });
    let t0 = Instant::now();
    let answers: Vec<Result<(Duration, u16)>> = stream::iter(ids.iter())
        .map(|id| {
            let (compute, counters) = (&t.compute, &counters);
            async move {
                let s = Instant::now();
                let status = compute.delete(id).await?;
                counters.deleted.fetch_add(1, Ordering::Relaxed);
                Ok((s.elapsed(), status))
            }
        })
        .buffer_unordered(spec.concurrency.max(1))
        .collect()
        .await;
    counters.done.store(true, Ordering::Relaxed);
    if let Some(p) = progress {
        let _ = p.await;
    }
    let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
    let mut lat = Vec::new();
    for a in answers {
        match a {
            Ok((d, s)) => {
                lat.push(d);
                *statuses.entry(s).or_default() += 1;
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "DELETE failed");
                *statuses.entry(0).or_default() += 1;
            }
        }
    }
    // Until the list shows none of ours.
    let ours: HashSet<&str> = ids.iter().map(String::as_str).collect();
    let mut left;
    loop {
        left = t
            .compute
            .list_all(false, "")
            .await?
            .iter()
            .filter(|s| ours.contains(s.id.as_str()))
            .count();
        if left == 0 || t0.elapsed() > spec.active_timeout {
            break;
        }
        tokio::time::sleep(spec.poll_interval).await;
    }
    let seconds_until_gone = t0.elapsed().as_secs_f64();
    let gone_at = Instant::now();
    let placement = match (&t.placement, usage_before) {
        (Some(p), Some((before, providers))) => {
            // Allocations go shortly after the instance row: wait up to 30 s.
            let mut after;
            loop {
                after = p.total_usage().await?.0;
                if same_usage(&before, &after) || gone_at.elapsed() > Duration::from_secs(30) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let released = same_usage(&before, &after);
            let settle_ms = gone_at.elapsed().as_millis() as u64;
            let mut leaked_consumers = Vec::new();
            if !released {
                let checks: Vec<(String, bool)> =
                    stream::iter(ids.iter())
                        .map(|id| async move {
                            (id.clone(), p.has_allocations(id).await.unwrap_or(true))
                        })
                        .buffer_unordered(16)
                        .collect()
                        .await;
                leaked_consumers = checks
                    .into_iter()
                    .filter(|(_, leaked)| *leaked)
                    .map(|(id, _)| id)
                    .collect();
            }
            let leaked = leaked_consumers.len();
            leaked_consumers.truncate(20);
            Some(PlacementCheck {
                providers,
                usage_before: before,
                usage_peak: usage_peak.unwrap_or_default(),
                usage_after: after,
                released,
                settle_ms,
                leaked,
                leaked_consumers,
            })
        }
        _ => None,
    };
    Ok(DeletePhase {
        statuses,
        latency: summarize(&mut lat),
        seconds_until_gone,
        deletes_per_second: ids.len() as f64 / seconds_until_gone.max(1e-9),
        servers_left: left,
        placement,
    })
}

/// Usage maps equal, a missing class counting as zero.
fn same_usage(a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>) -> bool {
    a.keys()
        .chain(b.keys())
        .all(|k| a.get(k).copied().unwrap_or(0) == b.get(k).copied().unwrap_or(0))
}

/// `name_sum` / `name_count` pairs of a Prometheus text rendering, as
/// (series → (count, sum)).
pub fn metric_sums(text: &str) -> BTreeMap<String, (f64, f64)> {
    let mut out: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(v) = value.parse::<f64>() else {
            continue;
        };
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (n, format!("{{{l}")),
            None => (series, String::new()),
        };
        if let Some(base) = name.strip_suffix("_sum") {
            out.entry(format!("{base}{labels}")).or_default().1 = v;
        } else if let Some(base) = name.strip_suffix("_count") {
            out.entry(format!("{base}{labels}")).or_default().0 = v;
        }
    }
    out
}

/// Time spent per histogram series between two renderings.
#[derive(Debug, Clone, Serialize)]
pub struct TimeSpent {
    /// Metric name and labels.
    pub series: String,
    /// Observations.
    pub count: u64,
    /// Seconds summed over the observations.
    pub total_seconds: f64,
    /// Mean, milliseconds.
    pub mean_ms: f64,
}

/// Where the time went between `before` and `after` (Prometheus text),
/// largest total first; only `*_seconds` series.
pub fn time_spent(before: &str, after: &str) -> Vec<TimeSpent> {
    let b = metric_sums(before);
    let mut out: Vec<TimeSpent> = metric_sums(after)
        .into_iter()
        .filter(|(k, _)| k.split('{').next().unwrap_or("").ends_with("_seconds"))
        .map(|(k, (c, s))| {
            let (c0, s0) = b.get(&k).copied().unwrap_or_default();
            let count = (c - c0).max(0.0) as u64;
            let total = (s - s0).max(0.0);
            TimeSpent {
                series: k,
                count,
                total_seconds: total,
                mean_ms: if count > 0 {
                    total * 1000.0 / count as f64
                } else {
                    0.0
                },
            }
        })
        .filter(|t| t.count > 0)
        .collect();
    out.sort_by(|a, b| b.total_seconds.total_cmp(&a.total_seconds));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_of_a_prometheus_summary() {
        let before = "# TYPE x_seconds summary\nx_seconds{op=\"a\",quantile=\"0.5\"} 0.1\nx_seconds_sum{op=\"a\"} 1\nx_seconds_count{op=\"a\"} 10\n";
        let after = "x_seconds_sum{op=\"a\"} 3.5\nx_seconds_count{op=\"a\"} 20\ny_total 4\nz_seconds_sum 2\nz_seconds_count 4\n";
        let t = time_spent(before, after);
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].series, "x_seconds{op=\"a\"}");
        assert_eq!(t[0].count, 10);
        assert!((t[0].total_seconds - 2.5).abs() < 1e-9);
        assert!((t[0].mean_ms - 250.0).abs() < 1e-9);
        assert_eq!(t[1].series, "z_seconds");
    }

    #[test]
    fn usage_compare_treats_missing_as_zero() {
        let a = BTreeMap::from([("VCPU".to_owned(), 0u64)]);
        assert!(same_usage(&a, &BTreeMap::new()));
        let b = BTreeMap::from([("VCPU".to_owned(), 1u64)]);
        assert!(!same_usage(&a, &b));
    }

    #[test]
    fn cpu_seconds_read() {
        if cfg!(target_os = "linux") {
            assert!(process_cpu_seconds().is_some());
        }
    }
}
