//! A guest's files and its domain: [`LibvirtDriver::build`] makes the
//! instance directory (disks, kernel and ramdisk, config drive,
//! `instance.json`) and [`LibvirtDriver::domain_xml`] defines the domain
//! from what that directory holds, so the same XML comes from a spawn
//! and from a redefinition ([`LibvirtDriver::redefine`]: a hard reboot
//! or a start whose domain is gone, as Nova's hard reboot rebuilds the
//! domain from the instance's disks).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fabric::ids::InstanceUuid;
use serde::{Deserialize, Serialize};

use super::guest::{domain_name, Bus, DiskSpec, DomainSpec, GuestProps};
use super::images::{self, Blank};
use super::{config_drive, write_file, LibvirtDriver, GIB, MIB};
use crate::driver::{DriverError, SpawnSpec};

/// What a rebuild or a redefinition needs of the spawn (kept in
/// `instance.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Kept {
    pub(super) vcpus: i64,
    pub(super) memory_mb: i64,
    pub(super) root_gb: i64,
    pub(super) ephemeral_gb: i64,
    pub(super) swap_mb: i64,
    pub(super) image_ref: String,
    /// The project, and the guest's data (its `GuestData`, protobuf in
    /// base64): what a rebuild makes the config drive from again.
    #[serde(default)]
    pub(super) project_id: String,
    #[serde(default)]
    pub(super) guest: Option<String>,
    /// The image's properties at spawn (the domain's shape, read again
    /// without the image service, as Nova keeps the image's metadata).
    #[serde(default)]
    pub(super) properties: BTreeMap<String, String>,
}

impl Kept {
    pub(super) fn guest(&self) -> Option<fabric::rpc::GuestData> {
        use base64::Engine as _;
        use prost::Message as _;
        let b = base64::engine::general_purpose::STANDARD
            .decode(self.guest.as_deref()?)
            .ok()?;
        fabric::rpc::GuestData::decode(b.as_slice()).ok()
    }

    /// `instance.json` of `dir`, when there is a readable one.
    pub(super) async fn read(dir: &Path) -> Option<Kept> {
        let b = tokio::fs::read(dir.join("instance.json")).await.ok()?;
        serde_json::from_slice(&b).ok()
    }
}

/// The flavor's ephemeral and swap disks: file name, kind, bytes.
pub(super) fn blank_disks(ephemeral_gb: i64, swap_mb: i64) -> Vec<(&'static str, Blank, u64)> {
    [
        (
            "disk.eph0",
            Blank::Ephemeral,
            ephemeral_gb.max(0) as u64 * GIB,
        ),
        ("disk.swap", Blank::Swap, swap_mb.max(0) as u64 * MIB),
    ]
    .into_iter()
    .filter(|d| d.2 > 0)
    .collect()
}

impl LibvirtDriver {
    /// Makes `spec`'s instance directory `dir` and returns its domain XML.
    pub(super) async fn build(
        &self,
        spec: &SpawnSpec,
        dir: &Path,
        serial_port: u16,
    ) -> Result<String, DriverError> {
        let inner = &self.inner;
        let img = |e: images::ImageError| DriverError::SpawnFailed(crate::error::chain(&e));
        let meta = inner.images.meta(&spec.image_ref).await.map_err(img)?;
        let props = GuestProps::from_properties(&meta.properties)
            .map_err(|e| DriverError::SpawnFailed(e.to_string()))?;
        tokio::fs::create_dir_all(dir).await.map_err(|e| {
            DriverError::SpawnFailed(format!("host disk: create {}: {e}", dir.display()))
        })?;
        let f = &spec.flavor;
        let kept = Kept {
            vcpus: f.vcpus,
            memory_mb: f.memory_mb,
            root_gb: f.root_gb,
            ephemeral_gb: f.ephemeral_gb,
            swap_mb: f.swap_mb,
            image_ref: spec.image_ref.clone(),
            project_id: spec.project_id.clone(),
            guest: spec.guest.as_ref().map(|g| {
                use base64::Engine as _;
                use prost::Message as _;
                base64::engine::general_purpose::STANDARD.encode(g.encode_to_vec())
            }),
            properties: meta.properties.clone(),
        };
        write_file(
            &dir.join("instance.json"),
            &serde_json::to_vec(&kept).unwrap_or_default(),
        )
        .await?;
        // The root disk: an overlay on the cached base, grown to the
        // flavor's root size (or the image's own size for root_gb 0).
        let base = inner.images.fetch(&meta, true).await.map_err(img)?;
        let virtual_size = base.disk.as_ref().map_or(0, |d| d.virtual_size);
        let root = if f.root_gb > 0 {
            f.root_gb as u64 * GIB
        } else {
            virtual_size
        };
        if root < virtual_size {
            return Err(DriverError::SpawnFailed(format!(
                "image {}: its virtual size ({virtual_size} bytes) is larger than the flavor's root disk ({root} bytes)",
                meta.id
            )));
        }
        inner
            .qemu_img
            .overlay(&base.path, &meta.disk_format, &dir.join("disk"), root)
            .await
            .map_err(img)?;
        // Ephemeral (ext4) and swap: overlays on formatted bases, as Nova.
        for (name, kind, bytes) in blank_disks(f.ephemeral_gb, f.swap_mb) {
            let base = inner.images.blank_base(kind, bytes).await.map_err(img)?;
            inner
                .qemu_img
                .overlay(&base, "raw", &dir.join(name), bytes)
                .await
                .map_err(img)?;
        }
        // Direct kernel boot: the kernel and ramdisk are copied next to the
        // disks, so the cache may age its base files out from under no one.
        for (id, name) in [(&props.kernel_id, "kernel"), (&props.ramdisk_id, "ramdisk")] {
            if let Some(id) = id {
                let m = inner.images.meta(id).await.map_err(img)?;
                let c = inner.images.fetch(&m, false).await.map_err(img)?;
                tokio::fs::copy(&c.path, dir.join(name))
                    .await
                    .map_err(|e| {
                        DriverError::SpawnFailed(format!("host disk: copy the {name}: {e}"))
                    })?;
            }
        }
        // The config drive, a CD-ROM after the disks.
        let config_drive = spec.config_drive()?;
        if config_drive.is_none() && props.config_drive_mandatory {
            return Err(DriverError::SpawnFailed(format!(
                "image {}: img_config_drive=mandatory, but the build brings no config drive",
                meta.id
            )));
        }
        if let Some(files) = config_drive {
            let iso = dir.join("disk.config");
            config_drive::make_iso(&files, &iso, inner.qemu_img.timeout()).await?;
        }
        Ok(self.domain_xml(spec.instance, &kept, props, dir, serial_port))
    }

