//! Servers through the real clients (python-openstackclient and
//! openstacksdk from PyPI), on the embedded default and on PostgreSQL +
//! RabbitMQ (a database per cell, a vhost per cell): boot, list, show,
//! delete; afterwards placement holds no allocation and no cell a live
//! instance.

use std::path::Path;
use std::process::Command;

use super::osc_placement::{os_env, Cli, PACKAGES, VENV};

#[test]
fn openstack_cli_boots_lists_shows_and_deletes_servers() {
    let Some(bin) = testkit::python::venv_or_skip(VENV, PACKAGES) else {
        return;
    };
    let dir = testkit::temp_dir("region_servers_cli");
    let r = super::start_catalog(&dir, &[]);
    boot_list_show_delete(&r, &bin);
    drop(r);
    std::fs::remove_dir_all(&dir).ok();
}

/// The same flow on two cells with a PostgreSQL database and a RabbitMQ
/// vhost each (and the API, placement, identity and image databases on
/// PostgreSQL too).
#[test]
fn openstack_cli_boots_servers_on_postgresql_and_rabbitmq() {
    let Some(bin) = testkit::python::venv_or_skip(VENV, PACKAGES) else {
        return;
    };
    let Some(backends) = super::production_backends("region_pg") else {
        return;
    };
    let dir = testkit::temp_dir("region_servers_pg");
    let r = super::start_catalog(&dir, &backends);
    assert!(
        r.lines
            .iter()
            .any(|l| l.contains("databases on PostgreSQL, buses on RabbitMQ")),
        "{:?}",
        r.lines
    );
    let cells: Vec<&String> = r
        .lines
        .iter()
        .filter(|l| l.contains("postgresql with 2 fake hosts"))
        .collect();
    assert_eq!(cells.len(), 2, "{:?}", r.lines);
    assert!(
        cells.iter().all(|l| l.contains("amqp://guest:****@")),
        "the bus password must not be printed: {cells:?}"
    );
    boot_list_show_delete(&r, &bin);
    // No cell database holds a live instance.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let db_url = |db: &str| format!("{}/t_region_pg_{db}", pg_base());
    for cell in ["cell1", "cell2"] {
        let live: i64 = rt.block_on(async {
            let pool = sqlx_pool(&db_url(cell)).await;
            sqlx::query_scalar("SELECT COUNT(*) FROM instances WHERE NOT deleted")
                .fetch_one(&pool)
                .await
                .unwrap()
        });
        assert_eq!(live, 0, "{cell} still has live instances");
    }
    drop(r);
    std::fs::remove_dir_all(&dir).ok();
}

fn pg_base() -> String {
    let admin = testkit::pg_admin_url();
    admin
        .rsplit_once('/')
        .map(|(b, _)| b.to_owned())
        .unwrap_or(admin)
}

async fn sqlx_pool(url: &str) -> sqlx::PgPool {
    sqlx::PgPool::connect(url)
        .await
        .expect("connect to a cell database")
}

/// Boots, lists, shows and deletes a server with the CLI and openstacksdk,
/// as a member, and checks placement is empty afterwards.
fn boot_list_show_delete(r: &super::Running, bin: &Path) {
    let bin = bin.to_path_buf();
    let admin = Cli {
        bin: bin.clone(),
        env: os_env(r, "admin", 0, "admin"),
    };
    let member = Cli {
        bin: bin.clone(),
        env: os_env(r, "demo", 1, "demo"),
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

    // Metadata, user data, a description (2.19) and tags (2.52) given at
    // create are kept with the server (on PostgreSQL in the one statement
    // that writes the instance).
    let user_data = std::env::temp_dir().join(format!("user-data-{}", std::process::id()));
    std::fs::write(&user_data, "#cloud-config\nhostname: vm1\n").unwrap();
    let server = member.json(&[
        "--os-compute-api-version",
        "2.90",
        "server",
        "create",
        "--description",
        "front end",
        "--tag",
        "web",
        "--tag",
        "prod",
        "--flavor",
        "m1.tiny",
        "--image",
        "cirros-0.6.2-x86_64-disk",
        "--nic",
        "none",
        "--property",
        "role=web",
        "--property",
        "tier=front",
        "--user-data",
        user_data.to_str().unwrap(),
        "--wait",
        "vm1",
    ]);
    let _ = std::fs::remove_file(&user_data);
    assert_eq!(server["description"], "front end", "{server}");
    assert_eq!(server["OS-EXT-SRV-ATTR:hostname"], "vm1", "{server}");
    let tags = &server["tags"];
    assert!(
        tags == &serde_json::json!(["prod", "web"])
            || tags
                .as_str()
                .is_some_and(|t| t.contains("prod") && t.contains("web")),
        "{server}"
    );
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
    let properties = &shown["properties"];
    assert!(
        properties == &serde_json::json!({"role": "web", "tier": "front"})
            || properties
                .as_str()
                .is_some_and(|p| p.contains("role='web'") && p.contains("tier='front'")),
        "{shown}"
    );
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
}
