//! The libvirt driver: real guests through libvirtd (`qemu:///system`), or
//! libvirt's in-process test driver (`test:///default`) in tests.
//!
//! - [`config`]: the `[libvirt]` section (virt type, CPU mode, instances
//!   path, reserved resources, timeouts).
//! - [`guest`]: image properties checked, and the domain XML.
//! - [`images`]: the image cache (one download per image per host,
//!   verified) and `qemu-img`.
//! - [`host`]: the host's inventory from libvirt's node info and the
//!   instances path's filesystem.
//!
//! Each instance has a directory `<instances_path>/<uuid>` holding its
//! disks (`disk`, a qcow2 overlay on the cached base image grown to the
//! flavor's root size; `disk.eph0`; `disk.swap`), the kernel and ramdisk
//! of a direct kernel boot, `console.log` (the serial console) and
//! `instance.json` (what a rebuild needs). The domain's uuid is the
//! instance's and its name `instance-<uuid>`. A spawn that fails at any
//! step undoes what it did: no domain, directory or disk is left.
//!
//! libvirt's calls block: each runs on tokio's blocking pool.

mod build;
pub mod config;
pub mod config_drive;
pub mod guest;
pub mod host;
pub mod images;
pub mod traits;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric::ids::InstanceUuid;
use fabric::rpc::{power_state, FlavorResources};
use futures_util::future::BoxFuture;
use virt::connect::Connect;
use virt::domain::Domain;
use virt::sys;

use self::build::{blank_disks, Kept};
use self::config::{CpuMode, LibvirtSection, VirtType};
use self::images::{ImageCache, ImageSource, QemuImg};
use super::{Driver, DriverError, GuestOp, HostInventory, HostTraits, SpawnSpec};

const GIB: u64 = 1 << 30;
/// Tries, a second apart, at undoing a failed spawn
/// ([`LibvirtDriver::undo_spawn`]).
const UNDO_TRIES: u32 = 15;
const MIB: u64 = 1 << 20;

/// The libvirt driver of one host.
#[derive(Debug, Clone)]
pub struct LibvirtDriver {
    inner: Arc<Inner>,
}

struct Inner {
    /// The connection; reopened when found dead (libvirtd restarted).
    conn: std::sync::RwLock<Arc<Connect>>,
    /// Serial console ports taken by spawns not yet defined.
    serial_pending: std::sync::Mutex<std::collections::HashSet<u16>>,
    serial_ip: std::net::IpAddr,
    serial_ports: std::ops::RangeInclusive<u16>,
    cfg: LibvirtSection,
    virt_type: VirtType,
    cpu_mode: CpuMode,
    images: ImageCache,
    qemu_img: QemuImg,
}

impl Inner {
    /// The connection, reopened first when it is dead: a libvirtd that
    /// restarted closes every client's socket, and a closed connection
    /// never works again. One reopen per call that finds it dead; when
    /// that fails too the call fails with the dead connection's error and
    /// the next call tries again.
    fn conn(&self) -> Arc<Connect> {
        let c = self.conn.read().unwrap_or_else(|p| p.into_inner()).clone();
        if c.is_alive().unwrap_or(false) {
            return c;
        }
        match Connect::open(Some(&self.cfg.connection_uri)) {
            Ok(n) => {
                tracing::warn!(uri = %self.cfg.connection_uri, "the libvirt connection was lost; reconnected");
                let n = Arc::new(n);
                *self.conn.write().unwrap_or_else(|p| p.into_inner()) = n.clone();
                n
            }
            Err(e) => {
                tracing::warn!(uri = %self.cfg.connection_uri, error = %e.message(), "the libvirt connection is lost and cannot be reopened");
                c
            }
        }
    }
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LibvirtDriver")
            .field("uri", &self.cfg.connection_uri)
            .field("virt_type", &self.virt_type)
            .finish()
    }
}

fn hv(op: &'static str) -> impl FnOnce(virt::error::Error) -> DriverError {
    move |e| DriverError::OperationFailed {
        op,
        message: format!("hypervisor: {}", e.message()),
    }
}

