//! Instance updates on PostgreSQL: the steps of a build are one statement
//! each (`UpdatePath::SingleStatement`), and leave exactly the rows the
//! transaction way leaves (the same steps on SQLite, which has only that
//! way); everything the statement does not cover — a repeat, a refused
//! change, a failed event — goes the transaction way with its answers, and
//! a refused change writes nothing.

use cell_conductor::db::actions::EventRow;
use cell_conductor::db::instances::{InstanceRow, NewInstance, UpdatePath};
use cell_conductor::model::{fold_steps, Event, InstanceChange, Phase};
use cell_conductor::{CellDb, ConductorError};
use chrono::{DateTime, TimeZone, Utc};
use fabric::ids::InstanceUuid;
use fabric::rpc::{self, task_state as ts, vm_state as vs, ComputeNodeUpdate};

const HOST: &str = "host1";

fn at(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(1_800_000_000_000 + ms).unwrap()
}

fn event(uuid: InstanceUuid, name: &str, phase: Phase, ms: i64) -> Event {
    Event {
        instance: uuid,
        action: rpc::action::CREATE.into(),
        event: name.into(),
        host: Some(HOST.into()),
        request_id: "req-1".into(),
        global_request_id: Some("greq-1".into()),
        phase,
        result: (phase == Phase::Finish).then(|| rpc::action::SUCCESS.into()),
        traceback: None,
        details: None,
        at: at(ms),
    }
}

fn step(
    uuid: InstanceUuid,
    from: &str,
    to: Option<&str>,
    finish: Option<&str>,
    start: &[&str],
    n: i64,
) -> InstanceChange {
    let mut events = Vec::new();
    if let Some(f) = finish {
        events.push(event(uuid, f, Phase::Finish, n * 10));
    }
    for s in start {
        events.push(event(uuid, s, Phase::Start, n * 10 + 1));
    }
    InstanceChange {
        task_state: Some(to.map(str::to_owned)),
        expected: vec![Some(from.to_owned())],
        events,
        update_id: Some(format!("00000000-0000-0000-0000-00000000000{n}")),
        ..Default::default()
    }
}

/// The four steps of a build, as the compute agent sends them.
fn build_steps(uuid: InstanceUuid) -> Vec<InstanceChange> {
    let mut first = step(
        uuid,
        ts::SCHEDULING,
        Some(ts::BLOCK_DEVICE_MAPPING),
        None,
        &[rpc::action::EV_BUILD, rpc::action::EV_BLOCK_DEVICE_MAPPING],
        1,
    );
    first.vm_state = Some(vs::BUILDING.into());
    first.host = Some(Some(HOST.into()));
    first.node = Some(Some(HOST.into()));
    let mut last = step(
        uuid,
        ts::SPAWNING,
        None,
        Some(rpc::action::EV_SPAWN),
        &[],
        4,
    );
    last.vm_state = Some(vs::ACTIVE.into());
    last.power_state = Some(1);
    last.launched_at = Some(at(45));
    last.launched_on = Some(HOST.into());
    last.progress = Some(100);
    last.events
        .push(event(uuid, rpc::action::EV_BUILD, Phase::Finish, 46));
    vec![
        first,
        step(
            uuid,
            ts::BLOCK_DEVICE_MAPPING,
            Some(ts::NETWORKING),
            Some(rpc::action::EV_BLOCK_DEVICE_MAPPING),
            &[rpc::action::EV_NETWORKING],
            2,
        ),
        step(
            uuid,
            ts::NETWORKING,
            Some(ts::SPAWNING),
            Some(rpc::action::EV_NETWORKING),
            &[rpc::action::EV_SPAWN],
            3,
        ),
        last,
    ]
}

async fn new_instance(db: &CellDb, uuid: InstanceUuid) {
    db.create_instance(&NewInstance {
        uuid,
        project_id: "p".into(),
        user_id: "u".into(),
        display_name: Some("vm".into()),
        flavor: rpc::FlavorResources {
            vcpus: 1,
            memory_mb: 512,
            root_gb: 1,
            ..Default::default()
        },
        image_ref: "img".into(),
        host: Some(HOST.into()),
        node: Some(HOST.into()),
        request_id: Some(("req-1".into(), "greq-1".into())),
    })
    .await
    .expect("create the instance");
}

async fn node(db: &CellDb) {
    db.register_service(HOST, rpc::COMPUTE_BINARY, "compute", 0)
        .await
        .expect("register");
    db.upsert_compute_node(&ComputeNodeUpdate {
        host: HOST.into(),
        hypervisor_hostname: HOST.into(),
        hypervisor_type: "fake".into(),
        uuid: "11111111-1111-1111-1111-111111111111".into(),
        vcpus: 8,
        memory_mb: 8192,
        local_gb: 100,
        ..Default::default()
    })
    .await
    .expect("node");
}

