-- The idempotency key of the last compute update the cell conductor
-- applied to the instance (`instance_update`'s `update_id`): a compute that
-- repeats an update after losing the broker connection gets the current
-- row back instead of a refusal or a second copy of the update's events.
-- Not part of upstream Nova's schema.
ALTER TABLE instances ADD COLUMN last_update_id VARCHAR(36);
