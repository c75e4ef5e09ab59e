//! Two runs side by side (`loadtest compare A B`): the same scenario
//! against two targets — this region and a Nova deployment, two builds, two
//! backends — read from their `report.json` files. Phases are matched by
//! name (by position when the names differ); every figure of a phase is a
//! row with both values and B / A. Writes `compare.json` and two plots
//! (boots/s per phase, time-to-ACTIVE percentiles per phase) beside the
//! printed table.
//!
//! The reports are read as JSON values, not as [`crate::runner::RunReport`],
//! so that a report written by an older `loadtest` still compares: a
//! figure missing from one side is shown as `-`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::Value;

use crate::svg;

/// One figure of one phase in both runs.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Row {
    /// The phase (A's name).
    pub phase: String,
    /// What is measured, with its unit.
    pub figure: &'static str,
    /// Run A's value.
    pub a: Option<f64>,
    /// Run B's value.
    pub b: Option<f64>,
}

impl Row {
    /// B / A, when both are known and A is not zero.
    pub fn ratio(&self) -> Option<f64> {
        match (self.a, self.b) {
            (Some(a), Some(b)) if a != 0.0 => Some(b / a),
            _ => None,
        }
    }
}

/// The comparison of two runs.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Label of run A (e.g. its target).
    pub a: String,
    /// Label of run B.
    pub b: String,
    /// Scenario names (A, B).
    pub scenarios: (String, String),
    /// Every figure, phase by phase.
    pub rows: Vec<Row>,
    /// Phases of one run that the other does not have.
    pub unmatched: Vec<String>,
    /// Whether each run's invariants held (`None`: not checked).
    pub invariants_hold: (Option<bool>, Option<bool>),
    /// Each machine's speed before its run (`machine.calibration_ms`:
    /// lower is faster; `None`: not recorded, an older report).
    pub calibration_ms: (Option<f64>, Option<f64>),
    /// Each machine's cache probe before its run
    /// (`machine.cache_probe_ns`: lower is faster; `None`: not recorded).
    pub cache_probe_ns: (Option<f64>, Option<f64>),
}

/// How far apart two runs' calibrations may be before the table warns
/// that their machines ran at different speeds (B / A outside 1 ± this).
pub const CALIBRATION_TOLERANCE: f64 = 0.15;

/// The same for the cache probe, whose passes spread more.
pub const CACHE_PROBE_TOLERANCE: f64 = 0.25;

/// The figures compared, as (label, JSON pointer inside a phase).
const FIGURES: [(&str, &str); 13] = [
    ("boots/s to ACTIVE", "/boots_per_second"),
    ("accepted/s", "/accepts_per_second"),
    ("ACTIVE", "/active"),
    ("ERROR", "/error"),
    ("stuck in BUILD", "/stuck_in_build"),
    ("POST -> 202 p50 ms", "/accept_latency/p50_ms"),
    ("POST -> 202 p99 ms", "/accept_latency/p99_ms"),
    ("time to ACTIVE p50 ms", "/time_to_active/p50_ms"),
    ("time to ACTIVE p95 ms", "/time_to_active/p95_ms"),
    ("time to ACTIVE p99 ms", "/time_to_active/p99_ms"),
    ("list p50 ms", "/list/p50_ms"),
    ("DELETE p50 ms", "/deletes/latency/p50_ms"),
    ("seconds until deleted", "/deletes/seconds_until_gone"),
];

