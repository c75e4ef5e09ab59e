//! Resource classes: the standard set (seeded by the migration, ids below
//! 10000) and CUSTOM_* ones.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::Row;

use super::{now, on_db, Db};
use crate::error::Result;

/// Ids at or above this are custom classes.
pub const FIRST_CUSTOM_ID: i64 = 10000;

/// A resource class row.
#[derive(Debug, Clone)]
pub struct ClassRow {
    /// Id.
    pub id: i64,
    /// Name.
    pub name: String,
    /// Last change (creation for most).
    pub updated_at: Option<DateTime<Utc>>,
}

/// What a delete found.
#[derive(Debug, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// Gone now.
    Deleted,
    /// No such row.
    NotFound,
    /// Referenced by inventories or allocations.
    InUse,
}

impl Db {
    /// Every class, standard first, by id.
    pub async fn list_classes(&self) -> Result<Vec<ClassRow>> {
        on_db!(self, pool => {
            let rows = sqlx::query("SELECT id, name, COALESCE(updated_at, created_at) AS ts FROM resource_classes ORDER BY id")
                .fetch_all(pool)
                .await?;
            rows.iter()
                .map(|r| Ok(ClassRow { id: r.try_get("id")?, name: r.try_get("name")?, updated_at: r.try_get("ts").ok() }))
                .collect()
        })
    }

    /// Name → id of every class.
    pub async fn class_ids(&self) -> Result<HashMap<String, i64>> {
        Ok(self
            .list_classes()
            .await?
            .into_iter()
            .map(|c| (c.name, c.id))
            .collect())
    }

    /// Creates a custom class; `false` if it already existed.
    pub async fn create_class(&self, name: &str) -> Result<bool> {
        on_db!(self, pool => {
            let res = sqlx::query("INSERT INTO resource_classes (name, created_at) VALUES ($1, $2) ON CONFLICT DO NOTHING")
                .bind(name)
                .bind(now())
                .execute(pool)
                .await?;
            Ok(res.rows_affected() == 1)
        })
    }

    /// Renames a custom class (microversions 1.2–1.6); `false` if `from` is absent.
    pub async fn rename_class(&self, from: &str, to: &str) -> Result<bool> {
        on_db!(self, pool => {
            let res = sqlx::query("UPDATE resource_classes SET name = $1, updated_at = $2 WHERE name = $3 AND id >= $4")
                .bind(to)
                .bind(now())
                .bind(from)
                .bind(FIRST_CUSTOM_ID)
                .execute(pool)
                .await?;
            Ok(res.rows_affected() == 1)
        })
    }

    /// Deletes a custom class unless inventories or allocations use it.
    pub async fn delete_class(&self, name: &str) -> Result<DeleteOutcome> {
        on_db!(self, pool => {
            let mut tx = pool.begin().await?;
            let Some(id) = sqlx::query_scalar::<_, i64>("SELECT id FROM resource_classes WHERE name = $1")
                .bind(name)
                .fetch_optional(&mut *tx)
                .await?
            else {
                return Ok(DeleteOutcome::NotFound);
            };
            let used: i64 = sqlx::query_scalar(
                "SELECT (SELECT COUNT(*) FROM inventories WHERE resource_class_id = $1) \
                 + (SELECT COUNT(*) FROM allocations WHERE resource_class_id = $1)",
            )
            .bind(id)
            .fetch_one(&mut *tx)
            .await?;
            if used > 0 {
                return Ok(DeleteOutcome::InUse);
            }
            sqlx::query("DELETE FROM resource_classes WHERE id = $1").bind(id).execute(&mut *tx).await?;
            tx.commit().await?;
            Ok(DeleteOutcome::Deleted)
        })
    }
}
