//! The identity service's error type and the one place it becomes Keystone's
//! error body: `{"error": {"code", "title", "message"}}`.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Everything an identity request can fail with.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// 400.
    #[error("{0}")]
    BadRequest(String),
    /// 401 (the message is what the client sees; the reason is for logs).
    #[error("The request you have made requires authentication.")]
    Unauthorized {
        /// Why (never a token or password).
        reason: String,
    },
    /// 403.
    #[error("{0}")]
    Forbidden(String),
    /// 404.
    #[error("{0}")]
    NotFound(String),
    /// 409.
    #[error("{0}")]
    Conflict(String),
    /// 429: too many failed authentications for this user from this source.
    #[error("Too many failed authentication attempts; retry in {retry_after_secs} s.")]
    TooManyAttempts {
        /// Seconds until the next attempt is allowed.
        retry_after_secs: u64,
    },
    /// 503: every password check is busy; try again.
    #[error("Too many logins at once; retry in {retry_after_secs} s.")]
    Busy {
        /// Seconds to wait.
        retry_after_secs: u64,
    },
    /// 501.
    #[error("{0}")]
    NotImplemented(String),
    /// Bad configuration (at start).
    #[error("{0}")]
    Config(String),
    /// The store failed.
    #[error("database error")]
    Db(#[source] sqlx::Error),
    /// Something else failed inside.
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<sqlx::Error> for IdentityError {
    fn from(e: sqlx::Error) -> Self {
        Self::Db(e)
    }
}

/// Shorthand for results in the identity module.
pub type Result<T, E = IdentityError> = std::result::Result<T, E>;

impl IdentityError {
    /// 401 with a logged reason.
    pub fn unauthorized(reason: impl Into<String>) -> Self {
        Self::Unauthorized {
            reason: reason.into(),
        }
    }

    /// 404 "Could not find <what>: <id>." as Keystone words it.
    pub fn not_found(what: &str, id: &str) -> Self {
        Self::NotFound(format!("Could not find {what}: {id}."))
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::TooManyAttempts { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Busy { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::NotImplemented(_) => StatusCode::NOT_IMPLEMENTED,
            Self::Config(_) | Self::Db(_) | Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// Keystone's title for a status.
fn title(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        429 => "Too Many Requests",
        501 => "Not Implemented",
        _ => "Internal Server Error",
    }
}

/// Renders Keystone's error body for `status` with `message`.
pub fn error_response(status: StatusCode, message: &str) -> Response {
    let body =
        json!({"error": {"code": status.as_u16(), "title": title(status), "message": message}});
    let mut resp = (status, axum::Json(body)).into_response();
    if status == StatusCode::UNAUTHORIZED {
        resp.headers_mut().insert(
            "www-authenticate",
            HeaderValue::from_static("Keystone uri=\"/v3\""),
        );
    }
    resp
}

impl IntoResponse for IdentityError {
    fn into_response(self) -> Response {
        let status = self.status();
        let message = match &self {
            Self::Config(_) | Self::Db(_) | Self::Internal(_) => {
                tracing::error!(error = ?self, "identity request failed");
                "An unexpected error prevented the server from fulfilling your request.".to_owned()
            }
            Self::Unauthorized { reason } => {
                tracing::info!(target: "audit", %reason, "authentication refused");
                self.to_string()
            }
            other => other.to_string(),
        };
        let mut resp = error_response(status, &message);
        if let Self::TooManyAttempts { retry_after_secs } | Self::Busy { retry_after_secs } = self {
            if let Ok(v) = HeaderValue::from_str(&retry_after_secs.to_string()) {
                resp.headers_mut().insert("retry-after", v);
            }
        }
        resp
    }
}
