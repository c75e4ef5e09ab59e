//! A down cell is degraded, not broken (issue 31), on PostgreSQL +
//! RabbitMQ: with cell2's database refusing connections (its sessions
//! ended, as a stopped server does), `os-services` at 2.69 shows cell2's
//! compute as `UNKNOWN`, creates go on in cell1 and end ACTIVE, quota
//! still counts the down cell's server (usage comes from the API
//! database's mappings, not from the cells), so a create past the quota is
//! refused, and a list at 2.69 shows that server as a partial record. Once
//! the database is back, its server shows ACTIVE again.

use std::time::{Duration, Instant};

use region::Region;
use serde_json::{json, Value};
use sqlx::Connection;

use crate::local_delete::Api;

/// Lets connections to `db` in (`true`) or refuses them and ends its
/// sessions (`false`).
async fn allow_connections(db: &str, allow: bool) {
    let mut c = sqlx::PgConnection::connect(&testkit::pg_admin_url())
        .await
        .expect("admin connection");
    sqlx::query(&format!(
        "ALTER DATABASE \"{db}\" ALLOW_CONNECTIONS {allow}"
    ))
    .execute(&mut c)
    .await
    .expect("alter database");
    if !allow {
        sqlx::query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = $1 AND pid <> pg_backend_pid()",
        )
        .bind(db)
        .execute(&mut c)
        .await
        .expect("end the sessions");
    }
}

/// The `status` of `host`'s compute service at 2.69.
async fn service_status(api: &Api, host: &str) -> Value {
    let (status, v) = api
        .call("GET", "/v2.1/os-services?binary=nova-compute", "2.69", None)
        .await;
    assert_eq!(status, 200, "{v}");
    v["services"]
        .as_array()
        .expect("services")
        .iter()
        .find(|s| s["host"] == host)
        .map(|s| s["status"].clone())
        .unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_down_cell_is_degraded_not_broken_on_postgresql_and_rabbitmq() {
    let Some(mut cfg) = crate::production_config("down_cell").await else {
        return;
    };
    // production_config made cell1's database and vhost; cell2's too.
    let Some(cell2) = testkit::postgres("down_cell_cell2").await else {
        return;
    };
    if testkit::rabbitmq("down_cell_cell2").is_none() {
        return;
    }
    cfg.region.data_dir = testkit::temp_dir("down_cell");
    cfg.region.cells = 2;
    cfg.region.hosts_per_cell = 1;
    cfg.region.fake_spawn_latency_ms = 10;
    crate::ephemeral_ports(&mut cfg);
    let region = Region::start(&cfg, None).await.expect("start the region");
    let api = Api::admin_of(&region).await;
    let (in2, s) = api.boot("in-cell2", "nova:cell2-host01").await;
    assert_eq!(s["status"], "ACTIVE", "{s}");
    let project = s["tenant_id"].as_str().expect("tenant_id").to_owned();
    let (_, s) = api.boot("in-cell1", "nova:cell1-host01").await;
    assert_eq!(s["status"], "ACTIVE", "{s}");
    assert_eq!(api.instances_used().await, 2);

    allow_connections(&cell2.name, false).await;
    let gone = Instant::now();
    // os-services: cell2's compute is UNKNOWN, cell1's is there as ever.
    while service_status(&api, "cell2-host01").await != "UNKNOWN" {
        assert!(
            gone.elapsed() < Duration::from_secs(20),
            "cell2's compute never shown UNKNOWN: {}",
            service_status(&api, "cell2-host01").await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(service_status(&api, "cell1-host01").await, "enabled");

    // Creates go on in the other cell.
    for n in 0..3 {
        let (id, s) = api.boot(&format!("during-{n}"), "").await;
        assert_eq!(s["status"], "ACTIVE", "{id}: {s}");
        assert_eq!(s["OS-EXT-SRV-ATTR:host"], "cell1-host01", "{s}");
    }
    // Quota still counts the down cell's server.
    assert_eq!(api.instances_used().await, 5);
    let (status, v) = api
        .call(
            "PUT",
            &format!("/v2.1/os-quota-sets/{project}"),
            "2.1",
            Some(json!({"quota_set": {"instances": 5}})),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = api
        .call(
            "POST",
            "/v2.1/servers",
            "2.1",
            Some(json!({"server": {
                "name": "over-quota",
                "flavorRef": "1",
                "imageRef": "cirros-0.6.2-x86_64-disk",
            }})),
        )
        .await;
    assert_eq!(status, 403, "{v}");
    assert!(v.to_string().contains("Quota exceeded"), "{v}");
    // The list at 2.69: the down cell's server as a partial record.
    let (status, v) = api.call("GET", "/v2.1/servers", "2.69", None).await;
    assert_eq!(status, 200, "{v}");
    let listed = v["servers"].as_array().expect("servers");
    assert_eq!(listed.len(), 5, "{v}");
    let partial = listed
        .iter()
        .find(|s| s["id"] == in2.as_str())
        .expect("in2");
    assert_eq!(partial["status"], "UNKNOWN", "{partial}");

    // Back: its server shows ACTIVE again.
    allow_connections(&cell2.name, true).await;
    let back = Instant::now();
    loop {
        let (status, v) = api.show(&in2).await;
        if status == 200 && v["server"]["status"] == "ACTIVE" {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(20),
            "cell2's server not back: {status} {v}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "cell2 down for {:?}; its server ACTIVE again {:?} after the database came back",
        back - gone,
        back.elapsed()
    );
    region.shutdown().await;
}
