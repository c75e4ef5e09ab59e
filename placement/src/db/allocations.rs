//! Consumers, allocations and usages.
//!
//! A write replaces the allocations of one or more consumers in one
//! transaction: consumer generations are compared (1.28+), every provider
//! that receives resources is checked for capacity and its generation is
//! compared-and-bumped, so two writers — in any number of placement
//! processes on one database — can never over-allocate a provider. A
//! conflict on a provider generation that the client did not send (the
//! service read it inside the transaction) is retried a bounded number of
//! times by the caller; see [`Db::write_allocations`].

use std::collections::{BTreeMap, BTreeSet, HashMap};

use sqlx::Row;

use super::{now, on_db, on_tx, placeholders, Db, Tx};
use crate::engine::Inventory;
use crate::error::{ErrorCode, PlacementError, Result};

/// The allocations one consumer should hold after a write.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerWrite {
    /// Consumer UUID.
    pub consumer: String,
    /// Provider UUID → class → amount. Empty: remove all its allocations.
    pub allocations: BTreeMap<String, BTreeMap<String, i64>>,
    /// Project (external id).
    pub project_id: String,
    /// User (external id).
    pub user_id: String,
    /// The consumer generation the client saw: `Some(None)` = "a new
    /// consumer", `Some(Some(g))` = that generation, `None` = not checked
    /// (microversions before 1.28).
    pub expected_generation: Option<Option<i64>>,
    /// Consumer type (1.38), e.g. `INSTANCE`.
    pub consumer_type: Option<String>,
}

/// A consumer's allocations as `GET /allocations/{consumer}` shows them.
#[derive(Debug, Clone, Default)]
pub struct ConsumerAllocations {
    /// Provider UUID → (provider generation, class → amount).
    pub allocations: BTreeMap<String, (i64, BTreeMap<String, i64>)>,
    /// Project, user, generation and type of the consumer, if it exists.
    pub consumer: Option<ConsumerInfo>,
}

/// A consumer row.
#[derive(Debug, Clone)]
pub struct ConsumerInfo {
    /// Project external id.
    pub project_id: String,
    /// User external id.
    pub user_id: String,
    /// Generation.
    pub generation: i64,
    /// Type name, if set.
    pub consumer_type: Option<String>,
}

/// Outcome of one write attempt.
#[derive(Debug)]
pub enum WriteError {
    /// A provider generation read inside the transaction went stale: retry.
    Retry,
    /// Anything else: give up with this.
    Fail(PlacementError),
}

impl From<sqlx::Error> for WriteError {
    fn from(e: sqlx::Error) -> Self {
        // Deadlocks and serialization failures are retryable by nature.
        if let sqlx::Error::Database(d) = &e {
            if matches!(d.code().as_deref(), Some("40P01") | Some("40001")) {
                return WriteError::Retry;
            }
        }
        WriteError::Fail(PlacementError::Db(e))
    }
}

impl From<PlacementError> for WriteError {
    fn from(e: PlacementError) -> Self {
        WriteError::Fail(e)
    }
}

