//! What an embedded run reads from the region's databases (PostgreSQL or
//! SQLite, whichever the region's URLs name): the no-leak invariants, the
//! per-instance build timestamps that split time-to-ACTIVE into phases,
//! and the servers per cell and per host.

use std::collections::{BTreeMap, HashMap, HashSet};

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::api::{Compute, Placement};

/// A pool on one of the region's databases.
#[derive(Clone)]
pub enum Db {
    /// PostgreSQL.
    Pg(sqlx::PgPool),
    /// SQLite.
    Sqlite(sqlx::SqlitePool),
}

macro_rules! fetch {
    ($db:expr, $t:ty, $sql:expr) => {
        match $db {
            Db::Pg(p) => sqlx::query_as::<_, $t>($sql).fetch_all(p).await,
            Db::Sqlite(p) => sqlx::query_as::<_, $t>($sql).fetch_all(p).await,
        }
    };
}

impl Db {
    /// Opens a small pool on `url`.
    pub async fn open(url: &str) -> Result<Db> {
        if url.starts_with("postgres") {
            Ok(Db::Pg(
                migrations::open_pg(url, 2)
                    .await
                    .with_context(|| format!("open {}", cell_mask(url)))?,
            ))
        } else {
            // Opening sets the file's pragmas, which SQLite may refuse with
            // "database is locked" without waiting on its busy timeout while
            // the region's own connection holds the file (seen once in CI,
            // right after the region came up): a few bounded attempts.
            let mut attempt = 1u64;
            loop {
                match migrations::open_sqlite(url).await {
                    Ok(p) => return Ok(Db::Sqlite(p)),
                    Err(e) if attempt < 10 && e.to_string().contains("database is locked") => {
                        tokio::time::sleep(std::time::Duration::from_millis(100 * attempt)).await;
                        attempt += 1;
                    }
                    Err(e) => {
                        return Err(e).with_context(|| format!("open {}", cell_mask(url)));
                    }
                }
            }
        }
    }

    /// Closes the pool.
    pub async fn close(&self) {
        match self {
            Db::Pg(p) => p.close().await,
            Db::Sqlite(p) => p.close().await,
        }
    }
}

fn cell_mask(url: &str) -> String {
    // Never print a password.
    match url.split_once('@') {
        Some((scheme_user, rest)) => {
            let scheme = scheme_user.split("://").next().unwrap_or("");
            format!("{scheme}://…@{rest}")
        }
        None => url.to_owned(),
    }
}

/// The region's databases.
pub struct Databases {
    /// The API database.
    pub api: Db,
    /// cell0.
    pub cell0: Db,
    /// The cells, by name.
    pub cells: Vec<(String, Db)>,
}

/// A live (not deleted) instance.
#[derive(Debug, Clone)]
pub struct LiveInstance {
    /// uuid.
    pub uuid: String,
    /// The cell it is in (`cell0` for those that never got a host).
    pub cell: String,
    /// Its compute node, once scheduled.
    pub node: Option<String>,
    /// `vm_state`.
    pub vm_state: String,
}

/// One invariant's verdict.
#[derive(Debug, Clone, Serialize)]
pub struct Invariant {
    /// Its name.
    pub name: &'static str,
    /// Whether it holds.
    pub holds: bool,
    /// Violations counted.
    pub violations: usize,
    /// A few of them.
    pub examples: Vec<String>,
}

/// The invariant names.
pub const NO_ALLOCATION_WITHOUT_INSTANCE: &str = "no allocation without an instance";
/// …
pub const NO_INSTANCE_WITHOUT_ALLOCATIONS: &str = "no instance without allocations";
/// …
pub const NO_INSTANCE_WITHOUT_MAPPING: &str = "no instance without a mapping";
/// …
pub const ALLOCATIONS_PER_HOST: &str = "allocations per host equal the instances on it";
/// …
pub const NO_BUILD_REQUEST_LEFT: &str = "no build request left behind";

