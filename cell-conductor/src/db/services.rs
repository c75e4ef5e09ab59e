//! `services`: registration and heartbeats (one at a time, or a batch of
//! heartbeats seen in memory: [`CellDb::services_seen`]).

use chrono::{DateTime, Utc};

use migrations::BeginWrite;

use super::{now, on_db, CellDb};
use crate::error::{db, ConductorError, Result};
use crate::metrics::measured;

/// A live service row.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ServiceRow {
    /// `id`.
    pub id: i64,
    /// `uuid`.
    pub uuid: String,
    /// `host`.
    pub host: String,
    /// `binary`.
    pub binary: String,
    /// `topic`.
    pub topic: Option<String>,
    /// `report_count`.
    pub report_count: i64,
    /// `disabled`.
    pub disabled: bool,
    /// `forced_down`.
    pub forced_down: bool,
    /// `last_seen_up`.
    pub last_seen_up: Option<DateTime<Utc>>,
    /// `version`.
    pub version: i64,
}

const COLUMNS: &str =
    "id, uuid, host, \"binary\", topic, report_count, disabled, forced_down, last_seen_up, version";

impl CellDb {
    /// Creates the live service `(host, binary)` or updates its topic and
    /// version; either way it counts as seen up now. Idempotent.
    pub async fn register_service(
        &self,
        host: &str,
        binary: &str,
        topic: &str,
        version: i64,
    ) -> Result<ServiceRow> {
        let update = format!(
            "UPDATE services SET topic = $1, version = $2, last_seen_up = $3, updated_at = $3 \
             WHERE host = $4 AND \"binary\" = $5 AND NOT deleted RETURNING {COLUMNS}"
        );
        let insert = format!(
            "INSERT INTO services (uuid, host, \"binary\", topic, version, last_seen_up, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $6) RETURNING {COLUMNS}"
        );
        // Update, else insert; a concurrent insert of the same service loses
        // on the unique index and updates instead.
        for _ in 0..2 {
            let t = now();
            let row: Option<ServiceRow> = on_db!(self, p => measured("service_update",
                sqlx::query_as(&update).bind(topic).bind(version).bind(t).bind(host).bind(binary)
                    .fetch_optional(p)).await.map_err(db("service_update"))?);
            if let Some(row) = row {
                return Ok(row);
            }
            let uuid = uuid::Uuid::new_v4().to_string();
            let res: std::result::Result<ServiceRow, sqlx::Error> = on_db!(self, p => measured("service_insert",
                sqlx::query_as(&insert).bind(&uuid).bind(host).bind(binary).bind(topic).bind(version).bind(t)
                    .fetch_one(p)).await);
            match res {
                Ok(row) => return Ok(row),
                Err(e) if migrations::unique_violation(&e).is_some() => continue,
                Err(e) => return Err(db("service_insert")(e)),
            }
        }
        Err(ConductorError::ServiceNotFound {
            host: host.to_owned(),
            binary: binary.to_owned(),
        })
    }

    /// Counts one report of the live service `(host, binary)`: bumps
    /// `report_count` and sets `last_seen_up`.
    pub async fn service_heartbeat(&self, host: &str, binary: &str) -> Result<ServiceRow> {
        let sql = format!(
            "UPDATE services SET report_count = report_count + 1, last_seen_up = $1, updated_at = $1 \
             WHERE host = $2 AND \"binary\" = $3 AND NOT deleted RETURNING {COLUMNS}"
        );
        let row: Option<ServiceRow> = on_db!(self, p => measured("service_heartbeat",
            sqlx::query_as(&sql).bind(now()).bind(host).bind(binary).fetch_optional(p))
            .await.map_err(db("service_heartbeat"))?);
        row.ok_or_else(|| ConductorError::ServiceNotFound {
            host: host.to_owned(),
            binary: binary.to_owned(),
        })
    }

    /// Writes a batch of heartbeats seen in memory: each `(host, binary,
    /// when)` bumps `report_count` and moves `last_seen_up` forward to
    /// `when` (never back: two conductors may flush one host's beats out
    /// of order). One statement on PostgreSQL; one transaction on SQLite.
    /// Returns how many rows changed (a service unknown or deleted is
    /// skipped: it registers again).
    pub async fn services_seen(&self, seen: &[(String, String, DateTime<Utc>)]) -> Result<u64> {
        if seen.is_empty() {
            return Ok(0);
        }
        match self {
            CellDb::Pg(stash) => {
                let hosts: Vec<&str> = seen.iter().map(|s| s.0.as_str()).collect();
                let binaries: Vec<&str> = seen.iter().map(|s| s.1.as_str()).collect();
                let times: Vec<DateTime<Utc>> = seen.iter().map(|s| s.2).collect();
                let sql = "UPDATE services AS s SET report_count = s.report_count + 1, \
                     last_seen_up = GREATEST(COALESCE(s.last_seen_up, v.t), v.t), updated_at = v.t \
                     FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS v(host, bin, t) \
                     WHERE s.host = v.host AND s.\"binary\" = v.bin AND NOT s.deleted";
                Ok(measured(
                    "services_seen",
                    sqlx::query(sql)
                        .bind(&hosts)
                        .bind(&binaries)
                        .bind(&times)
                        .execute(stash.pool()),
                )
                .await
                .map_err(db("services_seen"))?
                .rows_affected())
            }
            CellDb::Sqlite(p) => {
                let sql = "UPDATE services SET report_count = report_count + 1, \
                     last_seen_up = CASE WHEN last_seen_up IS NULL OR last_seen_up < $1 THEN $1 \
                     ELSE last_seen_up END, updated_at = $1 \
                     WHERE host = $2 AND \"binary\" = $3 AND NOT deleted";
                let mut tx = p.begin_write().await.map_err(db("begin"))?;
                let mut n = 0;
                for (host, binary, t) in seen {
                    n += measured(
                        "services_seen",
                        sqlx::query(sql)
                            .bind(t)
                            .bind(host)
                            .bind(binary)
                            .execute(&mut *tx),
                    )
                    .await
                    .map_err(db("services_seen"))?
                    .rows_affected();
                }
                tx.commit().await.map_err(db("commit"))?;
                Ok(n)
            }
        }
    }

    /// Live services, by host then binary.
    pub async fn services(&self) -> Result<Vec<ServiceRow>> {
        let sql =
            format!("SELECT {COLUMNS} FROM services WHERE NOT deleted ORDER BY host, \"binary\"");
        Ok(on_db!(self, p => measured("service_list",
            sqlx::query_as(&sql).fetch_all(p)).await.map_err(db("service_list"))?))
    }
}
