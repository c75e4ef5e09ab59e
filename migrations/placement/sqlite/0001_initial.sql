-- Placement database (upstream: openstack/placement), initial schema.
-- Same conventions as the API schema (see api/sqlite/0001_initial.sql).
-- Append-only: never edit this file once it has landed; add 0002_*.sql.

CREATE TABLE resource_providers (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid               VARCHAR(36) NOT NULL,
    name               VARCHAR(200) NOT NULL,
    -- Bumped on every change to the provider, its inventory, traits,
    -- aggregates or allocations against it (optimistic concurrency).
    generation         BIGINT NOT NULL DEFAULT 0,
    -- NULL for a root provider; root_provider_id is the provider itself then
    -- (set right after the insert, since the id is not known before).
    parent_provider_id BIGINT,
    root_provider_id   BIGINT,
    created_at         DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at         DATETIME,
    CONSTRAINT fk_resource_providers_parent_provider_id FOREIGN KEY (parent_provider_id) REFERENCES resource_providers (id),
    CONSTRAINT fk_resource_providers_root_provider_id FOREIGN KEY (root_provider_id) REFERENCES resource_providers (id)
);
CREATE UNIQUE INDEX uniq_resource_providers0uuid ON resource_providers (uuid);
CREATE UNIQUE INDEX uniq_resource_providers0name ON resource_providers (name);
CREATE INDEX resource_providers_root_provider_id_idx ON resource_providers (root_provider_id);
CREATE INDEX resource_providers_parent_provider_id_idx ON resource_providers (parent_provider_id);

-- Standard classes are seeded below with ids < 10000 (as os-resource-classes
-- numbers them); custom classes (CUSTOM_*) get ids from 10000 up.
CREATE TABLE resource_classes (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    name       VARCHAR(255) NOT NULL,
    created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at DATETIME
);
CREATE UNIQUE INDEX uniq_resource_classes0name ON resource_classes (name);

CREATE TABLE inventories (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    resource_provider_id BIGINT NOT NULL,
    resource_class_id    BIGINT NOT NULL,
    total                BIGINT NOT NULL,
    reserved             BIGINT NOT NULL DEFAULT 0,
    min_unit             BIGINT NOT NULL DEFAULT 1,
    max_unit             BIGINT NOT NULL,
    step_size            BIGINT NOT NULL DEFAULT 1,
    allocation_ratio     DOUBLE PRECISION NOT NULL DEFAULT 1.0,
    created_at           DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at           DATETIME,
    CONSTRAINT fk_inventories_resource_provider_id FOREIGN KEY (resource_provider_id) REFERENCES resource_providers (id) ON DELETE CASCADE,
    CONSTRAINT fk_inventories_resource_class_id FOREIGN KEY (resource_class_id) REFERENCES resource_classes (id)
);
CREATE UNIQUE INDEX uniq_inventories0resource_provider_resource_class ON inventories (resource_provider_id, resource_class_id);
CREATE INDEX inventories_resource_class_id_total_idx ON inventories (resource_class_id, total);

CREATE TABLE projects (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    external_id VARCHAR(255) NOT NULL,
    created_at  DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at  DATETIME
);
CREATE UNIQUE INDEX uniq_projects0external_id ON projects (external_id);

CREATE TABLE users (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    external_id VARCHAR(255) NOT NULL,
    created_at  DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at  DATETIME
);
CREATE UNIQUE INDEX uniq_users0external_id ON users (external_id);

CREATE TABLE consumer_types (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    name       VARCHAR(255) NOT NULL,
    created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at DATETIME
);
CREATE UNIQUE INDEX uniq_consumer_types0name ON consumer_types (name);

CREATE TABLE consumers (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid             VARCHAR(36) NOT NULL,
    project_id       BIGINT NOT NULL,
    user_id          BIGINT NOT NULL,
    generation       BIGINT NOT NULL DEFAULT 0,
    consumer_type_id BIGINT,
    created_at       DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at       DATETIME,
    CONSTRAINT fk_consumers_project_id FOREIGN KEY (project_id) REFERENCES projects (id),
    CONSTRAINT fk_consumers_user_id FOREIGN KEY (user_id) REFERENCES users (id),
    CONSTRAINT fk_consumers_consumer_type_id FOREIGN KEY (consumer_type_id) REFERENCES consumer_types (id)
);
CREATE UNIQUE INDEX uniq_consumers0uuid ON consumers (uuid);
CREATE INDEX consumers_project_id_user_id_uuid_idx ON consumers (project_id, user_id, uuid);

