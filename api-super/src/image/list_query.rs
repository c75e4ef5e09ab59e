//! What a `GET /v2/images` asks for: sort keys, filters on fields and
//! times, the page. Parsed by the API, answered by [`super::service`].

use std::cmp::Ordering;
use std::collections::BTreeMap;

use super::db::{ImageRow, ListFilter};
use super::error::{ImageError, Result};
use super::model::Image;

/// A sort key of `GET /v2/images` (Glance's `_available_sort_keys`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    /// `name`.
    Name,
    /// `status`.
    Status,
    /// `container_format`.
    ContainerFormat,
    /// `disk_format`.
    DiskFormat,
    /// `size`.
    Size,
    /// `id`.
    Id,
    /// `created_at`.
    CreatedAt,
    /// `updated_at`.
    UpdatedAt,
}

/// The sort keys Glance accepts, in its order (for its 400 message).
pub const SORT_KEYS: &str =
    "name, status, container_format, disk_format, size, id, created_at, updated_at";

impl std::str::FromStr for SortKey {
    type Err = ImageError;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "name" => Self::Name,
            "status" => Self::Status,
            "container_format" => Self::ContainerFormat,
            "disk_format" => Self::DiskFormat,
            "size" => Self::Size,
            "id" => Self::Id,
            "created_at" => Self::CreatedAt,
            "updated_at" => Self::UpdatedAt,
            _ => {
                return Err(ImageError::BadRequest(format!(
                    "Invalid sort key: {s}. It must be one of the following: {SORT_KEYS}."
                )))
            }
        })
    }
}

impl SortKey {
    pub(super) fn cmp(self, a: &ImageRow, b: &ImageRow) -> Ordering {
        match self {
            Self::Name => a.name.cmp(&b.name),
            Self::Status => a.status.cmp(&b.status),
            Self::ContainerFormat => a.container_format.cmp(&b.container_format),
            Self::DiskFormat => a.disk_format.cmp(&b.disk_format),
            Self::Size => a.size.cmp(&b.size),
            Self::Id => a.id.cmp(&b.id),
            Self::CreatedAt => a.created_at.cmp(&b.created_at),
            Self::UpdatedAt => a.updated_at.cmp(&b.updated_at),
        }
    }
}

/// A core attribute a list filter may match against a set of values
/// (`?id=in:a,b`, `?status=queued`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListField {
    /// `id`.
    Id,
    /// `name`.
    Name,
    /// `status`.
    Status,
    /// `disk_format`.
    DiskFormat,
    /// `container_format`.
    ContainerFormat,
    /// `checksum`.
    Checksum,
    /// `os_hash_value`.
    OsHashValue,
}

impl ListField {
    fn of(self, r: &ImageRow) -> Option<&str> {
        match self {
            Self::Id => Some(&r.id),
            Self::Name => r.name.as_deref(),
            Self::Status => Some(&r.status),
            Self::DiskFormat => r.disk_format.as_deref(),
            Self::ContainerFormat => r.container_format.as_deref(),
            Self::Checksum => r.checksum.as_deref(),
            Self::OsHashValue => r.os_hash_value.as_deref(),
        }
    }
}

/// A timestamp a list filter compares (`?created_at=gt:…`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeField {
    /// `created_at`.
    CreatedAt,
    /// `updated_at`.
    UpdatedAt,
}

/// A comparison of Glance's time filters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    /// `eq:` (the default).
    Eq,
    /// `neq:`.
    Neq,
    /// `gt:`.
    Gt,
    /// `gte:`.
    Gte,
    /// `lt:`.
    Lt,
    /// `lte:`.
    Lte,
}

impl CmpOp {
    fn holds(self, o: Ordering) -> bool {
        match self {
            Self::Eq => o == Ordering::Equal,
            Self::Neq => o != Ordering::Equal,
            Self::Gt => o == Ordering::Greater,
            Self::Gte => o != Ordering::Less,
            Self::Lt => o == Ordering::Less,
            Self::Lte => o != Ordering::Greater,
        }
    }
}

/// Filters applied in the process after the SQL ones (a conjunction).
#[derive(Debug, Clone, Default)]
pub struct RowFilters {
    /// The attribute must be one of the values.
    pub any_of: Vec<(ListField, Vec<String>)>,
    /// `size` at least this (an image without data never matches).
    pub size_min: Option<i64>,
    /// `size` at most this (an image without data never matches).
    pub size_max: Option<i64>,
    /// `protected` must equal this.
    pub protected: Option<bool>,
    /// Time comparisons, Unix ms, to the second as the API shows times.
    pub times: Vec<(TimeField, CmpOp, i64)>,
    /// `min_ram` at least this (the Compute API's `/images?minRam=`).
    pub min_ram_at_least: Option<i64>,
    /// `min_disk` at least this (the Compute API's `/images?minDisk=`).
    pub min_disk_at_least: Option<i64>,
}

impl RowFilters {
    pub(super) fn matches(&self, r: &ImageRow) -> bool {
        let second = |ms: i64| ms.div_euclid(1000) * 1000;
        self.any_of
            .iter()
            .all(|(f, vs)| f.of(r).is_some_and(|v| vs.iter().any(|x| x == v)))
            && self.size_min.is_none_or(|m| r.size.is_some_and(|s| s >= m))
            && self.size_max.is_none_or(|m| r.size.is_some_and(|s| s <= m))
            && self.protected.is_none_or(|p| r.protected == p)
            && self.min_ram_at_least.is_none_or(|m| r.min_ram >= m)
            && self.min_disk_at_least.is_none_or(|m| r.min_disk >= m)
            && self.times.iter().all(|(f, op, t)| {
                let v = match f {
                    TimeField::CreatedAt => r.created_at,
                    TimeField::UpdatedAt => r.updated_at,
                };
                op.holds(second(v).cmp(t))
            })
    }
}

/// A parsed `GET /v2/images` query.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    /// SQL-side filters (the scope is set by [`ImageService::list`]).
    pub filter: ListFilter,
    /// `visibility=all`, or `visibility=community`: community images listed.
    pub include_community: bool,
    /// Every tag must be present.
    pub tags: Vec<String>,
    /// Extra property filters (name → value).
    pub properties: BTreeMap<String, String>,
    /// Filters on core attributes applied after the SQL ones.
    pub rows: RowFilters,
    /// Sort keys with direction (true: ascending).
    pub sort: Vec<(SortKey, bool)>,
    /// Page size.
    pub limit: Option<u32>,
    /// Id of the last image of the previous page.
    pub marker: Option<String>,
}

/// A page of images.
#[derive(Debug, Clone)]
pub struct Page {
    /// The images.
    pub images: Vec<Image>,
    /// Whether more follow (the marker is the last image).
    pub more: bool,
    /// The page size used.
    pub limit: u32,
}
