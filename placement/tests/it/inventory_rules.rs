//! Inventory rules where we deliberately differ from upstream: an inventory
//! can never shrink below what is allocated from it, and nothing is written
//! when it is refused.

use testkit::http::Client;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inventory_cannot_shrink_below_usage() {
    let db = testkit::sqlite("placement_inventory_shrink");
    let cfg = placement::PlacementConfig {
        listen: "127.0.0.1:0".to_owned(),
        database: placement::config::DatabaseConfig {
            connection: db.url.clone(),
            max_connections: 1,
        },
        ..Default::default()
    };
    let running = placement::serve(&cfg, None).await.expect("placement");
    let addr = running.addr;
    tokio::task::spawn_blocking(move || {
        let mut c = Client::new(addr)
            .with_header("x-auth-token", "admin")
            .with_header("openstack-api-version", "placement 1.39");
        let rp = fabric::ids::ProviderUuid::new_random().to_string();
        let r = c.request("POST", "/resource_providers", Some(&format!(r#"{{"name": "cn", "uuid": "{rp}"}}"#))).unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        let inv = |total: u64, generation: u64| {
            format!(r#"{{"resource_provider_generation": {generation}, "inventories": {{"VCPU": {{"total": {total}}}}}}}"#)
        };
        let r = c.request("PUT", &format!("/resource_providers/{rp}/inventories"), Some(&inv(4, 0))).unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        let consumer = fabric::ids::ConsumerUuid::new_random();
        let alloc = format!(
            r#"{{"allocations": {{"{rp}": {{"resources": {{"VCPU": 3}}}}}}, "project_id": "p", "user_id": "u",
                "consumer_generation": null, "consumer_type": "INSTANCE"}}"#
        );
        let r = c.request("PUT", &format!("/allocations/{consumer}"), Some(&alloc)).unwrap();
        assert_eq!(r.status, 204, "{}", r.body);
        // Provider generation is now 2 (inventory, then the allocation).
        let r = c.request("PUT", &format!("/resource_providers/{rp}/inventories"), Some(&inv(2, 2))).unwrap();
        assert_eq!(r.status, 409, "{}", r.body);
        assert!(r.body.contains("placement.inventory.inuse"), "{}", r.body);
        let r = c.request("PUT", &format!("/resource_providers/{rp}/inventories/VCPU"), Some(r#"{"resource_provider_generation": 2, "total": 2}"#)).unwrap();
        assert_eq!(r.status, 409, "{}", r.body);
        // Nothing was written: total and generation are unchanged.
        let r = c.request("GET", &format!("/resource_providers/{rp}/inventories"), None).unwrap();
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(v["inventories"]["VCPU"]["total"], 4);
        assert_eq!(v["resource_provider_generation"], 2);
        // Growing (or shrinking down to exactly the usage) is fine.
        let r = c.request("PUT", &format!("/resource_providers/{rp}/inventories"), Some(&inv(3, 2))).unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
    })
    .await
    .unwrap();
}
