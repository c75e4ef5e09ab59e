//! Inventories of a provider, per resource class. Every write compares and
//! bumps the provider's generation, and refuses to remove an inventory that
//! is allocated from (409 `placement.inventory.inuse`).
//!
//! As upstream, an inventory may shrink below what is allocated from it
//! (an operator lowering a host's capacity, or an allocation ratio, does not
//! have to move instances first): the write succeeds and is logged as a
//! warning, and the provider takes no new allocation of that class until
//! its usage fits again (the capacity check of every allocation write, and
//! of the candidate engine, compares the usage after the write with the
//! capacity).

use std::collections::{BTreeMap, HashMap};

use sqlx::Row;

use super::providers::ProviderRow;
use super::{bump_generation, now, on_db, on_tx, Db, Tx};
use crate::engine::Inventory;
use crate::error::{ErrorCode, PlacementError, Result};

fn in_use(class: &str, uuid: &str) -> PlacementError {
    PlacementError::conflict(
        ErrorCode::InventoryInUse,
        format!("Inventory for '{class}' on resource provider '{uuid}' in use."),
    )
}

/// Logs an inventory written below what is allocated from it (allowed, as
/// upstream, which logs the same warning).
fn warn_capacity_exceeded(class: &str, uuid: &str, used: i64, capacity: u64) {
    tracing::warn!(
        resource_provider = uuid,
        resource_class = class,
        used,
        capacity,
        "resource provider has allocations exceeding its new inventory capacity"
    );
}

/// Creates or overwrites one class's inventory of a provider.
const UPSERT_INVENTORY: &str = "INSERT INTO inventories (resource_provider_id, resource_class_id, total, reserved, min_unit, max_unit, step_size, allocation_ratio, created_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
     ON CONFLICT (resource_provider_id, resource_class_id) DO UPDATE SET total = $3, reserved = $4, min_unit = $5, \
     max_unit = $6, step_size = $7, allocation_ratio = $8, updated_at = $9";

/// Whether an inventory write on an open transaction checks usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UsageCheck {
    /// The state the transaction commits: no inventory may be removed while
    /// allocated from (shrinking below usage is allowed, with a warning).
    Final,
    /// An interim state inside a transaction that writes the final state
    /// (with [`UsageCheck::Final`]) before it commits: the reshaper's union
    /// of old and new inventories, which may briefly hold less than is
    /// allocated while allocations move.
    Interim,
}

