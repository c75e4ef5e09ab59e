//! `POST /reshaper` on both backends: a refused reshape writes nothing (no
//! inventory, allocation, consumer or generation change), a successful one
//! moves inventory and allocations together and the index follows (the
//! moved capacity is offered as candidates from the child).

use serde_json::{json, Value};
use testkit::http::Client;

/// A placement server on the database at `url` (also used by other modules).
pub(crate) async fn start(url: &str) -> placement::Running {
    let cfg = placement::PlacementConfig {
        listen: "127.0.0.1:0".to_owned(),
        database: placement::config::DatabaseConfig {
            connection: url.to_owned(),
            max_connections: 2,
        },
        ..Default::default()
    };
    placement::serve(&cfg, None).await.expect("placement")
}

/// Runs the blocking client `scenario` against a placement server on the
/// database at `url` (also used by other modules).
pub(crate) async fn drive(url: &str, scenario: fn(std::net::SocketAddr)) {
    let running = start(url).await;
    let addr = running.addr;
    tokio::task::spawn_blocking(move || scenario(addr))
        .await
        .unwrap();
}

fn uuid() -> String {
    fabric::ids::ProviderUuid::new_random().to_string()
}

pub(crate) fn call(c: &mut Client, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let body = body.map(|b| b.to_string());
    let r = c.request(method, path, body.as_deref()).unwrap();
    let v = serde_json::from_str(&r.body).unwrap_or(Value::Null);
    (r.status, v)
}

fn scenario(mut c: Client) {
    let root = uuid();
    let child = uuid();
    let (s, v) = call(
        &mut c,
        "POST",
        "/resource_providers",
        Some(json!({"name": "cn", "uuid": root})),
    );
    assert_eq!(s, 200, "{v}");
    let (s, v) = call(
        &mut c,
        "PUT",
        &format!("/resource_providers/{root}/inventories"),
        Some(
            json!({"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 1024}}}),
        ),
    );
    assert_eq!(s, 200, "{v}");
    let consumer = uuid();
    let (s, v) = call(
        &mut c,
        "PUT",
        &format!("/allocations/{consumer}"),
        Some(
            json!({"allocations": {root.clone(): {"resources": {"VCPU": 6, "MEMORY_MB": 512}}},
            "project_id": "p", "user_id": "u", "consumer_generation": null, "consumer_type": "INSTANCE"}),
        ),
    );
    assert_eq!(s, 204, "{v}");
    let (s, v) = call(
        &mut c,
        "POST",
        "/resource_providers",
        Some(json!({"name": "numa0", "uuid": child, "parent_provider_uuid": root})),
    );
    assert_eq!(s, 200, "{v}");

    // Root is at generation 2 (inventory, allocation), the child at 0.
    let reshape = |child_vcpu: u64| {
        json!({
            "inventories": {
                root.clone(): {"resource_provider_generation": 2, "inventories": {"MEMORY_MB": {"total": 1024}}},
                child.clone(): {"resource_provider_generation": 0, "inventories": {"VCPU": {"total": child_vcpu}}},
            },
            "allocations": {
                consumer.clone(): {
                    "allocations": {
                        root.clone(): {"resources": {"MEMORY_MB": 512}},
                        child.clone(): {"resources": {"VCPU": 6}},
                    },
                    "project_id": "p", "user_id": "u", "consumer_generation": 1, "consumer_type": "INSTANCE",
                },
            },
        })
    };
    // Too little VCPU on the child: refused, and nothing changed.
    let (s, v) = call(&mut c, "POST", "/reshaper", Some(reshape(4)));
    assert_eq!(s, 409, "{v}");
    let (_, v) = call(
        &mut c,
        "GET",
        &format!("/resource_providers/{root}/inventories"),
        None,
    );
    assert_eq!(v["resource_provider_generation"], 2, "{v}");
    assert_eq!(v["inventories"]["VCPU"]["total"], 8, "{v}");
    let (_, v) = call(
        &mut c,
        "GET",
        &format!("/resource_providers/{child}/inventories"),
        None,
    );
    assert_eq!(v["resource_provider_generation"], 0, "{v}");
    assert_eq!(v["inventories"], json!({}), "{v}");
    let (_, v) = call(&mut c, "GET", &format!("/allocations/{consumer}"), None);
    assert_eq!(v["consumer_generation"], 1, "{v}");
    assert_eq!(v["allocations"][&root]["resources"]["VCPU"], 6, "{v}");

    // Enough: inventory and allocations move together.
    let (s, v) = call(&mut c, "POST", "/reshaper", Some(reshape(8)));
    assert_eq!(s, 204, "{v}");
    let (_, v) = call(
        &mut c,
        "GET",
        &format!("/resource_providers/{root}/usages"),
        None,
    );
    assert_eq!(v["usages"], json!({"MEMORY_MB": 512}), "{v}");
    assert_eq!(v["resource_provider_generation"], 5, "{v}");
    let (_, v) = call(
        &mut c,
        "GET",
        &format!("/resource_providers/{child}/usages"),
        None,
    );
    assert_eq!(v["usages"], json!({"VCPU": 6}), "{v}");
    assert_eq!(v["resource_provider_generation"], 3, "{v}");
    let (_, v) = call(&mut c, "GET", &format!("/allocations/{consumer}"), None);
    assert_eq!(v["consumer_generation"], 2, "{v}");

    // The index followed: the child offers the 2 VCPU left, no more.
    let (s, v) = call(
        &mut c,
        "GET",
        "/allocation_candidates?resources=VCPU:2",
        None,
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["allocation_requests"].as_array().map(Vec::len),
        Some(1),
        "{v}"
    );
    assert!(v["provider_summaries"][&child].is_object(), "{v}");
    let (_, v) = call(
        &mut c,
        "GET",
        "/allocation_candidates?resources=VCPU:3",
        None,
    );
    assert_eq!(v["allocation_requests"], json!([]), "{v}");
}

fn client(addr: std::net::SocketAddr) -> Client {
    Client::new(addr)
        .with_header("x-auth-token", "admin")
        .with_header("openstack-api-version", "placement 1.39")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reshape_is_atomic_sqlite() {
    let db = testkit::sqlite("placement_reshaper");
    let running = start(&db.url).await;
    let addr = running.addr;
    tokio::task::spawn_blocking(move || scenario(client(addr)))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reshape_is_atomic_postgres() {
    let Some(db) = testkit::postgres("placement_reshaper").await else {
        return;
    };
    let running = start(&db.url).await;
    let addr = running.addr;
    tokio::task::spawn_blocking(move || scenario(client(addr)))
        .await
        .unwrap();
}
