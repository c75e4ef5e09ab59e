//! `/servers`: create, list (multi-cell merge), show, rename, delete.

use std::collections::{BTreeMap, HashMap};

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use cell_mapping::db::{CellFault, CellInstance, InstanceFlavor};
use cell_mapping::CellMapping;
use chrono::{DateTime, SecondsFormat, Utc};
use fabric::rpc::{self, method, power_state, task_state as ts, vm_state as vs, RequestIds};
use serde_json::{json, Value};

use super::db::{BuildInstance, GroupJoin, MappingRow, RequestSpec};
use super::error::{ApiError, ApiResult};
use super::images::is_uuid_like;
use super::query_schema::{
    self, invalid_field, not_of_type, python_value_repr as py_repr, too_long,
};
use super::{App, Ctx};
use crate::cells::{CellDown, CellError};
use crate::scheduler::filters::image_properties::ImageProps;

// ------------------------------------------------------------------ model

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
}

impl Server {
    /// A build request not scheduled yet, as the instance it will be.
    pub(crate) fn from_build(b: &BuildInstance) -> Self {
        let mut s = Server::from_cell(super::server_list::build_as_instance(b));
        s.flavor = Some(b.flavor.clone());
        s.key_name = b.key_name.clone();
        s.metadata = b.metadata.clone();
        s.tags = b.tags.clone();
        s.pinned_az = b.availability_zone.clone();
        s.image_properties = b.image_properties.clone();
        s
    }

    /// What the request spec adds to the cell's row.
    pub(crate) fn apply_spec(&mut self, v: super::db::SpecView) {
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
        let ((meta, tags), faults) =
            futures_util::future::try_join(db.api_metadata_and_tags(&uuids), faults).await?;
        Ok(CellDetails { meta, tags, faults })
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
        for s in servers {
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

// ------------------------------------------------------------------- views

fn links(app: &App, kind: &str, id: &str) -> Value {
    let base = app.public_url();
    json!([{"rel": "self", "href": format!("{base}/v2.1/{kind}/{id}")},
           {"rel": "bookmark", "href": format!("{base}/{kind}/{id}")}])
}

/// Nova's `hostId`: the hex SHA-224 of the project id followed by the host
/// name, empty without a host. Stable across releases and processes, and
/// equal to what Nova shows for the same project and host, so clients that
/// compare `hostId`s (to check anti-affinity, say) see the same values.
pub(crate) fn host_id(project: &str, host: Option<&str>) -> String {
    use sha2::{Digest, Sha224};
    use std::fmt::Write;
    let Some(h) = host.filter(|h| !h.is_empty()) else {
        return String::new();
    };
    let digest = Sha224::new()
        .chain_update(project)
        .chain_update(h)
        .finalize();
    let mut out = String::with_capacity(56);
    for b in digest {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// A server as `GET /servers/{id}` and `/servers/detail` show it, at the
/// caller's microversion and role. Serialized straight to JSON (a list of
/// 1,000 servers builds no intermediate `Value` tree).
pub(crate) struct DetailView<'a> {
    pub(crate) base: &'a str,
    pub(crate) ctx: &'a Ctx,
    pub(crate) s: &'a Server,
}

/// `[{"rel": "self", …}, {"rel": "bookmark", …}]` of a resource.
struct Links<'a> {
    base: &'a str,
    kind: &'a str,
    id: &'a str,
}

impl serde::Serialize for Links<'_> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let (base, kind, id) = (self.base, self.kind, self.id);
        let mut seq = ser.serialize_seq(Some(2))?;
        seq.serialize_element(&RelHref {
            rel: "self",
            href: Concat(&[base, "/v2.1/", kind, "/", id]),
        })?;
        seq.serialize_element(&RelHref {
            rel: "bookmark",
            href: Concat(&[base, "/", kind, "/", id]),
        })?;
        seq.end()
    }
}

#[derive(serde::Serialize)]
struct RelHref<'a> {
    rel: &'static str,
    href: Concat<'a>,
}

/// Pieces written one after the other as one JSON string, never built as
/// a `String` first (a list page writes a few links per server).
struct Concat<'a>(&'a [&'a str]);

impl std::fmt::Display for Concat<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|p| f.write_str(p))
    }
}

/// `%Y-%m-%dT%H:%M:%S%.6f` (no zone, as upstream's `launched_at`), written
/// straight into the answer.
struct Microseconds(DateTime<Utc>);

impl std::fmt::Display for Microseconds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use chrono::{Datelike, Timelike};
        let t = &self.0;
        write!(
            f,
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}",
            t.year(),
            t.month(),
            t.day(),
            t.hour(),
            t.minute(),
            t.second(),
            t.nanosecond() % 1_000_000_000 / 1_000
        )
    }
}

impl serde::Serialize for Microseconds {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        ser.collect_str(self)
    }
}

impl serde::Serialize for Concat<'_> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        ser.collect_str(self)
    }
}

#[derive(serde::Serialize)]
struct ImageRefView<'a> {
    id: &'a str,
    links: [RelHref<'a>; 1],
    #[serde(skip_serializing_if = "Option::is_none")]
    properties: Option<&'a BTreeMap<String, String>>,
}

/// A server's `image`: `{id, links}` (and from 2.98 `properties`, those
/// recorded when it was booted or rebuilt), or `""` when it has none.
struct ImageView<'a> {
    base: &'a str,
    image_ref: &'a str,
    /// `Some` from 2.98.
    properties: Option<&'a BTreeMap<String, String>>,
}

impl<'a> ImageView<'a> {
    fn new(
        base: &'a str,
        ctx: &Ctx,
        image_ref: &'a str,
        properties: &'a BTreeMap<String, String>,
    ) -> Self {
        ImageView {
            base,
            image_ref,
            properties: ctx.mv.at_least(IMAGE_PROPERTIES_MV).then_some(properties),
        }
    }
}

impl serde::Serialize for ImageView<'_> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        if self.image_ref.is_empty() {
            return ser.serialize_str("");
        }
        ImageRefView {
            id: self.image_ref,
            links: [RelHref {
                rel: "bookmark",
                href: Concat(&[self.base, "/images/", self.image_ref]),
            }],
            properties: self.properties,
        }
        .serialize(ser)
    }
}

/// A server's `flavor`: embedded from 2.47, a reference before; `{}` when
/// unknown.
struct FlavorView<'a> {
    base: &'a str,
    ctx: &'a Ctx,
    flavor: Option<&'a InstanceFlavor>,
    /// Its extra specs when the server was created (2.47).
    extra_specs: Option<&'a BTreeMap<String, String>>,
}

impl serde::Serialize for FlavorView<'_> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        match (self.flavor, self.ctx.mv.at_least(47)) {
            (Some(f), true) => EmbeddedFlavor {
                vcpus: f.vcpus,
                ram: f.memory_mb,
                disk: f.root_gb,
                ephemeral: f.ephemeral_gb,
                swap: f.swap,
                original_name: &f.name,
                extra_specs: self.extra_specs.unwrap_or(&NO_EXTRA_SPECS),
            }
            .serialize(ser),
            (Some(f), false) => FlavorRef {
                id: &f.flavorid,
                links: Links {
                    base: self.base,
                    kind: "flavors",
                    id: &f.flavorid,
                },
            }
            .serialize(ser),
            (None, _) => Empty.serialize(ser),
        }
    }
}

#[derive(serde::Serialize)]
struct EmbeddedFlavor<'a> {
    vcpus: i64,
    ram: i64,
    disk: i64,
    ephemeral: i64,
    swap: i64,
    original_name: &'a str,
    extra_specs: &'a BTreeMap<String, String>,
}

static NO_EXTRA_SPECS: BTreeMap<String, String> = BTreeMap::new();

#[derive(serde::Serialize)]
struct FlavorRef<'a> {
    id: &'a str,
    links: Links<'a>,
}

/// `{}`.
struct Empty;

impl serde::Serialize for Empty {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        ser.serialize_map(Some(0))?.end()
    }
}

/// Metadata as a JSON object, in stored order.
struct MetadataView<'a>(&'a [(String, String)]);

impl serde::Serialize for MetadataView<'_> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = ser.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

#[derive(serde::Serialize)]
struct FaultView<'a> {
    code: i64,
    message: &'a str,
    created: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<&'a str>,
}

#[derive(serde::Serialize)]
struct NamedGroup {
    name: &'static str,
}

