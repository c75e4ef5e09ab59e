//! A cell whose database is down: server list, detail and show at 2.68
//! (the cell's servers left out; a show of one of them is the cell's
//! error) and at 2.69 (partial records from the API database), paging and
//! markers while it is down, `list_records_by_skipping_down_cells =
//! false`, the bounded wait on a cell that stops answering, and recovery.
//!
//! Two cells and cell0; the servers are written the way the
//! super-conductor lands them (build request, request spec and mapping in
//! the API database, then the instance row in its cell and the mapping
//! pointed at the cell), with fixed creation times, so every body is known.
//! Cell 2 is taken down two ways: on PostgreSQL behind a TCP proxy that
//! refuses (a stopped server) or swallows (a hung host) connections, and on
//! SQLite by pointing its mapping at a file that cannot be opened.

use std::time::{Duration, Instant};

use api_super::compute_api::db::{BuildInstance, ComputeDb, GroupJoin, RequestSpec};
use api_super::identity::policy::Policy;
use api_super::scheduler::placement::HttpPlacement;
use api_super::{ComputeConfig, ComputeDeps, ComputeRunning};
use cell_mapping::cells::NewCell;
use cell_mapping::db::{InstanceFlavor, NewCellInstance, NewServerGroup};
use cell_mapping::{ApiDb, CellDb, CellMapping};
use chrono::{DateTime, TimeZone, Utc};
use serde_json::{json, Value};
use testkit::proxy::{Mode, TcpProxy};

use crate::common::{self, json as body, Env, ADMIN_PW, MEMBER_PW};
use crate::compute::IMAGE;

/// The Compute API's cell read timeout in these tests.
const TIMEOUT_MS: u64 = 1500;

/// One server of the fixture.
struct Srv {
    id: String,
    /// 0: cell1, 1: cell2 (the one that goes down), `None`: a build
    /// request not scheduled.
    cell: Option<usize>,
    project: String,
    created: DateTime<Utc>,
    queued_for_delete: bool,
}

/// A Compute API over two cells holding known servers.
struct Fixture {
    env: Env,
    compute: ComputeRunning,
    api_url: String,
    api: ApiDb,
    cells: Vec<CellMapping>,
    admin: String,
    member: String,
    member_user: String,
    group: String,
    servers: Vec<Srv>,
    _files: Vec<testkit::SqliteDb>,
}

fn m1_tiny() -> InstanceFlavor {
    InstanceFlavor {
        flavorid: "1".into(),
        name: "m1.tiny".into(),
        vcpus: 1,
        memory_mb: 512,
        root_gb: 1,
        ephemeral_gb: 0,
        swap: 0,
    }
}

async fn start_compute(env: &Env, api_url: &str, skip_down_cells: bool) -> ComputeRunning {
    let cfg = ComputeConfig {
        listen: "127.0.0.1:0".into(),
        cell_cache_refresh_ms: 100,
        cell_timeout_ms: TIMEOUT_MS,
        cell_down_retry_ms: 200,
        list_records_by_skipping_down_cells: skip_down_cells,
        // The fixture writes an unowned, never-scheduled build request
        // dated 2024 that must stay one: no healing here.
        build_heal: api_super::conductor::heal::BuildHealConfig {
            interval_secs: 0,
            ..Default::default()
        },
        ..Default::default()
    };
    let deps = ComputeDeps {
        api_database: api_url.to_owned(),
        auth: env.running.identity.validator.clone(),
        policy: std::sync::Arc::new(Policy::defaults()),
        // Nothing is scheduled here.
        placement: std::sync::Arc::new(HttpPlacement::new("http://127.0.0.1:9", "admin").unwrap()),
        images: None,
    };
    api_super::serve_compute(cfg, deps)
        .await
        .expect("compute API")
}

