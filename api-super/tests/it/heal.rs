//! Builds whose scheduler died (`api_super::conductor::heal`): build
//! requests are written the way a dead api-super process left them — by
//! the create path's own `create_builds`, owned by a process whose
//! heartbeat is an hour old — with the leftovers of a half-done `land` (a
//! placement claim, an instance row in a cell), and the region's healer
//! must drive them to ACTIVE exactly once; builds of a live process (or
//! unowned and younger than the grace) are left alone. The SQL of the
//! healer (orphans, take-over, fenced landing) also runs on PostgreSQL.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use api_super::compute_api::db::{BuildInstance, ComputeDb, RequestSpec};
use api_super::conductor::heal::BuildHealConfig;
use api_super::scheduler::placement::{
    AllocationRequest, HttpPlacement, ProviderAllocation, SchedulerPlacement,
};
use cell_mapping::db::NewCellInstance;
use cell_mapping::CellDb;
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::compute::{placement_get, Region, IMAGE};

const DEAD: &str = "00000000-dead-4000-8000-000000000000";
const LIVE: &str = "00000000-a11e-4000-8000-000000000000";
const LATE: &str = "00000000-1a7e-4000-8000-000000000000";

/// One create of `n` instances as `servers::create` builds it.
pub(crate) async fn builds(
    db: &ComputeDb,
    name: &str,
    n: usize,
    created_at: DateTime<Utc>,
) -> Vec<(BuildInstance, RequestSpec)> {
    let flavor = db.flavor("1").await.unwrap().unwrap().to_instance_flavor();
    let uuids: Vec<String> = (0..n).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    let reservation_id = format!("r-{name}");
    uuids
        .iter()
        .enumerate()
        .map(|(i, u)| {
            (
                BuildInstance {
                    uuid: u.clone(),
                    project_id: "p-heal".into(),
                    user_id: "u-heal".into(),
                    display_name: format!("{name}-{}", i + 1),
                    flavor: flavor.clone(),
                    image_ref: IMAGE.into(),
                    availability_zone: None,
                    created_at,
                    reservation_id: reservation_id.clone(),
                    launch_index: i as i64,
                    key_name: None,
                    metadata: Vec::new(),
                    user_data: None,
                    description: None,
                    hostname: None,
                    tags: Vec::new(),
                    image_properties: Default::default(),
                    config_drive: false,
                    key_data: None,
                    access_ip_v4: None,
                    access_ip_v6: None,
                    trusted_certs: None,
                },
                RequestSpec {
                    instance_uuid: u.clone(),
                    instance_uuids: uuids.clone(),
                    project_id: "p-heal".into(),
                    user_id: "u-heal".into(),
                    flavor: flavor.clone(),
                    image_ref: IMAGE.into(),
                    availability_zone: None,
                    force_host: None,
                    force_node: None,
                    scheduler_hints: Default::default(),
                    requested_host: None,
                    requested_node: None,
                    request_id: format!("req-{name}"),
                    global_request_id: format!("req-g-{name}"),
                    key_name: None,
                    in_group: Some(false),
                    image_properties: Default::default(),
                    flavor_extra_specs: None,
                    recorded_image_properties: Default::default(),
                },
            )
        })
        .collect()
}

/// Writes a create as process `owner` (`None`: no owner) would have.
async fn create(
    region: &Region,
    owner: Option<&str>,
    name: &str,
    n: usize,
    created_at: DateTime<Utc>,
) -> Vec<(BuildInstance, RequestSpec)> {
    let mut db = ComputeDb::new(region.api.clone());
    if let Some(o) = owner {
        db = db.with_owner(o);
    }
    let b = builds(&db, name, n, created_at).await;
    db.create_builds(&b, None, None).await.unwrap();
    b
}

/// The instance row a scheduler process writes into a cell for build `b`
/// on `host` (a leftover of a half-done landing, or another owner's row):
/// the conductor's own.
fn row_of(
    b: &BuildInstance,
    spec: &RequestSpec,
    host: &str,
    scheduled_from: DateTime<Utc>,
) -> NewCellInstance {
    api_super::conductor::new_instance(
        b,
        spec,
        Some((host, host)),
        Some("nova".into()),
        None,
        scheduled_from,
    )
}