/// Replaces all inventories of provider `id` (`uuid`) with `new` on the
/// open transaction `tx`; the caller bumps the generation. With
/// [`UsageCheck::Interim`] the classes of `new` are written over the
/// existing ones and nothing is removed or checked.
pub(crate) async fn replace_inventories_in(
    tx: &mut Tx,
    id: i64,
    uuid: &str,
    new: &BTreeMap<String, Inventory>,
    class_ids: &HashMap<String, i64>,
    check: UsageCheck,
) -> Result<()> {
    on_tx!(tx, tx => {
        if check == UsageCheck::Final {
            let usage = sqlx::query(
                "SELECT c.name, CAST(SUM(a.used) AS BIGINT) AS used FROM allocations a JOIN resource_classes c ON c.id = a.resource_class_id \
                 WHERE a.resource_provider_id = $1 GROUP BY c.id, c.name ORDER BY c.id",
            )
            .bind(id)
            .fetch_all(&mut *tx)
            .await?;
            let mut removed_in_use: Vec<String> = Vec::new();
            for u in &usage {
                let class: String = u.try_get("name")?;
                let used: i64 = u.try_get("used")?;
                match new.get(&class) {
                    None if used > 0 => removed_in_use.push(class),
                    Some(inv) if (inv.capacity() as i64) < used => {
                        warn_capacity_exceeded(&class, uuid, used, inv.capacity())
                    }
                    _ => {}
                }
            }
            if !removed_in_use.is_empty() {
                return Err(in_use(&removed_in_use.join(", "), uuid));
            }
            sqlx::query("DELETE FROM inventories WHERE resource_provider_id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        let ts = now();
        for (class, inv) in new {
            sqlx::query(UPSERT_INVENTORY)
                .bind(id)
                .bind(class_ids[class])
                .bind(inv.total as i64)
                .bind(inv.reserved as i64)
                .bind(inv.min_unit as i64)
                .bind(inv.max_unit as i64)
                .bind(inv.step_size as i64)
                .bind(inv.allocation_ratio)
                .bind(ts)
                .execute(&mut *tx)
                .await?;
        }
        Ok(())
    })
}

/// How a single-class write treats an existing inventory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upsert {
    /// `POST /inventories`: it must not exist yet (409 otherwise).
    Create,
    /// `PUT /inventories/{rc}`: it must exist (400 otherwise).
    Update,
}

impl Db {
    /// The inventories of a provider by class name.
    pub async fn inventories(&self, provider_id: i64) -> Result<BTreeMap<String, Inventory>> {
        on_db!(self, pool => {
            let rows = sqlx::query(
                "SELECT c.name, i.total, i.reserved, i.min_unit, i.max_unit, i.step_size, i.allocation_ratio \
                 FROM inventories i JOIN resource_classes c ON c.id = i.resource_class_id \
                 WHERE i.resource_provider_id = $1",
            )
            .bind(provider_id)
            .fetch_all(pool)
            .await?;
            let mut out = BTreeMap::new();
            for r in &rows {
                out.insert(
                    r.try_get::<String, _>("name")?,
                    Inventory {
                        total: r.try_get::<i64, _>("total")? as u64,
                        reserved: r.try_get::<i64, _>("reserved")? as u64,
                        min_unit: r.try_get::<i64, _>("min_unit")? as u64,
                        max_unit: r.try_get::<i64, _>("max_unit")? as u64,
                        step_size: r.try_get::<i64, _>("step_size")? as u64,
                        allocation_ratio: r.try_get("allocation_ratio")?,
                    },
                );
            }
            Ok(out)
        })
    }

    /// Replaces all inventories of a provider (`PUT /inventories`), or with
    /// an empty map deletes them all. `seen` is the generation the client
    /// saw. Returns the new generation.
    pub async fn replace_inventories(
        &self,
        row: &ProviderRow,
        seen: i64,
        new: &BTreeMap<String, Inventory>,
        class_ids: &HashMap<String, i64>,
    ) -> Result<i64> {
        let mut tx = self.begin().await?;
        let generation = on_tx!(&mut tx, tx => bump_generation!(tx, row.id, seen, &row.uuid));
        replace_inventories_in(
            &mut tx,
            row.id,
            &row.uuid,
            new,
            class_ids,
            UsageCheck::Final,
        )
        .await?;
        tx.commit().await?;
        Ok(generation)
    }

    /// Creates or updates one class's inventory. Returns the new generation.
    pub async fn upsert_inventory(
        &self,
        row: &ProviderRow,
        seen: i64,
        class: &str,
        class_id: i64,
        inv: &Inventory,
        mode: Upsert,
    ) -> Result<i64> {
        on_db!(self, pool => {
            let mut tx = pool.begin().await?;
            let generation = bump_generation!(tx, row.id, seen, &row.uuid);
            let exists = sqlx::query_scalar::<_, i64>(
                "SELECT id FROM inventories WHERE resource_provider_id = $1 AND resource_class_id = $2",
            )
            .bind(row.id)
            .bind(class_id)
            .fetch_optional(&mut *tx)
            .await?
            .is_some();
            match (mode, exists) {
                (Upsert::Create, true) => {
                    return Err(PlacementError::conflict(
                        ErrorCode::Undefined,
                        format!("Update conflict: Inventory for {class} on resource provider {} already exists.", row.uuid),
                    ))
                }
                (Upsert::Update, false) => {
                    return Err(PlacementError::bad_request(format!("No inventory record with resource class for resource provider {}: {class}", row.uuid)))
                }
                _ => {}
            }
            let used: i64 = sqlx::query_scalar(
                "SELECT CAST(COALESCE(SUM(used), 0) AS BIGINT) FROM allocations WHERE resource_provider_id = $1 AND resource_class_id = $2",
            )
            .bind(row.id)
            .bind(class_id)
            .fetch_one(&mut *tx)
            .await?;
            if (inv.capacity() as i64) < used {
                warn_capacity_exceeded(class, &row.uuid, used, inv.capacity());
            }
            sqlx::query(UPSERT_INVENTORY)
                .bind(row.id)
                .bind(class_id)
                .bind(inv.total as i64)
                .bind(inv.reserved as i64)
                .bind(inv.min_unit as i64)
                .bind(inv.max_unit as i64)
                .bind(inv.step_size as i64)
                .bind(inv.allocation_ratio)
                .bind(now())
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(generation)
        })
    }

    /// Deletes one class's inventory unless it is allocated from. With
    /// `seen` the generation is compared; without it, the current one is used.
    pub async fn delete_inventory(
        &self,
        row: &ProviderRow,
        seen: Option<i64>,
        class: &str,
    ) -> Result<i64> {
        on_db!(self, pool => {
            let mut tx = pool.begin().await?;
            let generation = bump_generation!(tx, row.id, seen.unwrap_or(row.generation), &row.uuid);
            let class_id = sqlx::query_scalar::<_, i64>(
                "SELECT i.resource_class_id FROM inventories i JOIN resource_classes c ON c.id = i.resource_class_id \
                 WHERE i.resource_provider_id = $1 AND c.name = $2",
            )
            .bind(row.id)
            .bind(class)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or_else(|| PlacementError::not_found(format!(
                "No inventory of class {class} found for delete"
            )))?;
            let used: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM allocations WHERE resource_provider_id = $1 AND resource_class_id = $2",
            )
            .bind(row.id)
            .bind(class_id)
            .fetch_one(&mut *tx)
            .await?;
            if used > 0 {
                return Err(in_use(class, &row.uuid));
            }
            sqlx::query("DELETE FROM inventories WHERE resource_provider_id = $1 AND resource_class_id = $2")
                .bind(row.id)
                .bind(class_id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(generation)
        })
    }
}
