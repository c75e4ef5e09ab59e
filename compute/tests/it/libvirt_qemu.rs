//! The libvirt driver against this machine's libvirtd (`qemu:///system`):
//! a real qemu process (TCG) per guest. The guest's disk is blank, so the
//! firmware runs and finds nothing to boot: enough to drive every power
//! path on a real hypervisor, including a guest that ignores the ACPI
//! shutdown request and has to be destroyed after the timeout. Skips with
//! a printed reason without libvirtd (a failure in CI).

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use compute::driver::libvirt::config::LibvirtSection;
use compute::driver::libvirt::LibvirtDriver;
use compute::driver::Driver;
use fabric::rpc::power_state;

use crate::libvirt::{qcow2, spec, walk_power_paths, MemImages};

fn run(cmd: &str, args: &[&str]) -> std::process::ExitStatus {
    std::process::Command::new(cmd)
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"))
}

/// Kills the machine's libvirtd and waits (up to 20 s) until it is gone.
fn stop_libvirtd() {
    run("pkill", &["-x", "libvirtd"]);
    let t = std::time::Instant::now();
    while run("pgrep", &["-x", "libvirtd"]).success() {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(20),
            "libvirtd did not stop"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A driver on this machine's libvirtd (`uri`), its instances in a new
/// temporary directory, its images in memory; `tweak` edits the section.
fn system_driver(
    uri: &str,
    tweak: impl FnOnce(&mut LibvirtSection),
) -> (LibvirtDriver, Arc<MemImages>, tempfile::TempDir) {
    // qemu runs as libvirt's own user: the instances path must be
    // reachable by it.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let images = Arc::new(MemImages::default());
    let mut cfg = LibvirtSection {
        connection_uri: uri.into(),
        virt_type: "qemu".into(),
        instances_path: dir.path().join("instances"),
        ..Default::default()
    };
    tweak(&mut cfg);
    let d = LibvirtDriver::connect(cfg, images.clone()).expect("libvirtd answers");
    (d, images, dir)
}

#[tokio::test]
async fn a_real_qemu_guest_goes_through_every_power_path_and_is_removed() {
    let Some(uri) = testkit::libvirtd() else {
        return;
    };
    let (d, images, dir) = system_driver(uri, |c| {
        c.shutdown_timeout_secs = 2;
        c.wait_soft_reboot_seconds = 2;
    });
    let mut s = spec(&images.add("qcow2", qcow2(dir.path(), 16), &[]));
    s.flavor.memory_mb = 64;
    s.flavor.vcpus = 1;
    d.spawn(&s).await.expect("spawn on qemu");
    let i = s.instance;
    assert_eq!(d.power_state(i), power_state::RUNNING);
    assert!(d.list().unwrap().contains(&i));
    assert!(d.hypervisor_version() > 1_000_000, "qemu's version");
    let inv = d.host_inventory().expect("the host's resources");
    assert_eq!(
        inv.vcpus,
        std::thread::available_parallelism().unwrap().get() as i64
    );

    // The firmware ignores ACPI: a stop waits its timeout, then destroys.
    walk_power_paths(&d, i).await;
    let inst_dir = d.instance_dir(i);
    assert!(
        inst_dir.join("console.log").exists(),
        "the serial log is kept"
    );

    d.destroy(i).await.expect("destroy");
    assert!(!d.list().unwrap().contains(&i));
    assert!(!inst_dir.exists());
}

/// libvirtd restarts (an upgrade, a crash): every client's connection is
/// closed. The driver reopens its own at the next call instead of failing
/// every call from then on. Restarts the machine's libvirtd, so it runs
/// alone (`.config/nextest.toml`).
#[tokio::test]
async fn libvirtd_restart_the_driver_reconnects() {
    let Some(uri) = testkit::libvirtd() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cfg = LibvirtSection {
        connection_uri: uri.into(),
        virt_type: "qemu".into(),
        instances_path: dir.path().join("instances"),
        ..Default::default()
    };
    let d = LibvirtDriver::connect(cfg, Arc::new(MemImages::default())).expect("libvirtd answers");
    d.list().expect("list before the restart");
    stop_libvirtd();
    // While it is down, calls fail (never hang, never panic).
    assert!(d.list().is_err(), "listing with libvirtd down must fail");
    assert!(run("libvirtd", &["-d"]).success(), "libvirtd restarts");
    let t = std::time::Instant::now();
    loop {
        match d.list() {
            Ok(_) => break,
            Err(e) => {
                assert!(
                    t.elapsed() < std::time::Duration::from_secs(30),
                    "the driver never reconnected: {e}"
                );
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
        }
    }
    assert!(
        d.host_inventory().is_some(),
        "the host's resources after the restart"
    );
}

/// libvirtd stops in the middle of a build (during the image download)
/// and comes back 2 s after: the spawn fails naming the hypervisor, and
/// its undo waits for libvirtd, so neither a domain nor the instance's
/// directory is left. Restarts the machine's libvirtd, so it runs alone
/// (`.config/nextest.toml`, `libvirtd_restart`).
#[tokio::test]
async fn libvirtd_restart_mid_build_fails_the_spawn_and_leaves_nothing() {
    let Some(uri) = testkit::libvirtd() else {
        return;
    };
    let (d, images, _dir) = system_driver(uri, |_| {});
    // 4 MiB in 64 KiB chunks 20 ms apart: about 1.3 s of download.
    let s = spec(&images.add("raw", vec![0u8; 4 << 20], &[]));
    let i = s.instance;
    let spawn = {
        let (d, s) = (d.clone(), s.clone());
        tokio::spawn(async move { d.spawn(&s).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    stop_libvirtd();
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert!(run("libvirtd", &["-d"]).success(), "libvirtd restarts");
    let e = spawn
        .await
        .unwrap()
        .expect_err("a spawn across a libvirtd restart fails");
    assert!(e.to_string().contains("hypervisor"), "{e}");
    assert!(
        !d.instance_dir(i).exists(),
        "the instance's directory is removed"
    );
    let t = std::time::Instant::now();
    let listed = loop {
        match d.list() {
            Ok(l) => break l,
            Err(e) => {
                assert!(t.elapsed() < std::time::Duration::from_secs(30), "{e}");
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }
    };
    assert!(!listed.contains(&i), "no domain is left");
}
