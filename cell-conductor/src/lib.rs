//! `cell-conductor`: the per-cell orchestrator.
//!
//! The only writer of its cell database on behalf of computes; reschedules
//! with alternates; runs the cell-level periodic tasks. Talks to its cell's
//! broker and to placement; never calls up into the API layer.
//!
//! May depend on: `fabric`, `migrations`, sqlx. Must not depend on api-super
//! or compute.
//!
//! Status: the cell-database schema exists (see `migrations`); the conductor
//! is not built yet.
