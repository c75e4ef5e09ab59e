//! `os-simple-tenant-usage`: `GET /os-simple-tenant-usage` (admin, every
//! project; `detailed=1` adds each server) and
//! `GET /os-simple-tenant-usage/{project_id}` (a member: its own project),
//! over `start` … `end` (default: now). Computed as Nova does from the
//! instances of every cell, read in parallel: an instance counts from its
//! `launched_at` (or the period's start) to its `terminated_at` (or the
//! period's end); never-launched instances count nothing. A cell that does
//! not answer is left out and logged, as upstream. Paging (2.40
//! `limit`/`marker`) is not built: every matching instance is returned.

use std::collections::{BTreeMap, HashMap};

use axum::extract::{Path, Query, RawQuery, State};
use axum::{Extension, Json};
use cell_mapping::db::{InstanceFlavor, Pool};
use chrono::{DateTime, NaiveDateTime, Utc};
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::query_schema;
use super::{App, Ctx};

/// One instance as the usage needs it.
#[derive(Debug, Clone, sqlx::FromRow)]
struct UsageRow {
    uuid: String,
    project_id: String,
    display_name: Option<String>,
    vm_state: Option<String>,
    launched_at: Option<DateTime<Utc>>,
    terminated_at: Option<DateTime<Utc>>,
    flavor: Option<String>,
    memory_mb: Option<i64>,
    vcpus: Option<i64>,
    root_gb: Option<i64>,
    ephemeral_gb: Option<i64>,
}

const SQL: &str = "SELECT i.uuid, i.project_id, i.display_name, i.vm_state, i.launched_at, \
     i.terminated_at, e.flavor, i.memory_mb, i.vcpus, i.root_gb, i.ephemeral_gb \
     FROM instances i LEFT JOIN instance_extra e ON e.instance_uuid = i.uuid \
     WHERE i.launched_at IS NOT NULL AND i.launched_at < $1 \
     AND (i.terminated_at IS NULL OR i.terminated_at > $2) \
     AND ($3 = '' OR i.project_id = $3) ORDER BY i.created_at, i.uuid";

async fn rows_of(
    pool: &Pool,
    start: DateTime<Utc>,
    stop: DateTime<Utc>,
    project: &str,
) -> Result<Vec<UsageRow>, sqlx::Error> {
    match pool {
        Pool::Postgres(p) => {
            sqlx::query_as(SQL)
                .bind(stop)
                .bind(start)
                .bind(project)
                .fetch_all(p)
                .await
        }
        Pool::Sqlite(p) => {
            sqlx::query_as(SQL)
                .bind(stop)
                .bind(start)
                .bind(project)
                .fetch_all(p)
                .await
        }
    }
}

/// Instances active in the period, from every cell that answers.
async fn active(
    app: &App,
    start: DateTime<Utc>,
    stop: DateTime<Utc>,
    project: &str,
) -> ApiResult<Vec<UsageRow>> {
    let cells = app.cells.all();
    let reads = cells.iter().map(|cell| async move {
        let db = app.cells.db(cell).await.map_err(|e| e.to_string())?;
        rows_of(db.pool(), start, stop, project)
            .await
            .map_err(|e| e.to_string())
    });
    let mut out = Vec::new();
    for (cell, r) in cells
        .iter()
        .zip(futures_util::future::join_all(reads).await)
    {
        match r {
            Ok(rows) => out.extend(rows),
            Err(e) => {
                tracing::warn!(cell = %cell.uuid, error = %e, "cell left out of the usage: it did not answer")
            }
        }
    }
    Ok(out)
}

/// Nova's accepted forms; empty: now.
fn parse_time(key: &str, v: Option<&String>) -> ApiResult<DateTime<Utc>> {
    let Some(s) = v.filter(|s| !s.is_empty()) else {
        return Ok(Utc::now());
    };
    for fmt in [
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, fmt) {
            return Ok(t.and_utc());
        }
    }
    // Also an explicit offset (e.g. `...Z`, as some clients send).
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    Err(ApiError::BadRequest(format!(
        "Invalid {key} time: Datetime is in invalid format"
    )))
}

fn period(q: &HashMap<String, String>) -> ApiResult<(DateTime<Utc>, DateTime<Utc>, bool)> {
    let start = parse_time("start", q.get("start"))?;
    let stop = parse_time("end", q.get("end"))?;
    if start >= stop {
        return Err(ApiError::BadRequest(
            "Invalid start time. The start time cannot occur after the end time.".into(),
        ));
    }
    Ok((start, stop, q.get("detailed").is_some_and(|d| d == "1")))
}

fn ts(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6f").to_string()
}

fn hours(r: &UsageRow, start: DateTime<Utc>, stop: DateTime<Utc>) -> f64 {
    let Some(launched) = r.launched_at else {
        return 0.0;
    };
    if r.terminated_at.is_some_and(|t| t < start) || launched > stop {
        return 0.0;
    }
    let from = launched.max(start);
    let to = r.terminated_at.map_or(stop, |t| t.min(stop));
    ((to - from).num_milliseconds() as f64 / 3_600_000.0).max(0.0)
}

