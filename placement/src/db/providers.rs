//! Resource providers: rows, trees, aggregates, and the records that feed
//! the in-memory index.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use fabric::ids::ProviderUuid;
use sqlx::Row;

use super::{bump_generation, now, on_db, placeholders, Db};
use crate::engine::{AggregateUuid, Inventory, ProviderRecord};
use crate::error::{ErrorCode, PlacementError, Result};

/// A provider as the API shows it.
#[derive(Debug, Clone)]
pub struct ProviderRow {
    /// Database id.
    pub id: i64,
    /// UUID.
    pub uuid: String,
    /// Name.
    pub name: String,
    /// Generation.
    pub generation: i64,
    /// Parent UUID (nested providers).
    pub parent_uuid: Option<String>,
    /// Root UUID (itself for a root).
    pub root_uuid: String,
    /// Last change.
    pub updated_at: Option<DateTime<Utc>>,
}

const SELECT_PROVIDER: &str = "SELECT p.id, p.uuid, p.name, p.generation, pp.uuid AS parent_uuid, \
     COALESCE(rp.uuid, p.uuid) AS root_uuid, COALESCE(p.updated_at, p.created_at) AS ts \
     FROM resource_providers p \
     LEFT JOIN resource_providers pp ON pp.id = p.parent_provider_id \
     LEFT JOIN resource_providers rp ON rp.id = p.root_provider_id";

fn provider_from_row<R: Row>(r: &R) -> Result<ProviderRow>
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    i64: for<'a> sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    String: for<'a> sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    Option<String>: for<'a> sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    DateTime<Utc>: for<'a> sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    Ok(ProviderRow {
        id: r.try_get("id")?,
        uuid: r.try_get("uuid")?,
        name: r.try_get("name")?,
        generation: r.try_get("generation")?,
        parent_uuid: r.try_get("parent_uuid")?,
        root_uuid: r.try_get("root_uuid")?,
        updated_at: r.try_get("ts").ok(),
    })
}

/// Filters of `GET /resource_providers` that SQL answers (the others come
/// from the index as a UUID list).
#[derive(Debug, Clone, Default)]
pub struct ProviderQuery {
    /// Exact name.
    pub name: Option<String>,
    /// Exact UUID.
    pub uuid: Option<String>,
    /// Restrict to these UUIDs.
    pub uuids: Option<Vec<String>>,
}

