//! Role assignments: grants on a project (`openstack role add/remove`) and
//! `GET /v3/role_assignments` (`openstack role assignment list`).

use std::collections::HashMap;

use axum::extract::{Path, Query, State as S};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use super::{list_links, role_json, Caller, State};
use crate::identity::db::AssignmentFilter;
use crate::identity::error::{IdentityError, Result};
use crate::identity::service::{expand_roles, Identity};

async fn check_parts(id: &Identity, project: &str, user: &str, role: Option<&str>) -> Result<()> {
    if id.db.project(project).await?.is_none() {
        return Err(IdentityError::not_found("project", project));
    }
    if id.db.user(user).await?.is_none() {
        return Err(IdentityError::not_found("user", user));
    }
    if let Some(r) = role {
        if id.db.role(r).await?.is_none() {
            return Err(IdentityError::not_found("role", r));
        }
    }
    Ok(())
}

/// `PUT /v3/projects/{p}/users/{u}/roles/{r}`.
pub async fn grant(
    S(id): S<State>,
    caller: Caller,
    Path((project, user, role)): Path<(String, String, String)>,
) -> Result<StatusCode> {
    caller.authorize(
        &id,
        "identity:create_grant",
        &[("target.project.id", &project)],
    )?;
    check_parts(&id, &project, &user, Some(&role)).await?;
    id.db.grant(&user, &project, &role).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `HEAD /v3/projects/{p}/users/{u}/roles/{r}`.
pub async fn check_grant(
    S(id): S<State>,
    caller: Caller,
    Path((project, user, role)): Path<(String, String, String)>,
) -> Result<StatusCode> {
    caller.authorize(
        &id,
        "identity:check_grant",
        &[("target.project.id", &project)],
    )?;
    let found = id
        .db
        .assignments(&AssignmentFilter {
            user_id: Some(user),
            project_id: Some(project),
            role_id: Some(role.clone()),
        })
        .await?;
    if found.is_empty() {
        return Err(IdentityError::not_found("role assignment", &role));
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /v3/projects/{p}/users/{u}/roles/{r}`.
pub async fn revoke_grant(
    S(id): S<State>,
    caller: Caller,
    Path((project, user, role)): Path<(String, String, String)>,
) -> Result<StatusCode> {
    caller.authorize(
        &id,
        "identity:revoke_grant",
        &[("target.project.id", &project)],
    )?;
    let found = id
        .db
        .assignments(&AssignmentFilter {
            user_id: Some(user.clone()),
            project_id: Some(project.clone()),
            role_id: Some(role.clone()),
        })
        .await?;
    if found.is_empty() {
        return Err(IdentityError::not_found("role assignment", &role));
    }
    // The roles in the user's tokens on the project no longer hold. Marked
    // before (a failure below leaves the grant and revoked tokens, which
    // their user gets again) and after (a token issued in between).
    id.revoke_grant(&user, &project).await?;
    if !id.db.revoke_grant(&user, &project, &role).await? {
        return Err(IdentityError::not_found("role assignment", &role));
    }
    id.revoke_grant(&user, &project).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /v3/projects/{p}/users/{u}/roles`.
pub async fn list_grants(
    S(id): S<State>,
    caller: Caller,
    Path((project, user)): Path<(String, String)>,
) -> Result<Json<Value>> {
    caller.authorize(
        &id,
        "identity:list_grants",
        &[("target.project.id", &project)],
    )?;
    check_parts(&id, &project, &user, None).await?;
    let found = id
        .db
        .assignments(&AssignmentFilter {
            user_id: Some(user.clone()),
            project_id: Some(project.clone()),
            role_id: None,
        })
        .await?;
    let roles = id.db.roles(None).await?;
    let list: Vec<Value> = roles
        .iter()
        .filter(|r| found.iter().any(|a| a.role_id == r.id))
        .map(|r| role_json(&id, r))
        .collect();
    Ok(Json(json!({
        "roles": list,
        "links": list_links(&id, &format!("/projects/{project}/users/{user}/roles")),
    })))
}

fn truthy(q: &HashMap<String, String>, key: &str) -> bool {
    q.get(key).is_some_and(|v| {
        v.is_empty() || !matches!(v.to_ascii_lowercase().as_str(), "0" | "false" | "no")
    })
}

/// `GET /v3/role_assignments` (filters `user.id`, `scope.project.id`,
/// `role.id`; `effective` expands implied roles; `include_names`).
pub async fn list(
    S(id): S<State>,
    caller: Caller,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>> {
    caller.authorize(&id, "identity:list_role_assignments", &[])?;
    if q.keys().any(|k| {
        k.starts_with("group.") || k.starts_with("scope.domain") || k.starts_with("scope.system")
    }) {
        // No groups, domain or system assignments exist here.
        return Ok(Json(
            json!({"role_assignments": [], "links": list_links(&id, "/role_assignments")}),
        ));
    }
    let effective = truthy(&q, "effective");
    let names = truthy(&q, "include_names");
    let role_filter = q.get("role.id").cloned();
    let rows = id
        .db
        .assignments(&AssignmentFilter {
            user_id: q.get("user.id").cloned(),
            project_id: q.get("scope.project.id").cloned(),
            role_id: if effective { None } else { role_filter.clone() },
        })
        .await?;
    let mut pairs: Vec<(String, String, String)> = Vec::new();
    if effective {
        let implied = id.db.implied_roles().await?;
        for a in &rows {
            let mut roles: Vec<String> = expand_roles([a.role_id.clone()], &implied)
                .into_iter()
                .collect();
            roles.sort();
            for r in roles {
                let t = (a.user_id.clone(), a.project_id.clone(), r);
                if !pairs.contains(&t) {
                    pairs.push(t);
                }
            }
        }
        if let Some(r) = &role_filter {
            pairs.retain(|(_, _, role)| role == r);
        }
    } else {
        pairs = rows
            .into_iter()
            .map(|a| (a.user_id, a.project_id, a.role_id))
            .collect();
    }
    let (users, projects, roles, domains) = if names {
        (
            id.db.users(None, None).await?,
            id.db.projects(None, None).await?,
            id.db.roles(None).await?,
            id.db.domains(None).await?,
        )
    } else {
        Default::default()
    };
    let dom = |did: &str| {
        let name = domains.iter().find(|d| d.id == did).map(|d| d.name.clone());
        json!({"id": did, "name": name})
    };
    let base = format!("{}/v3", id.public_url());
    let list: Vec<Value> = pairs
        .iter()
        .map(|(u, p, r)| {
            let mut user = json!({"id": u});
            let mut project = json!({"id": p});
            let mut role = json!({"id": r});
            if names {
                if let Some(x) = users.iter().find(|x| &x.id == u) {
                    user["name"] = json!(x.name);
                    user["domain"] = dom(&x.domain_id);
                }
                if let Some(x) = projects.iter().find(|x| &x.id == p) {
                    project["name"] = json!(x.name);
                    project["domain"] = dom(&x.domain_id);
                }
                if let Some(x) = roles.iter().find(|x| &x.id == r) {
                    role["name"] = json!(x.name);
                }
            }
            json!({
                "user": user, "role": role, "scope": {"project": project},
                "links": {"assignment": format!("{base}/projects/{p}/users/{u}/roles/{r}")},
            })
        })
        .collect();
    Ok(Json(
        json!({"role_assignments": list, "links": list_links(&id, "/role_assignments")}),
    ))
}
