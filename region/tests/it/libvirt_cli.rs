//! The region on a real hypervisor: one libvirt host (this machine's
//! libvirtd, qemu with TCG) booting the project's own guest image
//! (`scripts/build-guest-image.sh`), driven by the real `openstack` CLI.
//! The guest's marker reaches `openstack console log show`; a soft reboot
//! boots it again (a second marker); stop and start; the serial console
//! answers what is typed, and qemu's VNC server greets through the noVNC
//! proxy; a `poweroff` typed on the guest's serial console is seen as
//! SHUTOFF without anyone asking;
//! the delete leaves no domain, no disk and no allocation. Skips with a
//! printed reason without libvirtd or the CLI (a failure in CI).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::osc_placement::{os_env, Cli, PACKAGES, VENV};

const MARKER: &str = "CELLS-GUEST-UP";

fn virsh(args: &[&str]) -> String {
    let out = Command::new("virsh")
        .args(["-c", "qemu:///system"])
        .args(args)
        .output()
        .expect("run virsh");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Destroys the domains of the servers this test made, whatever happens.
struct Domains(Vec<String>);

impl Drop for Domains {
    fn drop(&mut self) {
        for id in &self.0 {
            let name = format!("instance-{id}");
            virsh(&["destroy", &name]);
            virsh(&["undefine", "--managed-save", &name]);
        }
    }
}

/// The guest image: `CELLS_GUEST_IMAGE_DIR` when set (CI builds it once),
/// else built here by the repository's script.
fn guest_image() -> PathBuf {
    if let Some(d) = std::env::var_os("CELLS_GUEST_IMAGE_DIR") {
        return PathBuf::from(d);
    }
    let dir = testkit::temp_dir("guest_image");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/build-guest-image.sh");
    let st = Command::new(script)
        .arg(&dir)
        .status()
        .expect("run build-guest-image.sh");
    assert!(st.success(), "the guest image could not be built");
    dir
}

fn os(cli: &Cli, args: &[&str]) -> String {
    cli.ok(args)
}

fn show(cli: &Cli, server: &str) -> Value {
    cli.json(&["server", "show", server])
}

/// Polls `what` every 250 ms for up to `limit`.
fn wait(what: &str, limit: Duration, mut done: impl FnMut() -> Option<String>) -> Duration {
    let t = Instant::now();
    loop {
        match done() {
            None => return t.elapsed(),
            Some(state) => assert!(t.elapsed() < limit, "{what}: still {state} after {limit:?}"),
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn status_is(cli: &Cli, server: &str, want: &str) -> Option<String> {
    let s = show(cli, server);
    let status = s["status"].as_str().unwrap_or_default().to_owned();
    (status != want || !s["OS-EXT-STS:task_state"].is_null()).then(|| format!("{status}: {s}"))
}

fn markers(cli: &Cli, server: &str) -> usize {
    os(cli, &["console", "log", "show", server])
        .matches(MARKER)
        .count()
}

/// The guest's serial console through the region's console proxy: the
/// URL `openstack console url show --serial` gives, over WebSocket.
struct Console(tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<std::net::TcpStream>>);

impl Console {
    fn open(url: &str) -> Console {
        let (ws, _) = tungstenite::connect(url).expect("the console proxy upgrades");
        if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_ref() {
            s.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
        }
        Console(ws)
    }

    fn send(&mut self, text: &str) {
        self.0
            .send(tungstenite::Message::Binary(
                text.as_bytes().to_vec().into(),
            ))
            .expect("send to the console");
    }

    /// Reads until `want` appears (or `limit` passes); returns what came.
    fn read_until(&mut self, want: &str, limit: Duration) -> String {
        let t = Instant::now();
        let mut got = String::new();
        while !got.contains(want) {
            assert!(t.elapsed() < limit, "{want:?} never came; got {got:?}");
            match self.0.read() {
                Ok(tungstenite::Message::Binary(b)) => got.push_str(&String::from_utf8_lossy(&b)),
                Ok(tungstenite::Message::Text(t)) => got.push_str(t.as_str()),
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => panic!("console closed: {e}; got {got:?}"),
            }
        }
        got
    }
}

#[test]
fn openstack_cli_boots_a_real_guest_on_libvirt() {
    if testkit::libvirtd().is_none() {
        return;
    }
    let Some(bin) = testkit::python::venv_or_skip(VENV, PACKAGES) else {
        return;
    };
    let image_dir = guest_image();
    let dir = testkit::temp_dir("region_libvirt_cli");
    // qemu runs as libvirt's own user: the instances live where it can
    // read them (a temp dir of their own, world-traversable; the region's
    // data directory is private to its owner).
    let instances = testkit::temp_dir("region_libvirt_cli_instances");
    let r = super::start_catalog(
        &dir,
        &[
            ("REGION__REGION__COMPUTE_DRIVER", "libvirt".into()),
            ("REGION__REGION__CELLS", "1".into()),
            ("REGION__REGION__HOSTS_PER_CELL", "1".into()),
            ("REGION__REGION__LIBVIRT__VIRT_TYPE", "qemu".into()),
            (
                "REGION__REGION__LIBVIRT__CONNECTION_URI",
                "qemu:///system".into(),
            ),
            (
                "REGION__REGION__LIBVIRT__INSTANCES_PATH",
                instances.display().to_string(),
            ),
            (
                "REGION__REGION__LIBVIRT__WAIT_SOFT_REBOOT_SECONDS",
                "20".into(),
            ),
            (
                "REGION__REGION__LIBVIRT__SHUTDOWN_TIMEOUT_SECS",
                "20".into(),
            ),
            (
                "REGION__REGION__GUEST_IMAGE_DIR",
                image_dir.display().to_string(),
            ),
        ],
    );
    let member = Cli {
        bin: bin.clone(),
        env: os_env(&r, "demo", 1, "demo"),
    };
    let admin = Cli {
        bin,
        env: os_env(&r, "admin", 0, "admin"),
    };

    // With a config drive and a user-data script, which the guest runs.
    let user_data = dir.join("user-data.sh");
    std::fs::write(&user_data, "#!/bin/sh\necho USER-DATA-SAYS $((6*7))\n").unwrap();
    let server = member.json(&[
        "server",
        "create",
        "--flavor",
        "m1.tiny",
        "--image",
        "cells-guest",
        "--nic",
        "none",
        "--config-drive",
        "True",
        "--user-data",
        user_data.to_str().unwrap(),
        "--wait",
        "real1",
    ]);
    let id = server["id"].as_str().expect("id").to_owned();
    let _guard = Domains(vec![id.clone()]);
    assert_eq!(server["status"], "ACTIVE", "{server}");
    let domain = format!("instance-{id}");
    assert!(virsh(&["domstate", &domain]).contains("running"));
    let to_marker = wait("the guest's marker", Duration::from_secs(90), || {
        (markers(&member, "real1") < 1).then(|| "no marker".into())
    });
    eprintln!("marker seen {to_marker:?} after ACTIVE");
    // The guest found its config drive (a CD-ROM, label config-2), took
    // its hostname from meta_data.json and ran the user data.
    assert_eq!(show(&member, "real1")["config_drive"], "True");
    let log = os(&member, &["console", "log", "show", "real1"]);
    assert!(
        log.contains(&format!("uuid={id} hostname=real1.novalocal")),
        "no config drive seen by the guest: {log}"
    );
    assert!(
        log.contains("USER-DATA-SAYS 42"),
        "user data not run: {log}"
    );
    assert!(log.contains("CELLS-GUEST-UP real1 "), "{log}");

    // Diagnostics from the running domain (admin; the CLI shows 2.48's
    // standard form): m1.tiny's one vCPU and 512 MiB, running.
    let diag = admin.json(&["server", "show", "--diagnostics", &id]);
    assert_eq!(diag["state"], "running", "{diag}");
    assert_eq!(diag["driver"], "libvirt", "{diag}");
    assert_eq!(diag["num_cpus"], 1, "{diag}");
    assert_eq!(diag["memory_details"]["maximum"], 512, "{diag}");

    // A soft reboot: the guest shuts down on the ACPI button and boots
    // again, printing its marker a second time.
    os(&member, &["server", "reboot", "--soft", "--wait", "real1"]);
    wait("ACTIVE after the reboot", Duration::from_secs(60), || {
        status_is(&member, "real1", "ACTIVE")
    });
    wait("a second marker", Duration::from_secs(90), || {
        (markers(&member, "real1") < 2).then(|| "one marker".into())
    });

    os(&member, &["server", "stop", "real1"]);
    wait("SHUTOFF after stop", Duration::from_secs(60), || {
        status_is(&member, "real1", "SHUTOFF")
    });
    assert!(virsh(&["domstate", &domain]).contains("shut off"));
    os(&member, &["server", "start", "real1"]);
    wait("ACTIVE after start", Duration::from_secs(60), || {
        status_is(&member, "real1", "ACTIVE")
    });
    wait("a third marker", Duration::from_secs(90), || {
        (markers(&member, "real1") < 3).then(|| "fewer markers".into())
    });

    // The serial console over the proxy: typed into, answered.
    let url = member.json(&["console", "url", "show", "--serial", "real1"]);
    let url = url["url"].as_str().expect("a console URL").to_owned();
    assert!(url.starts_with("ws://") && url.contains("?token="), "{url}");
    let mut console = Console::open(&url);
    // The first Enter answers the shell's terminal query.
    console.send("\n");
    std::thread::sleep(Duration::from_millis(500));
    console.send("echo typed-$((6*7))\n");
    let got = console.read_until("typed-42", Duration::from_secs(20));
    eprintln!("the console answered: {got:?}");
    // A forged token is refused before any upgrade.
    let forged = format!(
        "{}?token={}",
        url.split('?').next().unwrap(),
        "0".repeat(64)
    );
    match tungstenite::connect(forged.as_str()) {
        Err(tungstenite::Error::Http(r)) => assert_eq!(r.status(), 401),
        other => panic!("a forged token must be refused: {:?}", other.map(|_| ())),
    }
    // The noVNC console: Nova's URL; over the WebSocket its `path` names,
    // qemu's VNC server greets as an RFB 3.8 server.
    let vnc = member.json(&["console", "url", "show", "--novnc", "real1"]);
    let vnc = vnc["url"].as_str().expect("a noVNC URL").to_owned();
    let (page, token) = vnc
        .split_once("?path=%3Ftoken%3D")
        .unwrap_or_else(|| panic!("{vnc} is not Nova's noVNC URL"));
    let proxy = page
        .strip_prefix("http://")
        .and_then(|p| p.strip_suffix("/vnc_lite.html"))
        .unwrap_or_else(|| panic!("{vnc}"));
    // The proxy serves noVNC's page itself (Debian's novnc package).
    let page = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let r = reqwest::get(page).await.expect("GET the noVNC page");
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    });
    assert_eq!(page.0, 200, "the noVNC page: {}", page.1);
    assert!(page.1.contains("noVNC"), "{}", page.1);
    let (mut ws, _) = tungstenite::connect(format!("ws://{proxy}/?token={token}").as_str())
        .expect("the noVNC proxy upgrades");
    let mut greeting = Vec::new();
    while greeting.len() < 12 {
        if let tungstenite::Message::Binary(b) = ws.read().expect("read the VNC server") {
            greeting.extend_from_slice(&b);
        }
    }
    assert_eq!(
        &greeting[..12],
        b"RFB 003.008\n",
        "{:?}",
        String::from_utf8_lossy(&greeting)
    );
    drop(ws);

    // The guest powers itself off: nobody asks the API, yet the server
    // shows SHUTOFF (vm_state stopped) within seconds.
    console.send("poweroff -f\n");
    let seen = wait(
        "SHUTOFF after the guest's own poweroff",
        Duration::from_secs(30),
        || status_is(&member, "real1", "SHUTOFF"),
    );
    eprintln!("the guest's own poweroff seen as SHUTOFF after {seen:?}");
    let s = show(&member, "real1");
    assert_eq!(s["OS-EXT-STS:vm_state"], "stopped", "{s}");

    os(&member, &["server", "delete", "--wait", "real1"]);
    assert!(
        !virsh(&["list", "--all", "--name"]).contains(&domain),
        "the domain is gone"
    );
    assert!(
        !instances.join(&id).exists(),
        "the instance's directory is gone"
    );
    let (ok, out, err) = admin.run(&[
        "resource",
        "provider",
        "allocation",
        "show",
        &id,
        "-f",
        "json",
    ]);
    assert!(ok, "{out}{err}");
    let allocs: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(allocs, serde_json::json!([]), "no allocation is left");

    // The host's uptime, as Nova's libvirt driver reports it (`uptime`
    // on the host): 2.88's hypervisor view, which the CLI shows.
    let name = admin.json(&["hypervisor", "list"])[0]["Hypervisor Hostname"]
        .as_str()
        .expect("a hypervisor")
        .to_owned();
    let (ok, out, err) = admin.run(&[
        "--os-compute-api-version",
        "2.88",
        "hypervisor",
        "show",
        &name,
        "-f",
        "json",
    ]);
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("load average") || out.contains("load_average"),
        "no uptime: {out}"
    );
}
