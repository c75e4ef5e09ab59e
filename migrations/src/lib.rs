//! `migrations`: the SQL schemas of the three database kinds — the API
//! database ([`Kind::Api`], upstream `nova_api`), the cell databases
//! ([`Kind::Cell`], one per cell plus cell0) and the placement database
//! ([`Kind::Placement`]) — for both backends, PostgreSQL and SQLite, embedded
//! in the binary with `sqlx::migrate!` from `migrations/<kind>/<backend>/`.
//!
//! [`migrate`] brings the database at a URL up to date; [`version`] reports
//! the highest applied migration; [`unique_violation`] turns a unique
//! constraint violation into the constraint's name on both backends (SQLite
//! error messages name the columns, not the constraint), so callers can map
//! constraint names to 409/400.
//!
//! **Migrations are append-only**: never edit a migration that has landed
//! (sqlx checks the checksum of every applied migration and refuses to run
//! against a changed one); add `NNNN_<what>.sql` for both backends instead,
//! and extend [`UNIQUE_CONSTRAINTS`] when it adds a unique index. The
//! `tidy` crate's test holds every file to the SHA-256 recorded for it in
//! `migrations/landed.sha256` and records a new one with `TIDY_RECORD=1`.
//!
//! Column types are chosen so that one Rust type works on both backends:
//! integers are `BIGINT`/`INTEGER` (`i64`), ratios `DOUBLE PRECISION`/`REAL`
//! (`f64`), booleans `BOOLEAN` (`bool`), timestamps `TIMESTAMPTZ`/`DATETIME`
//! (`chrono::DateTime<Utc>`), UUIDs and JSON documents `TEXT` (`String`).
//!
//! The PostgreSQL and SQLite pools every service opens come from here too
//! ([`open_pg`], [`open_sqlite`]), and [`PgStash`], which keeps connections
//! ready between the boot path's single statements, and [`failure`], which
//! tells a database that cannot be reached or a lost lock race from a
//! statement that was wrong.
//!
//! May depend on: sqlx, thiserror, tracing, tokio. Nothing in the workspace
//! depends on anything here but the schemas and these few functions.

pub mod failure;
mod pg_url;
pub mod sqlite_file;
mod stash;

pub use pg_url::pg_options;

pub use stash::{PgStash, Stashed};

use std::fmt;
use std::str::FromStr;

use sqlx::migrate::{Migrate, MigrateError, Migrator};
use sqlx::postgres::PgConnection;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{ConnectOptions, Connection, PgPool, SqlitePool};

static API_POSTGRES: Migrator = sqlx::migrate!("./api/postgres");
static API_SQLITE: Migrator = sqlx::migrate!("./api/sqlite");
static CELL_POSTGRES: Migrator = sqlx::migrate!("./cell/postgres");
static CELL_SQLITE: Migrator = sqlx::migrate!("./cell/sqlite");
static PLACEMENT_POSTGRES: Migrator = sqlx::migrate!("./placement/postgres");
static PLACEMENT_SQLITE: Migrator = sqlx::migrate!("./placement/sqlite");

/// The kind of database a URL points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// The API database: cell/host/instance mappings, build requests, request
    /// specs, flavors, key pairs, instance groups, aggregates, quotas.
    Api,
    /// A cell database (also cell0): instances and what hangs off them,
    /// services, compute nodes, migrations.
    Cell,
    /// The placement database: providers, inventories, allocations, consumers,
    /// resource classes, traits, aggregates.
    Placement,
}

impl Kind {
    /// All kinds, in a stable order.
    pub const ALL: [Kind; 3] = [Kind::Api, Kind::Cell, Kind::Placement];

    /// Lower-case name, as used in folder names and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Api => "api",
            Kind::Cell => "cell",
            Kind::Placement => "placement",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The database backend, decided by the URL's scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// `postgres://…` or `postgresql://…`
    Postgres,
    /// `sqlite:…` (`sqlite://path`, `sqlite:path`, `sqlite::memory:`)
    Sqlite,
}

impl Backend {
    /// Both backends, in a stable order.
    pub const ALL: [Backend; 2] = [Backend::Postgres, Backend::Sqlite];

