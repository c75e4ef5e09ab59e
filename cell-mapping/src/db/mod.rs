//! Database access. ALL the SQL of this crate lives below: [`api`] holds
//! every statement on the API database's `cell_mappings`, `host_mappings`
//! and `instance_mappings`; [`cell`] holds the few reads and writes on a cell
//! database that discovery, instance mapping and cell/host deletion need;
//! [`instances`] the statements on a cell database the API layer needs
//! (instance create/read/list, scheduler host reads); [`server_actions`] the
//! API layer's server actions (task state with the `instance_actions` row,
//! lock), the instance-actions reads, server metadata and tags; [`services`]
//! the operator APIs' statements on a cell's services and compute nodes;
//! [`aggregates`] and [`server_groups`] those on the API database's
//! aggregates, server groups and flavor extra specs; [`legacy_ids`] the
//! region-wide integer ids of compute nodes and services (below 2.53).
//!
//! One [`Pool`] enum (PostgreSQL or SQLite) and plain `query`/`query_as`
//! with `$N` binds, which both backends accept; the [`with_pool!`] macro
//! expands one statement for both pool types, so each statement is written
//! once. Timestamps are bound from Rust (`chrono::Utc::now()`), so
//! `updated_at` has sub-second precision on both backends (the cache's
//! change marker relies on it).

pub mod aggregates;
pub mod api;
pub mod build_casts;
pub mod cell;
pub mod instance_create;
pub mod instances;
pub mod legacy_ids;
pub mod server_actions;
pub mod server_groups;
pub mod services;

use std::str::FromStr;
use std::time::Duration;

use migrations::Backend;
use sqlx::postgres::PgConnectOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool, SqlitePool};

use crate::url::{mask, validate_database_url};
use crate::Error;

/// A connection pool on either backend.
#[derive(Debug, Clone)]
pub enum Pool {
    /// PostgreSQL.
    Postgres(PgPool),
    /// SQLite.
    Sqlite(SqlitePool),
}

/// Expands `$body` once per backend with `$p` bound to the concrete pool.
macro_rules! with_pool {
    ($pool:expr, $p:ident => $body:expr) => {
        match $pool {
            $crate::db::Pool::Postgres($p) => $body,
            $crate::db::Pool::Sqlite($p) => $body,
        }
    };
}
pub(crate) use with_pool;

