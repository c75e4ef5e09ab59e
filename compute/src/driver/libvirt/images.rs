//! Images on the host: metadata and data from the image service
//! ([`ImageSource`]; [`GlanceImages`] over HTTP), cached once per host as
//! base files under `<instances_path>/_base` ([`ImageCache`]), checked
//! (checksum, `os_hash_value`, and the format `qemu-img` finds against the
//! one the image claims) and turned into disks with `qemu-img`.
//!
//! Concurrent boots of one image share one download: the first takes the
//! image's lock and downloads into a temporary file that is renamed into
//! place once verified; the others wait on the lock and find the file.
//! A base file's modification time is its last use; [`ImageCache::age`]
//! removes those unused for longer than a given time. The ephemeral and
//! swap disks sit on formatted blank bases kept in the same directory
//! ([`ImageCache::blank_base`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures_util::future::BoxFuture;
use md5::{Digest as _, Md5};
use sha2::Sha512;
use tokio::io::AsyncWriteExt;
use uuid::Uuid;

/// What the image service says of an image.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageMeta {
    /// Its id.
    pub id: String,
    /// `active`, `queued`, …
    pub status: String,
    /// `raw`, `qcow2`, `aki`, `ari`, …
    pub disk_format: String,
    /// Bytes of data (when known).
    pub size: Option<u64>,
    /// MD5 of the data (Glance's legacy `checksum`).
    pub checksum: Option<String>,
    /// `os_hash_algo` (`sha512`).
    pub os_hash_algo: Option<String>,
    /// `os_hash_value`.
    pub os_hash_value: Option<String>,
    /// The image's other properties (string values).
    pub properties: BTreeMap<String, String>,
}

/// Why an image could not be had or used. The component that owns each
/// case is in its message: the image service, the image itself, or the
/// host's disk.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The image service could not be asked, or refused.
    #[error("image service: {0}")]
    Service(String),
    /// The image service has no such image.
    #[error("image service: image {0} not found")]
    NotFound(String),
    /// The image is not usable as asked.
    #[error("image {id}: {why}")]
    Invalid {
        /// The image.
        id: String,
        /// What is wrong.
        why: String,
    },
    /// Writing on the host failed (a full instances path, …).
    #[error("host disk: {what}")]
    HostDisk {
        /// What was being written.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Formatting a blank disk's base failed (`mkfs.ext4`, `mkswap`).
    #[error("host disk: {tool}: {why}")]
    Format {
        /// The tool.
        tool: &'static str,
        /// Its message.
        why: String,
    },
    /// `qemu-img` failed.
    #[error("host disk: qemu-img {args}: {why}")]
    QemuImg {
        /// Its arguments.
        args: String,
        /// Its message.
        why: String,
    },
}

fn disk_err(what: impl fmt::Display) -> impl FnOnce(std::io::Error) -> ImageError {
    let what = what.to_string();
    move |source| ImageError::HostDisk { what, source }
}

/// A stream of an image's bytes.
pub trait ImageData: Send {
    /// The next chunk; `None` at the end.
    fn next_chunk(&mut self) -> BoxFuture<'_, Result<Option<bytes::Bytes>, ImageError>>;
}

/// Where images come from.
pub trait ImageSource: Send + Sync + fmt::Debug {
    /// The image's metadata.
    fn meta<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<ImageMeta, ImageError>>;
    /// The image's data.
    fn data<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Box<dyn ImageData>, ImageError>>;
}

/// The image service's v2 API (`GET /v2/images/{id}` and `…/file`), with
/// a service token.
#[derive(Debug, Clone)]
pub struct GlanceImages {
    http: reqwest::Client,
    base: String,
    token: fabric::token::SharedToken,
}

/// The top-level keys of a Glance image that are not properties.
const CORE_KEYS: &[&str] = &[
    "id",
    "name",
    "status",
    "visibility",
    "protected",
    "os_hidden",
    "checksum",
    "os_hash_algo",
    "os_hash_value",
    "owner",
    "size",
    "virtual_size",
    "min_ram",
    "min_disk",
    "disk_format",
    "container_format",
    "created_at",
    "updated_at",
    "tags",
    "self",
    "file",
    "schema",
    "locations",
    "direct_url",
    "stores",
];

