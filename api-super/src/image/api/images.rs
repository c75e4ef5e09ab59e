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
use crate::image::service::{Caller, CmpOp, ListField, ListQuery, PatchOp, SortKey, TimeField};

/// The JSON-patch media type of Glance v2.1 (JSON Schema draft 10 style
/// operations: `{"op": "replace", "path": "/name", "value": …}`).
pub const PATCH_MEDIA_TYPE: &str = "application/openstack-images-v2.1-json-patch";

/// The older v2.0 media type (draft 4 style: `{"replace": "/name", "value": …}`).
pub const PATCH_MEDIA_TYPE_V20: &str = "application/openstack-images-v2.0-json-patch";

/// The `Accept-Patch` of a 415 (Glance's: both, sorted).
const ACCEPT_PATCH: &str =
    "application/openstack-images-v2.0-json-patch, application/openstack-images-v2.1-json-patch";

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

/// Splits Glance's `op:value` filter expression; no operator (or a value
/// that is an ISO 8601 time as a whole, colons and all) is `eq`.
fn split_op(v: &str) -> (&str, &str) {
    match v.split_once(':') {
        Some((op, rest)) if parse_time(v).is_none() => (op, rest),
        _ => ("eq", v),
    }
}

/// An ISO 8601 time as Unix ms (UTC when no offset is given): a date, or
/// a date and time with optional fraction and offset.
fn parse_time(v: &str) -> Option<i64> {
    use chrono::{DateTime, NaiveDate, NaiveDateTime};
    if let Ok(t) = DateTime::parse_from_rfc3339(v) {
        return Some(t.timestamp_millis());
    }
    for f in ["%Y-%m-%dT%H:%M:%S%.f%#z", "%Y-%m-%dT%H:%M%#z"] {
        if let Ok(t) = DateTime::parse_from_str(v, f) {
            return Some(t.timestamp_millis());
        }
    }
    for f in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M:%S%.f",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(v, f) {
            return Some(t.and_utc().timestamp_millis());
        }
    }
    NaiveDate::parse_from_str(v, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc().timestamp_millis())
}

/// The values of an `in:` list: comma-separated, a value in double quotes
/// may hold commas (`\"` inside quotes is a quote), as Glance's api-wg
/// rules.
fn split_in_list(v: &str) -> Result<Vec<String>> {
    let invalid = |why: &str| bad(format!("Invalid filter value {v}. {why}"));
    let mut out = Vec::new();
    let mut chars = v.chars().peekable();
    loop {
        let mut cur = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            let mut closed = false;
            while let Some(c) = chars.next() {
                match c {
                    '\\' if chars.peek() == Some(&'"') => {
                        cur.push('"');
                        chars.next();
                    }
                    '"' => {
                        closed = true;
                        break;
                    }
                    c => cur.push(c),
                }
            }
            if !closed {
                return Err(invalid("The quote is not closed."));
            }
            match chars.next() {
                None => {
                    out.push(cur);
                    return Ok(out);
                }
                Some(',') => out.push(cur),
                Some(_) => return Err(invalid("There is no comma after closing quotation mark.")),
            }
        } else {
            loop {
                match chars.next() {
                    None => {
                        out.push(cur);
                        return Ok(out);
                    }
                    Some(',') => break,
                    Some('"') => {
                        return Err(invalid("There is no comma before opening quotation mark."))
                    }
                    Some(c) => cur.push(c),
                }
            }
            out.push(cur);
        }
    }
}

/// `?key=value`, `?key=eq:value` or `?key=in:a,b` of a core attribute.
fn any_of(q: &mut ListQuery, field: ListField, v: &str) -> Result<Vec<String>> {
    let values = match split_op(v) {
        ("eq", x) => vec![x.to_owned()],
        ("in", list) => split_in_list(list)?,
        (op, _) => return Err(bad(format!("Unable to filter by unknown operator '{op}'."))),
    };
    q.rows.any_of.push((field, values.clone()));
    Ok(values)
}

fn parse_size(v: &str) -> Result<i64> {
    v.trim()
        .parse()
        .map_err(|_| bad("Unable to filter on a range with a non-numeric value."))
}

