//! The runner's unit tests.

use super::*;

fn rec(outcome: Outcome, t: f64) -> ServerRec {
    ServerRec {
        id: None,
        tenant: 0,
        flavor: String::new(),
        zone: None,
        host: None,
        cell: None,
        node: None,
        t_post: t,
        accept: None,
        accepted_wall: None,
        outcome,
        t_done: Some(t),
        tta: None,
    }
}

fn phase_report(name: &str) -> PhaseReport {
    PhaseReport {
        name: name.to_owned(),
        kind: PhaseKind::ManyTenants,
        concurrency: 1,
        tenants: 2,
        started_secs: 0.0,
        seconds: 1.0,
        requested: 2,
        accepted: 2,
        refused: BTreeMap::new(),
        active: 2,
        error: 0,
        stuck_in_build: 0,
        flavors: BTreeMap::new(),
        requested_zones: BTreeMap::new(),
        accept_latency: summarize(&mut []),
        time_to_active: summarize(&mut []),
        build_phases: BTreeMap::new(),
        accepts_per_second: 0.0,
        boots_per_second: 0.0,
        skipped_at_cap: 0,
        replaced: 0,
        list: None,
        list_page_size: None,
        isolation: None,
        deletes: None,
        servers_per_cell: BTreeMap::new(),
        servers_per_host_histogram: Vec::new(),
        servers_per_zone: BTreeMap::new(),
        outside_requested_zone: 0,
        outside_requested_zone_examples: Vec::new(),
        requested_hosts: 0,
        outside_requested_host: 0,
        outside_requested_host_examples: Vec::new(),
        invariants: Vec::new(),
    }
}

fn run_report(phases: Vec<PhaseReport>, invariants: Vec<Invariant>) -> RunReport {
    let spec = Scenario::parse(
        "name = \"t\"\n[[phase]]\nkind = \"many-tenants\"\nservers = 2\ntenants = 2\n",
    )
    .unwrap();
    RunReport {
        scenario: "t".into(),
        spec,
        started_at: Utc::now(),
        machine: serde_json::Value::Null,
        target: TargetReport {
            embedded: true,
            cells: 1,
            hypervisors: 1,
            start_seconds: 0.0,
            config: serde_json::Value::Null,
            failing_hosts: Vec::new(),
            host_spawn_latency_ms: summarize(&mut []),
            layout: crate::fleet::Layout::default(),
        },
        memory: MemoryReport::default(),
        phases,
        throughput: Throughput::default(),
        faults: Vec::new(),
        errors_by_fault: BTreeMap::new(),
        injected_spawn_failures: None,
        invariants,
        invariants_checked: true,
        invariants_not_checked: None,
        invariants_outcome: InvariantsOutcome::Hold,
        seconds: 1.0,
        liveness: None,
    }
}

fn holding(name: &'static str, holds: bool) -> Invariant {
    Invariant {
        name,
        holds,
        violations: usize::from(!holds),
        examples: Vec::new(),
    }
}

/// A broken invariant, a many-tenants isolation violation and
/// invariants that could not be checked each fail the run (the
/// binary's exit status); only the last can be accepted, explicitly.
#[test]
fn broken_isolation_and_unchecked_invariants_fail_the_run() {
    let ok = run_report(
        vec![phase_report("p")],
        vec![holding(crate::inspect::NO_BUILD_REQUEST_LEFT, true)],
    );
    assert_eq!(ok.outcome(), InvariantsOutcome::Hold);
    assert_eq!(ok.failure(false), None);

    let broken = run_report(
        vec![phase_report("p")],
        vec![holding(crate::inspect::NO_BUILD_REQUEST_LEFT, false)],
    );
    assert_eq!(broken.outcome(), InvariantsOutcome::Broken);
    let why = broken.failure(true).expect("a broken invariant fails");
    assert!(why.contains(crate::inspect::NO_BUILD_REQUEST_LEFT), "{why}");

    let mut leaky = phase_report("tenants");
    leaky.isolation = Some(Isolation {
        tenants: 2,
        holds: false,
        violations: vec!["t1: lists 1 servers of other projects".into()],
    });
    let isolation = run_report(vec![leaky], Vec::new());
    assert_eq!(isolation.broken(), [TENANT_ISOLATION]);
    assert_eq!(isolation.outcome(), InvariantsOutcome::Broken);
    let why = isolation.failure(true).expect("isolation broken fails");
    assert!(why.contains(TENANT_ISOLATION), "{why}");
    assert!(report_summary_says(
        &isolation,
        "invariants: BROKEN: each project"
    ));

    let mut unchecked = run_report(vec![phase_report("p")], Vec::new());
    unchecked.invariants_checked = false;
    unchecked.invariants_not_checked = Some("not an administrator".into());
    assert_eq!(unchecked.outcome(), InvariantsOutcome::NotChecked);
    let why = unchecked
        .failure(false)
        .expect("unchecked fails by default");
    assert!(
        why.contains("not an administrator") && why.contains("--allow-unchecked"),
        "{why}"
    );
    assert_eq!(unchecked.failure(true), None);
    assert!(report_summary_says(
        &unchecked,
        "invariants: NOT CHECKED: not an administrator"
    ));
    assert_eq!(
        serde_json::to_value(InvariantsOutcome::NotChecked).unwrap(),
        "not-checked"
    );
}

