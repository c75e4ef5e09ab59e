//! `/resource_classes` (1.2+; create-or-validate PUT at 1.7).

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::body::schema_error;
use super::{AppState, JsonBody};
use crate::auth::Caller;
use crate::db::classes::{DeleteOutcome, FIRST_CUSTOM_ID};
use crate::error::{PlacementError, Result};
use crate::microversion::Microversion;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/resource_classes", get(list).post(create))
        .route(
            "/resource_classes/{name}",
            get(show).put(put).delete(delete),
        )
}

fn gate(mv: Microversion) -> Result<()> {
    if mv.at_least(2) {
        Ok(())
    } else {
        Err(PlacementError::not_found(
            "The resource could not be found.",
        ))
    }
}

fn is_custom(name: &str) -> bool {
    name.len() > 7
        && name.len() <= 255
        && name.starts_with("CUSTOM_")
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

fn check_custom(name: &str) -> Result<()> {
    if is_custom(name) {
        Ok(())
    } else if name.len() > 255 {
        Err(schema_error(
            format!("'{name}' is too long"),
            "maxLength",
            &["name"],
        ))
    } else {
        Err(schema_error(
            format!("'{name}' does not match '^CUSTOM\\_[A-Z0-9_]+$'"),
            "pattern",
            &["name"],
        ))
    }
}

fn class_json(name: &str) -> Value {
    json!({"name": name, "links": [{"rel": "self", "href": format!("/resource_classes/{name}")}]})
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NameBody {
    name: String,
}

async fn list(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>> {
    gate(mv)?;
    caller.authorize("placement:resource_classes:list")?;
    let classes = st.placement.db.list_classes().await?;
    Ok(Json(
        json!({"resource_classes": classes.iter().map(|c| class_json(&c.name)).collect::<Vec<_>>()}),
    ))
}

async fn create(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
    headers: axum::http::HeaderMap,
    bytes: axum::body::Bytes,
) -> Result<Response> {
    gate(mv)?;
    caller.authorize("placement:resource_classes:create")?;
    let JsonBody(body): JsonBody<NameBody> = super::body::from_parts(&headers, &bytes)?;
    check_custom(&body.name)?;
    if !st.placement.db.create_class(&body.name).await? {
        return Err(PlacementError::conflict(
            crate::error::ErrorCode::Undefined,
            format!("Conflicting resource class already exists: {}", body.name),
        ));
    }
    st.placement.reload_classes().await?;
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, format!("/resource_classes/{}", body.name))],
    )
        .into_response())
}

async fn show(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>> {
    gate(mv)?;
    caller.authorize("placement:resource_classes:show")?;
    let classes = st.placement.db.list_classes().await?;
    if classes.iter().any(|c| c.name == name) {
        Ok(Json(class_json(&name)))
    } else {
        Err(PlacementError::not_found(format!(
            "No such resource class {name}."
        )))
    }
}

async fn put(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response> {
    gate(mv)?;
    caller.authorize("placement:resource_classes:update")?;
    let classes = st.placement.db.list_classes().await?;
    let existing = classes.iter().find(|c| c.name == name);
    if mv.at_least(7) {
        check_custom(&name)?;
        if existing.is_some() {
            return Ok((
                StatusCode::NO_CONTENT,
                [(header::LOCATION, format!("/resource_classes/{name}"))],
            )
                .into_response());
        }
        st.placement.db.create_class(&name).await?;
        st.placement.reload_classes().await?;
        return Ok((
            StatusCode::CREATED,
            [(header::LOCATION, format!("/resource_classes/{name}"))],
        )
            .into_response());
    }
    // 1.2–1.6: rename a custom class.
    let JsonBody(body): JsonBody<NameBody> = super::body::from_parts(&headers, &body)?;
    check_custom(&body.name)?;
    let Some(existing) = existing else {
        return Err(PlacementError::not_found(format!(
            "No such resource class {name}."
        )));
    };
    if existing.id < FIRST_CUSTOM_ID {
        return Err(PlacementError::bad_request(format!(
            "Cannot update standard resource class {name}"
        )));
    }
    if classes.iter().any(|c| c.name == body.name) {
        return Err(PlacementError::conflict(
            crate::error::ErrorCode::Undefined,
            format!("Resource class already exists: {}", body.name),
        ));
    }
    st.placement.db.rename_class(&name, &body.name).await?;
    st.placement.reload_classes().await?;
    Ok(Json(class_json(&body.name)).into_response())
}

async fn delete(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<StatusCode> {
    gate(mv)?;
    caller.authorize("placement:resource_classes:delete")?;
    let classes = st.placement.db.list_classes().await?;
    match classes.iter().find(|c| c.name == name) {
        None => {
            return Err(PlacementError::not_found(format!(
                "No such resource class {name}."
            )))
        }
        Some(c) if c.id < FIRST_CUSTOM_ID => {
            return Err(PlacementError::bad_request(format!(
                "Cannot delete standard resource class {name}"
            )))
        }
        Some(_) => {}
    }
    match st.placement.db.delete_class(&name).await? {
        DeleteOutcome::Deleted => {
            st.placement.reload_classes().await?;
            Ok(StatusCode::NO_CONTENT)
        }
        DeleteOutcome::NotFound => Err(PlacementError::not_found(format!(
            "No such resource class {name}."
        ))),
        DeleteOutcome::InUse => Err(PlacementError::conflict(
            crate::error::ErrorCode::Undefined,
            format!(
                "Error in delete resource class '{name}': Unable to delete resource class {name}. \
                 Class is in use in inventory."
            ),
        )),
    }
}