impl GlanceImages {
    /// A client of the image service at `base` (`http://127.0.0.1:9292`).
    /// `timeout` bounds each request, a whole download included.
    pub fn new(
        base: &str,
        token: fabric::token::SharedToken,
        timeout: Duration,
    ) -> Result<Self, ImageError> {
        let http = fabric::http::client(&fabric::http::ClientOptions {
            connect_timeout: Duration::from_secs(10),
            timeout,
            ..Default::default()
        })
        .map_err(|e| ImageError::Service(format!("HTTP client: {e}")))?;
        Ok(Self {
            http,
            base: base.trim_end_matches('/').to_owned(),
            token,
        })
    }

    async fn get(&self, id: &str, suffix: &str) -> Result<reqwest::Response, ImageError> {
        let url = format!("{}/v2/images/{id}{suffix}", self.base);
        let resp = self
            .http
            .get(&url)
            .header("X-Auth-Token", self.token.get())
            .send()
            .await
            .map_err(|e| ImageError::Service(format!("GET /v2/images/{id}{suffix}: {e}")))?;
        match resp.status().as_u16() {
            200..=299 => Ok(resp),
            404 => Err(ImageError::NotFound(id.to_owned())),
            s => Err(ImageError::Service(format!(
                "GET /v2/images/{id}{suffix} answered {s}"
            ))),
        }
    }
}

/// A Glance image document into [`ImageMeta`].
pub fn meta_from_json(v: &serde_json::Value) -> ImageMeta {
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_owned);
    let properties = v
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, _)| !CORE_KEYS.contains(&k.as_str()))
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    ImageMeta {
        id: s("id").unwrap_or_default(),
        status: s("status").unwrap_or_default(),
        disk_format: s("disk_format").unwrap_or_default(),
        size: v.get("size").and_then(|x| x.as_u64()),
        checksum: s("checksum"),
        os_hash_algo: s("os_hash_algo"),
        os_hash_value: s("os_hash_value"),
        properties,
    }
}

struct HttpData(reqwest::Response);

impl ImageData for HttpData {
    fn next_chunk(&mut self) -> BoxFuture<'_, Result<Option<bytes::Bytes>, ImageError>> {
        Box::pin(async move {
            self.0
                .chunk()
                .await
                .map_err(|e| ImageError::Service(format!("image download: {e}")))
        })
    }
}

impl ImageSource for GlanceImages {
    fn meta<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<ImageMeta, ImageError>> {
        Box::pin(async move {
            let v: serde_json::Value = self
                .get(id, "")
                .await?
                .json()
                .await
                .map_err(|e| ImageError::Service(format!("image {id}: {e}")))?;
            Ok(meta_from_json(&v))
        })
    }

    fn data<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Box<dyn ImageData>, ImageError>> {
        Box::pin(async move {
            let r = self.get(id, "/file").await?;
            if r.status().as_u16() == 204 {
                return Err(ImageError::Invalid {
                    id: id.to_owned(),
                    why: "has no data".into(),
                });
            }
            Ok(Box::new(HttpData(r)) as Box<dyn ImageData>)
        })
    }
}

/// What `qemu-img info` finds in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskInfo {
    /// `raw`, `qcow2`, …
    pub format: String,
    /// Bytes the guest sees.
    pub virtual_size: u64,
    /// A backing file named inside the file, if any.
    pub backing: Option<String>,
}

/// `qemu-img`, each call bounded by a timeout.
#[derive(Debug, Clone)]
pub struct QemuImg {
    timeout: Duration,
}

impl QemuImg {
    /// Calls bounded by `timeout`.
    pub fn new(timeout: Duration) -> Self {
        Self { timeout }
    }

