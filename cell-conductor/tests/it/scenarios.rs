//! The scenarios, each run on both tiers (see `embedded` and `real`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use compute::driver::fake::FakeHypervisor;
use fabric::bus::Transport;
use fabric::rpc::{
    action, power_state, task_state as ts, vm_state as vs, COMPUTE_BINARY, CONDUCTOR_BINARY,
};

use crate::common::{resources, Cell};

/// Registration lands in the cell DB and heartbeats bump report_count.
pub async fn registration_and_heartbeats(db_url: &str, bus: Arc<dyn Transport>) {
    let cell = Cell::start(db_url, bus, FakeHypervisor::automatic(Duration::ZERO), 3).await;
    let nodes = cell.db.compute_nodes().await.unwrap();
    assert_eq!(nodes.len(), 3);
    for (h, provider) in &cell.hosts {
        let n = nodes.iter().find(|n| n.host == h.host()).expect("node row");
        assert_eq!(
            n.uuid,
            provider.to_string(),
            "node uuid is the provider uuid"
        );
        assert_eq!(n.hypervisor_hostname, h.host());
        assert_eq!(n.hypervisor_type, "fake");
        assert_eq!(n.vcpus, 16);
        assert!(!n.mapped, "mapped is left to host discovery");
        assert!(n.service_id.is_some(), "node linked to its service");
        let (name, inv) = cell
            .inventory
            .provider(*provider)
            .expect("provider reported");
        assert_eq!(name, h.host());
        assert_eq!(inv.expect("inventory").cpu_allocation_ratio, 16.0);
    }
    // Heartbeats every 100 ms: wait for two reports of every compute.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let services = cell.db.services().await.unwrap();
        let computes: Vec<_> = services
            .iter()
            .filter(|s| s.binary == COMPUTE_BINARY)
            .collect();
        assert_eq!(computes.len(), 3, "{services:?}");
        assert!(services.iter().any(|s| s.binary == CONDUCTOR_BINARY));
        if computes
            .iter()
            .all(|s| s.report_count >= 2 && s.last_seen_up.is_some())
        {
            assert!(computes
                .iter()
                .all(|s| s.version == fabric::rpc::SERVICE_VERSION));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "heartbeats did not land: {computes:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Re-registration is idempotent: a restarted host keeps its node uuid.
    let (h, provider) = &cell.hosts[0];
    let again = compute::start_host(
        compute::HostConfig::new(h.host()),
        cell.bus.clone(),
        cell.hv.driver(h.host()),
        Arc::new(cell.inventory.clone()),
    );
    assert_eq!(again.ready().await.unwrap(), *provider);
    again.shutdown().await;
    assert_eq!(cell.db.compute_nodes().await.unwrap().len(), 3);
    cell.stop().await;
}

/// (vm_state, task_state) as observed by polling.
type Observed = (Option<String>, Option<String>);

/// A build walks the contract's task states in order to ACTIVE, and every
/// step leaves an action event carrying the request id.
pub async fn build_walks_task_states(db_url: &str, bus: Arc<dyn Transport>) {
    let cell = Cell::start(db_url, bus, FakeHypervisor::explicit(), 1).await;
    let (uuid, ids) = cell.boot("host1", &[]).await;
    // Poll the database in the background and keep every distinct state.
    // The lock is held across each read and its record, so a state recorded
    // by the test itself (below) is never followed by an older read.
    let seen: Arc<tokio::sync::Mutex<Vec<Observed>>> = Arc::default();
    let poller = {
        let db = cell.db.clone();
        let seen = seen.clone();
        tokio::spawn(async move {
            loop {
                {
                    let mut s = seen.lock().await;
                    let row = db.instance(uuid).await.unwrap().unwrap();
                    let st = (row.vm_state.clone(), row.task_state.clone());
                    if s.last() != Some(&st) {
                        s.push(st);
                    }
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    // Explicit mode: the spawn waits for us, so `spawning` is observed.
    let host = tokio::time::timeout(Duration::from_secs(20), cell.hv.spawn_requested(uuid))
        .await
        .expect("spawn requested");
    assert_eq!(host, "host1");
    let spawning = cell
        .wait_for(uuid, "spawning", |r| {
            r.task_state.as_deref() == Some(ts::SPAWNING)
        })
        .await;
    {
        // The spawn is held, so the state cannot move on: record what the
        // test saw, in case the poller was not scheduled in between.
        let mut s = seen.lock().await;
        let st = (spawning.vm_state.clone(), spawning.task_state.clone());
        if s.last() != Some(&st) {
            s.push(st);
        }
    }
    assert!(cell.hv.finish_spawn(uuid, Ok(())));
    let row = cell
        .wait_for(uuid, "active", |r| {
            r.vm_state.as_deref() == Some(vs::ACTIVE)
        })
        .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    poller.abort();
    assert_eq!(row.task_state, None);
    assert_eq!(row.power_state, Some(power_state::RUNNING as i64));
    assert_eq!(row.host.as_deref(), Some("host1"));
    assert_eq!(row.node.as_deref(), Some("host1"));
    assert!(row.launched_at.is_some());

    let contract: Vec<Option<&str>> = vec![
        Some(ts::SCHEDULING),
        Some(ts::BLOCK_DEVICE_MAPPING),
        Some(ts::NETWORKING),
        Some(ts::SPAWNING),
        None,
    ];
    let observed: Vec<Option<String>> = seen.lock().await.iter().map(|(_, t)| t.clone()).collect();
    let mut it = contract.iter();
    for t in &observed {
        assert!(
            it.any(|c| *c == t.as_deref()),
            "observed task states {observed:?} are not a subsequence of the contract {contract:?}"
        );
    }
    assert!(
        observed.contains(&Some(ts::SPAWNING.to_owned())),
        "{observed:?}"
    );
    assert_eq!(observed.last(), Some(&None));

    let events = cell.db.events(uuid).await.unwrap();
    for name in [
        action::EV_BUILD,
        action::EV_BLOCK_DEVICE_MAPPING,
        action::EV_NETWORKING,
        action::EV_SPAWN,
    ] {
        let e = events
            .iter()
            .find(|e| e.event == name)
            .unwrap_or_else(|| panic!("{name} in {events:?}"));
        assert_eq!(e.result.as_deref(), Some(action::SUCCESS), "{e:?}");
        assert_eq!(e.request_id.as_deref(), Some(ids.request_id.as_str()));
        assert_eq!(e.action_request_id, ids.request_id);
        assert_eq!(e.action, action::CREATE);
        assert_eq!(e.host.as_deref(), Some("host1"));
        assert!(e.start_time.is_some() && e.finish_time.is_some());
    }
    assert_eq!(cell.hv.guests("host1"), vec![uuid]);
    cell.stop().await;
}

/// A spawn failure with no alternate: ERROR, a fault naming the host and
/// the error, the claim removed.
pub async fn spawn_failure_without_alternates(db_url: &str, bus: Arc<dyn Transport>) {
    let cell = Cell::start(db_url, bus, FakeHypervisor::explicit(), 1).await;
    let (uuid, ids) = cell.boot("host1", &[]).await;
    tokio::time::timeout(Duration::from_secs(20), cell.hv.spawn_requested(uuid))
        .await
        .expect("spawn requested");
    assert!(cell.hv.finish_spawn(uuid, Err("disk on fire".into())));
    let row = cell
        .wait_for(uuid, "error", |r| r.vm_state.as_deref() == Some(vs::ERROR))
        .await;
    assert_eq!(row.task_state, None);
    let faults = cell.db.faults(uuid).await.unwrap();
    assert_eq!(faults.len(), 1, "{faults:?}");
    let f = &faults[0];
    assert_eq!(f.code, 500);
    assert_eq!(f.host.as_deref(), Some("host1"));
    let msg = f.message.as_deref().unwrap();
    assert!(
        msg.contains("host1") && msg.contains("disk on fire"),
        "{msg}"
    );
    assert_eq!(cell.placement.allocation(uuid), None, "claim removed");
    assert!(cell.hv.guests("host1").is_empty());
    let events = cell.db.events(uuid).await.unwrap();
    let build = events.iter().find(|e| e.event == action::EV_BUILD).unwrap();
    assert_eq!(build.result.as_deref(), Some(action::ERROR));
    assert!(build.traceback.as_deref().unwrap().contains("disk on fire"));
    let resched = events
        .iter()
        .find(|e| e.event == action::EV_RESCHEDULE)
        .unwrap();
    assert_eq!(resched.result.as_deref(), Some(action::ERROR));
    assert_eq!(resched.request_id.as_deref(), Some(ids.request_id.as_str()));
    cell.stop().await;
}

/// A spawn failure with an alternate: the claim moves and the build lands
/// on the other host.
pub async fn spawn_failure_with_alternate(db_url: &str, bus: Arc<dyn Transport>) {
    let hv = FakeHypervisor::automatic(Duration::from_millis(5));
    hv.fail_spawns("host1", "no luck here");
    let cell = Cell::start(db_url, bus, hv, 2).await;
    let (uuid, _ids) = cell.boot("host1", &["host2"]).await;
    let row = cell
        .wait_for(uuid, "active", |r| {
            r.vm_state.as_deref() == Some(vs::ACTIVE)
        })
        .await;
    assert_eq!(row.host.as_deref(), Some("host2"));
    assert_eq!(row.task_state, None);
    assert_eq!(
        cell.placement.allocation(uuid),
        Some((cell.provider("host2"), resources())),
        "claim moved to host2"
    );
    assert!(cell.hv.guests("host1").is_empty());
    assert_eq!(cell.hv.guests("host2"), vec![uuid]);
    assert!(cell.db.faults(uuid).await.unwrap().is_empty());
    let events = cell.db.events(uuid).await.unwrap();
    let resched = events
        .iter()
        .find(|e| e.event == action::EV_RESCHEDULE)
        .unwrap();
    assert_eq!(resched.result.as_deref(), Some(action::SUCCESS));
    // Both attempts left their build event: the failed one on host1, the
    // successful one on host2.
    let builds: Vec<_> = events
        .iter()
        .filter(|e| e.event == action::EV_BUILD)
        .collect();
    assert!(
        builds
            .iter()
            .any(|e| e.host.as_deref() == Some("host1")
                && e.result.as_deref() == Some(action::ERROR)),
        "{builds:?}"
    );
    assert!(
        builds
            .iter()
            .any(|e| e.host.as_deref() == Some("host2")
                && e.result.as_deref() == Some(action::SUCCESS)),
        "{builds:?}"
    );
    // The failure is counted on host1's node, not on host2's.
    assert_eq!(
        cell.db.failed_builds("host1", "host1").await.unwrap(),
        Some(1)
    );
    assert_eq!(
        cell.db.failed_builds("host2", "host2").await.unwrap(),
        Some(0)
    );
    cell.stop().await;
}

/// Build failures count up in the node's stats (for the scheduler's
/// BuildFailureWeigher) and a successful build on the node resets them.
pub async fn build_failures_are_counted_and_reset(db_url: &str, bus: Arc<dyn Transport>) {
    let hv = FakeHypervisor::automatic(Duration::from_millis(5));
    hv.fail_spawns("host1", "no luck here");
    let cell = Cell::start(db_url, bus, hv, 2).await;
    for expected in 1..=2 {
        let (uuid, _) = cell.boot("host1", &[]).await;
        cell.wait_for(uuid, "error", |r| r.vm_state.as_deref() == Some(vs::ERROR))
            .await;
        assert_eq!(
            cell.db.failed_builds("host1", "host1").await.unwrap(),
            Some(expected)
        );
    }
    // A success elsewhere leaves host1's count alone.
    let (uuid, _) = cell.boot("host2", &[]).await;
    cell.wait_for(uuid, "active", |r| {
        r.vm_state.as_deref() == Some(vs::ACTIVE)
    })
    .await;
    assert_eq!(
        cell.db.failed_builds("host1", "host1").await.unwrap(),
        Some(2)
    );
    assert_eq!(
        cell.db.failed_builds("host2", "host2").await.unwrap(),
        Some(0)
    );
    // host1 heals: its next build succeeds and the count goes back to 0.
    cell.hv.reset_host("host1");
    let (uuid, _) = cell.boot("host1", &[]).await;
    let row = cell
        .wait_for(uuid, "active", |r| {
            r.vm_state.as_deref() == Some(vs::ACTIVE)
        })
        .await;
    assert_eq!(row.host.as_deref(), Some("host1"));
    // The reset follows the ACTIVE update's commit: poll for it.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = cell.db.failed_builds("host1", "host1").await.unwrap();
        if n == Some(0) {
            break;
        }
        assert!(Instant::now() < deadline, "count not reset: {n:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        cell.db.failed_builds("nohost", "nohost").await.unwrap(),
        None
    );
    cell.stop().await;
}

/// Terminate: deleting, destroy, marked deleted, claim removed.
pub async fn terminate_deletes(db_url: &str, bus: Arc<dyn Transport>) {
    let cell = Cell::start(db_url, bus, FakeHypervisor::automatic(Duration::ZERO), 1).await;
    let (uuid, _) = cell.boot("host1", &[]).await;
    cell.wait_for(uuid, "active", |r| {
        r.vm_state.as_deref() == Some(vs::ACTIVE)
    })
    .await;
    let ids = cell.terminate(uuid, "host1").await;
    let row = cell.wait_for(uuid, "deleted", |r| r.deleted).await;
    assert_eq!(row.vm_state.as_deref(), Some(vs::DELETED));
    assert_eq!(row.task_state, None);
    assert_eq!(row.power_state, Some(power_state::NOSTATE as i64));
    assert!(cell.hv.guests("host1").is_empty());
    assert_eq!(cell.placement.allocation(uuid), None);
    let events = cell.db.events(uuid).await.unwrap();
    let t = events
        .iter()
        .find(|e| e.event == action::EV_TERMINATE)
        .unwrap();
    assert_eq!(t.action, action::DELETE);
    assert_eq!(t.action_request_id, ids.request_id);
    assert_eq!(t.result.as_deref(), Some(action::SUCCESS));
    // A terminate delivered again finds nothing to do.
    cell.terminate(uuid, "host1").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(cell.instance(uuid).await.deleted);
    cell.stop().await;
}

/// A `terminate_instance` for a server that is not being deleted (a cast
/// that outlived its request: the API took the delete back) is dropped,
/// as Nova's expected task state drops it: the server stays ACTIVE with
/// its guest and claim.
pub async fn terminate_needs_deleting(db_url: &str, bus: Arc<dyn Transport>) {
    let cell = Cell::start(db_url, bus, FakeHypervisor::automatic(Duration::ZERO), 1).await;
    let (uuid, _) = cell.boot("host1", &[]).await;
    cell.wait_for(uuid, "active", |r| {
        r.vm_state.as_deref() == Some(vs::ACTIVE)
    })
    .await;
    cell.cast_terminate(uuid, "host1").await;
    // A later terminate behind it on the same queue shows the first was
    // read (the queue is served in order).
    let (other, _) = cell.boot("host1", &[]).await;
    cell.wait_for(other, "active", |r| {
        r.vm_state.as_deref() == Some(vs::ACTIVE)
    })
    .await;
    cell.terminate(other, "host1").await;
    cell.wait_for(other, "deleted", |r| r.deleted).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let row = cell.instance(uuid).await;
    assert!(!row.deleted, "{row:?}");
    assert_eq!(row.vm_state.as_deref(), Some(vs::ACTIVE));
    assert_eq!(row.task_state, None);
    assert_eq!(cell.hv.guests("host1").len(), 1);
    assert!(cell.placement.allocation(uuid).is_some());
    cell.stop().await;
}
