//! The healing loop (issue 31): builds on a dead host are re-driven to an
//! alternate or end in ERROR with a fault naming the host, casts that
//! expired unread are re-driven, builds past the timeout end in ERROR, and
//! a stale cast is never replayed when its host comes back. Each on the
//! embedded backends and on PostgreSQL + RabbitMQ.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cell_conductor::db::instances::InstanceRow;
use cell_conductor::placement::PlacementClient;
use cell_conductor::{CellDb, ConductorOptions};
use compute::driver::fake::FakeHypervisor;
use compute::HostConfig;
use fabric::bus::Transport;
use fabric::ids::InstanceUuid;
use fabric::rpc::{task_state as ts, vm_state as vs};
use fabric::rpc::{BuildAndRunInstance, RequestIds};
use prost::Message;

use crate::common::Cell;

/// Fast healing: a host silent for 2 s is down; passes every 200 ms.
fn fast(o: &mut ConductorOptions) {
    o.heal.interval = Duration::from_millis(200);
    o.heal.service_down_time = Duration::from_secs(2);
    o.heal.cast_grace = Duration::from_secs(1);
}

async fn start(db_url: &str, bus: Arc<dyn Transport>, hosts: usize) -> Cell {
    Cell::start_tuned(
        db_url,
        bus.clone(),
        bus,
        FakeHypervisor::automatic(Duration::from_millis(20)),
        hosts,
        fast,
    )
    .await
}

/// What the super-conductor does when a build lands: the instance row on
/// `host`, the claim there, the recorded cast (expiring at `expires`), and
/// the cast itself when `cast`.
async fn land(
    cell: &Cell,
    host: &str,
    alternates: &[&str],
    expires: chrono::DateTime<chrono::Utc>,
    cast: bool,
) -> InstanceUuid {
    let (uuid, ids, build) = cell.land(host, alternates).await;
    cell.db
        .record_build_cast(
            &uuid.to_string(),
            host,
            &build.encode_to_vec(),
            &ids.request_id,
            &ids.global_request_id,
            expires,
        )
        .await
        .expect("record the cast");
    if cast {
        cell.cast_build(host, &build, &ids).await;
    }
    uuid
}

fn in_a_minute() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now() + chrono::Duration::seconds(60)
}

fn active(r: &InstanceRow) -> bool {
    r.vm_state.as_deref() == Some(vs::ACTIVE) && r.task_state.is_none()
}

fn error(r: &InstanceRow) -> bool {
    r.vm_state.as_deref() == Some(vs::ERROR)
}

