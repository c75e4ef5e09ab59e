//! The statements on a cell database that the API layer (api-super's
//! Compute API, super-conductor and scheduler) needs: creating an instance
//! row when a build lands in a cell (or in cell0 in ERROR with its fault),
//! reads and the multi-cell list, the API's own updates (rename, `deleting`,
//! local delete of an instance that never reached a host or whose compute
//! service is down), and the compute
//! services and nodes the scheduler filters on.
//!
//! The cell conductor keeps its own statements for what computes ask of it;
//! both write the same columns with the same vocabulary (`fabric::rpc`).

use chrono::{DateTime, Utc};
use migrations::BeginWrite;

use super::{placeholders, with_pool, CellDb, Pool, CHUNK};
use crate::metrics::measured;
use crate::Error;

/// The flavor copied onto an instance (`instance_extra.flavor`, JSON).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct InstanceFlavor {
    /// `flavorid`.
    pub flavorid: String,
    /// Name.
    pub name: String,
    /// VCPU.
    pub vcpus: i64,
    /// MEMORY_MB.
    pub memory_mb: i64,
    /// Root disk, GB.
    pub root_gb: i64,
    /// Ephemeral disk, GB.
    pub ephemeral_gb: i64,
    /// Swap, MB.
    pub swap: i64,
}

/// An instance with its metadata and tags ([`CellDb::api_instance_shown`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ShownInstance {
    /// The instance.
    pub instance: CellInstance,
    /// Its metadata, sorted by key.
    pub metadata: Vec<(String, String)>,
    /// Its tags, sorted.
    pub tags: Vec<String>,
    /// Its trusted certificates (2.63), if any.
    pub trusted_certs: Option<Vec<String>>,
}

#[derive(Debug, sqlx::FromRow)]
struct ShownRow {
    #[sqlx(flatten)]
    instance: CellInstance,
    metadata_json: Option<String>,
    tags_json: Option<String>,
    trusted_certs_json: Option<String>,
}

/// An instance as the API shows it.
#[derive(Debug, Clone, Default, PartialEq, sqlx::FromRow)]
pub struct CellInstance {
    /// `id` (the row's; `None` for a build request shown as one).
    pub id: Option<i64>,
    /// `uuid`.
    pub uuid: String,
    /// `project_id`.
    pub project_id: String,
    /// `user_id`.
    pub user_id: String,
    /// `display_name`.
    pub display_name: Option<String>,
    /// `host`.
    pub host: Option<String>,
    /// `node`.
    pub node: Option<String>,
    /// `vm_state`.
    pub vm_state: Option<String>,
    /// `task_state`.
    pub task_state: Option<String>,
    /// `power_state`.
    pub power_state: Option<i64>,
    /// `availability_zone`.
    pub availability_zone: Option<String>,
    /// `image_ref`.
    pub image_ref: Option<String>,
    /// `reservation_id`.
    pub reservation_id: Option<String>,
    /// `launch_index`.
    pub launch_index: Option<i64>,
    /// `launched_at`.
    pub launched_at: Option<DateTime<Utc>>,
    /// `created_at`.
    pub created_at: DateTime<Utc>,
    /// `updated_at`.
    pub updated_at: Option<DateTime<Utc>>,
    /// `deleted`.
    pub deleted: bool,
    /// `progress`.
    pub progress: Option<i64>,
    /// `instance_extra.flavor` (JSON).
    pub flavor: Option<String>,
    /// `locked`.
    pub locked: bool,
    /// `locked_by` (`owner` or `admin`).
    pub locked_by: Option<String>,
    /// `instance_system_metadata['locked_reason']` (as upstream).
    pub locked_reason: Option<String>,
    /// `user_data` (base64, as given at create).
    pub user_data: Option<String>,
    /// `hostname` (2.90's, else Nova's sanitized display name).
    pub hostname: Option<String>,
    /// `terminated_at` (deleted instances).
    pub terminated_at: Option<DateTime<Utc>>,
    /// `kernel_id` (never set in this cloud).
    pub kernel_id: Option<String>,
    /// `ramdisk_id` (never set in this cloud).
    pub ramdisk_id: Option<String>,
    /// `config_drive`: `True` when the guest has one.
    pub config_drive: Option<String>,
    /// `display_description` (2.19's `description`).
    pub display_description: Option<String>,
    /// `root_device_name` (never set in this cloud).
    pub root_device_name: Option<String>,
    /// `access_ip_v4` (`accessIPv4`).
    pub access_ip_v4: Option<String>,
    /// `access_ip_v6` (`accessIPv6`).
    pub access_ip_v6: Option<String>,
    /// `auto_disk_config` (never set in this cloud).
    pub auto_disk_config: Option<bool>,
    /// `key_name` (written at create; rows written before it was are
    /// `NULL`: their key name is in the API database's request spec).
    pub key_name: Option<String>,
}

