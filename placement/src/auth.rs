//! Authentication strategies and the policy check.
//!
//! `noauth2` is upstream's development and conformance mode: any
//! `X-Auth-Token` is accepted; a token whose user part (before an optional
//! `:project`) is `admin` is an administrator, any other a plain user.
//! Keystone tokens come with the identity service (not built yet: selecting
//! `keystone` fails at start with a message saying so).
//!
//! Policy: upstream Placement's defaults make every API but the version
//! document an administrator's API; a plain user gets 403.

use axum::http::{HeaderMap, StatusCode};

use crate::error::{ErrorCode, PlacementError};

/// How the service authenticates requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthStrategy {
    /// Upstream's `noauth2`.
    NoAuth2,
}

impl AuthStrategy {
    /// Parses the configured name.
    pub fn from_name(name: &str) -> Result<Self, String> {
        match name {
            "noauth2" => Ok(Self::NoAuth2),
            "keystone" => Err(
                "auth_strategy \"keystone\" is not built yet (the identity issue); use noauth2"
                    .into(),
            ),
            other => Err(format!("unknown auth_strategy {other:?}: expected noauth2")),
        }
    }

    /// Authenticates a request from its headers, or says why not (401).
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, String> {
        match self {
            Self::NoAuth2 => {
                let token = headers
                    .get("x-auth-token")
                    .and_then(|v| v.to_str().ok())
                    .filter(|t| !t.is_empty())
                    .ok_or_else(|| {
                        "The request you have made requires authentication.".to_owned()
                    })?;
                let (user, project) = token.split_once(':').unwrap_or((token, token));
                Ok(Caller {
                    user_id: user.to_owned(),
                    project_id: project.to_owned(),
                    is_admin: user == "admin",
                })
            }
        }
    }
}

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// User id.
    pub user_id: String,
    /// Project id.
    pub project_id: String,
    /// Whether the caller holds the admin role.
    pub is_admin: bool,
}

impl Caller {
    /// Enforces `rule` (a policy name such as `placement:resource_providers:list`):
    /// upstream's defaults require an administrator.
    pub fn authorize(&self, rule: &'static str) -> Result<(), PlacementError> {
        if self.is_admin {
            return Ok(());
        }
        tracing::warn!(user = %self.user_id, project = %self.project_id, action = rule, "policy denied");
        Err(PlacementError::client(
            StatusCode::FORBIDDEN,
            ErrorCode::Undefined,
            format!("Policy does not allow {rule} to be performed."),
        ))
    }
}
