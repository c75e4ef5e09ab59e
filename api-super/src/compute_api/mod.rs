//! The Compute API (Nova v2.1 subset) on axum: version discovery,
//! microversions (2.1 … 2.104), Keystone tokens (`X-Auth-Token`, validated
//! with `fabric::token`), Nova's default policy, flavors and servers
//! (create, list, show, rename, delete), server actions, instance actions,
//! server metadata and tags. See docs/COMPUTE_API.md.
//!
//! Layers: handlers ([`servers`], [`flavors`], [`versions`]) parse,
//! authorize and call the API database ([`db`]), the cells
//! ([`crate::cells`]) and the super-conductor ([`crate::conductor`]).
//! Errors: [`error::ApiError`], mapped to Nova's error body in one place.

pub mod aggregates;
pub mod availability_zones;
pub(crate) mod body_schema;
pub mod db;
pub mod error;
pub mod extensions;
pub mod flavor_manage;
pub mod flavors;
pub mod host_source;
pub mod hosts;
pub mod hypervisors;
pub mod images;
pub mod images_proxy;
pub mod instance_actions;
pub(crate) mod keypair_x509;
pub mod keypairs;
pub mod legacy_ids;
pub mod microversion;
pub mod query_schema;
pub mod quota_classes;
pub mod quotas;
pub(crate) mod rebuild;
pub mod server_actions;
pub mod server_console;
pub mod server_diagnostics;
pub mod server_external_events;
pub mod server_filters;
pub mod server_groups;
pub mod server_list;
pub mod server_metadata;
pub mod server_password;
pub mod server_security_groups;
pub mod servers;
pub mod services;
pub mod usage;
pub mod usage_audit;
pub mod versions;

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::{from_fn, from_fn_with_state, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use fabric::token::{Authenticator, Claims};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;

use crate::cells::{CellLiveness, Cells};
use crate::conductor::SuperConductor;
use crate::http::ReqId;
use crate::identity::policy::Policy;
use crate::scheduler::host_state::HostStateCache;
use crate::scheduler::placement::SchedulerPlacement;
use crate::scheduler::{Scheduler, SchedulerConfig};
use crate::services::console::ConsoleKind;
use db::ComputeDb;
use error::ApiError;
use images::ImageLookup;
use microversion::Version;

/// `[compute]` options.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ComputeConfig {
    /// Address (port 0 picks one).
    pub listen: String,
    /// Base URL in links; empty: `http://<bound address>` (`https://` with
    /// TLS).
    pub public_url: String,
    /// Largest page of a listing (Nova's `max_limit`).
    pub max_limit: usize,
    /// The scheduler.
    pub scheduler: SchedulerConfig,
    /// How often the cell-mapping cache re-reads the API database (ms).
    pub cell_cache_refresh_ms: u64,
    /// Default quota limits (`[compute.quota]`).
    pub quota: quotas::QuotaConfig,
    /// Longest wait for one read of a cell database (opening its pool
    /// included), in ms; a cell that does not answer in time is treated as
    /// down (see [`crate::cells`]).
    pub cell_timeout_ms: u64,
    /// While a cell is down, how often one request tries it again (a single
    /// connection attempt), in ms; the others skip it at once.
    pub cell_down_retry_ms: u64,
    /// Nova's `[api] list_records_by_skipping_down_cells`: a server list
    /// that cannot show partial records (below microversion 2.69, or with
    /// paging, sorting or filters) leaves a down cell's servers out
    /// (`true`, the default) or fails (`false`).
    pub list_records_by_skipping_down_cells: bool,
    /// Healing of builds whose scheduler died (`[compute.build_heal]`,
    /// see [`crate::conductor::heal`]).
    pub build_heal: crate::conductor::heal::BuildHealConfig,
    /// How long (ms) a server create reuses its read of the flavor, its
    /// extra specs and the project's quota overrides (0: read every time).
    /// Writes through this process are seen at once; another process's
    /// within this time.
    pub flavor_cache_ms: u64,
    /// Where the serial console proxy listens (Nova's
    /// `[serial_console] serialproxy_port` 6083); empty: no proxy, and
    /// remote serial consoles answer that none runs.
    pub serial_proxy_listen: String,
    /// The proxy's URL in the consoles' URLs; empty: `ws://<bound address>/`
    /// (`wss://` with TLS).
    pub serial_proxy_base_url: String,
    /// Where the noVNC proxy listens (Nova's `[vnc] novncproxy_port`
    /// 6080); empty: no proxy, and noVNC consoles answer that none runs.
    pub novnc_proxy_listen: String,
    /// noVNC's page in the consoles' URLs (Nova's `[vnc]
    /// novncproxy_base_url`); empty: `http://<bound address>/vnc_lite.html`.
    pub novnc_proxy_base_url: String,
    /// Where noVNC's web client is (served by the noVNC proxy when the
    /// directory exists; Debian's `novnc` package).
    pub novnc_web_dir: String,
    /// How long a console token is valid, in seconds (Nova's
    /// `[consoleauth] token_ttl`).
    pub console_token_ttl_secs: u64,
    /// Most server creates being scheduled at once in the background; a
    /// create beyond it waits up to 5 s for a place, then gets a 503 with
    /// nothing written.
    pub max_pending_creates: usize,
    /// The API's and the console proxies' HTTP timeouts and limits
    /// (`[compute.http]`, see [`httpd`]).
    pub http: httpd::Limits,
}

