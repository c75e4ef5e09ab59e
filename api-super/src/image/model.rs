//! Domain types of the image service: the id newtype, visibility, status,
//! the allowed formats, and an image with its properties and tags.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use uuid::Uuid;

use super::db::ImageRow;
use super::error::ImageError;

/// An image's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ImageId(pub Uuid);

impl ImageId {
    /// A new random id.
    pub fn new_random() -> Self {
        Self(Uuid::new_v4())
    }
}

impl fmt::Display for ImageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

impl FromStr for ImageId {
    type Err = uuid::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s).map(Self)
    }
}

/// Who may see an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visibility {
    /// Everybody, listed for everybody.
    Public,
    /// Everybody who knows the id; listed only when asked for.
    Community,
    /// The owner (and, in Glance, its members: not built here).
    Shared,
    /// The owner.
    Private,
}

impl Visibility {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Public => "public",
            Self::Community => "community",
            Self::Shared => "shared",
            Self::Private => "private",
        }
    }
}

impl FromStr for Visibility {
    type Err = ImageError;
    fn from_str(s: &str) -> Result<Self, ImageError> {
        Ok(match s {
            "public" => Self::Public,
            "community" => Self::Community,
            "shared" => Self::Shared,
            "private" => Self::Private,
            _ => {
                return Err(ImageError::BadRequest(format!(
                    "Invalid visibility value: {s}"
                )))
            }
        })
    }
}

/// An image's life cycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageStatus {
    /// Created, no data yet.
    Queued,
    /// Data being uploaded.
    Saving,
    /// Data stored; bootable.
    Active,
    /// An upload failed beyond repair.
    Killed,
    /// Data stored, but held back by an admin or the owner: not bootable,
    /// and only admins may download it.
    Deactivated,
    /// Deleted (never stored: rows are removed).
    Deleted,
}

impl ImageStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Saving => "saving",
            Self::Active => "active",
            Self::Killed => "killed",
            Self::Deactivated => "deactivated",
            Self::Deleted => "deleted",
        }
    }
}

impl FromStr for ImageStatus {
    type Err = ImageError;
    fn from_str(s: &str) -> Result<Self, ImageError> {
        Ok(match s {
            "queued" => Self::Queued,
            "saving" => Self::Saving,
            "active" => Self::Active,
            "killed" => Self::Killed,
            "deactivated" => Self::Deactivated,
            "deleted" => Self::Deleted,
            _ => return Err(ImageError::BadRequest(format!("Invalid status value: {s}"))),
        })
    }
}

/// Glance's default `disk_formats`.
pub const DISK_FORMATS: &[&str] = &[
    "ami", "ari", "aki", "vhd", "vhdx", "vmdk", "raw", "qcow2", "vdi", "iso", "ploop",
];

/// Glance's default `container_formats`.
pub const CONTAINER_FORMATS: &[&str] = &[
    "ami",
    "ari",
    "aki",
    "bare",
    "ovf",
    "ova",
    "docker",
    "compressed",
];

/// Attributes a client never sets (403 "is read-only").
pub const READ_ONLY: &[&str] = &[
    "id",
    "status",
    "checksum",
    "os_hash_algo",
    "os_hash_value",
    "size",
    "virtual_size",
    "created_at",
    "updated_at",
    "self",
    "file",
    "schema",
    "direct_url",
    "locations",
    "stores",
];

/// Attributes nobody sets (403 "is reserved").
pub const RESERVED: &[&str] = &["location", "deleted", "deleted_at"];

/// Glance's reserved namespace: no client sets or removes a property whose
/// name starts with it (403 "is reserved").
pub const RESERVED_NAMESPACE: &str = "os_glance";

/// Whether `key` is reserved ([`RESERVED`] or in [`RESERVED_NAMESPACE`]).
pub fn is_reserved(key: &str) -> bool {
    RESERVED.contains(&key) || key.starts_with(RESERVED_NAMESPACE)
}

/// Core attributes a client may set (everything else is an extra property).
pub const SETTABLE: &[&str] = &[
    "name",
    "visibility",
    "protected",
    "os_hidden",
    "min_ram",
    "min_disk",
    "disk_format",
    "container_format",
    "owner",
    "tags",
];

/// Longest name, tag and property name (Glance: 255).
pub const MAX_NAME: usize = 255;
/// Longest extra property value (Glance's column is TEXT; 64 KiB here).
pub const MAX_PROPERTY_VALUE: usize = 65_535;
/// Most tags on one image (Glance's `image_tag_quota`).
pub const MAX_TAGS: usize = 128;
/// Most extra properties on one image (Glance's `image_property_quota`).
pub const MAX_PROPERTIES: usize = 128;

/// An image: its row, extra properties and tags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// The core attributes.
    pub row: ImageRow,
    /// Extra properties (free-form strings).
    pub properties: BTreeMap<String, String>,
    /// Tags, sorted.
    pub tags: Vec<String>,
}

impl Image {
    /// The id as stored.
    pub fn id(&self) -> &str {
        &self.row.id
    }

    /// The visibility (`shared` when the stored value is unknown).
    pub fn visibility(&self) -> Visibility {
        self.row.visibility.parse().unwrap_or(Visibility::Shared)
    }

    /// The status (`killed` when the stored value is unknown).
    pub fn status(&self) -> ImageStatus {
        self.row.status.parse().unwrap_or(ImageStatus::Killed)
    }
}

