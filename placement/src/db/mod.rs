//! All SQL of the placement database. One enum holds the pool of either
//! backend; [`on_db!`] writes each query once and compiles it for both
//! (sqlx's builders are generic, the SQL is portable: `$n` placeholders,
//! `ON CONFLICT`, `RETURNING`).
//!
//! A write that spans several concerns (the reshaper: inventories, then
//! allocations, then inventories again) runs the same inner functions on one
//! open [`Tx`]; [`on_tx!`] compiles a body once per backend on it, as
//! [`on_db!`] does on the pool.
//!
//! Writes are transactions. Every change to a provider compares and bumps its
//! generation (`UPDATE … WHERE generation = $seen`), so concurrent writers —
//! in this process or in another placement process on the same PostgreSQL
//! database — can never both win: the loser sees zero rows updated and
//! answers 409 `placement.concurrent_update`.

pub mod allocations;
pub mod classes;
pub mod inventories;
pub mod providers;
pub mod reshaper;
pub mod traits;

use chrono::{DateTime, Utc};
use migrations::{Backend, Kind};
use sqlx::SqlitePool;

use crate::error::{PlacementError, Result};

/// The placement database, on either backend.
#[derive(Debug, Clone)]
pub enum Db {
    /// PostgreSQL (production; many placement processes may share it),
    /// with connections kept ready for the one-statement claim.
    Pg(std::sync::Arc<migrations::PgStash>),
    /// SQLite (embedded default; one process, one writer connection).
    Sqlite(SqlitePool),
}

/// Runs `$body` with `$pool` bound to the backend's pool; the body is
/// compiled once per backend.
macro_rules! on_db {
    ($db:expr, $pool:ident => $body:expr) => {
        match $db {
            $crate::db::Db::Pg(stash) => {
                let $pool = stash.pool();
                $body
            }
            $crate::db::Db::Sqlite($pool) => $body,
        }
    };
}
pub(crate) use on_db;

/// An open transaction on either backend. Dropped without [`Tx::commit`],
/// it rolls back.
pub enum Tx {
    /// On PostgreSQL.
    Pg(sqlx::Transaction<'static, sqlx::Postgres>),
    /// On SQLite.
    Sqlite(sqlx::Transaction<'static, sqlx::Sqlite>),
}

impl Tx {
    /// Commits the transaction.
    pub async fn commit(self) -> std::result::Result<(), sqlx::Error> {
        match self {
            Tx::Pg(t) => t.commit().await,
            Tx::Sqlite(t) => t.commit().await,
        }
    }
}

/// Runs `$body` with `$conn` bound to the connection of the open
/// transaction `$tx` (a `&mut Tx`); the body is compiled once per backend.
macro_rules! on_tx {
    ($tx:expr, $conn:ident => $body:expr) => {
        match $tx {
            $crate::db::Tx::Pg(t) => {
                let $conn: &mut sqlx::PgConnection = &mut **t;
                $body
            }
            $crate::db::Tx::Sqlite(t) => {
                let $conn: &mut sqlx::SqliteConnection = &mut **t;
                $body
            }
        }
    };
}
pub(crate) use on_tx;

impl Db {
    /// Brings the database at `url` up to date and opens a pool on it.
    pub async fn open(url: &str, max_connections: u32) -> Result<Db> {
        migrations::migrate(Kind::Placement, url)
            .await
            .map_err(PlacementError::Migrate)?;
        match Backend::from_url(url).map_err(PlacementError::Migrate)? {
            Backend::Postgres => Ok(Db::Pg(std::sync::Arc::new(migrations::PgStash::new(
                migrations::open_pg(url, max_connections).await?,
            )))),
            Backend::Sqlite => Ok(Db::Sqlite(migrations::open_sqlite(url).await?)),
        }
    }

    /// Opens a transaction.
    pub async fn begin(&self) -> std::result::Result<Tx, sqlx::Error> {
        Ok(match self {
            Db::Pg(p) => Tx::Pg(p.pool().begin().await?),
            Db::Sqlite(p) => Tx::Sqlite(p.begin().await?),
        })
    }

    /// Which backend this is.
    pub fn backend(&self) -> Backend {
        match self {
            Db::Pg(_) => Backend::Postgres,
            Db::Sqlite(_) => Backend::Sqlite,
        }
    }
}

/// The current time, as stored in `created_at` / `updated_at`.
pub fn now() -> DateTime<Utc> {
    Utc::now()
}

/// `$first, $first+1, …` placeholders for an `IN (…)` list of `n` values.
///
/// With `n == 0` it is `NULL`: `x IN (NULL)` matches no row on both
/// backends, while an empty `IN ()`, which SQLite accepts (matching
/// nothing), is a syntax error on PostgreSQL. Callers that can skip the
/// query for an empty list should; this keeps one that cannot correct.
pub fn placeholders(first: usize, n: usize) -> String {
    if n == 0 {
        return "NULL".to_owned();
    }
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Bumps a provider's generation if it is still `seen`; a stale generation
/// is a 409 `placement.concurrent_update`.
macro_rules! bump_generation {
    ($tx:expr, $provider_id:expr, $seen:expr, $uuid:expr) => {{
        let res = sqlx::query(
            "UPDATE resource_providers SET generation = generation + 1, updated_at = $1 \
             WHERE id = $2 AND generation = $3",
        )
        .bind($crate::db::now())
        .bind($provider_id)
        .bind($seen)
        .execute(&mut *$tx)
        .await?;
        if res.rows_affected() != 1 {
            return Err($crate::error::PlacementError::generation_conflict(format!(
                "resource provider generation conflict: resource provider {} was changed by another request. \
                 Resource provider's generation already changed. Please update the generation and try again.",
                $uuid
            )));
        }
        $seen + 1
    }};
}
pub(crate) use bump_generation;
