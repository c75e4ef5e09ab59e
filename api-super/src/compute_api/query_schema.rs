//! Query-string schemas: which query parameters each `GET` (and the few
//! other calls that have one) knows, and from which microversion one it
//! does not know is a 400, as Nova's `query_schema` decorators decide it.
//!
//! Below the microversion where a schema turns `additionalProperties`
//! off, Nova strips unknown parameters before the call runs, so they have
//! no effect; from it, any unknown parameter fails the call with
//! `{"badRequest": {"code": 400, "message": "Additional properties are not
//! allowed ('x' was unexpected)"}}` (the JSON-Schema message for the
//! query as a whole: no parameter is named before it). Where that was:
//!
//! - 2.53: `os-hypervisors` list, detail and show;
//! - 2.58: a server's `os-instance-actions` list;
//! - 2.75: the server list and detail, the flavor list and detail, key
//!   pairs (list, show, delete), quota sets (show, detail, update,
//!   delete), limits, simple tenant usage, the service list, the server
//!   group list;
//! - 2.102: every other `GET` with a query schema: a server, a flavor,
//!   its extra specs and access list, an instance action, server
//!   metadata, aggregates, availability zones, a server group.
//!
//! Calls without one, or whose schema never forbids unknown parameters,
//! ignore them at every microversion: version discovery, `POST`/`PUT`/
//! `DELETE` other than those above, the hypervisor statistics, search and
//! servers, the quota defaults and server tags (Nova defines 2.102
//! schemas for the last two but its handlers do not use them).
//!
//! Each handler checks its schema first ([`QuerySchema::check`]), before
//! policy and before reading anything, where Nova's decorator runs.

use std::collections::BTreeSet;

use super::error::{ApiError, ApiResult};
use super::microversion::Version;
use super::servers::decode;

/// One query schema of Nova: the parameters it knows (each from a
/// microversion) and from which microversion it refuses the others.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QuerySchema {
    /// The microversion from which an unknown parameter is a 400 (`None`:
    /// never).
    strict_from: Option<u32>,
    /// The parameters it knows, each with the microversion that added it.
    keys: &'static [(&'static str, u32)],
    /// Nova's `patternProperties: {"^_": …}` of the server list: names
    /// starting with `_` are known too (the list then refuses them with
    /// its own 400, "Invalid filter field").
    underscore_pattern: bool,
}

/// A schema that knows `keys` (since 2.1) and refuses others from `from`.
const fn strict(from: u32, keys: &'static [(&'static str, u32)]) -> QuerySchema {
    QuerySchema {
        strict_from: Some(from),
        keys,
        underscore_pattern: false,
    }
}

/// Nova's `show_query_v2102` and the like: nothing known, strict from 2.102.
pub(crate) const EMPTY_V2102: QuerySchema = strict(102, &[]);

/// `GET /flavors`, `/flavors/detail` (`flavors.index_query_v275`, and
/// `name` from 2.102).
pub(crate) const FLAVOR_LIST: QuerySchema = strict(
    75,
    &[
        ("limit", 1),
        ("marker", 1),
        ("is_public", 1),
        ("minRam", 1),
        ("minDisk", 1),
        ("sort_key", 1),
        ("sort_dir", 1),
        ("name", 102),
    ],
);

/// `GET /os-keypairs` (`keypairs.index_query_v275`).
pub(crate) const KEYPAIR_LIST: QuerySchema =
    strict(75, &[("user_id", 10), ("limit", 35), ("marker", 35)]);

/// `GET`/`DELETE /os-keypairs/{name}` (`show_query_v275`,
/// `delete_query_v275`).
pub(crate) const KEYPAIR_ONE: QuerySchema = strict(75, &[("user_id", 10)]);

/// `GET`/`PUT`/`DELETE /os-quota-sets/{id}`, `GET …/detail`
/// (`quota_sets.show_query_v275` and its copies).
pub(crate) const QUOTA_SET: QuerySchema = strict(75, &[("user_id", 1)]);

/// `GET /limits` (`limits.index_query_v275`).
pub(crate) const LIMITS: QuerySchema = strict(75, &[("tenant_id", 1)]);

/// `GET /os-simple-tenant-usage` (`simple_tenant_usage.index_query_v275`).
pub(crate) const USAGE_LIST: QuerySchema = strict(
    75,
    &[
        ("start", 1),
        ("end", 1),
        ("detailed", 1),
        ("limit", 40),
        ("marker", 40),
    ],
);

/// `GET /os-simple-tenant-usage/{id}` (`show_query_v275`).
pub(crate) const USAGE_SHOW: QuerySchema = strict(
    75,
    &[("start", 1), ("end", 1), ("limit", 40), ("marker", 40)],
);

/// `GET /os-services` (`services.index_query_v275`).
pub(crate) const SERVICE_LIST: QuerySchema = strict(75, &[("host", 1), ("binary", 1)]);

/// `GET /os-hypervisors`, `/os-hypervisors/detail`
/// (`hypervisors.index_query_v253`).
pub(crate) const HYPERVISOR_LIST: QuerySchema = strict(
    53,
    &[
        ("limit", 33),
        ("marker", 33),
        ("hypervisor_hostname_pattern", 53),
        ("with_servers", 53),
    ],
);

