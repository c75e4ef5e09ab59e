//! All SQL of the image service's metadata, for both backends.
//!
//! The schema is created at start with `CREATE TABLE IF NOT EXISTS` (see
//! [`SCHEMA`]): images have no migration in `migrations/` yet; these tables
//! are to move into an append-only API-database migration as they are.
//! Timestamps are Unix milliseconds (`BIGINT`), ids are text. Deleted images
//! are removed (no soft delete): their properties and tags go with them
//! (`ON DELETE CASCADE`).

use migrations::BeginWrite;
use std::collections::BTreeMap;

use migrations::Backend;
use sqlx::{PgPool, SqlitePool};

use super::error::{ImageError, Result};
use super::model::Image;

/// The image tables. Portable DDL: the same text runs on PostgreSQL and
/// SQLite.
pub const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS images (
        id TEXT PRIMARY KEY,
        name TEXT,
        owner TEXT NOT NULL,
        status TEXT NOT NULL,
        visibility TEXT NOT NULL,
        protected BOOLEAN NOT NULL DEFAULT FALSE,
        os_hidden BOOLEAN NOT NULL DEFAULT FALSE,
        disk_format TEXT,
        container_format TEXT,
        min_ram BIGINT NOT NULL DEFAULT 0,
        min_disk BIGINT NOT NULL DEFAULT 0,
        size BIGINT,
        virtual_size BIGINT,
        checksum TEXT,
        os_hash_algo TEXT,
        os_hash_value TEXT,
        location TEXT,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL
    )",
    "CREATE INDEX IF NOT EXISTS images_owner_idx ON images (owner)",
    "CREATE INDEX IF NOT EXISTS images_name_idx ON images (name)",
    "CREATE TABLE IF NOT EXISTS image_properties (
        image_id TEXT NOT NULL REFERENCES images (id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (image_id, name)
    )",
    "CREATE TABLE IF NOT EXISTS image_tags (
        image_id TEXT NOT NULL REFERENCES images (id) ON DELETE CASCADE,
        value TEXT NOT NULL,
        PRIMARY KEY (image_id, value)
    )",
];

/// The image metadata store, on either backend.
#[derive(Debug, Clone)]
pub enum Db {
    /// PostgreSQL (several api-super processes share it).
    Pg(PgPool),
    /// SQLite (embedded default; one connection).
    Sqlite(SqlitePool),
}

/// Runs `$body` with `$pool` bound to the backend's pool; compiled once per
/// backend.
macro_rules! on_db {
    ($db:expr, $pool:ident => $body:expr) => {
        match $db {
            Db::Pg($pool) => $body,
            Db::Sqlite($pool) => $body,
        }
    };
}

/// The core attributes of an image (one `images` row).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ImageRow {
    /// UUID, text.
    pub id: String,
    /// Free name (not unique).
    pub name: Option<String>,
    /// Owning project id.
    pub owner: String,
    /// `queued`, `saving`, `active`, `killed`.
    pub status: String,
    /// `public`, `community`, `shared`, `private`.
    pub visibility: String,
    /// Refuses deletion.
    pub protected: bool,
    /// Left out of default lists.
    pub os_hidden: bool,
    /// Disk format, if set.
    pub disk_format: Option<String>,
    /// Container format, if set.
    pub container_format: Option<String>,
    /// Least RAM to boot, MiB.
    pub min_ram: i64,
    /// Least disk to boot, GiB.
    pub min_disk: i64,
    /// Bytes of data, once uploaded.
    pub size: Option<i64>,
    /// Virtual disk size (never computed here).
    pub virtual_size: Option<i64>,
    /// MD5 of the data, hex.
    pub checksum: Option<String>,
    /// `sha512` once uploaded.
    pub os_hash_algo: Option<String>,
    /// The multihash of the data, hex.
    pub os_hash_value: Option<String>,
    /// The data's file name in the store.
    pub location: Option<String>,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms.
    pub updated_at: i64,
}

