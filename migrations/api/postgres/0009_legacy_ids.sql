-- Region-wide integer ids for compute nodes and services, the ids the
-- Compute API answers below microversion 2.53. A cell's own ids repeat
-- from cell to cell; these do not. A row is added the first time the API
-- shows a node or service (keyed by its UUID) and is never reused, so an
-- id keeps naming the same node or service for as long as it exists.
CREATE TABLE compute_node_ids (
    id         BIGSERIAL PRIMARY KEY,
    uuid       VARCHAR(36) NOT NULL
);
CREATE UNIQUE INDEX uniq_compute_node_ids0uuid ON compute_node_ids (uuid);
CREATE TABLE service_ids (
    id         BIGSERIAL PRIMARY KEY,
    uuid       VARCHAR(36) NOT NULL
);
CREATE UNIQUE INDEX uniq_service_ids0uuid ON service_ids (uuid);