    /// The backend a database URL names.
    pub fn from_url(url: &str) -> Result<Backend, Error> {
        let lower = url.get(..11).unwrap_or(url).to_ascii_lowercase();
        if lower.starts_with("postgres://") || lower.starts_with("postgresql:") {
            Ok(Backend::Postgres)
        } else if lower.starts_with("sqlite:") {
            Ok(Backend::Sqlite)
        } else {
            // Never echo the whole URL: it may carry a password.
            let scheme = url
                .split_once(':')
                .map(|(s, _)| s)
                .unwrap_or("")
                .chars()
                .take(32)
                .collect();
            Err(Error::UnsupportedUrl { scheme })
        }
    }

    /// Lower-case name, as used in folder names and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Postgres => "postgres",
            Backend::Sqlite => "sqlite",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of [`migrate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// Versions applied by this call, ascending (empty when already up to date).
    pub applied: Vec<i64>,
    /// Highest applied version afterwards.
    pub version: i64,
}

/// Everything that can go wrong here. Never carries a database URL (they may
/// hold passwords).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The URL's scheme names no supported backend.
    #[error(
        "unsupported database URL scheme {scheme:?}: expected postgres://, postgresql:// or sqlite:"
    )]
    UnsupportedUrl { scheme: String },
    /// The URL could not be parsed, or the database could not be reached.
    #[error("cannot connect to the {kind} database ({backend})")]
    Connect {
        kind: Kind,
        backend: Backend,
        #[source]
        source: sqlx::Error,
    },
    /// Applying a migration failed, or the database has a migration this
    /// binary does not know, or an applied migration was edited.
    #[error("migrating the {kind} database ({backend}) failed")]
    Migrate {
        kind: Kind,
        backend: Backend,
        #[source]
        source: MigrateError,
    },
    /// Reading the migration bookkeeping failed.
    #[error("reading the migration state of the {kind} database ({backend}) failed")]
    State {
        kind: Kind,
        backend: Backend,
        #[source]
        source: sqlx::Error,
    },
    /// The database of a PostgreSQL URL could not be created.
    #[error("cannot create the PostgreSQL database {name:?}: {detail}")]
    Create { name: String, detail: String },
}

/// The embedded migrator for one kind and backend (also usable with
/// `#[sqlx::test(migrator = …)]`).
pub fn migrator(kind: Kind, backend: Backend) -> &'static Migrator {
    match (kind, backend) {
        (Kind::Api, Backend::Postgres) => &API_POSTGRES,
        (Kind::Api, Backend::Sqlite) => &API_SQLITE,
        (Kind::Cell, Backend::Postgres) => &CELL_POSTGRES,
        (Kind::Cell, Backend::Sqlite) => &CELL_SQLITE,
        (Kind::Placement, Backend::Postgres) => &PLACEMENT_POSTGRES,
        (Kind::Placement, Backend::Sqlite) => &PLACEMENT_SQLITE,
    }
}

/// The highest migration version this binary knows for `kind` (the same on
/// both backends).
pub fn latest(kind: Kind) -> i64 {
    migrator(kind, Backend::Postgres)
        .iter()
        .map(|m| m.version)
        .max()
        .unwrap_or(0)
}

/// Brings the `kind` database at `url` up to date. A SQLite file is created
/// if missing; a PostgreSQL database must already exist.
///
/// Safe to run concurrently from several processes on either backend: every
/// migration is one transaction, so when two runs race, the loser's
/// transaction fails and rolls back (PostgreSQL holds an advisory lock, but
/// the bookkeeping table's creation can still race; SQLite runs hold a lock
/// file beside the database). The loser then
/// runs again, a bounded number of times, and finds the work done.
#[tracing::instrument(skip(url), fields(backend))]
pub async fn migrate(kind: Kind, url: &str) -> Result<Applied, Error> {
    const ATTEMPTS: u64 = 5;
    let mut attempt = 0;
    loop {
        attempt += 1;
        match migrate_once(kind, url).await {
            Err(Error::Migrate { .. }) if attempt < ATTEMPTS => {
                tracing::debug!(%kind, attempt, "migration raced with another run; trying again");
                tokio::time::sleep(std::time::Duration::from_millis(100 * attempt)).await;
            }
            other => return other,
        }
    }
}

async fn migrate_once(kind: Kind, url: &str) -> Result<Applied, Error> {
    let backend = Backend::from_url(url)?;
    tracing::Span::current().record("backend", backend.as_str());
    let connect = |source| Error::Connect {
        kind,
        backend,
        source,
    };
    match backend {
        Backend::Postgres => {
            let opts = pg_options(url).map_err(connect)?;
            let mut conn = opts.connect().await.map_err(connect)?;
            let applied = run(kind, backend, &mut conn).await;
            let _ = conn.close().await;
            applied
        }
        Backend::Sqlite => {
            let opts = SqliteConnectOptions::from_str(url)
                .map_err(connect)?
                .create_if_missing(true);
            sqlite_file::prepare(url, opts.get_filename(), true).map_err(|e| connect(e.into()))?;
            let _lock = sqlite_migration_lock(opts.get_filename()).await;
            let mut conn = opts.connect().await.map_err(connect)?;
            let applied = run(kind, backend, &mut conn).await;
            let _ = conn.close().await;
            applied
        }
    }
}

/// [`migrate`] on an existing PostgreSQL pool.
pub async fn migrate_pg(kind: Kind, pool: &PgPool) -> Result<Applied, Error> {
    let backend = Backend::Postgres;
    let mut conn = pool.acquire().await.map_err(|source| Error::Connect {
        kind,
        backend,
        source,
    })?;
    run(kind, backend, &mut *conn).await
}

/// [`migrate`] on an existing SQLite pool.
pub async fn migrate_sqlite(kind: Kind, pool: &SqlitePool) -> Result<Applied, Error> {
    let backend = Backend::Sqlite;
    let _lock = sqlite_migration_lock(pool.connect_options().get_filename()).await;
    let mut conn = pool.acquire().await.map_err(|source| Error::Connect {
        kind,
        backend,
        source,
    })?;
    run(kind, backend, &mut *conn).await
}

/// SQLite has no advisory lock, so the migrator's `lock` is a no-op there and
/// two runs racing on one fresh file could both list "nothing applied" before
/// either applies anything (the schema stays right — each migration is one
/// transaction and the loser retries — but both would report having applied
/// it). An exclusive lock on `<database>-migrate-lock`, beside the database
/// file, serialises runs across tasks and processes for the whole
/// list-apply-list. In-memory databases have one connection and need none;
/// when the lock file cannot be made (read-only directory) the run goes on
/// unlocked, as it did before.
async fn sqlite_migration_lock(db: &std::path::Path) -> Option<std::fs::File> {
    if !sqlite_file::is_file(db) {
        return None;
    }
    let name = db.to_str()?;
    let mut path = db.as_os_str().to_owned();
    path.push("-migrate-lock");
    let opened = tokio::task::spawn_blocking(move || {
        let file = sqlite_file::private_file()
            .create(true)
            .truncate(false)
            .open(&path)?;
        file.lock()?;
        Ok::<_, std::io::Error>(file)
    })
    .await;
    match opened {
        Ok(Ok(file)) => Some(file),
        Ok(Err(err)) => {
            tracing::debug!(%err, database = name, "no migration lock file; migrating unlocked");
            None
        }
        Err(_) => None,
    }
}

async fn run<C>(kind: Kind, backend: Backend, conn: &mut C) -> Result<Applied, Error>
where
    C: Migrate,
{
    let migrate_err = |source| Error::Migrate {
        kind,
        backend,
        source,
    };
    // Hold the migrator's lock (PostgreSQL: a session advisory lock, which
    // nests with the one `run_direct` takes; SQLite: none, the callers hold
    // `sqlite_migration_lock` instead) from before the "already applied"
    // listing to after the run, so that what this call reports as applied is
    // what it applied.
    conn.lock().await.map_err(migrate_err)?;
    let result = run_locked(kind, backend, conn).await;
    let _ = conn.unlock().await;
    result
}

async fn run_locked<C>(kind: Kind, backend: Backend, conn: &mut C) -> Result<Applied, Error>
where
    C: Migrate,
{
    let migrate_err = |source| Error::Migrate {
        kind,
        backend,
        source,
    };
    conn.ensure_migrations_table().await.map_err(migrate_err)?;
    let before: Vec<i64> = conn
        .list_applied_migrations()
        .await
        .map_err(migrate_err)?
        .iter()
        .map(|m| m.version)
        .collect();
    // `run_direct` is `run` without the `Acquire` indirection that makes this
    // function impossible to write generically (sqlx documents it as such).
    migrator(kind, backend)
        .run_direct(conn)
        .await
        .map_err(migrate_err)?;
    let after = conn.list_applied_migrations().await.map_err(migrate_err)?;
    let mut applied: Vec<i64> = after
        .iter()
        .map(|m| m.version)
        .filter(|v| !before.contains(v))
        .collect();
    applied.sort_unstable();
    let version = after.iter().map(|m| m.version).max().unwrap_or(0);
    if applied.is_empty() {
        tracing::debug!(%kind, %backend, version, "database schema already up to date");
    } else {
        tracing::info!(%kind, %backend, version, ?applied, "applied database migrations");
    }
    Ok(Applied { applied, version })
}

/// The highest successfully applied migration of the `kind` database at
/// `url`, or `None` when none has been applied. Never creates or changes
/// anything (a missing SQLite file is a [`Error::Connect`]).
pub async fn version(kind: Kind, url: &str) -> Result<Option<i64>, Error> {
    let backend = Backend::from_url(url)?;
    let connect = |source| Error::Connect {
        kind,
        backend,
        source,
    };
    let state = |source| Error::State {
        kind,
        backend,
        source,
    };
    match backend {
        Backend::Postgres => {
            let opts = pg_options(url).map_err(connect)?;
            let mut conn: PgConnection = opts.connect().await.map_err(connect)?;
            let exists: bool =
                sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
                    .fetch_one(&mut conn)
                    .await
                    .map_err(state)?;
            let v = if exists {
                sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations WHERE success")
                    .fetch_one(&mut conn)
                    .await
                    .map_err(state)?
            } else {
                None
            };
            let _ = conn.close().await;
            Ok(v)
        }
        Backend::Sqlite => {
            let opts = SqliteConnectOptions::from_str(url)
                .map_err(connect)?
                .create_if_missing(false)
                .read_only(true);
            let mut conn: SqliteConnection = opts.connect().await.map_err(connect)?;
            let exists: bool = sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations')",
            )
            .fetch_one(&mut conn)
            .await
            .map_err(state)?;
            let v = if exists {
                sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations WHERE success")
                    .fetch_one(&mut conn)
                    .await
                    .map_err(state)?
            } else {
                None
            };
            let _ = conn.close().await;
            Ok(v)
        }
    }
}

