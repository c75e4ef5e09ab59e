//! ALL the SQL of the cell conductor: one module per table group
//! ([`services`], [`compute_nodes`], [`instances`], [`actions`]).
//!
//! [`CellDb`] holds the pool of either backend; [`on_db!`] writes each
//! statement once and compiles it for both (plain `query`/`query_as` with
//! `$N` binds, which both accept; timestamps bound from Rust). Every
//! statement runs through [`crate::metrics::measured`] under a name.
//!
//! Changes that must hold together (an instance update and its action
//! events; ERROR and its fault) are one transaction. Task-state changes are
//! compare-and-set on the value read (`WHERE COALESCE(task_state, '') =
//! $seen`), so concurrent writers on PostgreSQL never overwrite each other
//! unseen, without `SELECT … FOR UPDATE` (which SQLite lacks).

pub mod actions;
pub mod builds;
pub mod compute_nodes;
pub mod instances;
pub mod services;

use migrations::{Backend, Kind};
use sqlx::SqlitePool;

use crate::error::{ConductorError, Result};

/// A cell database, on either backend.
#[derive(Debug, Clone)]
pub enum CellDb {
    /// PostgreSQL.
    Pg(std::sync::Arc<migrations::PgStash>),
    /// SQLite (one writer connection).
    Sqlite(SqlitePool),
}

/// Runs `$body` with `$pool` bound to the backend's pool; the body is
/// compiled once per backend.
macro_rules! on_db {
    ($db:expr, $pool:ident => $body:expr) => {
        match $db {
            $crate::db::CellDb::Pg(stash) => {
                let $pool = stash.pool();
                $body
            }
            $crate::db::CellDb::Sqlite($pool) => $body,
        }
    };
}
pub(crate) use on_db;

impl CellDb {
    /// Brings the cell database at `url` up to date and opens a pool on it
    /// (`max_connections` applies to PostgreSQL; SQLite gets one).
    pub async fn open(url: &str, max_connections: u32) -> Result<CellDb> {
        migrations::migrate(Kind::Cell, url)
            .await
            .map_err(ConductorError::Open)?;
        Self::connect(url, max_connections).await
    }

    /// Opens a pool without migrating (the schema must be there).
    pub async fn connect(url: &str, max_connections: u32) -> Result<CellDb> {
        let open = crate::error::db("open");
        match Backend::from_url(url).map_err(ConductorError::Open)? {
            Backend::Postgres => Ok(CellDb::Pg(std::sync::Arc::new(migrations::PgStash::new(
                migrations::open_pg(url, max_connections)
                    .await
                    .map_err(open)?,
            )))),
            Backend::Sqlite => Ok(CellDb::Sqlite(
                migrations::open_sqlite(url).await.map_err(open)?,
            )),
        }
    }

    /// Which backend this is.
    pub fn backend(&self) -> Backend {
        match self {
            CellDb::Pg(_) => Backend::Postgres,
            CellDb::Sqlite(_) => Backend::Sqlite,
        }
    }

    /// Closes every connection.
    pub async fn close(&self) {
        match self {
            CellDb::Pg(stash) => stash.close().await,
            CellDb::Sqlite(p) => p.close().await,
        }
    }
}

/// The current time, as stored in timestamps.
pub(crate) fn now() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
}

/// Cuts `s` to at most `n` characters (VARCHAR(255) columns).
pub(crate) fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}
