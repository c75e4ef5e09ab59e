use tidy::layers;

use crate::tree::Tree;
use crate::{assert_clean, assert_reported, workspace};

#[test]
fn the_scheduler_never_reaches_into_the_http_layer() {
    assert_clean("layers", &layers::check(&workspace()).unwrap());
}

#[test]
fn a_file_naming_a_banned_layer_fails_with_its_line() {
    let tree = Tree::new(&["alpha"]);
    tree.write("alpha/src/sched/mod.rs", "use crate::model;\n");
    tree.write(
        "alpha/src/sched/deep/filter.rs",
        "//! A filter.\nuse crate::http::Ctx;\n",
    );
    let rules: &[(&str, &[&str])] = &[("alpha/src/sched", &["crate::http"])];
    let v = layers::check_rules(tree.root(), rules).unwrap();
    assert_eq!(v.len(), 1, "{v:?}");
    assert_reported(&v, &["alpha/src/sched/deep/filter.rs:2", "crate::http"]);
    tree.write("alpha/src/sched/deep/filter.rs", "//! A filter.\n");
    assert!(layers::check_rules(tree.root(), rules).unwrap().is_empty());
}