/// A named unique constraint (a unique index) of one of the schemas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UniqueConstraint {
    pub kind: Kind,
    pub name: &'static str,
    pub table: &'static str,
    pub columns: &'static [&'static str],
}

const fn uc(
    kind: Kind,
    name: &'static str,
    table: &'static str,
    columns: &'static [&'static str],
) -> UniqueConstraint {
    UniqueConstraint {
        kind,
        name,
        table,
        columns,
    }
}

/// Every unique constraint of every schema, identical on both backends
/// (a test checks this list against the migrated databases).
pub static UNIQUE_CONSTRAINTS: &[UniqueConstraint] = &[
    // API
    uc(
        Kind::Api,
        "uniq_cell_mappings0uuid",
        "cell_mappings",
        &["uuid"],
    ),
    uc(
        Kind::Api,
        "uniq_cell_mappings0name",
        "cell_mappings",
        &["name"],
    ),
    uc(
        Kind::Api,
        "uniq_cell_mappings0transport_url0database_connection",
        "cell_mappings",
        &["transport_url", "database_connection"],
    ),
    uc(
        Kind::Api,
        "uniq_host_mappings0host",
        "host_mappings",
        &["host"],
    ),
    uc(
        Kind::Api,
        "uniq_compute_node_ids0uuid",
        "compute_node_ids",
        &["uuid"],
    ),
    uc(Kind::Api, "uniq_service_ids0uuid", "service_ids", &["uuid"]),
    uc(
        Kind::Api,
        "uniq_instance_mappings0instance_uuid",
        "instance_mappings",
        &["instance_uuid"],
    ),
    uc(
        Kind::Api,
        "uniq_request_specs0instance_uuid",
        "request_specs",
        &["instance_uuid"],
    ),
    uc(
        Kind::Api,
        "uniq_build_requests0instance_uuid",
        "build_requests",
        &["instance_uuid"],
    ),
    uc(Kind::Api, "uniq_flavors0flavorid", "flavors", &["flavorid"]),
    uc(Kind::Api, "uniq_flavors0name", "flavors", &["name"]),
    uc(
        Kind::Api,
        "uniq_flavor_extra_specs0flavor_id0key",
        "flavor_extra_specs",
        &["flavor_id", "key"],
    ),
    uc(
        Kind::Api,
        "uniq_flavor_projects0flavor_id0project_id",
        "flavor_projects",
        &["flavor_id", "project_id"],
    ),
    uc(
        Kind::Api,
        "uniq_key_pairs0user_id0name",
        "key_pairs",
        &["user_id", "name"],
    ),
    uc(
        Kind::Api,
        "uniq_instance_groups0uuid",
        "instance_groups",
        &["uuid"],
    ),
    uc(
        Kind::Api,
        "uniq_instance_group_member0group_id0instance_uuid",
        "instance_group_member",
        &["group_id", "instance_uuid"],
    ),
    uc(Kind::Api, "uniq_aggregates0uuid", "aggregates", &["uuid"]),
    uc(Kind::Api, "uniq_aggregates0name", "aggregates", &["name"]),
    uc(
        Kind::Api,
        "uniq_aggregate_hosts0host0aggregate_id",
        "aggregate_hosts",
        &["host", "aggregate_id"],
    ),
    uc(
        Kind::Api,
        "uniq_aggregate_metadata0aggregate_id0key",
        "aggregate_metadata",
        &["aggregate_id", "key"],
    ),
    uc(
        Kind::Api,
        "uniq_quotas0project_id0resource",
        "quotas",
        &["project_id", "resource"],
    ),
    uc(
        Kind::Api,
        "uniq_quota_classes0class_name0resource",
        "quota_classes",
        &["class_name", "resource"],
    ),
    uc(
        Kind::Api,
        "uniq_project_user_quotas0user_id0project_id0resource",
        "project_user_quotas",
        &["user_id", "project_id", "resource"],
    ),
    // Cell
    uc(Kind::Cell, "uniq_instances0uuid", "instances", &["uuid"]),
    uc(
        Kind::Cell,
        "uniq_instance_actions0instance_uuid0request_id",
        "instance_actions",
        &["instance_uuid", "request_id"],
    ),
    uc(
        Kind::Cell,
        "uniq_instance_metadata0instance_uuid0key",
        "instance_metadata",
        &["instance_uuid", "key"],
    ),
    uc(
        Kind::Cell,
        "uniq_instance_system_metadata0instance_uuid0key",
        "instance_system_metadata",
        &["instance_uuid", "key"],
    ),
    uc(
        Kind::Cell,
        "uniq_instance_info_caches0instance_uuid",
        "instance_info_caches",
        &["instance_uuid"],
    ),
    uc(
        Kind::Cell,
        "uniq_instance_extra0instance_uuid",
        "instance_extra",
        &["instance_uuid"],
    ),
    uc(
        Kind::Cell,
        "uniq_tags0resource_id0tag",
        "tags",
        &["resource_id", "tag"],
    ),
    uc(
        Kind::Cell,
        "uniq_virtual_interfaces0uuid",
        "virtual_interfaces",
        &["uuid"],
    ),
    uc(
        Kind::Cell,
        "uniq_virtual_interfaces0address",
        "virtual_interfaces",
        &["address"],
    ),
    uc(
        Kind::Cell,
        "uniq_block_device_mapping0uuid",
        "block_device_mapping",
        &["uuid"],
    ),
    uc(Kind::Cell, "uniq_services0uuid", "services", &["uuid"]),
    // Partial: live (not deleted) rows only.
    uc(
        Kind::Cell,
        "uniq_services0host0binary",
        "services",
        &["host", "binary"],
    ),
    uc(
        Kind::Cell,
        "uniq_services0host0topic",
        "services",
        &["host", "topic"],
    ),
    uc(
        Kind::Cell,
        "uniq_compute_nodes0uuid",
        "compute_nodes",
        &["uuid"],
    ),
    // Partial: live (not deleted) rows only.
    uc(
        Kind::Cell,
        "uniq_compute_nodes0host0hypervisor_hostname",
        "compute_nodes",
        &["host", "hypervisor_hostname"],
    ),
    uc(Kind::Cell, "uniq_migrations0uuid", "migrations", &["uuid"]),
    // Placement
    uc(
        Kind::Placement,
        "uniq_resource_providers0uuid",
        "resource_providers",
        &["uuid"],
    ),
    uc(
        Kind::Placement,
        "uniq_resource_providers0name",
        "resource_providers",
        &["name"],
    ),
    uc(
        Kind::Placement,
        "uniq_resource_classes0name",
        "resource_classes",
        &["name"],
    ),
    uc(
        Kind::Placement,
        "uniq_inventories0resource_provider_resource_class",
        "inventories",
        &["resource_provider_id", "resource_class_id"],
    ),
    uc(
        Kind::Placement,
        "uniq_projects0external_id",
        "projects",
        &["external_id"],
    ),
    uc(
        Kind::Placement,
        "uniq_users0external_id",
        "users",
        &["external_id"],
    ),
    uc(
        Kind::Placement,
        "uniq_consumer_types0name",
        "consumer_types",
        &["name"],
    ),
    uc(
        Kind::Placement,
        "uniq_consumers0uuid",
        "consumers",
        &["uuid"],
    ),
    uc(
        Kind::Placement,
        "uniq_allocations0consumer0provider0class",
        "allocations",
        &["consumer_id", "resource_provider_id", "resource_class_id"],
    ),
    uc(Kind::Placement, "uniq_traits0name", "traits", &["name"]),
    uc(
        Kind::Placement,
        "uniq_resource_provider_traits0provider0trait",
        "resource_provider_traits",
        &["resource_provider_id", "trait_id"],
    ),
    uc(
        Kind::Placement,
        "uniq_placement_aggregates0uuid",
        "placement_aggregates",
        &["uuid"],
    ),
    uc(
        Kind::Placement,
        "uniq_resource_provider_aggregates0provider0aggregate",
        "resource_provider_aggregates",
        &["resource_provider_id", "aggregate_id"],
    ),
];

