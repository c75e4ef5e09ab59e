//! `/allocations/{consumer_uuid}`, `POST /allocations` (1.13) and
//! `/resource_providers/{uuid}/allocations`.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::body::{from_parts, schema_error};
use super::resource_providers::{load_provider, normalize_uuid};
use super::AppState;
use crate::auth::Caller;
use crate::db::allocations::ConsumerWrite;
use crate::error::{PlacementError, Result};
use crate::microversion::Microversion;

/// Project and user recorded for consumers written before 1.8 without them.
pub(crate) const INCOMPLETE_CONSUMER: &str = "00000000-0000-0000-0000-000000000000";

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/allocations", post(post_many))
        .route("/allocations/{consumer}", get(show).put(put).delete(delete))
        .route(
            "/resource_providers/{uuid}/allocations",
            get(provider_allocations),
        )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Resources {
    resources: BTreeMap<String, i64>,
    /// Accepted and ignored, as upstream.
    #[serde(default)]
    #[allow(dead_code)]
    generation: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LegacyProviderRef {
    uuid: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LegacyAllocation {
    resource_provider: LegacyProviderRef,
    resources: BTreeMap<String, i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LegacyBody {
    allocations: Vec<LegacyAllocation>,
    #[serde(default)]
    project_id: Option<String>,
    #[serde(default)]
    user_id: Option<String>,
}

/// One consumer's allocations as `PUT /allocations/{c}` (1.12+),
/// `POST /allocations` and `POST /reshaper` take them.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ConsumerBody {
    allocations: BTreeMap<String, Resources>,
    project_id: String,
    user_id: String,
    #[serde(default, deserialize_with = "double_option")]
    consumer_generation: Option<Option<i64>>,
    #[serde(default)]
    consumer_type: Option<String>,
    #[serde(default)]
    mappings: Option<BTreeMap<String, Vec<String>>>,
}

fn double_option<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<Option<i64>>, D::Error> {
    Ok(Some(Option::<i64>::deserialize(d)?))
}

fn check_consumer_type(t: &str) -> Result<()> {
    let ok = !t.is_empty()
        && t.len() <= 255
        && t.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(PlacementError::bad_request(format!(
            "JSON does not validate: '{t}' does not match '^[A-Z0-9_]+$' (consumer_type)"
        )))
    }
}

/// Upstream's schema for `project_id` and `user_id`: 1 to 255 characters.
fn check_ids(project_id: Option<&str>, user_id: Option<&str>) -> Result<()> {
    for (name, v) in [("project_id", project_id), ("user_id", user_id)] {
        let Some(v) = v else { continue };
        let n = v.chars().count();
        if n < 1 {
            return Err(schema_error(
                format!("'{v}' is too short"),
                "minLength",
                &[name],
            ));
        }
        if n > 255 {
            return Err(schema_error(
                format!("'{v}' is too long"),
                "maxLength",
                &[name],
            ));
        }
    }
    Ok(())
}

/// Validates one consumer's body at `mv` into a write.
pub(super) fn consumer_write(
    consumer: String,
    body: ConsumerBody,
    mv: Microversion,
    empty_ok: bool,
) -> Result<ConsumerWrite> {
    check_ids(Some(&body.project_id), Some(&body.user_id))?;
    if mv.at_least(28) && body.consumer_generation.is_none() {
        return Err(PlacementError::bad_request(
            "JSON does not validate: 'consumer_generation' is a required property",
        ));
    }
    if !mv.at_least(28) && body.consumer_generation.is_some() {
        return Err(PlacementError::bad_request(
            "JSON does not validate: Additional properties are not allowed ('consumer_generation' was unexpected)",
        ));
    }
    if mv.at_least(38) && body.consumer_type.is_none() {
        return Err(PlacementError::bad_request(
            "JSON does not validate: 'consumer_type' is a required property",
        ));
    }
    if !mv.at_least(38) && body.consumer_type.is_some() {
        return Err(PlacementError::bad_request(
            "JSON does not validate: Additional properties are not allowed ('consumer_type' was unexpected)",
        ));
    }
    if !mv.at_least(34) && body.mappings.is_some() {
        return Err(PlacementError::bad_request(
            "JSON does not validate: Additional properties are not allowed ('mappings' was unexpected)",
        ));
    }
    if let Some(t) = &body.consumer_type {
        check_consumer_type(t)?;
    }
    if body.mappings.as_ref().is_some_and(BTreeMap::is_empty) {
        return Err(schema_error(
            "{} does not have enough properties",
            "minProperties",
            &["mappings"],
        ));
    }
    if body.allocations.is_empty() && !mv.at_least(28) && !empty_ok {
        return Err(schema_error(
            "{} does not have enough properties",
            "minProperties",
            &["allocations"],
        ));
    }
    let mut allocations = BTreeMap::new();
    for (rp, r) in body.allocations {
        let uuid = normalize_uuid(&rp, "allocations").map_err(|_| {
            schema_error(
                format!("'{rp}' does not match any of the regexes: '^[0-9a-fA-F-]{{36}}$'"),
                "additionalProperties",
                &["allocations"],
            )
        })?;
        allocations.insert(uuid, r.resources);
    }
    Ok(ConsumerWrite {
        consumer,
        allocations,
        project_id: body.project_id,
        user_id: body.user_id,
        expected_generation: if mv.at_least(28) {
            body.consumer_generation
        } else {
            None
        },
        consumer_type: body.consumer_type,
    })
}

/// Checks the amounts and classes of every write; returns the classes named.
pub(crate) fn check_writes(writes: &[ConsumerWrite]) -> Result<Vec<String>> {
    let mut classes: Vec<String> = Vec::new();
    for w in writes {
        for (rp, res) in &w.allocations {
            if res.is_empty() {
                return Err(PlacementError::bad_request(format!(
                    "JSON does not validate: resources for {rp} does not have enough properties"
                )));
            }
            for (rc, amount) in res {
                let rc_ok = !rc.is_empty()
                    && rc
                        .bytes()
                        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
                if !rc_ok {
                    return Err(schema_error(
                        format!("'{rc}' does not match any of the regexes: '^[A-Z0-9_]+$'"),
                        "additionalProperties",
                        &["resources"],
                    ));
                }
                if *amount < 1 {
                    return Err(schema_error(
                        format!("{amount} is less than the minimum of 1"),
                        "minimum",
                        &[],
                    ));
                }
                classes.push(rc.clone());
            }
        }
    }
    classes.sort();
    classes.dedup();
    Ok(classes)
}

async fn put(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
    Path(consumer): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<StatusCode> {
    caller.authorize("placement:allocations:update")?;
    let consumer = normalize_uuid(&consumer, "consumer_uuid")
        .map_err(|_| PlacementError::bad_request(format!("Malformed consumer_uuid: {consumer}")))?;
    let w = if mv.at_least(12) {
        let body: ConsumerBody = from_parts(&headers, &bytes)?.0;
        consumer_write(consumer, body, mv, false)?
    } else {
        let body: LegacyBody = from_parts(&headers, &bytes)?.0;
        if body.allocations.is_empty() {
            return Err(schema_error(
                "[] is too short",
                "minItems",
                &["allocations"],
            ));
        }
        if mv.at_least(8) {
            for (name, v) in [("project_id", &body.project_id), ("user_id", &body.user_id)] {
                if v.is_none() {
                    return Err(schema_error(
                        format!("'{name}' is a required property"),
                        "required",
                        &[],
                    ));
                }
            }
        }
        check_ids(body.project_id.as_deref(), body.user_id.as_deref())?;
        let mut allocations: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
        for a in body.allocations {
            let rp = normalize_uuid(&a.resource_provider.uuid, "resource_provider")?;
            allocations.entry(rp).or_default().extend(a.resources);
        }
        ConsumerWrite {
            consumer,
            allocations,
            project_id: body
                .project_id
                .unwrap_or_else(|| INCOMPLETE_CONSUMER.to_owned()),
            user_id: body
                .user_id
                .unwrap_or_else(|| INCOMPLETE_CONSUMER.to_owned()),
            expected_generation: None,
            consumer_type: None,
        }
    };
    st.placement.write_consumers(&[w]).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn post_many(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<StatusCode> {
    if !mv.at_least(13) {
        return Err(PlacementError::not_found(
            "The resource could not be found.",
        ));
    }
    caller.authorize("placement:allocations:manage")?;
    let body: BTreeMap<String, ConsumerBody> = from_parts(&headers, &bytes)?.0;
    let mut writes = Vec::with_capacity(body.len());
    for (consumer, b) in body {
        let consumer = normalize_uuid(&consumer, "consumer_uuid").map_err(|_| {
            PlacementError::bad_request(format!("Malformed consumer_uuid: {consumer}"))
        })?;
        writes.push(consumer_write(consumer, b, mv, true)?);
    }
    st.placement.write_consumers(&writes).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn show(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
    Path(consumer): Path<String>,
) -> Result<Json<Value>> {
    caller.authorize("placement:allocations:list")?;
    let a = st.placement.db.consumer_allocations(&consumer).await?;
    let allocs: BTreeMap<&String, Value> = a
        .allocations
        .iter()
        .map(|(rp, (generation, res))| (rp, json!({"generation": generation, "resources": res})))
        .collect();
    let mut v = json!({"allocations": allocs});
    if let Some(c) = a
        .consumer
        .filter(|_| mv.at_least(12) && !a.allocations.is_empty())
    {
        v["project_id"] = json!(c.project_id);
        v["user_id"] = json!(c.user_id);
        if mv.at_least(28) {
            v["consumer_generation"] = json!(c.generation);
        }
        if mv.at_least(38) {
            v["consumer_type"] = json!(c.consumer_type.unwrap_or_else(|| "unknown".to_owned()));
        }
    }
    Ok(Json(v))
}

async fn delete(
    State(st): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(consumer): Path<String>,
) -> Result<StatusCode> {
    caller.authorize("placement:allocations:delete")?;
    if !st.placement.delete_consumer_allocations(&consumer).await? {
        return Err(PlacementError::not_found(format!(
            "No allocations for consumer '{consumer}'"
        )));
    }
    Ok(StatusCode::NO_CONTENT)
}

async fn provider_allocations(
    State(st): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(uuid): Path<String>,
) -> Result<Json<Value>> {
    caller.authorize("placement:resource_providers:allocations:list")?;
    let row = load_provider(&st, &uuid).await?;
    let allocs = st.placement.db.provider_allocations(row.id).await?;
    let map: BTreeMap<&String, Value> = allocs
        .iter()
        .map(|(c, r)| (c, json!({"resources": r})))
        .collect();
    Ok(Json(
        json!({"allocations": map, "resource_provider_generation": row.generation}),
    ))
}
