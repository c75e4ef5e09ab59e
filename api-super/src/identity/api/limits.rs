//! Unified limits as Keystone serves them (flat model): registered limits
//! (`/v3/registered_limits`, a default per service, region and resource)
//! and project limits (`/v3/limits`), with the read-only services and
//! regions they refer to (`/v3/services`, `/v3/regions`, from the
//! catalog). Services enforce them themselves: the image service reads
//! its project's limits here (Glance's `use_keystone_limits`).

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State as S};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::{base, catalog_services, list_links, parse_body, Caller, State};
use crate::identity::db_limits::{LimitFilter, LimitRow, RegisteredLimitRow};
use crate::identity::error::{IdentityError, Result};
use crate::identity::service::{new_id, Identity};

type Q = Query<HashMap<String, String>>;

fn service_json(id: &Identity, (ty, name, _): &(&str, &str, String)) -> Value {
    let sid = format!("{name}-service");
    json!({"id": sid, "type": ty, "name": name, "enabled": true, "description": "",
           "links": {"self": format!("{}/services/{sid}", base(id))}})
}

fn region_json(id: &Identity) -> Value {
    let r = &id.cfg.region;
    json!({"id": r, "description": "", "parent_region_id": null,
           "links": {"self": format!("{}/regions/{r}", base(id))}})
}

/// `GET /v3/services` (`?type=`, `?name=`).
pub async fn list_services(S(id): S<State>, caller: Caller, Query(q): Q) -> Result<Json<Value>> {
    caller.authorize(&id, "identity:list_services", &[])?;
    let list: Vec<Value> = catalog_services(&id)
        .iter()
        .filter(|(ty, name, _)| {
            q.get("type").is_none_or(|t| t == ty) && q.get("name").is_none_or(|n| n == name)
        })
        .map(|s| service_json(&id, s))
        .collect();
    Ok(Json(
        json!({"services": list, "links": list_links(&id, "/services")}),
    ))
}

/// `GET /v3/services/{id}`.
pub async fn get_service(
    S(id): S<State>,
    caller: Caller,
    Path(sid): Path<String>,
) -> Result<Json<Value>> {
    caller.authorize(&id, "identity:get_service", &[])?;
    let s = catalog_services(&id)
        .into_iter()
        .find(|(_, name, _)| format!("{name}-service") == sid)
        .ok_or_else(|| IdentityError::not_found("service", &sid))?;
    Ok(Json(json!({"service": service_json(&id, &s)})))
}

/// `GET /v3/regions`.
pub async fn list_regions(S(id): S<State>, caller: Caller) -> Result<Json<Value>> {
    caller.authorize(&id, "identity:list_regions", &[])?;
    Ok(Json(
        json!({"regions": [region_json(&id)], "links": list_links(&id, "/regions")}),
    ))
}

/// `GET /v3/regions/{id}`.
pub async fn get_region(
    S(id): S<State>,
    caller: Caller,
    Path(rid): Path<String>,
) -> Result<Json<Value>> {
    caller.authorize(&id, "identity:get_region", &[])?;
    if rid != id.cfg.region {
        return Err(IdentityError::not_found("region", &rid));
    }
    Ok(Json(json!({"region": region_json(&id)})))
}

/// `GET /v3/limits/model`.
pub async fn model(S(id): S<State>, caller: Caller) -> Result<Json<Value>> {
    caller.authorize(&id, "identity:get_limit_model", &[])?;
    Ok(Json(json!({"model": {"name": "flat", "description":
        "Limit enforcement and validation does not take project hierarchy into consideration."}})))
}

fn region_out(r: &str) -> Value {
    if r.is_empty() {
        Value::Null
    } else {
        json!(r)
    }
}

fn registered_json(id: &Identity, r: &RegisteredLimitRow) -> Value {
    json!({"id": r.id, "service_id": r.service_id, "region_id": region_out(&r.region_id),
           "resource_name": r.resource_name, "default_limit": r.default_limit,
           "description": r.description,
           "links": {"self": format!("{}/registered_limits/{}", base(id), r.id)}})
}

fn limit_json(id: &Identity, l: &LimitRow) -> Value {
    json!({"id": l.id, "project_id": l.project_id, "domain_id": null,
           "service_id": l.service_id, "region_id": region_out(&l.region_id),
           "resource_name": l.resource_name, "resource_limit": l.resource_limit,
           "description": l.description,
           "links": {"self": format!("{}/limits/{}", base(id), l.id)}})
}

