-- The server list pages by (created_at, uuid) (newest first, the uuid
-- breaking ties, compared byte-wise so that every cell and the API's merge
-- agree): these indexes answer a page with a backward index scan instead
-- of sorting every matching row, per project and across projects.
CREATE INDEX instances_project_id_created_at_uuid_idx
    ON instances (project_id, created_at, uuid COLLATE "C");
CREATE INDEX instances_deleted_created_at_uuid_idx
    ON instances (deleted, created_at, uuid COLLATE "C");