fn phases(r: &Value) -> Vec<&Value> {
    r["phases"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

fn invariants_hold(r: &Value) -> Option<bool> {
    // A report that records its outcome says it outright (the zone and
    // isolation checks of the phases included).
    match r["invariants_outcome"].as_str() {
        Some("hold") => return Some(true),
        Some("broken") => return Some(false),
        Some(_) => return None,
        None => {}
    }
    if r["invariants_checked"] != Value::Bool(true) {
        return None;
    }
    let mut all = r["invariants"].as_array().into_iter().flatten().chain(
        phases(r)
            .into_iter()
            .flat_map(|p| p["invariants"].as_array().into_iter().flatten()),
    );
    Some(all.all(|i| i["holds"] == Value::Bool(true)))
}

/// Compares two parsed reports.
pub fn compare(a: &Value, b: &Value, label_a: &str, label_b: &str) -> Comparison {
    let (pa, pb) = (phases(a), phases(b));
    let name = |p: &Value| p["name"].as_str().unwrap_or_default().to_owned();
    // By name when every phase of A has a namesake in B, else by position.
    let by_name = pa.iter().all(|p| pb.iter().any(|q| name(q) == name(p)));
    let mut pairs: Vec<(&Value, &Value)> = Vec::new();
    let mut unmatched = Vec::new();
    if by_name {
        for p in &pa {
            if let Some(q) = pb.iter().find(|q| name(q) == name(p)) {
                pairs.push((p, q));
            }
        }
        for q in &pb {
            if !pa.iter().any(|p| name(p) == name(q)) {
                unmatched.push(format!("{label_b}: {}", name(q)));
            }
        }
    } else {
        pairs.extend(pa.iter().copied().zip(pb.iter().copied()));
        for p in pa.iter().skip(pb.len()) {
            unmatched.push(format!("{label_a}: {}", name(p)));
        }
        for q in pb.iter().skip(pa.len()) {
            unmatched.push(format!("{label_b}: {}", name(q)));
        }
    }
    let mut rows = Vec::new();
    for (p, q) in pairs {
        for (figure, ptr) in FIGURES {
            let a = p.pointer(ptr).and_then(Value::as_f64);
            let b = q.pointer(ptr).and_then(Value::as_f64);
            if a.is_some() || b.is_some() {
                rows.push(Row {
                    phase: name(p),
                    figure,
                    a,
                    b,
                });
            }
        }
    }
    Comparison {
        a: label_a.to_owned(),
        b: label_b.to_owned(),
        scenarios: (
            a["scenario"].as_str().unwrap_or_default().to_owned(),
            b["scenario"].as_str().unwrap_or_default().to_owned(),
        ),
        rows,
        unmatched,
        invariants_hold: (invariants_hold(a), invariants_hold(b)),
        calibration_ms: (
            a.pointer("/machine/calibration_ms").and_then(Value::as_f64),
            b.pointer("/machine/calibration_ms").and_then(Value::as_f64),
        ),
        cache_probe_ns: (
            a.pointer("/machine/cache_probe_ns").and_then(Value::as_f64),
            b.pointer("/machine/cache_probe_ns").and_then(Value::as_f64),
        ),
    }
}

fn cell(v: Option<f64>) -> String {
    match v {
        None => "-".to_owned(),
        Some(x) if x.fract() == 0.0 && x.abs() < 1e12 => format!("{x:.0}"),
        Some(x) => format!("{x:.1}"),
    }
}

/// The side-by-side table.
pub fn table(c: &Comparison) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "A = {} ({}), B = {} ({})",
        c.a, c.scenarios.0, c.b, c.scenarios.1
    );
    let _ = writeln!(
        s,
        "{:<24} {:<24} {:>12} {:>12} {:>8}",
        "phase", "figure", "A", "B", "B/A"
    );
    for r in &c.rows {
        let _ = writeln!(
            s,
            "{:<24} {:<24} {:>12} {:>12} {:>8}",
            r.phase,
            r.figure,
            cell(r.a),
            cell(r.b),
            r.ratio().map_or("-".to_owned(), |x| format!("{x:.2}")),
        );
    }
    let verdict = |v: Option<bool>| match v {
        Some(true) => "hold",
        Some(false) => "BROKEN",
        None => "not checked",
    };
    let _ = writeln!(
        s,
        "invariants: A {}, B {}",
        verdict(c.invariants_hold.0),
        verdict(c.invariants_hold.1)
    );
    for u in &c.unmatched {
        let _ = writeln!(s, "phase only in {u}");
    }
    machine_line(
        &mut s,
        "machine calibration",
        "ms",
        c.calibration_ms,
        CALIBRATION_TOLERANCE,
    );
    machine_line(
        &mut s,
        "machine cache probe",
        "ns",
        c.cache_probe_ns,
        CACHE_PROBE_TOLERANCE,
    );
    s
}

/// One machine figure of both runs, and whether they are close enough for
/// the runs to compare (B / A within 1 ± `tolerance`); nothing when
/// either run did not record it.
fn machine_line(
    s: &mut String,
    what: &str,
    unit: &str,
    (a, b): (Option<f64>, Option<f64>),
    tolerance: f64,
) {
    if let (Some(a), Some(b)) = (a, b) {
        let ratio = if a > 0.0 { b / a } else { f64::NAN };
        let note = if (ratio - 1.0).abs() <= tolerance {
            "the machines ran at about the same speed"
        } else {
            "the machines ran at different speeds: part of any difference above is the machine's"
        };
        let _ = writeln!(
            s,
            "{what}: A {a:.1} {unit}, B {b:.1} {unit} (B/A {ratio:.2}): {note}"
        );
    }
}

