//! `/v3/auth/*`: issue (password, token re-scope), validate, check, revoke,
//! the catalog, the caller's projects, and the key and revocation documents
//! other services poll.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Extension, Query, State as S};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use fabric::token::Claims;
use serde_json::{json, Value};

use super::{catalog_json, list_links, parse_body, project_json, token_json, Caller, State};
use crate::http::SourceAddr;
use crate::identity::error::{IdentityError, Result};
use crate::identity::service::{DomainRef, Identity, ScopeRequest, UserRef};

fn domain_ref(v: Option<&Value>) -> Result<DomainRef> {
    let d = v.ok_or_else(|| {
        IdentityError::BadRequest("a name needs a domain (by id or by name)".to_owned())
    })?;
    if let Some(id) = d.get("id").and_then(Value::as_str) {
        return Ok(DomainRef::Id(id.to_owned()));
    }
    if let Some(n) = d.get("name").and_then(Value::as_str) {
        return Ok(DomainRef::Name(n.to_owned()));
    }
    Err(IdentityError::BadRequest(
        "a domain needs an id or a name".to_owned(),
    ))
}

fn scope_of(auth: &Value) -> Result<ScopeRequest> {
    let Some(scope) = auth.get("scope") else {
        return Ok(ScopeRequest::Default);
    };
    if scope.as_str() == Some("unscoped") {
        return Ok(ScopeRequest::Unscoped);
    }
    if let Some(p) = scope.get("project") {
        if let Some(id) = p.get("id").and_then(Value::as_str) {
            return Ok(ScopeRequest::ProjectId(id.to_owned()));
        }
        if let Some(name) = p.get("name").and_then(Value::as_str) {
            return Ok(ScopeRequest::ProjectName {
                name: name.to_owned(),
                domain: domain_ref(p.get("domain"))?,
            });
        }
        return Err(IdentityError::BadRequest(
            "a project scope needs an id or a name".to_owned(),
        ));
    }
    if scope.get("domain").is_some() || scope.get("system").is_some() {
        return Err(IdentityError::NotImplemented(
            "Only project scope is supported by this identity service.".to_owned(),
        ));
    }
    Err(IdentityError::BadRequest("unknown scope".to_owned()))
}

fn subject_response(status: StatusCode, token: &str, body: Option<Value>) -> Response {
    let mut resp = match body {
        Some(b) => (status, Json(b)).into_response(),
        None => status.into_response(),
    };
    if let Ok(v) = HeaderValue::from_str(token) {
        resp.headers_mut().insert("x-subject-token", v);
    }
    resp
}

/// `POST /v3/auth/tokens`.
pub async fn issue(
    S(id): S<State>,
    Extension(SourceAddr(source)): Extension<SourceAddr>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Result<Response> {
    let v = parse_body(&body)?;
    let auth = v
        .get("auth")
        .ok_or_else(|| IdentityError::BadRequest("'auth' is a required property".to_owned()))?;
    let identity = auth.get("identity").ok_or_else(|| {
        IdentityError::BadRequest("'identity' is a required property of auth".to_owned())
    })?;
    let methods: Vec<String> = identity
        .get("methods")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let scope = scope_of(auth)?;
    let (token, claims) = if methods.iter().any(|m| m == "password") {
        let user = identity
            .get("password")
            .and_then(|p| p.get("user"))
            .ok_or_else(|| IdentityError::BadRequest("password.user is required".to_owned()))?;
        let password = user
            .get("password")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                IdentityError::BadRequest("password.user.password is required".to_owned())
            })?;
        let uref = if let Some(uid) = user.get("id").and_then(Value::as_str) {
            UserRef::Id(uid.to_owned())
        } else if let Some(name) = user.get("name").and_then(Value::as_str) {
            UserRef::Name {
                name: name.to_owned(),
                domain: domain_ref(user.get("domain"))?,
            }
        } else {
            return Err(IdentityError::BadRequest(
                "password.user needs an id or a name".to_owned(),
            ));
        };
        let row = id
            .check_password(&uref, password.to_owned(), source)
            .await?;
        id.issue(&row, &scope, vec!["password".to_owned()], None)
            .await?
    } else if methods.iter().any(|m| m == "token") {
        let t = identity
            .get("token")
            .and_then(|t| t.get("id"))
            .and_then(Value::as_str)
            .ok_or_else(|| IdentityError::BadRequest("token.id is required".to_owned()))?;
        let (parent, user) = id.user_of_token(t).await?;
        let mut methods = parent.methods.clone();
        if !methods.iter().any(|m| m == "token") {
            methods.insert(0, "token".to_owned());
        }
        id.issue(&user, &scope, methods, Some(&parent)).await?
    } else {
        return Err(IdentityError::unauthorized(
            "unsupported authentication method",
        ));
    };
    tracing::info!(user_id = %claims.user.id, project_id = claims.project_id().unwrap_or("-"), audit_id = %claims.audit_id, "token issued");
    let with_catalog = !q.contains_key("nocatalog");
    Ok(subject_response(
        StatusCode::CREATED,
        &token,
        Some(token_json(&id, &claims, with_catalog)),
    ))
}

