//! Broker outages on PostgreSQL and RabbitMQ (skipped without them unless
//! REQUIRE_REAL_BACKENDS=1): the conductor and the compute each on a
//! connection of their own to the cell's vhost, the vhost's connections
//! closed and refused (as the loadtest's `stop-broker`) while a build step
//! is in flight, then allowed again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use compute::driver::fake::{FakeHypervisor, Mode};
use compute::HostConfig;
use fabric::bus::{self, BusOptions, Transport};
use fabric::ids::InstanceUuid;
use fabric::rpc::{action, task_state as ts, vm_state as vs};

use crate::common::Cell;

fn options(name: &str) -> BusOptions {
    BusOptions {
        connection_name: name.to_owned(),
        reconnect_min: Duration::from_millis(100),
        reconnect_max: Duration::from_secs(1),
        ..BusOptions::default()
    }
}

/// A conductor on its own connection and `host1` on another one.
async fn cell(test: &str, call_timeout: Duration) -> Option<(Cell, testkit::PgDb, String)> {
    let db = testkit::postgres(&format!("conductor_{test}")).await?;
    let url = testkit::rabbitmq(&format!("conductor_{test}"))?;
    let conductor_bus = bus::connect_with(&url, options("outage-conductor"))
        .await
        .expect("connect the conductor");
    let mut cell = Cell::start(&db.url, conductor_bus, FakeHypervisor::explicit(), 0).await;
    let compute_bus: Arc<dyn Transport> = bus::connect_with(&url, options("outage-compute"))
        .await
        .expect("connect the compute");
    let mut cfg = HostConfig::new("host1");
    cfg.heartbeat_interval = Duration::from_millis(500);
    cfg.call_timeout = call_timeout;
    cfg.call_retry_deadline = Duration::from_secs(60);
    let h = compute::start_host(
        cfg,
        compute_bus,
        cell.hv.driver("host1"),
        Arc::new(cell.inventory.clone()),
    );
    let node = tokio::time::timeout(Duration::from_secs(20), h.ready())
        .await
        .expect("host ready in time")
        .expect("host ready");
    cell.hosts.push((h, node));
    Some((cell, db, testkit::vhost_of(&url)))
}

async fn ctl(f: impl FnOnce() + Send + 'static) {
    tokio::task::spawn_blocking(f).await.unwrap();
}

