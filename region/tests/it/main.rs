//! Integration tests of the all-in-one launcher: the real binary, run once.

use std::process::Command;

#[test]
fn region_once_brings_up_databases_and_buses_and_is_idempotent() {
    let dir = testkit::temp_dir("region_once");
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_region"))
            .arg("--once")
            .env("REGION__REGION__DATA_DIR", &dir)
            .env("REGION__REGION__CELLS", "3")
            .env("REGION__TELEMETRY__METRICS_LISTEN", "127.0.0.1:0")
            .env("REGION__REGION__PLACEMENT_LISTEN", "127.0.0.1:0")
            .output()
            .expect("run region")
    };
    let first = run();
    let out = String::from_utf8_lossy(&first.stdout);
    assert!(
        first.status.success(),
        "stdout: {out}\nstderr: {}",
        String::from_utf8_lossy(&first.stderr)
    );
    for db in ["api", "placement", "cell0", "cell1", "cell2", "cell3"] {
        assert!(
            dir.join(format!("{db}.sqlite")).exists(),
            "{db} database missing\n{out}"
        );
    }
    assert!(!dir.join("cell4.sqlite").exists());
    assert_eq!(out.matches("call round trip").count(), 3, "{out}");
    assert!(out.contains("(1 applied now)"), "{out}");
    assert!(out.contains("placement http://127.0.0.1:"), "{out}");
    // A second start finds everything up to date.
    let second = run();
    let out2 = String::from_utf8_lossy(&second.stdout);
    assert!(second.status.success(), "{out2}");
    assert!(
        !out2.contains("(1 applied now)") && out2.contains("(0 applied now)"),
        "{out2}"
    );
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

/// Starts the region for real, reads the placement address it prints, and
/// talks HTTP to it.
#[test]
fn region_serves_placement_until_stopped() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::process::Stdio;

    let dir = testkit::temp_dir("region_serves");
    let mut child = Command::new(env!("CARGO_BIN_EXE_region"))
        .env("REGION__REGION__DATA_DIR", &dir)
        .env("REGION__TELEMETRY__METRICS_LISTEN", "127.0.0.1:0")
        .env("REGION__REGION__PLACEMENT_LISTEN", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start region");
    let stdout = child.stdout.take().expect("stdout");
    let mut addr = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("read line");
        if let Some(rest) = line.trim().strip_prefix("placement http://") {
            addr = rest.split_whitespace().next().map(str::to_owned);
        }
        if line.contains("region is up") {
            break;
        }
    }
    let addr = addr.expect("region printed the placement address");
    let request = |path: &str, token: Option<&str>| -> String {
        let mut s = std::net::TcpStream::connect(&addr).expect("connect placement");
        let auth = token
            .map(|t| format!("x-auth-token: {t}\r\n"))
            .unwrap_or_default();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nhost: x\r\n{auth}connection: close\r\n\r\n"
        )
        .unwrap();
        let mut buf = String::new();
        s.read_to_string(&mut buf).unwrap();
        buf
    };
    let root = request("/", None);
    assert!(root.starts_with("HTTP/1.1 200"), "{root}");
    assert!(root.contains("\"max_version\":\"1.39\""), "{root}");
    let denied = request("/resource_providers", None);
    assert!(denied.starts_with("HTTP/1.1 401"), "{denied}");
    let listed = request("/resource_providers", Some("admin"));
    assert!(listed.contains("{\"resource_providers\":[]}"), "{listed}");
    child.kill().ok();
    child.wait().ok();
    std::fs::remove_dir_all(&dir).ok();
}
