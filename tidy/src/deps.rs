//! Dependency rules: each crate's `src/lib.rs` says in prose what it may
//! and must not depend on; [`RULES`] is that prose as a table, and
//! [`check`] holds every member's `Cargo.toml` to it. [`check_prose`]
//! keeps the two together: each rule quotes the words of the doc comment
//! it encodes, and fails when they are gone (the prose changed: change
//! the rule with it).

use std::collections::BTreeMap;
use std::path::Path;

use crate::{members, read, read_toml, Result};

/// Which dependency tables of a manifest a rule reads (each also under
/// `[target.'cfg(…)'.…]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tables {
    /// `[dependencies]` and `[build-dependencies]`: what the crate itself
    /// links.
    Normal,
    /// Those and `[dev-dependencies]`.
    All,
}

/// The crates whose manifests a rule constrains.
#[derive(Debug, Clone, Copy)]
pub enum Crates {
    Only(&'static [&'static str]),
    /// Every workspace member.
    Every,
}

/// What a rule says of their dependencies.
#[derive(Debug, Clone, Copy)]
pub enum Deps {
    /// None of these.
    Forbidden(&'static [&'static str]),
    /// Nothing but these.
    OnlyFrom(&'static [&'static str]),
}

/// One sentence of a crate's doc comment, as a check.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// The crate whose `src/lib.rs` states the rule.
    pub stated_in: &'static str,
    /// The words of that doc comment the rule encodes, whitespace
    /// collapsed.
    pub says: &'static str,
    pub crates: Crates,
    pub tables: Tables,
    pub deps: Deps,
}

/// The workspace's rules, one per "must not" (or "may only") sentence.
pub const RULES: &[Rule] = &[
    Rule {
        stated_in: "api-super",
        says: "Must not depend on cell-conductor or compute",
        crates: Crates::Only(&["api-super"]),
        tables: Tables::Normal,
        deps: Deps::Forbidden(&["cell-conductor", "compute"]),
    },
    Rule {
        stated_in: "cell-conductor",
        says: "Must not depend on api-super or compute",
        crates: Crates::Only(&["cell-conductor"]),
        tables: Tables::Normal,
        deps: Deps::Forbidden(&["api-super", "compute"]),
    },
    Rule {
        stated_in: "cell-mapping",
        says: "Must not depend on api-super, cell-conductor, compute, placement or region",
        crates: Crates::Only(&["cell-mapping"]),
        tables: Tables::Normal,
        deps: Deps::Forbidden(&[
            "api-super",
            "cell-conductor",
            "compute",
            "placement",
            "region",
        ]),
    },
    Rule {
        stated_in: "compute",
        says: "Must never depend on sqlx or on axum's server side",
        crates: Crates::Only(&["compute"]),
        tables: Tables::Normal,
        deps: Deps::Forbidden(&["sqlx", "axum"]),
    },
    Rule {
        stated_in: "fabric",
        says: "Must not depend on sqlx, on axum or on any service crate",
        crates: Crates::Only(&["fabric"]),
        tables: Tables::Normal,
        // `migrations` is no service, but it is sqlx.
        deps: Deps::Forbidden(&[
            "sqlx",
            "axum",
            "migrations",
            "api-super",
            "cell-conductor",
            "cell-mapping",
            "compute",
            "placement",
            "region",
            "loadtest",
        ]),
    },
    Rule {
        stated_in: "httpd",
        says: "Must not depend on any service crate",
        crates: Crates::Only(&["httpd"]),
        tables: Tables::All,
        deps: Deps::Forbidden(&[
            "fabric",
            "migrations",
            "api-super",
            "cell-conductor",
            "cell-mapping",
            "compute",
            "placement",
            "region",
            "loadtest",
        ]),
    },
    Rule {
        stated_in: "placement",
        says: "Must not depend on any other service crate",
        crates: Crates::Only(&["placement"]),
        tables: Tables::Normal,
        deps: Deps::Forbidden(&[
            "api-super",
            "cell-conductor",
            "cell-mapping",
            "compute",
            "region",
            "loadtest",
        ]),
    },
    Rule {
        stated_in: "migrations",
        says: "May depend on: sqlx, thiserror, tracing, tokio",
        crates: Crates::Only(&["migrations"]),
        tables: Tables::Normal,
        deps: Deps::OnlyFrom(&["sqlx", "thiserror", "tracing", "tokio"]),
    },
    Rule {
        stated_in: "testkit",
        says: "May depend on: sqlx, tokio, openssl and tokio-native-tls",
        crates: Crates::Only(&["testkit"]),
        tables: Tables::Normal,
        deps: Deps::OnlyFrom(&["sqlx", "tokio", "openssl", "tokio-native-tls"]),
    },
    Rule {
        stated_in: "testkit",
        says: "Only ever a dev-dependency",
        crates: Crates::Every,
        tables: Tables::Normal,
        deps: Deps::Forbidden(&["testkit"]),
    },
    Rule {
        stated_in: "region",
        says: "no service crate depends on it",
        crates: Crates::Only(&[
            "api-super",
            "cell-conductor",
            "cell-mapping",
            "compute",
            "placement",
            "fabric",
            "migrations",
            "testkit",
        ]),
        tables: Tables::All,
        deps: Deps::Forbidden(&["region"]),
    },
    Rule {
        stated_in: "tidy",
        says: "Must not depend on any other workspace crate",
        crates: Crates::Only(&["tidy"]),
        tables: Tables::All,
        deps: Deps::Forbidden(&[
            "fabric",
            "testkit",
            "migrations",
            "placement",
            "cell-mapping",
            "cell-conductor",
            "compute",
            "api-super",
            "loadtest",
            "region",
        ]),
    },
];

