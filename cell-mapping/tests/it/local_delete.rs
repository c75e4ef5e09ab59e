//! The API layer's local delete (`CellDb::api_local_delete`: the instance
//! marked deleted with the conductor's end state, its block device
//! mappings soft-deleted, the `delete` action and its `api_local_delete`
//! event, in one transaction) on SQLite and PostgreSQL.

use cell_mapping::db::instances::EV_API_LOCAL_DELETE;
use cell_mapping::db::server_actions::{ActionRecord, ActionsFilter};
use cell_mapping::db::{InstanceFlavor, NewCellInstance, Pool};
use cell_mapping::CellDb;
use chrono::Utc;

use crate::common::{cell_db, Be};

async fn exec(db: &CellDb, sql: &str, uuid: &str) {
    crate::common::exec(db.pool(), sql, &[uuid]).await;
}

async fn count(db: &CellDb, sql: &str, uuid: &str) -> i64 {
    match db.pool() {
        Pool::Postgres(p) => sqlx::query_scalar(sql).bind(uuid).fetch_one(p).await,
        Pool::Sqlite(p) => sqlx::query_scalar(sql).bind(uuid).fetch_one(p).await,
    }
    .expect(sql)
}

async fn create(db: &CellDb, host: Option<&str>) -> String {
    let uuid = uuid::Uuid::new_v4().to_string();
    db.create_api_instance(&building(&uuid, host))
        .await
        .expect("create");
    uuid
}

/// A building instance `uuid` on `host`, as the super-conductor writes it.
pub(crate) fn building(uuid: &str, host: Option<&str>) -> NewCellInstance {
    NewCellInstance {
        uuid: uuid.to_owned(),
        project_id: "p1".into(),
        user_id: "u1".into(),
        display_name: Some("vm".into()),
        flavor: InstanceFlavor {
            flavorid: "1".into(),
            name: "m1.tiny".into(),
            vcpus: 1,
            memory_mb: 512,
            root_gb: 1,
            ephemeral_gb: 0,
            swap: 0,
        },
        image_ref: "img-1".into(),
        host: host.map(str::to_owned),
        node: host.map(str::to_owned),
        availability_zone: None,
        created_at: Utc::now(),
        request_id: "req-create".into(),
        global_request_id: "g".into(),
        reservation_id: "r-1".into(),
        launch_index: 0,
        error: None,
        scheduled_from: None,
        metadata: Vec::new(),
        user_data: None,
        description: None,
        hostname: None,
        tags: Vec::new(),
        key_name: None,
        config_drive: false,
        key_data: None,
        access_ip_v4: None,
        access_ip_v6: None,
        trusted_certs: None,
    }
}

fn record(rid: &str) -> ActionRecord {
    ActionRecord {
        action: "delete".into(),
        request_id: rid.into(),
        global_request_id: format!("g-{rid}"),
        user_id: "u1".into(),
        project_id: "p1".into(),
    }
}

async fn flow(be: Be, name: &str) {
    let Some((db, _keep)) = cell_db(be, name).await else {
        return;
    };
    // An active instance on a host whose compute is down, with a root disk
    // mapping, left `deleting` by an earlier delete nobody consumed.
    let uuid = create(&db, Some("h1")).await;
    exec(
        &db,
        "UPDATE instances SET vm_state = 'active', task_state = 'deleting', power_state = 1 \
         WHERE uuid = $1",
        &uuid,
    )
    .await;
    exec(
        &db,
        "INSERT INTO block_device_mapping (uuid, instance_uuid, source_type, destination_type, \
         boot_index) VALUES ('bdm-1', $1, 'image', 'local', 0)",
        &uuid,
    )
    .await;
    assert!(db
        .api_local_delete(&uuid, &record("req-del"), Some("h1"))
        .await
        .unwrap());
    let i = db.api_instance(&uuid).await.unwrap().unwrap();
    assert!(i.deleted);
    assert_eq!(i.vm_state.as_deref(), Some("deleted"));
    assert_eq!(i.task_state, None);
    assert_eq!(i.power_state, Some(0));
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) FROM instances WHERE uuid = $1 AND deleted_at IS NOT NULL \
             AND terminated_at IS NOT NULL",
            &uuid
        )
        .await,
        1
    );
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) FROM block_device_mapping WHERE instance_uuid = $1 AND NOT deleted",
            &uuid
        )
        .await,
        0
    );
    // Gone from listings.
    let live = db
        .api_instances(&cell_mapping::db::ListFilter {
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(live.iter().all(|l| l.uuid != uuid));
    // The delete action, with its finished event.
    let action = db
        .api_instance_action(&uuid, "req-del")
        .await
        .unwrap()
        .expect("delete action");
    assert_eq!(action.action, "delete");
    assert_eq!(action.user_id.as_deref(), Some("u1"));
    assert_eq!(action.project_id.as_deref(), Some("p1"));
    let events = db.api_action_events(action.id).await.unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].event, EV_API_LOCAL_DELETE);
    assert_eq!(events[0].result.as_deref(), Some("Success"));
    assert_eq!(events[0].host.as_deref(), Some("h1"));
    assert!(events[0].start_time.is_some() && events[0].finish_time.is_some());

    // A second delete finds nothing live and writes nothing.
    assert!(!db
        .api_local_delete(&uuid, &record("req-del-2"), Some("h1"))
        .await
        .unwrap());
    assert!(db
        .api_instance_action(&uuid, "req-del-2")
        .await
        .unwrap()
        .is_none());
    let all = db
        .api_instance_actions(&uuid, &ActionsFilter::default())
        .await
        .unwrap();
    assert_eq!(
        all.iter().map(|a| a.action.as_str()).collect::<Vec<_>>(),
        ["delete", "create"]
    );
    // Nor for an instance that does not exist.
    assert!(!db
        .api_local_delete("no-such-instance", &record("req-x"), None)
        .await
        .unwrap());

    // An instance without a host: deleted too, its event without a host.
    let hostless = create(&db, None).await;
    assert!(db
        .api_local_delete(&hostless, &record("req-del-3"), None)
        .await
        .unwrap());
    let a = db
        .api_instance_action(&hostless, "req-del-3")
        .await
        .unwrap()
        .unwrap();
    let ev = db.api_action_events(a.id).await.unwrap();
    assert_eq!(ev[0].host, None);
    assert!(db.api_instance(&hostless).await.unwrap().unwrap().deleted);
}

#[tokio::test]
async fn local_delete_statement_on_sqlite() {
    flow(Be::Sqlite, "local_delete_sqlite").await;
}

#[tokio::test]
async fn local_delete_statement_on_postgresql() {
    flow(Be::Pg, "local_delete_pg").await;
}