/// Sets attribute `key` of `img` from a JSON value (a create's member or a
/// patch's `add`/`replace`), validating it as Glance's schema does.
/// `id` is handled by the create itself.
pub fn set_attribute(
    img: &mut Image,
    key: &str,
    value: &serde_json::Value,
    creating: bool,
) -> Result<(), ImageError> {
    use serde_json::Value;
    if READ_ONLY.contains(&key) {
        return Err(ImageError::Forbidden(format!(
            "Attribute '{key}' is read-only."
        )));
    }
    if is_reserved(key) {
        return Err(ImageError::Forbidden(format!(
            "Attribute '{key}' is reserved."
        )));
    }
    let invalid = |why: &str| {
        ImageError::BadRequest(format!(
            "Provided object does not match schema 'image': {why} ('{key}')"
        ))
    };
    let string_or_null = |max: usize| -> Result<Option<String>, ImageError> {
        match value {
            Value::Null => Ok(None),
            Value::String(s) if s.chars().count() <= max => Ok(Some(s.clone())),
            Value::String(_) => Err(invalid(&format!("is longer than {max} characters"))),
            _ => Err(invalid("is not of type 'string', 'null'")),
        }
    };
    let r = &mut img.row;
    match key {
        "name" => r.name = string_or_null(MAX_NAME)?,
        "owner" => {
            r.owner = string_or_null(MAX_NAME)?
                .filter(|s| !s.is_empty())
                .ok_or_else(|| invalid("is not a project id"))?
        }
        "visibility" => {
            let v = value
                .as_str()
                .ok_or_else(|| invalid("is not one of public, community, shared, private"))?;
            r.visibility = v.parse::<Visibility>()?.as_str().to_owned();
        }
        "protected" => {
            r.protected = value
                .as_bool()
                .ok_or_else(|| invalid("is not of type 'boolean'"))?
        }
        "os_hidden" => {
            r.os_hidden = value
                .as_bool()
                .ok_or_else(|| invalid("is not of type 'boolean'"))?
        }
        "min_ram" | "min_disk" => {
            let n = value
                .as_i64()
                .filter(|n| (0..=i64::from(i32::MAX)).contains(n))
                .ok_or_else(|| invalid("is not a non-negative integer"))?;
            if key == "min_ram" {
                r.min_ram = n;
            } else {
                r.min_disk = n;
            }
        }
        "disk_format" | "container_format" => {
            let allowed = if key == "disk_format" {
                DISK_FORMATS
            } else {
                CONTAINER_FORMATS
            };
            let v = string_or_null(MAX_NAME)?;
            if let Some(f) = &v {
                if !allowed.contains(&f.as_str()) {
                    return Err(invalid(&format!(
                        "'{f}' is not one of {}",
                        allowed.join(", ")
                    )));
                }
            }
            let slot = if key == "disk_format" {
                &mut r.disk_format
            } else {
                &mut r.container_format
            };
            if !creating && *slot != v && r.status != ImageStatus::Queued.as_str() {
                return Err(ImageError::Forbidden(format!(
                    "Attribute {key} can be only replaced for a queued image."
                )));
            }
            *slot = v;
        }
        "tags" => {
            let arr = value
                .as_array()
                .ok_or_else(|| invalid("is not of type 'array'"))?;
            let mut tags = Vec::with_capacity(arr.len());
            for t in arr {
                let t = t
                    .as_str()
                    .filter(|t| !t.is_empty() && t.chars().count() <= MAX_NAME)
                    .ok_or_else(|| {
                        invalid("holds a tag that is not a string of 1 to 255 characters")
                    })?;
                tags.push(t.to_owned());
            }
            tags.sort();
            tags.dedup();
            if tags.len() > MAX_TAGS {
                return Err(ImageError::TooLarge(format!(
                    "Maximum number of tags exceeded: at most {MAX_TAGS}."
                )));
            }
            img.tags = tags;
        }
        _ => {
            if key.is_empty() || key.chars().count() > MAX_NAME {
                return Err(invalid("is not a property name of 1 to 255 characters"));
            }
            let v = value
                .as_str()
                .ok_or_else(|| invalid("is not of type 'string'"))?;
            if v.len() > MAX_PROPERTY_VALUE {
                return Err(invalid("is too long"));
            }
            if !img.properties.contains_key(key) && img.properties.len() >= MAX_PROPERTIES {
                return Err(ImageError::TooLarge(format!(
                    "Maximum number of properties exceeded: at most {MAX_PROPERTIES}."
                )));
            }
            img.properties.insert(key.to_owned(), v.to_owned());
        }
    }
    Ok(())
}

/// Whether `key` names an extra property (not a core attribute).
pub fn is_extra(key: &str) -> bool {
    !(READ_ONLY.contains(&key) || is_reserved(key) || SETTABLE.contains(&key))
}

/// Removes attribute `key` (a patch's `remove`): only extra properties can
/// be removed; a missing one is a 409 as in Glance.
pub fn remove_attribute(img: &mut Image, key: &str) -> Result<(), ImageError> {
    if READ_ONLY.contains(&key) {
        return Err(ImageError::Forbidden(format!(
            "Attribute '{key}' is read-only."
        )));
    }
    if is_reserved(key) {
        return Err(ImageError::Forbidden(format!(
            "Attribute '{key}' is reserved."
        )));
    }
    if SETTABLE.contains(&key) {
        return Err(ImageError::Forbidden(format!(
            "Attribute '{key}' is a base property and cannot be removed."
        )));
    }
    if img.properties.remove(key).is_none() {
        return Err(ImageError::Conflict(format!(
            "Property {key} does not exist."
        )));
    }
    Ok(())
}
