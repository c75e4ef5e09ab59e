-- Quota usage is counted from the API database so that a cell that is down
-- cannot hide it: every instance mapping records the size of its instance
-- (from its flavor at create time). Mappings written before this migration
-- count as 0 cores / 0 MB.
ALTER TABLE instance_mappings ADD COLUMN vcpus BIGINT NOT NULL DEFAULT 0;
ALTER TABLE instance_mappings ADD COLUMN memory_mb BIGINT NOT NULL DEFAULT 0;

-- One row per quota scope ("project:<id>", "user:<id>"): a check-and-insert
-- locks its row (SELECT ... FOR UPDATE on PostgreSQL) so that concurrent
-- creates of one project take turns and cannot race past a limit. SQLite's
-- write transactions (BEGIN IMMEDIATE) already take turns.
CREATE TABLE quota_locks (
    scope      VARCHAR(255) NOT NULL PRIMARY KEY,
    created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
);