impl Db {
    /// Creates a provider (a root, or a child of `parent`). Duplicate UUID or
    /// name is a 409; an unknown parent a 400.
    pub async fn create_provider(
        &self,
        uuid: &str,
        name: &str,
        parent: Option<&str>,
    ) -> Result<ProviderRow> {
        on_db!(self, pool => {
            let mut tx = pool.begin().await?;
            let (parent_id, root_id) = match parent {
                None => (None, None),
                Some(p) => {
                    let row = sqlx::query("SELECT id, COALESCE(root_provider_id, id) AS root FROM resource_providers WHERE uuid = $1")
                        .bind(p)
                        .fetch_optional(&mut *tx)
                        .await?
                        .ok_or_else(|| PlacementError::bad_request(format!(
                            "parent provider UUID cannot be found: {p}"
                        )))?;
                    (Some(row.try_get::<i64, _>("id")?), Some(row.try_get::<i64, _>("root")?))
                }
            };
            let inserted = sqlx::query_scalar::<_, i64>(
                "INSERT INTO resource_providers (uuid, name, generation, parent_provider_id, root_provider_id, created_at) \
                 VALUES ($1, $2, 0, $3, $4, $5) RETURNING id",
            )
            .bind(uuid)
            .bind(name)
            .bind(parent_id)
            .bind(root_id)
            .bind(now())
            .fetch_one(&mut *tx)
            .await;
            let id = match inserted {
                Ok(id) => id,
                Err(e) => return Err(duplicate_provider(e, uuid, name)),
            };
            if root_id.is_none() {
                sqlx::query("UPDATE resource_providers SET root_provider_id = id WHERE id = $1")
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok::<(), PlacementError>(())
        })?;
        self.provider_or_404(uuid).await
    }

    /// One provider by UUID.
    pub async fn get_provider(&self, uuid: &str) -> Result<Option<ProviderRow>> {
        let sql = format!("{SELECT_PROVIDER} WHERE p.uuid = $1");
        on_db!(self, pool => {
            match sqlx::query(&sql).bind(uuid).fetch_optional(pool).await? {
                Some(r) => Ok(Some(provider_from_row(&r)?)),
                None => Ok(None),
            }
        })
    }

    /// One provider by UUID, or 404.
    pub async fn provider_or_404(&self, uuid: &str) -> Result<ProviderRow> {
        self.get_provider(uuid).await?.ok_or_else(|| {
            PlacementError::not_found(format!("No resource provider with uuid {uuid} found"))
        })
    }

    /// Providers matching `q`, by id.
    pub async fn list_providers(&self, q: &ProviderQuery) -> Result<Vec<ProviderRow>> {
        let mut sql = format!("{SELECT_PROVIDER} WHERE 1 = 1");
        let mut binds: Vec<String> = Vec::new();
        if let Some(n) = &q.name {
            binds.push(n.clone());
            sql.push_str(&format!(" AND p.name = ${}", binds.len()));
        }
        if let Some(u) = &q.uuid {
            binds.push(u.clone());
            sql.push_str(&format!(" AND p.uuid = ${}", binds.len()));
        }
        if let Some(us) = &q.uuids {
            if us.is_empty() {
                return Ok(Vec::new());
            }
            let first = binds.len() + 1;
            binds.extend(us.iter().cloned());
            sql.push_str(&format!(
                " AND p.uuid IN ({})",
                placeholders(first, us.len())
            ));
        }
        sql.push_str(" ORDER BY p.id");
        on_db!(self, pool => {
            let mut query = sqlx::query(&sql);
            for b in &binds {
                query = query.bind(b);
            }
            query.fetch_all(pool).await?.iter().map(provider_from_row).collect()
        })
    }

    /// Renames and/or re-parents a provider. Re-parenting rules (which
    /// changes are allowed at which microversion) are the caller's; here a
    /// new parent must exist and must not be in the provider's own subtree.
    pub async fn update_provider(
        &self,
        row: &ProviderRow,
        name: &str,
        parent: Option<&str>,
    ) -> Result<()> {
        on_db!(self, pool => {
            let mut tx = pool.begin().await?;
            let (parent_id, root_id) = match parent {
                None => (None, row.id),
                Some(p) => {
                    let r = sqlx::query("SELECT id, COALESCE(root_provider_id, id) AS root FROM resource_providers WHERE uuid = $1")
                        .bind(p)
                        .fetch_optional(&mut *tx)
                        .await?
                        .ok_or_else(|| PlacementError::bad_request(format!("parent provider UUID does not exist: {p}")))?;
                    let pid: i64 = r.try_get("id")?;
                    // Walk up from the new parent: meeting ourselves is a loop.
                    let mut cur = Some(pid);
                    while let Some(c) = cur {
                        if c == row.id {
                            return Err(PlacementError::bad_request(
                                "creating loop in the provider tree is not allowed.",
                            ));
                        }
                        cur = sqlx::query_scalar::<_, Option<i64>>("SELECT parent_provider_id FROM resource_providers WHERE id = $1")
                            .bind(c)
                            .fetch_one(&mut *tx)
                            .await?;
                    }
                    (Some(pid), r.try_get::<i64, _>("root")?)
                }
            };
            let res = sqlx::query("UPDATE resource_providers SET name = $1, parent_provider_id = $2, root_provider_id = $3, updated_at = $4 WHERE id = $5")
                .bind(name)
                .bind(parent_id)
                .bind(root_id)
                .bind(now())
                .bind(row.id)
                .execute(&mut *tx)
                .await;
            if let Err(e) = res {
                return Err(duplicate_provider(e, &row.uuid, name));
            }
            // The whole subtree moves to the new root.
            let mut frontier = vec![row.id];
            while let Some(p) = frontier.pop() {
                let kids = sqlx::query_scalar::<_, i64>("SELECT id FROM resource_providers WHERE parent_provider_id = $1")
                    .bind(p)
                    .fetch_all(&mut *tx)
                    .await?;
                for k in kids {
                    sqlx::query("UPDATE resource_providers SET root_provider_id = $1 WHERE id = $2")
                        .bind(root_id)
                        .bind(k)
                        .execute(&mut *tx)
                        .await?;
                    frontier.push(k);
                }
            }
            tx.commit().await?;
            Ok(())
        })
    }

    /// Deletes a provider with no allocations and no children.
    pub async fn delete_provider(&self, row: &ProviderRow) -> Result<()> {
        on_db!(self, pool => {
            let mut tx = pool.begin().await?;
            // The provider's row lock first: every allocation write
            // compare-and-bumps the generation of each provider it
            // allocates from, so a claim in flight commits before the count
            // below (a statement of its own: it sees that claim), and one
            // that comes later finds the row gone. Nothing else keeps an
            // allocation from outliving its provider (upstream's schema
            // has no foreign key there, nor has ours since migration 0002).
            sqlx::query("UPDATE resource_providers SET generation = generation + 1 WHERE id = $1")
                .bind(row.id)
                .execute(&mut *tx)
                .await?;
            let allocs: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM allocations WHERE resource_provider_id = $1")
                .bind(row.id)
                .fetch_one(&mut *tx)
                .await?;
            if allocs > 0 {
                return Err(PlacementError::conflict(
                    ErrorCode::ProviderInUse,
                    format!("Unable to delete resource provider {}: Resource provider has allocations.", row.uuid),
                ));
            }
            let kids: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM resource_providers WHERE parent_provider_id = $1")
                .bind(row.id)
                .fetch_one(&mut *tx)
                .await?;
            if kids > 0 {
                return Err(PlacementError::conflict(
                    ErrorCode::CannotDeleteParent,
                    format!("Unable to delete parent resource provider {}: It has child resource providers.", row.uuid),
                ));
            }
            sqlx::query("UPDATE resource_providers SET root_provider_id = NULL WHERE id = $1")
                .bind(row.id)
                .execute(&mut *tx)
                .await?;
            sqlx::query("DELETE FROM resource_providers WHERE id = $1").bind(row.id).execute(&mut *tx).await?;
            tx.commit().await?;
            Ok(())
        })
    }

    /// The aggregates of a provider, sorted.
    pub async fn provider_aggregates(&self, provider_id: i64) -> Result<Vec<String>> {
        on_db!(self, pool => {
            Ok(sqlx::query_scalar::<_, String>(
                "SELECT a.uuid FROM placement_aggregates a JOIN resource_provider_aggregates r ON r.aggregate_id = a.id \
                 WHERE r.resource_provider_id = $1 ORDER BY a.uuid",
            )
            .bind(provider_id)
            .fetch_all(pool)
            .await?)
        })
    }

    /// Replaces a provider's aggregates. With `seen` (1.19+) the generation
    /// is compared and bumped; without it (older microversions) it is bumped
    /// unconditionally. Returns the new generation.
    pub async fn set_provider_aggregates(
        &self,
        row: &ProviderRow,
        seen: Option<i64>,
        aggs: &[String],
    ) -> Result<i64> {
        on_db!(self, pool => {
            let mut tx = pool.begin().await?;
            let generation = bump_generation!(tx, row.id, seen.unwrap_or(row.generation), &row.uuid);
            sqlx::query("DELETE FROM resource_provider_aggregates WHERE resource_provider_id = $1")
                .bind(row.id)
                .execute(&mut *tx)
                .await?;
            let ts = now();
            let mut uniq: Vec<&String> = aggs.iter().collect();
            uniq.sort();
            uniq.dedup();
            for a in uniq {
                sqlx::query("INSERT INTO placement_aggregates (uuid, created_at) VALUES ($1, $2) ON CONFLICT DO NOTHING")
                    .bind(a)
                    .bind(ts)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(
                    "INSERT INTO resource_provider_aggregates (resource_provider_id, aggregate_id, created_at) \
                     SELECT $1, id, $2 FROM placement_aggregates WHERE uuid = $3",
                )
                .bind(row.id)
                .bind(ts)
                .bind(a)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(generation)
        })
    }

    /// Index records of the given providers (all of them with `None`), parents
    /// before children.
    pub async fn provider_records(&self, uuids: Option<&[String]>) -> Result<Vec<ProviderRecord>> {
        let filter = match uuids {
            Some([]) => return Ok(Vec::new()),
            Some(u) => format!(" WHERE p.uuid IN ({})", placeholders(1, u.len())),
            None => String::new(),
        };
        let bind_all = |sql: String| -> (String, Vec<String>) {
            (sql, uuids.map(<[String]>::to_vec).unwrap_or_default())
        };
        let (prov_sql, binds) = bind_all(format!(
            "SELECT p.id, p.uuid, p.name, p.generation, pp.uuid AS parent_uuid FROM resource_providers p \
             LEFT JOIN resource_providers pp ON pp.id = p.parent_provider_id{filter} ORDER BY p.id"
        ));
        let inv_sql = format!(
            "SELECT i.resource_provider_id AS pid, c.name, i.total, i.reserved, i.min_unit, i.max_unit, i.step_size, i.allocation_ratio \
             FROM inventories i JOIN resource_classes c ON c.id = i.resource_class_id \
             JOIN resource_providers p ON p.id = i.resource_provider_id{filter}"
        );
        let use_sql = format!(
            "SELECT a.resource_provider_id AS pid, c.name, CAST(SUM(a.used) AS BIGINT) AS used FROM allocations a \
             JOIN resource_classes c ON c.id = a.resource_class_id \
             JOIN resource_providers p ON p.id = a.resource_provider_id{filter} \
             GROUP BY a.resource_provider_id, c.name"
        );
        let trait_sql = format!(
            "SELECT r.resource_provider_id AS pid, t.name FROM resource_provider_traits r JOIN traits t ON t.id = r.trait_id \
             JOIN resource_providers p ON p.id = r.resource_provider_id{filter}"
        );
        let agg_sql = format!(
            "SELECT r.resource_provider_id AS pid, a.uuid AS name FROM resource_provider_aggregates r \
             JOIN placement_aggregates a ON a.id = r.aggregate_id \
             JOIN resource_providers p ON p.id = r.resource_provider_id{filter}"
        );
        on_db!(self, pool => {
            let mut tx = pool.begin().await?;
            macro_rules! fetch {
                ($sql:expr) => {{
                    let mut q = sqlx::query($sql);
                    for b in &binds {
                        q = q.bind(b);
                    }
                    q.fetch_all(&mut *tx).await?
                }};
            }
            let mut out: Vec<ProviderRecord> = Vec::new();
            let mut by_id: HashMap<i64, usize> = HashMap::new();
            for r in fetch!(&prov_sql) {
                let uuid: String = r.try_get("uuid")?;
                let parent: Option<String> = r.try_get("parent_uuid")?;
                let mut rec = ProviderRecord::new(parse_uuid(&uuid)?, r.try_get::<String, _>("name")?);
                rec.generation = u32::try_from(r.try_get::<i64, _>("generation")?).unwrap_or(u32::MAX);
                rec.parent = parent.as_deref().map(parse_uuid).transpose()?;
                by_id.insert(r.try_get("id")?, out.len());
                out.push(rec);
            }
            for r in fetch!(&inv_sql) {
                if let Some(&i) = by_id.get(&r.try_get::<i64, _>("pid")?) {
                    let inv = Inventory {
                        total: r.try_get::<i64, _>("total")?.max(0) as u64,
                        reserved: r.try_get::<i64, _>("reserved")?.max(0) as u64,
                        min_unit: r.try_get::<i64, _>("min_unit")?.max(0) as u64,
                        max_unit: r.try_get::<i64, _>("max_unit")?.max(0) as u64,
                        step_size: r.try_get::<i64, _>("step_size")?.max(0) as u64,
                        allocation_ratio: r.try_get("allocation_ratio")?,
                    };
                    out[i].inventories.insert(r.try_get("name")?, inv);
                }
            }
            for r in fetch!(&use_sql) {
                if let Some(&i) = by_id.get(&r.try_get::<i64, _>("pid")?) {
                    out[i].usages.insert(r.try_get("name")?, r.try_get::<i64, _>("used")?.max(0) as u64);
                }
            }
            for r in fetch!(&trait_sql) {
                if let Some(&i) = by_id.get(&r.try_get::<i64, _>("pid")?) {
                    out[i].traits.push(r.try_get("name")?);
                }
            }
            for r in fetch!(&agg_sql) {
                if let Some(&i) = by_id.get(&r.try_get::<i64, _>("pid")?) {
                    let u: String = r.try_get("name")?;
                    if let Ok(u) = uuid::Uuid::parse_str(&u) {
                        out[i].aggregates.push(AggregateUuid(u));
                    }
                }
            }
            tx.commit().await?;
            Ok(out)
        })
    }
}

fn parse_uuid(s: &str) -> Result<ProviderUuid> {
    s.parse::<ProviderUuid>()
        .map_err(|e| PlacementError::Db(sqlx::Error::Decode(Box::new(e))))
}

/// Maps a unique violation on insert/update of a provider to upstream's 409.
fn duplicate_provider(e: sqlx::Error, uuid: &str, name: &str) -> PlacementError {
    match migrations::unique_violation(&e) {
        Some("uniq_resource_providers0uuid") => PlacementError::conflict(
            ErrorCode::Undefined,
            format!("Conflicting resource provider uuid: {uuid} already exists."),
        ),
        Some("uniq_resource_providers0name") => PlacementError::conflict(
            ErrorCode::DuplicateName,
            format!("Conflicting resource provider name: {name} already exists."),
        ),
        _ => PlacementError::Db(e),
    }
}
