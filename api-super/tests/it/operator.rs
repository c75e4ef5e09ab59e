//! The operator Compute APIs on an in-process region (two cells of two
//! fake hosts): os-services, os-hypervisors, os-aggregates (with the
//! placement mirror) and os-availability-zone, at the microversions that
//! change them, with their error cases; and the scheduler honouring them
//! (a disabled or forced-down compute takes no builds; a zone from
//! aggregate metadata).

use serde_json::{json, Value};

use crate::common::{self, json as body};
use crate::compute::{placement_get, Region};

/// A request at compute microversion `mv`.
pub(crate) async fn at(
    region: &Region,
    token: &str,
    mv: &str,
    method: &str,
    path: &str,
    b: Option<Value>,
) -> testkit::http::Response {
    common::req(
        region.compute.addr,
        method,
        path,
        &[
            ("x-auth-token", token),
            ("openstack-api-version", &format!("compute {mv}")),
        ],
        b,
    )
    .await
}

/// Asserts Nova's error body of `code` (`badRequest`, `itemNotFound`, ...).
fn fault(r: &testkit::http::Response, status: u16, name: &str) {
    assert_eq!(r.status, status, "{}", r.body);
    let v = body(r);
    assert_eq!(v[name]["code"], status, "{v}");
    assert!(v[name]["message"].is_string(), "{v}");
}

fn services(v: &Value) -> Vec<Value> {
    v["services"].as_array().cloned().unwrap_or_default()
}

fn service_of<'a>(list: &'a [Value], host: &str) -> &'a Value {
    list.iter()
        .find(|s| s["host"] == host)
        .unwrap_or_else(|| panic!("no service of {host} in {list:?}"))
}

