//! The distributed deployment: every component its own process, as an
//! operator runs them (docs/OPERATIONS.md), on PostgreSQL and RabbitMQ:
//!
//! - `api-super bootstrap`, then `api-super serve` twice: once as the
//!   identity service alone, once as the API layer (images, the Compute
//!   API with its scheduler, periodic host discovery) validating tokens at
//!   that identity service as at an external Keystone (with a cache);
//! - `placement` validating tokens the same way (`keystone_remote`);
//! - `cell-manage` onboarding cell0 and two cells (a database and a vhost each);
//! - one `cell-conductor` and one `compute` process (two fake hosts) per
//!   cell, logging in to identity as a service user for placement;
//!
//! then the real `openstack` CLI uploads an image and boots, lists, shows
//! and deletes a server, and placement holds nothing afterwards; then one
//! compute process is killed with SIGKILL and a boot forced onto it ends
//! in ERROR with a fault naming the host, the hosts shown down; then one
//! cell conductor is killed with SIGKILL during ten boots and started
//! again, and every server ends ACTIVE or in ERROR with a fault; then
//! `loadtest run` boots 30 servers with a kill-host fault whose command
//! kills a third compute process of cell1 (SIGKILL) and reports the time
//! to notice and to recover; and `cell-manage placement audit` finds
//! nothing orphaned (issue 31).
//!
//! All of it over TLS: every API on https with a test CA's certificate,
//! every process trusting that CA (`[tls] ca_file`), the cells' brokers
//! reached over `amqps://` through a TLS proxy in front of RabbitMQ.
//!
//! The binaries of the other crates are found next to the `region` binary
//! (the workspace build puts them there; `scripts/test.sh` builds them).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::osc_placement::{Cli, PACKAGES, VENV};

/// A child process, killed on drop; its stderr goes to a file.
struct Proc {
    child: Child,
    name: String,
    log: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    /// The tail of its log (for failure messages).
    fn tail(&self) -> String {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        format!(
            "--- {} ---\n{}",
            self.name,
            lines[lines.len().saturating_sub(20)..].join("\n")
        )
    }

    /// Fails if it has exited.
    fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("{} exited with {status}\n{}", self.name, self.tail());
        }
    }
}

pub(super) fn bin(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_BIN_EXE_region"))
        .parent()
        .expect("target dir")
        .to_path_buf();
    let p = dir.join(name);
    assert!(
        p.exists(),
        "{} is not built: run `cargo build --workspace --bins` first (scripts/test.sh does)",
        p.display()
    );
    let age = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if age(&p) < age(Path::new(env!("CARGO_BIN_EXE_region"))) {
        eprintln!(
            "WARNING: {} is older than the region binary and may be stale: run `cargo build --workspace --bins`",
            p.display()
        );
    }
    p
}

/// The test CA's files, set once by the test.
static TLS: std::sync::OnceLock<testkit::pki::PkiFiles> = std::sync::OnceLock::new();

fn tls() -> &'static testkit::pki::PkiFiles {
    TLS.get().expect("the test CA is made first")
}

/// The TLS settings of a process of binary `exe`: the CA its clients
/// trust, and the certificate of each API it serves.
fn tls_env(exe: &str) -> Vec<(String, String)> {
    let t = tls();
    let (prefix, servers): (&str, &[&str]) = match exe {
        "api-super" => (
            "API_SUPER",
            &["IDENTITY__HTTP", "COMPUTE__HTTP", "IMAGE__HTTP"],
        ),
        "placement" => ("PLACEMENT", &["HTTP"]),
        "compute" => ("COMPUTE", &[]),
        "cell-conductor" => ("CELL_CONDUCTOR", &[]),
        "cell-manage" => ("CELL_MANAGE", &[]),
        other => panic!("no TLS settings for {other}"),
    };
    let path = |p: &Path| p.display().to_string();
    let mut env = vec![(format!("{prefix}__TLS__CA_FILE"), path(&t.ca_file))];
    for s in servers {
        env.push((format!("{prefix}__{s}__TLS_CERT_FILE"), path(&t.cert_file)));
        env.push((format!("{prefix}__{s}__TLS_KEY_FILE"), path(&t.key_file)));
    }
    env
}

