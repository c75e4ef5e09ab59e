//! Hosts and hypervisors as Nova answers them (issue 37): region-wide
//! integer ids below 2.53 across two cells, `os-hypervisors/{id}/uptime`
//! and 2.88's `uptime`, and the deprecated `os-hosts` that `openstack host
//! list` / `host show` still use; through the CLI and openstacksdk.

use std::collections::HashSet;

use serde_json::{json, Value};

use super::{call, region, BOOT};

/// Below 2.53 each hypervisor and service of the two cells (whose
/// cell-local ids are 1, 2, … in both) has its own integer id,
/// which `hypervisor show` and the raw API resolve to that one node.
#[test]
fn openstack_cli_hypervisor_ids_are_unique_across_cells() {
    let Some((_r, admin, _member)) = region("parity_hypervisor_ids") else {
        return;
    };
    let list = admin.json(&["--os-compute-api-version", "2.1", "hypervisor", "list"]);
    let rows = list.as_array().expect("a list");
    let n = rows.len();
    for cell in ["cell1-", "cell2-"] {
        assert!(
            rows.iter()
                .any(|h| h["Hypervisor Hostname"].as_str().unwrap().starts_with(cell)),
            "two cells: {list}"
        );
    }
    let ids: HashSet<i64> = rows
        .iter()
        .map(|h| h["ID"].as_i64().expect("int id"))
        .collect();
    assert_eq!(ids.len(), n, "integer ids repeat: {list}");
    // Every id names its own node, through the CLI and the raw API.
    for h in rows {
        let id = h["ID"].as_i64().unwrap().to_string();
        let shown = admin.json(&["--os-compute-api-version", "2.1", "hypervisor", "show", &id]);
        assert_eq!(
            shown["hypervisor_hostname"], h["Hypervisor Hostname"],
            "{shown}"
        );
    }
    // The same ids again (they are kept), services' ids unique too, and
    // the detail's service id is the service list's.
    let answers = admin.calls(vec![
        call("GET", "/v2.1/os-hypervisors/detail", Some("2.1"), None),
        call(
            "GET",
            "/v2.1/os-services?binary=nova-compute",
            Some("2.1"),
            None,
        ),
        call("GET", "/v2.1/os-hypervisors/abc", Some("2.1"), None),
        call("GET", "/v2.1/os-hypervisors/999999", Some("2.1"), None),
        call("GET", "/v2.1/os-hypervisors/1", Some("2.53"), None),
    ]);
    let detail = answers[0].json();
    let again: HashSet<i64> = detail["hypervisors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_i64().unwrap())
        .collect();
    assert_eq!(again, ids);
    let services = answers[1].json();
    let by_host: std::collections::HashMap<&str, i64> = services["services"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["host"].as_str().unwrap(), s["id"].as_i64().unwrap()))
        .collect();
    assert_eq!(by_host.len(), n, "{services}");
    assert_eq!(
        by_host.values().collect::<HashSet<_>>().len(),
        n,
        "service ids repeat: {services}"
    );
    for h in detail["hypervisors"].as_array().unwrap() {
        let host = h["service"]["host"].as_str().unwrap();
        assert_eq!(h["service"]["id"], json!(by_host[host]), "{h}");
    }
    answers[2].assert_error(
        404,
        "itemNotFound",
        "Hypervisor with ID 'abc' could not be found.",
    );
    answers[3].assert_error(
        404,
        "itemNotFound",
        "Hypervisor with ID '999999' could not be found.",
    );
    answers[4].assert_error(400, "badRequest", "Invalid uuid 1");
    // A service named by its region-wide id is that service.
    let (host, sid) = by_host.iter().max_by_key(|(h, _)| **h).unwrap();
    let off = admin.one(call(
        "PUT",
        "/v2.1/os-services/disable",
        Some("2.1"),
        Some(json!({"host": host, "binary": "nova-compute"})),
    ));
    assert_eq!(off.status, 200, "{}", off.text);
    let listed = admin.one(call(
        "GET",
        format!("/v2.1/os-services?host={host}"),
        Some("2.1"),
        None,
    ));
    let s = &listed.json()["services"][0];
    assert_eq!(
        (s["id"].as_i64(), &s["status"]),
        (Some(*sid), &json!("disabled")),
        "{s}"
    );
}