/// Another scheduler process beside the region's: its own cell cache,
/// scheduler and super-conductor on the region's databases and placement,
/// writing builds as `owner`.
async fn scheduler_process(region: &Region, owner: &str) -> api_super::conductor::SuperConductor {
    let cache = cell_mapping::CellCache::start(
        region.api.clone(),
        cell_mapping::CacheConfig {
            refresh_interval_ms: 60_000,
        },
    )
    .await
    .unwrap();
    let cells = api_super::cells::Cells::new(cache);
    let db = ComputeDb::new(region.api.clone()).with_owner(owner);
    let hosts = api_super::scheduler::host_state::HostStateCache::new(
        std::sync::Arc::new(db.clone()),
        cells.clone(),
        Duration::from_secs(1),
        Duration::from_secs(60),
        "nova".into(),
    );
    let placement: std::sync::Arc<dyn SchedulerPlacement> = std::sync::Arc::new(
        HttpPlacement::new(&format!("http://{}", region.placement.addr), "admin").unwrap(),
    );
    let scheduler = std::sync::Arc::new(api_super::scheduler::Scheduler::new(
        Default::default(),
        placement,
        hosts,
    ));
    api_super::conductor::SuperConductor::new(db, cells, scheduler)
}

/// The cell databases of a region (cell0 first).
pub(crate) async fn cell_dbs(region: &Region) -> Vec<CellDb> {
    let mut out = Vec::new();
    // `_dbs`: api, cell0, placement, then the cells.
    for (i, d) in region._dbs.iter().enumerate() {
        if i == 1 || i >= 3 {
            out.push(CellDb::open(&d.url).await.unwrap());
        }
    }
    out
}

/// Instance rows of `uuid` across every cell: (live, deleted).
async fn rows_across_cells(cells: &[CellDb], uuid: &str) -> (usize, usize) {
    let mut live = 0;
    let mut deleted = 0;
    for c in cells {
        if let Some(i) = c.api_instance(uuid).await.unwrap() {
            if i.deleted {
                deleted += 1;
            } else {
                live += 1;
            }
        }
    }
    (live, deleted)
}

/// The allocations of consumer `uuid`: provider → resources.
async fn allocations(region: &Region, uuid: &str) -> BTreeMap<String, Value> {
    let a = placement_get(&region.placement, &format!("/allocations/{uuid}")).await;
    a["allocations"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v["resources"].clone()))
                .collect()
        })
        .unwrap_or_default()
}

fn fast_healing(cfg: &mut api_super::ComputeConfig) {
    cfg.build_heal = BuildHealConfig {
        interval_secs: 1,
        ..Default::default()
    };
}

async fn active(region: &Region, id: &str) -> Value {
    region
        .wait(id, |s| s["status"] == "ACTIVE" || s["status"] == "ERROR")
        .await
        .0
}

