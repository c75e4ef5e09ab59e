use tidy::migrations::{self, RECORD};

use crate::tree::Tree;
use crate::{assert_clean, assert_reported, workspace};

/// With `TIDY_RECORD=1`, records the migration files not recorded yet
/// first (never a changed one).
#[test]
fn landed_migrations_are_unchanged_and_recorded() {
    let root = workspace();
    if std::env::var_os("TIDY_RECORD").is_some_and(|v| v == "1") {
        for file in migrations::record_new(&root).unwrap() {
            eprintln!("recorded migrations/{file}");
        }
    }
    assert_clean("migrations", &migrations::check(&root).unwrap());
}

/// A tree with two recorded migrations.
fn landed() -> Tree {
    let tree = Tree::new(&[]);
    tree.write(
        "migrations/api/postgres/0001_initial.sql",
        "CREATE TABLE a ();\n",
    );
    tree.write(
        "migrations/cell/sqlite/0001_initial.sql",
        "CREATE TABLE b ();\n",
    );
    assert_eq!(migrations::record_new(tree.root()).unwrap().len(), 2);
    assert_clean("migrations", &migrations::check(tree.root()).unwrap());
    tree
}

#[test]
fn a_changed_migration_fails() {
    let tree = landed();
    tree.write(
        "migrations/api/postgres/0001_initial.sql",
        "CREATE TABLE a (id BIGINT);\n",
    );
    let found = migrations::check(tree.root()).unwrap();
    assert_reported(
        &found,
        &["migrations/api/postgres/0001_initial.sql", "changed"],
    );
    // Recording does not accept the change.
    assert!(migrations::record_new(tree.root()).unwrap().is_empty());
    assert_eq!(migrations::check(tree.root()).unwrap(), found);
}

#[test]
fn a_removed_migration_fails() {
    let tree = landed();
    tree.remove("migrations/cell/sqlite/0001_initial.sql");
    let found = migrations::check(tree.root()).unwrap();
    assert_reported(&found, &["migrations/cell/sqlite/0001_initial.sql", "gone"]);
}

#[test]
fn an_unrecorded_migration_fails_until_recorded() {
    let tree = landed();
    tree.write(
        "migrations/placement/sqlite/0002_more.sql",
        "CREATE TABLE c ();\n",
    );
    let found = migrations::check(tree.root()).unwrap();
    assert_reported(
        &found,
        &["migrations/placement/sqlite/0002_more.sql", "TIDY_RECORD=1"],
    );
    assert_eq!(
        migrations::record_new(tree.root()).unwrap(),
        ["placement/sqlite/0002_more.sql"]
    );
    assert_clean("migrations", &migrations::check(tree.root()).unwrap());
    let record = std::fs::read_to_string(tree.root().join(RECORD)).unwrap();
    let paths: Vec<&str> = record
        .lines()
        .map(|l| l.split_once("  ").unwrap().1)
        .collect();
    assert_eq!(
        paths,
        [
            "api/postgres/0001_initial.sql",
            "cell/sqlite/0001_initial.sql",
            "placement/sqlite/0002_more.sql"
        ]
    );
}