const COLUMNS: &str = "id, name, owner, status, visibility, protected, os_hidden, disk_format, \
    container_format, min_ram, min_disk, size, virtual_size, checksum, os_hash_algo, \
    os_hash_value, location, created_at, updated_at";

/// An image's columns beside one property or tag, or none
/// ([`Db::get`]).
#[derive(sqlx::FromRow)]
struct ImageExtraRow {
    #[sqlx(flatten)]
    row: ImageRow,
    kind: Option<String>,
    k: Option<String>,
    v: Option<String>,
}

/// Filters of a list (SQL side; sorting and paging happen in the service).
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Exact name.
    pub name: Option<String>,
    /// Exact status.
    pub status: Option<String>,
    /// Exact owner.
    pub owner: Option<String>,
    /// Exact visibility.
    pub visibility: Option<String>,
    /// Non-admin callers: only this project's images, public ones and (with
    /// `include_community`) community ones.
    pub scope: Option<String>,
    /// Whether community images of other projects are listed.
    pub include_community: bool,
    /// `os_hidden` must equal this.
    pub os_hidden: Option<bool>,
    /// Exact disk format.
    pub disk_format: Option<String>,
    /// Exact container format.
    pub container_format: Option<String>,
}

/// The data of a finished upload.
#[derive(Debug, Clone)]
pub struct Uploaded {
    /// Bytes.
    pub size: i64,
    /// MD5, hex.
    pub checksum: String,
    /// `sha512`.
    pub os_hash_algo: String,
    /// SHA-512, hex.
    pub os_hash_value: String,
    /// File name in the store.
    pub location: String,
}

/// Maps a unique-constraint violation to 409.
fn conflict(e: sqlx::Error, what: &str) -> ImageError {
    match &e {
        sqlx::Error::Database(d) if d.is_unique_violation() => {
            ImageError::Conflict(format!("{what} already exists."))
        }
        _ => ImageError::Db(e),
    }
}

