//! The local file store: one file per image under the configured directory
//! (`<dir>/<image id>`), written to a temporary name and renamed when the
//! upload completes, so a reader never sees a partial file. The MD5
//! (Glance's `checksum`) and SHA-512 (`os_hash_value`) are computed while
//! the bytes stream through.

use std::path::{Path, PathBuf};

use axum::body::Bytes;
use futures_util::{Stream, StreamExt};
use md5::{Digest, Md5};
use sha2::Sha512;
use tokio::io::AsyncWriteExt;

use super::db::Uploaded;
use super::error::{ImageError, Result};

/// The multihash algorithm recorded in `os_hash_algo`.
pub const HASH_ALGO: &str = "sha512";

/// Image files on local disk.
#[derive(Debug, Clone)]
pub struct FileStore {
    dir: PathBuf,
}

impl FileStore {
    /// A store in `dir`, private to this user (0700): created so when
    /// missing, narrowed to it (with a warning) when wider.
    pub async fn open(dir: impl Into<PathBuf>) -> Result<Self> {
        let dir = dir.into();
        let config = |e: std::io::Error| {
            ImageError::Config(format!("cannot create the image directory {dir:?}: {e}"))
        };
        let mut builder = tokio::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        builder.mode(0o700);
        builder.create(&dir).await.map_err(config)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = tokio::fs::metadata(&dir)
                .await
                .map_err(config)?
                .permissions()
                .mode();
            if mode & 0o077 != 0 {
                tracing::warn!(dir = %dir.display(), mode = format!("{:o}", mode & 0o777),
                    "the image directory was open to other users: narrowed to 0700");
                tokio::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                    .await
                    .map_err(config)?;
            }
        }
        Ok(Self { dir })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, location: &str) -> Result<PathBuf> {
        // Locations are image ids we wrote; refuse anything else.
        if location.is_empty() || location.contains(['/', '\\']) || location.starts_with('.') {
            return Err(ImageError::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("bad image location {location:?}"),
            )));
        }
        Ok(self.dir.join(location))
    }

    /// Streams `data` into the file of image `id`; at most `cap` bytes (413
    /// beyond). Nothing is left behind on failure.
    pub async fn write<S, E>(&self, id: &str, mut data: S, cap: u64) -> Result<Uploaded>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let final_path = self.path(id)?;
        let tmp = self
            .dir
            .join(format!(".{id}.{}.part", uuid::Uuid::new_v4().simple()));
        let result = async {
            let mut file = tokio::fs::File::create(&tmp).await?;
            let mut md5 = Md5::new();
            let mut sha = Sha512::new();
            let mut size: u64 = 0;
            while let Some(chunk) = data.next().await {
                let chunk = chunk.map_err(|e| {
                    ImageError::BadRequest(format!("Error reading the image data: {e}"))
                })?;
                size += chunk.len() as u64;
                if size > cap {
                    return Err(ImageError::TooLarge(format!(
                        "Image exceeds the storage quota: the image size cap is {cap} bytes."
                    )));
                }
                md5.update(&chunk);
                sha.update(&chunk);
                file.write_all(&chunk).await?;
            }
            file.sync_all().await?;
            drop(file);
            tokio::fs::rename(&tmp, &final_path).await?;
            Ok(Uploaded {
                size: size as i64,
                checksum: format!("{:x}", md5.finalize()),
                os_hash_algo: HASH_ALGO.to_owned(),
                os_hash_value: format!("{:x}", sha.finalize()),
                location: id.to_owned(),
            })
        }
        .await;
        if result.is_err() {
            let _ = tokio::fs::remove_file(&tmp).await;
        }
        result
    }

    /// Opens the file at `location` for reading.
    pub async fn open_file(&self, location: &str) -> Result<tokio::fs::File> {
        Ok(tokio::fs::File::open(self.path(location)?).await?)
    }

    /// Removes image `id`'s file and its upload's temporary files
    /// (`.<id>.<nonce>.part`); returns the names removed.
    pub async fn remove_all_of(&self, id: &str) -> Result<Vec<String>> {
        let mut removed = Vec::new();
        let prefix = format!(".{id}.");
        let mut dir = tokio::fs::read_dir(&self.dir).await?;
        while let Some(entry) = dir.next_entry().await? {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == id || (name.starts_with(&prefix) && name.ends_with(".part")) {
                match tokio::fs::remove_file(entry.path()).await {
                    Ok(()) => removed.push(name),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(removed)
    }

    /// Removes the file at `location` (absent is fine).
    pub async fn remove(&self, location: &str) -> Result<()> {
        match tokio::fs::remove_file(self.path(location)?).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}
