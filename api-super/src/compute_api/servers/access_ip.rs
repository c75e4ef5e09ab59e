//! `accessIPv4` and `accessIPv6` of a create, an update or a rebuild:
//! Nova's `parameter_types.accessIPv4` / `accessIPv6` (a string of JSON
//! Schema's `ipv4` / `ipv6` format), kept as Nova's `IPAddress` fields
//! keep them (the address's canonical text).

use std::net::{Ipv4Addr, Ipv6Addr};

use serde_json::{Map, Value};

use crate::compute_api::error::ApiResult;
use crate::compute_api::query_schema::{invalid_field, not_of_type, python_value_repr};

/// The two addresses of a body (`None`: not given).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct AccessIps {
    pub(crate) v4: Option<String>,
    pub(crate) v6: Option<String>,
}

/// One address at `key` of the body, checked as Nova's schema.
fn address(o: &Map<String, Value>, key: &str, v6: bool) -> ApiResult<Option<String>> {
    let Some(v) = o.get(key) else {
        return Ok(None);
    };
    let Value::String(s) = v else {
        return Err(invalid_field(key, v, &not_of_type(v, "'string'")));
    };
    let parsed = if v6 {
        s.parse::<Ipv6Addr>().ok().map(|a| a.to_string())
    } else {
        s.parse::<Ipv4Addr>().ok().map(|a| a.to_string())
    };
    let format = if v6 { "ipv6" } else { "ipv4" };
    parsed.map(Some).ok_or_else(|| {
        invalid_field(
            key,
            v,
            &format!("{} is not a '{format}'", python_value_repr(v)),
        )
    })
}

/// `accessIPv4` and `accessIPv6` of a body's object.
pub(crate) fn access_ips(o: &Map<String, Value>) -> ApiResult<AccessIps> {
    Ok(AccessIps {
        v4: address(o, "accessIPv4", false)?,
        v6: address(o, "accessIPv6", true)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute_api::error::ApiError;
    use serde_json::json;

    fn of(v: Value) -> ApiResult<AccessIps> {
        access_ips(v.as_object().unwrap())
    }

    #[test]
    fn addresses_as_nova_s_formats() {
        let a = of(json!({"accessIPv4": "192.0.2.1", "accessIPv6": "2001:DB8:0:0::1"})).unwrap();
        assert_eq!(a.v4.as_deref(), Some("192.0.2.1"));
        assert_eq!(a.v6.as_deref(), Some("2001:db8::1"));
        assert_eq!(of(json!({})).unwrap(), AccessIps::default());
        for (body, msg) in [
            (
                json!({"accessIPv4": "1.2.3"}),
                "Invalid input for field/attribute accessIPv4. Value: 1.2.3. '1.2.3' is not a 'ipv4'",
            ),
            (
                json!({"accessIPv4": ""}),
                "Invalid input for field/attribute accessIPv4. Value: . '' is not a 'ipv4'",
            ),
            (
                json!({"accessIPv6": "192.0.2.1"}),
                "Invalid input for field/attribute accessIPv6. Value: 192.0.2.1. '192.0.2.1' is not a 'ipv6'",
            ),
            (
                json!({"accessIPv4": 4}),
                "Invalid input for field/attribute accessIPv4. Value: 4. 4 is not of type 'string'",
            ),
        ] {
            match of(body) {
                Err(ApiError::BadRequest(m)) => assert_eq!(m, msg),
                other => panic!("{other:?}"),
            }
        }
    }
}
