//! The SQL of unified limits (Keystone's `/v3/registered_limits` and
//! `/v3/limits`): a default per service, region and resource, and
//! overrides per project. Part of the identity store ([`Db`]); created at
//! start like the other identity tables.

use super::db::{on_db, Db};
use super::error::{IdentityError, Result};

/// The limit tables (portable DDL).
pub const SCHEMA: &[&str] = &[
    // A region is part of the key; '' stands for none, so the uniqueness
    // holds on both backends (NULLs are never equal in a UNIQUE).
    "CREATE TABLE IF NOT EXISTS identity_registered_limits (
        id TEXT PRIMARY KEY,
        service_id TEXT NOT NULL,
        region_id TEXT NOT NULL DEFAULT '',
        resource_name TEXT NOT NULL,
        default_limit BIGINT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        created_at BIGINT NOT NULL,
        CONSTRAINT uniq_identity_registered_limits UNIQUE (service_id, region_id, resource_name)
    )",
    "CREATE TABLE IF NOT EXISTS identity_limits (
        id TEXT PRIMARY KEY,
        project_id TEXT NOT NULL REFERENCES identity_projects (id) ON DELETE CASCADE,
        service_id TEXT NOT NULL,
        region_id TEXT NOT NULL DEFAULT '',
        resource_name TEXT NOT NULL,
        resource_limit BIGINT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        created_at BIGINT NOT NULL,
        CONSTRAINT uniq_identity_limits UNIQUE (project_id, service_id, region_id, resource_name)
    )",
];

/// A registered limit (the default for every project).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct RegisteredLimitRow {
    /// Id.
    pub id: String,
    /// The service it limits (a catalog service id).
    pub service_id: String,
    /// The region, or `''` for every region.
    pub region_id: String,
    /// What is limited (`image_count_total`, …).
    pub resource_name: String,
    /// The limit, -1 for none.
    pub default_limit: i64,
    /// Free text.
    pub description: String,
}

/// A project's limit (overrides the registered one).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct LimitRow {
    /// Id.
    pub id: String,
    /// The project.
    pub project_id: String,
    /// The service it limits.
    pub service_id: String,
    /// The region, or `''`.
    pub region_id: String,
    /// What is limited.
    pub resource_name: String,
    /// The limit, -1 for none.
    pub resource_limit: i64,
    /// Free text.
    pub description: String,
}

/// Filters of a list of limits (`None`: any).
#[derive(Debug, Clone, Default)]
pub struct LimitFilter {
    /// Service id.
    pub service_id: Option<String>,
    /// Region id (`''`: none).
    pub region_id: Option<String>,
    /// Resource name.
    pub resource_name: Option<String>,
    /// Project id (limits only).
    pub project_id: Option<String>,
}

impl LimitFilter {
    /// Every limit of one service, region and resource (any project).
    pub fn key(service_id: &str, region_id: &str, resource_name: &str) -> Self {
        Self {
            service_id: Some(service_id.to_owned()),
            region_id: Some(region_id.to_owned()),
            resource_name: Some(resource_name.to_owned()),
            project_id: None,
        }
    }
}

fn conflict(e: sqlx::Error, what: &str) -> IdentityError {
    match &e {
        sqlx::Error::Database(d) if d.is_unique_violation() => IdentityError::Conflict(format!(
            "Duplicate entry found with resource_name, service_id and region_id for {what}"
        )),
        sqlx::Error::Database(d) if d.is_foreign_key_violation() => {
            IdentityError::BadRequest("The project does not exist.".to_owned())
        }
        _ => IdentityError::Db(e),
    }
}

const REGISTERED: &str =
    "SELECT id, service_id, region_id, resource_name, default_limit, description \
     FROM identity_registered_limits";
const LIMITS: &str =
    "SELECT id, project_id, service_id, region_id, resource_name, resource_limit, description \
     FROM identity_limits";
const FILTER: &str = " WHERE ($1 IS NULL OR service_id = $1) AND ($2 IS NULL OR region_id = $2) \
     AND ($3 IS NULL OR resource_name = $3)";

