//! Cells changed while the region runs (issue 4), proven with real boots
//! through the Compute API on an in-process region (`region::Region`):
//!
//! - a region of two cells; a third cell (its own database, bus, conductor
//!   and two fake computes) added and discovered while the region runs is
//!   used by the next builds within seconds: no restart, no signal;
//! - disabled cells take no new builds (not even to a forced host) while
//!   their instances keep working (show, list, rename, delete with the claim
//!   released); enabled again, they take builds again within seconds.
//!
//! The new cell's hosts are deliberately much smaller than those of cell1
//! and cell2, so the RAM and CPU weighers (spreading) always prefer the
//! first two while they are enabled: an unforced boot that lands in cell3
//! proves cell1 and cell2 are no longer schedulable, and reaching cell3
//! while they are enabled takes an admin's forced host
//! (`availability_zone: "nova:<host>"`).
//!
//! It runs twice: on the embedded default (SQLite files, `inproc://` buses)
//! and on the production backends (a PostgreSQL database and a RabbitMQ
//! vhost per cell, the API, placement, identity and image databases on
//! PostgreSQL too).
//!
//! In-process rather than the binary: the new cell's `inproc://` bus is
//! only shared inside one process. Every wait polls with a deadline.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cell_mapping::cells::{CellChange, NewCell};
use cell_mapping::{ApiDb, DiscoverOptions};
use compute::driver::fake::FakeHypervisor;
use fabric::bus::Transport;
use region::{Region, RegionConfig};
use serde_json::{json, Value};

/// Longest a change of the cell mappings may take to reach the scheduler:
/// the cell cache polls every 2 s (the default `cell_cache_refresh_ms`),
/// the scheduler's host map lives 1 s; the rest is margin for a loaded CI.
const SEEN_WITHIN: Duration = Duration::from_secs(10);
/// Pause between two boots while waiting for a change to be seen: at most
/// `SEEN_WITHIN / BOOT_PACE` (40) builds land elsewhere meanwhile, fewer
/// than cell3's two hosts hold (over 90 m1.tiny by RAM).
const BOOT_PACE: Duration = Duration::from_millis(250);
/// Longest one build may take to settle (ACTIVE or ERROR).
const BUILD_WITHIN: Duration = Duration::from_secs(15);

/// The Compute API as a member and as an admin.
struct Api {
    http: reqwest::Client,
    compute: String,
    placement: String,
    member: String,
    admin: String,
    /// Every server booted (deleted ones included): cleaned up at the end.
    booted: Vec<String>,
}

/// A settled build.
#[derive(Debug)]
struct Built {
    id: String,
    status: String,
    /// `OS-EXT-SRV-ATTR:host` (admin view); empty when none.
    host: String,
    server: Value,
}

