//! `region`: the all-in-one region, as a library shared by the `region`
//! binary, `loadtest` and whole-system tests.
//!
//! [`Region::start`] brings up, in one process on the embedded default
//! (SQLite files in a data directory, in-process buses): identity (Keystone
//! v3 subset) with an admin and a member user, placement validating identity
//! tokens, the API database with cell0 and N cells mapped, one cell
//! conductor per cell, M fake computes per cell reporting to placement with
//! a service token kept fresh, and host discovery.
//!
//! Depends on every service crate; no service crate depends on it.

pub mod local_placement;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use fabric::bus::{self, Transport};
use fabric::config::TelemetryConfig;
use fabric::token::SharedToken;
use serde::{Deserialize, Serialize};

/// The `[region]` section.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RegionSection {
    /// Directory holding one SQLite file per database (on the embedded
    /// default), the generated passwords and the image files.
    pub data_dir: PathBuf,
    /// Where the databases live. Empty: SQLite files in `data_dir` (the
    /// embedded default). Otherwise a PostgreSQL URL template with `{db}`,
    /// replaced by `api`, `cell0`, `cell1`, …, `placement`, `identity` and
    /// `image` (one database each, created if missing), e.g.
    /// `postgresql://root@127.0.0.1:5432/region_{db}`.
    pub database_url: String,
    /// Where each cell's bus lives. Empty: in-process buses (`inproc://cellN`).
    /// Otherwise an `amqp://` URL template with `{cell}`, replaced by the
    /// cell's name, one vhost per cell (the vhosts must exist:
    /// `rabbitmqctl add_vhost`), e.g.
    /// `amqp://guest:guest@127.0.0.1:5672/region_{cell}`.
    pub transport_url: String,
    /// Number of cells besides cell0.
    pub cells: u32,
    /// Compute hosts per cell.
    pub hosts_per_cell: u32,
    /// `fake` (simulated hosts) or `libvirt` (this machine's libvirtd: one
    /// cell with one host, see `[region.libvirt]`).
    pub compute_driver: String,
    /// The libvirt host's settings (`compute_driver = "libvirt"`).
    pub libvirt: compute::driver::libvirt::config::LibvirtSection,
    /// A directory holding the real guest image built by
    /// `scripts/build-guest-image.sh`; registered as the public images
    /// `cells-guest` (with `cells-guest-kernel` and `-ramdisk`) at start.
    /// Empty: none.
    pub guest_image_dir: String,
    /// How long a fake spawn takes, in milliseconds.
    pub fake_spawn_latency_ms: u64,
    /// VCPUs each fake host offers (before the allocation ratio).
    pub host_vcpus: i64,
    /// Memory each fake host offers, MB.
    pub host_memory_mb: i64,
    /// Local disk each fake host offers, GB.
    pub host_disk_gb: i64,
    /// Architectures the fake hosts report (`ImagePropertiesFilter`):
    /// host N of each cell takes entry (N-1) modulo the list's length.
    pub host_architectures: Vec<String>,
    /// Address of the identity API.
    pub identity_listen: String,
    /// Address of the placement API.
    pub placement_listen: String,
    /// Address of the Compute API.
    pub compute_listen: String,
    /// Address of the image API.
    pub image_listen: String,
    /// Address of the serial console proxy (WebSocket; empty: none).
    pub serial_proxy_listen: String,
    /// Where the noVNC console proxy listens (empty: none).
    pub novnc_proxy_listen: String,
    /// Seconds between compute heartbeats.
    pub heartbeat_interval_secs: u64,
    /// Periodic host discovery (Nova's `discover_hosts_in_cells_interval`).
    pub discovery: cell_mapping::DiscoveryConfig,
    /// How often the Compute API re-reads the cell mappings (ms).
    pub cell_cache_refresh_ms: u64,
    /// Where the image API keeps image data (its own disk or volume, so
    /// uploads cannot fill the databases' disk); empty: `<data_dir>/images`.
    /// Created private (0700).
    pub image_store_dir: PathBuf,
    /// Every API's and console proxy's HTTP timeouts and limits
    /// (`[region.http]`, see `httpd`); the image API's body timeout is at
    /// least an hour, for uploads. With `tls_cert_file` and
    /// `tls_key_file` set, every API and proxy speaks https only and the
    /// catalog names `https://` endpoints.
    pub http: httpd::Limits,
    /// A PEM bundle of the CA that signed `[region.http]`'s certificate:
    /// every client in the region (the services' logins, placement and
    /// image clients) trusts it besides the system's roots, and
    /// [`Region::openrc`] names it as `OS_CACERT`. Empty: none.
    pub tls_ca_file: PathBuf,
}

