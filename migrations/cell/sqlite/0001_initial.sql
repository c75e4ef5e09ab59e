-- Cell database (upstream: nova cell DB, also used for cell0), initial schema.
-- Same conventions as the API schema (see api/sqlite/0001_initial.sql).
-- Soft delete (deleted + deleted_at) on instances, services, compute_nodes,
-- block_device_mapping and migrations, as upstream. Rows that belong to one
-- instance (faults, actions, metadata, caches, tags, extra, VIFs) have no
-- soft-delete flag of their own: they live and die with their instance row
-- (ON DELETE CASCADE when the instance row is purged).
-- Append-only: never edit this file once it has landed; add 0002_*.sql.

CREATE TABLE instances (
    -- Cell-local sequence: stable sort key and pagination tie-breaker.
    id                       INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid                     VARCHAR(36) NOT NULL,
    project_id               VARCHAR(255) NOT NULL,
    user_id                  VARCHAR(255) NOT NULL,
    display_name             VARCHAR(255),
    display_description      TEXT,
    hostname                 VARCHAR(255),
    host                     VARCHAR(255),
    node                     VARCHAR(255),
    compute_id               BIGINT,
    launched_on              TEXT,
    reservation_id           VARCHAR(255),
    launch_index             BIGINT,
    instance_type_id         BIGINT,
    image_ref                VARCHAR(255),
    kernel_id                VARCHAR(255),
    ramdisk_id               VARCHAR(255),
    vm_state                 VARCHAR(255),
    task_state               VARCHAR(255),
    power_state              BIGINT,
    memory_mb                BIGINT,
    vcpus                    BIGINT,
    root_gb                  BIGINT,
    ephemeral_gb             BIGINT,
    availability_zone        VARCHAR(255),
    launched_at              DATETIME,
    terminated_at            DATETIME,
    scheduled_at             DATETIME,
    key_name                 VARCHAR(255),
    key_data                 TEXT,
    user_data                TEXT,
    locked                   BOOLEAN NOT NULL DEFAULT FALSE,
    locked_by                VARCHAR(10),
    access_ip_v4             VARCHAR(39),
    access_ip_v6             VARCHAR(39),
    config_drive             VARCHAR(255),
    auto_disk_config         BOOLEAN,
    progress                 BIGINT,
    os_type                  VARCHAR(255),
    architecture             VARCHAR(255),
    vm_mode                  VARCHAR(255),
    root_device_name         VARCHAR(255),
    default_ephemeral_device VARCHAR(255),
    default_swap_device      VARCHAR(255),
    shutdown_terminate       BOOLEAN NOT NULL DEFAULT FALSE,
    disable_terminate        BOOLEAN NOT NULL DEFAULT FALSE,
    hidden                   BOOLEAN NOT NULL DEFAULT FALSE,
    created_at               DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at               DATETIME,
    deleted_at               DATETIME,
    deleted                  BOOLEAN NOT NULL DEFAULT FALSE,
    CONSTRAINT ck_instances_locked_by CHECK (locked_by IS NULL OR locked_by IN ('owner', 'admin'))
);
-- A UUID is never reused, not even after a soft delete.
CREATE UNIQUE INDEX uniq_instances0uuid ON instances (uuid);
CREATE INDEX instances_project_id_created_at_idx ON instances (project_id, created_at, id);
CREATE INDEX instances_deleted_created_at_idx ON instances (deleted, created_at, id);
CREATE INDEX instances_host_deleted_idx ON instances (host, deleted);
CREATE INDEX instances_host_node_deleted_idx ON instances (host, node, deleted);
CREATE INDEX instances_task_state_updated_at_idx ON instances (task_state, updated_at);
CREATE INDEX instances_reservation_id_idx ON instances (reservation_id);

CREATE TABLE instance_faults (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_uuid VARCHAR(36) NOT NULL,
    code          BIGINT NOT NULL,
    message       VARCHAR(255),
    details       TEXT,
    host          VARCHAR(255),
    created_at    DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at    DATETIME,
    CONSTRAINT fk_instance_faults_instance_uuid FOREIGN KEY (instance_uuid) REFERENCES instances (uuid) ON DELETE CASCADE
);
CREATE INDEX instance_faults_instance_uuid_created_at_idx ON instance_faults (instance_uuid, created_at);

