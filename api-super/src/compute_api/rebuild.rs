//! The `rebuild` server action's body, as Nova's rebuild schema has it
//! per microversion: `imageRef` (required), `name`, `adminPass`,
//! `metadata` (replaces all), `preserve_ephemeral` (a boolean; no
//! ephemeral disks here), `OS-DCF:diskConfig`, `accessIPv4`/`accessIPv6`,
//! `personality` (below 2.57; not built), `description` (2.19),
//! `key_name` (2.54; null removes the key pair), `user_data` (2.57; null
//! removes it), `trusted_image_certificates` (2.63; null removes them) and
//! `hostname` (2.90, a fully qualified name from 2.94). The answer is
//! the server as the rebuild leaves it, with `adminPass` and (2.57)
//! `user_data`, as Nova's.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use super::error::{ApiError, ApiResult};
use super::query_schema::{invalid_field, not_of_type, python_repr, python_value_repr};
use super::server_metadata::validate_metadata;
use super::servers::schema::{
    boolean_field, check_inert, description_field, hostname_error, hostname_ok, name_field,
    user_data_field,
};
use super::servers::trusted_certs::trusted_certs_field;
use super::servers::views::detail_view;
use super::servers::{access_ip, add_server_groups};
use super::{App, Ctx};
use crate::services::actions::{self, Rebuild};

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::BadRequest(msg.into())
}

/// The keys of Nova's rebuild schema at `ctx`'s microversion.
fn known(ctx: &Ctx, key: &str) -> bool {
    let since = |v: u32| ctx.mv.at_least(v);
    match key {
        "imageRef" | "name" | "metadata" | "adminPass" | "preserve_ephemeral"
        | "OS-DCF:diskConfig" | "accessIPv4" | "accessIPv6" => true,
        "personality" => !since(57),
        "description" => since(19),
        "key_name" => since(54),
        "user_data" => since(57),
        "trusted_image_certificates" => since(63),
        "hostname" => since(90),
        _ => false,
    }
}

/// `key_name` (Nova's `name_or_none`): `Some(None)` removes the key pair.
fn key_name_field(v: &Value) -> ApiResult<Option<String>> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) if !s.is_empty() && s.chars().count() <= 255 => Ok(Some(s.clone())),
        v => Err(invalid_field(
            "key_name",
            v,
            &format!(
                "{} is not valid under any of the given schemas",
                python_value_repr(v)
            ),
        )),
    }
}

/// The body checked in the schema's order: each property, then
/// `imageRef` required, then no other key. Messages about the `rebuild`
/// object itself leave out Nova's `Value: {…}`, which would print
/// `adminPass` and `user_data` into the message.
fn parse(ctx: &Ctx, o: &Map<String, Value>) -> ApiResult<Rebuild> {
    let name = o.get("name").map(name_field).transpose()?;
    let image = match o.get("imageRef") {
        None => None,
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(v @ Value::String(_)) => {
            return Err(invalid_field("imageRef", v, "'' is not a 'uuid'"))
        }
        Some(other) => {
            return Err(invalid_field(
                "imageRef",
                other,
                &not_of_type(other, "'string'"),
            ))
        }
    };
    for k in ["adminPass", "OS-DCF:diskConfig"] {
        if let Some(v) = o.get(k) {
            check_inert(k, v)?;
        }
    }
    let metadata = o
        .get("metadata")
        .map(|m| validate_metadata(m, "metadata"))
        .transpose()?;
    if let Some(v) = o.get("preserve_ephemeral") {
        boolean_field("preserve_ephemeral", v)?;
    }
    let access_ips = access_ip::access_ips(o)?;
    let description = if ctx.mv.at_least(19) {
        description_field(o)?
    } else {
        None
    };
    let key_name = if ctx.mv.at_least(54) {
        o.get("key_name").map(key_name_field).transpose()?
    } else {
        None
    };
    let user_data = if ctx.mv.at_least(57) {
        o.get("user_data").map(user_data_field).transpose()?
    } else {
        None
    };
    let trusted_certs = if ctx.mv.at_least(63) {
        o.get("trusted_image_certificates")
            .map(trusted_certs_field)
            .transpose()?
    } else {
        None
    };
    let hostname = match o.get("hostname").filter(|_| ctx.mv.at_least(90)) {
        None => None,
        Some(Value::String(h)) if hostname_ok(ctx, h) => Some(h.clone()),
        Some(other) => return Err(hostname_error(ctx, other)),
    };
    let Some(image) = image else {
        return Err(bad(
            "Invalid input for field/attribute rebuild. 'imageRef' is a required property",
        ));
    };
    if let Some(k) = o.keys().find(|k| !known(ctx, k)) {
        return Err(bad(format!(
            "Invalid input for field/attribute rebuild. Additional properties are not allowed ({} was unexpected)",
            python_repr(k)
        )));
    }
    // Known to Nova's schema (below 2.57), not built in this region.
    if o.get("personality").is_some_and(|p| p != &json!([])) {
        return Err(bad(
            "File injection (personality) is not built in this region; rebuild without 'personality'.",
        ));
    }
    Ok(Rebuild {
        image,
        name,
        metadata,
        access_ips,
        description,
        key_name,
        user_data,
        hostname,
        trusted_certs,
    })
}

/// `rebuild`: 202 with the server.
pub(crate) async fn rebuild(app: &App, ctx: &Ctx, id: &str, arg: &Value) -> ApiResult<Response> {
    let Some(o) = arg.as_object() else {
        return Err(invalid_field("rebuild", arg, &not_of_type(arg, "'object'")));
    };
    let r = parse(ctx, o)?;
    let s = actions::rebuild(app, ctx, id, r).await?;
    let mut view = detail_view(app, ctx, &s);
    add_server_groups(app, ctx, &s.uuid, &mut view).await?;
    view["adminPass"] = json!(o
        .get("adminPass")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(admin_pass));
    if ctx.mv.at_least(57) {
        view["user_data"] = json!(s.user_data);
    }
    Ok((StatusCode::ACCEPTED, Json(json!({ "server": view }))).into_response())
}

/// A generated admin password (Nova's length and alphabet).
fn admin_pass() -> String {
    use rand::Rng;
    let mut r = rand::thread_rng();
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    (0..12)
        .map(|_| ALPHABET[r.gen_range(0..ALPHABET.len())] as char)
        .collect()
}
