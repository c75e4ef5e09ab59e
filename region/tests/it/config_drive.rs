//! The config drive on the embedded region (issue 29): `config_drive`
//! at create (Nova's booleans), what the fake host's driver was handed
//! for the drive (`openstack/latest/meta_data.json` with the server's
//! uuid, name, hostname, metadata and key; `user_data` decoded), Nova's
//! `config_drive` field in show, no drive unless asked, and none left
//! after delete. The libvirt driver's ISO is `compute::it libvirt::*`'s
//! and the real guest reading it is `libvirt_cli`'s.

use base64::Engine as _;
use fabric::ids::InstanceUuid;
use serde_json::{json, Value};

use crate::server_actions::{start, IMAGE};

const PUBLIC_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGLRpk1YwFWzIzt2DhdONnLRmWzgi7IQ/rXX7spsyIwH cd@test";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_drive_carries_the_servers_metadata_and_user_data() {
    let (region, api, _dir) = start("config_drive").await;
    let hv = region.cells[0].hypervisor.clone();
    let r = api
        .call(
            &api.member,
            "2.1",
            "POST",
            "/v2.1/os-keypairs",
            Some(json!({"keypair": {"name": "cdkey", "public_key": PUBLIC_KEY}})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let user_data = "#!/bin/sh\necho user-data-ran\n";
    let create = |name: &str, config_drive: Value| {
        json!({"server": {
            "name": name, "flavorRef": "1", "imageRef": IMAGE,
            "config_drive": config_drive, "key_name": "cdkey",
            "metadata": {"role": "web", "tier": "1"},
            "user_data": base64::engine::general_purpose::STANDARD.encode(user_data),
        }})
    };
    let post = |body: Value| api.call(&api.member, "2.1", "POST", "/v2.1/servers", Some(body));
    let mut ids = Vec::new();
    for (name, cd, want) in [
        ("cd-bool", json!(true), true),
        ("cd-string", json!("True"), true),
        ("cd-no", json!("no"), false),
    ] {
        let r = post(create(name, cd)).await;
        assert_eq!(r.status, 202, "{name}: {}", r.body);
        let id = r.body["server"]["id"].as_str().unwrap().to_owned();
        let (s, _) = api.settle(&id).await;
        assert_eq!(s["status"], "ACTIVE", "{name}: {s}");
        assert_eq!(s["config_drive"], if want { "True" } else { "" }, "{name}");
        let uuid: InstanceUuid = id.parse().unwrap();
        let files = hv.config_drive(uuid);
        if !want {
            assert!(files.is_none(), "{name} asked for no config drive");
            ids.push(id);
            continue;
        }
        let files = files.unwrap_or_else(|| panic!("{name}: no config drive"));
        let get = |p: &str| {
            files
                .iter()
                .find(|(n, _)| n == p)
                .unwrap_or_else(|| panic!("{name}: no {p}"))
                .1
                .clone()
        };
        let m: Value = serde_json::from_slice(&get("openstack/latest/meta_data.json")).unwrap();
        assert_eq!(m["uuid"], id.as_str());
        assert_eq!(m["name"], name);
        assert_eq!(m["hostname"], format!("{name}.novalocal"));
        assert_eq!(m["meta"], json!({"role": "web", "tier": "1"}));
        assert_eq!(m["public_keys"], json!({"cdkey": PUBLIC_KEY}));
        assert_eq!(
            m["keys"],
            json!([{"name": "cdkey", "type": "ssh", "data": PUBLIC_KEY}])
        );
        assert_eq!(m["availability_zone"], "nova");
        assert_eq!(m["launch_index"], 0);
        assert_eq!(get("openstack/latest/user_data"), user_data.as_bytes());
        assert_eq!(
            get("openstack/2012-08-10/meta_data.json"),
            get("openstack/latest/meta_data.json")
        );
        ids.push(id);
    }

    // Nova's booleans only.
    for bad in [json!("maybe"), json!(1), json!(null)] {
        let r = post(create("bad", bad.clone())).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.body);
        let msg = r.body["badRequest"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains("config_drive"), "{bad}: {msg}");
    }

    // Gone with the guest.
    for id in &ids {
        api.delete_and_wait(id).await;
        assert!(hv.config_drive(id.parse().unwrap()).is_none(), "{id}");
    }
}
