//! Host aggregates on the API database (`aggregates`, `aggregate_hosts`,
//! `aggregate_metadata`): what `os-aggregates` and `os-availability-zone`
//! read and write. A host's availability zone is the `availability_zone`
//! metadata of its aggregates.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use migrations::BeginWrite;

use super::{with_pool, ApiDb};
use crate::metrics::measured;
use crate::Error;

/// The metadata key holding an aggregate's availability zone.
pub const AZ_KEY: &str = "availability_zone";

/// An aggregate with its hosts and metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct Aggregate {
    /// Id (the API id).
    pub id: i64,
    /// UUID (shown from 2.41; the placement aggregate).
    pub uuid: String,
    /// Name.
    pub name: String,
    /// Hosts, sorted.
    pub hosts: Vec<String>,
    /// Metadata.
    pub metadata: BTreeMap<String, String>,
    /// Created.
    pub created_at: DateTime<Utc>,
    /// Updated.
    pub updated_at: Option<DateTime<Utc>>,
}

impl Aggregate {
    /// Its availability zone, if any.
    pub fn availability_zone(&self) -> Option<&str> {
        self.metadata.get(AZ_KEY).map(String::as_str)
    }
}

/// Why an aggregate write did nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AggregateRefused {
    /// No aggregate with that id.
    NotFound,
    /// Another aggregate has that name.
    NameExists,
    /// The host is in the aggregate already.
    HostExists,
    /// The host is not in the aggregate.
    HostNotFound,
    /// The aggregate still has hosts (delete).
    NotEmpty,
}

type Row = (i64, String, String, DateTime<Utc>, Option<DateTime<Utc>>);
/// Aggregate rows, host rows, metadata rows.
type Loaded = (Vec<Row>, Vec<(i64, String)>, Vec<(i64, String, String)>);

fn is_unique(e: &Error) -> bool {
    matches!(e, Error::Db { source, .. } if migrations::unique_violation(source).is_some())
}

impl ApiDb {
    /// Every aggregate (or only `id`), by id.
    pub async fn aggregates(&self, id: Option<i64>) -> Result<Vec<Aggregate>, Error> {
        let id = id.unwrap_or(-1);
        let (rows, hosts, meta): Loaded = with_pool!(self.pool(), p => {
            let rows = measured("aggregate_list", sqlx::query_as(
                "SELECT id, uuid, name, created_at, updated_at FROM aggregates \
                 WHERE ($1 < 0 OR id = $1) ORDER BY id").bind(id).fetch_all(p)).await?;
            let hosts = measured("aggregate_hosts", sqlx::query_as(
                "SELECT aggregate_id, host FROM aggregate_hosts \
                 WHERE ($1 < 0 OR aggregate_id = $1) ORDER BY host").bind(id).fetch_all(p)).await?;
            let meta = measured("aggregate_metadata", sqlx::query_as(
                "SELECT aggregate_id, key, value FROM aggregate_metadata \
                 WHERE ($1 < 0 OR aggregate_id = $1)").bind(id).fetch_all(p)).await?;
            (rows, hosts, meta)
        });
        Ok(rows
            .into_iter()
            .map(|(id, uuid, name, created_at, updated_at)| Aggregate {
                id,
                uuid,
                name,
                hosts: hosts
                    .iter()
                    .filter(|(a, _)| *a == id)
                    .map(|(_, h)| h.clone())
                    .collect(),
                metadata: meta
                    .iter()
                    .filter(|(a, _, _)| *a == id)
                    .map(|(_, k, v)| (k.clone(), v.clone()))
                    .collect(),
                created_at,
                updated_at,
            })
            .collect())
    }

    /// One aggregate.
    pub async fn aggregate(&self, id: i64) -> Result<Option<Aggregate>, Error> {
        Ok(self.aggregates(Some(id)).await?.pop())
    }

