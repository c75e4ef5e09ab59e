//! The API layer's server-action, instance-action, metadata and tag
//! statements (`cell_mapping::db::server_actions`) on SQLite and PostgreSQL.

use cell_mapping::db::server_actions::{
    ActionRecord, ActionRefused, ActionStart, ActionsFilter, RebuildChange, WriteOutcome,
};
use cell_mapping::db::{InstanceFlavor, NewCellInstance};
use cell_mapping::CellDb;
use chrono::{Duration, Utc};

use crate::common::{cell_db, Be};

async fn exec(db: &CellDb, sql: &str, uuid: &str) {
    crate::common::exec(db.pool(), sql, &[uuid]).await;
}

fn record(action: &str, rid: &str) -> ActionRecord {
    ActionRecord {
        action: action.into(),
        request_id: rid.into(),
        global_request_id: format!("g-{rid}"),
        user_id: "u1".into(),
        project_id: "p1".into(),
    }
}

fn start(uuid: &str, vm: &[&str], task: &str, rid: &str, ignore_lock: bool) -> ActionStart {
    ActionStart {
        uuid: uuid.into(),
        vm_states: vm.iter().map(|s| (*s).to_owned()).collect(),
        task_states: vec![None],
        new_task_state: task.into(),
        ignore_lock,
        record: record("stop", rid),
        rebuild: None,
    }
}