/// Parses the query of `GET /v2/images`.
fn parse_list_query(pairs: &[(String, String)]) -> Result<ListQuery> {
    let mut q = ListQuery::default();
    let mut sort_keys = Vec::new();
    let mut sort_dirs = Vec::new();
    let mut new_sort = false;
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
            "sort_key" => sort_keys.push(v.trim().parse::<SortKey>()?),
            "sort_dir" => sort_dirs.push(parse_dir(v.trim())?),
            "sort" => {
                new_sort = true;
                for part in v.trim().split(',') {
                    let (key, dir) = part.split_once(':').unwrap_or((part, "desc"));
                    q.sort.push((key.trim().parse()?, parse_dir(dir.trim())?));
                }
            }
            "id" => {
                any_of(&mut q, ListField::Id, v)?;
            }
            "name" => {
                if let [one] = any_of(&mut q, ListField::Name, v)?.as_slice() {
                    q.filter.name = Some(one.clone());
                }
            }
            "status" => {
                let values = any_of(&mut q, ListField::Status, v)?;
                for s in &values {
                    s.parse::<ImageStatus>()?;
                }
                if let [one] = values.as_slice() {
                    q.filter.status = Some(one.clone());
                }
            }
            "disk_format" => {
                if let [one] = any_of(&mut q, ListField::DiskFormat, v)?.as_slice() {
                    q.filter.disk_format = Some(one.clone());
                }
            }
            "container_format" => {
                if let [one] = any_of(&mut q, ListField::ContainerFormat, v)?.as_slice() {
                    q.filter.container_format = Some(one.clone());
                }
            }
            "checksum" => q.rows.any_of.push((ListField::Checksum, vec![v.clone()])),
            "os_hash_value" => q.rows.any_of.push((ListField::OsHashValue, vec![v.clone()])),
            "owner" => q.filter.owner = Some(v.clone()),
            "visibility" => {
                if v == "all" {
                    q.include_community = true;
                } else {
                    q.filter.visibility = Some(v.parse::<Visibility>()?.as_str().to_owned());
                }
            }
            "os_hidden" => q.filter.os_hidden = Some(parse_bool(k, v)?),
            "protected" => {
                q.rows.protected = Some(match v.as_str() {
                    "true" => true,
                    "false" => false,
                    _ => {
                        return Err(bad(format!(
                            "Invalid value '{v}' for 'protected' filter. Valid values are 'true' or 'false'."
                        )))
                    }
                })
            }
            "size_min" => q.rows.size_min = Some(parse_size(v)?),
            "size_max" => q.rows.size_max = Some(parse_size(v)?),
            "created_at" | "updated_at" => {
                let field = if k == "created_at" {
                    TimeField::CreatedAt
                } else {
                    TimeField::UpdatedAt
                };
                let (op, t) = split_op(v);
                let t = parse_time(t).ok_or_else(|| {
                    bad(format!(
                        "Bad \"{k}\" query filter format. Use ISO 8601 DateTime notation."
                    ))
                })?;
                let op = match op {
                    "eq" => CmpOp::Eq,
                    "neq" => CmpOp::Neq,
                    "gt" => CmpOp::Gt,
                    "gte" => CmpOp::Gte,
                    "lt" => CmpOp::Lt,
                    "lte" => CmpOp::Lte,
                    _ => return Err(bad("Unable to filter on a unknown operator.")),
                };
                q.rows.times.push((field, op, t));
            }
            "changes-since" => {
                return Err(bad(
                    "The \"changes-since\" filter is no longer available on v2.",
                ))
            }
            "tag" => q.tags.push(v.trim().to_owned()),
            // Image members are not built: no image is shared with the
            // caller through a membership, so every valid value lists the
            // same images.
            "member_status" => {
                if !matches!(v.as_str(), "pending" | "accepted" | "rejected" | "all") {
                    return Err(bad(format!("Invalid status: {v}")));
                }
            }
            _ => {
                q.properties.insert(k.clone(), v.clone());
            }
        }
    }
    if !sort_keys.is_empty() || !sort_dirs.is_empty() {
        if new_sort {
            return Err(bad("Old and new sorting syntax cannot be combined"));
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

/// Parses a patch body; `v20`: the v2.0 media type's operations, named
/// by their key (`{"replace": "/name", "value": …}`).
fn parse_patch(body: &[u8], v20: bool) -> Result<Vec<PatchOp>> {
    let v: Value =
        serde_json::from_slice(body).map_err(|_| bad("The request body is not valid JSON."))?;
    let ops = v
        .as_array()
        .ok_or_else(|| bad("Request body must be a JSON array of operation objects."))?;
    ops.iter()
        .map(|op| {
            let obj = op
                .as_object()
                .ok_or_else(|| bad("Operations must be JSON objects."))?;
            let (kind, path) = if v20 {
                let mut named = ["add", "remove", "replace"]
                    .into_iter()
                    .filter(|k| obj.contains_key(*k));
                let kind = named.next().ok_or_else(|| {
                    bad("Operation objects must contain exactly one member named \"add\", \"remove\", or \"replace\".")
                })?;
                if named.next().is_some() {
                    return Err(bad(
                        "Operation objects must contain only one member named \"add\", \"remove\", or \"replace\".",
                    ));
                }
                let path = obj
                    .get(kind)
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad(format!("Unable to find '{kind}' element in operation")))?;
                (kind, path)
            } else {
                let kind = obj
                    .get("op")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad("Operation objects must contain exactly one member named \"op\""))?;
                let path = obj
                    .get("path")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad("Unable to find 'path' element in operation"))?;
                (kind, path)
            };
            let key = path
                .strip_prefix('/')
                .filter(|k| !k.is_empty() && !k.contains('/'))
                .ok_or_else(|| bad(format!("Invalid JSON pointer for this resource: '{path}'")))?
                .replace("~1", "/")
                .replace("~0", "~");
            let value = || {
                obj.get("value")
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

/// `PATCH /v2/images/{id}` with [`PATCH_MEDIA_TYPE`] or
/// [`PATCH_MEDIA_TYPE_V20`]; anything else is a 415 with `Accept-Patch`.
pub async fn patch(
    caller: Caller,
    AxState(svc): AxState<State>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response> {
    let v20 = match content_type(&headers) {
        PATCH_MEDIA_TYPE => false,
        PATCH_MEDIA_TYPE_V20 => true,
        _ => {
            let mut resp = ImageError::UnsupportedMediaType(format!(
                "Image PATCH expects Content-Type one of: {ACCEPT_PATCH}"
            ))
            .into_response();
            resp.headers_mut()
                .insert("accept-patch", HeaderValue::from_static(ACCEPT_PATCH));
            return Ok(resp);
        }
    };
    let ops = parse_patch(&body, v20)?;
    Ok(Json(image_json(&svc.patch(&caller, &id, &ops).await?)).into_response())
}

/// `PUT /v2/images/{id}/tags/{tag}`: 204 (also when the tag is there).
pub async fn add_tag(
    caller: Caller,
    AxState(svc): AxState<State>,
    Path((id, tag)): Path<(String, String)>,
) -> Result<StatusCode> {
    svc.add_tag(&caller, &id, &tag).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /v2/images/{id}/tags/{tag}`: 204, 404 when absent.
pub async fn remove_tag(
    caller: Caller,
    AxState(svc): AxState<State>,
    Path((id, tag)): Path<(String, String)>,
) -> Result<StatusCode> {
    svc.remove_tag(&caller, &id, &tag).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v2/images/{id}/actions/deactivate`: 204.
pub async fn deactivate(
    caller: Caller,
    AxState(svc): AxState<State>,
    Path(id): Path<String>,
) -> Result<StatusCode> {
    svc.set_deactivated(&caller, &id, true).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v2/images/{id}/actions/reactivate`: 204.
pub async fn reactivate(
    caller: Caller,
    AxState(svc): AxState<State>,
    Path(id): Path<String>,
) -> Result<StatusCode> {
    svc.set_deactivated(&caller, &id, false).await?;
    Ok(StatusCode::NO_CONTENT)
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
