//! Scenario files end to end on the embedded default: the CI scenario's
//! report, plots and invariants; the parser's errors; a fault hook.

use std::path::Path;

use loadtest::report;
use loadtest::runner::{self, RunOptions};
use loadtest::scenario::{FaultKind, Scenario};

pub(crate) fn quiet() -> RunOptions {
    RunOptions { quiet: true }
}

/// Every plot of a report directory is there and is a whole SVG document.
fn assert_plots_are_svg(out: &Path) {
    for plot in report::PLOTS {
        let body =
            std::fs::read_to_string(out.join(plot)).unwrap_or_else(|e| panic!("{plot}: {e}"));
        assert!(
            body.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""),
            "{plot}"
        );
        assert!(body.trim_end().ends_with("</svg>"), "{plot}");
        assert_eq!(
            body.matches("<svg").count(),
            body.matches("</svg>").count(),
            "{plot}"
        );
    }
}

/// The CI scenario (every phase kind) runs end to end: the JSON report
/// holds every figure, the plots are SVG with data, the invariants hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_scenario_reports_and_keeps_the_invariants() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/tiny.toml");
    let mut s = Scenario::load(&path).expect("tiny scenario parses");
    let data = testkit::temp_dir("loadtest_tiny_data");
    s.target.data_dir = Some(data.clone());
    let r = runner::run(&s, &quiet()).await.expect("run");
    let out = testkit::temp_dir("loadtest_tiny_report");
    let files = report::write(&r, &out).expect("write report");
    assert_eq!(files.len(), 1 + report::PLOTS.len());

    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(v["scenario"], "tiny");
    assert_eq!(v["target"]["embedded"], true);
    assert_eq!(v["target"]["hypervisors"], 3);
    let calibration = v["machine"]["calibration_ms"].as_f64().unwrap();
    assert!(calibration > 0.0 && calibration < 60_000.0, "{calibration}");
    let probe = v["machine"]["cache_probe_ns"].as_f64().unwrap();
    assert!(probe > 0.0 && probe < 100_000.0, "{probe}");
    assert!(report::summary(&r).contains("fixed-loop calibration"));
    assert!(report::summary(&r).contains("cache probe"));
    assert!(v["memory"]["rss_after_fleet"].as_u64().unwrap() > 0);
    assert!(
        v["memory"]["peak_bytes"].as_u64().unwrap()
            >= v["memory"]["rss_after_fleet"].as_u64().unwrap()
    );
    assert!(v["memory"]["bytes_per_hypervisor"].as_f64().unwrap() > 0.0);
    let phases = v["phases"].as_array().unwrap();
    let kinds: Vec<&str> = phases.iter().map(|p| p["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "boot-and-delete",
            "boot-and-list",
            "burst",
            "steady",
            "churn",
            "many-tenants"
        ]
    );
    for p in phases {
        let name = p["name"].as_str().unwrap();
        assert!(p["requested"].as_u64().unwrap() > 0, "{name}");
        assert_eq!(p["active"], p["requested"], "{name}: {p:#}");
        assert_eq!(p["error"], 0, "{name}");
        assert_eq!(p["stuck_in_build"], 0, "{name}");
        assert!(
            p["time_to_active"]["p50_ms"].as_f64().unwrap() > 0.0,
            "{name}"
        );
        // A host's extra spawn time is 5..=30 ms: the spawn phase shows it.
        assert!(
            p["build_phases"]["6_spawn"]["p50_ms"].as_f64().unwrap() >= 5.0,
            "{name}: {p:#}"
        );
        for k in [
            "1_api_accept",
            "2_scheduling",
            "3_cell_create",
            "4_cell_to_host",
            "5_host_prepare",
            "7_report_lag",
        ] {
            assert_eq!(p["build_phases"][k]["count"], p["active"], "{name} {k}");
        }
        let d = &p["deletes"];
        assert_eq!(d["left"], 0, "{name}");
        if p["kind"] == "churn" {
            // The peak of a churn is its population.
            assert_eq!(p["servers_per_cell"]["cell1"], 4, "{name}");
        } else {
            assert_eq!(p["servers_per_cell"]["cell1"], p["active"], "{name}");
        }
        let hist: u64 = p["servers_per_host_histogram"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_u64().unwrap())
            .sum();
        assert_eq!(hist, 3, "{name}: every host counted once");
        assert_eq!(p["invariants"].as_array().unwrap().len(), 5, "{name}");
    }
    assert_eq!(phases[0]["requested"], 8);
    assert_eq!(phases[0]["deletes"]["statuses"]["204"], 8);
    let flavors = phases[0]["flavors"].as_object().unwrap();
    assert_eq!(
        flavors.values().map(|n| n.as_u64().unwrap()).sum::<u64>(),
        8
    );
    assert_eq!(phases[1]["list_page_size"], 6);
    assert_eq!(phases[1]["list"]["count"], 5);
    assert!(
        phases[4]["replaced"].as_u64().unwrap() > 0,
        "churn replaced servers"
    );
    assert_eq!(phases[5]["isolation"]["holds"], true, "{:#}", phases[5]);
    assert_eq!(phases[5]["isolation"]["tenants"], 3);
    let th = &v["throughput"];
    let sum = |k: &str| {
        th[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_u64().unwrap())
            .sum::<u64>()
    };
    let active: u64 = phases.iter().map(|p| p["active"].as_u64().unwrap()).sum();
    assert_eq!(sum("active"), active);
    assert_eq!(sum("accepted"), active);
    assert!(sum("deleted") >= active - 1);
    assert!(v["errors_by_fault"].as_object().unwrap().is_empty());
    assert_eq!(v["invariants_checked"], true);
    let inv = v["invariants"].as_array().unwrap();
    assert_eq!(inv.len(), 5);
    assert!(inv.iter().all(|i| i["holds"] == true), "{inv:#?}");
    assert!(r.broken().is_empty());

    assert_plots_are_svg(&out);
    let tp = std::fs::read_to_string(out.join("throughput.svg")).unwrap();
    assert!(tp.contains("<polyline") && tp.contains("ACTIVE"));
    let ph = std::fs::read_to_string(out.join("time_to_active_phases.svg")).unwrap();
    assert!(ph.contains("spawn") && ph.matches("<rect x=").count() >= 3 * 7);
    let hosts = std::fs::read_to_string(out.join("servers_per_host.svg")).unwrap();
    assert!(hosts.contains("<rect x="));
    let summary = report::summary(&r);
    assert!(summary.contains("invariants: all hold"), "{summary}");
    assert!(summary.contains("1-boot-and-delete"), "{summary}");
    // `target.key_pairs`: every tenant's creates named the key pair it
    // imported, and the cell's rows (deleted ones are kept) carry it.
    let url = format!("sqlite://{}/cell1.sqlite", data.display());
    let cell = sqlx::SqlitePool::connect(&url).await.unwrap();
    let keys: Vec<(Option<String>, i64)> =
        sqlx::query_as("SELECT key_name, COUNT(*) FROM instances GROUP BY key_name")
            .fetch_all(&cell)
            .await
            .unwrap();
    let requested: i64 = phases
        .iter()
        .map(|p| p["requested"].as_i64().unwrap())
        .sum();
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert_eq!(keys[0].0.as_deref(), Some("loadtest"), "{keys:?}");
    assert!(
        keys[0].1 >= requested,
        "{keys:?}: {requested} servers asked for"
    );
    cell.close().await;
    std::fs::remove_dir_all(&data).ok();
    std::fs::remove_dir_all(&out).ok();
}