/// A server left in BUILD, and a live host shown down, each break the run
/// (issue 31: neither is an acceptable outcome any more).
#[test]
fn a_stuck_build_or_a_live_host_shown_down_fails_the_run() {
    let mut stuck = phase_report("p");
    stuck.active = 1;
    stuck.stuck_in_build = 1;
    let r = run_report(vec![stuck], Vec::new());
    assert_eq!(r.broken(), [NO_SERVER_LEFT_IN_BUILD]);
    assert_eq!(r.outcome(), InvariantsOutcome::Broken);

    let mut r = run_report(vec![phase_report("p")], Vec::new());
    r.liveness = Some(LivenessSamples {
        samples: 10,
        false_down: 0,
        false_down_hosts: Vec::new(),
        down_at_start: vec!["cell2-host01".into()],
    });
    assert!(r.broken().is_empty());
    assert!(report_summary_says(&r, "live hosts shown down: 0"));
    assert!(report_summary_says(
        &r,
        "down before the run (not counted): cell2-host01"
    ));
    r.liveness = Some(LivenessSamples {
        samples: 10,
        false_down: 2,
        false_down_hosts: vec!["cell1-host03".into()],
        down_at_start: Vec::new(),
    });
    assert_eq!(r.broken(), [NO_LIVE_HOST_SHOWN_DOWN]);
    assert!(report_summary_says(
        &r,
        "live hosts shown down: 2 (cell1-host03)"
    ));
}

fn report_summary_says(r: &RunReport, what: &str) -> bool {
    let s = crate::report::summary(r);
    s.contains(what) || panic!("{what:?} not in {s}")
}

/// Each build phase runs from one recorded timestamp to the next:
/// scheduling ends when the instance is written into its cell, cell
/// create when its mapping names the cell.
#[test]
fn time_to_active_splits_at_the_recorded_timestamps() {
    let posted = Utc::now();
    let at = |ms: i64| Some(posted + chrono::Duration::milliseconds(ms));
    let mut r = rec(Outcome::Active, 0.0);
    r.id = Some("i1".into());
    r.accept = Some(Duration::from_millis(30));
    r.accepted_wall = at(30);
    r.tta = Some(Duration::from_millis(1000));
    let times = HashMap::from([(
        "i1".to_owned(),
        crate::inspect::BuildTimes {
            scheduled: at(100),
            mapped: at(140),
            build_start: at(300),
            spawn_start: at(450),
            spawn_finish: at(850),
        },
    )]);
    let split = split_phases(&[r], &times);
    let got: Vec<(&str, f64)> = split
        .iter()
        .map(|(k, s)| (k.as_str(), s.p50_ms.round()))
        .collect();
    assert_eq!(
        got,
        [
            ("1_api_accept", 30.0),
            ("2_scheduling", 100.0),
            ("3_cell_create", 40.0),
            ("4_cell_to_host", 160.0),
            ("5_host_prepare", 150.0),
            ("6_spawn", 400.0),
            ("7_report_lag", 150.0),
        ]
    );
}

#[test]
fn errors_group_by_cause_with_uuids_masked() {
    let f = FaultRecord {
        kind: FaultKind::StopHost,
        cell: "cell1".into(),
        target: "cell1-host01".into(),
        at_secs: 2.0,
        active_before: 3,
        result: "applied".into(),
        until_secs: None,
        restore_result: None,
        recovered_after_secs: None,
        noticed_after_secs: None,
        builds_recovered_after_secs: None,
    };
    let recs = vec![
        rec(Outcome::Error("Build of instance 0a55f66d-6df0-4ba2-9f24-3d46330bec51 failed on host cell1-host08: injected spawn failure (scenario fleet.failing_hosts)".into()), 1.0),
        rec(Outcome::Error("Build of instance 1c4faea9-19a4-4065-863f-218d30a1cffa failed on host cell1-host08: injected spawn failure (scenario fleet.failing_hosts)".into()), 3.0),
        rec(Outcome::Error("lost on cell1-host01: gone".into()), 1.0),
        rec(Outcome::Error("lost on cell1-host010: gone".into()), 1.0),
        rec(Outcome::Stuck, 5.0),
        rec(Outcome::Refused(409, "quota".into()), 1.0),
        rec(Outcome::Active, 1.0),
    ];
    let g = errors_by_fault(&recs, &[f]);
    let hosts = &g["fleet.failing_hosts"];
    assert_eq!(hosts.len(), 1, "{g:#?}");
    assert_eq!(hosts.values().next(), Some(&2));
    assert!(hosts
        .keys()
        .next()
        .unwrap()
        .contains("instance <uuid> failed"));
    let fault = &g["stop-host cell1-host01 at 2.0s"];
    assert_eq!(fault["ERROR: lost on cell1-host01: gone"], 1);
    assert_eq!(fault["still BUILD at the phase's timeout"], 1);
    assert_eq!(g["no fault"]["ERROR: lost on cell1-host010: gone"], 1);
    assert_eq!(g["no fault"]["HTTP 409: quota"], 1);
}

