//! The libvirt driver: a stub behind the `libvirt` cargo feature (not
//! compiled by default). Every call answers "not built"; the real driver
//! will use the `virt` crate (libvirt bindings), which needs the libvirt
//! development libraries on the build machine.

use fabric::ids::InstanceUuid;
use fabric::rpc::power_state;
use futures_util::future::BoxFuture;

use super::{Driver, DriverError, SpawnSpec};

/// The libvirt driver (stub).
#[derive(Debug, Default)]
pub struct LibvirtDriver;

const NOT_BUILT: &str = "the libvirt driver is not built yet";

impl Driver for LibvirtDriver {
    fn hypervisor_type(&self) -> &'static str {
        "QEMU"
    }
    fn supported_instances(&self) -> Vec<[String; 3]> {
        Vec::new()
    }
    fn spawn<'a>(&'a self, _: &'a SpawnSpec) -> BoxFuture<'a, Result<(), DriverError>> {
        Box::pin(async { Err(DriverError::Unavailable(NOT_BUILT.into())) })
    }
    fn destroy(&self, _: InstanceUuid) -> BoxFuture<'_, Result<(), DriverError>> {
        Box::pin(async { Err(DriverError::Unavailable(NOT_BUILT.into())) })
    }
    fn power_state(&self, _: InstanceUuid) -> i32 {
        power_state::NOSTATE
    }
    fn list(&self) -> Result<Vec<InstanceUuid>, DriverError> {
        Err(DriverError::Unavailable(NOT_BUILT.into()))
    }
}