/// `/os-hypervisors/{id}/uptime` below 2.88 and the detail's `uptime`
/// from 2.88: the fake driver reports none, as Nova's fake driver (501,
/// and `null`); the route is gone at 2.88.
#[test]
fn openstack_cli_hypervisor_uptime_answers_as_nova() {
    let Some((_r, admin, member)) = region("parity_hypervisor_uptime") else {
        return;
    };
    let list = admin.one(call("GET", "/v2.1/os-hypervisors", Some("2.53"), None));
    let uuid = list.json()["hypervisors"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let ints = admin.one(call("GET", "/v2.1/os-hypervisors", Some("2.1"), None));
    let int_id = ints.json()["hypervisors"][0]["id"].as_i64().unwrap();
    let answers = admin.calls(vec![
        call(
            "GET",
            format!("/v2.1/os-hypervisors/{int_id}/uptime"),
            Some("2.1"),
            None,
        ),
        call(
            "GET",
            format!("/v2.1/os-hypervisors/{uuid}/uptime"),
            Some("2.53"),
            None,
        ),
        call(
            "GET",
            format!("/v2.1/os-hypervisors/{uuid}/uptime"),
            Some("2.88"),
            None,
        ),
        call(
            "GET",
            format!("/v2.1/os-hypervisors/{uuid}"),
            Some("2.88"),
            None,
        ),
        call("GET", "/v2.1/os-hypervisors/detail", Some("2.88"), None),
        call("GET", "/v2.1/os-hypervisors/nope/uptime", Some("2.1"), None),
        call(
            "GET",
            "/v2.1/os-hypervisors/nope/uptime",
            Some("2.53"),
            None,
        ),
    ]);
    for a in &answers[..2] {
        a.assert_error(
            501,
            "notImplemented",
            "The requested functionality is not supported.",
        );
    }
    assert_eq!(answers[2].status, 404, "{}", answers[2].text);
    let shown = answers[3].json();
    assert_eq!(shown["hypervisor"]["uptime"], Value::Null, "{shown}");
    assert!(shown["hypervisor"].get("vcpus").is_none(), "{shown}");
    for h in answers[4].json()["hypervisors"].as_array().unwrap() {
        assert_eq!(h["uptime"], Value::Null, "{h}");
    }
    answers[5].assert_error(
        404,
        "itemNotFound",
        "Hypervisor with ID 'nope' could not be found.",
    );
    answers[6].assert_error(400, "badRequest", "Invalid uuid nope");
    // Admin only.
    let denied = member.one(call(
        "GET",
        format!("/v2.1/os-hypervisors/{int_id}/uptime"),
        Some("2.1"),
        None,
    ));
    denied.assert_error(
        403,
        "forbidden",
        "Policy doesn't allow os_compute_api:os-hypervisors:uptime to be performed.",
    );
}

/// `os-hosts`: `openstack host list` (with `--zone`) and `host show`
/// as Nova answers them, a server's project in the host's resources, the
/// switches 501 (no driver of this region has them) after Nova's 404s,
/// and the API gone at 2.43.
#[test]
fn openstack_cli_os_hosts_answer_as_nova() {
    let Some((_r, admin, member)) = region("parity_os_hosts") else {
        return;
    };
    let n = admin
        .json(&["hypervisor", "list"])
        .as_array()
        .unwrap()
        .len();
    let hosts = admin.json(&["host", "list"]);
    let rows = hosts.as_array().expect("a list");
    let computes: Vec<&Value> = rows.iter().filter(|h| h["Service"] == "compute").collect();
    assert_eq!(computes.len(), n, "{hosts}");
    assert!(computes.iter().all(|h| h["Zone"] == "nova"), "{hosts}");
    let zoned = admin.json(&["host", "list", "--zone", "nova"]);
    let zoned: Vec<&Value> = zoned
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["Service"] == "compute")
        .collect();
    assert_eq!(zoned.len(), n, "{zoned:?}");
    let none = admin.json(&["host", "list", "--zone", "elsewhere"]);
    assert_eq!(none, json!([]));

    // A server on cell1-host01 (forced, so the admin's), and the host's
    // resources.
    let mut args = BOOT.to_vec();
    args.extend([
        "--availability-zone",
        "nova:cell1-host01",
        "--wait",
        "on-host",
    ]);
    let server = admin.json(&args);
    let project = server["project_id"].as_str().unwrap().to_owned();
    let shown = admin.json(&["host", "show", "cell1-host01"]);
    let rows = shown.as_array().expect("rows");
    let row = |p: &str| {
        rows.iter()
            .find(|r| r["Project"] == p)
            .unwrap_or_else(|| panic!("no {p} row: {shown}"))
            .clone()
    };
    assert!(row("(total)")["CPU"].as_i64().unwrap() > 0, "{shown}");
    let _ = row("(used_now)");
    let flavor = admin.json(&["flavor", "show", "m1.tiny"]);
    assert_eq!(row("(used_max)")["CPU"], flavor["vcpus"], "{shown}");
    assert_eq!(row("(used_max)")["Memory MB"], flavor["ram"], "{shown}");
    assert_eq!(row(&project)["Disk GB"], flavor["disk"], "{shown}");

    let answers = admin.calls(vec![
        call("GET", "/v2.1/os-hosts/nowhere", Some("2.1"), None),
        call(
            "PUT",
            "/v2.1/os-hosts/cell1-host01",
            Some("2.1"),
            Some(json!({"status": "enable"})),
        ),
        call(
            "PUT",
            "/v2.1/os-hosts/nowhere",
            Some("2.1"),
            Some(json!({"maintenance_mode": "disable"})),
        ),
        call(
            "PUT",
            "/v2.1/os-hosts/cell1-host01",
            Some("2.1"),
            Some(json!({"status": "off"})),
        ),
        call(
            "PUT",
            "/v2.1/os-hosts/cell1-host01",
            Some("2.1"),
            Some(json!({})),
        ),
        call(
            "GET",
            "/v2.1/os-hosts/cell1-host01/reboot",
            Some("2.1"),
            None,
        ),
        call("GET", "/v2.1/os-hosts", Some("2.43"), None),
        call("GET", "/v2.1/os-hosts/cell1-host01", Some("2.43"), None),
    ]);
    answers[0].assert_error(
        404,
        "itemNotFound",
        "Host 'nowhere' is not mapped to any cell",
    );
    answers[1].assert_error(
        501,
        "notImplemented",
        "The requested functionality is not supported.",
    );
    answers[2].assert_error(
        404,
        "itemNotFound",
        "Host 'nowhere' is not mapped to any cell",
    );
    answers[3].assert_error(
        400,
        "badRequest",
        "Invalid input for field/attribute status. Value: off. 'off' is not one of \
         ['enable', 'disable', 'Enable', 'Disable', 'ENABLE', 'DISABLE']",
    );
    answers[4].assert_error(
        400,
        "badRequest",
        "{} is not valid under any of the given schemas",
    );
    answers[5].assert_error(
        501,
        "notImplemented",
        "The requested functionality is not supported.",
    );
    assert_eq!(answers[6].status, 404, "{}", answers[6].text);
    assert_eq!(answers[7].status, 404, "{}", answers[7].text);
    // The CLI says the host cannot be switched from here.
    let (ok, _, err) = admin.run(&["host", "set", "--enable", "cell1-host01"]);
    assert!(!ok && err.contains("not supported"), "{err}");
    // Admin only.
    let (ok, _, err) = member.run(&["host", "list"]);
    assert!(!ok && err.contains("os-hosts:list"), "{err}");
}
