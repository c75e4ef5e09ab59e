//! The Keystone v3 subset over HTTP: routes, the caller extractor
//! (`X-Auth-Token` → validated claims, no database), policy checks and the
//! renderers of Keystone's JSON shapes. Handlers parse, authorize and call
//! into [`Identity`]; they hold no SQL.

mod assignments;
mod limits;
mod resources;
mod tokens;
mod versions;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::routing::{get, put};
use axum::Router;
use fabric::token::Claims;
use serde_json::{json, Value};

use super::db::{DomainRow, ProjectRow, RoleRow, UserRow};
use super::error::{IdentityError, Result};
use super::policy::Target;
use super::service::Identity;
use crate::http::ReqId;

/// Shared state of every handler.
pub type State = Arc<Identity>;

/// Builds the identity API (with the request frame).
pub fn router(identity: State) -> Router {
    Router::new()
        .route("/", get(versions::root))
        .route("/v3", get(versions::v3))
        .route("/v3/", get(versions::v3))
        .route(
            "/v3/auth/tokens",
            get(tokens::validate)
                .head(tokens::check)
                .post(tokens::issue)
                .delete(tokens::revoke),
        )
        .route("/v3/auth/catalog", get(tokens::catalog))
        .route("/v3/auth/projects", get(tokens::auth_projects))
        .route("/v3/auth/keys", get(tokens::keys))
        .route("/v3/auth/revocations", get(tokens::revocations))
        .route("/v3/domains", get(resources::list_domains))
        .route("/v3/domains/{id}", get(resources::get_domain))
        .route(
            "/v3/projects",
            get(resources::list_projects).post(resources::create_project),
        )
        .route(
            "/v3/projects/{id}",
            get(resources::get_project)
                .patch(resources::update_project)
                .delete(resources::delete_project),
        )
        .route(
            "/v3/users",
            get(resources::list_users).post(resources::create_user),
        )
        .route(
            "/v3/users/{id}",
            get(resources::get_user)
                .patch(resources::update_user)
                .delete(resources::delete_user),
        )
        .route("/v3/users/{id}/projects", get(resources::user_projects))
        .route(
            "/v3/roles",
            get(resources::list_roles).post(resources::create_role),
        )
        .route("/v3/roles/{id}", get(resources::get_role))
        .route(
            "/v3/projects/{project}/users/{user}/roles",
            get(assignments::list_grants),
        )
        .route(
            "/v3/projects/{project}/users/{user}/roles/{role}",
            put(assignments::grant)
                .head(assignments::check_grant)
                .delete(assignments::revoke_grant),
        )
        .route("/v3/role_assignments", get(assignments::list))
        .route("/v3/services", get(limits::list_services))
        .route("/v3/services/{id}", get(limits::get_service))
        .route("/v3/regions", get(limits::list_regions))
        .route("/v3/regions/{id}", get(limits::get_region))
        .route(
            "/v3/registered_limits",
            get(limits::list_registered).post(limits::create_registered),
        )
        .route(
            "/v3/registered_limits/{id}",
            get(limits::get_registered)
                .patch(limits::update_registered)
                .delete(limits::delete_registered),
        )
        .route("/v3/limits/model", get(limits::model))
        .route(
            "/v3/limits",
            get(limits::list_limits).post(limits::create_limits),
        )
        .route(
            "/v3/limits/{id}",
            get(limits::get_limit)
                .patch(limits::update_limit)
                .delete(limits::delete_limit),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn(crate::http::frame))
        .with_state(identity)
}

async fn not_found() -> IdentityError {
    IdentityError::NotFound("The resource could not be found.".into())
}

async fn method_not_allowed() -> axum::response::Response {
    super::error::error_response(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        "The method is not allowed for the requested URL.",
    )
}

/// An authenticated caller: the claims of a valid `X-Auth-Token`.
pub struct Caller {
    /// What the token says.
    pub claims: Claims,
    /// The request id.
    pub request_id: String,
}

impl FromRequestParts<State> for Caller {
    type Rejection = IdentityError;

    async fn from_request_parts(parts: &mut Parts, id: &State) -> Result<Self> {
        let request_id = parts
            .extensions
            .get::<ReqId>()
            .map(|r| r.0.to_string())
            .unwrap_or_default();
        let token = parts
            .headers
            .get("x-auth-token")
            .and_then(|v| v.to_str().ok())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| IdentityError::unauthorized("no X-Auth-Token"))?;
        let claims = id
            .validator
            .validate(token)
            .map_err(|e| IdentityError::unauthorized(e.to_string()))?;
        Ok(Caller { claims, request_id })
    }
}

