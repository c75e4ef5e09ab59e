//! Helpers shared by the per-kind test modules.
//!
//! Explicit ids do not advance a PostgreSQL identity column, so the tests give
//! explicit ids above 100: the defaults (1, 2, …) never collide with them.

use std::collections::{BTreeMap, BTreeSet};

use migrations::{Backend, Kind, UNIQUE_CONSTRAINTS};
use sqlx::{PgPool, Row, SqlitePool};

/// A migrated database of either backend, with the handful of operations the
/// tests need written once for both.
pub enum Db {
    Pg(PgPool),
    Sqlite(SqlitePool),
}

impl Db {
    pub fn backend(&self) -> Backend {
        match self {
            Db::Pg(_) => Backend::Postgres,
            Db::Sqlite(_) => Backend::Sqlite,
        }
    }

    /// Runs one statement without binds.
    pub async fn exec(&self, sql: &str) -> Result<u64, sqlx::Error> {
        match self {
            Db::Pg(p) => sqlx::query(sql).execute(p).await.map(|r| r.rows_affected()),
            Db::Sqlite(p) => sqlx::query(sql).execute(p).await.map(|r| r.rows_affected()),
        }
    }

    /// Runs statements that must succeed.
    pub async fn ok(&self, sqls: &[&str]) {
        for sql in sqls {
            if let Err(e) = self.exec(sql).await {
                panic!("{}: {sql}: {e}", self.backend());
            }
        }
    }

    /// A single i64 value.
    pub async fn i64(&self, sql: &str) -> i64 {
        match self {
            Db::Pg(p) => sqlx::query_scalar(sql).fetch_one(p).await,
            Db::Sqlite(p) => sqlx::query_scalar(sql).fetch_one(p).await,
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// A single timestamp value, decoded as the code will decode it.
    pub async fn timestamp(
        &self,
        sql: &str,
    ) -> sqlx::types::chrono::DateTime<sqlx::types::chrono::Utc> {
        match self {
            Db::Pg(p) => sqlx::query_scalar(sql).fetch_one(p).await,
            Db::Sqlite(p) => sqlx::query_scalar(sql).fetch_one(p).await,
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// User tables (without sqlx's and SQLite's bookkeeping).
    pub async fn tables(&self) -> BTreeSet<String> {
        let names: Vec<String> = match self {
            Db::Pg(p) => sqlx::query_scalar(
                "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public'",
            )
            .fetch_all(p)
            .await
            .unwrap(),
            Db::Sqlite(p) => sqlx::query_scalar(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
            )
            .fetch_all(p)
            .await
            .unwrap(),
        };
        names
            .into_iter()
            .filter(|n| n != "_sqlx_migrations")
            .collect()
    }

    /// Columns of every user table, in order.
    pub async fn columns(&self) -> BTreeMap<String, Vec<String>> {
        let rows: Vec<(String, String)> = match self {
            Db::Pg(p) => sqlx::query_as(
                "SELECT table_name::text, column_name::text FROM information_schema.columns \
                 WHERE table_schema = 'public' AND table_name <> '_sqlx_migrations' \
                 ORDER BY table_name, ordinal_position",
            )
            .fetch_all(p)
            .await
            .unwrap(),
            Db::Sqlite(p) => sqlx::query_as(
                "SELECT m.name, c.name FROM sqlite_master m, pragma_table_info(m.name) c \
                 WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' AND m.name <> '_sqlx_migrations' \
                 ORDER BY m.name, c.cid",
            )
            .fetch_all(p)
            .await
            .unwrap(),
        };
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (t, c) in rows {
            out.entry(t).or_default().push(c);
        }
        out
    }

    /// Unique indexes other than primary keys: name → (table, columns).
    pub async fn unique_indexes(&self) -> BTreeMap<String, (String, Vec<String>)> {
        let rows = match self {
            Db::Pg(p) => sqlx::query(
                "SELECT i.relname::text AS name, t.relname::text AS tbl, k.ord AS ord, a.attname::text AS col \
                 FROM pg_index x \
                 JOIN pg_class i ON i.oid = x.indexrelid \
                 JOIN pg_class t ON t.oid = x.indrelid \
                 JOIN pg_namespace n ON n.oid = t.relnamespace \
                 CROSS JOIN LATERAL unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) \
                 JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum \
                 WHERE n.nspname = 'public' AND x.indisunique AND NOT x.indisprimary \
                   AND t.relname <> '_sqlx_migrations' \
                 ORDER BY 1, 3",
            )
            .fetch_all(p)
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.get::<String, _>("name"), r.get::<String, _>("tbl"), r.get::<String, _>("col")))
            .collect::<Vec<_>>(),
            Db::Sqlite(p) => sqlx::query(
                "SELECT il.name AS name, m.name AS tbl, ii.seqno AS ord, ii.name AS col \
                 FROM sqlite_master m, pragma_index_list(m.name) il, pragma_index_info(il.name) ii \
                 WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' AND m.name <> '_sqlx_migrations' \
                   AND il.\"unique\" = 1 AND il.origin <> 'pk' \
                 ORDER BY 1, 3",
            )
            .fetch_all(p)
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.get::<String, _>("name"), r.get::<String, _>("tbl"), r.get::<String, _>("col")))
            .collect::<Vec<_>>(),
        };
        let mut out: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
        for (name, tbl, col) in rows {
            out.entry(name)
                .or_insert_with(|| (tbl, Vec::new()))
                .1
                .push(col);
        }
        out
    }

