//! The placement database.

use migrations::{Backend, Kind};

use crate::common::{assert_fk, assert_unique, migrated};

const TABLES: &[&str] = &[
    "allocations",
    "consumer_types",
    "consumers",
    "inventories",
    "placement_aggregates",
    "projects",
    "resource_classes",
    "resource_provider_aggregates",
    "resource_provider_traits",
    "resource_providers",
    "traits",
    "users",
];

async fn check(backend: Backend) {
    let test = format!("migrations_placement_{backend}");
    let Some((db, _guard)) = migrated(&test, Kind::Placement, backend, TABLES).await else {
        return;
    };
    // Standard classes are seeded with os-resource-classes ids; custom ones start at 10000.
    assert_eq!(
        db.i64("SELECT id FROM resource_classes WHERE name = 'VCPU'")
            .await,
        0
    );
    assert_eq!(
        db.i64("SELECT id FROM resource_classes WHERE name = 'MEMORY_MB'")
            .await,
        1
    );
    db.ok(&["INSERT INTO resource_classes (name) VALUES ('CUSTOM_GOLD')"])
        .await;
    assert_eq!(
        db.i64("SELECT id FROM resource_classes WHERE name = 'CUSTOM_GOLD'")
            .await,
        10000
    );

    db.ok(&[
        "INSERT INTO resource_providers (id, uuid, name) VALUES (101, 'rp-1', 'h1')",
        "UPDATE resource_providers SET root_provider_id = id WHERE id = 101",
        "INSERT INTO resource_providers (id, uuid, name, parent_provider_id, root_provider_id) VALUES (102, 'rp-2', 'h1_numa0', 101, 101)",
        "INSERT INTO inventories (resource_provider_id, resource_class_id, total, max_unit, allocation_ratio) VALUES (101, 0, 8, 8, 16.0)",
        "INSERT INTO projects (id, external_id) VALUES (1, 'p')",
        "INSERT INTO users (id, external_id) VALUES (1, 'u')",
        "INSERT INTO consumer_types (id, name) VALUES (1, 'INSTANCE')",
        "INSERT INTO consumers (uuid, project_id, user_id, consumer_type_id) VALUES ('c-1', 1, 1, 1)",
        "INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, used) VALUES (101, 'c-1', 0, 2)",
        "INSERT INTO traits (id, name) VALUES (101, 'HW_CPU_X86_AVX2')",
        "INSERT INTO resource_provider_traits (resource_provider_id, trait_id) VALUES (101, 101)",
        "INSERT INTO placement_aggregates (id, uuid) VALUES (1, 'agg-1')",
        "INSERT INTO resource_provider_aggregates (resource_provider_id, aggregate_id) VALUES (101, 1)",
    ])
    .await;

    assert_unique(
        &db,
        "INSERT INTO resource_providers (uuid, name) VALUES ('rp-1', 'x')",
        "uniq_resource_providers0uuid",
    )
    .await;
    assert_unique(
        &db,
        "INSERT INTO resource_providers (uuid, name) VALUES ('rp-x', 'h1')",
        "uniq_resource_providers0name",
    )
    .await;
    assert_unique(
        &db,
        "INSERT INTO resource_classes (name) VALUES ('VCPU')",
        "uniq_resource_classes0name",
    )
    .await;
    assert_unique(
        &db,
        "INSERT INTO inventories (resource_provider_id, resource_class_id, total, max_unit) VALUES (101, 0, 4, 4)",
        "uniq_inventories0resource_provider_resource_class",
    )
    .await;
    assert_unique(
        &db,
        "INSERT INTO consumers (uuid, project_id, user_id) VALUES ('c-1', 1, 1)",
        "uniq_consumers0uuid",
    )
    .await;
    assert_unique(
        &db,
        "INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, used) VALUES (101, 'c-1', 0, 1)",
        "uniq_allocations0consumer0provider0class",
    )
    .await;
    assert_unique(
        &db,
        "INSERT INTO traits (name) VALUES ('HW_CPU_X86_AVX2')",
        "uniq_traits0name",
    )
    .await;
    assert_unique(
        &db,
        "INSERT INTO resource_provider_traits (resource_provider_id, trait_id) VALUES (101, 101)",
        "uniq_resource_provider_traits0provider0trait",
    )
    .await;
    assert_unique(
        &db,
        "INSERT INTO resource_provider_aggregates (resource_provider_id, aggregate_id) VALUES (101, 1)",
        "uniq_resource_provider_aggregates0provider0aggregate",
    )
    .await;

    // Allocations and consumers carry no foreign key (as upstream's schema;
    // migration 0002): placement's writes keep them whole.
    db.ok(&[
        "INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, used) VALUES (999, 'no-consumer', 4242, 1)",
        "INSERT INTO consumers (uuid, project_id, user_id, consumer_type_id) VALUES ('c-2', 77, 78, 79)",
        "DELETE FROM allocations WHERE consumer_id = 'no-consumer'",
        "DELETE FROM consumers WHERE uuid = 'c-2'",
    ])
    .await;
    assert_fk(
        &db,
        "INSERT INTO inventories (resource_provider_id, resource_class_id, total, max_unit) VALUES (101, 4242, 1, 1)",
        "fk_inventories_resource_class_id",
    )
    .await;
    // A provider with children, or with allocations against it, is in use.
    assert_fk(&db, "DELETE FROM resource_providers WHERE id = 101", "").await;
    db.ok(&[
        "INSERT INTO resource_providers (id, uuid, name) VALUES (103, 'rp-3', 'h3')",
        "INSERT INTO resource_providers (id, uuid, name, parent_provider_id) VALUES (104, 'rp-4', 'h3_numa0', 103)",
    ])
    .await;
    assert_fk(
        &db,
        "DELETE FROM resource_providers WHERE id = 103",
        "fk_resource_providers_parent_provider_id",
    )
    .await;
    db.ok(&["DELETE FROM resource_providers WHERE id = 102"])
        .await;
    db.ok(&[
        "DELETE FROM allocations WHERE consumer_id = 'c-1'",
        "DELETE FROM consumers WHERE uuid = 'c-1'",
        "DELETE FROM resource_providers WHERE id = 101",
    ])
    .await;
    for table in [
        "inventories",
        "resource_provider_traits",
        "resource_provider_aggregates",
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
