//! `compute`: the per-host agent.
//!
//! - [`driver`]: the hypervisor [`driver::Driver`] trait, the
//!   [`driver::fake`] driver (hundreds of hosts per process; automatic and
//!   explicit modes; per-host knobs to fail or delay spawns) and the
//!   [`driver::libvirt`] driver (real guests through libvirtd; built by
//!   default, so every build links libvirt).
//! - [`agent`]: one task per host: registration, heartbeats, inventory
//!   reporting, `build_and_run_instance` and `terminate_instance`
//!   ([`agent::start_host`]).
//! - [`init_host`]: the start-up reconciliation of a host's guests with
//!   the cell database (Nova's `init_host`), run before the host is ready.
//! - [`conductor`]: typed calls to the cell conductor, the only writer of
//!   the cell database: compute never opens a database.
//! - [`power_sync`]: power state follows the guest (a guest that powers
//!   itself off is seen as stopped within seconds).
//! - [`placement`]: inventory reporting ([`placement::Placement`] trait, HTTP
//!   implementation with `X-Auth-Token`, in-memory one for tests).
//!
//! May depend on: `fabric`, an HTTP client for placement and the image
//! service, and libvirt's bindings (`virt`). Must never
//! depend on sqlx or on axum's server side: compute holds no database
//! credentials.

mod actions;
pub mod agent;
pub mod conductor;
pub mod config;
pub mod config_drive;
pub mod diagnostics;
pub mod driver;
pub mod error;
pub mod external_events;
pub mod init_host;
pub mod metrics;
pub mod placement;
pub mod power_sync;
mod terminate;

pub use agent::{start_host, HostConfig, HostHandle, HostResources, HostState};
pub use error::ComputeError;
