//! The conductor's one error type, and the ONE place it becomes a broker
//! error reply ([`ConductorError::reply_to`]).

use fabric::rpc::code;
use fabric::wire::Envelope;

/// Everything that can go wrong in the conductor.
#[derive(Debug, thiserror::Error)]
pub enum ConductorError {
    /// The payload of a method could not be decoded.
    #[error("could not decode the {method} payload")]
    Decode {
        /// The method.
        method: &'static str,
        /// The cause.
        #[source]
        source: prost::DecodeError,
    },
    /// A field is missing or invalid.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The method is not served here.
    #[error("unknown method {0:?}")]
    UnknownMethod(String),
    /// The instance does not exist or is deleted.
    #[error("instance {0} not found")]
    InstanceNotFound(String),
    /// The service does not exist.
    #[error("service {binary} on host {host} not found")]
    ServiceNotFound {
        /// Host.
        host: String,
        /// Binary.
        binary: String,
    },
    /// The instance's task state is not one the caller expected.
    #[error("instance {instance}: expected task state {expected:?}, found {actual:?}")]
    UnexpectedTaskState {
        /// The instance.
        instance: String,
        /// What the caller expected.
        expected: Vec<String>,
        /// What the database holds.
        actual: Option<String>,
    },
    /// The instance is not on the host the caller expected (it was moved,
    /// e.g. rescheduled to an alternate).
    #[error("instance {instance}: expected on host {expected}, it is on {actual:?}")]
    UnexpectedHost {
        /// The instance.
        instance: String,
        /// The host the caller expected.
        expected: String,
        /// The host the database holds.
        actual: Option<String>,
    },
    /// The change breaks the task-state machine.
    #[error("instance {instance}: task state {from:?} cannot become {to:?}")]
    InvalidTransition {
        /// The instance.
        instance: String,
        /// Current.
        from: Option<String>,
        /// Requested.
        to: Option<String>,
    },
    /// A feature that is not built.
    #[error("not built: {0}")]
    NotBuilt(&'static str),
    /// The database failed.
    #[error("database error in {op}")]
    Database {
        /// The named operation.
        op: &'static str,
        /// The cause.
        #[source]
        source: sqlx::Error,
    },
    /// The database could not be brought up to date or opened.
    #[error("cannot open the cell database")]
    Open(#[source] migrations::Error),
    /// Placement failed.
    #[error("placement request failed")]
    Placement(#[source] crate::placement::PlacementError),
    /// The bus failed.
    #[error("message bus error")]
    Bus(#[source] fabric::bus::BusError),
    /// A test failed this step ([`fabric::failpoint`]).
    #[error(transparent)]
    Injected(#[from] fabric::failpoint::Injected),
}

/// Result type of the conductor.
pub type Result<T, E = ConductorError> = std::result::Result<T, E>;

impl ConductorError {
    /// The error code the caller sees.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Decode { .. } | Self::BadRequest(_) => code::BAD_REQUEST,
            Self::UnknownMethod(_) => code::UNKNOWN_METHOD,
            Self::InstanceNotFound(_) | Self::ServiceNotFound { .. } => code::NOT_FOUND,
            Self::UnexpectedTaskState { .. } | Self::UnexpectedHost { .. } => {
                code::UNEXPECTED_TASK_STATE
            }
            Self::InvalidTransition { .. } => code::INVALID_TRANSITION,
            Self::NotBuilt(_) => code::NOT_IMPLEMENTED,
            Self::Database { source, .. }
                if migrations::failure::unreachable(source)
                    || migrations::failure::contended(source) =>
            {
                code::UNAVAILABLE
            }
            Self::Database { .. }
            | Self::Open(_)
            | Self::Placement(_)
            | Self::Bus(_)
            | Self::Injected(_) => code::INTERNAL,
        }
    }

    /// Whether the caller caused it (logged at a lower level).
    pub fn is_client_error(&self) -> bool {
        !matches!(self.code(), code::INTERNAL | code::UNAVAILABLE)
    }

    /// THE mapping to a broker error reply: client errors say what is wrong;
    /// internal ones say only that something failed (the chain is logged
    /// here, once).
    pub fn reply_to(&self, request: &Envelope) -> Envelope {
        let message = if self.is_client_error() {
            tracing::info!(error = %chain(self), "request refused");
            self.to_string()
        } else {
            tracing::error!(error = %chain(self), "request failed");
            format!("{self} (see the cell conductor's log)")
        };
        request.error_reply(self.code(), message)
    }
}

/// `error: cause: cause` for logs.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// Wraps an sqlx error with the name of the operation.
pub(crate) fn db(op: &'static str) -> impl FnOnce(sqlx::Error) -> ConductorError {
    move |source| ConductorError::Database { op, source }
}
