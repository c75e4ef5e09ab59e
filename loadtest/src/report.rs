//! The run report: `report.json` with every figure, the SVG plots, and
//! the terminal summary table.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::runner::RunReport;
use crate::stats::Summary;
use crate::svg;

/// The plot files a report directory holds.
pub const PLOTS: [&str; 5] = [
    "throughput.svg",
    "time_to_active_phases.svg",
    "servers_per_cell.svg",
    "servers_per_host.svg",
    "errors_by_fault.svg",
];

/// A directory being filled with report files.
pub(crate) struct Files<'a> {
    dir: &'a Path,
    /// The files written so far.
    pub written: Vec<PathBuf>,
}

impl<'a> Files<'a> {
    /// Creates `dir` if needed.
    pub fn create(dir: &'a Path) -> Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        Ok(Self {
            dir,
            written: Vec::new(),
        })
    }

    /// Writes `name` with `body`.
    pub fn put(&mut self, name: &str, body: String) -> Result<()> {
        let p = self.dir.join(name);
        std::fs::write(&p, body).with_context(|| format!("write {}", p.display()))?;
        self.written.push(p);
        Ok(())
    }
}

/// Writes `report.json` and the plots into `dir`; returns the files.
pub fn write(r: &RunReport, dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Files::create(dir)?;
    let mut put = |name: &str, body: String| out.put(name, body);
    put("report.json", serde_json::to_string_pretty(r)?)?;

    let t = &r.throughput;
    let pts = |v: &[u64]| -> Vec<(f64, f64)> {
        v.iter()
            .enumerate()
            .map(|(i, n)| (i as f64 * t.bucket_seconds, *n as f64))
            .collect()
    };
    put(
        PLOTS[0],
        svg::lines(
            &format!("{}: throughput", r.scenario),
            "seconds since the first phase started",
            "per second",
            &[
                ("accepted (202)".to_owned(), pts(&t.accepted)),
                ("ACTIVE".to_owned(), pts(&t.active)),
                ("ERROR".to_owned(), pts(&t.error)),
                ("DELETE answered".to_owned(), pts(&t.deleted)),
            ],
        ),
    )?;

    // Time-to-ACTIVE by build phase: one group per (run phase, build phase).
    let mut cats = Vec::new();
    let (mut p50, mut p95, mut p99) = (Vec::new(), Vec::new(), Vec::new());
    for p in &r.phases {
        let mut rows: Vec<(String, &Summary)> =
            p.build_phases.iter().map(|(k, s)| (k.clone(), s)).collect();
        rows.push(("total".to_owned(), &p.time_to_active));
        for (k, s) in rows {
            let short = k.split_once('_').map(|x| x.1).unwrap_or(&k).to_owned();
            cats.push(if r.phases.len() > 1 {
                format!("{}:{short}", p.name)
            } else {
                short
            });
            p50.push(s.p50_ms);
            p95.push(s.p95_ms);
            p99.push(s.p99_ms);
        }
    }
    put(
        PLOTS[1],
        svg::bars(
            &format!("{}: time to ACTIVE by phase", r.scenario),
            "milliseconds",
            &cats,
            &[
                ("p50".to_owned(), p50),
                ("p95".to_owned(), p95),
                ("p99".to_owned(), p99),
            ],
        ),
    )?;

    // Distribution at the peak of the phase with the most servers.
    let peak = r
        .phases
        .iter()
        .max_by_key(|p| p.servers_per_cell.values().sum::<usize>());
    let mut by_cell: Vec<(String, f64)> = peak
        .map(|p| {
            p.servers_per_cell
                .iter()
                .map(|(c, n)| (c.clone(), *n as f64))
                .collect()
        })
        .unwrap_or_default();
    // cell2 before cell10.
    by_cell.sort_by(|a, b| (a.0.len(), &a.0).cmp(&(b.0.len(), &b.0)));
    let (cells, per_cell): (Vec<String>, Vec<f64>) = by_cell.into_iter().unzip();
    put(
        PLOTS[2],
        svg::bars(
            &format!(
                "{}: servers per cell (peak of {})",
                r.scenario,
                peak.map(|p| p.name.as_str()).unwrap_or("-")
            ),
            "servers",
            &cells,
            &[("servers".to_owned(), per_cell)],
        ),
    )?;
    let hist = peak
        .map(|p| p.servers_per_host_histogram.clone())
        .unwrap_or_default();
    // Idle hosts dwarf the rest on a big fleet: counted in the title, not drawn.
    let idle = hist.first().copied().unwrap_or(0);
    let drawn: Vec<(String, f64)> = hist
        .iter()
        .enumerate()
        .skip(1)
        .map(|(i, n)| (i.to_string(), *n as f64))
        .collect();
    put(
        PLOTS[3],
        svg::bars(
            &format!(
                "{}: hosts by servers held at the peak ({idle} hosts held none)",
                r.scenario
            ),
            "hosts",
            &drawn.iter().map(|d| d.0.clone()).collect::<Vec<_>>(),
            &[("hosts".to_owned(), drawn.iter().map(|d| d.1).collect())],
        ),
    )?;
    let rows: Vec<(String, f64)> = r
        .errors_by_fault
        .iter()
        .flat_map(|(f, msgs)| {
            msgs.iter()
                .map(move |(m, n)| (format!("[{f}] {m}"), *n as f64))
        })
        .collect();
    put(
        PLOTS[4],
        svg::hbars(
            &format!("{}: errors by fault", r.scenario),
            "servers",
            &rows,
        ),
    )?;
    Ok(out.written)
}

