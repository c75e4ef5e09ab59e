//! The config drive as an ISO 9660 image (Nova's `config_drive_format =
//! iso9660`), made by `genisoimage` as Nova makes it: Joliet and Rock
//! Ridge, volume label `config-2`. Writing ISO 9660 by hand would be a
//! second, untested filesystem writer; Debian's genisoimage is what Nova
//! runs (`scripts/install-libvirt.sh --daemon` installs it).

use std::path::Path;
use std::time::Duration;

use crate::config_drive::LABEL;
use crate::driver::DriverError;

/// The tool, as Nova's `mkisofs_cmd` default.
pub const MKISOFS: &str = "genisoimage";

/// Writes `files` (path inside the drive, contents) into a scratch
/// directory beside `out`, makes the ISO image `out` from it, and removes
/// the scratch directory, whatever happens. Failures name the host.
pub async fn make_iso(
    files: &[(String, Vec<u8>)],
    out: &Path,
    timeout: Duration,
) -> Result<(), DriverError> {
    let scratch = out.with_extension("tree");
    let res = write_and_make(files, &scratch, out, timeout).await;
    let _ = tokio::fs::remove_dir_all(&scratch).await;
    res
}

async fn write_and_make(
    files: &[(String, Vec<u8>)],
    scratch: &Path,
    out: &Path,
    timeout: Duration,
) -> Result<(), DriverError> {
    let disk = |what: String| DriverError::SpawnFailed(format!("host disk: config drive: {what}"));
    let _ = tokio::fs::remove_dir_all(scratch).await;
    for (rel, data) in files {
        // Paths come from `crate::config_drive::files`: relative, no `..`.
        if rel.starts_with('/') || rel.split('/').any(|c| c == ".." || c.is_empty()) {
            return Err(disk(format!("refusing the path {rel:?}")));
        }
        let p = scratch.join(rel);
        if let Some(parent) = p.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| disk(format!("create {}: {e}", parent.display())))?;
        }
        tokio::fs::write(&p, data)
            .await
            .map_err(|e| disk(format!("write {}: {e}", p.display())))?;
    }
    let tool =
        |why: String| DriverError::SpawnFailed(format!("host: config drive: {MKISOFS}: {why}"));
    let run = tokio::process::Command::new(MKISOFS)
        .arg("-o")
        .arg(out)
        .args([
            "-ldots",
            "-allow-lowercase",
            "-allow-multidot",
            "-l",
            "-publisher",
            "cells",
            "-quiet",
            "-J",
            "-r",
            "-V",
            LABEL,
        ])
        .arg(scratch)
        .kill_on_drop(true)
        .output();
    let res = match tokio::time::timeout(timeout, run).await {
        Err(_) => Err(tool(format!("no answer in {timeout:?}"))),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(tool("not installed (Debian's genisoimage package)".into()))
        }
        Ok(Err(e)) => Err(tool(e.to_string())),
        Ok(Ok(o)) if !o.status.success() => {
            Err(tool(String::from_utf8_lossy(&o.stderr).trim().to_owned()))
        }
        Ok(Ok(_)) => Ok(()),
    };
    if res.is_err() {
        let _ = tokio::fs::remove_file(out).await;
    }
    res
}