pub(crate) fn parse_err(text: &str) -> String {
    format!("{:#}", Scenario::parse(text).expect_err("should not parse"))
}

pub(crate) const HEAD: &str = "name = \"t\"\n[fleet]\ncells = 1\nhosts_per_cell = 2\n";

/// Bad scenario files are refused with an error naming the field.
#[test]
fn bad_scenarios_name_the_field() {
    let ok = Scenario::parse(&format!("{HEAD}[[phase]]\nkind = \"burst\"\nservers = 3\n")).unwrap();
    assert_eq!(ok.phases[0].concurrency, 16);
    assert!(ok.phases[0].delete);

    let e = parse_err(&format!(
        "{HEAD}[[phase]]\nkind = \"burst\"\nservers = 3\nconcurency = 4\n"
    ));
    assert!(e.contains("concurency"), "{e}");
    let e = parse_err(&format!("{HEAD}[[phase]]\nkind = \"burst\"\n"));
    assert!(e.contains("phase[0] (1-burst).servers is required"), "{e}");
    let e = parse_err(&format!("{HEAD}[[phase]]\nkind = \"steady\"\nrate = 5.0\n"));
    assert!(e.contains("duration_secs"), "{e}");
    let e = parse_err(&format!(
        "{HEAD}[[phase]]\nkind = \"churn\"\nrate = 5.0\nduration_secs = 1.0\n"
    ));
    assert!(e.contains("population"), "{e}");
    let e = parse_err(&format!("{HEAD}[[phase]]\nkind = \"stampede\"\n"));
    assert!(e.contains("stampede") && e.contains("burst"), "{e}");
    let e = parse_err(&format!(
        "{HEAD}[[phase]]\nkind = \"burst\"\nservers = \"many\"\n"
    ));
    assert!(e.contains("servers") || e.contains("invalid type"), "{e}");
    let e = parse_err(&format!(
        "{HEAD}[[phase]]\nkind = \"many-tenants\"\nservers = 3\n"
    ));
    assert!(e.contains("tenants must be at least 2"), "{e}");
    let e = parse_err(&format!(
        "{HEAD}[[phase]]\nkind = \"burst\"\nservers = 3\nflavors = {{ \"m1.tiny\" = 0 }}\n"
    ));
    assert!(e.contains("flavors"), "{e}");
    let e = parse_err("name = \"t\"\n");
    assert!(e.contains("at least one [[phase]]"), "{e}");
    let e = parse_err("[[phase]]\nkind = \"burst\"\nservers = 3\n");
    assert!(e.contains("name"), "{e}");

    let phase = "[[phase]]\nkind = \"burst\"\nservers = 3\n";
    let e = parse_err(&format!(
        "{HEAD}spawn_latency = {{ kind = \"uniform\", min_ms = 9, max_ms = 3 }}\n{phase}"
    ));
    assert!(e.contains("fleet.spawn_latency"), "{e}");
    let e = parse_err(&format!(
        "{HEAD}spawn_latency = {{ kind = \"gamma\" }}\n{phase}"
    ));
    assert!(e.contains("gamma"), "{e}");
    let e = parse_err(&format!("{HEAD}failing_hosts = 1.5\n{phase}"));
    assert!(e.contains("fleet.failing_hosts"), "{e}");
    let e = parse_err(&format!("{HEAD}spawn_failure_rate = -0.1\n{phase}"));
    assert!(
        e.contains("fleet.spawn_failure_rate must be between 0 and 1"),
        "{e}"
    );
    let e = parse_err(&format!("{HEAD}availability_zones = 3\n{phase}"));
    assert!(
        e.contains("fleet.availability_zones must be between 1 and fleet.hosts_per_cell (2)"),
        "{e}"
    );
    let e = parse_err(&format!("{HEAD}aggregates = 0\n{phase}"));
    assert!(e.contains("fleet.aggregates must be between 1"), "{e}");
    let e = parse_err(&format!(
        "{HEAD}availability_zones = 2\n[[phase]]\nkind = \"burst\"\nservers = 3\navailability_zones = {{ az3 = 1 }}\n"
    ));
    assert!(
        e.contains("phase[0] (1-burst).availability_zones: \"az3\" is not a zone of the fleet (nova, az1, az2)"),
        "{e}"
    );
    let ok = Scenario::parse(&format!(
        "{HEAD}availability_zones = 2\naggregates = 2\n[[phase]]\nkind = \"burst\"\nservers = 3\navailability_zones = {{ az2 = 1, nova = 1 }}\n"
    ))
    .unwrap();
    assert_eq!(ok.fleet.availability_zones, Some(2));
    let e = parse_err(&format!("{HEAD}host_resources = {{ vcpus = 8 }}\n{phase}"));
    assert!(e.contains("host_resources"), "{e}");
    let e = parse_err(&format!("{HEAD}host_vcpus = 0\n{phase}"));
    assert!(e.contains("fleet.host_vcpus must be at least 1"), "{e}");
    let e = parse_err(&format!("{HEAD}{phase}[target]\nkind = \"url\"\n"));
    assert!(e.contains("target.compute_url"), "{e}");
    let e = parse_err(&format!(
        "{HEAD}{phase}[[fault]]\nkind = \"stop-host\"\ncell = \"cell9\"\nat_secs = 1.0\n"
    ));
    assert!(e.contains("fault[0].cell"), "{e}");
    let e = parse_err(&format!(
        "{HEAD}{phase}[[fault]]\nkind = \"stop-host\"\ncell = \"cell1\"\n"
    ));
    assert!(
        e.contains("fault[0]: give exactly one of at_secs and after_boots"),
        "{e}"
    );
    let e = parse_err(&format!("{HEAD}{phase}[[fault]]\nkind = \"stop-conductor\"\ncell = \"cell1\"\nhost = \"x\"\nat_secs = 1.0\n"));
    assert!(e.contains("fault[0].host"), "{e}");
}