/// Build timestamps of one instance.
#[derive(Debug, Clone, Default)]
pub struct BuildTimes {
    /// The super-conductor starts writing the instance into its cell, the
    /// scheduler's choice and the placement claim made: the end of the
    /// `conductor_schedule_and_build_instances` event of its `create`
    /// action.
    pub scheduled: Option<DateTime<Utc>>,
    /// The instance landed in its cell: the row written, then the build
    /// request replaced by the instance mapping naming the cell
    /// (`instance_mappings.updated_at`, API database).
    pub mapped: Option<DateTime<Utc>>,
    /// `compute__do_build_and_run_instance` started on the host.
    pub build_start: Option<DateTime<Utc>>,
    /// `compute_spawn` started.
    pub spawn_start: Option<DateTime<Utc>>,
    /// `compute_spawn` finished.
    pub spawn_finish: Option<DateTime<Utc>>,
}

impl Databases {
    /// Opens the API database, cell0 and each cell.
    pub async fn open(api: &str, cell0: &str, cells: &[(String, String)]) -> Result<Self> {
        let mut out = Vec::new();
        for (name, url) in cells {
            out.push((name.clone(), Db::open(url).await?));
        }
        Ok(Self {
            api: Db::open(api).await?,
            cell0: Db::open(cell0).await?,
            cells: out,
        })
    }

    /// Closes every pool.
    pub async fn close(&self) {
        self.api.close().await;
        self.cell0.close().await;
        for (_, d) in &self.cells {
            d.close().await;
        }
    }

    /// Every live instance of every cell (and cell0).
    pub async fn live_instances(&self) -> Result<Vec<LiveInstance>> {
        let mut out = Vec::new();
        let all = std::iter::once(("cell0".to_owned(), &self.cell0))
            .chain(self.cells.iter().map(|(n, d)| (n.clone(), d)));
        for (cell, db) in all {
            let rows = fetch!(
                db,
                (String, Option<String>, Option<String>),
                "SELECT uuid, node, vm_state FROM instances WHERE deleted = FALSE"
            )
            .with_context(|| format!("read {cell}'s instances"))?;
            out.extend(rows.into_iter().map(|(uuid, node, vm)| LiveInstance {
                uuid,
                cell: cell.clone(),
                node,
                vm_state: vm.unwrap_or_default(),
            }));
        }
        Ok(out)
    }

    /// Checks the invariants against the databases and placement's
    /// allocations.
    pub async fn invariants(&self, placement: &Placement) -> Result<Vec<Invariant>> {
        let live = self.live_instances().await?;
        let allocs = placement.allocations_by_provider().await?;
        let mappings: Vec<(String, Option<String>)> = fetch!(
            &self.api,
            (String, Option<String>),
            "SELECT m.instance_uuid, c.name FROM instance_mappings m \
             LEFT JOIN cell_mappings c ON c.id = m.cell_id"
        )
        .context("read instance mappings")?;
        let build_requests: Vec<(String,)> = fetch!(
            &self.api,
            (String,),
            "SELECT instance_uuid FROM build_requests"
        )
        .context("read build requests")?;
        Ok(check(&live, &allocs, Some(&mappings), &build_requests))
    }

    /// Build timestamps of the instances of `ids` (those found).
    pub async fn build_times(&self, ids: &HashSet<String>) -> Result<HashMap<String, BuildTimes>> {
        type Row = (
            String,
            Option<String>,
            Option<DateTime<Utc>>,
            Option<DateTime<Utc>>,
        );
        let mut out: HashMap<String, BuildTimes> = HashMap::new();
        for (cell, db) in &self.cells {
            let rows: Vec<Row> = fetch!(
                db,
                Row,
                "SELECT i.uuid, e.event, e.start_time, e.finish_time \
                 FROM instances i \
                 LEFT JOIN instance_actions a ON a.instance_uuid = i.uuid AND a.action = 'create' \
                 LEFT JOIN instance_actions_events e ON e.action_id = a.id"
            )
            .with_context(|| format!("read {cell}'s build events"))?;
            for (uuid, event, start, finish) in rows {
                if !ids.contains(&uuid) {
                    continue;
                }
                let t = out.entry(uuid).or_default();
                match event.as_deref() {
                    Some(cell_mapping::db::instance_create::EV_SCHEDULE_AND_BUILD) => {
                        t.scheduled = finish;
                    }
                    Some(fabric::rpc::action::EV_BUILD) => t.build_start = start,
                    Some(fabric::rpc::action::EV_SPAWN) => {
                        t.spawn_start = start;
                        t.spawn_finish = finish;
                    }
                    _ => {}
                }
            }
        }
        let mapped: Vec<(String, Option<DateTime<Utc>>)> = fetch!(
            &self.api,
            (String, Option<DateTime<Utc>>),
            "SELECT instance_uuid, updated_at FROM instance_mappings WHERE cell_id IS NOT NULL"
        )
        .context("read the instance mappings' landing times")?;
        for (uuid, at) in mapped {
            if let Some(t) = out.get_mut(&uuid) {
                t.mapped = at;
            }
        }
        Ok(out)
    }

