//! Copies of one instance update on PostgreSQL (skipped without it unless
//! REQUIRE_REAL_BACKENDS=1): a compute whose call timed out asks again
//! under the same `update_id` while the first copy may still be in the
//! conductor. Two copies that both read the row before either writes (a
//! test connection holds the row lock, so both wait at their UPDATE) apply
//! once and both answer the row; a request whose deadline passed while it
//! waited for a worker is not run at all.

use std::sync::Arc;
use std::time::Duration;

use cell_conductor::db::instances::NewInstance;
use cell_conductor::model::{Event, InstanceChange, Phase};
use cell_conductor::CellDb;
use fabric::bus::{inproc::InprocTransport, BusError, Transport};
use fabric::ids::InstanceUuid;
use fabric::rpc::{self, action, method, task_state as ts, RequestIds, RpcError, CONDUCTOR_QUEUE};

pub(crate) async fn instance(db: &CellDb) -> InstanceUuid {
    let uuid = InstanceUuid::new_random();
    db.create_instance(&NewInstance {
        uuid,
        project_id: "p1".into(),
        user_id: "u1".into(),
        display_name: Some("vm".into()),
        flavor: crate::common::flavor(),
        image_ref: "cirros".into(),
        host: Some("host1".into()),
        node: Some("host1".into()),
        request_id: Some(("req-1".into(), "greq-1".into())),
    })
    .await
    .expect("create instance");
    uuid
}

fn event(uuid: InstanceUuid, name: &str) -> Event {
    Event {
        instance: uuid,
        action: action::CREATE.to_owned(),
        event: name.to_owned(),
        host: Some("host1".into()),
        request_id: "req-1".into(),
        global_request_id: Some("greq-1".into()),
        phase: Phase::Start,
        result: None,
        traceback: None,
        details: None,
        at: chrono::Utc::now(),
    }
}