/// The `[target]` knobs for a real Nova: the microversion (2.37 or later),
/// the user's and project's domains, the CA file and `insecure` (URL
/// targets), and http:// or https:// endpoints (any case), other schemes
/// refused.
#[test]
fn target_microversion_domains_and_urls_are_checked() {
    let phase = "[[phase]]\nkind = \"burst\"\nservers = 1\n";
    let url = "[target]\nkind = \"url\"\ncompute_url = \"http://10.0.0.5:8774\"\n\
               identity_url = \"http://10.0.0.5/identity\"\n";
    let s = Scenario::parse(&format!(
        "name = \"t\"\n{url}compute_microversion = \"2.37\"\n\
         user_domain_name = \"corp\"\nproject_domain_name = \"lab\"\n{phase}"
    ))
    .unwrap();
    assert_eq!(s.target.compute_microversion.as_deref(), Some("2.37"));
    assert_eq!(s.target.user_domain_name.as_deref(), Some("corp"));
    assert_eq!(s.target.project_domain_name.as_deref(), Some("lab"));
    for bad in ["2.36", "2.", "2.x", "3.1", "latest", "2.90 "] {
        let e = parse_err(&format!(
            "{HEAD}[target]\ncompute_microversion = \"{bad}\"\n{phase}"
        ));
        assert!(
            e.contains("target.compute_microversion") && e.contains("2.37 or later"),
            "{bad}: {e}"
        );
    }
    let e = parse_err(&format!(
        "{HEAD}[target]\nuser_domain_name = \"corp\"\n{phase}"
    ));
    assert!(
        e.contains("target.user_domain_name needs target.kind = \"url\""),
        "{e}"
    );
    let with_url = |k: &str, v: &str| {
        let mut urls = vec![
            ("compute_url", "http://a:1"),
            ("identity_url", "http://b:2"),
        ];
        urls.retain(|(n, _)| *n != k);
        urls.push((k, v));
        let fields: String = urls
            .iter()
            .map(|(n, u)| format!("{n} = \"{u}\"\n"))
            .collect();
        format!("name = \"t\"\n[target]\nkind = \"url\"\n{fields}{phase}")
    };
    for (k, v) in [
        ("identity_url", "https://keystone.example/identity"),
        ("compute_url", "HTTPS://nova.example:8774"),
        ("placement_url", "https://placement.example"),
    ] {
        let s = Scenario::parse(&with_url(k, v)).unwrap_or_else(|e| panic!("{k} = {v}: {e:#}"));
        assert_eq!(s.target.kind, loadtest::scenario::TargetKind::Url);
    }
    for (k, v) in [
        ("compute_url", "ftp://nova.example:8774"),
        ("identity_url", "10.0.0.5:5000"),
        ("placement_url", "placement.example"),
    ] {
        let e = parse_err(&with_url(k, v));
        assert!(
            e.contains(&format!(
                "target.{k}: \"{v}\" is not an http:// or https:// URL"
            )),
            "{k} = {v}: {e}"
        );
    }
    // The trust knobs: on a URL target only; a misspelt one is refused.
    let s = Scenario::parse(&format!(
        "name = \"t\"\n{url}ca_file = \"certs/ca.pem\"\ninsecure = true\n{phase}"
    ))
    .unwrap();
    assert_eq!(s.target.ca_file.as_deref(), Some(Path::new("certs/ca.pem")));
    assert!(s.target.insecure);
    for knob in ["ca_file = \"ca.pem\"", "insecure = true"] {
        let e = parse_err(&format!("{HEAD}[target]\n{knob}\n{phase}"));
        assert!(
            e.contains("target.ca_file / target.insecure need target.kind = \"url\""),
            "{knob}: {e}"
        );
    }
    let e = parse_err(&format!("name = \"t\"\n{url}verify = false\n{phase}"));
    assert!(e.contains("unknown field `verify`"), "{e}");
}

