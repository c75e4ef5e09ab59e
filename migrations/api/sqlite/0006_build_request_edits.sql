-- Whether a build request was edited (`PUT /servers/{id}`: name,
-- description, hostname) after it was written: the landing deletes it and
-- reads the edits back in the same statement, then applies them to the
-- instance it has just written in its cell. An edit either reaches the
-- build request before that delete (and the landing carries it over) or
-- finds no build request and goes to the cell's row, which exists by then.
ALTER TABLE build_requests ADD COLUMN edited BOOLEAN NOT NULL DEFAULT FALSE;
