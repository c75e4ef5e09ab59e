//! `instance_update_steps`: a compute's build steps with no work between
//! them in one call. Each step is applied and committed in order with its
//! events; a repeat of a batch whose reply was lost (all or only some of
//! its steps applied) applies the rest and nothing twice; a refused step
//! ends the batch with its refusal. On SQLite, and on PostgreSQL (skipped
//! without it unless REQUIRE_REAL_BACKENDS=1).

use std::sync::Arc;
use std::time::Duration;

use cell_conductor::db::actions::EventRow;
use cell_conductor::model::InstanceChange;
use cell_conductor::CellDb;
use fabric::bus::{inproc::InprocTransport, Transport};
use fabric::ids::InstanceUuid;
use fabric::rpc::{self, action, code, method, task_state as ts, RequestIds, CONDUCTOR_QUEUE};

/// An event of the build's create action (`req-1`, as the instance's).
fn event(uuid: InstanceUuid, name: &str, phase: rpc::EventPhase) -> rpc::ActionEvent {
    rpc::ActionEvent {
        instance_uuid: uuid.to_string(),
        action: action::CREATE.to_owned(),
        event: name.to_owned(),
        host: "host1".into(),
        request_id: "req-1".into(),
        global_request_id: "greq-1".into(),
        phase: phase as i32,
        result: match phase {
            rpc::EventPhase::Finish => action::SUCCESS.to_owned(),
            _ => String::new(),
        },
        at_unix_ms: chrono::Utc::now().timestamp_millis() as u64,
        ..Default::default()
    }
}

/// The three steps a compute sends before it spawns, each with its key.
fn build_steps(uuid: InstanceUuid) -> Vec<rpc::InstanceUpdate> {
    use rpc::EventPhase::{Finish, Start};
    let step = |to: &str, from: &str, events: Vec<rpc::ActionEvent>| rpc::InstanceUpdate {
        instance_uuid: uuid.to_string(),
        task_state: rpc::NullableString::set(to),
        expected_task_states: vec![from.to_owned()],
        events,
        update_id: uuid::Uuid::new_v4().to_string(),
        ..Default::default()
    };
    vec![
        step(
            ts::BLOCK_DEVICE_MAPPING,
            ts::SCHEDULING,
            vec![event(uuid, action::EV_BLOCK_DEVICE_MAPPING, Start)],
        ),
        step(
            ts::NETWORKING,
            ts::BLOCK_DEVICE_MAPPING,
            vec![
                event(uuid, action::EV_BLOCK_DEVICE_MAPPING, Finish),
                event(uuid, action::EV_NETWORKING, Start),
            ],
        ),
        step(
            ts::SPAWNING,
            ts::NETWORKING,
            vec![
                event(uuid, action::EV_NETWORKING, Finish),
                event(uuid, action::EV_SPAWN, Start),
            ],
        ),
    ]
}

async fn call<Req: prost::Message, Resp: prost::Message + Default>(
    bus: &Arc<dyn Transport>,
    m: &str,
    req: &Req,
) -> Result<Resp, rpc::RpcError> {
    rpc::call(
        bus.as_ref(),
        CONDUCTOR_QUEUE,
        m,
        req,
        &RequestIds::default(),
        Duration::from_secs(10),
    )
    .await
}

async fn steps(
    bus: &Arc<dyn Transport>,
    steps: Vec<rpc::InstanceUpdate>,
) -> Result<rpc::InstanceRecord, rpc::RpcError> {
    call(
        bus,
        method::INSTANCE_UPDATE_STEPS,
        &rpc::InstanceSteps { steps },
    )
    .await
}

/// Each event of the steps exactly once: bdm and networking finished,
/// spawn started.
async fn assert_events_once(db: &CellDb, uuid: InstanceUuid) {
    let events: Vec<EventRow> = db.events(uuid).await.unwrap();
    for (name, finished) in [
        (action::EV_BLOCK_DEVICE_MAPPING, true),
        (action::EV_NETWORKING, true),
        (action::EV_SPAWN, false),
    ] {
        let found: Vec<_> = events.iter().filter(|e| e.event == name).collect();
        assert_eq!(found.len(), 1, "{name} once: {events:?}");
        assert_eq!(found[0].finish_time.is_some(), finished, "{events:?}");
    }
}

/// What a delete does first: task state `deleting`, whatever it was.
async fn set_deleting(db: &CellDb, uuid: InstanceUuid) {
    db.update_instance(
        uuid,
        &InstanceChange {
            task_state: Some(Some(ts::DELETING.to_owned())),
            ..Default::default()
        },
    )
    .await
    .unwrap();
}

