//! Layers inside a crate that the dependency rules cannot see: a module
//! folder whose files must not name another module of their crate.
//! Today one rule: api-super's scheduler takes what it needs through its
//! own traits (`HostSource`, its placement client) and never reaches into
//! the HTTP layer (`compute_api`, `http`), so that it can move into a
//! crate of its own.

use std::path::Path;

use crate::Result;

/// A folder (relative to the workspace root) and the paths its Rust files
/// may not mention (as `crate::<path>` or `super::…::<path>` would name
/// them, matched as written: `crate::compute_api`).
pub const RULES: &[(&str, &[&str])] = &[(
    "api-super/src/scheduler",
    &["crate::compute_api", "crate::http", "crate::services"],
)];

/// The violations of `rules` under `root`: one message per file and name.
pub fn check_rules(root: &Path, rules: &[(&str, &[&str])]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for (dir, banned) in rules {
        let mut stack = vec![root.join(dir)];
        while let Some(d) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in rd.flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    let text = crate::read(&p)?;
                    for b in *banned {
                        if let Some(n) = text.lines().position(|l| l.contains(b)) {
                            let rel = p.strip_prefix(root).unwrap_or(&p);
                            out.push(format!(
                                "{}:{}: names {b}; {dir} must not reach into that layer",
                                rel.display(),
                                n + 1
                            ));
                        }
                    }
                }
            }
        }
    }
    out.sort();
    Ok(out)
}

/// [`check_rules`] with [`RULES`].
pub fn check(root: &Path) -> Result<Vec<String>> {
    check_rules(root, RULES)
}
