//! The boot scenario on a small embedded region: every server ACTIVE, the
//! report's counts, and nothing left after the deletes.

use std::time::Duration;

use loadtest::api::{self, Compute, Placement};
use loadtest::boot::{self, BootSpec, Target};
use loadtest::embed::{self, RegionSpec};
use loadtest::tls::Tls;

// Guards the fix of a real bug: the conductor's read-then-write
// transactions on SQLite used a deferred BEGIN and got "database is locked"
// whenever the API layer wrote the cell database in between, leaving
// servers in BUILD for ever. They now begin with `BEGIN IMMEDIATE`
// (`migrations::BeginWrite`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boot_ten_servers_then_delete_leaves_nothing() {
    let dir = testkit::temp_dir("loadtest_boot_small");
    let region = embed::start(
        &RegionSpec {
            cells: 1,
            hosts_per_cell: 3,
            fake_spawn_latency_ms: 20,
            data_dir: dir.clone(),
        },
        None,
    )
    .await
    .expect("region");
    let identity = format!("http://{}", region.identity.addr);
    let (token, _) = region::password_token(&identity, &region.member)
        .await
        .expect("member token");
    let (admin, _) = region::password_token(&identity, &region.admin)
        .await
        .expect("admin token");
    let tls = Tls::default();
    let compute = Compute::new(&format!("http://{}", region.compute.addr), &token, &tls).unwrap();
    let image = api::image_id_by_name(
        &tls,
        &region.image.url(),
        &token,
        api_super::image::CIRROS_NAME,
    )
    .await
    .expect("image");
    let flavor = compute.flavor_id("m1.tiny").await.expect("flavor");
    let target = Target {
        compute,
        placement: Some(
            Placement::new(&format!("http://{}", region.placement.addr), &admin, &tls).unwrap(),
        ),
    };
    let spec = BootSpec {
        servers: 10,
        concurrency: 4,
        flavor,
        image,
        name_prefix: "it-boot".to_owned(),
        poll_interval: Duration::from_millis(50),
        active_timeout: Duration::from_secs(60),
        list_runs: 3,
        delete: true,
        progress: false,
    };
    let report = boot::run(&target, &spec).await.expect("scenario");
    let b = &report.boot;
    assert_eq!(b.requested, 10);
    assert_eq!(b.accepted, 10, "{report:#?}");
    assert!(b.refused.is_empty(), "{report:#?}");
    assert_eq!(b.active, 10, "{report:#?}");
    assert_eq!(
        (b.error, b.stuck_in_build, b.other),
        (0, 0, 0),
        "{report:#?}"
    );
    assert_eq!(b.accept_latency.count, 10);
    assert_eq!(b.time_to_active.count, 10);
    // A fake spawn takes 20 ms; ACTIVE cannot come sooner.
    assert!(b.time_to_active.p50_ms >= 20.0, "{report:#?}");
    assert!(b.boots_per_second > 0.0);

    let list = report.list.as_ref().expect("list timings");
    assert_eq!(list.servers_total, 10);
    assert_eq!(list.page_size, 10);
    assert_eq!(list.latency.count, 3);

    let d = report.delete.as_ref().expect("delete phase");
    assert_eq!(d.statuses.get(&204), Some(&10), "{report:#?}");
    assert_eq!(d.servers_left, 0, "{report:#?}");
    let p = d.placement.as_ref().expect("placement check");
    assert_eq!(p.providers, 3);
    assert_eq!(p.usage_peak.get("VCPU"), Some(&10), "{report:#?}");
    assert_eq!(p.usage_peak.get("MEMORY_MB"), Some(&5120), "{report:#?}");
    assert!(p.released, "{report:#?}");
    assert!(p.usage_after.values().all(|v| *v == 0), "{report:#?}");
    assert_eq!(p.leaked, 0);
    assert!(report.invariants_hold());

    // The Compute API agrees: nothing of the project is left.
    let left = target.compute.list_all(true, "").await.expect("list");
    assert!(left.is_empty(), "{left:?}");
    region.shutdown().await;
    std::fs::remove_dir_all(&dir).ok();
}
