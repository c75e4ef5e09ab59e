//! `/resource_providers/{uuid}/aggregates` (1.1+; generations at 1.19).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::body::from_parts;
use super::resource_providers::{load_provider, normalize_uuid};
use super::AppState;
use crate::auth::Caller;
use crate::error::{PlacementError, Result};
use crate::microversion::Microversion;

pub fn routes() -> Router<AppState> {
    Router::new().route("/resource_providers/{uuid}/aggregates", get(show).put(set))
}

fn gate(mv: Microversion) -> Result<()> {
    if mv.at_least(1) {
        Ok(())
    } else {
        Err(PlacementError::not_found(
            "The resource could not be found.",
        ))
    }
}

fn body_json(mv: Microversion, aggs: Vec<String>, generation: i64) -> Value {
    if mv.at_least(19) {
        json!({"aggregates": aggs, "resource_provider_generation": generation})
    } else {
        json!({"aggregates": aggs})
    }
}

async fn show(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
    Path(uuid): Path<String>,
) -> Result<Json<Value>> {
    gate(mv)?;
    caller.authorize("placement:resource_providers:aggregates:list")?;
    let row = load_provider(&st, &uuid).await?;
    let aggs = st.placement.db.provider_aggregates(row.id).await?;
    Ok(Json(body_json(mv, aggs, row.generation)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetBody {
    aggregates: Vec<String>,
    resource_provider_generation: i64,
}

async fn set(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
    Path(uuid): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Json<Value>> {
    gate(mv)?;
    caller.authorize("placement:resource_providers:aggregates:update")?;
    let row = load_provider(&st, &uuid).await?;
    let (aggs, seen) = if mv.at_least(19) {
        let b: SetBody = from_parts(&headers, &bytes)?.0;
        (b.aggregates, Some(b.resource_provider_generation))
    } else {
        let list: Vec<String> = from_parts(&headers, &bytes)?.0;
        (list, None)
    };
    let mut normalized = Vec::with_capacity(aggs.len());
    for a in &aggs {
        normalized.push(normalize_uuid(a, "aggregates")?);
    }
    let mut dedup = normalized.clone();
    dedup.sort();
    dedup.dedup();
    if dedup.len() != normalized.len() {
        return Err(PlacementError::bad_request(
            "JSON does not validate: aggregates has non-unique elements",
        ));
    }
    let generation = st
        .placement
        .db
        .set_provider_aggregates(&row, seen, &normalized)
        .await?;
    st.placement
        .refresh(std::slice::from_ref(&row.uuid))
        .await?;
    // Upstream answers with the list as sent (its order, its spelling).
    Ok(Json(body_json(mv, aggs, generation)))
}
