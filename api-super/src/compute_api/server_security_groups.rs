//! A server's security groups, as Nova's `security_groups` API answers
//! when its network service has no port for the server: the
//! `addSecurityGroup` / `removeSecurityGroup` actions and
//! `GET /servers/{id}/os-security-groups`.
//!
//! This region has no network service yet: servers boot without ports,
//! and the only group a project has is `default`. So, as Nova with
//! Neutron: a group other than `default` is 404 "Security group … is not
//! found for project …"; `default` is 404 "instance_id … could not be
//! found as device id on any ports" (the server has none); the list is
//! empty.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::servers::lookup::find;
use super::{App, Ctx};

/// The only security group a project has here.
pub const DEFAULT_GROUP: &str = "default";

/// `addSecurityGroup` (`add`) or `removeSecurityGroup` (`!add`): the
/// server first (404), then the policy, then the body, as Nova.
pub async fn action(app: &App, ctx: &Ctx, id: &str, arg: &Value, add: bool) -> ApiResult<Response> {
    let rule = if add {
        "os_compute_api:os-security-groups:add"
    } else {
        "os_compute_api:os-security-groups:remove"
    };
    find(app, ctx, id, rule).await?;
    let name = group_name(arg)?;
    if name != DEFAULT_GROUP {
        return Err(ApiError::NotFound(format!(
            "Security group {name} is not found for project {}",
            ctx.project_id()
        )));
    }
    // `default` exists, but the server has no port to put it on or take
    // it from.
    Err(ApiError::NotFound(format!(
        "instance_id {id} could not be found as device id on any ports"
    )))
}

/// Nova's `_parse`: `{"name": …}` (not an object: "Missing parameter
/// dict"; no name: "Security group not specified"; empty or blank:
/// "Security group name cannot be empty"). A name that is no string
/// (Nova: a 500) is a 400 here.
fn group_name(arg: &Value) -> ApiResult<String> {
    let bad = |m: &str| ApiError::BadRequest(m.to_owned());
    let Some(o) = arg.as_object() else {
        return Err(bad("Missing parameter dict"));
    };
    match o.get("name") {
        None => Err(bad("Security group not specified")),
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
        Some(Value::String(_) | Value::Null | Value::Bool(false)) => {
            Err(bad("Security group name cannot be empty"))
        }
        Some(Value::Array(a)) if a.is_empty() => Err(bad("Security group name cannot be empty")),
        Some(Value::Object(m)) if m.is_empty() => Err(bad("Security group name cannot be empty")),
        Some(_) => Err(bad("Security group name must be a string")),
    }
}

/// `GET /servers/{id}/os-security-groups` (`os-security-groups:list`):
/// the groups of the server's ports, none here.
pub async fn index(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    find(&app, &ctx, &id, "os_compute_api:os-security-groups:list").await?;
    Ok((StatusCode::OK, Json(json!({"security_groups": []}))).into_response())
}