    /// The bound on each call (also the config drive tool's).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    async fn run(&self, args: &[&str]) -> Result<Vec<u8>, ImageError> {
        run_tool("qemu-img", args, self.timeout)
            .await
            .map_err(|why| ImageError::QemuImg {
                args: args.join(" "),
                why,
            })
    }

    /// `qemu-img info` of `path`, with no format given: what the file is,
    /// not what it is said to be.
    pub async fn info(&self, path: &Path) -> Result<DiskInfo, ImageError> {
        let p = path.to_string_lossy();
        let out = self.run(&["info", "--output=json", &p]).await?;
        let v: serde_json::Value =
            serde_json::from_slice(&out).map_err(|e| ImageError::QemuImg {
                args: format!("info {p}"),
                why: format!("unreadable answer: {e}"),
            })?;
        Ok(DiskInfo {
            format: v["format"].as_str().unwrap_or_default().to_owned(),
            virtual_size: v["virtual-size"].as_u64().unwrap_or(0),
            backing: v["backing-filename"].as_str().map(str::to_owned),
        })
    }

    /// A qcow2 overlay at `dest` on `base` (of `base_format`), `size`
    /// bytes large.
    pub async fn overlay(
        &self,
        base: &Path,
        base_format: &str,
        dest: &Path,
        size: u64,
    ) -> Result<(), ImageError> {
        let b = base.to_string_lossy();
        let d = dest.to_string_lossy();
        let size = size.to_string();
        self.run(&[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-F",
            base_format,
            "-b",
            &b,
            &d,
            &size,
        ])
        .await
        .map(drop)
    }
}

/// A base file in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedImage {
    /// The file.
    pub path: PathBuf,
    /// Its metadata as the image service gave it.
    pub meta: ImageMeta,
    /// What `qemu-img` found in it (disk images only).
    pub disk: Option<DiskInfo>,
}

/// The disk formats a root disk may come in.
pub const DISK_FORMATS: &[&str] = &["raw", "qcow2"];
/// Kernel and ramdisk images (used as files, not disks).
pub const FILE_FORMATS: &[&str] = &["aki", "ari"];

/// The host's image cache.
#[derive(Debug)]
pub struct ImageCache {
    dir: PathBuf,
    source: Arc<dyn ImageSource>,
    qemu_img: QemuImg,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    downloads: std::sync::atomic::AtomicU64,
}

impl ImageCache {
    /// A cache in `dir` (created when first used), filled from `source`.
    pub fn new(dir: PathBuf, source: Arc<dyn ImageSource>, qemu_img: QemuImg) -> Self {
        Self {
            dir,
            source,
            qemu_img,
            locks: Mutex::new(HashMap::new()),
            downloads: Default::default(),
        }
    }

