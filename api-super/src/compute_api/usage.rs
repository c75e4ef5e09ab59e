//! `os-simple-tenant-usage`: `GET /os-simple-tenant-usage` (admin, every
//! project; `detailed=1` adds each server) and
//! `GET /os-simple-tenant-usage/{project_id}` (a member: its own project),
//! over `start` … `end` (default: now; an end after now is now, as Nova
//! clips it). Computed as Nova does from the instances of every cell: an
//! instance counts from its `launched_at` (or the period's start) to its
//! `terminated_at` (or the period's end); never-launched instances count
//! nothing. Instances are read in Nova's order (project, uuid), cell after
//! cell, at most the API's largest page; from 2.40 a page is `limit`
//! instances after `marker` (an instance uuid; in no cell: 400 "Marker …
//! could not be found."), with a `next` link (`tenant_usages_links`,
//! `tenant_usage_links`) when `limit` was given and the page is full. A
//! cell that does not answer is left out and logged, as upstream.

use std::collections::BTreeMap;

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

/// The instances active in the period (`$1` end, `$2` start), of one
/// project (`$3`, '' for all), after the marker's `(project_id, uuid)`
/// (`$5`, `$4`; `$4` '' for none), at most `$6`: Nova's
/// `instance_get_active_by_window_joined`, paged by project and uuid.
const SQL: &str = "SELECT i.uuid, i.project_id, i.display_name, i.vm_state, i.launched_at, \
     i.terminated_at, e.flavor, i.memory_mb, i.vcpus, i.root_gb, i.ephemeral_gb \
     FROM instances i LEFT JOIN instance_extra e ON e.instance_uuid = i.uuid \
     WHERE i.launched_at IS NOT NULL AND i.launched_at < $1 \
     AND (i.terminated_at IS NULL OR i.terminated_at > $2) \
     AND ($3 = '' OR i.project_id = $3) \
     AND ($4 = '' OR i.project_id > $5 OR (i.project_id = $5 AND i.uuid > $4)) \
     ORDER BY i.project_id, i.uuid LIMIT $6";

/// The marker instance's project, if the cell has it (deleted or not).
const MARKER_SQL: &str = "SELECT project_id FROM instances WHERE uuid = $1";

/// A page's bounds: the marker (uuid) and the most instances.
#[derive(Debug, Clone, Default)]
struct Page {
    marker: Option<String>,
    limit: i64,
}

/// The rows of one cell after `page`'s marker; `None` when the cell does
/// not hold the marker.
async fn rows_of(
    pool: &Pool,
    start: DateTime<Utc>,
    stop: DateTime<Utc>,
    project: &str,
    marker: Option<&str>,
    limit: i64,
) -> Result<Option<Vec<UsageRow>>, sqlx::Error> {
    let marker_project: String = match marker {
        Some(m) => {
            let p: Option<Option<String>> = match pool {
                Pool::Postgres(p) => {
                    sqlx::query_scalar(MARKER_SQL)
                        .bind(m)
                        .fetch_optional(p)
                        .await?
                }
                Pool::Sqlite(p) => {
                    sqlx::query_scalar(MARKER_SQL)
                        .bind(m)
                        .fetch_optional(p)
                        .await?
                }
            };
            match p {
                Some(p) => p.unwrap_or_default(),
                None => return Ok(None),
            }
        }
        None => String::new(),
    };
    let marker = marker.unwrap_or("");
    let rows = match pool {
        Pool::Postgres(p) => {
            sqlx::query_as(SQL)
                .bind(stop)
                .bind(start)
                .bind(project)
                .bind(marker)
                .bind(&marker_project)
                .bind(limit)
                .fetch_all(p)
                .await?
        }
        Pool::Sqlite(p) => {
            sqlx::query_as(SQL)
                .bind(stop)
                .bind(start)
                .bind(project)
                .bind(marker)
                .bind(&marker_project)
                .bind(limit)
                .fetch_all(p)
                .await?
        }
    };
    Ok(Some(rows))
}

