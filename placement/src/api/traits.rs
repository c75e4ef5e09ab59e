//! `/traits` and `/resource_providers/{uuid}/traits` (1.6+).

use axum::extract::{Path, RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::query::Query;
use super::resource_providers::load_provider;
use super::{AppState, JsonBody};
use crate::auth::Caller;
use crate::db::classes::DeleteOutcome;
use crate::db::traits::TraitQuery;
use crate::error::{ErrorCode, PlacementError, Result};
use crate::microversion::Microversion;
use crate::service::is_standard_trait;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/traits", get(list))
        .route("/traits/{name}", get(show).put(put).delete(delete))
        .route(
            "/resource_providers/{uuid}/traits",
            get(provider_traits)
                .put(set_provider_traits)
                .delete(delete_provider_traits),
        )
}

fn gate(mv: Microversion) -> Result<()> {
    if mv.at_least(6) {
        Ok(())
    } else {
        Err(PlacementError::not_found(
            "The resource could not be found.",
        ))
    }
}

/// Whether `name` is a valid custom trait name.
pub fn is_custom_trait(name: &str) -> bool {
    name.len() > 7
        && name.len() <= 255
        && name.starts_with("CUSTOM_")
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

async fn list(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>> {
    gate(mv)?;
    caller.authorize("placement:traits:list")?;
    let q = Query::parse(raw.as_deref())?;
    q.only(&["name", "associated"])?;
    let mut tq = TraitQuery::default();
    if let Some(name) = q.one("name")? {
        if let Some(p) = name.strip_prefix("startswith:") {
            tq.prefix = Some(p.to_owned());
        } else if let Some(list) = name.strip_prefix("in:") {
            tq.names = Some(
                list.split(',')
                    .map(|s| s.trim().to_owned())
                    .filter(|s| !s.is_empty())
                    .collect(),
            );
        } else {
            return Err(PlacementError::bad_request(format!(
                "Badly formatted name parameter. Expected name query string parameter in form: \
                 ?name=[in|startswith]:[name1,name2|prefix]. Got: \"{name}\""
            )));
        }
    }
    if let Some(a) = q.one("associated")? {
        tq.associated = Some(match a.to_ascii_lowercase().as_str() {
            "true" => true,
            "false" => false,
            _ => {
                return Err(PlacementError::bad_request(
                    "The query parameter \"associated\" only accepts \"true\" or \"false\"",
                ))
            }
        });
    }
    Ok(Json(
        json!({"traits": st.placement.db.list_traits(&tq).await?}),
    ))
}

async fn show(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<StatusCode> {
    gate(mv)?;
    caller.authorize("placement:traits:show")?;
    if st.placement.db.trait_exists(&name).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(PlacementError::not_found(format!(
            "No such trait(s): {name}"
        )))
    }
}

async fn put(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Response> {
    gate(mv)?;
    caller.authorize("placement:traits:update")?;
    if !is_custom_trait(&name) {
        return Err(PlacementError::bad_request(
            "The trait is invalid. A valid trait must be no longer than 255 characters, start with the prefix \
             \"CUSTOM_\" and use following characters: \"A\"-\"Z\", \"0\"-\"9\" and \"_\"",
        ));
    }
    let status = if st.placement.db.create_trait(&name).await? {
        StatusCode::CREATED
    } else {
        StatusCode::NO_CONTENT
    };
    let mut resp = (status, [(header::LOCATION, format!("/traits/{name}"))]).into_response();
    if mv.at_least(15) {
        super::add_cache_headers(resp.headers_mut());
    }
    Ok(resp)
}

async fn delete(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<StatusCode> {
    gate(mv)?;
    caller.authorize("placement:traits:delete")?;
    if is_standard_trait(&name) {
        return Err(PlacementError::bad_request(format!(
            "Cannot delete standard trait {name}."
        )));
    }
    match st.placement.db.delete_trait(&name).await? {
        DeleteOutcome::Deleted => Ok(StatusCode::NO_CONTENT),
        DeleteOutcome::NotFound => Err(PlacementError::not_found(format!(
            "No such trait(s): {name}"
        ))),
        DeleteOutcome::InUse => Err(PlacementError::conflict(
            ErrorCode::Undefined,
            format!("The trait {name} is in use by a resource provider."),
        )),
    }
}

async fn provider_traits(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
    Path(uuid): Path<String>,
) -> Result<Json<Value>> {
    gate(mv)?;
    caller.authorize("placement:resource_providers:traits:list")?;
    let row = load_provider(&st, &uuid).await?;
    let traits = st.placement.db.provider_traits(row.id).await?;
    Ok(Json(
        json!({"traits": traits, "resource_provider_generation": row.generation}),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetTraits {
    traits: Vec<String>,
    resource_provider_generation: i64,
}

async fn set_provider_traits(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
    Path(uuid): Path<String>,
    headers: axum::http::HeaderMap,
    bytes: axum::body::Bytes,
) -> Result<Json<Value>> {
    gate(mv)?;
    caller.authorize("placement:resource_providers:traits:update")?;
    let JsonBody(body): JsonBody<SetTraits> = super::body::from_parts(&headers, &bytes)?;
    let row = load_provider(&st, &uuid).await?;
    if let Some(bad) = body.traits.iter().find(|t| t.is_empty() || t.len() > 255) {
        return Err(PlacementError::bad_request(format!(
            "JSON does not validate: invalid trait name {bad:?}"
        )));
    }
    let generation = st
        .placement
        .db
        .set_provider_traits(
            row.id,
            &row.uuid,
            body.resource_provider_generation,
            &body.traits,
        )
        .await?;
    st.placement
        .refresh(std::slice::from_ref(&row.uuid))
        .await?;
    let traits = st.placement.db.provider_traits(row.id).await?;
    Ok(Json(
        json!({"traits": traits, "resource_provider_generation": generation}),
    ))
}

async fn delete_provider_traits(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
    Path(uuid): Path<String>,
) -> Result<StatusCode> {
    gate(mv)?;
    caller.authorize("placement:resource_providers:traits:delete")?;
    let row = load_provider(&st, &uuid).await?;
    st.placement
        .db
        .set_provider_traits(row.id, &row.uuid, row.generation, &[])
        .await?;
    st.placement
        .refresh(std::slice::from_ref(&row.uuid))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