/// What `PUT /servers/{id}` changes on an instance (`None`: left as it
/// is).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InstanceEdit {
    /// The display name.
    pub name: Option<String>,
    /// The description (2.19; `Some(None)` clears it).
    pub description: Option<Option<String>>,
    /// The hostname (2.90).
    pub hostname: Option<String>,
    /// `accessIPv4`.
    pub access_ip_v4: Option<String>,
    /// `accessIPv6`.
    pub access_ip_v6: Option<String>,
}

impl InstanceEdit {
    /// Nothing to change.
    pub fn is_empty(&self) -> bool {
        *self == InstanceEdit::default()
    }
}

/// The latest fault of an instance.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct CellFault {
    /// Instance.
    pub instance_uuid: String,
    /// Code.
    pub code: i64,
    /// Message.
    pub message: Option<String>,
    /// Details.
    pub details: Option<String>,
    /// When.
    pub created_at: DateTime<Utc>,
}

/// A compute node with its service (what the scheduler filters on).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ComputeHost {
    /// Node uuid (= placement resource provider uuid).
    pub uuid: String,
    /// Service host.
    pub host: String,
    /// Node name.
    pub hypervisor_hostname: String,
    /// The service is disabled.
    pub disabled: bool,
    /// The service is forced down.
    pub forced_down: bool,
    /// Last heartbeat.
    pub last_seen_up: Option<DateTime<Utc>>,
    /// The node's `stats` JSON document (written by the cell conductor;
    /// `failed_builds` counts its consecutive build failures).
    pub stats: Option<String>,
    /// `hypervisor_version` (Nova's integer encoding).
    pub hypervisor_version: i64,
    /// `supported_instances`: JSON `[[arch, hv_type, vm_mode], …]`.
    pub supported_instances: Option<String>,
}

impl ComputeHost {
    /// The node's supported instances (absent or unreadable: none).
    pub fn supported_instances(&self) -> Vec<[String; 3]> {
        self.supported_instances
            .as_deref()
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default()
    }

    /// The node's consecutive build failures (`stats.failed_builds`;
    /// absent or unreadable: 0).
    pub fn failed_builds(&self) -> u64 {
        self.stats
            .as_deref()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
            .and_then(|v| v.get("failed_builds").and_then(serde_json::Value::as_u64))
            .unwrap_or(0)
    }
}

/// A page of a listing, in `order`, after the position `after`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListFilter {
    /// Only this project (`None`: every project).
    pub project_id: Option<String>,
    /// Only these `vm_state`s (empty: any).
    pub vm_states: Vec<String>,
    /// Only instances on this host.
    pub host: Option<String>,
    /// Only instances changed at or after this time (`changes-since`;
    /// `updated_at`, or `created_at` when never updated).
    pub changes_since: Option<DateTime<Utc>>,
    /// Only instances changed at or before this time (`changes-before`).
    pub changes_before: Option<DateTime<Utc>>,
    /// Deleted instances too (a `changes-since` listing, as upstream).
    pub include_deleted: bool,
    /// Only deleted instances (an administrator's `deleted=true`, or
    /// `status=DELETED`); wins over `include_deleted`.
    pub only_deleted: bool,
    /// Only these `task_state`s (empty: any; NULL never matches one).
    pub task_states: Vec<String>,
    /// Only this instance (`uuid`, exact).
    pub uuid: Option<String>,
    /// Only this user's instances (`user_id`, exact).
    pub user_id: Option<String>,
    /// Only instances of this image (`image_ref`, exact).
    pub image_ref: Option<String>,
    /// Only instances of this flavor: the `flavorid` of the flavor copied
    /// onto the instance (`instance_extra.flavor`).
    pub flavorid: Option<String>,
    /// Only locked (`Some(true)`) or unlocked (`Some(false)`) instances.
    pub locked: Option<bool>,
    /// Instances with all of these tags (`tags`).
    pub tags: Vec<String>,
    /// Instances with at least one of these tags (`tags-any`).
    pub tags_any: Vec<String>,
    /// Instances without all of these tags together (`not-tags`).
    pub not_tags: Vec<String>,
    /// Instances with none of these tags (`not-tags-any`).
    pub not_tags_any: Vec<String>,
    /// The sort.
    pub order: ListOrder,
    /// Keyset marker: rows strictly after this position (the sort values
    /// of the last row of the previous page, one per key of `order`).
    pub after: Option<Vec<SortValue>>,
    /// At most this many rows.
    pub limit: i64,
}

