//! Images: a Glance v2 subset (see docs/IMAGES.md).
//!
//! - [`service::ImageService`]: visibility, create, list (filters, sort,
//!   paging), JSON-patch updates, delete, upload and download; metadata in
//!   [`db::Db`] (both backends, its own `images`, `image_properties`,
//!   `image_tags` tables), data in [`store::FileStore`] (a directory).
//! - [`api`]: the HTTP API (version discovery, `/v2/images…`, schemas).
//! - [`policy`]: Glance's default rules on the shared policy engine.
//! - [`lookup`]: what the Compute API uses to resolve `imageRef`.
//! - [`seed`]: a small public image for a fresh region.
//!
//! Tokens are validated by any [`fabric::token::Authenticator`] (in the
//! region: the identity service's own `TokenValidator`).

pub mod api;
mod compute_proxy;
pub mod config;
pub mod db;
pub mod error;
pub mod limits;
mod list_query;
pub mod lookup;
pub mod model;
pub mod policy;
mod quota;
pub mod seed;
pub mod service;
pub mod store;

use std::net::SocketAddr;
use std::sync::Arc;

use fabric::token::Authenticator;
use tokio::net::TcpListener;

pub use config::ImageConfig;
pub use lookup::{ImageLookup, ImageSummary, LookupError};
pub use model::{ImageId, ImageStatus, Visibility};
pub use seed::{seed_cirros_like, seed_guest_image, CIRROS_NAME, GUEST_NAME};
pub use service::ImageService;

/// A running image API.
#[derive(Debug)]
pub struct Running {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// The service.
    pub service: Arc<ImageService>,
    /// The server task.
    pub task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// `http://<addr>` (or the configured public URL).
    pub fn url(&self) -> String {
        self.service.public_url()
    }

    /// The `imageRef` resolver for an in-process Compute API.
    pub fn lookup(&self) -> ImageLookup {
        ImageLookup::new(self.service.clone())
    }

    /// Stops serving.
    pub fn shutdown(&self) {
        self.task.abort();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Opens the stores and serves the image API on `cfg.listen` (port 0 picks
/// one), validating tokens with `auth` (pass the identity service's
/// `Arc<TokenValidator>` in the region).
pub async fn serve_image(
    cfg: ImageConfig,
    auth: Arc<dyn Authenticator>,
) -> anyhow::Result<Running> {
    let listener = TcpListener::bind(&cfg.listen).await?;
    let addr = listener.local_addr()?;
    let http = cfg.http.clone();
    let service = Arc::new(
        ImageService::open(cfg, auth)
            .await
            .map_err(|e| anyhow::Error::new(e).context("cannot open the image service"))?,
    );
    let server = httpd::Server::new("image", http, |msg| {
        error::error_response(axum::http::StatusCode::SERVICE_UNAVAILABLE, msg)
    })?;
    if service.public_url().is_empty() {
        service.set_public_url(format!("{}://{addr}", server.scheme()));
    }
    let app = api::router(service.clone());
    let task = tokio::spawn(server.serve(listener, app));
    tracing::info!(%addr, "image API listening");
    Ok(Running {
        addr,
        service,
        task,
    })
}
