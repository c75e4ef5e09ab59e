//! The `api-super` binary: serves the identity API and, given an API
//! database, the image API, the Compute API with its super-conductor and
//! scheduler, and periodic host discovery; plus the operator commands
//! `bootstrap` (as `keystone-manage bootstrap`) and `rotate-keys`.

use std::path::PathBuf;

use api_super::identity::{self, BootstrapSpec, IdentityConfig};
use clap::{Parser, Subcommand};
use fabric::config::TelemetryConfig;
use serde::{Deserialize, Serialize};

/// mimalloc instead of the system allocator: under load glibc's malloc and
/// free took about a fifth of the region process's CPU (docs/BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Command line.
#[derive(Debug, Parser)]
#[command(
    name = "api-super",
    about = "API layer: identity (Keystone v3 subset), images and the Compute API"
)]
struct Cli {
    /// TOML configuration file (API_SUPER_CONFIG also names one).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Identity database URL (overrides identity.database.connection).
    #[arg(long, global = true)]
    database: Option<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve identity, and with `[api_database] connection` set also images,
    /// the Compute API and host discovery (the default).
    Serve {
        /// Address to listen on (overrides identity.listen).
        #[arg(long)]
        listen: Option<String>,
    },
    /// Create the default domain, the admin/member/reader roles, the admin
    /// project and user (idempotent; resets the passwords).
    Bootstrap {
        /// The admin's password.
        #[arg(long, env = "OS_BOOTSTRAP_PASSWORD")]
        bootstrap_password: String,
        /// The admin's user name.
        #[arg(long, default_value = "admin")]
        bootstrap_username: String,
        /// The admin project.
        #[arg(long, default_value = "admin")]
        bootstrap_project_name: String,
        /// Also create a member user with this name...
        #[arg(long)]
        member_username: Option<String>,
        /// ...this password...
        #[arg(long, env = "OS_MEMBER_PASSWORD")]
        member_password: Option<String>,
        /// ...on this project.
        #[arg(long, default_value = "demo")]
        member_project_name: String,
        /// Also create a service user (role `service` only, what compute
        /// hosts and conductors log in as) with this name...
        #[arg(long)]
        service_username: Option<String>,
        /// ...this password...
        #[arg(long, env = "OS_SERVICE_PASSWORD")]
        service_password: Option<String>,
        /// ...on this project.
        #[arg(long, default_value = "service")]
        service_project_name: String,
    },
    /// Add a new token signing key; older keys keep validating until their
    /// tokens have expired.
    RotateKeys,
    /// Print the effective configuration and exit.
    PrintConfig,
}

/// The configuration file (`API_SUPER` prefix).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ApiSuperConfig {
    identity: IdentityConfig,
    /// The API database; empty: serve identity only.
    api_database: ApiDatabaseSection,
    /// The Compute API (listen address, scheduler, …).
    compute: api_super::ComputeConfig,
    /// The image API.
    image: api_super::ImageConfig,
    /// Placement, for the scheduler's claims.
    placement: PlacementSection,
    /// Periodic host discovery (0: off).
    discovery: cell_mapping::DiscoveryConfig,
    /// Create Nova's m1.* flavors when missing.
    seed_flavors: bool,
    /// An external Keystone instead of serving identity here.
    external_identity: ExternalIdentitySection,
    telemetry: TelemetryConfig,
    /// What this process's clients trust (`[tls] ca_file`).
    tls: fabric::config::TlsConfig,
}

/// `[api_database]`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ApiDatabaseSection {
    /// `postgresql://…` or `sqlite://…`; migrated with `cell-manage api_db sync`.
    connection: String,
}

/// `[external_identity]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ExternalIdentitySection {
    /// The Keystone to validate tokens at (`http://host:5000/v3`); empty:
    /// serve identity in this process.
    url: String,
    /// The service user whose token authorizes the checks.
    auth: fabric::login::ServiceCredentials,
    /// Seconds a validation is cached.
    cache_ttl_secs: u64,
    /// Accept an `http://` URL on another machine (whoever is on the path
    /// could then answer for any token). Default: https, or http on a
    /// loopback address only.
    allow_plain_http: bool,
}

