//! `POST /v2.1/os-server-external-events` (`os-server-external-events:
//! create`: admins and the `service` role), as Nova's
//! `server_external_events` API: the body checked as Nova's schema for the
//! microversion (the event names grow: `volume-extended` 2.51,
//! `power-update` 2.76, `accelerator-request-bound` 2.82,
//! `volume-reimaged` 2.93), before the policy; each event answered with
//! its own `code` (200 accepted, 400 a volume event without its tag, 404
//! no such live instance, 422 an instance without a host) and the whole
//! with 200, or 207 when any event was not accepted. The delivery is
//! [`crate::services::external_events`].

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{json, Map, Value};

use super::error::{ApiError, ApiResult};
use super::images::is_uuid_like;
use super::query_schema::{invalid_field, not_of_type, python_repr, python_value_repr, too_long};
use super::{App, Ctx};
use crate::services::external_events::{deliver, Event};

/// The policy rule.
const RULE: &str = "os_compute_api:os-server-external-events:create";

/// Nova's `EVENT_STATUSES`.
const STATUSES: &[&str] = &["failed", "completed", "in-progress"];

/// The event names Nova's schema takes at microversion `mv`.
fn names(mv: u32) -> Vec<&'static str> {
    let mut n = vec![
        "network-changed",
        "network-vif-plugged",
        "network-vif-unplugged",
        "network-vif-deleted",
    ];
    for (from, name) in [
        (51, "volume-extended"),
        (76, "power-update"),
        (82, "accelerator-request-bound"),
        (93, "volume-reimaged"),
    ] {
        if mv >= from {
            n.push(name);
        }
    }
    n
}

/// `['a', 'b']`, as Python prints a list of strings.
fn py_list(items: &[&str]) -> String {
    let inner: Vec<String> = items.iter().map(|s| python_repr(s)).collect();
    format!("[{}]", inner.join(", "))
}

/// Additional properties, in jsonschema's words.
fn unexpected(field: &str, v: &Value, keys: &[&String]) -> ApiError {
    let listed: Vec<String> = keys.iter().map(|k| python_repr(k)).collect();
    let verb = if keys.len() == 1 { "was" } else { "were" };
    invalid_field(
        field,
        v,
        &format!(
            "Additional properties are not allowed ({} {verb} unexpected)",
            listed.join(", ")
        ),
    )
}

/// A string property checked against `allowed` (None: any string of at
/// most 255 characters).
fn string_prop(field: &str, v: &Value, allowed: Option<&[&str]>) -> ApiResult<()> {
    let Value::String(s) = v else {
        return Err(invalid_field(field, v, &not_of_type(v, "'string'")));
    };
    match allowed {
        Some(a) if !a.contains(&s.as_str()) => Err(invalid_field(
            field,
            v,
            &format!("{} is not one of {}", python_value_repr(v), py_list(a)),
        )),
        None if s.chars().count() > 255 => Err(invalid_field(field, v, &too_long(v))),
        _ => Ok(()),
    }
}

/// Checks the body as Nova's schema at `mv`: the events.
fn parse(body: &Value, mv: u32) -> ApiResult<Vec<Event>> {
    let Some(top) = body.as_object() else {
        return Err(ApiError::BadRequest(not_of_type(body, "'object'")));
    };
    let names = names(mv);
    let mut out = Vec::new();
    if let Some(events) = top.get("events") {
        let Some(list) = events.as_array() else {
            return Err(invalid_field(
                "events",
                events,
                &not_of_type(events, "'array'"),
            ));
        };
        if list.is_empty() {
            return Err(invalid_field("events", events, "[] is too short"));
        }
        for (i, item) in list.iter().enumerate() {
            let field = i.to_string();
            let Some(o) = item.as_object() else {
                return Err(invalid_field(&field, item, &not_of_type(item, "'object'")));
            };
            match o.get("server_uuid") {
                Some(Value::String(s)) if !is_uuid_like(s) => {
                    return Err(invalid_field(
                        "server_uuid",
                        &o["server_uuid"],
                        &format!("{} is not a 'uuid'", python_repr(s)),
                    ))
                }
                Some(u) if !u.is_string() => {
                    return Err(invalid_field("server_uuid", u, &not_of_type(u, "'string'")))
                }
                _ => {}
            }
            if let Some(n) = o.get("name") {
                string_prop("name", n, Some(&names))?;
            }
            if let Some(s) = o.get("status") {
                string_prop("status", s, Some(STATUSES))?;
            }
            if let Some(t) = o.get("tag") {
                string_prop("tag", t, None)?;
            }
            for k in ["server_uuid", "name"] {
                if !o.contains_key(k) {
                    return Err(invalid_field(
                        &field,
                        item,
                        &format!("{} is a required property", python_repr(k)),
                    ));
                }
            }
            let extra: Vec<&String> = o
                .keys()
                .filter(|k| !["server_uuid", "name", "status", "tag"].contains(&k.as_str()))
                .collect();
            if !extra.is_empty() {
                return Err(unexpected(&field, item, &extra));
            }
            let text = |k: &str| o.get(k).and_then(Value::as_str).map(str::to_owned);
            out.push(Event {
                server_uuid: text("server_uuid").unwrap_or_default(),
                name: text("name").unwrap_or_default(),
                status: text("status"),
                tag: text("tag"),
            });
        }
    }
    if !top.contains_key("events") {
        return Err(ApiError::BadRequest(
            "'events' is a required property".into(),
        ));
    }
    let extra: Vec<&String> = top.keys().filter(|k| k.as_str() != "events").collect();
    if !extra.is_empty() {
        let listed: Vec<String> = extra.iter().map(|k| python_repr(k)).collect();
        let verb = if extra.len() == 1 { "was" } else { "were" };
        return Err(ApiError::BadRequest(format!(
            "Additional properties are not allowed ({} {verb} unexpected)",
            listed.join(", ")
        )));
    }
    Ok(out)
}

