//! `/servers`: create, show, rename, delete (the list is `server_list`).
//! The handlers parse, authorize, call a service (`crate::services`) and
//! render a view; the server model, its views, its lookup across cells and
//! the create's schema are the modules below.

pub(crate) mod access_ip;
pub(crate) mod lookup;
pub(crate) mod model;
pub(crate) mod schema;
pub(crate) mod trusted_certs;
pub(crate) mod views;

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use cell_mapping::db::InstanceEdit;
use serde_json::{json, Value};

use self::lookup::{locate_with, Found, Located};
use self::schema::{
    bad, check_inert, description_field, hostname_error, hostname_ok, name_field, parse_create,
    server_object,
};
use self::views::{
    current_zones, detail_view, links, PartialKind, PartialServer, PartialShow, PartialView,
    IMAGE_PROPERTIES_MV, PARTIAL_RECORDS_MV,
};
use super::db::MappingRow;
use super::error::{ApiError, ApiResult};
use super::query_schema;
use super::{App, Ctx};
use crate::services;

// ------------------------------------------------------------------ create

/// `POST /servers`. Quotas: metadata_items, and instances/cores/ram for
/// all of `max_count` (all or none), then with a `group` hint
/// server_group_members for all of them, checked where the builds are
/// written.
pub async fn create(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    body: Bytes,
) -> ApiResult<Response> {
    app.authorize(&ctx, "os_compute_api:servers:create", ctx.project_id())?;
    let req = parse_create(&ctx, &body)?;
    let booted = services::boot::boot(&app, &ctx, &req).await?;
    let id = &booted.uuids[0];
    if req.return_reservation_id {
        return Ok((
            StatusCode::ACCEPTED,
            Json(json!({ "reservation_id": booted.reservation_id })),
        )
            .into_response());
    }
    let admin_pass: String = req.admin_pass.clone().unwrap_or_else(|| {
        use rand::Rng;
        let mut r = rand::thread_rng();
        const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
        (0..12)
            .map(|_| ALPHABET[r.gen_range(0..ALPHABET.len())] as char)
            .collect()
    });
    let body = json!({"server": {
        "id": id,
        "links": links(&app, "servers", id),
        "adminPass": admin_pass,
        "OS-DCF:diskConfig": "MANUAL",
        "security_groups": [{"name": "default"}],
    }});
    let location = format!("{}/v2.1/servers/{id}", app.public_url());
    Ok((
        StatusCode::ACCEPTED,
        [(header::LOCATION, location)],
        Json(body),
    )
        .into_response())
}

// ----------------------------------------------------------- query strings

pub(crate) fn parse_query(raw: Option<&str>) -> HashMap<String, String> {
    let mut m = HashMap::new();
    for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        m.insert(decode(k), decode(v));
    }
    m
}