/// A member crate: its package name and its dependencies by table.
struct Member {
    folder: String,
    name: String,
    /// `(table, dependency)`; the dependency is the package's name, not a
    /// rename.
    deps: Vec<(&'static str, String)>,
}

const NORMAL: &[&str] = &["dependencies", "build-dependencies"];
const DEV: &str = "dev-dependencies";

fn dep_names(table: &toml::Table, key: &'static str, into: &mut Vec<(&'static str, String)>) {
    let Some(deps) = table.get(key).and_then(|t| t.as_table()) else {
        return;
    };
    for (name, spec) in deps {
        let package = spec.get("package").and_then(|p| p.as_str()).unwrap_or(name);
        into.push((key, package.to_owned()));
    }
}

fn load(root: &Path) -> Result<Vec<Member>> {
    let mut out = Vec::new();
    for folder in members(root)? {
        let path = root.join(&folder).join("Cargo.toml");
        let manifest = read_toml(&path)?;
        let name = manifest
            .get("package")
            .and_then(|p| p.get("name"))
            .and_then(|n| n.as_str())
            .unwrap_or(&folder)
            .to_owned();
        let mut tables = vec![&manifest];
        if let Some(targets) = manifest.get("target").and_then(|t| t.as_table()) {
            tables.extend(targets.values().filter_map(|t| t.as_table()));
        }
        let mut deps = Vec::new();
        for table in tables {
            for key in NORMAL.iter().copied().chain([DEV]) {
                dep_names(table, key, &mut deps);
            }
        }
        out.push(Member { folder, name, deps });
    }
    Ok(out)
}

/// [`check_rules`] with [`RULES`].
pub fn check(root: &Path) -> Result<Vec<String>> {
    check_rules(root, RULES)
}

/// Every dependency of a member of the workspace at `root` that one of
/// `rules` forbids, as `<folder>/Cargo.toml: [table] dep: <why>`.
pub fn check_rules(root: &Path, rules: &[Rule]) -> Result<Vec<String>> {
    let members = load(root)?;
    let mut out = Vec::new();
    for rule in rules {
        for member in &members {
            let applies = match rule.crates {
                Crates::Every => true,
                Crates::Only(names) => names.contains(&member.name.as_str()),
            };
            if !applies {
                continue;
            }
            for (table, dep) in &member.deps {
                if rule.tables == Tables::Normal && *table == DEV {
                    continue;
                }
                let broken = match rule.deps {
                    Deps::Forbidden(names) => names.contains(&dep.as_str()),
                    Deps::OnlyFrom(names) => !names.contains(&dep.as_str()),
                };
                if broken {
                    out.push(format!(
                        "{}/Cargo.toml: [{table}] {dep}: {} says \"{}\"",
                        member.folder, rule.stated_in, rule.says
                    ));
                }
            }
        }
    }
    Ok(out)
}

/// The `//!` doc comment of a `lib.rs`, whitespace collapsed.
pub fn doc_comment(source: &str) -> String {
    let text: Vec<&str> = source
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("//!"))
        .collect();
    text.join(" ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// [`check_prose_of`] with [`RULES`].
pub fn check_prose(root: &Path) -> Result<Vec<String>> {
    check_prose_of(root, RULES)
}

/// Every rule whose words are no longer in its crate's doc comment (or
/// whose crate is gone).
pub fn check_prose_of(root: &Path, rules: &[Rule]) -> Result<Vec<String>> {
    let members = load(root)?;
    let folders: BTreeMap<&str, &str> = members
        .iter()
        .map(|m| (m.name.as_str(), m.folder.as_str()))
        .collect();
    let mut out = Vec::new();
    for rule in rules {
        let Some(folder) = folders.get(rule.stated_in) else {
            out.push(format!(
                "a rule is stated in {}, which is not a workspace member",
                rule.stated_in
            ));
            continue;
        };
        let doc = doc_comment(&read(&root.join(folder).join("src/lib.rs"))?);
        if !doc.contains(rule.says) {
            out.push(format!(
                "{folder}/src/lib.rs no longer says \"{}\": change tidy's deps::RULES with it",
                rule.says
            ));
        }
    }
    Ok(out)
}