/// `GET /os-hypervisors/{id}` (`hypervisors.show_query_v253`).
pub(crate) const HYPERVISOR_SHOW: QuerySchema = strict(53, &[("with_servers", 53)]);

/// `GET /os-server-groups` (`server_groups.index_query_v275`).
pub(crate) const SERVER_GROUP_LIST: QuerySchema =
    strict(75, &[("all_projects", 1), ("limit", 1), ("offset", 1)]);

/// `GET /servers/{id}/os-instance-actions` (`instance_actions
/// .index_query_v258`, `changes-before` from 2.66).
pub(crate) const INSTANCE_ACTION_LIST: QuerySchema = strict(
    58,
    &[
        ("limit", 58),
        ("marker", 58),
        ("changes-since", 58),
        ("changes-before", 66),
    ],
);

/// `GET /servers`, `/servers/detail` (`servers.index_query` …
/// `index_query_v275`): the search options, the joined-table names (known
/// so that the list refuses them itself), paging and sorting, and names
/// starting with `_`.
pub(crate) const SERVER_LIST: QuerySchema = QuerySchema {
    strict_from: Some(75),
    keys: &[
        ("user_id", 1),
        ("project_id", 1),
        ("tenant_id", 1),
        ("launch_index", 1),
        ("image_ref", 1),
        ("image", 1),
        ("kernel_id", 1),
        ("ramdisk_id", 1),
        ("hostname", 1),
        ("key_name", 1),
        ("power_state", 1),
        ("vm_state", 1),
        ("task_state", 1),
        ("host", 1),
        ("node", 1),
        ("flavor", 1),
        ("reservation_id", 1),
        ("launched_at", 1),
        ("terminated_at", 1),
        ("availability_zone", 1),
        ("name", 1),
        ("display_name", 1),
        ("description", 1),
        ("display_description", 1),
        ("locked_by", 1),
        ("uuid", 1),
        ("root_device_name", 1),
        ("config_drive", 1),
        ("access_ip_v4", 1),
        ("access_ip_v6", 1),
        ("auto_disk_config", 1),
        ("progress", 1),
        ("sort_key", 1),
        ("sort_dir", 1),
        ("all_tenants", 1),
        ("soft_deleted", 1),
        ("deleted", 1),
        ("status", 1),
        ("changes-since", 1),
        ("ip", 1),
        ("ip6", 1),
        ("created_at", 1),
        ("block_device_mapping", 1),
        ("services", 1),
        ("metadata", 1),
        ("system_metadata", 1),
        ("info_cache", 1),
        ("security_groups", 1),
        ("pci_devices", 1),
        ("limit", 1),
        ("marker", 1),
        ("tags", 26),
        ("tags-any", 26),
        ("not-tags", 26),
        ("not-tags-any", 26),
        ("changes-before", 66),
        ("locked", 73),
    ],
    underscore_pattern: true,
};

impl QuerySchema {
    /// Whether the schema of `mv` knows the parameter `name` (one it does
    /// not know is stripped below [`Self::strict_from`], refused from it).
    pub(crate) fn knows(&self, mv: Version, name: &str) -> bool {
        (self.underscore_pattern && name.starts_with('_'))
            || self
                .keys
                .iter()
                .any(|(k, since)| *k == name && mv.at_least(*since))
    }

    /// Nova's 400 when the schema of `mv` refuses unknown parameters and
    /// the query `raw` has some.
    pub(crate) fn check(&self, mv: Version, raw: Option<&str>) -> ApiResult<()> {
        if !self.strict_from.is_some_and(|from| mv.at_least(from)) {
            return Ok(());
        }
        let unknown: BTreeSet<String> = raw
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| decode(p.split_once('=').map_or(p, |(k, _)| k)))
            .filter(|k| !self.knows(mv, k))
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        let names: Vec<String> = unknown.iter().map(|k| python_repr(k)).collect();
        let names = names.join(", ");
        let one = unknown.len() == 1;
        Err(ApiError::BadRequest(if self.underscore_pattern {
            // JSON Schema's message when the schema has patternProperties.
            format!(
                "{names} {} not match any of the regexes: '^_'",
                if one { "does" } else { "do" }
            )
        } else {
            format!(
                "Additional properties are not allowed ({names} {} unexpected)",
                if one { "was" } else { "were" }
            )
        }))
    }
}