impl Default for RegionSection {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("data"),
            database_url: String::new(),
            transport_url: String::new(),
            cells: 2,
            hosts_per_cell: 4,
            compute_driver: "fake".to_owned(),
            libvirt: Default::default(),
            guest_image_dir: String::new(),
            fake_spawn_latency_ms: 200,
            host_vcpus: compute::HostResources::default().vcpus,
            host_memory_mb: compute::HostResources::default().memory_mb,
            host_disk_gb: compute::HostResources::default().disk_gb,
            host_architectures: vec![compute::driver::fake::DEFAULT_ARCHITECTURE.to_owned()],
            identity_listen: "127.0.0.1:5000".to_owned(),
            placement_listen: "127.0.0.1:8778".to_owned(),
            compute_listen: "127.0.0.1:8774".to_owned(),
            image_listen: "127.0.0.1:9292".to_owned(),
            serial_proxy_listen: "127.0.0.1:6083".to_owned(),
            novnc_proxy_listen: "127.0.0.1:6080".to_owned(),
            heartbeat_interval_secs: 1,
            discovery: cell_mapping::DiscoveryConfig {
                interval_secs: 60,
                by_service: false,
            },
            cell_cache_refresh_ms: 2000,
            http: httpd::Limits::default(),
            image_store_dir: PathBuf::new(),
            tls_ca_file: PathBuf::new(),
        }
    }
}

/// The candidates the region's scheduler asks placement for first
/// (`SchedulerConfig::candidate_sample`).
pub const REGION_CANDIDATE_SAMPLE: usize = 16;

/// The region's configuration file (`REGION` prefix).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RegionConfig {
    /// The region.
    pub region: RegionSection,
    /// Logging and metrics.
    pub telemetry: TelemetryConfig,
}

impl Default for RegionConfig {
    fn default() -> Self {
        Self {
            region: RegionSection::default(),
            telemetry: TelemetryConfig {
                metrics_listen: "127.0.0.1:9180".to_owned(),
                log_filter: "warn,region=info".to_owned(),
                ..Default::default()
            },
        }
    }
}

/// Credentials of a bootstrapped user (the password is never shown by
/// `Debug`).
#[derive(Clone)]
pub struct Credentials {
    /// User name.
    pub username: String,
    /// Password.
    pub password: String,
    /// Project name.
    pub project: String,
    /// The file the password is kept in, when there is one (what
    /// [`Region::openrc`] names instead of the password).
    pub password_file: Option<PathBuf>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .field("project", &self.project)
            .field("password_file", &self.password_file)
            .finish()
    }
}

/// One running cell.
pub struct CellRuntime {
    /// Name (`cell1`, …).
    pub name: String,
    /// Database URL.
    pub db_url: String,
    /// Bus URL.
    pub bus_url: String,
    /// The bus.
    pub bus: Arc<dyn Transport>,
    /// Its conductor.
    pub conductor: cell_conductor::Handle,
    /// How its conductor was started (to start it again).
    pub conductor_options: cell_conductor::ConductorOptions,
    /// Its fake computes.
    pub hosts: Vec<compute::HostHandle>,
    /// The fake hypervisor (knobs for tests and loadtest).
    pub hypervisor: compute::driver::fake::FakeHypervisor,
}

/// A running region.
pub struct Region {
    /// Identity.
    pub identity: api_super::identity::Running,
    /// Placement.
    pub placement: placement::Running,
    /// The image service.
    pub image: api_super::image::Running,
    /// The Compute API (with the super-conductor and scheduler).
    pub compute: api_super::ComputeRunning,
    /// The API database URL.
    pub api_db_url: String,
    /// cell0's database URL.
    pub cell0_db_url: String,
    /// The cells.
    pub cells: Vec<CellRuntime>,
    /// The admin's credentials.
    pub admin: Credentials,
    /// The member's credentials.
    pub member: Credentials,
    /// The services' own token (refreshed in the background).
    pub service_token: SharedToken,
    /// `https` when `[region.http]` has a certificate, else `http`.
    pub scheme: &'static str,
    tls_ca_file: PathBuf,
    _service_login: fabric::login::KeptToken,
    discovery: tokio::task::JoinHandle<()>,
}