impl serde::Serialize for DetailView<'_> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let (s, ctx, base) = (self.s, self.ctx, self.base);
        let status = s.status();
        let mut m = ser.serialize_map(None)?;
        m.serialize_entry("id", &s.uuid)?;
        m.serialize_entry("name", &s.name)?;
        m.serialize_entry("status", status)?;
        m.serialize_entry("tenant_id", &s.project_id)?;
        m.serialize_entry("user_id", &s.user_id)?;
        m.serialize_entry("metadata", &MetadataView(&s.metadata))?;
        m.serialize_entry("hostId", &host_id(&s.project_id, s.host.as_deref()))?;
        m.serialize_entry(
            "image",
            &ImageView::new(base, ctx, &s.image_ref, &s.image_properties),
        )?;
        m.serialize_entry(
            "flavor",
            &FlavorView {
                base,
                ctx,
                flavor: s.flavor.as_ref(),
                extra_specs: Some(&s.extra_specs),
            },
        )?;
        m.serialize_entry("created", &iso(s.created_at))?;
        m.serialize_entry("updated", &iso(s.updated_at.unwrap_or(s.created_at)))?;
        m.serialize_entry("addresses", &Empty)?;
        m.serialize_entry("accessIPv4", "")?;
        m.serialize_entry("accessIPv6", "")?;
        m.serialize_entry(
            "links",
            &Links {
                base,
                kind: "servers",
                id: &s.uuid,
            },
        )?;
        m.serialize_entry("OS-DCF:diskConfig", "MANUAL")?;
        m.serialize_entry(
            "OS-EXT-AZ:availability_zone",
            s.availability_zone.as_deref().unwrap_or(""),
        )?;
        m.serialize_entry("config_drive", "")?;
        m.serialize_entry("key_name", &s.key_name)?;
        m.serialize_entry("OS-SRV-USG:launched_at", &s.launched_at.map(Microseconds))?;
        m.serialize_entry("OS-SRV-USG:terminated_at", &None::<&str>)?;
        m.serialize_entry("OS-EXT-STS:task_state", &s.task_state)?;
        m.serialize_entry("OS-EXT-STS:vm_state", &s.vm_state)?;
        m.serialize_entry("OS-EXT-STS:power_state", &s.power_state)?;
        m.serialize_entry("os-extended-volumes:volumes_attached", &[(); 0])?;
        m.serialize_entry("security_groups", &[NamedGroup { name: "default" }])?;
        if matches!(status, "BUILD" | "ACTIVE") {
            m.serialize_entry("progress", &s.progress.unwrap_or(0))?;
        }
        if ctx.is_admin() {
            m.serialize_entry("OS-EXT-SRV-ATTR:host", &s.host)?;
            m.serialize_entry("OS-EXT-SRV-ATTR:hypervisor_hostname", &s.node)?;
            // Nova's default `instance_name_template`.
            m.serialize_entry(
                "OS-EXT-SRV-ATTR:instance_name",
                &s.row_id
                    .map(|id| format!("instance-{id:08x}"))
                    .unwrap_or_default(),
            )?;
            if ctx.mv.at_least(3) {
                m.serialize_entry("OS-EXT-SRV-ATTR:reservation_id", &s.reservation_id)?;
                m.serialize_entry("OS-EXT-SRV-ATTR:launch_index", &s.launch_index)?;
                m.serialize_entry("OS-EXT-SRV-ATTR:hostname", &s.hostname)?;
                m.serialize_entry("OS-EXT-SRV-ATTR:kernel_id", "")?;
                m.serialize_entry("OS-EXT-SRV-ATTR:ramdisk_id", "")?;
                m.serialize_entry("OS-EXT-SRV-ATTR:root_device_name", &None::<&str>)?;
                m.serialize_entry("OS-EXT-SRV-ATTR:user_data", &s.user_data)?;
            }
        }
        if ctx.mv.at_least(90) && !ctx.is_admin() {
            // From 2.90 everyone sees the hostname.
            m.serialize_entry("OS-EXT-SRV-ATTR:hostname", &s.hostname)?;
        }
        if let (Some(h), true) = (s.host_status, ctx.mv.at_least(16)) {
            m.serialize_entry("host_status", h)?;
        }
        if ctx.mv.at_least(9) {
            m.serialize_entry("locked", &s.locked)?;
        }
        if ctx.mv.at_least(19) {
            m.serialize_entry("description", &s.description)?;
        }
        if ctx.mv.at_least(26) {
            m.serialize_entry("tags", &s.tags)?;
        }
        if ctx.mv.at_least(73) {
            m.serialize_entry("locked_reason", &s.locked_reason)?;
        }
        if ctx.mv.at_least(63) {
            // Not built: trusted certificates are refused at create.
            m.serialize_entry("trusted_image_certificates", &None::<&str>)?;
        }
        if ctx.mv.at_least(96) {
            m.serialize_entry("pinned_availability_zone", &s.pinned_az)?;
        }
        if ctx.mv.at_least(100) {
            m.serialize_entry("scheduler_hints", &s.scheduler_hints)?;
        }
        if let (Some(f), "ERROR") = (&s.fault, status) {
            m.serialize_entry(
                "fault",
                &FaultView {
                    code: f.code,
                    message: f.message.as_deref().unwrap_or(""),
                    created: iso(f.created_at),
                    // Details of a 500 are for admins only, as upstream.
                    details: (ctx.is_admin() || f.code != 500)
                        .then(|| f.details.as_deref().unwrap_or("")),
                },
            )?;
        }
        m.end()
    }
}

/// [`DetailView`] as a JSON value (for answers that add to it).
pub(crate) fn detail_view(app: &App, ctx: &Ctx, s: &Server) -> Value {
    let base = app.public_url();
    serde_json::to_value(DetailView {
        base: &base,
        ctx,
        s,
    })
    .unwrap_or(Value::Null)
}

/// A server in `GET /servers` (id, name, links).
pub(crate) fn brief_view<'a>(base: &'a str, s: &'a Server) -> impl serde::Serialize + 'a {
    #[derive(serde::Serialize)]
    struct Brief<'a> {
        id: &'a str,
        name: &'a str,
        links: Links<'a>,
    }
    Brief {
        id: &s.uuid,
        name: &s.name,
        links: Links {
            base,
            kind: "servers",
            id: &s.uuid,
        },
    }
}

/// The microversion from which a server's `image` has `properties`.
pub(crate) const IMAGE_PROPERTIES_MV: u32 = 98;

/// The microversion from which a server whose cell is down is shown as a
/// partial record (Nova's 2.69) instead of being left out of lists or
/// failing a show.
pub(crate) const PARTIAL_RECORDS_MV: u32 = 69;

/// A server whose cell is down, as the API database knows it (Nova's
/// "minimal construct" of 2.69).
#[derive(Debug, Clone)]
pub(crate) struct PartialServer {
    pub(crate) uuid: String,
    pub(crate) project_id: String,
    pub(crate) created_at: DateTime<Utc>,
    /// What `GET /servers/{id}` adds from the request spec (lists do not
    /// read request specs, as upstream).
    pub(crate) show: Option<PartialShow>,
}

/// The request-spec part of a partial record.
#[derive(Debug, Clone)]
pub(crate) struct PartialShow {
    pub(crate) user_id: Option<String>,
    pub(crate) flavor: InstanceFlavor,
    pub(crate) image_ref: String,
    /// The zone asked for at create (`None`: shown as `UNKNOWN`).
    pub(crate) availability_zone: Option<String>,
    /// From 2.71.
    pub(crate) server_groups: Option<Vec<String>>,
    /// The flavor's extra specs at create (2.47).
    pub(crate) flavor_extra_specs: Option<BTreeMap<String, String>>,
    /// The image's properties recorded at create or rebuild (2.98).
    pub(crate) image_properties: BTreeMap<String, String>,
}

impl PartialServer {
    /// The partial record of a mapping (for a list).
    pub(crate) fn from_mapping(m: &MappingRow) -> Self {
        PartialServer {
            uuid: m.instance_uuid.clone(),
            project_id: m.project_id.clone(),
            created_at: m.created_at,
            show: None,
        }
    }
}

/// Which body of a partial record.
#[derive(Clone, Copy)]
pub(crate) enum PartialKind<'a> {
    /// `GET /servers`: id, status, links.
    Index,
    /// `GET /servers/detail`: and tenant_id, created.
    Detail,
    /// `GET /servers/{id}`: and image, flavor, zone, power state, user,
    /// server groups (2.71).
    Show { ctx: &'a Ctx },
}

/// A partial record as Nova shows it from 2.69: `status` is `UNKNOWN`.
pub(crate) struct PartialView<'a> {
    pub(crate) base: &'a str,
    pub(crate) p: &'a PartialServer,
    pub(crate) kind: PartialKind<'a>,
}

impl serde::Serialize for PartialView<'_> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let (p, base) = (self.p, self.base);
        let mut m = ser.serialize_map(None)?;
        m.serialize_entry("id", &p.uuid)?;
        m.serialize_entry("status", "UNKNOWN")?;
        if !matches!(self.kind, PartialKind::Index) {
            m.serialize_entry("tenant_id", &p.project_id)?;
            m.serialize_entry("created", &iso(p.created_at))?;
        }
        m.serialize_entry(
            "links",
            &Links {
                base,
                kind: "servers",
                id: &p.uuid,
            },
        )?;
        if let (PartialKind::Show { ctx }, Some(d)) = (self.kind, &p.show) {
            m.serialize_entry(
                "image",
                &ImageView::new(base, ctx, &d.image_ref, &d.image_properties),
            )?;
            m.serialize_entry(
                "flavor",
                &FlavorView {
                    base,
                    ctx,
                    flavor: Some(&d.flavor),
                    extra_specs: d.flavor_extra_specs.as_ref(),
                },
            )?;
            m.serialize_entry(
                "OS-EXT-AZ:availability_zone",
                d.availability_zone.as_deref().unwrap_or("UNKNOWN"),
            )?;
            m.serialize_entry("OS-EXT-STS:power_state", &power_state::NOSTATE)?;
            m.serialize_entry("user_id", d.user_id.as_deref().unwrap_or("UNKNOWN"))?;
            if let Some(g) = &d.server_groups {
                m.serialize_entry("server_groups", g)?;
            }
        }
        m.end()
    }
}

/// `OS-EXT-AZ:availability_zone` as Nova shows it: a server on a host is
/// in that host's zone now (its aggregates' `availability_zone`, else the
/// default zone), so a zone change of an aggregate shows at once.
pub(crate) async fn current_zones<'a>(
    app: &App,
    ctx: &Ctx,
    servers: impl IntoIterator<Item = &'a mut Server>,
) -> ApiResult<()> {
    let mut servers: Vec<&mut Server> = servers.into_iter().collect();
    // 2.16 `host_status` (admins by default), as Nova's
    // `get_instance_host_status`: DOWN (forced down), MAINTENANCE
    // (disabled), UP, UNKNOWN (not reporting), "" (no host or no compute
    // node), from the scheduler's cached host map.
    let statuses = ctx.mv.at_least(16)
        && app
            .authorize(
                ctx,
                "os_compute_api:servers:show:host_status",
                ctx.project_id(),
            )
            .is_ok();
    if statuses {
        let hosts = app.conductor().scheduler().host_state().get().await?;
        for s in servers.iter_mut() {
            // Every node of a host has the host's one compute service.
            let node = s.host.as_deref().and_then(|h| hosts.nodes_of(h).first());
            s.host_status = Some(match node {
                None => "",
                Some(h) if h.service_forced_down => "DOWN",
                Some(h) if h.service_disabled => "MAINTENANCE",
                Some(h) if h.service_up => "UP",
                Some(_) => "UNKNOWN",
            });
        }
    }
    if servers.iter().all(|s| s.host.is_none()) {
        return Ok(());
    }
    let (zones, default) = super::services::host_zones(app).await?;
    for s in servers.iter_mut() {
        if let Some(h) = &s.host {
            s.availability_zone = Some(zones.get(h).cloned().unwrap_or_else(|| default.clone()));
        }
    }
    Ok(())
}