CREATE TABLE allocations (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    resource_provider_id BIGINT NOT NULL,
    -- The consumer's UUID (as upstream); the consumer row must exist first.
    consumer_id          VARCHAR(36) NOT NULL,
    resource_class_id    BIGINT NOT NULL,
    used                 BIGINT NOT NULL,
    created_at           DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at           DATETIME,
    -- No cascade: a provider with allocations against it is "in use" (409).
    CONSTRAINT fk_allocations_resource_provider_id FOREIGN KEY (resource_provider_id) REFERENCES resource_providers (id),
    CONSTRAINT fk_allocations_consumer_id FOREIGN KEY (consumer_id) REFERENCES consumers (uuid),
    CONSTRAINT fk_allocations_resource_class_id FOREIGN KEY (resource_class_id) REFERENCES resource_classes (id)
);
CREATE UNIQUE INDEX uniq_allocations0consumer0provider0class ON allocations (consumer_id, resource_provider_id, resource_class_id);
CREATE INDEX allocations_resource_provider_class_used_idx ON allocations (resource_provider_id, resource_class_id, used);
CREATE INDEX allocations_resource_class_id_idx ON allocations (resource_class_id);

CREATE TABLE traits (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    name       VARCHAR(255) NOT NULL,
    created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at DATETIME
);
CREATE UNIQUE INDEX uniq_traits0name ON traits (name);

CREATE TABLE resource_provider_traits (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    resource_provider_id BIGINT NOT NULL,
    trait_id             BIGINT NOT NULL,
    created_at           DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT fk_resource_provider_traits_resource_provider_id FOREIGN KEY (resource_provider_id) REFERENCES resource_providers (id) ON DELETE CASCADE,
    CONSTRAINT fk_resource_provider_traits_trait_id FOREIGN KEY (trait_id) REFERENCES traits (id)
);
CREATE UNIQUE INDEX uniq_resource_provider_traits0provider0trait ON resource_provider_traits (resource_provider_id, trait_id);
CREATE INDEX resource_provider_traits_trait_id_idx ON resource_provider_traits (trait_id);

CREATE TABLE placement_aggregates (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid       VARCHAR(36) NOT NULL,
    created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at DATETIME
);
CREATE UNIQUE INDEX uniq_placement_aggregates0uuid ON placement_aggregates (uuid);

CREATE TABLE resource_provider_aggregates (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    resource_provider_id BIGINT NOT NULL,
    aggregate_id         BIGINT NOT NULL,
    created_at           DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT fk_resource_provider_aggregates_resource_provider_id FOREIGN KEY (resource_provider_id) REFERENCES resource_providers (id) ON DELETE CASCADE,
    CONSTRAINT fk_resource_provider_aggregates_aggregate_id FOREIGN KEY (aggregate_id) REFERENCES placement_aggregates (id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX uniq_resource_provider_aggregates0provider0aggregate ON resource_provider_aggregates (resource_provider_id, aggregate_id);
CREATE INDEX resource_provider_aggregates_aggregate_id_idx ON resource_provider_aggregates (aggregate_id);

-- Standard resource classes (os-resource-classes numbering).
INSERT INTO resource_classes (id, name) VALUES
    (0, 'VCPU'),
    (1, 'MEMORY_MB'),
    (2, 'DISK_GB'),
    (3, 'PCI_DEVICE'),
    (4, 'SRIOV_NET_VF'),
    (5, 'NUMA_SOCKET'),
    (6, 'NUMA_CORE'),
    (7, 'NUMA_THREAD'),
    (8, 'NUMA_MEMORY_MB'),
    (9, 'IPV4_ADDRESS'),
    (10, 'VGPU'),
    (11, 'VGPU_DISPLAY_HEAD'),
    (12, 'NET_BW_EGR_KILOBIT_PER_SEC'),
    (13, 'NET_BW_IGR_KILOBIT_PER_SEC'),
    (14, 'PCPU'),
    (15, 'MEM_ENCRYPTION_CONTEXT'),
    (16, 'FPGA'),
    (17, 'PGPU'),
    (18, 'NET_PACKET_RATE_KILOPACKET_PER_SEC'),
    (19, 'NET_PACKET_RATE_EGR_KILOPACKET_PER_SEC'),
    (20, 'NET_PACKET_RATE_IGR_KILOPACKET_PER_SEC');

-- Custom classes start at 10000 (PostgreSQL: IDENTITY START WITH 10000).
UPDATE sqlite_sequence SET seq = 9999 WHERE name = 'resource_classes';