impl Default for ComputeConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8774".to_owned(),
            public_url: String::new(),
            max_limit: 1000,
            scheduler: SchedulerConfig::default(),
            cell_cache_refresh_ms: cell_mapping::CacheConfig::default().refresh_interval_ms,
            quota: quotas::QuotaConfig::default(),
            cell_timeout_ms: 5000,
            cell_down_retry_ms: 1000,
            list_records_by_skipping_down_cells: true,
            build_heal: Default::default(),
            flavor_cache_ms: 1000,
            serial_proxy_listen: String::new(),
            serial_proxy_base_url: String::new(),
            novnc_proxy_listen: String::new(),
            novnc_proxy_base_url: String::new(),
            novnc_web_dir: "/usr/share/novnc".to_owned(),
            console_token_ttl_secs: 600,
            max_pending_creates: crate::conductor::MAX_PENDING_CREATES,
            http: httpd::Limits::default(),
        }
    }
}

/// What the Compute API runs on.
#[derive(Clone)]
pub struct ComputeDeps {
    /// The API database URL (migrated; cells mapped with cell-mapping).
    pub api_database: String,
    /// Token validation (the region shares identity's validator).
    pub auth: Arc<dyn Authenticator>,
    /// Policy (Nova's defaults, maybe overridden).
    pub policy: Arc<Policy>,
    /// Placement: one client for the scheduler and the API's own calls
    /// (allocations removed by a local delete, aggregates mirrored).
    pub placement: Arc<dyn SchedulerPlacement>,
    /// Image lookup; `None`: any UUID-shaped imageRef is accepted.
    pub images: Option<Arc<dyn ImageLookup>>,
}

/// The request context: who calls, at which microversion.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The token's claims (project-scoped).
    pub claims: Arc<Claims>,
    /// Microversion.
    pub mv: Version,
    /// Request id.
    pub request_id: String,
}

impl Ctx {
    /// The caller's project.
    pub fn project_id(&self) -> &str {
        self.claims.project_id().unwrap_or("")
    }

    /// The caller's user.
    pub fn user_id(&self) -> &str {
        &self.claims.user.id
    }

    /// Whether the caller has `admin`.
    pub fn is_admin(&self) -> bool {
        self.claims.has_role("admin")
    }
}

