//! The statements of the operator APIs on both backends: services and
//! compute nodes of a cell database (`db::services`), aggregates and server
//! groups of the API database (`db::aggregates`, `db::server_groups`).

use std::collections::BTreeMap;

use cell_mapping::db::{AggregateRefused, CellDb, NewServerGroup, ServiceDeleted, ServiceSwitches};
use cell_mapping::ApiDb;

use crate::common::*;

/// `(api url, cell url)` of fresh databases, or `None` (skip).
async fn dbs(be: Be, name: &str) -> Option<(String, String, Vec<testkit::SqliteDb>)> {
    match be {
        Be::Sqlite => {
            let a = testkit::sqlite(&format!("{name}_api"));
            let c = testkit::sqlite(&format!("{name}_cell"));
            Some((a.url.clone(), c.url.clone(), vec![a, c]))
        }
        Be::Pg => {
            let a = testkit::postgres(&format!("{name}_api")).await?;
            let c = testkit::postgres(&format!("{name}_cell")).await?;
            Some((a.url, c.url, Vec::new()))
        }
    }
}

async fn add_service(pool: &cell_mapping::db::Pool, host: &str, binary: &str) -> String {
    let u = uuid::Uuid::new_v4().to_string();
    exec(
        pool,
        "INSERT INTO services (uuid, host, \"binary\", topic, last_seen_up, created_at) \
         VALUES ($1, $2, $3, 'compute', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)",
        &[&u, host, binary],
    )
    .await;
    u
}