/// The scenario's microversion is the one every Compute API request asks
/// for: the region refuses one beyond its maximum (2.104) by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scenarios_microversion_is_sent() {
    let data = testkit::temp_dir("loadtest_microversion_data");
    let mut s = Scenario::parse(&format!(
        "{HEAD}[target]\ncompute_microversion = \"2.999\"\n[[phase]]\nkind = \"burst\"\nservers = 1\n"
    ))
    .unwrap();
    s.target.data_dir = Some(data.clone());
    let e = format!(
        "{:#}",
        runner::run(&s, &quiet()).await.expect_err("refused")
    );
    assert!(e.contains("Version 2.999 is not supported"), "{e}");
    std::fs::remove_dir_all(&data).ok();
}

/// The scenario's `[region]` table reaches region::RegionConfig, checked by
/// it: a key the region does not know is refused by name.
#[test]
fn region_table_is_passed_through() {
    let s = Scenario::parse(&format!(
        "{HEAD}[region]\nheartbeat_interval_secs = 42\n[[phase]]\nkind = \"burst\"\nservers = 1\n"
    ))
    .unwrap();
    let cfg = runner::region_config(&s, Path::new("d")).unwrap();
    assert_eq!(cfg.region.heartbeat_interval_secs, 42);
    assert_eq!((cfg.region.cells, cfg.region.hosts_per_cell), (1, 2));
    assert_eq!(cfg.region.compute_listen, "127.0.0.1:0");
    let s = Scenario::parse(&format!(
        "{HEAD}[region]\nno_such_knob = 1\n[[phase]]\nkind = \"burst\"\nservers = 1\n"
    ))
    .unwrap();
    let e = format!(
        "{:#}",
        runner::region_config(&s, Path::new("d")).unwrap_err()
    );
    assert!(e.contains("no_such_knob"), "{e}");
    let s = Scenario::parse(&format!(
        "{HEAD}[region]\ncells = 3\n[[phase]]\nkind = \"burst\"\nservers = 1\n"
    ))
    .unwrap();
    let e = format!(
        "{:#}",
        runner::region_config(&s, Path::new("d")).unwrap_err()
    );
    assert!(e.contains("fleet.cells"), "{e}");
    let s = Scenario::parse(&format!(
        "{HEAD}host_disk_gb = 40\n[region]\nhost_vcpus = 4\n[[phase]]\nkind = \"burst\"\nservers = 1\n"
    ))
    .unwrap();
    let cfg = runner::region_config(&s, Path::new("d")).unwrap();
    assert_eq!((cfg.region.host_vcpus, cfg.region.host_disk_gb), (4, 40));
    let s = Scenario::parse(&format!(
        "{HEAD}host_disk_gb = 40\n[region]\nhost_disk_gb = 4\n[[phase]]\nkind = \"burst\"\nservers = 1\n"
    ))
    .unwrap();
    let e = format!(
        "{:#}",
        runner::region_config(&s, Path::new("d")).unwrap_err()
    );
    assert!(e.contains("fleet.host_disk_gb"), "{e}");
}

/// Stopping a cell's broker or database needs cells on RabbitMQ and
/// PostgreSQL: on the embedded default (in-process buses, SQLite files)
/// the run refuses before starting anything, naming why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_and_database_faults_are_refused_clearly() {
    for (kind, want) in [
        (
            "stop-broker",
            "stop-broker needs cells on RabbitMQ ([region] transport_url)",
        ),
        (
            "stop-database",
            "stop-database needs cells on PostgreSQL ([region] database_url)",
        ),
    ] {
        let s = Scenario::parse(&format!(
            "{HEAD}[[phase]]\nkind = \"burst\"\nservers = 1\n[[fault]]\nkind = \"{kind}\"\ncell = \"cell1\"\nat_secs = 0.0\nduration_secs = 1.0\n"
        ))
        .unwrap();
        let cfg = runner::region_config(&s, Path::new("d")).unwrap();
        let e = format!("{:#}", runner::check_faults(&s, &cfg).expect_err("refused"));
        assert!(e.contains(want), "{e}");
        let e = format!(
            "{:#}",
            runner::run(&s, &quiet()).await.expect_err("refused")
        );
        assert!(e.contains(want), "{e}");
    }
    let e = parse_err(&format!(
        "{HEAD}[[phase]]\nkind = \"burst\"\nservers = 1\n[[fault]]\nkind = \"stop-database\"\ncell = \"cell1\"\nat_secs = 0.0\n"
    ));
    assert!(e.contains("fault[0].duration_secs is required"), "{e}");
    let e = parse_err(&format!(
        "{HEAD}[[phase]]\nkind = \"burst\"\nservers = 1\n[[fault]]\nkind = \"stop-host\"\ncell = \"cell1\"\nat_secs = 0.0\nduration_secs = 2.0\n"
    ));
    assert!(e.contains("fault[0].duration_secs does not apply"), "{e}");
}

/// A stop-host fault on the embedded default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_host_fault_shows_in_the_report() {
    let data = testkit::temp_dir("loadtest_fault_data");
    let mut s = crate::faults::stop_host_scenario("");
    s.target.data_dir = Some(data.clone());
    let r = runner::run(&s, &quiet()).await.expect("run");
    crate::faults::check_stop_host(&r);
    std::fs::remove_dir_all(&data).ok();
}