fn spawn(dir: &Path, name: &str, exe: &str, args: &[&str], env: &[(&str, String)]) -> Proc {
    let log = dir.join(format!("{name}.log"));
    let child = Command::new(bin(exe))
        .args(args)
        .envs(tls_env(exe))
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .unwrap_or_else(|e| panic!("start {name}: {e}"));
    Proc {
        child,
        name: name.to_owned(),
        log,
    }
}

/// Reads the process's stdout until a line contains `marker` (30 s).
fn wait_line(p: &mut Proc, marker: &str) -> String {
    let out = p.child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    let marker = marker.to_owned();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if line.contains(&marker) {
                let _ = tx.send(line);
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{} never printed the line\n{}", p.name, p.tail()))
}

fn port() -> String {
    format!("127.0.0.1:{}", testkit::free_port())
}

fn cell_manage(api_db: &str, args: &[&str]) -> String {
    let out = Command::new(bin("cell-manage"))
        .envs(tls_env("cell-manage"))
        .arg("--api-database-connection")
        .arg(api_db)
        .args(args)
        .output()
        .expect("run cell-manage");
    assert!(
        out.status.success(),
        "cell-manage {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn openstack_cli_boots_on_the_distributed_deployment() {
    let Some(py) = testkit::python::venv_or_skip(VENV, PACKAGES) else {
        return;
    };
    // Multi-threaded: the brokers' TLS proxy runs on it in the background.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut db = std::collections::HashMap::new();
    for name in [
        "identity",
        "api",
        "placement",
        "image",
        "cell0",
        "cell1",
        "cell2",
    ] {
        let Some(pg) = rt.block_on(testkit::postgres(&format!("dist_{name}"))) else {
            return;
        };
        db.insert(name, pg.url);
    }
    // TLS everywhere: every API serves https with a certificate of a test
    // CA, every process trusts that CA (`[tls] ca_file`), and the cells'
    // brokers are reached over amqps:// (a TLS proxy in front of RabbitMQ).
    let pki = testkit::pki::TestPki::new();
    let _ = TLS.set(pki.write_to(&testkit::temp_dir("distributed_pki")));
    let broker_tls = rt.block_on(testkit::pki::TlsProxy::start(
        "127.0.0.1:5672".parse().unwrap(),
        pki.acceptor(),
    ));
    let mut mq = std::collections::HashMap::new();
    for cell in ["cell1", "cell2"] {
        let Some(url) = testkit::rabbitmq(&format!("dist_{cell}")) else {
            return;
        };
        let amqps = url.replacen("amqp://", "amqps://", 1).replacen(
            "127.0.0.1:5672",
            &broker_tls.addr.to_string(),
            1,
        );
        assert!(amqps.starts_with("amqps://"), "{amqps}");
        mq.insert(cell, amqps);
    }
    let dir = testkit::temp_dir("distributed");
    let (identity, compute, image, placement) = (port(), port(), port(), port());
    let admin_pw = uuid::Uuid::new_v4().simple().to_string();
    let demo_pw = uuid::Uuid::new_v4().simple().to_string();
    // The services' own user (role `service` only), not the admin.
    let nova_pw = uuid::Uuid::new_v4().simple().to_string();

    // Identity: bootstrap the admin, a member and the services' user.
    let identity_env = vec![
        (
            "API_SUPER__IDENTITY__DATABASE__CONNECTION",
            db["identity"].clone(),
        ),
        ("API_SUPER__IDENTITY__LISTEN", identity.clone()),
        (
            "API_SUPER__IDENTITY__TOKEN__KEY_FILE",
            dir.join("identity.kek").display().to_string(),
        ),
        (
            "API_SUPER__IDENTITY__ENDPOINTS__COMPUTE",
            format!("https://{compute}/v2.1"),
        ),
        (
            "API_SUPER__IDENTITY__ENDPOINTS__PLACEMENT",
            format!("https://{placement}"),
        ),
        (
            "API_SUPER__IDENTITY__ENDPOINTS__IMAGE",
            format!("https://{image}"),
        ),
    ];
    let api_env = vec![
        (
            "API_SUPER__EXTERNAL_IDENTITY__URL",
            format!("https://{identity}/v3"),
        ),
        (
            "API_SUPER__EXTERNAL_IDENTITY__AUTH__USERNAME",
            "nova".into(),
        ),
        (
            "API_SUPER__EXTERNAL_IDENTITY__AUTH__PASSWORD",
            nova_pw.clone(),
        ),
        (
            "API_SUPER__EXTERNAL_IDENTITY__AUTH__PROJECT_NAME",
            "service".into(),
        ),
        ("API_SUPER__API_DATABASE__CONNECTION", db["api"].clone()),
        ("API_SUPER__COMPUTE__LISTEN", compute.clone()),
        ("API_SUPER__IMAGE__LISTEN", image.clone()),
        (
            "API_SUPER__IMAGE__DATABASE__CONNECTION",
            db["image"].clone(),
        ),
        (
            "API_SUPER__IMAGE__FILESYSTEM_STORE_DATADIR",
            dir.join("images").display().to_string(),
        ),
        (
            "API_SUPER__PLACEMENT__ENDPOINT",
            format!("https://{placement}"),
        ),
        ("API_SUPER__PLACEMENT__AUTH__USERNAME", "nova".into()),
        ("API_SUPER__PLACEMENT__AUTH__PASSWORD", nova_pw.clone()),
        ("API_SUPER__PLACEMENT__AUTH__PROJECT_NAME", "service".into()),
        ("API_SUPER__DISCOVERY__INTERVAL_SECS", "2".into()),
        ("API_SUPER__SEED_FLAVORS", "true".into()),
    ];
    let out = Command::new(bin("api-super"))
        .args([
            "bootstrap",
            "--bootstrap-password",
            &admin_pw,
            "--member-username",
            "demo",
            "--member-password",
            &demo_pw,
            "--service-username",
            "nova",
            "--service-password",
            &nova_pw,
        ])
        .envs(identity_env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("api-super bootstrap");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The API and cell databases, as an operator onboards them.
    let api_db = db["api"].as_str();
    cell_manage(api_db, &["api_db", "sync"]);
    cell_manage(
        api_db,
        &[
            "cell_v2",
            "map-cell0",
            "--database-connection",
            &db["cell0"],
        ],
    );
    for cell in ["cell1", "cell2"] {
        cell_manage(
            api_db,
            &[
                "cell_v2",
                "create-cell",
                "--name",
                cell,
                "--transport-url",
                &mq[cell],
                "--database-connection",
                &db[cell],
            ],
        );
    }

    let mut procs = vec![];
    let mut id = spawn(&dir, "identity", "api-super", &["serve"], &identity_env);
    wait_line(&mut id, "identity listening");
    procs.push(id);
    let mut api = spawn(&dir, "api-super", "api-super", &["serve"], &api_env);
    wait_line(&mut api, "compute listening");
    let mut pl = spawn(
        &dir,
        "placement",
        "placement",
        &[
            "--database",
            &db["placement"],
            "--listen",
            &placement,
            "--auth-strategy",
            "keystone_remote",
        ],
        &[
            ("PLACEMENT__IDENTITY_URL", format!("https://{identity}")),
            ("PLACEMENT__KEYSTONE_REMOTE__AUTH__USERNAME", "nova".into()),
            (
                "PLACEMENT__KEYSTONE_REMOTE__AUTH__PASSWORD",
                nova_pw.clone(),
            ),
            (
                "PLACEMENT__KEYSTONE_REMOTE__AUTH__PROJECT_NAME",
                "service".into(),
            ),
        ],
    );
    wait_line(&mut pl, "placement listening");
    procs.push(pl);
    let service_user = |prefix: &str| -> Vec<(String, String)> {
        vec![
            (
                format!("{prefix}__PLACEMENT__ENDPOINT"),
                format!("https://{placement}"),
            ),
            (
                format!("{prefix}__PLACEMENT__AUTH__AUTH_URL"),
                format!("https://{identity}/v3"),
            ),
            (
                format!("{prefix}__PLACEMENT__AUTH__USERNAME"),
                "nova".into(),
            ),
            (
                format!("{prefix}__PLACEMENT__AUTH__PASSWORD"),
                nova_pw.clone(),
            ),
            (
                format!("{prefix}__PLACEMENT__AUTH__PROJECT_NAME"),
                "service".into(),
            ),
        ]
    };
    let mut conductor_env = std::collections::HashMap::new();
    for cell in ["cell1", "cell2"] {
        let mut env: Vec<(String, String)> = service_user("CELL_CONDUCTOR");
        env.push((
            "CELL_CONDUCTOR__DATABASE__CONNECTION".into(),
            db[cell].clone(),
        ));
        env.push((
            "CELL_CONDUCTOR__BUS__TRANSPORT_URL".into(),
            mq[cell].clone(),
        ));
        env.push((
            "CELL_CONDUCTOR__CONDUCTOR__HOST".into(),
            format!("{cell}-conductor"),
        ));
        conductor_env.insert(cell, env.clone());
        let env: Vec<(&str, String)> = env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
        procs.push(spawn(
            &dir,
            &format!("{cell}-conductor"),
            "cell-conductor",
            &[],
            &env,
        ));
        let mut env: Vec<(String, String)> = service_user("COMPUTE");
        env.push(("COMPUTE__BUS__TRANSPORT_URL".into(), mq[cell].clone()));
        env.push(("COMPUTE__COMPUTE__HOST".into(), format!("{cell}-host")));
        env.push(("COMPUTE__COMPUTE__FAKE_HOSTS".into(), "2".into()));
        env.push((
            "COMPUTE__COMPUTE__FAKE_SPAWN_LATENCY_MS".into(),
            "50".into(),
        ));
        let env: Vec<(&str, String)> = env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
        procs.push(spawn(
            &dir,
            &format!("{cell}-compute"),
            "compute",
            &[],
            &env,
        ));
    }

    // The periodic discovery maps the four hosts.
    let started = Instant::now();
    loop {
        let hosts = cell_manage(api_db, &["cell_v2", "list-hosts"]);
        if hosts.matches("-host-").count() == 4 {
            break;
        }
        for p in &mut procs {
            p.assert_running();
        }
        api.assert_running();
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "hosts not discovered in 60 s:\n{hosts}\n{}",
            procs.iter().map(Proc::tail).collect::<Vec<_>>().join("\n")
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    let env = |user: &str, pw: &str| -> Vec<(String, String)> {
        vec![
            ("OS_AUTH_URL".into(), format!("https://{identity}/v3")),
            ("OS_CACERT".into(), tls().ca_file.display().to_string()),
            ("OS_IDENTITY_API_VERSION".into(), "3".into()),
            ("OS_USERNAME".into(), user.into()),
            ("OS_PASSWORD".into(), pw.into()),
            ("OS_PROJECT_NAME".into(), user.into()),
            ("OS_USER_DOMAIN_NAME".into(), "Default".into()),
            ("OS_PROJECT_DOMAIN_NAME".into(), "Default".into()),
        ]
    };
    let admin = Cli {
        bin: py.clone(),
        env: env("admin", &admin_pw),
    };
    let member = Cli {
        bin: py.clone(),
        env: env("demo", &demo_pw),
    };
    let file = dir.join("tiny.img");
    std::fs::write(&file, vec![0u8; 4096]).unwrap();
    let img = admin.json(&[
        "image",
        "create",
        "--file",
        &file.display().to_string(),
        "--disk-format",
        "raw",
        "--container-format",
        "bare",
        "--public",
        "tiny",
    ]);
    assert_eq!(img["status"], "active", "{img}");
    let server = member.json(&[
        "server", "create", "--flavor", "m1.tiny", "--image", "tiny", "--nic", "none", "--wait",
        "dist1",
    ]);
    assert_eq!(server["status"], "ACTIVE", "{server}");
    let shown = admin.json(&["server", "show", server["id"].as_str().unwrap()]);
    let host = shown["OS-EXT-SRV-ATTR:host"].as_str().unwrap_or_default();
    assert!(
        host.starts_with("cell1-host-") || host.starts_with("cell2-host-"),
        "{shown}"
    );
    let listed = member.json(&["server", "list"]);
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    member.ok(&["server", "delete", "--wait", "dist1"]);
    assert_eq!(
        member.json(&["server", "list"]).as_array().unwrap().len(),
        0
    );
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
    // The exercise (issue 31): `kill -9` cell2's compute process (both of
    // its hosts), force a boot onto one of them, and time how long the
    // region takes to show the hosts down and to end the build.
    let i = procs
        .iter()
        .position(|p| p.name == "cell2-compute")
        .expect("cell2's compute");
    let mut dead = procs.remove(i);
    dead.child.kill().expect("kill -9 the compute");
    dead.child.wait().ok();
    let killed = Instant::now();
    let forced = admin.json(&[
        "server",
        "create",
        "--flavor",
        "m1.tiny",
        "--image",
        "tiny",
        "--nic",
        "none",
        "--availability-zone",
        "nova:cell2-host-0001",
        "forced",
    ]);
    let forced_id = forced["id"].as_str().expect("id").to_owned();
    let mut noticed = None;
    let mut ended = None;
    while noticed.is_none() || ended.is_none() {
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "not recovered 30 s after kill -9 (noticed: {noticed:?}, ended: {ended:?})"
        );
        if noticed.is_none() {
            let services = admin.json(&["compute", "service", "list", "--service", "nova-compute"]);
            let states: Vec<&str> = services
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| {
                    s["Host"]
                        .as_str()
                        .unwrap_or_default()
                        .starts_with("cell2-host-")
                })
                .filter_map(|s| s["State"].as_str())
                .collect();
            if states.len() == 2 && states.iter().all(|s| *s == "down") {
                noticed = Some(killed.elapsed());
            }
        }
        if ended.is_none() {
            let s = admin.json(&["server", "show", &forced_id]);
            if s["status"] != "BUILD" {
                assert_eq!(s["status"], "ERROR", "{s}");
                let fault = s["fault"].to_string();
                assert!(
                    fault.contains("cell2-host-0001") && fault.contains("down"),
                    "the fault names the host and why: {s}"
                );
                ended = Some(killed.elapsed());
            }
        }
    }
    eprintln!(
        "kill -9 of a compute: shown down after {noticed:?} (polled with the CLI), forced build in ERROR after {ended:?}"
    );
    // What the region noticed it also acts on: the bounds, with the CLI's
    // own polling (about a second a call) on top.
    assert!(noticed.unwrap() < Duration::from_secs(5 + 4), "{noticed:?}");
    assert!(ended.unwrap() < Duration::from_secs(15), "{ended:?}");
    assert_eq!(
        admin
            .json(&["resource", "provider", "list"])
            .as_array()
            .unwrap()
            .iter()
            .map(|rp| admin.json(&[
                "resource",
                "provider",
                "usage",
                "show",
                rp["uuid"].as_str().unwrap()
            ]))
            .flat_map(|u| u.as_array().unwrap().clone())
            .filter(|u| u["usage"] != 0)
            .count(),
        0,
        "the failed build holds no allocation"
    );
    admin.ok(&["server", "delete", "--wait", &forced_id]);
    procs.push(dead);

    // `kill -9` cell1's conductor, send ten boots to cell1 (cell2's hosts
    // are down) and start the conductor again once they are seen in
    // BUILD: the agents' calls wait in the conductor's queue (or are
    // repeated), and every server ends ACTIVE, or ERROR with a fault; none
    // stays in BUILD.
    let i = procs
        .iter()
        .position(|p| p.name == "cell1-conductor")
        .expect("cell1's conductor");
    let mut conductor = procs.remove(i);
    conductor.child.kill().expect("kill -9 the conductor");
    conductor.child.wait().ok();
    let killed = Instant::now();
    let mut burst = Command::new(py.join("openstack"))
        .args([
            "server", "create", "--flavor", "m1.tiny", "--image", "tiny", "--nic", "none", "--min",
            "10", "--max", "10", "burst",
        ])
        .envs(admin.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdout(Stdio::null())
        .spawn()
        .expect("openstack server create");
    assert!(
        burst.wait().expect("the create").success(),
        "the burst's create failed"
    );
    // Nothing reports a build's end while the conductor is dead.
    let building = admin
        .json(&["server", "list", "--status", "BUILD"])
        .as_array()
        .unwrap()
        .len();
    assert!(building > 0, "no build met the dead conductor");
    let down_for = killed.elapsed();
    let env: Vec<(&str, String)> = conductor_env["cell1"]
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    procs.push(spawn(
        &dir,
        "cell1-conductor-again",
        "cell-conductor",
        &[],
        &env,
    ));
    procs.push(conductor);
    let started = Instant::now();
    let servers = loop {
        let listed = admin.json(&["server", "list", "--long"]);
        let servers = listed.as_array().unwrap().clone();
        if servers.len() == 10 && servers.iter().all(|s| s["Status"] != "BUILD") {
            break servers;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "servers still in BUILD 60 s after the conductor came back: {listed}\n{}",
            procs.iter().map(Proc::tail).collect::<Vec<_>>().join("\n")
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let mut active = 0;
    for s in &servers {
        let id = s["ID"].as_str().unwrap();
        if s["Status"] == "ACTIVE" {
            active += 1;
            continue;
        }
        let shown = admin.json(&["server", "show", id]);
        assert_eq!(shown["status"], "ERROR", "{shown}");
        assert!(
            !shown["fault"].is_null(),
            "an ERROR without a fault: {shown}"
        );
    }
    eprintln!(
        "kill -9 of cell1's conductor, 10 boots ({building} in BUILD while it was dead), \
         the conductor started again {down_for:?} after the kill: {active} ACTIVE, the rest ERROR with a fault"
    );
    for s in &servers {
        admin.ok(&["server", "delete", "--wait", s["ID"].as_str().unwrap()]);
    }

    // The exercise again, through `loadtest run` against this deployment:
    // a third compute process in cell1 (one host), killed with SIGKILL by
    // the scenario's kill-host fault (a hook: its command) in the middle
    // of boots; the report says when the host was shown down and when no
    // build was left on it, and the run passes (nothing stuck, the
    // invariants hold through the APIs).
    let spare = "cell1-spare";
    let mut env: Vec<(String, String)> = service_user("COMPUTE");
    env.push(("COMPUTE__BUS__TRANSPORT_URL".into(), mq["cell1"].clone()));
    env.push(("COMPUTE__COMPUTE__HOST".into(), spare.into()));
    env.push(("COMPUTE__COMPUTE__FAKE_HOSTS".into(), "1".into()));
    env.push((
        "COMPUTE__COMPUTE__FAKE_SPAWN_LATENCY_MS".into(),
        "50".into(),
    ));
    let env: Vec<(&str, String)> = env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let mut victim = spawn(&dir, spare, "compute", &[], &env);
    // One fake host: named as the process's host.
    let spare_host = spare.to_owned();
    let started = Instant::now();
    loop {
        let services = admin.json(&["compute", "service", "list", "--service", "nova-compute"]);
        let up = services.as_array().unwrap().iter().any(|s| {
            s["Host"] == spare_host.as_str() && s["State"] == "up" && s["Status"] == "enabled"
        });
        if up && cell_manage(api_db, &["cell_v2", "list-hosts"]).contains(&spare_host) {
            break;
        }
        victim.assert_running();
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{spare_host} not up and mapped in 60 s: {services}\n{}",
            victim.tail()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let scenario = dir.join("kill-host.toml");
    std::fs::write(
        &scenario,
        format!(
            r#"name = "kill-host"
[target]
kind = "url"
compute_url = "https://{compute}/v2.1"
identity_url = "https://{identity}/v3"
ca_file = "{ca}"
username = "admin"
project = "admin"
password_env = "LT_ADMIN_PASSWORD"
image = "tiny"

[[phase]]
kind = "boot-and-delete"
servers = 30
concurrency = 6

[[fault]]
kind = "kill-host"
cell = "cell1"
host = "{spare_host}"
command = ["kill", "-9", "{pid}"]
after_boots = 4
"#,
            pid = victim.child.id(),
            ca = tls().ca_file.display()
        ),
    )
    .unwrap();
    let report_dir = dir.join("kill-host-report");
    let out = Command::new(bin("loadtest"))
        .args(["run", "--quiet", "--report-dir"])
        .arg(&report_dir)
        .arg(&scenario)
        .env("LT_ADMIN_PASSWORD", &admin_pw)
        .output()
        .expect("loadtest run");
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "loadtest run failed:\n{summary}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        procs.iter().map(Proc::tail).collect::<Vec<_>>().join("\n")
    );
    let report: serde_json::Value = serde_json::from_slice(
        &std::fs::read(report_dir.join("report.json")).expect("report.json"),
    )
    .expect("report");
    let fault = &report["faults"][0];
    assert_eq!(fault["kind"], "kill-host", "{fault}");
    assert_eq!(fault["result"], "applied", "{fault}");
    assert!(
        matches!(victim.child.try_wait(), Ok(Some(_))),
        "the hook did not kill {spare}"
    );
    let noticed = fault["noticed_after_secs"].as_f64();
    let recovered = fault["builds_recovered_after_secs"].as_f64();
    // service_down_time (5 s) and the watcher's polling on top.
    assert!(noticed.is_some_and(|n| n < 5.0 + 2.0), "{fault}");
    assert!(recovered.is_some_and(|r| r < 15.0), "{fault}");
    eprintln!(
        "loadtest kill-host against the distributed deployment: noticed after {noticed:?} s, builds out of BUILD after {recovered:?} s\n{summary}"
    );
    procs.push(victim);
    // Nothing left in placement: the conductors audit their cells when
    // asked (`cell-manage placement audit` over each cell's bus).
    let audit = Command::new(bin("cell-manage"))
        .envs(tls_env("cell-manage"))
        .args([
            "--api-database-connection",
            api_db,
            "placement",
            "audit",
            "--verbose",
        ])
        .output()
        .expect("cell-manage placement audit");
    assert_eq!(
        audit.status.code(),
        Some(0),
        "{}\n{}",
        String::from_utf8_lossy(&audit.stdout),
        String::from_utf8_lossy(&audit.stderr)
    );

    // Nobody logged a password.
    for p in procs.iter().chain(std::iter::once(&api)) {
        let log = std::fs::read_to_string(&p.log).unwrap_or_default();
        assert!(
            !log.contains(&admin_pw) && !log.contains(&demo_pw) && !log.contains(&nova_pw),
            "{} logged a password",
            p.name
        );
    }
    // The cells' conductors, computes and the API reached the brokers
    // through the TLS proxy only.
    assert!(
        broker_tls.handshakes() >= 5,
        "{} TLS handshakes with the brokers",
        broker_tls.handshakes()
    );
    drop(procs);
    drop(api);
    std::fs::remove_dir_all(&dir).ok();
}
