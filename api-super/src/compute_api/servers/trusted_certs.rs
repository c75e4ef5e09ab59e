//! `trusted_image_certificates` (2.63) of a create or a rebuild: Nova's
//! `parameter_types.trusted_certs` (null, or 1 to 50 distinct non-empty
//! strings), checked in the schema's order (type, `minItems`,
//! `maxItems`, `uniqueItems`, then each item). The certificates are kept
//! with the instance and shown; images are not verified against them
//! (Nova verifies only with `[glance] verify_glance_signatures`, off by
//! default).

use serde_json::Value;

use crate::compute_api::error::ApiResult;
use crate::compute_api::query_schema::{invalid_field, not_of_type, python_value_repr};

const KEY: &str = "trusted_image_certificates";

/// The certificates, `None` for null.
pub(crate) fn trusted_certs_field(v: &Value) -> ApiResult<Option<Vec<String>>> {
    let items = match v {
        Value::Null => return Ok(None),
        Value::Array(items) => items,
        v => return Err(invalid_field(KEY, v, &not_of_type(v, "'array', 'null'"))),
    };
    let r = python_value_repr(v);
    if items.is_empty() {
        return Err(invalid_field(KEY, v, &format!("{r} is too short")));
    }
    if items.len() > 50 {
        return Err(invalid_field(KEY, v, &format!("{r} is too long")));
    }
    if items
        .iter()
        .enumerate()
        .any(|(i, a)| items[..i].contains(a))
    {
        return Err(invalid_field(
            KEY,
            v,
            &format!("{r} has non-unique elements"),
        ));
    }
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        // jsonschema names an item by its index.
        match item {
            Value::String(s) if !s.is_empty() => out.push(s.clone()),
            Value::String(_) => return Err(invalid_field(&i.to_string(), item, "'' is too short")),
            other => {
                return Err(invalid_field(
                    &i.to_string(),
                    other,
                    &not_of_type(other, "'string'"),
                ))
            }
        }
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute_api::error::ApiError;
    use serde_json::json;

    #[test]
    fn certificates_as_nova_s_schema() {
        assert_eq!(trusted_certs_field(&json!(null)).unwrap(), None);
        assert_eq!(
            trusted_certs_field(&json!(["a", "b"])).unwrap(),
            Some(vec!["a".to_owned(), "b".to_owned()])
        );
        for (v, msg) in [
            (json!("a"), "Invalid input for field/attribute trusted_image_certificates. Value: a. 'a' is not of type 'array', 'null'"),
            (json!([]), "Invalid input for field/attribute trusted_image_certificates. Value: []. [] is too short"),
            (json!(["a", "a"]), "Invalid input for field/attribute trusted_image_certificates. Value: ['a', 'a']. ['a', 'a'] has non-unique elements"),
            (json!(["a", ""]), "Invalid input for field/attribute 1. Value: . '' is too short"),
            (json!([1]), "Invalid input for field/attribute 0. Value: 1. 1 is not of type 'string'"),
        ] {
            match trusted_certs_field(&v) {
                Err(ApiError::BadRequest(m)) => assert_eq!(m, msg),
                other => panic!("{v}: {other:?}"),
            }
        }
    }
}
