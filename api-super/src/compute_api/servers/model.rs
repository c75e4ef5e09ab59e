//! The server model: a server as the API knows it (a cell's instance or a
//! build request), its details read from a cell, and Nova's status of a
//! vm_state and task state.

use std::collections::{BTreeMap, HashMap};

use cell_mapping::db::{CellFault, CellInstance, InstanceFlavor};
use chrono::{DateTime, SecondsFormat, Utc};
use fabric::rpc::{task_state as ts, vm_state as vs};
use serde_json::Value;

use crate::compute_api::db::BuildInstance;

/// A server as the API shows it: a cell's instance or a build request.
#[derive(Debug, Clone)]
pub(crate) struct Server {
    pub(crate) uuid: String,
    pub(crate) name: String,
    pub(crate) project_id: String,
    pub(crate) user_id: String,
    pub(crate) vm_state: String,
    pub(crate) task_state: Option<String>,
    pub(crate) power_state: i64,
    pub(crate) host: Option<String>,
    pub(crate) node: Option<String>,
    pub(crate) availability_zone: Option<String>,
    pub(crate) image_ref: String,
    pub(crate) flavor: Option<InstanceFlavor>,
    pub(crate) created_at: DateTime<Utc>,
    pub(crate) updated_at: Option<DateTime<Utc>>,
    pub(crate) launched_at: Option<DateTime<Utc>>,
    pub(crate) progress: Option<i64>,
    pub(crate) fault: Option<CellFault>,
    /// Locked (2.9).
    pub(crate) locked: bool,
    /// `owner` or `admin`.
    pub(crate) locked_by: Option<String>,
    /// Why (2.73).
    pub(crate) locked_reason: Option<String>,
    /// Metadata, by key.
    pub(crate) metadata: Vec<(String, String)>,
    /// Tags (2.26), sorted.
    pub(crate) tags: Vec<String>,
    pub(crate) key_name: Option<String>,
    /// Reservation id and index within the request (2.3, admins).
    pub(crate) reservation_id: Option<String>,
    pub(crate) launch_index: Option<i64>,
    /// `user_data` as given at create (2.3, admins).
    pub(crate) user_data: Option<String>,
    /// `description` (2.19).
    pub(crate) description: Option<String>,
    /// The guest's hostname (2.3 admins, 2.90 everyone).
    pub(crate) hostname: Option<String>,
    /// The zone asked for at create (2.96).
    pub(crate) pinned_az: Option<String>,
    /// The flavor's extra specs (2.47).
    pub(crate) extra_specs: BTreeMap<String, String>,
    /// Scheduler hints given at create (2.100).
    pub(crate) scheduler_hints: BTreeMap<String, Value>,
    /// The image's properties recorded at create or rebuild (2.98).
    pub(crate) image_properties: BTreeMap<String, String>,
    /// Its compute service's state (2.16, admins): `None` not looked up.
    pub(crate) host_status: Option<&'static str>,
    /// The cell row's id (`instance_name`); `None` for a build request.
    pub(crate) row_id: Option<i64>,
    /// `config_drive`: `"True"` or `""`, as Nova shows it.
    pub(crate) config_drive: String,
    /// `accessIPv4` and `accessIPv6` (`""` when unset, as Nova shows them).
    pub(crate) access_ip_v4: Option<String>,
    pub(crate) access_ip_v6: Option<String>,
    /// `trusted_image_certificates` (2.63).
    pub(crate) trusted_certs: Option<Vec<String>>,
}

impl Server {
    /// A build request not scheduled yet, as the instance it will be.
    pub(crate) fn from_build(b: &BuildInstance) -> Self {
        let mut s = Server::from_cell(crate::compute_api::server_list::build_as_instance(b));
        s.flavor = Some(b.flavor.clone());
        s.key_name = b.key_name.clone();
        s.metadata = b.metadata.clone();
        s.tags = b.tags.clone();
        s.pinned_az = b.availability_zone.clone();
        s.image_properties = b.image_properties.clone();
        s.trusted_certs = b.trusted_certs.clone();
        s
    }

    /// What the request spec adds to the cell's row.
    pub(crate) fn apply_spec(&mut self, v: crate::compute_api::db::SpecView) {
        // The row's key name; a row written before the cells kept it has
        // it only in the spec.
        if self.key_name.is_none() {
            self.key_name = v.key_name;
        }
        self.pinned_az = v.availability_zone;
        self.extra_specs = v.flavor_extra_specs;
        self.scheduler_hints = v.scheduler_hints;
        self.image_properties = v.image_properties;
    }

