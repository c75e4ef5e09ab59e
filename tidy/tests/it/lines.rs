use tidy::lines;

use crate::tree::Tree;
use crate::{assert_clean, assert_reported, workspace};

#[test]
fn no_source_file_passes_the_limit_or_its_ratchet() {
    assert_clean("lines", &lines::check(&workspace()).unwrap());
}

fn lines_of(n: usize) -> String {
    "//\n".repeat(n)
}

/// A member `alpha` with a listed file of 12 lines (limit 10).
fn tree() -> Tree {
    let tree = Tree::new(&["alpha"]);
    tree.write("alpha/src/lib.rs", &lines_of(10));
    tree.write("alpha/src/long.rs", &lines_of(12));
    tree
}

const LONG: &[(&str, usize)] = &[("alpha/src/long.rs", 12)];

#[test]
fn files_within_the_limit_or_their_ratchet_pass() {
    let tree = tree();
    // Not measured: outside src/, tests/, benches/, or not Rust.
    tree.write("alpha/examples/big.rs", &lines_of(50));
    tree.write("alpha/src/big.sql", &lines_of(50));
    assert_clean("lines", &lines::check_with(tree.root(), 10, LONG).unwrap());
    tree.write("alpha/src/long.rs", &lines_of(11));
    assert_clean("lines", &lines::check_with(tree.root(), 10, LONG).unwrap());
}

#[test]
fn a_new_file_over_the_limit_fails() {
    let tree = tree();
    tree.write("alpha/tests/it/huge.rs", &lines_of(11));
    tree.write("alpha/benches/huge.rs", &lines_of(11));
    let found = lines::check_with(tree.root(), 10, LONG).unwrap();
    assert_reported(&found, &["alpha/tests/it/huge.rs", "11 lines"]);
    assert_reported(&found, &["alpha/benches/huge.rs", "11 lines"]);
}

#[test]
fn a_listed_file_that_grew_fails() {
    let tree = tree();
    tree.write("alpha/src/long.rs", &lines_of(13));
    let found = lines::check_with(tree.root(), 10, LONG).unwrap();
    assert_reported(&found, &["alpha/src/long.rs", "13 lines", "12"]);
}

#[test]
fn a_listed_file_back_within_the_limit_or_gone_must_leave_the_list() {
    let tree = tree();
    tree.write("alpha/src/long.rs", &lines_of(10));
    let found = lines::check_with(tree.root(), 10, LONG).unwrap();
    assert_reported(&found, &["alpha/src/long.rs", "10 lines", "take it off"]);
    tree.remove("alpha/src/long.rs");
    let found = lines::check_with(tree.root(), 10, LONG).unwrap();
    assert_reported(&found, &["alpha/src/long.rs", "gone"]);
}
