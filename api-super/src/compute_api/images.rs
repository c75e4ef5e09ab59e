//! Image references. The image service is built elsewhere; the Compute API
//! resolves `imageRef` through [`ImageLookup`]. With no lookup configured,
//! any UUID-shaped reference is accepted as is.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

use fabric::token::Claims;

use super::error::ApiError;

/// Boxed future of [`ImageLookup`]: the image, or why not: a 400
/// ([`ApiError::BadRequest`], Nova's message) when the reference cannot be
/// booted, a 500 ([`ApiError::Internal`]) when the image service failed.
pub type LookupFuture<'a> =
    Pin<Box<dyn Future<Output = Result<ResolvedImage, ApiError>> + Send + 'a>>;

/// An image a boot may use.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResolvedImage {
    /// Its id.
    pub id: String,
    /// Its extra properties (`hw_architecture`, `os_distro`, …).
    pub properties: std::collections::BTreeMap<String, String>,
}

/// What a boot needs to know about the image: it is visible to the caller,
/// active, and the flavor is big enough for it.
#[derive(Debug, Clone, Copy)]
pub struct BootNeeds<'a> {
    /// The caller (visibility is per project).
    pub claims: &'a Claims,
    /// The flavor's RAM, MiB.
    pub ram_mb: u64,
    /// The flavor's root disk, GiB (0: no disk checks, as Nova).
    pub disk_gb: u64,
}

/// Resolves an `imageRef` (an id, or a name) to a bootable image id.
pub trait ImageLookup: Send + Sync + std::fmt::Debug {
    /// The image `image_ref` names for this boot, or the reason it
    /// cannot be booted (a 400 in Nova's words), or a 500 when the image
    /// service failed.
    fn resolve<'a>(&'a self, image_ref: &'a str, needs: BootNeeds<'a>) -> LookupFuture<'a>;

    /// The image service behind Nova's deprecated `/images` proxy, when
    /// this lookup has one (`None`: the proxy answers that there is no
    /// image service to proxy to).
    fn proxy(&self) -> Option<&dyn ImageProxy> {
        None
    }
}

/// An image as Nova's `/images` proxy shows it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProxyImage {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: Option<String>,
    /// The image service's status (`queued`, `active`, …).
    pub status: String,
    /// `min_ram`, MiB.
    pub min_ram: i64,
    /// `min_disk`, GiB.
    pub min_disk: i64,
    /// Bytes of data.
    pub size: Option<i64>,
    /// Created, Unix ms.
    pub created_at_ms: i64,
    /// Updated, Unix ms.
    pub updated_at_ms: i64,
    /// Extra properties (Nova's `metadata`).
    pub properties: std::collections::BTreeMap<String, String>,
}

/// The filters and page of an `/images` listing, as Nova hands them to
/// the image service.
#[derive(Debug, Clone, Default)]
pub struct ProxyQuery {
    /// `name`: exact.
    pub name: Option<String>,
    /// `status`: the image service's status, lower case.
    pub status: Option<String>,
    /// `changes-since`: updated at or after, Unix ms.
    pub changes_since_ms: Option<i64>,
    /// `property-<key>` (`server` is `instance_uuid`, `type` is
    /// `image_type`): exact.
    pub properties: std::collections::BTreeMap<String, String>,
    /// `minRam`: `min_ram` at least this.
    pub min_ram: Option<i64>,
    /// `minDisk`: `min_disk` at least this.
    pub min_disk: Option<i64>,
    /// Page size.
    pub limit: Option<u32>,
    /// The last image of the previous page.
    pub marker: Option<String>,
}

/// Boxed future of [`ImageProxy`]'s calls.
pub type ProxyFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, ApiError>> + Send + 'a>>;

