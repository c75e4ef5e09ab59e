//! The hypervisor driver: a trait, the [`fake`] driver (hundreds of hosts in
//! one process; automatic and explicit modes) and, behind the `libvirt`
//! cargo feature (off by default), a stub of the libvirt driver.

pub mod fake;
#[cfg(feature = "libvirt")]
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
}

/// One host's hypervisor. Object safe: an agent holds an `Arc<dyn Driver>`.
pub trait Driver: Send + Sync + fmt::Debug {
    /// `compute_nodes.hypervisor_type` (`fake`, `QEMU`).
    fn hypervisor_type(&self) -> &'static str;

    /// Creates and starts the guest; returns once it runs.
    fn spawn<'a>(&'a self, spec: &'a SpawnSpec) -> BoxFuture<'a, Result<(), DriverError>>;

    /// Stops and removes the guest; a guest that does not exist is fine.
    fn destroy(&self, instance: InstanceUuid) -> BoxFuture<'_, Result<(), DriverError>>;

    /// The guest's power state ([`fabric::rpc::power_state`]).
    fn power_state(&self, instance: InstanceUuid) -> i32;

    /// The guests on this host.
    fn list(&self) -> Vec<InstanceUuid>;
}
