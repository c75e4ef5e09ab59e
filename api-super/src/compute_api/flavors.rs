//! `GET /flavors`, `/flavors/detail`, `/flavors/{id}` (any authenticated
//! caller, as upstream). Private flavors are listed and shown only to the
//! projects given access and to admins; admins filter with `is_public`
//! (`true`, the default: public and accessible; `false`: private only;
//! `none`: all). `description` from 2.55, `extra_specs` from 2.61.

use std::collections::{BTreeMap, HashMap};

use axum::extract::{Path, Query, RawQuery, State};
use axum::{Extension, Json};
use serde_json::{json, Value};

use super::db::Flavor;
use super::error::{ApiError, ApiResult};
use super::query_schema;
use super::{App, Ctx};

fn links(app: &App, id: &str) -> Value {
    let base = app.public_url();
    json!([{"rel": "self", "href": format!("{base}/v2.1/flavors/{id}")},
           {"rel": "bookmark", "href": format!("{base}/flavors/{id}")}])
}

/// The detailed view of a flavor at the request's microversion
/// (`extra_specs`: the flavor's, shown from 2.61).
pub fn detail(
    app: &App,
    ctx: &Ctx,
    f: &Flavor,
    extra_specs: Option<&BTreeMap<String, String>>,
) -> Value {
    let mut v = json!({
        "id": f.flavorid,
        "name": f.name,
        "ram": f.memory_mb,
        "vcpus": f.vcpus,
        "disk": f.root_gb,
        "OS-FLV-EXT-DATA:ephemeral": f.ephemeral_gb,
        "OS-FLV-DISABLED:disabled": f.disabled,
        "swap": if f.swap == 0 { json!("") } else { json!(f.swap) },
        "rxtx_factor": f.rxtx_factor,
        "os-flavor-access:is_public": f.is_public,
        "links": links(app, &f.flavorid),
    });
    if ctx.mv.at_least(55) {
        v["description"] = json!(f.description);
    }
    if ctx.mv.at_least(61) {
        v["extra_specs"] = json!(extra_specs.cloned().unwrap_or_default());
    }
    if ctx.mv.at_least(75) && f.swap == 0 {
        v["swap"] = json!(0);
    }
    if ctx.mv.at_least(102) {
        if let Some(o) = v.as_object_mut() {
            o.remove("OS-FLV-DISABLED:disabled");
            o.remove("rxtx_factor");
        }
    }
    v
}

/// The flavor `id` as the caller may see it; 404 otherwise.
pub async fn visible(app: &App, ctx: &Ctx, id: &str) -> ApiResult<Flavor> {
    app.db
        .flavor_visible(id, ctx.project_id(), ctx.is_admin())
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("Flavor {id} could not be found.")))
}

/// Nova's `is_public` filter: only admins choose; others see public and
/// accessible flavors.
fn is_public_filter(ctx: &Ctx, q: &HashMap<String, String>) -> ApiResult<Option<bool>> {
    if !ctx.is_admin() {
        return Ok(Some(true));
    }
    match q.get("is_public").map(|s| s.to_ascii_lowercase()) {
        None => Ok(Some(true)),
        Some(s) if s == "none" => Ok(None),
        Some(s) if matches!(s.as_str(), "1" | "t" | "true" | "on" | "y" | "yes") => Ok(Some(true)),
        Some(s) if matches!(s.as_str(), "0" | "f" | "false" | "off" | "n" | "no") => {
            Ok(Some(false))
        }
        Some(s) => Err(ApiError::BadRequest(format!(
            "Invalid is_public filter [{s}]"
        ))),
    }
}

/// Nova's largest page (`osapi_max_limit`).
const MAX_LIMIT: usize = 1000;

