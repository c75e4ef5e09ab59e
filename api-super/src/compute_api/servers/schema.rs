//! The request bodies of create and update as Nova's schema has them, per
//! microversion: a create's body parsed into a [`CreateRequest`], and the
//! fields an update shares with it.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::compute_api::error::{ApiError, ApiResult};
use crate::compute_api::images::is_uuid_like;
use crate::compute_api::query_schema::{
    self, invalid_field, not_of_type, python_value_repr as py_repr, too_long,
};
use crate::compute_api::Ctx;

pub(crate) fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::BadRequest(msg.into())
}

/// The validated body of a create.
pub(crate) struct CreateRequest {
    pub(crate) name: String,
    pub(crate) flavor_ref: String,
    pub(crate) image_ref: String,
    pub(crate) availability_zone: Option<String>,
    pub(crate) min_count: i64,
    pub(crate) max_count: i64,
    pub(crate) key_name: Option<String>,
    pub(crate) metadata: Vec<(String, String)>,
    pub(crate) user_data: Option<String>,
    /// 2.74 `host` and `hypervisor_hostname`.
    pub(crate) requested_host: Option<String>,
    pub(crate) requested_node: Option<String>,
    /// `os:scheduler_hints.group`.
    pub(crate) group: Option<String>,
    /// 2.19 `description` (`None` below 2.19: the name).
    pub(crate) description: Option<String>,
    /// 2.90 `hostname`.
    pub(crate) hostname: Option<String>,
    /// 2.52 `tags`, sorted, distinct.
    pub(crate) tags: Vec<String>,
    /// `adminPass`.
    pub(crate) admin_pass: Option<String>,
    /// `return_reservation_id`.
    pub(crate) return_reservation_id: bool,
    /// `config_drive` (Nova's boolean: `true`, `"True"`, `"yes"`, …).
    pub(crate) config_drive: bool,
    /// The scheduler hints, each value a list (Nova's request spec).
    pub(crate) scheduler_hints: BTreeMap<String, Value>,
    /// `accessIPv4` and `accessIPv6`.
    pub(crate) access_ips: super::access_ip::AccessIps,
    /// `trusted_image_certificates` (2.63).
    pub(crate) trusted_certs: Option<Vec<String>>,
}

/// The keys of `server` in a create body at `ctx`'s microversion (Nova's
/// schema: anything else is a 400), and whether this region honours it.
fn create_key(ctx: &Ctx, key: &str) -> Option<bool> {
    let since = |v: u32| ctx.mv.at_least(v);
    match key {
        "name"
        | "imageRef"
        | "flavorRef"
        | "adminPass"
        | "metadata"
        | "networks"
        | "OS-DCF:diskConfig"
        | "availability_zone"
        | "config_drive"
        | "key_name"
        | "min_count"
        | "max_count"
        | "return_reservation_id"
        | "security_groups"
        | "user_data" => Some(true),
        "block_device_mapping_v2" => Some(true),
        "accessIPv4" | "accessIPv6" => Some(true),
        "block_device_mapping" => Some(false),
        "personality" if !since(57) => Some(false),
        "description" if since(19) => Some(true),
        "tags" if since(52) => Some(true),
        "trusted_image_certificates" if since(63) => Some(true),
        "host" | "hypervisor_hostname" if since(74) => Some(true),
        "hostname" if since(90) => Some(true),
        _ => None,
    }
}

/// Nova's `sanitize_hostname`: Latin-1 only, at most 63 characters,
/// spaces, `_` and `.` as `-`, other non-word characters dropped,
/// lower case, no leading or trailing `.`/`-`.
pub(crate) fn sanitize_hostname(name: &str) -> String {
    let latin1: String = name
        .chars()
        .filter(|c| (*c as u32) < 256)
        .take(63)
        .collect();
    let mut out = String::with_capacity(latin1.len());
    for c in latin1.chars() {
        match c {
            ' ' | '_' | '.' => out.push('-'),
            c if c.is_alphanumeric() || c == '-' => out.extend(c.to_lowercase()),
            _ => {}
        }
    }
    out.trim_matches(['.', '-']).to_owned()
}

