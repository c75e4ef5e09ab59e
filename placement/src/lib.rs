//! `placement`: the OpenStack-Placement-compatible service.
//!
//! Owns the placement database (resource providers, inventories, allocations,
//! consumers, traits, resource classes, aggregates) and an in-memory index
//! for allocation candidates and provider-list filters, kept coherent with
//! the database: every committed write re-reads the providers it touched into
//! the index.
//!
//! Layers: `api` (axum handlers: parse, authorize, call) → `service`
//! (database + index) → `db` (all SQL, both backends) and `engine` (the pure
//! in-memory index; no HTTP, no SQL).
//!
//! May depend on: `fabric`, `migrations`, sqlx, axum. Must not depend on any
//! other service crate.

pub mod api;
pub mod auth;
pub mod changes;
pub mod config;
pub mod db;
pub mod engine;
pub mod error;
pub mod listener;
pub mod metrics;
pub mod microversion;
pub mod policy;
pub mod service;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::routing::get;
use tokio::net::TcpListener;

pub use config::PlacementConfig;
pub use service::Placement;

/// A running placement API.
pub struct Running {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// The service (for embedding and tests).
    pub placement: Arc<Placement>,
    /// The server task.
    pub task: tokio::task::JoinHandle<()>,
    /// Follows other processes' index changes (PostgreSQL only); stops
    /// when dropped.
    pub follower: Option<changes::Follower>,
}

/// Opens the database and serves the API on `cfg.listen` (port 0 picks one).
pub async fn serve(
    cfg: &PlacementConfig,
    telemetry: Option<fabric::telemetry::Telemetry>,
) -> anyhow::Result<Running> {
    // (An empty one is refused below, with what else is missing.)
    if matches!(cfg.auth_strategy.as_str(), "keystone" | "keystone_remote")
        && !cfg.identity_url.is_empty()
    {
        fabric::http::refuse_plain_http_off_loopback(
            "placement: identity_url",
            &cfg.identity_url,
            cfg.allow_plain_http_identity,
        )?;
    }
    let auth = auth::AuthStrategy::from_config_with(
        &cfg.auth_strategy,
        &cfg.identity_url,
        &cfg.keystone_remote,
    )
    .await
    .map_err(anyhow::Error::msg)?;
    serve_with(cfg, auth, telemetry).await
}

/// As [`serve`], with the authentication strategy given (the all-in-one
/// region shares its identity service's token validator this way).
pub async fn serve_with(
    cfg: &PlacementConfig,
    auth: auth::AuthStrategy,
    telemetry: Option<fabric::telemetry::Telemetry>,
) -> anyhow::Result<Running> {
    let placement = Arc::new(
        Placement::open(&cfg.database.connection, cfg.database.max_connections)
            .await
            .map_err(|e| anyhow::anyhow!("cannot open the placement database: {e}"))?,
    );
    let follower = changes::follow(
        placement.clone(),
        &cfg.database.connection,
        std::time::Duration::from_secs(cfg.index_reconcile_secs),
    )
    .await?;
    let state_auth = Arc::new(auth);
    let policy = Arc::new(
        policy::load(&cfg.policy_file)
            .map_err(|e| anyhow::anyhow!("placement: policy_file {}: {e}", cfg.policy_file))?,
    );
    let state = api::AppState {
        placement: placement.clone(),
        auth: state_auth.clone(),
        policy,
        randomize_allocation_candidates: cfg.randomize_allocation_candidates,
        scheme: cfg.http.scheme(),
    };
    let mut app = api::router(state);
    if let Some(t) = telemetry {
        app = app.route("/metrics", get(move || std::future::ready(t.render())));
    }
    let listener = TcpListener::bind(&cfg.listen).await?;
    let addr = listener.local_addr()?;
    if matches!(*state_auth, auth::AuthStrategy::NoAuth2)
        && !addr.ip().is_loopback()
        && !cfg.allow_noauth2_remote
    {
        anyhow::bail!(
            "placement: auth_strategy noauth2 on {addr}, which is not a loopback address: \
             anyone who reaches it would be an administrator. Use auth_strategy keystone, \
             listen on 127.0.0.1, or set allow_noauth2_remote = true"
        );
    }
    let server = httpd::Server::new("placement", cfg.http.clone(), |msg| {
        let request_id = format!("req-{}", uuid::Uuid::new_v4());
        let body = error::error_body(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            error::ErrorCode::Undefined,
            msg,
            &request_id,
            true,
        );
        let mut resp = axum::response::Response::new(axum::body::Body::from(body));
        resp.headers_mut().insert(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/json"),
        );
        resp
    })?;
    let task = tokio::spawn(server.serve_wrapped(listener, app, crate::listener::Guarded::new));
    tracing::info!(%addr, "placement API listening");
    Ok(Running {
        addr,
        placement,
        task,
        follower,
    })
}
