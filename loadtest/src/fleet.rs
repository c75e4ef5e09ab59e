//! Zones and aggregates of the embedded fleet: planned from the scenario's
//! `fleet.availability_zones` / `fleet.aggregates`, then created through
//! the Compute API's `os-aggregates` once the fleet is up, as an operator
//! would (create the aggregate, add the hosts, set the metadata; the API
//! mirrors the hosts into placement's provider aggregates).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures_util::stream::{self, StreamExt, TryStreamExt};
use serde::Serialize;

use crate::api::Compute;

/// The metadata key of the further aggregates (`loadtest_group=<i>`).
pub const GROUP_KEY: &str = "loadtest_group";

/// The name of zone `k` (1-based): `az1`, `az2`, …
pub fn zone_name(k: u32) -> String {
    format!("az{k}")
}

/// The zone hosts in no zone aggregate are in (the Compute API's
/// `default_availability_zone`, as the embedded region configures it).
pub fn default_zone() -> String {
    api_super::scheduler::SchedulerConfig::default().default_availability_zone
}

/// One aggregate to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedAggregate {
    /// Its name (`lt-az1`, `lt-group1`, …).
    pub name: String,
    /// Its zone, for a zone aggregate.
    pub zone: Option<String>,
    /// Its metadata besides the zone.
    pub metadata: BTreeMap<String, String>,
    /// Its hosts.
    pub hosts: Vec<String>,
}

/// Spreads the hosts: within each cell, host `j` (0-based, in the cell's
/// order) is in zone `j mod zones`, so every cell has hosts in every zone
/// (when it has at least `zones` hosts); over the whole fleet, host `g`
/// (0-based, cells in order) is in group `g mod aggregates`, so the groups
/// cut across cells and zones. `cells` are (cell, its hosts).
pub fn plan(cells: &[(String, Vec<String>)], zones: u32, aggregates: u32) -> Vec<PlannedAggregate> {
    let mut out = Vec::new();
    for k in 1..=zones {
        let zone = zone_name(k);
        out.push(PlannedAggregate {
            name: format!("lt-{zone}"),
            zone: Some(zone),
            metadata: BTreeMap::new(),
            hosts: cells
                .iter()
                .flat_map(|(_, hosts)| {
                    hosts
                        .iter()
                        .enumerate()
                        .filter(move |(j, _)| *j as u32 % zones == k - 1)
                        .map(|(_, h)| h.clone())
                })
                .collect(),
        });
    }
    for i in 1..=aggregates {
        out.push(PlannedAggregate {
            name: format!("lt-group{i}"),
            zone: None,
            metadata: BTreeMap::from([(GROUP_KEY.to_owned(), i.to_string())]),
            hosts: cells
                .iter()
                .flat_map(|(_, hosts)| hosts.iter())
                .enumerate()
                .filter(|(g, _)| *g as u32 % aggregates == i - 1)
                .map(|(_, h)| h.clone())
                .collect(),
        });
    }
    out
}

/// The fleet's zones and aggregates as the Compute API shows them once
/// they were created.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Layout {
    /// Hosts per zone (hosts in no zone aggregate under the default zone).
    pub hosts_per_zone: BTreeMap<String, usize>,
    /// Hosts per further aggregate (those without a zone), by name.
    pub hosts_per_aggregate: BTreeMap<String, usize>,
    /// Seconds spent creating them through the API.
    pub seconds: f64,
    /// Each host's zone (not in the report: 10,000 lines).
    #[serde(skip)]
    pub zone_of: HashMap<String, String>,
}

