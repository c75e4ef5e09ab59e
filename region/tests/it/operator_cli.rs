//! The operator Compute APIs through the real `openstack` CLI
//! (python-openstackclient from PyPI) against the region binary: compute
//! services, hypervisors (stats at an older microversion), aggregates,
//! availability zones and server groups, with a server booted into a group.

use serde_json::Value;

use super::osc_placement::{os_env, Cli, PACKAGES, VENV};

fn rows(v: &Value) -> &Vec<Value> {
    v.as_array().unwrap_or_else(|| panic!("a list: {v}"))
}

#[test]
fn openstack_cli_runs_the_operator_apis() {
    openstack_cli_runs_the_operator_apis_with(&[]);
}

/// The same on PostgreSQL (a database per service and cell) and RabbitMQ
/// (a vhost per cell).
#[test]
fn openstack_cli_runs_the_operator_apis_on_postgresql_and_rabbitmq() {
    let Some(env) = super::production_backends("operator") else {
        return;
    };
    openstack_cli_runs_the_operator_apis_with(&env);
}

fn openstack_cli_runs_the_operator_apis_with(extra: &[(&'static str, String)]) {
    let Some(bin) = testkit::python::venv_or_skip(VENV, PACKAGES) else {
        return;
    };
    let dir = testkit::temp_dir("region_operator_cli");
    // The catalog must name the ports really used.
    let r = super::start_catalog(&dir, extra);
    let admin = Cli {
        bin: bin.clone(),
        env: os_env(&r, "admin", 0, "admin"),
    };
    let member = Cli {
        bin: bin.clone(),
        env: os_env(&r, "demo", 1, "demo"),
    };

    // compute service list / set --disable --disable-reason / --enable
    let services = admin.json(&["compute", "service", "list", "--service", "nova-compute"]);
    assert_eq!(rows(&services).len(), 4, "{services}");
    assert!(
        rows(&services)
            .iter()
            .all(|s| s["State"] == "up" && s["Status"] == "enabled" && s["Zone"] == "nova"),
        "{services}"
    );
    admin.ok(&[
        "compute",
        "service",
        "set",
        "--disable",
        "--disable-reason",
        "maintenance",
        "cell1-host01",
        "nova-compute",
    ]);
    let long = admin.json(&[
        "compute",
        "service",
        "list",
        "--long",
        "--host",
        "cell1-host01",
    ]);
    assert_eq!(rows(&long).len(), 1, "{long}");
    assert_eq!(long[0]["Status"], "disabled", "{long}");
    assert_eq!(long[0]["Disabled Reason"], "maintenance", "{long}");
    admin.ok(&[
        "compute",
        "service",
        "set",
        "--enable",
        "cell1-host01",
        "nova-compute",
    ]);
    let s = admin.json(&["compute", "service", "list", "--host", "cell1-host01"]);
    assert_eq!(s[0]["Status"], "enabled", "{s}");
    // A member may not.
    let (ok, _, err) = member.run(&["compute", "service", "list"]);
    assert!(!ok && err.contains("403"), "{err}");

    // hypervisor list / show / stats show (before 2.88)
    let hvs = admin.json(&["hypervisor", "list"]);
    assert_eq!(rows(&hvs).len(), 4, "{hvs}");
    let hv = admin.json(&["hypervisor", "show", "cell2-host02"]);
    assert_eq!(hv["hypervisor_hostname"], "cell2-host02", "{hv}");
    assert_eq!(hv["state"], "up", "{hv}");
    let stats = admin.json(&[
        "--os-compute-api-version",
        "2.87",
        "hypervisor",
        "stats",
        "show",
    ]);
    assert_eq!(stats["count"], 4, "{stats}");

    // aggregate create --zone / add host / set --property / show /
    // remove host / delete
    let agg = admin.json(&["aggregate", "create", "--zone", "az1", "rack1"]);
    assert_eq!(agg["availability_zone"], "az1", "{agg}");
    admin.ok(&["aggregate", "add", "host", "rack1", "cell1-host02"]);
    admin.ok(&["aggregate", "set", "--property", "ssd=true", "rack1"]);
    let shown = admin.json(&["aggregate", "show", "rack1"]);
    assert_eq!(
        shown["hosts"],
        serde_json::json!(["cell1-host02"]),
        "{shown}"
    );
    assert_eq!(shown["properties"]["ssd"], "true", "{shown}");

    // availability zone list [--long]
    let zones = member.json(&["availability", "zone", "list", "--compute"]);
    let names: Vec<&str> = rows(&zones)
        .iter()
        .map(|z| z["Zone Name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"az1") && names.contains(&"nova"), "{zones}");
    let long = admin.json(&["availability", "zone", "list", "--compute", "--long"]);
    assert!(
        rows(&long)
            .iter()
            .any(|z| z["Zone Name"] == "az1" && z["Host Name"] == "cell1-host02"),
        "{long}"
    );

    admin.ok(&["aggregate", "remove", "host", "rack1", "cell1-host02"]);
    let shown = admin.json(&["aggregate", "show", "rack1"]);
    assert_eq!(shown["hosts"], serde_json::json!([]), "{shown}");
    admin.ok(&["aggregate", "delete", "rack1"]);
    let aggs = admin.json(&["aggregate", "list"]);
    assert!(rows(&aggs).is_empty(), "{aggs}");

    // server group create --policy anti-affinity / list / show / delete,
    // and a server created into it with --hint group=…
    let group = member.json(&[
        "server",
        "group",
        "create",
        "--policy",
        "anti-affinity",
        "spread",
    ]);
    let gid = group["id"].as_str().unwrap().to_owned();
    let groups = member.json(&["server", "group", "list"]);
    assert!(
        rows(&groups).iter().any(|g| g["ID"] == gid.as_str()),
        "{groups}"
    );
    let server = member.json(&[
        "server",
        "create",
        "--flavor",
        "m1.tiny",
        "--image",
        "cirros-0.6.2-x86_64-disk",
        "--nic",
        "none",
        "--hint",
        &format!("group={gid}"),
        "--wait",
        "grouped",
    ]);
    assert_eq!(server["status"], "ACTIVE", "{server}");
    let shown = member.json(&["server", "group", "show", "spread"]);
    assert_eq!(shown["policy"], "anti-affinity", "{shown}");
    let members = shown["members"].to_string();
    assert!(members.contains(server["id"].as_str().unwrap()), "{shown}");
    member.ok(&["server", "delete", "--wait", "grouped"]);
    member.ok(&["server", "group", "delete", "spread"]);
    let groups = member.json(&["server", "group", "list"]);
    assert!(rows(&groups).is_empty(), "{groups}");
    drop(r);
    std::fs::remove_dir_all(&dir).ok();
}
