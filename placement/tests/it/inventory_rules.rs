//! Inventory rules, as upstream Placement has them, on both backends: an
//! inventory may shrink below what is allocated from it (the provider is
//! then over capacity and takes no new allocation of that class until its
//! usage fits again), but it cannot be removed while allocated from (409
//! `placement.inventory.inuse`, nothing written).

use std::net::SocketAddr;

use testkit::http::Client;

use crate::reshaper::drive;

fn inventory(total: u64, generation: u64) -> String {
    format!(
        r#"{{"resource_provider_generation": {generation}, "inventories": {{"VCPU": {{"total": {total}}}}}}}"#
    )
}

fn allocation(rp: &str, vcpu: u64) -> String {
    format!(
        r#"{{"allocations": {{"{rp}": {{"resources": {{"VCPU": {vcpu}}}}}}}, "project_id": "p", "user_id": "u",
            "consumer_generation": null, "consumer_type": "INSTANCE"}}"#
    )
}

/// The rules, through the HTTP API of the server at `addr` (blocking).
fn shrink_rules(addr: SocketAddr) {
    let mut c = Client::new(addr)
        .with_header("x-auth-token", "admin")
        .with_header("openstack-api-version", "placement 1.39");
    let rp = fabric::ids::ProviderUuid::new_random().to_string();
    let r = c
        .request(
            "POST",
            "/resource_providers",
            Some(&format!(r#"{{"name": "cn", "uuid": "{rp}"}}"#)),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let invs = format!("/resource_providers/{rp}/inventories");
    let r = c.request("PUT", &invs, Some(&inventory(4, 0))).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let consumer = fabric::ids::ConsumerUuid::new_random();
    let r = c
        .request(
            "PUT",
            &format!("/allocations/{consumer}"),
            Some(&allocation(&rp, 3)),
        )
        .unwrap();
    assert_eq!(r.status, 204, "{}", r.body);

    // Provider generation is now 2 (inventory, then the allocation).
    // Shrinking below the usage of 3 is allowed, whole or per class.
    let r = c.request("PUT", &invs, Some(&inventory(2, 2))).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let r = c
        .request(
            "PUT",
            &format!("{invs}/VCPU"),
            Some(r#"{"resource_provider_generation": 3, "total": 1}"#),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let r = c
        .request("GET", &format!("/resource_providers/{rp}/usages"), None)
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["usages"]["VCPU"], 3, "{}", r.body);

    // Over capacity: no new allocation fits, and the provider is no
    // candidate for one.
    let other = fabric::ids::ConsumerUuid::new_random();
    let r = c
        .request(
            "PUT",
            &format!("/allocations/{other}"),
            Some(&allocation(&rp, 1)),
        )
        .unwrap();
    assert_eq!(r.status, 409, "{}", r.body);
    let r = c
        .request("GET", "/allocation_candidates?resources=VCPU:1", None)
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(
        v["allocation_requests"],
        serde_json::json!([]),
        "{}",
        r.body
    );

    // Removing the allocated class is refused, and nothing is written.
    let r = c
        .request(
            "PUT",
            &invs,
            Some(r#"{"resource_provider_generation": 4, "inventories": {}}"#),
        )
        .unwrap();
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(r.body.contains("placement.inventory.inuse"), "{}", r.body);
    let r = c.request("DELETE", &format!("{invs}/VCPU"), None).unwrap();
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(r.body.contains("placement.inventory.inuse"), "{}", r.body);
    let r = c.request("GET", &invs, None).unwrap();
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["inventories"]["VCPU"]["total"], 1, "{}", r.body);
    assert_eq!(v["resource_provider_generation"], 4, "{}", r.body);

    // Once the usage fits again, allocations fit again.
    let r = c.request("PUT", &invs, Some(&inventory(4, 4))).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let r = c
        .request(
            "PUT",
            &format!("/allocations/{other}"),
            Some(&allocation(&rp, 1)),
        )
        .unwrap();
    assert_eq!(r.status, 204, "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inventory_may_shrink_below_usage_sqlite() {
    let db = testkit::sqlite("placement_inventory_shrink");
    drive(&db.url, shrink_rules).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inventory_may_shrink_below_usage_postgres() {
    let Some(db) = testkit::postgres("placement_inventory_shrink").await else {
        return;
    };
    drive(&db.url, shrink_rules).await;
}