impl Drop for Region {
    fn drop(&mut self) {
        self.discovery.abort();
    }
}

fn sqlite_url(dir: &Path, name: &str) -> String {
    format!("sqlite://{}/{name}.sqlite?mode=rwc", dir.display())
}

impl RegionSection {
    /// `https` when every API serves TLS (`[region.http]` names a
    /// certificate), else `http`.
    pub fn scheme(&self) -> &'static str {
        self.http.scheme()
    }

    /// Every listener of the region on a port of the system's choosing
    /// (regions side by side: tests, the loadtest's embedded target).
    pub fn listen_on_free_ports(&mut self) {
        for listen in [
            &mut self.identity_listen,
            &mut self.placement_listen,
            &mut self.compute_listen,
            &mut self.image_listen,
            &mut self.serial_proxy_listen,
            &mut self.novnc_proxy_listen,
        ] {
            *listen = "127.0.0.1:0".to_owned();
        }
    }

    /// Whether the databases are PostgreSQL (else SQLite files).
    pub fn on_postgres(&self) -> bool {
        !self.database_url.is_empty()
    }

    /// The URL of database `name` (`api`, `cell1`, `placement`, …).
    pub fn db_url(&self, name: &str) -> String {
        if self.on_postgres() {
            self.database_url.replace("{db}", name)
        } else {
            sqlite_url(&self.data_dir, name)
        }
    }

    /// The bus URL of cell `name`.
    pub fn bus_url(&self, name: &str) -> String {
        if self.transport_url.is_empty() {
            format!("inproc://{name}")
        } else {
            self.transport_url.replace("{cell}", name)
        }
    }

    /// Pool size for a service's database: SQLite has one writer.
    fn pool_size(&self) -> u32 {
        if self.on_postgres() {
            8
        } else {
            1
        }
    }

    /// Refuses templates that would put two databases or two cells on one URL.
    fn check(&self) -> Result<()> {
        for (k, v) in [
            ("host_vcpus", self.host_vcpus),
            ("host_memory_mb", self.host_memory_mb),
            ("host_disk_gb", self.host_disk_gb),
        ] {
            if v < 1 {
                bail!("region.{k} must be at least 1");
            }
        }
        match self.compute_driver.as_str() {
            "fake" => {}
            "libvirt" => {
                if self.cells != 1 || self.hosts_per_cell != 1 {
                    bail!(
                        "region.compute_driver = \"libvirt\" runs one cell with one host \
                         (region.cells = 1, region.hosts_per_cell = 1): every host would \
                         share this machine's libvirtd and take the others' guests for its own"
                    );
                }
                self.libvirt.virt_type().map_err(anyhow::Error::msg)?;
                self.libvirt.cpu_mode().map_err(anyhow::Error::msg)?;
                // qemu runs as libvirt's own user: it could not reach disks
                // inside the data directory, which is its owner's alone.
                if absolute(&self.libvirt.instances_path).starts_with(absolute(&self.data_dir)) {
                    bail!(
                        "region.libvirt.instances_path ({}) is inside region.data_dir ({}), \
                         which is private to this process's user (0700): qemu, running as \
                         libvirt's user, could not open the guests' disks there; put the \
                         instances elsewhere",
                        self.libvirt.instances_path.display(),
                        self.data_dir.display()
                    );
                }
            }
            other => bail!("region.compute_driver {other:?} is not a driver: fake or libvirt"),
        }
        if self.host_architectures.is_empty() {
            bail!("region.host_architectures must name at least one architecture");
        }
        if self.on_postgres() {
            if !self.database_url.contains("{db}") {
                bail!(
                    "region.database_url must contain {{db}} (one database per service and cell)"
                );
            }
            if !(self.database_url.starts_with("postgres://")
                || self.database_url.starts_with("postgresql://"))
            {
                bail!("region.database_url must be a postgres:// or postgresql:// URL template");
            }
        }
        if !self.transport_url.is_empty() {
            if !self.transport_url.contains("{cell}") {
                bail!("region.transport_url must contain {{cell}} (one vhost per cell)");
            }
            if !self.transport_url.starts_with("amqp://") {
                bail!("region.transport_url must be an amqp:// URL template");
            }
        }
        Ok(())
    }

    /// Creates the PostgreSQL database `name` if missing; the URL.
    async fn prepare_db(&self, name: &str) -> Result<String> {
        let url = self.db_url(name);
        migrations::ensure_database(&url)
            .await
            .with_context(|| format!("prepare the {name} database"))?;
        Ok(url)
    }
}

