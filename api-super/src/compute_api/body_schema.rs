//! Request bodies checked as Nova's JSON schemas check them, with
//! jsonschema's messages as Nova words them (`Invalid input for
//! field/attribute {field}. Value: {value}. {message}`, or the bare
//! message at the top of the body): the shapes several APIs share.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::error::{ApiError, ApiResult};
use super::query_schema::{invalid_field, not_of_type, python_repr, too_long};

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::BadRequest(msg.into())
}

/// The body as JSON (Nova: `Malformed request body`).
pub(crate) fn parse(body: &[u8]) -> ApiResult<Value> {
    serde_json::from_slice(body).map_err(|_| bad("Malformed request body"))
}

/// The body's member `key`, if any (the body must be an object). Check
/// the member, then [`only`].
pub(crate) fn top<'a>(body: &'a Value, key: &str) -> ApiResult<Option<&'a Value>> {
    match body {
        Value::Object(o) => Ok(o.get(key)),
        _ => Err(bad(not_of_type(body, "'object'"))),
    }
}

/// The body holds `key` (required) and nothing else, as a schema
/// `{"properties": {key: …}, "required": [key], "additionalProperties":
/// false}` checks after the member itself.
pub(crate) fn only(body: &Value, key: &str) -> ApiResult<()> {
    let Some(top) = body.as_object() else {
        return Err(bad(not_of_type(body, "'object'")));
    };
    if !top.contains_key(key) {
        return Err(bad(format!("'{key}' is a required property")));
    }
    let extra: Vec<&String> = top.keys().filter(|k| *k != key).collect();
    if !extra.is_empty() {
        return Err(bad(additional(&extra)));
    }
    Ok(())
}

/// The body's one object `key` (`{key: {...}}` and nothing else), checked
/// in the schema's order: the object, its properties (`props`, which must
/// let absent ones be), its `required` keys, no key outside `allowed`,
/// then the body's own `required` and `additionalProperties`.
pub(crate) fn member<'a, T>(
    body: &'a Value,
    key: &str,
    allowed: &[&str],
    required: &[&str],
    props: impl FnOnce(&'a Map<String, Value>) -> ApiResult<T>,
) -> ApiResult<T> {
    let Some(whole) = top(body, key)? else {
        return Err(bad(format!("'{key}' is a required property")));
    };
    let Value::Object(o) = whole else {
        return Err(invalid_field(key, whole, &not_of_type(whole, "'object'")));
    };
    let out = props(o)?;
    if let Some(r) = required.iter().find(|r| !o.contains_key(**r)) {
        return Err(invalid_field(
            key,
            whole,
            &format!("'{r}' is a required property"),
        ));
    }
    let extra: Vec<&String> = o
        .keys()
        .filter(|k| !allowed.contains(&k.as_str()))
        .collect();
    if !extra.is_empty() {
        return Err(invalid_field(key, whole, &additional(&extra)));
    }
    only(body, key)?;
    Ok(out)
}

/// jsonschema's `additionalProperties` message.
pub(crate) fn additional(extra: &[&String]) -> String {
    let names: Vec<String> = extra.iter().map(|k| python_repr(k)).collect();
    let verb = if extra.len() == 1 { "was" } else { "were" };
    format!(
        "Additional properties are not allowed ({} {verb} unexpected)",
        names.join(", ")
    )
}

/// Nova's metadata key pattern (`parameter_types.metadata`).
pub(crate) const METADATA_KEY: &str = "^[a-zA-Z0-9-_:. ]{1,255}$";

fn metadata_key_ok(k: &str) -> bool {
    (1..=255).contains(&k.chars().count())
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_:. ".contains(&b))
}

/// What a metadata value may be besides a string of at most 255
/// characters.
#[derive(Clone, Copy)]
pub(crate) enum MetaValues {
    /// `metadata_with_null`: null too (a removal: `None`).
    OrNull,
    /// Flavor extra specs: numbers too, kept as Python's `str` of them.
    OrNumber,
}

/// Nova's message for `v` failing at `field`, or at the top of the body
/// (`None`: jsonschema's message alone).
fn at(field: Option<&str>, v: &Value, message: &str) -> ApiError {
    match field {
        Some(f) => invalid_field(f, v, message),
        None => bad(message),
    }
}