// ------------------------------------------------------------------ lookup

/// Where a server is.
pub(crate) enum Found {
    /// Not scheduled yet.
    Build(Server),
    /// In a cell.
    Cell(CellMapping, Server),
}

/// A server, or the mapping of one whose cell is down.
// One per request, moved once: not worth a box.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Located {
    /// Read.
    Found(Found),
    /// Its cell does not answer: what the API database knows of it.
    Down(MappingRow, CellDown),
}

/// Finds the server `id` the caller may see (another project's is 404 for a
/// non-admin) and checks `action` on it. A server whose cell is down is
/// Nova's "cell is not responding" error (500, naming the cell).
pub(crate) async fn find(app: &App, ctx: &Ctx, id: &str, action: &str) -> ApiResult<Found> {
    find_with(app, ctx, id, action, true).await
}

/// [`find`]; `key_name: false` for a caller that shows nothing of the
/// server (a delete), sparing the request spec's read.
async fn find_with(
    app: &App,
    ctx: &Ctx,
    id: &str,
    action: &str,
    key_name: bool,
) -> ApiResult<Found> {
    match locate_with(app, ctx, id, action, key_name).await? {
        Located::Found(f) => Ok(f),
        Located::Down(_, d) => Err(ApiError::cell_down(d)),
    }
}

/// [`find`], telling a server in a down cell apart; `key_name: false`
/// leaves the key name of a server found in its cell unread (`show` reads
/// it with the rest it needs, a delete needs none).
async fn locate_with(
    app: &App,
    ctx: &Ctx,
    id: &str,
    action: &str,
    key_name: bool,
) -> ApiResult<Located> {
    // Two tries: a build may land in its cell between the two reads. A
    // landed server this process knows needs no mapping read (its cell and
    // project never change); its mapping row is read only for a down cell.
    for attempt in 0..2 {
        let (cell_id, project, mut row) = match app.db.landed(id).filter(|_| attempt == 0) {
            Some((cell, project)) => (Some(cell), project, None),
            None => {
                let Some(m) = app.db.mapping_row(id).await? else {
                    return Err(ApiError::server_not_found(id));
                };
                (m.cell_id, m.project_id.clone(), Some(m))
            }
        };
        check_owner(app, ctx, action, &project, id)?;
        match cell_id {
            None => {
                if let Some(b) = app.db.build_request(id).await? {
                    return Ok(Located::Found(Found::Build(Server::from_build(
                        &b.instance,
                    ))));
                }
            }
            Some(cid) => {
                let Some(cell) = app.cells.by_id(cid) else {
                    if row.is_none() {
                        // Remembered, but its cell is gone: read again.
                        app.db.forget_landed(id);
                        continue;
                    }
                    return Err(ApiError::Internal(format!(
                        "cell {cid} is not in the cache"
                    )));
                };
                let read = app
                    .cells
                    .read(&cell, |db| async move {
                        // The row with its metadata and tags: one statement
                        // (and the fault of one in ERROR).
                        let Some(shown) = db.api_instance_shown(id).await? else {
                            return Ok(None);
                        };
                        if shown.instance.deleted {
                            return Ok(None);
                        }
                        let mut s = Server::from_cell(shown.instance);
                        s.metadata = shown.metadata;
                        s.tags = shown.tags;
                        let faults = if s.vm_state == vs::ERROR {
                            db.api_faults(std::slice::from_ref(&s.uuid)).await?
                        } else {
                            Vec::new()
                        };
                        Ok(Some((s, faults)))
                    })
                    .await;
                let (mut s, faults) = match read {
                    Ok(Some(found)) => found,
                    Ok(None) => return Err(ApiError::server_not_found(id)),
                    Err(CellError::Down(d)) => {
                        let m = match row.take() {
                            Some(m) => m,
                            None => match app.db.mapping_row(id).await? {
                                Some(m) => m,
                                None => return Err(ApiError::server_not_found(id)),
                            },
                        };
                        return Ok(Located::Down(m, d));
                    }
                    Err(e) => return Err(e.into()),
                };
                s.fault = faults.into_iter().next();
                if key_name {
                    if let Some(v) = app
                        .db
                        .spec_views(
                            std::slice::from_ref(&s.uuid),
                            ctx.mv.at_least(IMAGE_PROPERTIES_MV),
                        )
                        .await?
                        .remove(&s.uuid)
                    {
                        s.apply_spec(v);
                    }
                }
                return Ok(Located::Found(Found::Cell(cell, s)));
            }
        }
    }
    Err(ApiError::server_not_found(id))
}

/// Policy on a server of `project`: a non-admin denied on another
/// project's server gets 404 (its existence is not disclosed), else 403.
pub(crate) fn check_owner(
    app: &App,
    ctx: &Ctx,
    action: &str,
    project: &str,
    id: &str,
) -> ApiResult<()> {
    match app.authorize(ctx, action, project) {
        Ok(()) => Ok(()),
        Err(_) if !ctx.is_admin() && project != ctx.project_id() => {
            Err(ApiError::server_not_found(id))
        }
        Err(e) => Err(e),
    }
}

// ------------------------------------------------------------------ create

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::BadRequest(msg.into())
}

/// The validated body of a create.
struct CreateRequest {
    name: String,
    flavor_ref: String,
    image_ref: String,
    availability_zone: Option<String>,
    min_count: i64,
    max_count: i64,
    key_name: Option<String>,
    metadata: Vec<(String, String)>,
    user_data: Option<String>,
    /// 2.74 `host` and `hypervisor_hostname`.
    requested_host: Option<String>,
    requested_node: Option<String>,
    /// `os:scheduler_hints.group`.
    group: Option<String>,
    /// 2.19 `description` (`None` below 2.19: the name).
    description: Option<String>,
    /// 2.90 `hostname`.
    hostname: Option<String>,
    /// 2.52 `tags`, sorted, distinct.
    tags: Vec<String>,
    /// `adminPass`.
    admin_pass: Option<String>,
    /// `return_reservation_id`.
    return_reservation_id: bool,
    /// The scheduler hints, each value a list (Nova's request spec).
    scheduler_hints: BTreeMap<String, Value>,
}

/// The keys of `server` in a create body at `ctx`'s microversion (Nova's
/// schema: anything else is a 400), and whether this region honours it.
fn create_key(ctx: &Ctx, key: &str) -> Option<bool> {
    let since = |v: u32| ctx.mv.at_least(v);
    match key {
        "name"
        | "imageRef"
        | "flavorRef"
        | "adminPass"
        | "metadata"
        | "networks"
        | "OS-DCF:diskConfig"
        | "availability_zone"
        | "config_drive"
        | "key_name"
        | "min_count"
        | "max_count"
        | "return_reservation_id"
        | "security_groups"
        | "user_data" => Some(true),
        "block_device_mapping_v2" => Some(true),
        "accessIPv4" | "accessIPv6" | "block_device_mapping" => Some(false),
        "personality" if !since(57) => Some(false),
        "description" if since(19) => Some(true),
        "tags" if since(52) => Some(true),
        "trusted_image_certificates" if since(63) => Some(false),
        "host" | "hypervisor_hostname" if since(74) => Some(true),
        "hostname" if since(90) => Some(true),
        _ => None,
    }
}

/// Nova's `sanitize_hostname`: Latin-1 only, at most 63 characters,
/// spaces, `_` and `.` as `-`, other non-word characters dropped,
/// lower case, no leading or trailing `.`/`-`.
pub(crate) fn sanitize_hostname(name: &str) -> String {
    let latin1: String = name
        .chars()
        .filter(|c| (*c as u32) < 256)
        .take(63)
        .collect();
    let mut out = String::with_capacity(latin1.len());
    for c in latin1.chars() {
        match c {
            ' ' | '_' | '.' => out.push('-'),
            c if c.is_alphanumeric() || c == '-' => out.extend(c.to_lowercase()),
            _ => {}
        }
    }
    out.trim_matches(['.', '-']).to_owned()
}

/// A value of one of the create keys this region accepts without acting
/// on it: valid as Nova's schema says, else a 400.
fn check_inert(key: &str, v: &Value) -> ApiResult<()> {
    let wrong = |why: &str| Err(invalid_field(key, v, why));
    match (key, v) {
        ("OS-DCF:diskConfig", Value::String(s)) if s == "AUTO" || s == "MANUAL" => Ok(()),
        ("OS-DCF:diskConfig", _) => {
            wrong(&format!("{} is not one of ['AUTO', 'MANUAL']", py_repr(v)))
        }
        ("config_drive", Value::Bool(false)) => Ok(()),
        ("config_drive", Value::String(s))
            if matches!(
                s.to_ascii_lowercase().as_str(),
                "false" | "0" | "no" | "off" | ""
            ) =>
        {
            Ok(())
        }
        ("config_drive", Value::Bool(true) | Value::String(_)) => Err(bad(
            "Config drives are not built in this region: boot without config_drive.",
        )),
        ("config_drive", _) => wrong(&not_of_type(v, "'boolean', 'string'")),
        ("return_reservation_id", Value::Bool(_)) => Ok(()),
        ("return_reservation_id", _) => wrong(&not_of_type(v, "'boolean'")),
        ("security_groups", Value::Array(items)) => {
            for g in items {
                match g.as_object().and_then(|o| {
                    (o.len() == 1).then(|| o.get("name").and_then(Value::as_str)).flatten()
                }) {
                    Some("default") => {}
                    Some(name) => {
                        return Err(bad(format!("Unable to find security_group with name or id '{name}'. This region has no network service: only the \"default\" group exists.")))
                    }
                    None => return wrong("each item must be an object with only 'name'"),
                }
            }
            Ok(())
        }
        ("security_groups", _) => wrong(&not_of_type(v, "'array'")),
        ("adminPass", Value::String(_)) => Ok(()),
        ("adminPass", _) => wrong(&not_of_type(v, "'string'")),
        _ => Ok(()),
    }
}