    /// Live instances per cell and per node (cell0 and unscheduled ones
    /// left out).
    pub fn distribution(
        &self,
        live: &[LiveInstance],
    ) -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
        // Every cell, those holding nothing included.
        let mut per_cell: BTreeMap<String, usize> =
            self.cells.iter().map(|(n, _)| (n.clone(), 0)).collect();
        let mut per_host = BTreeMap::new();
        for i in live {
            if i.cell == "cell0" {
                continue;
            }
            *per_cell.entry(i.cell.clone()).or_default() += 1;
            if let Some(n) = &i.node {
                *per_host.entry(n.clone()).or_default() += 1;
            }
        }
        (per_cell, per_host)
    }
}

/// The invariants a run against a URL can check through the APIs alone,
/// with an administrator's token: every server of every project from the
/// Compute API (`all_tenants`, detail: vm_state and hypervisor), every
/// provider's consumers from placement. Servers in ERROR without a host
/// are the ones buried in cell0; a server in BUILD without a host at the
/// end is a build request left behind. Which cell a server is in is not
/// visible through the API, so "no instance without a mapping" is not
/// among them (a server the API lists was found through its mapping).
/// This works against any OpenStack compute endpoint, Nova included.
pub async fn api_invariants(admin: &Compute, placement: &Placement) -> Result<Vec<Invariant>> {
    let servers = admin
        .list_all(true, "all_tenants=1")
        .await
        .context("list every project's servers (needs an administrator)")?;
    let allocs = placement
        .allocations_by_provider()
        .await
        .context("read placement's allocations (needs an administrator)")?;
    let mut live = Vec::new();
    let mut build_requests = Vec::new();
    for s in &servers {
        if s.status == "BUILD" && s.node.is_none() {
            build_requests.push((s.id.clone(),));
            continue;
        }
        let buried = s.node.is_none() && s.status == "ERROR";
        live.push(LiveInstance {
            uuid: s.id.clone(),
            cell: if buried { "cell0" } else { "api" }.to_owned(),
            node: s.node.clone(),
            vm_state: s.vm_state.clone(),
        });
    }
    Ok(check(&live, &allocs, None, &build_requests))
}

