//! Standalone services make their SQLite databases private: `api-super
//! bootstrap` (the identity database) and `cell-manage api_db sync` (the
//! API database), each pointed at a directory that does not exist yet,
//! make it 0700 and the database 0600.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use super::distributed::bin;

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o777
}

fn ok(out: std::process::Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn standalone_api_super_and_cell_manage_create_sqlite_databases_private() {
    let dir = testkit::temp_dir("region_private_files");
    let identity = dir.join("identity/keystone.sqlite");
    let out = Command::new(bin("api-super"))
        .args(["bootstrap", "--bootstrap-password", "secret-admin-pw"])
        .env(
            "API_SUPER__IDENTITY__DATABASE__CONNECTION",
            format!("sqlite://{}?mode=rwc", identity.display()),
        )
        .env(
            "API_SUPER__IDENTITY__TOKEN__KEY_FILE",
            dir.join("keys/identity.kek").display().to_string(),
        )
        .output()
        .expect("run api-super bootstrap");
    ok(out, "api-super bootstrap");
    assert_eq!(mode(&dir.join("identity")), 0o700);
    assert_eq!(mode(&identity), 0o600);

    let api = dir.join("api/nova_api.sqlite");
    let out = Command::new(bin("cell-manage"))
        .arg("--api-database-connection")
        .arg(format!("sqlite://{}?mode=rwc", api.display()))
        .args(["api_db", "sync"])
        .output()
        .expect("run cell-manage");
    ok(out, "cell-manage api_db sync");
    assert_eq!(mode(&dir.join("api")), 0o700);
    assert_eq!(mode(&api), 0o600);
    let _ = std::fs::remove_dir_all(&dir);
}