fn bad(msg: impl Into<String>) -> IdentityError {
    IdentityError::BadRequest(msg.into())
}

/// `service_id`, checked against the catalog.
fn service_of(id: &Identity, v: &Value) -> Result<String> {
    let sid = v
        .get("service_id")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("'service_id' is a required property"))?;
    if !catalog_services(id)
        .iter()
        .any(|(_, name, _)| format!("{name}-service") == sid)
    {
        return Err(bad(format!(
            "Invalid input for field 'service_id': no service {sid}."
        )));
    }
    Ok(sid.to_owned())
}

/// `region_id` (absent or null: every region), checked.
fn region_of(id: &Identity, v: &Value) -> Result<String> {
    match v.get("region_id") {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(r)) if *r == id.cfg.region => Ok(r.clone()),
        Some(other) => Err(bad(format!(
            "Invalid input for field 'region_id': no region {other}."
        ))),
    }
}

fn resource_of(v: &Value) -> Result<String> {
    match v.get("resource_name").and_then(Value::as_str) {
        Some(r) if !r.is_empty() && r.len() <= 255 => Ok(r.to_owned()),
        Some(_) => Err(bad(
            "Invalid input for field 'resource_name': 1 to 255 characters.",
        )),
        None => Err(bad("'resource_name' is a required property")),
    }
}

fn limit_value(v: &Value, key: &str) -> Result<i64> {
    let n = v
        .get(key)
        .ok_or_else(|| bad(format!("'{key}' is a required property")))?;
    n.as_i64()
        .filter(|n| (-1..=i64::from(i32::MAX)).contains(n))
        .ok_or_else(|| {
            bad(format!(
                "Invalid input for field '{key}': {n} is not an integer from -1 to 2147483647."
            ))
        })
}

fn description_of(v: &Value) -> Result<String> {
    match v.get("description") {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(d)) => Ok(d.clone()),
        Some(other) => Err(bad(format!(
            "Invalid input for field 'description': {other} is not a string."
        ))),
    }
}

fn items<'a>(v: &'a Value, key: &str) -> Result<&'a Vec<Value>> {
    v.get(key)
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty())
        .ok_or_else(|| bad(format!("'{key}' is a required property: a non-empty list")))
}

fn filter_of(q: &HashMap<String, String>) -> LimitFilter {
    LimitFilter {
        service_id: q.get("service_id").cloned(),
        region_id: q.get("region_id").cloned(),
        resource_name: q.get("resource_name").cloned(),
        project_id: q.get("project_id").cloned(),
    }
}

