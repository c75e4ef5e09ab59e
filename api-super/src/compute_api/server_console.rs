//! `os-getConsoleOutput` (`POST /servers/{id}/action`): the tail of the
//! guest's console log, as Nova's `console_output` API; the call itself is
//! [`crate::services::console`].

use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::{App, Ctx};
use crate::services::console::{self, ConsoleKind};

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
    let guest = console::locate(app, ctx, id, "os_compute_api:os-console-output").await?;
    let output = guest.output(app, tail).await?;
    Ok(Json(json!({ "output": output })).into_response())
}

/// The protocols and types Nova's schema knows (2.6 and later).
const PROTOCOLS: &[&str] = &["vnc", "spice", "serial", "mks"];
const TYPES: &[&str] = &["novnc", "xvpvnc", "spice-html5", "serial", "webmks"];

/// A console of `kind` for the server `id`: the compute says where it
/// listens, a token is minted for this process's proxy of that kind, and
/// the URL names both (serial: `<base>?token=…`; noVNC, as Nova's:
/// `<base>?path=%3Ftoken%3D…`, the WebSocket path noVNC's client opens).
async fn console_url(
    app: &App,
    ctx: &Ctx,
    id: &str,
    rule: &str,
    kind: ConsoleKind,
) -> ApiResult<String> {
    // The server first: another project's server is a 404 whatever the
    // proxies, as Nova (which looks the instance up before the console).
    let guest = console::locate(app, ctx, id, rule).await?;
    let base = match kind {
        ConsoleKind::Serial => app.serial_proxy_url.as_deref(),
        ConsoleKind::Novnc => app.novnc_proxy_url.as_deref(),
    };
    let Some(base) = base else {
        let option = match kind {
            ConsoleKind::Serial => "compute.serial_proxy_listen",
            ConsoleKind::Novnc => "compute.novnc_proxy_listen",
        };
        return Err(ApiError::BadRequest(format!(
            "Unavailable console type {}: no {} console proxy runs here ({option}).",
            kind.name(),
            kind.name()
        )));
    };
    let token = guest.token(app, kind).await?;
    Ok(match kind {
        ConsoleKind::Serial => format!("{base}?token={token}"),
        ConsoleKind::Novnc => format!("{base}?path=%3Ftoken%3D{token}"),
    })
}

/// `POST /servers/{id}/remote-consoles` (2.6+): serial and noVNC consoles
/// are built; xvpvnc, SPICE and MKS are not.
pub async fn remote_consoles(
    axum::extract::State(app): axum::extract::State<App>,
    axum::Extension(ctx): axum::Extension<Ctx>,
    axum::extract::Path(id): axum::extract::Path<String>,
    body: axum::body::Bytes,
) -> ApiResult<Response> {
    if !ctx.mv.at_least(6) {
        return Err(ApiError::NotFound(
            "The resource could not be found.".into(),
        ));
    }
    let v: Value = serde_json::from_slice(&body)
        .map_err(|_| ApiError::BadRequest("Malformed request body".into()))?;
    let Some(rc) = v.get("remote_console").and_then(Value::as_object) else {
        return Err(ApiError::BadRequest(
            "Invalid input for field/attribute remote_console. Value: None. 'remote_console' is a required property"
                .into(),
        ));
    };
    let field = |k: &str, allowed: &[&str]| -> ApiResult<String> {
        match rc.get(k) {
            Some(Value::String(s)) if allowed.contains(&s.as_str()) => Ok(s.clone()),
            Some(other) => Err(ApiError::BadRequest(format!(
                "Invalid input for field/attribute {k}. Value: {other}. {other} is not one of {allowed:?}"
            ))),
            None => Err(ApiError::BadRequest(format!(
                "Invalid input for field/attribute remote_console. '{k}' is a required property"
            ))),
        }
    };
    let protocol = field("protocol", PROTOCOLS)?;
    let kind = field("type", TYPES)?;
    if let Some(k) = rc
        .keys()
        .find(|k| !["protocol", "type"].contains(&k.as_str()))
    {
        return Err(ApiError::BadRequest(format!(
            "Additional properties are not allowed ('{k}' was unexpected)"
        )));
    }
    let console = match (protocol.as_str(), kind.as_str()) {
        ("serial", "serial") => ConsoleKind::Serial,
        ("vnc", "novnc") => ConsoleKind::Novnc,
        ("vnc", "xvpvnc") | ("spice", "spice-html5") | ("mks", "webmks") => {
            return Err(ApiError::NotImplemented(format!(
                "The {protocol} console ({kind}) is not built; the serial and noVNC consoles are."
            )))
        }
        _ => {
            return Err(ApiError::BadRequest(format!(
                "Unavailable console type {kind} for protocol {protocol}."
            )))
        }
    };
    let url = console_url(
        &app,
        &ctx,
        &id,
        "os_compute_api:os-remote-consoles",
        console,
    )
    .await?;
    Ok(Json(json!({
        "remote_console": {"protocol": protocol, "type": kind, "url": url}
    }))
    .into_response())
}