    /// Creates an aggregate (with its zone as metadata), in one
    /// transaction; returns its id.
    pub async fn aggregate_create(
        &self,
        name: &str,
        availability_zone: Option<&str>,
    ) -> Result<Result<i64, AggregateRefused>, Error> {
        let now = Utc::now();
        let uuid = uuid::Uuid::new_v4().to_string();
        let res: Result<i64, Error> = with_pool!(self.pool(), p => async {
            let mut tx = measured("begin", p.begin_write()).await?;
            let id: i64 = measured("aggregate_insert", sqlx::query_scalar(
                "INSERT INTO aggregates (uuid, name, created_at) VALUES ($1, $2, $3) RETURNING id")
                .bind(&uuid).bind(name).bind(now).fetch_one(&mut *tx)).await?;
            if let Some(az) = availability_zone {
                measured("aggregate_metadata_insert", sqlx::query(
                    "INSERT INTO aggregate_metadata (aggregate_id, key, value, created_at) \
                     VALUES ($1, $2, $3, $4)")
                    .bind(id).bind(AZ_KEY).bind(az).bind(now).execute(&mut *tx)).await?;
            }
            measured("commit", tx.commit()).await?;
            Ok(id)
        }.await);
        match res {
            Ok(id) => Ok(Ok(id)),
            Err(e) if is_unique(&e) => Ok(Err(AggregateRefused::NameExists)),
            Err(e) => Err(e),
        }
    }

    /// Renames an aggregate and/or sets its zone (`Some(None)` removes
    /// it), in one transaction.
    pub async fn aggregate_update(
        &self,
        id: i64,
        name: Option<&str>,
        availability_zone: Option<Option<&str>>,
    ) -> Result<Result<(), AggregateRefused>, Error> {
        let mut meta = BTreeMap::new();
        if let Some(az) = availability_zone {
            meta.insert(AZ_KEY.to_owned(), az.map(str::to_owned));
        }
        self.aggregate_write(id, name, &meta).await
    }

    /// Sets metadata keys (`None` deletes the key), in one transaction.
    pub async fn aggregate_set_metadata(
        &self,
        id: i64,
        metadata: &BTreeMap<String, Option<String>>,
    ) -> Result<Result<(), AggregateRefused>, Error> {
        self.aggregate_write(id, None, metadata).await
    }

    async fn aggregate_write(
        &self,
        id: i64,
        name: Option<&str>,
        metadata: &BTreeMap<String, Option<String>>,
    ) -> Result<Result<(), AggregateRefused>, Error> {
        let now = Utc::now();
        let res: Result<bool, Error> = with_pool!(self.pool(), p => async {
            let mut tx = measured("begin", p.begin_write()).await?;
            let n = measured("aggregate_touch", sqlx::query(
                "UPDATE aggregates SET name = COALESCE($1, name), updated_at = $2 WHERE id = $3")
                .bind(name).bind(now).bind(id).execute(&mut *tx)).await?.rows_affected();
            if n == 0 {
                return Ok(false);
            }
            for (k, v) in metadata {
                measured("aggregate_metadata_delete", sqlx::query(
                    "DELETE FROM aggregate_metadata WHERE aggregate_id = $1 AND key = $2")
                    .bind(id).bind(k).execute(&mut *tx)).await?;
                if let Some(v) = v {
                    measured("aggregate_metadata_insert", sqlx::query(
                        "INSERT INTO aggregate_metadata (aggregate_id, key, value, created_at) \
                         VALUES ($1, $2, $3, $4)")
                        .bind(id).bind(k).bind(v).bind(now).execute(&mut *tx)).await?;
                }
            }
            measured("commit", tx.commit()).await?;
            Ok(true)
        }.await);
        match res {
            Ok(true) => Ok(Ok(())),
            Ok(false) => Ok(Err(AggregateRefused::NotFound)),
            Err(e) if is_unique(&e) => Ok(Err(AggregateRefused::NameExists)),
            Err(e) => Err(e),
        }
    }

