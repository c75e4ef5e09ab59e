//! `/resource_providers/{uuid}/usages` and `/usages` (1.9; consumer types 1.38).

use std::collections::BTreeMap;

use axum::extract::{Path, RawQuery, State};
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde_json::{json, Value};

use super::query::Query;
use super::resource_providers::load_provider;
use super::AppState;
use crate::auth::Caller;
use crate::error::{PlacementError, Result};
use crate::microversion::Microversion;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/resource_providers/{uuid}/usages", get(provider_usages))
        .route("/usages", get(project_usages))
}

async fn provider_usages(
    State(st): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(uuid): Path<String>,
) -> Result<Json<Value>> {
    caller.authorize("placement:resource_providers:usages")?;
    let row = load_provider(&st, &uuid).await?;
    let usages = st.placement.db.provider_usages(row.id).await?;
    Ok(Json(
        json!({"usages": usages, "resource_provider_generation": row.generation}),
    ))
}

async fn project_usages(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>> {
    if !mv.at_least(9) {
        return Err(PlacementError::not_found(
            "The resource could not be found.",
        ));
    }
    caller.authorize("placement:usages")?;
    let q = Query::parse(raw.as_deref())?;
    let allowed: &[&str] = if mv.at_least(38) {
        &["project_id", "user_id", "consumer_type"]
    } else {
        &["project_id", "user_id"]
    };
    q.only(allowed)?;
    let project = q.one("project_id")?.ok_or_else(|| {
        PlacementError::bad_request(
            "Invalid query string parameters: 'project_id' is a required property",
        )
    })?;
    let user = q.one("user_id")?;
    for (name, v) in [("project_id", Some(project)), ("user_id", user)] {
        let Some(v) = v else { continue };
        if v.is_empty() {
            return Err(PlacementError::bad_request(format!(
                "Invalid query string parameters: '{v}' is too short\n\nFailed validating 'minLength' in schema['properties']['{name}']"
            )));
        }
        if v.chars().count() > 255 {
            return Err(PlacementError::bad_request(format!(
                "Invalid query string parameters: '{v}' is too long\n\nFailed validating 'maxLength' in schema['properties']['{name}']"
            )));
        }
    }
    let wanted_type = q.one("consumer_type")?;
    let by_type = st.placement.db.project_usages(project, user).await?;
    if !mv.at_least(38) {
        let mut sum: BTreeMap<String, i64> = BTreeMap::new();
        for (_, (_, res)) in by_type {
            for (rc, n) in res {
                *sum.entry(rc).or_default() += n;
            }
        }
        return Ok(Json(json!({"usages": sum})));
    }
    let mut out: BTreeMap<String, Value> = BTreeMap::new();
    let mut all_count = 0;
    let mut all_res: BTreeMap<String, i64> = BTreeMap::new();
    for (t, (count, res)) in by_type {
        let name = t.unwrap_or_else(|| "unknown".to_owned());
        all_count += count;
        for (rc, n) in &res {
            *all_res.entry(rc.clone()).or_default() += n;
        }
        let mut v = json!(res);
        v["consumer_count"] = json!(count);
        out.insert(name, v);
    }
    match wanted_type {
        None => {}
        Some("all") => {
            let mut v = json!(all_res);
            v["consumer_count"] = json!(all_count);
            out = BTreeMap::from([("all".to_owned(), v)]);
        }
        Some(t) => out.retain(|k, _| k == t),
    }
    Ok(Json(json!({"usages": out})))
}
