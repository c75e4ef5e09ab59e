//! `/v2/images`: list, create, show, patch, delete, upload, download.

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State as AxState};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;

use super::{image_json, State};
use crate::image::error::{ImageError, Result};
use crate::image::model::{ImageStatus, Visibility};
use crate::image::service::{Caller, ListQuery, PatchOp, SortKey};

/// The JSON-patch media type of Glance v2.1 (v2.0's is refused: 415).
pub const PATCH_MEDIA_TYPE: &str = "application/openstack-images-v2.1-json-patch";

fn bad(msg: impl Into<String>) -> ImageError {
    ImageError::BadRequest(msg.into())
}

fn parse_bool(key: &str, v: &str) -> Result<bool> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(bad(format!("Invalid value for {key}: {v}"))),
    }
}

fn parse_dir(d: &str) -> Result<bool> {
    match d {
        "asc" => Ok(true),
        "desc" => Ok(false),
        _ => Err(bad(format!("Invalid sort direction: {d}"))),
    }
}

/// Parses the query of `GET /v2/images`.
fn parse_list_query(pairs: &[(String, String)]) -> Result<ListQuery> {
    let mut q = ListQuery::default();
    let mut sort_keys = Vec::new();
    let mut sort_dirs = Vec::new();
    for (k, v) in pairs {
        match k.as_str() {
            "limit" => {
                let n: i64 = v
                    .parse()
                    .map_err(|_| bad("limit param must be an integer"))?;
                if n < 0 {
                    return Err(bad("limit param must be positive"));
                }
                q.limit = Some(n.min(i64::from(u32::MAX)) as u32);
            }
            "marker" => q.marker = Some(v.clone()),
            "sort_key" => sort_keys.push(v.parse::<SortKey>()?),
            "sort_dir" => sort_dirs.push(parse_dir(v)?),
            "sort" => {
                for part in v.split(',').filter(|p| !p.is_empty()) {
                    let (key, dir) = part.split_once(':').unwrap_or((part, "desc"));
                    q.sort.push((key.trim().parse()?, parse_dir(dir.trim())?));
                }
            }
            "name" => q.filter.name = Some(v.clone()),
            "status" => {
                q.filter.status = Some(v.parse::<ImageStatus>()?.as_str().to_owned());
            }
            "owner" => q.filter.owner = Some(v.clone()),
            "visibility" => {
                if v == "all" {
                    q.include_community = true;
                } else {
                    q.filter.visibility = Some(v.parse::<Visibility>()?.as_str().to_owned());
                }
            }
            "os_hidden" => q.filter.os_hidden = Some(parse_bool(k, v)?),
            "disk_format" => q.filter.disk_format = Some(v.clone()),
            "container_format" => q.filter.container_format = Some(v.clone()),
            "tag" => q.tags.push(v.clone()),
            "member_status" => {}
            "size_min" | "size_max" | "created_at" | "updated_at" | "protected" | "id"
            | "checksum" | "os_hash_value" => {
                return Err(bad(format!("Filtering by {k} is not supported here.")))
            }
            _ => {
                q.properties.insert(k.clone(), v.clone());
            }
        }
    }
    if !sort_keys.is_empty() || !sort_dirs.is_empty() {
        if !q.sort.is_empty() {
            return Err(bad(
                "The 'sort' parameter cannot be combined with 'sort_key' or 'sort_dir'.",
            ));
        }
        if sort_dirs.len() > 1 && sort_dirs.len() != sort_keys.len() {
            return Err(bad(
                "Number of sort dirs does not match the number of sort keys",
            ));
        }
        if sort_keys.is_empty() {
            sort_keys.push(SortKey::CreatedAt);
        }
        let default_dir = sort_dirs.first().copied().unwrap_or(false);
        q.sort = sort_keys
            .iter()
            .enumerate()
            .map(|(i, k)| (*k, sort_dirs.get(i).copied().unwrap_or(default_dir)))
            .collect();
    }
    if q.filter.os_hidden.is_none() {
        q.filter.os_hidden = Some(false);
    }
    Ok(q)
}

fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// `GET /v2/images`.
pub async fn list(
    caller: Caller,
    AxState(svc): AxState<State>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Result<Json<Value>> {
    let q = parse_list_query(&pairs)?;
    let page = svc.list(&caller, &q).await?;
    let mut body = json!({
        "images": page.images.iter().map(image_json).collect::<Vec<_>>(),
        "first": "/v2/images",
        "schema": "/v2/schemas/images",
    });
    if page.more {
        if let Some(last) = page.images.last() {
            let mut qs: Vec<String> = pairs
                .iter()
                .filter(|(k, _)| k != "marker" && k != "limit")
                .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
                .collect();
            qs.push(format!("limit={}", page.limit));
            qs.push(format!("marker={}", last.id()));
            body["next"] = json!(format!("/v2/images?{}", qs.join("&")));
        }
    }
    Ok(Json(body))
}

/// `POST /v2/images`: 201 with the image (`queued`).
pub async fn create(caller: Caller, AxState(svc): AxState<State>, body: Bytes) -> Result<Response> {
    let v: Value =
        serde_json::from_slice(&body).map_err(|_| bad("The request body is not valid JSON."))?;
    let Value::Object(obj) = v else {
        return Err(bad("The request body must be a JSON object."));
    };
    let img = svc.create(&caller, &obj).await?;
    let mut resp = (StatusCode::CREATED, Json(image_json(&img))).into_response();
    if let Ok(loc) = HeaderValue::from_str(&format!("{}/v2/images/{}", svc.public_url(), img.id()))
    {
        resp.headers_mut().insert(header::LOCATION, loc);
    }
    Ok(resp)
}

/// `GET /v2/images/{id}`.
pub async fn show(
    caller: Caller,
    AxState(svc): AxState<State>,
    Path(id): Path<String>,
) -> Result<Json<Value>> {
    Ok(Json(image_json(&svc.get(&caller, &id).await?)))
}

fn parse_patch(body: &[u8]) -> Result<Vec<PatchOp>> {
    let v: Value =
        serde_json::from_slice(body).map_err(|_| bad("The request body is not valid JSON."))?;
    let ops = v
        .as_array()
        .ok_or_else(|| bad("Request body must be a JSON array of operation objects."))?;
    ops.iter()
        .map(|op| {
            let kind = op
                .get("op")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("Operation objects must contain exactly one member named \"op\""))?;
            let path = op
                .get("path")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("Unable to find 'path' element in operation"))?;
            let key = path
                .strip_prefix('/')
                .filter(|k| !k.is_empty() && !k.contains('/'))
                .ok_or_else(|| bad(format!("Invalid JSON pointer for this resource: '{path}'")))?
                .replace("~1", "/")
                .replace("~0", "~");
            let value = || {
                op.get("value")
                    .cloned()
                    .ok_or_else(|| bad(format!("Operation \"{kind}\" requires a member named \"value\".")))
            };
            Ok(match kind {
                "add" => PatchOp::Add(key, value()?),
                "replace" => PatchOp::Replace(key, value()?),
                "remove" => PatchOp::Remove(key),
                other => {
                    return Err(bad(format!(
                        "Operation objects must contain exactly one member named \"op\" with one of \"add\", \"remove\", \"replace\"; got {other:?}"
                    )))
                }
            })
        })
        .collect()
}

fn content_type(headers: &HeaderMap) -> &str {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim())
        .unwrap_or("")
}

/// `PATCH /v2/images/{id}` with [`PATCH_MEDIA_TYPE`].
pub async fn patch(
    caller: Caller,
    AxState(svc): AxState<State>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>> {
    if content_type(&headers) != PATCH_MEDIA_TYPE {
        return Err(ImageError::UnsupportedMediaType(format!(
            "Unsupported Content-Type; use {PATCH_MEDIA_TYPE}"
        )));
    }
    let ops = parse_patch(&body)?;
    Ok(Json(image_json(&svc.patch(&caller, &id, &ops).await?)))
}

/// `DELETE /v2/images/{id}`: 204.
pub async fn delete(
    caller: Caller,
    AxState(svc): AxState<State>,
    Path(id): Path<String>,
) -> Result<StatusCode> {
    svc.delete(&caller, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `PUT /v2/images/{id}/file`: 204 once stored.
pub async fn upload(
    caller: Caller,
    AxState(svc): AxState<State>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode> {
    if content_type(&headers) != "application/octet-stream" {
        return Err(ImageError::UnsupportedMediaType(
            "Unsupported Content-Type; use application/octet-stream".into(),
        ));
    }
    svc.upload(&caller, &id, body.into_data_stream()).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /v2/images/{id}/file`: the data (200), or 204 when there is none.
pub async fn download(
    caller: Caller,
    AxState(svc): AxState<State>,
    Path(id): Path<String>,
) -> Result<Response> {
    let (img, file) = svc.download(&caller, &id).await?;
    let Some(file) = file else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    let stream = futures_util::stream::unfold(Some(file), |file| async move {
        let mut file = file?;
        let mut buf = vec![0u8; 64 * 1024];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok::<_, std::io::Error>(Bytes::from(buf)), Some(file)))
            }
            Err(e) => Some((Err(e), None)),
        }
    });
    let mut resp = Body::from_stream(stream).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    if let Some(size) = img.row.size {
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    }
    if let Some(md5) = img
        .row
        .checksum
        .as_deref()
        .and_then(|c| HeaderValue::from_str(c).ok())
    {
        h.insert("content-md5", md5);
    }
    Ok(resp)
}
