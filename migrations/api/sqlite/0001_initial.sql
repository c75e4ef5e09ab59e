-- API database (upstream: nova_api), initial schema.
--
-- Conventions shared by every schema in this crate (PostgreSQL and SQLite
-- files differ only in the id column and the timestamp type; on SQLite ids are
-- INTEGER PRIMARY KEY AUTOINCREMENT so they are never reused, timestamps
-- DATETIME, i.e. RFC 3339 text):
--   * UUIDs and JSON documents are TEXT / VARCHAR(36);
--   * integers are BIGINT (Rust i64), ratios DOUBLE PRECISION (f64);
--   * unique constraints are unique indexes named uniq_<table>0<col>[0<col>...]
--     (the error mapping in src/lib.rs and the code rely on these names);
--   * foreign keys are named fk_<table>_<column>.
-- Append-only: never edit this file once it has landed; add 0002_*.sql.

CREATE TABLE cell_mappings (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid                VARCHAR(36) NOT NULL,
    name                VARCHAR(255),
    transport_url       TEXT NOT NULL,
    database_connection TEXT NOT NULL,
    disabled            BOOLEAN NOT NULL DEFAULT FALSE,
    created_at          DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at          DATETIME
);
CREATE UNIQUE INDEX uniq_cell_mappings0uuid ON cell_mappings (uuid);
CREATE UNIQUE INDEX uniq_cell_mappings0name ON cell_mappings (name);

CREATE TABLE host_mappings (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    cell_id    BIGINT NOT NULL,
    host       VARCHAR(255) NOT NULL,
    created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at DATETIME,
    CONSTRAINT fk_host_mappings_cell_id FOREIGN KEY (cell_id) REFERENCES cell_mappings (id)
);
CREATE UNIQUE INDEX uniq_host_mappings0host ON host_mappings (host);
CREATE INDEX host_mappings_cell_id_idx ON host_mappings (cell_id);

CREATE TABLE instance_mappings (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_uuid     VARCHAR(36) NOT NULL,
    -- NULL until the scheduler has picked a cell (boot step 3).
    cell_id           BIGINT,
    project_id        VARCHAR(255) NOT NULL,
    user_id           VARCHAR(255),
    queued_for_delete BOOLEAN NOT NULL DEFAULT FALSE,
    created_at        DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at        DATETIME,
    CONSTRAINT fk_instance_mappings_cell_id FOREIGN KEY (cell_id) REFERENCES cell_mappings (id)
);
CREATE UNIQUE INDEX uniq_instance_mappings0instance_uuid ON instance_mappings (instance_uuid);
CREATE INDEX instance_mappings_project_id_idx ON instance_mappings (project_id, created_at, id);
CREATE INDEX instance_mappings_user_id_project_id_idx ON instance_mappings (user_id, project_id);
CREATE INDEX instance_mappings_cell_id_idx ON instance_mappings (cell_id);

CREATE TABLE request_specs (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_uuid VARCHAR(36) NOT NULL,
    spec          TEXT NOT NULL,
    created_at    DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at    DATETIME
);
CREATE UNIQUE INDEX uniq_request_specs0instance_uuid ON request_specs (instance_uuid);

CREATE TABLE build_requests (
    id                    INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_uuid         VARCHAR(36) NOT NULL,
    project_id            VARCHAR(255) NOT NULL,
    user_id               VARCHAR(255),
    -- JSON documents: the would-be instance, its BDMs and tags.
    instance              TEXT NOT NULL,
    block_device_mappings TEXT,
    tags                  TEXT,
    created_at            DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at            DATETIME
);
CREATE UNIQUE INDEX uniq_build_requests0instance_uuid ON build_requests (instance_uuid);
CREATE INDEX build_requests_project_id_idx ON build_requests (project_id, created_at);

CREATE TABLE flavors (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    flavorid     VARCHAR(255) NOT NULL,
    name         VARCHAR(255) NOT NULL,
    memory_mb    BIGINT NOT NULL,
    vcpus        BIGINT NOT NULL,
    root_gb      BIGINT NOT NULL DEFAULT 0,
    ephemeral_gb BIGINT NOT NULL DEFAULT 0,
    swap         BIGINT NOT NULL DEFAULT 0,
    vcpu_weight  BIGINT,
    rxtx_factor  DOUBLE PRECISION NOT NULL DEFAULT 1.0,
    disabled     BOOLEAN NOT NULL DEFAULT FALSE,
    is_public    BOOLEAN NOT NULL DEFAULT TRUE,
    description  TEXT,
    created_at   DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at   DATETIME
);
CREATE UNIQUE INDEX uniq_flavors0flavorid ON flavors (flavorid);
CREATE UNIQUE INDEX uniq_flavors0name ON flavors (name);

