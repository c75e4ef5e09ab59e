//! The image service's logic: who sees what, create, list, patch, delete,
//! upload and download. No HTTP here (the API parses and renders), no SQL
//! ([`super::db`] holds it).

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use fabric::token::{Authenticator, Claims};
use futures_util::Stream;
use serde_json::Value;

use super::config::ImageConfig;
use super::db::{Db, ImageRow, ListFilter, TagChange};
use super::error::{ImageError, Result};
use super::model::{self, Image, ImageId, ImageStatus, Visibility};
use super::store::FileStore;
use crate::identity::policy::Policy;

/// An authenticated caller.
#[derive(Debug, Clone)]
pub struct Caller {
    /// What the token says (always project-scoped).
    pub claims: Claims,
    /// The request id, for audit lines.
    pub request_id: String,
}

impl Caller {
    /// Whether the token carries `admin`.
    pub fn is_admin(&self) -> bool {
        self.claims.has_role("admin")
    }

    /// The project the token is scoped to.
    pub fn project(&self) -> &str {
        self.claims.project_id().unwrap_or_default()
    }
}

/// Whether `claims` may see `img` at all (otherwise: 404). Admins and the
/// service role see everything; others their project's images and public
/// and community ones.
/// (`shared` images are the owner's only: image members are not built.)
pub fn visible(claims: &Claims, img: &ImageRow) -> bool {
    // The service role reads any image: compute hosts download the image
    // a server boots from, whoever owns it (Glance's service role).
    claims.has_role("admin")
        || claims.has_role("service")
        || claims.project_id() == Some(img.owner.as_str())
        || matches!(img.visibility.as_str(), "public" | "community")
}

/// `img` if the caller may see it, else the 404 of image `id`.
fn if_visible(claims: &Claims, id: &str, img: Option<Image>) -> Result<Image> {
    match img {
        Some(img) if visible(claims, &img.row) => Ok(img),
        _ => Err(ImageError::no_image(id)),
    }
}

pub use super::list_query::{CmpOp, ListField, ListQuery, Page, RowFilters, SortKey, TimeField};

/// A patch operation (`application/openstack-images-v2.1-json-patch`).
#[derive(Debug, Clone)]
pub enum PatchOp {
    /// `add`: set, creating if absent.
    Add(String, Value),
    /// `replace`: set an existing attribute.
    Replace(String, Value),
    /// `remove`: remove an extra property.
    Remove(String),
}

/// The image service.
pub struct ImageService {
    /// Options.
    pub cfg: ImageConfig,
    /// Metadata.
    pub db: Db,
    /// Image files.
    pub store: FileStore,
    /// Rules.
    pub policy: Policy,
    /// Turns `X-Auth-Token` into claims.
    pub auth: Arc<dyn Authenticator>,
    public_url: RwLock<String>,
    boot_cache: BootCache,
    /// Limits read from identity, once given ([`Self::use_identity_limits`]).
    limits: std::sync::OnceLock<super::limits::KeystoneLimits>,
}

/// Images a boot looked up by id, kept for `boot_lookup_cache_ms`: a
/// server create reads its image once per boot, and the image rarely
/// changes. Only rows read from the database are kept (never a miss), the
/// caller's visibility is checked on every use, and a write through this
/// service drops the entry; a read that started before a write is not
/// kept (the write counter moved).
struct BootCache {
    ttl: Duration,
    writes: AtomicU64,
    rows: Mutex<HashMap<String, (Image, Instant)>>,
}

/// Drops an image's boot cache entry when dropped (after a write, on every
/// way out of it).
struct ForgetOnDrop<'a>(&'a BootCache, &'a str);

impl Drop for ForgetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.forget(self.1);
    }
}

/// Largest number of images the boot cache keeps (it starts over past it).
const BOOT_CACHE_MAX: usize = 1024;

impl BootCache {
    fn new(ttl_ms: u64) -> Self {
        Self {
            ttl: Duration::from_millis(ttl_ms),
            writes: AtomicU64::new(0),
            rows: Mutex::new(HashMap::new()),
        }
    }