impl Fixture {
    /// Identity, an API database with cell0 and the two cells at
    /// `cell_urls`, the servers, and the Compute API.
    async fn start(name: &str, cell_urls: [&str; 2]) -> Fixture {
        let env = common::start(&format!("{name}_id"), |_| {}).await;
        let api_file = testkit::sqlite(&format!("{name}_api"));
        let cell0_file = testkit::sqlite(&format!("{name}_cell0"));
        let api_url = api_file.url.clone();
        migrations::migrate(migrations::Kind::Api, &api_url)
            .await
            .expect("api migrations");
        let api = ApiDb::open(&api_url).await.expect("api db");
        cell_mapping::cells::map_cell0(&api, &cell0_file.url)
            .await
            .expect("cell0");
        let mut cells = Vec::new();
        for (i, url) in cell_urls.iter().enumerate() {
            let (cell, _) = cell_mapping::cells::create_cell(
                &api,
                &NewCell {
                    name: Some(format!("cell{}", i + 1)),
                    transport_url: format!("inproc://{name}_c{}", i + 1),
                    database_connection: (*url).to_owned(),
                    disabled: false,
                },
            )
            .await
            .expect("cell");
            cells.push(cell);
        }
        api_super::seed_flavors(&api_url).await.expect("flavors");
        let (admin, _) = common::token(env.addr(), "admin", ADMIN_PW, Some("admin")).await;
        let (member, tok) = common::token(env.addr(), "demo", MEMBER_PW, Some("demo")).await;
        let demo = tok["token"]["project"]["id"].as_str().unwrap().to_owned();
        let member_user = tok["token"]["user"]["id"].as_str().unwrap().to_owned();

        let group = api
            .server_group_create(
                &NewServerGroup {
                    name: "g".into(),
                    user_id: member_user.clone(),
                    project_id: demo.clone(),
                    policy: "anti-affinity".into(),
                    rules: None,
                },
                None,
            )
            .await
            .unwrap()
            .unwrap();
        let group_id = api.server_group(&group).await.unwrap().unwrap().id;

        let db = ComputeDb::new(api.clone());
        let cell_dbs = [
            CellDb::open(cell_urls[0]).await.unwrap(),
            CellDb::open(cell_urls[1]).await.unwrap(),
        ];
        let t0 = Utc.with_ymd_and_hms(2024, 5, 1, 10, 0, 0).unwrap();
        // (cell, other project, requested zone, in the group, queued for delete)
        type Plan = (Option<usize>, bool, Option<&'static str>, bool, bool);
        let plan: [Plan; 8] = [
            (Some(0), false, None, false, false),
            (Some(1), false, Some("az-b"), true, false),
            (Some(0), false, None, false, false),
            (Some(1), false, None, false, false),
            (Some(1), true, None, false, false),
            (Some(1), false, None, false, true),
            (Some(0), true, None, false, false),
            (None, false, None, false, false),
        ];
        let mut servers = Vec::new();
        for (n, (cell, other, zone, in_group, queued)) in plan.into_iter().enumerate() {
            let id = uuid::Uuid::new_v4().to_string();
            let (project, user) = if other {
                ("other-project".to_owned(), "other-user".to_owned())
            } else {
                (demo.clone(), member_user.clone())
            };
            let created = t0 + chrono::Duration::seconds(n as i64 + 1);
            let b = BuildInstance {
                uuid: id.clone(),
                project_id: project.clone(),
                user_id: user.clone(),
                display_name: format!("s{}", n + 1),
                flavor: m1_tiny(),
                image_ref: IMAGE.into(),
                availability_zone: zone.map(str::to_owned),
                created_at: created,
                reservation_id: format!("r-{n}"),
                launch_index: 0,
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
            };
            let spec = RequestSpec {
                instance_uuid: id.clone(),
                instance_uuids: vec![id.clone()],
                project_id: project.clone(),
                user_id: user.clone(),
                flavor: m1_tiny(),
                image_ref: IMAGE.into(),
                availability_zone: zone.map(str::to_owned),
                force_host: None,
                force_node: None,
                scheduler_hints: Default::default(),
                requested_host: None,
                requested_node: None,
                request_id: format!("req-{n}"),
                global_request_id: format!("req-g-{n}"),
                key_name: None,
                in_group: Some(in_group),
                image_properties: Default::default(),
                flavor_extra_specs: None,
                // The fourth server's image had properties (shown from 2.98).
                recorded_image_properties: if n == 3 {
                    [("os_distro".to_owned(), "cirros".to_owned())].into()
                } else {
                    Default::default()
                },
            };
            let join = in_group.then(|| GroupJoin {
                id: group_id,
                uuid: group.clone(),
                limit: -1,
            });
            db.create_builds(&[(b, spec)], None, join.as_ref())
                .await
                .unwrap();
            if let Some(c) = cell {
                cell_dbs[c]
                    .create_api_instance(&NewCellInstance {
                        uuid: id.clone(),
                        project_id: project.clone(),
                        user_id: user,
                        display_name: Some(format!("s{}", n + 1)),
                        flavor: m1_tiny(),
                        image_ref: IMAGE.into(),
                        host: Some(format!("c{}-host1", c + 1)),
                        node: Some(format!("c{}-host1", c + 1)),
                        availability_zone: zone.map(str::to_owned),
                        created_at: created,
                        request_id: format!("req-{n}"),
                        global_request_id: format!("req-g-{n}"),
                        reservation_id: format!("r-{n}"),
                        launch_index: 0,
                        error: None,
                        scheduled_from: None,
                        metadata: Vec::new(),
                        user_data: None,
                        description: None,
                        hostname: None,
                        tags: Vec::new(),
                        key_name: None,
                        config_drive: false,
                        key_data: None,
                        access_ip_v4: None,
                        access_ip_v6: None,
                        trusted_certs: None,
                    })
                    .await
                    .unwrap();
                assert!(db.finish_build(&id, cells[c].id).await.unwrap().is_some());
            }
            if queued {
                db.queue_for_delete(&id).await.unwrap();
            }
            servers.push(Srv {
                id,
                cell,
                project,
                created,
                queued_for_delete: queued,
            });
        }
        // Each cell's compute service on its host, mapped in the API
        // database as discovery would, and one more host mapped to cell 2
        // whose service has not registered yet.
        for (c, d) in cell_dbs.iter().enumerate() {
            let host = format!("c{}-host1", c + 1);
            let mut hosts = vec![host.clone()];
            if c == 1 {
                hosts.push("c2-host2".to_owned());
            }
            api.map_hosts(cells[c].id, &hosts).await.unwrap();
            let insert = "INSERT INTO services (uuid, host, \"binary\", topic, last_seen_up) \
                          VALUES ($1, $2, 'nova-compute', 'compute', $3)";
            let uuid = uuid::Uuid::new_v4().to_string();
            // The same statement on either backend's pool.
            macro_rules! insert_on {
                ($p:expr) => {
                    sqlx::query(insert)
                        .bind(&uuid)
                        .bind(&host)
                        .bind(Utc::now())
                        .execute($p)
                        .await
                        .map(drop)
                };
            }
            match d.pool() {
                cell_mapping::db::Pool::Postgres(p) => insert_on!(p),
                cell_mapping::db::Pool::Sqlite(p) => insert_on!(p),
            }
            .unwrap();
        }
        for d in cell_dbs {
            d.close().await;
        }
        let compute = start_compute(&env, &api_url, true).await;
        Fixture {
            env,
            compute,
            api_url,
            api,
            cells,
            admin,
            member,
            member_user,
            group,
            servers,
            _files: vec![api_file, cell0_file],
        }
    }

    fn srv(&self, id: &str) -> &Srv {
        self.servers
            .iter()
            .find(|s| s.id == id)
            .unwrap_or_else(|| panic!("{id} is not a fixture server"))
    }

    /// Server `n` (1-based, as its name).
    fn id(&self, n: usize) -> &str {
        &self.servers[n - 1].id
    }

    fn base(&self) -> String {
        format!("http://{}", self.compute.addr)
    }
}

async fn get_on(
    api: &ComputeRunning,
    token: &str,
    path: &str,
    version: &str,
) -> testkit::http::Response {
    common::req(
        api.addr,
        "GET",
        path,
        &[
            ("x-auth-token", token),
            ("openstack-api-version", &format!("compute {version}")),
        ],
        None,
    )
    .await
}

/// `GET path` at `version`: status 200 and the body.
async fn ok(f: &Fixture, token: &str, path: &str, version: &str) -> Value {
    let r = get_on(&f.compute, token, path, version).await;
    assert_eq!(r.status, 200, "{version} {path}: {}", r.body);
    body(&r)
}

fn ids(v: &Value) -> Vec<String> {
    v["servers"]
        .as_array()
        .unwrap_or_else(|| panic!("servers in {v}"))
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect()
}

/// The list `before` (taken while every cell answered) as it must read
/// while cell 2 is down: cell 2's servers left out, or (`partial`:
/// `Some(detail)`) the live ones replaced in place by their partial record.
fn while_down(f: &Fixture, before: &Value, partial: Option<bool>) -> Value {
    let servers: Vec<Value> = before["servers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| {
            let s = f.srv(e["id"].as_str().unwrap());
            if s.cell != Some(1) {
                return Some(e.clone());
            }
            let detail = partial?;
            if s.queued_for_delete {
                return None;
            }
            let mut p = json!({
                "id": s.id,
                "status": "UNKNOWN",
                "links": [
                    {"rel": "self", "href": format!("{}/v2.1/servers/{}", f.base(), s.id)},
                    {"rel": "bookmark", "href": format!("{}/servers/{}", f.base(), s.id)},
                ],
            });
            if detail {
                p["tenant_id"] = json!(s.project);
                p["created"] = json!(s.created.format("%Y-%m-%dT%H:%M:%SZ").to_string());
            }
            assert_eq!(p["links"], e["links"], "same links as the full record");
            Some(p)
        })
        .collect();
    json!({ "servers": servers })
}

