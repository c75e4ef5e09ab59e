//! Claims of new consumers (`PUT /allocations/{consumer}` with
//! `consumer_generation: null` on one provider) on PostgreSQL commit as one
//! statement; every case that statement does not cover — missing project or
//! user rows, a new consumer type, a full provider, a consumer that exists —
//! goes the transaction way with upstream's answers, and a refused claim
//! writes nothing. The `placement_allocation_writes_total` counter tells the
//! two paths apart.

use std::net::SocketAddr;

use serde_json::{json, Value};
use testkit::http::Client;

use crate::reshaper::call;

fn uuid() -> String {
    fabric::ids::ConsumerUuid::new_random().to_string()
}

/// Committed allocation writes by path, from `/metrics`.
fn writes(c: &mut Client) -> (u64, u64) {
    let r = c.request("GET", "/metrics", None).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let count = |path: &str| {
        let prefix = format!("placement_allocation_writes_total{{path=\"{path}\"}} ");
        r.body
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map_or(0, |v| v.trim().parse().unwrap())
    };
    (count("single_statement"), count("transaction"))
}

fn claim(rp: &str, resources: Value, project: &str, consumer_type: Option<&str>) -> Value {
    json!({
        "allocations": {rp: {"resources": resources}},
        "project_id": project, "user_id": "u", "consumer_generation": null,
        "consumer_type": consumer_type.unwrap_or("INSTANCE"),
    })
}

fn scenario(addr: SocketAddr) {
    let mut c = Client::new(addr)
        .with_header("x-auth-token", "admin")
        .with_header("openstack-api-version", "placement 1.39");
    let rp = uuid();
    let (s, v) = call(
        &mut c,
        "POST",
        "/resource_providers",
        Some(json!({"name": "cn1", "uuid": rp})),
    );
    assert_eq!(s, 200, "{v}");
    let (s, v) = call(
        &mut c,
        "PUT",
        &format!("/resource_providers/{rp}/inventories"),
        Some(json!({"resource_provider_generation": 0, "inventories": {
            "VCPU": {"total": 4}, "MEMORY_MB": {"total": 1024, "step_size": 256}}})),
    );
    assert_eq!(s, 200, "{v}");
    let generation = |c: &mut Client| {
        let (s, v) = call(c, "GET", &format!("/resource_providers/{rp}"), None);
        assert_eq!(s, 200, "{v}");
        v["generation"].as_u64().unwrap()
    };
    let expect = |c: &mut Client, single: u64, transaction: u64, what: &str| {
        assert_eq!(
            writes(c),
            (single, transaction),
            "writes by path after {what}"
        );
    };

    // Project "p", user "u" and consumer type INSTANCE have no rows yet:
    // the transaction path creates them.
    let (s, v) = call(
        &mut c,
        "PUT",
        &format!("/allocations/{}", uuid()),
        Some(claim(&rp, json!({"VCPU": 1, "MEMORY_MB": 256}), "p", None)),
    );
    assert_eq!(s, 204, "{v}");
    expect(&mut c, 0, 1, "the first claim");

    // Now they exist: one statement.
    let second = uuid();
    let (s, v) = call(
        &mut c,
        "PUT",
        &format!("/allocations/{second}"),
        Some(claim(&rp, json!({"VCPU": 1, "MEMORY_MB": 256}), "p", None)),
    );
    assert_eq!(s, 204, "{v}");
    expect(&mut c, 1, 1, "the second claim");
    let (s, v) = call(&mut c, "GET", &format!("/allocations/{second}"), None);
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["consumer_generation"], 1, "{v}");
    assert_eq!(v["project_id"], "p", "{v}");
    assert_eq!(
        v["allocations"][&rp]["resources"],
        json!({"VCPU": 1, "MEMORY_MB": 256}),
        "{v}"
    );

    // A consumer type nobody used yet: the transaction path creates it; the
    // next claim of that type is one statement again.
    for (n, single, transaction) in [(0, 1, 2), (1, 2, 2)] {
        let (s, v) = call(
            &mut c,
            "PUT",
            &format!("/allocations/{}", uuid()),
            Some(claim(&rp, json!({"VCPU": 1}), "p", Some("MIGRATION"))),
        );
        assert_eq!(s, 204, "claim {n} of type MIGRATION: {v}");
        expect(&mut c, single, transaction, "a MIGRATION claim");
    }

    // The provider is full (4 VCPU used): refused with upstream's message,
    // nothing written, generation unchanged.
    let before = generation(&mut c);
    let refused = uuid();
    let (s, v) = call(
        &mut c,
        "PUT",
        &format!("/allocations/{refused}"),
        Some(claim(&rp, json!({"VCPU": 1}), "p", None)),
    );
    assert_eq!(s, 409, "{v}");
    let detail = v["errors"][0]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("The requested amount would exceed the capacity."),
        "{v}"
    );
    // A step size the amount does not meet, on the same path.
    let (s, v) = call(
        &mut c,
        "PUT",
        &format!("/allocations/{refused}"),
        Some(claim(&rp, json!({"MEMORY_MB": 100}), "p", None)),
    );
    assert_eq!(s, 409, "{v}");
    let detail = v["errors"][0]["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("step_size 256"), "{v}");
    assert_eq!(generation(&mut c), before, "a refused claim bumps nothing");
    let (s, v) = call(&mut c, "GET", &format!("/allocations/{refused}"), None);
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["allocations"], json!({}), "{v}");

    // A consumer that exists, claimed as new: 409 consumer generation
    // conflict, its allocations untouched.
    let (s, v) = call(
        &mut c,
        "PUT",
        &format!("/allocations/{second}"),
        Some(claim(&rp, json!({"MEMORY_MB": 256}), "p", None)),
    );
    assert_eq!(s, 409, "{v}");
    assert_eq!(v["errors"][0]["code"], "placement.concurrent_update", "{v}");
    let (s, v) = call(&mut c, "GET", &format!("/allocations/{second}"), None);
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["allocations"][&rp]["resources"],
        json!({"VCPU": 1, "MEMORY_MB": 256}),
        "{v}"
    );
    expect(&mut c, 2, 2, "the refused claims");

    // Usage and the index follow the single-statement writes.
    let (s, v) = call(
        &mut c,
        "GET",
        &format!("/resource_providers/{rp}/usages"),
        None,
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["usages"], json!({"VCPU": 4, "MEMORY_MB": 512}), "{v}");
    let (s, v) = call(
        &mut c,
        "GET",
        "/allocation_candidates?resources=VCPU:1",
        None,
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["allocation_requests"],
        json!([]),
        "a full provider is no candidate: {v}"
    );
    let (s, v) = call(
        &mut c,
        "GET",
        "/allocation_candidates?resources=MEMORY_MB:512",
        None,
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["provider_summaries"][&rp]["resources"]["MEMORY_MB"]["used"], 512,
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_consumer_claims_take_one_statement_postgres() {
    let Some(db) = testkit::postgres("placement_claims").await else {
        return;
    };
    let cfg = placement::PlacementConfig {
        listen: "127.0.0.1:0".to_owned(),
        database: placement::config::DatabaseConfig {
            connection: db.url.clone(),
            max_connections: 2,
        },
        ..Default::default()
    };
    let telemetry = fabric::telemetry::init(
        "placement",
        &fabric::config::TelemetryConfig {
            log_filter: "warn".to_owned(),
            ..Default::default()
        },
    )
    .expect("telemetry");
    let running = placement::serve(&cfg, Some(telemetry))
        .await
        .expect("placement");
    let addr = running.addr;
    tokio::task::spawn_blocking(move || scenario(addr))
        .await
        .unwrap();
}
