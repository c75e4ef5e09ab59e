//! The Compute API end to end on an in-process region: identity,
//! placement, cell0 and one or two cells (SQLite, in-process bus, a cell
//! conductor, fake computes reporting to placement over HTTP), hosts
//! mapped by discovery, the Compute API with its super-conductor.

use std::sync::Arc;
use std::time::{Duration, Instant};

use api_super::compute_api::db::NewFlavor;
use api_super::identity::policy::Policy;
use api_super::identity::BootstrapSpec;
use api_super::scheduler::placement::HttpPlacement;
use api_super::{ComputeConfig, ComputeDeps, ComputeRunning};
use cell_mapping::cells::NewCell;
use cell_mapping::ApiDb;
use compute::driver::fake::FakeHypervisor;
use serde_json::{json, Value};
use sha2::Digest;

use crate::common::{self, json as body, Env, ADMIN_PW, MEMBER_PW};

pub(crate) const IMAGE: &str = "155d900f-4e14-4e4c-a73d-069cbf4541e6";

/// A whole region in one process (shared with the operator tests).
pub(crate) struct Region {
    pub(crate) env: Env,
    pub(crate) compute: ComputeRunning,
    pub(crate) placement: placement::Running,
    pub(crate) api: ApiDb,
    pub(crate) cells: Vec<(cell_conductor::Handle, Vec<compute::HostHandle>)>,
    /// Each cell's fake hypervisor (knobs: failing or slow spawns per host).
    pub(crate) hypervisors: Vec<FakeHypervisor>,
    pub(crate) admin: String,
    pub(crate) member: String,
    pub(crate) other: String,
    pub(crate) _dbs: Vec<testkit::SqliteDb>,
}

impl Region {
    pub(crate) async fn start(name: &str, cells: usize, hosts: usize) -> Region {
        Self::start_with(name, cells, hosts, |_| {}).await
    }

    /// [`Region::start`] with the Compute API's configuration tweaked.
    pub(crate) async fn start_with(
        name: &str,
        cells: usize,
        hosts: usize,
        tweak: impl FnOnce(&mut ComputeConfig),
    ) -> Region {
        Self::start_full(name, cells, hosts, tweak, None, Policy::defaults()).await
    }

    /// [`Region::start_with`], an image lookup (without one any UUID imageRef boots) and policy.
    pub(crate) async fn start_full(
        name: &str,
        cells: usize,
        hosts: usize,
        tweak: impl FnOnce(&mut ComputeConfig),
        images: Option<Arc<dyn api_super::compute_api::images::ImageLookup>>,
        policy: Policy,
    ) -> Region {
        let env = common::start(&format!("{name}_id"), |_| {}).await;
        let other_spec = BootstrapSpec {
            member: Some(("other".into(), MEMBER_PW.into(), "other".into())),
            ..BootstrapSpec::admin(ADMIN_PW)
        };
        env.running
            .identity
            .bootstrap(&other_spec)
            .await
            .expect("second member");
        let mut dbs = Vec::new();
        let mut sqlite = |suffix: &str| {
            let d = testkit::sqlite(&format!("{name}_{suffix}"));
            let u = d.url.clone();
            dbs.push(d);
            u
        };
        let api_url = sqlite("api");
        let cell0_url = sqlite("cell0");
        let placement_url = sqlite("placement");
        let cell_urls: Vec<String> = (1..=cells).map(|i| sqlite(&format!("c{i}"))).collect();
        migrations::migrate(migrations::Kind::Api, &api_url)
            .await
            .expect("api migrations");
        let api = ApiDb::open(&api_url).await.expect("api db");
        cell_mapping::cells::map_cell0(&api, &cell0_url)
            .await
            .expect("cell0");

        let mut pcfg = placement::PlacementConfig {
            listen: "127.0.0.1:0".into(),
            ..Default::default()
        };
        pcfg.database.connection = placement_url;
        let placement = placement::serve(&pcfg, None).await.expect("placement");
        let purl = format!("http://{}", placement.addr);

        let mut running = Vec::new();
        let mut hypervisors = Vec::new();
        for (i, db_url) in cell_urls.iter().enumerate() {
            let c = i + 1;
            let transport = format!("inproc://{name}_c{c}");
            cell_mapping::cells::create_cell(
                &api,
                &NewCell {
                    name: Some(format!("cell{c}")),
                    transport_url: transport.clone(),
                    database_connection: db_url.clone(),
                    disabled: false,
                },
            )
            .await
            .expect("cell");
            let bus = fabric::bus::connect(&transport).await.expect("bus");
            let mut o = cell_conductor::ConductorOptions::new(db_url, bus.clone());
            o.placement = Arc::new(cell_conductor::HttpPlacement::new(&purl, "admin").unwrap());
            o.report_interval = Duration::from_millis(200);
            let conductor = cell_conductor::run_with(o).await.expect("conductor");
            // Long enough that a show right after the create still sees
            // BUILD on a loaded machine.
            let hv = FakeHypervisor::automatic(Duration::from_millis(500));
            let mut hs = Vec::new();
            for h in 1..=hosts {
                let host = format!("c{c}-host{h}");
                let mut cfg = compute::HostConfig::new(&host);
                cfg.heartbeat_interval = Duration::from_millis(200);
                cfg.call_timeout = Duration::from_secs(10);
                let handle = compute::start_host(
                    cfg,
                    bus.clone(),
                    hv.driver(&host),
                    Arc::new(compute::placement::HttpPlacement::new(&purl, "admin").unwrap()),
                );
                tokio::time::timeout(Duration::from_secs(30), handle.ready())
                    .await
                    .expect("host ready in time")
                    .expect("host ready");
                hs.push(handle);
            }
            running.push((conductor, hs));
            hypervisors.push(hv);
        }
        let found = cell_mapping::discover_hosts(&api, &Default::default(), &mut |_| {})
            .await
            .expect("discovery");
        assert_eq!(found.mapped_hosts().len(), cells * hosts, "{found:?}");
        assert_eq!(api_super::seed_flavors(&api_url).await.expect("flavors"), 5);
        assert_eq!(
            api_super::seed_flavors(&api_url).await.unwrap(),
            0,
            "idempotent"
        );
        let compute_db = api_super::compute_api::db::ComputeDb::new(api.clone());
        compute_db
            .create_flavor_if_absent(&NewFlavor {
                flavorid: "huge".into(),
                name: "m1.huge".into(),
                memory_mb: 10_000_000,
                vcpus: 1,
                root_gb: 1,
            })
            .await
            .unwrap();
        let mut cfg = ComputeConfig {
            listen: "127.0.0.1:0".into(),
            // Quotas are tested in `user_apis`; here the huge flavor must
            // reach the scheduler.
            quota: api_super::compute_api::quotas::QuotaConfig {
                instances: -1,
                cores: -1,
                ram: -1,
                ..Default::default()
            },
            ..Default::default()
        };
        let deps = ComputeDeps {
            api_database: api_url,
            auth: env.running.identity.validator.clone(),
            policy: Arc::new(policy),
            placement: Arc::new(HttpPlacement::new(&purl, "admin").unwrap()),
            images,
        };
        tweak(&mut cfg);
        let compute = api_super::serve_compute(cfg, deps)
            .await
            .expect("compute API");
        let (admin, _) = common::token(env.addr(), "admin", ADMIN_PW, Some("admin")).await;
        let (member, _) = common::token(env.addr(), "demo", MEMBER_PW, Some("demo")).await;
        let (other, _) = common::token(env.addr(), "other", MEMBER_PW, Some("other")).await;
        Region {
            env,
            compute,
            placement,
            api,
            cells: running,
            hypervisors,
            admin,
            member,
            other,
            _dbs: dbs,
        }
    }