/// A value of one of the create keys this region accepts without acting
/// on it: valid as Nova's schema says, else a 400.
pub(crate) fn check_inert(key: &str, v: &Value) -> ApiResult<()> {
    let wrong = |why: &str| Err(invalid_field(key, v, why));
    match (key, v) {
        ("OS-DCF:diskConfig", Value::String(s)) if s == "AUTO" || s == "MANUAL" => Ok(()),
        ("OS-DCF:diskConfig", _) => {
            wrong(&format!("{} is not one of ['AUTO', 'MANUAL']", py_repr(v)))
        }
        ("config_drive", _) => config_drive_field(v).map(|_| ()),
        ("return_reservation_id", Value::Bool(_)) => Ok(()),
        ("return_reservation_id", _) => wrong(&not_of_type(v, "'boolean'")),
        ("security_groups", Value::Array(items)) => {
            for g in items {
                match g.as_object().and_then(|o| {
                    (o.len() == 1).then(|| o.get("name").and_then(Value::as_str)).flatten()
                }) {
                    Some("default") => {}
                    Some(name) => {
                        return Err(bad(format!("Unable to find security_group with name or id '{name}'. This region has no network service: only the \"default\" group exists.")))
                    }
                    None => return wrong("each item must be an object with only 'name'"),
                }
            }
            Ok(())
        }
        ("security_groups", _) => wrong(&not_of_type(v, "'array'")),
        ("adminPass", Value::String(_)) => Ok(()),
        ("adminPass", _) => wrong(&not_of_type(v, "'string'")),
        _ => Ok(()),
    }
}

/// `block_device_mapping_v2` as clients send it for a boot from an image
/// (python-openstackclient always does): one entry, the image (source
/// `image`, destination `local`, boot index 0). Its image, or `None` for
/// an empty list. Anything else needs block storage or local disks this
/// region does not build: a 400 that says so.
fn local_image_bdm(items: &[Value]) -> ApiResult<Option<String>> {
    const NOT_BUILT: &str = "Block device mappings other than the boot image (boot from volume, swap, ephemeral disks) are not built in this region: this region has no block storage service";
    let [item] = items else {
        return if items.is_empty() {
            Ok(None)
        } else {
            Err(bad(NOT_BUILT))
        };
    };
    let Some(m) = item.as_object() else {
        return Err(invalid_field(
            "block_device_mapping_v2",
            item,
            &not_of_type(item, "'object'"),
        ));
    };
    let s = |k: &str| m.get(k).and_then(Value::as_str);
    let boot_index = match m.get("boot_index") {
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(v)) => v.parse().ok(),
        _ => None,
    };
    let image = s("uuid").filter(|u| is_uuid_like(u));
    match (
        s("source_type"),
        s("destination_type").unwrap_or("local"),
        boot_index,
        image,
    ) {
        (Some("image"), "local", Some(0), Some(u)) => Ok(Some(u.to_owned())),
        _ => Err(bad(NOT_BUILT)),
    }
}

/// 2.90's hostname (letters, digits and `-`, 2–63 characters, no `-` at
/// either end) or, from 2.94, a fully qualified name (`[a-zA-Z0-9-._]`,
/// 1–255).
pub(crate) fn hostname_ok(ctx: &Ctx, h: &str) -> bool {
    if ctx.mv.at_least(94) {
        (1..=255).contains(&h.len())
            && h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
    } else {
        (2..=63).contains(&h.len())
            && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !h.starts_with('-')
            && !h.ends_with('-')
    }
}

/// `az`, `az:host`, `az:host:node` and `az::node` (Nova's legacy forced
/// host and node; an empty zone is no zone): `(zone, host, node)`.
pub(crate) type ZoneHostNode = (Option<String>, Option<String>, Option<String>);
pub(crate) fn parse_availability_zone(z: Option<&str>) -> ApiResult<ZoneHostNode> {
    let Some(z) = z else {
        return Ok((None, None, None));
    };
    let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    let parts: Vec<&str> = z.split(':').collect();
    match parts[..] {
        [az] => Ok((some(az), None, None)),
        [az, host] => Ok((some(az), some(host), None)),
        [az, host, node] => Ok((some(az), some(host), some(node))),
        _ => Err(bad(
            "Invalid input received: Unable to parse availability_zone",
        )),
    }
}

