//! A dead compute host, end to end (issue 31), on an in-process region.
//!
//! The exercise operators run: stop a compute (its agent goes, as after
//! `kill -9`: no heartbeat, nobody reads its queue), then
//! - `os-services` shows it down within 5 s (service_down_time, 5 s by
//!   default, with a heartbeat every second written in batches);
//! - a boot forced onto it (`nova:<host>`) ends in ERROR within 15 s with a
//!   fault that names the host and why, and holds no allocation;
//! - a boot cast to it before it was seen dead is re-driven by the cell
//!   conductor to the other host and ends ACTIVE;
//! - new boots never go to it.
//!
//! On the embedded default and on PostgreSQL + RabbitMQ.

use std::time::{Duration, Instant};

use region::{Region, RegionConfig};
use serde_json::{json, Value};

use crate::local_delete::Api;

/// The bounds.
const NOTICE_WITHIN: Duration = Duration::from_secs(5);
const RECOVER_WITHIN: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_host_is_noticed_and_its_builds_recover() {
    dead_host(RegionConfig::default(), testkit::temp_dir("dead_host")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_host_is_noticed_and_its_builds_recover_on_postgresql_and_rabbitmq() {
    let Some(cfg) = crate::production_config("dead_host_pg").await else {
        return;
    };
    dead_host(cfg, testkit::temp_dir("dead_host_pg")).await;
}

/// Polls until the server leaves BUILD or `within` passes; the server.
async fn settle(api: &Api, id: &str, within: Duration) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let (status, v) = api.show(id).await;
        assert_eq!(status, 200, "show {id}: {v}");
        let st = v["server"]["status"].as_str().unwrap_or_default();
        if st == "ACTIVE" || st == "ERROR" {
            return v["server"].clone();
        }
        assert!(
            Instant::now() < deadline,
            "{id} still in BUILD after {within:?}: {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn service_state(api: &Api, host: &str) -> String {
    let (status, v) = api
        .call(
            "GET",
            &format!("/v2.1/os-services?host={host}&binary=nova-compute"),
            "2.53",
            None,
        )
        .await;
    assert_eq!(status, 200, "{v}");
    v["services"][0]["state"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn dead_host(mut cfg: RegionConfig, dir: std::path::PathBuf) {
    cfg.region.data_dir = dir;
    cfg.region.cells = 1;
    cfg.region.hosts_per_cell = 2;
    cfg.region.fake_spawn_latency_ms = 20;
    crate::ephemeral_ports(&mut cfg);
    let mut region = Region::start(&cfg, None).await.expect("start the region");
    let api = Api::admin_of(&region).await;
    let (dead, live) = ("cell1-host01", "cell1-host02");
    // Both up, and long enough for the healing to trust silence.
    let deadline = Instant::now() + Duration::from_secs(20);
    while service_state(&api, dead).await != "up" || service_state(&api, live).await != "up" {
        assert!(Instant::now() < deadline, "the hosts never show up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        service_state(&api, dead).await,
        "up",
        "no false down while idle"
    );

    // The host dies.
    let i = region.cells[0]
        .hosts
        .iter()
        .position(|h| h.host() == dead)
        .expect("the host");
    region.cells[0].hosts.remove(i).shutdown().await;
    let killed = Instant::now();
    // A boot forced onto it right away: its cast waits in a dead queue.
    let forced = api.create("forced", &format!("nova:{dead}")).await;
    // Ordinary boots before it is seen dead: the scheduler may still pick
    // it (with the other host as the alternate).
    let mut early = Vec::new();
    for n in 0..4 {
        early.push(api.create(&format!("early-{n}"), "").await);
    }

    // Noticed.
    while service_state(&api, dead).await != "down" {
        assert!(
            killed.elapsed() < NOTICE_WITHIN + Duration::from_millis(500),
            "{dead} not shown down after {:?}",
            killed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let noticed = killed.elapsed();
    assert_eq!(service_state(&api, live).await, "up");

    // The forced build recovers: ERROR, a fault naming the host, no claim.
    let s = settle(&api, &forced, RECOVER_WITHIN).await;
    let recovered = killed.elapsed();
    assert_eq!(s["status"], "ERROR", "{s}");
    let message = s["fault"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(dead) && message.contains("down"),
        "the fault names the host and why: {s}"
    );
    assert_eq!(api.allocations(&forced).await, json!({}), "claim freed");
    eprintln!("dead host noticed in {noticed:?}; forced build in ERROR after {recovered:?}");
    // The ordinary boots all end ACTIVE on the live host.
    for id in &early {
        let s = settle(&api, id, RECOVER_WITHIN.saturating_sub(killed.elapsed())).await;
        assert_eq!(s["status"], "ACTIVE", "{s}");
        assert_eq!(s["OS-EXT-SRV-ATTR:host"], live, "{s}");
    }
    eprintln!(
        "early boots all ACTIVE on {live} after {:?}",
        killed.elapsed()
    );

    // New boots never go to the dead host.
    for n in 0..3 {
        let id = api.create(&format!("after-{n}"), "").await;
        let s = settle(&api, &id, RECOVER_WITHIN).await;
        assert_eq!(s["status"], "ACTIVE", "{s}");
        assert_eq!(s["OS-EXT-SRV-ATTR:host"], live, "{s}");
    }
    assert!(region.cells[0].hypervisor.guests(dead).is_empty());
    region.shutdown().await;
}
