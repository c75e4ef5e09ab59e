//! A compute agent restarted over guests that survived it (the fake
//! hypervisor outlives the agent) reconciles them with the cell database
//! before it is ready (Nova's `init_host`): interrupted delete finished,
//! interrupted build in ERROR with a fault, guests of deleted or moved
//! instances destroyed, a vanished guest's power state synced, interrupted
//! server actions completed. On the embedded backends and on PostgreSQL +
//! RabbitMQ.

use std::sync::Arc;
use std::time::Duration;

use cell_conductor::model::InstanceChange;
use cell_conductor::{CellDb, PlacementClient};
use compute::conductor::ConductorClient;
use compute::driver::fake::{FakeHypervisor, Mode};
use compute::driver::GuestOp;
use fabric::bus::Transport;
use fabric::ids::InstanceUuid;
use fabric::rpc::{power_state as ps, task_state as ts, vm_state as vs};

use crate::common::Cell;

fn task(t: &str) -> InstanceChange {
    InstanceChange {
        task_state: Some(Some(t.to_owned())),
        ..Default::default()
    }
}

/// Puts `uuid` in task state `t` as the API layer does when it starts a
/// server action (its SQL lives in cell-mapping; the conductor's state
/// machine does not take these from NULL).
async fn api_task(cell: &Cell, uuid: InstanceUuid, t: &str) {
    let sql = "UPDATE instances SET task_state = $1 WHERE uuid = $2 AND deleted IS FALSE";
    let key = uuid.to_string();
    let affected = match &cell.db {
        CellDb::Pg(p) => sqlx::query(sql)
            .bind(t)
            .bind(&key)
            .execute(p.pool())
            .await
            .map(|r| r.rows_affected()),
        CellDb::Sqlite(p) => sqlx::query(sql)
            .bind(t)
            .bind(&key)
            .execute(p)
            .await
            .map(|r| r.rows_affected()),
    };
    assert_eq!(affected.expect("set the task state"), 1);
}

/// Starts `host1`'s agent again over the same fake
/// hypervisor and waits until it is ready (which is after its start-up
/// reconciliation).
async fn restart_host1(cell: &mut Cell, node1: fabric::ids::ProviderUuid) {
    let mut cfg = compute::HostConfig::new("host1");
    cfg.heartbeat_interval = Duration::from_millis(100);
    cfg.call_timeout = Duration::from_secs(10);
    cfg.init_timeout = Duration::from_secs(30);
    let h1 = compute::start_host(
        cfg,
        cell.bus.clone(),
        cell.hv.driver("host1"),
        Arc::new(cell.inventory.clone()),
    );
    let node = tokio::time::timeout(Duration::from_secs(40), h1.ready())
        .await
        .expect("ready in time")
        .expect("ready");
    assert_eq!(node, node1);
    cell.stopped.retain(|(h, _)| h != "host1");
    cell.hosts.insert(0, (h1, node));
}

/// Sets `host` of `uuid` without the conductor's checks.
async fn api_host(cell: &Cell, uuid: InstanceUuid, host: &str) {
    let sql = "UPDATE instances SET host = $1, node = $1 WHERE uuid = $2 AND deleted IS FALSE";
    let key = uuid.to_string();
    let affected = match &cell.db {
        CellDb::Pg(p) => sqlx::query(sql)
            .bind(host)
            .bind(&key)
            .execute(p.pool())
            .await
            .map(|r| r.rows_affected()),
        CellDb::Sqlite(p) => sqlx::query(sql)
            .bind(host)
            .bind(&key)
            .execute(p)
            .await
            .map(|r| r.rows_affected()),
    };
    assert_eq!(affected.expect("set the host"), 1);
}

async fn set(cell: &Cell, uuid: InstanceUuid, change: InstanceChange) {
    cell.db
        .update_instance(uuid, &change)
        .await
        .expect("set up the instance");
}

