//! The scheduler's weighers end to end: `BuildFailureWeigher` steers builds
//! away from a host whose spawns fail (the cell conductor counts the
//! failures in the node's stats; the scheduler reads them with the host
//! state) and back to it once a build there succeeds.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::json as body;
use crate::compute::{Region, IMAGE};

const FAILING: &str = "c1-host1";

/// Boots one m1.tiny server (`az`: a zone or `zone:host`) and waits for
/// ACTIVE or ERROR.
async fn boot(region: &Region, name: &str, az: Option<&str>) -> Value {
    let mut server = json!({"name": name, "flavorRef": "1", "imageRef": IMAGE, "networks": "none"});
    if let Some(z) = az {
        server["availability_zone"] = json!(z);
    }
    let r = region
        .call(
            &region.admin,
            "POST",
            "/v2.1/servers",
            Some(json!({ "server": server })),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let id = body(&r)["server"]["id"].as_str().unwrap().to_owned();
    let (s, _) = region
        .wait(&id, |s| s["status"] == "ACTIVE" || s["status"] == "ERROR")
        .await;
    s
}

/// Waits until the failing host's node shows `want` failed builds.
async fn wait_failed_builds(region: &Region, want: i64) {
    let db = region.cells[0].0.db();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let n = db.failed_builds(FAILING, FAILING).await.unwrap();
        if n == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "failed_builds {n:?}, want {want}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Longer than the scheduler's host state cache may serve a value: while
/// another caller reloads it (a server show polled by `boot`'s wait), a
/// value younger than twice `host_state_cache_ms` is still served.
async fn host_state_expires() {
    let ttl = api_super::scheduler::SchedulerConfig::default().host_state_cache_ms;
    tokio::time::sleep(Duration::from_millis(2 * ttl + 200)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_whose_builds_fail_is_avoided_until_a_build_succeeds_there() {
    let region = Region::start("sched_build_failure", 1, 3).await;
    region.hypervisors[0].fail_spawns(FAILING, "the hypervisor refuses to spawn");

    // The first failure: forced onto the failing host (no alternate).
    let s = boot(&region, "first", Some(&format!("nova:{FAILING}"))).await;
    assert_eq!(s["status"], "ERROR", "{s}");
    assert!(
        s["fault"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(FAILING)),
        "{s}"
    );
    wait_failed_builds(&region, 1).await;
    host_state_expires().await;

    // The failing host holds nothing, so every spreading weigher prefers
    // it; the failure weigher sends each build elsewhere, and none fails.
    let mut on = Vec::new();
    for i in 0..4 {
        let s = boot(&region, &format!("later{i}"), None).await;
        assert_eq!(s["status"], "ACTIVE", "{s}");
        let host = s["OS-EXT-SRV-ATTR:host"].as_str().unwrap().to_owned();
        assert_ne!(host, FAILING, "{s}");
        on.push(host);
    }
    on.sort();
    assert_eq!(
        on,
        ["c1-host2", "c1-host2", "c1-host3", "c1-host3"],
        "spread over the healthy hosts"
    );
    wait_failed_builds(&region, 1).await;

    // The host heals; a build forced onto it succeeds and clears the count.
    region.hypervisors[0].reset_host(FAILING);
    let s = boot(&region, "healed", Some(&format!("nova:{FAILING}"))).await;
    assert_eq!(s["status"], "ACTIVE", "{s}");
    wait_failed_builds(&region, 0).await;
    host_state_expires().await;
    // Back in the rotation: it is the freest host again (1 server, the
    // others 2 each).
    let s = boot(&region, "back", None).await;
    assert_eq!(s["status"], "ACTIVE", "{s}");
    assert_eq!(s["OS-EXT-SRV-ATTR:host"], FAILING, "{s}");
    region.stop().await;
}

/// The count of `api_scheduler_candidate_queries_total{query}` in the
/// process's metrics.
fn candidate_queries(t: &fabric::telemetry::Telemetry, query: &str) -> u64 {
    let want = format!("api_scheduler_candidate_queries_total{{query=\"{query}\"}}");
    t.render()
        .lines()
        .find_map(|l| l.strip_prefix(want.as_str()))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// `candidate_sample`: a one-server request asks placement for a sample
/// first and takes it when enough of it passes the filters; a forced host
/// is asked for by its tree (`in_tree`), so its sample is that host; a
/// request the sample cannot serve (here: the sampled host disabled) is
/// asked again in full and lands elsewhere. Placement does not shuffle
/// here, so the one-candidate sample is always the same first host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_sample_is_taken_when_it_serves_and_asked_again_in_full_when_not() {
    let telemetry = fabric::telemetry::init(
        "api-super",
        &fabric::config::TelemetryConfig {
            log_filter: "warn".to_owned(),
            ..Default::default()
        },
    )
    .expect("telemetry");
    let region = crate::compute::Region::start_with("sched_sample", 1, 4, |c| {
        c.scheduler.candidate_sample = 1;
        c.scheduler.max_attempts = 1;
    })
    .await;
    let host_of = |s: &Value| s["OS-EXT-SRV-ATTR:host"].as_str().unwrap_or("").to_owned();

    let mut sampled_hosts = Vec::new();
    for i in 0..3 {
        let s = boot(&region, &format!("sampled{i}"), None).await;
        assert_eq!(s["status"], "ACTIVE", "{s}");
        sampled_hosts.push(host_of(&s));
    }
    assert_eq!(candidate_queries(&telemetry, "sample"), 3);
    assert_eq!(candidate_queries(&telemetry, "sample_then_full"), 0);
    // The same first provider every time: the sample was all it saw.
    assert!(
        sampled_hosts.iter().all(|h| *h == sampled_hosts[0]),
        "{sampled_hosts:?}"
    );

    // Forced onto another host: placement is asked for that host's tree,
    // so the sample is that host.
    let other = (1..=4)
        .map(|h| format!("c1-host{h}"))
        .find(|h| *h != sampled_hosts[0])
        .unwrap();
    let s = boot(&region, "forced", Some(&format!("nova:{other}"))).await;
    assert_eq!(s["status"], "ACTIVE", "{s}");
    assert_eq!(host_of(&s), other);
    assert_eq!(candidate_queries(&telemetry, "sample"), 4);
    assert_eq!(candidate_queries(&telemetry, "sample_then_full"), 0);

    // The sampled host disabled: the sample serves nothing, asked in full.
    let r = region
        .call(
            &region.admin,
            "GET",
            &format!("/v2.1/os-services?host={}", sampled_hosts[0]),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let service = body(&r)["services"][0]["id"].as_str().unwrap().to_owned();
    let r = region
        .call(
            &region.admin,
            "PUT",
            &format!("/v2.1/os-services/{service}"),
            Some(json!({"status": "disabled"})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    host_state_expires().await;
    let s = boot(&region, "elsewhere", None).await;
    assert_eq!(s["status"], "ACTIVE", "{s}");
    assert_ne!(host_of(&s), sampled_hosts[0]);
    assert_eq!(candidate_queries(&telemetry, "sample_then_full"), 1);
}