    pub(crate) fn from_cell(i: CellInstance) -> Self {
        Server {
            uuid: i.uuid,
            name: i.display_name.unwrap_or_default(),
            project_id: i.project_id,
            user_id: i.user_id,
            vm_state: i.vm_state.unwrap_or_default(),
            task_state: i.task_state,
            power_state: i.power_state.unwrap_or(0),
            host: i.host,
            node: i.node,
            availability_zone: i.availability_zone,
            image_ref: i.image_ref.unwrap_or_default(),
            flavor: i.flavor.and_then(|f| serde_json::from_str(&f).ok()),
            created_at: i.created_at,
            updated_at: i.updated_at,
            launched_at: i.launched_at,
            progress: i.progress,
            fault: None,
            locked: i.locked,
            locked_by: i.locked_by,
            locked_reason: i.locked_reason,
            metadata: Vec::new(),
            tags: Vec::new(),
            key_name: i.key_name,
            reservation_id: i.reservation_id,
            launch_index: i.launch_index,
            user_data: i.user_data,
            description: i.display_description,
            hostname: i.hostname,
            pinned_az: None,
            extra_specs: BTreeMap::new(),
            scheduler_hints: BTreeMap::new(),
            image_properties: BTreeMap::new(),
            host_status: None,
            row_id: i.id,
            config_drive: i.config_drive.unwrap_or_default(),
            access_ip_v4: i.access_ip_v4,
            access_ip_v6: i.access_ip_v6,
            trusted_certs: None,
        }
    }

    pub(crate) fn status(&self) -> &'static str {
        status_of(&self.vm_state, self.task_state.as_deref())
    }
}

/// Metadata, tags and faults of some servers of one cell, read together
/// (one bounded cell read).
#[derive(Debug, Default)]
pub(crate) struct CellDetails {
    meta: Vec<(String, String, String)>,
    tags: Vec<(String, String)>,
    /// Trusted certificates (JSON lists) of the servers that have some.
    certs: Vec<(String, String)>,
    faults: Vec<CellFault>,
}

impl CellDetails {
    /// Reads the metadata and tags of the servers `uuids` and the faults
    /// of `errs` (those in ERROR).
    pub(crate) async fn read(
        db: cell_mapping::CellDb,
        uuids: Vec<String>,
        errs: Vec<String>,
    ) -> Result<CellDetails, cell_mapping::Error> {
        if uuids.is_empty() {
            return Ok(CellDetails::default());
        }
        let faults = async {
            if errs.is_empty() {
                Ok(Vec::new())
            } else {
                db.api_faults(&errs).await
            }
        };
        let ((meta, tags, certs), faults) =
            futures_util::future::try_join(db.api_metadata_and_tags(&uuids), faults).await?;
        Ok(CellDetails {
            meta,
            tags,
            certs,
            faults,
        })
    }

    /// Puts them on `servers`.
    pub(crate) fn apply<'a>(self, servers: impl IntoIterator<Item = &'a mut Server>) {
        let mut meta_of: HashMap<String, Vec<(String, String)>> = HashMap::new();
        for (uuid, k, v) in self.meta {
            meta_of.entry(uuid).or_default().push((k, v));
        }
        let mut tags_of: HashMap<String, Vec<String>> = HashMap::new();
        for (uuid, t) in self.tags {
            tags_of.entry(uuid).or_default().push(t);
        }
        let mut faults: HashMap<String, CellFault> = HashMap::new();
        for f in self.faults {
            faults.insert(f.instance_uuid.clone(), f);
        }
        let mut certs_of: HashMap<String, Vec<String>> = self
            .certs
            .into_iter()
            .filter_map(|(uuid, json)| Some((uuid, serde_json::from_str(&json).ok()?)))
            .collect();
        for s in servers {
            s.trusted_certs = certs_of.remove(&s.uuid);
            s.metadata = meta_of.remove(&s.uuid).unwrap_or_default();
            s.tags = tags_of.remove(&s.uuid).unwrap_or_default();
            s.fault = faults.remove(&s.uuid);
        }
    }
}

/// Nova's status for a vm_state and task state (a reboot shows `REBOOT` /
/// `HARD_REBOOT` and a rebuild `REBUILD` while they run, as upstream).
fn status_of(vm_state: &str, task_state: Option<&str>) -> &'static str {
    match (vm_state, task_state) {
        (vs::ACTIVE, Some(ts::REBOOTING | ts::REBOOT_STARTED)) => "REBOOT",
        (vs::ACTIVE, Some(ts::REBOOTING_HARD | ts::REBOOT_STARTED_HARD)) => "HARD_REBOOT",
        (vs::ACTIVE | vs::STOPPED | vs::ERROR, Some(ts::REBUILDING | ts::REBUILD_SPAWNING)) => {
            "REBUILD"
        }
        _ => status_of_vm(vm_state),
    }
}

