//! Per-project image limits as Glance's unified limits, through the real
//! `openstack` CLI: an admin registers a default and sets a project's own
//! limit in identity (`openstack registered limit` / `openstack limit`),
//! and the image service holds each project to its own.

use serde_json::Value;

use super::osc_placement::{os_env, Cli, PACKAGES, VENV};

/// `openstack limit create` of `image_count_total` for the project demo.
fn limit_create(value: &str) -> Vec<&str> {
    vec![
        "limit",
        "create",
        "--project",
        "demo",
        "--service",
        "glance",
        "--resource-limit",
        value,
        "image_count_total",
    ]
}

/// `openstack image create` of an empty raw image.
fn image_create(name: &str) -> [&str; 7] {
    [
        "image",
        "create",
        "--disk-format",
        "raw",
        "--container-format",
        "bare",
        name,
    ]
}

fn id_of(v: &Value) -> String {
    v["id"]
        .as_str()
        .unwrap_or_else(|| panic!("an id: {v}"))
        .to_owned()
}

#[test]
fn openstack_cli_sets_per_project_image_limits() {
    let Some(bin) = testkit::python::venv_or_skip(VENV, PACKAGES) else {
        return;
    };
    let dir = testkit::temp_dir("region_image_limits_cli");
    let r = super::start_catalog(&dir, &[]);
    let admin = Cli {
        bin: bin.clone(),
        env: os_env(&r, "admin", 0, "admin"),
    };
    let member = Cli {
        bin,
        env: os_env(&r, "demo", 1, "demo"),
    };

    // The service and region the limits name, as the catalog has them.
    let glance = admin.json(&["service", "show", "glance"]);
    assert_eq!(glance["type"], "image", "{glance}");
    // Without a registered limit there is nothing to override.
    let (ok, _, err) = admin.run(&limit_create("1"));
    assert!(
        !ok && err.contains("no corresponding registered limit"),
        "{err}"
    );
    let reg = admin.json(&[
        "registered",
        "limit",
        "create",
        "--service",
        "glance",
        "--default-limit",
        "50",
        "image_count_total",
    ]);
    assert_eq!(reg["default_limit"], 50, "{reg}");
    let lim = admin.json(&limit_create("1"));
    assert_eq!(lim["resource_limit"], 1, "{lim}");
    let (ok, _, err) = member.run(&limit_create("9"));
    assert!(!ok && err.contains("403"), "a member sets no limit: {err}");

    // The member's project holds one image, then is refused (413).
    member.ok(&image_create("one"));
    let (ok, _, err) = member.run(&image_create("two"));
    assert!(
        !ok && err.contains("image_count_total is over limit of 1"),
        "{err}"
    );
    // Another project keeps the registered default.
    admin.ok(&image_create("adm"));

    // A member sees its own project's limits only; the admin sees them all.
    let mine = member.json(&["limit", "list"]);
    assert_eq!(mine.as_array().map(Vec::len), Some(1), "{mine}");
    // Raised: the next create passes at once.
    let raised = admin.json(&["limit", "set", "--resource-limit", "2", &id_of(&lim)]);
    assert_eq!(raised["resource_limit"], 2, "{raised}");
    member.ok(&image_create("two"));

    // A registered limit a project limit refers to stays; then both go.
    let (ok, _, err) = admin.run(&["registered", "limit", "delete", &id_of(&reg)]);
    assert!(!ok && err.contains("project limits associated"), "{err}");
    admin.ok(&["limit", "delete", &id_of(&lim)]);
    admin.ok(&["registered", "limit", "delete", &id_of(&reg)]);
    let none = admin.json(&["registered", "limit", "list"]);
    assert_eq!(none.as_array().map(Vec::len), Some(0), "{none}");
    let _ = std::fs::remove_dir_all(&dir);
}
