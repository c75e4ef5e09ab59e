//! The hypervisor driver: a trait, the [`fake`] driver (hundreds of hosts in
//! one process; automatic and explicit modes) and the [`libvirt`] driver
//! (real guests through libvirtd; built by default).

pub mod fake;
pub mod libvirt;

use std::fmt;

use fabric::ids::InstanceUuid;
use fabric::rpc::FlavorResources;
use futures_util::future::BoxFuture;

/// What the driver needs to spawn a guest.
#[derive(Debug, Clone, PartialEq)]
pub struct SpawnSpec {
    /// The instance.
    pub instance: InstanceUuid,
    /// Its flavor's resources.
    pub flavor: FlavorResources,
    /// Its image.
    pub image_ref: String,
    /// Its project.
    pub project_id: String,
    /// What the guest is told of itself; `None` from a sender older than
    /// the config drive (no config drive then).
    pub guest: Option<fabric::rpc::GuestData>,
}

impl SpawnSpec {
    /// The config drive's files, when the guest gets one
    /// ([`crate::config_drive::files`]).
    pub fn config_drive(&self) -> Result<Option<crate::config_drive::Files>, DriverError> {
        match &self.guest {
            Some(g) if g.config_drive => {
                crate::config_drive::files(self.instance, &self.project_id, g)
                    .map(Some)
                    .map_err(|e| DriverError::SpawnFailed(format!("config drive: {e}")))
            }
            _ => Ok(None),
        }
    }
}

/// Why a driver call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DriverError {
    /// The hypervisor could not spawn the guest.
    #[error("spawn failed: {0}")]
    SpawnFailed(String),
    /// The hypervisor could not destroy the guest.
    #[error("destroy failed: {0}")]
    DestroyFailed(String),
    /// The driver cannot work here.
    #[error("driver unavailable: {0}")]
    Unavailable(String),
    /// The guest is not on this host.
    #[error("instance {0} not found on this host")]
    NotFound(InstanceUuid),
    /// The guest is here but not running (what it was asked needs it).
    #[error("the guest of instance {0} is not running")]
    NotRunning(InstanceUuid),
    /// The hypervisor could not carry out a power or rebuild operation.
    #[error("{op} failed: {message}")]
    OperationFailed {
        /// The operation (`power_off`, `reboot`, …).
        op: &'static str,
        /// The hypervisor's message.
        message: String,
    },
}

/// What a host offers, read from the host itself (what is left for
/// guests once the host's reserve is taken off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostInventory {
    /// VCPU.
    pub vcpus: i64,
    /// MEMORY_MB.
    pub memory_mb: i64,
    /// DISK_GB.
    pub disk_gb: i64,
}

/// A host's traits ([`Driver::traits`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostTraits {
    /// What the host has.
    pub present: Vec<String>,
    /// What the driver decides on and the host lacks: removed if set.
    pub absent: Vec<String>,
}

/// A power or rebuild operation on an existing guest.
#[derive(Debug, Clone, PartialEq)]
pub enum GuestOp {
    /// Shut the guest down (`os-stop`).
    PowerOff,
    /// Start the guest (`os-start`).
    PowerOn,
    /// Reboot; `hard` resets the guest instead of asking it.
    Reboot {
        /// Hard reboot.
        hard: bool,
    },
    /// Pause (the guest stays in memory, its CPUs stop).
    Pause,
    /// Unpause.
    Unpause,
    /// Suspend (the guest's memory is saved).
    Suspend,
    /// Resume a suspended guest.
    Resume,
    /// Recreate the guest's disk from an image and start it again.
    Rebuild {
        /// The image.
        image_ref: String,
    },
}

impl GuestOp {
    /// Its name in errors (as the driver method upstream).
    pub fn name(&self) -> &'static str {
        match self {
            GuestOp::PowerOff => "power_off",
            GuestOp::PowerOn => "power_on",
            GuestOp::Reboot { .. } => "reboot",
            GuestOp::Pause => "pause",
            GuestOp::Unpause => "unpause",
            GuestOp::Suspend => "suspend",
            GuestOp::Resume => "resume",
            GuestOp::Rebuild { .. } => "rebuild",
        }
    }
}

/// One host's hypervisor. Object safe: an agent holds an `Arc<dyn Driver>`.
pub trait Driver: Send + Sync + fmt::Debug {
    /// `compute_nodes.hypervisor_type` (`fake`, `QEMU`).
    fn hypervisor_type(&self) -> &'static str;

    /// `compute_nodes.hypervisor_version`, as Nova encodes it
    /// (`major * 1_000_000 + minor * 1_000 + patch`).
    fn hypervisor_version(&self) -> i64 {
        1_000
    }

    /// The guests this hypervisor can run: `(architecture, hypervisor
    /// type, vm mode)` triples (what `ImagePropertiesFilter` matches an
    /// image's `hw_architecture`, `img_hv_type` and `hw_vm_mode` against).
    fn supported_instances(&self) -> Vec<[String; 3]>;

