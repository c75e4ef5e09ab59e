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
            .ok_or_else(|| ApiError::BadRequest(format!("Image {image_ref} could not be found.")));
        Box::pin(std::future::ready(found))
    }
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
