//! Conformance with upstream Placement's gabbi API tests, on both backends.
//!
//! Runs `placement/conformance/run.py` over the selected gabbits (every
//! upstream file that needs no server-side policy or CORS configuration),
//! each file against a fresh server from this crate's debug binary on a
//! fresh database: a new SQLite file, or a new PostgreSQL database per file
//! (`testkit::postgres`, named `gabbi_<file>`). Asserts that the number of
//! passing tests is at least the backend's floor in
//! `placement/conformance/floor.txt` (a ratchet: raise it as fixes land).
//! Every failure is printed in full (`run.py --detail`), with the tail of
//! its server's log.
//!
//! Needs python3 and a virtualenv with gabbi, which the harness creates from
//! PyPI (`PLACEMENT_CONFORMANCE_VENV`, default `<target>/conformance-venv`),
//! and for the PostgreSQL run a PostgreSQL server (testkit's). Where one is
//! unavailable the test prints SKIP, unless `REQUIRE_REAL_BACKENDS=1`, where
//! that is a failure.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");
/// run.py's exit status for "environment unavailable".
const EXIT_ENV: i32 = 3;

/// Where each file's server keeps its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// Its key in floor.txt (and run.py's summary).
    fn key(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

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

/// The floor of `backend` in floor.txt (lines `BACKEND PASSED`, `#` comments).
fn read_floor(path: &Path, backend: Backend) -> u64 {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    text.lines()
        .map(|l| l.split('#').next().unwrap_or_default())
        .find_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            [key, n] if key == backend.key() => n.parse().ok(),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{} has no line `{} N`", path.display(), backend.key()))
}

/// The selected gabbit file names (`run.py --list`).
fn selected_files(run_py: &Path) -> Vec<String> {
    let out = Command::new("python3")
        .arg(run_py)
        .arg("--list")
        .output()
        .expect("run python3 placement/conformance/run.py --list");
    assert!(
        out.status.success(),
        "run.py --list failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A fresh PostgreSQL database per file, as run.py's `--databases` map;
/// `None` when PostgreSQL is unavailable (and not required).
fn postgres_databases(files: &[String]) -> Option<BTreeMap<String, String>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let db_names: Vec<String> = files
        .iter()
        .map(|f| format!("gabbi {}", f.strip_suffix(".yaml").unwrap_or(f)))
        .collect();
    // The first alone (one SKIP line when PostgreSQL is missing), then a few
    // at a time: each `CREATE DATABASE` waits mostly on the server.
    let (first, rest) = db_names.split_at(db_names.len().min(1));
    let mut created = Vec::with_capacity(files.len());
    for chunk in std::iter::once(first).chain(rest.chunks(8)) {
        for db in rt.block_on(futures_util::future::join_all(
            chunk.iter().map(|n| testkit::postgres(n)),
        )) {
            created.push(db?);
        }
    }
    let mut map = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for (file, db) in files.iter().zip(created) {
        assert!(
            seen.insert(db.name.clone()),
            "two gabbits map to the database {}",
            db.name
        );
        map.insert(file.clone(), db.url);
    }
    Some(map)
}

fn upstream_gabbits_pass_at_least_the_floor(backend: Backend) {
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_placement"));
    let dir = Path::new(MANIFEST_DIR).join("conformance");
    let run_py = dir.join("run.py");
    let floor_file = dir.join("floor.txt");
    let floor = read_floor(&floor_file, backend);

    if let Err(e) = Command::new("python3").arg("--version").output() {
        skip_or_panic(&format!("python3: {e}"));
        return;
    }
    let venv = std::env::var_os("PLACEMENT_CONFORMANCE_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| default_venv(&binary));
    let work = testkit::temp_dir(&format!("conformance {}", backend.key()));
    let summary_path = work.join("summary.json");

    let mut cmd = Command::new("python3");
    cmd.arg(&run_py)
        .arg("--venv")
        .arg(&venv)
        .arg("--binary")
        .arg(&binary)
        .arg("--jobs")
        .arg("4")
        .arg("--detail")
        .arg("--json")
        .arg(&summary_path);
    if backend == Backend::Postgres {
        let started = std::time::Instant::now();
        let Some(map) = postgres_databases(&selected_files(&run_py)) else {
            return;
        };
        println!(
            "created {} PostgreSQL databases in {:.1?}",
            map.len(),
            started.elapsed()
        );
        let map_path = work.join("databases.json");
        std::fs::write(&map_path, serde_json::to_vec(&map).expect("JSON"))
            .expect("write the database map");
        cmd.arg("--databases").arg(&map_path);
    }
    let out = cmd
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
    let _ = std::fs::remove_dir_all(&work);
    assert_eq!(summary["backend"], backend.key(), "run.py's backend");
    let passed = summary["passed"].as_u64().expect("summary.passed");
    let total = summary["total"].as_u64().expect("summary.total");
    assert!(total > 0, "no gabbi tests ran:\n{stdout}");
    assert!(
        passed >= floor,
        "conformance on {backend:?} regressed: {passed} of {total} upstream gabbi tests pass, below the floor {floor} \
         in {} (each failure is printed in full above).\n\
         Reproduce one file on SQLite: python3 placement/conformance/run.py --venv {} --binary {} --detail FILE.yaml",
        floor_file.display(),
        venv.display(),
        binary.display(),
    );
    if passed > floor {
        println!(
            "conformance on {backend:?}: {passed} passed is above the floor {floor}: raise `{}` in {}",
            backend.key(),
            floor_file.display()
        );
    }
}

#[test]
fn upstream_gabbits_pass_at_least_the_floor_sqlite() {
    upstream_gabbits_pass_at_least_the_floor(Backend::Sqlite);
}

#[test]
fn upstream_gabbits_pass_at_least_the_floor_postgres() {
    upstream_gabbits_pass_at_least_the_floor(Backend::Postgres);
}
