//! Identity: a Keystone v3 subset (see docs/IDENTITY.md).
//!
//! - [`service::Identity`]: passwords (argon2id), token issue and re-scope,
//!   revocation, signing-key rotation; the store is [`db::Db`] (both
//!   backends, its own `identity_*` tables).
//! - [`api`]: the HTTP API (version discovery, `/v3/auth/*`, the admin
//!   subset for domains, projects, users, roles and assignments).
//! - [`policy`]: the rule engine with Keystone's, Nova's and Placement's
//!   defaults, overridable from a policy file.
//! - Tokens are Ed25519-signed (`fabric::token`): any service validates them
//!   with public keys only, no database round trip.

pub mod api;
pub mod bootstrap;
pub mod config;
pub mod db;
pub mod db_limits;
pub mod error;
pub mod keyseal;
pub mod password;
pub mod policy;
pub mod ratelimit;
pub mod service;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

pub use bootstrap::{bootstrap, BootstrapSpec, Bootstrapped};
pub use config::{EndpointsConfig, IdentityConfig};
pub use service::Identity;

/// A running identity API.
pub struct Running {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// The service (its `validator` can be shared with in-process APIs).
    pub identity: Arc<Identity>,
    /// The server task.
    pub task: tokio::task::JoinHandle<()>,
    /// The task re-reading keys and revocations from the store.
    pub reload_task: tokio::task::JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.reload_task.abort();
    }
}

impl Running {
    /// `http://<addr>` (or the configured public URL).
    pub fn url(&self) -> String {
        self.identity.public_url()
    }

    /// Stops serving.
    pub fn shutdown(&self) {
        self.task.abort();
        self.reload_task.abort();
    }
}

/// Opens the store and serves the identity API on `cfg.listen` (port 0 picks
/// one). An empty `public_url` becomes `http://<bound address>`, which is
/// also what the catalog's identity endpoint says.
pub async fn serve_identity(cfg: IdentityConfig) -> anyhow::Result<Running> {
    let listener = TcpListener::bind(&cfg.listen).await?;
    let addr = listener.local_addr()?;
    let http = cfg.http.clone();
    let identity = Arc::new(
        Identity::open(cfg)
            .await
            .map_err(|e| anyhow::anyhow!("cannot open the identity store: {e}"))?,
    );
    let server = httpd::Server::new("identity", http, |msg| {
        error::error_response(axum::http::StatusCode::SERVICE_UNAVAILABLE, msg)
    })?;
    if identity.public_url().is_empty() {
        identity.set_public_url(format!("{}://{addr}", server.scheme()));
    }
    let app = api::router(identity.clone());
    let task = tokio::spawn(server.serve(listener, app));
    let reload_task = identity.spawn_reload();
    tracing::info!(%addr, "identity API listening");
    Ok(Running {
        addr,
        identity,
        task,
        reload_task,
    })
}