/// `os-getSerialConsole` (the action before 2.6).
pub async fn get_serial_console(
    app: &App,
    ctx: &Ctx,
    id: &str,
    arg: &Value,
) -> ApiResult<Response> {
    legacy_console(app, ctx, id, arg, ConsoleKind::Serial).await
}

/// `os-getVNCConsole` (the action before 2.6): `novnc` only (`xvpvnc`
/// is not built).
pub async fn get_vnc_console(app: &App, ctx: &Ctx, id: &str, arg: &Value) -> ApiResult<Response> {
    legacy_console(app, ctx, id, arg, ConsoleKind::Novnc).await
}

/// The pre-2.6 console actions: `{"type": …}` in, `{"console": {"type",
/// "url"}}` out.
async fn legacy_console(
    app: &App,
    ctx: &Ctx,
    id: &str,
    arg: &Value,
    kind: ConsoleKind,
) -> ApiResult<Response> {
    let (ty, allowed): (&str, &str) = match kind {
        ConsoleKind::Serial => ("serial", "['serial']"),
        ConsoleKind::Novnc => ("novnc", "['novnc', 'xvpvnc']"),
    };
    match arg.get("type").and_then(Value::as_str) {
        Some(t) if t == ty => {}
        Some("xvpvnc") if kind == ConsoleKind::Novnc => {
            return Err(ApiError::NotImplemented(
                "The vnc console (xvpvnc) is not built; noVNC is.".into(),
            ))
        }
        other => {
            return Err(ApiError::BadRequest(format!(
                "Invalid input for field/attribute type. Value: {}. It is not one of {allowed}",
                other.unwrap_or("None")
            )))
        }
    }
    let url = console_url(app, ctx, id, "os_compute_api:os-remote-consoles", kind).await?;
    Ok(Json(json!({"console": {"type": ty, "url": url}})).into_response())
}

/// `GET /os-console-auth-tokens/{token}` (admin): where a token leads.
/// Before 2.31 Nova shows only RDP tokens; serial ones are shown from 2.31.
pub async fn auth_token(
    axum::extract::State(app): axum::extract::State<App>,
    axum::Extension(ctx): axum::Extension<Ctx>,
    axum::extract::Path(token): axum::extract::Path<String>,
) -> ApiResult<Response> {
    app.authorize(
        &ctx,
        "os_compute_api:os-console-auth-tokens",
        ctx.project_id(),
    )?;
    let Some(t) = app.consoles.check(&token).await? else {
        return Err(ApiError::NotFound(
            "The token is invalid or has expired.".into(),
        ));
    };
    if !ctx.mv.at_least(31) {
        return Err(ApiError::BadRequest(
            "The requested console type details are not accessible".into(),
        ));
    }
    Ok(Json(json!({"console": {
        "instance_uuid": t.instance_uuid,
        "host": t.addr.ip().to_string(),
        "port": t.addr.port(),
        "internal_access_path": null,
    }}))
    .into_response())
}
