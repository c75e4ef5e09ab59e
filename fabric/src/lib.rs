//! `fabric`: what every process of the region shares.
//!
//! - [`wire`]: protobuf (prost) messages that cross the broker, starting with
//!   the [`wire::Envelope`] every message travels in.
//! - [`bus`]: the message-bus trait ([`bus::Transport`]) with two
//!   implementations: RabbitMQ through lapin ([`bus::amqp`]) and in-process
//!   channels ([`bus::inproc`]).
//! - [`config`]: TOML configuration files with environment overrides.
//! - [`policy`]: the policy engine (oslo.policy's rule language, policy
//!   files); each service brings its own default rules.
//! - [`telemetry`]: tracing (human or JSON) and a Prometheus metrics endpoint.
//! - [`ids`]: newtype identifiers (`CellUuid`, `InstanceUuid`, ...).
//! - [`http`]: the HTTP client side every service shares (timeouts, TLS
//!   with a region's CA, bounded retries while an API is full).
//!
//! May depend on: tokio, prost, lapin, tracing, metrics (with the exporter's
//! own small `/metrics` listener), reqwest (HTTP clients). Must not depend
//! on sqlx, on axum or on any service crate: `compute` depends on this crate and must stay free of
//! database drivers and HTTP-server frameworks.

pub mod bus;
pub mod config;
pub mod failpoint;
pub mod http;
pub mod ids;
pub mod login;
pub mod policy;
pub mod rpc;
pub mod telemetry;
pub mod token;
pub mod wire;
