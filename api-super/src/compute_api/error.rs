//! The Compute API's one error type and its one mapping to Nova's error
//! body, `{"<name>": {"code": N, "message": "..."}}` (`badRequest`,
//! `itemNotFound`, `forbidden`, `conflictingRequest`, `computeFault`, ...).
//! Internal causes are logged once, here; the client sees a generic message.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::cells::{CellDown, CellError};
use crate::scheduler::source::HostStateError;

/// Everything a Compute API request can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400.
    #[error("{0}")]
    BadRequest(String),
    /// 401 (keystonemiddleware's body).
    #[error("The request you have made requires authentication.")]
    Unauthorized,
    /// 403.
    #[error("{0}")]
    Forbidden(String),
    /// 404.
    #[error("{0}")]
    NotFound(String),
    /// 406 (a microversion outside the supported range).
    #[error("{0}")]
    NotAcceptable(String),
    /// 409.
    #[error("{0}")]
    Conflict(String),
    /// 501: what this region has not built, or a driver cannot do.
    #[error("{0}")]
    NotImplemented(String),
    /// A database statement failed (500).
    #[error("database operation {op} failed")]
    Db {
        /// The statement's name.
        op: &'static str,
        /// The cause.
        #[source]
        source: sqlx::Error,
    },
    /// A cell database statement failed (500).
    #[error("cell database operation failed")]
    Cell(#[source] cell_mapping::Error),
    /// A cell the request needs does not answer: 500, as Nova answers
    /// when it cannot do without the cell, but with a message that names
    /// the cell instead of the generic one.
    #[error("{message}")]
    CellDown {
        /// What the client is told.
        message: String,
        /// The cell and why it is considered down (logged, not shown).
        #[source]
        source: CellDown,
    },
    /// The scheduler could not read host state (500).
    #[error("cannot read host state")]
    HostState(#[source] HostStateError),
    /// Anything else that is our fault (500).
    #[error("internal error: {0}")]
    Internal(String),
    /// A service the request needs could not be reached and nothing was
    /// changed: try again later (503, the message shown).
    #[error("{0}")]
    Unavailable(String),
}

impl ApiError {
    /// An internal error from any displayable cause.
    pub fn internal(e: impl std::fmt::Display) -> Self {
        ApiError::Internal(e.to_string())
    }

    /// A down cell, told as "Cell <uuid> is not responding…".
    pub fn cell_down(down: CellDown) -> Self {
        ApiError::CellDown {
            message: format!(
                "Cell {} is not responding, hence the information of its servers is not \
                 available; try again later.",
                down.cell
            ),
            source: down,
        }
    }

    /// 404 for a server.
    pub fn server_not_found(id: &str) -> Self {
        ApiError::NotFound(format!("Instance {id} could not be found."))
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::NotImplemented(_) => StatusCode::NOT_IMPLEMENTED,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Db { .. }
            | ApiError::Cell(_)
            | ApiError::CellDown { .. }
            | ApiError::HostState(_)
            | ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<cell_mapping::Error> for ApiError {
    fn from(e: cell_mapping::Error) -> Self {
        ApiError::Cell(e)
    }
}

impl From<HostStateError> for ApiError {
    fn from(e: HostStateError) -> Self {
        ApiError::HostState(e)
    }
}

impl From<CellError> for ApiError {
    fn from(e: CellError) -> Self {
        match e {
            CellError::Down(d) => ApiError::cell_down(d),
            CellError::Query(_, e) => ApiError::Cell(e),
            e @ CellError::Bus(..) => ApiError::internal(chain(&e)),
        }
    }
}

/// An error and its causes, `a: b: c`.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

/// Nova's fault names by status (nova.api.openstack.wsgi.Fault).
fn fault_name(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "badRequest",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "itemNotFound",
        405 => "badMethod",
        409 => "conflictingRequest",
        413 | 429 => "overLimit",
        415 => "badMediaType",
        501 => "notImplemented",
        503 => "serviceUnavailable",
        _ => "computeFault",
    }
}

/// The error body of `status` with `message`.
pub fn fault_response(status: StatusCode, message: &str) -> Response {
    let body = json!({ fault_name(status): { "code": status.as_u16(), "message": message } });
    (status, Json(body)).into_response()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if let ApiError::CellDown { message, source } = &self {
            tracing::warn!(cell = %source.cell, cell_name = %source.name, reason = %source.reason,
                "compute API request failed: it needs a cell that is down");
            return fault_response(status, message);
        }
        // Said on purpose, so shown as said (Nova's HTTPNotImplemented and
        // HTTPServiceUnavailable carry their explanation).
        if let ApiError::Unavailable(message) | ApiError::NotImplemented(message) = &self {
            return fault_response(status, message);
        }
        if status.is_server_error() {
            let chain = chain(&self);
            tracing::error!(error = %chain, "compute API request failed");
            return fault_response(
                status,
                "Unexpected API Error. Please report this at http://bugs.launchpad.net/nova/ \
                 and attach the Nova API log if possible.",
            );
        }
        if let ApiError::Unauthorized = self {
            let body = json!({"error": {"code": 401, "title": "Unauthorized",
                "message": "The request you have made requires authentication."}});
            return (status, Json(body)).into_response();
        }
        fault_response(status, &self.to_string())
    }
}

/// Result of a handler.
pub type ApiResult<T> = Result<T, ApiError>;
