-- Allocations and consumers lose their foreign keys, as in upstream
-- Placement's schema, which has none on `allocations` (provider, consumer,
-- class) nor on `consumers.project_id` / `user_id`; the consumer type's,
-- which upstream keeps, goes too (consumer types are never deleted, so it
-- guarded nothing). Each of them made a claim lock the referenced row
-- (`FOR KEY SHARE`); the class, project, user and consumer type rows are
-- shared by every concurrent claim, so those locks became multixacts, and
-- a claim of three classes ran twelve referential-integrity queries
-- besides its own statement.
--
-- What they guarded is kept by the writes themselves (see
-- placement/src/db/allocations.rs and providers.rs): allocations are only
-- written with their consumer row in the same transaction (the claim in
-- the same statement), a consumer is deleted only with its allocations and
-- only at the generation read (compare-and-delete), every allocation write
-- compare-and-bumps the generation of each provider it allocates from, and
-- a provider delete takes that row's lock before it counts the provider's
-- allocations; a class in use by an inventory cannot go (that foreign key
-- stays), and a claim allocates a class only against an inventory of it.
-- Projects, users and consumer types are never deleted.
ALTER TABLE allocations
    DROP CONSTRAINT fk_allocations_resource_provider_id,
    DROP CONSTRAINT fk_allocations_consumer_id,
    DROP CONSTRAINT fk_allocations_resource_class_id;
ALTER TABLE consumers
    DROP CONSTRAINT fk_consumers_project_id,
    DROP CONSTRAINT fk_consumers_user_id,
    DROP CONSTRAINT fk_consumers_consumer_type_id;