fn is_no_domain(e: &virt::error::Error) -> bool {
    matches!(
        e.code(),
        virt::error::ErrorNumberEnum::Known(virt::error::ErrorNumber::NoDomain)
    )
}

impl LibvirtDriver {
    /// Opens `cfg.connection_uri`; images come from `source`.
    pub fn connect(
        cfg: LibvirtSection,
        source: Arc<dyn ImageSource>,
    ) -> Result<LibvirtDriver, DriverError> {
        let bad = |e: config::LibvirtConfigError| DriverError::Unavailable(e.to_string());
        let virt_type = cfg.virt_type().map_err(bad)?;
        let cpu_mode = cfg.cpu_mode().map_err(bad)?;
        let (serial_ip, serial_ports) = cfg.serial().map_err(bad)?;
        // libvirt prints every error on stderr unless told not to; ours
        // are returned and logged once where they are handled.
        virt::error::clear_error_callback();
        let conn = Connect::open(Some(&cfg.connection_uri)).map_err(|e| {
            DriverError::Unavailable(format!(
                "hypervisor: cannot connect to {}: {}",
                cfg.connection_uri,
                e.message()
            ))
        })?;
        let qemu_img = QemuImg::new(Duration::from_secs(cfg.qemu_img_timeout_secs.max(1)));
        let images = ImageCache::new(cfg.instances_path.join("_base"), source, qemu_img.clone());
        Ok(LibvirtDriver {
            inner: Arc::new(Inner {
                conn: std::sync::RwLock::new(Arc::new(conn)),
                serial_pending: Default::default(),
                serial_ip,
                serial_ports,
                cfg,
                virt_type,
                cpu_mode,
                images,
                qemu_img,
            }),
        })
    }

    /// The image cache (for the ageing pass and its counters).
    pub fn images(&self) -> &ImageCache {
        &self.inner.images
    }

    /// The images this host's instances were built from (each instance
    /// directory's `instance.json`): what the cache's ageing keeps.
    pub async fn images_in_use(&self) -> std::collections::HashSet<String> {
        let mut used = std::collections::HashSet::new();
        let Ok(mut rd) = tokio::fs::read_dir(&self.inner.cfg.instances_path).await else {
            return used;
        };
        while let Ok(Some(e)) = rd.next_entry().await {
            let Ok(b) = tokio::fs::read(e.path().join("instance.json")).await else {
                continue;
            };
            if let Ok(k) = serde_json::from_slice::<Kept>(&b) {
                // The formatted bases its ephemeral and swap disks sit on.
                for (_, kind, bytes) in blank_disks(k.ephemeral_gb, k.swap_mb) {
                    used.insert(kind.base_name(bytes));
                }
                used.insert(k.image_ref);
            }
        }
        used
    }

    /// One pass of the image cache's ageing: removes the base images no
    /// instance here was built from and unused for `min_age`; returns them.
    pub async fn age_images(&self, min_age: Duration) -> Vec<String> {
        let used = self.images_in_use().await;
        self.inner.images.age(min_age, &used).await
    }

