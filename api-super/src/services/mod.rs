//! The service layer under the Compute API: the workflows a handler calls
//! once it has parsed and authorized a request, across the API database,
//! the cell databases, the cells' buses and placement. A handler parses,
//! authorizes, calls a service and renders its result, holding no SQL and
//! no retries (the SQL itself stays in `compute_api::db` and
//! `cell_mapping::db`); the `/servers` handlers and the server actions
//! are written so, the others are to follow.
//!
//! - [`actions`]: power actions, rebuild, lock and unlock of a server.
//! - [`boot`]: a create's builds, written and handed to the
//!   super-conductor.
//! - [`console`]: a guest's console output, asked of its compute.
//! - [`diagnostics`]: a guest's diagnostics, asked of its compute.
//! - [`external_events`]: events from other services, to the computes.
//! - [`delete`]: a delete, by the compute or, with none to do it, here.
//! - [`host_uptime`]: a compute host's uptime, asked of its compute.
//! - [`update`]: a rename (name, description, hostname) of a build or an
//!   instance.

pub mod actions;
pub mod boot;
pub mod console;
pub mod delete;
pub mod diagnostics;
pub mod external_events;
pub mod host_uptime;
pub mod update;
