//! The fleet's shape on the embedded default: zones and aggregates
//! created through the Compute API, boots requested into a zone.

use std::collections::BTreeMap;

use loadtest::report;
use loadtest::runner::{self, RunOptions};
use loadtest::scenario::Scenario;

fn quiet() -> RunOptions {
    RunOptions { quiet: true }
}

/// 2 cells × 4 hosts over 2 zones and 3 further aggregates: the zones and
/// aggregates read back through `os-aggregates` are the planned spread
/// (host j of each cell in zone j mod 2), every boot requested into a
/// zone lands on a host of that zone, and the invariants hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boots_into_a_zone_land_in_that_zone() {
    let data = testkit::temp_dir("loadtest_zones_data");
    let mut s = Scenario::parse(
        "name = \"zones\"\nseed = 5\n\
         [fleet]\ncells = 2\nhosts_per_cell = 4\navailability_zones = 2\naggregates = 3\n\
         [target]\npoll_interval_ms = 50\n\
         [[phase]]\nkind = \"burst\"\nservers = 16\nconcurrency = 8\n\
         availability_zones = { az1 = 1, az2 = 1 }\n\
         [[phase]]\nkind = \"boot-and-delete\"\nservers = 4\nconcurrency = 4\n\
         availability_zones = { az2 = 1 }\n",
    )
    .expect("scenario parses");
    s.target.data_dir = Some(data.clone());
    let r = runner::run(&s, &quiet()).await.expect("run");

    let l = &r.target.layout;
    assert_eq!(
        l.hosts_per_zone,
        BTreeMap::from([("az1".to_owned(), 4), ("az2".to_owned(), 4)])
    );
    assert_eq!(
        l.hosts_per_aggregate,
        BTreeMap::from([
            ("lt-group1".to_owned(), 3),
            ("lt-group2".to_owned(), 3),
            ("lt-group3".to_owned(), 2)
        ])
    );
    // Every host's zone as the Compute API shows it: odd hosts in az1.
    assert_eq!(l.zone_of.len(), 8, "{:?}", l.zone_of);
    for (host, zone) in &l.zone_of {
        let j: u32 = host.rsplit("host").next().unwrap().parse().unwrap();
        let want = if j % 2 == 1 { "az1" } else { "az2" };
        assert_eq!(zone, want, "{host}");
    }

    let burst = &r.phases[0];
    assert_eq!(burst.active, 16, "{burst:#?}");
    assert_eq!(burst.requested_zones.values().sum::<usize>(), 16);
    assert!(
        burst.requested_zones.len() == 2,
        "{:?}",
        burst.requested_zones
    );
    // The burst's servers are the only live ones at its peak: each zone
    // holds exactly those requested into it.
    assert_eq!(burst.servers_per_zone, burst.requested_zones, "{burst:#?}");
    assert_eq!(burst.outside_requested_zone, 0, "{burst:#?}");
    let only_az2 = &r.phases[1];
    assert_eq!(only_az2.active, 4, "{only_az2:#?}");
    assert_eq!(only_az2.outside_requested_zone, 0, "{only_az2:#?}");
    assert_eq!(
        only_az2.requested_zones,
        BTreeMap::from([("az2".to_owned(), 4)])
    );
    assert!(r.broken().is_empty(), "{:?}", r.broken());
    assert!(r.invariants.iter().all(|i| i.holds), "{:#?}", r.invariants);
    let summary = report::summary(&r);
    assert!(
        summary.contains("hosts per zone: az1 4, az2 4"),
        "{summary}"
    );
    assert!(
        summary.contains("outside their requested zone: 0"),
        "{summary}"
    );
    std::fs::remove_dir_all(&data).ok();
}

