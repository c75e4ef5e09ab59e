//! Server operations with Nova's answers (issue 37): `os-resetState`,
//! server diagnostics and the server password, through the `openstack`
//! CLI and openstacksdk against the region binary (the harness in
//! [`super`]).

use serde_json::{json, Value};

use super::{call, region, User, BOOT};
use crate::server_actions_cli::wait_for;

/// Boots a server as `user` and waits until it is ACTIVE; its id.
fn boot(user: &User, name: &str) -> String {
    let mut args = BOOT.to_vec();
    args.extend(["--wait", name]);
    user.json(&args)["id"].as_str().unwrap().to_owned()
}

fn action(id: &str, body: Value) -> super::Call {
    call(
        "POST",
        format!("/v2.1/servers/{id}/action"),
        None,
        Some(body),
    )
}

/// `os-resetState` (`openstack server set --state`): admin only, 202,
/// the vm_state set and the task state cleared, a `resetState` instance
/// action; Nova's schema messages; a missing server 404.
#[test]
fn openstack_cli_reset_state_answers_as_nova() {
    let Some((_r, admin, member)) = region("parity_reset_state") else {
        return;
    };
    let id = boot(&member, "rs");
    admin.ok(&["server", "set", "--state", "error", &id]);
    let s = wait_for(&member, &id, "ERROR");
    assert_eq!(s["OS-EXT-STS:vm_state"], "error", "{s}");
    assert_eq!(s["OS-EXT-STS:task_state"], Value::Null, "{s}");
    admin.ok(&["server", "set", "--state", "active", &id]);
    wait_for(&member, &id, "ACTIVE");
    let events = admin.json(&["server", "event", "list", &id]);
    let names: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["Action"].as_str())
        .collect();
    assert_eq!(
        names.iter().filter(|a| **a == "resetState").count(),
        2,
        "{events}"
    );
    let missing = "6f1f6a4e-9a47-4c7e-8f0e-00000000abcd";
    let a = admin.calls(vec![
        action(&id, json!({"os-resetState": {"state": "stopped"}})),
        action(&id, json!({"os-resetState": {}})),
        action(&id, json!({"os-resetState": {"state": "error", "x": 1}})),
        action(&id, json!({"os-resetState": {"state": 1}})),
        action(&id, json!({"os-resetState": null})),
        action(missing, json!({"os-resetState": {"state": "error"}})),
    ]);
    a[0].assert_error(
        400,
        "badRequest",
        "Invalid input for field/attribute state. Value: stopped. \
         'stopped' is not one of ['active', 'error']",
    );
    a[1].assert_error(
        400,
        "badRequest",
        "Invalid input for field/attribute os-resetState. Value: {}. \
         'state' is a required property",
    );
    a[2].assert_error(
        400,
        "badRequest",
        "Invalid input for field/attribute os-resetState. Value: {'state': 'error', 'x': 1}. \
         Additional properties are not allowed ('x' was unexpected)",
    );
    a[3].assert_error(
        400,
        "badRequest",
        "Invalid input for field/attribute state. Value: 1. 1 is not of type 'string'",
    );
    a[4].assert_error(
        400,
        "badRequest",
        "Invalid input for field/attribute os-resetState. Value: None. \
         None is not of type 'object'",
    );
    a[5].assert_error(
        404,
        "itemNotFound",
        &format!("Instance {missing} could not be found."),
    );
    // A member may not; nothing changed.
    let denied = member.one(action(&id, json!({"os-resetState": {"state": "error"}})));
    assert_eq!(denied.status, 403, "{}", denied.text);
    let s = member.json(&["server", "show", &id]);
    assert_eq!(s["status"], "ACTIVE", "{s}");
    // `restore` of a server that is not soft-deleted (none is here): the
    // CLI's and a raw call get Nova's 409.
    let (ok, _, err) = member.run(&["server", "restore", &id]);
    assert!(!ok && err.contains("409"), "{err}");
    member
        .one(action(&id, json!({"restore": null})))
        .assert_error(
            409,
            "conflictingRequest",
            &format!("Cannot 'restore' instance {id} while it is in vm_state active"),
        );
}