/// The unique constraints of one kind.
pub fn unique_constraints(kind: Kind) -> impl Iterator<Item = &'static UniqueConstraint> {
    UNIQUE_CONSTRAINTS.iter().filter(move |c| c.kind == kind)
}

/// If `err` is a unique-constraint violation of one of these schemas, the
/// name of that constraint (e.g. `uniq_host_mappings0host`), on both
/// backends: PostgreSQL reports the name, SQLite only
/// `UNIQUE constraint failed: host_mappings.host`, which is looked up in
/// [`UNIQUE_CONSTRAINTS`].
pub fn unique_violation(err: &sqlx::Error) -> Option<&'static str> {
    let db = err.as_database_error()?;
    if db.kind() != sqlx::error::ErrorKind::UniqueViolation {
        return None;
    }
    if let Some(name) = db.constraint() {
        return UNIQUE_CONSTRAINTS
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.name);
    }
    let cols = db.message().strip_prefix("UNIQUE constraint failed: ")?;
    let mut table = None;
    let mut columns = Vec::new();
    for qualified in cols.split(", ") {
        let (t, c) = qualified.trim().split_once('.')?;
        if *table.get_or_insert(t) != t {
            return None;
        }
        columns.push(c);
    }
    let table = table?;
    UNIQUE_CONSTRAINTS
        .iter()
        .find(|c| c.table == table && c.columns == columns.as_slice())
        .map(|c| c.name)
}

