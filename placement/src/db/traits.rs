//! Traits: the standard set (os-traits, synced at start) and CUSTOM_* ones,
//! and the traits of each provider.

use sqlx::Row;

use super::classes::DeleteOutcome;
use super::{bump_generation, now, on_db, placeholders, Db};
use crate::error::{PlacementError, Result};

/// How `GET /traits` filters names.
#[derive(Debug, Clone, Default)]
pub struct TraitQuery {
    /// `name=startswith:X`
    pub prefix: Option<String>,
    /// `name=in:A,B`
    pub names: Option<Vec<String>>,
    /// `associated=true|false`
    pub associated: Option<bool>,
}

impl Db {
    /// Inserts the standard traits that are missing.
    pub async fn sync_traits(&self, names: &[&str]) -> Result<()> {
        on_db!(self, pool => {
            let mut tx = pool.begin().await?;
            let ts = now();
            for chunk in names.chunks(200) {
                let values: Vec<String> = (0..chunk.len()).map(|i| format!("(${}, ${})", 2 * i + 1, 2 * i + 2)).collect();
                let sql = format!("INSERT INTO traits (name, created_at) VALUES {} ON CONFLICT DO NOTHING", values.join(", "));
                let mut q = sqlx::query(&sql);
                for n in chunk {
                    q = q.bind(*n).bind(ts);
                }
                q.execute(&mut *tx).await?;
            }
            tx.commit().await?;
            Ok(())
        })
    }

    /// Trait names matching `q`, sorted.
    pub async fn list_traits(&self, q: &TraitQuery) -> Result<Vec<String>> {
        if q.names.as_ref().is_some_and(Vec::is_empty) {
            // `?name=in:` names no trait: none matches.
            return Ok(Vec::new());
        }
        let mut sql = String::from("SELECT t.name FROM traits t WHERE 1 = 1");
        let mut binds: Vec<String> = Vec::new();
        if let Some(p) = &q.prefix {
            binds.push(format!(
                "{}%",
                p.replace('\\', "\\\\")
                    .replace('%', "\\%")
                    .replace('_', "\\_")
            ));
            sql.push_str(&format!(" AND t.name LIKE ${} ESCAPE '\\'", binds.len()));
        }
        if let Some(names) = &q.names {
            let first = binds.len() + 1;
            binds.extend(names.iter().cloned());
            sql.push_str(&format!(
                " AND t.name IN ({})",
                placeholders(first, names.len())
            ));
        }
        match q.associated {
            Some(true) => sql.push_str(" AND EXISTS (SELECT 1 FROM resource_provider_traits r WHERE r.trait_id = t.id)"),
            Some(false) => sql.push_str(" AND NOT EXISTS (SELECT 1 FROM resource_provider_traits r WHERE r.trait_id = t.id)"),
            None => {}
        }
        sql.push_str(" ORDER BY t.name");
        on_db!(self, pool => {
            let mut query = sqlx::query_scalar::<_, String>(&sql);
            for b in &binds {
                query = query.bind(b);
            }
            Ok(query.fetch_all(pool).await?)
        })
    }

    /// Whether a trait exists.
    pub async fn trait_exists(&self, name: &str) -> Result<bool> {
        on_db!(self, pool => {
            Ok(sqlx::query_scalar::<_, i64>("SELECT id FROM traits WHERE name = $1")
                .bind(name)
                .fetch_optional(pool)
                .await?
                .is_some())
        })
    }

    /// Creates a custom trait; `false` if it already existed.
    pub async fn create_trait(&self, name: &str) -> Result<bool> {
        on_db!(self, pool => {
            let res = sqlx::query("INSERT INTO traits (name, created_at) VALUES ($1, $2) ON CONFLICT DO NOTHING")
                .bind(name)
                .bind(now())
                .execute(pool)
                .await?;
            Ok(res.rows_affected() == 1)
        })
    }

    /// Deletes a custom trait unless a provider has it.
    pub async fn delete_trait(&self, name: &str) -> Result<DeleteOutcome> {
        on_db!(self, pool => {
            let mut tx = pool.begin().await?;
            let Some(id) = sqlx::query_scalar::<_, i64>("SELECT id FROM traits WHERE name = $1")
                .bind(name)
                .fetch_optional(&mut *tx)
                .await?
            else {
                return Ok(DeleteOutcome::NotFound);
            };
            let used: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM resource_provider_traits WHERE trait_id = $1")
                .bind(id)
                .fetch_one(&mut *tx)
                .await?;
            if used > 0 {
                return Ok(DeleteOutcome::InUse);
            }
            sqlx::query("DELETE FROM traits WHERE id = $1").bind(id).execute(&mut *tx).await?;
            tx.commit().await?;
            Ok(DeleteOutcome::Deleted)
        })
    }

    /// The traits of a provider, sorted.
    pub async fn provider_traits(&self, provider_id: i64) -> Result<Vec<String>> {
        on_db!(self, pool => {
            Ok(sqlx::query_scalar::<_, String>(
                "SELECT t.name FROM traits t JOIN resource_provider_traits r ON r.trait_id = t.id \
                 WHERE r.resource_provider_id = $1 ORDER BY t.name",
            )
            .bind(provider_id)
            .fetch_all(pool)
            .await?)
        })
    }

    /// Replaces a provider's traits if its generation is still `seen`;
    /// returns the new generation. Unknown traits are a 400 and nothing is written.
    pub async fn set_provider_traits(
        &self,
        provider_id: i64,
        uuid: &str,
        seen: i64,
        names: &[String],
    ) -> Result<i64> {
        on_db!(self, pool => {
            let mut tx = pool.begin().await?;
            let mut ids = Vec::with_capacity(names.len());
            if !names.is_empty() {
                let sql = format!("SELECT id, name FROM traits WHERE name IN ({})", placeholders(1, names.len()));
                let mut q = sqlx::query(&sql);
                for n in names {
                    q = q.bind(n);
                }
                let rows = q.fetch_all(&mut *tx).await?;
                let mut found = Vec::new();
                for r in &rows {
                    ids.push(r.try_get::<i64, _>("id")?);
                    found.push(r.try_get::<String, _>("name")?);
                }
                let mut missing: Vec<&str> = names.iter().filter(|n| !found.contains(n)).map(String::as_str).collect();
                if !missing.is_empty() {
                    missing.sort_unstable();
                    missing.dedup();
                    return Err(PlacementError::bad_request(format!("No such trait(s): {}", missing.join(", "))));
                }
            }
            let generation = bump_generation!(tx, provider_id, seen, uuid);
            sqlx::query("DELETE FROM resource_provider_traits WHERE resource_provider_id = $1")
                .bind(provider_id)
                .execute(&mut *tx)
                .await?;
            ids.sort_unstable();
            ids.dedup();
            let ts = now();
            for id in ids {
                sqlx::query("INSERT INTO resource_provider_traits (resource_provider_id, trait_id, created_at) VALUES ($1, $2, $3)")
                    .bind(provider_id)
                    .bind(id)
                    .bind(ts)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(generation)
        })
    }
}
