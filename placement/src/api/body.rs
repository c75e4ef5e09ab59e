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
    serde_json::from_value(value)
        .map_err(|e| PlacementError::bad_request(format!("JSON does not validate: {e}")))
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