/// Reads `report.json` at `path`, or inside the directory `path`.
pub fn load(path: &Path) -> Result<Value> {
    let file = if path.is_dir() {
        path.join("report.json")
    } else {
        path.to_owned()
    };
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("read the report {}", file.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parse the report {}", file.display()))
}

/// Writes `compare.json`, `compare_boots.svg` and
/// `compare_time_to_active.svg` into `dir`; returns the files.
pub fn write(c: &Comparison, dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = crate::report::Files::create(dir)?;
    let mut put = |name: &str, body: String| out.put(name, body);
    put("compare.json", serde_json::to_string_pretty(c)?)?;
    let series = |figures: &[&str]| -> (Vec<String>, Vec<(String, Vec<f64>)>) {
        let mut cats = Vec::new();
        let (mut va, mut vb) = (Vec::new(), Vec::new());
        for r in c.rows.iter().filter(|r| figures.contains(&r.figure)) {
            cats.push(if figures.len() > 1 {
                format!(
                    "{} {}",
                    r.phase,
                    r.figure.trim_start_matches("time to ACTIVE ")
                )
            } else {
                r.phase.clone()
            });
            va.push(r.a.unwrap_or(0.0));
            vb.push(r.b.unwrap_or(0.0));
        }
        (cats, vec![(c.a.clone(), va), (c.b.clone(), vb)])
    };
    let (cats, s) = series(&["boots/s to ACTIVE"]);
    put(
        "compare_boots.svg",
        svg::bars("Boots per second to ACTIVE, by phase", "boots/s", &cats, &s),
    )?;
    let (cats, s) = series(&[
        "time to ACTIVE p50 ms",
        "time to ACTIVE p95 ms",
        "time to ACTIVE p99 ms",
    ]);
    put(
        "compare_time_to_active.svg",
        svg::bars("Time to ACTIVE, by phase and percentile", "ms", &cats, &s),
    )?;
    Ok(out.written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn report(name: &str, phases: Value, holds: bool) -> Value {
        json!({
            "scenario": name,
            "phases": phases,
            "invariants_checked": true,
            "invariants": [{"name": "x", "holds": holds}],
        })
    }

    #[test]
    fn phases_pair_by_name_and_ratios_are_b_over_a() {
        let a = report(
            "s",
            json!([
                {"name": "boot", "boots_per_second": 100.0, "time_to_active": {"p50_ms": 400.0}},
                {"name": "list", "list": {"p50_ms": 20.0}},
            ]),
            true,
        );
        let b = report(
            "s",
            json!([
                {"name": "list", "list": {"p50_ms": 30.0}},
                {"name": "boot", "boots_per_second": 50.0, "time_to_active": {"p50_ms": 800.0}},
                {"name": "extra"},
            ]),
            false,
        );
        let c = compare(&a, &b, "ours", "nova");
        let row = |phase: &str, figure: &str| {
            c.rows
                .iter()
                .find(|r| r.phase == phase && r.figure == figure)
                .cloned()
                .unwrap_or_else(|| panic!("{phase} {figure}: {:?}", c.rows))
        };
        assert_eq!(row("boot", "boots/s to ACTIVE").ratio(), Some(0.5));
        assert_eq!(row("boot", "time to ACTIVE p50 ms").ratio(), Some(2.0));
        assert_eq!(row("list", "list p50 ms").ratio(), Some(1.5));
        assert_eq!(c.rows.len(), 3, "only figures either side has");
        assert_eq!(c.unmatched, ["nova: extra"]);
        assert_eq!(c.invariants_hold, (Some(true), Some(false)));
        let t = table(&c);
        assert!(t.contains("invariants: A hold, B BROKEN"), "{t}");
        assert!(t.contains("0.50"), "{t}");
    }

    #[test]
    fn phases_pair_by_position_when_names_differ() {
        let a = report("a", json!([{"name": "p1", "active": 10.0}]), true);
        let mut b = report(
            "b",
            json!([{"name": "q1", "active": 0.0}, {"name": "q2"}]),
            true,
        );
        b["invariants_checked"] = json!(false);
        let c = compare(&a, &b, "A", "B");
        assert_eq!(c.calibration_ms, (None, None));
        assert_eq!(c.cache_probe_ns, (None, None));
        assert!(!table(&c).contains("machine"));
        assert_eq!(c.rows.len(), 1);
        assert_eq!((c.rows[0].a, c.rows[0].b), (Some(10.0), Some(0.0)));
        assert_eq!(c.rows[0].ratio(), Some(0.0));
        assert_eq!(c.unmatched, ["B: q2"]);
        assert_eq!(c.invariants_hold, (Some(true), None));
    }

    /// The recorded outcome wins over the list of invariants: a run whose
    /// many-tenants isolation broke did not hold, one not checked has no
    /// verdict.
    #[test]
    fn the_recorded_outcome_is_the_verdict() {
        let mut a = report("a", json!([{"name": "p"}]), true);
        a["invariants_outcome"] = json!("broken");
        let mut b = report("b", json!([{"name": "p"}]), true);
        b["invariants_outcome"] = json!("not-checked");
        assert_eq!(
            compare(&a, &b, "A", "B").invariants_hold,
            (Some(false), None)
        );
        b["invariants_outcome"] = json!("hold");
        assert_eq!(
            compare(&b, &b, "A", "B").invariants_hold,
            (Some(true), Some(true))
        );
    }

    /// Two runs whose machines ran at different speeds are flagged; close
    /// calibrations are not.
    #[test]
    fn calibrations_far_apart_are_flagged() {
        let mut a = report("s", json!([{"name": "p"}]), true);
        let mut b = a.clone();
        a["machine"] = json!({"cores": 2, "calibration_ms": 16.0});
        b["machine"] = json!({"cores": 2, "calibration_ms": 32.0});
        let c = compare(&a, &b, "A", "B");
        assert_eq!(c.calibration_ms, (Some(16.0), Some(32.0)));
        let t = table(&c);
        assert!(t.contains("A 16.0 ms, B 32.0 ms (B/A 2.00)"), "{t}");
        assert!(t.contains("different speeds"), "{t}");
        b["machine"]["calibration_ms"] = json!(17.0);
        let t = table(&compare(&a, &b, "A", "B"));
        assert!(t.contains("about the same speed"), "{t}");
        assert!(!t.contains("cache probe"), "not recorded: {t}");

        // Close calibrations, cache probes far apart (the shared cache
        // taken by other tenants during one run): flagged.
        a["machine"]["cache_probe_ns"] = json!(30.0);
        b["machine"]["cache_probe_ns"] = json!(150.0);
        let c = compare(&a, &b, "A", "B");
        assert_eq!(c.cache_probe_ns, (Some(30.0), Some(150.0)));
        let t = table(&c);
        assert!(
            t.contains("machine cache probe: A 30.0 ns, B 150.0 ns (B/A 5.00): the machines ran at different speeds"),
            "{t}"
        );
        b["machine"]["cache_probe_ns"] = json!(36.0);
        let t = table(&compare(&a, &b, "A", "B"));
        assert!(
            t.contains("machine cache probe: A 30.0 ns, B 36.0 ns (B/A 1.20): the machines ran at about the same speed"),
            "{t}"
        );
    }

    #[test]
    fn plots_and_json_are_written() {
        let a = report(
            "s",
            json!([{"name": "boot", "boots_per_second": 10.0,
            "time_to_active": {"p50_ms": 1.0, "p95_ms": 2.0, "p99_ms": 3.0}}]),
            true,
        );
        let c = compare(&a, &a, "x", "y");
        let dir = std::env::temp_dir().join(format!("lt-compare-{}", std::process::id()));
        let files = write(&c, &dir).unwrap();
        assert_eq!(files.len(), 3);
        let boots = std::fs::read_to_string(dir.join("compare_boots.svg")).unwrap();
        assert!(boots.starts_with("<svg"), "{boots}");
        assert_eq!(boots.matches("<rect x=").count(), 2, "one bar per run");
        let tta = std::fs::read_to_string(dir.join("compare_time_to_active.svg")).unwrap();
        assert_eq!(
            tta.matches("<rect x=").count(),
            6,
            "three percentiles per run"
        );
        let back: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("compare.json")).unwrap())
                .unwrap();
        assert_eq!(back["rows"][0]["figure"], "boots/s to ACTIVE");
        std::fs::remove_dir_all(&dir).ok();
    }
}
