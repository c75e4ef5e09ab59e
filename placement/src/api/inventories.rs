//! `/resource_providers/{uuid}/inventories[/{resource_class}]`.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::body::schema_error;
use super::resource_providers::load_provider;
use super::{AppState, JsonBody};
use crate::auth::Caller;
use crate::db::inventories::Upsert;
use crate::db::providers::ProviderRow;
use crate::engine::Inventory;
use crate::error::{PlacementError, Result};
use crate::microversion::Microversion;

/// Upstream's largest integer for inventory fields.
pub const MAX_INT: i64 = 0x7FFF_FFFF;
/// Upstream's largest allocation ratio (a single-precision float).
const MAX_RATIO: f64 = 3.40282e38;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/resource_providers/{uuid}/inventories",
            get(list).put(replace).post(create).delete(delete_all),
        )
        .route(
            "/resource_providers/{uuid}/inventories/{rc}",
            get(show).put(update).delete(delete_one),
        )
}

fn d_reserved() -> i64 {
    0
}
fn d_one() -> i64 {
    1
}
fn d_max() -> i64 {
    MAX_INT
}
fn d_ratio() -> f64 {
    1.0
}

/// One inventory's fields as a request body carries them (defaults as upstream).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct InvFields {
    total: i64,
    #[serde(default = "d_reserved")]
    reserved: i64,
    #[serde(default = "d_one")]
    min_unit: i64,
    #[serde(default = "d_max")]
    max_unit: i64,
    #[serde(default = "d_one")]
    step_size: i64,
    #[serde(default = "d_ratio")]
    allocation_ratio: f64,
}

impl InvFields {
    /// Checks the fields (upstream's schema and rules) into an inventory.
    pub(super) fn validate(
        &self,
        class: &str,
        uuid: &str,
        mv: Microversion,
        action: &str,
    ) -> Result<Inventory> {
        let range = |name: &str, v: i64, min: i64| -> Result<()> {
            if v < min {
                return Err(schema_error(
                    format!("{v} is less than the minimum of {min}"),
                    "minimum",
                    &[name],
                ));
            }
            if v > MAX_INT {
                return Err(schema_error(
                    format!("{v} is greater than the maximum of {MAX_INT}"),
                    "maximum",
                    &[name],
                ));
            }
            Ok(())
        };
        range("total", self.total, 1)?;
        range("reserved", self.reserved, 0)?;
        range("min_unit", self.min_unit, 1)?;
        range("max_unit", self.max_unit, 1)?;
        range("step_size", self.step_size, 1)?;
        if self.allocation_ratio > MAX_RATIO {
            return Err(schema_error(
                format!(
                    "{} is greater than the maximum of {MAX_RATIO}",
                    self.allocation_ratio
                ),
                "maximum",
                &["allocation_ratio"],
            ));
        }
        if self.allocation_ratio.is_nan() || self.allocation_ratio < 0.0001 {
            return Err(PlacementError::bad_request(format!(
                "JSON does not validate: {} is not a valid allocation_ratio",
                self.allocation_ratio
            )));
        }
        let too_much = if mv.at_least(26) {
            self.reserved > self.total
        } else {
            self.reserved >= self.total
        };
        if too_much {
            let how = if mv.at_least(26) {
                "greater than"
            } else {
                "greater than or equal to"
            };
            return Err(PlacementError::bad_request(format!(
                "Unable to {action} inventory for resource provider {uuid}: Invalid inventory for '{class}' on \
                 resource provider '{uuid}'. The reserved value is {how} total."
            )));
        }
        Ok(Inventory {
            total: self.total as u64,
            reserved: self.reserved as u64,
            min_unit: self.min_unit as u64,
            max_unit: self.max_unit as u64,
            step_size: self.step_size as u64,
            allocation_ratio: self.allocation_ratio,
        })
    }
}

fn inv_json(i: &Inventory) -> Value {
    json!({
        "total": i.total,
        "reserved": i.reserved,
        "min_unit": i.min_unit,
        "max_unit": i.max_unit,
        "step_size": i.step_size,
        "allocation_ratio": i.allocation_ratio,
    })
}

async fn all_json(st: &AppState, row: &ProviderRow, generation: i64) -> Result<Value> {
    let invs = st.placement.db.inventories(row.id).await?;
    let map: BTreeMap<&String, Value> = invs.iter().map(|(k, v)| (k, inv_json(v))).collect();
    Ok(json!({"inventories": map, "resource_provider_generation": generation}))
}