/// A column the server list sorts on: Nova's `sort_key`s whose values this
/// cloud stores. Each sorts on a value that is never NULL, the same in SQL
/// ([`SortKey::sql`]) and in the API's merge of per-cell pages: a missing
/// text is `""`, a missing number `0`, a missing `updated_at` is the
/// creation time and a missing `launched_at` the Unix epoch. Text compares
/// byte-wise (PostgreSQL: `COLLATE "C"`, SQLite's default), so every cell
/// and the merge agree whatever the database's collation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    /// `created_at`.
    CreatedAt,
    /// `updated_at`.
    UpdatedAt,
    /// `launched_at`.
    LaunchedAt,
    /// `display_name`.
    DisplayName,
    /// `host` (admins only, as upstream).
    Host,
    /// `node` (admins only, as upstream).
    Node,
    /// `availability_zone`.
    AvailabilityZone,
    /// `project_id`.
    ProjectId,
    /// `user_id`.
    UserId,
    /// `uuid`.
    Uuid,
    /// `vm_state`.
    VmState,
    /// `task_state`.
    TaskState,
    /// `power_state`.
    PowerState,
    /// `progress`.
    Progress,
    /// `image_ref`.
    ImageRef,
    /// `locked` (2.73).
    Locked,
    /// `locked_by`.
    LockedBy,
    /// `launch_index`.
    LaunchIndex,
    /// `terminated_at`.
    TerminatedAt,
    /// `hostname`.
    Hostname,
    /// `config_drive`.
    ConfigDrive,
    /// `kernel_id`.
    KernelId,
    /// `ramdisk_id`.
    RamdiskId,
    /// `display_description`.
    DisplayDescription,
    /// `root_device_name`.
    RootDeviceName,
    /// `access_ip_v4`.
    AccessIpV4,
    /// `access_ip_v6`.
    AccessIpV6,
    /// `auto_disk_config`.
    AutoDiskConfig,
}

/// A [`SortKey`]'s value in one row.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum SortValue {
    /// Text (byte-wise order).
    Text(String),
    /// Integer.
    Int(i64),
    /// Time.
    Time(DateTime<Utc>),
}

impl SortKey {
    /// The key named `name` (Nova's `sort_key` vocabulary), if stored here.
    pub fn parse(name: &str) -> Option<SortKey> {
        Some(match name {
            "created_at" => SortKey::CreatedAt,
            "updated_at" => SortKey::UpdatedAt,
            "launched_at" => SortKey::LaunchedAt,
            "display_name" => SortKey::DisplayName,
            "host" => SortKey::Host,
            "node" => SortKey::Node,
            "availability_zone" => SortKey::AvailabilityZone,
            "project_id" => SortKey::ProjectId,
            "user_id" => SortKey::UserId,
            "uuid" => SortKey::Uuid,
            "vm_state" => SortKey::VmState,
            "task_state" => SortKey::TaskState,
            "power_state" => SortKey::PowerState,
            "progress" => SortKey::Progress,
            "image_ref" => SortKey::ImageRef,
            "locked" => SortKey::Locked,
            "locked_by" => SortKey::LockedBy,
            "launch_index" => SortKey::LaunchIndex,
            "terminated_at" => SortKey::TerminatedAt,
            "hostname" => SortKey::Hostname,
            "config_drive" => SortKey::ConfigDrive,
            "kernel_id" => SortKey::KernelId,
            "ramdisk_id" => SortKey::RamdiskId,
            "display_description" => SortKey::DisplayDescription,
            "root_device_name" => SortKey::RootDeviceName,
            "access_ip_v4" => SortKey::AccessIpV4,
            "access_ip_v6" => SortKey::AccessIpV6,
            "auto_disk_config" => SortKey::AutoDiskConfig,
            _ => return None,
        })
    }

    /// The SQL expression sorted on (never NULL), on `instances i`.
    pub fn sql(self, postgres: bool) -> String {
        let text = |col: &str| {
            if postgres {
                format!("COALESCE(i.{col}, '') COLLATE \"C\"")
            } else {
                format!("COALESCE(i.{col}, '')")
            }
        };
        let epoch = |col: &str| {
            if postgres {
                format!("COALESCE(i.{col}, TIMESTAMPTZ '1970-01-01 00:00:00+00')")
            } else {
                // sqlx stores SQLite times as RFC 3339 text.
                format!("COALESCE(i.{col}, '1970-01-01T00:00:00+00:00')")
            }
        };
        match self {
            SortKey::CreatedAt => "i.created_at".into(),
            SortKey::UpdatedAt => "COALESCE(i.updated_at, i.created_at)".into(),
            SortKey::LaunchedAt => epoch("launched_at"),
            SortKey::TerminatedAt => epoch("terminated_at"),
            // Never NULL: no COALESCE, so the index serves it.
            SortKey::Uuid if postgres => "i.uuid COLLATE \"C\"".into(),
            SortKey::Uuid => "i.uuid".into(),
            SortKey::DisplayName => text("display_name"),
            SortKey::Host => text("host"),
            SortKey::Node => text("node"),
            SortKey::AvailabilityZone => text("availability_zone"),
            SortKey::ProjectId => text("project_id"),
            SortKey::UserId => text("user_id"),
            SortKey::VmState => text("vm_state"),
            SortKey::TaskState => text("task_state"),
            SortKey::ImageRef => text("image_ref"),
            SortKey::LockedBy => text("locked_by"),
            SortKey::Hostname => text("hostname"),
            SortKey::ConfigDrive => text("config_drive"),
            SortKey::KernelId => text("kernel_id"),
            SortKey::RamdiskId => text("ramdisk_id"),
            SortKey::DisplayDescription => text("display_description"),
            SortKey::RootDeviceName => text("root_device_name"),
            SortKey::AccessIpV4 => text("access_ip_v4"),
            SortKey::AccessIpV6 => text("access_ip_v6"),
            SortKey::PowerState => "COALESCE(i.power_state, 0)".into(),
            SortKey::Progress => "COALESCE(i.progress, 0)".into(),
            SortKey::LaunchIndex => "COALESCE(i.launch_index, 0)".into(),
            SortKey::Locked => "(CASE WHEN i.locked THEN 1 ELSE 0 END)".into(),
            SortKey::AutoDiskConfig => "(CASE WHEN i.auto_disk_config THEN 1 ELSE 0 END)".into(),
        }
    }