/// The Compute API's shared state.
pub struct Inner {
    pub(crate) db: ComputeDb,
    pub(crate) cells: Cells,
    pub(crate) auth: Arc<dyn Authenticator>,
    pub(crate) policy: Arc<Policy>,
    pub(crate) images: Option<Arc<dyn ImageLookup>>,
    pub(crate) conductor: Arc<SuperConductor>,
    /// Placement (the scheduler's client, shared): allocations removed
    /// and aggregates mirrored by the API itself.
    pub(crate) placement: Arc<dyn SchedulerPlacement>,
    pub(crate) public_url: OnceLock<String>,
    pub(crate) max_limit: usize,
    pub(crate) quota: quotas::QuotaConfig,
    pub(crate) skip_down_cells: bool,
    /// Console auth tokens (in the API database: any API process's proxy
    /// takes them).
    pub(crate) consoles: Arc<crate::services::console::ConsoleTokens>,
    /// The serial console proxy's base URL, when one runs.
    pub(crate) serial_proxy_url: Option<String>,
    /// The noVNC page's URL, when the noVNC proxy runs.
    pub(crate) novnc_proxy_url: Option<String>,
}

/// A handle on the shared state.
#[derive(Clone)]
pub struct App(Arc<Inner>);

impl std::ops::Deref for App {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl App {
    /// The base URL of links.
    pub fn public_url(&self) -> String {
        self.0.public_url.get().cloned().unwrap_or_default()
    }

    /// Checks `action` on a target project (the caller's own user is the
    /// target user, as Nova's default target); `Forbidden` when denied.
    pub fn authorize(&self, ctx: &Ctx, action: &str, project_id: &str) -> Result<(), ApiError> {
        self.authorize_owned(ctx, action, project_id, Some(ctx.user_id()))
    }

    /// Checks `action` on a resource owned by `project_id` and `user_id`
    /// (a server: its owners, as Nova's target; `None`: the user is not
    /// known, and a rule on it is unknown, which denies).
    pub fn authorize_owned(
        &self,
        ctx: &Ctx,
        action: &str,
        project_id: &str,
        user_id: Option<&str>,
    ) -> Result<(), ApiError> {
        let mut target = vec![("project_id", project_id)];
        if let Some(u) = user_id {
            target.push(("user_id", u));
        }
        if self
            .policy
            .enforce(action, &ctx.claims, &target, &ctx.request_id)
        {
            Ok(())
        } else {
            Err(ApiError::Forbidden(format!(
                "Policy doesn't allow {action} to be performed."
            )))
        }
    }

    /// The super-conductor.
    pub fn conductor(&self) -> &Arc<SuperConductor> {
        &self.conductor
    }