    fn get(&self, id: &str) -> Option<Image> {
        let rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        rows.get(id)
            .filter(|(_, at)| at.elapsed() < self.ttl)
            .map(|(img, _)| img.clone())
    }

    /// The write counter, taken before a read whose row [`Self::put`]
    /// may keep.
    fn writes(&self) -> u64 {
        self.writes.load(AtomicOrdering::Acquire)
    }

    fn put(&self, img: &Image, writes_before: u64) {
        if self.ttl.is_zero() {
            return;
        }
        let mut rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        if self.writes() != writes_before {
            return;
        }
        if rows.len() >= BOOT_CACHE_MAX {
            rows.clear();
        }
        rows.insert(img.row.id.clone(), (img.clone(), Instant::now()));
    }

    fn forget(&self, id: &str) {
        let mut rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        self.writes.fetch_add(1, AtomicOrdering::AcqRel);
        rows.remove(id);
    }
}

impl std::fmt::Debug for ImageService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImageService")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

fn now() -> i64 {
    fabric::token::now_ms()
}

impl ImageService {
    /// Opens the metadata store and the file store.
    pub async fn open(cfg: ImageConfig, auth: Arc<dyn Authenticator>) -> Result<Self> {
        let db = Db::open(&cfg.database.connection, cfg.database.max_connections).await?;
        let store = FileStore::open(&cfg.filesystem_store_datadir).await?;
        let policy =
            super::policy::load(&cfg.policy_file).map_err(|e| ImageError::Config(e.to_string()))?;
        let svc = Self {
            public_url: RwLock::new(cfg.public_url.trim_end_matches('/').to_owned()),
            boot_cache: BootCache::new(cfg.boot_lookup_cache_ms),
            cfg,
            db,
            store,
            policy,
            auth,
            limits: std::sync::OnceLock::new(),
        };
        svc.sweep_interrupted_uploads().await?;
        Ok(svc)
    }

    /// Reads per-project limits from identity from now on (Glance's
    /// `use_keystone_limits`); `[image.quota]` stays the fallback for a
    /// resource identity has no limit on. Only the first call counts.
    pub fn use_identity_limits(&self, limits: super::limits::KeystoneLimits) {
        let _ = self.limits.set(limits);
    }

    /// Puts images left in `saving` (an upload cut short by a crash, or
    /// whose clean-up failed) back to `queued`, removing their file and
    /// temporary files; each is logged. Runs at start: with several
    /// processes sharing a database and store, restart one only while no
    /// other one is receiving an upload.
    pub async fn sweep_interrupted_uploads(&self) -> Result<Vec<String>> {
        let mut swept = Vec::new();
        for id in self.db.ids_in_status(ImageStatus::Saving.as_str()).await? {
            let removed = self.store.remove_all_of(&id).await?;
            if self.db.transition(&id, "saving", "queued", now()).await? {
                tracing::warn!(image_id = %id, removed_files = ?removed,
                    "interrupted upload swept: image back to queued");
                swept.push(id);
            }
        }
        Ok(swept)
    }