impl Caller {
    /// Enforces `action` on `target`: 403 (logged on the audit target) when denied.
    pub fn authorize(&self, id: &Identity, action: &str, target: Target<'_>) -> Result<()> {
        if id
            .policy
            .enforce(action, &self.claims, target, &self.request_id)
        {
            Ok(())
        } else {
            Err(IdentityError::Forbidden(format!(
                "You are not authorized to perform the requested action: {action}."
            )))
        }
    }
}

/// Parses a JSON body, or 400 in Keystone's words.
pub fn parse_body(body: &Bytes) -> Result<Value> {
    serde_json::from_slice(body).map_err(|_| {
        IdentityError::BadRequest(
            "The request body is not valid JSON, or not an object.".to_owned(),
        )
    })
}

/// A required string member of an object, or 400.
pub fn req_str<'a>(v: &'a Value, key: &str, what: &str) -> Result<&'a str> {
    v.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            IdentityError::BadRequest(format!("'{key}' is a required property of {what}"))
        })
}

pub(super) fn base(id: &Identity) -> String {
    format!("{}/v3", id.public_url())
}

/// `links` of a list.
pub fn list_links(id: &Identity, path: &str) -> Value {
    json!({"self": format!("{}{}", base(id), path), "previous": null, "next": null})
}

/// A domain in Keystone's shape.
pub fn domain_json(id: &Identity, d: &DomainRow) -> Value {
    json!({
        "id": d.id, "name": d.name, "description": d.description, "enabled": d.enabled,
        "tags": [], "options": {},
        "links": {"self": format!("{}/domains/{}", base(id), d.id)},
    })
}

/// A project in Keystone's shape.
pub fn project_json(id: &Identity, p: &ProjectRow) -> Value {
    json!({
        "id": p.id, "name": p.name, "domain_id": p.domain_id, "description": p.description,
        "enabled": p.enabled, "is_domain": false, "parent_id": p.domain_id, "tags": [], "options": {},
        "links": {"self": format!("{}/projects/{}", base(id), p.id)},
    })
}

/// A user in Keystone's shape (never the hash).
pub fn user_json(id: &Identity, u: &UserRow) -> Value {
    let mut v = json!({
        "id": u.id, "name": u.name, "domain_id": u.domain_id, "enabled": u.enabled,
        "password_expires_at": null, "options": {},
        "links": {"self": format!("{}/users/{}", base(id), u.id)},
    });
    if let Some(p) = &u.default_project_id {
        v["default_project_id"] = json!(p);
    }
    v
}

/// A role in Keystone's shape.
pub fn role_json(id: &Identity, r: &RoleRow) -> Value {
    json!({
        "id": r.id, "name": r.name, "domain_id": null, "description": r.description, "options": {},
        "links": {"self": format!("{}/roles/{}", base(id), r.id)},
    })
}

/// The service catalog.
/// The catalog's services: type, name and URL. A service's id is
/// `<name>-service`.
pub fn catalog_services(id: &Identity) -> [(&'static str, &'static str, String); 4] {
    let e = &id.endpoints();
    [
        ("identity", "keystone", base(id)),
        ("compute", "nova", e.compute.clone()),
        ("placement", "placement", e.placement.clone()),
        ("image", "glance", e.image.clone()),
    ]
}

/// The catalog of a token.
pub fn catalog_json(id: &Identity) -> Value {
    let region = &id.cfg.region;
    let services = catalog_services(id);
    Value::Array(
        services
            .iter()
            .map(|(ty, name, url)| {
                let endpoints: Vec<Value> = ["public", "internal", "admin"]
                    .iter()
                    .map(|iface| {
                        json!({
                            "id": format!("{name}-{iface}"), "interface": iface,
                            "region": region, "region_id": region, "url": url,
                        })
                    })
                    .collect();
                json!({"id": format!("{name}-service"), "type": ty, "name": name, "endpoints": endpoints})
            })
            .collect(),
    )
}

fn iso(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .format("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

/// A token body (`{"token": {...}}`).
pub fn token_json(id: &Identity, c: &Claims, with_catalog: bool) -> Value {
    let mut t = json!({
        "methods": c.methods,
        "user": {
            "id": c.user.id, "name": c.user.name, "password_expires_at": null,
            "domain": {"id": c.user_domain.id, "name": c.user_domain.name},
        },
        "audit_ids": c.audit_ids(),
        "issued_at": iso(c.issued_at_ms),
        "expires_at": iso(c.expires_at_ms),
    });
    if let Some(p) = &c.project {
        t["project"] = json!({
            "id": p.project.id, "name": p.project.name,
            "domain": {"id": p.domain.id, "name": p.domain.name},
        });
        t["is_domain"] = json!(false);
        t["roles"] = Value::Array(
            c.roles
                .iter()
                .map(|r| json!({"id": r.id, "name": r.name}))
                .collect(),
        );
        if with_catalog {
            t["catalog"] = catalog_json(id);
        }
    }
    json!({ "token": t })
}