/// A page of the flavors the caller may list, as Nova's `_get_flavors`:
/// `minRam`/`minDisk` (at least that much), `name` (2.102, a regular
/// expression), `sort_key`/`sort_dir` (default `flavorid` ascending),
/// `marker` (a flavor id; unknown: 400) and `limit` (at most 1,000).
/// Flavors are few: the filters, order and page are applied to the list
/// read. Returns the page and whether it is full (a next link).
async fn listed(
    app: &App,
    ctx: &Ctx,
    q: &HashMap<String, String>,
) -> ApiResult<(Vec<Flavor>, bool)> {
    let bad = |m: String| ApiError::BadRequest(m);
    let is_public = is_public_filter(ctx, q)?;
    let min = |key: &str| -> ApiResult<Option<i64>> {
        q.get(key)
            .map(|v| {
                v.trim()
                    .parse::<i64>()
                    .map_err(|_| bad(format!("Invalid {key} filter [{v}]")))
            })
            .transpose()
    };
    let (min_ram, min_disk) = (min("minRam")?, min("minDisk")?);
    let name = match q.get("name").filter(|_| ctx.mv.at_least(102)) {
        Some(n) => {
            Some(regex::Regex::new(n).map_err(|e| bad(format!("Invalid name filter [{n}]: {e}")))?)
        }
        None => None,
    };
    let key = q.get("sort_key").map(String::as_str).unwrap_or("flavorid");
    let desc = match q.get("sort_dir").map(String::as_str) {
        None | Some("asc") => false,
        Some("desc") => true,
        Some(d) => return Err(bad(format!("Invalid input for query parameters sort_dir. Value: {d}. '{d}' is not one of ['asc', 'desc']"))),
    };
    type Key = fn(&Flavor, &Flavor) -> std::cmp::Ordering;
    let order: Key = match key {
        "flavorid" => |a, b| a.flavorid.cmp(&b.flavorid),
        "id" => |a, b| a.id.cmp(&b.id),
        "name" => |a, b| a.name.cmp(&b.name),
        "memory_mb" => |a, b| a.memory_mb.cmp(&b.memory_mb),
        "vcpus" => |a, b| a.vcpus.cmp(&b.vcpus),
        "root_gb" => |a, b| a.root_gb.cmp(&b.root_gb),
        "ephemeral_gb" => |a, b| a.ephemeral_gb.cmp(&b.ephemeral_gb),
        "swap" => |a, b| a.swap.cmp(&b.swap),
        "rxtx_factor" if !ctx.mv.at_least(102) => |a, b| a.rxtx_factor.total_cmp(&b.rxtx_factor),
        "disabled" => |a, b| a.disabled.cmp(&b.disabled),
        "is_public" => |a, b| a.is_public.cmp(&b.is_public),
        "description" => |a, b| a.description.cmp(&b.description),
        k => return Err(bad(format!("Invalid input for query parameters sort_key. Value: {k}. '{k}' is not a sort key this cloud keeps for flavors"))),
    };
    let limit = match q.get("limit") {
        None => MAX_LIMIT,
        Some(l) => l
            .parse::<usize>()
            .map_err(|_| bad(format!("Invalid input for query parameters limit. Value: {l}. '{l}' does not match '^[0-9]*$'")))?
            .min(MAX_LIMIT),
    };
    let mut all: Vec<Flavor> = app
        .db
        .flavors_for(ctx.project_id(), is_public, ctx.is_admin())
        .await?
        .into_iter()
        .filter(|f| min_ram.is_none_or(|m| f.memory_mb >= m))
        .filter(|f| min_disk.is_none_or(|m| f.root_gb >= m))
        .filter(|f| name.as_ref().is_none_or(|re| re.is_match(&f.name)))
        .collect();
    // The key, then the row id (a total order, as the database's).
    all.sort_by(|a, b| {
        let o = order(a, b).then(a.id.cmp(&b.id));
        if desc {
            o.reverse()
        } else {
            o
        }
    });
    let start = match q.get("marker") {
        None => 0,
        Some(m) => match all.iter().position(|f| &f.flavorid == m) {
            Some(i) => i + 1,
            None => return Err(bad(format!("marker [{m}] not found"))),
        },
    };
    let page: Vec<Flavor> = all.into_iter().skip(start).take(limit).collect();
    let full = limit > 0 && page.len() == limit;
    Ok((page, full))
}

/// `flavors_links` with the next page's link, when the page is full.
fn next_link(app: &App, coll: &str, q: &HashMap<String, String>, page: &[Flavor]) -> Value {
    let Some(last) = page.last() else {
        return json!([]);
    };
    let mut params: Vec<(String, String)> = q
        .iter()
        .filter(|(k, _)| k.as_str() != "marker")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    params.sort();
    params.push(("marker".into(), last.flavorid.clone()));
    let query: Vec<String> = params
        .iter()
        .map(|(k, v)| format!("{}={}", urlencode(k), urlencode(v)))
        .collect();
    json!([{"rel": "next", "href": format!("{}/v2.1/{coll}?{}", app.public_url(), query.join("&"))}])
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `GET /flavors`.
pub async fn index(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    RawQuery(raw): RawQuery,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    query_schema::FLAVOR_LIST.check(ctx.mv, raw.as_deref())?;
    let (flavors, full) = listed(&app, &ctx, &q).await?;
    let list: Vec<Value> = flavors
        .iter()
        .map(|f| {
            let mut v =
                json!({"id": f.flavorid, "name": f.name, "links": links(&app, &f.flavorid)});
            if ctx.mv.at_least(55) {
                v["description"] = json!(f.description);
            }
            v
        })
        .collect();
    let mut body = json!({ "flavors": list });
    if full {
        body["flavors_links"] = next_link(&app, "flavors", &q, &flavors);
    }
    Ok(Json(body))
}

/// `GET /flavors/detail`.
pub async fn index_detail(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    RawQuery(raw): RawQuery,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    query_schema::FLAVOR_LIST.check(ctx.mv, raw.as_deref())?;
    let (flavors, full) = listed(&app, &ctx, &q).await?;
    let specs = if ctx.mv.at_least(61) {
        let ids: Vec<i64> = flavors.iter().map(|f| f.id).collect();
        app.db.extra_specs(&ids).await?
    } else {
        HashMap::new()
    };
    let list: Vec<Value> = flavors
        .iter()
        .map(|f| detail(&app, &ctx, f, specs.get(&f.id)))
        .collect();
    let mut body = json!({ "flavors": list });
    if full {
        body["flavors_links"] = next_link(&app, "flavors/detail", &q, &flavors);
    }
    Ok(Json(body))
}

/// The detailed view with its extra specs (read only from 2.61).
pub async fn detail_with_specs(app: &App, ctx: &Ctx, f: &Flavor) -> ApiResult<Value> {
    let specs = if ctx.mv.at_least(61) {
        app.db.extra_specs(&[f.id]).await?.remove(&f.id)
    } else {
        None
    };
    Ok(detail(app, ctx, f, specs.as_ref()))
}

/// `GET /flavors/{id}`.
pub async fn show(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::EMPTY_V2102.check(ctx.mv, raw.as_deref())?;
    let f = visible(&app, &ctx, &id).await?;
    Ok(Json(
        json!({ "flavor": detail_with_specs(&app, &ctx, &f).await? }),
    ))
}
