//! The image service's error type and the one place it becomes Glance's
//! error body: `{"code": 404, "title": "Not Found", "message": "…"}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Everything an image request can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// 400.
    #[error("{0}")]
    BadRequest(String),
    /// 401 (the reason is for logs only).
    #[error("This server could not verify that you are authorized to access the document you requested.")]
    Unauthorized {
        /// Why (never a token).
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
    /// 410 (an upload that finished after its image was deleted).
    #[error("{0}")]
    Gone(String),
    /// 413.
    #[error("{0}")]
    TooLarge(String),
    /// 415.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// Something the request needs is not answering (503).
    #[error("{0}")]
    Unavailable(String),
    /// Bad configuration (at start).
    #[error("{0}")]
    Config(String),
    /// The metadata store failed.
    #[error("database error")]
    Db(#[source] sqlx::Error),
    /// The file store failed.
    #[error("image store I/O error")]
    Io(#[source] std::io::Error),
}

impl From<sqlx::Error> for ImageError {
    fn from(e: sqlx::Error) -> Self {
        Self::Db(e)
    }
}

impl From<std::io::Error> for ImageError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

/// Shorthand for results in the image module.
pub type Result<T, E = ImageError> = std::result::Result<T, E>;

impl ImageError {
    /// 401 with a logged reason.
    pub fn unauthorized(reason: impl Into<String>) -> Self {
        Self::Unauthorized {
            reason: reason.into(),
        }
    }

    /// 404 "No image found with ID <id>" as Glance words it.
    pub fn no_image(id: &str) -> Self {
        Self::NotFound(format!("No image found with ID {id}"))
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::Gone(_) => StatusCode::GONE,
            Self::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Config(_) | Self::Db(_) | Self::Io(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

fn title(status: StatusCode) -> &'static str {
    status.canonical_reason().unwrap_or("Internal Server Error")
}

/// Renders Glance's error body for `status` with `message`.
pub fn error_response(status: StatusCode, message: &str) -> Response {
    let body = json!({"code": status.as_u16(), "title": title(status), "message": message});
    (status, axum::Json(body)).into_response()
}

impl IntoResponse for ImageError {
    fn into_response(self) -> Response {
        let status = self.status();
        let message = match &self {
            Self::Config(_) | Self::Db(_) | Self::Io(_) => {
                tracing::error!(error = ?self, "image request failed");
                "An unexpected error prevented the server from fulfilling your request.".to_owned()
            }
            Self::Unauthorized { reason } => {
                tracing::info!(target: "audit", %reason, "authentication refused");
                self.to_string()
            }
            other => other.to_string(),
        };
        error_response(status, &message)
    }
}