/// What every list and show answers before the outage, by request.
struct Before {
    index_268: Value,
    detail_268: Value,
    index_269: Value,
    detail_269: Value,
    all_tenants_269: Value,
    show_s1_268: Value,
    services_269: Value,
}

async fn before_outage(f: &Fixture) -> Before {
    let b = Before {
        index_268: ok(f, &f.member, "/v2.1/servers", "2.68").await,
        detail_268: ok(f, &f.member, "/v2.1/servers/detail", "2.68").await,
        index_269: ok(f, &f.member, "/v2.1/servers", "2.69").await,
        detail_269: ok(f, &f.member, "/v2.1/servers/detail", "2.69").await,
        all_tenants_269: ok(f, &f.admin, "/v2.1/servers/detail?all_tenants=1", "2.69").await,
        show_s1_268: ok(f, &f.member, &format!("/v2.1/servers/{}", f.id(1)), "2.68").await,
        services_269: ok(f, &f.admin, "/v2.1/os-services", "2.69").await,
    };
    let hosts: Vec<&str> = b.services_269["services"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts, ["c1-host1", "c2-host1"], "{}", b.services_269);
    // Newest first: the build request, then s6 … s1 of the member's
    // project (s5 and s7 are another project's); all full records.
    let mine: Vec<String> = [8, 6, 4, 3, 2, 1]
        .iter()
        .map(|n| f.id(*n).to_owned())
        .collect();
    for v in [&b.index_268, &b.detail_268, &b.index_269, &b.detail_269] {
        assert_eq!(ids(v), mine, "{v}");
    }
    let all: Vec<String> = (1..=8).rev().map(|n| f.id(n).to_owned()).collect();
    assert_eq!(ids(&b.all_tenants_269), all);
    assert_eq!(b.detail_269["servers"][4]["name"], "s2");
    assert_eq!(b.detail_269["servers"][4]["status"], "BUILD");
    b
}

