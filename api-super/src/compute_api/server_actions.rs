//! `POST /servers/{id}/action`: `os-stop`, `os-start`, `reboot`, `pause`,
//! `unpause`, `suspend`, `resume`, `rebuild`, `lock`, `unlock`,
//! `os-resetState`, `forceDelete`, the console actions and
//! `addSecurityGroup` / `removeSecurityGroup`
//! ([`super::server_security_groups`]).
//!
//! The handlers parse each action's body and render the answer;
//! [`crate::services::actions`] checks and starts the action (policy
//! through the lookup, Nova's states, the cell database, the cast to the
//! compute). `restore` is always a 409 (there is no soft delete). Other
//! upstream actions (resize, shelve, migrate, …) answer 400 "There is no
//! such action".

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde_json::{json, Map, Value};

use super::error::{ApiError, ApiResult};
use super::query_schema::{
    invalid_field, not_of_type, python_repr, python_value_repr as py_repr, too_long,
};
use super::{App, Ctx};
use crate::services::actions::{
    self, Spec, HARD_REBOOT, PAUSE, RESUME, SOFT_REBOOT, START, STOP, SUSPEND, UNPAUSE,
};
use crate::services::delete::delete_server;
use fabric::rpc::vm_state as vs;

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::BadRequest(msg.into())
}

/// `POST /servers/{id}/action`.
pub async fn action(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    let v: Value = serde_json::from_slice(&body).map_err(|_| bad("Malformed request body"))?;
    let Some(o) = v.as_object().filter(|o| o.len() == 1) else {
        return Err(bad("Malformed request body"));
    };
    let Some((name, arg)) = o.iter().next() else {
        return Err(bad("Malformed request body"));
    };
    match name.as_str() {
        "os-stop" => {
            null_body(name, arg)?;
            power(&app, &ctx, &id, &STOP).await
        }
        "os-start" => {
            null_body(name, arg)?;
            power(&app, &ctx, &id, &START).await
        }
        "reboot" => {
            let hard = reboot_type(arg)?;
            let spec = if hard { &HARD_REBOOT } else { &SOFT_REBOOT };
            power(&app, &ctx, &id, spec).await
        }
        "pause" => {
            null_body(name, arg)?;
            power(&app, &ctx, &id, &PAUSE).await
        }
        "unpause" => {
            null_body(name, arg)?;
            power(&app, &ctx, &id, &UNPAUSE).await
        }
        "suspend" => {
            null_body(name, arg)?;
            power(&app, &ctx, &id, &SUSPEND).await
        }
        "resume" => {
            null_body(name, arg)?;
            power(&app, &ctx, &id, &RESUME).await
        }
        "rebuild" => super::rebuild::rebuild(&app, &ctx, &id, arg).await,
        "os-getConsoleOutput" => super::server_console::console_output(&app, &ctx, &id, arg).await,
        "os-getVNCConsole" => super::server_console::get_vnc_console(&app, &ctx, &id, arg).await,
        "os-getSerialConsole" => {
            super::server_console::get_serial_console(&app, &ctx, &id, arg).await
        }
        "os-resetState" => {
            let state = reset_state_body(arg)?;
            actions::reset_state(&app, &ctx, &id, state).await?;
            Ok(StatusCode::ACCEPTED.into_response())
        }
        "addSecurityGroup" => {
            super::server_security_groups::action(&app, &ctx, &id, arg, true).await
        }
        "removeSecurityGroup" => {
            super::server_security_groups::action(&app, &ctx, &id, arg, false).await
        }
        "lock" => lock(&app, &ctx, &id, arg).await,
        "unlock" => {
            null_body(name, arg)?;
            unlock(&app, &ctx, &id).await
        }
        "restore" => {
            null_body(name, arg)?;
            actions::restore(&app, &ctx, &id).await?;
            Ok(StatusCode::ACCEPTED.into_response())
        }
        "forceDelete" => {
            null_body(name, arg)?;
            delete_server(
                &app,
                &ctx,
                &id,
                "os_compute_api:os-deferred-delete:force_delete",
            )
            .await?;
            Ok(StatusCode::ACCEPTED.into_response())
        }
        other => Err(bad(format!("There is no such action: {other}"))),
    }
}

/// The actions whose body is `null` (clients also send `{}`).
fn null_body(name: &str, arg: &Value) -> ApiResult<()> {
    match arg {
        Value::Null => Ok(()),
        Value::Object(m) if m.is_empty() => Ok(()),
        // Nova's schemas for these actions take any value (`{}`, with a
        // TODO to restrict it to null); this region refuses anything else
        // than null or `{}`, in JSON Schema's words for a `null` type.
        other => Err(invalid_field(name, other, &not_of_type(other, "'null'"))),
    }
}

