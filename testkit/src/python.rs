//! Python virtualenvs for tests that drive real OpenStack clients
//! (python-openstackclient, osc-placement, openstacksdk) from PyPI.
//!
//! A venv is created once per set of pinned packages, under
//! `$XDG_CACHE_HOME` (or `~/.cache`) in `cells-venvs/<name>`, and reused.

use std::path::PathBuf;
use std::process::Command;

fn cache_root() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("cells-venvs")
}

/// A venv named `name` with `packages` (pinned `pkg==x.y`) installed; returns
/// its `bin` directory, or why it cannot be had (no python3, no PyPI).
/// Concurrent callers are serialized with a lock directory.
pub fn venv(name: &str, packages: &[&str]) -> Result<PathBuf, String> {
    let root = cache_root();
    std::fs::create_dir_all(&root).map_err(|e| format!("create {}: {e}", root.display()))?;
    let dir = root.join(name);
    let bin = dir.join("bin");
    let stamp = dir.join(".installed");
    let want = packages.join("\n");
    if std::fs::read_to_string(&stamp)
        .map(|s| s == want)
        .unwrap_or(false)
    {
        return Ok(bin);
    }
    // Serialize creation between test processes.
    let lock = root.join(format!("{name}.lock"));
    let started = std::time::Instant::now();
    while std::fs::create_dir(&lock).is_err() {
        if started.elapsed() > std::time::Duration::from_secs(600) {
            let _ = std::fs::remove_dir(&lock);
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
        if std::fs::read_to_string(&stamp)
            .map(|s| s == want)
            .unwrap_or(false)
        {
            return Ok(bin);
        }
    }
    let result = (|| {
        let run = |cmd: &mut Command| -> Result<(), String> {
            let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "{cmd:?} failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                        .chars()
                        .take(2000)
                        .collect::<String>()
                ))
            }
        };
        let _ = std::fs::remove_dir_all(&dir);
        run(Command::new("python3").args(["-m", "venv"]).arg(&dir))?;
        run(Command::new(bin.join("pip"))
            .args(["install", "-q", "--disable-pip-version-check"])
            .args(packages))?;
        std::fs::write(&stamp, &want).map_err(|e| e.to_string())
    })();
    let _ = std::fs::remove_dir(&lock);
    result.map(|()| bin)
}

/// Like [`venv`], but returns `None` after printing SKIP when the venv cannot
/// be had — or panics when real backends are required (CI).
pub fn venv_or_skip(name: &str, packages: &[&str]) -> Option<PathBuf> {
    match venv(name, packages) {
        Ok(bin) => Some(bin),
        Err(why) => {
            if crate::backends_required() {
                panic!(
                    "python venv {name} is required ({}=1) but unavailable: {why}",
                    crate::REQUIRE_ENV
                );
            }
            eprintln!("SKIP: python venv {name} unavailable ({why})");
            None
        }
    }
}