/// Nova's limit on `user_data` (characters of its base64).
const MAX_USER_DATA: usize = 65535;

fn int_field(o: &serde_json::Map<String, Value>, key: &str) -> ApiResult<Option<i64>> {
    // Nova's `positive_integer`: an integer or a string, checked in its
    // schema's order (type, pattern `^[0-9]*$`, minimum, minLength).
    let Some(v) = o.get(key) else {
        return Ok(None);
    };
    match v {
        Value::Number(n) => n
            .as_i64()
            .filter(|v| *v >= 1)
            .map(Some)
            .ok_or_else(|| invalid_field(key, v, &format!("{n} is less than the minimum of 1"))),
        Value::String(s) if !s.bytes().all(|b| b.is_ascii_digit()) => Err(invalid_field(
            key,
            v,
            &format!("{} does not match '^[0-9]*$'", py_repr(v)),
        )),
        Value::String(s) if s.is_empty() => Err(invalid_field(key, v, "'' is too short")),
        Value::String(s) => match s.parse::<i64>() {
            Ok(n) if n >= 1 => Ok(Some(n)),
            // "0" passes Nova's schema (a string has no minimum); Nova
            // then refuses it further on. Ours says why here.
            _ => Err(invalid_field(
                key,
                v,
                &format!("{s} is less than the minimum of 1"),
            )),
        },
        v => Err(invalid_field(
            key,
            v,
            &not_of_type(v, "'integer', 'string'"),
        )),
    }
}

/// A list of requested networks: each entry in Nova's shape (`uuid`,
/// `port`, `fixed_ip`, `tag`, nothing else). This region has no network
/// service, so no network or port can be found: an entry naming one is
/// Nova's 400 for a network (port) it cannot find, saying why; an empty
/// list boots without networks, as `"none"` does.
fn check_requested_networks(items: &[Value]) -> ApiResult<()> {
    const NO_NETWORKS: &str =
        "This region has no network service: boot with networks \"none\" or \"auto\".";
    // The request's shape first (the schema), every entry.
    for item in items {
        let Some(m) = item.as_object() else {
            return Err(invalid_field(
                "networks",
                item,
                &not_of_type(item, "'object'"),
            ));
        };
        if let Some(k) = m
            .keys()
            .find(|k| !matches!(k.as_str(), "uuid" | "port" | "fixed_ip" | "tag"))
        {
            return Err(bad(format!("Invalid input for field/attribute networks. Additional properties are not allowed ('{k}' was unexpected)")));
        }
        for key in ["uuid", "port", "fixed_ip", "tag"] {
            match m.get(key) {
                None | Some(Value::String(_)) => {}
                Some(Value::Null) if key == "port" => {}
                Some(other) => {
                    return Err(invalid_field(key, other, &not_of_type(other, "'string'")))
                }
            }
        }
        if let Some(port) = m.get("port").and_then(Value::as_str) {
            if uuid::Uuid::parse_str(port).is_err() {
                return Err(bad(format!(
                    "Invalid input for field/attribute port. Value: {port}. {} is not a 'uuid'",
                    query_schema::python_repr(port)
                )));
            }
        }
    }
    // Then the networks and ports themselves: the first one named is not
    // found.
    let Some(first) = items.first().and_then(Value::as_object) else {
        return Ok(());
    };
    if let Some(port) = first.get("port").and_then(Value::as_str) {
        return Err(bad(format!(
            "Port id {port} could not be found. {NO_NETWORKS}"
        )));
    }
    match first.get("uuid").and_then(Value::as_str) {
        Some(net) if uuid::Uuid::parse_str(net).is_err() => Err(bad(format!(
            "Bad networks format: network uuid is not in proper format ({net})"
        ))),
        Some(net) => Err(bad(format!(
            "Network {net} could not be found. {NO_NETWORKS}"
        ))),
        None => Err(bad("Bad network format: missing 'uuid'")),
    }
}