#[test]
fn a_fault_owns_only_servers_of_its_cell_and_a_stopped_host_only_its_own() {
    let fault = |kind, cell: &str, target: &str, at| FaultRecord {
        kind,
        cell: cell.into(),
        target: target.into(),
        at_secs: at,
        active_before: 0,
        result: "applied".into(),
        until_secs: None,
        restore_result: None,
        recovered_after_secs: None,
        noticed_after_secs: None,
        builds_recovered_after_secs: None,
    };
    // cell1's conductor stops first, then a host of cell2.
    let faults = [
        fault(FaultKind::StopConductor, "cell1", "cell1-conductor", 1.0),
        fault(FaultKind::StopHost, "cell2", "cell2-host03", 2.0),
    ];
    let stuck = |cell: Option<&str>, node: Option<&str>| {
        let mut r = rec(Outcome::Stuck, 5.0);
        r.cell = cell.map(str::to_owned);
        r.node = node.map(str::to_owned);
        r
    };
    let recs = vec![
        stuck(Some("cell1"), Some("cell1-host01")),
        stuck(Some("cell2"), Some("cell2-host03")),
        // In cell2 on a host that kept running: not the stopped
        // host's, and not cell1's conductor's either.
        stuck(Some("cell2"), Some("cell2-host04")),
        // Where it was is unknown, or it has no host (cell0): the
        // last fault in force.
        stuck(None, None),
        stuck(Some("cell0"), None),
        rec(
            Outcome::Error(format!("Build of instance x: {SPAWN_FAILURE_RATE_MESSAGE}")),
            5.0,
        ),
    ];
    let g = errors_by_fault(&recs, &faults);
    let stuck_msg = "still BUILD at the phase's timeout";
    assert_eq!(
        g["stop-conductor cell1-conductor at 1.0s"][stuck_msg], 1,
        "{g:#?}"
    );
    assert_eq!(g["stop-host cell2-host03 at 2.0s"][stuck_msg], 3, "{g:#?}");
    assert_eq!(g["no fault"][stuck_msg], 1, "{g:#?}");
    assert_eq!(g["fleet.spawn_failure_rate"].values().sum::<usize>(), 1);
}

#[test]
fn a_restored_outage_owns_what_was_in_flight_until_recovery() {
    let f = FaultRecord {
        kind: FaultKind::StopDatabase,
        cell: "cell1".into(),
        target: "cell1-database".into(),
        at_secs: 2.0,
        active_before: 3,
        result: "applied".into(),
        until_secs: Some(5.0),
        restore_result: Some("restored".into()),
        recovered_after_secs: None,
        noticed_after_secs: None,
        builds_recovered_after_secs: None,
    };
    let mut sent_before = rec(Outcome::Error("db".into()), 1.0);
    sent_before.t_done = Some(3.0);
    let mut recs = vec![
        rec(Outcome::Error("early".into()), 1.0),
        sent_before,
        rec(Outcome::Error("during".into()), 4.0),
        rec(Outcome::Error("recovering".into()), 6.0),
        rec(Outcome::Error("later".into()), 9.0),
    ];
    recs[0].t_done = Some(1.5);
    let mut ok = rec(Outcome::Active, 7.0);
    ok.cell = Some("cell1".into());
    ok.t_done = Some(8.0);
    let mut other_cell = rec(Outcome::Active, 5.5);
    other_cell.cell = Some("cell2".into());
    recs.push(ok);
    recs.push(other_cell);
    let mut f = f;
    // Recovered: the first cell1 server sent after 5.0 s, ACTIVE at 8.0 s.
    f.recovered_after_secs = recovered_after(&f, &recs);
    assert_eq!(f.recovered_after_secs, Some(3.0));
    let g = errors_by_fault(&recs, std::slice::from_ref(&f));
    let under = &g["stop-database cell1-database at 2.0s until 5.0s"];
    assert_eq!(under.len(), 3, "{g:#?}");
    assert!(under.contains_key("ERROR: db") && under.contains_key("ERROR: recovering"));
    assert_eq!(g["no fault"].len(), 2, "{g:#?}");
    assert!(
        g["no fault"].contains_key("ERROR: early") && g["no fault"].contains_key("ERROR: later")
    );
}