CREATE TABLE instance_actions (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_uuid     VARCHAR(36) NOT NULL,
    action            VARCHAR(255) NOT NULL,
    request_id        VARCHAR(255) NOT NULL,
    global_request_id VARCHAR(255),
    user_id           VARCHAR(255),
    project_id        VARCHAR(255),
    start_time        DATETIME,
    finish_time       DATETIME,
    message           VARCHAR(255),
    created_at        DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at        DATETIME,
    CONSTRAINT fk_instance_actions_instance_uuid FOREIGN KEY (instance_uuid) REFERENCES instances (uuid) ON DELETE CASCADE
);
-- One action per (instance, request): lets retried steps find their action.
CREATE UNIQUE INDEX uniq_instance_actions0instance_uuid0request_id ON instance_actions (instance_uuid, request_id);
CREATE INDEX instance_actions_request_id_idx ON instance_actions (request_id);
CREATE INDEX instance_actions_instance_uuid_created_at_idx ON instance_actions (instance_uuid, created_at, id);

CREATE TABLE instance_actions_events (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    action_id         BIGINT NOT NULL,
    event             VARCHAR(255) NOT NULL,
    host              VARCHAR(255),
    result            VARCHAR(255),
    traceback         TEXT,
    details           TEXT,
    request_id        VARCHAR(255),
    global_request_id VARCHAR(255),
    start_time        DATETIME,
    finish_time       DATETIME,
    created_at        DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at        DATETIME,
    CONSTRAINT fk_instance_actions_events_action_id FOREIGN KEY (action_id) REFERENCES instance_actions (id) ON DELETE CASCADE
);
CREATE INDEX instance_actions_events_action_id_idx ON instance_actions_events (action_id, event);

CREATE TABLE instance_metadata (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_uuid VARCHAR(36) NOT NULL,
    key           VARCHAR(255) NOT NULL,
    value         VARCHAR(255),
    created_at    DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at    DATETIME,
    CONSTRAINT fk_instance_metadata_instance_uuid FOREIGN KEY (instance_uuid) REFERENCES instances (uuid) ON DELETE CASCADE
);
CREATE UNIQUE INDEX uniq_instance_metadata0instance_uuid0key ON instance_metadata (instance_uuid, key);

CREATE TABLE instance_system_metadata (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_uuid VARCHAR(36) NOT NULL,
    key           VARCHAR(255) NOT NULL,
    value         TEXT,
    created_at    DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at    DATETIME,
    CONSTRAINT fk_instance_system_metadata_instance_uuid FOREIGN KEY (instance_uuid) REFERENCES instances (uuid) ON DELETE CASCADE
);
CREATE UNIQUE INDEX uniq_instance_system_metadata0instance_uuid0key ON instance_system_metadata (instance_uuid, key);

CREATE TABLE instance_info_caches (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_uuid VARCHAR(36) NOT NULL,
    -- JSON: the network_info model.
    network_info  TEXT,
    created_at    DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at    DATETIME,
    CONSTRAINT fk_instance_info_caches_instance_uuid FOREIGN KEY (instance_uuid) REFERENCES instances (uuid) ON DELETE CASCADE
);
CREATE UNIQUE INDEX uniq_instance_info_caches0instance_uuid ON instance_info_caches (instance_uuid);

CREATE TABLE instance_extra (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_uuid    VARCHAR(36) NOT NULL,
    -- JSON documents.
    flavor           TEXT,
    numa_topology    TEXT,
    pci_requests     TEXT,
    vcpu_model       TEXT,
    migration_context TEXT,
    keypairs         TEXT,
    device_metadata  TEXT,
    trusted_certs    TEXT,
    resources        TEXT,
    created_at       DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at       DATETIME,
    CONSTRAINT fk_instance_extra_instance_uuid FOREIGN KEY (instance_uuid) REFERENCES instances (uuid) ON DELETE CASCADE
);
CREATE UNIQUE INDEX uniq_instance_extra0instance_uuid ON instance_extra (instance_uuid);