/// Server diagnostics (`openstack server show --diagnostics`): the fake
/// driver's dict before 2.48 and Nova's standard form from 2.48, as
/// Nova's fake driver gives them; admin only; a stopped guest 409.
#[test]
fn openstack_cli_server_diagnostics_answer_as_nova() {
    let Some((_r, admin, member)) = region("parity_diagnostics") else {
        return;
    };
    let id = boot(&member, "diag");
    // The CLI asks openstacksdk, which asks at 2.48: the standard form.
    let shown = admin.json(&["server", "show", "--diagnostics", &id]);
    assert_eq!(shown["state"], "running", "{shown}");
    assert_eq!(shown["has_config_drive"], true, "{shown}");
    assert_eq!(
        shown["memory_details"],
        json!({"maximum": 524288, "used": 0}),
        "{shown}"
    );
    assert_eq!(shown["num_nics"], 1, "{shown}");
    let path = format!("/v2.1/servers/{id}/diagnostics");
    let a = admin.calls(vec![
        call("GET", path.clone(), None, None),
        call("GET", path.clone(), Some("2.47"), None),
        call("GET", path.clone(), Some("2.48"), None),
        call("GET", path.clone(), Some("2.96"), None),
    ]);
    for r in &a[..2] {
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.json()["memory"], 524288, "{}", r.text);
        assert_eq!(r.json()["vda_errors"], -1, "{}", r.text);
    }
    let standard = json!({
        "config_drive": true,
        "cpu_details": [{"id": 0, "time": 17300000000_i64, "utilisation": 15}],
        "disk_details": [{
            "errors_count": 1, "read_bytes": 262144, "read_requests": 112,
            "write_bytes": 5778432, "write_requests": 488
        }],
        "driver": "libvirt",
        "hypervisor": "kvm",
        "hypervisor_os": "ubuntu",
        "memory_details": {"maximum": 524288, "used": 0},
        "nic_details": [{
            "mac_address": "01:23:45:67:89:ab", "rx_drop": 200, "rx_errors": 100,
            "rx_octets": 2070139, "rx_packets": 26701, "rx_rate": 300, "tx_drop": 500,
            "tx_errors": 400, "tx_octets": 140208, "tx_packets": 662, "tx_rate": 600
        }],
        "num_cpus": 1,
        "num_disks": 1,
        "num_nics": 1,
        "state": "running",
        "uptime": 46664
    });
    for r in &a[2..] {
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.json(), standard, "{}", r.text);
    }
    let denied = member.one(call("GET", path.clone(), None, None));
    assert_eq!(denied.status, 403, "{}", denied.text);
    let missing = "6f1f6a4e-9a47-4c7e-8f0e-00000000abcd";
    admin
        .one(call(
            "GET",
            format!("/v2.1/servers/{missing}/diagnostics"),
            None,
            None,
        ))
        .assert_error(
            404,
            "itemNotFound",
            &format!("Instance {missing} could not be found."),
        );
    member.ok(&["server", "stop", &id]);
    wait_for(&member, &id, "SHUTOFF");
    let a = admin.calls(vec![
        call("GET", path.clone(), None, None),
        call("GET", path, Some("2.48"), None),
    ]);
    for r in &a {
        r.assert_error(
            409,
            "conflictingRequest",
            &format!("Cannot 'get_diagnostics' instance {id} while it is in power state shutdown"),
        );
    }
}