/// A metadata object (`parameter_types.metadata` and its variants) at
/// `field` (`None`: the body itself): keys matching [`METADATA_KEY`], each value checked first (the
/// schema's `patternProperties`), then the keys that match no pattern
/// (`additionalProperties: false`), named sorted as jsonschema does.
pub(crate) fn metadata(
    field: Option<&str>,
    v: &Value,
    values: MetaValues,
) -> ApiResult<BTreeMap<String, Option<String>>> {
    let Value::Object(meta) = v else {
        return Err(at(field, v, &not_of_type(v, "'object'")));
    };
    let mut out = BTreeMap::new();
    for (k, value) in meta.iter().filter(|(k, _)| metadata_key_ok(k)) {
        let kept = match (value, values) {
            (Value::String(s), _) if s.chars().count() <= 255 => Some(s.clone()),
            (Value::String(_), _) => return Err(invalid_field(k, value, &too_long(value))),
            (Value::Null, MetaValues::OrNull) => None,
            (Value::Number(n), MetaValues::OrNumber) => Some(n.to_string()),
            (other, MetaValues::OrNull) => {
                return Err(invalid_field(
                    k,
                    other,
                    &not_of_type(other, "'string', 'null'"),
                ))
            }
            (other, MetaValues::OrNumber) => {
                return Err(invalid_field(
                    k,
                    other,
                    &not_of_type(other, "'string', 'number'"),
                ))
            }
        };
        out.insert(k.clone(), kept);
    }
    let extra: Vec<String> = meta
        .keys()
        .filter(|k| !metadata_key_ok(k))
        .map(|k| python_repr(k))
        .collect();
    if !extra.is_empty() {
        let verb = if extra.len() == 1 { "does" } else { "do" };
        return Err(at(
            field,
            v,
            &format!(
                "{} {verb} not match any of the regexes: {}",
                extra.join(", "),
                python_repr(METADATA_KEY)
            ),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msg(r: ApiResult<impl Sized>) -> String {
        match r {
            Err(ApiError::BadRequest(m)) => m,
            _ => panic!("not a 400"),
        }
    }

    #[test]
    fn member_checks_in_the_schemas_order() {
        let b = json!({"x": 1});
        assert_eq!(
            msg(member(&b, "aggregate", &["name"], &["name"], |_| Ok(()))),
            "'aggregate' is a required property"
        );
        let b = json!({"aggregate": {"zone": "a"}});
        assert_eq!(
            msg(member(&b, "aggregate", &["name"], &["name"], |_| Ok(()))),
            "Invalid input for field/attribute aggregate. Value: {'zone': 'a'}. 'name' is a required property"
        );
        let b = json!({"aggregate": {"name": "a", "b": 1, "c": 2}});
        assert_eq!(
            msg(member(&b, "aggregate", &["name"], &["name"], |_| Ok(()))),
            "Invalid input for field/attribute aggregate. Value: {'b': 1, 'c': 2, 'name': 'a'}. \
             Additional properties are not allowed ('b', 'c' were unexpected)"
        );
        // The properties first.
        let b = json!({"aggregate": {"name": 1, "x": 1}});
        let props = |o: &Map<String, Value>| match &o["name"] {
            Value::String(_) => Ok(()),
            v => Err(invalid_field("name", v, &not_of_type(v, "'string'"))),
        };
        assert_eq!(
            msg(member(&b, "aggregate", &["name"], &["name"], props)),
            "Invalid input for field/attribute name. Value: 1. 1 is not of type 'string'"
        );
        let b = json!({"aggregate": {"name": "a"}, "x": 1});
        assert_eq!(
            msg(member(&b, "aggregate", &["name"], &["name"], |_| Ok(()))),
            "Additional properties are not allowed ('x' was unexpected)"
        );
        let b = json!({"aggregate": 3});
        assert_eq!(
            msg(member(&b, "aggregate", &[], &[], |_| Ok(()))),
            "Invalid input for field/attribute aggregate. Value: 3. 3 is not of type 'object'"
        );
    }

    #[test]
    fn metadata_values_then_keys() {
        let v = json!({"a": null, "b": "x"});
        let m = metadata(Some("metadata"), &v, MetaValues::OrNull).unwrap();
        assert_eq!(m["a"], None);
        assert_eq!(m["b"].as_deref(), Some("x"));
        let v = json!({"k!": "v", "a": 1});
        assert_eq!(
            msg(metadata(Some("metadata"), &v, MetaValues::OrNull)),
            "Invalid input for field/attribute a. Value: 1. 1 is not of type 'string', 'null'"
        );
        let v = json!({"k!": "v"});
        assert_eq!(
            msg(metadata(Some("extra_specs"), &v, MetaValues::OrNumber)),
            "Invalid input for field/attribute extra_specs. Value: {'k!': 'v'}. \
             'k!' does not match any of the regexes: '^[a-zA-Z0-9-_:. ]{1,255}$'"
        );
        let v = json!({"n": 1.5, "t": true});
        assert_eq!(
            msg(metadata(Some("extra_specs"), &v, MetaValues::OrNumber)),
            "Invalid input for field/attribute t. Value: True. True is not of type 'string', 'number'"
        );
        let v = json!({"n": 10});
        let m = metadata(Some("extra_specs"), &v, MetaValues::OrNumber).unwrap();
        assert_eq!(m["n"].as_deref(), Some("10"));
    }
}