pub async fn restart_reconciles(db_url: &str, bus: Arc<dyn Transport>) {
    let mut cell = Cell::start(db_url, bus, FakeHypervisor::automatic(Duration::ZERO), 2).await;
    let mut booted = Vec::new();
    for _ in 0..7 {
        let (uuid, _) = cell.boot("host1", &[]).await;
        booted.push(uuid);
    }
    for &uuid in &booted {
        cell.wait_for(uuid, "active", |r| {
            r.vm_state.as_deref() == Some(vs::ACTIVE)
        })
        .await;
    }
    let [deleting, deleted, vanished, moved, rebooting, stopping, untouched] = booted[..] else {
        unreachable!()
    };
    // A build held in its spawn when the agent dies.
    cell.hv.set_mode(Mode::Explicit);
    let (spawning, _) = cell.boot("host1", &[]).await;
    tokio::time::timeout(Duration::from_secs(20), cell.hv.spawn_requested(spawning))
        .await
        .expect("spawn requested");
    cell.wait_for(spawning, "spawning", |r| {
        r.task_state.as_deref() == Some(ts::SPAWNING)
    })
    .await;

    // The agent of host1 stops; its guests stay.
    let node1 = cell.stop_host("host1").await;
    cell.hv.set_mode(Mode::Automatic);
    assert_eq!(cell.hv.guests("host1").len(), 7);

    // What happened while it was down (or what it was doing when it died).
    set(&cell, deleting, task(ts::DELETING)).await;
    // The delete it was carrying out had started its terminate event.
    cell.db
        .record_event(&cell_conductor::model::Event {
            instance: deleting,
            action: fabric::rpc::action::DELETE.into(),
            event: fabric::rpc::action::EV_TERMINATE.into(),
            host: Some("host1".into()),
            request_id: "req-interrupted-delete".into(),
            global_request_id: None,
            phase: cell_conductor::model::Phase::Start,
            result: None,
            traceback: None,
            details: None,
            at: chrono::Utc::now(),
        })
        .await
        .unwrap();
    cell.db.mark_deleted(deleted, &[]).await.unwrap();
    cell.placement.delete_allocations(deleted).await.unwrap();
    cell.hv.driver("host1").destroy(vanished).await.unwrap();
    set(
        &cell,
        moved,
        InstanceChange {
            host: Some(Some("host2".into())),
            node: Some(Some("host2".into())),
            ..Default::default()
        },
    )
    .await;
    api_task(&cell, rebooting, ts::REBOOTING_HARD).await;
    set(&cell, rebooting, task(ts::REBOOT_STARTED_HARD)).await;
    cell.hv
        .driver("host1")
        .perform(rebooting, &GuestOp::PowerOff)
        .await
        .unwrap();
    api_task(&cell, stopping, ts::POWERING_OFF).await;

    // The agent starts again over the same hypervisor.
    restart_host1(&mut cell, node1).await;

    // Ready means reconciled: no polling from here.
    let guest = |uuid| cell.hv.guest_power_state("host1", uuid);

    // The interrupted delete is finished, allocations released.
    let row = cell.instance(deleting).await;
    assert!(row.deleted, "{row:?}");
    assert_eq!(row.vm_state.as_deref(), Some(vs::DELETED));
    assert_eq!(guest(deleting), None);
    assert_eq!(cell.placement.allocation(deleting), None);
    // … and so is its action's terminate event, under the delete's request.
    let events = cell.db.events(deleting).await.unwrap();
    let terminate: Vec<_> = events
        .iter()
        .filter(|e| e.event == fabric::rpc::action::EV_TERMINATE)
        .collect();
    assert_eq!(terminate.len(), 1, "{events:#?}");
    assert_eq!(terminate[0].action_request_id, "req-interrupted-delete");
    assert!(terminate[0].finish_time.is_some(), "{events:#?}");
    assert_eq!(
        terminate[0].result.as_deref(),
        Some(fabric::rpc::action::SUCCESS)
    );

    // The interrupted build is in ERROR with a fault; its claim stays
    // until the server is deleted (as Nova).
    let row = cell.instance(spawning).await;
    assert_eq!(row.vm_state.as_deref(), Some(vs::ERROR), "{row:?}");
    assert_eq!(row.task_state, None);
    assert!(!row.deleted);
    let faults = cell.db.faults(spawning).await.unwrap();
    assert_eq!(faults.len(), 1, "{faults:?}");
    let message = faults[0].message.clone().unwrap_or_default();
    assert!(
        message.contains("interrupted by a restart of compute host host1"),
        "{message}"
    );
    assert_eq!(faults[0].host.as_deref(), Some("host1"));
    assert!(cell.placement.allocation(spawning).is_some());
    assert_eq!(guest(spawning), None);

    // The guest of the instance deleted meanwhile is destroyed.
    assert_eq!(guest(deleted), None);
    assert!(cell.instance(deleted).await.deleted);

    // The guest of the instance now on host2 is destroyed here; the
    // instance is untouched.
    assert_eq!(guest(moved), None);
    let row = cell.instance(moved).await;
    assert_eq!(row.host.as_deref(), Some("host2"));
    assert_eq!(row.vm_state.as_deref(), Some(vs::ACTIVE));
    assert!(!row.deleted);

    // The instance whose guest vanished: power state NOSTATE, nothing
    // deleted, claim kept.
    let row = cell.instance(vanished).await;
    assert!(!row.deleted);
    assert_eq!(row.vm_state.as_deref(), Some(vs::ACTIVE));
    assert_eq!(row.power_state, Some(ps::NOSTATE as i64));
    assert!(cell.placement.allocation(vanished).is_some());

    // The reboot that had started on a guest now off is done again (hard).
    let row = cell.instance(rebooting).await;
    assert_eq!(row.vm_state.as_deref(), Some(vs::ACTIVE), "{row:?}");
    assert_eq!(row.task_state, None);
    assert_eq!(row.power_state, Some(ps::RUNNING as i64));
    assert_eq!(guest(rebooting), Some(ps::RUNNING));

    // The stop is completed.
    let row = cell.instance(stopping).await;
    assert_eq!(row.vm_state.as_deref(), Some(vs::STOPPED), "{row:?}");
    assert_eq!(row.task_state, None);
    assert_eq!(row.power_state, Some(ps::SHUTDOWN as i64));
    assert_eq!(guest(stopping), Some(ps::SHUTDOWN));

    // The healthy one is left as it was.
    let row = cell.instance(untouched).await;
    assert_eq!(row.vm_state.as_deref(), Some(vs::ACTIVE));
    assert_eq!(row.power_state, Some(ps::RUNNING as i64));
    assert_eq!(guest(untouched), Some(ps::RUNNING));

    // The interrupted build's cast, back in the queue, is refused: the
    // instance stays in ERROR with no guest.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let row = cell.instance(spawning).await;
    assert_eq!(row.vm_state.as_deref(), Some(vs::ERROR), "{row:?}");
    assert_eq!(guest(spawning), None);

    // A second pass finds nothing to do.
    let conductor = ConductorClient::new(cell.bus.clone(), Duration::from_secs(10));
    let again =
        compute::init_host::reconcile("host1", cell.hv.driver("host1").as_ref(), &conductor)
            .await
            .expect("second pass");
    assert!(again.counts.is_empty(), "{again}");

    // The host takes builds again.
    let (next, _) = cell.boot("host1", &[]).await;
    cell.wait_for(next, "active", |r| {
        r.vm_state.as_deref() == Some(vs::ACTIVE)
    })
    .await;
    cell.stop().await;
}