    /// The host's resources as the hypervisor reads them; `None` (the
    /// fake driver): the configured `[resources]` are reported.
    fn host_inventory(&self) -> Option<HostInventory> {
        None
    }

    /// Creates and starts the guest; returns once it runs.
    fn spawn<'a>(&'a self, spec: &'a SpawnSpec) -> BoxFuture<'a, Result<(), DriverError>>;

    /// Stops and removes the guest; a guest that does not exist is fine.
    fn destroy(&self, instance: InstanceUuid) -> BoxFuture<'_, Result<(), DriverError>>;

    /// The guest's power state ([`fabric::rpc::power_state`]).
    fn power_state(&self, instance: InstanceUuid) -> i32;

    /// The traits the host's provider carries (`HW_CPU_X86_*`,
    /// `COMPUTE_*`) and those the driver manages and takes away when the
    /// host lacks them; `None` (the fake driver): the agent leaves the
    /// provider's traits alone. Traits set by others (an operator's
    /// `CUSTOM_*`) stay.
    fn traits(&self) -> Option<HostTraits> {
        None
    }

    /// How often the power states of this host's guests are read and
    /// synced ([`crate::power_sync`]); `None` (the fake driver): never,
    /// since nothing but the agent changes a fake guest.
    fn power_sync_interval(&self) -> Option<std::time::Duration> {
        None
    }

    /// Every guest on this host with its power state (may block: the sync
    /// calls it on the blocking pool).
    fn power_states(&self) -> Result<Vec<(InstanceUuid, i32)>, DriverError> {
        Ok(self
            .list()?
            .into_iter()
            .map(|u| (u, self.power_state(u)))
            .collect())
    }

    /// The guests on this host. An error when the hypervisor cannot say
    /// (unreachable, not built): never an empty list in its place, since
    /// the start-up reconciliation would take every instance's guest for
    /// gone.
    fn list(&self) -> Result<Vec<InstanceUuid>, DriverError>;

    /// What `uptime` prints on this host (Nova's `get_host_uptime`).
    /// Drivers without one answer [`DriverError::Unavailable`], as Nova's
    /// fake driver does.
    fn host_uptime(&self) -> BoxFuture<'_, Result<String, DriverError>> {
        Box::pin(async {
            Err(DriverError::Unavailable(
                "the host's uptime is not reported by this driver".into(),
            ))
        })
    }

    /// The guest's console log, at most its last `max_bytes` bytes.
    /// Drivers without one answer [`DriverError::Unavailable`].
    fn console_output(
        &self,
        instance: InstanceUuid,
        max_bytes: usize,
    ) -> BoxFuture<'_, Result<Vec<u8>, DriverError>> {
        let _ = (instance, max_bytes);
        Box::pin(async {
            Err(DriverError::Unavailable(
                "console output is not supported by this driver".into(),
            ))
        })
    }

    /// Where the guest's serial console listens (raw TCP, for the console
    /// proxy). Drivers without one answer [`DriverError::Unavailable`].
    fn serial_console(
        &self,
        instance: InstanceUuid,
    ) -> BoxFuture<'_, Result<std::net::SocketAddr, DriverError>> {
        let _ = instance;
        unsupported("serial consoles")
    }

    /// Where the guest's VNC server listens on this host (for the noVNC
    /// proxy); `Unavailable` for drivers without one.
    fn vnc_console(
        &self,
        instance: InstanceUuid,
    ) -> BoxFuture<'_, Result<std::net::SocketAddr, DriverError>> {
        let _ = instance;
        unsupported("VNC consoles")
    }

    /// The running guest's diagnostics, a JSON object: `standard`, Nova's
    /// 2.48 fields the driver knows (`state`, `driver`, `cpu_details`,
    /// …); else the driver's free-form dict. Drivers without them answer
    /// [`DriverError::Unavailable`].
    fn diagnostics(
        &self,
        instance: InstanceUuid,
        standard: bool,
    ) -> BoxFuture<'_, Result<serde_json::Value, DriverError>> {
        let _ = (instance, standard);
        unsupported("diagnostics")
    }

    /// Runs `op` on an existing guest; returns once it is done. Drivers
    /// that do not implement an operation answer [`DriverError::Unavailable`].
    fn perform<'a>(
        &'a self,
        instance: InstanceUuid,
        op: &'a GuestOp,
    ) -> BoxFuture<'a, Result<(), DriverError>> {
        let _ = instance;
        Box::pin(async move {
            Err(DriverError::Unavailable(format!(
                "{} is not supported by this driver",
                op.name()
            )))
        })
    }
}

/// The default answer of a driver without `what`.
fn unsupported<T: Send + 'static>(what: &str) -> BoxFuture<'static, Result<T, DriverError>> {
    let e = DriverError::Unavailable(format!("{what} are not supported by this driver"));
    Box::pin(async move { Err(e) })
}
