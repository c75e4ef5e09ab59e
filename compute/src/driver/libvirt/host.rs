//! The host's inventory, read from the host (Nova's libvirt driver does
//! the same): VCPU from libvirt's node info, MEMORY_MB from its memory,
//! DISK_GB from the filesystem of the instances path; each less what
//! `[libvirt] reserved_host_*` keeps for the host.

use std::path::Path;

use virt::connect::Connect;

use super::config::LibvirtSection;
use crate::driver::{DriverError, HostInventory};

/// Total bytes of the filesystem holding `path` (its nearest existing
/// ancestor when it does not exist yet).
pub fn filesystem_bytes(path: &Path) -> std::io::Result<u64> {
    let mut p = path;
    loop {
        match rustix::fs::statvfs(p) {
            Ok(s) => return Ok(s.f_blocks.saturating_mul(s.f_frsize)),
            Err(rustix::io::Errno::NOENT) => match p.parent() {
                Some(parent) => p = parent,
                None => return Err(std::io::ErrorKind::NotFound.into()),
            },
            Err(e) => return Err(e.into()),
        }
    }
}

/// The host's inventory.
pub fn inventory(conn: &Connect, cfg: &LibvirtSection) -> Result<HostInventory, DriverError> {
    let node = conn
        .node_info()
        .map_err(|e| DriverError::Unavailable(format!("hypervisor: node info: {}", e.message())))?;
    let disk = filesystem_bytes(&cfg.instances_path).map_err(|e| {
        DriverError::Unavailable(format!("host disk: {}: {e}", cfg.instances_path.display()))
    })?;
    let reserved_disk_gb = (cfg.reserved_host_disk_mb.max(0) + 1023) / 1024;
    Ok(HostInventory {
        vcpus: (i64::from(node.cpus) - cfg.reserved_host_cpus.max(0)).max(0),
        memory_mb: (node.memory as i64 / 1024 - cfg.reserved_host_memory_mb.max(0)).max(0),
        disk_gb: ((disk / (1 << 30)) as i64 - reserved_disk_gb).max(0),
    })
}

/// How long `uptime` may take.
const UPTIME_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What `env LANG=C uptime` prints on this host, as Nova's libvirt driver
/// answers `get_host_uptime` (the trailing newline removed).
pub async fn uptime() -> Result<String, DriverError> {
    let failed = |message: String| DriverError::OperationFailed {
        op: "get_host_uptime",
        message,
    };
    let run = tokio::process::Command::new("uptime")
        .env("LANG", "C")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(UPTIME_TIMEOUT, run)
        .await
        .map_err(|_| failed(format!("uptime did not answer in {UPTIME_TIMEOUT:?}")))?
        .map_err(|e| failed(format!("could not run uptime: {e}")))?;
    if !out.status.success() {
        return Err(failed(format!(
            "uptime exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim_end().to_owned())
}