    /// The public base URL (no `/v2`).
    pub fn public_url(&self) -> String {
        self.public_url
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Sets the public base URL (the bound address when none is configured).
    pub fn set_public_url(&self, url: String) {
        *self.public_url.write().unwrap_or_else(|p| p.into_inner()) = url;
    }

    /// Enforces `action` with the image's owner as the target (403 when denied).
    fn authorize(&self, caller: &Caller, action: &str, owner: &str) -> Result<()> {
        if self.policy.enforce(
            action,
            &caller.claims,
            &[("project_id", owner), ("owner", owner)],
            &caller.request_id,
        ) {
            Ok(())
        } else {
            Err(ImageError::Forbidden(format!(
                "You are not authorized to complete {action} action."
            )))
        }
    }

    /// An image the caller may see (404 otherwise, also for a malformed id).
    pub async fn get(&self, caller: &Caller, id: &str) -> Result<Image> {
        let img = self.get_visible(&caller.claims, id).await?;
        self.authorize(caller, "get_image", &img.row.owner)?;
        Ok(img)
    }

    async fn get_visible(&self, claims: &Claims, id: &str) -> Result<Image> {
        if id.parse::<ImageId>().is_err() {
            return Err(ImageError::no_image(id));
        }
        if_visible(claims, id, self.db.get(id).await?)
    }

    /// [`Self::get_visible`] through the boot cache.
    async fn get_visible_for_boot(&self, claims: &Claims, id: &str) -> Result<Image> {
        let img = match self.boot_cache.get(id) {
            Some(img) => Some(img),
            None => {
                let writes = self.boot_cache.writes();
                let img = self.db.get(id).await?;
                if let Some(img) = &img {
                    self.boot_cache.put(img, writes);
                }
                img
            }
        };
        if_visible(claims, id, img)
    }

    /// Creates an image (status `queued`) from a create body.
    pub async fn create(
        &self,
        caller: &Caller,
        body: &serde_json::Map<String, Value>,
    ) -> Result<Image> {
        let id = match body.get("id") {
            None | Some(Value::Null) => ImageId::new_random(),
            Some(Value::String(s)) => s.parse().map_err(|_| {
                ImageError::BadRequest(format!(
                    "Provided object does not match schema 'image': '{s}' is not a UUID ('id')"
                ))
            })?,
            Some(_) => {
                return Err(ImageError::BadRequest(
                    "Provided object does not match schema 'image': 'id' is not a string".into(),
                ))
            }
        };
        let t = now();
        let mut img = Image {
            row: ImageRow {
                id: id.to_string(),
                name: None,
                owner: caller.project().to_owned(),
                status: ImageStatus::Queued.as_str().to_owned(),
                visibility: Visibility::Shared.as_str().to_owned(),
                protected: false,
                os_hidden: false,
                disk_format: None,
                container_format: None,
                min_ram: 0,
                min_disk: 0,
                size: None,
                virtual_size: None,
                checksum: None,
                os_hash_algo: None,
                os_hash_value: None,
                location: None,
                created_at: t,
                updated_at: t,
            },
            properties: BTreeMap::new(),
            tags: Vec::new(),
        };
        for (k, v) in body {
            if k != "id" {
                model::set_attribute(&mut img, k, v, true)?;
            }
        }
        if img.row.owner != caller.project() {
            self.authorize(caller, "set_image_owner", &img.row.owner)
                .map_err(|_| {
                    ImageError::Forbidden(format!(
                        "You are not permitted to create images owned by '{}'.",
                        img.row.owner
                    ))
                })?;
        }
        self.authorize(caller, "add_image", &img.row.owner)?;
        self.check_visibility_change(caller, &img, None)?;
        super::quota::check_create(&self.db, &self.cfg, self.limits.get(), &img.row.owner).await?;
        self.db.insert(&img).await?;
        tracing::info!(image_id = %img.row.id, owner = %img.row.owner, "image created");
        Ok(img)
    }

    fn check_visibility_change(
        &self,
        caller: &Caller,
        img: &Image,
        old: Option<&str>,
    ) -> Result<()> {
        if old == Some(img.row.visibility.as_str()) {
            return Ok(());
        }
        let (action, what) = match img.visibility() {
            Visibility::Public => ("publicize_image", "public"),
            Visibility::Community => ("communitize_image", "community"),
            _ => return Ok(()),
        };
        self.authorize(caller, action, &img.row.owner).map_err(|_| {
            ImageError::Forbidden(format!(
                "You are not authorized to set the visibility of images to '{what}'."
            ))
        })
    }

    /// The images the caller may list, filtered, sorted and paged.
    pub async fn list(&self, caller: &Caller, q: &ListQuery) -> Result<Page> {
        self.authorize(caller, "get_images", caller.project())?;
        let limit = q
            .limit
            .unwrap_or(self.cfg.limit_param_default)
            .min(self.cfg.api_limit_max)
            .max(1);
        let mut filter = q.filter.clone();
        filter.include_community = q.include_community || filter.visibility.is_some();
        if !caller.is_admin() {
            filter.scope = Some(caller.project().to_owned());
        }
        let mut rows = self.db.list(&filter).await?;
        rows.retain(|r| q.rows.matches(r));
        if !q.tags.is_empty() || !q.properties.is_empty() {
            let all = self.db.complete(rows).await?;
            rows = all
                .into_iter()
                .filter(|i| q.tags.iter().all(|t| i.tags.contains(t)))
                .filter(|i| {
                    q.properties
                        .iter()
                        .all(|(k, v)| i.properties.get(k) == Some(v))
                })
                .map(|i| i.row)
                .collect();
        }
        let mut keys = q.sort.clone();
        if keys.is_empty() {
            keys.push((SortKey::CreatedAt, false));
        }
        let last_dir = keys.last().map(|k| k.1).unwrap_or(false);
        for k in [SortKey::CreatedAt, SortKey::Id] {
            if !keys.iter().any(|(x, _)| *x == k) {
                keys.push((k, last_dir));
            }
        }
        rows.sort_by(|a, b| {
            keys.iter()
                .map(|(k, asc)| {
                    let o = k.cmp(a, b);
                    if *asc {
                        o
                    } else {
                        o.reverse()
                    }
                })
                .find(|o| *o != Ordering::Equal)
                .unwrap_or(Ordering::Equal)
        });
        let start = match &q.marker {
            None => 0,
            Some(m) => {
                rows.iter().position(|r| &r.id == m).ok_or_else(|| {
                    ImageError::BadRequest(format!("Invalid marker. Image {m} could not be found."))
                })? + 1
            }
        };
        let rest = rows.len().saturating_sub(start);
        let page: Vec<ImageRow> = rows.into_iter().skip(start).take(limit as usize).collect();
        Ok(Page {
            more: rest > page.len(),
            images: self.db.complete(page).await?,
            limit,
        })
    }

    /// Applies a patch and stores the result.
    pub async fn patch(&self, caller: &Caller, id: &str, ops: &[PatchOp]) -> Result<Image> {
        let old = self.get_visible(&caller.claims, id).await?;
        self.authorize(caller, "modify_image", &old.row.owner)?;
        let mut img = old.clone();
        for op in ops {
            match op {
                PatchOp::Add(k, v) => model::set_attribute(&mut img, k, v, false)?,
                PatchOp::Replace(k, v) => {
                    if model::is_extra(k) && !img.properties.contains_key(k) {
                        return Err(ImageError::Conflict(format!(
                            "Property {k} does not exist."
                        )));
                    }
                    model::set_attribute(&mut img, k, v, false)?
                }
                PatchOp::Remove(k) => model::remove_attribute(&mut img, k)?,
            }
        }
        if img.row.owner != old.row.owner {
            self.authorize(caller, "set_image_owner", &img.row.owner)?;
        }
        self.check_visibility_change(caller, &img, Some(&old.row.visibility))?;
        if img != old {
            img.row.updated_at = now();
            let updated = self.db.update(&img).await;
            self.boot_cache.forget(id);
            if !updated? {
                return Err(ImageError::no_image(id));
            }
        }
        Ok(img)
    }

    /// Deletes an image and its data (403 when protected). The file to
    /// remove is the one of the row actually deleted (an upload finishing
    /// meanwhile cannot leave its file behind; one still running finds its
    /// image gone and removes its own).
    pub async fn delete(&self, caller: &Caller, id: &str) -> Result<()> {
        let img = self.get_visible(&caller.claims, id).await?;
        self.authorize(caller, "delete_image", &img.row.owner)?;
        let protected =
            || ImageError::Forbidden(format!("Image {id} is protected and cannot be deleted."));
        if img.row.protected {
            return Err(protected());
        }
        let deleted = self.db.delete(id).await;
        self.boot_cache.forget(id);
        let Some(gone) = deleted? else {
            // Protected or deleted since it was read.
            return match self.db.get(id).await? {
                Some(now) if now.row.protected => Err(protected()),
                _ => Err(ImageError::no_image(id)),
            };
        };
        if let Some(loc) = &gone.location {
            if let Err(e) = self.store.remove(loc).await {
                tracing::error!(image_id = %id, error = ?e, "image deleted but its file remains");
            }
        }
        tracing::info!(image_id = %id, status = %gone.status, "image deleted");
        Ok(())
    }

    /// Stores the image's data (`queued` → `saving` → `active`).
    pub async fn upload<S, E>(&self, caller: &Caller, id: &str, data: S) -> Result<Image>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let img = self.get_visible(&caller.claims, id).await?;
        self.authorize(caller, "upload_image", &img.row.owner)?;
        self.store_data(img, data).await
    }

