//! Landed migrations: `migrations/landed.sha256` records the SHA-256 of
//! every migration file (`<hex>  <path under migrations/>`, sorted by
//! path, the format of `sha256sum`). [`check`] fails when a recorded file
//! changed or is gone, and when a migration file is not recorded.
//! [`record_new`] (the test with `TIDY_RECORD=1`) adds the new files and
//! never touches a recorded line.

use std::collections::BTreeMap;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::{files_under, relative, Error, Result};

/// The record, relative to the workspace root.
pub const RECORD: &str = "migrations/landed.sha256";

/// The folders of migration files under `migrations/`.
pub const DIRS: &[&str] = &[
    "api/postgres",
    "api/sqlite",
    "cell/postgres",
    "cell/sqlite",
    "placement/postgres",
    "placement/sqlite",
];

/// How to record new migrations, for the messages.
pub const HOW_TO_RECORD: &str = "record new migrations with `TIDY_RECORD=1 cargo nextest run -p tidy migrations` and commit migrations/landed.sha256";

/// Every migration file on disk: path under `migrations/` → hex SHA-256.
fn on_disk(root: &Path) -> Result<BTreeMap<String, String>> {
    let base = root.join("migrations");
    let mut out = BTreeMap::new();
    for dir in DIRS {
        for path in files_under(&base.join(dir), "")? {
            let bytes = std::fs::read(&path).map_err(|source| Error::Io {
                path: path.clone(),
                source,
            })?;
            let hex: String = Sha256::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            out.insert(relative(&base, &path), hex);
        }
    }
    Ok(out)
}

/// The record: path → hex; no file is an empty record.
fn recorded(root: &Path) -> Result<BTreeMap<String, String>> {
    let path = root.join(RECORD);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(source) => return Err(Error::Io { path, source }),
    };
    let mut out = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let Some((hex, file)) = line.split_once("  ") else {
            return Err(Error::Invalid {
                path,
                what: format!("line {} is not `<sha256>  <path>`", n + 1),
            });
        };
        out.insert(file.to_owned(), hex.to_owned());
    }
    Ok(out)
}

fn render(record: &BTreeMap<String, String>) -> String {
    record
        .iter()
        .map(|(file, hex)| format!("{hex}  {file}\n"))
        .collect()
}

/// Every migration file changed, removed or not recorded.
pub fn check(root: &Path) -> Result<Vec<String>> {
    let disk = on_disk(root)?;
    let record = recorded(root)?;
    let mut out = Vec::new();
    for (file, hex) in &record {
        match disk.get(file) {
            None => out.push(format!(
                "migrations/{file} has landed and is gone: a landed migration is never removed"
            )),
            Some(now) if now != hex => out.push(format!(
                "migrations/{file} has landed and was changed (sha256 {now}, recorded {hex}): add a new migration instead"
            )),
            Some(_) => {}
        }
    }
    for file in disk.keys().filter(|f| !record.contains_key(*f)) {
        out.push(format!(
            "migrations/{file} is not recorded in {RECORD}: {HOW_TO_RECORD}"
        ));
    }
    Ok(out)
}

/// Adds the migration files not yet recorded to the record (a recorded
/// line is never changed, so a changed file still fails [`check`]);
/// returns the files added.
pub fn record_new(root: &Path) -> Result<Vec<String>> {
    let disk = on_disk(root)?;
    let mut record = recorded(root)?;
    let mut added = Vec::new();
    for (file, hex) in disk {
        if !record.contains_key(&file) {
            record.insert(file.clone(), hex);
            added.push(file);
        }
    }
    if !added.is_empty() {
        let path = root.join(RECORD);
        std::fs::write(&path, render(&record)).map_err(|source| Error::Io { path, source })?;
    }
    Ok(added)
}