/// Nova's status for a vm_state alone.
fn status_of_vm(vm_state: &str) -> &'static str {
    match vm_state {
        vs::BUILDING => "BUILD",
        vs::ACTIVE => "ACTIVE",
        vs::ERROR => "ERROR",
        vs::STOPPED => "SHUTOFF",
        vs::DELETED => "DELETED",
        "paused" => "PAUSED",
        "suspended" => "SUSPENDED",
        "shelved" | "shelved_offloaded" => "SHELVED",
        _ => "UNKNOWN",
    }
}

/// Nova's status of each (vm_state, task_state) pair
/// (`nova.api.openstack.common._STATE_MAP`); `None` stands for upstream's
/// `default`: any other task state of that vm_state.
const STATE_MAP: &[(&str, Option<&str>, &str)] = &[
    ("active", None, "ACTIVE"),
    ("active", Some("rebooting"), "REBOOT"),
    ("active", Some("reboot_pending"), "REBOOT"),
    ("active", Some("reboot_started"), "REBOOT"),
    ("active", Some("rebooting_hard"), "HARD_REBOOT"),
    ("active", Some("reboot_pending_hard"), "HARD_REBOOT"),
    ("active", Some("reboot_started_hard"), "HARD_REBOOT"),
    ("active", Some("updating_password"), "PASSWORD"),
    ("active", Some("rebuilding"), "REBUILD"),
    ("active", Some("rebuild_block_device_mapping"), "REBUILD"),
    ("active", Some("rebuild_spawning"), "REBUILD"),
    ("active", Some("migrating"), "MIGRATING"),
    ("active", Some("resize_prep"), "RESIZE"),
    ("active", Some("resize_migrating"), "RESIZE"),
    ("active", Some("resize_migrated"), "RESIZE"),
    ("active", Some("resize_finish"), "RESIZE"),
    ("building", None, "BUILD"),
    ("stopped", None, "SHUTOFF"),
    ("stopped", Some("resize_prep"), "RESIZE"),
    ("stopped", Some("resize_migrating"), "RESIZE"),
    ("stopped", Some("resize_migrated"), "RESIZE"),
    ("stopped", Some("resize_finish"), "RESIZE"),
    ("stopped", Some("rebuilding"), "REBUILD"),
    ("stopped", Some("rebuild_block_device_mapping"), "REBUILD"),
    ("stopped", Some("rebuild_spawning"), "REBUILD"),
    ("resized", None, "VERIFY_RESIZE"),
    ("resized", Some("resize_reverting"), "REVERT_RESIZE"),
    ("paused", None, "PAUSED"),
    ("paused", Some("migrating"), "MIGRATING"),
    ("suspended", None, "SUSPENDED"),
    ("rescued", None, "RESCUE"),
    ("error", None, "ERROR"),
    ("error", Some("rebuilding"), "REBUILD"),
    ("error", Some("rebuild_block_device_mapping"), "REBUILD"),
    ("error", Some("rebuild_spawning"), "REBUILD"),
    ("deleted", None, "DELETED"),
    ("soft-delete", None, "SOFT_DELETED"),
    ("shelved", None, "SHELVED"),
    ("shelved_offloaded", None, "SHELVED_OFFLOADED"),
];

/// What `status` filters (one or more, ORed) mean, as Nova's
/// `task_and_vm_state_from_status`: the vm_states and the task_states of
/// every (vm_state, task_state) pair whose status is one of them (case
/// does not matter), each sorted. The two lists filter separately (vm_state
/// in the one AND task_state in the other), and a status that stands for a
/// vm_state whatever its task (`ACTIVE`, `SHUTOFF`, …) lifts the task_state
/// filter (`None`). Both empty: no status is known.
pub(crate) fn task_and_vm_states_from_statuses(
    statuses: &[String],
) -> (Vec<String>, Option<Vec<String>>) {
    let wanted: Vec<String> = statuses.iter().map(|s| s.to_ascii_uppercase()).collect();
    let mut vm: std::collections::BTreeSet<&str> = Default::default();
    let mut task: std::collections::BTreeSet<&str> = Default::default();
    let mut any_task = false;
    for (v, t, status) in STATE_MAP {
        if wanted.iter().any(|w| w == status) {
            vm.insert(v);
            match t {
                Some(t) => {
                    task.insert(t);
                }
                None => any_task = true,
            }
        }
    }
    let vm: Vec<String> = vm.into_iter().map(str::to_owned).collect();
    let task = (!any_task).then(|| task.into_iter().map(str::to_owned).collect());
    (vm, task)
}

pub(crate) fn iso(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}
