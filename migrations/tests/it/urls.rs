//! URL handling, errors, and what is common to all kinds.

use migrations::{Backend, Error, Kind};

use crate::common::{connect, fresh_url};

#[test]
fn backend_from_url() {
    for url in [
        "postgres://u@h/db",
        "postgresql://u@h/db",
        "POSTGRES://h/db",
        "postgresql:///db",
    ] {
        assert_eq!(Backend::from_url(url).unwrap(), Backend::Postgres, "{url}");
    }
    for url in [
        "sqlite://data/api.sqlite",
        "sqlite:api.db",
        "sqlite::memory:",
        "sqlite:///tmp/x?mode=rwc",
    ] {
        assert_eq!(Backend::from_url(url).unwrap(), Backend::Sqlite, "{url}");
    }
    for url in ["mysql://root:secret@h/nova", "postgres:/x", "", "file:x.db"] {
        let err = Backend::from_url(url).unwrap_err();
        assert!(
            matches!(err, Error::UnsupportedUrl { .. }),
            "{url}: {err:?}"
        );
        assert!(!err.to_string().contains("secret"), "{err}");
    }
}

#[tokio::test]
async fn unsupported_url_is_an_error() {
    let err = migrations::migrate(Kind::Api, "mysql://root:secret@localhost/nova_api")
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::UnsupportedUrl { ref scheme } if scheme == "mysql"),
        "{err:?}"
    );
}

#[tokio::test]
async fn missing_postgres_database_is_a_connect_error() {
    let Some((url, _)) = fresh_url("migrations_missing_pg", Backend::Postgres).await else {
        return;
    };
    let url = format!("{}_does_not_exist", url);
    let err = migrations::migrate(Kind::Cell, &url).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Connect {
                kind: Kind::Cell,
                backend: Backend::Postgres,
                ..
            }
        ),
        "{err:?}"
    );
    let err = migrations::version(Kind::Cell, &url).await.unwrap_err();
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
}

#[tokio::test]
async fn sqlite_file_is_created_and_in_memory_works() {
    let dir = testkit::temp_dir("migrations_sqlite_create");
    // No `mode=rwc`: `migrate` creates the file itself.
    let url = format!("sqlite://{}/nested-ok.sqlite", dir.display());
    assert!(
        migrations::version(Kind::Placement, &url).await.is_err(),
        "version must not create the file"
    );
    assert!(!dir.join("nested-ok.sqlite").exists());
    let applied = migrations::migrate(Kind::Placement, &url).await.unwrap();
    let latest = migrations::latest(Kind::Placement);
    assert_eq!(applied.applied, (1..=latest).collect::<Vec<_>>());
    assert_eq!(
        migrations::version(Kind::Placement, &url).await.unwrap(),
        Some(latest)
    );
    let _ = std::fs::remove_dir_all(&dir);

    let all: Vec<i64> = (1..=migrations::latest(Kind::Cell)).collect();
    assert_eq!(
        migrations::migrate(Kind::Cell, "sqlite::memory:")
            .await
            .unwrap()
            .applied,
        all
    );
}

#[test]
fn unique_constraint_list_is_consistent() {
    let mut names = std::collections::BTreeSet::new();
    let mut keys = std::collections::BTreeSet::new();
    for c in migrations::UNIQUE_CONSTRAINTS {
        assert!(names.insert(c.name), "duplicate name {}", c.name);
        // SQLite errors name table and columns only: they must identify the constraint.
        assert!(keys.insert((c.table, c.columns)), "ambiguous {}", c.name);
        assert!(
            c.name.len() <= 63,
            "{} is longer than PostgreSQL's identifier limit",
            c.name
        );
        assert!(
            c.name.starts_with(&format!("uniq_{}0", c.table)),
            "{} does not follow uniq_<table>0…",
            c.name
        );
    }
    for kind in Kind::ALL {
        assert!(migrations::unique_constraints(kind).count() > 0);
        assert!(migrations::latest(kind) >= 1);
        for backend in Backend::ALL {
            assert_eq!(
                migrations::migrator(kind, backend)
                    .iter()
                    .map(|m| m.version)
                    .max(),
                Some(migrations::latest(kind)),
                "{kind}/{backend}"
            );
        }
    }
}

/// The PostgreSQL and SQLite schemas of each kind have the same tables and
/// columns, so one Rust data layer serves both.
#[tokio::test]
async fn backends_have_the_same_columns() {
    for kind in Kind::ALL {
        let Some((pg_url, _)) =
            fresh_url(&format!("migrations_parity_{kind}"), Backend::Postgres).await
        else {
            return;
        };
        let (lite_url, guard) = fresh_url(&format!("migrations_parity_{kind}"), Backend::Sqlite)
            .await
            .unwrap();
        migrations::migrate(kind, &pg_url).await.unwrap();
        migrations::migrate(kind, &lite_url).await.unwrap();
        let pg = connect(&pg_url, Backend::Postgres).await;
        let lite = connect(&lite_url, Backend::Sqlite).await;
        assert_eq!(pg.columns().await, lite.columns().await, "{kind}");
        pg.close().await;
        lite.close().await;
        drop(guard);
    }
}

/// Several migrations of one fresh database at once (two services starting
/// together): every run succeeds and the schema is applied once.
async fn concurrent_runs(url: &str) {
    let runs: Vec<_> = (0..6)
        .map(|_| {
            let url = url.to_owned();
            tokio::spawn(async move { migrations::migrate(migrations::Kind::Cell, &url).await })
        })
        .collect();
    let mut applied = Vec::new();
    for r in runs {
        let a = r.await.unwrap().expect("every concurrent run succeeds");
        applied.extend(a.applied);
    }
    applied.sort_unstable();
    let all: Vec<i64> = (1..=migrations::latest(migrations::Kind::Cell)).collect();
    assert_eq!(applied, all, "each migration applied exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_migrations_sqlite() {
    let db = testkit::sqlite("migrations_concurrent");
    concurrent_runs(&db.url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_migrations_postgres() {
    let Some(db) = testkit::postgres("migrations_concurrent").await else {
        return;
    };
    concurrent_runs(&db.url).await;
}

/// Every pooled PostgreSQL connection gives up a lock wait after 30 s (a
/// lock held by a lost session is an error, not a hang) and a statement
/// after 60 s.
#[tokio::test]
async fn pooled_postgres_connections_bound_lock_waits() {
    let Some((url, _guard)) = fresh_url("migrations_lock_timeout", Backend::Postgres).await else {
        return;
    };
    let pool = migrations::open_pg(&url, 2).await.expect("pool");
    for _ in 0..3 {
        let v: String = sqlx::query_scalar("SHOW lock_timeout")
            .fetch_one(&pool)
            .await
            .expect("show");
        assert_eq!(v, "30s");
        let v: String = sqlx::query_scalar("SHOW statement_timeout")
            .fetch_one(&pool)
            .await
            .expect("show");
        assert_eq!(v, "1min");
    }
    pool.close().await;
}
