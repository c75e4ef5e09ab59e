//! Integration tests of the all-in-one launcher: the real binary.

mod api_parity;
mod blocked_broker;
mod cells_live;
mod config_drive;
mod console_output;
mod dead_host;
mod distributed;
mod down_cell;
mod fuzz;
mod http_limits;
mod image_limits_cli;
mod image_properties;
mod libvirt_cli;
mod local_delete;
mod local_placement;
mod operator_cli;
mod osc_placement;
mod placement_audit;
mod policy_matrix;
mod private_files;
mod revocation;
mod server_actions;
mod server_actions_cli;
mod servers_cli;
mod service_user;
mod steps;
mod tls;
mod user_apis_cli;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

use testkit::http::Client;

/// Every listener of an in-process region on a port of the system's
/// choosing (tests run side by side).
fn ephemeral_ports(cfg: &mut region::RegionConfig) {
    cfg.region.listen_on_free_ports();
    cfg.telemetry.metrics_listen = "127.0.0.1:0".to_owned();
}

/// A one-cell, one-host in-process region's configuration in a fresh data
/// directory named after `test`, every listener on a free port.
fn one_host(test: &str) -> region::RegionConfig {
    let mut cfg = region::RegionConfig::default();
    cfg.region.data_dir = testkit::temp_dir(test);
    cfg.region.cells = 1;
    cfg.region.hosts_per_cell = 1;
    ephemeral_ports(&mut cfg);
    cfg
}

/// A one-cell in-process region's configuration on fresh PostgreSQL
/// databases `<name>_{db}` and the RabbitMQ vhost `<name>_cell1`; `None`
/// (with a printed reason) when either server is missing and not required.
async fn production_config(name: &str) -> Option<region::RegionConfig> {
    let mut db_template = String::new();
    for db in ["api", "cell0", "cell1", "placement", "identity", "image"] {
        let full = format!("{name}_{db}");
        let pg = testkit::postgres(&full).await?;
        db_template = pg.url.replace(&full, &format!("{name}_{{db}}"));
    }
    let full = format!("{name}_cell1");
    let url = testkit::rabbitmq(&full)?;
    let mut cfg = region::RegionConfig::default();
    cfg.region.database_url = db_template;
    cfg.region.transport_url = url.replace(&full, &format!("{name}_{{cell}}"));
    Some(cfg)
}

fn region(dir: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_region"));
    c.env("REGION__REGION__DATA_DIR", dir)
        .env("REGION__REGION__CELLS", "2")
        .env("REGION__REGION__HOSTS_PER_CELL", "2")
        .env("REGION__REGION__IDENTITY_LISTEN", "127.0.0.1:0")
        .env("REGION__REGION__PLACEMENT_LISTEN", "127.0.0.1:0")
        .env("REGION__REGION__COMPUTE_LISTEN", "127.0.0.1:0")
        .env("REGION__REGION__IMAGE_LISTEN", "127.0.0.1:0")
        .env("REGION__REGION__SERIAL_PROXY_LISTEN", "127.0.0.1:0")
        .env("REGION__REGION__NOVNC_PROXY_LISTEN", "127.0.0.1:0")
        .env("REGION__TELEMETRY__METRICS_LISTEN", "127.0.0.1:0");
    c
}

