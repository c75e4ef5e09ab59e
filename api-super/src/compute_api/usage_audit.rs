//! `os-instance_usage_audit_log` (admin): `GET
//! /os-instance_usage_audit_log` and `/{before_timestamp}`, Nova's shape.
//! Nova answers from the `task_log` rows its computes' periodic
//! `_instance_usage_audit` task writes (only with `instance_usage_audit =
//! True`, off by default) for the last completed audit period (a month,
//! Nova's default `instance_usage_audit_period`), beside the compute
//! services of every cell. This region does not build that task, so no
//! host has a task log: the answer is Nova's with the audit off, every
//! compute service's host "not run" (the services read from every cell
//! that answers, disabled ones included, as Nova counts them). The
//! hyphenated path `/os-instance-usage-audit-log` answers the same.

use std::collections::BTreeSet;

use axum::extract::{Path, State};
use axum::{Extension, Json};
use chrono::{Datelike, NaiveDate, NaiveDateTime, Utc};
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::services::{each_cell, COMPUTE_BINARY};
use super::{App, Ctx};

/// Nova's `last_completed_audit_period` for a month (offset 0): the
/// month that ended last before `now`.
fn last_month(now: NaiveDateTime) -> (NaiveDateTime, NaiveDateTime) {
    let first = |y: i32, m: u32| {
        NaiveDate::from_ymd_opt(y, m, 1)
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .unwrap_or(now)
    };
    let before = |y: i32, m: u32| if m == 1 { (y - 1, 12) } else { (y, m - 1) };
    let mut end = first(now.year(), now.month());
    if end >= now {
        let (y, m) = before(now.year(), now.month());
        end = first(y, m);
    }
    let (y, m) = before(end.year(), end.month());
    (first(y, m), end)
}

/// Python's `str(datetime)`.
fn py(t: NaiveDateTime) -> String {
    t.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// The audit of the period before `before` (default now).
async fn audit(app: &App, before: Option<NaiveDateTime>) -> ApiResult<Value> {
    let (begin, end) = last_month(before.unwrap_or_else(|| Utc::now().naive_utc()));
    let per_cell = each_cell(app, |db| async move {
        db.services_list(None, Some(COMPUTE_BINARY)).await
    })
    .await?;
    let hosts: BTreeSet<String> = per_cell
        .into_iter()
        .flat_map(|(_, v)| v)
        .map(|s| s.host)
        .collect();
    // No task logs: no host done, running or in error.
    let done = 0;
    let overall = if done == hosts.len() {
        "ALL hosts done. 0 errors.".to_owned()
    } else {
        format!("{done} of {} hosts done. 0 errors.", hosts.len())
    };
    Ok(json!({
        "period_beginning": py(begin),
        "period_ending": py(end),
        "num_hosts": hosts.len(),
        "num_hosts_done": done,
        "num_hosts_running": 0,
        "num_hosts_not_run": hosts.len(),
        "hosts_not_run": hosts,
        "total_instances": 0,
        "total_errors": 0,
        "overall_status": overall,
        "log": {},
    }))
}

/// `GET /os-instance_usage_audit_log` (admin).
pub async fn index(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
) -> ApiResult<Json<Value>> {
    app.authorize(
        &ctx,
        "os_compute_api:os-instance-usage-audit-log:list",
        ctx.project_id(),
    )?;
    Ok(Json(
        json!({ "instance_usage_audit_logs": audit(&app, None).await? }),
    ))
}

/// `GET /os-instance_usage_audit_log/{before_timestamp}` (admin): the
/// period completed last before `%Y-%m-%d %H:%M:%S[.%f]`; anything else
/// is Nova's 400 "Invalid timestamp for date …".
pub async fn show(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    app.authorize(
        &ctx,
        "os_compute_api:os-instance-usage-audit-log:show",
        ctx.project_id(),
    )?;
    let before = parse_before(&id)
        .ok_or_else(|| ApiError::BadRequest(format!("Invalid timestamp for date {id}")))?;
    Ok(Json(
        json!({ "instance_usage_audit_log": audit(&app, Some(before)).await? }),
    ))
}

/// Nova's two formats: with a fraction when the id has a `.`.
fn parse_before(id: &str) -> Option<NaiveDateTime> {
    if let Some((whole, frac)) = id.split_once('.') {
        if frac.is_empty() || frac.len() > 6 || !frac.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        NaiveDateTime::parse_from_str(whole, "%Y-%m-%d %H:%M:%S").ok()?;
        NaiveDateTime::parse_from_str(id, "%Y-%m-%d %H:%M:%S%.f").ok()
    } else {
        NaiveDateTime::parse_from_str(id, "%Y-%m-%d %H:%M:%S").ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S").unwrap()
    }

    #[test]
    fn the_last_completed_month_is_nova_s() {
        let p = |s: &str| {
            let (b, e) = last_month(t(s));
            (py(b), py(e))
        };
        assert_eq!(
            p("2026-12-07 23:00:00"),
            ("2026-11-01 00:00:00".into(), "2026-12-01 00:00:00".into())
        );
        // The first instant of a month has not completed that month's
        // predecessor yet.
        assert_eq!(
            p("2026-12-01 00:00:00"),
            ("2026-10-01 00:00:00".into(), "2026-11-01 00:00:00".into())
        );
        assert_eq!(
            p("2026-01-15 00:00:00"),
            ("2025-12-01 00:00:00".into(), "2026-01-01 00:00:00".into())
        );
        assert_eq!(
            p("2026-02-01 00:00:00"),
            ("2025-12-01 00:00:00".into(), "2026-01-01 00:00:00".into())
        );
        assert!(parse_before("2012-07-05 10:00:00").is_some());
        assert!(parse_before("2012-07-05 10:00:00.123").is_some());
        assert!(parse_before("2012-07-05T10:00:00").is_none());
        assert!(parse_before("x").is_none());
    }
}