/// Runs `attempt` (one transaction) until it succeeds or fails for good:
/// a [`WriteError::Retry`] (a provider generation the service read inside
/// the transaction went stale) is retried a bounded number of times.
pub(crate) async fn with_retries<T, F, Fut>(mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, WriteError>>,
{
    const ATTEMPTS: usize = 10;
    for n in 0..ATTEMPTS {
        match attempt().await {
            Ok(v) => return Ok(v),
            Err(WriteError::Fail(e)) => return Err(e),
            Err(WriteError::Retry) => {
                crate::metrics::allocation_retry();
                let backoff = 1 + (n as u64) * 2;
                tokio::time::sleep(std::time::Duration::from_millis(backoff)).await;
            }
        }
    }
    Err(PlacementError::generation_conflict(
        "resource provider generation conflict: allocations could not be written after repeated concurrent updates; retry",
    ))
}

/// Creates the project and user rows of a consumer if they are missing.
async fn ensure_owners<C, DB>(
    conn: &mut C,
    project: &str,
    user: &str,
    ts: chrono::DateTime<chrono::Utc>,
) -> std::result::Result<(), sqlx::Error>
where
    DB: sqlx::Database,
    for<'e> &'e mut C: sqlx::Executor<'e, Database = DB>,
    for<'q> <DB as sqlx::Database>::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    chrono::DateTime<chrono::Utc>: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    for table in ["projects", "users"] {
        let value = if table == "projects" { project } else { user };
        let sql = format!(
            "INSERT INTO {table} (external_id, created_at) VALUES ($1, $2) ON CONFLICT DO NOTHING"
        );
        sqlx::query::<DB>(&sql)
            .bind(value)
            .bind(ts)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// What an allocation write changed: every provider whose usage changed, and
/// for those that received resources their generation and usage as the
/// transaction left them (read inside it, after the generation bump, so the
/// index can take them without reading again).
#[derive(Debug, Default)]
pub struct Written {
    /// UUIDs of every provider whose usage changed (sorted).
    pub touched: Vec<String>,
    /// Generation and usage of the providers that received resources.
    pub states: Vec<UsageState>,
}

/// Replaces the allocations of every consumer in `writes` on the open
/// transaction `tx` (the shared core of `PUT`/`POST /allocations` and the
/// reshaper): consumer generations compared, capacity of every provider
/// that receives resources checked, its generation compared-and-bumped.
///
/// The providers and the consumers are read in one query; the new claim of
/// a consumer on one provider is then a consumer insert, one allocation
/// insert, the generation's compare-and-bump and the capacity read. On
/// PostgreSQL the common case of that (a new consumer, one provider) takes
/// a single statement instead: see [`claim_new_consumer_pg`].
pub(crate) async fn write_allocations_in(
    tx: &mut Tx,
    writes: &[ConsumerWrite],
    class_ids: &HashMap<String, i64>,
) -> std::result::Result<Written, WriteError> {
    // Every provider named in the new allocations, sorted (lock order).
    let mut wanted: BTreeSet<&str> = BTreeSet::new();
    for w in writes {
        wanted.extend(w.allocations.keys().map(String::as_str));
    }
    let consumers: Vec<&str> = writes.iter().map(|w| w.consumer.as_str()).collect();
    on_tx!(tx, tx => {
        // In one query: the providers (id, generation, read before the
        // capacity check) and the consumers that exist already with the
        // providers they hold allocations on (these lose them: index
        // refresh). There are no consumers to read when none is written (a
        // reshape with `"allocations": {}`).
        let mut providers: BTreeMap<String, (i64, i64)> = BTreeMap::new();
        let mut touched: BTreeSet<String> = BTreeSet::new();
        let mut existing: HashMap<String, (i64, i64)> = HashMap::new();
        if !wanted.is_empty() || !consumers.is_empty() {
            let sql = format!(
                "SELECT 'p' AS k, uuid, id, generation, CAST(NULL AS TEXT) AS rp FROM resource_providers WHERE uuid IN ({}) \
                 UNION ALL \
                 SELECT 'c' AS k, c.uuid, c.id, c.generation, p.uuid AS rp FROM consumers c \
                 LEFT JOIN allocations a ON a.consumer_id = c.uuid \
                 LEFT JOIN resource_providers p ON p.id = a.resource_provider_id WHERE c.uuid IN ({})",
                placeholders(1, wanted.len()),
                placeholders(1 + wanted.len(), consumers.len())
            );
            let mut q = sqlx::query(&sql);
            for u in &wanted {
                q = q.bind(*u);
            }
            for c in &consumers {
                q = q.bind(*c);
            }
            for r in q.fetch_all(&mut *tx).await? {
                let kind: String = r.try_get("k")?;
                let entry = (r.try_get("id")?, r.try_get("generation")?);
                if kind == "p" {
                    providers.insert(r.try_get("uuid")?, entry);
                } else {
                    existing.insert(r.try_get("uuid")?, entry);
                    if let Some(rp) = r.try_get::<Option<String>, _>("rp")? {
                        touched.insert(rp);
                    }
                }
            }
            if let Some(missing) = wanted.iter().find(|u| !providers.contains_key(**u)) {
                return Err(PlacementError::bad_request(format!(
                    "Allocation for resource provider '{missing}' that does not exist."
                )).into());
            }
        }
        touched.extend(providers.keys().cloned());

        let ts = now();
        for w in writes {
            let current = existing.get(&w.consumer).copied();
            // Upstream's wording: "expected" is what the server holds,
            // "got" what the client sent.
            if let Some(sent) = w.expected_generation {
                match (sent, current) {
                    (None, Some((_, g))) => return Err(consumer_conflict(format!("expected {g} but got None")).into()),
                    (Some(e), None) => return Err(consumer_conflict(format!("expected null but got {e}")).into()),
                    (Some(e), Some((_, g))) if e != g => {
                        return Err(consumer_conflict(format!("expected {g} but got {e}")).into())
                    }
                    _ => {}
                }
            }
            // A consumer that does not exist holds no allocations (every
            // write below keeps it so; there is no foreign key, as
            // upstream): nothing to delete then.
            if current.is_some() {
                sqlx::query("DELETE FROM allocations WHERE consumer_id = $1")
                    .bind(&w.consumer)
                    .execute(&mut *tx)
                    .await?;
            }
            if w.allocations.values().all(|r| r.is_empty()) {
                // No allocations left: the consumer goes too (as upstream),
                // at the generation read, so that a concurrent write of new
                // allocations for it (which bumps that generation) is not
                // left without its consumer: one of the two starts over.
                if let Some((id, g)) = current {
                    let res = sqlx::query("DELETE FROM consumers WHERE id = $1 AND generation = $2")
                        .bind(id)
                        .bind(g)
                        .execute(&mut *tx)
                        .await?;
                    if res.rows_affected() != 1 {
                        if w.expected_generation.is_some() {
                            return Err(consumer_conflict(format!(
                                "consumer {} was changed by another request",
                                w.consumer
                            ))
                            .into());
                        }
                        return Err(WriteError::Retry);
                    }
                }
                continue;
            }
            let type_id: Option<i64> = match &w.consumer_type {
                Some(t) => {
                    let known: Option<i64> = sqlx::query_scalar("SELECT id FROM consumer_types WHERE name = $1")
                        .bind(t)
                        .fetch_optional(&mut *tx)
                        .await?;
                    match known {
                        Some(id) => Some(id),
                        None => {
                            sqlx::query("INSERT INTO consumer_types (name, created_at) VALUES ($1, $2) ON CONFLICT DO NOTHING")
                                .bind(t)
                                .bind(ts)
                                .execute(&mut *tx)
                                .await?;
                            sqlx::query_scalar("SELECT id FROM consumer_types WHERE name = $1")
                                .bind(t)
                                .fetch_optional(&mut *tx)
                                .await?
                        }
                    }
                }
                None => None,
            };
            // All of the consumer's allocations: (provider id, class id,
            // amount).
            let rows: Vec<(i64, i64, i64)> = w
                .allocations
                .iter()
                .flat_map(|(rp, resources)| {
                    let rp_id = providers[rp].0;
                    resources.iter().map(move |(class, amount)| (rp_id, class_ids[class], *amount))
                })
                .collect();
            match current {
                None => {
                    for attempt in 0..2 {
                        let res = sqlx::query(
                            "INSERT INTO consumers (uuid, project_id, user_id, generation, consumer_type_id, created_at) \
                             SELECT $1, p.id, u.id, 1, $2, $3 FROM projects p, users u WHERE p.external_id = $4 AND u.external_id = $5",
                        )
                        .bind(&w.consumer)
                        .bind(type_id)
                        .bind(ts)
                        .bind(&w.project_id)
                        .bind(&w.user_id)
                        .execute(&mut *tx)
                        .await?;
                        if res.rows_affected() == 1 || attempt == 1 {
                            break;
                        }
                        ensure_owners(tx, &w.project_id, &w.user_id, ts).await?;
                    }
                }
                Some((id, g)) => {
                    ensure_owners(tx, &w.project_id, &w.user_id, ts).await?;
                    let res = sqlx::query(
                        "UPDATE consumers SET generation = generation + 1, updated_at = $1, \
                         project_id = (SELECT id FROM projects WHERE external_id = $2), \
                         user_id = (SELECT id FROM users WHERE external_id = $3), \
                         consumer_type_id = COALESCE($4, consumer_type_id) WHERE id = $5 AND generation = $6",
                    )
                    .bind(ts)
                    .bind(&w.project_id)
                    .bind(&w.user_id)
                    .bind(type_id)
                    .bind(id)
                    .bind(g)
                    .execute(&mut *tx)
                    .await?;
                    if res.rows_affected() != 1 {
                        return Err(consumer_conflict(format!("consumer {} was changed by another request", w.consumer)).into());
                    }
                }
            }
            let values: Vec<String> = (0..rows.len())
                .map(|i| format!("(${}, $1, ${}, ${}, $2)", 3 * i + 3, 3 * i + 4, 3 * i + 5))
                .collect();
            let sql = format!(
                "INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, used, created_at) VALUES {}",
                values.join(", ")
            );
            let mut q = sqlx::query(&sql).bind(&w.consumer).bind(ts);
            for (rp_id, class_id, amount) in &rows {
                q = q.bind(*rp_id).bind(*class_id).bind(*amount);
            }
            q.execute(&mut *tx).await?;
        }
        // The compare-and-bump of the generation of every provider that
        // receives resources (in UUID order), then its capacity with this
        // transaction's allocations. Other writers' cannot slip in unseen:
        // each of them bumps the generation too, so this bump finds no row
        // (retry) or waits for their commit and then finds none.
        let mut states = Vec::with_capacity(providers.len());
        for (uuid, (rp_id, seen)) in &providers {
            const INVENTORY: &str = "SELECT c.name, i.total, i.reserved, i.min_unit, i.max_unit, i.step_size, i.allocation_ratio, \
                 (SELECT CAST(COALESCE(SUM(a.used), 0) AS BIGINT) FROM allocations a WHERE a.resource_provider_id = i.resource_provider_id \
                  AND a.resource_class_id = i.resource_class_id) AS used";
            const BUMP: &str = "UPDATE resource_providers SET generation = generation + 1, updated_at = $1 WHERE id = $2 AND generation = $3";
            let res = sqlx::query(BUMP).bind(ts).bind(*rp_id).bind(*seen).execute(&mut *tx).await?;
            if res.rows_affected() != 1 {
                return Err(WriteError::Retry);
            }
            let sql = format!(
                "{INVENTORY} FROM inventories i JOIN resource_classes c ON c.id = i.resource_class_id \
                 WHERE i.resource_provider_id = $1"
            );
            let rows = sqlx::query(&sql).bind(*rp_id).fetch_all(&mut *tx).await?;
            let mut inv: HashMap<String, (Inventory, i64)> = HashMap::new();
            for r in &rows {
                inv.insert(
                    r.try_get("name")?,
                    (
                        Inventory {
                            total: r.try_get::<i64, _>("total")? as u64,
                            reserved: r.try_get::<i64, _>("reserved")? as u64,
                            min_unit: r.try_get::<i64, _>("min_unit")? as u64,
                            max_unit: r.try_get::<i64, _>("max_unit")? as u64,
                            step_size: r.try_get::<i64, _>("step_size")? as u64,
                            allocation_ratio: r.try_get("allocation_ratio")?,
                        },
                        r.try_get::<i64, _>("used")?,
                    ),
                );
            }
            for w in writes {
                let Some(resources) = w.allocations.get(uuid) else { continue };
                for (class, amount) in resources {
                    let Some((i, used)) = inv.get(class) else {
                        return Err(PlacementError::client(
                            axum::http::StatusCode::CONFLICT,
                            ErrorCode::Undefined,
                            format!("Unable to allocate inventory: Inventory for '{class}' on resource provider '{uuid}' invalid."),
                        ).into());
                    };
                    let a = *amount as u64;
                    if a < i.min_unit || a > i.max_unit || !a.is_multiple_of(i.step_size.max(1)) {
                        return Err(capacity_error(class, uuid, &format!(
                            "The requested amount {a} does not satisfy min_unit {}, max_unit {}, step_size {}.",
                            i.min_unit, i.max_unit, i.step_size
                        )).into());
                    }
                    if *used as u64 > i.capacity() {
                        return Err(capacity_error(class, uuid, "The requested amount would exceed the capacity.").into());
                    }
                }
            }
            states.push(UsageState {
                uuid: uuid.clone(),
                generation: seen + 1,
                usages: inv
                    .into_iter()
                    .filter(|(_, (_, used))| *used > 0)
                    .map(|(class, (_, used))| (class, used as u64))
                    .collect(),
            });
        }
        Ok(Written { touched: touched.into_iter().collect(), states })
    })
}

/// The claim of a new consumer on one provider — what the scheduler sends
/// for every boot — as one PostgreSQL statement in its own implicit
/// transaction (the general path takes six statements and a `BEGIN`): the
/// capacity check against the inventories and usage read in the statement's
/// snapshot, the compare-and-bump of the provider generation read in that
/// same snapshot, then the consumer and its allocations, each step only if
/// the one before held. A concurrent writer on the provider bumps the
/// generation too, so the bump finds no row rather than over-allocating.
///
/// Returns `None` when the write is not of that shape or when the statement
/// wrote nothing (capacity short, generation moved, consumer present, owner
/// rows or consumer type missing): the general path then decides, with its
/// retries and upstream's error messages. The check here matches the
/// general path's (`Inventory::capacity` truncates the same double product).
async fn claim_new_consumer_pg(
    stash: &migrations::PgStash,
    writes: &[ConsumerWrite],
    class_ids: &HashMap<String, i64>,
) -> Result<Option<Written>> {
    let [w] = writes else { return Ok(None) };
    if w.expected_generation != Some(None) || w.allocations.len() != 1 {
        return Ok(None);
    }
    let Some((rp, resources)) = w.allocations.iter().next() else {
        return Ok(None);
    };
    if resources.is_empty() {
        return Ok(None);
    }
    let classes: Vec<i64> = resources.keys().map(|c| class_ids[c]).collect();
    let amounts: Vec<i64> = resources.values().copied().collect();
    const SQL: &str = "\
        WITH req AS (SELECT r.class_id, r.amount FROM unnest($5::bigint[], $6::bigint[]) AS r (class_id, amount)), \
        p AS (SELECT id, generation FROM resource_providers WHERE uuid = $4), \
        inv AS (SELECT i.resource_class_id AS class_id, rc.name, i.total, i.reserved, i.min_unit, i.max_unit, i.step_size, \
                i.allocation_ratio, (SELECT CAST(COALESCE(SUM(a.used), 0) AS BIGINT) FROM allocations a \
                 WHERE a.resource_provider_id = i.resource_provider_id AND a.resource_class_id = i.resource_class_id) AS used \
                FROM inventories i JOIN resource_classes rc ON rc.id = i.resource_class_id \
                WHERE i.resource_provider_id = (SELECT id FROM p)), \
        ok AS (SELECT COALESCE(bool_and(inv.class_id IS NOT NULL AND req.amount >= inv.min_unit AND req.amount <= inv.max_unit \
                AND req.amount % GREATEST(inv.step_size, 1) = 0 \
                AND inv.used + req.amount <= floor(GREATEST(inv.total - inv.reserved, 0) * inv.allocation_ratio)), false) AS ok \
               FROM req LEFT JOIN inv ON inv.class_id = req.class_id), \
        owner AS (SELECT pr.id AS project_id, u.id AS user_id FROM projects pr, users u \
                  WHERE pr.external_id = $7 AND u.external_id = $8), \
        bump AS (UPDATE resource_providers SET generation = generation + 1, updated_at = $3 \
                 WHERE id = (SELECT id FROM p) AND generation = (SELECT generation FROM p) AND (SELECT ok FROM ok) \
                 AND EXISTS (SELECT 1 FROM owner) AND NOT EXISTS (SELECT 1 FROM consumers WHERE uuid = $1) \
                 AND ($2::text IS NULL OR EXISTS (SELECT 1 FROM consumer_types WHERE name = $2)) \
                 RETURNING generation), \
        c AS (INSERT INTO consumers (uuid, project_id, user_id, generation, consumer_type_id, created_at) \
              SELECT $1, owner.project_id, owner.user_id, 1, (SELECT id FROM consumer_types WHERE name = $2), $3 FROM owner \
              WHERE EXISTS (SELECT 1 FROM bump) RETURNING uuid), \
        a AS (INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, used, created_at) \
              SELECT (SELECT id FROM p), c.uuid, req.class_id, req.amount, $3 FROM c, req RETURNING 1) \
        SELECT inv.name, inv.used + COALESCE((SELECT req.amount FROM req WHERE req.class_id = inv.class_id), 0) AS used, \
               (SELECT generation FROM bump) AS bumped, (SELECT count(*) FROM a) AS written FROM inv";
    let mut conn = stash.conn().await?;
    let rows = sqlx::query(SQL)
        .bind(&w.consumer)
        .bind(w.consumer_type.as_deref())
        .bind(now())
        .bind(rp)
        .bind(&classes)
        .bind(&amounts)
        .bind(&w.project_id)
        .bind(&w.user_id)
        .fetch_all(conn.get())
        .await;
    let rows = match rows {
        Ok(rows) => {
            conn.keep();
            rows
        }
        // The consumer appeared since the statement's snapshot: the
        // statement is undone as a whole; the general path answers.
        Err(e)
            if e.as_database_error().map(|d| d.kind())
                == Some(sqlx::error::ErrorKind::UniqueViolation) =>
        {
            return Ok(None)
        }
        Err(e) => return Err(e.into()),
    };
    let mut generation = None;
    let mut usages = BTreeMap::new();
    for r in &rows {
        if r.try_get::<i64, _>("written")? != amounts.len() as i64 {
            return Ok(None);
        }
        generation = r.try_get::<Option<i64>, _>("bumped")?;
        let used: i64 = r.try_get("used")?;
        if used > 0 {
            usages.insert(r.try_get::<String, _>("name")?, used as u64);
        }
    }
    let Some(generation) = generation else {
        return Ok(None);
    };
    Ok(Some(Written {
        touched: vec![rp.clone()],
        states: vec![UsageState {
            uuid: rp.clone(),
            generation,
            usages,
        }],
    }))
}

fn capacity_error(class: &str, uuid: &str, why: &str) -> PlacementError {
    PlacementError::conflict(
        ErrorCode::Undefined,
        format!("Unable to allocate inventory: Unable to create allocation for '{class}' on resource provider '{uuid}'. {why}"),
    )
}

fn consumer_conflict(detail: String) -> PlacementError {
    PlacementError::generation_conflict(format!("consumer generation conflict - {detail}"))
}

impl Db {
    /// Replaces the allocations of every consumer in `writes`, atomically.
    /// Returns what changed (see [`Written`]).
    pub async fn write_allocations(
        &self,
        writes: &[ConsumerWrite],
        class_ids: &HashMap<String, i64>,
    ) -> Result<Written> {
        if let Db::Pg(stash) = self {
            if let Some(written) = claim_new_consumer_pg(stash, writes, class_ids).await? {
                crate::metrics::allocation_write(true);
                return Ok(written);
            }
        }
        let written = with_retries(|| self.try_write_allocations(writes, class_ids)).await?;
        crate::metrics::allocation_write(false);
        Ok(written)
    }

    async fn try_write_allocations(
        &self,
        writes: &[ConsumerWrite],
        class_ids: &HashMap<String, i64>,
    ) -> std::result::Result<Written, WriteError> {
        let mut tx = self.begin().await?;
        let written = write_allocations_in(&mut tx, writes, class_ids).await?;
        tx.commit().await?;
        Ok(written)
    }

    /// The allocations of one consumer.
    pub async fn consumer_allocations(&self, consumer: &str) -> Result<ConsumerAllocations> {
        on_db!(self, pool => {
            let rows = sqlx::query(
                "SELECT p.uuid, p.generation, c.name, a.used FROM allocations a \
                 JOIN resource_providers p ON p.id = a.resource_provider_id \
                 JOIN resource_classes c ON c.id = a.resource_class_id WHERE a.consumer_id = $1",
            )
            .bind(consumer)
            .fetch_all(pool)
            .await?;
            let mut out = ConsumerAllocations::default();
            for r in &rows {
                let e = out
                    .allocations
                    .entry(r.try_get("uuid")?)
                    .or_insert_with(|| (0, BTreeMap::new()));
                e.0 = r.try_get("generation")?;
                e.1.insert(r.try_get("name")?, r.try_get("used")?);
            }
            let info = sqlx::query(
                "SELECT p.external_id AS project, u.external_id AS usr, c.generation, t.name AS ctype FROM consumers c \
                 JOIN projects p ON p.id = c.project_id JOIN users u ON u.id = c.user_id \
                 LEFT JOIN consumer_types t ON t.id = c.consumer_type_id WHERE c.uuid = $1",
            )
            .bind(consumer)
            .fetch_optional(pool)
            .await?;
            if let Some(r) = info {
                out.consumer = Some(ConsumerInfo {
                    project_id: r.try_get("project")?,
                    user_id: r.try_get("usr")?,
                    generation: r.try_get("generation")?,
                    consumer_type: r.try_get("ctype")?,
                });
            }
            Ok(out)
        })
    }

    /// The allocations against one provider: consumer → class → amount.
    pub async fn provider_allocations(
        &self,
        provider_id: i64,
    ) -> Result<BTreeMap<String, BTreeMap<String, i64>>> {
        on_db!(self, pool => {
            let rows = sqlx::query(
                "SELECT a.consumer_id, c.name, a.used FROM allocations a JOIN resource_classes c ON c.id = a.resource_class_id \
                 WHERE a.resource_provider_id = $1",
            )
            .bind(provider_id)
            .fetch_all(pool)
            .await?;
            let mut out: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
            for r in &rows {
                out.entry(r.try_get("consumer_id")?).or_default().insert(r.try_get("name")?, r.try_get("used")?);
            }
            Ok(out)
        })
    }

    /// Usage of one provider per class with inventory (0 when unused).
    pub async fn provider_usages(&self, provider_id: i64) -> Result<BTreeMap<String, i64>> {
        on_db!(self, pool => {
            let rows = sqlx::query(
                "SELECT c.name, (SELECT CAST(COALESCE(SUM(a.used), 0) AS BIGINT) FROM allocations a WHERE a.resource_provider_id = i.resource_provider_id \
                 AND a.resource_class_id = i.resource_class_id) AS used \
                 FROM inventories i JOIN resource_classes c ON c.id = i.resource_class_id WHERE i.resource_provider_id = $1",
            )
            .bind(provider_id)
            .fetch_all(pool)
            .await?;
            let mut out = BTreeMap::new();
            for r in &rows {
                out.insert(r.try_get("name")?, r.try_get("used")?);
            }
            Ok(out)
        })
    }

    /// Usage of a project (optionally one user), per consumer type:
    /// type (or `None` for untyped) → (consumer count, class → amount).
    pub async fn project_usages(
        &self,
        project: &str,
        user: Option<&str>,
    ) -> Result<BTreeMap<Option<String>, (i64, BTreeMap<String, i64>)>> {
        let user_filter = if user.is_some() {
            " AND u.external_id = $2"
        } else {
            ""
        };
        let sql = format!(
            "SELECT t.name AS ctype, c.name AS rc, CAST(SUM(a.used) AS BIGINT) AS used, COUNT(DISTINCT a.consumer_id) AS consumers \
             FROM allocations a JOIN consumers co ON co.uuid = a.consumer_id \
             JOIN projects p ON p.id = co.project_id JOIN users u ON u.id = co.user_id \
             JOIN resource_classes c ON c.id = a.resource_class_id \
             LEFT JOIN consumer_types t ON t.id = co.consumer_type_id \
             WHERE p.external_id = $1{user_filter} GROUP BY t.name, c.name"
        );
        let count_sql = format!(
            "SELECT t.name AS ctype, COUNT(DISTINCT co.uuid) AS consumers FROM consumers co \
             JOIN projects p ON p.id = co.project_id JOIN users u ON u.id = co.user_id \
             LEFT JOIN consumer_types t ON t.id = co.consumer_type_id \
             WHERE p.external_id = $1{user_filter} GROUP BY t.name"
        );
        on_db!(self, pool => {
            let mut q = sqlx::query(&sql).bind(project);
            let mut cq = sqlx::query(&count_sql).bind(project);
            if let Some(u) = user {
                q = q.bind(u);
                cq = cq.bind(u);
            }
            let mut out: BTreeMap<Option<String>, (i64, BTreeMap<String, i64>)> = BTreeMap::new();
            for r in q.fetch_all(pool).await? {
                out.entry(r.try_get("ctype")?).or_default().1.insert(r.try_get("rc")?, r.try_get("used")?);
            }
            for r in cq.fetch_all(pool).await? {
                out.entry(r.try_get("ctype")?).or_default().0 = r.try_get("consumers")?;
            }
            Ok(out)
        })
    }
}

/// A provider's generation and usage per class, as an allocation write leaves them.
#[derive(Debug, Clone)]
pub struct UsageState {
    /// Provider UUID.
    pub uuid: String,
    /// Generation.
    pub generation: i64,
    /// Class → amount used (classes with no allocations absent).
    pub usages: BTreeMap<String, u64>,
}

impl Db {
    /// Generation and usage of the given providers, in one query (the cheap
    /// index refresh after an allocation write).
    pub async fn usage_states(&self, uuids: &[String]) -> Result<Vec<UsageState>> {
        if uuids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT p.uuid, p.generation, c.name, CAST(SUM(a.used) AS BIGINT) AS used FROM resource_providers p \
             LEFT JOIN allocations a ON a.resource_provider_id = p.id \
             LEFT JOIN resource_classes c ON c.id = a.resource_class_id \
             WHERE p.uuid IN ({}) GROUP BY p.uuid, p.generation, c.name",
            placeholders(1, uuids.len())
        );
        on_db!(self, pool => {
            let mut q = sqlx::query(&sql);
            for u in uuids {
                q = q.bind(u);
            }
            let mut out: BTreeMap<String, UsageState> = BTreeMap::new();
            for r in q.fetch_all(pool).await? {
                let uuid: String = r.try_get("uuid")?;
                let e = out.entry(uuid.clone()).or_insert_with(|| UsageState {
                    uuid,
                    generation: 0,
                    usages: BTreeMap::new(),
                });
                e.generation = r.try_get("generation")?;
                let class: Option<String> = r.try_get("name")?;
                let used: Option<i64> = r.try_get("used")?;
                if let (Some(c), Some(u)) = (class, used) {
                    e.usages.insert(c, u.max(0) as u64);
                }
            }
            Ok(out.into_values().collect())
        })
    }
}