/// A build cast to a host that died goes to its alternate and ends ACTIVE
/// there, within 15 s of the cast; its claim moves with it and its
/// recorded cast is forgotten.
pub async fn dead_host_build_goes_to_the_alternate(db_url: &str, bus: Arc<dyn Transport>) {
    let mut cell = start(db_url, bus, 2).await;
    // The healing trusts silence only once it has seen every host.
    tokio::time::sleep(Duration::from_secs(3)).await;
    cell.stop_host("host1").await;
    let t = Instant::now();
    let uuid = land(&cell, "host1", &["host2"], in_a_minute(), true).await;
    let row = cell
        .wait_for_up_to(uuid, "ACTIVE on host2", Duration::from_secs(15), active)
        .await;
    let took = t.elapsed();
    assert_eq!(row.host.as_deref(), Some("host2"), "{row:?}");
    let (provider, _) = cell.placement.allocation(uuid).expect("claim kept");
    assert_eq!(provider, cell.provider("host2"), "the claim moved");
    assert!(
        cell.hv.guests("host1").is_empty(),
        "nothing ran on the dead host"
    );
    assert_eq!(cell.hv.guests("host2"), vec![uuid]);
    eprintln!("recovered to the alternate in {took:?}");
    // A later pass forgets the cast of the finished build.
    let deadline = Instant::now() + Duration::from_secs(10);
    while cell
        .db
        .build_cast(&uuid.to_string())
        .await
        .unwrap()
        .is_some()
    {
        assert!(Instant::now() < deadline, "the cast is never forgotten");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cell.stop().await;
}

/// A build forced onto a dead host (no alternates) ends in ERROR with a
/// fault that names the host and why, and its claim is gone.
pub async fn dead_forced_host_build_ends_in_error(db_url: &str, bus: Arc<dyn Transport>) {
    let mut cell = start(db_url, bus, 2).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    cell.stop_host("host1").await;
    let t = Instant::now();
    let uuid = land(&cell, "host1", &[], in_a_minute(), true).await;
    cell.wait_for_up_to(uuid, "ERROR", Duration::from_secs(15), error)
        .await;
    eprintln!("ended in ERROR in {:?}", t.elapsed());
    let faults = cell.db.faults(uuid).await.unwrap();
    assert!(
        faults.iter().any(|f| {
            let m = f.message.as_deref().unwrap_or_default();
            m.contains("host1") && m.contains("down") && f.host.as_deref() == Some("host1")
        }),
        "a fault names the host and the reason: {faults:?}"
    );
    assert_eq!(cell.placement.allocation(uuid), None, "the claim is freed");
    cell.stop().await;
}

/// A live host whose cast never arrived (lost): once the recorded cast has
/// expired, the build is re-driven to the alternate.
pub async fn lost_cast_is_re_driven(db_url: &str, bus: Arc<dyn Transport>) {
    let cell = start(db_url, bus, 2).await;
    let expired = chrono::Utc::now() - chrono::Duration::seconds(5);
    let uuid = land(&cell, "host1", &["host2"], expired, false).await;
    let row = cell
        .wait_for_up_to(uuid, "ACTIVE on host2", Duration::from_secs(15), active)
        .await;
    assert_eq!(row.host.as_deref(), Some("host2"), "{row:?}");
    cell.stop().await;
}

/// The stale cast in a dead host's queue is not replayed when the host
/// comes back: the build went to the alternate, and the first build step
/// is fenced on the host.
pub async fn stale_cast_is_not_replayed(db_url: &str, bus: Arc<dyn Transport>) {
    let mut cell = start(db_url, bus.clone(), 2).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    cell.stop_host("host1").await;
    let uuid = land(&cell, "host1", &["host2"], in_a_minute(), true).await;
    cell.wait_for_up_to(uuid, "ACTIVE on host2", Duration::from_secs(15), active)
        .await;
    // host1 comes back and reads its queue, the old cast in it.
    let mut cfg = HostConfig::new("host1");
    cfg.heartbeat_interval = Duration::from_millis(100);
    let back = compute::start_host(
        cfg,
        bus,
        cell.hv.driver("host1"),
        Arc::new(cell.inventory.clone()),
    );
    tokio::time::timeout(Duration::from_secs(20), back.ready())
        .await
        .expect("host1 ready in time")
        .expect("host1 ready");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let row = cell.instance(uuid).await;
    assert!(
        active(&row) && row.host.as_deref() == Some("host2"),
        "{row:?}"
    );
    assert!(
        cell.hv.guests("host1").is_empty(),
        "the stale build did not run"
    );
    // The fence itself: a build cast to host1 for an instance the conductor
    // has on host2, still waiting there, is refused by host1.
    let elsewhere = land(&cell, "host2", &[], in_a_minute(), false).await;
    let build = cell
        .db
        .build_cast(&elsewhere.to_string())
        .await
        .unwrap()
        .expect("cast");
    let msg = BuildAndRunInstance::decode(build.message.as_slice()).unwrap();
    cell.cast_build("host1", &msg, &RequestIds::default()).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let row = cell.instance(elsewhere).await;
    assert_eq!(row.host.as_deref(), Some("host2"), "{row:?}");
    assert_eq!(row.task_state.as_deref(), Some(ts::SCHEDULING), "{row:?}");
    assert!(cell.hv.guests("host1").is_empty(), "host1 did not take it");
    back.shutdown().await;
    cell.stop().await;
}

/// A build past the build timeout ends in ERROR with a fault saying so,
/// and its claim is freed.
pub async fn build_timeout_ends_a_build(db_url: &str, bus: Arc<dyn Transport>) {
    let cell = Cell::start_tuned(
        db_url,
        bus.clone(),
        bus,
        FakeHypervisor::explicit(),
        1,
        |o| {
            fast(o);
            o.heal.build_timeout = Duration::from_secs(2);
        },
    )
    .await;
    // The explicit fake hypervisor holds the spawn until told: the build
    // stays in `spawning` on a live host.
    let uuid = land(&cell, "host1", &[], in_a_minute(), true).await;
    cell.wait_for(uuid, "spawning", |r| {
        r.task_state.as_deref() == Some(ts::SPAWNING)
    })
    .await;
    cell.wait_for_up_to(uuid, "ERROR", Duration::from_secs(10), error)
        .await;
    let faults = cell.db.faults(uuid).await.unwrap();
    assert!(
        faults.iter().any(|f| f
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("timed out")),
        "{faults:?}"
    );
    assert_eq!(cell.placement.allocation(uuid), None, "the claim is freed");
    cell.stop().await;
}

/// Tasks a dead host holds are let go: its delete finishes (deleted, claim
/// gone), a power action's task state goes back to none.
pub async fn tasks_held_by_a_dead_host_are_let_go(db_url: &str, bus: Arc<dyn Transport>) {
    let mut cell = start(db_url, bus, 2).await;
    let (stopping, _) = cell.boot("host1", &[]).await;
    let (deleting, _) = cell.boot("host1", &[]).await;
    for uuid in [stopping, deleting] {
        cell.wait_for(uuid, "ACTIVE", active).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    cell.stop_host("host1").await;
    // What the API writes before its cast (which nobody will read).
    for (uuid, task) in [(stopping, ts::POWERING_OFF), (deleting, ts::DELETING)] {
        let sql = "UPDATE instances SET task_state = $1 WHERE uuid = $2 AND task_state IS NULL";
        let n = match &cell.db {
            CellDb::Pg(stash) => sqlx::query(sql)
                .bind(task)
                .bind(uuid.to_string())
                .execute(stash.pool())
                .await
                .unwrap()
                .rows_affected(),
            CellDb::Sqlite(p) => sqlx::query(sql)
                .bind(task)
                .bind(uuid.to_string())
                .execute(p)
                .await
                .unwrap()
                .rows_affected(),
        };
        assert_eq!(n, 1);
    }
    let row = cell
        .wait_for_up_to(stopping, "task state none", Duration::from_secs(15), |r| {
            r.task_state.is_none()
        })
        .await;
    assert_eq!(row.vm_state.as_deref(), Some(vs::ACTIVE), "{row:?}");
    cell.wait_for_up_to(deleting, "deleted", Duration::from_secs(15), |r| r.deleted)
        .await;
    assert_eq!(
        cell.placement.allocation(deleting),
        None,
        "the claim is freed"
    );
    assert!(
        cell.placement.allocation(stopping).is_some(),
        "a live server keeps its claim"
    );
    cell.stop().await;
}

/// The placement audit: a missing allocation of an ACTIVE server is put
/// back, one left on the wrong node is moved to the server's node, and an
/// orphan (no instance) is removed once seen twice.
pub async fn placement_is_reconciled(db_url: &str, bus: Arc<dyn Transport>) {
    let cell = Cell::start_tuned(
        db_url,
        bus.clone(),
        bus,
        FakeHypervisor::automatic(Duration::from_millis(20)),
        2,
        |o| {
            fast(o);
            o.heal.audit_interval = Duration::from_millis(300);
        },
    )
    .await;
    let (missing, _) = cell.boot("host1", &[]).await;
    let (misplaced, _) = cell.boot("host1", &[]).await;
    for uuid in [missing, misplaced] {
        cell.wait_for(uuid, "ACTIVE", active).await;
    }
    let (p1, p2) = (cell.provider("host1"), cell.provider("host2"));
    let (_, res) = cell.placement.allocation(missing).expect("claimed");
    // What went wrong elsewhere: a lost allocation, one on the wrong
    // node, and one of a consumer that is no instance at all.
    cell.placement.delete_allocations(missing).await.unwrap();
    cell.placement.claim(misplaced, p2, res);
    let orphan = InstanceUuid::new_random();
    cell.placement.claim(orphan, p2, res);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let fixed = cell.placement.allocation(missing).map(|a| a.0) == Some(p1)
            && cell.placement.allocation(misplaced).map(|a| a.0) == Some(p1)
            && cell.placement.allocation(orphan).is_none();
        if fixed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not reconciled: missing {:?}, misplaced {:?}, orphan {:?}",
            cell.placement.allocation(missing),
            cell.placement.allocation(misplaced),
            cell.placement.allocation(orphan)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cell.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_is_reconciled_embedded() {
    let (db, bus) = crate::embedded::backends("heal_placement_audit");
    placement_is_reconciled(&db.url, bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_held_by_a_dead_host_are_let_go_embedded() {
    let (db, bus) = crate::embedded::backends("heal_held_tasks");
    tasks_held_by_a_dead_host_are_let_go(&db.url, bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_amqp_tasks_held_by_a_dead_host_are_let_go() {
    let Some((db, bus)) = crate::real::backends("heal_held_tasks").await else {
        return;
    };
    tasks_held_by_a_dead_host_are_let_go(&db.url, bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_host_build_goes_to_the_alternate_embedded() {
    let (db, bus) = crate::embedded::backends("heal_dead_alt");
    dead_host_build_goes_to_the_alternate(&db.url, bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_forced_host_build_ends_in_error_embedded() {
    let (db, bus) = crate::embedded::backends("heal_dead_forced");
    dead_forced_host_build_ends_in_error(&db.url, bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_cast_is_re_driven_embedded() {
    let (db, bus) = crate::embedded::backends("heal_lost_cast");
    lost_cast_is_re_driven(&db.url, bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_cast_is_not_replayed_embedded() {
    let (db, bus) = crate::embedded::backends("heal_stale_cast");
    stale_cast_is_not_replayed(&db.url, bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_timeout_ends_a_build_embedded() {
    let (db, bus) = crate::embedded::backends("heal_timeout");
    build_timeout_ends_a_build(&db.url, bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_amqp_dead_host_build_goes_to_the_alternate() {
    let Some((db, bus)) = crate::real::backends("heal_dead_alt").await else {
        return;
    };
    dead_host_build_goes_to_the_alternate(&db.url, bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_amqp_dead_forced_host_build_ends_in_error() {
    let Some((db, bus)) = crate::real::backends("heal_dead_forced").await else {
        return;
    };
    dead_forced_host_build_ends_in_error(&db.url, bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_amqp_stale_cast_is_not_replayed() {
    let Some((db, bus)) = crate::real::backends("heal_stale_cast").await else {
        return;
    };
    stale_cast_is_not_replayed(&db.url, bus).await;
}