/// `block_device_mapping_v2` as clients send it for a boot from an image
/// (python-openstackclient always does): one entry, the image (source
/// `image`, destination `local`, boot index 0). Its image, or `None` for
/// an empty list. Anything else needs block storage or local disks this
/// region does not build: a 400 that says so.
fn local_image_bdm(items: &[Value]) -> ApiResult<Option<String>> {
    const NOT_BUILT: &str = "Block device mappings other than the boot image (boot from volume, swap, ephemeral disks) are not built in this region: this region has no block storage service";
    let [item] = items else {
        return if items.is_empty() {
            Ok(None)
        } else {
            Err(bad(NOT_BUILT))
        };
    };
    let Some(m) = item.as_object() else {
        return Err(invalid_field(
            "block_device_mapping_v2",
            item,
            &not_of_type(item, "'object'"),
        ));
    };
    let s = |k: &str| m.get(k).and_then(Value::as_str);
    let boot_index = match m.get("boot_index") {
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(v)) => v.parse().ok(),
        _ => None,
    };
    let image = s("uuid").filter(|u| is_uuid_like(u));
    match (
        s("source_type"),
        s("destination_type").unwrap_or("local"),
        boot_index,
        image,
    ) {
        (Some("image"), "local", Some(0), Some(u)) => Ok(Some(u.to_owned())),
        _ => Err(bad(NOT_BUILT)),
    }
}

/// 2.90's hostname (letters, digits and `-`, 2–63 characters, no `-` at
/// either end) or, from 2.94, a fully qualified name (`[a-zA-Z0-9-._]`,
/// 1–255).
fn hostname_ok(ctx: &Ctx, h: &str) -> bool {
    if ctx.mv.at_least(94) {
        (1..=255).contains(&h.len())
            && h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
    } else {
        (2..=63).contains(&h.len())
            && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !h.starts_with('-')
            && !h.ends_with('-')
    }
}

/// `az`, `az:host`, `az:host:node` and `az::node` (Nova's legacy forced
/// host and node; an empty zone is no zone): `(zone, host, node)`.
type ZoneHostNode = (Option<String>, Option<String>, Option<String>);
fn parse_availability_zone(z: Option<&str>) -> ApiResult<ZoneHostNode> {
    let Some(z) = z else {
        return Ok((None, None, None));
    };
    let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    let parts: Vec<&str> = z.split(':').collect();
    match parts[..] {
        [az] => Ok((some(az), None, None)),
        [az, host] => Ok((some(az), some(host), None)),
        [az, host, node] => Ok((some(az), some(host), some(node))),
        _ => Err(bad(
            "Invalid input received: Unable to parse availability_zone",
        )),
    }
}

/// Nova's limit on `user_data` (characters of its base64).
const MAX_USER_DATA: usize = 65535;

fn int_field(o: &serde_json::Map<String, Value>, key: &str) -> ApiResult<Option<i64>> {
    // Nova's `positive_integer`: an integer or a string, checked in its
    // schema's order (type, pattern `^[0-9]*$`, minimum, minLength).
    let Some(v) = o.get(key) else {
        return Ok(None);
    };
    match v {
        Value::Number(n) => n
            .as_i64()
            .filter(|v| *v >= 1)
            .map(Some)
            .ok_or_else(|| invalid_field(key, v, &format!("{n} is less than the minimum of 1"))),
        Value::String(s) if !s.bytes().all(|b| b.is_ascii_digit()) => Err(invalid_field(
            key,
            v,
            &format!("{} does not match '^[0-9]*$'", py_repr(v)),
        )),
        Value::String(s) if s.is_empty() => Err(invalid_field(key, v, "'' is too short")),
        Value::String(s) => match s.parse::<i64>() {
            Ok(n) if n >= 1 => Ok(Some(n)),
            // "0" passes Nova's schema (a string has no minimum); Nova
            // then refuses it further on. Ours says why here.
            _ => Err(invalid_field(
                key,
                v,
                &format!("{s} is less than the minimum of 1"),
            )),
        },
        v => Err(invalid_field(
            key,
            v,
            &not_of_type(v, "'integer', 'string'"),
        )),
    }
}

/// A list of requested networks: each entry in Nova's shape (`uuid`,
/// `port`, `fixed_ip`, `tag`, nothing else). This region has no network
/// service, so no network or port can be found: an entry naming one is
/// Nova's 400 for a network (port) it cannot find, saying why; an empty
/// list boots without networks, as `"none"` does.
fn check_requested_networks(items: &[Value]) -> ApiResult<()> {
    const NO_NETWORKS: &str =
        "This region has no network service: boot with networks \"none\" or \"auto\".";
    // The request's shape first (the schema), every entry.
    for item in items {
        let Some(m) = item.as_object() else {
            return Err(invalid_field(
                "networks",
                item,
                &not_of_type(item, "'object'"),
            ));
        };
        if let Some(k) = m
            .keys()
            .find(|k| !matches!(k.as_str(), "uuid" | "port" | "fixed_ip" | "tag"))
        {
            return Err(bad(format!("Invalid input for field/attribute networks. Additional properties are not allowed ('{k}' was unexpected)")));
        }
        for key in ["uuid", "port", "fixed_ip", "tag"] {
            match m.get(key) {
                None | Some(Value::String(_)) => {}
                Some(Value::Null) if key == "port" => {}
                Some(other) => {
                    return Err(invalid_field(key, other, &not_of_type(other, "'string'")))
                }
            }
        }
        if let Some(port) = m.get("port").and_then(Value::as_str) {
            if uuid::Uuid::parse_str(port).is_err() {
                return Err(bad(format!(
                    "Invalid input for field/attribute port. Value: {port}. {} is not a 'uuid'",
                    query_schema::python_repr(port)
                )));
            }
        }
    }
    // Then the networks and ports themselves: the first one named is not
    // found.
    let Some(first) = items.first().and_then(Value::as_object) else {
        return Ok(());
    };
    if let Some(port) = first.get("port").and_then(Value::as_str) {
        return Err(bad(format!(
            "Port id {port} could not be found. {NO_NETWORKS}"
        )));
    }
    match first.get("uuid").and_then(Value::as_str) {
        Some(net) if uuid::Uuid::parse_str(net).is_err() => Err(bad(format!(
            "Bad networks format: network uuid is not in proper format ({net})"
        ))),
        Some(net) => Err(bad(format!(
            "Network {net} could not be found. {NO_NETWORKS}"
        ))),
        None => Err(bad("Bad network format: missing 'uuid'")),
    }
}

/// A create's or update's body and its `server` object (taken out of the
/// body), or Nova's 400 when the body is not JSON, has no `server` (a
/// schema error at the root has no field prefix) or it is not an object.
fn server_object(body: &[u8]) -> ApiResult<(Value, serde_json::Map<String, Value>)> {
    let mut v: Value = serde_json::from_slice(body).map_err(|_| bad("Malformed request body"))?;
    match v.get_mut("server").map(Value::take) {
        None => Err(bad("'server' is a required property")),
        Some(Value::Object(o)) => Ok((v, o)),
        Some(other) => Err(invalid_field(
            "server",
            &other,
            &not_of_type(&other, "'object'"),
        )),
    }
}