    /// Runs [`LibvirtDriver::age_images`] every
    /// `image_cache_manager_interval`, when `remove_unused_base_images`
    /// says so (`None` otherwise). Kernels and ramdisks are copied into
    /// their instances' directories, so their base files age like any.
    pub fn start_image_ageing(&self) -> Option<tokio::task::JoinHandle<()>> {
        let cfg = &self.inner.cfg;
        if !cfg.remove_unused_base_images {
            return None;
        }
        let every = Duration::from_secs(cfg.image_cache_manager_interval.max(1));
        let min_age = Duration::from_secs(cfg.remove_unused_original_minimum_age_seconds);
        let me = self.clone();
        Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let removed = me.age_images(min_age).await;
                if !removed.is_empty() {
                    tracing::info!(count = removed.len(), "unused base images removed");
                }
            }
        }))
    }

    /// The instance's directory.
    pub fn instance_dir(&self, instance: InstanceUuid) -> PathBuf {
        self.inner.cfg.instances_path.join(instance.to_string())
    }

    /// Runs a blocking libvirt call on the blocking pool.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Inner) -> Result<T, DriverError> + Send + 'static,
    ) -> Result<T, DriverError> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(|e| DriverError::Unavailable(format!("libvirt call did not finish: {e}")))?
    }

    /// A free serial console port, held in `serial_pending` until the
    /// domain that takes it is defined ([`LibvirtDriver::release_port`]).
    async fn take_serial_port(&self) -> Result<u16, DriverError> {
        let used = self
            .blocking(|i| {
                let doms = i.conn().list_all_domains(0).map_err(|e| {
                    DriverError::SpawnFailed(format!("hypervisor: {}", e.message()))
                })?;
                Ok(doms
                    .iter()
                    .filter_map(|d| d.xml_desc(0).ok())
                    .filter_map(|x| guest::serial_of(&x))
                    .map(|a| a.port())
                    .collect::<std::collections::HashSet<u16>>())
            })
            .await?;
        let inner = &self.inner;
        let mut pending = inner
            .serial_pending
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let free = inner.serial_ports.clone().find(|p| {
            !used.contains(p)
                && !pending.contains(p)
                && std::net::TcpListener::bind((inner.serial_ip, *p)).is_ok()
        });
        let port = free.ok_or_else(|| {
            DriverError::SpawnFailed(format!(
                "hypervisor: no free serial console port in {:?}",
                inner.serial_ports
            ))
        })?;
        pending.insert(port);
        Ok(port)
    }

    fn release_port(&self, port: u16) {
        self.inner
            .serial_pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&port);
    }

    /// Destroys and undefines the domain (if any) and removes the
    /// instance's directory.
    async fn remove(&self, instance: InstanceUuid) -> Result<(), DriverError> {
        self.blocking(move |i| {
            match lookup(&i.conn(), instance) {
                Ok(Some(dom)) => undefine(&dom),
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            }
            .map_err(|e| DriverError::DestroyFailed(e.to_string()))
        })
        .await?;
        let dir = self.instance_dir(instance);
        match tokio::fs::remove_dir_all(&dir).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(DriverError::DestroyFailed(format!(
                "host disk: remove {}: {e}",
                dir.display()
            ))),
        }
    }

    /// Waits until the domain is shut off, up to `timeout`.
    async fn wait_shutoff(&self, instance: InstanceUuid, timeout: Duration) -> bool {
        let start = Instant::now();
        loop {
            if !matches!(
                self.power_state(instance),
                power_state::RUNNING | power_state::PAUSED
            ) {
                return true;
            }
            if start.elapsed() >= timeout {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Asks the guest to shut down (ACPI), waits up to `timeout`, then
    /// destroys it (Nova's clean shutdown).
    async fn shutdown_then_destroy(
        &self,
        instance: InstanceUuid,
        op: &'static str,
        timeout: Duration,
    ) -> Result<bool, DriverError> {
        let asked = self
            .blocking(move |i| {
                let dom = must(&i.conn(), instance)?;
                if !dom.is_active().map_err(hv(op))? {
                    return Ok(false);
                }
                dom.shutdown().map_err(hv(op))?;
                Ok(true)
            })
            .await?;
        if !asked {
            return Ok(true);
        }
        if self.wait_shutoff(instance, timeout).await {
            return Ok(true);
        }
        tracing::info!(%instance, ?timeout, "guest did not shut down in time; destroying it");
        self.blocking(move |i| {
            let dom = must(&i.conn(), instance)?;
            if dom.is_active().map_err(hv(op))? {
                dom.destroy().map_err(hv(op))?;
            }
            Ok(())
        })
        .await?;
        Ok(false)
    }

    async fn start(&self, instance: InstanceUuid, op: &'static str) -> Result<(), DriverError> {
        self.ensure_defined(instance).await?;
        self.blocking(move |i| {
            let dom = must(&i.conn(), instance)?;
            if !dom.is_active().map_err(hv(op))? {
                dom.create().map_err(hv(op))?;
            }
            Ok(())
        })
        .await
    }

    async fn run_op(&self, instance: InstanceUuid, op: &GuestOp) -> Result<(), DriverError> {
        let name = op.name();
        let cfg = &self.inner.cfg;
        match op {
            GuestOp::PowerOff => {
                let t = Duration::from_secs(cfg.shutdown_timeout_secs);
                self.shutdown_then_destroy(instance, name, t)
                    .await
                    .map(drop)
            }
            GuestOp::PowerOn | GuestOp::Resume => self.start(instance, name).await,
            GuestOp::Reboot { hard: false } => {
                let t = Duration::from_secs(cfg.wait_soft_reboot_seconds);
                self.shutdown_then_destroy(instance, name, t).await?;
                self.start(instance, name).await
            }
            GuestOp::Reboot { hard: true } => {
                self.ensure_defined(instance).await?;
                self.blocking(move |i| {
                    let dom = must(&i.conn(), instance)?;
                    if dom.is_active().map_err(hv(name))? {
                        dom.destroy().map_err(hv(name))?;
                    }
                    dom.create().map_err(hv(name))
                })
                .await
            }
            GuestOp::Pause => {
                self.blocking(move |i| must(&i.conn(), instance)?.suspend().map_err(hv(name)))
                    .await
            }
            GuestOp::Unpause => {
                self.blocking(move |i| must(&i.conn(), instance)?.resume().map_err(hv(name)))
                    .await
            }
            GuestOp::Suspend => {
                self.blocking(move |i| must(&i.conn(), instance)?.managed_save(0).map_err(hv(name)))
                    .await
            }
            GuestOp::Rebuild { image_ref } => self.rebuild(instance, image_ref).await,
        }
    }

    /// A start or hard reboot of a guest whose domain is gone (undefined
    /// by hand, or lost with the host's libvirt state) defines it again
    /// from the instance's directory, as Nova's hard reboot does.
    async fn ensure_defined(&self, instance: InstanceUuid) -> Result<(), DriverError> {
        let exists = self
            .blocking(move |i| lookup(&i.conn(), instance).map(|d| d.is_some()))
            .await?;
        if exists {
            return Ok(());
        }
        self.redefine(instance).await
    }

    async fn rebuild(&self, instance: InstanceUuid, image_ref: &str) -> Result<(), DriverError> {
        let dir = self.instance_dir(instance);
        let kept = Kept::read(&dir)
            .await
            .ok_or_else(|| DriverError::OperationFailed {
                op: "rebuild",
                message: format!("host disk: {} has no readable instance.json", dir.display()),
            })?;
        self.remove(instance).await?;
        let spec = SpawnSpec {
            instance,
            flavor: FlavorResources {
                vcpus: kept.vcpus,
                memory_mb: kept.memory_mb,
                root_gb: kept.root_gb,
                ephemeral_gb: kept.ephemeral_gb,
                swap_mb: kept.swap_mb,
                ..Default::default()
            },
            image_ref: image_ref.to_owned(),
            project_id: kept.project_id.clone(),
            guest: kept.guest(),
        };
        self.spawn_guest(&spec)
            .await
            .map_err(|e| DriverError::OperationFailed {
                op: "rebuild",
                message: e.to_string(),
            })
    }

    async fn spawn_guest(&self, spec: &SpawnSpec) -> Result<(), DriverError> {
        let instance = spec.instance;
        let dir = self.instance_dir(instance);
        // What an earlier attempt on this host may have left.
        self.remove(instance)
            .await
            .map_err(|e| DriverError::SpawnFailed(format!("clearing an earlier attempt: {e}")))?;
        let port = self.take_serial_port().await?;
        let res = async {
            let xml = self.build(spec, &dir, port).await?;
            self.blocking(move |i| {
                let dom = i.conn().define_domain_xml(&xml).map_err(|e| {
                    DriverError::SpawnFailed(format!("hypervisor: define: {}", e.message()))
                })?;
                dom.create().map_err(|e| {
                    DriverError::SpawnFailed(format!("hypervisor: start: {}", e.message()))
                })
            })
            .await
        }
        .await;
        self.release_port(port);
        if let Err(e) = &res {
            tracing::warn!(%instance, error = %e, "spawn failed; removing what it made");
            self.undo_spawn(instance).await;
        }
        res
    }

    /// Removes the domain and directory a failed spawn made. A libvirtd
    /// that is restarting (the usual cause of a define or start that
    /// fails mid-build) is waited for, a try a second for up to
    /// [`UNDO_TRIES`] seconds, so that the failure leaves no domain and no
    /// disk behind; past that, what is left is logged, and the next spawn
    /// or delete of the instance on this host removes it.
    async fn undo_spawn(&self, instance: InstanceUuid) {
        for attempt in 1..=UNDO_TRIES {
            match self.remove(instance).await {
                Ok(()) => return,
                Err(e) if attempt < UNDO_TRIES => {
                    tracing::warn!(%instance, attempt, error = %e, "could not undo the failed spawn yet; trying again");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e) => {
                    tracing::error!(%instance, error = %e, "could not undo the failed spawn; its domain or directory is left");
                }
            }
        }
    }
}

impl LibvirtDriver {
    /// This host's instances' domains (named `instance-<uuid>`) and their
    /// power states, in one listing.
    fn guests(&self) -> Result<Vec<(InstanceUuid, i32)>, DriverError> {
        let doms = self
            .inner
            .conn()
            .list_all_domains(0)
            .map_err(|e| DriverError::Unavailable(format!("hypervisor: {}", e.message())))?;
        Ok(doms
            .iter()
            .filter(|d| d.name().is_ok_and(|n| n.starts_with("instance-")))
            .filter_map(|d| {
                let uuid = d.uuid_string().ok()?.parse().ok()?;
                let state = d
                    .info()
                    .map_or(power_state::NOSTATE, |i| power(i.state.to_raw()));
                Some((uuid, state))
            })
            .collect())
    }
}

/// The last `max` bytes of `path` (empty when the guest wrote nothing yet).
async fn tail(path: &Path, max: usize) -> Result<Vec<u8>, DriverError> {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let mut f = match tokio::fs::File::open(path).await {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(DriverError::OperationFailed {
                op: "get_console_output",
                message: format!("host disk: {}: {e}", path.display()),
            })
        }
    };
    let io = |e: std::io::Error| DriverError::OperationFailed {
        op: "get_console_output",
        message: format!("host disk: {}: {e}", path.display()),
    };
    let len = f.metadata().await.map_err(io)?.len();
    let start = len.saturating_sub(max as u64);
    f.seek(std::io::SeekFrom::Start(start)).await.map_err(io)?;
    let mut buf = Vec::with_capacity((len - start) as usize);
    f.take(max as u64).read_to_end(&mut buf).await.map_err(io)?;
    Ok(buf)
}

async fn write_file(path: &Path, data: &[u8]) -> Result<(), DriverError> {
    tokio::fs::write(path, data)
        .await
        .map_err(|e| DriverError::SpawnFailed(format!("host disk: write {}: {e}", path.display())))
}

/// The XML of the running domain of `instance` (where its consoles
/// listen); `NotRunning` when it is not running.
fn running_xml(
    conn: &Connect,
    instance: InstanceUuid,
    op: &'static str,
) -> Result<String, DriverError> {
    let dom = must(conn, instance)?;
    if !dom.is_active().map_err(hv(op))? {
        return Err(DriverError::NotRunning(instance));
    }
    dom.xml_desc(0).map_err(hv(op))
}

/// The instance's domain, `None` when there is none.
fn lookup(conn: &Connect, instance: InstanceUuid) -> Result<Option<Domain>, DriverError> {
    match conn.lookup_domain_by_uuid_string(&instance.to_string()) {
        Ok(d) => Ok(Some(d)),
        Err(e) if is_no_domain(&e) => Ok(None),
        Err(e) => Err(DriverError::Unavailable(format!(
            "hypervisor: {}",
            e.message()
        ))),
    }
}

fn must(conn: &Connect, instance: InstanceUuid) -> Result<Domain, DriverError> {
    lookup(conn, instance)?.ok_or(DriverError::NotFound(instance))
}

fn undefine(dom: &Domain) -> Result<(), DriverError> {
    let fail =
        |e: virt::error::Error| DriverError::DestroyFailed(format!("hypervisor: {}", e.message()));
    if dom.is_active().map_err(fail)? {
        if let Err(e) = dom.destroy() {
            // Gone in between is fine.
            if dom.is_active().map_err(fail)? {
                return Err(fail(e));
            }
        }
    }
    // With its managed save (a suspended guest); our guests boot from
    // BIOS, so there is no NVRAM to remove.
    dom.undefine_flags(sys::VIR_DOMAIN_UNDEFINE_MANAGED_SAVE)
        .or_else(|e| if is_no_domain(&e) { Ok(()) } else { Err(e) })
        .map_err(fail)
}

/// libvirt's domain state as Nova's power state.
fn power(state: sys::virDomainState) -> i32 {
    match state {
        sys::VIR_DOMAIN_RUNNING | sys::VIR_DOMAIN_BLOCKED => power_state::RUNNING,
        sys::VIR_DOMAIN_PAUSED => power_state::PAUSED,
        sys::VIR_DOMAIN_SHUTDOWN | sys::VIR_DOMAIN_SHUTOFF => power_state::SHUTDOWN,
        sys::VIR_DOMAIN_CRASHED => power_state::CRASHED,
        sys::VIR_DOMAIN_PMSUSPENDED => power_state::SUSPENDED,
        _ => power_state::NOSTATE,
    }
}

impl Driver for LibvirtDriver {
    fn hypervisor_type(&self) -> &'static str {
        "QEMU"
    }

    fn hypervisor_version(&self) -> i64 {
        // libvirt encodes it as major * 1,000,000 + minor * 1,000 + micro,
        // as Nova does.
        self.inner.conn().hyp_version().map_or(0, i64::from)
    }

    fn supported_instances(&self) -> Vec<[String; 3]> {
        guest::ARCHITECTURES
            .iter()
            .map(|a| {
                [
                    (*a).to_owned(),
                    self.inner.virt_type.as_str().to_owned(),
                    "hvm".to_owned(),
                ]
            })
            .collect()
    }

    fn host_inventory(&self) -> Option<HostInventory> {
        match host::inventory(&self.inner.conn(), &self.inner.cfg) {
            Ok(inv) => Some(inv),
            Err(e) => {
                tracing::warn!(error = %e, "could not read the host's resources; using [resources]");
                None
            }
        }
    }

    fn traits(&self) -> Option<HostTraits> {
        match self.inner.conn().capabilities() {
            Ok(caps) => {
                let present: Vec<String> = traits::host_traits(&caps).into_iter().collect();
                let absent = traits::cpu_traits()
                    .into_iter()
                    .filter(|t| !present.contains(t))
                    .collect();
                Some(HostTraits { present, absent })
            }
            Err(e) => {
                tracing::warn!(error = %e.message(), "could not read the host's capabilities; no traits reported");
                None
            }
        }
    }

    fn spawn<'a>(&'a self, spec: &'a SpawnSpec) -> BoxFuture<'a, Result<(), DriverError>> {
        Box::pin(self.spawn_guest(spec))
    }

    fn destroy(&self, instance: InstanceUuid) -> BoxFuture<'_, Result<(), DriverError>> {
        Box::pin(self.remove(instance))
    }

    fn power_state(&self, instance: InstanceUuid) -> i32 {
        match lookup(&self.inner.conn(), instance) {
            Ok(Some(dom)) => dom
                .info()
                .map_or(power_state::NOSTATE, |i| power(i.state.to_raw())),
            _ => power_state::NOSTATE,
        }
    }

    fn list(&self) -> Result<Vec<InstanceUuid>, DriverError> {
        Ok(self.guests()?.into_iter().map(|(u, _)| u).collect())
    }

    fn host_uptime(&self) -> BoxFuture<'_, Result<String, DriverError>> {
        Box::pin(host::uptime())
    }

    fn console_output(
        &self,
        instance: InstanceUuid,
        max_bytes: usize,
    ) -> BoxFuture<'_, Result<Vec<u8>, DriverError>> {
        let log = self.instance_dir(instance).join("console.log");
        Box::pin(async move {
            if self
                .blocking(move |i| lookup(&i.conn(), instance))
                .await?
                .is_none()
            {
                return Err(DriverError::NotFound(instance));
            }
            tail(&log, max_bytes).await
        })
    }

    fn serial_console(
        &self,
        instance: InstanceUuid,
    ) -> BoxFuture<'_, Result<std::net::SocketAddr, DriverError>> {
        Box::pin(self.blocking(move |i| {
            let xml = running_xml(&i.conn(), instance, "get_serial_console")?;
            guest::serial_of(&xml).ok_or(DriverError::Unavailable(
                "the guest has no serial console on TCP (defined before consoles were built)"
                    .into(),
            ))
        }))
    }

    fn vnc_console(
        &self,
        instance: InstanceUuid,
    ) -> BoxFuture<'_, Result<std::net::SocketAddr, DriverError>> {
        Box::pin(self.blocking(move |i| {
            let xml = running_xml(&i.conn(), instance, "get_vnc_console")?;
            guest::vnc_of(&xml).ok_or(DriverError::Unavailable(
                "the guest has no VNC server with a port".into(),
            ))
        }))
    }

    /// From the domain's info (libvirt's `virDomainGetInfo`): its state,
    /// vCPUs and memory; the uptime and the config drive are the API's
    /// (it knows the launch time and the instance's config drive), disks
    /// and NICs are not read (none counted).
    fn diagnostics(
        &self,
        instance: InstanceUuid,
        standard: bool,
    ) -> BoxFuture<'_, Result<serde_json::Value, DriverError>> {
        let virt = self.inner.virt_type.as_str();
        Box::pin(self.blocking(move |i| {
            let dom = must(&i.conn(), instance)?;
            let info = dom.info().map_err(hv("get_diagnostics"))?;
            let state = power_state::name(power(info.state.to_raw()));
            Ok(if standard {
                let cpus: Vec<serde_json::Value> = (0..info.nr_virt_cpu)
                    .map(|id| serde_json::json!({"id": id, "time": null, "utilisation": null}))
                    .collect();
                serde_json::json!({
                    "state": state,
                    "driver": "libvirt",
                    "hypervisor": virt,
                    "hypervisor_os": "linux",
                    "num_cpus": info.nr_virt_cpu,
                    "num_disks": 0,
                    "num_nics": 0,
                    "cpu_details": cpus,
                    "disk_details": [],
                    "nic_details": [],
                    "memory_details": {"maximum": info.max_mem / 1024, "used": info.memory / 1024},
                })
            } else {
                serde_json::json!({
                    "cpu_time": info.cpu_time,
                    "memory": info.max_mem,
                    "memory-actual": info.memory,
                    "vcpus": info.nr_virt_cpu,
                })
            })
        }))
    }

    fn power_sync_interval(&self) -> Option<Duration> {
        Some(Duration::from_millis(
            self.inner.cfg.power_state_poll_ms.max(100),
        ))
    }

    fn power_states(&self) -> Result<Vec<(InstanceUuid, i32)>, DriverError> {
        self.guests()
    }

    fn perform<'a>(
        &'a self,
        instance: InstanceUuid,
        op: &'a GuestOp,
    ) -> BoxFuture<'a, Result<(), DriverError>> {
        Box::pin(self.run_op(instance, op))
    }
}