async fn list(
    State(st): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(uuid): Path<String>,
) -> Result<Json<Value>> {
    caller.authorize("placement:resource_providers:inventories:list")?;
    let row = load_provider(&st, &uuid).await?;
    Ok(Json(all_json(&st, &row, row.generation).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplaceBody {
    inventories: BTreeMap<String, InvFields>,
    resource_provider_generation: i64,
}

async fn replace(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
    Path(uuid): Path<String>,
    JsonBody(body): JsonBody<ReplaceBody>,
) -> Result<Json<Value>> {
    caller.authorize("placement:resource_providers:inventories:update")?;
    let row = load_provider(&st, &uuid).await?;
    let class_ids = st
        .placement
        .class_ids_for(body.inventories.keys(), |c| {
            format!("Unknown resource class in inventory for resource provider {uuid}: {c}")
        })
        .await?;
    let mut new = BTreeMap::new();
    for (class, fields) in &body.inventories {
        new.insert(class.clone(), fields.validate(class, &uuid, mv, "update")?);
    }
    let generation = st
        .placement
        .db
        .replace_inventories(&row, body.resource_provider_generation, &new, &class_ids)
        .await?;
    st.placement
        .refresh(std::slice::from_ref(&row.uuid))
        .await?;
    Ok(Json(all_json(&st, &row, generation).await?))
}

#[derive(Deserialize)]
struct CreateBody {
    resource_class: String,
    #[serde(default)]
    resource_provider_generation: Option<i64>,
    #[serde(flatten)]
    fields: serde_json::Map<String, Value>,
}

async fn create(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
    Path(uuid): Path<String>,
    JsonBody(body): JsonBody<CreateBody>,
) -> Result<Response> {
    caller.authorize("placement:resource_providers:inventories:create")?;
    let row = load_provider(&st, &uuid).await?;
    let fields: InvFields = super::body::from_value(Value::Object(body.fields))?;
    let class = body.resource_class;
    let ids = st
        .placement
        .class_ids_for(std::iter::once(&class), |c| {
            format!("No such resource class {c}.")
        })
        .await?;
    let inv = fields.validate(&class, &uuid, mv, "create")?;
    let seen = body.resource_provider_generation.unwrap_or(row.generation);
    let generation = st
        .placement
        .db
        .upsert_inventory(&row, seen, &class, ids[&class], &inv, Upsert::Create)
        .await?;
    st.placement
        .refresh(std::slice::from_ref(&row.uuid))
        .await?;
    let mut v = inv_json(&inv);
    v["resource_provider_generation"] = json!(generation);
    Ok((
        StatusCode::CREATED,
        [(
            header::LOCATION,
            format!("/resource_providers/{uuid}/inventories/{class}"),
        )],
        Json(v),
    )
        .into_response())
}

async fn show(
    State(st): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((uuid, class)): Path<(String, String)>,
) -> Result<Json<Value>> {
    caller.authorize("placement:resource_providers:inventories:show")?;
    let row = load_provider(&st, &uuid).await?;
    let invs = st.placement.db.inventories(row.id).await?;
    let inv = invs.get(&class).ok_or_else(|| {
        PlacementError::not_found(format!("No inventory of class {class} for {uuid}"))
    })?;
    let mut v = inv_json(inv);
    v["resource_provider_generation"] = json!(row.generation);
    Ok(Json(v))
}

#[derive(Deserialize)]
struct UpdateBody {
    resource_provider_generation: i64,
    #[serde(flatten)]
    fields: serde_json::Map<String, Value>,
}

async fn update(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
    Path((uuid, class)): Path<(String, String)>,
    JsonBody(body): JsonBody<UpdateBody>,
) -> Result<Json<Value>> {
    caller.authorize("placement:resource_providers:inventories:update")?;
    let row = load_provider(&st, &uuid).await?;
    let fields: InvFields = super::body::from_value(Value::Object(body.fields))?;
    let ids = st
        .placement
        .class_ids_for(std::iter::once(&class), |c| {
            format!("No such resource class {c}.")
        })
        .await?;
    let inv = fields.validate(&class, &uuid, mv, "update")?;
    let generation = st
        .placement
        .db
        .upsert_inventory(
            &row,
            body.resource_provider_generation,
            &class,
            ids[&class],
            &inv,
            Upsert::Update,
        )
        .await?;
    st.placement
        .refresh(std::slice::from_ref(&row.uuid))
        .await?;
    let mut v = inv_json(&inv);
    v["resource_provider_generation"] = json!(generation);
    Ok(Json(v))
}

async fn delete_one(
    State(st): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((uuid, class)): Path<(String, String)>,
) -> Result<StatusCode> {
    caller.authorize("placement:resource_providers:inventories:delete")?;
    let row = load_provider(&st, &uuid).await?;
    st.placement.db.delete_inventory(&row, None, &class).await?;
    st.placement
        .refresh(std::slice::from_ref(&row.uuid))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn delete_all(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
    Path(uuid): Path<String>,
) -> Result<StatusCode> {
    if !mv.at_least(5) {
        return Err(PlacementError::client(
            StatusCode::METHOD_NOT_ALLOWED,
            crate::error::ErrorCode::Undefined,
            "The method DELETE is not allowed for this resource.",
        ));
    }
    caller.authorize("placement:resource_providers:inventories:delete")?;
    let row = load_provider(&st, &uuid).await?;
    st.placement
        .db
        .replace_inventories(&row, row.generation, &BTreeMap::new(), &Default::default())
        .await?;
    st.placement
        .refresh(std::slice::from_ref(&row.uuid))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
