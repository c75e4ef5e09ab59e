//! A throwaway workspace in the system's temporary folder, removed when
//! dropped.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

pub struct Tree {
    root: PathBuf,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl Tree {
    /// An empty workspace whose members are `members`.
    pub fn new(members: &[&str]) -> Tree {
        let root = std::env::temp_dir().join(format!(
            "tidy-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let tree = Tree { root };
        let list: Vec<String> = members.iter().map(|m| format!("{m:?}")).collect();
        tree.write(
            "Cargo.toml",
            &format!("[workspace]\nmembers = [{}]\n", list.join(", ")),
        );
        tree
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Writes `text` to `path` (relative to the root), making its folders.
    pub fn write(&self, path: &str, text: &str) {
        let path = self.root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    pub fn remove(&self, path: &str) {
        std::fs::remove_file(self.root.join(path)).unwrap();
    }

    /// A member `name` (in a folder of that name) with `deps` as its
    /// manifest's dependency tables.
    pub fn crate_(&self, name: &str, deps: &str) {
        self.write(
            &format!("{name}/Cargo.toml"),
            &format!("[package]\nname = \"{name}\"\nversion = \"0.1.0\"\n\n{deps}"),
        );
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