/// A stop-conductor fault: cell1's conductor stops as the phase starts
/// and stays stopped. The builds sent to cell1 cannot report to it and
/// stay BUILD until the phase's timeout; the report counts them in cell1
/// and puts every one under the fault; cell2's servers become ACTIVE. The
/// invariants are still read (the API writes the instance rows and the
/// placement claims, so they hold) after the phase and at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_conductor_fault_leaves_its_cell_in_build_under_the_fault() {
    let data = testkit::temp_dir("loadtest_conductor_fault_data");
    // A 200 ms spawn: a build sent before the conductor is gone still
    // needs it to report ACTIVE.
    let mut s = Scenario::parse(
        "name = \"conductor\"\n[fleet]\ncells = 2\nhosts_per_cell = 2\n\
         spawn_latency = { kind = \"fixed\", ms = 200 }\n\
         [target]\npoll_interval_ms = 50\n\
         [[phase]]\nkind = \"burst\"\nservers = 12\nconcurrency = 12\ntimeout_secs = 5\ndelete = false\n\
         [[fault]]\nkind = \"stop-conductor\"\ncell = \"cell1\"\nat_secs = 0.0\n",
    )
    .unwrap();
    s.target.data_dir = Some(data.clone());
    let r = runner::run(&s, &quiet()).await.expect("run");
    let summary = report::summary(&r);
    eprintln!("{summary}");
    assert_eq!(r.faults.len(), 1, "{summary}");
    let f = &r.faults[0];
    assert_eq!(
        (
            f.kind,
            f.cell.as_str(),
            f.target.as_str(),
            f.result.as_str()
        ),
        (
            FaultKind::StopConductor,
            "cell1",
            "cell1-conductor",
            "applied"
        ),
        "{summary}"
    );
    assert!(f.at_secs < 1.0 && f.until_secs.is_none(), "{f:?}");
    let p = &r.phases[0];
    assert_eq!(p.requested, 12, "{summary}");
    assert_eq!((p.error, p.refused.len()), (0, 0), "{summary}");
    assert_eq!(p.active + p.stuck_in_build, 12, "{summary}");
    // The scheduler spreads 12 servers over the 4 hosts of both cells.
    assert!(p.active > 0 && p.stuck_in_build > 0, "{summary}");
    // Every server of cell1 is stuck, every server of cell2 ACTIVE.
    assert_eq!(
        p.servers_per_cell.get("cell1"),
        Some(&p.stuck_in_build),
        "{summary}\n{:?}",
        p.servers_per_cell
    );
    assert_eq!(
        p.servers_per_cell.get("cell2"),
        Some(&p.active),
        "{:?}",
        p.servers_per_cell
    );
    // All of them under the stopped conductor, none under "no fault".
    let label = format!("stop-conductor cell1-conductor at {:.1}s", f.at_secs);
    assert_eq!(
        r.errors_by_fault.keys().collect::<Vec<_>>(),
        [&label],
        "{:#?}",
        r.errors_by_fault
    );
    assert_eq!(
        r.errors_by_fault[&label]["still BUILD at the phase's timeout"], p.stuck_in_build,
        "{:#?}",
        r.errors_by_fault
    );
    assert!(
        summary.contains(&format!(
            "errors [{label}] x{}: still BUILD at the phase's timeout",
            p.stuck_in_build
        )),
        "{summary}"
    );
    // The invariants: read after the phase and at the end, all holding.
    for inv in [&p.invariants, &r.invariants] {
        assert_eq!(inv.len(), 5, "{inv:#?}");
        assert!(inv.iter().all(|i| i.holds), "{inv:#?}");
    }
    assert!(r.invariants_checked, "{summary}");
    // A conductor stopped for good leaves its cell's builds in BUILD: the
    // one thing the run reports broken (the healing runs in the conductor).
    assert_eq!(
        r.broken(),
        [loadtest::runner::NO_SERVER_LEFT_IN_BUILD],
        "{summary}"
    );
    std::fs::remove_dir_all(&data).ok();
}

/// Every scenario shipped in `loadtest/scenarios/` parses and validates.
#[test]
fn shipped_scenarios_parse() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("scenarios dir") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        Scenario::load(&path).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
        n += 1;
    }
    assert!(n >= 5, "only {n} scenarios found");
}

/// A boot-and-delete scenario on PostgreSQL + RabbitMQ (the `[region]`
/// table passed through): every server ACTIVE, all deleted, the invariants
/// checked against the PostgreSQL databases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boot_and_delete_on_postgresql_and_rabbitmq() {
    let mut db_template = String::new();
    for db in ["api", "cell0", "cell1", "placement", "identity", "image"] {
        let name = format!("lt_pg_{db}");
        let Some(pg) = testkit::postgres(&name).await else {
            return;
        };
        db_template = pg.url.replace(&name, "lt_pg_{db}");
    }
    let Some(bus) = testkit::rabbitmq("lt_pg_cell1") else {
        return;
    };
    let bus_template = bus.replace("lt_pg_cell1", "lt_pg_{cell}");
    let text = format!(
        "name = \"pg\"\nseed = 3\n\
         [fleet]\ncells = 1\nhosts_per_cell = 3\n\
         [target]\nkind = \"embedded\"\npoll_interval_ms = 50\n\
         [region]\ndatabase_url = \"{db_template}\"\ntransport_url = \"{bus_template}\"\n\
         [[phase]]\nkind = \"boot-and-delete\"\nservers = 12\nconcurrency = 6\n"
    );
    let mut s = Scenario::parse(&text).expect("scenario parses");
    let data = testkit::temp_dir("loadtest_pg_data");
    s.target.data_dir = Some(data.clone());
    let r = runner::run(&s, &quiet()).await.expect("run");
    let out = testkit::temp_dir("loadtest_pg_report");
    let files = report::write(&r, &out).expect("write report");
    assert_eq!(files.len(), 1 + report::PLOTS.len());
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let p = &v["phases"][0];
    assert_eq!(p["requested"], 12, "{p:#}");
    assert_eq!(p["active"], 12, "{p:#}");
    assert_eq!(p["error"], 0, "{p:#}");
    assert_eq!(p["deletes"]["left"], 0, "{p:#}");
    // Every build phase was read from the PostgreSQL databases.
    for k in [
        "2_scheduling",
        "3_cell_create",
        "4_cell_to_host",
        "5_host_prepare",
        "6_spawn",
    ] {
        assert_eq!(p["build_phases"][k]["count"], 12, "{k}: {p:#}");
    }
    // The five invariants were read from the PostgreSQL databases, after
    // the phase and at the end, and every one holds.
    let summary = report::summary(&r);
    for inv in [&p["invariants"], &v["invariants"]] {
        let inv = inv.as_array().unwrap();
        assert_eq!(inv.len(), 5, "{p:#}");
        assert!(inv.iter().all(|i| i["holds"] == true), "{inv:#?}");
    }
    assert_eq!(v["invariants_checked"], true);
    assert!(r.broken().is_empty(), "{summary}");
    assert!(summary.contains("invariants: all hold"), "{summary}");
    assert_plots_are_svg(&out);
    let tp = std::fs::read_to_string(out.join("throughput.svg")).unwrap();
    assert!(tp.contains("<polyline") && tp.contains("ACTIVE"), "{tp}");
    assert_eq!(
        v["target"]["config"]["database_url"],
        db_template.as_str(),
        "{:#}",
        v["target"]
    );
    // The report never holds the broker's password.
    assert_eq!(
        v["target"]["config"]["transport_url"],
        bus_template.replace("guest:guest@", "guest:****@").as_str()
    );
    std::fs::remove_dir_all(&data).ok();
    std::fs::remove_dir_all(&out).ok();
}

