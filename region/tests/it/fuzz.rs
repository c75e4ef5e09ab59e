//! A fuzz run (proptest) over the request parsers of the four APIs of one
//! region: random methods, paths built from each API's routes with random
//! or real ids, random query strings, microversions and JSON bodies
//! (objects with the APIs' own keys, and bytes that are not JSON). No
//! request may get a 5xx (501, "not built", aside) and every server must
//! still answer afterwards. The figures of a run are printed; docs/SECURITY.md
//! has them. `FUZZ_CASES` sets the requests per API (default 1000).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use region::Region;
use serde_json::{Map, Value};

/// One request.
#[derive(Debug, Clone)]
struct Req {
    method: &'static str,
    path: String,
    version: String,
    body: Option<String>,
}

/// Keys the APIs read, so that random bodies reach past the first check.
const KEYS: &[&str] = &[
    "server",
    "name",
    "flavorRef",
    "imageRef",
    "networks",
    "min_count",
    "max_count",
    "metadata",
    "meta",
    "tags",
    "key_name",
    "availability_zone",
    "user_data",
    "config_drive",
    "block_device_mapping_v2",
    "security_groups",
    "hostname",
    "host",
    "flavor",
    "ram",
    "vcpus",
    "disk",
    "id",
    "keypair",
    "public_key",
    "type",
    "aggregate",
    "add_host",
    "remove_host",
    "set_metadata",
    "server_group",
    "policy",
    "policies",
    "rules",
    "quota_set",
    "instances",
    "cores",
    "remote_console",
    "protocol",
    "reboot",
    "rebuild",
    "os-stop",
    "os-start",
    "lock",
    "os-getConsoleOutput",
    "length",
    "auth",
    "identity",
    "methods",
    "password",
    "user",
    "domain",
    "scope",
    "project",
    "token",
    "role",
    "enabled",
    "default_project_id",
    "disk_format",
    "container_format",
    "visibility",
    "protected",
    "min_ram",
    "min_disk",
    "op",
    "path",
    "value",
    "resource_provider_generation",
    "inventories",
    "total",
    "reserved",
    "allocation_ratio",
    "allocations",
    "resources",
    "consumer_generation",
    "project_id",
    "user_id",
    "uuid",
    "parent_provider_uuid",
    "traits",
    "mappings",
    "status",
    "forced_down",
    "disabled_reason",
];

/// Ids: random ones (ill-formed percent-escapes included), a UUID, or one
/// that exists.
fn id(real: Vec<String>) -> BoxedStrategy<String> {
    prop_oneof![
        "[a-zA-Z0-9._~%-]{0,40}",
        "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
        proptest::sample::select(real),
    ]
    .boxed()
}

fn query() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        proptest::sample::select(
            &[
                "limit",
                "marker",
                "sort_key",
                "sort_dir",
                "name",
                "status",
                "changes-since",
                "all_tenants",
                "project_id",
                "tags",
                "tags-any",
                "not-tags",
                "flavor",
                "image",
                "ip",
                "host",
                "deleted",
                "resources",
                "required",
                "member_of",
                "in_tree",
                "visibility",
                "owner",
                "user_id",
                "detailed",
                "start",
                "end",
                "type",
                "min_ram",
                "group_policy",
                "root_required",
                "same_subtree",
                "include_usage",
            ][..]
        )
        .prop_map(str::to_owned),
        "[a-z_:-]{1,12}",
    ];
    let value = "[a-zA-Z0-9%:,._!-]{0,20}";
    proptest::collection::vec((key, value), 0..4).prop_map(|kv| {
        if kv.is_empty() {
            return String::new();
        }
        let q: Vec<String> = kv.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("?{}", q.join("&"))
    })
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e20f64..1e20).prop_map(Value::from),
        "\\PC{0,24}".prop_map(Value::from),
        proptest::sample::select(KEYS).prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 24, 5, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(
                prop_oneof![
                    proptest::sample::select(KEYS).prop_map(str::to_owned),
                    "\\PC{0,8}"
                ],
                inner,
                0..5
            )
            .prop_map(|m: BTreeMap<String, Value>| Value::Object(
                m.into_iter().collect::<Map<_, _>>()
            )),
        ]
    })
}

fn body() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        2 => Just(None),
        // An object under one of the APIs' wrappers.
        5 => (proptest::sample::select(KEYS), json()).prop_map(|(k, v)| {
            let mut m = Map::new();
            m.insert(k.to_owned(), v);
            Some(Value::Object(m).to_string())
        }),
        2 => json().prop_map(|v| Some(v.to_string())),
        1 => "\\PC{0,64}".prop_map(Some),
    ]
}

