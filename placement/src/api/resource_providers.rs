//! `/resource_providers` and `/resource_providers/{uuid}`.

use axum::extract::{Path, RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use fabric::ids::ProviderUuid;
use serde::Deserialize;
use serde_json::{json, Value};

use super::query::{parse_resources, Query};
use super::{AppState, JsonBody};
use crate::auth::Caller;
use crate::db::providers::{ProviderQuery, ProviderRow};
use crate::engine::{parse_member_of, parse_required, ProviderFilter};
use crate::error::{PlacementError, Result};
use crate::microversion::Microversion;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/resource_providers", get(list).post(create))
        .route(
            "/resource_providers/{uuid}",
            get(show).put(update).delete(delete),
        )
}

/// Loads a provider or answers 404.
pub async fn load_provider(st: &AppState, uuid: &str) -> Result<ProviderRow> {
    st.placement.db.provider_or_404(uuid).await
}

/// The provider's JSON at microversion `mv`.
pub fn provider_json(row: &ProviderRow, mv: Microversion) -> Value {
    let base = format!("/resource_providers/{}", row.uuid);
    let mut links = vec![
        json!({"rel": "self", "href": base}),
        json!({"rel": "inventories", "href": format!("{base}/inventories")}),
        json!({"rel": "usages", "href": format!("{base}/usages")}),
    ];
    if mv.at_least(1) {
        links.push(json!({"rel": "aggregates", "href": format!("{base}/aggregates")}));
    }
    if mv.at_least(6) {
        links.push(json!({"rel": "traits", "href": format!("{base}/traits")}));
    }
    if mv.at_least(11) {
        links.push(json!({"rel": "allocations", "href": format!("{base}/allocations")}));
    }
    let mut v = json!({
        "uuid": row.uuid,
        "name": row.name,
        "generation": row.generation,
        "links": links,
    });
    if mv.at_least(14) {
        v["parent_provider_uuid"] = json!(row.parent_uuid);
        v["root_provider_uuid"] = json!(row.root_uuid);
    }
    v
}

fn bad_uuid(field: &str, value: &str) -> PlacementError {
    super::body::schema_error(format!("'{value}' is not a 'uuid'"), "format", &[field])
}

/// Normalises a UUID the way upstream stores it (lower-case, hyphenated).
pub fn normalize_uuid(value: &str, field: &str) -> Result<String> {
    value
        .parse::<ProviderUuid>()
        .map(|u| u.to_string())
        .map_err(|_| bad_uuid(field, value))
}

