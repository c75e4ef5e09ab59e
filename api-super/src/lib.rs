//! `api-super`: the public Compute API (axum), identity (Keystone v3 subset),
//! image service (Glance v2 subset), policy, quotas, the super-conductor and
//! the global scheduler.
//!
//! Owns the API database and reaches every cell's database and broker.
//!
//! May depend on: `fabric`, `migrations`, `cell-mapping`, sqlx, axum. Must
//! not depend on cell-conductor or compute (it talks to them over the
//! broker).
//!
//! Status: identity is built ([`identity`]: tokens, catalog, admin subset,
//! policy engine); the Compute API ([`compute_api`]: versions,
//! microversions, flavors, servers create/list/show/update/delete), the
//! super-conductor ([`conductor`]) and the global scheduler ([`scheduler`])
//! are built; images and quotas are not.

pub mod cells;
pub mod compute_api;
pub mod conductor;
pub mod console_proxy;
pub mod http;
pub mod identity;
pub mod image;
pub mod image_props;
pub mod scheduler;
pub(crate) mod services;

pub use compute_api::{
    seed_flavors, serve_compute, ComputeConfig, ComputeDeps, Running as ComputeRunning,
};
pub use identity::{serve_identity, IdentityConfig};
pub use image::{serve_image, ImageConfig};