/// `p` made absolute against the working directory (as given when that
/// cannot be read).
fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_owned())
}

/// The path of the password kept as `name` in `dir`.
fn secret_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.secret"))
}

/// A password kept in `<data_dir>/<name>.secret` (created on first start,
/// readable by the owner only from its creation: never a moment with
/// wider permissions), so restarts keep working credentials.
fn secret(dir: &Path, name: &str) -> Result<String> {
    use std::io::Write as _;
    let path = secret_path(dir, name);
    if let Ok(s) = std::fs::read_to_string(&path) {
        let s = s.trim().to_owned();
        if !s.is_empty() {
            return Ok(s);
        }
        std::fs::remove_file(&path).with_context(|| format!("remove {}", path.display()))?;
    }
    let pw = uuid::Uuid::new_v4().simple().to_string();
    let mut f = private_file(&path).with_context(|| format!("create {}", path.display()))?;
    f.write_all(pw.as_bytes())
        .with_context(|| format!("write {}", path.display()))?;
    Ok(pw)
}

/// A new file readable and writable by its owner only (0600 from its
/// creation on Unix).
fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    o.open(path)
}

/// The data directory, made (0700 from its creation) or narrowed to
/// its owner when it exists with wider permissions: it holds the
/// databases and the secrets.
fn private_dir(dir: &Path) -> Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir)
        .with_context(|| format!("create data directory {}", dir.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir)?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(dir = %dir.display(), mode = format!("{mode:o}"), "data directory open to others; narrowing it to its owner (0700)");
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
    }
    Ok(())
}

/// Logs in with a password (project-scoped) and returns the token and its lifetime.
pub async fn password_token(identity_url: &str, c: &Credentials) -> Result<(String, Duration)> {
    Ok(fabric::login::password_token(&c.service(identity_url)).await?)
}

impl Credentials {
    /// As service credentials against the identity at `identity_url`.
    pub fn service(&self, identity_url: &str) -> fabric::login::ServiceCredentials {
        fabric::login::ServiceCredentials {
            auth_url: identity_url.to_owned(),
            username: self.username.clone(),
            password: self.password.clone(),
            project_name: self.project.clone(),
            ..Default::default()
        }
    }
}