impl Db {
    /// Creates registered limits, all or none.
    pub async fn create_registered_limits(&self, rows: &[RegisteredLimitRow]) -> Result<()> {
        let now = fabric::token::now_ms();
        on_db!(self, pool => {
            let mut tx = pool.begin().await?;
            for r in rows {
                sqlx::query(
                    "INSERT INTO identity_registered_limits (id, service_id, region_id, resource_name, \
                     default_limit, description, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)")
                    .bind(&r.id).bind(&r.service_id).bind(&r.region_id).bind(&r.resource_name)
                    .bind(r.default_limit).bind(&r.description).bind(now)
                    .execute(&mut *tx).await.map_err(|e| conflict(e, "registered limit"))?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// Registered limits, filtered.
    pub async fn registered_limits(&self, f: &LimitFilter) -> Result<Vec<RegisteredLimitRow>> {
        let sql = format!("{REGISTERED}{FILTER} ORDER BY service_id, region_id, resource_name");
        Ok(
            on_db!(self, pool => sqlx::query_as::<_, RegisteredLimitRow>(&sql)
            .bind(&f.service_id).bind(&f.region_id).bind(&f.resource_name)
            .fetch_all(pool).await)?,
        )
    }

    /// A registered limit by id.
    pub async fn registered_limit(&self, id: &str) -> Result<Option<RegisteredLimitRow>> {
        let sql = format!("{REGISTERED} WHERE id = $1");
        Ok(
            on_db!(self, pool => sqlx::query_as::<_, RegisteredLimitRow>(&sql)
            .bind(id).fetch_optional(pool).await)?,
        )
    }

    /// Writes a registered limit; whether it existed.
    pub async fn update_registered_limit(&self, r: &RegisteredLimitRow) -> Result<bool> {
        let n = on_db!(self, pool => sqlx::query(
            "UPDATE identity_registered_limits SET service_id = $2, region_id = $3, \
             resource_name = $4, default_limit = $5, description = $6 WHERE id = $1")
            .bind(&r.id).bind(&r.service_id).bind(&r.region_id).bind(&r.resource_name)
            .bind(r.default_limit).bind(&r.description)
            .execute(pool).await.map(|r| r.rows_affected()))
        .map_err(|e| conflict(e, "registered limit"))?;
        Ok(n == 1)
    }

    /// Deletes a registered limit; whether it existed.
    pub async fn delete_registered_limit(&self, id: &str) -> Result<bool> {
        let n = on_db!(self, pool => sqlx::query("DELETE FROM identity_registered_limits WHERE id = $1")
            .bind(id).execute(pool).await.map(|r| r.rows_affected()))?;
        Ok(n == 1)
    }

    /// Creates project limits, all or none.
    pub async fn create_limits(&self, rows: &[LimitRow]) -> Result<()> {
        let now = fabric::token::now_ms();
        on_db!(self, pool => {
            let mut tx = pool.begin().await?;
            for r in rows {
                sqlx::query(
                    "INSERT INTO identity_limits (id, project_id, service_id, region_id, resource_name, \
                     resource_limit, description, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)")
                    .bind(&r.id).bind(&r.project_id).bind(&r.service_id).bind(&r.region_id)
                    .bind(&r.resource_name).bind(r.resource_limit).bind(&r.description).bind(now)
                    .execute(&mut *tx).await.map_err(|e| conflict(e, "project limit"))?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// Project limits, filtered.
    pub async fn limits(&self, f: &LimitFilter) -> Result<Vec<LimitRow>> {
        let sql = format!(
            "{LIMITS}{FILTER} AND ($4 IS NULL OR project_id = $4) \
             ORDER BY project_id, service_id, region_id, resource_name"
        );
        Ok(on_db!(self, pool => sqlx::query_as::<_, LimitRow>(&sql)
            .bind(&f.service_id).bind(&f.region_id).bind(&f.resource_name).bind(&f.project_id)
            .fetch_all(pool).await)?)
    }

    /// A project limit by id.
    pub async fn limit(&self, id: &str) -> Result<Option<LimitRow>> {
        let sql = format!("{LIMITS} WHERE id = $1");
        Ok(on_db!(self, pool => sqlx::query_as::<_, LimitRow>(&sql)
            .bind(id).fetch_optional(pool).await)?)
    }

    /// Writes a project limit's value and description; whether it existed.
    pub async fn update_limit(&self, r: &LimitRow) -> Result<bool> {
        let n = on_db!(self, pool => sqlx::query(
            "UPDATE identity_limits SET resource_limit = $2, description = $3 WHERE id = $1")
            .bind(&r.id).bind(r.resource_limit).bind(&r.description)
            .execute(pool).await.map(|r| r.rows_affected()))?;
        Ok(n == 1)
    }

    /// Deletes a project limit; whether it existed.
    pub async fn delete_limit(&self, id: &str) -> Result<bool> {
        let n = on_db!(self, pool => sqlx::query("DELETE FROM identity_limits WHERE id = $1")
            .bind(id).execute(pool).await.map(|r| r.rows_affected()))?;
        Ok(n == 1)
    }
}