    pub async fn close(self) {
        match self {
            Db::Pg(p) => p.close().await,
            Db::Sqlite(p) => p.close().await,
        }
    }
}

/// Asserts that `sql` fails on a unique constraint that the crate maps to `name`.
pub async fn assert_unique(db: &Db, sql: &str, name: &str) {
    let err = db.exec(sql).await.expect_err(sql);
    assert_eq!(
        migrations::unique_violation(&err),
        Some(name),
        "{}: {sql} failed with {err}, not as {name}",
        db.backend()
    );
    if db.backend() == Backend::Postgres {
        assert!(err.to_string().contains(name), "{err}");
    }
}

/// Asserts that `sql` fails on a foreign key (named `name` on PostgreSQL,
/// which reports it; SQLite does not). An empty `name` accepts any.
pub async fn assert_fk(db: &Db, sql: &str, name: &str) {
    let err = db.exec(sql).await.expect_err(sql);
    let dbe = err
        .as_database_error()
        .unwrap_or_else(|| panic!("{sql}: {err}"));
    assert_eq!(
        dbe.kind(),
        sqlx::error::ErrorKind::ForeignKeyViolation,
        "{}: {sql}: {err}",
        db.backend()
    );
    if db.backend() == Backend::Postgres && !name.is_empty() {
        assert_eq!(dbe.constraint(), Some(name), "{sql}: {err}");
    }
    assert_eq!(migrations::unique_violation(&err), None);
}

/// Asserts that `sql` fails on the named CHECK constraint.
pub async fn assert_check(db: &Db, sql: &str, name: &str) {
    let err = db.exec(sql).await.expect_err(sql);
    let dbe = err
        .as_database_error()
        .unwrap_or_else(|| panic!("{sql}: {err}"));
    assert_eq!(
        dbe.kind(),
        sqlx::error::ErrorKind::CheckViolation,
        "{}: {sql}: {err}",
        db.backend()
    );
    assert!(
        err.to_string().contains(name),
        "{}: {sql}: {err}",
        db.backend()
    );
}

/// A fresh database for `test` on `backend`, or `None` when PostgreSQL is
/// unavailable and not required. The SQLite guard must outlive the test.
pub async fn fresh_url(
    test: &str,
    backend: Backend,
) -> Option<(String, Option<testkit::SqliteDb>)> {
    match backend {
        Backend::Postgres => testkit::postgres(test).await.map(|db| (db.url, None)),
        Backend::Sqlite => {
            let db = testkit::sqlite(test);
            Some((db.url.clone(), Some(db)))
        }
    }
}

/// Connects a pool (SQLite pools enforce foreign keys by default).
pub async fn connect(url: &str, backend: Backend) -> Db {
    match backend {
        Backend::Postgres => Db::Pg(PgPool::connect(url).await.unwrap()),
        Backend::Sqlite => Db::Sqlite(SqlitePool::connect(url).await.unwrap()),
    }
}

/// The common life cycle: fresh database → migrate (everything applied) →
/// migrate again (nothing applied) → version → expected tables → the unique
/// indexes are exactly the crate's list for this kind. Returns a pool on the
/// migrated database for constraint checks, and the SQLite guard.
pub async fn migrated(
    test: &str,
    kind: Kind,
    backend: Backend,
    tables: &[&str],
) -> Option<(Db, Option<testkit::SqliteDb>)> {
    let (url, guard) = fresh_url(test, backend).await?;

    match migrations::version(kind, &url).await {
        Ok(v) => assert_eq!(v, None, "fresh database has no version"),
        // A SQLite file that does not exist yet is not created by `version`.
        Err(migrations::Error::Connect { .. }) if backend == Backend::Sqlite => {}
        Err(e) => panic!("version on a fresh database: {e:?}"),
    }

    let first = migrations::migrate(kind, &url)
        .await
        .expect("first migrate");
    let all: Vec<i64> = (1..=migrations::latest(kind)).collect();
    assert_eq!(first.applied, all, "{kind}/{backend}");
    assert_eq!(first.version, migrations::latest(kind));
    let second = migrations::migrate(kind, &url)
        .await
        .expect("second migrate");
    assert!(
        second.applied.is_empty(),
        "second run applied {:?}",
        second.applied
    );
    assert_eq!(second.version, first.version);
    assert_eq!(
        migrations::version(kind, &url).await.unwrap(),
        Some(migrations::latest(kind))
    );

    let db = connect(&url, backend).await;
    // The pool variants agree: nothing left to do.
    let third = match &db {
        Db::Pg(p) => migrations::migrate_pg(kind, p).await,
        Db::Sqlite(p) => migrations::migrate_sqlite(kind, p).await,
    }
    .expect("pool migrate");
    assert!(third.applied.is_empty());

    let expected: BTreeSet<String> = tables.iter().map(|s| s.to_string()).collect();
    assert_eq!(db.tables().await, expected, "{kind}/{backend} tables");

    let actual = db.unique_indexes().await;
    let wanted: BTreeMap<String, (String, Vec<String>)> = UNIQUE_CONSTRAINTS
        .iter()
        .filter(|c| c.kind == kind)
        .map(|c| {
            (
                c.name.to_owned(),
                (
                    c.table.to_owned(),
                    c.columns.iter().map(|s| s.to_string()).collect(),
                ),
            )
        })
        .collect();
    assert_eq!(
        actual, wanted,
        "{kind}/{backend}: unique indexes differ from UNIQUE_CONSTRAINTS"
    );
    Some((db, guard))
}