/// `fleet.host_vcpus` / `host_memory_mb` / `host_disk_gb` reach every fake
/// host: placement's inventory of each provider has those totals, and a
/// burst larger than the memory allows fills the fleet exactly (2 hosts ×
/// 1024 MB × 1.5 = 6 m1.tiny of 512 MB), the rest refused by the
/// scheduler, with the invariants holding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_resources_reach_placement_and_bound_the_fleet() {
    let text = "name = \"small-hosts\"\n\
         [fleet]\ncells = 1\nhosts_per_cell = 2\nhost_vcpus = 2\nhost_memory_mb = 1024\nhost_disk_gb = 20\n\
         [target]\npoll_interval_ms = 50\n\
         [[phase]]\nkind = \"burst\"\nservers = 8\nconcurrency = 1\ntimeout_secs = 60\n";
    let mut s = Scenario::parse(text).expect("scenario parses");

    // The inventory, read from placement while the region runs.
    let data = testkit::temp_dir("loadtest_host_resources_region");
    let cfg = runner::region_config(&s, &data).expect("region config");
    assert_eq!(
        (
            cfg.region.host_vcpus,
            cfg.region.host_memory_mb,
            cfg.region.host_disk_gb
        ),
        (2, 1024, 20)
    );
    let region = region::Region::start(&cfg, None).await.expect("region");
    let identity = format!("http://{}", region.identity.addr);
    let (token, _) = region::password_token(&identity, &region.admin)
        .await
        .expect("token");
    let placement = format!("http://{}", region.placement.addr);
    let http = reqwest::Client::new();
    let get = |path: String| {
        let req = http
            .get(format!("{placement}{path}"))
            .header("x-auth-token", &token);
        async move {
            let resp = req.send().await.expect("placement");
            assert_eq!(resp.status().as_u16(), 200, "{path}");
            resp.json::<serde_json::Value>().await.expect("json")
        }
    };
    let rps = get("/resource_providers".to_owned()).await;
    let rps = rps["resource_providers"].as_array().expect("providers");
    assert_eq!(rps.len(), 2, "{rps:#?}");
    for rp in rps {
        let uuid = rp["uuid"].as_str().unwrap();
        let inv = get(format!("/resource_providers/{uuid}/inventories")).await;
        let inv = &inv["inventories"];
        for (rc, total) in [("VCPU", 2), ("MEMORY_MB", 1024), ("DISK_GB", 20)] {
            assert_eq!(inv[rc]["total"], total, "{} {rc}: {inv:#}", rp["name"]);
            assert_eq!(inv[rc]["max_unit"], total, "{} {rc}", rp["name"]);
        }
    }
    region.shutdown().await;
    std::fs::remove_dir_all(&data).ok();

    // The fleet holds exactly what its memory allows.
    let data = testkit::temp_dir("loadtest_host_resources_data");
    s.target.data_dir = Some(data.clone());
    let r = runner::run(&s, &quiet()).await.expect("run");
    let p = &r.phases[0];
    assert_eq!(p.requested, 8, "{p:#?}");
    assert_eq!(p.active, 6, "{p:#?}");
    assert_eq!(p.error, 2, "{p:#?}");
    assert_eq!(p.servers_per_host_histogram, vec![0, 0, 0, 2], "{p:#?}");
    assert_eq!(r.target.config["host_memory_mb"], 1024);
    assert!(r.broken().is_empty(), "{:?}", r.broken());
    std::fs::remove_dir_all(&data).ok();
}

/// 2 cells × 4 hosts; half the creates name a host of the fleet (2.74's
/// `host`, sent by the region's administrator): each of those lands on the
/// host it named, the rest anywhere, and the run's invariants hold. A share
/// outside 0–1, or on a URL target, is refused at parse time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_naming_a_host_land_on_it() {
    let data = testkit::temp_dir("loadtest_hosts_data");
    let mut s = Scenario::parse(
        "name = \"hosts\"\nseed = 7\n\
         [fleet]\ncells = 2\nhosts_per_cell = 4\n\
         [target]\npoll_interval_ms = 50\n\
         [[phase]]\nkind = \"burst\"\nservers = 24\nconcurrency = 8\nrequested_hosts = 0.5\n",
    )
    .expect("scenario parses");
    s.target.data_dir = Some(data.clone());
    let r = runner::run(&s, &quiet()).await.expect("run");
    let p = &r.phases[0];
    assert_eq!(p.active, 24, "{p:#?}");
    assert!(
        p.requested_hosts > 0 && p.requested_hosts < 24,
        "{}",
        p.requested_hosts
    );
    assert_eq!(p.outside_requested_host, 0, "{p:#?}");
    assert!(r.broken().is_empty(), "{:?}", r.broken());
    let summary = report::summary(&r);
    assert!(
        summary.contains(&format!(
            "creates naming a host: {}; on another host: 0",
            p.requested_hosts
        )),
        "{summary}"
    );
    for (bad, want) in [
        ("requested_hosts = 1.5", "between 0 and 1"),
        (
            "requested_hosts = 0.5\n[target]\nkind = \"url\"\ncompute_url = \"http://127.0.0.1:1\"\nidentity_url = \"http://127.0.0.1:2\"",
            "needs target.kind = \"embedded\"",
        ),
    ] {
        let text = format!("name = \"x\"\n[[phase]]\nkind = \"burst\"\nservers = 1\n{bad}\n");
        let err = format!("{:#}", Scenario::parse(&text).unwrap_err());
        assert!(err.contains(want), "{bad}: {err}");
    }
    std::fs::remove_dir_all(&data).ok();
}