/// Interrupted server actions end where the guest's power state says (or
/// are completed), an interrupted rebuild is ERROR, and a build still
/// queued for the host (`scheduling`) is left to its cast.
pub async fn restart_settles_actions(db_url: &str, bus: Arc<dyn Transport>) {
    let mut cell = Cell::start(db_url, bus, FakeHypervisor::automatic(Duration::ZERO), 1).await;
    let mut booted = Vec::new();
    for _ in 0..7 {
        let (uuid, _) = cell.boot("host1", &[]).await;
        booted.push(uuid);
    }
    for &uuid in &booted {
        cell.wait_for(uuid, "active", |r| {
            r.vm_state.as_deref() == Some(vs::ACTIVE)
        })
        .await;
    }
    let [paused, unpausing, suspending, rebooted, starting, rebuilding, no_guest] = booted[..]
    else {
        unreachable!()
    };
    let node1 = cell.stop_host("host1").await;
    let drv = cell.hv.driver("host1");
    // The pause ran, its report did not.
    api_task(&cell, paused, ts::PAUSING).await;
    drv.perform(paused, &GuestOp::Pause).await.unwrap();
    // The unpause never reached the guest.
    drv.perform(unpausing, &GuestOp::Pause).await.unwrap();
    set(
        &cell,
        unpausing,
        InstanceChange {
            vm_state: Some(vs::PAUSED.into()),
            power_state: Some(ps::PAUSED as i64),
            ..Default::default()
        },
    )
    .await;
    api_task(&cell, unpausing, ts::UNPAUSING).await;
    // The suspend never reached the guest.
    api_task(&cell, suspending, ts::SUSPENDING).await;
    // The soft reboot had started; the guest runs.
    api_task(&cell, rebooted, ts::REBOOTING).await;
    set(&cell, rebooted, task(ts::REBOOT_STARTED)).await;
    // The start never reached the stopped guest.
    drv.perform(starting, &GuestOp::PowerOff).await.unwrap();
    set(
        &cell,
        starting,
        InstanceChange {
            vm_state: Some(vs::STOPPED.into()),
            power_state: Some(ps::SHUTDOWN as i64),
            ..Default::default()
        },
    )
    .await;
    api_task(&cell, starting, ts::POWERING_ON).await;
    api_task(&cell, rebuilding, ts::REBUILDING).await;
    set(&cell, rebuilding, task(ts::REBUILD_SPAWNING)).await;
    // A stop whose guest is gone.
    api_task(&cell, no_guest, ts::POWERING_OFF).await;
    drv.destroy(no_guest).await.unwrap();
    // A build cast to host1 while it is down, its row already naming host1.
    let (queued, _) = cell.boot("host1", &[]).await;
    api_host(&cell, queued, "host1").await;

    restart_host1(&mut cell, node1).await;
    let guest = |uuid| cell.hv.guest_power_state("host1", uuid);
    let state = |row: &cell_conductor::db::instances::InstanceRow| {
        (
            row.vm_state.clone().unwrap_or_default(),
            row.task_state.clone(),
            row.power_state,
        )
    };
    let expect = |vm: &str, power: i32| (vm.to_owned(), None, Some(power as i64));

    assert_eq!(
        state(&cell.instance(paused).await),
        expect(vs::PAUSED, ps::PAUSED)
    );
    assert_eq!(guest(paused), Some(ps::PAUSED));
    assert_eq!(
        state(&cell.instance(unpausing).await),
        expect(vs::ACTIVE, ps::RUNNING)
    );
    assert_eq!(guest(unpausing), Some(ps::RUNNING));
    assert_eq!(
        state(&cell.instance(suspending).await),
        expect(vs::ACTIVE, ps::RUNNING)
    );
    assert_eq!(
        state(&cell.instance(rebooted).await),
        expect(vs::ACTIVE, ps::RUNNING)
    );
    assert_eq!(
        state(&cell.instance(starting).await),
        expect(vs::ACTIVE, ps::RUNNING)
    );
    assert_eq!(guest(starting), Some(ps::RUNNING));
    let row = cell.instance(rebuilding).await;
    assert_eq!(row.vm_state.as_deref(), Some(vs::ERROR), "{row:?}");
    assert_eq!(row.task_state, None);
    let faults = cell.db.faults(rebuilding).await.unwrap();
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert!(faults[0]
        .message
        .as_deref()
        .unwrap_or_default()
        .starts_with("Rebuild of instance"));
    let row = cell.instance(no_guest).await;
    assert_eq!(row.task_state, None, "{row:?}");
    assert_eq!(row.power_state, Some(ps::NOSTATE as i64));
    assert!(!row.deleted);
    // The queued build was not touched by the reconciliation, and runs.
    let row = cell
        .wait_for(queued, "active", |r| {
            r.vm_state.as_deref() == Some(vs::ACTIVE)
        })
        .await;
    assert!(cell.db.faults(queued).await.unwrap().is_empty(), "{row:?}");
    assert_eq!(guest(queued), Some(ps::RUNNING));
    cell.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_settles_actions_embedded() {
    let (db, bus) = crate::embedded::backends("init_host_restart_settles_actions");
    restart_settles_actions(&db.url, bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_amqp_restart_settles_actions() {
    let Some((db, bus)) = crate::real::backends("init_host_actions").await else {
        return;
    };
    restart_settles_actions(&db.url, bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_reconciles_embedded() {
    let (db, bus) = crate::embedded::backends("init_host_restart_reconciles");
    restart_reconciles(&db.url, bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_amqp_restart_reconciles() {
    let Some((db, bus)) = crate::real::backends("init_host").await else {
        return;
    };
    restart_reconciles(&db.url, bus).await;
}

/// A hypervisor that cannot list its guests at start-up is not taken for
/// an empty one: the reconciliation is skipped and changes nothing (here
/// an instance whose guest really vanished keeps its power state, and one
/// left in `deleting` stays so), and the host still starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlistable_hypervisor_changes_nothing_embedded() {
    let (db, bus) = crate::embedded::backends("init_host_unlistable");
    let mut cell = Cell::start(&db.url, bus, FakeHypervisor::automatic(Duration::ZERO), 1).await;
    let (vanished, _) = cell.boot("host1", &[]).await;
    let (deleting, _) = cell.boot("host1", &[]).await;
    for uuid in [vanished, deleting] {
        cell.wait_for(uuid, "active", |r| {
            r.vm_state.as_deref() == Some(vs::ACTIVE)
        })
        .await;
    }
    let node1 = cell.stop_host("host1").await;
    cell.hv.driver("host1").destroy(vanished).await.unwrap();
    api_task(&cell, deleting, ts::DELETING).await;
    cell.hv.fail_listing("host1", "hypervisor unreachable");
    restart_host1(&mut cell, node1).await;
    let row = cell.instance(vanished).await;
    assert_eq!(row.power_state, Some(ps::RUNNING as i64), "{row:?}");
    assert_eq!(row.vm_state.as_deref(), Some(vs::ACTIVE), "{row:?}");
    let row = cell.instance(deleting).await;
    assert_eq!(row.task_state.as_deref(), Some(ts::DELETING), "{row:?}");
    assert!(!row.deleted, "{row:?}");
    cell.stop().await;
}
