-- A cell is named by its pair of URLs: two cells may not share the same
-- transport URL and database connection. The unique index makes the
-- "URL pair already in use" refusal of create-cell/update-cell hold under
-- concurrent runs, not only when they take turns.
CREATE UNIQUE INDEX uniq_cell_mappings0transport_url0database_connection
    ON cell_mappings (transport_url, database_connection);