/// The end state of a healed build: ACTIVE, one live instance row across
/// the cells and no other, no build request, the mapping pointed at a
/// cell, and exactly the flavor's resources allocated on one provider.
async fn assert_healed(region: &Region, cells: &[CellDb], db: &ComputeDb, id: &str) {
    let s = active(region, id).await;
    assert_eq!(s["status"], "ACTIVE", "{s}");
    assert_eq!(rows_across_cells(cells, id).await, (1, 0), "{id}");
    let (build_requests, specs, mappings) = db.rows_for(id).await.unwrap();
    assert_eq!((build_requests, specs, mappings), (0, 1, 1), "{id}");
    assert!(db.mapping(id).await.unwrap().unwrap().0.is_some());
    let a = allocations(region, id).await;
    assert_eq!(a.len(), 1, "{id}: {a:?}");
    let r = a.values().next().unwrap();
    assert_eq!(r["VCPU"], 1, "{a:?}");
    assert_eq!(r["MEMORY_MB"], 512, "{a:?}");
    assert_eq!(r["DISK_GB"], 1, "{a:?}");
    // The allocation is on the host the instance runs on.
    let host = s["OS-EXT-SRV-ATTR:hypervisor_hostname"]
        .as_str()
        .unwrap_or_default();
    let rps = placement_get(&region.placement, "/resource_providers").await;
    let rp = rps["resource_providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == host)
        .unwrap_or_else(|| panic!("provider of {host} in {rps}"));
    assert!(
        a.contains_key(rp["uuid"].as_str().unwrap()),
        "{host}: {a:?}"
    );
}

#[tokio::test]
async fn builds_of_a_dead_scheduler_are_healed_exactly_once() {
    let region = Region::start_with("heal_dead", 2, 2, fast_healing).await;
    let db = ComputeDb::new(region.api.clone());
    // Older than the healer's grace (60 s), within the build timeout (900 s).
    let two_minutes_ago = Utc::now() - chrono::Duration::minutes(2);
    db.scheduler_heartbeat(DEAD, two_minutes_ago).await.unwrap();

    // A create of two (all or none), a create of one that the dead process
    // had claimed and written into cell1 (but not landed), and one its
    // user deletes before any healer sees it.
    let pair = create(&region, Some(DEAD), "pair", 2, two_minutes_ago).await;
    let half = create(&region, Some(DEAD), "half", 1, two_minutes_ago).await;
    let gone = create(&region, Some(DEAD), "gone", 1, two_minutes_ago).await;
    let (hb, hs) = &half[0];
    let rps = placement_get(&region.placement, "/resource_providers").await;
    let c1h1 = rps["resource_providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "c1-host1")
        .expect("c1-host1")["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    let claim = AllocationRequest {
        allocations: BTreeMap::from([(
            c1h1.clone(),
            ProviderAllocation {
                resources: api_super::conductor::resources(hs),
            },
        )]),
    };
    let purl = format!("http://{}", region.placement.addr);
    let p = HttpPlacement::new(&purl, "admin").unwrap();
    assert!(p
        .claim(&hb.uuid, &claim, &hb.project_id, &hb.user_id)
        .await
        .unwrap());
    let cells = cell_dbs(&region).await;
    cells[1]
        .create_api_instance(&row_of(hb, hs, "c1-host1", two_minutes_ago))
        .await
        .unwrap();
    assert_eq!(rows_across_cells(&cells, &hb.uuid).await, (1, 0));
    let gone_id = gone[0].0.uuid.clone();
    let r = region
        .call(
            &region.admin,
            "DELETE",
            &format!("/v2.1/servers/{gone_id}"),
            None,
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);

    for (b, _) in pair.iter().chain(&half) {
        assert_healed(&region, &cells, &db, &b.uuid).await;
    }
    // The deleted one stays deleted: nothing anywhere.
    assert_eq!(rows_across_cells(&cells, &gone_id).await, (0, 0));
    assert_eq!(db.rows_for(&gone_id).await.unwrap(), (0, 0, 0));
    assert!(allocations(&region, &gone_id).await.is_empty());
    // Later passes change nothing (the dead process's row is forgotten
    // once it owns nothing).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    for (b, _) in pair.iter().chain(&half) {
        assert_eq!(rows_across_cells(&cells, &b.uuid).await, (1, 0));
        assert_eq!(allocations(&region, &b.uuid).await.len(), 1);
    }
    for c in cells {
        c.close().await;
    }
    region.stop().await;
}

#[tokio::test]
async fn builds_of_a_live_scheduler_are_left_alone() {
    let region = Region::start_with("heal_live", 1, 2, fast_healing).await;
    let db = ComputeDb::new(region.api.clone());
    // Older than the healer's grace (60 s), within the build timeout (900 s).
    let two_minutes_ago = Utc::now() - chrono::Duration::minutes(2);
    db.scheduler_heartbeat(DEAD, two_minutes_ago).await.unwrap();
    db.scheduler_heartbeat(LIVE, Utc::now()).await.unwrap();
    // Old builds of a live process: its heartbeat, not their age, counts.
    let live = create(&region, Some(LIVE), "live", 1, two_minutes_ago).await;
    // Unowned (written before owners existed): healed once older than the
    // grace, left alone while younger.
    let unowned_old = create(&region, None, "unowned-old", 1, two_minutes_ago).await;
    let unowned_new = create(&region, None, "unowned-new", 1, Utc::now()).await;
    let dead = create(&region, Some(DEAD), "dead", 1, two_minutes_ago).await;
    let cells = cell_dbs(&region).await;

    // The dead and old unowned ones heal: passes have run after every
    // build above was written.
    assert_healed(&region, &cells, &db, &dead[0].0.uuid).await;
    assert_healed(&region, &cells, &db, &unowned_old[0].0.uuid).await;
    let started = Instant::now();
    // Keep the live process beating while a few more passes run.
    while started.elapsed() < Duration::from_millis(2500) {
        db.scheduler_heartbeat(LIVE, Utc::now()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for (id, owner) in [
        (&live[0].0.uuid, Some(LIVE.to_owned())),
        (&unowned_new[0].0.uuid, None),
    ] {
        assert_eq!(db.build_owner(id).await.unwrap(), Some(owner), "{id}");
        assert_eq!(db.rows_for(id).await.unwrap(), (1, 1, 1), "{id}");
        assert_eq!(db.mapping(id).await.unwrap().unwrap().0, None, "{id}");
        assert_eq!(rows_across_cells(&cells, id).await, (0, 0), "{id}");
        assert!(allocations(&region, id).await.is_empty(), "{id}");
        let s = region.show(&region.admin, id).await;
        let s = crate::common::json(&s);
        assert_eq!(s["server"]["status"], "BUILD", "{s}");
    }
    for c in cells {
        c.close().await;
    }
    region.stop().await;
}

/// The healer's statements on one backend: orphans by heartbeat and age,
/// the all-or-none take-over with its compare-and-set, and the landing
/// fenced by the owner.
async fn healer_sql(url: &str) {
    migrations::migrate(migrations::Kind::Api, url)
        .await
        .expect("api migrations");
    let api = cell_mapping::ApiDb::open(url).await.unwrap();
    let cell0_db = testkit::sqlite("heal_sql_cell0");
    let cell0 = cell_mapping::cells::map_cell0(&api, &cell0_db.url)
        .await
        .unwrap()
        .mapping()
        .id;
    let plain = ComputeDb::new(api.clone());
    plain.seed_flavors().await.unwrap();
    let now = Utc::now();
    let old = now - chrono::Duration::minutes(10);
    let cutoff = now - chrono::Duration::minutes(1);
    plain.scheduler_heartbeat(DEAD, old).await.unwrap();
    plain.scheduler_heartbeat(LIVE, now).await.unwrap();
    let dead_db = ComputeDb::new(api.clone()).with_owner(DEAD);
    let live_db = ComputeDb::new(api.clone()).with_owner(LIVE);
    let pair = builds(&dead_db, "pair", 2, old).await;
    dead_db.create_builds(&pair, None, None).await.unwrap();
    let mine = builds(&live_db, "mine", 1, old).await;
    live_db.create_builds(&mine, None, None).await.unwrap();
    let young = builds(&plain, "young", 1, now).await;
    plain.create_builds(&young, None, None).await.unwrap();
    let aged = builds(&plain, "aged", 1, old).await;
    plain.create_builds(&aged, None, None).await.unwrap();

    let orphans = plain.orphan_builds(LIVE, cutoff, 100).await.unwrap();
    let mut found: Vec<(String, Option<String>)> = orphans.clone();
    found.sort();
    let mut want = vec![
        (pair[0].0.uuid.clone(), Some(DEAD.to_owned())),
        (pair[1].0.uuid.clone(), Some(DEAD.to_owned())),
        (aged[0].0.uuid.clone(), None),
    ];
    want.sort();
    assert_eq!(found, want);
    assert_eq!(plain.orphan_builds(LIVE, cutoff, 1).await.unwrap().len(), 1);
    // A silent process owning builds is kept; one owning none is pruned.
    assert_eq!(plain.prune_schedulers(cutoff).await.unwrap(), 0);

    // The dead process cannot land what the healer took.
    let group: Vec<_> = want.iter().filter(|(_, o)| o.is_some()).cloned().collect();
    assert!(live_db.take_over_builds(&group, LIVE).await.unwrap());
    assert!(dead_db
        .finish_build(&pair[0].0.uuid, cell0)
        .await
        .unwrap()
        .is_none());
    assert!(dead_db.build_taken_over(&pair[0].0.uuid).await.unwrap());
    // A second healer that saw the same owner loses the compare-and-set.
    assert!(!plain.take_over_builds(&group, "another").await.unwrap());
    assert_eq!(
        plain.build_owner(&pair[1].0.uuid).await.unwrap(),
        Some(Some(LIVE.to_owned()))
    );
    assert!(plain.orphan_builds(LIVE, cutoff, 100).await.unwrap().len() == 1);
    assert_eq!(plain.prune_schedulers(cutoff).await.unwrap(), 1, "DEAD");
    // All or none: one member already taken, nothing changes.
    let mixed = vec![
        (aged[0].0.uuid.clone(), None),
        (pair[0].0.uuid.clone(), Some(DEAD.to_owned())),
    ];
    assert!(!plain.take_over_builds(&mixed, "another").await.unwrap());
    assert_eq!(
        plain.build_owner(&aged[0].0.uuid).await.unwrap(),
        Some(None)
    );
    // The owner lands it (never edited: nothing to carry over); released
    // builds are unowned again.
    let landed = live_db.finish_build(&pair[0].0.uuid, cell0).await.unwrap();
    assert!(landed.unwrap().edited.is_none());
    assert!(!live_db.build_taken_over(&pair[0].0.uuid).await.unwrap());
    live_db
        .release_builds(&[pair[1].0.uuid.clone()], LIVE)
        .await
        .unwrap();
    assert_eq!(
        plain.build_owner(&pair[1].0.uuid).await.unwrap(),
        Some(None)
    );
    assert_eq!(plain.build_owner(&pair[0].0.uuid).await.unwrap(), None);
    // `PUT /servers/{id}` on a build: the build request takes the edits,
    // and the landing's delete hands them back; once landed there is no
    // build to edit.
    let id = &aged[0].0.uuid;
    let e = plain
        .edit_build(id, &edit(Some("renamed"), Some(Some("said")), None))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(e.instance.display_name, "renamed");
    let e = plain
        .edit_build(id, &edit(None, Some(None), Some("h-2")))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            e.instance.display_name.as_str(),
            e.instance.description.as_deref(),
            e.instance.hostname.as_deref()
        ),
        ("renamed", None, Some("h-2"))
    );
    assert_eq!(
        plain
            .build_request(id)
            .await
            .unwrap()
            .unwrap()
            .instance
            .display_name,
        "renamed"
    );
    let landed = plain.finish_build(id, cell0).await.unwrap().unwrap();
    let edited = landed.edited.expect("edits handed back");
    assert_eq!(edited.display_name, "renamed");
    assert_eq!(edited.hostname.as_deref(), Some("h-2"));
    assert!(plain
        .edit_build(id, &edit(Some("late"), None, None))
        .await
        .unwrap()
        .is_none());
    api.close().await;
}

#[tokio::test]
async fn healer_sql_sqlite() {
    let d = testkit::sqlite("heal_sql");
    healer_sql(&d.url).await;
}

#[tokio::test]
async fn healer_sql_postgres() {
    let Some(pg) = testkit::postgres("heal_sql_pg").await else {
        return;
    };
    healer_sql(&pg.url).await;
}

/// A process whose own heartbeat has not been written for half the grace
/// (here: heartbeats once an hour, grace 2 s) may count as dead to another
/// healer: it writes nothing into a cell and gives the build up (owner
/// cleared) for a healer to take; its own healer does not heal meanwhile.
#[tokio::test]
async fn a_scheduler_with_a_stale_heartbeat_gives_its_builds_up() {
    let region = Region::start_with("heal_stale_lease", 1, 2, |cfg| {
        cfg.build_heal = BuildHealConfig {
            interval_secs: 1,
            grace_secs: 2,
            heartbeat_secs: 3600,
            ..Default::default()
        };
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let id = region.boot(&region.admin, "stale", "1").await;
    let db = ComputeDb::new(region.api.clone());
    let cells = cell_dbs(&region).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while db.build_owner(&id).await.unwrap() != Some(None) {
        assert!(Instant::now() < deadline, "the build was not given up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Passes of its own healer run meanwhile and take nothing.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(db.build_owner(&id).await.unwrap(), Some(None));
    assert_eq!(db.rows_for(&id).await.unwrap(), (1, 1, 1));
    assert_eq!(db.mapping(&id).await.unwrap().unwrap().0, None);
    assert_eq!(rows_across_cells(&cells, &id).await, (0, 0));
    let s = crate::common::json(&region.show(&region.admin, &id).await);
    assert_eq!(s["server"]["status"], "BUILD", "{s}");
    for c in cells {
        c.close().await;
    }
    region.stop().await;
}

/// A scheduler process whose build was taken over while it was landing it
/// (its heartbeat was late; a healer cleaned up after it and claimed and
/// wrote the instance itself) must leave the claim under that uuid and the
/// build alone when its own cell write fails: the claim is the new owner's
/// by then, and a row it buried in cell0 would stay beside the new
/// owner's instance. Here the new owner's row is already in the only cell,
/// so the late process's create fails there.
#[tokio::test]
async fn a_build_taken_over_while_it_lands_is_left_to_its_new_owner() {
    let region = Region::start_with("heal_taken_over", 1, 2, |_| {}).await;
    let api_db = ComputeDb::new(region.api.clone());
    api_db.scheduler_heartbeat(LIVE, Utc::now()).await.unwrap();
    let taken = create(&region, Some(LIVE), "taken", 1, Utc::now()).await;
    let (b, spec) = &taken[0];
    let cells = cell_dbs(&region).await;
    cells[1]
        .create_api_instance(&row_of(b, spec, "c1-host2", Utc::now()))
        .await
        .unwrap();

    // The late process.
    let late = scheduler_process(&region, LATE).await;
    late.schedule_and_build(taken.clone()).await;

    // Its claim went through and its cell write did not; it released
    // nothing, buried nothing, and the build is still the new owner's.
    assert_eq!(allocations(&region, &b.uuid).await.len(), 1);
    assert_eq!(rows_across_cells(&cells, &b.uuid).await, (1, 0));
    assert_eq!(
        api_db.build_owner(&b.uuid).await.unwrap(),
        Some(Some(LIVE.to_owned()))
    );
    assert_eq!(api_db.rows_for(&b.uuid).await.unwrap(), (1, 1, 1));
    for c in cells {
        c.close().await;
    }
    region.stop().await;
}

/// A process that lost its build (its heartbeat was late) and then wrote
/// the instance into a cell other than the one the new owner chose: its
/// landing fails, and the row it wrote goes with it (only that row: the
/// new owner's, in the other cell, stays).
#[tokio::test]
async fn a_late_process_removes_the_row_it_wrote_for_a_build_it_lost() {
    let region = Region::start_with("heal_late_row", 2, 1, |_| {}).await;
    let api_db = ComputeDb::new(region.api.clone());
    api_db.scheduler_heartbeat(LIVE, Utc::now()).await.unwrap();
    let mut taken = create(&region, Some(LIVE), "lost", 1, Utc::now()).await;
    let cells = cell_dbs(&region).await;
    let owners_row = cells[1]
        .create_api_instance(&row_of(&taken[0].0, &taken[0].1, "c1-host1", Utc::now()))
        .await
        .unwrap();
    // The late process's scheduler picks the other cell's host.
    taken[0].1.force_host = Some("c2-host1".into());
    let uuid = taken[0].0.uuid.clone();

    scheduler_process(&region, LATE)
        .await
        .schedule_and_build(taken)
        .await;

    assert_eq!(rows_across_cells(&cells, &uuid).await, (1, 0));
    assert!(cells[2].api_instance(&uuid).await.unwrap().is_none());
    assert_eq!(
        api_db.build_owner(&uuid).await.unwrap(),
        Some(Some(LIVE.to_owned()))
    );
    assert_eq!(api_db.rows_for(&uuid).await.unwrap(), (1, 1, 1));
    // The row left in cell 1 is the owner's own (by its id), which only
    // this removal takes.
    assert!(cells[1]
        .api_remove_unlanded_row(&uuid, owners_row)
        .await
        .unwrap());
    for c in cells {
        c.close().await;
    }
    region.stop().await;
}

/// The other order: a process that lost a build wrote its row after the
/// new owner's clean-up, into the cell the new owner then chose. The new
/// owner's create meets that row; since the build is still its own, the
/// row can never land, so it goes and the create is made again: the
/// server ends ACTIVE with one row, not in cell0 with a leftover beside it.
#[tokio::test]
async fn a_row_written_late_by_a_previous_owner_gives_way_to_the_owners_create() {
    let region = Region::start_with("heal_late_row_same_cell", 1, 2, |_| {}).await;
    let api_db = ComputeDb::new(region.api.clone());
    api_db.scheduler_heartbeat(LIVE, Utc::now()).await.unwrap();
    let builds = create(&region, Some(LIVE), "owned", 1, Utc::now()).await;
    let (b, spec) = &builds[0];
    let cells = cell_dbs(&region).await;
    let leftover = cells[1]
        .create_api_instance(&row_of(b, spec, "c1-host2", Utc::now()))
        .await
        .unwrap();
    let uuid = b.uuid.clone();

    scheduler_process(&region, LIVE)
        .await
        .schedule_and_build(builds)
        .await;

    let (build_requests, specs, mappings) = api_db.rows_for(&uuid).await.unwrap();
    assert_eq!((build_requests, specs, mappings), (0, 1, 1));
    assert_eq!(rows_across_cells(&cells, &uuid).await, (1, 0));
    assert!(cells[0].api_instance(&uuid).await.unwrap().is_none());
    // Not the leftover: that row is gone.
    assert!(!cells[1]
        .api_remove_unlanded_row(&uuid, leftover)
        .await
        .unwrap());
    assert_healed(&region, &cells, &api_db, &uuid).await;
    for c in cells {
        c.close().await;
    }
    region.stop().await;
}

/// `PUT /servers/{id}` while the server is being scheduled: the build
/// request takes the new name, description and hostname (shown at once),
/// and the scheduler, which holds the build as it was created, carries
/// them over to the instance it writes in its cell.
#[tokio::test]
async fn a_server_edited_while_it_is_scheduled_lands_edited() {
    let region = Region::start_with("heal_edited", 1, 2, |_| {}).await;
    let api_db = ComputeDb::new(region.api.clone());
    api_db.scheduler_heartbeat(LIVE, Utc::now()).await.unwrap();
    let pending = create(&region, Some(LIVE), "pending", 1, Utc::now()).await;
    let id = pending[0].0.uuid.clone();
    let path = format!("/v2.1/servers/{id}");
    let edit = serde_json::json!({"server": {"name": "renamed", "description": "edited while scheduled", "hostname": "edited-1"}});
    let r = region.call(&region.admin, "PUT", &path, Some(edit)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let shown = |r: &testkit::http::Response| {
        let v: Value = serde_json::from_str(&r.body).unwrap();
        let s = &v["server"];
        (
            s["status"].as_str().unwrap_or("").to_owned(),
            s["name"].as_str().unwrap_or("").to_owned(),
            s["description"].as_str().unwrap_or("").to_owned(),
            s["OS-EXT-SRV-ATTR:hostname"]
                .as_str()
                .unwrap_or("")
                .to_owned(),
        )
    };
    let want = |status: &str| {
        (
            status.to_owned(),
            "renamed".to_owned(),
            "edited while scheduled".to_owned(),
            "edited-1".to_owned(),
        )
    };
    assert_eq!(shown(&r), want("BUILD"));
    assert_eq!(shown(&region.show(&region.admin, &id).await), want("BUILD"));
    // A bad edit of a build is refused like one of an instance.
    let r = region
        .call(
            &region.admin,
            "PUT",
            &path,
            Some(serde_json::json!({"server": {"description": "bell\u{7}"}})),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);

    // The scheduler lands the build it holds (the name it was created
    // with): the instance in the cell has the edits.
    let conductor = scheduler_process(&region, LIVE).await;
    conductor.schedule_and_build(pending.clone()).await;
    let s = active(&region, &id).await;
    assert_eq!(s["status"], "ACTIVE", "{s}");
    assert_eq!(
        shown(&region.show(&region.admin, &id).await),
        want("ACTIVE")
    );
    let cells = cell_dbs(&region).await;
    let row = cells[1].api_instance_shown(&id).await.unwrap().unwrap();
    assert_eq!(row.instance.display_name.as_deref(), Some("renamed"));
    // Edits after the landing go to the instance.
    let r = region
        .call(
            &region.admin,
            "PUT",
            &path,
            Some(serde_json::json!({"server": {"name": "landed"}})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(shown(&region.show(&region.admin, &id).await).1, "landed");
    for c in cells {
        c.close().await;
    }
    region.stop().await;
}

/// A name, description and hostname edit.
fn edit(
    name: Option<&str>,
    description: Option<Option<&str>>,
    hostname: Option<&str>,
) -> cell_mapping::db::InstanceEdit {
    cell_mapping::db::InstanceEdit {
        name: name.map(str::to_owned),
        description: description.map(|d| d.map(str::to_owned)),
        hostname: hostname.map(str::to_owned),
        ..Default::default()
    }
}