impl Region {
    /// Starts the whole region. Idempotent over an existing data directory.
    pub async fn start(
        cfg: &RegionConfig,
        telemetry: Option<fabric::telemetry::Telemetry>,
    ) -> Result<Region> {
        let r = &cfg.region;
        r.check()?;
        let dir = &r.data_dir;
        private_dir(dir)?;
        if !r.tls_ca_file.as_os_str().is_empty() {
            fabric::http::trust_ca_file(&r.tls_ca_file).context("region.tls_ca_file")?;
        }

        // Identity, with an admin and a member.
        let admin = Credentials {
            username: "admin".into(),
            password: secret(dir, "admin")?,
            password_file: Some(secret_path(dir, "admin")),
            project: "admin".into(),
        };
        let member = Credentials {
            username: "demo".into(),
            password: secret(dir, "demo")?,
            password_file: Some(secret_path(dir, "demo")),
            project: "demo".into(),
        };
        // The compute hosts' and conductors' own user: the role `service`
        // only (placement and image reads), not the administrator.
        let service = Credentials {
            username: "nova".into(),
            password: secret(dir, "nova")?,
            password_file: Some(secret_path(dir, "nova")),
            project: "service".into(),
        };
        let mut icfg = api_super::identity::IdentityConfig {
            listen: r.identity_listen.clone(),
            http: r.http.clone(),
            ..Default::default()
        };
        icfg.database.connection = r.prepare_db("identity").await?;
        // The signing keys' encryption key, private to the region's user.
        icfg.token.key_file = dir.join("identity.kek").display().to_string();
        icfg.database.max_connections = r.pool_size();
        let scheme = r.scheme();
        icfg.endpoints.placement = format!("{scheme}://{}", r.placement_listen);
        icfg.endpoints.compute = format!("{scheme}://{}/v2.1", r.compute_listen);
        icfg.endpoints.image = format!("{scheme}://{}", r.image_listen);
        let identity = api_super::serve_identity(icfg)
            .await
            .context("start identity")?;
        let boot = identity
            .identity
            .bootstrap(&api_super::identity::BootstrapSpec {
                admin_username: admin.username.clone(),
                admin_password: admin.password.clone(),
                admin_project: admin.project.clone(),
                member: Some((
                    member.username.clone(),
                    member.password.clone(),
                    member.project.clone(),
                )),
                service: Some((
                    service.username.clone(),
                    service.password.clone(),
                    service.project.clone(),
                )),
            })
            .await
            .context("bootstrap identity")?;
        let identity_url = format!("{scheme}://{}", identity.addr);

        // Placement, validating the identity's tokens in-process.
        let pcfg = placement::PlacementConfig {
            listen: r.placement_listen.clone(),
            auth_strategy: "keystone".to_owned(),
            identity_url: identity_url.clone(),
            database: placement::config::DatabaseConfig {
                connection: r.prepare_db("placement").await?,
                max_connections: r.pool_size(),
            },
            telemetry: cfg.telemetry.clone(),
            randomize_allocation_candidates: true,
            http: r.http.clone(),
            ..Default::default()
        };
        let placement = placement::serve_with(
            &pcfg,
            placement::auth::AuthStrategy::Keystone(identity.identity.validator.clone()),
            telemetry,
        )
        .await
        .context("start placement")?;
        let placement_url = format!("{scheme}://{}", placement.addr);

        // The services' own token, renewed at half its lifetime.
        let kept = fabric::login::keep_token(service.service(&identity_url))
            .await
            .context("the services' login")?;
        let service_token = kept.token.clone();

        // Images, with one public image to boot from.
        let mut imcfg = api_super::ImageConfig {
            listen: r.image_listen.clone(),
            ..Default::default()
        };
        imcfg.http = httpd::Limits {
            body_timeout_ms: r.http.body_timeout_ms.max(imcfg.http.body_timeout_ms),
            ..r.http.clone()
        };
        imcfg.database.connection = r.prepare_db("image").await?;
        let store = if r.image_store_dir.as_os_str().is_empty() {
            dir.join("images")
        } else {
            r.image_store_dir.clone()
        };
        imcfg.filesystem_store_datadir = store.display().to_string();
        let image = api_super::serve_image(imcfg, identity.identity.validator.clone())
            .await
            .context("start images")?;
        image
            .service
            .use_identity_limits(api_super::image::limits::KeystoneLimits::new(
                &identity_url,
                service_token.clone(),
            )?);
        api_super::image::seed_cirros_like(&image.service, &boot.admin_project_id)
            .await
            .context("seed an image")?;
        if !r.guest_image_dir.is_empty() {
            let g = api_super::image::seed_guest_image(
                &image.service,
                &boot.admin_project_id,
                std::path::Path::new(&r.guest_image_dir),
            )
            .await
            .context("register the guest image")?;
            tracing::info!(image = %g.row.id, "guest image registered");
        }
        let image_url = format!("{scheme}://{}", image.addr);

        // API database, cell0 and the cells.
        let api_db_url = r.prepare_db("api").await?;
        migrations::migrate(migrations::Kind::Api, &api_db_url)
            .await
            .context("migrate the API database")?;
        let api = cell_mapping::ApiDb::open(&api_db_url).await?;
        let cell0_db_url = r.prepare_db("cell0").await?;
        cell_mapping::cells::map_cell0(&api, &cell0_db_url)
            .await
            .context("map cell0")?;
        let existing = api.cells().await?;
        let fake = compute::driver::fake::FakeHypervisor::automatic(Duration::from_millis(
            r.fake_spawn_latency_ms,
        ));
        let mut cells = Vec::new();
        for i in 1..=r.cells {
            let name = format!("cell{i}");
            let db_url = r.prepare_db(&name).await?;
            let bus_url = r.bus_url(&name);
            if !existing
                .iter()
                .any(|c| c.name.as_deref() == Some(name.as_str()))
            {
                cell_mapping::cells::create_cell(
                    &api,
                    &cell_mapping::cells::NewCell {
                        name: Some(name.clone()),
                        transport_url: bus_url.clone(),
                        database_connection: db_url.clone(),
                        disabled: false,
                    },
                )
                .await
                .with_context(|| format!("create {name}"))?;
            }
            let bus = bus::connect(&bus_url)
                .await
                .with_context(|| format!("connect to {name}'s bus (does its vhost exist?)"))?;
            let mut opts = cell_conductor::ConductorOptions::new(&db_url, bus.clone());
            opts.host = format!("{name}-conductor");
            opts.placement = Arc::new(cell_conductor::HttpPlacement::with_token(
                &placement_url,
                service_token.clone(),
            )?);
            let conductor = cell_conductor::run_with(opts.clone())
                .await
                .with_context(|| format!("start {name}'s conductor"))?;
            let compute_placement: Arc<dyn compute::placement::Placement> =
                Arc::new(compute::placement::HttpPlacement::with_token(
                    &placement_url,
                    service_token.clone(),
                )?);
            let mut hosts = Vec::new();
            for j in 1..=r.hosts_per_cell {
                let host = format!("{name}-host{j:02}");
                let mut hc = compute::HostConfig::new(&host);
                hc.heartbeat_interval = Duration::from_secs(r.heartbeat_interval_secs.max(1));
                hc.resources.vcpus = r.host_vcpus;
                hc.resources.memory_mb = r.host_memory_mb;
                hc.resources.disk_gb = r.host_disk_gb;
                let arch = &r.host_architectures[(j as usize - 1) % r.host_architectures.len()];
                fake.set_architecture(&host, arch);
                let driver: Arc<dyn compute::driver::Driver> = if r.compute_driver == "libvirt" {
                    let images = compute::driver::libvirt::images::GlanceImages::new(
                        &image_url,
                        service_token.clone(),
                        Duration::from_secs(r.libvirt.image_download_timeout_secs.max(1)),
                    )?;
                    let d = compute::driver::libvirt::LibvirtDriver::connect(
                        r.libvirt.clone(),
                        Arc::new(images),
                    )?;
                    // Runs for the life of the process.
                    let _ageing = d.start_image_ageing();
                    Arc::new(d)
                } else {
                    fake.driver(&host)
                };
                hosts.push(compute::start_host(
                    hc,
                    bus.clone(),
                    driver,
                    compute_placement.clone(),
                ));
            }
            for h in &hosts {
                tokio::time::timeout(Duration::from_secs(30), h.ready())
                    .await
                    .with_context(|| format!("a host of {name} did not register in 30 s"))??;
            }
            cells.push(CellRuntime {
                name,
                db_url,
                bus_url,
                bus,
                conductor,
                conductor_options: opts,
                hosts,
                hypervisor: fake.clone(),
            });
        }
        let mut quiet = |_line: String| {};
        cell_mapping::discover_hosts(&api, &cell_mapping::DiscoverOptions::default(), &mut quiet)
            .await
            .context("discover hosts")?;
        // Hosts added later (more fake computes, a new cell) are found by
        // the periodic discovery, safe to run next to the operator's CLI.
        let discovery = tokio::spawn(cell_mapping::discover::run_periodic(
            api.clone(),
            r.discovery.clone(),
        ));

        // The Compute API, its super-conductor and the global scheduler.
        api_super::seed_flavors(&api_db_url).await?;
        let compute = api_super::serve_compute(
            api_super::ComputeConfig {
                listen: r.compute_listen.clone(),
                serial_proxy_listen: r.serial_proxy_listen.clone(),
                novnc_proxy_listen: r.novnc_proxy_listen.clone(),
                cell_cache_refresh_ms: r.cell_cache_refresh_ms,
                http: r.http.clone(),
                // Placement shuffles limited queries here
                // (`randomize_allocation_candidates` above), so a sample
                // of the candidates is a random one: one-server requests
                // ask for 64 first, and in full only when that is not
                // enough (`SchedulerConfig::candidate_sample`).
                scheduler: api_super::scheduler::SchedulerConfig {
                    candidate_sample: REGION_CANDIDATE_SAMPLE,
                    ..Default::default()
                },
                ..Default::default()
            },
            api_super::ComputeDeps {
                api_database: api_db_url.clone(),
                auth: identity.identity.validator.clone(),
                policy: Arc::new(api_super::identity::policy::Policy::defaults()),
                // Placement runs in this process: the scheduler's
                // candidates and claims call it directly (no loopback HTTP).
                placement: Arc::new(local_placement::LocalPlacement::new(
                    placement.placement.clone(),
                    pcfg.randomize_allocation_candidates,
                    api_super::scheduler::placement::HttpPlacement::with_token(
                        &placement_url,
                        service_token.clone(),
                    )?,
                )),
                images: Some(Arc::new(image.lookup())),
            },
        )
        .await
        .context("start the Compute API")?;
        // A service listening on port 0 got its port only now: the catalog
        // names the bound address, so that catalog-driven clients (the
        // `openstack` CLI, loadtest by URL) find it.
        let bound = |listen: &str, addr: std::net::SocketAddr| {
            if listen.ends_with(":0") {
                addr.to_string()
            } else {
                listen.to_owned()
            }
        };
        identity
            .identity
            .set_endpoints(api_super::identity::EndpointsConfig {
                compute: format!("{scheme}://{}/v2.1", bound(&r.compute_listen, compute.addr)),
                placement: format!("{scheme}://{}", bound(&r.placement_listen, placement.addr)),
                image: format!("{scheme}://{}", bound(&r.image_listen, image.addr)),
            });
        Ok(Region {
            identity,
            placement,
            image,
            compute,
            api_db_url,
            cell0_db_url,
            cells,
            admin,
            member,
            service_token,
            scheme,
            tls_ca_file: r.tls_ca_file.clone(),
            _service_login: kept,
            discovery,
        })
    }