/// `$first, $first+1, …` placeholders for an `IN (…)` list of `n` values.
fn placeholders(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Db {
    /// Opens the store at `url` and creates the image tables if missing.
    pub async fn open(url: &str, max_connections: u32) -> Result<Db> {
        let db = match Backend::from_url(url)
            .map_err(|e| ImageError::Config(format!("image database URL: {e}")))?
        {
            Backend::Postgres => Db::Pg(migrations::open_pg(url, max_connections).await?),
            Backend::Sqlite => Db::Sqlite(migrations::open_sqlite(url).await?),
        };
        for stmt in SCHEMA {
            on_db!(&db, pool => sqlx::query(stmt).execute(pool).await.map(|r| r.rows_affected()))?;
        }
        Ok(db)
    }

    /// What project `owner` holds: images, images being uploaded, bytes.
    pub async fn usage(&self, owner: &str) -> Result<(i64, i64, i64)> {
        Ok(on_db!(self, pool => sqlx::query_as::<_, (i64, i64, i64)>(
            "SELECT COUNT(*), \
             CAST(COALESCE(SUM(CASE WHEN status IN ('saving', 'importing') THEN 1 ELSE 0 END), 0) AS BIGINT), \
             CAST(COALESCE(SUM(size), 0) AS BIGINT) FROM images WHERE owner = $1")
            .bind(owner).fetch_one(pool).await)?)
    }

    /// Stores a new image with its properties and tags (409 when the id is taken).
    pub async fn insert(&self, img: &Image) -> Result<()> {
        let r = &img.row;
        let sql = format!(
            "INSERT INTO images ({COLUMNS}) VALUES \
             ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)"
        );
        on_db!(self, pool => {
            let mut tx = pool.begin_write().await?;
            sqlx::query(&sql)
                .bind(&r.id).bind(&r.name).bind(&r.owner).bind(&r.status).bind(&r.visibility)
                .bind(r.protected).bind(r.os_hidden).bind(&r.disk_format).bind(&r.container_format)
                .bind(r.min_ram).bind(r.min_disk).bind(r.size).bind(r.virtual_size)
                .bind(&r.checksum).bind(&r.os_hash_algo).bind(&r.os_hash_value).bind(&r.location)
                .bind(r.created_at).bind(r.updated_at)
                .execute(&mut *tx).await
                .map_err(|e| conflict(e, &format!("Image with identifier {}", r.id)))?;
            for (k, v) in &img.properties {
                sqlx::query("INSERT INTO image_properties (image_id, name, value) VALUES ($1, $2, $3)")
                    .bind(&r.id).bind(k).bind(v).execute(&mut *tx).await?;
            }
            for t in &img.tags {
                sqlx::query("INSERT INTO image_tags (image_id, value) VALUES ($1, $2)")
                    .bind(&r.id).bind(t).execute(&mut *tx).await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// Rewrites an image's settable attributes, properties and tags.
    pub async fn update(&self, img: &Image) -> Result<bool> {
        let r = &img.row;
        let found = on_db!(self, pool => {
            let mut tx = pool.begin_write().await?;
            let n = sqlx::query(
                "UPDATE images SET name = $2, owner = $3, visibility = $4, protected = $5, \
                 os_hidden = $6, disk_format = $7, container_format = $8, min_ram = $9, \
                 min_disk = $10, updated_at = $11 WHERE id = $1")
                .bind(&r.id).bind(&r.name).bind(&r.owner).bind(&r.visibility).bind(r.protected)
                .bind(r.os_hidden).bind(&r.disk_format).bind(&r.container_format)
                .bind(r.min_ram).bind(r.min_disk).bind(r.updated_at)
                .execute(&mut *tx).await?.rows_affected();
            if n == 1 {
                sqlx::query("DELETE FROM image_properties WHERE image_id = $1")
                    .bind(&r.id).execute(&mut *tx).await?;
                for (k, v) in &img.properties {
                    sqlx::query("INSERT INTO image_properties (image_id, name, value) VALUES ($1, $2, $3)")
                        .bind(&r.id).bind(k).bind(v).execute(&mut *tx).await?;
                }
                sqlx::query("DELETE FROM image_tags WHERE image_id = $1")
                    .bind(&r.id).execute(&mut *tx).await?;
                for t in &img.tags {
                    sqlx::query("INSERT INTO image_tags (image_id, value) VALUES ($1, $2)")
                        .bind(&r.id).bind(t).execute(&mut *tx).await?;
                }
            }
            tx.commit().await?;
            n == 1
        });
        Ok(found)
    }

    /// One image with its properties and tags, in one statement (every
    /// boot reads its image): the image's columns on each row, beside one
    /// property (`kind` 'p') or tag ('t') per row, or none.
    pub async fn get(&self, id: &str) -> Result<Option<Image>> {
        let sql = format!(
            "SELECT {COLUMNS}, x.kind, x.k, x.v FROM images LEFT JOIN \
             (SELECT 'p' AS kind, name AS k, value AS v FROM image_properties WHERE image_id = $1 \
              UNION ALL SELECT 't', value, NULL FROM image_tags WHERE image_id = $1) x ON 1 = 1 \
             WHERE id = $1 ORDER BY x.kind, x.k"
        );
        let rows: Vec<ImageExtraRow> = on_db!(self, pool => sqlx::query_as(&sql)
            .bind(id).fetch_all(pool).await)?;
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        let mut image = Image {
            row: first.row.clone(),
            properties: BTreeMap::new(),
            tags: Vec::new(),
        };
        for x in rows {
            match (x.kind.as_deref(), x.k) {
                (Some("p"), Some(k)) => {
                    image.properties.insert(k, x.v.unwrap_or_default());
                }
                (Some("t"), Some(t)) => image.tags.push(t),
                _ => {}
            }
        }
        Ok(Some(image))
    }

    /// Rows matching `f`, unsorted.
    pub async fn list(&self, f: &ListFilter) -> Result<Vec<ImageRow>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM images WHERE ($1 IS NULL OR name = $1) \
             AND ($2 IS NULL OR status = $2) AND ($3 IS NULL OR owner = $3) \
             AND ($4 IS NULL OR visibility = $4) \
             AND ($5 IS NULL OR owner = $5 OR visibility = 'public' \
                  OR (visibility = 'community' AND $6)) \
             AND ($7 IS NULL OR os_hidden = $7) \
             AND ($8 IS NULL OR disk_format = $8) AND ($9 IS NULL OR container_format = $9)"
        );
        Ok(on_db!(self, pool => sqlx::query_as::<_, ImageRow>(&sql)
            .bind(&f.name).bind(&f.status).bind(&f.owner).bind(&f.visibility)
            .bind(&f.scope).bind(f.include_community).bind(f.os_hidden)
            .bind(&f.disk_format).bind(&f.container_format)
            .fetch_all(pool).await)?)
    }

    /// Adds properties and tags to rows (one query each per 500 rows).
    pub async fn complete(&self, rows: Vec<ImageRow>) -> Result<Vec<Image>> {
        let mut props: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        let mut tags: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for chunk in rows.chunks(500) {
            let ids: Vec<&str> = chunk.iter().map(|r| r.id.as_str()).collect();
            let p = placeholders(1, ids.len());
            let psql = format!(
                "SELECT image_id, name, value FROM image_properties WHERE image_id IN ({p})"
            );
            let tsql = format!(
                "SELECT image_id, value FROM image_tags WHERE image_id IN ({p}) ORDER BY value"
            );
            let prows: Vec<(String, String, String)> = on_db!(self, pool => {
                let mut q = sqlx::query_as(&psql);
                for id in &ids { q = q.bind(*id); }
                q.fetch_all(pool).await
            })?;
            for (id, k, v) in prows {
                props.entry(id).or_default().insert(k, v);
            }
            let trows: Vec<(String, String)> = on_db!(self, pool => {
                let mut q = sqlx::query_as(&tsql);
                for id in &ids { q = q.bind(*id); }
                q.fetch_all(pool).await
            })?;
            for (id, t) in trows {
                tags.entry(id).or_default().push(t);
            }
        }
        Ok(rows
            .into_iter()
            .map(|row| Image {
                properties: props.remove(&row.id).unwrap_or_default(),
                tags: tags.remove(&row.id).unwrap_or_default(),
                row,
            })
            .collect())
    }

    /// Moves `id` from status `from` to `to`; false when it was not in `from`.
    pub async fn transition(&self, id: &str, from: &str, to: &str, now: i64) -> Result<bool> {
        let n = on_db!(self, pool => sqlx::query(
            "UPDATE images SET status = $3, updated_at = $4 WHERE id = $1 AND status = $2")
            .bind(id).bind(from).bind(to).bind(now)
            .execute(pool).await.map(|r| r.rows_affected()))?;
        Ok(n == 1)
    }

    /// Records a finished upload (`saving` → `active`); false when the image
    /// left `saving` meanwhile (deleted).
    pub async fn finish_upload(&self, id: &str, u: &Uploaded, now: i64) -> Result<bool> {
        let n = on_db!(self, pool => sqlx::query(
            "UPDATE images SET status = 'active', size = $2, checksum = $3, os_hash_algo = $4, \
             os_hash_value = $5, location = $6, updated_at = $7 \
             WHERE id = $1 AND status = 'saving'")
            .bind(id).bind(u.size).bind(&u.checksum).bind(&u.os_hash_algo)
            .bind(&u.os_hash_value).bind(&u.location).bind(now)
            .execute(pool).await.map(|r| r.rows_affected()))?;
        Ok(n == 1)
    }

    /// Removes an image unless it is protected (its properties and tags
    /// go with it), deciding from the row it actually removed: the
    /// returned [`Deleted`] holds that row's `location`, so an upload that
    /// finished after the caller read the image cannot leave its file
    /// behind. `None` when no unprotected row `id` existed.
    pub async fn delete(&self, id: &str) -> Result<Option<Deleted>> {
        let gone: Option<Deleted> = on_db!(self, pool => {
            let mut tx = pool.begin_write().await?;
            // Explicit deletes: SQLite enforces ON DELETE CASCADE only with
            // foreign keys on, which a foreign pool may not have.
            let gone: Option<Deleted> = sqlx::query_as::<_, Deleted>(
                "DELETE FROM images WHERE id = $1 AND protected = FALSE \
                 RETURNING status, location")
                .bind(id).fetch_all(&mut *tx).await?.into_iter().next();
            if gone.is_some() {
                sqlx::query("DELETE FROM image_properties WHERE image_id = $1")
                    .bind(id).execute(&mut *tx).await?;
                sqlx::query("DELETE FROM image_tags WHERE image_id = $1")
                    .bind(id).execute(&mut *tx).await?;
            }
            tx.commit().await?;
            gone
        });
        Ok(gone)
    }

    /// Adds tag `tag` to image `id` (nothing when it has it), refusing to
    /// go past `max` tags. Serialized per image by the `images` row update
    /// that comes first.
    pub async fn add_tag(&self, id: &str, tag: &str, max: usize, now: i64) -> Result<TagChange> {
        let change = on_db!(self, pool => {
            let mut tx = pool.begin_write().await?;
            let n = sqlx::query("UPDATE images SET updated_at = $2 WHERE id = $1")
                .bind(id).bind(now).execute(&mut *tx).await?.rows_affected();
            if n == 0 {
                return Ok(TagChange::NoImage);
            }
            sqlx::query(
                "INSERT INTO image_tags (image_id, value) VALUES ($1, $2) \
                 ON CONFLICT (image_id, value) DO NOTHING")
                .bind(id).bind(tag).execute(&mut *tx).await?;
            let (count,): (i64,) =
                sqlx::query_as("SELECT COUNT(*) FROM image_tags WHERE image_id = $1")
                    .bind(id).fetch_one(&mut *tx).await?;
            if usize::try_from(count).unwrap_or(usize::MAX) > max {
                tx.rollback().await?;
                TagChange::TooMany
            } else {
                tx.commit().await?;
                TagChange::Done
            }
        });
        Ok(change)
    }

    /// Removes tag `tag` from image `id`.
    pub async fn remove_tag(&self, id: &str, tag: &str, now: i64) -> Result<TagChange> {
        let change = on_db!(self, pool => {
            let mut tx = pool.begin_write().await?;
            let n = sqlx::query("UPDATE images SET updated_at = $2 WHERE id = $1")
                .bind(id).bind(now).execute(&mut *tx).await?.rows_affected();
            if n == 0 {
                return Ok(TagChange::NoImage);
            }
            let n = sqlx::query("DELETE FROM image_tags WHERE image_id = $1 AND value = $2")
                .bind(id).bind(tag).execute(&mut *tx).await?.rows_affected();
            if n == 0 {
                tx.rollback().await?;
                TagChange::NoTag
            } else {
                tx.commit().await?;
                TagChange::Done
            }
        });
        Ok(change)
    }

    /// Ids of the images in status `status`.
    pub async fn ids_in_status(&self, status: &str) -> Result<Vec<String>> {
        let rows: Vec<(String,)> = on_db!(self, pool => sqlx::query_as(
            "SELECT id FROM images WHERE status = $1 ORDER BY id")
            .bind(status).fetch_all(pool).await)?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }
}

/// What [`Db::delete`] removed.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Deleted {
    /// The status it had.
    pub status: String,
    /// Its data's file name, if it had data.
    pub location: Option<String>,
}

/// The outcome of [`Db::add_tag`] and [`Db::remove_tag`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagChange {
    /// Done (or nothing to do: the tag was there already).
    Done,
    /// No image `id`.
    NoImage,
    /// The tag was not on the image (remove).
    NoTag,
    /// Adding it would pass the tag quota (add).
    TooMany,
}