CREATE TABLE flavor_extra_specs (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    flavor_id  BIGINT NOT NULL,
    key        VARCHAR(255) NOT NULL,
    value      VARCHAR(255),
    created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at DATETIME,
    CONSTRAINT fk_flavor_extra_specs_flavor_id FOREIGN KEY (flavor_id) REFERENCES flavors (id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX uniq_flavor_extra_specs0flavor_id0key ON flavor_extra_specs (flavor_id, key);

CREATE TABLE flavor_projects (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    flavor_id  BIGINT NOT NULL,
    project_id VARCHAR(255) NOT NULL,
    created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at DATETIME,
    CONSTRAINT fk_flavor_projects_flavor_id FOREIGN KEY (flavor_id) REFERENCES flavors (id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX uniq_flavor_projects0flavor_id0project_id ON flavor_projects (flavor_id, project_id);
CREATE INDEX flavor_projects_project_id_idx ON flavor_projects (project_id);

CREATE TABLE key_pairs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id     VARCHAR(255) NOT NULL,
    name        VARCHAR(255) NOT NULL,
    type        VARCHAR(10) NOT NULL DEFAULT 'ssh',
    fingerprint VARCHAR(255),
    public_key  TEXT,
    created_at  DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at  DATETIME,
    CONSTRAINT ck_key_pairs_type CHECK (type IN ('ssh', 'x509'))
);
CREATE UNIQUE INDEX uniq_key_pairs0user_id0name ON key_pairs (user_id, name);

CREATE TABLE instance_groups (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid       VARCHAR(36) NOT NULL,
    name       VARCHAR(255),
    user_id    VARCHAR(255),
    project_id VARCHAR(255),
    created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at DATETIME
);
CREATE UNIQUE INDEX uniq_instance_groups0uuid ON instance_groups (uuid);
CREATE INDEX instance_groups_project_id_idx ON instance_groups (project_id);

CREATE TABLE instance_group_policy (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    group_id   BIGINT NOT NULL,
    policy     VARCHAR(255) NOT NULL,
    -- JSON, e.g. {"max_server_per_host": 2}
    rules      TEXT,
    created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at DATETIME,
    CONSTRAINT fk_instance_group_policy_group_id FOREIGN KEY (group_id) REFERENCES instance_groups (id) ON DELETE CASCADE
);
CREATE INDEX instance_group_policy_group_id_idx ON instance_group_policy (group_id);

CREATE TABLE instance_group_member (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    group_id      BIGINT NOT NULL,
    instance_uuid VARCHAR(36) NOT NULL,
    created_at    DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at    DATETIME,
    CONSTRAINT fk_instance_group_member_group_id FOREIGN KEY (group_id) REFERENCES instance_groups (id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX uniq_instance_group_member0group_id0instance_uuid ON instance_group_member (group_id, instance_uuid);
CREATE INDEX instance_group_member_instance_uuid_idx ON instance_group_member (instance_uuid);

CREATE TABLE aggregates (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid       VARCHAR(36) NOT NULL,
    name       VARCHAR(255) NOT NULL,
    created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at DATETIME
);
CREATE UNIQUE INDEX uniq_aggregates0uuid ON aggregates (uuid);
CREATE UNIQUE INDEX uniq_aggregates0name ON aggregates (name);

CREATE TABLE aggregate_hosts (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    aggregate_id BIGINT NOT NULL,
    host         VARCHAR(255) NOT NULL,
    created_at   DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at   DATETIME,
    CONSTRAINT fk_aggregate_hosts_aggregate_id FOREIGN KEY (aggregate_id) REFERENCES aggregates (id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX uniq_aggregate_hosts0host0aggregate_id ON aggregate_hosts (host, aggregate_id);
CREATE INDEX aggregate_hosts_aggregate_id_idx ON aggregate_hosts (aggregate_id);

CREATE TABLE aggregate_metadata (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    aggregate_id BIGINT NOT NULL,
    key          VARCHAR(255) NOT NULL,
    value        VARCHAR(255) NOT NULL,
    created_at   DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at   DATETIME,
    CONSTRAINT fk_aggregate_metadata_aggregate_id FOREIGN KEY (aggregate_id) REFERENCES aggregates (id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX uniq_aggregate_metadata0aggregate_id0key ON aggregate_metadata (aggregate_id, key);
CREATE INDEX aggregate_metadata_key_idx ON aggregate_metadata (key);

-- Quota limits. Usage is counted from the databases, never stored.
CREATE TABLE quotas (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id VARCHAR(255) NOT NULL,
    resource   VARCHAR(255) NOT NULL,
    hard_limit BIGINT,
    created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at DATETIME
);
CREATE UNIQUE INDEX uniq_quotas0project_id0resource ON quotas (project_id, resource);

CREATE TABLE quota_classes (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    class_name VARCHAR(255) NOT NULL,
    resource   VARCHAR(255) NOT NULL,
    hard_limit BIGINT,
    created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at DATETIME
);
CREATE UNIQUE INDEX uniq_quota_classes0class_name0resource ON quota_classes (class_name, resource);

CREATE TABLE project_user_quotas (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id VARCHAR(255) NOT NULL,
    user_id    VARCHAR(255) NOT NULL,
    resource   VARCHAR(255) NOT NULL,
    hard_limit BIGINT,
    created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at DATETIME
);
CREATE UNIQUE INDEX uniq_project_user_quotas0user_id0project_id0resource ON project_user_quotas (user_id, project_id, resource);
CREATE INDEX project_user_quotas_project_id_idx ON project_user_quotas (project_id);