async fn services_and_nodes(be: Be, name: &str) {
    let Some((_, cell_url, _keep)) = dbs(be, name).await else {
        return;
    };
    let pool = cell_pool(&cell_url).await;
    let s1 = add_service(&pool, "h1", "nova-compute").await;
    add_service(&pool, "h2", "nova-compute").await;
    add_service(&pool, "cond", "nova-conductor").await;
    add_compute(&pool, "h1").await;
    add_compute(&pool, "h2").await;
    exec(
        &pool,
        "UPDATE compute_nodes SET service_id = (SELECT id FROM services WHERE host = compute_nodes.host)",
        &[],
    )
    .await;
    let vm = add_instance(&pool, "h1", false).await;
    let db = CellDb::open(&cell_url).await.unwrap();

    let all = db.services_list(None, None).await.unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(
        db.services_list(Some("h1"), Some("nova-compute"))
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        db.services_list(None, Some("nova-conductor"))
            .await
            .unwrap()
            .len(),
        1
    );
    let h1 = db.service_by_uuid(&s1).await.unwrap().unwrap();
    assert_eq!(h1.host, "h1");
    assert!(h1.last_seen_up.is_some());
    assert_eq!(db.service_by_id(h1.id).await.unwrap().unwrap().uuid, s1);
    assert!(db.service_by_uuid("nope").await.unwrap().is_none());

    let set = db
        .service_set(
            h1.id,
            &ServiceSwitches {
                disabled: true,
                disabled_reason: Some("maintenance".into()),
                forced_down: true,
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert!(set.disabled && set.forced_down);
    assert_eq!(set.disabled_reason.as_deref(), Some("maintenance"));

    let hvs = db.hypervisors().await.unwrap();
    assert_eq!(hvs.len(), 2);
    let hv1 = hvs.iter().find(|h| h.host == "h1").unwrap();
    assert_eq!(hv1.service_uuid.as_deref(), Some(s1.as_str()));
    assert_eq!(hv1.service_disabled, Some(true));
    assert_eq!(hv1.vcpus, 8);
    let on = db.instances_on_node("h1", "h1").await.unwrap();
    assert_eq!(on.len(), 1);
    assert_eq!(on[0].0, vm);

    // A compute with an instance is kept; once it is gone, the service
    // and its node go together.
    assert_eq!(
        db.service_delete(h1.id).await.unwrap(),
        ServiceDeleted::HasInstances
    );
    assert_eq!(db.hypervisors().await.unwrap().len(), 2);
    exec(
        &pool,
        "UPDATE instances SET deleted = TRUE WHERE uuid = $1",
        &[&vm],
    )
    .await;
    let ServiceDeleted::Deleted { nodes } = db.service_delete(h1.id).await.unwrap() else {
        panic!("deleted");
    };
    assert_eq!(nodes, vec![hv1.uuid.clone()]);
    assert_eq!(db.hypervisors().await.unwrap().len(), 1);
    assert_eq!(db.services_list(None, None).await.unwrap().len(), 2);
    assert_eq!(
        db.service_delete(h1.id).await.unwrap(),
        ServiceDeleted::NotFound
    );
    db.close().await;
    pool.close().await;
}

async fn aggregates_and_groups(be: Be, name: &str) {
    let Some((api_url, _, _keep)) = dbs(be, name).await else {
        return;
    };
    migrations::migrate(migrations::Kind::Api, &api_url)
        .await
        .unwrap();
    let api = ApiDb::open(&api_url).await.unwrap();

    // Aggregates.
    let a = api
        .aggregate_create("rack1", Some("az1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        api.aggregate_create("rack1", None).await.unwrap(),
        Err(AggregateRefused::NameExists)
    );
    let b = api.aggregate_create("rack2", None).await.unwrap().unwrap();
    let got = api.aggregate(a).await.unwrap().unwrap();
    assert_eq!(got.availability_zone(), Some("az1"));
    assert_eq!(api.aggregate_add_host(a, "h1").await.unwrap(), Ok(()));
    assert_eq!(
        api.aggregate_add_host(a, "h1").await.unwrap(),
        Err(AggregateRefused::HostExists)
    );
    assert_eq!(
        api.aggregate_add_host(9999, "h1").await.unwrap(),
        Err(AggregateRefused::NotFound)
    );
    let meta: BTreeMap<String, Option<String>> = [
        ("ssd".to_owned(), Some("true".to_owned())),
        ("availability_zone".to_owned(), Some("az9".to_owned())),
    ]
    .into_iter()
    .collect();
    assert_eq!(api.aggregate_set_metadata(a, &meta).await.unwrap(), Ok(()));
    assert_eq!(
        api.aggregate_update(b, Some("rack1"), None).await.unwrap(),
        Err(AggregateRefused::NameExists)
    );
    assert_eq!(
        api.aggregate_update(a, Some("rack1b"), Some(None))
            .await
            .unwrap(),
        Ok(())
    );
    let got = api.aggregate(a).await.unwrap().unwrap();
    assert_eq!(got.name, "rack1b");
    assert_eq!(got.hosts, ["h1"]);
    assert_eq!(got.availability_zone(), None);
    assert_eq!(got.metadata.get("ssd").map(String::as_str), Some("true"));
    assert_eq!(api.host_aggregates("h1").await.unwrap().len(), 1);
    assert_eq!(
        api.aggregate_delete(a).await.unwrap(),
        Err(AggregateRefused::NotEmpty)
    );
    assert_eq!(
        api.aggregate_remove_host(a, "h2").await.unwrap(),
        Err(AggregateRefused::HostNotFound)
    );
    assert_eq!(api.aggregate_remove_host(a, "h1").await.unwrap(), Ok(()));
    assert_eq!(api.aggregate_delete(a).await.unwrap(), Ok(()));
    assert_eq!(
        api.aggregate_delete(a).await.unwrap(),
        Err(AggregateRefused::NotFound)
    );
    assert_eq!(api.aggregates(None).await.unwrap().len(), 1);

    // Server groups; members are the servers with a live mapping. A limit
    // (`server_groups`) counts the project's groups: over it, nothing is
    // written.
    let new_group = NewServerGroup {
        name: "spread".into(),
        user_id: "u1".into(),
        project_id: "p1".into(),
        policy: "anti-affinity".into(),
        rules: Some(r#"{"max_server_per_host": 2}"#.into()),
    };
    let g = api
        .server_group_create(&new_group, Some(1))
        .await
        .unwrap()
        .expect("within the limit");
    assert_eq!(
        api.server_group_create(&new_group, Some(1)).await.unwrap(),
        None
    );
    assert_eq!(api.server_group_count("p1").await.unwrap(), 1);
    assert_eq!(api.server_group_count("p2").await.unwrap(), 0);
    let group = api.server_group(&g).await.unwrap().unwrap();
    assert_eq!(group.policy, "anti-affinity");
    let vms = ["a", "b"].map(|_| uuid::Uuid::new_v4().to_string());
    let pool = api.pool().clone();
    for vm in &vms {
        exec(
            &pool,
            "INSERT INTO instance_mappings (instance_uuid, project_id, user_id) VALUES ($1, 'p1', 'u1')",
            &[vm],
        )
        .await;
    }
    assert!(api.server_group_add_members(group.id, &vms).await.unwrap());
    assert!(!api.server_group_add_members(9999, &vms).await.unwrap());
    exec(
        &pool,
        "UPDATE instance_mappings SET queued_for_delete = TRUE WHERE instance_uuid = $1",
        &[&vms[1]],
    )
    .await;
    let group = api.instance_server_group(&vms[0]).await.unwrap().unwrap();
    assert_eq!(group.uuid, g);
    assert_eq!(group.members, vec![vms[0].clone()]);
    assert_eq!(api.server_groups(Some("p1")).await.unwrap().len(), 1);
    assert!(api.server_groups(Some("p2")).await.unwrap().is_empty());
    assert_eq!(api.server_groups(None).await.unwrap().len(), 1);
    api.server_group_remove_members(&vms[..1]).await.unwrap();
    assert!(api.instance_server_group(&vms[0]).await.unwrap().is_none());
    assert!(api.server_group_delete(&g).await.unwrap());
    assert!(!api.server_group_delete(&g).await.unwrap());

    // Flavor extra specs.
    exec(
        &pool,
        "INSERT INTO flavors (flavorid, name, memory_mb, vcpus, root_gb) VALUES ('f1', 'f1', 512, 1, 1)",
        &[],
    )
    .await;
    exec(
        &pool,
        "INSERT INTO flavor_extra_specs (flavor_id, key, value) \
         SELECT id, 'aggregate_instance_extra_specs:ssd', 'true' FROM flavors WHERE flavorid = 'f1'",
        &[],
    )
    .await;
    let specs = api.flavor_extra_specs("f1").await.unwrap();
    assert_eq!(
        specs
            .get("aggregate_instance_extra_specs:ssd")
            .map(String::as_str),
        Some("true")
    );
    assert!(api.flavor_extra_specs("none").await.unwrap().is_empty());
    api.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn services_and_nodes_sqlite() {
    services_and_nodes(Be::Sqlite, "opdb_svc_sqlite").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn services_and_nodes_postgres() {
    services_and_nodes(Be::Pg, "opdb_svc_pg").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn aggregates_and_groups_sqlite() {
    aggregates_and_groups(Be::Sqlite, "opdb_agg_sqlite").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn aggregates_and_groups_postgres() {
    aggregates_and_groups(Be::Pg, "opdb_agg_pg").await;
}
