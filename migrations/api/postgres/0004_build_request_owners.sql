-- Healing of builds whose scheduler died (api-super's build healer): every
-- api-super process that serves the Compute API keeps a heartbeat row here
-- under a random id, and each build request records the process that
-- drives it. A build request whose owner has not heartbeated for longer
-- than the grace (or that has no owner and is older than the grace) is
-- taken over, with a compare-and-set on `owner`, and scheduled again.
CREATE TABLE api_schedulers (
    id           VARCHAR(36) NOT NULL PRIMARY KEY,
    heartbeat_at TIMESTAMPTZ NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT CURRENT_TIMESTAMP
);
-- NULL: written before this migration (or by a tool): an orphan once it is
-- older than the grace.
ALTER TABLE build_requests ADD COLUMN owner VARCHAR(36);
CREATE INDEX build_requests_owner_idx ON build_requests (owner);