impl Api {
    async fn call(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let url = format!("{}{path}", self.compute);
        let mut req = self
            .http
            .request(method.parse().expect("method"), &url)
            .header("x-auth-token", token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        let v = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        (status, v)
    }

    /// `POST /servers` (m1.tiny, the seeded image); returns the id.
    async fn boot(&mut self, admin: bool, name: &str, zone: Option<&str>) -> String {
        let mut server = json!({
            "name": name,
            "flavorRef": "1",
            "imageRef": "cirros-0.6.2-x86_64-disk",
        });
        if let Some(z) = zone {
            server["availability_zone"] = json!(z);
        }
        let token = if admin { &self.admin } else { &self.member };
        let (status, v) = self
            .call(
                token,
                "POST",
                "/v2.1/servers",
                Some(json!({ "server": server })),
            )
            .await;
        assert_eq!(status, 202, "boot {name}: {v}");
        let id = v["server"]["id"].as_str().expect("server id").to_owned();
        self.booted.push(id.clone());
        id
    }

    /// The admin's view of a server (host attributes included).
    async fn show(&self, id: &str) -> (u16, Value) {
        self.call(&self.admin, "GET", &format!("/v2.1/servers/{id}"), None)
            .await
    }

    /// Waits until the build of `id` is ACTIVE or ERROR.
    async fn settle(&self, id: &str) -> Built {
        let deadline = Instant::now() + BUILD_WITHIN;
        loop {
            let (status, v) = self.show(id).await;
            assert_eq!(status, 200, "show {id}: {v}");
            let s = &v["server"];
            let st = s["status"].as_str().unwrap_or_default();
            if st == "ACTIVE" || st == "ERROR" {
                return Built {
                    id: id.to_owned(),
                    status: st.to_owned(),
                    host: s["OS-EXT-SRV-ATTR:host"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    server: s.clone(),
                };
            }
            assert!(
                Instant::now() < deadline,
                "{id} not settled in {BUILD_WITHIN:?}: {s}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn boot_and_settle(&mut self, admin: bool, name: &str, zone: Option<&str>) -> Built {
        let id = self.boot(admin, name, zone).await;
        self.settle(&id).await
    }

    /// Boots (unforced, as the member) until a build lands on a host
    /// whose name starts with one of `prefixes`, within [`SEEN_WITHIN`];
    /// returns it and how many landed elsewhere first.
    async fn boot_until_in(&mut self, name: &str, prefixes: &[&str]) -> (Built, usize) {
        let deadline = Instant::now() + SEEN_WITHIN;
        let mut elsewhere = 0;
        loop {
            let b = self
                .boot_and_settle(false, &format!("{name}-{elsewhere}"), None)
                .await;
            assert_eq!(b.status, "ACTIVE", "{:?}", b.server);
            if prefixes.iter().any(|p| b.host.starts_with(p)) {
                return (b, elsewhere);
            }
            elsewhere += 1;
            assert!(
                Instant::now() < deadline,
                "no build landed on a {prefixes:?}* host within {SEEN_WITHIN:?} ({elsewhere} landed on {})",
                b.host
            );
            // Paced: the builds that land elsewhere until the change is
            // seen must fit on the hosts they land on (cell3's are small),
            // however fast a build settles.
            tokio::time::sleep(BOOT_PACE).await;
        }
    }

    /// `DELETE /servers/{id}` as `token`, then waits for 404.
    async fn delete(&self, token: &str, id: &str) {
        self.request_delete(token, id).await;
        self.wait_gone(id).await;
    }

    /// `DELETE /servers/{id}` as `token` (204, or 404 when already gone).
    async fn request_delete(&self, token: &str, id: &str) {
        let (status, v) = self
            .call(token, "DELETE", &format!("/v2.1/servers/{id}"), None)
            .await;
        assert!(status == 204 || status == 404, "delete {id}: {status} {v}");
    }

    /// Waits until `id` is gone (404).
    async fn wait_gone(&self, id: &str) {
        let deadline = Instant::now() + BUILD_WITHIN;
        loop {
            let (status, v) = self.show(id).await;
            if status == 404 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{id} not gone in {BUILD_WITHIN:?}: {v}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Placement's allocations of consumer `id`.
    async fn allocations(&self, id: &str) -> Value {
        let resp = self
            .http
            .get(format!("{}/allocations/{id}", self.placement))
            .header("x-auth-token", &self.admin)
            .header("openstack-api-version", "placement 1.28")
            .send()
            .await
            .expect("placement");
        assert_eq!(resp.status().as_u16(), 200);
        resp.json::<Value>().await.expect("allocations")["allocations"].clone()
    }
}

/// A cell started beside the region: conductor and fake computes.
struct ExtraCell {
    bus: Arc<dyn Transport>,
    conductor: cell_conductor::Handle,
    hosts: Vec<compute::HostHandle>,
}

impl ExtraCell {
    async fn stop(self) {
        for h in self.hosts {
            h.shutdown().await;
        }
        self.conductor.shutdown().await;
        self.bus.close().await;
    }
}

/// Starts `name`'s services (database migrated, conductor, two small fake
/// computes reporting to the region's placement with its service token);
/// the cell is not mapped yet.
async fn start_cell(region: &Region, name: &str, db_url: &str, bus_url: &str) -> ExtraCell {
    cell_mapping::cells::migrate_cell_db("cell", db_url)
        .await
        .expect("migrate the new cell's database");
    let placement_url = format!("http://{}", region.placement.addr);
    let bus = fabric::bus::connect(bus_url).await.expect("bus");
    let mut opts = cell_conductor::ConductorOptions::new(db_url, bus.clone());
    opts.host = format!("{name}-conductor");
    opts.placement = Arc::new(
        cell_conductor::HttpPlacement::with_token(&placement_url, region.service_token.clone())
            .expect("conductor placement"),
    );
    let conductor = cell_conductor::run_with(opts)
        .await
        .expect("the new cell's conductor");
    let placement: Arc<dyn compute::placement::Placement> = Arc::new(
        compute::placement::HttpPlacement::with_token(&placement_url, region.service_token.clone())
            .expect("compute placement"),
    );
    let fake = FakeHypervisor::automatic(Duration::from_millis(20));
    let mut hosts = Vec::new();
    for j in 1..=2 {
        let host = format!("{name}-host{j:02}");
        let mut hc = compute::HostConfig::new(&host);
        // Far smaller than the region's hosts (16 vCPU, 64 GiB): the
        // weighers prefer cell1 and cell2 whenever they are schedulable.
        hc.resources.vcpus = 4;
        hc.resources.memory_mb = 16384;
        hc.resources.disk_gb = 50;
        hosts.push(compute::start_host(
            hc,
            bus.clone(),
            fake.driver(&host),
            placement.clone(),
        ));
    }
    for h in &hosts {
        tokio::time::timeout(Duration::from_secs(30), h.ready())
            .await
            .expect("new host registered in time")
            .expect("new host registered");
    }
    ExtraCell {
        bus,
        conductor,
        hosts,
    }
}

fn assert_no_valid_host(b: &Built) {
    assert_eq!(b.status, "ERROR", "{}", b.server);
    assert!(b.host.is_empty(), "{}", b.server);
    let fault = b.server["fault"]["message"].as_str().unwrap_or_default();
    assert!(fault.contains("No valid host"), "{}", b.server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cells_added_disabled_and_enabled_while_running() {
    let dir = testkit::temp_dir("cells_live");
    let cell3_db = format!("sqlite://{}/cell3.sqlite?mode=rwc", dir.display());
    cells_live(
        RegionConfig::default(),
        dir,
        cell3_db,
        "inproc://cell3".into(),
    )
    .await;
}

/// The same on PostgreSQL and RabbitMQ: every database on PostgreSQL, each
/// cell on its own vhost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cells_added_disabled_and_enabled_while_running_on_postgresql_and_rabbitmq() {
    let mut db_template = String::new();
    let mut cell3_db = String::new();
    for db in [
        "api",
        "cell0",
        "cell1",
        "cell2",
        "cell3",
        "placement",
        "identity",
        "image",
    ] {
        let name = format!("cells_live_pg_{db}");
        let Some(pg) = testkit::postgres(&name).await else {
            return;
        };
        db_template = pg.url.replace(&name, "cells_live_pg_{db}");
        if db == "cell3" {
            cell3_db = pg.url;
        }
    }
    let mut bus_template = String::new();
    let mut cell3_bus = String::new();
    for cell in ["cell1", "cell2", "cell3"] {
        let name = format!("cells_live_pg_{cell}");
        let Some(url) = testkit::rabbitmq(&name) else {
            return;
        };
        bus_template = url.replace(&name, "cells_live_pg_{cell}");
        if cell == "cell3" {
            cell3_bus = url;
        }
    }
    let mut cfg = RegionConfig::default();
    cfg.region.database_url = db_template;
    cfg.region.transport_url = bus_template;
    let dir = testkit::temp_dir("cells_live_pg");
    cells_live(cfg, dir, cell3_db, cell3_bus).await;
}

/// Starts a two-cell region on `cfg`'s backends, adds cell3 (database
/// `cell3_db`, bus `cell3_bus`) while it runs, disables and enables cell1
/// and cell2.
async fn cells_live(
    mut cfg: RegionConfig,
    dir: std::path::PathBuf,
    cell3_db: String,
    cell3_bus: String,
) {
    let began = Instant::now();
    cfg.region.data_dir = dir.clone();
    cfg.region.cells = 2;
    cfg.region.hosts_per_cell = 2;
    cfg.region.fake_spawn_latency_ms = 20;
    crate::ephemeral_ports(&mut cfg);
    let region = Region::start(&cfg, None).await.expect("start the region");
    let identity = format!("http://{}", region.identity.addr);
    let member = region::password_token(&identity, &region.member)
        .await
        .expect("member token")
        .0;
    let admin = region::password_token(&identity, &region.admin)
        .await
        .expect("admin token")
        .0;
    let mut api = Api {
        http: reqwest::Client::new(),
        compute: format!("http://{}", region.compute.addr),
        placement: format!("http://{}", region.placement.addr),
        member,
        admin,
        booted: Vec::new(),
    };
    // More servers than Nova's default quota (10) are booted here: lift the
    // instance quotas of both projects (quotas are tested elsewhere).
    for project in [&region.admin.project, &region.member.project] {
        let r = api
            .http
            .get(format!("{identity}/v3/projects?name={project}"))
            .header("x-auth-token", &api.admin)
            .send()
            .await
            .expect("project lookup");
        let v: Value = r.json().await.expect("projects");
        let id = v["projects"][0]["id"]
            .as_str()
            .expect("project id")
            .to_owned();
        let (status, v) = api
            .call(
                &api.admin,
                "PUT",
                &format!("/v2.1/os-quota-sets/{id}"),
                Some(json!({"quota_set": {"instances": -1, "cores": -1, "ram": -1}})),
            )
            .await;
        assert_eq!(status, 200, "quota of {project}: {v}");
    }
    let op = ApiDb::open(&region.api_db_url).await.expect("API database");
    let old_cells: Vec<_> = op
        .cells()
        .await
        .expect("cells")
        .into_iter()
        .filter(|c| matches!(c.name.as_deref(), Some("cell1" | "cell2")))
        .collect();
    assert_eq!(old_cells.len(), 2, "cell1 and cell2 mapped");
    let old = ["cell1-", "cell2-"];

    // Two cells: the first server runs in one of them.
    let vm1 = api.boot_and_settle(false, "vm1", None).await;
    assert_eq!(vm1.status, "ACTIVE", "{}", vm1.server);
    assert!(
        old.iter().any(|p| vm1.host.starts_with(p)),
        "{}",
        vm1.server
    );

    // cell3's services run and report to placement, but nothing maps them:
    // even an admin's forced host there finds no valid host.
    let cell3 = start_cell(&region, "cell3", &cell3_db, &cell3_bus).await;
    let early = api
        .boot_and_settle(true, "early", Some("nova:cell3-host01"))
        .await;
    assert_no_valid_host(&early);
    api.delete(&api.admin, &early.id).await;

    // Map cell3 and discover its hosts while everything runs.
    let (mapping, _) = cell_mapping::cells::create_cell(
        &op,
        &NewCell {
            name: Some("cell3".into()),
            transport_url: cell3_bus.clone(),
            database_connection: cell3_db.clone(),
            disabled: false,
        },
    )
    .await
    .expect("create cell3");
    let found = cell_mapping::discover_hosts(&op, &DiscoverOptions::default(), &mut |_| {})
        .await
        .expect("discover hosts");
    assert_eq!(
        found.mapped_hosts(),
        vec![
            (mapping.uuid, "cell3-host01".to_owned()),
            (mapping.uuid, "cell3-host02".to_owned())
        ]
    );
    let mapped_at = Instant::now();

    // Within seconds a build can land in cell3 (forced: the others weigh more).
    let deadline = mapped_at + SEEN_WITHIN;
    let in_cell3 = loop {
        let b = api
            .boot_and_settle(true, "probe3", Some("nova:cell3-host01"))
            .await;
        if b.status == "ACTIVE" {
            break b;
        }
        // Not yet seen: no valid host, nothing held.
        assert_no_valid_host(&b);
        api.delete(&api.admin, &b.id).await;
        assert!(
            Instant::now() < deadline,
            "cell3 not schedulable {SEEN_WITHIN:?} after it was mapped"
        );
    };
    assert_eq!(in_cell3.host, "cell3-host01", "{}", in_cell3.server);
    let new_cell_seen = mapped_at.elapsed();
    // The member's unforced builds still prefer cell1 and cell2 (the bigger hosts).
    let b = api.boot_and_settle(false, "prefers-old", None).await;
    assert_eq!(b.status, "ACTIVE", "{}", b.server);
    assert!(old.iter().any(|p| b.host.starts_with(p)), "{}", b.server);

    // Disable cell1 and cell2: the next builds all land in cell3.
    for c in &old_cells {
        let up = cell_mapping::cells::update_cell(
            &op,
            &c.uuid,
            &CellChange {
                disable: true,
                ..Default::default()
            },
        )
        .await
        .expect("disable a cell");
        assert!(up.cell.disabled);
    }
    let disabled_at = Instant::now();
    let (first, late) = api.boot_until_in("after-disable", &["cell3-"]).await;
    let disable_seen = disabled_at.elapsed();
    let mut after: Vec<Built> = vec![first];
    for i in 0..3 {
        after.push(
            api.boot_and_settle(false, &format!("disabled-{i}"), None)
                .await,
        );
    }
    for b in &after {
        assert_eq!(b.status, "ACTIVE", "{}", b.server);
        assert!(b.host.starts_with("cell3-"), "{}", b.server);
    }
    // Spreading over cell3's two hosts: both took builds.
    assert!(
        after.iter().any(|b| b.host == "cell3-host01")
            && after.iter().any(|b| b.host == "cell3-host02"),
        "{:?}",
        after.iter().map(|b| &b.host).collect::<Vec<_>>()
    );
    // Not even an admin's forced host reaches the disabled cell.
    let forced = api
        .boot_and_settle(true, "forced-old", Some(&format!("nova:{}", vm1.host)))
        .await;
    assert_no_valid_host(&forced);

    // The disabled cell's server keeps working: shown ACTIVE, listed, renamed, deleted
    // (claim released).
    let (status, v) = api
        .call(
            &api.member,
            "GET",
            &format!("/v2.1/servers/{}", vm1.id),
            None,
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["server"]["status"], "ACTIVE", "{v}");
    assert_eq!(v["server"]["OS-EXT-STS:vm_state"], "active", "{v}");
    let (status, v) = api.call(&api.member, "GET", "/v2.1/servers", None).await;
    assert_eq!(status, 200, "{v}");
    assert!(
        v["servers"]
            .as_array()
            .expect("servers")
            .iter()
            .any(|s| s["id"] == vm1.id.as_str()),
        "{v}"
    );
    let (status, v) = api
        .call(
            &api.member,
            "PUT",
            &format!("/v2.1/servers/{}", vm1.id),
            Some(json!({"server": {"name": "vm1-renamed"}})),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(api.show(&vm1.id).await.1["server"]["name"], "vm1-renamed");
    assert_ne!(api.allocations(&vm1.id).await, json!({}));
    api.delete(&api.member, &vm1.id).await;
    assert_eq!(api.allocations(&vm1.id).await, json!({}));

    // Enable cell1 and cell2 again: within seconds builds go there again.
    for c in &old_cells {
        cell_mapping::cells::update_cell(
            &op,
            &c.uuid,
            &CellChange {
                enable: true,
                ..Default::default()
            },
        )
        .await
        .expect("enable a cell");
    }
    let enabled_at = Instant::now();
    let (back, _) = api.boot_until_in("after-enable", &old).await;
    let enable_seen = enabled_at.elapsed();
    assert_eq!(back.status, "ACTIVE");

    eprintln!(
        "new cell used {new_cell_seen:?} after mapping; disable seen after {disable_seen:?} \
         ({late} build(s) still in cell1/cell2); enable seen after {enable_seen:?}; total {:?}",
        began.elapsed()
    );

    // Clean up: every server deleted, nothing held in placement.
    let ids = std::mem::take(&mut api.booted);
    for id in &ids {
        api.request_delete(&api.admin, id).await;
    }
    for id in &ids {
        api.wait_gone(id).await;
    }
    for id in &ids {
        assert_eq!(api.allocations(id).await, json!({}), "{id}");
    }
    op.close().await;
    cell3.stop().await;
    region.shutdown().await;
    std::fs::remove_dir_all(&dir).ok();
}