/// Per-project summaries (with each server's usage when `detailed`).
fn summarize(
    rows: &[UsageRow],
    start: DateTime<Utc>,
    stop: DateTime<Utc>,
    detailed: bool,
) -> Vec<Value> {
    let now = Utc::now();
    let mut by_project: BTreeMap<String, Value> = BTreeMap::new();
    for r in rows {
        let f: Option<InstanceFlavor> = r
            .flavor
            .as_deref()
            .and_then(|s| serde_json::from_str(s).ok());
        let memory_mb = f.as_ref().map_or(r.memory_mb.unwrap_or(0), |f| f.memory_mb);
        let vcpus = f.as_ref().map_or(r.vcpus.unwrap_or(0), |f| f.vcpus);
        let local_gb = f
            .as_ref()
            .map_or(r.root_gb.unwrap_or(0) + r.ephemeral_gb.unwrap_or(0), |f| {
                f.root_gb + f.ephemeral_gb
            });
        let h = hours(r, start, stop);
        let started = r.launched_at.unwrap_or(start);
        let (state, uptime) = match r.terminated_at {
            Some(t) => ("terminated".to_owned(), (t - started).num_seconds()),
            None => (
                r.vm_state.clone().unwrap_or_default(),
                (now - started).num_seconds(),
            ),
        };
        let summary = by_project.entry(r.project_id.clone()).or_insert_with(|| {
            let mut s = json!({
                "tenant_id": r.project_id,
                "total_local_gb_usage": 0.0,
                "total_vcpus_usage": 0.0,
                "total_memory_mb_usage": 0.0,
                "total_hours": 0.0,
                "start": ts(start),
                "stop": ts(stop),
            });
            if detailed {
                s["server_usages"] = json!([]);
            }
            s
        });
        let add = |s: &mut Value, k: &str, v: f64| {
            s[k] = json!(s[k].as_f64().unwrap_or(0.0) + v);
        };
        add(summary, "total_local_gb_usage", local_gb as f64 * h);
        add(summary, "total_vcpus_usage", vcpus as f64 * h);
        add(summary, "total_memory_mb_usage", memory_mb as f64 * h);
        add(summary, "total_hours", h);
        if detailed {
            let info = json!({
                "instance_id": r.uuid,
                "name": r.display_name.clone().unwrap_or_default(),
                "tenant_id": r.project_id,
                "hours": h,
                "memory_mb": memory_mb,
                "local_gb": local_gb,
                "vcpus": vcpus,
                "flavor": f.as_ref().map(|f| f.name.clone()).unwrap_or_default(),
                "started_at": ts(started),
                "ended_at": r.terminated_at.map(ts),
                "state": state,
                "uptime": uptime,
            });
            if let Some(list) = summary["server_usages"].as_array_mut() {
                list.push(info);
            }
        }
    }
    by_project.into_values().collect()
}

/// `GET /os-simple-tenant-usage` (admin).
pub async fn index(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Query(q): Query<HashMap<String, String>>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::USAGE_LIST.check(ctx.mv, raw.as_deref())?;
    app.authorize(
        &ctx,
        "os_compute_api:os-simple-tenant-usage:list",
        ctx.project_id(),
    )?;
    let (start, stop, detailed) = period(&q)?;
    let rows = active(&app, start, stop, "").await?;
    Ok(Json(
        json!({ "tenant_usages": summarize(&rows, start, stop, detailed) }),
    ))
}

/// `GET /os-simple-tenant-usage/{project_id}` (a member: its own).
pub async fn show(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(project): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::USAGE_SHOW.check(ctx.mv, raw.as_deref())?;
    app.authorize(&ctx, "os_compute_api:os-simple-tenant-usage:show", &project)?;
    let (start, stop, _) = period(&q)?;
    if project.is_empty() {
        return Ok(Json(json!({"tenant_usage": {}})));
    }
    let rows = active(&app, start, stop, &project).await?;
    let usage = summarize(&rows, start, stop, true)
        .into_iter()
        .next()
        .unwrap_or_else(|| json!({}));
    Ok(Json(json!({ "tenant_usage": usage })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn row(launched: Option<i64>, terminated: Option<i64>) -> UsageRow {
        let t = |h: i64| {
            Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap() + chrono::Duration::hours(h)
        };
        UsageRow {
            uuid: "u".into(),
            project_id: "p".into(),
            display_name: Some("n".into()),
            vm_state: Some("active".into()),
            launched_at: launched.map(t),
            terminated_at: terminated.map(t),
            flavor: None,
            memory_mb: Some(512),
            vcpus: Some(2),
            root_gb: Some(1),
            ephemeral_gb: Some(1),
        }
    }

    #[test]
    fn hours_are_clipped_to_the_period() {
        let t = |h: i64| {
            Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap() + chrono::Duration::hours(h)
        };
        let (start, stop) = (t(10), t(20));
        assert_eq!(hours(&row(Some(0), None), start, stop), 10.0);
        assert_eq!(hours(&row(Some(12), None), start, stop), 8.0);
        assert_eq!(hours(&row(Some(12), Some(15)), start, stop), 3.0);
        assert_eq!(hours(&row(Some(0), Some(5)), start, stop), 0.0);
        assert_eq!(hours(&row(Some(25), None), start, stop), 0.0);
        assert_eq!(hours(&row(None, None), start, stop), 0.0);
        let s = summarize(&[row(Some(12), Some(15))], start, stop, true);
        assert_eq!(s[0]["total_vcpus_usage"], 6.0);
        assert_eq!(s[0]["total_memory_mb_usage"], 1536.0);
        assert_eq!(s[0]["total_local_gb_usage"], 6.0);
        assert_eq!(s[0]["server_usages"][0]["state"], "terminated");
        assert_eq!(s[0]["server_usages"][0]["uptime"], 3 * 3600);
    }
}
