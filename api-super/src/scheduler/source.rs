//! What the scheduler reads besides placement and the cells' databases:
//! the API database's host mappings, aggregates (zones and metadata),
//! flavor extra specs, server groups and instance mappings, through
//! [`HostSource`]. The API layer implements it on its database handle, so
//! the scheduler depends on no part of the HTTP layer; its failures are
//! [`HostStateError`]s, which the API maps to its own error in one place.

use std::collections::BTreeMap;

use cell_mapping::db::aggregates::Aggregate;
use cell_mapping::db::server_groups::ServerGroup;
use fabric::ids::CellUuid;
use futures_util::future::BoxFuture;

/// The cause of a failed read, as the source reports it.
pub type SourceError = Box<dyn std::error::Error + Send + Sync>;

/// A read's answer.
pub type Read<'a, T> = BoxFuture<'a, Result<T, SourceError>>;

/// The reads the scheduler makes of the API database.
pub trait HostSource: std::fmt::Debug + Send + Sync {
    /// Every mapped host and the cell it is mapped to.
    fn host_cells(&self) -> Read<'_, Vec<(String, CellUuid)>>;
    /// Host → zone, for hosts in an aggregate that names a zone.
    fn host_zones(&self) -> Read<'_, Vec<(String, String)>>;
    /// Every aggregate, with its hosts and metadata.
    fn aggregates(&self) -> Read<'_, Vec<Aggregate>>;
    /// The extra specs of flavor `flavorid`.
    fn flavor_extra_specs<'a>(&'a self, flavorid: &'a str) -> Read<'a, BTreeMap<String, String>>;
    /// The server group instance `uuid` joined, if any.
    fn instance_server_group<'a>(&'a self, uuid: &'a str) -> Read<'a, Option<ServerGroup>>;
    /// The id of the cell instance `uuid` is mapped to (`None`: no
    /// mapping, or not in a cell yet).
    fn instance_cell<'a>(&'a self, uuid: &'a str) -> Read<'a, Option<i64>>;
}

/// A read of host state that failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {what}")]
pub struct HostStateError {
    /// What was being read.
    pub what: &'static str,
    /// The cause.
    #[source]
    pub source: SourceError,
}

impl HostStateError {
    /// The error of a failed read of `what`.
    pub fn reading(what: &'static str) -> impl FnOnce(SourceError) -> Self {
        move |source| Self { what, source }
    }
}