/// `$start, $start+1, …` (n placeholders), for `IN (…)` lists.
pub(crate) fn placeholders(start: usize, n: usize) -> String {
    (start..start + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Largest number of values bound in one statement's `IN`/`VALUES` list.
pub(crate) const CHUNK: usize = 200;

/// Quota locks on the API database (`quota_locks`, migration 0003): a
/// write transaction that counts a usage and then writes within the limit
/// first makes sure the row of its scope (`project:<id>`, `user:<id>`)
/// exists with this statement, then locks it with [`quota_lock_sql`], so
/// concurrent requests of one scope count and write one after the other.
/// Used by the Compute API's server create and key pair create and by
/// [`ApiDb::server_group_create`].
pub const QUOTA_LOCK_INSERT: &str =
    "INSERT INTO quota_locks (scope) VALUES ($1) ON CONFLICT (scope) DO NOTHING";

/// The quota-lock statement (see [`QUOTA_LOCK_INSERT`]): a row lock on
/// PostgreSQL; on SQLite the write transaction (`BEGIN IMMEDIATE`) already
/// serializes writers and a plain read is enough.
pub fn quota_lock_sql(pg: bool) -> &'static str {
    if pg {
        "SELECT scope FROM quota_locks WHERE scope = $1 FOR UPDATE"
    } else {
        "SELECT scope FROM quota_locks WHERE scope = $1"
    }
}

impl Pool {
    /// Opens a pool on `url`. `role` names the database in errors ("API",
    /// "cell1", …). The first connection is made eagerly, so an unreachable
    /// database is reported here.
    pub async fn connect(role: &'static str, url: &str) -> Result<Pool, Error> {
        let backend = validate_database_url(url)?;
        let connect = |source| Error::Connect {
            role,
            url: mask(url),
            source,
        };
        Ok(match backend {
            Backend::Postgres => {
                let opts = migrations::pg_options(url).map_err(connect)?;
                // One direct attempt first: its error names the cause
                // (refused, unknown database, auth), where a pool would
                // retry until its timeout and report only that.
                probe_pg(&opts, Duration::from_secs(10))
                    .await
                    .map_err(connect)?;
                let pool = migrations::pg_pool_options(4).connect_lazy_with(opts);
                Pool::Postgres(pool)
            }
            Backend::Sqlite => {
                let opts = SqliteConnectOptions::from_str(url).map_err(connect)?;
                // SQLite creates a missing file only for `mode=rwc`.
                let create = migrations::sqlite_file::url_creates(url);
                migrations::sqlite_file::prepare(url, opts.get_filename(), create)
                    .map_err(|e| connect(e.into()))?;
                let opts = opts.busy_timeout(Duration::from_secs(30));
                let pool = SqlitePoolOptions::new()
                    .max_connections(4)
                    .acquire_timeout(Duration::from_secs(30))
                    .connect_with(opts)
                    .await
                    .map_err(connect)?;
                Pool::Sqlite(pool)
            }
        })
    }

    /// Closes every connection.
    pub async fn close(&self) {
        with_pool!(self, p => p.close().await)
    }
}

/// One direct connection attempt to the database at `url`, closed at once,
/// given at most `timeout`: whether the database answers now. Unlike a
/// pool's acquire, which retries a refused connection until its own
/// timeout (the server "may be starting"), a refused or failed attempt
/// fails at once, so a caller can tell a database that is down from one
/// that is busy. `role` names the database in errors.
pub async fn probe(role: &'static str, url: &str, timeout: Duration) -> Result<(), Error> {
    let backend = validate_database_url(url)?;
    let connect = |source| Error::Connect {
        role,
        url: mask(url),
        source,
    };
    match backend {
        Backend::Postgres => {
            let opts = migrations::pg_options(url).map_err(connect)?;
            probe_pg(&opts, timeout).await.map_err(connect)
        }
        Backend::Sqlite => {
            let opts = SqliteConnectOptions::from_str(url).map_err(connect)?;
            let c = tokio::time::timeout(timeout, opts.connect())
                .await
                .map_err(|_| connect(sqlx::Error::PoolTimedOut))?
                .map_err(connect)?;
            let _ = c.close().await;
            Ok(())
        }
    }
}

/// One PostgreSQL connection made and closed within `timeout`.
async fn probe_pg(opts: &PgConnectOptions, timeout: Duration) -> Result<(), sqlx::Error> {
    let c = tokio::time::timeout(timeout, opts.connect())
        .await
        .map_err(|_| sqlx::Error::PoolTimedOut)??;
    let _ = c.close().await;
    Ok(())
}

/// The API database.
#[derive(Debug, Clone)]
pub struct ApiDb {
    pool: Pool,
    url: String,
}

impl ApiDb {
    /// Opens the API database at `url`; fails with [`Error::ApiNotMigrated`]
    /// when it has no schema yet.
    pub async fn open(url: &str) -> Result<ApiDb, Error> {
        let pool = Pool::connect("API", url).await?;
        let db = ApiDb {
            pool,
            url: url.to_owned(),
        };
        if !db.has_schema().await? {
            db.pool.close().await;
            return Err(Error::ApiNotMigrated { url: mask(url) });
        }
        Ok(db)
    }

    /// The pool.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The URL (with its password: never print it, use [`mask`]).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Closes the pool.
    pub async fn close(&self) {
        self.pool.close().await
    }
}

/// One cell's database, opened for a short task.
#[derive(Debug, Clone)]
pub struct CellDb {
    pool: Pool,
}

impl CellDb {
    /// Opens the cell database at `url`.
    pub async fn open(url: &str) -> Result<CellDb, Error> {
        Ok(CellDb {
            pool: Pool::connect("cell", url).await?,
        })
    }

    /// The pool.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Closes the pool.
    pub async fn close(&self) {
        self.pool.close().await
    }
}

pub use aggregates::{Aggregate, AggregateRefused};
pub use api::{CellMapping, HostMapping, InstanceMappingState, InstanceRow};
pub use instance_create::{NewCellInstance, NewFault};
pub use instances::{
    CellFault, CellInstance, ComputeHost, InstanceEdit, InstanceFlavor, ListFilter, ListOrder,
    SortKey, SortValue,
};
pub use legacy_ids::LegacyKind;
pub use server_groups::{NewServerGroup, ServerGroup};
pub use services::{HypervisorRecord, ServiceDeleted, ServiceRecord, ServiceSwitches};