/// `POST /v2.1/os-server-external-events`.
pub async fn create(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    body: Bytes,
) -> ApiResult<Response> {
    let v: Value = serde_json::from_slice(&body)
        .map_err(|_| ApiError::BadRequest("Malformed request body".into()))?;
    let events = parse(&v, ctx.mv.0)?;
    app.authorize(&ctx, RULE, ctx.project_id())?;
    let codes = deliver(&app, &ctx, &events).await?;
    // Each event as sent, with its status and code (Nova mutates the
    // request's dicts).
    let items = v["events"].as_array().cloned().unwrap_or_default();
    let mut partial = false;
    let answered: Vec<Value> = items
        .into_iter()
        .zip(codes)
        .map(|(mut item, code)| {
            if let Some(o) = item.as_object_mut() {
                let status = if code == 200 { "completed" } else { "failed" };
                partial |= code != 200;
                o.insert("status".into(), json!(status));
                o.insert("code".into(), json!(code));
            }
            item
        })
        .collect();
    let status = if partial {
        StatusCode::MULTI_STATUS
    } else {
        StatusCode::OK
    };
    let mut out = Map::new();
    out.insert("events".into(), Value::Array(answered));
    Ok((status, Json(Value::Object(out))).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(body: Value, mv: u32) -> String {
        match parse(&body, mv) {
            Err(ApiError::BadRequest(m)) => m,
            other => panic!("{:?}", other.map(|e| e.len())),
        }
    }

    const U: &str = "6f1f6a4e-9a47-4c7e-8f0e-000000000001";

    #[test]
    fn bodies_are_checked_as_novas_schema_per_microversion() {
        assert_eq!(msg(json!({}), 1), "'events' is a required property");
        assert_eq!(
            msg(json!({"events": []}), 1),
            "Invalid input for field/attribute events. Value: []. [] is too short"
        );
        assert_eq!(
            msg(
                json!({"events": [{"server_uuid": U, "name": "volume-extended"}]}),
                50
            ),
            format!(
                "Invalid input for field/attribute name. Value: volume-extended. \
                 'volume-extended' is not one of ['network-changed', 'network-vif-plugged', \
                 'network-vif-unplugged', 'network-vif-deleted']"
            )
        );
        assert!(parse(
            &json!({"events": [{"server_uuid": U, "name": "volume-extended"}]}),
            51
        )
        .is_ok());
        assert!(parse(
            &json!({"events": [{"server_uuid": U, "name": "power-update"}]}),
            75
        )
        .is_err());
        assert!(parse(
            &json!({"events": [{"server_uuid": U, "name": "volume-reimaged"}]}),
            93
        )
        .is_ok());
        assert_eq!(
            msg(json!({"events": [{"name": "network-changed"}]}), 1),
            "Invalid input for field/attribute 0. Value: {'name': 'network-changed'}. \
             'server_uuid' is a required property"
        );
        assert_eq!(
            msg(
                json!({"events": [{"server_uuid": "x", "name": "network-changed"}]}),
                1
            ),
            "Invalid input for field/attribute server_uuid. Value: x. 'x' is not a 'uuid'"
        );
        assert_eq!(
            msg(
                json!({"events": [{"server_uuid": U, "name": "network-changed", "status": "done"}]}),
                1
            ),
            "Invalid input for field/attribute status. Value: done. \
             'done' is not one of ['failed', 'completed', 'in-progress']"
        );
        assert_eq!(
            msg(
                json!({"events": [{"server_uuid": U, "name": "network-changed", "x": 1}]}),
                1
            ),
            format!(
                "Invalid input for field/attribute 0. Value: {{'name': 'network-changed', \
                 'server_uuid': '{U}', 'x': 1}}. Additional properties are not allowed \
                 ('x' was unexpected)"
            )
        );
    }
}
