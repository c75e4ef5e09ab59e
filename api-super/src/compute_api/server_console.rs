//! `os-getConsoleOutput` (`POST /servers/{id}/action`): the tail of the
//! guest's console log, as Nova's `console_output` API; the call itself is
//! [`crate::services::console`].

use axum::response::{IntoResponse, Response};
use axum::Json;
use fabric::rpc::RequestIds;
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::servers::lookup::{find, Found};
use super::{App, Ctx};

/// Nova's schema: `length` an integer ≥ -1, a string of one, or null;
/// -1 and null mean the whole log.
fn length(arg: &Value) -> ApiResult<u32> {
    let bad = |why: String| {
        ApiError::BadRequest(format!(
            "Invalid input for field/attribute length. Value: {arg_len}. {why}",
            arg_len = arg.get("length").map(Value::to_string).unwrap_or_default()
        ))
    };
    let obj =
        match arg {
            Value::Object(o) => o,
            Value::Null => return Ok(0),
            _ => return Err(ApiError::BadRequest(
                "Invalid input for field/attribute os-getConsoleOutput. Value: must be an object"
                    .into(),
            )),
        };
    if let Some(k) = obj.keys().find(|k| k.as_str() != "length") {
        return Err(ApiError::BadRequest(format!(
            "Additional properties are not allowed ('{k}' was unexpected)"
        )));
    }
    let n: i64 = match obj.get("length") {
        None | Some(Value::Null) => return Ok(0),
        Some(Value::Number(n)) => n
            .as_i64()
            .ok_or_else(|| bad(format!("{n} is not of type 'integer', 'string', 'null'")))?,
        Some(Value::String(s)) => s
            .parse()
            .map_err(|_| bad(format!("'{s}' does not match '^-?[0-9]+$'")))?,
        Some(other) => {
            return Err(bad(format!(
                "{other} is not of type 'integer', 'string', 'null'"
            )))
        }
    };
    match n {
        -1 => Ok(0),
        n if n < -1 => Err(bad(format!("{n} is less than the minimum of -1"))),
        n => Ok(u32::try_from(n).unwrap_or(u32::MAX)),
    }
}

/// `os-getConsoleOutput`.
pub async fn console_output(app: &App, ctx: &Ctx, id: &str, arg: &Value) -> ApiResult<Response> {
    let tail = length(arg)?;
    let (cell, s) = match find(app, ctx, id, "os_compute_api:os-console-output").await? {
        Found::Build(_) => return Err(ApiError::Conflict(format!("Instance {id} is not ready"))),
        Found::Cell(cell, s) => (cell, s),
    };
    let Some(host) = s.host.as_deref() else {
        return Err(ApiError::Conflict(format!("Instance {id} is not ready")));
    };
    let ids = RequestIds {
        request_id: ctx.request_id.clone(),
        global_request_id: ctx.request_id.clone(),
    };
    let output = crate::services::console::output(app, &cell, host, id, tail, &ids).await?;
    Ok(Json(json!({ "output": output })).into_response())
}