fn parse_create(ctx: &Ctx, body: &[u8]) -> ApiResult<CreateRequest> {
    let (v, o) = server_object(body)?;
    let o = &o;
    if let Some(top) = v.as_object() {
        if let Some(k) = top.keys().find(|k| {
            !matches!(
                k.as_str(),
                "server" | "os:scheduler_hints" | "OS-SCH-HNT:scheduler_hints"
            )
        }) {
            return Err(bad(format!(
                "Additional properties are not allowed ('{k}' was unexpected)"
            )));
        }
    }
    // Errors about the `server` object itself (an unknown key, a required
    // one missing) leave out Nova's `Value: {…}`: Nova prints the whole
    // body there, `adminPass` and `user_data` included, into a message
    // that proxies and its own log keep.
    for (k, val) in o {
        match create_key(ctx, k) {
            None => {
                return Err(bad(format!("Invalid input for field/attribute server. Additional properties are not allowed ('{k}' was unexpected)")))
            }
            // Block devices and access addresses: empty is nothing.
            Some(false) if matches!(val, Value::Array(a) if a.is_empty()) => {}
            Some(false) => {
                let what = match k.as_str() {
                    "block_device_mapping" => "Block device mappings (boot from volume) are not built in this region: this region has no block storage service",
                    "accessIPv4" | "accessIPv6" => "Access addresses are not built in this region: this region has no network service",
                    "personality" => "File injection (personality) is not built in this region",
                    _ => "Trusted image certificates are not built in this region",
                };
                return Err(bad(format!("{what}; boot without '{k}'.")));
            }
            Some(true) => check_inert(k, val)?,
        }
    }
    let name = match o.get("name") {
        Some(v) => name_field(v)?,
        None => {
            return Err(bad(
                "Invalid input for field/attribute server. 'name' is a required property",
            ))
        }
    };
    let flavor_ref = match o.get("flavorRef") {
        // A flavor's link is its id (Nova's `get_id_from_href`).
        Some(Value::String(s)) if s.contains('/') => {
            let path = s
                .split(['?', '#'])
                .next()
                .unwrap_or("")
                .trim_end_matches('/');
            path.rsplit('/').next().unwrap_or("").to_owned()
        }
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::Number(n)) if n.is_i64() => n.to_string(),
        Some(v @ Value::String(_)) => return Err(invalid_field("flavorRef", v, "'' is too short")),
        Some(other) => {
            return Err(invalid_field(
                "flavorRef",
                other,
                &not_of_type(other, "'string', 'integer'"),
            ))
        }
        None => {
            return Err(bad(
                "Invalid input for field/attribute server. 'flavorRef' is a required property",
            ))
        }
    };
    let bdm_image = match o.get("block_device_mapping_v2") {
        None => None,
        Some(Value::Array(items)) => local_image_bdm(items)?,
        Some(other) => {
            return Err(invalid_field(
                "block_device_mapping_v2",
                other,
                &not_of_type(other, "'array'"),
            ))
        }
    };
    let image_ref = match (o.get("imageRef"), bdm_image) {
        (Some(Value::String(s)), Some(b)) if !s.is_empty() && *s != b => {
            return Err(bad(format!(
                "Block device mapping is invalid: the boot image {b} is not the imageRef {s}."
            )))
        }
        (Some(Value::String(s)), _) if !s.is_empty() => s.clone(),
        (None | Some(Value::String(_)), Some(b)) => b,
        (Some(Value::String(_)), None) => return Err(bad("Missing imageRef attribute")),
        // Nova's `image_id_or_empty_string` is a `oneOf`.
        (Some(other), _) => {
            return Err(invalid_field(
                "imageRef",
                other,
                &format!(
                    "{} is not valid under any of the given schemas",
                    py_repr(other)
                ),
            ))
        }
        // Boot from volume is not built: an image is required (Nova's
        // schema does not require the key; its create then says this).
        (None, None) => return Err(bad("Missing imageRef attribute")),
    };
    let availability_zone = match o.get("availability_zone") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(other) => {
            return Err(invalid_field(
                "availability_zone",
                other,
                &not_of_type(other, "'string'"),
            ))
        }
    };
    match o.get("networks") {
        // Before 2.37 `networks` is optional (and a string is tolerated).
        None if !ctx.mv.at_least(37) => {}
        Some(Value::String(_)) if !ctx.mv.at_least(37) => {}
        None => {
            return Err(bad(
                "Invalid input for field/attribute server. 'networks' is a required property",
            ))
        }
        Some(Value::String(s)) if s == "auto" || s == "none" => {}
        Some(Value::Array(items)) => check_requested_networks(items)?,
        Some(other) => {
            return Err(invalid_field(
                "networks",
                other,
                &format!(
                    "{} is not valid under any of the given schemas",
                    py_repr(other)
                ),
            ))
        }
    }
    let key_name = match o.get("key_name") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() && s.chars().count() <= 255 => Some(s.clone()),
        Some(v @ Value::String(s)) if s.is_empty() => {
            return Err(invalid_field("key_name", v, "'' is too short"))
        }
        Some(v @ Value::String(_)) => return Err(invalid_field("key_name", v, &too_long(v))),
        Some(other) => {
            return Err(invalid_field(
                "key_name",
                other,
                &not_of_type(other, "'string'"),
            ))
        }
    };
    let metadata = match o.get("metadata") {
        None => Vec::new(),
        Some(m) => super::server_metadata::validate_metadata(m, "metadata")?,
    };
    let user_data = match o.get("user_data") {
        None | Some(Value::Null) => None,
        Some(Value::String(u)) if u.chars().count() > MAX_USER_DATA => {
            return Err(invalid_field(
                "user_data",
                &o["user_data"],
                &too_long(&o["user_data"]),
            ))
        }
        Some(Value::String(u)) => {
            use base64::Engine;
            // As Nova (Python's non-validating decode): characters outside
            // the alphabet, line breaks of `base64`'s output among them,
            // are skipped; the padding must be right.
            let kept: String = u
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '='))
                .collect();
            if base64::engine::general_purpose::STANDARD
                .decode(kept)
                .is_err()
            {
                return Err(invalid_field(
                    "user_data",
                    &o["user_data"],
                    &format!("{} is not a 'base64'", query_schema::python_repr(u)),
                ));
            }
            Some(u.clone())
        }
        Some(other) => {
            return Err(invalid_field(
                "user_data",
                other,
                &not_of_type(other, "'string'"),
            ))
        }
    };
    // 2.74: a requested destination (admins; checked in `create`).
    let mut destination = [None, None];
    for (slot, key) in destination.iter_mut().zip(["host", "hypervisor_hostname"]) {
        match o.get(key) {
            None => {}
            Some(_) if !ctx.mv.at_least(74) => {
                return Err(bad(format!("Invalid input for field/attribute server. Additional properties are not allowed ('{key}' was unexpected)")))
            }
            Some(Value::String(v)) if (1..=255).contains(&v.chars().count()) => *slot = Some(v.clone()),
            Some(other) => return Err(fqdn_error(key, other)),
        }
    }
    let [requested_host, requested_node] = destination;
    let description = description_field(o)?.flatten();
    let hostname = match o.get("hostname") {
        None => None,
        Some(Value::String(h)) if hostname_ok(ctx, h) => Some(h.clone()),
        Some(other) => return Err(hostname_error(ctx, other)),
    };
    let mut tags = match o.get("tags") {
        None => Vec::new(),
        Some(Value::Array(list)) => list
            .iter()
            .map(super::server_metadata::validate_tag)
            .collect::<ApiResult<Vec<_>>>()?,
        Some(other) => return Err(invalid_field("tags", other, &not_of_type(other, "'array'"))),
    };
    tags.sort();
    tags.dedup();
    if tags.len() as i64 > super::server_metadata::MAX_TAGS {
        // Nova's `maxItems`, with the list as it was sent.
        let sent = &o["tags"];
        return Err(invalid_field("tags", sent, &too_long(sent)));
    }
    let min_count = int_field(o, "min_count")?.unwrap_or(1);
    let max_count = int_field(o, "max_count")?.unwrap_or(min_count);
    if min_count > max_count {
        return Err(bad("min_count must be <= max_count"));
    }
    if max_count > 1000 {
        return Err(bad("max_count is too large"));
    }
    if hostname.is_some() && max_count > 1 {
        return Err(bad(
            "Unable to allocate a single hostname to multiple instances",
        ));
    }
    let group = super::server_groups::group_hint(&v)?;
    Ok(CreateRequest {
        description: if ctx.mv.at_least(19) {
            description
        } else {
            Some(name.clone())
        },
        hostname,
        tags,
        admin_pass: o
            .get("adminPass")
            .and_then(Value::as_str)
            .map(str::to_owned),
        return_reservation_id: o.get("return_reservation_id") == Some(&Value::Bool(true)),
        scheduler_hints: v
            .get("os:scheduler_hints")
            .or_else(|| v.get("OS-SCH-HNT:scheduler_hints"))
            .and_then(Value::as_object)
            .map(|h| {
                h.iter()
                    .filter(|(k, _)| !k.starts_with("_nova"))
                    .map(|(k, v)| match v {
                        Value::Array(_) => (k.clone(), v.clone()),
                        other => (k.clone(), Value::Array(vec![other.clone()])),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        name,
        flavor_ref,
        image_ref,
        availability_zone,
        min_count,
        max_count,
        key_name,
        metadata,
        user_data,
        requested_host,
        requested_node,
        group,
    })
}

/// `POST /servers`. Quotas: metadata_items, and instances/cores/ram for
/// all of `max_count` (all or none), then with a `group` hint
/// server_group_members for all of them, checked where the builds are
/// written.
pub async fn create(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    body: Bytes,
) -> ApiResult<Response> {
    app.authorize(&ctx, "os_compute_api:servers:create", ctx.project_id())?;
    let req = parse_create(&ctx, &body)?;
    // The flavor, its extra specs and the project's quotas: one statement.
    let reads = app
        .db
        .flavor_for_create(&req.flavor_ref, ctx.project_id(), ctx.is_admin())
        .await?
        .filter(|r| !r.flavor.disabled)
        // Nova's FlavorNotFound (a 400 at create). For a disabled flavor
        // Nova names the flavor's database id; the id asked for is named
        // here, as for one that does not exist.
        .ok_or_else(|| bad(format!("Flavor {} could not be found.", req.flavor_ref)))?;
    let (flavor, extra_specs) = (reads.flavor, reads.extra_specs);
    // A flavor without a root disk boots only volume-backed servers
    // (not built here), except for whom the policy allows (admins), as
    // Nova.
    if flavor.root_gb == 0
        && app
            .authorize(
                &ctx,
                "os_compute_api:servers:create:zero_disk_flavor",
                ctx.project_id(),
            )
            .is_err()
    {
        return Err(ApiError::Forbidden(
            "Only volume-backed servers are allowed for flavors with zero disk.".into(),
        ));
    }
    if let Some(k) = &req.key_name {
        if app.db.keypair(ctx.user_id(), k).await?.is_none() {
            return Err(bad("Invalid key_name provided."));
        }
    }
    let (limits, group_members_limit) =
        super::quotas::create_limits(&app, reads.quotas, req.metadata.len())?;
    let (image_ref, image_props, recorded_props) = match &app.images {
        Some(images) => {
            let needs = super::images::BootNeeds {
                claims: &ctx.claims,
                ram_mb: flavor.memory_mb.max(0) as u64,
                disk_gb: flavor.root_gb.max(0) as u64,
            };
            let img = images.resolve(&req.image_ref, needs).await?;
            let props = ImageProps::from_image(&img.properties).map_err(bad)?;
            let recorded = super::images::recorded_properties(&img.properties);
            (img.id, props, recorded)
        }
        None if is_uuid_like(&req.image_ref) => (
            req.image_ref.clone(),
            ImageProps::default(),
            BTreeMap::new(),
        ),
        // No image service: only an id will do, as Nova's schema says
        // (`image_id_or_empty_string`, a `oneOf`).
        None => {
            return Err(invalid_field(
                "imageRef",
                &Value::String(req.image_ref.clone()),
                &format!(
                    "{} is not valid under any of the given schemas",
                    query_schema::python_repr(&req.image_ref)
                ),
            ))
        }
    };
    let (availability_zone, force_host, force_node) =
        parse_availability_zone(req.availability_zone.as_deref())?;
    if force_host.is_some() || force_node.is_some() {
        app.authorize(
            &ctx,
            "os_compute_api:servers:create:forced_host",
            ctx.project_id(),
        )?;
    }
    if req.requested_host.is_some() || req.requested_node.is_some() {
        app.authorize(
            &ctx,
            "compute:servers:create:requested_destination",
            ctx.project_id(),
        )?;
        if force_host.is_some() || force_node.is_some() {
            return Err(bad("One mechanism with host and/or hypervisor_hostname and another mechanism with zone:host:node are mutually exclusive."));
        }
    }
    let hosts = if availability_zone.is_some()
        || req.requested_host.is_some()
        || req.requested_node.is_some()
    {
        Some(app.conductor().scheduler().host_state().get().await?)
    } else {
        None
    };
    if let (Some(hosts), Some(az)) = (&hosts, &availability_zone) {
        // Nova: a zone is available when one of its compute services is
        // enabled; a forced host skips the check.
        if force_host.is_none() && !hosts.zone_available(az) {
            return Err(bad("The requested availability zone is not available"));
        }
    }
    if let Some(hosts) = &hosts {
        if req.requested_host.is_some() || req.requested_node.is_some() {
            let (host, node) = (req.requested_host.as_deref(), req.requested_node.as_deref());
            if hosts.named(host, node).next().is_none() {
                let name = host.or(node).unwrap_or_default();
                return Err(bad(format!("Compute host {name} could not be found.")));
            }
        }
    }
    let group = match &req.group {
        Some(g) => Some(super::server_groups::for_boot(&app, &ctx, g).await?),
        None => None,
    };
    let created_at = Utc::now();
    let reservation_id = format!("r-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    // Nova's min_count: when the quota leaves room for fewer than
    // max_count but at least min_count servers, that many are created
    // (the count is checked again, all or none, where the builds are
    // written).
    let mut n = req.max_count;
    if req.min_count < n && !limits.unlimited() {
        let used = app.db.instance_usage(ctx.project_id()).await?;
        let fit = limits.fit(used, (1, flavor.vcpus, flavor.memory_mb));
        if fit >= req.min_count {
            n = n.min(fit);
        }
    }
    let uuids: Vec<String> = (0..n).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    let global = format!("req-{}", uuid::Uuid::new_v4());
    let builds: Vec<(BuildInstance, RequestSpec)> = uuids
        .iter()
        .enumerate()
        .map(|(i, u)| {
            let name = if n > 1 {
                format!("{}-{}", req.name, i + 1)
            } else {
                req.name.clone()
            };
            // Nova's hostname: the one asked for (2.90), else the name's,
            // indexed as the names are.
            let hostname =
                req.hostname
                    .clone()
                    .unwrap_or_else(|| match sanitize_hostname(&req.name) {
                        h if h.is_empty() => format!("Server-{u}"),
                        h if n > 1 => format!("{h}-{}", i + 1),
                        h => h,
                    });
            (
                BuildInstance {
                    uuid: u.clone(),
                    project_id: ctx.project_id().to_owned(),
                    user_id: ctx.user_id().to_owned(),
                    display_name: name,
                    flavor: flavor.to_instance_flavor(),
                    image_ref: image_ref.clone(),
                    availability_zone: availability_zone.clone(),
                    created_at,
                    reservation_id: reservation_id.clone(),
                    launch_index: i as i64,
                    key_name: req.key_name.clone(),
                    metadata: req.metadata.clone(),
                    user_data: req.user_data.clone(),
                    description: req.description.clone(),
                    hostname: Some(hostname),
                    tags: req.tags.clone(),
                    image_properties: recorded_props.clone(),
                },
                RequestSpec {
                    instance_uuid: u.clone(),
                    instance_uuids: uuids.clone(),
                    project_id: ctx.project_id().to_owned(),
                    user_id: ctx.user_id().to_owned(),
                    flavor: flavor.to_instance_flavor(),
                    image_ref: image_ref.clone(),
                    availability_zone: availability_zone.clone(),
                    force_host: force_host.clone(),
                    force_node: force_node.clone(),
                    requested_host: req.requested_host.clone(),
                    requested_node: req.requested_node.clone(),
                    request_id: ctx.request_id.clone(),
                    global_request_id: global.clone(),
                    key_name: req.key_name.clone(),
                    in_group: Some(req.group.is_some()),
                    image_properties: image_props.clone(),
                    flavor_extra_specs: Some(extra_specs.clone()),
                    scheduler_hints: req.scheduler_hints.clone(),
                    recorded_image_properties: recorded_props.clone(),
                },
            )
        })
        .collect();
    // The servers join their group in the transaction that writes the
    // builds (the scheduler, started after it, finds them in the group),
    // within the group's `server_group_members` limit.
    let join = group.as_ref().map(|g| GroupJoin {
        id: g.id,
        uuid: g.uuid.clone(),
        limit: group_members_limit,
    });
    app.db
        .create_builds(&builds, Some(&limits), join.as_ref())
        .await?;
    let conductor = app.conductor().clone();
    tokio::spawn(async move { conductor.schedule_and_build(builds).await });
    let id = &uuids[0];
    if req.return_reservation_id {
        return Ok((
            StatusCode::ACCEPTED,
            Json(json!({ "reservation_id": reservation_id })),
        )
            .into_response());
    }
    let admin_pass: String = req.admin_pass.clone().unwrap_or_else(|| {
        use rand::Rng;
        let mut r = rand::thread_rng();
        const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
        (0..12)
            .map(|_| ALPHABET[r.gen_range(0..ALPHABET.len())] as char)
            .collect()
    });
    let body = json!({"server": {
        "id": id,
        "links": links(&app, "servers", id),
        "adminPass": admin_pass,
        "OS-DCF:diskConfig": "MANUAL",
        "security_groups": [{"name": "default"}],
    }});
    let location = format!("{}/v2.1/servers/{id}", app.public_url());
    Ok((
        StatusCode::ACCEPTED,
        [(header::LOCATION, location)],
        Json(body),
    )
        .into_response())
}

// -------------------------------------------------------------------- list

pub(crate) fn parse_query(raw: Option<&str>) -> HashMap<String, String> {
    let mut m = HashMap::new();
    for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        m.insert(decode(k), decode(v));
    }
    m
}

pub(crate) fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b[i], hex) {
            (b'+', _) => out.push(b' '),
            (b'%', Some(v)) => {
                out.push(v);
                i += 2;
            }
            (c, _) => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

// ---------------------------------------------------------- show / update

/// `GET /servers/{id}`. A server whose cell is down is, from 2.69, the
/// partial record Nova builds from the API database (its mapping and
/// request spec); before 2.69 the cell's error.
pub async fn show(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    query_schema::EMPTY_V2102.check(ctx.mv, raw.as_deref())?;
    let mut s = match locate_with(&app, &ctx, &id, "os_compute_api:servers:show", false).await? {
        Located::Found(Found::Cell(_, mut s)) => {
            // Landed here outside any group: the key name was remembered
            // and there is no group; otherwise both are read (one
            // statement), and from 2.98 always (the image's properties
            // change with a rebuild). The zone comes from the hosts' zone
            // cache, as in lists.
            let remembered = if ctx.mv.at_least(IMAGE_PROPERTIES_MV) {
                None
            } else {
                app.db.landed_key_name(&s.uuid)
            };
            let groups = match remembered {
                Some(key_name) => {
                    if s.key_name.is_none() {
                        s.key_name = key_name;
                    }
                    Vec::new()
                }
                None => {
                    let x = app.db.show_extras(&s.uuid).await?;
                    s.apply_spec(x.spec);
                    x.group_uuid.into_iter().collect()
                }
            };
            current_zones(&app, &ctx, std::slice::from_mut(&mut s)).await?;
            let mut body = detail_view(&app, &ctx, &s);
            put_server_groups(&ctx, groups, &mut body);
            return Ok(Json(json!({ "server": body })));
        }
        Located::Found(Found::Build(s)) => s,
        Located::Down(m, d) => {
            if !ctx.mv.at_least(PARTIAL_RECORDS_MV) {
                return Err(ApiError::cell_down(d));
            }
            let partial = partial_for_show(&app, &ctx, m).await?;
            let base = app.public_url();
            let view = PartialView {
                base: &base,
                p: &partial,
                kind: PartialKind::Show { ctx: &ctx },
            };
            return Ok(Json(json!({ "server": view })));
        }
    };
    current_zones(&app, &ctx, std::slice::from_mut(&mut s)).await?;
    let mut body = detail_view(&app, &ctx, &s);
    add_server_groups(&app, &ctx, &s.uuid, &mut body).await?;
    Ok(Json(json!({ "server": body })))
}

/// `server_groups` (2.71) of a server shown alone: the uuid of its group,
/// if any, as upstream.
pub(crate) async fn add_server_groups(
    app: &App,
    ctx: &Ctx,
    id: &str,
    body: &mut Value,
) -> ApiResult<()> {
    if !ctx.mv.at_least(71) {
        return Ok(());
    }
    let groups = server_groups_of(app, id).await?;
    put_server_groups(ctx, groups, body);
    Ok(())
}

/// Puts `server_groups` (2.71) on a server's body.
fn put_server_groups(ctx: &Ctx, groups: Vec<String>, body: &mut Value) {
    if !ctx.mv.at_least(71) {
        return;
    }
    if let Some(o) = body.as_object_mut() {
        o.insert("server_groups".into(), json!(groups));
    }
}

async fn server_groups_of(app: &App, id: &str) -> ApiResult<Vec<String>> {
    Ok(app
        .db
        .api()
        .instance_server_group(id)
        .await?
        .map(|g| g.uuid)
        .into_iter()
        .collect())
}

/// The partial record of a server in a down cell for `GET /servers/{id}`:
/// its mapping and request spec (flavor, image, requested zone, user); a
/// server being deleted, or without a request spec, is not found, as
/// upstream.
async fn partial_for_show(app: &App, ctx: &Ctx, m: MappingRow) -> ApiResult<PartialServer> {
    if m.queued_for_delete {
        return Err(ApiError::server_not_found(&m.instance_uuid));
    }
    let Some(spec) = app.db.request_spec(&m.instance_uuid).await? else {
        return Err(ApiError::server_not_found(&m.instance_uuid));
    };
    let server_groups = if ctx.mv.at_least(71) {
        Some(server_groups_of(app, &m.instance_uuid).await?)
    } else {
        None
    };
    Ok(PartialServer {
        uuid: m.instance_uuid,
        project_id: m.project_id,
        created_at: m.created_at,
        show: Some(PartialShow {
            user_id: Some(spec.user_id).filter(|u| !u.is_empty()),
            flavor: spec.flavor,
            image_ref: spec.image_ref,
            flavor_extra_specs: spec.flavor_extra_specs,
            availability_zone: spec.availability_zone,
            server_groups,
            image_properties: spec.recorded_image_properties,
        }),
    })
}

/// A server's `name` as Nova's `parameter_types.name` has it, checked in
/// its order: a string (type), printable without leading or trailing
/// whitespace (its `name` format, whose failure is Nova's `InvalidName`
/// message without the field prefix), 1–255 characters.
pub(crate) fn name_field(v: &Value) -> ApiResult<String> {
    let Value::String(s) = v else {
        return Err(invalid_field("name", v, &not_of_type(v, "'string'")));
    };
    if s.trim() != s || s.chars().any(char::is_control) {
        return Err(bad(
            "An invalid 'name' value was provided. The name must be: printable characters. \
             Can not start or end with whitespace.",
        ));
    }
    if s.is_empty() {
        return Err(invalid_field("name", v, "'' is too short"));
    }
    if s.chars().count() > 255 {
        return Err(invalid_field("name", v, &too_long(v)));
    }
    Ok(s.clone())
}

/// Nova's schema message for a `hostname` (2.90, `parameter_types.hostname`;
/// 2.94, `fqdn`) that [`hostname_ok`] refuses, checked in the schema's
/// order: type, pattern, minLength, maxLength.
fn hostname_error(ctx: &Ctx, v: &Value) -> ApiError {
    if ctx.mv.at_least(94) {
        return fqdn_error("hostname", v);
    }
    let Value::String(h) = v else {
        return invalid_field("hostname", v, &not_of_type(v, "'string'"));
    };
    let r = py_repr(v);
    let pattern_ok = h.len() >= 2
        && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !h.starts_with('-')
        && !h.ends_with('-');
    let why = if !pattern_ok {
        format!("{r} does not match '^[a-zA-Z0-9]+[a-zA-Z0-9-]*[a-zA-Z0-9]+$'")
    } else {
        format!("{r} is too long")
    };
    invalid_field("hostname", v, &why)
}

/// Nova's schema message for a value of `parameter_types.fqdn` (2.74's
/// `host` and `hypervisor_hostname`, 2.94's `hostname`) that is refused.
fn fqdn_error(key: &str, v: &Value) -> ApiError {
    let Value::String(h) = v else {
        return invalid_field(key, v, &not_of_type(v, "'string'"));
    };
    let r = py_repr(v);
    let why = if !h
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
    {
        format!("{r} does not match '^[a-zA-Z0-9-._]*$'")
    } else if h.is_empty() {
        format!("{r} is too short")
    } else {
        format!("{r} is too long")
    };
    invalid_field(key, v, &why)
}

/// The `description` of a create or update body as Nova's schema has it
/// (2.19): `None` absent, `Some(None)` null, else a string of at most 255
/// characters without control characters other than line breaks and tabs.
pub(crate) fn description_field(
    o: &serde_json::Map<String, Value>,
) -> ApiResult<Option<Option<String>>> {
    match o.get("description") {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(None)),
        Some(Value::String(d)) if d.chars().count() > 255 => Err(invalid_field(
            "description",
            &o["description"],
            &too_long(&o["description"]),
        )),
        Some(Value::String(d))
            if d.chars()
                .any(|c| c.is_control() && c != '\n' && c != '\r' && c != '\t') =>
        {
            // Nova's message would quote its pattern, a regular expression
            // of every printable Unicode range (thousands of characters):
            // it is named instead.
            Err(invalid_field(
                "description",
                &o["description"],
                &format!(
                    "{} does not match the description pattern",
                    query_schema::python_repr(d)
                ),
            ))
        }
        Some(Value::String(d)) => Ok(Some(Some(d.clone()))),
        Some(other) => Err(invalid_field(
            "description",
            other,
            &not_of_type(other, "'string', 'null'"),
        )),
    }
}

/// `PUT /servers/{id}`: name, description, hostname; on a build not
/// landed yet, its build request (the landing carries the edits over).
pub async fn update(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let (_, o) = server_object(&body)?;
    let o = &o;
    // Nova's update schema: `name` (2.1), `description` (2.19, null
    // clears it), `hostname` (2.90); `OS-DCF:diskConfig`, `accessIPv4/6`
    // accepted as upstream's schema has them.
    for k in o.keys() {
        let known = match k.as_str() {
            "name" | "OS-DCF:diskConfig" => true,
            "accessIPv4" | "accessIPv6" => {
                return Err(bad(format!("Access addresses are not built in this region: this region has no network service; update without '{k}'.")))
            }
            "description" => ctx.mv.at_least(19),
            "hostname" => ctx.mv.at_least(90),
            _ => false,
        };
        if !known {
            return Err(bad(format!("Invalid input for field/attribute server. Additional properties are not allowed ('{k}' was unexpected)")));
        }
        if k == "OS-DCF:diskConfig" {
            check_inert(k, &o[k])?;
        }
    }
    let name = o.get("name").map(name_field).transpose()?;
    let description = description_field(o)?;
    let hostname = match o.get("hostname") {
        None => None,
        Some(Value::String(h)) if hostname_ok(&ctx, h) => Some(h.clone()),
        Some(other) => return Err(hostname_error(&ctx, other)),
    };
    // Two tries: the build may land between the find and the edit (the
    // edit then finds no build request, and the next find the instance).
    for _ in 0..2 {
        match find(&app, &ctx, &id, "os_compute_api:servers:update").await? {
            Found::Build(_) => {
                let Some(b) = app
                    .db
                    .edit_build(
                        &id,
                        name.as_deref(),
                        description.as_ref().map(Option::as_deref),
                        hostname.as_deref(),
                    )
                    .await?
                else {
                    continue;
                };
                let s = Server::from_build(&b.instance);
                let mut body = detail_view(&app, &ctx, &s);
                add_server_groups(&app, &ctx, &s.uuid, &mut body).await?;
                return Ok(Json(json!({ "server": body })));
            }
            Found::Cell(cell, mut s) => {
                current_zones(&app, &ctx, std::slice::from_mut(&mut s)).await?;
                if name.is_some() || description.is_some() || hostname.is_some() {
                    let db = app.cells.db(&cell).await?;
                    let changed = db
                        .api_update(
                            &id,
                            name.as_deref(),
                            description.as_ref().map(Option::as_deref),
                            hostname.as_deref(),
                        )
                        .await?;
                    if !changed {
                        return Err(ApiError::server_not_found(&id));
                    }
                    if let Some(n) = name {
                        s.name = n;
                    }
                    if let Some(d) = description {
                        s.description = d;
                    }
                    if let Some(h) = hostname {
                        s.hostname = Some(h);
                    }
                    s.updated_at = Some(Utc::now());
                }
                let mut body = detail_view(&app, &ctx, &s);
                add_server_groups(&app, &ctx, &s.uuid, &mut body).await?;
                return Ok(Json(json!({ "server": body })));
            }
        }
    }
    Err(ApiError::server_not_found(&id))
}

// ------------------------------------------------------------------ delete

/// `DELETE /servers/{id}`: a build not scheduled yet is simply deleted; an
/// instance that never reached a host is deleted in its cell; otherwise
/// task_state `deleting` and `terminate_instance` to its compute (the
/// compute and the cell conductor finish the delete and free the claim).
pub async fn delete(
    State(app): State<App>,
    Extension(ctx): Extension<Ctx>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    delete_server(&app, &ctx, &id, "os_compute_api:servers:delete").await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The delete (also `forceDelete`, checked with its own `rule`). A locked
/// server is refused to non-admins (409), as upstream.
pub(crate) async fn delete_server(app: &App, ctx: &Ctx, id: &str, rule: &str) -> ApiResult<()> {
    let id = id.to_owned();
    for _ in 0..2 {
        match find_with(app, ctx, &id, rule, false).await? {
            Found::Build(_) => {
                if app.db.delete_build(&id).await? {
                    return Ok(());
                }
                // It landed in a cell meanwhile: delete it there.
                continue;
            }
            Found::Cell(cell, s) => {
                if s.locked && !ctx.is_admin() {
                    return Err(ApiError::Conflict(format!("Instance {id} is locked")));
                }
                let db = app.cells.db(&cell).await?;
                let global = format!("req-{}", uuid::Uuid::new_v4());
                let host = match s.host.as_deref() {
                    Some(h) if compute_up(app, &db, h).await? => h,
                    // No host, or its compute cannot do it: the API does.
                    other => {
                        return local_delete(app, ctx, &db, &s, other, global).await;
                    }
                };
                if !db
                    .api_set_deleting(&id, &ctx.request_id, &global, ctx.user_id(), &s.project_id)
                    .await?
                {
                    return Err(ApiError::server_not_found(&id));
                }
                app.db.queue_for_delete(&id).await?;
                let bus = app.cells.bus(&cell).await?;
                let ids = RequestIds {
                    request_id: ctx.request_id.clone(),
                    global_request_id: global,
                };
                rpc::cast(
                    bus.as_ref(),
                    &rpc::compute_queue(host),
                    method::TERMINATE_INSTANCE,
                    &rpc::TerminateInstance {
                        instance_uuid: id.clone(),
                        request_id: ids.request_id.clone(),
                        global_request_id: ids.global_request_id.clone(),
                    },
                    &ids,
                )
                .await
                .map_err(ApiError::internal)?;
                return Ok(());
            }
        }
    }
    Err(ApiError::server_not_found(&id))
}

/// Whether the compute service of `host` can take a delete: it exists, is
/// not forced down and heartbeated within the service down time (read
/// from the cell database now, not from the scheduler's cached host map).
/// A service that is gone counts as down, as upstream.
async fn compute_up(app: &App, db: &cell_mapping::CellDb, host: &str) -> ApiResult<bool> {
    let services = db
        .services_list(Some(host), Some(super::services::COMPUTE_BINARY))
        .await?;
    Ok(services
        .first()
        .is_some_and(|sv| super::services::is_up(app, sv.forced_down, sv.last_seen_up)))
}

/// Upstream's "local delete": the instance has no host, or its compute
/// service is down, so nobody would consume a `terminate_instance`. The
/// API queues the mapping for delete (its quota usage is released, as on
/// the normal path), then marks the instance deleted in its cell with the
/// `delete` action and its `api_local_delete` event in one transaction,
/// then removes the allocations. Each step can be repeated: a failure
/// before the cell write answers 500 and a retried DELETE does it all
/// again; a placement failure after it does not fail the delete (the
/// instance is gone) but is retried in the background, then logged as an
/// error naming the consumer left to remove.
async fn local_delete(
    app: &App,
    ctx: &Ctx,
    db: &cell_mapping::CellDb,
    s: &Server,
    host: Option<&str>,
    global_request_id: String,
) -> ApiResult<()> {
    let id = &s.uuid;
    app.db.queue_for_delete(id).await?;
    let record = cell_mapping::db::server_actions::ActionRecord {
        action: rpc::action::DELETE.to_owned(),
        request_id: ctx.request_id.clone(),
        global_request_id,
        user_id: ctx.user_id().to_owned(),
        project_id: s.project_id.clone(),
    };
    if !db.api_local_delete(id, &record, host).await? {
        return Err(ApiError::server_not_found(id));
    }
    tracing::info!(instance = %id, host = host.unwrap_or(""), "deleted locally: no compute to do it");
    let placement = app.conductor().scheduler().placement().clone();
    if let Err(e) = placement.delete_allocations(id).await {
        tracing::warn!(instance = %id, error = %e, "could not remove allocations; retrying in the background");
        let id = id.clone();
        tokio::spawn(async move {
            remove_allocations(placement.as_ref(), &id, &ALLOCATION_RETRIES).await;
        });
    }
    Ok(())
}

/// Waits before each background retry of an allocation removal.
const ALLOCATION_RETRIES: [std::time::Duration; 6] = [
    std::time::Duration::from_secs(1),
    std::time::Duration::from_secs(2),
    std::time::Duration::from_secs(4),
    std::time::Duration::from_secs(8),
    std::time::Duration::from_secs(16),
    std::time::Duration::from_secs(32),
];

/// Retries `DELETE /allocations/{consumer}` after each of `waits`; true
/// once removed. When every try failed the leak is logged as an error
/// naming the consumer (an operator removes it with `openstack resource
/// provider allocation delete <uuid>`).
async fn remove_allocations(
    placement: &dyn crate::scheduler::placement::SchedulerPlacement,
    consumer: &str,
    waits: &[std::time::Duration],
) -> bool {
    let mut last = String::new();
    for w in waits {
        tokio::time::sleep(*w).await;
        match placement.delete_allocations(consumer).await {
            Ok(()) => {
                tracing::info!(instance = %consumer, "allocations of a locally deleted instance removed");
                return true;
            }
            Err(e) => last = e.to_string(),
        }
    }
    tracing::error!(
        instance = %consumer,
        error = %last,
        "allocations of a locally deleted instance left in placement: remove them with \
         `openstack resource provider allocation delete {consumer}`"
    );
    false
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    /// `hostId` is Nova's: SHA-224 of project id + host in hex (values from
    /// Python's `hashlib.sha224((project_id + host).encode()).hexdigest()`),
    /// and empty without a host.
    #[test]
    fn host_id_is_novas_sha224_of_project_and_host() {
        use super::host_id;
        assert_eq!(
            host_id("6f70656e737461636b20726f636b73", Some("compute-1")),
            "a208c16506d3aba58f2a961b2d247301d00affce85556f8fc9963dfb"
        );
        assert_eq!(
            host_id("p1", Some("c1-host1")),
            "3ea36aff9c31dbed2f4c497d0363ac9e5b75bc1e1fa0c0a48c59b5dc"
        );
        assert_ne!(
            host_id("p1", Some("c1-host2")),
            host_id("p1", Some("c1-host1"))
        );
        assert_ne!(
            host_id("p2", Some("c1-host1")),
            host_id("p1", Some("c1-host1"))
        );
        assert_eq!(host_id("p1", None), "");
        assert_eq!(host_id("p1", Some("")), "");
    }

    /// The pieces written straight into an answer equal what `format!` and
    /// chrono's formatting gave, escaping included.
    #[test]
    fn written_pieces_match_the_formatted_strings() {
        use chrono::TimeZone;
        for (secs, nanos) in [
            (0, 0),
            (1_733_097_600, 123_456_789),
            (4_102_444_799, 999_999),
        ] {
            let t = chrono::Utc.timestamp_opt(secs, nanos).unwrap();
            assert_eq!(
                serde_json::to_string(&super::Microseconds(t)).unwrap(),
                serde_json::to_string(&t.format("%Y-%m-%dT%H:%M:%S%.6f").to_string()).unwrap()
            );
        }
        let (base, id) = ("http://127.0.0.1:8774", "a\"b");
        assert_eq!(
            serde_json::to_string(&super::Concat(&[base, "/v2.1/", "servers", "/", id])).unwrap(),
            serde_json::to_string(&format!("{base}/v2.1/servers/{id}")).unwrap()
        );
    }

    use super::remove_allocations;
    use crate::scheduler::placement::{
        AllocationRequest, BoxFuture, Candidates, PlacementError, ProviderAggregates, Resources,
        SchedulerPlacement,
    };

    /// Placement that answers 503 to the first `failures` allocation
    /// removals, then removes; counts the calls.
    #[derive(Debug)]
    struct Flaky {
        state: Mutex<(usize, usize)>,
    }

    impl Flaky {
        fn new(failures: usize) -> Self {
            Flaky {
                state: Mutex::new((failures, 0)),
            }
        }
        fn calls(&self) -> usize {
            self.state.lock().unwrap().1
        }
    }

    impl SchedulerPlacement for Flaky {
        fn candidates<'a>(
            &'a self,
            _: &'a Resources,
            _: usize,
            _: Option<&'a str>,
        ) -> BoxFuture<'a, Result<Candidates, PlacementError>> {
            Box::pin(async { Ok(Candidates::default()) })
        }
        fn claim<'a>(
            &'a self,
            _: &'a str,
            _: &'a AllocationRequest,
            _: &'a str,
            _: &'a str,
        ) -> BoxFuture<'a, Result<bool, PlacementError>> {
            Box::pin(async { Ok(true) })
        }
        fn delete_allocations<'a>(
            &'a self,
            _: &'a str,
        ) -> BoxFuture<'a, Result<(), PlacementError>> {
            Box::pin(async move {
                let mut s = self.state.lock().unwrap();
                s.1 += 1;
                if s.0 > 0 {
                    s.0 -= 1;
                    return Err(PlacementError::Status {
                        what: "DELETE /allocations",
                        status: 503,
                        body: String::new(),
                    });
                }
                Ok(())
            })
        }
        fn provider_aggregates<'a>(
            &'a self,
            _: &'a str,
        ) -> BoxFuture<'a, Result<Option<ProviderAggregates>, PlacementError>> {
            Box::pin(async { Ok(None) })
        }
        fn set_provider_aggregates<'a>(
            &'a self,
            _: &'a str,
            _: &'a ProviderAggregates,
        ) -> BoxFuture<'a, Result<bool, PlacementError>> {
            Box::pin(async { Ok(true) })
        }
        fn delete_provider<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<(), PlacementError>> {
            Box::pin(async { Ok(()) })
        }
    }

    const WAITS: [Duration; 3] = [Duration::from_millis(1); 3];

    #[tokio::test]
    async fn a_failed_allocation_removal_is_retried_until_placement_answers() {
        let p = Flaky::new(2);
        assert!(remove_allocations(&p, "i-1", &WAITS).await);
        assert_eq!(p.calls(), 3);
    }

    #[tokio::test]
    async fn allocation_removal_gives_up_after_the_last_retry() {
        let p = Flaky::new(10);
        assert!(!remove_allocations(&p, "i-1", &WAITS).await);
        assert_eq!(p.calls(), WAITS.len());
    }
}