    /// Downloads made so far (each image once per host, unless aged out).
    pub fn downloads(&self) -> u64 {
        self.downloads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The image's metadata, from the image service.
    pub async fn meta(&self, id: &str) -> Result<ImageMeta, ImageError> {
        check_id(id)?;
        self.source.meta(id).await
    }

    fn lock(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(id.to_owned()).or_default().clone()
    }

    /// The base file of `meta`'s image, downloaded and checked the first
    /// time. `disk` says whether it must be a disk image (raw, qcow2) or
    /// a kernel/ramdisk file (aki, ari, or a raw file).
    pub async fn fetch(&self, meta: &ImageMeta, disk: bool) -> Result<CachedImage, ImageError> {
        let id = meta.id.as_str();
        check_id(id)?;
        let invalid = |why: String| ImageError::Invalid {
            id: id.to_owned(),
            why,
        };
        if meta.status != "active" {
            return Err(invalid(format!("is {}, not active", meta.status)));
        }
        let allowed = if disk {
            DISK_FORMATS
        } else {
            &["aki", "ari", "raw"][..]
        };
        if !allowed.contains(&meta.disk_format.as_str()) {
            let what = if disk {
                "a bootable disk"
            } else {
                "a kernel or ramdisk"
            };
            return Err(invalid(format!(
                "disk_format {:?} is not {what} this driver can use (one of {})",
                meta.disk_format,
                allowed.join(", ")
            )));
        }
        let path = self.dir.join(id);
        let lock = self.lock(id);
        let _held = lock.lock().await;
        if !tokio::fs::try_exists(&path).await.unwrap_or(false) {
            self.download(meta, &path).await?;
        }
        // Its last use, for the ageing pass.
        let touch = std::fs::File::options()
            .append(true)
            .open(&path)
            .and_then(|f| f.set_modified(SystemTime::now()));
        if let Err(e) = touch {
            tracing::warn!(image = id, error = %e, "could not mark the base image used");
        }
        // A disk must be what it claims and stand alone; a kernel or
        // ramdisk is a file the hypervisor reads as it is.
        let info = if disk {
            let info = self.qemu_img.info(&path).await?;
            if info.format != meta.disk_format {
                return Err(invalid(format!(
                    "claims disk_format {} but its data is {}",
                    meta.disk_format, info.format
                )));
            }
            if let Some(b) = &info.backing {
                return Err(invalid(format!("names a backing file ({b}); refused")));
            }
            Some(info)
        } else {
            None
        };
        Ok(CachedImage {
            path,
            meta: meta.clone(),
            disk: info,
        })
    }

    async fn download(&self, meta: &ImageMeta, path: &Path) -> Result<(), ImageError> {
        let id = meta.id.as_str();
        tokio::fs::create_dir_all(&self.dir)
            .await
            .map_err(disk_err(format_args!("create {}", self.dir.display())))?;
        let part = self
            .dir
            .join(format!(".{id}.part-{}", Uuid::new_v4().simple()));
        let res = self.download_into(meta, &part).await;
        match res {
            Ok(()) => tokio::fs::rename(&part, path)
                .await
                .map_err(disk_err(format_args!("rename into {}", path.display()))),
            Err(e) => {
                let _ = tokio::fs::remove_file(&part).await;
                Err(e)
            }
        }
    }

    async fn download_into(&self, meta: &ImageMeta, part: &Path) -> Result<(), ImageError> {
        let id = meta.id.as_str();
        let mut data = self.source.data(id).await?;
        let mut file = tokio::fs::File::create(part)
            .await
            .map_err(disk_err(format_args!("create {}", part.display())))?;
        let mut md5 = Md5::new();
        let mut sha512 = Sha512::new();
        let mut size = 0u64;
        while let Some(chunk) = data.next_chunk().await? {
            md5.update(&chunk);
            sha512.update(&chunk);
            size += chunk.len() as u64;
            file.write_all(&chunk)
                .await
                .map_err(disk_err(format_args!("write {}", part.display())))?;
        }
        file.sync_all()
            .await
            .map_err(disk_err(format_args!("sync {}", part.display())))?;
        self.downloads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let bad = |why: String| ImageError::Invalid {
            id: id.to_owned(),
            why,
        };
        if let Some(want) = meta.size.filter(|s| *s != size) {
            return Err(bad(format!(
                "size mismatch: expected {want} bytes, got {size}"
            )));
        }
        if let Some(want) = &meta.checksum {
            let got = hex::encode(md5.finalize());
            if !want.eq_ignore_ascii_case(&got) {
                return Err(bad(format!(
                    "checksum mismatch: expected {want}, got {got}"
                )));
            }
        }
        if let (Some(algo), Some(want)) = (&meta.os_hash_algo, &meta.os_hash_value) {
            if algo == "sha512" {
                let got = hex::encode(sha512.finalize());
                if !want.eq_ignore_ascii_case(&got) {
                    return Err(bad(format!(
                        "os_hash_value mismatch: expected {want}, got {got}"
                    )));
                }
            } else {
                tracing::info!(image = id, algo = %algo, "os_hash_algo not checked (sha512 only)");
            }
        }
        Ok(())
    }

    /// The base file of a formatted blank disk (Nova's
    /// `_base/ephemeral_<GB>_<fs>` and `_base/swap_<MB>`), made once per
    /// host under its own lock: a sparse raw file of `size` bytes that
    /// `kind` formats, renamed into place when formatted. Instances get a
    /// qcow2 overlay on it, as on an image.
    pub async fn blank_base(&self, kind: Blank, size: u64) -> Result<PathBuf, ImageError> {
        let name = kind.base_name(size);
        let path = self.dir.join(&name);
        let lock = self.lock(&name);
        let _held = lock.lock().await;
        if !tokio::fs::try_exists(&path).await.unwrap_or(false) {
            tokio::fs::create_dir_all(&self.dir)
                .await
                .map_err(disk_err(format!("create {}", self.dir.display())))?;
            let part = self.dir.join(format!(".{name}.part"));
            let made = async {
                let f = tokio::fs::File::create(&part)
                    .await
                    .map_err(disk_err(format!("create {}", part.display())))?;
                f.set_len(size)
                    .await
                    .map_err(disk_err(format!("size {}", part.display())))?;
                drop(f);
                let (tool, args): (&'static str, Vec<&str>) = match kind {
                    Blank::Ephemeral => ("mkfs.ext4", vec!["-F", "-q", "-L", "ephemeral0"]),
                    Blank::Swap => ("mkswap", vec!["-L", "swap0"]),
                };
                let p = part.to_string_lossy();
                let mut all = args;
                all.push(&p);
                run_tool(tool, &all, self.qemu_img.timeout)
                    .await
                    .map_err(|why| ImageError::Format { tool, why })?;
                tokio::fs::rename(&part, &path)
                    .await
                    .map_err(disk_err(format!("rename {}", part.display())))
            }
            .await;
            if made.is_err() {
                let _ = tokio::fs::remove_file(&part).await;
            }
            made?;
        }
        Ok(path)
    }

    /// Removes base files not used for `max_unused` and not in `in_use`
    /// (image ids); returns the ids removed.
    pub async fn age(&self, max_unused: Duration, in_use: &HashSet<String>) -> Vec<String> {
        let mut removed = Vec::new();
        let Ok(mut rd) = tokio::fs::read_dir(&self.dir).await else {
            return removed;
        };
        let now = SystemTime::now();
        while let Ok(Some(e)) = rd.next_entry().await {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || in_use.contains(&name) {
                continue;
            }
            let lock = self.lock(&name);
            let _held = lock.lock().await;
            let old = e
                .metadata()
                .await
                .and_then(|m| m.modified())
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .is_some_and(|age| age >= max_unused);
            if old && tokio::fs::remove_file(e.path()).await.is_ok() {
                tracing::info!(image = %name, "base image unused; removed");
                removed.push(name);
            }
        }
        removed
    }
}

/// What a blank disk's base holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blank {
    /// An ext4 filesystem labelled `ephemeral0` (Nova's default
    /// ephemeral format on Linux guests).
    Ephemeral,
    /// Swap space (`mkswap`).
    Swap,
}

impl Blank {
    /// The base file's name for a disk of `size` bytes (Nova's names:
    /// `ephemeral_<GB>_ext4`, `swap_<MB>`).
    pub fn base_name(self, size: u64) -> String {
        match self {
            Blank::Ephemeral => format!("ephemeral_{}_ext4", size >> 30),
            Blank::Swap => format!("swap_{}", size >> 20),
        }
    }
}

/// Runs `program` with `args`, bounded by `timeout`: its standard output,
/// or why it failed (not found, no answer, its standard error).
async fn run_tool(program: &str, args: &[&str], timeout: Duration) -> Result<Vec<u8>, String> {
    let child = tokio::process::Command::new(program)
        .args(args)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(timeout, child)
        .await
        .map_err(|_| format!("no answer in {timeout:?}"))?
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
    }
    Ok(out.stdout)
}

/// Image ids name files: only UUIDs are taken.
fn check_id(id: &str) -> Result<(), ImageError> {
    Uuid::parse_str(id)
        .map(drop)
        .map_err(|_| ImageError::Invalid {
            id: id.to_owned(),
            why: "is not an image id (a UUID)".into(),
        })
}
