//! `api-super`: the public Compute API (axum), identity (Keystone v3 subset),
//! image service (Glance v2 subset), policy, quotas, the super-conductor and
//! the global scheduler.
//!
//! Owns the API database and reaches every cell's database and broker.
//!
//! May depend on: `fabric`, `migrations`, sqlx, axum. Must not depend on
//! cell-conductor or compute (it talks to them over the broker).
//!
//! Status: not built yet.