/// Validates the `X-Subject-Token` for `caller` under `action`.
fn subject(
    id: &Identity,
    caller: &Caller,
    headers: &HeaderMap,
    action: &str,
) -> Result<(String, Claims)> {
    let token = headers
        .get("x-subject-token")
        .and_then(|v| v.to_str().ok())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| IdentityError::BadRequest("X-Subject-Token is required".to_owned()))?;
    let claims = id.validator.validate(token).map_err(|e| {
        tracing::info!(target: "audit", reason = %e, "subject token refused");
        IdentityError::NotFound(format!("Could not find token: {}", e))
    })?;
    caller.authorize(id, action, &[("target.token.user_id", &claims.user.id)])?;
    Ok((token.to_owned(), claims))
}

/// `GET /v3/auth/tokens`.
pub async fn validate(
    S(id): S<State>,
    caller: Caller,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response> {
    let (token, claims) = subject(&id, &caller, &headers, "identity:validate_token")?;
    let body = token_json(&id, &claims, !q.contains_key("nocatalog"));
    Ok(subject_response(StatusCode::OK, &token, Some(body)))
}

/// `HEAD /v3/auth/tokens`.
pub async fn check(S(id): S<State>, caller: Caller, headers: HeaderMap) -> Result<Response> {
    let (token, _) = subject(&id, &caller, &headers, "identity:check_token")?;
    Ok(subject_response(StatusCode::OK, &token, None))
}

/// `DELETE /v3/auth/tokens`.
pub async fn revoke(S(id): S<State>, caller: Caller, headers: HeaderMap) -> Result<StatusCode> {
    let (_, claims) = subject(&id, &caller, &headers, "identity:revoke_token")?;
    id.revoke(&claims).await?;
    tracing::info!(target: "audit", audit_id = %claims.audit_id, by = %caller.claims.user.id, "token revoked");
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /v3/auth/catalog`.
pub async fn catalog(S(id): S<State>, caller: Caller) -> Result<Json<Value>> {
    if caller.claims.project.is_none() {
        return Err(IdentityError::Forbidden(
            "A scoped token is required to get a catalog.".to_owned(),
        ));
    }
    Ok(Json(
        json!({"catalog": catalog_json(&id), "links": list_links(&id, "/auth/catalog")}),
    ))
}

/// `GET /v3/auth/projects`: the projects the caller may scope to.
pub async fn auth_projects(S(id): S<State>, caller: Caller) -> Result<Json<Value>> {
    let projects = id.db.projects_of_user(&caller.claims.user.id).await?;
    let list: Vec<Value> = projects
        .iter()
        .filter(|p| p.enabled)
        .map(|p| project_json(&id, p))
        .collect();
    Ok(Json(
        json!({"projects": list, "links": list_links(&id, "/auth/projects")}),
    ))
}

/// `GET /v3/auth/keys`: the public keys tokens may be signed with (public
/// information; no token needed). Conditional on `If-None-Match`.
pub async fn keys(S(id): S<State>, headers: HeaderMap) -> Response {
    tagged_answer(&id.keys_document(), &headers)
}

/// `GET /v3/auth/revocations`: revocations still in force, for the
/// services that validate tokens themselves. It names users, projects and
/// audit ids, so it takes a token of the `service` role or an admin's
/// (Keystone's `identity:list_revoke_events`). Conditional on
/// `If-None-Match`: pollers holding the current version get 304 and no
/// body.
pub async fn revocations(S(id): S<State>, caller: Caller, headers: HeaderMap) -> Result<Response> {
    caller.authorize(&id, "identity:list_revoke_events", &[])?;
    Ok(tagged_answer(&id.revocations_document(), &headers))
}

/// 304 with the tag when `If-None-Match` names `doc`'s version, else the
/// document with its `ETag`.
fn tagged_answer(doc: &fabric::token::Tagged, headers: &HeaderMap) -> Response {
    let inm = headers
        .get(axum::http::header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok());
    let etag = HeaderValue::from_str(doc.etag()).unwrap_or(HeaderValue::from_static("\"\""));
    if doc.unchanged_for(inm) {
        return (StatusCode::NOT_MODIFIED, [(axum::http::header::ETAG, etag)]).into_response();
    }
    (
        [
            (axum::http::header::ETAG, etag),
            (
                axum::http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
        ],
        doc.body(),
    )
        .into_response()
}
