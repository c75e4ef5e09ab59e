//! The compute agent's error type.

use fabric::rpc::RpcError;

use crate::driver::DriverError;
use crate::placement::PlacementError;

/// What can go wrong in a compute agent.
#[derive(Debug, thiserror::Error)]
pub enum ComputeError {
    /// A call to the conductor failed (bus, timeout, or a remote error).
    #[error("conductor call {method} failed")]
    Conductor {
        /// The method.
        method: &'static str,
        /// The cause.
        #[source]
        source: RpcError,
    },
    /// The hypervisor failed.
    #[error("driver error")]
    Driver(#[from] DriverError),
    /// Placement failed.
    #[error("placement error")]
    Placement(#[from] PlacementError),
    /// The bus failed.
    #[error("message bus error")]
    Bus(#[from] fabric::bus::BusError),
    /// A message could not be decoded.
    #[error("could not decode {method}")]
    Decode {
        /// The method.
        method: String,
        /// The cause.
        #[source]
        source: prost::DecodeError,
    },
    /// The agent stopped before it was ready.
    #[error("the agent of host {0} stopped")]
    Stopped(String),
}

impl ComputeError {
    /// The conductor's error code, when the conductor refused the call.
    pub fn remote_code(&self) -> Option<&str> {
        match self {
            ComputeError::Conductor { source, .. } => source.remote_code(),
            _ => None,
        }
    }
}

/// `error: cause: cause` for logs and fault details.
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
