//! `GET /flavors`, `/flavors/detail`, `/flavors/{id}` (any authenticated
//! caller, as upstream).

use axum::extract::{Path, State};
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

/// The detailed view of a flavor at the request's microversion.
pub fn detail(app: &App, ctx: &Ctx, f: &Flavor) -> Value {
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
        v["extra_specs"] = json!({});
    }
    if ctx.mv.at_least(75) && f.swap == 0 {
        v["swap"] = json!(0);
    }
    v
}

/// `GET /flavors`.
pub async fn index(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
) -> ApiResult<Json<Value>> {
    let flavors = app.db.flavors().await?;
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
) -> ApiResult<Json<Value>> {
    let flavors = app.db.flavors().await?;
    let list: Vec<Value> = flavors.iter().map(|f| detail(&app, &ctx, f)).collect();
    Ok(Json(json!({ "flavors": list })))
}

/// `GET /flavors/{id}`.
pub async fn show(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let f = app
        .db
        .flavor(&id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("Flavor {id} could not be found.")))?;
    Ok(Json(json!({ "flavor": detail(&app, &ctx, &f) })))
}
