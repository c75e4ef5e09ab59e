//! `GET /flavors`, `/flavors/detail`, `/flavors/{id}` (any authenticated
//! caller, as upstream). Private flavors are listed and shown only to the
//! projects given access and to admins; admins filter with `is_public`
//! (`true`, the default: public and accessible; `false`: private only;
//! `none`: all). `description` from 2.55, `extra_specs` from 2.61.

use std::collections::{BTreeMap, HashMap};

use axum::extract::{Path, Query, State};
use axum::{Extension, Json};
use serde_json::{json, Value};

use super::db::Flavor;
use super::error::{ApiError, ApiResult};
use super::{App, Ctx};

fn links(app: &App, id: &str) -> Value {
    let base = app.public_url();
    json!([{"rel": "self", "href": format!("{base}/v2.1/flavors/{id}")},
           {"rel": "bookmark", "href": format!("{base}/flavors/{id}")}])
}

/// The detailed view of a flavor at the request's microversion
/// (`extra_specs`: the flavor's, shown from 2.61).
pub fn detail(
    app: &App,
    ctx: &Ctx,
    f: &Flavor,
    extra_specs: Option<&BTreeMap<String, String>>,
) -> Value {
    let mut v = json!({
        "id": f.flavorid,
        "name": f.name,
        "ram": f.memory_mb,
        "vcpus": f.vcpus,
        "disk": f.root_gb,
        "OS-FLV-EXT-DATA:ephemeral": f.ephemeral_gb,
        "OS-FLV-DISABLED:disabled": f.disabled,
        "swap": if f.swap == 0 { json!("") } else { json!(f.swap) },
        "rxtx_factor": f.rxtx_factor,
        "os-flavor-access:is_public": f.is_public,
        "links": links(app, &f.flavorid),
    });
    if ctx.mv.at_least(55) {
        v["description"] = json!(f.description);
    }
    if ctx.mv.at_least(61) {
        v["extra_specs"] = json!(extra_specs.cloned().unwrap_or_default());
    }
    if ctx.mv.at_least(75) && f.swap == 0 {
        v["swap"] = json!(0);
    }
    v
}

/// The flavor `id` as the caller may see it; 404 otherwise.
pub async fn visible(app: &App, ctx: &Ctx, id: &str) -> ApiResult<Flavor> {
    app.db
        .flavor_visible(id, ctx.project_id(), ctx.is_admin())
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("Flavor {id} could not be found.")))
}

/// Nova's `is_public` filter: only admins choose; others see public and
/// accessible flavors.
fn is_public_filter(ctx: &Ctx, q: &HashMap<String, String>) -> ApiResult<Option<bool>> {
    if !ctx.is_admin() {
        return Ok(Some(true));
    }
    match q.get("is_public").map(|s| s.to_ascii_lowercase()) {
        None => Ok(Some(true)),
        Some(s) if s == "none" => Ok(None),
        Some(s) if matches!(s.as_str(), "1" | "t" | "true" | "on" | "y" | "yes") => Ok(Some(true)),
        Some(s) if matches!(s.as_str(), "0" | "f" | "false" | "off" | "n" | "no") => {
            Ok(Some(false))
        }
        Some(s) => Err(ApiError::BadRequest(format!(
            "Invalid is_public filter [{s}]"
        ))),
    }
}

async fn listed(app: &App, ctx: &Ctx, q: &HashMap<String, String>) -> ApiResult<Vec<Flavor>> {
    let is_public = is_public_filter(ctx, q)?;
    app.db
        .flavors_for(ctx.project_id(), is_public, ctx.is_admin())
        .await
}

/// `GET /flavors`.
pub async fn index(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let flavors = listed(&app, &ctx, &q).await?;
    let list: Vec<Value> = flavors
        .iter()
        .map(|f| {
            let mut v =
                json!({"id": f.flavorid, "name": f.name, "links": links(&app, &f.flavorid)});
            if ctx.mv.at_least(55) {
                v["description"] = json!(f.description);
            }
            v
        })
        .collect();
    Ok(Json(json!({ "flavors": list })))
}

/// `GET /flavors/detail`.
pub async fn index_detail(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let flavors = listed(&app, &ctx, &q).await?;
    let specs = if ctx.mv.at_least(61) {
        let ids: Vec<i64> = flavors.iter().map(|f| f.id).collect();
        app.db.extra_specs(&ids).await?
    } else {
        HashMap::new()
    };
    let list: Vec<Value> = flavors
        .iter()
        .map(|f| detail(&app, &ctx, f, specs.get(&f.id)))
        .collect();
    Ok(Json(json!({ "flavors": list })))
}

/// The detailed view with its extra specs (read only from 2.61).
pub async fn detail_with_specs(app: &App, ctx: &Ctx, f: &Flavor) -> ApiResult<Value> {
    let specs = if ctx.mv.at_least(61) {
        app.db.extra_specs(&[f.id]).await?.remove(&f.id)
    } else {
        None
    };
    Ok(detail(app, ctx, f, specs.as_ref()))
}

/// `GET /flavors/{id}`.
pub async fn show(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let f = visible(&app, &ctx, &id).await?;
    Ok(Json(
        json!({ "flavor": detail_with_specs(&app, &ctx, &f).await? }),
    ))
}