/// `{"reboot": {"type": "SOFT" | "HARD"}}`: whether it is hard.
fn reboot_type(arg: &Value) -> ApiResult<bool> {
    let Some(o) = arg.as_object() else {
        return Err(invalid_field("reboot", arg, &not_of_type(arg, "'object'")));
    };
    // Nova's schema order: properties, required, additionalProperties.
    match o.get("type") {
        Some(t) if !t.is_string() => {
            return Err(invalid_field("type", t, &not_of_type(t, "'string'")));
        }
        None => {
            return Err(invalid_field(
                "reboot",
                arg,
                "'type' is a required property",
            ));
        }
        _ => {}
    }
    if let Some(k) = o.keys().find(|k| k.as_str() != "type") {
        return Err(invalid_field(
            "reboot",
            arg,
            &format!(
                "Additional properties are not allowed ({} was unexpected)",
                python_repr(k)
            ),
        ));
    }
    match &o["type"] {
        Value::String(t) if t.eq_ignore_ascii_case("HARD") => Ok(true),
        Value::String(t) if t.eq_ignore_ascii_case("SOFT") => Ok(false),
        t => Err(invalid_field(
            "type",
            t,
            &format!(
                "{} is not one of ['HARD', 'Hard', 'hard', 'SOFT', 'Soft', 'soft']",
                py_repr(t)
            ),
        )),
    }
}

/// `{"os-resetState": {"state": "active" | "error"}}`, checked as Nova's
/// `reset_server_state` schema (before the server is looked up): the
/// vm_state to set.
fn reset_state_body(arg: &Value) -> ApiResult<&'static str> {
    let Some(o) = arg.as_object() else {
        return Err(invalid_field(
            "os-resetState",
            arg,
            &not_of_type(arg, "'object'"),
        ));
    };
    let state = match o.get("state") {
        Some(Value::String(s)) if s == "active" => Some(vs::ACTIVE),
        Some(Value::String(s)) if s == "error" => Some(vs::ERROR),
        Some(t @ Value::String(_)) => {
            return Err(invalid_field(
                "state",
                t,
                &format!("{} is not one of ['active', 'error']", py_repr(t)),
            ))
        }
        Some(t) => return Err(invalid_field("state", t, &not_of_type(t, "'string'"))),
        None => None,
    };
    let Some(state) = state else {
        return Err(invalid_field(
            "os-resetState",
            arg,
            "'state' is a required property",
        ));
    };
    if let Some(k) = o.keys().find(|k| k.as_str() != "state") {
        return Err(invalid_field(
            "os-resetState",
            arg,
            &format!(
                "Additional properties are not allowed ({} was unexpected)",
                python_repr(k)
            ),
        ));
    }
    Ok(state)
}

async fn power(app: &App, ctx: &Ctx, id: &str, spec: &Spec) -> ApiResult<Response> {
    actions::power(app, ctx, id, spec).await?;
    Ok(StatusCode::ACCEPTED.into_response())
}

/// `lock` (`locked_reason` from 2.73). Locking a locked server is a no-op
/// for its owner, as upstream.
async fn lock(app: &App, ctx: &Ctx, id: &str, arg: &Value) -> ApiResult<Response> {
    let reason = match arg {
        Value::Null => None,
        Value::Object(m) if ctx.mv.at_least(73) => {
            match m.get("locked_reason") {
                None => {}
                Some(Value::String(s)) if s.chars().count() <= 255 => {}
                Some(v @ Value::String(_)) => {
                    return Err(invalid_field("locked_reason", v, &too_long(v)))
                }
                Some(other) => {
                    return Err(invalid_field(
                        "locked_reason",
                        other,
                        &not_of_type(other, "'string'"),
                    ))
                }
            }
            if let Some(k) = m.keys().find(|k| k.as_str() != "locked_reason") {
                return Err(invalid_field(
                    "lock",
                    arg,
                    &format!(
                        "Additional properties are not allowed ({} was unexpected)",
                        python_repr(k)
                    ),
                ));
            }
            m.get("locked_reason")
                .and_then(Value::as_str)
                .map(str::to_owned)
        }
        Value::Object(m) if m.is_empty() => None,
        // 2.73: Nova's `['object', 'null']`. Before, Nova takes any value
        // (`{}`); this region only null or `{}`.
        other if ctx.mv.at_least(73) => {
            return Err(invalid_field(
                "lock",
                other,
                &not_of_type(other, "'object', 'null'"),
            ))
        }
        other => return Err(invalid_field("lock", other, &not_of_type(other, "'null'"))),
    };
    actions::lock(app, ctx, id, reason.as_deref()).await?;
    Ok(StatusCode::ACCEPTED.into_response())
}

/// `unlock`: a server locked by an admin needs
/// `os-lock-server:unlock:unlock_override` to be unlocked by its owner.
async fn unlock(app: &App, ctx: &Ctx, id: &str) -> ApiResult<Response> {
    actions::unlock(app, ctx, id).await?;
    Ok(StatusCode::ACCEPTED.into_response())
}

/// Turns validated metadata into a JSON object.
pub(crate) fn metadata_object(items: &[(String, String)]) -> Value {
    Value::Object(
        items
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect::<Map<_, _>>(),
    )
}
