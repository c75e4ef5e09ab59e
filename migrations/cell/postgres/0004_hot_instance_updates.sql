-- Every step of a build updates its instance row (task state, updated_at,
-- the update's key). With `instances_task_state_updated_at_idx` (Nova's;
-- no query of this project filters on it) each of those updates changed
-- an indexed column and so wrote a new entry into every index of the table
-- (eleven). Without it none of a build's updates changes an indexed column,
-- and with free room left on each page PostgreSQL updates the row in place
-- ("HOT": no index entry written). The same room helps the action rows,
-- which are bumped, and the events, which are finished, soon after insert.
DROP INDEX instances_task_state_updated_at_idx;
ALTER TABLE instances SET (fillfactor = 70);
ALTER TABLE instance_actions SET (fillfactor = 80);
ALTER TABLE instance_actions_events SET (fillfactor = 80);