    /// The API database.
    pub fn db(&self) -> &ComputeDb {
        &self.db
    }
}

/// Token and microversion for everything under `/v2.1/…`; stamps the
/// version headers on the answer, and Nova's `x-compute-request-id` (the
/// request id again) on every answer.
async fn authenticate(State(app): State<App>, req: Request, next: Next) -> Response {
    let request_id = req
        .extensions()
        .get::<ReqId>()
        .map(|r| r.0.as_str().to_owned())
        .unwrap_or_default();
    let mut resp = authenticated(app, req, next, request_id.clone()).await;
    if let Ok(v) = axum::http::HeaderValue::from_str(&request_id) {
        resp.headers_mut().insert("x-compute-request-id", v);
    }
    resp
}

async fn authenticated(app: App, mut req: Request, next: Next, request_id: String) -> Response {
    let mv = match Version::from_headers(req.headers()) {
        Ok(v) => v,
        Err(e) => return e.into_response(),
    };
    let token = req
        .headers()
        .get("x-auth-token")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    if token.is_empty() {
        return ApiError::Unauthorized.into_response();
    }
    let claims = match app.auth.authenticate(&token).await {
        Ok(c) => c,
        Err(e) => {
            tracing::info!(reason = %e, "token refused");
            return ApiError::Unauthorized.into_response();
        }
    };
    req.extensions_mut().insert(Ctx {
        claims: Arc::new(claims),
        mv,
        request_id,
    });
    let mut resp = next.run(req).await;
    mv.stamp(resp.headers_mut());
    resp
}

async fn not_found() -> Response {
    ApiError::NotFound("The resource could not be found.".into()).into_response()
}

/// The Compute API's routes.
pub fn router(app: App) -> Router {
    let authed = Router::new()
        .route(
            "/v2.1/flavors",
            get(flavors::index).post(flavor_manage::create),
        )
        .route("/v2.1/flavors/detail", get(flavors::index_detail))
        .route(
            "/v2.1/flavors/{id}",
            get(flavors::show)
                .put(flavor_manage::update)
                .delete(flavor_manage::delete),
        )
        .route(
            "/v2.1/flavors/{id}/os-extra_specs",
            get(flavor_manage::specs_index).post(flavor_manage::specs_create),
        )
        .route(
            "/v2.1/flavors/{id}/os-extra_specs/{key}",
            get(flavor_manage::spec_show)
                .put(flavor_manage::spec_update)
                .delete(flavor_manage::spec_delete),
        )
        .route(
            "/v2.1/flavors/{id}/os-flavor-access",
            get(flavor_manage::access_index),
        )
        .route("/v2.1/flavors/{id}/action", post(flavor_manage::action))
        .route(
            "/v2.1/os-keypairs",
            get(keypairs::index).post(keypairs::create),
        )
        .route(
            "/v2.1/os-keypairs/{name}",
            get(keypairs::show).delete(keypairs::delete),
        )
        .route(
            "/v2.1/os-quota-sets/{project_id}",
            get(quotas::show).put(quotas::update).delete(quotas::delete),
        )
        .route(
            "/v2.1/os-quota-sets/{project_id}/defaults",
            get(quotas::defaults),
        )
        .route(
            "/v2.1/os-quota-sets/{project_id}/detail",
            get(quotas::detail),
        )
        .route(
            "/v2.1/os-quota-class-sets/{id}",
            get(quota_classes::show).put(quota_classes::update),
        )
        .route("/v2.1/limits", get(quotas::limits))
        .route("/v2.1/os-simple-tenant-usage", get(usage::index))
        .route(
            "/v2.1/os-simple-tenant-usage/{project_id}",
            get(usage::show),
        )
        .route("/v2.1/os-instance_usage_audit_log", get(usage_audit::index))
        .route(
            "/v2.1/os-instance_usage_audit_log/{id}",
            get(usage_audit::show),
        )
        .route("/v2.1/os-instance-usage-audit-log", get(usage_audit::index))
        .route(
            "/v2.1/os-instance-usage-audit-log/{id}",
            get(usage_audit::show),
        )
        .route(
            "/v2.1/servers",
            get(server_list::index).post(servers::create),
        )
        .route("/v2.1/servers/detail", get(server_list::index_detail))
        .route(
            "/v2.1/servers/{id}",
            get(servers::show)
                .put(servers::update)
                .delete(servers::delete),
        )
        .route(
            "/v2.1/servers/{id}/action",
            axum::routing::post(server_actions::action),
        )
        .route(
            "/v2.1/servers/{id}/remote-consoles",
            axum::routing::post(server_console::remote_consoles),
        )
        .route(
            "/v2.1/os-console-auth-tokens/{token}",
            get(server_console::auth_token),
        )
        .route(
            "/v2.1/servers/{id}/os-instance-actions",
            get(instance_actions::index),
        )
        .route(
            "/v2.1/servers/{id}/os-instance-actions/{request_id}",
            get(instance_actions::show),
        )
        .route(
            "/v2.1/servers/{id}/metadata",
            get(server_metadata::index)
                .post(server_metadata::create)
                .put(server_metadata::update_all),
        )
        .route(
            "/v2.1/servers/{id}/metadata/{key}",
            get(server_metadata::show)
                .put(server_metadata::update)
                .delete(server_metadata::delete),
        )
        .route(
            "/v2.1/servers/{id}/diagnostics",
            get(server_diagnostics::show),
        )
        .route(
            "/v2.1/servers/{id}/os-security-groups",
            get(server_security_groups::index),
        )
        .route(
            "/v2.1/servers/{id}/os-server-password",
            get(server_password::show).delete(server_password::clear),
        )
        .route(
            "/v2.1/servers/{id}/tags",
            get(server_metadata::tags_index)
                .put(server_metadata::tags_update_all)
                .delete(server_metadata::tags_delete_all),
        )
        .route(
            "/v2.1/servers/{id}/tags/{tag}",
            get(server_metadata::tag_show)
                .put(server_metadata::tag_add)
                .delete(server_metadata::tag_delete),
        )
        .route("/v2.1/os-services", get(services::index))
        .route(
            "/v2.1/os-services/{id}",
            axum::routing::put(services::update).delete(services::delete),
        )
        .route("/v2.1/os-hypervisors", get(hypervisors::index))
        .route(
            "/v2.1/os-hypervisors/detail",
            get(hypervisors::index_detail),
        )
        .route(
            "/v2.1/os-hypervisors/statistics",
            get(hypervisors::statistics),
        )
        .route("/v2.1/os-hypervisors/{id}", get(hypervisors::show))
        .route("/v2.1/os-hypervisors/{id}/search", get(hypervisors::search))
        .route("/v2.1/os-hypervisors/{id}/uptime", get(hypervisors::uptime))
        .route("/v2.1/images", get(images_proxy::index))
        .route("/v2.1/images/detail", get(images_proxy::index_detail))
        .route(
            "/v2.1/images/{id}",
            get(images_proxy::show).delete(images_proxy::delete),
        )
        .route(
            "/v2.1/images/{id}/metadata",
            get(images_proxy::meta_index)
                .post(images_proxy::meta_create)
                .put(images_proxy::meta_update_all),
        )
        .route(
            "/v2.1/images/{id}/metadata/{key}",
            get(images_proxy::meta_show)
                .put(images_proxy::meta_update)
                .delete(images_proxy::meta_delete),
        )
        .route("/v2.1/os-networks", get(images_proxy::networks))
        .route("/v2.1/os-networks/{id}", get(images_proxy::networks))
        .route("/v2.1/extensions", get(extensions::index))
        .route("/v2.1/extensions/{alias}", get(extensions::show))
        .route("/v2.1/os-hosts", get(hosts::index))
        .route("/v2.1/os-hosts/{host}", get(hosts::show).put(hosts::update))
        .route("/v2.1/os-hosts/{host}/{action}", get(hosts::power))
        .route(
            "/v2.1/os-hypervisors/{id}/servers",
            get(hypervisors::servers),
        )
        .route(
            "/v2.1/os-aggregates",
            get(aggregates::index).post(aggregates::create),
        )
        .route(
            "/v2.1/os-aggregates/{id}",
            get(aggregates::show)
                .put(aggregates::update)
                .delete(aggregates::delete),
        )
        .route(
            "/v2.1/os-aggregates/{id}/action",
            axum::routing::post(aggregates::action),
        )
        .route("/v2.1/os-availability-zone", get(availability_zones::index))
        .route(
            "/v2.1/os-availability-zone/detail",
            get(availability_zones::detail),
        )
        .route(
            "/v2.1/os-server-external-events",
            axum::routing::post(server_external_events::create),
        )
        .route(
            "/v2.1/os-server-groups",
            get(server_groups::index).post(server_groups::create),
        )
        .route(
            "/v2.1/os-server-groups/{id}",
            get(server_groups::show).delete(server_groups::delete),
        )
        .fallback(not_found)
        .layer(from_fn_with_state(app.clone(), authenticate));
    let routed = Router::new()
        .route("/", get(versions::root))
        .route("/v2.1", get(versions::v2_1))
        .route("/v2.1/", get(versions::v2_1))
        .merge(authed)
        .layer(from_fn(crate::http::frame))
        .with_state(app);
    // `/v2/…` is rewritten to `/v2.1/…` before routing.
    Router::new().fallback_service(tower_layer::Layer::layer(
        &from_fn(versions::legacy_v2),
        routed,
    ))
}

/// A running Compute API.
pub struct Running {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// The shared state (API DB, cells, super-conductor).
    pub app: App,
    /// The server task.
    pub task: tokio::task::JoinHandle<()>,
    /// Background tasks (scheduler heartbeat, build healer, the console
    /// proxy).
    pub background: Vec<tokio::task::JoinHandle<()>>,
    /// The serial console proxy's address, when one runs.
    pub serial_proxy: Option<SocketAddr>,
    /// The noVNC proxy's address, when one runs.
    pub novnc_proxy: Option<SocketAddr>,
}

impl Running {
    /// `http://<addr>` (or the configured public URL).
    pub fn url(&self) -> String {
        self.app.public_url()
    }