async fn flow(be: Be, name: &str) {
    let Some((db, _keep)) = cell_db(be, name).await else {
        return;
    };
    let uuid = uuid::Uuid::new_v4().to_string();
    db.create_api_instance(&NewCellInstance {
        uuid: uuid.clone(),
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
        host: Some("h1".into()),
        node: Some("h1".into()),
        availability_zone: None,
        created_at: Utc::now(),
        request_id: "req-create".into(),
        global_request_id: "g".into(),
        reservation_id: "r-1".into(),
        launch_index: 0,
        error: None,
        scheduled_from: None,
        metadata: Vec::new(),
        user_data: Some("dXNlcg==".into()),
        description: None,
        hostname: None,
        tags: Vec::new(),
        key_name: None,
        config_drive: false,
        key_data: None,
        access_ip_v4: Some("192.0.2.1".into()),
        access_ip_v6: None,
        trusted_certs: Some(vec!["cert-a".into()]),
    })
    .await
    .expect("create");
    // Still building: refused on its vm_state.
    let r = db
        .api_start_action(&start(
            &uuid,
            &["active", "error"],
            "powering-off",
            "req-1",
            false,
        ))
        .await
        .unwrap();
    assert_eq!(r, Err(ActionRefused::VmState("building".into())));
    exec(
        &db,
        "UPDATE instances SET vm_state = 'active', task_state = NULL WHERE uuid = $1",
        &uuid,
    )
    .await;
    db.api_start_action(&start(
        &uuid,
        &["active", "error"],
        "powering-off",
        "req-1",
        false,
    ))
    .await
    .unwrap()
    .expect("stop starts");
    let i = db.api_instance(&uuid).await.unwrap().unwrap();
    assert_eq!(i.task_state.as_deref(), Some("powering-off"));
    // A second one is refused on the task state, and records nothing.
    let r = db
        .api_start_action(&start(&uuid, &["active"], "pausing", "req-2", false))
        .await
        .unwrap();
    assert_eq!(
        r,
        Err(ActionRefused::TaskState(Some("powering-off".into())))
    );
    assert!(db
        .api_instance_action(&uuid, "req-2")
        .await
        .unwrap()
        .is_none());
    // A cast that failed clears its own task state only.
    assert!(!db.api_revert_task_state(&uuid, "pausing").await.unwrap());
    assert!(db
        .api_revert_task_state(&uuid, "powering-off")
        .await
        .unwrap());
    let i = db.api_instance(&uuid).await.unwrap().unwrap();
    assert_eq!(i.task_state, None);

    // Lock with a reason: refused to a non-admin, not to an admin.
    assert!(db
        .api_set_lock(
            &uuid,
            Some(("owner", Some("why"))),
            &record("lock", "req-3")
        )
        .await
        .unwrap());
    let i = db.api_instance(&uuid).await.unwrap().unwrap();
    assert!(i.locked);
    assert_eq!(i.locked_by.as_deref(), Some("owner"));
    assert_eq!(i.locked_reason.as_deref(), Some("why"));
    let r = db
        .api_start_action(&start(&uuid, &["active"], "pausing", "req-4", false))
        .await
        .unwrap();
    assert_eq!(r, Err(ActionRefused::Locked));
    // Rebuild by an admin: image, name and metadata change with the task.
    let mut rb = start(&uuid, &["active"], "rebuilding", "req-5", true);
    rb.record.action = "rebuild".into();
    rb.rebuild = Some(RebuildChange {
        image_ref: "img-2".into(),
        name: Some("renamed".into()),
        metadata: Some(vec![("k".into(), "v".into())]),
        access_ip_v6: Some("2001:db8::2".into()),
        description: Some(Some("d".into())),
        key: Some(Some(("k1".into(), "ssh-ed25519 AAAA".into()))),
        user_data: Some(None),
        hostname: Some("h-new".into()),
        trusted_certs: Some(Some(vec!["cert-b".into(), "cert-c".into()])),
        ..RebuildChange::default()
    });
    let shown = db.api_instance_shown(&uuid).await.unwrap().unwrap();
    assert_eq!(shown.trusted_certs, Some(vec!["cert-a".to_owned()]));
    db.api_start_action(&rb).await.unwrap().expect("rebuild");
    let i = db.api_instance(&uuid).await.unwrap().unwrap();
    assert_eq!(i.image_ref.as_deref(), Some("img-2"));
    assert_eq!(i.display_name.as_deref(), Some("renamed"));
    // A name is no hostname (Nova's rebuild); the other fields as given,
    // the ones not given (accessIPv4) kept.
    assert_eq!(
        (i.hostname.as_deref(), i.display_description.as_deref()),
        (Some("h-new"), Some("d"))
    );
    assert_eq!(
        (i.access_ip_v4.as_deref(), i.access_ip_v6.as_deref()),
        (Some("192.0.2.1"), Some("2001:db8::2"))
    );
    assert_eq!(
        (i.key_name.as_deref(), i.user_data.as_deref()),
        (Some("k1"), None)
    );
    assert_eq!(
        db.api_metadata(std::slice::from_ref(&uuid)).await.unwrap(),
        vec![(uuid.clone(), "k".to_owned(), "v".to_owned())]
    );
    assert!(db
        .api_set_lock(&uuid, None, &record("unlock", "req-6"))
        .await
        .unwrap());
    let i = db.api_instance(&uuid).await.unwrap().unwrap();
    assert!(!i.locked && i.locked_by.is_none() && i.locked_reason.is_none());

    // The actions, newest first, paged.
    let all = db
        .api_instance_actions(&uuid, &ActionsFilter::default())
        .await
        .unwrap();
    let names: Vec<&str> = all.iter().map(|a| a.action.as_str()).collect();
    assert_eq!(names, ["unlock", "rebuild", "lock", "stop", "create"]);
    let page = db
        .api_instance_actions(
            &uuid,
            &ActionsFilter {
                limit: Some(2),
                after: Some((all[1].created_at, all[1].id)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(page, all[2..4].to_vec());
    let future = db
        .api_instance_actions(
            &uuid,
            &ActionsFilter {
                changes_since: Some(Utc::now() + Duration::hours(1)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(future.is_empty());
    let before = db
        .api_instance_actions(
            &uuid,
            &ActionsFilter {
                changes_before: Some(Utc::now() + Duration::hours(1)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(before.len(), 5);

    // Metadata: merge, replace, the limit rolls back.
    let kv = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    assert_eq!(
        db.api_metadata_set(&uuid, &[kv("a", "1"), kv("k", "w")], false, 3)
            .await
            .unwrap(),
        WriteOutcome::Done
    );
    assert_eq!(
        db.api_metadata_set(&uuid, &[kv("b", "1"), kv("c", "1")], false, 3)
            .await
            .unwrap(),
        WriteOutcome::TooMany
    );
    let meta = db.api_metadata(std::slice::from_ref(&uuid)).await.unwrap();
    assert_eq!(
        meta.iter()
            .map(|m| (m.1.as_str(), m.2.as_str()))
            .collect::<Vec<_>>(),
        [("a", "1"), ("k", "w")]
    );
    assert_eq!(
        db.api_metadata_set(&uuid, &[kv("z", "9")], true, 3)
            .await
            .unwrap(),
        WriteOutcome::Done
    );
    assert!(db.api_metadata_delete(&uuid, "z").await.unwrap());
    assert!(!db.api_metadata_delete(&uuid, "z").await.unwrap());
    assert_eq!(
        db.api_metadata_set("nope", &[kv("a", "1")], false, 3)
            .await
            .unwrap(),
        WriteOutcome::NotFound
    );

    // Tags.
    assert_eq!(
        db.api_tag_add(&uuid, "t1", 2).await.unwrap(),
        WriteOutcome::Created
    );
    assert_eq!(
        db.api_tag_add(&uuid, "t1", 2).await.unwrap(),
        WriteOutcome::Done
    );
    assert_eq!(
        db.api_tag_add(&uuid, "t2", 2).await.unwrap(),
        WriteOutcome::Created
    );
    assert_eq!(
        db.api_tag_add(&uuid, "t3", 2).await.unwrap(),
        WriteOutcome::TooMany
    );
    assert_eq!(
        db.api_tags_replace(&uuid, &["x".into(), "y".into()])
            .await
            .unwrap(),
        WriteOutcome::Done
    );
    let tags = db.api_tags(std::slice::from_ref(&uuid)).await.unwrap();
    assert_eq!(
        tags.iter().map(|t| t.1.as_str()).collect::<Vec<_>>(),
        ["x", "y"]
    );
    // A single server's read: the row with its metadata and tags in one
    // statement, equal to the separate reads. A value that needs JSON
    // escaping, and a key and tag that sort before the others.
    assert_eq!(
        db.api_metadata_set(
            &uuid,
            &[kv("a", "1"), kv("0 q", "say \"hi\"\n\\ é")],
            false,
            3
        )
        .await
        .unwrap(),
        WriteOutcome::Done
    );
    db.api_tags_replace(&uuid, &["y".into(), "x".into(), "0-first".into()])
        .await
        .unwrap();
    let shown = db.api_instance_shown(&uuid).await.unwrap().expect("shown");
    assert_eq!(
        shown.instance,
        db.api_instance(&uuid).await.unwrap().unwrap()
    );
    assert_eq!(
        shown.metadata,
        [kv("0 q", "say \"hi\"\n\\ é"), kv("a", "1")]
    );
    let meta = db.api_metadata(std::slice::from_ref(&uuid)).await.unwrap();
    assert_eq!(
        shown.metadata,
        meta.into_iter().map(|m| (m.1, m.2)).collect::<Vec<_>>()
    );
    assert_eq!(shown.tags, ["0-first", "x", "y"]);
    // A list page's read: the metadata and tags of many servers at once,
    // unknown uuids giving nothing (PostgreSQL binds the uuids as one
    // array, SQLite in chunks of 200: the known one is in the third).
    let mut page: Vec<String> = (0..449).map(|i| format!("no-such-{i}")).collect();
    page.push(uuid.clone());
    let (meta, tags, _) = db.api_metadata_and_tags(&page).await.unwrap();
    assert!(
        meta.iter().all(|m| m.0 == uuid) && tags.iter().all(|t| t.0 == uuid),
        "{meta:?} {tags:?}"
    );
    assert_eq!(
        meta.into_iter().map(|m| (m.1, m.2)).collect::<Vec<_>>(),
        shown.metadata
    );
    assert_eq!(
        tags.into_iter().map(|t| t.1).collect::<Vec<_>>(),
        ["0-first", "x", "y"]
    );
    assert!(db.api_instance_shown("nope").await.unwrap().is_none());
    db.api_tags_replace(&uuid, &["x".into(), "y".into()])
        .await
        .unwrap();
    assert!(db.api_tag_delete(&uuid, Some("x")).await.unwrap());
    assert!(!db.api_tag_delete(&uuid, Some("x")).await.unwrap());
    assert!(db.api_tag_delete(&uuid, None).await.unwrap());
    assert!(db
        .api_tags(std::slice::from_ref(&uuid))
        .await
        .unwrap()
        .is_empty());
    assert!(!db.api_tag_delete("nope", None).await.unwrap());
    // Nothing of either: empty, not an error.
    for (k, _) in db
        .api_metadata(std::slice::from_ref(&uuid))
        .await
        .unwrap()
        .into_iter()
        .map(|m| (m.1, m.2))
    {
        assert!(db.api_metadata_delete(&uuid, &k).await.unwrap());
    }
    let shown = db.api_instance_shown(&uuid).await.unwrap().expect("shown");
    assert!(
        shown.metadata.is_empty() && shown.tags.is_empty(),
        "{shown:?}"
    );

    // Gone: nothing starts.
    exec(
        &db,
        "UPDATE instances SET deleted = TRUE WHERE uuid = $1",
        &uuid,
    )
    .await;
    let r = db
        .api_start_action(&start(&uuid, &["active"], "pausing", "req-9", true))
        .await
        .unwrap();
    assert_eq!(r, Err(ActionRefused::NotFound));
    assert!(!db
        .api_set_lock(&uuid, None, &record("unlock", "req-10"))
        .await
        .unwrap());
    db.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn server_action_statements_on_sqlite() {
    flow(Be::Sqlite, "srv_actions_sqlite").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn server_action_statements_on_postgres() {
    flow(Be::Pg, "srv_actions_pg").await;
}