/// What Nova's `/images` and `/images/{id}/metadata` proxies ask of the
/// image service, as the caller (visibility and policy are the image
/// service's; errors are already the Compute API's, in Nova's words).
pub trait ImageProxy: Send + Sync {
    /// The image service's public URL (the views' alternate links).
    fn public_url(&self) -> String;
    /// A page of the images the caller sees, and whether more follow.
    fn list<'a>(
        &'a self,
        claims: &'a Claims,
        request_id: &'a str,
        q: ProxyQuery,
    ) -> ProxyFuture<'a, (Vec<ProxyImage>, bool)>;
    /// One image (404 `Image not found.`).
    fn get<'a>(
        &'a self,
        claims: &'a Claims,
        request_id: &'a str,
        id: &'a str,
    ) -> ProxyFuture<'a, ProxyImage>;
    /// Deletes an image (403 `You are not allowed to delete the image.`).
    fn delete<'a>(
        &'a self,
        claims: &'a Claims,
        request_id: &'a str,
        id: &'a str,
    ) -> ProxyFuture<'a, ()>;
    /// Replaces the image's extra properties with `properties`.
    fn set_properties<'a>(
        &'a self,
        claims: &'a Claims,
        request_id: &'a str,
        id: &'a str,
        properties: std::collections::BTreeMap<String, String>,
    ) -> ProxyFuture<'a, ProxyImage>;
}

/// Images in memory: id → name.
#[derive(Debug, Clone, Default)]
pub struct InMemoryImages {
    images: Arc<RwLock<HashMap<String, String>>>,
}

impl InMemoryImages {
    /// No images.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an image.
    pub fn add(&self, id: &str, name: &str) {
        self.images
            .write()
            .expect("images lock")
            .insert(id.to_owned(), name.to_owned());
    }
}

impl ImageLookup for InMemoryImages {
    fn resolve<'a>(&'a self, image_ref: &'a str, _needs: BootNeeds<'a>) -> LookupFuture<'a> {
        let m = self.images.read().expect("images lock");
        let found = if m.contains_key(image_ref) {
            Some(image_ref.to_owned())
        } else {
            let mut named: Vec<&String> = m
                .iter()
                .filter(|(_, n)| n.as_str() == image_ref)
                .map(|(id, _)| id)
                .collect();
            named.sort();
            // An ambiguous name resolves to nothing, as with Glance.
            if named.len() == 1 {
                Some(named[0].clone())
            } else {
                None
            }
        };
        let found = found
            .map(|id| ResolvedImage {
                id,
                properties: Default::default(),
            })
            // Nova's words for ImageNotFound at create, as the image
            // service's lookup says them.
            .ok_or_else(|| ApiError::BadRequest("Can not find requested image".into()));
        Box::pin(std::future::ready(found))
    }
}

/// The image properties Nova knows (`ImageMetaProps`' fields), which it
/// shows from 2.98 in a server's `image.properties` when the image had
/// them at boot.
const IMAGE_META_PROPS: &[&str] = &[
    "hw_architecture",
    "hw_emulation_architecture",
    "hw_auto_disk_config",
    "hw_boot_menu",
    "hw_cdrom_bus",
    "hw_cpu_cores",
    "hw_cpu_sockets",
    "hw_cpu_max_cores",
    "hw_cpu_max_sockets",
    "hw_cpu_max_threads",
    "hw_cpu_policy",
    "hw_cpu_thread_policy",
    "hw_cpu_realtime_mask",
    "hw_cpu_threads",
    "hw_device_id",
    "hw_disk_bus",
    "hw_disk_type",
    "hw_floppy_bus",
    "hw_firmware_type",
    "hw_firmware_stateless",
    "hw_input_bus",
    "hw_ipxe_boot",
    "hw_locked_memory",
    "hw_machine_type",
    "hw_mem_encryption",
    "hw_mem_encryption_model",
    "hw_mem_page_size",
    "hw_numa_nodes",
    "hw_numa_cpus",
    "hw_numa_mem",
    "hw_pci_numa_affinity_policy",
    "hw_pointer_model",
    "hw_pmu",
    "hw_qemu_guest_agent",
    "hw_rescue_bus",
    "hw_rescue_device",
    "hw_rng_model",
    "hw_time_hpet",
    "hw_serial_port_count",
    "hw_scsi_model",
    "hw_video_model",
    "hw_video_ram",
    "hw_vif_model",
    "hw_viommu_model",
    "hw_vm_mode",
    "hw_watchdog_action",
    "hw_vif_multiqueue_enabled",
    "hw_tpm_model",
    "hw_tpm_version",
    "hw_ephemeral_encryption",
    "hw_ephemeral_encryption_format",
    "hw_ephemeral_encryption_secret_uuid",
    "hw_virtio_packed_ring",
    "hw_maxphysaddr_mode",
    "hw_maxphysaddr_bits",
    "hw_sound_model",
    "hw_usb_model",
    "hw_redirected_usb_ports",
    "img_bittorrent",
    "img_bdm_v2",
    "img_cache_in_nova",
    "img_compression_level",
    "img_hv_requested_version",
    "img_hv_type",
    "img_config_drive",
    "img_linked_clone",
    "img_owner_id",
    "img_root_device_name",
    "img_use_agent",
    "img_version",
    "img_signature",
    "img_signature_hash_method",
    "img_signature_certificate_uuid",
    "img_signature_key_type",
    "img_hide_hypervisor_id",
    "os_admin_user",
    "os_command_line",
    "os_distro",
    "os_require_quiesce",
    "os_secure_boot",
    "os_skip_agent_inject_files_at_boot",
    "os_skip_agent_inject_ssh",
    "os_type",
    "traits_required",
    // Their legacy names, shown as the image gave them.
    "architecture",
    "owner_id",
    "vmware_disktype",
    "vmware_image_version",
    "vmware_ostype",
    "auto_disk_config",
    "ipxe_boot",
    "xenapi_device_id",
    "xenapi_image_compression_level",
    "vmware_linked_clone",
    "xenapi_use_agent",
    "xenapi_skip_agent_inject_ssh",
    "xenapi_skip_agent_inject_files_at_boot",
    "cache_in_nova",
    "vm_mode",
    "bittorrent",
    "bdm_v2",
    "root_device_name",
    "hypervisor_version_requires",
    "hypervisor_type",
    // Not kept: `mappings`, `block_device_mapping` and their `img_`
    // names (Nova's `SM_SKIP_KEYS`: too big for system metadata).
];