    /// The value of this key in `i`, as [`SortKey::sql`] computes it.
    pub fn value(self, i: &CellInstance) -> SortValue {
        let text = |v: &Option<String>| SortValue::Text(v.clone().unwrap_or_default());
        match self {
            SortKey::CreatedAt => SortValue::Time(i.created_at),
            SortKey::UpdatedAt => SortValue::Time(i.updated_at.unwrap_or(i.created_at)),
            SortKey::LaunchedAt => SortValue::Time(i.launched_at.unwrap_or(DateTime::UNIX_EPOCH)),
            SortKey::TerminatedAt => {
                SortValue::Time(i.terminated_at.unwrap_or(DateTime::UNIX_EPOCH))
            }
            SortKey::DisplayName => text(&i.display_name),
            SortKey::Host => text(&i.host),
            SortKey::Node => text(&i.node),
            SortKey::AvailabilityZone => text(&i.availability_zone),
            SortKey::ProjectId => SortValue::Text(i.project_id.clone()),
            SortKey::UserId => SortValue::Text(i.user_id.clone()),
            SortKey::Uuid => SortValue::Text(i.uuid.clone()),
            SortKey::VmState => text(&i.vm_state),
            SortKey::TaskState => text(&i.task_state),
            SortKey::ImageRef => text(&i.image_ref),
            SortKey::LockedBy => text(&i.locked_by),
            SortKey::Hostname => text(&i.hostname),
            SortKey::ConfigDrive => text(&i.config_drive),
            SortKey::KernelId => text(&i.kernel_id),
            SortKey::RamdiskId => text(&i.ramdisk_id),
            SortKey::DisplayDescription => text(&i.display_description),
            SortKey::RootDeviceName => text(&i.root_device_name),
            SortKey::AccessIpV4 => text(&i.access_ip_v4),
            SortKey::AccessIpV6 => text(&i.access_ip_v6),
            SortKey::PowerState => SortValue::Int(i.power_state.unwrap_or(0)),
            SortKey::Progress => SortValue::Int(i.progress.unwrap_or(0)),
            SortKey::LaunchIndex => SortValue::Int(i.launch_index.unwrap_or(0)),
            SortKey::Locked => SortValue::Int(i64::from(i.locked)),
            SortKey::AutoDiskConfig => SortValue::Int(i64::from(i.auto_disk_config == Some(true))),
        }
    }
}

/// Where a listing stands: the sort and, for the next page, the sort
/// values of the last row seen.
#[derive(Debug, Clone, PartialEq)]
pub struct ListOrder {
    /// Keys and directions (`true`: descending); the last key is
    /// [`SortKey::Uuid`], so the order is total.
    pub keys: Vec<(SortKey, bool)>,
}

impl Default for ListOrder {
    /// Newest first (`created_at` desc, then `uuid` desc).
    fn default() -> Self {
        ListOrder {
            keys: vec![(SortKey::CreatedAt, true), (SortKey::Uuid, true)],
        }
    }
}

impl ListOrder {
    /// The sort values of `i`, one per key.
    pub fn values(&self, i: &CellInstance) -> Vec<SortValue> {
        self.keys.iter().map(|(k, _)| k.value(i)).collect()
    }

    /// `a` against `b` (values of this order) in listing order.
    pub fn cmp(&self, a: &[SortValue], b: &[SortValue]) -> std::cmp::Ordering {
        for ((_, desc), (x, y)) in self.keys.iter().zip(a.iter().zip(b)) {
            let o = x.cmp(y);
            if o != std::cmp::Ordering::Equal {
                return if *desc { o.reverse() } else { o };
            }
        }
        std::cmp::Ordering::Equal
    }
}

