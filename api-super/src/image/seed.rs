//! A small bootable-looking image for a fresh region's first
//! `openstack server create --image cirros-0.6.2-x86_64-disk`.

use std::collections::BTreeMap;
use std::path::Path;

use axum::body::Bytes;

use super::error::{ImageError, Result};
use super::model::Image;
use super::service::ImageService;

/// The seeded image's name.
pub const CIRROS_NAME: &str = "cirros-0.6.2-x86_64-disk";

/// Size of the seeded image's data.
pub const CIRROS_SIZE: usize = 16 * 1024;

/// The seeded image's bytes: a qcow2 magic and version, then a
/// deterministic pseudo-random fill (the same bytes on every run).
pub fn cirros_like_bytes() -> Vec<u8> {
    let mut data = Vec::with_capacity(CIRROS_SIZE);
    data.extend_from_slice(b"QFI\xfb\x00\x00\x00\x03");
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    while data.len() < CIRROS_SIZE {
        // xorshift64
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data.extend_from_slice(&x.to_le_bytes());
    }
    data.truncate(CIRROS_SIZE);
    data
}

/// Creates, once, a public active qcow2 image named [`CIRROS_NAME`] owned by
/// `owner_project` (usually the admin project) and returns it; when such an
/// active image exists already, returns that one.
pub async fn seed_cirros_like(svc: &ImageService, owner_project: &str) -> Result<Image> {
    let properties = BTreeMap::from([
        ("os_distro".to_owned(), "cirros".to_owned()),
        ("os_version".to_owned(), "0.6.2".to_owned()),
        ("hw_architecture".to_owned(), "x86_64".to_owned()),
    ]);
    svc.create_seeded(
        owner_project,
        CIRROS_NAME,
        "qcow2",
        Bytes::from(cirros_like_bytes()),
        properties,
    )
    .await
}

/// The real guest's root image's name ([`seed_guest_image`]).
pub const GUEST_NAME: &str = "cells-guest";

/// Registers, once, the project's real guest image built by
/// `scripts/build-guest-image.sh` into `dir` (docs/GUEST_IMAGE.md), UEC
/// style: `cells-guest-kernel` (aki, `vmlinuz`), `cells-guest-ramdisk`
/// (ari, `initrd.img`) and [`GUEST_NAME`] (raw, `disk.raw`, naming the
/// two in `kernel_id` and `ramdisk_id`), all public and owned by
/// `owner_project`. Returns the root image.
pub async fn seed_guest_image(
    svc: &ImageService,
    owner_project: &str,
    dir: &Path,
) -> Result<Image> {
    let read = |name: &'static str| {
        let path = dir.join(name);
        async move {
            tokio::fs::read(&path).await.map(Bytes::from).map_err(|e| {
                ImageError::Config(format!(
                    "the guest image's {} cannot be read: {e} (build it with scripts/build-guest-image.sh)",
                    path.display()
                ))
            })
        }
    };
    let kernel = svc
        .create_seeded(
            owner_project,
            "cells-guest-kernel",
            "aki",
            read("vmlinuz").await?,
            BTreeMap::new(),
        )
        .await?;
    let ramdisk = svc
        .create_seeded(
            owner_project,
            "cells-guest-ramdisk",
            "ari",
            read("initrd.img").await?,
            BTreeMap::new(),
        )
        .await?;
    let properties = BTreeMap::from([
        ("kernel_id".to_owned(), kernel.row.id.clone()),
        ("ramdisk_id".to_owned(), ramdisk.row.id.clone()),
        ("hw_architecture".to_owned(), "x86_64".to_owned()),
        ("os_distro".to_owned(), "cells-guest".to_owned()),
    ]);
    svc.create_seeded(
        owner_project,
        GUEST_NAME,
        "raw",
        read("disk.raw").await?,
        properties,
    )
    .await
}