/// A string as Python's `repr` writes it (how JSON Schema's messages
/// quote names): in single quotes, or double quotes when it holds a
/// single quote and no double quote; backslashes, the quote and
/// unprintable characters escaped.
pub(crate) fn python_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() || (c.is_whitespace() && c != ' ') => {
                let n = u32::from(c);
                if n <= 0xff {
                    out.push_str(&format!("\\x{n:02x}"));
                } else if n <= 0xffff {
                    out.push_str(&format!("\\u{n:04x}"));
                } else {
                    out.push_str(&format!("\\U{n:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// A JSON value as Python's `repr` writes the decoded value (how JSON
/// Schema's messages show an instance, `%r`): strings quoted as
/// [`python_repr`], `None`, `True`, `False`, numbers bare, lists and
/// dicts in Python's brackets (a dict's keys in this map's order, which is
/// sorted, not the body's).
pub(crate) fn python_value_repr(v: &serde_json::Value) -> String {
    use serde_json::Value;
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => python_repr(s),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(python_value_repr).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(m) => {
            let items: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{}: {}", python_repr(k), python_value_repr(v)))
                .collect();
            format!("{{{}}}", items.join(", "))
        }
    }
}

/// A JSON value as Python's `str` writes the decoded value (Nova's
/// `Value: %(value)s`): a string as it is, anything else as its `repr`.
pub(crate) fn python_value_str(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        v => python_value_repr(v),
    }
}

/// Nova's 400 for a request body that fails its JSON schema at `field`
/// (nova.api.validation.validators): `Invalid input for field/attribute
/// {field}. Value: {value}. {message}`, the value as Python's `str`.
pub(crate) fn invalid_field(field: &str, v: &serde_json::Value, message: &str) -> ApiError {
    ApiError::BadRequest(format!(
        "Invalid input for field/attribute {field}. Value: {}. {message}",
        python_value_str(v)
    ))
}

/// JSON Schema's `type` message: `{repr} is not of type 'a', 'b'`.
pub(crate) fn not_of_type(v: &serde_json::Value, types: &str) -> String {
    format!("{} is not of type {types}", python_value_repr(v))
}

/// JSON Schema's `maxLength` / `maxItems` message: `{repr} is too long`.
pub(crate) fn too_long(v: &serde_json::Value) -> String {
    format!("{} is too long", python_value_repr(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(s: &QuerySchema, mv: u32, raw: &str) -> Option<String> {
        match s.check(Version(mv), Some(raw)) {
            Ok(()) => None,
            Err(ApiError::BadRequest(m)) => Some(m),
            Err(e) => panic!("unexpected {e:?}"),
        }
    }

    #[test]
    fn unknown_parameters_are_refused_from_the_schemas_microversion() {
        assert_eq!(msg(&FLAVOR_LIST, 74, "foo=1&minRam=2"), None);
        assert_eq!(
            msg(&FLAVOR_LIST, 75, "foo=1&minRam=2").as_deref(),
            Some("Additional properties are not allowed ('foo' was unexpected)")
        );
        // Several: sorted, once each, decoded.
        assert_eq!(
            msg(&FLAVOR_LIST, 75, "zz=1&a%20b=2&zz=3").as_deref(),
            Some("Additional properties are not allowed ('a b', 'zz' were unexpected)")
        );
        // `name` is known from 2.102 only.
        assert!(msg(&FLAVOR_LIST, 101, "name=x").is_some());
        assert_eq!(msg(&FLAVOR_LIST, 102, "name=x"), None);
        assert_eq!(msg(&EMPTY_V2102, 101, "x=1"), None);
        assert!(msg(&EMPTY_V2102, 102, "x").is_some());
        assert_eq!(msg(&EMPTY_V2102, 104, ""), None);
        assert_eq!(msg(&INSTANCE_ACTION_LIST, 57, "x=1"), None);
        assert!(msg(&INSTANCE_ACTION_LIST, 65, "changes-before=x").is_some());
        assert_eq!(msg(&INSTANCE_ACTION_LIST, 66, "changes-before=x"), None);
    }

    #[test]
    fn the_server_list_names_its_pattern() {
        assert_eq!(msg(&SERVER_LIST, 74, "foo=1"), None);
        assert_eq!(
            msg(&SERVER_LIST, 75, "foo=1&name=x").as_deref(),
            Some("'foo' does not match any of the regexes: '^_'")
        );
        assert_eq!(
            msg(&SERVER_LIST, 75, "b=1&a=2").as_deref(),
            Some("'a', 'b' do not match any of the regexes: '^_'")
        );
        // Known to the schema (the list refuses them itself).
        assert_eq!(msg(&SERVER_LIST, 75, "_x=1&metadata=1&locked=t"), None);
        assert!(!SERVER_LIST.knows(Version(72), "locked"));
        assert!(!SERVER_LIST.knows(Version(25), "tags"));
        assert!(SERVER_LIST.knows(Version(26), "not-tags-any"));
    }

    #[test]
    fn names_are_quoted_as_python_does() {
        assert_eq!(python_repr("foo"), "'foo'");
        assert_eq!(python_repr("it's"), "\"it's\"");
        assert_eq!(python_repr("a'\"b"), "'a\\'\"b'");
        assert_eq!(python_repr("a\\b\n\u{1}"), "'a\\\\b\\n\\x01'");
        assert_eq!(python_repr("é"), "'é'");
        let v = serde_json::json!({"b": [1, null, true, "x"], "a": false});
        assert_eq!(
            python_value_repr(&v),
            "{'a': False, 'b': [1, None, True, 'x']}"
        );
        assert_eq!(python_value_str(&serde_json::json!("abc")), "abc");
        assert_eq!(python_value_str(&serde_json::json!(null)), "None");
    }
}