/// Begins a transaction that will write.
///
/// On SQLite a plain `BEGIN` is deferred: a transaction that reads and then
/// writes must upgrade its lock, and when another connection (another pool,
/// another process) wrote in between, SQLite answers "database is locked" at
/// once — the busy timeout does not cover a lock upgrade. `BEGIN IMMEDIATE`
/// takes the write lock up front, so writers queue behind each other (up to
/// the busy timeout) instead of failing. On PostgreSQL it is a plain `BEGIN`.
pub trait BeginWrite {
    /// The backend.
    type Db: sqlx::Database;
    /// A transaction that holds the right to write from its first statement.
    fn begin_write(
        &self,
    ) -> impl std::future::Future<Output = Result<sqlx::Transaction<'static, Self::Db>, sqlx::Error>>
           + Send;
}

impl BeginWrite for SqlitePool {
    type Db = sqlx::Sqlite;
    fn begin_write(
        &self,
    ) -> impl std::future::Future<
        Output = Result<sqlx::Transaction<'static, sqlx::Sqlite>, sqlx::Error>,
    > + Send {
        self.begin_with("BEGIN IMMEDIATE")
    }
}

impl BeginWrite for PgPool {
    type Db = sqlx::Postgres;
    fn begin_write(
        &self,
    ) -> impl std::future::Future<
        Output = Result<sqlx::Transaction<'static, sqlx::Postgres>, sqlx::Error>,
    > + Send {
        self.begin()
    }
}