/// The terminal summary table.
pub fn summary(r: &RunReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let mb = |b: u64| b as f64 / (1024.0 * 1024.0);
    let _ = writeln!(
        s,
        "scenario {}: {:.1}s, {} hypervisors in {} cells (up in {:.1}s)",
        r.scenario, r.seconds, r.target.hypervisors, r.target.cells, r.target.start_seconds
    );
    if let Some(c) = r.machine["calibration_ms"].as_f64() {
        let probe = r.machine["cache_probe_ns"]
            .as_f64()
            .map(|p| format!(", cache probe {p:.0} ns"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "machine: {} cores, fixed-loop calibration {c:.1} ms{probe} before the run (lower is faster; compare runs with close figures)",
            r.machine["cores"]
        );
    }
    if r.target.embedded {
        let _ = writeln!(
            s,
            "memory: RSS {:.0} MiB -> {:.0} MiB with the fleet ({:.0} bytes per hypervisor), peak {:.0} MiB",
            mb(r.memory.rss_before_fleet),
            mb(r.memory.rss_after_fleet),
            r.memory.bytes_per_hypervisor,
            mb(r.memory.peak_bytes)
        );
        let l = &r.target.layout;
        if l.hosts_per_zone.len() > 1 || !l.hosts_per_aggregate.is_empty() {
            let list = |m: &std::collections::BTreeMap<String, usize>| {
                m.iter()
                    .map(|(k, n)| format!("{k} {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let _ = writeln!(
                s,
                "hosts per zone: {}; per aggregate: {} (created in {:.1}s)",
                list(&l.hosts_per_zone),
                if l.hosts_per_aggregate.is_empty() {
                    "-".to_owned()
                } else {
                    list(&l.hosts_per_aggregate)
                },
                l.seconds
            );
        }
    }
    let _ = writeln!(
        s,
        "{:<22} {:>6} {:>6} {:>6} {:>5} {:>5} {:>8} {:>9} {:>9} {:>9} {:>8}",
        "phase",
        "sent",
        "202",
        "ACTIVE",
        "ERR",
        "BUILD",
        "boots/s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "del/s"
    );
    for p in &r.phases {
        let del = p
            .deletes
            .as_ref()
            .map(|d| format!("{:.1}", d.requested as f64 / d.seconds_until_gone.max(1e-9)))
            .unwrap_or_else(|| "-".to_owned());
        let _ = writeln!(
            s,
            "{:<22} {:>6} {:>6} {:>6} {:>5} {:>5} {:>8.1} {:>9.1} {:>9.1} {:>9.1} {:>8}",
            p.name.chars().take(22).collect::<String>(),
            p.requested,
            p.accepted,
            p.active,
            p.error,
            p.stuck_in_build,
            p.boots_per_second,
            p.time_to_active.p50_ms,
            p.time_to_active.p95_ms,
            p.time_to_active.p99_ms,
            del
        );
        for (k, b) in &p.build_phases {
            let _ = writeln!(
                s,
                "  {:<20} p50 {:>8.1}  p95 {:>8.1}  p99 {:>8.1}  max {:>8.1} ms",
                k.split_once('_').map(|x| x.1).unwrap_or(k),
                b.p50_ms,
                b.p95_ms,
                b.p99_ms,
                b.max_ms
            );
        }
        if let Some(l) = &p.list {
            let _ = writeln!(
                s,
                "  list {:>3} servers     p50 {:>8.1}  p95 {:>8.1}  p99 {:>8.1} ms",
                p.list_page_size.unwrap_or(0),
                l.p50_ms,
                l.p95_ms,
                l.p99_ms
            );
        }
        if p.servers_per_zone.len() > 1 || !p.requested_zones.is_empty() {
            let _ = writeln!(
                s,
                "  servers per zone: {}; outside their requested zone: {}",
                p.servers_per_zone
                    .iter()
                    .map(|(k, n)| format!("{k} {n}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                p.outside_requested_zone
            );
        }
        if p.requested_hosts > 0 {
            let _ = writeln!(
                s,
                "  creates naming a host: {}; on another host: {}",
                p.requested_hosts, p.outside_requested_host
            );
        }
        if let Some(i) = &p.isolation {
            let _ = writeln!(
                s,
                "  isolation over {} projects: {}",
                i.tenants,
                if i.holds { "holds" } else { "BROKEN" }
            );
        }
        if let Some(d) = p.deletes.as_ref().filter(|d| d.left > 0) {
            let _ = writeln!(
                s,
                "  {} servers still listed {:.0}s after their DELETE",
                d.left, d.seconds_until_gone
            );
        }
        if p.skipped_at_cap > 0 {
            let _ = writeln!(
                s,
                "  {} creates not sent (concurrency cap)",
                p.skipped_at_cap
            );
        }
    }
    for f in &r.faults {
        let _ = writeln!(
            s,
            "fault {:?} {} at {:.1}s (after {} ACTIVE): {}",
            f.kind, f.target, f.at_secs, f.active_before, f.result
        );
        if f.kind.is_host() && f.result == "applied" {
            let secs = |v: Option<f64>| v.map_or("never".to_owned(), |d| format!("{d:.1}s"));
            let _ = writeln!(
                s,
                "  host shown down after {}; its builds out of BUILD after {}",
                secs(f.noticed_after_secs),
                secs(f.builds_recovered_after_secs)
            );
        }
        if let (Some(u), Some(res)) = (f.until_secs, &f.restore_result) {
            let _ = writeln!(
                s,
                "  until {u:.1}s: {res}; {}",
                match f.recovered_after_secs {
                    Some(d) => format!("cell recovered {d:.1}s later (first server sent after the restore ACTIVE)"),
                    None => "NOT seen to recover (no server of the cell sent after the restore became ACTIVE)".to_owned(),
                }
            );
        }
    }
    if let Some(n) = r.injected_spawn_failures.filter(|n| *n > 0) {
        let _ = writeln!(
            s,
            "spawns failed on purpose by the fleet's knobs: {n} (each rescheduled while alternates last)"
        );
    }
    for (f, msgs) in &r.errors_by_fault {
        for (m, n) in msgs {
            let _ = writeln!(s, "errors [{f}] x{n}: {m}");
        }
    }
    if let Some(l) = &r.liveness {
        let _ = writeln!(
            s,
            "liveness: {} samples of os-services; live hosts shown down: {}{}",
            l.samples,
            l.false_down,
            if l.false_down_hosts.is_empty() {
                String::new()
            } else {
                format!(" ({})", l.false_down_hosts.join(", "))
            }
        );
        if !l.down_at_start.is_empty() {
            let _ = writeln!(
                s,
                "  down before the run (not counted): {}",
                l.down_at_start.join(", ")
            );
        }
    }
    let broken = r.broken();
    let _ = match (&r.invariants_not_checked, broken.is_empty()) {
        (_, false) => writeln!(s, "invariants: BROKEN: {}", broken.join("; ")),
        (Some(why), true) => writeln!(s, "invariants: NOT CHECKED: {why}"),
        (None, true) => writeln!(s, "invariants: all hold"),
    };
    s
}
