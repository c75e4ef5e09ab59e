//! SQLite files kept private: a database holds password hashes, sealed
//! keys, tokens' revocations and every server's user data, so its file,
//! its `-wal`/`-shm` companions, its migration lock and any directory made
//! for it are its owner's alone (0600 and 0700 from their creation, never
//! narrowed afterwards), whether the region or a standalone service opens
//! it. SQLite itself creates files with the process's umask (usually
//! 0644) and makes no directories, so the file is made here first; SQLite
//! gives the `-wal` and `-shm` files it creates later the database file's
//! mode.

use std::io::ErrorKind;
use std::path::Path;

/// Whether `db` names a file (not `:memory:` or a `file:` URI of an
/// in-memory database).
pub(crate) fn is_file(db: &Path) -> bool {
    match db.to_str() {
        Some(name) => !(name.is_empty() || name == ":memory:" || name.starts_with("file:")),
        None => true,
    }
}

/// Whether a SQLite URL asks for its file to be created (`mode=rwc`).
pub fn url_creates(url: &str) -> bool {
    url.split_once('?')
        .is_some_and(|(_, q)| q.split('&').any(|kv| kv == "mode=rwc"))
}

/// Makes the database file `db` of `url` private before SQLite opens it.
/// With `create`, a missing file is made empty with mode 0600; when `url`
/// also says `mode=rwc`, the missing directories above it are made with
/// 0700 (existing ones are left as they are; without `mode=rwc` a missing
/// directory stays an error, as in SQLite). An existing file, or its
/// `-wal`/`-shm`, that others may read is narrowed to 0600 with a
/// warning. Errors are the filesystem's, naming the path.
pub fn prepare(url: &str, db: &Path, create: bool) -> std::io::Result<()> {
    if !is_file(db) {
        return Ok(());
    }
    let named = |e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: {e}", db.display()));
    if create && !db.exists() {
        if let Some(parent) = db
            .parent()
            .filter(|p| !p.as_os_str().is_empty() && url_creates(url))
        {
            let mut b = std::fs::DirBuilder::new();
            b.recursive(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::DirBuilderExt;
                b.mode(0o700);
            }
            b.create(parent).map_err(named)?;
        }
        match private_file().create_new(true).open(db) {
            Ok(_) => {}
            // Another process made it first: narrowed below if need be.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(named(e)),
        }
    }
    for suffix in ["", "-wal", "-shm"] {
        let mut path = db.as_os_str().to_owned();
        path.push(suffix);
        narrow(Path::new(&path)).map_err(named)?;
    }
    Ok(())
}

/// Options to write a file that, when they create it, is made with mode
/// 0600 (on Unix).
pub(crate) fn private_file() -> std::fs::OpenOptions {
    let mut o = std::fs::OpenOptions::new();
    o.write(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    o
}

/// Narrows an existing file others may read or write to 0600.
fn narrow(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = match std::fs::metadata(path) {
            Ok(m) => m.permissions().mode() & 0o777,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        if mode & 0o077 != 0 {
            tracing::warn!(
                file = %path.display(),
                mode = format!("{mode:o}"),
                "database file open to others; narrowing it to its owner (0600)"
            );
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_new_database_and_its_directories_are_private_and_existing_ones_narrowed() {
        let base = std::env::temp_dir().join(format!("sqlite-file-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        let db = base.join("a/b/api.sqlite");
        let rwc = "sqlite://ignored?mode=rwc";
        // No directory is made unless the URL says `mode=rwc`.
        assert!(prepare("sqlite://ignored", &db, true).is_err());
        assert!(!base.join("a").exists());
        prepare(rwc, &db, true).unwrap();
        assert_eq!(mode(&db), 0o600);
        assert_eq!(mode(&base.join("a/b")), 0o700);
        assert_eq!(mode(&base.join("a")), 0o700);
        // A directory that existed is not the database's to change.
        assert_eq!(mode(&base), 0o755);

        // Not created without `create`.
        let missing = base.join("c/none.sqlite");
        prepare(rwc, &missing, false).unwrap();
        assert!(!missing.exists() && !base.join("c").exists());

        // An old file open to others, and its WAL, are narrowed.
        let old = base.join("old.sqlite");
        for p in [old.clone(), base.join("old.sqlite-wal")] {
            std::fs::write(&p, b"").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        prepare(rwc, &old, false).unwrap();
        assert_eq!(mode(&old), 0o600);
        assert_eq!(mode(&base.join("old.sqlite-wal")), 0o600);

        // In-memory databases are left alone.
        prepare(rwc, Path::new(":memory:"), true).unwrap();
        std::fs::remove_dir_all(&base).unwrap();
    }
}