    async fn store_data<S, E>(&self, img: Image, data: S) -> Result<Image>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let id = img.row.id.clone();
        let cap = super::quota::upload_cap(&self.db, &self.cfg, self.limits.get(), &img.row.owner)
            .await?;
        // Every status change of the upload below goes through this guard.
        let _forget = ForgetOnDrop(&self.boot_cache, &id);
        if !self.db.transition(&id, "queued", "saving", now()).await? {
            let status = self
                .db
                .get(&id)
                .await?
                .map(|i| i.row.status)
                .ok_or_else(|| ImageError::no_image(&id))?;
            return Err(ImageError::Conflict(format!(
                "Image status transition from {status} to saving is not allowed"
            )));
        }
        let uploaded = match self.store.write(&id, data, cap.bytes).await {
            Ok(u) => u,
            Err(e) => {
                let e = match (e, &cap.quota) {
                    (ImageError::TooLarge(_), Some(msg)) => ImageError::TooLarge(msg.clone()),
                    (e, _) => e,
                };
                if let Err(e2) = self.db.transition(&id, "saving", "queued", now()).await {
                    tracing::error!(image_id = %id, error = ?e2, "cannot put a failed upload's image back to queued");
                }
                return Err(e);
            }
        };
        // The file is in place; until the row says `active`, it is ours to
        // remove again on every way out.
        match self.db.finish_upload(&id, &uploaded, now()).await {
            Ok(true) => {}
            Ok(false) => return Err(self.upload_lost(&id, &uploaded).await),
            Err(e) => {
                self.remove_quietly(&id, &uploaded.location).await;
                // If this fails too, the image stays `saving` and the sweep
                // at the next start puts it back.
                if let Err(e2) = self.db.transition(&id, "saving", "queued", now()).await {
                    tracing::error!(image_id = %id, error = ?e2,
                        "cannot put an upload whose record failed back to queued; \
                         the next start sweeps it");
                }
                return Err(e);
            }
        }
        tracing::info!(image_id = %id, size = uploaded.size, "image data stored");
        self.db
            .get(&id)
            .await?
            .ok_or_else(|| ImageError::no_image(&id))
    }

    /// An upload finished but its image left `saving` meanwhile: deleted
    /// (410, as Glance, and the file goes), or moved on by someone else
    /// (409; the file goes unless the row now names it).
    async fn upload_lost(&self, id: &str, uploaded: &super::db::Uploaded) -> ImageError {
        match self.db.get(id).await {
            Ok(None) => {
                self.remove_quietly(id, &uploaded.location).await;
                tracing::warn!(image_id = %id, "image deleted during its upload; data removed");
                ImageError::Gone(format!(
                    "Image {id} could not be found after upload. The image may have been \
                     deleted during the upload, cleaning up the chunks uploaded."
                ))
            }
            Ok(Some(img)) => {
                if img.row.location.as_deref() != Some(uploaded.location.as_str()) {
                    self.remove_quietly(id, &uploaded.location).await;
                }
                ImageError::Conflict(format!(
                    "Image status transition from {} to active is not allowed",
                    img.row.status
                ))
            }
            Err(e) => e,
        }
    }

    async fn remove_quietly(&self, id: &str, location: &str) {
        if let Err(e) = self.store.remove(location).await {
            tracing::error!(image_id = %id, error = ?e, "cannot remove an upload's file");
        }
    }

    /// The image a tag call acts on, in Glance's words: not visible is 404
    /// "Image x not found.", not the caller's to change 403 "Not allowed to
    /// {verb} tags for image x."; a failure of the store stays what it is.
    async fn tag_target(&self, caller: &Caller, id: &str, verb: &str) -> Result<Image> {
        let img = match self.get_visible(&caller.claims, id).await {
            Ok(img) => img,
            Err(ImageError::NotFound(_)) => {
                return Err(ImageError::NotFound(format!("Image {id} not found.")))
            }
            Err(e) => return Err(e),
        };
        self.authorize(caller, "modify_image", &img.row.owner)
            .map_err(|_| {
                ImageError::Forbidden(format!("Not allowed to {verb} tags for image {id}."))
            })?;
        Ok(img)
    }

    /// Adds a tag (`PUT /v2/images/{id}/tags/{tag}`; nothing when present).
    pub async fn add_tag(&self, caller: &Caller, id: &str, tag: &str) -> Result<()> {
        let img = self.tag_target(caller, id, "update").await?;
        // The create's rules for a tag.
        let mut probe = img.clone();
        model::set_attribute(&mut probe, "tags", &Value::from(vec![tag]), false)?;
        let change = self.db.add_tag(id, tag, model::MAX_TAGS, now()).await;
        self.boot_cache.forget(id);
        match change? {
            TagChange::Done | TagChange::NoTag => Ok(()),
            TagChange::NoImage => Err(ImageError::NotFound(format!("Image {id} not found."))),
            TagChange::TooMany => Err(ImageError::TooLarge(format!(
                "Image tag limit exceeded for image {id}: at most {} tags.",
                model::MAX_TAGS
            ))),
        }
    }

    /// Removes a tag (`DELETE /v2/images/{id}/tags/{tag}`; 404 when absent).
    pub async fn remove_tag(&self, caller: &Caller, id: &str, tag: &str) -> Result<()> {
        self.tag_target(caller, id, "delete").await?;
        let change = self.db.remove_tag(id, tag, now()).await;
        self.boot_cache.forget(id);
        match change? {
            TagChange::Done | TagChange::TooMany => Ok(()),
            TagChange::NoImage => Err(ImageError::NotFound(format!("Image {id} not found."))),
            TagChange::NoTag => Err(ImageError::NotFound(format!("Tag {tag} not found."))),
        }
    }

    /// `POST /v2/images/{id}/actions/deactivate` (`true`) or `/reactivate`
    /// (`false`): `active` ⇄ `deactivated`; already there is a no-op; any
    /// other status is a 403, as Glance.
    pub async fn set_deactivated(&self, caller: &Caller, id: &str, deactivate: bool) -> Result<()> {
        let (action, from, to) = if deactivate {
            ("deactivate", ImageStatus::Active, ImageStatus::Deactivated)
        } else {
            ("reactivate", ImageStatus::Deactivated, ImageStatus::Active)
        };
        let img = self.get_visible(&caller.claims, id).await?;
        self.authorize(caller, action, &img.row.owner)?;
        let refuse = |status: &str| {
            ImageError::Forbidden(format!(
                "Not allowed to {action} image in status '{status}'"
            ))
        };
        let status = img.status();
        if status == to {
            return Ok(());
        }
        if status != from {
            return Err(refuse(&img.row.status));
        }
        let moved = self
            .db
            .transition(id, from.as_str(), to.as_str(), now())
            .await;
        self.boot_cache.forget(id);
        if !moved? {
            // Changed meanwhile: judge the status it has now.
            return match self.db.get(id).await? {
                None => Err(ImageError::no_image(id)),
                Some(now) if now.status() == to => Ok(()),
                Some(now) => Err(refuse(&now.row.status)),
            };
        }
        tracing::info!(image_id = %id, "image {}d", action);
        Ok(())
    }

    /// The image and its open file; `None` for the file when it has no data.
    pub async fn download(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<(Image, Option<tokio::fs::File>)> {
        let img = self.get_visible(&caller.claims, id).await?;
        if img.status() == ImageStatus::Deactivated && !caller.is_admin() {
            return Err(ImageError::Forbidden(
                "The requested image has been deactivated. Image data download is forbidden."
                    .into(),
            ));
        }
        self.authorize(caller, "download_image", &img.row.owner)?;
        let file = match (&img.row.location, img.status()) {
            (Some(loc), ImageStatus::Active | ImageStatus::Deactivated) => {
                Some(self.store.open_file(loc).await?)
            }
            _ => None,
        };
        Ok((img, file))
    }

    /// Resolves a Compute API `imageRef` (an id, a URL ending in an id, or
    /// a name) for the caller, with the visibility rules of a list.
    pub async fn resolve(&self, claims: &Claims, image_ref: &str) -> Result<Image> {
        let tail = image_ref
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or_default();
        if tail.parse::<ImageId>().is_ok() {
            return self.get_visible_for_boot(claims, tail).await;
        }
        let filter = ListFilter {
            name: Some(image_ref.to_owned()),
            scope: (!claims.has_role("admin"))
                .then(|| claims.project_id().unwrap_or_default().to_owned()),
            os_hidden: Some(false),
            ..ListFilter::default()
        };
        let mut rows = self.db.list(&filter).await?;
        // The caller's own image wins over a public one of the same name.
        if rows.len() > 1 {
            let own: Vec<ImageRow> = rows
                .iter()
                .filter(|r| claims.project_id() == Some(r.owner.as_str()))
                .cloned()
                .collect();
            if own.len() == 1 {
                rows = own;
            }
        }
        match rows.len() {
            0 => Err(ImageError::NotFound(format!(
                "No image found with name {image_ref}"
            ))),
            1 => Ok(self.db.complete(rows).await?.remove(0)),
            _ => Err(ImageError::Conflict(format!(
                "Multiple images named {image_ref}; use an id"
            ))),
        }
    }

    /// Creates (once) a small public active image owned by `owner_project`
    /// (see [`super::seed`]).
    pub async fn create_seeded(
        &self,
        owner_project: &str,
        name: &str,
        disk_format: &str,
        data: Bytes,
        properties: BTreeMap<String, String>,
    ) -> Result<Image> {
        let existing = self
            .db
            .list(&ListFilter {
                name: Some(name.to_owned()),
                owner: Some(owner_project.to_owned()),
                ..ListFilter::default()
            })
            .await?;
        if let Some(row) = existing.into_iter().find(|r| r.status == "active") {
            return Ok(self.db.complete(vec![row]).await?.remove(0));
        }
        let t = now();
        let img = Image {
            row: ImageRow {
                id: ImageId::new_random().to_string(),
                name: Some(name.to_owned()),
                owner: owner_project.to_owned(),
                status: ImageStatus::Queued.as_str().to_owned(),
                visibility: Visibility::Public.as_str().to_owned(),
                protected: false,
                os_hidden: false,
                disk_format: Some(disk_format.to_owned()),
                // Kernels and ramdisks come in their own containers, as
                // Glance's UEC images.
                container_format: Some(
                    match disk_format {
                        "aki" | "ari" => disk_format,
                        _ => "bare",
                    }
                    .to_owned(),
                ),
                min_ram: 0,
                min_disk: 0,
                size: None,
                virtual_size: None,
                checksum: None,
                os_hash_algo: None,
                os_hash_value: None,
                location: None,
                created_at: t,
                updated_at: t,
            },
            properties,
            tags: Vec::new(),
        };
        self.db.insert(&img).await?;
        let chunks = futures_util::stream::iter([Ok::<_, std::convert::Infallible>(data)]);
        self.store_data(img, chunks).await
    }
}