/// Instances active in the period, cell after cell as Nova's
/// `_get_instances_all_cells` pages them: the cells before the one holding
/// the marker are skipped, the page continues in the cells after it until
/// `limit` instances. A cell that does not answer is left out and logged.
/// 400 when no cell holds the marker.
async fn active(
    app: &App,
    start: DateTime<Utc>,
    stop: DateTime<Utc>,
    project: &str,
    page: &Page,
) -> ApiResult<Vec<UsageRow>> {
    let cells = app.cells.all();
    let mut marker = page.marker.clone();
    let mut limit = page.limit;
    let mut out = Vec::new();
    for cell in cells.iter() {
        let read = async {
            let db = app.cells.db(cell).await.map_err(|e| e.to_string())?;
            rows_of(db.pool(), start, stop, project, marker.as_deref(), limit)
                .await
                .map_err(|e| e.to_string())
        };
        match read.await {
            Ok(Some(rows)) => {
                marker = None;
                limit -= rows.len() as i64;
                out.extend(rows);
                if limit <= 0 && page.limit > 0 {
                    break;
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(cell = %cell.uuid, error = %e, "cell left out of the usage: it did not answer")
            }
        }
    }
    if let Some(m) = marker {
        if out.is_empty() {
            return Err(ApiError::BadRequest(format!(
                "Marker {m} could not be found."
            )));
        }
    }
    Ok(out)
}

/// The page asked for: from 2.40 `limit` (at most the API's largest page)
/// and `marker`; below, the largest page (Nova's `max_limit`).
fn page_of(app: &App, ctx: &Ctx, q: &[(String, String)]) -> ApiResult<Page> {
    let max = app.max_limit as i64;
    if !ctx.mv.at_least(40) {
        return Ok(Page {
            marker: None,
            limit: max,
        });
    }
    let get = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let limit = match get("limit") {
        None => max,
        Some(s) => match s.parse::<i64>() {
            Ok(n) if n >= 0 && s.bytes().all(|b| b.is_ascii_digit()) => n.min(max),
            _ => {
                return Err(ApiError::BadRequest(format!(
                    "Invalid input for query parameters limit. Value: {s}. '{s}' does not match '^[0-9]*$'"
                )))
            }
        },
    };
    Ok(Page {
        marker: get("marker").map(str::to_owned),
        limit,
    })
}

/// Nova's `_get_collection_links`: a `next` link when `limit` was given
/// and the page holds that many instances, its marker the page's last
/// instance, the request's other parameters kept in their order.
fn links(app: &App, coll: &str, q: &[(String, String)], rows: &[UsageRow]) -> Option<Value> {
    let asked: i64 = q
        .iter()
        .find(|(k, _)| k == "limit")
        .and_then(|(_, v)| v.parse().ok())?;
    let last = rows.last()?;
    if asked == 0 || asked != rows.len() as i64 {
        return None;
    }
    let mut params: Vec<(String, String)> =
        q.iter().filter(|(k, _)| k != "marker").cloned().collect();
    params.push(("marker".into(), last.uuid.clone()));
    let query: Vec<String> = params
        .iter()
        .map(|(k, v)| format!("{}={}", urlencode(k), urlencode(v)))
        .collect();
    Some(json!([{"rel": "next", "href": format!(
        "{}/v2.1/{coll}?{}", app.public_url(), query.join("&"))}]))
}

/// Python's `urlencode` (`quote_plus`) of one key or value.
fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b' ' => "+".to_owned(),
            _ => format!("%{b:02X}"),
        })
        .collect()
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

/// The period asked for, its end no later than now (Nova clips it), and
/// `detailed`.
fn period(q: &[(String, String)]) -> ApiResult<(DateTime<Utc>, DateTime<Utc>, bool)> {
    let get = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let start = parse_time("start", get("start").as_ref())?;
    let stop = parse_time("end", get("end").as_ref())?;
    if start >= stop {
        return Err(ApiError::BadRequest(
            "Invalid start time. The start time cannot occur after the end time.".into(),
        ));
    }
    Ok((
        start,
        stop.min(Utc::now()),
        get("detailed").is_some_and(|d| d == "1"),
    ))
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

/// `GET /os-simple-tenant-usage` (admin); from 2.40 paged (`limit`,
/// `marker`, `tenant_usages_links`).
pub async fn index(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Query(q): Query<Vec<(String, String)>>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::USAGE_LIST.check(ctx.mv, raw.as_deref())?;
    app.authorize(
        &ctx,
        "os_compute_api:os-simple-tenant-usage:list",
        ctx.project_id(),
    )?;
    let (start, stop, detailed) = period(&q)?;
    let page = page_of(&app, &ctx, &q)?;
    let rows = active(&app, start, stop, "", &page).await?;
    let mut body = json!({ "tenant_usages": summarize(&rows, start, stop, detailed) });
    if ctx.mv.at_least(40) {
        if let Some(l) = links(&app, "os-simple-tenant-usage", &q, &rows) {
            body["tenant_usages_links"] = l;
        }
    }
    Ok(Json(body))
}

/// `GET /os-simple-tenant-usage/{project_id}` (a member: its own); from
/// 2.40 paged (`limit`, `marker`, `tenant_usage_links`).
pub async fn show(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(project): Path<String>,
    Query(q): Query<Vec<(String, String)>>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::USAGE_SHOW.check(ctx.mv, raw.as_deref())?;
    app.authorize(&ctx, "os_compute_api:os-simple-tenant-usage:show", &project)?;
    let (start, stop, _) = period(&q)?;
    if project.is_empty() {
        return Ok(Json(json!({"tenant_usage": {}})));
    }
    let page = page_of(&app, &ctx, &q)?;
    let rows = active(&app, start, stop, &project, &page).await?;
    let usage = summarize(&rows, start, stop, true)
        .into_iter()
        .next()
        .unwrap_or_else(|| json!({}));
    let mut body = json!({ "tenant_usage": usage });
    if ctx.mv.at_least(40) {
        let coll = format!("os-simple-tenant-usage/{project}");
        if let Some(l) = links(&app, &coll, &q, &rows) {
            body["tenant_usage_links"] = l;
        }
    }
    Ok(Json(body))
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