/// Everything a down cell 2 changes, and what it must not.
async fn assert_views_while_down(f: &Fixture, b: &Before) {
    let cell2 = f.cells[1].uuid.to_string();

    // Before 2.69: cell 2's servers are left out, the rest is unchanged.
    let started = Instant::now();
    let v = ok(f, &f.member, "/v2.1/servers", "2.68").await;
    assert_eq!(v, while_down(f, &b.index_268, None));
    assert!(
        started.elapsed() < Duration::from_millis(TIMEOUT_MS + 3000),
        "a list waits for a down cell at most the cell timeout: {:?}",
        started.elapsed()
    );
    // The cell is known down now: no more waiting on it.
    let started = Instant::now();
    let v = ok(f, &f.member, "/v2.1/servers/detail", "2.68").await;
    assert!(
        started.elapsed() < Duration::from_millis(TIMEOUT_MS),
        "a cell known to be down is skipped at once: {:?}",
        started.elapsed()
    );
    assert_eq!(v, while_down(f, &b.detail_268, None));

    // Services before 2.69: cell 2's are left out. From 2.69: each compute
    // host mapped to cell 2 is a partial record (first, as upstream), and
    // none where the filters exclude it.
    let cell1_service = b.services_269["services"][0].clone();
    let v = ok(f, &f.admin, "/v2.1/os-services", "2.68").await;
    assert_eq!(v["services"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["services"][0]["host"], "c1-host1", "{v}");
    let v = ok(f, &f.admin, "/v2.1/os-services", "2.69").await;
    let unknown = |host: &str| json!({"binary": "nova-compute", "host": host, "status": "UNKNOWN"});
    assert_eq!(
        v["services"],
        json!([unknown("c2-host1"), unknown("c2-host2"), cell1_service]),
        "{v}"
    );
    let v = ok(f, &f.admin, "/v2.1/os-services?host=c2-host2", "2.69").await;
    assert_eq!(v["services"], json!([unknown("c2-host2")]), "{v}");
    let v = ok(
        f,
        &f.admin,
        "/v2.1/os-services?binary=nova-conductor",
        "2.69",
    )
    .await;
    assert_eq!(v["services"], json!([]), "{v}");

    // From 2.69: partial records in their place (newest first).
    let v = ok(f, &f.member, "/v2.1/servers", "2.69").await;
    assert_eq!(v, while_down(f, &b.index_269, Some(false)));
    let v = ok(f, &f.member, "/v2.1/servers/detail", "2.69").await;
    assert_eq!(v, while_down(f, &b.detail_269, Some(true)));
    let order: Vec<String> = [8, 4, 3, 2, 1]
        .iter()
        .map(|n| f.id(*n).to_owned())
        .collect();
    assert_eq!(ids(&v), order, "s6 is being deleted: no partial record");
    // all_tenants is the one filter that keeps them (every project's).
    let v = ok(f, &f.admin, "/v2.1/servers/detail?all_tenants=1", "2.69").await;
    assert_eq!(v, while_down(f, &b.all_tenants_269, Some(true)));
    assert!(ids(&v).contains(&f.id(5).to_owned()));
    // Paging, sorting or filtering: the down cell is left out, as upstream.
    let v = ok(f, &f.member, "/v2.1/servers/detail?limit=10", "2.69").await;
    assert_eq!(v, while_down(f, &b.detail_269, None));
    let v = ok(f, &f.member, "/v2.1/servers?name=s", "2.69").await;
    assert_eq!(v, while_down(f, &b.index_269, None));
    // A filter a member may not use is dropped, so it does not count.
    let v = ok(f, &f.member, "/v2.1/servers?host=c1-host1", "2.69").await;
    assert_eq!(v, while_down(f, &b.index_269, Some(false)));

    // A marker in the down cell keeps its place (the order's values are
    // the mapping's); the page leaves the down cell out (paging).
    let v = ok(f, &f.member, "/v2.1/servers?limit=2", "2.69").await;
    assert_eq!(ids(&v), [f.id(8), f.id(3)], "limit: no partial records");
    let v = ok(
        f,
        &f.member,
        &format!("/v2.1/servers?marker={}", f.id(4)),
        "2.69",
    )
    .await;
    assert_eq!(ids(&v), [f.id(3), f.id(1)], "marker in the down cell");
    let v = ok(
        f,
        &f.member,
        &format!(
            "/v2.1/servers?marker={}&sort_key=created_at&sort_dir=asc",
            f.id(2)
        ),
        "2.68",
    )
    .await;
    assert_eq!(ids(&v), [f.id(3), f.id(8)], "ascending from a down marker");
    // A marker whose place depends on values only its cell has.
    let r = get_on(
        &f.compute,
        &f.member,
        &format!("/v2.1/servers?marker={}&sort_key=display_name", f.id(4)),
        "2.69",
    )
    .await;
    assert_eq!(r.status, 500, "{}", r.body);
    let msg = body(&r)["computeFault"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(msg.contains(&cell2) && msg.contains(f.id(4)), "{msg}");

    // Show before 2.69: the cell's error, saying which cell.
    for version in ["2.1", "2.68"] {
        let r = get_on(
            &f.compute,
            &f.member,
            &format!("/v2.1/servers/{}", f.id(2)),
            version,
        )
        .await;
        assert_eq!(r.status, 500, "{}", r.body);
        assert_eq!(
            body(&r),
            json!({"computeFault": {"code": 500, "message": format!(
                "Cell {cell2} is not responding, hence the information of its servers is not \
                 available; try again later.")}})
        );
    }
    // A server of the cell that answers is unchanged.
    let v = ok(f, &f.member, &format!("/v2.1/servers/{}", f.id(1)), "2.68").await;
    assert_eq!(v, b.show_s1_268);

    // Show from 2.69: the partial record of the mapping and request spec.
    let partial = |n: usize, zone: &str| {
        let s = &f.servers[n - 1];
        json!({"server": {
            "id": s.id,
            "status": "UNKNOWN",
            "tenant_id": s.project,
            "created": s.created.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
            "links": [
                {"rel": "self", "href": format!("{}/v2.1/servers/{}", f.base(), s.id)},
                {"rel": "bookmark", "href": format!("{}/servers/{}", f.base(), s.id)},
            ],
            "image": {"id": IMAGE, "links": [
                {"rel": "bookmark", "href": format!("{}/images/{IMAGE}", f.base())}]},
            "flavor": {"vcpus": 1, "ram": 512, "disk": 1, "ephemeral": 0, "swap": 0,
                "original_name": "m1.tiny", "extra_specs": {}},
            "OS-EXT-AZ:availability_zone": zone,
            "OS-EXT-STS:power_state": 0,
            "user_id": f.member_user,
        }})
    };
    let show = |n: usize, version: &'static str| {
        let path = format!("/v2.1/servers/{}", f.id(n));
        async move { ok(f, &f.member, &path, version).await }
    };
    assert_eq!(show(2, "2.69").await, partial(2, "az-b"));
    assert_eq!(show(4, "2.69").await, partial(4, "UNKNOWN"));
    // 2.71: and its server groups.
    let mut p = partial(2, "az-b");
    p["server"]["server_groups"] = json!([f.group]);
    assert_eq!(show(2, "2.71").await, p);
    let mut p = partial(4, "UNKNOWN");
    p["server"]["server_groups"] = json!([]);
    assert_eq!(show(4, "2.97").await, p);
    // 2.98: and the image's properties its request spec recorded.
    p["server"]["image"]["properties"] = json!({"os_distro": "cirros"});
    assert_eq!(show(4, "2.98").await, p);
    assert_eq!(show(4, "latest").await, p);
    let mut p = partial(2, "az-b");
    p["server"]["server_groups"] = json!([f.group]);
    p["server"]["image"]["properties"] = json!({});
    assert_eq!(show(2, "latest").await, p);
    // Being deleted: not found; another project's: not found.
    for n in [5, 6] {
        let r = get_on(
            &f.compute,
            &f.member,
            &format!("/v2.1/servers/{}", f.id(n)),
            "2.69",
        )
        .await;
        assert_eq!(r.status, 404, "s{n}: {}", r.body);
    }

    // `list_records_by_skipping_down_cells = false`: a list that cannot
    // show partial records fails, naming the cell.
    let strict = start_compute(&f.env, &f.api_url, false).await;
    for (path, version) in [
        ("/v2.1/servers", "2.68"),
        ("/v2.1/servers/detail?limit=5", "2.69"),
    ] {
        let r = get_on(&strict, &f.member, path, version).await;
        assert_eq!(r.status, 500, "{path}: {}", r.body);
        let msg = body(&r)["computeFault"]["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(msg.contains(&cell2), "{msg}");
    }
    let r = get_on(&strict, &f.member, "/v2.1/servers", "2.69").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        ids(&body(&r)),
        ids(&while_down(f, &b.index_269, Some(false)))
    );
}

/// Waits until the member's 2.69 list equals `before` again.
async fn wait_until_back(f: &Fixture, b: &Before) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let v = ok(f, &f.member, "/v2.1/servers/detail", "2.69").await;
        if v == b.detail_269 {
            break;
        }
        assert!(Instant::now() < deadline, "cell 2 never came back: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let v = ok(f, &f.member, &format!("/v2.1/servers/{}", f.id(1)), "2.68").await;
    assert_eq!(v, b.show_s1_268);
}

/// `host:port` of a `postgres://user@host:port/db` URL.
fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest).to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn down_cell_on_postgresql_is_skipped_then_partial_then_back() {
    let Some(c1) = testkit::postgres("down_cell_pg_c1").await else {
        return;
    };
    let Some(c2) = testkit::postgres("down_cell_pg_c2").await else {
        return;
    };
    let server = host_port(&c2.url);
    let target = tokio::net::lookup_host(&server)
        .await
        .unwrap()
        .next()
        .unwrap();
    let proxy = TcpProxy::start(target).await;
    let c2_url = c2.url.replacen(&server, &proxy.addr().to_string(), 1);
    let f = Fixture::start("down_cell_pg", [&c1.url, &c2_url]).await;
    let b = before_outage(&f).await;

    // A stopped server: refused, open connections closed.
    proxy.set(Mode::Refuse);
    assert_views_while_down(&f, &b).await;
    proxy.set(Mode::Forward);
    wait_until_back(&f, &b).await;

    // A host that stops answering: the list waits the cell timeout once,
    // then skips the cell at once while it stays silent.
    proxy.set(Mode::Hang);
    let started = Instant::now();
    let v = ok(&f, &f.member, "/v2.1/servers", "2.68").await;
    let waited = started.elapsed();
    assert_eq!(v, while_down(&f, &b.index_268, None));
    assert!(
        waited >= Duration::from_millis(TIMEOUT_MS - 100)
            && waited < Duration::from_millis(TIMEOUT_MS + 3000),
        "waited {waited:?}"
    );
    let started = Instant::now();
    let v = ok(&f, &f.member, "/v2.1/servers/detail", "2.69").await;
    assert!(
        started.elapsed() < Duration::from_millis(TIMEOUT_MS),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(v, while_down(&f, &b.detail_269, Some(true)));
    // Refuse closes the frozen connections; then back.
    proxy.set(Mode::Refuse);
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.set(Mode::Forward);
    wait_until_back(&f, &b).await;

    // The loadtest's stop-database: the database refuses connections and
    // its sessions are ended.
    let admin = testkit::pg_admin_url();
    let mut pg = <sqlx::PgConnection as sqlx::Connection>::connect(&admin)
        .await
        .unwrap();
    let allow = |on: bool| format!("ALTER DATABASE {} ALLOW_CONNECTIONS {on}", c2.name);
    sqlx::query(&allow(false)).execute(&mut pg).await.unwrap();
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
        .bind(&c2.name)
        .execute(&mut pg)
        .await
        .unwrap();
    let started = Instant::now();
    let v = ok(&f, &f.member, "/v2.1/servers", "2.68").await;
    assert!(
        started.elapsed() < Duration::from_millis(TIMEOUT_MS + 3000),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(v, while_down(&f, &b.index_268, None));
    let v = ok(&f, &f.member, "/v2.1/servers/detail", "2.69").await;
    assert_eq!(v, while_down(&f, &b.detail_269, Some(true)));
    sqlx::query(&allow(true)).execute(&mut pg).await.unwrap();
    wait_until_back(&f, &b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn down_cell_on_sqlite_is_skipped_then_partial_then_back() {
    let c1 = testkit::sqlite("down_cell_sqlite_c1");
    let c2 = testkit::sqlite("down_cell_sqlite_c2");
    let f = Fixture::start("down_cell_sqlite", [&c1.url, &c2.url]).await;
    let b = before_outage(&f).await;

    // The mapping points at a file that cannot be opened (its directory
    // does not exist): the cell's database is unreachable.
    let mut cell = f.cells[1].clone();
    cell.database_connection = format!("sqlite://{}/gone/db.sqlite?mode=rw", c2.dir.display());
    f.api.update_cell(&cell).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while ids(&ok(&f, &f.member, "/v2.1/servers", "2.68").await).contains(&f.id(2).to_owned()) {
        assert!(Instant::now() < deadline, "the cache never saw the new URL");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_views_while_down(&f, &b).await;

    f.api.update_cell(&f.cells[1]).await.unwrap();
    wait_until_back(&f, &b).await;
}
