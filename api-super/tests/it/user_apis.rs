//! The user-facing Compute APIs: key pairs, flavor management (extra
//! specs, access), quotas and limits, with their enforcement on server
//! create and server group create (server groups and their members). A
//! Compute API with identity, placement and cell0 but no compute hosts
//! (builds land in cell0 in ERROR, which still counts against
//! quotas, as upstream), on SQLite or on a PostgreSQL API database. Two
//! empty cells are mapped too (the usage test writes instances there).

use std::sync::Arc;

use api_super::identity::policy::Policy;
use api_super::identity::BootstrapSpec;
use api_super::scheduler::placement::HttpPlacement;
use api_super::{ComputeConfig, ComputeDeps, ComputeRunning};
use cell_mapping::ApiDb;
use serde_json::{json, Value};

use crate::common::{self, json as body, Env, ADMIN_PW, MEMBER_PW};

const IMAGE: &str = "155d900f-4e14-4e4c-a73d-069cbf4541e6";
/// Made with `ssh-keygen`; `ssh-keygen -l -E md5` gives [`RSA_FP`].
pub(crate) const RSA: &str = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQDCY1fb/jaZKOc+i/NOz0mLhm2/OVBBVQ7fAoPW0TCC/BSYNTISIZ7G5FlzCcxZ0kSueg/kPPDOxlmXGwuSZzP4Ss1zNPNXpBRJZ9jZeEOibGkECxPYO4C+8FZggZQUvA0ftKznBWVOB38qLIItUSy06H5y9KdHXzWgZqs+CXaC6Q== test@example";
const RSA_FP: &str = "c1:61:81:b2:0e:29:e4:ce:3d:a3:d3:0b:5a:c2:37:c9";

struct Stack {
    env: Env,
    compute: ComputeRunning,
    placement: placement::Running,
    api: ApiDb,
    admin: String,
    member: String,
    other: String,
    member_project: String,
    other_project: String,
    cell_urls: Vec<String>,
    _dbs: Vec<testkit::SqliteDb>,
    _pg: Option<testkit::PgDb>,
}

impl Stack {
    /// `pg`: the API database on PostgreSQL (`None`: SQLite).
    async fn start(name: &str, pg: Option<testkit::PgDb>) -> Stack {
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
        let api_url = match &pg {
            Some(p) => p.url.clone(),
            None => sqlite("api"),
        };
        let cell0_url = sqlite("cell0");
        let placement_url = sqlite("placement");
        migrations::migrate(migrations::Kind::Api, &api_url)
            .await
            .expect("api migrations");
        let api = ApiDb::open(&api_url).await.expect("api db");
        cell_mapping::cells::map_cell0(&api, &cell0_url)
            .await
            .expect("cell0");
        let mut cell_urls = Vec::new();
        for c in 1..=2 {
            let url = sqlite(&format!("c{c}"));
            migrations::migrate(migrations::Kind::Cell, &url)
                .await
                .expect("cell migrations");
            cell_mapping::cells::create_cell(
                &api,
                &cell_mapping::cells::NewCell {
                    name: Some(format!("cell{c}")),
                    transport_url: format!("inproc://{name}_c{c}"),
                    database_connection: url.clone(),
                    disabled: false,
                },
            )
            .await
            .expect("cell");
            cell_urls.push(url);
        }
        let mut pcfg = placement::PlacementConfig {
            listen: "127.0.0.1:0".into(),
            ..Default::default()
        };
        pcfg.database.connection = placement_url;
        let placement = placement::serve(&pcfg, None).await.expect("placement");
        let purl = format!("http://{}", placement.addr);
        api_super::seed_flavors(&api_url).await.expect("flavors");
        let cfg = ComputeConfig {
            listen: "127.0.0.1:0".into(),
            ..Default::default()
        };
        let deps = ComputeDeps {
            api_database: api_url,
            auth: env.running.identity.validator.clone(),
            policy: Arc::new(Policy::defaults()),
            placement: Arc::new(HttpPlacement::new(&purl, "admin").unwrap()),
            images: None,
        };
        let compute = api_super::serve_compute(cfg, deps)
            .await
            .expect("compute API");
        let (admin, _) = common::token(env.addr(), "admin", ADMIN_PW, Some("admin")).await;
        let (member, m) = common::token(env.addr(), "demo", MEMBER_PW, Some("demo")).await;
        let (other, o) = common::token(env.addr(), "other", MEMBER_PW, Some("other")).await;
        Stack {
            env,
            compute,
            placement,
            api,
            admin,
            member,
            other,
            member_project: m["token"]["project"]["id"].as_str().unwrap().to_owned(),
            other_project: o["token"]["project"]["id"].as_str().unwrap().to_owned(),
            cell_urls,
            _dbs: dbs,
            _pg: pg,
        }
    }

    async fn call_at(
        &self,
        mv: &str,
        token: &str,
        method: &str,
        path: &str,
        b: Option<Value>,
    ) -> testkit::http::Response {
        let version = format!("compute {mv}");
        common::req(
            self.compute.addr,
            method,
            path,
            &[("x-auth-token", token), ("openstack-api-version", &version)],
            b,
        )
        .await
    }

    async fn call(
        &self,
        token: &str,
        method: &str,
        path: &str,
        b: Option<Value>,
    ) -> testkit::http::Response {
        self.call_at("latest", token, method, path, b).await
    }

    fn boot_body(name: &str, flavor: &str) -> Value {
        json!({"server": {"name": name, "flavorRef": flavor, "imageRef": IMAGE, "networks": "none"}})
    }

    async fn stop(self) {
        self.compute.shutdown();
        self.placement.task.abort();
        self.api.close().await;
        drop(self.env);
    }
}