async fn list(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>> {
    caller.authorize("placement:resource_providers:list")?;
    let q = Query::parse(raw.as_deref())?;
    let mut allowed = vec!["name", "uuid"];
    if mv.at_least(3) {
        allowed.push("member_of");
    }
    if mv.at_least(4) {
        allowed.push("resources");
    }
    if mv.at_least(14) {
        allowed.push("in_tree");
    }
    if mv.at_least(18) {
        allowed.push("required");
    }
    q.only(&allowed)?;
    let mut filter = ProviderFilter::default();
    let mut indexed = false;
    if let Some(u) = q.one("uuid")? {
        filter.uuid = Some(u.parse().map_err(|_| {
            PlacementError::bad_request(format!(
                "Invalid query string parameters: '{u}' is not a 'uuid'"
            ))
        })?);
    }
    filter.name = q.one("name")?.map(str::to_owned);
    let member_of = q.all("member_of");
    if !member_of.is_empty() {
        if !mv.at_least(24) && member_of.len() > 1 {
            return Err(PlacementError::bad_request(
                "Multiple member_of parameters are not supported until microversion 1.24.",
            ));
        }
        if !mv.at_least(32) && member_of.iter().any(|m| m.starts_with('!')) {
            return Err(PlacementError::bad_request(
                "Forbidden member_of parameters are not supported in the specified microversion",
            ));
        }
        let agg = parse_member_of(&member_of).map_err(|_| {
            PlacementError::bad_request(format!(
                "Invalid query string parameters: Expected 'member_of' parameter to contain valid UUID(s). Got: {}",
                member_of.join("&member_of=")
            ))
        })?;
        filter.member_of = agg.member_of;
        filter.forbidden_aggregates = agg.forbidden;
        indexed = true;
    }
    if let Some(r) = q.one("resources")? {
        let wanted = parse_resources(r, "resources")?;
        let names: Vec<String> = wanted.iter().map(|(n, _)| n.clone()).collect();
        st.placement
            .class_ids_for(names.iter(), |n| {
                format!(
                    "Invalid resource class in resources parameter: No such resource class {n}."
                )
            })
            .await?;
        for (n, a) in wanted {
            if a < 1 {
                return Err(PlacementError::bad_request(format!(
                    "Invalid query string parameters: amount of {n} must be at least 1"
                )));
            }
            filter.resources.insert(n, a as u64);
        }
        indexed = true;
    }
    if let Some(t) = q.one("in_tree")? {
        filter.in_tree = Some(t.parse().map_err(|_| {
            PlacementError::bad_request(format!(
                "Invalid query string parameters: '{t}' is not a 'uuid'"
            ))
        })?);
        indexed = true;
    }
    let mut required = q.all("required");
    if !mv.at_least(39) && required.len() > 1 {
        // Before 1.39 only the last `required` counts (as upstream).
        required.drain(..required.len() - 1);
    }
    if !required.is_empty() {
        if let Some(r) = required
            .iter()
            .find(|r| r.starts_with("in:"))
            .filter(|_| !mv.at_least(39))
        {
            return Err(PlacementError::bad_request(format!(
                "Invalid query string parameters: The format 'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' \
                 only supported since microversion 1.39. Got: {r}"
            )));
        }
        let form = if mv.at_least(22) {
            "HW_CPU_X86_VMX,!CUSTOM_MAGIC"
        } else {
            "HW_CPU_X86_VMX,CUSTOM_MAGIC"
        };
        let bad_required = |got: &str| {
            PlacementError::bad_request(format!(
                "Invalid query string parameters: Expected 'required' parameter value of the form: {form}. Got: {got}"
            ))
        };
        if let Some(r) = required
            .iter()
            .find(|r| r.is_empty() || r.split(',').any(|t| t.trim().is_empty() || t.trim() == "!"))
        {
            return Err(bad_required(r));
        }
        let tf = parse_required(&required).map_err(|_| bad_required(&required.join(",")))?;
        if !mv.at_least(22) && !tf.forbidden.is_empty() {
            return Err(bad_required(&required.join(",")));
        }
        let mut names: Vec<&String> = tf.required.iter().flatten().collect();
        names.extend(tf.forbidden.iter());
        for n in names {
            if !st.placement.db.trait_exists(n).await? {
                return Err(PlacementError::bad_request(format!(
                    "No such trait(s): {n}."
                )));
            }
        }
        filter.required = tf.required;
        filter.forbidden = tf.forbidden;
        indexed = true;
    }
    let rows = if indexed {
        let uuids = st.placement.with_index(|ix| ix.list_providers(&filter))?;
        let uuids: Vec<String> = uuids.iter().map(ToString::to_string).collect();
        st.placement
            .db
            .list_providers(&ProviderQuery {
                uuids: Some(uuids),
                ..Default::default()
            })
            .await?
    } else {
        st.placement
            .db
            .list_providers(&ProviderQuery {
                name: filter.name.clone(),
                uuid: filter.uuid.map(|u| u.to_string()),
                uuids: None,
            })
            .await?
    };
    Ok(Json(
        json!({"resource_providers": rows.iter().map(|r| provider_json(r, mv)).collect::<Vec<_>>()}),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    name: String,
    #[serde(default)]
    uuid: Option<String>,
    #[serde(default)]
    parent_provider_uuid: Option<String>,
}

fn check_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(super::body::schema_error(
            format!("'{name}' is too short"),
            "minLength",
            &["name"],
        ));
    }
    if name.chars().count() > 200 {
        return Err(super::body::schema_error(
            format!("'{name}' is too long"),
            "maxLength",
            &["name"],
        ));
    }
    Ok(())
}

async fn create(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
    JsonBody(body): JsonBody<CreateBody>,
) -> Result<Response> {
    caller.authorize("placement:resource_providers:create")?;
    check_name(&body.name)?;
    if body.parent_provider_uuid.is_some() && !mv.at_least(14) {
        return Err(PlacementError::bad_request(
            "JSON does not validate: Additional properties are not allowed ('parent_provider_uuid' was unexpected)",
        ));
    }
    let uuid = match &body.uuid {
        Some(u) => normalize_uuid(u, "uuid")?,
        None => ProviderUuid::new_random().to_string(),
    };
    let parent = body
        .parent_provider_uuid
        .as_deref()
        .map(|p| normalize_uuid(p, "parent_provider_uuid"))
        .transpose()?;
    if parent.as_deref() == Some(uuid.as_str()) {
        return Err(PlacementError::bad_request(format!(
            "Unable to create resource provider \"{}\", {uuid}: parent provider UUID cannot be same as UUID. \
             Please choose a different parent provider UUID.",
            body.name
        )));
    }
    let row = st
        .placement
        .db
        .create_provider(&uuid, &body.name, parent.as_deref())
        .await?;
    st.placement
        .refresh(std::slice::from_ref(&row.uuid))
        .await?;
    let location = [(header::LOCATION, format!("/resource_providers/{uuid}"))];
    if mv.at_least(20) {
        // 1.20: the new provider comes back in the body, with 200.
        Ok((StatusCode::OK, location, Json(provider_json(&row, mv))).into_response())
    } else {
        Ok((StatusCode::CREATED, location).into_response())
    }
}

async fn show(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
    Path(uuid): Path<String>,
) -> Result<Json<Value>> {
    caller.authorize("placement:resource_providers:show")?;
    let row = load_provider(&st, &uuid).await?;
    Ok(Json(provider_json(&row, mv)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateBody {
    name: String,
    #[serde(default, deserialize_with = "double_option")]
    parent_provider_uuid: Option<Option<String>>,
}

/// Distinguishes an absent field (`None`) from an explicit null (`Some(None)`).
fn double_option<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<Option<String>>, D::Error> {
    Ok(Some(Option::<String>::deserialize(d)?))
}

async fn update(
    State(st): State<AppState>,
    Extension(mv): Extension<Microversion>,
    Extension(caller): Extension<Caller>,
    Path(uuid): Path<String>,
    JsonBody(body): JsonBody<UpdateBody>,
) -> Result<Json<Value>> {
    caller.authorize("placement:resource_providers:update")?;
    let row = load_provider(&st, &uuid).await?;
    check_name(&body.name)?;
    if body.parent_provider_uuid.is_some() && !mv.at_least(14) {
        return Err(PlacementError::bad_request(
            "JSON does not validate: Additional properties are not allowed ('parent_provider_uuid' was unexpected)",
        ));
    }
    let new_parent = match body.parent_provider_uuid {
        None => row.parent_uuid.clone(),
        Some(p) => p
            .map(|p| normalize_uuid(&p, "parent_provider_uuid"))
            .transpose()?,
    };
    if new_parent != row.parent_uuid && !mv.at_least(37) {
        if new_parent.is_none() {
            return Err(PlacementError::bad_request(
                "Unable to save resource provider: un-parenting a provider is not currently allowed.",
            ));
        }
        if row.parent_uuid.is_some() {
            return Err(PlacementError::bad_request(
                "Unable to save resource provider: re-parenting a provider is not currently allowed.",
            ));
        }
    }
    st.placement
        .db
        .update_provider(&row, &body.name, new_parent.as_deref())
        .await?;
    // The whole old and new tree may have changed roots.
    st.placement.refresh_all().await?;
    let row = load_provider(&st, &uuid).await?;
    Ok(Json(provider_json(&row, mv)))
}

async fn delete(
    State(st): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(uuid): Path<String>,
) -> Result<StatusCode> {
    caller.authorize("placement:resource_providers:delete")?;
    let row = st.placement.db.get_provider(&uuid).await?.ok_or_else(|| {
        PlacementError::not_found(format!(
            "No resource provider with uuid {uuid} found for delete"
        ))
    })?;
    st.placement.db.delete_provider(&row).await?;
    st.placement
        .refresh(std::slice::from_ref(&row.uuid))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