const COLUMNS: &str = "i.id, i.uuid, i.project_id, i.user_id, i.display_name, i.host, i.node, \
    i.vm_state, i.task_state, i.power_state, i.availability_zone, i.image_ref, i.reservation_id, \
    i.launch_index, i.launched_at, i.created_at, i.updated_at, i.deleted, i.progress, \
    (SELECT e.flavor FROM instance_extra e WHERE e.instance_uuid = i.uuid) AS flavor, \
    i.locked, i.locked_by, CASE WHEN i.locked THEN (SELECT sm.value FROM instance_system_metadata sm \
    WHERE sm.instance_uuid = i.uuid AND sm.key = 'locked_reason') END AS locked_reason, i.user_data, \
    i.hostname, i.terminated_at, i.kernel_id, i.ramdisk_id, i.config_drive, i.display_description, \
    i.root_device_name, i.access_ip_v4, i.access_ip_v6, i.auto_disk_config, i.key_name";

// The lock's reason is looked up only for a locked row: it is written with
// the lock and removed with it in one transaction
// ([`CellDb::api_set_lock`]), so an unlocked row has none (a page of a
// thousand unlocked servers saves a thousand index look-ups).
// Per-row look-ups (unique indexes) rather than a join: the plan stays an
// index scan of `instances` whatever the statistics say (a fresh cell's
// stale row estimates made PostgreSQL pick a nested loop over a sequential
// scan of `instance_extra`, 1,000 × 1,000 comparisons for one page).
const FROM: &str = "instances i";

/// The event of a delete the API did itself ([`CellDb::api_local_delete`]).
pub const EV_API_LOCAL_DELETE: &str = "api_local_delete";

fn db(op: &'static str) -> impl FnOnce(sqlx::Error) -> Error {
    move |source| Error::Db { op, source }
}

impl CellDb {
    /// The instance (deleted ones too).
    pub async fn api_instance(&self, uuid: &str) -> Result<Option<CellInstance>, Error> {
        let sql = format!("SELECT {COLUMNS} FROM {FROM} WHERE i.uuid = $1");
        Ok(with_pool!(self.pool(), p => measured("api_instance_get",
            sqlx::query_as(&sql).bind(uuid).fetch_optional(p)).await?))
    }

    /// The instance (deleted ones too) with its metadata (by key) and tags
    /// (sorted), in one statement: what a single server's read needs from
    /// its cell (the faults of one in ERROR aside).
    pub async fn api_instance_shown(&self, uuid: &str) -> Result<Option<ShownInstance>, Error> {
        // Each aggregate is JSON text: NULL (PostgreSQL) or `[]` (SQLite)
        // when there is nothing; sorted below, whatever order it came in.
        let (meta, tags) = match self.pool() {
            Pool::Postgres(_) => (
                "(SELECT CAST(json_agg(json_build_array(m.key, COALESCE(m.value, ''))) AS TEXT) \
                 FROM instance_metadata m WHERE m.instance_uuid = i.uuid)",
                "(SELECT CAST(json_agg(t.tag) AS TEXT) FROM tags t WHERE t.resource_id = i.uuid)",
            ),
            Pool::Sqlite(_) => (
                "(SELECT json_group_array(json_array(m.key, COALESCE(m.value, ''))) \
                 FROM instance_metadata m WHERE m.instance_uuid = i.uuid)",
                "(SELECT json_group_array(t.tag) FROM tags t WHERE t.resource_id = i.uuid)",
            ),
        };
        let sql = format!(
            "SELECT {COLUMNS}, {meta} AS metadata_json, {tags} AS tags_json, \
             (SELECT e.trusted_certs FROM instance_extra e WHERE e.instance_uuid = i.uuid) \
             AS trusted_certs_json FROM {FROM} WHERE i.uuid = $1"
        );
        let row: Option<ShownRow> = with_pool!(self.pool(), p => measured("api_instance_shown",
            sqlx::query_as(&sql).bind(uuid).fetch_optional(p)).await?);
        let Some(row) = row else {
            return Ok(None);
        };
        fn parse<T: serde::de::DeserializeOwned + Default>(
            json: Option<String>,
        ) -> Result<T, Error> {
            match json {
                None => Ok(T::default()),
                Some(j) => serde_json::from_str(&j).map_err(|e| Error::Db {
                    op: "api_instance_shown",
                    source: sqlx::Error::Decode(Box::new(e)),
                }),
            }
        }
        let mut metadata: Vec<(String, String)> = parse(row.metadata_json)?;
        metadata.sort();
        let mut tags: Vec<String> = parse(row.tags_json)?;
        tags.sort();
        Ok(Some(ShownInstance {
            instance: row.instance,
            metadata,
            tags,
            trusted_certs: parse(row.trusted_certs_json)?,
        }))
    }

