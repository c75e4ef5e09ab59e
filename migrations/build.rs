//! Rebuild when a migration file is added: `sqlx::migrate!` embeds the
//! directories' files but does not watch the directories themselves.

fn main() {
    for dir in ["api", "cell", "placement"] {
        println!("cargo:rerun-if-changed={dir}");
    }
}