/// Applies `change` twice at once, both copies past their read when the
/// row lock is released; returns both answers.
async fn two_copies(
    db: &CellDb,
    url: &str,
    uuid: InstanceUuid,
    change: &InstanceChange,
) -> (
    cell_conductor::db::instances::InstanceRow,
    cell_conductor::db::instances::InstanceRow,
) {
    let mut lock = crate::common::lock_row(url, uuid).await;
    let copy = |db: CellDb, change: InstanceChange| {
        tokio::spawn(async move { db.update_instance(uuid, &change).await })
    };
    let first = copy(db.clone(), change.clone());
    let second = copy(db.clone(), change.clone());
    // Both copies read the row (a plain read does not wait for the lock)
    // and wait at their UPDATE.
    crate::common::lock_waiters(url, 2).await;
    sqlx::query("COMMIT").execute(&mut lock).await.unwrap();
    let a = first.await.unwrap().expect("the first copy is answered");
    let b = second.await.unwrap().expect("the second copy is answered");
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_two_concurrent_copies_of_an_update_apply_once() {
    let Some(pg) = testkit::postgres("conductor_repeat_concurrent").await else {
        return;
    };
    let db = CellDb::open(&pg.url, 4)
        .await
        .expect("open the cell database");

    // An update that leaves the task state as it is (the events of a
    // failed spawn): only the key tells the second copy it was applied.
    let uuid = instance(&db).await;
    let change = InstanceChange {
        events: vec![event(uuid, action::EV_SPAWN)],
        update_id: Some(uuid::Uuid::new_v4().to_string()),
        ..Default::default()
    };
    let (a, b) = two_copies(&db, &pg.url, uuid, &change).await;
    assert_eq!(a, b, "both copies answer the row");
    let events = db.events(uuid).await.unwrap();
    let spawn: Vec<_> = events
        .iter()
        .filter(|e| e.event == action::EV_SPAWN)
        .collect();
    assert_eq!(spawn.len(), 1, "the event recorded once: {events:?}");

    // An update that moves the task state: the second copy's UPDATE no
    // longer matches the task state it read either.
    let uuid = instance(&db).await;
    let change = InstanceChange {
        task_state: Some(Some(ts::BLOCK_DEVICE_MAPPING.to_owned())),
        expected: vec![Some(ts::SCHEDULING.to_owned())],
        events: vec![event(uuid, action::EV_BLOCK_DEVICE_MAPPING)],
        update_id: Some(uuid::Uuid::new_v4().to_string()),
        ..Default::default()
    };
    let (a, b) = two_copies(&db, &pg.url, uuid, &change).await;
    assert_eq!(
        a.task_state.as_deref(),
        Some(ts::BLOCK_DEVICE_MAPPING),
        "{a:?}"
    );
    assert_eq!(a, b, "both copies answer the row");
    let events = db.events(uuid).await.unwrap();
    let bdm: Vec<_> = events
        .iter()
        .filter(|e| e.event == action::EV_BLOCK_DEVICE_MAPPING)
        .collect();
    assert_eq!(bdm.len(), 1, "the event recorded once: {events:?}");
    db.close().await;
}

/// The update of a build's first step, from `scheduling`.
fn first_step(uuid: InstanceUuid) -> rpc::InstanceUpdate {
    rpc::InstanceUpdate {
        instance_uuid: uuid.to_string(),
        task_state: rpc::NullableString::set(ts::BLOCK_DEVICE_MAPPING),
        expected_task_states: vec![ts::SCHEDULING.to_owned()],
        update_id: uuid::Uuid::new_v4().to_string(),
        ..Default::default()
    }
}

/// A conductor with one worker, busy with an update that waits on a row
/// lock; a second update arrives and times out while it waits for the
/// worker. Once the worker is free the second update is dropped, not
/// applied: its caller stopped waiting (and may have asked again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_request_that_expired_waiting_for_a_worker_is_not_run() {
    let Some(pg) = testkit::postgres("conductor_expired_waiting").await else {
        return;
    };
    let bus: Arc<dyn Transport> = Arc::new(InprocTransport::new());
    let mut opts = cell_conductor::ConductorOptions::new(&pg.url, bus.clone());
    opts.concurrency = 1;
    let conductor = cell_conductor::run_with(opts).await.expect("conductor");
    let db = conductor.db().clone();
    let (busy, late) = (instance(&db).await, instance(&db).await);
    let mut lock = crate::common::lock_row(&pg.url, busy).await;
    let first = {
        let bus = bus.clone();
        tokio::spawn(async move {
            rpc::call::<_, rpc::InstanceRecord>(
                bus.as_ref(),
                CONDUCTOR_QUEUE,
                method::INSTANCE_UPDATE,
                &first_step(busy),
                &RequestIds::default(),
                Duration::from_secs(30),
            )
            .await
        })
    };
    crate::common::lock_waiters(&pg.url, 1).await;
    let err = rpc::call::<_, rpc::InstanceRecord>(
        bus.as_ref(),
        CONDUCTOR_QUEUE,
        method::INSTANCE_UPDATE,
        &first_step(late),
        &RequestIds::default(),
        Duration::from_millis(500),
    )
    .await
    .expect_err("the only worker is busy");
    assert!(
        matches!(err, RpcError::Bus(BusError::Timeout(_))),
        "{err:?}"
    );
    sqlx::query("COMMIT").execute(&mut lock).await.unwrap();
    let rec = first.await.unwrap().expect("the first update is answered");
    assert_eq!(rec.task_state.as_deref(), Some(ts::BLOCK_DEVICE_MAPPING));
    // The worker is free: give it time to take the expired request.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let row = db.instance(late).await.unwrap().expect("the instance");
    assert_eq!(
        row.task_state.as_deref(),
        Some(ts::SCHEDULING),
        "the expired update was not applied: {row:?}"
    );
    conductor.shutdown().await;
}