async fn steps_scenario(url: &str) {
    let bus: Arc<dyn Transport> = Arc::new(InprocTransport::new());
    let conductor =
        cell_conductor::run_with(cell_conductor::ConductorOptions::new(url, bus.clone()))
            .await
            .expect("conductor");
    let db = conductor.db().clone();

    // The batch: every step applied in order, each with its events.
    let uuid = crate::repeat::instance(&db).await;
    let batch = build_steps(uuid);
    let rec = steps(&bus, batch.clone()).await.expect("steps applied");
    assert_eq!(rec.task_state.as_deref(), Some(ts::SPAWNING), "{rec:?}");
    assert_events_once(&db, uuid).await;
    // Its reply lost, the same batch again: the row, nothing applied twice.
    let again = steps(&bus, batch).await.expect("a repeat is answered");
    assert_eq!(again, rec);
    assert_events_once(&db, uuid).await;

    // Only the first step applied before the reply was lost (step 1 is the
    // last applied update: recognised as a repeat, the rest applied).
    // Then the first two.
    for applied in [1, 2] {
        let uuid = crate::repeat::instance(&db).await;
        let batch = build_steps(uuid);
        for s in &batch[..applied] {
            let _: rpc::InstanceRecord = call(&bus, method::INSTANCE_UPDATE, s)
                .await
                .expect("step applied alone");
        }
        let rec = steps(&bus, batch).await.expect("the rest applied");
        assert_eq!(rec.task_state.as_deref(), Some(ts::SPAWNING), "{rec:?}");
        assert_events_once(&db, uuid).await;
    }

    // A step that is refused ends the batch with its refusal: the instance
    // is being deleted, nothing of the batch is written.
    let uuid = crate::repeat::instance(&db).await;
    set_deleting(&db, uuid).await;
    let err = steps(&bus, build_steps(uuid))
        .await
        .expect_err("refused while deleting");
    assert_eq!(
        err.remote_code(),
        Some(code::UNEXPECTED_TASK_STATE),
        "{err:?}"
    );
    let row = db.instance(uuid).await.unwrap().unwrap();
    assert_eq!(row.task_state.as_deref(), Some(ts::DELETING));
    assert!(db.events(uuid).await.unwrap().is_empty());

    // A refusal after applied steps is not taken for a repeat: the first
    // step applied, then the instance deleted; the batch's second step is
    // refused (the last key on the row is no longer one of the batch's).
    let uuid = crate::repeat::instance(&db).await;
    let batch = build_steps(uuid);
    let _: rpc::InstanceRecord = call(&bus, method::INSTANCE_UPDATE, &batch[0])
        .await
        .unwrap();
    set_deleting(&db, uuid).await;
    let err = steps(&bus, batch).await.expect_err("refused");
    assert_eq!(
        err.remote_code(),
        Some(code::UNEXPECTED_TASK_STATE),
        "{err:?}"
    );

    // Bad requests: no steps, more than the most, two instances.
    let err = steps(&bus, vec![]).await.expect_err("no steps");
    assert_eq!(err.remote_code(), Some(code::BAD_REQUEST), "{err:?}");
    let many = (0..=rpc::MAX_INSTANCE_STEPS)
        .map(|_| build_steps(uuid)[0].clone())
        .collect();
    let err = steps(&bus, many).await.expect_err("too many");
    assert_eq!(err.remote_code(), Some(code::BAD_REQUEST), "{err:?}");
    let other = crate::repeat::instance(&db).await;
    let mut mixed = build_steps(uuid);
    mixed[1].instance_uuid = other.to_string();
    let err = steps(&bus, mixed).await.expect_err("two instances");
    assert_eq!(err.remote_code(), Some(code::BAD_REQUEST), "{err:?}");
    let row = db.instance(other).await.unwrap().unwrap();
    assert_eq!(row.task_state.as_deref(), Some(ts::SCHEDULING));
    conductor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_apply_in_order_and_a_repeated_batch_applies_only_the_rest() {
    let (db, _) = crate::embedded::backends("steps_in_order");
    steps_scenario(&db.url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_steps_apply_in_order_and_a_repeated_batch_applies_only_the_rest() {
    let Some(pg) = testkit::postgres("conductor_steps").await else {
        return;
    };
    steps_scenario(&pg.url).await;
}
