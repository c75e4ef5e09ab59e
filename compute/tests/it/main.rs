//! Integration tests of the compute agent without a database: the fake
//! driver, inventory reporting to the real placement API, and a fleet of
//! fake hosts against a stub conductor (the flows through the real
//! conductor and cell database are tested in `cell-conductor`'s tests).

mod abandon;
mod fake_driver;
mod fleet;
mod libvirt;
mod libvirt_qemu;
mod placement_e2e;
mod retry;
mod stub;