CREATE TABLE tags (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    resource_id VARCHAR(36) NOT NULL,
    tag         VARCHAR(80) NOT NULL,
    created_at  DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT fk_tags_resource_id FOREIGN KEY (resource_id) REFERENCES instances (uuid) ON DELETE CASCADE
);
CREATE UNIQUE INDEX uniq_tags0resource_id0tag ON tags (resource_id, tag);
CREATE INDEX tags_tag_idx ON tags (tag);

CREATE TABLE virtual_interfaces (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid          VARCHAR(36) NOT NULL,
    instance_uuid VARCHAR(36) NOT NULL,
    address       VARCHAR(255) NOT NULL,
    network_id    VARCHAR(36),
    tag           VARCHAR(255),
    created_at    DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at    DATETIME,
    CONSTRAINT fk_virtual_interfaces_instance_uuid FOREIGN KEY (instance_uuid) REFERENCES instances (uuid) ON DELETE CASCADE
);
CREATE UNIQUE INDEX uniq_virtual_interfaces0uuid ON virtual_interfaces (uuid);
CREATE UNIQUE INDEX uniq_virtual_interfaces0address ON virtual_interfaces (address);
CREATE INDEX virtual_interfaces_instance_uuid_idx ON virtual_interfaces (instance_uuid);

CREATE TABLE block_device_mapping (
    id                    INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid                  VARCHAR(36) NOT NULL,
    instance_uuid         VARCHAR(36) NOT NULL,
    source_type           VARCHAR(255),
    destination_type      VARCHAR(255),
    guest_format          VARCHAR(255),
    device_type           VARCHAR(255),
    disk_bus              VARCHAR(255),
    boot_index            BIGINT,
    device_name           VARCHAR(255),
    delete_on_termination BOOLEAN NOT NULL DEFAULT FALSE,
    snapshot_id           VARCHAR(36),
    volume_id             VARCHAR(36),
    volume_size           BIGINT,
    volume_type           VARCHAR(255),
    image_id              VARCHAR(36),
    no_device             BOOLEAN NOT NULL DEFAULT FALSE,
    -- JSON
    connection_info       TEXT,
    tag                   VARCHAR(255),
    attachment_id         VARCHAR(36),
    encrypted             BOOLEAN NOT NULL DEFAULT FALSE,
    encryption_secret_uuid VARCHAR(36),
    encryption_format     VARCHAR(128),
    encryption_options    TEXT,
    created_at            DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at            DATETIME,
    deleted_at            DATETIME,
    deleted               BOOLEAN NOT NULL DEFAULT FALSE,
    CONSTRAINT fk_block_device_mapping_instance_uuid FOREIGN KEY (instance_uuid) REFERENCES instances (uuid) ON DELETE CASCADE
);
CREATE UNIQUE INDEX uniq_block_device_mapping0uuid ON block_device_mapping (uuid);
CREATE INDEX block_device_mapping_instance_uuid_idx ON block_device_mapping (instance_uuid, deleted);
CREATE INDEX block_device_mapping_volume_id_idx ON block_device_mapping (volume_id);

