//! Newtype identifiers. IDs cross crate boundaries as these types, never as
//! bare strings, so a cell UUID cannot be passed where an instance UUID is
//! expected.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A string that is not a valid UUID where one was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind}: {value:?} is not a UUID")]
pub struct InvalidId {
    /// What was being parsed, e.g. "cell UUID".
    pub kind: &'static str,
    /// The offending input (truncated to 64 characters).
    pub value: String,
}

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// A new random (v4) identifier.
            pub fn new_random() -> Self {
                Self(Uuid::new_v4())
            }
            /// The inner UUID.
            pub fn as_uuid(&self) -> &Uuid {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.hyphenated().fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = InvalidId;
            fn from_str(s: &str) -> Result<Self, InvalidId> {
                Uuid::parse_str(s).map(Self).map_err(|_| InvalidId {
                    kind: $kind,
                    value: s.chars().take(64).collect(),
                })
            }
        }

        impl From<Uuid> for $name {
            fn from(u: Uuid) -> Self {
                Self(u)
            }
        }
    };
}

uuid_id!(
    /// A cell, as in the API database's `cell_mappings.uuid`.
    CellUuid,
    "cell UUID"
);
uuid_id!(
    /// A server (instance).
    InstanceUuid,
    "instance UUID"
);
uuid_id!(
    /// A placement resource provider.
    ProviderUuid,
    "resource provider UUID"
);
uuid_id!(
    /// A placement consumer (usually an instance or a migration).
    ConsumerUuid,
    "consumer UUID"
);
uuid_id!(
    /// A compute node (one hypervisor).
    ComputeNodeUuid,
    "compute node UUID"
);

/// The cell0 UUID, fixed as upstream: all zeros.
pub const CELL0_UUID: CellUuid = CellUuid(Uuid::nil());

/// A request id in OpenStack's form: `req-` followed by a UUID.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RequestId(String);

impl RequestId {
    /// A fresh request id.
    pub fn generate() -> Self {
        Self(format!("req-{}", Uuid::new_v4()))
    }

    /// Accepts an incoming id only in the `req-<uuid>` form (as Nova does for
    /// `X-OpenStack-Request-ID` global ids); anything else is rejected so that
    /// untrusted headers cannot inject arbitrary text into logs.
    pub fn parse(s: &str) -> Option<Self> {
        let rest = s.strip_prefix("req-")?;
        Uuid::parse_str(rest).ok()?;
        Some(Self(s.to_owned()))
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_ids_round_trip_and_reject_garbage() {
        let c = CellUuid::new_random();
        assert_eq!(c.to_string().parse::<CellUuid>().unwrap(), c);
        let err = "not-a-uuid".parse::<InstanceUuid>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid instance UUID: \"not-a-uuid\" is not a UUID"
        );
        assert_eq!(
            CELL0_UUID.to_string(),
            "00000000-0000-0000-0000-000000000000"
        );
    }

    #[test]
    fn request_ids_are_validated() {
        let r = RequestId::generate();
        assert!(r.as_str().starts_with("req-"));
        assert_eq!(RequestId::parse(r.as_str()), Some(r));
        assert_eq!(RequestId::parse("req-\nforged log line"), None);
        assert_eq!(
            RequestId::parse("5d0a4b1c-0000-0000-0000-000000000000"),
            None
        );
    }
}