/// A pooled PostgreSQL connection idle for at least this long is pinged
/// before it is handed out.
pub const PG_PING_AFTER_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

/// The pool options every PostgreSQL pool of the region uses:
/// `max_connections`, 10 s to acquire a connection, and a connection that
/// sat idle for [`PG_PING_AFTER_IDLE`] or more pinged before it is handed
/// out (a dead one is closed and another taken). sqlx's default pings on
/// every checkout: a round trip to the server before each statement,
/// which under load is about a seventh of the region's CPU time; a
/// connection in use a moment ago is known to be alive (and if the server
/// went away meanwhile, the statement fails as it would a moment later).
pub fn pg_pool_options(max_connections: u32) -> sqlx::postgres::PgPoolOptions {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(max_connections.max(1))
        .acquire_timeout(std::time::Duration::from_secs(10))
        // No statement waits for a lock without end: a lock a lost
        // session holds turns into an error after this, not a hang.
        .after_connect(|conn, _| {
            Box::pin(async move {
                for setting in PG_SESSION_SETTINGS {
                    sqlx::Executor::execute(&mut *conn, *setting).await?;
                }
                Ok(())
            })
        })
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= PG_PING_AFTER_IDLE {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
}

/// Set on every PostgreSQL connection of a pool: a lock wait longer than
/// 30 s fails (SQLSTATE 55P03) instead of waiting for ever, and no
/// statement runs longer than 60 s (SQLSTATE 57014): a query gone wrong
/// (a plan that scans without end, a client that left) frees its
/// connection and its locks. Migrations run on their own connections,
/// without these.
pub const PG_SESSION_SETTINGS: &[&str] =
    &["SET lock_timeout = '30s'", "SET statement_timeout = '60s'"];

/// Opens a PostgreSQL pool the way every service of the region does
/// ([`pg_pool_options`]).
pub async fn open_pg(url: &str, max_connections: u32) -> Result<PgPool, sqlx::Error> {
    pg_pool_options(max_connections)
        .connect_with(pg_options(url)?)
        .await
}

/// Opens a SQLite pool the way every service of the region does: the file
/// is created if missing, private ([`sqlite_file::prepare`]), WAL journal, foreign keys on, a 30 s busy timeout,
/// and one connection (SQLite has one writer anyway; with one connection a
/// process never contends with itself).
pub async fn open_sqlite(url: &str) -> Result<SqlitePool, sqlx::Error> {
    let opts = SqliteConnectOptions::from_str(url)?;
    sqlite_file::prepare(url, opts.get_filename(), true)?;
    let opts = opts
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .foreign_keys(true)
        .busy_timeout(std::time::Duration::from_secs(30));
    sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .acquire_timeout(std::time::Duration::from_secs(30))
        .connect_with(opts)
        .await
}

/// Creates the database a PostgreSQL URL names, if it does not exist yet,
/// by connecting to the same server's `postgres` maintenance database; a
/// no-op for SQLite (files are created on first open). Safe to run
/// concurrently: losing the race to another creator is success.
pub async fn ensure_database(url: &str) -> Result<(), Error> {
    if Backend::from_url(url)? != Backend::Postgres {
        return Ok(());
    }
    let create = |name: &str, detail: String| Error::Create {
        name: name.to_owned(),
        detail,
    };
    let opts = pg_options(url).map_err(|e| create("?", e.to_string()))?;
    let Some(name) = opts.get_database().map(str::to_owned) else {
        return Err(create("", "the URL names no database".into()));
    };
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(create(&name, "use letters, digits and '_' only".into()));
    }
    let mut conn = opts
        .clone()
        .database("postgres")
        .connect()
        .await
        .map_err(|e| create(&name, e.to_string()))?;
    let exists: Option<i32> = sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = $1")
        .bind(&name)
        .fetch_optional(&mut conn)
        .await
        .map_err(|e| create(&name, e.to_string()))?;
    if exists.is_none() {
        if let Err(e) = sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
        {
            // 42P04 duplicate_database; 23505 when two creators race on the catalog.
            let code = e
                .as_database_error()
                .and_then(|d| d.code())
                .map(|c| c.into_owned());
            if !matches!(code.as_deref(), Some("42P04") | Some("23505")) {
                return Err(create(&name, e.to_string()));
            }
        }
    }
    conn.close().await.ok();
    Ok(())
}
