-- Whether a request spec holds something the server views show (a key
-- name, the zone asked for, flavor extra specs, scheduler hints): a list
-- reads the specs of its page's servers only where this is set, rather
-- than scanning every spec's text. Rows written before this migration are
-- read (TRUE), as they were.
ALTER TABLE request_specs ADD COLUMN view_fields BOOLEAN NOT NULL DEFAULT TRUE;
