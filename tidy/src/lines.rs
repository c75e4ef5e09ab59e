//! File length: no `*.rs` under a member's `src/`, `tests/` or `benches/`
//! passes [`LIMIT`] lines. The files that did when this check came in are
//! on [`LONG_FILES`] with their length then: each may shrink but not grow
//! past it, and leaves the list once it is back within the limit, so the
//! list only ever gets shorter. Split a file by responsibility rather
//! than raise a count.

use std::collections::BTreeMap;
use std::path::Path;

use crate::{files_under, members, read, relative, Result};

/// The most lines a source file may have.
pub const LIMIT: usize = 1000;

/// The ratchet: files over [`LIMIT`] and the most lines each may have.
pub const LONG_FILES: &[(&str, usize)] = &[
    ("api-super/tests/it/compute.rs", 1644),
    ("api-super/tests/it/image.rs", 1732),
    ("api-super/tests/it/operator.rs", 1739),
    ("api-super/tests/it/server_list.rs", 1174),
    ("api-super/tests/it/user_apis.rs", 1736),
    ("loadtest/tests/it/scenario.rs", 1180),
];

/// The folders of a member whose `*.rs` files are measured.
const DIRS: &[&str] = &["src", "tests", "benches"];

/// Lines of every measured file of the workspace at `root`, by path
/// relative to it.
pub fn measure(root: &Path) -> Result<BTreeMap<String, usize>> {
    let mut out = BTreeMap::new();
    for member in members(root)? {
        for dir in DIRS {
            for path in files_under(&root.join(&member).join(dir), ".rs")? {
                out.insert(relative(root, &path), read(&path)?.lines().count());
            }
        }
    }
    Ok(out)
}

/// [`check_with`] with [`LIMIT`] and [`LONG_FILES`].
pub fn check(root: &Path) -> Result<Vec<String>> {
    check_with(root, LIMIT, LONG_FILES)
}

/// Every file over `limit` not on `ratchet`, every listed file grown past
/// its count, and every listed file that is gone or back within `limit`
/// (to be taken off the list).
pub fn check_with(root: &Path, limit: usize, ratchet: &[(&str, usize)]) -> Result<Vec<String>> {
    let lengths = measure(root)?;
    let listed: BTreeMap<&str, usize> = ratchet.iter().copied().collect();
    let mut out = Vec::new();
    for (file, &n) in &lengths {
        match listed.get(file.as_str()) {
            None if n > limit => out.push(format!(
                "{file}: {n} lines, more than {limit}: split it by responsibility"
            )),
            Some(&max) if n > max => out.push(format!(
                "{file}: {n} lines, more than the {max} it had (tidy's lines::LONG_FILES): it may only shrink"
            )),
            Some(_) if n <= limit => out.push(format!(
                "{file}: {n} lines, within {limit} now: take it off tidy's lines::LONG_FILES"
            )),
            _ => {}
        }
    }
    for file in listed.keys().filter(|f| !lengths.contains_key(**f)) {
        out.push(format!(
            "{file}: on tidy's lines::LONG_FILES but gone: take it off the list"
        ));
    }
    Ok(out)
}