#[test]
fn region_once_starts_everything_and_is_idempotent() {
    let dir = testkit::temp_dir("region_once");
    for run in 0..2 {
        let out = region(&dir).arg("--once").output().expect("run region");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "run {run}\nstdout: {text}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for db in [
            "api",
            "placement",
            "identity",
            "image",
            "cell0",
            "cell1",
            "cell2",
        ] {
            assert!(
                dir.join(format!("{db}.sqlite")).exists(),
                "{db} database missing\n{text}"
            );
        }
        assert!(!dir.join("cell3.sqlite").exists());
        assert_eq!(
            text.matches("with 2 fake hosts, conductor up").count(),
            2,
            "{text}"
        );
        assert!(
            text.contains("export OS_USERNAME=admin") && text.contains("export OS_USERNAME=demo"),
            "{text}"
        );
        // Secure defaults (issue 32): the data directory is its owner's
        // alone, the passwords are 0600 and never printed.
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700, "the data directory");
        for user in ["admin", "demo"] {
            let f = dir.join(format!("{user}.secret"));
            assert_eq!(mode(&f), 0o600, "{}", f.display());
            let pw = std::fs::read_to_string(&f).unwrap();
            assert!(pw.trim().len() >= 32);
            assert!(!text.contains(pw.trim()), "{user}'s password printed");
            assert!(text.contains(&format!("export OS_PASSWORD=\"$(cat '{}')\"", f.display())));
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn region_rejects_a_misspelt_option() {
    let out = Command::new(env!("CARGO_BIN_EXE_region"))
        .arg("--once")
        .env("REGION__REGION__CELS", "3")
        .output()
        .expect("run region");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cels"), "{err}");
}

/// The libvirt host's instances cannot live in the data directory, which
/// is private to the region's user while qemu runs as libvirt's.
#[test]
fn region_refuses_libvirt_instances_inside_its_private_data_directory() {
    let dir = testkit::temp_dir("region_instances_inside");
    let out = region(&dir)
        .arg("--once")
        .env("REGION__REGION__COMPUTE_DRIVER", "libvirt")
        .env("REGION__REGION__CELLS", "1")
        .env("REGION__REGION__HOSTS_PER_CELL", "1")
        .env(
            "REGION__REGION__LIBVIRT__INSTANCES_PATH",
            dir.join("instances"),
        )
        .output()
        .expect("run region");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is inside region.data_dir"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

struct Running {
    child: Child,
    lines: Vec<String>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    /// The URL the region printed on its `prefix` line (`identity  https://…/v3`).
    fn url(&self, prefix: &str) -> String {
        self.lines
            .iter()
            .find_map(|l| l.trim().strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next().map(str::to_owned))
            .unwrap_or_else(|| panic!("no {prefix} line in {:?}", self.lines))
    }

    fn addr(&self, prefix: &str) -> SocketAddr {
        let url = self.url(prefix);
        url.split_once("://")
            .map_or(url.as_str(), |(_, rest)| rest)
            .split('/')
            .next()
            .unwrap_or_default()
            .parse()
            .unwrap_or_else(|e| panic!("no address in {url}: {e}"))
    }
    /// The `nth` value the region printed for `var`; a password is
    /// printed as `"$(cat '<file>')"` (never itself), read here as the
    /// shell would.
    fn export(&self, var: &str, nth: usize) -> String {
        let v = self
            .lines
            .iter()
            .filter_map(|l| l.strip_prefix(&format!("export {var}=")))
            .nth(nth)
            .unwrap_or_else(|| panic!("no {var} in {:?}", self.lines));
        match v
            .strip_prefix("\"$(cat '")
            .and_then(|f| f.strip_suffix("')\""))
        {
            Some(file) => std::fs::read_to_string(file)
                .unwrap_or_else(|e| panic!("{var} from {file}: {e}"))
                .trim()
                .to_owned(),
            None => v.to_owned(),
        }
    }
}

fn start(dir: &std::path::Path) -> Running {
    start_with(dir, &[])
}

/// Starts the region binary in `dir` with `extra` settings, on ports the
/// catalog can name before they are bound (placement, compute, image).
fn start_catalog(dir: &std::path::Path, extra: &[(&str, String)]) -> Running {
    let port = || format!("127.0.0.1:{}", testkit::free_port());
    let mut env = vec![
        ("REGION__REGION__PLACEMENT_LISTEN", port()),
        ("REGION__REGION__COMPUTE_LISTEN", port()),
        ("REGION__REGION__IMAGE_LISTEN", port()),
    ];
    env.extend(extra.iter().cloned());
    start_with(dir, &env)
}

fn start_with(dir: &std::path::Path, env: &[(&str, String)]) -> Running {
    let mut cmd = region(dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    // Its log is kept beside its data, and shown when it does not come up.
    let log = dir.join("region.log");
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("region log"))
        .spawn()
        .expect("start region");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = Vec::new();
    let mut up = false;
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("read line");
        up = line.contains("region is up");
        lines.push(line);
        if up {
            break;
        }
    }
    if !up {
        let status = child.wait().expect("wait for the region");
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        panic!(
            "the region did not come up ({status}); stdout {lines:?}; its log ends:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    Running { child, lines }
}

fn login(identity: SocketAddr, user: &str, password: &str, project: &str) -> String {
    let mut c = Client::new(identity);
    let body = format!(
        r#"{{"auth": {{"identity": {{"methods": ["password"], "password": {{"user": {{"name": "{user}", "domain": {{"id": "default"}}, "password": "{password}"}}}}}},
            "scope": {{"project": {{"name": "{project}", "domain": {{"id": "default"}}}}}}}}}}"#
    );
    let r = c
        .request("POST", "/v3/auth/tokens", Some(&body))
        .expect("login");
    assert_eq!(r.status, 201, "{}", r.body);
    r.header("x-subject-token").expect("token").to_owned()
}