/// `os-server-password`: `{"password": ""}` while nothing set one,
/// DELETE 204; a reader may read, not clear; a missing server 404.
#[test]
fn openstack_cli_server_password_answers_as_nova() {
    let Some((_r, admin, member)) = region("parity_server_password") else {
        return;
    };
    let id = boot(&member, "pw");
    let path = format!("/v2.1/servers/{id}/os-server-password");
    let missing = "6f1f6a4e-9a47-4c7e-8f0e-00000000abcd";
    let a = member.calls(vec![
        call("GET", path.clone(), None, None),
        call("DELETE", path.clone(), None, None),
        call("GET", path.clone(), Some("2.96"), None),
        call(
            "GET",
            format!("/v2.1/servers/{missing}/os-server-password"),
            None,
            None,
        ),
        call(
            "DELETE",
            format!("/v2.1/servers/{missing}/os-server-password"),
            None,
            None,
        ),
    ]);
    assert_eq!(a[0].status, 200, "{}", a[0].text);
    assert_eq!(a[0].json(), json!({"password": ""}));
    assert_eq!(a[1].status, 204, "{}", a[1].text);
    assert_eq!(a[1].text, "");
    assert_eq!(a[2].json(), json!({"password": ""}));
    for r in &a[3..] {
        r.assert_error(
            404,
            "itemNotFound",
            &format!("Instance {missing} could not be found."),
        );
    }
    // openstacksdk's own call, as the admin.
    let out = super::stdout_of(
        std::process::Command::new(admin.bin.join("python"))
            .args([
                "-c",
                &format!(
                    "import openstack\nc = openstack.connect()\n\
                     c.compute.clear_server_password('{id}')\n\
                     print(repr(c.compute.get_server_password('{id}')))"
                ),
            ])
            .envs(admin.env.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
    );
    assert_eq!(out.trim(), "''", "{out}");
}

/// `addSecurityGroup` / `removeSecurityGroup` and
/// `GET /servers/{id}/os-security-groups`, as Nova answers for a server
/// without ports: only `default` exists, and the server has no port for
/// it; Nova's 400s for the body.
#[test]
fn openstack_cli_server_security_groups_answer_as_nova() {
    let Some((_r, _admin, member)) = region("parity_server_security_groups") else {
        return;
    };
    let id = boot(&member, "sg");
    let project = member.json(&["token", "issue"])["project_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let missing = "6f1f6a4e-9a47-4c7e-8f0e-00000000abcd";
    let no_ports = format!("instance_id {id} could not be found as device id on any ports");
    let a = member.calls(vec![
        action(&id, json!({"addSecurityGroup": {"name": "default"}})),
        action(&id, json!({"removeSecurityGroup": {"name": "default"}})),
        action(&id, json!({"addSecurityGroup": {"name": "web"}})),
        action(&id, json!({"removeSecurityGroup": {"name": "web"}})),
        action(&id, json!({"addSecurityGroup": null})),
        action(&id, json!({"addSecurityGroup": {}})),
        action(&id, json!({"removeSecurityGroup": {"name": "  "}})),
        action(missing, json!({"addSecurityGroup": {"name": "default"}})),
        call(
            "GET",
            format!("/v2.1/servers/{id}/os-security-groups"),
            None,
            None,
        ),
        call(
            "GET",
            format!("/v2.1/servers/{missing}/os-security-groups"),
            None,
            None,
        ),
    ]);
    a[0].assert_error(404, "itemNotFound", &no_ports);
    a[1].assert_error(404, "itemNotFound", &no_ports);
    let web = format!("Security group web is not found for project {project}");
    a[2].assert_error(404, "itemNotFound", &web);
    a[3].assert_error(404, "itemNotFound", &web);
    a[4].assert_error(400, "badRequest", "Missing parameter dict");
    a[5].assert_error(400, "badRequest", "Security group not specified");
    a[6].assert_error(400, "badRequest", "Security group name cannot be empty");
    a[7].assert_error(
        404,
        "itemNotFound",
        &format!("Instance {missing} could not be found."),
    );
    assert_eq!(a[8].status, 200, "{}", a[8].text);
    assert_eq!(a[8].json(), json!({"security_groups": []}));
    a[9].assert_error(
        404,
        "itemNotFound",
        &format!("Instance {missing} could not be found."),
    );
    // openstacksdk's own call sees Nova's 404.
    let out = super::stdout_of(
        std::process::Command::new(member.bin.join("python"))
            .args([
                "-c",
                &format!(
                    "import openstack\nc = openstack.connect()\n\
                     try:\n    c.compute.add_security_group_to_server('{id}', {{'name': 'default'}})\n\
                     except openstack.exceptions.NotFoundException as e:\n    print(e.status_code)"
                ),
            ])
            .envs(member.env.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
    );
    assert_eq!(out.trim(), "404", "{out}");
}

/// `os-server-external-events`: Nova's schema per microversion, each
/// event's code (200 cast to the host, 400 a volume event without a tag,
/// 404 no such instance, 422 no host) and 200 or 207 for the whole, as
/// Nova's code computes them; admins (and the `service` role) only.
#[test]
fn openstack_cli_server_external_events_answer_as_nova() {
    let Some((_r, admin, member)) = region("parity_external_events") else {
        return;
    };
    let id = boot(&member, "ev");
    // A server that found no host: ERROR in cell0, no host.
    admin.ok(&[
        "flavor", "create", "--ram", "64", "--disk", "5000", "--vcpus", "1", "huge",
    ]);
    let mut args = BOOT.to_vec();
    args[3] = "huge";
    args.push("nohost");
    let nohost = member.json(&args)["id"].as_str().unwrap().to_owned();
    wait_for(&member, &nohost, "ERROR");
    let missing = "6f1f6a4e-9a47-4c7e-8f0e-00000000abcd";
    let post = |mv: &'static str, events: Value| {
        call(
            "POST",
            "/v2.1/os-server-external-events",
            Some(mv),
            Some(json!({ "events": events })),
        )
    };
    let a = admin.calls(vec![
        post(
            "2.1",
            json!([{"server_uuid": id, "name": "network-vif-plugged", "tag": "port-1"}]),
        ),
        post(
            "2.93",
            json!([
                {"server_uuid": id, "name": "network-changed", "status": "in-progress"},
                {"server_uuid": missing, "name": "network-changed"},
                {"server_uuid": id, "name": "volume-extended"},
                {"server_uuid": nohost, "name": "network-vif-deleted", "tag": "p"},
                {"server_uuid": id, "name": "power-update", "tag": "POWER_OFF"},
                {"server_uuid": id, "name": "volume-reimaged", "tag": "vol-1"}
            ]),
        ),
        post(
            "2.50",
            json!([{"server_uuid": id, "name": "volume-extended", "tag": "v"}]),
        ),
        post("2.75", json!([{"server_uuid": id, "name": "power-update"}])),
        post("2.1", json!([])),
        call(
            "POST",
            "/v2.1/os-server-external-events",
            None,
            Some(json!({"events": [{"server_uuid": id}]})),
        ),
    ]);
    assert_eq!(a[0].status, 200, "{}", a[0].text);
    assert_eq!(
        a[0].json(),
        json!({"events": [{
            "server_uuid": id, "name": "network-vif-plugged", "tag": "port-1",
            "status": "completed", "code": 200
        }]})
    );
    assert_eq!(a[1].status, 207, "{}", a[1].text);
    let got: Vec<(Value, Value)> = a[1].json()["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["code"].clone(), e["status"].clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (json!(200), json!("completed")),
            (json!(404), json!("failed")),
            (json!(400), json!("failed")),
            (json!(422), json!("failed")),
            (json!(200), json!("completed")),
            (json!(200), json!("completed")),
        ],
        "{}",
        a[1].text
    );
    a[2].assert_error(
        400,
        "badRequest",
        "Invalid input for field/attribute name. Value: volume-extended. \
         'volume-extended' is not one of ['network-changed', 'network-vif-plugged', \
         'network-vif-unplugged', 'network-vif-deleted']",
    );
    assert_eq!(a[3].status, 400, "{}", a[3].text);
    a[4].assert_error(
        400,
        "badRequest",
        "Invalid input for field/attribute events. Value: []. [] is too short",
    );
    a[5].assert_error(
        400,
        "badRequest",
        &format!(
            "Invalid input for field/attribute 0. Value: {{'server_uuid': '{id}'}}. \
             'name' is a required property"
        ),
    );
    let denied = member.one(post(
        "2.1",
        json!([{"server_uuid": id, "name": "network-changed"}]),
    ));
    assert_eq!(denied.status, 403, "{}", denied.text);
}
