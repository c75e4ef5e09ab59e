//! Servers through the real clients (python-openstackclient and
//! openstacksdk from PyPI) on the embedded default: boot, list, show,
//! delete; afterwards placement holds no allocation.

use std::process::Command;

use super::osc_placement::{os_env, Cli, PACKAGES, VENV};

#[test]
fn openstack_cli_boots_lists_shows_and_deletes_servers() {
    let Some(bin) = testkit::python::venv_or_skip(VENV, PACKAGES) else {
        return;
    };
    let dir = testkit::temp_dir("region_servers_cli");
    // The catalog must name the ports really used.
    let port = || format!("127.0.0.1:{}", super::free_port());
    let r = super::start_with(
        &dir,
        &[
            ("REGION__REGION__PLACEMENT_LISTEN", port()),
            ("REGION__REGION__COMPUTE_LISTEN", port()),
            ("REGION__REGION__IMAGE_LISTEN", port()),
        ],
    );
    let admin = Cli {
        bin: bin.clone(),
        env: os_env(&r, "admin", 0, "admin"),
    };
    let member = Cli {
        bin: bin.clone(),
        env: os_env(&r, "demo", 1, "demo"),
    };

    let flavors = member.json(&["flavor", "list"]);
    assert!(
        flavors
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["Name"] == "m1.tiny"),
        "{flavors}"
    );
    let images = member.json(&["image", "list"]);
    assert!(
        images
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["Name"] == "cirros-0.6.2-x86_64-disk"),
        "{images}"
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
        "--wait",
        "vm1",
    ]);
    assert_eq!(server["status"], "ACTIVE", "{server}");
    let id = server["id"].as_str().unwrap().to_owned();

    let listed = member.json(&["server", "list"]);
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["ID"] == id.as_str() && s["Status"] == "ACTIVE"),
        "{listed}"
    );
    let shown = member.json(&["server", "show", "vm1"]);
    assert_eq!(shown["OS-EXT-STS:vm_state"], "active", "{shown}");
    assert!(shown["OS-EXT-STS:task_state"].is_null(), "{shown}");
    // The admin sees where it runs; the member does not.
    let admin_view = admin.json(&["server", "show", &id]);
    assert!(
        admin_view["OS-EXT-SRV-ATTR:host"]
            .as_str()
            .unwrap_or("")
            .contains("-host"),
        "{admin_view}"
    );
    assert!(
        shown
            .get("OS-EXT-SRV-ATTR:host")
            .is_none_or(|h| h.is_null()),
        "{shown}"
    );

    // openstacksdk sees the same server.
    let out = Command::new(bin.join("python"))
        .args(["-c", "import openstack; c = openstack.connect(); print(' '.join(s.name for s in c.compute.servers()))"])
        .envs(member.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .expect("run python");
    let names = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && names.split_whitespace().any(|n| n == "vm1"),
        "{names}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    member.ok(&["server", "delete", "--wait", "vm1"]);
    let listed = member.json(&["server", "list"]);
    assert_eq!(listed.as_array().unwrap().len(), 0, "{listed}");
    // Nothing is left allocated in placement.
    for rp in admin
        .json(&["resource", "provider", "list"])
        .as_array()
        .unwrap()
    {
        let uuid = rp["uuid"].as_str().unwrap();
        for u in admin
            .json(&["resource", "provider", "usage", "show", uuid])
            .as_array()
            .unwrap()
        {
            assert_eq!(u["usage"], 0, "{uuid}: {u}");
        }
    }
    drop(r);
    std::fs::remove_dir_all(&dir).ok();
}
