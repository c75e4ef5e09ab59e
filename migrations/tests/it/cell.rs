//! The cell database.

use migrations::{Backend, Kind};

use crate::common::{assert_check, assert_fk, assert_unique, migrated};

const TABLES: &[&str] = &[
    "block_device_mapping",
    "build_casts",
    "compute_nodes",
    "instance_actions",
    "instance_actions_events",
    "instance_extra",
    "instance_faults",
    "instance_info_caches",
    "instance_metadata",
    "instance_system_metadata",
    "instances",
    "migrations",
    "services",
    "tags",
    "virtual_interfaces",
];

async fn check(backend: Backend) {
    let test = format!("migrations_cell_{backend}");
    let Some((db, _guard)) = migrated(&test, Kind::Cell, backend, TABLES).await else {
        return;
    };
    db.ok(&[
        "INSERT INTO instances (uuid, project_id, user_id, vm_state, task_state) \
         VALUES ('i-1', 'p', 'u', 'building', 'scheduling')",
        "INSERT INTO instance_actions (instance_uuid, action, request_id) VALUES ('i-1', 'create', 'req-1')",
        "INSERT INTO instance_actions_events (action_id, event, host, result, request_id) \
         VALUES ((SELECT id FROM instance_actions WHERE request_id = 'req-1'), 'conductor_schedule_and_build_instances', 'h', 'Success', 'req-1')",
        "INSERT INTO instance_faults (instance_uuid, code, message) VALUES ('i-1', 500, 'No valid host')",
        "INSERT INTO instance_metadata (instance_uuid, key, value) VALUES ('i-1', 'k', 'v')",
        "INSERT INTO instance_info_caches (instance_uuid, network_info) VALUES ('i-1', '[]')",
        "INSERT INTO tags (resource_id, tag) VALUES ('i-1', 'web')",
        "INSERT INTO services (id, uuid, host, \"binary\", topic) VALUES (101, 's-1', 'h', 'nova-compute', 'compute')",
        "INSERT INTO compute_nodes (uuid, service_id, host, hypervisor_hostname, hypervisor_type, vcpus, memory_mb, local_gb) \
         VALUES ('cn-1', 101, 'h', 'h.example', 'fake', 8, 16384, 100)",
    ])
    .await;
    // Default timestamps decode as the code will decode them.
    let created = db
        .timestamp("SELECT created_at FROM instances WHERE uuid = 'i-1'")
        .await;
    assert!(created.timestamp() > 1_600_000_000, "{created}");

    assert_unique(
        &db,
        "INSERT INTO instances (uuid, project_id, user_id) VALUES ('i-1', 'p', 'u')",
        "uniq_instances0uuid",
    )
    .await;
    assert_unique(
        &db,
        "INSERT INTO instance_actions (instance_uuid, action, request_id) VALUES ('i-1', 'create', 'req-1')",
        "uniq_instance_actions0instance_uuid0request_id",
    )
    .await;
    assert_unique(
        &db,
        "INSERT INTO instance_metadata (instance_uuid, key, value) VALUES ('i-1', 'k', 'w')",
        "uniq_instance_metadata0instance_uuid0key",
    )
    .await;
    assert_unique(
        &db,
        "INSERT INTO tags (resource_id, tag) VALUES ('i-1', 'web')",
        "uniq_tags0resource_id0tag",
    )
    .await;
    assert_unique(
        &db,
        "INSERT INTO services (uuid, host, \"binary\") VALUES ('s-2', 'h', 'nova-compute')",
        "uniq_services0host0binary",
    )
    .await;
    assert_unique(
        &db,
        "INSERT INTO compute_nodes (uuid, host, hypervisor_hostname, hypervisor_type, vcpus, memory_mb, local_gb) \
         VALUES ('cn-2', 'h', 'h.example', 'fake', 1, 1, 1)",
        "uniq_compute_nodes0host0hypervisor_hostname",
    )
    .await;
    // The (host, binary) and (host, node) uniqueness holds among live rows only.
    db.ok(&[
        "UPDATE compute_nodes SET deleted = TRUE, deleted_at = CURRENT_TIMESTAMP WHERE uuid = 'cn-1'",
        "INSERT INTO compute_nodes (uuid, host, hypervisor_hostname, hypervisor_type, vcpus, memory_mb, local_gb) \
         VALUES ('cn-2', 'h', 'h.example', 'fake', 1, 1, 1)",
        "UPDATE services SET deleted = TRUE WHERE uuid = 's-1'",
        "INSERT INTO services (uuid, host, \"binary\", topic) VALUES ('s-2', 'h', 'nova-compute', 'compute')",
    ])
    .await;

    assert_fk(
        &db,
        "INSERT INTO instance_faults (instance_uuid, code) VALUES ('nope', 500)",
        "fk_instance_faults_instance_uuid",
    )
    .await;
    assert_fk(
        &db,
        "INSERT INTO instance_actions_events (action_id, event) VALUES (999, 'x')",
        "fk_instance_actions_events_action_id",
    )
    .await;
    assert_check(
        &db,
        "INSERT INTO migrations (uuid, instance_uuid, migration_type, status) VALUES ('m-1', 'i-1', 'teleport', 'pre-migrating')",
        "ck_migrations_migration_type",
    )
    .await;
    assert_check(
        &db,
        "UPDATE instances SET locked = TRUE, locked_by = 'me' WHERE uuid = 'i-1'",
        "ck_instances_locked_by",
    )
    .await;

    // Purging an instance row takes everything hanging off it along.
    db.ok(&["DELETE FROM instances WHERE uuid = 'i-1'"]).await;
    for table in [
        "instance_actions",
        "instance_actions_events",
        "instance_faults",
        "instance_metadata",
        "instance_info_caches",
        "tags",
    ] {
        assert_eq!(
            db.i64(&format!("SELECT COUNT(*) FROM {table}")).await,
            0,
            "{table}"
        );
    }
    db.close().await;
}

#[tokio::test]
async fn postgres() {
    check(Backend::Postgres).await;
}

#[tokio::test]
async fn sqlite() {
    check(Backend::Sqlite).await;
}
