//! `tidy`: checks of the workspace's own shape, run as tests (`tidy::it`)
//! so CI fails when one breaks.
//!
//! - [`deps`]: no crate gains a dependency its `src/lib.rs` forbids (the
//!   "Must not depend on …" lines, mirrored in [`deps::RULES`]).
//! - [`migrations`]: a landed migration file is never changed or removed,
//!   and every migration file is recorded (`migrations/landed.sha256`).
//! - [`layers`]: a module folder never names a layer above it (api-super's
//!   scheduler: no `compute_api`, `http` or `services`).
//! - [`lines`]: no source file passes [`lines::LIMIT`] lines, except those
//!   on the ratchet list [`lines::LONG_FILES`], which may only shrink.
//!
//! Every check takes the root of a workspace and returns its violations,
//! one message each (empty: the check passes), so tests run it on the real
//! workspace and on a small tree made to break it.
//!
//! May depend on: thiserror, toml, sha2. Must not depend on any other
//! workspace crate: it reads them as files.

pub mod deps;
pub mod layers;
pub mod lines;
pub mod migrations;

use std::path::{Path, PathBuf};

/// Why a check could not run (not a violation: an unreadable tree).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot parse {path}")]
    Toml {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    #[error("{path}: {what}")]
    Invalid { path: PathBuf, what: String },
}

pub type Result<T> = std::result::Result<T, Error>;

pub(crate) fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_owned(),
        source,
    })
}

pub(crate) fn read_toml(path: &Path) -> Result<toml::Table> {
    read(path)?.parse().map_err(|source| Error::Toml {
        path: path.to_owned(),
        source,
    })
}

/// The workspace's member folders (`[workspace] members` of the root
/// `Cargo.toml`), as written there.
pub fn members(root: &Path) -> Result<Vec<String>> {
    let path = root.join("Cargo.toml");
    let manifest = read_toml(&path)?;
    let members = manifest
        .get("workspace")
        .and_then(|w| w.get("members"))
        .and_then(|m| m.as_array())
        .ok_or_else(|| Error::Invalid {
            path: path.clone(),
            what: "no [workspace] members".into(),
        })?;
    members
        .iter()
        .map(|m| {
            m.as_str().map(str::to_owned).ok_or_else(|| Error::Invalid {
                path: path.clone(),
                what: format!("member {m} is not a string"),
            })
        })
        .collect()
}

/// `path` relative to `root`, with `/` separators (as messages and the
/// recorded files show it).
pub(crate) fn relative(root: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(root).unwrap_or(path);
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// Every file under `dir` (recursively) whose name ends with `suffix`,
/// sorted; nothing when `dir` does not exist.
pub(crate) fn files_under(dir: &Path, suffix: &str) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(Error::Io { path: dir, source }),
        };
        for entry in entries {
            let entry = entry.map_err(|source| Error::Io {
                path: dir.clone(),
                source,
            })?;
            let path = entry.path();
            let kind = entry.file_type().map_err(|source| Error::Io {
                path: path.clone(),
                source,
            })?;
            if kind.is_dir() {
                stack.push(path);
            } else if path.to_string_lossy().ends_with(suffix) {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}
