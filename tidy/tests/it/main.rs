//! tidy's checks: each on the real workspace, and each on a small tree
//! made to break it, to show that it fails.

mod deps;
mod layers;
mod lines;
mod migrations;
mod tree;

use std::path::PathBuf;

/// The workspace this crate is a member of.
fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tidy is a folder of the workspace")
        .to_owned()
}

/// Fails listing `violations`, if any.
fn assert_clean(check: &str, violations: &[String]) {
    assert!(
        violations.is_empty(),
        "tidy {check}: {} violation(s):\n{}",
        violations.len(),
        violations.join("\n")
    );
}

/// Fails unless one of `violations` contains every one of `words`.
fn assert_reported(violations: &[String], words: &[&str]) {
    assert!(
        violations
            .iter()
            .any(|v| words.iter().all(|w| v.contains(w))),
        "no violation mentions {words:?}; got:\n{}",
        violations.join("\n")
    );
}
