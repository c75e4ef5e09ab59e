//! `cell-mapping`: API-database access for cells, hosts and instances, and the
//! operator CLI (cell onboarding, host discovery, instance mapping).
//!
//! May depend on: `fabric`, `migrations`, sqlx. Must not depend on api-super,
//! cell-conductor or compute.
//!
//! Status: being built (issue 4).
