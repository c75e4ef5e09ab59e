//! Small loadtest scenarios with their invariants (one test binary).

mod boot;
mod faults;
mod fleet;
mod kill_host;
mod scenario;

use std::time::Duration;

use loadtest::placement_load::{self, FleetSpec, Target};

/// Seeds a small fleet on an embedded placement, claims for a second with
/// 8 claimers, and checks that placement's usage equals the claims counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_claims_match_usage() {
    let db = testkit::sqlite("loadtest_placement_claims");
    let cfg = placement::PlacementConfig {
        listen: "127.0.0.1:0".to_owned(),
        database: placement::config::DatabaseConfig {
            connection: db.url.clone(),
            max_connections: 1,
        },
        ..Default::default()
    };
    let running = placement::serve(&cfg, None).await.expect("placement");
    let t = Target::new(
        &format!("http://{}", running.addr),
        "admin",
        &loadtest::tls::Tls::default(),
    )
    .unwrap();
    let spec = FleetSpec {
        providers: 20,
        trait_every: 10,
        aggregate_size: 5,
    };
    let fleet = placement_load::seed(&t, &spec, 4).await.expect("seed");
    assert_eq!(fleet.providers.len(), 20);
    assert_eq!(fleet.aggregates.len(), 4);
    let report = placement_load::claims(&t, &fleet, 8, Duration::from_secs(1))
        .await
        .expect("claims");
    assert!(report.claims > 0, "{report:?}");
    assert_eq!(
        report.conflicts, 0,
        "no provider is near capacity: {report:?}"
    );
    let used = placement_load::vcpu_used(&t, &fleet).await.expect("usages");
    assert_eq!(used, report.claims);
}