/// Asserts a Nova error body: `{"<fault>": {"code": N, "message": ...}}`.
fn fault(r: &testkit::http::Response, status: u16, name: &str, contains: &str) {
    assert_eq!(r.status, status, "{}", r.body);
    let v = body(r);
    assert_eq!(v[name]["code"], status, "{}", r.body);
    let msg = v[name]["message"].as_str().unwrap_or("");
    assert!(msg.contains(contains), "{contains:?} not in {msg:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keypairs_import_generate_list_show_delete() {
    let s = Stack::start("ua_keypairs", None).await;
    // Import (2.2+: 201 and `type`).
    let r = s
        .call_at(
            "2.2",
            &s.member,
            "POST",
            "/v2.1/os-keypairs",
            Some(json!({"keypair": {"name": "k1", "public_key": RSA}})),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let k = body(&r)["keypair"].clone();
    assert_eq!(k["fingerprint"], RSA_FP);
    assert_eq!(k["type"], "ssh");
    assert_eq!(k["public_key"], RSA);
    assert!(k.get("private_key").is_none());
    // Duplicate: 409; bad key / bad name / bad type: 400.
    let r = s
        .call(
            &s.member,
            "POST",
            "/v2.1/os-keypairs",
            Some(json!({"keypair": {"name": "k1", "public_key": RSA}})),
        )
        .await;
    fault(
        &r,
        409,
        "conflictingRequest",
        "Key pair 'k1' already exists.",
    );
    let r = s
        .call(
            &s.member,
            "POST",
            "/v2.1/os-keypairs",
            Some(json!({"keypair": {"name": "k2", "public_key": "ssh-rsa bm90IGEga2V5"}})),
        )
        .await;
    fault(&r, 400, "badRequest", "failed to generate fingerprint");
    let r = s
        .call_at(
            "2.91",
            &s.member,
            "POST",
            "/v2.1/os-keypairs",
            Some(json!({"keypair": {"name": "bad@name", "public_key": RSA}})),
        )
        .await;
    fault(&r, 400, "badRequest", "'bad@name' does not match");
    let r = s
        .call(
            &s.member,
            "POST",
            "/v2.1/os-keypairs",
            Some(json!({"keypair": {"name": "", "public_key": RSA}})),
        )
        .await;
    fault(&r, 400, "badRequest", "Value: . '' is too short");
    let r = s
        .call(
            &s.member,
            "POST",
            "/v2.1/os-keypairs",
            Some(json!({"keypair": {"name": "k3", "public_key": RSA, "type": "pgp"}})),
        )
        .await;
    fault(&r, 400, "badRequest", "type");
    let r = s
        .call(
            &s.member,
            "POST",
            "/v2.1/os-keypairs",
            Some(json!({"nokeypair": {}})),
        )
        .await;
    fault(&r, 400, "badRequest", "'keypair' is a required property");
    // 2.92 allows '@' and '.', and requires the public key.
    let r = s
        .call_at(
            "2.92",
            &s.member,
            "POST",
            "/v2.1/os-keypairs",
            Some(json!({"keypair": {"name": "me@host.k"}})),
        )
        .await;
    fault(&r, 400, "badRequest", "'public_key' is a required property");
    let r = s
        .call_at(
            "2.92",
            &s.member,
            "POST",
            "/v2.1/os-keypairs",
            Some(json!({"keypair": {"name": "me@host.k", "public_key": RSA}})),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    // Below 2.92 a key is generated; 2.1 answers 200 without `type`.
    let r = s
        .call_at(
            "2.1",
            &s.member,
            "POST",
            "/v2.1/os-keypairs",
            Some(json!({"keypair": {"name": "gen"}})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let g = body(&r)["keypair"].clone();
    assert!(g["private_key"]
        .as_str()
        .unwrap()
        .starts_with("-----BEGIN OPENSSH PRIVATE KEY-----"));
    assert!(g["public_key"]
        .as_str()
        .unwrap()
        .starts_with("ssh-ed25519 "));
    assert_eq!(g["fingerprint"].as_str().unwrap().len(), 47);
    assert!(g.get("type").is_none());

    // List: the member's own only, sorted by name; another user sees none.
    let r = s.call(&s.member, "GET", "/v2.1/os-keypairs", None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let names: Vec<String> = body(&r)["keypairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["keypair"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["gen", "k1", "me@host.k"]);
    let r = s.call(&s.other, "GET", "/v2.1/os-keypairs", None).await;
    assert_eq!(body(&r)["keypairs"], json!([]));
    let r = s.call(&s.other, "GET", "/v2.1/os-keypairs/k1", None).await;
    fault(&r, 404, "itemNotFound", "Keypair k1 could not be found");
    let r = s
        .call(&s.other, "DELETE", "/v2.1/os-keypairs/k1", None)
        .await;
    assert_eq!(r.status, 404, "{}", r.body);
    // Paging (2.35).
    let r = s
        .call(&s.member, "GET", "/v2.1/os-keypairs?limit=1", None)
        .await;
    let v = body(&r);
    assert_eq!(v["keypairs"].as_array().unwrap().len(), 1);
    let next = v["keypairs_links"][0]["href"].as_str().unwrap();
    assert!(next.contains("marker=gen"), "{next}");
    let r = s
        .call(
            &s.member,
            "GET",
            "/v2.1/os-keypairs?limit=5&marker=gen",
            None,
        )
        .await;
    assert_eq!(body(&r)["keypairs"].as_array().unwrap().len(), 2);
    assert!(body(&r).get("keypairs_links").is_none());
    let r = s
        .call(&s.member, "GET", "/v2.1/os-keypairs?marker=nope", None)
        .await;
    fault(&r, 400, "badRequest", "Marker nope could not be found.");
    // Show.
    let r = s.call(&s.member, "GET", "/v2.1/os-keypairs/k1", None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = body(&r)["keypair"].clone();
    for key in [
        "id",
        "created_at",
        "user_id",
        "deleted",
        "deleted_at",
        "updated_at",
        "type",
    ] {
        assert!(v.get(key).is_some(), "{key} in {v}");
    }
    let member_user = v["user_id"].as_str().unwrap().to_owned();
    // ?user_id= (2.10): an admin reads another user's key; a member may not.
    let path = format!("/v2.1/os-keypairs?user_id={member_user}");
    let r = s.call(&s.admin, "GET", &path, None).await;
    assert_eq!(
        body(&r)["keypairs"].as_array().unwrap().len(),
        3,
        "{}",
        r.body
    );
    let r = s.call(&s.other, "GET", &path, None).await;
    fault(&r, 403, "forbidden", "os_compute_api:os-keypairs:index");
    let r = s
        .call(
            &s.admin,
            "GET",
            &format!("/v2.1/os-keypairs/k1?user_id={member_user}"),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);

    // Server create with key_name: the caller's key only.
    let mut b = Stack::boot_body("withkey", "1");
    b["server"]["key_name"] = json!("nope");
    let r = s
        .call(&s.member, "POST", "/v2.1/servers", Some(b.clone()))
        .await;
    fault(&r, 400, "badRequest", "Invalid key_name provided.");
    b["server"]["key_name"] = json!("k1");
    let r = s
        .call(&s.other, "POST", "/v2.1/servers", Some(b.clone()))
        .await;
    fault(&r, 400, "badRequest", "Invalid key_name provided.");
    let r = s.call(&s.member, "POST", "/v2.1/servers", Some(b)).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let id = body(&r)["server"]["id"].as_str().unwrap().to_owned();
    // Shown while building and once it has landed (in cell0 here).
    let mut seen_landed = false;
    for _ in 0..200 {
        let r = s
            .call(&s.member, "GET", &format!("/v2.1/servers/{id}"), None)
            .await;
        let v = body(&r)["server"].clone();
        assert_eq!(v["key_name"], "k1", "{v}");
        if v["status"] == "ERROR" {
            seen_landed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(seen_landed, "the build never landed in cell0");
    let r = s.call(&s.member, "GET", "/v2.1/servers/detail", None).await;
    assert_eq!(body(&r)["servers"][0]["key_name"], "k1", "{}", r.body);

    // key_pairs quota (per user, from the project's quota set).
    let r = s
        .call(
            &s.admin,
            "PUT",
            &format!("/v2.1/os-quota-sets/{}", s.member_project),
            Some(json!({"quota_set": {"key_pairs": 3}})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = s
        .call(
            &s.member,
            "POST",
            "/v2.1/os-keypairs",
            Some(json!({"keypair": {"name": "k4", "public_key": RSA}})),
        )
        .await;
    fault(&r, 403, "forbidden", "Quota exceeded, too many key pairs.");

    // Delete: 204 (2.2+), 202 before; then 404.
    let r = s
        .call(&s.member, "DELETE", "/v2.1/os-keypairs/k1", None)
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let r = s
        .call_at("2.1", &s.member, "DELETE", "/v2.1/os-keypairs/gen", None)
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let r = s
        .call(&s.member, "DELETE", "/v2.1/os-keypairs/k1", None)
        .await;
    fault(&r, 404, "itemNotFound", "Keypair k1 could not be found");
    let r = s
        .call(
            &s.member,
            "POST",
            "/v2.1/os-keypairs",
            Some(json!({"keypair": {"name": "k4", "public_key": RSA}})),
        )
        .await;
    assert_eq!(
        r.status, 201,
        "after deletes the quota has room: {}",
        r.body
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flavor_manage_extra_specs_and_access() {
    let st = Stack::start("ua_flavors", None).await;
    let s = &st;
    let create = |b: Value| async move { s.call(&s.admin, "POST", "/v2.1/flavors", Some(b)).await };
    // Members may not manage flavors.
    let r = s
        .call(
            &s.member,
            "POST",
            "/v2.1/flavors",
            Some(json!({"flavor": {"name": "x", "ram": 1, "vcpus": 1, "disk": 0}})),
        )
        .await;
    fault(&r, 403, "forbidden", "os-flavor-manage:create");
    // Validation.
    for (b, what) in [
        (
            json!({"flavor": {"ram": 1, "vcpus": 1, "disk": 0}}),
            "'name' is a required property",
        ),
        (
            json!({"flavor": {"name": "x", "ram": 0, "vcpus": 1, "disk": 0}}),
            "less than the minimum of 1",
        ),
        (
            json!({"flavor": {"name": "x", "ram": 1, "vcpus": 0, "disk": 0}}),
            "less than the minimum of 1",
        ),
        (
            json!({"flavor": {"name": "x", "ram": 1, "vcpus": 1, "disk": -1}}),
            "less than the minimum of 0",
        ),
        (
            json!({"flavor": {"name": "x", "ram": 1, "vcpus": 1}}),
            "'disk' is a required property",
        ),
        (
            json!({"flavor": {"name": " x", "ram": 1, "vcpus": 1, "disk": 0}}),
            "name",
        ),
        (
            json!({"flavor": {"name": "x", "ram": "lots", "vcpus": 1, "disk": 0}}),
            "ram",
        ),
        (
            json!({"flavor": {"name": "x", "ram": 1, "vcpus": 1, "disk": 0, "rxtx_factor": 0}}),
            "rxtx_factor",
        ),
        (
            json!({"flavor": {"name": "x", "ram": 1, "vcpus": 1, "disk": 0, "id": "bad/id"}}),
            "id",
        ),
        (
            json!({"flavor": {"name": "x", "ram": 1, "vcpus": 1, "disk": 0, "color": "red"}}),
            "'color' was unexpected",
        ),
    ] {
        let r = create(b.clone()).await;
        fault(&r, 400, "badRequest", what);
    }
    // Create: given id; generated UUID id; duplicates are 409.
    // `rxtx_factor` is gone from 2.102 (request and answer).
    let p1 = json!({"flavor": {"name": "p1", "id": "p1", "ram": 256, "vcpus": 2, "disk": 1,
        "OS-FLV-EXT-DATA:ephemeral": 2, "swap": 128, "rxtx_factor": 1.5,
        "os-flavor-access:is_public": false, "description": "private one"}});
    let r = s
        .call_at("2.102", &s.admin, "POST", "/v2.1/flavors", Some(p1.clone()))
        .await;
    fault(&r, 400, "badRequest", "('rxtx_factor' was unexpected)");
    let r = s
        .call_at("2.101", &s.admin, "POST", "/v2.1/flavors", Some(p1))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let f = body(&r)["flavor"].clone();
    assert_eq!(f["id"], "p1");
    assert_eq!(f["os-flavor-access:is_public"], false);
    assert_eq!(f["OS-FLV-EXT-DATA:ephemeral"], 2);
    assert_eq!(f["swap"], 128);
    assert_eq!(f["rxtx_factor"], 1.5);
    assert_eq!(f["description"], "private one");
    assert_eq!(f["extra_specs"], json!({}));
    let r = create(json!({"flavor": {"name": "pub", "ram": 64, "vcpus": 1, "disk": 0}})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let pub_id = body(&r)["flavor"]["id"].as_str().unwrap().to_owned();
    assert_eq!(pub_id.len(), 36, "{pub_id}");
    let r = create(
        json!({"flavor": {"name": "p1-again", "id": "p1", "ram": 1, "vcpus": 1, "disk": 0}}),
    )
    .await;
    fault(
        &r,
        409,
        "conflictingRequest",
        "Flavor with ID p1 already exists.",
    );
    let r = create(json!({"flavor": {"name": "p1", "ram": 1, "vcpus": 1, "disk": 0}})).await;
    fault(
        &r,
        409,
        "conflictingRequest",
        "Flavor with name p1 already exists.",
    );
    // description needs 2.55.
    let r = s.call_at("2.54", &s.admin, "POST", "/v2.1/flavors",
        Some(json!({"flavor": {"name": "d", "ram": 1, "vcpus": 1, "disk": 0, "description": "x"}}))).await;
    fault(&r, 400, "badRequest", "'description' was unexpected");

    // Private: invisible to members without access, usable by none of them.
    let ids = |r: &testkit::http::Response| -> Vec<String> {
        body(r)["flavors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let r = s.call(&s.member, "GET", "/v2.1/flavors/detail", None).await;
    assert!(!ids(&r).contains(&"p1".to_owned()) && ids(&r).contains(&pub_id));
    let r = s.call(&s.member, "GET", "/v2.1/flavors/p1", None).await;
    fault(&r, 404, "itemNotFound", "Flavor p1 could not be found.");
    let r = s
        .call(
            &s.member,
            "POST",
            "/v2.1/servers",
            Some(Stack::boot_body("v", "p1")),
        )
        .await;
    fault(&r, 400, "badRequest", "Flavor p1 could not be found.");
    // Admin filters: default public (and accessible), false: private, none: all.
    let r = s.call(&s.admin, "GET", "/v2.1/flavors", None).await;
    assert!(!ids(&r).contains(&"p1".to_owned()));
    let r = s
        .call(&s.admin, "GET", "/v2.1/flavors?is_public=false", None)
        .await;
    assert_eq!(ids(&r), ["p1"]);
    let r = s
        .call(&s.admin, "GET", "/v2.1/flavors/detail?is_public=None", None)
        .await;
    assert_eq!(ids(&r).len(), 7, "{}", r.body);
    let r = s
        .call(&s.admin, "GET", "/v2.1/flavors?is_public=maybe", None)
        .await;
    fault(&r, 400, "badRequest", "Invalid is_public filter");
    // Members' is_public is ignored.
    let r = s
        .call(&s.member, "GET", "/v2.1/flavors?is_public=none", None)
        .await;
    assert!(!ids(&r).contains(&"p1".to_owned()));

    // Access.
    let action = |flavor: &str, b: Value, token: &str| {
        let path = format!("/v2.1/flavors/{flavor}/action");
        let token = token.to_owned();
        async move { s.call(&token, "POST", &path, Some(b)).await }
    };
    let add = json!({"addTenantAccess": {"tenant": s.member_project}});
    let r = action("p1", add.clone(), &s.member).await;
    fault(&r, 403, "forbidden", "add_tenant_access");
    let r = action("p1", add.clone(), &s.admin).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        body(&r)["flavor_access"],
        json!([{"flavor_id": "p1", "tenant_id": s.member_project}])
    );
    let r = action("p1", add.clone(), &s.admin).await;
    fault(
        &r,
        409,
        "conflictingRequest",
        "Flavor access already exists",
    );
    let r = action(&pub_id, add.clone(), &s.admin).await;
    fault(
        &r,
        409,
        "conflictingRequest",
        "Can not add access to a public flavor.",
    );
    let r = action("p1", json!({"addTenantAccess": {}}), &s.admin).await;
    fault(&r, 400, "badRequest", "'tenant' is a required property");
    let r = s
        .call(&s.admin, "GET", "/v2.1/flavors/p1/os-flavor-access", None)
        .await;
    assert_eq!(
        body(&r)["flavor_access"][0]["tenant_id"],
        s.member_project.as_str()
    );
    let r = s
        .call(
            &s.admin,
            "GET",
            &format!("/v2.1/flavors/{pub_id}/os-flavor-access"),
            None,
        )
        .await;
    fault(
        &r,
        404,
        "itemNotFound",
        "Access list not available for public flavors.",
    );
    let r = s
        .call(&s.member, "GET", "/v2.1/flavors/p1/os-flavor-access", None)
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    // The member now sees and may use it; the other project still not.
    let r = s.call(&s.member, "GET", "/v2.1/flavors", None).await;
    assert!(ids(&r).contains(&"p1".to_owned()));
    let r = s.call(&s.member, "GET", "/v2.1/flavors/p1", None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = s
        .call(
            &s.member,
            "POST",
            "/v2.1/servers",
            Some(Stack::boot_body("v", "p1")),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let r = s.call(&s.other, "GET", "/v2.1/flavors/p1", None).await;
    assert_eq!(r.status, 404, "{}", r.body);
    let r = s
        .call(&s.other, "GET", "/v2.1/flavors/p1/os-extra_specs", None)
        .await;
    assert_eq!(r.status, 404, "{}", r.body);

    // Extra specs.
    let r = s
        .call(
            &s.member,
            "POST",
            "/v2.1/flavors/p1/os-extra_specs",
            Some(json!({"extra_specs": {"hw:cpu_policy": "dedicated"}})),
        )
        .await;
    fault(&r, 403, "forbidden", "os-flavor-extra-specs:create");
    let r = s.call(&s.admin, "POST", "/v2.1/flavors/p1/os-extra_specs",
        Some(json!({"extra_specs": {"hw:cpu_policy": "dedicated", "quota:disk_read_iops_sec": 100}}))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(body(&r)["extra_specs"]["quota:disk_read_iops_sec"], 100); // as given
    let r = s
        .call(
            &s.admin,
            "POST",
            "/v2.1/flavors/p1/os-extra_specs",
            Some(json!({"extra_specs": {"bad/key": "x"}})),
        )
        .await;
    fault(&r, 400, "badRequest", "bad/key");
    let r = s
        .call(&s.member, "GET", "/v2.1/flavors/p1/os-extra_specs", None)
        .await;
    assert_eq!(
        body(&r)["extra_specs"],
        json!({"hw:cpu_policy": "dedicated", "quota:disk_read_iops_sec": "100"})
    );
    let r = s
        .call(
            &s.member,
            "GET",
            "/v2.1/flavors/p1/os-extra_specs/hw:cpu_policy",
            None,
        )
        .await;
    assert_eq!(body(&r), json!({"hw:cpu_policy": "dedicated"}));
    let r = s
        .call(
            &s.admin,
            "PUT",
            "/v2.1/flavors/p1/os-extra_specs/hw:cpu_policy",
            Some(json!({"hw:cpu_policy": "shared"})),
        )
        .await;
    assert_eq!(body(&r), json!({"hw:cpu_policy": "shared"}), "{}", r.body);
    let r = s
        .call(
            &s.admin,
            "PUT",
            "/v2.1/flavors/p1/os-extra_specs/hw:cpu_policy",
            Some(json!({"other": "shared"})),
        )
        .await;
    fault(&r, 400, "badRequest", "Request body and URI mismatch");
    let r = s
        .call(
            &s.admin,
            "PUT",
            "/v2.1/flavors/p1/os-extra_specs/hw:cpu_policy",
            Some(json!({"hw:cpu_policy": "a", "b": "c"})),
        )
        .await;
    fault(&r, 400, "badRequest", "has too many properties");
    // In the flavor body from 2.61 only.
    let r = s
        .call_at("2.61", &s.member, "GET", "/v2.1/flavors/p1", None)
        .await;
    assert_eq!(body(&r)["flavor"]["extra_specs"]["hw:cpu_policy"], "shared");
    let r = s
        .call_at("2.60", &s.member, "GET", "/v2.1/flavors/p1", None)
        .await;
    assert!(body(&r)["flavor"].get("extra_specs").is_none());
    let r = s
        .call(
            &s.admin,
            "DELETE",
            "/v2.1/flavors/p1/os-extra_specs/hw:cpu_policy",
            None,
        )
        .await;
    assert!(r.status == 200 && r.body.is_empty(), "{}", r.body);
    let r = s
        .call(
            &s.admin,
            "DELETE",
            "/v2.1/flavors/p1/os-extra_specs/hw:cpu_policy",
            None,
        )
        .await;
    fault(
        &r,
        404,
        "itemNotFound",
        "has no extra specs with key hw:cpu_policy",
    );

    // Remove access: the member loses it.
    let rm = json!({"removeTenantAccess": {"tenant": s.member_project}});
    let r = action("p1", rm.clone(), &s.admin).await;
    assert_eq!(body(&r)["flavor_access"], json!([]), "{}", r.body);
    let r = action("p1", rm, &s.admin).await;
    fault(&r, 404, "itemNotFound", "Flavor access not found");
    let r = s.call(&s.member, "GET", "/v2.1/flavors/p1", None).await;
    assert_eq!(r.status, 404, "{}", r.body);

    // Update (2.55+): the description.
    let r = s
        .call_at(
            "2.54",
            &s.admin,
            "PUT",
            "/v2.1/flavors/p1",
            Some(json!({"flavor": {"description": "new"}})),
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.body);
    let r = s
        .call(
            &s.admin,
            "PUT",
            "/v2.1/flavors/p1",
            Some(json!({"flavor": {"description": "new"}})),
        )
        .await;
    assert_eq!(body(&r)["flavor"]["description"], "new", "{}", r.body);
    let r = s
        .call(
            &s.admin,
            "PUT",
            "/v2.1/flavors/p1",
            Some(json!({"flavor": {"name": "renamed"}})),
        )
        .await;
    fault(&r, 400, "badRequest", "'name' was unexpected");
    let r = s
        .call(
            &s.member,
            "PUT",
            "/v2.1/flavors/p1",
            Some(json!({"flavor": {"description": "new"}})),
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.body);

    // Delete: 202, then 404; the specs and access rows go with it.
    let r = s.call(&s.member, "DELETE", "/v2.1/flavors/p1", None).await;
    assert_eq!(r.status, 403, "{}", r.body);
    let r = s.call(&s.admin, "DELETE", "/v2.1/flavors/p1", None).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let r = s.call(&s.admin, "DELETE", "/v2.1/flavors/p1", None).await;
    fault(&r, 404, "itemNotFound", "Flavor p1 could not be found.");
    let r = s.call(&s.admin, "GET", "/v2.1/flavors/p1", None).await;
    assert_eq!(r.status, 404, "{}", r.body);
    st.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_limits_and_enforcement() {
    let s = Stack::start("ua_quotas", None).await;
    let mine = format!("/v2.1/os-quota-sets/{}", s.member_project);
    let theirs = format!("/v2.1/os-quota-sets/{}", s.other_project);
    // Defaults at 2.57+ and the older shapes.
    let r = s.call(&s.member, "GET", &mine, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        body(&r),
        json!({"quota_set": {"id": s.member_project, "instances": 10, "cores": 20,
        "ram": 51200, "key_pairs": 100, "metadata_items": 128, "server_groups": 10,
        "server_group_members": 10}})
    );
    let r = s.call_at("2.56", &s.member, "GET", &mine, None).await;
    assert_eq!(body(&r)["quota_set"]["injected_files"], 5);
    assert!(body(&r)["quota_set"].get("floating_ips").is_none());
    let r = s.call_at("2.35", &s.member, "GET", &mine, None).await;
    assert_eq!(body(&r)["quota_set"]["floating_ips"], 10);
    let r = s
        .call(&s.member, "GET", &format!("{mine}/defaults"), None)
        .await;
    assert_eq!(body(&r)["quota_set"]["instances"], 10);
    // Isolation and policy.
    let r = s.call(&s.member, "GET", &theirs, None).await;
    fault(&r, 403, "forbidden", "os-quota-sets:show");
    let r = s
        .call(&s.member, "GET", &format!("{theirs}/detail"), None)
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    let r = s
        .call(
            &s.member,
            "PUT",
            &mine,
            Some(json!({"quota_set": {"instances": 50}})),
        )
        .await;
    fault(&r, 403, "forbidden", "os-quota-sets:update");
    let r = s.call(&s.member, "DELETE", &mine, None).await;
    assert_eq!(r.status, 403, "{}", r.body);
    let r = s.call(&s.admin, "GET", &theirs, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // Update validation.
    let r = s
        .call(
            &s.admin,
            "PUT",
            &mine,
            Some(json!({"quota_set": {"bogus": 1}})),
        )
        .await;
    fault(&r, 400, "badRequest", "'bogus' was unexpected");
    let r = s
        .call(
            &s.admin,
            "PUT",
            &mine,
            Some(json!({"quota_set": {"injected_files": 1}})),
        )
        .await;
    fault(&r, 400, "badRequest", "'injected_files' was unexpected");
    let r = s
        .call(
            &s.admin,
            "PUT",
            &mine,
            Some(json!({"quota_set": {"instances": -2}})),
        )
        .await;
    fault(&r, 400, "badRequest", "less than the minimum of -1");
    let r = s
        .call(
            &s.admin,
            "PUT",
            &mine,
            Some(json!({"quota_set": {"instances": "x"}})),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = s
        .call(
            &s.admin,
            "PUT",
            &mine,
            Some(json!({"quota_set": {"instances": 2, "cores": "3"}})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(body(&r)["quota_set"]["instances"], 2);
    assert_eq!(body(&r)["quota_set"]["cores"], 3);
    assert!(body(&r)["quota_set"].get("id").is_none());

    // Limits.
    let r = s.call(&s.member, "GET", "/v2.1/limits", None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let l = body(&r)["limits"].clone();
    assert_eq!(l["rate"], json!([]));
    assert_eq!(l["absolute"]["maxTotalInstances"], 2);
    assert_eq!(l["absolute"]["maxTotalCores"], 3);
    assert_eq!(l["absolute"]["maxTotalRAMSize"], 51200);
    assert_eq!(l["absolute"]["totalInstancesUsed"], 0);
    let r = s
        .call(
            &s.member,
            "GET",
            &format!("/v2.1/limits?tenant_id={}", s.other_project),
            None,
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    let r = s
        .call(
            &s.admin,
            "GET",
            &format!("/v2.1/limits?tenant_id={}", s.member_project),
            None,
        )
        .await;
    assert_eq!(body(&r)["limits"]["absolute"]["maxTotalInstances"], 2);

    // Enforcement: min_count = max_count over the limit writes nothing
    // (all or none).
    let mut b = Stack::boot_body("many", "3"); // m1.medium: 2 vcpus
    b["server"]["min_count"] = json!(2);
    b["server"]["max_count"] = json!(2);
    let r = s.call(&s.member, "POST", "/v2.1/servers", Some(b)).await;
    fault(
        &r,
        403,
        "forbidden",
        "Quota exceeded for cores: Requested 4, but already used 0 of 3 cores",
    );
    let r = s.call(&s.member, "GET", "/v2.1/servers", None).await;
    assert_eq!(body(&r)["servers"], json!([]));
    let r = s
        .call(
            &s.member,
            "POST",
            "/v2.1/servers",
            Some(Stack::boot_body("a", "3")),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let r = s
        .call(
            &s.member,
            "POST",
            "/v2.1/servers",
            Some(Stack::boot_body("b", "3")),
        )
        .await;
    fault(&r, 403, "forbidden", "Quota exceeded for cores");
    let r = s
        .call(
            &s.member,
            "POST",
            "/v2.1/servers",
            Some(Stack::boot_body("b", "1")),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let b_id = body(&r)["server"]["id"].as_str().unwrap().to_owned();
    let r = s
        .call(
            &s.member,
            "POST",
            "/v2.1/servers",
            Some(Stack::boot_body("c", "1")),
        )
        .await;
    fault(
        &r,
        403,
        "forbidden",
        "Quota exceeded for instances, cores: Requested 1, but already used 2 of 2",
    );
    // Another project is not affected.
    let r = s
        .call(
            &s.other,
            "POST",
            "/v2.1/servers",
            Some(Stack::boot_body("o", "1")),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    // Usage.
    let r = s
        .call(&s.member, "GET", &format!("{mine}/detail"), None)
        .await;
    let d = body(&r)["quota_set"].clone();
    assert_eq!(
        d["instances"],
        json!({"limit": 2, "in_use": 2, "reserved": 0}),
        "{d}"
    );
    assert_eq!(d["cores"]["in_use"], 3);
    assert_eq!(d["ram"]["in_use"], 4096 + 512);
    let r = s.call(&s.member, "GET", "/v2.1/limits", None).await;
    let a = body(&r)["limits"]["absolute"].clone();
    assert_eq!(
        (
            a["totalInstancesUsed"].clone(),
            a["totalCoresUsed"].clone(),
            a["totalRAMUsed"].clone()
        ),
        (json!(2), json!(3), json!(4608))
    );
    // A limit below usage needs force.
    let r = s
        .call(
            &s.admin,
            "PUT",
            &mine,
            Some(json!({"quota_set": {"instances": 1}})),
        )
        .await;
    fault(
        &r,
        400,
        "badRequest",
        "Quota limit 1 for instances must be greater than or equal to already used and reserved 2.",
    );
    let r = s
        .call(
            &s.admin,
            "PUT",
            &mine,
            Some(json!({"quota_set": {"instances": 1, "force": true}})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    // Deleting a server frees its share.
    let r = s
        .call(
            &s.admin,
            "PUT",
            &mine,
            Some(json!({"quota_set": {"instances": 2}})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = s
        .call(&s.member, "DELETE", &format!("/v2.1/servers/{b_id}"), None)
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let r = s
        .call(
            &s.member,
            "POST",
            "/v2.1/servers",
            Some(Stack::boot_body("c", "1")),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    // metadata_items.
    let r = s
        .call(
            &s.admin,
            "PUT",
            &mine,
            Some(json!({"quota_set": {"metadata_items": 1, "instances": 10, "cores": 10}})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let mut b = Stack::boot_body("meta", "1");
    b["server"]["metadata"] = json!({"a": "1", "b": "2"});
    let r = s.call(&s.member, "POST", "/v2.1/servers", Some(b)).await;
    assert_eq!(
        body(&r),
        json!({"forbidden": {"code": 403, "message": "Maximum number of metadata items exceeds 1"}})
    );
    // Delete: back to the defaults.
    let r = s.call(&s.admin, "DELETE", &mine, None).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let r = s.call(&s.member, "GET", &mine, None).await;
    assert_eq!(body(&r)["quota_set"]["instances"], 10);
    // Per-user quotas: a user without limits of its own has the project's.
    let r = s
        .call(&s.admin, "GET", &format!("{mine}?user_id=u"), None)
        .await;
    assert_eq!(body(&r)["quota_set"]["instances"], 10, "{}", r.body);
    s.stop().await;
}

/// N concurrent creates against a limit of `limit` instances: exactly
/// `limit` are accepted, the others get 403, and usage never exceeds it.
async fn concurrent_creates(s: &Stack, limit: i64, n: usize) {
    let mine = format!("/v2.1/os-quota-sets/{}", s.member_project);
    let r = s
        .call(
            &s.admin,
            "PUT",
            &mine,
            Some(json!({"quota_set": {"instances": limit}})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let calls = (0..n).map(|i| {
        s.call(
            &s.member,
            "POST",
            "/v2.1/servers",
            Some(Stack::boot_body(&format!("c{i}"), "1")),
        )
    });
    let results = futures_util::future::join_all(calls).await;
    let ok = results.iter().filter(|r| r.status == 202).count();
    let refused: Vec<_> = results.iter().filter(|r| r.status == 403).collect();
    assert_eq!(
        ok as i64,
        limit,
        "{:?}",
        results
            .iter()
            .map(|r| (r.status, r.body.clone()))
            .collect::<Vec<_>>()
    );
    assert_eq!(ok + refused.len(), n);
    for r in refused {
        fault(r, 403, "forbidden", "Quota exceeded for instances");
    }
    let r = s
        .call(&s.member, "GET", &format!("{mine}/detail"), None)
        .await;
    assert_eq!(
        body(&r)["quota_set"]["instances"]["in_use"],
        limit,
        "{}",
        r.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_never_exceed_the_quota_sqlite() {
    let s = Stack::start("ua_race_sqlite", None).await;
    concurrent_creates(&s, 3, 12).await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_never_exceed_the_quota_postgres() {
    let Some(pg) = testkit::postgres("ua_race_pg_api").await else {
        return;
    };
    let s = Stack::start("ua_race_pg", Some(pg)).await;
    concurrent_creates(&s, 3, 12).await;
    s.stop().await;
}

impl Stack {
    /// `POST /os-server-groups` (2.64) as `token`.
    async fn create_group(&self, token: &str, name: &str) -> testkit::http::Response {
        self.call_at(
            "2.64",
            token,
            "POST",
            "/v2.1/os-server-groups",
            Some(json!({"server_group": {"name": name, "policy": "anti-affinity"}})),
        )
        .await
    }

    /// `POST /servers` of `count` m1.tiny servers into `group` as `token`.
    async fn boot_into(
        &self,
        token: &str,
        name: &str,
        group: &str,
        count: u32,
    ) -> testkit::http::Response {
        let mut b = Stack::boot_body(name, "1");
        b["server"]["min_count"] = json!(count);
        b["server"]["max_count"] = json!(count);
        b["os:scheduler_hints"] = json!({ "group": group });
        self.call(token, "POST", "/v2.1/servers", Some(b)).await
    }

    /// The members of `group`.
    async fn members(&self, group: &str) -> Vec<String> {
        let r = self
            .call(
                &self.admin,
                "GET",
                &format!("/v2.1/os-server-groups/{group}"),
                None,
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        let mut m: Vec<String> = body(&r)["server_group"]["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_str().unwrap().to_owned())
            .collect();
        m.sort();
        m
    }
}

const TOO_MANY_GROUPS: &str = "Quota exceeded, too many server groups.";
const TOO_MANY_MEMBERS: &str = "Quota exceeded, too many servers in group";

/// Asserts Nova's exact 403 body.
fn forbidden(r: &testkit::http::Response, message: &str) {
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(
        body(r),
        json!({"forbidden": {"code": 403, "message": message}}),
        "{}",
        r.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_group_quotas_are_enforced_and_shown() {
    let s = Stack::start("ua_sg_quotas", None).await;
    let mine = format!("/v2.1/os-quota-sets/{}", s.member_project);
    let r = s
        .call(
            &s.admin,
            "PUT",
            &mine,
            Some(json!({"quota_set": {"server_groups": 2, "server_group_members": 2}})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);

    // server_groups: the third group of the project is refused, nothing
    // written; a malformed body is still a 400 (validated first).
    let r = s.create_group(&s.member, "g1").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let g1 = body(&r)["server_group"]["id"].as_str().unwrap().to_owned();
    let r = s.create_group(&s.member, "g2").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let g2 = body(&r)["server_group"]["id"].as_str().unwrap().to_owned();
    let r = s.create_group(&s.member, "g3").await;
    forbidden(&r, TOO_MANY_GROUPS);
    let r = s
        .call_at(
            "2.64",
            &s.member,
            "POST",
            "/v2.1/os-server-groups",
            Some(json!({"server_group": {"policy": "anti-affinity"}})),
        )
        .await;
    fault(&r, 400, "badRequest", "'name' is a required property");
    let r = s
        .call(&s.member, "GET", "/v2.1/os-server-groups", None)
        .await;
    assert_eq!(body(&r)["server_groups"].as_array().unwrap().len(), 2);
    // Another project has its own count.
    let r = s.create_group(&s.other, "theirs").await;
    assert_eq!(r.status, 200, "{}", r.body);

    // Usage: server_groups counted per project; server_group_members is
    // per group, shown in use 0 as Nova does.
    let r = s
        .call(&s.member, "GET", &format!("{mine}/detail"), None)
        .await;
    let d = body(&r)["quota_set"].clone();
    assert_eq!(
        d["server_groups"],
        json!({"limit": 2, "in_use": 2, "reserved": 0}),
        "{d}"
    );
    assert_eq!(
        d["server_group_members"],
        json!({"limit": 2, "in_use": 0, "reserved": 0}),
        "{d}"
    );
    let r = s.call(&s.member, "GET", "/v2.1/limits", None).await;
    let a = body(&r)["limits"]["absolute"].clone();
    assert_eq!(a["maxServerGroups"], 2, "{a}");
    assert_eq!(a["maxServerGroupMembers"], 2, "{a}");
    assert_eq!(a["totalServerGroupsUsed"], 2, "{a}");
    // A limit below usage needs force.
    let r = s
        .call(
            &s.admin,
            "PUT",
            &mine,
            Some(json!({"quota_set": {"server_groups": 1}})),
        )
        .await;
    fault(
        &r,
        400,
        "badRequest",
        "Quota limit 1 for server_groups must be greater than or equal to already used and reserved 2.",
    );
    // Deleting a group frees its share.
    let r = s
        .call(
            &s.member,
            "DELETE",
            &format!("/v2.1/os-server-groups/{g2}"),
            None,
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let r = s.create_group(&s.member, "g3").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = s.call(&s.member, "GET", "/v2.1/limits", None).await;
    assert_eq!(body(&r)["limits"]["absolute"]["totalServerGroupsUsed"], 2);

    // server_group_members: all of max_count or nothing (no build, no
    // member, no usage).
    let r = s.boot_into(&s.member, "many", &g1, 3).await;
    forbidden(&r, TOO_MANY_MEMBERS);
    let r = s.call(&s.member, "GET", "/v2.1/servers", None).await;
    assert_eq!(body(&r)["servers"], json!([]), "{}", r.body);
    assert!(s.members(&g1).await.is_empty());
    let r = s
        .call(&s.member, "GET", &format!("{mine}/detail"), None)
        .await;
    assert_eq!(body(&r)["quota_set"]["instances"]["in_use"], 0);
    let r = s.boot_into(&s.member, "a", &g1, 1).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let a_id = body(&r)["server"]["id"].as_str().unwrap().to_owned();
    let r = s.boot_into(&s.member, "two", &g1, 2).await;
    forbidden(&r, TOO_MANY_MEMBERS);
    let r = s.boot_into(&s.member, "b", &g1, 1).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let b_id = body(&r)["server"]["id"].as_str().unwrap().to_owned();
    let r = s.boot_into(&s.member, "c", &g1, 1).await;
    forbidden(&r, TOO_MANY_MEMBERS);
    let mut want = vec![a_id.clone(), b_id.clone()];
    want.sort();
    assert_eq!(s.members(&g1).await, want);
    // Another group of the project has its own count.
    let r = s.create_group(&s.member, "g4").await;
    fault(&r, 403, "forbidden", TOO_MANY_GROUPS);
    let r = s
        .call(&s.member, "GET", "/v2.1/os-server-groups", None)
        .await;
    let g3 = body(&r)["server_groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "g3")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = s.boot_into(&s.member, "elsewhere", &g3, 2).await;
    assert_eq!(r.status, 202, "{}", r.body);
    // A deleted member stops counting.
    let r = s
        .call(&s.member, "DELETE", &format!("/v2.1/servers/{a_id}"), None)
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let r = s.boot_into(&s.member, "c", &g1, 1).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let c_id = body(&r)["server"]["id"].as_str().unwrap().to_owned();
    let mut want = vec![b_id.clone(), c_id];
    want.sort();
    assert_eq!(s.members(&g1).await, want);
    // The instance quota is checked first, as in Nova.
    let r = s
        .call(
            &s.admin,
            "PUT",
            &mine,
            Some(json!({"quota_set": {"instances": 4}})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = s.boot_into(&s.member, "d", &g1, 1).await;
    fault(&r, 403, "forbidden", "Quota exceeded for instances");
    // As in Nova the members counted are the booting user's, against the
    // booting project's limit: an admin (another project, another user)
    // may still add to the member's full group.
    let r = s.boot_into(&s.admin, "admins", &g1, 1).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(s.members(&g1).await.len(), 3);
    s.stop().await;
}

/// `n` concurrent group creates against `server_groups` = `limit`, then
/// `n` concurrent boots into one group against `server_group_members` =
/// `limit`: exactly `limit` of each succeed, the others get Nova's 403.
async fn concurrent_server_group_quotas(s: &Stack, limit: i64, n: usize) {
    let mine = format!("/v2.1/os-quota-sets/{}", s.member_project);
    let r = s
        .call(
            &s.admin,
            "PUT",
            &mine,
            Some(json!({"quota_set": {"server_groups": limit,
                "server_group_members": limit, "instances": -1, "cores": -1, "ram": -1}})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let names: Vec<String> = (0..n).map(|i| format!("g{i}")).collect();
    let results =
        futures_util::future::join_all(names.iter().map(|g| s.create_group(&s.member, g))).await;
    let created: Vec<String> = results
        .iter()
        .filter(|r| r.status == 200)
        .map(|r| body(r)["server_group"]["id"].as_str().unwrap().to_owned())
        .collect();
    let all: Vec<_> = results.iter().map(|r| (r.status, &r.body)).collect();
    assert_eq!(created.len() as i64, limit, "{all:?}");
    for r in results.iter().filter(|r| r.status != 200) {
        forbidden(r, TOO_MANY_GROUPS);
    }
    let r = s
        .call(&s.member, "GET", &format!("{mine}/detail"), None)
        .await;
    assert_eq!(body(&r)["quota_set"]["server_groups"]["in_use"], limit);

    let group = &created[0];
    let names: Vec<String> = (0..n).map(|i| format!("s{i}")).collect();
    let results =
        futures_util::future::join_all(names.iter().map(|m| s.boot_into(&s.member, m, group, 1)))
            .await;
    let ok = results.iter().filter(|r| r.status == 202).count();
    let all: Vec<_> = results.iter().map(|r| (r.status, &r.body)).collect();
    assert_eq!(ok as i64, limit, "{all:?}");
    for r in results.iter().filter(|r| r.status != 202) {
        forbidden(r, TOO_MANY_MEMBERS);
    }
    assert_eq!(s.members(group).await.len() as i64, limit);
    let r = s
        .call(&s.member, "GET", &format!("{mine}/detail"), None)
        .await;
    assert_eq!(body(&r)["quota_set"]["instances"]["in_use"], limit);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_server_group_creates_and_boots_never_exceed_the_quota_sqlite() {
    let s = Stack::start("ua_sg_race_sqlite", None).await;
    concurrent_server_group_quotas(&s, 3, 12).await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_server_group_creates_and_boots_never_exceed_the_quota_postgres() {
    let Some(pg) = testkit::postgres("ua_sg_race_pg_api").await else {
        return;
    };
    let s = Stack::start("ua_sg_race_pg", Some(pg)).await;
    concurrent_server_group_quotas(&s, 3, 12).await;
    s.stop().await;
}

/// Writes an instance into a cell database as the computes leave it:
/// launched at `launched`, terminated (and deleted) at `terminated`.
#[allow(clippy::too_many_arguments)]
async fn put_instance(
    cell_url: &str,
    project: &str,
    name: &str,
    vcpus: i64,
    memory_mb: i64,
    root_gb: i64,
    launched: Option<&str>,
    terminated: Option<&str>,
) -> String {
    use cell_mapping::db::{CellDb, InstanceFlavor, NewCellInstance, Pool};
    let at = |s: &str| {
        chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S")
            .unwrap()
            .and_utc()
    };
    let db = CellDb::open(cell_url).await.expect("cell db");
    let uuid = uuid::Uuid::new_v4().to_string();
    db.create_api_instance(&NewCellInstance {
        uuid: uuid.clone(),
        project_id: project.into(),
        user_id: "u".into(),
        display_name: Some(name.into()),
        flavor: InstanceFlavor {
            flavorid: "f".into(),
            name: format!("f{vcpus}"),
            vcpus,
            memory_mb,
            root_gb,
            ephemeral_gb: 0,
            swap: 0,
        },
        image_ref: IMAGE.into(),
        host: Some("h".into()),
        node: Some("h".into()),
        created_at: at("2025-01-01T00:00:00"),
        request_id: "req-1".into(),
        global_request_id: "req-1".into(),
        reservation_id: "r-1".into(),
        launch_index: 0,
        ..Default::default()
    })
    .await
    .expect("instance");
    let launched = launched.map(at);
    let terminated = terminated.map(at);
    let sql = "UPDATE instances SET launched_at = $1, terminated_at = $2, deleted_at = $2, \
               deleted = $3, vm_state = 'active' WHERE uuid = $4";
    match db.pool() {
        Pool::Sqlite(p) => sqlx::query(sql)
            .bind(launched)
            .bind(terminated)
            .bind(terminated.is_some())
            .bind(&uuid)
            .execute(p)
            .await
            .unwrap(),
        Pool::Postgres(_) => unreachable!("the cells are SQLite here"),
    };
    db.close().await;
    uuid
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_tenant_usage_across_cells() {
    let s = Stack::start("ua_usage", None).await;
    let (c1, c2) = (&s.cell_urls[0], &s.cell_urls[1]);
    let (mine, theirs) = (&s.member_project, &s.other_project);
    // In the period 2026-01-01 00:00 .. 2026-01-02 00:00:
    let m1 = put_instance(
        c1,
        mine,
        "m1",
        2,
        1024,
        10,
        Some("2026-01-01T06:00:00"),
        None,
    )
    .await; // 18 h
    let m2 = put_instance(
        c2,
        mine,
        "m2",
        1,
        512,
        1,
        Some("2025-12-31T00:00:00"),
        Some("2026-01-01T12:00:00"),
    )
    .await; // 12 h
    put_instance(
        c2,
        theirs,
        "o1",
        1,
        256,
        1,
        Some("2026-01-01T00:00:00"),
        None,
    )
    .await; // 24 h
    put_instance(c1, mine, "never", 4, 4096, 1, None, None).await; // never launched
    put_instance(
        c1,
        mine,
        "old",
        4,
        4096,
        1,
        Some("2025-01-01T00:00:00"),
        Some("2025-06-01T00:00:00"),
    )
    .await; // before
    let period = "start=2026-01-01T00:00:00&end=2026-01-02T00:00:00";

    // A member: its own project, every cell, each server.
    let r = s
        .call(
            &s.member,
            "GET",
            &format!("/v2.1/os-simple-tenant-usage/{mine}?{period}"),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let u = body(&r)["tenant_usage"].clone();
    assert_eq!(u["tenant_id"], mine.as_str());
    assert_eq!(u["total_hours"], 30.0, "{u}");
    assert_eq!(u["total_vcpus_usage"], 48.0, "{u}");
    assert_eq!(u["total_memory_mb_usage"], 24576.0, "{u}");
    assert_eq!(u["total_local_gb_usage"], 192.0, "{u}");
    assert_eq!(u["start"], "2026-01-01T00:00:00.000000");
    let servers = u["server_usages"].as_array().unwrap();
    assert_eq!(servers.len(), 2, "{u}");
    let by_id = |id: &str| {
        servers
            .iter()
            .find(|x| x["instance_id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(by_id(&m1)["state"], "active");
    assert_eq!(by_id(&m1)["hours"], 18.0);
    assert_eq!(by_id(&m1)["flavor"], "f2");
    assert_eq!(by_id(&m2)["state"], "terminated");
    assert_eq!(by_id(&m2)["ended_at"], "2026-01-01T12:00:00.000000");
    assert_eq!(by_id(&m2)["uptime"], 36 * 3600);
    // Not another project's, nor the all-projects listing.
    let r = s
        .call(
            &s.member,
            "GET",
            &format!("/v2.1/os-simple-tenant-usage/{theirs}?{period}"),
            None,
        )
        .await;
    fault(&r, 403, "forbidden", "os-simple-tenant-usage:show");
    let r = s
        .call(
            &s.member,
            "GET",
            &format!("/v2.1/os-simple-tenant-usage?{period}"),
            None,
        )
        .await;
    fault(&r, 403, "forbidden", "os-simple-tenant-usage:list");

    // The admin: every project; server usages only with detailed=1.
    let r = s
        .call(
            &s.admin,
            "GET",
            &format!("/v2.1/os-simple-tenant-usage?{period}"),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let all = body(&r)["tenant_usages"].as_array().unwrap().clone();
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(all.iter().all(|t| t.get("server_usages").is_none()));
    let other = all
        .iter()
        .find(|t| t["tenant_id"] == theirs.as_str())
        .unwrap();
    assert_eq!(other["total_hours"], 24.0);
    let r = s
        .call(
            &s.admin,
            "GET",
            &format!("/v2.1/os-simple-tenant-usage?{period}&detailed=1"),
            None,
        )
        .await;
    let all = body(&r)["tenant_usages"].as_array().unwrap().clone();
    assert!(all.iter().all(|t| t["server_usages"].is_array()));

    // An empty project: an empty object; bad periods: 400.
    let r = s
        .call(
            &s.admin,
            "GET",
            "/v2.1/os-simple-tenant-usage/nobody?start=2026-01-01T00:00:00",
            None,
        )
        .await;
    assert_eq!(body(&r), json!({"tenant_usage": {}}), "{}", r.body);
    let r = s
        .call(
            &s.admin,
            "GET",
            "/v2.1/os-simple-tenant-usage?start=yesterday",
            None,
        )
        .await;
    fault(&r, 400, "badRequest", "invalid format");
    let r = s
        .call(
            &s.admin,
            "GET",
            "/v2.1/os-simple-tenant-usage?start=2026-01-02T00:00:00&end=2026-01-01T00:00:00",
            None,
        )
        .await;
    fault(
        &r,
        400,
        "badRequest",
        "The start time cannot occur after the end time.",
    );
    s.stop().await;
}
