-- The PostgreSQL schema drops `instances_task_state_updated_at_idx` (no
-- query of this project filters on it; there it made every build step's
-- update write every index of the table); the same here, so that both
-- backends keep the same indexes.
DROP INDEX instances_task_state_updated_at_idx;