    /// Instances matching `f`, in `f.order`, after `f.after`.
    pub async fn api_instances(&self, f: &ListFilter) -> Result<Vec<CellInstance>, Error> {
        let postgres = matches!(self.pool(), super::Pool::Postgres(_));
        let mut sql = format!("SELECT {COLUMNS} FROM {FROM} WHERE TRUE");
        // The values bound, in placeholder order.
        let mut args: Vec<SortValue> = Vec::new();
        let mut bind = |v: SortValue| {
            args.push(v);
            format!("${}", args.len())
        };
        let text = |s: &String| SortValue::Text(s.clone());
        if f.only_deleted {
            sql.push_str(" AND i.deleted");
        } else if !f.include_deleted {
            sql.push_str(" AND NOT i.deleted");
        }
        let mut exact = |sql: &mut String, col: &str, v: &Option<String>| {
            if let Some(v) = v {
                sql.push_str(&format!(" AND i.{col} = {}", bind(text(v))));
            }
        };
        exact(&mut sql, "project_id", &f.project_id);
        exact(&mut sql, "host", &f.host);
        exact(&mut sql, "uuid", &f.uuid);
        exact(&mut sql, "user_id", &f.user_id);
        exact(&mut sql, "image_ref", &f.image_ref);
        for (col, values) in [("vm_state", &f.vm_states), ("task_state", &f.task_states)] {
            if !values.is_empty() {
                let ps: Vec<String> = values.iter().map(|v| bind(text(v))).collect();
                sql.push_str(&format!(" AND i.{col} IN ({})", ps.join(", ")));
            }
        }
        if let Some(id) = &f.flavorid {
            let of = if postgres {
                "CAST(e.flavor AS JSON) ->> 'flavorid'"
            } else {
                "json_extract(e.flavor, '$.flavorid')"
            };
            sql.push_str(&format!(
                " AND (SELECT {of} FROM instance_extra e WHERE e.instance_uuid = i.uuid) = {}",
                bind(text(id))
            ));
        }
        if let Some(locked) = f.locked {
            sql.push_str(if locked {
                " AND i.locked"
            } else {
                " AND NOT i.locked"
            });
        }
        // Tags, as upstream: all of `tags`, any of `tags-any`, not all of
        // `not-tags`, none of `not-tags-any`.
        let mut has_tag = |tag: &String| {
            format!(
                "EXISTS (SELECT 1 FROM tags t WHERE t.resource_id = i.uuid AND t.tag = {})",
                bind(text(tag))
            )
        };
        let all_of = |tags: &[String], has: &mut dyn FnMut(&String) -> String| {
            tags.iter().map(has).collect::<Vec<_>>().join(" AND ")
        };
        let any_of = |tags: &[String], has: &mut dyn FnMut(&String) -> String| {
            tags.iter().map(has).collect::<Vec<_>>().join(" OR ")
        };
        if !f.tags.is_empty() {
            sql.push_str(&format!(" AND ({})", all_of(&f.tags, &mut has_tag)));
        }
        if !f.tags_any.is_empty() {
            sql.push_str(&format!(" AND ({})", any_of(&f.tags_any, &mut has_tag)));
        }
        if !f.not_tags.is_empty() {
            sql.push_str(&format!(" AND NOT ({})", all_of(&f.not_tags, &mut has_tag)));
        }
        if !f.not_tags_any.is_empty() {
            sql.push_str(&format!(
                " AND NOT ({})",
                any_of(&f.not_tags_any, &mut has_tag)
            ));
        }
        let changed = SortKey::UpdatedAt.sql(postgres);
        if let Some(t) = f.changes_since {
            sql.push_str(&format!(" AND {changed} >= {}", bind(SortValue::Time(t))));
        }
        if let Some(t) = f.changes_before {
            sql.push_str(&format!(" AND {changed} <= {}", bind(SortValue::Time(t))));
        }
        let exprs: Vec<String> = f.order.keys.iter().map(|(k, _)| k.sql(postgres)).collect();
        if let Some(after) = &f.after {
            // (k1 op v1) OR (k1 = v1 AND k2 op v2) OR ...
            let ps: Vec<String> = after.iter().map(|v| bind(v.clone())).collect();
            let mut ors = Vec::new();
            for (j, (_, desc)) in f.order.keys.iter().enumerate().take(after.len()) {
                let mut ands: Vec<String> = (0..j)
                    .map(|i| format!("{} = {}", exprs[i], ps[i]))
                    .collect();
                let op = if *desc { "<" } else { ">" };
                ands.push(format!("{} {op} {}", exprs[j], ps[j]));
                ors.push(format!("({})", ands.join(" AND ")));
            }
            sql.push_str(&format!(" AND ({})", ors.join(" OR ")));
        }
        let order: Vec<String> = f
            .order
            .keys
            .iter()
            .zip(&exprs)
            .map(|((_, desc), e)| format!("{e} {}", if *desc { "DESC" } else { "ASC" }))
            .collect();
        let limit = bind(SortValue::Int(f.limit));
        sql.push_str(&format!(" ORDER BY {} LIMIT {limit}", order.join(", ")));
        Ok(with_pool!(self.pool(), p => {
            let mut q = sqlx::query_as(&sql);
            for v in &args {
                q = match v {
                    SortValue::Text(t) => q.bind(t.clone()),
                    SortValue::Int(i) => q.bind(*i),
                    SortValue::Time(t) => q.bind(*t),
                };
            }
            measured("api_instances_list", q.fetch_all(p)).await?
        }))
    }

