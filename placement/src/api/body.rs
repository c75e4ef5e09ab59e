//! JSON request bodies: the content-type rules of upstream's
//! `require_content`, then serde into types that reject unknown fields,
//! with upstream's "JSON does not validate" / "Malformed JSON" 400s.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderMap, StatusCode};
use serde::de::DeserializeOwned;

use crate::error::{ErrorCode, PlacementError};

/// A JSON body of type `T`.
pub struct JsonBody<T>(pub T);

fn check_content_type(headers: &HeaderMap, body_len: usize) -> Result<(), PlacementError> {
    let unsupported = |media: &str| {
        PlacementError::client(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::Undefined,
            format!("The media type {media} is not supported, use application/json"),
        )
    };
    match headers
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or(""))
    {
        None if body_len > 0 => Err(PlacementError::bad_request("content-type header required")),
        None => Err(unsupported("None")),
        Some(ct) => {
            let media = ct.split(';').next().unwrap_or("").trim();
            if media.eq_ignore_ascii_case("application/json") {
                Ok(())
            } else {
                Err(unsupported(media))
            }
        }
    }
}

/// Parses a JSON body already read.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, PlacementError> {
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| PlacementError::bad_request(format!("Malformed JSON: {e}")))?;
    serde_json::from_value(value).map_err(|e| serde_schema_error(&e.to_string()))
}

/// Deserializes a part of a body already parsed, with upstream's messages.
pub fn from_value<T: DeserializeOwned>(value: serde_json::Value) -> Result<T, PlacementError> {
    serde_json::from_value(value).map_err(|e| serde_schema_error(&e.to_string()))
}

/// Upstream's 400 for a body that fails its JSON schema: jsonschema's
/// message, then the keyword that failed and where in the schema, e.g.
/// `Failed validating 'minimum' in schema['properties']['total']`.
pub fn schema_error(
    message: impl std::fmt::Display,
    keyword: &str,
    properties: &[&str],
) -> PlacementError {
    let path: String = properties
        .iter()
        .map(|p| format!("['properties']['{p}']"))
        .collect();
    PlacementError::bad_request(format!(
        "JSON does not validate: {message}\n\nFailed validating '{keyword}' in schema{path}"
    ))
}

/// Turns serde's description of a value (`string "x"`, `integer `5``) into
/// Python's repr, as jsonschema prints it.
fn python_repr(serde_desc: &str) -> String {
    let inner = |s: &str| s.trim_matches('`').to_owned();
    if let Some(v) = serde_desc.strip_prefix("string ") {
        format!("'{}'", v.trim_matches('"'))
    } else if let Some(v) = serde_desc.strip_prefix("integer ") {
        inner(v)
    } else if let Some(v) = serde_desc.strip_prefix("floating point ") {
        inner(v)
    } else if let Some(v) = serde_desc.strip_prefix("boolean ") {
        if inner(v) == "true" {
            "True".into()
        } else {
            "False".into()
        }
    } else if serde_desc == "null" || serde_desc == "unit value" {
        "None".into()
    } else if serde_desc == "sequence" {
        "[...]".into()
    } else if serde_desc == "map" {
        "{...}".into()
    } else {
        serde_desc.to_owned()
    }
}

/// Maps serde's "missing field" / "unknown field" / "invalid type" to
/// jsonschema's `required` / `additionalProperties` / `type` messages.
fn serde_schema_error(msg: &str) -> PlacementError {
    let quoted = |s: &str| s.split('`').nth(1).unwrap_or("").to_owned();
    if let Some(rest) = msg.strip_prefix("missing field ") {
        return schema_error(
            format!("'{}' is a required property", quoted(rest)),
            "required",
            &[],
        );
    }
    if let Some(rest) = msg.strip_prefix("unknown field ") {
        return schema_error(
            format!(
                "Additional properties are not allowed ('{}' was unexpected)",
                quoted(rest)
            ),
            "additionalProperties",
            &[],
        );
    }
    if let Some(rest) = msg.strip_prefix("invalid type: ") {
        let rest = rest.split(" at line ").next().unwrap_or(rest);
        if let Some((got, expected)) = rest.rsplit_once(", expected ") {
            let ty = match expected {
                e if e.contains("i64")
                    || e.contains("u64")
                    || e.contains("i32")
                    || e.contains("u32")
                    || e.contains("integer") =>
                {
                    "integer"
                }
                e if e.contains("f64") || e.contains("f32") => "number",
                e if e.contains("sequence") => "array",
                e if e.contains("string") => "string",
                e if e.contains("bool") => "boolean",
                _ => "object",
            };
            return schema_error(
                format!("{} is not of type '{ty}'", python_repr(got)),
                "type",
                &[],
            );
        }
    }
    PlacementError::bad_request(format!("JSON does not validate: {msg}"))
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = PlacementError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let headers = req.headers().clone();
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|e| PlacementError::bad_request(format!("Malformed JSON: {e}")))?;
        check_content_type(&headers, bytes.len())?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// As the extractor, for a handler that reads the body only at some microversions.
pub fn from_parts<T: DeserializeOwned>(
    headers: &HeaderMap,
    bytes: &[u8],
) -> Result<JsonBody<T>, PlacementError> {
    check_content_type(headers, bytes.len())?;
    parse_json(bytes).map(JsonBody)
}