    /// Deletes an aggregate without hosts (and its metadata).
    pub async fn aggregate_delete(&self, id: i64) -> Result<Result<(), AggregateRefused>, Error> {
        with_pool!(self.pool(), p => {
            let mut tx = measured("begin", p.begin_write()).await?;
            let exists: Option<i64> = measured("aggregate_get", sqlx::query_scalar(
                "SELECT id FROM aggregates WHERE id = $1").bind(id).fetch_optional(&mut *tx)).await?;
            if exists.is_none() {
                return Ok(Err(AggregateRefused::NotFound));
            }
            let hosts: i64 = measured("aggregate_count_hosts", sqlx::query_scalar(
                "SELECT COUNT(*) FROM aggregate_hosts WHERE aggregate_id = $1")
                .bind(id).fetch_one(&mut *tx)).await?;
            if hosts > 0 {
                return Ok(Err(AggregateRefused::NotEmpty));
            }
            measured("aggregate_metadata_clear", sqlx::query(
                "DELETE FROM aggregate_metadata WHERE aggregate_id = $1")
                .bind(id).execute(&mut *tx)).await?;
            measured("aggregate_delete", sqlx::query("DELETE FROM aggregates WHERE id = $1")
                .bind(id).execute(&mut *tx)).await?;
            measured("commit", tx.commit()).await?;
        });
        Ok(Ok(()))
    }

    /// Adds `host` to an aggregate.
    pub async fn aggregate_add_host(
        &self,
        id: i64,
        host: &str,
    ) -> Result<Result<(), AggregateRefused>, Error> {
        if self.aggregate(id).await?.is_none() {
            return Ok(Err(AggregateRefused::NotFound));
        }
        let res = with_pool!(self.pool(), p => {
            measured("aggregate_host_insert", sqlx::query(
                "INSERT INTO aggregate_hosts (aggregate_id, host, created_at) VALUES ($1, $2, $3)")
                .bind(id).bind(host).bind(Utc::now()).execute(p)).await.map(|_| ())
        });
        match res {
            Ok(_) => Ok(Ok(())),
            Err(e) if is_unique(&e) => Ok(Err(AggregateRefused::HostExists)),
            // The aggregate was deleted meanwhile (foreign key).
            Err(Error::Db { source, .. })
                if source
                    .as_database_error()
                    .is_some_and(|d| d.kind() == sqlx::error::ErrorKind::ForeignKeyViolation) =>
            {
                Ok(Err(AggregateRefused::NotFound))
            }
            Err(e) => Err(e),
        }
    }

    /// Removes `host` from an aggregate.
    pub async fn aggregate_remove_host(
        &self,
        id: i64,
        host: &str,
    ) -> Result<Result<(), AggregateRefused>, Error> {
        if self.aggregate(id).await?.is_none() {
            return Ok(Err(AggregateRefused::NotFound));
        }
        let n = with_pool!(self.pool(), p => {
            measured("aggregate_host_delete", sqlx::query(
                "DELETE FROM aggregate_hosts WHERE aggregate_id = $1 AND host = $2")
                .bind(id).bind(host).execute(p)).await?.rows_affected()
        });
        Ok(if n == 0 {
            Err(AggregateRefused::HostNotFound)
        } else {
            Ok(())
        })
    }

    /// The aggregates `host` is in.
    pub async fn host_aggregates(&self, host: &str) -> Result<Vec<Aggregate>, Error> {
        let ids: Vec<i64> = with_pool!(self.pool(), p => {
            measured("host_aggregates", sqlx::query_scalar(
                "SELECT aggregate_id FROM aggregate_hosts WHERE host = $1").bind(host).fetch_all(p)).await?
        });
        Ok(self
            .aggregates(None)
            .await?
            .into_iter()
            .filter(|a| ids.contains(&a.id))
            .collect())
    }
}
