//! The reshaper (`POST /reshaper`, 1.30): in one transaction, replace the
//! inventories of a set of providers and the allocations of a set of
//! consumers, so that inventory and the allocations against it can move
//! between providers (typically from a root to a new child) with no moment
//! at which either is visible half-moved.
//!
//! As upstream, in three steps on one transaction:
//!
//! 1. an *interim* inventory per provider: its current inventories with the
//!    requested ones written over them (nothing removed yet, since
//!    allocations may still sit on a class that goes away);
//! 2. the allocations, by the same code as `PUT`/`POST /allocations`
//!    ([`write_allocations_in`]): consumer generations, capacity against the
//!    interim inventories, provider generations;
//! 3. the *final* inventories, with the usual rule that no inventory is
//!    removed while allocated from (409 `placement.inventory.inuse`; one
//!    may shrink below what is allocated, as upstream).
//!
//! Each step bumps the generation of the providers it changes, as
//! upstream's does (so a provider in both sets goes up by three).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use axum::http::StatusCode;
use sqlx::Row;

use super::allocations::{with_retries, write_allocations_in, ConsumerWrite, WriteError};
use super::inventories::{replace_inventories_in, UsageCheck};
use super::{now, on_tx, Db, Tx};
use crate::engine::Inventory;
use crate::error::{ErrorCode, PlacementError, Result};

/// The inventories one provider should have after a reshape.
#[derive(Debug, Clone, PartialEq)]
pub struct InventoryReplace {
    /// Provider UUID.
    pub uuid: String,
    /// The provider generation the client saw.
    pub generation: i64,
    /// Class → inventory; every other class of the provider goes.
    pub inventories: BTreeMap<String, Inventory>,
}

impl Db {
    /// Replaces the inventories and the allocations atomically. Returns the
    /// UUIDs of every provider whose inventory or usage changed.
    pub async fn reshape(
        &self,
        inventories: &[InventoryReplace],
        writes: &[ConsumerWrite],
        class_ids: &HashMap<String, i64>,
    ) -> Result<Vec<String>> {
        with_retries(|| self.try_reshape(inventories, writes, class_ids)).await
    }

    async fn try_reshape(
        &self,
        inventories: &[InventoryReplace],
        writes: &[ConsumerWrite],
        class_ids: &HashMap<String, i64>,
    ) -> std::result::Result<Vec<String>, WriteError> {
        let mut tx = self.begin().await?;
        let mut ids = Vec::with_capacity(inventories.len());
        for inv in inventories {
            let id = bump_seen(&mut tx, &inv.uuid, inv.generation).await?;
            replace_inventories_in(
                &mut tx,
                id,
                &inv.uuid,
                &inv.inventories,
                class_ids,
                UsageCheck::Interim,
            )
            .await?;
            ids.push(id);
        }
        let mut touched: BTreeSet<String> = write_allocations_in(&mut tx, writes, class_ids)
            .await?
            .touched
            .into_iter()
            .collect();
        for (inv, id) in inventories.iter().zip(ids) {
            bump(&mut tx, id).await?;
            replace_inventories_in(
                &mut tx,
                id,
                &inv.uuid,
                &inv.inventories,
                class_ids,
                UsageCheck::Final,
            )
            .await?;
            touched.insert(inv.uuid.clone());
        }
        tx.commit().await?;
        Ok(touched.into_iter().collect())
    }
}

/// Compares the generation of provider `uuid` with the one the client saw
/// and bumps it. Returns the provider's id.
async fn bump_seen(tx: &mut Tx, uuid: &str, seen: i64) -> Result<i64> {
    on_tx!(tx, tx => {
        let row = sqlx::query("SELECT id, generation FROM resource_providers WHERE uuid = $1")
            .bind(uuid)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or_else(|| {
                PlacementError::client(
                    StatusCode::BAD_REQUEST,
                    ErrorCode::ProviderNotFound,
                    format!("Resource provider {uuid} in inventories not found."),
                )
            })?;
        let id: i64 = row.try_get("id")?;
        let actual: i64 = row.try_get("generation")?;
        let res = sqlx::query(
            "UPDATE resource_providers SET generation = generation + 1, updated_at = $1 WHERE id = $2 AND generation = $3",
        )
        .bind(now())
        .bind(id)
        .bind(seen)
        .execute(&mut *tx)
        .await?;
        if actual != seen || res.rows_affected() != 1 {
            return Err(PlacementError::generation_conflict(format!(
                "resource provider generation conflict for provider {uuid}: actual: {actual}, given: {seen}"
            )));
        }
        Ok(id)
    })
}

/// Bumps the generation of provider `id`, which this transaction has
/// already changed (and, on PostgreSQL, holds locked).
async fn bump(tx: &mut Tx, id: i64) -> Result<()> {
    on_tx!(tx, tx => {
        sqlx::query("UPDATE resource_providers SET generation = generation + 1, updated_at = $1 WHERE id = $2")
            .bind(now())
            .bind(id)
            .execute(&mut *tx)
            .await?;
        Ok(())
    })
}