/// The region the URL-target tests drive by URL: one cell of two fake
/// hosts spawning in 5 ms, its data in `data_dir`.
async fn url_region(data_dir: std::path::PathBuf) -> region::Region {
    use loadtest::embed::{self, RegionSpec};

    embed::start(
        &RegionSpec {
            cells: 1,
            hosts_per_cell: 2,
            fake_spawn_latency_ms: 5,
            data_dir,
        },
        None,
    )
    .await
    .expect("region")
}

/// A scenario against a region by URL checks the invariants through the
/// Compute and Placement APIs with the scenario's (administrator's)
/// credentials; an orphan allocation breaks one; a member's token cannot
/// check them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_target_checks_the_invariants_through_the_apis() {
    use loadtest::api::{Compute, Placement};
    use loadtest::tls::Tls;

    let dir = testkit::temp_dir("loadtest_url_invariants");
    let region = url_region(dir.clone()).await;
    let identity = format!("http://{}", region.identity.addr);
    let compute_url = format!("http://{}", region.compute.addr);
    std::env::set_var("LOADTEST_IT_ADMIN_PASSWORD", &region.admin.password);
    let placement_url = format!("http://{}", region.placement.addr);
    let (admin, _) = region::password_token(&identity, &region.admin)
        .await
        .unwrap();
    // The image by name and placement from the catalog, which names the
    // ports the region's services bound (it listens on port 0 here).
    let text = format!(
        r#"
name = "url-invariants"
[target]
kind = "url"
compute_url = "{compute_url}"
identity_url = "{identity}"
username = "{}"
project = "{}"
user_domain_name = "Default"
project_domain_name = "Default"
compute_microversion = "2.60"
password_env = "LOADTEST_IT_ADMIN_PASSWORD"
poll_interval_ms = 50

[[phase]]
kind = "boot-and-list"
servers = 3
concurrency = 3
list_runs = 1
"#,
        region.admin.username, region.admin.project
    );
    let s = Scenario::parse(&text).expect("scenario");
    let r = runner::run(&s, &quiet()).await.expect("run");
    assert_eq!(r.phases[0].active, 3);
    assert_eq!(r.target.config["compute_microversion"], "2.60");
    assert!(r.invariants_checked, "an administrator can check them");
    assert_eq!(r.outcome(), runner::InvariantsOutcome::Hold);
    // The domains are the scenario's: the admin is not in a domain
    // "elsewhere", so identity refuses the login.
    let elsewhere = Scenario::parse(&text.replace(
        "user_domain_name = \"Default\"",
        "user_domain_name = \"elsewhere\"",
    ))
    .unwrap();
    let e = format!(
        "{:#}",
        runner::run(&elsewhere, &quiet())
            .await
            .expect_err("refused")
    );
    assert!(
        e.contains("identity refused the credentials for user admin (domain elsewhere)")
            && e.contains("HTTP 401"),
        "{e}"
    );
    let names: Vec<&str> = r.invariants.iter().map(|i| i.name).collect();
    assert_eq!(
        names,
        [
            loadtest::inspect::NO_ALLOCATION_WITHOUT_INSTANCE,
            loadtest::inspect::NO_INSTANCE_WITHOUT_ALLOCATIONS,
            loadtest::inspect::ALLOCATIONS_PER_HOST,
            loadtest::inspect::NO_BUILD_REQUEST_LEFT,
        ]
    );
    assert!(r.broken().is_empty(), "{:#?}", r.invariants);

    // An allocation of a consumer that is no server breaks two of them.
    let http = reqwest::Client::new();
    let rps: serde_json::Value = http
        .get(format!("{placement_url}/resource_providers"))
        .header("x-auth-token", &admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rp = rps["resource_providers"][0]["uuid"].as_str().unwrap();
    let orphan = uuid::Uuid::new_v4();
    let resp = http
        .put(format!("{placement_url}/allocations/{orphan}"))
        .header("x-auth-token", &admin)
        .header("openstack-api-version", "placement 1.28")
        .json(&serde_json::json!({
            "allocations": {rp: {"resources": {"VCPU": 1}}},
            "project_id": "p", "user_id": "u", "consumer_generation": null,
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 204, "{:?}", resp.text().await);
    let compute = Compute::new(&compute_url, &admin, &Tls::default()).unwrap();
    let placement = Placement::new(&placement_url, &admin, &Tls::default()).unwrap();
    let inv = loadtest::inspect::api_invariants(&compute, &placement)
        .await
        .unwrap();
    let broken: Vec<&str> = inv.iter().filter(|i| !i.holds).map(|i| i.name).collect();
    assert_eq!(
        broken,
        [
            loadtest::inspect::NO_ALLOCATION_WITHOUT_INSTANCE,
            loadtest::inspect::ALLOCATIONS_PER_HOST,
        ],
        "{inv:#?}"
    );
    assert!(inv[0].examples[0].contains(&orphan.to_string()), "{inv:#?}");

    // A member may not list every project's servers.
    let (member, _) = region::password_token(&identity, &region.member)
        .await
        .unwrap();
    let as_member = Compute::new(&compute_url, &member, &Tls::default()).unwrap();
    let e = loadtest::inspect::api_invariants(&as_member, &placement)
        .await
        .unwrap_err();
    assert!(format!("{e:#}").contains("administrator"), "{e:#}");
    region.shutdown().await;
    std::fs::remove_dir_all(dir).ok();
}

/// A URL target behind https: a TLS-terminating proxy (a CA and server
/// certificate made here) in front of the region's identity and Compute
/// API. With the CA as `ca_file` (relative to the scenario file) the
/// servers boot and go, the invariants hold and both proxies carried the
/// run's connections; without it the login fails naming the certificate
/// and the handshake was broken off; `insecure = true` goes through
/// without it; a CA file that is missing (through `OS_CACERT`) or holds no
/// certificate is an error at start naming the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_target_over_https_trusts_the_ca_file_or_insecure() {
    use testkit::pki::{TestPki, TlsProxy};

    let dir = testkit::temp_dir("loadtest_url_https");
    let region = url_region(dir.join("region")).await;
    let pki = TestPki::new();
    std::fs::write(dir.join("ca.pem"), &pki.ca_pem).unwrap();
    std::fs::write(dir.join("empty.pem"), "no certificate here\n").unwrap();
    let identity = TlsProxy::start(region.identity.addr, pki.acceptor()).await;
    let compute = TlsProxy::start(region.compute.addr, pki.acceptor()).await;
    std::env::set_var("LOADTEST_IT_HTTPS_PASSWORD", &region.admin.password);
    std::env::remove_var("OS_CACERT");
    let scenario = |trust: &str| {
        let path = dir.join("https.toml");
        std::fs::write(
            &path,
            format!(
                r#"
name = "https"
[target]
kind = "url"
compute_url = "{}"
identity_url = "{}"
username = "{}"
project = "{}"
password_env = "LOADTEST_IT_HTTPS_PASSWORD"
poll_interval_ms = 50
{trust}

[[phase]]
kind = "boot-and-delete"
servers = 3
concurrency = 3
"#,
                compute.url(),
                identity.url(),
                region.admin.username,
                region.admin.project
            ),
        )
        .unwrap();
        Scenario::load(&path).expect("scenario")
    };
    let ran = |r: &runner::RunReport| {
        let p = &r.phases[0];
        assert_eq!((p.accepted, p.active, p.error), (3, 3, 0), "{p:#?}");
        let d = p.deletes.as_ref().expect("deletes");
        assert_eq!((d.statuses.get(&204), d.left), (Some(&3), 0), "{d:#?}");
        assert!(r.invariants_checked, "an administrator can check them");
        assert_eq!(
            r.outcome(),
            runner::InvariantsOutcome::Hold,
            "{:#?}",
            r.invariants
        );
    };

    let s = scenario("ca_file = \"ca.pem\"");
    assert_eq!(s.target.ca_file.as_deref(), Some(&*dir.join("ca.pem")));
    let r = runner::run(&s, &quiet()).await.expect("run with the CA");
    ran(&r);
    let (id_before, compute_before) = (identity.handshakes(), compute.handshakes());
    assert!(id_before > 0, "no TLS connection to identity");
    assert!(compute_before > 0, "no TLS connection to the Compute API");
    // (No handshake failure is asserted here: a poller stopped at the
    // phase's end may break off a connection it was opening.)
    let broken_before = identity.broken_off();

    // Without the CA: the system's roots do not know it.
    let e = format!(
        "{:#}",
        runner::run(&scenario(""), &quiet())
            .await
            .expect_err("an unknown CA is refused")
    );
    assert!(
        e.contains("certificate") && e.contains(&format!("connect to {}", identity.url())),
        "{e}"
    );
    assert!(e.contains("(TLS)"), "{e}");
    // The proxy counts the refused handshake once its side of it ends,
    // which may be just after the client gave up.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while identity.broken_off() == broken_before && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        identity.broken_off() > broken_before,
        "the client went on with the handshake"
    );
    assert_eq!(identity.handshakes(), id_before);
    assert_eq!(compute.handshakes(), compute_before);

    // insecure: no check, the run goes through.
    let r = runner::run(&scenario("insecure = true"), &quiet())
        .await
        .expect("run with insecure");
    ran(&r);
    assert!(identity.handshakes() > id_before);
    assert!(compute.handshakes() > compute_before);

    // A CA file that cannot be used stops the run at its start.
    let e = format!(
        "{:#}",
        runner::run(&scenario("ca_file = \"empty.pem\""), &quiet())
            .await
            .expect_err("no certificate")
    );
    assert!(e.contains("empty.pem holds no certificate"), "{e}");
    let missing = dir.join("missing.pem");
    std::env::set_var("OS_CACERT", &missing);
    let e = format!(
        "{:#}",
        runner::run(&scenario(""), &quiet())
            .await
            .expect_err("missing CA file")
    );
    std::env::remove_var("OS_CACERT");
    assert!(
        e.contains(&format!("read the CA file {}", missing.display())),
        "{e}"
    );
    region.shutdown().await;
    std::fs::remove_dir_all(dir).ok();
}

