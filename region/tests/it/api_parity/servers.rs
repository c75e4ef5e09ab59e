//! Server parity with Nova (issue 37): `accessIPv4`/`accessIPv6` and
//! the rebuild action, through the `openstack` CLI and openstacksdk
//! against the region binary (the harness in [`super`]).

use std::process::Command;

use serde_json::{json, Value};

use super::{call, region, stdout_of, User, BOOT, IMAGE};

/// Runs `script` with openstacksdk as `user` (`c` is the connection, the
/// image's id in `img` and m1.tiny's in `flv`); its standard output.
fn sdk(user: &User, script: &str) -> String {
    let prelude = format!(
        "import json, openstack\nc = openstack.connect()\n\
         img = c.image.find_image('{IMAGE}').id\nflv = c.compute.find_flavor('m1.tiny').id\n"
    );
    stdout_of(
        Command::new(user.bin.join("python"))
            .args(["-c", &format!("{prelude}{script}")])
            .envs(user.env.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
    )
}

/// `accessIPv4` / `accessIPv6`: kept at create, update and rebuild and
/// shown (`""` when unset), checked as Nova's `ipv4` / `ipv6` formats.
#[test]
fn openstack_cli_access_ips_answer_as_nova() {
    let Some((_r, admin, member)) = region("parity_access_ips") else {
        return;
    };
    // openstacksdk creates, updates and rebuilds with them.
    let out = sdk(
        &member,
        "s = c.compute.create_server(name='ips', image_id=img, flavor_id=flv, networks='none',\n\
         \x20   access_ipv4='192.0.2.10', access_ipv6='2001:DB8::10')\n\
         s = c.compute.wait_for_server(s)\n\
         a = [s.access_ipv4, s.access_ipv6]\n\
         s = c.compute.update_server(s, access_ipv4='192.0.2.11')\n\
         a += [s.access_ipv4, s.access_ipv6]\n\
         c.compute.rebuild_server(s, img, access_ipv6='2001:db8::12')\n\
         s = c.compute.wait_for_server(c.compute.get_server(s.id))\n\
         a += [s.access_ipv4, s.access_ipv6, s.id]\n\
         print(json.dumps(a))",
    );
    let a: Value = serde_json::from_str(out.trim()).expect("json");
    assert_eq!(
        a,
        json!([
            "192.0.2.10",
            "2001:db8::10",
            "192.0.2.11",
            "2001:db8::10",
            "192.0.2.11",
            "2001:db8::12",
            a[6]
        ])
    );
    let id = a[6].as_str().unwrap();
    // The CLI shows them.
    let shown = member.json(&["server", "show", id]);
    assert_eq!(shown["accessIPv4"], "192.0.2.11", "{shown}");
    assert_eq!(shown["accessIPv6"], "2001:db8::12", "{shown}");
    let body = |ips: Value| {
        let mut s = json!({"name": "bad", "imageRef": "x", "flavorRef": "1", "networks": "none"});
        s.as_object_mut()
            .unwrap()
            .extend(ips.as_object().unwrap().clone());
        json!({ "server": s })
    };
    let put = |ips: Value| {
        call(
            "PUT",
            format!("/v2.1/servers/{id}"),
            None,
            Some(json!({ "server": ips })),
        )
    };
    let a = member.calls(vec![
        call(
            "POST",
            "/v2.1/servers",
            Some("2.37"),
            Some(body(json!({"accessIPv4": "1.2.3"}))),
        ),
        call(
            "POST",
            "/v2.1/servers",
            Some("2.37"),
            Some(body(json!({"accessIPv6": "192.0.2.1"}))),
        ),
        put(json!({"accessIPv4": ""})),
        put(json!({"accessIPv6": 6})),
        call(
            "POST",
            format!("/v2.1/servers/{id}/action"),
            None,
            Some(json!({"rebuild": {"imageRef": "x", "accessIPv4": "300.1.1.1"}})),
        ),
        call("GET", "/v2.1/servers?access_ip_v4=192.0.2.11", None, None),
    ]);
    a[0].assert_error(
        400,
        "badRequest",
        "Invalid input for field/attribute accessIPv4. Value: 1.2.3. '1.2.3' is not a 'ipv4'",
    );
    a[1].assert_error(
        400,
        "badRequest",
        "Invalid input for field/attribute accessIPv6. Value: 192.0.2.1. '192.0.2.1' is not a 'ipv6'",
    );
    a[2].assert_error(
        400,
        "badRequest",
        "Invalid input for field/attribute accessIPv4. Value: . '' is not a 'ipv4'",
    );
    a[3].assert_error(
        400,
        "badRequest",
        "Invalid input for field/attribute accessIPv6. Value: 6. 6 is not of type 'string'",
    );
    a[4].assert_error(
        400,
        "badRequest",
        "Invalid input for field/attribute accessIPv4. Value: 300.1.1.1. '300.1.1.1' is not a 'ipv4'",
    );
    assert_eq!(a[5].status, 200, "{}", a[5].text);
    // Admins filter on them (Nova's regex filters).
    let filtered = admin.one(call(
        "GET",
        "/v2.1/servers?all_tenants=1&access_ip_v4=^192%5C.0%5C.2%5C.11$",
        None,
        None,
    ));
    let servers = filtered.json()["servers"].clone();
    assert_eq!(servers.as_array().map(Vec::len), Some(1), "{servers}");
    let none = admin.one(call(
        "GET",
        "/v2.1/servers?all_tenants=1&access_ip_v6=^fe80",
        None,
        None,
    ));
    assert_eq!(none.json()["servers"], json!([]), "{}", none.text);
    member.ok(&["server", "delete", "--wait", id]);
}

/// Rebuild: every field of Nova's rebuild schema at its microversion
/// (`key_name` 2.54, `user_data` 2.57, `trusted_image_certificates` 2.63
/// (kept from the create too), `hostname` 2.90, unknown below), with
/// Nova's messages; a stopped server is rebuilt and stays SHUTOFF.
#[test]
fn openstack_cli_rebuild_answers_as_nova() {
    let Some((_r, _admin, member)) = region("parity_rebuild") else {
        return;
    };
    let dir = testkit::temp_dir("parity_rebuild_files");
    let user_data = dir.join("user-data");
    std::fs::write(&user_data, "#!/bin/sh\necho rebuilt\n").unwrap();
    member.ok(&["keypair", "create", "k1"]);
    member.ok(&["keypair", "create", "k2"]);
    let mut args = vec!["--os-compute-api-version", "2.63"];
    args.extend(BOOT);
    args.extend([
        "--trusted-image-cert",
        "cert-0",
        "--key-name",
        "k1",
        "--wait",
        "vm",
    ]);
    let created = member.json(&args);
    let id = created["id"].as_str().unwrap().to_owned();
    member.ok(&["server", "stop", &id]);
    crate::server_actions_cli::wait_for(&member, &id, "SHUTOFF");
    // The CLI's rebuild of a stopped server waits for SHUTOFF again.
    member.ok(&[
        "--os-compute-api-version",
        "2.94",
        "server",
        "rebuild",
        "--image",
        IMAGE,
        "--name",
        "vm2",
        "--description",
        "rebuilt",
        "--key-name",
        "k2",
        "--user-data",
        user_data.to_str().unwrap(),
        "--hostname",
        "vm2.example.org",
        "--wait",
        &id,
    ]);
    let s = crate::server_actions_cli::wait_for(&member, &id, "SHUTOFF");
    assert_eq!(s["OS-EXT-STS:vm_state"], "stopped", "{s}");
    let shown = member.json(&["--os-compute-api-version", "2.94", "server", "show", &id]);
    // Kept from the create: the CLI's rebuild did not name them.
    assert_eq!(
        shown["trusted_image_certificates"],
        json!(["cert-0"]),
        "{shown}"
    );
    assert_eq!(shown["name"], "vm2", "{shown}");
    assert_eq!(shown["description"], "rebuilt", "{shown}");
    assert_eq!(shown["key_name"], "k2", "{shown}");
    assert_eq!(
        shown["OS-EXT-SRV-ATTR:hostname"], "vm2.example.org",
        "{shown}"
    );
    assert_eq!(shown["OS-EXT-STS:power_state"], 4, "shut down: {shown}");
    let events = member.json(&["server", "event", "list", &id]);
    assert!(events.to_string().contains("rebuild"), "{events}");

    let img = img_id(&member);
    let rebuild = |mv: &'static str, extra: Value| {
        let mut body = json!({ "imageRef": img });
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        call(
            "POST",
            format!("/v2.1/servers/{id}/action"),
            Some(mv),
            Some(json!({ "rebuild": body })),
        )
    };
    let a = member.calls(vec![
        rebuild("2.53", json!({"key_name": "k1"})),
        rebuild("2.56", json!({"user_data": "ZWNobw=="})),
        rebuild("2.89", json!({"hostname": "h1"})),
        rebuild("2.54", json!({"key_name": "nope"})),
        rebuild("2.54", json!({"key_name": ""})),
        rebuild("2.57", json!({"user_data": "abc"})),
        rebuild("2.90", json!({"hostname": "bad_host"})),
        rebuild("2.63", json!({"trusted_image_certificates": []})),
        rebuild("2.57", json!({"personality": []})),
        rebuild(
            "2.56",
            json!({"personality": [{"path": "/f", "contents": "YQ=="}]}),
        ),
        rebuild("2.1", json!({"preserve_ephemeral": "maybe"})),
        rebuild("2.18", json!({"description": "d"})),
        call(
            "POST",
            format!("/v2.1/servers/{id}/action"),
            None,
            Some(json!({"rebuild": {"name": "x"}})),
        ),
        // Removing the key pair and the user data (null), new trusted
        // certificates, at 2.63: the answer carries `user_data`.
        rebuild(
            "2.63",
            json!({"key_name": null, "user_data": null, "preserve_ephemeral": false,
                   "trusted_image_certificates": ["cert-1", "cert-2"]}),
        ),
    ]);
    let unexpected = |k: &str| {
        format!(
            "Invalid input for field/attribute rebuild. Additional properties are not allowed ('{k}' was unexpected)"
        )
    };
    let refused = [
        unexpected("key_name"),
        unexpected("user_data"),
        unexpected("hostname"),
        "Invalid key_name provided.".to_owned(),
        "Invalid input for field/attribute key_name. Value: . '' is not valid under any of the given schemas".to_owned(),
        "Invalid input for field/attribute user_data. Value: abc. 'abc' is not a 'base64'".to_owned(),
        "Invalid input for field/attribute hostname. Value: bad_host. \
         'bad_host' does not match '^[a-zA-Z0-9]+[a-zA-Z0-9-]*[a-zA-Z0-9]+$'"
            .to_owned(),
        "Invalid input for field/attribute trusted_image_certificates. Value: []. [] is too short"
            .to_owned(),
        unexpected("personality"),
        "File injection (personality) is not built in this region; rebuild without 'personality'.".to_owned(),
        "Invalid input for field/attribute preserve_ephemeral. Value: maybe. 'maybe' is not one of \
         [True, 'True', 'TRUE', 'true', '1', 'ON', 'On', 'on', 'YES', 'Yes', 'yes', \
         False, 'False', 'FALSE', 'false', '0', 'OFF', 'Off', 'off', 'NO', 'No', 'no']"
            .to_owned(),
        unexpected("description"),
        "Invalid input for field/attribute rebuild. 'imageRef' is a required property".to_owned(),
    ];
    for (answer, message) in a.iter().zip(&refused) {
        answer.assert_error(400, "badRequest", message);
    }
    assert_eq!(a[13].status, 202, "{}", a[13].text);
    let answered = a[13].json()["server"].clone();
    assert!(
        answered.as_object().unwrap().contains_key("user_data"),
        "{answered}"
    );
    assert_eq!(answered["user_data"], Value::Null, "{answered}");
    assert_eq!(answered["key_name"], Value::Null, "{answered}");
    assert_eq!(answered["status"], "REBUILD", "{answered}");
    assert_eq!(
        answered["trusted_image_certificates"],
        json!(["cert-1", "cert-2"]),
        "{answered}"
    );
    let s = crate::server_actions_cli::wait_for(&member, &id, "SHUTOFF");
    assert!(s["key_name"].is_null(), "{s}");
    // Shown by a show and a detailed list from 2.63, not below.
    let a = member.calls(vec![
        call("GET", format!("/v2.1/servers/{id}"), Some("2.63"), None),
        call("GET", "/v2.1/servers/detail", Some("2.63"), None),
        call("GET", format!("/v2.1/servers/{id}"), Some("2.62"), None),
    ]);
    let certs = json!(["cert-1", "cert-2"]);
    assert_eq!(
        a[0].json()["server"]["trusted_image_certificates"],
        certs,
        "{}",
        a[0].text
    );
    assert_eq!(
        a[1].json()["servers"][0]["trusted_image_certificates"],
        certs,
        "{}",
        a[1].text
    );
    assert!(
        a[2].json()["server"]
            .get("trusted_image_certificates")
            .is_none(),
        "{}",
        a[2].text
    );
    member.ok(&["server", "delete", "--wait", &id]);
    std::fs::remove_dir_all(&dir).ok();
}

/// The cirros image's id, as `user` sees it.
fn img_id(user: &User) -> String {
    user.json(&["image", "show", IMAGE])["id"]
        .as_str()
        .unwrap()
        .to_owned()
}