/// Requests of one API: its route templates (`{}` an id), microversion
/// header values.
fn requests(
    templates: &'static [&'static str],
    versions: &'static [&'static str],
    real: Vec<String>,
) -> impl Strategy<Value = Req> {
    (
        prop_oneof![
            4 => Just("GET"),
            3 => Just("POST"),
            2 => Just("PUT"),
            1 => Just("PATCH"),
            1 => Just("DELETE"),
        ],
        proptest::sample::select(templates),
        proptest::collection::vec(id(real), 4),
        query(),
        proptest::sample::select(versions),
        body(),
    )
        .prop_map(|(method, template, ids, query, version, body)| {
            let mut path = String::new();
            let mut ids = ids.into_iter();
            for (i, part) in template.split("{}").enumerate() {
                if i > 0 {
                    path.push_str(&ids.next().unwrap_or_default());
                }
                path.push_str(part);
            }
            Req {
                method,
                path: format!("{path}{query}"),
                version: version.to_owned(),
                body,
            }
        })
}

const IDENTITY: &[&str] = &[
    "/v3/auth/tokens",
    "/v3/auth/projects",
    "/v3/auth/catalog",
    "/v3/users",
    "/v3/users/{}",
    "/v3/users/{}/projects",
    "/v3/projects",
    "/v3/projects/{}",
    "/v3/roles",
    "/v3/roles/{}",
    "/v3/projects/{}/users/{}/roles",
    "/v3/projects/{}/users/{}/roles/{}",
    "/v3/role_assignments",
    "/v3/domains",
    "/v3/domains/{}",
    "/v3",
];
const COMPUTE: &[&str] = &[
    "/v2.1/servers",
    "/v2.1/servers/detail",
    "/v2.1/servers/{}",
    "/v2.1/servers/{}/action",
    "/v2.1/servers/{}/metadata",
    "/v2.1/servers/{}/metadata/{}",
    "/v2.1/servers/{}/tags",
    "/v2.1/servers/{}/tags/{}",
    "/v2.1/servers/{}/os-instance-actions",
    "/v2.1/servers/{}/os-instance-actions/{}",
    "/v2.1/servers/{}/remote-consoles",
    "/v2.1/flavors",
    "/v2.1/flavors/detail",
    "/v2.1/flavors/{}",
    "/v2.1/flavors/{}/os-extra_specs",
    "/v2.1/flavors/{}/os-extra_specs/{}",
    "/v2.1/flavors/{}/os-flavor-access",
    "/v2.1/flavors/{}/action",
    "/v2.1/os-keypairs",
    "/v2.1/os-keypairs/{}",
    "/v2.1/os-aggregates",
    "/v2.1/os-aggregates/{}",
    "/v2.1/os-aggregates/{}/action",
    "/v2.1/os-services",
    "/v2.1/os-services/{}",
    "/v2.1/os-hypervisors",
    "/v2.1/os-hypervisors/detail",
    "/v2.1/os-hypervisors/{}",
    "/v2.1/os-server-groups",
    "/v2.1/os-server-groups/{}",
    "/v2.1/limits",
    "/v2.1/os-quota-sets/{}",
    "/v2.1/os-quota-sets/{}/detail",
    "/v2.1/os-quota-sets/{}/defaults",
    "/v2.1/os-simple-tenant-usage",
    "/v2.1/os-simple-tenant-usage/{}",
    "/v2.1/os-quota-class-sets/{}",
    "/v2.1/os-instance_usage_audit_log",
    "/v2.1/os-instance_usage_audit_log/{}",
    "/v2.1/os-availability-zone",
    "/v2.1/os-availability-zone/detail",
    "/v2.1/images",
    "/v2.1/images/{}",
    "/v2.1/os-console-auth-tokens/{}",
    "/v2.1",
];
const IMAGE: &[&str] = &[
    "/v2/images",
    "/v2/images/{}",
    "/v2/images/{}/file",
    "/v2/images/{}/tags/{}",
    "/v2/images/{}/actions/deactivate",
    "/v2/images/{}/actions/reactivate",
    "/v2/schemas/image",
    "/versions",
    "/v2",
];
const PLACEMENT: &[&str] = &[
    "/resource_providers",
    "/resource_providers/{}",
    "/resource_providers/{}/inventories",
    "/resource_providers/{}/inventories/{}",
    "/resource_providers/{}/usages",
    "/resource_providers/{}/aggregates",
    "/resource_providers/{}/traits",
    "/resource_providers/{}/allocations",
    "/allocations/{}",
    "/allocations",
    "/allocation_candidates",
    "/usages",
    "/traits",
    "/traits/{}",
    "/resource_classes",
    "/resource_classes/{}",
    "/reshaper",
];

