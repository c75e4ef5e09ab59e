//! Server actions through the real `openstack` CLI on the region binary:
//! stop/start, reboot, pause/unpause, suspend/resume, lock/unlock, rebuild,
//! properties and tags, and the instance actions (`server event`).

use std::time::{Duration, Instant};

use serde_json::Value;

use super::osc_placement::{os_env, Cli, PACKAGES, VENV};

/// `openstack --os-compute-api-version 2.84 <args>`.
fn os(cli: &Cli, args: &[&str]) -> String {
    let mut a = vec!["--os-compute-api-version", "2.84"];
    a.extend_from_slice(args);
    cli.ok(&a)
}

fn os_json(cli: &Cli, args: &[&str]) -> Value {
    let mut a = vec!["--os-compute-api-version", "2.84"];
    a.extend_from_slice(args);
    cli.json(&a)
}

/// Waits until `server` has `status` and no task.
pub(crate) fn wait_for(cli: &Cli, server: &str, status: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = os_json(cli, &["server", "show", server]);
        if s["status"] == status && s["OS-EXT-STS:task_state"].is_null() {
            return s;
        }
        assert!(Instant::now() < deadline, "{server} never {status}: {s}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn openstack_cli_server_actions_properties_tags_and_events() {
    openstack_cli_server_actions_properties_tags_and_events_with(&[]);
}

/// The same on PostgreSQL (a database per service and cell) and RabbitMQ
/// (a vhost per cell).
#[test]
fn openstack_cli_server_actions_properties_tags_and_events_on_postgresql_and_rabbitmq() {
    let Some(env) = super::production_backends("actions") else {
        return;
    };
    openstack_cli_server_actions_properties_tags_and_events_with(&env);
}

fn openstack_cli_server_actions_properties_tags_and_events_with(extra: &[(&'static str, String)]) {
    let Some(bin) = testkit::python::venv_or_skip(VENV, PACKAGES) else {
        return;
    };
    let dir = testkit::temp_dir("region_server_actions_cli");
    let r = super::start_catalog(&dir, extra);
    let member = Cli {
        bin: bin.clone(),
        env: os_env(&r, "demo", 1, "demo"),
    };
    let admin = Cli {
        bin,
        env: os_env(&r, "admin", 0, "admin"),
    };
    let image = "cirros-0.6.2-x86_64-disk";
    let server = os_json(
        &member,
        &[
            "server", "create", "--flavor", "m1.tiny", "--image", image, "--nic", "none", "--wait",
            "act1",
        ],
    );
    assert_eq!(server["status"], "ACTIVE", "{server}");
    let log = os(&member, &["console", "log", "show", "act1"]);
    assert!(log.contains("FAKE CONSOLE OUTPUT"), "{log}");
    let log = os(&member, &["console", "log", "show", "--lines", "1", "act1"]);
    assert_eq!(log.trim(), "LAST LINE");

    os(&member, &["server", "stop", "act1"]);
    let s = wait_for(&member, "act1", "SHUTOFF");
    assert_eq!(s["OS-EXT-STS:vm_state"], "stopped", "{s}");
    // Stopping a stopped server is a conflict the CLI reports.
    let (ok, _, err) = member.run(&["--os-compute-api-version", "2.84", "server", "stop", "act1"]);
    assert!(!ok && err.contains("vm_state stopped"), "{err}");
    os(&member, &["server", "start", "act1"]);
    wait_for(&member, "act1", "ACTIVE");
    os(&member, &["server", "reboot", "--soft", "--wait", "act1"]);
    wait_for(&member, "act1", "ACTIVE");
    os(&member, &["server", "reboot", "--hard", "--wait", "act1"]);
    wait_for(&member, "act1", "ACTIVE");
    os(&member, &["server", "pause", "act1"]);
    let s = wait_for(&member, "act1", "PAUSED");
    assert_eq!(s["OS-EXT-STS:power_state"], 3, "{s}");
    os(&member, &["server", "unpause", "act1"]);
    wait_for(&member, "act1", "ACTIVE");
    os(&member, &["server", "suspend", "act1"]);
    wait_for(&member, "act1", "SUSPENDED");
    os(&member, &["server", "resume", "act1"]);
    wait_for(&member, "act1", "ACTIVE");

    os(
        &member,
        &["server", "lock", "--reason", "hands off", "act1"],
    );
    let s = os_json(&member, &["server", "show", "act1"]);
    assert_eq!(s["locked"], true, "{s}");
    assert_eq!(s["locked_reason"], "hands off", "{s}");
    let (ok, _, err) = member.run(&[
        "--os-compute-api-version",
        "2.84",
        "server",
        "pause",
        "act1",
    ]);
    assert!(!ok && err.contains("is locked"), "{err}");
    os(&member, &["server", "unlock", "act1"]);

    os(
        &member,
        &["server", "rebuild", "--image", image, "--wait", "act1"],
    );
    wait_for(&member, "act1", "ACTIVE");

    os(
        &member,
        &[
            "server",
            "set",
            "--property",
            "role=web",
            "--property",
            "tier=1",
            "act1",
        ],
    );
    os(
        &member,
        &["server", "set", "--tag", "blue", "--tag", "green", "act1"],
    );
    let s = os_json(&member, &["server", "show", "act1"]);
    let props = s["properties"].clone();
    assert!(
        props["role"] == "web" || props.as_str().is_some_and(|p| p.contains("role='web'")),
        "{s}"
    );
    let tags = s["tags"].to_string();
    assert!(tags.contains("blue") && tags.contains("green"), "{s}");
    os(&member, &["server", "unset", "--property", "tier", "act1"]);
    let s = os_json(&member, &["server", "show", "act1"]);
    assert!(!s["properties"].to_string().contains("tier"), "{s}");

    // The instance actions, newest first.
    let events = os_json(&member, &["server", "event", "list", "act1"]);
    let actions: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["Action"].as_str().unwrap_or_default())
        .collect();
    for a in [
        "create", "stop", "start", "reboot", "pause", "unpause", "suspend", "resume", "lock",
        "unlock", "rebuild",
    ] {
        assert!(actions.contains(&a), "{a} missing from {actions:?}");
    }
    assert_eq!(actions[0], "rebuild", "{actions:?}");
    let stop = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["Action"] == "stop")
        .unwrap();
    let rid = stop["Request ID"].as_str().unwrap();
    let shown = os_json(
        &admin,
        &["server", "event", "show", s["id"].as_str().unwrap(), rid],
    );
    let text = shown.to_string();
    assert!(
        text.contains("compute_stop_instance") && text.contains("Success"),
        "{shown}"
    );

    os(&member, &["server", "delete", "--wait", "act1"]);
    drop(r);
    std::fs::remove_dir_all(&dir).ok();
}
