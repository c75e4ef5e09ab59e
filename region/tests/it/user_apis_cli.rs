//! Key pairs, flavor management, quotas and limits (with the server-group
//! quotas) through the real `openstack` CLI (python-openstackclient from
//! PyPI) against the region binary.

use serde_json::Value;

use super::osc_placement::{os_env, Cli, PACKAGES, VENV};

/// Made with `ssh-keygen`; `ssh-keygen -l -E md5` gives [`RSA_FP`].
const RSA: &str = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQDCY1fb/jaZKOc+i/NOz0mLhm2/OVBBVQ7fAoPW0TCC/BSYNTISIZ7G5FlzCcxZ0kSueg/kPPDOxlmXGwuSZzP4Ss1zNPNXpBRJZ9jZeEOibGkECxPYO4C+8FZggZQUvA0ftKznBWVOB38qLIItUSy06H5y9KdHXzWgZqs+CXaC6Q== test@example";
const RSA_FP: &str = "c1:61:81:b2:0e:29:e4:ce:3d:a3:d3:0b:5a:c2:37:c9";

/// The value of `name` in a `[{"Name": …, "Value": …}]` or
/// `[{"Resource": …, "Limit": …}]` listing, or in a plain object.
fn field(v: &Value, name: &str) -> Value {
    if let Some(a) = v.as_array() {
        for row in a {
            let n = row.get("Name").or_else(|| row.get("Resource"));
            if n.and_then(Value::as_str) == Some(name) {
                return row
                    .get("Value")
                    .or_else(|| row.get("Limit"))
                    .cloned()
                    .unwrap_or(Value::Null);
            }
        }
        return Value::Null;
    }
    v.get(name).cloned().unwrap_or(Value::Null)
}

#[test]
fn openstack_cli_keypairs_flavors_quotas_and_limits() {
    openstack_cli_keypairs_flavors_quotas_and_limits_with(&[]);
}

/// The same on PostgreSQL (a database per service and cell) and RabbitMQ
/// (a vhost per cell).
#[test]
fn openstack_cli_keypairs_flavors_quotas_and_limits_on_postgresql_and_rabbitmq() {
    let Some(env) = super::production_backends("user_apis") else {
        return;
    };
    openstack_cli_keypairs_flavors_quotas_and_limits_with(&env);
}