    pub(crate) async fn call(
        &self,
        token: &str,
        method: &str,
        path: &str,
        b: Option<Value>,
    ) -> testkit::http::Response {
        common::req(
            self.compute.addr,
            method,
            path,
            &[
                ("x-auth-token", token),
                ("openstack-api-version", "compute latest"),
            ],
            b,
        )
        .await
    }

    pub(crate) async fn boot(&self, token: &str, name: &str, flavor: &str) -> String {
        let r = self
            .call(
                token,
                "POST",
                "/v2.1/servers",
                Some(json!({"server": {"name": name, "flavorRef": flavor, "imageRef": IMAGE, "networks": "none"}})),
            )
            .await;
        assert_eq!(r.status, 202, "{}", r.body);
        let v = body(&r);
        for k in [
            "id",
            "links",
            "adminPass",
            "OS-DCF:diskConfig",
            "security_groups",
        ] {
            assert!(v["server"].get(k).is_some(), "{k} in {v}");
        }
        v["server"]["id"].as_str().unwrap().to_owned()
    }

    pub(crate) async fn show(&self, token: &str, id: &str) -> testkit::http::Response {
        self.call(token, "GET", &format!("/v2.1/servers/{id}"), None)
            .await
    }

    /// Polls the server until `done`, returning every (status, vm, task) seen.
    pub(crate) async fn wait(
        &self,
        id: &str,
        done: impl Fn(&Value) -> bool,
    ) -> (Value, Vec<(String, String, String)>) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen: Vec<(String, String, String)> = Vec::new();
        loop {
            let r = self.show(&self.admin, id).await;
            assert_eq!(r.status, 200, "{}", r.body);
            let s = body(&r)["server"].clone();
            let o = (
                s["status"].as_str().unwrap_or("").to_owned(),
                s["OS-EXT-STS:vm_state"].as_str().unwrap_or("").to_owned(),
                s["OS-EXT-STS:task_state"].as_str().unwrap_or("").to_owned(),
            );
            if seen.last() != Some(&o) {
                seen.push(o);
            }
            if done(&s) {
                return (s, seen);
            }
            assert!(Instant::now() < deadline, "timed out: {seen:?} {s}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    pub(crate) async fn stop(self) {
        self.compute.shutdown();
        for (c, hs) in self.cells {
            for h in hs {
                h.shutdown().await;
            }
            c.shutdown().await;
        }
        self.placement.task.abort();
        self.api.close().await;
        drop(self.env);
    }
}

pub(crate) async fn placement_get(p: &placement::Running, path: &str) -> Value {
    let r = common::req(
        p.addr,
        "GET",
        path,
        &[
            ("x-auth-token", "admin"),
            ("openstack-api-version", "placement 1.36"),
        ],
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{path}: {}", r.body);
    body(&r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_auth_and_errors() {
    let region = Region::start("compute_errors", 1, 1).await;
    let addr = region.compute.addr;
    // Version discovery needs no token.
    let r = common::req(addr, "GET", "/", &[], None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(body(&r)["versions"][1]["id"], "v2.1"); // after v2.0
    assert!(r.header("x-openstack-request-id").is_some());
    let r = common::req(addr, "GET", "/v2.1", &[], None).await;
    assert_eq!(body(&r)["version"]["min_version"], "2.1");
    assert_eq!(body(&r)["version"]["version"], "2.104");
    // No token, bad token: 401 with a request id.
    let r = common::req(addr, "GET", "/v2.1/servers", &[], None).await;
    assert_eq!(r.status, 401);
    assert!(r.header("x-openstack-request-id").is_some());
    // Nova's compute-specific copy of it.
    assert_eq!(
        r.header("x-compute-request-id"),
        r.header("x-openstack-request-id")
    );
    let r = common::authed(addr, "garbage", "GET", "/v2.1/servers", None).await;
    assert_eq!(r.status, 401);
    // Microversions.
    let tok = region.member.clone();
    for (hdr, val, status) in [
        ("x-openstack-nova-api-version", "2.200", 406),
        ("openstack-api-version", "compute 3.0", 406),
        ("x-openstack-nova-api-version", "2.x", 400),
        ("x-openstack-nova-api-version", "2.01", 400),
    ] {
        let r = common::req(
            addr,
            "GET",
            "/v2.1/flavors",
            &[("x-auth-token", &tok), (hdr, val)],
            None,
        )
        .await;
        assert_eq!(r.status, status, "{hdr}: {val}: {}", r.body);
    }
    let r = common::req(
        addr,
        "GET",
        "/v2.1/flavors",
        &[
            ("x-auth-token", &tok),
            ("openstack-api-version", "compute 2.60"),
        ],
        None,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("openstack-api-version"), Some("compute 2.60"));
    // Flavors.
    let r = region.call(&tok, "GET", "/v2.1/flavors", None).await;
    let names: Vec<String> = body(&r)["flavors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap().to_owned())
        .collect();
    for n in ["m1.tiny", "m1.small", "m1.medium", "m1.large", "m1.xlarge"] {
        assert!(names.contains(&n.to_owned()), "{names:?}");
    }
    let r = region.call(&tok, "GET", "/v2.1/flavors/1", None).await;
    assert_eq!(body(&r)["flavor"]["ram"], 512);
    // Nova's list options: flavorid order, minRam/minDisk, sort, paging.
    let ids = |r: &testkit::http::Response| -> Vec<String> {
        body(r)["flavors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["id"].as_str().unwrap().to_owned())
            .collect()
    };
    for (q, want) in [
        // (`huge`: this region's extra flavor, 10 TB of RAM, 1 GB disk)
        ("", vec!["1", "2", "3", "4", "5", "huge"]),
        ("?minRam=2048", vec!["2", "3", "4", "5", "huge"]),
        ("?minDisk=80", vec!["4", "5"]),
        (
            "?sort_key=memory_mb&sort_dir=desc",
            vec!["huge", "5", "4", "3", "2", "1"],
        ),
        ("?limit=2&marker=2", vec!["3", "4"]),
    ] {
        let r = region
            .call(&tok, "GET", &format!("/v2.1/flavors{q}"), None)
            .await;
        assert_eq!(r.status, 200, "{q}: {}", r.body);
        assert_eq!(ids(&r), want, "{q}");
    }
    let r = region
        .call(&tok, "GET", "/v2.1/flavors/detail?limit=2", None)
        .await;
    let next = body(&r)["flavors_links"][0]["href"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        next.ends_with("/v2.1/flavors/detail?limit=2&marker=2"),
        "{}",
        r.body
    );
    for (q, want) in [
        ("?marker=nope", "marker [nope] not found"),
        ("?minRam=x", "Invalid minRam filter [x]"),
        ("?sort_key=bogus", "sort_key"),
    ] {
        let r = region
            .call(&tok, "GET", &format!("/v2.1/flavors{q}"), None)
            .await;
        assert_eq!(r.status, 400, "{q}: {}", r.body);
        assert!(r.body.contains(want), "{q}: {}", r.body);
    }
    // 2.102: a name filter (a regular expression); no rxtx_factor nor
    // OS-FLV-DISABLED:disabled.
    let r = common::req(
        addr,
        "GET",
        "/v2.1/flavors/detail?name=%5Em1%5C.t",
        &[
            ("x-auth-token", &tok),
            ("openstack-api-version", "compute 2.102"),
        ],
        None,
    )
    .await;
    assert_eq!(ids(&r), vec!["1"], "{}", r.body);
    let f = &body(&r)["flavors"][0];
    assert!(
        f.get("rxtx_factor").is_none() && f.get("OS-FLV-DISABLED:disabled").is_none(),
        "{f}"
    );
    let r = region.call(&tok, "GET", "/v2.1/flavors/detail", None).await;
    assert_eq!(r.status, 200);
    let r = region.call(&tok, "GET", "/v2.1/flavors/nope", None).await;
    assert_eq!(r.status, 404);
    assert_eq!(body(&r)["itemNotFound"]["code"], 404, "{}", r.body);
    // Bad creates: Nova's status and body, nothing written.
    let bad = [
        json!({"server": {"name": "x", "flavorRef": "nope", "imageRef": IMAGE, "networks": "none"}}),
        json!({"server": {"name": "x", "flavorRef": "1", "imageRef": "not-a-uuid", "networks": "none"}}),
        json!({"server": {"name": 5, "flavorRef": "1", "imageRef": IMAGE, "networks": "none"}}),
        json!({"server": {"name": "x", "flavorRef": "1", "imageRef": IMAGE, "networks": "none", "max_count": "many"}}),
        json!({"server": {"name": "x", "flavorRef": "1", "imageRef": IMAGE}}),
        json!({"server": {"name": "x", "flavorRef": "1", "imageRef": IMAGE, "networks": "none", "metadata": {"a/b": "v"}}}),
        json!({"server": {"name": "x", "flavorRef": "1", "imageRef": IMAGE, "networks": "none", "metadata": {"k": 1}}}),
        json!({"server": {"name": "x", "flavorRef": "1", "imageRef": IMAGE, "networks": "none", "metadata": ["k"]}}),
        json!({"server": {"name": "x", "flavorRef": "1", "imageRef": IMAGE, "networks": "none", "user_data": "not base64!"}}),
        json!({"server": {"name": "x", "flavorRef": "1", "imageRef": IMAGE, "networks": "none", "user_data": 7}}),
        json!({"server": {"name": "x", "flavorRef": "1", "imageRef": IMAGE, "networks": "none", "user_data": "QUFB".repeat(16384)}}),
        json!({"server": "x"}),
        json!({"nope": {}}),
    ];
    for b in bad {
        let r = region
            .call(&tok, "POST", "/v2.1/servers", Some(b.clone()))
            .await;
        assert_eq!(r.status, 400, "{b}: {}", r.body);
        assert_eq!(body(&r)["badRequest"]["code"], 400, "{b}: {}", r.body);
    }
    // Requested networks: Nova's shape checked; no network or port can be
    // found in a region without a network service, and the answer says so.
    let net = "3cb9bc59-5699-4588-a4b1-b87f96708bc6";
    let networks = [
        (
            json!([{"uuid": net}]),
            format!("Network {net} could not be found. This region has no network service"),
        ),
        (
            json!([{"port": net}]),
            format!("Port id {net} could not be found. This region has no network service"),
        ),
        (
            json!([{"uuid": "not-a-uuid"}]),
            "network uuid is not in proper format (not-a-uuid)".to_owned(),
        ),
        (json!([{}]), "Bad network format: missing 'uuid'".to_owned()),
        (
            json!([{"uuid": net, "nic": 1}]),
            "('nic' was unexpected)".to_owned(),
        ),
        (json!([{"uuid": 7}]), "7 is not of type 'string'".to_owned()),
        (json!(["private"]), "is not of type 'object'".to_owned()),
        (
            json!("private"),
            "is not valid under any of the given schemas".to_owned(),
        ),
    ];
    for (n, want) in networks {
        let b =
            json!({"server": {"name": "x", "flavorRef": "1", "imageRef": IMAGE, "networks": n}});
        let r = region
            .call(&tok, "POST", "/v2.1/servers", Some(b.clone()))
            .await;
        assert_eq!(r.status, 400, "{b}: {}", r.body);
        let msg = body(&r)["badRequest"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(msg.contains(&want), "{b}: {msg}");
    }
    let r = common::req(
        addr,
        "POST",
        "/v2.1/servers",
        &[
            ("x-auth-token", &tok),
            ("x-openstack-nova-api-version", "2.999"),
        ],
        Some(json!({"server": {"name": "x", "flavorRef": "1", "imageRef": IMAGE}})),
    )
    .await;
    assert_eq!(r.status, 406);
    let r = region
        .call(&region.admin, "GET", "/v2.1/servers?all_tenants=1", None)
        .await;
    assert_eq!(body(&r)["servers"], json!([]), "nothing was written");
    let r = region
        .call(
            &tok,
            "GET",
            "/v2.1/servers/4a4b2e8e-2b1e-4c7d-8f55-1b7a0c0f9d11",
            None,
        )
        .await;
    assert_eq!(r.status, 404);
    assert!(body(&r)["itemNotFound"]["message"].is_string());
    region.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boot_list_show_delete_across_cells() {
    let region = Region::start("compute_boot", 2, 2).await;
    let id = region.boot(&region.member, "vm-1", "1").await;
    // At once: BUILD / building / scheduling (a build request or a row).
    let r = region.show(&region.member, &id).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let s = &body(&r)["server"];
    assert_eq!(s["status"], "BUILD", "{s}");
    assert_eq!(s["OS-EXT-STS:vm_state"], "building");
    let (s, seen) = region.wait(&id, |s| s["status"] == "ACTIVE").await;
    assert_eq!(
        seen.first().map(|o| o.0.as_str()),
        Some("BUILD"),
        "{seen:?}"
    );
    assert_eq!(s["OS-EXT-STS:task_state"], Value::Null);
    assert_eq!(s["OS-EXT-STS:power_state"], 1);
    assert_eq!(s["addresses"], json!({}));
    assert_eq!(s["OS-EXT-AZ:availability_zone"], "nova");
    let host = s["OS-EXT-SRV-ATTR:host"]
        .as_str()
        .unwrap_or_else(|| panic!("admin sees the host: {s}"))
        .to_owned();
    assert!(host.starts_with('c'), "{host}");
    // hostId: Nova's SHA-224 of project id + host, in hex.
    let want: String = sha2::Sha224::digest(format!("{}{host}", s["tenant_id"].as_str().unwrap()))
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(s["hostId"], want.as_str(), "{s}");
    // The member sees it without host attributes; another project not at all.
    let r = region.show(&region.member, &id).await;
    assert!(body(&r)["server"].get("OS-EXT-SRV-ATTR:host").is_none());
    let r = region.show(&region.other, &id).await;
    assert_eq!(r.status, 404, "{}", r.body);
    let r = region
        .call(
            &region.other,
            "DELETE",
            &format!("/v2.1/servers/{id}"),
            None,
        )
        .await;
    assert_eq!(r.status, 404);
    let r = region
        .call(&region.other, "GET", "/v2.1/servers", None)
        .await;
    assert_eq!(body(&r)["servers"], json!([]));
    // A second server, with metadata and user data; listing merges cells
    // newest first; paging by marker.
    let user_data = "I2Nsb3VkLWNvbmZpZwpob3N0bmFtZTogdm0tMgo=";
    let r = region
        .call(
            &region.member,
            "POST",
            "/v2.1/servers",
            Some(
                json!({"server": {"name": "vm-2", "flavorRef": "1", "imageRef": IMAGE,
                "networks": "none", "metadata": {"role": "web", "tier": "front"},
                "user_data": user_data}}),
            ),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let id2 = body(&r)["server"]["id"].as_str().unwrap().to_owned();
    // At once (a build request or the cell's row) and once ACTIVE.
    let s = body(&region.show(&region.member, &id2).await)["server"].clone();
    assert_eq!(
        s["metadata"],
        json!({"role": "web", "tier": "front"}),
        "{s}"
    );
    region.wait(&id2, |s| s["status"] == "ACTIVE").await;
    let s = body(&region.show(&region.member, &id2).await)["server"].clone();
    assert_eq!(
        s["metadata"],
        json!({"role": "web", "tier": "front"}),
        "{s}"
    );
    assert!(
        s.get("OS-EXT-SRV-ATTR:user_data").is_none(),
        "members do not see it: {s}"
    );
    let s = body(&region.show(&region.admin, &id2).await)["server"].clone();
    assert_eq!(s["OS-EXT-SRV-ATTR:user_data"], user_data, "{s}");
    assert_eq!(s["OS-EXT-SRV-ATTR:launch_index"], 0, "{s}");
    assert!(
        s["OS-EXT-SRV-ATTR:reservation_id"]
            .as_str()
            .is_some_and(|r| r.starts_with("r-")),
        "{s}"
    );
    let r = region
        .call(&region.member, "GET", "/v2.1/servers", None)
        .await;
    let ids: Vec<String> = body(&r)["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, vec![id2.clone(), id.clone()]);
    let r = region
        .call(&region.member, "GET", "/v2.1/servers/detail?limit=1", None)
        .await;
    let v = body(&r);
    assert_eq!(v["servers"].as_array().unwrap().len(), 1);
    assert_eq!(v["servers"][0]["id"], id2.as_str());
    assert!(v["servers_links"][0]["href"]
        .as_str()
        .unwrap()
        .contains(&format!("marker={id2}")));
    let r = region
        .call(
            &region.member,
            "GET",
            &format!("/v2.1/servers/detail?limit=1&marker={id2}"),
            None,
        )
        .await;
    assert_eq!(body(&r)["servers"][0]["id"], id.as_str());
    let r = region
        .call(&region.member, "GET", "/v2.1/servers?name=^vm-2$", None)
        .await;
    assert_eq!(body(&r)["servers"].as_array().unwrap().len(), 1);
    let r = region
        .call(&region.member, "GET", "/v2.1/servers?status=ERROR", None)
        .await;
    assert_eq!(body(&r)["servers"], json!([]));
    // Admin lists every project.
    let r = region
        .call(&region.admin, "GET", "/v2.1/servers?all_tenants=1", None)
        .await;
    assert_eq!(body(&r)["servers"].as_array().unwrap().len(), 2);
    let r = region
        .call(&region.member, "GET", "/v2.1/servers?all_tenants=1", None)
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    // Rename.
    let r = region
        .call(
            &region.member,
            "PUT",
            &format!("/v2.1/servers/{id}"),
            Some(json!({"server": {"name": "renamed"}})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(body(&r)["server"]["name"], "renamed");
    // Placement holds the claim; delete frees it.
    let a = placement_get(&region.placement, &format!("/allocations/{id}")).await;
    assert_eq!(a["allocations"].as_object().unwrap().len(), 1, "{a}");
    let r = region
        .call(
            &region.member,
            "DELETE",
            &format!("/v2.1/servers/{id}"),
            None,
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = region.show(&region.member, &id).await;
        if r.status == 404 {
            break;
        }
        assert!(Instant::now() < deadline, "not deleted: {}", r.body);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let a = placement_get(&region.placement, &format!("/allocations/{id}")).await;
        if a["allocations"].as_object().is_none_or(|m| m.is_empty()) {
            break;
        }
        assert!(Instant::now() < deadline, "allocation left: {a}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = region
        .call(&region.member, "GET", "/v2.1/servers", None)
        .await;
    assert_eq!(body(&r)["servers"].as_array().unwrap().len(), 1);
    region.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_valid_host_lands_in_cell0_with_a_fault() {
    let region = Region::start("compute_nvh", 1, 2).await;
    let id = region.boot(&region.member, "too-big", "huge").await;
    let (s, _) = region.wait(&id, |s| s["status"] == "ERROR").await;
    let fault = &s["fault"];
    assert!(
        fault["message"]
            .as_str()
            .unwrap()
            .starts_with("No valid host was found."),
        "{s}"
    );
    assert_eq!(fault["code"], 500);
    assert!(
        fault["details"]
            .as_str()
            .unwrap()
            .contains("Placement returned 0 candidate"),
        "{s}"
    );
    // The member does not see a 500's details.
    let r = region.show(&region.member, &id).await;
    let s = &body(&r)["server"];
    assert_eq!(s["status"], "ERROR");
    assert!(s["fault"].get("details").is_none());
    // Mapped to cell0; build request gone.
    let compute_db = api_super::compute_api::db::ComputeDb::new(region.api.clone());
    assert_eq!(compute_db.rows_for(&id).await.unwrap(), (0, 1, 1));
    let (cell, _, _) = compute_db.mapping(&id).await.unwrap().unwrap();
    let cell0 = region
        .api
        .cell(&fabric::ids::CELL0_UUID)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(cell, Some(cell0.id));
    // Forced host for a member is refused; all-or-none for max_count.
    let r = region.call(&region.member, "POST", "/v2.1/servers",
        Some(json!({"server": {"name": "f", "flavorRef": "1", "imageRef": IMAGE, "networks": "none", "availability_zone": "nova:c1-host1"}}))).await;
    assert_eq!(r.status, 403, "{}", r.body);
    let r = region.call(&region.admin, "POST", "/v2.1/servers",
        Some(json!({"server": {"name": "forced", "flavorRef": "1", "imageRef": IMAGE, "networks": "none", "availability_zone": "nova:c1-host2"}}))).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let forced = body(&r)["server"]["id"].as_str().unwrap().to_owned();
    let (s, _) = region.wait(&forced, |s| s["status"] == "ACTIVE").await;
    assert_eq!(s["OS-EXT-SRV-ATTR:host"], "c1-host2");
    // 2.74: a requested destination (admins; the filters still run).
    let node = s["OS-EXT-SRV-ATTR:hypervisor_hostname"]
        .as_str()
        .unwrap()
        .to_owned();
    let dest = |extra: Value| {
        let mut b =
            json!({"name": "dest", "flavorRef": "1", "imageRef": IMAGE, "networks": "none"});
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        json!({"server": b})
    };
    let r = region
        .call(
            &region.member,
            "POST",
            "/v2.1/servers",
            Some(dest(json!({"host": "c1-host1"}))),
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    for (extra, missing) in [
        (json!({"host": "nope"}), "nope"),
        (json!({"hypervisor_hostname": "nope"}), "nope"),
        (
            json!({"host": "c1-host1", "hypervisor_hostname": node}),
            "c1-host1",
        ),
    ] {
        let r = region
            .call(
                &region.admin,
                "POST",
                "/v2.1/servers",
                Some(dest(extra.clone())),
            )
            .await;
        assert_eq!(r.status, 400, "{extra}: {}", r.body);
        assert_eq!(
            body(&r)["badRequest"]["message"],
            format!("Compute host {missing} could not be found."),
            "{extra}"
        );
    }
    let r = common::req(
        region.compute.addr,
        "POST",
        "/v2.1/servers",
        &[
            ("x-auth-token", &region.admin),
            ("openstack-api-version", "compute 2.73"),
        ],
        Some(dest(json!({"host": "c1-host1"}))),
    )
    .await;
    assert_eq!(r.status, 400, "before 2.74: {}", r.body);
    for (extra, host) in [
        (json!({"host": "c1-host1"}), "c1-host1"),
        (json!({"hypervisor_hostname": node}), "c1-host2"),
    ] {
        let r = region
            .call(
                &region.admin,
                "POST",
                "/v2.1/servers",
                Some(dest(extra.clone())),
            )
            .await;
        assert_eq!(r.status, 202, "{extra}: {}", r.body);
        let id = body(&r)["server"]["id"].as_str().unwrap().to_owned();
        let (s, _) = region.wait(&id, |s| s["status"] == "ACTIVE").await;
        assert_eq!(s["OS-EXT-SRV-ATTR:host"], host, "{extra}");
    }
    // The create action holds the super-conductor's scheduling event
    // (upstream's name): Success for the landed server, Error with the
    // fault for the one buried in cell0; then the compute's.
    let events = |id: String| {
        let region = &region;
        async move {
            let r = region
                .call(
                    &region.admin,
                    "GET",
                    &format!("/v2.1/servers/{id}/os-instance-actions"),
                    None,
                )
                .await;
            assert_eq!(r.status, 200, "{}", r.body);
            let rid = body(&r)["instanceActions"][0]["request_id"]
                .as_str()
                .unwrap()
                .to_owned();
            let r = region
                .call(
                    &region.admin,
                    "GET",
                    &format!("/v2.1/servers/{id}/os-instance-actions/{rid}"),
                    None,
                )
                .await;
            assert_eq!(r.status, 200, "{}", r.body);
            body(&r)["instanceAction"]["events"]
                .as_array()
                .unwrap()
                .clone()
        }
    };
    let landed = events(forced.clone()).await;
    let sched = landed
        .iter()
        .find(|e| e["event"] == "conductor_schedule_and_build_instances")
        .unwrap_or_else(|| panic!("no scheduling event in {landed:?}"));
    assert_eq!(sched["result"], "Success", "{sched}");
    assert!(sched["finish_time"].is_string(), "{sched}");
    assert!(
        landed
            .iter()
            .any(|e| e["event"] == "compute__do_build_and_run_instance"),
        "{landed:?}"
    );
    let buried = events(id.clone()).await;
    assert_eq!(buried.len(), 1, "{buried:?}");
    assert_eq!(buried[0]["event"], "conductor_schedule_and_build_instances");
    assert_eq!(buried[0]["result"], "Error", "{buried:?}");
    assert!(
        buried[0]["traceback"]
            .as_str()
            .unwrap_or_default()
            .contains("No valid host was found."),
        "{buried:?}"
    );
    // The ERROR server deletes at once (it never reached a host).
    let r = region
        .call(
            &region.member,
            "DELETE",
            &format!("/v2.1/servers/{id}"),
            None,
        )
        .await;
    assert_eq!(r.status, 204);
    assert_eq!(region.show(&region.member, &id).await.status, 404);
    region.stop().await;
}

/// A server create's read of its flavor, extra specs and quota overrides
/// is answered from memory within the cache time, every write through the
/// same handle (or a clone) is seen by the next read, another handle's
/// writes (another process) once the entry expires, and a flavor not found
/// is never kept.
#[tokio::test]
async fn create_reads_are_cached_and_see_writes_through_this_process_at_once() {
    use api_super::compute_api::db::ComputeDb;
    let file = testkit::sqlite("create_reads_cache");
    migrations::migrate(migrations::Kind::Api, &file.url)
        .await
        .expect("api migrations");
    let api = ApiDb::open(&file.url).await.expect("api db");
    let ttl = Duration::from_millis(700);
    let cached = ComputeDb::new(api.clone()).with_create_reads_cache(ttl);
    let here = cached.clone();
    let elsewhere = ComputeDb::new(api.clone());
    here.seed_flavors().await.unwrap();
    let read = |project: &'static str| {
        let cached = cached.clone();
        async move {
            cached
                .flavor_for_create("1", project, false)
                .await
                .unwrap()
                .expect("m1.tiny")
        }
    };
    let first = read("p").await;
    assert_eq!(first.flavor.name, "m1.tiny");
    assert!(first.extra_specs.is_empty() && first.quotas.is_empty());
    let id = first.flavor.id;

    // Another process's writes: not seen while the entry lives.
    elsewhere
        .extra_specs_set(id, &[("a".into(), "1".into())])
        .await
        .unwrap();
    elsewhere
        .quotas_set("p", &[("instances".into(), 7)])
        .await
        .unwrap();
    let again = read("p").await;
    assert!(again.extra_specs.is_empty() && again.quotas.is_empty());
    // Another project's answer is its own entry, read now.
    assert!(read("q").await.extra_specs.contains_key("a"));

    // A write through this process (a clone of the handle): seen by the
    // very next read, with everything written before it.
    here.extra_specs_set(id, &[("b".into(), "2".into())])
        .await
        .unwrap();
    let after = read("p").await;
    assert_eq!(after.extra_specs.keys().collect::<Vec<_>>(), vec!["a", "b"]);
    assert_eq!(after.quotas, vec![("instances".to_owned(), 7)]);
    here.quotas_delete("p").await.unwrap();
    assert!(read("p").await.quotas.is_empty());
    here.extra_spec_delete(id, "a").await.unwrap();
    assert!(!read("p").await.extra_specs.contains_key("a"));

    // Another process's write is seen once the entry expired.
    elsewhere
        .quotas_set("p", &[("cores".into(), 3)])
        .await
        .unwrap();
    assert!(read("p").await.quotas.is_empty());
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    assert_eq!(read("p").await.quotas, vec![("cores".to_owned(), 3)]);

    // A miss is not kept: a flavor created elsewhere is found at once.
    assert!(cached
        .flavor_for_create("new", "p", false)
        .await
        .unwrap()
        .is_none());
    elsewhere
        .create_flavor_if_absent(&NewFlavor {
            flavorid: "new".into(),
            name: "m1.new".into(),
            memory_mb: 64,
            vcpus: 1,
            root_gb: 1,
        })
        .await
        .unwrap();
    assert!(cached
        .flavor_for_create("new", "p", false)
        .await
        .unwrap()
        .is_some());
    // Deleted through this process: gone at once.
    here.flavor_delete("new").await.unwrap();
    assert!(cached
        .flavor_for_create("new", "p", false)
        .await
        .unwrap()
        .is_none());
}

/// The create body as Nova's schema has it, per microversion: the fields
/// this region keeps (description, hostname, tags, adminPass,
/// return_reservation_id, min_count against the quota, `az:host:node`),
/// the ones it refuses saying why, and the zone check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_body_as_nova_schema_has_it() {
    let region = Region::start("compute_create_body", 2, 1).await;
    let at = |mv: &'static str, token: String, b: Value| {
        let addr = region.compute.addr;
        async move {
            common::req(
                addr,
                "POST",
                "/v2.1/servers",
                &[
                    ("x-auth-token", &token),
                    ("openstack-api-version", &format!("compute {mv}")),
                ],
                Some(b),
            )
            .await
        }
    };
    let server = |extra: Value| {
        let mut b = json!({"name": "x", "flavorRef": "1", "imageRef": IMAGE, "networks": "none"});
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        json!({ "server": b })
    };
    let (member, admin) = (region.member.clone(), region.admin.clone());
    // Refused, each with Nova's 400 and what it says; nothing written.
    let bad = [
        (
            "2.1",
            &member,
            server(json!({"availability_zone": "nowhere"})),
            "The requested availability zone is not available",
        ),
        (
            "2.1",
            &admin,
            server(json!({"availability_zone": "nova:a:b:c"})),
            "Unable to parse availability_zone",
        ),
        (
            "2.1",
            &member,
            server(json!({"bogus": 1})),
            "('bogus' was unexpected)",
        ),
        (
            "2.1",
            &member,
            {
                let mut b = server(json!({}));
                b["extra"] = json!(1);
                b
            },
            "('extra' was unexpected)",
        ),
        (
            "2.18",
            &member,
            server(json!({"description": "d"})),
            "('description' was unexpected)",
        ),
        (
            "2.51",
            &member,
            server(json!({"tags": ["a"]})),
            "('tags' was unexpected)",
        ),
        (
            "2.89",
            &member,
            server(json!({"hostname": "h1"})),
            "('hostname' was unexpected)",
        ),
        (
            "2.90",
            &member,
            server(json!({"hostname": "-bad"})),
            "does not match '^[a-zA-Z0-9]+[a-zA-Z0-9-]*[a-zA-Z0-9]+$'",
        ),
        (
            "2.90",
            &member,
            server(json!({"hostname": "h1", "max_count": 2})),
            "Unable to allocate a single hostname to multiple instances",
        ),
        (
            "2.74",
            &admin,
            server(json!({"host": "c1-host1", "availability_zone": "nova:c1-host1"})),
            "are mutually exclusive",
        ),
        (
            "2.1",
            &member,
            server(json!({"security_groups": [{"name": "web"}]})),
            "with name or id 'web'",
        ),
        (
            "2.1",
            &member,
            server(
                json!({"block_device_mapping_v2": [{"boot_index": 0, "uuid": IMAGE, "source_type": "image", "destination_type": "volume", "volume_size": 1}]}),
            ),
            "not built in this region",
        ),
        (
            "2.1",
            &member,
            server(json!({"config_drive": "maybe"})),
            "'maybe' is not one of [True, 'True'",
        ),
        (
            "2.1",
            &member,
            server(json!({"OS-DCF:diskConfig": "SOMETIMES"})),
            "is not one of ['AUTO', 'MANUAL']",
        ),
        (
            "2.52",
            &member,
            server(json!({"tags": (0..51).map(|i| format!("t{i}")).collect::<Vec<_>>()})),
            "is too long",
        ),
        (
            "2.19",
            &member,
            server(json!({"description": "d".repeat(256)})),
            "is too long",
        ),
    ];
    for (mv, tok, b, want) in bad {
        let r = at(mv, tok.clone(), b.clone()).await;
        assert_eq!(r.status, 400, "{mv} {b}: {}", r.body);
        let msg = body(&r)["badRequest"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(msg.contains(want), "{mv} {b}: {msg}");
    }
    // Nova's words in full: JSON Schema's messages with the value as
    // Python writes it (`str` after "Value:", `repr` in the message), the
    // `name` format's own message, and the create's own 400s.
    let mut no_image = server(json!({}));
    no_image["server"]
        .as_object_mut()
        .unwrap()
        .remove("imageRef");
    let exact = [
        ("2.1", json!({}), "'server' is a required property"),
        ("2.1", no_image, "Missing imageRef attribute"),
        (
            "2.1",
            server(json!({"name": " x"})),
            "An invalid 'name' value was provided. The name must be: printable characters. \
             Can not start or end with whitespace.",
        ),
        (
            "2.1",
            server(json!({"name": 5})),
            "Invalid input for field/attribute name. Value: 5. 5 is not of type 'string'",
        ),
        (
            "2.1",
            server(json!({"name": ""})),
            "Invalid input for field/attribute name. Value: . '' is too short",
        ),
        (
            "2.1",
            server(json!({"availability_zone": ""})),
            "Invalid input for field/attribute availability_zone. Value: . '' is too short",
        ),
        (
            "2.1",
            server(json!({"flavorRef": ""})),
            "Invalid input for field/attribute flavorRef. Value: . '' is too short",
        ),
        (
            "2.1",
            server(json!({"flavorRef": "nope"})),
            "Flavor nope could not be found.",
        ),
        (
            "2.1",
            server(json!({"imageRef": null})),
            "Invalid input for field/attribute imageRef. Value: None. None is not valid under \
             any of the given schemas",
        ),
        (
            "2.1",
            server(json!({"imageRef": "cirros"})),
            "Invalid input for field/attribute imageRef. Value: cirros. 'cirros' is not valid \
             under any of the given schemas",
        ),
        (
            "2.1",
            server(json!({"min_count": "abc"})),
            "Invalid input for field/attribute min_count. Value: abc. 'abc' does not match \
             '^[0-9]*$'",
        ),
        (
            "2.1",
            server(json!({"max_count": 0})),
            "Invalid input for field/attribute max_count. Value: 0. 0 is less than the minimum of 1",
        ),
        (
            "2.1",
            server(json!({"key_name": true})),
            "Invalid input for field/attribute key_name. Value: True. True is not of type 'string'",
        ),
        (
            "2.1",
            server(json!({"OS-DCF:diskConfig": "SOMETIMES"})),
            "Invalid input for field/attribute OS-DCF:diskConfig. Value: SOMETIMES. 'SOMETIMES' \
             is not one of ['AUTO', 'MANUAL']",
        ),
        (
            "2.1",
            server(json!({"user_data": "abc"})),
            "Invalid input for field/attribute user_data. Value: abc. 'abc' is not a 'base64'",
        ),
        (
            "2.19",
            server(json!({"description": 5})),
            "Invalid input for field/attribute description. Value: 5. 5 is not of type 'string', \
             'null'",
        ),
        (
            "2.52",
            server(json!({"tags": "a"})),
            "Invalid input for field/attribute tags. Value: a. 'a' is not of type 'array'",
        ),
        (
            "2.90",
            server(json!({"hostname": "h"})),
            "Invalid input for field/attribute hostname. Value: h. 'h' does not match \
             '^[a-zA-Z0-9]+[a-zA-Z0-9-]*[a-zA-Z0-9]+$'",
        ),
        (
            "2.94",
            server(json!({"hostname": "a b"})),
            "Invalid input for field/attribute hostname. Value: a b. 'a b' does not match \
             '^[a-zA-Z0-9-._]*$'",
        ),
    ];
    for (mv, b, want) in exact {
        let r = at(mv, member.clone(), b.clone()).await;
        assert_eq!(r.status, 400, "{mv} {b}: {}", r.body);
        assert_eq!(
            body(&r),
            json!({"badRequest": {"code": 400, "message": want}}),
            "{mv} {b}"
        );
    }
    // The actions' bodies are checked before the server is looked for
    // (as Nova's schema runs first): a server that does not exist will do.
    let action = format!("/v2.1/servers/{}/action", uuid::Uuid::new_v4());
    for (mv, b, want) in [
        (
            "2.1",
            json!({"reboot": {"type": "WARM"}}),
            "Invalid input for field/attribute type. Value: WARM. 'WARM' is not one of ['HARD', \
             'Hard', 'hard', 'SOFT', 'Soft', 'soft']",
        ),
        (
            "2.1",
            json!({"reboot": {}}),
            "Invalid input for field/attribute reboot. Value: {}. 'type' is a required property",
        ),
        (
            "2.1",
            json!({"reboot": {"type": "HARD", "now": true}}),
            "Invalid input for field/attribute reboot. Value: {'now': True, 'type': 'HARD'}. \
             Additional properties are not allowed ('now' was unexpected)",
        ),
        (
            "2.1",
            json!({"rebuild": {"imageRef": 7}}),
            "Invalid input for field/attribute imageRef. Value: 7. 7 is not of type 'string'",
        ),
        (
            "2.1",
            json!({"rebuild": {"imageRef": IMAGE, "name": "x "}}),
            "An invalid 'name' value was provided. The name must be: printable characters. Can \
             not start or end with whitespace.",
        ),
        (
            "2.73",
            json!({"lock": {"locked_reason": 5}}),
            "Invalid input for field/attribute locked_reason. Value: 5. 5 is not of type 'string'",
        ),
        (
            "2.73",
            json!({"lock": "now"}),
            "Invalid input for field/attribute lock. Value: now. 'now' is not of type 'object', \
             'null'",
        ),
    ] {
        let r = common::req(
            region.compute.addr,
            "POST",
            &action,
            &[
                ("x-auth-token", &member),
                ("openstack-api-version", &format!("compute {mv}")),
            ],
            Some(b.clone()),
        )
        .await;
        assert_eq!(
            body(&r),
            json!({"badRequest": {"code": 400, "message": want}}),
            "{mv} {b}"
        );
    }
    let r = region
        .call(&admin, "GET", "/v2.1/servers?all_tenants=1", None)
        .await;
    assert_eq!(body(&r)["servers"], json!([]), "nothing was written");

    // Kept: description, tags, hostname from the name, the given
    // password, user data in `base64`'s 76-column lines.
    let user_data =
        "I2Nsb3VkLWNvbmZpZwpob3N0bmFtZTogdm0tMgpwYWNrYWdlczoKICAtIG5naW54CiAgLSBjdXJs\nCg==";
    let b = server(
        json!({"name": "My Web_Server.01", "description": "front end",
        "tags": ["web", "prod", "web"], "user_data": user_data, "adminPass": "s3cret",
        "security_groups": [{"name": "default"}], "OS-DCF:diskConfig": "AUTO",
        "config_drive": false, "availability_zone": "nova",
        "block_device_mapping_v2": [{"uuid": IMAGE, "boot_index": 0, "source_type": "image",
            "destination_type": "local", "delete_on_termination": true}]}),
    );
    // ... on a flavor with an extra spec, with a scheduler hint.
    let r = region.call(&admin, "POST", "/v2.1/flavors",
        Some(json!({"flavor": {"name": "spec.tiny", "ram": 64, "vcpus": 1, "disk": 1, "id": "77"}}))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = region
        .call(
            &admin,
            "POST",
            "/v2.1/flavors/77/os-extra_specs",
            Some(json!({"extra_specs": {"hw:cpu_policy": "shared"}})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let mut b = b;
    b["server"]["flavorRef"] = json!("77");
    b["os:scheduler_hints"] = json!({"foo": "bar"});
    let r = at("2.100", member.clone(), b).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(body(&r)["server"]["adminPass"], "s3cret");
    let id = body(&r)["server"]["id"].as_str().unwrap().to_owned();
    let check = |s: &Value| {
        assert_eq!(s["description"], "front end", "{s}");
        assert_eq!(s["tags"], json!(["prod", "web"]), "{s}");
        assert_eq!(
            s["OS-EXT-SRV-ATTR:hostname"], "my-web-server-01",
            "2.90: members see it: {s}"
        );
        assert_eq!(
            s["flavor"]["extra_specs"],
            json!({"hw:cpu_policy": "shared"}),
            "2.47: {s}"
        );
        assert_eq!(s["pinned_availability_zone"], "nova", "2.96: {s}");
        assert_eq!(s["scheduler_hints"], json!({"foo": ["bar"]}), "2.100: {s}");
        assert!(
            s["trusted_image_certificates"].is_null()
                && s.get("trusted_image_certificates").is_some(),
            "2.63: {s}"
        );
        assert!(
            s.get("host_status").is_none(),
            "members do not see host_status: {s}"
        );
    };
    region.wait(&id, |s| s["status"] == "ACTIVE").await;
    check(&body(&region.show(&member, &id).await)["server"]);
    let r = region
        .call(&member, "GET", "/v2.1/servers/detail", None)
        .await;
    let listed = body(&r)["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id.as_str())
        .cloned()
        .unwrap();
    check(&listed);
    // A rebuild's imageRef without an image service: an id (Nova's
    // `image_id`), refused before anything changes.
    let r = region
        .call(
            &member,
            "POST",
            &format!("/v2.1/servers/{id}/action"),
            Some(json!({"rebuild": {"imageRef": "cirros"}})),
        )
        .await;
    assert_eq!(
        body(&r),
        json!({"badRequest": {"code": 400, "message":
            "Invalid input for field/attribute imageRef. Value: cirros. 'cirros' is not a 'uuid'"}})
    );
    let s = body(&region.show(&admin, &id).await)["server"].clone();
    assert_eq!(s["host_status"], "UP", "2.16: {s}");
    // Nova's `instance-%08x` of the row id.
    let name = s["OS-EXT-SRV-ATTR:instance_name"]
        .as_str()
        .unwrap_or_default();
    assert!(
        name.len() == 17
            && name.starts_with("instance-")
            && name[9..].bytes().all(|b| b.is_ascii_hexdigit())
            && name != "instance-00000000",
        "{s}"
    );
    // Its host forced down, then disabled, then back (os-services 2.11).
    let host = s["OS-EXT-SRV-ATTR:host"].as_str().unwrap().to_owned();
    let svc = |path: &'static str, extra: Value| {
        let (addr, admin, host) = (region.compute.addr, admin.clone(), host.clone());
        async move {
            let mut b = json!({"host": host, "binary": "nova-compute"});
            b.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            let r = common::req(
                addr,
                "PUT",
                &format!("/v2.1/os-services/{path}"),
                &[
                    ("x-auth-token", &admin),
                    ("openstack-api-version", "compute 2.11"),
                ],
                Some(b),
            )
            .await;
            assert_eq!(r.status, 200, "{path}: {}", r.body);
        }
    };
    svc("force-down", json!({"forced_down": true})).await;
    let s = body(&region.show(&admin, &id).await)["server"].clone();
    assert_eq!(s["host_status"], "DOWN", "forced down: {s}");
    svc("force-down", json!({"forced_down": false})).await;
    svc("disable", json!({})).await;
    let s = body(&region.show(&admin, &id).await)["server"].clone();
    assert_eq!(s["host_status"], "MAINTENANCE", "disabled: {s}");
    svc("enable", json!({})).await;
    let s = body(&region.show(&admin, &id).await)["server"].clone();
    assert_eq!(s["host_status"], "UP", "{s}");
    let tags = region
        .call(&member, "GET", &format!("/v2.1/servers/{id}/tags"), None)
        .await;
    assert_eq!(body(&tags)["tags"], json!(["prod", "web"]), "{}", tags.body);
    // Update: description (null clears), hostname (2.90); a name with
    // outer spaces is refused; the name leaves the hostname alone.
    let put = |mv: &'static str, b: Value| {
        let (addr, member, id) = (region.compute.addr, member.clone(), id.clone());
        async move {
            common::req(
                addr,
                "PUT",
                &format!("/v2.1/servers/{id}"),
                &[
                    ("x-auth-token", &member),
                    ("openstack-api-version", &format!("compute {mv}")),
                ],
                Some(b),
            )
            .await
        }
    };
    let r = put(
        "2.90",
        json!({"server": {"name": "renamed", "description": null, "hostname": "web-01"}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let s = body(&region.show(&member, &id).await)["server"].clone();
    assert_eq!(
        (
            &s["name"],
            &s["description"],
            &s["OS-EXT-SRV-ATTR:hostname"]
        ),
        (&json!("renamed"), &Value::Null, &json!("web-01")),
        "{s}"
    );
    for (mv, b) in [
        ("2.90", json!({"server": {"name": " padded"}})),
        ("2.18", json!({"server": {"description": "x"}})),
        ("2.89", json!({"server": {"hostname": "web-02"}})),
    ] {
        let r = put(mv, b.clone()).await;
        assert_eq!(r.status, 400, "{mv} {b}: {}", r.body);
    }
    // Below 2.19 the description is the name.
    let r = at(
        "2.18",
        member.clone(),
        server(json!({"name": "old-client",
            "flavorRef": format!("http://{}/flavors/1", region.compute.addr)})),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let old = body(&r)["server"]["id"].as_str().unwrap().to_owned();
    let s = body(&region.show(&member, &old).await)["server"].clone();
    assert_eq!(s["description"], "old-client", "{s}");

    // az:host:node and az::node force that node (admins).
    let r = region
        .call(&admin, "GET", "/v2.1/os-hypervisors/detail", None)
        .await;
    let nodes: Vec<(String, String)> = body(&r)["hypervisors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["service"]["host"].as_str().unwrap().to_owned(),
                h["hypervisor_hostname"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let (host, node) = nodes
        .iter()
        .find(|(h, _)| h == "c2-host1")
        .cloned()
        .expect("c2-host1");
    for z in [format!("nova:{host}:{node}"), format!("nova::{node}")] {
        let r = at(
            "2.1",
            admin.clone(),
            server(json!({"availability_zone": z})),
        )
        .await;
        assert_eq!(r.status, 202, "{z}: {}", r.body);
        let id = body(&r)["server"]["id"].as_str().unwrap().to_owned();
        let (s, _) = region.wait(&id, |s| s["status"] == "ACTIVE").await;
        assert_eq!(
            s["OS-EXT-SRV-ATTR:hypervisor_hostname"],
            node.as_str(),
            "{z}"
        );
    }

    // A flavor without a root disk: volume-backed servers only (not built
    // here), except for admins, as Nova's zero_disk_flavor policy.
    let r = region
        .call(&admin, "POST", "/v2.1/flavors",
            Some(json!({"flavor": {"name": "zero.disk", "ram": 64, "vcpus": 1, "disk": 0, "id": "0d"}})))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = at("2.1", member.clone(), server(json!({"flavorRef": "0d"}))).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(
        body(&r)["forbidden"]["message"],
        "Only volume-backed servers are allowed for flavors with zero disk."
    );
    let r = at("2.1", admin.clone(), server(json!({"flavorRef": "0d"}))).await;
    assert_eq!(r.status, 202, "{}", r.body);

    // return_reservation_id: the reservation, not a server.
    let r = at(
        "2.1",
        member.clone(),
        server(json!({"name": "pair", "min_count": 2, "return_reservation_id": true})),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let rid = body(&r)["reservation_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        rid.starts_with("r-") && body(&r).get("server").is_none(),
        "{}",
        r.body
    );

    // min_count: as many as the quota leaves room for, when that is at
    // least min_count; fewer is Nova's 403.
    let s = body(&region.show(&member, &id).await)["server"].clone();
    let project = s["tenant_id"].as_str().unwrap().to_owned();
    let count = || async {
        let r = region.call(&member, "GET", "/v2.1/servers", None).await;
        body(&r)["servers"].as_array().unwrap().len() as i64
    };
    let now = count().await;
    let r = region
        .call(
            &admin,
            "PUT",
            &format!("/v2.1/os-quota-sets/{project}"),
            Some(json!({"quota_set": {"instances": now + 2}})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = at(
        "2.1",
        member.clone(),
        server(json!({"name": "many", "min_count": 3, "max_count": 5})),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(count().await, now);
    let r = at(
        "2.1",
        member.clone(),
        server(json!({"name": "many", "min_count": 1, "max_count": 5})),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(count().await, now + 2, "two of five fit");
    region.stop().await;
}
