//! Requests whose SQL would hold an empty `IN ()` list, on both backends:
//! SQLite accepts one (it matches nothing), PostgreSQL rejects it as a
//! syntax error, which once answered these requests with a 500.

use std::net::SocketAddr;

use testkit::http::Client;

use crate::reshaper::drive;

fn requests(addr: SocketAddr) {
    let mut c = Client::new(addr)
        .with_header("x-auth-token", "admin")
        .with_header("openstack-api-version", "placement 1.39");

    // `name=in:` names no trait, so none matches.
    for q in ["in:", "in:,"] {
        let r = c
            .request("GET", &format!("/traits?name={q}"), None)
            .unwrap();
        assert_eq!(r.status, 200, "{q}: {}", r.body);
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(v["traits"], serde_json::json!([]), "{q}: {}", r.body);
    }

    // A reshape that writes no consumer's allocations (`{}`) but removes an
    // allocated class: 409 `placement.inventory.inuse`, as upstream.
    let rp = fabric::ids::ProviderUuid::new_random().to_string();
    let r = c
        .request(
            "POST",
            "/resource_providers",
            Some(&format!(r#"{{"name": "cn", "uuid": "{rp}"}}"#)),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let r = c
        .request(
            "PUT",
            &format!("/resource_providers/{rp}/inventories"),
            Some(
                r#"{"resource_provider_generation": 0,
                    "inventories": {"VCPU": {"total": 4}, "DISK_GB": {"total": 10}}}"#,
            ),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let consumer = fabric::ids::ConsumerUuid::new_random();
    let r = c
        .request(
            "PUT",
            &format!("/allocations/{consumer}"),
            Some(&format!(
                r#"{{"allocations": {{"{rp}": {{"resources": {{"DISK_GB": 5}}}}}},
                    "project_id": "p", "user_id": "u", "consumer_generation": null,
                    "consumer_type": "INSTANCE"}}"#
            )),
        )
        .unwrap();
    assert_eq!(r.status, 204, "{}", r.body);
    let r = c
        .request(
            "POST",
            "/reshaper",
            Some(&format!(
                r#"{{"inventories": {{"{rp}": {{"resource_provider_generation": 2,
                    "inventories": {{"VCPU": {{"total": 1}}}}}}}}, "allocations": {{}}}}"#
            )),
        )
        .unwrap();
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(r.body.contains("placement.inventory.inuse"), "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_in_lists_sqlite() {
    let db = testkit::sqlite("placement_empty_in_lists");
    drive(&db.url, requests).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_in_lists_postgres() {
    let Some(db) = testkit::postgres("placement_empty_in_lists").await else {
        return;
    };
    drive(&db.url, requests).await;
}