/// `POST /v3/registered_limits`: all or none.
pub async fn create_registered(S(id): S<State>, caller: Caller, body: Bytes) -> Result<Response> {
    caller.authorize(&id, "identity:create_registered_limits", &[])?;
    let v = parse_body(&body)?;
    let rows = items(&v, "registered_limits")?
        .iter()
        .map(|r| {
            Ok(RegisteredLimitRow {
                id: new_id(),
                service_id: service_of(&id, r)?,
                region_id: region_of(&id, r)?,
                resource_name: resource_of(r)?,
                default_limit: limit_value(r, "default_limit")?,
                description: description_of(r)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    id.db.create_registered_limits(&rows).await?;
    let list: Vec<Value> = rows.iter().map(|r| registered_json(&id, r)).collect();
    Ok((
        StatusCode::CREATED,
        Json(json!({"registered_limits": list})),
    )
        .into_response())
}

/// `GET /v3/registered_limits` (`?service_id=`, `?region_id=`, `?resource_name=`).
pub async fn list_registered(S(id): S<State>, caller: Caller, Query(q): Q) -> Result<Json<Value>> {
    caller.authorize(&id, "identity:list_registered_limits", &[])?;
    let rows = id.db.registered_limits(&filter_of(&q)).await?;
    let list: Vec<Value> = rows.iter().map(|r| registered_json(&id, r)).collect();
    Ok(Json(
        json!({"registered_limits": list, "links": list_links(&id, "/registered_limits")}),
    ))
}

async fn registered(id: &Identity, rid: &str) -> Result<RegisteredLimitRow> {
    id.db
        .registered_limit(rid)
        .await?
        .ok_or_else(|| IdentityError::not_found("registered limit", rid))
}

/// `GET /v3/registered_limits/{id}`.
pub async fn get_registered(
    S(id): S<State>,
    caller: Caller,
    Path(rid): Path<String>,
) -> Result<Json<Value>> {
    caller.authorize(&id, "identity:get_registered_limit", &[])?;
    let r = registered(&id, &rid).await?;
    Ok(Json(json!({"registered_limit": registered_json(&id, &r)})))
}

/// Refuses to change or delete a registered limit project limits refer to.
async fn unreferenced(id: &Identity, r: &RegisteredLimitRow) -> Result<()> {
    let refs = id
        .db
        .limits(&LimitFilter::key(
            &r.service_id,
            &r.region_id,
            &r.resource_name,
        ))
        .await?;
    if refs.is_empty() {
        Ok(())
    } else {
        Err(IdentityError::Forbidden(format!(
            "Unable to update or delete registered limit {} because there are project limits \
             associated with it.",
            r.id
        )))
    }
}

/// `PATCH /v3/registered_limits/{id}`.
pub async fn update_registered(
    S(id): S<State>,
    caller: Caller,
    Path(rid): Path<String>,
    body: Bytes,
) -> Result<Json<Value>> {
    caller.authorize(&id, "identity:update_registered_limit", &[])?;
    let v = parse_body(&body)?;
    let p = v
        .get("registered_limit")
        .filter(|p| p.is_object())
        .ok_or_else(|| bad("'registered_limit' is a required property"))?;
    let old = registered(&id, &rid).await?;
    let mut new = old.clone();
    if p.get("service_id").is_some() {
        new.service_id = service_of(&id, p)?;
    }
    if p.get("region_id").is_some() {
        new.region_id = region_of(&id, p)?;
    }
    if p.get("resource_name").is_some() {
        new.resource_name = resource_of(p)?;
    }
    if p.get("default_limit").is_some() {
        new.default_limit = limit_value(p, "default_limit")?;
    }
    if p.get("description").is_some() {
        new.description = description_of(p)?;
    }
    let rekeyed = (&new.service_id, &new.region_id, &new.resource_name)
        != (&old.service_id, &old.region_id, &old.resource_name);
    if rekeyed {
        unreferenced(&id, &old).await?;
    }
    if !id.db.update_registered_limit(&new).await? {
        return Err(IdentityError::not_found("registered limit", &rid));
    }
    Ok(Json(
        json!({"registered_limit": registered_json(&id, &new)}),
    ))
}

/// `DELETE /v3/registered_limits/{id}`.
pub async fn delete_registered(
    S(id): S<State>,
    caller: Caller,
    Path(rid): Path<String>,
) -> Result<StatusCode> {
    caller.authorize(&id, "identity:delete_registered_limit", &[])?;
    let r = registered(&id, &rid).await?;
    unreferenced(&id, &r).await?;
    if !id.db.delete_registered_limit(&rid).await? {
        return Err(IdentityError::not_found("registered limit", &rid));
    }
    Ok(StatusCode::NO_CONTENT)
}

/// Whether the caller reads every project's limits (admins and services),
/// else only those of the project it is scoped to.
fn reads_all(caller: &Caller) -> bool {
    caller
        .claims
        .roles
        .iter()
        .any(|r| r.name == "admin" || r.name == "service")
}

fn own_project(caller: &Caller) -> Option<String> {
    caller.claims.project.as_ref().map(|p| p.project.id.clone())
}

/// `POST /v3/limits`: all or none; each needs its registered limit.
pub async fn create_limits(S(id): S<State>, caller: Caller, body: Bytes) -> Result<Response> {
    caller.authorize(&id, "identity:create_limits", &[])?;
    let v = parse_body(&body)?;
    let mut rows = Vec::new();
    for l in items(&v, "limits")? {
        if l.get("domain_id").is_some_and(|d| !d.is_null()) {
            return Err(IdentityError::NotImplemented(
                "Domain limits are not supported: give a project_id.".into(),
            ));
        }
        let project_id = l
            .get("project_id")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("'project_id' is a required property"))?;
        if id.db.project(project_id).await?.is_none() {
            return Err(bad(format!(
                "Invalid input for field 'project_id': no project {project_id}."
            )));
        }
        let row = LimitRow {
            id: new_id(),
            project_id: project_id.to_owned(),
            service_id: service_of(&id, l)?,
            region_id: region_of(&id, l)?,
            resource_name: resource_of(l)?,
            resource_limit: limit_value(l, "resource_limit")?,
            description: description_of(l)?,
        };
        let registered = id
            .db
            .registered_limits(&LimitFilter::key(
                &row.service_id,
                &row.region_id,
                &row.resource_name,
            ))
            .await?;
        if registered.is_empty() {
            return Err(IdentityError::Forbidden(
                "Unable to create a limit that has no corresponding registered limit.".into(),
            ));
        }
        rows.push(row);
    }
    id.db.create_limits(&rows).await?;
    let list: Vec<Value> = rows.iter().map(|l| limit_json(&id, l)).collect();
    Ok((StatusCode::CREATED, Json(json!({"limits": list}))).into_response())
}

/// `GET /v3/limits` (`?service_id=`, `?region_id=`, `?resource_name=`,
/// `?project_id=`): every project's for admins and services, else the
/// caller's project's only.
pub async fn list_limits(S(id): S<State>, caller: Caller, Query(q): Q) -> Result<Json<Value>> {
    caller.authorize(&id, "identity:list_limits", &[])?;
    let mut f = filter_of(&q);
    if !reads_all(&caller) {
        let own = own_project(&caller);
        if f.project_id.is_some() && f.project_id != own {
            return Ok(Json(
                json!({"limits": [], "links": list_links(&id, "/limits")}),
            ));
        }
        f.project_id = Some(own.unwrap_or_default());
    }
    let rows = id.db.limits(&f).await?;
    let list: Vec<Value> = rows.iter().map(|l| limit_json(&id, l)).collect();
    Ok(Json(
        json!({"limits": list, "links": list_links(&id, "/limits")}),
    ))
}

async fn limit_for(id: &Identity, caller: &Caller, lid: &str) -> Result<LimitRow> {
    id.db
        .limit(lid)
        .await?
        .filter(|l| reads_all(caller) || Some(&l.project_id) == own_project(caller).as_ref())
        .ok_or_else(|| IdentityError::not_found("limit", lid))
}

/// `GET /v3/limits/{id}`.
pub async fn get_limit(
    S(id): S<State>,
    caller: Caller,
    Path(lid): Path<String>,
) -> Result<Json<Value>> {
    caller.authorize(&id, "identity:get_limit", &[])?;
    let l = limit_for(&id, &caller, &lid).await?;
    Ok(Json(json!({"limit": limit_json(&id, &l)})))
}

/// `PATCH /v3/limits/{id}`: `resource_limit` and `description`.
pub async fn update_limit(
    S(id): S<State>,
    caller: Caller,
    Path(lid): Path<String>,
    body: Bytes,
) -> Result<Json<Value>> {
    caller.authorize(&id, "identity:update_limit", &[])?;
    let v = parse_body(&body)?;
    let p = v
        .get("limit")
        .filter(|p| p.is_object())
        .ok_or_else(|| bad("'limit' is a required property"))?;
    if let Some(k) = p
        .as_object()
        .into_iter()
        .flat_map(|o| o.keys())
        .find(|k| !matches!(k.as_str(), "resource_limit" | "description"))
    {
        return Err(bad(format!(
            "Additional properties are not allowed ('{k}' was unexpected)"
        )));
    }
    let mut l = limit_for(&id, &caller, &lid).await?;
    if p.get("resource_limit").is_some() {
        l.resource_limit = limit_value(p, "resource_limit")?;
    }
    if p.get("description").is_some() {
        l.description = description_of(p)?;
    }
    if !id.db.update_limit(&l).await? {
        return Err(IdentityError::not_found("limit", &lid));
    }
    Ok(Json(json!({"limit": limit_json(&id, &l)})))
}

/// `DELETE /v3/limits/{id}`.
pub async fn delete_limit(
    S(id): S<State>,
    caller: Caller,
    Path(lid): Path<String>,
) -> Result<StatusCode> {
    caller.authorize(&id, "identity:delete_limit", &[])?;
    if !id.db.delete_limit(&lid).await? {
        return Err(IdentityError::not_found("limit", &lid));
    }
    Ok(StatusCode::NO_CONTENT)
}
