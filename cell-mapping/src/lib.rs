//! `cell-mapping`: the API-database access for cells, hosts and instances,
//! and the operator CLI `cell-manage` (the counterpart of
//! `nova-manage cell_v2`, `db` and `api_db`).
//!
//! - [`db`]: all the SQL — [`db::api`] on the API database's
//!   `cell_mappings`, `host_mappings`, `instance_mappings`; [`db::cell`] the
//!   few reads/writes on a cell database that discovery and mapping need.
//! - [`cells`], [`hosts`], [`instances`], [`sync`]: the operations behind
//!   the commands, usable by other binaries.
//! - [`discover`]: host discovery, safe to run concurrently, and
//!   [`discover::run_periodic`] for api-super.
//! - [`cache`]: [`cache::CellCache`], the cell-mapping cache api-super reads
//!   cells through; it sees new, changed and disabled cells within seconds.
//! - [`cli`]: the clap commands; the only place errors become exit codes.
//! - [`url`]: URL validation and password masking (`user:****@`).
//!
//! May depend on: `fabric` (ids, config, bus for broker reachability),
//! `migrations`, sqlx, clap. Must not depend on api-super, cell-conductor,
//! compute, placement or region; api-super depends on this crate.

pub mod cache;
pub mod cells;
pub mod cli;
pub mod db;
pub mod discover;
mod error;
pub mod hosts;
pub mod instances;
pub mod metrics;
pub mod sync;
pub mod url;

pub use cache::{CacheConfig, CellCache, CellSnapshot};
pub use db::{ApiDb, CellDb, CellMapping, HostMapping};
pub use discover::{discover_hosts, DiscoverOptions, Discovery, DiscoveryConfig};
pub use error::Error;