async fn boot_on(region: &Region, token: &str, name: &str, az: Option<&str>) -> Value {
    let mut server = json!({"name": name, "flavorRef": "1", "imageRef": crate::compute::IMAGE,
        "networks": "none"});
    if let Some(z) = az {
        server["availability_zone"] = json!(z);
    }
    let r = region
        .call(
            token,
            "POST",
            "/v2.1/servers",
            Some(json!({ "server": server })),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let id = body(&r)["server"]["id"].as_str().unwrap().to_owned();
    let (s, _) = region
        .wait(&id, |s| s["status"] == "ACTIVE" || s["status"] == "ERROR")
        .await;
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn os_services_list_update_and_delete_and_the_scheduler_honours_them() {
    let mut region = Region::start("op_services", 2, 2).await;
    let admin = region.admin.clone();
    let member = region.member.clone();

    // Every cell's services: the computes and the cell conductors.
    let r = at(&region, &admin, "2.53", "GET", "/v2.1/os-services", None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let all = services(&body(&r));
    assert_eq!(all.len(), 6, "{all:?}");
    let conductors: Vec<&Value> = all
        .iter()
        .filter(|s| s["binary"] == "nova-conductor")
        .collect();
    assert_eq!(conductors.len(), 2, "{all:?}");
    assert!(
        conductors.iter().all(|s| s["zone"] == "internal"),
        "{all:?}"
    );
    let r = at(
        &region,
        &admin,
        "2.53",
        "GET",
        "/v2.1/os-services?binary=nova-compute",
        None,
    )
    .await;
    let list = services(&body(&r));
    assert_eq!(list.len(), 4, "{list:?}");
    for s in &list {
        assert_eq!(s["binary"], "nova-compute");
        assert_eq!(s["state"], "up", "{s}");
        assert_eq!(s["status"], "enabled");
        assert_eq!(s["zone"], "nova");
        assert_eq!(s["forced_down"], false);
        assert!(s["disabled_reason"].is_null());
        assert!(
            uuid::Uuid::parse_str(s["id"].as_str().unwrap()).is_ok(),
            "{s}"
        );
        assert!(s["updated_at"].is_string(), "{s}");
    }
    // Integer ids and no forced_down before 2.11 / 2.53.
    let r = at(&region, &admin, "2.10", "GET", "/v2.1/os-services", None).await;
    let old = services(&body(&r));
    assert!(old[0]["id"].is_i64(), "{old:?}");
    assert!(old[0].get("forced_down").is_none(), "{old:?}");
    // Filters.
    let r = at(
        &region,
        &admin,
        "2.53",
        "GET",
        "/v2.1/os-services?host=c1-host2",
        None,
    )
    .await;
    let one = services(&body(&r));
    assert_eq!(one.len(), 1);
    assert_eq!(one[0]["host"], "c1-host2");
    let r = at(
        &region,
        &admin,
        "2.53",
        "GET",
        "/v2.1/os-services?binary=nova-scheduler",
        None,
    )
    .await;
    assert_eq!(services(&body(&r)).len(), 0);
    // Only computes can be switched.
    let cond = conductors[0]["id"].as_str().unwrap();
    let r = at(
        &region,
        &admin,
        "2.53",
        "PUT",
        &format!("/v2.1/os-services/{cond}"),
        Some(json!({"status": "disabled"})),
    )
    .await;
    fault(&r, 400, "badRequest");
    // Admin only.
    let r = at(&region, &member, "2.53", "GET", "/v2.1/os-services", None).await;
    fault(&r, 403, "forbidden");

    let uuid_of = |host: &str| service_of(&list, host)["id"].as_str().unwrap().to_owned();
    let c1h1 = uuid_of("c1-host1");
    let c1h2 = uuid_of("c1-host2");
    let c2h1 = uuid_of("c2-host1");
    let c2h2 = uuid_of("c2-host2");

    // 2.53: PUT /os-services/{uuid}.
    let r = at(
        &region,
        &admin,
        "2.53",
        "PUT",
        &format!("/v2.1/os-services/{c1h1}"),
        Some(json!({"status": "disabled", "disabled_reason": "maintenance"})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let s = &body(&r)["service"];
    assert_eq!(s["status"], "disabled", "{s}");
    assert_eq!(s["disabled_reason"], "maintenance");
    assert_eq!(s["id"], c1h1.as_str());
    for (path, b, status, name) in [
        (
            "/v2.1/os-services/not-a-uuid".to_owned(),
            json!({"status": "disabled"}),
            400,
            "badRequest",
        ),
        (
            format!("/v2.1/os-services/{}", uuid::Uuid::new_v4()),
            json!({"status": "disabled"}),
            404,
            "itemNotFound",
        ),
        (
            format!("/v2.1/os-services/{c1h2}"),
            json!({}),
            400,
            "badRequest",
        ),
        (
            format!("/v2.1/os-services/{c1h2}"),
            json!({"status": "enabled", "disabled_reason": "x"}),
            400,
            "badRequest",
        ),
        (
            format!("/v2.1/os-services/{c1h2}"),
            json!({"status": "off"}),
            400,
            "badRequest",
        ),
        (
            format!("/v2.1/os-services/{c1h2}"),
            json!({"forced_down": "maybe"}),
            400,
            "badRequest",
        ),
    ] {
        let r = at(&region, &admin, "2.53", "PUT", &path, Some(b.clone())).await;
        fault(&r, status, name);
    }
    let r = at(
        &region,
        &member,
        "2.53",
        "PUT",
        &format!("/v2.1/os-services/{c1h2}"),
        Some(json!({"status": "disabled"})),
    )
    .await;
    fault(&r, 403, "forbidden");

    // Before 2.53: the action paths, by host and binary.
    let hb = |extra: Value| {
        let mut b = json!({"host": "c1-host2", "binary": "nova-compute"});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        Some(b)
    };
    let r = at(
        &region,
        &admin,
        "2.11",
        "PUT",
        "/v2.1/os-services/disable-log-reason",
        hb(json!({"disabled_reason": "old api"})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        body(&r)["service"],
        json!({"host": "c1-host2", "binary": "nova-compute", "status": "disabled",
               "disabled_reason": "old api"})
    );
    let r = at(
        &region,
        &admin,
        "2.11",
        "PUT",
        "/v2.1/os-services/disable-log-reason",
        hb(json!({})),
    )
    .await;
    fault(&r, 400, "badRequest");
    let r = at(
        &region,
        &admin,
        "2.10",
        "PUT",
        "/v2.1/os-services/force-down",
        hb(json!({"forced_down": true})),
    )
    .await;
    fault(&r, 404, "itemNotFound");
    let r = at(
        &region,
        &admin,
        "2.11",
        "PUT",
        "/v2.1/os-services/enable",
        Some(json!({"host": "nowhere", "binary": "nova-compute"})),
    )
    .await;
    fault(&r, 404, "itemNotFound");
    let r = at(
        &region,
        &admin,
        "2.11",
        "PUT",
        "/v2.1/os-services/enable",
        Some(json!({"host": "c1-host2"})),
    )
    .await;
    fault(&r, 400, "badRequest");
    let r = at(
        &region,
        &admin,
        "2.53",
        "PUT",
        "/v2.1/os-services/enable",
        hb(json!({})),
    )
    .await;
    fault(&r, 400, "badRequest");
    let r = at(
        &region,
        &admin,
        "2.11",
        "PUT",
        "/v2.1/os-services/force-down",
        Some(json!({"host": "c2-host1", "binary": "nova-compute", "forced_down": true})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(body(&r)["service"]["forced_down"], true);

    let r = at(
        &region,
        &admin,
        "2.53",
        "GET",
        "/v2.1/os-services?binary=nova-compute",
        None,
    )
    .await;
    let now = services(&body(&r));
    assert_eq!(service_of(&now, "c1-host2")["status"], "disabled");
    assert_eq!(service_of(&now, "c1-host2")["disabled_reason"], "old api");
    assert_eq!(service_of(&now, "c2-host1")["state"], "down");
    assert_eq!(service_of(&now, "c2-host1")["forced_down"], true);
    assert_eq!(service_of(&now, "c2-host2")["status"], "enabled");

    // Three computes are disabled or forced down: every build goes to the
    // fourth.
    for i in 0..3 {
        let s = boot_on(&region, &member, &format!("pinned-{i}"), None).await;
        assert_eq!(s["status"], "ACTIVE", "{s}");
        assert_eq!(s["OS-EXT-SRV-ATTR:host"], "c2-host2", "{s}");
    }
    // Disable the fourth too: no valid host.
    let r = at(
        &region,
        &admin,
        "2.53",
        "PUT",
        &format!("/v2.1/os-services/{c2h2}"),
        Some(json!({"status": "disabled"})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let s = boot_on(&region, &member, "nowhere", None).await;
    assert_eq!(s["status"], "ERROR", "{s}");
    assert!(
        s["fault"]["message"]
            .as_str()
            .unwrap()
            .contains("No valid host"),
        "{s}"
    );
    // Enabled again (the reason goes) and back in service.
    let r = at(
        &region,
        &admin,
        "2.53",
        "PUT",
        &format!("/v2.1/os-services/{c1h1}"),
        Some(json!({"status": "enabled"})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        body(&r)["service"]["disabled_reason"].is_null(),
        "{}",
        r.body
    );
    let s = boot_on(&region, &member, "back", None).await;
    assert_eq!(s["OS-EXT-SRV-ATTR:host"], "c1-host1", "{s}");

    // Delete: a compute hosting instances is refused.
    let r = at(
        &region,
        &admin,
        "2.53",
        "DELETE",
        &format!("/v2.1/os-services/{c2h2}"),
        None,
    )
    .await;
    fault(&r, 409, "conflictingRequest");
    let r = at(
        &region,
        &admin,
        "2.53",
        "DELETE",
        "/v2.1/os-services/12",
        None,
    )
    .await;
    fault(&r, 400, "badRequest");
    let r = at(
        &region,
        &admin,
        "2.52",
        "DELETE",
        "/v2.1/os-services/abc",
        None,
    )
    .await;
    fault(&r, 400, "badRequest");
    let r = at(
        &region,
        &admin,
        "2.53",
        "DELETE",
        &format!("/v2.1/os-services/{}", uuid::Uuid::new_v4()),
        None,
    )
    .await;
    fault(&r, 404, "itemNotFound");
    let r = at(
        &region,
        &member,
        "2.53",
        "DELETE",
        &format!("/v2.1/os-services/{c1h2}"),
        None,
    )
    .await;
    fault(&r, 403, "forbidden");
    // c1-host2 hosts nothing: stop it, then delete its service; its node,
    // host mapping and placement provider go too.
    let r = at(
        &region,
        &admin,
        "2.53",
        "GET",
        "/v2.1/os-hypervisors?hypervisor_hostname_pattern=c1-host2",
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let rp = body(&r)["hypervisors"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let h = region.cells[0].1.remove(1);
    h.shutdown().await;
    let r = at(
        &region,
        &admin,
        "2.53",
        "DELETE",
        &format!("/v2.1/os-services/{c1h2}"),
        None,
    )
    .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let r = at(
        &region,
        &admin,
        "2.53",
        "GET",
        "/v2.1/os-services?binary=nova-compute",
        None,
    )
    .await;
    let left = services(&body(&r));
    assert_eq!(left.len(), 3, "{left:?}");
    assert!(left.iter().all(|s| s["host"] != "c1-host2"));
    assert!(region.api.host_cell("c1-host2").await.unwrap().is_none());
    let r = common::req(
        region.placement.addr,
        "GET",
        &format!("/resource_providers/{rp}"),
        &[
            ("x-auth-token", "admin"),
            ("openstack-api-version", "placement 1.36"),
        ],
        None,
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.body);
    let r = at(
        &region,
        &admin,
        "2.53",
        "DELETE",
        &format!("/v2.1/os-services/{c1h2}"),
        None,
    )
    .await;
    fault(&r, 404, "itemNotFound");
    let _ = c2h1;
    region.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn os_hypervisors_by_microversion() {
    let region = Region::start("op_hypervisors", 2, 2).await;
    let admin = region.admin.clone();
    let s = boot_on(&region, &region.member, "hv-vm", None).await;
    assert_eq!(s["status"], "ACTIVE", "{s}");
    let vm_host = s["OS-EXT-SRV-ATTR:host"].as_str().unwrap().to_owned();
    let vm_id = s["id"].as_str().unwrap().to_owned();

    let r = at(&region, &admin, "2.1", "GET", "/v2.1/os-hypervisors", None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let list = body(&r)["hypervisors"].as_array().unwrap().clone();
    assert_eq!(list.len(), 4, "{list:?}");
    assert!(list[0]["id"].is_i64());
    assert_eq!(list[0]["state"], "up");
    assert_eq!(list[0]["status"], "enabled");

    // 2.53: UUID ids, pattern, with_servers.
    let r = at(
        &region,
        &admin,
        "2.53",
        "GET",
        &format!("/v2.1/os-hypervisors?hypervisor_hostname_pattern={vm_host}&with_servers=true"),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let hv = body(&r)["hypervisors"][0].clone();
    assert_eq!(hv["hypervisor_hostname"], vm_host.as_str());
    assert_eq!(
        hv["servers"],
        json!([{"uuid": vm_id, "name": "hv-vm"}]),
        "{hv}"
    );
    let hv_id = hv["id"].as_str().unwrap().to_owned();
    assert!(uuid::Uuid::parse_str(&hv_id).is_ok());
    let r = at(
        &region,
        &admin,
        "2.53",
        "GET",
        "/v2.1/os-hypervisors?hypervisor_hostname_pattern=c1-",
        None,
    )
    .await;
    assert_eq!(body(&r)["hypervisors"].as_array().unwrap().len(), 2);
    let r = at(
        &region,
        &admin,
        "2.53",
        "GET",
        "/v2.1/os-hypervisors?hypervisor_hostname_pattern=zz",
        None,
    )
    .await;
    fault(&r, 404, "itemNotFound");
    let r = at(
        &region,
        &admin,
        "2.53",
        "GET",
        "/v2.1/os-hypervisors?hypervisor_hostname_pattern=c1&limit=1",
        None,
    )
    .await;
    fault(&r, 400, "badRequest");
    let r = at(
        &region,
        &admin,
        "2.53",
        "GET",
        "/v2.1/os-hypervisors?with_servers=perhaps",
        None,
    )
    .await;
    fault(&r, 400, "badRequest");

    // Paging from 2.33.
    let r = at(
        &region,
        &admin,
        "2.53",
        "GET",
        "/v2.1/os-hypervisors?limit=3",
        None,
    )
    .await;
    let v = body(&r);
    let page: Vec<Value> = v["hypervisors"].as_array().unwrap().clone();
    assert_eq!(page.len(), 3);
    let next = v["hypervisors_links"][0]["href"].as_str().unwrap();
    let last = page[2]["id"].as_str().unwrap();
    assert!(next.contains(&format!("marker={last}")), "{next}");
    let r = at(
        &region,
        &admin,
        "2.53",
        "GET",
        &format!("/v2.1/os-hypervisors/detail?marker={last}"),
        None,
    )
    .await;
    assert_eq!(body(&r)["hypervisors"].as_array().unwrap().len(), 1);
    let r = at(
        &region,
        &admin,
        "2.53",
        "GET",
        "/v2.1/os-hypervisors?marker=nope",
        None,
    )
    .await;
    fault(&r, 400, "badRequest");
    let r = at(
        &region,
        &admin,
        "2.53",
        "GET",
        "/v2.1/os-hypervisors?limit=-1",
        None,
    )
    .await;
    fault(&r, 400, "badRequest");

    // Detail: resources below 2.88, cpu_info a string below 2.28.
    let r = at(
        &region,
        &admin,
        "2.87",
        "GET",
        "/v2.1/os-hypervisors/detail",
        None,
    )
    .await;
    let d = body(&r)["hypervisors"][0].clone();
    for k in [
        "vcpus",
        "memory_mb",
        "local_gb",
        "vcpus_used",
        "free_ram_mb",
        "running_vms",
    ] {
        assert!(d[k].is_i64(), "{k} in {d}");
    }
    assert!(d["cpu_info"].is_object(), "{d}");
    assert!(
        uuid::Uuid::parse_str(d["service"]["id"].as_str().unwrap()).is_ok(),
        "{d}"
    );
    let r = at(
        &region,
        &admin,
        "2.27",
        "GET",
        "/v2.1/os-hypervisors/detail",
        None,
    )
    .await;
    let d = body(&r)["hypervisors"][0].clone();
    assert!(d["cpu_info"].is_string(), "{d}");
    assert!(d["service"]["id"].is_i64(), "{d}");
    let r = at(
        &region,
        &admin,
        "2.88",
        "GET",
        "/v2.1/os-hypervisors/detail",
        None,
    )
    .await;
    let d = body(&r)["hypervisors"][0].clone();
    assert!(
        d.get("vcpus").is_none() && d.get("cpu_info").is_none(),
        "{d}"
    );
    assert!(d.get("uptime").is_some(), "{d}");
    assert_eq!(d["hypervisor_type"], "fake", "{d}");

    // Show.
    let r = at(
        &region,
        &admin,
        "2.88",
        "GET",
        &format!("/v2.1/os-hypervisors/{hv_id}?with_servers=1"),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(body(&r)["hypervisor"]["servers"][0]["uuid"], vm_id.as_str());
    let r = at(
        &region,
        &admin,
        "2.53",
        "GET",
        "/v2.1/os-hypervisors/1",
        None,
    )
    .await;
    fault(&r, 400, "badRequest");
    let r = at(
        &region,
        &admin,
        "2.53",
        "GET",
        &format!("/v2.1/os-hypervisors/{}", uuid::Uuid::new_v4()),
        None,
    )
    .await;
    fault(&r, 404, "itemNotFound");
    let r = at(
        &region,
        &admin,
        "2.1",
        "GET",
        "/v2.1/os-hypervisors/abc",
        None,
    )
    .await;
    fault(&r, 404, "itemNotFound");

    // search / servers before 2.53 only.
    let r = at(
        &region,
        &admin,
        "2.52",
        "GET",
        "/v2.1/os-hypervisors/c2-/search",
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(body(&r)["hypervisors"].as_array().unwrap().len(), 2);
    let r = at(
        &region,
        &admin,
        "2.52",
        "GET",
        "/v2.1/os-hypervisors/zz/search",
        None,
    )
    .await;
    fault(&r, 404, "itemNotFound");
    let r = at(
        &region,
        &admin,
        "2.53",
        "GET",
        "/v2.1/os-hypervisors/c2-/search",
        None,
    )
    .await;
    fault(&r, 404, "itemNotFound");
    let r = at(
        &region,
        &admin,
        "2.52",
        "GET",
        &format!("/v2.1/os-hypervisors/{vm_host}/servers"),
        None,
    )
    .await;
    assert_eq!(
        body(&r)["hypervisors"][0]["servers"][0]["uuid"],
        vm_id.as_str(),
        "{}",
        r.body
    );

    // Statistics below 2.88.
    let r = at(
        &region,
        &admin,
        "2.87",
        "GET",
        "/v2.1/os-hypervisors/statistics",
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let st = body(&r)["hypervisor_statistics"].clone();
    assert_eq!(st["count"], 4, "{st}");
    assert_eq!(st["local_gb"], 4000, "{st}");
    assert!(st["vcpus"].as_i64().unwrap() >= 4, "{st}");
    let r = at(
        &region,
        &admin,
        "2.88",
        "GET",
        "/v2.1/os-hypervisors/statistics",
        None,
    )
    .await;
    fault(&r, 404, "itemNotFound");

    for path in [
        "/v2.1/os-hypervisors",
        "/v2.1/os-hypervisors/detail",
        "/v2.1/os-hypervisors/statistics",
    ] {
        let r = at(&region, &region.member, "2.1", "GET", path, None).await;
        fault(&r, 403, "forbidden");
    }
    region.stop().await;
}

async fn provider_aggregates(region: &Region, rp: &str) -> Vec<String> {
    let v = placement_get(
        &region.placement,
        &format!("/resource_providers/{rp}/aggregates"),
    )
    .await;
    v["aggregates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn os_aggregates_zones_and_the_placement_mirror() {
    let region = Region::start("op_aggregates", 2, 2).await;
    let admin = region.admin.clone();
    let member = region.member.clone();
    let agg = |suffix: &str| format!("/v2.1/os-aggregates{suffix}");

    let r = at(
        &region,
        &admin,
        "2.41",
        "POST",
        &agg(""),
        Some(json!({"aggregate": {"name": "rack1", "availability_zone": "az1"}})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let a = body(&r)["aggregate"].clone();
    assert_eq!(a["name"], "rack1");
    assert_eq!(a["availability_zone"], "az1");
    assert!(a.get("hosts").is_none(), "{a}");
    let id = a["id"].as_i64().unwrap();
    let agg_uuid = a["uuid"].as_str().unwrap().to_owned();
    for b in [json!({"aggregate": {"name": "rack1"}})] {
        let r = at(&region, &admin, "2.41", "POST", &agg(""), Some(b)).await;
        fault(&r, 409, "conflictingRequest");
    }
    for b in [
        json!({"aggregate": {}}),
        json!({"aggregate": {"name": ""}}),
        json!({"aggregate": {"name": " padded "}}),
        json!({"aggregate": {"name": "x", "availability_zone": "a:b"}}),
        json!({"aggregate": {"name": "x", "colour": "red"}}),
        json!({"name": "x"}),
    ] {
        let r = at(&region, &admin, "2.41", "POST", &agg(""), Some(b.clone())).await;
        fault(&r, 400, "badRequest");
    }
    let r = at(
        &region,
        &member,
        "2.41",
        "POST",
        &agg(""),
        Some(json!({"aggregate": {"name": "m"}})),
    )
    .await;
    fault(&r, 403, "forbidden");
    let r = at(&region, &member, "2.41", "GET", &agg(""), None).await;
    fault(&r, 403, "forbidden");

    // Show: uuid from 2.41; bad ids.
    let r = at(
        &region,
        &admin,
        "2.40",
        "GET",
        &agg(&format!("/{id}")),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(body(&r)["aggregate"].get("uuid").is_none(), "{}", r.body);
    assert_eq!(body(&r)["aggregate"]["hosts"], json!([]));
    let r = at(&region, &admin, "2.41", "GET", &agg("/abc"), None).await;
    fault(&r, 400, "badRequest");
    let r = at(&region, &admin, "2.41", "GET", &agg("/99999"), None).await;
    fault(&r, 404, "itemNotFound");

    // add_host: mirrored into the host's provider aggregates.
    let r = at(
        &region,
        &admin,
        "2.53",
        "GET",
        "/v2.1/os-hypervisors?hypervisor_hostname_pattern=c1-host1",
        None,
    )
    .await;
    let rp = body(&r)["hypervisors"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(provider_aggregates(&region, &rp).await.is_empty());
    let action = |b: Value| (agg(&format!("/{id}/action")), Some(b));
    let (p, b) = action(json!({"add_host": {"host": "c1-host1"}}));
    let r = at(&region, &admin, "2.41", "POST", &p, b).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(body(&r)["aggregate"]["hosts"], json!(["c1-host1"]));
    assert_eq!(
        provider_aggregates(&region, &rp).await,
        vec![agg_uuid.clone()]
    );
    let (p, b) = action(json!({"add_host": {"host": "c1-host1"}}));
    fault(
        &at(&region, &admin, "2.41", "POST", &p, b).await,
        409,
        "conflictingRequest",
    );
    let (p, b) = action(json!({"add_host": {"host": "no-such-host"}}));
    fault(
        &at(&region, &admin, "2.41", "POST", &p, b).await,
        404,
        "itemNotFound",
    );
    let (p, b) = action(json!({"add_host": {}}));
    fault(
        &at(&region, &admin, "2.41", "POST", &p, b).await,
        400,
        "badRequest",
    );
    let (p, b) = action(json!({"explode": {}}));
    fault(
        &at(&region, &admin, "2.41", "POST", &p, b).await,
        400,
        "badRequest",
    );
    let (p, b) = action(json!({"add_host": {"host": "c1-host2"}}));
    fault(
        &at(&region, &member, "2.41", "POST", &p, b).await,
        403,
        "forbidden",
    );
    let r = at(
        &region,
        &admin,
        "2.41",
        "POST",
        &agg("/99999/action"),
        Some(json!({"add_host": {"host": "c1-host1"}})),
    )
    .await;
    fault(&r, 404, "itemNotFound");

    // A host cannot be in two zones.
    let r = at(
        &region,
        &admin,
        "2.41",
        "POST",
        &agg(""),
        Some(json!({"aggregate": {"name": "rack2", "availability_zone": "az2"}})),
    )
    .await;
    let id2 = body(&r)["aggregate"]["id"].as_i64().unwrap();
    let r = at(
        &region,
        &admin,
        "2.41",
        "POST",
        &agg(&format!("/{id2}/action")),
        Some(json!({"add_host": {"host": "c1-host1"}})),
    )
    .await;
    fault(&r, 409, "conflictingRequest");

    // The zone shows in os-availability-zone and in the services.
    let r = at(
        &region,
        &member,
        "2.1",
        "GET",
        "/v2.1/os-availability-zone",
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let zones: Vec<Value> = body(&r)["availabilityZoneInfo"].as_array().unwrap().clone();
    let names: Vec<&str> = zones
        .iter()
        .map(|z| z["zoneName"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["az1", "nova"], "{zones:?}");
    assert!(zones
        .iter()
        .all(|z| z["zoneState"]["available"] == true && z["hosts"].is_null()));
    let r = at(
        &region,
        &member,
        "2.1",
        "GET",
        "/v2.1/os-availability-zone/detail",
        None,
    )
    .await;
    fault(&r, 403, "forbidden");
    let r = at(
        &region,
        &admin,
        "2.1",
        "GET",
        "/v2.1/os-availability-zone/detail",
        None,
    )
    .await;
    let detail = body(&r)["availabilityZoneInfo"].clone();
    let az1 = detail
        .as_array()
        .unwrap()
        .iter()
        .find(|z| z["zoneName"] == "az1")
        .unwrap();
    let c = &az1["hosts"]["c1-host1"]["nova-compute"];
    assert_eq!(c["available"], true, "{az1}");
    assert_eq!(c["active"], true, "{az1}");
    let r = at(
        &region,
        &admin,
        "2.53",
        "GET",
        "/v2.1/os-services?host=c1-host1",
        None,
    )
    .await;
    assert_eq!(services(&body(&r))[0]["zone"], "az1");

    // The scheduler's zone filter and the server's zone use it.
    let s = boot_on(&region, &member, "in-az1", Some("az1")).await;
    assert_eq!(s["status"], "ACTIVE", "{s}");
    assert_eq!(s["OS-EXT-SRV-ATTR:host"], "c1-host1", "{s}");
    assert_eq!(s["OS-EXT-AZ:availability_zone"], "az1", "{s}");
    let in_az1 = s["id"].as_str().unwrap().to_owned();
    // A zone without an enabled compute service is Nova's 400.
    let r = region
        .call(
            &member,
            "POST",
            "/v2.1/servers",
            Some(json!({"server": {"name": "in-az2", "flavorRef": "1",
                "imageRef": crate::compute::IMAGE, "networks": "none", "availability_zone": "az2"}})),
        )
        .await;
    assert_eq!(r.status, 400, "az2 has no host: {}", r.body);
    assert_eq!(
        body(&r)["badRequest"]["message"],
        "The requested availability zone is not available"
    );

    // set_metadata (zone included) and update. As Nova: no zone change
    // while a host holds instances (they would change zone).
    let (p, b) =
        action(json!({"set_metadata": {"metadata": {"ssd": "true", "availability_zone": "az1b"}}}));
    let r = at(&region, &admin, "2.41", "POST", &p, b.clone()).await;
    fault(&r, 400, "badRequest");
    assert!(r
        .body
        .contains("Reason: One or more hosts contain instances in this zone."));
    let gone = format!("/v2.1/servers/{in_az1}");
    region.call(&member, "DELETE", &gone, None).await;
    while region.call(&admin, "GET", &gone, None).await.status != 404 {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let r = at(&region, &admin, "2.41", "POST", &p, b).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let a = body(&r)["aggregate"].clone();
    assert_eq!(
        a["metadata"],
        json!({"ssd": "true", "availability_zone": "az1b"})
    );
    assert_eq!(a["availability_zone"], "az1b");
    let (p, b) = action(json!({"set_metadata": {"metadata": {"ssd": null}}}));
    let r = at(&region, &admin, "2.41", "POST", &p, b).await;
    assert_eq!(
        body(&r)["aggregate"]["metadata"],
        json!({"availability_zone": "az1b"})
    );
    let (p, b) = action(json!({"set_metadata": {"metadata": {"k": 5}}}));
    fault(
        &at(&region, &admin, "2.41", "POST", &p, b).await,
        400,
        "badRequest",
    );
    let (p, b) = action(json!({"set_metadata": {}}));
    fault(
        &at(&region, &admin, "2.41", "POST", &p, b).await,
        400,
        "badRequest",
    );
    let r = at(
        &region,
        &admin,
        "2.41",
        "PUT",
        &agg(&format!("/{id}")),
        Some(json!({"aggregate": {"name": "rack1-renamed", "availability_zone": "az1"}})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(body(&r)["aggregate"]["name"], "rack1-renamed");
    assert_eq!(body(&r)["aggregate"]["availability_zone"], "az1");
    assert_eq!(body(&r)["aggregate"]["hosts"], json!(["c1-host1"]));
    let r = at(
        &region,
        &admin,
        "2.41",
        "PUT",
        &agg(&format!("/{id}")),
        Some(json!({"aggregate": {}})),
    )
    .await;
    fault(&r, 400, "badRequest");
    let r = at(
        &region,
        &admin,
        "2.41",
        "PUT",
        &agg(&format!("/{id}")),
        Some(json!({"aggregate": {"name": "rack2"}})),
    )
    .await;
    fault(&r, 409, "conflictingRequest");
    let r = at(
        &region,
        &admin,
        "2.41",
        "PUT",
        &agg("/99999"),
        Some(json!({"aggregate": {"name": "z"}})),
    )
    .await;
    fault(&r, 404, "itemNotFound");

    // Delete refuses an aggregate with hosts; remove_host un-mirrors.
    let r = at(
        &region,
        &admin,
        "2.41",
        "DELETE",
        &agg(&format!("/{id}")),
        None,
    )
    .await;
    fault(&r, 400, "badRequest");
    let (p, b) = action(json!({"remove_host": {"host": "c1-host1"}}));
    let r = at(&region, &admin, "2.41", "POST", &p, b).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(body(&r)["aggregate"]["hosts"], json!([]));
    assert!(provider_aggregates(&region, &rp).await.is_empty());
    let (p, b) = action(json!({"remove_host": {"host": "c1-host1"}}));
    fault(
        &at(&region, &admin, "2.41", "POST", &p, b).await,
        404,
        "itemNotFound",
    );
    let r = at(
        &region,
        &admin,
        "2.41",
        "DELETE",
        &agg(&format!("/{id}")),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = at(
        &region,
        &admin,
        "2.41",
        "GET",
        &agg(&format!("/{id}")),
        None,
    )
    .await;
    fault(&r, 404, "itemNotFound");
    let r = at(
        &region,
        &admin,
        "2.41",
        "DELETE",
        &agg(&format!("/{id}")),
        None,
    )
    .await;
    fault(&r, 404, "itemNotFound");
    let r = at(&region, &admin, "2.41", "GET", &agg(""), None).await;
    let left = body(&r)["aggregates"].as_array().unwrap().clone();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0]["name"], "rack2");
    region.stop().await;
}

/// Boots `count` servers in one request with a group hint; returns the
/// group's members afterwards once all are ACTIVE or ERROR.
async fn boot_in_group(region: &Region, name: &str, group: &str, count: u32) -> Vec<Value> {
    let r = region
        .call(
            &region.member,
            "POST",
            "/v2.1/servers",
            Some(json!({"server": {"name": name, "flavorRef": "1",
                "imageRef": crate::compute::IMAGE, "networks": "none",
                "min_count": count, "max_count": count},
                "os:scheduler_hints": {"group": group}})),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let r = at(
        region,
        &region.member,
        "2.64",
        "GET",
        &format!("/v2.1/os-server-groups/{group}"),
        None,
    )
    .await;
    let members: Vec<String> = body(&r)["server_group"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap().to_owned())
        .collect();
    let mut out = Vec::new();
    for m in members {
        let (s, _) = region
            .wait(&m, |s| s["status"] == "ACTIVE" || s["status"] == "ERROR")
            .await;
        if s["name"].as_str().unwrap().starts_with(name) {
            out.push(s);
        }
    }
    assert_eq!(out.len(), count as usize, "{out:?}");
    out
}

fn hosts_of(servers: &[Value]) -> Vec<String> {
    servers
        .iter()
        .map(|s| s["OS-EXT-SRV-ATTR:host"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn os_server_groups_and_the_scheduler_honouring_their_policies() {
    let region = Region::start("op_groups", 2, 2).await;
    let member = region.member.clone();
    let other = region.other.clone();
    let admin = region.admin.clone();
    let create = |mv: &'static str, b: Value| {
        let region = &region;
        let member = member.clone();
        async move {
            at(
                region,
                &member,
                mv,
                "POST",
                "/v2.1/os-server-groups",
                Some(json!({"server_group": b})),
            )
            .await
        }
    };

    // Create: 2.64 policy + rules; older policies list; soft from 2.15.
    let r = create("2.64", json!({"name": "spread", "policy": "anti-affinity"})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let g = body(&r)["server_group"].clone();
    assert_eq!(g["policy"], "anti-affinity");
    assert_eq!(g["rules"], json!({}));
    assert_eq!(g["members"], json!([]));
    assert!(
        g["project_id"].is_string() && g.get("policies").is_none(),
        "{g}"
    );
    let spread = g["id"].as_str().unwrap().to_owned();
    let r = create(
        "2.64",
        json!({"name": "two-per-host", "policy": "anti-affinity",
        "rules": {"max_server_per_host": 2}}),
    )
    .await;
    assert_eq!(
        body(&r)["server_group"]["rules"],
        json!({"max_server_per_host": 2}),
        "{}",
        r.body
    );
    let r = create("2.1", json!({"name": "pack", "policies": ["affinity"]})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let g = body(&r)["server_group"].clone();
    assert_eq!(g["policies"], json!(["affinity"]));
    assert_eq!(g["metadata"], json!({}));
    assert!(g.get("project_id").is_none(), "{g}");
    let pack = g["id"].as_str().unwrap().to_owned();
    let r = create(
        "2.15",
        json!({"name": "soft", "policies": ["soft-anti-affinity"]}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    for (mv, b) in [
        (
            "2.14",
            json!({"name": "soft", "policies": ["soft-affinity"]}),
        ),
        (
            "2.1",
            json!({"name": "x", "policies": ["affinity", "anti-affinity"]}),
        ),
        ("2.1", json!({"name": "x", "policies": []})),
        ("2.1", json!({"name": "x", "policy": "affinity"})),
        ("2.64", json!({"name": "x", "policies": ["affinity"]})),
        ("2.64", json!({"name": "x", "policy": "together"})),
        (
            "2.64",
            json!({"name": "x", "policy": "affinity", "rules": {"max_server_per_host": 2}}),
        ),
        (
            "2.64",
            json!({"name": "x", "policy": "anti-affinity", "rules": {"max_server_per_host": 0}}),
        ),
        ("2.64", json!({"policy": "affinity"})),
    ] {
        let r = create(mv, b.clone()).await;
        assert_eq!(r.status, 400, "{mv} {b}: {}", r.body);
        fault(&r, 400, "badRequest");
    }

    // List and isolation.
    let r = at(
        &region,
        &member,
        "2.64",
        "GET",
        "/v2.1/os-server-groups",
        None,
    )
    .await;
    assert_eq!(
        body(&r)["server_groups"].as_array().unwrap().len(),
        4,
        "{}",
        r.body
    );
    let r = at(
        &region,
        &member,
        "2.64",
        "GET",
        "/v2.1/os-server-groups?limit=1&offset=1",
        None,
    )
    .await;
    assert_eq!(
        body(&r)["server_groups"][0]["name"],
        "two-per-host",
        "{}",
        r.body
    );
    let r = at(
        &region,
        &other,
        "2.64",
        "GET",
        "/v2.1/os-server-groups",
        None,
    )
    .await;
    assert_eq!(body(&r)["server_groups"], json!([]));
    let r = at(
        &region,
        &other,
        "2.64",
        "GET",
        "/v2.1/os-server-groups?all_projects=True",
        None,
    )
    .await;
    fault(&r, 403, "forbidden");
    let r = at(
        &region,
        &admin,
        "2.64",
        "GET",
        "/v2.1/os-server-groups?all_projects=True",
        None,
    )
    .await;
    assert_eq!(body(&r)["server_groups"].as_array().unwrap().len(), 4);
    let r = at(
        &region,
        &other,
        "2.64",
        "GET",
        &format!("/v2.1/os-server-groups/{spread}"),
        None,
    )
    .await;
    fault(&r, 404, "itemNotFound");
    let r = at(
        &region,
        &other,
        "2.64",
        "DELETE",
        &format!("/v2.1/os-server-groups/{spread}"),
        None,
    )
    .await;
    fault(&r, 404, "itemNotFound");
    let r = at(
        &region,
        &admin,
        "2.64",
        "GET",
        &format!("/v2.1/os-server-groups/{spread}"),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = at(
        &region,
        &member,
        "2.64",
        "GET",
        "/v2.1/os-server-groups/nope",
        None,
    )
    .await;
    fault(&r, 404, "itemNotFound");

    // Bad hints.
    for hint in [
        json!({"group": "not-a-uuid"}),
        json!({"group": uuid::Uuid::new_v4().to_string()}),
        json!("x"),
    ] {
        let r = region
            .call(
                &member,
                "POST",
                "/v2.1/servers",
                Some(json!({"server": {"name": "h",
            "flavorRef": "1", "imageRef": crate::compute::IMAGE, "networks": "none"},
            "os:scheduler_hints": hint})),
            )
            .await;
        fault(&r, 400, "badRequest");
    }
    // Another project's group cannot be joined.
    let r = region
        .call(
            &other,
            "POST",
            "/v2.1/servers",
            Some(json!({"server": {"name": "h",
        "flavorRef": "1", "imageRef": crate::compute::IMAGE, "networks": "none"},
        "os:scheduler_hints": {"group": spread}})),
        )
        .await;
    fault(&r, 400, "badRequest");

    // Anti-affinity: a batch of three spreads over three hosts...
    let first = boot_in_group(&region, "spread-a", &spread, 3).await;
    let mut hosts = hosts_of(&first);
    assert!(first.iter().all(|s| s["status"] == "ACTIVE"), "{first:?}");
    hosts.sort();
    hosts.dedup();
    assert_eq!(hosts.len(), 3, "{hosts:?}");
    // ... a batch of two more cannot (one host left): all of it fails.
    let more = boot_in_group(&region, "spread-b", &spread, 2).await;
    assert!(more.iter().all(|s| s["status"] == "ERROR"), "{more:?}");
    // A deleted server leaves the group's members.
    let gone = first[0]["id"].as_str().unwrap().to_owned();
    let r = region
        .call(&member, "DELETE", &format!("/v2.1/servers/{gone}"), None)
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let r = at(
        &region,
        &member,
        "2.64",
        "GET",
        &format!("/v2.1/os-server-groups/{spread}"),
        None,
    )
    .await;
    let members = body(&r)["server_group"]["members"].clone();
    assert_eq!(members.as_array().unwrap().len(), 4, "{members}");
    assert!(!members.to_string().contains(&gone), "{members}");
    // Affinity: everything on one host.
    let packed = boot_in_group(&region, "pack-a", &pack, 2).await;
    let mut later = boot_in_group(&region, "pack-b", &pack, 1).await;
    later.extend(packed);
    let mut hosts = hosts_of(&later);
    hosts.dedup();
    assert_eq!(hosts.len(), 1, "{later:?}");
    assert!(later.iter().all(|s| s["status"] == "ACTIVE"), "{later:?}");
    // A member shows its group (2.71); a server outside any group shows
    // none, its key name and its host's zone (this process landed it: no
    // read of the API database for them).
    let in_pack = later[0]["id"].as_str().unwrap().to_owned();
    let show = |id: String| {
        let region = &region;
        let member = member.clone();
        async move {
            let r = at(
                region,
                &member,
                "2.71",
                "GET",
                &format!("/v2.1/servers/{id}"),
                None,
            )
            .await;
            assert_eq!(r.status, 200, "{}", r.body);
            body(&r)["server"].clone()
        }
    };
    assert_eq!(show(in_pack.clone()).await["server_groups"], json!([pack]));
    let r = region
        .call(
            &member,
            "POST",
            "/v2.1/os-keypairs",
            Some(json!({"keypair": {"name": "k1", "public_key": crate::user_apis::RSA}})),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = region
        .call(
            &member,
            "POST",
            "/v2.1/servers",
            Some(
                json!({"server": {"name": "keyed", "flavorRef": "1", "key_name": "k1",
                "imageRef": crate::compute::IMAGE, "networks": "none"}}),
            ),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let keyed = body(&r)["server"]["id"].as_str().unwrap().to_owned();
    region.wait(&keyed, |s| s["status"] == "ACTIVE").await;
    let k = show(keyed.clone()).await;
    assert_eq!(
        (
            &k["key_name"],
            &k["server_groups"],
            &k["OS-EXT-AZ:availability_zone"]
        ),
        (&json!("k1"), &json!([]), &json!("nova")),
        "{k}"
    );
    let r = at(
        &region,
        &member,
        "2.71",
        "GET",
        "/v2.1/servers/detail?name=keyed",
        None,
    )
    .await;
    assert_eq!(body(&r)["servers"][0]["key_name"], "k1", "{}", r.body);
    // The key name is on the cell's row. A row written before the cells
    // kept key names has none, and its spec was marked for it: the key
    // is then shown, listed and filtered on from the spec.
    let cells = crate::heal::cell_dbs(&region).await;
    let mut rows = 0;
    for c in &cells {
        if let Some(i) = c.api_instance(&keyed).await.unwrap() {
            assert_eq!(i.key_name.as_deref(), Some("k1"));
            rows += 1;
        }
        exec(
            c.pool(),
            "UPDATE instances SET key_name = NULL WHERE uuid = $1",
            &keyed,
        )
        .await;
    }
    assert_eq!(rows, 1);
    exec(
        region.api.pool(),
        "UPDATE request_specs SET view_fields = TRUE WHERE instance_uuid = $1",
        &keyed,
    )
    .await;
    for path in [
        "/v2.1/servers/detail?name=keyed".to_owned(),
        "/v2.1/servers/detail?key_name=^k1$".to_owned(),
        format!("/v2.1/servers/{keyed}"),
    ] {
        let r = at(&region, &member, "2.90", "GET", &path, None).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let v = body(&r);
        let s = v.get("server").unwrap_or(&v["servers"][0]);
        assert_eq!(
            (&s["id"], &s["key_name"]),
            (&json!(keyed), &json!("k1")),
            "{path}: {v}"
        );
    }
    for c in cells {
        c.close().await;
    }

    let r = at(
        &region,
        &member,
        "2.64",
        "DELETE",
        &format!("/v2.1/os-server-groups/{pack}"),
        None,
    )
    .await;
    assert_eq!(r.status, 204, "{}", r.body);
    // A deleted group's former members show none.
    assert_eq!(show(in_pack).await["server_groups"], json!([]));
    let r = at(
        &region,
        &member,
        "2.64",
        "GET",
        &format!("/v2.1/os-server-groups/{pack}"),
        None,
    )
    .await;
    fault(&r, 404, "itemNotFound");
    region.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flavor_extra_specs_pick_hosts_by_aggregate_metadata() {
    let region = Region::start("op_extra_specs", 1, 2).await;
    let admin = region.admin.clone();
    // m1.small gets an extra spec only aggregate "fast" satisfies.
    let api = region.api.pool().clone();
    let sql = "INSERT INTO flavor_extra_specs (flavor_id, key, value, created_at) \
               SELECT id, 'aggregate_instance_extra_specs:ssd', 'true', CURRENT_TIMESTAMP \
               FROM flavors WHERE flavorid = '2'";
    match api {
        cell_mapping::db::Pool::Sqlite(p) => {
            sqlx::query(sql).execute(&p).await.unwrap();
        }
        cell_mapping::db::Pool::Postgres(p) => {
            sqlx::query(sql).execute(&p).await.unwrap();
        }
    }
    let boot = |name: &'static str| {
        let region = &region;
        async move {
            let r = region
                .call(
                    &region.member,
                    "POST",
                    "/v2.1/servers",
                    Some(json!({"server": {
                "name": name, "flavorRef": "2", "imageRef": crate::compute::IMAGE,
                "networks": "none"}})),
                )
                .await;
            assert_eq!(r.status, 202, "{}", r.body);
            let id = body(&r)["server"]["id"].as_str().unwrap().to_owned();
            region
                .wait(&id, |s| s["status"] == "ACTIVE" || s["status"] == "ERROR")
                .await
                .0
        }
    };
    let s = boot("no-ssd-yet").await;
    assert_eq!(s["status"], "ERROR", "no aggregate has ssd=true: {s}");
    let r = at(
        &region,
        &admin,
        "2.41",
        "POST",
        "/v2.1/os-aggregates",
        Some(json!({"aggregate": {"name": "fast"}})),
    )
    .await;
    let id = body(&r)["aggregate"]["id"].as_i64().unwrap();
    let r = at(
        &region,
        &admin,
        "2.41",
        "POST",
        &format!("/v2.1/os-aggregates/{id}/action"),
        Some(json!({"add_host": {"host": "c1-host2"}})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = at(
        &region,
        &admin,
        "2.41",
        "POST",
        &format!("/v2.1/os-aggregates/{id}/action"),
        Some(json!({"set_metadata": {"metadata": {"ssd": "true"}}})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    for name in ["ssd-1", "ssd-2"] {
        let s = boot(name).await;
        assert_eq!(s["status"], "ACTIVE", "{s}");
        assert_eq!(s["OS-EXT-SRV-ATTR:host"], "c1-host2", "{s}");
    }
    region.stop().await;
}

/// Runs `sql` with `uuid` bound on `pool` (a test's direct write).
pub(crate) async fn exec(pool: &cell_mapping::db::Pool, sql: &str, uuid: &str) {
    match pool {
        cell_mapping::db::Pool::Sqlite(p) => {
            sqlx::query(sql).bind(uuid).execute(p).await.unwrap();
        }
        cell_mapping::db::Pool::Postgres(p) => {
            sqlx::query(sql).bind(uuid).execute(p).await.unwrap();
        }
    }
}
