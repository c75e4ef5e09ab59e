//! Domains, projects, users and roles: the admin subset the `openstack`
//! CLI uses (`project/user/role create/list/show/delete`).

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State as S};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::{
    domain_json, list_links, parse_body, project_json, req_str, role_json, user_json, Caller, State,
};
use crate::identity::db::{ProjectRow, RoleRow, UserRow};
use crate::identity::error::{IdentityError, Result};
use crate::identity::service::new_id;

type Q = Query<HashMap<String, String>>;

fn created(key: &str, v: Value) -> Response {
    (StatusCode::CREATED, Json(json!({ key: v }))).into_response()
}

/// `GET /v3/domains`.
pub async fn list_domains(S(id): S<State>, caller: Caller, Query(q): Q) -> Result<Json<Value>> {
    caller.authorize(&id, "identity:list_domains", &[])?;
    let rows = id.db.domains(q.get("name").map(String::as_str)).await?;
    let list: Vec<Value> = rows.iter().map(|d| domain_json(&id, d)).collect();
    Ok(Json(
        json!({"domains": list, "links": list_links(&id, "/domains")}),
    ))
}

/// `GET /v3/domains/{id}`.
pub async fn get_domain(
    S(id): S<State>,
    caller: Caller,
    Path(did): Path<String>,
) -> Result<Json<Value>> {
    caller.authorize(&id, "identity:get_domain", &[("target.domain.id", &did)])?;
    let d = id
        .db
        .domain(&did)
        .await?
        .ok_or_else(|| IdentityError::not_found("domain", &did))?;
    Ok(Json(json!({"domain": domain_json(&id, &d)})))
}

/// `GET /v3/projects`.
pub async fn list_projects(S(id): S<State>, caller: Caller, Query(q): Q) -> Result<Json<Value>> {
    caller.authorize(&id, "identity:list_projects", &[])?;
    let rows = id
        .db
        .projects(
            q.get("name").map(String::as_str),
            q.get("domain_id").map(String::as_str),
        )
        .await?;
    let list: Vec<Value> = rows.iter().map(|p| project_json(&id, p)).collect();
    Ok(Json(
        json!({"projects": list, "links": list_links(&id, "/projects")}),
    ))
}

/// `POST /v3/projects`.
pub async fn create_project(S(id): S<State>, caller: Caller, body: Bytes) -> Result<Response> {
    let v = parse_body(&body)?;
    let p = v
        .get("project")
        .ok_or_else(|| IdentityError::BadRequest("'project' is a required property".into()))?;
    let domain_id = p
        .get("domain_id")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| caller.claims.project.as_ref().map(|s| s.domain.id.clone()))
        .unwrap_or_else(|| caller.claims.user_domain.id.clone());
    caller.authorize(
        &id,
        "identity:create_project",
        &[("target.project.domain_id", &domain_id)],
    )?;
    if id.db.domain(&domain_id).await?.is_none() {
        return Err(IdentityError::not_found("domain", &domain_id));
    }
    let row = ProjectRow {
        id: new_id(),
        domain_id,
        name: req_str(p, "name", "project")?.to_owned(),
        description: p
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        enabled: p.get("enabled").and_then(Value::as_bool).unwrap_or(true),
    };
    id.db.create_project(&row).await?;
    Ok(created("project", project_json(&id, &row)))
}

/// `GET /v3/projects/{id}`.
pub async fn get_project(
    S(id): S<State>,
    caller: Caller,
    Path(pid): Path<String>,
) -> Result<Json<Value>> {
    caller.authorize(&id, "identity:get_project", &[("target.project.id", &pid)])?;
    let p = id
        .db
        .project(&pid)
        .await?
        .ok_or_else(|| IdentityError::not_found("project", &pid))?;
    Ok(Json(json!({"project": project_json(&id, &p)})))
}

/// `PATCH /v3/projects/{id}`: name, description, enabled. Disabling a
/// project revokes every token scoped to it (as Keystone does), marked
/// before and after the change.
pub async fn update_project(
    S(id): S<State>,
    caller: Caller,
    Path(pid): Path<String>,
    body: Bytes,
) -> Result<Json<Value>> {
    caller.authorize(
        &id,
        "identity:update_project",
        &[("target.project.id", &pid)],
    )?;
    let v = parse_body(&body)?;
    let p = v
        .get("project")
        .and_then(Value::as_object)
        .ok_or_else(|| IdentityError::BadRequest("'project' is a required property".into()))?;
    if let Some(k) = p
        .keys()
        .find(|k| !["name", "description", "enabled"].contains(&k.as_str()))
    {
        return Err(IdentityError::BadRequest(format!(
            "updating '{k}' of a project is not supported here (name, description and \
             enabled are)"
        )));
    }
    let mut row = id
        .db
        .project(&pid)
        .await?
        .ok_or_else(|| IdentityError::not_found("project", &pid))?;
    if let Some(name) = p.get("name") {
        row.name = name
            .as_str()
            .filter(|n| !n.trim().is_empty() && n.len() <= 64)
            .ok_or_else(|| IdentityError::BadRequest("Invalid input for field 'name'".into()))?
            .to_owned();
    }
    if let Some(d) = p.get("description") {
        row.description = match d {
            Value::Null => String::new(),
            Value::String(d) if d.len() <= 65_535 => d.clone(),
            _ => {
                return Err(IdentityError::BadRequest(
                    "Invalid input for field 'description'".into(),
                ))
            }
        };
    }
    let mut revoke = false;
    if let Some(enabled) = p.get("enabled") {
        row.enabled = enabled.as_bool().ok_or_else(|| {
            IdentityError::BadRequest("Invalid input for field 'enabled': not a boolean".into())
        })?;
        revoke = !row.enabled;
    }
    if revoke {
        id.revoke_project(&pid).await?;
    }
    if !id.db.update_project(&row).await? {
        return Err(IdentityError::not_found("project", &pid));
    }
    if revoke {
        id.revoke_project(&pid).await?;
    }
    Ok(Json(json!({"project": project_json(&id, &row)})))
}