    /// The latest fault of each of `uuids` that has one.
    pub async fn api_faults(&self, uuids: &[String]) -> Result<Vec<CellFault>, Error> {
        let mut out: Vec<CellFault> = Vec::new();
        for chunk in uuids.chunks(CHUNK) {
            let sql = format!(
                "SELECT instance_uuid, code, message, details, created_at FROM instance_faults \
                 WHERE instance_uuid IN ({}) ORDER BY created_at DESC, id DESC",
                placeholders(1, chunk.len())
            );
            let rows: Vec<CellFault> = with_pool!(self.pool(), p => {
                let mut q = sqlx::query_as(&sql);
                for u in chunk {
                    q = q.bind(u);
                }
                measured("api_faults", q.fetch_all(p)).await?
            });
            for r in rows {
                if !out.iter().any(|o| o.instance_uuid == r.instance_uuid) {
                    out.push(r);
                }
            }
        }
        Ok(out)
    }

    /// `PUT /servers/{id}`: the fields of `e` that are given; false when
    /// there is no live instance.
    pub async fn api_update(&self, uuid: &str, e: &InstanceEdit) -> Result<bool, Error> {
        let r = with_pool!(self.pool(), p => measured("api_instance_update", sqlx::query(
            "UPDATE instances SET display_name = COALESCE($1, display_name), \
             display_description = CASE WHEN $2 THEN $3 ELSE display_description END, \
             hostname = COALESCE($4, hostname), access_ip_v4 = COALESCE($7, access_ip_v4), \
             access_ip_v6 = COALESCE($8, access_ip_v6), updated_at = $5 \
             WHERE uuid = $6 AND deleted IS FALSE")
            .bind(&e.name).bind(e.description.is_some()).bind(e.description.clone().flatten())
            .bind(&e.hostname).bind(Utc::now()).bind(uuid)
            .bind(&e.access_ip_v4).bind(&e.access_ip_v6).execute(p)).await?.rows_affected());
        Ok(r > 0)
    }

