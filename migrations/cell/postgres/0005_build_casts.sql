-- Builds cast to a compute host and not finished yet (issue 31): the
-- message, so that the cell conductor's healing can re-drive a build whose
-- host died or whose cast expired unread, without the API. A row goes
-- once its instance is no longer building (the healing removes it).
CREATE TABLE build_casts (
    instance_uuid      VARCHAR(36) PRIMARY KEY,
    host               VARCHAR(255) NOT NULL,
    message            BYTEA NOT NULL,
    request_id         VARCHAR(255) NOT NULL DEFAULT '',
    global_request_id  VARCHAR(255) NOT NULL DEFAULT '',
    cast_at            TIMESTAMPTZ NOT NULL,
    expires_at         TIMESTAMPTZ NOT NULL
);
CREATE INDEX build_casts_host_idx ON build_casts (host);
CREATE INDEX build_casts_expires_at_idx ON build_casts (expires_at);
-- The build timeout looks only at building instances, oldest first.
CREATE INDEX instances_building_created_at_idx
    ON instances (created_at) WHERE vm_state = 'building' AND NOT deleted;