    /// Stops serving (and the heartbeat and healer).
    pub fn shutdown(&self) {
        self.task.abort();
        self.background.iter().for_each(|t| t.abort());
    }

    /// Stops serving and closes the connections to the cells' buses.
    pub async fn close(&self) {
        self.shutdown();
        self.app.cells.close_buses().await;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Opens the API database (which must be migrated), starts the
/// cell-mapping cache, the scheduler and the super-conductor, and serves
/// the Compute API on `cfg.listen`.
pub async fn serve_compute(cfg: ComputeConfig, deps: ComputeDeps) -> anyhow::Result<Running> {
    let api = cell_mapping::ApiDb::open(&deps.api_database)
        .await
        .map_err(|e| anyhow::anyhow!("cannot open the API database: {e}"))?;
    let cache = cell_mapping::CellCache::start(
        api.clone(),
        cell_mapping::CacheConfig {
            refresh_interval_ms: cfg.cell_cache_refresh_ms,
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("cannot load the cell mappings: {e}"))?;
    // This process's id: the owner of the builds it creates, kept alive by
    // its heartbeat (the first beat before any build is written).
    let me = crate::conductor::heal::new_process_id();
    let db = ComputeDb::new(api)
        .with_owner(&me)
        .with_create_reads_cache(Duration::from_millis(cfg.flavor_cache_ms));
    db.scheduler_heartbeat(&me, chrono::Utc::now())
        .await
        .map_err(|e| anyhow::anyhow!("cannot record this scheduler's heartbeat: {e}"))?;
    let cells = Cells::with_liveness(
        cache,
        CellLiveness {
            read_timeout: Duration::from_millis(cfg.cell_timeout_ms.max(1)),
            probe_interval: Duration::from_millis(cfg.cell_down_retry_ms),
        },
    );
    let hosts = HostStateCache::new(
        Arc::new(db.clone()),
        cells.clone(),
        Duration::from_millis(cfg.scheduler.host_state_cache_ms),
        Duration::from_secs(cfg.scheduler.service_down_time_secs),
        cfg.scheduler.default_availability_zone.clone(),
    );
    let scheduler = Arc::new(Scheduler::new(
        cfg.scheduler.clone(),
        deps.placement.clone(),
        hosts,
    ));
    let conductor = Arc::new(
        SuperConductor::new(db.clone(), cells.clone(), scheduler)
            .with_max_pending_creates(cfg.max_pending_creates),
    );
    let listener = TcpListener::bind(&cfg.listen).await?;
    // Fails on bad TLS files before anything runs.
    let server = http_server("compute", &cfg.http)?;
    let tls = server.scheme() == "https";
    let mut background = crate::conductor::heal::start(conductor.clone(), &cfg.build_heal);
    // Tokens live 10 minutes by default; 10,000 live at once is far more
    // than operators open consoles.
    let consoles = Arc::new(crate::services::console::ConsoleTokens::new(
        db.clone(),
        Duration::from_secs(cfg.console_token_ttl_secs.max(1)),
        10_000,
    ));
    let serial = start_proxy(
        "serial console proxy",
        &cfg.serial_proxy_listen,
        &cfg.http,
        crate::console_proxy::router(consoles.clone(), ConsoleKind::Serial, None),
        &mut background,
    )
    .await?;
    let serial_proxy_url = proxy_url(serial, &cfg.serial_proxy_base_url, |a| {
        format!("{}://{a}/", if tls { "wss" } else { "ws" })
    });
    let serial_proxy = serial;
    let web = Some(std::path::PathBuf::from(&cfg.novnc_web_dir)).filter(|d| d.is_dir());
    if web.is_none() && !cfg.novnc_proxy_listen.is_empty() {
        tracing::warn!(dir = %cfg.novnc_web_dir, "noVNC's web client is not installed: the noVNC proxy serves the WebSocket only");
    }
    let novnc = start_proxy(
        "noVNC proxy",
        &cfg.novnc_proxy_listen,
        &cfg.http,
        crate::console_proxy::router(consoles.clone(), ConsoleKind::Novnc, web),
        &mut background,
    )
    .await?;
    let novnc_proxy_url = proxy_url(novnc, &cfg.novnc_proxy_base_url, |a| {
        format!("{}://{a}/vnc_lite.html", server.scheme())
    });
    let novnc_proxy = novnc;
    let addr = listener.local_addr()?;
    let public_url = OnceLock::new();
    let _ = public_url.set(if cfg.public_url.is_empty() {
        format!("{}://{addr}", server.scheme())
    } else {
        cfg.public_url.trim_end_matches('/').to_owned()
    });
    let app = App(Arc::new(Inner {
        db,
        cells,
        auth: deps.auth,
        policy: deps.policy,
        images: deps.images,
        conductor,
        placement: deps.placement,
        public_url,
        max_limit: cfg.max_limit.max(1),
        quota: cfg.quota.clone(),
        skip_down_cells: cfg.list_records_by_skipping_down_cells,
        consoles,
        serial_proxy_url,
        novnc_proxy_url,
    }));
    let routes = router(app.clone());
    let task = tokio::spawn(server.serve(listener, routes));
    tracing::info!(%addr, scheduler = %me, "compute API listening");
    Ok(Running {
        addr,
        app,
        task,
        background,
        serial_proxy,
        novnc_proxy,
    })
}

/// The URL a proxy bound at `addr` is reached at in console URLs: `base`
/// when configured, else `default` of its address; `None` without a proxy.
fn proxy_url(
    addr: Option<SocketAddr>,
    base: &str,
    default: impl FnOnce(SocketAddr) -> String,
) -> Option<String> {
    addr.map(|a| {
        if base.is_empty() {
            default(a)
        } else {
            base.to_owned()
        }
    })
}

/// The server of the compute API or a console proxy (named `name`), with
/// `limits` and Nova's `503` body.
fn http_server(
    name: &'static str,
    limits: &httpd::Limits,
) -> Result<Arc<httpd::Server>, httpd::TlsError> {
    httpd::Server::new(name, limits.clone(), |msg| {
        axum::response::IntoResponse::into_response(ApiError::Unavailable(msg.to_owned()))
    })
}

/// Serves a console proxy's `routes` on `listen` in the background; its
/// address, or `None` when `listen` is empty (no proxy).
async fn start_proxy(
    name: &'static str,
    listen: &str,
    limits: &httpd::Limits,
    routes: axum::Router,
    background: &mut Vec<tokio::task::JoinHandle<()>>,
) -> anyhow::Result<Option<SocketAddr>> {
    if listen.is_empty() {
        return Ok(None);
    }
    let l = TcpListener::bind(listen).await?;
    let addr = l.local_addr()?;
    background.push(tokio::spawn(http_server(name, limits)?.serve(l, routes)));
    tracing::info!(%addr, "console proxy listening");
    Ok(Some(addr))
}

/// Creates Nova's default flavors (m1.tiny … m1.xlarge) in the API
/// database at `url` unless they exist; returns how many were created.
pub async fn seed_flavors(api_database: &str) -> anyhow::Result<usize> {
    let api = cell_mapping::ApiDb::open(api_database)
        .await
        .map_err(|e| anyhow::anyhow!("cannot open the API database: {e}"))?;
    let n = ComputeDb::new(api.clone())
        .seed_flavors()
        .await
        .map_err(|e| anyhow::anyhow!("cannot seed flavors: {e}"))?;
    api.close().await;
    Ok(n)
}