CREATE TABLE services (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid            VARCHAR(36) NOT NULL,
    host            VARCHAR(255) NOT NULL,
    "binary"        VARCHAR(255) NOT NULL,
    topic           VARCHAR(255),
    report_count    BIGINT NOT NULL DEFAULT 0,
    disabled        BOOLEAN NOT NULL DEFAULT FALSE,
    disabled_reason VARCHAR(255),
    forced_down     BOOLEAN NOT NULL DEFAULT FALSE,
    last_seen_up    DATETIME,
    version         BIGINT NOT NULL DEFAULT 0,
    created_at      DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at      DATETIME,
    deleted_at      DATETIME,
    deleted         BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE UNIQUE INDEX uniq_services0uuid ON services (uuid);
-- Unique among live rows only: a host may be re-registered after a delete.
CREATE UNIQUE INDEX uniq_services0host0binary ON services (host, "binary") WHERE NOT deleted;
CREATE UNIQUE INDEX uniq_services0host0topic ON services (host, topic) WHERE NOT deleted;

CREATE TABLE compute_nodes (
    id                    INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid                  VARCHAR(36) NOT NULL,
    service_id            BIGINT,
    host                  VARCHAR(255) NOT NULL,
    hypervisor_hostname   VARCHAR(255) NOT NULL,
    hypervisor_type       VARCHAR(255) NOT NULL,
    hypervisor_version    BIGINT NOT NULL DEFAULT 0,
    vcpus                 BIGINT NOT NULL,
    memory_mb             BIGINT NOT NULL,
    local_gb              BIGINT NOT NULL,
    vcpus_used            BIGINT NOT NULL DEFAULT 0,
    memory_mb_used        BIGINT NOT NULL DEFAULT 0,
    local_gb_used         BIGINT NOT NULL DEFAULT 0,
    free_ram_mb           BIGINT,
    free_disk_gb          BIGINT,
    disk_available_least  BIGINT,
    current_workload      BIGINT,
    running_vms           BIGINT,
    host_ip               VARCHAR(39),
    cpu_allocation_ratio  DOUBLE PRECISION,
    ram_allocation_ratio  DOUBLE PRECISION,
    disk_allocation_ratio DOUBLE PRECISION,
    -- JSON documents.
    cpu_info              TEXT,
    supported_instances   TEXT,
    pci_stats             TEXT,
    numa_topology         TEXT,
    stats                 TEXT,
    -- Set once host discovery has created the host mapping.
    mapped                BOOLEAN NOT NULL DEFAULT FALSE,
    created_at            DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at            DATETIME,
    deleted_at            DATETIME,
    deleted               BOOLEAN NOT NULL DEFAULT FALSE,
    CONSTRAINT fk_compute_nodes_service_id FOREIGN KEY (service_id) REFERENCES services (id)
);
CREATE UNIQUE INDEX uniq_compute_nodes0uuid ON compute_nodes (uuid);
CREATE UNIQUE INDEX uniq_compute_nodes0host0hypervisor_hostname ON compute_nodes (host, hypervisor_hostname) WHERE NOT deleted;
CREATE INDEX compute_nodes_service_id_idx ON compute_nodes (service_id);
CREATE INDEX compute_nodes_mapped_idx ON compute_nodes (mapped, deleted);

CREATE TABLE migrations (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid                 VARCHAR(36) NOT NULL,
    instance_uuid        VARCHAR(36) NOT NULL,
    migration_type       VARCHAR(20) NOT NULL,
    status               VARCHAR(255) NOT NULL,
    source_compute       VARCHAR(255),
    source_node          VARCHAR(255),
    dest_compute         VARCHAR(255),
    dest_node            VARCHAR(255),
    dest_host            VARCHAR(255),
    old_instance_type_id BIGINT,
    new_instance_type_id BIGINT,
    hidden               BOOLEAN NOT NULL DEFAULT FALSE,
    cross_cell_move      BOOLEAN NOT NULL DEFAULT FALSE,
    memory_total         BIGINT,
    memory_processed     BIGINT,
    memory_remaining     BIGINT,
    disk_total           BIGINT,
    disk_processed       BIGINT,
    disk_remaining       BIGINT,
    user_id              VARCHAR(255),
    project_id           VARCHAR(255),
    created_at           DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at           DATETIME,
    deleted_at           DATETIME,
    deleted              BOOLEAN NOT NULL DEFAULT FALSE,
    CONSTRAINT fk_migrations_instance_uuid FOREIGN KEY (instance_uuid) REFERENCES instances (uuid) ON DELETE CASCADE,
    CONSTRAINT ck_migrations_migration_type CHECK (migration_type IN ('migration', 'resize', 'live-migration', 'evacuation'))
);
CREATE UNIQUE INDEX uniq_migrations0uuid ON migrations (uuid);
CREATE INDEX migrations_instance_uuid_and_status_idx ON migrations (deleted, instance_uuid, status);
CREATE INDEX migrations_by_host_nodes_and_status_idx ON migrations (deleted, source_compute, dest_compute, source_node, dest_node, status);
CREATE INDEX migrations_updated_at_idx ON migrations (updated_at);