/// A create's or update's body and its `server` object (taken out of the
/// body), or Nova's 400 when the body is not JSON, has no `server` (a
/// schema error at the root has no field prefix) or it is not an object.
pub(crate) fn server_object(body: &[u8]) -> ApiResult<(Value, serde_json::Map<String, Value>)> {
    let mut v: Value = serde_json::from_slice(body).map_err(|_| bad("Malformed request body"))?;
    match v.get_mut("server").map(Value::take) {
        None => Err(bad("'server' is a required property")),
        Some(Value::Object(o)) => Ok((v, o)),
        Some(other) => Err(invalid_field(
            "server",
            &other,
            &not_of_type(&other, "'object'"),
        )),
    }
}

pub(crate) fn parse_create(ctx: &Ctx, body: &[u8]) -> ApiResult<CreateRequest> {
    let (v, o) = server_object(body)?;
    let o = &o;
    if let Some(top) = v.as_object() {
        if let Some(k) = top.keys().find(|k| {
            !matches!(
                k.as_str(),
                "server" | "os:scheduler_hints" | "OS-SCH-HNT:scheduler_hints"
            )
        }) {
            return Err(bad(format!(
                "Additional properties are not allowed ('{k}' was unexpected)"
            )));
        }
    }
    // Errors about the `server` object itself (an unknown key, a required
    // one missing) leave out Nova's `Value: {…}`: Nova prints the whole
    // body there, `adminPass` and `user_data` included, into a message
    // that proxies and its own log keep.
    for (k, val) in o {
        match create_key(ctx, k) {
            None => {
                return Err(bad(format!("Invalid input for field/attribute server. Additional properties are not allowed ('{k}' was unexpected)")))
            }
            // Block devices: empty is nothing.
            Some(false) if matches!(val, Value::Array(a) if a.is_empty()) => {}
            Some(false) => {
                let what = match k.as_str() {
                    "block_device_mapping" => "Block device mappings (boot from volume) are not built in this region: this region has no block storage service",
                    _ => "File injection (personality) is not built in this region",
                };
                return Err(bad(format!("{what}; boot without '{k}'.")));
            }
            Some(true) => check_inert(k, val)?,
        }
    }
    let name = match o.get("name") {
        Some(v) => name_field(v)?,
        None => {
            return Err(bad(
                "Invalid input for field/attribute server. 'name' is a required property",
            ))
        }
    };
    let flavor_ref = match o.get("flavorRef") {
        // A flavor's link is its id (Nova's `get_id_from_href`).
        Some(Value::String(s)) if s.contains('/') => {
            let path = s
                .split(['?', '#'])
                .next()
                .unwrap_or("")
                .trim_end_matches('/');
            path.rsplit('/').next().unwrap_or("").to_owned()
        }
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::Number(n)) if n.is_i64() => n.to_string(),
        Some(v @ Value::String(_)) => return Err(invalid_field("flavorRef", v, "'' is too short")),
        Some(other) => {
            return Err(invalid_field(
                "flavorRef",
                other,
                &not_of_type(other, "'string', 'integer'"),
            ))
        }
        None => {
            return Err(bad(
                "Invalid input for field/attribute server. 'flavorRef' is a required property",
            ))
        }
    };
    let bdm_image = match o.get("block_device_mapping_v2") {
        None => None,
        Some(Value::Array(items)) => local_image_bdm(items)?,
        Some(other) => {
            return Err(invalid_field(
                "block_device_mapping_v2",
                other,
                &not_of_type(other, "'array'"),
            ))
        }
    };
    let image_ref = match (o.get("imageRef"), bdm_image) {
        (Some(Value::String(s)), Some(b)) if !s.is_empty() && *s != b => {
            return Err(bad(format!(
                "Block device mapping is invalid: the boot image {b} is not the imageRef {s}."
            )))
        }
        (Some(Value::String(s)), _) if !s.is_empty() => s.clone(),
        (None | Some(Value::String(_)), Some(b)) => b,
        (Some(Value::String(_)), None) => return Err(bad("Missing imageRef attribute")),
        // Nova's `image_id_or_empty_string` is a `oneOf`.
        (Some(other), _) => {
            return Err(invalid_field(
                "imageRef",
                other,
                &format!(
                    "{} is not valid under any of the given schemas",
                    py_repr(other)
                ),
            ))
        }
        // Boot from volume is not built: an image is required (Nova's
        // schema does not require the key; its create then says this).
        (None, None) => return Err(bad("Missing imageRef attribute")),
    };
    let availability_zone = match o.get("availability_zone") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(v @ Value::String(_)) => {
            return Err(invalid_field("availability_zone", v, "'' is too short"))
        }
        Some(other) => {
            return Err(invalid_field(
                "availability_zone",
                other,
                &not_of_type(other, "'string'"),
            ))
        }
    };
    match o.get("networks") {
        // Before 2.37 `networks` is optional (and a string is tolerated).
        None if !ctx.mv.at_least(37) => {}
        Some(Value::String(_)) if !ctx.mv.at_least(37) => {}
        None => {
            return Err(bad(
                "Invalid input for field/attribute server. 'networks' is a required property",
            ))
        }
        Some(Value::String(s)) if s == "auto" || s == "none" => {}
        Some(Value::Array(items)) => check_requested_networks(items)?,
        Some(other) => {
            return Err(invalid_field(
                "networks",
                other,
                &format!(
                    "{} is not valid under any of the given schemas",
                    py_repr(other)
                ),
            ))
        }
    }
    let key_name = match o.get("key_name") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() && s.chars().count() <= 255 => Some(s.clone()),
        Some(v @ Value::String(s)) if s.is_empty() => {
            return Err(invalid_field("key_name", v, "'' is too short"))
        }
        Some(v @ Value::String(_)) => return Err(invalid_field("key_name", v, &too_long(v))),
        Some(other) => {
            return Err(invalid_field(
                "key_name",
                other,
                &not_of_type(other, "'string'"),
            ))
        }
    };
    let metadata = match o.get("metadata") {
        None => Vec::new(),
        Some(m) => crate::compute_api::server_metadata::validate_metadata(m, "metadata")?,
    };
    let user_data = o
        .get("user_data")
        .map(user_data_field)
        .transpose()?
        .flatten();
    // 2.74: a requested destination (admins; checked in `create`).
    let mut destination = [None, None];
    for (slot, key) in destination.iter_mut().zip(["host", "hypervisor_hostname"]) {
        match o.get(key) {
            None => {}
            Some(_) if !ctx.mv.at_least(74) => {
                return Err(bad(format!("Invalid input for field/attribute server. Additional properties are not allowed ('{key}' was unexpected)")))
            }
            Some(Value::String(v)) if (1..=255).contains(&v.chars().count()) => *slot = Some(v.clone()),
            Some(other) => return Err(fqdn_error(key, other)),
        }
    }
    let [requested_host, requested_node] = destination;
    let description = description_field(o)?.flatten();
    let hostname = match o.get("hostname") {
        None => None,
        Some(Value::String(h)) if hostname_ok(ctx, h) => Some(h.clone()),
        Some(other) => return Err(hostname_error(ctx, other)),
    };
    let mut tags = match o.get("tags") {
        None => Vec::new(),
        Some(Value::Array(list)) => list
            .iter()
            .map(crate::compute_api::server_metadata::validate_tag)
            .collect::<ApiResult<Vec<_>>>()?,
        Some(other) => return Err(invalid_field("tags", other, &not_of_type(other, "'array'"))),
    };
    tags.sort();
    tags.dedup();
    if tags.len() as i64 > crate::compute_api::server_metadata::MAX_TAGS {
        // Nova's `maxItems`, with the list as it was sent.
        let sent = &o["tags"];
        return Err(invalid_field("tags", sent, &too_long(sent)));
    }
    let min_count = int_field(o, "min_count")?.unwrap_or(1);
    let max_count = int_field(o, "max_count")?.unwrap_or(min_count);
    if min_count > max_count {
        return Err(bad("min_count must be <= max_count"));
    }
    if max_count > 1000 {
        return Err(bad("max_count is too large"));
    }
    if hostname.is_some() && max_count > 1 {
        return Err(bad(
            "Unable to allocate a single hostname to multiple instances",
        ));
    }
    let group = crate::compute_api::server_groups::group_hint(&v)?;
    Ok(CreateRequest {
        access_ips: super::access_ip::access_ips(o)?,
        trusted_certs: o
            .get("trusted_image_certificates")
            .map(super::trusted_certs::trusted_certs_field)
            .transpose()?
            .flatten(),
        description: if ctx.mv.at_least(19) {
            description
        } else {
            Some(name.clone())
        },
        hostname,
        tags,
        admin_pass: o
            .get("adminPass")
            .and_then(Value::as_str)
            .map(str::to_owned),
        return_reservation_id: o.get("return_reservation_id") == Some(&Value::Bool(true)),
        config_drive: match o.get("config_drive") {
            Some(v) => config_drive_field(v)?,
            None => false,
        },
        scheduler_hints: v
            .get("os:scheduler_hints")
            .or_else(|| v.get("OS-SCH-HNT:scheduler_hints"))
            .and_then(Value::as_object)
            .map(|h| {
                h.iter()
                    .filter(|(k, _)| !k.starts_with("_nova"))
                    .map(|(k, v)| match v {
                        Value::Array(_) => (k.clone(), v.clone()),
                        other => (k.clone(), Value::Array(vec![other.clone()])),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        name,
        flavor_ref,
        image_ref,
        availability_zone,
        min_count,
        max_count,
        key_name,
        metadata,
        user_data,
        requested_host,
        requested_node,
        group,
    })
}

/// `user_data` as Nova's schema has it (`null` or a base64 string of at
/// most 65,535 characters); `None` for null.
pub(crate) fn user_data_field(v: &Value) -> ApiResult<Option<String>> {
    match v {
        Value::Null => Ok(None),
        Value::String(u) if u.chars().count() > MAX_USER_DATA => {
            Err(invalid_field("user_data", v, &too_long(v)))
        }
        Value::String(u) => {
            use base64::Engine;
            // As Nova (Python's non-validating decode): characters outside
            // the alphabet, line breaks of `base64`'s output among them,
            // are skipped; the padding must be right.
            let kept: String = u
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '='))
                .collect();
            if base64::engine::general_purpose::STANDARD
                .decode(kept)
                .is_err()
            {
                return Err(invalid_field(
                    "user_data",
                    v,
                    &format!("{} is not a 'base64'", query_schema::python_repr(u)),
                ));
            }
            Ok(Some(u.clone()))
        }
        other => Err(invalid_field(
            "user_data",
            other,
            &not_of_type(other, "'string'"),
        )),
    }
}

/// `config_drive` as Nova's `parameter_types.boolean` has it: a JSON
/// boolean or one of its strings (and `""`, which this region has always
/// taken as no).
fn config_drive_field(v: &Value) -> ApiResult<bool> {
    boolean_field("config_drive", v)
}

/// A `parameter_types.boolean` at `key`.
pub(crate) fn boolean_field(key: &str, v: &Value) -> ApiResult<bool> {
    const TRUE: &[&str] = &[
        "True", "TRUE", "true", "1", "ON", "On", "on", "YES", "Yes", "yes",
    ];
    const FALSE: &[&str] = &[
        "False", "FALSE", "false", "0", "OFF", "Off", "off", "NO", "No", "no", "",
    ];
    match v {
        Value::Bool(b) => Ok(*b),
        Value::String(s) if TRUE.contains(&s.as_str()) => Ok(true),
        Value::String(s) if FALSE.contains(&s.as_str()) => Ok(false),
        _ => Err(invalid_field(
            key,
            v,
            &format!(
                "{} is not one of [True, 'True', 'TRUE', 'true', '1', 'ON', 'On', 'on', 'YES', 'Yes', 'yes', \
                 False, 'False', 'FALSE', 'false', '0', 'OFF', 'Off', 'off', 'NO', 'No', 'no']",
                py_repr(v)
            ),
        )),
    }
}

/// A server's `name` as Nova's `parameter_types.name` has it, checked in
/// its order: a string (type), printable without leading or trailing
/// whitespace (its `name` format, whose failure is Nova's `InvalidName`
/// message without the field prefix), 1–255 characters.
pub(crate) fn name_field(v: &Value) -> ApiResult<String> {
    let Value::String(s) = v else {
        return Err(invalid_field("name", v, &not_of_type(v, "'string'")));
    };
    if s.trim() != s || s.chars().any(char::is_control) {
        return Err(bad(
            "An invalid 'name' value was provided. The name must be: printable characters. \
             Can not start or end with whitespace.",
        ));
    }
    if s.is_empty() {
        return Err(invalid_field("name", v, "'' is too short"));
    }
    if s.chars().count() > 255 {
        return Err(invalid_field("name", v, &too_long(v)));
    }
    Ok(s.clone())
}

/// Nova's schema message for a `hostname` (2.90, `parameter_types.hostname`;
/// 2.94, `fqdn`) that [`hostname_ok`] refuses, checked in the schema's
/// order: type, pattern, minLength, maxLength.
pub(crate) fn hostname_error(ctx: &Ctx, v: &Value) -> ApiError {
    if ctx.mv.at_least(94) {
        return fqdn_error("hostname", v);
    }
    let Value::String(h) = v else {
        return invalid_field("hostname", v, &not_of_type(v, "'string'"));
    };
    let r = py_repr(v);
    let pattern_ok = h.len() >= 2
        && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !h.starts_with('-')
        && !h.ends_with('-');
    let why = if !pattern_ok {
        format!("{r} does not match '^[a-zA-Z0-9]+[a-zA-Z0-9-]*[a-zA-Z0-9]+$'")
    } else {
        format!("{r} is too long")
    };
    invalid_field("hostname", v, &why)
}

/// Nova's schema message for a value of `parameter_types.fqdn` (2.74's
/// `host` and `hypervisor_hostname`, 2.94's `hostname`) that is refused.
pub(crate) fn fqdn_error(key: &str, v: &Value) -> ApiError {
    let Value::String(h) = v else {
        return invalid_field(key, v, &not_of_type(v, "'string'"));
    };
    let r = py_repr(v);
    let why = if !h
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
    {
        format!("{r} does not match '^[a-zA-Z0-9-._]*$'")
    } else if h.is_empty() {
        format!("{r} is too short")
    } else {
        format!("{r} is too long")
    };
    invalid_field(key, v, &why)
}

/// The `description` of a create or update body as Nova's schema has it
/// (2.19): `None` absent, `Some(None)` null, else a string of at most 255
/// characters without control characters other than line breaks and tabs.
pub(crate) fn description_field(
    o: &serde_json::Map<String, Value>,
) -> ApiResult<Option<Option<String>>> {
    match o.get("description") {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(None)),
        Some(Value::String(d)) if d.chars().count() > 255 => Err(invalid_field(
            "description",
            &o["description"],
            &too_long(&o["description"]),
        )),
        Some(Value::String(d))
            if d.chars()
                .any(|c| c.is_control() && c != '\n' && c != '\r' && c != '\t') =>
        {
            // Nova's message would quote its pattern, a regular expression
            // of every printable Unicode range (thousands of characters):
            // it is named instead.
            Err(invalid_field(
                "description",
                &o["description"],
                &format!(
                    "{} does not match the description pattern",
                    query_schema::python_repr(d)
                ),
            ))
        }
        Some(Value::String(d)) => Ok(Some(Some(d.clone()))),
        Some(other) => Err(invalid_field(
            "description",
            other,
            &not_of_type(other, "'string', 'null'"),
        )),
    }
}
