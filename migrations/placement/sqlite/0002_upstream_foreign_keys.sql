-- The same foreign keys go as on PostgreSQL (see its 0002 for why and what
-- keeps the data whole without them), so that both backends keep the same
-- schema. SQLite cannot drop a constraint: the two tables are rebuilt,
-- rows, ids and indexes kept. `allocations` first: nothing then refers to
-- `consumers`.
CREATE TABLE allocations_new (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    resource_provider_id BIGINT NOT NULL,
    -- The consumer's UUID (as upstream); the consumer row is written first.
    consumer_id          VARCHAR(36) NOT NULL,
    resource_class_id    BIGINT NOT NULL,
    used                 BIGINT NOT NULL,
    created_at           DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at           DATETIME
);
INSERT INTO allocations_new (id, resource_provider_id, consumer_id, resource_class_id, used, created_at, updated_at)
    SELECT id, resource_provider_id, consumer_id, resource_class_id, used, created_at, updated_at FROM allocations;
DROP TABLE allocations;
ALTER TABLE allocations_new RENAME TO allocations;
CREATE UNIQUE INDEX uniq_allocations0consumer0provider0class ON allocations (consumer_id, resource_provider_id, resource_class_id);
CREATE INDEX allocations_resource_provider_class_used_idx ON allocations (resource_provider_id, resource_class_id, used);
CREATE INDEX allocations_resource_class_id_idx ON allocations (resource_class_id);

CREATE TABLE consumers_new (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid             VARCHAR(36) NOT NULL,
    project_id       BIGINT NOT NULL,
    user_id          BIGINT NOT NULL,
    generation       BIGINT NOT NULL DEFAULT 0,
    consumer_type_id BIGINT,
    created_at       DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at       DATETIME
);
INSERT INTO consumers_new (id, uuid, project_id, user_id, generation, consumer_type_id, created_at, updated_at)
    SELECT id, uuid, project_id, user_id, generation, consumer_type_id, created_at, updated_at FROM consumers;
DROP TABLE consumers;
ALTER TABLE consumers_new RENAME TO consumers;
CREATE UNIQUE INDEX uniq_consumers0uuid ON consumers (uuid);
CREATE INDEX consumers_project_id_user_id_uuid_idx ON consumers (project_id, user_id, uuid);