/// The invariants over what was read (pure, for tests). Without
/// `mappings` (not readable through the APIs) "no instance without a
/// mapping" is not among them.
pub fn check(
    live: &[LiveInstance],
    allocs: &[(String, Vec<String>)],
    mappings: Option<&[(String, Option<String>)]>,
    build_requests: &[(String,)],
) -> Vec<Invariant> {
    let verdict = |name: &'static str, bad: Vec<String>| Invariant {
        name,
        holds: bad.is_empty(),
        violations: bad.len(),
        examples: bad.into_iter().take(5).collect(),
    };
    let by_uuid: HashMap<&str, &LiveInstance> = live.iter().map(|i| (i.uuid.as_str(), i)).collect();
    let mut consumers: HashMap<&str, Vec<&str>> = HashMap::new();
    for (rp, cs) in allocs {
        for c in cs {
            consumers.entry(c.as_str()).or_default().push(rp.as_str());
        }
    }
    let orphans: Vec<String> = consumers
        .iter()
        .filter(|(c, _)| !by_uuid.contains_key(*c))
        .map(|(c, rps)| format!("consumer {c} on {}", rps.join(",")))
        .collect();
    // ERROR instances gave their allocations back (Nova does the same);
    // cell0 holds those that never got a host.
    let placed = |i: &&LiveInstance| i.cell != "cell0" && i.node.is_some() && i.vm_state != "error";
    let unallocated: Vec<String> = live
        .iter()
        .filter(placed)
        .filter(|i| !consumers.contains_key(i.uuid.as_str()))
        .map(|i| {
            format!(
                "instance {} on {} ({})",
                i.uuid,
                i.node.as_deref().unwrap_or("?"),
                i.vm_state
            )
        })
        .collect();
    let unmapped: Option<Vec<String>> = mappings.map(|mappings| {
        let mapped: HashMap<&str, Option<&str>> = mappings
            .iter()
            .map(|(u, c)| (u.as_str(), c.as_deref()))
            .collect();
        live.iter()
            .filter(|i| mapped.get(i.uuid.as_str()).copied().flatten() != Some(i.cell.as_str()))
            .map(|i| match mapped.get(i.uuid.as_str()) {
                None => format!("instance {} in {} has no mapping", i.uuid, i.cell),
                Some(c) => format!("instance {} is in {} but mapped to {:?}", i.uuid, i.cell, c),
            })
            .collect()
    });
    let mut on_node: HashMap<&str, usize> = HashMap::new();
    for i in live.iter().filter(placed) {
        *on_node
            .entry(i.node.as_deref().unwrap_or_default())
            .or_default() += 1;
    }
    let mut per_host = Vec::new();
    let mut seen = HashSet::new();
    for (rp, cs) in allocs {
        seen.insert(rp.as_str());
        let want = on_node.get(rp.as_str()).copied().unwrap_or(0);
        if cs.len() != want {
            per_host.push(format!("{rp}: {} consumers, {want} instances", cs.len()));
        }
    }
    for (node, n) in &on_node {
        if !seen.contains(node) {
            per_host.push(format!("{node}: no provider, {n} instances"));
        }
    }
    let left: Vec<String> = build_requests
        .iter()
        .map(|(u,)| format!("build request of {u}"))
        .collect();
    let mut out = vec![
        verdict(NO_ALLOCATION_WITHOUT_INSTANCE, orphans),
        verdict(NO_INSTANCE_WITHOUT_ALLOCATIONS, unallocated),
    ];
    out.extend(unmapped.map(|u| verdict(NO_INSTANCE_WITHOUT_MAPPING, u)));
    out.push(verdict(ALLOCATIONS_PER_HOST, per_host));
    out.push(verdict(NO_BUILD_REQUEST_LEFT, left));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inst(uuid: &str, cell: &str, node: Option<&str>, vm: &str) -> LiveInstance {
        LiveInstance {
            uuid: uuid.into(),
            cell: cell.into(),
            node: node.map(str::to_owned),
            vm_state: vm.into(),
        }
    }

    #[test]
    fn each_invariant_names_its_violation() {
        let live = vec![
            inst("a", "cell1", Some("h1"), "active"),
            inst("b", "cell1", Some("h1"), "active"),
            inst("e", "cell1", Some("h2"), "error"),
            inst("z", "cell0", None, "error"),
        ];
        let maps = vec![
            ("a".to_owned(), Some("cell1".to_owned())),
            ("b".to_owned(), Some("cell1".to_owned())),
            ("e".to_owned(), Some("cell1".to_owned())),
            ("z".to_owned(), Some("cell0".to_owned())),
        ];
        let good = vec![
            ("h1".to_owned(), vec!["a".to_owned(), "b".to_owned()]),
            ("h2".to_owned(), vec![]),
        ];
        assert!(check(&live, &good, Some(&maps), &[])
            .iter()
            .all(|i| i.holds));

        let bad_allocs = vec![("h1".to_owned(), vec!["a".to_owned(), "ghost".to_owned()])];
        let v = check(&live, &bad_allocs, Some(&maps[..3]), &[("q".to_owned(),)]);
        let broken: Vec<&str> = v.iter().filter(|i| !i.holds).map(|i| i.name).collect();
        assert_eq!(
            broken,
            vec![
                NO_ALLOCATION_WITHOUT_INSTANCE,
                NO_INSTANCE_WITHOUT_ALLOCATIONS,
                NO_INSTANCE_WITHOUT_MAPPING,
                NO_BUILD_REQUEST_LEFT
            ]
        );
        let v = check(
            &live,
            &[("h1".to_owned(), vec!["a".to_owned()])],
            Some(&maps),
            &[],
        );
        assert!(
            !v.iter()
                .find(|i| i.name == ALLOCATIONS_PER_HOST)
                .unwrap()
                .holds
        );
    }
}