/// The region serves identity and placement with real tokens, and its fake
/// computes have reported their inventory to placement.
#[test]
fn region_serves_identity_and_placement_with_tokens() {
    let dir = testkit::temp_dir("region_serves");
    let r = start(&dir);
    let identity = r.addr("identity");
    let placement = r.addr("placement");
    let admin = login(identity, "admin", &r.export("OS_PASSWORD", 0), "admin");
    let member = login(identity, "demo", &r.export("OS_PASSWORD", 1), "demo");

    let get = |token: Option<&str>, path: &str| {
        let mut c = Client::new(placement);
        if let Some(t) = token {
            c = c.with_header("x-auth-token", t);
        }
        c.request("GET", path, None).expect("placement")
    };
    let root = get(None, "/");
    assert_eq!(root.status, 200);
    assert!(
        root.body.contains("\"max_version\":\"1.39\""),
        "{}",
        root.body
    );
    assert_eq!(get(None, "/resource_providers").status, 401);
    assert_eq!(get(Some("forged"), "/resource_providers").status, 401);
    assert_eq!(get(Some(&member), "/resource_providers").status, 403);
    let listed = get(Some(&admin), "/resource_providers");
    assert_eq!(listed.status, 200, "{}", listed.body);
    let v: serde_json::Value = serde_json::from_str(&listed.body).unwrap();
    let mut names: Vec<&str> = v["resource_providers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "cell1-host01",
            "cell1-host02",
            "cell2-host01",
            "cell2-host02"
        ]
    );
    let uuid = v["resource_providers"][0]["uuid"].as_str().unwrap();
    let inv = get(
        Some(&admin),
        &format!("/resource_providers/{uuid}/inventories"),
    );
    assert!(inv.body.contains("\"VCPU\""), "{}", inv.body);
    drop(r);
    std::fs::remove_dir_all(&dir).ok();
}

/// Settings that put a region binary on the production backends: fresh
/// PostgreSQL databases `t_<name>_<db>` and RabbitMQ vhosts
/// `t_<name>_<cell>` for two cells. `None` (skip) when a server is missing
/// and not required.
fn production_backends(name: &str) -> Option<Vec<(&'static str, String)>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut db_template = String::new();
    for db in [
        "api",
        "cell0",
        "cell1",
        "cell2",
        "placement",
        "identity",
        "image",
    ] {
        let full = format!("{name}_{db}");
        let pg = rt.block_on(testkit::postgres(&full))?;
        db_template = pg.url.replace(&full, &format!("{name}_{{db}}"));
    }
    let mut bus_template = String::new();
    for cell in ["cell1", "cell2"] {
        let full = format!("{name}_{cell}");
        let url = testkit::rabbitmq(&full)?;
        bus_template = url.replace(&full, &format!("{name}_{{cell}}"));
    }
    Some(vec![
        ("REGION__REGION__DATABASE_URL", db_template),
        ("REGION__REGION__TRANSPORT_URL", bus_template),
    ])
}