/// The rows a build leaves, without what differs between two instances.
fn comparable(row: &InstanceRow, events: &[EventRow]) -> (InstanceRow, Vec<EventRow>) {
    let mut row = row.clone();
    row.uuid.clear();
    (row, events.to_vec())
}

/// Runs the build on `db`: the paths taken, the final row and the events.
async fn walk(db: &CellDb, uuid: InstanceUuid) -> (Vec<UpdatePath>, InstanceRow, Vec<EventRow>) {
    new_instance(db, uuid).await;
    let mut paths = Vec::new();
    let mut row = None;
    for (i, s) in build_steps(uuid).iter().enumerate() {
        let last = i == 3;
        let u = db.apply_update(uuid, s, last).await.expect("step applies");
        if last {
            if u.path == UpdatePath::SingleStatement {
                assert_eq!(u.node_failed_builds, Some(0), "read with the update");
            } else {
                assert_eq!(u.node_failed_builds, None);
            }
        }
        paths.push(u.path);
        row = Some(u.row);
    }
    let events = db.events(uuid).await.expect("events");
    (paths, row.unwrap(), events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_steps_are_one_statement_each_on_postgres_with_the_same_rows() {
    let Some(pg) = testkit::postgres("conductor_single_update").await else {
        return;
    };
    let lite = testkit::sqlite("conductor_single_update");
    let pg = CellDb::open(&pg.url, 4).await.expect("open pg");
    let lite = CellDb::open(&lite.url, 1).await.expect("open sqlite");
    node(&pg).await;
    node(&lite).await;

    let a = InstanceUuid::new_random();
    let (paths, row, events) = walk(&pg, a).await;
    assert_eq!(paths, vec![UpdatePath::SingleStatement; 4]);
    let (lpaths, lrow, levents) = walk(&lite, a).await;
    assert_eq!(lpaths, vec![UpdatePath::Transaction; 4]);
    assert_eq!(row.vm_state.as_deref(), Some(vs::ACTIVE));
    assert_eq!(row.task_state, None);
    assert_eq!(row.host.as_deref(), Some(HOST));
    assert_eq!(
        comparable(&row, &events),
        comparable(&lrow, &levents),
        "the single statements leave what the transactions leave"
    );
    // Every event of the build started and finished once, in order.
    let names: Vec<_> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(
        names,
        [
            rpc::action::EV_BUILD,
            rpc::action::EV_BLOCK_DEVICE_MAPPING,
            rpc::action::EV_NETWORKING,
            rpc::action::EV_SPAWN
        ]
    );
    assert!(events
        .iter()
        .all(|e| e.finish_time.is_some() && e.result.as_deref() == Some(rpc::action::SUCCESS)));

    // A repeat of the last update (its reply was lost): the transaction
    // way recognises it, answers the row, records nothing again.
    let steps = build_steps(a);
    let again = pg.apply_update(a, &steps[3], true).await.expect("repeat");
    assert_eq!(again.path, UpdatePath::Transaction);
    assert_eq!(again.row, row);
    assert_eq!(pg.events(a).await.unwrap(), events);

    // A change from a state the instance is not in: refused with the
    // precise error, nothing written.
    let b = InstanceUuid::new_random();
    new_instance(&pg, b).await;
    let before = pg.instance(b).await.unwrap().unwrap();
    let err = pg
        .apply_update(b, &build_steps(b)[1], false)
        .await
        .expect_err("not in block_device_mapping");
    assert!(
        matches!(err, ConductorError::UnexpectedTaskState { .. }),
        "{err:?}"
    );
    assert_eq!(pg.instance(b).await.unwrap().unwrap(), before);
    assert_eq!(pg.events(b).await.unwrap().len(), 0, "no event recorded");

    // Another host's instance (expected_host): refused, nothing written.
    let mut other = build_steps(b)[0].clone();
    other.expected_host = Some("host9".into());
    let err = pg.apply_update(b, &other, false).await.expect_err("host");
    assert!(
        matches!(err, ConductorError::UnexpectedHost { .. }),
        "{err:?}"
    );
    assert_eq!(pg.instance(b).await.unwrap().unwrap(), before);

    // Being deleted: a build step may not follow.
    let deleting = InstanceChange {
        task_state: Some(Some(ts::DELETING.into())),
        ..Default::default()
    };
    assert_eq!(
        pg.apply_update(b, &deleting, false).await.unwrap().path,
        UpdatePath::Transaction,
        "no expected task states: the transaction way"
    );
    let err = pg
        .apply_update(b, &build_steps(b)[0], false)
        .await
        .expect_err("deleting");
    assert!(
        matches!(err, ConductorError::UnexpectedTaskState { .. }),
        "{err:?}"
    );
    assert_eq!(
        pg.instance(b).await.unwrap().unwrap().task_state.as_deref(),
        Some(ts::DELETING)
    );

    // A failed event marks its action failed: the transaction way.
    let c = InstanceUuid::new_random();
    new_instance(&pg, c).await;
    let mut failed = build_steps(c)[0].clone();
    failed.events[1].phase = Phase::Finish;
    failed.events[1].result = Some(rpc::action::ERROR.into());
    let u = pg.apply_update(c, &failed, false).await.expect("applies");
    assert_eq!(u.path, UpdatePath::Transaction);

    // A node with failed builds: the count comes back with the update.
    pg.record_build_failure(HOST, HOST).await.unwrap();
    pg.record_build_failure(HOST, HOST).await.unwrap();
    let d = InstanceUuid::new_random();
    new_instance(&pg, d).await;
    let steps = build_steps(d);
    for s in &steps[..3] {
        pg.apply_update(d, s, false).await.unwrap();
    }
    let u = pg.apply_update(d, &steps[3], true).await.unwrap();
    assert_eq!(u.path, UpdatePath::SingleStatement);
    assert_eq!(u.node_failed_builds, Some(2));
    pg.close().await;
    lite.close().await;
}

/// The build, its first three steps folded into one change (as the
/// conductor applies a compute's batch): the paths taken, the final row,
/// the events.
async fn walk_folded(
    db: &CellDb,
    uuid: InstanceUuid,
) -> (Vec<UpdatePath>, InstanceRow, Vec<EventRow>) {
    new_instance(db, uuid).await;
    let steps = build_steps(uuid);
    let folded = fold_steps(&steps[..3]).expect("the build's steps fold");
    let first = db.apply_update(uuid, &folded, false).await.expect("folded");
    assert_eq!(first.row.task_state.as_deref(), Some(ts::SPAWNING));
    let last = db
        .apply_update(uuid, &steps[3], true)
        .await
        .expect("active");
    let events = db.events(uuid).await.expect("events");
    (vec![first.path, last.path], last.row, events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn folded_build_steps_are_one_statement_on_postgres_with_the_rows_of_the_steps() {
    let Some(pg) = testkit::postgres("conductor_folded_steps").await else {
        return;
    };
    let lite = testkit::sqlite("conductor_folded_steps");
    let pg = CellDb::open(&pg.url, 4).await.expect("open pg");
    let lite = CellDb::open(&lite.url, 1).await.expect("open sqlite");
    node(&pg).await;
    node(&lite).await;

    // The steps one by one, then folded: the same row and events (each
    // event with the times its own step gave it), on both backends.
    let a = InstanceUuid::new_random();
    let (_, row, events) = walk(&pg, a).await;
    let b = InstanceUuid::new_random();
    let (paths, frow, fevents) = walk_folded(&pg, b).await;
    assert_eq!(paths, vec![UpdatePath::SingleStatement; 2]);
    assert_eq!(comparable(&frow, &fevents), comparable(&row, &events));
    let (lpaths, lrow, levents) = walk_folded(&lite, b).await;
    assert_eq!(lpaths, vec![UpdatePath::Transaction; 2]);
    assert_eq!(comparable(&lrow, &levents), comparable(&row, &events));
    let bdm = fevents
        .iter()
        .find(|e| e.event == rpc::action::EV_BLOCK_DEVICE_MAPPING)
        .expect("bdm event");
    assert_eq!(
        (bdm.start_time, bdm.finish_time),
        (Some(at(11)), Some(at(20)))
    );

    // A repeat of the folded change (its reply lost): recognised by the
    // last step's key, nothing written again.
    let c = InstanceUuid::new_random();
    new_instance(&pg, c).await;
    let folded = fold_steps(&build_steps(c)[..3]).unwrap();
    let once = pg.apply_update(c, &folded, false).await.unwrap();
    let evs = pg.events(c).await.unwrap();
    let again = pg.apply_update(c, &folded, false).await.expect("repeat");
    assert_eq!(again.path, UpdatePath::Transaction);
    assert_eq!(again.row, once.row);
    assert_eq!(pg.events(c).await.unwrap(), evs);

    // Not from the first step's state: refused whole, nothing written.
    let d = InstanceUuid::new_random();
    new_instance(&pg, d).await;
    pg.apply_update(d, &build_steps(d)[0], false).await.unwrap();
    let before = (pg.instance(d).await.unwrap(), pg.events(d).await.unwrap());
    let err = pg
        .apply_update(d, &fold_steps(&build_steps(d)[..3]).unwrap(), false)
        .await
        .expect_err("in block_device_mapping already");
    assert!(
        matches!(err, ConductorError::UnexpectedTaskState { .. }),
        "{err:?}"
    );
    assert_eq!(
        (pg.instance(d).await.unwrap(), pg.events(d).await.unwrap()),
        before
    );
    pg.close().await;
    lite.close().await;
}
