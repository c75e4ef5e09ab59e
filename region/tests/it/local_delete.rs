//! Deleting a server whose compute host is down (issue 6), on an
//! in-process region (`region::Region`): upstream's "local delete".
//!
//! Two servers are booted onto the two hosts of cell1. The host of one is
//! stopped (`HostHandle::shutdown`) and its compute service forced down
//! through `PUT /os-services/{id}` (2.53; the region's service down time is
//! the scheduler's 60 s, too long to wait for). Deleting that server
//! answers 204 and it is gone at once: 404 on show, not listed, its
//! allocations removed, its quota usage released, and its `delete` action
//! recorded with the `api_local_delete` event (Success). The other server,
//! on a host that is up, is deleted the normal way (the compute's
//! `compute_terminate_instance` event). A server that never reached a host
//! (ERROR in cell0) is deleted locally too. When the stopped host comes
//! back the locally deleted server stays deleted and unallocated.
//!
//! Runs on the embedded default (SQLite files, `inproc://` buses) and on
//! PostgreSQL and RabbitMQ.

use std::sync::Arc;
use std::time::{Duration, Instant};

use region::{Region, RegionConfig};
use serde_json::{json, Value};

/// Longest one build or one normal delete may take.
pub(crate) const WITHIN: Duration = Duration::from_secs(20);

pub(crate) struct Api {
    pub(crate) http: reqwest::Client,
    pub(crate) compute: String,
    pub(crate) placement: String,
    pub(crate) admin: String,
}

impl Api {
    /// The region's Compute and Placement APIs, as its administrator.
    pub(crate) async fn admin_of(region: &Region) -> Api {
        let identity = format!("http://{}", region.identity.addr);
        let admin = region::password_token(&identity, &region.admin)
            .await
            .expect("admin token")
            .0;
        Api {
            http: reqwest::Client::new(),
            compute: format!("http://{}", region.compute.addr),
            placement: format!("http://{}", region.placement.addr),
            admin,
        }
    }

    pub(crate) async fn call(
        &self,
        method: &str,
        path: &str,
        mv: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let url = format!("{}{path}", self.compute);
        let mut req = self
            .http
            .request(method.parse().expect("method"), &url)
            .header("x-auth-token", &self.admin)
            .header("openstack-api-version", format!("compute {mv}"));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        let v = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        (status, v)
    }

    /// Posts a create (admin, m1.tiny) into `zone` (empty: anywhere); the
    /// id.
    pub(crate) async fn create(&self, name: &str, zone: &str) -> String {
        let mut server = json!({
            "name": name,
            "flavorRef": "1",
            "imageRef": "cirros-0.6.2-x86_64-disk",
        });
        if !zone.is_empty() {
            server["availability_zone"] = json!(zone);
        }
        let (status, v) = self
            .call(
                "POST",
                "/v2.1/servers",
                "2.1",
                Some(json!({ "server": server })),
            )
            .await;
        assert_eq!(status, 202, "boot {name}: {v}");
        v["server"]["id"].as_str().expect("id").to_owned()
    }