pub(crate) fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b[i], hex) {
            (b'+', _) => out.push(b' '),
            (b'%', Some(v)) => {
                out.push(v);
                i += 2;
            }
            (c, _) => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

// ---------------------------------------------------------- show / update

/// `GET /servers/{id}`. A server whose cell is down is, from 2.69, the
/// partial record Nova builds from the API database (its mapping and
/// request spec); before 2.69 the cell's error.
pub async fn show(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::EMPTY_V2102.check(ctx.mv, raw.as_deref())?;
    let mut s = match locate_with(&app, &ctx, &id, "os_compute_api:servers:show", false).await? {
        Located::Found(Found::Cell(_, mut s)) => {
            // Landed here outside any group: the key name was remembered
            // and there is no group; otherwise both are read (one
            // statement), and from 2.98 always (the image's properties
            // change with a rebuild). The zone comes from the hosts' zone
            // cache, as in lists.
            let remembered = if ctx.mv.at_least(IMAGE_PROPERTIES_MV) {
                None
            } else {
                app.db.landed_key_name(&s.uuid)
            };
            let groups = match remembered {
                Some(key_name) => {
                    if s.key_name.is_none() {
                        s.key_name = key_name;
                    }
                    Vec::new()
                }
                None => {
                    let x = app.db.show_extras(&s.uuid).await?;
                    s.apply_spec(x.spec);
                    x.group_uuid.into_iter().collect()
                }
            };
            current_zones(&app, &ctx, std::slice::from_mut(&mut s)).await?;
            let mut body = detail_view(&app, &ctx, &s);
            put_server_groups(&ctx, groups, &mut body);
            return Ok(Json(json!({ "server": body })));
        }
        Located::Found(Found::Build(s)) => s,
        Located::Down(m, d) => {
            if !ctx.mv.at_least(PARTIAL_RECORDS_MV) {
                return Err(ApiError::cell_down(d));
            }
            let partial = partial_for_show(&app, &ctx, m).await?;
            let base = app.public_url();
            let view = PartialView {
                base: &base,
                p: &partial,
                kind: PartialKind::Show { ctx: &ctx },
            };
            return Ok(Json(json!({ "server": view })));
        }
    };
    current_zones(&app, &ctx, std::slice::from_mut(&mut s)).await?;
    let mut body = detail_view(&app, &ctx, &s);
    add_server_groups(&app, &ctx, &s.uuid, &mut body).await?;
    Ok(Json(json!({ "server": body })))
}

/// `server_groups` (2.71) of a server shown alone: the uuid of its group,
/// if any, as upstream.
pub(crate) async fn add_server_groups(
    app: &App,
    ctx: &Ctx,
    id: &str,
    body: &mut Value,
) -> ApiResult<()> {
    if !ctx.mv.at_least(71) {
        return Ok(());
    }
    let groups = server_groups_of(app, id).await?;
    put_server_groups(ctx, groups, body);
    Ok(())
}

/// Puts `server_groups` (2.71) on a server's body.
fn put_server_groups(ctx: &Ctx, groups: Vec<String>, body: &mut Value) {
    if !ctx.mv.at_least(71) {
        return;
    }
    if let Some(o) = body.as_object_mut() {
        o.insert("server_groups".into(), json!(groups));
    }
}

async fn server_groups_of(app: &App, id: &str) -> ApiResult<Vec<String>> {
    Ok(app
        .db
        .api()
        .instance_server_group(id)
        .await?
        .map(|g| g.uuid)
        .into_iter()
        .collect())
}

/// The partial record of a server in a down cell for `GET /servers/{id}`:
/// its mapping and request spec (flavor, image, requested zone, user); a
/// server being deleted, or without a request spec, is not found, as
/// upstream.
async fn partial_for_show(app: &App, ctx: &Ctx, m: MappingRow) -> ApiResult<PartialServer> {
    if m.queued_for_delete {
        return Err(ApiError::server_not_found(&m.instance_uuid));
    }
    let Some(spec) = app.db.request_spec(&m.instance_uuid).await? else {
        return Err(ApiError::server_not_found(&m.instance_uuid));
    };
    let server_groups = if ctx.mv.at_least(71) {
        Some(server_groups_of(app, &m.instance_uuid).await?)
    } else {
        None
    };
    Ok(PartialServer {
        uuid: m.instance_uuid,
        project_id: m.project_id,
        created_at: m.created_at,
        show: Some(PartialShow {
            user_id: Some(spec.user_id).filter(|u| !u.is_empty()),
            flavor: spec.flavor,
            image_ref: spec.image_ref,
            flavor_extra_specs: spec.flavor_extra_specs,
            availability_zone: spec.availability_zone,
            server_groups,
            image_properties: spec.recorded_image_properties,
        }),
    })
}

/// `PUT /servers/{id}`: name, description, hostname; on a build not
/// landed yet, its build request (the landing carries the edits over).
pub async fn update(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let (_, o) = server_object(&body)?;
    let o = &o;
    // Nova's update schema: `name`, `OS-DCF:diskConfig`, `accessIPv4/6`
    // (2.1), `description` (2.19, null clears it), `hostname` (2.90).
    for k in o.keys() {
        let known = match k.as_str() {
            "name" | "OS-DCF:diskConfig" | "accessIPv4" | "accessIPv6" => true,
            "description" => ctx.mv.at_least(19),
            "hostname" => ctx.mv.at_least(90),
            _ => false,
        };
        if !known {
            return Err(bad(format!("Invalid input for field/attribute server. Additional properties are not allowed ('{k}' was unexpected)")));
        }
        if k == "OS-DCF:diskConfig" {
            check_inert(k, &o[k])?;
        }
    }
    let name = o.get("name").map(name_field).transpose()?;
    let description = description_field(o)?;
    let hostname = match o.get("hostname") {
        None => None,
        Some(Value::String(h)) if hostname_ok(&ctx, h) => Some(h.clone()),
        Some(other) => return Err(hostname_error(&ctx, other)),
    };
    let ips = access_ip::access_ips(o)?;
    let edit = InstanceEdit {
        name,
        description,
        hostname,
        access_ip_v4: ips.v4,
        access_ip_v6: ips.v6,
    };
    let s = services::update::update(&app, &ctx, &id, edit).await?;
    let mut body = detail_view(&app, &ctx, &s);
    add_server_groups(&app, &ctx, &s.uuid, &mut body).await?;
    Ok(Json(json!({ "server": body })))
}

// ------------------------------------------------------------------ delete

/// `DELETE /servers/{id}`: a build not scheduled yet is simply deleted; an
/// instance that never reached a host is deleted in its cell; otherwise
/// task_state `deleting` and `terminate_instance` to its compute (the
/// compute and the cell conductor finish the delete and free the claim).
pub async fn delete(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    services::delete::delete_server(&app, &ctx, &id, "os_compute_api:servers:delete").await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
