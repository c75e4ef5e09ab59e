//! Conformance with upstream Placement's gabbi API tests.
//!
//! Runs `placement/conformance/run.py` over the selected gabbits (every
//! upstream file that needs no server-side policy or CORS configuration),
//! each against a fresh server from this crate's debug binary, and asserts
//! that the number of passing tests is at least the committed floor in
//! `placement/conformance/floor.txt` (a ratchet: raise it as fixes land).
//!
//! Needs python3 and a virtualenv with gabbi, which the harness creates from
//! PyPI (`PLACEMENT_CONFORMANCE_VENV`, default `<target>/conformance-venv`).
//! Where python3, the venv or PyPI are unavailable the test prints SKIP,
//! unless `REQUIRE_REAL_BACKENDS=1`, where that is a failure.

use std::path::{Path, PathBuf};
use std::process::Command;

const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");
/// run.py's exit status for "environment unavailable".
const EXIT_ENV: i32 = 3;

fn skip_or_panic(why: &str) {
    if testkit::backends_required() {
        panic!(
            "conformance run is required ({}=1) but unavailable: {why}",
            testkit::REQUIRE_ENV
        );
    }
    eprintln!(
        "SKIP: conformance run unavailable ({why}); set {}=1 to make this a failure",
        testkit::REQUIRE_ENV
    );
}

fn default_venv(binary: &Path) -> PathBuf {
    // <target>/debug/placement -> <target>/conformance-venv
    binary
        .parent()
        .and_then(Path::parent)
        .map(|t| t.join("conformance-venv"))
        .unwrap_or_else(|| std::env::temp_dir().join("placement-conformance-venv"))
}

fn read_floor(path: &Path) -> u64 {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    text.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{} must start with a number", path.display()))
}

#[test]
fn upstream_gabbits_pass_at_least_the_floor() {
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_placement"));
    let dir = Path::new(MANIFEST_DIR).join("conformance");
    let floor_file = dir.join("floor.txt");
    let floor = read_floor(&floor_file);

    if let Err(e) = Command::new("python3").arg("--version").output() {
        skip_or_panic(&format!("python3: {e}"));
        return;
    }
    let venv = std::env::var_os("PLACEMENT_CONFORMANCE_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| default_venv(&binary));
    let summary_path = testkit::temp_dir("conformance").join("summary.json");

    let out = Command::new("python3")
        .arg(dir.join("run.py"))
        .arg("--venv")
        .arg(&venv)
        .arg("--binary")
        .arg(&binary)
        .arg("--jobs")
        .arg("4")
        .arg("--json")
        .arg(&summary_path)
        .output()
        .expect("run python3 placement/conformance/run.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    if out.status.code() == Some(EXIT_ENV) {
        skip_or_panic(stderr.trim());
        return;
    }
    assert!(
        out.status.success(),
        "run.py failed ({}):\n{stdout}\n{stderr}",
        out.status
    );

    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&summary_path).expect("read the JSON summary"),
    )
    .expect("parse the JSON summary");
    let _ = std::fs::remove_dir_all(summary_path.parent().expect("temp dir"));
    let passed = summary["passed"].as_u64().expect("summary.passed");
    let total = summary["total"].as_u64().expect("summary.total");
    assert!(total > 0, "no gabbi tests ran:\n{stdout}");
    assert!(
        passed >= floor,
        "conformance regressed: {passed} of {total} upstream gabbi tests pass, below the floor {floor} in {}.\n\
         Reproduce: python3 placement/conformance/run.py --venv {} --binary {} --detail FILE.yaml\n{stdout}",
        floor_file.display(),
        venv.display(),
        binary.display(),
    );
    if passed > floor {
        println!(
            "conformance: {passed} passed is above the floor {floor}: raise {}",
            floor_file.display()
        );
    }
}