    /// Boots (admin, m1.tiny) onto `zone` (empty: anywhere) and waits
    /// until ACTIVE or ERROR; returns the id and the server.
    pub(crate) async fn boot(&self, name: &str, zone: &str) -> (String, Value) {
        let id = self.create(name, zone).await;
        let deadline = Instant::now() + WITHIN;
        loop {
            let (status, v) = self.show(&id).await;
            assert_eq!(status, 200, "show {id}: {v}");
            let st = v["server"]["status"].as_str().unwrap_or_default();
            if st == "ACTIVE" || st == "ERROR" {
                return (id, v["server"].clone());
            }
            assert!(Instant::now() < deadline, "{id} not settled: {v}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) async fn show(&self, id: &str) -> (u16, Value) {
        self.call("GET", &format!("/v2.1/servers/{id}"), "2.1", None)
            .await
    }

    pub(crate) async fn delete(&self, id: &str) {
        let (status, v) = self
            .call("DELETE", &format!("/v2.1/servers/{id}"), "2.1", None)
            .await;
        assert_eq!(status, 204, "delete {id}: {v}");
    }

    pub(crate) async fn listed(&self) -> Vec<String> {
        let (status, v) = self.call("GET", "/v2.1/servers", "2.1", None).await;
        assert_eq!(status, 200, "{v}");
        v["servers"]
            .as_array()
            .expect("servers")
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_owned())
            .collect()
    }

    pub(crate) async fn instances_used(&self) -> i64 {
        let (status, v) = self.call("GET", "/v2.1/limits", "2.1", None).await;
        assert_eq!(status, 200, "{v}");
        v["limits"]["absolute"]["totalInstancesUsed"]
            .as_i64()
            .expect("totalInstancesUsed")
    }

    pub(crate) async fn allocations(&self, id: &str) -> Value {
        let resp = self
            .http
            .get(format!("{}/allocations/{id}", self.placement))
            .header("x-auth-token", &self.admin)
            .header("openstack-api-version", "placement 1.28")
            .send()
            .await
            .expect("placement");
        assert_eq!(resp.status().as_u16(), 200);
        resp.json::<Value>().await.expect("allocations")["allocations"].clone()
    }

    /// The events of the server's `delete` action (2.21: actions of
    /// deleted servers).
    pub(crate) async fn delete_events(&self, id: &str) -> Vec<Value> {
        let (status, v) = self
            .call(
                "GET",
                &format!("/v2.1/servers/{id}/os-instance-actions"),
                "2.21",
                None,
            )
            .await;
        assert_eq!(status, 200, "{v}");
        let actions = v["instanceActions"].as_array().expect("actions");
        let del: Vec<&Value> = actions.iter().filter(|a| a["action"] == "delete").collect();
        assert_eq!(del.len(), 1, "{v}");
        let rid = del[0]["request_id"].as_str().expect("request id");
        let (status, v) = self
            .call(
                "GET",
                &format!("/v2.1/servers/{id}/os-instance-actions/{rid}"),
                "2.21",
                None,
            )
            .await;
        assert_eq!(status, 200, "{v}");
        v["instanceAction"]["events"]
            .as_array()
            .expect("events")
            .clone()
    }

    /// Forces the compute service of `host` down (or up again), 2.53.
    pub(crate) async fn force_down(&self, host: &str, down: bool) {
        let (status, v) = self
            .call(
                "GET",
                &format!("/v2.1/os-services?host={host}&binary=nova-compute"),
                "2.53",
                None,
            )
            .await;
        assert_eq!(status, 200, "{v}");
        let id = v["services"][0]["id"].as_str().expect("service uuid");
        let (status, v) = self
            .call(
                "PUT",
                &format!("/v2.1/os-services/{id}"),
                "2.53",
                Some(json!({ "forced_down": down })),
            )
            .await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["service"]["forced_down"], json!(down), "{v}");
        assert_eq!(
            v["service"]["state"],
            json!(if down { "down" } else { "up" }),
            "{v}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_on_a_down_host_is_deleted_locally() {
    let dir = testkit::temp_dir("local_delete");
    local_delete(RegionConfig::default(), dir).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_on_a_down_host_is_deleted_locally_on_postgresql_and_rabbitmq() {
    let Some(cfg) = crate::production_config("local_delete_pg").await else {
        return;
    };
    local_delete(cfg, testkit::temp_dir("local_delete_pg")).await;
}

async fn local_delete(mut cfg: RegionConfig, dir: std::path::PathBuf) {
    cfg.region.data_dir = dir.clone();
    cfg.region.cells = 1;
    cfg.region.hosts_per_cell = 2;
    cfg.region.fake_spawn_latency_ms = 20;
    cfg.region.heartbeat_interval_secs = 1;
    crate::ephemeral_ports(&mut cfg);
    let mut region = Region::start(&cfg, None).await.expect("start the region");
    let api = Api::admin_of(&region).await;
    let (down_host, up_host) = ("cell1-host01", "cell1-host02");
    let (stranded, s) = api.boot("stranded", &format!("nova:{down_host}")).await;
    assert_eq!(s["status"], "ACTIVE", "{s}");
    assert_eq!(s["OS-EXT-SRV-ATTR:host"], down_host, "{s}");
    let (healthy, s) = api.boot("healthy", &format!("nova:{up_host}")).await;
    assert_eq!(s["status"], "ACTIVE", "{s}");
    assert_eq!(s["OS-EXT-SRV-ATTR:host"], up_host, "{s}");
    for id in [&stranded, &healthy] {
        assert!(
            api.allocations(id)
                .await
                .as_object()
                .is_some_and(|a| !a.is_empty()),
            "{id} has no allocation"
        );
    }
    let used = api.instances_used().await;
    assert_eq!(used, 2);

    // Stop the stranded server's host; force its service down.
    let i = region.cells[0]
        .hosts
        .iter()
        .position(|h| h.host() == down_host)
        .expect("the host");
    region.cells[0].hosts.remove(i).shutdown().await;
    api.force_down(down_host, true).await;

    // Gone at once: no waiting for a compute.
    api.delete(&stranded).await;
    let (status, v) = api.show(&stranded).await;
    assert_eq!(status, 404, "{v}");
    assert_eq!(v["itemNotFound"]["code"], 404, "{v}");
    assert!(!api.listed().await.contains(&stranded));
    assert_eq!(api.allocations(&stranded).await, json!({}));
    assert_eq!(api.instances_used().await, 1);
    let events = api.delete_events(&stranded).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["event"], "api_local_delete", "{events:?}");
    assert_eq!(events[0]["result"], "Success", "{events:?}");
    // A second delete: 404, as for any deleted server.
    let (status, v) = api
        .call("DELETE", &format!("/v2.1/servers/{stranded}"), "2.1", None)
        .await;
    assert_eq!(status, 404, "{v}");

    // The server on the host that is up goes the normal way: through its
    // compute, which destroys the guest.
    assert!(region.cells[0]
        .hypervisor
        .guests(up_host)
        .iter()
        .any(|g| g.to_string() == healthy));
    api.delete(&healthy).await;
    let deadline = Instant::now() + WITHIN;
    while api.show(&healthy).await.0 != 404 {
        assert!(Instant::now() < deadline, "{healthy} not deleted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let events = api.delete_events(&healthy).await;
    let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(names, ["compute_terminate_instance"], "{events:?}");
    assert_eq!(api.allocations(&healthy).await, json!({}));
    assert!(!region.cells[0]
        .hypervisor
        .guests(up_host)
        .iter()
        .any(|g| g.to_string() == healthy));
    assert_eq!(api.instances_used().await, 0);

    // A server that never reached a host (no valid host: ERROR in cell0)
    // is deleted locally as well, its action recorded in cell0.
    let (nowhere, s) = api.boot("nowhere", "nova:no-such-host").await;
    assert_eq!(s["status"], "ERROR", "{s}");
    api.delete(&nowhere).await;
    assert_eq!(api.show(&nowhere).await.0, 404);
    let events = api.delete_events(&nowhere).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["event"], "api_local_delete", "{events:?}");
    assert_eq!(api.instances_used().await, 0);

    // The host comes back: the locally deleted server stays deleted and
    // unallocated (the conductor refuses updates of deleted instances).
    let placement_url = format!("http://{}", region.placement.addr);
    let compute_placement: Arc<dyn compute::placement::Placement> = Arc::new(
        compute::placement::HttpPlacement::with_token(&placement_url, region.service_token.clone())
            .expect("compute placement"),
    );
    let mut hc = compute::HostConfig::new(down_host);
    hc.heartbeat_interval = Duration::from_secs(1);
    let back = compute::start_host(
        hc,
        region.cells[0].bus.clone(),
        region.cells[0].hypervisor.driver(down_host),
        compute_placement,
    );
    tokio::time::timeout(Duration::from_secs(30), back.ready())
        .await
        .expect("the host registers again in time")
        .expect("the host registers again");
    region.cells[0].hosts.push(back);
    api.force_down(down_host, false).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(api.show(&stranded).await.0, 404);
    assert!(!api.listed().await.contains(&stranded));
    assert_eq!(api.allocations(&stranded).await, json!({}));
    assert_eq!(api.instances_used().await, 0);

    region.shutdown().await;
    std::fs::remove_dir_all(&dir).ok();
}
