//! What the Compute API asks of images: resolve a server create's
//! `imageRef` for the caller and check that a flavor can boot it.
//!
//! In-process (the region embeds both APIs): build an [`ImageLookup`] from
//! the running image service ([`super::Running::lookup`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use fabric::token::Claims;

use super::error::ImageError;
use super::model::{ImageId, ImageStatus, Visibility};
use super::service::ImageService;

/// What the Compute API needs to know about an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSummary {
    /// The id.
    pub id: ImageId,
    /// The name, if any.
    pub name: Option<String>,
    /// Life cycle state.
    pub status: ImageStatus,
    /// Owning project.
    pub owner: String,
    /// Who may see it.
    pub visibility: Visibility,
    /// Least RAM to boot, MiB.
    pub min_ram_mb: u64,
    /// Least root disk to boot, GiB.
    pub min_disk_gb: u64,
    /// Bytes of data (once active).
    pub size_bytes: Option<u64>,
    /// Disk format.
    pub disk_format: Option<String>,
    /// Container format.
    pub container_format: Option<String>,
    /// Extra properties (`hw_*`, `os_*`, …), for the scheduler and driver.
    pub properties: BTreeMap<String, String>,
}

/// Why an `imageRef` cannot be used; each is a 400 in Nova's words.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// Unknown, malformed, or not visible to the caller.
    #[error("Can not find requested image")]
    NotFound,
    /// A name that more than one visible image has.
    #[error("Multiple possible images named {0} found; use an image id.")]
    Ambiguous(String),
    /// Not `active` (no data yet, or failed).
    #[error("Image {id} is not active.")]
    NotActive {
        /// The image.
        id: ImageId,
    },
    /// `min_ram` above the flavor's RAM (Nova's FlavorMemoryTooSmall).
    #[error("Flavor's memory is too small for requested image.")]
    FlavorMemoryTooSmall,
    /// The image's size above the flavor's root disk (Nova's
    /// FlavorDiskSmallerThanImage).
    #[error(
        "Flavor's disk is too small for requested image. Flavor disk is {flavor_bytes} bytes, \
         image is {image_bytes} bytes."
    )]
    FlavorDiskSmallerThanImage {
        /// The flavor's root disk, bytes.
        flavor_bytes: u64,
        /// The image's size, bytes.
        image_bytes: u64,
    },
    /// `min_disk` above the flavor's root disk (Nova's
    /// FlavorDiskSmallerThanMinDisk).
    #[error(
        "Flavor's disk is smaller than the minimum size specified in image metadata. Flavor \
         disk is {flavor_bytes} bytes, minimum size is {min_disk_bytes} bytes."
    )]
    FlavorDiskSmallerThanMinDisk {
        /// The flavor's root disk, bytes.
        flavor_bytes: u64,
        /// The image's `min_disk`, bytes.
        min_disk_bytes: u64,
    },
    /// The image store failed (a 500).
    #[error("image lookup failed")]
    Internal(#[source] ImageError),
}

impl ImageSummary {
    /// Nova's checks of an image against a flavor: RAM ≥ `min_ram`; unless
    /// the flavor has no root disk (`disk_gb == 0`, volume-backed style),
    /// root disk ≥ `min_disk` and ≥ the image size.
    pub fn check_flavor(&self, ram_mb: u64, disk_gb: u64) -> Result<(), LookupError> {
        if ram_mb < self.min_ram_mb {
            return Err(LookupError::FlavorMemoryTooSmall);
        }
        if disk_gb > 0 {
            // Nova's order: the image's size first, then `min_disk`.
            let flavor_bytes = disk_gb.saturating_mul(1 << 30);
            let image_bytes = self.size_bytes.unwrap_or(0);
            if image_bytes > flavor_bytes {
                return Err(LookupError::FlavorDiskSmallerThanImage {
                    flavor_bytes,
                    image_bytes,
                });
            }
            if disk_gb < self.min_disk_gb {
                return Err(LookupError::FlavorDiskSmallerThanMinDisk {
                    flavor_bytes,
                    min_disk_bytes: self.min_disk_gb.saturating_mul(1 << 30),
                });
            }
        }
        Ok(())
    }
}

/// Resolves `imageRef`s against the image service.
#[derive(Debug, Clone)]
pub struct ImageLookup {
    svc: Arc<ImageService>,
}

impl ImageLookup {
    /// A lookup on an image service (in this process).
    pub fn new(svc: Arc<ImageService>) -> Self {
        Self { svc }
    }

    /// The image service it asks.
    pub fn service(&self) -> &Arc<ImageService> {
        &self.svc
    }

    /// The image `image_ref` names for the caller: an id, a URL ending in an
    /// id (old clients), or a name (the caller's own image wins over a
    /// public one of the same name). Visibility as in Glance: another
    /// project's private image is [`LookupError::NotFound`].
    pub async fn find(
        &self,
        claims: &Claims,
        image_ref: &str,
    ) -> Result<ImageSummary, LookupError> {
        let img = self
            .svc
            .resolve(claims, image_ref)
            .await
            .map_err(|e| match e {
                ImageError::NotFound(_) => LookupError::NotFound,
                ImageError::Conflict(_) => LookupError::Ambiguous(image_ref.to_owned()),
                other => LookupError::Internal(other),
            })?;
        let id: ImageId = img.row.id.parse().map_err(|_| LookupError::NotFound)?;
        Ok(ImageSummary {
            id,
            status: img.status(),
            visibility: img.visibility(),
            name: img.row.name,
            owner: img.row.owner,
            min_ram_mb: img.row.min_ram.max(0) as u64,
            min_disk_gb: img.row.min_disk.max(0) as u64,
            size_bytes: img.row.size.map(|s| s.max(0) as u64),
            disk_format: img.row.disk_format,
            container_format: img.row.container_format,
            properties: img.properties,
        })
    }

    /// [`ImageLookup::find`], then: the image must be active and fit a
    /// flavor of `ram_mb` MiB and `disk_gb` GiB root disk.
    pub async fn find_bootable(
        &self,
        claims: &Claims,
        image_ref: &str,
        ram_mb: u64,
        disk_gb: u64,
    ) -> Result<ImageSummary, LookupError> {
        let img = self.find(claims, image_ref).await?;
        if img.status != ImageStatus::Active {
            return Err(LookupError::NotActive { id: img.id });
        }
        img.check_flavor(ram_mb, disk_gb)?;
        Ok(img)
    }
}