/// `DELETE /v3/projects/{id}`.
pub async fn delete_project(
    S(id): S<State>,
    caller: Caller,
    Path(pid): Path<String>,
) -> Result<StatusCode> {
    caller.authorize(
        &id,
        "identity:delete_project",
        &[("target.project.id", &pid)],
    )?;
    if id.db.project(&pid).await?.is_none() {
        return Err(IdentityError::not_found("project", &pid));
    }
    // Marked before (a failed delete leaves the project, its tokens
    // revoked) and after (a token issued in between).
    id.revoke_project(&pid).await?;
    if !id.db.delete_project(&pid).await? {
        return Err(IdentityError::not_found("project", &pid));
    }
    id.revoke_project(&pid).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /v3/users`.
pub async fn list_users(S(id): S<State>, caller: Caller, Query(q): Q) -> Result<Json<Value>> {
    caller.authorize(&id, "identity:list_users", &[])?;
    let rows = id
        .db
        .users(
            q.get("name").map(String::as_str),
            q.get("domain_id").map(String::as_str),
        )
        .await?;
    let list: Vec<Value> = rows.iter().map(|u| user_json(&id, u)).collect();
    Ok(Json(
        json!({"users": list, "links": list_links(&id, "/users")}),
    ))
}

/// `POST /v3/users`.
pub async fn create_user(S(id): S<State>, caller: Caller, body: Bytes) -> Result<Response> {
    let v = parse_body(&body)?;
    let u = v
        .get("user")
        .ok_or_else(|| IdentityError::BadRequest("'user' is a required property".into()))?;
    let domain_id = u
        .get("domain_id")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| caller.claims.project.as_ref().map(|s| s.domain.id.clone()))
        .unwrap_or_else(|| caller.claims.user_domain.id.clone());
    caller.authorize(
        &id,
        "identity:create_user",
        &[("target.user.domain_id", &domain_id)],
    )?;
    if id.db.domain(&domain_id).await?.is_none() {
        return Err(IdentityError::not_found("domain", &domain_id));
    }
    let password_hash = match u.get("password").and_then(Value::as_str) {
        Some(pw) => Some(id.hash_password(pw.to_owned()).await?),
        None => None,
    };
    let default_project_id = u
        .get("default_project_id")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if let Some(p) = &default_project_id {
        if id.db.project(p).await?.is_none() {
            return Err(IdentityError::not_found("project", p));
        }
    }
    let row = UserRow {
        id: new_id(),
        domain_id,
        name: req_str(u, "name", "user")?.to_owned(),
        password_hash,
        enabled: u.get("enabled").and_then(Value::as_bool).unwrap_or(true),
        default_project_id,
    };
    id.db.create_user(&row).await?;
    Ok(created("user", user_json(&id, &row)))
}

/// `GET /v3/users/{id}`.
pub async fn get_user(
    S(id): S<State>,
    caller: Caller,
    Path(uid): Path<String>,
) -> Result<Json<Value>> {
    caller.authorize(&id, "identity:get_user", &[("target.user.id", &uid)])?;
    let u = id
        .db
        .user(&uid)
        .await?
        .ok_or_else(|| IdentityError::not_found("user", &uid))?;
    Ok(Json(json!({"user": user_json(&id, &u)})))
}

/// `PATCH /v3/users/{id}`: name, password, enabled, default project.
/// Disabling the user or changing the password revokes every token of
/// the user, as Keystone does.
pub async fn update_user(
    S(id): S<State>,
    caller: Caller,
    Path(uid): Path<String>,
    body: Bytes,
) -> Result<Json<Value>> {
    caller.authorize(&id, "identity:update_user", &[("target.user.id", &uid)])?;
    let v = parse_body(&body)?;
    let u = v
        .get("user")
        .and_then(Value::as_object)
        .ok_or_else(|| IdentityError::BadRequest("'user' is a required property".into()))?;
    if let Some(k) = u
        .keys()
        .find(|k| !["name", "password", "enabled", "default_project_id"].contains(&k.as_str()))
    {
        return Err(IdentityError::BadRequest(format!(
            "updating '{k}' of a user is not supported here (name, password, enabled and \
             default_project_id are)"
        )));
    }
    let mut row = id
        .db
        .user(&uid)
        .await?
        .ok_or_else(|| IdentityError::not_found("user", &uid))?;
    let mut revoke = false;
    if let Some(name) = u.get("name") {
        row.name = name
            .as_str()
            .filter(|n| !n.trim().is_empty() && n.len() <= 255)
            .ok_or_else(|| IdentityError::BadRequest("Invalid input for field 'name'".into()))?
            .to_owned();
    }
    if let Some(enabled) = u.get("enabled") {
        row.enabled = enabled.as_bool().ok_or_else(|| {
            IdentityError::BadRequest("Invalid input for field 'enabled': not a boolean".into())
        })?;
        // Asked again after a failure, a disable revokes again.
        revoke |= !row.enabled;
    }
    if let Some(p) = u.get("default_project_id") {
        row.default_project_id = match p {
            Value::Null => None,
            Value::String(p) if id.db.project(p).await?.is_some() => Some(p.clone()),
            Value::String(p) => return Err(IdentityError::not_found("project", p)),
            _ => {
                return Err(IdentityError::BadRequest(
                    "Invalid input for field 'default_project_id'".into(),
                ))
            }
        };
    }
    if let Some(pw) = u.get("password") {
        let pw = pw.as_str().ok_or_else(|| {
            IdentityError::BadRequest("Invalid input for field 'password'".into())
        })?;
        row.password_hash = Some(id.hash_password(pw.to_owned()).await?);
        revoke = true;
    }
    // Marked before (a failed update leaves the user, its tokens revoked)
    // and after (a token issued in between).
    if revoke {
        id.revoke_user(&uid).await?;
    }
    if !id.db.update_user(&row).await? {
        return Err(IdentityError::not_found("user", &uid));
    }
    if revoke {
        id.revoke_user(&uid).await?;
    }
    Ok(Json(json!({"user": user_json(&id, &row)})))
}

/// `DELETE /v3/users/{id}`: also revokes every token of the user.
pub async fn delete_user(
    S(id): S<State>,
    caller: Caller,
    Path(uid): Path<String>,
) -> Result<StatusCode> {
    caller.authorize(&id, "identity:delete_user", &[("target.user.id", &uid)])?;
    if !id.db.delete_user(&uid).await? {
        return Err(IdentityError::not_found("user", &uid));
    }
    id.revoke_user(&uid).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /v3/users/{id}/projects`.
pub async fn user_projects(
    S(id): S<State>,
    caller: Caller,
    Path(uid): Path<String>,
) -> Result<Json<Value>> {
    caller.authorize(
        &id,
        "identity:list_user_projects",
        &[("target.user.id", &uid)],
    )?;
    if id.db.user(&uid).await?.is_none() {
        return Err(IdentityError::not_found("user", &uid));
    }
    let rows = id.db.projects_of_user(&uid).await?;
    let list: Vec<Value> = rows.iter().map(|p| project_json(&id, p)).collect();
    Ok(Json(
        json!({"projects": list, "links": list_links(&id, &format!("/users/{uid}/projects"))}),
    ))
}

/// `GET /v3/roles`.
pub async fn list_roles(S(id): S<State>, caller: Caller, Query(q): Q) -> Result<Json<Value>> {
    caller.authorize(&id, "identity:list_roles", &[])?;
    let rows = id.db.roles(q.get("name").map(String::as_str)).await?;
    let list: Vec<Value> = rows.iter().map(|r| role_json(&id, r)).collect();
    Ok(Json(
        json!({"roles": list, "links": list_links(&id, "/roles")}),
    ))
}

/// `POST /v3/roles`.
pub async fn create_role(S(id): S<State>, caller: Caller, body: Bytes) -> Result<Response> {
    caller.authorize(&id, "identity:create_role", &[])?;
    let v = parse_body(&body)?;
    let r = v
        .get("role")
        .ok_or_else(|| IdentityError::BadRequest("'role' is a required property".into()))?;
    let row = RoleRow {
        id: new_id(),
        name: req_str(r, "name", "role")?.to_owned(),
        description: r
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
    };
    id.db.create_role(&row).await?;
    Ok(created("role", role_json(&id, &row)))
}

/// `GET /v3/roles/{id}`.
pub async fn get_role(
    S(id): S<State>,
    caller: Caller,
    Path(rid): Path<String>,
) -> Result<Json<Value>> {
    caller.authorize(&id, "identity:get_role", &[("target.role.id", &rid)])?;
    let r = id
        .db
        .role(&rid)
        .await?
        .ok_or_else(|| IdentityError::not_found("role", &rid))?;
    Ok(Json(json!({"role": role_json(&id, &r)})))
}