/// `loadtest run` exits non-zero when the no-leak invariants could not be
/// checked (a URL target whose user is no administrator), naming why and
/// the opt-out; with `--allow-unchecked` the same run exits 0, and its
/// report says they were not checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unchecked_invariants_fail_the_binary_unless_allowed() {
    use loadtest::embed::{self, RegionSpec};

    let dir = testkit::temp_dir("loadtest_bin_unchecked");
    let region = embed::start(
        &RegionSpec {
            cells: 1,
            hosts_per_cell: 1,
            fake_spawn_latency_ms: 0,
            data_dir: dir.join("region"),
        },
        None,
    )
    .await
    .expect("region");
    let scenario = dir.join("unchecked.toml");
    std::fs::write(
        &scenario,
        format!(
            r#"
name = "unchecked"
[target]
kind = "url"
compute_url = "http://{}"
identity_url = "http://{}"
username = "{}"
project = "{}"
password_env = "LOADTEST_IT_MEMBER_PASSWORD"
poll_interval_ms = 50

[[phase]]
kind = "boot-and-delete"
servers = 1
concurrency = 1
"#,
            region.compute.addr,
            region.identity.addr,
            region.member.username,
            region.member.project
        ),
    )
    .unwrap();
    let run = |extra: Option<&'static str>, report: std::path::PathBuf| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_loadtest"));
        cmd.arg("run")
            .arg(&scenario)
            .arg("--report-dir")
            .arg(&report)
            .arg("--quiet")
            .args(extra)
            .env("LOADTEST_IT_MEMBER_PASSWORD", &region.member.password);
        // The region answers on this runtime: wait for the child elsewhere.
        tokio::task::spawn_blocking(move || cmd.output().expect("run the loadtest binary"))
    };

    let out = run(None, dir.join("refused")).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "exit 0 with unchecked invariants: {stderr}"
    );
    assert!(
        stderr.contains("invariants not checked") && stderr.contains("--allow-unchecked"),
        "{stderr}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("refused/report.json")).unwrap())
            .unwrap();
    assert_eq!(v["invariants_outcome"], "not-checked", "{v:#}");
    assert_eq!(v["invariants_checked"], false);
    assert!(
        v["invariants_not_checked"]
            .as_str()
            .is_some_and(|w| w.contains("administrator")),
        "{:#}",
        v["invariants_not_checked"]
    );
    assert_eq!(v["phases"][0]["active"], 1, "the run itself went through");

    let out = run(Some("--allow-unchecked"), dir.join("allowed"))
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("invariants: NOT CHECKED"), "{stdout}");
    region.shutdown().await;
    std::fs::remove_dir_all(dir).ok();
}

