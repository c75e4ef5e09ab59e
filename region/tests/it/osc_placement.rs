//! The real `openstack` CLI with osc-placement (from PyPI) against the
//! region's placement, logged in through the region's identity.

use std::process::Command;

use serde_json::Value;

/// The clients, pinned: python-openstackclient (with openstacksdk) and
/// osc-placement.
pub(crate) const PACKAGES: &[&str] = &["python-openstackclient==7.4.0", "osc-placement==4.9.1"];
/// The venv holding [`PACKAGES`].
pub(crate) const VENV: &str = "osc-placement-7.4.0-4.9.1";

pub(crate) struct Cli {
    pub(crate) bin: std::path::PathBuf,
    pub(crate) env: Vec<(String, String)>,
}

/// The `OS_*` environment of a user of the region `r`.
pub(crate) fn os_env(
    r: &super::Running,
    user: &str,
    nth: usize,
    project: &str,
) -> Vec<(String, String)> {
    vec![
        ("OS_AUTH_URL".into(), r.url("identity")),
        ("OS_IDENTITY_API_VERSION".into(), "3".into()),
        ("OS_USERNAME".into(), user.into()),
        ("OS_PASSWORD".into(), r.export("OS_PASSWORD", nth)),
        ("OS_PROJECT_NAME".into(), project.into()),
        ("OS_USER_DOMAIN_NAME".into(), "Default".into()),
        ("OS_PROJECT_DOMAIN_NAME".into(), "Default".into()),
    ]
}

impl Cli {
    pub(crate) fn run(&self, args: &[&str]) -> (bool, String, String) {
        let out = Command::new(self.bin.join("openstack"))
            .args(["--os-placement-api-version", "1.39"])
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .output()
            .expect("run openstack");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run(args);
        assert!(ok, "openstack {args:?} failed:\n{out}\n{err}");
        out
    }
    pub(crate) fn json(&self, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.extend(["-f", "json"]);
        serde_json::from_str(&self.ok(&a)).expect("json output")
    }
}