impl Default for ExternalIdentitySection {
    fn default() -> Self {
        Self {
            url: String::new(),
            auth: Default::default(),
            cache_ttl_secs: 60,
            allow_plain_http: false,
        }
    }
}

/// `[placement]`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct PlacementSection {
    /// Base URL of placement, e.g. `http://127.0.0.1:8778`.
    endpoint: String,
    /// The scheduler's service user (`[placement.auth]`); its token is kept fresh.
    auth: fabric::login::ServiceCredentials,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let mut cfg: ApiSuperConfig = fabric::config::load("API_SUPER", cli.config.as_deref())?;
    if let Some(d) = cli.database {
        cfg.identity.database.connection = d;
    }
    match cli.command.unwrap_or(Command::Serve { listen: None }) {
        Command::PrintConfig => print!("{}", fabric::config::render(&cfg)),
        Command::Bootstrap {
            bootstrap_password,
            bootstrap_username,
            bootstrap_project_name,
            member_username,
            member_password,
            member_project_name,
            service_username,
            service_password,
            service_project_name,
        } => {
            let _t = fabric::telemetry::init("api-super", &cfg.telemetry)?;
            let db = identity::db::Db::open(
                &cfg.identity.database.connection,
                cfg.identity.database.max_connections,
            )
            .await?;
            let member = match (member_username, member_password) {
                (Some(u), Some(p)) => Some((u, p, member_project_name)),
                (Some(_), None) => anyhow::bail!("--member-username needs --member-password"),
                _ => None,
            };
            let service = match (service_username, service_password) {
                (Some(u), Some(p)) => Some((u, p, service_project_name)),
                (Some(_), None) => anyhow::bail!("--service-username needs --service-password"),
                _ => None,
            };
            let spec = BootstrapSpec {
                admin_username: bootstrap_username,
                admin_password: bootstrap_password,
                admin_project: bootstrap_project_name,
                member,
                service,
            };
            let done = identity::bootstrap(&db, &spec, cfg.identity.password_hash).await?;
            println!(
                "bootstrapped: admin user {} on project {}",
                done.admin_user_id, done.admin_project_id
            );
            if let Some((u, p)) = done.member {
                println!("member user {u} on project {p}");
            }
            if let Some((u, p)) = done.service {
                println!("service user {u} on project {p}");
            }
        }
        Command::RotateKeys => {
            let _t = fabric::telemetry::init("api-super", &cfg.telemetry)?;
            let id = identity::Identity::open(cfg.identity).await?;
            let kid = id.rotate_keys().await?;
            println!("new signing key {kid}");
        }
        Command::Serve { listen } => {
            if let Some(l) = listen {
                cfg.identity.listen = l;
            }
            let _t = fabric::telemetry::init("api-super", &cfg.telemetry)?;
            cfg.tls.apply()?;
            // Identity here, or an external Keystone asked per token.
            let mut kept = None;
            let (identity_running, auth, identity_url): (
                _,
                std::sync::Arc<dyn fabric::token::Authenticator>,
                String,
            ) = if cfg.external_identity.url.is_empty() {
                let running = identity::serve_identity(cfg.identity.clone()).await?;
                let url = format!("{}://{}", cfg.identity.http.scheme(), running.addr);
                println!("identity listening on {url}");
                let auth = running.identity.validator.clone();
                (Some(running), auth, url)
            } else {
                use anyhow::Context;
                let ext = &cfg.external_identity;
                fabric::http::refuse_plain_http_off_loopback(
                    "external_identity.url",
                    &ext.url,
                    ext.allow_plain_http,
                )?;
                if !ext.auth.is_set() {
                    anyhow::bail!(
                        "external_identity.url needs a service user in [external_identity.auth]"
                    );
                }
                let mut creds = ext.auth.clone();
                if creds.auth_url.is_empty() {
                    creds.auth_url = ext.url.clone();
                    creds.allow_plain_http |= ext.allow_plain_http;
                }
                let login = fabric::login::keep_token(creds)
                    .await
                    .context("the service login at the external identity")?;
                let validator = fabric::token::ExternalKeystone::new(
                    ext.url.clone(),
                    std::time::Duration::from_secs(ext.cache_ttl_secs),
                    login.token.clone(),
                );
                kept = Some(login);
                println!("identity: external, {}", ext.url);
                (None, std::sync::Arc::new(validator), ext.url.clone())
            };
            let rest = if cfg.api_database.connection.is_empty() {
                if identity_running.is_none() {
                    anyhow::bail!(
                        "with external_identity.url there is nothing to serve without api_database.connection"
                    );
                }
                None
            } else {
                Some(serve_compute_side(&cfg, auth, &identity_url).await?)
            };
            tokio::signal::ctrl_c().await?;
            drop(rest);
            drop(kept);
            drop(identity_running);
        }
    }
    Ok(())
}

