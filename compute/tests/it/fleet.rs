//! Hundreds of fake hosts in one process: all register and heartbeat, and
//! the memory each costs is small (measured roughly from the process RSS).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use compute::driver::fake::FakeHypervisor;
use compute::placement::InMemoryPlacement;
use compute::HostConfig;
use fabric::bus::{InprocTransport, Transport};

use crate::stub::stub_conductor;

fn rss_kb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_fake_hosts_register_and_heartbeat() {
    const N: usize = 500;
    let bus: Arc<dyn Transport> = Arc::new(InprocTransport::new());
    let counts = stub_conductor(bus.clone()).await;
    let hv = FakeHypervisor::automatic(Duration::ZERO);
    let placement = Arc::new(InMemoryPlacement::new());
    let before = rss_kb();
    let started = Instant::now();
    let hosts: Vec<_> = (0..N)
        .map(|i| {
            let name = format!("fleet-{i:04}");
            let mut cfg = HostConfig::new(&name);
            cfg.heartbeat_interval = Duration::from_millis(500);
            compute::start_host(cfg, bus.clone(), hv.driver(&name), placement.clone())
        })
        .collect();
    for h in &hosts {
        tokio::time::timeout(Duration::from_secs(30), h.ready())
            .await
            .unwrap()
            .unwrap();
    }
    let ready_in = started.elapsed();
    assert_eq!(placement.len(), N);
    assert_eq!(counts.registrations.load(Ordering::Relaxed), N as u64);
    let deadline = Instant::now() + Duration::from_secs(20);
    while counts.heartbeats.load(Ordering::Relaxed) < N as u64 {
        assert!(Instant::now() < deadline, "heartbeats missing");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if let (Some(b), Some(a)) = (before, rss_kb()) {
        let per_host = a.saturating_sub(b) as f64 / N as f64;
        println!("{N} fake hosts ready in {ready_in:?}; RSS {b} kB -> {a} kB: ~{per_host:.1} kB per host");
        assert!(per_host < 256.0, "a fake host costs {per_host:.1} kB");
    }
    for h in hosts {
        h.shutdown().await;
    }
}

/// A conductor that does not take its heartbeats holds up neither the
/// host's shutdown nor its casts: a heartbeat is a cast, nothing waits
/// for an answer (the call timeout is a minute here; the shutdown returns
/// at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_does_not_wait_for_a_heartbeat_nobody_answers() {
    let bus: Arc<dyn Transport> = Arc::new(InprocTransport::new());
    let counts = stub_conductor(bus.clone()).await;
    let hv = FakeHypervisor::automatic(Duration::ZERO);
    let mut cfg = HostConfig::new("hung-1");
    cfg.heartbeat_interval = Duration::from_millis(100);
    cfg.call_timeout = Duration::from_secs(60);
    cfg.call_retry_deadline = Duration::from_secs(60);
    let host = compute::start_host(
        cfg,
        bus.clone(),
        hv.driver("hung-1"),
        Arc::new(InMemoryPlacement::new()),
    );
    tokio::time::timeout(Duration::from_secs(30), host.ready())
        .await
        .unwrap()
        .unwrap();
    counts.ignore_heartbeats.store(true, Ordering::Relaxed);
    let seen = counts.heartbeats.load(Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(20);
    while counts.heartbeats.load(Ordering::Relaxed) == seen {
        assert!(Instant::now() < deadline, "no heartbeat sent");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Heartbeats now go unsettled.
    let t = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), host.shutdown())
        .await
        .expect("the shutdown waited for the heartbeat's call timeout");
    println!("shut down in {:?} with a heartbeat unanswered", t.elapsed());
}
