//! Console auth tokens in the API database (Nova's
//! `console_auth_tokens`), the store of
//! [`crate::services::console::ConsoleTokens`]: any API process's proxy
//! takes a token any API process minted. A part of [`super`].

use super::*;

/// A console token's row (the token itself is never stored, only its
/// SHA-256).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ConsoleTokenRow {
    /// `serial` or `novnc`.
    pub console_type: String,
    /// The instance.
    pub instance_uuid: String,
    /// Its compute host (service host name).
    pub host: String,
    /// Where the console listens on that host.
    pub address: String,
    /// Its port.
    pub port: i32,
}

impl ComputeDb {
    /// Records a token by its hash, valid until `expires` (Unix seconds),
    /// unless `max` live tokens exist already (false then); expired rows
    /// are removed first, in the same transaction. Concurrent mints may
    /// pass `max` by as many as run at once: a bound on growth, not a
    /// quota.
    pub async fn console_token_insert(
        &self,
        hash: &str,
        row: &ConsoleTokenRow,
        now: i64,
        expires: i64,
        max: i64,
    ) -> Result<bool, ApiError> {
        on_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            sqlx::query("DELETE FROM console_auth_tokens WHERE expires <= $1")
                .bind(now).execute(&mut *tx).await.map_err(db("console_token_expire"))?;
            let live: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM console_auth_tokens")
                .fetch_one(&mut *tx).await.map_err(db("console_token_count"))?;
            if live >= max {
                return Ok(false);
            }
            sqlx::query(
                "INSERT INTO console_auth_tokens (token_hash, console_type, instance_uuid, host, \
                 address, port, expires) VALUES ($1, $2, $3, $4, $5, $6, $7)")
                .bind(hash).bind(&row.console_type).bind(&row.instance_uuid).bind(&row.host)
                .bind(&row.address).bind(row.port).bind(expires)
                .execute(&mut *tx).await.map_err(db("console_token_insert"))?;
            tx.commit().await.map_err(db("commit"))?;
        });
        Ok(true)
    }

    /// The token whose hash is `hash`, while valid at `now`.
    pub async fn console_token(
        &self,
        hash: &str,
        now: i64,
    ) -> Result<Option<ConsoleTokenRow>, ApiError> {
        Ok(on_pool!(self.pool(), p => sqlx::query_as(
            "SELECT console_type, instance_uuid, host, address, port FROM console_auth_tokens \
             WHERE token_hash = $1 AND expires > $2")
            .bind(hash).bind(now).fetch_optional(p).await.map_err(db("console_token_get"))?))
    }

    /// Removes the tokens of `instance` (its delete: a port its console
    /// used may soon be another guest's); how many.
    pub async fn console_tokens_delete(&self, instance: &str) -> Result<u64, ApiError> {
        Ok(on_pool!(self.pool(), p => sqlx::query(
            "DELETE FROM console_auth_tokens WHERE instance_uuid = $1")
            .bind(instance).execute(p).await.map_err(db("console_tokens_delete"))?
            .rows_affected()))
    }
}