/// Creates the planned aggregates through `admin` (a Compute API client
/// with an administrator's token), `concurrency` host additions in
/// flight, then reads every aggregate back.
pub async fn create(
    admin: &Compute,
    planned: &[PlannedAggregate],
    all_hosts: &[String],
    concurrency: usize,
) -> Result<Layout> {
    let t = Instant::now();
    let mut adds: Vec<(i64, &str)> = Vec::new();
    for a in planned {
        let id = admin
            .aggregate_create(&a.name, a.zone.as_deref())
            .await
            .with_context(|| format!("create aggregate {}", a.name))?;
        if !a.metadata.is_empty() {
            admin
                .aggregate_set_metadata(id, serde_json::to_value(&a.metadata)?)
                .await
                .with_context(|| format!("set the metadata of aggregate {}", a.name))?;
        }
        adds.extend(a.hosts.iter().map(|h| (id, h.as_str())));
    }
    stream::iter(adds)
        .map(|(id, host)| async move {
            admin
                .aggregate_add_host(id, host)
                .await
                .with_context(|| format!("add {host} to aggregate {id}"))
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect::<Vec<()>>()
        .await?;
    let mut layout = read(admin, all_hosts).await?;
    layout.seconds = t.elapsed().as_secs_f64();
    Ok(layout)
}

/// Reads every aggregate through the Compute API: each host's zone and
/// the hosts of each aggregate without a zone. `all_hosts` are the fleet's
/// hosts (those in no zone aggregate count under the default zone).
pub async fn read(admin: &Compute, all_hosts: &[String]) -> Result<Layout> {
    let aggs = admin.aggregates().await.context("list the aggregates")?;
    let mut zone_of: HashMap<String, String> = HashMap::new();
    let mut hosts_per_aggregate = BTreeMap::new();
    for a in &aggs {
        match &a.availability_zone {
            Some(z) => {
                for h in &a.hosts {
                    zone_of.insert(h.clone(), z.clone());
                }
            }
            None => {
                hosts_per_aggregate.insert(a.name.clone(), a.hosts.len());
            }
        }
    }
    let default = default_zone();
    let mut hosts_per_zone: BTreeMap<String, usize> = BTreeMap::new();
    for h in all_hosts {
        let z = zone_of.entry(h.clone()).or_insert_with(|| default.clone());
        *hosts_per_zone.entry(z.clone()).or_default() += 1;
    }
    Ok(Layout {
        hosts_per_zone,
        hosts_per_aggregate,
        seconds: 0.0,
        zone_of,
    })
}

/// How long a fleet's aggregates take to create, for the progress line.
pub fn describe(planned: &[PlannedAggregate], took: Duration) -> String {
    let hosts: usize = planned.iter().map(|a| a.hosts.len()).sum();
    format!(
        "{} aggregates ({hosts} host memberships) created through os-aggregates in {:.1}s",
        planned.len(),
        took.as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cells(n: usize, per: usize) -> Vec<(String, Vec<String>)> {
        (1..=n)
            .map(|c| {
                let name = format!("cell{c}");
                let hosts = (1..=per).map(|j| format!("{name}-host{j:02}")).collect();
                (name, hosts)
            })
            .collect()
    }

    #[test]
    fn every_cell_spreads_over_every_zone_and_groups_cut_across() {
        let p = plan(&cells(2, 5), 2, 3);
        assert_eq!(p.len(), 5);
        assert_eq!(p[0].name, "lt-az1");
        assert_eq!(p[0].zone.as_deref(), Some("az1"));
        assert_eq!(
            p[0].hosts,
            [
                "cell1-host01",
                "cell1-host03",
                "cell1-host05",
                "cell2-host01",
                "cell2-host03",
                "cell2-host05"
            ]
        );
        assert_eq!(
            p[1].hosts,
            [
                "cell1-host02",
                "cell1-host04",
                "cell2-host02",
                "cell2-host04"
            ]
        );
        assert_eq!(p[2].name, "lt-group1");
        assert_eq!(p[2].zone, None);
        assert_eq!(p[2].metadata[GROUP_KEY], "1");
        // Every host in exactly one zone and one group.
        let zoned: usize = p[..2].iter().map(|a| a.hosts.len()).sum();
        let grouped: usize = p[2..].iter().map(|a| a.hosts.len()).sum();
        assert_eq!((zoned, grouped), (10, 10));
        assert_eq!(
            p[2].hosts,
            [
                "cell1-host01",
                "cell1-host04",
                "cell2-host02",
                "cell2-host05"
            ]
        );
        assert!(plan(&cells(2, 5), 0, 0).is_empty());
    }
}