/// `loadtest boot` attached to a running region over https: `--ca-file`
/// trusts the region's CA, the login names the user's and the project's
/// domains (a wrong one is refused by identity), and the Compute API
/// microversion asked for is `--compute-microversion` (one the region
/// does not serve is refused by it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boot_command_attaches_over_https_with_domains_and_microversion() {
    use testkit::pki::{TestPki, TlsProxy};

    let dir = testkit::temp_dir("loadtest_boot_https");
    let region = url_region(dir.join("region")).await;
    let pki = TestPki::new();
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let identity = TlsProxy::start(region.identity.addr, pki.acceptor()).await;
    let compute = TlsProxy::start(region.compute.addr, pki.acceptor()).await;
    let boot = |extra: &[&str]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_loadtest"));
        cmd.args([
            "boot",
            "--servers",
            "2",
            "--concurrency",
            "2",
            "--list-runs",
            "1",
        ])
        .args(["--delete", "--quiet", "--timeout-secs", "60"])
        .args([
            "--compute-url",
            &compute.url(),
            "--identity-url",
            &identity.url(),
        ])
        .args([
            "--username",
            &region.admin.username,
            "--project",
            &region.admin.project,
        ])
        .arg("--ca-file")
        .arg(&ca)
        .args(extra)
        .env("OS_PASSWORD", &region.admin.password);
        for k in [
            "OS_CACERT",
            "OS_USERNAME",
            "OS_PROJECT_NAME",
            "OS_USER_DOMAIN_NAME",
            "OS_PROJECT_DOMAIN_NAME",
        ] {
            cmd.env_remove(k);
        }
        // The region answers on this runtime: wait for the child elsewhere.
        tokio::task::spawn_blocking(move || cmd.output().expect("run the loadtest binary"))
    };

    let report = dir.join("boot.json");
    let out = boot(&[
        "--user-domain-name",
        "Default",
        "--project-domain-name",
        "Default",
        "--compute-microversion",
        "2.60",
        "--report",
        report.to_str().unwrap(),
    ])
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(v["report"]["boot"]["active"], 2, "{v:#}");
    assert_eq!(v["invariants_hold"], true, "{v:#}");
    assert!(identity.handshakes() > 0 && compute.handshakes() > 0);

    let out = boot(&["--user-domain-name", "NoSuchDomain"]).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("identity refused the credentials") && stderr.contains("NoSuchDomain"),
        "{stderr}"
    );

    let out = boot(&["--compute-microversion", "2.999"]).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("2.999"), "{stderr}");
    let out = boot(&["--compute-microversion", "2.1"]).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--compute-microversion: \"2.1\" is not a compute microversion 2.37"),
        "{stderr}"
    );
    region.shutdown().await;
    std::fs::remove_dir_all(dir).ok();
}

/// `loadtest machine` prints the figures a run records before its load.
#[test]
fn the_machine_command_prints_the_calibration_and_the_cache_probe() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .arg("machine")
        .output()
        .expect("run loadtest machine");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let figure = |after: &str, unit: &str| -> f64 {
        let rest = text
            .split(after)
            .nth(1)
            .unwrap_or_else(|| panic!("no {after:?} in {text}"));
        rest.trim_start()
            .split(unit)
            .next()
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no number after {after:?} in {text}"))
    };
    assert!(figure("calibration", " ms") > 0.0, "{text}");
    assert!(figure("cache probe", " ns") > 0.0, "{text}");
}
