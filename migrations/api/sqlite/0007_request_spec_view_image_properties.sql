-- Whether a request spec holds the image's properties recorded at create
-- or rebuild, which the server views show from microversion 2.98
-- (`image.properties`). Kept apart from `view_fields`: most images have
-- such properties, and the views of older microversions need not read
-- those specs. Specs written before this migration recorded none.
ALTER TABLE request_specs ADD COLUMN view_image_properties BOOLEAN NOT NULL DEFAULT FALSE;
