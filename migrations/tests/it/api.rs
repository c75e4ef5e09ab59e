//! The API database.

use migrations::{Backend, Kind};

use crate::common::{assert_check, assert_fk, assert_unique, migrated};

const TABLES: &[&str] = &[
    "aggregate_hosts",
    "aggregate_metadata",
    "aggregates",
    "api_schedulers",
    "build_requests",
    "cell_mappings",
    "compute_node_ids",
    "console_auth_tokens",
    "flavor_extra_specs",
    "flavor_projects",
    "flavors",
    "host_mappings",
    "instance_group_member",
    "instance_group_policy",
    "instance_groups",
    "instance_mappings",
    "key_pairs",
    "project_user_quotas",
    "quota_classes",
    "quota_locks",
    "quotas",
    "request_specs",
    "service_ids",
];

async fn check(backend: Backend) {
    let test = format!("migrations_api_{backend}");
    let Some((db, _guard)) = migrated(&test, Kind::Api, backend, TABLES).await else {
        return;
    };
    db.ok(&[
        "INSERT INTO cell_mappings (id, uuid, name, transport_url, database_connection) \
         VALUES (101, '00000000-0000-0000-0000-000000000000', 'cell0', 'none:///', 'sqlite://cell0')",
        "INSERT INTO cell_mappings (id, uuid, name, transport_url, database_connection) \
         VALUES (102, '11111111-1111-1111-1111-111111111111', 'cell1', 'rabbit://', 'sqlite://cell1')",
        "INSERT INTO host_mappings (cell_id, host) VALUES (102, 'compute-1')",
        "INSERT INTO instance_mappings (instance_uuid, project_id, user_id) VALUES ('i-1', 'p', 'u')",
        "INSERT INTO build_requests (instance_uuid, project_id, instance) VALUES ('i-1', 'p', '{}')",
        "INSERT INTO request_specs (instance_uuid, spec) VALUES ('i-1', '{}')",
        "INSERT INTO flavors (id, flavorid, name, memory_mb, vcpus) VALUES (101, '1', 'm1.tiny', 512, 1)",
        "INSERT INTO flavor_extra_specs (flavor_id, key, value) VALUES (101, 'hw:cpu_policy', 'dedicated')",
        "INSERT INTO key_pairs (user_id, name, public_key) VALUES ('u', 'k', 'ssh-ed25519 AAAA')",
        "INSERT INTO console_auth_tokens (token_hash, console_type, instance_uuid, host, address, \
         port, expires) VALUES ('ab12', 'novnc', 'i-1', 'compute-1', '127.0.0.1', 5900, 1700000000)",
        "INSERT INTO aggregates (id, uuid, name) VALUES (101, 'a-1', 'agg1')",
        "INSERT INTO aggregate_hosts (aggregate_id, host) VALUES (101, 'compute-1')",
        "INSERT INTO quotas (project_id, resource, hard_limit) VALUES ('p', 'cores', 20)",
        "INSERT INTO api_schedulers (id, heartbeat_at) VALUES ('s-1', '2024-05-01 10:00:00+00')",
        "UPDATE build_requests SET owner = 's-1' WHERE instance_uuid = 'i-1'",
        "INSERT INTO compute_node_ids (uuid) VALUES ('n-1')",
        "INSERT INTO compute_node_ids (uuid) VALUES ('n-2')",
        "INSERT INTO service_ids (uuid) VALUES ('s-1')",
    ])
    .await;
    // A build request records the process that drives it (migration 0004).
    assert_eq!(
        db.i64("SELECT COUNT(*) FROM build_requests b JOIN api_schedulers s ON s.id = b.owner")
            .await,
        1
    );
    // An unscheduled instance has no cell yet.
    assert_eq!(
        db.i64("SELECT COUNT(*) FROM instance_mappings WHERE cell_id IS NULL")
            .await,
        1
    );

    assert_unique(
        &db,
        "INSERT INTO cell_mappings (uuid, transport_url, database_connection) \
         VALUES ('11111111-1111-1111-1111-111111111111', 'x', 'y')",
        "uniq_cell_mappings0uuid",
    )
    .await;
    // Region-wide ids below 2.53 (migration 0009): one per UUID, in order.
    assert_eq!(
        db.i64("SELECT id FROM compute_node_ids WHERE uuid = 'n-2'")
            .await
            - db.i64("SELECT id FROM compute_node_ids WHERE uuid = 'n-1'")
                .await,
        1
    );
    assert_unique(
        &db,
        "INSERT INTO compute_node_ids (uuid) VALUES ('n-1')",
        "uniq_compute_node_ids0uuid",
    )
    .await;
    assert_unique(
        &db,
        "INSERT INTO service_ids (uuid) VALUES ('s-1')",
        "uniq_service_ids0uuid",
    )
    .await;
    assert_unique(
        &db,
        "INSERT INTO host_mappings (cell_id, host) VALUES (101, 'compute-1')",
        "uniq_host_mappings0host",
    )
    .await;
    assert_unique(
        &db,
        "INSERT INTO instance_mappings (instance_uuid, project_id) VALUES ('i-1', 'p')",
        "uniq_instance_mappings0instance_uuid",
    )
    .await;
    assert_unique(
        &db,
        "INSERT INTO build_requests (instance_uuid, project_id, instance) VALUES ('i-1', 'p', '{}')",
        "uniq_build_requests0instance_uuid",
    )
    .await;
    assert_unique(
        &db,
        "INSERT INTO request_specs (instance_uuid, spec) VALUES ('i-1', '{}')",
        "uniq_request_specs0instance_uuid",
    )
    .await;
    assert_unique(
        &db,
        "INSERT INTO flavors (flavorid, name, memory_mb, vcpus) VALUES ('2', 'm1.tiny', 1, 1)",
        "uniq_flavors0name",
    )
    .await;
    assert_unique(
        &db,
        "INSERT INTO flavors (flavorid, name, memory_mb, vcpus) VALUES ('1', 'other', 1, 1)",
        "uniq_flavors0flavorid",
    )
    .await;
    assert_unique(
        &db,
        "INSERT INTO flavor_extra_specs (flavor_id, key, value) VALUES (101, 'hw:cpu_policy', 'shared')",
        "uniq_flavor_extra_specs0flavor_id0key",
    )
    .await;
    assert_unique(
        &db,
        "INSERT INTO key_pairs (user_id, name) VALUES ('u', 'k')",
        "uniq_key_pairs0user_id0name",
    )
    .await;
    db.ok(&["INSERT INTO key_pairs (user_id, name) VALUES ('other-user', 'k')"])
        .await;
    assert_unique(
        &db,
        "INSERT INTO aggregate_hosts (aggregate_id, host) VALUES (101, 'compute-1')",
        "uniq_aggregate_hosts0host0aggregate_id",
    )
    .await;
    assert_unique(
        &db,
        "INSERT INTO quotas (project_id, resource, hard_limit) VALUES ('p', 'cores', 10)",
        "uniq_quotas0project_id0resource",
    )
    .await;

    assert_fk(
        &db,
        "INSERT INTO host_mappings (cell_id, host) VALUES (99, 'h')",
        "fk_host_mappings_cell_id",
    )
    .await;
    assert_fk(
        &db,
        "DELETE FROM cell_mappings WHERE id = 102",
        "fk_host_mappings_cell_id",
    )
    .await;
    assert_check(
        &db,
        "INSERT INTO key_pairs (user_id, name, type) VALUES ('u', 'k2', 'rsa')",
        "ck_key_pairs_type",
    )
    .await;

    // Deleting a flavor takes its extra specs along.
    db.ok(&["DELETE FROM flavors WHERE id = 101"]).await;
    assert_eq!(db.i64("SELECT COUNT(*) FROM flavor_extra_specs").await, 0);
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
