//! Inventory reporting against the real placement API (in process, SQLite).

use std::sync::Arc;
use std::time::Duration;

use compute::driver::fake::FakeHypervisor;
use compute::placement::HttpPlacement;
use compute::{HostConfig, HostResources};
use fabric::bus::{InprocTransport, Transport};
use placement::config::DatabaseConfig;
use placement::PlacementConfig;

use crate::stub::stub_conductor;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_reports_provider_and_inventory_to_placement() {
    let db = testkit::sqlite("compute_placement_e2e");
    let running = placement::serve(
        &PlacementConfig {
            listen: "127.0.0.1:0".into(),
            database: DatabaseConfig {
                connection: db.url.clone(),
                max_connections: 1,
            },
            ..Default::default()
        },
        None,
    )
    .await
    .unwrap();
    let base = format!("http://{}", running.addr);
    let bus: Arc<dyn Transport> = Arc::new(InprocTransport::new());
    stub_conductor(bus.clone()).await;
    let mut cfg = HostConfig::new("e2e-host");
    cfg.node = "e2e-host.example".into();
    cfg.resources = HostResources {
        vcpus: 8,
        memory_mb: 16384,
        disk_gb: 200,
        cpu_allocation_ratio: 4.0,
        ram_allocation_ratio: 1.5,
        disk_allocation_ratio: 1.0,
    };
    let hv = FakeHypervisor::automatic(Duration::ZERO);
    let placement = Arc::new(HttpPlacement::new(&base, "admin").unwrap());
    let h = compute::start_host(cfg, bus.clone(), hv.driver("e2e-host"), placement.clone());
    let uuid = tokio::time::timeout(Duration::from_secs(20), h.ready())
        .await
        .unwrap()
        .unwrap();

    let http = reqwest::Client::new();
    let get = |path: String| {
        http.get(format!("{base}{path}"))
            .header("X-Auth-Token", "admin")
            .header("OpenStack-API-Version", "placement 1.20")
            .send()
    };
    let rp: serde_json::Value = get(format!("/resource_providers/{uuid}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(rp["name"], "e2e-host.example");
    assert_eq!(rp["uuid"], uuid.to_string());
    let inv: serde_json::Value = get(format!("/resource_providers/{uuid}/inventories"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let inv = &inv["inventories"];
    assert_eq!(inv["VCPU"]["total"], 8);
    assert_eq!(inv["VCPU"]["allocation_ratio"], 4.0);
    assert_eq!(inv["MEMORY_MB"]["total"], 16384);
    assert_eq!(inv["MEMORY_MB"]["allocation_ratio"], 1.5);
    assert_eq!(inv["DISK_GB"]["total"], 200);

    // A restart reports again without error (provider exists; generation moves).
    h.shutdown().await;
    let mut cfg = HostConfig::new("e2e-host");
    cfg.node = "e2e-host.example".into();
    let h = compute::start_host(cfg, bus.clone(), hv.driver("e2e-host"), placement);
    h.ready().await.unwrap();
    h.shutdown().await;
    running.task.abort();
}