/// What `serve` runs besides identity; stops when dropped.
struct ComputeSide {
    _image: api_super::image::Running,
    _compute: api_super::ComputeRunning,
    _login: fabric::login::KeptToken,
    discovery: tokio::task::JoinHandle<()>,
}

impl Drop for ComputeSide {
    fn drop(&mut self) {
        self.discovery.abort();
    }
}

/// Images, the Compute API (super-conductor, scheduler claiming in
/// placement with a service token kept fresh) and periodic discovery.
async fn serve_compute_side(
    cfg: &ApiSuperConfig,
    auth: std::sync::Arc<dyn fabric::token::Authenticator>,
    identity_url: &str,
) -> anyhow::Result<ComputeSide> {
    use anyhow::Context;
    let api_db = cfg.api_database.connection.clone();
    if cfg.placement.endpoint.is_empty() || !cfg.placement.auth.is_set() {
        anyhow::bail!(
            "serving the Compute API needs placement.endpoint and a service user in [placement.auth]"
        );
    }
    let mut creds = cfg.placement.auth.clone();
    if creds.auth_url.is_empty() {
        creds.auth_url = identity_url.to_owned();
    }
    let limits_url = creds.auth_url.clone();
    let login = fabric::login::keep_token(creds)
        .await
        .context("the scheduler's service login")?;
    let image = api_super::serve_image(cfg.image.clone(), auth.clone())
        .await
        .context("start the image API")?;
    // Per-project image limits from identity (unified limits), read with
    // the same service user.
    image
        .service
        .use_identity_limits(api_super::image::limits::KeystoneLimits::new(
            &limits_url,
            login.token.clone(),
        )?);
    println!("image listening on http://{}", image.addr);
    if cfg.seed_flavors {
        let n = api_super::seed_flavors(&api_db).await?;
        if n > 0 {
            println!("created {n} flavors");
        }
    }
    let compute = api_super::serve_compute(
        cfg.compute.clone(),
        api_super::ComputeDeps {
            api_database: api_db.clone(),
            auth,
            policy: std::sync::Arc::new(
                identity::policy::Policy::load(&cfg.identity.policy_file)
                    .map_err(|e| anyhow::anyhow!("policy file: {e}"))?,
            ),
            placement: std::sync::Arc::new(
                api_super::scheduler::placement::HttpPlacement::with_token(
                    &cfg.placement.endpoint,
                    login.token.clone(),
                )?,
            ),
            images: Some(std::sync::Arc::new(image.lookup())),
        },
    )
    .await
    .context("start the Compute API")?;
    println!("compute listening on http://{}/v2.1", compute.addr);
    let api = cell_mapping::ApiDb::open(&api_db)
        .await
        .map_err(|e| anyhow::anyhow!("cannot open the API database: {e}"))?;
    let discovery = tokio::spawn(cell_mapping::discover::run_periodic(
        api,
        cfg.discovery.clone(),
    ));
    Ok(ComputeSide {
        _image: image,
        _compute: compute,
        _login: login,
        discovery,
    })
}
