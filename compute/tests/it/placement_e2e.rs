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

/// The real placement API on SQLite at `db_url`, its base URL, and an
/// in-process bus with the stub conductor on it.
async fn placement_and_stub(db_url: &str) -> (placement::Running, String, Arc<dyn Transport>) {
    let running = placement::serve(
        &PlacementConfig {
            listen: "127.0.0.1:0".into(),
            database: DatabaseConfig {
                connection: db_url.to_owned(),
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
    (running, base, bus)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_reports_provider_and_inventory_to_placement() {
    let db = testkit::sqlite("compute_placement_e2e");
    let (running, base, bus) = placement_and_stub(&db.url).await;
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

/// A libvirt host (libvirt's test driver) reports the inventory it reads
/// from the host and its traits; an operator's trait stays, and a CPU
/// trait the host lacks is taken away at the next report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_libvirt_host_reports_its_own_inventory_and_traits() {
    let db = testkit::sqlite("compute_placement_e2e_libvirt");
    let (running, base, bus) = placement_and_stub(&db.url).await;
    let dir = tempfile::tempdir().unwrap();
    let driver = || -> Arc<dyn compute::driver::Driver> {
        let cfg = compute::driver::libvirt::config::LibvirtSection {
            connection_uri: "test:///default".into(),
            virt_type: "qemu".into(),
            instances_path: dir.path().to_owned(),
            ..Default::default()
        };
        Arc::new(
            compute::driver::libvirt::LibvirtDriver::connect(
                cfg,
                Arc::new(crate::libvirt::MemImages::default()),
            )
            .unwrap(),
        )
    };
    let placement = Arc::new(HttpPlacement::new(&base, "admin").unwrap());
    let start = || {
        compute::start_host(
            HostConfig::new("lv-host"),
            bus.clone(),
            driver(),
            placement.clone(),
        )
    };
    let h = start();
    let uuid = tokio::time::timeout(Duration::from_secs(20), h.ready())
        .await
        .unwrap()
        .unwrap();
    let http = reqwest::Client::new();
    let call = |method: reqwest::Method, path: String, body: Option<serde_json::Value>| {
        let mut r = http
            .request(method, format!("{base}{path}"))
            .header("X-Auth-Token", "admin")
            .header("OpenStack-API-Version", "placement 1.20");
        if let Some(b) = body {
            r = r.json(&b);
        }
        async move {
            r.send()
                .await
                .unwrap()
                .json::<serde_json::Value>()
                .await
                .unwrap()
        }
    };
    let inv = call(
        reqwest::Method::GET,
        format!("/resource_providers/{uuid}/inventories"),
        None,
    )
    .await;
    // libvirt's test driver: 16 CPUs and 3 GiB, less the 512 MB reserve.
    assert_eq!(inv["inventories"]["VCPU"]["total"], 16, "{inv}");
    assert_eq!(
        inv["inventories"]["MEMORY_MB"]["total"],
        3072 - 512,
        "{inv}"
    );
    let traits = |v: &serde_json::Value| -> Vec<String> {
        v["traits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap().to_owned())
            .collect()
    };
    let t = call(
        reqwest::Method::GET,
        format!("/resource_providers/{uuid}/traits"),
        None,
    )
    .await;
    let have = traits(&t);
    for want in [
        "COMPUTE_NODE",
        "COMPUTE_STORAGE_BUS_VIRTIO",
        "HW_CPU_X86_SSE2",
    ] {
        assert!(have.contains(&want.to_owned()), "{want} missing: {have:?}");
    }
    assert!(!have.contains(&"HW_CPU_X86_AVX512F".to_owned()));

    // An operator adds a trait of their own, and someone a CPU trait the
    // host does not have: at the next report the first stays, the
    // second goes.
    let mut more = have.clone();
    more.push("CUSTOM_RACK_A".into());
    more.push("HW_CPU_X86_AVX512F".into());
    http.put(format!("{base}/traits/CUSTOM_RACK_A"))
        .header("X-Auth-Token", "admin")
        .header("OpenStack-API-Version", "placement 1.20")
        .send()
        .await
        .unwrap();
    let put = call(
        reqwest::Method::PUT,
        format!("/resource_providers/{uuid}/traits"),
        Some(serde_json::json!({
            "resource_provider_generation": t["resource_provider_generation"],
            "traits": more,
        })),
    )
    .await;
    assert!(put["traits"].is_array(), "{put}");
    h.shutdown().await;
    let h = start();
    assert_eq!(h.ready().await.unwrap(), uuid, "the same node");
    let have = traits(
        &call(
            reqwest::Method::GET,
            format!("/resource_providers/{uuid}/traits"),
            None,
        )
        .await,
    );
    assert!(have.contains(&"CUSTOM_RACK_A".to_owned()), "{have:?}");
    assert!(!have.contains(&"HW_CPU_X86_AVX512F".to_owned()), "{have:?}");
    assert!(have.contains(&"COMPUTE_NODE".to_owned()), "{have:?}");
    h.shutdown().await;
    running.task.abort();
}

/// Placement full (its one request place held by a request whose body is
/// slow): the host's report waits its turn on the 503s' `Retry-After`
/// instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_placement_is_waited_for_not_failed() {
    use compute::placement::Placement;
    use tokio::io::AsyncWriteExt;
    let db = testkit::sqlite("compute_placement_full");
    let running = placement::serve(
        &PlacementConfig {
            listen: "127.0.0.1:0".into(),
            database: DatabaseConfig {
                connection: db.url.clone(),
                max_connections: 1,
            },
            http: httpd::Limits {
                max_concurrent_requests: 1,
                retry_after_secs: 1,
                ..Default::default()
            },
            ..Default::default()
        },
        None,
    )
    .await
    .unwrap();
    let base = format!("http://{}", running.addr);
    // Hold the only place for 1.5 s: a create whose body comes late.
    let mut held = tokio::net::TcpStream::connect(running.addr).await.unwrap();
    held.write_all(
        b"POST /resource_providers HTTP/1.1\r\nHost: x\r\nX-Auth-Token: admin\r\n\
          Content-Type: application/json\r\nContent-Length: 40\r\n\r\n{",
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        drop(held);
    });
    let p = HttpPlacement::new(&base, "admin").unwrap();
    let uuid = fabric::ids::ProviderUuid::new_random();
    let started = std::time::Instant::now();
    p.ensure_provider(uuid, "full-host")
        .await
        .expect("reported once placement had room");
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "it waited for the place: {:?}",
        started.elapsed()
    );
    release.await.unwrap();
    running.task.abort();
}
