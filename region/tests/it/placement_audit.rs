//! `cell-manage placement audit` and `heal-allocations` against a running
//! region (issue 31), with nova-manage's exit codes: an orphaned allocation
//! is found (3), deleted (4), then gone (0); an instance whose allocation
//! was lost is found by a dry run (0, nothing created), healed (0), then
//! there is nothing left to heal (4); bad input is 127. On PostgreSQL +
//! RabbitMQ (each cell's conductor answers over its bus); on the embedded
//! default the command says the in-process bus cannot be reached (1).

use std::process::{Command, Output};

use region::{Region, RegionConfig};
use serde_json::{json, Value};

use crate::local_delete::Api;

fn cell_manage(api_db: &str, args: &[&str]) -> Output {
    let dir = std::path::Path::new(env!("CARGO_BIN_EXE_region"))
        .parent()
        .expect("target dir")
        .to_path_buf();
    let bin = dir.join("cell-manage");
    assert!(
        bin.exists(),
        "cell-manage is not built: run `cargo build --workspace --bins` first (scripts/test.sh does)"
    );
    Command::new(bin)
        .arg("--api-database-connection")
        .arg(api_db)
        .arg("placement")
        .args(args)
        .env_remove("CELL_MANAGE_CONFIG")
        .output()
        .expect("run cell-manage")
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `args` and asserts its exit code; the output.
fn expect(api_db: &str, args: &[&str], code: i32) -> String {
    let o = cell_manage(api_db, args);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(code), "placement {args:?}: {t}");
    t
}

async fn placement(api: &Api, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = api
        .http
        .request(method.parse().unwrap(), format!("{}{path}", api.placement))
        .header("x-auth-token", &api.admin)
        .header("openstack-api-version", "placement 1.28");
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.expect("placement");
    let status = resp.status().as_u16();
    let v = resp.json::<Value>().await.unwrap_or(Value::Null);
    (status, v)
}

async fn start(mut cfg: RegionConfig, dir: std::path::PathBuf) -> (Region, Api) {
    cfg.region.data_dir = dir;
    cfg.region.cells = 1;
    cfg.region.hosts_per_cell = 2;
    crate::ephemeral_ports(&mut cfg);
    let region = Region::start(&cfg, None).await.expect("start the region");
    let api = Api::admin_of(&region).await;
    (region, api)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_audit_and_heal_allocations_on_postgresql_and_rabbitmq() {
    let Some(cfg) = crate::production_config("pl_audit").await else {
        return;
    };
    let api_db = cfg.region.db_url("api");
    let (region, api) = start(cfg, testkit::temp_dir("pl_audit")).await;
    let (kept, s) = api.boot("kept", "nova").await;
    assert_eq!(s["status"], "ACTIVE", "{s}");
    let (lost, s) = api.boot("lost", "nova").await;
    assert_eq!(s["status"], "ACTIVE", "{s}");
    let held = api.allocations(&kept).await;
    let provider = held
        .as_object()
        .and_then(|m| m.keys().next())
        .expect("the server's provider")
        .clone();

    // Clean: nothing found, nothing to heal.
    expect(&api_db, &["audit", "--verbose"], 0);
    expect(&api_db, &["heal-allocations"], 4);

    // An allocation no instance owns, on a compute node's provider.
    let orphan = uuid::Uuid::new_v4().to_string();
    let (status, v) = placement(
        &api,
        "PUT",
        &format!("/allocations/{orphan}"),
        Some(json!({
            "allocations": {provider.as_str(): {"resources": {"VCPU": 1, "MEMORY_MB": 64}}},
            "project_id": uuid::Uuid::new_v4().simple().to_string(),
            "user_id": uuid::Uuid::new_v4().simple().to_string(),
            "consumer_generation": null,
        })),
    )
    .await;
    assert_eq!(status, 204, "{v}");
    let out = expect(&api_db, &["audit", "--verbose"], 3);
    assert!(out.contains(&orphan) && out.contains("orphaned"), "{out}");
    assert!(!out.contains(&kept), "a live server is no orphan: {out}");
    assert_ne!(
        api.allocations(&orphan).await,
        json!({}),
        "audit alone deletes nothing"
    );
    // Bad input.
    expect(&api_db, &["audit", "--resource-provider", "nope"], 127);
    // One provider only: the other host's provider holds nothing.
    let out = expect(&api_db, &["audit", "--resource-provider", &provider], 3);
    assert!(out.contains("1 providers read"), "{out}");
    let out = expect(&api_db, &["audit", "--delete", "--verbose"], 4);
    assert!(out.contains(&orphan) && out.contains("deleted"), "{out}");
    assert_eq!(api.allocations(&orphan).await, json!({}));
    expect(&api_db, &["audit"], 0);
    assert_ne!(
        api.allocations(&kept).await,
        json!({}),
        "a live claim stays"
    );

    // A settled server whose allocation was lost.
    let (status, v) = placement(&api, "DELETE", &format!("/allocations/{lost}"), None).await;
    assert_eq!(status, 204, "{v}");
    expect(&api_db, &["heal-allocations", "--max-count", "0"], 127);
    expect(&api_db, &["heal-allocations", "--instance", "nope"], 127);
    let out = expect(&api_db, &["heal-allocations", "--dry-run", "--verbose"], 0);
    assert!(
        out.contains(&lost) && out.contains("[dry-run] Processed 1 instances."),
        "{out}"
    );
    assert_eq!(
        api.allocations(&lost).await,
        json!({}),
        "a dry run creates nothing"
    );
    let out = expect(
        &api_db,
        &["heal-allocations", "--instance", &lost, "--verbose"],
        0,
    );
    assert!(out.contains(&lost) && out.contains("created"), "{out}");
    let healed = api.allocations(&lost).await;
    let resources = healed
        .as_object()
        .and_then(|m| m.values().next())
        .map(|a| a["resources"].clone())
        .expect("an allocation");
    assert_eq!(resources["VCPU"], 1, "m1.tiny's claim: {healed}");
    assert_eq!(resources["MEMORY_MB"], 512, "m1.tiny's claim: {healed}");
    expect(&api_db, &["heal-allocations"], 4);
    expect(&api_db, &["audit"], 0);
    region.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_audit_names_cells_it_cannot_reach_on_the_embedded_default() {
    let cfg = RegionConfig::default();
    let dir = testkit::temp_dir("pl_audit_embedded");
    let api_db = {
        let mut c = cfg.clone();
        c.region.data_dir = dir.clone();
        c.region.db_url("api")
    };
    let (region, _api) = start(cfg, dir).await;
    let out = expect(&api_db, &["audit"], 1);
    assert!(out.contains("cell1") && out.contains("in-process"), "{out}");
    expect(&api_db, &["heal-allocations"], 255);
    region.shutdown().await;
}