fn openstack_cli_keypairs_flavors_quotas_and_limits_with(extra: &[(&'static str, String)]) {
    let Some(bin) = testkit::python::venv_or_skip(VENV, PACKAGES) else {
        return;
    };
    let dir = testkit::temp_dir("region_user_apis_cli");
    let r = super::start_catalog(&dir, extra);
    let admin = Cli {
        bin: bin.clone(),
        env: os_env(&r, "admin", 0, "admin"),
    };
    let member = Cli {
        bin: bin.clone(),
        env: os_env(&r, "demo", 1, "demo"),
    };

    // Key pairs: import, list, show, delete.
    let key_file = dir.join("k1.pub");
    std::fs::write(&key_file, RSA).unwrap();
    let k = member.json(&[
        "keypair",
        "create",
        "--public-key",
        key_file.to_str().unwrap(),
        "k1",
    ]);
    assert_eq!(k["fingerprint"], RSA_FP, "{k}");
    let (ok, _, err) = member.run(&[
        "keypair",
        "create",
        "--public-key",
        key_file.to_str().unwrap(),
        "k1",
    ]);
    assert!(!ok && err.contains("409"), "duplicate: {err}");
    let listed = member.json(&["keypair", "list"]);
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k["Name"] == "k1" && k["Fingerprint"] == RSA_FP),
        "{listed}"
    );
    let shown = member.json(&["keypair", "show", "k1"]);
    assert_eq!(shown["fingerprint"], RSA_FP, "{shown}");
    // The admin's own list does not hold the member's key.
    let theirs = admin.json(&["keypair", "list"]);
    assert!(
        !theirs.as_array().unwrap().iter().any(|k| k["Name"] == "k1"),
        "{theirs}"
    );
    member.ok(&["keypair", "delete", "k1"]);
    assert_eq!(member.json(&["keypair", "list"]), Value::Array(vec![]));

    // Flavors: create (private, with a property), set a property, give the
    // member's project access, show, delete.
    let f = admin.json(&[
        "flavor",
        "create",
        "--ram",
        "128",
        "--vcpus",
        "1",
        "--disk",
        "1",
        "--private",
        "--property",
        "hw:cpu_policy=dedicated",
        "cli.small",
    ]);
    assert_eq!(f["name"], "cli.small", "{f}");
    assert_eq!(f["os-flavor-access:is_public"], false, "{f}");
    let (ok, _, err) = admin.run(&[
        "flavor",
        "create",
        "--ram",
        "1",
        "--vcpus",
        "1",
        "--disk",
        "0",
        "cli.small",
    ]);
    assert!(!ok && err.contains("409"), "duplicate name: {err}");
    admin.ok(&[
        "flavor",
        "set",
        "--property",
        "hw:mem_page_size=large",
        "cli.small",
    ]);
    let shown = admin.json(&["flavor", "show", "cli.small"]);
    let props = shown["properties"].to_string();
    assert!(
        props.contains("hw:cpu_policy") && props.contains("hw:mem_page_size"),
        "{shown}"
    );
    // Private: the member does not see it until given access.
    let names = |v: Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|f| f["Name"].as_str().unwrap_or("").to_owned())
            .collect()
    };
    assert!(!names(member.json(&["flavor", "list"])).contains(&"cli.small".to_owned()));
    admin.ok(&["flavor", "set", "--project", "demo", "cli.small"]);
    assert!(names(member.json(&["flavor", "list"])).contains(&"cli.small".to_owned()));
    let access = admin.json(&["flavor", "show", "cli.small"]);
    assert!(
        access["access_project_ids"].to_string().len() > 4,
        "{access}"
    );
    admin.ok(&["flavor", "delete", "cli.small"]);
    let (ok, _, _) = admin.run(&["flavor", "show", "cli.small"]);
    assert!(!ok, "deleted flavor still shown");

    // Quotas and limits.
    let q = admin.json(&["quota", "show", "--compute", "demo"]);
    assert_eq!(field(&q, "instances"), 10, "{q}");
    admin.ok(&["quota", "set", "--instances", "5", "--cores", "7", "demo"]);
    // The member reads its own project's (a member cannot look projects up
    // by name).
    let q = member.json(&["quota", "show", "--compute"]);
    assert_eq!(field(&q, "instances"), 5, "{q}");
    assert_eq!(field(&q, "cores"), 7, "{q}");
    let l = member.json(&["limits", "show", "--absolute"]);
    // openstacksdk names the absolute limits in snake case.
    assert_eq!(field(&l, "max_total_instances"), 5, "{l}");
    assert_eq!(field(&l, "max_total_cores"), 7, "{l}");
    assert_eq!(field(&l, "max_total_keypairs"), 100, "{l}");
    assert_eq!(field(&l, "total_instances_used"), 0, "{l}");
    // A member may not set quotas.
    let (ok, _, err) = member.run(&["quota", "set", "--instances", "50", "demo"]);
    assert!(!ok, "member set quotas: {err}");

    // Server-group quotas: `server_groups` per project on group create,
    // `server_group_members` per group on boot, with Nova's 403 messages.
    admin.ok(&[
        "quota",
        "set",
        "--server-groups",
        "1",
        "--server-group-members",
        "1",
        "demo",
    ]);
    let l = member.json(&["limits", "show", "--absolute"]);
    assert_eq!(field(&l, "max_server_groups"), 1, "{l}");
    assert_eq!(field(&l, "max_server_group_members"), 1, "{l}");
    assert_eq!(field(&l, "total_server_groups_used"), 0, "{l}");
    let group = member.json(&[
        "server",
        "group",
        "create",
        "--policy",
        "anti-affinity",
        "first",
    ]);
    let gid = group["id"].as_str().unwrap().to_owned();
    let (ok, _, err) = member.run(&[
        "server",
        "group",
        "create",
        "--policy",
        "anti-affinity",
        "second",
    ]);
    assert!(
        !ok && err.contains("Quota exceeded, too many server groups.") && err.contains("403"),
        "second group: {err}"
    );
    let l = member.json(&["limits", "show", "--absolute"]);
    assert_eq!(field(&l, "total_server_groups_used"), 1, "{l}");
    let boot = |name: &str| {
        member.run(&[
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
            "-f",
            "json",
            name,
        ])
    };
    let (ok, out, err) = boot("in-group");
    assert!(ok, "first member: {out} {err}");
    let (ok, _, err) = boot("over");
    assert!(
        !ok && err.contains("Quota exceeded, too many servers in group") && err.contains("403"),
        "second member: {err}"
    );
    let shown = member.json(&["server", "group", "show", "first"]);
    assert_eq!(
        shown["members"].as_array().map(Vec::len),
        Some(1),
        "{shown}"
    );

    drop(r);
    std::fs::remove_dir_all(&dir).ok();
}
