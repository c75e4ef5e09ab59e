//! Flavor rows as the API database holds them, Nova's default flavors,
//! and the column lists the flavor statements share. A part of [`super`].

use super::*;

/// A flavor row.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Flavor {
    /// Row id.
    pub id: i64,
    /// `flavorid` (the API id).
    pub flavorid: String,
    /// Name.
    pub name: String,
    /// RAM, MB.
    pub memory_mb: i64,
    /// VCPUs.
    pub vcpus: i64,
    /// Root disk, GB.
    pub root_gb: i64,
    /// Ephemeral disk, GB.
    pub ephemeral_gb: i64,
    /// Swap, MB.
    pub swap: i64,
    /// RX/TX factor.
    pub rxtx_factor: f64,
    /// Disabled.
    pub disabled: bool,
    /// Public.
    pub is_public: bool,
    /// Description.
    pub description: Option<String>,
}

impl Flavor {
    /// The copy stored with an instance.
    pub fn to_instance_flavor(&self) -> InstanceFlavor {
        InstanceFlavor {
            flavorid: self.flavorid.clone(),
            name: self.name.clone(),
            vcpus: self.vcpus,
            memory_mb: self.memory_mb,
            root_gb: self.root_gb,
            ephemeral_gb: self.ephemeral_gb,
            swap: self.swap,
        }
    }
}

/// A flavor to create.
#[derive(Debug, Clone, PartialEq)]
pub struct NewFlavor {
    /// `flavorid`.
    pub flavorid: String,
    /// Name.
    pub name: String,
    /// RAM, MB.
    pub memory_mb: i64,
    /// VCPUs.
    pub vcpus: i64,
    /// Root disk, GB.
    pub root_gb: i64,
}

/// Nova's classic default flavors (as `nova-manage` used to create them).
pub fn default_flavors() -> Vec<NewFlavor> {
    [
        ("1", "m1.tiny", 512, 1, 1),
        ("2", "m1.small", 2048, 1, 20),
        ("3", "m1.medium", 4096, 2, 40),
        ("4", "m1.large", 8192, 4, 80),
        ("5", "m1.xlarge", 16384, 8, 160),
    ]
    .into_iter()
    .map(|(id, name, ram, vcpus, disk)| NewFlavor {
        flavorid: id.into(),
        name: name.into(),
        memory_mb: ram,
        vcpus,
        root_gb: disk,
    })
    .collect()
}

pub(super) const FLAVOR_COLUMNS: &str =
    "id, flavorid, name, memory_mb, vcpus, root_gb, ephemeral_gb, swap, \
    rxtx_factor, disabled, is_public, description";

/// `FROM … WHERE` of the flavor with API id `$1` as project `$2` may see
/// it (`$3`: an admin sees any): public, or private with access for `$2`.
pub(super) const FLAVOR_VISIBLE: &str =
    "FROM flavors f WHERE f.flavorid = $1 AND ($3 OR f.is_public \
    OR EXISTS (SELECT 1 FROM flavor_projects fp WHERE fp.flavor_id = f.id AND fp.project_id = $2))";