/// Waits until nothing is left in `compute.host1` (ready or unacked): every
/// build cast, and any redelivery of it, has been handled.
async fn host_queue_drained(vhost: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = vhost.to_owned();
        let out = tokio::task::spawn_blocking(move || {
            testkit::rabbitmqctl(&["list_queues", "-p", &v, "name", "messages"])
        })
        .await
        .unwrap();
        let left = out
            .lines()
            .find_map(|l| l.strip_prefix("compute.host1\t"))
            .map(|n| n.trim().to_owned());
        if left.as_deref() == Some("0") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "compute.host1 still holds messages: {out}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Boots on `host1` and waits until the build's spawn is in the fake
/// driver's hands (task state `spawning`); the spawn is left pending.
async fn boot_until_spawning(cell: &Cell) -> InstanceUuid {
    let (uuid, _) = cell.boot("host1", &[]).await;
    tokio::time::timeout(Duration::from_secs(20), cell.hv.spawn_requested(uuid))
        .await
        .expect("spawn requested");
    cell.wait_for(uuid, "spawning", |r| {
        r.task_state.as_deref() == Some(ts::SPAWNING)
    })
    .await;
    uuid
}

/// The build reached ACTIVE exactly once: the guest runs, no fault, every
/// build event recorded once and finished with success.
async fn active_once(cell: &Cell, uuid: InstanceUuid) {
    let row = cell.instance(uuid).await;
    assert_eq!(row.vm_state.as_deref(), Some(vs::ACTIVE), "{row:?}");
    assert_eq!(row.task_state, None);
    assert!(
        cell.hv.guests("host1").contains(&uuid),
        "the guest still runs (the build was not abandoned)"
    );
    let faults = cell.db.faults(uuid).await.unwrap();
    assert!(faults.is_empty(), "no fault: {faults:?}");
    let events = cell.db.events(uuid).await.unwrap();
    for name in [
        action::EV_BUILD,
        action::EV_BLOCK_DEVICE_MAPPING,
        action::EV_NETWORKING,
        action::EV_SPAWN,
    ] {
        let of: Vec<_> = events.iter().filter(|e| e.event == name).collect();
        assert_eq!(of.len(), 1, "{name} recorded once: {events:?}");
        assert_eq!(of[0].result.as_deref(), Some(action::SUCCESS), "{of:?}");
    }
}

/// The build's last step (ACTIVE) reaches the conductor, which commits it
/// while the broker drops every connection of the vhost: the compute's call
/// fails with the connection, is repeated once the vhost lets clients in
/// again, and is recognised as already applied. Before, the agent gave the
/// build up (destroying the guest and trying to set ERROR).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_amqp_update_in_flight_when_the_broker_drops_lands_once() {
    let Some((cell, db, vhost)) = cell("outage_inflight", Duration::from_secs(10)).await else {
        return;
    };
    let uuid = boot_until_spawning(&cell).await;
    // Hold the row so that the conductor's UPDATE waits for us.
    let mut lock = crate::common::lock_row(&db.url, uuid).await;
    assert!(cell.hv.finish_spawn(uuid, Ok(())));
    // The ACTIVE update is in the conductor, waiting on the row lock.
    crate::common::lock_waiters(&db.url, 1).await;
    // The broker goes away with the call in flight, then the update commits.
    let v = vhost.clone();
    ctl(move || testkit::stop_vhost(&v)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    sqlx::query("COMMIT").execute(&mut lock).await.unwrap();
    cell.wait_for(uuid, "active (committed by the first attempt)", |r| {
        r.vm_state.as_deref() == Some(vs::ACTIVE)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        cell.hv.guests("host1").contains(&uuid),
        "the agent kept the guest while the broker was away"
    );
    let v = vhost.clone();
    ctl(move || testkit::start_vhost(&v)).await;
    // The repeat lands; the redelivered build cast (if any) is refused.
    host_queue_drained(&vhost).await;
    active_once(&cell, uuid).await;
    // The agent's consumer came back: a new build goes through.
    cell.hv.set_mode(Mode::Automatic);
    let (second, _) = cell.boot("host1", &[]).await;
    cell.wait_for(second, "second build active", |r| {
        r.vm_state.as_deref() == Some(vs::ACTIVE)
    })
    .await;
    active_once(&cell, uuid).await;
    cell.stop().await;
}

/// The broker is away for longer than a call's timeout when the build's
/// last step is sent: the call waits for the connection, fails
/// `Unavailable` at its timeout, and is repeated until the broker is back.
/// On a loaded machine the attempt that gets through may be applied but
/// answered after its (2 s) timeout; it is repeated too, and the repeat is
/// answered as already applied (before, the agent then abandoned the build:
/// ACTIVE, then ERROR).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_amqp_update_during_an_outage_longer_than_the_call_timeout_lands() {
    let Some((cell, _db, vhost)) = cell("outage_long", Duration::from_secs(2)).await else {
        return;
    };
    let uuid = boot_until_spawning(&cell).await;
    let v = vhost.clone();
    ctl(move || testkit::stop_vhost(&v)).await;
    assert!(cell.hv.finish_spawn(uuid, Ok(())));
    // Two call timeouts and more.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let row = cell.instance(uuid).await;
    assert_eq!(row.task_state.as_deref(), Some(ts::SPAWNING), "{row:?}");
    assert!(cell.hv.guests("host1").contains(&uuid), "guest kept");
    let v = vhost.clone();
    ctl(move || testkit::start_vhost(&v)).await;
    // The repeat waits for the compute's reconnection (backoff up to 1 s)
    // and its next attempt; on a loaded machine that has taken over 20 s,
    // so the wait is the agent's own bound on repeats (60 s).
    cell.wait_for_up_to(
        uuid,
        "active after the outage",
        Duration::from_secs(60),
        |r| r.vm_state.as_deref() == Some(vs::ACTIVE),
    )
    .await;
    host_queue_drained(&vhost).await;
    active_once(&cell, uuid).await;
    cell.stop().await;
}
