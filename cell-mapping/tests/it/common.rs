//! Fresh regions (API + cell databases, a bus per cell) and CLI helpers.

use std::process::{Command, Output};

use cell_mapping::db::Pool;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Be {
    Pg,
    Sqlite,
}

/// Databases and buses for one test: the API database, cell0's database,
/// and `n` cells (database URL, transport URL).
pub struct Region {
    pub api: String,
    pub cell0: String,
    pub cells: Vec<(String, String)>,
    _sqlite: Vec<testkit::SqliteDb>,
}

/// A fresh region, or `None` when the backend is unavailable (skip).
pub async fn region(name: &str, be: Be, n: usize) -> Option<Region> {
    match be {
        Be::Sqlite => {
            let mut keep = Vec::new();
            let mut url = |suffix: &str| {
                let db = testkit::sqlite(&format!("{name}_{suffix}"));
                let u = db.url.clone();
                keep.push(db);
                u
            };
            let api = url("api");
            let cell0 = url("cell0");
            let cells = (1..=n)
                .map(|i| (url(&format!("c{i}")), format!("inproc://{name}_c{i}")))
                .collect();
            Some(Region {
                api,
                cell0,
                cells,
                _sqlite: keep,
            })
        }
        Be::Pg => {
            let api = testkit::postgres(&format!("{name}_api")).await?.url;
            let cell0 = testkit::postgres(&format!("{name}_cell0")).await?.url;
            let mut cells = Vec::new();
            for i in 1..=n {
                let db = testkit::postgres(&format!("{name}_c{i}")).await?.url;
                let mq = testkit::rabbitmq(&format!("{name}_c{i}"))?;
                cells.push((db, mq));
            }
            Some(Region {
                api,
                cell0,
                cells,
                _sqlite: Vec::new(),
            })
        }
    }
}

/// Runs `cell-manage --api-database-connection <api> <args>`.
pub fn cm(api: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cell-manage"))
        .arg("--api-database-connection")
        .arg(api)
        .args(args)
        .env_remove("CELL_MANAGE_CONFIG")
        .output()
        .expect("run cell-manage")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts the exit code; returns stdout.
#[track_caller]
pub fn expect(o: Output, code: i32) -> String {
    assert_eq!(
        o.status.code(),
        Some(code),
        "expected exit {code}\nstdout: {}\nstderr: {}",
        stdout(&o),
        stderr(&o)
    );
    if code != 0 {
        let err = stderr(&o);
        // One line naming the problem (upstream-style refusals print to stdout).
        assert!(err.lines().count() <= 1, "more than one error line: {err}");
    }
    stdout(&o)
}

/// Runs a cell-manage command that must succeed; returns stdout.
#[track_caller]
pub fn ok(api: &str, args: &[&str]) -> String {
    expect(cm(api, args), 0)
}

/// Migrates a cell database (what create-cell would do) for direct inserts.
pub async fn cell_pool(url: &str) -> Pool {
    migrations::migrate(migrations::Kind::Cell, url)
        .await
        .unwrap();
    Pool::connect("test", url).await.unwrap()
}

pub async fn exec(pool: &Pool, sql: &str, args: &[&str]) {
    match pool {
        Pool::Postgres(p) => {
            let mut q = sqlx::query(sql);
            for a in args {
                q = q.bind(*a);
            }
            q.execute(p).await.unwrap();
        }
        Pool::Sqlite(p) => {
            let mut q = sqlx::query(sql);
            for a in args {
                q = q.bind(*a);
            }
            q.execute(p).await.unwrap();
        }
    }
}

/// Registers a compute node (what a compute would do through its conductor).
pub async fn add_compute(pool: &Pool, host: &str) {
    exec(
        pool,
        "INSERT INTO compute_nodes (uuid, host, hypervisor_hostname, hypervisor_type, vcpus, memory_mb, local_gb) \
         VALUES ($1, $2, $2, 'fake', 8, 16384, 100)",
        &[&uuid::Uuid::new_v4().to_string(), host],
    )
    .await;
}

/// Adds an instance on `host`; returns its UUID.
pub async fn add_instance(pool: &Pool, host: &str, deleted: bool) -> String {
    let u = uuid::Uuid::new_v4().to_string();
    exec(
        pool,
        &format!(
            "INSERT INTO instances (uuid, project_id, user_id, host, node, deleted) \
             VALUES ($1, 'p1', 'u1', $2, $2, {})",
            if deleted { "TRUE" } else { "FALSE" }
        ),
        &[&u, host],
    )
    .await;
    u
}

pub async fn scalar_i64(pool: &Pool, sql: &str) -> i64 {
    match pool {
        Pool::Postgres(p) => sqlx::query_scalar(sql).fetch_one(p).await.unwrap(),
        Pool::Sqlite(p) => sqlx::query_scalar(sql).fetch_one(p).await.unwrap(),
    }
}

/// Every (host, cell uuid) mapping, sorted.
pub async fn host_mappings(api: &str) -> Vec<(String, String)> {
    let pool = Pool::connect("test", api).await.unwrap();
    let sql = "SELECT h.host, c.uuid FROM host_mappings h JOIN cell_mappings c ON c.id = h.cell_id ORDER BY h.host";
    let v = match &pool {
        Pool::Postgres(p) => sqlx::query_as(sql).fetch_all(p).await.unwrap(),
        Pool::Sqlite(p) => sqlx::query_as(sql).fetch_all(p).await.unwrap(),
    };
    pool.close().await;
    v
}

/// A fresh, migrated cell database on `be`; keep the second value alive
/// (it removes the SQLite file when dropped). `None`: PostgreSQL skipped.
pub async fn cell_db(
    be: Be,
    name: &str,
) -> Option<(cell_mapping::CellDb, Option<testkit::SqliteDb>)> {
    let (url, keep) = match be {
        Be::Sqlite => {
            let d = testkit::sqlite(name);
            (d.url.clone(), Some(d))
        }
        Be::Pg => (testkit::postgres(name).await?.url, None),
    };
    migrations::migrate(migrations::Kind::Cell, &url)
        .await
        .expect("cell migrations");
    Some((cell_mapping::CellDb::open(&url).await.expect("open"), keep))
}