/// One API under test: name, address, route templates, microversion
/// header values, the header's name, real ids.
type Target = (
    &'static str,
    SocketAddr,
    &'static [&'static str],
    &'static [&'static str],
    &'static str,
    Vec<String>,
);

/// Sends `r` as `token` with `header: version`; the status.
fn send(addr: SocketAddr, token: &str, header: &str, r: &Req) -> u16 {
    let mut c = testkit::http::Client::new(addr)
        .with_header("x-auth-token", token)
        .with_header(header, &r.version);
    match c.request(r.method, &r.path, r.body.as_deref()) {
        Ok(resp) => resp.status,
        // The server closed the connection without an answer: count it as
        // a server failure.
        Err(_) => 599,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_four_apis_answer_random_requests_without_a_5xx() {
    let cfg = crate::one_host("fuzz");
    let region = Region::start(&cfg, None).await.expect("start the region");
    let identity = format!("http://{}", region.identity.addr);
    let admin = region::password_token(&identity, &region.admin)
        .await
        .unwrap()
        .0;
    let member = region::password_token(&identity, &region.member)
        .await
        .unwrap()
        .0;
    // Real ids, so that some requests reach past the lookups.
    let api = crate::local_delete::Api::admin_of(&region).await;
    let (server, _) = api.boot("fuzzed", "").await;
    let get = |url: String| {
        let token = admin.clone();
        async move {
            let r = reqwest::Client::new()
                .get(url)
                .header("x-auth-token", token)
                .send()
                .await
                .unwrap();
            r.json::<Value>().await.unwrap()
        }
    };
    let providers = get(format!(
        "http://{}/resource_providers",
        region.placement.addr
    ))
    .await;
    let provider = providers["resource_providers"][0]["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    let images = get(format!("http://{}/v2/images", region.image.addr)).await;
    let image = images["images"][0]["id"].as_str().unwrap().to_owned();
    let cases: u32 = std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let apis: [Target; 4] = [
        (
            "identity",
            region.identity.addr,
            IDENTITY,
            &["", "x"],
            "x-fuzz",
            vec!["default".into()],
        ),
        (
            "compute",
            region.compute.addr,
            COMPUTE,
            &[
                "compute 2.1",
                "compute 2.47",
                "compute latest",
                "compute 2.999",
                "compute x",
                "",
            ],
            "openstack-api-version",
            vec![server.clone(), "1".into(), image.clone()],
        ),
        (
            "image",
            region.image.addr,
            IMAGE,
            &[""],
            "x-fuzz",
            vec![image.clone()],
        ),
        (
            "placement",
            region.placement.addr,
            PLACEMENT,
            &[
                "placement 1.0",
                "placement 1.20",
                "placement 1.39",
                "placement latest",
                "placement 9.9",
                "x",
            ],
            "openstack-api-version",
            vec![
                provider.clone(),
                "VCPU".into(),
                "CUSTOM_X".into(),
                server.clone(),
            ],
        ),
    ];
    let mut figures = Vec::new();
    for (name, addr, templates, versions, header, real) in apis {
        let (as_admin, as_member) = (admin.clone(), member.clone());
        let header = header.to_owned();
        let (counts, failure) = tokio::task::spawn_blocking(move || {
            let strategy = requests(templates, versions, real);
            let counts = std::cell::RefCell::new(BTreeMap::<u16, u32>::new());
            let mut runner = TestRunner::new(Config {
                cases,
                failure_persistence: None,
                max_shrink_iters: 200,
                ..Config::default()
            });
            let i = std::cell::Cell::new(0u32);
            let res = runner.run(&strategy, |r| {
                i.set(i.get() + 1);
                // Most as the administrator (past every policy), some as a
                // member.
                let token = if i.get().is_multiple_of(4) {
                    &as_member
                } else {
                    &as_admin
                };
                let status = send(addr, token, &header, &r);
                *counts.borrow_mut().entry(status).or_default() += 1;
                if status >= 500 && status != 501 {
                    return Err(TestCaseError::fail(format!("{status} for {r:?}")));
                }
                Ok(())
            });
            (counts.into_inner(), res.err().map(|e| e.to_string()))
        })
        .await
        .unwrap();
        let total: u32 = counts.values().sum();
        eprintln!("fuzz {name}: {total} requests, statuses {counts:?}");
        assert!(failure.is_none(), "{name}: {}", failure.unwrap_or_default());
        // Still serving.
        let r = send(
            addr,
            &admin,
            "x-fuzz",
            &Req {
                method: "GET",
                path: "/".into(),
                version: String::new(),
                body: None,
            },
        );
        assert!(r < 500, "{name} after the run: {r}");
        figures.push((name, total, counts));
    }
    assert_eq!(figures.len(), 4);
    region.shutdown().await;
}