    /// The identity API's URL (`http(s)://<address>`, no version).
    pub fn identity_url(&self) -> String {
        format!("{}://{}", self.scheme, self.identity.addr)
    }

    /// The Compute API's URL (`…/v2.1`).
    pub fn compute_url(&self) -> String {
        format!("{}://{}/v2.1", self.scheme, self.compute.addr)
    }

    /// The placement API's URL.
    pub fn placement_url(&self) -> String {
        format!("{}://{}", self.scheme, self.placement.addr)
    }

    /// The image API's URL.
    pub fn image_url(&self) -> String {
        format!("{}://{}", self.scheme, self.image.addr)
    }

    /// `export OS_…` lines that let the `openstack` CLI act as `c`. The
    /// password is read from its file by the shell
    /// (`OS_PASSWORD="$(cat '<file>')"`), so it is never printed.
    pub fn openrc(&self, c: &Credentials) -> String {
        let password = match &c.password_file {
            Some(f) => format!("\"$(cat '{}')\"", f.display()),
            None => c.password.clone(),
        };
        let mut rc = format!(
            "export OS_AUTH_URL={}/v3\nexport OS_IDENTITY_API_VERSION=3\nexport OS_USERNAME={}\nexport OS_PASSWORD={password}\n\
             export OS_PROJECT_NAME={}\nexport OS_USER_DOMAIN_NAME=Default\nexport OS_PROJECT_DOMAIN_NAME=Default\n",
            self.identity_url(), c.username, c.project
        );
        if !self.tls_ca_file.as_os_str().is_empty() {
            rc.push_str(&format!(
                "export OS_CACERT='{}'\n",
                self.tls_ca_file.display()
            ));
        }
        rc
    }

    /// Stops the Compute API (closing its cell buses), the cells' agents
    /// and conductors.
    pub async fn shutdown(mut self) {
        self.discovery.abort();
        // The API layer first: it casts to the cells over their buses.
        self.compute.close().await;
        for c in std::mem::take(&mut self.cells) {
            for h in c.hosts {
                h.shutdown().await;
            }
            c.conductor.shutdown().await;
            c.bus.close().await;
        }
    }
}
