use tidy::deps::{self, Crates, Deps, Rule, Tables};

use crate::tree::Tree;
use crate::{assert_clean, assert_reported, workspace};

#[test]
fn every_crate_keeps_to_its_dependency_rules() {
    assert_clean("deps", &deps::check(&workspace()).unwrap());
}

#[test]
fn every_rule_is_still_stated_in_its_crates_doc_comment() {
    assert_clean("deps prose", &deps::check_prose(&workspace()).unwrap());
}

const ALPHA_NOT_BETA: Rule = Rule {
    stated_in: "alpha",
    says: "Must not depend on beta",
    crates: Crates::Only(&["alpha"]),
    tables: Tables::Normal,
    deps: Deps::Forbidden(&["beta"]),
};

#[test]
fn a_forbidden_dependency_fails() {
    let tree = Tree::new(&["alpha", "beta"]);
    tree.crate_("alpha", "[dependencies]\nbeta = { path = \"../beta\" }\n");
    tree.crate_("beta", "");
    let found = deps::check_rules(tree.root(), &[ALPHA_NOT_BETA]).unwrap();
    assert_reported(&found, &["alpha/Cargo.toml", "[dependencies] beta"]);
}

#[test]
fn a_forbidden_dependency_fails_renamed_or_per_target() {
    let tree = Tree::new(&["alpha", "beta"]);
    tree.crate_(
        "alpha",
        "[target.'cfg(unix)'.build-dependencies]\nb = { package = \"beta\", path = \"../beta\" }\n",
    );
    tree.crate_("beta", "");
    let found = deps::check_rules(tree.root(), &[ALPHA_NOT_BETA]).unwrap();
    assert_reported(&found, &["alpha/Cargo.toml", "[build-dependencies] beta"]);
}

#[test]
fn a_dev_dependency_fails_only_rules_on_all_tables() {
    let tree = Tree::new(&["alpha", "beta"]);
    tree.crate_(
        "alpha",
        "[dev-dependencies]\nbeta = { path = \"../beta\" }\n",
    );
    tree.crate_("beta", "");
    assert_clean(
        "deps",
        &deps::check_rules(tree.root(), &[ALPHA_NOT_BETA]).unwrap(),
    );
    let all = Rule {
        tables: Tables::All,
        ..ALPHA_NOT_BETA
    };
    let found = deps::check_rules(tree.root(), &[all]).unwrap();
    assert_reported(&found, &["[dev-dependencies] beta"]);
}

#[test]
fn a_dependency_outside_an_only_from_list_fails() {
    let tree = Tree::new(&["alpha"]);
    tree.crate_("alpha", "[dependencies]\nsqlx = \"0.8\"\nserde = \"1\"\n");
    let rule = Rule {
        deps: Deps::OnlyFrom(&["sqlx"]),
        ..ALPHA_NOT_BETA
    };
    let found = deps::check_rules(tree.root(), &[rule]).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_reported(&found, &["[dependencies] serde"]);
}

/// The workspace's own rules, on a tree where compute, fabric and cell-mapping
/// each gain what theirs forbid.
#[test]
fn the_workspace_rules_fail_on_compute_with_sqlx_fabric_with_axum_and_testkit_as_a_dependency() {
    let tree = Tree::new(&["compute", "fabric", "cell-mapping", "testkit"]);
    tree.crate_(
        "compute",
        "[dependencies]\nfabric = { path = \"../fabric\" }\nsqlx.workspace = true\n",
    );
    tree.crate_("fabric", "[dependencies]\naxum = \"0.8\"\n");
    tree.crate_(
        "cell-mapping",
        "[dependencies]\ntestkit = { path = \"../testkit\" }\n",
    );
    tree.crate_("testkit", "[dependencies]\ntokio = \"1\"\n");
    let found = deps::check(tree.root()).unwrap();
    assert_reported(&found, &["compute/Cargo.toml", "sqlx"]);
    assert_reported(&found, &["fabric/Cargo.toml", "axum"]);
    assert_reported(&found, &["cell-mapping/Cargo.toml", "testkit"]);
    assert_eq!(found.len(), 3, "{found:?}");
}

#[test]
fn a_rule_whose_words_left_the_doc_comment_fails() {
    let tree = Tree::new(&["alpha"]);
    tree.crate_("alpha", "");
    tree.write(
        "alpha/src/lib.rs",
        "//! Alpha.\n//!\n//! Must not depend\n//! on   beta.\n",
    );
    assert_clean(
        "deps prose",
        &deps::check_prose_of(tree.root(), &[ALPHA_NOT_BETA]).unwrap(),
    );
    tree.write("alpha/src/lib.rs", "//! Alpha. May depend on beta.\n");
    let found = deps::check_prose_of(tree.root(), &[ALPHA_NOT_BETA]).unwrap();
    assert_reported(&found, &["alpha/src/lib.rs", "Must not depend on beta"]);
}
