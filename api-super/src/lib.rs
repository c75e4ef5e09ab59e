//! `api-super`: the public Compute API (axum), identity (Keystone v3 subset),
//! image service (Glance v2 subset), policy, quotas, the super-conductor and
//! the global scheduler.
//!
//! Owns the API database and reaches every cell's database and broker.
//!
//! May depend on: `fabric`, `migrations`, sqlx, axum. Must not depend on
//! cell-conductor or compute (it talks to them over the broker).
//!
//! Status: identity is built ([`identity`]: tokens, catalog, admin subset,
//! policy engine); the Compute API, images and the scheduler are not.

pub mod http;
pub mod identity;

pub use identity::{serve_identity, IdentityConfig};
