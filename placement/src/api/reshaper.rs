//! `POST /reshaper` (1.30; allocation `mappings` 1.34, `consumer_type`
//! 1.38): replace the inventories of some providers and the allocations of
//! some consumers in one transaction (see `db::reshaper`).

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Extension, Router};
use serde::Deserialize;

use super::allocations::{check_writes, consumer_write, ConsumerBody};
use super::body::{from_parts, schema_error};
use super::inventories::InvFields;
use super::resource_providers::normalize_uuid;
use super::AppState;
use crate::auth::Caller;
use crate::db::reshaper::InventoryReplace;
use crate::error::{PlacementError, Result};
use crate::microversion::Microversion;

pub fn routes() -> Router<AppState> {
    Router::new().route("/reshaper", post(reshape))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderInventories {
    resource_provider_generation: i64,
    inventories: BTreeMap<String, InvFields>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReshapeBody {
    inventories: BTreeMap<String, ProviderInventories>,
    allocations: BTreeMap<String, ConsumerBody>,
}

/// A key of `inventories` or `allocations`: upstream's schema pattern.
fn uuid_key(key: &str, property: &str) -> Result<String> {
    normalize_uuid(key, property).map_err(|_| {
        schema_error(
            format!("'{key}' does not match any of the regexes: '^[0-9a-fA-F-]{{36}}$'"),
            "additionalProperties",
            &[property],
        )
    })
}

async fn reshape(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<StatusCode> {
    if !mv.at_least(30) {
        return Err(PlacementError::not_found(
            "The resource could not be found.",
        ));
    }
    caller.authorize("placement:reshaper:reshape")?;
    let body: ReshapeBody = from_parts(&headers, &bytes)?.0;

    let mut inventories = Vec::with_capacity(body.inventories.len());
    let mut classes: Vec<String> = Vec::new();
    for (key, p) in body.inventories {
        let uuid = uuid_key(&key, "inventories")?;
        let mut new = BTreeMap::new();
        for (class, fields) in &p.inventories {
            new.insert(class.clone(), fields.validate(class, &uuid, mv, "update")?);
            classes.push(class.clone());
        }
        inventories.push(InventoryReplace {
            uuid,
            generation: p.resource_provider_generation,
            inventories: new,
        });
    }
    let mut writes = Vec::with_capacity(body.allocations.len());
    for (key, b) in body.allocations {
        let consumer = uuid_key(&key, "allocations")?;
        writes.push(consumer_write(consumer, b, mv, true)?);
    }
    classes.extend(check_writes(&writes)?);
    classes.sort();
    classes.dedup();
    let class_ids = st
        .placement
        .class_ids_for(classes.iter(), |c| {
            format!("malformed reshaper data: No such resource class {c}.")
        })
        .await?;

    let touched = st
        .placement
        .db
        .reshape(&inventories, &writes, &class_ids)
        .await?;
    st.placement.refresh(&touched).await?;
    Ok(StatusCode::NO_CONTENT)
}
