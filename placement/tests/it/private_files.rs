//! The standalone placement process makes its SQLite database private:
//! the directories it makes for it 0700, the file and its WAL 0600.

use std::os::unix::fs::PermissionsExt;

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn standalone_placement_creates_its_sqlite_database_private() {
    let dir = testkit::temp_dir("placement_private_files");
    let db = dir.join("state/placement.sqlite");
    let server = super::concurrency::start(&format!("sqlite://{}?mode=rwc", db.display()));
    // It answers, so its database is migrated and open.
    let mut c = testkit::http::Client::new(server.addr).with_header("x-auth-token", "admin");
    let r = c.request("GET", "/resource_providers", None).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(mode(&dir.join("state")), 0o700);
    assert_eq!(mode(&db), 0o600);
    let wal = dir.join("state/placement.sqlite-wal");
    assert_eq!(mode(&wal), 0o600);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