/// What Nova records of an image's properties when it boots (or
/// rebuilds) a server from it, in the instance's system metadata as
/// `image_<name>`, and shows from 2.98 as the server's
/// `image.properties`: the properties it knows ([`IMAGE_META_PROPS`],
/// legacy names included; any other is recorded but never shown), each
/// value cut to 255 bytes (at a character boundary).
pub fn recorded_properties(
    props: &std::collections::BTreeMap<String, String>,
) -> std::collections::BTreeMap<String, String> {
    props
        .iter()
        .filter(|(k, _)| IMAGE_META_PROPS.contains(&k.as_str()))
        .map(|(k, v)| {
            let mut end = v.len().min(255);
            while !v.is_char_boundary(end) {
                end -= 1;
            }
            (k.clone(), v[..end].to_owned())
        })
        .collect()
}

/// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (or 32 hex digits).
pub fn is_uuid_like(s: &str) -> bool {
    uuid::Uuid::parse_str(s).is_ok() && (s.len() == 36 || s.len() == 32)
}

/// The region's image service as the Compute API's lookup: Glance's
/// visibility rules for the caller, `active` required, min_ram/min_disk
/// checked against the flavor.
impl ImageLookup for crate::image::lookup::ImageLookup {
    fn resolve<'a>(&'a self, image_ref: &'a str, needs: BootNeeds<'a>) -> LookupFuture<'a> {
        Box::pin(async move {
            self.find_bootable(needs.claims, image_ref, needs.ram_mb, needs.disk_gb)
                .await
                .map(|img| ResolvedImage {
                    id: img.id.to_string(),
                    properties: img.properties,
                })
                .map_err(|e| match e {
                    // The image service failed: the caller's request was fine.
                    crate::image::LookupError::Internal(e) => {
                        ApiError::internal(format!("image lookup failed: {}", chain(&e)))
                    }
                    e => ApiError::BadRequest(e.to_string()),
                })
        })
    }

    fn proxy(&self) -> Option<&dyn ImageProxy> {
        Some(self)
    }
}

/// An error and its causes, `a: b: c` (logged once, as the 500's cause).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::recorded_properties;

    #[test]
    fn properties_are_recorded_as_nova_shows_them() {
        let props: BTreeMap<String, String> = [
            ("os_distro", "cirros".to_owned()),
            ("os_version", "0.6.2".to_owned()),
            ("architecture", "amd64".to_owned()),
            ("hw_rng_model", "é".repeat(200)),
            ("img_mappings", "[]".to_owned()),
            ("mappings", "[]".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let r = recorded_properties(&props);
        assert_eq!(
            r.keys().collect::<Vec<_>>(),
            ["architecture", "hw_rng_model", "os_distro"]
        );
        assert_eq!(r["architecture"], "amd64");
        // 255 bytes at most, whole characters (2 bytes each here).
        assert_eq!(r["hw_rng_model"], "é".repeat(127));
    }
}