#[test]
fn openstack_cli_drives_placement() {
    let Some(bin) = testkit::python::venv_or_skip(VENV, PACKAGES) else {
        return;
    };
    let dir = testkit::temp_dir("region_osc_placement");
    // The catalog must name the placement port really used.
    let r = super::start_with(
        &dir,
        &[(
            "REGION__REGION__PLACEMENT_LISTEN",
            format!("127.0.0.1:{}", testkit::free_port()),
        )],
    );
    let env = |user: &str, nth: usize, project: &str| Cli {
        bin: bin.clone(),
        env: os_env(&r, user, nth, project),
    };
    let admin = env("admin", 0, "admin");
    let member = env("demo", 1, "demo");

    // The fake computes of both cells are there.
    let rps = admin.json(&["resource", "provider", "list"]);
    assert_eq!(rps.as_array().unwrap().len(), 4, "{rps}");

    // Create, show, rename.
    let rp = admin.json(&["resource", "provider", "create", "osc-test"]);
    let uuid = rp["uuid"].as_str().unwrap().to_owned();
    let shown = admin.json(&["resource", "provider", "show", &uuid]);
    assert_eq!(shown["name"], "osc-test");
    admin.ok(&[
        "resource",
        "provider",
        "set",
        "--name",
        "osc-renamed",
        &uuid,
    ]);
    assert_eq!(
        admin.json(&["resource", "provider", "show", &uuid])["name"],
        "osc-renamed"
    );

    // Inventory.
    admin.ok(&[
        "resource",
        "provider",
        "inventory",
        "set",
        &uuid,
        "--resource",
        "VCPU=8",
        "--resource",
        "MEMORY_MB=4096",
    ]);
    let inv = admin.json(&["resource", "provider", "inventory", "list", &uuid]);
    assert_eq!(inv.as_array().unwrap().len(), 2, "{inv}");

    // Classes and traits.
    admin.ok(&["resource", "class", "create", "CUSTOM_OSC_GPU"]);
    let classes = admin.json(&["resource", "class", "list"]);
    assert!(classes
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["name"] == "CUSTOM_OSC_GPU"));
    admin.ok(&["trait", "create", "CUSTOM_OSC_FAST"]);
    let traits = admin.json(&["trait", "list"]);
    assert!(traits
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "CUSTOM_OSC_FAST"));
    admin.ok(&[
        "resource",
        "provider",
        "trait",
        "set",
        "--trait",
        "CUSTOM_OSC_FAST",
        &uuid,
    ]);
    let t = admin.json(&["resource", "provider", "trait", "list", &uuid]);
    assert_eq!(t[0]["name"], "CUSTOM_OSC_FAST");

    // Aggregates (generation-checked at 1.19+).
    let generation = admin.json(&["resource", "provider", "show", &uuid])["generation"].to_string();
    let agg = "8d1f4d1c-8a8f-4a35-a2f1-0d6b7f4c1e01";
    admin.ok(&[
        "resource",
        "provider",
        "aggregate",
        "set",
        "--aggregate",
        agg,
        "--generation",
        &generation,
        &uuid,
    ]);
    let aggs = admin.json(&["resource", "provider", "aggregate", "list", &uuid]);
    assert_eq!(aggs[0]["uuid"], agg);

    // Candidates with the trait find exactly this provider.
    let cands = admin.json(&[
        "allocation",
        "candidate",
        "list",
        "--resource",
        "VCPU=2",
        "--required",
        "CUSTOM_OSC_FAST",
    ]);
    assert_eq!(cands.as_array().unwrap().len(), 1, "{cands}");

    // Allocations and usages.
    let consumer = "5a3c0c0e-1111-4c4c-9c9c-000000000001";
    admin.ok(&[
        "resource",
        "provider",
        "allocation",
        "set",
        consumer,
        "--allocation",
        &format!("rp={uuid},VCPU=2,MEMORY_MB=512"),
        "--project-id",
        "p1",
        "--user-id",
        "u1",
        "--consumer-type",
        "INSTANCE",
    ]);
    let alloc = admin.json(&["resource", "provider", "allocation", "show", consumer]);
    assert_eq!(alloc[0]["resources"]["VCPU"], 2, "{alloc}");
    let usage = admin.json(&["resource", "provider", "usage", "show", &uuid]);
    let vcpu = usage
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["resource_class"] == "VCPU")
        .unwrap();
    assert_eq!(vcpu["usage"], 2);
    // Removing an inventory that is allocated from is refused (409
    // placement.inventory.inuse), and nothing changes.
    let (ok, _, err) = admin.run(&[
        "resource",
        "provider",
        "inventory",
        "set",
        &uuid,
        "--resource",
        "MEMORY_MB=4096",
    ]);
    assert!(!ok, "removing an inventory in use must fail");
    assert!(err.contains("409") || err.contains("in use"), "{err}");
    let inv = admin.json(&["resource", "provider", "inventory", "list", &uuid]);
    assert!(
        inv.as_array()
            .unwrap()
            .iter()
            .any(|i| i["resource_class"] == "VCPU"),
        "{inv}"
    );
    // Shrinking one below its usage is allowed, as upstream (placement
    // logs a warning; the provider takes no new VCPU until usage fits).
    admin.ok(&[
        "resource",
        "provider",
        "inventory",
        "set",
        &uuid,
        "--resource",
        "VCPU=1",
        "--resource",
        "MEMORY_MB=4096",
    ]);
    admin.ok(&["resource", "provider", "allocation", "delete", consumer]);

    // A member is refused by placement's policy.
    let (ok, _, err) = member.run(&["resource", "provider", "list"]);
    assert!(!ok && err.contains("403"), "{err}");

    // Delete the inventory, then the provider.
    admin.ok(&[
        "resource",
        "provider",
        "inventory",
        "delete",
        &uuid,
        "--resource-class",
        "MEMORY_MB",
    ]);
    admin.ok(&["resource", "provider", "delete", &uuid]);
    let (ok, _, _) = admin.run(&["resource", "provider", "show", &uuid]);
    assert!(!ok);
    drop(r);
    std::fs::remove_dir_all(&dir).ok();
}