    /// Sets `task_state = deleting` on a live instance and records the
    /// `delete` action; false when there is no live instance.
    pub async fn api_set_deleting(
        &self,
        uuid: &str,
        request_id: &str,
        global_request_id: &str,
        user_id: &str,
        project_id: &str,
    ) -> Result<bool, Error> {
        let t = Utc::now();
        Ok(with_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            let n = measured("api_instance_deleting", sqlx::query(
                "UPDATE instances SET task_state = $1, updated_at = $2 WHERE uuid = $3 AND deleted IS FALSE")
                .bind(fabric::rpc::task_state::DELETING).bind(t).bind(uuid)
                .execute(&mut *tx)).await?.rows_affected();
            if n > 0 {
                measured("api_action_delete", sqlx::query(
                    "INSERT INTO instance_actions (instance_uuid, action, request_id, global_request_id, \
                     user_id, project_id, start_time, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $7)")
                    .bind(uuid).bind(fabric::rpc::action::DELETE).bind(request_id)
                    .bind(global_request_id).bind(user_id).bind(project_id).bind(t)
                    .execute(&mut *tx)).await?;
            }
            tx.commit().await.map_err(db("commit"))?;
            n > 0
        }))
    }

    /// Marks a live instance deleted without a host being involved (it
    /// never reached one: cell0, or a build deleted while it landed).
    pub async fn api_delete_local(&self, uuid: &str) -> Result<bool, Error> {
        let t = Utc::now();
        let n = with_pool!(self.pool(), p => measured("api_instance_delete_local", sqlx::query(
            "UPDATE instances SET deleted = TRUE, deleted_at = $1, terminated_at = $1, updated_at = $1, \
             vm_state = $2, task_state = NULL WHERE uuid = $3 AND deleted IS FALSE")
            .bind(t).bind(fabric::rpc::vm_state::DELETED).bind(uuid)
            .execute(p)).await?.rows_affected());
        Ok(n > 0)
    }

    /// Removes the row of an instance whose build never landed: the
    /// super-conductor that created it here died before the API-DB
    /// transaction that points the instance mapping at this cell (its
    /// build request still exists and has been taken over by a healer).
    /// The row is deleted, not marked deleted: `instances.uuid` is unique
    /// whatever `deleted` says, and the build is about to be created again
    /// under the same uuid (maybe in this cell). Its faults, actions,
    /// events and extra go with it (`ON DELETE CASCADE`). A row that a
    /// compute ever launched is left alone. Returns whether a row was
    /// removed.
    pub async fn api_purge_unlanded(&self, uuid: &str) -> Result<bool, Error> {
        let n = with_pool!(self.pool(), p => measured("api_instance_purge_unlanded", sqlx::query(
            "DELETE FROM instances WHERE uuid = $1 AND launched_at IS NULL")
            .bind(uuid).execute(p)).await?.rows_affected());
        Ok(n > 0)
    }

    /// Removes the row `id` of `uuid` that this caller created
    /// ([`CellDb::create_api_instance`]'s answer) and then could not land
    /// (another scheduler process had taken the build over), unless a
    /// compute launched it. Unlike [`CellDb::api_purge_unlanded`] it
    /// cannot remove a row of the same uuid that the new owner wrote since.
    /// Returns whether the row was removed.
    pub async fn api_remove_unlanded_row(&self, uuid: &str, id: i64) -> Result<bool, Error> {
        let n = with_pool!(self.pool(), p => measured("api_instance_remove_unlanded", sqlx::query(
            "DELETE FROM instances WHERE uuid = $1 AND id = $2 AND launched_at IS NULL")
            .bind(uuid).bind(id).execute(p)).await?.rows_affected());
        Ok(n > 0)
    }

    /// The API's local delete of a live instance whose compute cannot do
    /// it (its service is down or forced down, or it has no host), as
    /// upstream's API does: in one transaction, marks the instance deleted
    /// with the end state the conductor's `instance_destroyed` writes
    /// (`deleted`, `deleted_at`, `terminated_at`, vm_state `deleted`, no
    /// task, power state NOSTATE, its block device mappings soft-deleted),
    /// records the `delete` action of `record` and its
    /// [`EV_API_LOCAL_DELETE`] event finished with `Success` (`host`: the
    /// instance's host, if any). False, with nothing written, when there is
    /// no live instance.
    pub async fn api_local_delete(
        &self,
        uuid: &str,
        record: &super::server_actions::ActionRecord,
        host: Option<&str>,
    ) -> Result<bool, Error> {
        let t = Utc::now();
        Ok(with_pool!(self.pool(), p => {
            let mut tx = p.begin_write().await.map_err(db("begin"))?;
            let n = measured("api_instance_local_delete", sqlx::query(
                "UPDATE instances SET deleted = TRUE, deleted_at = $1, terminated_at = $1, \
                 updated_at = $1, vm_state = $2, task_state = NULL, power_state = $3 \
                 WHERE uuid = $4 AND deleted IS FALSE")
                .bind(t).bind(fabric::rpc::vm_state::DELETED)
                .bind(fabric::rpc::power_state::NOSTATE as i64).bind(uuid)
                .execute(&mut *tx)).await?.rows_affected();
            if n == 0 {
                tx.rollback().await.map_err(db("rollback"))?;
                false
            } else {
                measured("api_bdm_local_delete", sqlx::query(
                    "UPDATE block_device_mapping SET deleted = TRUE, deleted_at = $1, updated_at = $1 \
                     WHERE instance_uuid = $2 AND NOT deleted")
                    .bind(t).bind(uuid).execute(&mut *tx)).await?;
                let action_id: i64 = measured("api_action_local_delete", sqlx::query_scalar(
                    "INSERT INTO instance_actions (instance_uuid, action, request_id, global_request_id, \
                     user_id, project_id, start_time, finish_time, created_at, updated_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $7, $7) RETURNING id")
                    .bind(uuid).bind(&record.action).bind(&record.request_id)
                    .bind(&record.global_request_id).bind(&record.user_id)
                    .bind(&record.project_id).bind(t)
                    .fetch_one(&mut *tx)).await?;
                measured("api_event_local_delete", sqlx::query(
                    "INSERT INTO instance_actions_events (action_id, event, host, result, request_id, \
                     global_request_id, start_time, finish_time, created_at, updated_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $7, $7)")
                    .bind(action_id).bind(EV_API_LOCAL_DELETE).bind(host)
                    .bind(fabric::rpc::action::SUCCESS).bind(&record.request_id)
                    .bind(&record.global_request_id).bind(t)
                    .execute(&mut *tx)).await?;
                tx.commit().await.map_err(db("commit"))?;
                true
            }
        }))
    }

    /// Live compute nodes with their compute service.
    pub async fn compute_hosts(&self) -> Result<Vec<ComputeHost>, Error> {
        Ok(
            with_pool!(self.pool(), p => measured("api_compute_hosts", sqlx::query_as(
            "SELECT n.uuid, n.host, n.hypervisor_hostname, s.disabled, s.forced_down, s.last_seen_up, \
             n.stats, n.hypervisor_version, n.supported_instances \
             FROM compute_nodes n JOIN services s ON s.host = n.host AND s.\"binary\" = $1 \
             AND NOT s.deleted WHERE NOT n.deleted ORDER BY n.host, n.hypervisor_hostname")
            .bind(super::cell::COMPUTE_BINARY).fetch_all(p)).await?),
        )
    }
}
