//! A cell whose RabbitMQ blocks publishers (a memory alarm): a DELETE
//! fails in bounded time with a 503 and changes nothing (or, when the
//! alarm meets its own cast on the way, is taken as sent: 204); once the
//! broker unblocks, heartbeats go on and the DELETE goes through. Runs alone (see
//! `.config/nextest.toml`): the alarm is the whole broker's.

use std::time::{Duration, Instant};

use region::Region;

use crate::local_delete::Api;

fn rabbitmqctl(args: &[&str]) {
    let out = std::process::Command::new("rabbitmqctl")
        .arg("-q")
        .args(args)
        .output()
        .expect("run rabbitmqctl");
    assert!(out.status.success(), "rabbitmqctl {args:?}: {out:?}");
}

/// Clears the alarm even if the test panics half way.
struct RestoreWatermark;

impl Drop for RestoreWatermark {
    fn drop(&mut self) {
        rabbitmqctl(&["set_vm_memory_high_watermark", "0.4"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_broker_blocked_delete_fails_fast_then_goes_through() {
    let Some(mut cfg) = crate::production_config("blocked_broker").await else {
        return;
    };
    cfg.region.data_dir = testkit::temp_dir("blocked_broker");
    cfg.region.cells = 1;
    cfg.region.hosts_per_cell = 1;
    cfg.region.fake_spawn_latency_ms = 20;
    crate::ephemeral_ports(&mut cfg);
    let region = Region::start(&cfg, None).await.expect("start the region");
    let api = Api::admin_of(&region).await;
    let t = Instant::now();
    let (first, s) = api.boot("first", "").await;
    assert_eq!(s["status"], "ACTIVE", "{s}");
    let (second, s) = api.boot("second", "").await;
    assert_eq!(s["status"], "ACTIVE", "{s}");
    eprintln!("booted in {:?}", t.elapsed());
    let path = |id: &str| format!("/v2.1/servers/{id}");

    let restore = RestoreWatermark;
    tokio::task::spawn_blocking(|| rabbitmqctl(&["set_vm_memory_high_watermark", "absolute", "1"]))
        .await
        .unwrap();
    // The first DELETE's cast meets the alarm: either nothing was sent
    // (503, the server unchanged) or it was on its way (204: it may have
    // been taken, so the server stays `deleting` and is deleted once the
    // alarm clears, by that cast or by the conductor's heal). Each within
    // the publish wait (10 s), in practice at once.
    let started = Instant::now();
    let (status, body) = api.call("DELETE", &path(&first), "2.1", None).await;
    let took = started.elapsed();
    eprintln!("while blocked: the first DELETE answered {status} in {took:?}");
    assert!(took < Duration::from_secs(12), "the DELETE took {took:?}");
    let first_sent = match status {
        204 => true,
        503 => false,
        other => panic!("while blocked: DELETE answered {other}: {body}"),
    };
    // Once the connection is known blocked, nothing is sent: 503 at once,
    // the server unchanged.
    let mut refused = Vec::new();
    for id in [&first, &second] {
        if *id == first && first_sent {
            continue;
        }
        let started = Instant::now();
        let (status, body) = api.call("DELETE", &path(id), "2.1", None).await;
        eprintln!(
            "while blocked: DELETE answered {status} in {:?}",
            started.elapsed()
        );
        assert_eq!(status, 503, "{body}");
        let (_, v) = api.show(id).await;
        assert_eq!(v["server"]["status"], "ACTIVE", "unchanged: {v}");
        assert_eq!(
            v["server"]["OS-EXT-STS:task_state"],
            serde_json::Value::Null,
            "{v}"
        );
        refused.push(id.clone());
    }

    tokio::task::spawn_blocking(move || drop(restore))
        .await
        .unwrap();
    let unblocked = Instant::now();
    eprintln!(
        "alarm cleared {:?} after the first DELETE",
        started.elapsed()
    );
    // A refused DELETE sent nothing, and a cast that outlived its request
    // would be dropped by the compute (the task state is no longer
    // `deleting`): those servers are still there, and the host (its
    // heartbeats going on) takes their DELETE now.
    for id in &refused {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let t = Instant::now();
            let (status, body) = api.call("DELETE", &path(id), "2.1", None).await;
            eprintln!(
                "{:?} after the alarm cleared: DELETE answered {status} in {:?}: {body}",
                unblocked.elapsed(),
                t.elapsed()
            );
            if status == 204 {
                break;
            }
            assert_ne!(status, 404, "deleted by a DELETE answered 503: {body}");
            assert!(Instant::now() < deadline, "still refused: {status} {body}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    for id in [&first, &second] {
        let deadline = Instant::now() + Duration::from_secs(20);
        while api.show(id).await.0 != 404 {
            assert!(Instant::now() < deadline, "{id} not deleted");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    eprintln!("{:?} after the alarm cleared: deleted", unblocked.elapsed());
    let (_, services) = api.call("GET", "/v2.1/os-services", "2.1", None).await;
    let computes: Vec<_> = services["services"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["binary"] == "nova-compute")
        .collect();
    assert!(!computes.is_empty());
    for c in computes {
        assert_eq!(c["state"], "up", "{c}");
    }
    region.shutdown().await;
}
