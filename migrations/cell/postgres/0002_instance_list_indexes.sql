-- The server list pages by (created_at, uuid) (newest first, the uuid
-- breaking ties, compared byte-wise so that every cell and the API's merge
-- agree): these partial indexes answer a page of live instances with a
-- backward index scan, per project and across projects, without sorting
-- and without stepping over the soft-deleted rows a cell accumulates.
CREATE INDEX instances_live_project_created_at_uuid_idx
    ON instances (project_id, created_at, uuid COLLATE "C") WHERE NOT deleted;
CREATE INDEX instances_live_created_at_uuid_idx
    ON instances (created_at, uuid COLLATE "C") WHERE NOT deleted;
