//! The API database as the scheduler's [`HostSource`].

use std::collections::BTreeMap;

use cell_mapping::db::aggregates::Aggregate;
use cell_mapping::db::server_groups::ServerGroup;
use fabric::ids::CellUuid;

use super::db::ComputeDb;
use crate::scheduler::source::{HostSource, Read, SourceError};

fn boxed(e: impl std::error::Error + Send + Sync + 'static) -> SourceError {
    Box::new(e)
}

impl HostSource for ComputeDb {
    fn host_cells(&self) -> Read<'_, Vec<(String, CellUuid)>> {
        Box::pin(async move {
            let hosts = self.api().hosts(None).await.map_err(boxed)?;
            Ok(hosts.into_iter().map(|h| (h.host, h.cell_uuid)).collect())
        })
    }

    fn host_zones(&self) -> Read<'_, Vec<(String, String)>> {
        Box::pin(async move { self.host_zones().await.map_err(boxed) })
    }

    fn aggregates(&self) -> Read<'_, Vec<Aggregate>> {
        Box::pin(async move { self.api().aggregates(None).await.map_err(boxed) })
    }

    fn flavor_extra_specs<'a>(&'a self, flavorid: &'a str) -> Read<'a, BTreeMap<String, String>> {
        Box::pin(async move { self.api().flavor_extra_specs(flavorid).await.map_err(boxed) })
    }

    fn instance_server_group<'a>(&'a self, uuid: &'a str) -> Read<'a, Option<ServerGroup>> {
        Box::pin(async move { self.api().instance_server_group(uuid).await.map_err(boxed) })
    }

    fn instance_cell<'a>(&'a self, uuid: &'a str) -> Read<'a, Option<i64>> {
        Box::pin(async move {
            let mapping = self.mapping(uuid).await.map_err(boxed)?;
            Ok(mapping.and_then(|(cell, _, _)| cell))
        })
    }
}
