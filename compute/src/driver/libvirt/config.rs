//! `[libvirt]`: how a libvirt host is driven (Nova's `[libvirt]` options
//! where they exist, with the same names and meanings).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `[libvirt]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LibvirtSection {
    /// The libvirt connection: `qemu:///system` in production,
    /// `test:///default` for libvirt's in-process test driver.
    pub connection_uri: String,
    /// `qemu` (TCG, software emulation) or `kvm`: the domain type.
    pub virt_type: String,
    /// `none`, `host-model` or `host-passthrough`; empty: Nova's default
    /// (`host-model` for kvm, `none` for qemu).
    pub cpu_mode: String,
    /// Where each instance's directory (disks, console log) and the image
    /// cache (`_base`) live.
    pub instances_path: PathBuf,
    /// MEMORY_MB kept for the host (Nova's `reserved_host_memory_mb`).
    pub reserved_host_memory_mb: i64,
    /// DISK_GB kept for the host (`reserved_host_disk_mb`, rounded up).
    pub reserved_host_disk_mb: i64,
    /// VCPU kept for the host (`reserved_host_cpus`).
    pub reserved_host_cpus: i64,
    /// Seconds a soft reboot waits for the guest to shut down before it
    /// is reset (Nova's `wait_soft_reboot_seconds`).
    pub wait_soft_reboot_seconds: u64,
    /// Seconds a stop waits for the guest to shut down before it is
    /// destroyed (Nova's `shutdown_timeout`).
    pub shutdown_timeout_secs: u64,
    /// The address guests' serial consoles listen on, for the console
    /// proxy (Nova's `[serial_console] proxyclient_address`).
    pub serial_listen: String,
    /// The TCP ports serial consoles take, `first:last` (Nova's
    /// `[serial_console] port_range`).
    pub serial_port_range: String,
    /// Milliseconds between two looks at the guests' power states: how
    /// soon a guest that stopped by itself is seen (libvirt's lifecycle
    /// events, by polling; see `compute::power_sync`).
    pub power_state_poll_ms: u64,
    /// Whether base images no instance here uses are removed (Nova's
    /// `[image_cache] remove_unused_base_images`).
    pub remove_unused_base_images: bool,
    /// How long a base image must have gone unused before it is removed
    /// (Nova's `remove_unused_original_minimum_age_seconds`).
    pub remove_unused_original_minimum_age_seconds: u64,
    /// Seconds between two passes of the image cache's ageing (Nova's
    /// `image_cache_manager_interval`).
    pub image_cache_manager_interval: u64,
    /// Seconds a download of one image from the image service may take.
    pub image_download_timeout_secs: u64,
    /// Seconds a `qemu-img` call may take.
    pub qemu_img_timeout_secs: u64,
}

impl Default for LibvirtSection {
    fn default() -> Self {
        Self {
            connection_uri: "qemu:///system".to_owned(),
            virt_type: "kvm".to_owned(),
            cpu_mode: String::new(),
            instances_path: PathBuf::from("/var/lib/compute/instances"),
            reserved_host_memory_mb: 512,
            reserved_host_disk_mb: 0,
            reserved_host_cpus: 0,
            wait_soft_reboot_seconds: 120,
            shutdown_timeout_secs: 60,
            serial_listen: "127.0.0.1".to_owned(),
            serial_port_range: "10000:20000".to_owned(),
            power_state_poll_ms: 2000,
            remove_unused_base_images: true,
            remove_unused_original_minimum_age_seconds: 86_400,
            image_cache_manager_interval: 2400,
            image_download_timeout_secs: 600,
            qemu_img_timeout_secs: 120,
        }
    }
}

/// The domain type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VirtType {
    /// Software emulation (TCG).
    Qemu,
    /// Hardware virtualisation.
    Kvm,
}

impl VirtType {
    /// `<domain type='…'>`.
    pub fn as_str(self) -> &'static str {
        match self {
            VirtType::Qemu => "qemu",
            VirtType::Kvm => "kvm",
        }
    }
}

/// `<cpu mode='…'>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuMode {
    /// No `<cpu>` element: the hypervisor's default model.
    None,
    /// The host's model, as libvirt names it.
    HostModel,
    /// The host's CPU itself.
    HostPassthrough,
}

/// What is wrong with a `[libvirt]` section.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[libvirt] {option} = {value:?}: {why}")]
pub struct LibvirtConfigError {
    /// The option.
    pub option: &'static str,
    /// Its value.
    pub value: String,
    /// What it may be.
    pub why: &'static str,
}

impl LibvirtSection {
    /// The checked domain type.
    pub fn virt_type(&self) -> Result<VirtType, LibvirtConfigError> {
        match self.virt_type.as_str() {
            "qemu" => Ok(VirtType::Qemu),
            "kvm" => Ok(VirtType::Kvm),
            other => Err(LibvirtConfigError {
                option: "virt_type",
                value: other.to_owned(),
                why: "must be qemu or kvm (lxc, parallels and xen are not built)",
            }),
        }
    }

    /// The checked serial console address and port range.
    pub fn serial(
        &self,
    ) -> Result<(std::net::IpAddr, std::ops::RangeInclusive<u16>), LibvirtConfigError> {
        let ip = self.serial_listen.parse().map_err(|_| LibvirtConfigError {
            option: "serial_listen",
            value: self.serial_listen.clone(),
            why: "must be an IP address",
        })?;
        let bad = || LibvirtConfigError {
            option: "serial_port_range",
            value: self.serial_port_range.clone(),
            why: "must be first:last, two ports with first <= last",
        };
        let (a, b) = self.serial_port_range.split_once(':').ok_or_else(bad)?;
        let (a, b): (u16, u16) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
        if a == 0 || a > b {
            return Err(bad());
        }
        Ok((ip, a..=b))
    }

    /// The checked CPU mode, with Nova's default per domain type.
    pub fn cpu_mode(&self) -> Result<CpuMode, LibvirtConfigError> {
        match self.cpu_mode.as_str() {
            "" => Ok(match self.virt_type()? {
                VirtType::Kvm => CpuMode::HostModel,
                VirtType::Qemu => CpuMode::None,
            }),
            "none" => Ok(CpuMode::None),
            "host-model" => Ok(CpuMode::HostModel),
            "host-passthrough" => Ok(CpuMode::HostPassthrough),
            other => Err(LibvirtConfigError {
                option: "cpu_mode",
                value: other.to_owned(),
                why: "must be none, host-model or host-passthrough (custom is not built)",
            }),
        }
    }
}