    /// The domain XML of the instance whose directory `dir` holds what
    /// [`LibvirtDriver::build`] made: the root disk, ephemeral and swap
    /// (when the flavor has them), the config drive, kernel and ramdisk
    /// (when there).
    fn domain_xml(
        &self,
        instance: InstanceUuid,
        kept: &Kept,
        props: GuestProps,
        dir: &Path,
        serial_port: u16,
    ) -> String {
        let inner = &self.inner;
        let bus = props.disk_bus;
        let mut disks = vec![disk(dir.join("disk"), bus, 0)];
        for (name, _, _) in blank_disks(kept.ephemeral_gb, kept.swap_mb) {
            disks.push(disk(dir.join(name), bus, disks.len()));
        }
        let iso = dir.join("disk.config");
        if iso.exists() {
            let bus = props.cdrom_bus;
            let index = disks.iter().filter(|d| d.bus == bus).count();
            disks.push(DiskSpec {
                path: iso,
                format: "raw",
                device: "cdrom",
                bus,
                dev: bus.dev(index),
            });
        }
        let file = |name: &str, wanted: bool| Some(dir.join(name)).filter(|_| wanted);
        let uuid = *instance.as_uuid();
        DomainSpec {
            uuid,
            name: domain_name(uuid),
            virt_type: inner.virt_type,
            cpu_mode: inner.cpu_mode,
            vcpus: kept.vcpus.max(1),
            memory_mb: kept.memory_mb.max(1),
            kernel: file("kernel", props.kernel_id.is_some()),
            ramdisk: file("ramdisk", props.ramdisk_id.is_some()),
            props,
            disks,
            console_log: dir.join("console.log"),
            serial: std::net::SocketAddr::new(inner.serial_ip, serial_port),
        }
        .to_xml()
    }

    /// Defines the domain of `instance` again from its directory (its
    /// disks stay as they are), when the directory has its
    /// `instance.json` and root disk; `NotFound` otherwise.
    pub(super) async fn redefine(&self, instance: InstanceUuid) -> Result<(), DriverError> {
        let dir = self.instance_dir(instance);
        let Some(kept) = Kept::read(&dir).await else {
            return Err(DriverError::NotFound(instance));
        };
        if !dir.join("disk").exists() {
            return Err(DriverError::NotFound(instance));
        }
        let props = GuestProps::from_properties(&kept.properties).map_err(|e| {
            DriverError::OperationFailed {
                op: "redefine",
                message: e.to_string(),
            }
        })?;
        let port = self.take_serial_port().await?;
        let xml = self.domain_xml(instance, &kept, props, &dir, port);
        let res = self
            .blocking(move |i| {
                i.conn().define_domain_xml(&xml).map(drop).map_err(|e| {
                    DriverError::OperationFailed {
                        op: "redefine",
                        message: format!("hypervisor: define: {}", e.message()),
                    }
                })
            })
            .await;
        self.release_port(port);
        tracing::warn!(%instance, ok = res.is_ok(), "domain was missing; defined again from its disks");
        res
    }
}

fn disk(path: PathBuf, bus: Bus, index: usize) -> DiskSpec {
    DiskSpec {
        path,
        format: "qcow2",
        device: "disk",
        bus,
        dev: bus.dev(index),
    }
}
